//! The wire (issue 10): every line on stdin gets its answer or its JSON-RPC error and the next
//! line is served — invalid UTF-8, deep nesting, over-long lines, messages before
//! `initialize` — and a request the server refuses never holds up later calls on its file.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::stdio::StdioClient;

/// The error of an answer that has no id to name (`"id": null`).
fn null_id_error(answer: &Value) -> i64 {
    assert_eq!(answer["id"], Value::Null, "{answer}");
    assert!(answer.get("result").is_none(), "{answer}");
    answer["error"]["code"].as_i64().unwrap()
}

#[test]
fn an_invalid_utf8_line_is_answered_and_the_next_request_is_served() {
    let mut client = StdioClient::start(&[]);
    client.send_bytes(
        b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{\"name\":\"ls\",\"arguments\":{\"path\":\"/caf\xe9\"}}}\n",
    );
    let answer = client.recv();
    assert_eq!(null_id_error(&answer), -32700);
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.contains("not valid UTF-8"), "{message}");
    let text = client.ok(
        "write_file",
        json!({"file_path": "/after.txt", "content": "served\n"}),
    );
    assert_eq!(text, "Created /after.txt (1 line, 7 bytes).");
}

#[test]
fn a_deeply_nested_line_is_an_invalid_request_and_the_server_goes_on() {
    let mut client = StdioClient::start(&[]);
    let depth = 100_000;
    let mut line = vec![b'['; depth];
    line.extend(std::iter::repeat_n(b']', depth));
    line.push(b'\n');
    client.send_bytes(&line);
    assert_eq!(null_id_error(&client.recv()), -32600);
    let mut unclosed = vec![b'{'; depth];
    unclosed.push(b'\n');
    client.send_bytes(&unclosed);
    assert_eq!(null_id_error(&client.recv()), -32700);
    assert!(client.request("ping", json!({}))["result"].is_object());
}

#[test]
fn a_line_over_max_message_bytes_is_skipped_and_answered() {
    let mut client = StdioClient::start(&["--mount", "/=memory", "--max-message-bytes", "4096"]);
    let content = "x".repeat(1 << 20);
    let id = client.send(
        "tools/call",
        json!({"name": "write_file", "arguments": {"file_path": "/big.txt", "content": content}}),
    );
    let answer = client.recv();
    assert_eq!(null_id_error(&answer), -32600, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("longer than 4096 bytes (--max-message-bytes)"),
        "{message}"
    );
    // The skipped request was never run.
    let missing = client.err("read_file", json!({"file_path": "/big.txt"}));
    assert!(
        missing.starts_with("Error: File not found: /big.txt"),
        "{missing}"
    );
    assert!(
        client.recv_within(Duration::from_millis(200)).is_none(),
        "no answer for id {id}"
    );
}

#[test]
fn skipping_an_over_long_line_takes_bounded_memory() {
    let mut client = StdioClient::start(&["--mount", "/=memory", "--max-message-bytes", "1048576"]);
    let Some(before) = client.peak_memory() else {
        return; // no /proc (not Linux): nothing to measure
    };
    // 128 MiB of one line, written in pieces as a client streaming a huge message would.
    let piece = vec![b'a'; 1 << 20];
    client.send_bytes(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{\"x\":\"");
    for _ in 0..128 {
        client.send_bytes(&piece);
    }
    client.send_bytes(b"\"}}\n");
    assert_eq!(null_id_error(&client.recv()), -32600);
    assert!(client.request("ping", json!({}))["result"].is_object());
    let peak = client.peak_memory().unwrap();
    // The line is dropped as it streams past: the peak stays far below its 128 MiB (a line
    // buffered whole would cost at least that).
    assert!(
        peak < before + 16 * 1024 * 1024,
        "peak {peak} bytes after skipping a 128 MiB line (before: {before})"
    );
}

#[test]
fn an_unknown_method_is_named_in_its_error() {
    let mut client = StdioClient::start(&[]);
    let answer = client.request("no/such/method", json!({}));
    assert_eq!(answer["error"]["code"], -32601, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("Method not found: no/such/method. "),
        "{message}"
    );
}

#[test]
fn messages_before_initialize_do_not_end_the_session() {
    let mut client = StdioClient::spawn(&["--mount", "/=memory"]);
    client.send_raw(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    client.send_raw(r#"{"jsonrpc":"2.0","id":"from-client","result":{}}"#);
    client.send_raw("not json");
    assert_eq!(null_id_error(&client.recv()), -32700);
    let refused = client.request("tools/list", json!({}));
    assert!(refused["error"].is_object(), "{refused}");
    let init = client.request(
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
    );
    assert!(init["result"].is_object(), "{init}");
    assert!(client.request("tools/list", json!({}))["result"]["tools"].is_array());
}

/// Writes, reads and returns the time an edit of `/a.txt` takes after `before` ran.
fn edit_after(client: &mut StdioClient, before: impl FnOnce(&mut StdioClient)) -> Duration {
    before(client);
    let started = Instant::now();
    let text = client.ok(
        "edit_file",
        json!({"file_path": "/a.txt", "old_string": "one", "new_string": "two"}),
    );
    assert!(text.starts_with("Edited /a.txt"), "{text}");
    started.elapsed()
}

#[test]
fn edits_refused_for_their_ids_release_their_place_in_the_file_order() {
    let mut client = StdioClient::start(&[]);
    client.ok(
        "write_file",
        json!({"file_path": "/a.txt", "content": "one\n"}),
    );
    client.ok("read_file", json!({"file_path": "/a.txt"}));
    let took = edit_after(&mut client, |client| {
        for id in [json!(null), json!(1.5), json!({"an": "object"})] {
            let line = json!({
                "jsonrpc": "2.0", "id": id, "method": "tools/call",
                "params": {"name": "edit_file", "arguments": {
                    "file_path": "/a.txt", "old_string": "one", "new_string": "lost"}}
            });
            client.send_raw(&line.to_string());
            assert_eq!(null_id_error(&client.recv()), -32600, "id {id}");
        }
    });
    // A leaked place made this edit wait for the 60 s turn limit.
    assert!(took < Duration::from_secs(10), "the edit waited {took:?}");
}

#[test]
fn an_edit_the_library_refuses_before_initialize_releases_its_place() {
    let mut client = StdioClient::spawn(&["--mount", "/=memory"]);
    // A well-formed call before `initialize` and without stateless metadata: the MCP library
    // refuses it (after the transport gave it a ticket) and drops it.
    let early = client.send(
        "tools/call",
        json!({"name": "edit_file", "arguments": {"file_path": "/a.txt", "old_string": "one", "new_string": "lost"}}),
    );
    let refused = client.response(early);
    assert!(refused["error"].is_object(), "{refused}");
    let init = client.request(
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
    );
    assert!(init["result"].is_object(), "{init}");
    client.notify("notifications/initialized", json!({}));
    client.ok(
        "write_file",
        json!({"file_path": "/a.txt", "content": "one\n"}),
    );
    client.ok("read_file", json!({"file_path": "/a.txt"}));
    let took = edit_after(&mut client, |_| {});
    assert!(took < Duration::from_secs(10), "the edit waited {took:?}");
}
