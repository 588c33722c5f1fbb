//! Uploads: a content staged chunk by chunk in a temporary table of its own connection, then
//! written into the item's row in one write transaction.

use super::*;

/// The most content one item holds: SQLite refuses a string, blob or row longer than
/// SQLITE_LIMIT_LENGTH (1,000,000,000 in the bundled build, never raised here) with "string or
/// blob too big"; the row's other columns take a little of it.
pub(super) const LARGEST_VALUE: u64 = 1_000_000_000 - 64 * 1024;

/// A content staged chunk by chunk in a temporary table of a connection of its own (see
/// [`Store::begin_upload`]), then written into the item's row by incremental blob I/O in one
/// write transaction: the process never holds more than one chunk. One limit: a UTF-8 item
/// is added to the search index by the index's trigger, which has SQLite read the whole text
/// (in this process) as any write of it does.
#[derive(Debug)]
pub(super) struct SqliteUpload {
    /// `None` only while a step runs on the blocking pool.
    pub(super) conn: Option<Connection>,
    /// One of the store's turns, held while the upload lasts.
    pub(super) _permit: tokio::sync::OwnedSemaphorePermit,
    pub(super) namespace: String,
    pub(super) key: String,
    /// Chunks staged.
    pub(super) chunks: i64,
    /// Bytes staged.
    pub(super) size: u64,
    /// The store's count of writes under way (see [`give_way`]).
    pub(super) writers: Arc<AtomicUsize>,
}

impl SqliteUpload {
    /// Runs `work` with the upload's connection on the blocking pool.
    pub(super) async fn step<T, F>(&mut self, work: F) -> Result<T>
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
