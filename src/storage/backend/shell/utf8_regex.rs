//! A grep pattern written for the target's `rg` in Unicode mode (issue 27), so that files in
//! UTF-8 with non-ASCII text are judged on the target instead of read back. Pure: no I/O.
//!
//! It judges only *clean* files: valid UTF-8 with no NUL, no `\r` and no byte order mark
//! (`EF BB BF`) anywhere. The server decodes such a file to the very same bytes
//! (`text::encoding::detect`: no BOM, valid UTF-8 is taken as UTF-8 before any legacy guess;
//! the streamed search of a big file picks the plain searcher for a valid UTF-8 head), splits
//! it into the same lines (`\n` only; no `\r` to take off) and matches those bytes with the
//! pattern, as `rg -a -E none` (no transcoding, no BOM sniffing, no binary stop) reads the
//! file. A file that is not clean is a candidate whatever the regex says ([`NOT_CLEAN`]):
//! BOMs, CRLF, UTF-16, legacy encodings, invalid UTF-8 and NULs are read back and confirmed
//! here, as are the files the regex names (a magic number makes a clean file binary to the
//! server: the matcher's answer is the one kept).
//!
//! The regex is not the pattern's text: it is the syntax tree the line matcher compiles
//! (`regex-syntax`, with its flags, so case-insensitivity is spelled out as classes), written
//! out with every class as explicit code point (or byte) ranges. So the answer does not depend
//! on the target `rg`'s version, its Unicode tables (`\p{L}` of an older Unicode) or its flags
//! (no `-i`, no smart case: `--no-config`). What is widened, never narrowed:
//! - word boundaries and `\A`, `\z` become the empty text (`rg`'s `\b` would use its own
//!   tables; a line matched alone sees `\A`/`\z` at its edges), as do line anchors inside a
//!   repetition;
//! - a counted repetition over [`MAX_COUNT`], or any counted repetition once the pattern
//!   would expand past [`MAX_WEIGHT`] pieces, becomes `x*` / `x+`.
//!
//! What is left matches every clean line the pattern matches; when the pattern can match no
//! line at all there is nothing to ask ([`Utf8Regex::Never`]), and when it matches every line
//! (or is too big to send), nothing to narrow (`None`).

use std::fmt::Write as _;

use regex_syntax::hir::{Class, Hir, HirKind, Look};

use crate::ground::search::GrepPattern;

/// Largest count of a repetition kept as written.
const MAX_COUNT: u32 = 255;

/// How many pieces the pattern may expand to (repetitions copied out) before every counted
/// repetition is widened to `*`/`+`.
const MAX_WEIGHT: u64 = 2_000;

/// Longest regex sent to the target (a `\w` alone is some 13 KB of ranges): past it, the
/// search is not narrowed this way.
const MAX_TEXT: usize = 256 * 1024;

/// A line that keeps its file from being clean (see the module doc), for `rg`, on bytes: a
/// NUL or `\r`, a BOM's bytes, or a byte sequence that is not UTF-8. The last is the longest
/// valid start of the line followed by the shortest invalid sequence: a stray continuation
/// byte or a byte no UTF-8 has, or a lead byte whose next byte is not the continuation it
/// needs (`E`: any other byte, or the line's end).
pub(super) const NOT_CLEAN: &str = concat!(
    r"(?-u:[\x00\x0D]|\xEF\xBB\xBF|(?m:^)",
    r"(?:[\x00-\x09\x0B-\x7F]|[\xC2-\xDF][\x80-\xBF]|\xE0[\xA0-\xBF][\x80-\xBF]",
    r"|[\xE1-\xEC\xEE\xEF][\x80-\xBF]{2}|\xED[\x80-\x9F][\x80-\xBF]",
    r"|\xF0[\x90-\xBF][\x80-\xBF]{2}|[\xF1-\xF3][\x80-\xBF]{3}|\xF4[\x80-\x8F][\x80-\xBF]{2})*",
    r"(?:[\x80-\xC1\xF5-\xFF]",
    r"|[\xC2-\xDF](?:[^\x0A\x80-\xBF]|(?m:$))",
    r"|\xE0(?:[^\x0A\xA0-\xBF]|(?m:$)|[\xA0-\xBF](?:[^\x0A\x80-\xBF]|(?m:$)))",
    r"|[\xE1-\xEC\xEE\xEF][\x80-\xBF]?(?:[^\x0A\x80-\xBF]|(?m:$))",
    r"|\xED(?:[^\x0A\x80-\x9F]|(?m:$)|[\x80-\x9F](?:[^\x0A\x80-\xBF]|(?m:$)))",
    r"|\xF0(?:[^\x0A\x90-\xBF]|(?m:$)|[\x90-\xBF][\x80-\xBF]?(?:[^\x0A\x80-\xBF]|(?m:$)))",
    r"|[\xF1-\xF3][\x80-\xBF]{0,2}(?:[^\x0A\x80-\xBF]|(?m:$))",
    r"|\xF4(?:[^\x0A\x80-\x8F]|(?m:$)|[\x80-\x8F][\x80-\xBF]?(?:[^\x0A\x80-\xBF]|(?m:$)))))",
);

