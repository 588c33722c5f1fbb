//! `OverlayBackend`: a copy-on-write view of a base backend (a disk mount with `,overlay`) in
//! which every change goes to a layer that belongs to one workspace, and the base is never
//! written until `commit` (issue 14).
//!
//! The layer is two things: a files backend holding the content of every file the workspace
//! created or changed (a [`MemoryBackend`] in memory, or a [`StoreBackend`] namespace of a SQLite
//! file for `,overlay=sqlite:FILE`), and a book of **marks**, one per path the layer touched:
//! - `Changed`: the layer holds the file's content (it shadows the base file, if any);
//! - `Deleted`: the base file is hidden (a whiteout);
//! - an **opaque** directory: a base directory deleted as a whole, hidden with everything below.
//!
//! Each file mark remembers the base file's version when the layer first shadowed or hid it
//! (`None`: there was no base file), which is what `commit` checks for conflicts.
//!
//! Reads go to the layer for marked paths and to the base for the rest, so reading a big base
//! file through the overlay reads the base directly (nothing is copied). `glob`/`grep` run the
//! base's own search (streaming and bounded as the base does) and drop the hidden paths, then
//! add the layer's matches. The marks are held in memory (their number follows the changes made,
//! not the tree) and, with a SQLite layer, written through to a namespace of that file so the
//! layer survives restarts. Writes and deletes are serialised by one lock per overlay.
//!
//! `rename` moves layer files inside the layer (times kept) and copies base files into it
//! (leaving a whiteout at the old path). What the overlay does not do: contents are never kept
//! aside for undo (undo keeps them in memory within its budget); `set_permissions` changes
//! nothing (the mode stays the base's). Commands run by `execute` see the base directory
//! ([`Backend::host_dir`]), not the layer.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use tokio::sync::OnceCell;

use super::{
    AsideFile, Backend, BoundedRead, ChangeJournal, DeleteOptions, Entry, Error, FileBytes,
    FileView, GlobQuery, GrepFile, GrepQuery, JournalRole, LineWindow, PlannedFile, RenameOptions,
    Renamed, Result, Version, WriteMode, WriteOutcome,
};
use crate::path::VirtualPath;
use crate::search::GlobMatcher;
use crate::store::{ListQuery, ListStart, Namespace, PutCondition, Store};

/// What the layer holds for one file path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MarkState {
    /// The layer holds the file's content.
    Changed,
    /// The base file is hidden.
    Deleted,
}

/// One file path the layer touched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    /// Shadowed or hidden.
    pub state: MarkState,
    /// The base file's version when the layer first touched the path; `None` when the base had
    /// no file there.
    pub base: Option<Version>,
}

impl Mark {
    fn encode(&self) -> String {
        let state = match self.state {
            MarkState::Changed => "changed",
            MarkState::Deleted => "deleted",
        };
        match &self.base {
            Some(version) => format!("{state} {version}"),
            None => state.to_owned(),
        }
    }

    fn decode(text: &str) -> Option<Self> {
        let (state, base) = match text.split_once(' ') {
            Some((state, version)) => (state, Some(Version::from_raw(version))),
            None => (text, None),
        };
        let state = match state {
            "changed" => MarkState::Changed,
            "deleted" => MarkState::Deleted,
            _ => return None,
        };
        Some(Self { state, base })
    }
}

/// Key prefixes of the persisted book: file marks, opaque directories and paths shown again.
const FILE_KEY: &str = "f:";
const OPAQUE_KEY: &str = "d:";
const SHOWN_KEY: &str = "s:";
/// The content of a persisted opaque-directory key.
const OPAQUE_TEXT: &str = "opaque";

/// The marks of one layer (see the module doc).
#[derive(Debug, Default, Clone)]
struct Book {
    files: BTreeMap<String, Mark>,
    opaque: BTreeSet<String>,
    /// Paths below an opaque directory that `discard` showed again: the base's entry there
    /// (and all below it) is part of the view, while the rest of the opaque directory stays
    /// hidden. The nearest of an opaque or shown ancestor decides.
    shown: BTreeSet<String>,
}

/// `"/a/b"` → `"/a/b/"`, `"/"` → `"/"`.
fn dir_prefix(dir: &VirtualPath) -> String {
    if dir.is_root() {
        "/".to_owned()
    } else {
        format!("{}/", dir.as_str())
    }
}

impl Book {
    fn mark(&self, path: &VirtualPath) -> Option<&Mark> {
        self.files.get(path.as_str())
    }

    fn marks_under<'a>(
        &'a self,
        dir: &VirtualPath,
    ) -> impl Iterator<Item = (&'a String, &'a Mark)> {
        let own = self.files.get_key_value(dir.as_str());
        let prefix = dir_prefix(dir);
        let below = self
            .files
            .range::<str, _>((Bound::Included(prefix.as_str()), Bound::Unbounded))
            .take_while(move |(key, _)| key.starts_with(&prefix));
        own.into_iter().chain(below)
    }

    /// The layer holds a file at `path`.
    fn layer_file(&self, path: &VirtualPath) -> bool {
        self.mark(path)
            .is_some_and(|m| m.state == MarkState::Changed)
    }

    /// The layer holds a file below `path` (so `path` is a directory in the layer).
    fn layer_dir(&self, path: &VirtualPath) -> bool {
        let prefix = dir_prefix(path);
        self.files
            .range::<str, _>((Bound::Included(prefix.as_str()), Bound::Unbounded))
            .take_while(|(key, _)| key.starts_with(&prefix))
            .any(|(_, mark)| mark.state == MarkState::Changed)
    }

    /// A deleted base directory covers `path` (itself or an ancestor), and no path shown
    /// again lies between.
    fn opaque_covers(&self, path: &VirtualPath) -> bool {
        if self.opaque.is_empty() {
            return false;
        }
        let mut at = Some(path.clone());
        while let Some(dir) = at {
            if self.shown.contains(dir.as_str()) {
                return false;
            }
            if self.opaque.contains(dir.as_str()) {
                return true;
            }
            at = dir.parent();
        }
        false
    }

    /// `path` or something below it was shown again by `discard` (so the base's directory at
    /// `path` is partly in the view even when it is covered).
    fn shown_within(&self, path: &VirtualPath) -> bool {
        if self.shown.is_empty() {
            return false;
        }
        if self.shown.contains(path.as_str()) {
            return true;
        }
        let prefix = dir_prefix(path);
        self.shown
            .range::<str, _>((Bound::Included(prefix.as_str()), Bound::Unbounded))
            .next()
            .is_some_and(|key| key.starts_with(&prefix))
    }

    /// The base's entry at `path`, or part of what lies below it, is in the view.
    fn base_partly_shown(&self, path: &VirtualPath) -> bool {
        !self.base_hidden(path) || self.shown_within(path)
    }

    /// The base's entry at `path` is not part of the view.
    fn base_hidden(&self, path: &VirtualPath) -> bool {
        self.files.contains_key(path.as_str()) || self.opaque_covers(path)
    }

    /// Reads of `path` go to the layer.
    fn routes_to_layer(&self, path: &VirtualPath) -> bool {
        self.layer_file(path) || self.base_hidden(path) || self.layer_dir(path)
    }
}

/// Where the marks of a SQLite layer are written through.
#[derive(Debug, Clone)]
struct Persist {
    store: Arc<dyn Store>,
    namespace: Namespace,
}

/// How many persisted marks one page loads.
const LOAD_PAGE: usize = 1000;

/// One changed path under a reviewed directory, as `changes` and `commit` see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerChange {
    /// The path, in the overlay's coordinates.
    pub path: VirtualPath,
    /// Added, modified or deleted relative to the base.
    pub kind: ChangeKind,
    /// The base file's version when the layer first touched it.
    pub base_version: Option<Version>,
}

/// How a file differs from the base.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    /// The base had no file here.
    Added,
    /// The layer holds another content for a base file.
    Modified,
    /// The base file is hidden.
    Deleted,
}

impl ChangeKind {
    /// `added` / `modified` / `deleted`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "added",
            Self::Modified => "modified",
            Self::Deleted => "deleted",
        }
    }
}

/// A base file that changed since the layer first touched it: `commit` refuses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitConflict {
    /// The path.
    pub path: VirtualPath,
    /// What happened to it in the base.
    pub reason: &'static str,
}

/// What [`OverlayBackend::stage_commit`] did.
#[derive(Debug)]
pub enum Staged<'a> {
    /// Every change is in the base; the layer still holds them.
    Written(StagedCommit<'a>),
    /// Nothing was written: these base files changed since the layer took them.
    Conflicts(Vec<CommitConflict>),
    /// Writing one file failed part-way: the files written before it were put back as they
    /// were, and the layer keeps all its changes.
    Failed {
        /// The file (or deleted directory) whose change failed.
        path: VirtualPath,
        /// Why.
        error: Error,
        /// Files written before the failure and put back.
        restored: Vec<VirtualPath>,
        /// Files written before the failure that could not be put back, with why (the base then
        /// holds the layer's version of them).
        not_restored: Vec<(VirtualPath, Error)>,
    },
}

