//! Our own temporary files on disk: how they are named (`TEMP_PREFIX<pid>-<n>-<run>`), the names
//! agents may not use, the record of those in flight, and the sweep that removes those a killed
//! writer left behind.
//!
//! Writers (`write`) and undo's aside directory (`aside`) take their names from here; listings
//! and walks hide every name [`is_temp_name`] accepts.
//!
//! # Finding what a killed writer left, without walking the mount (issue 31)
//! Before a writer creates a temporary file in a directory, it makes sure the directory is named
//! in this process's **record** of temporary files in flight ([`InFlight`]): a file at the
//! mount root, `.mountfs-tmp-inflight-<pid>-<n>-<run>`, created when the first temporary file of a
//! burst is about to be made and removed when the last one of the burst is gone (renamed over its
//! target or unlinked), `flock`ed by its process meanwhile. A process killed mid-write leaves
//! its record behind. When the mount is opened ([`sweep_stale`], synchronously, before any tool
//! can touch it), the root is listed, and each record left by a process that is gone names the
//! few directories to look in: only names of exactly our form, of that process, are removed
//! there. Temporary files at the root itself (writes of root files, undo's aside directories)
//! are found by the same listing. The cost is the root's listing plus the directories a killed
//! process was writing in, whatever the size of the tree.
//!
//! A writer's temporary file is never removed while it runs: its record is locked while the
//! file exists, and a record is taken only if its lock is free, it is still linked (not
//! removed by its owner between our open and our lock), and no process with its pid is alive;
//! a temporary file at the root only if no process with its pid is alive and no live record
//! carries that pid (a writer in another pid namespace).
//!
//! Each directory a record names is tagged with the server's key (an HMAC over the mount, the
//! record's name and the directory, see [`super::trust`]): a record an agent planted (a
//! sandboxed `execute` can write such a name in a writable mount) or altered names nothing the
//! sweep looks in; it is logged and left for the operator (issue 41). Temporary files at the
//! root are taken by their name alone: they are entries beneath the root, removed without
//! following a link, that no tool can make.
//!
//! Limits: a record is written, not `fsync`ed (its own fsync would add a disk flush to every
//! write). A kill of the process (`SIGKILL`, OOM) loses nothing: the page cache keeps the
//! record. After a power cut, a temporary file the record did not reach may stay (invisible to
//! every listing and search; ext4's default ordered mode writes the record with the temporary
//! file's own fsync). Temporary files left by a mountfs older than the record are not looked for.

use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use cap_std::fs::Dir;
use rustix::fs::{AtFlags, FileType, FlockOperation, Mode, OFlags};

use super::trust::{Seal, TAG_CHARS};
use crate::ground::path::VirtualPath;
use crate::storage::backend::{Error, Result};

/// Names of temporary files start with this; listings never show them and the sweep at start
/// removes those whose writer is gone.
pub const TEMP_PREFIX: &str = ".mountfs-tmp-";

/// Names of records of temporary files in flight start with this (a temporary name: hidden;
/// and not of the `<pid>-<n>-<run>` form, so no sweep takes it for a temporary file).
pub(super) const RECORD_PREFIX: &str = ".mountfs-tmp-inflight-";

/// The most of a record the sweep reads (a record names each directory once per burst).
const MAX_RECORD_BYTES: u64 = 16 * 1024 * 1024;

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Hex characters of [`run_id`].
const RUN_CHARS: usize = 16;

/// 64 random bits drawn once per process (hex), the last part of every name this process
/// gives its temporary files, records and journals: a pid and a counter repeat from one run to
/// the next (a container's server is often pid 1 at every start), so without them a record
/// left by an earlier run could be taken for one of this run (attack review of issue 41).
pub(super) fn run_id() -> &'static str {
    static RUN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    RUN.get_or_init(|| hex::encode(rand::random::<[u8; RUN_CHARS / 2]>()))
}

