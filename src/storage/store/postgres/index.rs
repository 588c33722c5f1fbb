//! The PostgreSQL store's search index (issue 28): trigram keys of every UTF-8 item under a
//! partial GIN index, built in the background, kept up by a pass over the items left behind,
//! the planner's statistics kept current after large changes, and the candidates' condition.

use super::*;

/// The search index (issue 28), made by the server that finds it missing, in the background
/// and outside the schema migrations (a server of an older release sharing the database keeps
/// working): each index is made when it is missing or left invalid by a build that was killed.
///
/// Every UTF-8 item keeps, in the column `text_keys`, the distinct trigrams of its bytes with
/// every run of whitespace squeezed to one space and ASCII letters in lower case (three bytes
/// as one 24-bit `INTEGER`: no hash, no collision), and the joins around each space (see
/// store/plan.rs and [`text_keys`]), computed in Rust ([`text_keys_of`]). `text_keys_version`
/// is the version they were computed for. A write leaves them behind `version` (`NULL`) and such an item is a candidate of every
/// search until the background pass ([`index_behind`]) computes them, soon after writes pause:
/// the write costs about what it did before the index, and every answer is exact at every
/// commit. A server of an older release leaves its writes behind the same way.
/// A GIN index over the `text_keys` that are not `NULL` answers `text_keys @> ARRAY[…]`
/// (containment: exact, so the database never reads an item's content to find the
/// candidates; the operator is strict, so PostgreSQL knows the partial index holds every row
/// it can match); case-sensitive searches use the same folded trigrams, and the matcher
/// confirms every candidate. Partial, so that a write leaving its item behind does not touch
/// it at all: a GIN over every row took a key for each `NULL` (appended to its pending list,
/// under the lock of its metapage), which was most of what a write paid for the index
/// (EXPLAIN ANALYZE of an edit: 0.28 ms against 0.21 ms without the index, 0.23 ms with the
/// partial one).
/// The three others: the items whose trigrams are behind, the items that are not UTF-8, and
/// sizes (items too large for their lines to be searched are candidates whatever they hold).
pub(super) const INDEXES: &[(&str, &str)] = &[
    (
        "mountfs_items_text_keys",
        "CREATE INDEX CONCURRENTLY mountfs_items_text_keys ON mountfs_items USING gin (text_keys)
             WHERE text_keys IS NOT NULL",
    ),
    (
        "mountfs_items_text_keys_behind",
        "CREATE INDEX CONCURRENTLY mountfs_items_text_keys_behind ON mountfs_items (namespace, key)
             WHERE (text_keys_version IS DISTINCT FROM version) IS TRUE",
    ),
    (
        "mountfs_items_not_utf8",
        "CREATE INDEX CONCURRENTLY mountfs_items_not_utf8 ON mountfs_items (namespace, key)
             WHERE encoding <> 'utf-8'",
    ),
    (
        "mountfs_items_size",
        "CREATE INDEX CONCURRENTLY mountfs_items_size ON mountfs_items (namespace, size)",
    ),
];
/// Indexes of earlier builds of the search index, dropped once the indexes above are ready
/// (they would only slow writes down): the `pg_trgm` index, the GIN over every row's
/// `trigrams`, `NULL` or not, and the two over the `trigrams` of the text as it is (before
/// whitespace was squeezed and joins kept: [`OLD_STATISTICS`]).
pub(super) const OLD_INDEXES: &[&str] = &[
    "mountfs_items_trgm",
    "mountfs_items_trigrams",
    "mountfs_items_trigram_keys",
    "mountfs_items_trigrams_behind",
];
/// The statistics of the earlier build (see [`OLD_INDEXES`]), dropped with its indexes. Its
/// columns (`trigrams`, `trigrams_version`) stay: a server of that build sharing the database
/// keeps writing them (dropping them would make its writes fail); docs/mounts.md says how to
/// drop them once every server is upgraded.
pub(super) const OLD_STATISTICS: &str =
    "DROP STATISTICS IF EXISTS mountfs_items_trigrams_behind_stats";
/// What lets the planner know how few items are behind (else it guesses nearly all, and reads
/// the whole table rather than the partial index `mountfs_items_text_keys_behind`); the
/// queries and the index say `(… IS DISTINCT FROM …) IS TRUE`, the form these statistics are
/// looked up for.
pub(super) const BEHIND_STATISTICS: &str =
    "CREATE STATISTICS IF NOT EXISTS mountfs_items_text_keys_behind_stats
    ON ((text_keys_version IS DISTINCT FROM version)) FROM mountfs_items;
    ANALYZE mountfs_items";
