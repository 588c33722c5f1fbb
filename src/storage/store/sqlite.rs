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
    Result, Store, StoreUpload, Written, from_micros, to_micros,
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

/// Schema migrations: `MIGRATIONS[i]` takes the schema from version `i` to `i + 1`.
/// The content column is last so listing metadata never reads a large value's overflow pages.
const MIGRATIONS: &[&str] = &[
    "
    CREATE TABLE mountfs_items (
        namespace   TEXT    NOT NULL,
        key         TEXT    NOT NULL,
        encoding    TEXT    NOT NULL,
        size        INTEGER NOT NULL,
        created_at  INTEGER NOT NULL,
        modified_at INTEGER NOT NULL,
        version     INTEGER NOT NULL,
        content     BLOB    NOT NULL,
        PRIMARY KEY (namespace, key)
    );
    CREATE TABLE mountfs_counters (
        name  TEXT PRIMARY KEY,
        value INTEGER NOT NULL
    );
    INSERT INTO mountfs_counters (name, value) VALUES ('version', 0);
",
    "
    -- The search index (issue 28): the FTS5 trigrams of every UTF-8 item's content, kept by
    -- the triggers below inside each write's own transaction. External content (the text
    -- is not stored twice); detail=none keeps only rowids, as every candidate is confirmed
    -- by the matcher anyway.
    CREATE VIRTUAL TABLE mountfs_items_text USING fts5(
        content, content = 'mountfs_items', content_rowid = 'rowid',
        tokenize = 'trigram', detail = 'none'
    );
    -- How far the index is built: the items with rowid <= built_upto are in it, the others
    -- are added by the background build (sqlite.rs, `build_step`) in rowid order. The
    -- largest integer once all are: a store created with the index starts there.
    CREATE TABLE mountfs_text_index (built_upto INTEGER NOT NULL);
    INSERT INTO mountfs_text_index (built_upto)
        SELECT CASE WHEN EXISTS (SELECT 1 FROM mountfs_items)
            THEN -9223372036854775808 ELSE 9223372036854775807 END;
    CREATE TRIGGER mountfs_items_text_insert AFTER INSERT ON mountfs_items
        WHEN new.rowid <= (SELECT built_upto FROM mountfs_text_index)
    BEGIN
        INSERT INTO mountfs_items_text (rowid, content) VALUES
            (new.rowid, CASE WHEN new.encoding = 'utf-8' THEN CAST(new.content AS TEXT) END);
    END;
    CREATE TRIGGER mountfs_items_text_delete AFTER DELETE ON mountfs_items
        WHEN old.rowid <= (SELECT built_upto FROM mountfs_text_index)
    BEGIN
        INSERT INTO mountfs_items_text (mountfs_items_text, rowid, content) VALUES
            ('delete', old.rowid,
             CASE WHEN old.encoding = 'utf-8' THEN CAST(old.content AS TEXT) END);
    END;
    CREATE TRIGGER mountfs_items_text_update AFTER UPDATE OF encoding, content ON mountfs_items
        WHEN old.rowid <= (SELECT built_upto FROM mountfs_text_index)
    BEGIN
        INSERT INTO mountfs_items_text (mountfs_items_text, rowid, content) VALUES
            ('delete', old.rowid,
             CASE WHEN old.encoding = 'utf-8' THEN CAST(old.content AS TEXT) END);
        INSERT INTO mountfs_items_text (rowid, content) VALUES
            (new.rowid, CASE WHEN new.encoding = 'utf-8' THEN CAST(new.content AS TEXT) END);
    END;
    -- What a search must read whatever the index says: items that are not UTF-8 text, and
    -- items too large for their lines to be searched (reported as skipped).
    CREATE INDEX mountfs_items_not_text ON mountfs_items (namespace, key)
        WHERE encoding <> 'utf-8';
    CREATE INDEX mountfs_items_size ON mountfs_items (namespace, size);
",
    "
    -- The search index without its cost on every write (issue 28): a write only records its
    -- item in mountfs_text_pending, in its own transaction; the folder (sqlite.rs,
    -- `fold_step`) moves the pending items into the FTS5 index in batches, soon after. A
    -- search takes every pending item as a candidate, so its answer is exact at every
    -- commit. The FTS5 table is contentless with contentless_delete=1: the folder removes an
    -- item's old trigrams by rowid, without the old text (which an external-content table
    -- needs, and which is gone once the write committed). The index is rebuilt in the
    -- background from the items, as a store made before the index is.
    DROP TRIGGER mountfs_items_text_insert;
    DROP TRIGGER mountfs_items_text_delete;
    DROP TRIGGER mountfs_items_text_update;
    DROP TABLE mountfs_items_text;
    CREATE VIRTUAL TABLE mountfs_items_text USING fts5(
        content, content = '', contentless_delete = 1, tokenize = 'trigram', detail = 'none'
    );
    CREATE TABLE mountfs_text_pending (item INTEGER PRIMARY KEY);
    -- Items a search reads whatever the index says because a line of theirs may be too long
    -- to search: only items over 1 MiB (LARGE_ITEM_BYTES) are in this index, so writing a
    -- smaller item never touches it (the size index it replaces changed at every edit).
    DROP INDEX mountfs_items_size;
    CREATE INDEX mountfs_items_large ON mountfs_items (namespace, key) WHERE size > 1048576;
    UPDATE mountfs_text_index SET built_upto =
        CASE WHEN EXISTS (SELECT 1 FROM mountfs_items)
            THEN -9223372036854775808 ELSE 9223372036854775807 END;
    CREATE TRIGGER mountfs_items_text_insert AFTER INSERT ON mountfs_items
        WHEN new.rowid <= (SELECT built_upto FROM mountfs_text_index)
    BEGIN
        INSERT OR IGNORE INTO mountfs_text_pending (item) VALUES (new.rowid);
    END;
    CREATE TRIGGER mountfs_items_text_delete AFTER DELETE ON mountfs_items
        WHEN old.rowid <= (SELECT built_upto FROM mountfs_text_index)
    BEGIN
        INSERT OR IGNORE INTO mountfs_text_pending (item) VALUES (old.rowid);
    END;
    CREATE TRIGGER mountfs_items_text_update AFTER UPDATE OF encoding, content ON mountfs_items
        WHEN old.rowid <= (SELECT built_upto FROM mountfs_text_index)
    BEGIN
        INSERT OR IGNORE INTO mountfs_text_pending (item) VALUES (old.rowid);
    END;
