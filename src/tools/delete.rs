//! `delete`: remove a file, or a directory (a non-empty one only with `recursive`) (CONTRACT §4).
//!
//! The rule for files follows `rm` and the anchors' write rules together: deleting a file this
//! session never read is allowed, but deleting one that changed since this session read it is
//! refused as stale, because the agent would be throwing away content it has not seen. Every
//! file delete is conditional on the version just read, and records an undo step holding the
//! content, so `undo_edit` recreates it. Mount roots, and directories holding a mount point,
//! cannot be deleted.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::{CallContext, ToolError, ToolReply, ToolResult};
use crate::change::confirm::ask_first;
use crate::change::editing::{check_not_stale, lock_files};
use crate::change::steps::ChangeSteps;
use crate::change::{Applied, Before, Change, fits_undo, record_removed};
use crate::ground::path::VirtualPath;
use crate::state::session::Session;
use crate::storage::backend::{self, BoundedRead, DeleteOptions, FileBytes};

/// Most files of a recursive delete whose contents are kept for `undo_edit`; past this the
/// directory is deleted without undo steps (and the answer says so).
pub const MAX_UNDOABLE_FILES: usize = 1000;
/// Most deleted paths named in an answer.
const LISTED_PATHS: usize = 20;

/// Arguments of `delete` (schemas/delete.json).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// The file or directory.
    pub file_path: String,
    /// Delete a non-empty directory with everything under it.
    #[serde(default)]
    pub recursive: bool,
}

/// Runs the tool.
pub async fn run(args: Args, session: &Session, context: &CallContext) -> ToolResult {
    let path = VirtualPath::parse(&args.file_path)?;
    if session.backend().holds_mount_root(&path) {
        return Err(backend::Error::MountRoot { path }.into());
    }
    let Some(entry) = session.backend().stat(&path).await? else {
        return Err(backend::Error::NotFound { path }.into());
    };
    if session.backend().is_symlink(&path).await? {
        // The link goes, never what it leads to (like `rm -r link`).
        return delete_bare(
            session,
            context,
            &path,
            format!("Delete the symbolic link {path} (what it leads to stays)?"),
            format!("Deleted the symbolic link {path}; what it leads to is untouched."),
        )
        .await;
    }
    if !entry.is_dir() {
        return delete_file(session, &path, context).await;
    }
    if !args.recursive {
        return delete_bare(
            session,
            context,
            &path,
            format!("Delete the directory {path} (if it is empty)?"),
            format!("Deleted empty directory {path}."),
        )
        .await;
    }
    delete_tree(session, &path, context).await
}

/// Deletes what has no undo content (a symbolic link, an empty directory) once the person
/// agrees to `question`; `said` is the answer.
async fn delete_bare(
    session: &Session,
    context: &CallContext,
    path: &VirtualPath,
    question: String,
    said: String,
) -> ToolResult {
    ask_first(context, "delete", true, || question).await?;
    session
        .backend()
        .delete(path, &DeleteOptions::default())
        .await?;
    record_removed(session, path);
    let mut reply = ToolReply::text(said);
    reply.structured = Some(json!({
        "deleted": [path.as_str()],
        "bytes": 0,
        "undoable": false,
    }));
    Ok(reply)
}

