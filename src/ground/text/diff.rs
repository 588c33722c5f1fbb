//! Line diffs of a file before and after a change, via `similar`.
//!
//! Owns the unified diff put in the structured result of an edit (as `diff -u`/git print it, so
//! `patch` and `git apply` accept it), the 1-based line ranges a change touched, the numbered
//! snippet around them shown to the agent, and added/removed counts. Lines are split on `'\n'`
//! only: `similar`'s own line splitter also breaks at a lone `'\r'`, which would misnumber lines
//! and print hunks `patch` reads differently. Applying patches is left to `apply_patch`.

use std::fmt::Write as _;
use std::ops::RangeInclusive;

use similar::{Algorithm, DiffOp, DiffTag, capture_diff_slices, group_diff_ops};

use super::numbered::format_numbered;
use super::truncate::cap_result_with;

/// Lines of context around each hunk of [`unified_diff`].
const CONTEXT_LINES: usize = 3;

/// Notice ending a snippet cut by [`change_snippet`].
pub const SNIPPET_TRUNCATED: &str = "... (snippet truncated)";

/// Lines added and removed between two texts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DiffStats {
    /// Lines only in the new text.
    pub added: usize,
    /// Lines only in the old text.
    pub removed: usize,
}

/// Splits `text` into lines that keep their `'\n'` (the last one may lack it).
fn tokens(text: &str) -> Vec<&str> {
    text.split_inclusive('\n').collect()
}

/// The part of two texts a line diff has to look at: both texts less their common leading and
/// trailing whole lines, keeping [`CONTEXT_LINES`] of those on each side so hunks come out as
/// from the whole texts. Found byte by byte, so a one-line edit of a 16 MiB file tokenises a few
/// lines instead of millions (issue 10: 8M-line edits peaked at 365 MiB in line vectors).
struct Middle<'a> {
    old: &'a str,
    new: &'a str,
    /// Lines of both texts before the middle.
    lines_before: usize,
}

fn middle<'a>(old: &'a str, new: &'a str) -> Middle<'a> {
    let (ob, nb) = (old.as_bytes(), new.as_bytes());
    let common = ob.iter().zip(nb).take_while(|(a, b)| a == b).count();
    // Back to the start of the line the first difference is in.
    let mut start = ob[..common]
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    let mut lines_before = bytecount_newlines(&ob[..start]);
    for _ in 0..CONTEXT_LINES {
        if start == 0 {
            break;
        }
        start = ob[..start - 1]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        lines_before -= 1;
    }
    let max_suffix = (ob.len() - start).min(nb.len() - start);
    let suffix = ob
        .iter()
        .rev()
        .zip(nb.iter().rev())
        .take(max_suffix)
        .take_while(|(a, b)| a == b)
        .count();
    // The trailing common part, from the first line start inside it, plus context lines.
    let tail = &ob[ob.len() - suffix..];
    let mut cut = match tail.iter().position(|&b| b == b'\n') {
        Some(i) if i + 1 < tail.len() => i + 1,
        _ => tail.len(),
    };
    for _ in 0..CONTEXT_LINES {
        match tail[cut..].iter().position(|&b| b == b'\n') {
            Some(i) => cut += i + 1,
            None => {
                cut = tail.len();
                break;
            }
        }
    }
    let kept_suffix = suffix - cut;
    Middle {
        old: &old[start..old.len() - kept_suffix],
        new: &new[start..new.len() - kept_suffix],
        lines_before,
    }
}

/// How many [`tokens`] `text` has, without building them.
fn line_count(text: &str) -> usize {
    bytecount_newlines(text.as_bytes()) + usize::from(!text.is_empty() && !text.ends_with('\n'))
}

fn bytecount_newlines(bytes: &[u8]) -> usize {
    bytes.iter().filter(|&&b| b == b'\n').count()
}

