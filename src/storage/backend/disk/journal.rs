//! The change journal of a disk mount: a change of several files (an `apply_patch`, an overlay
//! `commit`) that a crash of the process — `SIGKILL`, an OOM kill, a power cut — leaves whole
//! or absent, never half done (issues 32 and 33).
//!
//! One journal is one private directory at the mount root, `.mountfs-tmp-journal-<pid>-<n>-<run>`
//! (`<run>`: 64 random bits drawn once per process, so no name repeats from one run to the
//! next; mode 0700; hidden from every listing like our temporary files, and never taken by their
//! sweep: its name is not of their form). In order:
//! 1. **begin**: each file the change will replace or remove is hard-linked into the directory
//!    as `a<index>` (the old inode, so its bytes, mode and owner, kept without copying; a
//!    copy when the file lies on another file system); the plan — every path, whether it
//!    existed, the directories its creation will add — is written to `journal`, fsync'ed, and
//!    the directory and the root are fsync'ed. Nothing has changed yet.
//! 2. the files change, each atomically as every disk write does (temporary file, rename). A
//!    directory the change removes whole (a commit of a directory deleted whole) is moved into
//!    the journal as `d<k>`, after a durable record `d<k>.path` of where it was: whatever it
//!    holds, files no listing shows included, stays there until the decision.
//! 3. **commit**: a `committed` mark is made (fsync'ed), then the directory is removed.
//!
//! At the next start ([`recover`], synchronously when the mount is opened, before any tool can
//! touch it), a journal without its mark is **rolled back**: each directory removed whole is
//! renamed back (the last removed first), each kept file is renamed back
//! over its path (byte-exact, mode kept), each file the change created is removed, each
//! directory it created is removed if empty, the temporary files the dead writer left beside
//! them go; then the directory goes. Every step is idempotent, so a crash during a roll-back
//! is resolved by rolling back again. A journal with its mark is rolled forward: the change
//! stands, only the journal goes.
//!
//! A change over several mounts (a commit over several overlay mounts) has one journal per
//! mount, each naming the change by a random id, and one decision: a record of that id in the
//! server's private data directory (see [`super::trust`]), made by the **primary** journal
//! ([`JournalRole`]). Each mount's recovery looks the decision up there for its own journal
//! and acts only on its own mount, so two mounts end the same way whichever is opened first,
//! or alone. The primary's journal goes last, and only it drops the decision: a secondary
//! never outlives the decision it waits for (after a crash the decision stays, a few bytes,
//! for whichever mount opens later).
//!
//! # What recovery trusts (issue 41)
//! A journal lies in the mount, where an agent may write (a sandboxed `execute`, a tool of an
//! older release, a copy by `mountfs cp`). So recovery acts only on what it can prove this
//! server wrote, and only beneath the mount's root handle:
//! - no path is read from a journal but root-relative components, opened through the root
//!   `Dir` (cap-std: no `..`, no symlink out), and the journal directory is opened without
//!   following a symbolic link;
//! - the journal's `begun` mark, its plan, its `committed` mark and each record of a directory
//!   removed whole carry an HMAC-SHA256 tag ([`super::trust::RecoveryKey`]) over the record's
//!   kind, the mount (the root's canonical host path) and the journal's name — the
//!   `committed` mark's also over the SHA-256 of the plan it decides, so a mark of another
//!   plan under the same name never commits this one: a record that does not verify is not
//!   acted on — the journal is logged (`tracing::warn`, its name under
//!   the mount) and left for the operator, nothing deleted, nothing put back;
//! - a kept file is put back only if it is still the inode the plan recorded, a directory only
//!   if it is still the one its record names;
//! - the decision of a change over several mounts is read only from the data directory.
//!
//! A live journal's directory is `flock`ed by its process: another mountfs serving the same
//! directory never resolves a change still in progress.

use std::ffi::{OsStr, OsString};
use std::io::{self, Write};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use cap_std::fs::{Dir, OpenOptionsExt};
use rustix::fs::{AtFlags, FileType, FlockOperation, Mode, OFlags};
use serde::{Deserialize, Serialize};

use super::resolve::{canonicalize, map_io};
use super::temp::temp_owner;
#[cfg(test)]
use super::trust::RecoveryKey;
use super::trust::{Seal, TAG_CHARS};
use super::write::{DirLock, current_version, refuse_inside_git};
use crate::ground::path::{MAX_PATH_BYTES, VirtualPath};
use crate::storage::backend::{Error, JournalRole, PlannedFile, Result, Version};

/// Names of journal directories start with this (a temporary name: hidden from listings).
pub const JOURNAL_PREFIX: &str = ".mountfs-tmp-journal-";

/// The plan's file inside a journal directory.
const PLAN: &str = "journal";
/// Written while the plan is being made durable, renamed to [`PLAN`].
const PLAN_TEMP: &str = "journal.tmp";
/// The decision: the change stands.
const COMMITTED: &str = "committed";
/// Made (tagged) right after the directory: a journal that never got its plan is provably ours
/// and goes; one without it is not touched.
const BEGUN: &str = "begun";
/// The most bytes of a plan's body this server writes: [`begin`] refuses a change whose plan
/// would be larger (about 60 000 files of ordinary paths; commit such a change in parts). So
/// no genuine plan record is larger than [`MAX_PLAN_RECORD`], and recovery refuses a larger
/// one unread, before any tag is checked (attack review of issue 41: a planted plan must not
/// make the server read hundreds of MiB).
const MAX_PLAN_BYTES: usize = 16 * 1024 * 1024;
/// The most bytes of a plan record: its tag, a newline, its body.
const MAX_PLAN_RECORD: u64 = (TAG_CHARS + 1 + MAX_PLAN_BYTES) as u64;
/// The most bytes of the record of a directory removed whole (`d<k>.path`): its tag, a
/// newline, and the JSON of one path of at most [`MAX_PATH_BYTES`] bytes — each byte at most
/// four characters (`255,`), each of at most `MAX_PATH_BYTES / 2` components three more
/// (`[],`) — and an inode number, with room to spare.
const MAX_MOVED_RECORD: u64 =
    (TAG_CHARS + 1 + 4 * MAX_PATH_BYTES + 3 * (MAX_PATH_BYTES / 2) + 128) as u64;

