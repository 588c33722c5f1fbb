//! Compiled search patterns shared by every backend: the one glob matcher (used by `glob` and by
//! `grep`'s file filter, CONTRACT §4) and the grep pattern, plus the in-memory grep over a `&str`
//! that the memory and store backends share. (The disk backend streams through ripgrep's crates
//! with the same pattern text and the same matcher.)

use globset::{Glob, GlobBuilder};
use regex::{Regex, RegexBuilder};
use thiserror::Error;

use crate::backend::{GrepCollect, GrepFile, WindowedLines, kept_line_text};
use crate::limits::{DEFAULT_GREP_MAX_LINE_BYTES, RegexLimits};
use crate::path::VirtualPath;
use crate::text::numbered::split_lines;

/// A pattern that could not be compiled. Display is the agent-facing text.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PatternError {
    /// A bad glob.
    #[error(
        "Error: Invalid glob pattern '{pattern}': {reason}. Use *, ?, [abc], {{a,b}} and ** (e.g. **/*.rs)"
    )]
    Glob {
        /// The pattern as given.
        pattern: String,
        /// The parser's complaint.
        reason: String,
    },
    /// A regular expression whose compiled form exceeds `--regex-size-limit`.
    #[error(
        "Error: Regex pattern is too large: compiled, it exceeds the limit of {limit} bytes (--regex-size-limit). Use a simpler pattern (smaller repetition counts such as {{1000}}, fewer alternatives, ASCII classes like [0-9] instead of \\d), or set literal=true to search for the text as written"
    )]
    TooLarge {
        /// The bound.
        limit: usize,
    },
    /// A bad regular expression.
    #[error(
        "Error: Invalid regex pattern: {reason}\nEscape special characters (e.g. \\( or \\.), or set literal=true to search for the text as written"
    )]
    Regex {
        /// The parser's complaint.
        reason: String,
    },
}

/// A compiled glob (see CONTRACT §4): `*`, `?`, `[…]`, `{a,b}`, `**`. A pattern without `/`
/// matches the file name at any depth; one with `/` matches the path relative to the searched
/// directory. `*` never crosses `/`; `**` does.
#[derive(Debug, Clone)]
pub struct GlobMatcher {
    pattern: String,
    matcher: globset::GlobMatcher,
    by_name: bool,
    /// Prepended to relative paths before matching: the composite uses it when a mount lies
    /// below the searched directory (`mnt/` + path inside the mount).
    prefix: String,
}

impl GlobMatcher {
    /// Compiles a pattern.
    pub fn new(pattern: &str) -> Result<Self, PatternError> {
        let trimmed = pattern.trim_start_matches('/');
        let by_name = !trimmed.contains('/');
        let glob: Glob = GlobBuilder::new(trimmed)
            .literal_separator(true)
            .backslash_escape(true)
            .empty_alternates(true)
            .build()
            .map_err(|e| PatternError::Glob {
                pattern: pattern.to_owned(),
                reason: e.kind().to_string(),
            })?;
        Ok(Self {
            pattern: pattern.to_owned(),
            matcher: glob.compile_matcher(),
            by_name,
            prefix: String::new(),
        })
    }

    /// The pattern as given.
    pub fn pattern(&self) -> &str {
        &self.pattern
    }

    /// The same matcher for paths that sit under `prefix` (relative, no leading `/`).
    pub fn with_prefix(&self, prefix: &str) -> Self {
        let mut clone = self.clone();
        let prefix = prefix.trim_matches('/');
        if !prefix.is_empty() {
            clone.prefix = format!("{}{prefix}/", self.prefix);
        }
        clone
    }

    /// Whether a file at `relative` (relative to the searched directory, no leading `/`)
    /// matches.
    pub fn matches_relative(&self, relative: &str) -> bool {
        if self.by_name {
            let name = relative.rsplit('/').next().unwrap_or(relative);
            return self.matcher.is_match(name);
        }
        if self.prefix.is_empty() {
            self.matcher.is_match(relative)
        } else {
            self.matcher.is_match(format!("{}{relative}", self.prefix))
        }
    }

