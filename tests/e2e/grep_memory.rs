//! `grep` keeps bounded memory whatever the files (issue 10): each case runs in a fresh
//! `mountfs` process over a disk mount and asserts its peak resident memory (`VmHWM` in
//! `/proc/<pid>/status`) afterwards, then that the answer is still right.
//!
//! Without the bounds, content mode kept every match before paging (`head_limit: 1` over a
//! million matching lines peaked near 200 MB here) and ripgrep's searcher grew its buffer to hold
//! a whole line (a 256 MiB line needed over 512 MB, 16 calls at once several GB).

use std::io::Write;
use std::path::Path;

use crate::support::stdio::StdioClient;
use serde_json::json;

/// The peak a case without long lines may reach: an idle debug server's peak plus the same
/// 20 MiB of room as before. The idle peak was near 28 MB; the object-storage and OAuth crates
/// (object_store, jsonwebtoken, rustls with aws-lc-rs) made the debug binary 117 -> 151 MB and
/// its idle peak near 34 MB, nearly all file-backed code pages (smaps_rollup: Pss_File 23.6 ->
/// 27.6 MB, anonymous 3.3 -> 3.9 MB); what a grep adds to it is unchanged.
const PEAK_LIMIT: u64 = 54 * 1024 * 1024;

/// The peak a case over a huge line may reach: [`PEAK_LIMIT`] plus one line buffer (bounded by
/// `--grep-max-line-bytes`, 16 MiB, plus 400 KiB for 100 context lines) per walk that may run at
/// once (one per core, at most 16 calls here).
fn huge_line_peak_limit() -> u64 {
    let walks = std::thread::available_parallelism()
        .map_or(2, usize::from)
        .min(16) as u64;
    PEAK_LIMIT + walks * 17 * 1024 * 1024
}

/// One line of this many bytes: far over the 16 MiB line bound, and over [`PEAK_LIMIT`] many
/// times, so a searcher that held it whole would fail the bound.
const HUGE_LINE: usize = 256 * 1024 * 1024;

fn disk_server(extra: &[&str]) -> StdioClient {
    let mut args = vec!["--mount", "/=disk:."];
    args.extend_from_slice(extra);
    StdioClient::start(&args)
}

/// Asserts the server's peak memory is under `limit` and returns it.
fn assert_peak_under(client: &StdioClient, case: &str, limit: u64) -> u64 {
    let peak = client.peak_memory().expect("VmHWM (Linux)");
    eprintln!("{case}: VmHWM {:.1} MiB", peak as f64 / 1048576.0);
    assert!(
        peak < limit,
        "{case}: peak memory {peak} bytes, over {limit}"
    );
    peak
}

/// Writes `lines` matching lines `needle NNNNNNN` (and a last non-matching one).
fn many_matches(path: &Path, lines: usize) {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).expect("create"));
    for i in 0..lines {
        writeln!(out, "needle {i:07}").expect("write");
    }
    writeln!(out, "the end").expect("write");
    out.flush().expect("flush");
}

/// A file whose second line is [`HUGE_LINE`] bytes of text ending in `needle`.
fn huge_line(path: &Path) {
    let mut out = std::fs::File::create(path).expect("create");
    out.write_all(b"first line\n").expect("write");
    let chunk = vec![b'a'; 1024 * 1024];
    for _ in 0..HUGE_LINE / chunk.len() {
        out.write_all(&chunk).expect("write");
    }
    out.write_all(b" needle\nlast line\n").expect("write");
}

#[test]
fn content_mode_with_head_limit_keeps_one_page_of_a_million_matches() {
    let mut client = disk_server(&[]);
    many_matches(&client.cwd().join("many.txt"), 1_000_000);
    let text = client.ok(
        "grep",
        json!({"pattern": "needle", "output_mode": "content", "head_limit": 1}),
    );
    assert_eq!(
        text,
        "/many.txt:\n  1: needle 0000000\n... [showing lines 1-1 of 1000000; call again with offset=1 for more]"
    );
    assert_peak_under(
        &client,
        "content head_limit 1 over 1,000,000 matches",
        PEAK_LIMIT,
    );
}