",
    "
    -- The index holds each item's text as the planner reads it (issue 28, store/plan.rs): the
    -- trigrams of the text with every run of whitespace squeezed to one space, and a word for
    -- each join (the two characters on each side of a space; sqlite.rs, `join_word`) in a
    -- second table whose tokenizer takes words whole. New names: a server of an older release
    -- still running on this file (the version is checked when a process opens it) fails on the
    -- old table's name instead of putting the text as it is where the squeezed text belongs.
    -- Built again in the background from the items; searches scan until it is.
    DROP TABLE mountfs_items_text;
    CREATE VIRTUAL TABLE mountfs_items_squeezed USING fts5(
        content, content = '', contentless_delete = 1, tokenize = 'trigram', detail = 'none'
    );
    CREATE VIRTUAL TABLE mountfs_items_joins USING fts5(
        content, content = '', contentless_delete = 1, tokenize = 'ascii', detail = 'none'
    );
    DELETE FROM mountfs_text_pending;
    UPDATE mountfs_text_index SET built_upto =
        CASE WHEN EXISTS (SELECT 1 FROM mountfs_items)
            THEN -9223372036854775808 ELSE 9223372036854775807 END;
",
];

/// `built_upto` once every item is in the search index.
const INDEX_COMPLETE: i64 = i64::MAX;
/// Items added to the search index per transaction of a background build (fewer when their
/// text exceeds [`TOKENIZE_BYTES_PER_TRANSACTION`]): a writer waits for one batch at most.
const BUILD_BATCH: i64 = 256;
/// Pending items moved into the search index per transaction of the folder (fewer when their
/// text exceeds [`TOKENIZE_BYTES_PER_TRANSACTION`]): a writer waits for one such batch at most.
/// 256 small items fold together; the byte budget, not the count, bounds the time.
const FOLD_BATCH: i64 = 256;
/// Most bytes of text one transaction of the folder or of the background build tokenizes (at
/// least one item, so up to 1 MiB): FTS5's trigram tokenizer takes ~0.06 s of
/// CPU per MiB of source code and ~0.5 s per MiB of high-entropy text (identifiers, hashes;
/// SQLite 3.40 -O2), several times that in a debug build, and every writer waits for the
/// transaction — 64 or 256 items of up to 1 MiB each held the write lock past the 10 s busy
/// timeout, and writes were refused. 64 items of 4 KiB still fold together.
const TOKENIZE_BYTES_PER_TRANSACTION: i64 = 256 * 1024;
/// The size over which items are in the `mountfs_items_large` index (the literal of its
/// `WHERE`): a search whose line bound is at least this finds the items over its bound there.
const LARGE_ITEM_BYTES: i64 = 1_048_576;
/// Pending items past which a write folds its own item (see [`fold_own_item`]): a search
/// reads at most about this many items beyond its index candidates (~15 µs each for 12 KB of
/// source), and after a bulk load the folder has about this many left, not the whole load
/// (239 MB took it a minute: it gives way to writers and pauses as long as each batch took).
/// Above the 600 sequential writes of the benchmark's latency phases, so that a steady
/// writer the folder keeps up with never reaches it.
const PENDING_BOUND: i64 = 1024;
/// How long writes must pause before the folder folds them: a burst of writes is folded after
/// it, together, and its writers do not wait for folds meanwhile.
const FOLD_QUIET: Duration = Duration::from_millis(50);
/// The longest the folder waits for writes to pause: under a steady stream of writes the
/// pending items (which every search reads) are folded at least this often.
const FOLD_MAX_WAIT: Duration = Duration::from_secs(1);
/// How often the folder looks for pending items without being woken (items written by another
/// process sharing the file, or left by a process that stopped before it folded them).
const FOLD_POLL: Duration = Duration::from_secs(2);
/// The longest the folder or the build gives way to this process's writers before its next
/// batch (see [`give_way`]): under a steady stream of writes it still makes progress.
const GIVE_WAY_MAX: Duration = Duration::from_secs(1);
/// The shortest pause of the folder and of the build between two batches (see [`pause_after`]).
const BATCH_PAUSE_MIN: Duration = Duration::from_millis(10);

/// A search's trigram answer is read by rowid when it holds at most this many items per item of
/// the page asked for (see the candidates query of [`SqliteStore`]), else by walking the key range.
const SELECTIVE_MATCHES: i64 = 8;

const META_COLUMNS: &str = "key, encoding, size, created_at, modified_at, version";

/// Items larger than this get a [`SequentialReader`] once a range of them was read and more
/// remain: a copy reads such an item range after range (issue 27).
const SEQUENTIAL_READ_BYTES: u64 = 1 << 20;
/// Sequential readers open at once per store: a copy reads one file at a time; two let two
/// copies out of one store keep theirs. Each is a connection outside the pool's
/// [`MAX_CONNECTIONS`] (it only reads: it never waits for the writer, nor the writer for it).
const MAX_READERS: usize = 2;
/// How long a sequential reader waits for its next range before it closes: its read
/// transaction keeps the WAL from being checkpointed past it while it is open.
const READER_IDLE: Duration = Duration::from_secs(2);

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

