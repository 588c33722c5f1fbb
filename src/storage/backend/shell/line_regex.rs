//! A grep pattern rewritten for the target's own regex search (issue 27): a regular expression
//! that matches every line the pattern matches — and maybe more — among the lines of the files
//! it is asked about, written in the two dialects a target may have: POSIX ERE for
//! `LC_ALL=C grep -E` (GNU or busybox) and Rust syntax for `rg`. Pure: no I/O. A target with
//! `rg` is given `utf8_regex` instead, which also judges UTF-8 files with non-ASCII text (this
//! rewrite is its fallback when that one is too big to send); `grep -E` stays here: in a
//! UTF-8 locale its classes and case folding are the target C library's, not the matcher's, so
//! a non-ASCII file is read back and confirmed.
//!
//! It is asked only about *plain* files: every byte a TAB, a line feed or printable ASCII
//! (`0x20`–`0x7E`). Such a file decodes to the same text in every encoding the matcher knows
//! (no BOM, no byte of a legacy encoding), holds no `\r` nor NUL, and its lines are the lines
//! the target's tools see. A file with any other byte is a candidate whatever this regex says
//! ([`WEIRD_ERE`], [`WEIRD_RUST`]); the matcher confirms every candidate.
//!
//! The rewriting starts from the syntax tree the line matcher compiles (`regex-syntax`, parsed
//! with its flags, so case-insensitivity is already spelled out as classes), and keeps of each
//! piece what a plain line can hold:
//! - a literal holding any other byte, a class with no plain byte, cannot match: a
//!   concatenation holding one cannot, an alternation drops that branch, a repetition of it
//!   matches only the empty text (or nothing, when it must repeat at least once);
//! - classes become their plain bytes;
//! - `^`/`$` at a line's edges stay; `\A`, `\z`, word boundaries (no portable ERE has one,
//!   and `rg` 13 reads `\B^` otherwise than the matcher) and any look-around inside a
//!   repetition become the empty text (they only narrow a match: dropping one widens the
//!   language);
//! - a counted repetition over [`MAX_COUNT`], or any counted repetition once the pattern would
//!   expand past [`MAX_WEIGHT`] pieces (GNU `grep` and `regcomp` copy `x{m,n}` out `n` times),
//!   becomes `x*` (or `x+` when `m > 0`): every repetition of `x` is one of those.
//!
//! What is left is a superset of the pattern's language on plain lines; when the pattern can
//! match no plain line at all there is nothing to ask the target ([`LineRegex::Never`]), and
//! when it matches every line, nothing to narrow (`None`).

use regex_syntax::hir::{Class, Hir, HirKind, Look};

use crate::ground::search::GrepPattern;

/// Largest count of a repetition kept as written (POSIX guarantees `RE_DUP_MAX` ≥ 255).
const MAX_COUNT: u32 = 255;

/// How many pieces the pattern may expand to (repetitions copied out) before every counted
/// repetition is widened to `*`/`+`.
const MAX_WEIGHT: u64 = 2_000;

/// Longest rewritten pattern sent to the target: past it, the search is not narrowed this way.
const MAX_TEXT: usize = 16 * 1024;

/// A line holding a byte that is not plain (see the module doc), as a `grep -E` pattern: the
/// bracket holds a TAB, a space and `~` (a line never holds its line feed).
pub(super) const WEIRD_ERE: &str = "[^\t -~]";

/// The same for `rg` (bytes, so also invalid UTF-8, NUL and `\r`).
pub(super) const WEIRD_RUST: &str = r"(?-u:[^\x09\x0A\x20-\x7E])";

/// What the target's search is given (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum LineRegex {
    /// No plain line can match: only files that are not plain are candidates.
    Never,
    /// Plain files with a line matching this are candidates.
    Pattern {
        /// For `LC_ALL=C grep -E`.
        ere: String,
        /// For `rg`.
        rust: String,
    },
}

