//! `PostgresStore`: the engine for many server instances sharing one namespace.
//!
//! tokio-postgres with a deadpool-postgres pool: deadpool is async-native, small, checks a
//! pooled connection is still open before handing it out (`RecyclingMethod::Fast`) and caches
//! prepared statements per connection. Its timeouts make an unreachable server fail a tool call
//! in seconds (as `mount unavailable: …`) instead of hanging it. Connections are plain TCP
//! (`NoTls`): put a TLS-terminating proxy in front for remote databases.
//!
//! Every conditional write is one statement checked by the database: `IfVersion` is
//! `UPDATE … WHERE version = $expected` (a concurrent committed update makes it match no row),
//! `CreateOnly` is `INSERT … ON CONFLICT DO NOTHING`. Versions come from one sequence, so they
//! are unique across every server and never reused. Keys are `TEXT COLLATE "C"` (byte order), so
//! a prefix is a range of the primary-key index. The schema is created or migrated on connect
//! under an advisory lock, so servers starting together do not race.

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use deadpool_postgres::{
    Manager, ManagerConfig, Pool, PoolError, RecyclingMethod, Runtime, WeakPool,
};
use tokio::sync::Notify;
use tokio_postgres::config::Host;
use tokio_postgres::types::ToSql;
use tokio_postgres::{NoTls, Row};

use super::plan::{Terms, byte_joins, squeeze_bytes};
use super::{
    BatchOp, CandidateQuery, Encoding, Error, Item, ItemMeta, ListQuery, Namespace, PutCondition,
    Result, Store, StoreUpload, Written, from_micros, to_micros,
};
use crate::ground::text::encoding::decode_lossy;

/// Connections per server process.
const POOL_SIZE: usize = 16;
/// How long to wait for a new connection before telling the agent the store is unavailable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a call waits for a free pooled connection.
const WAIT_TIMEOUT: Duration = Duration::from_secs(30);
/// Key of the advisory lock taken while migrating ("mountfs" in ASCII).
const MIGRATION_LOCK: i64 = 0x006d_6f75_6e74_6673;
/// Key of the advisory lock held by the one server building the search index ("mountfsi").
/// Whoever holds it (a session lock) pauses every server's background pass; a test does.
pub const INDEX_LOCK: i64 = 0x6d6f_756e_7466_7369;

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
const INDEXES: &[(&str, &str)] = &[
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
const OLD_INDEXES: &[&str] = &[
    "mountfs_items_trgm",
    "mountfs_items_trigrams",
    "mountfs_items_trigram_keys",
    "mountfs_items_trigrams_behind",
];
/// The statistics of the earlier build (see [`OLD_INDEXES`]), dropped with its indexes. Its
/// columns (`trigrams`, `trigrams_version`) stay: a server of that build sharing the database
/// keeps writing them (dropping them would make its writes fail); docs/mounts.md says how to
/// drop them once every server is upgraded.
const OLD_STATISTICS: &str = "DROP STATISTICS IF EXISTS mountfs_items_trigrams_behind_stats";
/// What lets the planner know how few items are behind (else it guesses nearly all, and reads
/// the whole table rather than the partial index `mountfs_items_text_keys_behind`); the
/// queries and the index say `(… IS DISTINCT FROM …) IS TRUE`, the form these statistics are
/// looked up for.
const BEHIND_STATISTICS: &str =
    "CREATE STATISTICS IF NOT EXISTS mountfs_items_text_keys_behind_stats
    ON ((text_keys_version IS DISTINCT FROM version)) FROM mountfs_items;
    ANALYZE mountfs_items";
/// Items larger than this are not given trigrams (their array would outgrow the index's use):
/// they are candidates of every search.
pub const MAX_INDEXED_BYTES: u64 = 1 << 20;
/// [`MAX_INDEXED_BYTES`] as the `size` column's type.
const MAX_INDEXED_SIZE: i64 = 1 << 20;
/// Items given their trigrams per statement of the background pass.
const BACKFILL_BATCH: i64 = 64;
/// How many items may be behind (read in full by every search) before a write computes its
/// item's trigrams itself, as every write did before the pass: bounds what a search confirms
/// beyond its index candidates (~0.1 ms an item) under writes the pass cannot keep up with.
/// Counted by each server over the whole table, plus its own writes since it last counted
/// (so several servers writing at once may each add up to this many before they count again).
pub const MAX_BEHIND: i64 = 256;
/// How long writes must pause before the pass indexes them: a burst of writes is indexed
/// after it, together, and its writers do not compete with the pass meanwhile.
const PASS_QUIET: Duration = Duration::from_millis(50);
/// The longest the pass waits for writes to pause: under steady writes it runs at least this
/// often.
const PASS_MAX_WAIT: Duration = Duration::from_secs(1);
/// How often the pass looks for items behind without being woken by this server's writes
/// (those of another server that stopped before indexing them, or of an older release): one
/// probe of the partial index `mountfs_items_text_keys_behind`.
const PASS_POLL: Duration = Duration::from_secs(10);
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
const ANALYZE_MIN_INTERVAL: Duration = Duration::from_secs(5);
/// The table's statistics: rows as the last `ANALYZE` (or `VACUUM`, or index build) counted
/// them, rows changed since, by every server, and whether this role may analyse it (it owns
/// the table; else `ANALYZE` would only warn, in the database's log, every time).
const TABLE_STATISTICS: &str = "SELECT GREATEST(c.reltuples, 0)::float8,
        COALESCE(s.n_mod_since_analyze, 0)::bigint, pg_has_role(c.relowner, 'MEMBER')
    FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
    WHERE c.oid = to_regclass('mountfs_items')";
/// How soon the pass tries again when another server's pass (or the index build) holds
/// [`INDEX_LOCK`] and items are behind.
const PASS_RETRY: Duration = Duration::from_millis(250);
/// The items behind after `($1, $2)` in key order, at most $3, with what the pass needs to
/// index them. An item too large to be indexed (over $4 bytes) is stamped without its content
/// being fetched: a 300 MiB upload must not pass through this process whole.
static BEHIND_ROWS: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
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
const TRIGRAM_COLUMNS: &str = "ALTER TABLE mountfs_items
    ADD COLUMN IF NOT EXISTS text_keys INTEGER[],
    ADD COLUMN IF NOT EXISTS text_keys_version BIGINT";
/// Said once per process when the index cannot be made.
static INDEX_WARNED: AtomicBool = AtomicBool::new(false);

/// Schema migrations: `MIGRATIONS[i]` takes the schema from version `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[
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

/// The size over which a content is kept in the column `large_content`, uncompressed, and
/// `content` is `NULL` (see schema versions 3 and 4 in [`MIGRATIONS`]): a content up to this
/// is read whole by a copy (its range size), and stays compressed.
pub const LARGE_CONTENT_BYTES: u64 = 4 << 20;

/// An item's content, wherever it is kept (see schema versions 3 and 4 in [`MIGRATIONS`]):
/// every query reading a content reads this, never `content` alone (`NULL` for a large one).
const CONTENT: &str = "CASE WHEN large_version = version THEN large_content ELSE content END";

const META_COLUMNS: &str = "key, encoding, size, created_at, modified_at, version";

// The writes. Each takes the item's next version once (`next.v`) and gives it to `version`;
// `text_keys_version` gets it when $7 says the trigrams ($6) are those of this very content
// (computed by the writer, or none for an item the index does not hold), else `NULL`: the
// item is behind and the pass indexes it (see [`INDEXES`]). Parameters: namespace, key,
// encoding, size, time, trigrams, stamped, for `IfVersion` the expected version ($8), and last
// the content when it travels as a parameter. One text per condition and content source
// ([`write_statement`]): a put and an upload's finish run the same statement but for where the
// content comes from, so a column added to one is added to both, and both leave their item
// behind alike.

/// Where a write's content comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ContentSource {
    /// The statement's last parameter ([`Store::put`], a batch).
    Parameter,
    /// The chunks an upload staged in its temporary table ([`STAGED_CONTENT`]).
    Staged,
}

