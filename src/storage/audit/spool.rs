//! The audit log's spool: how a change is logged without the edit waiting for the database.
//!
//! Appending an entry to SQLite or PostgreSQL inside the call cost an edit 15–20% (SQLite) and
//! 30–45% (PostgreSQL) of its time (BENCHMARKS.md). So a finished call hands its entry to the
//! spool ([`Spool::record`]): one line of JSON appended to this server's own spool file — a
//! `write` to the page cache, microseconds — and the call answers. A shipper task
//! ([`Spool::ship`]) writes what was recorded to the database in the order recorded, in
//! batches (one transaction each), and empties the file when it has caught up.
//!
//! What the spool keeps, and when:
//! - A recorded entry survives a crash of mountfs (the line is in the file; the kernel writes it
//!   out): the next server that uses the same spool directory finds the file of a server that
//!   is gone (no one holds its lock), writes its entries to the log and removes it. Each entry
//!   has a key (`<server>-<seq>`) the log keeps in a unique column, so an entry written just
//!   before the crash, while its line was still in the file, is not written twice.
//! - Like the SQLite log's `synchronous = NORMAL` and the PostgreSQL log's asynchronous
//!   commits, a power loss may lose the last moments' entries (the file is not fsync'ed).
//! - While the database does not answer, entries wait in the spool (at most
//!   [`Spool::max_bytes`] of them, kept in memory too) and are written when it answers again;
//!   stderr says so once per outage, and each answer says its change is waiting. A change
//!   that cannot be recorded (the spool is full, its file cannot be written) is not logged: the
//!   caller warns, counts it, and the answer says so.
//! - `history` first waits (briefly) for the server's own recorded entries to be written, so
//!   it shows every change the server answered; [`Spool::drain`] does the same at shutdown.
//!
//! Spool files live in one owner-only directory per log (`<log file>-spool/` beside a SQLite
//! log; under the data directory for a PostgreSQL log — without one, changes are written inside
//! their calls as before), each named `<pid>-<start time>.spool`, owner-only, and locked
//! (`flock`) by its server for as long as it runs.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::Change;

/// The most bytes of entries a spool holds unwritten by default (`--audit-spool-max`).
pub const DEFAULT_MAX_BYTES: u64 = 16 * 1024 * 1024;
/// The most entries one transaction writes.
const BATCH: usize = 200;
/// The most bytes of entries (as spooled) one transaction writes, but for a single larger one.
const BATCH_BYTES: u64 = 4 * 1024 * 1024;
/// Bytes of written entries the file may keep before it is rewritten with only the waiting
/// ones (it is emptied whenever nothing waits, which is the usual case).
const COMPACT_AFTER: u64 = 4 * 1024 * 1024;
/// The longest pause between two tries of a database that does not answer.
const MAX_RETRY: Duration = Duration::from_secs(2);
/// How long the shipper lets entries gather before it writes them (unless `history`, a full
/// batch or shutdown hurries it): one transaction then carries every change of that time, so
/// its cost (the database's locks and writes, a round trip, waking a thread) is shared
/// instead of paid by each edit; on a small machine that cost competes with the edits for the
/// same cores (BENCHMARKS.md).
const GATHER: Duration = Duration::from_millis(20);
/// An empty spool file no server holds is removed once it is this old (younger, it may be
/// one a server is creating).
const STALE_EMPTY: Duration = Duration::from_secs(60);
/// How long `history` waits for this server's recorded entries to be written.
pub const FLUSH_WAIT: Duration = Duration::from_secs(5);

/// Why a change could not be recorded.
#[derive(Debug, Error)]
pub enum SpoolError {
    /// The entries waiting for the database fill the spool.
    #[error(
        "the audit log's spool is full ({waiting} change(s), {bytes} bytes waiting for {engine}, which does not answer: {why}); changes are logged again once it answers"
    )]
    Full {
        /// How many changes wait.
        waiting: usize,
        /// Their bytes.
        bytes: u64,
        /// The database.
        engine: String,
        /// Its last error.
        why: String,
    },
    /// The spool file could not be written.
    #[error("the audit log's spool file {file} cannot be written: {error}")]
    Io {
        /// The file.
        file: String,
        /// What the system said.
        error: io::Error,
    },
}

