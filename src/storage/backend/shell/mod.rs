//! `ShellBackend`: a directory inside a container, a CI runner, a pod or a remote machine,
//! served through long-lived POSIX `sh` processes started by a command such as
//! `ssh -T dev@host sh` or `docker exec -i runner sh` (issue 27, CONTRACT §3 "shell").
//!
//! Every operation is one call of a shell function defined when the connection opened
//! (`script`), over one of a few connections (`conn`); paths, contents, patterns and versions
//! travel on the shell's standard input, never on a command line. This file turns the trait's
//! calls into frames and the answers back into entries, views and errors.
//!
//! The contract is the disk mount's:
//! - **No way out.** Every path is resolved on the target with `cd -P` into its parent and
//!   `$PWD` compared with the mount's physical directory; a last component that is a symlink
//!   is followed with `readlink -f` and checked the same way (refused when the target has no
//!   `readlink -f`); new parents are made one component at a time, each checked. What a shell
//!   cannot close is the race between that check and the use (another process on the target
//!   swapping a directory for a symlink in between): the target's own user rights are the
//!   limit, as for any program run there (docs/mounts.md).
//! - **Atomic writes.** A write goes to a temporary file in the file's own directory
//!   (`.mountfs-tmp.*`, hidden from listings) and is renamed over the file; the version check
//!   of a conditional write runs in the same script, just before the rename. A create-only
//!   write is a hard link, which fails if anything appeared there. A temporary file whose
//!   writer died (a `mountfs cp` killed mid-upload, a shell killed mid-write) is removed when
//!   a mount of the directory next opens, once it is old enough that no live writer can own it
//!   ([`ShellBackend::sweep_stale_temp_files`]).
//! - **Versions** are the disk mount's: the SHA-256 of the content (its first 16 bytes in
//!   hex) for a file of at most 8 MiB, computed here from the bytes read or written and on the
//!   target by `sha256sum` for a check; for a bigger file a hash of `dev:ino:size:mtime:ctime`,
//!   so a window of a 64 MiB file never reads the whole file.
//! - **Searches run on the target.** `glob` lists files with one `find`; `grep` asks the
//!   target's `rg` which files are not clean UTF-8 or have a line matching the pattern written
//!   out in Unicode ranges (see `utf8_regex`), or its `grep -E` (in the C locale, which cannot
//!   be trusted past ASCII) which files are not plain ASCII or have a line matching the
//!   pattern rewritten for it (see `line_regex`), and, when the pattern has ASCII text every
//!   match requires in any encoding the matcher decodes, `rg -F` or `grep -F` which files hold
//!   it (see `prefilter`); it reads only the files both name (and those over the line bound)
//!   back and confirms them here, so its answers are exactly a disk mount's: candidates up to
//!   [`GREP_WHOLE_LIMIT`] in batches of
//!   at most [`GREP_BATCH_BYTES`], bigger ones streamed in chunks (`gk`, a small range read of
//!   its own) through the disk mount's searcher, so a grep's memory does not grow with a
//!   file's size.
//! - **Links.** `ls` shows a symlink that stays inside the directory as what it leads to and
//!   leaves out one that leads outside (or is broken), as a disk mount does; `glob` and `grep`
//!   follow none.
//! - **Big files** (over 8 MiB) are read in windows on the target; smaller ones are read whole,
//!   as the disk mount reads them. The target reports where a window starts (a byte offset),
//!   the server remembers such line starts per file version (`marks`), and the next window of
//!   the file begins at the nearest one at or before it (`dd skip`, a seek), so only the first
//!   window deep in a file reads through the file's beginning.
//!
//! Not kept: undo of a delete or an overwrite of a file too big to hold in memory (no aside
//! content), the crash journal of multi-file changes (changes are made one file at a time),
//! `.gitignore` rules (only `.git/` is skipped), times of creation.

mod conn;
mod line_regex;
mod marks;
mod prefilter;
mod run;
mod script;
mod utf8_regex;

pub use self::run::{RemoteRun, RemoteStartError, RunEvent};

mod meta;
mod place;
mod search;
mod upload;
mod window;

use meta::{Meta, epoch_of_full_time, pair_batch, target_version, version_of};
use place::TEMP_PREFIX;
pub use place::{DirPlace, STALE_TEMP_MINUTES, ShellProbe};
pub use search::TARGET_SEARCH_BOUND;
use upload::{ShellUpload, mode_flag};
use window::{WindowFound, whole_lines_length};

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use sha2::{Digest, Sha256};

