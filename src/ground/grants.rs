//! Per-principal grants (issue 43): which mounts each principal of an HTTP server sees, and
//! whether it may change them.
//!
//! One syntax everywhere — the `--grant` flag, a `grant` line of the token file or of a
//! `--grant-file` policy file:
//!
//! ```text
//! NAME=PREFIX[:ro|:rw][,PREFIX[:ro|:rw]...]
//! ```
//!
//! `NAME` is a principal (a token file's name, an OAuth principal such as `oauth:alice`), `*`
//! for every principal, or `scope:SCOPE` for every OAuth token holding that scope. `PREFIX` is a
//! mount's prefix (`/`, `/repo/`); `:rw` when omitted. A principal's access to a mount is the
//! widest of the grants naming it (by name, `*` or a scope it holds).
//!
//! With no grant at all nobody is restricted (every principal sees every mount, as before
//! grants existed). Once any grant is given, a principal sees exactly the mounts granted to it:
//! the others answer as if they did not exist ([`View`]). This module is pure: the mount table
//! applies a [`View`] when it builds a workspace's view of the mounts (`mounts.rs`), so every
//! tool, resource, subscription and `history` inherits it.

use std::sync::Arc;

use crate::ground::path::VirtualPath;

/// The name of a grant's principal that means every principal.
pub const EVERYONE: &str = "*";
/// What a grant's principal starts with to name an OAuth scope instead.
pub const SCOPE_PREFIX: &str = "scope:";

/// Whether a grant lets its principals change the mount.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mode {
    /// Read, list and search only.
    ReadOnly,
    /// Everything.
    ReadWrite,
}

/// Whom a grant is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Grantee {
    /// One principal, by name.
    Principal(String),
    /// Every principal (`*`).
    Everyone,
    /// Every OAuth token holding this scope (`scope:NAME`).
    Scope(String),
}

impl std::fmt::Display for Grantee {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Principal(name) => f.write_str(name),
            Self::Everyone => f.write_str(EVERYONE),
            Self::Scope(scope) => write!(f, "{SCOPE_PREFIX}{scope}"),
        }
    }
}

/// One mount granted to one grantee.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// Whom.
    pub grantee: Grantee,
    /// The mount's prefix.
    pub prefix: VirtualPath,
    /// How.
    pub mode: Mode,
}

impl Grant {
    /// The grant as it is written (`bob=/docs/:ro`), for messages.
    pub fn written(&self) -> String {
        let prefix = crate::ground::config::display_prefix(&self.prefix);
        let mode = match self.mode {
            Mode::ReadOnly => "ro",
            Mode::ReadWrite => "rw",
        };
        format!("{}={prefix}:{mode}", self.grantee)
    }
}

/// A grant that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "grant {text:?}: {problem}. Write NAME=PREFIX[:ro|:rw][,PREFIX[:ro|:rw]...], NAME a principal, `*` (everyone) or `scope:SCOPE`, PREFIX a mount's prefix such as /repo/"
)]
pub struct GrantError {
    /// The grant as given.
    pub text: String,
    /// What is wrong.
    pub problem: String,
}

/// Every grant of a server; empty: nobody is restricted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grants {
    grants: Vec<Grant>,
}

/// Parses one `NAME=PREFIX[:ro|:rw][,...]` into its grants (one per prefix).
pub fn parse(text: &str) -> Result<Vec<Grant>, GrantError> {
    let error = |problem: &str| GrantError {
        text: text.to_owned(),
        problem: problem.to_owned(),
    };
    let (name, prefixes) = text
        .trim()
        .split_once('=')
        .ok_or_else(|| error("there is no `=` between the principal and the prefixes"))?;
    let name = name.trim();
    let grantee = if name == EVERYONE {
        Grantee::Everyone
    } else if let Some(scope) = name.strip_prefix(SCOPE_PREFIX) {
        if scope.is_empty() || scope.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(error("the scope is empty or holds spaces"));
        }
        Grantee::Scope(scope.to_owned())
    } else {
        if name.is_empty()
            || !name.chars().all(|c| {
                c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '@' | ':' | '+')
            })
        {
            return Err(error(
                "the principal must be a name of letters, digits and - _ . @ : +",
            ));
        }
        Grantee::Principal(name.to_owned())
    };
    let mut out = Vec::new();
    for one in prefixes.split(',') {
        let one = one.trim();
        let (path, mode) = match one.rsplit_once(':') {
            Some((path, "ro")) => (path, Mode::ReadOnly),
            Some((path, "rw")) => (path, Mode::ReadWrite),
            Some((_, other)) => {
                return Err(error(&format!(
                    "{other:?} is no mode: write :ro or :rw after the prefix"
                )));
            }
            None => (one, Mode::ReadWrite),
        };
        if !path.starts_with('/') {
            return Err(error(&format!(
                "{path:?} is not a prefix: it must start with /"
            )));
        }
        let prefix = VirtualPath::parse(path).map_err(|e| error(&e.to_string()))?;
        out.push(Grant {
            grantee: grantee.clone(),
            prefix,
            mode,
        });
    }
    Ok(out)
}

