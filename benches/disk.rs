//! Disk benchmark (not a timed test): `grep` through the mountfs server end to end over stdio
//! against `rg` on the same tree and pattern, and `read_file` of a 100-line window deep in a
//! 1 GB file. Prints a table with ratios.
//!
//! Run: `apt-get install ripgrep` (or `cargo install ripgrep`), then
//! `cargo bench --bench disk`. The tree (≥ 200 MB in ≥ 20,000 source files, plus one 1 GB
//! file) is generated deterministically under `$CARGO_TARGET_DIR/bench-disk` (or
//! `target/bench-disk`) on first run and reused afterwards. Timings are medians of warm runs.

#[path = "common/source.rs"]
mod source;
use source::{Rng, source_file};

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const FILES: usize = 20_000;
const FILE_BYTES: usize = 10_500;
const BIG_FILE_BYTES: u64 = 1 << 30;
const RUNS: usize = 5;

fn bench_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"),
        PathBuf::from,
    );
    target.join("bench-disk")
}

/// Builds the tree once: `tree/` with FILES source files in nested directories, a
/// `.gitignore`d `tree/generated/` directory, and `big.log` of 1 GiB beside it.
fn build_tree(dir: &Path) {
    let tree = dir.join("tree");
    let marker = dir.join(".complete");
    if marker.exists() {
        return;
    }
    eprintln!("building the benchmark tree under {} …", dir.display());
    let _ = std::fs::remove_dir_all(dir);
    let mut rng = Rng::seeded();
    for i in 0..FILES {
        let sub = tree.join(format!("crate{:02}/src/mod{:03}", i % 50, (i / 50) % 400));
        std::fs::create_dir_all(&sub).expect("mkdir");
        let text = source_file(&mut rng, FILE_BYTES, 2_000);
        std::fs::write(sub.join(format!("file{i:05}.rs")), text).expect("write");
    }
    std::fs::write(tree.join(".gitignore"), "generated/\n").expect("gitignore");
    std::fs::create_dir_all(tree.join("generated")).expect("mkdir");
    std::fs::write(
        tree.join("generated/skipped.rs"),
        "// TODO(needle): ignored\n".repeat(1000),
    )
    .expect("write");
    let mut big = std::io::BufWriter::new(std::fs::File::create(dir.join("big.log")).expect("big"));
    let mut written = 0u64;
    let mut n = 0u64;
    while written < BIG_FILE_BYTES {
        let line = format!(
            "{n:012} INFO request handled in {} us path=/api/v1/items\n",
            n % 997
        );
        big.write_all(line.as_bytes()).expect("write big");
        written += line.len() as u64;
        n += 1;
    }
    big.flush().expect("flush");
    std::fs::write(marker, "").expect("marker");
}

/// The server over stdio, initialised.
struct Server {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
    id: u64,
}

