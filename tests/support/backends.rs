//! The backends every in-process test runs on, built one way: one function per kind, named as
//! the mount grammar names them (`memory`, `disk`, `sqlite`, `postgres`), plus a mount, a
//! session and an MCP server over a mount table, and [`call`]: a tool call through the same
//! argument validation as the wire (the registry's schemas), then the tool.
//!
//! Each builder that needs something on disk or in PostgreSQL returns it with a guard that
//! deletes it when dropped; keep the guard alive for the test.
#![allow(dead_code)] // each test binary uses its own subset

use std::sync::{Arc, OnceLock};

use mountfs::ground::path::VirtualPath;
use mountfs::server::handler::MountfsServer;
use mountfs::server::registry::Registry;
use mountfs::state::session::{Session, WriteOptions};
use mountfs::storage::backend::{
    Backend, CompositeBackend, DiskBackend, DiskOptions, MemoryBackend, Mount, OverlayBackend,
    StoreBackend,
};
use mountfs::storage::store::{Namespace, PostgresStore, SqliteStore, Store};
use mountfs::tools::{ToolError, ToolReply};
use serde_json::Value;

use super::PostgresNamespace;

/// A fresh, empty memory backend.
pub fn memory() -> Arc<dyn Backend> {
    Arc::new(MemoryBackend::new())
}

/// A disk backend over a fresh temporary directory.
pub fn disk() -> (Arc<dyn Backend>, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temporary directory");
    (disk_at(dir.path(), DiskOptions::default()), dir)
}

/// A disk backend over `root` (which must exist), with `options`.
pub fn disk_at(root: &std::path::Path, options: DiskOptions) -> Arc<dyn Backend> {
    Arc::new(DiskBackend::open(root, options).expect("open the directory as a disk mount"))
}

/// An overlay (`disk:DIR,overlay`) over a fresh, empty temporary directory, its layer in memory.
pub fn overlay() -> (Arc<dyn Backend>, tempfile::TempDir) {
    let (base, dir) = disk();
    (Arc::new(OverlayBackend::in_memory(base)), dir)
}

/// An overlay (`disk:DIR,overlay=sqlite:FILE`) over a fresh, empty temporary directory, its layer
/// in a SQLite file in the second directory returned.
pub async fn overlay_sqlite() -> (Arc<dyn Backend>, tempfile::TempDir, tempfile::TempDir) {
    let (base, dir) = disk();
    let layers = tempfile::tempdir().expect("temporary directory");
    let store = SqliteStore::open(layers.path().join("layers.db"))
        .await
        .expect("open a SQLite store");
    let overlay = OverlayBackend::persistent(
        base,
        Arc::new(store),
        Namespace::new("overlay-files").expect("namespace"),
        Namespace::new("overlay-marks").expect("namespace"),
    );
    (Arc::new(overlay), dir, layers)
}

/// A SQLite store backend in a fresh temporary file (its parent directory made by the store).
pub async fn sqlite() -> (Arc<dyn Backend>, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let store = SqliteStore::open(dir.path().join("store/test.db"))
        .await
        .expect("open a SQLite store");
    let namespace = Namespace::new("default").expect("namespace");
    (Arc::new(StoreBackend::new(Arc::new(store), namespace)), dir)
}

/// A PostgreSQL store backend in a fresh namespace named after `prefix` (deleted when the guard
/// drops), or `None` after recording `group` as skipped when no server is configured.
pub async fn postgres(group: &str, prefix: &str) -> Option<(Arc<dyn Backend>, PostgresNamespace)> {
    let url = super::postgres_url(group)?;
    let store: Arc<dyn Store> = Arc::new(
        PostgresStore::connect(&url)
            .await
            .expect("connect to the test PostgreSQL server"),
    );
    let guard = PostgresNamespace::new(&url, prefix);
    let namespace = Namespace::new(&guard.name).expect("namespace");
    Some((Arc::new(StoreBackend::new(store, namespace)), guard))
}

/// `backend` mounted at `prefix`.
pub fn mount(prefix: &str, backend: Arc<dyn Backend>, read_only: bool) -> Mount {
    Mount {
        prefix: VirtualPath::parse(prefix).expect("mount prefix"),
        backend,
        read_only,
    }
}

/// A writable memory mount at `prefix`.
pub fn memory_mount(prefix: &str) -> Mount {
    mount(prefix, memory(), false)
}

/// The mount table `mounts` (memory where no mount covers a path, as `mountfs` builds it).
pub fn composite(mounts: Vec<Mount>) -> CompositeBackend {
    CompositeBackend::new(mounts, memory)
}

/// A session over the mount table `mounts`, with default write options.
pub fn session(mounts: Vec<Mount>) -> Arc<Session> {
    Arc::new(Session::new(
        Arc::new(composite(mounts)),
        WriteOptions::default(),
    ))
}

/// The shipped tool registry, loaded once per test binary.
pub fn registry() -> Arc<Registry> {
    static REGISTRY: OnceLock<Arc<Registry>> = OnceLock::new();
    REGISTRY
        .get_or_init(|| Arc::new(Registry::load().expect("the shipped schemas load")))
        .clone()
}

/// The MCP server of `session` (the shipped tools, no change sources), whose `run_tool` takes
/// a call the way `tools/call` does.
pub fn server(session: Arc<Session>) -> MountfsServer {
    MountfsServer::new(
        registry(),
        session,
        String::new(),
        Arc::new(mountfs::observers::changes::ChangeHub::new(&[])),
    )
}

/// Runs tool `name` in `session` as the wire does: the arguments are first checked against the
/// tool's schema (a refusal is the wire's `Invalid arguments for …` text), then the tool runs.
pub async fn call(name: &str, arguments: Value, session: &Session) -> Result<ToolReply, ToolError> {
    let registry = registry();
    let definition = registry
        .get(name)
        .unwrap_or_else(|| panic!("no tool named {name} is registered"));
    if let Err(message) = definition.validate(&arguments) {
        let prefix = format!("Invalid arguments for {name}: ");
        return Err(ToolError::Arguments {
            tool: name.to_owned(),
            reason: message.strip_prefix(&prefix).unwrap_or(&message).to_owned(),
        });
    }
    mountfs::tools::call(name, arguments, session).await
}

/// A session whose `/` is `backend`, with `options`.
pub fn session_over(backend: Arc<dyn Backend>, options: WriteOptions) -> Session {
    Session::new(
        Arc::new(composite(vec![mount("/", backend, false)])),
        options,
    )
}
