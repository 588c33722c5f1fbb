//! The search planner: what a store's trigram index can answer of a grep pattern (issue 28).
//!
//! From the pattern's syntax tree (`regex-syntax`, parsed as the line matcher parses it) it
//! takes the literals every match must begin with and those every match must end with
//! (`regex-syntax`'s literal extraction), and turns them into an [`IndexPlan`]: a tree of
//! substrings (all of / any of) that every *line* matching the pattern contains, so every file
//! holding a match contains them too. The engines turn that tree into their own index query
//! (SQLite FTS5 trigram terms, PostgreSQL containment of trigram arrays in a GIN index) and return
//! *candidates*: a superset of the files that match. Every candidate is then confirmed by the
//! same matcher a full scan uses, so the answer is exactly a scan's.
//!
//! Whitespace is seen by the index as the line matcher's `\s+` sees it: the engines index each
//! item's text with every run of whitespace squeezed to one space ([`squeeze`]), and the planner
//! reads a class of whitespace, or one repeated, as that one space. So `unsafe\s+impl` requires
//! the one substring `unsafe impl`, and the engines also keep, for every space of the squeezed
//! text, the two characters on each side of it ([`joins`]): `fe im` says that a word ending in
//! `fe` is followed by one beginning with `im`, which trigrams alone cannot (a file with
//! `unsafe` and `impl` anywhere in it holds all the trigrams of `unsafe impl` but `fe im`).
//!
//! Nothing indexable (`.`, `\w+`, a literal of one or two characters, a pattern that cannot be
//! parsed here) gives no plan: the search scans, as before the index existed. What the index
//! cannot cover (items that are not UTF-8 text, or that are too large for a line to be
//! searched) is the engines' to add to the candidates, not the planner's.

use std::borrow::Cow;

use regex_syntax::hir::literal::{ExtractKind, Extractor};
use regex_syntax::hir::{Capture, Class, Hir, HirKind, Repetition};

use crate::ground::search::GrepPattern;

/// Shortest substring the index can look up: one trigram.
pub const MIN_CHARS: usize = 3;

/// Substrings every file holding a match contains (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Terms {
    /// This text, at least [`MIN_CHARS`] characters, never a NUL.
    Substring(String),
    /// Each of these.
    All(Vec<Terms>),
    /// At least one of these.
    Any(Vec<Terms>),
}

/// What an index must find: files containing [`IndexPlan::terms`], with ASCII letters compared
/// without case when [`IndexPlan::fold_case`] says so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexPlan {
    /// The substrings.
    pub terms: Terms,
    /// ASCII letters of the substrings match either case (the pattern ignores case).
    pub fold_case: bool,
}

impl Terms {
    /// Every substring of the tree (for engines that look each up).
    pub fn substrings(&self) -> Vec<&str> {
        let mut out = Vec::new();
        self.collect(&mut out);
        out
    }

    fn collect<'a>(&'a self, out: &mut Vec<&'a str>) {
        match self {
            Self::Substring(text) => out.push(text),
            Self::All(parts) | Self::Any(parts) => parts.iter().for_each(|p| p.collect(out)),
        }
    }
}

/// The distinct trigrams of `text` (three characters each), in order of first appearance.
pub fn trigrams(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out: Vec<String> = Vec::new();
    for window in chars.windows(MIN_CHARS) {
        let gram: String = window.iter().collect();
        if !out.contains(&gram) {
            out.push(gram);
        }
    }
    out
}

/// `text` with every run of whitespace (`char::is_whitespace`, which holds every character the
/// matcher's `\s` matches) as one space: the text the index holds (see the module doc).
pub fn squeeze(text: &str) -> Cow<'_, str> {
    let mut previous_space = false;
    let unchanged = text.chars().all(|c| {
        let fits = !c.is_whitespace() || (c == ' ' && !previous_space);
        previous_space = c.is_whitespace();
        fits
    });
    if unchanged {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut in_run = false;
    for c in text.chars() {
        if c.is_whitespace() {
            if !in_run {
                out.push(' ');
            }
            in_run = true;
        } else {
            out.push(c);
            in_run = false;
        }
    }
    Cow::Owned(out)
}

