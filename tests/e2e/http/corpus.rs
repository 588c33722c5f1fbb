//! The wire's malformed-input corpus (`tests/e2e/corpus/stdio.txt`, format in its header), its
//! "## session" section sent over Streamable HTTP: each case is one POST body in a session, and
//! must get the same JSON-RPC answer as over stdio (issue 10: "the same for the HTTP
//! transport's bodies"). Where HTTP differs by nature: a case stdio answers with nothing
//! (a notification, a response, a blank line) gets `202 Accepted` when it is a valid message
//! and `400` with a JSON-RPC error without id when it is not; a request is served after every
//! case.

use serde_json::{Value, json};

use super::client::{Client, Protocol, Server};
use super::{ALICE, token_file};

const CORPUS: &str = include_str!("../corpus/stdio.txt");

/// The line with each `\x{NN}` turned into that byte.
fn unescape(line: &str) -> Vec<u8> {
    let mut bytes = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("\\x{") {
        bytes.extend_from_slice(&rest.as_bytes()[..at]);
        let hex = &rest[at + 3..];
        let end = hex.find('}').unwrap();
        bytes.push(u8::from_str_radix(&hex[..end], 16).unwrap());
        rest = &hex[end + 1..];
    }
    bytes.extend_from_slice(rest.as_bytes());
    bytes
}

#[tokio::test]
async fn the_wire_corpus_gets_the_same_answers_over_http() {
    let (_t, tokens) = token_file();
    let server = Server::start(&["--token-file", &tokens, "--mount", "/=memory"], &[]).await;
    let mut client = Client::new(&server.url, Some(ALICE), Protocol::Session);
    assert_eq!(client.initialize().await.status, 200);
    let setup = client
        .call(
            "write_file",
            json!({"file_path": "/a.txt", "content": "one\n"}),
        )
        .await;
    assert!(!setup.is_error, "{}", setup.text);
    client
        .call("read_file", json!({"file_path": "/a.txt"}))
        .await;

    let session = CORPUS
        .split_once("\n## session\n")
        .expect("the corpus has a session section")
        .1;
    let mut checked = 0;
    for (number, line) in session.lines().enumerate() {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let origin = format!("stdio.txt, session line {}", number + 1);
        let (expect, text) = line.split_once('\t').unwrap_or((line, ""));
        let body = unescape(text);
        let reply = client
            .send_bytes("POST", body, &[("mcp-protocol-version", "2025-11-25")])
            .await;
        let (kind, id) = match expect.split_once('@') {
            Some((kind, id)) => (kind, serde_json::from_str::<Value>(id).unwrap()),
            None => (expect, Value::Null),
        };
        match kind {
            "none" => {
                if reply.status == 400 {
                    let message = reply.message();
                    assert_eq!(message["id"], Value::Null, "{origin}: {}", reply.body);
                    assert!(
                        message["error"]["code"].is_i64(),
                        "{origin}: {}",
                        reply.body
                    );
                } else {
                    assert_eq!(reply.status, 202, "{origin}: {}", reply.body);
                }
            }
            "ok" | "tool-error" => {
                assert_eq!(reply.status, 200, "{origin}: {}", reply.body);
                let message = reply.message();
                assert_eq!(message["id"], id, "{origin}: {message}");
                let result = message
                    .get("result")
                    .unwrap_or_else(|| panic!("{origin}: {message}"));
                let is_error = result["isError"].as_bool().unwrap_or(false);
                assert_eq!(is_error, kind == "tool-error", "{origin}: {message}");
            }
            code => {
                let code: i64 = code.parse().unwrap();
                let message = reply.message();
                assert_eq!(message["error"]["code"], code, "{origin}: {}", reply.body);
                assert_eq!(message["id"], id, "{origin}: {message}");
                assert!(
                    reply.status >= 200 && reply.status < 500,
                    "{origin}: {}",
                    reply.status
                );
            }
        }
        let after = client.request("ping", json!({})).await;
        assert!(
            after.get("result").is_some(),
            "{origin}: not served after it: {after}"
        );
        checked += 1;
    }
    assert!(checked > 100, "only {checked} cases");
    let read = client
        .call("read_file", json!({"file_path": "/a.txt"}))
        .await;
    assert_eq!(read.text, "     1\tone", "no case changed the file");
}
