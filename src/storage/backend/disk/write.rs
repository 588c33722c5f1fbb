//! Changing disk files: atomic, mode-keeping writes under a lock, and deletes.
//!
//! A write goes: canonicalise the path (symlinks inside the root are followed to their target;
//! one leading out is refused before anything is created) → create the parent directories →
//! open the parent directory and take an exclusive `flock` on it → check the current file
//! (regular, single link, and for a conditional write its version) → write a temporary file
//! named like our temporary files (see `temp`) in the same directory with the old file's permission bits
//! and, where allowed, its owner (new files: 0644 less the umask) → `fsync` it → `rename` it over the target
//! (`RENAME_NOREPLACE` when the file must not exist) → `fsync` the directory → unlock.
//!
//! A reader therefore sees the old or the new content, never a mix; a crash at any moment leaves
//! the old or the new file plus, at worst, a temporary file that no listing shows and that the
//! next start removes (the sweep in `temp`, which finds it through the record of temporary
//! files in flight that the write adds its directory to first).
//!
//! The lock is taken on the directory's own open file description, so it orders writers in
//! this process (each write opens the directory anew) and in other mountfs processes alike.
//! Programs that do not take it (an editor) can still change the file between our check and
//! our rename — no user-space file system can prevent that without mandatory locks; the window
//! is the few microseconds between the two system calls.

use std::ffi::OsStr;
use std::io::{self, Write};
use std::os::fd::AsFd;

use cap_std::fs::{Dir, OpenOptionsExt};
use rustix::fs::{AtFlags, FileType, FlockOperation, Mode, OFlags, RenameFlags, Stat};

use super::resolve::{self, Canonical, canonicalize, map_io};
use super::temp::{InFlight, refuse_temp_name, temp_name};
use super::{own_files, version};
use crate::ground::path::VirtualPath;
use crate::storage::backend::{DeleteOptions, Error, Result, Version, WriteMode, WriteOutcome};

/// Permission bits of a new file, before the umask (CONTRACT: 0644 minus umask).
const NEW_FILE_MODE: u32 = 0o644;

/// An exclusive `flock` on a directory, released on drop (by closing the descriptor).
#[derive(Debug)]
pub(super) struct DirLock {
    pub(super) dir: Dir,
}

impl DirLock {
    /// Opens `parent` beneath the root (a readable descriptor: cap-std's own directory handles
    /// are `O_PATH`, which can be neither locked nor synced) and locks it.
    pub(super) fn take(root: &Dir, parent: &std::path::Path) -> io::Result<Self> {
        let mut options = cap_std::fs::OpenOptions::new();
        options
            .read(true)
            .custom_flags((OFlags::DIRECTORY | OFlags::CLOEXEC).bits() as i32);
        let dir = Dir::from_std_file(root.open_with(parent, &options)?.into_std());
        Self::lock(dir)
    }

    /// Locks a directory already opened as a readable descriptor.
    pub(super) fn lock(dir: Dir) -> io::Result<Self> {
        rustix::fs::flock(&dir, FlockOperation::LockExclusive)?;
        Ok(Self { dir })
    }
}

/// Refuses changes inside a `.git` directory (after symlinks are resolved): git runs its hooks
/// and the commands its config names outside the mount, so writing there would let an agent
/// run code beyond the sandbox the next time the user runs git. (`.git/` is never listed or
/// searched either, CONTRACT §3.)
pub(super) fn refuse_inside_git(canonical: &Canonical, path: &VirtualPath) -> Result<()> {
    if canonical.has_component(".git") {
        return Err(Error::Unsupported {
            path: path.clone(),
            reason: "it is inside .git/, which mountfs does not change (git runs hooks and config from there outside the mount); use git itself".into(),
        });
    }
    Ok(())
}

