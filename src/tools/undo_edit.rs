//! `undo_edit`: takes back this session's most recent change to one file (write, edit,
//! multi_edit, apply_patch, delete, or a move to it), one step per call (CONTRACT §4, seed 004's
//! history stack). A move is undone by moving the file or directory back: renamed back in place
//! within one mount (mode, times, inode kept), copied back across mounts.
//!
//! Steps come from the session's bounded [`crate::state::session::UndoHistory`]. Every restore is
//! conditional on the file still being what this session left it as: a write `IfVersion` the
//! step's `after`, a delete conditional on it, and re-creating a deleted file create-only. So an
//! undo never overwrites someone else's later change; it is refused instead, the step stays in the
//! history, and the file is untouched.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::move_copy;
use super::{CallContext, ToolError, ToolReply, ToolResult};
use crate::change::editing::{decode_text, lock_files};
use crate::change::report::{describe_change, report_change};
use crate::change::{Applied, Change, record_move_undone};
use crate::ground::content;
use crate::ground::path::VirtualPath;
use crate::state::session::{Session, UNDO_STEPS_PER_FILE, UndoStep};
use crate::storage::backend::{self, AsideFile, BoundedRead, FileBytes, RenameOptions};

/// Arguments of `undo_edit` (schemas/undo_edit.json).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// The file whose last change to take back.
    pub file_path: String,
}

/// Runs the tool.
pub async fn run(args: Args, session: &Session, context: &CallContext) -> ToolResult {
    let path = VirtualPath::parse(&args.file_path)?;
    crate::change::confirm::ask_first(context, "undo_edit", false, || {
        format!("Undo this session's last change to {path}?")
    })
    .await?;
    // Undoing a move also changes the path it came from: both are locked, in path order.
    let _guards = match session.undo.top_moved_from(&path) {
        Some(from) => lock_files(session, vec![path.clone(), from], context.turn.as_deref()).await,
        None => vec![session.lock_file(&path, context.turn.as_deref()).await],
    };
    let Some(step) = session.undo.pop(&path) else {
        return Err(ToolError::NothingToUndo {
            path,
            max: UNDO_STEPS_PER_FILE,
        });
    };
    match undo(session, &path, &step).await {
        Ok(reply) => Ok(reply),
        Err(error) => {
            // Refused: the step stays, so the agent can retry after sorting the file out.
            session.undo.restore(&path, step);
            Err(error)
        }
    }
}

