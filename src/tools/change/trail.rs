//! What one tool call changed, gathered while it runs: the change primitive's one recording
//! step (`change::record`) adds every file it records to the call's [`Trail`] (a task-local
//! scoped around the call by [`collect`], so concurrent calls of one session never mix). When
//! the call ends, the server reads the trail once: the audit log takes the files with their
//! versions before and after (`audit::record::change_of`), the change hub announces the paths
//! ([`Touched`]) to the subscriptions. Nobody re-reads the call's arguments to guess what changed.
//!
//! Outside a collected call (a test driving tools directly) noting does nothing.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use crate::audit::{FileChange, MAX_FILES_PER_ENTRY};
use crate::backend::Version;
use crate::path::VirtualPath;

/// Paths one call announces one by one; past this, the rest are announced as the one directory
/// holding them all (a huge recursive delete or directory move stays a bounded list).
pub const MAX_TOUCHED: usize = 1024;

/// One path a call changed, as the change hub announces it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Touched {
    /// The file or directory.
    pub path: VirtualPath,
    /// Whether something appeared or went there (a creation, a removal, either end of a
    /// move), which also changes the resource list.
    pub listing: bool,
}

/// What one call changed, once it ended.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Collected {
    /// Each file with its first version before and last version after, in order, at most
    /// [`MAX_FILES_PER_ENTRY`].
    pub files: Vec<FileChange>,
    /// Files beyond [`MAX_FILES_PER_ENTRY`].
    pub more_files: u64,
    /// Every path to announce, each once (files, and directories or links removed whole).
    pub touched: Vec<Touched>,
}

/// The files and paths one call changed so far.
#[derive(Debug, Default)]
struct Trail {
    collected: Mutex<Gathering>,
}

#[derive(Debug, Default)]
struct Gathering {
    files: Vec<FileChange>,
    more_files: u64,
    touched: BTreeMap<VirtualPath, bool>,
    /// The directory holding every path beyond [`MAX_TOUCHED`], and whether any listed.
    beyond: Option<(VirtualPath, bool)>,
}

tokio::task_local! {
    static TRAIL: Trail;
}

/// Runs `call` collecting what it changes; returns its output and what it changed (also when
/// it failed part-way: what landed is in the trail).
pub async fn collect<F: std::future::Future>(call: F) -> (F::Output, Collected) {
    TRAIL
        .scope(Trail::default(), async move {
            let output = call.await;
            let collected = TRAIL.try_with(Trail::take).unwrap_or_default();
            (output, collected)
        })
        .await
}

impl Trail {
    fn take(&self) -> Collected {
        let gathering = std::mem::take(
            &mut *self
                .collected
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        let mut touched: Vec<Touched> = gathering
            .touched
            .into_iter()
            .map(|(path, listing)| Touched { path, listing })
            .collect();
        if let Some((path, listing)) = gathering.beyond {
            touched.push(Touched { path, listing });
        }
        Collected {
            files: gathering.files,
            more_files: gathering.more_files,
            touched,
        }
    }
}

impl Gathering {
    fn file(&mut self, path: &str, before: Option<&Version>, after: Option<&Version>) {
        let after = after.map(|v| v.as_str().to_owned());
        // A file changed twice in one call (a patch's rename, a move's copy then removal of
        // one path) is one change: from its first version to its last.
        if let Some(seen) = self.files.iter_mut().find(|f| f.path == path) {
            seen.after = after;
            return;
        }
        if self.files.len() >= MAX_FILES_PER_ENTRY {
            self.more_files += 1;
            return;
        }
        self.files.push(FileChange {
            path: path.to_owned(),
            before: before.map(|v| v.as_str().to_owned()),
            after,
        });
    }

