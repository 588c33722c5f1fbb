//! Where lines start in the big files of a shell mount: the byte offsets of line starts the
//! target reported while finding windows, remembered per file *version*, so that the next
//! window deep in the same file starts reading at the nearest known line start at or before it
//! (the target seeks there with `dd skip`) instead of reading through the file from its start.
//! The disk mount keeps the same kind of checkpoints (`disk::line_index`).
//!
//! A file's marks are only as good as the identity they are filed under, and a shell mount's
//! identity of a big file is its `stat` stamp (`dev:ino:size:mtime:ctime`, with nanoseconds
//! where the target's `stat` shows them; without `stat -c`, the inode, size and the mtime and
//! ctime in seconds from `ls`). A stamp that is equal does not by itself mean the content is:
//! the mtime can be set back (`touch -d`) and a change made within the same timestamp tick
//! keeps every time. The ctime cannot be set by a user, so marks are filed only when the
//! file's ctime is at least two seconds older than the target's clock read just after the
//! stamp was taken ([`trusted`]): any later change of the file gets a newer ctime, hence
//! another stamp, and finds no marks. As a second guard the target checks that the byte
//! before a mark is a line feed before it uses it, and the server drops the file's marks
//! when it is not. What neither can see is a target whose clock or file system misreports
//! ctimes (a clock set back, a FUSE file system that never updates them): the limits of any
//! identity a shell can read.
//!
//! Memory is bounded: at most [`MAX_FILES`] files (the least recently used one goes first),
//! each with at most [`MAX_MARKS_PER_FILE`] marks (the one closest to its predecessor goes
//! first, so that the marks stay spread through the file), each 16 bytes.

use std::collections::HashMap;
use std::sync::Mutex;

/// Files whose marks are remembered per mount.
pub(super) const MAX_FILES: usize = 64;
/// Marks remembered per file.
pub(super) const MAX_MARKS_PER_FILE: usize = 256;
/// Longest identity kept (a stamp is ~100 bytes; anything longer is not remembered).
const MAX_KEY_BYTES: usize = 512;

/// A line start: `lines` line feeds come before byte `byte`, and the byte before it is a line
/// feed (or it is the start of the file).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Mark {
    pub(super) lines: u64,
    pub(super) byte: u64,
}

#[derive(Debug)]
struct FileMarks {
    /// The identity the marks are filed under: the stamp line and the ctime token, as the
    /// target printed them.
    key: String,
    /// Sorted by `byte` (and so by `lines`), without duplicates.
    marks: Vec<Mark>,
    /// When the file was last used (the cache's clock).
    used: u64,
}

#[derive(Debug, Default)]
struct Inner {
    files: HashMap<String, FileMarks>,
    clock: u64,
}

/// The marks of a mount's big files (see the module doc).
#[derive(Debug, Default)]
pub(super) struct WindowMarks {
    inner: Mutex<Inner>,
}

/// Whether marks of a file whose ctime is `ctime` (seconds since the epoch) may be filed under
/// its stamp, the target's clock reading `now` just after the stamp was taken: the file has
/// not changed for two seconds, so a change after the stamp gets a newer ctime (a second at
/// least, even on a file system that keeps whole seconds).
pub(super) fn trusted(ctime: Option<i64>, now: Option<i64>) -> bool {
    matches!((ctime, now), (Some(ctime), Some(now)) if ctime > 0 && ctime.saturating_add(1) < now)
}

impl WindowMarks {
    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Every update leaves the map consistent: a poisoned lock's value is still usable.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The furthest mark of `path` where the window starting after `wanted` line feeds can
    /// begin (its `lines` at most `wanted`), and the identity it is filed under; `None`
    /// when nothing past the file's start is known.
    pub(super) fn best(&self, path: &str, wanted: u64) -> Option<(String, Mark)> {
        let mut inner = self.inner();
        inner.clock += 1;
        let clock = inner.clock;
        let file = inner.files.get_mut(path)?;
        file.used = clock;
        let at = file.marks.partition_point(|m| m.lines <= wanted);
        let mark = *file.marks.get(at.checked_sub(1)?)?;
        (mark.byte > 0).then(|| (file.key.clone(), mark))
    }

    /// What a window call learnt about `path`, whose identity is now `key`: `marks` are line
    /// starts of that content. They are added to the file's when it is filed under `key`
    /// already, or filed anew when `trusted` (see [`trusted`]); otherwise the file's marks are
    /// dropped (its content changed and the new one is too recent to be filed).
    pub(super) fn learn(&self, path: &str, key: &str, trusted: bool, marks: &[Mark]) {
        let mut inner = self.inner();
        inner.clock += 1;
        let clock = inner.clock;
        let same = inner.files.get(path).is_some_and(|f| f.key == key);
        if !same {
            inner.files.remove(path);
            if !trusted || key.len() > MAX_KEY_BYTES || key.contains('\n') {
                return;
            }
            if inner.files.len() >= MAX_FILES
                && let Some(oldest) = inner
                    .files
                    .iter()
                    .min_by_key(|(_, f)| f.used)
                    .map(|(p, _)| p.clone())
            {
                inner.files.remove(&oldest);
            }
            inner.files.insert(
                path.to_owned(),
                FileMarks {
                    key: key.to_owned(),
                    marks: Vec::new(),
                    used: clock,
                },
            );
        }
        let Some(file) = inner.files.get_mut(path) else {
            return;
        };
        file.used = clock;
        for mark in marks.iter().filter(|m| m.byte > 0) {
            let at = file.marks.partition_point(|m| m.byte < mark.byte);
            if file.marks.get(at) == Some(mark) {
                continue;
            }
            file.marks.insert(at, *mark);
        }
        while file.marks.len() > MAX_MARKS_PER_FILE {
            // The mark closest to the one before it (the file's start for the first).
            let mut closest = 0;
            let mut gap = u64::MAX;
            let mut before = 0;
            for (index, mark) in file.marks.iter().enumerate() {
                let this = mark.byte - before;
                if this < gap {
                    gap = this;
                    closest = index;
                }
                before = mark.byte;
            }
            file.marks.remove(closest);
        }
    }

