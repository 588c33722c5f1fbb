//! The query vocabulary of the `Backend` trait: what a `glob` or `grep` asks every backend
//! ([`GlobQuery`], [`GrepQuery`]), compiled once from the tool's arguments — the one glob
//! matcher (used by `glob` and by `grep`'s file filter, CONTRACT §4) and the one grep pattern
//! that every engine matches lines with — plus how much of the answer a backend must keep
//! ([`GrepCollect`], [`LineWindowBudget`]) and the cancellation it obeys ([`SearchControl`]).
//!
//! What a search finds (`backend::GrepFile` …) is the backend's; the in-memory search over a
//! whole text is `backend::whole_file`'s, the streamed disk search `backend::disk`'s.

use std::sync::Arc;

use globset::{Glob, GlobBuilder};
use grep_matcher::Matcher;
use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use thiserror::Error;

use crate::ground::limits::{DEFAULT_GREP_MAX_LINE_BYTES, RegexLimits};
use crate::ground::path::VirtualPath;

/// A pattern that could not be compiled. Display is the agent-facing text.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PatternError {
    /// A bad glob.
    #[error(
        "Error: Invalid glob pattern '{pattern}': {reason}. Use *, ?, [abc], {{a,b}} and ** (e.g. **/*.rs)"
    )]
    Glob {
        /// The pattern as given.
        pattern: String,
        /// The parser's complaint.
        reason: String,
    },
    /// A regular expression whose compiled form exceeds `--regex-size-limit`.
    #[error(
        "Error: Regex pattern is too large: compiled, it exceeds the limit of {limit} bytes (--regex-size-limit). Use a simpler pattern (smaller repetition counts such as {{1000}}, fewer alternatives, ASCII classes like [0-9] instead of \\d), or set literal=true to search for the text as written"
    )]
    TooLarge {
        /// The bound.
        limit: usize,
    },
    /// A bad regular expression.
    #[error(
        "Error: Invalid regex pattern: {reason}\nEscape special characters (e.g. \\( or \\.), or set literal=true to search for the text as written"
    )]
    Regex {
        /// The parser's complaint.
        reason: String,
    },
}

/// A compiled glob (see CONTRACT §4): `*`, `?`, `[…]`, `{a,b}`, `**`. A pattern without `/`
/// matches the file name at any depth; one with `/` matches the path relative to the searched
/// directory. `*` never crosses `/`; `**` does.
#[derive(Debug, Clone)]
pub struct GlobMatcher {
    pattern: String,
    matcher: globset::GlobMatcher,
    by_name: bool,
    /// Prepended to relative paths before matching: the composite uses it when a mount lies
    /// below the searched directory (`mnt/` + path inside the mount).
    prefix: String,
}

impl GlobMatcher {
    /// Compiles a pattern.
    pub fn new(pattern: &str) -> Result<Self, PatternError> {
        let trimmed = pattern.trim_start_matches('/');
        let by_name = !trimmed.contains('/');
        let glob: Glob = GlobBuilder::new(trimmed)
            .literal_separator(true)
            .backslash_escape(true)
            .empty_alternates(true)
            .build()
            .map_err(|e| PatternError::Glob {
                pattern: pattern.to_owned(),
                reason: e.kind().to_string(),
            })?;
        Ok(Self {
            pattern: pattern.to_owned(),
            matcher: glob.compile_matcher(),
            by_name,
            prefix: String::new(),
        })
    }

    /// The pattern as given.
    pub fn pattern(&self) -> &str {
        &self.pattern
    }

    /// The same matcher for paths that sit under `prefix` (relative, no leading `/`).
    pub fn with_prefix(&self, prefix: &str) -> Self {
        let mut clone = self.clone();
        let prefix = prefix.trim_matches('/');
        if !prefix.is_empty() {
            clone.prefix = format!("{}{prefix}/", self.prefix);
        }
        clone
    }