/// Refuses a change in directory `dir` (an open descriptor, whatever path led to it) when that
/// directory is one of the server's own files, or when `entry` (what is at the changed name in
/// it, from `statat` without following links) is one, or a directory above one
/// ([`super::own_files`]). The by-path checks made before (`Inner::writable`) looked at names
/// that an agent's command could swap for a symbolic link before the change opened them
/// (attack review of issue 43, F2); these look at what was opened.
pub(super) fn refuse_own_place(dir: &Dir, entry: Option<&Stat>, path: &VirtualPath) -> Result<()> {
    if !own_files::active() {
        return Ok(());
    }
    let dir_is_own = rustix::fs::fstat(dir).is_ok_and(|stat| own_files::is_own_stat(&stat));
    let entry_is_own = entry.is_some_and(|stat| {
        own_files::is_own_stat(stat)
            || (FileType::from_raw_mode(stat.st_mode) == FileType::Directory
                && own_files::holds_own_stat(stat))
    });
    if dir_is_own || entry_is_own {
        return Err(super::own_refused(path));
    }
    Ok(())
}

/// Writes `content` to `path` under `mode` (see the module doc).
pub(super) fn write(
    root: &Dir,
    temps: &InFlight,
    path: &VirtualPath,
    content: &[u8],
    mode: WriteMode,
) -> Result<WriteOutcome> {
    write_linked(root, temps, path, content, mode, 1)
}

/// [`write`] over a file that may have up to `links` hard links: a change journal (see
/// `journal`) holds one of them, in its private directory, for the file's old content.
pub(super) fn write_linked(
    root: &Dir,
    temps: &InFlight,
    path: &VirtualPath,
    content: &[u8],
    mode: WriteMode,
    links: u64,
) -> Result<WriteOutcome> {
    let io = |e: io::Error| map_io(e, path);
    let canonical = canonicalize(root, path, true)?;
    refuse_inside_git(&canonical, path)?;
    let Some((parent, name)) = canonical.split_last() else {
        return Err(Error::IsADirectory { path: path.clone() });
    };
    refuse_temp_name(&name, path)?;
    create_parent_dirs(root, &parent, path)?;
    let lock = DirLock::take(root, &parent).map_err(io)?;
    let dir = &lock.dir;
    let (existing, kept) = check_existing(dir, &name, path, &mode, links)?;
    let in_flight = temps.begin(root, &parent);
    let temp = temp_name();
    let result = write_temp_and_rename(dir, &temp, &name, content, kept);
    if result.is_err() {
        let _ = rustix::fs::unlinkat(dir, &temp, AtFlags::empty());
    }
    drop(in_flight);
    let stat = result.map_err(|e| match e.raw_os_error() {
        // RENAME_NOREPLACE lost a race with another creator.
        Some(code) if code == rustix::io::Errno::EXIST.raw_os_error() => {
            Error::AlreadyExists { path: path.clone() }
        }
        _ => io(e),
    })?;
    let version = version::version_of(content, &stat);
    drop(lock);
    Ok(WriteOutcome {
        version,
        created: existing.is_none(),
    })
}

/// Checks what is at `name` in `dir` against `mode` (the caller holds the directory lock, or
/// checks early and again under it): `AlreadyExists` for a create-only write over a file,
/// `VersionMismatch` for a conditional one over another version or nothing, and anything but
/// a plain file with at most `links` hard links refused. Returns its `lstat` and what a
/// replacement keeps of it.
pub(super) fn check_existing(
    dir: &Dir,
    name: &OsStr,
    path: &VirtualPath,
    mode: &WriteMode,
    links: u64,
) -> Result<(Option<Stat>, Option<Kept>)> {
    let existing = match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => Some(stat),
        Err(rustix::io::Errno::NOENT) => None,
        Err(errno) => return Err(map_io(errno.into(), path)),
    };
    refuse_own_place(dir, existing.as_ref(), path)?;
    let kept = match &existing {
        Some(stat) => {
            check_replaceable_links(stat, path, links)?;
            match mode {
                WriteMode::CreateOnly => return Err(Error::AlreadyExists { path: path.clone() }),
                WriteMode::IfVersion(expected) => {
                    if *expected != current_version(dir, name, path)? {
                        return Err(Error::VersionMismatch { path: path.clone() });
                    }
                }
                WriteMode::Overwrite => {}
            }
            Some(Kept {
                mode: stat.st_mode & 0o7777,
                uid: stat.st_uid,
                gid: stat.st_gid,
            })
        }
        None if matches!(mode, WriteMode::IfVersion(_)) => {
            return Err(Error::VersionMismatch { path: path.clone() });
        }
        None => None,
    };
    Ok((existing, kept))
}

