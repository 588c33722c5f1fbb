//! `glob` and `grep` on disk at ripgrep speed: our own parallel walk over directory handles,
//! ignore files (`.ignore`, `.gitignore`, `.git/info/exclude`) decided by the shared
//! [`ignore_rules`], and ripgrep's `grep-regex` and `grep-searcher`: a file of up to 64 KiB
//! (most source files) is read whole into the thread's reused buffer and searched as one slice,
//! a bigger one streamed (no file over that is loaded whole).
//!
//! Containment: the walk opens the searched directory beneath the root, then every directory
//! and file by its name in its already open parent directory with `O_NOFOLLOW` (directories
//! with `O_DIRECTORY`): nothing is reached through a symlink or `..`, so an entry swapped for
//! an outward symlink mid-walk is refused at its open (or `fstatat`) and never reported.
//!
//! Cost (issue 15): one `openat` and two `getdents64` per directory; entry types come from
//! the listing; ignore files are opened only where the listing shows them; glob stats only the
//! files that match (for their size and modification time).
//!
//! Results equal the memory backend's for the same tree: hidden files are included (only
//! `.git/` and our temporary files are skipped), matching is the shared [`GlobMatcher`] on the
//! path relative to the searched directory, binary files are detected by the same sniff of the
//! first 8 KiB, and lines are matched one at a time (a pattern cannot match across a line
//! break). Symlinks are not followed during the walk (as `rg` without `-L`).

mod ignore_files;

use std::ffi::{CStr, CString};
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, mpsc};

use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt};
use grep_matcher::LineTerminator;
use grep_regex::RegexMatcher;
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkMatch};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, RawDir};
use rustix::io::Errno;

use super::final_cr::{self, WithoutFinalCr};
use super::resolve::{self, Canonical, map_io};
use super::temp::is_temp_name;
use super::version;
use crate::ground::content;
use crate::ground::path::VirtualPath;
use crate::ground::search::{GlobMatcher, GrepPattern, SearchView, ViewedFile};
use crate::ground::text::encoding;
use crate::storage::backend::ignore_rules::{self, IGNORE_FILES, MAX_IGNORE_FILE_BYTES, Matchers};
use crate::storage::backend::{
    Entry, EntryKind, GlobQuery, GrepCollect, GrepFile, GrepQuery, GrepResults, Result,
    SearchControl, WindowedLines, kept_line_text,
};
use ignore_files::{IgnoreFiles, RuleLevel};

/// Threads of one walk: one per core (the machine's own parallelism), asked once (std reads
/// three cgroup files each time).
pub(super) fn walker_threads() -> usize {
    static THREADS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *THREADS.get_or_init(|| std::thread::available_parallelism().map_or(2, usize::from))
}

/// What a walk needs from the backend.
#[derive(Debug)]
pub(super) struct WalkContext<'a> {
    /// The mount root.
    pub(super) root: &'a Dir,
    /// [`pinned_path`] of the root: where the walker starts.
    pub(super) pinned_root: &'a Path,
    /// Honour `.gitignore` and friends.
    pub(super) use_ignore_files: bool,
}

/// Where a search starts.
enum Start {
    /// A directory: walk it.
    Directory(Canonical),
    /// A single file named directly: search it alone (like `rg PATTERN FILE`, even if ignored).
    File(Canonical),
    /// Nothing there.
    Missing,
}

fn start_of(root: &Dir, dir: &VirtualPath) -> Result<Start> {
    let canonical = resolve::canonicalize(root, dir, true)?;
    match root.metadata(canonical.path()) {
        Ok(meta) if meta.is_dir() => Ok(Start::Directory(canonical)),
        Ok(meta) if meta.is_file() => Ok(Start::File(canonical)),
        Ok(_) => Ok(Start::Missing),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Start::Missing),
        Err(e) => Err(map_io(e, dir)),
    }
}

/// A file the walk found, handed to the visitor: the directory it is in (open), its name
/// there, and its path relative to the searched directory.
pub(super) struct FoundFile<'a> {
    dir: BorrowedFd<'a>,
    name: &'a CStr,
    /// Relative to the searched directory, `/`-separated, valid UTF-8.
    inner: &'a str,
}

impl FoundFile<'_> {
    /// The path as the agent names it; `None` if it is not a valid virtual path.
    fn path(&self, dir: &VirtualPath) -> Option<VirtualPath> {
        dir.join_relative(self.inner).ok()
    }

    /// Opens the file for reading: this very name in this very directory, never through a
    /// symlink, non-blocking (a FIFO swapped in cannot hang us).
    fn open(&self) -> Option<std::fs::File> {
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        rustix::fs::openat(self.dir, self.name, flags, Mode::empty())
            .ok()
            .map(std::fs::File::from)
    }

    /// The file's metadata, without following a symlink.
    fn stat(&self) -> Option<rustix::fs::Stat> {
        rustix::fs::statat(self.dir, self.name, AtFlags::SYMLINK_NOFOLLOW).ok()
    }
}