async fn undo(session: &Session, path: &VirtualPath, step: &UndoStep) -> ToolResult {
    if let Some(from) = &step.moved_from {
        return undo_move(session, path, from, step).await;
    }
    // The current content is read only to show a diff, and only when it is small enough to
    // keep (--max-undo-memory-bytes); a bigger file is compared by its version alone.
    let bound = session.write_options.limits.max_undo_snapshot_bytes();
    let mut unread_size = None;
    let current = match session.backend().read_at_most(path, bound).await {
        Ok(BoundedRead::Whole(file)) => Some(file),
        Ok(BoundedRead::TooLarge { size, version }) => {
            unread_size = Some(size);
            Some(FileBytes {
                content: Vec::new(),
                version,
                created: None,
                modified: None,
            })
        }
        Err(backend::Error::NotFound { .. }) => None,
        Err(e) => return Err(e.into()),
    };
    let conflict = |reason: &str| ToolError::UndoConflict {
        path: path.clone(),
        reason: reason.to_owned(),
    };
    let remaining = session.undo.depth(path);
    if let Some(aside) = &step.aside {
        return undo_from_aside(session, path, step, aside, current, remaining).await;
    }
    match (&step.before, &step.after, current) {
        (_, Some(after), Some(file)) if file.version != *after => Err(conflict(
            "it has been modified since (not by this session's last change)",
        )),
        (_, Some(_), None) => Err(conflict("it has been deleted since by someone else")),
        (_, None, Some(_)) => Err(conflict(
            "this session deleted it, but a file has been created there since",
        )),
        (Some(before), Some(_), Some(file)) => {
            let version = restore(session, path, step).await?.written(path)?;
            if let Some(size) = unread_size {
                let mut reply = ToolReply::text(format!(
                    "Undid the last change to {path}: restored {} bytes over its {size}-byte content (too large to show a diff).",
                    before.len()
                ));
                reply.structured = Some(restored_json(path, Some(&version), before.len()));
                reply.text.push_str(&remaining_note(remaining));
                return Ok(reply);
            }
            Ok(answer_restored(path, &file, before, &version, remaining))
        }
        (None, Some(_), Some(file)) => {
            restore(session, path, step).await?;
            let mut reply = ToolReply::text(format!(
                "Undid the creation of {path}: the file ({} bytes) was deleted.",
                unread_size.unwrap_or(file.content.len() as u64)
            ));
            reply.structured = Some(
                match text_of(&file.content).filter(|_| unread_size.is_none()) {
                    Some(old) => {
                        let report = report_change(path, &old, "");
                        json!({
                            "path": path.as_str(),
                            "version": null,
                            "deleted": true,
                            "lines_added": 0,
                            "lines_removed": report.stats.removed,
                            "diff": report.diff,
                            "diff_truncated": report.diff_truncated,
                        })
                    }
                    None => json!({
                        "path": path.as_str(),
                        "version": null,
                        "deleted": true,
                        "bytes": unread_size.unwrap_or(file.content.len() as u64),
                    }),
                },
            );
            reply.text.push_str(&remaining_note(remaining));
            Ok(reply)
        }
        (Some(before), None, None) => {
            let version = restore(session, path, step).await?.written(path)?;
            let headline = format!(
                "Undid the deletion of {path}: the file was recreated ({} bytes).",
                before.len()
            );
            let mut reply = match text_of(before) {
                Some(new) => describe_change(&headline, path, "", &new, None, &version),
                None => ToolReply {
                    structured: Some(restored_json(path, Some(&version), before.len())),
                    ..ToolReply::text(headline)
                },
            };
            reply.text.push_str(&remaining_note(remaining));
            Ok(reply)
        }
        (None, None, None) => Err(ToolError::NothingToUndo {
            path: path.clone(),
            max: UNDO_STEPS_PER_FILE,
        }),
    }
}

/// Takes back a change whose earlier content the backend kept aside (a file too large for the
/// undo history in memory): renamed back into place, conditional like every other undo.
async fn undo_from_aside(
    session: &Session,
    path: &VirtualPath,
    step: &UndoStep,
    aside: &AsideFile,
    current: Option<FileBytes>,
    remaining: usize,
) -> ToolResult {
    let conflict = |reason: &str| ToolError::UndoConflict {
        path: path.clone(),
        reason: reason.to_owned(),
    };
    let size = aside.0.size();
    let headline = match (&step.after, current) {
        (Some(after), Some(file)) if file.version != *after => {
            return Err(conflict(
                "it has been modified since (not by this session's last change)",
            ));
        }
        (Some(_), None) => return Err(conflict("it has been deleted since by someone else")),
        (None, Some(_)) => {
            return Err(conflict(
                "this session deleted it, but a file has been created there since",
            ));
        }
        (Some(_), Some(_)) => format!(
            "Undid the last change to {path}: its previous content ({size} bytes, kept aside on disk) is back."
        ),
        (None, None) => format!(
            "Undid the deletion of {path}: the file was put back ({size} bytes, kept aside on disk)."
        ),
    };
    let version = restore(session, path, step).await?.written(path)?;
    let mut reply = ToolReply::text(headline);
    reply.structured = Some(json!({
        "path": path.as_str(),
        "version": version.as_str(),
        "bytes": size,
    }));
    reply.text.push_str(&remaining_note(remaining));
    Ok(reply)
}

