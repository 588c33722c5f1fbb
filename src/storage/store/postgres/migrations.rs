//! The PostgreSQL store's schema: its migrations, one per version, applied on connect under
//! an advisory lock so that servers sharing the database migrate it one after the other.

use super::*;
use crate::ground::migrations;

/// Key of the advisory lock taken while migrating ("mountfs" in ASCII).
pub(super) const MIGRATION_LOCK: i64 = 0x006d_6f75_6e74_6673;

/// Schema migrations: `MIGRATIONS[i]` takes the schema from version `i` to `i + 1`.
pub(super) const MIGRATIONS: &[&str] = &[
    r#"
    CREATE TABLE mountfs_items (
        namespace   TEXT COLLATE "C" NOT NULL,
        key         TEXT COLLATE "C" NOT NULL,
        encoding    TEXT   NOT NULL,
        size        BIGINT NOT NULL,
        created_at  BIGINT NOT NULL,
        modified_at BIGINT NOT NULL,
        version     BIGINT NOT NULL,
        content     BYTEA  NOT NULL,
        PRIMARY KEY (namespace, key)
    );
    CREATE SEQUENCE mountfs_versions;
"#,
    r#"
    -- Every change of an item, by any server instance, is announced on the channel
    -- mountfs_changes as 'namespace<TAB>created|modified|removed<TAB>key' when its transaction
    -- commits; subscribed servers LISTEN (see changes.rs).
    CREATE FUNCTION mountfs_notify_change() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP = 'DELETE' THEN
            PERFORM pg_notify('mountfs_changes', OLD.namespace || chr(9) || 'removed' || chr(9) || OLD.key);
        ELSIF TG_OP = 'INSERT' THEN
            PERFORM pg_notify('mountfs_changes', NEW.namespace || chr(9) || 'created' || chr(9) || NEW.key);
        ELSE
            PERFORM pg_notify('mountfs_changes', NEW.namespace || chr(9) || 'modified' || chr(9) || NEW.key);
        END IF;
        RETURN NULL;
    END
    $$;
    CREATE TRIGGER mountfs_items_notify AFTER INSERT OR UPDATE OR DELETE ON mountfs_items
        FOR EACH ROW EXECUTE FUNCTION mountfs_notify_change();
"#,
    r#"
    -- Contents over 4 MiB (LARGE_CONTENT_BYTES, issue 27) are kept in large_content, stored
    -- out of line and never compressed (STORAGE EXTERNAL); content is then empty (NULL since
    -- schema version 4). A range of such a value is read by fetching only the TOAST chunks it
    -- covers, where a compressed value is decompressed from its start to the range's end for
    -- every range (a copy in 4 MiB ranges cost the square of the size: 400 MB in 33.5 s).
    -- large_version is the version large_content belongs to: a write that does not set it (a
    -- server of an older release started before this migration) leaves it behind `version`,
    -- and the content is in `content`. No rewrite: the columns have no default, and the
    -- contents written before stay where they are (compressed: read correctly, their ranges as
    -- slowly as before).
    SET LOCAL lock_timeout = '10s';
    ALTER TABLE mountfs_items ADD COLUMN large_content BYTEA, ADD COLUMN large_version BIGINT;
    ALTER TABLE mountfs_items ALTER COLUMN large_content SET STORAGE EXTERNAL;
"#,
    r#"
    -- A content kept in large_content leaves content NULL, no longer empty: a server of a
    -- release before schema version 3, still running against the migrated database, reads
    -- content alone, and now fails on such an item (a NULL where it expects bytes: an error
    -- the agent sees) instead of reading it as an empty file. Only the catalog changes (no
    -- rewrite, no scan). Items written empty by a server of schema version 3 stay so until
    -- they are written again.
    SET LOCAL lock_timeout = '10s';
    ALTER TABLE mountfs_items ALTER COLUMN content DROP NOT NULL;
"#,
];

impl PostgresStore {
    pub(super) async fn migrate(&self) -> Result<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| self.map_error(e))?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
            .await
            .map_err(|e| self.map_error(e))?;
        tx.batch_execute("CREATE TABLE IF NOT EXISTS mountfs_schema (version INTEGER NOT NULL)")
            .await
            .map_err(|e| self.map_error(e))?;
        let row = tx
            .query_one("SELECT COALESCE(MAX(version), 0) FROM mountfs_schema", &[])
            .await
            .map_err(|e| self.map_error(e))?;
        let current: i32 = column(&row, 0)?;
        let pending = migrations::pending(MIGRATIONS, i64::from(current)).map_err(|newer| {
            Error::Schema(format!("the PostgreSQL database at {} {newer}", self.label))
        })?;
        for (sql, version) in pending {
            tx.batch_execute(sql).await.map_err(|e| self.map_error(e))?;
            let version = i32::try_from(version).unwrap_or(i32::MAX);
            tx.execute(
                "INSERT INTO mountfs_schema (version) VALUES ($1)",
                &[&version],
            )
            .await
            .map_err(|e| self.map_error(e))?;
        }
        // The search index's columns (see TRIGRAM_COLUMNS): adding them takes the table's lock
        // for an instant (no rewrite: no default), so only when they are missing, and giving
        // up rather than queueing the other sessions behind a long transaction.
        let present = tx
            .query_one(
                "SELECT count(*) FROM pg_attribute
                 WHERE attrelid = 'mountfs_items'::regclass
                   AND attname IN ('text_keys', 'text_keys_version') AND NOT attisdropped",
                &[],
            )
            .await
            .map_err(|e| self.map_error(e))?;
        if column::<i64>(&present, 0)? < 2 {
            tx.batch_execute("SET LOCAL lock_timeout = '10s'")
                .await
                .map_err(|e| self.map_error(e))?;
            tx.batch_execute(TRIGRAM_COLUMNS)
                .await
                .map_err(|e| self.map_error(e))?;
        }
        // Contents written from now on are compressed with lz4 where the server has it: an
        // indexed grep reads its candidates' contents, and lz4 gives them back several times
        // faster than the default pglz (older rows keep theirs). A server without lz4 keeps
        // pglz; so does a table another session holds locked.
        let compression = tx
            .query_one(
                "SELECT attcompression::text FROM pg_attribute
                 WHERE attrelid = 'mountfs_items'::regclass AND attname = 'content'",
                &[],
            )
            .await
            .map_err(|e| self.map_error(e))?;
        if column::<String>(&compression, 0)? != "l" {
            tx.batch_execute(
                "SAVEPOINT lz4;
                 SET LOCAL lock_timeout = '2s';",
            )
            .await
            .map_err(|e| self.map_error(e))?;
            let set = tx
                .batch_execute("ALTER TABLE mountfs_items ALTER COLUMN content SET COMPRESSION lz4")
                .await;
            if let Err(error) = set {
                tracing::debug!(
                    "PostgreSQL at {}: contents stay compressed with pglz: {error}",
                    self.label
                );
                tx.batch_execute("ROLLBACK TO SAVEPOINT lz4")
                    .await
                    .map_err(|e| self.map_error(e))?;
            }
        }
        tx.commit().await.map_err(|e| self.map_error(e))
    }
}
