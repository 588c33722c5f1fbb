//! Exact, literal `old_string` → `new_string` replacement for `edit_file` and `multi_edit`.
//!
//! Owns when an edit is refused and the text the agent reads then (CONTRACT §4, seed 003):
//! empty or no-op edits, `read_file` line-number prefixes left in `old_string`, a string not found
//! (with a pointer to the closest region, or the note that only whitespace differs), a string found
//! several times, a wrong `expected_replacements`, and conflicting multi-edits. Replacement is
//! literal: no `$` patterns, no regex. An `old_string` not found exactly is looked for again with
//! typographic and straight quotes treated as equal ([`super::quotes`]); exact matches always win.
//! Where a string not found was probably meant is [`super::nearest`]'s to find; recognising
//! `read_file` row prefixes is [`super::numbered`]'s, which writes them.
//! The text is LF text; converting CRLF and the BOM around the edit is left to
//! [`super::line_endings`], and reading or writing the file to the tools.

use std::fmt;
use std::ops::Range;

use super::nearest::{self, NotFoundHint};
use super::numbered::strip_row_prefixes;
use super::quotes::{self, QuoteStyle};

/// How much of a missing `old_string` the not-found error repeats, in characters.
const OLD_STRING_SHOWN_CHARS: usize = 200;
/// How many occurrence lines an error lists before `…`.
const LINES_LISTED: usize = 20;
/// One requested replacement.
#[derive(Debug, Clone, Copy)]
pub struct EditSpec<'a> {
    /// The exact text to find; must not be empty.
    pub old_string: &'a str,
    /// The text put in its place, literally.
    pub new_string: &'a str,
    /// Replace every occurrence instead of requiring exactly one.
    pub replace_all: bool,
    /// When set, the number of occurrences must be exactly this; all of them are replaced.
    pub expected_replacements: Option<usize>,
}

/// Which occurrences of an `old_string` an edit may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Matching {
    /// Exact occurrences, else those found with quotes folded: an edit of the text the agent
    /// read.
    Tolerant,
    /// Exact occurrences only: an edit applied to a file changed since the agent read it, which
    /// may only use text still there verbatim.
    Exact,
}

/// The text after a successful edit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replaced {
    /// The whole new text.
    pub content: String,
    /// How many occurrences were replaced (summed over all edits of a multi-edit).
    pub occurrences: usize,
    /// How many of them were found only with typographic and straight quotes treated as equal
    /// (and written in the file's quote style).
    pub loose_quotes: usize,
}

/// Why an edit was refused; the file is left untouched. `Display` is the text the agent reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EditError {
    /// `old_string` is empty.
    EmptyOldString,
    /// `old_string` equals `new_string`.
    Identical,
    /// `old_string` was not found and every line of it starts with a `read_file` row prefix.
    LineNumberPrefix {
        /// `old_string` with the prefixes removed.
        stripped: String,
    },
    /// `old_string` does not occur in the file.
    NotFound {
        /// The `old_string` given.
        old_string: String,
        /// Where the intended text probably is.
        hint: NotFoundHint,
    },
    /// `old_string` occurs more than once and neither `replace_all` nor `expected_replacements`
    /// was given.
    Multiple {
        /// Occurrences found.
        count: usize,
        /// 1-based line of the start of each occurrence.
        lines: Vec<usize>,
        /// Whether the occurrences were counted with typographic and straight quotes treated as
        /// equal (none matched exactly).
        quotes_folded: bool,
    },
    /// `expected_replacements` differs from the number of occurrences.
    ExpectedMismatch {
        /// What the edit asked for.
        expected: usize,
        /// Occurrences found.
        found: usize,
        /// 1-based line of the start of each occurrence.
        lines: Vec<usize>,
        /// Whether the occurrences were counted with typographic and straight quotes treated as
        /// equal (none matched exactly).
        quotes_folded: bool,
    },
    /// The result would be larger than the edit bound (`--max-edit-bytes`); it was never
    /// built.
    TooLarge {
        /// Bytes the result would have.
        size: usize,
        /// The bound.
        limit: usize,
    },
}

impl EditError {
    /// Writes the message without its leading `Error: `.
    fn write_body(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::EmptyOldString => f.write_str(
                "old_string is empty. To create a file or replace all of an empty one use \
                 write_file; to insert text, put a neighbouring line in old_string and repeat it \
                 in new_string.",
            ),
            Self::Identical => f.write_str(
                "old_string and new_string are identical, so no change would be made. Put the \
                 replacement text in new_string.",
            ),
            Self::LineNumberPrefix { stripped } => write!(
                f,
                "old_string contains line-number prefixes copied from read_file output (like \
                 \"     12\\t\"). Remove them and retry; without them old_string is:\n{stripped}"
            ),
            Self::NotFound { old_string, hint } => {
                writeln!(f, "String not found in file: '{}'.", shorten(old_string))?;
                match hint {
                    NotFoundHint::None => f.write_str(
                        "Read the file again and copy old_string exactly, including whitespace \
                         and indentation.",
                    ),
                    NotFoundHint::WhitespaceDiffers {
                        first_line,
                        last_line,
                    } => write!(
                        f,
                        "Only whitespace or line endings differ: lines {first_line}-{last_line} \
                         of the file match when spaces, tabs and line endings are ignored. Copy \
                         those lines exactly (read_file shows them) and retry."
                    ),
                    NotFoundHint::Closest {
                        first_line,
                        last_line,
                        excerpt,
                    } => write!(
                        f,
                        "The closest match is at lines {first_line}-{last_line}:\n{excerpt}\n\
                         Read the file again and copy old_string exactly, including whitespace."
                    ),
                }
            }
            Self::Multiple {
                count,
                lines,
                quotes_folded,
            } => write!(
                f,
                "String appears {count} times in file (lines {}){}. Use replace_all=true to \
                 replace all instances, or provide a more specific string with surrounding \
                 context.",
                list_lines(lines),
                folded_note(*quotes_folded)
            ),
            Self::ExpectedMismatch {
                expected,
                found,
                lines,
                quotes_folded,
            } => {
                write!(
                    f,
                    "Expected {expected} replacement(s) but found {found} occurrence(s)"
                )?;
                if *found > 0 {
                    write!(
                        f,
                        " (lines {}){}",
                        list_lines(lines),
                        folded_note(*quotes_folded)
                    )?;
                }
                write!(
                    f,
                    ". Set expected_replacements to {found} or refine old_string."
                )
            }
            Self::TooLarge { size, limit } => write!(
                f,
                "the edited text would be {size} bytes, over the limit of {limit} bytes \
                 (--max-edit-bytes). Replace fewer occurrences at a time, or ask the user to \
                 raise the limit."
            ),
        }
    }
}

