//! Backends under test. Each fixture gives a fresh, empty backend, the directory under which the
//! cases work (`base`: `/` for a plain backend, a mount prefix for a composite, so every call is
//! routed and re-prefixed), and the backend's capabilities as parameters (never `if backend == …`
//! inside a case).

use std::any::Any;
use std::sync::Arc;

use mountfs::backend::{
    Backend, CompositeBackend, FilesystemBackend, FilesystemOptions, Mount, StateBackend,
    StoreBackend,
};
use mountfs::path::VirtualPath;
use mountfs::store::{Namespace, PostgresStore, SqliteStore, Store};

use crate::support;

/// What a backend can do, where backends legitimately differ.
#[derive(Debug, Clone, Copy)]
pub struct Capabilities {
    /// Directories exist only while a file lies under them (memory, stores); on disk an empty
    /// directory stays.
    pub implicit_directories: bool,
}

/// A backend under test.
pub struct Fixture {
    pub backend: Arc<dyn Backend>,
    pub base: VirtualPath,
    pub caps: Capabilities,
    /// Keeps temporary resources (directories, databases) alive for the test.
    pub _guard: Option<Box<dyn Any + Send + Sync>>,
}

impl Fixture {
    /// `rel` (e.g. `"a/b.txt"`) under the fixture's base.
    pub fn path(&self, rel: &str) -> VirtualPath {
        if rel.is_empty() {
            return self.base.clone();
        }
        self.base.join_relative(rel).expect("valid test path")
    }
}

const IMPLICIT: Capabilities = Capabilities {
    implicit_directories: true,
};

/// A writable mount of `backend` at `prefix`.
fn mount(prefix: &str, backend: Arc<dyn Backend>) -> Mount {
    Mount {
        prefix: VirtualPath::parse(prefix).expect("prefix"),
        backend,
        read_only: false,
    }
}

fn memory_mount(prefix: &str) -> Mount {
    mount(prefix, Arc::new(StateBackend::new()))
}

/// The memory backend on its own.
pub async fn memory() -> Option<Fixture> {
    Some(Fixture {
        backend: Arc::new(StateBackend::new()),
        base: VirtualPath::root(),
        caps: IMPLICIT,
        _guard: None,
    })
}

/// A composite of several memory mounts; cases run under `/work`, a mount of its own.
pub async fn composite() -> Option<Fixture> {
    let composite = CompositeBackend::new(
        vec![
            memory_mount("/"),
            memory_mount("/work"),
            memory_mount("/workshop"),
        ],
        || Arc::new(StateBackend::new()),
    );
    Some(Fixture {
        backend: Arc::new(composite),
        base: VirtualPath::parse("/work").expect("base"),
        caps: IMPLICIT,
        _guard: None,
    })
}

/// A composite whose cases run two mounts deep (`/a/b` inside `/a`), with a sibling mount that
/// must never leak into the answers.
pub async fn composite_nested() -> Option<Fixture> {
    let composite = CompositeBackend::new(
        vec![
            memory_mount("/"),
            memory_mount("/a"),
            memory_mount("/a/b"),
            memory_mount("/a/bc"),
        ],
        || Arc::new(StateBackend::new()),
    );
    Some(Fixture {
        backend: Arc::new(composite),
        base: VirtualPath::parse("/a/b").expect("base"),
        caps: IMPLICIT,
        _guard: None,
    })
}

/// A SQLite store in a fresh temporary file (its parent directory created by the store).
async fn sqlite_store() -> (Arc<dyn Backend>, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteStore::open(dir.path().join("store/conformance.db"))
        .await
        .expect("open SQLite store");
    let namespace = Namespace::new("default").expect("namespace");
    (Arc::new(StoreBackend::new(Arc::new(store), namespace)), dir)
}

/// A fresh namespace of the test PostgreSQL server (deleted when the guard drops), or `None`
/// after one line saying why when `MOUNTFS_TEST_POSTGRES` is not set.
async fn postgres_store() -> Option<(Arc<dyn Backend>, support::PostgresNamespace)> {
    let url = support::postgres_url("postgres conformance case")?;
    let store: Arc<dyn Store> = Arc::new(
        PostgresStore::connect(&url)
            .await
            .expect("connect to MOUNTFS_TEST_POSTGRES"),
    );
    let guard = support::PostgresNamespace::new(&url, "t-conf");
    let namespace = Namespace::new(&guard.name).expect("namespace");
    Some((Arc::new(StoreBackend::new(store, namespace)), guard))
}

