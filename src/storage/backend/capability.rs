//! The capability traits every [`Backend`](super::Backend) also is: keeping content aside and
//! journals ([`KeepAside`]), in-place [`Rename`], modes and links ([`Posix`]), a place to run
//! commands ([`HostDir`]) and streamed writes ([`Uploads`]). Each default method is the answer
//! of a store without that capability, written once here.

use async_trait::async_trait;

use super::{
    AsideFile, ChangeJournal, Error, JournalRole, PlannedFile, RenameOptions, Renamed, Result,
    ShellBackend, Upload, Version, WriteMode, WriteOutcome,
};
use crate::ground::path::VirtualPath;

/// Keeping content out of memory for undo, and journals of multi-file changes (disk; a store
/// makes a change one transaction). Without it (the defaults) nothing is kept aside and there
/// is no journal: undo keeps the content itself, and a change is made file by file.
#[async_trait]
pub trait KeepAside: Send + Sync {
    /// Removes the file at `path` if it has `version` (else [`Error::VersionMismatch`]),
    /// keeping its content aside outside memory for undo. `Ok(None)` (the default) when this
    /// backend cannot keep content aside (or not for this file): then nothing was changed.
    async fn set_aside(&self, path: &VirtualPath, version: &Version) -> Result<Option<AsideFile>> {
        let _ = (path, version);
        Ok(None)
    }

    /// Replaces the file at `path`, which must have `version`, with `content`, keeping the
    /// replaced content aside outside memory for undo. `Ok(None)` (the default) when this
    /// backend cannot: then nothing was changed.
    async fn write_keeping_aside(
        &self,
        path: &VirtualPath,
        content: &[u8],
        version: &Version,
    ) -> Result<Option<(WriteOutcome, AsideFile)>> {
        let _ = (path, content, version);
        Ok(None)
    }

    /// Starts a change of several files that a crash of the process cannot cut in half: before
    /// anything changes, a journal on the backend's own storage records the plan and keeps what
    /// each replaced or removed file held, so that the next start rolls an unfinished change
    /// back (disk mounts, see `disk::journal`). `Ok(None)` (the default) when this backend
    /// keeps no journal (in memory: nothing survives a crash anyway): the caller changes the
    /// files one by one. `VersionMismatch` when a planned file is not at its planned version:
    /// nothing changed.
    async fn begin_changes(
        &self,
        files: &[PlannedFile],
        role: &JournalRole,
    ) -> Result<Option<Box<dyn ChangeJournal>>> {
        let _ = (files, role);
        Ok(None)
    }
}

/// Renaming in place, a directory whole.
#[async_trait]
pub trait Rename: Send + Sync {
    /// Renames the file or directory at `from` to `to` within this backend, in place: contents,
    /// times and (on disk) mode, owner and inode are kept, a directory moves whole, and memory
    /// does not grow with the size moved. Parent directories of `to` are created. Conditions
    /// as [`RenameOptions`] says; `NotFound` if `from` is absent, `IsADirectory` if a directory
    /// is at `to`, `NotADirectory` if a parent of `to` is a file.
    ///
    /// `Ok(None)` (the default) when this backend cannot rename in place (the caller then
    /// copies and deletes): nothing was changed.
    async fn rename(
        &self,
        from: &VirtualPath,
        to: &VirtualPath,
        options: &RenameOptions,
    ) -> Result<Option<Renamed>> {
        let _ = (from, to, options);
        Ok(None)
    }
}

/// What a POSIX file system has and a store of keys has not: permission bits, and several
/// names for one file. Without it (the defaults): no modes, no links, no case folding.
#[async_trait]
pub trait Posix: Send + Sync {
    /// A file's permission bits (`0o7777`), on backends that keep them (disk); `None` (the
    /// default) elsewhere.
    async fn permissions(&self, path: &VirtualPath) -> Result<Option<u32>> {
        let _ = path;
        Ok(None)
    }

    /// Sets a file's permission bits where this backend keeps them (a cross-mount move keeps
    /// the source's mode); returns the file's version afterwards when setting them changed it.
    /// Backends without modes do nothing (the default).
    async fn set_permissions(&self, path: &VirtualPath, mode: u32) -> Result<Option<Version>> {
        let _ = (path, mode);
        Ok(None)
    }

    /// Whether `a` and `b` name one and the same file or directory (a symlink, a hard link, a
    /// case-insensitive file system). Backends without aliases answer `false` (the default).
    async fn same_file(&self, a: &VirtualPath, b: &VirtualPath) -> Result<bool> {
        let _ = (a, b);
        Ok(false)
    }

    /// Whether `path` itself is a symbolic link (not what it leads to); `false` (the default)
    /// where there are none.
    async fn is_symlink(&self, path: &VirtualPath) -> Result<bool> {
        let _ = path;
        Ok(false)
    }
}

/// Where `execute` runs commands: a directory on this machine, or a shell target. Without it
/// (the defaults): neither.
pub trait HostDir {
    /// The real directory behind this backend's root, where `execute` runs commands and what its
    /// sandbox lets them write: disk backends only. Never shown to agents (answers speak
    /// virtual paths). `None` (the default): no directory on this machine is behind the files.
    fn host_dir(&self) -> Option<&std::path::Path> {
        None
    }

    /// The shell mount behind this backend, where `execute` runs commands on the target
    /// instead (issue 27); `None` (the default) for every other kind.
    fn shell(&self) -> Option<&ShellBackend> {
        None
    }
}

/// Writing a file piece by piece, and checking a copy read in ranges.
#[async_trait]
pub trait Uploads: Send + Sync {
    /// The SHA-256 (64 lowercase hex digits) of the whole file, computed where the file lives,
    /// only while it has `version` (else [`Error::VersionMismatch`]). A copy that read a file
    /// in ranges compares it with the digest of the bytes it got: a backend whose versions of
    /// big files are stamps (a shell target's `stat` times, which a change made in place within
    /// one timestamp tick keeps) answers it, so such a change is still never copied torn.
    /// `Ok(None)` (the default): this backend's versions see every change.
    async fn content_sha256(
        &self,
        path: &VirtualPath,
        version: &Version,
    ) -> Result<Option<String>> {
        let _ = (path, version);
        Ok(None)
    }

    /// Refuses, before anything is staged, an upload of `size` bytes to `path` that this
    /// backend could never hold (a store's limit of one value), naming the limit. `Ok(())`
    /// (the default): no such limit.
    async fn check_upload_size(&self, path: &VirtualPath, size: u64) -> Result<()> {
        let _ = (path, size);
        Ok(())
    }

    /// Begins writing the file at `path` piece by piece (see [`Upload`]): what
    /// [`Backend::write`](super::Backend::write) does for a content too large to hold in
    /// memory. The mode is checked when the upload begins (so a copy that cannot land fails
    /// before sending anything) and again, as the write does, when it finishes. Backends that
    /// hold files in memory refuse with [`Error::Unsupported`] (they take whole writes only;
    /// the default, which each such backend words for itself); read-only mounts with
    /// [`Error::ReadOnly`].
    async fn begin_upload(
        &self,
        path: &VirtualPath,
        mode: WriteMode,
    ) -> Result<Box<dyn Upload + '_>> {
        let _ = mode;
        Err(Error::Unsupported {
            path: path.clone(),
            reason: "this mount takes whole writes only, not a file streamed piece by piece"
                .to_owned(),
        })
    }
}
