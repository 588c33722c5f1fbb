//! `PostgresStore`: the engine for many server instances sharing one namespace.
//!
//! tokio-postgres with a deadpool-postgres pool: deadpool is async-native, small, checks a
//! pooled connection is still open before handing it out (`RecyclingMethod::Fast`) and caches
//! prepared statements per connection. Its timeouts make an unreachable server fail a tool call
//! in seconds (as `mount unavailable: …`) instead of hanging it. Connections are plain TCP
//! (`NoTls`): put a TLS-terminating proxy in front for remote databases.
//!
//! Every conditional write is one statement checked by the database: `IfVersion` is
//! `UPDATE … WHERE version = $expected` (a concurrent committed update makes it match no row),
//! `CreateOnly` is `INSERT … ON CONFLICT DO NOTHING`. Versions come from one sequence, so they
//! are unique across every server and never reused. Keys are `TEXT COLLATE "C"` (byte order), so
//! a prefix is a range of the primary-key index. The schema is created or migrated on connect
//! under an advisory lock, so servers starting together do not race.

mod index;
pub mod listen;
mod migrations;
mod rows;
mod upload;

use index::{PassState, TRIGRAM_COLUMNS, content_keys, index_behind, indexable, trigram_terms};
use rows::{
    CONTENT, ContentSource, META_COLUMNS, WriteFields, WriteKind, column, item_of_row, meta_of_row,
    write_params, write_statement, written_of,
};
use upload::{PostgresUpload, STAGED_CONTENT};

pub use index::{ANALYZE_MIN_CHANGES, MAX_BEHIND, MAX_INDEXED_BYTES, text_keys, text_keys_of};
pub use rows::LARGE_CONTENT_BYTES;

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use deadpool_postgres::{
    Manager, ManagerConfig, Pool, PoolError, RecyclingMethod, Runtime, WeakPool,
};
use tokio::sync::Notify;
use tokio_postgres::config::Host;
use tokio_postgres::types::ToSql;
use tokio_postgres::{NoTls, Row};

use super::plan::{Terms, byte_joins, squeeze_bytes};
use super::{
    BatchOp, CandidateQuery, Encoding, Error, Item, ItemMeta, ListQuery, Namespace, PutCondition,
    Result, Store, StoreUpload, Written, to_micros,
};
use crate::ground::text::encoding::decode_lossy;

/// Connections per server process.
const POOL_SIZE: usize = 16;
/// How long to wait for a new connection before telling the agent the store is unavailable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a call waits for a free pooled connection.
const WAIT_TIMEOUT: Duration = Duration::from_secs(30);
/// Key of the advisory lock held by the one server building the search index ("mountfsi").
/// Whoever holds it (a session lock) pauses every server's background pass; a test does.
pub const INDEX_LOCK: i64 = 0x6d6f_756e_7466_7369;

/// The PostgreSQL store (see the module doc).
#[derive(Debug, Clone)]
pub struct PostgresStore {
    pool: Pool,
    /// `host:port/db`, for messages (no user, no password).
    label: String,
    /// The search index is built and valid (it never goes back once true).
    index_ready: Arc<AtomicBool>,
    /// What the writes and the background pass share (see [`index_behind`]).
    pass: Arc<PassState>,
}

/// An error with what caused it (`error connecting to server: Connection refused (os error
/// 111)`): tokio-postgres keeps the cause out of its own message.
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        let said = inner.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        cause = inner.source();
    }
    text
}

/// `host:port/db` of a connection config, never its password nor a socket's host path.
fn label_of(config: &tokio_postgres::Config) -> String {
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(name)) => name.clone(),
        #[cfg(unix)]
        Some(Host::Unix(_)) => "unix socket".to_owned(),
        None => "localhost".to_owned(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let db = config.get_dbname().unwrap_or("");
    format!("{host}:{port}/{db}")
}

