//! The `Store` trait: durable, versioned items in named namespaces, with conditional writes,
//! and the two engines that implement it ([`sqlite`], [`postgres`]).
//!
//! A store knows nothing of files or directories: it maps `(namespace, key)` to an [`Item`]
//! (content, encoding, created/modified times, version). [`crate::storage::backend::store`] maps files
//! onto items (CONTRACT §3). What a store must guarantee, and both engines do *in the database*:
//! - every successful `put` gives the item a new version, unique across the whole store and
//!   never reused (so deleting and re-creating a key cannot bring an old version back);
//! - `PutCondition::IfVersion` is one conditional update checked by the database, and
//!   `CreateOnly` one insert that does nothing on conflict: never read-then-write in the client;
//! - `created_at` survives overwrites;
//! - `list`/`scan` are ordered by key in byte order and are indexed range queries: their cost
//!   depends on the rows returned, not on the size of the namespace;
//! - `candidates` answers a grep's [`plan::IndexPlan`] from a trigram index the database keeps in
//!   every write's own transaction (issue 28; SQLite keeps there the list of items its trigram
//!   table does not hold yet, and answers with them too): a superset of the items that can
//!   match, in key order, or `None` while the engine has no index ready (the caller then scans).

pub mod plan;
pub mod postgres;
pub mod sqlite;

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use thiserror::Error;

pub use postgres::PostgresStore;
pub use sqlite::SqliteStore;

/// Why a store call failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Error {
    /// The database cannot be reached or used (connection refused, closed, I/O error, locked
    /// for too long). The text says what failed and never shows a password.
    #[error("{0}")]
    Unavailable(String),
    /// A `CreateOnly` put found the key.
    #[error("the key already exists")]
    AlreadyExists,
    /// An `IfVersion` put or delete found another version, or no item.
    #[error("the item has another version")]
    VersionMismatch,
    /// The database holds a schema this build cannot use.
    #[error("{0}")]
    Schema(String),
    /// A statement failed for another reason.
    #[error("{0}")]
    Query(String),
    /// A namespace name that is not allowed.
    #[error("namespace '{0}' is not valid: use 1-64 letters, digits, '_', '-' or '.'")]
    InvalidNamespace(String),
}

/// Result of store calls.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A validated namespace name: 1–64 of `[A-Za-z0-9_.-]`, not starting with `.`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Namespace(String);

impl Namespace {
    /// Validates a name.
    pub fn new(name: &str) -> Result<Self> {
        if crate::ground::config::valid_namespace(name) {
            Ok(Self(name.to_owned()))
        } else {
            Err(Error::InvalidNamespace(name.to_owned()))
        }
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// How an item's bytes are to be read. The bytes themselves are always stored as they are
/// (BLOB / BYTEA), never re-encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// Valid UTF-8 text.
    Utf8,
    /// Anything else.
    Binary,
}

impl Encoding {
    /// The encoding of a content: `Utf8` when it is valid UTF-8.
    pub fn of(content: &[u8]) -> Self {
        if std::str::from_utf8(content).is_ok() {
            Self::Utf8
        } else {
            Self::Binary
        }
    }

    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Utf8 => "utf-8",
            Self::Binary => "binary",
        }
    }

    /// Parses a stored name (anything unknown is treated as binary).
    pub fn parse(name: &str) -> Self {
        if name == "utf-8" {
            Self::Utf8
        } else {
            Self::Binary
        }
    }
}

/// An [`ItemMeta`] from a row whose first columns are `key, encoding, size, created_at,
/// modified_at, version` (both engines' `META_COLUMNS`), each read with `$row.$get(index)`:
/// written once for the SQLite and PostgreSQL rows, whose readers differ only in their types.
macro_rules! meta_from_columns {
    ($row:ident . $get:ident) => {{
        let encoding: String = $row.$get(1)?;
        let size: i64 = $row.$get(2)?;
        Ok($crate::storage::store::ItemMeta {
            key: $row.$get(0)?,
            size: u64::try_from(size).unwrap_or(0),
            encoding: $crate::storage::store::Encoding::parse(&encoding),
            created_at: $crate::storage::store::from_micros($row.$get(3)?),
            modified_at: $crate::storage::store::from_micros($row.$get(4)?),
            version: $row.$get(5)?,
        })
    }};
}
pub(crate) use meta_from_columns;

