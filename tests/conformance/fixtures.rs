//! Backends under test. Each fixture gives a fresh, empty backend, the directory under which the
//! cases work (`base`: `/` for a plain backend, a mount prefix for a composite, so every call is
//! routed and re-prefixed), and the backend's capabilities as parameters (never `if backend == …`
//! inside a case).

use std::any::Any;
use std::sync::Arc;

use mountfs::ground::path::VirtualPath;
use mountfs::storage::backend::Backend;

use crate::support::backends::{self, memory_mount, mount};

/// What a backend can do, where backends legitimately differ.
#[derive(Debug, Clone, Copy)]
pub struct Capabilities {
    /// Directories exist only while a file lies under them (memory, stores); on disk an empty
    /// directory stays.
    pub implicit_directories: bool,
    /// A rename keeps the file's modification time (everywhere but object mounts, where a
    /// move is a copy: the store stamps the copy with its own time).
    pub rename_keeps_times: bool,
}

/// A backend under test.
pub struct Fixture {
    pub backend: Arc<dyn Backend>,
    pub base: VirtualPath,
    pub caps: Capabilities,
    /// Keeps temporary resources (directories, databases) alive for the test.
    pub _guard: Option<Box<dyn Any + Send + Sync>>,
    /// Writes a file behind the server's back (another program writing the directory, the
    /// store's table, the bucket, the target), at a path relative to the mount's root; `None`
    /// where nothing but the server reaches the storage (memory) or the case runs in a
    /// composite.
    pub plant: Option<Planter>,
}

/// See [`Fixture::plant`].
pub type Planter =
    Arc<dyn Fn(String, Vec<u8>) -> futures_util::future::BoxFuture<'static, ()> + Send + Sync>;

/// Plants files in a directory of this machine (a disk mount's, a shell target's).
fn host_planter(root: std::path::PathBuf) -> Planter {
    Arc::new(move |rel: String, bytes: Vec<u8>| {
        let file = root.join(rel);
        Box::pin(async move {
            std::fs::create_dir_all(file.parent().expect("a parent")).expect("plant a directory");
            std::fs::write(&file, bytes).expect("plant a file");
        })
    })
}

/// Plants items through a second handle on the store (as another program or an older server
/// writing the same table would), under the namespace the mount serves.
fn store_planter(store: Arc<dyn mountfs::storage::store::Store>, namespace: String) -> Planter {
    Arc::new(move |rel: String, bytes: Vec<u8>| {
        let (store, namespace) = (store.clone(), namespace.clone());
        Box::pin(async move {
            let namespace = mountfs::storage::store::Namespace::new(&namespace).expect("namespace");
            store
                .put(
                    &namespace,
                    &format!("/{rel}"),
                    &bytes,
                    mountfs::storage::store::PutCondition::Overwrite,
                )
                .await
                .expect("plant an item");
        })
    })
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
    rename_keeps_times: true,
};

/// An object mount: directories are key prefixes, and a move is a copy.
const OBJECT: Capabilities = Capabilities {
    implicit_directories: true,
    rename_keeps_times: false,
};

/// The memory backend on its own.
pub async fn memory() -> Option<Fixture> {
    Some(Fixture {
        backend: backends::memory(),
        base: VirtualPath::root(),
        caps: IMPLICIT,
        _guard: None,
        plant: None,
    })
}

/// A composite of several memory mounts; cases run under `/work`, a mount of its own.
pub async fn composite() -> Option<Fixture> {
    let composite = backends::composite(vec![
        memory_mount("/"),
        memory_mount("/work"),
        memory_mount("/workshop"),
    ]);
    Some(Fixture {
        backend: Arc::new(composite),
        base: VirtualPath::parse("/work").expect("base"),
        caps: IMPLICIT,
        _guard: None,
        plant: None,
    })
}