/// A directory waiting to be read: its name in its (open) parent, or already open (the start).
struct DirWork {
    open: DirOpen,
    /// Relative to the mount root (for ignore rules).
    relative: PathBuf,
    /// Relative to the searched directory, `/`-separated (`""` for the start).
    inner: String,
    /// The ignore rules of its ancestors, deepest first.
    rules: Option<Arc<RuleLevel>>,
}

enum DirOpen {
    Open(OwnedFd),
    Child { parent: Arc<OwnedFd>, name: CString },
}

/// The queue of directories shared by the walker threads.
struct Queue {
    state: Mutex<QueueState>,
    ready: Condvar,
}

struct QueueState {
    work: Vec<DirWork>,
    /// Threads reading a directory now (each may add more work).
    busy: usize,
}

/// Bytes of directory entries read per `getdents64` call.
const DIRENT_BUFFER: usize = 32 * 1024;

/// Walks the directory `dir` (canonical `start`) on [`walker_threads`] threads and calls
/// `visit` (built once per thread) with each regular file whose relative path is valid UTF-8.
///
/// Each directory is opened once, by name in its already open parent (`O_NOFOLLOW |
/// O_DIRECTORY`), and read with `getdents64`; its listing says which entries are files and
/// directories (no `stat` per entry) and whether it holds ignore files, which are then opened
/// the same way. Nothing is reached through a symlink or `..`, so the walk cannot leave the
/// start directory's tree, whatever is renamed or swapped meanwhile.
fn walk_files<V>(
    context: &WalkContext<'_>,
    dir: &VirtualPath,
    start: &Canonical,
    control: &SearchControl,
    make_visitor: impl Fn() -> V + Sync,
) -> Result<()>
where
    V: FnMut(FoundFile<'_>),
{
    let start_path = start.path();
    // cap-std's handle may be `O_PATH` (unreadable): `.` is reopened from it for reading, a
    // new open file description (a `dup` would share the read position with other walks).
    let start_handle = context
        .root
        .open_dir(&start_path)
        .map_err(|e| map_io(e, dir))?;
    let start_fd = rustix::fs::openat(
        &start_handle,
        c".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| map_io(e.into(), dir))?;
    let view = control.view();
    let ignore = context.use_ignore_files.then_some(IgnoreFiles {
        pinned_root: context.pinned_root,
        view,
    });
    // The rules of the directories above the start, down to the mount root.
    let rules = match &ignore {
        Some(files) if start_path != Path::new(".") => {
            // Through a symlink, the directories above the start are not the searched path's.
            let tell_view = Path::new(dir.as_str().trim_start_matches('/')) == start_path;
            files.ancestors(context.root, &start_path, tell_view)
        }
        _ => None,
    };
    let relative = if start_path == Path::new(".") {
        PathBuf::new()
    } else {
        start_path
    };
    let queue = Queue {
        state: Mutex::new(QueueState {
            work: vec![DirWork {
                open: DirOpen::Open(start_fd),
                relative,
                inner: String::new(),
                rules,
            }],
            busy: 0,
        }),
        ready: Condvar::new(),
    };
    let worker = || {
        let mut visit = make_visitor();
        let mut buffer = Vec::with_capacity(DIRENT_BUFFER);
        let mut listing = Listing::default();
        while let Some(work) = queue.next() {
            let found = if control.stopped() {
                Vec::new()
            } else {
                let walk = Walk {
                    ignore: ignore.as_ref(),
                    view,
                    dir,
                    control,
                };
                read_dir(work, &walk, &mut buffer, &mut listing, &mut visit)
            };
            queue.done(found);
        }
    };
    let threads = walker_threads();
    std::thread::scope(|scope| {
        for _ in 1..threads {
            scope.spawn(worker);
        }
        worker();
    });
    Ok(())
}

impl Queue {
    /// The next directory to read, waiting while others may still add some; `None` when the
    /// walk is over.
    fn next(&self) -> Option<DirWork> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(work) = state.work.pop() {
                state.busy += 1;
                return Some(work);
            }
            if state.busy == 0 {
                return None;
            }
            state = self.ready.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// One directory read: its subdirectories join the queue.
    fn done(&self, found: Vec<DirWork>) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.busy -= 1;
        let wake = !found.is_empty() || state.busy == 0;
        state.work.extend(found);
        drop(state);
        if wake {
            self.ready.notify_all();
        }
    }
}

/// One directory's entries: names (in one buffer) and types from `getdents64`.
#[derive(Default)]
struct Listing {
    names: Vec<u8>,
    /// (end of the name in `names`, including its NUL; type)
    entries: Vec<(usize, FileType)>,
}

/// What every directory of one walk is read with.
struct Walk<'a> {
    ignore: Option<&'a IgnoreFiles<'a>>,
    /// An overlay's view of the tree: what its layer hides, and its ignore files.
    view: Option<&'a Arc<dyn SearchView>>,
    /// The searched directory.
    dir: &'a VirtualPath,
    control: &'a SearchControl,
}