fn migrate(conn: &mut Connection) -> Result<()> {
    // BEGIN IMMEDIATE takes the write lock first, so two processes opening a new file at once
    // migrate it one after the other, and the second sees the first's work.
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(map_error)?;
    let current: i64 = tx
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .map_err(map_error)?;
    let known = MIGRATIONS.len();
    let current = usize::try_from(current).unwrap_or(usize::MAX);
    if current > known {
        return Err(Error::Schema(format!(
            "the SQLite database has schema version {current}, newer than this mountfs knows ({known}); upgrade mountfs"
        )));
    }
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(current) {
        tx.execute_batch(sql).map_err(map_error)?;
        let version = i64::try_from(index + 1).unwrap_or(i64::MAX);
        tx.pragma_update(None, "user_version", version)
            .map_err(map_error)?;
    }
    tx.commit().map_err(map_error)
}

fn meta_of_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<ItemMeta> {
    let encoding: String = row.get(1)?;
    let size: i64 = row.get(2)?;
    Ok(ItemMeta {
        key: row.get(0)?,
        size: u64::try_from(size).unwrap_or(0),
        encoding: Encoding::parse(&encoding),
        created_at: from_micros(row.get(3)?),
        modified_at: from_micros(row.get(4)?),
        version: row.get(5)?,
    })
}

fn item_of_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Item> {
    Ok(Item {
        meta: meta_of_row(row)?,
        content: row.get(6)?,
    })
}

/// The WHERE clause and parameters of a listing: an indexed key range inside one namespace.
fn range_sql(query: &ListQuery) -> (String, Vec<String>) {
    let (lower, inclusive, upper) = query.bounds();
    let op = if inclusive { ">=" } else { ">" };
    let mut sql = format!("namespace = ?1 AND key {op} ?2");
    let mut bounds = vec![lower];
    if let Some(upper) = upper {
        sql.push_str(" AND key < ?3");
        bounds.push(upper);
    }
    (sql, bounds)
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

    /// The range through this item version's [`SequentialReader`], if one is open: `None`
    /// when there is none (or it closed meanwhile), and the caller reads on a pooled
    /// connection. The reader reads a snapshot taken when it opened, in which the item had
    /// `version`; the version is then checked against the item as it is now, so a change made
    /// since is reported exactly as on the pooled path.
    async fn read_sequentially(
        &self,
        ns: &str,
        key: &str,
        offset: u64,
        len: usize,
        version: i64,
    ) -> Option<Result<Option<Vec<u8>>>> {
        let requests = {
            let mut readers = self
                .shared
                .readers
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let at = readers
                .iter()
                .position(|r| r.version == version && r.key == key && r.namespace == ns)?;
            // The most recently used last: the first is closed when a third opens.
            let reader = readers.remove(at);
            let requests = reader.requests.clone();
            readers.push(reader);
            requests
        };
        let (reply, answer) = tokio::sync::oneshot::channel();
        let request = RangeRequest { offset, len, reply };
        let answer = match requests.send(request) {
            Ok(()) => answer.await.ok(),
            Err(_) => None,
        };
        let Some(answer) = answer else {
            // The reader closed (idle, at the item's end, or it could not open).
            self.close_reader(ns, key, version);
            return None;
        };
        let bytes = match answer {
            Ok(bytes) => bytes,
            Err(error) => {
                self.close_reader(ns, key, version);
                return Some(Err(error));
            }
        };
        let (ns_now, key_now) = (ns.to_owned(), key.to_owned());
        let now = self
            .run_in_place(move |conn| {
                conn.prepare_cached(
                    "SELECT version FROM mountfs_items WHERE namespace = ?1 AND key = ?2",
                )
                .map_err(map_error)?
                .query_row(params![ns_now, key_now], |row| row.get::<_, i64>(0))
                .optional()
                .map_err(map_error)
            })
            .await;
        match now {
            Ok(Some(now)) if now == version => Some(Ok(Some(bytes))),
            Ok(Some(_)) => {
                self.close_reader(ns, key, version);
                Some(Err(Error::VersionMismatch))
            }
            Ok(None) => {
                self.close_reader(ns, key, version);
                Some(Ok(None))
            }
            Err(error) => Some(Err(error)),
        }
    }

    /// Opens a [`SequentialReader`] for the item at `key` with `version`, closing the least
    /// recently used one past [`MAX_READERS`]. Its thread opens the snapshot while the caller
    /// handles the range it just read.
    fn start_reader(&self, namespace: String, key: String, version: i64) {
        let (sender, requests) = std::sync::mpsc::channel();
        let file = self.shared.file.clone();
        let settings = self.shared.settings;
        let item = (namespace.clone(), key.clone(), version);
        #[cfg(test)]
        let fetched = self.shared.pages_fetched.clone();
        let spawned = std::thread::Builder::new()
            .name("mountfs-sqlite-reader".to_owned())
            .spawn(move || {
                serve_ranges(
                    &file,
                    settings,
                    &item,
                    &requests,
                    #[cfg(test)]
                    &fetched,
                )
            });
        if spawned.is_err() {
            // No thread to spare: the ranges are read on pooled connections, as before.
            return;
        }
        let mut readers = self
            .shared
            .readers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        readers.retain(|r| !(r.version == version && r.key == key && r.namespace == namespace));
        readers.push(SequentialReader {
            namespace,
            key,
            version,
            requests: sender,
        });
        if readers.len() > MAX_READERS {
            // Dropping its sender ends its thread at once.
            readers.remove(0);
        }
    }

    /// Forgets the reader of this item version (its thread ends when its sender is dropped).
    fn close_reader(&self, ns: &str, key: &str, version: i64) {
        self.shared
            .readers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|r| !(r.version == version && r.key == key && r.namespace == ns));
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

/// The rowid and size of the item at `key`, if it has `version`: `None` when there is no item,
/// [`Error::VersionMismatch`] when it has another version.
fn find_version(
    conn: &Connection,
    ns: &str,
    key: &str,
    version: i64,
) -> Result<Option<(i64, u64)>> {
    let found: Option<(i64, i64, i64)> = conn
        .prepare_cached(
            "SELECT rowid, version, size FROM mountfs_items WHERE namespace = ?1 AND key = ?2",
        )
        .map_err(map_error)?
        .query_row(params![ns, key], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?))
        })
        .optional()
        .map_err(map_error)?;
    match found {
        None => Ok(None),
        Some((_, found, _)) if found != version => Err(Error::VersionMismatch),
        Some((rowid, _, size)) => Ok(Some((rowid, u64::try_from(size).unwrap_or(0)))),
    }
}

