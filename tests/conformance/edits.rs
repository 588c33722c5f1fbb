//! Edit-tool cases run on every backend: the edit pipeline (`tools::call` on a session over the
//! fixture's backend) must behave the same whether the file lives in memory, on disk or in a
//! store. The test also holds the backend, so it can change a file behind the session's back (as
//! another program or another server would) and compare bytes exactly.

use std::sync::Arc;

use mountfs::backend::{CompositeBackend, Mount, StateBackend, WriteMode};
use mountfs::session::{Session, WriteOptions};
use mountfs::tools::{self, ToolReply};
use serde_json::{Value, json};

use crate::fixtures::Fixture;

/// A session over the fixture's backend, mounted at `/` (so `fx.path` names work unchanged).
fn session(fx: &Fixture) -> Session {
    let composite = CompositeBackend::new(
        vec![Mount {
            prefix: mountfs::path::VirtualPath::root(),
            backend: fx.backend.clone(),
            read_only: false,
        }],
        || Arc::new(StateBackend::new()),
    );
    Session::new(Arc::new(composite), WriteOptions::default())
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
    tools::call(tool, args.clone(), session)
        .await
        .unwrap_or_else(|e| panic!("{tool}({args}) failed: {e}"))
}

/// Runs a call that must fail, checks `rel` kept every byte, and gives the error text.
async fn refused(fx: &Fixture, session: &Session, rel: &str, tool: &str, args: Value) -> String {
    let before = bytes(fx, rel).await;
    let text = match tools::call(tool, args.clone(), session).await {
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
