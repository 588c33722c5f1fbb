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

/// Candidate files of a grep read back per call.
const GREP_READ_BATCH: usize = 64;

/// Largest grep candidate read whole (in a batch); a bigger one is streamed in chunks through
/// the disk mount's searcher, so the memory a grep needs does not grow with a file's size.
const GREP_WHOLE_LIMIT: u64 = 1024 * 1024;

/// Most bytes of file contents one batch of grep candidates carries back.
const GREP_BATCH_BYTES: u64 = 4 * 1024 * 1024;

/// A streamed candidate is fetched in chunks of this many blocks of [`GREP_BLOCK`] bytes.
const GREP_CHUNK_BLOCKS: u64 = 16;

/// The block size of the target's `dd` for chunks.
const GREP_BLOCK: u64 = 64 * 1024;

/// Chunks of a streamed candidate on their way to the searcher at once.
const GREP_CHUNKS_IN_FLIGHT: usize = 2;

/// What one search of the target looks for (see [`ShellBackend::candidates`]).
#[derive(Debug)]
enum TargetSearch {
    /// Files holding any of these ASCII texts (`prefilter`).
    Texts { texts: Vec<String>, fold_case: bool },
    /// Plain files with a line matching this, and every file that is not plain
    /// (`line_regex`).
    Lines(LineRegex),
    /// Clean files (valid UTF-8, no NUL, `\r` nor BOM) with a line matching this in Unicode
    /// mode, and every file that is not clean (`utf8_regex`; `rg` only).
    Utf8(Utf8Regex),
}

/// Longest a search of the target (`gp`: `rg`, `grep`, `find`) may run before the server
/// stops waiting: its connection is dropped, the target's watcher kills what it started, and
/// every file is read back and judged here instead (the matcher here is linear; a target's
/// `grep -E` over a long line need not be).
pub const TARGET_SEARCH_BOUND: Duration = Duration::from_secs(30);

/// Name prefix of the temporary files of writes in flight (hidden from every answer).
const TEMP_PREFIX: &str = ".mountfs-tmp.";

/// How old (by its modification time, in minutes) a temporary file must be before the sweep
/// at opening may remove it. A write in flight changes its temporary file all along (the
/// payload of a write, each chunk of an upload); the longest pause is an upload's last step,
/// the source hashing the whole file, minutes for the largest files. The disk mount needs no
/// age: it knows its writers by a locked record; a shell target may be written by servers in
/// other pid namespaces or on other machines, whose shells cannot be seen from here.
pub const STALE_TEMP_MINUTES: u32 = 60;

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

/// What `mountfs check` reports of a shell mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellProbe {
    /// The mount's directory as the target resolves it.
    pub root: String,
    /// Whether the target user may write in it.
    pub writable: bool,
    /// Whether searches use the target's `rg`.
    pub rg: bool,
    /// Whether listings have times and modes (`stat -c` on the target).
    pub stat: bool,
}

/// Where a directory is, as the machine holding it tells: what `mountfs cp` compares to
/// refuse a destination inside its source across mount kinds and commands (two commands that
/// reach one machine, a disk mount and a shell on this machine). Inode numbers identify a
/// directory within one device, and device numbers within one running kernel, whatever the
/// mount namespace: so the machine is the kernel's boot id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirPlace {
    /// `boot <boot id>`, else `host <name> <machine id>`; empty when unknown.
    pub machine: String,
    /// The physical path (symbolic links resolved) of the directory's longest existing
    /// ancestor (the directory itself when it exists).
    pub existing: String,
    /// The rest of the directory's path below `existing`, as written (empty when it exists).
    pub rest: String,
    /// `(device, inode)` of `existing` and of each of its parents up to `/`, in that order;
    /// the device is `None` where the target cannot tell it (no `stat -c`).
    pub chain: Vec<(Option<u64>, u64)>,
}

/// One `stat -c '%f %s %Y %Z %i %d'` line: raw mode (hex), size, mtime, ctime, inode, device,
/// followed by `%y %z` (the same times with nanoseconds) where the target's `stat` shows them.
/// Without `stat -c` the script gives the mtime as `ls --full-time` shows it
/// (`D2026-11-26T03:59:24.123+0000`) and 0 for ctime and device.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Meta {
    mode: u32,
    size: u64,
    /// Seconds since the epoch, when known.
    mtime: Option<i64>,
    /// `dev:ino:size:mtime:ctime`, and `:` and the rest of the line when there is one, as the
    /// target printed them: what identity versions hash.
    stamp: String,
    ino: u64,
    dev: u64,
}

impl Meta {
    fn parse(line: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(line).ok()?;
        let mut fields = text.split_whitespace();
        let mode = u32::from_str_radix(fields.next()?, 16).ok()?;
        let size_text = fields.next()?;
        let size = size_text.parse().ok()?;
        let mtime_text = fields.next()?;
        let ctime_text = fields.next()?;
        let ino_text = fields.next()?;
        let dev_text = fields.next()?;
        let fine_times: Vec<&str> = fields.collect();
        let mut stamp = format!("{dev_text}:{ino_text}:{size_text}:{mtime_text}:{ctime_text}");
        if !fine_times.is_empty() {
            stamp.push(':');
            stamp.push_str(&fine_times.join(" "));
        }
        let mtime = match mtime_text.strip_prefix('D') {
            Some(full_time) => epoch_of_full_time(full_time),
            None => mtime_text.parse().ok().filter(|s: &i64| *s > 0),
        };
        Some(Self {
            mode,
            size,
            mtime,
            stamp,
            ino: ino_text.parse().ok()?,
            dev: dev_text.parse().ok()?,
        })
    }

