//! What every tool call shares, below the tools: the failure the agent reads ([`ToolError`]),
//! the answer ([`ToolReply`]), the call's context ([`CallContext`]: cancellation, progress, the
//! call's trail and confirmer, its arrival turn), and the search helpers every searching tool uses.

use std::sync::Arc;

use serde_json::Value;
use thiserror::Error;

use crate::ground::path::{PathError, VirtualPath};
use crate::ground::search::PatternError;
use crate::ground::text::patch::{HunkMismatch, PatchError};
use crate::ground::text::replace::{EditError, MultiEditError};
use crate::state::arrival::Turn;
use crate::state::session::Session;
use crate::storage::backend;

/// What running a tool gives: its answer, or the error the agent reads.
pub type ToolResult = Result<ToolReply, ToolError>;

/// A failed tool call: the text the agent reads (`isError: true`). Every text starts with
/// `Error:` (or `Invalid arguments`) and says what to do next.
#[derive(Debug, Error)]
pub enum ToolError {
    /// Arguments that passed the schema but not the typed parse (should not happen).
    #[error("Invalid arguments for {tool}: {reason}")]
    Arguments {
        /// The tool.
        tool: String,
        /// The parser's complaint.
        reason: String,
    },
    /// A path refused by CONTRACT §1.
    #[error("{0}")]
    Path(#[from] PathError),
    /// A backend failure.
    #[error("{0}")]
    Backend(#[from] backend::Error),
    /// A bad glob or regex.
    #[error("{0}")]
    Pattern(#[from] PatternError),
    /// An edit_file refusal.
    #[error("{0}")]
    Edit(#[from] EditError),
    /// A multi_edit refusal.
    #[error("{0}")]
    MultiEdit(#[from] MultiEditError),
    /// The request was cancelled while the tool searched; nothing was changed.
    #[error(
        "Error: {tool} was cancelled after looking at {files} files; nothing was changed. Run it again, narrower (a path or glob), if you still need it"
    )]
    Cancelled {
        /// The tool.
        tool: &'static str,
        /// Files looked at before it stopped.
        files: u64,
    },
    /// A multi-file change cancelled by the client (see `steps`): it stopped before its next
    /// step and took back what it had done; `state` says so (or what could not be).
    #[error("Error: {tool} was cancelled. {state}")]
    ChangeCancelled {
        /// The tool.
        tool: &'static str,
        /// What it left, in sentences: "Nothing was changed."
        state: String,
    },
    /// The person declined the change (`--confirm`), cancelled the question, or did not answer
    /// in time; nothing was changed.
    #[error(
        "Error: {tool} was not run: {how} ({question}). Nothing was changed. Do not retry it on your own: ask the person what they want done"
    )]
    Declined {
        /// The tool.
        tool: &'static str,
        /// What came of the question.
        how: String,
        /// The question asked.
        question: String,
    },
    /// `--confirm` names the tool but the client cannot ask the person.
    #[error(
        "Error: {tool} needs the confirmation of a person (the server runs with --confirm), but {why}. Nothing was changed. Use a client that supports MCP elicitation, or ask the operator to start the server without {tool} in --confirm"
    )]
    ConfirmUnavailable {
        /// The tool.
        tool: &'static str,
        /// Why nobody can be asked.
        why: String,
    },
    /// MCP 2026-07-28: the call waits for the person's answer, which the client gets and
    /// sends on its retry; the server answers with an input-required result, never this text.
    #[error("Error: {tool} waits for the person's answer to: {question}")]
    InputRequired {
        /// The tool.
        tool: &'static str,
        /// The question.
        question: String,
        /// The state the retry must echo.
        request_state: String,
    },
    /// `changes`/`commit`/`discard` on a path no overlay mount reaches.
    #[error(
        "Error: No overlay mount at or under {path}: changes, commit and discard review the layer of a disk mount given with ,overlay (e.g. --mount /=disk:.,overlay). Give a path inside such a mount"
    )]
    NoOverlay {
        /// The path.
        path: VirtualPath,
    },
    /// `commit` refused: base files changed since the layer took them.
    #[error(
        "Error: commit refused: {count} base file(s) under {path} changed since this workspace's layer took them, so nothing was written:\n{list}\nTo keep the other version, run discard on that file and make your change again; to see yours, run changes on it. Then commit again"
    )]
    CommitConflicts {
        /// The committed path.
        path: VirtualPath,
        /// How many conflicts.
        count: usize,
        /// One line per conflicting file: its path and what happened to it.
        list: String,
    },
    /// Changing a file that this session has not read.
    #[error("Error: File has not been read yet: {path}. Read it with read_file first, then retry")]
    NotRead {
        /// The file.
        path: VirtualPath,
    },
    /// Changing a file that changed since this session read it.
    #[error(
        "Error: File has been modified since it was read: {path}. Read it again with read_file, then retry"
    )]
    Stale {
        /// The file.
        path: VirtualPath,
    },
    /// A read starting after the last line.
    #[error(
        "Error: Line offset {offset} exceeds file length ({lines} lines). Use an offset below {lines}"
    )]
    OffsetPastEnd {
        /// The offset asked for.
        offset: usize,
        /// The file's line count.
        lines: usize,
    },
    /// A patch that cannot be read.
    #[error("{0}")]
    Patch(#[from] PatchError),
    /// A hunk of a patch that does not match its file.
    #[error(
        "Error: apply_patch: {path}: {mismatch}\nNothing was changed. Read the file again and make the patch against its current content"
    )]
    PatchMismatch {
        /// The file.
        path: VirtualPath,
        /// Which hunk, where, and what the file has there.
        mismatch: HunkMismatch,
    },
    /// A file of a patch that cannot be changed as the patch says.
    #[error("Error: apply_patch: {path}: {reason}. Nothing was changed")]
    PatchTarget {
        /// The file.
        path: VirtualPath,
        /// Why, and what to do.
        reason: String,
    },
    /// `undo_edit` with no step left.
    #[error(
        "Error: Nothing to undo for {path}: this session has made no change to it that can still be undone (at most {max} steps per file are kept). Use read_file to see its content"
    )]
    NothingToUndo {
        /// The file.
        path: VirtualPath,
        /// Steps kept per file.
        max: usize,
    },
    /// `undo_edit` refused: someone else changed the file since this session's change.
    #[error(
        "Error: Cannot undo the last change to {path}: {reason}. The file was left as it is; read it with read_file and change it with edit_file or write_file instead"
    )]
    UndoConflict {
        /// The file.
        path: VirtualPath,
        /// What happened to it since.
        reason: String,
    },
    /// `move` onto itself.
    #[error(
        "Error: Source and destination are the same path: {path}. Give a different destination"
    )]
    SamePath {
        /// The path.
        path: VirtualPath,
    },
    /// `move` of a directory into itself.
    #[error(
        "Error: Cannot move {source_path} into itself ({destination}). Choose a destination outside it"
    )]
    MoveIntoItself {
        /// The directory moved.
        source_path: VirtualPath,
        /// The destination under it.
        destination: VirtualPath,
    },
    /// `move` onto an existing file without `overwrite`, or onto an existing path a directory
    /// cannot replace.
    #[error("Error: Destination already exists: {path}. {hint}")]
    DestinationExists {
        /// The destination.
        path: VirtualPath,
        /// What to do.
        hint: String,
    },
    /// A multi-step change that failed part-way; the message says what was put back.
    #[error("{message}")]
    PartialFailure {
        /// Starts with `Error:`; names the failed step and the state left behind.
        message: String,
    },
    /// Content over one of the memory bounds (`crate::ground::limits`): nothing was read or changed.
    #[error(
        "Error: {subject} is {size} bytes, over the limit of {limit} bytes (--{flag}). {advice}"
    )]
    TooLarge {
        /// What is too large (`"/big.log"`, `"content"`).
        subject: String,
        /// Its size in bytes.
        size: u64,
        /// The bound.
        limit: u64,
        /// The flag that sets the bound, without the dashes.
        flag: &'static str,
        /// What to do instead.
        advice: String,
    },
    /// `execute` could not run its command.
    #[error("{0}")]
    Exec(#[from] crate::storage::exec::ExecError),
    /// Changing a text file whose bytes are valid in no encoding found: its text cannot be
    /// written back without losing bytes.
    #[error(
        "Error: {path} cannot be changed as text: {reason}, so writing it back would replace bytes with U+FFFD. Nothing was written. Ask the user to fix or convert the file, or delete it and create it anew"
    )]
    Undecodable {
        /// The file.
        path: VirtualPath,
        /// Which encodings were tried.
        reason: String,
    },
    /// New text that the file's encoding cannot hold.
    #[error(
        "Error: Cannot write {path} in its own encoding: {error}. Nothing was written. Use only characters {encoding} can hold (or an escape the file's format understands), or ask the user to convert the file to UTF-8",
        encoding = error.encoding
    )]
    Unencodable {
        /// The file.
        path: VirtualPath,
        /// The encoding and the first character it cannot hold.
        error: crate::ground::text::encoding::Unencodable,
    },
    /// The audit log could not be read.
    #[error("Error: cannot read the {0}")]
    Audit(#[from] crate::storage::audit::AuditError),
    /// `history` while the audit log is off.
    #[error(
        "Error: the audit log is off on this server, so there is no history. Start mountfs with --audit sqlite:FILE or --audit postgres:URL to log changes"
    )]
    AuditOff,
    /// `history {id}` of an entry that is not in the log.
    #[error(
        "Error: no audit log entry #{id}: it was never written, or pruned (--audit-keep). Call history without id to list the entries"
    )]
    NoSuchAuditEntry {
        /// The id asked for.
        id: i64,
    },
    /// Editing a binary file as text.
    #[error(
        "Error: {path} is a binary file; edit_file and multi_edit change text files only. Use write_file to replace it whole"
    )]
    Binary {
        /// The file.
        path: VirtualPath,
    },
}

