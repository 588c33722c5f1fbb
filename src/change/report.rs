//! What a change looks like to the agent: counts of lines added and removed, the numbered lines
//! around each change (or a summary when that would flood it), and the unified diff for the
//! structured result (seed 003's feedback). Pure: it compares the LF texts before and after a
//! [`super::Change`]; every changing tool's answer is built from it.

use serde_json::json;

use crate::change::ToolReply;
use crate::ground::path::VirtualPath;
use crate::ground::text::{diff, truncate};
use crate::storage::backend::Version;

/// Lines of context shown around each change in an edit answer (seed 003's snippet).
pub const SNIPPET_CONTEXT_LINES: usize = 4;
/// Largest snippet shown in an edit answer; beyond it, a summary.
pub const SNIPPET_MAX_CHARS: usize = 4_000;

/// Most changed regions listed by name in the summary shown instead of a huge snippet.
const SUMMARY_MAX_REGIONS: usize = 10;

/// What changed in one file, ready to show: the text section for the agent (counts and the
/// numbered lines around each change, or a summary when that would flood it), the unified diff
/// for the structured result, and the counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeReport {
    /// `"N line(s) added, M removed. …"` followed by the snippet or the summary; empty when
    /// nothing changed.
    pub section: String,
    /// The unified diff (capped at the result limit).
    pub diff: String,
    /// Whether `diff` was cut.
    pub diff_truncated: bool,
    /// Lines added and removed.
    pub stats: diff::DiffStats,
}

/// Compares the LF texts of `path` before and after a change (seed 003's feedback: counts,
/// context snippet, unified diff; a summary instead when the change is too large to show).
pub fn report_change(path: &VirtualPath, old_text: &str, new_text: &str) -> ChangeReport {
    let ranges = diff::changed_line_ranges(old_text, new_text);
    let stats = diff::diff_stats(old_text, new_text);
    let mut section = String::new();
    if !ranges.is_empty() {
        let snippet =
            diff::change_snippet(new_text, &ranges, SNIPPET_CONTEXT_LINES, SNIPPET_MAX_CHARS);
        if !snippet.ends_with(diff::SNIPPET_TRUNCATED) {
            section = format!(
                "{} line(s) added, {} removed. The changed region(s) now read:\n{snippet}",
                stats.added, stats.removed
            );
        } else {
            let listed = list_ranges(ranges.get(..SUMMARY_MAX_REGIONS).unwrap_or(&ranges));
            let more = ranges.len().saturating_sub(SUMMARY_MAX_REGIONS);
            section = format!(
                "{} line(s) added, {} removed in {} region(s), too many to show here: lines {}{}. The unified diff is in the structured result; use read_file with offset/limit to see the new text.",
                stats.added,
                stats.removed,
                ranges.len(),
                listed,
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                }
            );
        }
    } else if stats.removed > 0 {
        section = format!("{} line(s) removed; the file is now empty.", stats.removed);
    }
    // Built only a little past what the cap keeps (four bytes per character at most).
    let mut unified = diff::unified_diff_within(
        &path.to_string(),
        old_text,
        new_text,
        4 * truncate::RESULT_CHAR_LIMIT,
    );
    let mut diff_truncated = false;
    if unified.chars().count() > truncate::RESULT_CHAR_LIMIT {
        unified = truncate::cap_result(unified);
        diff_truncated = true;
    }
    ChangeReport {
        section,
        diff: unified,
        diff_truncated,
        stats,
    }
}

/// The answer of an edit-type tool: `headline`, then numbered lines around each change (or a
/// summary when that would flood the agent); the unified diff goes in the structured result.
pub fn describe_change(
    headline: &str,
    path: &VirtualPath,
    old_text: &str,
    new_text: &str,
    occurrences: Option<usize>,
    version: &Version,
) -> ToolReply {
    let report = report_change(path, old_text, new_text);
    let mut text = headline.to_owned();
    if !report.section.is_empty() {
        text.push('\n');
        text.push_str(&report.section);
    }
    let mut structured = json!({
        "path": path.as_str(),
        "version": version.as_str(),
        "lines_added": report.stats.added,
        "lines_removed": report.stats.removed,
        "diff": report.diff,
        "diff_truncated": report.diff_truncated,
    });
    if let (Some(n), Some(map)) = (occurrences, structured.as_object_mut()) {
        map.insert("occurrences".into(), json!(n));
    }
    ToolReply {
        text: truncate::cap_result(text),
        structured: Some(structured),
        image: None,
        file: None,
    }
}

/// `3, 10-12`: line ranges as the answers name them.
pub fn list_ranges(ranges: &[std::ops::RangeInclusive<usize>]) -> String {
    ranges
        .iter()
        .map(|r| {
            if r.start() == r.end() {
                r.start().to_string()
            } else {
                format!("{}-{}", r.start(), r.end())
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}