/// A commit whose changes are in the base and still in the layer: [`Self::finish`] or
/// [`Self::undo`] it.
#[derive(Debug)]
pub struct StagedCommit<'a> {
    overlay: &'a OverlayBackend,
    dir: VirtualPath,
    changes: Vec<LayerChange>,
    /// What was written into the base, and how to put it back.
    writes: CommitWrites,
    kept_dirs: Vec<VirtualPath>,
    /// No other change through the overlay until this one is finished or undone.
    _changing: tokio::sync::MutexGuard<'a, ()>,
}

/// What a commit wrote into its base so far, and how each write is put back.
#[derive(Debug)]
enum CommitWrites {
    /// Through the base's change journal (disk): a crash cannot cut the commit in half.
    Journaled(StagedJournal),
    /// File by file, each kept aside (or in memory) by the commit itself (a base without a
    /// journal: nothing of it survives a crash to be put back).
    Plain(Vec<Written>),
}

impl CommitWrites {
    /// Puts back what was written: the files put back, and those that could not be.
    async fn roll_back(
        self,
        overlay: &OverlayBackend,
    ) -> (Vec<VirtualPath>, Vec<(VirtualPath, Error)>) {
        match self {
            Self::Journaled(journal) => journal.roll_back().await,
            Self::Plain(done) => overlay.roll_back(done).await,
        }
    }

    fn journal(&self) -> Option<&StagedJournal> {
        match self {
            Self::Journaled(journal) => Some(journal),
            Self::Plain(_) => None,
        }
    }
}

/// A commit's writes through its base's change journal (see [`OverlayBackend::stage_commit`]).
#[derive(Debug)]
struct StagedJournal {
    journal: Box<dyn ChangeJournal>,
    /// The planned files, by journal index.
    paths: Vec<VirtualPath>,
    /// Each file written so far: its journal index and the version it was left with.
    applied: Vec<(usize, Option<Version>)>,
}

impl StagedJournal {
    /// Puts back what was written: the files put back, and those that could not be.
    async fn roll_back(self) -> (Vec<VirtualPath>, Vec<(VirtualPath, Error)>) {
        let failed = self.journal.roll_back(&self.applied).await;
        let not_restored: Vec<(VirtualPath, Error)> = failed
            .into_iter()
            .filter_map(|(i, e)| self.paths.get(i).map(|p| (p.clone(), e)))
            .collect();
        let restored = self
            .applied
            .iter()
            .filter_map(|(i, _)| self.paths.get(*i))
            .filter(|p| !not_restored.iter().any(|(q, _)| q == *p))
            .cloned()
            .collect();
        (restored, not_restored)
    }
}

impl StagedCommit<'_> {
    /// The base holds every change: now they leave the layer. Returns the files written or
    /// deleted, in path order, and the deleted directories left in the base because they still
    /// hold files the layer did not delete.
    pub async fn finish(self) -> Result<(Vec<LayerChange>, Vec<VirtualPath>)> {
        let overlay = self.overlay;
        overlay.drop_from_layer(&self.changes).await?;
        for opaque in overlay.opaque_under(&self.dir).await? {
            for shown in overlay.shown_under(&opaque).await? {
                overlay.save_shown(&shown, false).await?;
            }
            overlay.save_opaque(&opaque, false).await?;
        }
        Ok((self.changes, self.kept_dirs))
    }

    /// Puts back every base file the stage wrote (another overlay mount's stage failed); the
    /// layer keeps all its changes. Returns the files put back and those that could not be.
    pub async fn undo(self) -> (Vec<VirtualPath>, Vec<(VirtualPath, Error)>) {
        self.writes.roll_back(self.overlay).await
    }

    /// Where the base's journal of this stage is on the host, when the base keeps one (what a
    /// [`JournalRole::Secondary`] of the same commit names... and a primary lists).
    pub fn journal_location(&self) -> Option<std::path::PathBuf> {
        self.writes.journal().map(|j| j.journal.location())
    }

    /// The decision of a commit (made on its primary or only journal): from here a crash
    /// completes the commit in the base instead of taking it back.
    pub async fn decide(&self) -> Result<()> {
        match self.writes.journal() {
            Some(journal) => journal.journal.mark_committed().await,
            None => Ok(()),
        }
    }

    /// Removes the base's journal once the commit is decided (secondaries before the primary).
    pub async fn close_journal(&self) {
        if let Some(journal) = self.writes.journal()
            && let Err(error) = journal.journal.finish().await
        {
            // Decided: the journal left behind is rolled forward (removed) at the next start.
            tracing::warn!(%error, "a committed change's journal could not be removed");
        }
    }
}

/// Most bytes of one base file a commit holds in memory to put it back on failure, when the
/// base cannot keep it aside on disk.
pub const MAX_ROLLBACK_IN_MEMORY: u64 = 64 * 1024 * 1024;

/// A base file a commit changed, and how to put it back.
#[derive(Debug)]
struct Written {
    path: VirtualPath,
    /// Its version now (`None`: deleted).
    now: Option<Version>,
    before: Before,
    /// Parent directories the write created, nearest to the root first.
    created_dirs: Vec<VirtualPath>,
}

/// What a base file was before a commit changed it.
#[derive(Debug)]
enum Before {
    /// No file.
    Absent,
    /// Kept aside on disk by the base.
    Aside(AsideFile),
    /// Held in memory (at most [`MAX_ROLLBACK_IN_MEMORY`] bytes).
    Content(Vec<u8>),
}

/// The overlay backend (see the module doc).
#[derive(Debug)]
pub struct OverlayBackend {
    base: Arc<dyn Backend>,
    layer: Arc<dyn Backend>,
    /// Replaced as a whole on change, so a search can hold a snapshot while the book moves on.
    book: Mutex<Arc<Book>>,
    /// Whether the base honours ignore files (not `no-ignore`): layer files are then filtered
    /// by them as disk files in the same place would be.
    ignore_files: bool,
    persist: Option<Persist>,
    loaded: OnceCell<()>,
    /// Serialises changes (write, delete, commit, discard) so that a mark and the layer's file
    /// always change together.
    changing: tokio::sync::Mutex<()>,
}

impl OverlayBackend {
    /// An overlay of `base` whose layer lives in memory.
    pub fn in_memory(base: Arc<dyn Backend>) -> Self {
        Self::with_layer(base, Arc::new(super::MemoryBackend::new()), None)
    }

    /// [`Self::in_memory`], the layer's contents counted against `account` (the workspace's
    /// memory quota): a write past it is refused before the layer or its marks change, and a
    /// commit or discard gives the bytes back as it empties the layer.
    pub fn in_memory_accounted(
        base: Arc<dyn Backend>,
        account: Arc<crate::quota::MemoryAccount>,
    ) -> Self {
        Self::with_layer(
            base,
            Arc::new(super::MemoryBackend::accounted(account)),
            None,
        )
    }

    /// An overlay of `base` whose layer's files are in `files` (a store namespace) and whose
    /// marks are written through to `marks` of `store`, loaded on first use.
    pub fn persistent(
        base: Arc<dyn Backend>,
        store: Arc<dyn Store>,
        files: Namespace,
        marks: Namespace,
    ) -> Self {
        let layer = Arc::new(super::StoreBackend::new(store.clone(), files));
        Self::with_layer(
            base,
            layer,
            Some(Persist {
                store,
                namespace: marks,
            }),
        )
    }

    fn with_layer(
        base: Arc<dyn Backend>,
        layer: Arc<dyn Backend>,
        persist: Option<Persist>,
    ) -> Self {
        Self {
            base,
            layer,
            book: Mutex::new(Arc::new(Book::default())),
            ignore_files: true,
            persist,
            loaded: OnceCell::new(),
            changing: tokio::sync::Mutex::new(()),
        }
    }

    /// The same overlay over a base mounted with `no-ignore` when `no_ignore`: layer files are
    /// then never hidden by ignore files either.
    pub fn with_no_ignore(mut self, no_ignore: bool) -> Self {
        self.ignore_files = !no_ignore;
        self
    }

    /// The base backend.
    pub fn base(&self) -> &Arc<dyn Backend> {
        &self.base
    }