    fn kind(&self) -> Option<EntryKind> {
        match self.mode & 0xF000 {
            0x4000 => Some(EntryKind::Directory),
            0x8000 => Some(EntryKind::File),
            _ => None,
        }
    }

    fn modified(&self) -> Option<SystemTime> {
        let seconds = u64::try_from(self.mtime?).ok().filter(|s| *s > 0)?;
        UNIX_EPOCH.checked_add(Duration::from_secs(seconds))
    }

    /// The version of a file over [`HASHED_SIZE_LIMIT`]: what the script's `vr` prints.
    fn identity_version(&self) -> Version {
        let digest = Sha256::digest(self.stamp.as_bytes());
        Version::from_raw(format!("i{}", hex::encode(&digest[..16])))
    }

    fn entry(&self, path: VirtualPath) -> Option<Entry> {
        let kind = self.kind()?;
        Some(Entry {
            path,
            kind,
            size: if kind == EntryKind::File {
                self.size
            } else {
                0
            },
            modified: self.modified(),
            created: None,
        })
    }
}

/// Seconds since the epoch of `ls --full-time`'s `YYYY-MM-DDThh:mm:ss[.frac]±hhmm`.
fn epoch_of_full_time(text: &str) -> Option<i64> {
    let (date, rest) = text.split_once('T')?;
    let mut ymd = date.split('-').map(|p| p.parse::<i64>().ok());
    let (year, month, day) = (ymd.next()??, ymd.next()??, ymd.next()??);
    let zone_at = rest.find(['+', '-'])?;
    let (time, zone) = rest.split_at(zone_at);
    let mut hms = time.split(':');
    let hours: i64 = hms.next()?.parse().ok()?;
    let minutes: i64 = hms.next()?.parse().ok()?;
    let seconds: i64 = hms.next()?.split('.').next()?.parse().ok()?;
    let sign = if zone.starts_with('-') { -1 } else { 1 };
    let zone_hours: i64 = zone.get(1..3)?.parse().ok()?;
    let zone_minutes: i64 = zone.get(3..5)?.parse().ok()?;
    // Days from 1970-01-01 of a proleptic Gregorian date (the civil-from-days inverse).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(
        days * 86_400 + hours * 3600 + minutes * 60 + seconds
            - sign * (zone_hours * 3600 + zone_minutes * 60),
    )
}

/// The version of `content`, whose file has `meta` when it is too big to hash.
fn version_of(content: &[u8], meta: Option<&Meta>) -> Version {
    match meta {
        Some(meta) if content.len() as u64 > HASHED_SIZE_LIMIT => meta.identity_version(),
        _ => Version::of_content(content),
    }
}

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