/// [`squeeze`] of the UTF-8 parts of `bytes` (any invalid byte is kept as it is).
pub fn squeeze_bytes(bytes: &[u8]) -> Cow<'_, [u8]> {
    if let Ok(text) = std::str::from_utf8(bytes) {
        return match squeeze(text) {
            Cow::Borrowed(text) => Cow::Borrowed(text.as_bytes()),
            Cow::Owned(text) => Cow::Owned(text.into_bytes()),
        };
    }
    let mut out = Vec::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        out.extend_from_slice(squeeze(chunk.valid()).as_bytes());
        out.extend_from_slice(chunk.invalid());
    }
    Cow::Owned(out)
}

/// The joins of a squeezed text: for every space with two characters on each side, those four
/// characters (see the module doc), in order, repeated as often as they occur.
pub fn joins(squeezed: &str) -> impl Iterator<Item = [char; 4]> + '_ {
    let mut window = [' '; 5];
    let mut seen = 0usize;
    squeezed.chars().filter_map(move |c| {
        window.rotate_left(1);
        window[4] = c;
        seen += 1;
        (seen >= 5 && window[2] == ' ').then_some([window[0], window[1], window[3], window[4]])
    })
}

/// [`joins`] in bytes (for an engine whose trigrams are bytes): the two bytes on each side of
/// every space byte of a squeezed text.
pub fn byte_joins(squeezed: &[u8]) -> impl Iterator<Item = [u8; 4]> + '_ {
    (2..squeezed.len().saturating_sub(2))
        .filter(|&at| squeezed[at] == b' ')
        .map(|at| {
            [
                squeezed[at - 2],
                squeezed[at - 1],
                squeezed[at + 1],
                squeezed[at + 2],
            ]
        })
}

/// The literals every match of a pattern contains, as the planner finds them (also what a shell
/// mount's prefilter narrows by, issue 27).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequiredLiterals {
    /// Sets of literals: every match holds at least one literal of each set (the literals
    /// every match begins with, those it ends with). A literal may be empty (it then requires
    /// nothing) and is in lower case when [`RequiredLiterals::fold_case`].
    pub sets: Vec<Vec<String>>,
    /// ASCII letters of the literals match either case (the pattern ignores case).
    pub fold_case: bool,
}

/// The literals every match of `pattern` contains, or `None` when the pattern cannot be
/// parsed here or no line can match it.
pub fn required_literals(pattern: &GrepPattern) -> Option<RequiredLiterals> {
    literals(pattern, false)
}

/// [`required_literals`] of a text seen as [`squeeze`] makes it (`squeezed`), or as it is.
fn literals(pattern: &GrepPattern, squeezed: bool) -> Option<RequiredLiterals> {
    // A pattern that can match nothing in a line is answered by the matcher alone.
    let hir = pattern.line_syntax(true)?;
    let mut folded = false;
    let hir = fold_ascii_letters(&hir, &mut folded);
    let hir = match squeezed {
        true => whitespace_as_one_space(&hir),
        false => hir,
    };
    let fold_case = folded || pattern.case_insensitive;
    let sets = [ExtractKind::Prefix, ExtractKind::Suffix]
        .into_iter()
        .filter_map(|kind| literal_set(&hir, kind, fold_case, squeezed))
        .collect();
    Some(RequiredLiterals { sets, fold_case })
}

/// The plan for `pattern`, or `None` when the index cannot narrow the search (scan instead).
/// Its substrings are of the squeezed text (see the module doc).
pub fn plan(pattern: &GrepPattern) -> Option<IndexPlan> {
    let RequiredLiterals { sets, fold_case } = literals(pattern, true)?;
    let mut required = Vec::new();
    for set in &sets {
        if let Some(terms) = literal_terms(set) {
            required.push(terms);
        }
    }
    required.dedup();
    let terms = match required.len() {
        0 => return None,
        1 => required.pop()?,
        _ => Terms::All(required),
    };
    Some(IndexPlan { terms, fold_case })
}

