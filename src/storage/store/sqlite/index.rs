//! The SQLite store's search index: FTS5 trigrams of every UTF-8 item, built in the background
//! for a store made before it, kept up by folding pending writes in batches that give way to
//! this process's writers, and the candidates query a grep asks it.

use super::*;

/// `built_upto` once every item is in the search index.
pub(super) const INDEX_COMPLETE: i64 = i64::MAX;
/// Items added to the search index per transaction of a background build (fewer when their
/// text exceeds [`TOKENIZE_BYTES_PER_TRANSACTION`]): a writer waits for one batch at most.
pub(super) const BUILD_BATCH: i64 = 256;
/// Pending items moved into the search index per transaction of the folder (fewer when their
/// text exceeds [`TOKENIZE_BYTES_PER_TRANSACTION`]): a writer waits for one such batch at most.
/// 256 small items fold together; the byte budget, not the count, bounds the time.
pub(super) const FOLD_BATCH: i64 = 256;
/// Most bytes of text one transaction of the folder or of the background build tokenizes (at
/// least one item, so up to 1 MiB): FTS5's trigram tokenizer takes ~0.06 s of
/// CPU per MiB of source code and ~0.5 s per MiB of high-entropy text (identifiers, hashes;
/// SQLite 3.40 -O2), several times that in a debug build, and every writer waits for the
/// transaction — 64 or 256 items of up to 1 MiB each held the write lock past the 10 s busy
/// timeout, and writes were refused. 64 items of 4 KiB still fold together.
pub(super) const TOKENIZE_BYTES_PER_TRANSACTION: i64 = 256 * 1024;
/// The size over which items are in the `mountfs_items_large` index (the literal of its
/// `WHERE`): a search whose line bound is at least this finds the items over its bound there.
pub(super) const LARGE_ITEM_BYTES: i64 = 1_048_576;
/// Pending items past which a write folds its own item (see [`fold_own_item`]): a search
/// reads at most about this many items beyond its index candidates (~15 µs each for 12 KB of
/// source), and after a bulk load the folder has about this many left, not the whole load
/// (239 MB took it a minute: it gives way to writers and pauses as long as each batch took).
/// Above the 600 sequential writes of the benchmark's latency phases, so that a steady
/// writer the folder keeps up with never reaches it.
pub(super) const PENDING_BOUND: i64 = 1024;
/// How long writes must pause before the folder folds them: a burst of writes is folded after
/// it, together, and its writers do not wait for folds meanwhile.
pub(super) const FOLD_QUIET: Duration = Duration::from_millis(50);
/// The longest the folder waits for writes to pause: under a steady stream of writes the
/// pending items (which every search reads) are folded at least this often.
pub(super) const FOLD_MAX_WAIT: Duration = Duration::from_secs(1);
/// How often the folder looks for pending items without being woken (items written by another
/// process sharing the file, or left by a process that stopped before it folded them).
pub(super) const FOLD_POLL: Duration = Duration::from_secs(2);
/// The longest the folder or the build gives way to this process's writers before its next
/// batch (see [`give_way`]): under a steady stream of writes it still makes progress.
pub(super) const GIVE_WAY_MAX: Duration = Duration::from_secs(1);
/// The shortest pause of the folder and of the build between two batches (see [`pause_after`]).
pub(super) const BATCH_PAUSE_MIN: Duration = Duration::from_millis(10);

/// A search's trigram answer is read by rowid when it holds at most this many items per item of
/// the page asked for (see the candidates query of [`SqliteStore`]), else by walking the key range.
pub(super) const SELECTIVE_MATCHES: i64 = 8;

/// The background build of the search index for a store that existed before it (issue 28):
/// batch after batch of [`BUILD_BATCH`] items in rowid order, each in its own short write
/// transaction that also records how far it came, so a build killed half-way loses nothing and
/// the next open resumes it. Readers never wait (WAL); a writer waits for one batch at most.
/// Stops when the store is dropped.
pub(super) async fn build_index(shared: Weak<Shared>) {
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
pub(super) async fn give_way(writers: &AtomicUsize) {
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
pub(super) fn pause_after(took: Duration) -> Duration {
    took.max(BATCH_PAUSE_MIN)
}

/// Adds the next batch of items to the search index: how many, or `None` when every item is in.
pub(super) fn build_step(conn: &mut Connection) -> Result<Option<u64>> {
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
pub(super) async fn fold_pending(shared: Weak<Shared>, wake: Arc<Notify>) {
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
pub(super) struct FileStamp {
    file: (u64, Option<std::time::SystemTime>),
    wal: Option<(u64, Option<std::time::SystemTime>)>,
}

impl FileStamp {
    /// The stamp of `file` now, or `None` when it cannot be read (then the folder looks).
    pub(super) fn of(file: &std::path::Path) -> Option<Self> {
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
pub(super) fn fold_step(conn: &mut Connection) -> Result<usize> {
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
pub(super) fn within_tokenize_budget(items: &[(i64, i64)]) -> &[(i64, i64)] {
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
pub(super) fn index_select(terms: &Terms, queries: &mut Vec<(String, String)>) -> String {
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

/// When more than [`PENDING_BOUND`] items are pending (writes outpace the folder, which gives
/// way to them: a bulk load), folds the item just written in the write's own transaction, as
/// every write did before the folder — unless its text is over
/// [`TOKENIZE_BYTES_PER_TRANSACTION`] (the folder takes it: no write holds the lock for
/// longer than one of its batches). Bounds what every search reads beyond its index
/// candidates, and what the folder has left to do once the load ends; writes below the bound
/// cost what they did.
pub(super) fn fold_own_item(tx: &rusqlite::Transaction<'_>, ns: &str, key: &str) -> Result<()> {
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
pub(super) fn fold_items(tx: &rusqlite::Transaction<'_>, items: &[i64]) -> Result<()> {
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
pub(super) fn add_to_index(tx: &rusqlite::Transaction<'_>, items: &[i64]) -> Result<u64> {
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
