//! Per-session state: the file system this session sees, its read ledger (read-before-edit and
//! staleness, by [`Version`]), its undo history, and the per-file locks that make parallel edits
//! from one session land one after another instead of failing as stale (in arrival order, by the
//! tickets of [`crate::state::arrival`]).
//!
//! One MCP connection is one session. Its `memory` mounts are its own; disk and store mounts are
//! shared with every other session of the process (see `mounts.rs`).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use tokio::sync::OwnedMutexGuard;

use crate::ground::limits::Limits;
use crate::ground::path::VirtualPath;
use crate::ground::quota::MemoryAccount;
use crate::state::arrival::{ArrivalOrder, Turn};
use crate::state::call_trail::CallTrail;
use crate::storage::backend::{AsideFile, Router, Version};

/// How many undo steps are kept per file.
pub const UNDO_STEPS_PER_FILE: usize = 20;
/// How many bytes of earlier contents one session keeps for undo by default, over all files
/// (`--max-undo-memory-bytes`); the oldest steps are dropped first.
pub const UNDO_BYTES_PER_SESSION: usize =
    crate::ground::limits::DEFAULT_MAX_UNDO_MEMORY_BYTES as usize;

/// Server-wide options a session applies to writes.
#[derive(Debug, Clone, Default)]
pub struct WriteOptions {
    /// Add a final newline to text written when it lacks one (`--ensure-final-newline`).
    pub ensure_final_newline: bool,
    /// The memory bounds every tool keeps (see [`crate::ground::limits`]).
    pub limits: Limits,
    /// Whether `execute` is offered, and sandboxed (`--allow-exec[=MODE]`).
    pub exec: Option<crate::storage::exec::ExecMode>,
    /// What `execute`'s sandbox hides and whether it limits reads (set at start-up).
    pub sandbox: crate::storage::exec::namespace::SandboxPolicy,
    /// What a person is asked about before it changes anything (`--confirm`, issue 46);
    /// `None`: nothing, and no call does any work for it.
    pub confirm: Option<std::sync::Arc<crate::ground::confirm_policy::ConfirmPolicy>>,
}

/// Most bytes of one file's text the ledger keeps (see [`ReadLedger`]).
pub const LEDGER_TEXT_MAX_FILE_BYTES: usize = 256 * 1024;
/// Most bytes of text the ledger keeps over all files of a session; the oldest go first.
pub const LEDGER_TEXT_MAX_SESSION_BYTES: usize = 2 * 1024 * 1024;

/// Which version of each file this session last read or wrote, and, within bounds, the text it
/// saw then.
///
/// The version is what read-before-edit and staleness are checked against. The text (LF, as
/// `read_file` showed it or an edit wrote it) only serves to tell the agent which lines changed
/// when it edits a file someone else changed since (stale-but-safe edits). It is kept for a file
/// read whole or written by an edit, when it is at most [`LEDGER_TEXT_MAX_FILE_BYTES`], and for
/// at most [`LEDGER_TEXT_MAX_SESSION_BYTES`] over the session (the oldest texts are dropped
/// first, their versions kept). Without it the answer says the file changed, without lines.
#[derive(Debug, Default)]
pub struct ReadLedger {
    inner: Mutex<LedgerState>,
}

#[derive(Debug, Default)]
struct LedgerState {
    seen: HashMap<VirtualPath, Seen>,
    /// Bytes of all texts kept.
    text_bytes: usize,
    /// Counter giving each kept text its age, to drop the oldest first.
    serial: u64,
}

/// What the session saw of one file.
#[derive(Debug, Clone)]
struct Seen {
    version: Version,
    /// The text seen, with the serial it was kept at.
    text: Option<(u64, Arc<str>)>,
}

/// What a session last saw of a file: its version and, when kept, its LF text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenFile {
    /// The version read or written.
    pub version: Version,
    /// The text then (LF line endings), when the ledger kept it.
    pub text: Option<Arc<str>>,
}

impl ReadLedger {
    /// Records that the session has seen `version` of `path` (any text kept for it is dropped).
    pub fn record(&self, path: &VirtualPath, version: &Version) {
        let mut state = self.lock();
        let old = state.seen.insert(
            path.clone(),
            Seen {
                version: version.clone(),
                text: None,
            },
        );
        state.release(old);
    }