use self::conn::{CallError, Pool, Reply};
use self::line_regex::LineRegex;
use self::marks::{Mark, WindowMarks};
use self::prefilter::Plan;
use self::script::{Frame, status};
use self::utf8_regex::Utf8Regex;
use super::disk::{Searchers, search_reader};
use super::whole_file::{grep_file, view_of_bytes};
use super::{
    Backend, BinarySample, BoundedRead, ContentHasher, DeleteOptions, Entry, EntryKind, Error,
    FileBytes, FileView, GlobQuery, GrepFile, GrepQuery, GrepResults, HostDir, KeepAside,
    LineWindow, Posix, Rename, RenameOptions, Renamed, Result, SearchControl, TextWindow, Upload,
    Uploads, Version, WriteMode, WriteOutcome,
};
use crate::ground::content;
use crate::ground::path::VirtualPath;
use crate::ground::text::encoding::StreamedLines;

/// Largest file whose version is its content hash (the disk mount's limit); bigger files are
/// also the ones read in windows on the target.
const HASHED_SIZE_LIMIT: u64 = 8 * 1024 * 1024;

/// A directory in a target reached through a shell (see the module doc).
#[derive(Debug)]
pub struct ShellBackend {
    /// The `--shell` name, for messages.
    name: String,
    pool: Pool,
    /// Changes of one path from this server run one at a time: the version check and the
    /// rename run in one script on the target, but two scripts of two connections could
    /// interleave between them (module doc). Paths share [`LOCK_STRIPES`] locks by hash.
    locks: Vec<tokio::sync::Mutex<()>>,
    /// Line starts of big files, learnt while finding windows (see `marks`).
    marks: WindowMarks,
    /// How windows of big files were found (see [`WindowCounters`]).
    counters: std::sync::Mutex<WindowCounters>,
    /// Longest one search of the target runs ([`TARGET_SEARCH_BOUND`] unless set).
    search_bound: Duration,
}

/// How the windows of a shell mount's big files were found on the target, since the mount
/// opened: what tests and the benchmark look at to see that a window deep in a file was read
/// from a remembered line start rather than through the file's beginning.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WindowCounters {
    /// Windows of files over 8 MiB read.
    pub windows: u64,
    /// Of those, the windows the target began at a remembered line start (a seek).
    pub from_marks: u64,
    /// Lines the target read through to find where windows start, in all.
    pub lines_passed: u64,
    /// Remembered line starts the target found not to be one (the file changed without its
    /// stamp showing it): the file's marks were dropped and the window found from its start.
    pub stale_marks: u64,
}

/// How many locks the changes of a shell mount's paths share.
const LOCK_STRIPES: usize = 32;

/// The path as the script takes it: relative to the mount's directory, `""` for the root.
fn relative(path: &VirtualPath) -> &str {
    path.as_str().trim_start_matches('/')
}

/// Names never shown: the version-control directory, writes in flight, and every name
/// reserved for them (`.mountfs-tmp*`, made on the target by another program).
fn hidden(name: &str) -> bool {
    name == ".git" || crate::ground::path::is_reserved_name(name)
}

/// Refuses a path whose name has the form of our temporary files (as a disk mount refuses its
/// own): such a file would be hidden from ls, glob and grep, and could be an upload in flight.
fn refuse_temp_name(path: &VirtualPath) -> Result<()> {
    super::refuse_reserved(path)?;
    match path.file_name() {
        Some(name) if name.starts_with(TEMP_PREFIX) => Err(Error::Unsupported {
            path: path.clone(),
            reason: format!(
                "names starting with {TEMP_PREFIX} are reserved for mountfs's own temporary files; choose another name"
            ),
        }),
        _ => Ok(()),
    }
}

/// The error of an answer that is not what the target's script prints.
fn malformed(path: &VirtualPath) -> Error {
    Error::Io {
        path: path.clone(),
        message: "the target answered something that is not a version; retry (the next call reconnects if the connection is broken)".to_owned(),
    }
}

fn trimmed(bytes: &[u8]) -> &[u8] {
    bytes.trim_ascii()
}

impl ShellBackend {
    /// A mount of the absolute directory `dir` of the target that `command` reaches (the
    /// `--shell` named `name`). Nothing is started until the first call or [`Self::probe`].
    pub fn new(name: &str, command: Vec<String>, dir: &str) -> Self {
        Self {
            name: name.to_owned(),
            pool: Pool::new(command, dir),
            locks: (0..LOCK_STRIPES)
                .map(|_| tokio::sync::Mutex::new(()))
                .collect(),
            marks: WindowMarks::default(),
            counters: std::sync::Mutex::new(WindowCounters::default()),
            search_bound: TARGET_SEARCH_BOUND,
        }
    }

    /// The same mount whose searches of the target stop after `bound` (see
    /// [`TARGET_SEARCH_BOUND`]).
    #[must_use]
    pub fn with_search_bound(mut self, bound: Duration) -> Self {
        self.search_bound = bound;
        self
    }