/// The rewritten `pattern`, `None` when it cannot narrow a search (it matches every line, it
/// cannot be parsed here, or it is too big to send).
pub(super) fn line_regex(pattern: &GrepPattern) -> Option<LineRegex> {
    let hir = pattern.line_syntax(false)?;
    match rewrite(&hir, false) {
        None => Some(LineRegex::Never),
        Some(Node::Empty) => None,
        Some(node) => {
            let node = widened(node);
            let (ere, rust) = (node.to_ere(), node.to_rust());
            (ere.len() <= MAX_TEXT && rust.len() <= MAX_TEXT)
                .then_some(LineRegex::Pattern { ere, rust })
        }
    }
}

/// A regular language over plain bytes (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    /// The empty text.
    Empty,
    /// One byte of this set (bit `b` for byte `b`; only plain bytes, at least two… or one).
    Set(u128),
    /// These plain bytes in a row (at least one).
    Text(Vec<u8>),
    /// The start of a line.
    LineStart,
    /// The end of a line.
    LineEnd,
    /// These in a row (at least two, none empty).
    Concat(Vec<Node>),
    /// Any one of these (at least two, none empty).
    Alternation(Vec<Node>),
    /// `sub` repeated `min` to `max` times.
    Repeat {
        min: u32,
        max: Option<u32>,
        sub: Box<Node>,
    },
}

/// Whether byte `b` is plain.
fn plain(b: u8) -> bool {
    b == b'\t' || (0x20..=0x7e).contains(&b)
}

/// Every plain byte.
fn plain_set() -> u128 {
    (0u8..128)
        .filter(|b| plain(*b))
        .fold(0, |set, b| set | 1 << b)
}

/// The tree for `hir` over plain lines (`repeated`: inside a repetition), `None` when no
/// plain text matches it.
fn rewrite(hir: &Hir, repeated: bool) -> Option<Node> {
    match hir.kind() {
        HirKind::Empty => Some(Node::Empty),
        HirKind::Literal(literal) => {
            let bytes = &literal.0;
            if bytes.iter().all(|b| plain(*b)) {
                Some(if bytes.is_empty() {
                    Node::Empty
                } else {
                    Node::Text(bytes.to_vec())
                })
            } else {
                None
            }
        }
        HirKind::Class(class) => {
            let mut set = 0u128;
            let mut add = |start: u32, end: u32| {
                for b in start..=end.min(127) {
                    // `b` < 128 here.
                    if let Ok(byte) = u8::try_from(b)
                        && plain(byte)
                    {
                        set |= 1 << b;
                    }
                }
            };
            match class {
                Class::Unicode(class) => {
                    for range in class.ranges() {
                        add(u32::from(range.start()), u32::from(range.end()));
                    }
                }
                Class::Bytes(class) => {
                    for range in class.ranges() {
                        add(u32::from(range.start()), u32::from(range.end()));
                    }
                }
            }
            match set.count_ones() {
                0 => None,
                1 => Some(Node::Text(vec![set.trailing_zeros() as u8])),
                _ => Some(Node::Set(set)),
            }
        }
        HirKind::Look(look) => Some(match look {
            // A look-around repeated is dropped: `(^a)*` is no ERE every grep reads alike.
            _ if repeated => Node::Empty,
            Look::StartLF | Look::StartCRLF => Node::LineStart,
            Look::EndLF | Look::EndCRLF => Node::LineEnd,
            // `\A`, `\z` (a line matched alone sees them at its edges) and every word
            // boundary (no portable ERE has one; `rg` 13 misses `\B^` at a line's start): the
            // empty text, a wider language.
            _ => Node::Empty,
        }),
        HirKind::Repetition(rep) => match rewrite(&rep.sub, true) {
            None if rep.min == 0 => Some(Node::Empty),
            None => None,
            Some(Node::Empty) => Some(Node::Empty),
            Some(_) if rep.max == Some(0) => Some(Node::Empty),
            Some(sub) if rep.min == 1 && rep.max == Some(1) => Some(sub),
            Some(sub) => Some(Node::Repeat {
                min: rep.min,
                max: rep.max,
                sub: Box::new(sub),
            }),
        },
        HirKind::Capture(capture) => rewrite(&capture.sub, repeated),
        HirKind::Concat(subs) => {
            let mut items = Vec::new();
            for sub in subs {
                match rewrite(sub, repeated)? {
                    Node::Empty => {}
                    Node::Concat(inner) => items.extend(inner),
                    node => items.push(node),
                }
            }
            Some(match items.len() {
                0 => Node::Empty,
                1 => items.pop()?,
                _ => Node::Concat(items),
            })
        }
        HirKind::Alternation(subs) => {
            let mut branches: Vec<Node> = Vec::new();
            let mut optional = false;
            let mut any = false;
            for sub in subs {
                match rewrite(sub, repeated) {
                    None => {}
                    Some(Node::Empty) => {
                        any = true;
                        optional = true;
                    }
                    Some(node) => {
                        any = true;
                        if !branches.contains(&node) {
                            branches.push(node);
                        }
                    }
                }
            }
            if !any {
                return None;
            }
            if optional && !repeated {
                // What becomes `(…)?` is repeated: its look-arounds go (`^?` is no ERE every
                // grep reads alike).
                return rewrite(hir, true);
            }
            let one = match branches.len() {
                0 => return Some(Node::Empty),
                1 => branches.pop()?,
                _ => Node::Alternation(branches),
            };
            Some(if optional {
                Node::Repeat {
                    min: 0,
                    max: Some(1),
                    sub: Box::new(one),
                }
            } else {
                one
            })
        }
    }
}