    fn touch(&mut self, path: &VirtualPath, listing: bool) {
        if let Some(seen) = self.touched.get_mut(path) {
            *seen |= listing;
            return;
        }
        if self.touched.len() < MAX_TOUCHED {
            self.touched.insert(path.clone(), listing);
            return;
        }
        self.beyond = Some(match self.beyond.take() {
            None => (path.clone(), listing),
            Some((dir, listed)) => (common_dir(&dir, path), listed || listing),
        });
    }
}

/// The deepest path that is `a` or `b` or holds them both.
fn common_dir(a: &VirtualPath, b: &VirtualPath) -> VirtualPath {
    let mut dir = a.clone();
    while !b.starts_with(&dir) {
        match dir.parent() {
            Some(parent) => dir = parent,
            None => break,
        }
    }
    dir
}

/// Notes that the file at `path` went from `before` to `after` (`None`: absent then): for the
/// audit log with its versions, and announced (listing when it appeared or went).
pub(super) fn note_file(path: &VirtualPath, before: Option<&Version>, after: Option<&Version>) {
    let _ = TRAIL.try_with(|trail| {
        let mut gathering = trail
            .collected
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        gathering.file(path.as_str(), before, after);
        gathering.touch(path, before.is_none() || after.is_none());
    });
}

/// Notes that what was at `path` (a symbolic link, a directory) is gone without being a file
/// change: announced, not a file of the audit entry.
pub(super) fn note_gone(path: &VirtualPath) {
    let _ = TRAIL.try_with(|trail| {
        trail
            .collected
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .touch(path, true);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version(text: &str) -> Version {
        Version::from_raw(text)
    }

    fn p(text: &str) -> VirtualPath {
        VirtualPath::parse(text).unwrap()
    }

    #[tokio::test]
    async fn a_call_collects_each_file_once_from_first_to_last_version() {
        let (a, b) = (p("/a"), p("/b"));
        let ((), collected) = collect(async {
            note_file(&a, None, Some(&version("1")));
            note_file(&b, Some(&version("7")), None);
            note_file(&a, Some(&version("1")), Some(&version("2")));
        })
        .await;
        assert_eq!(collected.more_files, 0);
        assert_eq!(
            collected.files,
            vec![
                FileChange {
                    path: "/a".into(),
                    before: None,
                    after: Some("2".into())
                },
                FileChange {
                    path: "/b".into(),
                    before: Some("7".into()),
                    after: None
                },
            ]
        );
        // Outside a collected call, nothing is noted and nothing fails.
        note_file(&a, None, None);
    }

    #[tokio::test]
    async fn concurrent_calls_keep_their_own_trails() {
        let one = tokio::spawn(collect(async {
            note_file(&p("/one"), None, None);
            tokio::task::yield_now().await;
        }));
        let two = tokio::spawn(collect(async {
            tokio::task::yield_now().await;
            note_file(&p("/two"), None, None);
        }));
        assert_eq!(one.await.unwrap().1.files[0].path, "/one");
        assert_eq!(two.await.unwrap().1.files.len(), 1);
    }

    #[tokio::test]
    async fn only_appearing_or_going_paths_change_the_listing() {
        let ((), collected) = collect(async {
            note_file(&p("/edited"), Some(&version("1")), Some(&version("2")));
            note_file(&p("/created"), None, Some(&version("1")));
            note_file(&p("/removed"), Some(&version("1")), None);
            note_gone(&p("/dir"));
        })
        .await;
        assert_eq!(
            collected.touched,
            vec![
                Touched {
                    path: p("/created"),
                    listing: true
                },
                Touched {
                    path: p("/dir"),
                    listing: true
                },
                Touched {
                    path: p("/edited"),
                    listing: false
                },
                Touched {
                    path: p("/removed"),
                    listing: true
                },
            ]
        );
        assert_eq!(
            collected.files.len(),
            3,
            "a directory gone is not a file change"
        );
    }

    #[tokio::test]
    async fn paths_beyond_the_bound_are_announced_as_the_directory_holding_them() {
        let ((), collected) = collect(async {
            for i in 0..MAX_TOUCHED + 10 {
                let dir = if i % 2 == 0 { "/d/x" } else { "/d/y" };
                note_file(&p(&format!("{dir}/f{i}")), Some(&version("1")), None);
            }
        })
        .await;
        assert_eq!(collected.touched.len(), MAX_TOUCHED + 1);
        assert_eq!(
            collected.touched.last(),
            Some(&Touched {
                path: p("/d"),
                listing: true
            })
        );
    }
}