/// A composite whose cases run two mounts deep (`/a/b` inside `/a`), with a sibling mount that
/// must never leak into the answers.
pub async fn composite_nested() -> Option<Fixture> {
    let composite = backends::composite(vec![
        memory_mount("/"),
        memory_mount("/a"),
        memory_mount("/a/b"),
        memory_mount("/a/bc"),
    ]);
    Some(Fixture {
        backend: Arc::new(composite),
        base: VirtualPath::parse("/a/b").expect("base"),
        caps: IMPLICIT,
        _guard: None,
        plant: None,
    })
}

/// The SQLite store backend on its own.
pub async fn sqlite() -> Option<Fixture> {
    let (backend, dir) = backends::sqlite().await;
    let second = mountfs::storage::store::SqliteStore::open(dir.path().join("store/test.db"))
        .await
        .expect("a second handle on the SQLite store");
    Some(Fixture {
        backend,
        base: VirtualPath::root(),
        caps: IMPLICIT,
        _guard: Some(Box::new(dir)),
        plant: Some(store_planter(Arc::new(second), "default".into())),
    })
}

/// The PostgreSQL store backend on its own (skipped without `MOUNTFS_TEST_POSTGRES`).
pub async fn postgres() -> Option<Fixture> {
    let (backend, guard) = backends::postgres("postgres conformance case", "t-conf").await?;
    let second = mountfs::storage::store::PostgresStore::connect(&guard.url)
        .await
        .expect("a second connection to the PostgreSQL store");
    let plant = store_planter(Arc::new(second), guard.name.clone());
    Some(Fixture {
        backend,
        base: VirtualPath::root(),
        caps: IMPLICIT,
        _guard: Some(Box::new(guard)),
        plant: Some(plant),
    })
}

/// Memory at `/`, SQLite at `/work` (where cases run) and PostgreSQL at `/workshop` (memory
/// there when PostgreSQL is not configured): a sibling whose name extends the prefix and must
/// never leak into the answers.
pub async fn composite_stores() -> Option<Fixture> {
    let (sqlite, dir) = backends::sqlite().await;
    let (below, pg_guard): (Arc<dyn Backend>, Option<crate::support::PostgresNamespace>) =
        match backends::postgres("postgres conformance case", "t-conf").await {
            Some((backend, guard)) => (backend, Some(guard)),
            None => (backends::memory(), None),
        };
    let composite = backends::composite(vec![
        memory_mount("/"),
        mount("/work", sqlite, false),
        mount("/workshop", below, false),
    ]);
    Some(Fixture {
        backend: Arc::new(composite),
        base: VirtualPath::parse("/work").expect("base"),
        caps: IMPLICIT,
        _guard: Some(Box::new((dir, pg_guard))),
        plant: None,
    })
}

/// PostgreSQL at `/pg`, with cases run there, beside memory at `/` and SQLite at `/pgx` (a
/// sibling whose name extends the prefix and must never leak in).
pub async fn composite_postgres() -> Option<Fixture> {
    let (pg, guard) = backends::postgres("postgres conformance case", "t-conf").await?;
    let (sqlite, dir) = backends::sqlite().await;
    let composite = backends::composite(vec![
        memory_mount("/"),
        mount("/pg", pg, false),
        mount("/pgx", sqlite, false),
    ]);
    Some(Fixture {
        backend: Arc::new(composite),
        base: VirtualPath::parse("/pg").expect("base"),
        caps: IMPLICIT,
        _guard: Some(Box::new((dir, guard))),
        plant: None,
    })
}

const EXPLICIT: Capabilities = Capabilities {
    implicit_directories: false,
    rename_keeps_times: true,
};

/// The disk backend on its own, rooted at a temporary directory.
pub async fn disk() -> Option<Fixture> {
    let (backend, dir) = backends::disk();
    let plant = host_planter(dir.path().to_owned());
    Some(Fixture {
        backend,
        base: VirtualPath::root(),
        caps: EXPLICIT,
        _guard: Some(Box::new(dir)),
        plant: Some(plant),
    })
}

