//! Connections no client can use to stop others being served (issue 25): headers trickled in
//! are cut off, a flood of connections that never authenticate is shed before agents at work,
//! the open-files limit is raised, and request bodies held at once are bounded (503 with
//! `Retry-After` beyond), so eight 16 MiB writes at once stay under a documented peak.

use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::client::{Client, Protocol, Server};
use super::{ALICE, plain_get};

/// How many slow-header connections the flood test opens: more than the 1,024 file descriptors
/// a server gets by default (the attack).
const FLOOD: usize = 1100;

/// The peak resident memory (VmHWM) allowed to a server taking eight concurrent `write_file`
/// calls of 16 MiB (docs/http.md, "Connections and memory"). With the default --max-body-total two
/// such bodies are handled at once, each holding about five copies of itself while it runs
/// (~75-90 MiB), over a base of ~30 MiB: 169-201 MiB measured (debug build, alone and beside
/// the other HTTP tests). Without the bound all eight ran at once: 337-343 MiB.
pub const EIGHT_WRITES_PEAK_LIMIT: u64 = 256 * 1024 * 1024;

/// Raises this test process's soft open-files limit to its hard limit; the limit now.
fn raise_own_open_files_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local struct.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                return raised.rlim_cur;
            }
        }
    }
    limit.rlim_cur
}

/// Opens `count` connections that each send the first bytes of a request's headers and then
/// one more byte a second, until the returned task is aborted.
async fn slow_header_flood(addr: &str, count: usize) -> tokio::task::JoinHandle<()> {
    let mut streams = Vec::with_capacity(count);
    for _ in 0..count {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        let _ = stream.write_all(b"G").await;
        streams.push(stream);
    }
    tokio::spawn(async move {
        let header = b"ET /healthz HTTP/1.1\r\nhost: x\r\nx-slow: ";
        for second in 0.. {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let byte = header.get(second).copied().unwrap_or(b'a');
            for stream in &mut streams {
                let _ = stream.write_all(&[byte]).await;
            }
        }
    })
}

/// `GET /healthz` on a fresh connection, timed.
async fn timed_healthz(server: &Server) -> (Duration, String) {
    let started = Instant::now();
    let answer = tokio::time::timeout(
        Duration::from_secs(10),
        plain_get(&format!("{}/healthz", server.base())),
    )
    .await
    .unwrap_or_else(|_| "no answer within 10 s".to_owned());
    (started.elapsed(), answer)
}

/// A stateless tool call from a fresh client, timed.
async fn timed_call(server: &Server) -> (Duration, String) {
    let started = Instant::now();
    let mut client = Client::new(&server.url, Some(ALICE), Protocol::Stateless);
    let answer = tokio::time::timeout(
        Duration::from_secs(10),
        client.call("ls", json!({"path": "/"})),
    )
    .await
    .map(|answer| answer.text)
    .unwrap_or_else(|_| "no answer within 10 s".to_owned());
    (started.elapsed(), answer)
}

#[tokio::test]
async fn with_1100_slow_header_connections_open_a_fresh_client_is_served_within_a_second() {
    let own = raise_own_open_files_limit();
    if own < FLOOD as u64 + 200 {
        crate::support::skips::record(
            "1,100 slow-header connections",
            &format!(
                "this process may open only {own} files (ulimit -Hn); the test needs {}",
                FLOOD + 200
            ),
        );
        return;
    }
    // The server starts with the 1,024 descriptors a service manager gives by default (it
    // raises that to the hard limit itself).
    let server = Server::start_limited(
        None,
        "127.0.0.1:0",
        &["--mount", "/=memory"],
        &[("MOUNTFS_TOKEN", ALICE)],
        Some(1024),
    )
    .await;
    let addr = server.base().trim_start_matches("http://").to_owned();
    let flood = slow_header_flood(&addr, FLOOD).await;
    // Let the server take them all in.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let (took, answer) = timed_healthz(&server).await;
    assert!(
        answer.starts_with("HTTP/1.1 200") && took < Duration::from_secs(1),
        "/healthz took {took:?}: {answer}\nserver:\n{}",
        server.stderr()
    );
    let (took, answer) = timed_call(&server).await;
    assert!(
        !answer.starts_with("no answer") && took < Duration::from_secs(1),
        "a tool call took {took:?}: {answer}\nserver:\n{}",
        server.stderr()
    );
    flood.abort();
}