/// Why a batch could not be written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShipError {
    /// The database cannot be reached or used now (connection lost, locked, a schema it must
    /// be upgraded for): the entries wait and the batch is tried again.
    Unavailable(String),
    /// The database refused an entry of the batch: the entries are then written one at a time,
    /// and one it refuses on its own is dropped (a warning and the not-logged counter), so that
    /// one entry cannot hold back every later one.
    Rejected(String),
}

impl std::fmt::Display for ShipError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unavailable(why) | Self::Rejected(why) => f.write_str(why),
        }
    }
}

/// One line of a spool file.
#[derive(Debug, Serialize, Deserialize)]
struct Line {
    key: String,
    change: Change,
}

/// An entry recorded and not yet written to the database.
#[derive(Debug)]
struct Waiting {
    seq: u64,
    key: String,
    change: Change,
    bytes: u64,
}

/// The spool file and what waits in it, under one lock (records keep their order).
#[derive(Debug)]
struct Inner {
    file: File,
    next_seq: u64,
    waiting: VecDeque<Waiting>,
    waiting_bytes: u64,
    file_bytes: u64,
}

/// How far the shipper has come.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Progress {
    /// Last sequence number recorded.
    recorded: u64,
    /// Last sequence number written to the database.
    shipped: u64,
    /// Why the database does not take entries now; `None` while it does.
    failing: Option<String>,
    /// Tries to write to the database so far (each batch, each retry).
    attempts: u64,
}

/// The spool of one server (see the module doc).
#[derive(Debug)]
pub struct Spool {
    dir: PathBuf,
    path: PathBuf,
    server: String,
    engine: String,
    max_bytes: u64,
    /// [`COMPACT_AFTER`] (smaller in tests).
    compact_after: u64,
    inner: Mutex<Inner>,
    /// Something was recorded (or the spool closes).
    wake: tokio::sync::Notify,
    /// Write now, without gathering: a reader or shutdown waits.
    hurry: tokio::sync::Notify,
    progress: tokio::sync::watch::Sender<Progress>,
    closed: AtomicBool,
    /// Entries the database refused on their own (see [`ShipError::Rejected`]).
    dropped: std::sync::atomic::AtomicU64,
}

/// Where a log's spool files go: `<file>-spool/` beside a SQLite log; for a PostgreSQL log, a
/// directory named after its address under `<data dir>/mountfs/audit-spool/`. `None`: no spool
/// (`--audit off`, or a PostgreSQL log without a data directory: a shared temporary directory
/// could be prepared by another user, so each change is then written inside its call).
pub fn dir_for(target: &super::AuditTarget, data_dir: Option<&Path>) -> Option<PathBuf> {
    match target {
        super::AuditTarget::Off => None,
        super::AuditTarget::Sqlite(file) => {
            let mut name = file.file_name()?.to_os_string();
            name.push("-spool");
            Some(file.with_file_name(name))
        }
        super::AuditTarget::Postgres(url) => {
            use sha2::Digest;
            let digest = sha2::Sha256::digest(url.as_bytes());
            let name = format!("postgres-{}", hex::encode(&digest[..8]));
            Some(data_dir?.join("mountfs").join("audit-spool").join(name))
        }
    }
}

