//! Uploads: a content staged chunk by chunk in a temporary table of the upload's own
//! connection, then put into the item's row in one statement.

use super::*;

/// What an upload's `finish` puts as the content: the staged chunks joined on the server.
pub(super) const STAGED_CONTENT: &str =
    "(SELECT COALESCE(string_agg(chunk, ''::bytea ORDER BY seq), ''::bytea) FROM mountfs_upload)";

/// A content staged chunk by chunk in a temporary table, inside one transaction of a
/// connection of its own (see [`Store::begin_upload`]); `finish` joins the chunks on the
/// server, in the statement that puts the item, and commits.
#[derive(Debug)]
pub(super) struct PostgresUpload {
    pub(super) store: PostgresStore,
    /// `None` once finished or aborted; a connection dropped with its transaction still open
    /// is closed, not given back to the pool (the server then rolls it back).
    pub(super) client: Option<deadpool_postgres::Client>,
    pub(super) namespace: String,
    pub(super) key: String,
    pub(super) chunks: i64,
    pub(super) size: u64,
    /// Every byte staged so far while they are few enough to be indexed
    /// ([`MAX_INDEXED_BYTES`]): the item's trigrams are computed from them at `finish`, as
    /// `put` computes them; `None` once the content is larger (it is not indexed).
    pub(super) indexed: Option<Vec<u8>>,
}

impl Drop for PostgresUpload {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            drop(deadpool_postgres::Client::take(client));
        }
    }
}

impl PostgresUpload {
    pub(super) fn client(&self) -> Result<&deadpool_postgres::Client> {
        self.client
            .as_ref()
            .ok_or_else(|| Error::Unavailable("PostgreSQL upload already ended".to_owned()))
    }

    /// Runs one statement of `finish` in the upload's transaction.
    pub(super) async fn run(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>> {
        self.client()?
            .query(sql, params)
            .await
            .map_err(|e| self.store.map_conflict(e))
    }

    /// Puts the staged content under `condition` through the statement `put` runs, with the
    /// content joined from the staged chunks; the transaction is still open. Says also
    /// whether the item was left behind for the pass (as `put` leaves it, see [`INDEXES`]).
    pub(super) async fn put_staged(
        &self,
        condition: PutCondition,
        encoding: Encoding,
    ) -> Result<(Written, bool)> {
        let fields = WriteFields::new(
            (&self.namespace, &self.key),
            encoding,
            self.size,
            self.indexed.as_deref(),
            self.store.defer_indexing(0),
            to_micros(SystemTime::now()),
        );
        let kind = WriteKind::of(&condition);
        let rows = self
            .run(
                write_statement(kind, ContentSource::Staged),
                &write_params(&fields, &condition),
            )
            .await?;
        Ok((written_of(kind, &rows)?, !fields.stamped))
    }
}

#[async_trait]
impl StoreUpload for PostgresUpload {
    async fn append(&mut self, chunk: &[u8]) -> Result<()> {
        let seq = self.chunks;
        let client = self.client()?;
        client
            .execute(
                "INSERT INTO mountfs_upload (seq, chunk) VALUES ($1, $2)",
                &[&seq, &chunk],
            )
            .await
            .map_err(|e| self.store.map_error(e))?;
        self.chunks += 1;
        self.size += chunk.len() as u64;
        if self.size > MAX_INDEXED_BYTES {
            self.indexed = None;
        } else if let Some(indexed) = &mut self.indexed {
            indexed.extend_from_slice(chunk);
        }
        Ok(())
    }

    async fn finish(
        mut self: Box<Self>,
        condition: PutCondition,
        encoding: Encoding,
    ) -> Result<Written> {
        let staged = self.put_staged(condition, encoding).await;
        let client = self.client()?;
        let ended = match &staged {
            Ok(_) => client.batch_execute("COMMIT").await,
            Err(_) => client.batch_execute("ROLLBACK").await,
        };
        if let (Ok((_, deferred)), Ok(())) = (&staged, &ended) {
            self.store.pass.changed(1);
            if *deferred {
                self.store.pass.deferred(1);
            }
        }
        let written = staged.map(|(written, _)| written);
        match ended {
            // The transaction is over: the connection can serve others again.
            Ok(()) => drop(self.client.take()),
            Err(error) if written.is_ok() => return Err(self.store.map_error(error)),
            Err(_) => {}
        }
        written
    }

    async fn abort(mut self: Box<Self>) {
        if let Ok(client) = self.client()
            && client.batch_execute("ROLLBACK").await.is_ok()
        {
            drop(self.client.take());
        }
    }
}
