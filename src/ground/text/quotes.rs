//! Quote-tolerant matching for `edit_file` and `multi_edit` (CONTRACT §4, issue 9).
//!
//! Agents often type straight quotes (`"`, `'`) where a file has typographic ones (`“ ” ‘ ’`),
//! and the reverse. When an `old_string` is not found exactly, [`find_loose`] looks for it again
//! with each quote folded to its straight form, in both the file and `old_string`. Positions are
//! mapped back to the original text exactly: a typographic quote is 3 bytes in UTF-8 and its
//! straight form 1, so the fold records where it shortened the text ([`Folded`]) instead of
//! assuming equal offsets. Uniqueness is counted on the folded text, so two places that only
//! differ by quote style are ambiguous.
//!
//! The replacement keeps the file's quote style ([`QuoteStyle::of_match`], [`QuoteStyle::apply`]):
//! where the matched text has typographic quotes and `old_string` straight ones, the straight
//! quotes of `new_string` become typographic (opening after a space, an opening bracket, a dash or
//! at the start; closing, or an apostrophe, elsewhere), and the reverse. A kind of quote (double
//! or single) the agent typed as the file has it is left as typed.

use std::ops::Range;

/// `“`
pub const LEFT_DOUBLE: char = '\u{201C}';
/// `”`
pub const RIGHT_DOUBLE: char = '\u{201D}';
/// `‘`
pub const LEFT_SINGLE: char = '\u{2018}';
/// `’` (also the typographic apostrophe)
pub const RIGHT_SINGLE: char = '\u{2019}';

/// Bytes a typographic quote loses when folded (3 bytes in UTF-8 → 1).
const FOLD_SHRINK: usize = LEFT_DOUBLE.len_utf8() - 1;

/// Which pair a quote character belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Double,
    Single,
}

/// The kind of quote `c` is, straight or typographic.
fn kind_of(c: char) -> Option<Kind> {
    match c {
        '"' | LEFT_DOUBLE | RIGHT_DOUBLE => Some(Kind::Double),
        '\'' | LEFT_SINGLE | RIGHT_SINGLE => Some(Kind::Single),
        _ => None,
    }
}

/// `c` with a typographic quote replaced by its straight form.
fn fold_char(c: char) -> char {
    match c {
        LEFT_DOUBLE | RIGHT_DOUBLE => '"',
        LEFT_SINGLE | RIGHT_SINGLE => '\'',
        other => other,
    }
}

/// Whether `text` holds any quote, straight or typographic (without one, a loose match can find
/// nothing an exact match did not).
pub fn has_quotes(text: &str) -> bool {
    text.chars().any(|c| kind_of(c).is_some())
}

/// `text` with every typographic quote replaced by its straight form.
pub fn fold(text: &str) -> String {
    text.chars().map(fold_char).collect()
}

/// A text with its typographic quotes folded, and where they were, to map positions back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Folded {
    /// The folded text.
    pub text: String,
    /// Byte offsets, in [`Folded::text`], of each folded quote, ascending. Memory follows the
    /// number of typographic quotes, not the size of the text.
    folded_at: Vec<usize>,
}

impl Folded {
    /// Folds `original`.
    pub fn new(original: &str) -> Self {
        let mut text = String::with_capacity(original.len());
        let mut folded_at = Vec::new();
        for c in original.chars() {
            let straight = fold_char(c);
            if straight != c {
                folded_at.push(text.len());
            }
            text.push(straight);
        }
        Self { text, folded_at }
    }

    /// The byte offset in the original text of byte offset `folded` (a char boundary) of the
    /// folded text: every folded quote before it was [`FOLD_SHRINK`] bytes longer.
    pub fn original_offset(&self, folded: usize) -> usize {
        let before = self.folded_at.partition_point(|&at| at < folded);
        folded + before * FOLD_SHRINK
    }
}

