//! `cat -n` style numbering of lines, as `read_file` and edit snippets show them.
//!
//! Owns the row format (`%6d\t<line>`), the split of lines longer than [`MAX_LINE_CHARS`]
//! characters into rows `N`, `N.1`, `N.2`, … (seed 000 §3.1, CONTRACT §4 `read_file`), the
//! splitting of text into lines (CRLF shown as LF) and the empty-file test, and its inverse:
//! recognising those row prefixes in text copied back into an edit ([`strip_row_prefixes`]).
//! Choosing which lines to show (offset, limit, paging hints) is left to the tools.

use std::fmt::Write as _;

/// Longest row, in characters (not bytes), before a line is split into continuation rows.
pub const MAX_LINE_CHARS: usize = 5000;

/// Width the line number is right-aligned to (`cat -n` uses six columns).
pub const LINE_NUMBER_WIDTH: usize = 6;

/// What `read_file` answers for a file that is empty or holds only whitespace.
pub const EMPTY_CONTENT_WARNING: &str = "System reminder: File exists but has empty contents";

/// Splits `text` into lines on `'\n'`.
///
/// One trailing `'\r'` is stripped from each line, so CRLF text is shown as LF. A final newline
/// does not produce an extra empty line, so `""` gives no lines, `"a\n"` gives `["a"]` and
/// `"a\n\nb"` gives `["a", "", "b"]`.
pub fn split_lines(text: &str) -> Vec<&str> {
    if text.is_empty() {
        return Vec::new();
    }
    let body = text.strip_suffix('\n').unwrap_or(text);
    body.split('\n')
        .map(|line| line.strip_suffix('\r').unwrap_or(line))
        .collect()
}

/// Formats `lines` like `cat -n`, numbering the first one `first_line_number`.
///
/// Each row is the number right-aligned to [`LINE_NUMBER_WIDTH`] columns, a tab, then the line;
/// rows are joined by `'\n'` with no trailing newline. A line longer than [`MAX_LINE_CHARS`]
/// characters is cut (at character boundaries, never inside a UTF-8 sequence) into chunks of that
/// many characters: the first chunk is numbered `N`, the next ones `N.1`, `N.2`, …
pub fn format_numbered<S: AsRef<str>>(lines: &[S], first_line_number: usize) -> String {
    let bytes: usize = lines.iter().map(|line| line.as_ref().len()).sum();
    let mut out =
        String::with_capacity(bytes.saturating_add(lines.len() * (LINE_NUMBER_WIDTH + 2)));
    for (offset, line) in lines.iter().enumerate() {
        let number = first_line_number.saturating_add(offset);
        push_rows(&mut out, line.as_ref(), number);
    }
    out
}

/// Whether every line is empty or whitespace only (an empty slice is blank too).
///
/// `read_file` answers [`EMPTY_CONTENT_WARNING`] for such a file instead of numbered rows.
pub fn is_blank(lines: &[&str]) -> bool {
    lines.iter().all(|line| line.trim().is_empty())
}

/// Appends the row(s) of one source line, each preceded by `'\n'` unless `out` is empty.
fn push_rows(out: &mut String, line: &str, number: usize) {
    // A line of at most MAX_LINE_CHARS bytes has at most as many characters: one row, written
    // without the formatting machinery (most lines of most files; read_file's cost per line).
    if line.len() <= MAX_LINE_CHARS {
        if !out.is_empty() {
            out.push('\n');
        }
        push_padded_number(out, number);
        out.push('\t');
        out.push_str(line);
        return;
    }
    let mut rest = line;
    let mut continuation = 0usize;
    let width = LINE_NUMBER_WIDTH;
    loop {
        let (chunk, tail) = split_at_char(rest, MAX_LINE_CHARS);
        if !out.is_empty() {
            out.push('\n');
        }
        // Writing into a String cannot fail; the Result only exists for other writers.
        let _ = if continuation == 0 {
            write!(out, "{number:>width$}\t{chunk}")
        } else {
            let marker = format!("{number}.{continuation}");
            write!(out, "{marker:>width$}\t{chunk}")
        };
        if tail.is_empty() {
            break;
        }
        rest = tail;
        continuation += 1;
    }
}

