//! `move`: rename or move a file or a directory, within one mount or across mounts (CONTRACT §2,
//! §4, issue 17). Never overwrites unless `overwrite` is true; mount roots cannot be moved.
//!
//! Within one mount a move is the backend's [`Backend::rename`]: on disk one `renameat2`, so a
//! file keeps its mode, times, inode and hard links and a directory of any size moves whole with
//! no content passing through memory; in memory and store mounts the entries are renamed (a store
//! in one transaction, compare-and-swap on the versions). Only where no rename is possible
//! (across mounts, or a disk rename across file systems) is a move copy-then-delete, file by
//! file, holding one file at a time (see [`super::move_copy`]).
//!
//! Like `delete`, moving a file this session never read is allowed, but moving or replacing one
//! that changed since this session read it is refused as stale. Each moved file (or renamed
//! directory) leaves one undo step at its new path recording where it came from: `undo_edit` on
//! the destination moves it back. A file the move replaced is kept for undo as a deletion of the
//! destination, one step below: a second `undo_edit` on the destination brings it back. The read
//! ledger follows the move: content seen at the source is seen at the destination.
//!
//! [`Backend::rename`]: crate::storage::backend::Rename::rename

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::move_copy;
use super::moved::{Moved, Replaced, destination_taken};
use super::{CallContext, ToolError, ToolReply, ToolResult};
use crate::change::confirm::ask_first;
use crate::change::editing::{check_not_stale, lock_files};
use crate::change::steps::ChangeSteps;
use crate::change::{record_move, stale_or};
use crate::ground::path::VirtualPath;
use crate::state::session::Session;
use crate::storage::backend::{self, BoundedRead, FileBytes, RenameOptions, Renamed, Version};

/// Arguments of `move` (schemas/move.json).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// The file or directory to move.
    pub source: String,
    /// Its new path.
    pub destination: String,
    /// Replace an existing destination file.
    #[serde(default)]
    pub overwrite: bool,
}

/// Runs the tool.
///
/// A directory move reports progress and can be cancelled (see [`rename_tree`] and
/// [`move_copy::move_tree`]): a cancelled one leaves the source whole and no destination.
pub async fn run(args: Args, session: &Session, context: &CallContext) -> ToolResult {
    let source = VirtualPath::parse(&args.source)?;
    let destination = VirtualPath::parse(&args.destination)?;
    if source == destination {
        return Err(ToolError::SamePath { path: source });
    }
    for path in [&source, &destination] {
        if session.backend().holds_mount_root(path) {
            return Err(backend::Error::MountRoot { path: path.clone() }.into());
        }
    }
    if destination.starts_with(&source) {
        return Err(ToolError::MoveIntoItself {
            source_path: source,
            destination,
        });
    }
    session.backend().check_writable(&source)?;
    let Some(entry) = session.backend().stat(&source).await? else {
        return Err(backend::Error::NotFound { path: source }.into());
    };
    if session.backend().same_file(&source, &destination).await? {
        return Err(ToolError::SamePath { path: source });
    }
    crate::change::editing::refuse_new_control_names(session, &destination).await?;
    if entry.is_dir() {
        if session.backend().stat(&destination).await?.is_some() {
            return Err(ToolError::DestinationExists {
                path: destination.clone(),
                hint: "A directory is moved to a path that does not exist yet; choose another name, or delete the destination first".into(),
            });
        }
        ask_first(context, "move", false, || {
            format!("Move the directory {source} to {destination}?")
        })
        .await?;
        let guards = lock_files(
            session,
            vec![source.clone(), destination.clone()],
            context.turn.as_deref(),
        )
        .await;
        if let Some(reply) = rename_tree(session, &source, &destination, context).await? {
            return Ok(reply);
        }
        drop(guards);
        return move_copy::move_tree(session, &source, &destination, context).await;
    }
    let _guards = lock_files(
        session,
        vec![source.clone(), destination.clone()],
        context.turn.as_deref(),
    )
    .await;
    if context.confirm.is_some() {
        // Asked inside the locks, once the destination is known; a destination that is there
        // without `overwrite` is refused below without asking.
        let replacing = session.backend().stat(&destination).await?;
        if replacing.is_none() || args.overwrite {
            ask_first(context, "move", replacing.is_some(), || match replacing {
                Some(old) => format!(
                    "Move {source} ({} bytes) to {destination}, replacing the existing {destination} ({} bytes)?",
                    entry.size, old.size
                ),
                None => format!("Move {source} ({} bytes) to {destination}?", entry.size),
            })
            .await?;
        }
    }
    let (moved, how) = match rename_one(session, &source, &destination, args.overwrite).await? {
        Some(moved) => (moved, "renamed in place: mode, times and links kept"),
        None => (
            move_copy::move_one(session, &source, &destination, args.overwrite).await?,
            "copied across mounts, then the source deleted",
        ),
    };
    let replaced = match &moved.replaced {
        Some(_) => format!(" (replacing the previous {destination})"),
        None => String::new(),
    };
    let replaced_note = match moved.replaced {
        Some(true) => {
            format!(" A second undo_edit on {destination} brings back the file it replaced.")
        }
        Some(false) => {
            " The file it replaced was too large to keep for undo_edit (--max-undo-memory-bytes)."
                .to_owned()
        }
        None => String::new(),
    };
    Ok(ToolReply {
        text: format!(
            "Moved {source} to {destination}{replaced}, {} bytes ({how}). To reverse it, call undo_edit on {destination}.{replaced_note}",
            moved.bytes
        ),
        structured: Some(json!({
            "source": source.as_str(),
            "destination": destination.as_str(),
            "version": moved.version.as_ref().map(Version::as_str),
            "replaced": moved.replaced.is_some(),
            "bytes": moved.bytes,
            "renamed": moved.renamed,
        })),
        image: None,
        file: None,
    })
}

