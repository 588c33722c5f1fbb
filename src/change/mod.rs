//! One change to one file, the only way a tool changes a file's content: a [`Change`] is a path,
//! what the file is before it (absent, its content as read, or only its version) and what it is
//! after it (new bytes, absent, or content a backend kept aside). From that pair alone:
//! - [`Change::apply`] derives the conditional backend call — create-only, write if-version,
//!   delete if-version, or put back what was kept aside — and maps a version mismatch (someone
//!   changed the file between our read and our write) to [`ToolError::Stale`] ([`stale_or`], the
//!   one place that mapping is written);
//! - [`Change::revert`] takes an applied change back, conditional on what it left;
//! - [`Change::record`] tells the session: the read ledger learns the file's new version, and
//!   the undo history gets the step taking the change back.
//!
//! Every recording ([`Change::record`], [`Change::record_undone`], [`record_move`],
//! [`record_move_undone`]) ends in one private function, `record`: the single place where the
//! audit log and the overlay of issue 14 ("overlay & audit") hook in, never in the tools.
//!
//! Every tool that changes files goes through here: `write_file` and the edits
//! ([`editing`]), `delete`, `move` (two changes: the copy, the removal; or a rename in
//! place, recorded with [`record_move`]), `apply_patch` ([`apply_all`]: a list of changes, reverted
//! in reverse on a failure) and `undo_edit` ([`Change::undoing`] builds the change from its
//! step). Locking, read-before-edit checks and the text work stay with the callers; what a change
//! looks like to the agent lives beside it in [`report`].

mod call;
pub mod confirm;
pub mod editing;
pub mod error_kind;
mod journaled;
pub mod report;
pub mod steps;

pub use call::{
    CallContext, ProgressReporter, SEARCH_PROGRESS_INTERVAL, ToolError, ToolReply, ToolResult,
    counted, release_freed_memory_soon, search_control, unread_more_note, watched_search,
};

use std::borrow::Cow;

use crate::ground::path::VirtualPath;
use crate::state::session::{Session, UndoStep};
use crate::storage::backend::{self, AsideFile, DeleteOptions, FileBytes, Version, WriteMode};
use steps::ChangeSteps;

/// What a file is before a change, as the change is conditional on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Before {
    /// Nothing is there: the change creates the file (a create-only write).
    Absent,
    /// The file as read, content and version: the change is conditional on the version, and
    /// the content is what [`Change::revert`] and the undo step put back.
    Read(FileBytes),
    /// Only the file's version is known (too large to hold, or not needed): the change is
    /// conditional on it, but its content cannot be put back from memory.
    Version(Version),
}

impl Before {
    /// The version the file must have for the change to land; `None`: it must be absent.
    pub fn version(&self) -> Option<&Version> {
        match self {
            Self::Absent => None,
            Self::Read(file) => Some(&file.version),
            Self::Version(version) => Some(version),
        }
    }
}

/// What a file is after a change.
#[derive(Debug, Clone)]
pub enum After<'a> {
    /// Removed.
    Absent,
    /// This content.
    Bytes(Cow<'a, [u8]>),
    /// The content a backend kept aside earlier (a file too large for the undo history in
    /// memory), renamed back into place.
    Aside(AsideFile),
}

/// A change to one file: where, what it must be now, what it becomes (see the module doc).
#[derive(Debug, Clone)]
pub struct Change<'a> {
    /// The file.
    pub path: VirtualPath,
    /// What it must be now; the change is conditional on it.
    pub before: Before,
    /// What it becomes.
    pub after: After<'a>,
}

/// What an applied change left.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Applied {
    /// The file's version now; `None` when the change removed it.
    pub version: Option<Version>,
    /// The previous content, kept aside by the backend (outside memory) instead of being
    /// overwritten or removed: what undo and [`Change::revert`] put back.
    pub aside: Option<AsideFile>,
}

impl Applied {
    /// The version the file has after a change that writes it ([`After::Bytes`],
    /// [`After::Aside`]: always one); after a removal there is none, and the file is not found.
    pub fn written(&self, path: &VirtualPath) -> Result<Version, ToolError> {
        self.version
            .clone()
            .ok_or_else(|| backend::Error::NotFound { path: path.clone() }.into())
    }
}

