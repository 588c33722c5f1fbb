//! `SqliteStore`: the embedded engine. One database file in WAL mode, created on first use with
//! its parent directory; schema versioned with `PRAGMA user_version` and migrated on open.
//!
//! rusqlite is blocking, so every call runs on tokio's blocking pool (`spawn_blocking`) with a
//! connection taken from a small pool of open connections. Why a pool and not one
//! `Mutex<Connection>`: in WAL mode readers never wait for the writer, so a long `grep` scan and
//! an edit can proceed together; writers are serialised by SQLite itself (`BEGIN IMMEDIATE` +
//! `busy_timeout`), which also covers other processes opening the same file.
//!
//! Versions come from one counter row bumped inside each write transaction, so they are unique
//! in the file and never reused. Keys compare with SQLite's BINARY collation (byte order), so a
//! prefix is the key range `[prefix, successor(prefix))` of the primary-key index.

mod index;
mod migrations;
mod range;
mod rows;
mod upload;

use index::{
    INDEX_COMPLETE, LARGE_ITEM_BYTES, SELECTIVE_MATCHES, build_index, fold_own_item, fold_pending,
    index_select,
};
pub use index::{join_word, join_words};
use migrations::migrate;
#[cfg(test)]
use range::page_fetches;
use range::{SEQUENTIAL_READ_BYTES, SequentialReader, range_len, read_blob};
use rows::{META_COLUMNS, find_version, item_of_row, meta_of_row, put_in, put_sized_in, range_sql};
use upload::{LARGEST_VALUE, SqliteUpload};

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use rusqlite::{Connection, ErrorCode, OpenFlags, OptionalExtension, TransactionBehavior, params};
use tokio::sync::{Notify, Semaphore};

use super::plan::{Terms, joins, squeeze, trigrams};
use super::{
    BatchOp, CandidateQuery, Encoding, Error, Item, ItemMeta, ListQuery, Namespace, PutCondition,
    Result, Store, StoreUpload, Written, to_micros,
};
use crate::ground::text::encoding::decode_lossy;

/// Connections open at most at once (the machine target has 2 cores; more would only queue on
/// SQLite's single writer lock).
const MAX_CONNECTIONS: usize = 4;
/// How long a writer waits for another writer (this process or another) before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// How each connection of a pool is set up when it opens (once, not per use).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnectionSettings {
    /// `PRAGMA synchronous`: `FULL` or `NORMAL`.
    pub(crate) synchronous: &'static str,
    /// How long a writer waits for another writer before giving up.
    pub(crate) busy_timeout: Duration,
    /// `PRAGMA wal_autocheckpoint`: `None` keeps SQLite's (a commit that fills the WAL past
    /// 1,000 pages copies them back itself); `Some(pages)` sets another threshold.
    pub(crate) wal_autocheckpoint: Option<u32>,
}

/// A store's connections: every committed write survives a power loss (long-term memories).
const STORE_SETTINGS: ConnectionSettings = ConnectionSettings {
    synchronous: "FULL",
    busy_timeout: BUSY_TIMEOUT,
    wal_autocheckpoint: None,
};

/// The SQLite store (see the module doc).
#[derive(Debug, Clone)]
pub struct SqliteStore {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    file: PathBuf,
    settings: ConnectionSettings,
    /// Open connections not in use.
    idle: Mutex<Vec<Connection>>,
    /// Bounds the connections in use at once.
    permits: Arc<Semaphore>,
    /// The search index holds every item (it never goes back once true).
    index_ready: AtomicBool,
    /// Wakes the folder after a write (see [`fold_pending`]).
    fold_wake: Arc<Notify>,
    /// The open sequential readers, the most recently used last (see [`SequentialReader`]).
    readers: Mutex<Vec<SequentialReader>>,
    /// Pages the range reads fetched (tests: a copy must fetch each page about once).
    #[cfg(test)]
    pages_fetched: Arc<std::sync::atomic::AtomicU64>,
    /// This process's writes waiting for the write lock or holding it: the folder and the
    /// build start no batch while there are any (see [`give_way`]).
    writers: Arc<AtomicUsize>,
}

/// A write of this process under way (counted in [`Shared::writers`] until dropped).
#[derive(Debug)]
struct WriterTurn(Arc<AtomicUsize>);

impl WriterTurn {
    fn new(writers: &Arc<AtomicUsize>) -> Self {
        writers.fetch_add(1, Ordering::AcqRel);
        Self(writers.clone())
    }
}

