//! The SQLite store's schema: its migrations, one per version (`PRAGMA user_version`),
//! applied on open.

use super::*;
use crate::ground::migrations;

/// Schema migrations: `MIGRATIONS[i]` takes the schema from version `i` to `i + 1`.
/// The content column is last so listing metadata never reads a large value's overflow pages.
pub(super) const MIGRATIONS: &[&str] = &[
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

pub(super) fn migrate(conn: &mut Connection) -> Result<()> {
    // BEGIN IMMEDIATE takes the write lock first, so two processes opening a new file at once
    // migrate it one after the other, and the second sees the first's work.
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(map_error)?;
    let current: i64 = tx
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .map_err(map_error)?;
    let pending = migrations::pending(MIGRATIONS, current)
        .map_err(|newer| Error::Schema(format!("the SQLite database {newer}")))?;
    for (sql, version) in pending {
        tx.execute_batch(sql).map_err(map_error)?;
        tx.pragma_update(None, "user_version", version)
            .map_err(map_error)?;
    }
    tx.commit().map_err(map_error)
}
