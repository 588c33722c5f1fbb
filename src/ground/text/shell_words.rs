//! Splits a command line into words as a POSIX shell would, without expanding anything: the
//! `COMMAND` of `--shell NAME=COMMAND` (issue 27) is run directly, never through a shell on
//! this machine, so `$HOME`, `*` or `$(…)` stay literal text.
//!
//! Rules (POSIX 2.2 quoting, 2.3 token recognition, less everything that expands): blanks
//! (space, tab, newline) separate words; `'…'` keeps every character as is; `"…"` keeps every
//! character except that a backslash before `$`, `` ` ``, `"`, `\` or a newline escapes it; an
//! unquoted backslash escapes the next character (a backslash-newline pair disappears). Adjacent
//! quoted and unquoted parts join into one word; `''` alone is an empty word.

use thiserror::Error;

/// Why a command line could not be split.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SplitError {
    /// A quote opened and never closed.
    #[error("unterminated {0} quote: close it, or escape it with a backslash")]
    Unterminated(&'static str),
    /// A backslash as the very last character.
    #[error("a trailing backslash escapes nothing: remove it or escape it as \\\\")]
    TrailingBackslash,
}

/// The words of `line`.
pub fn split(line: &str) -> Result<Vec<String>, SplitError> {
    let mut words = Vec::new();
    // The word being built; `None` between words (so that `''` still makes an empty word).
    let mut word: Option<String> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' | '\n' => {
                if let Some(done) = word.take() {
                    words.push(done);
                }
            }
            '\'' => {
                let current = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(other) => current.push(other),
                        None => return Err(SplitError::Unterminated("single")),
                    }
                }
            }
            '"' => {
                let current = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some('\n') => {}
                            Some(escaped @ ('$' | '`' | '"' | '\\')) => current.push(escaped),
                            Some(other) => {
                                current.push('\\');
                                current.push(other);
                            }
                            None => return Err(SplitError::Unterminated("double")),
                        },
                        Some(other) => current.push(other),
                        None => return Err(SplitError::Unterminated("double")),
                    }
                }
            }
            '\\' => match chars.next() {
                // A backslash-newline is a line continuation: it joins, adding nothing.
                Some('\n') => {}
                Some(escaped) => word.get_or_insert_with(String::new).push(escaped),
                None => return Err(SplitError::TrailingBackslash),
            },
            other => word.get_or_insert_with(String::new).push(other),
        }
    }
    if let Some(done) = word {
        words.push(done);
    }
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<String> {
        split(line).unwrap()
    }

    #[test]
    fn blanks_separate_words_and_runs_of_them_count_once() {
        assert_eq!(
            words("  ssh  -T\tdev@host \n sh "),
            ["ssh", "-T", "dev@host", "sh"]
        );
        assert!(words("   ").is_empty());
    }

    #[test]
    fn quotes_keep_blanks_and_join_with_their_neighbours() {
        assert_eq!(words("a' b 'c"), ["a b c"]);
        assert_eq!(words(r#"sh -c "echo  'x'""#), ["sh", "-c", "echo  'x'"]);
        assert_eq!(words("x '' y"), ["x", "", "y"]);
        assert_eq!(words(r#""""#), [""]);
    }

    #[test]
    fn nothing_is_expanded() {
        assert_eq!(
            words("echo $HOME * $(touch x) `id` ~"),
            ["echo", "$HOME", "*", "$(touch", "x)", "`id`", "~"]
        );
        assert_eq!(words("'$HOME'"), ["$HOME"]);
    }

    #[test]
    fn backslashes_escape_as_posix_says() {
        assert_eq!(words(r"a\ b"), ["a b"]);
        assert_eq!(words(r"a\'b"), ["a'b"]);
        assert_eq!(words("a\\\nb"), ["ab"]);
        // In double quotes only $ ` " \ and newline are escaped; other backslashes stay.
        assert_eq!(words(r#""\$ \" \\ \n""#), [r#"$ " \ \n"#]);
        // In single quotes nothing is.
        assert_eq!(words(r"'a\b'"), [r"a\b"]);
    }

    #[test]
    fn unclosed_quotes_and_a_trailing_backslash_are_errors() {
        assert_eq!(split("a 'b"), Err(SplitError::Unterminated("single")));
        assert_eq!(split("a \"b"), Err(SplitError::Unterminated("double")));
        assert_eq!(split("a \\"), Err(SplitError::TrailingBackslash));
    }
}
