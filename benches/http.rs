//! Load benchmark of Streamable HTTP (issue 12): 64 concurrent clients doing small reads
//! (`read_file` of 1 KiB files on a disk mount), next to the same load over stdio.
//!
//! Modes, each against a fresh release `mountfs` process:
//! - **stdio**: one client connection with 64 requests in flight (what one stdio client can do);
//! - **HTTP, sessions**: 64 clients, each with its own MCP 2025-11-25 session and keep-alive
//!   connection (answers as SSE streams, as rmcp sends them);
//! - **HTTP, stateless**: 64 clients sending MCP 2026-07-28 requests with no session (one
//!   principal's workspace).
//!
//! Figures: calls/s (completed calls / wall time), p50/p99 latency seen by the client, the
//! server's own CPU per call (utime+stime from /proc/<pid>/stat over the measurement, so the
//! client's cost is left out) and its peak RSS (VmHWM, reset before the measurement). The client
//! runs on the same machine and competes for its cores.
//!
//! Run: `cargo bench --bench http` (`-- --seconds N` to measure longer; default 5).

#[path = "../tests/e2e/http/client.rs"]
mod client;
#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use client::{Client, Protocol, Server};
use serde_json::json;
use support::McpServer;

const CLIENTS: usize = 64;
const FILES: usize = 256;
const TOKEN: &str = "bench-token-0123456789abcdef";

#[derive(Debug, Default)]
struct Sample {
    calls: usize,
    failures: usize,
    elapsed: Duration,
    latencies: Vec<Duration>,
    cpu: Duration,
    peak_rss_kib: u64,
}

impl Sample {
    fn quantile_ms(&mut self, q: f64) -> f64 {
        self.latencies.sort();
        let rank =
            ((q * self.latencies.len() as f64).ceil() as usize).clamp(1, self.latencies.len());
        self.latencies[rank - 1].as_secs_f64() * 1e3
    }

    fn row(&mut self, mode: &str) -> String {
        format!(
            "| {mode} | {:.0} | {:.2} | {:.2} | {:.3} | {:.1} |",
            self.calls as f64 / self.elapsed.as_secs_f64(),
            self.quantile_ms(0.50),
            self.quantile_ms(0.99),
            self.cpu.as_secs_f64() * 1e3 / self.calls as f64,
            self.peak_rss_kib as f64 / 1024.0,
        )
    }
}

fn clock_ticks() -> u64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100)
}

/// utime + stime of a process so far.
fn cpu_time(pid: u32, ticks: u64) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<u64> = after
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    let used = fields.get(10).unwrap_or(&0) + fields.get(11).unwrap_or(&0);
    Duration::from_secs_f64(used as f64 / ticks as f64)
}

fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn reset_peak_rss(pid: u32) {
    let _ = std::fs::write(format!("/proc/{pid}/clear_refs"), "5");
}

fn file_of(n: usize) -> String {
    format!("/src/f{:03}.rs", n % FILES)
}

/// Runs `work` (one call, returning whether it succeeded) on each of the `workers` until
/// `seconds` have passed, after a one-second warm-up; measures the server `pid`.
async fn measure<W, F>(pid: u32, workers: Vec<W>, seconds: u64, call: F) -> Sample
where
    W: Send + 'static,
    F: Fn(&mut W, usize) -> futures_like::BoxFuture<'_, bool> + Send + Sync + Copy + 'static,
{
    let ticks = clock_ticks();
    let measuring = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for (w, mut worker) in workers.into_iter().enumerate() {
        let (measuring, stop) = (measuring.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut seen = Sample::default();
            let mut n = w * 7;
            while !stop.load(Ordering::Relaxed) {
                let sent = Instant::now();
                let ok = call(&mut worker, n).await;
                if measuring.load(Ordering::Relaxed) {
                    seen.latencies.push(sent.elapsed());
                    seen.calls += 1;
                    seen.failures += usize::from(!ok);
                }
                n += 1;
            }
            seen
        }));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    reset_peak_rss(pid);
    let cpu_before = cpu_time(pid, ticks);
    let started = Instant::now();
    measuring.store(true, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    measuring.store(false, Ordering::Relaxed);
    let elapsed = started.elapsed();
    let cpu = cpu_time(pid, ticks).saturating_sub(cpu_before);
    let peak = peak_rss_kib(pid);
    stop.store(true, Ordering::Relaxed);
    let mut sample = Sample {
        elapsed,
        cpu,
        peak_rss_kib: peak,
        ..Sample::default()
    };
    for task in tasks {
        let seen = task.await.expect("worker");
        sample.calls += seen.calls;
        sample.failures += seen.failures;
        sample.latencies.extend(seen.latencies);
    }
    assert_eq!(sample.failures, 0, "calls failed");
    sample
}

/// A boxed future without a futures-crate dependency.
mod futures_like {
    pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;
}

fn main() {
    let seconds: u64 = std::env::args()
        .skip_while(|a| a != "--seconds")
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(run(seconds));
}

async fn run(seconds: u64) {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("src")).expect("mkdir");
    let line = "let value = compute(input); // a line of about forty chars\n";
    for i in 0..FILES {
        let content: String = (0..18).map(|_| line).collect();
        std::fs::write(dir.path().join(format!("src/f{i:03}.rs")), content).expect("write");
    }
    let mount = format!("/=disk:{}", dir.path().display());
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, format!("bench {TOKEN}\n")).expect("tokens");
    let tokens = tokens.to_string_lossy().into_owned();
    let mut rows = Vec::new();

    // stdio: one connection, 64 requests in flight.
    {
        let server = Arc::new(McpServer::start(&["--mount".into(), mount.clone()]).await);
        let pid = server.pid().expect("pid");
        let workers: Vec<Arc<McpServer>> = (0..CLIENTS).map(|_| server.clone()).collect();
        let mut sample = measure(pid, workers, seconds, |server, n| {
            Box::pin(async move {
                let answer = server
                    .call("read_file", json!({"file_path": file_of(n)}))
                    .await;
                !answer.is_error
            })
        })
        .await;
        rows.push(sample.row("stdio, 1 connection, 64 in flight"));
    }

    for (protocol, mode) in [
        (
            Protocol::Session,
            "HTTP, 64 clients with sessions (2025-11-25)",
        ),
        (
            Protocol::Stateless,
            "HTTP, 64 stateless clients (2026-07-28)",
        ),
    ] {
        let server = Server::start(
            &[
                "--token-file",
                &tokens,
                "--mount",
                &mount,
                "--max-sessions",
                "1000",
            ],
            &[("RUST_LOG", "warn")],
        )
        .await;
        let pid = server.child.id().expect("pid");
        let mut workers = Vec::new();
        for _ in 0..CLIENTS {
            let mut client = Client::new(&server.url, Some(TOKEN), protocol);
            if protocol == Protocol::Session {
                assert_eq!(client.initialize().await.status, 200);
            }
            workers.push(client);
        }
        let mut sample = measure(pid, workers, seconds, |client, n| {
            Box::pin(async move {
                let answer = client
                    .call("read_file", json!({"file_path": file_of(n)}))
                    .await;
                !answer.is_error
            })
        })
        .await;
        rows.push(sample.row(mode));
    }

    println!("read_file of 1 KiB files on a disk mount, {seconds} s per mode after 1 s warm-up\n");
    println!("| mode | calls/s | p50 ms | p99 ms | server CPU ms/call | server peak RSS MiB |");
    println!("|---|---|---|---|---|---|");
    for row in rows {
        println!("{row}");
    }
}