/// A version as the target's `vr` prints it (`sha256sum`'s first 32 hex digits, or `i` and 32
/// for a file hashed by identity), or `None` for anything else: a version travels back to the
/// target as a line of a later frame, so nothing but those characters may ever make one.
fn target_version(text: &[u8]) -> Option<Version> {
    let digits = text.strip_prefix(b"i").unwrap_or(text);
    (digits.len() == 32
        && digits
            .iter()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
    .then(|| Version::from_raw(String::from_utf8_lossy(text).into_owned()))
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

/// Pairs the NUL-separated `names` with the `metas` lines of one listing batch; `None` when
/// their counts differ.
fn pair_batch<'a>(names: &'a [u8], metas: &'a [u8]) -> Option<Vec<(&'a [u8], Option<Meta>)>> {
    let names: Vec<&[u8]> = names.split(|b| *b == 0).filter(|n| !n.is_empty()).collect();
    let lines: Vec<&[u8]> = metas
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    if names.len() != lines.len() {
        return None;
    }
    Some(
        names
            .into_iter()
            .zip(lines)
            .map(|(name, line)| (name, Meta::parse(line)))
            .collect(),
    )
}

/// The batches of `gl`'s output (after its `D` line): each is its names, each ended by a NUL,
/// an empty name (one more NUL), then exactly one meta line per name. The format needs no
/// secret marker, so the helper shell that prints it is never given the connection's nonce
/// (a command line is readable by every user of the target). Returns (names, meta lines) per
/// batch, or `None` when the stream does not have that shape.
fn glob_batches(mut stream: &[u8]) -> Option<Vec<(&[u8], &[u8])>> {
    let mut batches = Vec::new();
    while !stream.is_empty() {
        let mut names_end = 0;
        let mut count = 0usize;
        loop {
            let rest = &stream[names_end..];
            let nul = memchr::memchr(0, rest)?;
            if nul == 0 {
                break;
            }
            names_end += nul + 1;
            count += 1;
        }
        let names = &stream[..names_end];
        let mut metas_end = names_end + 1;
        for _ in 0..count {
            let newline = memchr::memchr(b'\n', &stream[metas_end..])?;
            metas_end += newline + 1;
        }
        batches.push((names, &stream[names_end + 1..metas_end]));
        stream = &stream[metas_end..];
    }
    Some(batches)
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

    /// Opens a connection now and reports what the target offers (start-up, `mountfs check`).
    pub async fn probe(&self) -> std::result::Result<ShellProbe, String> {
        self.pool.warm().await.map_err(|e| e.to_string())?;
        let reply = self
            .pool
            .call(Frame::call("wt"))
            .await
            .map_err(|e| e.to_string())?;
        let (caps, root) = self.pool.caps().unwrap_or_default();
        Ok(ShellProbe {
            root,
            writable: trimmed(&reply.stdout) == b"1",
            rg: caps.rg,
            stat: caps.stat,
        })
    }

    /// Removes the temporary files that writers which are gone left under the mount's
    /// directory (a `mountfs cp` killed mid-upload, a connection lost mid-write): those older
    /// than [`STALE_TEMP_MINUTES`] whose name carries the pid of a shell that no longer runs
    /// on the target (or no pid: a name of an older release); one `find` on the target, which
    /// follows no symbolic link and stays on the directory's file system. Returns how many.
    /// The mount table calls it when it opens the mount, as the disk mount sweeps its own.
    pub async fn sweep_stale_temp_files(&self) -> std::result::Result<u64, String> {
        let reply = self
            .pool
            .call(Frame::call("sw").arg(STALE_TEMP_MINUTES))
            .await
            .map_err(|e| format!("shell '{}': {e}", self.name))?;
        if reply.status != 0 {
            return Err(format!(
                "shell '{}': the sweep of temporary files failed (status {})",
                self.name, reply.status
            ));
        }
        Ok(String::from_utf8_lossy(&reply.stdout)
            .split_whitespace()
            .filter_map(|n| n.parse::<u64>().ok())
            .sum())
    }

    /// Where the absolute directory `dir` is on the target (see [`DirPlace`]), asked of a
    /// mount made with `/` as its directory (`mountfs cp` compares two trees with it).
    pub async fn place_of(&self, dir: &str) -> std::result::Result<DirPlace, String> {
        let reply = self
            .pool
            .call(Frame::call("pl").path(dir))
            .await
            .map_err(|e| format!("shell '{}': {e}", self.name))?;
        if reply.status != 0 {
            return Err(format!(
                "shell '{}': {dir} cannot be looked at on the target (status {}){}",
                self.name,
                reply.status,
                String::from_utf8_lossy(trimmed(&reply.stderr))
                    .lines()
                    .next()
                    .map(|said| format!(": {said}"))
                    .unwrap_or_default()
            ));
        }
        let parts = reply.parts(4);
        let malformed = || format!("shell '{}': a malformed answer about {dir}", self.name);
        let [machine, existing, rest, chain] = parts.as_slice() else {
            return Err(malformed());
        };
        let mut nodes = Vec::new();
        for line in chain.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let text = std::str::from_utf8(line).map_err(|_| malformed())?;
            let (dev, ino) = text.split_once(' ').ok_or_else(malformed)?;
            nodes.push((
                dev.parse::<u64>().ok(),
                ino.trim().parse::<u64>().map_err(|_| malformed())?,
            ));
        }
        if nodes.is_empty() {
            return Err(malformed());
        }
        Ok(DirPlace {
            machine: String::from_utf8_lossy(machine)
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" "),
            existing: String::from_utf8_lossy(existing).into_owned(),
            rest: String::from_utf8_lossy(rest).into_owned(),
            chain: nodes,
        })
    }

    /// Makes the absolute directory `dir` on the target with its parents (`mkdir -p`), for a
    /// mount made with `/` as its directory: `mountfs cp` into a directory that does not exist
    /// yet, as it makes one on disk. The error is the target's own words.
    pub async fn make_dir_all(&self, dir: &str) -> std::result::Result<(), String> {
        let reply = self
            .pool
            .call(Frame::call("md").path(dir))
            .await
            .map_err(|e| format!("shell '{}': {e}", self.name))?;
        if reply.status == 0 {
            return Ok(());
        }
        let said = String::from_utf8_lossy(trimmed(&reply.stderr)).into_owned();
        Err(if said.is_empty() {
            format!("the target's mkdir failed (status {})", reply.status)
        } else {
            said.chars().take(500).collect()
        })
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

    /// The entries of one listing batch under `dir` (names relative to it, maybe `./`-led).
    fn batch_entries(
        &self,
        dir: &VirtualPath,
        names: &[u8],
        metas: &[u8],
        out: &mut Vec<Entry>,
    ) -> Result<()> {
        let pairs = pair_batch(names, metas).ok_or_else(|| Error::Io {
            path: dir.clone(),
            message: "the directory changed while it was listed; retry".to_owned(),
        })?;
        for (name, meta) in pairs {
            let Ok(name) = std::str::from_utf8(name) else {
                // A name that is not UTF-8 has no virtual path.
                continue;
            };
            let name = name.strip_prefix("./").unwrap_or(name);
            if name.split('/').any(hidden) {
                continue;
            }
            let (Some(meta), Ok(path)) = (meta, dir.join_relative(name)) else {
                continue;
            };
            if let Some(entry) = meta.entry(path) {
                out.push(entry);
            }
        }
        Ok(())
    }

    /// Every file below `dir` (or `dir` itself when it is a file), with `.git/` skipped.
    async fn files_under(&self, dir: &VirtualPath, control: &SearchControl) -> Result<Vec<Entry>> {
        let Some(reply) = self
            .bounded(Frame::call("gl").path(relative(dir)), dir, control, "walk")
            .await?
        else {
            return Ok(Vec::new());
        };
        match reply.status {
            0 => {}
            status::NOT_FOUND => return Ok(Vec::new()),
            _ => return Err(self.failure(dir, &reply)),
        }
        let mut out = Vec::new();
        if let Some(rest) = reply.stdout.strip_prefix(b"F\n") {
            if let Some(entry) = Meta::parse(trimmed(rest)).and_then(|m| m.entry(dir.clone())) {
                out.push(entry);
            }
            return Ok(out);
        }
        let stream = reply.stdout.strip_prefix(b"D\n").unwrap_or(&reply.stdout);
        let batches = glob_batches(stream).ok_or_else(|| Error::Io {
            path: dir.clone(),
            message: "the target's file list was cut short or malformed; retry".to_owned(),
        })?;
        for (names, metas) in batches {
            self.batch_entries(dir, names, metas, &mut out)?;
        }
        Ok(out)
    }

    /// Runs `frame`, a walk or listing of `dir` that runs under the target's watcher (`bw`), as
    /// a search is: `None` when `control` is cancelled; an error naming the bound when it runs
    /// past [`TARGET_SEARCH_BOUND`]. Either way the call's future is dropped, which drops its
    /// connection, and the target's watcher kills what it started.
    async fn bounded(
        &self,
        frame: Frame,
        dir: &VirtualPath,
        control: &SearchControl,
        what: &str,
    ) -> Result<Option<Reply>> {
        tokio::select! {
            reply = self.call(frame) => reply.map(Some),
            () = control.cancelled() => Ok(None),
            () = tokio::time::sleep(self.search_bound) => Err(Error::Io {
                path: dir.clone(),
                message: format!(
                    "the {what} of this directory on the target of shell '{}' ran past its bound of {} s and was stopped (nothing is left running there); name a smaller directory, or narrow the pattern",
                    self.name,
                    self.search_bound.as_secs()
                ),
            }),
        }
    }

    /// The files of `dir` that the target's search tools say may match; `None` when nothing
    /// narrows the search. The rewritten regex (`line_regex`) judges the plain files and
    /// passes every other one; the fixed texts (`prefilter`) then narrow those others, when
    /// the pattern has texts and the regex left more than one batch of files to read. Both
    /// lists hold every file that can match, and so does what they share.
    async fn candidates(&self, query: &GrepQuery) -> Result<Option<Vec<VirtualPath>>> {
        let caps = self.pool.caps().map(|(caps, _)| caps).unwrap_or_default();
        // `rg` judges every clean UTF-8 file (`utf8_regex`); `grep -E`, in the C locale, only
        // the plain ASCII ones (`line_regex`), as `rg` does when the pattern is too big to
        // send written out in Unicode ranges.
        let search = if caps.rg {
            utf8_regex::utf8_regex(&query.pattern)
                .map(TargetSearch::Utf8)
                .or_else(|| line_regex::line_regex(&query.pattern).map(TargetSearch::Lines))
        } else if caps.grep_regex {
            line_regex::line_regex(&query.pattern).map(TargetSearch::Lines)
        } else {
            None
        };
        let mut found = match search {
            Some(search) => self.target_search(query, search, caps.rg).await?,
            None => None,
        };
        if found
            .as_ref()
            .is_none_or(|paths| paths.len() > GREP_READ_BATCH)
            && let Plan::Texts { texts, fold_case } = prefilter::plan(&query.pattern)
            && let Some(by_texts) = self
                .target_search(query, TargetSearch::Texts { texts, fold_case }, caps.rg)
                .await?
        {
            found = Some(match found {
                Some(mut paths) => {
                    paths.retain(|path| by_texts.binary_search(path).is_ok());
                    paths
                }
                None => by_texts,
            });
        }
        Ok(found)
    }

    /// The files of `dir` one search of the target finds (`gp`), sorted; `None` when the
    /// target's tool failed (its list may be short: every file is read instead).
    async fn target_search(
        &self,
        query: &GrepQuery,
        search: TargetSearch,
        rg: bool,
    ) -> Result<Option<Vec<VirtualPath>>> {
        let tool = if rg { "r" } else { "g" };
        let mut payload = Vec::new();
        // The script's mode word: `x` a regex (and the weird-byte line), `i` fixed texts
        // compared without (ASCII) case, `-` fixed texts.
        let mode = match &search {
            TargetSearch::Texts { texts, fold_case } => {
                for text in texts {
                    payload.extend_from_slice(text.as_bytes());
                    payload.push(b'\n');
                }
                if !rg {
                    // `grep` sees no ASCII text in UTF-16: every file with a UTF-16 BOM is a
                    // candidate (`rg` transcodes those itself).
                    payload.extend_from_slice(b"\xff\xfe\n\xfe\xff\n");
                }
                if *fold_case { "i" } else { "-" }
            }
            TargetSearch::Lines(lines) => {
                if let LineRegex::Pattern { ere, rust } = lines {
                    payload.extend_from_slice(if rg { rust } else { ere }.as_bytes());
                    payload.push(b'\n');
                }
                let weird = if rg {
                    line_regex::WEIRD_RUST
                } else {
                    line_regex::WEIRD_ERE
                };
                payload.extend_from_slice(weird.as_bytes());
                payload.push(b'\n');
                "x"
            }
            TargetSearch::Utf8(utf8) => {
                if let Utf8Regex::Pattern(rust) = utf8 {
                    payload.extend_from_slice(rust.as_bytes());
                    payload.push(b'\n');
                }
                payload.extend_from_slice(utf8_regex::NOT_CLEAN.as_bytes());
                payload.push(b'\n');
                "x"
            }
        };
        // A file longer than the line bound may hold a line over it, which the answer reports
        // as skipped whatever it holds: every such file is a candidate (as a store's are).
        let long = query.pattern.max_line_bytes.min(1 << 50);
        let frame = Frame::call("gp")
            .path(relative(&query.dir))
            .arg(payload.len())
            .arg(mode)
            .arg(tool)
            .arg(long)
            .raw(&payload);
        // Cancelled, or past the bound: the call's future is dropped here, which drops its
        // connection; the target's watcher (`bw`) then kills the search's processes.
        let reply = tokio::select! {
            reply = self.call(frame) => reply?,
            () = query.control.cancelled() => return Ok(Some(Vec::new())),
            () = tokio::time::sleep(self.search_bound) => {
                tracing::debug!(shell = %self.name, "a search of the target passed its bound; every file is read instead");
                return Ok(None);
            }
        };
        match reply.status {
            0 => {}
            status::NOT_FOUND => return Ok(Some(Vec::new())),
            _ => return Err(self.failure(&query.dir, &reply)),
        }
        // The names, a mark, the names holding a newline (`grep` lists one a line), the files
        // over the line bound.
        let parts = reply.parts(4);
        let [found, mark, with_newlines, long_files] = parts.as_slice() else {
            return Err(self.malformed(&query.dir, "grep"));
        };
        // `E`: the tool failed (exit 2: a pattern its regex engine rejects — an older `rg`
        // than this crate's — or a file it could not read): its list may miss files, so
        // every file is read instead, never a silently short answer.
        if trimmed(mark) == b"E" {
            return Ok(None);
        }
        let mut names: Vec<&[u8]> = Vec::new();
        if rg {
            names.extend(found.split(|b| *b == 0));
        } else {
            names.extend(found.split(|b| *b == b'\n'));
        }
        names.extend(with_newlines.split(|b| *b == 0));
        names.extend(long_files.split(|b| *b == 0));
        let mut paths: Vec<VirtualPath> = names
            .into_iter()
            .filter(|n| !n.is_empty())
            .filter_map(|n| std::str::from_utf8(n).ok())
            .map(|n| n.strip_prefix("./").unwrap_or(n))
            .filter(|n| !n.split('/').any(hidden))
            .filter_map(|n| query.dir.join_relative(n).ok())
            .collect();
        paths.sort();
        paths.dedup();
        Ok(Some(paths))
    }

    /// One chunk of a streamed grep candidate: its metadata and up to
    /// `GREP_CHUNK_BLOCKS * GREP_BLOCK` bytes from block `skip`; `None` when it is gone or no
    /// longer a regular file.
    async fn grep_chunk(&self, path: &VirtualPath, skip: u64) -> Result<Option<(Meta, Vec<u8>)>> {
        let frame = Frame::call("gk")
            .path(relative(path))
            .arg(skip)
            .arg(GREP_CHUNK_BLOCKS);
        let reply = self.call(frame).await?;
        match reply.status {
            0 => {}
            status::NOT_FOUND | status::IS_A_DIRECTORY | status::UNSUPPORTED => return Ok(None),
            _ => return Err(self.failure(path, &reply)),
        }
        let parts = reply.parts(2);
        let (Some(meta), Some(bytes)) = (
            parts.first().and_then(|m| Meta::parse(trimmed(m))),
            parts.get(1),
        ) else {
            return Err(self.malformed(path, "grep"));
        };
        Ok(Some((meta, bytes.to_vec())))
    }

    /// Greps one candidate streamed in chunks through the disk mount's searcher (its binary
    /// sniff, encodings, line bound and answer), so at most a few chunks and one line bound
    /// are held, whatever the file's size (a self-contained range read: `gk` on the target).
    async fn grep_streamed(
        &self,
        path: &VirtualPath,
        query: &GrepQuery,
    ) -> Result<Option<GrepFile>> {
        let Some(matcher) = query.pattern.line_matcher() else {
            return Ok(None);
        };
        let Some((meta, first)) = self.grep_chunk(path, 0).await? else {
            return Ok(None);
        };
        let chunk_bytes = usize::try_from(GREP_CHUNK_BLOCKS * GREP_BLOCK).unwrap_or(usize::MAX);
        let mut more = first.len() == chunk_bytes;
        let (sender, chunks) = tokio::sync::mpsc::channel(GREP_CHUNKS_IN_FLIGHT);
        let search = {
            let matcher = matcher.clone();
            let pattern = query.pattern.clone();
            let collect = query.collect;
            let shown = path.clone();
            let size = meta.size;
            tokio::task::spawn_blocking(move || {
                let mut searchers = Searchers::new(collect, &pattern);
                let reader = ChunkReader {
                    chunks,
                    current: Vec::new(),
                    at: 0,
                };
                search_reader(reader, size, &mut searchers, &matcher, collect, || {
                    Some(shown)
                })
            })
        };
        let mut failed = None;
        if sender.send(first).await.is_err() {
            more = false;
        }
        let mut skip = GREP_CHUNK_BLOCKS;
        while more && !query.control.stopped() {
            match self.grep_chunk(path, skip).await {
                Ok(Some((_, bytes))) => {
                    more = bytes.len() == chunk_bytes;
                    // The searcher is done (a match was enough, or a line over the bound).
                    if sender.send(bytes).await.is_err() {
                        break;
                    }
                    skip += GREP_CHUNK_BLOCKS;
                }
                Ok(None) => break,
                Err(error) => {
                    failed = Some(error);
                    break;
                }
            }
        }
        drop(sender);
        let found = search.await.map_err(|error| Error::Io {
            path: path.clone(),
            message: format!("the search of the file stopped: {error}"),
        })?;
        if let Some(error) = failed {
            return Err(error);
        }
        query.control.count_file(found.is_some());
        Ok(found)
    }
}

