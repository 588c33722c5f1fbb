//! `DiskBackend`: a real directory (`disk:DIR`) with no way out, streaming reads, atomic
//! writes and ripgrep-speed search (CONTRACT §3 "disk", issue 3).
//!
//! # Containment
//! The root is opened once as a `cap_std::fs::Dir`; every request is resolved beneath that
//! handle (see [`resolve`]): `..`, absolute symlinks, symlinks climbing out, chains of them and
//! symlinks swapped in between two calls are refused with [`Error::OutsideMount`] by the kernel
//! (`openat2` + `RESOLVE_BENEATH`) at the moment of use. No string-prefix check exists to get
//! wrong. Symlinks that stay inside the root work for reading, listing and writing (a write
//! replaces the link's target, not the link); `glob` and `grep` do not follow symlinks while
//! walking, as `rg` without `-L`. Listings hide what cannot be used through the mount: symlinks
//! leading out or nowhere, FIFOs, sockets, devices, names that are not valid virtual paths
//! (not UTF-8, or holding a backslash), `.git/` and our own temporary files. Reading a FIFO or
//! device is refused instead of blocking; writing over one, or over a file with several hard
//! links (another name of which may lie outside the root), is refused.
//!
//! # Writes
//! Atomic and durable, keeping permission bits; serialised per directory with `flock` so a
//! conditional write cannot lose to another mountfs writer (see [`write`]). A crash leaves the
//! old or the new file; its temporary file is removed at the next start (see [`temp`]).
//!
//! # Versions
//! The content hash for files up to 8 MiB (the same versions as every other backend); above
//! that, a hash of `(dev, inode, size, mtime_ns, ctime_ns)` so that reading a window of a
//! gigabyte file stays cheap (see [`version`]). Windows of big files stream (see [`window`]),
//! starting near the wanted line through a per-mount index of line starts (see [`line_index`]). Any change by another program moves these
//! stamps, except two in-place rewrites of a file over 8 MiB, keeping its size, within one
//! file-system timestamp tick.
//!
//! # Renames
//! A move within the mount is one `renameat2` beneath the root (see [`rename`]): inode, mode,
//! times and hard links are kept, and a directory moves whole, whatever its size.
//!
//! # Undo of huge files
//! A file too large for the undo history in memory is kept aside instead, by rename (delete) or
//! hard link (overwrite) into a private directory at the root (see [`aside`]).
//!
//! # Search
//! `ignore`'s parallel walk with `.gitignore`/`.ignore`/`.git/info/exclude` (off with the
//! `,no-ignore` mount option), `grep-searcher` streaming each file (see [`walk`]).
//!
//! Creation times are not reported (`created: None`): every write replaces the inode, so the
//! file system's birth time would be the last write's time, which would mislead.
//!
//! Unlike the memory backend, empty directories exist here (created by hand, or left by a
//! delete of their last file); everything else behaves as the conformance suite requires.
//! All blocking file-system work runs on tokio's blocking pool.

mod aside;
mod final_cr;
pub mod journal;
mod line_index;
pub mod own_files;
mod rename;
mod resolve;
mod temp;
pub mod trust;
mod upload;
mod version;
mod walk;
pub mod watch;
mod window;
mod write;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt};
use rustix::fs::FileType;

use super::{
    AsideContent, AsideFile, Backend, BoundedRead, ChangeJournal, DeleteOptions, Entry, EntryKind,
    Error, FileBytes, FileView, GlobQuery, GrepFile, GrepQuery, HostDir, JournalRole, KeepAside,
    LineWindow, PlannedFile, Posix, Rename, RenameOptions, Renamed, Result, Upload, Uploads,
    Version, WriteMode, WriteOutcome,
};
use crate::ground::path::VirtualPath;
use resolve::{map_io, relative};
pub use temp::TEMP_PREFIX;
pub use version::HASHED_SIZE_LIMIT;
pub(super) use walk::{Searchers, search_reader};

/// Mount options of a disk backend.
#[derive(Debug, Clone, Default)]
pub struct DiskOptions {
    /// Do not honour `.gitignore`, `.ignore` and `.git/info/exclude` in glob and grep.
    pub no_ignore: bool,
    /// The key the records start-up recovery acts on are tagged with (see [`trust`]); `None`:
    /// the process's ([`trust::process_key`]: the server's data directory's once installed).
    pub recovery: Option<Arc<trust::RecoveryKey>>,
}