/// The three writes, by condition, for `put`/batches and for uploads, made once.
static WRITE_STATEMENTS: std::sync::LazyLock<[[String; 3]; 2]> = std::sync::LazyLock::new(|| {
    [ContentSource::Parameter, ContentSource::Staged].map(|source| {
        [
            WriteKind::CreateOnly,
            WriteKind::IfVersion,
            WriteKind::Overwrite,
        ]
        .map(|kind| write_sql(kind, source))
    })
});

/// A write's condition, without its expected version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WriteKind {
    CreateOnly,
    IfVersion,
    Overwrite,
}

impl WriteKind {
    fn of(condition: &PutCondition) -> Self {
        match condition {
            PutCondition::CreateOnly => Self::CreateOnly,
            PutCondition::IfVersion(_) => Self::IfVersion,
            PutCondition::Overwrite => Self::Overwrite,
        }
    }
}

/// The statement that writes under `kind` a content from `source` (see above).
fn write_statement(kind: WriteKind, source: ContentSource) -> &'static str {
    let by_kind = &WRITE_STATEMENTS[match source {
        ContentSource::Parameter => 0,
        ContentSource::Staged => 1,
    }];
    &by_kind[match kind {
        WriteKind::CreateOnly => 0,
        WriteKind::IfVersion => 1,
        WriteKind::Overwrite => 2,
    }]
}

