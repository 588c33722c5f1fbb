//! Edit-tool cases run on every backend: the edit pipeline (`support::backends::call`, which
//! validates as the wire does, on a session over the fixture's backend) must behave the same whether the file lives in memory, on disk or in a
//! store. The test also holds the backend, so it can change a file behind the session's back (as
//! another program or another server would) and compare bytes exactly.

use mountfs::change::ToolReply;
use mountfs::state::session::{Session, WriteOptions};
use mountfs::storage::backend::WriteMode;

use crate::support::backends;
use serde_json::{Value, json};

use crate::support::fixtures::Fixture;

/// A session over the fixture's backend, mounted at `/` (so `fx.path` names work unchanged).
fn session(fx: &Fixture) -> Session {
    backends::session_over(fx.backend.clone(), WriteOptions::default())
}

async fn put(fx: &Fixture, rel: &str, content: &[u8]) {
    fx.backend
        .write(&fx.path(rel), content, WriteMode::Overwrite)
        .await
        .unwrap_or_else(|e| panic!("write {rel}: {e}"));
}

async fn bytes(fx: &Fixture, rel: &str) -> Vec<u8> {
    fx.backend
        .read(&fx.path(rel))
        .await
        .unwrap_or_else(|e| panic!("read {rel}: {e}"))
        .content
}

async fn ok(session: &Session, tool: &str, args: Value) -> ToolReply {
    backends::call(tool, args.clone(), session)
        .await
        .unwrap_or_else(|e| panic!("{tool}({args}) failed: {e}"))
}

/// Runs a call that must fail, checks `rel` kept every byte, and gives the error text.
async fn refused(fx: &Fixture, session: &Session, rel: &str, tool: &str, args: Value) -> String {
    let before = bytes(fx, rel).await;
    let text = match backends::call(tool, args.clone(), session).await {
        Ok(reply) => panic!("{tool}({args}) should fail but said: {}", reply.text),
        Err(e) => e.to_string(),
    };
    assert_eq!(bytes(fx, rel).await, before, "{tool} changed the file");
    text
}

/// Straight quotes typed where the file has typographic ones (and the reverse) match; the file
/// keeps its quote style, every other byte (CRLF, BOM, multibyte text) stays, the answer says so.
pub async fn edits_match_quotes_loosely_both_ways(fx: &Fixture) {
    let s = session(fx);
    let curly = "\u{feff}title = “Hello”\r\nnote = ‘it’s fine’ — ok\r\n";
    put(fx, "curly.txt", curly.as_bytes()).await;
    let path = fx.path("curly.txt").to_string();
    ok(&s, "read_file", json!({"file_path": path})).await;
    let reply = ok(
        &s,
        "edit_file",
        json!({"file_path": path, "old_string": "title = \"Hello\"", "new_string": "title = \"Hi, you\""}),
    )
    .await;
    assert!(
        reply.text.contains("Quotes matched loosely"),
        "{}",
        reply.text
    );
    assert_eq!(
        reply.structured.as_ref().unwrap()["quotes_matched_loosely"],
        json!(1)
    );
    assert_eq!(
        String::from_utf8(bytes(fx, "curly.txt").await).unwrap(),
        "\u{feff}title = “Hi, you”\r\nnote = ‘it’s fine’ — ok\r\n"
    );
    ok(
        &s,
        "multi_edit",
        json!({"file_path": path, "edits": [
            {"old_string": "'it's fine'", "new_string": "'it's grand'"},
            {"old_string": "\"Hi, you\"", "new_string": "\"Hi\""},
        ]}),
    )
    .await;
    assert_eq!(
        String::from_utf8(bytes(fx, "curly.txt").await).unwrap(),
        "\u{feff}title = “Hi”\r\nnote = ‘it’s grand’ — ok\r\n"
    );

    let straight = "x = \"a\"; y = 'b'\nx = \"a\"; y = 'b'\n";
    put(fx, "straight.py", straight.as_bytes()).await;
    let path = fx.path("straight.py").to_string();
    ok(&s, "read_file", json!({"file_path": path})).await;
    let reply = ok(
        &s,
        "edit_file",
        json!({"file_path": path, "old_string": "x = “a”", "new_string": "x = “c”", "replace_all": true}),
    )
    .await;
    assert!(
        reply.text.contains("replaced 2 occurrences"),
        "{}",
        reply.text
    );
    assert!(reply.text.contains("Quotes matched loosely"));
    assert_eq!(
        bytes(fx, "straight.py").await,
        b"x = \"c\"; y = 'b'\nx = \"c\"; y = 'b'\n"
    );
}