/// A directory that cannot be mounted.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The directory cannot be opened (missing, not a directory, no permission).
    #[error("cannot open directory {dir}: {reason}")]
    Open {
        /// The directory as configured (operator input, so showing it is fine).
        dir: String,
        /// Why.
        reason: String,
    },
}

/// The disk backend (see the module doc).
#[derive(Debug, Clone)]
pub struct DiskBackend {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    root: Dir,
    /// Where walks start: `/proc/self/fd/N` of `root`, or its canonical host path where
    /// `/proc` is missing.
    pinned_root: PathBuf,
    options: DiskOptions,
    /// The root's canonical host path, for `execute` (its working directory and sandbox).
    host_root: PathBuf,
    /// The root's device and inode: a mount over one of the server's own directories hides
    /// everything (see [`own_files`]).
    root_id: (u64, u64),
    /// Where lines start in big files, learnt while reading windows.
    line_index: std::sync::Arc<line_index::LineIndex>,
    /// Walks (glob, grep) running at once: one per core. Each walk already uses every core;
    /// more at once only add walker threads, buffers and malloc arenas (16 concurrent greps
    /// peaked at 59 threads and 27 MB RSS, against issue 6's 20 MiB) for no more throughput.
    /// Queued calls wait here, still cancellable.
    searches: tokio::sync::Semaphore,
    /// Where contents too large for the undo history in memory are kept (see [`aside`]).
    aside: aside::AsideDir,
    /// The directories holding this process's temporary files in flight (see [`temp`]).
    temps: temp::InFlight,
    /// The unfinished changes resolved when the mount was opened, until told.
    resolved: std::sync::Mutex<Vec<journal::Resolved>>,
    /// What this mount's recovery records are tagged with (see [`trust`]).
    seal: trust::Seal,
}

impl DiskBackend {
    /// Opens `dir` as a mount root. Before anything can touch the mount, every change a crash
    /// left unfinished is resolved (see [`journal`]; [`DiskBackend::take_resolved`] tells what
    /// was), then the temporary files of writers that are gone are removed: those the records
    /// of temporary files in flight name, and those at the root (see [`temp`]; no walk of the
    /// tree: the cost does not grow with it).
    pub fn open(dir: &Path, options: DiskOptions) -> std::result::Result<Self, OpenError> {
        let backend = Self::open_without_sweep(dir, options)?;
        let resolved = journal::recover(&backend.inner.root, &backend.inner.seal);
        for one in &resolved {
            tracing::warn!(
                dir = %dir.display(),
                files = one.files,
                rolled_back = one.rolled_back,
                "a change of several files was cut short by a crash; it was {}",
                if one.rolled_back { "rolled back" } else { "completed" }
            );
        }
        *backend
            .inner
            .resolved
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = resolved;
        let removed = backend.sweep_stale_temp_files();
        if removed > 0 {
            tracing::info!(dir = %dir.display(), removed, "removed temporary files left by a killed writer");
        }
        Ok(backend)
    }

    /// Opens `dir` without resolving journals or sweeping (tests that watch either call it
    /// themselves).
    pub fn open_without_sweep(
        dir: &Path,
        options: DiskOptions,
    ) -> std::result::Result<Self, OpenError> {
        let fail = |reason: String| OpenError::Open {
            dir: dir.display().to_string(),
            reason,
        };
        let root = Dir::open_ambient_dir(dir, cap_std::ambient_authority())
            .map_err(|e| fail(e.to_string()))?;
        let pinned_root = match walk::pinned_path(&root) {
            Some(path) => path,
            None => std::fs::canonicalize(dir).map_err(|e| fail(e.to_string()))?,
        };
        let host_root = std::fs::canonicalize(dir).map_err(|e| fail(e.to_string()))?;
        let root_id = {
            use cap_std::fs::MetadataExt;
            let meta = root.dir_metadata().map_err(|e| fail(e.to_string()))?;
            (meta.dev(), meta.ino())
        };
        let key = options.recovery.clone().unwrap_or_else(trust::process_key);
        let seal = trust::Seal::new(key, &host_root);
        Ok(Self {
            inner: Arc::new(Inner {
                root,
                pinned_root,
                host_root,
                root_id,
                options,
                line_index: std::sync::Arc::default(),
                searches: tokio::sync::Semaphore::new(walk::walker_threads()),
                aside: aside::AsideDir::new(),
                temps: temp::InFlight::new(seal.clone()),
                resolved: std::sync::Mutex::default(),
                seal,
            }),
        })
    }