    fn lock_book(&self) -> MutexGuard<'_, Arc<Book>> {
        // Every update of the book is one insert or remove: a panic cannot half-update it.
        self.book.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The book, loaded from the layer's store on first use.
    async fn book(&self) -> Result<MutexGuard<'_, Arc<Book>>> {
        self.loaded
            .get_or_try_init(|| async {
                let Some(persist) = &self.persist else {
                    return Ok(());
                };
                let loaded = load_book(persist).await?;
                *self.lock_book() = Arc::new(loaded);
                Ok::<(), Error>(())
            })
            .await?;
        Ok(self.lock_book())
    }

    async fn save_mark(&self, path: &VirtualPath, mark: Option<Mark>) -> Result<()> {
        {
            let mut guard = self.lock_book();
            let book = Arc::make_mut(&mut guard);
            match &mark {
                Some(mark) => book.files.insert(path.as_str().to_owned(), mark.clone()),
                None => book.files.remove(path.as_str()),
            };
        }
        let Some(persist) = &self.persist else {
            return Ok(());
        };
        let key = format!("{FILE_KEY}{path}");
        let done = match mark {
            Some(mark) => persist
                .store
                .put(
                    &persist.namespace,
                    &key,
                    mark.encode().as_bytes(),
                    PutCondition::Overwrite,
                )
                .await
                .map(|_| ()),
            None => persist
                .store
                .delete(&persist.namespace, &key, None)
                .await
                .map(|_| ()),
        };
        done.map_err(|e| layer_failure(path, &e))
    }

    async fn save_opaque(&self, dir: &VirtualPath, opaque: bool) -> Result<()> {
        {
            let mut guard = self.lock_book();
            let book = Arc::make_mut(&mut guard);
            if opaque {
                book.opaque.insert(dir.as_str().to_owned());
            } else {
                book.opaque.remove(dir.as_str());
            }
        }
        if opaque {
            // Deleted whole again: what discard showed below it is hidden with the rest.
            for shown in self.shown_under(dir).await? {
                self.save_shown(&shown, false).await?;
            }
        }
        self.persist_mark(&format!("{OPAQUE_KEY}{dir}"), opaque, dir)
            .await
    }

    async fn save_shown(&self, path: &VirtualPath, shown: bool) -> Result<()> {
        {
            let mut guard = self.lock_book();
            let book = Arc::make_mut(&mut guard);
            if shown {
                book.shown.insert(path.as_str().to_owned());
            } else {
                book.shown.remove(path.as_str());
            }
        }
        self.persist_mark(&format!("{SHOWN_KEY}{path}"), shown, path)
            .await
    }

    /// Sets (`set`) or clears the marker `key` in a persistent layer's store (nothing to do for
    /// a layer in memory); a failure is named after `path`.
    async fn persist_mark(&self, key: &str, set: bool, path: &VirtualPath) -> Result<()> {
        let Some(persist) = &self.persist else {
            return Ok(());
        };
        let done = if set {
            persist
                .store
                .put(
                    &persist.namespace,
                    key,
                    OPAQUE_TEXT.as_bytes(),
                    PutCondition::Overwrite,
                )
                .await
                .map(|_| ())
        } else {
            persist
                .store
                .delete(&persist.namespace, key, None)
                .await
                .map(|_| ())
        };
        done.map_err(|e| layer_failure(path, &e))
    }

    /// The paths shown again at or under `dir`.
    async fn shown_under(&self, dir: &VirtualPath) -> Result<Vec<VirtualPath>> {
        let book = self.book().await?;
        let prefix = dir_prefix(dir);
        book.shown
            .iter()
            .filter(|d| d.as_str() == dir.as_str() || d.starts_with(&prefix))
            .map(|d| Ok(VirtualPath::parse_raw(d)?))
            .collect()
    }

    /// The version of the base file at `path`, `None` when the base has no file there.
    async fn base_version(&self, path: &VirtualPath) -> Result<Option<Version>> {
        match self.base.stat(path).await? {
            Some(entry) if !entry.is_dir() => match self.base.read_at_most(path, 0).await? {
                BoundedRead::Whole(file) => Ok(Some(file.version)),
                BoundedRead::TooLarge { version, .. } => Ok(Some(version)),
            },
            _ => Ok(None),
        }
    }

    /// The version of the file the view shows at `path`: from the layer or the base, with
    /// whether it came from the base. `IsADirectory` for a directory.
    async fn current(&self, path: &VirtualPath) -> Result<Option<(Version, bool)>> {
        let (layer_file, layer_dir, hidden) = {
            let book = self.book().await?;
            (
                book.layer_file(path),
                book.layer_dir(path),
                book.base_hidden(path),
            )
        };
        if layer_file {
            return Ok(Some((
                version_of(self.layer.read_at_most(path, 0).await?),
                false,
            )));
        }
        if layer_dir || path.is_root() {
            return Err(Error::IsADirectory { path: path.clone() });
        }
        if hidden {
            return Ok(None);
        }
        match self.base.stat(path).await? {
            Some(entry) if entry.is_dir() => Err(Error::IsADirectory { path: path.clone() }),
            Some(_) => Ok(Some((
                version_of(self.base.read_at_most(path, 0).await?),
                true,
            ))),
            None => Ok(None),
        }
    }

    /// Refuses a new file at `path` whose parent directories the view shows as a file.
    async fn check_parents(&self, path: &VirtualPath) -> Result<()> {
        let mut at = path.parent();
        while let Some(dir) = at {
            if dir.is_root() {
                return Ok(());
            }
            let (layer_file, layer_dir, hidden) = {
                let book = self.book().await?;
                (
                    book.layer_file(&dir),
                    book.layer_dir(&dir),
                    book.base_hidden(&dir),
                )
            };
            if layer_file {
                return Err(Error::NotADirectory { path: dir });
            }
            if layer_dir {
                return Ok(());
            }
            if !hidden {
                match self.base.stat(&dir).await? {
                    Some(entry) if entry.is_dir() => return Ok(()),
                    Some(_) => return Err(Error::NotADirectory { path: dir }),
                    None => {}
                }
            }
            at = dir.parent();
        }
        Ok(())
    }

    /// The files the view shows below `dir`, each with whether it is the layer's.
    async fn files_below(&self, dir: &VirtualPath) -> Result<Vec<(VirtualPath, bool)>> {
        let shown = self.book().await?.base_partly_shown(dir);
        let mut out = Vec::new();
        if shown && self.base.stat(dir).await?.is_some_and(|e| e.is_dir()) {
            let query = GlobQuery {
                dir: dir.clone(),
                matcher: GlobMatcher::new("*").map_err(|e| Error::Unavailable {
                    message: e.to_string(),
                })?,
                control: super::SearchControl::default(),
            };
            let found = self.base.glob(&query).await?;
            let book = self.book().await?;
            out.extend(
                found
                    .into_iter()
                    .filter(|e| !book.base_hidden(&e.path))
                    .map(|e| (e.path, false)),
            );
        }
        let book = self.book().await?;
        for (key, mark) in book.marks_under(dir) {
            if mark.state == MarkState::Changed && key != dir.as_str() {
                out.push((VirtualPath::parse_raw(key)?, true));
            }
        }
        Ok(out)
    }

    /// The changed files under `dir` (in the overlay's coordinates), in path order.
    pub async fn changes(&self, dir: &VirtualPath) -> Result<Vec<LayerChange>> {
        let book = self.book().await?;
        book.marks_under(dir)
            .map(|(key, mark)| {
                Ok(LayerChange {
                    path: VirtualPath::parse_raw(key)?,
                    kind: match (&mark.state, &mark.base) {
                        (MarkState::Deleted, _) => ChangeKind::Deleted,
                        (MarkState::Changed, None) => ChangeKind::Added,
                        (MarkState::Changed, Some(_)) => ChangeKind::Modified,
                    },
                    base_version: mark.base.clone(),
                })
            })
            .collect()
    }

    /// The layer's content of a changed file (what the agent sees).
    pub async fn layer_read_at_most(&self, path: &VirtualPath, max: u64) -> Result<BoundedRead> {
        self.layer.read_at_most(path, max).await
    }

    /// The base's content of a file (what `commit` would replace).
    pub async fn base_read_at_most(&self, path: &VirtualPath, max: u64) -> Result<BoundedRead> {
        self.base.read_at_most(path, max).await
    }

    /// The base files under `dir` that changed since the layer first took them (another
    /// program wrote, deleted or created them): `commit` writes nothing while there are any.
    ///
    /// A base file that already holds what the layer would write (or is gone where the layer
    /// deletes it) is no conflict: a commit decided just before a crash wrote it, and the layer
    /// had not let it go yet. Such changes are left out of the next commit's writes.
    pub async fn conflicts(&self, dir: &VirtualPath) -> Result<Vec<CommitConflict>> {
        Ok(self.check_base(dir).await?.0)
    }

    /// [`Self::conflicts`], and the changes the base already holds.
    async fn check_base(
        &self,
        dir: &VirtualPath,
    ) -> Result<(Vec<CommitConflict>, BTreeSet<VirtualPath>)> {
        let changes = self.changes(dir).await?;
        let mut conflicts = Vec::new();
        let mut settled = BTreeSet::new();
        for change in &changes {
            let now = self.base_version(&change.path).await?;
            let reason = match (&change.base_version, &now) {
                (Some(then), Some(now)) if then != now => "changed in the base since",
                (Some(_), None) => "deleted from the base since",
                (None, Some(_)) => "created in the base since",
                _ => continue,
            };
            if self.already_in_base(change, now.as_ref()).await? {
                settled.insert(change.path.clone());
                continue;
            }
            conflicts.push(CommitConflict {
                path: change.path.clone(),
                reason,
            });
        }
        Ok((conflicts, settled))
    }

    /// Whether the base file (at version `now`) already is what committing `change` makes it.
    async fn already_in_base(&self, change: &LayerChange, now: Option<&Version>) -> Result<bool> {
        let now = match (change.kind, now) {
            (ChangeKind::Deleted, now) => return Ok(now.is_none()),
            (_, None) => return Ok(false),
            (_, Some(now)) => now,
        };
        let layer = match self
            .layer
            .read_at_most(&change.path, MAX_ROLLBACK_IN_MEMORY)
            .await
        {
            Ok(BoundedRead::Whole(layer)) => layer,
            Ok(BoundedRead::TooLarge { .. }) => return Ok(false),
            // Marked changed but its file already gone from the layer: a decided commit was
            // letting it go (file first, then mark) when the process died; the base has it.
            Err(Error::NotFound { .. }) => return Ok(true),
            Err(error) => return Err(error),
        };
        if Version::of_content(&layer.content) == *now {
            return Ok(true);
        }
        let base = self
            .base
            .read_at_most(&change.path, MAX_ROLLBACK_IN_MEMORY)
            .await?;
        Ok(matches!(base, BoundedRead::Whole(base) if base.content == layer.content))
    }

    /// Writes the layer's changes under `dir` into the base, each file atomically as the base
    /// writes; nothing is written when any base file changed since the layer first took it
    /// ([`Staged::Conflicts`]).
    ///
    /// All or nothing against failures too: each base file replaced or deleted is first kept
    /// aside on disk (the disk mount's undo mechanism: a hard link or rename into its private
    /// directory, never through memory), so that when writing a later file fails (a directory
    /// in the way, no space, no permission) every file already written is put back as it was
    /// (renamed back: atomic), files created are removed, and the layer keeps all its changes
    /// ([`Staged::Failed`]).
    ///
    /// The changes stay in the layer until the [`StagedCommit`] finishes (they leave the layer)
    /// or is undone (the base is put back), so that a commit over several overlay mounts is all
    /// or nothing across them: each is staged, and only when all are does any finish. Other
    /// changes through this overlay wait until it finishes or is undone.
    ///
    /// Where the base keeps a change journal (disk), the writes go through it (`role`: this
    /// mount's place among the mounts of the commit): a crash at any moment leaves the base as
    /// before the commit, or — once [`StagedCommit::decide`] ran — as after it; the layer lets
    /// its changes go only after that (see the module doc of `disk::journal`).
    pub async fn stage_commit(&self, dir: &VirtualPath, role: &JournalRole) -> Result<Staged<'_>> {
        let changing = self.changing.lock().await;
        let (conflicts, settled) = self.check_base(dir).await?;
        if !conflicts.is_empty() {
            return Ok(Staged::Conflicts(conflicts));
        }
        let changes = self.changes(dir).await?;
        let planned: Vec<&LayerChange> = changes
            .iter()
            .filter(|c| !settled.contains(&c.path))
            .filter(|c| !(c.kind == ChangeKind::Deleted && c.base_version.is_none()))
            .collect();
        let files: Vec<PlannedFile> = planned
            .iter()
            .map(|c| PlannedFile {
                path: c.path.clone(),
                before: c.base_version.clone(),
            })
            .collect();
        // A primary journal is begun even with nothing to write here: it holds the decision
        // the other mounts' journals wait for.
        let journal = if files.is_empty() && !matches!(role, JournalRole::Primary { .. }) {
            None
        } else {
            match self.base.begin_changes(&files, role).await {
                Ok(journal) => journal,
                Err(Error::VersionMismatch { path }) => {
                    // Another program changed it between the check and the journal.
                    return Ok(Staged::Conflicts(vec![CommitConflict {
                        path,
                        reason: "changed in the base since",
                    }]));
                }
                Err(error) => return Err(error),
            }
        };
        let mut writes = match journal {
            Some(journal) => CommitWrites::Journaled(StagedJournal {
                journal,
                paths: files.into_iter().map(|f| f.path).collect(),
                applied: Vec::new(),
            }),
            None => CommitWrites::Plain(Vec::new()),
        };
        // Only the planned changes: a change the base already holds (a decided commit cut short
        // while its layer let go) is not written twice, and its layer file may be gone.
        let mut failure = None;
        for (index, change) in planned.iter().enumerate() {
            let written = match &mut writes {
                CommitWrites::Journaled(staged) => self
                    .commit_journaled(&*staged.journal, index, change)
                    .await
                    .map(|now| staged.applied.push((index, now))),
                CommitWrites::Plain(done) => self
                    .commit_one(change)
                    .await
                    .map(|written| done.extend(written)),
            };
            if let Err(error) = written {
                failure = Some((change.path.clone(), error));
                break;
            }
        }
        let kept_dirs = match failure {
            Some(failure) => Err(failure),
            None => self
                .commit_opaque(dir, writes.journal().map(|j| &*j.journal))
                .await
                .map_err(|error| (dir.clone(), error)),
        };
        match kept_dirs {
            Ok(kept_dirs) => Ok(Staged::Written(StagedCommit {
                overlay: self,
                dir: dir.clone(),
                changes,
                writes,
                kept_dirs,
                _changing: changing,
            })),
            Err((path, error)) => {
                let (restored, not_restored) = writes.roll_back(self).await;
                Ok(Staged::Failed {
                    path,
                    error,
                    restored,
                    not_restored,
                })
            }
        }
    }

    /// Writes one change into the base through its journal (planned file `index`): the
    /// version the base file is left with (`None`: deleted).
    async fn commit_journaled(
        &self,
        journal: &dyn ChangeJournal,
        index: usize,
        change: &LayerChange,
    ) -> Result<Option<Version>> {
        match (change.kind, &change.base_version) {
            (ChangeKind::Deleted, Some(old)) => journal.delete(index, old).await.map(|()| None),
            (ChangeKind::Deleted, None) => Ok(None),
            (ChangeKind::Added | ChangeKind::Modified, base_version) => {
                let file = self.layer.read(&change.path).await?;
                let mode = match base_version {
                    Some(old) => WriteMode::IfVersion(old.clone()),
                    None => WriteMode::CreateOnly,
                };
                let outcome = journal.write(index, &file.content, mode).await?;
                Ok(Some(outcome.version))
            }
        }
    }

    /// Writes one change into the base, keeping what it replaces so that it can be put back.
    /// `None` when there was nothing to do (a deleted file already gone from the base).
    async fn commit_one(&self, change: &LayerChange) -> Result<Option<Written>> {
        match (change.kind, &change.base_version) {
            (ChangeKind::Added | ChangeKind::Modified, base_version) => {
                let file = self.layer.read(&change.path).await?;
                let Some(old) = base_version else {
                    let created_dirs = self.missing_parents(&change.path).await?;
                    let outcome = self
                        .base
                        .write(&change.path, &file.content, WriteMode::CreateOnly)
                        .await?;
                    return Ok(Some(Written {
                        path: change.path.clone(),
                        now: Some(outcome.version),
                        before: Before::Absent,
                        created_dirs,
                    }));
                };
                if let Some((outcome, aside)) = self
                    .base
                    .write_keeping_aside(&change.path, &file.content, old)
                    .await?
                {
                    return Ok(Some(Written {
                        path: change.path.clone(),
                        now: Some(outcome.version),
                        before: Before::Aside(aside),
                        created_dirs: Vec::new(),
                    }));
                }
                // The base cannot keep this file aside (another file system): keep it in
                // memory, within a bound.
                let before = self.before_in_memory(&change.path).await?;
                let outcome = self
                    .base
                    .write(
                        &change.path,
                        &file.content,
                        WriteMode::IfVersion(old.clone()),
                    )
                    .await?;
                Ok(Some(Written {
                    path: change.path.clone(),
                    now: Some(outcome.version),
                    before,
                    created_dirs: Vec::new(),
                }))
            }
            (ChangeKind::Deleted, None) => Ok(None),
            (ChangeKind::Deleted, Some(old)) => {
                if self.base.stat(&change.path).await?.is_none() {
                    return Ok(None);
                }
                if let Some(aside) = self.base.set_aside(&change.path, old).await? {
                    return Ok(Some(Written {
                        path: change.path.clone(),
                        now: None,
                        before: Before::Aside(aside),
                        created_dirs: Vec::new(),
                    }));
                }
                let before = self.before_in_memory(&change.path).await?;
                let options = DeleteOptions::file_if_version(old.clone());
                match self.base.delete(&change.path, &options).await {
                    Ok(()) => Ok(Some(Written {
                        path: change.path.clone(),
                        now: None,
                        before,
                        created_dirs: Vec::new(),
                    })),
                    Err(Error::NotFound { .. }) => Ok(None),
                    Err(error) => Err(error),
                }
            }
        }
    }

    /// The base file's content, held in memory to put it back if the commit fails; refused
    /// over [`MAX_ROLLBACK_IN_MEMORY`] bytes (then nothing of this file was written).
    async fn before_in_memory(&self, path: &VirtualPath) -> Result<Before> {
        match self.base.read_at_most(path, MAX_ROLLBACK_IN_MEMORY).await? {
            BoundedRead::Whole(file) => Ok(Before::Content(file.content)),
            BoundedRead::TooLarge { size, .. } => Err(Error::Unsupported {
                path: path.clone(),
                reason: format!(
                    "it is {size} bytes on another file system than the mount root, so its old content cannot be kept aside (on disk) or in memory (at most {MAX_ROLLBACK_IN_MEMORY} bytes) to put it back should the commit fail; commit the other files first (commit a narrower path) and copy this one by hand"
                ),
            }),
        }
    }

    /// The parent directories of `path` the base lacks, nearest to the root first.
    async fn missing_parents(&self, path: &VirtualPath) -> Result<Vec<VirtualPath>> {
        let mut missing = Vec::new();
        let mut at = path.parent();
        while let Some(dir) = at {
            if dir.is_root() || self.base.stat(&dir).await?.is_some() {
                break;
            }
            at = dir.parent();
            missing.push(dir);
        }
        missing.reverse();
        Ok(missing)
    }

    /// Puts back every base file a failed commit wrote, last written first: returns the files
    /// put back and those that could not be, with why.
    async fn roll_back(&self, done: Vec<Written>) -> (Vec<VirtualPath>, Vec<(VirtualPath, Error)>) {
        let mut restored = Vec::new();
        let mut not_restored = Vec::new();
        for written in done.into_iter().rev() {
            let result = match &written.before {
                Before::Aside(aside) => aside.0.restore(written.now.as_ref()).await.map(|_| ()),
                Before::Content(content) => {
                    let mode = match &written.now {
                        Some(now) => WriteMode::IfVersion(now.clone()),
                        None => WriteMode::CreateOnly,
                    };
                    self.base
                        .write(&written.path, content, mode)
                        .await
                        .map(|_| ())
                }
                Before::Absent => {
                    let options = match &written.now {
                        Some(now) => DeleteOptions::file_if_version(now.clone()),
                        None => DeleteOptions::default(),
                    };
                    match self.base.delete(&written.path, &options).await {
                        Ok(()) | Err(Error::NotFound { .. }) => Ok(()),
                        Err(error) => Err(error),
                    }
                }
            };
            match result {
                Ok(()) => {
                    // Directories the commit created for this file go too, when left empty.
                    for dir in written.created_dirs.iter().rev() {
                        if self
                            .base
                            .delete(dir, &DeleteOptions::default())
                            .await
                            .is_err()
                        {
                            break;
                        }
                    }
                    restored.push(written.path);
                }
                Err(error) => not_restored.push((written.path, error)),
            }
        }
        restored.reverse();
        (restored, not_restored)
    }

    /// Removes the base directory `path` whole: through the commit's journal where there is
    /// one (a roll-back then puts it back as it was, whatever it held), else as a delete.
    async fn remove_base_dir(
        &self,
        path: &VirtualPath,
        journal: Option<&dyn ChangeJournal>,
    ) -> Result<()> {
        if let Some(journal) = journal
            && journal.remove_dir(path).await?
        {
            return Ok(());
        }
        let options = DeleteOptions {
            recursive: true,
            if_version: None,
        };
        match self.base.delete(path, &options).await {
            Ok(()) | Err(Error::NotFound { .. }) => Ok(()),
            Err(error) => Err(error),
        }
    }

    /// Removes the base directories deleted whole under `dir`, deepest first, unless they still
    /// hold files the layer did not delete (created since by someone else): those are kept.
    /// The layer's marks of them stay (the caller drops them once the whole commit is done).
    async fn commit_opaque(
        &self,
        dir: &VirtualPath,
        journal: Option<&dyn ChangeJournal>,
    ) -> Result<Vec<VirtualPath>> {
        let mut kept = Vec::new();
        for path in self.opaque_under(dir).await?.iter().rev() {
            if self.book().await?.shown_within(path) {
                // Part of it was shown again: remove only what lies beside the shown paths.
                self.commit_partly_shown(path, &mut kept, journal).await?;
                continue;
            }
            if self.base.stat(path).await?.is_some_and(|e| e.is_dir()) {
                let query = GlobQuery {
                    dir: path.clone(),
                    matcher: GlobMatcher::new("*").map_err(|e| Error::Unavailable {
                        message: e.to_string(),
                    })?,
                    control: super::SearchControl::default(),
                };
                if self.base.glob(&query).await?.is_empty() {
                    self.remove_base_dir(path, journal).await?;
                } else {
                    kept.push(path.clone());
                }
            }
        }
        Ok(kept)
    }

    /// Removes what the view hides of the base directory `dir`, deleted whole but with paths
    /// below it shown again: every child directory beside the shown paths (when no one put
    /// files there since: else it is kept, in `kept`), recursing towards the shown ones.
    async fn commit_partly_shown(
        &self,
        dir: &VirtualPath,
        kept: &mut Vec<VirtualPath>,
        journal: Option<&dyn ChangeJournal>,
    ) -> Result<()> {
        let mut stack = vec![dir.clone()];
        while let Some(at) = stack.pop() {
            if !self.base.stat(&at).await?.is_some_and(|e| e.is_dir()) {
                continue;
            }
            for child in self.base.ls(&at).await? {
                if !child.is_dir() {
                    continue;
                }
                let (shown_here, shown_below) = {
                    let book = self.book().await?;
                    (
                        book.shown.contains(child.path.as_str()),
                        book.shown_within(&child.path),
                    )
                };
                if shown_here {
                    continue;
                }
                if shown_below {
                    stack.push(child.path);
                    continue;
                }
                let query = GlobQuery {
                    dir: child.path.clone(),
                    matcher: GlobMatcher::new("*").map_err(|e| Error::Unavailable {
                        message: e.to_string(),
                    })?,
                    control: super::SearchControl::default(),
                };
                if self.base.glob(&query).await?.is_empty() {
                    self.remove_base_dir(&child.path, journal).await?;
                } else {
                    kept.push(child.path);
                }
            }
        }
        Ok(())
    }

    /// The deleted base directories at or under `dir`.
    async fn opaque_under(&self, dir: &VirtualPath) -> Result<Vec<VirtualPath>> {
        let book = self.book().await?;
        let prefix = dir_prefix(dir);
        book.opaque
            .iter()
            .filter(|d| d.as_str() == dir.as_str() || d.starts_with(&prefix))
            .map(|d| Ok(VirtualPath::parse_raw(d)?))
            .collect()
    }

    /// Takes `changes` out of the layer: their files (when the layer holds one) and marks.
    async fn drop_from_layer(&self, changes: &[LayerChange]) -> Result<()> {
        for change in changes {
            if change.kind != ChangeKind::Deleted {
                match self
                    .layer
                    .delete(&change.path, &DeleteOptions::default())
                    .await
                {
                    Ok(()) | Err(Error::NotFound { .. }) => {}
                    Err(error) => return Err(error),
                }
            }
            self.save_mark(&change.path, None).await?;
        }
        Ok(())
    }

    /// Drops the layer's changes under `dir`: the view shows the base there again. Returns the
    /// files whose changes were dropped.
    pub async fn discard(&self, dir: &VirtualPath) -> Result<Vec<LayerChange>> {
        let _changing = self.changing.lock().await;
        let changes = self.changes(dir).await?;
        self.drop_from_layer(&changes).await?;
        for opaque in self.opaque_under(dir).await? {
            self.save_opaque(&opaque, false).await?;
        }
        for shown in self.shown_under(dir).await? {
            self.save_shown(&shown, false).await?;
        }
        // Below a directory deleted whole: the base's entry here shows again, with the parents
        // it needs, while the rest of that directory stays deleted.
        let covered = self.book().await?.opaque_covers(dir);
        if covered && self.base.stat(dir).await?.is_some() {
            self.save_shown(dir, true).await?;
        }
        Ok(changes)
    }
}