/// Byte ranges in `content` of the non-overlapping occurrences, left to right, of `old` once
/// quotes are folded in both. `None` when `old` has no quote at all, or when folding changes
/// neither text (then an exact search already said everything).
pub fn find_loose(content: &str, old: &str) -> Option<Vec<Range<usize>>> {
    if old.is_empty() || !has_quotes(old) {
        return None;
    }
    let key = fold(old);
    let folded = Folded::new(content);
    if key == old && folded.folded_at.is_empty() {
        return None;
    }
    let spans = folded
        .text
        .match_indices(&key)
        .map(|(at, found)| folded.original_offset(at)..folded.original_offset(at + found.len()))
        .collect();
    Some(spans)
}

/// What to do with one kind of quote in `new_string`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Rewrite {
    /// Leave as typed (the agent typed them as the file has them, or the file mixes styles).
    Keep,
    /// Straight quotes become typographic.
    Typographic,
    /// Typographic quotes become straight.
    Straight,
}

/// The file's quote style around one loose match, to write `new_string` in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QuoteStyle {
    double: Rewrite,
    single: Rewrite,
}

impl QuoteStyle {
    /// The style of `matched` (the file's text of one loose occurrence) where it differs from
    /// `old` (the `old_string` it matched; equal once folded). For each kind of quote the agent
    /// typed differently from the file: if the file's text uses only typographic quotes of that
    /// kind, `new_string`'s become typographic; only straight ones, they become straight; a mix,
    /// they stay as typed.
    pub fn of_match(matched: &str, old: &str) -> Self {
        let rewrite = |kind: Kind| {
            let differs = matched
                .chars()
                .zip(old.chars())
                .any(|(file, typed)| file != typed && kind_of(file) == Some(kind));
            if !differs {
                return Rewrite::Keep;
            }
            let (mut straight, mut typographic) = (false, false);
            for c in matched.chars().filter(|&c| kind_of(c) == Some(kind)) {
                if fold_char(c) == c {
                    straight = true;
                } else {
                    typographic = true;
                }
            }
            match (straight, typographic) {
                (false, true) => Rewrite::Typographic,
                (true, false) => Rewrite::Straight,
                _ => Rewrite::Keep,
            }
        };
        Self {
            double: rewrite(Kind::Double),
            single: rewrite(Kind::Single),
        }
    }

    /// Whether [`QuoteStyle::apply`] leaves every text as it is.
    pub fn is_keep(&self) -> bool {
        self.double == Rewrite::Keep && self.single == Rewrite::Keep
    }

    /// `new` in this style. `before` is the character of the file just before the occurrence
    /// (`None` at the start): it decides whether a leading quote opens or closes.
    pub fn apply(&self, new: &str, before: Option<char>) -> String {
        let mut out = String::with_capacity(new.len());
        let mut previous = before;
        for c in new.chars() {
            let rewritten = match kind_of(c) {
                Some(Kind::Double) => rewrite_quote(c, self.double, previous, Kind::Double),
                Some(Kind::Single) => rewrite_quote(c, self.single, previous, Kind::Single),
                None => c,
            };
            out.push(rewritten);
            previous = Some(rewritten);
        }
        out
    }

    /// Bytes of [`QuoteStyle::apply`]`(new, …)`, without building it: each straight quote made
    /// typographic grows by [`FOLD_SHRINK`] bytes, each typographic one made straight shrinks by
    /// as much.
    pub fn applied_len(&self, new: &str) -> usize {
        let (mut grows, mut shrinks) = (0usize, 0usize);
        for c in new.chars() {
            let rewrite = match kind_of(c) {
                Some(Kind::Double) => self.double,
                Some(Kind::Single) => self.single,
                None => continue,
            };
            let straight = fold_char(c) == c;
            match rewrite {
                Rewrite::Typographic if straight => grows += 1,
                Rewrite::Straight if !straight => shrinks += 1,
                _ => {}
            }
        }
        new.len()
            .saturating_add(grows.saturating_mul(FOLD_SHRINK))
            .saturating_sub(shrinks.saturating_mul(FOLD_SHRINK))
    }
}

