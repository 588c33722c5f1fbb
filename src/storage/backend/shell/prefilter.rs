//! What a shell mount asks the target's own search tool for before it reads any file: the
//! files that may match a grep (issue 27). The answer must hold every file the exact search
//! (the crate's matcher, run here over the files read back, decoding them as a disk mount
//! does) would report, and preferably few more; [`Plan::Everything`] means every file is read.
//!
//! The target's tools see bytes, the matcher sees decoded text: a file may be UTF-8, a legacy
//! encoding guessed from its head (windows-1252, Shift_JIS, GBK, …) or UTF-16 with a BOM. So
//! the target is never given the pattern itself (`caf.` matches `café` decoded from Latin-1,
//! where `rg`'s `.` sees the invalid UTF-8 byte `E9`), nor any non-ASCII text (`é` is one
//! byte in Latin-1, two in UTF-8). It is given ASCII texts only, as fixed strings: every
//! encoding the matcher decodes, but UTF-16, writes an ASCII character as that very byte and
//! decodes no ASCII character from other bytes, so a decoded line holding an ASCII text holds
//! it in the file's bytes too.
//!
//! The texts: the literals every match must begin with, and those it must end with
//! ([`crate::storage::store::plan::required_literals`], `regex-syntax`'s extraction, as the index
//! planner uses it); of each literal its longest run of ASCII characters (no NUL, no line
//! break). A set is usable when every one of its literals has such a run; the set whose
//! shortest run is longest is asked for (any of its texts), and with no usable set every file
//! is read. ASCII letters are compared without case when the pattern ignores case (in the C
//! locale the script runs in, only ASCII letters fold; `k` also matching the Kelvin sign is a
//! literal of its own in the set).
//!
//! UTF-16 files hold no ASCII text as contiguous bytes: `rg`'s encoding detection transcodes
//! a file with a BOM before searching, and for `grep -F` the backend adds the two UTF-16 BOMs
//! (`FF FE`, `FE FF`) as texts of their own, so every file holding one is a candidate.
//!
//! A pattern without such text (`\d{4}-\d{2}`) is narrowed by `line_regex` instead, which
//! also runs before these texts for any pattern: it judges the plain ASCII files by the
//! pattern itself, and these texts then narrow the files it cannot judge.

use crate::ground::search::GrepPattern;
use crate::storage::store::plan::required_literals;

/// How the target narrows a search.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Plan {
    /// Files holding any of these ASCII texts (`rg -F` / `grep -F`, one text a line).
    Texts {
        /// Non-empty ASCII, without NUL or line breaks.
        texts: Vec<String>,
        /// Compare ASCII letters without case.
        fold_case: bool,
    },
    /// Nothing can narrow it: every file is a candidate.
    Everything,
}

/// The plan for `pattern` (see the module doc).
pub(super) fn plan(pattern: &GrepPattern) -> Plan {
    let Some(required) = required_literals(pattern) else {
        return Plan::Everything;
    };
    let best = required
        .sets
        .iter()
        .filter_map(|set| set.iter().map(|l| longest_ascii_run(l)).collect())
        .max_by_key(|texts: &Vec<String>| texts.iter().map(String::len).min().unwrap_or(0));
    match best {
        Some(mut texts) if !texts.is_empty() => {
            texts.sort();
            texts.dedup();
            Plan::Texts {
                texts,
                fold_case: required.fold_case,
            }
        }
        _ => Plan::Everything,
    }
}

/// The longest run of ASCII characters of `literal` other than NUL and line breaks, `None`
/// when it has none.
fn longest_ascii_run(literal: &str) -> Option<String> {
    literal
        .split(|c: char| !c.is_ascii() || matches!(c, '\0' | '\n' | '\r'))
        .max_by_key(|run| run.len())
        .filter(|run| !run.is_empty())
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan_of(text: &str, literal: bool, ci: bool) -> Plan {
        plan(&GrepPattern::new(text, literal, ci).unwrap())
    }

    /// The plan for the regex `pattern`, case kept.
    fn regex(pattern: &str) -> Plan {
        plan_of(pattern, false, false)
    }

    /// The plan for the literal `text`, case kept.
    fn literal(text: &str) -> Plan {
        plan_of(text, true, false)
    }

    fn texts(list: &[&str], fold_case: bool) -> Plan {
        Plan::Texts {
            texts: list.iter().map(|t| (*t).to_owned()).collect(),
            fold_case,
        }
    }

    #[test]
    fn a_regex_narrows_by_a_required_literal() {
        assert_eq!(regex("fn main\\(\\)"), texts(&["fn main()"], false));
        assert_eq!(regex("unsafe\\s+impl"), texts(&["unsafe"], false));
        assert_eq!(
            regex("colou?r_name"),
            texts(&["color_name", "colour_name"], false)
        );
        assert_eq!(regex("(foo|barbaz)\\("), texts(&["barbaz(", "foo("], false));
        for nothing in ["a|\\d", "\\d+", ".", "[a-z]+\\d", "é+"] {
            assert_eq!(regex(nothing), Plan::Everything, "{nothing}");
        }
    }

    #[test]
    fn only_ascii_text_is_asked_for() {
        // The pattern itself never goes: `.` and `\w` would not match a Latin-1 byte.
        assert_eq!(regex("caf."), texts(&["caf"], false));
        assert_eq!(regex("cr\\w+me"), texts(&["me"], false));
        assert_eq!(literal("café"), texts(&["caf"], false));
        assert_eq!(literal("été"), texts(&["t"], false));
        assert_eq!(literal("日本語"), Plan::Everything);
    }

    #[test]
    fn ignoring_case_folds_ascii_and_keeps_the_other_variants_apart() {
        assert_eq!(plan_of("CAFÉ", true, true), texts(&["caf"], true));
        // `k` is also the Kelvin sign: a match may hold `elvin` only.
        assert_eq!(
            plan_of("kelvin", true, true),
            texts(&["elvin", "kelvin"], true)
        );
        assert_eq!(regex("(?i)hello"), texts(&["hello"], true));
    }

    #[test]
    fn a_literal_never_sends_a_line_break_or_a_nul() {
        assert_eq!(literal("ab\0longer"), texts(&["longer"], false));
        assert_eq!(literal("$(touch x)"), texts(&["$(touch x)"], false));
    }
}
