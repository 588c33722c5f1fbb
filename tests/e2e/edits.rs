//! The read-before-edit rules and every edit error of CONTRACT §4, driven in-process through
//! `support::backends::call` (validated as on the wire) on sessions over a backend the test also holds, so it can change files
//! behind the agent's back (as another program or server would) and check bytes exactly.
//! After every refusal the file is byte-for-byte what it was.

use std::sync::Arc;

use mountfs::change::ToolReply;
use mountfs::ground::path::VirtualPath;
use mountfs::state::session::{Session, WriteOptions};
use mountfs::storage::backend::{Backend, MemoryBackend, WriteMode};

use crate::support::backends;
use serde_json::{Value, json};

use crate::assert_text_eq;

struct World {
    backend: Arc<MemoryBackend>,
}

impl World {
    fn new() -> Self {
        Self {
            backend: Arc::new(MemoryBackend::new()),
        }
    }

    /// A session of its own over the shared backend (another agent, another server).
    fn session(&self) -> Session {
        backends::session_over(self.backend.clone(), WriteOptions::default())
    }

    async fn put(&self, path: &str, bytes: &[u8]) {
        self.backend
            .write(
                &VirtualPath::parse(path).unwrap(),
                bytes,
                WriteMode::Overwrite,
            )
            .await
            .unwrap();
    }

    async fn bytes(&self, path: &str) -> Vec<u8> {
        self.backend
            .read(&VirtualPath::parse(path).unwrap())
            .await
            .unwrap()
            .content
    }
}

async fn ok(session: &Session, tool: &str, args: Value) -> ToolReply {
    backends::call(tool, args.clone(), session)
        .await
        .unwrap_or_else(|e| panic!("{tool}({args}) failed: {e}"))
}

async fn err(session: &Session, tool: &str, args: Value) -> String {
    match backends::call(tool, args.clone(), session).await {
        Ok(reply) => panic!("{tool}({args}) should fail but said: {}", reply.text),
        Err(e) => e.to_string(),
    }
}

/// Runs an edit that must fail and checks the file did not change at all.
async fn refused(world: &World, session: &Session, tool: &str, args: Value) -> String {
    let path = args["file_path"].as_str().unwrap().to_owned();
    let before = world.bytes(&path).await;
    let text = err(session, tool, args).await;
    assert_eq!(
        world.bytes(&path).await,
        before,
        "{tool} refusal changed {path}"
    );
    text
}

const SOURCE: &str = "fn a() {\n    let x = 1;\n}\n\nfn b() {\n    let x = 1;\n}\n";

#[tokio::test]
async fn editing_or_overwriting_an_unread_file_is_refused() {
    let world = World::new();
    world.put("/a.rs", SOURCE.as_bytes()).await;
    let s = world.session();
    let edit = json!({"file_path": "/a.rs", "old_string": "fn a", "new_string": "fn c"});
    assert_text_eq!(
        "Error: File has not been read yet: /a.rs. Read it with read_file first, then retry",
        refused(&world, &s, "edit_file", edit.clone()).await
    );
    let write = json!({"file_path": "/a.rs", "content": "gone"});
    assert_text_eq!(
        "Error: File has not been read yet: /a.rs. Read it with read_file first, then retry",
        refused(&world, &s, "write_file", write).await
    );
    let multi =
        json!({"file_path": "/a.rs", "edits": [{"old_string": "fn a", "new_string": "fn c"}]});
    assert!(
        refused(&world, &s, "multi_edit", multi)
            .await
            .starts_with("Error: File has not been read yet")
    );
    // Any window counts as a read.
    ok(
        &s,
        "read_file",
        json!({"file_path": "/a.rs", "offset": 5, "limit": 1}),
    )
    .await;
    ok(&s, "edit_file", edit).await;
    assert_eq!(
        world.bytes("/a.rs").await,
        SOURCE.replacen("fn a", "fn c", 1).as_bytes()
    );
}