/// Items larger than this are not given trigrams (their array would outgrow the index's use):
/// they are candidates of every search.
pub const MAX_INDEXED_BYTES: u64 = 1 << 20;
/// [`MAX_INDEXED_BYTES`] as the `size` column's type.
pub(super) const MAX_INDEXED_SIZE: i64 = 1 << 20;
/// Items given their trigrams per statement of the background pass.
pub(super) const BACKFILL_BATCH: i64 = 64;
/// How many items may be behind (read in full by every search) before a write computes its
/// item's trigrams itself, as every write did before the pass: bounds what a search confirms
/// beyond its index candidates (~0.1 ms an item) under writes the pass cannot keep up with.
/// Counted by each server over the whole table, plus its own writes since it last counted
/// (so several servers writing at once may each add up to this many before they count again).
pub const MAX_BEHIND: i64 = 256;
/// How long writes must pause before the pass indexes them: a burst of writes is indexed
/// after it, together, and its writers do not compete with the pass meanwhile.
pub(super) const PASS_QUIET: Duration = Duration::from_millis(50);
/// The longest the pass waits for writes to pause: under steady writes it runs at least this
/// often.
pub(super) const PASS_MAX_WAIT: Duration = Duration::from_secs(1);
/// How often the pass looks for items behind without being woken by this server's writes
/// (those of another server that stopped before indexing them, or of an older release): one
/// probe of the partial index `mountfs_items_text_keys_behind`.
pub(super) const PASS_POLL: Duration = Duration::from_secs(10);
/// The planner's view of the table is refreshed (`ANALYZE mountfs_items`, by the background
/// pass, off the write path) once at least this many rows were changed since it was last
/// taken, and at least a tenth of the rows it counted (issue 45): PostgreSQL plans the search's
/// candidates query on the statistics of the last `ANALYZE`, and statistics taken when the
/// table was nearly empty (the index build analyses it) made it scan the primary key and filter
/// every row of a namespace filled since (257 ms against 11 ms for a literal over 20,000 files)
/// rather than ask the trigram index. Autovacuum would do the same, when it is on, a minute or
/// more later. The changes counted are this server's own (at once) and the table's
/// `n_mod_since_analyze` (every server's, as PostgreSQL's statistics know them, a second or
/// more later).
pub const ANALYZE_MIN_CHANGES: i64 = 500;
/// The shortest time between two `ANALYZE`s by one server: a table rewritten without pause is
/// analysed at most this often (each one samples up to 30,000 rows).
pub(super) const ANALYZE_MIN_INTERVAL: Duration = Duration::from_secs(5);
/// The table's statistics: rows as the last `ANALYZE` (or `VACUUM`, or index build) counted
/// them, rows changed since, by every server, and whether this role may analyse it (it owns
/// the table; else `ANALYZE` would only warn, in the database's log, every time).
pub(super) const TABLE_STATISTICS: &str = "SELECT GREATEST(c.reltuples, 0)::float8,
        COALESCE(s.n_mod_since_analyze, 0)::bigint, pg_has_role(c.relowner, 'MEMBER')
    FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
    WHERE c.oid = to_regclass('mountfs_items')";
/// How soon the pass tries again when another server's pass (or the index build) holds
/// [`INDEX_LOCK`] and items are behind.
pub(super) const PASS_RETRY: Duration = Duration::from_millis(250);
/// The items behind after `($1, $2)` in key order, at most $3, with what the pass needs to
/// index them. An item too large to be indexed (over $4 bytes) is stamped without its content
/// being fetched: a 300 MiB upload must not pass through this process whole.
pub(super) static BEHIND_ROWS: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "SELECT namespace, key, version, encoding, size,
            CASE WHEN size <= $4 THEN {CONTENT} END FROM mountfs_items
        WHERE (namespace, key) > ($1::text, $2::text)
          AND (text_keys_version IS DISTINCT FROM version) IS TRUE
        ORDER BY namespace, key LIMIT $3"
    )
});
/// The columns of the search index, added to a table made before it (outside the numbered
/// migrations: an older server keeps working with the table and never sets them, which
/// leaves its writes behind, see [`INDEXES`]).
pub(super) const TRIGRAM_COLUMNS: &str = "ALTER TABLE mountfs_items
    ADD COLUMN IF NOT EXISTS text_keys INTEGER[],
    ADD COLUMN IF NOT EXISTS text_keys_version BIGINT";
/// Said once per process when the index cannot be made.
pub(super) static INDEX_WARNED: AtomicBool = AtomicBool::new(false);