#[test]
fn content_mode_deep_in_a_million_matches_keeps_no_line_before_the_offset() {
    let mut client = disk_server(&[]);
    many_matches(&client.cwd().join("many.txt"), 1_000_000);
    let text = client.ok(
        "grep",
        json!({"pattern": "needle", "output_mode": "content", "offset": 999_998, "head_limit": 2}),
    );
    assert_eq!(
        text,
        "/many.txt:\n  999999: needle 0999998\n  1000000: needle 0999999"
    );
    let text = client.ok(
        "grep",
        json!({"pattern": "needle", "output_mode": "content", "offset": 500_000, "head_limit": 1, "context": 1}),
    );
    assert_eq!(
        text,
        "/many.txt:\n  500001: needle 0500000\n... [showing lines 500001-500001 of 1000001; call again with offset=500001 for more]"
    );
    assert_peak_under(
        &client,
        "content offset 999,998 over 1,000,000 matches",
        PEAK_LIMIT,
    );
}

#[test]
fn content_mode_without_head_limit_keeps_what_the_result_cap_shows() {
    let mut client = disk_server(&[]);
    many_matches(&client.cwd().join("many.txt"), 1_000_000);
    let text = client.ok(
        "grep",
        json!({"pattern": "needle", "output_mode": "content", "context": 2}),
    );
    assert!(text.chars().count() <= 80_000, "{}", text.len());
    assert!(
        text.ends_with("\n... [results truncated, try being more specific with your parameters]"),
        "{}",
        &text[text.len() - 200..]
    );
    assert!(text.starts_with("/many.txt:\n  1: needle 0000000\n  2: needle 0000001\n"));
    assert_peak_under(
        &client,
        "content, no head_limit, 1,000,000 matches",
        PEAK_LIMIT,
    );
}

#[test]
fn a_file_with_a_line_over_the_bound_is_skipped_with_the_reason() {
    let mut client = disk_server(&[]);
    huge_line(&client.cwd().join("minified.js"));
    std::fs::write(client.cwd().join("small.txt"), "a needle here\n").unwrap();
    let reason = "[skipped /minified.js: a line longer than 16777216 bytes (--grep-max-line-bytes); read it in windows with read_file]";
    let text = client.ok("grep", json!({"pattern": "needle"}));
    assert_eq!(text, format!("{reason}\n/small.txt"));
    let text = client.ok(
        "grep",
        json!({"pattern": "needle", "output_mode": "content", "context": 100}),
    );
    assert_eq!(text, format!("{reason}\n/small.txt:\n  1: a needle here"));
    let text = client.ok(
        "grep",
        json!({"pattern": "needle", "path": "/minified.js", "output_mode": "count"}),
    );
    assert_eq!(text, format!("No matches found\n{reason}"));
    assert_peak_under(
        &client,
        "grep over one 256 MiB line",
        PEAK_LIMIT + 17 * 1024 * 1024,
    );
}

#[test]
fn sixteen_concurrent_greps_over_a_huge_line_stay_bounded() {
    let mut client = disk_server(&[]);
    huge_line(&client.cwd().join("minified.js"));
    let ids: Vec<u64> = (0..16)
        .map(|i| {
            let arguments = if i % 2 == 0 {
                json!({"pattern": "needle"})
            } else {
                json!({"pattern": "needle", "output_mode": "content", "context": 100})
            };
            client.send(
                "tools/call",
                json!({"name": "grep", "arguments": arguments}),
            )
        })
        .collect();
    for id in ids {
        let response = client.response(id);
        let text = crate::support::stdio::text_of(&response["result"]);
        assert!(
            text.contains("[skipped /minified.js: a line longer than 16777216 bytes"),
            "{response}"
        );
    }
    assert_peak_under(
        &client,
        "16 concurrent greps over a 256 MiB line",
        huge_line_peak_limit(),
    );
}

#[test]
fn the_line_bound_is_a_flag_and_the_memory_mount_applies_it_too() {
    let mut client = StdioClient::start(&[
        "--mount",
        "/=disk:.",
        "--mount",
        "/mem/=memory",
        "--grep-max-line-bytes",
        "1000",
    ]);
    let long = format!("{} needle\n", "x".repeat(2000));
    std::fs::write(client.cwd().join("long.txt"), &long).unwrap();
    client.ok(
        "write_file",
        json!({"file_path": "/mem/long.txt", "content": long}),
    );
    client.ok(
        "write_file",
        json!({"file_path": "/mem/short.txt", "content": "needle\n"}),
    );
    let text = client.ok("grep", json!({"pattern": "needle"}));
    assert_eq!(
        text,
        "[skipped /long.txt: a line longer than 1000 bytes (--grep-max-line-bytes); read it in windows with read_file]\n\
         [skipped /mem/long.txt: a line longer than 1000 bytes (--grep-max-line-bytes); read it in windows with read_file]\n\
         /mem/short.txt"
    );
}

