//! The audit log (issue 14): every successful change through a tool, appended once per call —
//! when, who (principal, workspace, client name and version), which tool and request, the files
//! with their versions before and after, and the unified diff (at most [`MAX_DIFF_BYTES`], with
//! a note when cut).
//!
//! This module owns what an entry is, how it is shown (one line per entry, or one entry with its
//! diff) and the log's handle [`AuditLog`]; `crate::observers::audit_record` builds an entry from a finished call
//! (the one place a change is recorded); [`sqlite`] and [`postgres`] keep the entries, on the
//! same engines as the store mounts (`crate::storage::store`: their connection pools and error mapping),
//! each in tables of its own (`mountfs_audit`, `mountfs_audit_paths`) with its own schema
//! version, so the log never migrates the store's tables.
//!
//! A log that cannot be written never fails a tool call whose change landed: [`AuditLog::append`]
//! reports the failure, the caller warns on stderr, counts it ([`AuditLog::failures`]) and tells
//! the agent the change was not logged.

/// An [`Entry`] from a row of the columns both engines select for entries (id, time,
/// principal, workspace, client name and version, tool, request id, files as JSON, more files,
/// lines added and removed, summary, command, exit code, diff cut, private, diff), each read
/// with `$row.$get(index)`: written once for the SQLite and PostgreSQL rows.
macro_rules! entry_from_columns {
    ($row:ident . $get:ident) => {{
        let files: String = $row.$get(8)?;
        let count = |n: i64| u64::try_from(n).unwrap_or(0);
        Ok($crate::storage::audit::Entry {
            id: $row.$get(0)?,
            change: $crate::storage::audit::Change {
                time: $crate::storage::store::from_micros($row.$get(1)?),
                principal: $row.$get(2)?,
                workspace: $row.$get(3)?,
                client: $crate::storage::audit::ClientInfo {
                    name: $row.$get(4)?,
                    version: $row.$get(5)?,
                },
                tool: $row.$get(6)?,
                request_id: $row.$get(7)?,
                files: serde_json::from_str::<Vec<$crate::storage::audit::FileChange>>(&files)
                    .unwrap_or_default(),
                more_files: count($row.$get(9)?),
                lines_added: count($row.$get(10)?),
                lines_removed: count($row.$get(11)?),
                summary: $row.$get(12)?,
                command: $row.$get(13)?,
                exit_code: $row.$get(14)?,
                diff_truncated: $row.$get(15)?,
                private: $row.$get(16)?,
                diff: $row.$get(17)?,
            },
        })
    }};
}
pub(crate) use entry_from_columns;

pub mod cli;
pub mod postgres;
pub mod spool;
pub mod sqlite;
pub mod time;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The most bytes of unified diff one entry keeps; a longer diff is cut at a line with
/// [`DIFF_CUT_NOTE`].
pub const MAX_DIFF_BYTES: usize = 64 * 1024;
/// The most files one entry lists (a recursive delete of a large tree); the rest are counted.
pub const MAX_FILES_PER_ENTRY: usize = 1000;
/// The principal of the entries the server makes itself: a change a crash cut short, resolved
/// when the next start opened its mount (see [`crate::observers::audit_record::recovery_change`]).
pub const SERVER_PRINCIPAL: &str = "mountfs";
/// The most characters of an entry's summary and command.
pub const MAX_SUMMARY_CHARS: usize = 1000;
/// How many entries `history` shows unless told otherwise.
pub const DEFAULT_LIMIT: usize = 20;
/// The most entries one query returns.
pub const MAX_LIMIT: usize = 1000;
/// Through grants, `history` reads at most this many pages of [`MAX_LIMIT`] entries looking for
/// those the principal may see.
pub const GRANTED_SCAN_PAGES: usize = 20;
/// Starts the line that ends a diff cut at [`MAX_DIFF_BYTES`].
pub const DIFF_CUT_NOTE: &str = "... [diff cut at 64 KiB:";
/// How often a log with `--audit-keep` prunes while the server runs.
pub const PRUNE_INTERVAL: Duration = Duration::from_secs(3600);