/// `<pid>-<n>-<run>`: a fresh name of this process (after a prefix).
pub(super) fn unique_suffix(counter: &AtomicU64) -> String {
    let n = counter.fetch_add(1, Ordering::Relaxed);
    format!("{}-{n}-{}", std::process::id(), run_id())
}

/// Whether a directory entry is one of our temporary files, or any name reserved for them
/// (`.mountfs-tmp*`, [`crate::ground::path::RESERVED_PREFIX`]): listings and walks never show one.
pub(super) fn is_temp_name(name: &OsStr) -> bool {
    name.as_encoded_bytes()
        .starts_with(crate::ground::path::RESERVED_PREFIX.as_bytes())
}

pub(super) fn temp_name() -> OsString {
    OsString::from(format!("{TEMP_PREFIX}{}", unique_suffix(&TEMP_COUNTER)))
}

/// `<pid>-<n>-<run>` after `prefix` (or `<pid>-<n>`, as releases before the run part named
/// them): the pid, when the rest is exactly that.
fn pid_after(name: &OsStr, prefix: &str) -> Option<u32> {
    let rest = name.to_str()?.strip_prefix(prefix)?;
    let (pid, rest) = rest.split_once('-')?;
    let counter = match rest.split_once('-') {
        Some((counter, run)) => {
            if run.len() != RUN_CHARS
                || !run.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
            {
                return None;
            }
            counter
        }
        None => rest,
    };
    if !counter.bytes().all(|b| b.is_ascii_digit()) || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    counter.parse::<u64>().ok()?;
    pid.parse().ok()
}

/// The writer process a temporary file names, when it parses.
pub(super) fn temp_owner(name: &OsStr) -> Option<u32> {
    pid_after(name, TEMP_PREFIX)
}

/// The process a record belongs to, when its name parses.
fn record_owner(name: &OsStr) -> Option<u32> {
    pid_after(name, RECORD_PREFIX)
}

/// Refuses a name of the form our temporary files take: such a file would be hidden from
/// listings and could be swept away.
pub(super) fn refuse_temp_name(name: &OsStr, path: &VirtualPath) -> Result<()> {
    crate::storage::backend::refuse_reserved(path)?;
    if is_temp_name(name) {
        return Err(Error::Unsupported {
            path: path.clone(),
            reason: format!(
                "names starting with {TEMP_PREFIX} are reserved for mountfs's own temporary files; choose another name"
            ),
        });
    }
    Ok(())
}

/// This process's record of the directories holding its temporary files in flight, for one
/// mount root (see the module doc).
#[derive(Debug)]
pub(super) struct InFlight {
    state: Mutex<State>,
    /// What each line of the record is tagged with.
    seal: Seal,
}

#[derive(Debug, Default)]
struct State {
    /// The record, while temporary files are in flight.
    record: Option<Record>,
    /// Writers between [`InFlight::begin`] and the end of their [`InFlightGuard`].
    writers: usize,
    /// The directories the record names.
    dirs: HashSet<PathBuf>,
    /// A record could not be made once already (said once in the log).
    warned: bool,
}

#[derive(Debug)]
struct Record {
    /// Open for writing and `flock`ed.
    file: std::fs::File,
    name: OsString,
}

impl InFlight {
    /// No temporary file in flight yet; lines will be tagged with `seal`.
    pub(super) fn new(seal: Seal) -> Self {
        Self {
            state: Mutex::default(),
            seal,
        }
    }

    /// Records that a temporary file is about to be made in `dir` (root-relative, canonical),
    /// beneath `root`; the record lasts until the guard is dropped, which the caller does once
    /// the temporary file is renamed or removed. A record that cannot be written (a read-only
    /// root above a writable directory) does not stop the write: its temporary file would only
    /// be left, invisible, after a crash; the log says so once.
    pub(super) fn begin<'a>(&'a self, root: &'a Dir, dir: &Path) -> InFlightGuard<'a> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.writers += 1;
        if let Err(error) = state.note(root, dir, &self.seal)
            && !state.warned
        {
            state.warned = true;
            tracing::warn!(%error, "could not record a temporary file at the mount root; one left by a crash would not be removed at the next start");
        }
        InFlightGuard {
            in_flight: self,
            root,
        }
    }

    fn end(&self, root: &Dir) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.writers = state.writers.saturating_sub(1);
        if state.writers > 0 {
            return;
        }
        state.dirs.clear();
        if let Some(record) = state.record.take() {
            // Unlinked while still locked: a sweep that opened it meanwhile finds it unlinked.
            let _ = rustix::fs::unlinkat(root, &record.name, AtFlags::empty());
        }
    }
}

