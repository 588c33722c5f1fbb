//! `glob` and `grep` on disk at ripgrep speed, with ripgrep's own crates: `ignore` for the
//! parallel walk (`.gitignore`, `.ignore`, `.git/info/exclude`), `grep-regex` and
//! `grep-searcher` for streaming search (no file is loaded whole).
//!
//! Containment: the walk starts from `/proc/self/fd/N` of a directory handle opened beneath the
//! root, never from a host path string, and follows no symlinks. Every file it reports is then
//! re-opened (grep) or re-stat'ed (glob) through the root handle, so an entry reached through a
//! directory swapped for an outward symlink mid-walk is refused at that step and never reported.
//!
//! Results equal the memory backend's for the same tree: hidden files are included (only
//! `.git/` and our temporary files are skipped), matching is the shared [`GlobMatcher`] on the
//! path relative to the searched directory, binary files are detected by the same sniff of the
//! first 8 KiB, and lines are matched one at a time (a pattern cannot match across a line
//! break). Symlinks are not followed during the walk (as `rg` without `-L`).

use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::mpsc;

use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt};
use grep_matcher::LineTerminator;
use grep_regex::RegexMatcher;
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkMatch};
use ignore::{WalkBuilder, WalkState};

use super::resolve::{self, Canonical, map_io};
use super::temp::is_temp_name;
use super::version;
use crate::backend::ignore_rules::{self, IGNORE_FILES, MAX_IGNORE_FILE_BYTES, Matchers};
use crate::backend::{
    Entry, EntryKind, GlobQuery, GrepCollect, GrepFile, GrepQuery, GrepResults, Result,
    SearchControl, WindowedLines, kept_line_text,
};
use crate::content;
use crate::path::VirtualPath;
use crate::search::{GlobMatcher, GrepPattern, SearchView, ViewedFile};
use crate::text::encoding;