#[test]
fn pages_over_trimmed_results_equal_slices_of_the_whole_answer() {
    // Several files with several matches and context, in a memory mount and on disk: every
    // (offset, head_limit) page holds exactly the entries of the unpaged answer at those places.
    let mut client = StdioClient::start(&["--mount", "/=disk:.", "--mount", "/mem/=memory"]);
    // Over 1,000 entries, so pages past grep's DEEP_OFFSET take the two-pass way.
    for (name, lines) in [("a.txt", 300), ("b.txt", 1), ("c.txt", 500)] {
        let content: String = (0..lines).map(|i| format!("x{i}\nfill\n")).collect();
        std::fs::write(client.cwd().join(name), &content).unwrap();
        client.ok(
            "write_file",
            json!({"file_path": format!("/mem/{name}"), "content": content}),
        );
    }
    let entries = |text: &str| -> Vec<String> {
        let mut file = String::new();
        let mut out = Vec::new();
        for line in text.lines() {
            if line.ends_with(':') && !line.starts_with(' ') {
                file = line.to_owned();
            } else if line.starts_with("  ") && line != "  --" {
                out.push(format!("{file}{line}"));
            }
        }
        out
    };
    let whole = entries(&client.ok(
        "grep",
        json!({"pattern": "x", "output_mode": "content", "context": 1}),
    ));
    assert_eq!(whole.len(), 2 * 2 * (300 + 1 + 500));
    let mut offsets: Vec<usize> = Vec::new();
    for around in [0usize, 599, 1000, 1201, 1601, 1603, 2203, 2204, 3200] {
        offsets.extend(around.saturating_sub(2)..(around + 3).min(whole.len()));
    }
    for offset in offsets {
        for limit in [1, 2, 5] {
            let page = client.ok(
                "grep",
                json!({"pattern": "x", "output_mode": "content", "context": 1, "offset": offset, "head_limit": limit}),
            );
            let end = (offset + limit).min(whole.len());
            assert_eq!(
                entries(&page),
                whole[offset..end],
                "offset {offset} limit {limit}"
            );
            if end < whole.len() {
                assert!(
                    page.ends_with(&format!(
                        "[showing lines {}-{end} of {}; call again with offset={end} for more]",
                        offset + 1,
                        whole.len()
                    )),
                    "{page}"
                );
            }
        }
    }
}

#[tokio::test]
async fn a_store_is_searched_a_few_megabytes_of_items_at_a_time() {
    use mountfs::ground::path::VirtualPath;
    use mountfs::storage::backend::{Backend, StoreBackend, WriteMode};
    use mountfs::storage::store::{Namespace, SqliteStore};
    // 40 items of 2 MiB (at most 64 were fetched in one page: 80 MiB at once).
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("store.db");
    {
        let store = SqliteStore::open(&file).await.unwrap();
        let backend = StoreBackend::new(
            std::sync::Arc::new(store),
            Namespace::new("default").unwrap(),
        );
        let line = format!("{}\n", "z".repeat(99));
        let mut content = line.repeat(2 * 1024 * 1024 / line.len());
        content.push_str("needle\n");
        for i in 0..40 {
            let path = VirtualPath::parse(&format!("/items/{i:02}.txt")).unwrap();
            backend
                .write(&path, content.as_bytes(), WriteMode::Overwrite)
                .await
                .unwrap();
        }
    }
    let spec = format!("/=store:sqlite:{}", file.display());
    let mut client = StdioClient::start(&["--mount", &spec]);
    let text = client.ok("grep", json!({"pattern": "needle", "output_mode": "count"}));
    // Every item is searched (a `head_limit` would stop the search after the first ones).
    let rows: Vec<&str> = text.lines().collect();
    assert_eq!(rows.len(), 40, "{text}");
    assert_eq!(rows[0], "/items/00.txt: 1");
    assert_peak_under(
        &client,
        "grep over 40 store items of 2 MiB",
        64 * 1024 * 1024,
    );
}