/// How many bytes a range of `len` from `offset` holds in a value of `size` bytes.
fn range_len(size: u64, offset: u64, len: usize) -> usize {
    let start = offset.min(size);
    usize::try_from((size - start).min(len as u64)).unwrap_or(len)
}

/// The bytes of a range of a value of `size` bytes through its blob handle.
fn read_blob(
    blob: &rusqlite::blob::Blob<'_>,
    size: u64,
    offset: u64,
    len: usize,
) -> Result<Vec<u8>> {
    let mut bytes = vec![0u8; range_len(size, offset, len)];
    if !bytes.is_empty() {
        let at = usize::try_from(offset).unwrap_or(usize::MAX);
        blob.read_at_exact(&mut bytes, at).map_err(map_error)?;
    }
    Ok(bytes)
}

/// Pages this connection fetched from its page cache or the file since the last call
/// (SQLite's `SQLITE_DBSTATUS_CACHE_HIT` + `_MISS`, reset): what a test counts to see that a
/// copy walks the overflow pages of an item once, not once per range.
#[cfg(test)]
fn page_fetches(conn: &Connection) -> u64 {
    let mut total = 0u64;
    for op in [
        rusqlite::ffi::SQLITE_DBSTATUS_CACHE_HIT,
        rusqlite::ffi::SQLITE_DBSTATUS_CACHE_MISS,
    ] {
        let (mut current, mut highwater) = (0, 0);
        // SAFETY: the handle is this open connection's, used on this thread only, and the
        // two out-pointers are live locals.
        unsafe {
            rusqlite::ffi::sqlite3_db_status(conn.handle(), op, &mut current, &mut highwater, 1);
        }
        total += u64::try_from(current).unwrap_or(0);
    }
    total
}

/// A read of one item version, range after range, through one incremental-blob handle kept
/// open (issue 27). SQLite keeps, on an open blob handle, the page numbers of the value's
/// overflow pages it has walked; a handle opened per range walks the chain from the value's
/// start to the range every time, so a copy of an item in ranges cost the square of its size
/// (800 MB: 47.6 s). The handle lives in a read transaction of a connection of its own, on a
/// thread of its own ([`serve_ranges`]: the handle borrows the connection, so they stay
/// together there); it closes after [`READER_IDLE`] without a range, after the range that
/// reaches the item's end, when a third reader opens, or with the store.
#[derive(Debug)]
struct SequentialReader {
    namespace: String,
    key: String,
    version: i64,
    requests: std::sync::mpsc::Sender<RangeRequest>,
}

/// One range asked of a [`SequentialReader`].
#[derive(Debug)]
struct RangeRequest {
    offset: u64,
    len: usize,
    reply: tokio::sync::oneshot::Sender<Result<Vec<u8>>>,
}

/// The thread of a [`SequentialReader`]: opens a connection and a read transaction, checks
/// the item has the version, opens its blob, and answers ranges until it closes. If any of
/// that fails it ends without answering, and the ranges are read on pooled connections
/// (which report a missing item or another version themselves).
fn serve_ranges(
    file: &Path,
    settings: ConnectionSettings,
    (ns, key, version): &(String, String, i64),
    requests: &std::sync::mpsc::Receiver<RangeRequest>,
    #[cfg(test)] fetched: &std::sync::atomic::AtomicU64,
) {
    let Ok(mut conn) = connect(file, settings) else {
        return;
    };
    let Ok(tx) = conn.transaction() else {
        return;
    };
    let Ok(Some((rowid, size))) = find_version(&tx, ns, key, *version) else {
        return;
    };
    let Ok(blob) = tx.blob_open(rusqlite::MAIN_DB, "mountfs_items", "content", rowid, true) else {
        return;
    };
    #[cfg(test)]
    fetched.fetch_add(page_fetches(&tx), Ordering::Relaxed);
    while let Ok(request) = requests.recv_timeout(READER_IDLE) {
        let read = read_blob(&blob, size, request.offset, request.len);
        #[cfg(test)]
        fetched.fetch_add(page_fetches(&tx), Ordering::Relaxed);
        let at_end = request.offset.saturating_add(request.len as u64) >= size;
        let _ = request.reply.send(read);
        if at_end {
            return;
        }
    }
}

/// The most content one item holds: SQLite refuses a string, blob or row longer than
/// SQLITE_LIMIT_LENGTH (1,000,000,000 in the bundled build, never raised here) with "string or
/// blob too big"; the row's other columns take a little of it.
const LARGEST_VALUE: u64 = 1_000_000_000 - 64 * 1024;

/// A content staged chunk by chunk in a temporary table of a connection of its own (see
/// [`Store::begin_upload`]), then written into the item's row by incremental blob I/O in one
/// write transaction: the process never holds more than one chunk. One limit: a UTF-8 item
/// is added to the search index by the index's trigger, which has SQLite read the whole text
/// (in this process) as any write of it does.
#[derive(Debug)]
struct SqliteUpload {
    /// `None` only while a step runs on the blocking pool.
    conn: Option<Connection>,
    /// One of the store's turns, held while the upload lasts.
    _permit: tokio::sync::OwnedSemaphorePermit,
    namespace: String,
    key: String,
    /// Chunks staged.
    chunks: i64,
    /// Bytes staged.
    size: u64,
    /// The store's count of writes under way (see [`give_way`]).
    writers: Arc<AtomicUsize>,
}

