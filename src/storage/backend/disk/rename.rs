//! Renaming beneath the root (issue 17): one `renameat2` between two directories opened
//! beneath the root handle, so a file keeps its inode, mode, owner, times and hard links, and a
//! directory of any size moves in one system call with no content passing through memory.
//!
//! Both paths are canonicalised first, as for every change (see [`super::resolve`]): the
//! source's last component is not followed (a symlink moves as itself, like `mv`), the
//! destination's is (renaming over an inside symlink replaces its target, as a write does); a
//! symlink leading out anywhere on the way is [`Error::OutsideMount`] before anything happens.
//! The two parent directories are then opened beneath the root (`RESOLVE_BENEATH`, so a symlink
//! swapped in since is still refused), locked with the same `flock` writers take (in path
//! order, once when they are one directory), checked (versions, what is at the destination),
//! and the rename names only single entries inside those two descriptors.
//!
//! `RENAME_NOREPLACE` unless the destination is to be replaced; a file system without it falls
//! back to a plain rename under the locks, after the destination was seen absent. A rename
//! across file systems (a bind mount inside the root) is not possible in place: the caller is
//! told (`Ok(None)`) and copies instead.

use std::io;
use std::os::fd::AsFd;
use std::path::Path;

use cap_std::fs::Dir;
use rustix::fs::{AtFlags, FileType, Mode, OFlags, RenameFlags};

use super::resolve::{canonicalize, map_io};
use super::temp::refuse_temp_name;
use super::write::{
    DirLock, check_replaceable, create_parent_dirs, current_version, refuse_inside_git,
    refuse_own_place,
};
use crate::ground::path::VirtualPath;
use crate::storage::backend::{EntryKind, Error, RenameOptions, Renamed, Result, Version};

/// Renames `from` to `to` beneath `root` (see the module doc). `Ok(None)`: not possible in
/// place (another file system), nothing changed.
pub(super) fn rename(
    root: &Dir,
    from: &VirtualPath,
    to: &VirtualPath,
    options: &RenameOptions,
) -> Result<Option<Renamed>> {
    let source = canonicalize(root, from, false)?;
    refuse_inside_git(&source, from)?;
    let target = canonicalize(root, to, true)?;
    refuse_inside_git(&target, to)?;
    let Some((source_parent, source_name)) = source.split_last() else {
        return Err(Error::MountRoot { path: from.clone() });
    };
    let Some((target_parent, target_name)) = target.split_last() else {
        return Err(Error::MountRoot { path: to.clone() });
    };
    for (name, path) in [(&source_name, from), (&target_name, to)] {
        refuse_temp_name(name, path)?;
    }
    if target == source {
        return Err(Error::Unsupported {
            path: to.clone(),
            reason: format!("it is {from} itself (through a symbolic link); nothing to move"),
        });
    }
    if target.starts_with(&source) {
        return Err(Error::Unsupported {
            path: to.clone(),
            reason: format!("it lies inside {from}; a directory cannot be moved into itself"),
        });
    }
    create_parent_dirs(root, &target_parent, to)?;
    let locks = ParentLocks::take(root, &source_parent, &target_parent, from, to)?;
    let (source_dir, target_dir) = (locks.source(), locks.target());
    let stat = rustix::fs::statat(source_dir, &source_name, AtFlags::SYMLINK_NOFOLLOW)
        .map_err(|e| map_io(e.into(), from))?;
    refuse_own_place(source_dir, Some(&stat), from)?;
    let file_type = FileType::from_raw_mode(stat.st_mode);
    let kind = match file_type {
        FileType::Directory => EntryKind::Directory,
        FileType::RegularFile | FileType::Symlink => EntryKind::File,
        _ => {
            return Err(Error::Unsupported {
                path: from.clone(),
                reason: "it is a FIFO, socket or device; mountfs only moves files and directories"
                    .into(),
            });
        }
    };
    if let Some(expected) = &options.if_version
        && (file_type != FileType::RegularFile
            || current_version(source_dir, &source_name, from)? != *expected)
    {
        return Err(Error::VersionMismatch { path: from.clone() });
    }
    let existing = match rustix::fs::statat(target_dir, &target_name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => Some(stat),
        Err(rustix::io::Errno::NOENT) => None,
        Err(errno) => return Err(map_io(errno.into(), to)),
    };
    refuse_own_place(target_dir, existing.as_ref(), to)?;
    match (&existing, &options.replacing) {
        (None, None) => {}
        (None, Some(_)) => return Err(Error::VersionMismatch { path: to.clone() }),
        (Some(stat), None) => {
            return Err(
                if FileType::from_raw_mode(stat.st_mode) == FileType::Directory {
                    Error::IsADirectory { path: to.clone() }
                } else {
                    Error::AlreadyExists { path: to.clone() }
                },
            );
        }
        (Some(stat), Some(expected)) => {
            if kind == EntryKind::Directory {
                return Err(Error::AlreadyExists { path: to.clone() });
            }
            check_replaceable(stat, to)?;
            if current_version(target_dir, &target_name, to)? != *expected {
                return Err(Error::VersionMismatch { path: to.clone() });
            }
        }
    }
    let flags = if options.replacing.is_none() {
        RenameFlags::NOREPLACE
    } else {
        RenameFlags::empty()
    };
    let renamed = match rustix::fs::renameat_with(
        source_dir,
        &source_name,
        target_dir,
        &target_name,
        flags,
    ) {
        // File systems without RENAME_NOREPLACE: the destination was seen absent under the
        // locks every mountfs writer takes.
        Err(rustix::io::Errno::INVAL) if !flags.is_empty() => {
            rustix::fs::renameat(source_dir, &source_name, target_dir, &target_name)
        }
        other => other,
    };
    match renamed {
        Ok(()) => {}
        Err(rustix::io::Errno::XDEV) => return Ok(None),
        Err(rustix::io::Errno::EXIST | rustix::io::Errno::NOTEMPTY) => {
            return Err(Error::AlreadyExists { path: to.clone() });
        }
        Err(errno) => return Err(map_io(errno.into(), to)),
    }
    for dir in [source_dir, target_dir] {
        rustix::fs::fsync(dir.as_fd()).map_err(|e| map_io(e.into(), to))?;
    }
    let version = match file_type {
        FileType::RegularFile => Some(current_version(target_dir, &target_name, to)?),
        _ => None,
    };
    drop(locks);
    Ok(Some(Renamed { kind, version }))
}