#[tokio::test]
async fn an_authenticated_connection_outlives_a_flood_of_unauthenticated_ones() {
    raise_own_open_files_limit();
    let server = Server::start(
        &["--mount", "/=memory", "--max-connections", "20"],
        &[("MOUNTFS_TOKEN", ALICE)],
    )
    .await;
    let mut alice = Client::new(&server.url, Some(ALICE), Protocol::Session);
    assert_eq!(alice.initialize().await.status, 200);
    let wrote = alice
        .call(
            "write_file",
            json!({"file_path": "/a.txt", "content": "a\n"}),
        )
        .await;
    assert!(!wrote.is_error, "{}", wrote.text);

    let addr = server.base().trim_start_matches("http://").to_owned();
    let flood = slow_header_flood(&addr, 60).await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Alice's connection was kept: her next call goes over it, not over a new one.
    let read = alice
        .call("read_file", json!({"file_path": "/a.txt"}))
        .await;
    assert!(!read.is_error, "{}", read.text);
    assert_eq!(alice.connects, 1, "alice's connection was closed");
    let (took, answer) = timed_healthz(&server).await;
    assert!(
        answer.starts_with("HTTP/1.1 200") && took < Duration::from_secs(1),
        "/healthz took {took:?}: {answer}"
    );
    assert!(
        server
            .stderr()
            .contains("closed the oldest unauthenticated connection"),
        "{}",
        server.stderr()
    );
    flood.abort();
}

#[tokio::test]
async fn headers_sent_a_byte_a_second_are_cut_off() {
    let server = Server::start(
        &["--mount", "/=memory", "--header-timeout", "2s"],
        &[("MOUNTFS_TOKEN", ALICE)],
    )
    .await;
    let addr = server.base().trim_start_matches("http://").to_owned();
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    let started = Instant::now();
    let header = b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    let mut closed = false;
    for byte in header {
        if stream.write_all(&[*byte]).await.is_err() {
            closed = true;
            break;
        }
        let mut buf = [0u8; 256];
        match tokio::time::timeout(Duration::from_secs(1), stream.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => {
                closed = true;
                break;
            }
            Ok(Ok(_)) => panic!("an answer to headers never finished"),
            Err(_) => {}
        }
        if started.elapsed() > Duration::from_secs(8) {
            break;
        }
    }
    let took = started.elapsed();
    assert!(
        closed && took < Duration::from_secs(5),
        "the connection was still open after {took:?}"
    );
    // The server still serves everyone else.
    let (took, answer) = timed_healthz(&server).await;
    assert!(answer.starts_with("HTTP/1.1 200") && took < Duration::from_secs(1));
}

/// `VmHWM` of process `pid`, in bytes.
fn peak_memory(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    let line = status
        .lines()
        .find(|line| line.starts_with("VmHWM:"))
        .expect("VmHWM");
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("VmHWM in kB");
    kib * 1024
}

// Several threads: the bodies are sent while others are being built, and a 16 MiB body is
// written in time (a client that does not start its request within --header-timeout of
// connecting is cut off).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_16_mib_writes_at_once_stay_under_the_documented_peak() {
    if !std::path::Path::new("/proc/self/status").exists() {
        crate::support::skips::record("peak memory of eight 16 MiB writes", "no /proc (not Linux)");
        return;
    }
    let disk = tempfile::tempdir().unwrap();
    let mount = format!("/=disk:{}", disk.path().display());
    let server = Server::start(&["--mount", &mount], &[("MOUNTFS_TOKEN", ALICE)]).await;
    let pid = server.child.id().expect("pid");
    // Just under the default --max-body once JSON-framed.
    let size = 16 * 1024 * 1024 - 4096;
    let bodies: Vec<String> = (0..8)
        .map(|n| {
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
                "name": "write_file",
                "arguments": {"file_path": format!("/big{n}.txt"), "content": format!("{n}").repeat(size)},
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": {},
                    "io.modelcontextprotocol/clientInfo": {"name": "mountfs-http-test", "version": "0"}
                }
            }})
            .to_string()
        })
        .collect();
    let headers = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "write_file"),
    ];
    let mut writers = Vec::new();
    for body in bodies {
        let url = server.url.clone();
        writers.push(tokio::spawn(async move {
            let mut refused = 0;
            loop {
                let mut client = Client::new(&url, Some(ALICE), Protocol::Stateless);
                let reply = client.send("POST", &body, &headers).await;
                if reply.status == 503 {
                    let wait: u64 = reply
                        .header("retry-after")
                        .and_then(|s| s.parse().ok())
                        .expect("a 503 says when to retry");
                    assert!(reply.body.contains("--max-body-total"), "{}", reply.body);
                    refused += 1;
                    assert!(refused < 120, "refused {refused} times");
                    tokio::time::sleep(Duration::from_secs(wait)).await;
                    continue;
                }
                assert_eq!(reply.status, 200, "{}", reply.body);
                let message = reply.message();
                assert!(
                    message["result"]["isError"].as_bool() != Some(true),
                    "{message}"
                );
                return refused;
            }
        }));
    }
    let mut refused = 0;
    for writer in writers {
        refused += writer.await.unwrap();
    }
    for n in 0..8 {
        let written = std::fs::metadata(disk.path().join(format!("big{n}.txt"))).unwrap();
        assert_eq!(written.len(), size as u64);
    }
    let peak = peak_memory(pid);
    eprintln!(
        "eight concurrent 16 MiB writes: VmHWM {:.1} MiB, {refused} refusals (503) retried",
        peak as f64 / 1048576.0
    );
    assert!(
        peak < EIGHT_WRITES_PEAK_LIMIT,
        "peak memory {:.1} MiB, over {} MiB",
        peak as f64 / 1048576.0,
        EIGHT_WRITES_PEAK_LIMIT / 1048576
    );
}