static JOURNAL_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A fresh journal directory name of this process (never one of an earlier run: see
/// [`super::temp::run_id`]).
pub fn journal_name() -> String {
    format!(
        "{JOURNAL_PREFIX}{}",
        super::temp::unique_suffix(&JOURNAL_COUNTER)
    )
}

/// What a `committed` mark's tag covers beside the journal's name: the SHA-256 of the plan's
/// bytes as written (the body its own tag covers). A mark made for another plan under the same
/// name (a journal of an earlier run, an agent's copy) never commits this one.
fn plan_digest(plan_bytes: &[u8]) -> [u8; 32] {
    use sha2::Digest as _;
    sha2::Sha256::digest(plan_bytes).into()
}

/// A fresh id for a change over several mounts (see [`JournalRole`]).
pub fn change_id() -> String {
    super::trust::change_id()
}

/// The plan as written to disk (after its tag, see the module doc). Paths are root-relative
/// components (bytes, after symlinks inside the root were resolved), so that the roll-back
/// needs nothing but the root handle.
#[derive(Debug, Serialize, Deserialize)]
struct Plan {
    /// The process that made the change (its temporary files are removed on roll-back).
    pid: u32,
    /// The change over several mounts this journal is one of: its decision is kept in the
    /// server's data directory under this id. `None`: the journal's own `committed` mark
    /// decides.
    change: Option<String>,
    files: Vec<PlanFile>,
}

#[derive(Debug, Serialize, Deserialize)]
struct PlanFile {
    /// The file's root-relative components.
    path: Vec<Vec<u8>>,
    /// Whether a file was there (kept as `a<index>`): else the change creates it.
    existed: bool,
    /// Directories the creation adds, nearest to the root first (root-relative components).
    created_dirs: Vec<Vec<Vec<u8>>>,
    /// The kept file `a<index>`: put back only while it is still that one.
    kept: Option<KeptFile>,
}

/// Which file a journal kept: its inode, and its content's version when that is a hash (a
/// file of at most `HASHED_SIZE_LIMIT` bytes; an inode number alone can be reused by a file
/// made after the kept one was removed).
#[derive(Debug, Serialize, Deserialize)]
struct KeptFile {
    ino: u64,
    version: Option<String>,
}

/// Where a directory removed whole was, and which it was (`d<k>.path`, after its tag).
#[derive(Debug, Serialize, Deserialize)]
struct MovedDir {
    path: Vec<Vec<u8>>,
    ino: u64,
}

fn to_path(components: &[Vec<u8>]) -> PathBuf {
    components
        .iter()
        .map(|c| OsStr::from_bytes(c))
        .collect::<PathBuf>()
}

fn components_of(path: &Path) -> Vec<Vec<u8>> {
    path.components()
        .filter(|c| !matches!(c, std::path::Component::CurDir))
        .map(|c| c.as_os_str().as_bytes().to_vec())
        .collect()
}

fn aside_name(index: usize) -> String {
    format!("a{index}")
}

/// A directory the change removed whole, kept in the journal (the `k`-th it removed).
fn moved_dir_name(k: usize) -> String {
    format!("d{k}")
}

/// Where that directory was: its root-relative components, as JSON (written, fsync'ed, before
/// the directory moves; removed after it was put back).
fn moved_dir_record(k: usize) -> String {
    format!("d{k}.path")
}

/// An open journal of this process (see the module doc).
#[derive(Debug)]
pub(super) struct Journal {
    /// Its directory name beneath the root.
    pub(super) name: String,
    seal: Seal,
    /// Whether this journal makes (and finally drops) the decision of a change over several
    /// mounts.
    primary: bool,
    /// Its directory on the host.
    pub(super) host: PathBuf,
    /// The directory, open and `flock`ed while the change runs.
    dir: DirLock,
    /// The planned files, by index.
    pub(super) paths: Vec<VirtualPath>,
    plan: Plan,
    /// [`plan_digest`] of the plan as written: what the `committed` mark is bound to.
    plan_digest: [u8; 32],
    /// How many directories the change removed whole so far (see [`Journal::remove_dir`]).
    dirs_moved: std::sync::atomic::AtomicUsize,
}

fn io_at(path: &VirtualPath) -> impl Fn(io::Error) -> Error + '_ {
    move |e| map_io(e, path)
}

/// Opens a journal directory (a name at the root) as a readable descriptor, never through a
/// symbolic link.
fn open_journal_dir(root: &Dir, name: &OsStr) -> io::Result<Dir> {
    let fd = rustix::fs::openat(
        root,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    Ok(Dir::from_std_file(std::fs::File::from(fd)))
}

/// Reads `name` in `dir`, never through a symbolic link. A record larger than `limit` (the
/// most this server writes of it) is refused unread (`InvalidData`, [`TooLarge`]): it is not
/// one of ours, whatever its tag; at most `limit` bytes are read should it grow meanwhile.
fn read_record(dir: &Dir, name: &str, limit: u64) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let size = rustix::fs::fstat(&fd)?.st_size;
    if u64::try_from(size).map_or(true, |size| size > limit) {
        return Err(io::Error::new(io::ErrorKind::InvalidData, TooLarge));
    }
    let mut bytes = Vec::new();
    std::fs::File::from(fd)
        .take(limit)
        .read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// A record larger than any this server writes (see [`read_record`]).
#[derive(Debug, thiserror::Error)]
#[error("larger than any record this server writes")]
struct TooLarge;

/// Whether `error` is [`read_record`]'s refusal of a record too large to be ours.
fn is_too_large(error: &io::Error) -> bool {
    error.get_ref().is_some_and(|inner| inner.is::<TooLarge>())
}

/// Writes `bytes` to `name` in `dir`, durably when `durable`.
fn write_record(dir: &Dir, name: &str, bytes: &[u8], durable: bool) -> io::Result<()> {
    let mut options = cap_std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    let mut file = dir.open_with(name, &options)?;
    file.write_all(bytes)?;
    if durable {
        file.sync_all()?;
    }
    Ok(())
}

/// Opens a directory beneath `root` as a readable descriptor (one that can be locked and
/// synced).
fn open_dir(root: &Dir, path: &Path) -> io::Result<Dir> {
    let mut options = cap_std::fs::OpenOptions::new();
    options
        .read(true)
        .custom_flags((OFlags::DIRECTORY | OFlags::CLOEXEC).bits() as i32);
    Ok(Dir::from_std_file(
        root.open_with(path, &options)?.into_std(),
    ))
}

fn sync_dir(dir: &Dir) -> io::Result<()> {
    rustix::fs::fsync(dir.as_fd()).map_err(Into::into)
}

/// Syncs the root directory itself (cap-std's root handle is `O_PATH`: it cannot be synced).
fn sync_root(root: &Dir) -> io::Result<()> {
    sync_dir(&open_dir(root, Path::new("."))?)
}

/// Step 1 of the module doc: keeps every planned file aside and makes the plan durable.
/// `VersionMismatch` when a planned file is not at its version (nothing changed then; the
/// half-made journal is removed).
pub(super) fn begin(
    root: &Dir,
    host_root: &Path,
    seal: &Seal,
    files: &[PlannedFile],
    role: &JournalRole,
) -> Result<Journal> {
    let (change, primary) = match role {
        JournalRole::Alone => (None, false),
        JournalRole::Secondary { change } => (Some(change.clone()), false),
        JournalRole::Primary { change } => (Some(change.clone()), true),
    };
    let name = journal_name();
    let root_io = |e: io::Error| map_io(e, &VirtualPath::root());
    rustix::fs::mkdirat(root, name.as_str(), Mode::from_raw_mode(0o700))
        .map_err(|e| root_io(e.into()))?;
    let made = (|| {
        let dir = DirLock::lock(open_journal_dir(root, OsStr::new(&name)).map_err(root_io)?)
            .map_err(root_io)?;
        // Not synced: lost with a power cut, it only leaves an empty journal for the operator.
        write_record(
            &dir.dir,
            BEGUN,
            seal.tag(b"begun", &name, b"").as_bytes(),
            false,
        )
        .map_err(root_io)?;
        let mut plan = Plan {
            pid: std::process::id(),
            change,
            files: Vec::with_capacity(files.len()),
        };
        for (index, file) in files.iter().enumerate() {
            plan.files.push(keep(root, &dir.dir, index, file)?);
        }
        let plan_digest = write_plan(&dir.dir, seal, &name, &plan)?;
        sync_root(root).map_err(root_io)?;
        Ok(Journal {
            host: host_root.join(&name),
            name: name.clone(),
            seal: seal.clone(),
            primary,
            dir,
            paths: files.iter().map(|f| f.path.clone()).collect(),
            plan,
            plan_digest,
            dirs_moved: std::sync::atomic::AtomicUsize::new(0),
        })
    })();
    if made.is_err() {
        let _ = root.remove_dir_all(&name);
    }
    made
}

/// Keeps one planned file aside (or notes the directories its creation adds).
fn keep(root: &Dir, journal: &Dir, index: usize, file: &PlannedFile) -> Result<PlanFile> {
    let path = &file.path;
    let io = io_at(path);
    let canonical = canonicalize(root, path, true)?;
    refuse_inside_git(&canonical, path)?;
    let Some((parent, name)) = canonical.split_last() else {
        return Err(Error::IsADirectory { path: path.clone() });
    };
    let components = components_of(&canonical.path());
    let Some(version) = &file.before else {
        let mut created_dirs = Vec::new();
        let mut at = PathBuf::new();
        for part in components_of(&parent) {
            at.push(OsStr::from_bytes(&part));
            let exists = match root.symlink_metadata(&at) {
                Ok(_) => true,
                Err(e) if e.kind() == io::ErrorKind::NotFound => false,
                Err(e) => return Err(io(e)),
            };
            if !exists {
                created_dirs.push(components_of(&at));
            }
        }
        return Ok(PlanFile {
            path: components,
            existed: false,
            created_dirs,
            kept: None,
        });
    };
    let lock = DirLock::take(root, &parent).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => Error::VersionMismatch { path: path.clone() },
        _ => io(e),
    })?;
    let stat = match rustix::fs::statat(&lock.dir, &name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => stat,
        Err(rustix::io::Errno::NOENT) => return Err(Error::VersionMismatch { path: path.clone() }),
        Err(errno) => return Err(io(errno.into())),
    };
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile
        || current_version(&lock.dir, &name, path)? != *version
    {
        return Err(Error::VersionMismatch { path: path.clone() });
    }
    let aside = aside_name(index);
    match rustix::fs::linkat(&lock.dir, &name, journal, aside.as_str(), AtFlags::empty()) {
        Ok(()) => {}
        // Another file system (a bind mount inside the root): a copy, mode kept.
        Err(rustix::io::Errno::XDEV) => {
            copy_aside(&lock.dir, &name, journal, &aside, &stat).map_err(&io)?
        }
        Err(errno) => return Err(io(errno.into())),
    }
    let ino = rustix::fs::statat(journal, aside.as_str(), AtFlags::SYMLINK_NOFOLLOW)
        .map_err(|e| io(e.into()))?
        .st_ino;
    let kept = KeptFile {
        ino,
        // Identity versions (big files) change with the link; content hashes do not.
        version: (!version.as_str().starts_with('i')).then(|| version.as_str().to_owned()),
    };
    Ok(PlanFile {
        path: components,
        existed: true,
        created_dirs: Vec::new(),
        kept: Some(kept),
    })
}

