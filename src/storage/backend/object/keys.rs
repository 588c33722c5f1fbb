//! Where a file of an object mount lives in its bucket: the mount's key prefix joined to the
//! file's path, and back. This is the mount's containment: every key this backend touches is
//! built here from a [`VirtualPath`] (no `..`, no empty or `.` segment: refused by the path
//! type, and again by `object_store`'s [`Path::parse`]) and lies under the prefix by
//! construction; a key read back from a listing is served only when it maps to a virtual path
//! that maps back to exactly that key (a key such as `a//b` or `a/./b`, written by another
//! client, is not reachable, rather than shown under a name that would open another object).
//!
//! Keys are taken as they are, never percent-encoded on our side ([`Path::parse`], not
//! `Path::from`): a file named `a b+c%d é` is the key `PREFIX/a b+c%d é`, the very key another
//! S3 client sees; the HTTP layer of `object_store` encodes it on the wire.

use object_store::path::Path;

use crate::ground::path::VirtualPath;
use crate::storage::backend::{Error, Result};

/// The key prefix of one object mount (`KEYPREFIX` of `s3://BUCKET/KEYPREFIX`), validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyPrefix {
    /// The prefix as an object path (empty: the whole bucket).
    root: Path,
}

/// A key prefix that cannot be one (an empty, `.` or `..` segment, a control character).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("key prefix '{prefix}' is not valid: {reason}")]
pub struct KeyPrefixError {
    /// The prefix as given.
    pub prefix: String,
    /// Why.
    pub reason: String,
}

impl KeyPrefix {
    /// Parses the `KEYPREFIX` of a mount (`""`: the whole bucket). Segments must be non-empty,
    /// not `.` or `..`, and hold no control character.
    pub fn parse(text: &str) -> std::result::Result<Self, KeyPrefixError> {
        let fail = |reason: &str| KeyPrefixError {
            prefix: text.to_owned(),
            reason: reason.to_owned(),
        };
        let trimmed = text.trim_matches('/');
        if trimmed.is_empty() {
            return Ok(Self {
                root: Path::default(),
            });
        }
        for segment in trimmed.split('/') {
            match segment {
                "" => return Err(fail("it has an empty segment ('//')")),
                "." | ".." => return Err(fail("'.' and '..' segments are refused")),
                _ if segment.chars().any(char::is_control) => {
                    return Err(fail("it holds a control character"));
                }
                _ => {}
            }
        }
        let root = Path::parse(trimmed).map_err(|e| fail(&e.to_string()))?;
        Ok(Self { root })
    }

    /// The prefix as an object path (empty: the whole bucket).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The key of `path` (the prefix itself for `/`). A name `object_store` refuses as a key
    /// is refused here, before any request.
    pub fn key_of(&self, path: &VirtualPath) -> Result<Path> {
        crate::storage::backend::refuse_reserved(path)?;
        if path.is_root() {
            return Ok(self.root.clone());
        }
        let relative = path.as_str().trim_start_matches('/');
        let full = if self.root.as_ref().is_empty() {
            relative.to_owned()
        } else {
            format!("{}/{relative}", self.root.as_ref())
        };
        Path::parse(&full).map_err(|_| Error::Unsupported {
            path: path.clone(),
            reason: "this name cannot be an object key (a '.' segment or a control character); choose another name".into(),
        })
    }

    /// The key prefix of everything under `dir`, as `list` takes it.
    pub fn dir_key(&self, dir: &VirtualPath) -> Result<Option<Path>> {
        let key = self.key_of(dir)?;
        Ok((!key.as_ref().is_empty()).then_some(key))
    }

    /// The virtual path of a key read back from the store: `None` when the key is not under
    /// the prefix, or does not map back to itself exactly (see the module doc).
    pub fn path_of(&self, key: &Path) -> Option<VirtualPath> {
        let raw = key.as_ref();
        let relative = if self.root.as_ref().is_empty() {
            raw
        } else {
            raw.strip_prefix(self.root.as_ref())?.strip_prefix('/')?
        };
        if relative.is_empty() {
            return None;
        }
        let path = VirtualPath::parse_raw(relative).ok()?;
        // A reserved name (`.mountfs-tmp*`, made by another client) is mountfs's own: no path
        // (attack review of issue 41).
        if crate::storage::backend::is_reserved_path(&path) {
            return None;
        }
        (path.as_str().get(1..) == Some(relative)).then_some(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vp(text: &str) -> VirtualPath {
        VirtualPath::parse(text).unwrap()
    }

    #[test]
    fn keys_are_the_prefix_joined_to_the_path_as_they_are() {
        let prefix = KeyPrefix::parse("team/docs/").unwrap();
        let key = prefix.key_of(&vp("/a b/c+d%20é.txt")).unwrap();
        assert_eq!(key.as_ref(), "team/docs/a b/c+d%20é.txt");
        assert_eq!(prefix.path_of(&key), Some(vp("/a b/c+d%20é.txt")));
        assert_eq!(
            prefix.key_of(&VirtualPath::root()).unwrap().as_ref(),
            "team/docs"
        );
        let whole = KeyPrefix::parse("").unwrap();
        assert_eq!(whole.key_of(&vp("/x")).unwrap().as_ref(), "x");
        assert_eq!(whole.dir_key(&VirtualPath::root()).unwrap(), None);
    }

    #[test]
    fn keys_outside_the_prefix_or_not_round_tripping_are_unreachable() {
        let prefix = KeyPrefix::parse("team").unwrap();
        for outside in ["teammate/x", "other/x", "team", "x"] {
            assert_eq!(
                prefix.path_of(&Path::parse(outside).unwrap()),
                None,
                "{outside}"
            );
        }
        // Keys another client wrote that no virtual path names exactly.
        for odd in ["team/~x", "team/a\\b"] {
            assert_eq!(prefix.path_of(&Path::parse(odd).unwrap()), None, "{odd}");
        }
    }

    #[test]
    fn bad_prefixes_are_refused_with_the_reason() {
        assert_eq!(
            KeyPrefix::parse("a//b").unwrap_err().to_string(),
            "key prefix 'a//b' is not valid: it has an empty segment ('//')"
        );
        assert!(KeyPrefix::parse("a/../b").is_err());
        assert!(KeyPrefix::parse("./b").is_err());
        assert!(KeyPrefix::parse("a\nb").is_err());
    }
}
