//! Review and commit: the layer's changes as `changes` lists them, the conflicts with the base,
//! the commit staged into the base (through its change journal where it keeps one) and put
//! back or finished, and `discard`.

use super::*;

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
pub(super) enum CommitWrites {
    /// Through the base's change journal (disk): a crash cannot cut the commit in half.
    Journaled(StagedJournal),
    /// File by file, each kept aside (or in memory) by the commit itself (a base without a
    /// journal: nothing of it survives a crash to be put back).
    Plain(Vec<Written>),
}

impl CommitWrites {
    /// Puts back what was written: the files put back, and those that could not be.
    pub(super) async fn roll_back(
        self,
        overlay: &OverlayBackend,
    ) -> (Vec<VirtualPath>, Vec<(VirtualPath, Error)>) {
        match self {
            Self::Journaled(journal) => journal.roll_back().await,
            Self::Plain(done) => overlay.roll_back(done).await,
        }
    }

    pub(super) fn journal(&self) -> Option<&StagedJournal> {
        match self {
            Self::Journaled(journal) => Some(journal),
            Self::Plain(_) => None,
        }
    }
}

/// A commit's writes through its base's change journal (see [`OverlayBackend::stage_commit`]).
#[derive(Debug)]
pub(super) struct StagedJournal {
    pub(super) journal: Box<dyn ChangeJournal>,
    /// The planned files, by journal index.
    pub(super) paths: Vec<VirtualPath>,
    /// Each file written so far: its journal index and the version it was left with.
    pub(super) applied: Vec<(usize, Option<Version>)>,
}

impl StagedJournal {
    /// Puts back what was written: the files put back, and those that could not be.
    pub(super) async fn roll_back(self) -> (Vec<VirtualPath>, Vec<(VirtualPath, Error)>) {
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

    /// Where the base's journal of this stage is on the host, when the base keeps one (only
    /// to tell whether it does: no journal names another's place).
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

    /// Removes the base's journal once the commit is decided (secondaries before the
    /// primary); `false` when it could not be.
    pub async fn close_journal(&self) -> bool {
        if let Some(journal) = self.writes.journal()
            && let Err(error) = journal.journal.finish().await
        {
            // Decided: the journal left behind is rolled forward (removed) at the next start.
            tracing::warn!(%error, "a committed change's journal could not be removed");
            return false;
        }
        true
    }
}

/// Most bytes of one base file a commit holds in memory to put it back on failure, when the
/// base cannot keep it aside on disk.
pub const MAX_ROLLBACK_IN_MEMORY: u64 = 64 * 1024 * 1024;

/// A base file a commit changed, and how to put it back.
#[derive(Debug)]
pub(super) struct Written {
    pub(super) path: VirtualPath,
    /// Its version now (`None`: deleted).
    pub(super) now: Option<Version>,
    pub(super) before: Before,
    /// Parent directories the write created, nearest to the root first.
    pub(super) created_dirs: Vec<VirtualPath>,
}

/// What a base file was before a commit changed it.
#[derive(Debug)]
pub(super) enum Before {
    /// No file.
    Absent,
    /// Kept aside on disk by the base.
    Aside(AsideFile),
    /// Held in memory (at most [`MAX_ROLLBACK_IN_MEMORY`] bytes).
    Content(Vec<u8>),
}

impl OverlayBackend {
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
    pub(super) async fn check_base(
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
    pub(super) async fn already_in_base(
        &self,
        change: &LayerChange,
        now: Option<&Version>,
    ) -> Result<bool> {
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
    pub(super) async fn commit_journaled(
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
    pub(super) async fn commit_one(&self, change: &LayerChange) -> Result<Option<Written>> {
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
    pub(super) async fn before_in_memory(&self, path: &VirtualPath) -> Result<Before> {
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
    pub(super) async fn missing_parents(&self, path: &VirtualPath) -> Result<Vec<VirtualPath>> {
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
    pub(super) async fn roll_back(
        &self,
        done: Vec<Written>,
    ) -> (Vec<VirtualPath>, Vec<(VirtualPath, Error)>) {
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
    pub(super) async fn remove_base_dir(
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
    pub(super) async fn commit_opaque(
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
                    control: crate::storage::backend::SearchControl::default(),
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
    pub(super) async fn commit_partly_shown(
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
                    control: crate::storage::backend::SearchControl::default(),
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
    pub(super) async fn opaque_under(&self, dir: &VirtualPath) -> Result<Vec<VirtualPath>> {
        let book = self.book().await?;
        let prefix = dir_prefix(dir);
        book.opaque
            .iter()
            .filter(|d| d.as_str() == dir.as_str() || d.starts_with(&prefix))
            .map(|d| Ok(VirtualPath::parse_raw(d)?))
            .collect()
    }

    /// Takes `changes` out of the layer: their files (when the layer holds one) and marks.
    pub(super) async fn drop_from_layer(&self, changes: &[LayerChange]) -> Result<()> {
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