/// The rewritten tree where each class that is exactly one ASCII letter in both cases (what
/// `(?i)` makes of `a`) is that letter in lower case, `folded` set when any was: the index
/// then compares those letters without case. Letters whose case class holds more (`k` has
/// the Kelvin sign, `s` the long s) stay classes, so their variants are looked up one by one.
fn fold_ascii_letters(hir: &Hir, folded: &mut bool) -> Hir {
    match hir.kind() {
        HirKind::Class(Class::Unicode(class)) => {
            let ranges = class.ranges();
            if let [upper, lower] = ranges
                && upper.start() == upper.end()
                && lower.start() == lower.end()
                && upper.start().is_ascii_uppercase()
                && lower.start() == upper.start().to_ascii_lowercase()
            {
                *folded = true;
                let mut buf = [0u8; 4];
                return Hir::literal(lower.start().encode_utf8(&mut buf).as_bytes());
            }
            hir.clone()
        }
        HirKind::Repetition(rep) => Hir::repetition(Repetition {
            min: rep.min,
            max: rep.max,
            greedy: rep.greedy,
            sub: Box::new(fold_ascii_letters(&rep.sub, folded)),
        }),
        HirKind::Capture(cap) => Hir::capture(Capture {
            index: cap.index,
            name: cap.name.clone(),
            sub: Box::new(fold_ascii_letters(&cap.sub, folded)),
        }),
        HirKind::Concat(subs) => {
            Hir::concat(subs.iter().map(|s| fold_ascii_letters(s, folded)).collect())
        }
        HirKind::Alternation(subs) => {
            Hir::alternation(subs.iter().map(|s| fold_ascii_letters(s, folded)).collect())
        }
        HirKind::Empty | HirKind::Literal(_) | HirKind::Look(_) | HirKind::Class(_) => hir.clone(),
    }
}

/// The tree where whatever matches a run of whitespace matches one space instead: a class of
/// whitespace characters only is a space, and so is a repetition of one (at least once; one
/// that may be absent is an optional space). A match of the pattern, with each run of
/// whitespace its classes matched made one space, is a match of the result; its literals,
/// squeezed, are then in the squeezed text of every line that matches (see the module doc).
fn whitespace_as_one_space(hir: &Hir) -> Hir {
    let space = || Hir::literal(b" ".as_slice());
    match hir.kind() {
        HirKind::Class(class) if only_whitespace(class) => space(),
        HirKind::Repetition(rep) => {
            let sub = whitespace_as_one_space(&rep.sub);
            if sub == space() {
                return match rep.min {
                    0 => Hir::repetition(Repetition {
                        min: 0,
                        max: Some(1),
                        greedy: rep.greedy,
                        sub: Box::new(sub),
                    }),
                    _ => sub,
                };
            }
            Hir::repetition(Repetition {
                min: rep.min,
                max: rep.max,
                greedy: rep.greedy,
                sub: Box::new(sub),
            })
        }
        HirKind::Capture(cap) => Hir::capture(Capture {
            index: cap.index,
            name: cap.name.clone(),
            sub: Box::new(whitespace_as_one_space(&cap.sub)),
        }),
        HirKind::Concat(subs) => Hir::concat(subs.iter().map(whitespace_as_one_space).collect()),
        HirKind::Alternation(subs) => {
            Hir::alternation(subs.iter().map(whitespace_as_one_space).collect())
        }
        HirKind::Empty | HirKind::Literal(_) | HirKind::Look(_) | HirKind::Class(_) => hir.clone(),
    }
}

/// Whether every character (or byte) of a non-empty class is whitespace.
fn only_whitespace(class: &Class) -> bool {
    match class {
        Class::Unicode(class) => {
            !class.ranges().is_empty()
                && class.ranges().iter().all(|range| {
                    let (start, end) = (u32::from(range.start()), u32::from(range.end()));
                    // Whitespace ranges are short (the longest, U+2000..=U+200A, has 11).
                    end - start < 64
                        && (start..=end).all(|c| char::from_u32(c).is_some_and(char::is_whitespace))
                })
        }
        Class::Bytes(class) => {
            !class.ranges().is_empty()
                && class.ranges().iter().all(|range| {
                    (range.start()..=range.end())
                        .all(|b| b.is_ascii() && char::from(b).is_whitespace())
                })
        }
    }
}