fn write_sql(kind: WriteKind, source: ContentSource) -> String {
    let content = match (source, kind) {
        (ContentSource::Staged, _) => STAGED_CONTENT,
        (ContentSource::Parameter, WriteKind::IfVersion) => "$9::bytea",
        (ContentSource::Parameter, _) => "$8::bytea",
    };
    // A content over LARGE_CONTENT_BYTES (`next.large`, from the size $4) goes to
    // `large_content`, tagged with the version, and `content` is `NULL`: a server of a release
    // that reads `content` alone fails on it rather than reading an empty file (see schema
    // versions 3 and 4 in [`MIGRATIONS`]). A staged content's subquery is written twice but
    // run once: an uncorrelated subquery is an init plan, run when the branch that needs it is
    // taken.
    let next = format!(
        "(SELECT nextval('mountfs_versions') AS v, $4::bigint > {LARGE_CONTENT_BYTES} AS large) AS next"
    );
    let small = format!("CASE WHEN next.large THEN NULL ELSE {content} END");
    let large = format!("CASE WHEN next.large THEN {content} END");
    let large_version = "CASE WHEN next.large THEN next.v END";
    let stamp = "CASE WHEN $7::boolean THEN next.v END";
    match kind {
        WriteKind::CreateOnly => format!(
            "INSERT INTO mountfs_items
                 (namespace, key, encoding, size, created_at, modified_at, version, content,
                  text_keys, text_keys_version, large_content, large_version)
             SELECT $1::text, $2::text, $3::text, $4::bigint, $5::bigint, $5::bigint, next.v,
                    {small}, $6::integer[], {stamp}, {large}, {large_version}
             FROM {next}
             ON CONFLICT (namespace, key) DO NOTHING
             RETURNING version"
        ),
        WriteKind::IfVersion => format!(
            "UPDATE mountfs_items
             SET encoding = $3, size = $4, modified_at = $5, version = next.v, content = {small},
                 text_keys = $6, text_keys_version = {stamp}, large_content = {large},
                 large_version = {large_version}
             FROM {next}
             WHERE namespace = $1 AND key = $2 AND version = $8
             RETURNING version"
        ),
        // `xmax = 0` holds for a freshly inserted row and not for an updated one.
        WriteKind::Overwrite => format!(
            "INSERT INTO mountfs_items
                 (namespace, key, encoding, size, created_at, modified_at, version, content,
                  text_keys, text_keys_version, large_content, large_version)
             SELECT $1::text, $2::text, $3::text, $4::bigint, $5::bigint, $5::bigint, next.v,
                    {small}, $6::integer[], {stamp}, {large}, {large_version}
             FROM {next}
             ON CONFLICT (namespace, key) DO UPDATE
             SET encoding = EXCLUDED.encoding, size = EXCLUDED.size,
                 modified_at = EXCLUDED.modified_at, version = EXCLUDED.version,
                 content = EXCLUDED.content, text_keys = EXCLUDED.text_keys,
                 text_keys_version = EXCLUDED.text_keys_version,
                 large_content = EXCLUDED.large_content, large_version = EXCLUDED.large_version
             RETURNING version, (xmax = 0) AS inserted"
        ),
    }
}

/// What a write statement's rows say: the version it gave, and whether it made the item; no
/// row is the condition's failure.
fn written_of(kind: WriteKind, rows: &[Row]) -> Result<Written> {
    let Some(row) = rows.first() else {
        return Err(match kind {
            WriteKind::CreateOnly => Error::AlreadyExists,
            WriteKind::IfVersion => Error::VersionMismatch,
            WriteKind::Overwrite => Error::Query("PostgreSQL upsert returned no row".to_owned()),
        });
    };
    Ok(Written {
        version: column(row, 0)?,
        created: match kind {
            WriteKind::CreateOnly => true,
            WriteKind::IfVersion => false,
            WriteKind::Overwrite => column(row, 1)?,
        },
    })
}

/// The parameters of a write statement but its content: namespace, key, encoding, size, time,
/// trigrams, stamped, and the expected version of an `IfVersion`.
fn write_params<'a>(
    fields: &'a WriteFields<'a>,
    condition: &'a PutCondition,
) -> Vec<&'a (dyn ToSql + Sync)> {
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![
        &fields.namespace,
        &fields.key,
        &fields.encoding,
        &fields.size,
        &fields.now,
        &fields.trigrams,
        &fields.stamped,
    ];
    if let PutCondition::IfVersion(expected) = condition {
        params.push(expected);
    }
    params
}

/// The columns a write sets besides the content.
#[derive(Debug)]
struct WriteFields<'a> {
    namespace: &'a str,
    key: &'a str,
    encoding: &'static str,
    size: i64,
    now: i64,
    trigrams: Option<Vec<i32>>,
    /// Whether `trigrams` are those of this content (`false`: the item is left behind for
    /// the pass, see [`INDEXES`]).
    stamped: bool,
}

impl<'a> WriteFields<'a> {
    /// The fields of `content` (or of an upload's, whose `encoding` and `size` the caller
    /// knows and whose trigrams are those of `indexed`, its whole content when it is small
    /// enough to be indexed). An item the index does not hold is stamped with no trigrams
    /// (nothing to compute); one it holds is left behind when `defer`, else given its
    /// trigrams now.
    fn new(
        (namespace, key): (&'a str, &'a str),
        encoding: Encoding,
        size: u64,
        indexed: Option<&[u8]>,
        defer: bool,
        now: i64,
    ) -> Self {
        let (trigrams, stamped) = match indexed.filter(|content| indexable(encoding, content)) {
            None => (None, true),
            Some(_) if defer => (None, false),
            Some(content) => (Some(content_keys(content)), true),
        };
        Self {
            namespace,
            key,
            encoding: encoding.as_str(),
            size: i64::try_from(size).unwrap_or(i64::MAX),
            now,
            trigrams,
            stamped,
        }
    }
}

/// The PostgreSQL store (see the module doc).
#[derive(Debug, Clone)]
pub struct PostgresStore {
    pool: Pool,
    /// `host:port/db`, for messages (no user, no password).
    label: String,
    /// The search index is built and valid (it never goes back once true).
    index_ready: Arc<AtomicBool>,
    /// What the writes and the background pass share (see [`index_behind`]).
    pass: Arc<PassState>,
}