impl PostgresStore {
    /// Connects to `url` (`postgres://user@host:port/db`), creating or migrating the schema.
    /// Fails if the server cannot be reached now.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with_settings(url, "").await
    }

    /// [`Self::connect`], with `settings` (run-time parameters as `-c name=value`, space
    /// separated) set on every session of the pool at connection start-up. The URL's own
    /// `options` come after them, so a setting the operator gives in the URL wins.
    pub async fn connect_with_settings(url: &str, settings: &str) -> Result<Self> {
        let mut config = tokio_postgres::Config::from_str(url)
            .map_err(|e| Error::Unavailable(format!("PostgreSQL URL is not valid: {e}")))?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        if !settings.is_empty() {
            let options = match config.get_options() {
                Some(given) if !given.is_empty() => format!("{settings} {given}"),
                _ => settings.to_owned(),
            };
            config.options(&options);
        }
        let label = label_of(&config);
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .runtime(Runtime::Tokio1)
            .create_timeout(Some(CONNECT_TIMEOUT))
            .wait_timeout(Some(WAIT_TIMEOUT))
            .recycle_timeout(Some(CONNECT_TIMEOUT))
            .build()
            .map_err(|e| Error::Unavailable(format!("PostgreSQL pool: {e}")))?;
        let store = Self {
            pool,
            label,
            index_ready: Arc::new(AtomicBool::new(false)),
            pass: Arc::new(PassState::default()),
        };
        store.migrate().await?;
        // Also when the index is ready: items written by an older server since the last start
        // are behind (read by every search) until this pass computes their trigrams.
        let was_ready = store.index_ready().await?;
        let builder = store.clone();
        tokio::spawn(async move { builder.build_index(was_ready).await });
        tokio::spawn(index_behind(
            store.pool.weak(),
            store.label.clone(),
            store.index_ready.clone(),
            store.pass.clone(),
        ));
        Ok(store)
    }

    pub(crate) async fn client(&self) -> Result<deadpool_postgres::Client> {
        self.pool.get().await.map_err(|e| match e {
            PoolError::Backend(e) => self.map_error(e),
            PoolError::Timeout(_) => Error::Unavailable(format!(
                "PostgreSQL at {}: timed out waiting for a connection",
                self.label
            )),
            other => Error::Unavailable(format!("PostgreSQL at {}: {other}", self.label)),
        })
    }

    /// Connection-level failures (refused, closed, SQLSTATE class 08, shutdown, too many
    /// connections) are `Unavailable`; anything else is a failed statement.
    pub(crate) fn map_error(&self, error: tokio_postgres::Error) -> Error {
        match error.as_db_error() {
            Some(db) => {
                let code = db.code().code();
                let text = format!("PostgreSQL at {}: {}", self.label, db.message());
                if code.starts_with("08") || code.starts_with("57P") || code.starts_with("53") {
                    Error::Unavailable(text)
                } else {
                    Error::Query(text)
                }
            }
            None => Error::Unavailable(format!(
                "PostgreSQL at {}: {}",
                self.label,
                with_causes(&error)
            )),
        }
    }

    /// [`Self::map_error`], except that a key taken meanwhile (a unique violation) is
    /// [`Error::AlreadyExists`].
    fn map_conflict(&self, error: tokio_postgres::Error) -> Error {
        if error.code() == Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION) {
            return Error::AlreadyExists;
        }
        self.map_error(error)
    }

    async fn query(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached(sql)
            .await
            .map_err(|e| self.map_error(e))?;
        client
            .query(&statement, params)
            .await
            .map_err(|e| self.map_error(e))
    }

    async fn range_query(
        &self,
        namespace: &Namespace,
        query: &ListQuery,
        columns: &str,
    ) -> Result<Vec<Row>> {
        let (lower, inclusive, upper) = query.bounds();
        let op = if inclusive { ">=" } else { ">" };
        let limit = query.sql_limit();
        match upper {
            Some(upper) => {
                let sql = format!(
                    "SELECT {columns} FROM mountfs_items
                     WHERE namespace = $1 AND key {op} $2 AND key < $3 ORDER BY key LIMIT $4"
                );
                self.query(&sql, &[&namespace.as_str(), &lower, &upper, &limit])
                    .await
            }
            None => {
                let sql = format!(
                    "SELECT {columns} FROM mountfs_items
                     WHERE namespace = $1 AND key {op} $2 ORDER BY key LIMIT $3"
                );
                self.query(&sql, &[&namespace.as_str(), &lower, &limit])
                    .await
            }
        }
    }
}