impl SqliteUpload {
    /// Runs `work` with the upload's connection on the blocking pool.
    async fn step<T, F>(&mut self, work: F) -> Result<T>
    where
        F: FnOnce(&mut Connection) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        let mut conn = self
            .conn
            .take()
            .ok_or_else(|| Error::Unavailable("SQLite upload already failed".to_owned()))?;
        let (conn, result) = tokio::task::spawn_blocking(move || {
            let result = work(&mut conn);
            (conn, result)
        })
        .await
        .map_err(|e| Error::Unavailable(format!("SQLite worker failed: {e}")))?;
        self.conn = Some(conn);
        result
    }
}

#[async_trait]
impl StoreUpload for SqliteUpload {
    async fn append(&mut self, chunk: &[u8]) -> Result<()> {
        let (seq, chunk) = (self.chunks, chunk.to_vec());
        let len = chunk.len() as u64;
        self.step(move |conn| {
            conn.execute(
                "INSERT INTO temp.mountfs_upload (seq, chunk) VALUES (?1, ?2)",
                params![seq, chunk],
            )
            .map_err(map_error)?;
            Ok(())
        })
        .await?;
        self.chunks += 1;
        self.size += len;
        Ok(())
    }

    async fn finish(
        mut self: Box<Self>,
        condition: PutCondition,
        encoding: Encoding,
    ) -> Result<Written> {
        let _turn = WriterTurn::new(&self.writers);
        let (ns, key, size) = (self.namespace.clone(), self.key.clone(), self.size);
        self.step(move |conn| {
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(map_error)?;
            let size = i64::try_from(size).unwrap_or(i64::MAX);
            // The row is put as binary zeros of the right size (its index entry: none), the
            // content written into it chunk by chunk, and only then marked UTF-8 when it is,
            // which has the index's trigger index the real text.
            let written = put_sized_in(&tx, &ns, &key, size, condition)?;
            let rowid: i64 = tx
                .query_row(
                    "SELECT rowid FROM mountfs_items WHERE namespace = ?1 AND key = ?2",
                    params![ns, key],
                    |row| row.get(0),
                )
                .map_err(map_error)?;
            {
                let mut blob = tx
                    .blob_open(rusqlite::MAIN_DB, "mountfs_items", "content", rowid, false)
                    .map_err(map_error)?;
                let mut chunks = tx
                    .prepare("SELECT chunk FROM temp.mountfs_upload ORDER BY seq")
                    .map_err(map_error)?;
                let mut rows = chunks.query([]).map_err(map_error)?;
                let mut at = 0usize;
                while let Some(row) = rows.next().map_err(map_error)? {
                    let chunk = row.get_ref(0).map_err(map_error)?;
                    let bytes = chunk.as_blob().map_err(|e| map_error(e.into()))?;
                    blob.write_at(bytes, at).map_err(map_error)?;
                    at += bytes.len();
                }
                if at as u64 != u64::try_from(size).unwrap_or(0) {
                    return Err(Error::Query(format!(
                        "SQLite upload: {at} bytes staged, {size} expected"
                    )));
                }
            }
            if encoding == Encoding::Utf8 {
                tx.execute(
                    "UPDATE mountfs_items SET encoding = ?2 WHERE rowid = ?1",
                    params![rowid, encoding.as_str()],
                )
                .map_err(map_error)?;
            }
            tx.commit().map_err(map_error)?;
            Ok(written)
        })
        .await
        // The connection (and its temporary table) closes with the upload.
    }

    async fn abort(self: Box<Self>) {
        // Closing the connection drops its temporary table.
        drop(self);
    }
}

/// The background build of the search index for a store that existed before it (issue 28):
/// batch after batch of [`BUILD_BATCH`] items in rowid order, each in its own short write
/// transaction that also records how far it came, so a build killed half-way loses nothing and
/// the next open resumes it. Readers never wait (WAL); a writer waits for one batch at most.
/// Stops when the store is dropped.
async fn build_index(shared: Weak<Shared>) {
    let mut indexed: u64 = 0;
    let mut total: Option<u64> = None;
    let mut batches: u64 = 0;
    loop {
        let Some(strong) = shared.upgrade() else {
            return;
        };
        let store = SqliteStore { shared: strong };
        if total.is_none() {
            let count = store
                .run(|conn| {
                    conn.query_row("SELECT count(*) FROM mountfs_items", [], |row| {
                        row.get::<_, i64>(0)
                    })
                    .map_err(map_error)
                })
                .await;
            let count = count.ok().and_then(|n| u64::try_from(n).ok()).unwrap_or(0);
            tracing::info!(
                items = count,
                "SQLite store: building the search index in the background (grep scans until it is ready)"
            );
            total = Some(count);
        }
        give_way(&store.shared.writers).await;
        let started = tokio::time::Instant::now();
        let step = store.run(build_step).await;
        let took = started.elapsed();
        match step {
            Ok(Some(added)) => {
                indexed += added;
                batches += 1;
                if batches.is_multiple_of(40) {
                    tracing::info!(
                        indexed,
                        items = total.unwrap_or(0),
                        "SQLite store: building the search index"
                    );
                }
            }
            Ok(None) => {
                store.shared.index_ready.store(true, Ordering::Release);
                tracing::info!(indexed, "SQLite store: the search index is ready");
                return;
            }
            Err(error) => {
                tracing::warn!(
                    %error,
                    "SQLite store: building the search index failed; grep scans until the next start, which resumes the build"
                );
                return;
            }
        }
        drop(store);
        tokio::time::sleep(pause_after(took)).await;
    }
}