/// An item without its content, as `head` and `list` return it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemMeta {
    /// Its key.
    pub key: String,
    /// Content length in bytes.
    pub size: u64,
    /// How the content is to be read.
    pub encoding: Encoding,
    /// When the key was first written (kept across overwrites).
    pub created_at: SystemTime,
    /// When the content was last written.
    pub modified_at: SystemTime,
    /// The store's version of the item.
    pub version: i64,
}

/// A whole item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    /// Everything but the content.
    pub meta: ItemMeta,
    /// The content, byte for byte as written.
    pub content: Vec<u8>,
}

/// The condition a `put` is made under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutCondition {
    /// Only if the key does not exist, else [`Error::AlreadyExists`].
    CreateOnly,
    /// Create or replace.
    Overwrite,
    /// Only if the item exists with this version, else [`Error::VersionMismatch`].
    IfVersion(i64),
}

/// One change of a [`Store::apply_batch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchOp {
    /// A [`Store::put`].
    Put {
        /// The key.
        key: String,
        /// The content.
        content: Vec<u8>,
        /// Its condition.
        condition: PutCondition,
    },
    /// A [`Store::delete`] that must find the item at this version.
    Delete {
        /// The key.
        key: String,
        /// The version the item must have.
        version: i64,
    },
}

/// What a successful `put` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// The item's new version.
    pub version: i64,
    /// Whether the key did not exist before.
    pub created: bool,
}

/// Where a listing starts inside its prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListStart {
    /// At the first key with the prefix.
    Beginning,
    /// At the first key strictly after this one (paging on).
    After(String),
    /// At the first key at or after this one (seeking past a subtree).
    AtOrAfter(String),
}

/// One page of an ordered listing: keys starting with `prefix`, from `start`, at most `limit`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListQuery {
    /// Only keys starting with this.
    pub prefix: String,
    /// Where to start.
    pub start: ListStart,
    /// At most this many items (at least 1 is used).
    pub limit: usize,
}

impl ListQuery {
    /// The first page of keys under `prefix`.
    pub fn first(prefix: impl Into<String>, limit: usize) -> Self {
        Self {
            prefix: prefix.into(),
            start: ListStart::Beginning,
            limit,
        }
    }

    /// The key range this query covers, as SQL bounds: `(lower, lower_inclusive, upper)`.
    /// `upper` is exclusive, `None` when unbounded. Both engines compare keys in byte order,
    /// in which the successor of a prefix bounds exactly the keys that start with it.
    pub(crate) fn bounds(&self) -> (String, bool, Option<String>) {
        let (lower, inclusive) = match &self.start {
            ListStart::Beginning => (self.prefix.clone(), true),
            ListStart::After(key) if key.as_str() >= self.prefix.as_str() => (key.clone(), false),
            ListStart::AtOrAfter(key) if key.as_str() >= self.prefix.as_str() => {
                (key.clone(), true)
            }
            _ => (self.prefix.clone(), true),
        };
        (lower, inclusive, prefix_successor(&self.prefix))
    }

    /// The limit as SQL wants it.
    pub(crate) fn sql_limit(&self) -> i64 {
        i64::try_from(self.limit.max(1)).unwrap_or(i64::MAX)
    }
}

/// The smallest string greater than every string starting with `prefix`, in byte order:
/// the prefix with its last character incremented (UTF-8 byte order is code point order).
/// `None` when there is none (empty prefix, or only `char::MAX`s).
pub fn prefix_successor(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        let mut next = u32::from(last) + 1;
        if (0xD800..0xE000).contains(&next) {
            next = 0xE000;
        }
        if let Some(c) = char::from_u32(next) {
            chars.push(c);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

/// One page of [`Store::candidates`]: the items under `list` (its prefix, start and limit) that
/// may hold a match of `plan`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CandidateQuery {
    /// The key range and page size, as for [`Store::list`].
    pub list: ListQuery,
    /// What every matching item contains.
    pub plan: plan::IndexPlan,
    /// Items larger than this many bytes are candidates whatever they hold: a search reports
    /// a file with a line over its line bound as skipped, match or not.
    pub larger_than: u64,
}

/// Microseconds since the Unix epoch, as stored.
pub(crate) fn to_micros(time: SystemTime) -> i64 {
    match time.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_micros()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_micros()).unwrap_or(i64::MAX),
    }
}