/// The version a bounded read found.
fn version_of(read: BoundedRead) -> Version {
    match read {
        BoundedRead::Whole(file) => file.version,
        BoundedRead::TooLarge { version, .. } => version,
    }
}

/// A failure of the layer's store, as the agent reads it.
fn layer_failure(path: &VirtualPath, error: &crate::store::Error) -> Error {
    Error::Unavailable {
        message: format!("the overlay layer could not record the change to {path}: {error}"),
    }
}

/// Loads every persisted mark of a SQLite layer, page by page.
async fn load_book(persist: &Persist) -> Result<Book> {
    let mut book = Book::default();
    let mut start = ListStart::Beginning;
    loop {
        let query = ListQuery {
            prefix: String::new(),
            start: start.clone(),
            limit: LOAD_PAGE,
        };
        let page = persist
            .store
            .scan(&persist.namespace, &query)
            .await
            .map_err(|e| Error::Unavailable {
                message: format!("the overlay layer's marks could not be loaded: {e}"),
            })?;
        let Some(last) = page.last() else { break };
        start = ListStart::After(last.meta.key.clone());
        let full = page.len() >= LOAD_PAGE;
        for item in page {
            let text = String::from_utf8_lossy(&item.content);
            if let Some(path) = item.meta.key.strip_prefix(FILE_KEY) {
                if let Some(mark) = Mark::decode(&text) {
                    book.files.insert(path.to_owned(), mark);
                }
            } else if let Some(dir) = item.meta.key.strip_prefix(OPAQUE_KEY) {
                book.opaque.insert(dir.to_owned());
            } else if let Some(path) = item.meta.key.strip_prefix(SHOWN_KEY) {
                book.shown.insert(path.to_owned());
            }
        }
        if !full {
            break;
        }
    }
    Ok(book)
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl Backend for OverlayBackend {
    async fn stat(&self, path: &VirtualPath) -> Result<Option<Entry>> {
        let (layer_file, layer_dir, hidden) = {
            let book = self.book().await?;
            (
                book.layer_file(path),
                book.layer_dir(path),
                !book.base_partly_shown(path),
            )
        };
        if layer_file {
            return self.layer.stat(path).await;
        }
        if hidden {
            return Ok((layer_dir || path.is_root()).then(|| Entry::directory(path.clone())));
        }
        match self.base.stat(path).await? {
            Some(entry) if entry.is_dir() || !layer_dir => Ok(Some(entry)),
            _ if layer_dir => Ok(Some(Entry::directory(path.clone()))),
            other => Ok(other),
        }
    }

    async fn ls(&self, dir: &VirtualPath) -> Result<Vec<Entry>> {
        match self.stat(dir).await? {
            None => return Err(Error::NotFound { path: dir.clone() }),
            Some(entry) if !entry.is_dir() => {
                return Err(Error::NotADirectory { path: dir.clone() });
            }
            Some(_) => {}
        }
        let (hidden, layer_dir) = {
            let book = self.book().await?;
            (!book.base_partly_shown(dir), book.layer_dir(dir))
        };
        let mut entries: BTreeMap<String, Entry> = BTreeMap::new();
        if !hidden && self.base.stat(dir).await?.is_some_and(|e| e.is_dir()) {
            let listed = self.base.ls(dir).await?;
            let book = self.book().await?;
            for entry in listed {
                if book.base_partly_shown(&entry.path) {
                    entries.insert(entry.path.as_str().to_owned(), entry);
                }
            }
        }
        if layer_dir {
            for entry in self.layer.ls(dir).await? {
                match entries.get(entry.path.as_str()) {
                    Some(base) if base.is_dir() && entry.is_dir() => {}
                    _ => {
                        entries.insert(entry.path.as_str().to_owned(), entry);
                    }
                }
            }
        }
        Ok(entries.into_values().collect())
    }

    async fn read(&self, path: &VirtualPath) -> Result<FileBytes> {
        if self.book().await?.routes_to_layer(path) {
            self.layer.read(path).await
        } else {
            self.base.read(path).await
        }
    }

    async fn read_at_most(&self, path: &VirtualPath, max_bytes: u64) -> Result<BoundedRead> {
        if self.book().await?.routes_to_layer(path) {
            self.layer.read_at_most(path, max_bytes).await
        } else {
            self.base.read_at_most(path, max_bytes).await
        }
    }

    async fn read_window(&self, path: &VirtualPath, window: LineWindow) -> Result<FileView> {
        if self.book().await?.routes_to_layer(path) {
            self.layer.read_window(path, window).await
        } else {
            self.base.read_window(path, window).await
        }
    }

    async fn write(
        &self,
        path: &VirtualPath,
        content: &[u8],
        mode: WriteMode,
    ) -> Result<WriteOutcome> {
        let _changing = self.changing.lock().await;
        let current = self.current(path).await?;
        match (&mode, &current) {
            (WriteMode::CreateOnly, Some(_)) => {
                return Err(Error::AlreadyExists { path: path.clone() });
            }
            (WriteMode::IfVersion(expected), Some((version, _))) if version != expected => {
                return Err(Error::VersionMismatch { path: path.clone() });
            }
            (WriteMode::IfVersion(_), None) => {
                return Err(Error::VersionMismatch { path: path.clone() });
            }
            _ => {}
        }
        self.check_parents(path).await?;
        let outcome = self
            .layer
            .write(path, content, WriteMode::Overwrite)
            .await?;
        let base = match self.book().await?.mark(path) {
            Some(mark) => mark.base.clone(),
            None => match &current {
                Some((version, true)) => Some(version.clone()),
                _ => None,
            },
        };
        let mark = Mark {
            state: MarkState::Changed,
            base,
        };
        self.save_mark(path, Some(mark)).await?;
        Ok(WriteOutcome {
            version: outcome.version,
            created: current.is_none(),
        })
    }

    async fn delete(&self, path: &VirtualPath, options: &DeleteOptions) -> Result<()> {
        let _changing = self.changing.lock().await;
        let Some(entry) = self.stat(path).await? else {
            return Err(Error::NotFound { path: path.clone() });
        };
        if !entry.is_dir() {
            let Some((version, from_base)) = self.current(path).await? else {
                return Err(Error::NotFound { path: path.clone() });
            };
            if options.if_version.as_ref().is_some_and(|v| *v != version) {
                return Err(Error::VersionMismatch { path: path.clone() });
            }
            return self.hide_file(path, version, from_base).await;
        }
        let files = self.files_below(path).await?;
        if !files.is_empty() && !options.recursive {
            return Err(Error::DirectoryNotEmpty { path: path.clone() });
        }
        for (file, in_layer) in files {
            let version = if in_layer {
                version_of(self.layer.read_at_most(&file, 0).await?)
            } else {
                version_of(self.base.read_at_most(&file, 0).await?)
            };
            self.hide_file(&file, version, !in_layer).await?;
        }
        let base_dir = {
            let shown = self.book().await?.base_partly_shown(path);
            shown && self.base.stat(path).await?.is_some_and(|e| e.is_dir())
        };
        if base_dir {
            self.save_opaque(path, true).await?;
        }
        Ok(())
    }

    async fn set_aside(
        &self,
        _path: &VirtualPath,
        _version: &Version,
    ) -> Result<Option<AsideFile>> {
        // The layer keeps no content outside memory: undo keeps the earlier content itself.
        Ok(None)
    }

    async fn write_keeping_aside(
        &self,
        _path: &VirtualPath,
        _content: &[u8],
        _version: &Version,
    ) -> Result<Option<(WriteOutcome, AsideFile)>> {
        Ok(None)
    }

    /// Changes go to the layer, file by file; a commit journals its base itself (`stage_commit`).
    async fn begin_changes(
        &self,
        _files: &[super::PlannedFile],
        _role: &super::JournalRole,
    ) -> Result<Option<Box<dyn super::ChangeJournal>>> {
        Ok(None)
    }

    async fn rename(
        &self,
        from: &VirtualPath,
        to: &VirtualPath,
        options: &RenameOptions,
    ) -> Result<Option<Renamed>> {
        let _changing = self.changing.lock().await;
        if from.is_root() {
            return Err(Error::MountRoot { path: from.clone() });
        }
        if to.is_root() {
            return Err(Error::MountRoot { path: to.clone() });
        }
        let Some(source) = self.stat(from).await? else {
            return Err(Error::NotFound { path: from.clone() });
        };
        if to.starts_with(from) {
            return Err(Error::Unsupported {
                path: to.clone(),
                reason: format!("it lies inside {from}; a directory cannot be moved into itself"),
            });
        }
        let source_version = if source.is_dir() {
            None
        } else {
            self.current(from).await?
        };
        if let Some(expected) = &options.if_version
            && source_version.as_ref().is_none_or(|(v, _)| v != expected)
        {
            return Err(Error::VersionMismatch { path: from.clone() });
        }
        let destination = match self.stat(to).await? {
            Some(entry) if entry.is_dir() => return Err(Error::IsADirectory { path: to.clone() }),
            Some(_) => self.current(to).await?,
            None => None,
        };
        self.check_parents(to).await?;
        match (&destination, &options.replacing) {
            (None, None) => {}
            (None, Some(_)) => return Err(Error::VersionMismatch { path: to.clone() }),
            (Some(_), None) => return Err(Error::AlreadyExists { path: to.clone() }),
            (Some(_), Some(_)) if source.is_dir() => {
                return Err(Error::AlreadyExists { path: to.clone() });
            }
            (Some((existing, _)), Some(expected)) if existing != expected => {
                return Err(Error::VersionMismatch { path: to.clone() });
            }
            (Some(_), Some(_)) => {}
        }
        if let Some((version, from_base)) = source_version {
            let version = self
                .move_file(from, to, version, from_base, destination)
                .await?;
            return Ok(Some(Renamed {
                kind: super::EntryKind::File,
                version: Some(version),
            }));
        }
        let base_dir = {
            let shown = self.book().await?.base_partly_shown(from);
            shown && self.base.stat(from).await?.is_some_and(|e| e.is_dir())
        };
        for (file, in_layer) in self.files_below(from).await? {
            let Some(relative) = file.relative_to(from) else {
                continue;
            };
            let target = to.join_relative(relative)?;
            let version = if in_layer {
                version_of(self.layer.read_at_most(&file, 0).await?)
            } else {
                version_of(self.base.read_at_most(&file, 0).await?)
            };
            let replaced = self.current(&target).await?;
            self.move_file(&file, &target, version, !in_layer, replaced)
                .await?;
        }
        if base_dir {
            self.save_opaque(from, true).await?;
        }
        Ok(Some(Renamed {
            kind: super::EntryKind::Directory,
            version: None,
        }))
    }

    async fn permissions(&self, path: &VirtualPath) -> Result<Option<u32>> {
        if self.book().await?.routes_to_layer(path) {
            return Ok(None);
        }
        self.base.permissions(path).await
    }

    async fn set_permissions(&self, _path: &VirtualPath, _mode: u32) -> Result<Option<Version>> {
        // The base is never written before commit; a committed file keeps the base's mode.
        Ok(None)
    }

    async fn same_file(&self, a: &VirtualPath, b: &VirtualPath) -> Result<bool> {
        let layered = {
            let book = self.book().await?;
            book.routes_to_layer(a) || book.routes_to_layer(b)
        };
        if layered {
            return Ok(a == b);
        }
        self.base.same_file(a, b).await
    }

    async fn is_symlink(&self, path: &VirtualPath) -> Result<bool> {
        if self.book().await?.routes_to_layer(path) {
            return Ok(false);
        }
        self.base.is_symlink(path).await
    }

    fn host_dir(&self) -> Option<&std::path::Path> {
        // `execute` runs in the base directory: its commands see the base, not the layer.
        self.base.host_dir()
    }

    async fn glob(&self, query: &GlobQuery) -> Result<Vec<Entry>> {
        let search = |backend: &Arc<dyn Backend>, control| -> SearchFuture<'_, Entry> {
            let backend = backend.clone();
            Box::pin(async move {
                backend
                    .glob(&GlobQuery {
                        control,
                        ..query.clone()
                    })
                    .await
            })
        };
        self.search_view(&query.dir, &query.control, search, |e| &e.path)
            .await
    }

    async fn grep(&self, query: &GrepQuery) -> Result<Vec<GrepFile>> {
        let search = |backend: &Arc<dyn Backend>, control| -> SearchFuture<'_, GrepFile> {
            let backend = backend.clone();
            Box::pin(async move {
                backend
                    .grep(&GrepQuery {
                        control,
                        ..query.clone()
                    })
                    .await
            })
        };
        self.search_view(&query.dir, &query.control, search, |f| &f.path)
            .await
    }
}

