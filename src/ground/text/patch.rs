//! Unified diffs read back in: parsing a patch (as `diff -u` and `git diff` print one) into per-file
//! hunks, and applying the hunks of one file to its text.
//!
//! Owns the patch grammar (`---`/`+++` headers with git's `a/` `b/` prefixes stripped,
//! `/dev/null` for creations and deletions, `@@ -l,s +l,s @@` hunks read by their counts, ` `/`-`/
//! `+` rows, `\ No newline at end of file`, git's header-only sections for empty files) and the
//! matching rule: a hunk must match exactly, at its stated line or — like `patch` — shifted by as
//! few lines as possible when earlier text moved. Reading the files, checking the session may
//! change them and writing all-or-nothing are left to `tools/apply_patch.rs`.

use std::fmt;

use thiserror::Error;

use super::numbered::format_numbered;

/// Lines of the file shown around the first line of a hunk that did not match.
const MISMATCH_CONTEXT_LINES: usize = 2;

/// Why a patch could not be read. The Display text is what the agent reads.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PatchError {
    /// The text holds no `---`/`+++` file header.
    #[error(
        "Error: Invalid patch: no file changes found. Give a unified diff with '--- a/path' and '+++ b/path' header lines followed by '@@ -l,s +l,s @@' hunks (as `git diff` or `diff -u` print them)"
    )]
    Empty,
    /// A malformed line, with its 1-based line number in the patch.
    #[error(
        "Error: Invalid patch: line {line}: {reason}. Fix the patch and retry; nothing was changed"
    )]
    Syntax {
        /// 1-based line of the patch.
        line: usize,
        /// What is wrong and what was expected.
        reason: String,
    },
}

/// What one row of a hunk does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowKind {
    /// ` `: present before and after.
    Context,
    /// `-`: only before.
    Removed,
    /// `+`: only after.
    Added,
}

/// One row of a hunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HunkRow {
    /// Context, removed or added.
    pub kind: RowKind,
    /// The line without its tag and without `'\n'` (a `'\r'` of a CRLF line stays).
    pub text: String,
    /// Followed by `\ No newline at end of file`.
    pub no_newline: bool,
}

/// One `@@` hunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hunk {
    /// The `@@ … @@` line as written (for error messages).
    pub header: String,
    /// Old start line (1-based; the line after which to insert when `old_len` is 0).
    pub old_start: usize,
    /// Old line count.
    pub old_len: usize,
    /// New start line.
    pub new_start: usize,
    /// New line count.
    pub new_len: usize,
    /// The rows in order.
    pub rows: Vec<HunkRow>,
}

/// The changes a patch makes to one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilePatch {
    /// The path on the `---` line, prefixes stripped; `None` for `/dev/null` (a creation).
    pub old_path: Option<String>,
    /// The path on the `+++` line, prefixes stripped; `None` for `/dev/null` (a deletion).
    pub new_path: Option<String>,
    /// The hunks, in order.
    pub hunks: Vec<Hunk>,
}

/// A hunk that does not match the file: which one, where, and what the file has there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HunkMismatch {
    /// 1-based number of the hunk in its file.
    pub hunk_number: usize,
    /// How many hunks the file has.
    pub hunk_count: usize,
    /// The hunk's `@@` line.
    pub header: String,
    /// 1-based line of the file where the first differing line was expected.
    pub line: usize,
    /// The line the hunk expected there; `None` when the hunk extends past the end of the file.
    pub expected: Option<String>,
    /// The file's lines around `line`, numbered like `read_file`; empty when the file is empty.
    pub actual: String,
}

impl fmt::Display for HunkMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "hunk {} of {} ({}) does not match: ",
            self.hunk_number, self.hunk_count, self.header
        )?;
        match &self.expected {
            Some(expected) => write!(f, "line {} should be {expected:?}", self.line)?,
            None => write!(
                f,
                "the hunk needs line {} but the file ends before it",
                self.line
            )?,
        }
        if self.actual.is_empty() {
            write!(f, "; the file is empty")
        } else {
            write!(f, "; the file has there:\n{}", self.actual)
        }
    }
}

