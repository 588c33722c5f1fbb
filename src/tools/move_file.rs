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

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::change::{After, Applied, Before, Change, record_move, stale_or};
use super::editing::{check_not_stale, lock_files};
use super::move_copy;
use super::steps::ChangeSteps;
use super::{CallContext, ToolError, ToolReply};
use crate::backend::{self, AsideFile, BoundedRead, FileBytes, RenameOptions, Renamed, Version};
use crate::path::VirtualPath;
use crate::session::Session;

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
pub async fn run(
    args: Args,
    session: &Session,
    context: &CallContext,
) -> Result<ToolReply, ToolError> {
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
        if session.backend().stat(&destination).await?.is_some() {
            return Err(ToolError::DestinationExists {
                path: destination.clone(),
                hint: "A directory is moved to a path that does not exist yet; choose another name, or delete the destination first".into(),
            });
        }
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

/// What one file move did.
#[derive(Debug)]
pub(super) struct Moved {
    /// The file's size.
    pub(super) bytes: u64,
    /// `Some` when it replaced a file: whether that file was kept for undo.
    pub(super) replaced: Option<bool>,
    /// Its version at the destination (`None`: a symbolic link moved as itself).
    pub(super) version: Option<Version>,
    /// Renamed in place (true) or copied and deleted.
    pub(super) renamed: bool,
}

/// The refusal of a file move onto an existing destination.
pub(super) fn destination_taken(
    source: &VirtualPath,
    destination: &VirtualPath,
    is_dir: bool,
) -> ToolError {
    if is_dir {
        let suggestion = source
            .file_name()
            .and_then(|name| destination.join(name).ok())
            .map_or_else(String::new, |p| format!(", e.g. {p}"));
        return ToolError::DestinationExists {
            path: destination.clone(),
            hint: format!(
                "It is a directory; to move the file into it, give the full new path{suggestion}"
            ),
        };
    }
    ToolError::DestinationExists {
        path: destination.clone(),
        hint: "Pass overwrite=true to replace it, or choose another destination".into(),
    }
}

/// The file a move replaces, and how it is kept for undo.
#[derive(Debug)]
pub(super) enum Replaced {
    /// Small enough for the undo history: read whole, replaced by the rename itself.
    InMemory(FileBytes),
    /// Too big: already moved aside by its backend (disk), to be put back if the move fails.
    Aside(AsideFile),
    /// Too big, and its backend cannot keep it aside: replaced without undo.
    Unkept(Version),
}

impl Replaced {
    /// Reads (or sets aside) the file at `destination` that a move is about to replace.
    pub(super) async fn take(
        session: &Session,
        destination: &VirtualPath,
    ) -> Result<Self, ToolError> {
        let bound = session.write_options.limits.max_undo_snapshot_bytes();
        match session.backend().read_at_most(destination, bound).await? {
            BoundedRead::Whole(file) => {
                check_not_stale(session, destination, &file.version)?;
                Ok(Self::InMemory(file))
            }
            BoundedRead::TooLarge { version, .. } => {
                check_not_stale(session, destination, &version)?;
                let removal =
                    Change::removal(destination.clone(), Before::Version(version.clone()));
                match removal
                    .keep_aside(session)
                    .await?
                    .and_then(|kept| kept.aside)
                {
                    Some(aside) => Ok(Self::Aside(aside)),
                    None => Ok(Self::Unkept(version)),
                }
            }
        }
    }

    /// The version a change must find at the destination (`None`: it must be absent, the file
    /// having been set aside).
    pub(super) fn version(&self) -> Option<Version> {
        match self {
            Self::InMemory(file) => Some(file.version.clone()),
            Self::Aside(_) => None,
            Self::Unkept(version) => Some(version.clone()),
        }
    }

    /// What a change writing over the replaced file must find there, and what it kept aside.
    pub(super) fn into_parts(self) -> (Before, Option<AsideFile>) {
        match self {
            Self::InMemory(file) => (Before::Read(file), None),
            Self::Aside(aside) => (Before::Absent, Some(aside)),
            Self::Unkept(version) => (Before::Version(version), None),
        }
    }

    /// Puts a file set aside back after a move that failed; a note when that failed too.
    pub(super) async fn put_back(
        &self,
        session: &Session,
        destination: &VirtualPath,
    ) -> Option<String> {
        let Self::Aside(aside) = self else {
            return None;
        };
        put_back_aside(session, destination, aside).await
    }

    /// Records the replaced file as a deletion of `destination` (below the move's own step);
    /// returns whether it was kept for undo.
    pub(super) fn record(self, session: &Session, destination: &VirtualPath) -> bool {
        let (before, aside) = self.into_parts();
        record_replaced(session, destination, before, aside)
    }
}

/// Puts the file a move set aside at `destination` back (the move failed); a note when that
/// failed too.
pub(super) async fn put_back_aside(
    session: &Session,
    destination: &VirtualPath,
    aside: &AsideFile,
) -> Option<String> {
    let restore = Change {
        path: destination.clone(),
        before: Before::Absent,
        after: After::Aside(aside.clone()),
    };
    restore.land(session).await.err().map(|e| {
        format!(
            "\nThe file it was to replace could not be put back ({e}); it is lost from {destination}"
        )
    })
}

/// Records the file a move replaced at `destination` as removed (undo puts it back, one step
/// below the move's own); returns whether it was kept for undo.
pub(super) fn record_replaced(
    session: &Session,
    destination: &VirtualPath,
    before: Before,
    aside: Option<AsideFile>,
) -> bool {
    let removal = Change::removal(destination.clone(), before);
    removal.record(
        session,
        Applied {
            version: None,
            aside,
        },
        None,
    )
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
