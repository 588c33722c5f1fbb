//! `move` where no rename is possible (across mounts, or a disk rename across file systems):
//! copy-then-delete, one file at a time (CONTRACT §2, issue 17).
//!
//! A file is read (bounded by `--max-edit-bytes`), written at the destination create-only (or
//! over the file it replaces, conditional on that file's version), given the source's mode where
//! the destination keeps modes (disk), and only then is the source deleted, conditional on the
//! version copied. If the delete fails the copy is taken back, so a failed move never loses or
//! duplicates a file: the source stays. A directory moves file by file the same way, all or
//! nothing: every copy first, holding one file's content at a time, then every delete; a failure
//! takes back what was done, restoring deleted sources from their copies. Each moved file leaves
//! one undo step at its new path (see [`super::move_file::record_move`]); [`copy_back`] is how
//! `undo_edit` reverses it.

use serde_json::json;

use super::moved::{Moved, Replaced, destination_taken, put_back_aside, record_replaced};
use super::{CallContext, ToolError, ToolReply, ToolResult};
use crate::change::editing::{check_not_stale, read_for_copy};
use crate::change::steps::ChangeSteps;
use crate::change::{Before, Change, record_move};
use crate::ground::path::VirtualPath;
use crate::state::session::Session;
use crate::storage::backend::{self, BoundedRead, DeleteOptions, Version};

/// Moves one file by copy-then-delete (locks held by the caller).
pub(super) async fn move_one(
    session: &Session,
    source: &VirtualPath,
    destination: &VirtualPath,
    overwrite: bool,
) -> Result<Moved, ToolError> {
    let file = read_for_copy(session, source).await?;
    check_not_stale(session, source, &file.version)?;
    let replaced = match session.backend().stat(destination).await? {
        None => None,
        Some(entry) if entry.is_dir() => {
            return Err(destination_taken(source, destination, true));
        }
        Some(_) if !overwrite => return Err(destination_taken(source, destination, false)),
        Some(_) => {
            let replaced = Replaced::take(session, destination).await?;
            if let Replaced::Unkept(_) = replaced {
                // A copy over it could not be taken back if the source then failed to go.
                let limit = session.write_options.limits.max_undo_snapshot_bytes();
                return Err(ToolError::TooLarge {
                    subject: destination.to_string(),
                    size: session.backend().stat(destination).await?.map_or(0, |e| e.size),
                    limit,
                    flag: "max-undo-memory-bytes",
                    advice: "Replacing it across mounts could not be taken back if the move failed half-way, so nothing was changed. Delete it first, or move to another name".into(),
                });
            }
            Some(replaced)
        }
    };
    // Two changes: the copy, over what it replaces (a file set aside being gone already), and
    // the source's removal.
    let replacing = replaced.is_some();
    let (before, aside) = replaced.map_or((Before::Absent, None), Replaced::into_parts);
    let copy = Change::write(destination.clone(), before, file.content.as_slice());
    let removal = Change::removal(source.clone(), Before::Version(file.version.clone()));
    let version = match copy_then_remove(session, &copy, &removal).await {
        Ok(version) => version,
        Err(failure) => {
            let lost = match &aside {
                Some(aside) => put_back_aside(session, destination, aside).await,
                None => None,
            };
            let lost = lost.unwrap_or_default();
            return Err(match failure {
                CopyFailure::Copy(error) if lost.is_empty() => error,
                CopyFailure::Copy(error) => ToolError::PartialFailure {
                    message: format!("{error}{lost}"),
                },
                CopyFailure::Remove { error, taken_back } => {
                    let state = match taken_back {
                        Ok(()) => "The copy was taken back, so nothing changed.".to_owned(),
                        Err(e) => format!(
                            "Taking the copy back failed too ({e}): {destination} now holds a copy of {source}, which is unchanged. Delete the copy, or retry the move"
                        ),
                    };
                    ToolError::PartialFailure {
                        message: format!(
                            "Error: Could not remove {source} after copying it to {destination}: {error}\n{state}{lost}"
                        ),
                    }
                }
            });
        }
    };
    let kept = replacing.then(|| record_replaced(session, destination, copy.before, aside));
    record_move(session, source, destination, Some(&version));
    Ok(Moved {
        bytes: file.content.len() as u64,
        replaced: kept,
        version: Some(version),
        renamed: false,
    })
}

