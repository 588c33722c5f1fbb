//! The one fixture registry: every backend configuration the suites run over (one function
//! each, below), the one [`Fixture`] they all give, and [`per_backend!`](crate::per_backend),
//! which runs a list of cases once per configuration.
//!
//! A fixture is a fresh mount table and what keeps it alive (temporary directories, shell
//! targets, buckets, PostgreSQL namespaces). Backend-level cases (the conformance suite) call
//! `backend` under `base`, a mount root; tool-level cases (the tools suite, and the conformance
//! edit cases) call the tools through `session`/`server` in `work` and `other` (on another
//! mount when the table has several). What differs between backends is passed as parameters
//! (`caps`, `plant`, `mount_roots`, `read_only_dir`), never tested by name inside a case.
//!
//! The configurations: `memory`, `sqlite`, `postgres`, `disk`, `overlay`, `overlay_sqlite`,
//! `shell`, `shell_busybox`, `shell_busybox_minimal`, `shell_ssh` and `object` on their own;
//! the composites `composite`, `composite_nested`, `composite_stores`, `composite_postgres`,
//! `stores`, `composite_disk`, `disk_mixed`, `composite_shell` and `composite_object`. One
//! that cannot run here (no PostgreSQL, busybox, sshd or S3 server) gives `None` after a
//! SKIPPED line (see [`super::skips`]), or fails under `MOUNTFS_REQUIRE_SHELL_TARGETS=1` /
//! `MOUNTFS_REQUIRE_OBJECT_SERVER=1`.
#![allow(dead_code)] // each test binary uses its own subset

use std::any::Any;
use std::sync::Arc;

use mountfs::ground::path::VirtualPath;
use mountfs::server::handler::MountfsServer;
use mountfs::state::session::{Session, WriteOptions};
use mountfs::storage::backend::{Backend, Mount, WriteMode};
use serde_json::Value;

use super::backends::{self, memory_mount, mount};