/// The literals every match begins (or ends) with, whole characters, in lower case when
/// `fold_case`, squeezed when `squeezed`: `None` when they are infinite, or when there are none
/// (the pattern matches nothing; the matcher says so for every file).
fn literal_set(
    hir: &Hir,
    kind: ExtractKind,
    fold_case: bool,
    squeezed: bool,
) -> Option<Vec<String>> {
    let suffix = matches!(kind, ExtractKind::Suffix);
    let mut extractor = Extractor::new();
    extractor.kind(kind);
    let seq = extractor.extract(hir);
    let literals = seq.literals()?;
    if literals.is_empty() {
        return None;
    }
    let mut set: Vec<String> = Vec::new();
    for literal in literals {
        let text = whole_chars(literal.as_bytes(), suffix);
        let text = match squeezed {
            true => squeeze(text),
            false => Cow::Borrowed(text),
        };
        let text = if fold_case {
            text.to_ascii_lowercase()
        } else {
            text.into_owned()
        };
        if !set.contains(&text) {
            set.push(text);
        }
    }
    Some(set)
}

/// A set of literals (see [`literal_set`]) as terms: `None` when any of them is too short to
/// look up (a match could then contain none of the others).
fn literal_terms(set: &[String]) -> Option<Terms> {
    let mut any: Vec<Terms> = Vec::new();
    // A file holding a literal holds every literal inside it: of `foo(` and ` foo(`, only the
    // first needs looking up.
    let holds_another = |text: &String| {
        set.iter()
            .any(|other| other != text && text.contains(other.as_str()))
    };
    for text in set.iter().filter(|text| !holds_another(text)) {
        let term = substring_terms(text)?;
        if !any.contains(&term) {
            any.push(term);
        }
    }
    Some(if any.len() == 1 {
        any.pop()?
    } else {
        Terms::Any(any)
    })
}

/// The longest run of whole characters of `bytes` at the side a literal is anchored to (a
/// literal cut to a byte limit may end inside a character; any part of it is still required).
fn whole_chars(bytes: &[u8], suffix: bool) -> &str {
    match suffix {
        true => {
            let mut start = 0;
            while start < bytes.len() {
                if let Ok(text) = std::str::from_utf8(&bytes[start..]) {
                    return text;
                }
                start += 1;
            }
            ""
        }
        false => match std::str::from_utf8(bytes) {
            Ok(text) => text,
            Err(error) => std::str::from_utf8(&bytes[..error.valid_up_to()]).unwrap_or(""),
        },
    }
}

/// `text` as required substrings: itself, or its NUL-free pieces (an index holds no NUL), or
/// `None` when no piece is worth looking up.
fn substring_terms(text: &str) -> Option<Terms> {
    let mut pieces: Vec<Terms> = text
        .split('\0')
        .filter(|piece| worth_looking_up(piece))
        .map(|piece| Terms::Substring(piece.to_owned()))
        .collect();
    match pieces.len() {
        0 => None,
        1 => pieces.pop(),
        _ => Some(Terms::All(pieces)),
    }
}