impl State {
    /// Makes sure the record exists and names `dir`.
    fn note(&mut self, root: &Dir, dir: &Path, seal: &Seal) -> io::Result<()> {
        if self.dirs.contains(dir) {
            return Ok(());
        }
        let mut record = match self.record.take() {
            Some(record) => record,
            None => Record::create(root)?,
        };
        let dir_bytes = dir.as_os_str().as_bytes();
        let tag = seal.tag_of(b"inflight", record.name.as_bytes(), dir_bytes);
        let mut line = Vec::with_capacity(TAG_CHARS + dir_bytes.len() + 1);
        line.extend_from_slice(tag.as_bytes());
        line.extend_from_slice(dir_bytes);
        line.push(0);
        let written = record.file.write_all(&line);
        self.record = Some(record);
        written?;
        self.dirs.insert(dir.to_path_buf());
        Ok(())
    }
}

impl Record {
    fn create(root: &Dir) -> io::Result<Self> {
        let name = OsString::from(format!("{RECORD_PREFIX}{}", unique_suffix(&TEMP_COUNTER)));
        let fd = rustix::fs::openat(
            root,
            &name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )?;
        // Locked from before anything is written to it: a sweep finding it empty and unlocked
        // in between still sees this process alive.
        rustix::fs::flock(&fd, FlockOperation::LockExclusive)?;
        Ok(Self {
            file: std::fs::File::from(fd),
            name,
        })
    }
}

/// A temporary file in flight (see [`InFlight::begin`]).
#[derive(Debug)]
pub(super) struct InFlightGuard<'a> {
    in_flight: &'a InFlight,
    root: &'a Dir,
}

impl Drop for InFlightGuard<'_> {
    fn drop(&mut self) {
        self.in_flight.end(self.root);
    }
}

/// Removes what writers that are gone left (see the module doc): temporary files and undo's
/// aside directories at the root, and the temporary files in the directories their records
/// name; then the records. Returns how many temporary files and directories were removed.
pub(super) fn sweep_stale(root: &Dir, seal: &Seal) -> usize {
    let Ok(entries) = root.entries() else {
        return 0;
    };
    let names: Vec<OsString> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name())
        .filter(|n| is_temp_name(n))
        .collect();
    let own = std::process::id();
    // Records first: a locked one is a live writer's, whose pid protects its files below.
    let mut live: HashSet<u32> = HashSet::new();
    let mut stale = Vec::new();
    for name in &names {
        let Some(pid) = record_owner(name) else {
            continue;
        };
        match open_stale_record(root, name, pid, own) {
            Some(file) => stale.push((name, pid, file)),
            None => {
                live.insert(pid);
            }
        }
    }
    let mut removed = 0;
    for name in &names {
        let Some(pid) = temp_owner(name) else {
            continue;
        };
        if pid == own || live.contains(&pid) || process_alive(pid) {
            continue;
        }
        let is_dir = root.symlink_metadata(name).is_ok_and(|m| m.is_dir());
        let gone = if is_dir {
            root.remove_dir_all(name)
        } else {
            root.remove_file(name)
        };
        if gone.is_ok() {
            removed += 1;
        }
    }
    for (name, pid, file) in stale {
        if live.contains(&pid) {
            continue;
        }
        match sweep_record(root, seal, name, pid, file) {
            Some(count) => {
                removed += count;
                let _ = rustix::fs::unlinkat(root, name.as_os_str(), AtFlags::empty());
            }
            None => {
                tracing::warn!(record = %format!("/{}", name.to_string_lossy()), "a record of temporary files at the mount root was left as it is: it names directories this server did not write into it; mountfs acts only on records it can prove it wrote. If no mountfs is running on this directory, remove it yourself");
            }
        }
    }
    removed
}