/// One `#[tokio::test]` per case and configuration: a module per configuration named after it,
/// holding a test per case named after the case (so `memory::write_then_read`, selected with
/// `memory::` or `write_then_read`). Each test makes a fresh fixture and runs the case on it; a
/// fixture that cannot run here returns `None` and the test passes, its skip recorded.
///
/// ```ignore
/// per_backend! {
///     #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
///     fixtures: [memory, disk],
///     cases: [cases::write_then_read, edits::new_files_are_utf8],
/// }
/// ```
///
/// Fixtures come from this registry (`crate::support::fixtures`), or from the functions of
/// another module with `fixtures from MODULE: [...]` (a module seen where the macro is called:
/// store.rs runs its cases over `Store` engines that way). A case is `MODULE::name`, as seen
/// from where the macro is called (`super::name` for a function of the calling module).
#[macro_export]
macro_rules! per_backend {
    (
        #[$test:meta]
        fixtures: [$($fixture:ident),* $(,)?],
        cases: $cases:tt $(,)?
    ) => {
        $( $crate::per_backend!(@module #[$test] ($crate::support::fixtures) $fixture $cases); )*
    };
    (
        #[$test:meta]
        fixtures from $from:ident: [$($fixture:ident),* $(,)?],
        cases: $cases:tt $(,)?
    ) => {
        $( $crate::per_backend!(@module #[$test] (super::$from) $fixture $cases); )*
    };
    (@module #[$test:meta] ($($from:tt)*) $fixture:ident [$($module:ident :: $case:ident),* $(,)?]) => {
        mod $fixture {
            #[allow(unused_imports)]
            use super::*;
            use $($from)*::$fixture as fixture;
            $(
                #[$test]
                async fn $case() {
                    let Some(fx) = fixture().await else {
                        return;
                    };
                    $module::$case(&fx).await;
                }
            )*
        }
    };
}

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

/// Memory and stores: directories are made by their files.
pub const IMPLICIT: Capabilities = Capabilities {
    implicit_directories: true,
    rename_keeps_times: true,
};

/// Disk and shell targets: an empty directory stays.
pub const EXPLICIT: Capabilities = Capabilities {
    implicit_directories: false,
    rename_keeps_times: true,
};

/// An object mount: directories are key prefixes, and a move is a copy.
pub const OBJECT: Capabilities = Capabilities {
    implicit_directories: true,
    rename_keeps_times: false,
};

/// A mount table under test.
pub struct Fixture {
    /// What backend-level cases call: the backend itself when it stands alone, else the
    /// composite of the whole table.
    pub backend: Arc<dyn Backend>,
    /// Where backend-level cases work: `/` for a backend on its own, a mount prefix in a
    /// composite (so every call is routed and re-prefixed).
    pub base: VirtualPath,
    /// The directory tool-level cases put their files in.
    pub work: String,
    /// A second directory for tool-level cases, on another mount when the table has several.
    pub other: String,
    pub caps: Capabilities,
    /// Mount roots other than `/`, which must refuse delete and move.
    pub mount_roots: Vec<String>,
    /// A directory on a read-only mount, when the table has one.
    pub read_only_dir: Option<String>,
    /// Writes a file behind the server's back (another program writing the directory, the
    /// store's table, the bucket, the target), at a path relative to the mount's root; `None`
    /// where nothing but the server reaches the storage (memory) or the case runs in a
    /// composite.
    pub plant: Option<Planter>,
    /// A session over the whole table, and its MCP server (`run_tool` validates like the wire).
    pub session: Arc<Session>,
    pub server: MountfsServer,
    /// Keeps temporary resources (directories, databases, targets, buckets) alive.
    pub _guard: Option<Box<dyn Any + Send + Sync>>,
}

/// See [`Fixture::plant`].
pub type Planter =
    Arc<dyn Fn(String, Vec<u8>) -> futures_util::future::BoxFuture<'static, ()> + Send + Sync>;

/// One tool answer.
#[derive(Debug, Clone)]
pub struct Answer {
    pub text: String,
    pub is_error: bool,
    pub structured: Option<Value>,
}

impl Fixture {
    /// `backend` on its own: at `/` for the session, backend-level cases at its root,
    /// tool-level ones in `/work` and `/elsewhere`.
    pub fn alone(backend: Arc<dyn Backend>, caps: Capabilities) -> Self {
        let mut fixture = Self::table(
            vec![mount("/", backend.clone(), false)],
            "/",
            "/work",
            "/elsewhere",
            caps,
        );
        fixture.backend = backend;
        fixture
    }

    /// The mount table `mounts`: backend-level cases work under `base`, tool-level ones in
    /// `work` and `other`.
    pub fn table(
        mounts: Vec<Mount>,
        base: &str,
        work: &str,
        other: &str,
        caps: Capabilities,
    ) -> Self {
        let mount_roots = mounts
            .iter()
            .filter(|m| !m.prefix.is_root())
            .map(|m| m.prefix.to_string())
            .collect();
        let read_only_dir = mounts
            .iter()
            .find(|m| m.read_only)
            .map(|m| format!("{}/sub", m.prefix));
        let router = Arc::new(backends::composite(mounts));
        let session = Arc::new(Session::new(router.clone(), WriteOptions::default()));
        Self {
            backend: router,
            base: VirtualPath::parse(base).expect("base"),
            work: work.to_owned(),
            other: other.to_owned(),
            caps,
            mount_roots,
            read_only_dir,
            plant: None,
            server: backends::server(session.clone()),
            session,
            _guard: None,
        }
    }

    /// A table for tool-level cases only (working in `work` and `other`), such as one with a
    /// backend failing on purpose.
    pub fn over(mounts: Vec<Mount>, work: &str, other: &str) -> Self {
        Self::table(mounts, "/", work, other, IMPLICIT)
    }

    /// This fixture keeping `guard` alive until it drops.
    pub fn guarded(mut self, guard: impl Any + Send + Sync) -> Self {
        self._guard = Some(Box::new(guard));
        self
    }

    /// This fixture able to write behind the server's back with `plant`.
    pub fn planted(mut self, plant: Planter) -> Self {
        self.plant = Some(plant);
        self
    }

    /// `rel` (e.g. `"a/b.txt"`) under `base`.
    pub fn path(&self, rel: &str) -> VirtualPath {
        if rel.is_empty() {
            return self.base.clone();
        }
        self.base.join_relative(rel).expect("valid test path")
    }

    /// `rel` under `work`.
    pub fn p(&self, rel: &str) -> String {
        format!("{}/{rel}", self.work.trim_end_matches('/'))
    }

    /// `rel` under `other`.
    pub fn o(&self, rel: &str) -> String {
        format!("{}/{rel}", self.other.trim_end_matches('/'))
    }

    /// Calls a tool the way `tools/call` does. Every answer, on every backend, must carry
    /// structured content satisfying the tool's output schema (CONTRACT §5).
    pub async fn call(&self, tool: &str, args: Value) -> Answer {
        let result = self
            .server
            .run_tool(tool, args.clone(), None)
            .await
            .unwrap();
        let structured = result
            .structured_content
            .as_ref()
            .unwrap_or_else(|| panic!("{tool}({args}): no structured content"));
        if let Err(problems) = backends::registry()
            .get(tool)
            .unwrap()
            .validate_output(structured)
        {
            panic!(
                "{tool}({args}): structured content outside the output schema: {}\n{}",
                problems.join("; "),
                structured
                    .to_string()
                    .chars()
                    .take(2000)
                    .collect::<String>()
            );
        }
        let text = result
            .content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.clone()))
            .collect::<Vec<_>>()
            .join("\n");
        Answer {
            text,
            is_error: result.is_error == Some(true),
            structured: result.structured_content,
        }
    }

    /// A call that must succeed.
    pub async fn ok(&self, tool: &str, args: Value) -> Answer {
        let answer = self.call(tool, args.clone()).await;
        assert!(!answer.is_error, "{tool}({args}) failed: {}", answer.text);
        answer
    }

    /// A call that must fail, leaving every path in `untouched` byte-for-byte (or absent) as
    /// it was. Returns the error text.
    pub async fn refused(&self, tool: &str, args: Value, untouched: &[&str]) -> String {
        let mut before = Vec::new();
        for path in untouched {
            before.push(self.bytes(path).await);
        }
        let answer = self.call(tool, args.clone()).await;
        assert!(
            answer.is_error,
            "{tool}({args}) should fail but said: {}",
            answer.text
        );
        assert!(
            answer.text.starts_with("Error:") || answer.text.starts_with("Invalid arguments"),
            "{}",
            answer.text
        );
        for (path, was) in untouched.iter().zip(before) {
            assert_eq!(
                self.bytes(path).await,
                was,
                "{path} changed although {tool} was refused with: {}",
                answer.text
            );
        }
        answer.text
    }

    /// Writes behind the session's back (another program, another server).
    pub async fn put(&self, path: &str, bytes: &[u8]) {
        self.session
            .backend()
            .write(
                &VirtualPath::parse(path).unwrap(),
                bytes,
                WriteMode::Overwrite,
            )
            .await
            .unwrap();
    }

    /// The file's bytes, `None` when there is no file.
    pub async fn bytes(&self, path: &str) -> Option<Vec<u8>> {
        self.session
            .backend()
            .read(&VirtualPath::parse(path).unwrap())
            .await
            .ok()
            .map(|f| f.content)
    }

    /// The file's text (it must exist).
    pub async fn text(&self, path: &str) -> String {
        String::from_utf8(
            self.bytes(path)
                .await
                .unwrap_or_else(|| panic!("{path} is missing")),
        )
        .unwrap()
    }

    /// Reads through the tool, which records the read in the session's ledger.
    pub async fn read(&self, path: &str) {
        self.ok("read_file", serde_json::json!({ "file_path": path }))
            .await;
    }

    /// Puts a file behind the session's back and reads it through the tool.
    pub async fn put_and_read(&self, path: &str, bytes: &[u8]) {
        self.put(path, bytes).await;
        self.read(path).await;
    }
}

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

/// The memory backend on its own.
pub async fn memory() -> Option<Fixture> {
    Some(Fixture::alone(backends::memory(), IMPLICIT))
}

/// Several memory mounts: backend-level cases run under `/work`, a mount of its own beside
/// `/workshop` (a sibling whose name extends the prefix and must never leak into the answers);
/// tool-level cases work in a directory of `/work`, with `other` on `/deep/mnt` (a mount inside
/// the directory of another) and a read-only mount at `/ro`.
pub async fn composite() -> Option<Fixture> {
    Some(Fixture::table(
        vec![
            memory_mount("/"),
            memory_mount("/work"),
            memory_mount("/workshop"),
            memory_mount("/deep/mnt"),
            mount("/ro", backends::memory(), true),
        ],
        "/work",
        "/work/scratch",
        "/deep/mnt/there",
        IMPLICIT,
    ))
}

/// A composite whose cases run two mounts deep (`/a/b` inside `/a`), with a sibling mount that
/// must never leak into the answers.
pub async fn composite_nested() -> Option<Fixture> {
    Some(Fixture::table(
        vec![
            memory_mount("/"),
            memory_mount("/a"),
            memory_mount("/a/b"),
            memory_mount("/a/bc"),
        ],
        "/a/b",
        "/a/b/work",
        "/a/bc/there",
        IMPLICIT,
    ))
}

/// The SQLite store backend on its own.
pub async fn sqlite() -> Option<Fixture> {
    let (backend, dir) = backends::sqlite().await;
    let second = mountfs::storage::store::SqliteStore::open(dir.path().join("store/test.db"))
        .await
        .expect("a second handle on the SQLite store");
    Some(
        Fixture::alone(backend, IMPLICIT)
            .guarded(dir)
            .planted(store_planter(Arc::new(second), "default".into())),
    )
}

/// The PostgreSQL store backend on its own (skipped without `MOUNTFS_TEST_POSTGRES`).
pub async fn postgres() -> Option<Fixture> {
    let (backend, guard) = backends::postgres("postgres conformance case", "t-conf").await?;
    let second = mountfs::storage::store::PostgresStore::connect(&guard.url)
        .await
        .expect("a second connection to the PostgreSQL store");
    let plant = store_planter(Arc::new(second), guard.name.clone());
    Some(
        Fixture::alone(backend, IMPLICIT)
            .guarded(guard)
            .planted(plant),
    )
}

/// PostgreSQL for `group`, or memory standing in when it is not configured.
async fn postgres_or_memory(
    group: &str,
    prefix: &str,
) -> (Arc<dyn Backend>, Option<super::PostgresNamespace>) {
    match backends::postgres(group, prefix).await {
        Some((backend, guard)) => (backend, Some(guard)),
        None => (backends::memory(), None),
    }
}

/// Memory at `/`, SQLite at `/work` (where cases run) and PostgreSQL at `/workshop` (memory
/// there when PostgreSQL is not configured): a sibling whose name extends the prefix and must
/// never leak into the answers.
pub async fn composite_stores() -> Option<Fixture> {
    let (sqlite, dir) = backends::sqlite().await;
    let (below, pg_guard) = postgres_or_memory("postgres conformance case", "t-conf").await;
    let mounts = vec![
        memory_mount("/"),
        mount("/work", sqlite, false),
        mount("/workshop", below, false),
    ];
    Some(
        Fixture::table(mounts, "/work", "/work/w", "/workshop/there", IMPLICIT)
            .guarded((dir, pg_guard)),
    )
}

/// PostgreSQL at `/pg`, with cases run there, beside memory at `/` and SQLite at `/pgx` (a
/// sibling whose name extends the prefix and must never leak in).
pub async fn composite_postgres() -> Option<Fixture> {
    let (pg, guard) = backends::postgres("postgres conformance case", "t-conf").await?;
    let (sqlite, dir) = backends::sqlite().await;
    let mounts = vec![
        memory_mount("/"),
        mount("/pg", pg, false),
        mount("/pgx", sqlite, false),
    ];
    Some(Fixture::table(mounts, "/pg", "/pg/work", "/pgx/there", IMPLICIT).guarded((dir, guard)))
}

/// Memory at `/`, SQLite at `/sq` (where tool-level cases work) and PostgreSQL at `/pg`
/// (`other`, so moves cross from one engine to the other; memory there when PostgreSQL is not
/// configured), and a read-only memory mount.
pub async fn stores() -> Option<Fixture> {
    let (sqlite, dir) = backends::sqlite().await;
    let (postgres, guard) =
        postgres_or_memory("toolset on PostgreSQL (memory stands in)", "t-tool").await;
    let mounts = vec![
        memory_mount("/"),
        mount("/sq", sqlite, false),
        mount("/pg", postgres, false),
        mount("/ro", backends::memory(), true),
    ];
    Some(Fixture::table(mounts, "/sq", "/sq/work", "/pg/there", IMPLICIT).guarded((dir, guard)))
}

/// The disk backend on its own, rooted at a temporary directory.
pub async fn disk() -> Option<Fixture> {
    let (backend, dir) = backends::disk();
    let plant = host_planter(dir.path().to_owned());
    Some(
        Fixture::alone(backend, EXPLICIT)
            .guarded(dir)
            .planted(plant),
    )
}

/// Disk and memory mixed: `/` is memory, cases run under `/work` (a disk mount) next to
/// `/workshop` (another disk mount, a sibling whose name extends the prefix and must never
/// leak into the answers).
pub async fn composite_disk() -> Option<Fixture> {
    let (work, work_dir) = backends::disk();
    let (workshop, workshop_dir) = backends::disk();
    let mounts = vec![
        memory_mount("/"),
        mount("/work", work, false),
        mount("/workshop", workshop, false),
    ];
    Some(
        Fixture::table(mounts, "/work", "/work/w", "/workshop/there", EXPLICIT)
            .guarded((work_dir, workshop_dir)),
    )
}

/// Memory at `/`, disk at `/d` (where tool-level cases work), SQLite at `/sq` (`other`, so
/// moves cross from disk to a store) and a read-only disk mount.
pub async fn disk_mixed() -> Option<Fixture> {
    let (disk, disk_dir) = backends::disk();
    let (read_only, ro_dir) = backends::disk();
    let (sqlite, sqlite_dir) = backends::sqlite().await;
    let mounts = vec![
        memory_mount("/"),
        mount("/d", disk, false),
        mount("/sq", sqlite, false),
        mount("/ro", read_only, true),
    ];
    Some(
        Fixture::table(mounts, "/d", "/d/work", "/sq/there", EXPLICIT)
            .guarded((disk_dir, ro_dir, sqlite_dir)),
    )
}

/// An overlay over an empty disk directory with its layer in memory: every case runs in the
/// layer over the real directory, which must stay empty.
pub async fn overlay() -> Option<Fixture> {
    let (backend, dir) = backends::overlay();
    Some(Fixture::alone(backend, IMPLICIT).guarded(EmptyOnDrop(dir)))
}

/// An overlay over an empty disk directory with its layer in a SQLite file.
pub async fn overlay_sqlite() -> Option<Fixture> {
    let (backend, dir, layers) = backends::overlay_sqlite().await;
    Some(Fixture::alone(backend, IMPLICIT).guarded((EmptyOnDrop(dir), layers)))
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
    Some(shell_fixture(super::shells::local()))
}

/// A shell mount over busybox's `sh` with only busybox applets on its PATH (skipped without
/// busybox).
pub async fn shell_busybox() -> Option<Fixture> {
    let target = super::shells::busybox("busybox shell conformance case")?;
    Some(shell_fixture(target))
}

/// A shell mount over busybox's `sh` without `stat`, `readlink` and `mktemp`: the opening
/// script's fallbacks (no times in listings, symlinks as last components refused).
pub async fn shell_busybox_minimal() -> Option<Fixture> {
    let target = super::shells::busybox_minimal("minimal busybox shell conformance case")?;
    Some(shell_fixture(target))
}

/// A shell mount over a real OpenSSH server on 127.0.0.1 (skipped without sshd).
pub async fn shell_ssh() -> Option<Fixture> {
    let target = super::shells::ssh("ssh shell conformance case")?;
    Some(shell_fixture(target))
}

/// A shell mount at `/work` beside memory at `/` and another shell mount at `/workshop`.
pub async fn composite_shell() -> Option<Fixture> {
    let work = super::shells::local();
    let workshop = super::shells::local();
    let mounts = vec![
        memory_mount("/"),
        mount("/work", work.backend(), false),
        mount("/workshop", workshop.backend(), false),
    ];
    Some(
        Fixture::table(mounts, "/work", "/work/w", "/workshop/there", EXPLICIT)
            .guarded((work, workshop)),
    )
}

fn shell_fixture(target: super::shells::Target) -> Fixture {
    let plant = host_planter(target.dir.path().to_owned());
    Fixture::alone(target.backend(), EXPLICIT)
        .planted(plant)
        .guarded(target)
}

/// An object mount over a fresh bucket of the test S3 server (moto), under a key prefix, with
/// a neighbour prefix in the same bucket that every case must leave untouched.
pub async fn object() -> Option<Fixture> {
    let bucket = super::moto::Bucket::new("object conformance case")?;
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
    Some(
        Fixture::alone(Arc::new(bucket.backend("team/files")), OBJECT)
            .guarded(neighbours)
            .planted(plant),
    )
}

/// An object mount at `/work` beside memory at `/` and another object mount (the same
/// bucket, another prefix) at `/workshop`.
pub async fn composite_object() -> Option<Fixture> {
    let bucket = super::moto::Bucket::new("object conformance case")?;
    let neighbours = Neighbours::plant(&bucket).await;
    let mounts = vec![
        memory_mount("/"),
        mount("/work", Arc::new(bucket.backend("work")), false),
        mount("/workshop", Arc::new(bucket.backend("workshop")), false),
    ];
    Some(Fixture::table(mounts, "/work", "/work/w", "/workshop/there", OBJECT).guarded(neighbours))
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
    async fn plant(bucket: &super::moto::Bucket) -> Self {
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