/// Waits (at most [`GIVE_WAY_MAX`]) until no write of this process is waiting for the write
/// lock or holding it, before the folder or the build takes it for a batch: such a writer waits
/// for the batch under way at most, never for the next ones.
async fn give_way(writers: &AtomicUsize) {
    let started = tokio::time::Instant::now();
    while writers.load(Ordering::Acquire) > 0 && started.elapsed() < GIVE_WAY_MAX {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// How long the folder or the build pauses after a batch that held the write lock for `took`:
/// as long again, and at least [`BATCH_PAUSE_MIN`]. A writer of another process (which
/// [`give_way`] cannot see) polls the lock with SQLite's busy handler, whose sleeps grow to
/// 100 ms: with the lock free at least half of the time, each of its tries finds it free about
/// every other time, whatever the batches cost. With a 2 ms pause it found the lock taken
/// nearly every time, and waited through the whole fold or build, past the busy timeout.
fn pause_after(took: Duration) -> Duration {
    took.max(BATCH_PAUSE_MIN)
}

/// Adds the next batch of items to the search index: how many, or `None` when every item is in.
fn build_step(conn: &mut Connection) -> Result<Option<u64>> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(map_error)?;
    let built: i64 = tx
        .query_row("SELECT built_upto FROM mountfs_text_index", [], |row| {
            row.get(0)
        })
        .map_err(map_error)?;
    if built == INDEX_COMPLETE {
        return Ok(None);
    }
    let next: Vec<(i64, i64)> = {
        let mut stmt = tx
            .prepare_cached(
                "SELECT rowid, CASE WHEN encoding = 'utf-8' AND size <= 1048576 THEN size ELSE 0 END
                 FROM mountfs_items WHERE rowid > ?1 ORDER BY rowid LIMIT ?2",
            )
            .map_err(map_error)?;
        let rows = stmt
            .query_map(params![built, BUILD_BATCH], |row| {
                Ok((row.get(0)?, row.get(1)?))
            })
            .map_err(map_error)?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
            .map_err(map_error)?
    };
    let batch = within_tokenize_budget(&next);
    let (upto, added) = match batch.last() {
        None => (INDEX_COMPLETE, None),
        Some((last, _)) => {
            let rowids: Vec<i64> = batch.iter().map(|(rowid, _)| *rowid).collect();
            (*last, Some(add_to_index(&tx, &rowids)?))
        }
    };
    tx.execute(
        "UPDATE mountfs_text_index SET built_upto = ?1",
        params![upto],
    )
    .map_err(map_error)?;
    tx.commit().map_err(map_error)?;
    Ok(added)
}

/// The folder: moves the items writes left in `mountfs_text_pending` into the search index,
/// [`FOLD_BATCH`] per transaction, once writes pause for [`FOLD_QUIET`] (at most
/// [`FOLD_MAX_WAIT`] after a write woke it), or every [`FOLD_POLL`]. Until an item is folded a search reads it whatever the index says, so the
/// folder's pace changes how many candidates a search confirms, never its answer. Stops when
/// the store is dropped.
async fn fold_pending(shared: Weak<Shared>, wake: Arc<Notify>) {
    // The store file as it was after the last look: a poll that finds it unchanged (no other
    // process wrote) does not look again, so an idle server does no work every FOLD_POLL and
    // keeps no blocking-pool thread alive for it.
    let mut seen: Option<FileStamp> = None;
    loop {
        let woken_by_write = tokio::time::timeout(FOLD_POLL, wake.notified())
            .await
            .is_ok();
        if !woken_by_write {
            let Some(strong) = shared.upgrade() else {
                return;
            };
            let now = FileStamp::of(&strong.file);
            drop(strong);
            if now.is_some() && now == seen {
                continue;
            }
        }
        let woken = tokio::time::Instant::now();
        while woken.elapsed() < FOLD_MAX_WAIT
            && tokio::time::timeout(FOLD_QUIET, wake.notified())
                .await
                .is_ok()
        {}
        loop {
            let Some(strong) = shared.upgrade() else {
                return;
            };
            // Taken before the step: a step that finds nothing to fold writes nothing, so a
            // later change of the stamp is another writer's.
            let before_step = FileStamp::of(&strong.file);
            let store = SqliteStore { shared: strong };
            give_way(&store.shared.writers).await;
            let started = tokio::time::Instant::now();
            let step = store.run(fold_step).await;
            let took = started.elapsed();
            match step {
                Ok(0) => {
                    seen = before_step;
                    break;
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(
                        %error,
                        "SQLite store: folding writes into the search index failed; searches read those items until it succeeds"
                    );
                    break;
                }
            }
            drop(store);
            tokio::time::sleep(pause_after(took)).await;
        }
    }
}

/// The size and modification time of a store file and of its write-ahead log: what changes
/// when any process commits to it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileStamp {
    file: (u64, Option<std::time::SystemTime>),
    wal: Option<(u64, Option<std::time::SystemTime>)>,
}

impl FileStamp {
    /// The stamp of `file` now, or `None` when it cannot be read (then the folder looks).
    fn of(file: &std::path::Path) -> Option<Self> {
        let facts = |path: &std::path::Path| {
            std::fs::metadata(path)
                .ok()
                .map(|meta| (meta.len(), meta.modified().ok()))
        };
        let mut wal = file.as_os_str().to_owned();
        wal.push("-wal");
        Some(Self {
            file: facts(file)?,
            wal: facts(std::path::Path::new(&wal)),
        })
    }
}

/// Folds the first [`FOLD_BATCH`] pending items (fewer when their text exceeds
/// [`TOKENIZE_BYTES_PER_TRANSACTION`]) into the search index, in one transaction:
/// each item's old trigrams out (by rowid: the table is contentless), its current content's
/// in when it still exists as UTF-8 text. Returns how many were folded.
fn fold_step(conn: &mut Connection) -> Result<usize> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(map_error)?;
    let pending: Vec<(i64, i64)> = {
        let mut stmt = tx
            .prepare_cached(
                "SELECT p.item, CASE WHEN i.encoding = 'utf-8' AND i.size <= 1048576
                     THEN i.size ELSE 0 END
                 FROM mountfs_text_pending AS p LEFT JOIN mountfs_items AS i ON i.rowid = p.item
                 ORDER BY p.item LIMIT ?1",
            )
            .map_err(map_error)?;
        let rows = stmt
            .query_map(params![FOLD_BATCH], |row| {
                Ok((row.get(0)?, row.get::<_, Option<i64>>(1)?.unwrap_or(0)))
            })
            .map_err(map_error)?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
            .map_err(map_error)?
    };
    let items: Vec<i64> = within_tokenize_budget(&pending)
        .iter()
        .map(|(item, _)| *item)
        .collect();
    let Some(last) = items.last().copied() else {
        return Ok(0);
    };
    fold_items(&tx, &items)?;
    tx.execute(
        "DELETE FROM mountfs_text_pending WHERE item <= ?1",
        params![last],
    )
    .map_err(map_error)?;
    tx.commit().map_err(map_error)?;
    Ok(items.len())
}

