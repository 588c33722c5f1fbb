//! Virtual paths: the one validated form in which every tool and backend names a file.
//!
//! A [`VirtualPath`] is absolute, `/`-separated, has no empty, `.` or `..` component and no
//! trailing slash (except the root `/`). Raw input from an agent becomes a `VirtualPath` at the
//! edge ([`VirtualPath::parse`], CONTRACT §1) and is never re-checked downstream. Mount-prefix
//! arithmetic (strip on the way in, put back on the way out) lives here too, done component by
//! component so that `/mem` never claims `/memory/x`.

use std::fmt;

use thiserror::Error;

/// Longest accepted path, in bytes (CONTRACT §1).
pub const MAX_PATH_BYTES: usize = 4096;
/// Longest accepted path component, in bytes (CONTRACT §1).
pub const MAX_COMPONENT_BYTES: usize = 255;

/// Why a raw path was refused. The Display text shows the offending input.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PathError {
    /// The path was empty or only whitespace.
    #[error(
        "Error: Invalid path '': the path is empty. Give an absolute path such as /src/main.rs"
    )]
    Empty,
    /// A `..` component.
    #[error(
        "Error: Invalid path '{0}': '..' components are not allowed. Use an absolute path from / without '..'"
    )]
    ParentComponent(String),
    /// A leading `~`.
    #[error(
        "Error: Invalid path '{0}': '~' (home directory) is not supported. Use an absolute virtual path such as /notes.md"
    )]
    Tilde(String),
    /// A NUL byte.
    #[error("Error: Invalid path '{0}': it contains a NUL byte. Remove it")]
    Nul(String),
    /// A Windows drive, UNC path or backslash.
    #[error(
        "Error: Invalid path '{0}': backslashes, drive letters and UNC paths are not allowed. Use '/' separators, e.g. /dir/file.txt"
    )]
    Windows(String),
    /// Longer than [`MAX_PATH_BYTES`].
    #[error("Error: Invalid path '{shown}…': it is {len} bytes long; the limit is 4096 bytes")]
    TooLong {
        /// The first characters of the input.
        shown: String,
        /// Its length in bytes.
        len: usize,
    },
    /// A component longer than [`MAX_COMPONENT_BYTES`].
    #[error(
        "Error: Invalid path '{shown}…': a component is {len} bytes long; the limit is 255 bytes"
    )]
    ComponentTooLong {
        /// The first characters of the input.
        shown: String,
        /// The component's length in bytes.
        len: usize,
    },
}

/// An absolute, normalised virtual path (see the module doc).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VirtualPath(String);

impl VirtualPath {
    /// The root, `/`.
    pub fn root() -> Self {
        Self("/".to_owned())
    }

    /// Parses raw input per CONTRACT §1: relative paths are taken from `/`, repeated and
    /// trailing slashes are folded, `.` components dropped, and everything unsafe refused.
    pub fn parse(input: &str) -> Result<Self, PathError> {
        if input.trim().is_empty() {
            return Err(PathError::Empty);
        }
        if input.len() > MAX_PATH_BYTES {
            return Err(PathError::TooLong {
                shown: input.chars().take(60).collect(),
                len: input.len(),
            });
        }
        if input.contains('\0') {
            return Err(PathError::Nul(input.replace('\0', "\\0")));
        }
        if input.starts_with('~') {
            return Err(PathError::Tilde(input.to_owned()));
        }
        let bytes = input.as_bytes();
        let drive = bytes.len() >= 2 && bytes[0].is_ascii_alphabetic() && bytes[1] == b':';
        if input.contains('\\') || drive {
            return Err(PathError::Windows(input.to_owned()));
        }
        let mut normalised = String::with_capacity(input.len() + 1);
        for component in input.split('/') {
            match component {
                "" | "." => continue,
                ".." => return Err(PathError::ParentComponent(input.to_owned())),
                name => {
                    if name.len() > MAX_COMPONENT_BYTES {
                        return Err(PathError::ComponentTooLong {
                            shown: input.chars().take(60).collect(),
                            len: name.len(),
                        });
                    }
                    normalised.push('/');
                    normalised.push_str(name);
                }
            }
        }
        if normalised.is_empty() {
            normalised.push('/');
        }
        Ok(Self(normalised))
    }

