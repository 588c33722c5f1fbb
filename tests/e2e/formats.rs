//! The exact texts CONTRACT §4 spells out, pinned over stdio: cat -n rows, long-line split rows,
//! the empty-file reminder, the offset-past-end error, the paging hint, the 80,000-character cap,
//! glob's 1,000-file cap, grep's output modes and paging, and path errors.

use serde_json::json;

use crate::assert_text_eq;
use crate::support::stdio::StdioClient;

const CAP: usize = 80_000;
const TRUNCATION: &str = "... [results truncated, try being more specific with your parameters]";

fn client_with(files: &[(&str, String)]) -> StdioClient {
    let mut c = StdioClient::start(&[]);
    for (path, content) in files {
        c.ok("write_file", json!({"file_path": path, "content": content}));
    }
    c
}

#[test]
fn long_lines_are_split_into_numbered_continuation_rows() {
    let long = format!(
        "{}{}{}",
        "a".repeat(5000),
        "b".repeat(5000),
        "c".repeat(2000)
    );
    let mut c = client_with(&[("/long.txt", format!("short\n{long}\nend\n"))]);
    let expected = format!(
        "     1\tshort\n     2\t{}\n   2.1\t{}\n   2.2\t{}\n     3\tend",
        "a".repeat(5000),
        "b".repeat(5000),
        "c".repeat(2000)
    );
    assert_text_eq!(
        expected,
        c.ok("read_file", json!({"file_path": "/long.txt"}))
    );
    // `limit` counts source lines, not rows.
    let two = c.ok(
        "read_file",
        json!({"file_path": "/long.txt", "offset": 1, "limit": 1}),
    );
    assert!(two.starts_with("     2\taaaa"), "{}", &two[..20]);
    assert!(
        two.ends_with("\n\n... 1 more line not shown. Call read_file with offset=2 to continue.")
    );
}

#[test]
fn empty_file_gives_the_system_reminder() {
    let mut c = client_with(&[("/empty.txt", String::new()), ("/blank.txt", "\n\n".into())]);
    assert_text_eq!(
        "System reminder: File exists but has empty contents",
        c.ok("read_file", json!({"file_path": "/empty.txt"}))
    );
    assert_text_eq!(
        "System reminder: File exists but has empty contents",
        c.ok("read_file", json!({"file_path": "/blank.txt"}))
    );
}

#[test]
fn offset_past_the_end_is_an_error_with_the_line_count() {
    let mut c = client_with(&[("/three.txt", "a\nb\nc\n".into())]);
    assert_text_eq!(
        "Error: Line offset 3 exceeds file length (3 lines). Use an offset below 3",
        c.err("read_file", json!({"file_path": "/three.txt", "offset": 3}))
    );
    assert_text_eq!(
        "Error: Line offset 50 exceeds file length (3 lines). Use an offset below 3",
        c.err(
            "read_file",
            json!({"file_path": "/three.txt", "offset": 50})
        )
    );
    assert_text_eq!(
        "     3\tc",
        c.ok("read_file", json!({"file_path": "/three.txt", "offset": 2}))
    );
}

#[test]
fn remaining_lines_end_with_a_paging_hint() {
    let content: String = (1..=10).map(|i| format!("l{i}\n")).collect();
    let mut c = client_with(&[("/ten.txt", content)]);
    assert_text_eq!(
        "     1\tl1\n     2\tl2\n     3\tl3\n     4\tl4\n\n... 6 more lines not shown. Call read_file with offset=4 to continue.",
        c.ok("read_file", json!({"file_path": "/ten.txt", "limit": 4}))
    );
    assert_text_eq!(
        "     9\tl9\n    10\tl10",
        c.ok("read_file", json!({"file_path": "/ten.txt", "offset": 8}))
    );
}