#[tokio::test]
async fn a_file_changed_since_it_was_read_is_stale_unless_the_edit_still_matches() {
    let world = World::new();
    world.put("/a.rs", SOURCE.as_bytes()).await;
    let agent = world.session();
    let other = world.session();
    ok(&agent, "read_file", json!({"file_path": "/a.rs"})).await;
    ok(&other, "read_file", json!({"file_path": "/a.rs"})).await;
    ok(
        &other,
        "edit_file",
        json!({"file_path": "/a.rs", "old_string": "fn b", "new_string": "fn z"}),
    )
    .await;
    let stale = "Error: File has been modified since it was read: /a.rs. Read it again with read_file, then retry";
    // The other session changed the text this edit needs: stale, nothing written.
    let touched = json!({"file_path": "/a.rs", "old_string": "fn b", "new_string": "fn y"});
    assert_text_eq!(stale, refused(&world, &agent, "edit_file", touched).await);
    // An overwrite would replace what the agent has not seen: always stale.
    assert_text_eq!(
        stale,
        refused(
            &world,
            &agent,
            "write_file",
            json!({"file_path": "/a.rs", "content": "x"})
        )
        .await
    );
    // The change is elsewhere: the edit lands on the current content and says which lines
    // changed, and the other session's change is kept.
    let edit = json!({"file_path": "/a.rs", "old_string": "fn a", "new_string": "fn c"});
    let reply = ok(&agent, "edit_file", edit).await;
    let changed_line = SOURCE
        .lines()
        .position(|line| line.contains("fn b"))
        .unwrap()
        + 1;
    assert!(
        reply.text.contains(&format!(
            "Note: /a.rs had changed since this session read it (another program, session or \
             server wrote it); changed lines (numbered as the file was found, before this \
             edit): {changed_line}. Every old_string still matched"
        )),
        "{}",
        reply.text
    );
    assert_eq!(
        reply.structured.as_ref().unwrap()["changed_since_read"],
        json!({"lines": [[changed_line, changed_line]]})
    );
    let expected = SOURCE.replace("fn b", "fn z").replace("fn a", "fn c");
    assert_eq!(world.bytes("/a.rs").await, expected.as_bytes());
    // A change by another program (straight to the backend) is caught the same way; an
    // old_string found only in text the session never saw does not land.
    ok(&other, "read_file", json!({"file_path": "/a.rs"})).await;
    world.put("/a.rs", b"rewritten elsewhere\n").await;
    let edit_other = json!({"file_path": "/a.rs", "old_string": "rewritten", "new_string": "x"});
    assert_text_eq!(
        stale,
        refused(&world, &other, "edit_file", edit_other).await
    );
    // Reading again makes the edit possible.
    ok(&agent, "read_file", json!({"file_path": "/a.rs"})).await;
    ok(
        &agent,
        "edit_file",
        json!({"file_path": "/a.rs", "old_string": "elsewhere", "new_string": "here"}),
    )
    .await;
    assert_eq!(world.bytes("/a.rs").await, b"rewritten here\n");
}

#[tokio::test]
async fn the_sessions_own_writes_keep_its_ledger_current() {
    let world = World::new();
    let s = world.session();
    ok(
        &s,
        "write_file",
        json!({"file_path": "/n.txt", "content": "one\n"}),
    )
    .await;
    // A file this session created may be edited and overwritten without reading it again.
    ok(
        &s,
        "edit_file",
        json!({"file_path": "/n.txt", "old_string": "one", "new_string": "two"}),
    )
    .await;
    ok(
        &s,
        "write_file",
        json!({"file_path": "/n.txt", "content": "three\n"}),
    )
    .await;
    ok(
        &s,
        "edit_file",
        json!({"file_path": "/n.txt", "old_string": "three", "new_string": "four"}),
    )
    .await;
    assert_eq!(world.bytes("/n.txt").await, b"four\n");
}

