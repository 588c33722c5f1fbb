//! The audit log in PostgreSQL, shared by every instance: one ordered log (ids from one
//! `BIGSERIAL`), on the store's PostgreSQL engine ([`PostgresStore`]: its pool, timeouts and
//! error mapping).
//!
//! The log's tables are new tables with their own schema version (`mountfs_audit_schema`,
//! migrated under an advisory lock of their own), so adding or migrating them never changes the
//! store's `mountfs_schema`: an instance built before the log keeps working on the same
//! database. An append is one statement (the entry and its paths in one CTE), so it is atomic
//! and costs one round trip; spooled changes arrive in batches, one transaction each.

use crate::ground::migrations;
use std::time::SystemTime;

use tokio_postgres::Row;

use super::{AuditError, Change, Entry, Query};
use crate::storage::store::{Error, PostgresStore, Result, Store, to_micros};

/// Key of the advisory lock taken while migrating the log's tables ("mfsaudit" in ASCII).
const MIGRATION_LOCK: i64 = 0x6d66_7361_7564_6974;

/// Run-time parameters of the log's own sessions (never the store's). An append commits
/// without waiting for PostgreSQL to flush its write-ahead log to disk (the WAL writer flushes it
/// within `3 × wal_writer_delay`, 0.6 s by default): the flush was about nine tenths of what an
/// append cost an edit (BENCHMARKS.md). The entry is still written, ordered and visible to every
/// instance when the append returns, and a mountfs crash loses nothing; only a crash of
/// PostgreSQL itself (or of its machine) may lose the entries of its last moments, as docs/overlay-and-audit.md
/// says. `?options=-c%20synchronous_commit%3Don` in the URL restores durable commits.
const SESSION_SETTINGS: &str = "-c synchronous_commit=off";

/// `MIGRATIONS[i]` takes the log's tables from version `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[
    r#"
    CREATE TABLE mountfs_audit (
        id             BIGSERIAL PRIMARY KEY,
        at             BIGINT  NOT NULL,
        principal      TEXT    NOT NULL,
        workspace      TEXT    NOT NULL,
        client_name    TEXT    NOT NULL,
        client_version TEXT    NOT NULL,
        tool           TEXT    NOT NULL,
        request_id     TEXT    NOT NULL,
        files          TEXT    NOT NULL,
        more_files     BIGINT  NOT NULL,
        lines_added    BIGINT  NOT NULL,
        lines_removed  BIGINT  NOT NULL,
        summary        TEXT    NOT NULL,
        command        TEXT,
        exit_code      BIGINT,
        diff_truncated BOOLEAN NOT NULL,
        diff           TEXT    NOT NULL
    );
    CREATE INDEX mountfs_audit_at ON mountfs_audit (at);
    CREATE TABLE mountfs_audit_paths (
        path     TEXT COLLATE "C" NOT NULL,
        entry_id BIGINT NOT NULL REFERENCES mountfs_audit (id) ON DELETE CASCADE,
        PRIMARY KEY (path, entry_id)
    );
    CREATE INDEX mountfs_audit_paths_entry ON mountfs_audit_paths (entry_id);
"#,
    r#"
    ALTER TABLE mountfs_audit ADD COLUMN spool_key TEXT;
    CREATE UNIQUE INDEX mountfs_audit_spool_key ON mountfs_audit (spool_key);
"#,
    // Issue 41: entries private to their workspace; older ones kept to their own (see
    // sqlite.rs).
    r#"
    ALTER TABLE mountfs_audit ADD COLUMN private BOOLEAN NOT NULL DEFAULT FALSE;
    UPDATE mountfs_audit SET private = TRUE WHERE principal <> 'mountfs';
"#,
];

/// Every column but the diff, which comes last: a listing reads `''` in its place.
const COLUMNS: &str = "id, at, principal, workspace, client_name, client_version, tool, request_id, files, more_files, lines_added, lines_removed, summary, command, exit_code, diff_truncated, private";