/// The most content one item holds: a PostgreSQL value is at most 1 GB (MaxAllocSize,
/// 2^30 - 1 bytes, header included); the server fails a bigger one with "out of memory".
const LARGEST_VALUE: u64 = (1 << 30) - 1 - 4;

#[async_trait]
impl Store for PostgresStore {
    fn largest_value(&self) -> Option<(u64, &'static str)> {
        Some((
            LARGEST_VALUE,
            "PostgreSQL's bytea limit (1 GB in one value)",
        ))
    }

    fn describe(&self) -> String {
        format!("PostgreSQL at {}", self.label)
    }

    async fn get(&self, namespace: &Namespace, key: &str) -> Result<Option<Item>> {
        let sql = format!(
            "SELECT {META_COLUMNS}, {CONTENT} FROM mountfs_items WHERE namespace = $1 AND key = $2"
        );
        let rows = self.query(&sql, &[&namespace.as_str(), &key]).await?;
        rows.first().map(item_of_row).transpose()
    }

    async fn head(&self, namespace: &Namespace, key: &str) -> Result<Option<ItemMeta>> {
        let sql =
            format!("SELECT {META_COLUMNS} FROM mountfs_items WHERE namespace = $1 AND key = $2");
        let rows = self.query(&sql, &[&namespace.as_str(), &key]).await?;
        rows.first().map(meta_of_row).transpose()
    }

    async fn put(
        &self,
        namespace: &Namespace,
        key: &str,
        content: &[u8],
        condition: PutCondition,
    ) -> Result<Written> {
        let encoding = Encoding::of(content);
        let fields = WriteFields::new(
            (namespace.as_str(), key),
            encoding,
            content.len() as u64,
            Some(content),
            self.defer_indexing(0),
            to_micros(SystemTime::now()),
        );
        let kind = WriteKind::of(&condition);
        let mut params = write_params(&fields, &condition);
        params.push(&content);
        let rows = self
            .query(write_statement(kind, ContentSource::Parameter), &params)
            .await?;
        let written = written_of(kind, &rows)?;
        self.pass.changed(1);
        if !fields.stamped {
            self.pass.deferred(1);
        }
        Ok(written)
    }

    async fn delete(
        &self,
        namespace: &Namespace,
        key: &str,
        if_version: Option<i64>,
    ) -> Result<bool> {
        let ns = namespace.as_str();
        let rows = self
            .query(
                "DELETE FROM mountfs_items
                 WHERE namespace = $1 AND key = $2 AND ($3::BIGINT IS NULL OR version = $3)
                 RETURNING 1",
                &[&ns, &key, &if_version],
            )
            .await?;
        if !rows.is_empty() {
            self.pass.changed(1);
            return Ok(true);
        }
        if if_version.is_none() {
            return Ok(false);
        }
        // Nothing deleted under a condition: only to tell "absent" from "other version".
        match self.head(namespace, key).await? {
            Some(_) => Err(Error::VersionMismatch),
            None => Ok(false),
        }
    }