impl Spool {
    /// Creates this server's spool file in `dir` (made, owner-only, if missing) and locks it.
    /// `engine` names the database in messages.
    pub fn create(dir: &Path, engine: &str, max_bytes: u64) -> io::Result<Self> {
        let started = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let server = format!("{}-{started:x}", std::process::id());
        let path = dir.join(format!("{server}.spool"));
        // A server that stops removes the directory when it is empty: made again if it went
        // between the two steps.
        let mut tries = 0;
        let file = loop {
            // Owner-only: entries hold diffs of the files changed.
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)?;
            match open_locked(&path) {
                Err(error) if error.kind() == io::ErrorKind::NotFound && tries < 3 => tries += 1,
                opened => break opened?,
            }
        };
        Ok(Self {
            dir: dir.to_owned(),
            path,
            server,
            engine: engine.to_owned(),
            max_bytes,
            compact_after: COMPACT_AFTER,
            inner: Mutex::new(Inner {
                file,
                next_seq: 1,
                waiting: VecDeque::new(),
                waiting_bytes: 0,
                file_bytes: 0,
            }),
            wake: tokio::sync::Notify::new(),
            hurry: tokio::sync::Notify::new(),
            progress: tokio::sync::watch::Sender::new(Progress::default()),
            closed: AtomicBool::new(false),
            dropped: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// The spool file, for messages.
    pub fn file(&self) -> &Path {
        &self.path
    }

    /// Records `change` (already sanitized): appended to the file and queued for the shipper.
    /// Returns why the database is not taking entries now, if it is not (the change then waits).
    pub fn record(&self, change: Change) -> Result<Option<String>, SpoolError> {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let seq = inner.next_seq;
        let key = format!("{}-{seq}", self.server);
        let line = Line { key, change };
        let mut bytes = serde_json::to_vec(&line).map_err(|e| self.io_error(e.into()))?;
        bytes.push(b'\n');
        let size = bytes.len() as u64;
        if inner.waiting_bytes + size > self.max_bytes {
            let progress = self.progress.borrow();
            return Err(SpoolError::Full {
                waiting: inner.waiting.len(),
                bytes: inner.waiting_bytes,
                engine: self.engine.clone(),
                why: progress
                    .failing
                    .clone()
                    .unwrap_or_else(|| "it is slower than the changes".to_owned()),
            });
        }
        if let Err(error) = inner.file.write_all(&bytes) {
            // A line cut short would spoil the next: the file goes back to its last whole line.
            let _ = inner.file.set_len(inner.file_bytes);
            return Err(self.io_error(error));
        }
        inner.file_bytes += size;
        inner.next_seq += 1;
        inner.waiting_bytes += size;
        inner.waiting.push_back(Waiting {
            seq,
            key: line.key,
            change: line.change,
            bytes: size,
        });
        drop(inner);
        let mut failing = None;
        self.progress.send_modify(|p| {
            // Two records may reach this in either order.
            p.recorded = p.recorded.max(seq);
            failing.clone_from(&p.failing);
        });
        self.wake.notify_one();
        Ok(failing)
    }

    /// How many recorded changes wait for the database.
    pub fn waiting(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .waiting
            .len()
    }

    /// Why the database does not take entries now (`None`: it does).
    pub fn failing(&self) -> Option<String> {
        self.progress.borrow().failing.clone()
    }

    /// Waits at most `wait` until every change recorded before this call is in the database,
    /// or the database fails. Returns whether they are all there.
    /// A database that was failing gets one more try first.
    pub async fn flushed(&self, wait: Duration) -> bool {
        let (target, tried) = {
            let now = self.progress.borrow();
            (now.recorded, now.attempts)
        };
        let mut watch = self.progress.subscribe();
        self.wake.notify_one();
        self.hurry.notify_one();
        let done = tokio::time::timeout(
            wait,
            watch.wait_for(|p| p.shipped >= target || (p.failing.is_some() && p.attempts > tried)),
        )
        .await;
        matches!(done, Ok(Ok(p)) if p.shipped >= target)
    }

    /// At shutdown: waits at most `wait` for the recorded changes to be written, then stops the
    /// shipper. What is still waiting stays in the file for the next server.
    pub async fn drain(&self, wait: Duration) {
        if !self.flushed(wait).await {
            let waiting = self.waiting();
            if waiting > 0 {
                tracing::warn!(
                    waiting,
                    spool = %self.path.display(),
                    "audit log: change(s) not yet written to {} stay in the spool; the next server using this log writes them",
                    self.engine
                );
            }
        }
        self.close();
        // The process may end before the shipper runs again: the empty file goes now.
        self.remove_if_empty();
    }

    /// Removes the spool file when nothing waits in it, and the directory when no other
    /// server uses it (removing a directory that is not empty fails).
    fn remove_if_empty(&self) {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if inner.waiting.is_empty() {
            let _ = std::fs::remove_file(&self.path);
            let _ = std::fs::remove_dir(&self.dir);
        }
    }

    /// Stops the shipper (it finishes the batch it is writing).
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.wake.notify_one();
        self.hurry.notify_one();
    }

    /// The shipper: writes recorded entries with `write` (one transaction per batch, in order)
    /// until [`Self::close`], retrying a database that fails (backing off up to [`MAX_RETRY`];
    /// only `history` or shutdown hurry it, not each new change); first adopts the spool files
    /// of servers that are gone. Removes its own file when it ends with nothing waiting.
    pub async fn ship<W, F>(self: Arc<Self>, write: W)
    where
        W: Fn(Vec<(String, Change)>) -> F + Send + Sync,
        F: std::future::Future<Output = Result<(), ShipError>> + Send,
    {
        let mut adopted = false;
        let mut retry = Duration::from_millis(50);
        loop {
            if !adopted {
                adopted = self.adopt_orphans(&write).await.is_ok();
            }
            let waiting = self.waiting();
            if waiting > 0 && waiting < BATCH && !self.closed.load(Ordering::Acquire) {
                let _ = tokio::time::timeout(GATHER, self.hurry.notified()).await;
            }
            let batch = self.next_batch();
            let closed = self.closed.load(Ordering::Acquire);
            if batch.is_empty() && adopted {
                if closed {
                    break;
                }
                self.wake.notified().await;
                continue;
            }
            let written = adopted && self.write_batch(&write, batch).await;
            if written {
                retry = Duration::from_millis(50);
                continue;
            }
            if closed {
                break;
            }
            let _ = tokio::time::timeout(retry, self.hurry.notified()).await;
            retry = (retry * 2).min(MAX_RETRY);
        }
        self.remove_if_empty();
    }

    /// Writes `batch` (the front of the queue); when the database refuses it, its entries one
    /// at a time, dropping those it refuses on their own. Returns whether the database took
    /// them (false: it is unavailable; what is left waits).
    async fn write_batch<W, F>(&self, write: &W, batch: Vec<(u64, String, Change)>) -> bool
    where
        W: Fn(Vec<(String, Change)>) -> F,
        F: std::future::Future<Output = Result<(), ShipError>>,
    {
        let last = batch.last().map_or(0, |w| w.0);
        let count = batch.len();
        let lines = batch
            .into_iter()
            .map(|(_, key, change)| (key, change))
            .collect();
        match write(lines).await {
            Ok(()) => {
                self.shipped(last);
                return true;
            }
            Err(ShipError::Unavailable(why)) => {
                self.failed(&why);
                return false;
            }
            Err(ShipError::Rejected(_)) => {}
        }
        // The same entries again (only this task takes entries off the queue), one at a time.
        for (seq, key, change) in self.next_batch().into_iter().take(count) {
            let path = change
                .files
                .first()
                .map(|f| f.path.clone())
                .unwrap_or_default();
            match write(vec![(key, change)]).await {
                Ok(()) => self.shipped(seq),
                Err(ShipError::Rejected(why)) => {
                    let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                    tracing::warn!(%path, error = %why, dropped, "audit log: {} refused an entry; it is not logged", self.engine);
                    self.shipped(seq);
                }
                Err(ShipError::Unavailable(why)) => {
                    self.failed(&why);
                    return false;
                }
            }
        }
        true
    }

    /// Changes the database refused, so not logged (added to the log's not-logged count).
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// The first waiting entries, at most [`BATCH`] of them and [`BATCH_BYTES`] (but at least
    /// one), left in the queue until written.
    fn next_batch(&self) -> Vec<(u64, String, Change)> {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let mut bytes = 0;
        inner
            .waiting
            .iter()
            .take(BATCH)
            .take_while(|w| {
                let first = bytes == 0;
                bytes += w.bytes;
                first || bytes <= BATCH_BYTES
            })
            .map(|w| (w.seq, w.key.clone(), w.change.clone()))
            .collect()
    }

    /// Entries up to `last` are in the database: out of the queue; the file emptied when
    /// nothing waits, or rewritten when it holds much that is written.
    fn shipped(&self, last: u64) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        while inner.waiting.front().is_some_and(|w| w.seq <= last) {
            if let Some(done) = inner.waiting.pop_front() {
                inner.waiting_bytes -= done.bytes;
            }
        }
        if inner.waiting.is_empty() {
            if inner.file.set_len(0).is_ok() {
                inner.file_bytes = 0;
            }
        } else if inner.file_bytes - inner.waiting_bytes > self.compact_after
            && let Err(error) = self.compact(&mut inner)
        {
            tracing::warn!(spool = %self.path.display(), %error, "audit log: cannot rewrite the spool file; it is rewritten when nothing waits");
        }
        drop(inner);
        let recovered = self.progress.borrow().failing.is_some();
        self.progress.send_modify(|p| {
            p.shipped = last;
            p.failing = None;
            p.attempts += 1;
        });
        if recovered {
            tracing::info!(
                "audit log: {} answers again; the changes that waited are written",
                self.engine
            );
        }
    }

