//! Where an indexed store grep spends its time (issue 28): for one pattern, the candidates
//! query, fetching the candidates' contents (one group at a time, and two at once as the
//! backend does), and confirming them, each timed alone, then the whole `grep`; each with the
//! process's CPU time (best wall time of 5). For SQLite also the same contents read on a bare
//! connection (row by key, incremental blob I/O) without and with `mmap_size`; for PostgreSQL
//! the same candidates read raw by SQL: without detoasting (`octet_length`), detoasted and
//! decompressed on the server only (`get_byte`), sent (`content`), and searched by the
//! server's own regex engine and `position`.
//!
//! The stores are kept between runs (filled once, with the corpus of `search_index`), so a
//! change is measured in a minute. `MOUNTFS_PROFILE_DIR` (default `target/search-profile`)
//! holds the SQLite file and the disk tree; `MOUNTFS_TEST_POSTGRES` names a database of its
//! own for PostgreSQL (filled once, kept: drop it after). `MOUNTFS_BENCH_FILES` (default
//! 20,000), `MOUNTFS_PROFILE_PATTERN` (default `unsafe\s+impl`), `MOUNTFS_BENCH_SKIP_SQLITE=1`.
//!
//! Run: `MOUNTFS_PROFILE_DIR=/tmp/prof MOUNTFS_TEST_POSTGRES=postgres://postgres@127.0.0.1:5432/prof
//! cargo bench --bench search_profile`

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mountfs::ground::path::VirtualPath;
use mountfs::ground::search::{GrepCollect, GrepPattern, GrepQuery, SearchControl};
use mountfs::storage::backend::{Backend, DiskBackend, DiskOptions, StoreBackend, WriteMode};
use mountfs::storage::store::{
    CandidateQuery, ItemMeta, ListQuery, ListStart, Namespace, PostgresStore, SqliteStore, Store,
};

const ROUNDS: usize = 5;

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

async fn fill(backend: &StoreBackend, files: &Arc<Vec<(String, Vec<u8>)>>) {
    let mut workers = Vec::new();
    for w in 0..8 {
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
                i += 8;
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }
}

fn cpu() -> Duration {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: getrusage fills the struct it is given.
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr());
        usage.assume_init()
    };
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

fn query(pattern: &str) -> GrepQuery {
    GrepQuery {
        dir: VirtualPath::root(),
        pattern: Arc::new(GrepPattern::new(pattern, false, false).unwrap()),
        file_filter: None,
        collect: GrepCollect::Files,
        control: SearchControl::default(),
    }
}

fn ms(d: Duration) -> String {
    format!("{:7.1} ms", d.as_secs_f64() * 1000.0)
}

/// Best wall time and the CPU time of that round, of `ROUNDS` runs of `f`.
async fn best<T, F: std::future::Future<Output = T>>(
    mut f: impl FnMut() -> F,
) -> (Duration, Duration, T) {
    let mut out = None;
    let mut best = (Duration::MAX, Duration::ZERO);
    for _ in 0..ROUNDS {
        let (c0, t0) = (cpu(), Instant::now());
        let value = f().await;
        let (wall, used) = (t0.elapsed(), cpu() - c0);
        if wall < best.0 {
            best = (wall, used);
        }
        out = Some(value);
    }
    (best.0, best.1, out.unwrap())
}

async fn all_candidates(store: &Arc<dyn Store>, ns: &Namespace, q: &GrepQuery) -> Vec<ItemMeta> {
    let plan = mountfs::storage::store::plan::plan(&q.pattern).expect("an indexable pattern");
    let mut cq = CandidateQuery {
        list: ListQuery::first("/", 2048),
        plan,
        larger_than: q.pattern.max_line_bytes,
    };
    let mut out = Vec::new();
    loop {
        let page = store
            .candidates(ns, &cq)
            .await
            .unwrap()
            .expect("index ready");
        let full = page.len() >= 2048;
        out.extend(page.iter().cloned());
        match page.last() {
            Some(last) if full => cq.list.start = ListStart::After(last.key.clone()),
            _ => return out,
        }
    }
}