/// The first of `items` (rowid, bytes of text to tokenize), in order, whose bytes add up to at
/// most [`TOKENIZE_BYTES_PER_TRANSACTION`] — at least the first one.
fn within_tokenize_budget(items: &[(i64, i64)]) -> &[(i64, i64)] {
    let mut total = 0i64;
    let mut take = 0;
    for (index, (_, bytes)) in items.iter().enumerate() {
        total = total.saturating_add(*bytes);
        if index > 0 && total > TOKENIZE_BYTES_PER_TRANSACTION {
            break;
        }
        take = index + 1;
    }
    &items[..take]
}

/// The rowids the search index finds for `terms`, as one `SELECT` of a column `item`, with its
/// FTS5 queries as named parameters (`:t1`, `:t2`, …) pushed onto `queries`. A substring
/// (squeezed, see store/plan.rs) is all of its trigrams in the trigram table and, when it has
/// joins, all of their words in the table of joins (neither table keeps positions, so the
/// matcher confirms the order); each quoted.
fn index_select(terms: &Terms, queries: &mut Vec<(String, String)>) -> String {
    let quoted = |token: &str| format!("\"{}\"", token.replace('"', "\"\""));
    let mut param = |query: String| {
        let name = format!(":t{}", queries.len() + 1);
        queries.push((name.clone(), query));
        name
    };
    match terms {
        Terms::Substring(text) => {
            let grams: Vec<String> = trigrams(text).iter().map(|g| quoted(g)).collect();
            let mut sql = format!(
                "SELECT rowid AS item FROM mountfs_items_squeezed WHERE mountfs_items_squeezed MATCH {}",
                param(grams.join(" AND "))
            );
            let words: Vec<String> = join_words(text).iter().map(|w| quoted(w)).collect();
            if !words.is_empty() {
                sql.push_str(&format!(
                    " INTERSECT SELECT rowid AS item FROM mountfs_items_joins WHERE mountfs_items_joins MATCH {}",
                    param(words.join(" AND "))
                ));
            }
            sql
        }
        Terms::All(parts) | Terms::Any(parts) => {
            let joint = match terms {
                Terms::All(_) => " INTERSECT ",
                _ => " UNION ",
            };
            let parts: Vec<String> = parts
                .iter()
                .map(|part| format!("SELECT item FROM ({})", index_select(part, queries)))
                .collect();
            parts.join(joint)
        }
    }
}

/// A [`Store::put`] of `size` zero bytes, as binary, inside the transaction `tx` (which holds
/// the write lock): the row an upload then writes its content into (see [`SqliteUpload`]).
fn put_sized_in(
    tx: &rusqlite::Transaction<'_>,
    ns: &str,
    key: &str,
    size: i64,
    condition: PutCondition,
) -> Result<Written> {
    put_row_in(
        tx,
        ns,
        key,
        Encoding::Binary,
        size,
        &ZeroContent(size),
        condition,
    )
}

/// The content `zeroblob(N)` as a statement parameter.
struct ZeroContent(i64);

impl rusqlite::ToSql for ZeroContent {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        let len =
            u64::try_from(self.0).map_err(|e| rusqlite::Error::ToSqlConversionFailure(e.into()))?;
        Ok(rusqlite::types::ToSqlOutput::ZeroBlob(len))
    }
}

/// A [`Store::put`] inside the transaction `tx` (which holds the write lock). Past
/// [`PENDING_BOUND`] pending items the write folds its own item (see [`fold_own_item`]).
fn put_in(
    tx: &rusqlite::Transaction<'_>,
    ns: &str,
    key: &str,
    content: &[u8],
    condition: PutCondition,
) -> Result<Written> {
    let size = i64::try_from(content.len()).unwrap_or(i64::MAX);
    let written = put_row_in(
        tx,
        ns,
        key,
        Encoding::of(content),
        size,
        &content,
        condition,
    )?;
    fold_own_item(tx, ns, key)?;
    Ok(written)
}

/// When more than [`PENDING_BOUND`] items are pending (writes outpace the folder, which gives
/// way to them: a bulk load), folds the item just written in the write's own transaction, as
/// every write did before the folder — unless its text is over
/// [`TOKENIZE_BYTES_PER_TRANSACTION`] (the folder takes it: no write holds the lock for
/// longer than one of its batches). Bounds what every search reads beyond its index
/// candidates, and what the folder has left to do once the load ends; writes below the bound
/// cost what they did.
fn fold_own_item(tx: &rusqlite::Transaction<'_>, ns: &str, key: &str) -> Result<()> {
    let backlog: i64 = tx
        .prepare_cached("SELECT count(*) FROM (SELECT 1 FROM mountfs_text_pending LIMIT ?1)")
        .and_then(|mut stmt| stmt.query_row(params![PENDING_BOUND + 1], |row| row.get(0)))
        .map_err(map_error)?;
    if backlog <= PENDING_BOUND {
        return Ok(());
    }
    let own: Option<i64> = tx
        .prepare_cached(
            "SELECT p.item FROM mountfs_items AS i JOIN mountfs_text_pending AS p
                 ON p.item = i.rowid
             WHERE i.namespace = ?1 AND i.key = ?2 AND i.size <= ?3",
        )
        .and_then(|mut stmt| {
            stmt.query_row(params![ns, key, TOKENIZE_BYTES_PER_TRANSACTION], |row| {
                row.get(0)
            })
            .optional()
        })
        .map_err(map_error)?;
    if let Some(item) = own {
        fold_items(tx, &[item])?;
        tx.execute(
            "DELETE FROM mountfs_text_pending WHERE item = ?1",
            params![item],
        )
        .map_err(map_error)?;
    }
    Ok(())
}