/// The lines of one side of a [`Middle`]: split into a vector for Myers, or walked in place
/// when there are too many to diff line by line.
enum Lines<'a> {
    Split(Vec<&'a str>),
    Walked(&'a str),
}

impl<'a> Lines<'a> {
    /// Calls `f` with each line (with its `'\n'`) of `range`.
    fn each(&self, range: std::ops::Range<usize>, mut f: impl FnMut(&'a str)) {
        match self {
            Self::Split(lines) => lines
                .get(range)
                .unwrap_or_default()
                .iter()
                .for_each(|l| f(l)),
            Self::Walked(text) => text
                .split_inclusive('\n')
                .skip(range.start)
                .take(range.len())
                .for_each(f),
        }
    }
}

/// Line-level diff ops between the two sides of `middle`, with the lines they index.
///
/// `Algorithm::Myers` in `similar` bounds its work on hard inputs with heuristics rather than a
/// clock, so the result stays deterministic and a huge rewrite still finishes. Past
/// [`MYERS_MAX_LINES`] lines the middle is reported as one replacement between its equal first
/// and last lines, without splitting it into vectors: Myers' time and memory grow with the
/// differences, and a rewrite of millions of lines would take minutes and hundreds of MiB to
/// describe a change whose diff is cut at 80,000 characters anyway.
fn line_ops<'a>(middle: &Middle<'a>) -> (Vec<DiffOp>, Lines<'a>, Lines<'a>) {
    let (old_count, new_count) = (line_count(middle.old), line_count(middle.new));
    if old_count + new_count <= MYERS_MAX_LINES {
        let (old, new) = (tokens(middle.old), tokens(middle.new));
        let ops = capture_diff_slices(Algorithm::Myers, &old, &new);
        return (ops, Lines::Split(old), Lines::Split(new));
    }
    let head = middle
        .old
        .split_inclusive('\n')
        .zip(middle.new.split_inclusive('\n'))
        .take_while(|(a, b)| a == b)
        .count();
    let tail = middle
        .old
        .split_inclusive('\n')
        .rev()
        .zip(middle.new.split_inclusive('\n').rev())
        .take(old_count.min(new_count) - head)
        .take_while(|(a, b)| a == b)
        .count();
    let mut ops = Vec::with_capacity(3);
    if head > 0 {
        ops.push(DiffOp::Equal {
            old_index: 0,
            new_index: 0,
            len: head,
        });
    }
    let (old_len, new_len) = (old_count - head - tail, new_count - head - tail);
    match (old_len, new_len) {
        (0, 0) => {}
        (0, _) => ops.push(DiffOp::Insert {
            old_index: head,
            new_index: head,
            new_len,
        }),
        (_, 0) => ops.push(DiffOp::Delete {
            old_index: head,
            old_len,
            new_index: head,
        }),
        _ => ops.push(DiffOp::Replace {
            old_index: head,
            old_len,
            new_index: head,
            new_len,
        }),
    }
    if tail > 0 {
        ops.push(DiffOp::Equal {
            old_index: head + old_len,
            new_index: head + new_len,
            len: tail,
        });
    }
    (ops, Lines::Walked(middle.old), Lines::Walked(middle.new))
}

/// Most lines (both sides) the line diff runs Myers on; see [`line_ops`].
const MYERS_MAX_LINES: usize = 200_000;

/// Unified diff of `old` → `new` with 3 lines of context, headed `--- {path}` / `+++ {path}`.
///
/// Hunks are `@@ -a,b +c,d @@` with the count left out when it is 1 and `a,0` for an empty side,
/// as `diff -u` and git print them; a line without a final newline is followed by
/// `\ No newline at end of file`. Every line of the result ends with `'\n'`. Returns `""` when
/// the texts are equal.
pub fn unified_diff(path: &str, old: &str, new: &str) -> String {
    unified_diff_within(path, old, new, usize::MAX)
}

/// [`unified_diff`], stopping after the line that takes it past `max_bytes` (for answers that
/// are cut at a character limit anyway: the diff of a 16 MiB rewrite is never built whole).
pub fn unified_diff_within(path: &str, old: &str, new: &str, max_bytes: usize) -> String {
    if old == new {
        return String::new();
    }
    let middle = middle(old, new);
    let (ops, old_lines, new_lines) = line_ops(&middle);
    let shift = middle.lines_before;
    let mut out = String::new();
    for group in group_diff_ops(ops, CONTEXT_LINES) {
        let (Some(first), Some(last)) = (group.first(), group.last()) else {
            continue;
        };
        if out.len() > max_bytes {
            break;
        }
        if out.is_empty() {
            let _ = writeln!(out, "--- {path}\n+++ {path}");
        }
        let old_range = first.old_range().start..last.old_range().end;
        let new_range = first.new_range().start..last.new_range().end;
        let _ = writeln!(
            out,
            "@@ -{} +{} @@",
            hunk_range(old_range.start + shift, old_range.len()),
            hunk_range(new_range.start + shift, new_range.len())
        );
        for op in &group {
            let (tag, old_part, new_part) = op.as_tag_tuple();
            let mut push = |tag: char, lines: &Lines<'_>, range| {
                lines.each(range, |line| {
                    if out.len() <= max_bytes {
                        push_line(&mut out, tag, line);
                    }
                });
            };
            match tag {
                DiffTag::Equal => push(' ', &old_lines, old_part),
                DiffTag::Delete => push('-', &old_lines, old_part),
                DiffTag::Insert => push('+', &new_lines, new_part),
                DiffTag::Replace => {
                    push('-', &old_lines, old_part);
                    push('+', &new_lines, new_part);
                }
            }
        }
    }
    out
}