/// The record `name` open and locked, if its process is gone (see the module doc).
fn open_stale_record(root: &Dir, name: &OsStr, pid: u32, own: u32) -> Option<std::fs::File> {
    if pid == own || process_alive(pid) {
        return None;
    }
    let fd = rustix::fs::openat(
        root,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive).ok()?;
    let stat = rustix::fs::fstat(&fd).ok()?;
    // Unlinked by its owner between our open and our lock: it was live, and is gone.
    if stat.st_nlink == 0 || FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return None;
    }
    Some(std::fs::File::from(fd))
}

/// Removes, in each directory the record names, the temporary files of process `pid`.
/// `None`, touching nothing, when a line's tag does not verify.
fn sweep_record(
    root: &Dir,
    seal: &Seal,
    name: &OsStr,
    pid: u32,
    file: std::fs::File,
) -> Option<usize> {
    let mut bytes = Vec::new();
    if file.take(MAX_RECORD_BYTES).read_to_end(&mut bytes).is_err() {
        return Some(0);
    }
    // Each line is a tag and a directory, ended by a NUL (a last one the kill cut before its
    // NUL is still looked in); every one must verify before any is looked in.
    let mut dirs = Vec::new();
    for line in bytes.split(|b| *b == 0).filter(|d| !d.is_empty()) {
        let (tag, dir) = line.split_at_checked(TAG_CHARS)?;
        if !seal.verifies(b"inflight", name.as_bytes(), dir, tag) {
            return None;
        }
        dirs.push(dir);
    }
    let mut removed = 0;
    for dir in dirs {
        let dir = Path::new(OsStr::from_bytes(dir));
        let Ok(handle) = root.open_dir(dir) else {
            continue;
        };
        let Ok(entries) = handle.entries() else {
            continue;
        };
        for entry in entries.filter_map(|e| e.ok()) {
            let name = entry.file_name();
            if temp_owner(&name) != Some(pid) || entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            if handle.remove_file(&name).is_ok() {
                removed += 1;
            }
        }
    }
    Some(removed)
}