/// A conditional change that lost a race (the file is no longer what the change was made
/// against) is staleness of the file it names; every other failure is the backend's own. The one
/// place a version mismatch becomes [`ToolError::Stale`].
pub fn stale_or(error: backend::Error) -> ToolError {
    match error {
        backend::Error::VersionMismatch { path } => ToolError::Stale { path },
        other => other.into(),
    }
}

impl<'a> Change<'a> {
    /// A change writing `bytes` at `path` over what it is now.
    pub fn write(path: VirtualPath, before: Before, bytes: impl Into<Cow<'a, [u8]>>) -> Self {
        Self {
            path,
            before,
            after: After::Bytes(bytes.into()),
        }
    }

    /// A change removing the file at `path`.
    pub fn removal(path: VirtualPath, before: Before) -> Self {
        Self {
            path,
            before,
            after: After::Absent,
        }
    }

    /// The change that takes back one undo step of `path`: from what the step left (its
    /// `after` version, or nothing) back to what was there before it (its content in memory or
    /// kept aside, or nothing).
    pub fn undoing(path: &VirtualPath, step: &'a UndoStep) -> Self {
        let before = match &step.after {
            Some(version) => Before::Version(version.clone()),
            None => Before::Absent,
        };
        let after = match (&step.aside, &step.before) {
            (Some(aside), _) => After::Aside(aside.clone()),
            (None, Some(content)) => After::Bytes(Cow::Borrowed(content)),
            (None, None) => After::Absent,
        };
        Self {
            path: path.clone(),
            before,
            after,
        }
    }

    /// Makes the change, conditional on [`Change::before`]: a create-only write when the file
    /// must be absent, a write or delete if it still has the version read, a kept-aside content
    /// put back only where the step left it. A change that lost a race is [`ToolError::Stale`];
    /// nothing is changed then.
    pub async fn apply(&self, session: &Session) -> Result<Applied, ToolError> {
        self.land(session).await.map_err(stale_or)
    }

    /// [`Change::apply`] with the backend's own error (a take-back reports what the backend
    /// said, not staleness).
    pub async fn land(&self, session: &Session) -> Result<Applied, backend::Error> {
        let backend = session.backend();
        let path = &self.path;
        let version = match (&self.after, self.before.version()) {
            (After::Bytes(bytes), None) => Some(
                backend
                    .write(path, bytes, WriteMode::CreateOnly)
                    .await?
                    .version,
            ),
            (After::Bytes(bytes), Some(version)) => Some(
                backend
                    .write(path, bytes, WriteMode::IfVersion(version.clone()))
                    .await?
                    .version,
            ),
            (After::Absent, Some(version)) => {
                backend
                    .delete(path, &DeleteOptions::file_if_version(version.clone()))
                    .await?;
                None
            }
            (After::Absent, None) => None,
            (After::Aside(aside), replacing) => Some(
                aside
                    .0
                    .restore(replacing)
                    .await
                    .map_err(|e| e.map_path(|_| path.clone()))?
                    .version,
            ),
        };
        Ok(Applied {
            version,
            aside: None,
        })
    }

    /// [`Change::apply`] for a file known only by its version (too large to hold for undo):
    /// where its backend can (disk), the content it replaces or removes is kept aside, outside
    /// memory, so undo can put it back ([`Applied::aside`]); elsewhere the change is applied
    /// plainly and cannot be undone.
    pub async fn apply_keeping_aside(&self, session: &Session) -> Result<Applied, ToolError> {
        match self.keep_aside(session).await? {
            Some(applied) => Ok(applied),
            None => self.apply(session).await,
        }
    }

    /// Applies the change keeping what it replaces or removes aside, where the file's backend
    /// can (disk: a hard link or a rename, conditional on the version); `Ok(None)`, nothing
    /// changed, where it cannot.
    pub async fn keep_aside(&self, session: &Session) -> Result<Option<Applied>, ToolError> {
        let Some(version) = self.before.version() else {
            return Ok(None);
        };
        let backend = session.backend();
        let kept = match &self.after {
            After::Bytes(bytes) => backend
                .write_keeping_aside(&self.path, bytes, version)
                .await
                .map_err(stale_or)?
                .map(|(outcome, aside)| Applied {
                    version: Some(outcome.version),
                    aside: Some(aside),
                }),
            // Setting it aside is the removal.
            After::Absent => backend
                .set_aside(&self.path, version)
                .await
                .map_err(stale_or)?
                .map(|aside| Applied {
                    version: None,
                    aside: Some(aside),
                }),
            After::Aside(_) => None,
        };
        Ok(kept)
    }

