//! What `mountfs cp` will copy, decided before anything is written: the source tree walked
//! through [`Backend::ls`] (directories in path order, depth first), then every path checked
//! at the destination, so that a conflict refuses the whole copy before its first write.
//!
//! The plan holds one entry per file and directory (path and size), never a content: its memory
//! grows with the number of names, not with their sizes. Copying is `super`'s job.

use std::collections::HashSet;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::ground::path::{VirtualPath, escape_name, is_reserved_name};
use crate::storage::backend::{Backend, EntryKind};

use super::{CopyError, reason};

/// One thing to copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Item {
    /// A directory; `empty` when nothing lies in it (it is then made at the destination on
    /// its own, where the destination kind can hold an empty directory).
    Dir { path: VirtualPath, empty: bool },
    /// A file of `size` bytes (as listed; the copy takes what it reads).
    File { path: VirtualPath, size: u64 },
}

impl Item {
    pub(super) fn path(&self) -> &VirtualPath {
        match self {
            Self::Dir { path, .. } | Self::File { path, .. } => path,
        }
    }
}

/// The source tree in copy order, with its totals.
#[derive(Debug, Default)]
pub(super) struct Plan {
    pub(super) items: Vec<Item>,
    pub(super) files: u64,
    pub(super) bytes: u64,
    /// Directories that are symbolic links (on disk), not walked: a link to an ancestor would
    /// make the walk endless, and one to a sibling would copy its files twice.
    pub(super) linked_dirs: Vec<VirtualPath>,
}

/// Walks the whole source tree (see the module doc). `host`: the source's directory when it is
/// a disk mount, whose every entry the listing must account for — one it leaves out (a name
/// that is not a valid path, a link leading out, a socket, an entry that cannot be read) fails
/// the copy instead of being skipped in silence; only `.git` and mountfs's own temporary names
/// are left out by design.
pub(super) async fn walk(source: &dyn Backend, host: Option<&Path>) -> Result<Plan, CopyError> {
    let mut plan = Plan::default();
    // Directories still to list, the next one last.
    let mut pending = vec![VirtualPath::root()];
    while let Some(dir) = pending.pop() {
        let mut entries = source.ls(&dir).await.map_err(|error| CopyError::List {
            path: dir.clone(),
            reason: reason(&error),
        })?;
        entries.sort_by(|a, b| a.path.cmp(&b.path));
        for entry in &entries {
            if entry.path.refuse_reserved().is_err() {
                return Err(CopyError::Reserved {
                    path: entry.path.clone(),
                });
            }
        }
        if let Some(host) = host {
            let listed: HashSet<&str> = entries.iter().filter_map(|e| e.path.file_name()).collect();
            account_for(host, &dir, &listed)?;
        }
        if !dir.is_root() {
            plan.items.push(Item::Dir {
                path: dir.clone(),
                empty: entries.is_empty(),
            });
        }
        let mut subdirs = Vec::new();
        for entry in entries {
            match entry.kind {
                EntryKind::File => {
                    plan.files += 1;
                    plan.bytes += entry.size;
                    plan.items.push(Item::File {
                        path: entry.path,
                        size: entry.size,
                    });
                }
                EntryKind::Directory => {
                    let linked =
                        source
                            .is_symlink(&entry.path)
                            .await
                            .map_err(|error| CopyError::List {
                                path: entry.path.clone(),
                                reason: reason(&error),
                            })?;
                    if linked {
                        plan.linked_dirs.push(entry.path);
                    } else {
                        subdirs.push(entry.path);
                    }
                }
            }
        }
        // Files of a directory come before its subdirectories; subdirectories in path order.
        pending.extend(subdirs.into_iter().rev());
    }
    Ok(plan)
}

/// Checks every planned path at the destination: a directory where the source has a file (or
/// the reverse) is always refused; an existing file is refused unless `overwrite`. The first
/// conflict is named, with how many there are.
pub(super) async fn check_destination(
    destination: &dyn Backend,
    plan: &Plan,
    overwrite: bool,
) -> Result<(), CopyError> {
    let mut existing: Option<(VirtualPath, u64)> = None;
    // The walk lists each directory once, before what lies in it: a file at the destination
    // where the source has a directory is found before any path below it.
    for item in &plan.items {
        let path = item.path();
        let found = destination
            .stat(path)
            .await
            .map_err(|error| CopyError::Check {
                path: path.clone(),
                reason: reason(&error),
            })?;
        let Some(found) = found else { continue };
        match (item, found.kind) {
            (Item::Dir { .. }, EntryKind::Directory) => {}
            (Item::File { .. }, EntryKind::File) => {
                let (_, count) = existing.get_or_insert_with(|| (path.clone(), 0));
                *count += 1;
            }
            (Item::Dir { .. }, EntryKind::File) => {
                return Err(CopyError::KindConflict {
                    path: path.clone(),
                    source_kind: "directory",
                    destination_kind: "file",
                });
            }
            (Item::File { .. }, EntryKind::Directory) => {
                return Err(CopyError::KindConflict {
                    path: path.clone(),
                    source_kind: "file",
                    destination_kind: "directory",
                });
            }
        }
    }
    match existing {
        Some((first, count)) if !overwrite => Err(CopyError::Exists { first, count }),
        _ => Ok(()),
    }
}

/// Fails when the host directory of `dir` holds an entry the listing (`listed`) left out,
/// other than `.git` and mountfs's own names: such an entry would not be copied.
fn account_for(host: &Path, dir: &VirtualPath, listed: &HashSet<&str>) -> Result<(), CopyError> {
    let at = dir
        .components()
        .fold(host.to_path_buf(), |path, name| path.join(name));
    let entries = std::fs::read_dir(&at).map_err(|error| CopyError::List {
        path: dir.clone(),
        reason: error.to_string(),
    })?;
    let mut missing: Vec<(String, String)> = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|error| CopyError::List {
            path: dir.clone(),
            reason: error.to_string(),
        })?;
        let name = entry.file_name();
        let shown = String::from_utf8_lossy(name.as_bytes()).into_owned();
        if name == ".git" || is_reserved_name(&shown) {
            continue;
        }
        // The server's own files (its data directory, databases, token file) are left out by
        // design, whatever path reaches them (see `backend::disk::own_files`).
        if std::fs::metadata(entry.path())
            .is_ok_and(|meta| crate::storage::backend::disk::own_files::is_own_meta(&meta))
        {
            continue;
        }
        if name.to_str().is_some_and(|n| listed.contains(n)) {
            continue;
        }
        let why = match (name.to_str(), std::fs::symlink_metadata(entry.path())) {
            (None, _) => "its name is not valid UTF-8, so no path names it".to_owned(),
            (Some(n), _) if VirtualPath::root().join(n).is_err() => {
                "its name is not a valid path (it holds a backslash, or is too long)".to_owned()
            }
            (_, Err(error)) => format!("it cannot be looked at ({error})"),
            (_, Ok(meta)) if meta.file_type().is_symlink() => {
                "it is a symbolic link leading out of --from, or to nothing".to_owned()
            }
            (_, Ok(meta)) if !meta.is_file() && !meta.is_dir() => {
                "it is neither a file nor a directory (a socket, FIFO or device)".to_owned()
            }
            (_, Ok(_)) => "the listing left it out (it cannot be read)".to_owned(),
        };
        let path = format!(
            "{}/{}",
            if dir.is_root() { "" } else { dir.as_str() },
            escape_name(&shown)
        );
        missing.push((path, why));
    }
    missing.sort();
    match missing.into_iter().next() {
        None => Ok(()),
        Some((path, why)) => Err(CopyError::Skipped { path, why }),
    }
}