/// `start,len` of a hunk side as `diff -u` prints it (0-based `start`).
fn hunk_range(start: usize, len: usize) -> String {
    match len {
        0 => format!("{start},0"),
        1 => format!("{}", start + 1),
        _ => format!("{},{len}", start + 1),
    }
}

/// Appends a line with its `tag`, marking a line that has no final newline.
fn push_line(out: &mut String, tag: char, line: &str) {
    out.push(tag);
    out.push_str(line);
    if !line.ends_with('\n') {
        out.push_str("\n\\ No newline at end of file\n");
    }
}

/// 1-based line ranges, in `new`, of each region that differs from `old`.
///
/// An insertion or replacement gives the lines it put in. A pure deletion gives the line now at
/// the place of the deleted lines (the last line when they were at the end). Adjacent and
/// overlapping ranges are merged, and the result is sorted. When `new` is empty there is no line
/// to point at, so the result is empty.
pub fn changed_line_ranges(old: &str, new: &str) -> Vec<RangeInclusive<usize>> {
    if old == new {
        return Vec::new();
    }
    let total = line_count(new);
    if total == 0 {
        return Vec::new();
    }
    let middle = middle(old, new);
    let shift = middle.lines_before;
    let mut ranges: Vec<RangeInclusive<usize>> = Vec::new();
    for op in line_ops(&middle).0 {
        let span = op.new_range();
        let span = (span.start + shift)..(span.end + shift);
        let range = match op.tag() {
            DiffTag::Equal => continue,
            DiffTag::Delete => {
                let line = (span.start + 1).min(total);
                line..=line
            }
            DiffTag::Insert | DiffTag::Replace => (span.start + 1)..=span.end.min(total),
        };
        ranges.push(range);
    }
    merge_ranges(ranges, 1)
}

/// Sorts `ranges` and merges those that overlap or lie within `gap` lines of each other.
fn merge_ranges(mut ranges: Vec<RangeInclusive<usize>>, gap: usize) -> Vec<RangeInclusive<usize>> {
    ranges.retain(|range| range.start() <= range.end());
    ranges.sort_by_key(|range| (*range.start(), *range.end()));
    let mut merged: Vec<RangeInclusive<usize>> = Vec::with_capacity(ranges.len());
    for range in ranges {
        if let Some(last) = merged.last_mut()
            && *range.start() <= last.end().saturating_add(gap)
        {
            if range.end() > last.end() {
                *last = *last.start()..=*range.end();
            }
            continue;
        }
        merged.push(range);
    }
    merged
}