/// What this server's writes and its background pass share.
#[derive(Debug, Default)]
struct PassState {
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
    fn may_defer(&self, uncommitted: i64) -> bool {
        let since =
            self.deferred.load(Ordering::Acquire) - self.deferred_at_count.load(Ordering::Acquire);
        self.counted.load(Ordering::Acquire) + since + uncommitted < MAX_BEHIND
    }

    /// After `count` writes left their items behind and committed: counts them and wakes the
    /// pass.
    fn deferred(&self, count: i64) {
        if count > 0 {
            self.deferred.fetch_add(count, Ordering::AcqRel);
            self.wake.notify_one();
        }
    }

    /// After `count` rows were written, moved or deleted and committed: counts them, and wakes
    /// the pass when the table's statistics are due to be taken again.
    fn changed(&self, count: i64) {
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
fn analyze_due(changed: i64, rows: i64) -> bool {
    changed >= ANALYZE_MIN_CHANGES && changed.saturating_mul(10) >= rows
}

/// An error with what caused it (`error connecting to server: Connection refused (os error
/// 111)`): tokio-postgres keeps the cause out of its own message.
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        let said = inner.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        cause = inner.source();
    }
    text
}

/// `host:port/db` of a connection config, never its password nor a socket's host path.
fn label_of(config: &tokio_postgres::Config) -> String {
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(name)) => name.clone(),
        #[cfg(unix)]
        Some(Host::Unix(_)) => "unix socket".to_owned(),
        None => "localhost".to_owned(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let db = config.get_dbname().unwrap_or("");
    format!("{host}:{port}/{db}")
}