/// What one `rm_` batch answered (see [`split_batch`]).
struct Batch<'a> {
    /// The files read whole, with their bytes.
    whole: Vec<(&'a VirtualPath, &'a [u8])>,
    /// Files over [`GREP_WHOLE_LIMIT`], to stream in chunks.
    big: Vec<&'a VirtualPath>,
    /// Files left for a later batch (this one's bytes reached [`GREP_BATCH_BYTES`]).
    deferred: Vec<&'a VirtualPath>,
}

/// The answer of one `rm_` batch: a flag per path (`0` not a regular file, `1` read, `2` big,
/// `3` deferred), the sizes of the files read as `stat` gave them before the `cat`, their
/// bytes (cut at the sum of those sizes), and their sizes again after it. `None` when the
/// answer does not add up (a file changed in between).
fn split_batch<'a>(batch: &'a [VirtualPath], reply: &'a Reply) -> Option<Batch<'a>> {
    let parts = reply.parts(4);
    let [flags, sizes, content, after] = parts.as_slice() else {
        return None;
    };
    let lines = |text: &'a [u8]| {
        text.split(|b| *b == b'\n')
            .map(trimmed)
            .filter(|l| !l.is_empty())
    };
    let flags: Vec<&[u8]> = lines(flags).collect();
    let sizes: Vec<usize> = lines(sizes)
        .map(|l| std::str::from_utf8(l).ok()?.parse().ok())
        .collect::<Option<_>>()?;
    let after: Vec<&[u8]> = lines(after).collect();
    if flags.len() != batch.len()
        || after.len() != sizes.len()
        || sizes.iter().sum::<usize>() != content.len()
        || sizes
            .iter()
            .zip(&after)
            .any(|(size, again)| size.to_string().as_bytes() != *again)
    {
        return None;
    }
    let mut out = Batch {
        whole: Vec::new(),
        big: Vec::new(),
        deferred: Vec::new(),
    };
    let mut sizes = sizes.into_iter();
    let mut at = 0usize;
    for (path, flag) in batch.iter().zip(flags) {
        match flag {
            b"1" => {
                let size = sizes.next()?;
                out.whole.push((path, &content[at..at + size]));
                at += size;
            }
            b"2" => out.big.push(path),
            b"3" => out.deferred.push(path),
            _ => {}
        }
    }
    Some(out)
}