    /// Whether a file at `relative` (relative to the searched directory, no leading `/`)
    /// matches.
    pub fn matches_relative(&self, relative: &str) -> bool {
        if self.by_name {
            let name = relative.rsplit('/').next().unwrap_or(relative);
            return self.matcher.is_match(name);
        }
        if self.prefix.is_empty() {
            self.matcher.is_match(relative)
        } else {
            self.matcher.is_match(format!("{}{relative}", self.prefix))
        }
    }

    /// Whether `path` matches relative to `dir`. A file searched as itself (`path == dir`) is
    /// matched by its name.
    pub fn matches_path(&self, path: &VirtualPath, dir: &VirtualPath) -> bool {
        match path.relative_to(dir) {
            Some("") => path.file_name().is_some_and(|n| self.matches_relative(n)),
            Some(rel) => self.matches_relative(rel),
            None => false,
        }
    }
}

/// A compiled grep pattern: a regular expression in Rust `regex` syntax (linear time), or the
/// text as written when `literal`. Compiled once, here, into the line matcher every engine
/// uses: grep-searcher streams disk files through it, and the in-memory search asks it about
/// one line at a time. Lines are matched one at a time: `\n` never matches, `^`/`$` match at
/// each line's edges, and `$` also before a `\r\n`.
#[derive(Debug, Clone)]
pub struct GrepPattern {
    /// The pattern text given by the agent.
    pub text: String,
    /// Search the text as written.
    pub literal: bool,
    /// Ignore case.
    pub case_insensitive: bool,
    /// The compile and lazy-DFA bounds, applied by every engine that compiles the pattern.
    pub limits: RegexLimits,
    /// The longest line a search holds (`--grep-max-line-bytes`): a file with a longer line
    /// is reported as skipped, with [`GrepPattern::long_line_reason`].
    pub max_line_bytes: u64,
    /// `None` when the pattern can only match a line break, which no line holds.
    matcher: Option<RegexMatcher>,
    /// Every line match is also a match of [`Self::matcher`] in the whole text holding the
    /// line (see [`GrepPattern::may_match_in`]): false when the pattern has a text anchor
    /// (`\A`, `\z`, `(?-m)^`), which matches at a line's edges only when that line is alone.
    whole_text_prefilter: bool,
}

impl GrepPattern {
    /// Compiles the pattern under the default bounds.
    pub fn new(text: &str, literal: bool, case_insensitive: bool) -> Result<Self, PatternError> {
        Self::with_limits(text, literal, case_insensitive, RegexLimits::default())
    }

    /// Compiles the pattern; its compiled program may not exceed `limits.size_limit`
    /// ([`PatternError::TooLarge`]) and its lazy DFA caches at most `limits.dfa_size_limit`.
    pub fn with_limits(
        text: &str,
        literal: bool,
        case_insensitive: bool,
        limits: RegexLimits,
    ) -> Result<Self, PatternError> {
        let source = if literal {
            regex::escape(text)
        } else {
            text.to_owned()
        };
        let built = RegexMatcherBuilder::new()
            .case_insensitive(case_insensitive)
            .size_limit(limits.size_limit)
            .dfa_size_limit(limits.dfa_size_limit)
            // `^`/`$` at every line's edges, `$` also before `\r\n` (without `multi_line`,
            // crlf mode's `$` misses lines ending in a bare `\n`, and `^$` finds nothing).
            .multi_line(true)
            .line_terminator(Some(b'\n'))
            .crlf(true)
            .build(&source);
        let matcher = match built {
            Ok(matcher) => Some(matcher),
            // A pattern that can only match a line break never matches within one line.
            Err(error) if matches!(error.kind(), grep_regex::ErrorKind::NotAllowed(_)) => None,
            Err(error) => {
                return Err(PatternError::of_build(
                    &source,
                    case_insensitive,
                    limits,
                    &error,
                ));
            }
        };
        let whole_text_prefilter = matcher.is_some() && !has_text_anchor(&source, case_insensitive);
        Ok(Self {
            text: text.to_owned(),
            literal,
            case_insensitive,
            limits,
            max_line_bytes: DEFAULT_GREP_MAX_LINE_BYTES,
            matcher,
            whole_text_prefilter,
        })
    }

