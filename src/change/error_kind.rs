//! The structured form of a failed tool call: `{"error": {"kind", "message"}}`, where `kind`
//! is one of [`ErrorKind`] (a stable name a program can branch on) and `message` the very text
//! the agent reads. Every tool's served output schema has a `$defs/error` branch
//! ([`error_branch`], written once here rather than in each `schemas/<tool>.output.json`) that
//! accepts exactly this shape, so an `isError` answer satisfies the schema too (CONTRACT §5).

use serde_json::{Value, json};

use super::ToolError;
use crate::storage::backend;

/// What kind of failure a tool answer reports; [`ErrorKind::as_str`] is the `kind` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Arguments refused by the input schema or the typed parse.
    InvalidArguments,
    /// A path refused by CONTRACT §1.
    InvalidPath,
    /// No such file or directory.
    NotFound,
    /// A directory where a file was needed.
    IsADirectory,
    /// A file where a directory was needed.
    NotADirectory,
    /// A create-only write found something there.
    AlreadyExists,
    /// A conditional change found another version (someone else changed the file).
    VersionMismatch,
    /// A non-recursive delete of a non-empty directory.
    DirectoryNotEmpty,
    /// A change under a read-only mount.
    ReadOnly,
    /// Deleting, moving or overwriting a mount root.
    MountRoot,
    /// A path resolving outside its mount.
    OutsideMount,
    /// Something the backend refuses to touch (FIFO, device…).
    Unsupported,
    /// The storage behind a mount cannot be reached.
    Unavailable,
    /// Any other I/O failure.
    Io,
    /// A bad glob or regular expression.
    InvalidPattern,
    /// An `edit_file`/`multi_edit` whose old text was not found, or found too often.
    EditRefused,
    /// The call was cancelled by the client.
    Cancelled,
    /// Changing a file this session has not read.
    NotRead,
    /// Changing a file that changed since this session read it.
    Stale,
    /// A read starting after the last line.
    OffsetPastEnd,
    /// A patch that cannot be parsed.
    InvalidPatch,
    /// A hunk that does not match its file.
    PatchMismatch,
    /// A file of a patch that cannot be changed as the patch says.
    PatchTarget,
    /// `undo_edit` with nothing to undo.
    NothingToUndo,
    /// `undo_edit` refused because the file changed since.
    UndoConflict,
    /// `move` onto itself.
    SamePath,
    /// `move` of a directory into itself.
    MoveIntoItself,
    /// `move` onto an existing path.
    DestinationExists,
    /// A multi-step change that failed part-way (the message says what was put back).
    PartialFailure,
    /// Content over a memory bound (also a change past the memory quota or budget).
    TooLarge,
    /// `execute` could not run its command.
    ExecFailed,
    /// A file whose bytes are valid in no encoding found, changed as text.
    Undecodable,
    /// New text the file's encoding cannot hold.
    Unencodable,
    /// A binary file edited as text.
    Binary,
    /// The server failed (a bug); nothing was changed by the failed step.
    Internal,
    /// The person declined the change, cancelled the question or left it unanswered
    /// (`--confirm`); nothing was changed.
    Declined,
    /// `--confirm` names the tool but the client cannot ask the person; nothing was changed.
    ConfirmationUnavailable,
}

impl ErrorKind {
    /// Every kind, in declaration order: the `enum` of `$defs/error` in every output schema.
    pub const ALL: [Self; 37] = [
        Self::InvalidArguments,
        Self::InvalidPath,
        Self::NotFound,
        Self::IsADirectory,
        Self::NotADirectory,
        Self::AlreadyExists,
        Self::VersionMismatch,
        Self::DirectoryNotEmpty,
        Self::ReadOnly,
        Self::MountRoot,
        Self::OutsideMount,
        Self::Unsupported,
        Self::Unavailable,
        Self::Io,
        Self::InvalidPattern,
        Self::EditRefused,
        Self::Cancelled,
        Self::NotRead,
        Self::Stale,
        Self::OffsetPastEnd,
        Self::InvalidPatch,
        Self::PatchMismatch,
        Self::PatchTarget,
        Self::NothingToUndo,
        Self::UndoConflict,
        Self::SamePath,
        Self::MoveIntoItself,
        Self::DestinationExists,
        Self::PartialFailure,
        Self::TooLarge,
        Self::ExecFailed,
        Self::Undecodable,
        Self::Unencodable,
        Self::Binary,
        Self::Internal,
        Self::Declined,
        Self::ConfirmationUnavailable,
    ];

    /// The `kind` text: snake_case, stable.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InvalidArguments => "invalid_arguments",
            Self::InvalidPath => "invalid_path",
            Self::NotFound => "not_found",
            Self::IsADirectory => "is_a_directory",
            Self::NotADirectory => "not_a_directory",
            Self::AlreadyExists => "already_exists",
            Self::VersionMismatch => "version_mismatch",
            Self::DirectoryNotEmpty => "directory_not_empty",
            Self::ReadOnly => "read_only",
            Self::MountRoot => "mount_root",
            Self::OutsideMount => "outside_mount",
            Self::Unsupported => "unsupported",
            Self::Unavailable => "unavailable",
            Self::Io => "io",
            Self::InvalidPattern => "invalid_pattern",
            Self::EditRefused => "edit_refused",
            Self::Cancelled => "cancelled",
            Self::NotRead => "not_read",
            Self::Stale => "stale",
            Self::OffsetPastEnd => "offset_past_end",
            Self::InvalidPatch => "invalid_patch",
            Self::PatchMismatch => "patch_mismatch",
            Self::PatchTarget => "patch_target",
            Self::NothingToUndo => "nothing_to_undo",
            Self::UndoConflict => "undo_conflict",
            Self::SamePath => "same_path",
            Self::MoveIntoItself => "move_into_itself",
            Self::DestinationExists => "destination_exists",
            Self::PartialFailure => "partial_failure",
            Self::TooLarge => "too_large",
            Self::ExecFailed => "exec_failed",
            Self::Undecodable => "undecodable",
            Self::Unencodable => "unencodable",
            Self::Binary => "binary",
            Self::Internal => "internal",
            Self::Declined => "declined",
            Self::ConfirmationUnavailable => "confirmation_unavailable",
        }
    }

    /// The structured content of a failed call: `{"error": {"kind", "message"}}`.
    pub fn structured(self, message: &str) -> Value {
        json!({"error": {"kind": self.as_str(), "message": message}})
    }
}

