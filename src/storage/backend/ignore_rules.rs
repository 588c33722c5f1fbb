//! How `.ignore`, `.gitignore` and `.git/info/exclude` decide whether a path is ignored, shared
//! by the disk walk (which reads the files beneath its root handle) and the overlay (which
//! reads them through its view, so that a layer file is treated as a disk file in the same
//! place would be, and a layer's ignore file takes effect like one on disk).

use std::path::Path;
use std::sync::Arc;

use ignore::gitignore::{Gitignore, GitignoreBuilder};

/// The ignore files of one directory, relative to it, in the order that decides: `.ignore`
/// beats `.gitignore` beats `.git/info/exclude`.
pub(crate) const IGNORE_FILES: [&str; 3] = [".ignore", ".gitignore", ".git/info/exclude"];

/// Largest ignore file read; the rest is ignored (a `.gitignore` symlinked to a huge file, or
/// grown without bound, cannot exhaust memory).
pub(crate) const MAX_IGNORE_FILE_BYTES: u64 = 1024 * 1024;

/// The matchers of one directory, in [`IGNORE_FILES`] order.
pub(crate) type Matchers = Arc<[Option<Gitignore>; 3]>;

/// The matcher of one ignore file's `content`, for the directory `dir` (paths matched must
/// start with it); `None` when it holds no rule.
pub(crate) fn matcher(dir: &Path, content: &[u8]) -> Option<Gitignore> {
    let mut builder = GitignoreBuilder::new(dir);
    for line in String::from_utf8_lossy(content).lines() {
        let _ = builder.add_line(None, line);
    }
    builder.build().ok().filter(|m| !m.is_empty())
}

/// Whether `path` is ignored given the matchers of its ancestor directories, nearest first:
/// per kind, the deepest directory with a matching rule decides.
pub(crate) fn is_ignored(levels: &[Matchers], path: &Path, is_dir: bool) -> bool {
    is_ignored_in(levels.iter(), path, is_dir)
}

/// [`is_ignored`] over any sequence of levels, nearest first (the disk walk keeps them as a
/// chain from each directory up).
pub(crate) fn is_ignored_in<'a>(
    levels: impl Iterator<Item = &'a Matchers> + Clone,
    path: &Path,
    is_dir: bool,
) -> bool {
    for kind in 0..IGNORE_FILES.len() {
        for level in levels.clone() {
            if let Some(matcher) = &level[kind] {
                match matcher.matched(path, is_dir) {
                    ignore::Match::Ignore(_) => return true,
                    ignore::Match::Whitelist(_) => return false,
                    ignore::Match::None => {}
                }
            }
        }
    }
    false
}