/// One backend's glob or grep, as [`OverlayBackend::search_view`] runs it.
type SearchFuture<'a, T> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Vec<T>>> + Send + 'a>>;

impl OverlayBackend {
    /// One glob or grep of `dir` through the overlay (`search` runs it on a backend with a
    /// control): the base's walk and the layer's own search at once, the base's files the
    /// layer hides left out, and the layer's files judged by the ignore files the walk read
    /// (so only after it). The base's walk skips the hidden paths before it counts lines, so
    /// the lines a grep keeps for the answer's page are the view's, not cut short by files it
    /// hides.
    async fn search_view<'a, T: Send>(
        &'a self,
        dir: &VirtualPath,
        control: &super::SearchControl,
        search: impl Fn(&Arc<dyn Backend>, super::SearchControl) -> SearchFuture<'a, T>,
        path_of: impl Fn(&T) -> &VirtualPath,
    ) -> Result<Vec<T>> {
        let plan = self.search_plan(dir).await?;
        let base = async {
            if plan.base {
                search(&self.base, plan.base_control(control)).await
            } else {
                Ok(Vec::new())
            }
        };
        let layer = async {
            if plan.layer {
                search(&self.layer, control.without_view()).await
            } else {
                Ok(Vec::new())
            }
        };
        let (base, layer) = tokio::join!(base, layer);
        let mut out: Vec<T> = base?
            .into_iter()
            .filter(|found| !plan.book.base_hidden(path_of(found)))
            .collect();
        out.extend(self.drop_ignored(&plan, dir, layer?, &path_of).await?);
        Ok(out)
    }
}