/// The tree with its counted repetitions widened as the module doc says.
fn widened(node: Node) -> Node {
    let all = node.weight() > MAX_WEIGHT;
    node.widen(all)
}

impl Node {
    /// How many pieces the tree expands to with its repetitions copied out (saturating).
    fn weight(&self) -> u64 {
        match self {
            Node::Empty | Node::Set(_) | Node::LineStart | Node::LineEnd => 1,
            Node::Text(bytes) => bytes.len() as u64,
            Node::Concat(items) | Node::Alternation(items) => items
                .iter()
                .fold(0u64, |sum, item| sum.saturating_add(item.weight())),
            Node::Repeat { min, max, sub } => sub
                .weight()
                .saturating_mul(u64::from(max.unwrap_or(*min).max(1))),
        }
    }

    /// `x{m,n}` as `x*`/`x+` when a count is over [`MAX_COUNT`], or for every counted
    /// repetition when `all`.
    fn widen(self, all: bool) -> Node {
        match self {
            Node::Repeat { min, max, sub } => {
                let sub = Box::new(sub.widen(all));
                let counted = !matches!((min, max), (0 | 1, None) | (0, Some(1)));
                let big = min > MAX_COUNT || max.is_some_and(|max| max > MAX_COUNT);
                if counted && (all || big) {
                    Node::Repeat {
                        min: min.min(1),
                        max: None,
                        sub,
                    }
                } else {
                    Node::Repeat { min, max, sub }
                }
            }
            Node::Concat(items) => Node::Concat(items.into_iter().map(|i| i.widen(all)).collect()),
            Node::Alternation(items) => {
                Node::Alternation(items.into_iter().map(|i| i.widen(all)).collect())
            }
            other => other,
        }
    }

    /// The POSIX ERE.
    fn to_ere(&self) -> String {
        let mut out = String::new();
        self.ere(&mut out, Context::Top);
        out
    }

    /// The Rust-syntax regex.
    fn to_rust(&self) -> String {
        let mut out = String::new();
        self.rust(&mut out, Context::Top);
        out
    }