/// Reads one directory: visits its files and returns its subdirectories.
fn read_dir<V>(
    work: DirWork,
    walk: &Walk<'_>,
    buffer: &mut Vec<u8>,
    listing: &mut Listing,
    visit: &mut V,
) -> Vec<DirWork>
where
    V: FnMut(FoundFile<'_>),
{
    let fd = match work.open {
        DirOpen::Open(fd) => fd,
        DirOpen::Child { parent, name } => {
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            match rustix::fs::openat(&parent, name.as_c_str(), flags, Mode::empty()) {
                Ok(fd) => fd,
                Err(errno) => {
                    // Gone, or swapped for a file or a symlink since the listing: as if the
                    // listing had not shown it. Anything else (no permission, no file
                    // handle left) leaves files unsearched, and the answer names it.
                    if ![Errno::NOENT, Errno::NOTDIR, Errno::LOOP].contains(&errno) {
                        note_unread(walk, &work.inner, errno);
                    }
                    return Vec::new();
                }
            }
        }
    };
    // One of the server's own directories (a bind mount of it, say): as if absent.
    if super::own_files::active()
        && rustix::fs::fstat(&fd).is_ok_and(|stat| super::own_files::is_own_stat(&stat))
    {
        return Vec::new();
    }
    listing.names.clear();
    listing.entries.clear();
    let mut has = [false; 3];
    {
        let mut raw = RawDir::new(&fd, buffer.spare_capacity_mut());
        while let Some(entry) = raw.next() {
            let entry = match entry {
                Ok(entry) => entry,
                Err(errno) => {
                    note_unread(walk, &work.inner, errno);
                    break;
                }
            };
            let name = entry.file_name().to_bytes_with_nul();
            match name {
                b".\0" | b"..\0" => continue,
                b".ignore\0" => has[0] = true,
                b".gitignore\0" => has[1] = true,
                b".git\0" => {
                    has[2] = matches!(entry.file_type(), FileType::Directory | FileType::Unknown);
                }
                _ => {}
            }
            listing.names.extend_from_slice(name);
            listing
                .entries
                .push((listing.names.len(), entry.file_type()));
        }
    }
    let fd = Arc::new(fd);
    let ignore = walk.ignore;
    // The view's say in this directory: none where the layer changed nothing at or below it
    // (most directories), so that their entries are not looked up one by one.
    let here = walk
        .view
        .and_then(|_| walk.dir.join_relative(&work.inner).ok());
    let view = match (walk.view, &here) {
        (Some(view), Some(path)) if !view.untouched(path) => Some(view),
        _ => None,
    };
    // A view may hold ignore files the listing does not show.
    let rules = match ignore {
        Some(files) if has.iter().any(|&h| h) || view.is_some() => {
            let seen_as = view.and(here.clone());
            files
                .level(
                    &fd,
                    &work.relative,
                    has,
                    work.rules.clone(),
                    seen_as.as_ref(),
                )
                .or(work.rules)
        }
        _ => work.rules,
    };
    let mut subdirs = Vec::new();
    let mut inner = work.inner;
    let inner_len = inner.len();
    let mut start = 0;
    for &(end, file_type) in &listing.entries {
        if walk.control.stopped() {
            break;
        }
        let bytes = &listing.names[start..end];
        start = end;
        let Ok(name) = CStr::from_bytes_with_nul(bytes) else {
            continue;
        };
        let Ok(text) = name.to_str() else {
            continue;
        };
        if text == ".git" || is_temp_name(std::ffi::OsStr::new(text)) {
            continue;
        }
        let file_type = if file_type == FileType::Unknown {
            match rustix::fs::statat(&*fd, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(stat) => FileType::from_raw_mode(stat.st_mode),
                Err(_) => continue,
            }
        } else {
            file_type
        };
        let is_dir = file_type == FileType::Directory;
        if !is_dir && file_type != FileType::RegularFile {
            continue;
        }
        if let Some(rules) = &rules
            && let Some(files) = ignore
            && files.is_ignored(rules, &work.relative.join(text), is_dir)
        {
            continue;
        }
        inner.truncate(inner_len);
        if inner_len > 0 {
            inner.push('/');
        }
        inner.push_str(text);
        // What an overlay's layer deleted is skipped before anything counts it.
        if let Some(view) = view
            && walk
                .dir
                .join_relative(&inner)
                .is_ok_and(|path| view.hides(&path))
        {
            continue;
        }
        if is_dir {
            subdirs.push(DirWork {
                open: DirOpen::Child {
                    parent: fd.clone(),
                    name: name.to_owned(),
                },
                relative: work.relative.join(text),
                inner: inner.clone(),
                rules: rules.clone(),
            });
        } else {
            visit(FoundFile {
                dir: fd.as_fd(),
                name,
                inner: &inner,
            });
        }
    }
    subdirs
}

/// Tells the search that the directory at `inner` (relative to the searched one) could not be
/// read.
fn note_unread(walk: &Walk<'_>, inner: &str, errno: Errno) {
    if let Ok(path) = walk.dir.join_relative(inner) {
        let error = io::Error::from(errno);
        walk.control.note_unread_dir(
            &path,
            format!(
                "could not read this directory: {error}; the files below it were not searched \
                 (check its permissions, or the server's open-file limit)"
            ),
        );
    }
}

/// `/proc/self/fd/N` for the root handle: a path that names this very directory even if its
/// host path is renamed or replaced while we run. `None` where there is no such file system.
pub(super) fn pinned_path(handle: &Dir) -> Option<PathBuf> {
    use std::os::fd::AsRawFd;
    let path = PathBuf::from(format!("/proc/self/fd/{}", handle.as_raw_fd()));
    std::fs::metadata(&path)
        .is_ok_and(|m| m.is_dir())
        .then_some(path)
}

/// Files below `query.dir` matching the glob, with their metadata taken through the root.
pub(super) fn glob(context: &WalkContext<'_>, query: &GlobQuery) -> Result<Vec<Entry>> {
    let start = match start_of(context.root, &query.dir)? {
        Start::Missing => return Ok(Vec::new()),
        Start::File(canonical) => {
            if !query.matcher.matches_path(&query.dir, &query.dir) {
                return Ok(Vec::new());
            }
            return Ok(file_entry(context.root, &canonical.path(), &query.dir)
                .into_iter()
                .collect());
        }
        Start::Directory(canonical) => canonical,
    };
    let (sender, receiver) = mpsc::channel();
    walk_files(context, &query.dir, &start, &query.control, || {
        let sender = sender.clone();
        let matcher: &GlobMatcher = &query.matcher;
        let dir = &query.dir;
        let control = &query.control;
        move |found: FoundFile<'_>| {
            // Matched on the relative path first: only matches are stat'ed (for their size and
            // modification time) and named.
            let matched = matcher.matches_relative(found.inner);
            control.count_file(matched);
            if matched
                && let Some(path) = found.path(dir)
                && let Some(stat) = found.stat()
                && !super::own_files::is_own_stat(&stat)
                && let Some(entry) = stat_entry(&stat, path)
            {
                let _ = sender.send(entry);
            }
        }
    })?;
    drop(sender);
    Ok(receiver.into_iter().collect())
}