/// The locked parent directories of a rename: one lock when they are the same directory.
struct ParentLocks {
    first: DirLock,
    second: Option<DirLock>,
    /// Whether `first` is the target's parent (and `second` the source's).
    target_first: bool,
}

impl ParentLocks {
    /// Opens and locks both parents beneath `root`, in path order so that two renames never
    /// wait on each other in a cycle.
    fn take(
        root: &Dir,
        source: &Path,
        target: &Path,
        from: &VirtualPath,
        to: &VirtualPath,
    ) -> Result<Self> {
        let open = |dir: &Path, path: &VirtualPath| -> Result<Dir> {
            open_dir(root, dir).map_err(|e| map_io(e, path))
        };
        let source_dir = open(source, from)?;
        let target_dir = open(target, to)?;
        let same = {
            let a = rustix::fs::fstat(&source_dir).map_err(|e| map_io(e.into(), from))?;
            let b = rustix::fs::fstat(&target_dir).map_err(|e| map_io(e.into(), to))?;
            (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)
        };
        let lock = |dir: Dir, path: &VirtualPath| -> Result<DirLock> {
            DirLock::lock(dir).map_err(|e| map_io(e, path))
        };
        if same {
            return Ok(Self {
                first: lock(source_dir, from)?,
                second: None,
                target_first: false,
            });
        }
        if target < source {
            let first = lock(target_dir, to)?;
            let second = lock(source_dir, from)?;
            Ok(Self {
                first,
                second: Some(second),
                target_first: true,
            })
        } else {
            let first = lock(source_dir, from)?;
            let second = lock(target_dir, to)?;
            Ok(Self {
                first,
                second: Some(second),
                target_first: false,
            })
        }
    }

    fn source(&self) -> &Dir {
        match (&self.second, self.target_first) {
            (Some(second), true) => &second.dir,
            _ => &self.first.dir,
        }
    }

    fn target(&self) -> &Dir {
        match (&self.second, self.target_first) {
            (Some(second), false) => &second.dir,
            _ => &self.first.dir,
        }
    }
}

/// Opens a directory beneath `root` as a readable descriptor (lockable and syncable).
fn open_dir(root: &Dir, dir: &Path) -> io::Result<Dir> {
    use cap_std::fs::OpenOptionsExt;
    let mut options = cap_std::fs::OpenOptions::new();
    options
        .read(true)
        .custom_flags((OFlags::DIRECTORY | OFlags::CLOEXEC).bits() as i32);
    Ok(Dir::from_std_file(
        root.open_with(dir, &options)?.into_std(),
    ))
}

/// A file's permission bits (`0o7777`), following symlinks beneath the root.
pub(super) fn permissions(root: &Dir, path: &VirtualPath) -> Result<u32> {
    use cap_std::fs::PermissionsExt;
    let meta = root
        .metadata(super::resolve::relative(path))
        .map_err(|e| map_io(e, path))?;
    Ok(meta.permissions().mode() & 0o7777)
}

/// Sets the permission bits of the regular file at `path` (symlinks inside the root followed to
/// it); returns its version afterwards (a change of mode moves the identity of a big file).
pub(super) fn set_permissions(root: &Dir, path: &VirtualPath, mode: u32) -> Result<Version> {
    let io = |e: io::Error| map_io(e, path);
    let canonical = canonicalize(root, path, true)?;
    refuse_inside_git(&canonical, path)?;
    let Some((parent, name)) = canonical.split_last() else {
        return Err(Error::IsADirectory { path: path.clone() });
    };
    let lock = DirLock::take(root, &parent).map_err(io)?;
    let fd = rustix::fs::openat(
        &lock.dir,
        &name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| io(e.into()))?;
    let stat = rustix::fs::fstat(&fd).map_err(|e| io(e.into()))?;
    check_replaceable(&stat, path)?;
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode & 0o7777)).map_err(|e| io(e.into()))?;
    current_version(&lock.dir, &name, path)
}
