//! Keeping a file's content aside on disk for undo, when it is too large to keep in memory
//! (issue 10: `delete` or an overwrite of a 6 GiB file used to read it whole for the undo
//! history and abort the process).
//!
//! The content never moves through memory: a deleted file is renamed, and a replaced file is
//! hard-linked just before the atomic write replaces it, into one private directory at the mount
//! root, named like our temporary files (see `temp`): no listing, walk or search
//! shows it, and the start-up sweep removes it once this process is gone. `undo_edit` renames the
//! content back; dropping the undo step unlinks it. A file on another file system than the mount
//! root (a bind mount inside the directory) cannot be renamed there: the caller then changes it
//! without undo, and says so.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::AsFd;

use cap_std::fs::Dir;
use rustix::fs::{AtFlags, FileType, Mode, RenameFlags};

use super::resolve::{canonicalize, map_io};
use super::temp::{InFlight, temp_name};
use super::version;
use super::write::{
    DirLock, Kept, check_replaceable, current_version, refuse_inside_git, write_temp_and_rename,
};
use crate::ground::path::VirtualPath;
use crate::storage::backend::{Error, Result, Version, WriteOutcome};

/// The private directory of one mounted root: created on first use, mode 0700.
#[derive(Debug)]
pub(super) struct AsideDir {
    name: OsString,
}

impl AsideDir {
    /// A directory name of this process, not created yet.
    pub(super) fn new() -> Self {
        Self { name: temp_name() }
    }

    /// Opens it beneath `root`, creating it when missing.
    fn open(&self, root: &Dir) -> io::Result<Dir> {
        match rustix::fs::mkdirat(root, &self.name, Mode::from_raw_mode(0o700)) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(errno) => return Err(errno.into()),
        }
        root.open_dir(&self.name)
    }

    /// Opens it beneath `root` if it exists.
    fn open_existing(&self, root: &Dir) -> io::Result<Dir> {
        root.open_dir(&self.name)
    }
}

/// One content kept aside: its entry in the [`AsideDir`] and its size.
#[derive(Debug)]
pub(super) struct Entry {
    pub(super) name: OsString,
    pub(super) size: u64,
}

/// Whether an error is a rename or link across file systems (the content cannot be kept).
fn crosses_devices(errno: rustix::io::Errno) -> bool {
    errno == rustix::io::Errno::XDEV
}

/// Moves the file at `path` (it must have `version`) into the aside directory. `Ok(None)` when
/// it is not a regular file or lies on another file system: nothing was changed.
pub(super) fn set_aside(
    root: &Dir,
    aside: &AsideDir,
    path: &VirtualPath,
    version: &Version,
) -> Result<Option<Entry>> {
    let io = |e: io::Error| map_io(e, path);
    let canonical = canonicalize(root, path, false)?;
    refuse_inside_git(&canonical, path)?;
    let Some((parent, name)) = canonical.split_last() else {
        return Err(Error::MountRoot { path: path.clone() });
    };
    let lock = DirLock::take(root, &parent).map_err(io)?;
    let stat = rustix::fs::statat(&lock.dir, &name, AtFlags::SYMLINK_NOFOLLOW)
        .map_err(|e| io(e.into()))?;
    super::write::refuse_own_place(&lock.dir, Some(&stat), path)?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return Ok(None);
    }
    if current_version(&lock.dir, &name, path)? != *version {
        return Err(Error::VersionMismatch { path: path.clone() });
    }
    let aside_dir = aside.open(root).map_err(io)?;
    let entry = temp_name();
    match rustix::fs::renameat(&lock.dir, &name, &aside_dir, &entry) {
        Ok(()) => {}
        Err(errno) if crosses_devices(errno) => return Ok(None),
        Err(errno) => return Err(io(errno.into())),
    }
    rustix::fs::fsync(lock.dir.as_fd()).map_err(|e| io(e.into()))?;
    Ok(Some(Entry {
        name: entry,
        size: version::size_of(&stat),
    }))
}