/// How [`copy_then_remove`] failed.
#[derive(Debug)]
enum CopyFailure {
    /// The copy could not be written: nothing changed.
    Copy(ToolError),
    /// The source could not be removed; the copy was taken back, or not (why).
    Remove {
        error: ToolError,
        taken_back: Result<(), backend::Error>,
    },
}

/// A file moved across mounts, as two changes: `copy` (its content at the new path, given the
/// source's mode where the destination keeps modes), then `removal` (the source, conditional on
/// the version copied). When the removal fails, the copy is taken back. Returns the copy's
/// version.
async fn copy_then_remove(
    session: &Session,
    copy: &Change<'_>,
    removal: &Change<'_>,
) -> Result<Version, CopyFailure> {
    let mut applied = copy.apply(session).await.map_err(CopyFailure::Copy)?;
    let written = applied.written(&copy.path).map_err(CopyFailure::Copy)?;
    let version = keep_mode(session, &removal.path, &copy.path, written).await;
    applied.version = Some(version.clone());
    if let Err(error) = removal.apply(session).await {
        let taken_back = copy.revert(session, &applied).await;
        return Err(CopyFailure::Remove { error, taken_back });
    }
    Ok(version)
}

/// Gives `to` the permission bits of `from` where both backends keep modes (disk to disk);
/// returns `to`'s version afterwards. Best effort: a mode that cannot be set is logged.
async fn keep_mode(
    session: &Session,
    from: &VirtualPath,
    to: &VirtualPath,
    version: Version,
) -> Version {
    let Ok(Some(mode)) = session.backend().permissions(from).await else {
        return version;
    };
    match session.backend().set_permissions(to, mode).await {
        Ok(Some(changed)) => changed,
        Ok(None) => version,
        Err(error) => {
            tracing::warn!(%to, %error, "could not keep the mode of a moved file");
            version
        }
    }
}

/// Moves the file at `current` (which must have `version`) back to `original` by
/// copy-then-delete: how `undo_edit` reverses a move across mounts. Returns the version at
/// `original`.
pub(crate) async fn copy_back(
    session: &Session,
    current: &VirtualPath,
    original: &VirtualPath,
    version: &Version,
) -> Result<Version, ToolError> {
    let file = read_for_copy(session, current).await?;
    if file.version != *version {
        return Err(ToolError::Stale {
            path: current.clone(),
        });
    }
    let copy = Change::write(original.clone(), Before::Absent, file.content.as_slice());
    let removal = Change::removal(current.clone(), Before::Version(file.version.clone()));
    match copy_then_remove(session, &copy, &removal).await {
        Ok(version) => Ok(version),
        Err(CopyFailure::Copy(error) | CopyFailure::Remove { error, .. }) => Err(error),
    }
}

/// One file of a directory move, copied.
#[derive(Debug)]
struct Copied {
    from: VirtualPath,
    to: VirtualPath,
    source_version: Version,
    copy_version: Version,
    bytes: u64,
}