/// Why the audit log could not be opened, written or read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum AuditError {
    /// `--audit` text that is not `sqlite:FILE`, `postgres:URL` or `off`.
    #[error(
        "--audit '{0}' is not understood: give sqlite:FILE, postgres:URL or off (e.g. --audit sqlite:/var/lib/mountfs/audit.db)"
    )]
    Target(String),
    /// `--audit` was not given and there is no user data directory for the default file.
    #[error(
        "no user data directory for the default audit log: give --audit sqlite:FILE, or --audit off"
    )]
    NoDataDir,
    /// The database failed.
    #[error("audit log ({engine}): {error}. Check the database, or start with --audit off")]
    Store {
        /// `SQLite FILE` or `PostgreSQL host:port/db`.
        engine: String,
        /// What the engine said.
        error: crate::storage::store::Error,
    },
    /// The change could not be put in the log's spool (see [`spool`]).
    #[error("{0}")]
    Spool(String),
    /// `mountfs log --since` text that is not a time.
    #[error(
        "--since '{0}' is not a time: give 2026-11-23, 2026-11-23T12:00:00Z, or an age such as 90m, 6h, 2d"
    )]
    Since(String),
}

/// Where the log is kept (`--audit`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuditTarget {
    /// No log; the `history` tool is not offered.
    Off,
    /// A SQLite file (the default: `<data dir>/mountfs/audit.db`).
    Sqlite(PathBuf),
    /// A PostgreSQL database shared by every instance: one ordered log.
    Postgres(String),
}

impl AuditTarget {
    /// Parses `--audit`: `off`, `sqlite:FILE`, `postgres:URL` (also `postgresql:`; the URL
    /// keeps its scheme).
    pub fn parse(text: &str) -> Result<Self, AuditError> {
        let text = text.trim();
        if text.eq_ignore_ascii_case("off") {
            return Ok(Self::Off);
        }
        if let Some(file) = text.strip_prefix("sqlite:")
            && !file.is_empty()
        {
            return Ok(Self::Sqlite(PathBuf::from(file)));
        }
        if let Some(url) = text.strip_prefix("postgres:")
            && !url.is_empty()
        {
            // `postgres:postgres://…` and `postgres://…` both name the URL.
            let url = if url.starts_with("//") {
                text.to_owned()
            } else {
                url.to_owned()
            };
            return Ok(Self::Postgres(url));
        }
        if text.starts_with("postgresql://") {
            return Ok(Self::Postgres(text.to_owned()));
        }
        Err(AuditError::Target(text.to_owned()))
    }

    /// The default log: `<data dir>/mountfs/audit.db`, beside the default `/memories/` store.
    pub fn default_in(data_dir: Option<&Path>) -> Result<Self, AuditError> {
        data_dir
            .map(|dir| Self::Sqlite(dir.join("mountfs").join("audit.db")))
            .ok_or(AuditError::NoDataDir)
    }
}

/// One file a change touched, with its version before and after (`None`: absent then).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileChange {
    /// Its virtual path.
    pub path: String,
    /// Its version before the change; `None` when it did not exist.
    pub before: Option<String>,
    /// Its version after the change; `None` when the change removed it.
    pub after: Option<String>,
}

/// Who made a call, as the entry names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// The bearer token's name over HTTP; `stdio` for a stdio process.
    pub principal: String,
    /// The MCP session, the principal (stateless), or the stdio process.
    pub workspace: String,
    /// The client, from `initialize` or the request's `_meta`.
    pub client: ClientInfo,
    /// The JSON-RPC request id.
    pub request_id: String,
}

/// The workspace of this process's stdio client, named once: every call builds an [`Origin`],
/// and `getpid` is a system call each time (strace: one per `ls`).
static STDIO_WORKSPACE: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| format!("stdio pid {}", std::process::id()));

impl Default for Origin {
    /// A call from this process's own stdio client (or an in-process caller).
    fn default() -> Self {
        Self {
            principal: "stdio".to_owned(),
            workspace: STDIO_WORKSPACE.clone(),
            client: ClientInfo::default(),
            request_id: String::new(),
        }
    }
}

/// The client that made a change, from the MCP handshake (`initialize`) or the request's own
/// `_meta` (`server/discover`, stateless MCP).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientInfo {
    /// Its name (`clientInfo.name`), empty when it gave none.
    pub name: String,
    /// Its version.
    pub version: String,
}