impl Drop for WriterTurn {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Shared {
    fn take(&self) -> Result<Connection> {
        let idle = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        match idle {
            Some(conn) => Ok(conn),
            None => connect(&self.file, self.settings),
        }
    }

    /// Runs `work` with an idle connection (or a new one), then puts it back.
    fn with_connection<T>(&self, work: impl FnOnce(&mut Connection) -> Result<T>) -> Result<T> {
        let mut conn = self.take()?;
        let result = work(&mut conn);
        self.give_back(conn);
        result
    }

    fn give_back(&self, conn: Connection) {
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(conn);
    }
}

fn connect(file: &Path, settings: ConnectionSettings) -> Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(file, flags).map_err(map_error)?;
    conn.busy_timeout(settings.busy_timeout)
        .map_err(map_error)?;
    // WAL: readers do not block the writer nor the writer the readers. The store's
    // synchronous=FULL keeps every committed write across a power loss (long-term memories).
    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
        .map_err(map_error)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(Error::Unavailable(format!(
            "SQLite database cannot use WAL journaling (got '{mode}')"
        )));
    }
    conn.pragma_update(None, "synchronous", settings.synchronous)
        .map_err(map_error)?;
    if let Some(pages) = settings.wal_autocheckpoint {
        conn.pragma_update(None, "wal_autocheckpoint", pages)
            .map_err(map_error)?;
    }
    Ok(conn)
}

/// Folds rusqlite's errors into the store's: anything about reaching or using the file is
/// `Unavailable`; the message is SQLite's own, which never names the file.
pub(crate) fn map_error(error: rusqlite::Error) -> Error {
    match error.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => Error::Unavailable(
            "SQLite database is locked by another writer for too long".to_owned(),
        ),
        Some(
            ErrorCode::CannotOpen
            | ErrorCode::SystemIoFailure
            | ErrorCode::DiskFull
            | ErrorCode::ReadOnly
            | ErrorCode::NotADatabase
            | ErrorCode::DatabaseCorrupt
            | ErrorCode::PermissionDenied
            | ErrorCode::OutOfMemory,
        ) => Error::Unavailable(format!("SQLite database: {error}")),
        _ => Error::Query(format!("SQLite: {error}")),
    }
}

impl SqliteStore {
    /// Opens (creating it and its parent directory if needed) the database at `file`, switches
    /// it to WAL and brings its schema up to date.
    pub async fn open(file: impl Into<PathBuf>) -> Result<Self> {
        Self::open_with(file, STORE_SETTINGS).await
    }

    /// [`Self::open`] with connections set up as `settings` say.
    pub(crate) async fn open_with(
        file: impl Into<PathBuf>,
        settings: ConnectionSettings,
    ) -> Result<Self> {
        let file = file.into();
        let opened = tokio::task::spawn_blocking(move || -> Result<Shared> {
            if let Some(parent) = file.parent()
                && !parent.as_os_str().is_empty()
            {
                std::fs::create_dir_all(parent).map_err(|e| {
                    Error::Unavailable(format!(
                        "cannot create the SQLite database's directory: {}",
                        e.kind()
                    ))
                })?;
            }
            let mut conn = connect(&file, settings)?;
            migrate(&mut conn)?;
            Ok(Shared {
                file,
                settings,
                idle: Mutex::new(vec![conn]),
                permits: Arc::new(Semaphore::new(MAX_CONNECTIONS)),
                index_ready: AtomicBool::new(false),
                fold_wake: Arc::new(Notify::new()),
                readers: Mutex::new(Vec::new()),
                #[cfg(test)]
                pages_fetched: Arc::default(),
                writers: Arc::new(AtomicUsize::new(0)),
            })
        })
        .await
        .map_err(|e| Error::Unavailable(format!("SQLite worker failed: {e}")))??;
        let store = Self {
            shared: Arc::new(opened),
        };
        if !store.index_ready().await? {
            tokio::spawn(build_index(Arc::downgrade(&store.shared)));
        }
        tokio::spawn(fold_pending(
            Arc::downgrade(&store.shared),
            store.shared.fold_wake.clone(),
        ));
        // Items left pending by an earlier process are folded now, not at the first poll.
        store.shared.fold_wake.notify_one();
        Ok(store)
    }

    /// Whether the search index holds every item (else grep scans, while the background
    /// build started by [`Self::open`] catches up).
    pub async fn index_ready(&self) -> Result<bool> {
        if self.shared.index_ready.load(Ordering::Acquire) {
            return Ok(true);
        }
        let built = self
            .run(|conn| {
                conn.query_row("SELECT built_upto FROM mountfs_text_index", [], |row| {
                    row.get::<_, i64>(0)
                })
                .map_err(map_error)
            })
            .await?;
        let ready = built == INDEX_COMPLETE;
        if ready {
            self.shared.index_ready.store(true, Ordering::Release);
        }
        Ok(ready)
    }