    async fn apply_batch(
        &self,
        namespace: &Namespace,
        ops: Vec<BatchOp>,
    ) -> std::result::Result<Vec<Option<i64>>, (usize, Error)> {
        let ns = namespace.as_str();
        let now = to_micros(SystemTime::now());
        let mut client = self.client().await.map_err(|e| (0, e))?;
        let tx = client
            .transaction()
            .await
            .map_err(|e| (0, self.map_error(e)))?;
        let mut versions = Vec::with_capacity(ops.len());
        let mut deferred = 0;
        for (index, op) in ops.iter().enumerate() {
            let rows = match op {
                BatchOp::Put {
                    key,
                    content,
                    condition,
                } => {
                    let fields = WriteFields::new(
                        (ns, key),
                        Encoding::of(content),
                        content.len() as u64,
                        Some(content),
                        self.defer_indexing(deferred),
                        now,
                    );
                    if !fields.stamped {
                        deferred += 1;
                    }
                    let kind = WriteKind::of(condition);
                    let mut params = write_params(&fields, condition);
                    params.push(content);
                    tx.query(write_statement(kind, ContentSource::Parameter), &params)
                        .await
                        .map_err(|e| self.map_conflict(e))
                        .and_then(|rows| Ok(Some(written_of(kind, &rows)?.version)))
                }
                BatchOp::Delete { key, version } => tx
                    .query(
                        "DELETE FROM mountfs_items
                         WHERE namespace = $1 AND key = $2 AND version = $3 RETURNING 1",
                        &[ns_ref(&ns), key, version],
                    )
                    .await
                    .map_err(|e| self.map_error(e))
                    .and_then(|rows| {
                        if rows.is_empty() {
                            Err(Error::VersionMismatch)
                        } else {
                            Ok(None)
                        }
                    }),
            };
            match rows {
                // Dropping the transaction rolls it back.
                Err(error) => return Err((index, error)),
                Ok(version) => versions.push(version),
            }
        }
        tx.commit()
            .await
            .map_err(|e| (ops.len().saturating_sub(1), self.map_error(e)))?;
        self.pass
            .changed(i64::try_from(ops.len()).unwrap_or(i64::MAX));
        self.pass.deferred(deferred);
        Ok(versions)
    }