/// One change, as recorded (an entry without its id).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// When the change landed.
    #[serde(with = "time::rfc3339")]
    pub time: SystemTime,
    /// Who: the bearer token's name over HTTP, `stdio` for a stdio process.
    pub principal: String,
    /// Whose workspace: the MCP session, the principal (stateless), or the stdio process.
    pub workspace: String,
    /// The client.
    pub client: ClientInfo,
    /// The tool.
    pub tool: String,
    /// The JSON-RPC request id, as text.
    pub request_id: String,
    /// The files, at most [`MAX_FILES_PER_ENTRY`].
    pub files: Vec<FileChange>,
    /// Files changed beyond those listed.
    pub more_files: u64,
    /// Lines added, over all files.
    pub lines_added: u64,
    /// Lines removed, over all files.
    pub lines_removed: u64,
    /// The first line of the tool's answer (what happened, in words).
    pub summary: String,
    /// `execute`: the command run.
    pub command: Option<String>,
    /// `execute`: its exit code (none when it was killed or timed out).
    pub exit_code: Option<i64>,
    /// The unified diff, at most [`MAX_DIFF_BYTES`]; empty when the tool had none (a delete, a
    /// move, a file too large to compare, a binary file).
    pub diff: String,
    /// Whether `diff` was cut (here or already in the tool's answer).
    pub diff_truncated: bool,
    /// Whether the change is the workspace's own business (issue 41): it touched a mount private
    /// to the workspace (a memory mount, an overlay mount's uncommitted layer, a client's root)
    /// or ran a command (`execute`, whose command line may hold anything). Only that workspace
    /// sees it ([`Reader::may_see`]); changes of shared mounts are every workspace's.
    #[serde(default)]
    pub private: bool,
}

/// Who reads the log, and so which entries it is shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reader {
    /// The operator (`mountfs log`, who holds the database anyway): every entry.
    Operator,
    /// An agent (`history`): the entries of shared mounts, and its own workspace's.
    Workspace {
        /// Its principal.
        principal: String,
        /// Its workspace, as entries name it ([`Origin::workspace`]).
        workspace: String,
        /// What its principal is granted (issue 43): only entries whose every file lies in a
        /// granted mount. `None`: no grants.
        view: Option<Arc<crate::ground::grants::View>>,
    },
}

impl Reader {
    /// The reader of a call made by `origin`.
    pub fn of(origin: &Origin) -> Self {
        Self::Workspace {
            principal: origin.principal.clone(),
            workspace: origin.workspace.clone(),
            view: None,
        }
    }

    /// This reader seeing only what `view` grants (issue 43; `None`: no grants).
    pub fn seeing(self, granted: Option<Arc<crate::ground::grants::View>>) -> Self {
        match self {
            Self::Operator => Self::Operator,
            Self::Workspace {
                principal,
                workspace,
                ..
            } => Self::Workspace {
                principal,
                workspace,
                view: granted,
            },
        }
    }

    /// The grants this reader sees through, if any.
    fn view(&self) -> Option<&crate::ground::grants::View> {
        match self {
            Self::Operator => None,
            Self::Workspace { view, .. } => view.as_deref(),
        }
    }

    /// Whether this reader may see `change`: an entry private to a workspace only that
    /// workspace; every other one everybody. (The one predicate; the engines' queries say the
    /// same in SQL through [`Reader::workspace`].)
    pub fn may_see(&self, change: &Change) -> bool {
        match self {
            Self::Operator => true,
            Self::Workspace {
                workspace, view, ..
            } => {
                // Its own entries were made through its grants; another's only when every
                // file it names is granted.
                change.workspace == *workspace
                    || (!change.private && view.as_ref().is_none_or(|view| granted(view, change)))
            }
        }
    }

    /// The workspace whose private entries this reader sees besides the shared ones; `None`:
    /// every entry.
    pub(crate) fn workspace(&self) -> Option<String> {
        match self {
            Self::Operator => None,
            Self::Workspace { workspace, .. } => Some(workspace.clone()),
        }
    }
}

/// Whether every file of `change` lies in a mount `view` grants; a change naming files beyond
/// those it lists (`more_files`) or none at all (an `execute`) is not shown through grants.
fn granted(view: &crate::ground::grants::View, change: &Change) -> bool {
    change.more_files == 0
        && !change.files.is_empty()
        && change.files.iter().all(|file| {
            crate::ground::path::VirtualPath::parse(&file.path).is_ok_and(|path| view.sees(&path))
        })
}

/// A recorded change with its place in the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Its id: ascending in the order entries were appended (one sequence for every instance
    /// sharing a PostgreSQL log).
    pub id: i64,
    /// The change.
    #[serde(flatten)]
    pub change: Change,
}

impl Entry {
    /// The entry as `history` and `mountfs log --json` show it in a listing: everything but
    /// the diff (`{id: N}` / `mountfs log --id N` show that).
    pub fn listed(&self) -> serde_json::Value {
        let mut value = serde_json::to_value(self).unwrap_or_default();
        if let Some(map) = value.as_object_mut() {
            map.remove("diff");
        }
        value
    }

    /// The entry in full, diff included.
    pub fn full(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_default()
    }