    /// [`Self::run`], but on this very thread when the runtime has several (the runtime moves
    /// its other tasks to another worker meanwhile, `block_in_place`): for short work whose
    /// caller waits for it, this saves the two thread hand-offs of the blocking pool (tens of
    /// microseconds on a small machine). On a single-threaded runtime it is [`Self::run`].
    pub(crate) async fn run_in_place<T, F>(&self, work: F) -> Result<T>
    where
        F: FnOnce(&mut Connection) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        let flavor = tokio::runtime::Handle::current().runtime_flavor();
        if flavor != tokio::runtime::RuntimeFlavor::MultiThread {
            return self.run(work).await;
        }
        let _permit = self.permit().await?;
        tokio::task::block_in_place(|| self.shared.with_connection(work))
    }

    /// Runs `work` with a pooled connection on the blocking pool.
    pub(crate) async fn run<T, F>(&self, work: F) -> Result<T>
    where
        F: FnOnce(&mut Connection) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        let permit = self.permit().await?;
        let shared = self.shared.clone();
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            shared.with_connection(work)
        })
        .await
        .map_err(|e| Error::Unavailable(format!("SQLite worker failed: {e}")))?
    }

    /// Counts a write of this process until the returned turn is dropped: taken before the
    /// write waits for a connection or for the write lock (see [`give_way`]).
    fn writer_turn(&self) -> WriterTurn {
        WriterTurn::new(&self.shared.writers)
    }

    /// A turn to use a connection (at most [`MAX_CONNECTIONS`] at once).
    async fn permit(&self) -> Result<tokio::sync::OwnedSemaphorePermit> {
        self.shared
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| Error::Unavailable("SQLite store is closed".to_owned()))
    }
}

#[async_trait]
impl Store for SqliteStore {
    fn largest_value(&self) -> Option<(u64, &'static str)> {
        Some((
            LARGEST_VALUE,
            "SQLite's SQLITE_LIMIT_LENGTH (1,000,000,000 bytes in a value or a row)",
        ))
    }

    fn describe(&self) -> String {
        "SQLite".to_owned()
    }

    async fn get(&self, namespace: &Namespace, key: &str) -> Result<Option<Item>> {
        let (ns, key) = (namespace.as_str().to_owned(), key.to_owned());
        self.run(move |conn| {
            let sql = format!(
                "SELECT {META_COLUMNS}, content FROM mountfs_items WHERE namespace = ?1 AND key = ?2"
            );
            let mut stmt = conn.prepare_cached(&sql).map_err(map_error)?;
            stmt.query_row(params![ns, key], item_of_row)
                .optional()
                .map_err(map_error)
        })
        .await
    }

    async fn head(&self, namespace: &Namespace, key: &str) -> Result<Option<ItemMeta>> {
        let (ns, key) = (namespace.as_str().to_owned(), key.to_owned());
        self.run(move |conn| {
            let sql = format!(
                "SELECT {META_COLUMNS} FROM mountfs_items WHERE namespace = ?1 AND key = ?2"
            );
            let mut stmt = conn.prepare_cached(&sql).map_err(map_error)?;
            stmt.query_row(params![ns, key], meta_of_row)
                .optional()
                .map_err(map_error)
        })
        .await
    }

    async fn put(
        &self,
        namespace: &Namespace,
        key: &str,
        content: &[u8],
        condition: PutCondition,
    ) -> Result<Written> {
        let _turn = self.writer_turn();
        let (ns, key, content) = (
            namespace.as_str().to_owned(),
            key.to_owned(),
            content.to_vec(),
        );
        let written = self
            .run(move |conn| {
                // The write lock is taken at BEGIN, so the conditional statements below and the
                // version counter see no other writer in between.
                let tx = conn
                    .transaction_with_behavior(TransactionBehavior::Immediate)
                    .map_err(map_error)?;
                let written = put_in(&tx, &ns, &key, &content, condition)?;
                tx.commit().map_err(map_error)?;
                Ok(written)
            })
            .await;
        self.shared.fold_wake.notify_one();
        written
    }