/// The stored form back to a time.
pub(crate) fn from_micros(micros: i64) -> SystemTime {
    let magnitude = Duration::from_micros(micros.unsigned_abs());
    if micros >= 0 {
        UNIX_EPOCH + magnitude
    } else {
        UNIX_EPOCH - magnitude
    }
}

/// A durable map of `(namespace, key)` to versioned items. See the module doc for the rules
/// every engine obeys; `tests/conformance/store.rs` checks them on each.
#[async_trait]
pub trait Store: Send + Sync + fmt::Debug {
    /// A short description for logs and the server's instructions (never a password).
    fn describe(&self) -> String;

    /// The item at `key`, with its content.
    async fn get(&self, namespace: &Namespace, key: &str) -> Result<Option<Item>>;

    /// The item at `key`, without its content.
    async fn head(&self, namespace: &Namespace, key: &str) -> Result<Option<ItemMeta>>;

    /// Writes `content` at `key` under `condition`, giving the item a new version.
    async fn put(
        &self,
        namespace: &Namespace,
        key: &str,
        content: &[u8],
        condition: PutCondition,
    ) -> Result<Written>;

    /// Deletes `key`; with `if_version`, only if it has that version (else
    /// [`Error::VersionMismatch`]). `false` when there was nothing to delete.
    async fn delete(
        &self,
        namespace: &Namespace,
        key: &str,
        if_version: Option<i64>,
    ) -> Result<bool>;

    /// Renames `from` to `to` in one transaction, keeping the item (content, times, version):
    /// only if `from` has `if_version` (when given, else [`Error::VersionMismatch`]); over an
    /// item at `to` only if it has `replacing` ([`Error::VersionMismatch`] otherwise, also when
    /// absent), else only where no item is ([`Error::AlreadyExists`]). Returns the version, or
    /// `None` when there is no item at `from`.
    async fn rename(
        &self,
        namespace: &Namespace,
        from: &str,
        to: &str,
        if_version: Option<i64>,
        replacing: Option<i64>,
    ) -> Result<Option<i64>>;

    /// Renames every key starting with `from_prefix` to start with `to_prefix` instead, in one
    /// transaction and one statement, keeping the items; [`Error::AlreadyExists`] (and nothing
    /// changed) when any key starts with `to_prefix` or equals `to_key`. Returns how many.
    async fn rename_prefix(
        &self,
        namespace: &Namespace,
        from_prefix: &str,
        to_prefix: &str,
        to_key: &str,
    ) -> Result<u64>;

    /// Applies `ops` in order in one transaction: all of them, or — when one fails, given
    /// with its index — none (a crash of the process in between leaves none either). Returns
    /// each put's new version (`None` for a delete). A delete finding nothing is
    /// [`Error::VersionMismatch`].
    async fn apply_batch(
        &self,
        namespace: &Namespace,
        ops: Vec<BatchOp>,
    ) -> std::result::Result<Vec<Option<i64>>, (usize, Error)>;

    /// Deletes every key starting with `prefix` in one statement; returns how many.
    async fn delete_prefix(&self, namespace: &Namespace, prefix: &str) -> Result<u64>;

    /// One page of items (without content) in key order.
    async fn list(&self, namespace: &Namespace, query: &ListQuery) -> Result<Vec<ItemMeta>>;

    /// One page of items with their content, in key order: for searches that read contents
    /// page by page instead of loading a namespace at once.
    async fn scan(&self, namespace: &Namespace, query: &ListQuery) -> Result<Vec<Item>>;

    /// One page (without content, in key order, at most `query.list.limit`) of the items that
    /// may match `query.plan`, from the search index: every item containing the plan's terms,
    /// every item the index does not cover (not UTF-8 text), and every item larger than
    /// `query.larger_than` — possibly more, never fewer. `None` while the index is not ready
    /// (being built, or unavailable): the caller scans.
    async fn candidates(
        &self,
        namespace: &Namespace,
        query: &CandidateQuery,
    ) -> Result<Option<Vec<ItemMeta>>>;