    /// One line: `#id time who tool path(s) +added -removed`.
    pub fn line(&self) -> String {
        let change = &self.change;
        let mut paths: Vec<String> = change
            .files
            .iter()
            .map(|f| crate::ground::path::escape_name(&f.path))
            .collect();
        paths.dedup();
        let mut shown = match paths.as_slice() {
            [] => "-".to_owned(),
            [one] => one.clone(),
            [first, second] if change.tool == "move" => format!("{first} -> {second}"),
            [first, rest @ ..] => format!("{first} (+{} more)", rest.len()),
        };
        if change.more_files > 0 && paths.len() > 1 {
            shown = format!(
                "{} (+{} more)",
                paths[0],
                paths.len() as u64 - 1 + change.more_files
            );
        }
        let who = if change.client.name.is_empty() {
            change.principal.clone()
        } else {
            format!("{} via {}", change.principal, change.client.name)
        };
        let mut line = format!(
            "#{} {} {who} {} {shown} +{} -{}",
            self.id,
            time::format(change.time),
            change.tool,
            change.lines_added,
            change.lines_removed
        );
        if let Some(command) = &change.command {
            line.push_str(&format!(" `{}`", one_line(command)));
        }
        if let Some(code) = change.exit_code {
            line.push_str(&format!(" exit {code}"));
        }
        if change.principal == SERVER_PRINCIPAL && change.client.name.is_empty() {
            // What the server did at start (a change rolled back or completed) shows in every
            // listing, not only in the entry's detail.
            line.push_str(&format!(" [{}]", one_line(&change.summary)));
        }
        line
    }

    /// The entry with its diff, for `history {id}` and `mountfs log --id`.
    pub fn detail(&self) -> String {
        let change = &self.change;
        let mut text = self.line();
        text.push('\n');
        text.push_str(&format!(
            "workspace: {}; client: {} {}; request id: {}\n",
            change.workspace,
            if change.client.name.is_empty() {
                "(unnamed)"
            } else {
                &change.client.name
            },
            change.client.version,
            change.request_id
        ));
        for file in &change.files {
            let path = crate::ground::path::escape_name(&file.path);
            if file.before.is_none() && file.after.is_none() {
                text.push_str(&format!("{path}\n"));
                continue;
            }
            text.push_str(&format!(
                "{path}: version {} -> {}\n",
                file.before.as_deref().unwrap_or("(absent)"),
                file.after.as_deref().unwrap_or("(absent)")
            ));
        }
        if change.more_files > 0 {
            text.push_str(&format!("... and {} more file(s)\n", change.more_files));
        }
        if !change.summary.is_empty() {
            text.push_str(&change.summary);
            text.push('\n');
        }
        if change.diff.is_empty() {
            text.push_str("(no diff recorded)");
        } else {
            text.push_str(&change.diff);
        }
        text
    }
}

/// A listing as `history` and `mountfs log` show it: one line per entry, newest first, or
/// what to do when there is none.
pub fn listing_text(entries: &[Entry], query: &Query, failures: u64, waiting: usize) -> String {
    let mut text = if entries.is_empty() {
        format!(
            "No changes logged under {}{}.",
            crate::ground::path::escape_name(&query.under),
            query
                .since
                .map(|since| format!(" since {}", time::format(since)))
                .unwrap_or_default()
        )
    } else {
        let lines: Vec<String> = entries.iter().map(Entry::line).collect();
        let mut text = format!(
            "{} change(s), newest first (give id to see one with its diff):\n{}",
            entries.len(),
            lines.join("\n")
        );
        if entries.len() >= query.limit.clamp(1, MAX_LIMIT) {
            text.push_str(&format!(
                "\n(showing the newest {}; raise limit, or narrow path, to see more)",
                entries.len()
            ));
        }
        text
    };
    if failures > 0 {
        text.push_str(&format!(
            "\nWarning: {failures} change(s) since this server started could not be logged (see its stderr)."
        ));
    }
    if waiting > 0 {
        text.push_str(&format!(
            "\nNote: {waiting} change(s) made by this server are not shown yet: they wait in the audit log's spool and are written when the database answers (see its stderr)."
        ));
    }
    text
}

/// Newlines and tabs as spaces: a command shown on one line.
fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// Which entries a listing returns, newest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    /// Only entries touching this path or a path under it; `/` is every entry.
    pub under: String,
    /// Only entries at or after this time.
    pub since: Option<SystemTime>,
    /// At most this many (1..=[`MAX_LIMIT`]).
    pub limit: usize,
    /// Who asks: only the entries it may see ([`Reader::may_see`]).
    pub reader: Reader,
}

