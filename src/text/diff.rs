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

use super::numbered::{format_numbered, split_lines};
use super::truncate::cap_result_with;

/// Lines of context around each hunk of [`unified_diff`].
const CONTEXT_LINES: usize = 3;

/// Notice ending a snippet cut by [`change_snippet`].
const SNIPPET_TRUNCATED: &str = "... (snippet truncated)";

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

/// Line-level diff ops between `old` and `new`.
///
/// `Algorithm::Myers` in `similar` bounds its work on hard inputs with heuristics rather than a
/// clock, so the result stays deterministic and a huge rewrite still finishes.
fn line_ops<'a>(old: &[&'a str], new: &[&'a str]) -> Vec<DiffOp> {
    capture_diff_slices(Algorithm::Myers, old, new)
}

/// Unified diff of `old` → `new` with 3 lines of context, headed `--- {path}` / `+++ {path}`.
///
/// Hunks are `@@ -a,b +c,d @@` with the count left out when it is 1 and `a,0` for an empty side,
/// as `diff -u` and git print them; a line without a final newline is followed by
/// `\ No newline at end of file`. Every line of the result ends with `'\n'`. Returns `""` when
/// the texts are equal.
pub fn unified_diff(path: &str, old: &str, new: &str) -> String {
    if old == new {
        return String::new();
    }
    let old_lines = tokens(old);
    let new_lines = tokens(new);
    let ops = line_ops(&old_lines, &new_lines);
    let mut out = String::new();
    for group in group_diff_ops(ops, CONTEXT_LINES) {
        let (Some(first), Some(last)) = (group.first(), group.last()) else {
            continue;
        };
        if out.is_empty() {
            let _ = writeln!(out, "--- {path}\n+++ {path}");
        }
        let old_range = first.old_range().start..last.old_range().end;
        let new_range = first.new_range().start..last.new_range().end;
        let _ = writeln!(
            out,
            "@@ -{} +{} @@",
            hunk_range(old_range.start, old_range.len()),
            hunk_range(new_range.start, new_range.len())
        );
        for op in &group {
            let (tag, old_part, new_part) = op.as_tag_tuple();
            let old_part = old_lines.get(old_part).unwrap_or_default();
            let new_part = new_lines.get(new_part).unwrap_or_default();
            match tag {
                DiffTag::Equal => push_lines(&mut out, ' ', old_part),
                DiffTag::Delete => push_lines(&mut out, '-', old_part),
                DiffTag::Insert => push_lines(&mut out, '+', new_part),
                DiffTag::Replace => {
                    push_lines(&mut out, '-', old_part);
                    push_lines(&mut out, '+', new_part);
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

/// Appends each line with its `tag`, marking a line that has no final newline.
fn push_lines(out: &mut String, tag: char, lines: &[&str]) {
    for line in lines {
        out.push(tag);
        out.push_str(line);
        if !line.ends_with('\n') {
            out.push_str("\n\\ No newline at end of file\n");
        }
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
    let old_lines = tokens(old);
    let new_lines = tokens(new);
    let total = new_lines.len();
    if total == 0 {
        return Vec::new();
    }
    let mut ranges: Vec<RangeInclusive<usize>> = Vec::new();
    for op in line_ops(&old_lines, &new_lines) {
        let span = op.new_range();
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
    let lines = split_lines(new);
    let total = lines.len();
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
    for window in merge_ranges(windows, 1) {
        let (start, end) = (*window.start(), *window.end());
        let Some(rows) = lines.get(start - 1..end) else {
            continue;
        };
        if !out.is_empty() {
            out.push_str("\n...\n");
        }
        out.push_str(&format_numbered(rows, start));
    }
    cap_result_with(out, max_chars, SNIPPET_TRUNCATED)
}

/// Counts the lines added and removed between `old` and `new`.
pub fn diff_stats(old: &str, new: &str) -> DiffStats {
    let mut stats = DiffStats::default();
    if old == new {
        return stats;
    }
    let old_lines = tokens(old);
    let new_lines = tokens(new);
    for op in line_ops(&old_lines, &new_lines) {
        let (tag, old_part, new_part) = op.as_tag_tuple();
        if tag != DiffTag::Equal {
            stats.removed += old_part.len();
            stats.added += new_part.len();
        }
    }
    stats
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn single_line_sides_leave_out_the_count() {
        assert_eq!(
            unified_diff("/f", "a\n", "b\n"),
            "--- /f\n+++ /f\n@@ -1 +1 @@\n-a\n+b\n"
        );
    }

    #[test]
    fn creating_and_emptying_a_file() {
        assert_eq!(
            unified_diff("/f", "", "a\nb\n"),
            "--- /f\n+++ /f\n@@ -0,0 +1,2 @@\n+a\n+b\n"
        );
        assert_eq!(
            unified_diff("/f", "a\nb\n", ""),
            "--- /f\n+++ /f\n@@ -1,2 +0,0 @@\n-a\n-b\n"
        );
    }

    #[test]
    fn missing_final_newlines_are_marked() {
        assert_eq!(
            unified_diff("/f", "a\nb", "a\nc"),
            "--- /f\n+++ /f\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n"
        );
        assert_eq!(
            unified_diff("/f", "a\nb", "a\nb\n"),
            "--- /f\n+++ /f\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+b\n"
        );
        assert_eq!(
            unified_diff("/f", "x\nb", "y\nb"),
            "--- /f\n+++ /f\n@@ -1,2 +1,2 @@\n-x\n+y\n b\n\\ No newline at end of file\n"
        );
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

    #[test]
    fn diffs_apply_back_to_the_new_text() {
        let cases = [
            ("", "x"),
            ("x", ""),
            ("a\nb\nc", "a\nb\nc\n"),
            ("a\nb\nc\n", "a\nb\nc"),
            (
                "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\nk\n",
                "b\nc\nd\nX\ne\nf\ng\nh\ni\nk\nl",
            ),
            ("same\n", "same\nsame\n"),
            ("😀\né\n", "é\n😀\n"),
        ];
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
}