    /// The directory this backend holds open, as the kernel names it now (through
    /// `/proc/self/fd`), so a check of where it is cannot be fooled by the path being swapped
    /// for a symbolic link after it was resolved; the resolved path where there is no `/proc`.
    pub fn opened_dir(&self) -> PathBuf {
        std::fs::read_link(&self.inner.pinned_root)
            .unwrap_or_else(|_| self.inner.pinned_root.clone())
    }

    /// The unfinished changes (journals) that opening the mount resolved, once: the caller
    /// tells the agent in its next answer.
    pub fn take_resolved(&self) -> Vec<journal::Resolved> {
        std::mem::take(
            &mut *self
                .inner
                .resolved
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// Removes temporary files left by writers that are gone (see [`temp`]); returns how many.
    pub fn sweep_stale_temp_files(&self) -> usize {
        temp::sweep_stale(&self.inner.root, &self.inner.seal)
    }

    /// Runs blocking file-system work on tokio's blocking pool.
    async fn blocking<T, F>(&self, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Inner) -> Result<T> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || work(&inner))
            .await
            .unwrap_or_else(|error| {
                Err(Error::Io {
                    path: VirtualPath::root(),
                    message: format!("a disk task failed: {error}"),
                })
            })
    }
}

impl DiskBackend {
    /// The handle undo keeps for a content set aside from `path`.
    fn kept(&self, path: VirtualPath, entry: aside::Entry) -> AsideFile {
        AsideFile(Arc::new(DiskAside {
            backend: self.clone(),
            path,
            entry: entry.name,
            size: entry.size,
            used: std::sync::atomic::AtomicBool::new(false),
        }))
    }
}

/// A content kept in the mount's aside directory, removed when the last handle goes unless it
/// was restored.
#[derive(Debug)]
struct DiskAside {
    backend: DiskBackend,
    path: VirtualPath,
    entry: std::ffi::OsString,
    size: u64,
    used: std::sync::atomic::AtomicBool,
}

#[async_trait]
impl AsideContent for DiskAside {
    fn size(&self) -> u64 {
        self.size
    }

    async fn restore(&self, replacing: Option<&Version>) -> Result<WriteOutcome> {
        use std::sync::atomic::Ordering;
        if self.used.load(Ordering::Acquire) {
            return Err(Error::NotFound {
                path: self.path.clone(),
            });
        }
        let (entry, path, replacing) = (self.entry.clone(), self.path.clone(), replacing.cloned());
        let outcome = self
            .backend
            .blocking(move |inner| {
                aside::restore(&inner.root, &inner.aside, &entry, &path, replacing.as_ref())
            })
            .await?;
        self.used.store(true, Ordering::Release);
        Ok(outcome)
    }
}

impl Drop for DiskAside {
    fn drop(&mut self) {
        if !self.used.load(std::sync::atomic::Ordering::Acquire) {
            // One unlink: freeing the blocks of even a huge file is the file system's job.
            aside::discard(
                &self.backend.inner.root,
                &self.backend.inner.aside,
                &self.entry,
            );
        }
    }
}