/// Whether a process with this id exists (signal 0 probes without sending anything).
fn process_alive(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return false;
    };
    !matches!(
        rustix::process::test_kill_process(pid),
        Err(rustix::io::Errno::SRCH)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_names_carry_the_writer_pid() {
        let name = temp_name();
        assert!(is_temp_name(&name));
        assert_eq!(temp_owner(&name), Some(std::process::id()));
        assert!(!is_temp_name(OsStr::new("notes.md")));
        assert_eq!(temp_owner(OsStr::new(".mountfs-tmp-inflight-12-3")), None);
        assert_eq!(
            record_owner(OsStr::new(".mountfs-tmp-inflight-12-3")),
            Some(12)
        );
        assert_eq!(temp_owner(OsStr::new(".mountfs-tmp-12-3.json")), None);
        assert_eq!(temp_owner(OsStr::new(".mountfs-tmp-+12-3")), None);
        // 64 random bits of the run end every name: a pid and a counter repeat across runs.
        let rest = name.to_str().unwrap().strip_prefix(TEMP_PREFIX).unwrap();
        let parts: Vec<&str> = rest.split('-').collect();
        assert_eq!(parts.len(), 3, "<pid>-<n>-<run>: {rest}");
        assert_eq!(parts[2], run_id());
        assert_eq!(run_id().len(), 16);
        assert_eq!(
            temp_owner(OsStr::new(".mountfs-tmp-12-3-0123456789abcdef")),
            Some(12)
        );
        assert_eq!(temp_owner(OsStr::new(".mountfs-tmp-12-3-0123")), None);
        assert_eq!(
            record_owner(OsStr::new(".mountfs-tmp-inflight-12-3-0123456789abcdef")),
            Some(12)
        );
    }

    /// The id of a process that has exited.
    fn gone_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(!process_alive(pid));
        pid
    }

    /// A writer that is gone, and the path of its temporary file in `host/a` (made here).
    fn gone_writers_temp(host: &Path) -> (u32, std::path::PathBuf) {
        std::fs::create_dir_all(host.join("a")).unwrap();
        let pid = gone_pid();
        (pid, host.join(format!("a/{TEMP_PREFIX}{pid}-1")))
    }

    fn open_root(dir: &Path) -> Dir {
        Dir::open_ambient_dir(dir, cap_std::ambient_authority()).unwrap()
    }

    /// The seal of the mount at `dir`, with this process's key.
    fn seal(dir: &Path) -> Seal {
        Seal::new(super::super::trust::process_key(), dir)
    }

    /// A record's content naming `dirs` as the writer tags them (a last one without its NUL
    /// when `cut`).
    fn record_lines(dir: &Path, record: &Path, dirs: &[&str], cut: bool) -> Vec<u8> {
        let name = record.file_name().unwrap().as_bytes();
        let mut out = Vec::new();
        for (k, one) in dirs.iter().enumerate() {
            out.extend_from_slice(
                seal(dir)
                    .tag_of(b"inflight", name, one.as_bytes())
                    .as_bytes(),
            );
            out.extend_from_slice(one.as_bytes());
            if !(cut && k + 1 == dirs.len()) {
                out.push(0);
            }
        }
        out
    }

    fn root_names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// A killed writer's record names where its temporary files are: those go, with the
    /// record, and so do its files at the root (a temporary file, undo's aside directory).
    /// A directory no record names is not looked in (the start-up walked the whole tree
    /// before issue 31): its stale file stays, invisible. Nothing but names of exactly our
    /// form, of that process, is touched.
    #[test]
    fn the_sweep_looks_only_where_a_gone_writers_record_says() {
        let dir = tempfile::tempdir().unwrap();
        let host = dir.path();
        std::fs::create_dir_all(host.join("a/b")).unwrap();
        std::fs::create_dir_all(host.join("c")).unwrap();
        let pid = gone_pid();
        let own = std::process::id();
        let recorded = host.join(format!("a/b/{TEMP_PREFIX}{pid}-7"));
        let unrecorded = host.join(format!("c/{TEMP_PREFIX}{pid}-8"));
        let ours_alive = host.join(format!("a/b/{TEMP_PREFIX}{own}-9"));
        let users = host.join(format!("a/b/{TEMP_PREFIX}notes.md"));
        let other_pid = host.join(format!("a/b/{TEMP_PREFIX}{}-1", pid + 1));
        for file in [&recorded, &unrecorded, &ours_alive, &users, &other_pid] {
            std::fs::write(file, "x").unwrap();
        }
        std::fs::write(host.join(format!("{TEMP_PREFIX}{pid}-3")), "x").unwrap();
        std::fs::create_dir(host.join(format!("{TEMP_PREFIX}{pid}-4"))).unwrap();
        std::fs::write(
            host.join(format!("{TEMP_PREFIX}{pid}-4/{TEMP_PREFIX}{pid}-5")),
            "x",
        )
        .unwrap();
        std::fs::write(host.join("kept.txt"), "x").unwrap();
        let record = host.join(format!("{RECORD_PREFIX}{pid}-0"));
        // The last directory was cut short by the kill (no NUL): still looked in.
        std::fs::write(
            &record,
            record_lines(host, &record, &["a/b", "nowhere", "a/b"], true),
        )
        .unwrap();

        let removed = sweep_stale(&open_root(host), &seal(host));

        assert!(!recorded.exists(), "the recorded directory was not swept");
        assert!(!record.exists(), "the record of a gone writer stayed");
        assert_eq!(root_names(host), ["a", "c", "kept.txt"]);
        assert!(
            unrecorded.exists(),
            "a directory no record names was looked in"
        );
        assert!(ours_alive.exists() && users.exists());
        assert!(
            other_pid.exists(),
            "another process's temporary file was taken"
        );
        assert_eq!(removed, 3);
    }

    /// A record whose lock is held belongs to a live writer, even one whose pid this process
    /// cannot see (another pid namespace): neither its files nor the root files of its pid go.
    #[test]
    fn a_locked_record_keeps_its_writers_files() {
        let dir = tempfile::tempdir().unwrap();
        let host = dir.path();
        let (pid, temp) = gone_writers_temp(host);
        let at_root = host.join(format!("{TEMP_PREFIX}{pid}-2"));
        std::fs::write(&temp, "x").unwrap();
        std::fs::write(&at_root, "x").unwrap();
        let record = host.join(format!("{RECORD_PREFIX}{pid}-0"));
        std::fs::write(&record, record_lines(host, &record, &["a"], false)).unwrap();
        let held = std::fs::File::open(&record).unwrap();
        rustix::fs::flock(&held, FlockOperation::LockExclusive).unwrap();

        assert_eq!(sweep_stale(&open_root(host), &seal(host)), 0);
        assert!(temp.exists() && at_root.exists() && record.exists());

        drop(held);
        assert_eq!(sweep_stale(&open_root(host), &seal(host)), 2);
        assert_eq!(root_names(host), ["a"]);
        assert!(!temp.exists());
    }

    /// The record exists, locked and naming each directory once, exactly while a temporary
    /// file is in flight.
    #[test]
    fn the_record_lasts_while_temporary_files_are_in_flight() {
        let dir = tempfile::tempdir().unwrap();
        let host = dir.path();
        let root = open_root(host);
        let in_flight = InFlight::new(seal(host));
        let first = in_flight.begin(&root, Path::new("a"));
        let second = in_flight.begin(&root, Path::new("."));
        let third = in_flight.begin(&root, Path::new("a"));
        let names = root_names(host);
        assert_eq!(names.len(), 1, "{names:?}");
        assert_eq!(
            record_owner(OsStr::new(&names[0])),
            Some(std::process::id())
        );
        let record = host.join(&names[0]);
        assert_eq!(
            std::fs::read(&record).unwrap(),
            record_lines(host, &record, &["a", "."], false)
        );
        let probe = std::fs::File::open(&record).unwrap();
        assert_eq!(
            rustix::fs::flock(&probe, FlockOperation::NonBlockingLockExclusive),
            Err(rustix::io::Errno::WOULDBLOCK)
        );
        // A sweep meanwhile leaves it: its writer is alive.
        assert_eq!(sweep_stale(&root, &seal(host)), 0);
        drop(first);
        drop(third);
        assert!(record.exists());
        drop(second);
        assert!(root_names(host).is_empty(), "{:?}", root_names(host));
        // The next burst makes a new one.
        let again = in_flight.begin(&root, Path::new("b"));
        assert_eq!(root_names(host).len(), 1);
        drop(again);
        assert!(root_names(host).is_empty());
    }

    /// Issue 41: a record an agent wrote (no tag, a made-up tag, or a genuine line with
    /// another record's name) names nothing: no file is removed where it points, and the
    /// record stays for the operator.
    #[test]
    fn a_record_that_does_not_verify_is_left_and_names_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let host = dir.path();
        let (pid, temp) = gone_writers_temp(host);
        let other = host.join(format!("{RECORD_PREFIX}{pid}-9"));
        let forged: [Vec<u8>; 3] = [
            b"a\0".to_vec(),
            [b"ab".repeat(32), b"a\0".to_vec()].concat(),
            record_lines(host, &other, &["a"], false),
        ];
        for content in forged {
            std::fs::write(&temp, "x").unwrap();
            let record = host.join(format!("{RECORD_PREFIX}{pid}-0"));
            std::fs::write(&record, &content).unwrap();
            assert_eq!(sweep_stale(&open_root(host), &seal(host)), 0);
            assert!(temp.exists(), "{content:?}");
            assert!(record.exists(), "{content:?}");
        }
    }
}