/// The log in one PostgreSQL database.
#[derive(Debug)]
pub(crate) struct PostgresAudit {
    store: PostgresStore,
}

impl PostgresAudit {
    /// Connects to `url` and creates or migrates the log's tables.
    pub(crate) async fn connect(url: &str) -> Result<Self, AuditError> {
        let fail = |engine: String| move |error| AuditError::Store { engine, error };
        let store = PostgresStore::connect_with_settings(url, SESSION_SETTINGS)
            .await
            .map_err(fail("PostgreSQL".to_owned()))?;
        let log = Self { store };
        log.migrate().await.map_err(fail(log.describe()))?;
        Ok(log)
    }

    pub(crate) fn describe(&self) -> String {
        self.store.describe()
    }

    async fn migrate(&self) -> Result<()> {
        let map = |e| self.store.map_error(e);
        let mut client = self.store.client().await?;
        let tx = client.transaction().await.map_err(map)?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
            .await
            .map_err(map)?;
        tx.batch_execute(
            "CREATE TABLE IF NOT EXISTS mountfs_audit_schema (version INTEGER NOT NULL)",
        )
        .await
        .map_err(map)?;
        let row = tx
            .query_one(
                "SELECT COALESCE(MAX(version), 0) FROM mountfs_audit_schema",
                &[],
            )
            .await
            .map_err(map)?;
        let current: i32 = row.try_get(0).map_err(map)?;
        let pending = migrations::pending(MIGRATIONS, i64::from(current)).map_err(|newer| {
            Error::Schema(format!("the audit log at {} {newer}", self.describe()))
        })?;
        for (sql, version) in pending {
            tx.batch_execute(sql).await.map_err(map)?;
            let version = i32::try_from(version).unwrap_or(i32::MAX);
            tx.execute(
                "INSERT INTO mountfs_audit_schema (version) VALUES ($1)",
                &[&version],
            )
            .await
            .map_err(map)?;
        }
        tx.commit().await.map_err(map)
    }

    /// Appends one change now; returns its id.
    pub(crate) async fn append(&self, change: &Change) -> Result<i64> {
        let client = self.store.client().await?;
        self.insert(&client, change, None)
            .await?
            .ok_or_else(|| Error::Query("audit entry: not inserted".to_owned()))
    }

    /// Appends spooled changes in one transaction, in order; a change whose key the log already
    /// holds (shipped before a crash emptied its spool) is skipped.
    pub(crate) async fn append_spooled(&self, batch: Vec<(String, Change)>) -> Result<()> {
        let map = |e| self.store.map_error(e);
        let mut client = self.store.client().await?;
        let tx = client.transaction().await.map_err(map)?;
        for (key, change) in &batch {
            self.insert(&tx, change, Some(key)).await?;
        }
        tx.commit().await.map_err(map)
    }