    /// The path as text, e.g. `/src/main.rs`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this is `/`.
    pub fn is_root(&self) -> bool {
        self.0 == "/"
    }

    /// The components, without separators; empty for the root.
    pub fn components(&self) -> impl Iterator<Item = &str> {
        self.0.split('/').filter(|c| !c.is_empty())
    }

    /// The last component; `None` for the root.
    pub fn file_name(&self) -> Option<&str> {
        if self.is_root() {
            None
        } else {
            self.0.rsplit('/').next()
        }
    }

    /// The parent directory; `None` for the root.
    pub fn parent(&self) -> Option<VirtualPath> {
        if self.is_root() {
            return None;
        }
        match self.0.rfind('/') {
            Some(0) | None => Some(Self::root()),
            Some(i) => Some(Self(self.0[..i].to_owned())),
        }
    }

    /// Appends one already-safe component (a name from a listing). Names with `/` or that
    /// are `.`/`..` are refused, so a backend cannot smuggle a traversal through a listing.
    pub fn join(&self, name: &str) -> Result<VirtualPath, PathError> {
        if name.is_empty() || name == "." || name == ".." || name.contains('/') {
            return Err(PathError::ParentComponent(format!("{}/{}", self.0, name)));
        }
        let joined = if self.is_root() {
            format!("/{name}")
        } else {
            format!("{}/{name}", self.0)
        };
        Self::parse(&joined)
    }

    /// Appends a relative path (`a/b`), validating it.
    pub fn join_relative(&self, relative: &str) -> Result<VirtualPath, PathError> {
        Self::parse(&format!("{}/{}", self.0, relative))
    }

    /// Whether `self` is `dir` or lies beneath it, compared component-wise.
    pub fn starts_with(&self, dir: &VirtualPath) -> bool {
        if dir.is_root() {
            return true;
        }
        self.0 == dir.0
            || (self.0.starts_with(&dir.0) && self.0.as_bytes().get(dir.0.len()) == Some(&b'/'))
    }

    /// `self` relative to `dir` as an absolute path in `dir`'s coordinates
    /// (`/a/b/c` relative to `/a` is `/b/c`; `/a` relative to `/a` is `/`).
    pub fn strip_prefix(&self, dir: &VirtualPath) -> Option<VirtualPath> {
        if !self.starts_with(dir) {
            return None;
        }
        if dir.is_root() {
            return Some(self.clone());
        }
        let rest = &self.0[dir.0.len()..];
        if rest.is_empty() {
            Some(Self::root())
        } else {
            Some(Self(rest.to_owned()))
        }
    }

    /// `self` relative to `dir` without a leading slash (`/a/b/c` under `/a` is `b/c`),
    /// the form glob patterns with a `/` are matched against. Empty when equal.
    pub fn relative_to(&self, dir: &VirtualPath) -> Option<&str> {
        if !self.starts_with(dir) {
            return None;
        }
        if dir.is_root() {
            return Some(&self.0[1..]);
        }
        Some(self.0[dir.0.len()..].trim_start_matches('/'))
    }

    /// The inverse of [`strip_prefix`](Self::strip_prefix): puts a mount prefix back.
    pub fn under(&self, prefix: &VirtualPath) -> VirtualPath {
        if prefix.is_root() {
            self.clone()
        } else if self.is_root() {
            prefix.clone()
        } else {
            Self(format!("{}{}", prefix.0, self.0))
        }
    }
}

