//! Bearer tokens: where they come from (`--token-file`, `MOUNTFS_TOKEN`, or one generated for
//! a loopback-only run), and checking a request's `Authorization` header against them.
//!
//! Tokens are kept only as SHA-256 digests and compared in constant time (`subtle`), so neither
//! a token's bytes nor how many of its leading bytes a guess got right can leak through timing.
//! Nothing here logs a token.

use std::path::Path;
use std::sync::Arc;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::server::workspace::Principal;

pub use crate::ground::config::TOKEN_ENV;
/// The principal of the `MOUNTFS_TOKEN` or generated token.
pub const DEFAULT_PRINCIPAL: &str = "default";
/// Shortest token accepted: 16 characters (a guess then needs far more tries than any server
/// answers).
pub const MIN_TOKEN_CHARS: usize = 16;

/// Why the token configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The token file could not be read.
    #[error("cannot read the token file {file}: {reason}")]
    Unreadable {
        /// The file as given.
        file: String,
        /// Why.
        reason: String,
    },
    /// A line of the token file is malformed.
    #[error(
        "token file {file}, line {line}: {problem}. Each line is `NAME TOKEN` (blank lines and lines starting with # are ignored)"
    )]
    Line {
        /// The file as given.
        file: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong (never the token itself).
        problem: String,
    },
    /// `MOUNTFS_TOKEN` is set but unusable.
    #[error(
        "{TOKEN_ENV} is too short ({0} characters): use at least {MIN_TOKEN_CHARS} random characters, e.g. `openssl rand -hex 32`"
    )]
    ShortEnvToken(usize),
    /// The token file names no token.
    #[error("token file {0} holds no token: add a line `NAME TOKEN`")]
    Empty(String),
}

/// The configured tokens, each with its principal.
#[derive(Clone)]
pub struct Tokens {
    entries: Arc<Vec<([u8; 32], Principal)>>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Principals only: the digests are secret enough to keep out of any debug output.
        f.debug_list()
            .entries(self.entries.iter().map(|(_, p)| &p.0))
            .finish()
    }
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

impl Tokens {
    /// One token for the principal [`DEFAULT_PRINCIPAL`].
    pub fn single(token: &str) -> Result<Self, TokenError> {
        let chars = token.chars().count();
        if chars < MIN_TOKEN_CHARS {
            return Err(TokenError::ShortEnvToken(chars));
        }
        Ok(Self {
            entries: Arc::new(vec![(digest(token), Principal::named(DEFAULT_PRINCIPAL))]),
        })
    }

    /// No static token: only OAuth access tokens open the server (`--oauth-issuer` without
    /// `--token-file` or `MOUNTFS_TOKEN`).
    pub fn none() -> Self {
        Self {
            entries: Arc::new(Vec::new()),
        }
    }

    /// A fresh random token (256 bits, hex) for [`DEFAULT_PRINCIPAL`], and the token itself to
    /// show the operator once.
    pub fn generate() -> (Self, String) {
        let bytes: [u8; 32] = rand::random();
        let token = hex::encode(bytes);
        let tokens = Self {
            entries: Arc::new(vec![(digest(&token), Principal::named(DEFAULT_PRINCIPAL))]),
        };
        (tokens, token)
    }

    /// Reads `NAME TOKEN` lines from `file`.
    pub fn from_file(file: &Path) -> Result<Self, TokenError> {
        let shown = file.display().to_string();
        let text = std::fs::read_to_string(file).map_err(|error| TokenError::Unreadable {
            file: shown.clone(),
            reason: error.to_string(),
        })?;
        warn_if_others_can_read(file);
        Self::parse(&text, &shown)
    }