impl Server {
    fn start(mount: &Path) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_mountfs"))
            .args(["--mount", &format!("/=disk:{}", mount.display())])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start mountfs");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut server = Self {
            child,
            stdin,
            stdout,
            id: 0,
        };
        server.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "bench", "version": "1"}}),
        );
        writeln!(
            server.stdin,
            "{}",
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
        )
        .expect("send");
        server
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        self.id += 1;
        let id = self.id;
        writeln!(
            self.stdin,
            "{}",
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
        )
        .expect("send");
        loop {
            let mut line = String::new();
            self.stdout.read_line(&mut line).expect("read");
            let value: Value = serde_json::from_str(&line).expect("json-rpc line");
            if value["id"] == id {
                return value;
            }
        }
    }

    /// Calls a tool; returns (elapsed, text).
    fn call(&mut self, tool: &str, arguments: Value) -> (Duration, String) {
        let start = Instant::now();
        let response = self.request("tools/call", json!({"name": tool, "arguments": arguments}));
        let elapsed = start.elapsed();
        let text = response["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert_eq!(
            response["result"]["isError"], false,
            "{tool} failed: {text}"
        );
        (elapsed, text)
    }

    /// Peak resident memory of the server so far, from /proc.
    fn peak_rss_kib(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn time_rg(args: &[&str], dir: &Path) -> (Duration, usize) {
    let mut times = Vec::new();
    let mut lines = 0;
    for _ in 0..RUNS {
        let start = Instant::now();
        let out = Command::new("rg")
            // The server honours .gitignore without a git repository and shows hidden files.
            .args(["--no-require-git", "--hidden"])
            .args(args)
            .current_dir(dir)
            .output()
            .expect("run rg (apt-get install ripgrep)");
        times.push(start.elapsed());
        lines = out
            .stdout
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .count();
    }
    (median(times), lines)
}

fn time_tool(server: &mut Server, tool: &str, args: Value) -> (Duration, usize) {
    let mut times = Vec::new();
    let mut lines = 0;
    for _ in 0..RUNS {
        let (elapsed, text) = server.call(tool, args.clone());
        times.push(elapsed);
        lines = text.lines().count();
    }
    (median(times), lines)
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let dir = bench_dir();
    build_tree(&dir);
    let tree = dir.join("tree");
    let mut server = Server::start(&dir);
    // Warm the page cache for both sides.
    let _ = time_rg(&["-l", "needle"], &tree);

    println!("| measurement | rg | mountfs (MCP over stdio) | ratio |");
    println!("|---|---|---|---|");
    let cases: [(&str, Vec<&str>, Value); 4] = [
        (
            "grep files_with_matches `TODO\\(needle\\)`",
            vec!["-l", "TODO\\(needle\\)", "."],
            json!({"pattern": "TODO\\(needle\\)", "path": "/tree"}),
        ),
        (
            "grep count `handler_[0-9]+ = state`",
            vec!["-c", "handler_[0-9]+ = state", "."],
            json!({"pattern": "handler_[0-9]+ = state", "path": "/tree", "output_mode": "count"}),
        ),
        (
            "grep content `TODO\\(needle\\): revisit mount`",
            vec!["-n", "TODO\\(needle\\): revisit mount", "."],
            json!({"pattern": "TODO\\(needle\\): revisit mount", "path": "/tree", "output_mode": "content"}),
        ),
        // A literal, a repeated class, a literal (issue 31's `unsafe\s+impl` shape), lines
        // answered: the regex engine's prefilter and its check of each candidate both run.
        (
            "grep content regex `TODO\\(needle\\):\\s+revisit`",
            vec!["-n", "TODO\\(needle\\):\\s+revisit", "."],
            json!({"pattern": "TODO\\(needle\\):\\s+revisit", "path": "/tree", "output_mode": "content"}),
        ),
    ];
    for (name, rg_args, tool_args) in cases {
        let (rg_time, rg_lines) = time_rg(&rg_args, &tree);
        let (our_time, our_lines) = time_tool(&mut server, "grep", tool_args);
        println!(
            "| {name} ({rg_lines} rg lines, {our_lines} ours) | {} | {} | {:.2}× |",
            ms(rg_time),
            ms(our_time),
            our_time.as_secs_f64() / rg_time.as_secs_f64()
        );
    }
    let (rg_time, rg_lines) = time_rg(&["--files", "-g", "*.rs"], &tree);
    let (our_time, our_lines) = time_tool(
        &mut server,
        "glob",
        json!({"pattern": "**/*.rs", "path": "/tree"}),
    );
    println!(
        "| glob `**/*.rs` vs `rg --files -g '*.rs'` ({rg_lines} files; ours lists ≤ 1000, {our_lines} lines) | {} | {} | {:.2}× |",
        ms(rg_time),
        ms(our_time),
        our_time.as_secs_f64() / rg_time.as_secs_f64()
    );

    // The floor for a first deep window: counting the newlines before it means reading those
    // bytes once; `wc -l` over the whole file shows what that costs on this machine.
    let mut wc_times = Vec::new();
    for _ in 0..RUNS {
        let start = Instant::now();
        Command::new("wc")
            .args(["-l"])
            .arg(dir.join("big.log"))
            .output()
            .expect("wc");
        wc_times.push(start.elapsed());
    }
    println!(
        "| `wc -l` of the whole 1 GiB file (reference: one pass over it) | {} | – | – |",
        ms(median(wc_times))
    );
    // Each depth on a fresh server, so the first call finds no remembered checkpoints.
    drop(server);
    for offset in [5_000_000u64, 17_000_000] {
        let mut server = Server::start(&dir);
        let rss_before = server.peak_rss_kib();
        let mut times = Vec::new();
        let mut first = None;
        for _ in 0..RUNS {
            let (elapsed, text) = server.call(
                "read_file",
                json!({"file_path": "/big.log", "offset": offset, "limit": 100}),
            );
            first.get_or_insert(text);
            times.push(elapsed);
        }
        let rss_after = server.peak_rss_kib();
        println!(
            "| read_file 100 lines at offset {offset} of a 1 GiB file: first call / later calls (median) | – | {} / {} | server peak RSS {} → {} KiB |",
            ms(times[0]),
            ms(median(times[1..].to_vec())),
            rss_before.unwrap_or(0),
            rss_after.unwrap_or(0)
        );
        if let Some(text) = first {
            eprintln!("{}", text.lines().next().unwrap_or_default());
        }
    }
    // What an agent does: read the head of the file, think, then jump deep. The head read
    // starts indexing the file in the background, so the deep read finds its checkpoint.
    let mut server = Server::start(&dir);
    let (head_time, _) = server.call("read_file", json!({"file_path": "/big.log", "limit": 100}));
    std::thread::sleep(Duration::from_millis(AGENT_PAUSE_MS));
    let (deep_time, _) = server.call(
        "read_file",
        json!({"file_path": "/big.log", "offset": 17_000_000, "limit": 100}),
    );
    println!(
        "| read_file head, then (after {AGENT_PAUSE_MS} ms) 100 lines at offset 17000000, fresh server | – | {} / {} | server peak RSS {} KiB |",
        ms(head_time),
        ms(deep_time),
        server.peak_rss_kib().unwrap_or(0)
    );
}

/// How long the "agent" of the last measurement pauses between its two reads (a model's turn
/// takes seconds; this is well below one).
const AGENT_PAUSE_MS: u64 = 500;