    /// Whether `path` matches relative to `dir`. A file searched as itself (`path == dir`) is
    /// matched by its name.
    pub fn matches_path(&self, path: &VirtualPath, dir: &VirtualPath) -> bool {
        match path.relative_to(dir) {
            Some("") => path.file_name().is_some_and(|n| self.matches_relative(n)),
            Some(rel) => self.matches_relative(rel),
            None => false,
        }
    }
}

/// A compiled grep pattern: a regular expression in Rust `regex` syntax (linear time), or the
/// text as written when `literal`.
#[derive(Debug, Clone)]
pub struct GrepPattern {
    /// The pattern text given by the agent.
    pub text: String,
    /// Search the text as written.
    pub literal: bool,
    /// Ignore case.
    pub case_insensitive: bool,
    /// The compile and lazy-DFA bounds, applied by every engine that compiles the pattern.
    pub limits: RegexLimits,
    /// The longest line a search holds (`--grep-max-line-bytes`): a file with a longer line
    /// is reported as skipped, with [`GrepPattern::long_line_reason`].
    pub max_line_bytes: u64,
    regex: Regex,
}

impl GrepPattern {
    /// Compiles the pattern under the default bounds.
    pub fn new(text: &str, literal: bool, case_insensitive: bool) -> Result<Self, PatternError> {
        Self::with_limits(text, literal, case_insensitive, RegexLimits::default())
    }

    /// Compiles the pattern; its compiled program may not exceed `limits.size_limit`
    /// ([`PatternError::TooLarge`]) and its lazy DFA caches at most `limits.dfa_size_limit`.
    pub fn with_limits(
        text: &str,
        literal: bool,
        case_insensitive: bool,
        limits: RegexLimits,
    ) -> Result<Self, PatternError> {
        let source = if literal {
            regex::escape(text)
        } else {
            text.to_owned()
        };
        let regex = RegexBuilder::new(&source)
            .case_insensitive(case_insensitive)
            .size_limit(limits.size_limit)
            .dfa_size_limit(limits.dfa_size_limit)
            .build()
            .map_err(|e| match e {
                regex::Error::CompiledTooBig(limit) => PatternError::TooLarge { limit },
                other => PatternError::Regex {
                    reason: other.to_string(),
                },
            })?;
        Ok(Self {
            text: text.to_owned(),
            literal,
            case_insensitive,
            limits,
            max_line_bytes: DEFAULT_GREP_MAX_LINE_BYTES,
            regex,
        })
    }

    /// The same pattern with another line bound (`--grep-max-line-bytes`).
    pub fn with_max_line_bytes(mut self, max_line_bytes: u64) -> Self {
        self.max_line_bytes = max_line_bytes;
        self
    }

    /// Why a file with a line over [`GrepPattern::max_line_bytes`] is skipped.
    pub fn long_line_reason(&self) -> String {
        format!(
            "a line longer than {} bytes (--grep-max-line-bytes); read it in windows with read_file",
            self.max_line_bytes
        )
    }

    /// The regex source as compiled (escaped when literal), for engines that compile their own.
    pub fn regex_source(&self) -> String {
        if self.literal {
            regex::escape(&self.text)
        } else {
            self.text.clone()
        }
    }

    /// Whether one line matches.
    pub fn is_match(&self, line: &str) -> bool {
        self.regex.is_match(line)
    }
}