/// Threads of one walk: one per core (the machine's own parallelism).
pub(super) fn walker_threads() -> usize {
    std::thread::available_parallelism().map_or(2, usize::from)
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

/// A file the walk found: where it is beneath the root and as the agent names it.
struct FoundFile {
    relative: PathBuf,
    path: VirtualPath,
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

/// Walks the directory `dir` (canonical `start`) in parallel and calls `visit` (built once per
/// thread) with each regular file whose name is a valid virtual path.
fn walk_files<V>(
    context: &WalkContext<'_>,
    dir: &VirtualPath,
    start: &Canonical,
    control: &SearchControl,
    make_visitor: impl Fn() -> V + Sync,
) -> Result<()>
where
    V: FnMut(FoundFile) + Send,
{
    let pinned_root = context.pinned_root;
    let start_path = start.path();
    let walk_root = if start_path == Path::new(".") {
        pinned_root.to_path_buf()
    } else {
        pinned_root.join(start_path)
    };
    let mut builder = WalkBuilder::new(&walk_root);
    // `ignore` would open ignore files itself, by host path: following symlinks out of the
    // mount, blocking on FIFOs, and chasing a `.git` file's `gitdir:` anywhere on the host.
    // So it reads none; [`IgnoreRules`] reads them through the root handle instead.
    let view = control.view().cloned();
    let rules = if context.use_ignore_files {
        let root = context.root.try_clone().map_err(|e| map_io(e, dir))?;
        Some(std::sync::Arc::new(IgnoreRules::new(
            root,
            pinned_root.to_path_buf(),
            view.clone(),
        )))
    } else {
        None
    };
    let view_root = walk_root.clone();
    let view_dir = dir.clone();
    builder
        .standard_filters(false)
        .hidden(false)
        .parents(false)
        .follow_links(false)
        .require_git(false)
        .threads(walker_threads())
        .filter_entry(move |entry| {
            let name = entry.file_name();
            if entry.depth() > 0 && (name == ".git" || is_temp_name(name)) {
                return false;
            }
            // What an overlay's layer deleted is skipped before anything counts it.
            if let Some(view) = &view
                && entry.depth() > 0
                && let Some(path) = entry
                    .path()
                    .strip_prefix(&view_root)
                    .ok()
                    .and_then(Path::to_str)
                    .and_then(|inner| view_dir.join_relative(inner).ok())
                && view.hides(&path)
            {
                return false;
            }
            match &rules {
                Some(rules) if entry.depth() > 0 => {
                    !rules.is_ignored(entry.path(), entry.file_type().is_some_and(|t| t.is_dir()))
                }
                _ => true,
            }
        });
    let _ = start;
    builder.build_parallel().run(|| {
        let mut visit = make_visitor();
        let walk_root = &walk_root;
        Box::new(move |entry| {
            // A cancelled search stops every walker thread at its next entry.
            if control.stopped() {
                return WalkState::Quit;
            }
            let Ok(entry) = entry else {
                return WalkState::Continue;
            };
            if !entry.file_type().is_some_and(|t| t.is_file()) {
                return WalkState::Continue;
            }
            let (Ok(relative), Ok(inner)) = (
                entry.path().strip_prefix(pinned_root),
                entry.path().strip_prefix(walk_root),
            ) else {
                return WalkState::Continue;
            };
            let Some(inner_text) = inner.to_str() else {
                return WalkState::Continue;
            };
            let Ok(path) = dir.join_relative(inner_text) else {
                return WalkState::Continue;
            };
            visit(FoundFile {
                relative: relative.to_path_buf(),
                path,
            });
            WalkState::Continue
        })
    });
    Ok(())
}

/// `.ignore`, `.gitignore` and `.git/info/exclude` matchers per directory, each file opened
/// beneath the root handle (non-blocking, regular files only, bounded), or as an overlay's
/// view has it, cached for one walk.
struct IgnoreRules {
    root: Dir,
    pinned_root: PathBuf,
    view: Option<std::sync::Arc<dyn SearchView>>,
    cache: std::sync::Mutex<std::collections::HashMap<PathBuf, Matchers>>,
}

impl IgnoreRules {
    fn new(root: Dir, pinned_root: PathBuf, view: Option<std::sync::Arc<dyn SearchView>>) -> Self {
        Self {
            root,
            pinned_root,
            view,
            cache: std::sync::Mutex::default(),
        }
    }

    /// The content of a regular file beneath the root (as the view has it), `None` for
    /// anything else.
    fn read_regular(&self, relative: &Path) -> Option<Vec<u8>> {
        if let Some(view) = &self.view {
            let path = VirtualPath::root().join_relative(relative.to_str()?).ok()?;
            match view.ignore_file(&path) {
                ViewedFile::Base => {}
                ViewedFile::Absent => return None,
                ViewedFile::Content(content) => {
                    let end = content.len().min(MAX_IGNORE_FILE_BYTES as usize);
                    return Some(content[..end].to_vec());
                }
            }
        }
        let meta = self.root.symlink_metadata(relative).ok()?;
        if !meta.is_file() {
            return None;
        }
        let mut options = OpenOptions::new();
        options
            .read(true)
            .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32);
        let file = self.root.open_with(relative, &options).ok()?.into_std();
        let stat = rustix::fs::fstat(&file).ok()?;
        if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::RegularFile {
            return None;
        }
        let mut content = Vec::new();
        file.take(MAX_IGNORE_FILE_BYTES)
            .read_to_end(&mut content)
            .ok()?;
        Some(content)
    }

    /// The matchers of one directory (root-relative), in kind order: `.ignore`, `.gitignore`,
    /// `.git/info/exclude` (only when `.git` is a real directory).
    fn matchers(&self, dir: &Path) -> Matchers {
        if let Some(found) = self
            .cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(dir)
        {
            return found.clone();
        }
        let build = |relative: PathBuf| {
            let content = self.read_regular(&relative)?;
            ignore_rules::matcher(&self.pinned_root.join(dir), &content)
        };
        let git_is_dir = self
            .root
            .symlink_metadata(dir.join(".git"))
            .is_ok_and(|m| m.is_dir());
        let found = std::sync::Arc::new([
            build(dir.join(IGNORE_FILES[0])),
            build(dir.join(IGNORE_FILES[1])),
            git_is_dir
                .then(|| build(dir.join(IGNORE_FILES[2])))
                .flatten(),
        ]);
        self.cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(dir.to_path_buf(), found.clone());
        found
    }

    /// Whether the walked `path` (under the pinned root) is ignored: per kind, the deepest
    /// directory with a matching rule decides; `.ignore` beats `.gitignore` beats exclude.
    fn is_ignored(&self, path: &Path, is_dir: bool) -> bool {
        let Ok(relative) = path.strip_prefix(&self.pinned_root) else {
            return false;
        };
        let mut levels = Vec::new();
        let mut dir = relative.parent();
        while let Some(d) = dir {
            levels.push(self.matchers(d));
            dir = d.parent();
        }
        ignore_rules::is_ignored(&levels, path, is_dir)
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
        let root = context.root;
        let dir = &query.dir;
        let control = &query.control;
        move |found: FoundFile| {
            let matched = matcher.matches_path(&found.path, dir);
            control.count_file(matched);
            if matched && let Some(entry) = file_entry(root, &found.relative, &found.path) {
                let _ = sender.send(entry);
            }
        }
    })?;
    drop(sender);
    Ok(receiver.into_iter().collect())
}