async fn delete_file(session: &Session, path: &VirtualPath, context: &CallContext) -> ToolResult {
    let _guard = session.lock_file(path, context.turn.as_deref()).await;
    let bound = session.write_options.limits.max_undo_snapshot_bytes();
    let question = |bytes: u64| move || format!("Delete the file {path} ({bytes} bytes)?");
    let (bytes, removal, applied) = match session.backend().read_at_most(path, bound).await? {
        BoundedRead::Whole(file) => {
            check_not_stale(session, path, &file.version)?;
            let bytes = file.content.len() as u64;
            ask_first(context, "delete", true, question(bytes)).await?;
            let removal = Change::removal(path.clone(), Before::Read(file));
            let applied = removal.apply(session).await?;
            (bytes, removal, applied)
        }
        BoundedRead::TooLarge { size, version } => {
            // Never read: too large to keep in memory for undo (--max-undo-memory-bytes). A disk
            // mount keeps it aside by rename instead; elsewhere it is simply deleted.
            check_not_stale(session, path, &version)?;
            ask_first(context, "delete", true, question(size)).await?;
            let removal = Change::removal(path.clone(), Before::Version(version));
            let applied = removal.apply_keeping_aside(session).await?;
            (size, removal, applied)
        }
    };
    let undoable = removal.record(session, applied, None);
    let note = if undoable {
        "undo_edit can restore it."
    } else {
        "It was too large to keep for undo_edit (--max-undo-memory-bytes): this deletion cannot be undone."
    };
    Ok(ToolReply {
        text: format!("Deleted {path} ({bytes} bytes). {note}"),
        structured: Some(json!({
            "deleted": [path.as_str()],
            "bytes": bytes,
            "undoable": undoable,
        })),
        image: None,
        file: None,
    })
}