/// Reads the `grant NAME=...` lines of a token or policy file (`#` comments and blank lines
/// skipped); other lines are `other`'s (the token file's `NAME TOKEN`), or an error when
/// `other` is `None` (a policy file holds grants only). Errors name the line, never its text
/// beyond the grant (a token file's other lines hold secrets).
pub fn parse_lines(text: &str, file: &str, only_grants: bool) -> Result<Vec<Grant>, GrantError> {
    let mut out = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match grant_line(line) {
            Some(grant) => out.extend(parse(grant).map_err(|e| GrantError {
                text: format!("{file}, line {}: {}", index + 1, e.text),
                problem: e.problem,
            })?),
            None if only_grants => {
                return Err(GrantError {
                    text: format!("{file}, line {}", index + 1),
                    problem: "a policy file holds only lines `grant NAME=PREFIX[:ro|:rw],...`"
                        .to_owned(),
                });
            }
            None => {}
        }
    }
    Ok(out)
}

/// The grant of a file's line `grant NAME=...`; `None` for any other line.
pub fn grant_line(line: &str) -> Option<&str> {
    let rest = line.strip_prefix("grant")?;
    rest.starts_with(char::is_whitespace).then(|| rest.trim())
}

impl Grants {
    /// The grants given.
    pub fn new(grants: Vec<Grant>) -> Self {
        Self { grants }
    }

    /// Whether no grant was given (nobody is restricted).
    pub fn is_empty(&self) -> bool {
        self.grants.is_empty()
    }

    /// Every grant.
    pub fn all(&self) -> &[Grant] {
        &self.grants
    }

    /// What the principal `name` holding OAuth `scopes` (none for a static token) sees of the
    /// mounts at `prefixes`; `None` when nobody is restricted.
    pub fn view(
        &self,
        name: &str,
        scopes: Option<&[String]>,
        prefixes: &[VirtualPath],
    ) -> Option<Arc<View>> {
        if self.is_empty() {
            return None;
        }
        let applies = |grantee: &Grantee| match grantee {
            Grantee::Everyone => true,
            Grantee::Principal(p) => p == name,
            Grantee::Scope(s) => scopes.is_some_and(|held| held.iter().any(|h| h == s)),
        };
        let mut mounts: Vec<(VirtualPath, Option<(Mode, String)>)> = prefixes
            .iter()
            .map(|prefix| {
                let best = self
                    .grants
                    .iter()
                    .filter(|g| g.prefix == *prefix && applies(&g.grantee))
                    .max_by_key(|g| g.mode)
                    .map(|g| (g.mode, g.written()));
                (prefix.clone(), best)
            })
            .collect();
        // The root always has an entry: a table without a mount at `/` still routes there.
        if !mounts.iter().any(|(p, _)| p.is_root()) {
            mounts.push((VirtualPath::root(), None));
        }
        mounts.sort_by_key(|(p, _)| std::cmp::Reverse(p.as_str().len()));
        Some(Arc::new(View { mounts }))
    }