    fn ere(&self, out: &mut String, context: Context) {
        match self {
            // Not in a finished tree (the empty text is dropped or asked for no narrowing).
            Node::Empty => out.push_str("()"),
            Node::Set(set) => ere_set(*set, out),
            Node::Text(bytes) => {
                let group = bytes.len() > 1 && context == Context::Atom;
                if group {
                    out.push('(');
                }
                for byte in bytes {
                    ere_byte(*byte, out);
                }
                if group {
                    out.push(')');
                }
            }
            Node::LineStart => out.push('^'),
            Node::LineEnd => out.push('$'),
            Node::Concat(items) => {
                let group = context == Context::Atom;
                if group {
                    out.push('(');
                }
                for item in items {
                    item.ere(out, Context::Concat);
                }
                if group {
                    out.push(')');
                }
            }
            Node::Alternation(items) => {
                let group = context != Context::Top;
                if group {
                    out.push('(');
                }
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push('|');
                    }
                    item.ere(out, Context::Alternation);
                }
                if group {
                    out.push(')');
                }
            }
            Node::Repeat { min, max, sub } => {
                // `x**` is undefined in an ERE: a repetition of a repetition is grouped.
                let group = context == Context::Atom;
                if group {
                    out.push('(');
                }
                sub.ere(out, Context::Atom);
                push_count(*min, *max, out);
                if group {
                    out.push(')');
                }
            }
        }
    }

    fn rust(&self, out: &mut String, context: Context) {
        match self {
            Node::Empty => out.push_str("(?:)"),
            Node::Set(set) => {
                out.push('[');
                for (start, end) in runs(*set) {
                    push_hex(start, out);
                    if end > start {
                        out.push('-');
                        push_hex(end, out);
                    }
                }
                out.push(']');
            }
            Node::Text(bytes) => {
                let group = bytes.len() > 1 && context == Context::Atom;
                if group {
                    out.push_str("(?:");
                }
                for byte in bytes {
                    if byte.is_ascii_alphanumeric() {
                        out.push(char::from(*byte));
                    } else {
                        push_hex(*byte, out);
                    }
                }
                if group {
                    out.push(')');
                }
            }
            Node::LineStart => out.push_str("(?m:^)"),
            Node::LineEnd => out.push_str("(?m:$)"),
            Node::Concat(items) => {
                let group = context == Context::Atom;
                if group {
                    out.push_str("(?:");
                }
                for item in items {
                    item.rust(out, Context::Concat);
                }
                if group {
                    out.push(')');
                }
            }
            Node::Alternation(items) => {
                let group = context != Context::Top;
                if group {
                    out.push_str("(?:");
                }
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push('|');
                    }
                    item.rust(out, Context::Alternation);
                }
                if group {
                    out.push(')');
                }
            }
            Node::Repeat { min, max, sub } => {
                let group = context == Context::Atom;
                if group {
                    out.push_str("(?:");
                }
                sub.rust(out, Context::Atom);
                push_count(*min, *max, out);
                if group {
                    out.push(')');
                }
            }
        }
    }
}

/// Where a piece is written: what it must group to keep its meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Context {
    /// The whole pattern.
    Top,
    /// A branch of an alternation.
    Alternation,
    /// An item of a concatenation.
    Concat,
    /// The operand of a repetition.
    Atom,
}

/// `*`, `+`, `?` or `{m}`, `{m,}`, `{m,n}`.
fn push_count(min: u32, max: Option<u32>, out: &mut String) {
    match (min, max) {
        (0, None) => out.push('*'),
        (1, None) => out.push('+'),
        (0, Some(1)) => out.push('?'),
        (min, None) => out.push_str(&format!("{{{min},}}")),
        (min, Some(max)) if max == min => out.push_str(&format!("{{{min}}}")),
        (min, Some(max)) => out.push_str(&format!("{{{min},{max}}}")),
    }
}

fn push_hex(byte: u8, out: &mut String) {
    out.push_str(&format!("\\x{byte:02X}"));
}

/// The runs of consecutive bytes of `set`, as (first, last).
fn runs(set: u128) -> Vec<(u8, u8)> {
    let mut out: Vec<(u8, u8)> = Vec::new();
    for b in 0u8..128 {
        if set & (1 << b) == 0 {
            continue;
        }
        match out.last_mut() {
            Some((_, last)) if *last + 1 == b => *last = b,
            _ => out.push((b, b)),
        }
    }
    out
}

