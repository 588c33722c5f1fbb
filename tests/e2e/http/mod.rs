//! Streamable HTTP end to end: the `mountfs` binary with `--http`, driven by a small HTTP
//! client (`client.rs`) and by the official MCP Python SDK. Tokens, Origin, per-agent
//! workspaces (sessions and stateless principals), limits, malformed bodies, `/healthz`,
//! graceful shutdown, and two instances sharing one PostgreSQL mount.

pub mod client;
mod confirm;
mod conformance;
mod connections;
mod corpus;
mod grants;
mod oauth;
mod principals;
mod quota;
mod roots;

use std::time::Duration;

use client::{Client, Protocol, Server};
use serde_json::json;

const ALICE: &str = "alice-token-0123456789abcdef";
const BOB: &str = "bob-token-0123456789abcdef";

/// A token file naming alice and bob, kept alive with its directory.
fn token_file() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens");
    std::fs::write(&file, format!("# team\nalice {ALICE}\nbob {BOB}\n")).unwrap();
    (dir, file.to_string_lossy().into_owned())
}

/// A server with alice and bob, a shared disk mount at `/shared/` and per-workspace memory at
/// `/` and `/scratch/`.
async fn team_server(extra: &[&str]) -> (Server, tempfile::TempDir, tempfile::TempDir) {
    team_server_with_env(extra, &[]).await
}

async fn team_server_with_env(
    extra: &[&str],
    env: &[(&str, &str)],
) -> (Server, tempfile::TempDir, tempfile::TempDir) {
    let (tokens_dir, tokens) = token_file();
    let disk = tempfile::tempdir().unwrap();
    std::fs::write(disk.path().join("notes.txt"), "one\ntwo\nthree\n").unwrap();
    let shared = format!("/shared/=disk:{}", disk.path().display());
    let mut args = vec![
        "--token-file",
        &tokens,
        "--mount",
        "/=memory",
        "--mount",
        "/scratch/=memory",
        "--mount",
        &shared,
    ];
    args.extend_from_slice(extra);
    let server = Server::start(&args, env).await;
    (server, tokens_dir, disk)
}

async fn session_client(server: &Server, token: &str) -> Client {
    let mut client = Client::new(&server.url, Some(token), Protocol::Session);
    let reply = client.initialize().await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(
        client.session.is_some(),
        "no Mcp-Session-Id: {:?}",
        reply.headers
    );
    client
}

#[tokio::test]
async fn two_tokens_have_separate_scratch_and_ledgers_but_share_disk() {
    let (server, _t, _d) = team_server(&[]).await;
    let mut alice = session_client(&server, ALICE).await;
    let mut bob = session_client(&server, BOB).await;

    let w = alice
        .call(
            "write_file",
            json!({"file_path": "/scratch/mine.txt", "content": "alice\n"}),
        )
        .await;
    assert!(!w.is_error, "{}", w.text);
    let ls = bob.call("ls", json!({"path": "/scratch"})).await;
    assert!(
        !ls.text.contains("mine.txt"),
        "bob sees alice's scratch: {}",
        ls.text
    );
    let read = bob
        .call("read_file", json!({"file_path": "/scratch/mine.txt"}))
        .await;
    assert!(read.is_error, "{}", read.text);

    // The ledger is per workspace: alice's read does not let bob edit.
    let read = alice
        .call("read_file", json!({"file_path": "/shared/notes.txt"}))
        .await;
    assert!(!read.is_error, "{}", read.text);
    let edit = bob
        .call(
            "edit_file",
            json!({"file_path": "/shared/notes.txt", "old_string": "two", "new_string": "2"}),
        )
        .await;
    assert!(
        edit.is_error && edit.text.starts_with("Error: File has not been read yet"),
        "{}",
        edit.text
    );

    // One agent's change to a shared file makes the other's read stale.
    bob.call("read_file", json!({"file_path": "/shared/notes.txt"}))
        .await;
    let edit = bob
        .call(
            "edit_file",
            json!({"file_path": "/shared/notes.txt", "old_string": "two", "new_string": "2"}),
        )
        .await;
    assert!(!edit.is_error, "{}", edit.text);
    let write = alice
        .call(
            "write_file",
            json!({"file_path": "/shared/notes.txt", "content": "alice was here\n"}),
        )
        .await;
    assert!(
        write.is_error
            && write
                .text
                .starts_with("Error: File has been modified since it was read"),
        "{}",
        write.text
    );

    // Two sessions of one principal are two workspaces too.
    let mut alice2 = session_client(&server, ALICE).await;
    let ls = alice2.call("ls", json!({"path": "/scratch"})).await;
    assert!(!ls.text.contains("mine.txt"), "{}", ls.text);
}