    /// Forgets the marks of `path` (they proved wrong).
    pub(super) fn forget(&self, path: &str) {
        self.inner().files.remove(path);
    }

    /// How many files and marks are remembered.
    pub(super) fn size(&self) -> (usize, usize) {
        let inner = self.inner();
        (
            inner.files.len(),
            inner.files.values().map(|f| f.marks.len()).sum(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(lines: u64, byte: u64) -> Mark {
        Mark { lines, byte }
    }

    #[test]
    fn the_best_mark_is_the_furthest_at_or_before_the_wanted_line() {
        let marks = WindowMarks::default();
        marks.learn(
            "a",
            "k1",
            true,
            &[mark(10, 100), mark(30, 300), mark(20, 200)],
        );
        assert_eq!(marks.best("a", 5), None, "nothing past the start");
        assert_eq!(marks.best("a", 10), Some(("k1".to_owned(), mark(10, 100))));
        assert_eq!(marks.best("a", 29), Some(("k1".to_owned(), mark(20, 200))));
        assert_eq!(
            marks.best("a", 1000),
            Some(("k1".to_owned(), mark(30, 300)))
        );
        assert_eq!(marks.best("b", 1000), None);
    }

    #[test]
    fn another_identity_replaces_the_marks_only_when_trusted() {
        let marks = WindowMarks::default();
        marks.learn("a", "k1", true, &[mark(10, 100)]);
        // The same identity adds marks even when the answer alone would not be trusted.
        marks.learn("a", "k1", false, &[mark(20, 200)]);
        assert_eq!(marks.size(), (1, 2));
        // Another identity, too recent: the old marks go and nothing is filed.
        marks.learn("a", "k2", false, &[mark(30, 300)]);
        assert_eq!(marks.best("a", 1000), None);
        assert_eq!(marks.size(), (0, 0));
        marks.learn("a", "k3", true, &[mark(40, 400)]);
        assert_eq!(
            marks.best("a", 1000),
            Some(("k3".to_owned(), mark(40, 400)))
        );
        marks.forget("a");
        assert_eq!(marks.best("a", 1000), None);
    }

    #[test]
    fn only_a_ctime_two_seconds_older_than_the_clock_is_trusted() {
        assert!(trusted(Some(100), Some(102)));
        assert!(!trusted(Some(100), Some(101)));
        assert!(!trusted(Some(100), Some(100)));
        assert!(!trusted(None, Some(102)));
        assert!(!trusted(Some(100), None));
        assert!(!trusted(Some(0), Some(102)), "no ctime shown");
    }

    #[test]
    fn memory_is_bounded_per_file_and_in_files() {
        let marks = WindowMarks::default();
        // Many marks of one file: at most MAX_MARKS_PER_FILE stay, spread through it.
        let many: Vec<Mark> = (1..=4 * MAX_MARKS_PER_FILE as u64)
            .map(|i| mark(i * 10, i * 1000))
            .collect();
        marks.learn("big", "k", true, &many);
        assert_eq!(marks.size(), (1, MAX_MARKS_PER_FILE));
        let (_, last) = marks.best("big", u64::MAX).unwrap();
        assert_eq!(last, *many.last().unwrap(), "the furthest mark stays");
        let (_, middle) = marks
            .best("big", 2 * MAX_MARKS_PER_FILE as u64 * 10)
            .unwrap();
        assert!(
            middle.lines + 10 * 8 >= 2 * MAX_MARKS_PER_FILE as u64 * 10,
            "marks stay spread: {middle:?}"
        );
        // Many files: at most MAX_FILES, the least recently used going first.
        for i in 0..MAX_FILES {
            marks.learn(&format!("f{i}"), "k", true, &[mark(1, 10)]);
        }
        assert_eq!(marks.size().0, MAX_FILES);
        assert!(marks.best("big", u64::MAX).is_none(), "the oldest went");
        marks.best("f0", 5); // f0 used: f1 is now the oldest
        marks.learn("new", "k", true, &[mark(1, 10)]);
        assert_eq!(marks.size().0, MAX_FILES);
        assert!(marks.best("f0", 5).is_some());
        assert!(marks.best("f1", 5).is_none());
        let (files, total) = marks.size();
        assert!(total <= files * MAX_MARKS_PER_FILE);
    }

    #[test]
    fn marks_at_the_start_or_repeated_are_not_kept() {
        let marks = WindowMarks::default();
        marks.learn("a", "k", true, &[mark(0, 0), mark(5, 50), mark(5, 50)]);
        assert_eq!(marks.size(), (1, 1));
    }
}