    /// The database failed: said on stderr once per outage; `history` stops waiting.
    fn failed(&self, error: &str) {
        let first = self.progress.borrow().failing.is_none();
        self.progress.send_modify(|p| {
            p.failing = Some(error.to_owned());
            p.attempts += 1;
        });
        if first {
            tracing::warn!(
                spool = %self.path.display(),
                waiting = self.waiting(),
                %error,
                "audit log: cannot write to {}; changes wait in the spool and are written when it answers again",
                self.engine
            );
        }
    }

    /// Rewrites the file with only the waiting entries: a new locked file renamed over it.
    fn compact(&self, inner: &mut Inner) -> io::Result<()> {
        let fresh = self.path.with_extension("spool-new");
        let _ = std::fs::remove_file(&fresh);
        let mut file = open_locked(&fresh)?;
        let mut bytes = 0;
        for waiting in &inner.waiting {
            let line = Line {
                key: waiting.key.clone(),
                change: waiting.change.clone(),
            };
            let mut text = serde_json::to_vec(&line)?;
            text.push(b'\n');
            file.write_all(&text)?;
            bytes += text.len() as u64;
        }
        std::fs::rename(&fresh, &self.path)?;
        inner.file = file;
        inner.file_bytes = bytes;
        Ok(())
    }