    /// The same pattern with another line bound (`--grep-max-line-bytes`).
    pub fn with_max_line_bytes(mut self, max_line_bytes: u64) -> Self {
        self.max_line_bytes = max_line_bytes;
        self
    }

    /// Why a file with a line over [`GrepPattern::max_line_bytes`] is skipped.
    pub fn long_line_reason(&self) -> String {
        format!(
            "a line longer than {} bytes (--grep-max-line-bytes); read it in windows with read_file",
            self.max_line_bytes
        )
    }

    /// The compiled line matcher, `None` when no line can match (see the field).
    pub fn line_matcher(&self) -> Option<&RegexMatcher> {
        self.matcher.as_ref()
    }

    /// The pattern's syntax tree in the language of the line matcher (the same flags), for
    /// those that derive something from it (the store's planner, the shell's target-side
    /// searches); `utf8: false` also accepts byte classes that match no UTF-8 text. `None` when
    /// no line can match or it cannot be parsed here.
    pub fn line_syntax(&self, utf8: bool) -> Option<regex_syntax::hir::Hir> {
        self.line_matcher()?;
        let source = if self.literal {
            regex_syntax::escape(&self.text)
        } else {
            self.text.clone()
        };
        regex_syntax::ParserBuilder::new()
            .case_insensitive(self.case_insensitive)
            .multi_line(true)
            .crlf(true)
            .line_terminator(b'\n')
            .utf8(utf8)
            .build()
            .parse(&source)
            .ok()
    }

    /// `false` only when no line of `text` (split as `split_lines` splits it) can match: one
    /// search of the whole text, which the matcher's literal prefilter runs at memchr speed,
    /// instead of one call per line. The matcher never matches a `\n`; its `^`/`$` match
    /// at each line's edges (also around a `\r`, crlf mode), its `\b` sees a line break as a
    /// non-word character as it sees a line's end. So a match inside one line is a match in
    /// the whole text, unless the pattern anchors to the text's edges (then: always `true`).
    pub fn may_match_in(&self, text: &str) -> bool {
        match &self.matcher {
            None => false,
            Some(_) if !self.whole_text_prefilter => true,
            Some(m) => m.is_match(text.as_bytes()).unwrap_or(true),
        }
    }

    /// The matcher to search a whole text with, when every line match is also a match of it in
    /// the whole text holding the line, at the same place (see [`GrepPattern::may_match_in`]);
    /// `None` when no line can match or the pattern anchors to the text's edges.
    pub fn whole_text_matcher(&self) -> Option<&RegexMatcher> {
        self.matcher.as_ref().filter(|_| self.whole_text_prefilter)
    }

    /// Whether one line (without its terminator) matches.
    pub fn is_match(&self, line: &str) -> bool {
        self.matcher
            .as_ref()
            .is_some_and(|m| m.is_match(line.as_bytes()).unwrap_or(false))
    }
}

/// Whether `source` (compiled as the line matcher compiles it) holds a look-around that only
/// the whole text's edges satisfy (`\A`, `\z`, `^`/`$` with multi-line turned off). `true`
/// when it cannot be parsed here (the safe answer).
fn has_text_anchor(source: &str, case_insensitive: bool) -> bool {
    use regex_syntax::hir::Look;
    let parsed = regex_syntax::ParserBuilder::new()
        .case_insensitive(case_insensitive)
        .multi_line(true)
        .crlf(true)
        .line_terminator(b'\n')
        .build()
        .parse(source);
    match parsed {
        Ok(hir) => {
            let looks = hir.properties().look_set();
            looks.contains(Look::Start) || looks.contains(Look::End)
        }
        Err(_) => true,
    }
}

