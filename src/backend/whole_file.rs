//! What the backends that hold each file whole (memory, store) do alike: a file is the value
//! under its path as a key, so listings are key ranges under a directory's key prefix, a line
//! window is cut from the whole content, and a grep decodes the content and searches it as one
//! text. The disk backend streams instead (`disk`), and uses [`view_of_bytes`] only for
//! files small enough to read whole.

use super::{
    BinarySample, FileView, GrepCollect, GrepFile, GrepQuery, LineWindow, TextWindow, Version,
    WindowedLines, kept_line_text,
};
use crate::content;
use crate::path::VirtualPath;
use crate::search::GrepPattern;
use crate::text::encoding::{self, Detection, FileEncoding};
use crate::text::numbered::split_lines;

/// `"/a/b"` → `"/a/b/"`, `"/"` → `"/"`: the key prefix of everything under a directory.
pub(super) fn key_prefix(dir: &VirtualPath) -> String {
    if dir.is_root() {
        "/".to_owned()
    } else {
        format!("{}/", dir.as_str())
    }
}

/// Builds the [`FileView`] of a whole content: the window the memory and store backends read,
/// and the disk backend's for a file small enough to read whole.
pub(super) fn view_of_bytes(content: &[u8], version: Version, window: LineWindow) -> FileView {
    let size = content.len() as u64;
    if content::looks_binary(content) {
        let head = content[..content.len().min(content::SNIFF_BYTES)].to_vec();
        return FileView::Binary(BinarySample {
            modified: None,
            size,
            head,
            version,
        });
    }
    let (text, lossy, encoding) = match encoding::detect(content) {
        Detection::Text { text, encoding } => (text, false, encoding),
        Detection::Undecodable { lossy, .. } => (lossy, true, FileEncoding::UTF8),
    };
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let all = split_lines(text);
    let total = all.len();
    let start = window.offset.min(total);
    let end = window.offset.saturating_add(window.limit).min(total);
    FileView::Text(TextWindow {
        modified: None,
        lines: all[start..end].iter().map(|l| (*l).to_owned()).collect(),
        total_lines: Some(total),
        has_more: end < total,
        lossy,
        encoding,
        size,
        version,
    })
}

/// Greps one whole file found at `path` for `query`: `None` when the query's file filter
/// leaves it out, it is binary, or no line matches. The file counts as looked at (see
/// [`crate::search::SearchControl`]) once it passes the filter and the binary sniff.
pub(super) fn grep_file(path: &VirtualPath, content: &[u8], query: &GrepQuery) -> Option<GrepFile> {
    if let Some(filter) = &query.file_filter
        && !filter.matches_path(path, &query.dir)
    {
        return None;
    }
    if content::looks_binary(content) {
        return None;
    }
    // UTF-16 and legacy encodings are searched as the text read_file shows.
    let text = encoding::decode_lossy(content);
    let found = grep_text(path, &text, &query.pattern, query.collect);
    query.control.count_file(found.is_some());
    found
}

/// Greps one in-memory text (a leading BOM ignored): `None` when no line matches. A text with
/// a line over the pattern's `max_line_bytes` is reported as skipped, as on disk.
fn grep_text(
    path: &VirtualPath,
    text: &str,
    pattern: &GrepPattern,
    collect: GrepCollect,
) -> Option<GrepFile> {
    // A UTF-8 BOM is not text: read_file hides it, and so does ripgrep's searcher on disk.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    // No line is longer than the whole text: the lines are split (an allocation the size of
    // the line count) only when one could be too long, or the text may hold a match.
    if text.len() as u64 > pattern.max_line_bytes
        && split_lines(text)
            .iter()
            .any(|l| l.len() as u64 > pattern.max_line_bytes)
    {
        return Some(GrepFile::skipped(path.clone(), pattern.long_line_reason()));
    }
    if !pattern.may_match_in(text) {
        return None;
    }
    let lines = split_lines(text);
    let found = |match_count: usize| GrepFile {
        path: path.clone(),
        match_count,
        lines: Vec::new(),
        entries: 0,
        lines_from: 0,
        skipped: None,
    };
    match collect {
        GrepCollect::Files => lines.iter().any(|l| pattern.is_match(l)).then(|| found(1)),
        GrepCollect::Count => {
            let count = lines.iter().filter(|l| pattern.is_match(l)).count();
            (count > 0).then(|| found(count))
        }
        GrepCollect::Lines { context, window } => {
            let hits: Vec<usize> = lines
                .iter()
                .enumerate()
                .filter(|(_, l)| pattern.is_match(l))
                .map(|(i, _)| i)
                .collect();
            if hits.is_empty() {
                return None;
            }
            let mut reported = WindowedLines::new(window);
            let mut next_unreported = 0usize;
            for (k, &hit) in hits.iter().enumerate() {
                let from = hit.saturating_sub(context).max(next_unreported);
                let to = hit.saturating_add(context).min(lines.len() - 1);
                for (i, text) in lines.iter().enumerate().take(to + 1).skip(from) {
                    let is_match = i == hit || hits[k..].binary_search(&i).is_ok();
                    reported.push(i + 1, is_match, || kept_line_text(text));
                }
                next_unreported = to + 1;
            }
            let mut file = found(hits.len());
            file.entries = reported.entries;
            file.lines_from = window.skip.min(reported.entries);
            file.lines = reported.lines;
            Some(file)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_lines_merge_between_close_matches() {
        let p = GrepPattern::new("x", false, false).unwrap();
        let path = VirtualPath::parse("/f").unwrap();
        let f = grep_text(&path, "a\nx\nb\nx\nc\nd\ne\n", &p, GrepCollect::lines(1)).unwrap();
        let nums: Vec<(usize, bool)> = f.lines.iter().map(|l| (l.number, l.is_match)).collect();
        assert_eq!(
            nums,
            vec![(1, false), (2, true), (3, false), (4, true), (5, false)]
        );
        assert_eq!(f.match_count, 2);
    }
}