    /// Parses the token file's text (`file` names it in errors).
    pub fn parse(text: &str, file: &str) -> Result<Self, TokenError> {
        let mut entries: Vec<([u8; 32], Principal)> = Vec::new();
        for (index, raw) in text.lines().enumerate() {
            let line = raw.trim();
            // A grant (issue 43): read by `crate::ground::grants::parse_lines`.
            if line.is_empty()
                || line.starts_with('#')
                || crate::ground::grants::grant_line(line).is_some()
            {
                continue;
            }
            let problem = |problem: String| TokenError::Line {
                file: file.to_owned(),
                line: index + 1,
                problem,
            };
            let mut words = line.split_whitespace();
            let (Some(name), Some(token), None) = (words.next(), words.next(), words.next()) else {
                return Err(problem(
                    "expected two words, a name and a token, separated by a space".to_owned(),
                ));
            };
            if !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '@'))
            {
                return Err(problem(format!(
                    "the name {name:?} may hold only letters, digits and - _ . @"
                )));
            }
            let chars = token.chars().count();
            if chars < MIN_TOKEN_CHARS {
                return Err(problem(format!(
                    "the token of {name} is too short ({chars} characters): use at least {MIN_TOKEN_CHARS} random characters, e.g. `openssl rand -hex 32`"
                )));
            }
            let hash = digest(token);
            if entries.iter().any(|(_, p)| &*p.0 == name) {
                return Err(problem(format!("the name {name} appears twice")));
            }
            if entries.iter().any(|(d, _)| bool::from(d.ct_eq(&hash))) {
                return Err(problem(format!(
                    "the token of {name} is also another name's token; give each name its own"
                )));
            }
            entries.push((hash, Principal::named(name)));
        }
        if entries.is_empty() {
            return Err(TokenError::Empty(file.to_owned()));
        }
        Ok(Self {
            entries: Arc::new(entries),
        })
    }

    /// The principal whose token `authorization` (the header's value) carries, if any.
    ///
    /// Every configured token is compared, whatever matches, so the time taken does not say
    /// which (or whether an early one) matched.
    pub fn principal_of(&self, authorization: Option<&[u8]>) -> Option<Principal> {
        let token = bearer_token(authorization?)?;
        let hash: [u8; 32] = Sha256::digest(token).into();
        let mut found = None;
        for (candidate, principal) in self.entries.iter() {
            if bool::from(candidate.ct_eq(&hash)) {
                found = Some(principal.clone());
            }
        }
        found
    }

    /// How many distinct principals the tokens name (a token file names each NAME once; the
    /// names are counted, not the tokens, should that ever change). More than one: `execute`'s commands may read only what a build needs, so
    /// no principal's command reads another's files (see `exec::namespace`).
    pub fn principal_count(&self) -> usize {
        let mut names: Vec<&str> = self.entries.iter().map(|(_, p)| &*p.0).collect();
        names.sort_unstable();
        names.dedup();
        names.len()
    }

    /// The principals the tokens name.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.entries.iter().map(|(_, p)| p.0.to_string()).collect();
        names.sort_unstable();
        names.dedup();
        names
    }

    /// How many tokens are configured.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no static token is configured ([`Tokens::none`]).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The token of an `Authorization: Bearer <token>` value (scheme case-insensitive, RFC 6750).
pub fn bearer_token(value: &[u8]) -> Option<&[u8]> {
    let value = value.trim_ascii();
    let (scheme, rest) = value.split_at_checked(6)?;
    if !scheme.eq_ignore_ascii_case(b"bearer") {
        return None;
    }
    let token = rest.trim_ascii();
    (rest.first().is_some_and(u8::is_ascii_whitespace) && !token.is_empty()).then_some(token)
}

#[cfg(unix)]
fn warn_if_others_can_read(file: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(meta) = std::fs::metadata(file)
        && meta.permissions().mode() & 0o077 != 0
    {
        tracing::warn!(
            file = %file.display(),
            "the token file can be read by other users; chmod 600 it"
        );
    }
}

#[cfg(not(unix))]
fn warn_if_others_can_read(_file: &Path) {}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaa";
    const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbb";

    #[test]
    fn principals_are_counted_by_name() {
        let text = "a aaaaaaaaaaaaaaaaaaaa\nb bbbbbbbbbbbbbbbbbbbb\n";
        assert_eq!(Tokens::parse(text, "t").unwrap().principal_count(), 2);
        let one = "# one\na aaaaaaaaaaaaaaaaaaaa\n";
        assert_eq!(Tokens::parse(one, "t").unwrap().principal_count(), 1);
        assert_eq!(Tokens::generate().0.principal_count(), 1);
    }

    #[test]
    fn the_token_file_maps_tokens_to_names() {
        let tokens = Tokens::parse(&format!("# team\n\nalice {A}\n bob  {B} \n"), "t").unwrap();
        assert_eq!(tokens.len(), 2);
        let alice = tokens.principal_of(Some(format!("Bearer {A}").as_bytes()));
        assert_eq!(alice.unwrap().to_string(), "alice");
        let bob = tokens.principal_of(Some(format!("bearer   {B}").as_bytes()));
        assert_eq!(bob.unwrap().to_string(), "bob");
        for wrong in [
            format!("Bearer {A}x"),
            format!("Basic {A}"),
            format!("Bearer{A}"),
            A.to_owned(),
            "Bearer ".to_owned(),
            String::new(),
        ] {
            assert!(
                tokens.principal_of(Some(wrong.as_bytes())).is_none(),
                "{wrong}"
            );
        }
        assert!(tokens.principal_of(None).is_none());
    }

    #[test]
    fn bad_token_files_name_the_line_and_never_the_token() {
        let cases = [
            (format!("alice {A} extra"), "line 1: expected two words"),
            (
                "alice short".to_owned(),
                "line 1: the token of alice is too short (5 characters)",
            ),
            (format!("al/ice {A}"), "line 1: the name \"al/ice\""),
            (
                format!("alice {A}\nalice {B}"),
                "line 2: the name alice appears twice",
            ),
            (
                format!("alice {A}\nbob {A}"),
                "line 2: the token of bob is also another name's",
            ),
            ("# nothing\n".to_owned(), "holds no token"),
        ];
        for (text, expected) in cases {
            let error = Tokens::parse(&text, "tokens.txt").unwrap_err().to_string();
            assert!(error.contains(expected), "{error}");
            assert!(!error.contains(A) && !error.contains(B), "{error}");
        }
    }

    #[test]
    fn generated_tokens_are_long_and_differ() {
        let (tokens, first) = Tokens::generate();
        let (_, second) = Tokens::generate();
        assert_eq!(first.len(), 64);
        assert_ne!(first, second);
        assert!(
            tokens
                .principal_of(Some(format!("Bearer {first}").as_bytes()))
                .is_some()
        );
        assert!(Tokens::single("short").is_err());
    }
}