#[tokio::test]
async fn a_request_without_a_valid_token_gets_401_and_touches_nothing() {
    // The most verbose log level, to show that no layer (ours or the MCP library's) logs a token.
    let (server, _t, disk) = team_server_with_env(&[], &[("RUST_LOG", "trace")]).await;
    for token in [
        None,
        Some("wrong-token-0123456789abcdef"),
        Some(&ALICE[..ALICE.len() - 1]),
    ] {
        let mut client = Client::new(&server.url, token, Protocol::Session);
        let reply = client.initialize().await;
        assert_eq!(reply.status, 401, "{}", reply.body);
        let challenge = reply.header("www-authenticate").unwrap();
        assert!(
            challenge.starts_with("Bearer realm=\"mountfs\""),
            "{challenge}"
        );
        assert_eq!(
            challenge.contains("invalid_token"),
            token.is_some(),
            "{challenge}"
        );
        assert_eq!(reply.message()["error"]["code"], -32000);
        // Stateless calls are refused the same way, before any tool runs.
        let mut stateless = Client::new(&server.url, token, Protocol::Stateless);
        let reply = stateless
            .request_reply(
                "tools/call",
                json!({"name": "write_file", "arguments": {"file_path": "/shared/x.txt", "content": "x"}}),
            )
            .await;
        assert_eq!(reply.status, 401, "{}", reply.body);
    }
    assert!(!disk.path().join("x.txt").exists());
    // A session id is no key: bob cannot use alice's session.
    let alice = session_client(&server, ALICE).await;
    let mut thief = Client::new(&server.url, Some(BOB), Protocol::Session);
    thief.session = alice.session.clone();
    let reply = thief.request_reply("tools/list", json!({})).await;
    assert_eq!(reply.status, 404, "{}", reply.body);
    assert_eq!(reply.message()["error"]["code"], -32001);
    let log = server.stderr();
    for token in [ALICE, BOB, "wrong-token-0123456789abcdef"] {
        assert!(!log.contains(token), "a token reached the log:\n{log}");
    }
}

#[tokio::test]
async fn a_foreign_origin_gets_403_and_an_allowed_one_passes() {
    let (server, _t, _d) = team_server(&["--allow-origin", "http://localhost:*"]).await;
    let mut client = Client::new(&server.url, Some(ALICE), Protocol::Session);
    client
        .extra_headers
        .push(("origin".into(), "https://evil.example".into()));
    let reply = client.initialize().await;
    assert_eq!(reply.status, 403, "{}", reply.body);
    assert!(
        reply.message()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--allow-origin")
    );

    // A loopback server also checks Host (DNS rebinding without an Origin header).
    client.extra_headers = vec![("host".into(), "evil.example:80".into())];
    let reply = client.initialize().await;
    assert_eq!(reply.status, 403, "{}", reply.body);

    client.extra_headers = vec![("origin".into(), "http://localhost:6274".into())];
    let reply = client.initialize().await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let ls = client.call("ls", json!({})).await;
    assert!(!ls.is_error, "{}", ls.text);
}

#[tokio::test]
async fn a_stateless_sequence_keeps_read_before_edit_per_principal() {
    let (server, _t, disk) = team_server(&[]).await;
    let mut alice = Client::new(&server.url, Some(ALICE), Protocol::Stateless);
    let mut bob = Client::new(&server.url, Some(BOB), Protocol::Stateless);
    let discover = alice.request("server/discover", json!({})).await;
    assert!(discover.get("result").is_some(), "{discover}");

    let edit = json!({"file_path": "/shared/notes.txt", "old_string": "three", "new_string": "3"});
    let early = alice.call("edit_file", edit.clone()).await;
    assert!(
        early.is_error && early.text.starts_with("Error: File has not been read yet"),
        "{}",
        early.text
    );
    let read = alice
        .call("read_file", json!({"file_path": "/shared/notes.txt"}))
        .await;
    assert!(!read.is_error, "{}", read.text);
    // Each request is its own HTTP exchange with no session, yet alice's read counts for her...
    let done = alice.call("edit_file", edit).await;
    assert!(!done.is_error, "{}", done.text);
    assert_eq!(
        std::fs::read_to_string(disk.path().join("notes.txt")).unwrap(),
        "one\ntwo\n3\n"
    );
    // ...and not for bob, and her memory files are hers.
    let bob_edit = bob
        .call(
            "edit_file",
            json!({"file_path": "/shared/notes.txt", "old_string": "one", "new_string": "1"}),
        )
        .await;
    assert!(
        bob_edit.is_error
            && bob_edit
                .text
                .starts_with("Error: File has not been read yet"),
        "{}",
        bob_edit.text
    );
    alice
        .call(
            "write_file",
            json!({"file_path": "/scratch/a.txt", "content": "a"}),
        )
        .await;
    let again = alice
        .call("read_file", json!({"file_path": "/scratch/a.txt"}))
        .await;
    assert!(!again.is_error, "{}", again.text);
    let theirs = bob
        .call("read_file", json!({"file_path": "/scratch/a.txt"}))
        .await;
    assert!(theirs.is_error, "{}", theirs.text);
    // Undo history is per principal too.
    let undo = alice
        .call("undo_edit", json!({"file_path": "/shared/notes.txt"}))
        .await;
    assert!(!undo.is_error, "{}", undo.text);
    assert_eq!(
        std::fs::read_to_string(disk.path().join("notes.txt")).unwrap(),
        "one\ntwo\nthree\n"
    );
}