/// The entry of a regular file from its `stat`; `None` if it is not (or no longer) one.
fn stat_entry(stat: &rustix::fs::Stat, path: VirtualPath) -> Option<Entry> {
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return None;
    }
    let modified = std::time::UNIX_EPOCH.checked_add(std::time::Duration::new(
        u64::try_from(stat.st_mtime).ok()?,
        u32::try_from(stat.st_mtime_nsec).ok()?,
    ));
    Some(Entry {
        path,
        kind: EntryKind::File,
        size: version::size_of(stat),
        modified,
        // Birth time does not survive atomic replacement (see the module doc).
        created: None,
    })
}

/// The entry of a regular file, stat'ed beneath the root without following a last symlink;
/// `None` if it is not (or no longer) a regular file inside the root.
fn file_entry(root: &Dir, relative: &Path, path: &VirtualPath) -> Option<Entry> {
    use cap_std::fs::MetadataExt;
    let meta = root.symlink_metadata(relative).ok()?;
    if super::own_files::is_own(meta.dev(), meta.ino()) {
        return None;
    }
    meta.is_file().then(|| Entry {
        path: path.clone(),
        kind: EntryKind::File,
        size: meta.len(),
        modified: meta
            .modified()
            .ok()
            .map(cap_std::time::SystemTime::into_std),
        // Birth time does not survive atomic replacement (see the module doc).
        created: None,
    })
}