/// Moves one file by renaming it in place (locks held by the caller). `Ok(None)` when its
/// backend cannot (across mounts, file systems): nothing changed.
async fn rename_one(
    session: &Session,
    source: &VirtualPath,
    destination: &VirtualPath,
    overwrite: bool,
) -> Result<Option<Moved>, ToolError> {
    let same_mount =
        session.backend().route(source).0.prefix == session.backend().route(destination).0.prefix;
    if !same_mount {
        return Ok(None);
    }
    let link = session.backend().is_symlink(source).await?;
    // Only the size and version: the content is never read.
    let (bytes, version) = match session.backend().read_at_most(source, 0).await? {
        BoundedRead::Whole(file) => (file.content.len() as u64, file.version),
        BoundedRead::TooLarge { size, version } => (size, version),
    };
    check_not_stale(session, source, &version)?;
    let replaced = match session.backend().stat(destination).await? {
        None => None,
        Some(entry) if entry.is_dir() => {
            return Err(destination_taken(source, destination, true));
        }
        Some(_) if !overwrite => return Err(destination_taken(source, destination, false)),
        Some(_) => Some(Replaced::take(session, destination).await?),
    };
    let options = RenameOptions {
        // A symbolic link moves as itself: its target's version says nothing about it.
        if_version: (!link).then(|| version.clone()),
        replacing: replaced.as_ref().and_then(Replaced::version),
    };
    let renamed: Renamed = match session
        .backend()
        .rename(source, destination, &options)
        .await
    {
        Ok(Some(renamed)) => renamed,
        outcome => {
            let lost = match &replaced {
                Some(replaced) => replaced.put_back(session, destination).await,
                None => None,
            };
            return match (outcome, lost) {
                (Ok(_), None) => Ok(None),
                (Ok(_), Some(lost)) => Err(ToolError::PartialFailure {
                    message: format!(
                        "Error: {source} cannot be renamed to {destination} in place.{lost}"
                    ),
                }),
                (Err(error), None) => Err(stale_or(error)),
                (Err(error), Some(lost)) => Err(ToolError::PartialFailure {
                    message: format!("{}{lost}", stale_or(error)),
                }),
            };
        }
    };
    let kept = replaced.map(|r| r.record(session, destination));
    record_move(session, source, destination, renamed.version.as_ref());
    Ok(Some(Moved {
        bytes,
        replaced: kept,
        version: renamed.version,
        renamed: true,
    }))
}

/// Moves a directory by renaming it in place, whole (locks held by the caller). `Ok(None)`
/// when its backend cannot: nothing changed. The files this session read below it are checked
/// first (a cancelled call stops there: nothing moved); the rename itself lands whole or not at
/// all. No progress is reported: a rename is one step (and when the backend cannot rename,
/// the copy reports from its start).
async fn rename_tree(
    session: &Session,
    source: &VirtualPath,
    destination: &VirtualPath,
    context: &CallContext,
) -> Result<Option<ToolReply>, ToolError> {
    let same_mount =
        session.backend().route(source).0.prefix == session.backend().route(destination).0.prefix;
    if !same_mount {
        return Ok(None);
    }
    // What this session read below the source must not have changed since (as for a file);
    // files it never read may move unseen, like `mv`.
    let steps = ChangeSteps::new("move", context, 1);
    for (path, seen) in session.ledger.seen_under(source) {
        if steps.cancelled() {
            return Err(steps.cancellation("Nothing was moved."));
        }
        match session.backend().read_at_most(&path, 0).await {
            Ok(BoundedRead::Whole(FileBytes { version, .. }))
            | Ok(BoundedRead::TooLarge { version, .. })
                if version != seen =>
            {
                return Err(ToolError::Stale { path });
            }
            Ok(_) | Err(backend::Error::NotFound { .. }) => {}
            Err(error) => return Err(error.into()),
        }
    }
    if steps.cancelled() {
        return Err(steps.cancellation("Nothing was moved."));
    }
    let renamed = session
        .backend()
        .rename(source, destination, &RenameOptions::default())
        .await
        .map_err(stale_or)?;
    if renamed.is_none() {
        return Ok(None);
    }
    record_move(session, source, destination, None);
    Ok(Some(ToolReply {
        text: format!(
            "Moved directory {source} to {destination} in one rename: everything in it moved, with modes and times kept. To reverse it, call undo_edit on {destination}."
        ),
        structured: Some(json!({
            "source": source.as_str(),
            "destination": destination.as_str(),
            "renamed": true,
        })),
        image: None,
        file: None,
    }))
}
