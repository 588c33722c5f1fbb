//! What the backends that hold each file whole (memory, store) do alike: a file is the value
//! under its path as a key, so listings are key ranges under a directory's key prefix, a line
//! window is cut from the whole content, and a grep decodes the content and searches it as one
//! text. The disk backend streams instead (`disk`), and uses [`view_of_bytes`] only for
//! files small enough to read whole.

use super::{
    BinarySample, FileView, GrepCollect, GrepFile, GrepQuery, LineWindow, TextWindow, Version,
    WindowedLines, kept_line_text,
};
use grep_matcher::Matcher;

use crate::ground::content;
use crate::ground::path::VirtualPath;
use crate::ground::search::GrepPattern;
use crate::ground::text::encoding::{self, Detection, FileEncoding};
use crate::ground::text::numbered::split_lines;

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
/// [`crate::ground::search::SearchControl`]) once it passes the filter and the binary sniff.
pub(super) fn grep_file(path: &VirtualPath, content: &[u8], query: &GrepQuery) -> Option<GrepFile> {
    grep_content(path, content, false, query)
}

/// [`grep_file`] of a content known to be UTF-8 (a store checked it when it was written): a
/// content the pattern does not match byte for byte is left before it is decoded (checked
/// again) and split. The decoded text is then the same bytes, less a BOM: a content starting
/// with one, or long enough to hold a line over the bound (reported as skipped), takes the
/// common way.
pub(super) fn grep_utf8_file(
    path: &VirtualPath,
    content: &[u8],
    query: &GrepQuery,
) -> Option<GrepFile> {
    grep_content(path, content, true, query)
}

fn grep_content(
    path: &VirtualPath,
    content: &[u8],
    utf8: bool,
    query: &GrepQuery,
) -> Option<GrepFile> {
    if let Some(filter) = &query.file_filter
        && !filter.matches_path(path, &query.dir)
    {
        return None;
    }
    if content::looks_binary(content) {
        return None;
    }
    if utf8
        && !content.starts_with(b"\xEF\xBB\xBF")
        && content.len() as u64 <= query.pattern.max_line_bytes
        && let Some(matcher) = query.pattern.whole_text_matcher()
        && !matcher.is_match(content).unwrap_or(true)
    {
        query.control.count_file(false);
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
    let found = |match_count: usize| GrepFile {
        path: path.clone(),
        match_count,
        lines: Vec::new(),
        entries: 0,
        lines_from: 0,
        skipped: None,
    };
    let hits = matching_lines(text, pattern, matches!(collect, GrepCollect::Files));
    if hits.is_empty() {
        return None;
    }
    match collect {
        GrepCollect::Files => Some(found(1)),
        GrepCollect::Count => Some(found(hits.len())),
        GrepCollect::Lines { context, window } => {
            let lines = split_lines(text);
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

/// The numbers (from 0) of the lines of `text`, split as [`split_lines`] splits it, that
/// `pattern` matches; only the first when `first_only`. The whole text is searched, from the
/// start of the first line not yet judged: the pattern's literal prefilter skips at memchr speed
/// to the next place a match can start, and only the line holding it is cut out and asked (a
/// match in the whole text need not be one in its line alone: `c\s` finds the `\r` of a CRLF
/// line, which the line does not hold). No line before that place can match (a match of a
/// line alone is a match of the whole text at the same place, see
/// [`GrepPattern::may_match_in`]), so no line is missed, and the lines are never all split.
/// A pattern anchored to the text's edges is asked line by line.
fn matching_lines(text: &str, pattern: &GrepPattern, first_only: bool) -> Vec<usize> {
    let Some(matcher) = pattern.whole_text_matcher() else {
        if !pattern.may_match_in(text) {
            return Vec::new();
        }
        let hits = split_lines(text)
            .into_iter()
            .enumerate()
            .filter(|(_, line)| pattern.is_match(line))
            .map(|(number, _)| number);
        return if first_only {
            hits.take(1).collect()
        } else {
            hits.collect()
        };
    };
    let bytes = text.as_bytes();
    if bytes.is_empty() {
        return Vec::new();
    }
    // Where the last line ends: a final `\n` ends it and starts no line of its own.
    let last_end = bytes.len() - usize::from(bytes.ends_with(b"\n"));
    let mut hits = Vec::new();
    // The first line not yet judged: where it starts and its number.
    let (mut at, mut number) = (0usize, 0usize);
    while at <= last_end {
        let Some(found) = matcher
            .find_at(bytes, at)
            .unwrap_or(None)
            .map(|m| m.start())
        else {
            break;
        };
        if found > last_end {
            break;
        }
        let start = memchr::memrchr(b'\n', &bytes[at..found]).map_or(at, |i| at + i + 1);
        number += memchr::memchr_iter(b'\n', &bytes[at..start]).count();
        let end = memchr::memchr(b'\n', &bytes[found..]).map_or(bytes.len(), |i| found + i);
        let line = &text[start..end];
        if pattern.is_match(line.strip_suffix('\r').unwrap_or(line)) {
            hits.push(number);
            if first_only {
                break;
            }
        }
        (at, number) = (end + 1, number + 1);
    }
    hits
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lines every pattern matches one at a time, as the search asked each line before.
    fn line_by_line(text: &str, pattern: &GrepPattern) -> Vec<usize> {
        split_lines(text)
            .iter()
            .enumerate()
            .filter(|(_, l)| pattern.is_match(l))
            .map(|(i, _)| i)
            .collect()
    }

    #[test]
    fn whole_text_search_finds_the_lines_a_line_by_line_search_finds() {
        let texts = [
            "",
            "\n",
            "\n\n",
            "a",
            "a\n",
            "abc\r\n",
            "abc\r",
            "abc\r\r\n",
            "x\r\ny\r\n\r\nabc\rdef\n",
            "c \nc\r\nc\n c\t\n",
            "ab\nb\nab\n\nba",
            "fn main() {}\n\n    unsafe impl Send for X {}\nunsafe\n impl\n",
            "été\nÉTÉ\n\u{2028}x\n",
        ];
        let patterns = [
            ("^$", false),
            ("$", false),
            ("^", false),
            ("c\\s", false),
            ("c\\s*$", false),
            ("c$", false),
            ("^c", false),
            ("\\bc\\b", false),
            ("\\Bb", false),
            ("b*", false),
            ("a|b", false),
            ("unsafe\\s+impl", false),
            ("\\r", false),
            ("\\s$", false),
            ("[^a]", false),
            ("été", true),
            ("x$", false),
        ];
        for (source, case_insensitive) in patterns {
            let pattern = GrepPattern::new(source, false, case_insensitive).unwrap();
            for text in texts {
                let expected = line_by_line(text, &pattern);
                assert_eq!(
                    matching_lines(text, &pattern, false),
                    expected,
                    "{source:?} in {text:?}"
                );
                let first: Vec<usize> = expected.into_iter().take(1).collect();
                assert_eq!(matching_lines(text, &pattern, true), first, "{source:?}");
            }
        }
    }

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