/// What a replacement keeps of the file it replaces.
#[derive(Debug, Clone, Copy)]
pub(super) struct Kept {
    /// Permission bits (with setuid/setgid/sticky).
    pub(super) mode: u32,
    /// Owner.
    pub(super) uid: u32,
    /// Group.
    pub(super) gid: u32,
}

/// Refuses to replace anything but a plain, singly linked regular file.
pub(super) fn check_replaceable(stat: &Stat, path: &VirtualPath) -> Result<()> {
    check_replaceable_links(stat, path, 1)
}

/// [`check_replaceable`] allowing up to `links` hard links (a change journal holds one).
pub(super) fn check_replaceable_links(stat: &Stat, path: &VirtualPath, links: u64) -> Result<()> {
    let unsupported = |reason: &str| Error::Unsupported {
        path: path.clone(),
        reason: reason.to_owned(),
    };
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::RegularFile => {}
        FileType::Directory => return Err(Error::IsADirectory { path: path.clone() }),
        FileType::Symlink => {
            return Err(unsupported(
                "it was replaced by a symbolic link while being written; read it again and retry",
            ));
        }
        _ => {
            return Err(unsupported(
                "it is a FIFO, socket or device, not a regular file; mountfs only writes regular files",
            ));
        }
    }
    if stat.st_mode & 0o222 == 0 {
        return Err(unsupported(
            "it is read-only (no write permission bit); mountfs does not replace read-only files. Ask the user to make it writable",
        ));
    }
    if stat.st_nlink > links {
        return Err(unsupported(&format!(
            "it has {} hard links; replacing it would split them (and another name may lie outside this mount), so mountfs refuses to write it",
            stat.st_nlink
        )));
    }
    Ok(())
}

/// The version of `name` in `dir` now (the caller holds the directory lock).
pub(super) fn current_version(dir: &Dir, name: &OsStr, path: &VirtualPath) -> Result<Version> {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| map_io(e.into(), path))?;
    let mut file = std::fs::File::from(fd);
    let stat = rustix::fs::fstat(&file).map_err(|e| map_io(e.into(), path))?;
    version::current_version(&mut file, &stat).map_err(|e| map_io(e, path))
}

/// Writes the temporary file, makes it durable and renames it over `name`; returns the new
/// file's `fstat` (taken after the rename, which changes its ctime).
pub(super) fn write_temp_and_rename(
    dir: &Dir,
    temp: &OsStr,
    name: &OsStr,
    content: &[u8],
    kept: Option<Kept>,
) -> io::Result<Stat> {
    let fd = rustix::fs::openat(
        dir,
        temp,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(kept.map_or(NEW_FILE_MODE, |k| k.mode)),
    )?;
    let mut file = std::fs::File::from(fd);
    file.write_all(content)?;
    place_temp(dir, temp, name, &file, kept)
}

