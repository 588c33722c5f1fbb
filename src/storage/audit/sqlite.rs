//! The audit log in a SQLite file, on the store's SQLite engine ([`SqliteStore`]: its pool of
//! WAL connections on the blocking pool, its error mapping). The log's tables have their own
//! schema version (`mountfs_audit_schema`), so a log kept in a store's file never touches the
//! store's `user_version`.
//!
//! Each append is one `BEGIN IMMEDIATE` transaction: the entry and one row per path
//! (`mountfs_audit_paths`, the index `history {path}` reads), run on the calling thread
//! ([`SqliteStore::run_in_place`]: no hand-off to the blocking pool and back). The log's
//! connections are set up once ([`CONNECTION_SETTINGS`]): `synchronous = NORMAL` (in WAL mode a
//! commit survives a crash of the process, and only a power loss can drop the last entries —
//! the price of not doubling every edit's fsyncs, BENCHMARKS.md); a short busy timeout (a log
//! locked by someone else makes the answer say "not logged" quickly rather than hold the
//! edit's answer for long); and checkpoints in the background every [`CHECKPOINT_EVERY`]
//! appends, an append doing one itself only if the WAL reaches 16 MiB.

use crate::ground::migrations;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::{AuditError, Change, Entry, Query};
use crate::storage::store::sqlite::{ConnectionSettings, map_error};
use crate::storage::store::{Error, Result, SqliteStore, to_micros};

/// How the log's connections are set up, once each: `synchronous = NORMAL`, a short wait for
/// another writer of the file, and checkpoints left to the background (see
/// [`CHECKPOINT_EVERY`]) but for a WAL of 4,000 pages (16 MiB), where an append checkpoints
/// itself: a background checkpoint overtaken by appends (they never wait for it) does not let
/// the WAL start over, and this bounds it whatever the rate of changes.
const CONNECTION_SETTINGS: ConnectionSettings = ConnectionSettings {
    synchronous: "NORMAL",
    busy_timeout: Duration::from_secs(1),
    wal_autocheckpoint: Some(4_000),
};

/// Appends between two checkpoints of the log's WAL into its file. A checkpoint copies the
/// pages back and syncs the file (milliseconds): it runs on its own connection after the
/// append that reaches this count, and no edit's answer waits for it. The WAL stays within
/// about this many entries' pages (~5 each).
const CHECKPOINT_EVERY: u64 = 200;

/// `MIGRATIONS[i]` takes the log's tables from version `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[
    "
    CREATE TABLE mountfs_audit (
        id             INTEGER PRIMARY KEY AUTOINCREMENT,
        at             INTEGER NOT NULL,
        principal      TEXT    NOT NULL,
        workspace      TEXT    NOT NULL,
        client_name    TEXT    NOT NULL,
        client_version TEXT    NOT NULL,
        tool           TEXT    NOT NULL,
        request_id     TEXT    NOT NULL,
        files          TEXT    NOT NULL,
        more_files     INTEGER NOT NULL,
        lines_added    INTEGER NOT NULL,
        lines_removed  INTEGER NOT NULL,
        summary        TEXT    NOT NULL,
        command        TEXT,
        exit_code      INTEGER,
        diff_truncated INTEGER NOT NULL,
        diff           TEXT    NOT NULL
    );
    CREATE INDEX mountfs_audit_at ON mountfs_audit (at);
    CREATE TABLE mountfs_audit_paths (
        path     TEXT    NOT NULL,
        entry_id INTEGER NOT NULL,
        PRIMARY KEY (path, entry_id)
    ) WITHOUT ROWID;
",
    "
    ALTER TABLE mountfs_audit ADD COLUMN spool_key TEXT;
    CREATE UNIQUE INDEX mountfs_audit_spool_key ON mountfs_audit (spool_key);
",
    // Issue 41: entries private to their workspace. Those written before cannot tell which
    // mount they touched: kept to their own workspace (the operator's `mountfs log` shows them
    // all), but the server's own recovery entries.
    "
    ALTER TABLE mountfs_audit ADD COLUMN private INTEGER NOT NULL DEFAULT 0;
    UPDATE mountfs_audit SET private = 1 WHERE principal <> 'mountfs';