impl PatternError {
    /// The agent-facing error for a pattern the line matcher refused. Its words are the
    /// `regex` crate's, as they always were: grep-regex quotes the pattern wrapped in its own
    /// group. Only this failure path parses the pattern a second time.
    fn of_build(
        source: &str,
        case_insensitive: bool,
        limits: RegexLimits,
        error: &grep_regex::Error,
    ) -> Self {
        let plain = regex::RegexBuilder::new(source)
            .case_insensitive(case_insensitive)
            .size_limit(limits.size_limit)
            .dfa_size_limit(limits.dfa_size_limit)
            .build();
        match plain {
            Err(regex::Error::CompiledTooBig(limit)) => Self::TooLarge { limit },
            Err(other) => Self::Regex {
                reason: other.to_string(),
            },
            // grep-regex's words for a program over `size_limit` (its error keeps the text only).
            Ok(_)
                if error
                    .to_string()
                    .starts_with("compiled regex exceeds size limit") =>
            {
                Self::TooLarge {
                    limit: limits.size_limit,
                }
            }
            Ok(_) => Self::Regex {
                reason: error.to_string(),
            },
        }
    }
}

/// A glob search below one directory.
#[derive(Debug, Clone)]
pub struct GlobQuery {
    /// The directory searched, in the backend's coordinates.
    pub dir: VirtualPath,
    /// The pattern, matched against paths relative to `dir` (see [`GlobMatcher`]).
    pub matcher: GlobMatcher,
    /// Cancellation and progress counts.
    pub control: SearchControl,
}

/// What a long search shares with its caller: a cancellation it checks between files (and
/// stops at, returning what it found so far), and counts the caller reports as progress.
/// `Default` is a search nobody cancels or watches.
#[derive(Debug, Clone, Default)]
pub struct SearchControl {
    cancel: Option<tokio_util::sync::CancellationToken>,
    counts: Arc<SearchCounts>,
    view: Option<Arc<dyn SearchView>>,
    /// Where the searched backend is mounted: directories it could not read are named with
    /// this prefix, as the agent sees them.
    mount: Option<VirtualPath>,
    /// The answer shows only the first this many matching files in path order (see
    /// [`SearchControl::first_files`]).
    first_files: Option<usize>,
}

/// What an overlay shows of the directory a disk search walks (issue 14): which of its files
/// and directories are hidden (deleted in the layer), and which ignore files the layer changed.
/// The disk walk skips hidden paths before it counts or windows anything (so pages of matches
/// are whole), and reads `.gitignore`/`.ignore`/`.git/info/exclude` as the view has them.
pub trait SearchView: Send + Sync + std::fmt::Debug {
    /// The base's file or directory at `path` (the walked backend's coordinates) is not part
    /// of the view, with everything below it.
    fn hides(&self, path: &VirtualPath) -> bool;

    /// The ignore file at `path` as the view has it.
    fn ignore_file(&self, path: &VirtualPath) -> ViewedFile;

    /// Nothing at or below the base's directory `dir` differs in the view: no entry hidden,
    /// no ignore file changed (the walk then reads it as if there were no view).
    fn untouched(&self, dir: &VirtualPath) -> bool;

    /// The walk read the ignore files of the base's directory `path` (`.ignore`, `.gitignore`,
    /// `.git/info/exclude`, as the view has them; `None` where there is none). The overlay
    /// keeps them for the directories above its layer's files, and judges those files by the
    /// very rules the walk applied to the base's, without reading anything again.
    fn saw_dir(&self, path: &VirtualPath, ignore_files: &[Option<Vec<u8>>; 3]);
}

/// An ignore file as a [`SearchView`] has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ViewedFile {
    /// As on disk.
    Base,
    /// Not there (deleted in the layer).
    Absent,
    /// The layer's content.
    Content(Arc<[u8]>),
}

/// Files looked at and files that matched so far, and the directories that could not be read.
#[derive(Debug, Default)]
struct SearchCounts {
    files: std::sync::atomic::AtomicU64,
    matched: std::sync::atomic::AtomicU64,
    unread: std::sync::Mutex<UnreadDirs>,
    /// A backend stopped after the first files asked for.
    more_files: std::sync::atomic::AtomicBool,
}