/// Disk and memory mixed: `/` is memory, cases run under `/work` (a disk mount) next to
/// `/workshop` (another disk mount, a sibling whose name extends the prefix and must never
/// leak into the answers).
pub async fn composite_disk() -> Option<Fixture> {
    let (work, work_dir) = backends::disk();
    let (workshop, workshop_dir) = backends::disk();
    let composite = backends::composite(vec![
        memory_mount("/"),
        mount("/work", work, false),
        mount("/workshop", workshop, false),
    ]);
    Some(Fixture {
        backend: Arc::new(composite),
        base: VirtualPath::parse("/work").expect("base"),
        caps: EXPLICIT,
        _guard: Some(Box::new((work_dir, workshop_dir))),
        plant: None,
    })
}

/// An overlay over an empty disk directory with its layer in memory: every case runs in the
/// layer over the real directory, which must stay empty.
pub async fn overlay() -> Option<Fixture> {
    let (backend, dir) = backends::overlay();
    Some(Fixture {
        backend,
        base: VirtualPath::root(),
        caps: IMPLICIT,
        _guard: Some(Box::new(EmptyOnDrop(dir))),
        plant: None,
    })
}

/// An overlay over an empty disk directory with its layer in a SQLite file.
pub async fn overlay_sqlite() -> Option<Fixture> {
    let (backend, dir, layers) = backends::overlay_sqlite().await;
    Some(Fixture {
        backend,
        base: VirtualPath::root(),
        caps: IMPLICIT,
        _guard: Some(Box::new((EmptyOnDrop(dir), layers))),
        plant: None,
    })
}

/// A base directory that must still be empty when the case ends: an overlay never writes it.
struct EmptyOnDrop(tempfile::TempDir);

impl Drop for EmptyOnDrop {
    fn drop(&mut self) {
        let left: Vec<_> = std::fs::read_dir(self.0.path())
            .expect("read the base directory")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name())
            .filter(|name| name != ".mountfs-aside")
            .collect();
        if !std::thread::panicking() {
            assert!(left.is_empty(), "the overlay wrote its base: {left:?}");
        }
    }
}

/// A shell mount over a local `sh` (issue 27).
pub async fn shell() -> Option<Fixture> {
    let target = crate::support::shells::local();
    Some(shell_fixture(target))
}

/// A shell mount over busybox's `sh` with only busybox applets on its PATH (skipped without
/// busybox).
pub async fn shell_busybox() -> Option<Fixture> {
    let target = crate::support::shells::busybox("busybox shell conformance case")?;
    Some(shell_fixture(target))
}

/// A shell mount over busybox's `sh` without `stat`, `readlink` and `mktemp`: the opening
/// script's fallbacks (no times in listings, symlinks as last components refused).
pub async fn shell_busybox_minimal() -> Option<Fixture> {
    let target = crate::support::shells::busybox_minimal("minimal busybox shell conformance case")?;
    Some(shell_fixture(target))
}

/// A shell mount over a real OpenSSH server on 127.0.0.1 (skipped without sshd).
pub async fn shell_ssh() -> Option<Fixture> {
    let target = crate::support::shells::ssh("ssh shell conformance case")?;
    Some(shell_fixture(target))
}

/// A shell mount at `/work` beside memory at `/` and another shell mount at `/workshop`.
pub async fn composite_shell() -> Option<Fixture> {
    let work = crate::support::shells::local();
    let workshop = crate::support::shells::local();
    let composite = backends::composite(vec![
        memory_mount("/"),
        mount("/work", work.backend(), false),
        mount("/workshop", workshop.backend(), false),
    ]);
    Some(Fixture {
        backend: Arc::new(composite),
        base: VirtualPath::parse("/work").expect("base"),
        caps: EXPLICIT,
        _guard: Some(Box::new((work, workshop))),
        plant: None,
    })
}