impl PostgresStore {
    /// Connects to `url` (`postgres://user@host:port/db`), creating or migrating the schema.
    /// Fails if the server cannot be reached now.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with_settings(url, "").await
    }

    /// [`Self::connect`], with `settings` (run-time parameters as `-c name=value`, space
    /// separated) set on every session of the pool at connection start-up. The URL's own
    /// `options` come after them, so a setting the operator gives in the URL wins.
    pub async fn connect_with_settings(url: &str, settings: &str) -> Result<Self> {
        let mut config = tokio_postgres::Config::from_str(url)
            .map_err(|e| Error::Unavailable(format!("PostgreSQL URL is not valid: {e}")))?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        if !settings.is_empty() {
            let options = match config.get_options() {
                Some(given) if !given.is_empty() => format!("{settings} {given}"),
                _ => settings.to_owned(),
            };
            config.options(&options);
        }
        let label = label_of(&config);
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .runtime(Runtime::Tokio1)
            .create_timeout(Some(CONNECT_TIMEOUT))
            .wait_timeout(Some(WAIT_TIMEOUT))
            .recycle_timeout(Some(CONNECT_TIMEOUT))
            .build()
            .map_err(|e| Error::Unavailable(format!("PostgreSQL pool: {e}")))?;
        let store = Self {
            pool,
            label,
            index_ready: Arc::new(AtomicBool::new(false)),
            pass: Arc::new(PassState::default()),
        };
        store.migrate().await?;
        // Also when the index is ready: items written by an older server since the last start
        // are behind (read by every search) until this pass computes their trigrams.
        let was_ready = store.index_ready().await?;
        let builder = store.clone();
        tokio::spawn(async move { builder.build_index(was_ready).await });
        tokio::spawn(index_behind(
            store.pool.weak(),
            store.label.clone(),
            store.index_ready.clone(),
            store.pass.clone(),
        ));
        Ok(store)
    }

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
    async fn build_index(&self, was_ready: bool) {
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
    async fn log_build_progress(&self, name: &str) {
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

    async fn build_index_locked<F, Fut>(
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
    async fn fill_trigrams(&self, client: &deadpool_postgres::Client) -> Result<u64> {
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
    async fn index_rows<C>(&self, client: &C, rows: &[Row]) -> Result<()>
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
    async fn pass_step(&self) -> Result<PassStep> {
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
    async fn analyze_if_stale(
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
    fn defer_indexing(&self, uncommitted: i64) -> bool {
        !self.index_ready.load(Ordering::Acquire) || self.pass.may_defer(uncommitted)
    }

    pub(crate) async fn client(&self) -> Result<deadpool_postgres::Client> {
        self.pool.get().await.map_err(|e| match e {
            PoolError::Backend(e) => self.map_error(e),
            PoolError::Timeout(_) => Error::Unavailable(format!(
                "PostgreSQL at {}: timed out waiting for a connection",
                self.label
            )),
            other => Error::Unavailable(format!("PostgreSQL at {}: {other}", self.label)),
        })
    }

    /// Connection-level failures (refused, closed, SQLSTATE class 08, shutdown, too many
    /// connections) are `Unavailable`; anything else is a failed statement.
    pub(crate) fn map_error(&self, error: tokio_postgres::Error) -> Error {
        match error.as_db_error() {
            Some(db) => {
                let code = db.code().code();
                let text = format!("PostgreSQL at {}: {}", self.label, db.message());
                if code.starts_with("08") || code.starts_with("57P") || code.starts_with("53") {
                    Error::Unavailable(text)
                } else {
                    Error::Query(text)
                }
            }
            None => Error::Unavailable(format!(
                "PostgreSQL at {}: {}",
                self.label,
                with_causes(&error)
            )),
        }
    }

    /// [`Self::map_error`], except that a key taken meanwhile (a unique violation) is
    /// [`Error::AlreadyExists`].
    fn map_conflict(&self, error: tokio_postgres::Error) -> Error {
        if error.code() == Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION) {
            return Error::AlreadyExists;
        }
        self.map_error(error)
    }

    async fn migrate(&self) -> Result<()> {
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
        let known = MIGRATIONS.len();
        let current = usize::try_from(current).unwrap_or(0);
        if current > known {
            return Err(Error::Schema(format!(
                "the PostgreSQL database at {} has schema version {current}, newer than this mountfs knows ({known}); upgrade mountfs",
                self.label
            )));
        }
        for (index, sql) in MIGRATIONS.iter().enumerate().skip(current) {
            tx.batch_execute(sql).await.map_err(|e| self.map_error(e))?;
            let version = i32::try_from(index + 1).unwrap_or(i32::MAX);
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

    async fn query(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached(sql)
            .await
            .map_err(|e| self.map_error(e))?;
        client
            .query(&statement, params)
            .await
            .map_err(|e| self.map_error(e))
    }

    async fn range_query(
        &self,
        namespace: &Namespace,
        query: &ListQuery,
        columns: &str,
    ) -> Result<Vec<Row>> {
        let (lower, inclusive, upper) = query.bounds();
        let op = if inclusive { ">=" } else { ">" };
        let limit = query.sql_limit();
        match upper {
            Some(upper) => {
                let sql = format!(
                    "SELECT {columns} FROM mountfs_items
                     WHERE namespace = $1 AND key {op} $2 AND key < $3 ORDER BY key LIMIT $4"
                );
                self.query(&sql, &[&namespace.as_str(), &lower, &upper, &limit])
                    .await
            }
            None => {
                let sql = format!(
                    "SELECT {columns} FROM mountfs_items
                     WHERE namespace = $1 AND key {op} $2 ORDER BY key LIMIT $3"
                );
                self.query(&sql, &[&namespace.as_str(), &lower, &limit])
                    .await
            }
        }
    }
}

/// What a step of the background pass did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PassStep {
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
async fn index_behind(
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

/// One column of a row, with a store error (not a panic) on a type mismatch.
fn column<'a, T: tokio_postgres::types::FromSql<'a>>(row: &'a Row, index: usize) -> Result<T> {
    row.try_get(index)
        .map_err(|e| Error::Query(format!("PostgreSQL row: {e}")))
}

fn meta_of_row(row: &Row) -> Result<ItemMeta> {
    let read = || -> std::result::Result<ItemMeta, tokio_postgres::Error> {
        let encoding: String = row.try_get(1)?;
        let size: i64 = row.try_get(2)?;
        Ok(ItemMeta {
            key: row.try_get(0)?,
            size: u64::try_from(size).unwrap_or(0),
            encoding: Encoding::parse(&encoding),
            created_at: from_micros(row.try_get(3)?),
            modified_at: from_micros(row.try_get(4)?),
            version: row.try_get(5)?,
        })
    };
    read().map_err(|e| Error::Query(format!("PostgreSQL row: {e}")))
}

fn item_of_row(row: &Row) -> Result<Item> {
    Ok(Item {
        meta: meta_of_row(row)?,
        content: column(row, 6)?,
    })
}

/// The most content one item holds: a PostgreSQL value is at most 1 GB (MaxAllocSize,
/// 2^30 - 1 bytes, header included); the server fails a bigger one with "out of memory".
const LARGEST_VALUE: u64 = (1 << 30) - 1 - 4;

#[async_trait]
impl Store for PostgresStore {
    fn largest_value(&self) -> Option<(u64, &'static str)> {
        Some((
            LARGEST_VALUE,
            "PostgreSQL's bytea limit (1 GB in one value)",
        ))
    }

    fn describe(&self) -> String {
        format!("PostgreSQL at {}", self.label)
    }

    async fn get(&self, namespace: &Namespace, key: &str) -> Result<Option<Item>> {
        let sql = format!(
            "SELECT {META_COLUMNS}, {CONTENT} FROM mountfs_items WHERE namespace = $1 AND key = $2"
        );
        let rows = self.query(&sql, &[&namespace.as_str(), &key]).await?;
        rows.first().map(item_of_row).transpose()
    }

    async fn head(&self, namespace: &Namespace, key: &str) -> Result<Option<ItemMeta>> {
        let sql =
            format!("SELECT {META_COLUMNS} FROM mountfs_items WHERE namespace = $1 AND key = $2");
        let rows = self.query(&sql, &[&namespace.as_str(), &key]).await?;
        rows.first().map(meta_of_row).transpose()
    }

    async fn put(
        &self,
        namespace: &Namespace,
        key: &str,
        content: &[u8],
        condition: PutCondition,
    ) -> Result<Written> {
        let encoding = Encoding::of(content);
        let fields = WriteFields::new(
            (namespace.as_str(), key),
            encoding,
            content.len() as u64,
            Some(content),
            self.defer_indexing(0),
            to_micros(SystemTime::now()),
        );
        let kind = WriteKind::of(&condition);
        let mut params = write_params(&fields, &condition);
        params.push(&content);
        let rows = self
            .query(write_statement(kind, ContentSource::Parameter), &params)
            .await?;
        let written = written_of(kind, &rows)?;
        self.pass.changed(1);
        if !fields.stamped {
            self.pass.deferred(1);
        }
        Ok(written)
    }

    async fn delete(
        &self,
        namespace: &Namespace,
        key: &str,
        if_version: Option<i64>,
    ) -> Result<bool> {
        let ns = namespace.as_str();
        let rows = self
            .query(
                "DELETE FROM mountfs_items
                 WHERE namespace = $1 AND key = $2 AND ($3::BIGINT IS NULL OR version = $3)
                 RETURNING 1",
                &[&ns, &key, &if_version],
            )
            .await?;
        if !rows.is_empty() {
            self.pass.changed(1);
            return Ok(true);
        }
        if if_version.is_none() {
            return Ok(false);
        }
        // Nothing deleted under a condition: only to tell "absent" from "other version".
        match self.head(namespace, key).await? {
            Some(_) => Err(Error::VersionMismatch),
            None => Ok(false),
        }
    }

    async fn apply_batch(
        &self,
        namespace: &Namespace,
        ops: Vec<BatchOp>,
    ) -> std::result::Result<Vec<Option<i64>>, (usize, Error)> {
        let ns = namespace.as_str();
        let now = to_micros(SystemTime::now());
        let mut client = self.client().await.map_err(|e| (0, e))?;
        let tx = client
            .transaction()
            .await
            .map_err(|e| (0, self.map_error(e)))?;
        let mut versions = Vec::with_capacity(ops.len());
        let mut deferred = 0;
        for (index, op) in ops.iter().enumerate() {
            let rows = match op {
                BatchOp::Put {
                    key,
                    content,
                    condition,
                } => {
                    let fields = WriteFields::new(
                        (ns, key),
                        Encoding::of(content),
                        content.len() as u64,
                        Some(content),
                        self.defer_indexing(deferred),
                        now,
                    );
                    if !fields.stamped {
                        deferred += 1;
                    }
                    let kind = WriteKind::of(condition);
                    let mut params = write_params(&fields, condition);
                    params.push(content);
                    tx.query(write_statement(kind, ContentSource::Parameter), &params)
                        .await
                        .map_err(|e| self.map_conflict(e))
                        .and_then(|rows| Ok(Some(written_of(kind, &rows)?.version)))
                }
                BatchOp::Delete { key, version } => tx
                    .query(
                        "DELETE FROM mountfs_items
                         WHERE namespace = $1 AND key = $2 AND version = $3 RETURNING 1",
                        &[ns_ref(&ns), key, version],
                    )
                    .await
                    .map_err(|e| self.map_error(e))
                    .and_then(|rows| {
                        if rows.is_empty() {
                            Err(Error::VersionMismatch)
                        } else {
                            Ok(None)
                        }
                    }),
            };
            match rows {
                // Dropping the transaction rolls it back.
                Err(error) => return Err((index, error)),
                Ok(version) => versions.push(version),
            }
        }
        tx.commit()
            .await
            .map_err(|e| (ops.len().saturating_sub(1), self.map_error(e)))?;
        self.pass
            .changed(i64::try_from(ops.len()).unwrap_or(i64::MAX));
        self.pass.deferred(deferred);
        Ok(versions)
    }

    async fn rename(
        &self,
        namespace: &Namespace,
        from: &str,
        to: &str,
        if_version: Option<i64>,
        replacing: Option<i64>,
    ) -> Result<Option<i64>> {
        let ns = namespace.as_str();
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| self.map_error(e))?;
        if let Some(expected) = replacing {
            let removed = tx
                .execute(
                    "DELETE FROM mountfs_items WHERE namespace = $1 AND key = $2 AND version = $3",
                    &[&ns, &to, &expected],
                )
                .await
                .map_err(|e| self.map_error(e))?;
            if removed == 0 {
                return Err(Error::VersionMismatch);
            }
        }
        let moved = tx
            .query(
                "UPDATE mountfs_items SET key = $3
                 WHERE namespace = $1 AND key = $2 AND ($4::BIGINT IS NULL OR version = $4)
                 RETURNING version",
                &[&ns, &from, &to, &if_version],
            )
            .await
            .map_err(|e| self.map_conflict(e))?;
        let Some(row) = moved.first() else {
            let exists = tx
                .query(
                    "SELECT 1 FROM mountfs_items WHERE namespace = $1 AND key = $2",
                    &[&ns, &from],
                )
                .await
                .map_err(|e| self.map_error(e))?;
            return if exists.is_empty() {
                Ok(None)
            } else {
                Err(Error::VersionMismatch)
            };
        };
        let version: i64 = column(row, 0)?;
        tx.commit().await.map_err(|e| self.map_error(e))?;
        self.pass.changed(1);
        Ok(Some(version))
    }

    async fn rename_prefix(
        &self,
        namespace: &Namespace,
        from_prefix: &str,
        to_prefix: &str,
        to_key: &str,
    ) -> Result<u64> {
        let ns = namespace.as_str();
        let bound = |prefix: &str| {
            super::prefix_successor(prefix)
                .ok_or_else(|| Error::Query(format!("cannot bound the key prefix '{prefix}'")))
        };
        let (from_upper, to_upper) = (bound(from_prefix)?, bound(to_prefix)?);
        // substr counts characters from 1: the rest of a key after the old prefix.
        let rest_from = i32::try_from(from_prefix.chars().count() + 1)
            .map_err(|_| Error::Query("key prefix too long".to_owned()))?;
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| self.map_error(e))?;
        let taken = tx
            .query(
                "SELECT 1 FROM mountfs_items
                 WHERE namespace = $1 AND (key = $2 OR (key >= $3 AND key < $4)) LIMIT 1",
                &[&ns, &to_key, &to_prefix, &to_upper],
            )
            .await
            .map_err(|e| self.map_error(e))?;
        if !taken.is_empty() {
            return Err(Error::AlreadyExists);
        }
        let moved = tx
            .execute(
                "UPDATE mountfs_items SET key = $4 || substr(key, $5)
                 WHERE namespace = $1 AND key >= $2 AND key < $3",
                &[&ns, &from_prefix, &from_upper, &to_prefix, &rest_from],
            )
            .await
            .map_err(|e| self.map_conflict(e))?;
        tx.commit().await.map_err(|e| self.map_error(e))?;
        self.pass.changed(i64::try_from(moved).unwrap_or(i64::MAX));
        Ok(moved)
    }

    async fn delete_prefix(&self, namespace: &Namespace, prefix: &str) -> Result<u64> {
        let (lower, _, upper) = ListQuery::first(prefix, 1).bounds();
        let client = self.client().await?;
        let ns = namespace.as_str();
        let deleted =
            match upper {
                Some(upper) => client
                    .execute(
                        "DELETE FROM mountfs_items WHERE namespace = $1 AND key >= $2 AND key < $3",
                        &[&ns, &lower, &upper],
                    )
                    .await,
                None => {
                    client
                        .execute(
                            "DELETE FROM mountfs_items WHERE namespace = $1 AND key >= $2",
                            &[&ns, &lower],
                        )
                        .await
                }
            };
        let deleted = deleted.map_err(|e| self.map_error(e))?;
        self.pass
            .changed(i64::try_from(deleted).unwrap_or(i64::MAX));
        Ok(deleted)
    }

    async fn list(&self, namespace: &Namespace, query: &ListQuery) -> Result<Vec<ItemMeta>> {
        let rows = self.range_query(namespace, query, META_COLUMNS).await?;
        rows.iter().map(meta_of_row).collect()
    }

    async fn scan(&self, namespace: &Namespace, query: &ListQuery) -> Result<Vec<Item>> {
        let columns = format!("{META_COLUMNS}, {CONTENT}");
        let rows = self.range_query(namespace, query, &columns).await?;
        rows.iter().map(item_of_row).collect()
    }

    async fn candidates(
        &self,
        namespace: &Namespace,
        query: &CandidateQuery,
    ) -> Result<Option<Vec<ItemMeta>>> {
        if !self.index_ready().await? {
            return Ok(None);
        }
        let (lower, inclusive, upper) = query.list.bounds();
        let op = if inclusive { ">=" } else { ">" };
        let ns = namespace.as_str().to_owned();
        let limit = query.list.sql_limit();
        let larger_than =
            i64::try_from(query.larger_than.min(MAX_INDEXED_BYTES)).unwrap_or(i64::MAX);
        let mut params: Vec<Box<dyn ToSql + Sync + Send>> = vec![
            Box::new(ns),
            Box::new(lower),
            Box::new(limit),
            Box::new(larger_than),
        ];
        let range = match upper {
            Some(upper) => {
                params.push(Box::new(upper));
                format!("namespace = $1 AND key {op} $2 AND key < $5")
            }
            None => format!("namespace = $1 AND key {op} $2"),
        };
        let terms = trigram_terms(&query.plan.terms, &mut params);
        // Four arms, each answered by an index without reading any content: the trigram
        // index (containment is exact: no recheck), the items whose trigrams are behind, the
        // items that are not UTF-8, the items too large to be indexed or for their lines to
        // be searched.
        let sql = format!(
            "SELECT {META_COLUMNS} FROM mountfs_items
                 WHERE {range} AND text_keys_version = version AND {terms}
             UNION SELECT {META_COLUMNS} FROM mountfs_items
                 WHERE {range} AND (text_keys_version IS DISTINCT FROM version) IS TRUE
             UNION SELECT {META_COLUMNS} FROM mountfs_items
                 WHERE {range} AND encoding <> 'utf-8'
             UNION SELECT {META_COLUMNS} FROM mountfs_items WHERE {range} AND size > $4
             ORDER BY key LIMIT $3"
        );
        let refs: Vec<&(dyn ToSql + Sync)> = params
            .iter()
            .map(|p| p.as_ref() as &(dyn ToSql + Sync))
            .collect();
        let client = self.client().await?;
        let rows = client
            .query(&sql, &refs)
            .await
            .map_err(|e| self.map_error(e))?;
        rows.iter()
            .map(meta_of_row)
            .collect::<Result<Vec<_>>>()
            .map(Some)
    }

    async fn get_many(&self, namespace: &Namespace, keys: &[String]) -> Result<Vec<Item>> {
        let sql = format!(
            "SELECT {META_COLUMNS}, {CONTENT} FROM mountfs_items
             WHERE namespace = $1 AND key = ANY($2) ORDER BY key"
        );
        let rows = self.query(&sql, &[&namespace.as_str(), &keys]).await?;
        rows.iter().map(item_of_row).collect()
    }

    async fn read_range(
        &self,
        namespace: &Namespace,
        key: &str,
        offset: u64,
        len: usize,
        version: i64,
    ) -> Result<Option<Vec<u8>>> {
        // SQL counts from 1; bytea values stop at 1 GB, so both fit an INTEGER once clamped.
        let from = i32::try_from(offset.saturating_add(1)).unwrap_or(i32::MAX);
        let count = i32::try_from(len).unwrap_or(i32::MAX);
        let rows = self
            .query(
                // A large content's range is read from only the TOAST chunks it covers (see
                // schema version 3 in MIGRATIONS); one written before is decompressed up to
                // its end.
                "SELECT version, CASE WHEN large_version = version
                     THEN substring(large_content FROM $3 FOR $4)
                     ELSE substring(content FROM $3 FOR $4) END
                 FROM mountfs_items WHERE namespace = $1 AND key = $2",
                &[&namespace.as_str(), &key, &from, &count],
            )
            .await?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let found: i64 = column(row, 0)?;
        if found != version {
            return Err(Error::VersionMismatch);
        }
        Ok(Some(column(row, 1)?))
    }

    async fn begin_upload(&self, namespace: &Namespace, key: &str) -> Result<Box<dyn StoreUpload>> {
        let client = self.client().await?;
        // One transaction from the first chunk to the last: the staged rows live in a
        // temporary table dropped at its end, and a connection lost (the process killed) rolls
        // it back on the server. No row of mountfs_items is touched before `finish`.
        client
            .batch_execute(
                "BEGIN;
                 CREATE TEMP TABLE mountfs_upload (seq BIGINT PRIMARY KEY, chunk BYTEA NOT NULL)
                     ON COMMIT DROP;",
            )
            .await
            .map_err(|e| self.map_error(e))?;
        Ok(Box::new(PostgresUpload {
            store: self.clone(),
            client: Some(client),
            namespace: namespace.as_str().to_owned(),
            key: key.to_owned(),
            chunks: 0,
            size: 0,
            indexed: Some(Vec::new()),
        }))
    }
}

/// What an upload's `finish` puts as the content: the staged chunks joined on the server.
const STAGED_CONTENT: &str =
    "(SELECT COALESCE(string_agg(chunk, ''::bytea ORDER BY seq), ''::bytea) FROM mountfs_upload)";

/// A content staged chunk by chunk in a temporary table, inside one transaction of a
/// connection of its own (see [`Store::begin_upload`]); `finish` joins the chunks on the
/// server, in the statement that puts the item, and commits.
#[derive(Debug)]
struct PostgresUpload {
    store: PostgresStore,
    /// `None` once finished or aborted; a connection dropped with its transaction still open
    /// is closed, not given back to the pool (the server then rolls it back).
    client: Option<deadpool_postgres::Client>,
    namespace: String,
    key: String,
    chunks: i64,
    size: u64,
    /// Every byte staged so far while they are few enough to be indexed
    /// ([`MAX_INDEXED_BYTES`]): the item's trigrams are computed from them at `finish`, as
    /// `put` computes them; `None` once the content is larger (it is not indexed).
    indexed: Option<Vec<u8>>,
}

impl Drop for PostgresUpload {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            drop(deadpool_postgres::Client::take(client));
        }
    }
}

impl PostgresUpload {
    fn client(&self) -> Result<&deadpool_postgres::Client> {
        self.client
            .as_ref()
            .ok_or_else(|| Error::Unavailable("PostgreSQL upload already ended".to_owned()))
    }

    /// Runs one statement of `finish` in the upload's transaction.
    async fn run(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>> {
        self.client()?
            .query(sql, params)
            .await
            .map_err(|e| self.store.map_conflict(e))
    }

    /// Puts the staged content under `condition` through the statement `put` runs, with the
    /// content joined from the staged chunks; the transaction is still open. Says also
    /// whether the item was left behind for the pass (as `put` leaves it, see [`INDEXES`]).
    async fn put_staged(
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

/// The condition of `terms` over the `trigrams` column, the arrays pushed onto `params`: a
/// substring is there when all its trigrams are ([`text_keys_of`] of its bytes, folded as the
/// column is, whether or not the search ignores case: the matcher confirms).
fn trigram_terms(terms: &Terms, params: &mut Vec<Box<dyn ToSql + Sync + Send>>) -> String {
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
fn content_keys(content: &[u8]) -> Vec<i32> {
    match std::str::from_utf8(content) {
        Ok(_) => text_keys(content),
        Err(_) => text_keys(decode_lossy(content).as_bytes()),
    }
}

/// Whether the index holds an item: UTF-8, at most [`MAX_INDEXED_BYTES`].
fn indexable(encoding: Encoding, content: &[u8]) -> bool {
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
fn array_text(keys: &[i32]) -> String {
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

/// A namespace as a statement parameter.
fn ns_ref<'a>(ns: &'a &str) -> &'a (dyn ToSql + Sync) {
    ns
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