    async fn rename(
        &self,
        namespace: &Namespace,
        from: &str,
        to: &str,
        if_version: Option<i64>,
        replacing: Option<i64>,
    ) -> Result<Option<i64>> {
        let ns = namespace.as_str();
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| self.map_error(e))?;
        if let Some(expected) = replacing {
            let removed = tx
                .execute(
                    "DELETE FROM mountfs_items WHERE namespace = $1 AND key = $2 AND version = $3",
                    &[&ns, &to, &expected],
                )
                .await
                .map_err(|e| self.map_error(e))?;
            if removed == 0 {
                return Err(Error::VersionMismatch);
            }
        }
        let moved = tx
            .query(
                "UPDATE mountfs_items SET key = $3
                 WHERE namespace = $1 AND key = $2 AND ($4::BIGINT IS NULL OR version = $4)
                 RETURNING version",
                &[&ns, &from, &to, &if_version],
            )
            .await
            .map_err(|e| self.map_conflict(e))?;
        let Some(row) = moved.first() else {
            let exists = tx
                .query(
                    "SELECT 1 FROM mountfs_items WHERE namespace = $1 AND key = $2",
                    &[&ns, &from],
                )
                .await
                .map_err(|e| self.map_error(e))?;
            return if exists.is_empty() {
                Ok(None)
            } else {
                Err(Error::VersionMismatch)
            };
        };
        let version: i64 = column(row, 0)?;
        tx.commit().await.map_err(|e| self.map_error(e))?;
        self.pass.changed(1);
        Ok(Some(version))
    }

    async fn rename_prefix(
        &self,
        namespace: &Namespace,
        from_prefix: &str,
        to_prefix: &str,
        to_key: &str,
    ) -> Result<u64> {
        let ns = namespace.as_str();
        let bound = |prefix: &str| {
            super::prefix_successor(prefix)
                .ok_or_else(|| Error::Query(format!("cannot bound the key prefix '{prefix}'")))
        };
        let (from_upper, to_upper) = (bound(from_prefix)?, bound(to_prefix)?);
        // substr counts characters from 1: the rest of a key after the old prefix.
        let rest_from = i32::try_from(from_prefix.chars().count() + 1)
            .map_err(|_| Error::Query("key prefix too long".to_owned()))?;
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| self.map_error(e))?;
        let taken = tx
            .query(
                "SELECT 1 FROM mountfs_items
                 WHERE namespace = $1 AND (key = $2 OR (key >= $3 AND key < $4)) LIMIT 1",
                &[&ns, &to_key, &to_prefix, &to_upper],
            )
            .await
            .map_err(|e| self.map_error(e))?;
        if !taken.is_empty() {
            return Err(Error::AlreadyExists);
        }
        let moved = tx
            .execute(
                "UPDATE mountfs_items SET key = $4 || substr(key, $5)
                 WHERE namespace = $1 AND key >= $2 AND key < $3",
                &[&ns, &from_prefix, &from_upper, &to_prefix, &rest_from],
            )
            .await
            .map_err(|e| self.map_conflict(e))?;
        tx.commit().await.map_err(|e| self.map_error(e))?;
        self.pass.changed(i64::try_from(moved).unwrap_or(i64::MAX));
        Ok(moved)
    }

    async fn delete_prefix(&self, namespace: &Namespace, prefix: &str) -> Result<u64> {
        let (lower, _, upper) = ListQuery::first(prefix, 1).bounds();
        let client = self.client().await?;
        let ns = namespace.as_str();
        let deleted =
            match upper {
                Some(upper) => client
                    .execute(
                        "DELETE FROM mountfs_items WHERE namespace = $1 AND key >= $2 AND key < $3",
                        &[&ns, &lower, &upper],
                    )
                    .await,
                None => {
                    client
                        .execute(
                            "DELETE FROM mountfs_items WHERE namespace = $1 AND key >= $2",
                            &[&ns, &lower],
                        )
                        .await
                }
            };
        let deleted = deleted.map_err(|e| self.map_error(e))?;
        self.pass
            .changed(i64::try_from(deleted).unwrap_or(i64::MAX));
        Ok(deleted)
    }

    async fn list(&self, namespace: &Namespace, query: &ListQuery) -> Result<Vec<ItemMeta>> {
        let rows = self.range_query(namespace, query, META_COLUMNS).await?;
        rows.iter().map(meta_of_row).collect()
    }

    async fn scan(&self, namespace: &Namespace, query: &ListQuery) -> Result<Vec<Item>> {
        let columns = format!("{META_COLUMNS}, {CONTENT}");
        let rows = self.range_query(namespace, query, &columns).await?;
        rows.iter().map(item_of_row).collect()
    }

    async fn candidates(
        &self,
        namespace: &Namespace,
        query: &CandidateQuery,
    ) -> Result<Option<Vec<ItemMeta>>> {
        if !self.index_ready().await? {
            return Ok(None);
        }
        let (lower, inclusive, upper) = query.list.bounds();
        let op = if inclusive { ">=" } else { ">" };
        let ns = namespace.as_str().to_owned();
        let limit = query.list.sql_limit();
        let larger_than =
            i64::try_from(query.larger_than.min(MAX_INDEXED_BYTES)).unwrap_or(i64::MAX);
        let mut params: Vec<Box<dyn ToSql + Sync + Send>> = vec![
            Box::new(ns),
            Box::new(lower),
            Box::new(limit),
            Box::new(larger_than),
        ];
        let range = match upper {
            Some(upper) => {
                params.push(Box::new(upper));
                format!("namespace = $1 AND key {op} $2 AND key < $5")
            }
            None => format!("namespace = $1 AND key {op} $2"),
        };
        let terms = trigram_terms(&query.plan.terms, &mut params);
        // Four arms, each answered by an index without reading any content: the trigram
        // index (containment is exact: no recheck), the items whose trigrams are behind, the
        // items that are not UTF-8, the items too large to be indexed or for their lines to
        // be searched.
        let sql = format!(
            "SELECT {META_COLUMNS} FROM mountfs_items
                 WHERE {range} AND text_keys_version = version AND {terms}
             UNION SELECT {META_COLUMNS} FROM mountfs_items
                 WHERE {range} AND (text_keys_version IS DISTINCT FROM version) IS TRUE
             UNION SELECT {META_COLUMNS} FROM mountfs_items
                 WHERE {range} AND encoding <> 'utf-8'
             UNION SELECT {META_COLUMNS} FROM mountfs_items WHERE {range} AND size > $4
             ORDER BY key LIMIT $3"
        );
        let refs: Vec<&(dyn ToSql + Sync)> = params
            .iter()
            .map(|p| p.as_ref() as &(dyn ToSql + Sync))
            .collect();
        let client = self.client().await?;
        let rows = client
            .query(&sql, &refs)
            .await
            .map_err(|e| self.map_error(e))?;
        rows.iter()
            .map(meta_of_row)
            .collect::<Result<Vec<_>>>()
            .map(Some)
    }

    async fn get_many(&self, namespace: &Namespace, keys: &[String]) -> Result<Vec<Item>> {
        let sql = format!(
            "SELECT {META_COLUMNS}, {CONTENT} FROM mountfs_items
             WHERE namespace = $1 AND key = ANY($2) ORDER BY key"
        );
        let rows = self.query(&sql, &[&namespace.as_str(), &keys]).await?;
        rows.iter().map(item_of_row).collect()
    }

    async fn read_range(
        &self,
        namespace: &Namespace,
        key: &str,
        offset: u64,
        len: usize,
        version: i64,
    ) -> Result<Option<Vec<u8>>> {
        // SQL counts from 1; bytea values stop at 1 GB, so both fit an INTEGER once clamped.
        let from = i32::try_from(offset.saturating_add(1)).unwrap_or(i32::MAX);
        let count = i32::try_from(len).unwrap_or(i32::MAX);
        let rows = self
            .query(
                // A large content's range is read from only the TOAST chunks it covers (see
                // schema version 3 in MIGRATIONS); one written before is decompressed up to
                // its end.
                "SELECT version, CASE WHEN large_version = version
                     THEN substring(large_content FROM $3 FOR $4)
                     ELSE substring(content FROM $3 FOR $4) END
                 FROM mountfs_items WHERE namespace = $1 AND key = $2",
                &[&namespace.as_str(), &key, &from, &count],
            )
            .await?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let found: i64 = column(row, 0)?;
        if found != version {
            return Err(Error::VersionMismatch);
        }
        Ok(Some(column(row, 1)?))
    }

    async fn begin_upload(&self, namespace: &Namespace, key: &str) -> Result<Box<dyn StoreUpload>> {
        let client = self.client().await?;
        // One transaction from the first chunk to the last: the staged rows live in a
        // temporary table dropped at its end, and a connection lost (the process killed) rolls
        // it back on the server. No row of mountfs_items is touched before `finish`.
        client
            .batch_execute(
                "BEGIN;
                 CREATE TEMP TABLE mountfs_upload (seq BIGINT PRIMARY KEY, chunk BYTEA NOT NULL)
                     ON COMMIT DROP;",
            )
            .await
            .map_err(|e| self.map_error(e))?;
        Ok(Box::new(PostgresUpload {
            store: self.clone(),
            client: Some(client),
            namespace: namespace.as_str().to_owned(),
            key: key.to_owned(),
            chunks: 0,
            size: 0,
            indexed: Some(Vec::new()),
        }))
    }
}

/// A namespace as a statement parameter.
fn ns_ref<'a>(ns: &'a &str) -> &'a (dyn ToSql + Sync) {
    ns
}