/// Gives the written temporary file `temp` what it keeps of the file it replaces, makes it
/// durable and renames it over `name` (`RENAME_NOREPLACE` when nothing is replaced); returns
/// the new file's `fstat` (taken after the rename, which changes its ctime).
pub(super) fn place_temp(
    dir: &Dir,
    temp: &OsStr,
    name: &OsStr,
    file: &std::fs::File,
    kept: Option<Kept>,
) -> io::Result<Stat> {
    if let Some(kept) = kept {
        let own = rustix::fs::fstat(file)?;
        if (own.st_uid, own.st_gid) != (kept.uid, kept.gid) {
            // Keep the owner where we may (root, or a group we belong to); otherwise the new
            // file is ours, as with any editor that saves by rename.
            let _ = rustix::fs::fchown(
                file,
                Some(rustix::fs::Uid::from_raw(kept.uid)),
                Some(rustix::fs::Gid::from_raw(kept.gid)),
            );
        }
        // The umask trimmed the mode given to open, and chown clears setuid: set it last.
        rustix::fs::fchmod(file, Mode::from_raw_mode(kept.mode))?;
    }
    file.sync_all()?;
    let flags = if kept.is_none() {
        RenameFlags::NOREPLACE
    } else {
        RenameFlags::empty()
    };
    match rustix::fs::renameat_with(dir, temp, dir, name, flags) {
        Ok(()) => {}
        // File systems without RENAME_NOREPLACE: the directory lock still orders our writers.
        Err(rustix::io::Errno::INVAL) if !flags.is_empty() => {
            rustix::fs::renameat(dir, temp, dir, name)?;
        }
        Err(errno) => return Err(errno.into()),
    }
    rustix::fs::fsync(dir.as_fd())?;
    Ok(rustix::fs::fstat(file)?)
}

/// Creates `parent` (the canonical parent of `path`) and its ancestors beneath the root; a file
/// in the way is [`Error::NotADirectory`] naming that file.
pub(super) fn create_parent_dirs(
    root: &Dir,
    parent: &std::path::Path,
    path: &VirtualPath,
) -> Result<()> {
    let Err(error) = root.create_dir_all(parent) else {
        return Ok(());
    };
    Err(
        match error
            .raw_os_error()
            .map(rustix::io::Errno::from_raw_os_error)
        {
            Some(rustix::io::Errno::EXIST | rustix::io::Errno::NOTDIR) => Error::NotADirectory {
                path: first_file_ancestor(root, path).unwrap_or_else(|| path.clone()),
            },
            _ => map_io(error, path),
        },
    )
}

/// The first ancestor of `path` that exists as a file (the cause of a `NotADirectory`).
fn first_file_ancestor(root: &Dir, path: &VirtualPath) -> Option<VirtualPath> {
    let mut ancestors = Vec::new();
    let mut current = path.parent();
    while let Some(dir) = current {
        current = dir.parent();
        ancestors.push(dir);
    }
    ancestors.into_iter().rev().find(|dir| {
        !dir.is_root()
            && root
                .metadata(resolve::relative(dir))
                .is_ok_and(|m| m.is_file())
    })
}

/// Deletes a file (or symlink), or a directory (recursively when asked).
pub(super) fn delete(root: &Dir, path: &VirtualPath, options: &DeleteOptions) -> Result<()> {
    let io = |e: io::Error| map_io(e, path);
    let canonical = canonicalize(root, path, false)?;
    refuse_inside_git(&canonical, path)?;
    let Some((parent, name)) = canonical.split_last() else {
        return Err(Error::MountRoot { path: path.clone() });
    };
    let lock = DirLock::take(root, &parent).map_err(io)?;
    let dir = &lock.dir;
    let stat =
        rustix::fs::statat(dir, &name, AtFlags::SYMLINK_NOFOLLOW).map_err(|e| io(e.into()))?;
    refuse_own_place(dir, Some(&stat), path)?;
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::Directory => {
            if options.recursive {
                dir.remove_dir_all(&name).map_err(io)
            } else {
                dir.remove_dir(&name).map_err(io)
            }
        }
        file_type => {
            if let Some(expected) = &options.if_version
                && (file_type != FileType::RegularFile
                    || current_version(dir, &name, path)? != *expected)
            {
                return Err(Error::VersionMismatch { path: path.clone() });
            }
            dir.remove_file(&name).map_err(io)
        }
    }
}

