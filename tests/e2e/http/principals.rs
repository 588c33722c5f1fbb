//! One principal's private work stays its own (issue 41): with alice and bob in a token file,
//! bob's `history` (list and detail) shows alice's changes of shared mounts only — never her
//! memory mounts, her overlay layer or her commands — over sessions and stateless requests,
//! and bob's subscription to `mountfs:///` is not told of alice's uncommitted overlay file.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

use super::client::{Client, Protocol, Server};
use super::{ALICE, BOB, session_client, token_file};

/// A server with alice and bob: memory at `/scratch/`, a shared disk at `/shared/`, an overlay
/// mount at `/o/`, an audit log and execute (unsandboxed: this is about the log).
async fn server() -> (Server, Vec<tempfile::TempDir>) {
    let (tokens_dir, tokens) = token_file();
    let shared = tempfile::tempdir().unwrap();
    let lower = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let shared_mount = format!("/shared/=disk:{}", shared.path().display());
    let overlay = format!("/o/=disk:{},overlay", lower.path().display());
    let audit = format!("sqlite:{}", logs.path().join("audit.db").display());
    let server = Server::start(
        &[
            "--token-file",
            &tokens,
            "--mount",
            "/scratch/=memory",
            "--mount",
            &shared_mount,
            "--mount",
            &overlay,
            "--audit",
            &audit,
            "--allow-exec=unsandboxed",
        ],
        &[],
    )
    .await;
    (server, vec![tokens_dir, shared, lower, logs])
}

/// The id of the entry whose listing line names `needle`, in `listing`.
fn id_of(listing: &str, needle: &str) -> i64 {
    let line = listing
        .lines()
        .find(|line| line.contains(needle))
        .unwrap_or_else(|| panic!("no entry for {needle} in: {listing}"));
    line.trim_start_matches('#')
        .split(' ')
        .next()
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("no id in {line}"))
}

async fn write(client: &mut Client, path: &str, content: &str) {
    let answer = client
        .call("write_file", json!({"file_path": path, "content": content}))
        .await;
    assert!(!answer.is_error, "{path}: {}", answer.text);
}

#[tokio::test]
async fn history_shows_another_principal_only_its_shared_changes() {
    let (server, _dirs) = server().await;
    let mut alice = session_client(&server, ALICE).await;
    let mut alice_stateless = Client::new(&server.url, Some(ALICE), Protocol::Stateless);
    write(&mut alice, "/scratch/alice.md", "alice-memory-secret\n").await;
    write(&mut alice, "/o/draft.md", "alice-layer-secret\n").await;
    let run = alice
        .call(
            "execute",
            json!({"command": "echo alice-command-secret", "cwd": "/shared"}),
        )
        .await;
    assert!(!run.is_error, "{}", run.text);
    write(&mut alice, "/shared/public.md", "public\n").await;
    write(
        &mut alice_stateless,
        "/scratch/stateless.md",
        "alice-stateless-secret\n",
    )
    .await;

    // Alice sees her own work, each workspace its own.
    let hers = alice.call("history", json!({"limit": 50})).await;
    for path in ["/scratch/alice.md", "/o/draft.md", "/shared/public.md"] {
        assert!(hers.text.contains(path), "{path}: {}", hers.text);
    }
    assert!(hers.text.contains("alice-command-secret"), "{}", hers.text);
    let stateless_hers = alice_stateless.call("history", json!({})).await;
    assert!(
        stateless_hers.text.contains("/scratch/stateless.md"),
        "{}",
        stateless_hers.text
    );
    let private_ids = [
        id_of(&hers.text, "/scratch/alice.md"),
        id_of(&hers.text, "/o/draft.md"),
        id_of(&hers.text, "alice-command-secret"),
        id_of(&stateless_hers.text, "/scratch/stateless.md"),
    ];
    let public_id = id_of(&hers.text, "/shared/public.md");
    let detail = alice.call("history", json!({"id": private_ids[0]})).await;
    assert!(
        detail.text.contains("alice-memory-secret"),
        "{}",
        detail.text
    );

    let mut bob = session_client(&server, BOB).await;
    let mut bob_stateless = Client::new(&server.url, Some(BOB), Protocol::Stateless);
    for (how, bob) in [("session", &mut bob), ("stateless", &mut bob_stateless)] {
        let listing = bob.call("history", json!({"limit": 50})).await;
        assert!(!listing.is_error, "{how}: {}", listing.text);
        assert!(
            listing.text.contains("/shared/public.md"),
            "{how}: {}",
            listing.text
        );
        for secret in [
            "/scratch/alice.md",
            "/o/draft.md",
            "alice-command-secret",
            "/scratch/stateless.md",
        ] {
            assert!(
                !listing.text.contains(secret),
                "{how}: bob sees {secret}: {}",
                listing.text
            );
        }
        let structured = listing.structured.to_string();
        assert!(!structured.contains("alice.md"), "{how}: {structured}");
        for id in private_ids {
            let detail = bob.call("history", json!({"id": id})).await;
            assert!(detail.is_error, "{how}: bob reads #{id}: {}", detail.text);
            assert_eq!(
                detail.text,
                format!(
                    "Error: no audit log entry #{id}: it was never written, or pruned (--audit-keep). Call history without id to list the entries"
                ),
                "{how}"
            );
        }
        let detail = bob.call("history", json!({"id": public_id})).await;
        assert!(
            !detail.is_error && detail.text.contains("+public"),
            "{how}: {}",
            detail.text
        );
    }
}

