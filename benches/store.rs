//! Store benchmark through the MCP server (issue 4): writes/s and reads/s of `write_file` and
//! `read_file` on a SQLite and a PostgreSQL mount, and the latency of `ls` of one directory in
//! a namespace of 1,000 files vs one of 100,000.
//!
//! Every measured operation is a `tools/call` to a real `mountfs` process over stdio, with
//! `CONCURRENCY` requests in flight. Only the seeding of the two `ls` namespaces bypasses the
//! server (one SQL statement or transaction), to keep the run short. PostgreSQL runs when
//! `MOUNTFS_TEST_POSTGRES` is set.
//!
//! Run: `MOUNTFS_TEST_POSTGRES=postgres://postgres@127.0.0.1:5432/test cargo bench --bench store`

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use mountfs::storage::store::{PostgresStore, SqliteStore};
use serde_json::json;
use support::McpServer;

/// Requests in flight at once.
const CONCURRENCY: usize = 8;
/// Files written, then read, per engine.
const FILES: usize = 2_000;
/// Each file's content: a 1 KiB note.
const NOTE_BYTES: usize = 1_024;
/// How many times each `ls` is timed.
const LS_ROUNDS: usize = 200;
/// The directory listed: this many files and subdirectories of its own, plus `archive/`.
const NOTES_FILES: usize = 50;
const NOTES_SUBDIRS: usize = 10;

fn mount_args(specs: &[String]) -> Vec<String> {
    specs
        .iter()
        .flat_map(|s| ["--mount".to_owned(), s.clone()])
        .collect()
}

/// Runs `count` calls of `tool` with `CONCURRENCY` in flight; returns calls per second.
async fn throughput(
    server: &Arc<McpServer>,
    tool: &'static str,
    count: usize,
    args: impl Fn(usize) -> serde_json::Value + Send + Sync + 'static,
) -> f64 {
    let args = Arc::new(args);
    let started = Instant::now();
    let mut workers = Vec::new();
    for w in 0..CONCURRENCY {
        let (server, args) = (server.clone(), args.clone());
        workers.push(tokio::spawn(async move {
            let mut i = w;
            while i < count {
                server.ok(tool, args(i)).await;
                i += CONCURRENCY;
            }
        }));
    }
    for worker in workers {
        worker.await.expect("worker");
    }
    count as f64 / started.elapsed().as_secs_f64()
}

async fn writes_and_reads(engine: &str, mount: String) {
    let server = Arc::new(McpServer::start(&mount_args(&["/=memory".to_owned(), mount])).await);
    let note = "x".repeat(NOTE_BYTES - 1) + "\n";
    let writes = throughput(
        &server,
        "write_file",
        FILES,
        move |i| json!({"file_path": format!("/m/notes/n{i:05}.md"), "content": note}),
    )
    .await;
    let reads = throughput(
        &server,
        "read_file",
        FILES * 2,
        |i| json!({"file_path": format!("/m/notes/n{:05}.md", i % FILES)}),
    )
    .await;
    println!(
        "{engine:<10} write_file {writes:>8.0}/s   read_file {reads:>8.0}/s   ({FILES} files of {NOTE_BYTES} B, {CONCURRENCY} in flight)"
    );
    if let Ok(server) = Arc::try_unwrap(server) {
        server.stop().await;
    }
}

/// Keys of a namespace of `total` files: `/notes/` holds `NOTES_FILES` files and
/// `NOTES_SUBDIRS` small subdirectories, and everything else lies in `/notes/archive/`, the
/// subtree `ls /notes` must skip without reading it.
fn keys(total: usize) -> Vec<String> {
    let mut keys = Vec::with_capacity(total);
    for i in 0..NOTES_FILES {
        keys.push(format!("/notes/n{i:03}.md"));
    }
    for d in 0..NOTES_SUBDIRS {
        for i in 0..5 {
            keys.push(format!("/notes/sub{d}/s{i}.md"));
        }
    }
    let mut i = 0;
    while keys.len() < total {
        keys.push(format!("/notes/archive/{:03}/a{i:06}.md", i % 1000));
        i += 1;
    }
    keys
}