#[tokio::test]
async fn every_edit_error_has_its_text_and_leaves_the_file_untouched() {
    let world = World::new();
    world.put("/a.rs", SOURCE.as_bytes()).await;
    let s = world.session();
    ok(&s, "read_file", json!({"file_path": "/a.rs"})).await;
    let edit =
        |old: &str, new: &str| json!({"file_path": "/a.rs", "old_string": old, "new_string": new});

    assert!(
        refused(&world, &s, "edit_file", edit("", "x"))
            .await
            .starts_with("Error: old_string is empty. To create a file or replace all of an empty one use write_file")
    );
    assert!(
        refused(&world, &s, "edit_file", edit("fn a", "fn a"))
            .await
            .starts_with("Error: old_string and new_string are identical")
    );
    assert_text_eq!(
        "Error: old_string contains line-number prefixes copied from read_file output (like \"     12\\t\"). Remove them and retry; without them old_string is:\n    let x = 1;\n}",
        refused(
            &world,
            &s,
            "edit_file",
            edit("     2\t    let x = 1;\n     3\t}", "y")
        )
        .await
    );
    let not_found = refused(
        &world,
        &s,
        "edit_file",
        edit("fn alpha() {\n    let x = 1;", "y"),
    )
    .await;
    assert!(
        not_found.starts_with("Error: String not found in file: 'fn alpha() {\n    let x = 1;'."),
        "{not_found}"
    );
    assert!(
        not_found.contains(
            "The closest match is at lines 1-2:\n     1\tfn a() {\n     2\t    let x = 1;"
        ),
        "{not_found}"
    );
    let whitespace = refused(&world, &s, "edit_file", edit("fn a() {\n  let x = 1;", "y")).await;
    assert!(
        whitespace.contains("Only whitespace or line endings differ: lines 1-2 of the file match"),
        "{whitespace}"
    );
    assert_text_eq!(
        "Error: String appears 2 times in file (lines 2, 6). Use replace_all=true to replace all instances, or provide a more specific string with surrounding context.",
        refused(&world, &s, "edit_file", edit("let x = 1;", "let x = 2;")).await
    );
    let mut expected = edit("let x = 1;", "let x = 2;");
    expected["expected_replacements"] = json!(3);
    assert_text_eq!(
        "Error: Expected 3 replacement(s) but found 2 occurrence(s) (lines 2, 6). Set expected_replacements to 2 or refine old_string.",
        refused(&world, &s, "edit_file", expected).await
    );
    let multi = |edits: Value| json!({"file_path": "/a.rs", "edits": edits});
    let failing = refused(
        &world,
        &s,
        "multi_edit",
        multi(json!([
            {"old_string": "fn a", "new_string": "fn c"},
            {"old_string": "no such text", "new_string": "x"},
            {"old_string": "fn b", "new_string": "fn d"}
        ])),
    )
    .await;
    assert!(
        failing.starts_with("Error: edit 2 of 3: String not found in file: 'no such text'."),
        "{failing}"
    );
    assert_text_eq!(
        "Error: edit 2 of 2 conflicts with edit 1: both replace the same old_string with different new_string. Merge them into one edit.",
        refused(
            &world,
            &s,
            "multi_edit",
            multi(json!([
                {"old_string": "fn a", "new_string": "fn c"},
                {"old_string": "fn a", "new_string": "fn d"}
            ])),
        )
        .await
    );
    assert_text_eq!(
        "Error: edit 2 of 2 overlaps edit 1: their old_string regions overlap in the file. Merge them into one edit or make them disjoint.",
        refused(
            &world,
            &s,
            "multi_edit",
            multi(json!([
                {"old_string": "fn a() {", "new_string": "fn c() {"},
                {"old_string": "a() {\n    let", "new_string": "x"}
            ])),
        )
        .await
    );
    assert_eq!(world.bytes("/a.rs").await, SOURCE.as_bytes());
}