/// Parses a unified diff touching one or more files.
///
/// Anything outside file sections (a commit message, `index` lines) is skipped. Hunk rows are
/// read by the counts of their `@@` line, so a removed line that looks like a header is still a
/// row; an empty line inside a hunk counts as an empty context line (editors strip the space).
/// A git section without `---`/`+++` (an empty file created or deleted) becomes a patch with no
/// hunks; a rename or binary section is refused, since it carries no text to apply.
pub fn parse(patch: &str) -> Result<Vec<FilePatch>, PatchError> {
    let mut lines: Vec<&str> = patch.split('\n').collect();
    if patch.ends_with('\n') {
        // The "line" after the final newline is not a line.
        lines.pop();
    }
    let mut files = Vec::new();
    let mut git: Option<GitSection> = None;
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let bare = line.strip_suffix('\r').unwrap_or(line);
        if let Some(rest) = bare.strip_prefix("diff --git ") {
            if let Some(section) = git.take() {
                files.extend(section.finish()?);
            }
            git = Some(GitSection::new(i + 1, rest));
            i += 1;
            continue;
        }
        if let Some(section) = git.as_mut() {
            section.note(i + 1, bare)?;
        }
        let next = lines.get(i + 1).map(|l| l.strip_suffix('\r').unwrap_or(l));
        if let (Some(old), Some(new)) = (
            bare.strip_prefix("--- "),
            next.and_then(|n| n.strip_prefix("+++ ")),
        ) {
            let (old_path, new_path) = header_paths(old, new);
            if old_path.is_none() && new_path.is_none() {
                return Err(PatchError::Syntax {
                    line: i + 1,
                    reason: "both header lines name /dev/null; one of them must name the file"
                        .into(),
                });
            }
            i += 2;
            let mut hunks = Vec::new();
            while let Some(header) = lines.get(i).filter(|l| l.starts_with("@@")) {
                let (hunk, next_line) = parse_hunk(&lines, i, header)?;
                hunks.push(hunk);
                i = next_line;
            }
            if hunks.is_empty() {
                return Err(PatchError::Syntax {
                    line: i + 1,
                    reason: "the file header is not followed by an '@@ -l,s +l,s @@' hunk".into(),
                });
            }
            if let Some(section) = git.as_mut() {
                section.has_text = true;
            }
            files.push(FilePatch {
                old_path,
                new_path,
                hunks,
            });
            continue;
        }
        if line.starts_with("@@") {
            return Err(PatchError::Syntax {
                line: i + 1,
                reason: "a hunk without a '--- path' / '+++ path' file header before it".into(),
            });
        }
        i += 1;
    }
    if let Some(section) = git.take() {
        files.extend(section.finish()?);
    }
    if files.is_empty() {
        return Err(PatchError::Empty);
    }
    Ok(files)
}

/// What a `diff --git` section said before (or instead of) its `---`/`+++` lines.
#[derive(Debug)]
struct GitSection {
    line: usize,
    old_path: Option<String>,
    new_path: Option<String>,
    new_file: bool,
    deleted_file: bool,
    has_text: bool,
}

impl GitSection {
    fn new(line: usize, rest: &str) -> Self {
        // `a/x b/x`: paths with spaces are ambiguous here; they are only used for sections that
        // have no `---`/`+++` lines, i.e. empty files.
        let (old_path, new_path) = match rest.split_once(" b/") {
            Some((a, b)) => (
                Some(a.strip_prefix("a/").unwrap_or(a).to_owned()),
                Some(b.to_owned()),
            ),
            None => (None, None),
        };
        Self {
            line,
            old_path,
            new_path,
            new_file: false,
            deleted_file: false,
            has_text: false,
        }
    }

    fn note(&mut self, line: usize, text: &str) -> Result<(), PatchError> {
        if text.starts_with("new file mode") {
            self.new_file = true;
        } else if text.starts_with("deleted file mode") {
            self.deleted_file = true;
        } else if text.starts_with("rename from") || text.starts_with("copy from") {
            return Err(PatchError::Syntax {
                line,
                reason: "renames and copies are not applied; produce the patch with `git diff --no-renames`, or use the move tool".into(),
            });
        } else if text.starts_with("Binary files") || text.starts_with("GIT binary patch") {
            return Err(PatchError::Syntax {
                line,
                reason: "binary patches cannot be applied; use write_file for binary files".into(),
            });
        }
        Ok(())
    }

