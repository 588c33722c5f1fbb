//! Writing a disk file piece by piece ([`Backend::begin_upload`](crate::storage::backend::Backend)), for
//! contents too large to hold in memory (`mountfs cp`): the write of `write`, spread over calls.
//!
//! Beginning checks what `write` checks (the path canonicalised beneath the root, not inside
//! `.git/`, not one of our temporary names, parents made, the mode against what is there) and
//! creates a temporary file of our form in the file's own directory, recorded as in flight
//! (see `temp`): each chunk is appended to it. Finishing takes the directory's lock, checks the
//! mode again against what is there now, gives the temporary file the replaced file's mode and
//! owner, makes it durable and renames it into place (`RENAME_NOREPLACE` when nothing may be
//! there), as `write` does. Aborting, a failure of any step, or dropping the upload unlinks the
//! temporary file; a process killed meanwhile leaves it to the sweep at the next start.
//!
//! The version of the new file is what `write` gives: the content hash for a file of at most
//! [`HASHED_SIZE_LIMIT`] bytes (hashed from the chunks as they pass, only that far), else the
//! identity stamps of the renamed file.

use std::ffi::OsString;
use std::io::{self, Write};
use std::path::PathBuf;

use async_trait::async_trait;
use cap_std::fs::{Dir, OpenOptionsExt};
use rustix::fs::{AtFlags, Mode, OFlags};

use super::resolve::{canonicalize, map_io};
use super::temp::{InFlightGuard, refuse_temp_name, temp_name};
use super::version::{self, HASHED_SIZE_LIMIT};
use super::write::{self, DirLock};
use super::{DiskBackend, Inner};
use crate::ground::path::VirtualPath;
use crate::storage::backend::{ContentHasher, Error, Result, Upload, WriteMode, WriteOutcome};

/// Permission bits of a new file, before the umask (as `write` gives them).
const NEW_FILE_MODE: u32 = 0o644;

/// A disk file being written piece by piece (see the module doc).
#[derive(Debug)]
pub(super) struct DiskUpload<'a> {
    backend: &'a DiskBackend,
    path: VirtualPath,
    mode: WriteMode,
    /// The file's directory, root-relative and canonical, and its name there.
    parent: PathBuf,
    name: OsString,
    temp: OsString,
    /// The temporary file; `None` while a step runs on the blocking pool, or once it ended.
    file: Option<std::fs::File>,
    /// The content hash of what was appended, while it is no more than [`HASHED_SIZE_LIMIT`].
    hasher: Option<ContentHasher>,
    /// Keeps the temporary file's directory in the record of those in flight.
    _in_flight: InFlightGuard<'a>,
}

impl<'a> DiskUpload<'a> {
    /// Begins an upload of `path` under `mode` (see the module doc).
    pub(super) fn begin(
        backend: &'a DiskBackend,
        path: &VirtualPath,
        mode: WriteMode,
    ) -> Result<Self> {
        let inner: &'a Inner = &backend.inner;
        let root = &inner.root;
        let io = |e: io::Error| map_io(e, path);
        let canonical = canonicalize(root, path, true)?;
        write::refuse_inside_git(&canonical, path)?;
        let Some((parent, name)) = canonical.split_last() else {
            return Err(Error::IsADirectory { path: path.clone() });
        };
        refuse_temp_name(&name, path)?;
        write::create_parent_dirs(root, &parent, path)?;
        let dir = open_dir(root, &parent).map_err(io)?;
        // Checked now so that nothing is sent for a write that cannot land; again at the end.
        write::check_existing(&dir, &name, path, &mode, 1)?;
        let in_flight = inner.temps.begin(root, &parent);
        let temp = temp_name();
        let fd = rustix::fs::openat(
            &dir,
            &temp,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(NEW_FILE_MODE),
        )
        .map_err(|e| io(e.into()))?;
        Ok(Self {
            backend,
            path: path.clone(),
            mode,
            parent,
            name,
            temp,
            file: Some(std::fs::File::from(fd)),
            hasher: Some(ContentHasher::default()),
            _in_flight: in_flight,
        })
    }