/// Exact matches win; an `old_string` matching two places once quotes are folded is ambiguous
/// ("appears 2 times", lines listed), and nothing is written.
pub async fn loose_quote_matches_are_counted_on_the_folded_text(fx: &Fixture) {
    let s = session(fx);
    let text = "a = “q”\nb = \"q\"\nc = ‘q’\nd = 'q’\n";
    put(fx, "q.txt", text.as_bytes()).await;
    let path = fx.path("q.txt").to_string();
    ok(&s, "read_file", json!({"file_path": path})).await;
    let error = refused(
        fx,
        &s,
        "q.txt",
        "edit_file",
        json!({"file_path": path, "old_string": "= 'q'", "new_string": "= 'r'"}),
    )
    .await;
    assert!(
        error.starts_with(
            "Error: String appears 2 times in file (lines 3, 4), counting typographic and straight quotes as equal."
        ),
        "{error}"
    );
    let error = refused(
        fx,
        &s,
        "q.txt",
        "multi_edit",
        json!({"file_path": path, "edits": [{"old_string": "“x”", "new_string": "y"},
                                            {"old_string": "‘q’", "new_string": "y"}]}),
    )
    .await;
    assert!(
        error.starts_with("Error: edit 1 of 2: String not found"),
        "{error}"
    );
    // Typed exactly as line 2 has it: the exact match wins over line 1's loose one.
    let reply = ok(
        &s,
        "edit_file",
        json!({"file_path": path, "old_string": "\"q\"", "new_string": "\"r\""}),
    )
    .await;
    assert!(
        !reply.text.contains("Quotes matched loosely"),
        "{}",
        reply.text
    );
    assert_eq!(
        String::from_utf8(bytes(fx, "q.txt").await).unwrap(),
        "a = “q”\nb = \"r\"\nc = ‘q’\nd = 'q’\n"
    );
}

/// Stale but safe: an edit of a file changed since it was read lands when every `old_string`
/// still matches the current content as often as in the text read, conditional on the current
/// version; the answer names the lines changed from outside. An outside change touching an
/// `old_string`, a `replace_all` that would reach new text, and an overwrite stay stale.
pub async fn stale_edits_land_only_where_their_text_is_untouched(fx: &Fixture) {
    let s = session(fx);
    put(fx, "s.txt", b"alpha\nbeta\ngamma\ndelta\nomega x\n").await;
    let path = fx.path("s.txt").to_string();
    ok(&s, "read_file", json!({"file_path": path})).await;
    put(fx, "s.txt", b"alpha\nBETA!\ngamma\ndelta\nomega x\n").await;
    let reply = ok(
        &s,
        "edit_file",
        json!({"file_path": path, "old_string": "gamma", "new_string": "GAMMA"}),
    )
    .await;
    assert!(
        reply.text.starts_with(&format!(
            "Edited {path}: replaced 1 occurrence.\nNote: {path} had changed since this session \
             read it (another program, session or server wrote it); changed lines (numbered as \
             the file was found, before this edit): 2. Every old_string still matched the current \
             content exactly, so the edit was applied to it."
        )),
        "{}",
        reply.text
    );
    assert_eq!(
        reply.structured.as_ref().unwrap()["changed_since_read"],
        json!({"lines": [[2, 2]]})
    );
    assert_eq!(
        bytes(fx, "s.txt").await,
        b"alpha\nBETA!\nGAMMA\ndelta\nomega x\n"
    );

    // The session's own write is what it saw last: the next outside change is compared to it.
    put(fx, "s.txt", b"ALPHA\nBETA!\nGAMMA\ndelta\nomega x\n").await;
    let reply = ok(
        &s,
        "multi_edit",
        json!({"file_path": path, "edits": [
            {"old_string": "delta", "new_string": "DELTA"},
            {"old_string": "GAMMA\nDELTA", "new_string": "G\nD"},
        ]}),
    )
    .await;
    assert!(
        reply.text.contains("before this edit): 1."),
        "{}",
        reply.text
    );
    assert_eq!(bytes(fx, "s.txt").await, b"ALPHA\nBETA!\nG\nD\nomega x\n");

    // An outside change to the text an edit needs: today's stale error, nothing written.
    put(fx, "s.txt", b"ALPHA\nBETA!\nG\nD2\nomega x\n").await;
    let stale = format!(
        "Error: File has been modified since it was read: {path}. Read it again with read_file, \
         then retry"
    );
    let error = refused(
        fx,
        &s,
        "s.txt",
        "edit_file",
        json!({"file_path": path, "old_string": "D\n", "new_string": "E\n"}),
    )
    .await;
    assert_eq!(error, stale);
    let error = refused(
        fx,
        &s,
        "s.txt",
        "multi_edit",
        json!({"file_path": path, "edits": [{"old_string": "G", "new_string": "g"},
                                            {"old_string": "D\n", "new_string": "E\n"}]}),
    )
    .await;
    assert_eq!(error, stale);
    // Text the session never saw is never edited, even when old_string matches it now.
    let error = refused(
        fx,
        &s,
        "s.txt",
        "edit_file",
        json!({"file_path": path, "old_string": "D2", "new_string": "E"}),
    )
    .await;
    assert_eq!(error, stale);
    // An overwrite of a changed file stays refused.
    let error = refused(
        fx,
        &s,
        "s.txt",
        "write_file",
        json!({"file_path": path, "content": "new\n"}),
    )
    .await;
    assert_eq!(error, stale);

    // replace_all may not reach an occurrence added from outside.
    ok(&s, "read_file", json!({"file_path": path})).await;
    put(fx, "s.txt", b"ALPHA\nBETA!\nG\nD2\nomega x\nx\n").await;
    let error = refused(
        fx,
        &s,
        "s.txt",
        "edit_file",
        json!({"file_path": path, "old_string": "x", "new_string": "y", "replace_all": true}),
    )
    .await;
    assert_eq!(error, stale);

    // undo_edit takes back this session's change only, onto the content it found.
    ok(&s, "read_file", json!({"file_path": path})).await;
    put(fx, "s.txt", b"ALPHA\nBETA?\nG\nD2\nomega x\nx\n").await;
    ok(
        &s,
        "edit_file",
        json!({"file_path": path, "old_string": "ALPHA", "new_string": "A"}),
    )
    .await;
    assert_eq!(bytes(fx, "s.txt").await, b"A\nBETA?\nG\nD2\nomega x\nx\n");
    ok(&s, "undo_edit", json!({"file_path": path})).await;
    assert_eq!(
        bytes(fx, "s.txt").await,
        b"ALPHA\nBETA?\nG\nD2\nomega x\nx\n"
    );
}