/// Whether a (squeezed) substring narrows a search: it has a trigram without a space, or a
/// join. One whose every trigram holds a space and that has no join (`fn ` of `fn\s+\w+`, `a b`)
/// is about as common as its two letters: looking it up would read nearly every file through
/// the index, slower than the scan.
fn worth_looking_up(piece: &str) -> bool {
    let chars: Vec<char> = piece.chars().collect();
    chars.len() >= MIN_CHARS
        && (chars.windows(MIN_CHARS).any(|gram| !gram.contains(&' '))
            || joins(piece).next().is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan_of(text: &str, literal: bool, ci: bool) -> Option<IndexPlan> {
        plan(&GrepPattern::new(text, literal, ci).unwrap())
    }

    fn sub(text: &str) -> Terms {
        Terms::Substring(text.to_owned())
    }

    #[test]
    fn a_literal_is_one_substring() {
        let p = plan_of("fn main(", true, false).unwrap();
        assert_eq!(p.terms, sub("fn main("));
        assert!(!p.fold_case);
    }

    #[test]
    fn a_regex_requires_its_prefix_and_its_suffix() {
        let p = plan_of(r"unsafe\S+impl", false, false).unwrap();
        assert_eq!(p.terms, Terms::All(vec![sub("unsafe"), sub("impl")]));
        let p = plan_of(r"^\s*(foo|barbaz)\(", false, false).unwrap();
        assert_eq!(p.terms, Terms::Any(vec![sub("foo("), sub("barbaz(")]));
    }

    #[test]
    fn nothing_indexable_scans() {
        for pattern in [
            ".",
            r"\w+",
            "ab",
            "a.c",
            "(foo|x)",
            "^$",
            r"[a-z]+\d",
            // Its only trigram holds the squeezed space, and it has no join.
            r"fn\s+[a-z_]{24,}\(",
            r"a\s+b",
        ] {
            assert_eq!(plan_of(pattern, false, false), None, "{pattern}");
        }
        assert_eq!(plan_of("ab", true, false), None);
    }

    #[test]
    fn ignoring_case_folds_ascii_letters_and_keeps_the_other_variants() {
        let p = plan_of("Unsafe", false, true).unwrap();
        assert!(p.fold_case);
        // `s` also matches the long s (U+017F): both are looked up.
        assert_eq!(p.terms, Terms::Any(vec![sub("unsafe"), sub("unſafe")]));
        let p = plan_of("(?i)hello", false, false).unwrap();
        assert!(p.fold_case);
        assert_eq!(p.terms, sub("hello"));
    }

    #[test]
    fn whitespace_is_one_space_as_the_index_squeezes_it() {
        // Any class of whitespace, repeated or not, is one space.
        for pattern in [
            r"unsafe\s+impl",
            r"unsafe\s impl",
            r"unsafe[ \t]+impl",
            r"unsafe\s{2,5}impl",
            r"(?-u)unsafe\s+impl",
            r"unsafe\s+\s*impl",
            "unsafe \t impl",
        ] {
            let p = plan_of(pattern, false, false).unwrap();
            assert_eq!(p.terms, sub("unsafe impl"), "{pattern}");
        }
        assert_eq!(
            plan_of("unsafe\t\t impl", true, false).unwrap().terms,
            sub("unsafe impl")
        );
        // Whitespace that may be absent: with it, or without.
        let p = plan_of(r"unsafe\s*impl", false, false).unwrap();
        assert_eq!(
            p.terms,
            Terms::Any(vec![sub("unsafe impl"), sub("unsafeimpl")])
        );
        // A class holding more than whitespace is not a space.
        let p = plan_of(r"unsafe[\sx]+impl", false, false).unwrap();
        assert_eq!(p.terms, Terms::All(vec![sub("unsafe"), sub("impl")]));
        // What the shell mounts search for is the text as it is.
        let required = required_literals(&GrepPattern::new("a  b\tcd", true, false).unwrap());
        assert_eq!(required.unwrap().sets[0], vec!["a  b\tcd".to_owned()]);
    }

    #[test]
    fn squeezing_makes_each_run_of_whitespace_one_space() {
        assert!(matches!(squeeze("a b c"), Cow::Borrowed("a b c")));
        assert_eq!(squeeze("  a\t\t b\r\n\u{3000}c\u{a0}"), " a b c ");
        assert_eq!(
            squeeze_bytes(b"a \xff\t\tb\n\n"),
            Cow::<[u8]>::Owned(b"a \xff b ".to_vec())
        );
        assert_eq!(
            squeeze_bytes("é\u{2028}x".as_bytes()).as_ref(),
            "é x".as_bytes()
        );
    }

    #[test]
    fn joins_are_the_two_characters_each_side_of_a_space() {
        let found: Vec<[char; 4]> = joins("unsafe impl x ab cd").collect();
        let expected = [
            ['f', 'e', 'i', 'm'],
            ['p', 'l', 'x', ' '],
            [' ', 'x', 'a', 'b'],
            ['a', 'b', 'c', 'd'],
        ];
        assert_eq!(found, expected);
        assert_eq!(joins("a b").count(), 0);
        let bytes: Vec<[u8; 4]> = byte_joins("é x".as_bytes()).collect();
        assert!(bytes.is_empty(), "one byte after the space");
        let bytes: Vec<[u8; 4]> = byte_joins("é xy".as_bytes()).collect();
        assert_eq!(bytes, vec![[0xc3, 0xa9, b'x', b'y']]);
    }

    #[test]
    fn nul_splits_a_literal_into_pieces() {
        let p = plan_of("abc\0defg", true, false).unwrap();
        assert_eq!(p.terms, Terms::All(vec![sub("abc"), sub("defg")]));
    }

    #[test]
    fn trigrams_are_distinct_and_in_order() {
        assert_eq!(trigrams("abcabc"), vec!["abc", "bca", "cab"]);
        assert_eq!(trigrams("éßx"), vec!["éßx"]);
        assert!(trigrams("ab").is_empty());
    }
}