#[tokio::test]
async fn malformed_and_oversized_bodies_get_jsonrpc_errors_and_the_server_keeps_serving() {
    let (server, _t, _d) = team_server(&["--max-body", "2000"]).await;
    let mut client = session_client(&server, ALICE).await;
    let cases = [
        ("{\"jsonrpc\":", 400, -32700),
        ("\u{0}\u{1}", 400, -32700),
        (
            "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]",
            400,
            -32600,
        ),
        ("{\"jsonrpc\":\"2.0\",\"id\":1}", 400, -32600),
        ("{\"id\":1,\"method\":\"ping\"}", 400, -32600),
        (
            "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{\"name\":5}}",
            400,
            -32602,
        ),
    ];
    for (body, status, code) in cases {
        let reply = client
            .send("POST", body, &[("mcp-protocol-version", "2025-11-25")])
            .await;
        assert_eq!(reply.status, status, "{body}: {}", reply.body);
        assert_eq!(
            reply.message()["error"]["code"],
            code,
            "{body}: {}",
            reply.body
        );
    }
    let invalid_params = client
        .send(
            "POST",
            "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{\"name\":5}}",
            &[],
        )
        .await;
    assert_eq!(invalid_params.message()["id"], 7);

    let big = json!({"file_path": "/big.txt", "content": "x".repeat(5000)});
    let reply = client
        .request_reply(
            "tools/call",
            json!({"name": "write_file", "arguments": big}),
        )
        .await;
    assert_eq!(reply.status, 413, "{}", reply.body);
    let message = reply.message()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.contains("limit of 2000 bytes (--max-body)"),
        "{message}"
    );
    let ls = client.call("ls", json!({})).await;
    assert!(!ls.is_error && !ls.text.contains("big.txt"), "{}", ls.text);
}

#[tokio::test]
async fn sessions_are_capped_and_closing_one_makes_room() {
    let (server, _t, _d) = team_server(&["--max-sessions", "2"]).await;
    let mut first = session_client(&server, ALICE).await;
    let _second = session_client(&server, BOB).await;
    let mut third = Client::new(&server.url, Some(ALICE), Protocol::Session);
    let reply = third.initialize().await;
    assert_eq!(reply.status, 503, "{}", reply.body);
    assert_eq!(reply.header("retry-after"), Some("30"));
    assert!(reply.body.contains("--max-sessions"), "{}", reply.body);

    let closed = first.send("DELETE", "", &[]).await;
    assert_eq!(closed.status, 200, "{}", closed.body);
    let reply = first.request_reply("tools/list", json!({})).await;
    assert_eq!(
        reply.status, 404,
        "a closed session is gone: {}",
        reply.body
    );
    let reply = third.initialize().await;
    assert_eq!(reply.status, 200, "{}", reply.body);
}

#[tokio::test]
async fn idle_workspaces_expire_with_their_session() {
    let (server, _t, _d) = team_server(&["--idle-timeout", "2s"]).await;
    let mut client = session_client(&server, ALICE).await;
    let written = client
        .call(
            "write_file",
            json!({"file_path": "/scratch/t.txt", "content": "t"}),
        )
        .await;
    assert!(!written.is_error, "{}", written.text);
    tokio::time::sleep(Duration::from_millis(4500)).await;
    let reply = client.request_reply("tools/list", json!({})).await;
    assert_eq!(reply.status, 404, "{}", reply.body);
    let reply = client.initialize().await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let read = client
        .call("read_file", json!({"file_path": "/scratch/t.txt"}))
        .await;
    assert!(read.is_error, "a new session starts empty: {}", read.text);
}

#[tokio::test]
async fn a_non_loopback_address_without_tokens_is_refused_at_start() {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_mountfs"))
        .args(["--http", "0.0.0.0:0", "--mount", "/=memory"])
        .env_remove("MOUNTFS_TOKEN")
        .output()
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("needs configured tokens: pass --token-file"),
        "{stderr}"
    );
}