#[test]
fn read_file_output_is_capped_at_80000_characters_with_a_paging_hint() {
    let content: String = (1..=3000)
        .map(|i| format!("{i:04} {}\n", "x".repeat(95)))
        .collect();
    let mut c = client_with(&[("/big.txt", content)]);
    let text = c.ok("read_file", json!({"file_path": "/big.txt"}));
    assert!(
        text.chars().count() <= CAP,
        "{} chars",
        text.chars().count()
    );
    let (body, hint) = text.rsplit_once("\n\n").unwrap();
    let last_row = body.lines().last().unwrap();
    let last_number: usize = last_row.split('\t').next().unwrap().trim().parse().unwrap();
    assert!(last_number > 700 && last_number < 2000, "{last_number}");
    assert_eq!(
        hint,
        format!(
            "... {} more lines not shown. Call read_file with offset={last_number} to continue.",
            3000 - last_number
        )
    );
    // Paging from there continues exactly where the capped answer stopped.
    let next = c.ok(
        "read_file",
        json!({"file_path": "/big.txt", "offset": last_number, "limit": 1}),
    );
    assert!(
        next.starts_with(&format!("{:>6}\t{:04} ", last_number + 1, last_number + 1)),
        "{next}"
    );
}

#[test]
fn grep_output_is_capped_with_the_truncation_notice() {
    let content: String = (1..=2000)
        .map(|i| format!("match {i} {}\n", "y".repeat(80)))
        .collect();
    let mut c = client_with(&[("/m.txt", content)]);
    let text = c.ok(
        "grep",
        json!({"pattern": "match", "output_mode": "content"}),
    );
    assert!(text.chars().count() <= CAP);
    assert!(
        text.ends_with(&format!("\n{TRUNCATION}")),
        "{}",
        &text[text.len() - 200..]
    );
    assert!(text.starts_with("/m.txt:\n  1: match 1 "));
}

#[test]
fn grep_pages_with_head_limit_and_offset() {
    let mut c = client_with(&[
        ("/a.txt", "x\n".into()),
        ("/b.txt", "x\nx\n".into()),
        ("/c.txt", "x\n".into()),
    ]);
    assert_text_eq!(
        "/a.txt\n/b.txt\n... [showing files 1-2 of 3; call again with offset=2 for more]",
        c.ok("grep", json!({"pattern": "x", "head_limit": 2}))
    );
    assert_text_eq!("/c.txt", c.ok("grep", json!({"pattern": "x", "offset": 2})));
    assert_text_eq!(
        "/b.txt: 2\n... [showing files 2-2 of 3; call again with offset=2 for more]",
        c.ok(
            "grep",
            json!({"pattern": "x", "output_mode": "count", "offset": 1, "head_limit": 1})
        )
    );
    assert_text_eq!(
        "/b.txt:\n  1: x\n  2: x\n... [showing lines 2-3 of 4; call again with offset=3 for more]",
        c.ok(
            "grep",
            json!({"pattern": "x", "output_mode": "content", "offset": 1, "head_limit": 2})
        )
    );
}

#[test]
fn grep_content_mode_shows_context_and_group_separators() {
    let content = "one\ntwo\nthree MATCH\nfour\nfive\nsix\nseven\neight MATCH\nnine\n";
    let mut c = client_with(&[("/ctx.txt", content.into())]);
    assert_text_eq!(
        "/ctx.txt:\n  2- two\n  3: three MATCH\n  4- four\n  --\n  7- seven\n  8: eight MATCH\n  9- nine",
        c.ok(
            "grep",
            json!({"pattern": "MATCH", "output_mode": "content", "context": 1})
        )
    );
    assert_text_eq!(
        "/ctx.txt",
        c.ok(
            "grep",
            json!({"pattern": "match", "case_insensitive": true})
        )
    );
    assert_text_eq!(
        "No matches found",
        c.ok("grep", json!({"pattern": "match"}))
    );
    assert_text_eq!(
        "No matches found",
        c.ok("grep", json!({"pattern": "M.TCH", "literal": true}))
    );
}