/// One plain byte as an ERE matching exactly it. Letters, digits and the punctuation no ERE
/// reads specially go as they are; `^`, `[` and `\` escaped (the escapes POSIX defines);
/// the other special characters as one-byte brackets, which mean the same in every ERE.
fn ere_byte(byte: u8, out: &mut String) {
    match byte {
        b'^' | b'[' | b'\\' => {
            out.push('\\');
            out.push(char::from(byte));
        }
        b'.' | b'*' | b'+' | b'?' | b'(' | b')' | b'{' | b'}' | b'|' | b'$' | b']' => {
            out.push('[');
            out.push(char::from(byte));
            out.push(']');
        }
        _ => out.push(char::from(byte)),
    }
}

/// A set of at least two plain bytes as an ERE atom. A bracket lists `]` first, `-` last and
/// `^` never first, and never holds `[` (which would open `[:`, `[.`, `[=`) nor `\` (literal
/// in a POSIX bracket, an escape in some greps): those two are alternatives beside it. When
/// shorter, the set is written as the negated bracket of the plain bytes it leaves out (it
/// then also matches bytes that are not plain, and `[` and `\`: a wider language).
fn ere_set(set: u128, out: &mut String) {
    let all = plain_set();
    if set == all {
        // In the C locale, any byte but the line feed.
        out.push('.');
        return;
    }
    let specials = |b: u8| matches!(b, b']' | b'[' | b'\\' | b'^' | b'-');
    let bit = |b: u8| 1u128 << b;
    let positive = {
        let extras: Vec<&str> = [(b'[', r"\["), (b'\\', r"\\")]
            .into_iter()
            .filter(|(b, _)| set & bit(*b) != 0)
            .map(|(_, text)| text)
            .collect();
        let listed = set & !bit(b'[') & !bit(b'\\');
        let mut alternatives: Vec<String> = Vec::new();
        match listed.count_ones() {
            0 => {}
            1 => {
                let mut one = String::new();
                ere_byte(listed.trailing_zeros() as u8, &mut one);
                alternatives.push(one);
            }
            _ => {
                let mut bracket = String::from("[");
                bracket_items(listed, specials, false, &mut bracket);
                bracket.push(']');
                alternatives.push(bracket);
            }
        }
        alternatives.extend(extras.into_iter().map(str::to_owned));
        if alternatives.len() == 1 {
            alternatives.swap_remove(0)
        } else {
            format!("({})", alternatives.join("|"))
        }
    };
    let left_out = all & !set & !bit(b'[') & !bit(b'\\');
    let negated = if left_out == 0 {
        ".".to_owned()
    } else {
        let mut bracket = String::from("[^");
        bracket_items(left_out, specials, true, &mut bracket);
        bracket.push(']');
        bracket
    };
    out.push_str(if negated.len() < positive.len() {
        &negated
    } else {
        &positive
    });
}