/// Moves a directory file by file: every copy first (one file in memory at a time), then every
/// delete; any failure takes back what was done, so the source stays whole.
///
/// With a progress token the call reports each file copied, then each source file removed. A
/// cancelled call stops before its next file and takes the move back like a failed one: the
/// sources removed so far are written back from their copies, then the copies and the
/// directories made for them are removed, so the source is whole and the destination is not
/// there. The last source file removed is the commit point.
pub(super) async fn move_tree(
    session: &Session,
    source: &VirtualPath,
    destination: &VirtualPath,
    context: &CallContext,
) -> ToolResult {
    let entries = crate::change::editing::files_under(session, source).await?;
    if entries.is_empty() {
        return Err(ToolError::PartialFailure {
            message: format!(
                "Error: {source} holds no files, so there is nothing to move. Delete it with delete, and write files under {destination} instead"
            ),
        });
    }
    let mut pairs = Vec::with_capacity(entries.len());
    for entry in &entries {
        let relative = entry.path.relative_to(source).unwrap_or_default();
        pairs.push((entry.path.clone(), destination.join_relative(relative)?));
    }
    drop(entries);
    let paths = pairs
        .iter()
        .flat_map(|(s, d)| [s.clone(), d.clone()])
        .collect();
    // A move names no `file_path`, so it holds no place in a file's arrival order.
    let _guards = crate::change::editing::lock_files(session, paths, None).await;
    // A file this session read and that changed since stops the move before anything is done.
    for (from, _) in &pairs {
        if session.ledger.seen(from).is_some() {
            let version = match session.backend().read_at_most(from, 0).await? {
                BoundedRead::Whole(file) => file.version,
                BoundedRead::TooLarge { version, .. } => version,
            };
            check_not_stale(session, from, &version)?;
        }
    }
    // The directories the copies will create, topmost first: what taking the move back removes.
    let made = topmost_missing(session, destination).await?;
    let files = pairs.len() as u64;
    let mut steps = ChangeSteps::new("move", context, 2 * files);
    steps.phase("copied", files).await;
    let mut copies: Vec<Copied> = Vec::with_capacity(pairs.len());
    for (from, to) in &pairs {
        if steps.cancelled() {
            let left = take_back(session, &copies, 0, &made).await;
            return Err(steps.cancellation(cancelled_note(&left, source, copies.len(), 0)));
        }
        match copy_file(session, from, to).await {
            Ok(copied) => copies.push(copied),
            Err(error) => {
                let left = take_back(session, &copies, 0, &made).await;
                return Err(ToolError::PartialFailure {
                    message: format!(
                        "Error: Could not copy {from} to {to}: {error}\n{}",
                        left_note(&left, "nothing changed")
                    ),
                });
            }
        }
        steps.step().await;
    }
    steps.phase("removed from the source", files).await;
    for (index, copied) in copies.iter().enumerate() {
        if steps.cancelled() {
            let left = take_back(session, &copies, index, &made).await;
            return Err(steps.cancellation(cancelled_note(&left, source, copies.len(), index)));
        }
        let removal = Change::removal(
            copied.from.clone(),
            Before::Version(copied.source_version.clone()),
        );
        if let Err(error) = removal.apply(session).await {
            let left = take_back(session, &copies, index, &made).await;
            return Err(ToolError::PartialFailure {
                message: format!(
                    "Error: Could not remove {} while moving {source}: {}\n{}",
                    copied.from,
                    error,
                    left_note(&left, "every file was put back, nothing changed")
                ),
            });
        }
        steps.step().await;
    }
    let leftover = remove_empty_dirs(session, source).await;
    let total: u64 = copies.iter().map(|c| c.bytes).sum();
    for copied in &copies {
        record_move(
            session,
            &copied.from,
            &copied.to,
            Some(&copied.copy_version),
        );
    }
    let mut text = format!(
        "Moved directory {source} to {destination}: {} file(s), {total} bytes (copied across mounts file by file, then the sources deleted). undo_edit on a file's new path moves that file back.",
        copies.len()
    );
    if leftover {
        text.push_str(&format!(
            "\n{source} itself was left in place: it still holds entries that ls and glob do not show (such as ignored files)."
        ));
    }
    Ok(ToolReply {
        text,
        structured: Some(json!({
            "source": source.as_str(),
            "destination": destination.as_str(),
            "moved": copies
                .iter()
                .map(|c| json!({"from": c.from.as_str(), "to": c.to.as_str()}))
                .collect::<Vec<_>>(),
            "bytes": total,
            "renamed": false,
        })),
        image: None,
        file: None,
    })
}

/// Copies one file of a directory move create-only, keeping its mode where it can.
async fn copy_file(
    session: &Session,
    from: &VirtualPath,
    to: &VirtualPath,
) -> Result<Copied, ToolError> {
    let file = read_for_copy(session, from).await?;
    check_not_stale(session, from, &file.version)?;
    let copy = Change::write(to.clone(), Before::Absent, file.content.as_slice());
    let written = copy.apply(session).await?.written(to)?;
    let copy_version = keep_mode(session, from, to, written).await;
    Ok(Copied {
        from: from.clone(),
        to: to.clone(),
        source_version: file.version,
        copy_version,
        bytes: file.content.len() as u64,
    })
}