/// Numbered lines of `new` around each changed range, as shown to the agent after an edit.
///
/// Each range is widened by `context` lines on both sides (clamped to the text); windows that
/// overlap or touch are merged, and windows are separated by a line `...`. Rows are those of
/// [`format_numbered`] (long lines split the same way). A snippet over `max_chars` characters is
/// cut at a whole row and ends with a line `... (snippet truncated)`.
pub fn change_snippet(
    new: &str,
    changed: &[RangeInclusive<usize>],
    context: usize,
    max_chars: usize,
) -> String {
    // Lines as `split_lines` gives them, walked once: only the rows shown are collected.
    let body = new.strip_suffix('\n').unwrap_or(new);
    let lines = || {
        (!new.is_empty())
            .then(|| body.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l)))
            .into_iter()
            .flatten()
    };
    let total = if new.is_empty() {
        0
    } else {
        bytecount_newlines(body.as_bytes()) + 1
    };
    if total == 0 {
        return String::new();
    }
    let windows: Vec<RangeInclusive<usize>> = changed
        .iter()
        .filter(|range| range.start() <= range.end())
        .map(|range| {
            let start = range.start().saturating_sub(context).max(1);
            let end = range.end().saturating_add(context).min(total);
            start..=end
        })
        .filter(|window| *window.start() <= total)
        .collect();
    let mut out = String::new();
    let mut rows_of = lines().enumerate();
    // Past this many bytes the snippet is cut anyway (a character is at most four bytes, and a
    // row at least eight: its number column and tab), so no more rows are formatted.
    let max_bytes = max_chars.saturating_mul(4);
    let max_rows = max_bytes / 8 + 1;
    for window in merge_ranges(windows, 1) {
        if out.len() > max_bytes {
            break;
        }
        let (start, end) = (*window.start(), *window.end());
        // `take_while` swallows the row after the window; merged windows are at least two
        // lines apart, so the next window never starts there.
        let rows: Vec<&str> = rows_of
            .by_ref()
            .skip_while(|(index, _)| index + 1 < start)
            .take_while(|(index, _)| *index < end)
            .take(max_rows)
            .map(|(_, line)| line)
            .collect();
        if rows.is_empty() {
            continue;
        }
        if !out.is_empty() {
            out.push_str("\n...\n");
        }
        out.push_str(&format_numbered(&rows, start));
    }
    cap_result_with(out, max_chars, SNIPPET_TRUNCATED)
}