/// The inside of a bracket listing `set` (never `[` nor `\`, at least one byte), after the
/// `^` of a `negated` one: a positive bracket may list more than `set` (a wider language), a
/// negated one never.
fn bracket_items(set: u128, specials: impl Fn(u8) -> bool, negated: bool, out: &mut String) {
    let bit = |b: u8| 1u128 << b;
    let mut items = String::new();
    if set & bit(b']') != 0 {
        items.push(']');
    }
    let ordinary = (0u8..128)
        .filter(|b| !specials(*b))
        .fold(0u128, |s, b| s | bit(b))
        & set;
    let mut ranges: Vec<String> = Vec::new();
    for (start, end) in runs(ordinary) {
        match end - start {
            0 => ranges.push(char::from(start).to_string()),
            1 => {
                ranges.push(char::from(start).to_string());
                ranges.push(char::from(end).to_string());
            }
            _ => ranges.push(format!("{}-{}", char::from(start), char::from(end))),
        }
    }
    // GNU grep refuses a bracket that reads `[:…:]` (it means `[[:…:]]`): `:` never first.
    if items.is_empty() && ranges.len() > 1 && ranges[0] == ":" {
        ranges.swap(0, 1);
    }
    for range in ranges {
        items.push_str(&range);
    }
    let caret = set & bit(b'^') != 0;
    let dash = set & bit(b'-') != 0;
    if caret && items.is_empty() {
        // `^` may not come first in a positive bracket: `-` does (`[-^]`, also for `^` alone,
        // a wider set). After the `^` of a negated one, `^` is plain (`[^^]`).
        if dash || !negated {
            items.push_str("-^");
        } else {
            items.push('^');
        }
        out.push_str(&items);
        return;
    }
    if caret {
        items.push('^');
    }
    if dash {
        items.push('-');
    }
    out.push_str(&items);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(text: &str, literal: bool, ci: bool) -> Option<LineRegex> {
        line_regex(&GrepPattern::new(text, literal, ci).unwrap())
    }

    fn ere(text: &str) -> String {
        match of(text, false, false) {
            Some(LineRegex::Pattern { ere, .. }) => ere,
            other => panic!("{text}: {other:?}"),
        }
    }

    fn rust(text: &str) -> String {
        match of(text, false, false) {
            Some(LineRegex::Pattern { rust, .. }) => rust,
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn classes_become_brackets_of_plain_bytes() {
        assert_eq!(ere(r"\d{4}-\d{2}"), "[0-9]{4}-[0-9]{2}");
        assert_eq!(ere(r"fn\s+[a-z_]{24,}\("), "fn[\t ]+[_a-z]{24,}[(]");
        assert_eq!(ere(r"[A-Z]{3}"), "[A-Z]{3}");
        assert_eq!(ere(r"\w+"), "[0-9A-Z_a-z]+");
        assert_eq!(rust(r"\d{4}-\d{2}"), r"[\x30-\x39]{4}\x2D[\x30-\x39]{2}");
        // `.` is any plain byte; a negated class the bracket of what it leaves out.
        assert_eq!(ere("a.c"), "a.c");
        assert_eq!(ere("[^a]x"), "[^a]x");
        assert_eq!(ere(r"[\[\\]"), r"(\[|\\)");
        assert_eq!(ere(r"[\]\-^a]"), "[]a^-]");
        assert_eq!(ere(r"[\-^]"), "[-^]");
        assert_eq!(ere(r"[:;]"), "[;:]");
        assert_eq!(ere(r"[:a]"), "[a:]");
    }

    #[test]
    fn case_is_spelled_out_by_the_parser() {
        match of("k[a-b]", false, true) {
            Some(LineRegex::Pattern { ere, .. }) => assert_eq!(ere, "[Kk][ABab]"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn what_no_plain_line_holds_cannot_match() {
        for never in [
            r"\p{Greek}",
            "[é]",
            "é+x",
            r"(?-u:\xFF)",
            "caf\u{e9}|\u{e8}",
        ] {
            assert_eq!(of(never, false, false), Some(LineRegex::Never), "{never}");
        }
        assert_eq!(of("日本語", true, false), Some(LineRegex::Never));
        // A branch or an optional part that cannot match goes; the rest stays.
        assert_eq!(ere("é|ab"), "ab");
        assert_eq!(ere("xé?y"), "xy");
        assert_eq!(ere("x(é|y)z"), "xyz");
    }

    #[test]
    fn anchors_stay_and_boundaries_widen() {
        assert_eq!(ere("^ab$"), "^ab$");
        assert_eq!(ere(r"\bfoo\b"), "foo");
        assert_eq!(rust(r"\bfoo\B"), "foo");
        assert_eq!(ere(r"\Afoo\z"), "foo");
        assert_eq!(ere(r"(^a|b)c"), "(^a|b)c");
        assert_eq!(ere(r"(^a)*b"), "a*b");
        assert_eq!(ere(r"a(b|)c"), "ab?c");
        assert_eq!(ere(r"a(bc|)d"), "a(bc)?d");
        assert_eq!(ere(r"(?:^|)\t"), "\t");
        assert_eq!(ere(r"(?:^a|)b"), "a?b");
    }

    #[test]
    fn big_counts_widen_and_a_pattern_matching_every_line_narrows_nothing() {
        assert_eq!(ere("x{300}"), "x+");
        assert_eq!(ere("(ab){0,400}c"), "(ab)*c");
        assert_eq!(ere("(a{50}){50}b"), "(a+)+b");
        assert_eq!(of(r"\b", false, false), None);
        assert_eq!(of(r"(?:)", false, false), None);
        assert_eq!(of("é?", false, false), None);
    }

    #[test]
    fn special_bytes_are_escaped_in_both_dialects() {
        assert_eq!(
            ere(r"a\.b\*c\{d\}e\|f\$g\^h\[i\]j\\k"),
            r"a[.]b[*]c[{]d[}]e[|]f[$]g\^h\[i[]]j\\k"
        );
        assert_eq!(of("$(x)'\"", true, false), of(r#"\$\(x\)'""#, false, false));
        assert_eq!(rust("a b"), r"a\x20b");
    }
}

/// The rewritten regexes against the real tools: for random patterns and random plain lines,
/// every line the matcher matches is matched by the target's `grep -E` (GNU and busybox, in
/// the C locale) and `rg` given the rewriting (those present here).
#[cfg(test)]
pub(super) mod against_the_tools {
    use super::*;
    use std::io::Write;
    use std::process::Command;

    /// A small deterministic generator (xorshift).
    pub(in crate::storage::backend::shell) struct Dice(pub(in crate::storage::backend::shell) u64);

    impl Dice {
        pub(in crate::storage::backend::shell) fn roll(&mut self, n: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % n as u64) as usize
        }

        pub(in crate::storage::backend::shell) fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
            from[self.roll(from.len())]
        }
    }

    const ATOMS: &[&str] = &[
        "a",
        "b",
        "k",
        "K",
        "0",
        "9",
        "_",
        "-",
        r"\[",
        r"\]",
        r"\^",
        r"\\",
        ":",
        r"\.",
        r"\*",
        r"\(",
        r"\)",
        r"\{",
        r"\}",
        r"\|",
        r"\$",
        " ",
        r"\t",
        "~",
        "[a-c]",
        "[^a]",
        r"\d",
        r"\w",
        r"\s",
        r"\W",
        ".",
        r"[\[\]\\^-]",
        r"[:;]",
        r"[\^]",
        r"[-^]",
        r"\b",
        r"\B",
        "^",
        "$",
        r"\p{Greek}",
        "é",
        "[é]",
        r"\A",
        r"\z",
        "[[:alpha:]]",
        r"[^\[\\]",
    ];

    /// A random pattern of `atoms` joined, alternated, repeated and case-folded, `depth` deep.
    pub(in crate::storage::backend::shell) fn pattern(
        dice: &mut Dice,
        atoms: &[&str],
        depth: usize,
    ) -> String {
        if depth == 0 {
            return dice.pick(atoms).to_owned();
        }
        let inner = |dice: &mut Dice| pattern(dice, atoms, depth - 1);
        match dice.roll(7) {
            0 | 1 => format!("{}{}", inner(dice), inner(dice)),
            2 => format!("(?:{}|{})", inner(dice), inner(dice)),
            3 => format!(
                "(?:{}){}",
                inner(dice),
                dice.pick(&["*", "+", "?", "{2}", "{0,2}", "{1,}", "{300}", "*?"])
            ),
            4 => format!("(?i:{})", inner(dice)),
            5 => format!("(?:{}|)", inner(dice)),
            _ => inner(dice),
        }
    }

    fn line(dice: &mut Dice) -> String {
        const BYTES: &[u8] = b"akK0_-[]^\\:.$ \t~";
        let len = dice.roll(6);
        (0..len)
            .map(|_| char::from(BYTES[dice.roll(BYTES.len())]))
            .collect()
    }

    /// The numbers (from 1) of the lines of `file` the tool matches with the pattern in
    /// `patterns`, `None` when the tool is missing.
    fn tool_lines(
        tool: &[&str],
        patterns: &std::path::Path,
        file: &std::path::Path,
    ) -> Option<Vec<usize>> {
        let mut command = Command::new(tool[0]);
        command
            .args(&tool[1..])
            .arg("-n")
            .arg("-f")
            .arg(patterns)
            .arg("--")
            .arg(file)
            .env("LC_ALL", "C");
        numbered_lines(command)
    }

    /// The numbers a grep-like `command` run with `-n` printed before its matching lines, after
    /// checking it did not fail; `None` when the tool is missing.
    pub(in crate::storage::backend::shell) fn numbered_lines(
        mut command: Command,
    ) -> Option<Vec<usize>> {
        let output = command.env_remove("RIPGREP_CONFIG_PATH").output().ok()?;
        assert!(
            output.status.code().is_some_and(|c| c <= 1),
            "{command:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        Some(
            String::from_utf8_lossy(&output.stdout)
                .lines()
                .filter_map(|l| l.split(':').next()?.parse().ok())
                .collect(),
        )
    }

    #[test]
    fn every_matching_plain_line_is_matched_by_the_target_tools() {
        let dir = tempfile::tempdir().unwrap();
        let mut dice = Dice(0x9e37_79b9_7f4a_7c15);
        let lines: Vec<String> = (0..2000).map(|_| line(&mut dice)).collect();
        let file = dir.path().join("lines");
        std::fs::write(&file, lines.join("\n") + "\n").unwrap();
        let tools: [(&[&str], bool); 3] = [
            (&["grep", "-E"], false),
            (&["busybox", "grep", "-E"], false),
            (&["rg", "--no-config", "-a"], true),
        ];
        let mut checked = 0;
        // Unicode classes compile slowly in a debug build: a few hundred patterns are enough.
        const FIXED: &[&str] = &[
            "a$",
            "^a",
            r"\d{2}$",
            r"[\]-]+$",
            r"^\s*k",
            "(?i)K.$",
            r"\bk\b",
            "0{2,3}",
            r"^$",
            r"\^|\$",
            r"[^\[\\]{3}",
            r"\\[.$]",
            r"(?:^|[^a])k",
            r"k(?:$|[^a])",
            r"\Bk",
        ];
        for round in 0..160 + FIXED.len() {
            let text = match FIXED.get(round) {
                Some(fixed) => (*fixed).to_owned(),
                None => pattern(&mut dice, ATOMS, 1 + round % 4),
            };
            let Ok(compiled) = GrepPattern::new(&text, false, round % 5 == 0) else {
                continue;
            };
            let want: Vec<usize> = lines
                .iter()
                .enumerate()
                .filter(|(_, l)| compiled.is_match(l))
                .map(|(i, _)| i + 1)
                .collect();
            let rewritten = line_regex(&compiled);
            let (ere, rust) = match &rewritten {
                None => continue,
                Some(LineRegex::Never) => {
                    assert!(want.is_empty(), "{text}: never, yet {want:?}");
                    continue;
                }
                Some(LineRegex::Pattern { ere, rust }) => (ere, rust),
            };
            for (tool, is_rg) in tools {
                let patterns = dir.path().join("patterns");
                let mut out = std::fs::File::create(&patterns).unwrap();
                writeln!(out, "{}", if is_rg { rust } else { ere }).unwrap();
                drop(out);
                let Some(got) = tool_lines(tool, &patterns, &file) else {
                    // Missing here: skipped, but not in CI (see tests/support/shells.rs).
                    let required = std::env::var("MOUNTFS_REQUIRE_SHELL_TARGETS")
                        .is_ok_and(|v| !v.is_empty() && v != "0");
                    assert!(
                        !required,
                        "{tool:?} is not installed (apt-get install -y {}); MOUNTFS_REQUIRE_SHELL_TARGETS is set",
                        if is_rg {
                            "ripgrep"
                        } else if tool[0] == "busybox" {
                            "busybox"
                        } else {
                            "grep"
                        }
                    );
                    continue;
                };
                checked += 1;
                for n in &want {
                    assert!(
                        got.contains(n),
                        "{tool:?}: {text} as {ere:?} / {rust:?} misses line {n}: {:?}",
                        lines[n - 1]
                    );
                }
            }
        }
        assert!(checked > 0, "no grep here");
    }
}
