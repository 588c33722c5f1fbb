//! What the audit log costs an edit (issue 14; target: at most 10% of the edit): sequential
//! `edit_file` calls over stdio to real server processes, one with `--audit off` and one with
//! each log (`--audit sqlite:FILE`, and `--audit postgres:URL` when PostgreSQL answers, once as
//! mountfs sets its sessions up and once with durable commits, `postgres-durable`), on the
//! same kind of mount, in one run. The servers take turns in rounds of [`ROUND`] edits so that
//! drift of a shared machine hits every configuration alike; the figures are the mean and the
//! median time per edit and each log's overhead over `off` (the median is the steadier one on
//! a shared disk, whose occasional stalls swing the mean).
//!
//! Run: `cargo bench --bench audit` (`-- --edits N --mount disk|memory`).

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::McpServer;

/// Edits per configuration before the next one takes its turn.
const ROUND: usize = 50;

/// One server and the time its edits took.
struct Config {
    name: String,
    server: McpServer,
    spent: Duration,
    edits: usize,
    /// Each measured edit's time, for the median (robust to a shared disk's stalls).
    times: Vec<Duration>,
}

/// One edit of `/f.txt`, flipping line 50 between two texts.
async fn edit(server: &McpServer, i: usize) {
    let (old, new) = if i.is_multiple_of(2) {
        ("line 50 alpha", "line 50 beta")
    } else {
        ("line 50 beta", "line 50 alpha")
    };
    server
        .ok(
            "edit_file",
            json!({"file_path": "/f.txt", "old_string": old, "new_string": new}),
        )
        .await;
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let edits: usize = flag("--edits").and_then(|n| n.parse().ok()).unwrap_or(1000);
    let kind = flag("--mount").unwrap_or_else(|| "disk".to_owned());
    let dir = tempfile::tempdir().unwrap();
    let mut targets = vec![
        ("off".to_owned(), "off".to_owned()),
        (
            "sqlite".to_owned(),
            format!("sqlite:{}", dir.path().join("audit.db").display()),
        ),
    ];
    if let Some(url) = support::postgres_url("audit bench: PostgreSQL log") {
        targets.push(("postgres".to_owned(), format!("postgres:{url}")));
        // The log as it was before its sessions committed asynchronously: every append waits
        // for PostgreSQL to flush its write-ahead log.
        let joint = if url.contains('?') { '&' } else { '?' };
        targets.push((
            "postgres-durable".to_owned(),
            format!("postgres:{url}{joint}options=-c%20synchronous_commit%3Don"),
        ));
    }
    let content: String = (1..=100)
        .map(|n| {
            if n == 50 {
                "line 50 alpha\n".to_owned()
            } else {
                format!("line {n} of a file being edited\n")
            }
        })
        .collect();
    let mut configs = Vec::new();
    for (name, target) in targets {
        let mount = match kind.as_str() {
            "memory" => "/=memory".to_owned(),
            _ => {
                let root = dir.path().join(format!("disk-{name}"));
                std::fs::create_dir(&root).unwrap();
                format!("/=disk:{}", root.display())
            }
        };
        let server =
            McpServer::start(&["--mount".to_owned(), mount, "--audit".to_owned(), target]).await;
        server
            .ok(
                "write_file",
                json!({"file_path": "/f.txt", "content": content}),
            )
            .await;
        // Warm-up: connections, caches, the first WAL pages.
        for i in 0..20 {
            edit(&server, i).await;
        }
        configs.push(Config {
            name,
            server,
            spent: Duration::ZERO,
            edits: 20,
            times: Vec::with_capacity(edits),
        });
    }
    let mut done = 0;
    while done < edits {
        for config in &mut configs {
            for i in 0..ROUND {
                let started = Instant::now();
                edit(&config.server, config.edits + i).await;
                let took = started.elapsed();
                config.spent += took;
                config.times.push(took);
            }
            config.edits += ROUND;
        }
        done += ROUND;
    }
    let mean = |config: &Config| config.spent.as_secs_f64() * 1e6 / done as f64;
    let median = |config: &Config| {
        let mut times = config.times.clone();
        times.sort_unstable();
        times[times.len() / 2].as_secs_f64() * 1e6
    };
    let (base, base_median) = (mean(&configs[0]), median(&configs[0]));
    println!(
        "audit log cost per edit_file on a {kind} mount, {done} sequential edits each, stdio:"
    );
    for config in &configs {
        let (us, mid) = (mean(config), median(config));
        println!(
            "  --audit {:<16} mean {us:>8.1} us/edit ({:+6.1}% vs off)   median {mid:>8.1} us ({:+6.1}% vs off)",
            config.name,
            (us / base - 1.0) * 100.0,
            (mid / base_median - 1.0) * 100.0
        );
    }
    for config in configs {
        config.server.stop().await;
    }
}