/// How one glob or grep through the overlay runs.
struct SearchPlan {
    /// The book when the search began.
    book: Arc<Book>,
    /// Search the base (the searched directory is not wholly hidden).
    base: bool,
    /// Search the layer (it holds files there).
    layer: bool,
    /// What the base's walk must skip and read as the layer has it; `None` when the layer
    /// changes nothing the walk sees.
    view: Option<Arc<LayerView>>,
}

impl SearchPlan {
    fn base_control(&self, control: &super::SearchControl) -> super::SearchControl {
        match &self.view {
            Some(view) => control.with_view(view.clone() as Arc<dyn crate::search::SearchView>),
            None => control.clone(),
        }
    }

    /// The ignore files of the directory `dir` as the base's walk read them, if it did.
    fn seen(&self, dir: &VirtualPath) -> Option<SeenIgnoreFiles> {
        let view = self.view.as_ref()?;
        let seen = view.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.dirs.get(dir.as_str()).cloned()
    }
}

/// The overlay's [`crate::search::SearchView`]: a snapshot of the book and the content of every
/// ignore file the layer holds.
#[derive(Debug)]
struct LayerView {
    book: Arc<Book>,
    ignore_files: BTreeMap<String, Arc<[u8]>>,
    /// The base directories above the layer's files that the walk read, with the ignore
    /// files it read there ([`crate::search::SearchView::saw_dir`]).
    seen: std::sync::Mutex<SeenDirs>,
}

