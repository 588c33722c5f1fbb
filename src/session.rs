//! Per-session state: the file system this session sees, its read ledger (read-before-edit and
//! staleness, by [`Version`]), its undo history, and the per-file locks that make parallel edits
//! from one session land one after another instead of failing as stale.
//!
//! One MCP connection is one session. Its `memory` mounts are its own; disk and store mounts are
//! shared with every other session of the process (see `mounts.rs`).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::OwnedMutexGuard;

use crate::backend::{CompositeBackend, Version};
use crate::path::VirtualPath;

/// How many undo steps are kept per file.
pub const UNDO_STEPS_PER_FILE: usize = 20;
/// How many bytes of earlier contents one session keeps for undo, over all files; the oldest
/// steps are dropped first.
pub const UNDO_BYTES_PER_SESSION: usize = 64 * 1024 * 1024;

/// Server-wide options a session applies to writes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteOptions {
    /// Add a final newline to text written when it lacks one (`--ensure-final-newline`).
    pub ensure_final_newline: bool,
}

/// Which version of each file this session last read or wrote.
#[derive(Debug, Default)]
pub struct ReadLedger {
    versions: Mutex<HashMap<VirtualPath, Version>>,
}

impl ReadLedger {
    /// Records that the session has seen `version` of `path`.
    pub fn record(&self, path: &VirtualPath, version: &Version) {
        self.lock().insert(path.clone(), version.clone());
    }

    /// The version last seen, if the file was read in this session.
    pub fn seen(&self, path: &VirtualPath) -> Option<Version> {
        self.lock().get(path).cloned()
    }

    /// Forgets a file (deleted by this session).
    pub fn forget(&self, path: &VirtualPath) {
        self.lock().remove(path);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<VirtualPath, Version>> {
        // Each update is one insert/remove: a poisoned map is still consistent.
        self.versions.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One change this session made to a file, enough to take it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UndoStep {
    /// The content before the change; `None` when the change created the file.
    pub before: Option<Vec<u8>>,
    /// The version the change produced; `None` when the change deleted the file. Undo is
    /// refused when the file no longer has it (someone else changed it since).
    pub after: Option<Version>,
}

impl UndoStep {
    fn weight(&self) -> usize {
        self.before.as_ref().map_or(0, Vec::len)
    }
}

/// Bounded per-file undo stacks.
#[derive(Debug, Default)]
pub struct UndoHistory {
    inner: Mutex<UndoState>,
}

#[derive(Debug, Default)]
struct UndoState {
    stacks: HashMap<VirtualPath, VecDeque<UndoStep>>,
    /// Every push in order, to evict the session's oldest steps first.
    order: VecDeque<VirtualPath>,
    bytes: usize,
}

impl UndoHistory {
    /// Remembers a change to `path`.
    pub fn push(&self, path: &VirtualPath, step: UndoStep) {
        let mut state = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        state.bytes += step.weight();
        let stack = state.stacks.entry(path.clone()).or_default();
        stack.push_back(step);
        let mut dropped = 0;
        if stack.len() > UNDO_STEPS_PER_FILE {
            dropped = stack.pop_front().map_or(0, |s| s.weight());
        }
        state.bytes -= dropped;
        state.order.push_back(path.clone());
        while state.bytes > UNDO_BYTES_PER_SESSION {
            let Some(oldest) = state.order.pop_front() else {
                break;
            };
            let freed = state
                .stacks
                .get_mut(&oldest)
                .and_then(VecDeque::pop_front)
                .map_or(0, |s| s.weight());
            state.bytes -= freed;
        }
    }

    /// Takes the most recent step for `path`, if any.
    pub fn pop(&self, path: &VirtualPath) -> Option<UndoStep> {
        let mut state = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let step = state.stacks.get_mut(path)?.pop_back()?;
        state.bytes -= step.weight();
        Some(step)
    }

    /// Puts a step back (an undo that was refused).
    pub fn restore(&self, path: &VirtualPath, step: UndoStep) {
        let mut state = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        state.bytes += step.weight();
        state
            .stacks
            .entry(path.clone())
            .or_default()
            .push_back(step);
    }

    /// How many steps are kept for `path`.
    pub fn depth(&self, path: &VirtualPath) -> usize {
        let state = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        state.stacks.get(path).map_or(0, VecDeque::len)
    }
}

/// One session (see the module doc).
#[derive(Debug)]
pub struct Session {
    /// The file system as this session sees it.
    pub backend: Arc<CompositeBackend>,
    /// Versions read.
    pub ledger: ReadLedger,
    /// Changes made.
    pub undo: UndoHistory,
    /// Write options.
    pub write_options: WriteOptions,
    locks: Mutex<HashMap<VirtualPath, Arc<tokio::sync::Mutex<()>>>>,
}

impl Session {
    /// A new session over `backend`.
    pub fn new(backend: Arc<CompositeBackend>, write_options: WriteOptions) -> Self {
        Self {
            backend,
            ledger: ReadLedger::default(),
            undo: UndoHistory::default(),
            write_options,
            locks: Mutex::new(HashMap::new()),
        }
    }

    /// Serialises this session's changes to one file: held from the read of the file to the
    /// ledger update after the write, so a second edit waits and then sees the first's result.
    /// (A tokio mutex is FIFO, so edits land in the order they arrived.)
    pub async fn lock_file(&self, path: &VirtualPath) -> OwnedMutexGuard<()> {
        let lock = {
            let mut locks = self.locks.lock().unwrap_or_else(PoisonError::into_inner);
            // Drop locks nobody holds, so the map does not grow with every file ever touched.
            if locks.len() > 1024 {
                locks.retain(|_, l| Arc::strong_count(l) > 1);
            }
            locks.entry(path.clone()).or_default().clone()
        };
        lock.lock_owned().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> VirtualPath {
        VirtualPath::parse(s).unwrap()
    }

    #[test]
    fn undo_keeps_at_most_twenty_steps_per_file() {
        let history = UndoHistory::default();
        for i in 0..30u8 {
            history.push(
                &p("/a"),
                UndoStep {
                    before: Some(vec![i]),
                    after: None,
                },
            );
        }
        assert_eq!(history.depth(&p("/a")), UNDO_STEPS_PER_FILE);
        assert_eq!(history.pop(&p("/a")).unwrap().before, Some(vec![29]));
    }

    #[test]
    fn undo_memory_is_bounded_per_session() {
        let history = UndoHistory::default();
        let big = vec![0u8; UNDO_BYTES_PER_SESSION / 4 + 1];
        for name in ["/a", "/b", "/c", "/d", "/e"] {
            history.push(
                &p(name),
                UndoStep {
                    before: Some(big.clone()),
                    after: None,
                },
            );
        }
        assert_eq!(history.depth(&p("/a")), 0, "oldest evicted first");
        assert_eq!(history.depth(&p("/e")), 1);
    }

    #[test]
    fn ledger_records_and_forgets() {
        let ledger = ReadLedger::default();
        let v = Version::of_content(b"x");
        ledger.record(&p("/a"), &v);
        assert_eq!(ledger.seen(&p("/a")), Some(v));
        ledger.forget(&p("/a"));
        assert_eq!(ledger.seen(&p("/a")), None);
    }
}