    async fn apply_batch(
        &self,
        namespace: &Namespace,
        ops: Vec<BatchOp>,
    ) -> std::result::Result<Vec<Option<i64>>, (usize, Error)> {
        let _turn = self.writer_turn();
        let ns = namespace.as_str().to_owned();
        let outcome = self
            .run(move |conn| {
                let tx = conn
                    .transaction_with_behavior(TransactionBehavior::Immediate)
                    .map_err(map_error)?;
                let mut versions = Vec::with_capacity(ops.len());
                for (index, op) in ops.iter().enumerate() {
                    let done = match op {
                        BatchOp::Put {
                            key,
                            content,
                            condition,
                        } => put_in(&tx, &ns, key, content, *condition).map(|w| Some(w.version)),
                        BatchOp::Delete { key, version } => tx
                            .execute(
                                "DELETE FROM mountfs_items
                                 WHERE namespace = ?1 AND key = ?2 AND version = ?3",
                                params![ns, key, version],
                            )
                            .map_err(map_error)
                            .and_then(|n| {
                                if n == 0 {
                                    Err(Error::VersionMismatch)
                                } else {
                                    Ok(None)
                                }
                            }),
                    };
                    match done {
                        // Dropping the transaction rolls it back.
                        Err(error) => return Ok(Err((index, error))),
                        Ok(version) => versions.push(version),
                    }
                }
                tx.commit().map_err(map_error)?;
                Ok(Ok(versions))
            })
            .await;
        self.shared.fold_wake.notify_one();
        match outcome {
            Ok(done) => done,
            Err(error) => Err((0, error)),
        }
    }

    async fn delete(
        &self,
        namespace: &Namespace,
        key: &str,
        if_version: Option<i64>,
    ) -> Result<bool> {
        let _turn = self.writer_turn();
        let (ns, key) = (namespace.as_str().to_owned(), key.to_owned());
        let outcome = self
            .run(move |conn| {
                let deleted = conn
                    .execute(
                        "DELETE FROM mountfs_items
                     WHERE namespace = ?1 AND key = ?2 AND (?3 IS NULL OR version = ?3)",
                        params![ns, key, if_version],
                    )
                    .map_err(map_error)?;
                if deleted > 0 {
                    return Ok(true);
                }
                if if_version.is_none() {
                    return Ok(false);
                }
                // Nothing deleted under a condition: only to tell "absent" from "other version".
                let exists: Option<i64> = conn
                    .query_row(
                        "SELECT 1 FROM mountfs_items WHERE namespace = ?1 AND key = ?2",
                        params![ns, key],
                        |row| row.get(0),
                    )
                    .optional()
                    .map_err(map_error)?;
                match exists {
                    Some(_) => Err(Error::VersionMismatch),
                    None => Ok(false),
                }
            })
            .await;
        self.shared.fold_wake.notify_one();
        outcome
    }

    async fn rename(
        &self,
        namespace: &Namespace,
        from: &str,
        to: &str,
        if_version: Option<i64>,
        replacing: Option<i64>,
    ) -> Result<Option<i64>> {
        let _turn = self.writer_turn();
        let (ns, from, to) = (
            namespace.as_str().to_owned(),
            from.to_owned(),
            to.to_owned(),
        );
        self.run(move |conn| {
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(map_error)?;
            if let Some(expected) = replacing {
                let removed = tx
                    .execute(
                        "DELETE FROM mountfs_items WHERE namespace = ?1 AND key = ?2 AND version = ?3",
                        params![ns, to, expected],
                    )
                    .map_err(map_error)?;
                if removed == 0 {
                    return Err(Error::VersionMismatch);
                }
            }
            let moved: Option<i64> = tx
                .query_row(
                    "UPDATE mountfs_items SET key = ?3
                     WHERE namespace = ?1 AND key = ?2 AND (?4 IS NULL OR version = ?4)
                     RETURNING version",
                    params![ns, from, to, if_version],
                    |row| row.get(0),
                )
                .optional()
                .map_err(|e| match e.sqlite_error_code() {
                    Some(ErrorCode::ConstraintViolation) => Error::AlreadyExists,
                    _ => map_error(e),
                })?;
            let Some(version) = moved else {
                let exists: Option<i64> = tx
                    .query_row(
                        "SELECT 1 FROM mountfs_items WHERE namespace = ?1 AND key = ?2",
                        params![ns, from],
                        |row| row.get(0),
                    )
                    .optional()
                    .map_err(map_error)?;
                return match exists {
                    Some(_) => Err(Error::VersionMismatch),
                    None => Ok(None),
                };
            };
            tx.commit().map_err(map_error)?;
            Ok(Some(version))
        })
        .await
    }