impl Query {
    /// The key range of paths under `under`: `(exact, lower, upper)` where a path matches when
    /// it equals `exact` or lies in `[lower, upper)`. `None` for `/` (every path).
    pub(crate) fn path_range(&self) -> Option<(String, String, Option<String>)> {
        let exact = self.under.trim_end_matches('/');
        if exact.is_empty() {
            return None;
        }
        let lower = format!("{exact}/");
        let upper = crate::storage::store::prefix_successor(&lower);
        Some((exact.to_owned(), lower, upper))
    }

    /// The limit as SQL wants it.
    pub(crate) fn sql_limit(&self) -> i64 {
        i64::try_from(self.limit.clamp(1, MAX_LIMIT)).unwrap_or(1)
    }
}

/// The engine keeping the entries.
#[derive(Debug)]
enum Engine {
    Sqlite(sqlite::SqliteAudit),
    Postgres(postgres::PostgresAudit),
}

/// The open audit log (see the module doc).
#[derive(Debug)]
pub struct AuditLog {
    engine: std::sync::Arc<Engine>,
    /// Where [`AuditLog::record`] puts changes for the shipper (see [`spool`]); `None`: each
    /// change is written to the database inside its call.
    spool: Option<std::sync::Arc<spool::Spool>>,
    /// Changes that landed but could not be logged since start.
    failures: AtomicU64,
    /// `--audit-keep`: entries older than this are pruned.
    keep: Option<Duration>,
}

impl AuditLog {
    /// Opens the log `target` names (creating its tables), or `None` for `--audit off`.
    /// `keep_days`: prune entries older than that now, and every [`PRUNE_INTERVAL`] while the
    /// log is in use (see [`AuditLog::prune_expired`]).
    pub async fn open(
        target: &AuditTarget,
        keep_days: Option<u32>,
    ) -> Result<Option<Self>, AuditError> {
        let engine = match target {
            AuditTarget::Off => return Ok(None),
            AuditTarget::Sqlite(file) => Engine::Sqlite(sqlite::SqliteAudit::open(file).await?),
            AuditTarget::Postgres(url) => {
                Engine::Postgres(postgres::PostgresAudit::connect(url).await?)
            }
        };
        let log = Self {
            engine: std::sync::Arc::new(engine),
            spool: None,
            failures: AtomicU64::new(0),
            keep: keep_days.map(|days| Duration::from_secs(u64::from(days) * 86_400)),
        };
        log.prune_expired().await?;
        Ok(Some(log))
    }

    /// `SQLite FILE` or `PostgreSQL host:port/db`, for messages.
    pub fn describe(&self) -> String {
        match self.engine.as_ref() {
            Engine::Sqlite(log) => log.describe(),
            Engine::Postgres(log) => log.describe(),
        }
    }

    /// This log with a spool in `dir` (see [`spool`]): [`AuditLog::record`] then returns once the
    /// change is in this server's spool file, and a task writes it to the database. Also
    /// writes what servers that stopped left in the directory. Needs a Tokio runtime.
    pub fn with_spool(mut self, dir: &Path, max_bytes: u64) -> Result<Self, AuditError> {
        let spool = spool::Spool::create(dir, &self.describe(), max_bytes).map_err(|error| {
            AuditError::Spool(format!(
                "the audit log's spool directory {} cannot be used: {error}. Give --audit another place, or --audit off",
                dir.display()
            ))
        })?;
        let spool = std::sync::Arc::new(spool);
        let engine = self.engine.clone();
        tokio::spawn(spool.clone().ship(move |batch| {
            let engine = engine.clone();
            async move {
                engine
                    .append_spooled(batch)
                    .await
                    .map_err(|error| match error {
                        crate::storage::store::Error::Unavailable(_)
                        | crate::storage::store::Error::Schema(_) => {
                            spool::ShipError::Unavailable(error.to_string())
                        }
                        other => spool::ShipError::Rejected(other.to_string()),
                    })
            }
        }));
        self.spool = Some(spool);
        Ok(self)
    }

    /// Logs one change: into the spool when there is one (see [`spool`]), else straight into the
    /// database. `Ok(Some(why))`: the change is kept, but waits for a database that does not
    /// answer now (`why`); the answer says so. `Err`: the change is not logged.
    pub async fn record(&self, change: &Change) -> Result<Option<String>, AuditError> {
        let Some(spool) = &self.spool else {
            return self.append(change).await.map(|_| None);
        };
        match spool.record(sanitized(change)) {
            Ok(None) => Ok(None),
            Ok(Some(why)) => Ok(Some(format!(
                "{} does not answer ({why}); the change waits in the spool {} with {} other(s) and is written when it answers again",
                self.describe(),
                spool.file().display(),
                spool.waiting().saturating_sub(1)
            ))),
            Err(error) => Err(AuditError::Spool(error.to_string())),
        }
    }