/// Directories a search could not read: the first [`UNREAD_DIRS_KEPT`] with why, and how many
/// in all (a tree of thousands of locked directories costs no more memory than twenty).
#[derive(Debug, Default)]
struct UnreadDirs {
    first: Vec<(VirtualPath, String)>,
    total: usize,
}

/// How many unreadable directories a search names; the rest are counted.
pub const UNREAD_DIRS_KEPT: usize = 20;

impl SearchControl {
    /// A search that stops when `cancel` is cancelled.
    pub fn cancelled_by(cancel: tokio_util::sync::CancellationToken) -> Self {
        Self {
            cancel: Some(cancel),
            counts: Arc::default(),
            view: None,
            mount: None,
            first_files: None,
        }
    }

    /// The same search, whose answer needs only the first `files` matching files in path order
    /// (a page of `files_with_matches` or `count`; see [`SearchControl::first_files`]).
    pub fn with_first_files(&self, files: usize) -> Self {
        Self {
            first_files: Some(files),
            ..self.clone()
        }
    }

    /// The same search, whose answer needs every matching file: what a backend that drops
    /// some of what the backends it wraps find (hidden, shadowed) asks of them.
    pub fn every_file(&self) -> Self {
        Self {
            first_files: None,
            ..self.clone()
        }
    }

    /// `Some(n)`: the answer needs only the first `n` matching files in path order. A backend
    /// that finds its files in path order may stop once it has found `n` (its own first `n`:
    /// the merged answer's first `n` are among those of each backend), and then says so with
    /// [`SearchControl::note_more_files`]. Every other backend searches everything, as without
    /// it; skipped files past the stop are not found.
    pub fn first_files(&self) -> Option<usize> {
        self.first_files
    }

