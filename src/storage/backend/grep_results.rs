//! What a grep gathers, the same for every backend: the matching lines of each file
//! ([`GrepFile`], [`GrepLine`]), cut to the characters an answer can show, and trimmed to the
//! answer's window while the search runs ([`WindowedLines`], [`GrepResults`],
//! [`trim_to_window`]), so that many files with many matches hold one page, not all.

use super::*;

/// Most characters of one grep line a backend keeps: one more than `grep` shows, so the tool
/// can tell that the line was cut.
pub const GREP_KEPT_LINE_CHARS: usize = 2001;

/// Keeps the lines of one file that can fall inside a [`LineWindowBudget`], counting all.
///
/// The file's first entry may sit at any global index up to `offset` (files before it may hold
/// none), so the lines kept are the file's first `offset + limit`, ending after the entry at
/// which the characters from local index `offset` on pass `chars`: whatever the files before
/// it, the window never reaches further into this file.
#[derive(Debug)]
pub struct WindowedLines {
    window: LineWindowBudget,
    /// Entries seen, kept or not.
    pub entries: usize,
    /// The kept entries: consecutive, from entry [`LineWindowBudget::skip`] on.
    pub lines: Vec<GrepLine>,
    chars_from_offset: usize,
    full: bool,
}

impl WindowedLines {
    /// An empty collection for `window`.
    pub fn new(window: LineWindowBudget) -> Self {
        Self {
            window,
            entries: 0,
            lines: Vec::new(),
            chars_from_offset: 0,
            full: false,
        }
    }

    /// Whether a further entry would be counted only.
    pub fn is_full(&self) -> bool {
        self.full
    }

    /// Counts one entry and keeps it (text cut at [`GREP_KEPT_LINE_CHARS`]) while the window
    /// can still reach it. `text` is called only for a kept entry.
    pub fn push(&mut self, number: usize, is_match: bool, text: impl FnOnce() -> String) {
        let index = self.entries;
        self.entries += 1;
        if index < self.window.skip {
            return;
        }
        if self.full || index >= self.window.max_entries() {
            self.full = true;
            return;
        }
        let text = text();
        if index >= self.window.offset {
            self.chars_from_offset = self.chars_from_offset.saturating_add(entry_chars(&text));
            if self.chars_from_offset > self.window.chars {
                self.full = true;
            }
        }
        self.lines.push(GrepLine {
            number,
            text,
            is_match,
        });
    }
}

/// Cuts `text` to at most [`GREP_KEPT_LINE_CHARS`] characters.
pub fn kept_line_text(text: &str) -> String {
    match text.char_indices().nth(GREP_KEPT_LINE_CHARS) {
        Some((end, _)) => text[..end].to_owned(),
        None => text.to_owned(),
    }
}

/// Drops, from `files` sorted by path, every kept line past the end of `window` (the lines
/// stay counted in [`GrepFile::entries`]): what no answer page can show is not held while the
/// rest of a search runs.
pub fn trim_to_window(files: &mut [GrepFile], window: LineWindowBudget) {
    let end = window.max_entries();
    // Global index of the current file's first entry.
    let mut start = 0usize;
    let mut chars = 0usize;
    let mut ended = false;
    for file in files.iter_mut() {
        if ended {
            file.lines = Vec::new();
            continue;
        }
        let first = start.saturating_add(file.lines_from);
        let mut keep = 0usize;
        for line in &file.lines {
            let index = first + keep;
            if index >= end || chars > window.chars {
                ended = true;
                break;
            }
            if index >= window.offset {
                chars = chars.saturating_add(entry_chars(&line.text));
            }
            keep += 1;
        }
        if keep < file.lines.len() {
            file.lines.truncate(keep);
            file.lines.shrink_to_fit();
            ended = true;
        } else {
            let unkept_from = first + file.lines.len();
            // Lines the backend stopped keeping inside the window's reach: it stopped at the
            // window's end.
            if unkept_from < start.saturating_add(file.entries) && unkept_from >= window.offset {
                ended = true;
            }
        }
        start = start.saturating_add(file.entries);
    }
}

/// Gathers the files one grep finds, trimming kept lines to the answer's window as they
/// arrive (in any order) so that many files with many matches hold one page, not all.
#[derive(Debug)]
pub struct GrepResults {
    collect: GrepCollect,
    files: Vec<GrepFile>,
    kept_lines: usize,
    trim_at: usize,
    /// Files that matched (not skipped).
    matched: usize,
}

impl GrepResults {
    /// An empty set for a grep collecting `collect`.
    pub fn new(collect: GrepCollect) -> Self {
        let trim_at = match collect {
            GrepCollect::Lines { window, .. } => window.max_entries().saturating_mul(2).max(4096),
            GrepCollect::Files | GrepCollect::Count => usize::MAX,
        };
        Self {
            collect,
            files: Vec::new(),
            kept_lines: 0,
            trim_at,
            matched: 0,
        }
    }

    /// How many of the files added matched (those skipped left out).
    pub fn matched(&self) -> usize {
        self.matched
    }

    /// Adds one file's result.
    pub fn push(&mut self, file: GrepFile) {
        self.kept_lines = self.kept_lines.saturating_add(file.lines.len());
        self.matched += usize::from(file.skipped.is_none());
        self.files.push(file);
        if self.kept_lines > self.trim_at
            && let GrepCollect::Lines { window, .. } = self.collect
        {
            self.files.sort_by(|a, b| a.path.cmp(&b.path));
            trim_to_window(&mut self.files, window);
            self.kept_lines = self.files.iter().map(|f| f.lines.len()).sum();
        }
    }

    /// The files found, in no particular order.
    pub fn finish(self) -> Vec<GrepFile> {
        self.files
    }
}

/// One line reported by grep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrepLine {
    /// 1-based line number.
    pub number: usize,
    /// The line, without terminator.
    pub text: String,
    /// A match (true) or a context line (false).
    pub is_match: bool,
}

/// The matches in one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrepFile {
    /// The file, in the answering backend's coordinates.
    pub path: VirtualPath,
    /// Number of matching lines.
    pub match_count: usize,
    /// Reported lines in file order (empty unless [`GrepCollect::Lines`]); only those that can
    /// fall in the answer's window (see [`LineWindowBudget`]).
    pub lines: Vec<GrepLine>,
    /// How many lines (matches and context) the file reports in all, kept or not.
    pub entries: usize,
    /// Which of those `lines[0]` is (0-based): the entries before it were counted only.
    pub lines_from: usize,
    /// Set when the file was not searched, with the reason (e.g. a line over the line limit):
    /// `match_count` is then 0.
    pub skipped: Option<String>,
}

impl GrepFile {
    /// A file left unsearched, and why.
    pub fn skipped(path: VirtualPath, reason: String) -> Self {
        Self {
            path,
            match_count: 0,
            lines: Vec::new(),
            entries: 0,
            lines_from: 0,
            skipped: Some(reason),
        }
    }
}