    /// The first place where one mount's host directory holds another's and some principal
    /// is granted the outer more than the inner (attack review of issue 43, F3): through the
    /// outer mount, and `execute`'s sandbox binding its directory, that principal would read
    /// (or change) the files of a mount it is not granted (or granted read-only). `mounts` are
    /// the mounts that have a host directory, canonical. `None`: no such place.
    ///
    /// A principal's access is the widest grant of its name, its scopes and `*`; so checking
    /// each grantee together with `*`, and `*` alone, covers every principal: whatever makes a
    /// principal's outer access exceed its inner one, that one grantee with `*` does too.
    pub fn nested_conflict(&self, mounts: &[(VirtualPath, std::path::PathBuf)]) -> Option<String> {
        if self.is_empty() {
            return None;
        }
        let mut holders: Vec<Option<&Grantee>> = vec![None];
        for grant in &self.grants {
            if grant.grantee != Grantee::Everyone && !holders.contains(&Some(&grant.grantee)) {
                holders.push(Some(&grant.grantee));
            }
        }
        let access = |holder: Option<&Grantee>, prefix: &VirtualPath| {
            self.grants
                .iter()
                .filter(|g| {
                    g.prefix == *prefix
                        && (g.grantee == Grantee::Everyone || Some(&g.grantee) == holder)
                })
                .map(|g| g.mode)
                .max()
        };
        for (outer, outer_dir) in mounts {
            for (inner, inner_dir) in mounts {
                if outer == inner || !inner_dir.starts_with(outer_dir) {
                    continue;
                }
                for holder in &holders {
                    let (wide, narrow) = (access(*holder, outer), access(*holder, inner));
                    if wide <= narrow {
                        continue;
                    }
                    let who = holder.map_or_else(|| EVERYONE.to_owned(), ToString::to_string);
                    let (outer_shown, inner_shown) = (
                        crate::ground::config::display_prefix(outer),
                        crate::ground::config::display_prefix(inner),
                    );
                    let (held, doing) = match narrow {
                        None => ("is not granted", "read"),
                        Some(_) => ("is granted read-only", "change"),
                    };
                    return Some(format!(
                        "mount {outer_shown} ({}) holds the directory of mount {inner_shown} ({}): {who} is granted {outer_shown} but {held} {inner_shown}, and could {doing} its files through {outer_shown} or execute. Grant {inner_shown} to {who} alike, or mount directories that do not lie inside one another",
                        outer_dir.display(),
                        inner_dir.display(),
                    ));
                }
            }
        }
        None
    }
}

/// What one principal sees of the mount table: per mount, hidden or granted (how, and by which
/// grant), longest prefix first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    mounts: Vec<(VirtualPath, Option<(Mode, String)>)>,
}

impl View {
    /// The access to the mount at `prefix` exactly: `None` hidden (or no such mount), else the
    /// mode and the grant giving it.
    pub fn mount(&self, prefix: &VirtualPath) -> Option<(Mode, &str)> {
        self.mounts
            .iter()
            .find(|(p, _)| p == prefix)
            .and_then(|(_, access)| access.as_ref())
            .map(|(mode, grant)| (*mode, grant.as_str()))
    }

    /// The access to `path` (through the mount owning it): `None` when hidden.
    pub fn path(&self, path: &VirtualPath) -> Option<(Mode, &str)> {
        self.mounts
            .iter()
            .find(|(prefix, _)| path.starts_with(prefix))
            .and_then(|(_, access)| access.as_ref())
            .map(|(mode, grant)| (*mode, grant.as_str()))
    }

    /// Whether `path` lies in a granted mount.
    pub fn sees(&self, path: &VirtualPath) -> bool {
        self.path(path).is_some()
    }

    /// Whether `path` is visible: in a granted mount, or a directory leading to one (`/` when
    /// `/repo/` is granted).
    pub fn sees_or_leads_to(&self, path: &VirtualPath) -> bool {
        self.sees(path)
            || self
                .mounts
                .iter()
                .any(|(prefix, access)| access.is_some() && prefix.starts_with(path))
    }