/// Several sessions (agents) editing distinct lines of one file at once: every edit lands, and
/// almost none meets a stale error (a write that loses a race is tried again on the new content).
pub async fn concurrent_sessions_editing_distinct_lines_all_land(fx: &Fixture) {
    const SESSIONS: usize = 4;
    const EDITS: usize = 12;
    let lines = SESSIONS * EDITS;
    let initial: String = (0..lines).map(|i| format!("line {i:03}: todo\n")).collect();
    put(fx, "c.txt", initial.as_bytes()).await;
    let path = fx.path("c.txt").to_string();
    let mut workers = Vec::new();
    for k in 0..SESSIONS {
        let s = session(fx);
        let path = path.clone();
        workers.push(tokio::spawn(async move {
            let mut stale = 0usize;
            ok(&s, "read_file", json!({"file_path": path})).await;
            for e in 0..EDITS {
                let line = k * EDITS + e;
                let edit = json!({"file_path": path,
                                  "old_string": format!("line {line:03}: todo"),
                                  "new_string": format!("line {line:03}: done by {k}")});
                loop {
                    match backends::call("edit_file", edit.clone(), &s).await {
                        Ok(_) => break,
                        Err(error) => {
                            let text = error.to_string();
                            assert!(text.contains("modified since it was read"), "{text}");
                            stale += 1;
                            ok(&s, "read_file", json!({"file_path": path})).await;
                        }
                    }
                }
            }
            stale
        }));
    }
    let mut stale = 0;
    for worker in workers {
        stale += worker.await.expect("worker");
    }
    let text = String::from_utf8(bytes(fx, "c.txt").await).expect("UTF-8");
    for line in 0..lines {
        let k = line / EDITS;
        assert!(
            text.contains(&format!("line {line:03}: done by {k}\n")),
            "edit of line {line} lost:\n{text}"
        );
    }
    // Without stale-safe edits nearly every edit after another session's write is stale.
    assert!(
        stale * 10 <= lines,
        "{stale} stale errors for {lines} edits"
    );
}