#[tokio::test]
async fn replacement_is_literal_and_replace_all_counts() {
    let world = World::new();
    world.put("/a.rs", SOURCE.as_bytes()).await;
    let s = world.session();
    ok(&s, "read_file", json!({"file_path": "/a.rs"})).await;
    let reply = ok(
        &s,
        "edit_file",
        json!({"file_path": "/a.rs", "old_string": "let x = 1;", "new_string": "let x = \"$1 ${0} \\\\1\";", "replace_all": true}),
    )
    .await;
    assert!(
        reply
            .text
            .starts_with("Edited /a.rs: replaced 2 occurrences."),
        "{}",
        reply.text
    );
    assert_eq!(
        world.bytes("/a.rs").await,
        SOURCE
            .replace("let x = 1;", "let x = \"$1 ${0} \\\\1\";")
            .as_bytes()
    );
    let structured = reply.structured.unwrap();
    assert_eq!(structured["occurrences"], 2);
    assert_eq!(structured["lines_added"], 2);
}

#[tokio::test]
async fn crlf_bom_and_missing_final_newline_survive_edits_and_overwrites() {
    let world = World::new();
    world
        .put("/win.txt", b"\xef\xbb\xbfone\r\ntwo\r\nthree")
        .await;
    let s = world.session();
    let read = ok(&s, "read_file", json!({"file_path": "/win.txt"})).await;
    assert_text_eq!("     1\tone\n     2\ttwo\n     3\tthree", read.text);
    ok(
        &s,
        "edit_file",
        json!({"file_path": "/win.txt", "old_string": "one\ntwo", "new_string": "uno\ndos\ntres"}),
    )
    .await;
    assert_eq!(
        world.bytes("/win.txt").await,
        b"\xef\xbb\xbfuno\r\ndos\r\ntres\r\nthree"
    );
    ok(
        &s,
        "multi_edit",
        json!({"file_path": "/win.txt", "edits": [{"old_string": "three", "new_string": "four"}]}),
    )
    .await;
    assert_eq!(
        world.bytes("/win.txt").await,
        b"\xef\xbb\xbfuno\r\ndos\r\ntres\r\nfour"
    );
    ok(
        &s,
        "write_file",
        json!({"file_path": "/win.txt", "content": "new\nlines\n"}),
    )
    .await;
    assert_eq!(
        world.bytes("/win.txt").await,
        b"\xef\xbb\xbfnew\r\nlines\r\n"
    );
}

#[tokio::test]
async fn ensure_final_newline_adds_one_on_write() {
    let world = World::new();
    let s = backends::session_over(
        world.backend.clone(),
        WriteOptions {
            ensure_final_newline: true,
            ..WriteOptions::default()
        },
    );
    ok(
        &s,
        "write_file",
        json!({"file_path": "/f.txt", "content": "no newline"}),
    )
    .await;
    assert_eq!(world.bytes("/f.txt").await, b"no newline\n");
    ok(
        &s,
        "write_file",
        json!({"file_path": "/g.txt", "content": ""}),
    )
    .await;
    assert_eq!(
        world.bytes("/g.txt").await,
        b"",
        "an empty file stays empty"
    );
}

#[tokio::test]
async fn binary_files_are_not_edited_as_text() {
    let world = World::new();
    world.put("/blob.bin", b"abc\0def").await;
    let s = world.session();
    ok(&s, "read_file", json!({"file_path": "/blob.bin"})).await;
    assert!(
        refused(
            &world,
            &s,
            "edit_file",
            json!({"file_path": "/blob.bin", "old_string": "abc", "new_string": "x"})
        )
        .await
        .starts_with("Error: /blob.bin is a binary file")
    );
}

#[tokio::test]
async fn a_directory_cannot_be_written_or_edited() {
    let world = World::new();
    world.put("/d/f.txt", b"x").await;
    let s = world.session();
    assert_text_eq!(
        "Error: /d is a directory, not a file. Use ls to list it",
        err(&s, "write_file", json!({"file_path": "/d", "content": "x"})).await
    );
    assert_text_eq!(
        "Error: /d is a directory, not a file. Use ls to list it",
        err(
            &s,
            "edit_file",
            json!({"file_path": "/d", "old_string": "a", "new_string": "b"})
        )
        .await
    );
}