    /// How the windows of big files were found so far (see [`WindowCounters`]).
    pub fn window_counters(&self) -> WindowCounters {
        *self
            .counters
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How many files have line starts remembered, and how many starts in all (bounded: at
    /// most 64 files of at most 256 starts each).
    pub fn remembered_line_starts(&self) -> (usize, usize) {
        self.marks.size()
    }

    fn stripe(path: &VirtualPath) -> usize {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        path.as_str().hash(&mut hasher);
        (hasher.finish() % LOCK_STRIPES as u64) as usize
    }

    /// Holds the lock of `path` (see `locks`).
    async fn lock(&self, path: &VirtualPath) -> Option<tokio::sync::MutexGuard<'_, ()>> {
        Some(self.locks.get(Self::stripe(path))?.lock().await)
    }

    /// Holds the locks of two paths, in stripe order (no deadlock between two renames).
    async fn lock_two(
        &self,
        a: &VirtualPath,
        b: &VirtualPath,
    ) -> Vec<tokio::sync::MutexGuard<'_, ()>> {
        let mut stripes = vec![Self::stripe(a), Self::stripe(b)];
        stripes.sort_unstable();
        stripes.dedup();
        let mut guards = Vec::new();
        for stripe in stripes {
            if let Some(lock) = self.locks.get(stripe) {
                guards.push(lock.lock().await);
            }
        }
        guards
    }

    /// Files what a window call found on the target about the file at `at` (its stamp line
    /// `stamp`): the line start where the window began, and the one after the window's last
    /// line when the window holds it whole (`raw`: the window's bytes as the target printed
    /// them, `None` when they cannot tell; `wanted`: the line feeds before the window, `limit`:
    /// its lines).
    fn learn_marks(
        &self,
        at: &str,
        stamp: &[u8],
        found: &WindowFound,
        raw: Option<&[u8]>,
        wanted: u64,
        limit: usize,
    ) {
        {
            let mut counters = self
                .counters
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            counters.windows += 1;
            counters.lines_passed += found.passed;
            if found.stale {
                counters.stale_marks += 1;
            } else if found.from > 0 {
                counters.from_marks += 1;
            }
        }
        if found.stale {
            self.marks.forget(at);
        }
        let Ok(stamp) = std::str::from_utf8(stamp) else {
            return;
        };
        let key = format!("{stamp} {}", found.ctime);
        let mut learnt = Vec::new();
        if found.lines == wanted {
            learnt.push(Mark {
                lines: wanted,
                byte: found.byte,
            });
            if let Some(length) = raw.and_then(|raw| whole_lines_length(raw, limit)) {
                learnt.push(Mark {
                    lines: wanted + limit as u64,
                    byte: found.byte + length,
                });
            }
        }
        let ctime = match found.ctime.strip_prefix('D') {
            Some(full_time) => epoch_of_full_time(full_time),
            None => found.ctime.parse().ok(),
        };
        let trusted = !found.stale && marks::trusted(ctime, found.now);
        self.marks.learn(at, &key, trusted, &learnt);
    }

    async fn call(&self, frame: Frame) -> Result<Reply> {
        self.pool.call(frame).await.map_err(|error| {
            let message = match error {
                CallError::Start { .. } => format!("shell '{}': {error}", self.name),
                CallError::Broken { .. } => format!("shell '{}': {error}", self.name),
            };
            Error::Unavailable { message }
        })
    }

    /// The error a failed call means for `path`.
    /// [`Self::call`] about `path`, whose reply must have status 0 (else the error it stands for).
    async fn call_at(&self, path: &VirtualPath, frame: Frame) -> Result<Reply> {
        let reply = self.call(frame).await?;
        if reply.status != 0 {
            return Err(self.failure(path, &reply));
        }
        Ok(reply)
    }