/// A recursive delete: every file is read (staleness, undo content) and deleted one by one,
/// conditional on its version; then the directory itself goes (with anything `glob` does not
/// show, such as ignored files on disk).
///
/// With a progress token the call reports each file checked, then each file deleted. A
/// cancelled call stops before its next file and deletes nothing: while checking, nothing was
/// deleted yet; while deleting, the files deleted so far are written back from the contents
/// read for undo. The files whose content is kept go first; the first file that could not be
/// written back (no undo content: a directory too large for undo, or a file that grew past the
/// bound) is the commit point, from which the delete runs to its end.
async fn delete_tree(session: &Session, dir: &VirtualPath, context: &CallContext) -> ToolResult {
    let entries = crate::change::editing::files_under(session, dir).await?;
    let total_bytes: u64 = entries.iter().map(|e| e.size).sum();
    ask_first(context, "delete", true, || {
        format!(
            "Delete the directory {dir} and everything under it: {} ({total_bytes} bytes)?",
            super::counted(entries.len(), "file")
        )
    })
    .await?;
    let keep_undo = entries.len() <= MAX_UNDOABLE_FILES
        && usize::try_from(total_bytes).is_ok_and(|b| fits_undo(session, b));
    let paths = entries.iter().map(|e| e.path.clone()).collect();
    let guards = lock_files(session, paths, context.turn.as_deref()).await;
    let files = entries.len() as u64;
    let mut steps = ChangeSteps::new("delete", context, 2 * files);
    steps.phase("checked", files).await;
    // Check every file before deleting any, so a stale one stops the whole delete.
    let mut removals = Vec::new();
    for entry in &entries {
        if steps.cancelled() {
            return Err(steps.cancellation("Nothing was deleted."));
        }
        steps.step().await;
        if !keep_undo && session.ledger.seen(&entry.path).is_none() {
            continue;
        }
        // Without undo, only the version is needed: a big file is never read whole.
        let bound = if keep_undo {
            session.write_options.limits.max_undo_snapshot_bytes()
        } else {
            0
        };
        // A file that grew past the bound since the listing was not read: no undo step.
        let (before, version) = match session.backend().read_at_most(&entry.path, bound).await {
            Ok(BoundedRead::Whole(file)) if keep_undo => {
                let version = file.version.clone();
                (Before::Read(file), version)
            }
            Ok(BoundedRead::Whole(FileBytes { version, .. }))
            | Ok(BoundedRead::TooLarge { version, .. }) => {
                (Before::Version(version.clone()), version)
            }
            Err(backend::Error::NotFound { .. }) => continue,
            Err(e) => return Err(e.into()),
        };
        check_not_stale(session, &entry.path, &version)?;
        removals.push(Change::removal(entry.path.clone(), before));
    }
    // Those that can be written back first, in path order (the sort is stable).
    removals.sort_by_key(|removal| !restorable(removal));
    steps.set_total(files + removals.len() as u64);
    steps.phase("deleted", removals.len() as u64).await;
    let mut done: Vec<(Change<'_>, Applied)> = Vec::with_capacity(removals.len());
    for removal in removals {
        if restorable(&removal) && steps.cancelled() {
            let state = put_back(session, done).await;
            return Err(steps.cancellation(state));
        }
        match removal.apply(session).await {
            Ok(applied) => {
                done.push((removal, applied));
                steps.step().await;
            }
            Err(error) => {
                let path = removal.path;
                let deleted: Vec<VirtualPath> = done.iter().map(|(r, _)| r.path.clone()).collect();
                for (removal, applied) in done {
                    removal.record(session, applied, None);
                }
                return Err(ToolError::PartialFailure {
                    message: format!(
                        "Error: Deleting {dir} stopped at {path}: {error}\nDeleted before it ({}): {}. Nothing else was deleted; undo_edit restores each deleted file",
                        deleted.len(),
                        list(&deleted)
                    ),
                });
            }
        }
    }
    for (removal, applied) in done {
        removal.record(session, applied, None);
    }
    match session
        .backend()
        .delete(
            dir,
            &DeleteOptions {
                recursive: true,
                if_version: None,
            },
        )
        .await
    {
        Ok(()) | Err(backend::Error::NotFound { .. }) => {}
        Err(e) => return Err(e.into()),
    }
    for entry in &entries {
        session.ledger.forget(&entry.path);
    }
    record_removed(session, dir);
    drop(guards);
    let count = entries.len();
    let note = if keep_undo {
        "undo_edit on a file's path restores that file."
    } else {
        "The directory was too large to keep for undo_edit; it cannot be restored."
    };
    let paths: Vec<VirtualPath> = entries.into_iter().map(|e| e.path).collect();
    let lines_note = if count == 0 {
        String::new()
    } else {
        format!(": {}", list(&paths))
    };
    Ok(ToolReply {
        text: format!(
            "Deleted directory {dir} with {count} file(s), {total_bytes} bytes{lines_note}. {note}"
        ),
        structured: Some(json!({
            "deleted": paths.iter().map(VirtualPath::as_str).collect::<Vec<_>>(),
            "bytes": total_bytes,
            "undoable": keep_undo,
        })),
        image: None,
        file: None,
    })
}

/// Whether a removal can be taken back: the file's content was read.
fn restorable(removal: &Change<'_>) -> bool {
    matches!(removal.before, Before::Read(_))
}

/// Writes back the files a cancelled delete removed (newest first); what it left, in sentences.
/// A file that cannot be written back keeps its undo step.
async fn put_back(session: &Session, done: Vec<(Change<'_>, Applied)>) -> String {
    let count = done.len();
    let mut left = Vec::new();
    for (removal, applied) in done.into_iter().rev() {
        if let Err(error) = removal.revert(session, &applied).await {
            left.push(format!("{} ({error})", removal.path));
            removal.record(session, applied, None);
        }
    }
    match (count, left.is_empty()) {
        (0, _) => "Nothing was deleted.".to_owned(),
        (n, true) => format!(
            "Nothing was deleted: the {} deleted before the cancel were written back.",
            super::counted(n, "file")
        ),
        (_, false) => format!(
            "Writing back the files deleted before the cancel failed for: {}; undo_edit on each restores it. The others were written back",
            left.join(", ")
        ),
    }
}

fn list(paths: &[VirtualPath]) -> String {
    if paths.is_empty() {
        return "none".into();
    }
    let mut shown: Vec<&str> = paths
        .iter()
        .take(LISTED_PATHS)
        .map(VirtualPath::as_str)
        .collect();
    let more = paths.len().saturating_sub(LISTED_PATHS);
    let more_text = format!("and {more} more");
    if more > 0 {
        shown.push(&more_text);
    }
    shown.join(", ")
}