impl Inner {
    fn walk_context(&self) -> walk::WalkContext<'_> {
        walk::WalkContext {
            root: &self.root,
            pinned_root: &self.pinned_root,
            use_ignore_files: !self.options.no_ignore,
        }
    }

    /// Opens a regular file for reading beneath the root. Non-blocking, so a FIFO cannot hang
    /// the open; anything but a regular file is refused after it.
    /// Whether the root, or a directory on the way to `path` (the last component included when
    /// `last`), is one of the server's own files ([`own_files`]): by device and inode, each
    /// looked at through the root (symbolic links inside it followed, as an open would).
    fn own_on_the_way(&self, path: &VirtualPath, last: bool) -> bool {
        use cap_std::fs::MetadataExt;
        if !own_files::active() {
            return false;
        }
        if own_files::is_own(self.root_id.0, self.root_id.1) {
            return true;
        }
        let count = path.components().count();
        let take = if last { count } else { count.saturating_sub(1) };
        let mut at = PathBuf::new();
        for component in path.components().take(take) {
            at.push(component);
            match self.root.metadata(&at) {
                Ok(meta) if own_files::is_own(meta.dev(), meta.ino()) => return true,
                Ok(_) => {}
                Err(_) => return false,
            }
        }
        false
    }

    /// `NotFound` when `path` is, or lies inside, one of the server's own files: it answers as
    /// if it did not exist.
    fn visible(&self, path: &VirtualPath) -> Result<()> {
        if self.own_on_the_way(path, true) {
            return Err(Error::NotFound { path: path.clone() });
        }
        Ok(())
    }

    /// A refusal when `path` is, or lies inside, one of the server's own files: nothing is
    /// written or made there.
    fn writable(&self, path: &VirtualPath) -> Result<()> {
        if self.own_on_the_way(path, true) {
            return Err(own_refused(path));
        }
        Ok(())
    }

    /// [`Inner::writable`], and a refusal when `path` is a directory above one of the server's
    /// own files: removing or moving it would take them along.
    fn removable(&self, path: &VirtualPath) -> Result<()> {
        use cap_std::fs::MetadataExt;
        self.writable(path)?;
        if own_files::active()
            && let Ok(meta) = self.root.symlink_metadata(relative(path))
            && meta.is_dir()
            && own_files::holds_own(meta.dev(), meta.ino())
        {
            return Err(own_refused(path));
        }
        Ok(())
    }

    fn open_regular(&self, path: &VirtualPath) -> Result<(std::fs::File, rustix::fs::Stat)> {
        if path.is_root() {
            return Err(Error::IsADirectory { path: path.clone() });
        }
        if self.own_on_the_way(path, false) {
            return Err(Error::NotFound { path: path.clone() });
        }
        let mut options = OpenOptions::new();
        options
            .read(true)
            .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32);
        let file = self
            .root
            .open_with(relative(path), &options)
            .map_err(|e| map_io(e, path))?
            .into_std();
        let stat = rustix::fs::fstat(&file).map_err(|e| map_io(e.into(), path))?;
        if own_files::active() && own_files::is_own_stat(&stat) {
            return Err(Error::NotFound { path: path.clone() });
        }
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::RegularFile => Ok((file, stat)),
            FileType::Directory => Err(Error::IsADirectory { path: path.clone() }),
            other => Err(Error::Unsupported {
                path: path.clone(),
                reason: format!(
                    "it is a {}, not a regular file; reading it could block or never end, so mountfs refuses",
                    describe_type(other)
                ),
            }),
        }
    }

    fn stat(&self, path: &VirtualPath) -> Result<Option<Entry>> {
        if self.own_on_the_way(path, true) {
            return Ok(None);
        }
        if path.is_root() {
            return Ok(Some(Entry::directory(path.clone())));
        }
        match self.root.metadata(relative(path)) {
            Ok(meta) => Ok(Some(entry_of(path.clone(), &meta))),
            Err(error) => match map_io(error, path) {
                Error::NotFound { .. } | Error::NotADirectory { .. } => Ok(None),
                other => Err(other),
            },
        }
    }

    fn ls(&self, dir: &VirtualPath) -> Result<Vec<Entry>> {
        use cap_std::fs::MetadataExt;
        self.visible(dir)?;
        let hiding = own_files::active();
        let rel = relative(dir);
        let listing = self.root.read_dir(&rel).map_err(|e| map_io(e, dir))?;
        let mut entries = Vec::new();
        for item in listing {
            let item = item.map_err(|e| map_io(e, dir))?;
            let name = item.file_name();
            if name == ".git" || temp::is_temp_name(&name) {
                continue;
            }
            let Some(path) = name.to_str().and_then(|n| dir.join(n).ok()) else {
                continue;
            };
            let Ok(file_type) = item.file_type() else {
                continue;
            };
            let meta = if file_type.is_symlink() {
                // Shown as what it leads to, when that is inside the root.
                self.root.metadata(rel.join(&name))
            } else {
                item.metadata()
            };
            let Ok(meta) = meta else { continue };
            if hiding && own_files::is_own(meta.dev(), meta.ino()) {
                continue;
            }
            if meta.is_dir() || meta.is_file() {
                entries.push(entry_of(path, &meta));
            }
        }
        Ok(entries)
    }

    fn read(&self, path: &VirtualPath) -> Result<FileBytes> {
        let (mut file, stat) = self.open_regular(path)?;
        let meta = file.metadata().map_err(|e| map_io(e, path))?;
        let mut content = Vec::with_capacity(usize::try_from(version::size_of(&stat)).unwrap_or(0));
        file.read_to_end(&mut content)
            .map_err(|e| map_io(e, path))?;
        Ok(FileBytes {
            version: version::version_of(&content, &stat),
            content,
            created: None,
            modified: meta.modified().ok(),
        })
    }

    /// [`Inner::read`] when the file has at most `max_bytes`; else its size and version, from
    /// `fstat` (and, under [`HASHED_SIZE_LIMIT`], a hash of at most that many bytes).
    fn read_at_most(&self, path: &VirtualPath, max_bytes: u64) -> Result<BoundedRead> {
        let (mut file, stat) = self.open_regular(path)?;
        let size = version::size_of(&stat);
        if size <= max_bytes {
            let meta = file.metadata().map_err(|e| map_io(e, path))?;
            // Read through the bound plus one byte: a file that grew since the fstat is
            // still never read past it.
            if let Some(content) =
                version::read_at_most(&mut file, max_bytes, size).map_err(|e| map_io(e, path))?
            {
                return Ok(BoundedRead::Whole(FileBytes {
                    version: version::version_of(&content, &stat),
                    content,
                    created: None,
                    modified: meta.modified().ok(),
                }));
            }
            let stat = rustix::fs::fstat(&file).map_err(|e| map_io(e.into(), path))?;
            return Ok(BoundedRead::TooLarge {
                size: version::size_of(&stat),
                version: version::identity_version(&stat),
            });
        }
        let version = version::current_version(&mut file, &stat).map_err(|e| map_io(e, path))?;
        Ok(BoundedRead::TooLarge { size, version })
    }

    /// See [`Backend::read_range`]. A file of at most [`HASHED_SIZE_LIMIT`] bytes is read
    /// whole to check its content hash; a bigger one is checked by its identity stamps before
    /// and after the bytes are read, on the same open file.
    fn read_range(
        &self,
        path: &VirtualPath,
        offset: u64,
        len: usize,
        expected: &Version,
    ) -> Result<Vec<u8>> {
        use std::os::unix::fs::FileExt;
        let mismatch = || Error::VersionMismatch { path: path.clone() };
        let (mut file, stat) = self.open_regular(path)?;
        let size = version::size_of(&stat);
        if size <= HASHED_SIZE_LIMIT {
            let content = version::read_at_most(&mut file, HASHED_SIZE_LIMIT, size)
                .map_err(|e| map_io(e, path))?
                .ok_or_else(mismatch)?;
            if Version::of_content(&content) != *expected {
                return Err(mismatch());
            }
            let start = usize::try_from(offset)
                .unwrap_or(usize::MAX)
                .min(content.len());
            let end = start.saturating_add(len).min(content.len());
            return Ok(content[start..end].to_vec());
        }
        if version::identity_version(&stat) != *expected {
            return Err(mismatch());
        }
        let wanted = usize::try_from(size.saturating_sub(offset).min(len as u64)).unwrap_or(len);
        let mut bytes = vec![0u8; wanted];
        let mut filled = 0;
        while filled < wanted {
            let read = file
                .read_at(&mut bytes[filled..], offset + filled as u64)
                .map_err(|e| map_io(e, path))?;
            if read == 0 {
                break;
            }
            filled += read;
        }
        bytes.truncate(filled);
        // Changed while it was read (in place: a write by another program moves ctime).
        let after = rustix::fs::fstat(&file).map_err(|e| map_io(e.into(), path))?;
        if version::identity_version(&after) != *expected || filled < wanted {
            return Err(mismatch());
        }
        Ok(bytes)
    }
}