/// Counts the lines added and removed between `old` and `new`.
pub fn diff_stats(old: &str, new: &str) -> DiffStats {
    let mut stats = DiffStats::default();
    if old == new {
        return stats;
    }
    let middle = middle(old, new);
    for op in line_ops(&middle).0 {
        let (tag, old_part, new_part) = op.as_tag_tuple();
        if tag != DiffTag::Equal {
            stats.removed += old_part.len();
            stats.added += new_part.len();
        }
    }
    stats
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::ground::text::numbered::split_lines;

    /// Applies a unified diff the way `patch` reads one, to check the output round-trips.
    fn apply(old: &str, diff: &str) -> String {
        let old_lines: Vec<&str> = old.split_inclusive('\n').collect();
        let mut out = String::new();
        let mut next_old = 0usize; // 0-based index of the next old line not yet copied
        let mut rows = diff.split_inclusive('\n').peekable();
        assert!(rows.next().unwrap().starts_with("--- "));
        assert!(rows.next().unwrap().starts_with("+++ "));
        while let Some(header) = rows.next() {
            let header = header.strip_prefix("@@ -").expect("hunk header");
            let old_spec = header.split(' ').next().unwrap();
            let mut parts = old_spec.split(',');
            let start: usize = parts.next().unwrap().parse().unwrap();
            let len: usize = parts.next().map_or(1, |n| n.parse().unwrap());
            let first = if len == 0 { start } else { start - 1 };
            while next_old < first {
                out.push_str(old_lines[next_old]);
                next_old += 1;
            }
            while let Some(row) = rows.peek() {
                if row.starts_with("@@") {
                    break;
                }
                let row = rows.next().unwrap();
                let (tag, body) = row.split_at(1);
                let no_newline = rows.peek() == Some(&"\\ No newline at end of file\n");
                let line = if no_newline {
                    rows.next();
                    body.strip_suffix('\n').unwrap()
                } else {
                    body
                };
                match tag {
                    " " => {
                        assert_eq!(old_lines[next_old], line, "context matches");
                        out.push_str(line);
                        next_old += 1;
                    }
                    "-" => {
                        assert_eq!(old_lines[next_old], line, "removed line matches");
                        next_old += 1;
                    }
                    "+" => out.push_str(line),
                    other => panic!("unexpected row tag {other:?}"),
                }
            }
        }
        for line in &old_lines[next_old..] {
            out.push_str(line);
        }
        out
    }

    #[test]
    fn equal_texts_have_an_empty_diff() {
        assert_eq!(unified_diff("/a", "x\ny\n", "x\ny\n"), "");
        assert_eq!(unified_diff("/a", "", ""), "");
    }

    #[test]
    fn a_one_line_change_has_three_lines_of_context() {
        let old = "1\n2\n3\n4\n5\n6\n7\n8\n9\n";
        let new = "1\n2\n3\n4\nfive\n6\n7\n8\n9\n";
        assert_eq!(
            unified_diff("/src/a.txt", old, new),
            "--- /src/a.txt\n+++ /src/a.txt\n@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+five\n 6\n 7\n 8\n"
        );
    }

    /// `unified_diff` of `old` → `new` at `/f`, after its two header lines.
    fn hunks(old: &str, new: &str) -> String {
        let diff = unified_diff("/f", old, new);
        diff.strip_prefix("--- /f\n+++ /f\n").unwrap().to_owned()
    }

    #[test]
    fn single_line_sides_leave_out_the_count() {
        assert_eq!(hunks("a\n", "b\n"), "@@ -1 +1 @@\n-a\n+b\n");
    }

    #[test]
    fn creating_and_emptying_a_file() {
        assert_eq!(hunks("", "a\nb\n"), "@@ -0,0 +1,2 @@\n+a\n+b\n");
        assert_eq!(hunks("a\nb\n", ""), "@@ -1,2 +0,0 @@\n-a\n-b\n");
    }

    #[test]
    fn missing_final_newlines_are_marked() {
        let none = "\\ No newline at end of file\n";
        let got = hunks("a\nb", "a\nc");
        assert_eq!(got, format!("@@ -1,2 +1,2 @@\n a\n-b\n{none}+c\n{none}"));
        let got = hunks("a\nb", "a\nb\n");
        assert_eq!(got, format!("@@ -1,2 +1,2 @@\n a\n-b\n{none}+b\n"));
        let got = hunks("x\nb", "y\nb");
        assert_eq!(got, format!("@@ -1,2 +1,2 @@\n-x\n+y\n b\n{none}"));
    }

    #[test]
    fn distant_changes_make_separate_hunks() {
        let old: String = (1..=20).map(|i| format!("{i}\n")).collect();
        let new = old
            .replacen("2\n", "two\n", 1)
            .replace("19\n", "nineteen\n");
        let diff = unified_diff("/f", &old, &new);
        assert_eq!(
            diff,
            "--- /f\n+++ /f\n@@ -1,5 +1,5 @@\n 1\n-2\n+two\n 3\n 4\n 5\n@@ -16,5 +16,5 @@\n 16\n 17\n 18\n-19\n+nineteen\n 20\n"
        );
        assert_eq!(apply(&old, &diff), new);
    }

    #[test]
    fn lone_carriage_returns_stay_inside_their_line() {
        let old = "a\rb\nc\n";
        let new = "a\rB\nc\n";
        assert_eq!(
            unified_diff("/f", old, new),
            "--- /f\n+++ /f\n@@ -1,2 +1,2 @@\n-a\rb\n+a\rB\n c\n"
        );
        assert_eq!(changed_line_ranges(old, new), vec![1..=1]);
    }

    #[test]
    fn crlf_lines_are_diffed_verbatim() {
        let diff = unified_diff("/f", "a\r\nb\r\n", "a\r\nc\r\n");
        assert_eq!(diff, "--- /f\n+++ /f\n@@ -1,2 +1,2 @@\n a\r\n-b\r\n+c\r\n");
    }

    /// Pairs of texts whose diffs must apply back (here and in `patch`'s round trip): missing
    /// final newlines, a hunk that starts and ends with changes, repeated and non-ASCII lines.
    pub(crate) const ROUND_TRIPS: [(&str, &str); 9] = [
        ("", "x"),
        ("x", ""),
        ("", "x\n"),
        ("x\n", ""),
        ("a\nb\nc", "a\nb\nc\n"),
        ("a\nb\nc\n", "a\nb\nc"),
        (
            "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\nk\n",
            "b\nc\nd\nX\ne\nf\ng\nh\ni\nk\nl",
        ),
        ("same\n", "same\nsame\n"),
        ("😀\né\n", "é\n😀\n"),
    ];

    #[test]
    fn diffs_apply_back_to_the_new_text() {
        let cases = ROUND_TRIPS;
        for (old, new) in cases {
            let diff = unified_diff("/f", old, new);
            assert_eq!(apply(old, &diff), new, "diff {diff:?}");
        }
    }

    #[test]
    fn changed_ranges_of_a_replacement() {
        assert_eq!(changed_line_ranges("a\nb\nc\n", "a\nB\nc\n"), vec![2..=2]);
        assert_eq!(
            changed_line_ranges("a\nb\nc\n", "a\nB1\nB2\nB3\nc\n"),
            vec![2..=4]
        );
    }

    #[test]
    fn changed_ranges_of_an_insertion() {
        assert_eq!(changed_line_ranges("a\nc\n", "a\nb\nc\n"), vec![2..=2]);
        assert_eq!(changed_line_ranges("a\n", "a\nb\n"), vec![2..=2]);
    }

    #[test]
    fn changed_ranges_of_a_deletion_point_at_the_following_line() {
        assert_eq!(changed_line_ranges("a\nb\nc\n", "a\nc\n"), vec![2..=2]);
        assert_eq!(changed_line_ranges("a\nb\nc\n", "b\nc\n"), vec![1..=1]);
    }

    #[test]
    fn changed_ranges_of_a_deletion_at_the_end_clamp_to_the_file() {
        assert_eq!(changed_line_ranges("a\nb\nc\n", "a\n"), vec![1..=1]);
        assert!(changed_line_ranges("a\nb\n", "").is_empty());
    }

    #[test]
    fn changed_ranges_merge_when_adjacent() {
        // Lines 2 and 3 change together, line 5 on its own.
        let old = "1\n2\n3\n4\n5\n6\n";
        let new = "1\nB\nC\n4\nE\n6\n";
        assert_eq!(changed_line_ranges(old, new), vec![2..=3, 5..=5]);
        assert_eq!(
            merge_ranges(vec![5..=6, 1..=2, 3..=3, 8..=9, 9..=10], 1),
            vec![1..=3, 5..=6, 8..=10]
        );
    }

    #[test]
    fn changed_ranges_of_equal_texts_are_empty() {
        assert!(changed_line_ranges("a\n", "a\n").is_empty());
    }

    #[test]
    fn snippet_shows_context_around_each_change() {
        let new: String = (1..=30).map(|i| format!("line {i}\n")).collect();
        let got = change_snippet(&new, &[3..=3, 20..=21], 2, 10_000);
        assert_eq!(
            got,
            "     1\tline 1\n     2\tline 2\n     3\tline 3\n     4\tline 4\n     5\tline 5\n...\n    18\tline 18\n    19\tline 19\n    20\tline 20\n    21\tline 21\n    22\tline 22\n    23\tline 23"
        );
    }

    #[test]
    fn snippet_merges_overlapping_windows() {
        let new: String = (1..=10).map(|i| format!("{i}\n")).collect();
        let got = change_snippet(&new, &[4..=4, 2..=2], 1, 10_000);
        assert_eq!(got, "     1\t1\n     2\t2\n     3\t3\n     4\t4\n     5\t5");
        let got = change_snippet(&new, &[2..=2, 5..=5], 1, 10_000);
        assert_eq!(
            got,
            "     1\t1\n     2\t2\n     3\t3\n     4\t4\n     5\t5\n     6\t6"
        );
    }

    #[test]
    fn snippet_clamps_to_the_text() {
        let got = change_snippet("a\nb\n", &[2..=9], 5, 10_000);
        assert_eq!(got, "     1\ta\n     2\tb");
        assert_eq!(change_snippet("a\n", &[7..=7], 1, 10_000), "");
        assert_eq!(change_snippet("", &[1..=1], 1, 10_000), "");
    }

    #[test]
    fn snippet_splits_long_lines_like_read_file() {
        let long = "x".repeat(5001);
        let got = change_snippet(&format!("{long}\n"), &[1..=1], 0, 100_000);
        assert_eq!(got, format!("     1\t{}\n   1.1\tx", "x".repeat(5000)));
    }

    #[test]
    fn snippet_is_cut_at_a_whole_row() {
        let new: String = (1..=10).map(|i| format!("{i}\n")).collect();
        let got = change_snippet(&new, &[1..=10], 0, 50);
        assert_eq!(
            got,
            "     1\t1\n     2\t2\n     3\t3\n... (snippet truncated)"
        );
        assert!(got.chars().count() <= 50);
    }

    #[test]
    fn stats_count_added_and_removed_lines() {
        assert_eq!(
            diff_stats("a\nb\nc\n", "a\nB\nc\nd\n"),
            DiffStats {
                added: 2,
                removed: 1
            }
        );
        assert_eq!(diff_stats("a\n", "a\n"), DiffStats::default());
        assert_eq!(
            diff_stats("", "a\nb"),
            DiffStats {
                added: 2,
                removed: 0
            }
        );
        assert_eq!(
            diff_stats("a\nb", ""),
            DiffStats {
                added: 0,
                removed: 2
            }
        );
    }

    #[test]
    fn a_rewrite_of_more_lines_than_myers_takes_is_one_replacement() {
        let old: String = (0..MYERS_MAX_LINES).map(|n| format!("{n}\n")).collect();
        let new: String = (0..MYERS_MAX_LINES)
            .map(|n| format!("{}\n", n * 7))
            .collect();
        let stats = diff_stats(&old, &new);
        assert_eq!(stats.removed, MYERS_MAX_LINES - 1, "line 0 is the same");
        assert_eq!(stats.added, MYERS_MAX_LINES - 1);
        let diff = unified_diff("/f", &old, &new);
        assert_eq!(apply(&old, &diff), new);
        assert_eq!(changed_line_ranges(&old, &new), vec![2..=MYERS_MAX_LINES]);
    }

    #[test]
    fn trimming_the_common_lines_changes_nothing_in_the_answers() {
        let base: Vec<String> = (1..=40).map(|n| format!("line {n}\n")).collect();
        let old = base.concat();
        let mut cases: Vec<String> = Vec::new();
        for at in [0usize, 1, 2, 5, 20, 37, 38, 39] {
            let mut edited = base.clone();
            edited[at] = "changed\n".to_owned();
            cases.push(edited.concat());
            let mut removed = base.clone();
            removed.remove(at);
            cases.push(removed.concat());
            let mut added = base.clone();
            added.insert(at, "new\n".to_owned());
            cases.push(added.concat());
        }
        cases.push(old.trim_end_matches('\n').to_owned());
        cases.push(format!("{old}tail without newline"));
        cases.push(String::new());
        for new in &cases {
            let diff = unified_diff("/f", &old, new);
            assert_eq!(apply(&old, &diff), *new, "diff:\n{diff}");
            let reversed = unified_diff("/f", new, &old);
            assert_eq!(apply(new, &reversed), old, "diff:\n{reversed}");
            let stats = diff_stats(&old, new);
            let full = capture_diff_slices(Algorithm::Myers, &tokens(&old), &tokens(new));
            let (mut added, mut removed) = (0, 0);
            for op in full {
                let (tag, o, n) = op.as_tag_tuple();
                if tag != DiffTag::Equal {
                    removed += o.len();
                    added += n.len();
                }
            }
            assert_eq!((stats.added, stats.removed), (added, removed));
            for range in changed_line_ranges(&old, new) {
                assert!(*range.end() <= split_lines(new).len().max(1), "{range:?}");
            }
        }
        let mut one = base.clone();
        one[30] = "x\n".to_owned();
        assert_eq!(changed_line_ranges(&old, &one.concat()), vec![31..=31]);
        assert!(unified_diff("/f", &old, &one.concat()).contains("@@ -28,7 +28,7 @@"));
    }
}