    /// Changes recorded by this server that wait for the database.
    pub fn waiting(&self) -> usize {
        self.spool.as_ref().map_or(0, |spool| spool.waiting())
    }

    /// At shutdown: waits at most `wait` for the recorded changes to reach the database (what
    /// does not stays in the spool for the next server).
    pub async fn drain(&self, wait: Duration) {
        if let Some(spool) = &self.spool {
            spool.drain(wait).await;
        }
    }

    /// Before reading: this server's recorded changes are written first (at most
    /// [`spool::FLUSH_WAIT`]), so a listing shows every change the server answered.
    async fn flush(&self) {
        if let Some(spool) = &self.spool {
            spool.flushed(spool::FLUSH_WAIT).await;
        }
    }

    /// Appends one change now, in the database; returns its id.
    pub async fn append(&self, change: &Change) -> Result<i64, AuditError> {
        let change = sanitized(change);
        let appended = match self.engine.as_ref() {
            Engine::Sqlite(log) => log.append(&change).await,
            Engine::Postgres(log) => log.append(&change).await,
        };
        appended.map_err(|error| self.error(error))
    }

    /// Entries matching `query`, newest first.
    pub async fn query(&self, query: &Query) -> Result<Vec<Entry>, AuditError> {
        self.flush().await;
        let wanted = query.limit.clamp(1, MAX_LIMIT);
        if query.reader.view().is_none() {
            return self.page(query, None).await;
        }
        // Through grants: the engines' SQL knows workspaces, not mounts, so pages of the newest
        // entries are read one after the other and those granted kept, until `limit` are found
        // or the log ends — at most GRANTED_SCAN_PAGES pages, so that one call's cost stays
        // bounded in a log where almost nothing is granted (then fewer are shown).
        let paged = Query {
            limit: MAX_LIMIT,
            ..query.clone()
        };
        let mut found = Vec::new();
        let mut before = None;
        for _ in 0..GRANTED_SCAN_PAGES {
            let page = self.page(&paged, before).await?;
            let full = page.len() >= MAX_LIMIT;
            before = page.last().map(|entry| {
                (
                    crate::storage::store::to_micros(entry.change.time),
                    entry.id,
                )
            });
            found.extend(
                page.into_iter()
                    .filter(|entry| query.reader.may_see(&entry.change)),
            );
            if found.len() >= wanted || !full {
                break;
            }
        }
        found.truncate(wanted);
        Ok(found)
    }

    /// One page of entries from the engine (see [`AuditLog::query`]).
    async fn page(
        &self,
        query: &Query,
        before: Option<(i64, i64)>,
    ) -> Result<Vec<Entry>, AuditError> {
        let found = match self.engine.as_ref() {
            Engine::Sqlite(log) => log.query(query, before).await,
            Engine::Postgres(log) => log.query(query, before).await,
        };
        found.map_err(|error| self.error(error))
    }

    /// The entry with this id.
    pub async fn get(&self, id: i64) -> Result<Option<Entry>, AuditError> {
        self.flush().await;
        let found = match self.engine.as_ref() {
            Engine::Sqlite(log) => log.get(id).await,
            Engine::Postgres(log) => log.get(id).await,
        };
        found.map_err(|error| self.error(error))
    }

    /// The value of a PostgreSQL run-time parameter in the log's own sessions (`None`: the log
    /// is not in PostgreSQL). For tests and diagnostics.
    #[doc(hidden)]
    pub async fn postgres_setting(&self, name: &str) -> Result<Option<String>, AuditError> {
        match self.engine.as_ref() {
            Engine::Sqlite(_) => Ok(None),
            Engine::Postgres(log) => log
                .setting(name)
                .await
                .map(Some)
                .map_err(|error| self.error(error)),
        }
    }

    /// Deletes the entries older than `cutoff`; returns how many.
    pub async fn prune(&self, cutoff: SystemTime) -> Result<u64, AuditError> {
        let pruned = match self.engine.as_ref() {
            Engine::Sqlite(log) => log.prune(cutoff).await,
            Engine::Postgres(log) => log.prune(cutoff).await,
        };
        pruned.map_err(|error| self.error(error))
    }

    /// Prunes what `--audit-keep` no longer keeps (nothing without it).
    pub async fn prune_expired(&self) -> Result<u64, AuditError> {
        let Some(keep) = self.keep else {
            return Ok(0);
        };
        let cutoff = SystemTime::now()
            .checked_sub(keep)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let pruned = self.prune(cutoff).await?;
        if pruned > 0 {
            tracing::info!(pruned, "audit log: pruned entries older than --audit-keep");
        }
        Ok(pruned)
    }

