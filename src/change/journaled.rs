//! [`super::apply_all`] kept whole across a crash: a change of several files on a mount that
//! keeps a change journal (disk; see `backend::disk::journal`) begins one before the first file
//! changes, changes every file through it, then decides and removes it. A crash at any moment
//! leaves the journal, and the next start rolls the change back before any tool touches the
//! mount: the files are all as before, or (once decided) all as after, never a mix (issues 32,
//! 33). A failure or a cancellation while changing puts the files back through the journal.
//!
//! On a store mount the journal is the database's own: the whole change is one transaction
//! ([`ChangeJournal::apply_at_once`]).
//!
//! The journal is begun over the whole change only when every file lies in one mount (the usual
//! patch); a change over several mounts, or with a step that puts back kept content
//! ([`After::Aside`]), is made file by file as before.

use super::{After, Applied, ApplyAllFailure, Change, stale_or};
use crate::change::steps::ChangeSteps;
use crate::state::session::Session;
use crate::storage::backend::{self, ChangeJournal, JournalRole, PlannedFile, Version, WriteMode};

/// Begins a journal over `changes` where their mount keeps one: `Ok(None)` when it does not
/// (or when the change cannot be journaled, see the module doc); `Err` (nothing changed) when a
/// file is no longer what the change was made against.
pub(super) async fn begin(
    session: &Session,
    changes: &[Change<'_>],
) -> Result<Option<Box<dyn ChangeJournal>>, ApplyAllFailure> {
    if changes.len() < 2 || changes.iter().any(|c| matches!(c.after, After::Aside(_))) {
        return Ok(None);
    }
    let files: Vec<PlannedFile> = changes
        .iter()
        .map(|c| PlannedFile {
            path: c.path.clone(),
            before: c.before.version().cloned(),
        })
        .collect();
    match session
        .backend()
        .begin_changes(&files, &JournalRole::Alone)
        .await
    {
        Ok(journal) => Ok(journal),
        Err(error) => {
            let at = match &error {
                backend::Error::VersionMismatch { path } => path.clone(),
                _ => changes[0].path.clone(),
            };
            Err(ApplyAllFailure {
                at,
                error: stale_or(error),
                applied_before: 0,
                not_reverted: Vec::new(),
            })
        }
    }
}

/// Applies `changes` through `journal` (see the module doc): all, or none.
pub(super) async fn apply(
    journal: Box<dyn ChangeJournal>,
    changes: &[Change<'_>],
    steps: &mut ChangeSteps<'_>,
) -> Result<Vec<Applied>, ApplyAllFailure> {
    if steps.cancelled() {
        return Err(ApplyAllFailure {
            at: changes[0].path.clone(),
            error: steps.cancellation("Nothing was changed."),
            applied_before: 0,
            not_reverted: Vec::new(),
        });
    }
    let whole: Vec<(Option<&[u8]>, Option<Version>)> = changes
        .iter()
        .map(|c| {
            let content = match &c.after {
                After::Bytes(bytes) => Some(bytes.as_ref()),
                After::Absent | After::Aside(_) => None,
            };
            (content, c.before.version().cloned())
        })
        .collect();
    if let Some(done) = journal.apply_at_once(&whole).await {
        return match done {
            Ok(versions) => {
                for _ in 0..versions.len() {
                    steps.step().await;
                }
                Ok(versions
                    .into_iter()
                    .map(|version| Applied {
                        version,
                        aside: None,
                    })
                    .collect())
            }
            Err((index, error)) => {
                let at = changes[index.min(changes.len() - 1)].path.clone();
                Err(ApplyAllFailure {
                    error: stale_or(error.map_path(|_| at.clone())),
                    at,
                    applied_before: 0,
                    not_reverted: Vec::new(),
                })
            }
        };
    }
    let mut left: Vec<(usize, Option<Version>)> = Vec::with_capacity(changes.len());
    for (index, change) in changes.iter().enumerate() {
        let outcome = if steps.cancelled() {
            Err(steps.cancellation("The changes made were taken back."))
        } else {
            land(&*journal, index, change).await
        };
        match outcome {
            Ok(now) => {
                left.push((index, now));
                steps.step().await;
            }
            Err(error) => return Err(roll_back(&*journal, changes, &left, index, error).await),
        }
    }
    // The decision: from here a crash completes the change instead of taking it back.
    if let Err(error) = journal.mark_committed().await {
        let at = changes.len().saturating_sub(1);
        return Err(roll_back(&*journal, changes, &left, at, stale_or(error)).await);
    }
    if let Err(error) = journal.finish().await {
        // The change stands; the decided journal left behind is removed at the next start.
        tracing::warn!(%error, "a finished change's journal could not be removed");
    }
    Ok(left
        .into_iter()
        .map(|(_, version)| Applied {
            version,
            aside: None,
        })
        .collect())
}

/// One file's change through the journal: the version it is left with (`None`: removed).
async fn land(
    journal: &dyn ChangeJournal,
    index: usize,
    change: &Change<'_>,
) -> Result<Option<Version>, crate::change::ToolError> {
    let done = match (&change.after, change.before.version()) {
        (After::Bytes(bytes), None) => journal
            .write(index, bytes, WriteMode::CreateOnly)
            .await
            .map(|o| Some(o.version)),
        (After::Bytes(bytes), Some(version)) => journal
            .write(index, bytes, WriteMode::IfVersion(version.clone()))
            .await
            .map(|o| Some(o.version)),
        (After::Absent, Some(version)) => journal.delete(index, version).await.map(|()| None),
        (After::Absent, None) => Ok(None),
        (After::Aside(_), _) => Err(backend::Error::Unsupported {
            path: change.path.clone(),
            reason: "kept content is not put back through a change journal".into(),
        }),
    };
    // Each call concerns this one file: its error names it in the agent's coordinates.
    done.map_err(|e| stale_or(e.map_path(|_| change.path.clone())))
}

/// Puts back what the journal changed so far and says how the change failed at `at`.
async fn roll_back(
    journal: &dyn ChangeJournal,
    changes: &[Change<'_>],
    left: &[(usize, Option<Version>)],
    at: usize,
    error: crate::change::ToolError,
) -> ApplyAllFailure {
    let not_reverted = journal
        .roll_back(left)
        .await
        .into_iter()
        .map(|(index, e)| {
            let path = changes[index.min(changes.len() - 1)].path.clone();
            (path.clone(), e.map_path(|_| path.clone()))
        })
        .collect();
    ApplyAllFailure {
        at: changes[at.min(changes.len() - 1)].path.clone(),
        error,
        applied_before: left.len(),
        not_reverted,
    }
}