    /// Whether some mount may be changed.
    pub fn writes_anywhere(&self) -> bool {
        self.mounts
            .iter()
            .any(|(_, access)| matches!(access, Some((Mode::ReadWrite, _))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> VirtualPath {
        VirtualPath::parse(text).unwrap()
    }

    #[test]
    fn a_granted_directory_holding_a_mount_granted_less_is_found() {
        let grants =
            |texts: &[&str]| Grants::new(texts.iter().flat_map(|t| parse(t).unwrap()).collect());
        let dirs = [
            (p("/all/"), std::path::PathBuf::from("/srv")),
            (p("/secret/"), std::path::PathBuf::from("/srv/secret")),
            (p("/other/"), std::path::PathBuf::from("/srv-other")),
        ];
        // bob reads /all/, which holds /secret/'s directory, and is not granted /secret/.
        let found = grants(&["bob=/all/:ro", "alice=/secret/"])
            .nested_conflict(&dirs)
            .unwrap();
        assert!(
            found.contains("bob is granted /all/ but is not granted /secret/"),
            "{found}"
        );
        // Read-only inside, read-write outside: the outer mount would change it.
        let found = grants(&["bob=/all/,/secret/:ro"])
            .nested_conflict(&dirs)
            .unwrap();
        assert!(found.contains("is granted read-only /secret/"), "{found}");
        // Through `*` and a scope too.
        assert!(grants(&["*=/all/:ro"]).nested_conflict(&dirs).is_some());
        assert!(
            grants(&["scope:team=/all/", "*=/secret/:ro"])
                .nested_conflict(&dirs)
                .is_some()
        );
        // Granted alike (or more inside), or not nested: nothing to say. `/srv-other` is not
        // inside `/srv` (components, not text).
        assert!(
            grants(&["bob=/all/:ro,/secret/:ro", "alice=/secret/"])
                .nested_conflict(&dirs)
                .is_none()
        );
        assert!(
            grants(&["bob=/secret/,/other/"])
                .nested_conflict(&dirs)
                .is_none()
        );
        assert!(
            grants(&["*=/all/,/secret/"])
                .nested_conflict(&dirs)
                .is_none()
        );
        assert!(Grants::default().nested_conflict(&dirs).is_none());
        // The same directory under two prefixes, granted differently: found both ways.
        let twice = [
            (p("/a/"), std::path::PathBuf::from("/srv/x")),
            (p("/b/"), std::path::PathBuf::from("/srv/x")),
        ];
        let found = grants(&["bob=/b/:ro"]).nested_conflict(&twice).unwrap();
        assert!(
            found.contains("bob is granted /b/ but is not granted /a/"),
            "{found}"
        );
    }

    #[test]
    fn grants_parse_in_every_form() {
        let grants = parse("alice=/a/,/shared/:ro,/b:rw").unwrap();
        assert_eq!(grants.len(), 3);
        assert_eq!(grants[0].grantee, Grantee::Principal("alice".into()));
        assert_eq!(grants[0].mode, Mode::ReadWrite);
        assert_eq!(grants[1].mode, Mode::ReadOnly);
        assert_eq!(grants[1].written(), "alice=/shared/:ro");
        assert_eq!(grants[2].prefix, p("/b"));
        assert_eq!(parse("*=/docs/:ro").unwrap()[0].grantee, Grantee::Everyone);
        assert_eq!(
            parse("scope:team=/").unwrap()[0].grantee,
            Grantee::Scope("team".into())
        );
        assert_eq!(
            parse("oauth:bob@example.com=/b/").unwrap()[0].grantee,
            Grantee::Principal("oauth:bob@example.com".into())
        );
        for bad in [
            "alice",
            "alice=docs/",
            "alice=/a/:rx",
            "=/a/",
            "al ice=/a/",
            "scope:=/",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_file_holds_grant_lines() {
        let text = "# team\nalice 0123456789abcdef0123\ngrant alice=/a/\n\ngrant *=/docs/:ro\n";
        let grants = parse_lines(text, "tokens", false).unwrap();
        assert_eq!(grants.len(), 2);
        let error = parse_lines(text, "policy", true).unwrap_err();
        assert!(error.to_string().contains("policy, line 2"), "{error}");
        assert!(!error.to_string().contains("0123456789abcdef"), "{error}");
        assert!(grant_line("granted x=/").is_none());
    }

    #[test]
    fn a_view_holds_exactly_the_grants() {
        let grants = Grants::new(
            [
                "alice=/a/,/shared/",
                "bob=/b/,/shared/:ro",
                "*=/docs/:ro",
                "scope:admin=/b/",
            ]
            .iter()
            .flat_map(|g| parse(g).unwrap())
            .collect(),
        );
        let mounts = [p("/"), p("/a"), p("/b"), p("/shared"), p("/docs")];
        let alice = grants.view("alice", None, &mounts).unwrap();
        assert!(alice.sees(&p("/a/x")));
        assert!(!alice.sees(&p("/b/x")));
        assert!(!alice.sees(&p("/x")), "the root was not granted");
        assert!(alice.sees_or_leads_to(&p("/")));
        assert_eq!(alice.path(&p("/docs/r")).unwrap().0, Mode::ReadOnly);
        let bob = grants.view("bob", None, &mounts).unwrap();
        assert_eq!(
            bob.path(&p("/shared/f")),
            Some((Mode::ReadOnly, "bob=/shared/:ro"))
        );
        let reader = grants.view("carol", None, &mounts).unwrap();
        assert!(!reader.writes_anywhere());
        assert!(reader.sees(&p("/docs/x")));
        let admin = grants
            .view("carol", Some(&["admin".to_owned()]), &mounts)
            .unwrap();
        assert_eq!(admin.path(&p("/b/y")).unwrap().0, Mode::ReadWrite);
        assert!(Grants::default().view("x", None, &mounts).is_none());
    }
}