/// The `$defs/error` branch of every served output schema: the shape of
/// [`ErrorKind::structured`]. `kind` is any string on the wire (its values are
/// [`ErrorKind::ALL`], listed in docs/tools.md): clients check an `isError` answer's structured
/// content against the schema too (the TypeScript SDK does), so the branch must be there, and
/// the 35 names repeated in every tool's schema were a third of `tools/list` (issue 29).
pub fn error_branch() -> Value {
    json!({
        "type": "object",
        "properties": {
            "error": {
                "type": "object",
                "properties": {
                    "kind": {"type": "string", "minLength": 1},
                    "message": {"type": "string", "minLength": 1}
                },
                "required": ["kind", "message"],
                "additionalProperties": false
            }
        },
        "required": ["error"],
        "additionalProperties": false
    })
}

impl ToolError {
    /// The kind of this failure (the `kind` of its structured content).
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::Arguments { .. } => ErrorKind::InvalidArguments,
            Self::Path(_) => ErrorKind::InvalidPath,
            Self::Backend(error) => backend_kind(error),
            Self::Pattern(_) => ErrorKind::InvalidPattern,
            Self::Edit(_) | Self::MultiEdit(_) => ErrorKind::EditRefused,
            Self::Cancelled { .. } | Self::ChangeCancelled { .. } => ErrorKind::Cancelled,
            Self::NotRead { .. } => ErrorKind::NotRead,
            Self::Stale { .. } => ErrorKind::Stale,
            Self::OffsetPastEnd { .. } => ErrorKind::OffsetPastEnd,
            Self::Patch(_) => ErrorKind::InvalidPatch,
            Self::PatchMismatch { .. } => ErrorKind::PatchMismatch,
            Self::PatchTarget { .. } => ErrorKind::PatchTarget,
            Self::NothingToUndo { .. } => ErrorKind::NothingToUndo,
            Self::UndoConflict { .. } => ErrorKind::UndoConflict,
            Self::SamePath { .. } => ErrorKind::SamePath,
            Self::MoveIntoItself { .. } => ErrorKind::MoveIntoItself,
            Self::DestinationExists { .. } => ErrorKind::DestinationExists,
            Self::PartialFailure { .. } => ErrorKind::PartialFailure,
            Self::TooLarge { .. } => ErrorKind::TooLarge,
            Self::Exec(_) => ErrorKind::ExecFailed,
            Self::Undecodable { .. } => ErrorKind::Undecodable,
            Self::Unencodable { .. } => ErrorKind::Unencodable,
            Self::Binary { .. } => ErrorKind::Binary,
            Self::Audit(_) => ErrorKind::Unavailable,
            Self::AuditOff => ErrorKind::Unsupported,
            Self::NoSuchAuditEntry { .. } => ErrorKind::NotFound,
            Self::NoOverlay { .. } => ErrorKind::Unsupported,
            Self::CommitConflicts { .. } => ErrorKind::VersionMismatch,
            Self::Declined { .. } => ErrorKind::Declined,
            Self::ConfirmUnavailable { .. } => ErrorKind::ConfirmationUnavailable,
            // Never an answer: the server turns it into an input-required result.
            Self::InputRequired { .. } => ErrorKind::Internal,
        }
    }

    /// The structured content of this failure; its message is the error's text.
    pub fn structured(&self) -> Value {
        self.kind().structured(&self.to_string())
    }
}

fn backend_kind(error: &backend::Error) -> ErrorKind {
    use backend::Error as E;
    match error {
        E::NotFound { .. } => ErrorKind::NotFound,
        E::IsADirectory { .. } => ErrorKind::IsADirectory,
        E::NotADirectory { .. } => ErrorKind::NotADirectory,
        E::AlreadyExists { .. } => ErrorKind::AlreadyExists,
        E::VersionMismatch { .. } => ErrorKind::VersionMismatch,
        E::DirectoryNotEmpty { .. } => ErrorKind::DirectoryNotEmpty,
        E::ReadOnly { .. } | E::GrantReadOnly { .. } => ErrorKind::ReadOnly,
        E::MountRoot { .. } => ErrorKind::MountRoot,
        E::OutsideMount { .. } => ErrorKind::OutsideMount,
        E::Unsupported { .. } => ErrorKind::Unsupported,
        E::Unavailable { .. } => ErrorKind::Unavailable,
        E::Io { .. } => ErrorKind::Io,
        // Past a memory quota or budget: a memory bound, as for content over --max-edit-bytes.
        E::MemoryFull { .. } => ErrorKind::TooLarge,
        E::InvalidPath(_) => ErrorKind::InvalidPath,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_distinct_snake_case_names() {
        let names: std::collections::BTreeSet<&str> =
            ErrorKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(names.len(), ErrorKind::ALL.len());
        for name in names {
            assert!(
                name.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
                "{name}"
            );
        }
    }
}
