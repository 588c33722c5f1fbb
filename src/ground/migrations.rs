//! Which schema migrations a database still needs. Every engine that keeps rows (the SQLite and
//! PostgreSQL item stores, the SQLite and PostgreSQL audit logs) numbers its schema and holds
//! its migrations in a list; opening runs, in one transaction, those past the recorded version.

/// The migrations of `list` that a schema at version `current` still needs, in order, each with
/// the version it leaves behind. `Err` holds the words for a schema this mountfs does not know
/// (newer, or a version below 0), to follow the name of the database: "has schema version 9,
/// newer than this mountfs knows (6); upgrade mountfs".
pub fn pending<'a>(
    list: &'a [&'a str],
    current: i64,
) -> Result<impl Iterator<Item = (&'a str, i64)> + 'a, String> {
    let known = list.len();
    let at = usize::try_from(current).unwrap_or(usize::MAX);
    if at > known {
        return Err(format!(
            "has schema version {current}, newer than this mountfs knows ({known}); upgrade mountfs"
        ));
    }
    Ok(list
        .iter()
        .enumerate()
        .skip(at)
        .map(|(index, sql)| (*sql, i64::try_from(index + 1).unwrap_or(i64::MAX))))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIST: &[&str] = &["one", "two", "three"];

    #[test]
    fn only_the_migrations_past_the_version_run_each_with_its_new_version() {
        let all: Vec<_> = pending(LIST, 0).unwrap().collect();
        assert_eq!(all, [("one", 1), ("two", 2), ("three", 3)]);
        let rest: Vec<_> = pending(LIST, 2).unwrap().collect();
        assert_eq!(rest, [("three", 3)]);
        assert_eq!(pending(LIST, 3).unwrap().count(), 0);
    }

    #[test]
    fn a_newer_or_negative_version_is_refused_with_both_numbers() {
        let newer = pending(LIST, 4).err().unwrap();
        assert_eq!(
            newer,
            "has schema version 4, newer than this mountfs knows (3); upgrade mountfs"
        );
        assert!(pending(LIST, -1).err().unwrap().contains("version -1"));
    }
}