    /// The items at `keys` (absent ones left out), with their content, in key order.
    async fn get_many(&self, namespace: &Namespace, keys: &[String]) -> Result<Vec<Item>>;

    /// At most `len` bytes of the item at `key` from byte `offset` on, read in the database
    /// without loading the whole content (SQLite: incremental blob I/O; PostgreSQL:
    /// `substring`), only if it has `version` ([`Error::VersionMismatch`] otherwise). `None`
    /// when there is no item.
    async fn read_range(
        &self,
        namespace: &Namespace,
        key: &str,
        offset: u64,
        len: usize,
        version: i64,
    ) -> Result<Option<Vec<u8>>>;

    /// Begins staging a content for `key` chunk by chunk, on a connection of its own, where
    /// no reader sees it (a temporary table of that connection: gone with it if the process
    /// dies); [`StoreUpload::finish`] assembles it in the database and puts it in one
    /// transaction, as [`Store::put`] does.
    async fn begin_upload(&self, namespace: &Namespace, key: &str) -> Result<Box<dyn StoreUpload>>;

    /// The largest content one item can hold, and the limit's name for messages: a copy of a
    /// bigger file is refused before anything is staged. `None`: no limit below memory.
    fn largest_value(&self) -> Option<(u64, &'static str)> {
        None
    }
}

/// A content being staged for one key (see [`Store::begin_upload`]).
#[async_trait]
pub trait StoreUpload: Send + fmt::Debug {
    /// Stages the next chunk.
    async fn append(&mut self, chunk: &[u8]) -> Result<()>;

    /// Puts what was staged at the key under `condition`, with `encoding` (the caller saw
    /// every byte), in one transaction; the staged rows are gone afterwards, whatever the
    /// outcome.
    async fn finish(
        self: Box<Self>,
        condition: PutCondition,
        encoding: Encoding,
    ) -> Result<Written>;

    /// Drops what was staged.
    async fn abort(self: Box<Self>);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_successor_bounds_exactly_the_keys_under_a_prefix() {
        assert_eq!(prefix_successor("/a/").as_deref(), Some("/a0"));
        assert_eq!(prefix_successor("/").as_deref(), Some("0"));
        assert_eq!(prefix_successor(""), None);
        assert_eq!(prefix_successor("a\u{d7ff}").as_deref(), Some("a\u{e000}"));
        assert_eq!(prefix_successor("a\u{10ffff}").as_deref(), Some("b"));
        let upper = prefix_successor("/a/").unwrap();
        for key in ["/a/", "/a/x", "/a/\u{10ffff}", "/a/zzz/y"] {
            assert!(key < upper.as_str(), "{key}");
        }
        for key in ["/a0", "/a00", "/b"] {
            assert!(key >= upper.as_str(), "{key}");
        }
    }

    #[test]
    fn times_round_trip_through_microseconds() {
        let t = UNIX_EPOCH + Duration::from_micros(1_700_000_000_123_456);
        assert_eq!(from_micros(to_micros(t)), t);
        let before = UNIX_EPOCH - Duration::from_micros(5);
        assert_eq!(from_micros(to_micros(before)), before);
    }

    #[test]
    fn list_bounds_never_start_before_the_prefix() {
        let q = ListQuery {
            prefix: "/d/".into(),
            start: ListStart::After("/a".into()),
            limit: 0,
        };
        assert_eq!(q.bounds(), ("/d/".into(), true, Some("/d0".into())));
        assert_eq!(q.sql_limit(), 1);
        let q = ListQuery {
            prefix: "/d/".into(),
            start: ListStart::After("/d/x".into()),
            limit: 5,
        };
        assert_eq!(q.bounds(), ("/d/x".into(), false, Some("/d0".into())));
    }

    #[test]
    fn encoding_follows_utf8_validity() {
        assert_eq!(Encoding::of(b"hello"), Encoding::Utf8);
        assert_eq!(Encoding::of(&[0xff, 0xfe]), Encoding::Binary);
        assert_eq!(Encoding::parse(Encoding::Utf8.as_str()), Encoding::Utf8);
        assert_eq!(Encoding::parse("binary"), Encoding::Binary);
    }
}