/// Copies `name` of `dir` into the journal as `aside`, with its permission bits, durably.
fn copy_aside(
    dir: &Dir,
    name: &OsStr,
    journal: &Dir,
    aside: &str,
    stat: &rustix::fs::Stat,
) -> io::Result<()> {
    let mut from = dir.open(name)?;
    let mut options = cap_std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    let mut to = journal.open_with(aside, &options)?;
    io::copy(&mut from, &mut to)?;
    rustix::fs::fchmod(&to, Mode::from_raw_mode(stat.st_mode & 0o7777))?;
    to.sync_all()
}

/// Writes the plan, tagged, durably: temporary file, fsync, rename, fsync of the directory.
/// A plan larger than [`MAX_PLAN_BYTES`] is refused (`Unsupported`): recovery would not read
/// it back. Returns the plan's [`plan_digest`].
fn write_plan(dir: &Dir, seal: &Seal, name: &str, plan: &Plan) -> Result<[u8; 32]> {
    let root = VirtualPath::root();
    let bytes = serde_json::to_vec(plan).map_err(|e| map_io(io::Error::other(e), &root))?;
    if bytes.len() > MAX_PLAN_BYTES {
        return Err(Error::Unsupported {
            path: root,
            reason: format!(
                "this change of {} files is too large to keep whole across a crash (its journal's plan would exceed {} MiB); make it in parts, e.g. commit one directory at a time",
                plan.files.len(),
                MAX_PLAN_BYTES / (1024 * 1024)
            ),
        });
    }
    let written = (|| {
        write_record(dir, PLAN_TEMP, &seal.sealed(b"plan", name, &bytes), true)?;
        dir.rename(PLAN_TEMP, dir, PLAN)?;
        sync_dir(dir)
    })();
    written.map_err(|e| map_io(e, &root))?;
    Ok(plan_digest(&bytes))
}

impl Journal {
    /// Step 3, the decision: the change stands. A journal alone marks itself (`committed`,
    /// tagged); the primary of a change over several mounts records the decision in the data
    /// directory, where every member's recovery looks.
    pub(super) fn mark_committed(&self) -> Result<()> {
        let io = |e: io::Error| map_io(e, &VirtualPath::root());
        if let Some(change) = &self.plan.change {
            return self.seal.key().decide(change).map_err(io);
        }
        let tag = self.seal.tag(b"committed", &self.name, &self.plan_digest);
        write_record(&self.dir.dir, COMMITTED, tag.as_bytes(), true).map_err(io)?;
        sync_dir(&self.dir.dir).map_err(io)
    }

    /// Removes the journal (after the decision, or after a roll-back), durably; the primary of
    /// a change over several mounts then drops the decision (its secondaries are gone first).
    pub(super) fn finish(&self, root: &Dir) -> Result<()> {
        let io = |e: io::Error| map_io(e, &VirtualPath::root());
        match root.remove_dir_all(&self.name) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(e)),
        }
        sync_root(root).map_err(io)?;
        if self.primary
            && let Some(change) = &self.plan.change
        {
            self.seal.key().forget(change);
        }
        Ok(())
    }

    /// Removes the directory `path` whole by moving it into the journal (as `d<k>`, after a
    /// durable record of where it was): a roll-back moves it back as it was — every file below
    /// it, ignored and hidden ones too, empty directories, modes — and the removal of the
    /// journal after the decision removes it for good. `Ok(false)` when it cannot be kept so
    /// (not a directory, or on another file system than the root): nothing was done.
    pub(super) fn remove_dir(&self, root: &Dir, path: &VirtualPath) -> Result<bool> {
        let io = io_at(path);
        let canonical = canonicalize(root, path, false)?;
        refuse_inside_git(&canonical, path)?;
        let Some((parent, name)) = canonical.split_last() else {
            return Ok(false);
        };
        let lock = DirLock::take(root, &parent).map_err(&io)?;
        match rustix::fs::statat(&lock.dir, &name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) if FileType::from_raw_mode(stat.st_mode) == FileType::Directory => {
                super::write::refuse_own_place(&lock.dir, Some(&stat), path)?;
            }
            Ok(_) | Err(rustix::io::Errno::NOENT) => return Ok(false),
            Err(errno) => return Err(io(errno.into())),
        }
        let ino = match rustix::fs::statat(&lock.dir, &name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => stat.st_ino,
            Err(errno) => return Err(io(errno.into())),
        };
        let k = self.dirs_moved.fetch_add(1, Ordering::Relaxed);
        let record = moved_dir_record(k);
        let journal = &self.dir.dir;
        let moved = MovedDir {
            path: components_of(&canonical.path()),
            ino,
        };
        let bytes = serde_json::to_vec(&moved).map_err(|e| io(io::Error::other(e)))?;
        let sealed = self.seal.sealed(record.as_bytes(), &self.name, &bytes);
        let written = (|| {
            write_record(journal, &record, &sealed, true)?;
            sync_dir(journal)
        })();
        if let Err(error) = written {
            let _ = journal.remove_file(&record);
            return Err(io(error));
        }
        match rustix::fs::renameat(&lock.dir, &name, journal, moved_dir_name(k).as_str()) {
            Ok(()) => {}
            Err(errno) => {
                let _ = journal.remove_file(&record);
                return match errno {
                    rustix::io::Errno::XDEV => Ok(false),
                    errno => Err(io(errno.into())),
                };
            }
        }
        sync_dir(&lock.dir).map_err(&io)?;
        sync_dir(journal).map_err(&io)?;
        Ok(true)
    }

    /// Puts back the files changed so far, each only if it is what the change left it
    /// (`applied`: index, version left; `None` removed), then removes the journal. Returns
    /// those that could not be put back. Directories removed whole go back first, so that
    /// the files deleted inside them return into them.
    pub(super) fn roll_back(
        &self,
        root: &Dir,
        applied: &[(usize, Option<Version>)],
    ) -> Vec<(usize, Error)> {
        let mut failed = Vec::new();
        if let Err(error) = restore_dirs(root, &self.dir.dir, &self.seal, self.name.as_bytes()) {
            // The journal stays: the next start finishes the roll-back.
            failed.push((0, map_io(error, &VirtualPath::root())));
            return failed;
        }
        for (index, now) in applied.iter().rev() {
            let Some(file) = self.plan.files.get(*index) else {
                continue;
            };
            let path = &self.paths[*index];
            if let Err(error) = self.put_back(root, *index, file, path, now.as_ref()) {
                failed.push((*index, error));
            }
        }
        if failed.is_empty() {
            let _ = self.finish(root);
        }
        // Else the journal stays: the next start finishes the roll-back.
        failed
    }

    fn put_back(
        &self,
        root: &Dir,
        index: usize,
        file: &PlanFile,
        path: &VirtualPath,
        now: Option<&Version>,
    ) -> Result<()> {
        let io = io_at(path);
        let host = to_path(&file.path);
        let (parent, name) = split(&host);
        root.create_dir_all(&parent).map_err(&io)?;
        let lock = DirLock::take(root, &parent).map_err(&io)?;
        let dir = &lock.dir;
        let there = match rustix::fs::statat(dir, &name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(_) => true,
            Err(rustix::io::Errno::NOENT) => false,
            Err(errno) => return Err(io(errno.into())),
        };
        match now {
            Some(version) if !there || current_version(dir, &name, path)? != *version => {
                return Err(Error::VersionMismatch { path: path.clone() });
            }
            None if there => return Err(Error::AlreadyExists { path: path.clone() }),
            _ => {}
        }
        if file.existed {
            if !is_kept(&self.dir.dir, &aside_name(index), file) {
                return Err(Error::VersionMismatch { path: path.clone() });
            }
            rustix::fs::renameat(&self.dir.dir, aside_name(index).as_str(), dir, &name)
                .map_err(|e| io(e.into()))?;
        } else if there {
            rustix::fs::unlinkat(dir, &name, AtFlags::empty()).map_err(|e| io(e.into()))?;
        }
        sync_dir(dir).map_err(&io)?;
        drop(lock);
        remove_created_dirs(root, file);
        Ok(())
    }
}