#[tokio::test]
async fn without_tokens_one_is_generated_shown_once_and_required() {
    let server = Server::start(&["--mount", "/=memory"], &[]).await;
    let log = server.stderr();
    let config_start = log.find("{\n").expect("client configuration printed");
    let config_end = log[config_start..].find("\n}\n").unwrap() + config_start + 2;
    let config: serde_json::Value = serde_json::from_str(&log[config_start..config_end]).unwrap();
    let entry = &config["mcpServers"]["mountfs"];
    assert_eq!(entry["type"], "http");
    assert_eq!(entry["url"], server.url.as_str());
    let header = entry["headers"]["Authorization"].as_str().unwrap();
    let token = header.strip_prefix("Bearer ").unwrap();
    assert_eq!(token.len(), 64);
    assert_eq!(
        log.matches(token).count(),
        1,
        "the token is shown exactly once"
    );

    let mut anonymous = Client::new(&server.url, None, Protocol::Session);
    assert_eq!(anonymous.initialize().await.status, 401);
    let mut client = Client::new(&server.url, Some(token), Protocol::Session);
    assert_eq!(client.initialize().await.status, 200);
    let ls = client.call("ls", json!({})).await;
    assert!(!ls.is_error, "{}", ls.text);
    assert_eq!(server.stderr().matches(token).count(), 1);

    // MOUNTFS_TOKEN is the one token when set.
    let server = Server::start(&["--mount", "/=memory"], &[("MOUNTFS_TOKEN", ALICE)]).await;
    assert!(
        !server.stderr().contains("generated"),
        "{}",
        server.stderr()
    );
    let mut client = Client::new(&server.url, Some(ALICE), Protocol::Session);
    assert_eq!(client.initialize().await.status, 200);
}

#[tokio::test]
async fn healthz_answers_and_sigterm_lets_calls_in_flight_finish() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut server, _t, disk) = team_server(&[]).await;
    let health = plain_get(&format!("{}/healthz", server.base())).await;
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");

    // A call whose body is still arriving when SIGTERM comes.
    let mut client = Client::new(&server.url, Some(ALICE), Protocol::Stateless);
    client.request("server/discover", json!({})).await;
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {
        "name": "write_file",
        "arguments": {"file_path": "/shared/late.txt", "content": "landed\n"},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}
        }
    }})
    .to_string();
    let authority = server.base().trim_start_matches("http://").to_owned();
    let mut slow = tokio::net::TcpStream::connect(&authority).await.unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nhost: {authority}\r\nauthorization: Bearer {ALICE}\r\naccept: application/json, text/event-stream\r\ncontent-type: application/json\r\nmcp-protocol-version: 2026-07-28\r\nmcp-method: tools/call\r\nmcp-name: write_file\r\nconnection: close\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    slow.write_all(head.as_bytes()).await.unwrap();
    slow.write_all(&body.as_bytes()[..10]).await.unwrap();
    // Time for the server to take the request in (it counts as in flight from its headers on).
    tokio::time::sleep(Duration::from_millis(1000)).await;

    let pid = server.child.id().unwrap() as i32;
    // SAFETY: kill(2) on the child this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    // Once the signal is handled, /healthz turns 503 (polled: a loaded machine may be slow).
    let mut refused = String::new();
    for _ in 0..100 {
        refused = plain_get(&format!("{}/healthz", server.base())).await;
        if refused.starts_with("HTTP/1.1 503") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");
    assert!(
        server.child.try_wait().unwrap().is_none(),
        "exited with a call in flight"
    );

    slow.write_all(&body.as_bytes()[10..]).await.unwrap();
    let mut answer = String::new();
    slow.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("Created /shared/late.txt"), "{answer}");
    assert_eq!(
        std::fs::read_to_string(disk.path().join("late.txt")).unwrap(),
        "landed\n"
    );
    let status = tokio::time::timeout(Duration::from_secs(10), server.child.wait())
        .await
        .expect("the server exits once drained")
        .unwrap();
    assert!(status.success(), "{status:?}\n{}", server.stderr());
}

/// One plain GET with `Connection: close`; the whole raw answer.
async fn plain_get(url: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.trim_start_matches("http://");
    let (authority, path) = rest.split_at(rest.find('/').unwrap());
    let mut stream = tokio::net::TcpStream::connect(authority).await.unwrap();
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nhost: {authority}\r\nconnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await
        .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    answer
}

