//! Store search index benchmark (issue 28): `grep` over 20,000 files of real Rust source on a
//! disk mount, a SQLite store and a PostgreSQL store, each store with its trigram index and
//! without it (the full scan every store grep was before); the latency of writes and edits with
//! and without the index; and what the index adds to the database.
//!
//! The files are the `.rs` files under 200 KB of the local cargo registry (sorted by path),
//! repeated under `/c0/`, `/c1/`, … until there are `MOUNTFS_BENCH_FILES` (default 20,000).
//! Each store is filled through `StoreBackend::write`, the call `write_file` makes, eight at a
//! time; the disk tree is written with `std::fs`. Each search is timed `ROUNDS` times through
//! the backends' `grep` (files_with_matches), in process, and the best time kept. PostgreSQL
//! runs when `MOUNTFS_TEST_POSTGRES` is set (use a database of its own: the bench makes and
//! drops the index there).
//!
//! PostgreSQL is also searched at once after its fill, before any `ANALYZE` of the bench's own
//! (issue 45: the server must keep the planner's statistics current itself);
//! `MOUNTFS_BENCH_SEARCH_ONLY=1` stops after those searches (no write-latency phases).
//!
//! Run: `MOUNTFS_TEST_POSTGRES=postgres://postgres@127.0.0.1:5432/test_idx cargo bench --bench search_index`

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mountfs::ground::path::VirtualPath;
use mountfs::ground::search::{GrepCollect, GrepPattern, GrepQuery, SearchControl};
use mountfs::storage::backend::{Backend, DiskBackend, DiskOptions, StoreBackend, WriteMode};
use mountfs::storage::store::postgres::INDEX_LOCK;
use mountfs::storage::store::{Namespace, PostgresStore, SqliteStore, Store};

/// Searches timed per query and backend; the best is kept.
const ROUNDS: usize = 3;
/// Writes timed per latency figure.
const WRITES: usize = 300;
/// Writes in flight while filling a store.
const FILL_CONCURRENCY: usize = 8;

/// (label, pattern, literal, case_insensitive)
const QUERIES: &[(&str, &str, bool, bool)] = &[
    ("literal", "impl Drop for", true, false),
    ("unsafe\\s+impl", r"unsafe\s+impl", false, false),
    ("literal, case-insensitive", "impl drop for", true, true),
    ("literal-free regex", r"fn\s+[a-z_]{24,}\(", false, false),
];

