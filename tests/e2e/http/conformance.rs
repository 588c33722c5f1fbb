//! The official MCP conformance suite (`@modelcontextprotocol/conformance`, pinned in
//! `tests/mcp-conformance/`) against `mountfs --http`.
//!
//! The suite's client sends no `Authorization` header, and mountfs refuses every request
//! without a token, so the suite talks to a small forwarding proxy that adds the bearer token
//! and passes everything else (Host, Origin, bodies, SSE streams) through untouched.
//! The server runs with `--allow-origin http://localhost:*`, as an operator serving a local
//! browser client would; the suite's DNS-rebinding scenario then checks that a foreign
//! Host/Origin is refused and a localhost one accepted.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use http_body_util::BodyExt;
use http_body_util::combinators::BoxBody;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;

use super::client::Server;
use super::{ALICE, token_file};

/// Scenarios of the suite that apply to a tools-only server; each must pass. docs/http.md
/// ("MCP conformance") lists the others and why they do not apply.
const APPLICABLE: &[&str] = &[
    "server-initialize",
    "ping",
    "tools-list",
    "resources-list",
    "dns-rebinding-protection",
    "server-sse-polling",
    "server-sse-multiple-streams",
];

/// Node and the suite's entry point, installing the pinned versions when they are missing (under
/// the same lock as the Inspector's install).
fn suite() -> Option<(PathBuf, PathBuf)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp-conformance");
    let node = dir.join("node_modules/.bin/node");
    let entry = dir.join("node_modules/@modelcontextprotocol/conformance/dist/index.js");
    crate::npm::installed(&dir, &[&node, &entry]).then_some((node, entry))
}

/// Forwards every request on 127.0.0.1:PORT to `target` (`host:port`) with
/// `Authorization: Bearer token` added; returns PORT.
async fn token_proxy(target: String, token: &'static str) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let target = target.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request| {
                    forward(request, target.clone(), token)
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    port
}

async fn forward(
    request: http::Request<Incoming>,
    target: String,
    token: &'static str,
) -> Result<http::Response<BoxBody<Bytes, hyper::Error>>, std::io::Error> {
    let upstream = tokio::net::TcpStream::connect(&target).await?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(upstream))
        .await
        .map_err(std::io::Error::other)?;
    tokio::spawn(connection);
    let (mut parts, body) = request.into_parts();
    parts.headers.insert(
        http::header::AUTHORIZATION,
        http::HeaderValue::from_str(&format!("Bearer {token}")).unwrap(),
    );
    let response = sender
        .send_request(http::Request::from_parts(parts, body))
        .await
        .map_err(std::io::Error::other)?;
    Ok(response.map(BodyExt::boxed))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_conformance_suite_passes_every_applicable_scenario() {
    let Some((node, entry)) = suite() else {
        crate::support::skips::record(
            "the official MCP conformance suite over HTTP",
            "it could not be installed (npm ci in tests/mcp-conformance)",
        );
        return;
    };
    let (_t, tokens) = token_file();
    let server = Server::start(
        &[
            "--token-file",
            &tokens,
            "--allow-origin",
            "http://localhost:*",
            "--mount",
            "/=memory",
        ],
        &[],
    )
    .await;
    let target = server.base().trim_start_matches("http://").to_owned();
    let port = token_proxy(target, ALICE).await;
    let url = format!("http://localhost:{port}/mcp");
    let mut failures = Vec::new();
    for scenario in APPLICABLE {
        let output = tokio::process::Command::new(&node)
            .arg(&entry)
            .args(["server", "--url", &url, "--scenario", scenario])
            .output()
            .await
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        if !output.status.success() {
            failures.push(format!("{scenario}:\n{stdout}\n{stderr}"));
        }
    }
    assert!(
        failures.is_empty(),
        "conformance failures:\n{}\nserver log:\n{}",
        failures.join("\n"),
        server.stderr()
    );
}