#[tokio::test]
async fn the_official_python_sdk_runs_every_tool_over_http_as_two_agents() {
    let Some(python) = crate::support::python::sdk("the official MCP Python SDK over HTTP") else {
        return;
    };
    let (server, _t, _d) = team_server(&[]).await;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/python/sdk_http_session.py"
    );
    let output = tokio::process::Command::from(python)
        .args([script, &server.url, ALICE, BOB])
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "python SDK session failed:\n{stdout}\n{stderr}\nserver:\n{}",
        server.stderr()
    );
    assert!(stdout.contains("session ok: every tool"), "{stdout}");
    assert!(stdout.contains("workspaces ok"), "{stdout}");
    assert!(stdout.contains("stateless ok"), "{stdout}");
}

#[tokio::test]
async fn two_instances_on_one_postgres_mount_lose_no_reported_edit() {
    let Some(url) =
        crate::support::postgres_url("two_instances_on_one_postgres_mount_lose_no_reported_edit")
    else {
        return;
    };
    let namespace = crate::support::PostgresNamespace::new(&url, "http-two-instances");
    let (_t, tokens) = token_file();
    let mount = format!("/=store:postgres:{url},namespace={}", namespace.name);
    let args = ["--token-file", tokens.as_str(), "--mount", mount.as_str()];
    let first = Server::start(&args, &[]).await;
    let second = Server::start(&args, &[]).await;

    const CLIENTS: usize = 8;
    const ROUNDS: usize = 4;
    let initial: String = (0..CLIENTS).map(|i| format!("line {i}: v0\n")).collect();
    let mut seed = session_client(&first, ALICE).await;
    let created = seed
        .call(
            "write_file",
            json!({"file_path": "/shared.txt", "content": initial}),
        )
        .await;
    assert!(!created.is_error, "{}", created.text);

    let mut tasks = Vec::new();
    for i in 0..CLIENTS {
        let url = if i % 2 == 0 {
            first.url.clone()
        } else {
            second.url.clone()
        };
        let token = if i % 4 < 2 { ALICE } else { BOB };
        tasks.push(tokio::spawn(async move {
            let mut client = Client::new(&url, Some(token), Protocol::Session);
            assert_eq!(client.initialize().await.status, 200);
            let mut done = 0;
            let mut attempts = 0;
            while done < ROUNDS {
                attempts += 1;
                assert!(attempts < 200, "client {i} cannot land its edits");
                client
                    .call("read_file", json!({"file_path": "/shared.txt"}))
                    .await;
                let edit = client
                    .call(
                        "edit_file",
                        json!({
                            "file_path": "/shared.txt",
                            "old_string": format!("line {i}: v{done}\n"),
                            "new_string": format!("line {i}: v{}\n", done + 1),
                        }),
                    )
                    .await;
                if !edit.is_error {
                    done += 1;
                } else {
                    assert!(
                        edit.text.contains("modified since"),
                        "client {i}: {}",
                        edit.text
                    );
                }
            }
            done
        }));
    }
    let mut reported = Vec::new();
    for task in tasks {
        reported.push(task.await.unwrap());
    }
    let mut check = session_client(&second, BOB).await;
    let read = check
        .call("read_file", json!({"file_path": "/shared.txt"}))
        .await;
    for (i, done) in reported.iter().enumerate() {
        let expected = format!("line {i}: v{done}");
        assert!(
            read.text.contains(&expected),
            "lost edit: {expected} not in\n{}",
            read.text
        );
    }
}