#[tokio::test]
async fn bodies_beyond_the_total_get_503_with_retry_after_and_small_calls_still_pass() {
    let server = Server::start(
        &[
            "--mount",
            "/=memory",
            "--max-body",
            "1048576",
            "--max-body-total",
            "1048576",
        ],
        &[("MOUNTFS_TOKEN", ALICE)],
    )
    .await;
    let addr = server.base().trim_start_matches("http://").to_owned();
    // One request announces 900 KiB and sends a part of it: its room is taken while it trickles.
    let mut holder = TcpStream::connect(&addr).await.unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {ALICE}\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\nmcp-protocol-version: 2026-07-28\r\ncontent-length: {}\r\n\r\n{{\"jsonrpc\"",
        900 * 1024
    );
    holder.write_all(head.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;

    let mut other = Client::new(&server.url, Some(ALICE), Protocol::Stateless);
    let big = "x".repeat(200 * 1024);
    let reply = other
        .request_reply(
            "tools/call",
            json!({"name": "write_file", "arguments": {"file_path": "/big.txt", "content": big}}),
        )
        .await;
    assert_eq!(reply.status, 503, "{}", reply.body);
    assert_eq!(reply.header("retry-after"), Some("1"));
    assert!(reply.body.contains("--max-body-total"), "{}", reply.body);
    // Nothing ran, and the same connection serves the next call: ordinary calls pass.
    let small = other
        .call(
            "write_file",
            json!({"file_path": "/small.txt", "content": "small\n"}),
        )
        .await;
    assert!(!small.is_error, "{}", small.text);
    let ls = other.call("ls", json!({"path": "/"})).await;
    assert!(!ls.text.contains("big.txt"), "{}", ls.text);
    assert_eq!(other.connects, 1);

    // Once the holder is gone, its room is back.
    drop(holder);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let big = "x".repeat(200 * 1024);
    let wrote = other
        .call(
            "write_file",
            json!({"file_path": "/big.txt", "content": big}),
        )
        .await;
    assert!(!wrote.is_error, "{}", wrote.text);
}

/// The open-files limit the server raised for its connections is not handed to the commands of
/// `execute`: they start with the limit the server was started with.
#[tokio::test]
async fn commands_start_with_the_open_files_limit_the_server_was_given() {
    let own = raise_own_open_files_limit();
    if own <= 1024 {
        crate::support::skips::record(
            "execute's open-files limit over HTTP",
            &format!("the hard open-files limit is {own}: the server has nothing to raise"),
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let disk = format!("/=disk:{}", dir.path().display());
    let server = Server::start_limited(
        None,
        "127.0.0.1:0",
        &["--mount", &disk, "--allow-exec"],
        &[("MOUNTFS_TOKEN", ALICE)],
        Some(1024),
    )
    .await;
    let mut client = Client::new(&server.url, Some(ALICE), Protocol::Stateless);
    let answer = client
        .call("execute", json!({"command": "ulimit -n"}))
        .await;
    assert!(
        answer.text.contains("\n1024") || answer.text.contains(" 1024"),
        "{}\nserver:\n{}",
        answer.text,
        server.stderr()
    );
}