",
];

/// Every column but the diff, which comes last: a listing reads `''` in its place.
const COLUMNS: &str = "id, at, principal, workspace, client_name, client_version, tool, request_id, files, more_files, lines_added, lines_removed, summary, command, exit_code, diff_truncated, private";

/// What [`SqliteStore::open`] would refuse in `file`, found without SQLite: a directory that
/// cannot be made, a file that cannot be opened for reading and writing, a file that is not
/// an SQLite database (its first 16 bytes are SQLite's header, `SQLite format 3\0`).
fn check_file(file: &Path) -> Result<()> {
    use std::io::Read;
    let refuse = |what: &str, error: std::io::Error| {
        Error::Unavailable(format!("SQLite database: {what}: {error}"))
    };
    if let Some(parent) = file.parent()
        && !parent.as_os_str().is_empty()
    {
        std::fs::create_dir_all(parent).map_err(|e| refuse("cannot create its directory", e))?;
    }
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(file)
        .map_err(|e| refuse("cannot open it for reading and writing", e))?;
    // A FIFO or a device would hang or feed the read below: only a regular file is a log.
    let is_file = opened
        .metadata()
        .map_err(|e| refuse("cannot read its metadata", e))?
        .is_file();
    if !is_file {
        return Err(Error::Unavailable(
            "SQLite database: not a regular file; give --audit a file path".to_owned(),
        ));
    }
    let mut header = Vec::with_capacity(16);
    opened
        .take(16)
        .read_to_end(&mut header)
        .map_err(|e| refuse("cannot read it", e))?;
    if !b"SQLite format 3\0".starts_with(&header) {
        return Err(Error::Unavailable(
            "SQLite database: file is not a database (it does not begin with SQLite's header); \
             give --audit another file, or move this one away"
                .to_owned(),
        ));
    }
    Ok(())
}

/// The log in one SQLite file.
#[derive(Debug)]
pub(crate) struct SqliteAudit {
    /// Opened on first use ([`Self::store`]).
    store: tokio::sync::OnceCell<SqliteStore>,
    file: PathBuf,
    /// Appends since the last checkpoint began.
    since_checkpoint: std::sync::atomic::AtomicU64,
}