    /// The change taking `applied` back: from what it left to what was there before.
    /// `Err` when the earlier content was neither read nor kept aside.
    pub fn inverse(&self, applied: &Applied) -> Result<Change<'_>, backend::Error> {
        let before = match &applied.version {
            Some(version) => Before::Version(version.clone()),
            None => Before::Absent,
        };
        let after = match (&applied.aside, &self.before) {
            (Some(aside), _) => After::Aside(aside.clone()),
            (None, Before::Read(file)) => After::Bytes(Cow::Borrowed(&file.content)),
            (None, Before::Absent) => After::Absent,
            (None, Before::Version(_)) => {
                return Err(backend::Error::Unsupported {
                    path: self.path.clone(),
                    reason: "its earlier content was not kept, so the change cannot be taken back"
                        .into(),
                });
            }
        };
        Ok(Change {
            path: self.path.clone(),
            before,
            after,
        })
    }

    /// Takes an applied change back, conditional on the file still being what the change left
    /// it (so someone else's later change is never overwritten; refused instead).
    pub async fn revert(&self, session: &Session, applied: &Applied) -> Result<(), backend::Error> {
        self.inverse(applied)?.land(session).await.map(|_| ())
    }

    /// Records an applied change in the session (through the one recording step, see the module
    /// doc): the ledger learns the file's
    /// new version (with `seen_text`, the LF text it now holds, when the caller has it), and the
    /// undo history gets a step taking it back when the earlier content can be kept: read and
    /// within the history's bounds ([`fits_undo`]), kept aside, or nothing (a file created).
    /// Returns whether the change can be undone.
    pub fn record(self, session: &Session, applied: Applied, seen_text: Option<&str>) -> bool {
        if let (Before::Absent, Some(_), Some(trail)) =
            (&self.before, &applied.version, session.trail())
            && trail.keeps_diffs()
        {
            // A created file's diff (every line added), for the audit log: made once, here.
            match (seen_text, &self.after) {
                (Some(text), _) => trail.note_created(&self.path, text),
                (None, After::Bytes(bytes)) => {
                    trail.note_created(&self.path, &String::from_utf8_lossy(bytes));
                }
                (None, _) => {}
            }
        }
        let seen = match &applied.version {
            Some(version) => Seen::Version(version.clone(), seen_text),
            None => Seen::Gone,
        };
        let was = self.before.version().cloned();
        let was = was.as_ref();
        let before = match self.before {
            Before::Read(file) if fits_undo(session, file.content.len()) => Some(file.content),
            Before::Read(_) | Before::Version(_) if applied.aside.is_none() => {
                record(session, &self.path, was, seen, History::Keep);
                return false;
            }
            Before::Read(_) | Before::Version(_) | Before::Absent => None,
        };
        if before.is_none() && applied.aside.is_none() && applied.version.is_none() {
            // Nothing was there and nothing is: no step to take back.
            record(session, &self.path, was, seen, History::Keep);
            return true;
        }
        let step = UndoStep {
            before,
            after: applied.version,
            aside: applied.aside,
            moved_from: None,
        };
        // Not kept when the workspace's memory quota has no room for it (issue 34).
        record(session, &self.path, was, seen, History::Push(step))
    }

    /// Records an applied undo ([`Change::undoing`]): the ledger learns the file's version, and
    /// the step now on top of the history (the one before the undone one) is told the version
    /// the file has again.
    pub fn record_undone(self, session: &Session, applied: &Applied) {
        let seen = match &applied.version {
            Some(version) => Seen::Version(version.clone(), None),
            None => Seen::Gone,
        };
        record(
            session,
            &self.path,
            self.before.version(),
            seen,
            History::Rebase(applied.version.clone()),
        );
    }
}

