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
//! Nothing indexable (`.`, `\w+`, a literal of one or two characters, a pattern that cannot be
//! parsed here) gives no plan: the search scans, as before the index existed. What the index
//! cannot cover (items that are not UTF-8 text, or that are too large for a line to be
//! searched) is the engines' to add to the candidates, not the planner's.

use regex_syntax::hir::literal::{ExtractKind, Extractor};
use regex_syntax::hir::{Capture, Class, Hir, HirKind, Repetition};

use crate::search::GrepPattern;

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
    // A pattern that can match nothing in a line is answered by the matcher alone.
    let hir = pattern.line_syntax(true)?;
    let mut folded = false;
    let hir = fold_ascii_letters(&hir, &mut folded);
    let fold_case = folded || pattern.case_insensitive;
    let sets = [ExtractKind::Prefix, ExtractKind::Suffix]
        .into_iter()
        .filter_map(|kind| literal_set(&hir, kind, fold_case))
        .collect();
    Some(RequiredLiterals { sets, fold_case })
}

/// The plan for `pattern`, or `None` when the index cannot narrow the search (scan instead).
pub fn plan(pattern: &GrepPattern) -> Option<IndexPlan> {
    let RequiredLiterals { sets, fold_case } = required_literals(pattern)?;
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

/// The literals every match begins (or ends) with, whole characters, in lower case when
/// `fold_case`: `None` when they are infinite, or when there are none (the pattern matches
/// nothing; the matcher says so for every file).
fn literal_set(hir: &Hir, kind: ExtractKind, fold_case: bool) -> Option<Vec<String>> {
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
        let text = if fold_case {
            text.to_ascii_lowercase()
        } else {
            text.to_owned()
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
    for text in set {
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
/// `None` when no piece is long enough to look up.
fn substring_terms(text: &str) -> Option<Terms> {
    let mut pieces: Vec<Terms> = text
        .split('\0')
        .filter(|piece| piece.chars().count() >= MIN_CHARS)
        .map(|piece| Terms::Substring(piece.to_owned()))
        .collect();
    match pieces.len() {
        0 => None,
        1 => pieces.pop(),
        _ => Some(Terms::All(pieces)),
    }
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
        let p = plan_of(r"unsafe\s+impl", false, false).unwrap();
        assert_eq!(p.terms, Terms::All(vec![sub("unsafe"), sub("impl")]));
        let p = plan_of(r"^\s*(foo|barbaz)\(", false, false).unwrap();
        assert_eq!(p.terms, Terms::Any(vec![sub("foo("), sub("barbaz(")]));
    }

    #[test]
    fn nothing_indexable_scans() {
        for pattern in [".", r"\w+", "ab", "a.c", "(foo|x)", "^$", r"[a-z]+\d"] {
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