    /// Whether `--audit-keep` was given (a server then prunes every [`PRUNE_INTERVAL`]).
    pub fn prunes(&self) -> bool {
        self.keep.is_some()
    }

    /// Counts a change that landed but could not be logged.
    /// Returns the count with it, as [`AuditLog::failures`] gives it.
    pub fn count_failure(&self) -> u64 {
        self.failures.fetch_add(1, Ordering::Relaxed)
            + 1
            + self.spool.as_ref().map_or(0, |spool| spool.dropped())
    }

    /// Changes that landed but could not be logged since the server started.
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
            + self.spool.as_ref().map_or(0, |spool| spool.dropped())
    }

    fn error(&self, error: crate::storage::store::Error) -> AuditError {
        AuditError::Store {
            engine: self.describe(),
            error,
        }
    }
}

impl Engine {
    async fn append_spooled(
        &self,
        batch: Vec<(String, Change)>,
    ) -> crate::storage::store::Result<()> {
        match self {
            Self::Sqlite(log) => log.append_spooled(batch).await,
            Self::Postgres(log) => log.append_spooled(batch).await,
        }
    }
}

impl Drop for AuditLog {
    /// Stops the spool's shipper; what it has not written stays in the spool file.
    fn drop(&mut self) {
        if let Some(spool) = &self.spool {
            spool.close();
        }
    }
}

/// Prunes every [`PRUNE_INTERVAL`] while `log` is alive (only with `--audit-keep`).
pub fn spawn_pruning(log: &std::sync::Arc<AuditLog>) {
    if !log.prunes() {
        return;
    }
    let weak = std::sync::Arc::downgrade(log);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(PRUNE_INTERVAL);
        tick.tick().await;
        loop {
            tick.tick().await;
            let Some(log) = weak.upgrade() else { return };
            if let Err(error) = log.prune_expired().await {
                tracing::warn!(%error, "audit log: pruning failed; it is retried in an hour");
            }
        }
    });
}

/// The unified diff of creating `path` with `content` (every line added), built only as far
/// as the entry keeps it ([`MAX_DIFF_BYTES`]).
pub fn creation_diff(path: &str, content: &str) -> (String, bool) {
    let lines = content.lines().count();
    let mut diff = format!("--- /dev/null\n+++ {path}\n@@ -0,0 +1,{lines} @@\n");
    for line in content.lines() {
        if diff.len() > MAX_DIFF_BYTES {
            break;
        }
        diff.push('+');
        diff.push_str(line);
        diff.push('\n');
    }
    if !content.is_empty() && !content.ends_with('\n') && diff.len() <= MAX_DIFF_BYTES {
        diff.push_str("\\ No newline at end of file\n");
    }
    let total = diff.len();
    let (diff, cut) = cap_diff(&diff, false);
    (diff, cut || total > MAX_DIFF_BYTES)
}

/// Cuts `diff` at a line so that it and the note fit in [`MAX_DIFF_BYTES`]; `already_cut`: the
/// tool's own diff was cut at the result limit. Returns the diff and whether it was cut.
pub fn cap_diff(diff: &str, already_cut: bool) -> (String, bool) {
    if diff.len() <= MAX_DIFF_BYTES {
        return (diff.to_owned(), already_cut);
    }
    let note_room = 128;
    let budget = MAX_DIFF_BYTES - note_room;
    let mut end = budget;
    while !diff.is_char_boundary(end) {
        end -= 1;
    }
    let cut_at = diff[..end].rfind('\n').map_or(end, |newline| newline + 1);
    let mut kept = diff[..cut_at].to_owned();
    if !kept.ends_with('\n') && !kept.is_empty() {
        kept.push('\n');
    }
    kept.push_str(&format!(
        "{DIFF_CUT_NOTE} {cut_at} of {} bytes kept]\n",
        diff.len()
    ));
    (kept, true)
}

/// Counts the `+` and `-` lines of a unified diff (not its `+++`/`---` headers).
pub fn count_diff_lines(diff: &str) -> (u64, u64) {
    let mut added = 0;
    let mut removed = 0;
    for line in diff.lines() {
        if line.starts_with("+++ ") || line.starts_with("--- ") {
            continue;
        }
        if line.starts_with('+') {
            added += 1;
        } else if line.starts_with('-') {
            removed += 1;
        }
    }
    (added, removed)
}

/// At most `max` characters of `text`, with `…` when cut.
pub fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_owned(),
        Some((end, _)) => format!("{}…", &text[..end]),
    }
}

