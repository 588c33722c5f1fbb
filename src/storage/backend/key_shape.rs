//! The shape rules of a store of keys (a database table, a bucket), where a directory is only
//! the common prefix of its files' keys: a file may not stand where a directory is, nor a
//! directory where a file is. Both key backends ([`super::store`], [`super::object`]) check
//! them here, by looking at keys, before they write or move.

use async_trait::async_trait;

use super::{Error, Result};
use crate::ground::path::VirtualPath;

/// What a key backend answers about its keys.
#[async_trait]
pub(crate) trait Keys: Sync {
    /// What the backend knows of a file.
    type Meta: Send;

    /// The file whose key is `path`, if any (never the root).
    async fn file(&self, path: &VirtualPath) -> Result<Option<Self::Meta>>;

    /// Whether any key lies under `dir` (so that `dir` exists as a directory).
    async fn has_children(&self, dir: &VirtualPath) -> Result<bool>;
}

/// Refuses a file at `path` when a directory is there or a file stands at one of its parents.
pub(crate) async fn check_file_place<K: Keys>(keys: &K, path: &VirtualPath) -> Result<()> {
    if path.is_root() || keys.has_children(path).await? {
        return Err(Error::IsADirectory { path: path.clone() });
    }
    check_parents(keys, path).await
}

/// Refuses a move of `from` to `to` that could not be right whatever the versions: either is
/// the root, `to` lies inside `from`, `to` is a directory, or a file stands at a parent of
/// `to`. Returns the file now at `to`.
pub(crate) async fn check_move<K: Keys>(
    keys: &K,
    from: &VirtualPath,
    to: &VirtualPath,
) -> Result<Option<K::Meta>> {
    for path in [from, to] {
        if path.is_root() {
            return Err(Error::MountRoot { path: path.clone() });
        }
    }
    if to.starts_with(from) {
        return Err(Error::Unsupported {
            path: to.clone(),
            reason: format!("it lies inside {from}; a directory cannot be moved into itself"),
        });
    }
    let target = keys.file(to).await?;
    if target.is_none() && keys.has_children(to).await? {
        return Err(Error::IsADirectory { path: to.clone() });
    }
    check_parents(keys, to).await?;
    Ok(target)
}

/// Refuses `path` when a file stands at one of its parents.
async fn check_parents<K: Keys>(keys: &K, path: &VirtualPath) -> Result<()> {
    let mut ancestor = path.parent();
    while let Some(dir) = ancestor {
        if keys.file(&dir).await?.is_some() {
            return Err(Error::NotADirectory { path: dir });
        }
        ancestor = dir.parent();
    }
    Ok(())
}