/// The entry of a regular file, stat'ed beneath the root without following a last symlink;
/// `None` if it is not (or no longer) a regular file inside the root.
fn file_entry(root: &Dir, relative: &Path, path: &VirtualPath) -> Option<Entry> {
    let meta = root.symlink_metadata(relative).ok()?;
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
            let found = search_file(
                context.root,
                &mut searcher,
                matcher,
                query.collect,
                &canonical.path(),
                &query.dir,
            );
            return Ok(found.into_iter().collect());
        }
        Start::Directory(canonical) => canonical,
    };
    let (sender, receiver) = mpsc::channel();
    walk_files(context, &query.dir, &start, &query.control, || {
        let sender = sender.clone();
        let matcher = matcher.clone();
        let mut searcher = Searchers::new(query.collect, &query.pattern);
        let root = context.root;
        move |found: FoundFile| {
            if let Some(filter) = &query.file_filter
                && !filter.matches_path(&found.path, &query.dir)
            {
                return;
            }
            let file = search_file(
                root,
                &mut searcher,
                &matcher,
                query.collect,
                &found.relative,
                &found.path,
            );
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

/// The two searchers of one thread: the plain one, and one that first decodes invalid UTF-8
/// lossily (U+FFFD, as the memory backend does) for files whose head is not valid UTF-8, so
/// that `.` and friends match the same characters on every backend.
///
/// Both hold at most the pattern's `max_line_bytes` (plus the context lines around it) in their
/// buffer: a file with a longer line is reported as skipped instead of read into memory.
struct Searchers {
    plain: Searcher,
    lossy: Searcher,
    /// Searchers that decode a legacy encoding (windows-1252, Shift_JIS, …) first, built when a
    /// file in one is met (a UTF-16 file with a BOM is decoded by `plain` itself).
    legacy: Vec<(&'static str, Searcher)>,
    /// What the searchers are built from.
    builder: SearcherBuilder,
    /// The buffer bound, to tell its error from others.
    heap_limit: usize,
    /// Why a file over it is skipped.
    long_line_reason: String,
}

impl Searchers {
    /// The searcher that decodes `name` (an `encoding_rs` name) first; `None` if
    /// grep-searcher does not know it.
    fn legacy(&mut self, name: &'static str) -> Option<&mut Searcher> {
        let index = match self.legacy.iter().position(|(known, _)| *known == name) {
            Some(index) => index,
            None => {
                let encoding = grep_searcher::Encoding::new(name).ok()?;
                let searcher = self.builder.clone().encoding(Some(encoding)).build();
                self.legacy.push((name, searcher));
                self.legacy.len() - 1
            }
        };
        self.legacy.get_mut(index).map(|(_, searcher)| searcher)
    }

    fn new(collect: GrepCollect, pattern: &GrepPattern) -> Self {
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
        let lossy = builder
            .clone()
            .encoding(grep_searcher::Encoding::new("utf-8").ok())
            .build();
        Self {
            plain,
            lossy,
            legacy: Vec::new(),
            builder,
            heap_limit,
            long_line_reason: pattern.long_line_reason(),
        }
    }
}

/// Opens `relative` beneath the root (non-blocking, so a FIFO swapped in cannot hang us),
/// skips it unless it is a regular text file, and searches it.
fn search_file(
    root: &Dir,
    searcher: &mut Searchers,
    matcher: &RegexMatcher,
    collect: GrepCollect,
    relative: &Path,
    path: &VirtualPath,
) -> Option<GrepFile> {
    let mut options = OpenOptions::new();
    options
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32);
    let file = root.open_with(relative, &options).ok()?.into_std();
    let stat = rustix::fs::fstat(&file).ok()?;
    if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::RegularFile {
        return None;
    }
    let mut head = Vec::with_capacity(content::SNIFF_BYTES);
    (&file)
        .take(content::SNIFF_BYTES as u64)
        .read_to_end(&mut head)
        .ok()?;
    if content::looks_binary(&head) {
        return None;
    }
    let valid_utf8 = match std::str::from_utf8(&head) {
        Ok(_) => true,
        // Only a character cut by the end of the head: still valid so far.
        Err(error) => error.error_len().is_none(),
    };
    // A UTF-16 file with a BOM is decoded by the plain searcher (its BOM sniffing); a legacy
    // encoding guessed from the head by a searcher decoding it, so that the pattern matches the
    // text read_file shows.
    let whole = (head.len() as u64) >= version::size_of(&stat);
    let chosen = if valid_utf8 || encoding::utf16_bom(&head).is_some() {
        &mut searcher.plain
    } else if let Some(found) =
        encoding::legacy_of_head(&head, whole).and_then(|legacy| searcher.legacy(legacy.name()))
    {
        found
    } else {
        &mut searcher.lossy
    };
    let reader = io::Cursor::new(head).chain(file);
    let mut sink = Collector::new(collect);
    if let Err(error) = chosen.search_reader(matcher, reader, &mut sink) {
        // grep-searcher's words for a line that outgrew the buffer bound.
        let over_limit = error.to_string()
            == format!(
                "configured allocation limit ({}) exceeded",
                searcher.heap_limit
            );
        return over_limit
            .then(|| GrepFile::skipped(path.clone(), searcher.long_line_reason.clone()));
    }
    (sink.match_count > 0).then(|| GrepFile {
        path: path.clone(),
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
}

impl Collector {
    fn new(collect: GrepCollect) -> Self {
        let window = match collect {
            GrepCollect::Lines { window, .. } => window,
            GrepCollect::Files | GrepCollect::Count => crate::backend::LineWindowBudget::UNBOUNDED,
        };
        Self {
            collect,
            match_count: 0,
            lines: WindowedLines::new(window),
            window_skip: window.skip,
        }
    }

    fn push(&mut self, number: Option<u64>, bytes: &[u8], is_match: bool) {
        let number = number.and_then(|n| usize::try_from(n).ok()).unwrap_or(0);
        self.lines.push(number, is_match, || {
            let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
            let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
            // Enough bytes for the characters kept, whatever their width: a long line is
            // never copied whole.
            let head = &bytes[..bytes.len().min(4 * crate::backend::GREP_KEPT_LINE_CHARS)];
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
