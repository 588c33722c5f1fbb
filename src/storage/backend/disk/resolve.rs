//! Containment: turning a [`VirtualPath`] into a path beneath the mount's root handle, and
//! host I/O errors into [`Error`]s that name only virtual paths.
//!
//! Every open goes through the root `cap_std::fs::Dir`, which resolves beneath that handle
//! (`openat2` with `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS` on Linux, a checked
//! component-by-component walk elsewhere): `..` and symlinks that climb out, absolute symlinks
//! and magic links are refused by the kernel, not by string checks, and a symlink swapped in
//! between two calls is refused the same way at the moment of use.
//!
//! Changing operations (write, delete) additionally [`canonicalize`] the path first: every
//! symlink on the way is read and spliced in, so the change lands on the symlink's target inside
//! the root (a symlink that stays inside works; one that leaves is refused before anything is
//! created, even for new nested paths under it). The resulting path is then used through the
//! root handle again, so a swap after canonicalisation is still caught at use.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io;
use std::path::{Component, Path, PathBuf};

use cap_std::fs::Dir;

use crate::ground::path::VirtualPath;
use crate::storage::backend::Error;

/// Symlinks followed while canonicalising one path before giving up (Linux's own limit).
const MAX_SYMLINK_HOPS: usize = 40;

/// The root-relative host path of a virtual path: `"."` for the root, else `a/b/c`.
pub(super) fn relative(path: &VirtualPath) -> PathBuf {
    if path.is_root() {
        PathBuf::from(".")
    } else {
        PathBuf::from(path.as_str().trim_start_matches('/'))
    }
}

/// Whether `error` is cap-std's (or the kernel's) refusal of a path that leaves the root.
pub(super) fn is_escape(error: &io::Error) -> bool {
    // cap-std reports escapes as a custom PermissionDenied error with no OS code; a real
    // EACCES always carries its code. EXDEV is openat2's own RESOLVE_BENEATH refusal.
    (error.kind() == io::ErrorKind::PermissionDenied && error.raw_os_error().is_none())
        || error.raw_os_error() == Some(rustix::io::Errno::XDEV.raw_os_error())
}

/// Maps a host I/O error on `path` to the agent-facing [`Error`]. The message never carries a
/// host path: OS errors are re-described from their code alone.
pub(super) fn map_io(error: io::Error, path: &VirtualPath) -> Error {
    if is_escape(&error) {
        return Error::OutsideMount { path: path.clone() };
    }
    let path = path.clone();
    match error
        .raw_os_error()
        .map(rustix::io::Errno::from_raw_os_error)
    {
        Some(rustix::io::Errno::NOENT) => Error::NotFound { path },
        Some(rustix::io::Errno::NOTDIR) => Error::NotADirectory { path },
        Some(rustix::io::Errno::ISDIR) => Error::IsADirectory { path },
        Some(rustix::io::Errno::EXIST) => Error::AlreadyExists { path },
        Some(rustix::io::Errno::NOTEMPTY) => Error::DirectoryNotEmpty { path },
        Some(rustix::io::Errno::ROFS) => Error::ReadOnly { path },
        Some(rustix::io::Errno::LOOP) => Error::Io {
            path,
            message: "too many levels of symbolic links (a symlink loop?)".into(),
        },
        Some(code) => Error::Io {
            path,
            message: io::Error::from_raw_os_error(code.raw_os_error()).to_string(),
        },
        None if error.kind() == io::ErrorKind::NotFound => Error::NotFound { path },
        None => Error::Io {
            path,
            message: error.kind().to_string(),
        },
    }
}

/// A path beneath the root with every symlink resolved (as of the call): its components.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Canonical {
    components: Vec<OsString>,
}

impl Canonical {
    /// Whether any component is exactly `name` (e.g. `.git`).
    pub(super) fn has_component(&self, name: &str) -> bool {
        self.components.iter().any(|c| c == name)
    }

    /// Whether this path is `other` or lies below it.
    pub(super) fn starts_with(&self, other: &Canonical) -> bool {
        self.components.starts_with(&other.components)
    }

    /// The root-relative host path (`"."` for the root).
    pub(super) fn path(&self) -> PathBuf {
        if self.components.is_empty() {
            return PathBuf::from(".");
        }
        self.components.iter().collect()
    }

    /// The parent directory and the last name; `None` for the root.
    pub(super) fn split_last(&self) -> Option<(PathBuf, OsString)> {
        let (last, parent) = self.components.split_last()?;
        let parent = if parent.is_empty() {
            PathBuf::from(".")
        } else {
            parent.iter().collect()
        };
        Some((parent, last.clone()))
    }
}