/// A successful answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolReply {
    /// The text the agent reads.
    pub text: String,
    /// Structured content: every answer has some, satisfying the tool's output schema
    /// (`schemas/<tool>.output.json`, checked by `tests/e2e/output_schemas.rs`). A final answer
    /// without it is a bug: the server logs it, and clients that validate refuse the answer.
    pub structured: Option<Value>,
    /// An image, base64-encoded, with its MIME type.
    pub image: Option<(String, String)>,
    /// The file the answer is about, as the tool saw it: the answer links to it as a resource
    /// (see [`ToolReply::linking`]); `None`: no link.
    pub file: Option<crate::storage::backend::Entry>,
}

impl ToolReply {
    /// An answer with its text only; the tool then sets [`ToolReply::structured`].
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            structured: None,
            image: None,
            file: None,
        }
    }

    /// This answer linking to the file at `path` as it is now (its size and time after the
    /// change), unless the tool already set [`ToolReply::file`]: the answers of `write_file`,
    /// `edit_file` and `multi_edit` link to the file they changed.
    pub async fn linking(mut self, session: &Session, path: &VirtualPath) -> Self {
        if self.file.is_none() {
            self.file = session.backend().stat(path).await.ok().flatten();
        }
        self
    }
}

/// What a call knows of its request beyond the arguments: the client's cancellation, its
/// progress token and the request id. Tests and in-process callers use the default (never
/// cancelled, no progress).
#[derive(Debug, Clone, Default)]
pub struct CallContext {
    /// Cancelled on `notifications/cancelled` for the request, or when the session ends.
    pub cancel: tokio_util::sync::CancellationToken,
    /// Where progress notifications go, when the request carried a progress token.
    pub progress: Option<ProgressReporter>,
    /// The JSON-RPC request id, as text (names saved large results).
    pub request_id: Option<String>,
    /// The call's place in the arrival order of the file it names, issued by the transport as the
    /// request was read; redeemed when the tool locks that file ([`Session::lock_file`]).
    pub turn: Option<Arc<Turn>>,
    /// Who made the call, for the audit log.
    pub origin: crate::storage::audit::Origin,
    /// Where the call reports what it changed (see [`crate::state::call_trail`]); `None`: nobody reads
    /// it, nothing is noted.
    pub trail: Option<Arc<crate::state::call_trail::CallTrail>>,
    /// Who asks the person before the call changes anything, when its tool is named by
    /// `--confirm` (see [`super::confirm`]); `None` otherwise.
    pub confirm: Option<super::confirm::Confirmer>,
}

