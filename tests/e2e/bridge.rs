//! A desktop client that only launches stdio servers, connected to a team's `mountfs --http`
//! through `mcp-remote` (issue 30): the pinned bridge (tests/mcp-remote) runs as such a client
//! runs it — a stdio server given the URL and `--header "Authorization:${MOUNTFS_AUTH}"` — and an
//! agent's session goes through it: write, read, edit, grep. With a wrong token the bridge stops,
//! and what it logs tells the person what to fix.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::http::client::Server;
use crate::support::stdio::{StdioClient, text_of};

/// The pinned bridge's entry point, installed once (`npm ci` under a lock), or `None` (recorded
/// as skipped) when Node.js or the package cannot be had.
fn bridge() -> Option<PathBuf> {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp-remote"));
    let proxy = dir.join("node_modules/mcp-remote/dist/proxy.js");
    if crate::npm::installed(&dir, &[&proxy]) {
        Some(proxy)
    } else {
        crate::skips::record(
            "the mcp-remote bridge",
            "it could not be installed (npm ci in tests/mcp-remote; needs Node.js and npm)",
        );
        None
    }
}

/// The bridge as the README's recipe starts it: a stdio process with the URL and the header,
/// whose value comes from the environment (`Authorization:${MOUNTFS_AUTH}`: no space in an
/// argument, which some clients split). Its own state (OAuth files it may write) goes to `state`.
fn bridge_command(proxy: &PathBuf, url: &str, token: &str, state: &std::path::Path) -> Command {
    let mut command = Command::new("node");
    command
        .arg(proxy)
        .arg(url)
        .arg("--header")
        .arg("Authorization:${MOUNTFS_AUTH}")
        .arg("--allow-http")
        .env("MOUNTFS_AUTH", format!("Bearer {token}"))
        .env("MCP_REMOTE_CONFIG_DIR", state);
    command
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_client_works_through_mcp_remote_and_a_wrong_token_is_told_clearly() {
    let Some(proxy) = bridge() else { return };
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let token = "6b1f0e4c9a2d47c3b8e5f1a0d9c7b3e2";
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, format!("alice {token}\n")).unwrap();
    std::fs::set_permissions(&tokens, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let mount = format!("/=disk:{}", work.display());
    let server = Server::start(
        &[
            "--token-file",
            tokens.to_str().unwrap(),
            "--mount",
            &mount,
            "--audit",
            "off",
        ],
        &[],
    )
    .await;
    let state = dir.path().join("bridge-state");

    let url = server.url.clone();
    let proxy_kept = proxy.clone();
    let state_kept = state.clone();
    let session = tokio::task::spawn_blocking(move || {
        let mut client =
            StdioClient::spawn_command(bridge_command(&proxy_kept, &url, token, &state_kept));
        client.handshake();
        let wrote = client.call(
            "write_file",
            json!({"file_path": "/notes.md", "content": "# Notes\nbridge works\n"}),
        );
        let read = client.call("read_file", json!({"file_path": "/notes.md"}));
        let edited = client.call(
            "edit_file",
            json!({"file_path": "/notes.md", "old_string": "bridge works", "new_string": "bridge edits"}),
        );
        let found = client.call("grep", json!({"pattern": "edits", "path": "/"}));
        let texts = [&wrote, &read, &edited, &found].map(text_of);
        drop(client);
        texts
    })
    .await
    .unwrap();
    assert!(
        session[0].starts_with("Created /notes.md"),
        "{}",
        session[0]
    );
    assert!(session[1].contains("bridge works"), "{}", session[1]);
    assert!(
        session[2].contains("Edited /notes.md") || session[2].contains("/notes.md"),
        "{}",
        session[2]
    );
    assert_eq!(session[3], "/notes.md", "grep through the bridge");
    assert_eq!(
        std::fs::read_to_string(work.join("notes.md")).unwrap(),
        "# Notes\nbridge edits\n"
    );

    // A wrong token: the bridge stops before serving, and its log (what the client shows the
    // person) says that this server takes a bearer token from its token file, not OAuth.
    let url = server.url.clone();
    let (exited, log) = tokio::task::spawn_blocking(move || {
        let mut client =
            StdioClient::spawn_command(bridge_command(&proxy, &url, "0000wrong0000", &state));
        let _ = client.send("initialize", crate::support::initialize_params(json!({})));
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut exited = None;
        while Instant::now() < deadline {
            if let Some(status) = client.try_wait() {
                exited = Some(status);
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        (exited, client.stderr())
    })
    .await
    .unwrap();
    assert!(exited.is_some(), "the bridge did not stop: {log}");
    assert!(
        log.contains("mountfs takes no OAuth")
            && log.contains("token from the server's --token-file"),
        "{log}"
    );
    assert!(!log.contains(token), "the right token is never shown");
}