/// The refusal of a write or create at one of the server's own files ([`own_files`]).
fn own_refused(path: &VirtualPath) -> Error {
    Error::Unsupported {
        path: path.clone(),
        reason: "this place is kept for the server's own files (its data directory, databases, audit log or token file); nothing is written there. Choose another path".to_owned(),
    }
}

/// Largest file [`DiskBackend::read_window`] reads without leaving the async worker.
const INLINE_READ_BYTES: u64 = 256 * 1024;
/// Largest directory (its own size) [`DiskBackend::ls`] lists without leaving the async
/// worker: a few hundred entries on ext4.
const INLINE_LIST_BYTES: u64 = 16 * 1024;

fn describe_type(file_type: FileType) -> &'static str {
    match file_type {
        FileType::Fifo => "FIFO (named pipe)",
        FileType::Socket => "socket",
        FileType::CharacterDevice => "character device",
        FileType::BlockDevice => "block device",
        FileType::Symlink => "symbolic link",
        FileType::Directory => "directory",
        FileType::RegularFile => "regular file",
        FileType::Unknown => "special file",
    }
}

fn entry_of(path: VirtualPath, meta: &cap_std::fs::Metadata) -> Entry {
    let modified = meta
        .modified()
        .ok()
        .map(cap_std::time::SystemTime::into_std);
    if meta.is_dir() {
        Entry {
            path,
            kind: EntryKind::Directory,
            size: 0,
            modified,
            created: None,
        }
    } else {
        Entry {
            path,
            kind: EntryKind::File,
            size: meta.len(),
            modified,
            created: None,
        }
    }
}