/// Two instances on one PostgreSQL mount, 8 MCP sessions (agents) on each, every session
/// reading the shared file once and then editing its own lines, re-reading only after a stale
/// error, as an agent would. Every edit reported done is in the file; stale errors are counted,
/// and so are the servers' own retries after a lost compare-and-swap (`write_attempts`).
/// Measured 2026-11-23 (16 sessions × 25 edits = 400 edits): 3,225 and 3,301 stale errors in
/// two runs before stale-but-safe edits; 0, 0 and 1 in three runs after (with 929–1,374
/// server-side retries instead).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_eight_sessions_each_edit_distinct_lines_without_stale_errors() {
    const INSTANCES: usize = 2;
    const SESSIONS: usize = 8;
    const EDITS: usize = 25;
    const LINES: usize = INSTANCES * SESSIONS * EDITS;
    let Some(url) = crate::support::postgres_url(
        "two_instances_eight_sessions_each_edit_distinct_lines_without_stale_errors",
    ) else {
        return;
    };
    let namespace = crate::support::PostgresNamespace::new(&url, "http-sixteen-sessions");
    let (_t, tokens) = token_file();
    let mount = format!("/=store:postgres:{url},namespace={}", namespace.name);
    let args = ["--token-file", tokens.as_str(), "--mount", mount.as_str()];
    let servers = [
        Server::start(&args, &[]).await,
        Server::start(&args, &[]).await,
    ];
    let initial: String = (0..LINES).map(|i| format!("line {i:03}: todo\n")).collect();
    let mut seed = session_client(&servers[0], ALICE).await;
    let created = seed
        .call(
            "write_file",
            json!({"file_path": "/shared.txt", "content": initial}),
        )
        .await;
    assert!(!created.is_error, "{}", created.text);

    let mut tasks = Vec::new();
    for (instance, server) in servers.iter().enumerate() {
        for session in 0..SESSIONS {
            let url = server.url.clone();
            let token = if session % 2 == 0 { ALICE } else { BOB };
            tasks.push(tokio::spawn(async move {
                let mut client = Client::new(&url, Some(token), Protocol::Session);
                assert_eq!(client.initialize().await.status, 200);
                let read = json!({"file_path": "/shared.txt"});
                client.call("read_file", read.clone()).await;
                let (mut stale, mut retries) = (0usize, 0u64);
                for k in 0..EDITS {
                    let line = (instance * SESSIONS + session) * EDITS + k;
                    let edit = json!({
                        "file_path": "/shared.txt",
                        "old_string": format!("line {line:03}: todo"),
                        "new_string": format!("line {line:03}: done by {instance}.{session}"),
                    });
                    loop {
                        assert!(stale < 200 * EDITS, "session {instance}.{session} is stuck");
                        let answer = client.call("edit_file", edit.clone()).await;
                        if !answer.is_error {
                            retries +=
                                answer.structured["write_attempts"].as_u64().unwrap_or(1) - 1;
                            break;
                        }
                        assert!(answer.text.contains("modified since"), "{}", answer.text);
                        stale += 1;
                        client.call("read_file", read.clone()).await;
                    }
                }
                (stale, retries)
            }));
        }
    }
    let (mut stale, mut retries) = (0usize, 0u64);
    for task in tasks {
        let (s, r) = task.await.unwrap();
        stale += s;
        retries += r;
    }
    let store = mountfs::storage::store::PostgresStore::connect(&url)
        .await
        .unwrap();
    let item = mountfs::storage::store::Store::get(
        &store,
        &mountfs::storage::store::Namespace::new(&namespace.name).unwrap(),
        "/shared.txt",
    )
    .await
    .unwrap()
    .unwrap();
    let text = String::from_utf8(item.content).unwrap();
    println!(
        "{LINES} edits by {} sessions on {INSTANCES} instances: {stale} stale errors, {retries} \
         server retries after a lost compare-and-swap",
        INSTANCES * SESSIONS
    );
    for instance in 0..INSTANCES {
        for session in 0..SESSIONS {
            for k in 0..EDITS {
                let line = (instance * SESSIONS + session) * EDITS + k;
                let expected = format!("line {line:03}: done by {instance}.{session}\n");
                assert!(text.contains(&expected), "lost edit: {expected}");
            }
        }
    }
    assert!(
        stale * 100 <= LINES,
        "{stale} stale errors for {LINES} edits whose text nobody else touched"
    );
}

#[tokio::test]
async fn concurrent_initializations_never_exceed_the_session_limit() {
    let (server, _t, _d) = team_server(&["--max-sessions", "3"]).await;
    let mut tasks = Vec::new();
    for _ in 0..12 {
        let url = server.url.clone();
        tasks.push(tokio::spawn(async move {
            let mut client = Client::new(&url, Some(ALICE), Protocol::Session);
            let status = client.initialize().await.status;
            (status, client)
        }));
    }
    let mut opened = Vec::new();
    for task in tasks {
        let (status, client) = task.await.unwrap();
        assert!(status == 200 || status == 503, "{status}");
        if status == 200 {
            opened.push(client);
        }
    }
    assert_eq!(opened.len(), 3, "exactly the limit is opened");
    for client in &mut opened {
        let ls = client.call("ls", json!({})).await;
        assert!(!ls.is_error, "{}", ls.text);
    }
}

#[tokio::test]
async fn parallel_edits_from_one_session_all_land() {
    let (server, _t, disk) = team_server(&[]).await;
    let lines: String = (0..16).map(|i| format!("line {i}\n")).collect();
    std::fs::write(disk.path().join("many.txt"), &lines).unwrap();
    let mut first = session_client(&server, ALICE).await;
    first
        .call("read_file", json!({"file_path": "/shared/many.txt"}))
        .await;
    let session = first.session.clone();
    let mut tasks = Vec::new();
    for i in 0..16 {
        let (url, session) = (server.url.clone(), session.clone());
        tasks.push(tokio::spawn(async move {
            // Each on its own connection, all in one MCP session.
            let mut client = Client::new(&url, Some(ALICE), Protocol::Session);
            client.session = session;
            client.next_id = 1000 * (i as u64 + 1);
            client
                .call(
                    "edit_file",
                    json!({"file_path": "/shared/many.txt", "old_string": format!("line {i}\n"), "new_string": format!("edited {i}\n")}),
                )
                .await
        }));
    }
    let all = tokio::time::timeout(Duration::from_secs(30), async {
        let mut answers = Vec::new();
        for task in tasks {
            answers.push(task.await.unwrap());
        }
        answers
    })
    .await
    .expect("no edit waits for a turn that never comes");
    for answer in all {
        assert!(!answer.is_error, "{}", answer.text);
    }
    let expected: String = (0..16).map(|i| format!("edited {i}\n")).collect();
    assert_eq!(
        std::fs::read_to_string(disk.path().join("many.txt")).unwrap(),
        expected
    );
}