    async fn rename_prefix(
        &self,
        namespace: &Namespace,
        from_prefix: &str,
        to_prefix: &str,
        to_key: &str,
    ) -> Result<u64> {
        let _turn = self.writer_turn();
        let ns = namespace.as_str().to_owned();
        let to_query = ListQuery::first(to_prefix, 1);
        let from_lower = from_prefix.to_owned();
        let from_upper = super::prefix_successor(from_prefix)
            .ok_or_else(|| Error::Query(format!("cannot bound the key prefix '{from_prefix}'")))?;
        let (to_prefix, to_key) = (to_prefix.to_owned(), to_key.to_owned());
        // substr counts characters from 1: the rest of a key after the old prefix.
        let rest_from = i64::try_from(from_prefix.chars().count() + 1).unwrap_or(i64::MAX);
        self.run(move |conn| {
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(map_error)?;
            let taken: Option<i64> = tx
                .query_row(
                    "SELECT 1 FROM mountfs_items WHERE namespace = ?1 AND key = ?2",
                    params![ns, to_key],
                    |row| row.get(0),
                )
                .optional()
                .map_err(map_error)?;
            let (range, bounds) = range_sql(&to_query);
            let sql = format!("SELECT 1 FROM mountfs_items WHERE {range} LIMIT 1");
            let mut values: Vec<&dyn rusqlite::ToSql> = vec![&ns];
            values.extend(bounds.iter().map(|b| b as &dyn rusqlite::ToSql));
            let below: Option<i64> = tx
                .query_row(&sql, values.as_slice(), |row| row.get(0))
                .optional()
                .map_err(map_error)?;
            if taken.is_some() || below.is_some() {
                return Err(Error::AlreadyExists);
            }
            let moved = tx
                .execute(
                    "UPDATE mountfs_items SET key = ?4 || substr(key, ?5)
                     WHERE namespace = ?1 AND key >= ?2 AND key < ?3",
                    params![ns, from_lower, from_upper, to_prefix, rest_from],
                )
                .map_err(|e| match e.sqlite_error_code() {
                    Some(ErrorCode::ConstraintViolation) => Error::AlreadyExists,
                    _ => map_error(e),
                })?;
            tx.commit().map_err(map_error)?;
            Ok(u64::try_from(moved).unwrap_or(u64::MAX))
        })
        .await
    }

    async fn delete_prefix(&self, namespace: &Namespace, prefix: &str) -> Result<u64> {
        let _turn = self.writer_turn();
        let query = ListQuery::first(prefix, 1);
        let ns = namespace.as_str().to_owned();
        let outcome = self
            .run(move |conn| {
                let (range, bounds) = range_sql(&query);
                let sql = format!("DELETE FROM mountfs_items WHERE {range}");
                let mut values: Vec<&dyn rusqlite::ToSql> = vec![&ns];
                values.extend(bounds.iter().map(|b| b as &dyn rusqlite::ToSql));
                let deleted = conn.execute(&sql, values.as_slice()).map_err(map_error)?;
                Ok(u64::try_from(deleted).unwrap_or(u64::MAX))
            })
            .await;
        self.shared.fold_wake.notify_one();
        outcome
    }

    async fn list(&self, namespace: &Namespace, query: &ListQuery) -> Result<Vec<ItemMeta>> {
        let (ns, query) = (namespace.as_str().to_owned(), query.clone());
        self.run(move |conn| {
            let (range, bounds) = range_sql(&query);
            let sql = format!(
                "SELECT {META_COLUMNS} FROM mountfs_items WHERE {range} ORDER BY key LIMIT {}",
                query.sql_limit()
            );
            let mut stmt = conn.prepare_cached(&sql).map_err(map_error)?;
            let mut values: Vec<&dyn rusqlite::ToSql> = vec![&ns];
            values.extend(bounds.iter().map(|b| b as &dyn rusqlite::ToSql));
            let rows = stmt
                .query_map(values.as_slice(), meta_of_row)
                .map_err(map_error)?;
            rows.collect::<rusqlite::Result<Vec<_>>>()
                .map_err(map_error)
        })
        .await
    }

