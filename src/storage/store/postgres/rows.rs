//! Items as PostgreSQL rows: where an item's content is kept, the write statements of each
//! condition, their parameters and what they report, and the columns read into items.

use super::*;

/// The size over which a content is kept in the column `large_content`, uncompressed, and
/// `content` is `NULL` (see schema versions 3 and 4 in [`MIGRATIONS`]): a content up to this
/// is read whole by a copy (its range size), and stays compressed.
pub const LARGE_CONTENT_BYTES: u64 = 4 << 20;

/// An item's content, wherever it is kept (see schema versions 3 and 4 in [`MIGRATIONS`]):
/// every query reading a content reads this, never `content` alone (`NULL` for a large one).
pub(super) const CONTENT: &str =
    "CASE WHEN large_version = version THEN large_content ELSE content END";

pub(super) const META_COLUMNS: &str = "key, encoding, size, created_at, modified_at, version";

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
pub(super) enum ContentSource {
    /// The statement's last parameter ([`Store::put`], a batch).
    Parameter,
    /// The chunks an upload staged in its temporary table ([`STAGED_CONTENT`]).
    Staged,
}

/// The three writes, by condition, for `put`/batches and for uploads, made once.
pub(super) static WRITE_STATEMENTS: std::sync::LazyLock<[[String; 3]; 2]> =
    std::sync::LazyLock::new(|| {
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
pub(super) enum WriteKind {
    CreateOnly,
    IfVersion,
    Overwrite,
}

impl WriteKind {
    pub(super) fn of(condition: &PutCondition) -> Self {
        match condition {
            PutCondition::CreateOnly => Self::CreateOnly,
            PutCondition::IfVersion(_) => Self::IfVersion,
            PutCondition::Overwrite => Self::Overwrite,
        }
    }
}

/// The statement that writes under `kind` a content from `source` (see above).
pub(super) fn write_statement(kind: WriteKind, source: ContentSource) -> &'static str {
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

pub(super) fn write_sql(kind: WriteKind, source: ContentSource) -> String {
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
    let insert = format!(
        "INSERT INTO mountfs_items
             (namespace, key, encoding, size, created_at, modified_at, version, content,
              text_keys, text_keys_version, large_content, large_version)
         SELECT $1::text, $2::text, $3::text, $4::bigint, $5::bigint, $5::bigint, next.v,
                {small}, $6::integer[], {stamp}, {large}, {large_version}
         FROM {next}"
    );
    match kind {
        WriteKind::CreateOnly => {
            format!("{insert} ON CONFLICT (namespace, key) DO NOTHING RETURNING version")
        }
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
            "{insert}
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
pub(super) fn written_of(kind: WriteKind, rows: &[Row]) -> Result<Written> {
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
pub(super) fn write_params<'a>(
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
pub(super) struct WriteFields<'a> {
    pub(super) namespace: &'a str,
    pub(super) key: &'a str,
    pub(super) encoding: &'static str,
    pub(super) size: i64,
    pub(super) now: i64,
    pub(super) trigrams: Option<Vec<i32>>,
    /// Whether `trigrams` are those of this content (`false`: the item is left behind for
    /// the pass, see [`INDEXES`]).
    pub(super) stamped: bool,
}

impl<'a> WriteFields<'a> {
    /// The fields of `content` (or of an upload's, whose `encoding` and `size` the caller
    /// knows and whose trigrams are those of `indexed`, its whole content when it is small
    /// enough to be indexed). An item the index does not hold is stamped with no trigrams
    /// (nothing to compute); one it holds is left behind when `defer`, else given its
    /// trigrams now.
    pub(super) fn new(
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

/// One column of a row, with a store error (not a panic) on a type mismatch.
pub(super) fn column<'a, T: tokio_postgres::types::FromSql<'a>>(
    row: &'a Row,
    index: usize,
) -> Result<T> {
    row.try_get(index)
        .map_err(|e| Error::Query(format!("PostgreSQL row: {e}")))
}

pub(super) fn meta_of_row(row: &Row) -> Result<ItemMeta> {
    let read = || -> std::result::Result<ItemMeta, tokio_postgres::Error> {
        crate::storage::store::meta_from_columns!(row.try_get)
    };
    read().map_err(|e| Error::Query(format!("PostgreSQL row: {e}")))
}

pub(super) fn item_of_row(row: &Row) -> Result<Item> {
    Ok(Item {
        meta: meta_of_row(row)?,
        content: column(row, 6)?,
    })
}
