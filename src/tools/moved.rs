//! What a file move did and the file it replaces: shared by the two ways a file moves, a rename
//! in place (`move_file`) and a copy then delete (`move_copy`), so neither imports the other's
//! parts.

use super::ToolError;
use crate::change::editing::check_not_stale;
use crate::change::{After, Applied, Before, Change};
use crate::ground::path::VirtualPath;
use crate::state::session::Session;
use crate::storage::backend::{AsideFile, BoundedRead, FileBytes, Version};

/// What one file move did.
#[derive(Debug)]
pub(crate) struct Moved {
    /// The file's size.
    pub(crate) bytes: u64,
    /// `Some` when it replaced a file: whether that file was kept for undo.
    pub(crate) replaced: Option<bool>,
    /// Its version at the destination (`None`: a symbolic link moved as itself).
    pub(crate) version: Option<Version>,
    /// Renamed in place (true) or copied and deleted.
    pub(crate) renamed: bool,
}

/// The refusal of a file move onto an existing destination.
pub(crate) fn destination_taken(
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
pub(crate) enum Replaced {
    /// Small enough for the undo history: read whole, replaced by the rename itself.
    InMemory(FileBytes),
    /// Too big: already moved aside by its backend (disk), to be put back if the move fails.
    Aside(AsideFile),
    /// Too big, and its backend cannot keep it aside: replaced without undo.
    Unkept(Version),
}

impl Replaced {
    /// Reads (or sets aside) the file at `destination` that a move is about to replace.
    pub(crate) async fn take(
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
    pub(crate) fn version(&self) -> Option<Version> {
        match self {
            Self::InMemory(file) => Some(file.version.clone()),
            Self::Aside(_) => None,
            Self::Unkept(version) => Some(version.clone()),
        }
    }

    /// What a change writing over the replaced file must find there, and what it kept aside.
    pub(crate) fn into_parts(self) -> (Before, Option<AsideFile>) {
        match self {
            Self::InMemory(file) => (Before::Read(file), None),
            Self::Aside(aside) => (Before::Absent, Some(aside)),
            Self::Unkept(version) => (Before::Version(version), None),
        }
    }

    /// Puts a file set aside back after a move that failed; a note when that failed too.
    pub(crate) async fn put_back(
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
    pub(crate) fn record(self, session: &Session, destination: &VirtualPath) -> bool {
        let (before, aside) = self.into_parts();
        record_replaced(session, destination, before, aside)
    }
}

/// Puts the file a move set aside at `destination` back (the move failed); a note when that
/// failed too.
pub(crate) async fn put_back_aside(
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
pub(crate) fn record_replaced(
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
