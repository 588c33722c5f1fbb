//! MCP client roots over HTTP (issue 25): a remote client's `file://` roots name its own
//! machine, so the server mounts none unless the operator allows a directory
//! (`--http-roots-under DIR`), and then only roots inside it. The client here answers the
//! server's `roots/list` over the session's GET event stream, as real clients do.

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

use super::ALICE;
use super::client::{Client, Protocol, Server};

/// A session client whose client offers `roots` (file URIs); returns it with the instructions
/// `initialize` gave. Any `roots/list` the server asks is answered with `roots`.
async fn client_offering(server: &Server, roots: &[String]) -> (Client, String) {
    let mut client = Client::new(&server.url, Some(ALICE), Protocol::Session);
    let reply = client
        .post(
            &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {"roots": {"listChanged": true}},
                "clientInfo": {"name": "mountfs-roots-test", "version": "0"}
            }}),
            &[],
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let session = reply
        .header("mcp-session-id")
        .expect("a session id")
        .to_owned();
    client.session = Some(session.clone());
    let instructions = reply.message()["result"]["instructions"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let listening = answer_roots_requests(server, &session, roots.to_vec()).await;
    let _ = listening.await;
    let done = client
        .post(
            &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            &[("mcp-protocol-version", "2025-11-25")],
        )
        .await;
    assert_eq!(done.status, 202, "{}", done.body);
    (client, instructions)
}

/// Opens the session's GET event stream and, in the background, answers every `roots/list`
/// on it with `roots`; the receiver resolves once the stream is open.
async fn answer_roots_requests(
    server: &Server,
    session: &str,
    roots: Vec<String>,
) -> tokio::sync::oneshot::Receiver<()> {
    let authority = server.base().trim_start_matches("http://").to_owned();
    let url = server.url.clone();
    let session = session.to_owned();
    let (open_tx, open_rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let stream = tokio::net::TcpStream::connect(&authority).await.unwrap();
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(connection);
        let request = http::Request::builder()
            .method("GET")
            .uri(url.clone())
            .header("host", authority.clone())
            .header("accept", "text/event-stream")
            .header("authorization", format!("Bearer {ALICE}"))
            .header("mcp-session-id", session.clone())
            .header("mcp-protocol-version", "2025-11-25")
            .body(Empty::<Bytes>::new())
            .unwrap();
        let response = sender.send_request(request).await.unwrap();
        assert_eq!(response.status(), 200, "GET event stream");
        let _ = open_tx.send(());
        let mut body = response.into_body();
        let mut answerer = Client::new(&url, Some(ALICE), Protocol::Session);
        answerer.session = Some(session);
        let mut pending = String::new();
        while let Some(Ok(frame)) = body.frame().await {
            let Ok(data) = frame.into_data() else {
                continue;
            };
            pending.push_str(&String::from_utf8_lossy(&data));
            while let Some(end) = pending.find('\n') {
                let line: String = pending.drain(..=end).collect();
                let Some(data) = line.trim().strip_prefix("data:") else {
                    continue;
                };
                let Ok(message) = serde_json::from_str::<Value>(data.trim()) else {
                    continue;
                };
                if message["method"] == "roots/list" {
                    let roots: Vec<Value> = roots.iter().map(|uri| json!({"uri": uri})).collect();
                    let answer =
                        json!({"jsonrpc": "2.0", "id": message["id"], "result": {"roots": roots}});
                    answerer
                        .post(&answer, &[("mcp-protocol-version", "2025-11-25")])
                        .await;
                }
            }
        }
    });
    open_rx
}

/// A server of the default table (no --mount) in a working directory of its own.
async fn default_table_server(extra: &[&str]) -> (Server, tempfile::TempDir) {
    let top = tempfile::tempdir().unwrap();
    let cwd = top.path().join("cwd");
    std::fs::create_dir(&cwd).unwrap();
    std::fs::write(cwd.join("cwd-only.txt"), "cwd\n").unwrap();
    let data = top.path().join("data").to_string_lossy().into_owned();
    let home = top.path().join("home").to_string_lossy().into_owned();
    let env = [
        ("MOUNTFS_TOKEN", ALICE),
        ("XDG_DATA_HOME", data.as_str()),
        ("HOME", home.as_str()),
    ];
    let server = Server::start_in(Some(&cwd), "127.0.0.1:0", extra, &env).await;
    (server, top)
}

#[tokio::test]
async fn without_http_roots_under_a_clients_roots_are_never_mounted() {
    let (server, _top) = default_table_server(&[]).await;
    let (mut client, instructions) = client_offering(&server, &["file:///etc".to_owned()]).await;
    let shadow = client
        .call("read_file", json!({"file_path": "/shadow"}))
        .await;
    assert!(
        shadow.is_error,
        "read the server's /etc/shadow: {}",
        shadow.text
    );
    assert!(
        instructions.contains("roots are not mounted")
            && instructions.contains("--http-roots-under"),
        "{instructions}"
    );
    let passwd = client
        .call("read_file", json!({"file_path": "/passwd"}))
        .await;
    assert!(
        passwd.is_error,
        "read the server's /etc/passwd: {}",
        passwd.text
    );
    // The default table is served instead: the working directory at /.
    let own = client
        .call("read_file", json!({"file_path": "/cwd-only.txt"}))
        .await;
    assert!(!own.is_error, "{}", own.text);
}

#[tokio::test]
async fn with_http_roots_under_only_roots_inside_it_are_mounted() {
    let allowed = tempfile::tempdir().unwrap();
    let project = allowed.path().join("project");
    std::fs::create_dir(&project).unwrap();
    std::fs::write(project.join("inside.txt"), "inside\n").unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("outside.txt"), "outside\n").unwrap();
    // A symbolic link inside the allowed directory to one outside it is outside too.
    std::os::unix::fs::symlink(outside.path(), allowed.path().join("sneaky")).unwrap();
    let under = allowed.path().to_string_lossy().into_owned();
    let (server, _top) = default_table_server(&["--http-roots-under", &under]).await;
    let uri = |path: &std::path::Path| format!("file://{}", path.display());

    // Only roots outside: none mounted, the default table stays.
    let (mut client, instructions) = client_offering(
        &server,
        &[
            "file:///etc".to_owned(),
            uri(outside.path()),
            uri(&allowed.path().join("sneaky")),
        ],
    )
    .await;
    assert!(
        instructions.contains("--http-roots-under"),
        "{instructions}"
    );
    for path in [
        "/shadow",
        "/etc/shadow",
        "/outside.txt",
        "/sneaky/outside.txt",
    ] {
        let read = client.call("read_file", json!({"file_path": path})).await;
        assert!(read.is_error, "{path}: {}", read.text);
    }
    let own = client
        .call("read_file", json!({"file_path": "/cwd-only.txt"}))
        .await;
    assert!(!own.is_error, "{}", own.text);
    let stderr = server.stderr();
    assert!(
        stderr
            .contains("root /etc is not mounted: this HTTP server mounts only client roots inside"),
        "{stderr}"
    );

    // A root inside is mounted (at /, being the only usable one).
    let (mut client, _) =
        client_offering(&server, &["file:///etc".to_owned(), uri(&project)]).await;
    let inside = client
        .call("read_file", json!({"file_path": "/inside.txt"}))
        .await;
    assert!(
        !inside.is_error && inside.text.contains("inside"),
        "{}",
        inside.text
    );
    let shadow = client
        .call("read_file", json!({"file_path": "/shadow"}))
        .await;
    assert!(shadow.is_error, "{}", shadow.text);
}