/// What an occurrence count adds when it was made with quotes folded.
fn folded_note(quotes_folded: bool) -> &'static str {
    if quotes_folded {
        ", counting typographic and straight quotes as equal"
    } else {
        ""
    }
}

impl fmt::Display for EditError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Error: ")?;
        self.write_body(f)
    }
}

impl std::error::Error for EditError {}

/// Why a multi-edit was refused; the file is left untouched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultiEditError {
    /// 1-based position of the failing edit.
    pub index: usize,
    /// Number of edits in the request.
    pub total: usize,
    /// What went wrong.
    pub kind: MultiEditErrorKind,
}

/// What went wrong in a multi-edit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MultiEditErrorKind {
    /// The edit itself failed on the working copy left by the edits before it.
    Edit(EditError),
    /// An earlier edit replaces the same `old_string` with a different `new_string`.
    SameTextDifferently {
        /// 1-based position of the earlier edit.
        other: usize,
    },
    /// An occurrence of this edit's `old_string` overlaps one of an earlier edit's, in the
    /// original text.
    Overlap {
        /// 1-based position of the earlier edit.
        other: usize,
    },
}

impl fmt::Display for MultiEditError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self { index, total, kind } = self;
        match kind {
            MultiEditErrorKind::Edit(error) => {
                write!(f, "Error: edit {index} of {total}: ")?;
                error.write_body(f)
            }
            MultiEditErrorKind::SameTextDifferently { other } => write!(
                f,
                "Error: edit {index} of {total} conflicts with edit {other}: both replace the \
                 same old_string with different new_string. Merge them into one edit."
            ),
            MultiEditErrorKind::Overlap { other } => write!(
                f,
                "Error: edit {index} of {total} overlaps edit {other}: their old_string regions \
                 overlap in the file. Merge them into one edit or make them disjoint."
            ),
        }
    }
}

impl std::error::Error for MultiEditError {}

/// Applies one edit to `content`.
///
/// Checks, in order: `old_string` empty, `old_string == new_string`, then the occurrences
/// (non-overlapping, left to right). With `expected_replacements` the count must equal it and all
/// occurrences are replaced; otherwise one occurrence is replaced, or all of them with
/// `replace_all`, and several without it are refused. When nothing is found, the error is
/// [`EditError::LineNumberPrefix`] if `old_string` looks copied from `read_file` rows, else
/// [`EditError::NotFound`] with a hint. `new_string` is inserted literally.
///
/// When `old_string` occurs nowhere exactly but does once typographic and straight quotes are
/// folded (`“ ”` ↔ `"`, `‘ ’` ↔ `'`), the same rules apply to the occurrences in the folded text
/// (so two places differing only in quote style are ambiguous), and `new_string` is written in the
/// quote style of each occurrence it replaces ([`Replaced::loose_quotes`] counts them).
///
/// # Errors
///
/// Any [`EditError`]; `content` is never modified, the new text only exists in the `Ok` value.
pub fn apply_edit(content: &str, edit: &EditSpec<'_>) -> Result<Replaced, EditError> {
    apply_edit_within(content, edit, usize::MAX)
}

/// [`apply_edit`], refusing with [`EditError::TooLarge`] (before building it) a result over
/// `max_len` bytes: `replace_all` of a short string by a long one can multiply a file's size.
pub fn apply_edit_within(
    content: &str,
    edit: &EditSpec<'_>,
    max_len: usize,
) -> Result<Replaced, EditError> {
    apply_edit_matching(content, edit, max_len, Matching::Tolerant)
}

/// [`apply_edit_within`] using only the occurrences `matching` allows.
pub fn apply_edit_matching(
    content: &str,
    edit: &EditSpec<'_>,
    max_len: usize,
    matching: Matching,
) -> Result<Replaced, EditError> {
    let old = edit.old_string;
    if old.is_empty() {
        return Err(EditError::EmptyOldString);
    }
    if old == edit.new_string {
        return Err(EditError::Identical);
    }
    let count = content.matches(old).count();
    if count == 0 {
        if matching == Matching::Exact {
            return Err(not_found(content, old));
        }
        return match quotes::find_loose(content, old) {
            Some(spans) if !spans.is_empty() => apply_loose(content, edit, &spans, max_len),
            _ => Err(not_found(content, old)),
        };
    }
    match edit.expected_replacements {
        Some(expected) if expected != count => Err(EditError::ExpectedMismatch {
            expected,
            found: count,
            lines: occurrence_lines(content, old),
            quotes_folded: false,
        }),
        None if count > 1 && !edit.replace_all => Err(EditError::Multiple {
            count,
            lines: occurrence_lines(content, old),
            quotes_folded: false,
        }),
        _ if projected_len(content.len(), old.len(), edit.new_string.len(), count) > max_len => {
            Err(EditError::TooLarge {
                size: projected_len(content.len(), old.len(), edit.new_string.len(), count),
                limit: max_len,
            })
        }
        // `str::replace` is literal: `$1` or `\0` in new_string stay as written.
        _ => Ok(Replaced {
            content: content.replace(old, edit.new_string),
            occurrences: count,
            loose_quotes: 0,
        }),
    }
}

