//! The file systems the toolset cases run on, and the helpers the cases call tools with.
//!
//! A fixture is a session (with its MCP server) over a mount table, plus where the cases work:
//! `base` (where files go), `other` (a second directory; on another mount when the fixture has
//! several, so moves cross mounts) and the capabilities that differ between fixtures, passed as
//! parameters rather than tested by name.

use std::any::Any;
use std::sync::Arc;

use mountfs::ground::path::VirtualPath;
use mountfs::server::handler::MountfsServer;
use mountfs::state::session::Session;
use mountfs::storage::backend::{Backend, Mount, WriteMode};
use serde_json::Value;

pub use crate::support::backends::{self, memory_mount, mount};

/// A session under test.
pub struct Fixture {
    pub server: MountfsServer,
    pub session: Arc<Session>,
    /// Directory the cases put their files in.
    pub base: String,
    /// A second directory, on another mount when the fixture has several.
    pub other: String,
    /// Mount roots other than `/`, which must refuse delete and move.
    pub mount_roots: Vec<String>,
    /// A directory on a read-only mount, when the fixture has one.
    pub read_only_dir: Option<String>,
    /// Keeps temporary resources alive for the test.
    pub _guard: Option<Box<dyn Any + Send + Sync>>,
}

/// One tool answer.
#[derive(Debug, Clone)]
pub struct Answer {
    pub text: String,
    pub is_error: bool,
    pub structured: Option<Value>,
}

impl Fixture {
    /// A fixture over `mounts`.
    pub fn over(mounts: Vec<Mount>, base: &str, other: &str) -> Self {
        let mount_roots = mounts
            .iter()
            .filter(|m| !m.prefix.is_root())
            .map(|m| m.prefix.to_string())
            .collect();
        let read_only_dir = mounts
            .iter()
            .find(|m| m.read_only)
            .map(|m| format!("{}/sub", m.prefix));
        let session = backends::session(mounts);
        Self {
            server: backends::server(session.clone()),
            session,
            base: base.to_owned(),
            other: other.to_owned(),
            mount_roots,
            read_only_dir,
            _guard: None,
        }
    }

    /// `rel` under `base`.
    pub fn p(&self, rel: &str) -> String {
        format!("{}/{rel}", self.base.trim_end_matches('/'))
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

/// One memory mount at `/`.
pub async fn memory() -> Option<Fixture> {
    Some(Fixture::over(
        vec![memory_mount("/")],
        "/work",
        "/elsewhere",
    ))
}

/// Several memory mounts, one nested in another's directory, and a read-only one: cases work
/// inside a mount that is not `/`, and `other` is on yet another mount.
pub async fn composite() -> Option<Fixture> {
    Some(Fixture::over(
        vec![
            memory_mount("/"),
            memory_mount("/scratch"),
            memory_mount("/deep/mnt"),
            mount("/ro", backends::memory(), true),
        ],
        "/scratch/work",
        "/deep/mnt/there",
    ))
}

/// One SQLite store mount at `/`.
pub async fn sqlite() -> Option<Fixture> {
    let (backend, dir) = backends::sqlite().await;
    let mut fixture = Fixture::over(vec![mount("/", backend, false)], "/work", "/elsewhere");
    fixture._guard = Some(Box::new(dir));
    Some(fixture)
}

/// Memory at `/`, SQLite at `/sq` (where cases work) and PostgreSQL at `/pg` (`other`, so moves
/// cross from one engine to the other; memory there when PostgreSQL is not configured).
pub async fn stores() -> Option<Fixture> {
    let (sqlite, dir) = backends::sqlite().await;
    let (postgres, guard): (Arc<dyn Backend>, Option<crate::support::PostgresNamespace>) =
        match backends::postgres("toolset on PostgreSQL (memory stands in)", "t-tool").await {
            Some((backend, guard)) => (backend, Some(guard)),
            None => (backends::memory(), None),
        };
    let mut fixture = Fixture::over(
        vec![
            memory_mount("/"),
            mount("/sq", sqlite, false),
            mount("/pg", postgres, false),
            mount("/ro", backends::memory(), true),
        ],
        "/sq/work",
        "/pg/there",
    );
    fixture._guard = Some(Box::new((dir, guard)));
    Some(fixture)
}

/// One disk mount at `/`.
pub async fn disk() -> Option<Fixture> {
    let (backend, dir) = backends::disk();
    let mut fixture = Fixture::over(vec![mount("/", backend, false)], "/work", "/elsewhere");
    fixture._guard = Some(Box::new(dir));
    Some(fixture)
}

/// Memory at `/`, disk at `/d` (where cases work), SQLite at `/sq` (`other`, so moves cross
/// from disk to a store) and a read-only disk mount.
pub async fn disk_mixed() -> Option<Fixture> {
    let (disk, disk_dir) = backends::disk();
    let (read_only, ro_dir) = backends::disk();
    let (sqlite, sqlite_dir) = backends::sqlite().await;
    let mut fixture = Fixture::over(
        vec![
            memory_mount("/"),
            mount("/d", disk, false),
            mount("/sq", sqlite, false),
            mount("/ro", read_only, true),
        ],
        "/d/work",
        "/sq/there",
    );
    fixture._guard = Some(Box::new((disk_dir, ro_dir, sqlite_dir)));
    Some(fixture)
}

/// An overlay mount (`disk:DIR,overlay`, layer in memory) at `/` over an empty directory, which
/// every case must leave empty: the whole toolset runs in the layer.
pub async fn overlay() -> Option<Fixture> {
    let (backend, dir) = backends::overlay();
    let mut fixture = Fixture::over(vec![mount("/", backend, false)], "/work", "/elsewhere");
    fixture._guard = Some(Box::new(BaseStaysEmpty(dir)));
    Some(fixture)
}

/// A base directory that must still be empty when the case ends.
struct BaseStaysEmpty(tempfile::TempDir);

impl Drop for BaseStaysEmpty {
    fn drop(&mut self) {
        let left: Vec<_> = std::fs::read_dir(self.0.path())
            .expect("read the base directory")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name())
            .collect();
        if !std::thread::panicking() {
            assert!(left.is_empty(), "the overlay wrote its base: {left:?}");
        }
    }
}