/// Opens `session`'s GET event stream as `token`; every message on it goes to the receiver.
pub(super) async fn event_stream(
    server: &Server,
    token: &str,
    session: &str,
) -> tokio::sync::mpsc::UnboundedReceiver<Value> {
    let authority = server.base().trim_start_matches("http://").to_owned();
    let stream = tokio::net::TcpStream::connect(&authority).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let request = http::Request::builder()
        .method("GET")
        .uri(server.url.clone())
        .header("host", authority)
        .header("accept", "text/event-stream")
        .header("authorization", format!("Bearer {token}"))
        .header("mcp-session-id", session)
        .header("mcp-protocol-version", "2025-11-25")
        .body(Empty::<Bytes>::new())
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.status(), 200, "GET event stream");
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let _sender = sender;
        let mut body = response.into_body();
        let mut pending = String::new();
        while let Some(Ok(frame)) = body.frame().await {
            let Ok(data) = frame.into_data() else {
                continue;
            };
            pending.push_str(&String::from_utf8_lossy(&data));
            while let Some(end) = pending.find('\n') {
                let line: String = pending.drain(..=end).collect();
                if let Some(message) = line
                    .trim()
                    .strip_prefix("data:")
                    .and_then(|data| serde_json::from_str::<Value>(data.trim()).ok())
                    && tx.send(message).is_err()
                {
                    return;
                }
            }
        }
    });
    rx
}

#[tokio::test]
async fn a_subscription_is_not_told_of_another_workspaces_overlay_or_memory_files() {
    let (server, _dirs) = server().await;
    let mut alice = session_client(&server, ALICE).await;
    let mut alice_stateless = Client::new(&server.url, Some(ALICE), Protocol::Stateless);
    let mut bob = session_client(&server, BOB).await;
    let mut events = event_stream(&server, BOB, bob.session.as_deref().unwrap()).await;
    let subscribed = bob
        .request("resources/subscribe", json!({"uri": "mountfs:///"}))
        .await;
    assert!(subscribed.get("result").is_some(), "{subscribed}");

    write(&mut alice, "/o/alice-draft.md", "draft\n").await;
    write(&mut alice, "/scratch/alice-note.md", "note\n").await;
    write(&mut alice_stateless, "/o/stateless-draft.md", "draft\n").await;
    // Then a shared file: once bob hears of it, he would have heard of those before it.
    write(&mut alice, "/shared/public.md", "public\n").await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    loop {
        let left = deadline
            .checked_duration_since(Instant::now())
            .unwrap_or_else(|| panic!("bob never heard of /shared/public.md: {seen:?}"));
        let Ok(Some(message)) = tokio::time::timeout(left, events.recv()).await else {
            panic!("bob never heard of /shared/public.md: {seen:?}");
        };
        let done = message["params"]["uri"] == "mountfs:///shared/public.md";
        seen.push(message);
        if done {
            break;
        }
    }
    // A little longer, for anything announced late.
    while let Ok(Some(message)) =
        tokio::time::timeout(Duration::from_millis(500), events.recv()).await
    {
        seen.push(message);
    }
    let all = serde_json::to_string(&seen).unwrap();
    for private in ["alice-draft.md", "alice-note.md", "stateless-draft.md"] {
        assert!(!all.contains(private), "bob heard of {private}: {all}");
    }
}
