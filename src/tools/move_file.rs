//! `move`: rename or move a file or a directory, within one mount or across mounts (CONTRACT §2,
//! §4). Never overwrites unless `overwrite` is true; mount roots cannot be moved.
//!
//! Every move goes through the `Backend` trait as copy-then-delete: the copy is written
//! create-only (or conditional on the version of the file it replaces), then the source is
//! deleted conditional on the version that was copied. If the delete fails the copy is taken back,
//! so a failed move never loses or duplicates a file: the source stays. A directory moves file by
//! file the same way, all or nothing. Like `delete`, moving a file this session never read is
//! allowed, but moving or replacing one that changed since this session read it is refused as
//! stale. Each moved file leaves two undo steps: the source's deletion and the destination's
//! write, so `undo_edit` on the destination and then on the source reverses a move.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::delete::{record_deletion, remove_checked};
use super::editing::{check_not_stale, fits_undo, lock_files, read_for_copy};
use super::{ToolError, ToolReply};
use crate::backend::{self, Backend, DeleteOptions, FileBytes, GlobQuery, Version, WriteMode};
use crate::path::VirtualPath;
use crate::search::GlobMatcher;
use crate::session::{Session, UndoStep};

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
pub async fn run(args: Args, session: &Session) -> Result<ToolReply, ToolError> {
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
    if session.backend().route(&source).0.read_only {
        return Err(backend::Error::ReadOnly { path: source }.into());
    }
    let Some(entry) = session.backend().stat(&source).await? else {
        return Err(backend::Error::NotFound { path: source }.into());
    };
    if session.backend().same_file(&source, &destination).await? {
        return Err(ToolError::SamePath { path: source });
    }
    super::editing::refuse_new_control_names(session, &destination).await?;
    if entry.is_dir() {
        return move_tree(session, &source, &destination).await;
    }
    let _guards = lock_files(session, vec![source.clone(), destination.clone()]).await;
    let moved = move_one(session, &source, &destination, args.overwrite).await?;
    let replaced = if moved.replaced {
        format!(" (replacing the previous {destination})")
    } else {
        String::new()
    };
    Ok(ToolReply {
        text: format!(
            "Moved {source} to {destination}{replaced}, {} bytes. To reverse it, call undo_edit on {destination}, then on {source}.",
            moved.bytes
        ),
        structured: Some(json!({
            "source": source.as_str(),
            "destination": destination.as_str(),
            "version": moved.version.as_str(),
            "replaced": moved.replaced,
            "bytes": moved.bytes,
        })),
        image: None,
    })
}

/// What one file move did.
#[derive(Debug)]
struct Moved {
    bytes: usize,
    replaced: bool,
    version: Version,
}

/// Moves one file (locks held by the caller).
async fn move_one(
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
            let suggestion = source
                .file_name()
                .and_then(|name| destination.join(name).ok())
                .map_or_else(String::new, |p| format!(", e.g. {p}"));
            return Err(ToolError::DestinationExists {
                path: destination.clone(),
                hint: format!(
                    "It is a directory; to move the file into it, give the full new path{suggestion}"
                ),
            });
        }
        Some(_) if !overwrite => {
            return Err(ToolError::DestinationExists {
                path: destination.clone(),
                hint: "Pass overwrite=true to replace it, or choose another destination".into(),
            });
        }
        Some(_) => {
            let existing = read_for_copy(session, destination).await?;
            check_not_stale(session, destination, &existing.version)?;
            Some(existing)
        }
    };
    let mode = replaced.as_ref().map_or(WriteMode::CreateOnly, |f| {
        WriteMode::IfVersion(f.version.clone())
    });
    let written = session
        .backend()
        .write(destination, &file.content, mode)
        .await
        .map_err(|e| stale_or(e, destination))?;
    if let Err(error) = remove_checked(session, source, &file).await {
        let rollback =
            take_back_copy(session, destination, replaced.as_ref(), &written.version).await;
        let state = match rollback {
            Ok(()) => "The copy was taken back, so nothing changed.".to_owned(),
            Err(e) => format!(
                "Taking the copy back failed too ({e}): {destination} now holds a copy of {source}, which is unchanged. Delete the copy, or retry the move"
            ),
        };
        return Err(ToolError::PartialFailure {
            message: format!(
                "Error: Could not remove {source} after copying it to {destination}: {error}\n{state}"
            ),
        });
    }
    let source_seen = session.ledger.seen(source).as_ref() == Some(&file.version);
    let bytes = file.content.len();
    let replaced_any = replaced.is_some();
    record_deletion(session, source, file);
    record_move_in(
        session,
        destination,
        replaced,
        &written.version,
        source_seen,
    );
    Ok(Moved {
        bytes,
        replaced: replaced_any,
        version: written.version,
    })
}

/// A conditional write that lost a race is staleness of that file.
fn stale_or(error: backend::Error, path: &VirtualPath) -> ToolError {
    match error {
        backend::Error::VersionMismatch { .. } => ToolError::Stale { path: path.clone() },
        other => other.into(),
    }
}