    fn take_file(&mut self) -> Result<std::fs::File> {
        self.file.take().ok_or_else(|| Error::Io {
            path: self.path.clone(),
            message: "the upload already failed or ended".to_owned(),
        })
    }

    /// Unlinks the temporary file (nothing else of ours is there).
    fn remove_temp(&self) {
        if let Ok(dir) = open_dir(&self.backend.inner.root, &self.parent) {
            let _ = rustix::fs::unlinkat(&dir, &self.temp, AtFlags::empty());
        }
    }
}

/// Opens `parent` (root-relative) as a readable directory descriptor, which can be locked and
/// synced (cap-std's own directory handles are `O_PATH`).
fn open_dir(root: &Dir, parent: &std::path::Path) -> io::Result<Dir> {
    let mut options = cap_std::fs::OpenOptions::new();
    options
        .read(true)
        .custom_flags((OFlags::DIRECTORY | OFlags::CLOEXEC).bits() as i32);
    Ok(Dir::from_std_file(
        root.open_with(parent, &options)?.into_std(),
    ))
}

#[async_trait]
impl Upload for DiskUpload<'_> {
    async fn append(&mut self, chunk: &[u8]) -> Result<()> {
        if let Some(hasher) = &mut self.hasher {
            if hasher.bytes() + chunk.len() as u64 > HASHED_SIZE_LIMIT {
                // Versioned by identity once renamed: no need to hash further.
                self.hasher = None;
            } else {
                hasher.push(chunk);
            }
        }
        let mut file = self.take_file()?;
        let (bytes, path) = (chunk.to_vec(), self.path.clone());
        let file = self
            .backend
            .blocking(move |_| {
                file.write_all(&bytes).map_err(|e| map_io(e, &path))?;
                Ok(file)
            })
            .await?;
        self.file = Some(file);
        Ok(())
    }

    async fn finish(mut self: Box<Self>) -> Result<WriteOutcome> {
        let file = self.take_file()?;
        let (path, parent, name, temp, mode) = (
            self.path.clone(),
            self.parent.clone(),
            self.name.clone(),
            self.temp.clone(),
            self.mode.clone(),
        );
        let hashed = self.hasher.take().map(ContentHasher::version);
        let placed = self
            .backend
            .blocking(move |inner| {
                let io = |e: io::Error| map_io(e, &path);
                let lock = DirLock::take(&inner.root, &parent).map_err(io)?;
                let (existing, kept) = write::check_existing(&lock.dir, &name, &path, &mode, 1)?;
                let stat =
                    write::place_temp(&lock.dir, &temp, &name, &file, kept).map_err(|e| match e
                        .raw_os_error()
                    {
                        // RENAME_NOREPLACE lost a race with another creator.
                        Some(code) if code == rustix::io::Errno::EXIST.raw_os_error() => {
                            Error::AlreadyExists { path: path.clone() }
                        }
                        _ => io(e),
                    })?;
                Ok((existing.is_none(), stat))
            })
            .await;
        match placed {
            Ok((created, stat)) => {
                let version = match hashed {
                    Some(version) if version::size_of(&stat) <= HASHED_SIZE_LIMIT => version,
                    _ => version::identity_version(&stat),
                };
                // Renamed into place: nothing of ours is left to remove.
                self.temp = OsString::new();
                Ok(WriteOutcome { version, created })
            }
            Err(error) => Err(error),
        }
    }

    async fn abort(self: Box<Self>) {
        // Dropping unlinks the temporary file.
    }
}

impl Drop for DiskUpload<'_> {
    fn drop(&mut self) {
        if !self.temp.is_empty() {
            self.remove_temp();
        }
    }
}
