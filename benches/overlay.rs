//! What an overlay mount costs reads and searches (issue 14; target: at most 1.2× the plain
//! disk mount): `read_file`, `grep` and `glob` over stdio to two real server processes on the
//! same directory, one `--mount /=disk:DIR` and one `--mount /=disk:DIR,overlay` whose layer
//! holds [`CHANGED`] changed files (edits, new files, deletions), in one run. The servers take
//! turns in rounds of [`ROUND`] calls of each kind, so that drift of a shared machine hits both
//! alike; the figure is the mean time per call of each kind and the overlay's ratio.
//!
//! Run: `cargo bench --bench overlay` (`-- --rounds N --files N`). The tree (default 5,000
//! source files, ~50 MB, a `.gitignore`d directory) is generated in a temporary directory.

#[path = "../tests/support/mod.rs"]
mod support;

#[path = "common/source.rs"]
mod source;
use source::{Rng, source_file};

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::McpServer;

/// Calls of each kind per server before the other takes its turn.
const ROUND: usize = 10;
/// Files the overlay's layer changes: 80 edited, 10 created, 10 deleted.
const CHANGED: usize = 100;

fn file_path(i: usize) -> String {
    format!(
        "crate{:02}/src/mod{:02}/file{i:05}.rs",
        i % 20,
        (i / 20) % 25
    )
}

/// `files` source files of ~10 KB in nested directories, and an ignored `generated/`.
fn build_tree(root: &Path, files: usize) {
    let mut rng = Rng::seeded();
    for i in 0..files {
        let path = root.join(file_path(i));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let text = source_file(&mut rng, 10_500, 500);
        std::fs::write(path, text).unwrap();
    }
    std::fs::write(root.join(".gitignore"), "generated/\n").unwrap();
    std::fs::create_dir_all(root.join("generated")).unwrap();
    std::fs::write(
        root.join("generated/skipped.rs"),
        "// TODO(needle): ignored\n".repeat(1000),
    )
    .unwrap();
}

/// The calls measured, each kind in turn.
#[derive(Clone, Copy)]
enum Call {
    /// `read_file` of a file the layer changed and of one it did not, alternately.
    Read,
    /// `grep` of a rare pattern over the whole tree, content mode, first page.
    Grep,
    /// `glob` of every `.rs` file in one crate.
    Glob,
}

const CALLS: [(Call, &str); 3] = [
    (Call::Read, "read_file"),
    (Call::Grep, "grep"),
    (Call::Glob, "glob"),
];

async fn call(server: &McpServer, kind: Call, i: usize) {
    let arguments: Value = match kind {
        Call::Read => {
            // Even: a changed file (in the layer through the overlay); odd: an unchanged one.
            let n = if i.is_multiple_of(2) {
                (i / 2) % 80
            } else {
                1_000 + i % 500
            };
            json!({"file_path": format!("/{}", file_path(n)), "limit": 200})
        }
        Call::Grep => {
            json!({"pattern": "TODO\\(needle\\)", "output_mode": "content", "head_limit": 50})
        }
        Call::Glob => json!({"pattern": "**/*.rs", "path": format!("/crate{:02}", i % 20)}),
    };
    let name = match kind {
        Call::Read => "read_file",
        Call::Grep => "grep",
        Call::Glob => "glob",
    };
    server.ok(name, arguments).await;
}

/// CPU time (user + system) the process `pid` has used so far.
fn cpu_of(pid: Option<u32>) -> Duration {
    let ticks = pid
        .and_then(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
        .and_then(|stat| {
            // Fields after the command name (which may hold spaces) start after the last ')'.
            let rest = stat.get(stat.rfind(')')? + 2..)?.to_owned();
            let fields: Vec<&str> = rest.split(' ').collect();
            Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
        })
        .unwrap_or(0);
    // Clock ticks of 10 ms (USER_HZ is 100 on Linux).
    Duration::from_millis(ticks * 10)
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_owned())
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|n| n.parse::<usize>().ok())
    };
    let rounds = flag("--rounds").unwrap_or(20);
    let files = flag("--files").unwrap_or(5_000).max(2_000);
    let dir = tempfile::tempdir().unwrap();
    build_tree(dir.path(), files);
    let load_before = load();
    let root = dir.path().display().to_string();
    let disk = McpServer::start(&["--mount".to_owned(), format!("/=disk:{root}")]).await;
    let overlay = McpServer::start(&["--mount".to_owned(), format!("/=disk:{root},overlay")]).await;
    // The layer: 80 edited files, 10 new ones, 10 deleted.
    for i in 0..80 {
        let path = format!("/{}", file_path(i));
        overlay.ok("read_file", json!({"file_path": path})).await;
        let mut content = std::fs::read_to_string(dir.path().join(file_path(i))).unwrap();
        content.push_str("    // TODO(needle): changed\n");
        overlay
            .ok("write_file", json!({"file_path": path, "content": content}))
            .await;
    }
    for i in 0..10 {
        overlay
            .ok(
                "write_file",
                json!({"file_path": format!("/crate{i:02}/src/new{i}.rs"), "content": "// TODO(needle): new\n".repeat(50)}),
            )
            .await;
    }
    for i in 80..90 {
        overlay
            .ok("delete", json!({"file_path": format!("/{}", file_path(i))}))
            .await;
    }
    let listed = overlay.ok("changes", json!({"path": "/"})).await.structured["total"].clone();
    assert_eq!(listed, json!(CHANGED), "the layer holds {CHANGED} changes");
    let servers = [("disk", &disk), ("overlay", &overlay)];
    // Warm-up: page cache, first calls.
    for (_, server) in servers {
        for (kind, _) in CALLS {
            for i in 0..3 {
                call(server, kind, i).await;
            }
        }
    }
    let mut spent = [[Duration::ZERO; 3]; 2];
    let mut cpu = [[Duration::ZERO; 3]; 2];
    for round in 0..rounds {
        // Who goes first alternates too.
        let order = if round.is_multiple_of(2) {
            [0, 1]
        } else {
            [1, 0]
        };
        for s in order {
            for (k, (kind, _)) in CALLS.iter().enumerate() {
                let started = Instant::now();
                let cpu_before = cpu_of(servers[s].1.pid());
                for i in 0..ROUND {
                    call(servers[s].1, *kind, round * ROUND + i).await;
                }
                spent[s][k] += started.elapsed();
                cpu[s][k] += cpu_of(servers[s].1.pid()).saturating_sub(cpu_before);
            }
        }
    }
    let calls = rounds * ROUND;
    println!(
        "overlay (layer of {CHANGED} changed files) vs plain disk mount, {files} files, {calls} calls of each kind per server, stdio; load before {load_before}, after {}:",
        load()
    );
    println!(
        "  call        disk ms   overlay ms   ratio   | server CPU ms per call: disk  overlay  ratio"
    );
    for (k, (_, name)) in CALLS.iter().enumerate() {
        let mean = |s: usize| spent[s][k].as_secs_f64() * 1e3 / calls as f64;
        let cpu_mean = |s: usize| cpu[s][k].as_secs_f64() * 1e3 / calls as f64;
        println!(
            "  {name:<10} {:>8.3} {:>11.3} {:>8.2}x   | {:>26.3} {:>8.3} {:>6.2}x",
            mean(0),
            mean(1),
            mean(1) / mean(0),
            cpu_mean(0),
            cpu_mean(1),
            cpu_mean(1) / cpu_mean(0).max(f64::MIN_POSITIVE)
        );
    }
    disk.stop().await;
    overlay.stop().await;
}