    /// The patch of a section that had no text hunks: an empty file created or deleted.
    fn finish(self) -> Result<Option<FilePatch>, PatchError> {
        if self.has_text || !(self.new_file || self.deleted_file) {
            return Ok(None);
        }
        let path = if self.new_file {
            self.new_path
        } else {
            self.old_path
        };
        let Some(path) = path else {
            return Err(PatchError::Syntax {
                line: self.line,
                reason: "cannot read the paths of this 'diff --git' line".into(),
            });
        };
        Ok(Some(if self.new_file {
            FilePatch {
                old_path: None,
                new_path: Some(path),
                hunks: Vec::new(),
            }
        } else {
            FilePatch {
                old_path: Some(path),
                new_path: None,
                hunks: Vec::new(),
            }
        }))
    }
}

/// The paths of a `---`/`+++` pair, with git's `a/` and `b/` prefixes stripped (when both sides
/// carry them, or one side is `/dev/null`).
fn header_paths(old: &str, new: &str) -> (Option<String>, Option<String>) {
    let old = header_path(old);
    let new = header_path(new);
    let git_style = old.as_deref().is_none_or(|p| p.starts_with("a/"))
        && new.as_deref().is_none_or(|p| p.starts_with("b/"))
        && (old.is_some() || new.is_some());
    if !git_style {
        return (old, new);
    }
    (
        old.map(|p| p["a/".len()..].to_owned()),
        new.map(|p| p["b/".len()..].to_owned()),
    )
}

/// One header path: cut at a tab (timestamps), unquoted when git quoted it, `None` for
/// `/dev/null`.
fn header_path(raw: &str) -> Option<String> {
    let raw = raw.split('\t').next().unwrap_or(raw).trim_end();
    let path = match raw.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
        Some(quoted) => unquote(quoted),
        None => raw.to_owned(),
    };
    (path != "/dev/null").then_some(path)
}