/// Moves `items` (rowids) into the search index: each one's old entries out (by rowid: the
/// tables are contentless), its current content's in when it still exists as UTF-8 text.
fn fold_items(tx: &rusqlite::Transaction<'_>, items: &[i64]) -> Result<()> {
    let mut remove_text = tx
        .prepare_cached("DELETE FROM mountfs_items_squeezed WHERE rowid = ?1")
        .map_err(map_error)?;
    let mut remove_joins = tx
        .prepare_cached("DELETE FROM mountfs_items_joins WHERE rowid = ?1")
        .map_err(map_error)?;
    for item in items {
        remove_text.execute(params![item]).map_err(map_error)?;
        remove_joins.execute(params![item]).map_err(map_error)?;
    }
    add_to_index(tx, items)?;
    Ok(())
}

/// Adds each of `items` (rowids) that is UTF-8 text of at most 1 MiB to the search index
/// (which holds none of them): its [`squeeze`]d text to the trigram table, its
/// [`join_words`] to the table of joins. Returns how many were added.
fn add_to_index(tx: &rusqlite::Transaction<'_>, items: &[i64]) -> Result<u64> {
    let mut read = tx
        .prepare_cached(
            "SELECT content FROM mountfs_items
             WHERE rowid = ?1 AND encoding = 'utf-8' AND size <= 1048576",
        )
        .map_err(map_error)?;
    let mut add_text = tx
        .prepare_cached("INSERT INTO mountfs_items_squeezed (rowid, content) VALUES (?1, ?2)")
        .map_err(map_error)?;
    let mut add_joins = tx
        .prepare_cached("INSERT INTO mountfs_items_joins (rowid, content) VALUES (?1, ?2)")
        .map_err(map_error)?;
    let mut added = 0;
    for item in items {
        let content: Option<Vec<u8>> = read
            .query_row(params![item], |row| row.get(0))
            .optional()
            .map_err(map_error)?;
        let Some(content) = content else { continue };
        // A row marked UTF-8 whose bytes are not (only a foreign writer makes one) is indexed
        // as the matcher reads it.
        let text = match std::str::from_utf8(&content) {
            Ok(text) => Cow::Borrowed(text),
            Err(_) => decode_lossy(&content),
        };
        let squeezed = squeeze(&text);
        add_text
            .execute(params![item, squeezed.as_ref()])
            .map_err(map_error)?;
        let words = join_words(&squeezed);
        if !words.is_empty() {
            add_joins
                .execute(params![item, words.join(" ")])
                .map_err(map_error)?;
        }
        added += 1;
    }
    Ok(added)
}

/// The distinct [`join_word`]s of a squeezed text, sorted.
pub fn join_words(squeezed: &str) -> Vec<String> {
    let mut words: Vec<String> = joins(squeezed).map(join_word).collect();
    words.sort_unstable();
    words.dedup();
    words
}

/// A join (see store/plan.rs) as one word of the joins table: `j` and six hex digits, 24 bits
/// of a hash (FNV-1a) of its characters with ASCII letters in lower case. Two joins share a
/// word about once in 16 million: a search then reads an extra candidate.
pub fn join_word(join: [char; 4]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut buf = [0u8; 4];
    for c in join {
        for byte in c.to_ascii_lowercase().encode_utf8(&mut buf).bytes() {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
        hash = (hash ^ 0xff).wrapping_mul(0x0100_0000_01b3);
    }
    format!("j{:06x}", (hash ^ (hash >> 32)) & 0xff_ffff)
}

/// The row of a put: `content` (bytes, or zeros of the size) under `condition`.
fn put_row_in(
    tx: &rusqlite::Transaction<'_>,
    ns: &str,
    key: &str,
    encoding: Encoding,
    size: i64,
    content: &dyn rusqlite::ToSql,
    condition: PutCondition,
) -> Result<Written> {
    let now = to_micros(SystemTime::now());
    let encoding = encoding.as_str();
    let version: i64 = tx
        .query_row(
            "UPDATE mountfs_counters SET value = value + 1 WHERE name = 'version' RETURNING value",
            [],
            |row| row.get(0),
        )
        .map_err(map_error)?;
    let insert = |tx: &rusqlite::Transaction<'_>| {
        tx.execute(
            "INSERT INTO mountfs_items
                         (namespace, key, encoding, size, created_at, modified_at, version, content)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?5, ?6, ?7)
                     ON CONFLICT (namespace, key) DO NOTHING",
            params![ns, key, encoding, size, now, version, content],
        )
        .map_err(map_error)
    };
    let update = |tx: &rusqlite::Transaction<'_>, expected: Option<i64>| {
        tx.execute(
            "UPDATE mountfs_items
                     SET encoding = ?3, size = ?4, modified_at = ?5, version = ?6, content = ?7
                     WHERE namespace = ?1 AND key = ?2 AND (?8 IS NULL OR version = ?8)",
            params![ns, key, encoding, size, now, version, content, expected],
        )
        .map_err(map_error)
    };
    let created = match condition {
        PutCondition::CreateOnly => {
            if insert(tx)? == 0 {
                return Err(Error::AlreadyExists);
            }
            true
        }
        PutCondition::IfVersion(expected) => {
            if update(tx, Some(expected))? == 0 {
                return Err(Error::VersionMismatch);
            }
            false
        }
        PutCondition::Overwrite => {
            if update(tx, None)? == 0 {
                insert(tx)?;
                true
            } else {
                false
            }
        }
    };
    Ok(Written { version, created })
}

#[cfg(test)]
mod tests {
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