    fn failure(&self, path: &VirtualPath, reply: &Reply) -> Error {
        let path = path.clone();
        match reply.status {
            status::NOT_FOUND => Error::NotFound { path },
            status::IS_A_DIRECTORY => Error::IsADirectory { path },
            status::NOT_A_DIRECTORY => Error::NotADirectory { path },
            status::ALREADY_EXISTS => Error::AlreadyExists { path },
            status::VERSION_MISMATCH => Error::VersionMismatch { path },
            status::OUTSIDE => Error::OutsideMount { path },
            status::NOT_EMPTY => Error::DirectoryNotEmpty { path },
            status::MOUNT_ROOT => Error::MountRoot { path },
            status::NO_SPACE => Error::Io {
                path,
                message: format!(
                    "No space left on device on the target of shell '{}' (its file system is full or a quota is reached): nothing was written; free space there, then retry",
                    self.name
                ),
            },
            status::UNSUPPORTED => Error::Unsupported {
                path,
                reason: "not a regular file nor a directory (a FIFO, a device or a socket); shell mounts read and write regular files only".to_owned(),
            },
            other => {
                let mut said = String::from_utf8_lossy(trimmed(&reply.stderr)).into_owned();
                // Answers speak virtual paths: the target's directory is not shown.
                if let Some((_, root)) = self.pool.caps()
                    && !root.is_empty()
                    && root != "/"
                {
                    said = said.replace(&root, "");
                }
                let said: String = said.chars().take(500).collect();
                Error::Io {
                    path,
                    message: format!(
                        "the command on the target failed (status {other}){}",
                        if said.is_empty() {
                            String::new()
                        } else {
                            format!(": {said}")
                        }
                    ),
                }
            }
        }
    }

    fn malformed(&self, path: &VirtualPath, what: &str) -> Error {
        Error::Io {
            path: path.clone(),
            message: format!(
                "the target's answer to {what} could not be read (shell '{}'); retry",
                self.name
            ),
        }
    }

    async fn meta(&self, path: &VirtualPath) -> Result<Option<Meta>> {
        let reply = self.call(Frame::call("st").path(relative(path))).await?;
        match reply.status {
            0 => Ok(Some(
                Meta::parse(trimmed(&reply.stdout)).ok_or_else(|| self.malformed(path, "stat"))?,
            )),
            status::NOT_FOUND => Ok(None),
            _ => Err(self.failure(path, &reply)),
        }
    }
}

impl ShellBackend {
    /// Starts `command` in the directory `cwd` of the mount.
    pub async fn start_command(
        &self,
        cwd: &VirtualPath,
        command: &str,
    ) -> Result<RemoteRun<'_>, RemoteStartError> {
        let name = self.name.clone();
        let failed = |error: CallError| RemoteStartError::Connection {
            name: name.clone(),
            reason: error.to_string(),
        };
        let mut connection = self.pool.dedicated().await.map_err(failed)?;
        let frame = Frame::call("ex")
            .path(relative(cwd))
            .arg(command.len())
            .raw(command.as_bytes());
        match connection.start_stream(frame).await.map_err(failed)? {
            None => Ok(RemoteRun::new(connection, &self.pool, &self.name)),
            Some(reply) => Err(match reply.status {
                status::NOT_FOUND => RemoteStartError::NotFound,
                status::NOT_A_DIRECTORY => RemoteStartError::NotDirectory,
                status::OUTSIDE => RemoteStartError::Outside,
                other => RemoteStartError::Connection {
                    name: self.name.clone(),
                    reason: format!(
                        "the command could not be started (status {other}): {}",
                        String::from_utf8_lossy(&reply.stderr).trim()
                    ),
                },
            }),
        }
    }
}

impl ShellBackend {
    /// The whole file (`limit` None), or its first `limit` bytes: what `rd` prints after the
    /// file's metadata, read in the same script.
    async fn read_up_to(&self, path: &VirtualPath, limit: Option<u64>) -> Result<FileBytes> {
        refuse_temp_name(path)?;
        let frame = Frame::call("rd").path(relative(path));
        let frame = match limit {
            Some(limit) => frame.arg(limit),
            None => frame.arg("-"),
        };
        let reply = self.call_at(path, frame).await?;
        let parts = reply.parts(2);
        let (Some(meta), Some(content)) = (
            parts.first().and_then(|m| Meta::parse(trimmed(m))),
            parts.get(1),
        ) else {
            return Err(self.malformed(path, "read"));
        };
        Ok(FileBytes {
            version: version_of(content, Some(&meta)),
            content: content.to_vec(),
            created: None,
            modified: meta.modified(),
        })
    }
}

#[async_trait]
impl Backend for ShellBackend {
    async fn stat(&self, path: &VirtualPath) -> Result<Option<Entry>> {
        refuse_temp_name(path)?;
        Ok(self
            .meta(path)
            .await?
            .and_then(|meta| meta.entry(path.clone())))
    }

    async fn ls(&self, dir: &VirtualPath) -> Result<Vec<Entry>> {
        refuse_temp_name(dir)?;
        // A cancelled call drops this future, and with it the connection: the target's watcher
        // stops the listing.
        let frame = Frame::call("ls_").path(relative(dir));
        let Some(reply) = self
            .bounded(frame, dir, &SearchControl::default(), "listing")
            .await?
        else {
            return Ok(Vec::new());
        };
        if reply.status != 0 {
            return Err(self.failure(dir, &reply));
        }
        let parts = reply.parts(7);
        if parts.len() < 6 {
            return Err(self.malformed(dir, "ls"));
        }
        let mut out = Vec::new();
        for group in parts[..6].chunks(2) {
            self.batch_entries(dir, group[0], group[1], &mut out)?;
        }
        Ok(out)
    }