/// Undoes git's C-style quoting of a path (`\"`, `\\`, `\t`, `\n`, octal bytes).
fn unquote(quoted: &str) -> String {
    let mut bytes = Vec::with_capacity(quoted.len());
    let mut chars = quoted.bytes().peekable();
    while let Some(b) = chars.next() {
        if b != b'\\' {
            bytes.push(b);
            continue;
        }
        match chars.next() {
            Some(b'n') => bytes.push(b'\n'),
            Some(b't') => bytes.push(b'\t'),
            Some(d @ b'0'..=b'7') => {
                let mut value = u32::from(d - b'0');
                for _ in 0..2 {
                    if let Some(&next @ b'0'..=b'7') = chars.peek() {
                        value = value * 8 + u32::from(next - b'0');
                        chars.next();
                    }
                }
                bytes.push(u8::try_from(value).unwrap_or(b'?'));
            }
            Some(other) => bytes.push(other),
            None => bytes.push(b'\\'),
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Parses `@@ -a[,b] +c[,d] @@…` at `lines[at]` and its rows; returns the hunk and the index of
/// the first line after it.
fn parse_hunk(lines: &[&str], at: usize, header: &str) -> Result<(Hunk, usize), PatchError> {
    let header = header.strip_suffix('\r').unwrap_or(header);
    let bad_header = || PatchError::Syntax {
        line: at + 1,
        reason: format!(
            "malformed hunk header {header:?}; expected '@@ -start,count +start,count @@'"
        ),
    };
    let ranges = header
        .strip_prefix("@@ ")
        .and_then(|r| r.split_once(" @@"))
        .map(|(ranges, _)| ranges)
        .ok_or_else(bad_header)?;
    let (old, new) = ranges.split_once(' ').ok_or_else(bad_header)?;
    let (old_start, old_len) = old
        .strip_prefix('-')
        .and_then(parse_range)
        .ok_or_else(bad_header)?;
    let (new_start, new_len) = new
        .strip_prefix('+')
        .and_then(parse_range)
        .ok_or_else(bad_header)?;
    let mut rows: Vec<HunkRow> = Vec::new();
    let (mut old_left, mut new_left) = (old_len, new_len);
    let mut i = at + 1;
    while old_left > 0 || new_left > 0 {
        let Some(line) = lines.get(i) else {
            return Err(PatchError::Syntax {
                line: i,
                reason: format!(
                    "the patch ends inside hunk {header:?}: {old_left} old and {new_left} new line(s) are missing; check the counts in its header"
                ),
            });
        };
        let (kind, text) = match line.as_bytes().first() {
            Some(b' ') => (RowKind::Context, &line[1..]),
            None => (RowKind::Context, ""),
            Some(b'-') => (RowKind::Removed, &line[1..]),
            Some(b'+') => (RowKind::Added, &line[1..]),
            Some(b'\\') => {
                mark_no_newline(&mut rows);
                i += 1;
                continue;
            }
            Some(_) => {
                return Err(PatchError::Syntax {
                    line: i + 1,
                    reason: format!(
                        "expected a hunk row starting with ' ', '-' or '+' (hunk {header:?} still needs {old_left} old and {new_left} new line(s)), found {line:?}"
                    ),
                });
            }
        };
        let uses_old = kind != RowKind::Added;
        let uses_new = kind != RowKind::Removed;
        if (uses_old && old_left == 0) || (uses_new && new_left == 0) {
            return Err(PatchError::Syntax {
                line: i + 1,
                reason: format!(
                    "hunk {header:?} has more lines than its header counts; fix the counts"
                ),
            });
        }
        old_left -= usize::from(uses_old);
        new_left -= usize::from(uses_new);
        rows.push(HunkRow {
            kind,
            text: text.to_owned(),
            no_newline: false,
        });
        i += 1;
    }
    if lines.get(i).is_some_and(|l| l.starts_with('\\')) {
        mark_no_newline(&mut rows);
        i += 1;
    }
    Ok((
        Hunk {
            header: header.to_owned(),
            old_start,
            old_len,
            new_start,
            new_len,
            rows,
        },
        i,
    ))
}

fn mark_no_newline(rows: &mut [HunkRow]) {
    if let Some(last) = rows.last_mut() {
        last.no_newline = true;
    }
}

/// `start[,count]`, the count defaulting to 1.
fn parse_range(text: &str) -> Option<(usize, usize)> {
    match text.split_once(',') {
        Some((start, count)) => Some((start.parse().ok()?, count.parse().ok()?)),
        None => Some((text.parse().ok()?, 1)),
    }
}

/// Applies `hunks` to `original`, returning the new text.
///
/// Lines are compared without their `'\n'`; with `strip_cr`, a final `'\r'` of each hunk row is
/// dropped first (a CRLF file is edited as LF text, and `git diff` rows of it carry the `'\r'`).
/// Each hunk is looked for at its stated line shifted by the offset earlier hunks found, then at
/// the nearest lines around it (never before the end of the previous hunk); its context and
/// removed lines must match exactly. Context lines are kept byte for byte; added lines end in
/// `'\n'` unless marked `\ No newline at end of file`.
pub fn apply_hunks(original: &str, hunks: &[Hunk], strip_cr: bool) -> Result<String, HunkMismatch> {
    let file: Vec<&str> = original.split_inclusive('\n').collect();
    let bare = |line: &str| -> String { line.strip_suffix('\n').unwrap_or(line).to_owned() };
    let row_text = |row: &HunkRow| -> String {
        if strip_cr {
            row.text.strip_suffix('\r').unwrap_or(&row.text).to_owned()
        } else {
            row.text.clone()
        }
    };
    let mut out = String::with_capacity(original.len());
    let mut cursor = 0usize;
    let mut shift: isize = 0;
    for (index, hunk) in hunks.iter().enumerate() {
        let old: Vec<String> = hunk
            .rows
            .iter()
            .filter(|r| r.kind != RowKind::Added)
            .map(row_text)
            .collect();
        let stated = if hunk.old_len == 0 {
            hunk.old_start
        } else {
            hunk.old_start.saturating_sub(1)
        };
        let expected = clamp(stated as isize + shift, cursor, file.len());
        let matches_at = |p: usize| {
            p + old.len() <= file.len() && old.iter().zip(&file[p..]).all(|(o, f)| *o == bare(f))
        };
        let found = if old.is_empty() {
            Some(expected)
        } else {
            nearest(expected, cursor, file.len(), matches_at)
        };
        let Some(at) = found else {
            return Err(mismatch(
                &file,
                &old,
                expected,
                index,
                hunks.len(),
                &hunk.header,
            ));
        };
        for line in &file[cursor..at] {
            out.push_str(line);
        }
        let mut next = at;
        for row in &hunk.rows {
            match row.kind {
                RowKind::Context => {
                    if let Some(line) = file.get(next) {
                        out.push_str(line);
                    }
                    next += 1;
                }
                RowKind::Removed => next += 1,
                RowKind::Added => {
                    out.push_str(&row_text(row));
                    if !row.no_newline {
                        out.push('\n');
                    }
                }
            }
        }
        cursor = next;
        shift = at as isize - stated as isize;
    }
    for line in file.iter().skip(cursor) {
        out.push_str(line);
    }
    Ok(out)
}

fn clamp(value: isize, low: usize, high: usize) -> usize {
    usize::try_from(value)
        .unwrap_or(0)
        .clamp(low, high.max(low))
}

/// The position in `low..=high` nearest to `expected` (ties: the earlier one) where `matches`.
fn nearest(
    expected: usize,
    low: usize,
    high: usize,
    matches: impl Fn(usize) -> bool,
) -> Option<usize> {
    let reach = (expected - low).max(high.saturating_sub(expected));
    (0..=reach).find_map(|distance| {
        let before = expected.checked_sub(distance).filter(|p| *p >= low);
        let after = Some(expected + distance).filter(|p| *p <= high && distance > 0);
        before
            .filter(|p| matches(*p))
            .or_else(|| after.filter(|p| matches(*p)))
    })
}

/// Describes why a hunk failed, at the place it was expected.
fn mismatch(
    file: &[&str],
    old: &[String],
    expected: usize,
    index: usize,
    count: usize,
    header: &str,
) -> HunkMismatch {
    let bare = |line: &str| line.strip_suffix('\n').unwrap_or(line).to_owned();
    let first_bad = old
        .iter()
        .enumerate()
        .find(|(k, o)| file.get(expected + k).is_none_or(|f| bare(f) != **o))
        .map_or(0, |(k, _)| k);
    let line_index = expected + first_bad;
    let expected_text = file.get(line_index).map(|_| old[first_bad].clone());
    let start = line_index
        .saturating_sub(MISMATCH_CONTEXT_LINES)
        .min(file.len());
    let end = (line_index + MISMATCH_CONTEXT_LINES + 1).min(file.len());
    let shown: Vec<String> = file[start..end].iter().map(|l| bare(l)).collect();
    HunkMismatch {
        hunk_number: index + 1,
        hunk_count: count,
        header: header.to_owned(),
        line: line_index + 1,
        expected: expected_text,
        actual: format_numbered(&shown, start + 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ground::text::diff::unified_diff;

    fn apply(original: &str, patch: &str) -> Result<String, HunkMismatch> {
        let files = parse(patch).unwrap();
        assert_eq!(files.len(), 1);
        apply_hunks(original, &files[0].hunks, false)
    }

    #[test]
    fn git_headers_lose_their_a_and_b_prefixes() {
        let patch = "diff --git a/src/x.rs b/src/x.rs\nindex 1..2 100644\n--- a/src/x.rs\n+++ b/src/x.rs\n@@ -1 +1 @@\n-a\n+b\n";
        let files = parse(patch).unwrap();
        assert_eq!(files[0].old_path.as_deref(), Some("src/x.rs"));
        assert_eq!(files[0].new_path.as_deref(), Some("src/x.rs"));
        assert_eq!(files[0].hunks[0].rows.len(), 2);
    }

    #[test]
    fn plain_headers_keep_their_paths_and_drop_timestamps() {
        let patch =
            "--- /src/x.rs\t2024-01-01 00:00:00\n+++ /src/x.rs\t2024-01-02\n@@ -1 +1 @@\n-a\n+b\n";
        let files = parse(patch).unwrap();
        assert_eq!(files[0].old_path.as_deref(), Some("/src/x.rs"));
        assert_eq!(files[0].new_path.as_deref(), Some("/src/x.rs"));
    }

    #[test]
    fn dev_null_marks_creations_and_deletions() {
        let patch = "--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1,2 @@\n+x\n+y\n--- a/old.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-z\n";
        let files = parse(patch).unwrap();
        assert_eq!(files[0].old_path, None);
        assert_eq!(files[0].new_path.as_deref(), Some("new.txt"));
        assert_eq!(files[1].old_path.as_deref(), Some("old.txt"));
        assert_eq!(files[1].new_path, None);
        assert_eq!(apply_hunks("", &files[0].hunks, false).unwrap(), "x\ny\n");
        assert_eq!(apply_hunks("z\n", &files[1].hunks, false).unwrap(), "");
    }

    #[test]
    fn quoted_git_paths_are_unquoted() {
        let patch =
            "--- \"a/sp ace\\303\\251.txt\"\n+++ \"b/sp ace\\303\\251.txt\"\n@@ -1 +1 @@\n-a\n+b\n";
        let files = parse(patch).unwrap();
        assert_eq!(files[0].new_path.as_deref(), Some("sp aceé.txt"));
    }

    #[test]
    fn rows_are_read_by_count_so_header_lookalikes_are_rows() {
        let patch = "--- a/f\n+++ b/f\n@@ -1,2 +1 @@\n--- not a header\n-+++ nor this\n+x\n";
        let files = parse(patch).unwrap();
        assert_eq!(files.len(), 1);
        let out = apply_hunks("-- not a header\n+++ nor this\n", &files[0].hunks, false).unwrap();
        assert_eq!(out, "x\n");
    }

    #[test]
    fn an_empty_line_inside_a_hunk_is_empty_context() {
        let patch = "--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n\n-b\n+B\n";
        assert_eq!(apply("a\n\nb\n", patch).unwrap(), "a\n\nB\n");
    }

    #[test]
    fn no_newline_markers_apply_to_the_row_before() {
        let patch = "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n";
        assert_eq!(apply("a\nb", patch).unwrap(), "a\nc");
        let add_newline = "--- a/f\n+++ b/f\n@@ -1 +1 @@\n-b\n\\ No newline at end of file\n+b\n";
        assert_eq!(apply("b", add_newline).unwrap(), "b\n");
    }

    #[test]
    fn hunks_apply_where_lines_moved() {
        let patch = "--- a/f\n+++ b/f\n@@ -2,3 +2,3 @@\n b\n-c\n+C\n d\n";
        // Three lines were inserted at the top since the patch was made.
        assert_eq!(
            apply("x\ny\nz\na\nb\nc\nd\n", patch).unwrap(),
            "x\ny\nz\na\nb\nC\nd\n"
        );
        // And two removed.
        assert_eq!(apply("b\nc\nd\n", patch).unwrap(), "b\nC\nd\n");
    }

    #[test]
    fn later_hunks_follow_the_shift_of_earlier_ones() {
        let old: String = (1..=30).map(|i| format!("{i}\n")).collect();
        let new = old
            .replace("3\n", "three\n")
            .replace("27\n", "twenty-seven\n");
        let patch = unified_diff("/f", &old, &new);
        let shifted = format!("new top\n{old}");
        assert_eq!(apply(&shifted, &patch).unwrap(), format!("new top\n{new}"));
    }

    #[test]
    fn a_mismatch_names_hunk_line_and_shows_the_file() {
        let patch =
            "--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n@@ -8,3 +8,3 @@\n h\n-i\n+I\n j\n";
        let file = "a\nb\nc\nd\ne\nf\ng\nh\nIII\nj\n";
        let err = apply(file, patch).unwrap_err();
        assert_eq!(err.hunk_number, 2);
        assert_eq!(err.hunk_count, 2);
        assert_eq!(err.line, 9);
        assert_eq!(err.expected.as_deref(), Some("i"));
        assert_eq!(
            err.to_string(),
            "hunk 2 of 2 (@@ -8,3 +8,3 @@) does not match: line 9 should be \"i\"; the file has there:\n     7\tg\n     8\th\n     9\tIII\n    10\tj"
        );
    }

    #[test]
    fn a_hunk_past_the_end_says_so() {
        let patch = "--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n b\n-c\n+C\n";
        let err = apply("a\nb\n", patch).unwrap_err();
        assert_eq!(err.line, 3);
        assert_eq!(err.expected, None);
        assert!(err.to_string().contains("the file ends before it"), "{err}");
    }

    #[test]
    fn crlf_rows_match_lf_text_when_asked() {
        let patch = "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\r\n-b\r\n+B\r\n";
        let files = parse(patch).unwrap();
        assert_eq!(
            apply_hunks("a\nb\n", &files[0].hunks, true).unwrap(),
            "a\nB\n"
        );
        assert!(apply_hunks("a\nb\n", &files[0].hunks, false).is_err());
        // A file whose lines really end in '\r' matches as written.
        assert_eq!(
            apply_hunks("a\r\nb\r\n", &files[0].hunks, false).unwrap(),
            "a\r\nB\r\n"
        );
    }

    #[test]
    fn a_patch_with_crlf_line_breaks_still_parses() {
        let patch = "--- a/f\r\n+++ b/f\r\n@@ -1 +1 @@\r\n-a\r\n+b\r\n";
        let files = parse(patch).unwrap();
        assert_eq!(files[0].new_path.as_deref(), Some("f"));
        assert_eq!(apply_hunks("a\n", &files[0].hunks, true).unwrap(), "b\n");
    }

    #[test]
    fn git_sections_without_text_create_and_delete_empty_files() {
        let patch = "diff --git a/empty b/empty\nnew file mode 100644\nindex 0000000..e69de29\ndiff --git a/gone b/gone\ndeleted file mode 100644\nindex e69de29..0000000\n";
        let files = parse(patch).unwrap();
        assert_eq!(
            files,
            vec![
                FilePatch {
                    old_path: None,
                    new_path: Some("empty".into()),
                    hunks: vec![]
                },
                FilePatch {
                    old_path: Some("gone".into()),
                    new_path: None,
                    hunks: vec![]
                },
            ]
        );
    }

    #[test]
    fn renames_binaries_and_garbage_are_refused_with_the_line() {
        let rename = "diff --git a/x b/y\nsimilarity index 100%\nrename from x\nrename to y\n";
        assert!(matches!(
            parse(rename),
            Err(PatchError::Syntax { line: 3, .. })
        ));
        let binary = "diff --git a/x b/x\nBinary files a/x and b/x differ\n";
        assert!(matches!(
            parse(binary),
            Err(PatchError::Syntax { line: 2, .. })
        ));
        assert_eq!(parse("just some text\n"), Err(PatchError::Empty));
        let orphan = "@@ -1 +1 @@\n-a\n+b\n";
        assert!(matches!(
            parse(orphan),
            Err(PatchError::Syntax { line: 1, .. })
        ));
    }

    #[test]
    fn wrong_counts_are_refused() {
        let short = "--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n";
        let err = parse(short).unwrap_err().to_string();
        assert!(err.contains("ends inside hunk"), "{err}");
        let long = "--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n-b\n+B\n";
        let err = parse(long).unwrap_err().to_string();
        assert!(err.starts_with("Error: Invalid patch: line 5"), "{err}");
        let header = "--- a/f\n+++ b/f\n@@ -x +1 @@\n-a\n";
        let err = parse(header).unwrap_err().to_string();
        assert!(err.contains("malformed hunk header"), "{err}");
    }

    #[test]
    fn our_own_unified_diffs_round_trip() {
        let cases = crate::ground::text::diff::tests::ROUND_TRIPS;
        for (old, new) in cases {
            let patch = unified_diff("/f", old, new);
            assert_eq!(apply(old, &patch).unwrap(), new, "patch {patch:?}");
        }
    }
}