/// [`apply_edit_within`] for an `old_string` found only with quotes folded, at `spans` (byte
/// ranges of `content`, ascending, disjoint, at least one).
fn apply_loose(
    content: &str,
    edit: &EditSpec<'_>,
    spans: &[Range<usize>],
    max_len: usize,
) -> Result<Replaced, EditError> {
    let count = spans.len();
    let lines = || span_lines(content, spans);
    match edit.expected_replacements {
        Some(expected) if expected != count => {
            return Err(EditError::ExpectedMismatch {
                expected,
                found: count,
                lines: lines(),
                quotes_folded: true,
            });
        }
        None if count > 1 && !edit.replace_all => {
            return Err(EditError::Multiple {
                count,
                lines: lines(),
                quotes_folded: true,
            });
        }
        _ => {}
    }
    let matched = |span: &Range<usize>| content.get(span.clone()).unwrap_or_default();
    let styles: Vec<QuoteStyle> = spans
        .iter()
        .map(|span| QuoteStyle::of_match(matched(span), edit.old_string))
        .collect();
    let size = spans
        .iter()
        .zip(&styles)
        .fold(content.len(), |size, (span, style)| {
            size.saturating_sub(span.len())
                .saturating_add(style.applied_len(edit.new_string))
        });
    if size > max_len {
        return Err(EditError::TooLarge {
            size,
            limit: max_len,
        });
    }
    let mut out = String::with_capacity(size);
    let mut copied = 0usize;
    for (span, style) in spans.iter().zip(&styles) {
        let before = content.get(copied..span.start).unwrap_or_default();
        out.push_str(before);
        if style.is_keep() {
            out.push_str(edit.new_string);
        } else {
            let previous = content
                .get(..span.start)
                .and_then(|head| head.chars().next_back());
            out.push_str(&style.apply(edit.new_string, previous));
        }
        copied = span.end;
    }
    out.push_str(content.get(copied..).unwrap_or_default());
    Ok(Replaced {
        content: out,
        occurrences: count,
        loose_quotes: count,
    })
}