    async fn read(&self, path: &VirtualPath) -> Result<FileBytes> {
        self.read_up_to(path, None).await
    }

    async fn read_at_most(&self, path: &VirtualPath, max_bytes: u64) -> Result<BoundedRead> {
        refuse_temp_name(path)?;
        let Some(meta) = self.meta(path).await? else {
            return Err(Error::NotFound { path: path.clone() });
        };
        match meta.kind() {
            Some(EntryKind::Directory) => return Err(Error::IsADirectory { path: path.clone() }),
            Some(EntryKind::File) => {}
            None => {
                return Err(Error::Unsupported {
                    path: path.clone(),
                    reason: "not a regular file".to_owned(),
                });
            }
        }
        let meta = if meta.size <= max_bytes {
            // The file may grow between the size check and the read: at most one byte past
            // the bound is read, and a file found bigger is answered as too large.
            let file = self
                .read_up_to(path, Some(max_bytes.saturating_add(1)))
                .await?;
            if file.content.len() as u64 <= max_bytes {
                return Ok(BoundedRead::Whole(file));
            }
            match self.meta(path).await? {
                Some(meta) => meta,
                None => return Err(Error::NotFound { path: path.clone() }),
            }
        } else {
            meta
        };
        let version = if meta.size > HASHED_SIZE_LIMIT {
            meta.identity_version()
        } else {
            let reply = self.call(Frame::call("vs").path(relative(path))).await?;
            if reply.status != 0 {
                return Err(self.failure(path, &reply));
            }
            target_version(trimmed(&reply.stdout)).ok_or_else(|| malformed(path))?
        };
        Ok(BoundedRead::TooLarge {
            size: meta.size.max(max_bytes.saturating_add(1)),
            version,
        })
    }

    async fn read_window(&self, path: &VirtualPath, window: LineWindow) -> Result<FileView> {
        self.window_of(path, window).await
    }

    async fn write(
        &self,
        path: &VirtualPath,
        content: &[u8],
        mode: WriteMode,
    ) -> Result<WriteOutcome> {
        refuse_temp_name(path)?;
        let (flag, expected) = mode_flag(&mode);
        let mut frame = Frame::call("wr")
            .path(relative(path))
            .arg(content.len())
            .arg(flag);
        if let Some(version) = expected {
            frame = frame.version(version.as_str());
        }
        let _lock = self.lock(path).await;
        let reply = self.call(frame.raw(content)).await?;
        if reply.status != 0 {
            return Err(self.failure(path, &reply));
        }
        let mut lines = reply.stdout.split(|b| *b == b'\n');
        let existed = lines.next().map(trimmed) == Some(b"1".as_slice());
        let meta = lines.next().and_then(|m| Meta::parse(trimmed(m)));
        Ok(WriteOutcome {
            version: version_of(content, meta.as_ref()),
            created: !existed,
        })
    }

    async fn read_range(
        &self,
        path: &VirtualPath,
        offset: u64,
        len: usize,
        version: &Version,
    ) -> Result<Vec<u8>> {
        refuse_temp_name(path)?;
        let frame = Frame::call("rr")
            .path(relative(path))
            .arg(offset)
            .arg(len)
            .version(version.as_str());
        let reply = self.call_at(path, frame).await?;
        let parts = reply.parts(2);
        let (Some(bytes), Some(after)) = (parts.first(), parts.get(1)) else {
            return Err(self.malformed(path, "a range read"));
        };
        // Changed while the range was read.
        if trimmed(after) != version.as_str().as_bytes() {
            return Err(Error::VersionMismatch { path: path.clone() });
        }
        if bytes.len() > len {
            return Err(self.malformed(path, "a range read"));
        }
        Ok(bytes.to_vec())
    }

    async fn delete(&self, path: &VirtualPath, options: &DeleteOptions) -> Result<()> {
        refuse_temp_name(path)?;
        let mut frame = Frame::call("dl")
            .path(relative(path))
            .arg(u8::from(options.recursive))
            .arg(if options.if_version.is_some() {
                "v"
            } else {
                "0"
            });
        if let Some(version) = &options.if_version {
            frame = frame.version(version.as_str());
        }
        let _lock = self.lock(path).await;
        self.call_at(path, frame).await?;
        Ok(())
    }