    /// One statement: the entry and its paths (one CTE); `None` when an entry with `key` is
    /// there already.
    async fn insert(
        &self,
        client: &impl deadpool_postgres::GenericClient,
        change: &Change,
        key: Option<&str>,
    ) -> Result<Option<i64>> {
        let map = |e| self.store.map_error(e);
        let files = serde_json::to_string(&change.files)
            .map_err(|e| Error::Query(format!("audit entry: {e}")))?;
        let paths: Vec<&str> = change.files.iter().map(|f| f.path.as_str()).collect();
        let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        let statement = client
            .prepare_cached(
                "WITH entry AS (
                     INSERT INTO mountfs_audit (at, principal, workspace, client_name,
                         client_version, tool, request_id, files, more_files, lines_added,
                         lines_removed, summary, command, exit_code, diff_truncated, diff,
                         spool_key, private)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16,
                         $18, $19)
                     ON CONFLICT (spool_key) DO NOTHING
                     RETURNING id
                 ), paths AS (
                     INSERT INTO mountfs_audit_paths (path, entry_id)
                     SELECT DISTINCT path, entry.id FROM entry, unnest($17::TEXT[]) AS path
                 )
                 SELECT id FROM entry",
            )
            .await
            .map_err(map)?;
        let row = client
            .query_opt(
                &statement,
                &[
                    &to_micros(change.time),
                    &change.principal,
                    &change.workspace,
                    &change.client.name,
                    &change.client.version,
                    &change.tool,
                    &change.request_id,
                    &files,
                    &count(change.more_files),
                    &count(change.lines_added),
                    &count(change.lines_removed),
                    &change.summary,
                    &change.command,
                    &change.exit_code,
                    &change.diff_truncated,
                    &change.diff,
                    &paths,
                    &key,
                    &change.private,
                ],
            )
            .await
            .map_err(map)?;
        row.map(|row| row.try_get(0)).transpose().map_err(map)
    }

    /// The value of a run-time parameter in the log's sessions (`SHOW name`).
    pub(crate) async fn setting(&self, name: &str) -> Result<String> {
        let map = |e| self.store.map_error(e);
        let client = self.store.client().await?;
        let row = client
            .query_one("SELECT current_setting($1)", &[&name])
            .await
            .map_err(map)?;
        row.try_get(0).map_err(map)
    }

    /// Entries matching `query`, newest first; with `before` (a listed entry's time in
    /// microseconds and id), only those listed after it: the next page.
    pub(crate) async fn query(
        &self,
        query: &Query,
        before: Option<(i64, i64)>,
    ) -> Result<Vec<Entry>> {
        let map = |e| self.store.map_error(e);
        let since = query.since.map(to_micros);
        let (before_at, before_id) = before.unzip();
        let (exact, lower, upper) = match query.path_range() {
            Some((exact, lower, upper)) => (Some(exact), Some(lower), upper),
            None => (None, None, None),
        };
        let limit = query.sql_limit();
        let workspace = query.reader.workspace();
        let client = self.store.client().await?;
        let sql = format!(
            "SELECT {COLUMNS}, ''::TEXT FROM mountfs_audit
             WHERE ($1::BIGINT IS NULL OR at >= $1)
               AND ($2::TEXT IS NULL OR id IN (
                   SELECT entry_id FROM mountfs_audit_paths
                   WHERE path = $2 OR (path >= $3::TEXT AND ($4::TEXT IS NULL OR path < $4))))
               AND ($6::TEXT IS NULL OR NOT private OR workspace = $6)
               AND ($7::BIGINT IS NULL OR at < $7 OR (at = $7 AND id < $8::BIGINT))
             ORDER BY at DESC, id DESC LIMIT $5"
        );
        let statement = client.prepare_cached(&sql).await.map_err(map)?;
        let rows = client
            .query(
                &statement,
                &[
                    &since, &exact, &lower, &upper, &limit, &workspace, &before_at, &before_id,
                ],
            )
            .await
            .map_err(map)?;
        rows.iter()
            .map(|row| entry_of_row(row).map_err(map))
            .collect()
    }

    pub(crate) async fn get(&self, id: i64) -> Result<Option<Entry>> {
        let map = |e| self.store.map_error(e);
        let client = self.store.client().await?;
        let sql = format!("SELECT {COLUMNS}, diff FROM mountfs_audit WHERE id = $1");
        let statement = client.prepare_cached(&sql).await.map_err(map)?;
        let row = client.query_opt(&statement, &[&id]).await.map_err(map)?;
        row.as_ref().map(entry_of_row).transpose().map_err(map)
    }

    pub(crate) async fn prune(&self, cutoff: SystemTime) -> Result<u64> {
        let map = |e| self.store.map_error(e);
        let client = self.store.client().await?;
        // The paths go with their entries (ON DELETE CASCADE).
        client
            .execute(
                "DELETE FROM mountfs_audit WHERE at < $1",
                &[&to_micros(cutoff)],
            )
            .await
            .map_err(map)
    }
}

fn entry_of_row(row: &Row) -> std::result::Result<Entry, tokio_postgres::Error> {
    super::entry_from_columns!(row.try_get)
}