/// What [`LayerView::seen`] holds.
#[derive(Debug, Default)]
struct SeenDirs {
    dirs: std::collections::HashMap<String, SeenIgnoreFiles>,
    /// Bytes of ignore files kept, at most [`SEEN_BYTES`].
    bytes: usize,
}

/// Most bytes of ignore files one search keeps for judging the layer's files (a base whose
/// directories hold huge ignore files cannot make a search hold them all).
const SEEN_BYTES: usize = 16 * 1024 * 1024;

/// The `.ignore`, `.gitignore` and `.git/info/exclude` of one directory as a walk read them.
type SeenIgnoreFiles = [Option<Arc<[u8]>>; 3];

impl crate::search::SearchView for LayerView {
    fn hides(&self, path: &VirtualPath) -> bool {
        !self.book.base_partly_shown(path)
    }

    fn ignore_file(&self, path: &VirtualPath) -> crate::search::ViewedFile {
        use crate::search::ViewedFile;
        if let Some(content) = self.ignore_files.get(path.as_str()) {
            return ViewedFile::Content(content.clone());
        }
        if self.book.base_hidden(path) {
            ViewedFile::Absent
        } else {
            ViewedFile::Base
        }
    }

    fn untouched(&self, dir: &VirtualPath) -> bool {
        let book = &self.book;
        let prefix = dir_prefix(dir);
        let opaque_below = book
            .opaque
            .range::<str, _>((Bound::Included(prefix.as_str()), Bound::Unbounded))
            .next()
            .is_some_and(|key| key.starts_with(&prefix));
        book.marks_under(dir).next().is_none() && !book.opaque_covers(dir) && !opaque_below
    }

    fn saw_dir(&self, path: &VirtualPath, ignore_files: &[Option<Vec<u8>>; 3]) {
        // Only the directories a layer file's judgement asks about (bounded by the layer), and
        // at most SEEN_BYTES of ignore files in all: past that, directories are not kept, and
        // their ignore files are read again when a layer file is judged.
        if !self.book.layer_dir(path) {
            return;
        }
        let bytes: usize = ignore_files.iter().flatten().map(Vec::len).sum();
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if seen.bytes + bytes > SEEN_BYTES {
            return;
        }
        seen.bytes += bytes;
        let files = ignore_files
            .each_ref()
            .map(|file| file.as_deref().map(Arc::from));
        seen.dirs.insert(path.as_str().to_owned(), files);
    }
}

/// Whether `path` names an ignore file (`.ignore`, `.gitignore`, `.git/info/exclude`).
fn is_ignore_file(path: &str) -> bool {
    super::ignore_rules::IGNORE_FILES.iter().any(|name| {
        path.strip_suffix(name)
            .is_some_and(|before| before.ends_with('/'))
    })
}