    /// Writes the entries of spool files whose servers are gone (their lock is free), then
    /// removes those files. Lines that do not parse (a crash mid-write) are skipped.
    async fn adopt_orphans<W, F>(&self, write: &W) -> Result<(), ()>
    where
        W: Fn(Vec<(String, Change)>) -> F,
        F: std::future::Future<Output = Result<(), ShipError>>,
    {
        let Ok(listing) = std::fs::read_dir(&self.dir) else {
            return Ok(());
        };
        let mut result = Ok(());
        for item in listing.flatten() {
            let path = item.path();
            if path == self.path
                || path
                    .extension()
                    .is_none_or(|e| e != "spool" && e != "spool-new")
            {
                continue;
            }
            let Ok(file) = OpenOptions::new().read(true).write(true).open(&path) else {
                continue;
            };
            if rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive)
                .is_err()
            {
                continue; // its server runs
            }
            // An empty file may be one a server has just created and not yet locked (it waits
            // for this lock): left alone, unless it is old enough to be a gone server's.
            let meta = file.metadata();
            if meta.as_ref().is_ok_and(|m| m.len() == 0) {
                let age = meta
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.elapsed().ok())
                    .unwrap_or_default();
                if age > STALE_EMPTY {
                    let _ = std::fs::remove_file(&path);
                }
                continue;
            }
            // Streamed, a batch at a time: memory stays bounded whatever the file's size.
            let mut batch = Vec::new();
            let (mut count, mut skipped) = (0, 0);
            let mut written = true;
            let mut reader = io::BufReader::new(&file).split(b'\n');
            loop {
                let end = match reader.next() {
                    Some(Ok(text)) => {
                        match serde_json::from_slice::<Line>(&text) {
                            Ok(line) => batch.push((line.key, line.change)),
                            Err(_) => skipped += 1,
                        }
                        false
                    }
                    Some(Err(_)) => {
                        skipped += 1;
                        true
                    }
                    None => true,
                };
                if batch.len() >= BATCH || (end && !batch.is_empty()) {
                    count += batch.len();
                    let lines = std::mem::take(&mut batch);
                    if let Err(refused) = self.adopt_batch(write, lines).await {
                        self.failed(&refused);
                        written = false;
                        break;
                    }
                }
                if end {
                    break;
                }
            }
            if !written {
                result = Err(());
                continue;
            }
            let _ = std::fs::remove_file(&path);
            tracing::info!(
                spool = %path.display(),
                written = count,
                skipped,
                "audit log: wrote the changes a server that stopped had left in its spool"
            );
        }
        result
    }

    /// Writes an adopted batch; when the database refuses it, line by line, skipping the lines
    /// it refuses on their own. `Err`: the database is unavailable.
    async fn adopt_batch<W, F>(&self, write: &W, lines: Vec<(String, Change)>) -> Result<(), String>
    where
        W: Fn(Vec<(String, Change)>) -> F,
        F: std::future::Future<Output = Result<(), ShipError>>,
    {
        match write(lines.clone()).await {
            Ok(()) => return Ok(()),
            Err(ShipError::Unavailable(why)) => return Err(why),
            Err(ShipError::Rejected(_)) => {}
        }
        for line in lines {
            match write(vec![line]).await {
                Ok(()) => {}
                Err(ShipError::Unavailable(why)) => return Err(why),
                Err(ShipError::Rejected(why)) => {
                    tracing::warn!(error = %why, "audit log: {} refused an entry left in a spool; it is not logged", self.engine);
                }
            }
        }
        Ok(())
    }

    fn io_error(&self, error: io::Error) -> SpoolError {
        SpoolError::Io {
            file: self.path.display().to_string(),
            error,
        }
    }
}