/// The SQLite store backend on its own.
pub async fn sqlite() -> Option<Fixture> {
    let (backend, dir) = sqlite_store().await;
    Some(Fixture {
        backend,
        base: VirtualPath::root(),
        caps: IMPLICIT,
        _guard: Some(Box::new(dir)),
    })
}

/// The PostgreSQL store backend on its own (skipped without `MOUNTFS_TEST_POSTGRES`).
pub async fn postgres() -> Option<Fixture> {
    let (backend, guard) = postgres_store().await?;
    Some(Fixture {
        backend,
        base: VirtualPath::root(),
        caps: IMPLICIT,
        _guard: Some(Box::new(guard)),
    })
}

/// Memory at `/`, SQLite at `/work` (where cases run) and PostgreSQL at `/workshop` (memory
/// there when PostgreSQL is not configured): a sibling whose name extends the prefix and must
/// never leak into the answers.
pub async fn composite_stores() -> Option<Fixture> {
    let (sqlite, dir) = sqlite_store().await;
    let (below, pg_guard): (Arc<dyn Backend>, Option<support::PostgresNamespace>) =
        match postgres_store().await {
            Some((backend, guard)) => (backend, Some(guard)),
            None => (Arc::new(StateBackend::new()), None),
        };
    let composite = CompositeBackend::new(
        vec![
            memory_mount("/"),
            mount("/work", sqlite),
            mount("/workshop", below),
        ],
        || Arc::new(StateBackend::new()),
    );
    Some(Fixture {
        backend: Arc::new(composite),
        base: VirtualPath::parse("/work").expect("base"),
        caps: IMPLICIT,
        _guard: Some(Box::new((dir, pg_guard))),
    })
}

/// PostgreSQL at `/pg`, with cases run there, beside memory at `/` and SQLite at `/pgx` (a
/// sibling whose name extends the prefix and must never leak in).
pub async fn composite_postgres() -> Option<Fixture> {
    let (pg, guard) = postgres_store().await?;
    let (sqlite, dir) = sqlite_store().await;
    let composite = CompositeBackend::new(
        vec![memory_mount("/"), mount("/pg", pg), mount("/pgx", sqlite)],
        || Arc::new(StateBackend::new()),
    );
    Some(Fixture {
        backend: Arc::new(composite),
        base: VirtualPath::parse("/pg").expect("base"),
        caps: IMPLICIT,
        _guard: Some(Box::new((dir, guard))),
    })
}

const EXPLICIT: Capabilities = Capabilities {
    implicit_directories: false,
};

/// A disk backend over a fresh temporary directory (kept alive by the fixture).
fn disk_backend() -> (Arc<dyn Backend>, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let backend = FilesystemBackend::open(dir.path(), FilesystemOptions::default())
        .expect("open the temporary directory");
    (Arc::new(backend), dir)
}

/// The disk backend on its own, rooted at a temporary directory.
pub async fn filesystem() -> Option<Fixture> {
    let (backend, dir) = disk_backend();
    Some(Fixture {
        backend,
        base: VirtualPath::root(),
        caps: EXPLICIT,
        _guard: Some(Box::new(dir)),
    })
}

/// Disk and memory mixed: `/` is memory, cases run under `/work` (a disk mount) next to
/// `/workshop` (another disk mount, a sibling whose name extends the prefix and must never
/// leak into the answers).
pub async fn composite_disk() -> Option<Fixture> {
    let (work, work_dir) = disk_backend();
    let (workshop, workshop_dir) = disk_backend();
    let composite = CompositeBackend::new(
        vec![
            memory_mount("/"),
            mount("/work", work),
            mount("/workshop", workshop),
        ],
        || Arc::new(StateBackend::new()),
    );
    Some(Fixture {
        backend: Arc::new(composite),
        base: VirtualPath::parse("/work").expect("base"),
        caps: EXPLICIT,
        _guard: Some(Box::new((work_dir, workshop_dir))),
    })
}