    async fn scan(&self, namespace: &Namespace, query: &ListQuery) -> Result<Vec<Item>> {
        let (ns, query) = (namespace.as_str().to_owned(), query.clone());
        self.run(move |conn| {
            let (range, bounds) = range_sql(&query);
            let sql = format!(
                "SELECT {META_COLUMNS}, content FROM mountfs_items WHERE {range} ORDER BY key LIMIT {}",
                query.sql_limit()
            );
            let mut stmt = conn.prepare_cached(&sql).map_err(map_error)?;
            let mut values: Vec<&dyn rusqlite::ToSql> = vec![&ns];
            values.extend(bounds.iter().map(|b| b as &dyn rusqlite::ToSql));
            let rows = stmt
                .query_map(values.as_slice(), item_of_row)
                .map_err(map_error)?;
            rows.collect::<rusqlite::Result<Vec<_>>>()
                .map_err(map_error)
        })
        .await
    }

    async fn candidates(
        &self,
        namespace: &Namespace,
        query: &CandidateQuery,
    ) -> Result<Option<Vec<ItemMeta>>> {
        if !self.index_ready().await? {
            return Ok(None);
        }
        let ns = namespace.as_str().to_owned();
        let (lower, inclusive, upper) = query.list.bounds();
        let limit = query.list.sql_limit();
        let mut queries = Vec::new();
        let matching = index_select(&query.plan.terms, &mut queries);
        let larger_than = i64::try_from(query.larger_than).unwrap_or(i64::MAX);
        self.run(move |conn| {
            let op = if inclusive { ">=" } else { ">" };
            // `+` keeps a column's index out of the plan: the arm is then driven by rowid.
            let range = |plus: &str| match upper {
                Some(_) => format!(
                    "{plus}namespace = :ns AND {plus}key {op} :lower AND {plus}key < :upper"
                ),
                None => format!("{plus}namespace = :ns AND {plus}key {op} :lower"),
            };
            let (range, by_rowid) = (range(""), range("+"));
            // How the index's answer is read: when it is small (at most SELECTIVE_MATCHES per
            // item of the page), its items are looked up by rowid and sorted, whatever the
            // range holds; when it is large, the range's key index is walked in key order and
            // each key tested against it, which stops as soon as the page is full. Counting
            // stops at the threshold, so the probe costs little either way.
            let cap = limit.saturating_mul(SELECTIVE_MATCHES);
            let terms: Vec<(&str, &dyn rusqlite::ToSql)> = queries
                .iter()
                .map(|(name, query)| (name.as_str(), query as &dyn rusqlite::ToSql))
                .collect();
            let probe_cap = cap.saturating_add(1);
            let mut probe_values = terms.clone();
            probe_values.push((":cap", &probe_cap));
            let matched: i64 = conn
                .prepare_cached(&format!(
                    "SELECT count(*) FROM (SELECT item FROM ({matching}) LIMIT :cap)"
                ))
                .map_err(map_error)?
                .query_row(probe_values.as_slice(), |row| row.get(0))
                .map_err(map_error)?;
            let indexed_arm = if matched <= cap { &by_rowid } else { &range };
            // Items over LARGE_ITEM_BYTES are not in the trigram table (tokenizing one would
            // hold its whole text in memory: a 64 MiB item peaked at 229 MiB), so every one is
            // a candidate, as on PostgreSQL. A line bound under LARGE_ITEM_BYTES (a server told
            // so) reads the range's rows.
            let large = if larger_than >= LARGE_ITEM_BYTES {
                format!(
                    "INDEXED BY mountfs_items_large
                     WHERE {range} AND size > {LARGE_ITEM_BYTES}"
                )
            } else {
                format!("WHERE {range} AND size > :larger_than")
            };
            // Four arms, each an indexed lookup whose cost is what it finds, not the range: the
            // index's answer (by rowid, or the range's key index filtered by the trigram
            // match: see above); the items written since the index was last folded into (by rowid: a
            // handful); the items it does not cover and those too large for their lines to be
            // searched (each by its own small index; left to itself, SQLite's planner reads
            // the row of every item in the range to check its encoding and size).
            let sql = format!(
                "SELECT {META_COLUMNS} FROM mountfs_items WHERE {indexed_arm} AND rowid IN
                     (SELECT item FROM ({matching}))
                 UNION SELECT {META_COLUMNS} FROM mountfs_items WHERE {by_rowid} AND rowid IN
                     (SELECT item FROM mountfs_text_pending)
                 UNION SELECT {META_COLUMNS} FROM mountfs_items INDEXED BY mountfs_items_not_text
                     WHERE {range} AND encoding <> 'utf-8'
                 UNION SELECT {META_COLUMNS} FROM mountfs_items {large}
                 ORDER BY key LIMIT {limit}"
            );
            let mut stmt = conn.prepare_cached(&sql).map_err(map_error)?;
            let mut values: Vec<(&str, &dyn rusqlite::ToSql)> = terms;
            values.extend([
                (":ns", &ns as &dyn rusqlite::ToSql),
                (":lower", &lower as &dyn rusqlite::ToSql),
            ]);
            if larger_than < LARGE_ITEM_BYTES {
                values.push((":larger_than", &larger_than));
            }
            if let Some(upper) = &upper {
                values.push((":upper", upper));
            }
            let rows = stmt
                .query_map(values.as_slice(), meta_of_row)
                .map_err(map_error)?;
            rows.collect::<rusqlite::Result<Vec<_>>>()
                .map_err(map_error)
                .map(Some)
        })
        .await
    }