/// A new spool file, owner-only, appended to, locked for this process's lifetime. The lock is
/// waited for: another server's adopter may hold it for a moment while it looks at the empty
/// new file (and leaves it alone).
fn open_locked(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .create_new(true)
        .append(true)
        .read(true)
        .mode(0o600)
        .open(path)?;
    rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::audit::{ClientInfo, FileChange};

    fn change(path: &str) -> Change {
        Change {
            time: SystemTime::now(),
            principal: "p".into(),
            workspace: "w".into(),
            client: ClientInfo::default(),
            tool: "write_file".into(),
            request_id: "1".into(),
            files: vec![FileChange {
                path: path.into(),
                before: None,
                after: Some("v".into()),
            }],
            more_files: 0,
            lines_added: 1,
            lines_removed: 0,
            summary: "Created".into(),
            command: None,
            exit_code: None,
            diff: "+x\n".into(),
            diff_truncated: false,
            private: false,
        }
    }

    type Written = Arc<Mutex<Vec<(String, String)>>>;

    /// A shipper writing into `written` (key, path); fails while `down` is set.
    fn start(spool: &Arc<Spool>, written: &Written, down: &Arc<AtomicBool>) {
        let (written, down) = (written.clone(), down.clone());
        tokio::spawn(spool.clone().ship(move |batch| {
            let (written, down) = (written.clone(), down.clone());
            async move {
                if down.load(Ordering::SeqCst) {
                    return Err(ShipError::Unavailable("database down".to_owned()));
                }
                let mut written = written.lock().unwrap();
                for (key, change) in batch {
                    written.push((key, change.files[0].path.clone()));
                }
                Ok(())
            }
        }));
    }

    fn paths(written: &Written) -> Vec<String> {
        written
            .lock()
            .unwrap()
            .iter()
            .map(|w| w.1.clone())
            .collect()
    }

    #[test]
    fn each_log_has_its_own_spool_directory() {
        use crate::storage::audit::AuditTarget;
        let data = Path::new("/home/u/.local/share");
        assert_eq!(
            dir_for(&AuditTarget::Sqlite("/var/log/a.db".into()), Some(data)),
            Some(PathBuf::from("/var/log/a.db-spool"))
        );
        let one = dir_for(
            &AuditTarget::Postgres("postgres://h/db1".into()),
            Some(data),
        )
        .unwrap();
        let two = dir_for(
            &AuditTarget::Postgres("postgres://h/db2".into()),
            Some(data),
        )
        .unwrap();
        assert_eq!(
            one.parent(),
            Some(Path::new("/home/u/.local/share/mountfs/audit-spool"))
        );
        assert!(one.to_string_lossy().contains("/postgres-"), "{one:?}");
        assert_ne!(one, two);
        assert_eq!(
            dir_for(&AuditTarget::Postgres("postgres://h/db".into()), None),
            None
        );
        assert_eq!(dir_for(&AuditTarget::Off, Some(data)), None);
    }

    #[tokio::test]
    async fn recorded_changes_are_written_in_order_and_the_file_is_emptied() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Arc::new(Spool::create(dir.path(), "test db", DEFAULT_MAX_BYTES).unwrap());
        let (written, down) = (Written::default(), Arc::new(AtomicBool::new(false)));
        start(&spool, &written, &down);
        for i in 0..300 {
            assert_eq!(spool.record(change(&format!("/f{i}"))).unwrap(), None);
        }
        assert!(
            std::fs::metadata(spool.file()).unwrap().len() > 0,
            "recorded in the file"
        );
        assert!(spool.flushed(Duration::from_secs(5)).await);
        let expected: Vec<String> = (0..300).map(|i| format!("/f{i}")).collect();
        assert_eq!(paths(&written), expected);
        let keys: std::collections::BTreeSet<String> = written
            .lock()
            .unwrap()
            .iter()
            .map(|w| w.0.clone())
            .collect();
        assert_eq!(keys.len(), 300, "one key per change");
        assert_eq!(std::fs::metadata(spool.file()).unwrap().len(), 0, "emptied");
        spool.drain(Duration::from_secs(1)).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!dir.path().exists() || std::fs::read_dir(dir.path()).unwrap().next().is_none());
    }

    #[tokio::test]
    async fn while_the_database_is_down_changes_wait_up_to_the_limit_then_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Arc::new(Spool::create(dir.path(), "test db", 4096).unwrap());
        let (written, down) = (Written::default(), Arc::new(AtomicBool::new(true)));
        start(&spool, &written, &down);
        assert_eq!(spool.record(change("/a")).unwrap(), None);
        assert!(
            !spool.flushed(Duration::from_secs(5)).await,
            "the database failed"
        );
        let why = spool.record(change("/b")).unwrap();
        assert_eq!(why.as_deref(), Some("database down"));
        let mut refused = None;
        for i in 0..100 {
            match spool.record(change(&format!("/c{i}"))) {
                Ok(_) => {}
                Err(error) => {
                    refused = Some(error.to_string());
                    break;
                }
            }
        }
        let refused = refused.expect("4 KiB fills up");
        assert!(
            refused.contains("spool is full") && refused.contains("database down"),
            "{refused}"
        );
        let waiting = spool.waiting();
        down.store(false, Ordering::SeqCst);
        assert!(spool.flushed(Duration::from_secs(5)).await);
        assert_eq!(
            paths(&written).len(),
            waiting,
            "every change that waited is written"
        );
        assert_eq!(spool.failing(), None);
    }

    #[tokio::test]
    async fn an_entry_the_database_refuses_is_dropped_and_the_others_are_written() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Arc::new(Spool::create(dir.path(), "test db", DEFAULT_MAX_BYTES).unwrap());
        let written = Written::default();
        let into = written.clone();
        tokio::spawn(spool.clone().ship(move |batch| {
            let into = into.clone();
            async move {
                if batch.iter().any(|(_, c)| c.files[0].path == "/poison") {
                    return Err(ShipError::Rejected("invalid byte sequence".to_owned()));
                }
                let mut into = into.lock().unwrap();
                into.extend(batch.into_iter().map(|(k, c)| (k, c.files[0].path.clone())));
                Ok(())
            }
        }));
        for path in ["/a", "/poison", "/b"] {
            spool.record(change(path)).unwrap();
        }
        assert!(spool.flushed(Duration::from_secs(5)).await);
        assert_eq!(paths(&written), ["/a", "/b"]);
        assert_eq!(spool.dropped(), 1);
        assert_eq!(spool.waiting(), 0, "nothing is held back");
        spool.record(change("/c")).unwrap();
        assert!(spool.flushed(Duration::from_secs(5)).await);
        assert_eq!(paths(&written), ["/a", "/b", "/c"]);
    }

    #[tokio::test]
    async fn a_transaction_carries_at_most_4_mib_of_entries_unless_one_is_larger() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Arc::new(Spool::create(dir.path(), "test db", 64 << 20).unwrap());
        let sizes = Arc::new(Mutex::new(Vec::new()));
        let into = sizes.clone();
        let down = Arc::new(AtomicBool::new(true));
        let held = down.clone();
        tokio::spawn(spool.clone().ship(move |batch| {
            let (into, held) = (into.clone(), held.clone());
            async move {
                if held.load(Ordering::SeqCst) {
                    return Err(ShipError::Unavailable("down".to_owned()));
                }
                into.lock().unwrap().push(batch.len());
                Ok(())
            }
        }));
        // While the database is down, five entries of 1.2 MB pile up (4 bytes per line as
        // JSON), then one of 5 MB.
        for i in 0..6 {
            let mut big = change(&format!("/b{i}"));
            big.diff = "+x\n".repeat(if i == 5 { 1_250_000 } else { 300_000 });
            spool.record(big).unwrap();
        }
        down.store(false, Ordering::SeqCst);
        assert!(spool.flushed(Duration::from_secs(5)).await);
        assert_eq!(*sizes.lock().unwrap(), [3, 2, 1]);
    }

    #[tokio::test]
    async fn files_of_gone_servers_are_adopted_and_a_new_empty_one_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let line = serde_json::to_string(&Line {
            key: "gone-1".to_owned(),
            change: change("/left"),
        })
        .unwrap();
        std::fs::write(dir.path().join("gone.spool"), format!("{line}\n")).unwrap();
        // Another server's file it has just created and not yet locked.
        std::fs::write(dir.path().join("starting.spool"), "").unwrap();
        let old = dir.path().join("crashed.spool");
        std::fs::write(&old, "").unwrap();
        File::options()
            .write(true)
            .open(&old)
            .unwrap()
            .set_modified(SystemTime::now() - Duration::from_secs(600))
            .unwrap();
        // A running server's file: locked, never touched.
        let running = open_locked(&dir.path().join("running.spool")).unwrap();
        std::fs::write(dir.path().join("running.spool"), format!("{line}\n")).unwrap();

        let spool = Arc::new(Spool::create(dir.path(), "test db", DEFAULT_MAX_BYTES).unwrap());
        let (written, down) = (Written::default(), Arc::new(AtomicBool::new(false)));
        start(&spool, &written, &down);
        spool.record(change("/mine")).unwrap();
        assert!(spool.flushed(Duration::from_secs(5)).await);
        assert_eq!(paths(&written), ["/left", "/mine"]);
        assert!(!dir.path().join("gone.spool").exists());
        assert!(!old.exists(), "an old empty file is litter");
        assert!(dir.path().join("starting.spool").exists());
        assert!(dir.path().join("running.spool").exists());
        drop(running);
    }

    #[tokio::test]
    async fn a_file_holding_mostly_written_entries_is_rewritten_with_the_waiting_ones() {
        let dir = tempfile::tempdir().unwrap();
        let mut spool = Spool::create(dir.path(), "test db", DEFAULT_MAX_BYTES).unwrap();
        spool.compact_after = 1;
        let spool = Arc::new(spool);
        // The first write records two more changes while it runs: after it, the file holds
        // three entries of which one is written.
        let recorder = spool.clone();
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (calls2, file) = (calls.clone(), spool.file().to_owned());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let seen2 = seen.clone();
        tokio::spawn(spool.clone().ship(move |batch| {
            let (recorder, calls, seen, file) = (
                recorder.clone(),
                calls2.clone(),
                seen2.clone(),
                file.clone(),
            );
            async move {
                if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                    recorder.record(change("/b")).unwrap();
                    recorder.record(change("/c")).unwrap();
                } else {
                    // Before the second write: the file was rewritten with the waiting two.
                    let text = std::fs::read_to_string(&file).unwrap();
                    seen.lock().unwrap().push(text.lines().count());
                }
                let _ = batch;
                Ok(())
            }
        }));
        spool.record(change("/a")).unwrap();
        assert!(spool.flushed(Duration::from_secs(5)).await);
        assert!(spool.flushed(Duration::from_secs(5)).await);
        assert_eq!(*seen.lock().unwrap(), [2]);
        assert_eq!(std::fs::metadata(spool.file()).unwrap().len(), 0);
        // The rewritten file is still this server's, locked.
        let other = File::open(spool.file()).unwrap();
        assert!(
            rustix::fs::flock(&other, rustix::fs::FlockOperation::NonBlockingLockExclusive)
                .is_err()
        );
    }
}