#[async_trait]
impl Backend for DiskBackend {
    async fn stat(&self, path: &VirtualPath) -> Result<Option<Entry>> {
        let path = path.clone();
        self.blocking(move |inner| inner.stat(&path)).await
    }

    async fn ls(&self, dir: &VirtualPath) -> Result<Vec<Entry>> {
        // A small directory is listed right here, like a small file is read (see read_window):
        // its entries and their `stat`s come from the kernel's caches in microseconds. The
        // directory's own size (bytes of entries, on ext4 4 KiB per block) tells small from big.
        let small = self
            .inner
            .root
            .metadata(relative(dir))
            .is_ok_and(|meta| meta.is_dir() && meta.len() <= INLINE_LIST_BYTES);
        if small {
            return self.inner.ls(dir);
        }
        let dir = dir.clone();
        self.blocking(move |inner| inner.ls(&dir)).await
    }

    async fn read(&self, path: &VirtualPath) -> Result<FileBytes> {
        let path = path.clone();
        self.blocking(move |inner| inner.read(&path)).await
    }

    async fn read_at_most(&self, path: &VirtualPath, max_bytes: u64) -> Result<BoundedRead> {
        let path = path.clone();
        self.blocking(move |inner| inner.read_at_most(&path, max_bytes))
            .await
    }

    async fn read_window(&self, path: &VirtualPath, window: LineWindow) -> Result<FileView> {
        // A small file is opened, checked and read right here: from the page cache that takes
        // microseconds, less than the hand-off to the blocking pool and back, which was most of
        // a small read's cost (benches/peers). Anything bigger is streamed on the pool.
        let (file, stat) = self.inner.open_regular(path)?;
        if version::size_of(&stat) <= INLINE_READ_BYTES {
            return window::view(file, &stat, window, &self.inner.line_index)
                .map_err(|e| map_io(e, path));
        }
        let path = path.clone();
        self.blocking(move |inner| {
            window::view(file, &stat, window, &inner.line_index).map_err(|e| map_io(e, &path))
        })
        .await
    }

    async fn read_range(
        &self,
        path: &VirtualPath,
        offset: u64,
        len: usize,
        version: &Version,
    ) -> Result<Vec<u8>> {
        let (path, version) = (path.clone(), version.clone());
        self.blocking(move |inner| inner.read_range(&path, offset, len, &version))
            .await
    }