impl fmt::Display for VirtualPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for VirtualPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> VirtualPath {
        VirtualPath::parse(s).unwrap()
    }

    #[test]
    fn relative_repeated_and_trailing_slashes_are_folded() {
        assert_eq!(p("src/a.rs").as_str(), "/src/a.rs");
        assert_eq!(p("//src///a.rs/").as_str(), "/src/a.rs");
        assert_eq!(p("/./src/./a.rs").as_str(), "/src/a.rs");
        assert_eq!(p("/").as_str(), "/");
        assert_eq!(p("///").as_str(), "/");
    }

    #[test]
    fn unsafe_inputs_are_refused_with_the_input_shown() {
        for bad in ["/a/../b", "..", "../x", "a/.."] {
            let err = VirtualPath::parse(bad).unwrap_err();
            assert!(matches!(err, PathError::ParentComponent(_)), "{bad}");
            assert!(err.to_string().contains(bad), "{err}");
        }
        assert!(matches!(
            VirtualPath::parse("~/x"),
            Err(PathError::Tilde(_))
        ));
        assert!(matches!(
            VirtualPath::parse("/a\0b"),
            Err(PathError::Nul(_))
        ));
        assert!(matches!(
            VirtualPath::parse("C:\\x"),
            Err(PathError::Windows(_))
        ));
        assert!(matches!(
            VirtualPath::parse("c:/x"),
            Err(PathError::Windows(_))
        ));
        assert!(matches!(
            VirtualPath::parse("\\\\server\\x"),
            Err(PathError::Windows(_))
        ));
        assert!(matches!(
            VirtualPath::parse("/a\\b"),
            Err(PathError::Windows(_))
        ));
        assert!(matches!(VirtualPath::parse(""), Err(PathError::Empty)));
        let long = format!("/{}", "a".repeat(4100));
        assert!(matches!(
            VirtualPath::parse(&long),
            Err(PathError::TooLong { .. })
        ));
        let comp = format!("/{}", "a".repeat(256));
        assert!(matches!(
            VirtualPath::parse(&comp),
            Err(PathError::ComponentTooLong { .. })
        ));
        assert!(VirtualPath::parse(&format!("/{}", "a".repeat(255))).is_ok());
    }

    #[test]
    fn dots_inside_names_are_fine() {
        assert_eq!(p("/foo..bar.txt").as_str(), "/foo..bar.txt");
        assert_eq!(p("/.hidden").as_str(), "/.hidden");
        assert_eq!(p("/...").as_str(), "/...");
    }

    #[test]
    fn prefix_arithmetic_is_component_wise() {
        let mem = p("/mem");
        assert!(p("/mem").starts_with(&mem));
        assert!(p("/mem/a").starts_with(&mem));
        assert!(!p("/memory/x").starts_with(&mem));
        assert_eq!(p("/mem/a/b").strip_prefix(&mem).unwrap().as_str(), "/a/b");
        assert_eq!(p("/mem").strip_prefix(&mem).unwrap().as_str(), "/");
        assert_eq!(p("/memory").strip_prefix(&mem), None);
        assert_eq!(p("/a/b").under(&mem).as_str(), "/mem/a/b");
        assert_eq!(VirtualPath::root().under(&mem).as_str(), "/mem");
        assert_eq!(p("/mem/a/b").relative_to(&mem), Some("a/b"));
        assert_eq!(p("/a/b").relative_to(&VirtualPath::root()), Some("a/b"));
    }

    #[test]
    fn parent_join_and_file_name() {
        assert_eq!(p("/a/b").parent().unwrap().as_str(), "/a");
        assert_eq!(p("/a").parent().unwrap().as_str(), "/");
        assert_eq!(VirtualPath::root().parent(), None);
        assert_eq!(p("/a").join("b").unwrap().as_str(), "/a/b");
        assert_eq!(VirtualPath::root().join("b").unwrap().as_str(), "/b");
        assert!(p("/a").join("..").is_err());
        assert!(p("/a").join("x/y").is_err());
        assert_eq!(p("/a/b.txt").file_name(), Some("b.txt"));
    }
}