    /// Records that the session has seen `version` of `path` as the LF text `text`, keeping the
    /// text within the bounds of the type doc.
    pub fn record_text(&self, path: &VirtualPath, version: &Version, text: &str) {
        if text.len() > LEDGER_TEXT_MAX_FILE_BYTES {
            self.record(path, version);
            return;
        }
        let mut state = self.lock();
        state.serial += 1;
        let serial = state.serial;
        let old = state.seen.insert(
            path.clone(),
            Seen {
                version: version.clone(),
                text: Some((serial, Arc::from(text))),
            },
        );
        state.release(old);
        state.text_bytes += text.len();
        while state.text_bytes > LEDGER_TEXT_MAX_SESSION_BYTES {
            let oldest = state
                .seen
                .iter()
                .filter_map(|(path, seen)| seen.text.as_ref().map(|(at, _)| (*at, path.clone())))
                .min();
            let Some((_, path)) = oldest else {
                break;
            };
            let dropped = state.seen.get_mut(&path).and_then(|seen| seen.text.take());
            state.text_bytes -= dropped.map_or(0, |(_, text)| text.len());
        }
    }

    /// The version last seen, if the file was read in this session.
    pub fn seen(&self, path: &VirtualPath) -> Option<Version> {
        self.lock().seen.get(path).map(|seen| seen.version.clone())
    }

    /// The version last seen and the text then, when kept.
    pub fn seen_file(&self, path: &VirtualPath) -> Option<SeenFile> {
        self.lock().seen.get(path).map(|seen| SeenFile {
            version: seen.version.clone(),
            text: seen.text.as_ref().map(|(_, text)| text.clone()),
        })
    }

    /// Forgets a file (deleted by this session).
    pub fn forget(&self, path: &VirtualPath) {
        let mut state = self.lock();
        let old = state.seen.remove(path);
        state.release(old);
    }

    /// Follows a rename: what was seen at `from` (or below it, for a directory) is now seen at
    /// `to` (below it), texts included. A file renamed with a new version (`version`, a disk
    /// identity) keeps being seen only if it had been, now at that version.
    pub fn rename(&self, from: &VirtualPath, to: &VirtualPath, version: Option<&Version>) {
        let mut state = self.lock();
        let moved = state.seen.remove(from);
        let replaced = match moved {
            Some(mut seen) => {
                if let Some(version) = version {
                    seen.version = version.clone();
                }
                state.seen.insert(to.clone(), seen)
            }
            None => state.seen.remove(to),
        };
        state.release(replaced);
        let below: Vec<VirtualPath> = state
            .seen
            .keys()
            .filter(|p| *p != from && p.starts_with(from))
            .cloned()
            .collect();
        let shadowed: Vec<VirtualPath> = state
            .seen
            .keys()
            .filter(|p| *p != to && p.starts_with(to))
            .cloned()
            .collect();
        for path in shadowed {
            let old = state.seen.remove(&path);
            state.release(old);
        }
        for path in below {
            let Some(seen) = state.seen.remove(&path) else {
                continue;
            };
            match path.relative_to(from).map(|rest| to.join_relative(rest)) {
                Some(Ok(moved)) => {
                    state.seen.insert(moved, seen);
                }
                _ => state.release(Some(seen)),
            }
        }
    }

    /// The files seen at or below `dir`, with the versions seen.
    pub fn seen_under(&self, dir: &VirtualPath) -> Vec<(VirtualPath, Version)> {
        self.lock()
            .seen
            .iter()
            .filter(|(p, _)| p.starts_with(dir))
            .map(|(p, seen)| (p.clone(), seen.version.clone()))
            .collect()
    }

