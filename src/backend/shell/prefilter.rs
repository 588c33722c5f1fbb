//! What a shell mount asks the target's own search tool for before it reads any file: the
//! files that may match a grep (issue 27). The answer must hold every file the exact search
//! (the crate's matcher, run here over the files read back) would report, and preferably few
//! more; an empty plan ([`Plan::Everything`]) means every file is read.
//!
//! With `rg` on the target the pattern goes as it is: `rg` speaks the same regular expression
//! syntax (it is built on the same crates). Without it, `grep -F` looks for one literal the
//! pattern requires on every matching line: the pattern itself when `literal`, else the longest
//! run of plain characters at the top level of a regex with no alternation (a character
//! followed by `?`, `*` or `{` is optional and ends the run without it).

use crate::search::GrepPattern;

/// How the target narrows a search.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Plan {
    /// `rg -f` with this pattern text (`-F` when `literal`, `-i` when case-insensitive).
    Rg {
        /// The pattern as given.
        pattern: String,
        /// Search it as written.
        literal: bool,
        /// Ignore case.
        case_insensitive: bool,
    },
    /// `grep -F -f` with this required literal.
    Grep {
        /// A text every matching line holds.
        literal: String,
        /// Ignore (ASCII) case.
        case_insensitive: bool,
    },
    /// Nothing can narrow it: every file is a candidate.
    Everything,
}

/// The plan for `pattern` on a target that has `rg` or not.
pub(super) fn plan(pattern: &GrepPattern, rg: bool) -> Plan {
    let text = &pattern.text;
    if rg && !text.contains('\n') && !text.is_empty() {
        return Plan::Rg {
            pattern: text.clone(),
            literal: pattern.literal,
            case_insensitive: pattern.case_insensitive,
        };
    }
    let literal = if pattern.literal {
        // A line never holds a newline: any one line of the literal is required.
        text.split('\n')
            .max_by_key(|part| part.len())
            .unwrap_or_default()
            .to_owned()
    } else {
        required_literal(text).unwrap_or_default()
    };
    // Case folding beyond ASCII differs between the target's `grep` (C locale) and the
    // matcher: only an ASCII literal narrows a case-insensitive search.
    if literal.is_empty() || (pattern.case_insensitive && !literal.is_ascii()) {
        return Plan::Everything;
    }
    Plan::Grep {
        literal,
        case_insensitive: pattern.case_insensitive,
    }
}

/// The longest run of plain characters every match of the regex `text` holds, if one is found.
fn required_literal(text: &str) -> Option<String> {
    if text.contains('|') || text.contains("(?") {
        return None;
    }
    let mut best = String::new();
    let mut run = String::new();
    let mut depth = 0usize;
    let mut in_class = false;
    let mut chars = text.chars().peekable();
    let finish = |run: &mut String, best: &mut String| {
        if run.len() > best.len() {
            *best = std::mem::take(run);
        } else {
            run.clear();
        }
    };
    while let Some(c) = chars.next() {
        if in_class {
            match c {
                '\\' => {
                    chars.next();
                }
                ']' => in_class = false,
                _ => {}
            }
            continue;
        }
        let plain = match c {
            '\\' => match chars.next() {
                Some(e) if e.is_ascii_punctuation() => Some(e),
                _ => None,
            },
            '[' => {
                in_class = true;
                None
            }
            '(' => {
                depth += 1;
                None
            }
            ')' => {
                depth = depth.saturating_sub(1);
                // A group may be optional: what follows it is still required, not the group.
                if matches!(chars.peek(), Some('?' | '*' | '{' | '+')) {
                    chars.next();
                }
                None
            }
            '.' | '^' | '$' | '+' => None,
            '?' | '*' | '{' => {
                // The character before is optional: drop it from the run.
                run.pop();
                if c == '{' {
                    for skipped in chars.by_ref() {
                        if skipped == '}' {
                            break;
                        }
                    }
                }
                finish(&mut run, &mut best);
                continue;
            }
            other => Some(other),
        };
        match plain {
            Some(ch) if depth == 0 && !matches!(chars.peek(), Some('?' | '*' | '{')) => {
                run.push(ch)
            }
            Some(_) if depth == 0 => {
                // Optional: ends the run without it.
                finish(&mut run, &mut best);
            }
            _ => finish(&mut run, &mut best),
        }
    }
    finish(&mut run, &mut best);
    (!best.is_empty()).then_some(best)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan_of(text: &str, literal: bool, ci: bool, rg: bool) -> Plan {
        plan(&GrepPattern::new(text, literal, ci).unwrap(), rg)
    }

    #[test]
    fn rg_takes_the_pattern_as_it_is() {
        assert_eq!(
            plan_of("fn \\w+\\(", false, true, true),
            Plan::Rg {
                pattern: "fn \\w+\\(".into(),
                literal: false,
                case_insensitive: true
            }
        );
    }

    #[test]
    fn grep_gets_the_longest_required_literal() {
        let grep = |t: &str| match plan_of(t, false, false, false) {
            Plan::Grep { literal, .. } => Some(literal),
            _ => None,
        };
        assert_eq!(grep("fn main\\(\\)"), Some("fn main()".into()));
        assert_eq!(grep("ab*cdef"), Some("cdef".into()));
        assert_eq!(grep("colou?r_name"), Some("r_name".into()));
        assert_eq!(grep("x{2}hello"), Some("hello".into()));
        assert_eq!(grep("(abc)?defg"), Some("defg".into()));
        assert_eq!(grep("[abc]+ zz"), Some(" zz".into()));
        assert_eq!(grep("a|b"), None);
        assert_eq!(grep("(?i)abc"), None);
        assert_eq!(grep("\\d+"), None);
    }

    #[test]
    fn a_literal_keeps_its_longest_line_and_case_folding_stays_ascii() {
        assert_eq!(
            plan_of("ab\nlonger", true, false, true),
            Plan::Grep {
                literal: "longer".into(),
                case_insensitive: false
            }
        );
        assert_eq!(plan_of("émile", true, true, false), Plan::Everything);
        assert_eq!(
            plan_of("$(touch x)", true, false, false),
            Plan::Grep {
                literal: "$(touch x)".into(),
                case_insensitive: false
            }
        );
    }
}