fn shell_fixture(target: crate::support::shells::Target) -> Fixture {
    let plant = host_planter(target.dir.path().to_owned());
    Fixture {
        backend: target.backend(),
        base: VirtualPath::root(),
        caps: EXPLICIT,
        _guard: Some(Box::new(target)),
        plant: Some(plant),
    }
}

/// An object mount over a fresh bucket of the test S3 server (moto), under a key prefix, with
/// a neighbour prefix in the same bucket that every case must leave untouched.
pub async fn object() -> Option<Fixture> {
    let bucket = crate::support::moto::Bucket::new("object conformance case")?;
    let neighbours = Neighbours::plant(&bucket).await;
    // Another S3 client writing under the mount's prefix.
    let client = bucket.client();
    let plant: Planter = Arc::new(move |rel: String, bytes: Vec<u8>| {
        let client = client.clone();
        Box::pin(async move {
            use object_store::ObjectStoreExt;
            client
                .put(
                    &object_store::path::Path::parse(format!("team/files/{rel}")).unwrap(),
                    bytes.into(),
                )
                .await
                .expect("plant an object");
        })
    });
    Some(Fixture {
        backend: Arc::new(bucket.backend("team/files")),
        base: VirtualPath::root(),
        caps: OBJECT,
        _guard: Some(Box::new(neighbours)),
        plant: Some(plant),
    })
}

/// An object mount at `/work` beside memory at `/` and another object mount (the same
/// bucket, another prefix) at `/workshop`.
pub async fn composite_object() -> Option<Fixture> {
    let bucket = crate::support::moto::Bucket::new("object conformance case")?;
    let neighbours = Neighbours::plant(&bucket).await;
    let composite = backends::composite(vec![
        memory_mount("/"),
        mount("/work", Arc::new(bucket.backend("work")), false),
        mount("/workshop", Arc::new(bucket.backend("workshop")), false),
    ]);
    Some(Fixture {
        backend: Arc::new(composite),
        base: VirtualPath::parse("/work").expect("base"),
        caps: OBJECT,
        _guard: Some(Box::new(neighbours)),
        plant: None,
    })
}

/// Keys planted beside the mount's prefix (`team/filesystem`, `team/files.txt`, `other/`):
/// checked unchanged when the case ends, so no case reached out of its prefix.
struct Neighbours {
    client: Arc<dyn object_store::ObjectStore>,
    runtime: tokio::runtime::Handle,
}

const NEIGHBOUR_KEYS: [&str; 4] = [
    "team/filesystem/x.txt",
    "team/files.txt",
    "other/secret.txt",
    "work.txt",
];

impl Neighbours {
    async fn plant(bucket: &crate::support::moto::Bucket) -> Self {
        use object_store::ObjectStoreExt;
        let client = bucket.client();
        for key in NEIGHBOUR_KEYS {
            client
                .put(
                    &object_store::path::Path::parse(key).unwrap(),
                    key.as_bytes().to_vec().into(),
                )
                .await
                .expect("plant a neighbour key");
        }
        Self {
            client,
            runtime: tokio::runtime::Handle::current(),
        }
    }
}

impl Drop for Neighbours {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        let client = self.client.clone();
        let handle = self.runtime.clone();
        let listed = std::thread::spawn(move || {
            handle.block_on(async move {
                use futures_util::TryStreamExt;
                let mut keys: Vec<String> = client
                    .list(None)
                    .map_ok(|m| m.location.to_string())
                    .try_collect()
                    .await
                    .expect("list the bucket");
                keys.retain(|k| {
                    !k.starts_with("team/files/")
                        && !k.starts_with("work/")
                        && !k.starts_with("workshop/")
                });
                keys.sort();
                keys
            })
        })
        .join()
        .expect("list the bucket");
        let mut expected: Vec<String> = NEIGHBOUR_KEYS.iter().map(|k| k.to_string()).collect();
        expected.sort();
        assert_eq!(
            listed, expected,
            "a case reached keys outside its mount's prefix"
        );
    }
}