#[tokio::test]
async fn a_team_server_on_all_interfaces_serves_configured_tokens_only() {
    let (_t, tokens) = token_file();
    let server = Server::start_at(
        "0.0.0.0:0",
        &["--token-file", &tokens, "--mount", "/=memory"],
        &[],
    )
    .await;
    assert!(server.url.starts_with("http://0.0.0.0:"), "{}", server.url);
    // Reached under a name that is not loopback (the Host check is for loopback servers).
    let url = server.url.replace("0.0.0.0", "127.0.0.1");
    let mut client = Client::new(&url, Some(BOB), Protocol::Session);
    client.extra_headers = vec![("host".into(), "mountfs.internal.example:8765".into())];
    let reply = client.initialize().await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let ls = client.call("ls", json!({})).await;
    assert!(!ls.is_error, "{}", ls.text);
    let mut stranger = Client::new(&url, None, Protocol::Session);
    assert_eq!(stranger.initialize().await.status, 401);
}

#[tokio::test]
async fn a_body_trickling_in_gets_408_and_does_not_hold_shutdown() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut server, _t, _d) = team_server(&["--body-timeout", "1s"]).await;
    let authority = server.base().trim_start_matches("http://").to_owned();
    let mut slow = tokio::net::TcpStream::connect(&authority).await.unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nhost: {authority}\r\nauthorization: Bearer {ALICE}\r\naccept: application/json, text/event-stream\r\ncontent-type: application/json\r\nmcp-protocol-version: 2026-07-28\r\ncontent-length: 1000\r\n\r\n{{\"jsonrpc\""
    );
    slow.write_all(head.as_bytes()).await.unwrap();
    // The rest of the body never comes: the server answers 408 on its own.
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(20), slow.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    assert!(read.is_ok(), "no answer to a stalled body: {answer}");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("--body-timeout"), "{answer}");

    // A second stalled body does not keep SIGTERM from ending the server.
    let mut stalled = tokio::net::TcpStream::connect(&authority).await.unwrap();
    stalled.write_all(head.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pid = server.child.id().unwrap() as i32;
    // SAFETY: kill(2) on the child this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let status = tokio::time::timeout(Duration::from_secs(20), server.child.wait())
        .await
        .expect("the server exits although a body is stalled")
        .unwrap();
    assert!(status.success(), "{status:?}\n{}", server.stderr());
    drop(stalled);
}

/// Without --mount and with --http-roots-under, each MCP session mounts its own client's roots,
/// and follows their changes (issue 12), with the official MCP Python SDK's Streamable HTTP
/// client as both agents.
#[tokio::test]
async fn each_http_session_mounts_its_own_clients_roots() {
    let Some(python) =
        crate::support::python::sdk("roots over HTTP with the official MCP Python SDK")
    else {
        return;
    };
    let top = tempfile::tempdir().unwrap();
    let dir = |name: &str, file: &str, text: &str| {
        let dir = top.path().join(name);
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join(file), text).unwrap();
        dir.to_string_lossy().into_owned()
    };
    let alpha = dir("alpha", "a.txt", "from alpha\n");
    let beta = dir("beta", "b.txt", "from beta\n");
    let gamma = dir("gamma", "g.txt", "from gamma\n");
    let cwd = dir("cwd", "cwd-only.txt", "cwd\n");
    let data = top.path().join("data").to_string_lossy().into_owned();
    let home = dir("home", "private.txt", "secret\n");
    let env = [
        ("MOUNTFS_TOKEN", ALICE),
        ("XDG_DATA_HOME", data.as_str()),
        ("HOME", home.as_str()),
    ];
    // Over HTTP, client roots are mounted only inside --http-roots-under (issue 25).
    let under = top.path().to_string_lossy().into_owned();
    let server = Server::start_in(
        Some(std::path::Path::new(&cwd)),
        "127.0.0.1:0",
        &["--http-roots-under", &under],
        &env,
    )
    .await;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/python/sdk_http_roots.py"
    );
    let output = tokio::process::Command::from(python)
        .args([script, &server.url, ALICE, &alpha, &beta, &gamma])
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "python SDK roots over HTTP failed:\n{stdout}\n{stderr}\nserver:\n{}",
        server.stderr()
    );
    assert!(stdout.contains("http roots ok"), "{stdout}");
}