/// Writes a deleted source back from its copy (a directory move failing half-way).
async fn restore_source(session: &Session, copied: &Copied) -> Result<(), ToolError> {
    let file = read_for_copy(session, &copied.to).await?;
    Change::write(copied.from.clone(), Before::Absent, file.content.as_slice())
        .apply(session)
        .await?;
    keep_mode(session, &copied.to, &copied.from, file.version).await;
    Ok(())
}

/// The topmost directory of `destination`'s path that does not exist (`destination` itself when
/// its parent exists): everything a move there creates is under it.
async fn topmost_missing(
    session: &Session,
    destination: &VirtualPath,
) -> Result<VirtualPath, ToolError> {
    let mut top = destination.clone();
    while let Some(parent) = top.parent() {
        if parent.is_root() || session.backend().stat(&parent).await?.is_some() {
            break;
        }
        top = parent;
    }
    Ok(top)
}

/// Takes back a directory move that failed or was cancelled after copying `copies` and removing
/// the first `removed` sources: writes those sources back from their copies, then (when all
/// came back) removes every copy and the empty directories left under `made` (the topmost
/// directory the move created, see [`topmost_missing`]). Returns what could not be taken back.
async fn take_back(
    session: &Session,
    copies: &[Copied],
    removed: usize,
    made: &VirtualPath,
) -> Vec<String> {
    let mut left = Vec::new();
    for earlier in &copies[..removed] {
        if let Err(e) = restore_source(session, earlier).await {
            left.push(format!(
                "{} could not be restored ({e}); its copy {} is kept",
                earlier.from, earlier.to
            ));
        }
    }
    if left.is_empty() {
        left = remove_copies(session, copies).await;
        if left.is_empty() && !copies.is_empty() {
            remove_empty_dirs(session, made).await;
        }
    }
    left
}

/// What a cancelled directory move left, in sentences.
fn cancelled_note(left: &[String], source: &VirtualPath, copied: usize, removed: usize) -> String {
    if !left.is_empty() {
        return left_note(left, "");
    }
    let undone = match (copied, removed) {
        (0, _) => String::new(),
        (c, 0) => format!(" (the {} copied were removed)", super::counted(c, "file")),
        (c, r) => format!(
            " (the {} removed from {source} were written back and the {} copied removed)",
            super::counted(r, "file"),
            super::counted(c, "file")
        ),
    };
    format!("Nothing was moved{undone}: {source} is as it was.")
}

/// Deletes copies made by a failed directory move; returns what could not be deleted.
async fn remove_copies(session: &Session, copies: &[Copied]) -> Vec<String> {
    let mut left = Vec::new();
    for copied in copies {
        let removal = Change::removal(
            copied.to.clone(),
            Before::Version(copied.copy_version.clone()),
        );
        if let Err(e) = removal.land(session).await {
            left.push(format!("the copy {} could not be removed ({e})", copied.to));
        }
    }
    left
}

fn left_note(left: &[String], all_clear: &str) -> String {
    if left.is_empty() {
        format!("The copies made so far were taken back: {all_clear}.")
    } else {
        format!(
            "Taking the move back was incomplete: {}. Check both paths with ls",
            left.join("; ")
        )
    }
}

/// Removes the (now file-less) source directory bottom-up with non-recursive deletes, so that
/// anything the tools cannot see (ignored files on disk) is never thrown away. Returns whether
/// the source directory is still there.
async fn remove_empty_dirs(session: &Session, dir: &VirtualPath) -> bool {
    let mut dirs = vec![dir.clone()];
    let mut index = 0;
    while let Some(current) = dirs.get(index).cloned() {
        if let Ok(entries) = session.backend().ls(&current).await {
            dirs.extend(entries.into_iter().filter(|e| e.is_dir()).map(|e| e.path));
        }
        index += 1;
    }
    // Deepest first.
    dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    for current in &dirs {
        let _ = session
            .backend()
            .delete(current, &DeleteOptions::default())
            .await;
    }
    matches!(session.backend().stat(dir).await, Ok(Some(_)))
}