fn seed_sqlite(file: &std::path::Path, namespace: &str, total: usize) {
    let mut conn = rusqlite::Connection::open(file).expect("open SQLite");
    let tx = conn.transaction().expect("transaction");
    {
        let mut insert = tx
            .prepare(
                "INSERT INTO mountfs_items
                     (namespace, key, encoding, size, created_at, modified_at, version, content)
                 VALUES (?1, ?2, 'utf-8', 6, 0, 0,
                     (SELECT value FROM mountfs_counters WHERE name = 'version') + ?3, 'note.\n')",
            )
            .expect("prepare");
        for (i, key) in keys(total).iter().enumerate() {
            insert
                .execute(rusqlite::params![namespace, key, i as i64 + 1])
                .expect("insert");
        }
    }
    tx.execute(
        "UPDATE mountfs_counters SET value = (SELECT MAX(version) FROM mountfs_items) WHERE name = 'version'",
        [],
    )
    .expect("counter");
    tx.commit().expect("commit");
}

async fn seed_postgres(url: &str, namespace: &str, total: usize) {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
    client
        .execute(
            "INSERT INTO mountfs_items
                 (namespace, key, encoding, size, created_at, modified_at, version, content)
             SELECT $1, k, 'utf-8', 6, 0, 0, nextval('mountfs_versions'), 'note.\n'::bytea
             FROM unnest($2::text[]) AS k",
            &[&namespace, &keys(total)],
        )
        .await
        .expect("seed");
    client
        .execute("ANALYZE mountfs_items", &[])
        .await
        .expect("analyze");
}

/// Median and mean latency of `ls path`.
async fn time_ls(server: &McpServer, path: &str) -> (Duration, Duration, usize) {
    let mut samples = Vec::with_capacity(LS_ROUNDS);
    let mut entries = 0;
    for _ in 0..LS_ROUNDS {
        let started = Instant::now();
        let answer = server.ok("ls", json!({"path": path})).await;
        samples.push(started.elapsed());
        entries = answer.text.lines().count();
    }
    samples.sort();
    let mean = samples.iter().sum::<Duration>() / LS_ROUNDS as u32;
    (samples[LS_ROUNDS / 2], mean, entries)
}

async fn ls_small_vs_large(engine: &str, small_mount: String, large_mount: String) {
    let server = McpServer::start(&mount_args(&[
        "/=memory".to_owned(),
        small_mount,
        large_mount,
    ]))
    .await;
    // Warm up both (connections, statement caches, page cache).
    for _ in 0..10 {
        server.ok("ls", json!({"path": "/small/notes"})).await;
        server.ok("ls", json!({"path": "/large/notes"})).await;
    }
    let (small_median, small_mean, small_entries) = time_ls(&server, "/small/notes").await;
    let (large_median, large_mean, large_entries) = time_ls(&server, "/large/notes").await;
    assert_eq!(small_entries, large_entries, "the same directory in both");
    println!(
        "{engine:<10} ls /notes ({small_entries} entries): 1,000-file namespace median {small_median:?} (mean {small_mean:?}); 100,000-file namespace median {large_median:?} (mean {large_mean:?}); ratio {:.2}x",
        large_median.as_secs_f64() / small_median.as_secs_f64()
    );
    server.stop().await;
}

async fn sqlite_bench() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("bench.db");
    writes_and_reads("SQLite", format!("/m/=store:sqlite:{}", file.display())).await;

    let ls_file = dir.path().join("ls.db");
    drop(SqliteStore::open(&ls_file).await.expect("create schema"));
    seed_sqlite(&ls_file, "small", 1_000);
    seed_sqlite(&ls_file, "large", 100_000);
    ls_small_vs_large(
        "SQLite",
        format!("/small/=store:sqlite:{},namespace=small", ls_file.display()),
        format!("/large/=store:sqlite:{},namespace=large", ls_file.display()),
    )
    .await;
}

async fn postgres_bench(url: &str) {
    let rw = support::PostgresNamespace::new(url, "bench-rw");
    writes_and_reads(
        "PostgreSQL",
        format!("/m/=store:postgres:{url},namespace={}", rw.name),
    )
    .await;

    drop(PostgresStore::connect(url).await.expect("create schema"));
    let small = support::PostgresNamespace::new(url, "bench-small");
    let large = support::PostgresNamespace::new(url, "bench-large");
    seed_postgres(url, &small.name, 1_000).await;
    seed_postgres(url, &large.name, 100_000).await;
    ls_small_vs_large(
        "PostgreSQL",
        format!("/small/=store:postgres:{url},namespace={}", small.name),
        format!("/large/=store:postgres:{url},namespace={}", large.name),
    )
    .await;
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` runs this as a quick check only.
    if !std::env::args().any(|a| a == "--bench") {
        println!("store bench: run with `cargo bench --bench store`");
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        sqlite_bench().await;
        if let Some(url) = support::postgres_url("the PostgreSQL store benchmark") {
            postgres_bench(&url).await;
        }
    });
}