fn corpus(count: usize) -> Vec<(String, Vec<u8>)> {
    let home = std::env::var("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(std::env::var("HOME").unwrap()).join(".cargo"));
    let mut sources = Vec::new();
    let registry = home.join("registry/src");
    for entry in ignore::WalkBuilder::new(&registry)
        .standard_filters(false)
        .build()
        .flatten()
    {
        let path = entry.path();
        let hidden = path.strip_prefix(&registry).is_ok_and(|rel| {
            rel.components()
                .any(|c| c.as_os_str().to_string_lossy().starts_with('.'))
        });
        if !hidden
            && path.extension().is_some_and(|e| e == "rs")
            && entry
                .metadata()
                .is_ok_and(|m| m.is_file() && m.len() < 200_000)
        {
            sources.push(path.to_path_buf());
        }
    }
    sources.sort();
    assert!(
        !sources.is_empty(),
        "no .rs files under {}",
        registry.display()
    );
    let mut files = Vec::with_capacity(count);
    let mut round = 0;
    while files.len() < count {
        for source in &sources {
            if files.len() == count {
                break;
            }
            let rel = source.strip_prefix(&registry).unwrap().to_string_lossy();
            let rel: String = rel
                .chars()
                .map(|c| if c.is_ascii_control() { '_' } else { c })
                .collect();
            files.push((format!("/c{round}/{rel}"), std::fs::read(source).unwrap()));
        }
        round += 1;
    }
    files
}

fn query(pattern: &str, literal: bool, ci: bool) -> GrepQuery {
    GrepQuery {
        dir: VirtualPath::root(),
        pattern: Arc::new(GrepPattern::new(pattern, literal, ci).unwrap()),
        file_filter: None,
        collect: GrepCollect::Files,
        control: SearchControl::default(),
    }
}

async fn best_grep(backend: &dyn Backend, q: &GrepQuery) -> (Duration, usize) {
    let mut best = Duration::MAX;
    let mut hits = 0;
    for _ in 0..ROUNDS {
        let started = Instant::now();
        hits = backend.grep(q).await.unwrap().len();
        best = best.min(started.elapsed());
    }
    (best, hits)
}

async fn fill(backend: &StoreBackend, files: &Arc<Vec<(String, Vec<u8>)>>) -> Duration {
    let started = Instant::now();
    let mut workers = Vec::new();
    for w in 0..FILL_CONCURRENCY {
        let (backend, files) = (backend.clone(), files.clone());
        workers.push(tokio::spawn(async move {
            let mut i = w;
            while i < files.len() {
                let (key, content) = &files[i];
                let path = VirtualPath::parse(key).unwrap();
                backend
                    .write(&path, content, WriteMode::Overwrite)
                    .await
                    .unwrap();
                i += FILL_CONCURRENCY;
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }
    started.elapsed()
}

/// Median and mean of `WRITES` sequential writes: overwrites of existing files with one line
/// added (what an edit writes), then new files.
async fn write_latency(
    backend: &StoreBackend,
    files: &[(String, Vec<u8>)],
    tag: &str,
) -> (Duration, Duration, Duration) {
    let mut edits = Vec::with_capacity(WRITES);
    for (i, (key, content)) in files
        .iter()
        .step_by(files.len() / WRITES)
        .take(WRITES)
        .enumerate()
    {
        let mut changed = content.clone();
        changed.extend(format!("// edited {tag} {i}\n").as_bytes());
        let path = VirtualPath::parse(key).unwrap();
        let started = Instant::now();
        backend
            .write(&path, &changed, WriteMode::Overwrite)
            .await
            .unwrap();
        edits.push(started.elapsed());
    }
    let mut creates = Vec::with_capacity(WRITES);
    for (i, (_, content)) in files.iter().take(WRITES).enumerate() {
        let path = VirtualPath::parse(&format!("/new-{tag}/{i}.rs")).unwrap();
        let started = Instant::now();
        backend
            .write(&path, content, WriteMode::CreateOnly)
            .await
            .unwrap();
        creates.push(started.elapsed());
    }
    edits.sort();
    creates.sort();
    let mean = edits.iter().sum::<Duration>() / u32::try_from(edits.len()).unwrap();
    (edits[edits.len() / 2], mean, creates[creates.len() / 2])
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn ratio(a: Duration, b: Duration) -> String {
    format!("{:.2}x", a.as_secs_f64() / b.as_secs_f64())
}

fn sqlite_sizes(file: &Path) -> (u64, u64) {
    let conn = rusqlite::Connection::open(file).unwrap();
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    let total = std::fs::metadata(file).unwrap().len();
    let index: i64 = conn
        .query_row(
            "SELECT sum(pgsize) FROM dbstat WHERE name LIKE 'mountfs_items_squeezed%'
                 OR name LIKE 'mountfs_items_joins%' OR name IN ('mountfs_items_not_text', 'mountfs_items_large', 'mountfs_text_pending')",
            [],
            |row| row.get(0),
        )
        .unwrap_or(-1);
    (total, u64::try_from(index).unwrap_or(0))
}

fn drop_sqlite_index(file: &Path) {
    let conn = rusqlite::Connection::open(file).unwrap();
    conn.execute_batch(
        "DROP TRIGGER mountfs_items_text_insert; DROP TRIGGER mountfs_items_text_update;
         DROP TRIGGER mountfs_items_text_delete; DROP INDEX mountfs_items_large;
         DROP INDEX mountfs_items_not_text;",
    )
    .unwrap();
}

struct Row {
    label: &'static str,
    disk: Duration,
    hits: usize,
    engines: Vec<(String, Duration, Duration)>,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let count: usize = std::env::var("MOUNTFS_BENCH_FILES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let files = Arc::new(corpus(count));
    let bytes: usize = files.iter().map(|(_, c)| c.len()).sum();
    println!(
        "{} files, {:.0} MB of Rust source; best of {ROUNDS}",
        files.len(),
        bytes as f64 / 1e6
    );

    let work = tempfile::tempdir().unwrap();
    let disk_dir = work.path().join("disk");
    for (key, content) in files.iter() {
        let path = disk_dir.join(key.trim_start_matches('/'));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
    let disk = DiskBackend::open(&disk_dir, DiskOptions::default()).unwrap();

    let mut rows: Vec<Row> = Vec::new();
    for (label, pattern, literal, ci) in QUERIES {
        let q = query(pattern, *literal, *ci);
        let (disk_time, hits) = best_grep(&disk, &q).await;
        rows.push(Row {
            label,
            disk: disk_time,
            hits,
            engines: Vec::new(),
        });
    }

    let mut notes = Vec::new();
    // PostgreSQL searched at once after its fill: (query, disk, first search, best of ROUNDS).
    let mut at_once: Vec<(&str, Duration, Duration, Duration)> = Vec::new();
    let ns = Namespace::new("bench").unwrap();

    // SQLite (MOUNTFS_BENCH_SKIP_SQLITE=1 leaves it out).
    let skip_sqlite = std::env::var("MOUNTFS_BENCH_SKIP_SQLITE").is_ok_and(|v| v == "1");
    if !skip_sqlite {
        let sqlite_file = work.path().join("store.db");
        let sqlite = Arc::new(SqliteStore::open(&sqlite_file).await.unwrap());
        let shared: Arc<dyn Store> = sqlite.clone();
        let indexed = StoreBackend::new(shared.clone(), ns.clone());
        let took = fill(&indexed, &files).await;
        notes.push(format!(
            "SQLite fill (index kept by triggers): {:.1} s",
            took.as_secs_f64()
        ));
        println!("{}", notes.last().unwrap());
        // Searches are timed on the index in its steady state: the folder gives way to writers,
        // so a bulk fill leaves most items listed as pending (searched, but read in full) until
        // it catches up; how long that takes is a figure of its own.
        let (caught_up, pending) = sqlite_catch_up(&sqlite_file).await;
        notes.push(format!(
            "SQLite folder caught up {:.1} s after the fill ({pending} items pending when it ended)",
            caught_up.as_secs_f64()
        ));
        println!("{}", notes.last().unwrap());
        engine_rows(
            &mut rows,
            "SQLite",
            &indexed,
            &StoreBackend::new(shared.clone(), ns.clone()).without_index(),
        )
        .await;
        let (with_index, _, _) =
            latency_line(&mut notes, "SQLite, with index", &indexed, &files, "a").await;
        let (total, index) = sqlite_sizes(&sqlite_file);
        notes.push(format!(
            "SQLite file {:.0} MB, of which the search index {:.0} MB ({:.0}% of the rest)",
            total as f64 / 1e6,
            index as f64 / 1e6,
            index as f64 * 100.0 / (total - index) as f64
        ));
        drop_sqlite_index(&sqlite_file);
        let (without, _, _) =
            latency_line(&mut notes, "SQLite, without index", &indexed, &files, "b").await;
        notes.push(format!(
            "SQLite edit latency with/without index: {}",
            ratio(with_index, without)
        ));
        drop(indexed);
    }

    // PostgreSQL.
    match std::env::var("MOUNTFS_TEST_POSTGRES") {
        Ok(url) if !url.is_empty() => {
            let pg = PostgresStore::connect(&url).await.unwrap();
            let started = Instant::now();
            while !pg.index_ready().await.unwrap() {
                assert!(started.elapsed() < Duration::from_secs(600));
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            let shared: Arc<dyn Store> = Arc::new(pg);
            shared.delete_prefix(&ns, "/").await.unwrap();
            let indexed = StoreBackend::new(shared.clone(), ns.clone());
            let took = fill(&indexed, &files).await;
            notes.push(format!(
                "PostgreSQL fill (writes left behind, up to the bound, for the background pass): {:.1} s",
                took.as_secs_f64()
            ));
            println!("{}", notes.last().unwrap());
            let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(connection);
            let caught_up = time_to_catch_up(&client).await;
            notes.push(format!(
                "PostgreSQL background pass caught up {:.1} s after the fill",
                caught_up.as_secs_f64()
            ));
            let filled = client
                .query_one("SELECT pg_relation_size('mountfs_items_text_keys')", &[])
                .await
                .unwrap()
                .get::<_, i64>(0);
            notes.push(format!(
                "PostgreSQL trigram index as filled (before the latency phases): {} MB",
                filled / 1_000_000
            ));
            // Searched at once (issue 45): no `ANALYZE` of the bench's own, so the plans rest on
            // the statistics the server itself kept while it was filled (autovacuum is off on
            // this machine's PostgreSQL, as it may be on a tuned server).
            let stats = client
                .query_one(
                    "SELECT c.reltuples::bigint, COALESCE(s.n_mod_since_analyze, 0)::bigint,
                            COALESCE(s.analyze_count, 0)::bigint, COALESCE(s.autoanalyze_count, 0)::bigint,
                            current_setting('autovacuum')
                     FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
                     WHERE c.relname = 'mountfs_items'",
                    &[],
                )
                .await
                .unwrap();
            let (reltuples, modified, analyzed, autoanalyzed, autovacuum): (
                i64,
                i64,
                i64,
                i64,
                String,
            ) = (
                stats.get(0),
                stats.get(1),
                stats.get(2),
                stats.get(3),
                stats.get(4),
            );
            notes.push(format!(
                "PostgreSQL statistics when searched at once: reltuples {reltuples}, rows changed since the last ANALYZE {modified}, ANALYZEs {analyzed} (autovacuum's {autoanalyzed}; autovacuum {autovacuum})"
            ));
            println!("{}", notes.last().unwrap());
            for (row, (_, pattern, literal, ci)) in rows.iter().zip(QUERIES) {
                let q = query(pattern, *literal, *ci);
                let started = Instant::now();
                let first_hits = indexed.grep(&q).await.unwrap().len();
                let first = started.elapsed();
                let (best, hits) = best_grep(&indexed, &q).await;
                assert_eq!(first_hits, hits);
                at_once.push((row.label, row.disk, first, best));
                println!(
                    "PostgreSQL at once {}: first {}, best {}, disk {}",
                    row.label,
                    ms(first),
                    ms(best),
                    ms(row.disk)
                );
            }
            if std::env::var("MOUNTFS_BENCH_SEARCH_ONLY").is_ok_and(|v| v == "1") {
                print_at_once(&at_once);
                return;
            }
            client.batch_execute("ANALYZE mountfs_items").await.unwrap();
            engine_rows(
                &mut rows,
                "PostgreSQL",
                &indexed,
                &StoreBackend::new(shared.clone(), ns.clone()).without_index(),
            )
            .await;
            let (with_index, _, _) =
                latency_line(&mut notes, "PostgreSQL, with index", &indexed, &files, "a").await;
            let caught_up = time_to_catch_up(&client).await;
            notes.push(format!(
                "PostgreSQL background pass caught up {:.2} s after the last of those writes",
                caught_up.as_secs_f64()
            ));
            // The same with the GIN index's pending list off: the pass inserts its keys into
            // the tree directly instead of appending them and merging in bulk.
            client
                .batch_execute("ALTER INDEX mountfs_items_text_keys SET (fastupdate = off)")
                .await
                .unwrap();
            latency_line(
                &mut notes,
                "PostgreSQL, with index, GIN fastupdate off",
                &indexed,
                &files,
                "c",
            )
            .await;
            let caught_up = time_to_catch_up(&client).await;
            notes.push(format!(
                "PostgreSQL background pass (fastupdate off) caught up {:.2} s after the last of those writes",
                caught_up.as_secs_f64()
            ));
            client
                .batch_execute("ALTER INDEX mountfs_items_text_keys RESET (fastupdate)")
                .await
                .unwrap();
            let size = client
                .query_one(
                    "SELECT pg_total_relation_size('mountfs_items'),
                            pg_relation_size('mountfs_items_text_keys'),
                            pg_relation_size('mountfs_items_text_keys_behind')
                                + pg_relation_size('mountfs_items_not_utf8')
                                + pg_relation_size('mountfs_items_size')",
                    &[],
                )
                .await
                .unwrap();
            let (total, text, other): (i64, i64, i64) = (size.get(0), size.get(1), size.get(2));
            notes.push(format!(
                "PostgreSQL table with indexes and TOAST {:.0} MB, of which the trigram index {:.0} MB and the three others {:.1} MB",
                total as f64 / 1e6,
                text as f64 / 1e6,
                other as f64 / 1e6
            ));
            // The same writes alternating between this store and a store without the index
            // (a database of its own whose build the bench holds off: no index, no pass), so
            // that a loaded machine slows both alike.
            let (plain_url, plain_db) = sibling_database(&url, "plain");
            client
                .batch_execute(&format!("DROP DATABASE IF EXISTS {plain_db} WITH (FORCE)"))
                .await
                .unwrap();
            client
                .batch_execute(&format!("CREATE DATABASE {plain_db}"))
                .await
                .unwrap();
            let (plain_client, connection) =
                tokio_postgres::connect(&plain_url, tokio_postgres::NoTls)
                    .await
                    .unwrap();
            tokio::spawn(connection);
            plain_client
                .execute("SELECT pg_advisory_lock($1)", &[&INDEX_LOCK])
                .await
                .unwrap();
            let plain_store = PostgresStore::connect(&plain_url).await.unwrap();
            let plain_shared: Arc<dyn Store> = Arc::new(plain_store);
            let plain = StoreBackend::new(plain_shared.clone(), ns.clone());
            let edited: Vec<(String, Vec<u8>)> = files
                .iter()
                .step_by(files.len() / WRITES)
                .take(WRITES)
                .cloned()
                .collect();
            for (key, content) in &edited {
                let path = VirtualPath::parse(key).unwrap();
                plain
                    .write(&path, content, WriteMode::Overwrite)
                    .await
                    .unwrap();
            }
            let (with_edit, without_edit, with_create, without_create) =
                interleaved_latency(&indexed, &plain, &edited, &files, "interleaved").await;
            notes.push(format!(
                "PostgreSQL, interleaved with a database without the index: edit median {} with, {} without ({}); create median {} with, {} without ({})",
                ms(with_edit),
                ms(without_edit),
                ratio(with_edit, without_edit),
                ms(with_create),
                ms(without_create),
                ratio(with_create, without_create)
            ));
            println!("{}", notes.last().unwrap());
            let caught_up = time_to_catch_up(&client).await;
            notes.push(format!(
                "PostgreSQL background pass caught up {:.2} s after the interleaved writes",
                caught_up.as_secs_f64()
            ));
            drop((plain, plain_shared));
            drop(plain_client);
            client
                .batch_execute(&format!("DROP DATABASE IF EXISTS {plain_db} WITH (FORCE)"))
                .await
                .unwrap();

            // The same against a copy of this very database (every item) with the indexes
            // dropped: the database without the index differs from this one by the index
            // alone, not also by its size (300 items above: its table and TOAST stay in
            // shared buffers; this one's do not).
            drop((indexed, shared));
            drop(client);
            let (copy_url, copy_db) = sibling_database(&url, "copy");
            let admin_url = database_url(&url, "postgres");
            let (admin, connection) = tokio_postgres::connect(&admin_url, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(connection);
            admin
                .batch_execute(&format!("DROP DATABASE IF EXISTS {copy_db} WITH (FORCE)"))
                .await
                .unwrap();
            let copy_started = Instant::now();
            loop {
                // The dropped pool's connections close in the background.
                let copied = admin
                    .batch_execute(&format!(
                        "CREATE DATABASE {copy_db} TEMPLATE {} STRATEGY FILE_COPY",
                        database_name(&url)
                    ))
                    .await;
                match copied {
                    Ok(()) => break,
                    Err(error) => {
                        assert!(
                            copy_started.elapsed() < Duration::from_secs(60),
                            "copying the database: {error}"
                        );
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                }
            }
            notes.push(format!(
                "PostgreSQL database copied (for the comparison below) in {:.1} s",
                copy_started.elapsed().as_secs_f64()
            ));
            let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(connection);
            let pg = PostgresStore::connect(&url).await.unwrap();
            assert!(pg.index_ready().await.unwrap());
            let shared: Arc<dyn Store> = Arc::new(pg);
            let indexed = StoreBackend::new(shared.clone(), ns.clone());
            let (copy_client, connection) =
                tokio_postgres::connect(&copy_url, tokio_postgres::NoTls)
                    .await
                    .unwrap();
            tokio::spawn(connection);
            copy_client
                .execute("SELECT pg_advisory_lock($1)", &[&INDEX_LOCK])
                .await
                .unwrap();
            copy_client
                .batch_execute(
                    "DROP INDEX mountfs_items_text_keys; DROP INDEX mountfs_items_text_keys_behind;
                     DROP INDEX mountfs_items_not_utf8; DROP INDEX mountfs_items_size;",
                )
                .await
                .unwrap();
            for each in [&copy_client, &client] {
                each.batch_execute("VACUUM ANALYZE mountfs_items")
                    .await
                    .unwrap();
            }
            let copy_store = PostgresStore::connect(&copy_url).await.unwrap();
            assert!(!copy_store.index_ready().await.unwrap());
            let copy_shared: Arc<dyn Store> = Arc::new(copy_store);
            let copy = StoreBackend::new(copy_shared.clone(), ns.clone());
            let edited: Vec<(String, Vec<u8>)> = files
                .iter()
                .skip(1)
                .step_by(files.len() / WRITES)
                .take(WRITES)
                .cloned()
                .collect();
            let (with_edit, without_edit, with_create, without_create) =
                interleaved_latency(&indexed, &copy, &edited, &files, "copy").await;
            notes.push(format!(
                "PostgreSQL, interleaved with a copy of the same database without the index: edit median {} with, {} without ({}); create median {} with, {} without ({})",
                ms(with_edit),
                ms(without_edit),
                ratio(with_edit, without_edit),
                ms(with_create),
                ms(without_create),
                ratio(with_create, without_create)
            ));
            println!("{}", notes.last().unwrap());
            let caught_up = time_to_catch_up(&client).await;
            notes.push(format!(
                "PostgreSQL background pass caught up {:.2} s after the writes interleaved with the copy",
                caught_up.as_secs_f64()
            ));
            drop((copy, copy_shared));
            drop(copy_client);
            admin
                .batch_execute(&format!("DROP DATABASE IF EXISTS {copy_db} WITH (FORCE)"))
                .await
                .unwrap();

            // Without the index: the indexes dropped, and a store connected afresh while the
            // bench holds the build's lock, so it neither rebuilds them nor runs its pass
            // (the index is not ready): its writes store the content only, as before the index.
            client
                .execute("SELECT pg_advisory_lock($1)", &[&INDEX_LOCK])
                .await
                .unwrap();
            client
                .batch_execute(
                    "DROP INDEX mountfs_items_text_keys; DROP INDEX mountfs_items_text_keys_behind;
                     DROP INDEX mountfs_items_not_utf8; DROP INDEX mountfs_items_size;",
                )
                .await
                .unwrap();
            drop((indexed, shared));
            let pg = PostgresStore::connect(&url).await.unwrap();
            assert!(!pg.index_ready().await.unwrap());
            let shared: Arc<dyn Store> = Arc::new(pg);
            let indexed = StoreBackend::new(shared.clone(), ns.clone());
            let (without, _, _) = latency_line(
                &mut notes,
                "PostgreSQL, without index",
                &indexed,
                &files,
                "b",
            )
            .await;
            notes.push(format!(
                "PostgreSQL edit latency with/without index: {}",
                ratio(with_index, without)
            ));
            shared.delete_prefix(&ns, "/").await.unwrap();
            client
                .execute("SELECT pg_advisory_unlock($1)", &[&INDEX_LOCK])
                .await
                .unwrap();
        }
        _ => println!("SKIPPED PostgreSQL: MOUNTFS_TEST_POSTGRES is not set"),
    }

    println!();
    println!(
        "| grep (files_with_matches) | hits | disk | store | indexed | scan (before) | indexed / disk |"
    );
    println!("|---|---|---|---|---|---|---|");
    for row in &rows {
        for (engine, with, without) in &row.engines {
            println!(
                "| {} | {} | {} | {engine} | {} | {} | {} |",
                row.label,
                row.hits,
                ms(row.disk),
                ms(*with),
                ms(*without),
                ratio(*with, row.disk)
            );
        }
    }
    print_at_once(&at_once);
    println!();
    for note in notes {
        println!("{note}");
    }
}

/// The table of the PostgreSQL store searched at once after its fill (issue 45: ≤ 1.0× disk).
fn print_at_once(at_once: &[(&str, Duration, Duration, Duration)]) {
    if at_once.is_empty() {
        return;
    }
    println!();
    println!(
        "| PostgreSQL searched at once after the fill | disk | first search | best of {ROUNDS} | first / disk | best / disk |"
    );
    println!("|---|---|---|---|---|---|");
    for (label, disk, first, best) in at_once {
        println!(
            "| {label} | {} | {} | {} | {} | {} |",
            ms(*disk),
            ms(*first),
            ms(*best),
            ratio(*first, *disk),
            ratio(*best, *disk)
        );
    }
}

/// The URL and name of a database next to the one of `url`, named after it with `suffix`.
fn sibling_database(url: &str, suffix: &str) -> (String, String) {
    let name = format!("{}_{suffix}", database_name(url));
    (database_url(url, &name), name)
}

/// `url` with the database `name` instead of its own.
fn database_url(url: &str, name: &str) -> String {
    let (base, options) = url.split_once('?').map_or((url, ""), |(b, o)| (b, o));
    let (server, _) = base.rsplit_once('/').unwrap();
    if options.is_empty() {
        format!("{server}/{name}")
    } else {
        format!("{server}/{name}?{options}")
    }
}

/// The name of the database of `url`.
fn database_name(url: &str) -> String {
    let base = url.split_once('?').map_or(url, |(b, _)| b);
    base.rsplit_once('/').unwrap().1.to_owned()
}

/// Medians of `edited`'s files overwritten with one line added, then of new files (under
/// `/new-{tag}/`), each write made on `a` then on `b` in turn: (edit a, edit b, create a,
/// create b).
async fn interleaved_latency(
    a: &StoreBackend,
    b: &StoreBackend,
    edited: &[(String, Vec<u8>)],
    files: &[(String, Vec<u8>)],
    tag: &str,
) -> (Duration, Duration, Duration, Duration) {
    async fn timed(backend: &StoreBackend, key: &str, content: &[u8], mode: WriteMode) -> Duration {
        let path = VirtualPath::parse(key).unwrap();
        let started = Instant::now();
        backend.write(&path, content, mode).await.unwrap();
        started.elapsed()
    }
    let (mut edit_a, mut edit_b, mut create_a, mut create_b) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (i, (key, content)) in edited.iter().enumerate() {
        let mut changed = content.clone();
        changed.extend(format!("// {tag} {i}\n").as_bytes());
        edit_a.push(timed(a, key, &changed, WriteMode::Overwrite).await);
        edit_b.push(timed(b, key, &changed, WriteMode::Overwrite).await);
    }
    for (i, (_, content)) in files.iter().take(edited.len()).enumerate() {
        let key = format!("/new-{tag}/{i}.rs");
        create_a.push(timed(a, &key, content, WriteMode::CreateOnly).await);
        create_b.push(timed(b, &key, content, WriteMode::CreateOnly).await);
    }
    let median = |mut v: Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    (
        median(edit_a),
        median(edit_b),
        median(create_a),
        median(create_b),
    )
}

/// How long after now the SQLite folder has left no item pending, and how many were pending
/// now.
async fn sqlite_catch_up(file: &Path) -> (Duration, i64) {
    let started = Instant::now();
    let conn = rusqlite::Connection::open(file).unwrap();
    let mut first = None;
    loop {
        let pending: i64 = conn
            .query_row("SELECT count(*) FROM mountfs_text_pending", [], |row| {
                row.get(0)
            })
            .unwrap();
        let first = *first.get_or_insert(pending);
        if pending == 0 {
            return (started.elapsed(), first);
        }
        assert!(started.elapsed() < Duration::from_secs(600));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// How long until no item is behind its trigrams (the background pass caught up).
async fn time_to_catch_up(client: &tokio_postgres::Client) -> Duration {
    let started = Instant::now();
    loop {
        let behind: i64 = client
            .query_one(
                "SELECT count(*) FROM mountfs_items
                 WHERE (text_keys_version IS DISTINCT FROM version) IS TRUE",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if behind == 0 {
            return started.elapsed();
        }
        assert!(started.elapsed() < Duration::from_secs(600));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn engine_rows(
    rows: &mut [Row],
    engine: &str,
    indexed: &StoreBackend,
    scanning: &StoreBackend,
) {
    for (row, (_, pattern, literal, ci)) in rows.iter_mut().zip(QUERIES) {
        let q = query(pattern, *literal, *ci);
        let (with, hits) = best_grep(indexed, &q).await;
        let (without, scan_hits) = best_grep(scanning, &q).await;
        assert_eq!(hits, scan_hits, "{engine} {pattern}");
        if hits != row.hits {
            println!(
                "note: {engine} finds {hits} files for {pattern}, the disk mount {}",
                row.hits
            );
        }
        println!(
            "{engine} {}: indexed {}, scan {}, disk {} ({} files)",
            row.label,
            ms(with),
            ms(without),
            ms(row.disk),
            hits
        );
        rows_push(row, engine, with, without);
    }
}

fn rows_push(row: &mut Row, engine: &str, with: Duration, without: Duration) {
    row.engines.push((engine.to_owned(), with, without));
}

async fn latency_line(
    notes: &mut Vec<String>,
    what: &str,
    backend: &StoreBackend,
    files: &[(String, Vec<u8>)],
    tag: &str,
) -> (Duration, Duration, Duration) {
    let (median, mean, create) = write_latency(backend, files, tag).await;
    notes.push(format!(
        "{what}: edit (overwrite) median {}, mean {}; create median {}",
        ms(median),
        ms(mean),
        ms(create)
    ));
    println!("{}", notes.last().unwrap());
    (median, mean, create)
}