    async fn write(
        &self,
        path: &VirtualPath,
        content: &[u8],
        mode: WriteMode,
    ) -> Result<WriteOutcome> {
        let path = path.clone();
        let content = content.to_vec();
        self.blocking(move |inner| {
            inner.writable(&path)?;
            write::write(&inner.root, &inner.temps, &path, &content, mode)
        })
        .await
    }

    async fn delete(&self, path: &VirtualPath, options: &DeleteOptions) -> Result<()> {
        let path = path.clone();
        let options = options.clone();
        self.blocking(move |inner| {
            inner.removable(&path)?;
            write::delete(&inner.root, &path, &options)
        })
        .await
    }

    async fn glob(&self, query: &GlobQuery) -> Result<Vec<Entry>> {
        let query = query.clone();
        // The semaphore is never closed; were it, the walk would simply run unqueued.
        let _turn = self.inner.searches.acquire().await.ok();
        self.blocking(move |inner| {
            inner.visible(&query.dir)?;
            walk::glob(&inner.walk_context(), &query)
        })
        .await
    }

    async fn grep(&self, query: &GrepQuery) -> Result<Vec<GrepFile>> {
        let query = query.clone();
        let _turn = self.inner.searches.acquire().await.ok();
        self.blocking(move |inner| {
            inner.visible(&query.dir)?;
            walk::grep(&inner.walk_context(), &query)
        })
        .await
    }
}

#[async_trait]
impl KeepAside for DiskBackend {
    async fn set_aside(&self, path: &VirtualPath, version: &Version) -> Result<Option<AsideFile>> {
        let (path, version) = (path.clone(), version.clone());
        let entry = {
            let path = path.clone();
            self.blocking(move |inner| {
                inner.writable(&path)?;
                aside::set_aside(&inner.root, &inner.aside, &path, &version)
            })
            .await?
        };
        Ok(entry.map(|entry| self.kept(path, entry)))
    }

    async fn write_keeping_aside(
        &self,
        path: &VirtualPath,
        content: &[u8],
        version: &Version,
    ) -> Result<Option<(WriteOutcome, AsideFile)>> {
        let (path, content, version) = (path.clone(), content.to_vec(), version.clone());
        let written = {
            let path = path.clone();
            self.blocking(move |inner| {
                inner.writable(&path)?;
                aside::write_keeping(
                    &inner.root,
                    &inner.temps,
                    &inner.aside,
                    &path,
                    &content,
                    &version,
                )
            })
            .await?
        };
        Ok(written.map(|(outcome, entry)| (outcome, self.kept(path, entry))))
    }

    async fn begin_changes(
        &self,
        files: &[PlannedFile],
        role: &JournalRole,
    ) -> Result<Option<Box<dyn ChangeJournal>>> {
        let (files, role) = (files.to_vec(), role.clone());
        let journal = self
            .blocking(move |inner| {
                for file in &files {
                    inner.writable(&file.path)?;
                }
                journal::begin(&inner.root, &inner.host_root, &inner.seal, &files, &role)
            })
            .await?;
        Ok(Some(Box::new(DiskJournal {
            backend: self.clone(),
            journal: Arc::new(journal),
        })))
    }
}

#[async_trait]
impl Rename for DiskBackend {
    async fn rename(
        &self,
        from: &VirtualPath,
        to: &VirtualPath,
        options: &RenameOptions,
    ) -> Result<Option<Renamed>> {
        let (from, to, options) = (from.clone(), to.clone(), options.clone());
        self.blocking(move |inner| {
            inner.removable(&from)?;
            inner.writable(&to)?;
            rename::rename(&inner.root, &from, &to, &options)
        })
        .await
    }
}

#[async_trait]
impl Posix for DiskBackend {
    async fn permissions(&self, path: &VirtualPath) -> Result<Option<u32>> {
        let path = path.clone();
        self.blocking(move |inner| {
            inner.visible(&path)?;
            rename::permissions(&inner.root, &path).map(Some)
        })
        .await
    }

    async fn set_permissions(&self, path: &VirtualPath, mode: u32) -> Result<Option<Version>> {
        let path = path.clone();
        self.blocking(move |inner| {
            inner.writable(&path)?;
            rename::set_permissions(&inner.root, &path, mode).map(Some)
        })
        .await
    }