impl OverlayBackend {
    /// What a search of `dir` reads: the base (unless wholly hidden), the layer (when it holds
    /// files there), and the view the base's walk obeys.
    async fn search_plan(&self, dir: &VirtualPath) -> Result<SearchPlan> {
        let book = self.book().await?.clone();
        let base = !book.opaque_covers(dir) || book.shown_within(dir);
        let layer = book.layer_file(dir) || book.layer_dir(dir);
        let view = if book.files.is_empty() && book.opaque.is_empty() && book.shown.is_empty() {
            None
        } else {
            let mut ignore_files = BTreeMap::new();
            for (path, mark) in &book.files {
                if mark.state == MarkState::Changed && is_ignore_file(path) {
                    let path = VirtualPath::parse_raw(path)?;
                    if let BoundedRead::Whole(file) = self
                        .layer
                        .read_at_most(&path, super::ignore_rules::MAX_IGNORE_FILE_BYTES)
                        .await?
                    {
                        ignore_files.insert(path.as_str().to_owned(), Arc::from(file.content));
                    }
                }
            }
            Some(Arc::new(LayerView {
                book: book.clone(),
                ignore_files,
                seen: std::sync::Mutex::default(),
            }))
        };
        Ok(SearchPlan {
            book,
            base,
            layer,
            view,
        })
    }

    /// Drops from `found` (layer files of a search of `dir`) what the disk walk would not
    /// report for a disk file in the same place: files below a `.git` directory, and, unless
    /// the mount is `no-ignore`, files that the ignore files (as the view has them) ignore, or
    /// that lie in an ignored directory below `dir`.
    async fn drop_ignored<T>(
        &self,
        plan: &SearchPlan,
        dir: &VirtualPath,
        found: Vec<T>,
        path_of: impl Fn(&T) -> &VirtualPath,
    ) -> Result<Vec<T>> {
        let mut rules = LayerIgnoreRules {
            dirs: std::collections::HashMap::new(),
            plan,
        };
        let mut kept = Vec::with_capacity(found.len());
        for item in found {
            let path = path_of(&item);
            let Some(relative) = path.relative_to(dir) else {
                kept.push(item);
                continue;
            };
            let relative = relative.to_owned();
            if relative.split('/').any(|part| part == ".git") {
                continue;
            }
            if self.ignore_files && !relative.is_empty() {
                // Each step below `dir`, as the walk meets it: a directory, then the file.
                let mut ignored = false;
                let mut at = dir.clone();
                let parts: Vec<&str> = relative.split('/').collect();
                for (i, part) in parts.iter().enumerate() {
                    at = at.join_relative(part)?;
                    let is_dir = i + 1 < parts.len();
                    if self.ignored_in_view(&mut rules, &at, is_dir).await? {
                        ignored = true;
                        break;
                    }
                }
                if ignored {
                    continue;
                }
            }
            kept.push(item);
        }
        Ok(kept)
    }

    /// Whether the ignore files of `path`'s ancestors, read through this overlay's view, ignore it.
    async fn ignored_in_view(
        &self,
        rules: &mut LayerIgnoreRules<'_>,
        path: &VirtualPath,
        is_dir: bool,
    ) -> Result<bool> {
        let mut levels = Vec::new();
        let mut at = path.parent();
        while let Some(dir) = at {
            levels.push(self.matchers_in_view(rules, &dir).await?);
            at = dir.parent();
        }
        Ok(super::ignore_rules::is_ignored(
            &levels,
            std::path::Path::new(path.as_str()),
            is_dir,
        ))
    }

    /// The ignore matchers of `dir` as the view has its ignore files, cached in `rules`.
    async fn matchers_in_view(
        &self,
        rules: &mut LayerIgnoreRules<'_>,
        dir: &VirtualPath,
    ) -> Result<super::ignore_rules::Matchers> {
        if let Some(found) = rules.dirs.get(dir.as_str()) {
            return Ok(found.clone());
        }
        let root = std::path::Path::new(dir.as_str());
        // Where the base's walk read `dir`, the files it read are the view's: nothing is read
        // again (a `.git/info/exclude` counts, for the walk, only below a `.git` directory on
        // disk; one the layer made is read here).
        let seen = rules.plan.seen(dir);
        let mut found: [Option<ignore::gitignore::Gitignore>; 3] = [None, None, None];
        for (kind, (slot, name)) in found
            .iter_mut()
            .zip(super::ignore_rules::IGNORE_FILES.iter())
            .enumerate()
        {
            if let Some(files) = &seen {
                let layer_git = || {
                    dir.join_relative(".git")
                        .is_ok_and(|git| rules.plan.book.layer_dir(&git))
                };
                match &files[kind] {
                    Some(content) => {
                        *slot = super::ignore_rules::matcher(root, content);
                        continue;
                    }
                    None if kind == 2 && layer_git() => {}
                    None => continue,
                }
            }
            if name.starts_with(".git/") {
                let git = dir.join_relative(".git")?;
                if !self
                    .stat(&git)
                    .await
                    .ok()
                    .flatten()
                    .is_some_and(|e| e.is_dir())
                {
                    continue;
                }
            }
            let file = dir.join_relative(name)?;
            if let Ok(BoundedRead::Whole(content)) = self
                .read_at_most(&file, super::ignore_rules::MAX_IGNORE_FILE_BYTES)
                .await
            {
                *slot = super::ignore_rules::matcher(root, &content.content);
            }
        }
        let found: super::ignore_rules::Matchers = Arc::new(found);
        rules.dirs.insert(dir.as_str().to_owned(), found.clone());
        Ok(found)
    }
}

/// The ignore matchers read through the view during one search, per directory.
struct LayerIgnoreRules<'p> {
    dirs: std::collections::HashMap<String, super::ignore_rules::Matchers>,
    /// The search: which directories its base walk read, and what their listings show.
    plan: &'p SearchPlan,
}

impl OverlayBackend {
    /// Moves the file at `from` (which has `version`, from the base or the layer) to `to`,
    /// over `replaced` (the file there, checked by the caller). A layer file is renamed inside
    /// the layer (content and times kept); a base file is copied into the layer. Returns the
    /// version at `to`.
    async fn move_file(
        &self,
        from: &VirtualPath,
        to: &VirtualPath,
        version: Version,
        from_base: bool,
        replaced: Option<(Version, bool)>,
    ) -> Result<Version> {
        let target_mark = self.book().await?.mark(to).cloned();
        let target_base = match (&target_mark, &replaced) {
            (Some(mark), _) => mark.base.clone(),
            (None, Some((version, true))) => Some(version.clone()),
            (None, _) => None,
        };
        let layer_target = replaced
            .as_ref()
            .filter(|(_, in_base)| !in_base)
            .map(|(version, _)| version.clone());
        let moved = if from_base {
            None
        } else {
            let options = RenameOptions {
                if_version: None,
                replacing: layer_target.clone(),
            };
            self.layer.rename(from, to, &options).await?
        };
        let new_version = match moved {
            Some(Renamed {
                version: Some(version),
                ..
            }) => version,
            _ => {
                let file = if from_base {
                    self.base.read(from).await?
                } else {
                    self.layer.read(from).await?
                };
                let written = self
                    .layer
                    .write(to, &file.content, WriteMode::Overwrite)
                    .await?;
                if !from_base {
                    self.layer.delete(from, &DeleteOptions::default()).await?;
                }
                written.version
            }
        };
        self.save_mark(
            to,
            Some(Mark {
                state: MarkState::Changed,
                base: target_base,
            }),
        )
        .await?;
        let source_mark = self.book().await?.mark(from).cloned();
        let source_base = match source_mark {
            Some(mark) => mark.base,
            None if from_base => Some(version),
            None => None,
        };
        let mark = source_base.map(|base| Mark {
            state: MarkState::Deleted,
            base: Some(base),
        });
        self.save_mark(from, mark).await?;
        Ok(new_version)
    }

    /// Hides the file at `path` (which has `version`, from the base or the layer).
    async fn hide_file(&self, path: &VirtualPath, version: Version, from_base: bool) -> Result<()> {
        let existing = self.book().await?.mark(path).cloned();
        if !from_base {
            self.layer.delete(path, &DeleteOptions::default()).await?;
        }
        let base = match existing {
            Some(mark) => mark.base,
            None if from_base => Some(version),
            None => None,
        };
        let mark = base.map(|base| Mark {
            state: MarkState::Deleted,
            base: Some(base),
        });
        self.save_mark(path, mark).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_round_trip_through_their_stored_text() {
        for mark in [
            Mark {
                state: MarkState::Changed,
                base: None,
            },
            Mark {
                state: MarkState::Deleted,
                base: Some(Version::from_raw("abc123")),
            },
        ] {
            assert_eq!(Mark::decode(&mark.encode()), Some(mark));
        }
        assert_eq!(Mark::decode("bogus"), None);
    }

    #[test]
    fn an_opaque_directory_hides_everything_below_it() {
        let mut book = Book::default();
        book.opaque.insert("/d".into());
        let p = |s: &str| VirtualPath::parse(s).unwrap();
        assert!(book.base_hidden(&p("/d")));
        assert!(book.base_hidden(&p("/d/x/y")));
        assert!(!book.base_hidden(&p("/dx")));
        assert!(!book.base_hidden(&p("/")));
    }
}
