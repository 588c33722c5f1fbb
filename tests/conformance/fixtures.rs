//! Backends under test. Each fixture gives a fresh, empty backend, the directory under which the
//! cases work (`base`: `/` for a plain backend, a mount prefix for a composite, so every call is
//! routed and re-prefixed), and the backend's capabilities as parameters (never `if backend == …`
//! inside a case).

use std::any::Any;
use std::sync::Arc;

use mountfs::backend::{
    Backend, CompositeBackend, FilesystemBackend, FilesystemOptions, Mount, StateBackend,
};
use mountfs::path::VirtualPath;

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

fn memory_mount(prefix: &str) -> Mount {
    Mount {
        prefix: VirtualPath::parse(prefix).expect("prefix"),
        backend: Arc::new(StateBackend::new()),
        read_only: false,
    }
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
/// `/workshop` (another disk mount that must never leak into the answers).
pub async fn composite_disk() -> Option<Fixture> {
    let (work, work_dir) = disk_backend();
    let (workshop, workshop_dir) = disk_backend();
    let mount = |prefix: &str, backend: Arc<dyn Backend>| Mount {
        prefix: VirtualPath::parse(prefix).expect("prefix"),
        backend,
        read_only: false,
    };
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