/// Whether the kept file `aside` is a regular file, the inode the plan recorded, with the
/// content it recorded.
fn is_kept(journal: &Dir, aside: &str, file: &PlanFile) -> bool {
    let Some(kept) = &file.kept else {
        return false;
    };
    let same_inode = match rustix::fs::statat(journal, aside, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => {
            FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile
                && stat.st_ino == kept.ino
        }
        Err(_) => false,
    };
    same_inode
        && kept.version.as_deref().is_none_or(|version| {
            current_version(journal, OsStr::new(aside), &VirtualPath::root())
                .is_ok_and(|now| now.as_str() == version)
        })
}

/// Moves every directory the change removed whole back where it was, the last removed first
/// (a directory removed after one below it holds it: it goes back first). Idempotent: one
/// already moved back has no `d<k>` left in the journal, only its record, which goes. A record
/// whose tag does not verify, or whose directory is not the one it names, is an error: the
/// journal stays for the operator.
fn restore_dirs(root: &Dir, journal: &Dir, seal: &Seal, name: &[u8]) -> io::Result<()> {
    let mut moved: Vec<usize> = journal
        .entries()?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name();
            let name = name.to_str()?;
            name.strip_prefix('d')?.strip_suffix(".path")?.parse().ok()
        })
        .collect();
    moved.sort_unstable_by(|a, b| b.cmp(a));
    for k in moved {
        let record = moved_dir_record(k);
        let bytes = read_record(journal, &record, MAX_MOVED_RECORD)?;
        let Some(body) = seal.open(record.as_bytes(), name, &bytes) else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "the record {record} was not written by this server (its tag does not verify)"
                ),
            ));
        };
        let moved: MovedDir = serde_json::from_slice(body).map_err(io::Error::other)?;
        let kept = moved_dir_name(k);
        if let Ok(stat) = rustix::fs::statat(journal, kept.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
            if FileType::from_raw_mode(stat.st_mode) != FileType::Directory
                || stat.st_ino != moved.ino
            {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{kept} is not the directory its record names"),
                ));
            }
            let host = to_path(&moved.path);
            let (parent, leaf) = split(&host);
            root.create_dir_all(&parent)?;
            let parent_dir = open_dir(root, &parent)?;
            rustix::fs::renameat(journal, kept.as_str(), &parent_dir, &leaf)?;
            sync_dir(&parent_dir)?;
        }
        journal.remove_file(&record)?;
    }
    sync_dir(journal)
}

/// The parent directory and the last name of a root-relative path.
fn split(path: &Path) -> (PathBuf, OsString) {
    let name = path.file_name().map(OsStr::to_owned).unwrap_or_default();
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    (parent, name)
}

/// Removes the directories a file's creation added, deepest first, while they are empty.
fn remove_created_dirs(root: &Dir, file: &PlanFile) {
    for dir in file.created_dirs.iter().rev() {
        if root.remove_dir(to_path(dir)).is_err() {
            break;
        }
    }
}

/// What resolving one unfinished journal did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// How many files the change planned.
    pub files: usize,
    /// Rolled back (else rolled forward: the change had been decided and stands).
    pub rolled_back: bool,
    /// The planned files, as paths from the mount root (`/a/b.txt`; bytes that are not UTF-8
    /// shown as U+FFFD), in plan order.
    pub paths: Vec<String>,
}

/// The planned files of `plan` as paths from the mount root (see [`Resolved::paths`]).
fn plan_paths(plan: &Plan) -> Vec<String> {
    plan.files
        .iter()
        .map(|file| {
            let parts: Vec<String> = file
                .path
                .iter()
                .map(|c| String::from_utf8_lossy(c).into_owned())
                .collect();
            format!("/{}", parts.join("/"))
        })
        .collect()
}

/// Resolves every unfinished journal beneath `root` whose process is gone (see the module
/// doc): returns what each one was. Journals this server cannot prove it wrote are logged and
/// left as they are.
pub(super) fn recover(root: &Dir, seal: &Seal) -> Vec<Resolved> {
    let Ok(entries) = root.entries() else {
        return Vec::new();
    };
    let mut names: Vec<OsString> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name())
        .filter(|n| n.as_bytes().starts_with(JOURNAL_PREFIX.as_bytes()))
        .collect();
    names.sort();
    let mut resolved = Vec::new();
    for name in names {
        let shown = format!("/{}", String::from_utf8_lossy(name.as_bytes()));
        match resolve(root, seal, &name) {
            Ok(Outcome::Resolved(done)) => resolved.push(done),
            Ok(Outcome::Live) => {}
            Ok(Outcome::Untrusted(why)) => {
                tracing::warn!(journal = %shown, "a change journal at the mount root was left as it is: {why}; mountfs acts only on journals it can prove it wrote. If no mountfs is running on this directory, look at it and remove it yourself");
            }
            Err(error) => {
                tracing::warn!(%error, journal = %shown, "an unfinished change journal could not be resolved; the next start tries again");
            }
        }
    }
    resolved
}