/// Moves a file or directory back to where this session's move took it from: renamed back in
/// place (the same mount), or copied back and deleted (across mounts). Refused when it changed
/// since the move, or when something is at its old path again.
async fn undo_move(
    session: &Session,
    path: &VirtualPath,
    from: &VirtualPath,
    step: &UndoStep,
) -> ToolResult {
    let conflict = |reason: String| ToolError::UndoConflict {
        path: path.clone(),
        reason,
    };
    let remaining = session.undo.depth(path);
    let Some(entry) = session.backend().stat(path).await? else {
        return Err(conflict("it has been moved or deleted since".into()));
    };
    if let Some(after) = &step.after {
        if entry.is_dir() {
            return Err(conflict("a directory is there now".into()));
        }
        let current = match session.backend().read_at_most(path, 0).await? {
            BoundedRead::Whole(file) => file.version,
            BoundedRead::TooLarge { version, .. } => version,
        };
        if current != *after {
            return Err(conflict(
                "it has been modified since (not by this session's last change)".into(),
            ));
        }
    }
    if session.backend().stat(from).await?.is_some() {
        return Err(conflict(format!(
            "{from}, where this session moved it from, exists again; move or delete that first"
        )));
    }
    let options = RenameOptions {
        if_version: step.after.clone(),
        replacing: None,
    };
    let version = match session.backend().rename(path, from, &options).await {
        Ok(Some(renamed)) => renamed.version,
        Ok(None) => match &step.after {
            Some(after) => Some(
                move_copy::copy_back(session, path, from, after)
                    .await
                    .map_err(|e| match e {
                        ToolError::Stale { .. } => {
                            conflict("it was changed by someone else while undoing".into())
                        }
                        other => other,
                    })?,
            ),
            None => {
                return Err(conflict(format!(
                    "it cannot be renamed back to {from} in place"
                )));
            }
        },
        Err(error) => return Err(refused(error.into(), path)),
    };
    record_move_undone(session, path, from, version.as_ref());
    let mut reply = ToolReply::text(format!(
        "Undid the move of {from} to {path}: it is back at {from}."
    ));
    reply.structured = Some(json!({
        "path": path.as_str(),
        "moved_back_to": from.as_str(),
        "version": version.as_ref().map(backend::Version::as_str),
    }));
    reply.text.push_str(&remaining_note(remaining));
    Ok(reply)
}

/// Takes `step` back ([`Change::undoing`]) and records it.
async fn restore(
    session: &Session,
    path: &VirtualPath,
    step: &UndoStep,
) -> Result<Applied, ToolError> {
    let change = Change::undoing(path, step);
    let applied = change.apply(session).await.map_err(|e| refused(e, path))?;
    change.record_undone(session, &applied);
    Ok(applied)
}

/// A refusal during the restore itself (a race with another writer) is a conflict.
fn refused(error: ToolError, path: &VirtualPath) -> ToolError {
    match error {
        ToolError::Stale { .. }
        | ToolError::Backend(backend::Error::VersionMismatch { .. })
        | ToolError::Backend(backend::Error::AlreadyExists { .. }) => ToolError::UndoConflict {
            path: path.clone(),
            reason: "it was changed by someone else while undoing".into(),
        },
        other => other,
    }
}

fn text_of(bytes: &[u8]) -> Option<String> {
    (!content::looks_binary(bytes)).then(|| decode_text(bytes).0)
}

fn answer_restored(
    path: &VirtualPath,
    file: &FileBytes,
    restored: &[u8],
    version: &backend::Version,
    remaining: usize,
) -> ToolReply {
    let headline = format!("Undid the last change to {path}.");
    let mut reply = match (text_of(&file.content), text_of(restored)) {
        (Some(old), Some(new)) => describe_change(&headline, path, &old, &new, None, version),
        _ => ToolReply {
            structured: Some(restored_json(path, Some(version), restored.len())),
            ..ToolReply::text(format!(
                "{headline} Restored {} bytes (binary content, no diff shown).",
                restored.len()
            ))
        },
    };
    reply.text.push_str(&remaining_note(remaining));
    reply
}

/// The structured answer of an undo that put back content shown without a diff (binary, or too
/// large to compare): `{path, version, bytes}`.
fn restored_json(path: &VirtualPath, version: Option<&backend::Version>, bytes: usize) -> Value {
    json!({
        "path": path.as_str(),
        "version": version.map(backend::Version::as_str),
        "bytes": bytes,
    })
}

fn remaining_note(remaining: usize) -> String {
    match remaining {
        0 => "\nNo earlier change of this session to undo.".to_owned(),
        n => format!("\n{n} earlier change(s) can still be undone."),
    }
}