/// What this server's writes and its background pass share.
#[derive(Debug, Default)]
pub(super) struct PassState {
    /// Wakes the pass after a write that left its item behind.
    wake: Notify,
    /// Items behind in the whole table, as the pass last counted them (at most
    /// [`MAX_BEHIND`] + 1: the count stops there).
    counted: AtomicI64,
    /// Writes this server left behind, ever (counted after their commit).
    deferred: AtomicI64,
    /// [`Self::deferred`] when [`Self::counted`] was taken (read before the count: a write
    /// both counted and added is counted twice, never not at all).
    deferred_at_count: AtomicI64,
    /// Rows this server's writes, moves and deletes changed, ever (counted after their
    /// commit).
    changed: AtomicI64,
    /// [`Self::changed`] when this server last analysed the table.
    changed_at_analyze: AtomicI64,
    /// The table's rows as its statistics last said (see [`ANALYZE_MIN_CHANGES`]).
    analyzed_rows: AtomicI64,
}

impl PassState {
    /// Whether a write may leave its item behind: fewer than [`MAX_BEHIND`] are, as far as
    /// this server knows, with `uncommitted` more left behind by the write's own transaction.
    pub(super) fn may_defer(&self, uncommitted: i64) -> bool {
        let since =
            self.deferred.load(Ordering::Acquire) - self.deferred_at_count.load(Ordering::Acquire);
        self.counted.load(Ordering::Acquire) + since + uncommitted < MAX_BEHIND
    }

    /// After `count` writes left their items behind and committed: counts them and wakes the
    /// pass.
    pub(super) fn deferred(&self, count: i64) {
        if count > 0 {
            self.deferred.fetch_add(count, Ordering::AcqRel);
            self.wake.notify_one();
        }
    }

    /// After `count` rows were written, moved or deleted and committed: counts them, and wakes
    /// the pass when the table's statistics are due to be taken again.
    pub(super) fn changed(&self, count: i64) {
        if count <= 0 {
            return;
        }
        let changed = self.changed.fetch_add(count, Ordering::AcqRel) + count;
        let since = changed - self.changed_at_analyze.load(Ordering::Acquire);
        if analyze_due(since, self.analyzed_rows.load(Ordering::Acquire)) {
            self.wake.notify_one();
        }
    }
}

/// Whether `changed` rows since the last `ANALYZE` of a table it counted `rows` in make its
/// statistics stale (see [`ANALYZE_MIN_CHANGES`]).
pub(super) fn analyze_due(changed: i64, rows: i64) -> bool {
    changed >= ANALYZE_MIN_CHANGES && changed.saturating_mul(10) >= rows
}

/// What a step of the background pass did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PassStep {
    /// Nothing is behind.
    Done,
    /// Indexed a batch; more may be behind.
    Indexed,
    /// Items are behind, and another server (or the index build) holds [`INDEX_LOCK`].
    Busy,
}

/// The background pass of one server: gives the items left behind by writes (see
/// [`INDEXES`]) their trigrams, [`BACKFILL_BATCH`] per transaction, once this server's writes
/// pause for [`PASS_QUIET`] (at most [`PASS_MAX_WAIT`] after a write woke it), every
/// [`PASS_POLL`] (another server's leftovers), at start-up and when the index build ends.
/// Servers sharing a database do not index the same items twice: a step runs under the
/// transaction-scoped advisory lock [`INDEX_LOCK`]; a server that finds it taken while items
/// are behind tries again after [`PASS_RETRY`] (the other may have finished just before this
/// server's write committed). Until an item is indexed every search reads it, so the pass's
/// pace changes how many candidates a search confirms, never its answer; writes wait for no
/// step (a step takes row locks only for its closing `UPDATE`). Does nothing while the index
/// is not built (searches scan; the build indexes what is behind). Stops when the store's
/// pool is dropped.
pub(super) async fn index_behind(
    pool: WeakPool,
    label: String,
    index_ready: Arc<AtomicBool>,
    pass: Arc<PassState>,
) {
    let mut first = true;
    // Said once per failure, not at every poll while the database is unreachable.
    let mut failing = false;
    // When this server last analysed the table, and how soon it may again when the statistics
    // are stale but were taken too recently.
    let mut analyzed: Option<tokio::time::Instant> = None;
    let mut analyze_in: Option<Duration> = None;
    loop {
        if !first {
            let poll = analyze_in.map_or(PASS_POLL, |wait| wait.min(PASS_POLL));
            let woken = tokio::time::timeout(poll, pass.wake.notified())
                .await
                .is_ok();
            let started = tokio::time::Instant::now();
            while woken
                && started.elapsed() < PASS_MAX_WAIT
                && tokio::time::timeout(PASS_QUIET, pass.wake.notified())
                    .await
                    .is_ok()
            {}
        }
        first = false;
        loop {
            let Some(pool) = pool.upgrade() else {
                return;
            };
            let store = PostgresStore {
                pool,
                label: label.clone(),
                index_ready: index_ready.clone(),
                pass: pass.clone(),
            };
            if !matches!(store.index_ready().await, Ok(true)) {
                break;
            }
            let step = store.pass_step().await;
            drop(store);
            if step.is_ok() {
                failing = false;
            }
            match step {
                Ok(PassStep::Done) => break,
                // Let writers in between batches.
                Ok(PassStep::Indexed) => tokio::time::sleep(Duration::from_millis(2)).await,
                Ok(PassStep::Busy) => tokio::time::sleep(PASS_RETRY).await,
                Err(error) => {
                    if !failing {
                        tracing::warn!(
                            %error,
                            "PostgreSQL at {label}: indexing recent writes failed; searches read those items until it succeeds"
                        );
                    }
                    failing = true;
                    break;
                }
            }
        }
        // Once the items behind are indexed: the planner's view of the table, kept current
        // after large changes (see [`ANALYZE_MIN_CHANGES`]).
        analyze_in = None;
        if index_ready.load(Ordering::Acquire)
            && let Some(pool) = pool.upgrade()
        {
            let store = PostgresStore {
                pool,
                label: label.clone(),
                index_ready: index_ready.clone(),
                pass: pass.clone(),
            };
            match store.analyze_if_stale(&mut analyzed).await {
                Ok(wait) => analyze_in = wait,
                Err(error) => tracing::debug!(
                    %error,
                    "PostgreSQL at {label}: taking the table's statistics failed; searches may be planned on old ones"
                ),
            }
        }
    }
}

