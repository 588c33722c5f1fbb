//! Range reads of large items: through incremental blob I/O on a pooled connection, or a
//! sequential reader that keeps one snapshot open while a copy walks an item from start to end.

use super::*;

/// Items larger than this get a [`SequentialReader`] once a range of them was read and more
/// remain: a copy reads such an item range after range (issue 27).
pub(super) const SEQUENTIAL_READ_BYTES: u64 = 1 << 20;
/// Sequential readers open at once per store: a copy reads one file at a time; two let two
/// copies out of one store keep theirs. Each is a connection outside the pool's
/// [`MAX_CONNECTIONS`] (it only reads: it never waits for the writer, nor the writer for it).
pub(super) const MAX_READERS: usize = 2;
/// How long a sequential reader waits for its next range before it closes: its read
/// transaction keeps the WAL from being checkpointed past it while it is open.
pub(super) const READER_IDLE: Duration = Duration::from_secs(2);

/// How many bytes a range of `len` from `offset` holds in a value of `size` bytes.
pub(super) fn range_len(size: u64, offset: u64, len: usize) -> usize {
    let start = offset.min(size);
    usize::try_from((size - start).min(len as u64)).unwrap_or(len)
}

/// The bytes of a range of a value of `size` bytes through its blob handle.
pub(super) fn read_blob(
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
pub(super) fn page_fetches(conn: &Connection) -> u64 {
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
pub(super) struct SequentialReader {
    namespace: String,
    key: String,
    version: i64,
    requests: std::sync::mpsc::Sender<RangeRequest>,
}

/// One range asked of a [`SequentialReader`].
#[derive(Debug)]
pub(super) struct RangeRequest {
    offset: u64,
    len: usize,
    reply: tokio::sync::oneshot::Sender<Result<Vec<u8>>>,
}

/// The thread of a [`SequentialReader`]: opens a connection and a read transaction, checks
/// the item has the version, opens its blob, and answers ranges until it closes. If any of
/// that fails it ends without answering, and the ranges are read on pooled connections
/// (which report a missing item or another version themselves).
pub(super) fn serve_ranges(
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

impl SqliteStore {
    /// The range through this item version's [`SequentialReader`], if one is open: `None`
    /// when there is none (or it closed meanwhile), and the caller reads on a pooled
    /// connection. The reader reads a snapshot taken when it opened, in which the item had
    /// `version`; the version is then checked against the item as it is now, so a change made
    /// since is reported exactly as on the pooled path.
    pub(super) async fn read_sequentially(
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
    pub(super) fn start_reader(&self, namespace: String, key: String, version: i64) {
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
    pub(super) fn close_reader(&self, ns: &str, key: &str, version: i64) {
        self.shared
            .readers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|r| !(r.version == version && r.key == key && r.namespace == ns));
    }
}
