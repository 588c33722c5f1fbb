//! Items as SQLite rows: the columns read into items, the key ranges of a listing, an item
//! found at its version, and the writes of a row.

use super::*;

pub(super) const META_COLUMNS: &str = "key, encoding, size, created_at, modified_at, version";

pub(super) fn meta_of_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<ItemMeta> {
    crate::storage::store::meta_from_columns!(row.get)
}

pub(super) fn item_of_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Item> {
    Ok(Item {
        meta: meta_of_row(row)?,
        content: row.get(6)?,
    })
}

/// The WHERE clause and parameters of a listing: an indexed key range inside one namespace.
pub(super) fn range_sql(query: &ListQuery) -> (String, Vec<String>) {
    let (lower, inclusive, upper) = query.bounds();
    let op = if inclusive { ">=" } else { ">" };
    let mut sql = format!("namespace = ?1 AND key {op} ?2");
    let mut bounds = vec![lower];
    if let Some(upper) = upper {
        sql.push_str(" AND key < ?3");
        bounds.push(upper);
    }
    (sql, bounds)
}

/// The rowid and size of the item at `key`, if it has `version`: `None` when there is no item,
/// [`Error::VersionMismatch`] when it has another version.
pub(super) fn find_version(
    conn: &Connection,
    ns: &str,
    key: &str,
    version: i64,
) -> Result<Option<(i64, u64)>> {
    let found: Option<(i64, i64, i64)> = conn
        .prepare_cached(
            "SELECT rowid, version, size FROM mountfs_items WHERE namespace = ?1 AND key = ?2",
        )
        .map_err(map_error)?
        .query_row(params![ns, key], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?))
        })
        .optional()
        .map_err(map_error)?;
    match found {
        None => Ok(None),
        Some((_, found, _)) if found != version => Err(Error::VersionMismatch),
        Some((rowid, _, size)) => Ok(Some((rowid, u64::try_from(size).unwrap_or(0)))),
    }
}

/// A [`Store::put`] of `size` zero bytes, as binary, inside the transaction `tx` (which holds
/// the write lock): the row an upload then writes its content into (see [`SqliteUpload`]).
pub(super) fn put_sized_in(
    tx: &rusqlite::Transaction<'_>,
    ns: &str,
    key: &str,
    size: i64,
    condition: PutCondition,
) -> Result<Written> {
    put_row_in(
        tx,
        ns,
        key,
        Encoding::Binary,
        size,
        &ZeroContent(size),
        condition,
    )
}

/// The content `zeroblob(N)` as a statement parameter.
pub(super) struct ZeroContent(i64);

impl rusqlite::ToSql for ZeroContent {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        let len =
            u64::try_from(self.0).map_err(|e| rusqlite::Error::ToSqlConversionFailure(e.into()))?;
        Ok(rusqlite::types::ToSqlOutput::ZeroBlob(len))
    }
}

/// A [`Store::put`] inside the transaction `tx` (which holds the write lock). Past
/// [`PENDING_BOUND`] pending items the write folds its own item (see [`fold_own_item`]).
pub(super) fn put_in(
    tx: &rusqlite::Transaction<'_>,
    ns: &str,
    key: &str,
    content: &[u8],
    condition: PutCondition,
) -> Result<Written> {
    let size = i64::try_from(content.len()).unwrap_or(i64::MAX);
    let written = put_row_in(
        tx,
        ns,
        key,
        Encoding::of(content),
        size,
        &content,
        condition,
    )?;
    fold_own_item(tx, ns, key)?;
    Ok(written)
}

/// The row of a put: `content` (bytes, or zeros of the size) under `condition`.
pub(super) fn put_row_in(
    tx: &rusqlite::Transaction<'_>,
    ns: &str,
    key: &str,
    encoding: Encoding,
    size: i64,
    content: &dyn rusqlite::ToSql,
    condition: PutCondition,
) -> Result<Written> {
    let now = to_micros(SystemTime::now());
    let encoding = encoding.as_str();
    let version: i64 = tx
        .query_row(
            "UPDATE mountfs_counters SET value = value + 1 WHERE name = 'version' RETURNING value",
            [],
            |row| row.get(0),
        )
        .map_err(map_error)?;
    let insert = |tx: &rusqlite::Transaction<'_>| {
        tx.execute(
            "INSERT INTO mountfs_items
                         (namespace, key, encoding, size, created_at, modified_at, version, content)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?5, ?6, ?7)
                     ON CONFLICT (namespace, key) DO NOTHING",
            params![ns, key, encoding, size, now, version, content],
        )
        .map_err(map_error)
    };
    let update = |tx: &rusqlite::Transaction<'_>, expected: Option<i64>| {
        tx.execute(
            "UPDATE mountfs_items
                     SET encoding = ?3, size = ?4, modified_at = ?5, version = ?6, content = ?7
                     WHERE namespace = ?1 AND key = ?2 AND (?8 IS NULL OR version = ?8)",
            params![ns, key, encoding, size, now, version, content, expected],
        )
        .map_err(map_error)
    };
    let created = match condition {
        PutCondition::CreateOnly => {
            if insert(tx)? == 0 {
                return Err(Error::AlreadyExists);
            }
            true
        }
        PutCondition::IfVersion(expected) => {
            if update(tx, Some(expected))? == 0 {
                return Err(Error::VersionMismatch);
            }
            false
        }
        PutCondition::Overwrite => {
            if update(tx, None)? == 0 {
                insert(tx)?;
                true
            } else {
                false
            }
        }
    };
    Ok(Written { version, created })
}