/// Removes a copy just written (or puts back the file it replaced), conditional on the copy's
/// version so a concurrent writer's change is never thrown away.
async fn take_back_copy(
    session: &Session,
    destination: &VirtualPath,
    replaced: Option<&FileBytes>,
    copy: &Version,
) -> Result<(), backend::Error> {
    match replaced {
        None => {
            session
                .backend()
                .delete(destination, &DeleteOptions::file_if_version(copy.clone()))
                .await
        }
        Some(old) => session
            .backend()
            .write(
                destination,
                &old.content,
                WriteMode::IfVersion(copy.clone()),
            )
            .await
            .map(|_| ()),
    }
}

/// Records the write at a move's destination: an undo step (what was there before, if it fits),
/// and the ledger only when the agent had seen the content it moved.
fn record_move_in(
    session: &Session,
    destination: &VirtualPath,
    replaced: Option<FileBytes>,
    version: &Version,
    content_seen: bool,
) {
    let before = replaced.map(|f| f.content);
    if before.as_ref().is_none_or(|b| fits_undo(session, b.len())) {
        session.undo.push(
            destination,
            UndoStep {
                before,
                after: Some(version.clone()),
                aside: None,
            },
        );
    }
    if content_seen {
        session.ledger.record(destination, version);
    } else {
        session.ledger.forget(destination);
    }
}

/// Moves a directory file by file: all copies first, then all deletes; any failure takes back
/// what was done, so the source stays whole.
async fn move_tree(
    session: &Session,
    source: &VirtualPath,
    destination: &VirtualPath,
) -> Result<ToolReply, ToolError> {
    if session.backend().stat(destination).await?.is_some() {
        return Err(ToolError::DestinationExists {
            path: destination.clone(),
            hint: "A directory is moved to a path that does not exist yet; choose another name, or delete the destination first".into(),
        });
    }
    let mut entries = session
        .backend()
        .glob(&GlobQuery {
            dir: source.clone(),
            matcher: GlobMatcher::new("*")?,
            control: Default::default(),
        })
        .await?;
    entries.sort_by(|a, b| a.path.cmp(&b.path));
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
    let _guards = lock_files(
        session,
        pairs
            .iter()
            .flat_map(|(s, d)| [s.clone(), d.clone()])
            .collect(),
    )
    .await;
    let mut files = Vec::with_capacity(pairs.len());
    for (from, _) in &pairs {
        let file = read_for_copy(session, from).await?;
        check_not_stale(session, from, &file.version)?;
        files.push(file);
    }
    // Copies.
    let mut copies: Vec<(VirtualPath, Version)> = Vec::new();
    for ((from, to), file) in pairs.iter().zip(&files) {
        match session
            .backend()
            .write(to, &file.content, WriteMode::CreateOnly)
            .await
        {
            Ok(outcome) => copies.push((to.clone(), outcome.version)),
            Err(error) => {
                let left = remove_copies(session, &copies).await;
                return Err(ToolError::PartialFailure {
                    message: format!(
                        "Error: Could not copy {from} to {to}: {error}\n{}",
                        left_note(&left, "nothing changed")
                    ),
                });
            }
        }
    }
    // Deletes of the sources.
    for (index, ((from, _), file)) in pairs.iter().zip(&files).enumerate() {
        if let Err(error) = remove_checked(session, from, file).await {
            let mut left = Vec::new();
            for ((earlier, _), earlier_file) in pairs.iter().zip(&files).take(index) {
                if let Err(e) = session
                    .backend()
                    .write(earlier, &earlier_file.content, WriteMode::CreateOnly)
                    .await
                {
                    left.push(format!(
                        "{earlier} could not be restored ({e}); its copy is kept"
                    ));
                }
            }
            if left.is_empty() {
                left = remove_copies(session, &copies).await;
            }
            return Err(ToolError::PartialFailure {
                message: format!(
                    "Error: Could not remove {from} while moving {source}: {error}\n{}",
                    left_note(&left, "every file was put back, nothing changed")
                ),
            });
        }
    }
    let leftover = remove_empty_dirs(session, source).await;
    let mut total = 0usize;
    for (((from, to), file), (_, version)) in pairs.iter().zip(files).zip(&copies) {
        total += file.content.len();
        let seen = session.ledger.seen(from).as_ref() == Some(&file.version);
        record_deletion(session, from, file);
        record_move_in(session, to, None, version, seen);
    }
    let mut text = format!(
        "Moved directory {source} to {destination}: {} file(s), {total} bytes. undo_edit on a file's new path and then its old path reverses that file's move.",
        pairs.len()
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
            "moved": pairs
                .iter()
                .map(|(from, to)| json!({"from": from.as_str(), "to": to.as_str()}))
                .collect::<Vec<_>>(),
            "bytes": total,
        })),
        image: None,
    })
}

/// Deletes copies made by a failed directory move; returns what could not be deleted.
async fn remove_copies(session: &Session, copies: &[(VirtualPath, Version)]) -> Vec<String> {
    let mut left = Vec::new();
    for (path, version) in copies {
        let options = DeleteOptions::file_if_version(version.clone());
        if let Err(e) = session.backend().delete(path, &options).await {
            left.push(format!("the copy {path} could not be removed ({e})"));
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