/// Replaces the file at `path` (it must have `version`) with `content` atomically, after
/// hard-linking the old file into the aside directory. `Ok(None)` when the link cannot be made
/// (another file system): nothing was changed.
pub(super) fn write_keeping(
    root: &Dir,
    temps: &InFlight,
    aside: &AsideDir,
    path: &VirtualPath,
    content: &[u8],
    version: &Version,
) -> Result<Option<(WriteOutcome, Entry)>> {
    let io = |e: io::Error| map_io(e, path);
    let canonical = canonicalize(root, path, true)?;
    refuse_inside_git(&canonical, path)?;
    let Some((parent, name)) = canonical.split_last() else {
        return Err(Error::IsADirectory { path: path.clone() });
    };
    let lock = DirLock::take(root, &parent).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => Error::VersionMismatch { path: path.clone() },
        _ => io(e),
    })?;
    let dir = &lock.dir;
    let stat = match rustix::fs::statat(dir, &name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => stat,
        Err(rustix::io::Errno::NOENT) => {
            return Err(Error::VersionMismatch { path: path.clone() });
        }
        Err(errno) => return Err(io(errno.into())),
    };
    check_replaceable(&stat, path)?;
    if current_version(dir, &name, path)? != *version {
        return Err(Error::VersionMismatch { path: path.clone() });
    }
    let aside_dir = aside.open(root).map_err(io)?;
    let entry = temp_name();
    match rustix::fs::linkat(dir, &name, &aside_dir, &entry, AtFlags::empty()) {
        Ok(()) => {}
        Err(errno) if crosses_devices(errno) => return Ok(None),
        Err(errno) => return Err(io(errno.into())),
    }
    let kept = Kept {
        mode: stat.st_mode & 0o7777,
        uid: stat.st_uid,
        gid: stat.st_gid,
    };
    let in_flight = temps.begin(root, &parent);
    let temp = temp_name();
    let written = write_temp_and_rename(dir, &temp, &name, content, Some(kept));
    if written.is_err() {
        let _ = rustix::fs::unlinkat(dir, &temp, AtFlags::empty());
    }
    drop(in_flight);
    let written = match written {
        Ok(written) => written,
        Err(error) => {
            let _ = rustix::fs::unlinkat(&aside_dir, &entry, AtFlags::empty());
            return Err(io(error));
        }
    };
    let version = version::version_of(content, &written);
    Ok(Some((
        WriteOutcome {
            version,
            created: false,
        },
        Entry {
            name: entry,
            size: version::size_of(&stat),
        },
    )))
}

/// Renames the kept `entry` back to `path`: where nothing is (`replacing` `None`), or over the
/// file that has version `replacing`. Parent directories are created again when needed.
pub(super) fn restore(
    root: &Dir,
    aside: &AsideDir,
    entry: &OsStr,
    path: &VirtualPath,
    replacing: Option<&Version>,
) -> Result<WriteOutcome> {
    let io = |e: io::Error| map_io(e, path);
    let canonical = canonicalize(root, path, true)?;
    refuse_inside_git(&canonical, path)?;
    let Some((parent, name)) = canonical.split_last() else {
        return Err(Error::IsADirectory { path: path.clone() });
    };
    root.create_dir_all(&parent).map_err(io)?;
    let lock = DirLock::take(root, &parent).map_err(io)?;
    let dir = &lock.dir;
    let existing = match rustix::fs::statat(dir, &name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => Some(stat),
        Err(rustix::io::Errno::NOENT) => None,
        Err(errno) => return Err(io(errno.into())),
    };
    match (replacing, &existing) {
        (None, Some(_)) => return Err(Error::AlreadyExists { path: path.clone() }),
        (Some(_), None) => return Err(Error::VersionMismatch { path: path.clone() }),
        (Some(expected), Some(stat)) => {
            check_replaceable(stat, path)?;
            if current_version(dir, &name, path)? != *expected {
                return Err(Error::VersionMismatch { path: path.clone() });
            }
        }
        (None, None) => {}
    }
    let aside_dir = aside.open_existing(root).map_err(io)?;
    let flags = if replacing.is_none() {
        RenameFlags::NOREPLACE
    } else {
        RenameFlags::empty()
    };
    match rustix::fs::renameat_with(&aside_dir, entry, dir, &name, flags) {
        Ok(()) => {}
        Err(rustix::io::Errno::INVAL) if !flags.is_empty() => {
            rustix::fs::renameat(&aside_dir, entry, dir, &name).map_err(|e| io(e.into()))?;
        }
        Err(rustix::io::Errno::EXIST) => return Err(Error::AlreadyExists { path: path.clone() }),
        Err(errno) => return Err(io(errno.into())),
    }
    rustix::fs::fsync(dir.as_fd()).map_err(|e| io(e.into()))?;
    let version = current_version(dir, &name, path)?;
    Ok(WriteOutcome {
        version,
        created: replacing.is_none(),
    })
}

/// Removes a kept entry that is no longer needed (its undo step was dropped).
pub(super) fn discard(root: &Dir, aside: &AsideDir, entry: &OsStr) {
    if let Ok(dir) = aside.open_existing(root) {
        let _ = rustix::fs::unlinkat(&dir, entry, AtFlags::empty());
    }
}