/// What the target's `rg` is given (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Utf8Regex {
    /// No line can match: only files that are not clean are candidates.
    Never,
    /// Clean files with a line matching this (Rust syntax, Unicode mode) are candidates.
    Pattern(String),
}

/// The pattern written for `rg`, `None` when it cannot narrow a search (it matches every
/// line, it cannot be parsed here, or it is too big to send).
pub(super) fn utf8_regex(pattern: &GrepPattern) -> Option<Utf8Regex> {
    let hir = pattern.line_syntax(false)?;
    // It matches the empty text and asks nothing of where: every line.
    if hir.properties().minimum_len() == Some(0) && hir.properties().look_set().is_empty() {
        return None;
    }
    let widen_all = weight(&hir) > MAX_WEIGHT;
    match write(&hir, false, widen_all) {
        None => Some(Utf8Regex::Never),
        Some(Piece {
            kind: Kind::Empty, ..
        }) => None,
        Some(piece) => (piece.text.len() <= MAX_TEXT).then_some(Utf8Regex::Pattern(piece.text)),
    }
}

/// How a written piece binds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// The empty text (written as nothing).
    Empty,
    /// One atom: a repetition may follow it as it is.
    Atom,
    /// A concatenation or a repetition: grouped before it is repeated.
    Sequence,
    /// An alternation: grouped inside anything.
    Alternation,
}

/// A piece of the regex written out.
#[derive(Debug, Clone)]
struct Piece {
    text: String,
    kind: Kind,
}

impl Piece {
    fn empty() -> Self {
        Self {
            text: String::new(),
            kind: Kind::Empty,
        }
    }

    fn grouped(&self) -> String {
        match self.kind {
            Kind::Atom => self.text.clone(),
            _ => format!("(?:{})", self.text),
        }
    }
}

/// How many pieces `hir` expands to with its repetitions copied out (saturating).
fn weight(hir: &Hir) -> u64 {
    match hir.kind() {
        HirKind::Empty | HirKind::Class(_) | HirKind::Look(_) => 1,
        HirKind::Literal(literal) => literal.0.len() as u64,
        HirKind::Capture(capture) => weight(&capture.sub),
        HirKind::Concat(subs) | HirKind::Alternation(subs) => subs
            .iter()
            .fold(0u64, |sum, sub| sum.saturating_add(weight(sub))),
        HirKind::Repetition(rep) => {
            weight(&rep.sub).saturating_mul(u64::from(rep.max.unwrap_or(rep.min).max(1)))
        }
    }
}

/// One Unicode scalar as a regex atom: ASCII letters and digits as they are, any other as
/// `\x{…}` (so the pattern file is ASCII and one line).
fn push_char(c: char, out: &mut String) {
    if c.is_ascii_alphanumeric() {
        out.push(c);
    } else {
        let _ = write!(out, "\\x{{{:X}}}", u32::from(c));
    }
}