/// Applies `edits` in order to a working copy of `content`, all or nothing.
///
/// Before anything is applied, each edit is checked against every earlier one: the same
/// `old_string` with a different `new_string` is [`MultiEditErrorKind::SameTextDifferently`];
/// different `old_string`s that both occur in the original text with intersecting occurrences are
/// [`MultiEditErrorKind::Overlap`]. Then the edits run one after the other, each on the result of
/// the previous ones (so an edit may target text an earlier edit wrote). `occurrences` is the
/// total. No edits gives `content` back with 0 occurrences.
///
/// # Errors
///
/// A [`MultiEditError`] naming the first conflicting or failing edit (1-based); nothing of the
/// other edits is kept.
pub fn apply_edits(content: &str, edits: &[EditSpec<'_>]) -> Result<Replaced, MultiEditError> {
    apply_edits_within(content, edits, usize::MAX)
}

/// [`apply_edits`] with every intermediate result bounded by `max_len` bytes
/// ([`EditError::TooLarge`] for the edit that would pass it).
pub fn apply_edits_within(
    content: &str,
    edits: &[EditSpec<'_>],
    max_len: usize,
) -> Result<Replaced, MultiEditError> {
    apply_edits_matching(content, edits, max_len, Matching::Tolerant)
}

/// [`apply_edits_within`] using only the occurrences `matching` allows.
pub fn apply_edits_matching(
    content: &str,
    edits: &[EditSpec<'_>],
    max_len: usize,
    matching: Matching,
) -> Result<Replaced, MultiEditError> {
    let total = edits.len();
    if let Some((index, kind)) = find_conflict(content, edits, matching) {
        return Err(MultiEditError { index, total, kind });
    }
    let mut working = content.to_owned();
    let mut occurrences = 0usize;
    let mut loose_quotes = 0usize;
    for (position, edit) in edits.iter().enumerate() {
        let replaced = apply_edit_matching(&working, edit, max_len, matching).map_err(|error| {
            MultiEditError {
                index: position + 1,
                total,
                kind: MultiEditErrorKind::Edit(error),
            }
        })?;
        occurrences += replaced.occurrences;
        loose_quotes += replaced.loose_quotes;
        working = replaced.content;
    }
    Ok(Replaced {
        content: working,
        occurrences,
        loose_quotes,
    })
}

/// Bytes of `content_len` bytes after `count` occurrences of `old_len` bytes become `new_len`
/// bytes each (saturating, so a huge product is simply "too large").
fn projected_len(content_len: usize, old_len: usize, new_len: usize, count: usize) -> usize {
    content_len
        .saturating_sub(count.saturating_mul(old_len))
        .saturating_add(count.saturating_mul(new_len))
}

/// 1-based line on which each non-overlapping occurrence of `needle` starts, in order.
///
/// An empty `needle` has no occurrences.
pub fn occurrence_lines(content: &str, needle: &str) -> Vec<usize> {
    if needle.is_empty() {
        return Vec::new();
    }
    lines_of_starts(content, content.match_indices(needle).map(|(at, _)| at))
}

/// 1-based line on which each of `spans` starts.
fn span_lines(content: &str, spans: &[Range<usize>]) -> Vec<usize> {
    lines_of_starts(content, spans.iter().map(|span| span.start))
}

/// 1-based line of each byte offset of `starts` (ascending) in `content`.
fn lines_of_starts(content: &str, starts: impl Iterator<Item = usize>) -> Vec<usize> {
    let mut lines = Vec::new();
    let mut line = 1usize;
    let mut scanned = 0usize;
    for position in starts {
        line += count_newlines(content.get(scanned..position).unwrap_or_default());
        scanned = position;
        lines.push(line);
    }
    lines
}

fn count_newlines(text: &str) -> usize {
    text.bytes().filter(|&byte| byte == b'\n').count()
}

/// `old_string` as the not-found error repeats it: at most 200 characters, then `…`.
fn shorten(text: &str) -> String {
    let mut chars = text.char_indices();
    match chars.nth(OLD_STRING_SHOWN_CHARS) {
        Some((byte, _)) => format!("{}…", text.get(..byte).unwrap_or_default()),
        None => text.to_owned(),
    }
}

/// `1, 5, 9`: the first [`LINES_LISTED`] numbers, then `, …` when there are more.
fn list_lines(lines: &[usize]) -> String {
    let mut out = lines
        .iter()
        .take(LINES_LISTED)
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    if lines.len() > LINES_LISTED {
        out.push_str(", …");
    }
    out
}

/// The error for an `old_string` that occurs nowhere in `content`.
fn not_found(content: &str, old: &str) -> EditError {
    if let Some(stripped) = strip_row_prefixes(old) {
        return EditError::LineNumberPrefix { stripped };
    }
    EditError::NotFound {
        old_string: old.to_owned(),
        hint: nearest::hint(content, old),
    }
}

/// The first conflict between two edits, as (1-based later edit, kind).
fn find_conflict(
    content: &str,
    edits: &[EditSpec<'_>],
    matching: Matching,
) -> Option<(usize, MultiEditErrorKind)> {
    // Occurrences of each old_string in the original text, as the edit will find them: exact
    // ones, else those with quotes folded (none for an empty one, which fails on its own when
    // applied).
    let positions: Vec<Vec<Range<usize>>> = edits
        .iter()
        .map(|edit| occurrence_spans(content, edit.old_string, matching))
        .collect();
    for (later, edit) in edits.iter().enumerate() {
        for (earlier, other) in edits.iter().enumerate().take(later) {
            if edit.old_string.is_empty() || other.old_string.is_empty() {
                continue;
            }
            if edit.old_string == other.old_string {
                if edit.new_string != other.new_string {
                    let kind = MultiEditErrorKind::SameTextDifferently { other: earlier + 1 };
                    return Some((later + 1, kind));
                }
                continue;
            }
            let (Some(mine), Some(theirs)) = (positions.get(later), positions.get(earlier)) else {
                continue;
            };
            if intersects(mine, theirs) {
                return Some((
                    later + 1,
                    MultiEditErrorKind::Overlap { other: earlier + 1 },
                ));
            }
        }
    }
    None
}

/// Where `old` occurs in `content` as [`apply_edit_matching`] finds it: the exact occurrences,
/// or when there are none and `matching` allows it, those found with quotes folded.
fn occurrence_spans(content: &str, old: &str, matching: Matching) -> Vec<Range<usize>> {
    if old.is_empty() {
        return Vec::new();
    }
    let exact: Vec<Range<usize>> = content
        .match_indices(old)
        .map(|(at, found)| at..at + found.len())
        .collect();
    if !exact.is_empty() || matching == Matching::Exact {
        return exact;
    }
    quotes::find_loose(content, old).unwrap_or_default()
}

/// Whether any span of `a` intersects any span of `b` (both ascending and disjoint).
fn intersects(a: &[Range<usize>], b: &[Range<usize>]) -> bool {
    let (mut i, mut j) = (0usize, 0usize);
    while let (Some(x), Some(y)) = (a.get(i), b.get(j)) {
        if x.start < y.end && y.start < x.end {
            return true;
        }
        if x.end <= y.start {
            i += 1;
        } else {
            j += 1;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `content` after the one replacement of `old` by `new`.
    fn edited(content: &str, old: &str, new: &str) -> String {
        apply_edit(content, &edit(old, new)).unwrap().content
    }

    /// Where the "not found" hint for `old` in `content` points: its kind and lines.
    fn hint_at(content: &str, old: &str) -> (&'static str, usize, usize) {
        match apply_edit(content, &edit(old, "x")) {
            Err(EditError::NotFound { hint, .. }) => match hint {
                NotFoundHint::WhitespaceDiffers {
                    first_line,
                    last_line,
                } => ("whitespace", first_line, last_line),
                NotFoundHint::Closest {
                    first_line,
                    last_line,
                    ..
                } => ("closest", first_line, last_line),
                other => panic!("unexpected {other:?}"),
            },
            other => panic!("unexpected {other:?}"),
        }
    }

    fn edit<'a>(old_string: &'a str, new_string: &'a str) -> EditSpec<'a> {
        EditSpec {
            old_string,
            new_string,
            replace_all: false,
            expected_replacements: None,
        }
    }

    fn all<'a>(old_string: &'a str, new_string: &'a str) -> EditSpec<'a> {
        EditSpec {
            replace_all: true,
            ..edit(old_string, new_string)
        }
    }

    fn expecting<'a>(old_string: &'a str, new_string: &'a str, n: usize) -> EditSpec<'a> {
        EditSpec {
            expected_replacements: Some(n),
            ..edit(old_string, new_string)
        }
    }

    fn error_text(content: &str, spec: EditSpec<'_>) -> String {
        apply_edit(content, &spec).unwrap_err().to_string()
    }

    // --- single edits that succeed ---

    #[test]
    fn a_unique_occurrence_is_replaced() {
        let got = apply_edit("let x = 1;\nlet y = 2;\n", &edit("x = 1", "x = 10")).unwrap();
        assert_eq!(
            got,
            Replaced {
                content: "let x = 10;\nlet y = 2;\n".to_string(),
                occurrences: 1,
                loose_quotes: 0
            }
        );
    }

    #[test]
    fn replacement_is_literal() {
        assert_eq!(
            edited("x = VALUE\n", "VALUE", "$1 ${x} $0 \\1 $$ &"),
            "x = $1 ${x} $0 \\1 $$ &\n"
        );
        assert_eq!(edited("price: 5\n", "5", "$1.00"), "price: $1.00\n");
        assert_eq!(
            edited("a.b(c)\n", "a.b(c)", "x"),
            "x\n",
            "old_string is not a regex"
        );
    }

    #[test]
    fn unicode_is_replaced_whole() {
        assert_eq!(
            edited("héllo 😀 wörld\n", "😀", "🎉🎉"),
            "héllo 🎉🎉 wörld\n"
        );
    }

    #[test]
    fn replace_all_replaces_every_occurrence() {
        let got = apply_edit("a a\na\n", &all("a", "b")).unwrap();
        assert_eq!(got.content, "b b\nb\n");
        assert_eq!(got.occurrences, 3);
    }

    #[test]
    fn replace_all_with_one_occurrence_is_fine() {
        let got = apply_edit("one two\n", &all("two", "2")).unwrap();
        assert_eq!(got.occurrences, 1);
        assert_eq!(got.content, "one 2\n");
    }

    #[test]
    fn matching_expected_replacements_replaces_all() {
        let got = apply_edit("x x x\n", &expecting("x", "y", 3)).unwrap();
        assert_eq!(got.content, "y y y\n");
        assert_eq!(got.occurrences, 3);
    }

    #[test]
    fn occurrences_are_counted_without_overlap() {
        let got = apply_edit("aaaa", &all("aa", "b")).unwrap();
        assert_eq!(got.content, "bb");
        assert_eq!(got.occurrences, 2);
        assert_eq!(occurrence_lines("aaa\naa", "aa"), vec![1, 2]);
    }

    #[test]
    fn new_string_may_contain_old_string() {
        assert_eq!(edited("f()\n", "f()", "f() + f()"), "f() + f()\n");
    }

    #[test]
    fn new_string_may_be_empty() {
        assert_eq!(edited("keep\ndrop\nkeep2\n", "drop\n", ""), "keep\nkeep2\n");
    }

    // --- single edits that fail ---

    #[test]
    fn empty_old_string_text() {
        assert_eq!(
            error_text("abc", edit("", "x")),
            "Error: old_string is empty. To create a file or replace all of an empty one use \
             write_file; to insert text, put a neighbouring line in old_string and repeat it in \
             new_string."
        );
        assert_eq!(
            apply_edit("", &edit("", "x")),
            Err(EditError::EmptyOldString)
        );
    }

    #[test]
    fn identical_strings_text() {
        assert_eq!(
            error_text("abc", edit("b", "b")),
            "Error: old_string and new_string are identical, so no change would be made. Put the \
             replacement text in new_string."
        );
        // Checked before occurrences: even a missing string is reported as identical.
        assert_eq!(
            apply_edit("abc", &edit("z", "z")),
            Err(EditError::Identical)
        );
    }

    #[test]
    fn multiple_occurrences_list_their_lines() {
        let content = "foo\nbar\nfoo bar foo\n\nfoo\n";
        assert_eq!(
            apply_edit(content, &edit("foo", "baz")),
            Err(EditError::Multiple {
                count: 4,
                lines: vec![1, 3, 3, 5],
                quotes_folded: false
            })
        );
        assert_eq!(
            error_text(content, edit("foo", "baz")),
            "Error: String appears 4 times in file (lines 1, 3, 3, 5). Use replace_all=true to \
             replace all instances, or provide a more specific string with surrounding context."
        );
    }

    #[test]
    fn more_than_twenty_lines_end_with_an_ellipsis() {
        let content = "x\n".repeat(25);
        let text = error_text(&content, edit("x", "y"));
        assert_eq!(
            text,
            "Error: String appears 25 times in file (lines 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, \
             13, 14, 15, 16, 17, 18, 19, 20, …). Use replace_all=true to replace all instances, \
             or provide a more specific string with surrounding context."
        );
        let content = "x\n".repeat(20);
        assert!(error_text(&content, edit("x", "y")).contains(
            "(lines 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20)."
        ));
    }

    #[test]
    fn expected_mismatch_text() {
        let content = "a\nb a\na\n";
        assert_eq!(
            apply_edit(content, &expecting("a", "c", 2)),
            Err(EditError::ExpectedMismatch {
                expected: 2,
                found: 3,
                lines: vec![1, 2, 3],
                quotes_folded: false
            })
        );
        assert_eq!(
            error_text(content, expecting("a", "c", 2)),
            "Error: Expected 2 replacement(s) but found 3 occurrence(s) (lines 1, 2, 3). Set \
             expected_replacements to 3 or refine old_string."
        );
        // replace_all does not override a wrong expectation.
        let spec = EditSpec {
            replace_all: true,
            ..expecting("a", "c", 1)
        };
        assert!(matches!(
            apply_edit(content, &spec),
            Err(EditError::ExpectedMismatch { found: 3, .. })
        ));
    }

    #[test]
    fn expected_mismatch_without_occurrences_leaves_out_lines() {
        let error = EditError::ExpectedMismatch {
            expected: 2,
            found: 0,
            lines: Vec::new(),
            quotes_folded: false,
        };
        assert_eq!(
            error.to_string(),
            "Error: Expected 2 replacement(s) but found 0 occurrence(s). Set \
             expected_replacements to 0 or refine old_string."
        );
    }

    #[test]
    fn expected_replacements_with_nothing_found_is_not_found() {
        assert!(matches!(
            apply_edit("abc\n", &expecting("zzz", "y", 1)),
            Err(EditError::NotFound { .. })
        ));
    }

    #[test]
    fn not_found_without_anything_similar() {
        let content = "alpha\nbeta\ngamma\n";
        assert_eq!(
            apply_edit(content, &edit("0123456789", "x")),
            Err(EditError::NotFound {
                old_string: "0123456789".to_string(),
                hint: NotFoundHint::None
            })
        );
        assert_eq!(
            error_text(content, edit("0123456789", "x")),
            "Error: String not found in file: '0123456789'.\nRead the file again and copy \
             old_string exactly, including whitespace and indentation."
        );
    }

    #[test]
    fn not_found_in_an_empty_file() {
        assert_eq!(
            apply_edit("", &edit("x", "y")),
            Err(EditError::NotFound {
                old_string: "x".to_string(),
                hint: NotFoundHint::None
            })
        );
    }

    #[test]
    fn not_found_shortens_a_long_old_string_by_characters() {
        let old = "é".repeat(250);
        let text = error_text("abc", edit(&old, "x"));
        let expected = format!("Error: String not found in file: '{}…'.\n", "é".repeat(200));
        assert!(text.starts_with(&expected), "{text}");
        let old = "é".repeat(200);
        let text = error_text("abc", edit(&old, "x"));
        assert!(text.starts_with(&format!("Error: String not found in file: '{old}'.\n")));
    }

    #[test]
    fn not_found_when_only_indentation_differs() {
        let content = "fn main() {\n    let x = 1;\n    let y = 2;\n}\n";
        let spec = edit("  let x = 1;\n  let y = 2;", "z");
        assert_eq!(
            apply_edit(content, &spec),
            Err(EditError::NotFound {
                old_string: "  let x = 1;\n  let y = 2;".to_string(),
                hint: NotFoundHint::WhitespaceDiffers {
                    first_line: 2,
                    last_line: 3
                }
            })
        );
        assert_eq!(
            error_text(content, spec),
            "Error: String not found in file: '  let x = 1;\n  let y = 2;'.\nOnly whitespace or \
             line endings differ: lines 2-3 of the file match when spaces, tabs and line endings \
             are ignored. Copy those lines exactly (read_file shows them) and retry."
        );
    }

    #[test]
    fn not_found_when_only_line_endings_differ() {
        let content = "a\nb\nc\nd\n";
        assert_eq!(hint_at(content, "b\r\nc\r\n"), ("whitespace", 2, 3));
    }

    #[test]
    fn not_found_points_at_the_closest_region() {
        let content = "fn one() {}\nfn two() {\n    call(1, 2);\n}\nfn three() {}\n";
        let spec = edit("fn two() {\n    cal(1, 2);\n}", "x");
        let excerpt = "     2\tfn two() {\n     3\t    call(1, 2);\n     4\t}".to_string();
        assert_eq!(
            apply_edit(content, &spec),
            Err(EditError::NotFound {
                old_string: "fn two() {\n    cal(1, 2);\n}".to_string(),
                hint: NotFoundHint::Closest {
                    first_line: 2,
                    last_line: 4,
                    excerpt
                }
            })
        );
        assert_eq!(
            error_text(content, spec),
            "Error: String not found in file: 'fn two() {\n    cal(1, 2);\n}'.\nThe closest match \
             is at lines 2-4:\n     2\tfn two() {\n     3\t    call(1, 2);\n     4\t}\nRead the \
             file again and copy old_string exactly, including whitespace."
        );
    }

    #[test]
    fn closest_region_of_a_single_line_typo() {
        let content = "import os\nimport sys\n\ndef main():\n    print('hello world')\n";
        assert_eq!(hint_at(content, "print('helo world')"), ("closest", 5, 5));
    }

    #[test]
    fn closest_region_in_a_large_file_uses_anchors() {
        // Over FULL_SCAN_BYTES, so only windows sharing a line with old_string are scored.
        let mut content: String = (0..20_000).map(|i| format!("filler line {i}\n")).collect();
        content.push_str("fn target() {\n    let value = compute(42);\n}\n");
        content.push_str(&"tail\n".repeat(100));
        let spec = edit("fn target() {\n    let value = compute(41);\n}", "x");
        assert_eq!(
            hint_at(&content, spec.old_string),
            ("closest", 20_001, 20_003)
        );
    }

    #[test]
    fn closest_region_in_a_large_file_without_anchors() {
        let mut content: String = (0..20_000).map(|i| format!("row {i}\n")).collect();
        content.insert_str(0, "the quick brown fox jumps\n");
        assert_eq!(
            hint_at(&content, "the quick brown fax jumps"),
            ("closest", 1, 1)
        );
    }

    #[test]
    fn line_number_prefixes_are_detected_and_stripped() {
        let content = "def f():\n    return 1\n";
        let spec = edit("     1\tdef f():\n     2\t    return 1", "x");
        assert_eq!(
            apply_edit(content, &spec),
            Err(EditError::LineNumberPrefix {
                stripped: "def f():\n    return 1".to_string()
            })
        );
        assert_eq!(
            error_text(content, spec),
            "Error: old_string contains line-number prefixes copied from read_file output (like \
             \"     12\\t\"). Remove them and retry; without them old_string is:\ndef f():\n    \
             return 1"
        );
    }

    #[test]
    fn line_number_prefixes_of_continuation_rows_and_blank_lines() {
        let spec = edit("12\tabc\n  12.1\tdef\n\n13\t", "x");
        assert_eq!(
            apply_edit("nothing here", &spec),
            Err(EditError::LineNumberPrefix {
                stripped: "abc\ndef\n\n".to_string()
            })
        );
    }

    #[test]
    fn line_number_prefixes_need_every_line() {
        let got = apply_edit("abc\ndef\n", &edit("1\tabc\ndef", "x"));
        assert!(matches!(got, Err(EditError::NotFound { .. })));
        let got = apply_edit("abc\n", &edit("1.\tabc", "x"));
        assert!(matches!(got, Err(EditError::NotFound { .. })));
        let got = apply_edit("abc\n", &edit("1 abc", "x"));
        assert!(matches!(got, Err(EditError::NotFound { .. })));
    }

    #[test]
    fn a_prefix_like_string_present_in_the_file_is_replaced() {
        // A TSV file really holds "1\tabc": no prefix error when the text is found as given.
        assert_eq!(
            edited("1\tabc\n2\tdef\n", "1\tabc", "1\txyz"),
            "1\txyz\n2\tdef\n"
        );
    }

    #[test]
    fn occurrence_lines_are_one_based_starts() {
        assert_eq!(occurrence_lines("a\nb\na\n\na", "a"), vec![1, 3, 5]);
        assert_eq!(occurrence_lines("x\nab\ncd", "b\nc"), vec![2]);
        assert!(occurrence_lines("abc", "").is_empty());
        assert!(occurrence_lines("abc", "z").is_empty());
        assert_eq!(occurrence_lines("é\n😀é", "é"), vec![1, 2]);
    }

    // --- quote-tolerant matching ---

    #[test]
    fn straight_quotes_match_typographic_ones_and_keep_the_file_style() {
        let content = "title = “Hello”\nnote = ‘it’s fine’\n";
        let got = apply_edit(content, &edit("title = \"Hello\"", "title = \"Hi there\"")).unwrap();
        assert_eq!(got.content, "title = “Hi there”\nnote = ‘it’s fine’\n");
        assert_eq!((got.occurrences, got.loose_quotes), (1, 1));
        let got = apply_edit(content, &edit("'it's fine'", "'it's 'really' fine'")).unwrap();
        assert_eq!(
            got.content,
            "title = “Hello”\nnote = ‘it’s ‘really’ fine’\n"
        );
    }

    #[test]
    fn typographic_quotes_match_straight_ones_and_keep_the_file_style() {
        let content = "print(\"héllo\")\nx = 'a'\n";
        let got = apply_edit(content, &edit("print(“héllo”)", "print(“bye”, “now”)")).unwrap();
        assert_eq!(got.content, "print(\"bye\", \"now\")\nx = 'a'\n");
        assert_eq!(got.loose_quotes, 1);
    }

    #[test]
    fn exact_matches_win_over_loose_ones() {
        let content = "a “q” b\na \"q\" b\n";
        let got = apply_edit(content, &edit("\"q\"", "\"r\"")).unwrap();
        assert_eq!(got.content, "a “q” b\na \"r\" b\n");
        assert_eq!(got.loose_quotes, 0);
    }

    #[test]
    fn loose_uniqueness_is_counted_on_the_folded_text() {
        // Neither occurrence matches exactly; folded, both do: ambiguous, like any other.
        let content = "say “hi”\nsay ‘x’ and say \"hi”\n";
        let spec = edit("say \"hi\"", "say \"bye\"");
        assert_eq!(
            apply_edit(content, &spec),
            Err(EditError::Multiple {
                count: 2,
                lines: vec![1, 2],
                quotes_folded: true
            })
        );
        assert_eq!(
            error_text(content, spec),
            "Error: String appears 2 times in file (lines 1, 2), counting typographic and \
             straight quotes as equal. Use replace_all=true to replace all instances, or provide \
             a more specific string with surrounding context."
        );
        let got = apply_edit(content, &all("say \"hi\"", "say \"bye\"")).unwrap();
        // The second occurrence mixes styles, so its quotes stay as typed.
        assert_eq!(got.content, "say “bye”\nsay ‘x’ and say \"bye\"\n");
        assert_eq!(got.loose_quotes, 2);
        assert_eq!(
            apply_edit(content, &expecting("say \"hi\"", "z", 3)),
            Err(EditError::ExpectedMismatch {
                expected: 3,
                found: 2,
                lines: vec![1, 2],
                quotes_folded: true
            })
        );
    }

    #[test]
    fn loose_offsets_survive_multibyte_text_around_them() {
        let content = "日本 “a” 😀 “a”";
        let got = apply_edit(content, &all("\"a\"", "\"bb\"")).unwrap();
        assert_eq!(got.content, "日本 “bb” 😀 “bb”");
        let got = apply_edit(content, &expecting("😀 \"a\"", "!", 1)).unwrap();
        assert_eq!(got.content, "日本 “a” !");
    }

    #[test]
    fn loose_matching_is_bounded_like_exact_matching() {
        let content = "“a” “a”";
        let got = apply_edit_within(content, &all("\"a\"", "\"aaaa\""), 10);
        assert_eq!(
            got,
            Err(EditError::TooLarge {
                size: "“aaaa” “aaaa”".len(),
                limit: 10
            })
        );
    }

    #[test]
    fn quotes_that_match_nowhere_are_still_not_found() {
        assert!(matches!(
            apply_edit("“a”", &edit("\"b\"", "x")),
            Err(EditError::NotFound { .. })
        ));
    }

    #[test]
    fn multi_edit_matches_quotes_loosely_and_sees_loose_overlaps() {
        let content = "x = “one”; y = ‘two’;\n";
        let edits = [edit("\"one\"", "\"1\""), edit("y = 'two'", "y = '2'")];
        let got = apply_edits(content, &edits).unwrap();
        assert_eq!(got.content, "x = “1”; y = ‘2’;\n");
        assert_eq!((got.occurrences, got.loose_quotes), (2, 2));
        let edits = [edit("= \"one\"", "= 1"), edit("\"one\"; y", "z")];
        assert_eq!(
            apply_edits(content, &edits).unwrap_err().kind,
            MultiEditErrorKind::Overlap { other: 1 }
        );
    }

    #[test]
    fn exact_matching_never_folds_quotes() {
        let content = "x = “one”;\n";
        assert!(matches!(
            apply_edit_matching(content, &edit("\"one\"", "1"), usize::MAX, Matching::Exact),
            Err(EditError::NotFound { .. })
        ));
        let edits = [edit("x = ", "y = "), edit("\"one\"", "1")];
        let error = apply_edits_matching(content, &edits, usize::MAX, Matching::Exact).unwrap_err();
        assert_eq!(error.index, 2);
        let edits = [edit("x = ", "y = "), edit("“one”", "1")];
        let got = apply_edits_matching(content, &edits, usize::MAX, Matching::Exact).unwrap();
        assert_eq!(got.content, "y = 1;\n");
    }

    // --- multi-edit ---

    #[test]
    fn multi_edit_applies_in_order_and_sums_occurrences() {
        let content = "var x = 1;\nvar y = 2;\nvar y2 = y;\n";
        let edits = [edit("var x", "let x"), all("var y", "let y")];
        assert_eq!(
            apply_edits(content, &edits),
            Ok(Replaced {
                content: "let x = 1;\nlet y = 2;\nlet y2 = y;\n".to_string(),
                occurrences: 3,
                loose_quotes: 0
            })
        );
    }

    #[test]
    fn multi_edit_may_target_text_written_by_an_earlier_edit() {
        let content = "console.log('test');\n";
        let edits = [
            edit("console.log", "logger.info"),
            edit("logger.info('test')", "logger.debug('test')"),
        ];
        let got = apply_edits(content, &edits).unwrap();
        assert_eq!(got.content, "logger.debug('test');\n");
        assert_eq!(got.occurrences, 2);
    }

    #[test]
    fn multi_edit_failure_names_the_edit() {
        let content = "alpha\nbeta\n";
        let edits = [
            edit("alpha", "ALPHA"),
            edit("0123456789", "x"),
            edit("beta", "B"),
        ];
        let error = apply_edits(content, &edits).unwrap_err();
        assert_eq!(error.index, 2);
        assert_eq!(error.total, 3);
        assert_eq!(
            error.to_string(),
            "Error: edit 2 of 3: String not found in file: '0123456789'.\nRead the file again \
             and copy old_string exactly, including whitespace and indentation."
        );
    }

    #[test]
    fn multi_edit_inner_errors_drop_their_own_prefix() {
        let edits = [edit("a", "a")];
        assert_eq!(
            apply_edits("a", &edits).unwrap_err().to_string(),
            "Error: edit 1 of 1: old_string and new_string are identical, so no change would be \
             made. Put the replacement text in new_string."
        );
        let edits = [edit("b", "c"), edit("x", "y")];
        assert_eq!(
            apply_edits("x x b", &edits).unwrap_err().to_string(),
            "Error: edit 2 of 2: String appears 2 times in file (lines 1, 1). Use \
             replace_all=true to replace all instances, or provide a more specific string with \
             surrounding context."
        );
    }

    #[test]
    fn multi_edit_same_text_replaced_differently_conflicts() {
        let edits = [edit("foo", "bar"), edit("x", "y"), edit("foo", "baz")];
        let error = apply_edits("foo x\n", &edits).unwrap_err();
        assert_eq!(
            error,
            MultiEditError {
                index: 3,
                total: 3,
                kind: MultiEditErrorKind::SameTextDifferently { other: 1 }
            }
        );
        assert_eq!(
            error.to_string(),
            "Error: edit 3 of 3 conflicts with edit 1: both replace the same old_string with \
             different new_string. Merge them into one edit."
        );
    }

    #[test]
    fn multi_edit_overlapping_regions_conflict() {
        let content = "call(alpha, beta);\n";
        let edits = [
            edit("call(alpha", "invoke(alpha"),
            edit("alpha, beta", "a, b"),
        ];
        let error = apply_edits(content, &edits).unwrap_err();
        assert_eq!(
            error,
            MultiEditError {
                index: 2,
                total: 2,
                kind: MultiEditErrorKind::Overlap { other: 1 }
            }
        );
        assert_eq!(
            error.to_string(),
            "Error: edit 2 of 2 overlaps edit 1: their old_string regions overlap in the file. \
             Merge them into one edit or make them disjoint."
        );
    }

    #[test]
    fn multi_edit_nested_old_strings_overlap() {
        let edits = [edit("foo", "bar"), edit("foo()", "baz()")];
        assert_eq!(
            apply_edits("foo();\n", &edits).unwrap_err().kind,
            MultiEditErrorKind::Overlap { other: 1 }
        );
    }

    #[test]
    fn multi_edit_adjacent_regions_do_not_overlap() {
        let edits = [edit("ab", "AB"), edit("cd", "CD")];
        assert_eq!(apply_edits("abcd", &edits).unwrap().content, "ABCD");
    }

    #[test]
    fn multi_edit_overlap_only_counts_original_occurrences() {
        // "ab" does not occur in the original text, so it cannot overlap anything there.
        let edits = [edit("a c", "ab"), edit("ab", "x")];
        assert_eq!(apply_edits("a c", &edits).unwrap().content, "x");
    }

    #[test]
    fn multi_edit_repeated_identical_edit_is_not_a_conflict_but_finds_nothing() {
        let edits = [edit("foo", "bar"), edit("foo", "bar")];
        let error = apply_edits("foo\n", &edits).unwrap_err();
        assert_eq!(error.index, 2);
        assert!(matches!(
            error.kind,
            MultiEditErrorKind::Edit(EditError::NotFound { .. })
        ));
    }

    #[test]
    fn multi_edit_is_all_or_nothing() {
        // The first edit would succeed, the second fails: the caller gets only the error.
        let edits = [edit("one", "1"), edit("three", "3")];
        assert!(apply_edits("one two\n", &edits).is_err());
    }

    #[test]
    fn multi_edit_with_empty_old_string_reports_that_edit() {
        let edits = [edit("a", "b"), edit("", "x")];
        assert_eq!(
            apply_edits("a", &edits).unwrap_err(),
            MultiEditError {
                index: 2,
                total: 2,
                kind: MultiEditErrorKind::Edit(EditError::EmptyOldString)
            }
        );
    }

    #[test]
    fn multi_edit_of_no_edits_changes_nothing() {
        assert_eq!(
            apply_edits("abc", &[]),
            Ok(Replaced {
                content: "abc".to_string(),
                occurrences: 0,
                loose_quotes: 0
            })
        );
    }

    #[test]
    #[allow(clippy::single_range_in_vec_init)] // Lists of spans, one span long.
    fn intersects_checks_every_pair_of_spans() {
        assert!(intersects(&[0..3, 10..13], &[11..12]));
        assert!(!intersects(&[0..3, 10..13], &[3..5, 8..10]));
        assert!(intersects(&[5..6], &[0..6]));
        assert!(!intersects(&[], &[1..2]));
    }
}
