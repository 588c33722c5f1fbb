//! Where lines start in big files: a per-mount index of checkpoints, learnt while reading
//! windows and filled by one background thread per big file an agent opens, so that paging on
//! through a gigabyte log starts each window at most one block away.
//!
//! The index is keyed by the file's identity version (see `version`), so a changed file never
//! uses a stale one. Streaming the window itself is `window`'s.

use std::io;

use crate::storage::backend::Version;

/// Reads into `buffer` from `offset` until it is full or the file ends; returns the length.
pub(super) fn read_full_at(
    file: &std::fs::File,
    buffer: &mut [u8],
    offset: u64,
) -> io::Result<usize> {
    use std::os::unix::fs::FileExt;
    let mut filled = 0;
    while filled < buffer.len() {
        match file.read_at(&mut buffer[filled..], offset + filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// A point of a file where the number of newlines before it is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Checkpoint {
    /// Newlines in `[0, byte)`.
    pub(super) lines: u64,
    /// The byte offset.
    pub(super) byte: u64,
}

/// Bytes counted per block when jumping through a big file (two blocks at once, one per core).
pub(super) const BLOCK_BYTES: usize = 4 * 1024 * 1024;
/// Big files whose checkpoints are remembered; beyond it the memory is cleared and rebuilt.
const MAX_INDEXED_FILES: usize = 64;

/// Where the lines of big files start, learnt while skipping: one checkpoint per
/// [`BLOCK_BYTES`] block (16 bytes per 4 MiB, so 4 KiB for a gigabyte file), keyed by the
/// file's identity version, so a changed file never uses a stale index. The first window deep
/// in a file costs one pass over the bytes before it, counted on two threads at memory speed;
/// every later window (an agent paging through a log) starts at most one block away.
#[derive(Debug, Default)]
pub(super) struct LineIndex {
    files: std::sync::Mutex<std::collections::HashMap<Version, Vec<Checkpoint>>>,
    /// Files being indexed by a background thread, so that one is started per file at most.
    indexing: std::sync::Mutex<std::collections::HashSet<Version>>,
}

impl LineIndex {
    /// Counts every checkpoint of the file on a background thread, unless it is known already
    /// or being counted. One pass over the file at page-cache speed, holding two blocks.
    pub(super) fn index_in_background(
        self: &std::sync::Arc<Self>,
        version: &Version,
        file: std::fs::File,
        size: u64,
    ) {
        let known_to_end = self
            .checkpoints()
            .get(version)
            .and_then(|c| c.last().copied())
            .is_some_and(|last| last.byte + BLOCK_BYTES as u64 >= size);
        if known_to_end {
            return;
        }
        let started = self
            .indexing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(version.clone());
        if !started {
            return;
        }
        let index = self.clone();
        let counted = version.clone();
        let spawned = std::thread::Builder::new()
            .name("mountfs-line-index".into())
            .spawn(move || {
                if let Err(error) = index.seek(&counted, &file, size, u64::MAX) {
                    tracing::debug!(%error, "background line indexing stopped");
                }
                index
                    .indexing
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .remove(&counted);
            });
        if spawned.is_err() {
            self.indexing
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .remove(version);
        }
    }

    fn checkpoints(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<Version, Vec<Checkpoint>>> {
        // Each update replaces one value whole: a poisoned map is still consistent.
        self.files
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The furthest known point at or before line `wanted` (0-based: newlines to pass),
    /// counting forward in blocks from the best remembered checkpoint. The wanted line starts
    /// within one block after the answer.
    pub(super) fn seek(
        &self,
        version: &Version,
        file: &std::fs::File,
        size: u64,
        wanted: u64,
    ) -> io::Result<Checkpoint> {
        let mut known = self.checkpoints().get(version).cloned().unwrap_or_default();
        let mut start = known
            .iter()
            .rev()
            .find(|c| c.lines < wanted || (wanted == 0 && c.byte == 0))
            .copied()
            .unwrap_or(Checkpoint { lines: 0, byte: 0 });
        if wanted == 0 {
            return Ok(Checkpoint { lines: 0, byte: 0 });
        }
        if wanted != u64::MAX {
            self.wait_for_background(version, wanted);
            known = self.checkpoints().get(version).cloned().unwrap_or_default();
            start = known
                .iter()
                .rev()
                .find(|c| c.lines < wanted)
                .copied()
                .unwrap_or(Checkpoint { lines: 0, byte: 0 });
        }
        let mut learnt = Vec::new();
        let mut first = vec![0u8; BLOCK_BYTES];
        let mut second = vec![0u8; BLOCK_BYTES];
        while start.byte < size {
            let next_byte = start.byte + BLOCK_BYTES as u64;
            let (one, two) = std::thread::scope(|scope| {
                let helper = scope.spawn(|| {
                    let len = read_full_at(file, &mut second, next_byte)?;
                    Ok::<_, io::Error>((len, bytecount::count(&second[..len], b'\n') as u64))
                });
                let len = read_full_at(file, &mut first, start.byte)?;
                let one = (len, bytecount::count(&first[..len], b'\n') as u64);
                let two = helper
                    .join()
                    .unwrap_or_else(|_| Err(io::Error::other("a counting thread failed")))?;
                Ok::<_, io::Error>((one, two))
            })?;
            let after_one = Checkpoint {
                lines: start.lines + one.1,
                byte: start.byte + one.0 as u64,
            };
            if after_one.lines >= wanted || one.0 < BLOCK_BYTES {
                break;
            }
            learnt.push(after_one);
            let after_two = Checkpoint {
                lines: after_one.lines + two.1,
                byte: after_one.byte + two.0 as u64,
            };
            if after_two.lines >= wanted || two.0 < BLOCK_BYTES {
                start = after_one;
                break;
            }
            learnt.push(after_two);
            start = after_two;
            // Publish progress as it goes, so a window asked for meanwhile can use it.
            if learnt.len() >= PUBLISH_EVERY_CHECKPOINTS {
                self.remember(version, &mut known, &mut learnt);
            }
        }
        self.remember(version, &mut known, &mut learnt);
        Ok(start)
    }

    /// Adds `learnt` to the checkpoints remembered for `version`.
    fn remember(
        &self,
        version: &Version,
        known: &mut Vec<Checkpoint>,
        learnt: &mut Vec<Checkpoint>,
    ) {
        if learnt.is_empty() {
            return;
        }
        known.append(learnt);
        known.sort_by_key(|c| c.byte);
        known.dedup();
        let mut files = self.checkpoints();
        if files.len() >= MAX_INDEXED_FILES && !files.contains_key(version) {
            files.clear();
        }
        let merged = match files.get(version) {
            Some(theirs) => {
                let mut merged: Vec<Checkpoint> =
                    theirs.iter().chain(known.iter()).copied().collect();
                merged.sort_by_key(|c| c.byte);
                merged.dedup();
                merged
            }
            None => known.clone(),
        };
        files.insert(version.clone(), merged);
    }

    /// While a background pass is indexing `version` and has not yet reached line `wanted`,
    /// waits for it rather than counting the same bytes a second time beside it.
    fn wait_for_background(&self, version: &Version, wanted: u64) {
        let deadline = std::time::Instant::now() + BACKGROUND_WAIT_LIMIT;
        loop {
            let running = self
                .indexing
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .contains(version);
            let reached = self
                .checkpoints()
                .get(version)
                .and_then(|c| c.last().copied())
                .is_some_and(|last| last.lines >= wanted);
            if !running || reached || std::time::Instant::now() >= deadline {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}

/// How many new checkpoints a counting pass gathers before publishing them (64 MiB of file).
const PUBLISH_EVERY_CHECKPOINTS: usize = 16;
/// Longest a window waits for a background pass before counting on its own.
const BACKGROUND_WAIT_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

#[cfg(test)]
impl LineIndex {
    /// Whether a background pass is counting `version` now.
    pub(super) fn is_indexing(&self, version: &Version) -> bool {
        self.indexing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(version)
    }

    /// The checkpoints remembered for `version`.
    pub(super) fn known(&self, version: &Version) -> Option<Vec<Checkpoint>> {
        self.checkpoints().get(version).cloned()
    }

    /// Every checkpoint remembered, of every file.
    pub(super) fn all_known(&self) -> Vec<Checkpoint> {
        self.checkpoints().values().flatten().copied().collect()
    }
}