/// `hir` written for `rg` over clean lines (`repeated`: inside a repetition; `widen_all`: every
/// counted repetition widened), `None` when no line matches it.
fn write(hir: &Hir, repeated: bool, widen_all: bool) -> Option<Piece> {
    match hir.kind() {
        HirKind::Empty => Some(Piece::empty()),
        HirKind::Literal(literal) => {
            let bytes = &literal.0;
            // No line holds a line feed.
            if bytes.contains(&b'\n') {
                return None;
            }
            let mut text = String::new();
            let count = match std::str::from_utf8(bytes) {
                Ok(chars) => {
                    chars.chars().for_each(|c| push_char(c, &mut text));
                    chars.chars().count()
                }
                Err(_) => {
                    // Bytes of a `(?-u:…)` literal: the same bytes in the file.
                    text.push_str("(?-u:");
                    for byte in bytes.iter() {
                        let _ = write!(text, "\\x{byte:02X}");
                    }
                    text.push(')');
                    1
                }
            };
            Some(Piece {
                text,
                kind: match count {
                    0 => Kind::Empty,
                    1 => Kind::Atom,
                    _ => Kind::Sequence,
                },
            })
        }
        HirKind::Class(Class::Unicode(class)) => {
            let mut text = String::from("[");
            let mut any = false;
            for range in class.ranges() {
                // Without the line feed, which no line holds.
                let (start, end) = (range.start(), range.end());
                let pieces: [(char, char); 2] = [(start, end.min('\t')), (start.max('\x0B'), end)];
                for (from, to) in pieces {
                    if from > to {
                        continue;
                    }
                    any = true;
                    push_char(from, &mut text);
                    if to > from {
                        text.push('-');
                        push_char(to, &mut text);
                    }
                }
            }
            text.push(']');
            any.then_some(Piece {
                text,
                kind: Kind::Atom,
            })
        }
        HirKind::Class(Class::Bytes(class)) => {
            let mut text = String::from("(?-u:[");
            let mut any = false;
            for range in class.ranges() {
                let (start, end) = (range.start(), range.end());
                let pieces: [(u8, u8); 2] = [(start, end.min(9)), (start.max(11), end)];
                for (from, to) in pieces {
                    if from > to {
                        continue;
                    }
                    any = true;
                    let _ = write!(text, "\\x{from:02X}");
                    if to > from {
                        let _ = write!(text, "-\\x{to:02X}");
                    }
                }
            }
            text.push_str("])");
            any.then_some(Piece {
                text,
                kind: Kind::Atom,
            })
        }
        HirKind::Look(look) => Some(match look {
            _ if repeated => Piece::empty(),
            Look::StartLF | Look::StartCRLF => Piece {
                text: "(?m:^)".to_owned(),
                kind: Kind::Atom,
            },
            Look::EndLF | Look::EndCRLF => Piece {
                text: "(?m:$)".to_owned(),
                kind: Kind::Atom,
            },
            // `\A`, `\z` and every word boundary: the empty text, a wider language.
            _ => Piece::empty(),
        }),
        HirKind::Repetition(rep) => {
            if rep.max == Some(0) {
                return Some(Piece::empty());
            }
            let sub = match write(&rep.sub, true, widen_all) {
                None if rep.min == 0 => return Some(Piece::empty()),
                None => return None,
                Some(sub) => sub,
            };
            if sub.kind == Kind::Empty {
                return Some(Piece::empty());
            }
            let (mut min, mut max) = (rep.min, rep.max);
            if min == 1 && max == Some(1) {
                return Some(sub);
            }
            let counted = !matches!((min, max), (0 | 1, None) | (0, Some(1)));
            let big = min > MAX_COUNT || max.is_some_and(|max| max > MAX_COUNT);
            if counted && (widen_all || big) {
                min = min.min(1);
                max = None;
            }
            let mut text = sub.grouped();
            match (min, max) {
                (0, None) => text.push('*'),
                (1, None) => text.push('+'),
                (0, Some(1)) => text.push('?'),
                (min, None) => {
                    let _ = write!(text, "{{{min},}}");
                }
                (min, Some(max)) if max == min => {
                    let _ = write!(text, "{{{min}}}");
                }
                (min, Some(max)) => {
                    let _ = write!(text, "{{{min},{max}}}");
                }
            }
            Some(Piece {
                text,
                kind: Kind::Sequence,
            })
        }
        HirKind::Capture(capture) => write(&capture.sub, repeated, widen_all),
        HirKind::Concat(subs) => {
            let mut items = Vec::new();
            for sub in subs {
                let piece = write(sub, repeated, widen_all)?;
                if piece.kind != Kind::Empty {
                    items.push(piece);
                }
            }
            Some(match items.len() {
                0 => Piece::empty(),
                1 => items.pop()?,
                _ => Piece {
                    text: items
                        .iter()
                        .map(|item| match item.kind {
                            Kind::Alternation => format!("(?:{})", item.text),
                            _ => item.text.clone(),
                        })
                        .collect(),
                    kind: Kind::Sequence,
                },
            })
        }
        HirKind::Alternation(subs) => {
            let mut branches: Vec<String> = Vec::new();
            let mut optional = false;
            let mut any = false;
            for sub in subs {
                match write(sub, repeated, widen_all) {
                    None => {}
                    Some(piece) => {
                        any = true;
                        if piece.kind == Kind::Empty {
                            optional = true;
                        } else if !branches.contains(&piece.text) {
                            branches.push(piece.text);
                        }
                    }
                }
            }
            if !any {
                return None;
            }
            let one = match branches.len() {
                0 => return Some(Piece::empty()),
                1 => Piece {
                    text: branches.pop()?,
                    // A branch may be anything: grouped wherever it goes.
                    kind: Kind::Alternation,
                },
                _ => Piece {
                    text: branches.join("|"),
                    kind: Kind::Alternation,
                },
            };
            Some(if optional {
                Piece {
                    text: format!("(?:{})?", one.text),
                    kind: Kind::Sequence,
                }
            } else {
                one
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(text: &str, ci: bool) -> Option<Utf8Regex> {
        utf8_regex(&GrepPattern::new(text, false, ci).unwrap())
    }

    fn rust(text: &str) -> String {
        match of(text, false) {
            Some(Utf8Regex::Pattern(rust)) => rust,
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn classes_are_written_out_as_ranges() {
        assert!(rust(r"\d{4}-\d{2}").starts_with("[0-9"), "{}", rust(r"\d"));
        assert!(rust(r"\d").contains(r"\x{660}-\x{669}"), "Unicode digits");
        assert_eq!(rust("[é-ü]"), r"[\x{E9}-\x{FC}]");
        assert_eq!(rust("日本"), r"\x{65E5}\x{672C}");
        // The line feed is no line's: left out of every class.
        assert_eq!(rust("[^a]"), r"[\x{0}-\x{9}\x{B}-\x{60}b-\x{10FFFF}]");
        assert_eq!(rust("(?-u:[^a])"), r"(?-u:[\x00-\x09\x0B-\x60\x62-\xFF])");
        assert_eq!(rust(r"(?-u:\xFF)x"), r"(?-u:\xFF\x78)");
        assert_eq!(rust(r"(?-u:\xFF)+"), r"(?-u:\xFF)+");
    }

    #[test]
    fn case_is_spelled_out_so_rg_needs_no_flag() {
        match of("straße", true) {
            Some(Utf8Regex::Pattern(rust)) => {
                assert!(!rust.contains("(?i"), "{rust}");
                assert!(rust.contains(r"\x{1E9E}"), "ẞ folds with ß: {rust}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(rust("(?i)é"), r"[\x{C9}\x{E9}]");
    }

    #[test]
    fn anchors_stay_boundaries_widen_and_big_counts_widen() {
        assert_eq!(rust("^ab$"), "(?m:^)ab(?m:$)");
        assert_eq!(rust(r"\bfoo\B"), "foo");
        assert_eq!(rust(r"\Afoo\z"), "foo");
        assert_eq!(rust(r"(^a)*b"), "a*b");
        assert_eq!(rust(r"(?:a|bb)c"), "(?:a|bb)c");
        assert_eq!(rust(r"a(bc|)d"), "a(?:bc)?d");
        assert_eq!(rust("x{300}"), "x+");
        assert_eq!(rust("(ab){2,3}"), "(?:ab){2,3}");
        assert_eq!(rust("(?:a{50}){50}b"), "(?:a+)+b");
        assert_eq!(of(r"\b", false), None);
        assert_eq!(of("é?", false), None);
        assert_eq!(of("[a&&b]", false), Some(Utf8Regex::Never));
        assert_eq!(rust("a[a&&b]?c|[b&&c]"), "ac");
    }
}

/// The regexes against the real `rg`: [`NOT_CLEAN`] names exactly the lines that are not
/// clean, and for random patterns and random clean lines (non-ASCII letters, digits, case
/// pairs, emoji), every line the matcher matches is matched by `rg` given the rewriting.
#[cfg(test)]
mod against_rg {
    use super::*;
    use std::process::Command;

    use crate::storage::backend::shell::line_regex::against_the_tools::{
        Dice, numbered_lines, pattern,
    };

    /// The numbers (from 1) of the lines of `file` that `rg` matches with `patterns` (one a
    /// line), `None` when there is no `rg` here.
    fn rg_lines(
        patterns: &[&str],
        dir: &std::path::Path,
        file: &std::path::Path,
    ) -> Option<Vec<usize>> {
        let list = dir.join("patterns");
        std::fs::write(&list, patterns.join("\n") + "\n").unwrap();
        let mut command = Command::new("rg");
        command
            .args(["--no-config", "-a", "-E", "none", "-n", "-f"])
            .arg(&list)
            .arg("--")
            .arg(file);
        numbered_lines(command)
    }

    fn rg_required() {
        let required =
            std::env::var("MOUNTFS_REQUIRE_SHELL_TARGETS").is_ok_and(|v| !v.is_empty() && v != "0");
        assert!(
            !required,
            "rg is not installed (apt-get install -y ripgrep); MOUNTFS_REQUIRE_SHELL_TARGETS is set"
        );
    }

    #[test]
    fn not_clean_names_exactly_the_lines_that_are_not_clean_utf8() {
        let dir = tempfile::tempdir().unwrap();
        let mut dice = Dice(0x2545_f491_4f6c_dd1d);
        // Bytes that make and break UTF-8: ASCII, every lead kind, continuations, bytes no
        // UTF-8 has, NUL, `\r`, a BOM's.
        const BYTES: &[u8] = &[
            b'a', b' ', b'\t', 0, b'\r', 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBB, 0xBF, 0xC0,
            0xC1, 0xC2, 0xC3, 0xDF, 0xE0, 0xE1, 0xEC, 0xED, 0xEE, 0xEF, 0xF0, 0xF1, 0xF3, 0xF4,
            0xF5, 0xFE, 0xFF,
        ];
        let mut lines: Vec<Vec<u8>> = (0..6000)
            .map(|_| {
                let len = dice.roll(7);
                (0..len).map(|_| BYTES[dice.roll(BYTES.len())]).collect()
            })
            .collect();
        // Valid sequences of every length, alone and cut short.
        for valid in [
            "é",
            "日",
            "😀",
            "\u{10FFFF}",
            "\u{D7FF}",
            "\u{E000}",
            "\u{FEFF}",
            "\u{FFFF}",
        ] {
            let bytes = valid.as_bytes();
            lines.push(bytes.to_vec());
            lines.push([b"x", bytes, b"y"].concat());
            for cut in 1..bytes.len() {
                lines.push(bytes[..cut].to_vec());
                lines.push([&bytes[..cut], b"z"].concat());
            }
        }
        // Surrogates and overlongs.
        for bad in [
            &b"\xED\xA0\x80"[..],
            b"\xC0\xAF",
            b"\xE0\x80\xAF",
            b"\xF0\x80\x80\xAF",
            b"\xF4\x90\x80\x80",
        ] {
            lines.push(bad.to_vec());
        }
        let file = dir.path().join("lines");
        let mut content = Vec::new();
        for line in &lines {
            content.extend_from_slice(line);
            content.push(b'\n');
        }
        std::fs::write(&file, &content).unwrap();
        let Some(got) = rg_lines(&[NOT_CLEAN], dir.path(), &file) else {
            rg_required();
            return;
        };
        let want: Vec<usize> = lines
            .iter()
            .enumerate()
            .filter(|(_, line)| {
                std::str::from_utf8(line).is_err()
                    || line.contains(&0)
                    || line.contains(&b'\r')
                    || line.windows(3).any(|w| w == b"\xEF\xBB\xBF")
            })
            .map(|(i, _)| i + 1)
            .collect();
        assert!(
            want.len() > 1000 && want.len() < lines.len() - 500,
            "{}",
            want.len()
        );
        assert_eq!(got, want);
    }

    const ATOMS: &[&str] = &[
        "a",
        "k",
        "K",
        "s",
        "é",
        "É",
        "ß",
        "日",
        "😀",
        "0",
        "٣",
        " ",
        r"\t",
        "-",
        ".",
        "[^a]",
        r"\d",
        r"\w",
        r"\W",
        r"\s",
        r"\p{L}",
        r"\p{Greek}",
        "[é-ü]",
        "[^é]",
        "[[:alpha:]]",
        r"(?-u:\w)",
        r"(?-u:.)",
        r"(?-u:\xC3)",
        r"\b",
        r"\B",
        "^",
        "$",
        r"\A",
        r"\z",
        "straße",
    ];

    fn line(dice: &mut Dice) -> String {
        const CHARS: &[&str] = &[
            "a", "k", "K", "s", "S", "ſ", "K", "é", "É", "ü", "ß", "ẞ", "日", "本", "😀", "0", "٣",
            " ", "\t", "-", "α", "Σ", "ς", "\u{a0}", "\u{2028}",
        ];
        let len = dice.roll(7);
        (0..len).map(|_| dice.pick(CHARS)).collect()
    }

    #[test]
    fn every_matching_clean_line_is_matched_by_rg() {
        let dir = tempfile::tempdir().unwrap();
        let mut dice = Dice(0x9e37_79b9_7f4a_7c15);
        let mut lines: Vec<String> = (0..1500).map(|_| line(&mut dice)).collect();
        lines.extend(["straße", "STRASSE", "STRAẞE", "café", "日本語", "  "].map(str::to_owned));
        let file = dir.path().join("lines");
        std::fs::write(&file, lines.join("\n") + "\n").unwrap();
        const FIXED: &[(&str, bool)] = &[
            (r"\p{L}+", false),
            ("[é-ü]", false),
            (r"\w+", false),
            ("É", true),
            ("(?i)straße", false),
            (r"^\w{2,}$", false),
            (r"\d", false),
            (r"(?i)k\s", false),
            (r"[^\x00-\x7F]", false),
            (r"\w+ing\b", false),
        ];
        let (mut checked, mut exact) = (0, 0);
        for round in 0..150 + FIXED.len() {
            let (text, ci) = match FIXED.get(round) {
                Some((fixed, ci)) => ((*fixed).to_owned(), *ci),
                None => (pattern(&mut dice, ATOMS, 1 + round % 4), round % 5 == 0),
            };
            let Ok(compiled) = GrepPattern::new(&text, false, ci) else {
                continue;
            };
            let want: Vec<usize> = lines
                .iter()
                .enumerate()
                .filter(|(_, l)| compiled.is_match(l))
                .map(|(i, _)| i + 1)
                .collect();
            let rust = match utf8_regex(&compiled) {
                None => continue,
                Some(Utf8Regex::Never) => {
                    assert!(want.is_empty(), "{text}: never, yet {want:?}");
                    continue;
                }
                Some(Utf8Regex::Pattern(rust)) => rust,
            };
            let Some(got) = rg_lines(&[&rust], dir.path(), &file) else {
                rg_required();
                return;
            };
            checked += 1;
            for n in &want {
                assert!(
                    got.contains(n),
                    "{text} (ci {ci}) as {rust:?} misses line {n}: {:?}",
                    lines[n - 1]
                );
            }
            exact += usize::from(got == want);
        }
        assert!(checked > 100, "{checked}");
        // Only look-arounds widen: most answers are exactly the matcher's.
        assert!(exact * 10 > checked * 7, "{exact} of {checked}");
    }
}