/// Appends `number` right-aligned to [`LINE_NUMBER_WIDTH`] columns, as `{number:>6}` would.
fn push_padded_number(out: &mut String, mut number: usize) {
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    loop {
        start -= 1;
        digits[start] = b'0' + (number % 10) as u8;
        number /= 10;
        if number == 0 {
            break;
        }
    }
    let digits = &digits[start..];
    for _ in digits.len()..LINE_NUMBER_WIDTH {
        out.push(' ');
    }
    // ASCII digits only.
    out.push_str(std::str::from_utf8(digits).unwrap_or_default());
}

/// Splits `s` after its first `chars` characters (or returns `(s, "")` when it is shorter).
fn split_at_char(s: &str, chars: usize) -> (&str, &str) {
    match s.char_indices().nth(chars) {
        Some((byte, _)) => s.split_at_checked(byte).unwrap_or((s, "")),
        None => (s, ""),
    }
}

/// `old` without the row prefixes [`format_numbered`] writes, when every non-blank line carries
/// one: the inverse of numbering, for text copied from `read_file` output into an edit.
///
/// A prefix is what the regex `^\s*\d+(\.\d+)?\t` matches (ASCII digits): optional whitespace,
/// the line number, an optional `.k` of a continuation row, and the tab. Blank lines are kept as
/// they are; at least one line must carry a prefix.
pub fn strip_row_prefixes(old: &str) -> Option<String> {
    let mut any = false;
    let mut stripped = Vec::new();
    for line in old.split('\n') {
        if line.trim().is_empty() {
            stripped.push(line);
            continue;
        }
        stripped.push(strip_line_number(line)?);
        any = true;
    }
    any.then(|| stripped.join("\n"))
}

/// The rest of `line` after a `read_file` row prefix, if it starts with one.
fn strip_line_number(line: &str) -> Option<&str> {
    let rest = skip_digits(line.trim_start())?;
    let rest = match rest.strip_prefix('.') {
        Some(after_dot) => skip_digits(after_dot)?,
        None => rest,
    };
    rest.strip_prefix('\t')
}

