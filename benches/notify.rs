//! Change notifications across server instances (issue 13): how long a write on instance A
//! takes to reach a subscriber on instance B through PostgreSQL `LISTEN/NOTIFY`, and what many
//! subscribers cost the writer.
//!
//! - **Latency**: B subscribes to `/shared`; A writes N new files one after another; for each,
//!   the time from sending A's `write_file` to B's `notifications/resources/updated` for that
//!   file (so A's own write is included). p50/p99 over N writes.
//! - **Writer cost of subscribers**: A's sequential `write_file` rate with no subscriber, then
//!   with S subscriber processes (each with its own pool and LISTEN connection, draining its
//!   notifications). S defaults to 30: each process holds two PostgreSQL connections, and a
//!   default PostgreSQL allows 100 (`max_connections`); raise it to try more.
//!
//! Needs PostgreSQL (`MOUNTFS_TEST_POSTGRES`, or one on 127.0.0.1:5432).
//! Run: `cargo bench --bench notify` (`-- --writes N --subscribers S`).

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::{McpServer, PostgresNamespace};

fn quantile_ms(sorted: &[Duration], q: f64) -> f64 {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1].as_secs_f64() * 1e3
}

async fn server(mount: &str) -> McpServer {
    McpServer::start(&[
        "--mount".to_owned(),
        "/=memory".to_owned(),
        "--mount".to_owned(),
        mount.to_owned(),
    ])
    .await
}

async fn write_rate(writer: &McpServer, prefix: &str, writes: usize) -> f64 {
    let started = Instant::now();
    for i in 0..writes {
        writer
            .ok(
                "write_file",
                json!({"file_path": format!("/shared/{prefix}/f{i}.md"), "content": "x\n"}),
            )
            .await;
    }
    writes as f64 / started.elapsed().as_secs_f64()
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str, default: usize| -> usize {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|n| n.parse().ok())
            .unwrap_or(default)
    };
    let writes = flag("--writes", 1000);
    let subscriber_count = flag("--subscribers", 30);
    let Some(url) = support::postgres_url("notify benchmark") else {
        eprintln!("no PostgreSQL: nothing measured");
        return;
    };
    let namespace = PostgresNamespace::new(&url, "bench-notify");
    let mount = format!("/shared/=store:postgres:{url},namespace={}", namespace.name);

    let a = server(&mount).await;
    let b = server(&mount).await;
    let mut notices = b.notifications();
    let subscribed = b
        .request("resources/subscribe", json!({"uri": "mountfs:///shared"}))
        .await;
    assert!(subscribed.get("result").is_some(), "{subscribed}");
    // The listener connects with the first subscription.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let mut latencies = Vec::with_capacity(writes);
    let mut missed = 0usize;
    for i in 0..writes {
        let uri = format!("mountfs:///shared/lat/f{i}.md");
        let started = Instant::now();
        a.ok(
            "write_file",
            json!({"file_path": format!("/shared/lat/f{i}.md"), "content": "x\n"}),
        )
        .await;
        let arrived = tokio::time::timeout(Duration::from_secs(5), async {
            while let Some(notice) = notices.recv().await {
                if notice["method"] == "notifications/resources/updated"
                    && notice["params"]["uri"] == uri
                {
                    return;
                }
            }
        })
        .await;
        match arrived {
            Ok(()) => latencies.push(started.elapsed()),
            Err(_) => missed += 1,
        }
    }
    latencies.sort();
    println!("## Change notifications across instances (PostgreSQL LISTEN/NOTIFY)\n");
    println!("| writes | p50 ms | p99 ms | missed |\n|---|---|---|---|");
    println!(
        "| {writes} | {:.2} | {:.2} | {missed} |",
        quantile_ms(&latencies, 0.5),
        quantile_ms(&latencies, 0.99)
    );
    b.stop().await;

    let rate_alone = write_rate(&a, "alone", writes / 2).await;
    let mut subscribers = Vec::new();
    let mut drains = Vec::new();
    for _ in 0..subscriber_count {
        let s = server(&mount).await;
        let mut inbox = s.notifications();
        drains.push(tokio::spawn(async move {
            while inbox.recv().await.is_some() {}
        }));
        let done = s
            .request("resources/subscribe", json!({"uri": "mountfs:///shared"}))
            .await;
        assert!(done.get("result").is_some(), "{done}");
        subscribers.push(s);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rate_watched = write_rate(&a, "watched", writes / 2).await;
    println!("\n| writer | write_file/s |\n|---|---|");
    println!("| no subscriber | {rate_alone:.0} |");
    println!(
        "| {subscriber_count} subscribers ({subscriber_count} processes) | {rate_watched:.0} ({:.2}x) |",
        rate_watched / rate_alone
    );
    for s in subscribers {
        s.stop().await;
    }
    for d in drains {
        d.abort();
    }
    a.stop().await;
}