/// Hands the chunks of a streamed grep candidate to the searcher on its blocking thread: the
/// end of the channel is the end of the file.
struct ChunkReader {
    chunks: tokio::sync::mpsc::Receiver<Vec<u8>>,
    current: Vec<u8>,
    at: usize,
}

impl std::io::Read for ChunkReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.at >= self.current.len() {
            match self.chunks.blocking_recv() {
                Some(chunk) => {
                    self.current = chunk;
                    self.at = 0;
                }
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len() - self.at);
        buf[..n].copy_from_slice(&self.current[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// The `WriteMode` as the script's flag, and the version a conditional write carries.
fn mode_flag(mode: &WriteMode) -> (&'static str, Option<&Version>) {
    match mode {
        WriteMode::CreateOnly => ("c", None),
        WriteMode::Overwrite => ("o", None),
        WriteMode::IfVersion(version) => ("v", Some(version)),
    }
}

/// What the target's `rw` says after a window of a big file (its last line): how it found
/// the window's start.
#[derive(Debug, Clone, PartialEq, Eq)]
struct WindowFound {
    /// The target's clock (seconds) just after the stamp was taken; `None` when not read (the
    /// file still had the identity its marks are filed under) or not known.
    now: Option<i64>,
    /// The file's ctime as the target shows it: seconds, or `D` and `ls --full-time`'s time.
    ctime: String,
    /// Line feeds before `byte`: the window's line feeds before it when it starts there, fewer
    /// when the file ended first (then all of the file's).
    lines: u64,
    /// Where the window starts (a line start), or the end of the file.
    byte: u64,
    /// The line start the server sent was not one: the file changed under its stamp.
    stale: bool,
    /// The line start the target began at (0: the file's start).
    from: u64,
    /// Lines the target read through to find the window's start.
    passed: u64,
    /// The file ended before the window, and its last line has no line feed (a line more
    /// than `lines`).
    partial_last: bool,
}

impl WindowFound {
    fn parse(info: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(trimmed(info)).ok()?;
        let fields: Vec<&str> = text.split(' ').collect();
        let [now, ctime, lines, byte, state, from, passed, partial] = fields.as_slice() else {
            return None;
        };
        Some(Self {
            now: now.parse().ok(),
            ctime: (*ctime).to_owned(),
            lines: lines.parse().ok()?,
            byte: byte.parse().ok()?,
            stale: match *state {
                "k" => false,
                "x" => true,
                _ => return None,
            },
            from: from.parse().ok()?,
            passed: passed.parse().ok()?,
            partial_last: match *partial {
                "0" => false,
                "1" => true,
                _ => return None,
            },
        })
    }
}

/// The length of the first `limit` lines of a window as the target printed it, when each is
/// whole (none cut at 256 KiB, no NUL byte a `cut` could have stopped at) and another line
/// follows them (so the last one's line feed is the file's, not one `cut` added at the end):
/// where the line after them starts.
fn whole_lines_length(raw: &[u8], limit: usize) -> Option<u64> {
    if memchr::memchr(0, raw).is_some() {
        return None;
    }
    let mut at = 0usize;
    for _ in 0..limit {
        let end = memchr::memchr(b'\n', raw.get(at..)?)?;
        if end >= WINDOW_LINE_BYTES {
            return None;
        }
        at += end + 1;
    }
    (at < raw.len()).then_some(at as u64)
}

/// The most bytes of one line a window of a big file carries (`cut -b 1-262144` on the target).
const WINDOW_LINE_BYTES: usize = 256 * 1024;

/// The lines of a window the target printed: `limit` at most, CR of CRLF dropped, each decoded
/// as `decoding` says (a UTF-8 BOM dropped from the file's first line); whether more followed;
/// whether any line did not decode.
fn window_lines(
    bytes: &[u8],
    first_line: bool,
    limit: usize,
    decoding: StreamedLines,
) -> (Vec<String>, bool, bool) {
    let mut raw: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
    if raw.last().is_some_and(|l| l.is_empty()) {
        raw.pop();
    }
    let has_more = raw.len() > limit;
    raw.truncate(limit);
    let mut lossy = false;
    let lines = raw
        .into_iter()
        .enumerate()
        .map(|(index, line)| {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let (text, undecoded) = decoding.decode(line, index == 0 && first_line);
            lossy |= undecoded;
            text
        })
        .collect();
    (lines, has_more, lossy)
}

/// A file of a shell mount written piece by piece (see `script`: `ub`, `ua`, `uf`, `ux`): a
/// temporary file beside the destination on the target, each chunk appended and its length
/// checked, renamed into place under the write's mode at the end. Dropped without `finish` or
/// `abort` (the process killed), the hidden temporary file stays on the target.
#[derive(Debug)]
struct ShellUpload<'a> {
    backend: &'a ShellBackend,
    path: VirtualPath,
    mode: WriteMode,
    /// The temporary file's path on the target, as `ub` printed it; `None` once ended.
    temp: Option<String>,
    /// Bytes appended.
    size: u64,
    /// The content hash of what was appended, while it is no more than [`HASHED_SIZE_LIMIT`].
    hasher: Option<ContentHasher>,
}

impl ShellUpload<'_> {
    fn temp(&self) -> Result<&str> {
        self.temp.as_deref().ok_or_else(|| Error::Io {
            path: self.path.clone(),
            message: "the upload already ended".to_owned(),
        })
    }
}

#[async_trait]
impl Upload for ShellUpload<'_> {
    async fn append(&mut self, chunk: &[u8]) -> Result<()> {
        if let Some(hasher) = &mut self.hasher {
            if hasher.bytes() + chunk.len() as u64 > HASHED_SIZE_LIMIT {
                self.hasher = None;
            } else {
                hasher.push(chunk);
            }
        }
        let total = self.size + chunk.len() as u64;
        let frame = Frame::call("ua")
            .arg(chunk.len())
            .arg(total)
            .path(self.temp()?)
            .raw(chunk);
        let reply = self.backend.call(frame).await?;
        if reply.status != 0 {
            return Err(self.backend.failure(&self.path, &reply));
        }
        self.size = total;
        Ok(())
    }