/// Files below `query.dir` (or the file itself) with matching lines.
pub(super) fn grep(context: &WalkContext<'_>, query: &GrepQuery) -> Result<Vec<GrepFile>> {
    // The pattern was compiled once, with the tool's arguments (see `GrepPattern`).
    let Some(matcher) = query.pattern.line_matcher() else {
        // A pattern that can only match a line break never matches within one line.
        return Ok(Vec::new());
    };
    let start = match start_of(context.root, &query.dir)? {
        Start::Missing => return Ok(Vec::new()),
        Start::File(canonical) => {
            if let Some(filter) = &query.file_filter
                && !filter.matches_path(&query.dir, &query.dir)
            {
                return Ok(Vec::new());
            }
            let mut searcher = Searchers::new(query.collect, &query.pattern);
            let found = open_beneath(context.root, &canonical.path()).and_then(|file| {
                search_file(file, &mut searcher, matcher, query.collect, || {
                    Some(query.dir.clone())
                })
            });
            return Ok(found.into_iter().collect());
        }
        Start::Directory(canonical) => canonical,
    };
    let (sender, receiver) = mpsc::channel();
    walk_files(context, &query.dir, &start, &query.control, || {
        let sender = sender.clone();
        let matcher = matcher.clone();
        let mut searcher = Searchers::new(query.collect, &query.pattern);
        move |found: FoundFile<'_>| {
            if let Some(filter) = &query.file_filter
                && !filter.matches_relative(found.inner)
            {
                return;
            }
            let file = found.open().and_then(|file| {
                search_file(file, &mut searcher, &matcher, query.collect, || {
                    found.path(&query.dir)
                })
            });
            query.control.count_file(file.is_some());
            if let Some(file) = file {
                let _ = sender.send(file);
            }
        }
    })?;
    drop(sender);
    // Trimmed to the answer's window as files arrive (the walk above runs on its own threads
    // until every file is searched; the channel holds what they found meanwhile).
    let mut results = GrepResults::new(query.collect);
    for file in receiver {
        results.push(file);
    }
    Ok(results.finish())
}

/// The searchers of one thread: the plain one, and those that first decode a file whose head
/// is not valid UTF-8: from the legacy encoding its head suggests, or else lossily as UTF-8
/// (U+FFFD, as the memory backend does), so that `.` and friends match the same characters on
/// every backend. The decoding ones are built when such a file is met (each holds a 64 KiB
/// buffer, and most searches meet none).
///
/// All hold at most the pattern's `max_line_bytes` (plus the context lines around it) in their
/// buffer: a file with a longer line is reported as skipped instead of read into memory (beyond
/// the [`SLICE_BYTES`] of a small file, which is searched as one slice only when it is itself
/// within the bound).
pub(in crate::storage::backend) struct Searchers {
    plain: Searcher,
    /// Searchers that decode first, by `encoding_rs` name: a legacy encoding (windows-1252,
    /// Shift_JIS, …) or [`LOSSY_UTF8`] (a UTF-16 file with a BOM is decoded by `plain` itself).
    decoding: Vec<(&'static str, Searcher)>,
    /// What the searchers are built from.
    builder: SearcherBuilder,
    /// The buffer bound, to tell its error from others.
    heap_limit: usize,
    /// The pattern's longest line: a whole text no longer than this cannot hold a longer one.
    max_line: u64,
    /// A small file read whole (see [`SLICE_BYTES`]), kept for the thread's next one.
    whole: Vec<u8>,
    /// Why a file over it is skipped.
    long_line_reason: String,
}

/// The decoder of a text that is not valid UTF-8 and suggests no legacy encoding.
const LOSSY_UTF8: &str = "utf-8";

impl Searchers {
    /// Where the searcher that decodes `name` (an `encoding_rs` name) first is, built if it
    /// was not; `None` if grep-searcher does not know the encoding.
    fn decoding_index(&mut self, name: &'static str) -> Option<usize> {
        if let Some(index) = self.decoding.iter().position(|(known, _)| *known == name) {
            return Some(index);
        }
        let encoding = grep_searcher::Encoding::new(name).ok()?;
        let searcher = self.builder.clone().encoding(Some(encoding)).build();
        self.decoding.push((name, searcher));
        Some(self.decoding.len() - 1)
    }