#[tokio::test]
async fn the_official_python_sdk_hears_changes_from_every_source() {
    let Some(python) =
        crate::support::python::sdk("subscriptions with the official MCP Python SDK")
    else {
        return;
    };
    let Some(url) = crate::support::postgres_url("subscriptions with the official MCP Python SDK")
    else {
        return;
    };
    let namespace = crate::support::PostgresNamespace::new(&url, "sdk-subscriptions");
    let pg_mount = format!("store:postgres:{url},namespace={}", namespace.name);
    let pg = format!("/pg/={pg_mount}");
    let (server, _t, disk) = team_server(&["--mount", &pg]).await;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/python/sdk_subscriptions.py"
    );
    let output = tokio::process::Command::from(python)
        .arg(script)
        .args([&server.url, ALICE, BOB])
        .arg(disk.path())
        .arg(env!("CARGO_BIN_EXE_mountfs"))
        .arg(&pg_mount)
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "python SDK subscriptions failed:\n{stdout}\n{stderr}\nserver:\n{}",
        server.stderr()
    );
    assert!(stdout.contains("subscriptions ok"), "{stdout}");
}

/// What bob's command printed when it tried alice's files: the token file, a directory of
/// hers outside every mount, the server's data directory (store and audit databases).
async fn bob_tries_alice_files(token_lines: &str) -> (String, tempfile::TempDir) {
    let outside = crate::execute::outside_tmp();
    let tokens = outside.path().join("tokens");
    std::fs::write(&tokens, token_lines).unwrap();
    std::fs::create_dir(outside.path().join("alice")).unwrap();
    std::fs::write(outside.path().join("alice/notes.txt"), "alice-private").unwrap();
    let data = outside.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let disk = tempfile::tempdir().unwrap();
    let root = format!("/=disk:{}", disk.path().display());
    let memories = format!(
        "/memories/=store:sqlite:{}",
        data.join("mountfs/memories.db").display()
    );
    let args = [
        "--token-file",
        tokens.to_str().unwrap(),
        "--allow-exec",
        "--mount",
        &root,
        "--mount",
        &memories,
    ];
    let server = Server::start(&args, &[("XDG_DATA_HOME", data.to_str().unwrap())]).await;
    let mut alice = session_client(&server, ALICE).await;
    let wrote = alice
        .call(
            "write_file",
            json!({"file_path": "/memories/a.txt", "content": "alice-memory\n"}),
        )
        .await;
    assert!(!wrote.is_error, "{}", wrote.text);
    let token = if token_lines.contains("bob") {
        BOB
    } else {
        ALICE
    };
    let mut bob = session_client(&server, token).await;
    let command = format!(
        "cat {t}; cat {o}/alice/notes.txt; cat {d}/mountfs/memories.db {d}/mountfs/audit.db; \
         grep -ra alice {d}; test -r /etc/passwd && echo etc-ok; test -x /usr/bin/env && echo usr-ok",
        t = tokens.display(),
        o = outside.path().display(),
        d = data.display(),
    );
    let answer = bob.call("execute", json!({ "command": command })).await;
    assert!(!answer.is_error, "{}", answer.text);
    (answer.text, outside)
}

#[tokio::test]
async fn with_two_principals_a_command_cannot_read_another_principals_files_or_tokens() {
    if let Err(error) = mountfs::storage::exec::sandbox::probe() {
        crate::skips::record("the execute sandbox", &error.to_string());
        return;
    }
    if crate::execute::outside_tmp().path().starts_with("/tmp") {
        crate::skips::record(
            "two principals' files apart",
            "no host directory outside /tmp to put them in (no /var/tmp, checkout under /tmp)",
        );
        return;
    }
    let (text, _dir) = bob_tries_alice_files(&format!("alice {ALICE}\nbob {BOB}\n")).await;
    for secret in [ALICE, BOB, "alice-private", "alice-memory"] {
        assert!(!text.contains(secret), "{secret} leaked: {text}");
    }
    assert!(
        text.contains("etc-ok\nusr-ok"),
        "a build's reads work: {text}"
    );
    // With one principal the host is readable (there is no one else's data to keep apart);
    // only the server's own files stay hidden.
    let (text, _dir) = bob_tries_alice_files(&format!("alice {ALICE}\n")).await;
    assert!(text.contains("alice-private"), "{text}");
    for secret in [ALICE, "alice-memory"] {
        assert!(!text.contains(secret), "{secret} leaked: {text}");
    }
}