/// `text` after one or more leading ASCII digits, or `None` when it does not start with one.
fn skip_digits(text: &str) -> Option<&str> {
    let rest = text.trim_start_matches(|c: char| c.is_ascii_digit());
    (rest.len() < text.len()).then_some(rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fast_row_writes_what_the_format_string_wrote() {
        for number in [
            0,
            1,
            9,
            10,
            99_999,
            999_999,
            1_000_000,
            123_456_789,
            usize::MAX,
        ] {
            let mut out = String::new();
            push_padded_number(&mut out, number);
            assert_eq!(out, format!("{number:>6}"));
        }
        // At the edge of the fast path: 5,000 bytes is one row; 5,000 characters of two bytes
        // each is one row too (the slow path), 5,001 characters two.
        let ascii = "a".repeat(MAX_LINE_CHARS);
        assert_eq!(format_numbered(&[&ascii], 7), format!("     7\t{ascii}"));
        let wide = "é".repeat(MAX_LINE_CHARS);
        assert_eq!(format_numbered(&[&wide], 7), format!("     7\t{wide}"));
        let wider = "é".repeat(MAX_LINE_CHARS + 1);
        assert_eq!(
            format_numbered(&[&wider], 7),
            format!("     7\t{wide}\n   7.1\té")
        );
    }

    #[test]
    fn split_lines_of_empty_text_is_empty() {
        assert!(split_lines("").is_empty());
    }

    #[test]
    fn split_lines_keeps_inner_empty_lines() {
        assert_eq!(split_lines("a\n\nb"), vec!["a", "", "b"]);
    }

    #[test]
    fn split_lines_ignores_one_final_newline() {
        assert_eq!(split_lines("a\nb\n"), vec!["a", "b"]);
        assert_eq!(split_lines("a\nb\n\n"), vec!["a", "b", ""]);
        assert_eq!(split_lines("\n"), vec![""]);
    }

    #[test]
    fn split_lines_shows_crlf_as_lf() {
        assert_eq!(split_lines("a\r\nb\r\n"), vec!["a", "b"]);
        assert_eq!(split_lines("a\r\r\nb"), vec!["a\r", "b"]);
        assert_eq!(split_lines("a\rb"), vec!["a\rb"]);
    }

    #[test]
    fn format_numbered_pads_to_six_columns() {
        assert_eq!(
            format_numbered(&["import os", "", "x = 1"], 1),
            "     1\timport os\n     2\t\n     3\tx = 1"
        );
    }

    #[test]
    fn format_numbered_starts_at_the_given_number() {
        assert_eq!(
            format_numbered(&["a", "b"], 999_999),
            "999999\ta\n1000000\tb"
        );
        assert_eq!(format_numbered(&[String::from("x")], 42), "    42\tx");
    }

    #[test]
    fn format_numbered_of_no_lines_is_empty() {
        let none: [&str; 0] = [];
        assert_eq!(format_numbered(&none, 1), "");
    }

    #[test]
    fn a_line_of_exactly_the_limit_is_one_row() {
        let line = "x".repeat(MAX_LINE_CHARS);
        assert_eq!(
            format_numbered(&[line.as_str()], 7),
            format!("     7\t{line}")
        );
    }

    #[test]
    fn a_long_line_is_split_into_continuation_rows() {
        let line = format!("{}{}{}", "a".repeat(5000), "b".repeat(5000), "c".repeat(10));
        let got = format_numbered(&["first", line.as_str(), "last"], 4);
        let expected = format!(
            "     4\tfirst\n     5\t{}\n   5.1\t{}\n   5.2\t{}\n     6\tlast",
            "a".repeat(5000),
            "b".repeat(5000),
            "c".repeat(10)
        );
        assert_eq!(got, expected);
    }

    #[test]
    fn a_long_line_is_split_at_character_boundaries() {
        // 'é' is two bytes and '😀' four: a byte-based cut would land inside them.
        let line = format!("{}{}", "é".repeat(4999), "😀😀");
        let got = format_numbered(&[line.as_str()], 1);
        let expected = format!("     1\t{}😀\n   1.1\t😀", "é".repeat(4999));
        assert_eq!(got, expected);
    }

    #[test]
    fn continuation_markers_right_align_like_numbers() {
        let line = "z".repeat(MAX_LINE_CHARS * 2);
        let got = format_numbered(&[line.as_str()], 123_456);
        let rows: Vec<&str> = got.split('\n').collect();
        assert_eq!(rows.len(), 2);
        assert!(rows[0].starts_with("123456\t"));
        assert!(rows[1].starts_with("123456.1\t"));
        let got = format_numbered(&[line.as_str()], 12);
        assert!(got.contains("\n  12.1\t"));
    }

    #[test]
    fn is_blank_accepts_whitespace_only() {
        assert!(is_blank(&[]));
        assert!(is_blank(&["", "  ", "\t", "\r"]));
        assert!(!is_blank(&["", " x "]));
    }

    #[test]
    fn empty_content_warning_text_is_pinned() {
        assert_eq!(
            EMPTY_CONTENT_WARNING,
            "System reminder: File exists but has empty contents"
        );
        assert_eq!(LINE_NUMBER_WIDTH, 6);
        assert_eq!(MAX_LINE_CHARS, 5000);
    }

    #[test]
    fn split_at_char_counts_characters() {
        assert_eq!(split_at_char("héllo", 2), ("hé", "llo"));
        assert_eq!(split_at_char("hé", 2), ("hé", ""));
        assert_eq!(split_at_char("", 3), ("", ""));
    }

    #[test]
    fn helpers_strip_prefixes_like_the_regex() {
        assert_eq!(strip_line_number("     12\tx"), Some("x"));
        assert_eq!(strip_line_number("  5.3\t\ty"), Some("\ty"));
        assert_eq!(strip_line_number("\t7\tz"), Some("z"));
        assert_eq!(strip_line_number("12 x"), None);
        assert_eq!(strip_line_number("x\t1"), None);
        assert_eq!(strip_line_number(".5\tx"), None);
    }

    #[test]
    fn stripping_row_prefixes_undoes_numbering() {
        let lines = ["fn main() {", "", "    body();", "}"];
        let numbered = format_numbered(&lines, 98);
        assert_eq!(strip_row_prefixes(&numbered), Some(lines.join("\n")));
        assert_eq!(strip_row_prefixes("no prefix here"), None);
        assert_eq!(
            strip_row_prefixes("1\tone\ntwo"),
            None,
            "every line needs one"
        );
    }
}