impl SqliteAudit {
    /// The log at `file`, checked now (its directory created, the file opened for reading and
    /// writing, created if missing, and refused unless it is empty or an SQLite database), and
    /// opened with SQLite (its tables created) on first use: a server that changes nothing
    /// never loads SQLite's code and caches (about 2 MiB of its memory). A log whose schema is
    /// newer than this mountfs is found then, and each change says it was not logged.
    pub(crate) async fn open(file: &Path) -> Result<Self, AuditError> {
        let checked = file.to_owned();
        tokio::task::spawn_blocking(move || check_file(&checked))
            .await
            .map_err(|e| Error::Unavailable(format!("SQLite worker failed: {e}")))
            .and_then(|checked| checked)
            .map_err(|error| AuditError::Store {
                engine: format!("SQLite {}", file.display()),
                error,
            })?;
        Ok(Self {
            store: tokio::sync::OnceCell::new(),
            file: file.to_owned(),
            since_checkpoint: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// The log's store, opened (and its tables created or brought up to date) the first time.
    async fn store(&self) -> Result<&SqliteStore> {
        self.store
            .get_or_try_init(|| async {
                let store = SqliteStore::open_with(&self.file, CONNECTION_SETTINGS).await?;
                store.run(migrate).await?;
                Ok(store)
            })
            .await
    }

    /// Starts a checkpoint of the WAL in the background once [`CHECKPOINT_EVERY`] appends
    /// have gone by (one at a time: the count restarts when it starts). `PASSIVE`: it never
    /// waits for, nor blocks, a writer; what it cannot copy now, the next one copies.
    fn checkpoint_when_due(&self, appended: u64) {
        use std::sync::atomic::Ordering;
        let count = self.since_checkpoint.fetch_add(appended, Ordering::Relaxed) + appended;
        if count < CHECKPOINT_EVERY {
            return;
        }
        self.since_checkpoint.store(0, Ordering::Relaxed);
        let Some(store) = self.store.get().cloned() else {
            return;
        };
        let file = self.file.clone();
        tokio::spawn(async move {
            let done = store
                .run(|conn| {
                    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
                        .map_err(map_error)
                })
                .await;
            if let Err(error) = done {
                tracing::warn!(file = %file.display(), %error, "audit log checkpoint failed");
            }
        });
    }

    pub(crate) fn describe(&self) -> String {
        format!("SQLite {}", self.file.display())
    }

    /// Appends one change now, on the calling thread; returns its id.
    pub(crate) async fn append(&self, change: &Change) -> Result<i64> {
        let change = change.clone();
        let id = self
            .store()
            .await?
            .run_in_place(move |conn| {
                let tx = immediate(conn)?;
                let id = insert(&tx, &change, None)?;
                tx.commit().map_err(map_error)?;
                Ok(id)
            })
            .await?;
        self.checkpoint_when_due(1);
        id.ok_or_else(|| Error::Query("audit entry: not inserted".to_owned()))
    }

    /// Appends spooled changes in one transaction on the blocking pool, in order; a change
    /// whose key the log already holds (shipped before a crash emptied its spool) is skipped.
    pub(crate) async fn append_spooled(&self, batch: Vec<(String, Change)>) -> Result<()> {
        let count = batch.len() as u64;
        self.store()
            .await?
            .run(move |conn| {
                let tx = immediate(conn)?;
                for (key, change) in &batch {
                    insert(&tx, change, Some(key))?;
                }
                tx.commit().map_err(map_error)
            })
            .await?;
        self.checkpoint_when_due(count);
        Ok(())
    }

    /// Entries matching `query`, newest first; with `before` (a listed entry's time in
    /// microseconds and id), only those listed after it: the next page.
    pub(crate) async fn query(
        &self,
        query: &Query,
        before: Option<(i64, i64)>,
    ) -> Result<Vec<Entry>> {
        let since = query.since.map(to_micros);
        let (before_at, before_id) = before.unzip();
        let range = query.path_range();
        let limit = query.sql_limit();
        let workspace = query.reader.workspace();
        self.store()
            .await?
            .run(move |conn| {
                let mut sql = format!(
                    "SELECT {COLUMNS}, '' FROM mountfs_audit WHERE (?1 IS NULL OR at >= ?1)"
                );
                let (exact, lower, upper) = match range {
                    Some((exact, lower, upper)) => {
                        sql.push_str(
                            " AND id IN (SELECT entry_id FROM mountfs_audit_paths
                               WHERE path = ?2 OR (path >= ?3 AND (?4 IS NULL OR path < ?4)))",
                        );
                        (Some(exact), Some(lower), upper)
                    }
                    None => {
                        sql.push_str(" AND ?2 IS NULL AND ?3 IS NULL AND ?4 IS NULL");
                        (None, None, None)
                    }
                };
                // What the reader may see (`Reader::may_see`): shared entries and its own.
                sql.push_str(" AND (?6 IS NULL OR private = 0 OR workspace = ?6)");
                sql.push_str(" AND (?7 IS NULL OR at < ?7 OR (at = ?7 AND id < ?8))");
                sql.push_str(" ORDER BY at DESC, id DESC LIMIT ?5");
                let mut stmt = conn.prepare_cached(&sql).map_err(map_error)?;
                let rows = stmt
                    .query_map(
                        params![
                            since, exact, lower, upper, limit, workspace, before_at, before_id
                        ],
                        entry_of_row,
                    )
                    .map_err(map_error)?;
                rows.collect::<rusqlite::Result<Vec<_>>>()
                    .map_err(map_error)
            })
            .await
    }

    pub(crate) async fn get(&self, id: i64) -> Result<Option<Entry>> {
        self.store()
            .await?
            .run(move |conn| {
                let sql = format!("SELECT {COLUMNS}, diff FROM mountfs_audit WHERE id = ?1");
                conn.prepare_cached(&sql)
                    .and_then(|mut stmt| stmt.query_row(params![id], entry_of_row).optional())
                    .map_err(map_error)
            })
            .await
    }

    pub(crate) async fn prune(&self, cutoff: SystemTime) -> Result<u64> {
        let cutoff = to_micros(cutoff);
        self.store()
            .await?
            .run(move |conn| {
                let tx = immediate(conn)?;
                tx.execute(
                    "DELETE FROM mountfs_audit_paths WHERE entry_id IN
                         (SELECT id FROM mountfs_audit WHERE at < ?1)",
                    params![cutoff],
                )
                .map_err(map_error)?;
                let pruned = tx
                    .execute("DELETE FROM mountfs_audit WHERE at < ?1", params![cutoff])
                    .map_err(map_error)?;
                tx.commit().map_err(map_error)?;
                Ok(pruned as u64)
            })
            .await
    }
}

/// A write transaction that holds the log's write lock from its start (`BEGIN IMMEDIATE`), so
/// two writers wait for each other rather than fail on upgrading a read lock.
fn immediate(conn: &mut Connection) -> Result<rusqlite::Transaction<'_>> {
    conn.transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(map_error)
}

/// Inserts one entry and its paths in `tx`; `key`: the spool's key of the change, `None` for
/// a direct append. Returns the entry's id, or `None` when an entry with this key is there.
fn insert(
    tx: &rusqlite::Transaction<'_>,
    change: &Change,
    key: Option<&str>,
) -> Result<Option<i64>> {
    let files = serde_json::to_string(&change.files)
        .map_err(|e| Error::Query(format!("audit entry: {e}")))?;
    let inserted = tx
        .prepare_cached(
            "INSERT INTO mountfs_audit (at, principal, workspace, client_name,
                 client_version, tool, request_id, files, more_files, lines_added,
                 lines_removed, summary, command, exit_code, diff_truncated, diff, spool_key,
                 private)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,
                 ?18)
             ON CONFLICT (spool_key) DO NOTHING",
        )
        .and_then(|mut insert| {
            insert.execute(params![
                to_micros(change.time),
                change.principal,
                change.workspace,
                change.client.name,
                change.client.version,
                change.tool,
                change.request_id,
                files,
                i64::try_from(change.more_files).unwrap_or(i64::MAX),
                i64::try_from(change.lines_added).unwrap_or(i64::MAX),
                i64::try_from(change.lines_removed).unwrap_or(i64::MAX),
                change.summary,
                change.command,
                change.exit_code,
                change.diff_truncated,
                change.diff,
                key,
                change.private,
            ])
        })
        .map_err(map_error)?;
    if inserted == 0 {
        return Ok(None);
    }
    let id = tx.last_insert_rowid();
    let mut path_row = tx
        .prepare_cached(
            "INSERT OR IGNORE INTO mountfs_audit_paths (path, entry_id) VALUES (?1, ?2)",
        )
        .map_err(map_error)?;
    for file in &change.files {
        path_row
            .execute(params![file.path, id])
            .map_err(map_error)?;
    }
    Ok(Some(id))
}

/// Brings the log's tables up to date, under the write lock (two servers opening one new file
/// migrate it one after the other).
fn migrate(conn: &mut Connection) -> Result<()> {
    let tx = immediate(conn)?;
    tx.execute_batch("CREATE TABLE IF NOT EXISTS mountfs_audit_schema (version INTEGER NOT NULL)")
        .map_err(map_error)?;
    let current: i64 = tx
        .query_row(
            "SELECT COALESCE(MAX(version), 0) FROM mountfs_audit_schema",
            [],
            |row| row.get(0),
        )
        .map_err(map_error)?;
    let pending = migrations::pending(MIGRATIONS, current)
        .map_err(|newer| Error::Schema(format!("the audit log {newer}")))?;
    for (sql, version) in pending {
        tx.execute_batch(sql).map_err(map_error)?;
        tx.execute(
            "INSERT INTO mountfs_audit_schema (version) VALUES (?1)",
            params![version],
        )
        .map_err(map_error)?;
    }
    tx.commit().map_err(map_error)
}

fn entry_of_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Entry> {
    super::entry_from_columns!(row.get)
}