    async fn glob(&self, query: &GlobQuery) -> Result<Vec<Entry>> {
        let files = self.files_under(&query.dir, &query.control).await?;
        Ok(files
            .into_iter()
            .filter(|entry| query.matcher.matches_path(&entry.path, &query.dir))
            .collect())
    }

    async fn grep(&self, query: &GrepQuery) -> Result<Vec<GrepFile>> {
        self.grep_files(query).await
    }
}

/// Content kept aside would have to live on the target; not offered (module doc). No journal
/// on the target: a multi-file change is made one file at a time.
impl KeepAside for ShellBackend {}

#[async_trait]
impl Rename for ShellBackend {
    async fn rename(
        &self,
        from: &VirtualPath,
        to: &VirtualPath,
        options: &RenameOptions,
    ) -> Result<Option<Renamed>> {
        refuse_temp_name(from)?;
        refuse_temp_name(to)?;
        if to != from && to.starts_with(from) {
            return Err(Error::Unsupported {
                path: to.clone(),
                reason: format!("it lies inside {from}; a directory cannot be moved into itself"),
            });
        }
        let mut frame = Frame::call("mv_")
            .path(relative(from))
            .path(relative(to))
            .arg(if options.if_version.is_some() {
                "v"
            } else {
                "0"
            })
            .arg(if options.replacing.is_some() {
                "v"
            } else {
                "0"
            });
        for version in [&options.if_version, &options.replacing]
            .into_iter()
            .flatten()
        {
            frame = frame.version(version.as_str());
        }
        let _locks = self.lock_two(from, to).await;
        let reply = self.call(frame).await?;
        match reply.status {
            0 => {}
            // Which side a status is about: the source is missing, or the destination is in
            // the way.
            status::NOT_FOUND | status::MOUNT_ROOT => return Err(self.failure(from, &reply)),
            status::VERSION_MISMATCH => return Err(self.failure(from, &reply)),
            status::DESTINATION_MISMATCH => {
                return Err(Error::VersionMismatch { path: to.clone() });
            }
            _ => return Err(self.failure(to, &reply)),
        }
        let mut lines = reply.stdout.split(|b| *b == b'\n');
        let kind = if lines.next().map(trimmed) == Some(b"d".as_slice()) {
            EntryKind::Directory
        } else {
            EntryKind::File
        };
        let version = match kind {
            EntryKind::Directory => None,
            EntryKind::File => match lines.next().map(trimmed).filter(|v| !v.is_empty()) {
                Some(text) => Some(target_version(text).ok_or_else(|| malformed(to))?),
                None => None,
            },
        };
        Ok(Some(Renamed { kind, version }))
    }
}

#[async_trait]
impl Posix for ShellBackend {
    async fn permissions(&self, path: &VirtualPath) -> Result<Option<u32>> {
        let has_modes = self.pool.caps().is_some_and(|(caps, _)| caps.stat);
        let Some(meta) = self.meta(path).await? else {
            return Err(Error::NotFound { path: path.clone() });
        };
        Ok(has_modes.then_some(meta.mode & 0o7777))
    }

    async fn set_permissions(&self, path: &VirtualPath, mode: u32) -> Result<Option<Version>> {
        let frame = Frame::call("cm")
            .path(relative(path))
            .arg(format!("{:o}", mode & 0o7777));
        let reply = self.call_at(path, frame).await?;
        // A mode change moves ctime: the version of a big file changes with it.
        Ok(Meta::parse(trimmed(&reply.stdout))
            .filter(|meta| meta.size > HASHED_SIZE_LIMIT)
            .map(|meta| meta.identity_version()))
    }

    async fn same_file(&self, a: &VirtualPath, b: &VirtualPath) -> Result<bool> {
        let frame = Frame::call("sm").path(relative(a)).path(relative(b));
        let reply = self.call(frame).await?;
        if reply.status != 0 {
            return Ok(false);
        }
        let parts = reply.parts(2);
        let metas: Vec<Option<Meta>> = parts.iter().map(|p| Meta::parse(trimmed(p))).collect();
        Ok(match metas.as_slice() {
            [Some(x), Some(y)] => x.ino == y.ino && x.dev == y.dev,
            _ => false,
        })
    }

    async fn is_symlink(&self, path: &VirtualPath) -> Result<bool> {
        let reply = self.call(Frame::call("sl").path(relative(path))).await?;
        match reply.status {
            0 => Ok(trimmed(&reply.stdout) == b"1"),
            status::NOT_FOUND => Ok(false),
            _ => Err(self.failure(path, &reply)),
        }
    }
}

/// The directory is on the target, not on this machine: `host_dir` is `None`, execute's
/// sandbox has no place there; commands run on the target instead.
impl HostDir for ShellBackend {
    fn shell(&self) -> Option<&ShellBackend> {
        Some(self)
    }
}