    async fn get_many(&self, namespace: &Namespace, keys: &[String]) -> Result<Vec<Item>> {
        let (ns, mut keys) = (namespace.as_str().to_owned(), keys.to_vec());
        keys.sort();
        keys.dedup();
        self.run(move |conn| {
            // One read transaction: each item's row and content agree, and all are of one
            // moment. Each content is read with incremental blob I/O straight into its buffer
            // (one handle moved from row to row): as a column, SQLite would first copy it
            // into a value of its own, and the value be copied again.
            let tx = conn.transaction().map_err(map_error)?;
            let sql = format!(
                "SELECT {META_COLUMNS}, rowid FROM mountfs_items WHERE namespace = ?1 AND key = ?2"
            );
            let mut stmt = tx.prepare_cached(&sql).map_err(map_error)?;
            let mut blob: Option<rusqlite::blob::Blob<'_>> = None;
            let mut items = Vec::with_capacity(keys.len());
            for key in &keys {
                let Some((meta, rowid)) = stmt
                    .query_row(params![ns, key], |row| {
                        Ok((meta_of_row(row)?, row.get::<_, i64>(6)?))
                    })
                    .optional()
                    .map_err(map_error)?
                else {
                    continue;
                };
                let handle = match blob.as_mut() {
                    Some(handle) => {
                        handle.reopen(rowid).map_err(map_error)?;
                        handle
                    }
                    None => blob.insert(
                        tx.blob_open(rusqlite::MAIN_DB, "mountfs_items", "content", rowid, true)
                            .map_err(map_error)?,
                    ),
                };
                let mut content = vec![0u8; handle.len()];
                handle.read_at_exact(&mut content, 0).map_err(map_error)?;
                items.push(Item { meta, content });
            }
            drop(blob);
            drop(stmt);
            tx.commit().map_err(map_error)?;
            Ok(items)
        })
        .await
    }

    async fn read_range(
        &self,
        namespace: &Namespace,
        key: &str,
        offset: u64,
        len: usize,
        version: i64,
    ) -> Result<Option<Vec<u8>>> {
        let (ns, key) = (namespace.as_str().to_owned(), key.to_owned());
        if let Some(answer) = self
            .read_sequentially(&ns, &key, offset, len, version)
            .await
        {
            return answer;
        }
        #[cfg(test)]
        let fetched = self.shared.pages_fetched.clone();
        let (ns2, key2) = (ns.clone(), key.clone());
        let read = self
            .run(move |conn| {
                #[cfg(test)]
                page_fetches(conn);
                // One read transaction for the version check and the blob: as two autocommit
                // statements, a write committed between them was read under the old version.
                let conn = conn.transaction().map_err(map_error)?;
                let Some((rowid, size)) = find_version(&conn, &ns2, &key2, version)? else {
                    return Ok(None);
                };
                let bytes = if range_len(size, offset, len) > 0 {
                    // Incremental blob I/O: SQLite walks the overflow pages from the value's
                    // start to the offset, and never loads the whole value.
                    let blob = conn
                        .blob_open(rusqlite::MAIN_DB, "mountfs_items", "content", rowid, true)
                        .map_err(map_error)?;
                    read_blob(&blob, size, offset, len)?
                } else {
                    Vec::new()
                };
                #[cfg(test)]
                fetched.fetch_add(page_fetches(&conn), Ordering::Relaxed);
                conn.commit().map_err(map_error)?;
                Ok(Some((bytes, size)))
            })
            .await?;
        let Some((bytes, size)) = read else {
            return Ok(None);
        };
        // A big item with more after this range: the next ranges go through a reader that
        // keeps its place (see [`SequentialReader`]).
        if size > SEQUENTIAL_READ_BYTES && offset.saturating_add(bytes.len() as u64) < size {
            self.start_reader(ns, key, version);
        }
        Ok(Some(bytes))
    }