    async fn same_file(&self, a: &VirtualPath, b: &VirtualPath) -> Result<bool> {
        use cap_std::fs::MetadataExt;
        let (a, b) = (a.clone(), b.clone());
        self.blocking(move |inner| {
            inner.visible(&a)?;
            inner.visible(&b)?;
            let id = |p: &VirtualPath| match inner.root.metadata(relative(p)) {
                Ok(meta) => Ok(Some((meta.dev(), meta.ino()))),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(map_io(e, p)),
            };
            Ok(matches!((id(&a)?, id(&b)?), (Some(x), Some(y)) if x == y))
        })
        .await
    }

    async fn is_symlink(&self, path: &VirtualPath) -> Result<bool> {
        if path.is_root() {
            return Ok(false);
        }
        let path = path.clone();
        self.blocking(move |inner| {
            if inner.own_on_the_way(&path, true) {
                return Ok(false);
            }
            Ok(inner
                .root
                .symlink_metadata(relative(&path))
                .is_ok_and(|m| m.file_type().is_symlink()))
        })
        .await
    }
}

impl HostDir for DiskBackend {
    fn host_dir(&self) -> Option<&std::path::Path> {
        Some(&self.inner.host_root)
    }
}

#[async_trait]
impl Uploads for DiskBackend {
    async fn begin_upload(
        &self,
        path: &VirtualPath,
        mode: WriteMode,
    ) -> Result<Box<dyn Upload + '_>> {
        self.inner.writable(path)?;
        Ok(Box::new(upload::DiskUpload::begin(self, path, mode)?))
    }
}

/// A change journal of this mount in progress (see [`journal`]).
#[derive(Debug)]
struct DiskJournal {
    backend: DiskBackend,
    journal: Arc<journal::Journal>,
}

impl DiskJournal {
    fn path(&self, index: usize) -> Result<VirtualPath> {
        self.journal
            .paths
            .get(index)
            .cloned()
            .ok_or_else(|| Error::Unavailable {
                message: format!("change journal: no planned file {index}"),
            })
    }
}

#[async_trait]
impl ChangeJournal for DiskJournal {
    fn location(&self) -> PathBuf {
        self.journal.host.clone()
    }

    /// One file at a time: each is kept aside by the journal already.
    async fn apply_at_once(
        &self,
        _changes: &[(Option<&[u8]>, Option<Version>)],
    ) -> Option<std::result::Result<Vec<Option<Version>>, (usize, Error)>> {
        None
    }

    async fn write(&self, index: usize, content: &[u8], mode: WriteMode) -> Result<WriteOutcome> {
        let path = self.path(index)?;
        let content = content.to_vec();
        // The journal holds a second link to a replaced file (its old content).
        self.backend
            .blocking(move |inner| {
                write::write_linked(&inner.root, &inner.temps, &path, &content, mode, 2)
            })
            .await
    }

    async fn delete(&self, index: usize, version: &Version) -> Result<()> {
        let path = self.path(index)?;
        let options = DeleteOptions::file_if_version(version.clone());
        self.backend
            .blocking(move |inner| write::delete(&inner.root, &path, &options))
            .await
    }

    async fn remove_dir(&self, path: &VirtualPath) -> Result<bool> {
        let journal = Arc::clone(&self.journal);
        let path = path.clone();
        self.backend
            .blocking(move |inner| journal.remove_dir(&inner.root, &path))
            .await
    }

    async fn mark_committed(&self) -> Result<()> {
        let journal = Arc::clone(&self.journal);
        self.backend
            .blocking(move |_| journal.mark_committed())
            .await
    }

    async fn finish(&self) -> Result<()> {
        let journal = Arc::clone(&self.journal);
        self.backend
            .blocking(move |inner| journal.finish(&inner.root))
            .await
    }

    async fn roll_back(&self, applied: &[(usize, Option<Version>)]) -> Vec<(usize, Error)> {
        let journal = Arc::clone(&self.journal);
        let applied = applied.to_vec();
        self.backend
            .blocking(move |inner| Ok(journal.roll_back(&inner.root, &applied)))
            .await
            .unwrap_or_else(|error| vec![(0, error)])
    }
}