#[async_trait]
impl Uploads for ShellBackend {
    async fn content_sha256(
        &self,
        path: &VirtualPath,
        version: &Version,
    ) -> Result<Option<String>> {
        let frame = Frame::call("hs")
            .path(relative(path))
            .version(version.as_str());
        let reply = self.call_at(path, frame).await?;
        let parts = reply.parts(2);
        let (Some(digest), Some(after)) = (parts.first(), parts.get(1)) else {
            return Err(self.malformed(path, "a content digest"));
        };
        // Changed while it was hashed.
        if trimmed(after) != version.as_str().as_bytes() {
            return Err(Error::VersionMismatch { path: path.clone() });
        }
        let digest = trimmed(digest);
        if digest.len() != 64
            || !digest
                .iter()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        {
            return Err(self.malformed(path, "a content digest"));
        }
        Ok(Some(String::from_utf8_lossy(digest).into_owned()))
    }

    async fn begin_upload(
        &self,
        path: &VirtualPath,
        mode: WriteMode,
    ) -> Result<Box<dyn Upload + '_>> {
        refuse_temp_name(path)?;
        let (flag, expected) = mode_flag(&mode);
        let mut frame = Frame::call("ub").path(relative(path)).arg(flag);
        if let Some(version) = expected {
            frame = frame.version(version.as_str());
        }
        let reply = self.call_at(path, frame).await?;
        // The whole answer is the path (a directory's name may hold a newline: the path goes
        // back by its length). Anything not in our form is refused; a file it names in our form
        // is removed (`ux` checks the form again on the target).
        let answer = String::from_utf8_lossy(&reply.stdout).into_owned();
        let ours = answer
            .rsplit_once('/')
            .is_some_and(|(_, name)| name.starts_with(TEMP_PREFIX) && !name.contains('\n'));
        if !ours || answer.contains('\0') || String::from_utf8(reply.stdout.clone()).is_err() {
            if ours {
                let _ = self.call(Frame::call("ux").path(&answer)).await;
            }
            return Err(self.malformed(path, "the start of a write"));
        }
        let temp = answer;
        Ok(Box::new(ShellUpload {
            backend: self,
            path: path.clone(),
            mode,
            temp: Some(temp),
            size: 0,
            hasher: Some(ContentHasher::default()),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::search::glob_batches;
    use super::window::{WINDOW_LINE_BYTES, window_lines};
    #[test]
    fn glob_batches_need_no_marker() {
        let stream = b"./a\0./b\nc\0\08000 1 2 3 4 5\nX\n./d\0\08000 9 9 9 9 9\n";
        let batches = glob_batches(stream).unwrap();
        assert_eq!(batches.len(), 2);
        assert_eq!(batches[0].0, b"./a\0./b\nc\0");
        assert_eq!(batches[0].1, b"8000 1 2 3 4 5\nX\n");
        assert_eq!(batches[1].0, b"./d\0");
        assert_eq!(glob_batches(b"").unwrap().len(), 0);
        // Cut short: a meta line missing, or no end of the names.
        assert!(glob_batches(b"./a\0./b\0\0only one\n").is_none());
        assert!(glob_batches(b"./a\0./b").is_none());
    }

    #[test]
    fn only_what_the_script_prints_is_a_version() {
        let hex = "0123456789abcdef0123456789abcdef";
        assert!(super::target_version(hex.as_bytes()).is_some());
        assert!(super::target_version(format!("i{hex}").as_bytes()).is_some());
        for bad in [
            format!("{hex}\ntouch /tmp/x"),
            format!("{hex}0"),
            hex.to_uppercase(),
            String::new(),
            "FORGED".to_owned(),
        ] {
            assert!(super::target_version(bad.as_bytes()).is_none(), "{bad:?}");
        }
    }

    use super::*;

    #[test]
    fn meta_lines_parse_and_give_kinds() {
        let meta = Meta::parse(b"81a4 6 1795665564 1795665565 10010897 2049").unwrap();
        assert_eq!(meta.kind(), Some(EntryKind::File));
        assert_eq!(meta.size, 6);
        assert_eq!(meta.mode & 0o7777, 0o644);
        assert_eq!(
            Meta::parse(b"41ed 4096 1 1 2 3").unwrap().kind(),
            Some(EntryKind::Directory)
        );
        assert!(Meta::parse(b"X").is_none());
        assert!(meta.identity_version().as_str().starts_with('i'));
        // With the times' nanoseconds (`%y %z`): they are part of the identity stamp.
        let fine = Meta::parse(
            b"81a4 9000000 1795665564 1795665565 10 2049 2026-11-26 06:57:28.050060103 +0000 2026-11-26 06:57:29.1 +0000",
        )
        .unwrap();
        assert_eq!(fine.mtime, Some(1795665564));
        assert_eq!(
            fine.stamp,
            "2049:10:9000000:1795665564:1795665565:2026-11-26 06:57:28.050060103 +0000 2026-11-26 06:57:29.1 +0000"
        );
        // Without stat -c: the time as ls --full-time shows it.
        let meta = Meta::parse(b"8000 6 D2026-11-26T03:59:24.5+0100 0 7 0").unwrap();
        assert_eq!(meta.mtime, Some(1_795_665_564 - 3600));
        assert_eq!(meta.stamp, "0:7:6:D2026-11-26T03:59:24.5+0100:0");
    }

    #[test]
    fn full_times_become_epoch_seconds() {
        assert_eq!(epoch_of_full_time("1970-01-01T00:00:00+0000"), Some(0));
        assert_eq!(
            epoch_of_full_time("2000-03-01T00:00:01-0030"),
            Some(951_868_801 + 1800)
        );
        assert_eq!(epoch_of_full_time("Nov"), None);
    }

    #[test]
    fn batches_pair_names_with_their_lines_or_refuse() {
        let pairs = pair_batch(b"a\0b c\0", b"81a4 1 1 1 1 1\n41ed 0 1 1 2 1\n").unwrap();
        assert_eq!(pairs.len(), 2);
        assert_eq!(pairs[1].0, b"b c");
        assert!(pair_batch(b"a\0b\0", b"81a4 1 1 1 1 1\n").is_none());
    }

    #[test]
    fn the_lines_after_a_window_start_where_its_whole_lines_end() {
        assert_eq!(whole_lines_length(b"ab\r\nc\nd\n", 2), Some(6));
        assert_eq!(
            whole_lines_length(b"ab\nc\n", 2),
            None,
            "nothing after them"
        );
        assert_eq!(whole_lines_length(b"ab\n", 2), None, "fewer lines");
        assert_eq!(whole_lines_length(b"a\0b\nc\nd\n", 1), None, "a NUL");
        let long = [vec![b'x'; WINDOW_LINE_BYTES], b"\nnext\n".to_vec()].concat();
        assert_eq!(whole_lines_length(&long, 1), None, "a line cut or as long");
        assert_eq!(whole_lines_length(b"a\nb\n", 0), Some(0));
    }

    #[test]
    fn what_the_target_found_is_read_from_its_last_line() {
        let found =
            WindowFound::parse(b"1795698983 1795698000 150000 9600000 k 9000000 6000 0").unwrap();
        assert_eq!(found.now, Some(1_795_698_983));
        assert_eq!(found.ctime, "1795698000");
        assert_eq!(
            (found.lines, found.byte, found.from, found.passed),
            (150_000, 9_600_000, 9_000_000, 6_000)
        );
        assert!(!found.stale);
        assert!(!found.partial_last);
        let found = WindowFound::parse(b"- D2026-11-26T13:16:23+0000 5 60 x 0 5 1").unwrap();
        assert_eq!(found.now, None);
        assert!(found.stale && found.partial_last);
        assert!(WindowFound::parse(b"- - 5 60 q 0 5 0").is_none());
        assert!(WindowFound::parse(b"- - 5 60 k 0 5 2").is_none());
        assert!(WindowFound::parse(b"1 2 3").is_none());
    }

    #[test]
    fn window_lines_drop_cr_and_the_bom_and_see_more() {
        let utf8 = StreamedLines::of_head(b"a\n", false);
        let (lines, more, lossy) = window_lines(b"\xef\xbb\xbfa\r\nb\nc\n", true, 2, utf8);
        assert_eq!(lines, ["a", "b"]);
        assert!(more && !lossy);
        let (lines, more, lossy) = window_lines(b"x\xff\n", false, 5, utf8);
        assert_eq!(lines.len(), 1);
        assert!(!more && lossy);
    }

    #[test]
    fn window_lines_of_a_legacy_head_are_decoded_in_it() {
        let head = "caf\u{e9} cr\u{e8}me br\u{fb}l\u{e9}e, d\u{e9}j\u{e0} vu, fa\u{e7}ade\n"
            .chars()
            .map(|c| u8::try_from(u32::from(c)).unwrap())
            .collect::<Vec<u8>>()
            .repeat(20);
        let decoding = StreamedLines::of_head(&head, false);
        assert_eq!(decoding.encoding().name(), "windows-1252");
        let (lines, more, lossy) = window_lines(b"caf\xe9\r\n\x80 5\n", false, 5, decoding);
        assert_eq!(lines, ["caf\u{e9}", "\u{20ac} 5"]);
        assert!(!more && !lossy);
    }
}