    /// A backend stopped after the [`SearchControl::first_files`] it was asked for: more files
    /// may match, and how many is not known.
    pub fn note_more_files(&self) {
        self.counts
            .more_files
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether a backend stopped early (see [`SearchControl::note_more_files`]).
    pub fn more_files(&self) -> bool {
        self.counts
            .more_files
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The same search, of the backend mounted at `prefix` (nested mounts add up).
    pub fn within_mount(&self, prefix: &VirtualPath) -> Self {
        let mount = match &self.mount {
            Some(outer) => prefix.under(outer),
            None => prefix.clone(),
        };
        Self {
            mount: (!mount.is_root()).then_some(mount),
            ..self.clone()
        }
    }

    /// The directory `path` (the searched backend's coordinates) could not be read, for
    /// `reason`: its files were not searched, and the answer says so.
    pub fn note_unread_dir(&self, path: &VirtualPath, reason: String) {
        let path = match &self.mount {
            Some(prefix) => path.under(prefix),
            None => path.clone(),
        };
        let mut unread = self.counts.unread.lock().unwrap_or_else(|e| e.into_inner());
        unread.total += 1;
        if unread.first.len() < UNREAD_DIRS_KEPT {
            unread.first.push((path, reason));
        }
    }

    /// The directories the search could not read (at most [`UNREAD_DIRS_KEPT`], in path
    /// order, with why), and how many more it could not read.
    pub fn unread_dirs(&self) -> (Vec<(VirtualPath, String)>, usize) {
        let unread = self.counts.unread.lock().unwrap_or_else(|e| e.into_inner());
        let mut first = unread.first.clone();
        first.sort();
        let more = unread.total - first.len();
        (first, more)
    }

    /// The same search, walking the base of an overlay whose layer shows it as `view`.
    pub fn with_view(&self, view: Arc<dyn SearchView>) -> Self {
        Self {
            view: Some(view),
            ..self.clone()
        }
    }

    /// The same search without a view (for the overlay's layer).
    pub fn without_view(&self) -> Self {
        Self {
            view: None,
            ..self.clone()
        }
    }

    /// The overlay view the walk obeys, if any.
    pub fn view(&self) -> Option<&Arc<dyn SearchView>> {
        self.view.as_ref()
    }

    /// Whether the search must stop now.
    pub fn stopped(&self) -> bool {
        self.cancel.as_ref().is_some_and(|c| c.is_cancelled())
    }

    /// Resolves when the search is cancelled (never, for a search nobody cancels): what a
    /// backend waiting on one long step races it with.
    pub async fn cancelled(&self) {
        match &self.cancel {
            Some(cancel) => cancel.cancelled().await,
            None => std::future::pending().await,
        }
    }

    /// Counts one file looked at, and whether it matched.
    pub fn count_file(&self, matched: bool) {
        use std::sync::atomic::Ordering::Relaxed;
        self.counts.files.fetch_add(1, Relaxed);
        if matched {
            self.counts.matched.fetch_add(1, Relaxed);
        }
    }

    /// (files looked at, files that matched) so far.
    pub fn counts(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (
            self.counts.files.load(Relaxed),
            self.counts.matched.load(Relaxed),
        )
    }
}

/// How much of each matching file a grep must report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrepCollect {
    /// Only whether a file matches (a backend may stop at the first match).
    Files,
    /// The number of matching lines.
    Count,
    /// Matching lines with `context` lines around them.
    Lines {
        /// Context lines before and after each match.
        context: usize,
        /// How many of them the answer can show: lines past it are counted, not kept.
        window: LineWindowBudget,
    },
}

impl GrepCollect {
    /// Matching lines with `context` lines around them, every one kept.
    pub fn lines(context: usize) -> Self {
        Self::Lines {
            context,
            window: LineWindowBudget::UNBOUNDED,
        }
    }
}

/// Characters a content-mode entry takes in an answer besides its text (`  N: `, newline):
/// at least this many, which bounds how many entries an answer of a few characters can hold.
const MIN_ENTRY_CHARS: usize = 6;

/// Which reported lines (matches and context, in path order then line order) a content-mode
/// grep answer can show: entries `offset..offset + limit`, ending early once the entries from
/// `offset` on hold more than `chars` characters (the result cap). Backends keep only what can
/// fall in that window and count the rest, so memory follows the page, not the matches.
///
/// A file's first entry may sit anywhere up to `offset` (the files before it may report none),
/// so a backend keeps a file's entries from its first, except the first `skip`: a caller that
/// knows where the file starts (a single-file search) sets `skip` to spare them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineWindowBudget {
    /// Entries of each file known to lie before the window: counted, never kept.
    pub skip: usize,
    /// Entries skipped (`offset`).
    pub offset: usize,
    /// Entries shown at most (`head_limit`).
    pub limit: usize,
    /// Characters the shown entries may hold before the answer is cut.
    pub chars: usize,
}

impl LineWindowBudget {
    /// Keeps everything.
    pub const UNBOUNDED: Self = Self {
        skip: 0,
        offset: 0,
        limit: usize::MAX,
        chars: usize::MAX,
    };

    /// Counts entries only: keeps none.
    pub const COUNT_ONLY: Self = Self {
        skip: 0,
        offset: 0,
        limit: 0,
        chars: 0,
    };

    /// Most entries the window can span, counted from the first entry.
    pub fn max_entries(&self) -> usize {
        let by_chars = self.chars / MIN_ENTRY_CHARS + 1;
        self.offset.saturating_add(self.limit.min(by_chars))
    }
}

/// Characters a content-mode entry of `text` takes in the answer at least (its text as kept,
/// one character less for a cut line, plus the smallest frame): never more than it really
/// takes, so what is kept always reaches the cap when the matches do.
pub fn entry_chars(text: &str) -> usize {
    text.chars().count().saturating_add(MIN_ENTRY_CHARS - 1)
}