/// The change as it can be stored by both engines: no NUL characters (PostgreSQL TEXT cannot
/// hold them; they are shown as U+FFFD), summary and command clipped.
fn sanitized(change: &Change) -> Change {
    let clean = |text: &str| {
        if text.contains('\0') {
            text.replace('\0', "\u{fffd}")
        } else {
            text.to_owned()
        }
    };
    let mut out = change.clone();
    out.principal = clean(&change.principal);
    out.workspace = clean(&change.workspace);
    out.client.name = clean(&change.client.name);
    out.client.version = clean(&change.client.version);
    out.request_id = clean(&change.request_id);
    out.summary = clip(&clean(&change.summary), MAX_SUMMARY_CHARS);
    out.command = change
        .command
        .as_deref()
        .map(|c| clip(&clean(c), MAX_SUMMARY_CHARS));
    out.diff = clean(&change.diff);
    for file in &mut out.files {
        file.path = clean(&file.path);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse_and_bad_ones_say_what_to_give() {
        assert_eq!(AuditTarget::parse("off").unwrap(), AuditTarget::Off);
        assert_eq!(
            AuditTarget::parse("sqlite:/tmp/a.db").unwrap(),
            AuditTarget::Sqlite("/tmp/a.db".into())
        );
        assert_eq!(
            AuditTarget::parse("postgres://u@h:5432/db").unwrap(),
            AuditTarget::Postgres("postgres://u@h:5432/db".into())
        );
        assert_eq!(
            AuditTarget::parse("postgres:postgres://u@h/db").unwrap(),
            AuditTarget::Postgres("postgres://u@h/db".into())
        );
        assert_eq!(
            AuditTarget::parse("mysql:x").unwrap_err().to_string(),
            "--audit 'mysql:x' is not understood: give sqlite:FILE, postgres:URL or off (e.g. --audit sqlite:/var/lib/mountfs/audit.db)"
        );
        assert_eq!(
            AuditTarget::default_in(Some(Path::new("/data"))).unwrap(),
            AuditTarget::Sqlite("/data/mountfs/audit.db".into())
        );
    }

    #[test]
    fn long_diffs_are_cut_at_a_line_within_64_kib_with_a_note() {
        let diff: String = (0..20_000).map(|i| format!("+line {i}\n")).collect();
        let (kept, cut) = cap_diff(&diff, false);
        assert!(cut);
        assert!(kept.len() <= MAX_DIFF_BYTES, "{}", kept.len());
        let last = kept.lines().last().unwrap();
        assert!(last.starts_with(DIFF_CUT_NOTE), "{last}");
        assert!(kept.lines().rev().nth(1).unwrap().starts_with("+line "));
        let (short, cut) = cap_diff("+a\n", false);
        assert_eq!((short.as_str(), cut), ("+a\n", false));
        assert!(cap_diff("+a\n", true).1);
    }

    #[test]
    fn diff_lines_are_counted_without_headers() {
        let diff = "--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n+d\n";
        assert_eq!(count_diff_lines(diff), (2, 1));
    }

    #[test]
    fn paths_under_a_directory_are_one_key_range() {
        let query = Query {
            under: "/src/".into(),
            since: None,
            limit: 0,
            reader: Reader::Operator,
        };
        assert_eq!(
            query.path_range(),
            Some(("/src".into(), "/src/".into(), Some("/src0".into())))
        );
        assert_eq!(query.sql_limit(), 1);
        let all = Query {
            under: "/".into(),
            since: None,
            limit: 5000,
            reader: Reader::Operator,
        };
        assert_eq!(all.path_range(), None);
        assert_eq!(all.sql_limit(), MAX_LIMIT as i64);
    }

    #[test]
    fn nul_characters_never_reach_the_database() {
        let change = Change {
            time: SystemTime::UNIX_EPOCH,
            principal: "p\0".into(),
            workspace: String::new(),
            client: ClientInfo::default(),
            tool: "edit_file".into(),
            request_id: "1".into(),
            files: vec![FileChange {
                path: "/a\0b".into(),
                before: None,
                after: Some("v".into()),
            }],
            more_files: 0,
            lines_added: 0,
            lines_removed: 0,
            summary: "x".repeat(5000),
            command: None,
            exit_code: None,
            diff: "+\0\n".into(),
            diff_truncated: false,
            private: false,
        };
        let clean = sanitized(&change);
        assert_eq!(clean.principal, "p\u{fffd}");
        assert_eq!(clean.files[0].path, "/a\u{fffd}b");
        assert_eq!(clean.diff, "+\u{fffd}\n");
        assert_eq!(clean.summary.chars().count(), MAX_SUMMARY_CHARS + 1);
    }
}