/// A text file of about `mib` MiB whose only match is on its last line.
fn big_log_matching_at_the_end(path: &Path, mib: usize) {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).expect("create"));
    let line = format!("{}\n", "log line without the word ".repeat(3));
    for _ in 0..(mib * 1024 * 1024) / line.len() {
        out.write_all(line.as_bytes()).expect("write");
    }
    out.write_all(b"the needle at the end\n").expect("write");
    out.flush().expect("flush");
}

/// Review finding F3: a shell mount's grep pulled each candidate whole into the server (a
/// 160 MiB log peaked near 500 MB here); now a big candidate is streamed in bounded chunks,
/// also when the target's `rg` fails and every file is searched.
#[test]
fn a_shell_mount_greps_a_huge_file_in_bounded_memory() {
    let dir = tempfile::tempdir().expect("tempdir");
    big_log_matching_at_the_end(&dir.path().join("huge.log"), 160);
    for i in 0..50 {
        std::fs::write(dir.path().join(format!("small{i}.txt")), "no match\n").expect("write");
    }
    let failing_rg = tempfile::tempdir().expect("tempdir");
    let rg = failing_rg.path().join("rg");
    std::fs::write(&rg, "#!/bin/sh\nexit 2\n").expect("write");
    std::fs::set_permissions(&rg, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let mount = format!("/box/=shell:t:{}", dir.path().display());
    for (case, shell) in [
        ("shell mount", "t=sh".to_owned()),
        (
            "shell mount, rg failing",
            format!(
                "t=env PATH={}:/usr/bin:/bin sh",
                failing_rg.path().display()
            ),
        ),
    ] {
        let mut client = StdioClient::start(&["--shell", &shell, "--mount", &mount]);
        let text = client.ok(
            "grep",
            json!({"pattern": "needle", "path": "/box", "output_mode": "content"}),
        );
        assert!(text.contains("/box/huge.log"), "{case}: {text}");
        assert!(text.contains("the needle at the end"), "{case}: {text}");
        assert_peak_under(&client, case, PEAK_LIMIT);
    }
}

/// The sizes of the named sections of the ELF64 little-endian file `path` (enough of the
/// format for the test below: section headers and their names).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn elf_section_sizes(path: &Path) -> std::collections::HashMap<String, u64> {
    let elf = std::fs::read(path).expect("read the executable");
    assert_eq!(&elf[..4], b"\x7fELF", "not an ELF file");
    assert_eq!((elf[4], elf[5]), (2, 1), "not ELF64 little-endian");
    let u16_at = |at: usize| u16::from_le_bytes(elf[at..at + 2].try_into().unwrap()) as usize;
    let u32_at = |at: usize| u32::from_le_bytes(elf[at..at + 4].try_into().unwrap()) as usize;
    let u64_at = |at: usize| u64::from_le_bytes(elf[at..at + 8].try_into().unwrap());
    let (table, entry, count, names) = (
        u64_at(0x28) as usize,
        u16_at(0x3a),
        u16_at(0x3c),
        u16_at(0x3e),
    );
    let header = |i: usize| table + i * entry;
    let strings = u64_at(header(names) + 0x18) as usize;
    (0..count)
        .map(|i| {
            let name_at = strings + u32_at(header(i));
            let end = elf[name_at..].iter().position(|&b| b == 0).unwrap();
            let name = String::from_utf8_lossy(&elf[name_at..name_at + end]).into_owned();
            (name, u64_at(header(i) + 0x20))
        })
        .collect()
}

/// Issue 45: the dynamic loader reads the executable's whole table of relative relocations at
/// every start, and those pages stay resident: 24 bytes per relocated pointer, 2-5 MB of a
/// server's peak (4.7 MB of this debug build's, 2.x MB of a `release` build's). Linked with
/// `-z pack-relative-relocs` (build.rs) they are packed into `.relr.dyn`, a few kilobytes.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[test]
fn the_executable_packs_its_relative_relocations() {
    let sections = elf_section_sizes(Path::new(env!("CARGO_BIN_EXE_mountfs")));
    let relr = sections.get(".relr.dyn").copied().unwrap_or(0);
    let rela = sections.get(".rela.dyn").copied().unwrap_or(0);
    eprintln!(".relr.dyn {relr} bytes, .rela.dyn {rela} bytes");
    assert!(
        relr > 0,
        "no .relr.dyn: relative relocations are not packed ({rela} bytes of .rela.dyn)"
    );
    assert!(
        rela < 256 * 1024,
        ".rela.dyn is {rela} bytes: the relative relocations were not packed"
    );
}