pub use crate::ground::progress::ProgressReporter;

/// How often a search reports progress, when its call carries a progress token.
pub const SEARCH_PROGRESS_INTERVAL: std::time::Duration = std::time::Duration::from_millis(250);

/// The line saying that `more` directories than the answer names could not be read, starting
/// with a newline; empty when there are none.
pub fn unread_more_note(more: usize) -> String {
    match more {
        0 => String::new(),
        more => {
            format!("\n[{more} more directories could not be read; their files were not searched]")
        }
    }
}

/// The control of a search run for a call: cancelled with the call.
pub fn search_control(context: &CallContext) -> crate::storage::backend::SearchControl {
    crate::storage::backend::SearchControl::cancelled_by(context.cancel.clone())
}

/// Runs `search` (which checks `control` between files) for `tool`: reports the files looked at
/// and matched so far every [`SEARCH_PROGRESS_INTERVAL`] when the call has a progress token, and
/// turns a cancelled call into [`ToolError::Cancelled`] (the partial result is dropped).
pub async fn watched_search<T>(
    tool: &'static str,
    context: &CallContext,
    control: &crate::storage::backend::SearchControl,
    search: impl std::future::Future<Output = Result<T, ToolError>>,
) -> Result<T, ToolError> {
    let outcome = match &context.progress {
        None => search.await,
        Some(progress) => {
            tokio::pin!(search);
            let mut tick = tokio::time::interval(SEARCH_PROGRESS_INTERVAL);
            tick.tick().await;
            loop {
                tokio::select! {
                    outcome = &mut search => break outcome,
                    _ = tick.tick() => {
                        let (files, matched) = control.counts();
                        progress
                            .report(
                                files as f64,
                                format!("{files} files searched, {matched} with matches"),
                            )
                            .await;
                    }
                }
            }
        }
    };
    release_freed_memory_soon();
    if control.stopped() {
        return Err(ToolError::Cancelled {
            tool,
            files: control.counts().0,
        });
    }
    outcome
}

/// After a search: a second later (once for all the searches that end meanwhile), gives the
/// memory glibc's allocator holds free back to the system (`malloc_trim`), on a blocking
/// thread. A whole-tree search frees megabytes of buffers that the allocator would otherwise
/// keep for the life of the process (issue 15: 20.2 -> 18.0 MB at rest after 48 whole-tree
/// greps). Also after a call or a session's end that freed much of a workspace's memory
/// (issue 34: deleted memory files, a discarded overlay). Elsewhere than Linux with glibc, or
/// outside a Tokio runtime, it does nothing.
pub fn release_freed_memory_soon() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        if tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        use std::sync::atomic::{AtomicBool, Ordering};
        static PENDING: AtomicBool = AtomicBool::new(false);
        if PENDING.swap(true, Ordering::AcqRel) {
            return;
        }
        tokio::spawn(async {
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            PENDING.store(false, Ordering::Release);
            // SAFETY: malloc_trim only walks the allocator's own free lists, under its locks.
            let _ = tokio::task::spawn_blocking(|| unsafe { libc::malloc_trim(0) }).await;
        });
    }
}

/// `"1 line"`, `"2 lines"`: a count with its noun, for answers.
pub fn counted(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}