#[cfg(test)]
mod own_place_tests {
    use std::sync::Arc;

    use cap_std::ambient_authority;

    use super::super::trust::{RecoveryKey, Seal};
    use super::*;
    use crate::storage::backend::RenameOptions;

    /// The changes themselves refuse the server's own files by what they opened, not by a path
    /// looked at before (attack review of issue 43, F2): these calls skip the by-path checks
    /// the backend makes first, as a symbolic link swapped in between would, and are still
    /// refused. (Installs own files for this test process: a directory no other test uses.)
    #[test]
    fn writes_deletes_and_moves_at_own_files_are_refused_by_what_they_opened() {
        let root_dir = tempfile::tempdir().unwrap();
        let data = root_dir.path().join("data");
        std::fs::create_dir(&data).unwrap();
        std::fs::write(data.join("recovery.key"), "key").unwrap();
        std::fs::write(root_dir.path().join("tokens"), "alice t\n").unwrap();
        std::fs::write(root_dir.path().join("mine.txt"), "mine\n").unwrap();
        own_files::install(vec![data.clone(), root_dir.path().join("tokens")]);
        let root = Dir::open_ambient_dir(root_dir.path(), ambient_authority()).unwrap();
        let seal = Seal::new(
            Arc::new(RecoveryKey::ephemeral()),
            &std::fs::canonicalize(root_dir.path()).unwrap(),
        );
        let temps = InFlight::new(seal);
        let p = |s: &str| VirtualPath::parse(s).unwrap();
        let refused = |result: Result<()>, what: &str| {
            let error = result.expect_err(what).to_string();
            assert!(
                error.contains("kept for the server's own files"),
                "{what}: {error}"
            );
        };
        refused(
            write(
                &root,
                &temps,
                &p("/data/recovery.key"),
                b"forged",
                WriteMode::Overwrite,
            )
            .map(drop),
            "overwrite inside the data directory",
        );
        refused(
            write(&root, &temps, &p("/data/new"), b"x", WriteMode::CreateOnly).map(drop),
            "create inside the data directory",
        );
        refused(
            write(
                &root,
                &temps,
                &p("/tokens"),
                b"eve t\n",
                WriteMode::Overwrite,
            )
            .map(drop),
            "overwrite the token file",
        );
        let options = DeleteOptions {
            recursive: true,
            if_version: None,
        };
        refused(
            delete(&root, &p("/tokens"), &options),
            "delete the token file",
        );
        refused(
            delete(&root, &p("/data"), &options),
            "delete the data directory",
        );
        let rename = |from: &str, to: &str, replacing: Option<Version>| {
            super::super::rename::rename(
                &root,
                &p(from),
                &p(to),
                &RenameOptions {
                    if_version: None,
                    replacing,
                },
            )
            .map(drop)
        };
        refused(
            rename("/data", "/elsewhere", None),
            "move the data directory",
        );
        refused(rename("/tokens", "/t2", None), "move the token file away");
        let mine = Version::of_content(b"alice t\n");
        refused(
            rename("/mine.txt", "/tokens", Some(mine)),
            "move over the token file",
        );
        refused(
            rename("/mine.txt", "/data/x", None),
            "move into the data directory",
        );
        assert_eq!(std::fs::read(data.join("recovery.key")).unwrap(), b"key");
        assert_eq!(
            std::fs::read(root_dir.path().join("tokens")).unwrap(),
            b"alice t\n"
        );
        // Elsewhere in the same root, changes go on.
        write(
            &root,
            &temps,
            &p("/other.txt"),
            b"ok",
            WriteMode::CreateOnly,
        )
        .unwrap();
        delete(&root, &p("/other.txt"), &options).unwrap();
    }
}