/// Whether a quote after `previous` opens a quotation: at the start, after whitespace, after an
/// opening bracket or a dash, or after another opening quote.
fn opens(previous: Option<char>) -> bool {
    match previous {
        None => true,
        Some(c) => {
            c.is_whitespace()
                || matches!(
                    c,
                    '(' | '[' | '{' | '<' | '\u{2014}' | '\u{2013}' | LEFT_DOUBLE | LEFT_SINGLE
                )
        }
    }
}

fn rewrite_quote(c: char, rewrite: Rewrite, previous: Option<char>, kind: Kind) -> char {
    match rewrite {
        Rewrite::Keep => c,
        Rewrite::Straight => fold_char(c),
        Rewrite::Typographic if fold_char(c) != c => c,
        Rewrite::Typographic => match (kind, opens(previous)) {
            (Kind::Double, true) => LEFT_DOUBLE,
            (Kind::Double, false) => RIGHT_DOUBLE,
            (Kind::Single, true) => LEFT_SINGLE,
            (Kind::Single, false) => RIGHT_SINGLE,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folding_maps_offsets_back_across_three_byte_quotes() {
        let original = "a “b” ‘c’ d";
        let folded = Folded::new(original);
        assert_eq!(folded.text, "a \"b\" 'c' d");
        for (at, _) in folded.text.char_indices() {
            let back = folded.original_offset(at);
            assert!(original.is_char_boundary(back));
            assert_eq!(
                fold_char(original[back..].chars().next().unwrap()),
                folded.text[at..].chars().next().unwrap()
            );
        }
        assert_eq!(folded.original_offset(folded.text.len()), original.len());
    }

    #[test]
    fn loose_spans_are_original_byte_ranges() {
        let content = "é “x” ’y‘ \"x\"";
        let spans = find_loose(content, "\"x\"").unwrap();
        let found: Vec<&str> = spans.iter().map(|r| &content[r.clone()]).collect();
        assert_eq!(found, vec!["“x”", "\"x\""]);
        let spans = find_loose(content, "‘y’").unwrap();
        assert_eq!(&content[spans[0].clone()], "’y‘");
    }

    #[test]
    fn no_loose_search_without_quotes_or_anything_to_fold() {
        assert_eq!(find_loose("“a”", "a"), None);
        assert_eq!(find_loose("plain 'text'", "'x'"), None);
        assert_eq!(find_loose("“a”", ""), None);
        let spans = find_loose("'a'", "‘a’").unwrap();
        assert_eq!((spans.len(), spans[0].clone()), (1, 0..3));
    }

    #[test]
    fn style_follows_the_kinds_typed_differently() {
        let style = QuoteStyle::of_match("“don't”", "\"don't\"");
        assert_eq!(style.apply("\"won't\" 'x'", None), "“won't” 'x'");
        let style = QuoteStyle::of_match("\"it\"", "“it”");
        assert_eq!(style.apply("“they’re”", None), "\"they’re\"");
        assert_eq!(style.double, Rewrite::Straight);
        let mixed = QuoteStyle::of_match("“a\" \"b”", "\"a\" \"b\"");
        assert!(mixed.is_keep());
    }

    #[test]
    fn typographic_quotes_open_and_close_by_context() {
        let style = QuoteStyle {
            double: Rewrite::Typographic,
            single: Rewrite::Typographic,
        };
        assert_eq!(
            style.apply("say \"hi\" (\"x\") it's 'ok'", None),
            "say “hi” (“x”) it’s ‘ok’"
        );
        assert_eq!(style.apply("\"", Some('a')), "”");
        assert_eq!(style.apply("\"", Some(' ')), "“");
        assert_eq!(style.applied_len("\"a'"), "“a’".len());
        let straighten = QuoteStyle {
            double: Rewrite::Straight,
            single: Rewrite::Keep,
        };
        assert_eq!(straighten.applied_len("“a” ’"), "\"a\" ’".len());
    }
}