/// The condition of `terms` over the `trigrams` column, the arrays pushed onto `params`: a
/// substring is there when all its trigrams are ([`text_keys_of`] of its bytes, folded as the
/// column is, whether or not the search ignores case: the matcher confirms).
pub(super) fn trigram_terms(
    terms: &Terms,
    params: &mut Vec<Box<dyn ToSql + Sync + Send>>,
) -> String {
    match terms {
        Terms::Substring(text) => {
            params.push(Box::new(text_keys(text.as_bytes())));
            format!("text_keys @> ${}::integer[]", params.len())
        }
        Terms::All(parts) | Terms::Any(parts) => {
            let joint = if matches!(terms, Terms::All(_)) {
                " AND "
            } else {
                " OR "
            };
            let parts: Vec<String> = parts.iter().map(|p| trigram_terms(p, params)).collect();
            format!("({})", parts.join(joint))
        }
    }
}

/// The trigrams stored for a content (see [`INDEXES`]): `None` for an item the index does
/// not hold (not UTF-8, or larger than [`MAX_INDEXED_BYTES`]).
pub fn text_keys_of(encoding: Encoding, content: &[u8]) -> Option<Vec<i32>> {
    indexable(encoding, content).then(|| content_keys(content))
}

/// The [`text_keys`] of an item's content, as the matcher reads it: a row marked UTF-8 whose
/// bytes are not (only a foreign writer makes one) is decoded as the matcher decodes it.
pub(super) fn content_keys(content: &[u8]) -> Vec<i32> {
    match std::str::from_utf8(content) {
        Ok(_) => text_keys(content),
        Err(_) => text_keys(decode_lossy(content).as_bytes()),
    }
}

/// Whether the index holds an item: UTF-8, at most [`MAX_INDEXED_BYTES`].
pub(super) fn indexable(encoding: Encoding, content: &[u8]) -> bool {
    encoding == Encoding::Utf8
        && u64::try_from(content.len()).is_ok_and(|len| len <= MAX_INDEXED_BYTES)
}