    async fn begin_upload(&self, namespace: &Namespace, key: &str) -> Result<Box<dyn StoreUpload>> {
        let permit = self.permit().await?;
        let shared = self.shared.clone();
        let conn = tokio::task::spawn_blocking(move || -> Result<Connection> {
            // A connection of its own: its temporary table is seen by no other, and goes
            // with it (closed, or the process killed) whatever happens.
            let conn = connect(&shared.file, shared.settings)?;
            conn.execute_batch(
                "PRAGMA temp_store = FILE;
                 CREATE TEMP TABLE mountfs_upload (seq INTEGER PRIMARY KEY, chunk BLOB NOT NULL);",
            )
            .map_err(map_error)?;
            Ok(conn)
        })
        .await
        .map_err(|e| Error::Unavailable(format!("SQLite worker failed: {e}")))??;
        Ok(Box::new(SqliteUpload {
            conn: Some(conn),
            _permit: permit,
            namespace: namespace.as_str().to_owned(),
            key: key.to_owned(),
            chunks: 0,
            size: 0,
            writers: self.shared.writers.clone(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::index::{TOKENIZE_BYTES_PER_TRANSACTION, within_tokenize_budget};
    use super::*;

    #[test]
    fn a_join_is_one_word_of_the_joins_table() {
        let words = join_words(&squeeze("unsafe\n\timpl X;\nunsafe impl Y;"));
        // fe|im, pl|X;, X;|un, pl|Y; (the repeated one once).
        assert_eq!(words.len(), 4);
        assert!(words.contains(&join_word(['f', 'e', 'i', 'm'])));
        for word in &words {
            assert_eq!(word.len(), 7);
            assert!(word.starts_with('j') && word[1..].chars().all(|c| c.is_ascii_hexdigit()));
        }
        assert_eq!(
            join_word(['F', 'e', 'I', 'm']),
            join_word(['f', 'e', 'i', 'm'])
        );
        assert_ne!(
            join_word(['f', 'e', 'i', 'n']),
            join_word(['f', 'e', 'i', 'm'])
        );
        assert!(join_words("").is_empty());
    }

    /// 16 MiB read 1 MiB at a time: a blob handle opened per range walks the overflow chain
    /// from the value's start each time (30,820 page fetches for these 4,096 pages); one handle
    /// kept open fetches each page at most once (281: SQLite reads a page the WAL does not hold
    /// straight from the file, past its page cache, once it knows where the page is).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reading_an_item_range_after_range_fetches_each_page_about_once() {
        const MIB: usize = 1 << 20;
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("s.db")).await.unwrap();
        let ns = Namespace::new("default").unwrap();
        let content: Vec<u8> = (0..16 * MIB).map(|i| (i * 7 + i / 4093) as u8).collect();
        let version = store
            .put(&ns, "/big", &content, PutCondition::CreateOnly)
            .await
            .unwrap()
            .version;
        store.shared.pages_fetched.store(0, Ordering::Relaxed);
        for at in (0..content.len()).step_by(MIB) {
            let bytes = store
                .read_range(&ns, "/big", at as u64, MIB, version)
                .await
                .unwrap()
                .unwrap();
            assert!(bytes == content[at..at + MIB], "range at {at}");
        }
        let pages = (content.len() / 4096) as u64;
        let fetched = store.shared.pages_fetched.load(Ordering::Relaxed);
        eprintln!("{fetched} page fetches for {pages} pages");
        assert!(
            fetched < pages * 3 / 2,
            "{fetched} page fetches for {pages} pages"
        );
    }

    #[test]
    fn a_transaction_tokenizes_a_bounded_text_but_always_one_item() {
        let budget = TOKENIZE_BYTES_PER_TRANSACTION;
        assert_eq!(within_tokenize_budget(&[]), &[]);
        assert_eq!(
            within_tokenize_budget(&[(1, budget), (2, 1)]),
            &[(1, budget)]
        );
        assert_eq!(
            within_tokenize_budget(&[(1, 2 * budget)]),
            &[(1, 2 * budget)]
        );
        let small: Vec<(i64, i64)> = (0..64).map(|i| (i, 4096)).collect();
        assert_eq!(within_tokenize_budget(&small).len(), 64);
        let half: Vec<(i64, i64)> = (0..4).map(|i| (i, budget / 2)).collect();
        assert_eq!(within_tokenize_budget(&half).len(), 2);
        // Items the index does not tokenize (binary, too large, deleted) cost nothing.
        let free: Vec<(i64, i64)> = (0..64).map(|i| (i, 0)).collect();
        assert_eq!(within_tokenize_budget(&free).len(), 64);
    }
}