/// Resolves every symlink of `path` beneath `root`, splicing relative targets in and refusing
/// absolute targets and any `..` that would climb above the root ([`Error::OutsideMount`]).
/// Components that do not exist yet are kept as given. A symlink at the last component is
/// followed only when `follow_last` (writes follow it to its target; deletes remove the link).
pub(super) fn canonicalize(
    root: &Dir,
    path: &VirtualPath,
    follow_last: bool,
) -> Result<Canonical, Error> {
    // A reserved name (`.mountfs-tmp*`) in any place is mountfs's own (attack review of issue
    // 41): refused, whether named or reached through a symbolic link.
    crate::storage::backend::refuse_reserved(path)?;
    let outside = || Error::OutsideMount { path: path.clone() };
    let mut done: Vec<OsString> = Vec::new();
    let mut todo: VecDeque<OsString> = path.components().map(OsString::from).collect();
    let mut hops = 0usize;
    // Once a component is missing nothing below it exists either: the rest is lexical.
    let mut missing = false;
    while let Some(component) = todo.pop_front() {
        if component == "." {
            continue;
        }
        if component == ".." {
            done.pop().ok_or_else(outside)?;
            continue;
        }
        if missing {
            done.push(component);
            continue;
        }
        let candidate: PathBuf = done.iter().chain(std::iter::once(&component)).collect();
        let is_last = todo.is_empty();
        match root.symlink_metadata(&candidate) {
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                missing = true;
                done.push(component);
            }
            Err(error) => return Err(map_io(error, path)),
            Ok(meta) if meta.file_type().is_symlink() && (follow_last || !is_last) => {
                hops += 1;
                if hops > MAX_SYMLINK_HOPS {
                    return Err(map_io(
                        io::Error::from_raw_os_error(rustix::io::Errno::LOOP.raw_os_error()),
                        path,
                    ));
                }
                let target = root
                    .read_link_contents(&candidate)
                    .map_err(|e| map_io(e, path))?;
                for part in target_components(&target)
                    .ok_or_else(outside)?
                    .into_iter()
                    .rev()
                {
                    todo.push_front(part);
                }
            }
            Ok(_) => done.push(component),
        }
    }
    if done.iter().any(|c| {
        c.to_str()
            .is_some_and(crate::ground::path::is_reserved_name)
    }) {
        return Err(Error::Unsupported {
            path: path.clone(),
            reason: format!(
                "it leads through a symbolic link to a name starting with {}, reserved for mountfs's own temporary files",
                crate::ground::path::RESERVED_PREFIX
            ),
        });
    }
    Ok(Canonical { components: done })
}

/// The components of a symlink target, `None` when it is absolute (it names a host path, which
/// is outside the mount by definition, as under `RESOLVE_BENEATH`).
fn target_components(target: &Path) -> Option<Vec<OsString>> {
    let mut parts = Vec::new();
    for component in target.components() {
        match component {
            Component::Normal(name) => parts.push(name.to_owned()),
            Component::ParentDir => parts.push(OsString::from("..")),
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> VirtualPath {
        VirtualPath::parse(s).unwrap()
    }

    fn setup() -> (tempfile::TempDir, Dir) {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("root/a/b")).unwrap();
        std::fs::write(tmp.path().join("root/a/b/f.txt"), "x").unwrap();
        std::fs::write(tmp.path().join("secret"), "s").unwrap();
        let root =
            Dir::open_ambient_dir(tmp.path().join("root"), cap_std::ambient_authority()).unwrap();
        (tmp, root)
    }

    #[test]
    fn inside_symlinks_are_spliced_in() {
        let (tmp, root) = setup();
        std::os::unix::fs::symlink("a/b", tmp.path().join("root/ab")).unwrap();
        std::os::unix::fs::symlink("../b/f.txt", tmp.path().join("root/a/b/g")).unwrap();
        let c = canonicalize(&root, &p("/ab/f.txt"), true).unwrap();
        assert_eq!(c.path(), PathBuf::from("a/b/f.txt"));
        let c = canonicalize(&root, &p("/ab/g"), true).unwrap();
        assert_eq!(c.path(), PathBuf::from("a/b/f.txt"));
        let c = canonicalize(&root, &p("/ab/g"), false).unwrap();
        assert_eq!(c.path(), PathBuf::from("a/b/g"));
        let c = canonicalize(&root, &p("/ab/new/deeper.txt"), true).unwrap();
        assert_eq!(c.path(), PathBuf::from("a/b/new/deeper.txt"));
    }

    #[test]
    fn outward_symlinks_are_refused() {
        let (tmp, root) = setup();
        std::os::unix::fs::symlink("../secret", tmp.path().join("root/up")).unwrap();
        std::os::unix::fs::symlink(tmp.path(), tmp.path().join("root/abs")).unwrap();
        std::os::unix::fs::symlink("a/../../x", tmp.path().join("root/sneaky")).unwrap();
        for path in ["/up", "/abs/secret", "/abs/new/file", "/sneaky/y"] {
            let e = canonicalize(&root, &p(path), true).unwrap_err();
            assert_eq!(e, Error::OutsideMount { path: p(path) }, "{path}");
        }
    }

    #[test]
    fn symlink_loops_are_an_io_error_not_a_hang() {
        let (tmp, root) = setup();
        std::os::unix::fs::symlink("loop", tmp.path().join("root/loop")).unwrap();
        let e = canonicalize(&root, &p("/loop"), true).unwrap_err();
        assert!(e.to_string().contains("symbolic links"), "{e}");
    }
}