    async fn finish(mut self: Box<Self>) -> Result<WriteOutcome> {
        let (flag, expected) = mode_flag(&self.mode);
        let mut frame = Frame::call("uf").path(relative(&self.path)).arg(flag);
        if let Some(version) = expected {
            frame = frame.version(version.as_str());
        }
        let frame = frame.path(self.temp()?);
        let reply = {
            let _lock = self.backend.lock(&self.path).await;
            self.backend.call(frame).await?
        };
        // `uf` removed the temporary file, or renamed it into place.
        self.temp = None;
        if reply.status != 0 {
            return Err(self.backend.failure(&self.path, &reply));
        }
        let mut lines = reply.stdout.split(|b| *b == b'\n');
        let existed = lines.next().map(trimmed) == Some(b"1".as_slice());
        let meta = lines.next().and_then(|m| Meta::parse(trimmed(m)));
        let version = match (self.hasher.take(), meta) {
            (Some(hasher), _) if self.size <= HASHED_SIZE_LIMIT => hasher.version(),
            (_, Some(meta)) => meta.identity_version(),
            (_, None) => return Err(malformed(&self.path)),
        };
        Ok(WriteOutcome {
            version,
            created: !existed,
        })
    }

    async fn abort(mut self: Box<Self>) {
        if let Some(temp) = self.temp.take() {
            let frame = Frame::call("ux").path(&temp);
            if let Err(error) = self.backend.call(frame).await {
                tracing::warn!(%error, "could not remove the temporary file of an upload on the target");
            }
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
        let reply = self.call(frame).await?;
        if reply.status != 0 {
            return Err(self.failure(path, &reply));
        }
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
        refuse_temp_name(path)?;
        // The window's first line and one past its last (to see more), counted from 1.
        let first = window.offset.saturating_add(1).min(1 << 60);
        let past = first.saturating_add(window.limit).min(1 << 61);
        let at = relative(path);
        let mut frame = Frame::call("rw").path(at).arg(first).arg(past);
        // The nearest remembered line start at or before the window, with the identity it is
        // filed under: the target seeks there when the file still has that identity.
        if let Some((key, mark)) = self.marks.best(at, first as u64 - 1) {
            frame = frame.arg(mark.byte).arg(mark.lines).line_payload(&key);
        }
        let reply = self.call(frame).await?;
        if reply.status != 0 {
            return Err(self.failure(path, &reply));
        }
        let parts = reply.parts(4);
        let (Some(meta), Some(rest)) = (
            parts.first().and_then(|m| Meta::parse(trimmed(m))),
            parts.get(1),
        ) else {
            return Err(self.malformed(path, "read_file"));
        };
        if meta.size <= HASHED_SIZE_LIMIT {
            // The whole file: everything after the stamp, separators included.
            let whole = reply.parts(2);
            let rest = whole.get(1).copied().unwrap_or(rest);
            // `rw` prints at most one byte past the limit: the file grew past it while read.
            if rest.len() as u64 > HASHED_SIZE_LIMIT {
                return Err(Error::Io {
                    path: path.clone(),
                    message: "the file grew past 8 MiB while it was read; retry".to_owned(),
                });
            }
            let version = Version::of_content(rest);
            return Ok(view_of_bytes(rest, version, window).with_modified(meta.modified()));
        }
        let version = meta.identity_version();
        let (Some(head), Some(lines)) = (parts.get(1), parts.get(2)) else {
            return Err(self.malformed(path, "read_file"));
        };
        // The disk mount's decision from the same head (`head -c 8192`): binary or UTF-16 is
        // described; else each line is decoded on its own, in a legacy encoding when the head
        // is in one.
        let whole = head.len() as u64 == meta.size;
        let decoding = content::streamed_lines(head, whole);
        let found = parts.get(3).and_then(|info| WindowFound::parse(info));
        if let Some(found) = &found {
            // The printed lines of a binary or UTF-16 file say nothing of where its lines end:
            // busybox `cut` ends a line at a NUL byte as well (and no NUL is left to see).
            let raw = decoding.is_some().then_some(*lines);
            let (stamp, wanted) = (trimmed(parts[0]), first as u64 - 1);
            self.learn_marks(at, stamp, found, raw, wanted, window.limit);
        }
        let Some(decoding) = decoding else {
            return Ok(FileView::Binary(BinarySample {
                modified: meta.modified(),
                size: meta.size,
                head: head.to_vec(),
                version,
            }));
        };
        let (lines, has_more, lossy) =
            window_lines(lines, window.offset == 0, window.limit, decoding);
        let total_lines = if lines.is_empty() && window.offset > 0 {
            // No line at the window's start: the file's lines were all passed on the way (a
            // last line without a line feed counts, as on a disk mount).
            match &found {
                Some(found) => usize::try_from(found.lines + u64::from(found.partial_last)).ok(),
                None => {
                    let reply = self.call(Frame::call("wl").path(at)).await?;
                    std::str::from_utf8(trimmed(&reply.stdout))
                        .ok()
                        .and_then(|n| n.parse::<usize>().ok())
                }
            }
        } else {
            None
        };
        Ok(FileView::Text(TextWindow {
            modified: meta.modified(),
            lines,
            total_lines,
            has_more,
            lossy,
            encoding: decoding.encoding(),
            size: meta.size,
            version,
        }))
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
        let reply = self.call(frame).await?;
        if reply.status != 0 {
            return Err(self.failure(path, &reply));
        }
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
        let reply = self.call(frame).await?;
        if reply.status != 0 {
            return Err(self.failure(path, &reply));
        }
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
        if query.pattern.line_matcher().is_none() {
            // A pattern that can only match a line break never matches within one line.
            return Ok(Vec::new());
        }
        let Some(meta) = self.meta(&query.dir).await? else {
            return Ok(Vec::new());
        };
        let candidates = match meta.kind() {
            Some(EntryKind::File) => vec![query.dir.clone()],
            Some(EntryKind::Directory) => match self.candidates(query).await? {
                Some(paths) => paths,
                None => self
                    .files_under(&query.dir, &query.control)
                    .await?
                    .into_iter()
                    .map(|entry| entry.path)
                    .collect(),
            },
            None => return Ok(Vec::new()),
        };
        let candidates: Vec<VirtualPath> = candidates
            .into_iter()
            .filter(|path| {
                query
                    .file_filter
                    .as_ref()
                    .is_none_or(|filter| filter.matches_path(path, &query.dir))
            })
            .collect();
        let mut out = GrepResults::new(query.collect);
        // Small candidates are read back in batches of at most GREP_BATCH_BYTES, one call each
        // (a call per file costs a round trip per file); a big one, a name with a newline, or
        // a file that changed while its batch was read is streamed in chunks on its own.
        let (plain, mut streamed): (Vec<VirtualPath>, Vec<VirtualPath>) = candidates
            .into_iter()
            .partition(|path| !path.as_str().contains('\n'));
        let mut queue: std::collections::VecDeque<VirtualPath> = plain.into();
        while !queue.is_empty() {
            if query.control.stopped() {
                break;
            }
            let batch: Vec<VirtualPath> = queue.drain(..queue.len().min(GREP_READ_BATCH)).collect();
            let mut frame = Frame::call("rm_")
                .arg(batch.len())
                .arg(GREP_WHOLE_LIMIT)
                .arg(GREP_BATCH_BYTES);
            for path in &batch {
                frame = frame.line_payload(relative(path));
            }
            let reply = self.call(frame).await?;
            if reply.status != 0 {
                return Err(self.failure(&query.dir, &reply));
            }
            let Some(read) = split_batch(&batch, &reply) else {
                // A file changed size while the batch was read.
                streamed.extend(batch);
                continue;
            };
            for (path, content) in read.whole {
                if let Some(found) = grep_file(path, content, query) {
                    out.push(found);
                }
            }
            streamed.extend(read.big.into_iter().cloned());
            for path in read.deferred.into_iter().rev() {
                queue.push_front(path.clone());
            }
        }
        for path in streamed {
            if query.control.stopped() {
                break;
            }
            if let Some(found) = self.grep_streamed(&path, query).await? {
                out.push(found);
            }
        }
        Ok(out.finish())
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
        let reply = self.call(frame).await?;
        if reply.status != 0 {
            return Err(self.failure(path, &reply));
        }
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
        let reply = self.call(frame).await?;
        if reply.status != 0 {
            return Err(self.failure(path, &reply));
        }
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
        let reply = self.call(frame).await?;
        if reply.status != 0 {
            return Err(self.failure(path, &reply));
        }
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
    #[test]
    fn glob_batches_need_no_marker() {
        let stream = b"./a\0./b\nc\0\08000 1 2 3 4 5\nX\n./d\0\08000 9 9 9 9 9\n";
        let batches = super::glob_batches(stream).unwrap();
        assert_eq!(batches.len(), 2);
        assert_eq!(batches[0].0, b"./a\0./b\nc\0");
        assert_eq!(batches[0].1, b"8000 1 2 3 4 5\nX\n");
        assert_eq!(batches[1].0, b"./d\0");
        assert_eq!(super::glob_batches(b"").unwrap().len(), 0);
        // Cut short: a meta line missing, or no end of the names.
        assert!(super::glob_batches(b"./a\0./b\0\0only one\n").is_none());
        assert!(super::glob_batches(b"./a\0./b").is_none());
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