/// What became of one journal directory.
enum Outcome {
    Resolved(Resolved),
    /// Its process still runs it, or it held no plan yet and was simply removed.
    Live,
    /// Not provably ours: left alone, for the operator (why).
    Untrusted(&'static str),
}

/// Resolves one journal directory.
fn resolve(root: &Dir, seal: &Seal, name: &OsStr) -> io::Result<Outcome> {
    let dir = match open_journal_dir(root, name) {
        Ok(dir) => dir,
        Err(e)
            if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error())
                || e.raw_os_error() == Some(rustix::io::Errno::NOTDIR.raw_os_error()) =>
        {
            return Ok(Outcome::Untrusted("it is not a directory"));
        }
        Err(e) => return Err(e),
    };
    match rustix::fs::flock(&dir, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {}
        Err(rustix::io::Errno::WOULDBLOCK) => return Ok(Outcome::Live),
        Err(errno) => return Err(errno.into()),
    }
    let journal = name.as_bytes();
    let (plan, digest) = match read_record(&dir, PLAN, MAX_PLAN_RECORD) {
        Ok(bytes) => match seal.open(b"plan", journal, &bytes) {
            Some(body) => match serde_json::from_slice::<Plan>(body) {
                Ok(plan) => (plan, plan_digest(body)),
                Err(_) => return Ok(Outcome::Untrusted("its plan does not parse")),
            },
            None => return Ok(Outcome::Untrusted("its plan's tag does not verify")),
        },
        Err(e) if is_too_large(&e) => {
            return Ok(Outcome::Untrusted(
                "its plan is larger than any plan this server writes",
            ));
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            // Begun, never made durable: nothing had changed. Removed only when provably ours.
            let begun = read_record(&dir, BEGUN, TAG_CHARS as u64 + 1).unwrap_or_default();
            if !seal.verifies(b"begun", journal, b"", &begun) {
                return Ok(Outcome::Untrusted("it holds no plan this server wrote"));
            }
            remove_journal(root, Path::new(name))?;
            return Ok(Outcome::Live);
        }
        Err(e) => return Err(e),
    };
    // Defence in depth (attack review of issue 41): a sealed plan is one this server wrote,
    // and it never plans a path inside `.git/` or one that is not a plain relative name. Should
    // the key ever leak (an operator's mount over the data directory), a forged plan still
    // cannot put a file back into `.git/` or climb out with `..`.
    let plain = |components: &[Vec<u8>]| {
        components
            .iter()
            .all(|c| !c.is_empty() && c != b".." && c != b"." && c != b".git" && !c.contains(&b'/'))
    };
    if !plan
        .files
        .iter()
        .all(|f| plain(&f.path) && f.created_dirs.iter().all(|d| plain(d)))
    {
        return Ok(Outcome::Untrusted(
            "its plan names a path inside .git/ or one that is not a plain name",
        ));
    }
    let committed = match &plan.change {
        Some(change) => seal.key().decided(change),
        None => match read_record(&dir, COMMITTED, TAG_CHARS as u64 + 1) {
            Ok(tag) => {
                // Bound to this very plan: a mark of another plan under this name (an earlier
                // run's journal, a copy) does not verify.
                if !seal.verifies(b"committed", journal, &digest, &tag) {
                    return Ok(Outcome::Untrusted(
                        "its committed mark's tag does not verify for its plan",
                    ));
                }
                true
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => false,
            Err(e) => return Err(e),
        },
    };
    if committed {
        remove_temp_files(root, &plan);
        remove_journal(root, Path::new(name))?;
        return Ok(Outcome::Resolved(Resolved {
            files: plan.files.len(),
            rolled_back: false,
            paths: plan_paths(&plan),
        }));
    }
    restore_dirs(root, &dir, seal, journal)?;
    for (index, file) in plan.files.iter().enumerate() {
        let host = to_path(&file.path);
        let (parent, leaf) = split(&host);
        if file.existed {
            let aside = aside_name(index);
            if !dir.exists(&aside) {
                // Put back already (a roll-back cut short), or never kept.
                continue;
            }
            if !is_kept(&dir, &aside, file) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{aside} is not the file the plan kept"),
                ));
            }
            root.create_dir_all(&parent)?;
            let parent_dir = open_dir(root, &parent)?;
            rustix::fs::renameat(&dir, aside.as_str(), &parent_dir, &leaf)?;
            sync_dir(&parent_dir)?;
        } else {
            let Ok(parent_dir) = open_dir(root, &parent) else {
                continue;
            };
            match rustix::fs::statat(&parent_dir, &leaf, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(stat) if FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile => {
                    rustix::fs::unlinkat(&parent_dir, &leaf, AtFlags::empty())?;
                    sync_dir(&parent_dir)?;
                }
                _ => {}
            }
        }
    }
    remove_temp_files(root, &plan);
    for file in &plan.files {
        remove_created_dirs(root, file);
    }
    remove_journal(root, Path::new(name))?;
    Ok(Outcome::Resolved(Resolved {
        files: plan.files.len(),
        rolled_back: true,
        paths: plan_paths(&plan),
    }))
}

/// Removes the temporary files the journal's process left beside the planned files (a write
/// cut short by the crash), so that nothing of the change is left once it is resolved.
fn remove_temp_files(root: &Dir, plan: &Plan) {
    let mut parents: Vec<PathBuf> = plan
        .files
        .iter()
        .map(|f| split(&to_path(&f.path)).0)
        .collect();
    parents.sort();
    parents.dedup();
    for parent in parents {
        let Ok(dir) = open_dir(root, &parent) else {
            continue;
        };
        let Ok(entries) = dir.entries() else {
            continue;
        };
        for entry in entries.filter_map(|e| e.ok()) {
            let name = entry.file_name();
            if temp_owner(&name) != Some(plan.pid) {
                continue;
            }
            let _ = dir.remove_file(&name);
        }
    }
}