/// A content search below one directory.
#[derive(Debug, Clone)]
pub struct GrepQuery {
    /// The directory (or single file) searched, in the backend's coordinates.
    pub dir: VirtualPath,
    /// The compiled pattern.
    pub pattern: Arc<GrepPattern>,
    /// Only files whose path (relative to `dir`) matches this.
    pub file_filter: Option<GlobMatcher>,
    /// What to collect.
    pub collect: GrepCollect,
    /// Cancellation and progress counts.
    pub control: SearchControl,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_whole_text_search_rules_a_file_out_only_when_no_line_can_match() {
        let pattern = |text: &str| GrepPattern::new(text, false, false).unwrap();
        assert!(!pattern("foo").may_match_in("bar\nbaz\n"));
        assert!(pattern("foo").may_match_in("bar\nfoo\n"));
        // Line edges inside the text, with LF and CRLF endings.
        assert!(pattern("^b$").may_match_in("a\r\nb\r\nc"));
        assert!(pattern(r"z\b").may_match_in("xyz\nq"));
        // No match across a line break.
        assert!(!pattern(r"a\sb").may_match_in("a\nb\n"));
        // Anchored to the text's edges: every line is a text of its own when matched alone,
        // so the whole text cannot rule the file out.
        for anchored in [r"\Afoo", r"foo\z", "(?-m)^foo"] {
            assert!(pattern(anchored).may_match_in("x\nfoo\ny"), "{anchored}");
        }
    }

    #[test]
    fn pattern_without_slash_matches_the_name_at_any_depth() {
        let m = GlobMatcher::new("*.rs").unwrap();
        assert!(m.matches_relative("a.rs"));
        assert!(m.matches_relative("src/deep/a.rs"));
        assert!(!m.matches_relative("src/a.rsx"));
    }

    #[test]
    fn pattern_with_slash_matches_the_relative_path() {
        let m = GlobMatcher::new("src/*.rs").unwrap();
        assert!(m.matches_relative("src/a.rs"));
        assert!(!m.matches_relative("src/x/a.rs"));
        let m = GlobMatcher::new("**/*.{rs,toml}").unwrap();
        assert!(m.matches_relative("Cargo.toml"));
        assert!(m.matches_relative("a/b/c.rs"));
        let m = GlobMatcher::new("src/**").unwrap();
        assert!(m.matches_relative("src/a/b"));
    }

    #[test]
    fn prefix_places_a_nested_mount_under_the_search_root() {
        let m = GlobMatcher::new("mem/*.txt").unwrap().with_prefix("mem");
        assert!(m.matches_relative("a.txt"));
        assert!(!m.matches_relative("x/a.txt"));
    }

    #[test]
    fn bad_patterns_name_the_problem() {
        let e = GlobMatcher::new("a[").unwrap_err().to_string();
        assert!(e.starts_with("Error: Invalid glob pattern 'a['"), "{e}");
        let e = GrepPattern::new("(", false, false).unwrap_err().to_string();
        assert!(e.starts_with("Error: Invalid regex pattern: "), "{e}");
        assert!(e.contains("literal=true"), "{e}");
        assert!(GrepPattern::new("(", true, false).unwrap().is_match("a(b"));
    }

    #[test]
    fn a_pattern_over_the_size_limit_names_the_flag() {
        let small = RegexLimits {
            size_limit: 10_000,
            dfa_size_limit: 10_000,
        };
        let e = GrepPattern::with_limits("\\w{1000}", false, false, small)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("Error: Regex pattern is too large: compiled, it exceeds the limit of 10000 bytes (--regex-size-limit)."),
            "{e}"
        );
        // The same pattern fits the default bound, and a tiny DFA cache still matches.
        let p = GrepPattern::with_limits(
            "a[0-9]{3}z",
            false,
            false,
            RegexLimits {
                size_limit: 1 << 20,
                dfa_size_limit: 1,
            },
        )
        .unwrap();
        assert!(p.is_match("xa123z"));
        assert!(GrepPattern::new("\\w{100}", false, false).is_ok());
    }
}