/// The keys the index holds of `bytes` (see store/plan.rs): the distinct trigrams of their
/// [`squeeze_bytes`] form with ASCII letters in lower case, each three bytes as one 24-bit
/// number (0 to 2^24 - 1), and its joins ([`byte_joins`]: the two bytes on each side of a
/// space), folded alike, each four bytes as one negative number (the top bit set: exact when
/// the first byte is ASCII, else it shares its key with one ASCII byte's, which only makes a
/// search read an extra candidate). In ascending order.
pub fn text_keys(bytes: &[u8]) -> Vec<i32> {
    let squeezed = squeeze_bytes(bytes);
    let mut keys: Vec<i32> = squeezed
        .windows(3)
        .map(|w| {
            i32::from(w[0].to_ascii_lowercase()) << 16
                | i32::from(w[1].to_ascii_lowercase()) << 8
                | i32::from(w[2].to_ascii_lowercase())
        })
        .collect();
    keys.extend(byte_joins(&squeezed).map(|join| {
        let folded = u32::from_be_bytes(join.map(|b| b.to_ascii_lowercase())) | 0x8000_0000;
        i32::from_ne_bytes(folded.to_ne_bytes())
    }));
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// An array as PostgreSQL's text form, `{1,2,3}`.
pub(super) fn array_text(keys: &[i32]) -> String {
    let mut text = String::with_capacity(keys.len() * 9 + 2);
    text.push('{');
    for (index, key) in keys.iter().enumerate() {
        if index > 0 {
            text.push(',');
        }
        text.push_str(&key.to_string());
    }
    text.push('}');
    text
}

impl PostgresStore {
    /// Whether the search index is built and valid (else grep scans).
    pub async fn index_ready(&self) -> Result<bool> {
        if self.index_ready.load(Ordering::Acquire) {
            return Ok(true);
        }
        let names: Vec<&str> = INDEXES.iter().map(|(name, _)| *name).collect();
        let rows = self
            .query(
                "SELECT count(*) FROM pg_index
                 WHERE indexrelid IN (SELECT to_regclass(n) FROM unnest($1::text[]) AS n)
                   AND indisvalid AND indisready",
                &[&names],
            )
            .await?;
        let valid: i64 = rows
            .first()
            .map(|row| column(row, 0))
            .transpose()?
            .unwrap_or(0);
        let ready = usize::try_from(valid).unwrap_or(0) == INDEXES.len();
        if ready {
            self.index_ready.store(true, Ordering::Release);
        }
        Ok(ready)
    }

    /// Builds the search index in the background (see [`INDEXES`]): `CREATE INDEX
    /// CONCURRENTLY`, so readers and writers are never blocked; an index left invalid by a
    /// killed build is dropped and made again. One server builds at a time (an advisory
    /// lock); the others scan until they find it valid. When the index cannot be made (the
    /// role may not create indexes, the database fails), the mount scans, and the log says why
    /// once.
    pub(super) async fn build_index(&self, was_ready: bool) {
        let warn = |why: String| {
            if !INDEX_WARNED.swap(true, Ordering::AcqRel) {
                tracing::warn!(
                    "PostgreSQL at {}: no search index, grep reads every file: {why}",
                    self.label
                );
            }
        };
        let pooled = match self.client().await {
            Ok(client) => client,
            Err(error) => return warn(error.to_string()),
        };
        let client = &pooled;
        let run = |sql: &'static str| async move {
            client
                .batch_execute(sql)
                .await
                .map_err(|e| self.map_error(e))
        };
        match client
            .query_one("SELECT pg_try_advisory_lock($1)", &[&INDEX_LOCK])
            .await
            .map(|row| row.try_get::<_, bool>(0))
        {
            Ok(Ok(true)) => {}
            // Another server is building it.
            Ok(_) => return,
            Err(error) => return warn(self.map_error(error).to_string()),
        }
        let built = self.build_index_locked(client, run).await;
        // Unlocking can only fail with the connection, which releases the lock too.
        let _ = client
            .execute("SELECT pg_advisory_unlock($1)", &[&INDEX_LOCK])
            .await;
        // Writes made during the build are behind: the pass indexes them now.
        self.pass.wake.notify_one();
        match built {
            Ok(()) if !was_ready => {
                tracing::info!("PostgreSQL at {}: the search index is ready", self.label)
            }
            Ok(()) => {}
            Err(why) => warn(why),
        }
    }

    /// Logs how far `CREATE INDEX CONCURRENTLY` of `name` is (PostgreSQL's own progress view).
    pub(super) async fn log_build_progress(&self, name: &str) {
        let Ok(rows) = self
            .query(
                "SELECT phase, blocks_done, blocks_total, tuples_done, tuples_total
                 FROM pg_stat_progress_create_index WHERE index_relid = to_regclass($1)",
                &[&name],
            )
            .await
        else {
            return;
        };
        if let Some(row) = rows.first() {
            let phase: String = row.try_get(0).unwrap_or_default();
            let blocks: (i64, i64) = (row.try_get(1).unwrap_or(0), row.try_get(2).unwrap_or(0));
            let tuples: (i64, i64) = (row.try_get(3).unwrap_or(0), row.try_get(4).unwrap_or(0));
            tracing::info!(
                "PostgreSQL at {}: building {name}: {phase}, blocks {}/{}, rows {}/{}",
                self.label,
                blocks.0,
                blocks.1,
                tuples.0,
                tuples.1
            );
        }
    }

    pub(super) async fn build_index_locked<F, Fut>(
        &self,
        client: &deadpool_postgres::Client,
        run: F,
    ) -> std::result::Result<(), String>
    where
        F: Fn(&'static str) -> Fut,
        Fut: std::future::Future<Output = Result<()>>,
    {
        let computed = self
            .fill_trigrams(client)
            .await
            .map_err(|e| e.to_string())?;
        let statistics = client
            .query_opt(
                "SELECT 1 FROM pg_statistic_ext WHERE stxname = 'mountfs_items_text_keys_behind_stats'",
                &[],
            )
            .await
            .map_err(|e| self.map_error(e).to_string())?;
        if computed > 0 || statistics.is_none() {
            run(BEHIND_STATISTICS).await.map_err(|e| e.to_string())?;
        }
        for (name, create) in INDEXES {
            let state = client
                .query_opt(
                    "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass($1)",
                    &[name],
                )
                .await
                .map_err(|e| self.map_error(e).to_string())?;
            match state.map(|row| row.try_get::<_, bool>(0)) {
                Some(Ok(true)) => continue,
                Some(_) => {
                    tracing::info!(
                        "PostgreSQL at {}: the index {name} was left unfinished (a build was stopped); building it again",
                        self.label
                    );
                    let drop = format!("DROP INDEX CONCURRENTLY IF EXISTS {name}");
                    client
                        .batch_execute(&drop)
                        .await
                        .map_err(|e| self.map_error(e).to_string())?;
                }
                None => {}
            }
            tracing::info!(
                "PostgreSQL at {}: building the search index {name} in the background (grep scans until it is ready)",
                self.label
            );
            let started = std::time::Instant::now();
            let building = run(create);
            tokio::pin!(building);
            let mut ticks = tokio::time::interval(Duration::from_secs(10));
            ticks.tick().await;
            loop {
                tokio::select! {
                    built = &mut building => {
                        built.map_err(|e| e.to_string())?;
                        break;
                    }
                    _ = ticks.tick() => self.log_build_progress(name).await,
                }
            }
            tracing::info!(
                "PostgreSQL at {}: index {name} built in {:.1} s",
                self.label,
                started.elapsed().as_secs_f64()
            );
        }
        for old in OLD_INDEXES {
            let drop_old = format!("DROP INDEX CONCURRENTLY IF EXISTS {old}");
            client
                .batch_execute(&drop_old)
                .await
                .map_err(|e| self.map_error(e).to_string())?;
        }
        client
            .batch_execute(OLD_STATISTICS)
            .await
            .map_err(|e| self.map_error(e).to_string())?;
        Ok(())
    }

    /// Gives every item whose trigrams are behind its version (written before the index, or
    /// by an older server) its trigrams, `BACKFILL_BATCH` items per statement in key order,
    /// each update conditional on the version it read (a write meanwhile sets its own). A
    /// killed pass loses nothing: the next start finds the items still behind. Returns how
    /// many items it gave their trigrams.
    pub(super) async fn fill_trigrams(&self, client: &deadpool_postgres::Client) -> Result<u64> {
        let mut after = (String::new(), String::new());
        let mut done = 0u64;
        let mut last_said = std::time::Instant::now();
        loop {
            let rows = client
                .query(
                    BEHIND_ROWS.as_str(),
                    &[&after.0, &after.1, &BACKFILL_BATCH, &MAX_INDEXED_SIZE],
                )
                .await
                .map_err(|e| self.map_error(e))?;
            let Some(last) = rows.last() else {
                break;
            };
            after = (column(last, 0)?, column(last, 1)?);
            self.index_rows(&***client, &rows).await?;
            done += u64::try_from(rows.len()).unwrap_or(0);
            if last_said.elapsed() > Duration::from_secs(10) {
                last_said = std::time::Instant::now();
                tracing::info!(
                    "PostgreSQL at {}: search index: trigrams of {done} items computed so far",
                    self.label
                );
            }
        }
        if done > 0 {
            tracing::info!(
                "PostgreSQL at {}: search index: trigrams of {done} items computed",
                self.label
            );
        }
        Ok(done)
    }

    /// Gives `rows` (namespace, key, version, encoding, size, and the content when it is small
    /// enough to index, as [`BEHIND_ROWS`] selects them) their trigrams, each update
    /// conditional on the version read: a write meanwhile leaves its item behind again, for a
    /// later step.
    pub(super) async fn index_rows<C>(&self, client: &C, rows: &[Row]) -> Result<()>
    where
        C: tokio_postgres::GenericClient + Sync,
    {
        let mut namespaces = Vec::with_capacity(rows.len());
        let mut keys = Vec::with_capacity(rows.len());
        let mut versions = Vec::with_capacity(rows.len());
        let mut contents = Vec::with_capacity(rows.len());
        for row in rows {
            let encoding: String = column(row, 3)?;
            let content: Option<Vec<u8>> = column(row, 5)?;
            namespaces.push(column::<String>(row, 0)?);
            keys.push(column::<String>(row, 1)?);
            versions.push(column::<i64>(row, 2)?);
            contents.push((Encoding::parse(&encoding), content));
        }
        // ~0.3 ms of CPU an item: off the async workers.
        let arrays = tokio::task::spawn_blocking(move || {
            contents
                .into_iter()
                .map(|(encoding, content)| {
                    // An array of arrays must be rectangular: each item's trigrams as text.
                    content
                        .and_then(|content| text_keys_of(encoding, &content))
                        .map(|t| array_text(&t))
                })
                .collect::<Vec<_>>()
        })
        .await
        .map_err(|e| Error::Query(format!("computing trigrams: {e}")))?;
        client
            .execute(
                "UPDATE mountfs_items AS items
                 SET text_keys = given.text_keys::integer[], text_keys_version = items.version
                 FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[])
                     AS given (namespace, key, version, text_keys)
                 WHERE items.namespace = given.namespace AND items.key = given.key
                   AND items.version = given.version",
                &[&namespaces, &keys, &versions, &arrays],
            )
            .await
            .map_err(|e| self.map_error(e))?;
        Ok(())
    }

    /// One step of the background pass (see [`index_behind`]), in one transaction: counts the
    /// items behind (for [`PassState::may_defer`]); when there are some and no other server
    /// is indexing (the transaction-scoped [`INDEX_LOCK`], which the index build also holds),
    /// gives the first [`BACKFILL_BATCH`] of them their trigrams.
    pub(super) async fn pass_step(&self) -> Result<PassStep> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| self.map_error(e))?;
        let deferred = self.pass.deferred.load(Ordering::Acquire);
        let row = tx
            .query_one(
                "SELECT count(*) FROM (SELECT 1 FROM mountfs_items
                     WHERE (text_keys_version IS DISTINCT FROM version) IS TRUE
                     ORDER BY namespace, key LIMIT $1) AS behind",
                &[&(MAX_BEHIND + 1)],
            )
            .await
            .map_err(|e| self.map_error(e))?;
        let behind: i64 = column(&row, 0)?;
        // This order: a write read between the two stores is counted twice, not missed.
        self.pass.counted.store(behind, Ordering::Release);
        self.pass
            .deferred_at_count
            .store(deferred, Ordering::Release);
        if behind == 0 {
            return Ok(PassStep::Done);
        }
        let locked = tx
            .query_one("SELECT pg_try_advisory_xact_lock($1)", &[&INDEX_LOCK])
            .await
            .map_err(|e| self.map_error(e))?;
        if !column::<bool>(&locked, 0)? {
            return Ok(PassStep::Busy);
        }
        let rows = tx
            .query(
                BEHIND_ROWS.as_str(),
                &[&"", &"", &BACKFILL_BATCH, &MAX_INDEXED_SIZE],
            )
            .await
            .map_err(|e| self.map_error(e))?;
        self.index_rows(&*tx, &rows).await?;
        tx.commit().await.map_err(|e| self.map_error(e))?;
        Ok(PassStep::Indexed)
    }

    /// Takes the table's statistics again (`ANALYZE mountfs_items`) when they are stale (see
    /// [`ANALYZE_MIN_CHANGES`]) and this server did not take them in the last
    /// [`ANALYZE_MIN_INTERVAL`] (`last`: when it did). Returns how long until they may be taken
    /// when they are stale but were taken too recently.
    pub(super) async fn analyze_if_stale(
        &self,
        last: &mut Option<tokio::time::Instant>,
    ) -> Result<Option<Duration>> {
        let changed = self.pass.changed.load(Ordering::Acquire);
        let own = changed - self.pass.changed_at_analyze.load(Ordering::Acquire);
        let client = self.client().await?;
        let statistics = |row: Option<Row>| -> Result<(i64, i64, bool)> {
            Ok(match row {
                // Rows are counted in a float; a count past i64 is not a table's.
                #[allow(clippy::cast_possible_truncation)]
                Some(row) => (
                    column::<f64>(&row, 0)? as i64,
                    column(&row, 1)?,
                    column(&row, 2)?,
                ),
                None => (0, 0, false),
            })
        };
        let row = client
            .query_opt(TABLE_STATISTICS, &[])
            .await
            .map_err(|e| self.map_error(e))?;
        let (rows, all, may_analyze) = statistics(row)?;
        self.pass.analyzed_rows.store(rows, Ordering::Release);
        if !may_analyze || !analyze_due(own.max(all), rows) {
            return Ok(None);
        }
        if let Some(wait) = last.and_then(|at| ANALYZE_MIN_INTERVAL.checked_sub(at.elapsed()))
            && !wait.is_zero()
        {
            return Ok(Some(wait));
        }
        // The GIN index's pending list first: the keys of rows written since it was last
        // merged, which every search through the index reads in full, and which the planner
        // counts against the index (3,000 files just written made it choose to read the whole
        // table). Autovacuum merges it when it analyses; an `ANALYZE` run by a client does not.
        client
            .batch_execute(
                "SELECT gin_clean_pending_list(to_regclass('mountfs_items_text_keys'));
                 ANALYZE mountfs_items",
            )
            .await
            .map_err(|e| self.map_error(e))?;
        *last = Some(tokio::time::Instant::now());
        self.pass
            .changed_at_analyze
            .store(changed, Ordering::Release);
        let row = client
            .query_opt(TABLE_STATISTICS, &[])
            .await
            .map_err(|e| self.map_error(e))?;
        let (rows, _, _) = statistics(row)?;
        self.pass.analyzed_rows.store(rows, Ordering::Release);
        tracing::debug!(
            "PostgreSQL at {}: analysed mountfs_items after {} changed rows; it has about {rows}",
            self.label,
            own.max(all)
        );
        Ok(None)
    }

    /// Whether a write leaves its item behind for the pass: always while the index is not
    /// built (searches scan; the build indexes what is behind), else while fewer than
    /// [`MAX_BEHIND`] items are (`uncommitted`: those its own transaction left behind).
    pub(super) fn defer_indexing(&self, uncommitted: i64) -> bool {
        !self.index_ready.load(Ordering::Acquire) || self.pass.may_defer(uncommitted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(text: &[u8; 3]) -> i32 {
        i32::from(text[0]) << 16 | i32::from(text[1]) << 8 | i32::from(text[2])
    }

    #[test]
    fn trigrams_are_distinct_folded_and_sorted() {
        let keys = text_keys(b"AbcABC");
        assert_eq!(keys, {
            let mut k = vec![key(b"abc"), key(b"bca"), key(b"cab")];
            k.sort_unstable();
            k
        });
        assert!(text_keys(b"ab").is_empty());
        // Bytes, not characters: a non-ASCII character is left as it is.
        assert_eq!(text_keys("é".as_bytes()).len(), 0);
        assert_eq!(text_keys("Éa".as_bytes()), vec![key(&[0xc3, 0x89, b'a'])]);
    }

    #[test]
    fn a_substring_has_no_trigram_its_container_lacks() {
        let content = "fn Main() {\n    unsafe impl Drop for X {}\n}\n";
        let all = text_keys(content.as_bytes());
        for needle in ["unsafe impl", "IMPL DROP", "main()", " {}\n"] {
            let wanted = text_keys(needle.as_bytes());
            assert!(wanted.iter().all(|k| all.contains(k)), "{needle}");
        }
    }

    #[test]
    fn whitespace_is_squeezed_and_the_joins_kept() {
        let keys = text_keys(b"fn x() {\n    unsafe\t\timpl Drop for X {}\n}\n");
        let wanted = text_keys(b"unsafe impl");
        assert!(wanted.iter().all(|k| keys.contains(k)));
        // `fe im`, the join, is one negative key; its absence tells apart a file that has
        // `unsafe` and `impl` apart, which holds every trigram of `unsafe impl`.
        let joins: Vec<i32> = wanted.iter().copied().filter(|k| *k < 0).collect();
        assert_eq!(joins.len(), 1);
        let apart = text_keys(b"unsafe fn f() {}\ntype impl X {}\n");
        assert!(
            wanted
                .iter()
                .filter(|k| **k >= 0)
                .all(|k| apart.contains(k))
        );
        assert!(!apart.contains(&joins[0]));
        // Folded as the trigrams are.
        assert!(text_keys(b"UNSAFE IMPL").contains(&joins[0]));
    }

    #[test]
    fn statistics_are_due_after_a_tenth_of_the_rows_and_at_least_the_minimum_changed() {
        // A table analysed nearly empty, then filled: due once the minimum is reached.
        assert!(!analyze_due(ANALYZE_MIN_CHANGES - 1, 0));
        assert!(analyze_due(ANALYZE_MIN_CHANGES, 0));
        // A large table: a tenth of its rows.
        assert!(!analyze_due(1_999, 20_000));
        assert!(analyze_due(2_000, 20_000));
    }

    #[test]
    fn items_not_held_by_the_index_have_no_trigrams() {
        assert_eq!(text_keys_of(Encoding::Binary, b"abcdef"), None);
        let big = vec![b'a'; usize::try_from(MAX_INDEXED_BYTES).unwrap() + 1];
        assert_eq!(text_keys_of(Encoding::Utf8, &big), None);
        assert_eq!(
            text_keys_of(Encoding::Utf8, b"aaaa"),
            Some(vec![key(b"aaa")])
        );
        assert_eq!(array_text(&[1, 22, 333]), "{1,22,333}");
        assert_eq!(array_text(&[]), "{}");
    }
}