    /// Bytes of text kept over all files.
    pub fn text_bytes(&self) -> usize {
        self.lock().text_bytes
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LedgerState> {
        // Each update leaves the state consistent before it can panic: a poisoned one is usable.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl LedgerState {
    /// Accounts for the text of an entry that was replaced or removed.
    fn release(&mut self, old: Option<Seen>) {
        if let Some((_, text)) = old.and_then(|seen| seen.text) {
            self.text_bytes -= text.len();
        }
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
    /// The content before the change, kept by the backend outside memory instead of in
    /// `before` (a file too large for `--max-undo-memory-bytes`, on disk).
    pub aside: Option<AsideFile>,
    /// Set when the change was a rename in place (a move within one mount) from this path:
    /// undo renames the file or directory back. `after` is then the file's version at its new
    /// path (`None` for a directory), and `before` is `None`.
    pub moved_from: Option<VirtualPath>,
}

impl UndoStep {
    fn weight(&self) -> usize {
        self.before.as_ref().map_or(0, Vec::len)
    }
}

/// Bounded per-file undo stacks.
///
/// The earlier contents kept count against the workspace's memory quota (issue 34): a step is
/// accounted when pushed, and when the quota has no room for it the oldest steps are dropped
/// first to make room (undo history is the one holder of a workspace's memory that can be
/// given up without asking); a step that still does not fit is not kept, and neither are the
/// older steps of its file (undo then has nothing to take back there rather than a wrong state).
#[derive(Debug)]
pub struct UndoHistory {
    /// Shared (weakly) with the account's reclaim, which drops the oldest steps when a write
    /// elsewhere in the workspace needs their room.
    inner: Arc<Mutex<UndoState>>,
    /// Most bytes of earlier contents kept over all files.
    budget: usize,
    /// Where the bytes kept are accounted.
    account: Arc<MemoryAccount>,
}

impl Drop for UndoHistory {
    fn drop(&mut self) {
        let state = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        self.account.release(state.bytes as u64);
    }
}

impl Default for UndoHistory {
    fn default() -> Self {
        Self::with_budget(UNDO_BYTES_PER_SESSION)
    }
}

#[derive(Debug, Default)]
struct UndoState {
    stacks: HashMap<VirtualPath, VecDeque<UndoStep>>,
    /// Every push in order, to evict the session's oldest steps first.
    order: VecDeque<VirtualPath>,
    bytes: usize,
}

impl UndoState {
    /// Drops the session's oldest step, giving its bytes back; false when nothing is left.
    fn evict_oldest(&mut self, account: &MemoryAccount) -> bool {
        let Some(oldest) = self.order.pop_front() else {
            return false;
        };
        let freed = self
            .stacks
            .get_mut(&oldest)
            .and_then(VecDeque::pop_front)
            .map_or(0, |s| s.weight());
        self.bytes -= freed;
        account.release(freed as u64);
        true
    }
}

impl UndoHistory {
    /// An empty history keeping at most `budget` bytes of earlier contents.
    pub fn with_budget(budget: usize) -> Self {
        Self::accounted(budget, MemoryAccount::unlimited())
    }

    /// [`Self::with_budget`], the bytes kept counted against `account`.
    pub fn accounted(budget: usize, account: Arc<MemoryAccount>) -> Self {
        let inner: Arc<Mutex<UndoState>> = Arc::default();
        let history = Arc::downgrade(&inner);
        // A write elsewhere in the workspace that would pass the quota first takes the room of
        // the oldest undo steps, as the undo budget itself does.
        account.set_reclaim(move |account, short| {
            let Some(state) = history.upgrade() else {
                return 0;
            };
            let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
            let before = state.bytes;
            while before - state.bytes < short as usize {
                if !state.evict_oldest(account) {
                    break;
                }
            }
            (before - state.bytes) as u64
        });
        Self {
            inner,
            budget,
            account,
        }
    }

    /// Bytes of earlier contents kept.
    pub fn bytes(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .bytes
    }

    /// Remembers a change to `path`; false when the step could not be kept (no room in the
    /// workspace's memory quota, see the type doc).
    pub fn push(&self, path: &VirtualPath, step: UndoStep) -> bool {
        let mut state = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let weight = step.weight();
        let reserved = loop {
            match self.account.reserve_without_reclaim(weight as u64) {
                Ok(reserved) => break Some(reserved),
                Err(_) if state.evict_oldest(&self.account) => {}
                Err(refused) => {
                    tracing::debug!(%path, %refused, "undo step not kept: no room in the memory quota");
                    break None;
                }
            }
        };
        let Some(reserved) = reserved else {
            let older = state.stacks.remove(path).unwrap_or_default();
            let freed: usize = older.iter().map(UndoStep::weight).sum();
            state.bytes -= freed;
            self.account.release(freed as u64);
            return false;
        };
        reserved.keep();
        state.bytes += weight;
        let stack = state.stacks.entry(path.clone()).or_default();
        stack.push_back(step);
        let mut dropped = 0;
        if stack.len() > UNDO_STEPS_PER_FILE {
            dropped = stack.pop_front().map_or(0, |s| s.weight());
        }
        state.bytes -= dropped;
        self.account.release(dropped as u64);
        state.order.push_back(path.clone());
        while state.bytes > self.budget {
            if !state.evict_oldest(&self.account) {
                break;
            }
        }
        true
    }

    /// Takes the most recent step for `path`, if any.
    pub fn pop(&self, path: &VirtualPath) -> Option<UndoStep> {
        let mut state = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let step = state.stacks.get_mut(path)?.pop_back()?;
        state.bytes -= step.weight();
        self.account.release(step.weight() as u64);
        Some(step)
    }

    /// Puts a step back (an undo that was refused).
    pub fn restore(&self, path: &VirtualPath, step: UndoStep) {
        let mut state = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        state.bytes += step.weight();
        // The content is held already (the step was in hand): counted as it is, even past the
        // quota, so the count stays exact; the next change makes room again.
        self.account.charge(step.weight() as u64);
        state
            .stacks
            .entry(path.clone())
            .or_default()
            .push_back(step);
    }

    /// After an undo put `path` back into the state the now-topmost step produced, records the
    /// version that state has now. Backends whose versions are content hashes give the same
    /// version back; stores that count versions give a new one, and without this the next undo
    /// would see a version mismatch.
    pub fn rebase_top(&self, path: &VirtualPath, now: Option<Version>) {
        let mut state = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(top) = state.stacks.get_mut(path).and_then(|s| s.back_mut()) {
            top.after = now;
        }
    }

    /// Where the most recent step of `path` was renamed from, if it is a rename.
    pub fn top_moved_from(&self, path: &VirtualPath) -> Option<VirtualPath> {
        let state = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        state
            .stacks
            .get(path)
            .and_then(|s| s.back())
            .and_then(|step| step.moved_from.clone())
    }

    /// How many steps are kept for `path`.
    pub fn depth(&self, path: &VirtualPath) -> usize {
        let state = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        state.stacks.get(path).map_or(0, VecDeque::len)
    }
}

/// One session (see the module doc).
///
/// Its state is shared by every handle of it: the session a server holds, and the handle each
/// tool call runs with ([`Session::for_call`]), which differs only in holding the mount table
/// the call started with, so the table of a call travels with the call as its argument.
#[derive(Debug)]
pub struct Session {
    /// The file system as this session sees it; replaced as a whole when the client's roots
    /// change (see [`Session::backend`]).
    backend: Arc<RwLock<Arc<dyn Router>>>,
    /// The table a call's handle keeps for the whole call (see [`Session::for_call`]).
    pinned: Option<Arc<dyn Router>>,
    /// Versions read.
    pub ledger: Arc<ReadLedger>,
    /// Changes made.
    pub undo: Arc<UndoHistory>,
    /// Write options.
    pub write_options: Arc<WriteOptions>,
    /// Arrival order of calls per file.
    pub arrival: Arc<ArrivalOrder>,
    /// What this workspace holds in memory, against its quota (issue 34): shared with its
    /// memory mounts and in-memory overlay layers, and with `undo`.
    pub memory: Arc<MemoryAccount>,
    /// Where this session's changes are logged (`--audit`), when anywhere.
    audit: Option<Arc<crate::storage::audit::AuditLog>>,
    locks: Arc<Mutex<HashMap<VirtualPath, Arc<tokio::sync::Mutex<()>>>>>,
    /// The report of the call this handle runs, when it runs one (see [`Session::with_trail`]).
    trail: Option<Arc<CallTrail>>,
    /// What the workspace's principal is granted (issue 43); `None`: no grants, everything.
    view: Option<Arc<crate::ground::grants::View>>,
}

impl Session {
    /// A new session over `backend`, its memory not limited (see [`Session::accounted`]).
    pub fn new(backend: Arc<dyn Router>, write_options: WriteOptions) -> Self {
        Self::accounted(backend, write_options, MemoryAccount::unlimited())
    }

    /// A new session over `backend` whose memory (its undo history here, and whatever of
    /// `backend` was built with the same account) counts against `memory`.
    pub fn accounted(
        backend: Arc<dyn Router>,
        write_options: WriteOptions,
        memory: Arc<MemoryAccount>,
    ) -> Self {
        Self {
            backend: Arc::new(RwLock::new(backend)),
            pinned: None,
            ledger: Arc::default(),
            undo: Arc::new(UndoHistory::accounted(
                usize::try_from(write_options.limits.max_undo_memory_bytes).unwrap_or(usize::MAX),
                memory.clone(),
            )),
            write_options: Arc::new(write_options),
            arrival: Arc::new(ArrivalOrder::default()),
            memory,
            audit: None,
            locks: Arc::default(),
            trail: None,
            view: None,
        }
    }

    /// This session seeing through a principal's grants: its backend was built with `view`
    /// (see `MountTable::new_granted_session`), and the observers (history, notifications,
    /// the tool list) filter by it.
    pub fn with_view(mut self, view: Option<Arc<crate::ground::grants::View>>) -> Self {
        self.view = view;
        self
    }

    /// What this workspace's principal is granted; `None`: no grants were given.
    pub fn view(&self) -> Option<&Arc<crate::ground::grants::View>> {
        self.view.as_ref()
    }

    /// This session with its changes logged to `audit` (none: not logged).
    pub fn with_audit(mut self, audit: Option<Arc<crate::storage::audit::AuditLog>>) -> Self {
        self.audit = audit;
        self
    }

    /// The audit log this session's changes go to, if any.
    pub fn audit(&self) -> Option<&Arc<crate::storage::audit::AuditLog>> {
        self.audit.as_ref()
    }

    /// The file system as this session sees it: for a call's handle ([`Session::for_call`])
    /// the table the call started with, else the table now.
    pub fn backend(&self) -> Arc<dyn Router> {
        if let Some(table) = &self.pinned {
            return table.clone();
        }
        // The slot only ever holds a whole table: a poisoned lock still holds a valid one.
        self.backend
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The handle one tool call runs with: this session (the same ledger, undo history, locks
    /// and memory), its mount table as it is now held for the whole call. Every
    /// [`Session::backend`] of the handle sees that one table, even when the client's roots
    /// replace it meanwhile (a move never copies in one table and deletes in another); later
    /// calls see the new table.
    pub fn for_call(&self) -> Session {
        Self {
            backend: self.backend.clone(),
            pinned: Some(self.backend()),
            ledger: self.ledger.clone(),
            undo: self.undo.clone(),
            write_options: self.write_options.clone(),
            arrival: self.arrival.clone(),
            memory: self.memory.clone(),
            audit: self.audit.clone(),
            locks: self.locks.clone(),
            trail: None,
            view: self.view.clone(),
        }
    }

    /// This handle noting what its call changes in `trail` (see [`crate::state::call_trail`]): the
    /// change primitive's recording step and the tools note there.
    pub fn with_trail(mut self, trail: Option<Arc<CallTrail>>) -> Self {
        self.trail = trail;
        self
    }

    /// The report of the call this handle runs; `None` outside a call (a test driving tools
    /// directly), where nothing is noted.
    pub fn trail(&self) -> Option<&CallTrail> {
        self.trail.as_deref()
    }

    /// Serves `backend` from now on (the client's roots changed); calls already running keep
    /// the table they started with (their handles hold it, see [`Session::for_call`]).
    pub fn replace_backend(&self, backend: Arc<dyn Router>) {
        *self.backend.write().unwrap_or_else(PoisonError::into_inner) = backend;
    }

    /// Serialises this session's changes to one file: held from the read of the file to the
    /// ledger update after the write, so a second edit waits and then sees the first's result.
    /// When the call's `turn` (its place in the arrival order, see [`crate::state::arrival`])
    /// is for this file, it first waits for the calls that arrived before it, so edits land in
    /// the order they were sent.
    pub async fn lock_file(&self, path: &VirtualPath, turn: Option<&Turn>) -> OwnedMutexGuard<()> {
        if let Some(turn) = turn.filter(|turn| turn.path() == path) {
            turn.wait().await;
        }
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
                    aside: None,
                    moved_from: None,
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
                    aside: None,
                    moved_from: None,
                },
            );
        }
        assert_eq!(history.depth(&p("/a")), 0, "oldest evicted first");
        assert_eq!(history.depth(&p("/e")), 1);
    }

    fn memory_table() -> Arc<dyn Router> {
        Arc::new(crate::storage::backend::CompositeBackend::new(
            Vec::new(),
            || Arc::new(crate::storage::backend::MemoryBackend::new()),
        ))
    }

    #[tokio::test]
    async fn a_lock_redeems_the_turn_it_is_given_only_for_that_turns_file() {
        let session = Arc::new(Session::new(memory_table(), WriteOptions::default()));
        let path = p("/f");
        let first = session
            .arrival
            .turn(path.clone(), session.arrival.issue(&path));
        let second = session
            .arrival
            .turn(path.clone(), session.arrival.issue(&path));
        drop(session.lock_file(&p("/other"), Some(&second)).await);
        drop(session.lock_file(&path, None).await);
        let locking = session.clone();
        let waiting = tokio::spawn(async move {
            drop(locking.lock_file(&path, Some(&second)).await);
        });
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(
            !waiting.is_finished(),
            "waits for the call that arrived first"
        );
        drop(first);
        waiting.await.unwrap();
    }

    #[tokio::test]
    async fn a_call_keeps_its_table_when_the_table_is_replaced() {
        let first = memory_table();
        let session = Session::new(first.clone(), WriteOptions::default());
        let other = Session::new(memory_table(), WriteOptions::default());
        let second = memory_table();
        let call = session.for_call();
        session.replace_backend(second.clone());
        tokio::task::yield_now().await;
        assert!(Arc::ptr_eq(&call.backend(), &first), "pinned for the call");
        assert!(
            !Arc::ptr_eq(&other.backend(), &first),
            "another session's table is its own"
        );
        drop(call);
        assert!(
            Arc::ptr_eq(&session.backend(), &second),
            "later calls see the new one"
        );
    }

    #[test]
    fn ledger_keeps_texts_within_its_bounds() {
        let ledger = ReadLedger::default();
        let v = Version::of_content(b"x");
        ledger.record_text(&p("/a"), &v, "hello\n");
        assert_eq!(
            ledger.seen_file(&p("/a")).unwrap().text.as_deref(),
            Some("hello\n")
        );
        assert_eq!(ledger.text_bytes(), 6);
        ledger.record(&p("/a"), &v);
        assert_eq!(ledger.seen_file(&p("/a")).unwrap().text, None);
        assert_eq!(ledger.text_bytes(), 0);
        let too_big = "x".repeat(LEDGER_TEXT_MAX_FILE_BYTES + 1);
        ledger.record_text(&p("/big"), &v, &too_big);
        assert_eq!(ledger.seen_file(&p("/big")).unwrap().text, None);
        let largest = "y".repeat(LEDGER_TEXT_MAX_FILE_BYTES);
        let files = LEDGER_TEXT_MAX_SESSION_BYTES / LEDGER_TEXT_MAX_FILE_BYTES + 2;
        for i in 0..files {
            ledger.record_text(&p(&format!("/f{i}")), &v, &largest);
            assert!(ledger.text_bytes() <= LEDGER_TEXT_MAX_SESSION_BYTES);
        }
        assert_eq!(
            ledger.seen_file(&p("/f0")).unwrap().text,
            None,
            "oldest dropped"
        );
        assert_eq!(ledger.seen(&p("/f0")), Some(v.clone()), "its version kept");
        let last = format!("/f{}", files - 1);
        assert!(ledger.seen_file(&p(&last)).unwrap().text.is_some());
        ledger.forget(&p(&last));
        assert_eq!(
            ledger.text_bytes(),
            (files - 3) * LEDGER_TEXT_MAX_FILE_BYTES,
            "forgetting frees"
        );
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