#[test]
fn invalid_regex_is_an_error_that_suggests_literal() {
    let mut c = client_with(&[("/a.txt", "f(x)\n".into())]);
    let text = c.err("grep", json!({"pattern": "f(x"}));
    assert!(text.starts_with("Error: Invalid regex pattern: "), "{text}");
    assert!(
        text.ends_with("or set literal=true to search for the text as written"),
        "{text}"
    );
    assert_text_eq!(
        "/a.txt",
        c.ok("grep", json!({"pattern": "f(x", "literal": true}))
    );
}

#[test]
fn glob_returns_at_most_1000_files_newest_first() {
    let mut c = StdioClient::start(&[]);
    for i in 0..1005 {
        c.ok(
            "write_file",
            json!({"file_path": format!("/many/f{i:04}.txt"), "content": "x"}),
        );
    }
    let text = c.ok("glob", json!({"pattern": "*.txt"}));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1001);
    assert_eq!(lines[0], "/many/f1004.txt", "newest first");
    assert_eq!(
        lines[1000],
        "... [showing 1000 of 1005 files, newest first; narrow the pattern or path to see the rest]"
    );
}

#[test]
fn path_errors_show_the_offending_input() {
    let mut c = StdioClient::start(&[]);
    let cases = [
        (
            "/a/../b",
            "Error: Invalid path '/a/../b': '..' components are not allowed",
        ),
        (
            "~/notes",
            "Error: Invalid path '~/notes': '~' (home directory) is not supported",
        ),
        (
            "C:\\x",
            "Error: Invalid path 'C:\\x': backslashes, drive letters and UNC paths are not allowed",
        ),
        (
            "\\\\server\\share",
            "Error: Invalid path '\\\\server\\share': backslashes",
        ),
        (
            "a\u{0}b",
            "Error: Invalid path 'a\\u{0000}b': it contains a NUL byte",
        ),
        ("", "Error: Invalid path '': the path is empty"),
    ];
    for (input, expected) in cases {
        for tool in ["read_file", "write_file"] {
            let mut args = json!({"file_path": input});
            if tool == "write_file" {
                args["content"] = json!("x");
            }
            let text = c.err(tool, args);
            assert!(text.starts_with(expected), "{tool}({input:?}): {text}");
        }
    }
    let long = format!("/{}", "d/".repeat(2100));
    assert!(
        c.err("ls", json!({"path": long}))
            .contains("the limit is 4096 bytes")
    );
    // Relative paths are taken from '/', and foo..bar is an ordinary name.
    c.ok(
        "write_file",
        json!({"file_path": "rel/foo..bar.txt", "content": "ok"}),
    );
    assert_text_eq!(
        "     1\tok",
        c.ok("read_file", json!({"file_path": "/rel//foo..bar.txt/"}))
    );
}

#[test]
fn reading_a_directory_lists_it_and_binary_files_are_described() {
    let mut c = client_with(&[
        ("/d/a.txt", "a".into()),
        ("/d/sub/b.txt", "b".into()),
        ("/bin.dat", "abc\u{0}def".into()),
    ]);
    assert_text_eq!(
        "/d is a directory, not a file. Its entries (read_file takes a file path; ls lists directories):\n/d/a.txt (1 byte)\n/d/sub/",
        c.ok("read_file", json!({"file_path": "/d"}))
    );
    assert_text_eq!(
        "/bin.dat is a binary file (binary data, 7 bytes); it is not shown as text.",
        c.ok("read_file", json!({"file_path": "/bin.dat"}))
    );
    assert_text_eq!(
        "Error: File not found: /nope.txt. Check the path with ls or glob",
        c.err("read_file", json!({"file_path": "/nope.txt"}))
    );
    assert_text_eq!(
        "Error: File not found: /nope. Check the path with ls or glob",
        c.err("ls", json!({"path": "/nope"}))
    );
}