    /// The searcher for a text: `plain` when `decode` is `None`, else the one decoding that
    /// encoding, or lossy UTF-8 if grep-searcher does not know it.
    fn chosen(&mut self, decode: Option<&'static str>) -> &mut Searcher {
        let index = decode.and_then(|name| {
            self.decoding_index(name)
                .or_else(|| self.decoding_index(LOSSY_UTF8))
        });
        match index.and_then(|index| self.decoding.get_mut(index)) {
            Some((_, searcher)) => searcher,
            None => &mut self.plain,
        }
    }

    pub(in crate::storage::backend) fn new(collect: GrepCollect, pattern: &GrepPattern) -> Self {
        let context = match collect {
            GrepCollect::Lines { context, .. } => context,
            GrepCollect::Files | GrepCollect::Count => 0,
        };
        // The searcher's buffer holds a whole line plus the context before it; its bound is
        // the line limit, raised by 4 KiB for each context line (a file whose context lines are
        // longer than that may be skipped too: the reason names the flag to raise).
        let max_line = usize::try_from(pattern.max_line_bytes).unwrap_or(usize::MAX);
        let heap_limit = max_line.saturating_add(context.saturating_mul(4096)).max(1);
        let mut builder = SearcherBuilder::new();
        // Lines end at `\n` or `\r\n`, as `split_lines` sees them; the collector strips `\r`.
        builder
            .line_terminator(LineTerminator::crlf())
            .line_number(true)
            .binary_detection(BinaryDetection::none())
            .before_context(context)
            .after_context(context)
            .heap_limit(Some(heap_limit));
        let plain = builder.build();
        Self {
            plain,
            decoding: Vec::new(),
            builder,
            heap_limit,
            max_line: pattern.max_line_bytes,
            whole: Vec::new(),
            long_line_reason: pattern.long_line_reason(),
        }
    }
}

/// Opens `relative` beneath the root for reading (non-blocking, so a FIFO swapped in cannot
/// hang us).
fn open_beneath(root: &Dir, relative: &Path) -> Option<std::fs::File> {
    let mut options = OpenOptions::new();
    options
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32);
    Some(root.open_with(relative, &options).ok()?.into_std())
}

/// Files up to this size are read whole (into the thread's reused buffer, with no read past
/// the size `fstat` gave) and searched as one slice; larger ones are streamed. Most source files
/// are smaller: for them this saves the streamed searcher's copies and the read that only finds
/// the end.
const SLICE_BYTES: usize = 64 * 1024;

/// Skips `file` unless it is a regular text file, and searches it; `path` names it in the
/// answer (asked only when it has a match).
fn search_file(
    mut file: std::fs::File,
    searcher: &mut Searchers,
    matcher: &RegexMatcher,
    collect: GrepCollect,
    path: impl FnOnce() -> Option<VirtualPath>,
) -> Option<GrepFile> {
    let stat = rustix::fs::fstat(&file).ok()?;
    if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::RegularFile
        || super::own_files::is_own_stat(&stat)
    {
        return None;
    }
    let size = version::size_of(&stat);
    if size > SLICE_BYTES as u64 {
        return search_reader(file, size, searcher, matcher, collect, path);
    }
    let mut whole = std::mem::take(&mut searcher.whole);
    let mut nothing = io::empty();
    let found = read_small(&mut file, size, &mut whole)
        .ok()
        .and_then(|ended| {
            let rest: &mut dyn Read = if ended { &mut nothing } else { &mut file };
            search_head(
                &mut whole, ended, rest, size, searcher, matcher, collect, path,
            )
        });
    searcher.whole = whole;
    found
}