/// Greps one in-memory text (a leading BOM ignored): `None` when no line matches. A text with
/// a line over the pattern's `max_line_bytes` is reported as skipped, as on disk.
pub fn grep_text(
    path: &VirtualPath,
    text: &str,
    pattern: &GrepPattern,
    collect: GrepCollect,
) -> Option<GrepFile> {
    // A UTF-8 BOM is not text: read_file hides it, and so does ripgrep's searcher on disk.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let lines = split_lines(text);
    if lines
        .iter()
        .any(|l| l.len() as u64 > pattern.max_line_bytes)
    {
        return Some(GrepFile::skipped(path.clone(), pattern.long_line_reason()));
    }
    let found = |match_count: usize| GrepFile {
        path: path.clone(),
        match_count,
        lines: Vec::new(),
        entries: 0,
        lines_from: 0,
        skipped: None,
    };
    match collect {
        GrepCollect::Files => lines.iter().any(|l| pattern.is_match(l)).then(|| found(1)),
        GrepCollect::Count => {
            let count = lines.iter().filter(|l| pattern.is_match(l)).count();
            (count > 0).then(|| found(count))
        }
        GrepCollect::Lines { context, window } => {
            let hits: Vec<usize> = lines
                .iter()
                .enumerate()
                .filter(|(_, l)| pattern.is_match(l))
                .map(|(i, _)| i)
                .collect();
            if hits.is_empty() {
                return None;
            }
            let mut reported = WindowedLines::new(window);
            let mut next_unreported = 0usize;
            for (k, &hit) in hits.iter().enumerate() {
                let from = hit.saturating_sub(context).max(next_unreported);
                let to = hit.saturating_add(context).min(lines.len() - 1);
                for (i, text) in lines.iter().enumerate().take(to + 1).skip(from) {
                    let is_match = i == hit || hits[k..].binary_search(&i).is_ok();
                    reported.push(i + 1, is_match, || kept_line_text(text));
                }
                next_unreported = to + 1;
            }
            let mut file = found(hits.len());
            file.entries = reported.entries;
            file.lines_from = window.skip.min(reported.entries);
            file.lines = reported.lines;
            Some(file)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_without_slash_matches_the_name_at_any_depth() {
        let m = GlobMatcher::new("*.rs").unwrap();
        assert!(m.matches_relative("a.rs"));
        assert!(m.matches_relative("src/deep/a.rs"));
        assert!(!m.matches_relative("src/a.rsx"));
    }

    #[test]
    fn pattern_with_slash_matches_the_relative_path() {
        let m = GlobMatcher::new("src/*.rs").unwrap();
        assert!(m.matches_relative("src/a.rs"));
        assert!(!m.matches_relative("src/x/a.rs"));
        let m = GlobMatcher::new("**/*.{rs,toml}").unwrap();
        assert!(m.matches_relative("Cargo.toml"));
        assert!(m.matches_relative("a/b/c.rs"));
        let m = GlobMatcher::new("src/**").unwrap();
        assert!(m.matches_relative("src/a/b"));
    }

    #[test]
    fn prefix_places_a_nested_mount_under_the_search_root() {
        let m = GlobMatcher::new("mem/*.txt").unwrap().with_prefix("mem");
        assert!(m.matches_relative("a.txt"));
        assert!(!m.matches_relative("x/a.txt"));
    }

    #[test]
    fn bad_patterns_name_the_problem() {
        let e = GlobMatcher::new("a[").unwrap_err().to_string();
        assert!(e.starts_with("Error: Invalid glob pattern 'a['"), "{e}");
        let e = GrepPattern::new("(", false, false).unwrap_err().to_string();
        assert!(e.starts_with("Error: Invalid regex pattern: "), "{e}");
        assert!(e.contains("literal=true"), "{e}");
        assert!(GrepPattern::new("(", true, false).unwrap().is_match("a(b"));
    }

    #[test]
    fn a_pattern_over_the_size_limit_names_the_flag() {
        let small = RegexLimits {
            size_limit: 10_000,
            dfa_size_limit: 10_000,
        };
        let e = GrepPattern::with_limits("\\w{1000}", false, false, small)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("Error: Regex pattern is too large: compiled, it exceeds the limit of 10000 bytes (--regex-size-limit)."),
            "{e}"
        );
        // The same pattern fits the default bound, and a tiny DFA cache still matches.
        let p = GrepPattern::with_limits(
            "a[0-9]{3}z",
            false,
            false,
            RegexLimits {
                size_limit: 1 << 20,
                dfa_size_limit: 1,
            },
        )
        .unwrap();
        assert!(p.is_match("xa123z"));
        assert!(GrepPattern::new("\\w{100}", false, false).is_ok());
    }

    #[test]
    fn context_lines_merge_between_close_matches() {
        let p = GrepPattern::new("x", false, false).unwrap();
        let path = VirtualPath::parse("/f").unwrap();
        let f = grep_text(&path, "a\nx\nb\nx\nc\nd\ne\n", &p, GrepCollect::lines(1)).unwrap();
        let nums: Vec<(usize, bool)> = f.lines.iter().map(|l| (l.number, l.is_match)).collect();
        assert_eq!(
            nums,
            vec![(1, false), (2, true), (3, false), (4, true), (5, false)]
        );
        assert_eq!(f.match_count, 2);
    }
}