fn remove_journal(root: &Dir, name: &Path) -> io::Result<()> {
    match root.remove_dir_all(name) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    sync_root(root)
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;
    use std::os::unix::fs::PermissionsExt;

    use cap_std::fs::Dir;

    use super::{
        MAX_PLAN_BYTES, MAX_PLAN_RECORD, PLAN, Plan, PlanFile, is_too_large, open_journal_dir,
        read_record, write_plan,
    };
    use crate::ground::path::VirtualPath;
    use crate::storage::backend::disk::{DiskBackend, DiskOptions};
    use crate::storage::backend::{
        Backend, ChangeJournal, JournalRole, KeepAside, PlannedFile, Version, WriteMode,
    };

    fn p(s: &str) -> VirtualPath {
        VirtualPath::parse(s).unwrap()
    }

    /// A file of a planned change, with the version it is expected at (`None`: created).
    fn planned(path: &str, before: Option<&Version>) -> PlannedFile {
        PlannedFile {
            path: p(path),
            before: before.cloned(),
        }
    }

    /// `disk`'s journal for a change that has written `content` over the file at `path`.
    async fn one_written(disk: &DiskBackend, path: &str, content: &[u8]) -> Box<dyn ChangeJournal> {
        let v = version(disk, path).await;
        let journal = begin(disk, &[planned(path, Some(&v))]).await;
        journal
            .write(0, content, WriteMode::IfVersion(v))
            .await
            .unwrap();
        journal
    }

    /// `disk`'s journal for a change of `files`, alone.
    async fn begin(disk: &DiskBackend, files: &[PlannedFile]) -> Box<dyn ChangeJournal> {
        disk.begin_changes(files, &JournalRole::Alone)
            .await
            .unwrap()
            .unwrap()
    }

    fn ours(dir: &std::path::Path) -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(super::super::TEMP_PREFIX))
            .collect()
    }

    /// Copies a journal directory aside, its kept files as hard links (the journal trusts
    /// only the inodes it kept).
    fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let target = to.join(entry.file_name());
            std::fs::hard_link(entry.path(), &target).unwrap();
        }
    }

    async fn version(disk: &DiskBackend, path: &str) -> Version {
        disk.read(&p(path)).await.unwrap().version
    }

    /// A change cut short (the journal dropped unfinished, as a killed process leaves it) is
    /// rolled back when the mount is opened again: every file byte-exact with its mode,
    /// created files and directories gone; resolving it a second time changes nothing.
    #[tokio::test]
    async fn an_unfinished_change_is_rolled_back_at_the_next_open_and_twice_is_harmless() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("a.txt"), "a").unwrap();
        std::fs::set_permissions(root.join("a.txt"), std::fs::Permissions::from_mode(0o600))
            .unwrap();
        std::fs::write(root.join("b.txt"), "b").unwrap();
        let disk = DiskBackend::open_without_sweep(root, DiskOptions::default()).unwrap();
        let (va, vb) = (
            version(&disk, "/a.txt").await,
            version(&disk, "/b.txt").await,
        );
        let files = [
            planned("/a.txt", Some(&va)),
            planned("/b.txt", Some(&vb)),
            planned("/new/deep/c.txt", None),
        ];
        let journal = begin(&disk, &files).await;
        journal
            .write(0, b"A, changed", WriteMode::IfVersion(va))
            .await
            .unwrap();
        journal.delete(1, &vb).await.unwrap();
        journal.write(2, b"c", WriteMode::CreateOnly).await.unwrap();
        let location = journal.location();
        let copy = tempfile::tempdir().unwrap();
        copy_dir(&location, copy.path());
        drop(journal); // the process is gone: its lock with it
        drop(disk);

        let check = || {
            assert_eq!(std::fs::read(root.join("a.txt")).unwrap(), b"a");
            let mode = std::fs::metadata(root.join("a.txt"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o7777, 0o600);
            assert_eq!(std::fs::read(root.join("b.txt")).unwrap(), b"b");
            assert!(
                !root.join("new").exists(),
                "the directories it created are gone"
            );
            assert_eq!(ours(root), Vec::<String>::new());
        };
        let disk = DiskBackend::open(root, DiskOptions::default()).unwrap();
        let resolved = disk.take_resolved();
        assert_eq!(
            resolved,
            vec![super::Resolved {
                files: 3,
                rolled_back: true,
                paths: vec!["/a.txt".into(), "/b.txt".into(), "/new/deep/c.txt".into()],
            }]
        );
        check();
        assert!(disk.take_resolved().is_empty(), "told once");

        // A crash during the roll-back leaves the journal: resolving again is harmless.
        copy_dir(copy.path(), &location);
        let again = DiskBackend::open(root, DiskOptions::default()).unwrap();
        assert_eq!(again.take_resolved().len(), 1);
        check();
    }

    /// A directory a change removed whole (an overlay commit of a directory deleted whole)
    /// comes back exactly when the change is rolled back at the next open — files a listing
    /// skips, empty directories, modes — and goes for good when the change was decided.
    #[tokio::test]
    async fn a_directory_removed_whole_is_put_back_by_the_roll_back_and_gone_once_decided() {
        for decided in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let root = dir.path();
            std::fs::create_dir_all(root.join("d/sub/empty")).unwrap();
            std::fs::write(root.join("d/ignored.log"), "i").unwrap();
            std::fs::set_permissions(root.join("d/sub"), std::fs::Permissions::from_mode(0o700))
                .unwrap();
            let disk = DiskBackend::open_without_sweep(root, DiskOptions::default()).unwrap();
            let journal = disk
                .begin_changes(&[], &JournalRole::Alone)
                .await
                .unwrap()
                .unwrap();
            // Deepest first, as a commit removes them.
            assert!(journal.remove_dir(&p("/d/sub")).await.unwrap());
            assert!(journal.remove_dir(&p("/d")).await.unwrap());
            assert!(!journal.remove_dir(&p("/absent")).await.unwrap());
            assert!(!root.join("d").exists());
            if decided {
                journal.mark_committed().await.unwrap();
            }
            drop(journal); // the process is gone
            drop(disk);
            let disk = DiskBackend::open(root, DiskOptions::default()).unwrap();
            assert_eq!(disk.take_resolved().len(), 1);
            if decided {
                assert!(!root.join("d").exists());
            } else {
                assert_eq!(std::fs::read(root.join("d/ignored.log")).unwrap(), b"i");
                assert!(root.join("d/sub/empty").is_dir());
                let mode = std::fs::metadata(root.join("d/sub"))
                    .unwrap()
                    .permissions()
                    .mode();
                assert_eq!(mode & 0o7777, 0o700);
            }
            let names: Vec<String> = std::fs::read_dir(root)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(".mountfs-tmp-"))
                .collect();
            assert!(names.is_empty(), "{names:?}");
        }
    }

    /// Once decided, a change cut short stands: the next open only removes the journal.
    #[tokio::test]
    async fn a_decided_change_is_completed_not_rolled_back() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("a.txt"), "a").unwrap();
        let disk = DiskBackend::open_without_sweep(root, DiskOptions::default()).unwrap();
        let va = version(&disk, "/a.txt").await;
        let files = [planned("/a.txt", Some(&va)), planned("/b.txt", None)];
        let journal = begin(&disk, &files).await;
        journal
            .write(0, b"new", WriteMode::IfVersion(va))
            .await
            .unwrap();
        journal.write(1, b"b", WriteMode::CreateOnly).await.unwrap();
        journal.mark_committed().await.unwrap();
        drop(journal);
        drop(disk);
        let disk = DiskBackend::open(root, DiskOptions::default()).unwrap();
        assert_eq!(
            disk.take_resolved(),
            vec![super::Resolved {
                files: 2,
                rolled_back: false,
                paths: vec!["/a.txt".into(), "/b.txt".into()],
            }]
        );
        assert_eq!(std::fs::read(root.join("a.txt")).unwrap(), b"new");
        assert_eq!(std::fs::read(root.join("b.txt")).unwrap(), b"b");
        assert_eq!(ours(root), Vec::<String>::new());
    }

    /// Attack review of issue 41: a journal's name holds 64 random bits of its run, so a name
    /// of an earlier run (same pid, same counter) never comes back.
    #[test]
    fn journal_names_carry_random_bits_of_their_run() {
        let (one, two) = (super::journal_name(), super::journal_name());
        assert_ne!(one, two);
        for name in [&one, &two] {
            let rest = name.strip_prefix(super::JOURNAL_PREFIX).unwrap();
            let parts: Vec<&str> = rest.split('-').collect();
            assert_eq!(parts.len(), 3, "<pid>-<n>-<run>: {name}");
            assert_eq!(parts[0], std::process::id().to_string());
            assert_eq!(parts[2].len(), 16, "64 random bits: {name}");
            assert!(parts[2].bytes().all(|b| b.is_ascii_hexdigit()), "{name}");
        }
    }

    /// Attack review of issue 41: the `committed` mark is bound to its journal's plan. A mark
    /// made for another change under the same name (a journal of an earlier run of the same
    /// pid, copied back by an agent) does not roll forward a change that was never decided.
    #[tokio::test]
    async fn a_committed_mark_of_another_plan_with_the_same_name_commits_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let keys = tempfile::tempdir().unwrap();
        let key = std::sync::Arc::new(super::RecoveryKey::in_dir(keys.path()).unwrap());
        let with_key = || DiskOptions {
            recovery: Some(key.clone()),
            ..DiskOptions::default()
        };
        std::fs::write(root.join("old.txt"), "old").unwrap();
        std::fs::write(root.join("f.txt"), "f").unwrap();
        // The earlier run: a change of old.txt, decided, cut short before its journal went.
        let disk = DiskBackend::open_without_sweep(root, with_key()).unwrap();
        let earlier = one_written(&disk, "/old.txt", b"decided").await;
        earlier.mark_committed().await.unwrap();
        let earlier_location = earlier.location();
        let name = earlier_location.file_name().unwrap().to_owned();
        let mark = std::fs::read(earlier_location.join("committed")).unwrap();
        drop((earlier, disk));
        let disk = DiskBackend::open(root, with_key()).unwrap();
        assert_eq!(disk.take_resolved().len(), 1, "rolled forward");
        assert!(!earlier_location.exists());

        // This run: another change under the same name (as a repeated pid and counter gave
        // it), cut short undecided; the earlier mark is planted in it.
        let journal = one_written(&disk, "/f.txt", b"undecided").await;
        let location = journal.location();
        let this_name = location.file_name().unwrap().to_owned();
        drop((journal, disk));
        // Its records sealed under the earlier name, as the same name would have given them.
        let canonical = std::fs::canonicalize(root).unwrap();
        let seal = super::Seal::new(key.clone(), &canonical);
        let plan = std::fs::read(location.join("journal")).unwrap();
        let body = seal
            .open(b"plan", this_name.as_encoded_bytes(), &plan)
            .unwrap()
            .to_vec();
        let name_str = name.to_str().unwrap();
        std::fs::write(
            location.join("journal"),
            seal.sealed(b"plan", name_str, &body),
        )
        .unwrap();
        std::fs::write(location.join("begun"), seal.tag(b"begun", name_str, b"")).unwrap();
        std::fs::rename(&location, root.join(&name)).unwrap();
        std::fs::write(root.join(&name).join("committed"), &mark).unwrap();

        let disk = DiskBackend::open(root, with_key()).unwrap();
        assert!(
            !disk
                .take_resolved()
                .iter()
                .any(|resolved| !resolved.rolled_back),
            "a mark of another plan rolled the change forward"
        );
        assert!(
            root.join(&name).join("journal").is_file(),
            "left for the operator"
        );
        drop(disk);
        // Without the planted mark, the same journal is rolled back.
        std::fs::remove_file(root.join(&name).join("committed")).unwrap();
        let disk = DiskBackend::open(root, with_key()).unwrap();
        assert_eq!(disk.take_resolved().len(), 1);
        assert_eq!(std::fs::read(root.join("f.txt")).unwrap(), b"f");
        assert_eq!(std::fs::read(root.join("old.txt")).unwrap(), b"decided");
    }

    /// A secondary journal waits for its primary's decision, kept by the server's key (not in
    /// any mount): two mounts end the same way, each resolved through its own root alone.
    #[tokio::test]
    async fn secondaries_follow_the_primary_decision() {
        for decided in [false, true] {
            let (one, two) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
            for dir in [&one, &two] {
                std::fs::write(dir.path().join("f.txt"), "old").unwrap();
            }
            let a = DiskBackend::open_without_sweep(one.path(), DiskOptions::default()).unwrap();
            let b = DiskBackend::open_without_sweep(two.path(), DiskOptions::default()).unwrap();
            let change = super::change_id();
            let plan = |v: Version| {
                [PlannedFile {
                    path: p("/f.txt"),
                    before: Some(v),
                }]
            };
            let va = version(&a, "/f.txt").await;
            let secondary = a
                .begin_changes(
                    &plan(va.clone()),
                    &JournalRole::Secondary {
                        change: change.clone(),
                    },
                )
                .await
                .unwrap()
                .unwrap();
            secondary
                .write(0, b"new", WriteMode::IfVersion(va))
                .await
                .unwrap();
            let vb = version(&b, "/f.txt").await;
            let main = b
                .begin_changes(&plan(vb.clone()), &JournalRole::Primary { change })
                .await
                .unwrap()
                .unwrap();
            main.write(0, b"new", WriteMode::IfVersion(vb))
                .await
                .unwrap();
            if decided {
                main.mark_committed().await.unwrap();
            }
            drop((secondary, main, a, b));
            // The primary's mount opens first; each resolves its own journal alone.
            let b = DiskBackend::open(two.path(), DiskOptions::default()).unwrap();
            assert_eq!(b.take_resolved().len(), 1);
            let a = DiskBackend::open(one.path(), DiskOptions::default()).unwrap();
            assert_eq!(a.take_resolved().len(), 1);
            let want: &[u8] = if decided { b"new" } else { b"old" };
            for dir in [&one, &two] {
                assert_eq!(std::fs::read(dir.path().join("f.txt")).unwrap(), want);
                assert_eq!(ours(dir.path()), Vec::<String>::new());
            }
            drop((a, b));
        }
    }

    /// Writes a journal directory as an agent could (any tool or command writing in the
    /// mount): `journal` with `plan`, optionally `committed` and a kept file `a0`.
    fn plant(root: &std::path::Path, plan: &str, committed: bool, a0: Option<&[u8]>) {
        let dir = root.join(".mountfs-tmp-journal-1-1");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("journal"), plan).unwrap();
        if committed {
            std::fs::write(dir.join("committed"), "").unwrap();
        }
        if let Some(bytes) = a0 {
            std::fs::write(dir.join("a0"), bytes).unwrap();
        }
    }

    fn components(path: &str) -> String {
        let parts: Vec<Vec<u8>> = path.split('/').map(|c| c.as_bytes().to_vec()).collect();
        serde_json::to_string(&parts).unwrap()
    }

    /// Issue 41: a journal naming a directory outside the mount (the plan format of the
    /// release that trusted it, and the current one with a made-up tag) deletes nothing, puts
    /// nothing back, and stays for the operator.
    #[tokio::test]
    async fn a_planted_journal_deletes_nothing_outside_and_puts_nothing_back() {
        let outside = tempfile::tempdir().unwrap();
        let victim = outside.path().join("victim");
        std::fs::create_dir_all(victim.join("sub")).unwrap();
        let victim_json = serde_json::to_string(&victim).unwrap();
        let config = components(".git/config");
        let fake_tag = "ab".repeat(32);
        let plans = [
            (
                format!(r#"{{"pid":1,"primary":null,"secondaries":[{victim_json}],"files":[]}}"#),
                true,
            ),
            (
                format!(r#"{{"pid":1,"primary":{victim_json},"secondaries":[],"files":[]}}"#),
                true,
            ),
            (
                format!(
                    r#"{{"pid":1,"primary":null,"secondaries":[],"files":[{{"path":{config},"existed":true,"created_dirs":[]}}]}}"#
                ),
                false,
            ),
            (
                format!(
                    "{fake_tag}\n{{\"pid\":1,\"change\":null,\"files\":[{{\"path\":{config},\"existed\":true,\"created_dirs\":[],\"kept\":null}}]}}"
                ),
                false,
            ),
        ];
        for (plan, committed) in plans {
            let dir = tempfile::tempdir().unwrap();
            let root = dir.path();
            std::fs::create_dir_all(root.join(".git")).unwrap();
            std::fs::write(root.join(".git/config"), "[core]\n").unwrap();
            plant(
                root,
                &plan,
                committed,
                Some(b"[core]\n\tfsmonitor = sh evil\n"),
            );
            let disk = DiskBackend::open(root, DiskOptions::default()).unwrap();
            assert!(disk.take_resolved().is_empty(), "{plan}");
            assert!(
                victim.join("sub").is_dir(),
                "the directory outside stays: {plan}"
            );
            assert_eq!(
                std::fs::read(root.join(".git/config")).unwrap(),
                b"[core]\n",
                "{plan}"
            );
            assert!(
                root.join(".mountfs-tmp-journal-1-1/journal").is_file(),
                "left for the operator: {plan}"
            );
        }
    }

    /// Defence in depth (attack review of issue 41): even a plan sealed with the real key (as
    /// if it had leaked through an operator's mount over the data directory) that names a path
    /// inside `.git/` or a `..` puts nothing back and is left for the operator.
    #[tokio::test]
    async fn a_sealed_plan_naming_git_or_dotdot_is_not_acted_on() {
        for path in [".git/config", "../outside.txt", "a/../../outside.txt"] {
            let dir = tempfile::tempdir().unwrap();
            let root = dir.path();
            std::fs::create_dir_all(root.join(".git")).unwrap();
            std::fs::write(root.join(".git/config"), "[core]\n").unwrap();
            let keys = tempfile::tempdir().unwrap();
            let key = std::sync::Arc::new(super::RecoveryKey::in_dir(keys.path()).unwrap());
            let canonical = std::fs::canonicalize(root).unwrap();
            let seal = super::Seal::new(key.clone(), &canonical);
            let name = ".mountfs-tmp-journal-1-1";
            plant(root, "", false, Some(b"[core]\n\tfsmonitor = sh evil\n"));
            // The kept file is the planted one (its inode): without the path check, the
            // roll-back would put it back.
            let ino = std::os::unix::fs::MetadataExt::ino(
                &std::fs::metadata(root.join(name).join("a0")).unwrap(),
            );
            let body = format!(
                "{{\"pid\":1,\"change\":null,\"files\":[{{\"path\":{},\"existed\":true,\"created_dirs\":[],\"kept\":{{\"ino\":{ino},\"version\":null}}}}]}}",
                components(path)
            );
            std::fs::write(
                root.join(name).join("journal"),
                seal.sealed(b"plan", name, body.as_bytes()),
            )
            .unwrap();
            assert!(
                seal.open(
                    b"plan",
                    name.as_bytes(),
                    &std::fs::read(root.join(name).join("journal")).unwrap()
                )
                .is_some()
            );
            let disk = DiskBackend::open(
                root,
                DiskOptions {
                    recovery: Some(key),
                    ..DiskOptions::default()
                },
            )
            .unwrap();
            assert!(disk.take_resolved().is_empty(), "{path}");
            assert_eq!(
                std::fs::read(root.join(".git/config")).unwrap(),
                b"[core]\n"
            );
            assert!(root.join(name).join("journal").is_file(), "left: {path}");
        }
    }

    /// A genuine journal copied to another mount, or read with another key, is not acted on;
    /// in its own mount it still is. A kept file swapped for another is not put back.
    #[tokio::test]
    async fn a_genuine_journal_is_acted_on_only_in_its_own_mount_with_its_key() {
        let (one, two) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let keys = tempfile::tempdir().unwrap();
        let key = std::sync::Arc::new(super::RecoveryKey::in_dir(keys.path()).unwrap());
        let with_key = || DiskOptions {
            recovery: Some(key.clone()),
            ..DiskOptions::default()
        };
        for dir in [&one, &two] {
            std::fs::write(dir.path().join("f.txt"), "old").unwrap();
        }
        let a = DiskBackend::open_without_sweep(one.path(), with_key()).unwrap();
        let journal = one_written(&a, "/f.txt", b"new").await;
        let location = journal.location();
        let name = location.file_name().unwrap().to_owned();
        copy_dir(&location, &two.path().join(&name));
        std::fs::write(two.path().join("f.txt"), "two").unwrap();
        drop((journal, a));

        // Another mount: left.
        let b = DiskBackend::open(two.path(), with_key()).unwrap();
        assert!(b.take_resolved().is_empty());
        assert_eq!(std::fs::read(two.path().join("f.txt")).unwrap(), b"two");
        assert!(two.path().join(&name).is_dir());
        // Its own mount with another key (the default one of this process): left.
        let a = DiskBackend::open(one.path(), DiskOptions::default()).unwrap();
        assert!(a.take_resolved().is_empty());
        assert_eq!(std::fs::read(one.path().join("f.txt")).unwrap(), b"new");
        // A kept file swapped for another inode: not put back.
        let kept = location.join("a0");
        let bytes = std::fs::read(&kept).unwrap();
        std::fs::remove_file(&kept).unwrap();
        std::fs::write(&kept, b"planted").unwrap();
        let a = DiskBackend::open(one.path(), with_key()).unwrap();
        assert!(a.take_resolved().is_empty());
        assert_eq!(std::fs::read(one.path().join("f.txt")).unwrap(), b"new");
        // Its own mount, its key, its kept file: rolled back.
        std::fs::remove_file(&kept).unwrap();
        std::fs::hard_link(two.path().join(&name).join("a0"), &kept).unwrap();
        assert_eq!(std::fs::read(&kept).unwrap(), bytes);
        drop(a);
        let a = DiskBackend::open(one.path(), with_key()).unwrap();
        assert_eq!(a.take_resolved().len(), 1);
        assert_eq!(std::fs::read(one.path().join("f.txt")).unwrap(), b"old");
        assert_eq!(ours(one.path()), Vec::<String>::new());
    }

    /// Attack review of issue 41: a plan record larger than any this server writes is refused
    /// unread — even one whose tag verifies (as if the key had leaked) — and left for the
    /// operator; a change whose plan would be that large is refused before anything changes.
    #[tokio::test]
    async fn a_plan_larger_than_any_genuine_one_is_refused_unread() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("f.txt"), "planted").unwrap();
        let keys = tempfile::tempdir().unwrap();
        let key = std::sync::Arc::new(super::RecoveryKey::in_dir(keys.path()).unwrap());
        let canonical = std::fs::canonicalize(root).unwrap();
        let seal = super::Seal::new(key.clone(), &canonical);
        let name = ".mountfs-tmp-journal-1-1";
        plant(root, "", false, None);
        // A plan that creates f.txt (a roll-back would remove it), padded with JSON
        // whitespace to one byte more than a genuine plan can be.
        let mut body = format!(
            "{{\"pid\":1,\"change\":null,\"files\":[{{\"path\":{},\"existed\":false,\"created_dirs\":[],\"kept\":null}}]}}",
            components("f.txt")
        )
        .into_bytes();
        body.resize(MAX_PLAN_BYTES + 1, b' ');
        let journal = root.join(name).join("journal");
        std::fs::write(&journal, seal.sealed(b"plan", name, &body)).unwrap();
        let disk = DiskBackend::open(
            root,
            DiskOptions {
                recovery: Some(key.clone()),
                ..DiskOptions::default()
            },
        )
        .unwrap();
        assert!(disk.take_resolved().is_empty());
        assert_eq!(std::fs::read(root.join("f.txt")).unwrap(), b"planted");
        assert!(journal.is_file(), "left for the operator");

        // Unread: a sparse record of any size is refused from its size alone.
        std::fs::File::options()
            .write(true)
            .open(&journal)
            .unwrap()
            .set_len(1 << 40)
            .unwrap();
        let journal_dir = open_journal_dir(
            &Dir::open_ambient_dir(root, cap_std::ambient_authority()).unwrap(),
            OsStr::new(name),
        )
        .unwrap();
        let refused = read_record(&journal_dir, PLAN, MAX_PLAN_RECORD).unwrap_err();
        assert!(is_too_large(&refused), "{refused}");

        // The writing side: a plan over the bound is refused, with what to do.
        let long = vec![b'x'; 250];
        let file = || PlanFile {
            path: vec![long.clone(); 16],
            existed: false,
            created_dirs: Vec::new(),
            kept: None,
        };
        let plan = Plan {
            pid: 1,
            change: None,
            files: (0..MAX_PLAN_BYTES / (16 * 250 * 3))
                .map(|_| file())
                .collect(),
        };
        let error = write_plan(&journal_dir, &seal, name, &plan).unwrap_err();
        assert!(error.to_string().contains("in parts"), "{error}");
    }
}