/// Reads a file of `size` bytes (`fstat`'s word) into `buffer`, up to [`SLICE_BYTES`]; `true`
/// when that is all of it: `size` bytes read (a file that grew since is searched as it was
/// then, as a search a moment earlier would have), or the end met first. A size of 0 is not
/// taken at its word (procfs and some FUSE file systems report 0 for files with content): such
/// a file is read to its end.
fn read_small(file: &mut std::fs::File, size: u64, buffer: &mut Vec<u8>) -> io::Result<bool> {
    buffer.clear();
    buffer.reserve(SLICE_BYTES);
    while buffer.len() < SLICE_BYTES {
        // Into the spare capacity (at least what is left of SLICE_BYTES); rustix counts it in.
        let read = match rustix::io::read(&*file, rustix::buffer::spare_capacity(buffer)) {
            Ok(read) => read,
            Err(Errno::INTR) => continue,
            Err(errno) => return Err(errno.into()),
        };
        if read == 0 {
            return Ok(true);
        }
        if size > 0 && buffer.len() as u64 >= size {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Searches the content `reader` gives (a regular file of `size` bytes when it was opened)
/// as [`search_file`] does: the same binary sniff, encoding choice, line bound and answer. The
/// shell backend streams a big file of its target through it in bounded chunks, so its answers
/// are a disk mount's and its memory is bounded the same way.
pub(in crate::storage::backend) fn search_reader(
    mut reader: impl Read,
    size: u64,
    searcher: &mut Searchers,
    matcher: &RegexMatcher,
    collect: GrepCollect,
    path: impl FnOnce() -> Option<VirtualPath>,
) -> Option<GrepFile> {
    let mut head = Vec::with_capacity(content::SNIFF_BYTES);
    (&mut reader)
        .take(content::SNIFF_BYTES as u64)
        .read_to_end(&mut head)
        .ok()?;
    let ended = head.len() < content::SNIFF_BYTES;
    search_head(
        &mut head,
        ended,
        &mut reader,
        size,
        searcher,
        matcher,
        collect,
        path,
    )
}

/// Searches a text whose first bytes are `head` (at least its first [`content::SNIFF_BYTES`],
/// or all of it when `ended`) and whose rest `rest` gives.
///
/// A whole text no longer than the line bound is searched as one slice, ended as
/// [`WithoutFinalCr`] ends a stream; anything else is streamed through that reader, with the
/// buffer bound that skips a file with a longer line.
#[allow(clippy::too_many_arguments)]
fn search_head(
    head: &mut Vec<u8>,
    ended: bool,
    rest: &mut dyn Read,
    size: u64,
    searcher: &mut Searchers,
    matcher: &RegexMatcher,
    collect: GrepCollect,
    path: impl FnOnce() -> Option<VirtualPath>,
) -> Option<GrepFile> {
    let sniff = &head[..head.len().min(content::SNIFF_BYTES)];
    if content::looks_binary(sniff) {
        return None;
    }
    let valid_utf8 = match std::str::from_utf8(sniff) {
        Ok(_) => true,
        // Only a character cut by the end of the head: still valid so far.
        Err(error) => error.error_len().is_none(),
    };
    let utf16 = encoding::utf16_bom(sniff).is_some();
    // A UTF-16 file with a BOM is decoded by the plain searcher (its BOM sniffing); a legacy
    // encoding guessed from the head by a searcher decoding it, so that the pattern matches the
    // text read_file shows.
    let whole = (sniff.len() as u64) >= size;
    let heap_limit = searcher.heap_limit;
    let in_one_slice = ended && head.len() as u64 <= searcher.max_line;
    let decode = match valid_utf8 || utf16 {
        true => None,
        false => {
            Some(encoding::legacy_of_head(sniff, whole).map_or(LOSSY_UTF8, |legacy| legacy.name()))
        }
    };
    let chosen = searcher.chosen(decode);
    let mut sink = Collector::new(collect, utf16);
    let searched = if in_one_slice {
        // Lines as the other backends' searchers split them (a final lone `\r`, see final_cr).
        if !utf16 {
            final_cr::end_as_split_lines(head);
        }
        chosen.search_slice(matcher, head, &mut sink)
    } else {
        let reader = io::Cursor::new(&head[..]).chain(rest);
        let reader: Box<dyn Read + '_> = match utf16 {
            true => Box::new(reader),
            false => Box::new(WithoutFinalCr::new(reader)),
        };
        chosen.search_reader(matcher, reader, &mut sink)
    };
    if let Err(error) = searched {
        // grep-searcher's words for a line that outgrew the buffer bound.
        let over_limit =
            error.to_string() == format!("configured allocation limit ({heap_limit}) exceeded");
        if !over_limit {
            return None;
        }
        return Some(GrepFile::skipped(
            path()?,
            searcher.long_line_reason.clone(),
        ));
    }
    if sink.match_count == 0 {
        return None;
    }
    Some(GrepFile {
        path: path()?,
        match_count: match collect {
            GrepCollect::Files => 1,
            _ => sink.match_count,
        },
        entries: sink.lines.entries,
        lines_from: sink.window_skip.min(sink.lines.entries),
        lines: sink.lines.lines,
        skipped: None,
    })
}

/// Collects what [`GrepCollect`] asks for from grep-searcher's callbacks, keeping only the
/// lines the answer's window can reach.
struct Collector {
    collect: GrepCollect,
    match_count: usize,
    lines: WindowedLines,
    window_skip: usize,
    /// Whether a line without a line break (the last) loses a final `\r` too: for UTF-16
    /// text, which [`WithoutFinalCr`] does not see (it reads bytes), so the line shown is
    /// still `split_lines`'.
    strip_unended_cr: bool,
}

impl Collector {
    fn new(collect: GrepCollect, strip_unended_cr: bool) -> Self {
        let window = match collect {
            GrepCollect::Lines { window, .. } => window,
            GrepCollect::Files | GrepCollect::Count => {
                crate::storage::backend::LineWindowBudget::UNBOUNDED
            }
        };
        Self {
            collect,
            match_count: 0,
            lines: WindowedLines::new(window),
            window_skip: window.skip,
            strip_unended_cr,
        }
    }

    fn push(&mut self, number: Option<u64>, bytes: &[u8], is_match: bool) {
        let number = number.and_then(|n| usize::try_from(n).ok()).unwrap_or(0);
        self.lines.push(number, is_match, || {
            // A `\r` before the line break is part of it; a last line's own final `\r` is
            // text (as `split_lines` leaves it once [`WithoutFinalCr`] made the end).
            let bytes = match bytes.strip_suffix(b"\n") {
                Some(line) => line.strip_suffix(b"\r").unwrap_or(line),
                None if self.strip_unended_cr => bytes.strip_suffix(b"\r").unwrap_or(bytes),
                None => bytes,
            };
            // Enough bytes for the characters kept, whatever their width: a long line is
            // never copied whole.
            let head = &bytes[..bytes
                .len()
                .min(4 * crate::storage::backend::GREP_KEPT_LINE_CHARS)];
            kept_line_text(&String::from_utf8_lossy(head))
        });
    }
}

impl Sink for Collector {
    type Error = io::Error;

    fn matched(&mut self, _: &Searcher, found: &SinkMatch<'_>) -> Result<bool, io::Error> {
        self.match_count += 1;
        match self.collect {
            GrepCollect::Files => Ok(false),
            GrepCollect::Count => Ok(true),
            GrepCollect::Lines { .. } => {
                self.push(found.line_number(), found.bytes(), true);
                Ok(true)
            }
        }
    }

    fn context(&mut self, _: &Searcher, context: &SinkContext<'_>) -> Result<bool, io::Error> {
        self.push(context.line_number(), context.bytes(), false);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_with(bytes: &[u8]) -> (tempfile::NamedTempFile, std::fs::File) {
        let mut named = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut named, bytes).unwrap();
        let file = std::fs::File::open(named.path()).unwrap();
        (named, file)
    }

    #[test]
    fn a_small_file_is_read_whole_and_a_big_one_up_to_the_slice_bound() {
        let mut buffer = Vec::new();
        for len in [0, 1, 8191, 8192, 8193, SLICE_BYTES] {
            let text: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
            let (_named, mut file) = file_with(&text);
            assert!(
                read_small(&mut file, len as u64, &mut buffer).unwrap(),
                "{len}"
            );
            assert_eq!(buffer, text, "{len}");
        }
        // Over the bound: the first SLICE_BYTES, and not said to be whole (the rest is streamed).
        let text = vec![b'x'; SLICE_BYTES + 10];
        let (_named, mut file) = file_with(&text);
        assert!(!read_small(&mut file, text.len() as u64, &mut buffer).unwrap());
        assert_eq!(buffer.len(), SLICE_BYTES);
        let mut rest = Vec::new();
        file.read_to_end(&mut rest).unwrap();
        assert_eq!(rest.len(), 10);
    }

    #[test]
    fn a_file_that_changed_size_since_its_stat_is_read_as_it_is_now() {
        let mut buffer = Vec::new();
        // Shorter than the size given (truncated since): the end met first, all of it read.
        let (_named, mut file) = file_with(b"short");
        assert!(read_small(&mut file, 100, &mut buffer).unwrap());
        assert_eq!(buffer, b"short");
        // Longer (grown since): at least the size given, and whole as far as it was read.
        let (_named, mut file) = file_with(b"grown since");
        assert!(read_small(&mut file, 5, &mut buffer).unwrap());
        assert!(buffer.starts_with(b"grown") && b"grown since".starts_with(&buffer));
        // A size of 0 (what procfs and some FUSE file systems say of files with content): read
        // to the end, and past the slice bound left to the stream.
        let (_named, mut file) = file_with(b"said to be empty");
        assert!(read_small(&mut file, 0, &mut buffer).unwrap());
        assert_eq!(buffer, b"said to be empty");
        let text = vec![b'z'; SLICE_BYTES + 1];
        let (_named, mut file) = file_with(&text);
        assert!(!read_small(&mut file, 0, &mut buffer).unwrap());
        assert_eq!(buffer.len(), SLICE_BYTES);
    }
}