/// How applying a list of changes failed ([`apply_all`]).
#[derive(Debug)]
pub struct ApplyAllFailure {
    /// The change that failed.
    pub at: VirtualPath,
    /// Why.
    pub error: ToolError,
    /// How many changes had been applied before it (all taken back, but for `not_reverted`).
    pub applied_before: usize,
    /// The applied changes that could not be taken back, with the backend's reason.
    pub not_reverted: Vec<(VirtualPath, backend::Error)>,
}

/// Applies `changes` in order, all or none: when one fails, or the call is cancelled before
/// the last one (`steps`: one step per change, phase "changed"), those applied before it are
/// taken back in reverse order ([`Change::revert`]). On a mount that keeps a change journal
/// (disk) that holds across a crash of the process too ([`journaled`]); a cancelled call's failure carries
/// [`ToolError::ChangeCancelled`]. Nothing is recorded; on success the caller records each change
/// with what it left.
pub async fn apply_all(
    session: &Session,
    changes: &[Change<'_>],
    steps: &mut ChangeSteps<'_>,
) -> Result<Vec<Applied>, ApplyAllFailure> {
    let journal = journaled::begin(session, changes).await?;
    steps.phase("changed", changes.len() as u64).await;
    if let Some(journal) = journal {
        return journaled::apply(journal, changes, steps).await;
    }
    let mut applied: Vec<Applied> = Vec::with_capacity(changes.len());
    for change in changes {
        let outcome = if steps.cancelled() {
            Err(steps.cancellation("The changes made were taken back."))
        } else {
            change.apply(session).await
        };
        match outcome {
            Ok(done) => {
                applied.push(done);
                steps.step().await;
            }
            Err(error) => {
                let mut not_reverted = Vec::new();
                for (done, left) in changes.iter().zip(&applied).rev() {
                    if let Err(e) = done.revert(session, left).await {
                        not_reverted.push((done.path.clone(), e));
                    }
                }
                return Err(ApplyAllFailure {
                    at: change.path.clone(),
                    error,
                    applied_before: applied.len(),
                    not_reverted,
                });
            }
        }
    }
    Ok(applied)
}

/// Records a completed move of `from` to `to` (renamed in place, or copied and removed): the
/// ledger follows it (what was seen at `from` is seen at `to`, at `version` when the file has a
/// new one), and one undo step at `to` says where it came from.
pub fn record_move(
    session: &Session,
    from: &VirtualPath,
    to: &VirtualPath,
    version: Option<&Version>,
) {
    record(
        session,
        to,
        None,
        Seen::Moved {
            from,
            version: version.cloned(),
        },
        History::Push(UndoStep {
            before: None,
            after: version.cloned(),
            aside: None,
            moved_from: Some(from.clone()),
        }),
    );
}

/// Records an undone move: what was seen at `moved` is seen again at `back_to` (at `version`),
/// and both paths' histories are told what is there now.
pub fn record_move_undone(
    session: &Session,
    moved: &VirtualPath,
    back_to: &VirtualPath,
    version: Option<&Version>,
) {
    record(
        session,
        back_to,
        None,
        Seen::Moved {
            from: moved,
            version: version.cloned(),
        },
        History::Keep,
    );
    session.undo.rebase_top(moved, None);
    if let Some(version) = version {
        session.undo.rebase_top(back_to, Some(version.clone()));
    }
}

/// Records the removal of what was at `path` without a [`Change`] of a file: a symbolic link,
/// an empty directory, or a directory removed whole once its files were (each recorded as its
/// own change; anything `glob` does not show goes with it). The ledger forgets it and the call's
/// trail announces it gone ([`crate::state::call_trail`]); the audit log's entry names the files recorded, or the
/// path the call named.
pub fn record_removed(session: &Session, path: &VirtualPath) {
    record(session, path, None, Seen::Removed, History::Keep);
}

/// What the session has seen of a file after a change.
#[derive(Debug)]
enum Seen<'t> {
    /// This version (and this LF text, when the change knows it).
    Version(Version, Option<&'t str>),
    /// Nothing: the change removed it.
    Gone,
    /// Nothing: what was there (a link, a directory) was removed without a [`Change`].
    Removed,
    /// What was seen at `from` (or below it) is seen here now.
    Moved {
        from: &'t VirtualPath,
        version: Option<Version>,
    },
}

/// What a change does to the undo history.
#[derive(Debug)]
enum History {
    /// A new step taking it back.
    Push(UndoStep),
    /// It took back the top step: the one below now names this version.
    Rebase(Option<Version>),
    /// Nothing to keep.
    Keep,
}

/// Every change a session makes to a file is recorded here and only here, after it landed: the
/// read ledger and the undo history. The audit log and the overlay of issue 14 ("overlay &
/// audit") hook in at this point, once, not in each tool.
///
/// `before`: the file's version before the change (`None`: it was absent, or is not known for
/// a move's destination). The call's trail ([`crate::state::call_trail`]) learns each change here (the path with its
/// versions before and after; a move as its source gone and its destination arrived): the audit
/// log writes it once per tool call, when the call has succeeded, and the server announces its
/// paths to the subscriptions (`resources/subscribe`, `subscriptions/listen`).
fn record(
    session: &Session,
    path: &VirtualPath,
    before: Option<&Version>,
    seen: Seen<'_>,
    history: History,
) -> bool {
    if let Some(trail) = session.trail() {
        match &seen {
            Seen::Version(version, _) => trail.note_file(path, before, Some(version)),
            Seen::Gone => trail.note_file(path, before, None),
            Seen::Removed => trail.note_gone(path),
            Seen::Moved { from, version } => {
                trail.note_file(from, version.as_ref(), None);
                trail.note_file(path, before, version.as_ref());
            }
        }
    }
    match seen {
        Seen::Version(version, Some(text)) => session.ledger.record_text(path, &version, text),
        Seen::Version(version, None) => session.ledger.record(path, &version),
        Seen::Gone | Seen::Removed => session.ledger.forget(path),
        Seen::Moved { from, version } => session.ledger.rename(from, path, version.as_ref()),
    }
    match history {
        History::Push(step) => session.undo.push(path, step),
        History::Rebase(now) => {
            session.undo.rebase_top(path, now);
            true
        }
        History::Keep => true,
    }
}

/// Whether a step of `bytes` can be kept in the session's undo history at all (a content larger
/// than half the budget, `--max-undo-memory-bytes`, would evict the whole history at once).
pub fn fits_undo(session: &Session, bytes: usize) -> bool {
    bytes as u64 <= session.write_options.limits.max_undo_snapshot_bytes()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::ground::limits::Limits;
    use crate::state::session::WriteOptions;
    use crate::storage::backend::{BoundedRead, CompositeBackend, MemoryBackend};

    fn p(s: &str) -> VirtualPath {
        VirtualPath::parse(s).unwrap()
    }

    fn session_with(limits: Limits) -> Session {
        let table = CompositeBackend::new(Vec::new(), || Arc::new(MemoryBackend::new()));
        let options = WriteOptions {
            limits,
            ..WriteOptions::default()
        };
        Session::new(Arc::new(table), options)
    }

    fn session() -> Session {
        session_with(Limits::default())
    }

    /// Writes `content` at `path` as another writer would (no condition, nothing recorded).
    async fn outside_write(session: &Session, path: &VirtualPath, content: &[u8]) -> FileBytes {
        session
            .backend()
            .write(path, content, WriteMode::Overwrite)
            .await
            .unwrap();
        read(session, path).await.unwrap()
    }

    async fn read(session: &Session, path: &VirtualPath) -> Option<FileBytes> {
        match session.backend().read_at_most(path, u64::MAX).await {
            Ok(BoundedRead::Whole(file)) => Some(file),
            Ok(BoundedRead::TooLarge { .. }) => unreachable!("no bound"),
            Err(backend::Error::NotFound { .. }) => None,
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn a_version_mismatch_is_stale_and_other_errors_stay_the_backends() {
        let path = p("/a");
        let stale = stale_or(backend::Error::VersionMismatch { path: path.clone() });
        assert!(matches!(stale, ToolError::Stale { path: ref p } if *p == path));
        let other = stale_or(backend::Error::AlreadyExists { path: path.clone() });
        assert!(matches!(
            other,
            ToolError::Backend(backend::Error::AlreadyExists { .. })
        ));
    }

    #[tokio::test]
    async fn a_change_from_absent_is_create_only() {
        let session = session();
        let path = p("/new.txt");
        let create = Change::write(path.clone(), Before::Absent, b"one".as_slice());
        let applied = create.apply(&session).await.unwrap();
        let file = read(&session, &path).await.unwrap();
        assert_eq!(file.content, b"one");
        assert_eq!(applied.version, Some(file.version));
        let error = create.apply(&session).await.unwrap_err();
        assert!(
            matches!(
                error,
                ToolError::Backend(backend::Error::AlreadyExists { .. })
            ),
            "{error}"
        );
        assert_eq!(read(&session, &path).await.unwrap().content, b"one");
    }

    #[tokio::test]
    async fn a_write_or_removal_over_a_file_changed_since_is_stale_and_changes_nothing() {
        let session = session();
        let path = p("/f.txt");
        let seen = outside_write(&session, &path, b"seen").await;
        let now = outside_write(&session, &path, b"changed by someone else").await;
        assert_ne!(seen.version, now.version);
        let write = Change::write(path.clone(), Before::Read(seen.clone()), b"mine".as_slice());
        let error = write.apply(&session).await.unwrap_err();
        assert!(matches!(error, ToolError::Stale { .. }), "{error}");
        let removal = Change::removal(path.clone(), Before::Version(seen.version));
        let error = removal.apply(&session).await.unwrap_err();
        assert!(matches!(error, ToolError::Stale { .. }), "{error}");
        assert_eq!(read(&session, &path).await.unwrap(), now);
    }

    #[tokio::test]
    async fn revert_puts_back_what_each_kind_of_change_replaced() {
        let session = session();
        let path = p("/f.txt");
        let old = outside_write(&session, &path, b"old").await;
        let write = Change::write(path.clone(), Before::Read(old.clone()), b"new".as_slice());
        let applied = write.apply(&session).await.unwrap();
        assert_eq!(read(&session, &path).await.unwrap().content, b"new");
        write.revert(&session, &applied).await.unwrap();
        assert_eq!(read(&session, &path).await.unwrap().content, b"old");

        let old = read(&session, &path).await.unwrap();
        let removal = Change::removal(path.clone(), Before::Read(old));
        let applied = removal.apply(&session).await.unwrap();
        assert_eq!(applied.version, None);
        assert!(read(&session, &path).await.is_none());
        removal.revert(&session, &applied).await.unwrap();
        assert_eq!(read(&session, &path).await.unwrap().content, b"old");

        let created = p("/created.txt");
        let create = Change::write(created.clone(), Before::Absent, b"x".as_slice());
        let applied = create.apply(&session).await.unwrap();
        create.revert(&session, &applied).await.unwrap();
        assert!(read(&session, &created).await.is_none());
    }

    #[tokio::test]
    async fn revert_never_overwrites_a_later_change_by_someone_else() {
        let session = session();
        let path = p("/f.txt");
        let old = outside_write(&session, &path, b"old").await;
        let write = Change::write(path.clone(), Before::Read(old), b"new".as_slice());
        let applied = write.apply(&session).await.unwrap();
        let later = outside_write(&session, &path, b"later").await;
        let error = write.revert(&session, &applied).await.unwrap_err();
        assert!(
            matches!(error, backend::Error::VersionMismatch { .. }),
            "{error}"
        );
        assert_eq!(read(&session, &path).await.unwrap(), later);
    }

    #[tokio::test]
    async fn a_change_whose_earlier_content_was_not_kept_cannot_be_reverted() {
        let session = session();
        let path = p("/f.txt");
        let old = outside_write(&session, &path, b"old").await;
        let write = Change::write(
            path.clone(),
            Before::Version(old.version),
            b"new".as_slice(),
        );
        let applied = write.apply(&session).await.unwrap();
        let error = write.revert(&session, &applied).await.unwrap_err();
        assert!(
            matches!(error, backend::Error::Unsupported { .. }),
            "{error}"
        );
        assert_eq!(read(&session, &path).await.unwrap().content, b"new");
    }

    #[tokio::test]
    async fn apply_all_takes_back_in_reverse_what_it_applied_before_a_failure() {
        let session = session();
        let (a, b, c) = (p("/a"), p("/b"), p("/c"));
        let a_old = outside_write(&session, &a, b"a").await;
        let c_seen = outside_write(&session, &c, b"c").await;
        outside_write(&session, &c, b"c changed").await;
        let changes = [
            Change::write(a.clone(), Before::Read(a_old), b"a2".as_slice()),
            Change::write(b.clone(), Before::Absent, b"b".as_slice()),
            Change::write(c.clone(), Before::Read(c_seen), b"c2".as_slice()),
        ];
        let context = crate::change::CallContext::default();
        let mut steps = ChangeSteps::new("apply_patch", &context, 3);
        let failure = apply_all(&session, &changes, &mut steps).await.unwrap_err();
        assert_eq!(failure.at, c);
        assert!(matches!(failure.error, ToolError::Stale { .. }));
        assert_eq!(failure.applied_before, 2);
        assert!(failure.not_reverted.is_empty());
        assert_eq!(read(&session, &a).await.unwrap().content, b"a");
        assert!(read(&session, &b).await.is_none());
        assert_eq!(read(&session, &c).await.unwrap().content, b"c changed");
        assert_eq!(session.undo.depth(&a), 0, "nothing recorded");
        assert_eq!(session.ledger.seen(&a), None);
    }

    #[tokio::test]
    async fn recording_updates_the_ledger_and_keeps_an_undo_step_that_takes_it_back() {
        let session = session();
        let path = p("/f.txt");
        let old = outside_write(&session, &path, b"old").await;
        let write = Change::write(path.clone(), Before::Read(old.clone()), b"new".as_slice());
        let applied = write.apply(&session).await.unwrap();
        let version = applied.version.clone().unwrap();
        assert!(write.record(&session, applied, Some("new")));
        let seen = session.ledger.seen_file(&path).unwrap();
        assert_eq!(seen.version, version);
        assert_eq!(seen.text.as_deref(), Some("new"));
        let step = session.undo.pop(&path).unwrap();
        assert_eq!(step.before.as_deref(), Some(b"old".as_slice()));
        assert_eq!(step.after.as_ref(), Some(&version));

        let undo = Change::undoing(&path, &step);
        let applied = undo.apply(&session).await.unwrap();
        undo.record_undone(&session, &applied);
        let back = read(&session, &path).await.unwrap();
        assert_eq!(back.content, b"old");
        assert_eq!(session.ledger.seen(&path), Some(back.version.clone()));

        let removal = Change::removal(path.clone(), Before::Read(back));
        let applied = removal.apply(&session).await.unwrap();
        assert!(removal.record(&session, applied, None));
        assert_eq!(
            session.ledger.seen(&path),
            None,
            "a removed file is forgotten"
        );
        let step = session.undo.pop(&path).unwrap();
        assert_eq!(
            (step.before.as_deref(), step.after),
            (Some(b"old".as_slice()), None)
        );
    }

    #[tokio::test]
    async fn a_change_whose_earlier_content_cannot_be_kept_is_recorded_without_undo() {
        let limits = Limits {
            max_undo_memory_bytes: 8,
            ..Limits::default()
        };
        let session = session_with(limits);
        let path = p("/f.txt");
        let old = outside_write(&session, &path, b"more than four bytes").await;
        let write = Change::write(path.clone(), Before::Read(old), b"new".as_slice());
        let applied = write.apply(&session).await.unwrap();
        let version = applied.version.clone();
        assert!(
            !write.record(&session, applied, None),
            "over half the budget"
        );
        assert_eq!(session.ledger.seen(&path), version);
        assert_eq!(session.undo.depth(&path), 0);

        let unread = read(&session, &path).await.unwrap().version;
        let write = Change::write(path.clone(), Before::Version(unread), b"x".as_slice());
        let applied = write.apply(&session).await.unwrap();
        assert!(!write.record(&session, applied, None), "content never read");
        assert_eq!(session.undo.depth(&path), 0);

        let created = p("/created.txt");
        let create = Change::write(created.clone(), Before::Absent, b"x".as_slice());
        let applied = create.apply(&session).await.unwrap();
        assert!(create.record(&session, applied, None), "undo removes it");
        let step = session.undo.pop(&created).unwrap();
        assert_eq!(step.before, None);
        assert!(step.after.is_some());
    }
}