async fn profile(
    engine: &str,
    store: Arc<dyn Store>,
    ns: &Namespace,
    q: &GrepQuery,
    disk: Duration,
) {
    let (wall, used, cands) = best(|| all_candidates(&store, ns, q)).await;
    let bytes: u64 = cands.iter().map(|m| m.size).sum();
    println!(
        "{engine}: candidates query    {} (cpu {}) {} items {:.1} MB",
        ms(wall),
        ms(used),
        cands.len(),
        bytes as f64 / 1e6
    );
    let keys: Vec<String> = cands.iter().map(|m| m.key.clone()).collect();
    let (wall, used, items) = best(|| async {
        let mut items = Vec::new();
        for group in keys.chunks(64) {
            items.extend(store.get_many(ns, group).await.unwrap());
        }
        items
    })
    .await;
    println!(
        "{engine}: get_many (1 at once)  {} (cpu {})",
        ms(wall),
        ms(used)
    );
    let (wall, used, _) = best(|| async {
        let mut tasks = Vec::new();
        for half in keys.chunks(keys.len().div_ceil(2)) {
            let (store, ns, half) = (store.clone(), ns.clone(), half.to_vec());
            tasks.push(tokio::spawn(async move {
                let mut n = 0;
                for group in half.chunks(64) {
                    n += store.get_many(&ns, group).await.unwrap().len();
                }
                n
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    })
    .await;
    println!(
        "{engine}: get_many (2 at once)  {} (cpu {})",
        ms(wall),
        ms(used)
    );
    let matcher = q.pattern.whole_text_matcher().unwrap();
    use grep_matcher::Matcher;
    let (wall, used, hits) = best(|| async {
        items
            .iter()
            .filter(|i| matcher.is_match(&i.content).unwrap())
            .count()
    })
    .await;
    println!(
        "{engine}: whole-text is_match   {} (cpu {}) {hits} may match",
        ms(wall),
        ms(used)
    );
    let re = regex::bytes::Regex::new(&q.pattern.text).unwrap();
    let (wall, used, hits) =
        best(|| async { items.iter().filter(|i| re.is_match(&i.content)).count() }).await;
    println!(
        "{engine}: regex::bytes is_match {} (cpu {}) {hits}",
        ms(wall),
        ms(used)
    );
    let (wall, used, _) = best(|| async {
        items
            .iter()
            .filter(|i| std::str::from_utf8(&i.content).is_ok())
            .count()
    })
    .await;
    println!(
        "{engine}: utf-8 check           {} (cpu {})",
        ms(wall),
        ms(used)
    );
    drop(items);
    let backend = StoreBackend::new(store.clone(), ns.clone());
    let (wall, used, hits) = best(|| async { backend.grep(q).await.unwrap().len() }).await;
    println!(
        "{engine}: whole grep            {} (cpu {}) {hits} files; / disk {:.2}x",
        ms(wall),
        ms(used),
        wall.as_secs_f64() / disk.as_secs_f64()
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let count: usize = std::env::var("MOUNTFS_BENCH_FILES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let pattern =
        std::env::var("MOUNTFS_PROFILE_PATTERN").unwrap_or_else(|_| r"unsafe\s+impl".to_owned());
    let dir = std::env::var("MOUNTFS_PROFILE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from("target/search-profile"));
    std::fs::create_dir_all(&dir).unwrap();
    let ns = Namespace::new("bench").unwrap();
    let q = query(&pattern);
    let disk_dir = dir.join("disk");
    let files = if disk_dir.join(".done").exists() {
        None
    } else {
        let files = Arc::new(corpus(count));
        for (key, content) in files.iter() {
            let path = disk_dir.join(key.trim_start_matches('/'));
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, content).unwrap();
        }
        std::fs::write(disk_dir.join(".done"), b"").unwrap();
        Some(files)
    };
    let files = || files.clone().unwrap_or_else(|| Arc::new(corpus(count)));
    let disk = DiskBackend::open(&disk_dir, DiskOptions::default()).unwrap();
    let (disk_time, disk_cpu, hits) = best(|| async { disk.grep(&q).await.unwrap().len() }).await;
    println!(
        "load: {}",
        std::fs::read_to_string("/proc/loadavg").unwrap().trim()
    );
    println!(
        "disk: grep {} (cpu {}) {hits} files",
        ms(disk_time),
        ms(disk_cpu)
    );

    if std::env::var("MOUNTFS_BENCH_SKIP_SQLITE").is_err() {
        let file = dir.join("store.db");
        let fresh = !file.exists();
        let sqlite = Arc::new(SqliteStore::open(&file).await.unwrap());
        let store: Arc<dyn Store> = sqlite.clone();
        if fresh {
            fill(&StoreBackend::new(store.clone(), ns.clone()), &files()).await;
        }
        wait_sqlite(&file).await;
        let cands = all_candidates(&store, &ns, &q).await;
        for mmap in [0i64, 1 << 30] {
            let (wall, used, n) = best(|| async { raw_sqlite_reads(&file, &cands, mmap) }).await;
            println!(
                "SQLite raw blob reads, mmap_size {mmap:>10}: {} (cpu {}) {n} bytes",
                ms(wall),
                ms(used)
            );
        }
        profile("SQLite", store, &ns, &q, disk_time).await;
    }
    if let Ok(url) = std::env::var("MOUNTFS_TEST_POSTGRES") {
        let pg = PostgresStore::connect(&url).await.unwrap();
        while !pg.index_ready().await.unwrap() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let store: Arc<dyn Store> = Arc::new(pg);
        let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        let n: i64 = client
            .query_one("SELECT count(*) FROM mountfs_items", &[])
            .await
            .unwrap()
            .get(0);
        if n == 0 {
            fill(&StoreBackend::new(store.clone(), ns.clone()), &files()).await;
        }
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
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        client.batch_execute("ANALYZE mountfs_items").await.unwrap();
        let cands = all_candidates(&store, &ns, &q).await;
        let keys: Vec<String> = cands.iter().map(|m| m.key.clone()).collect();
        for (what, sql) in [
            (
                "octet_length (no detoast)",
                "SELECT octet_length(content) FROM mountfs_items WHERE namespace = $1 AND key = ANY($2)",
            ),
            (
                "get_byte (detoast+decompress)",
                "SELECT get_byte(content, 0) FROM mountfs_items WHERE namespace = $1 AND key = ANY($2)",
            ),
            (
                "ERE ~ on text (server regex)",
                "SELECT convert_from(content, 'UTF8') ~ 'unsafe[[:space:]]+impl' FROM mountfs_items WHERE namespace = $1 AND key = ANY($2)",
            ),
            (
                "position 'unsafe' (server)",
                "SELECT position('unsafe'::bytea in content) FROM mountfs_items WHERE namespace = $1 AND key = ANY($2)",
            ),
            (
                "content (detoast+send)",
                "SELECT content FROM mountfs_items WHERE namespace = $1 AND key = ANY($2)",
            ),
            (
                "pg_column_compression",
                "SELECT pg_column_compression(content) FROM mountfs_items WHERE namespace = $1 AND key = ANY($2)",
            ),
        ] {
            let (wall, used, rows) = best(|| async {
                let mut rows = Vec::new();
                for group in keys.chunks(64) {
                    rows.extend(client.query(sql, &[&ns.as_str(), &group]).await.unwrap());
                }
                rows
            })
            .await;
            let mut note = String::new();
            if what == "pg_column_compression" {
                let mut kinds = std::collections::BTreeMap::new();
                for row in &rows {
                    let k: Option<String> = row.get(0);
                    *kinds.entry(k.unwrap_or_else(|| "none".into())).or_insert(0) += 1;
                }
                note = format!("{kinds:?}");
            }
            println!(
                "PostgreSQL raw {what:28} {} (client cpu {}) {note}",
                ms(wall),
                ms(used)
            );
        }
        profile("PostgreSQL", store, &ns, &q, disk_time).await;
    }
}

/// The candidates' contents read on one connection of its own, as `get_many` reads them (row
/// by key, then incremental blob I/O), with `mmap_size` set.
fn raw_sqlite_reads(file: &Path, cands: &[ItemMeta], mmap: i64) -> usize {
    let conn = rusqlite::Connection::open(file).unwrap();
    conn.pragma_update(None, "mmap_size", mmap).unwrap();
    let mut stmt = conn
        .prepare("SELECT rowid FROM mountfs_items WHERE namespace = 'bench' AND key = ?1")
        .unwrap();
    let mut total = 0;
    for meta in cands {
        let rowid: i64 = stmt.query_row([&meta.key], |row| row.get(0)).unwrap();
        let blob = conn
            .blob_open(rusqlite::MAIN_DB, "mountfs_items", "content", rowid, true)
            .unwrap();
        let mut content = vec![0u8; blob.len()];
        blob.read_at_exact(&mut content, 0).unwrap();
        total += content.len();
    }
    total
}

async fn wait_sqlite(file: &Path) {
    let conn = rusqlite::Connection::open(file).unwrap();
    loop {
        let pending: i64 = conn
            .query_row("SELECT count(*) FROM mountfs_text_pending", [], |row| {
                row.get(0)
            })
            .unwrap();
        if pending == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
