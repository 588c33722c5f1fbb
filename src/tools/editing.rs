//! The one edit pipeline every changing tool uses, on every backend:
//! lock the file for this session → read it (with its version) → check the read ledger
//! (read-before-edit, staleness) → pure text change (`text/`) → write conditional on the version
//! read → record the new version and an undo step → describe the change.
//!
//! The conditional write is what makes this safe against other sessions and other servers:
//! if anyone changed the file between our read and our write, the backend refuses and the agent
//! is told to read again. Nothing is written on any failure.

use serde_json::json;

use super::{ToolError, ToolReply};
use crate::backend::{self, Backend, FileBytes, Version, WriteMode};
use crate::content;
use crate::path::VirtualPath;
use crate::session::{Session, UndoStep};
use crate::text::{diff, line_endings, truncate};

/// Lines of context shown around each change in an edit answer (seed 003's snippet).
pub const SNIPPET_CONTEXT_LINES: usize = 4;
/// Largest snippet shown in an edit answer; beyond it, a summary.
pub const SNIPPET_MAX_CHARS: usize = 4_000;

/// A text file loaded for editing: its content with LF line endings and no BOM, and what is
/// needed to write it back in its own format.
#[derive(Debug)]
pub struct Loaded {
    /// The raw file.
    pub file: FileBytes,
    /// The text as the agent saw it in read_file (LF, no BOM).
    pub text: String,
    /// The file's own format, restored on write.
    pub format: line_endings::TextFormat,
}

/// Reads `path` for a change and checks this session may change it: it must have been read in
/// this session and be unchanged since. Call with the session's file lock held.
pub async fn load_checked(session: &Session, path: &VirtualPath) -> Result<FileBytes, ToolError> {
    let file = session.backend.read(path).await?;
    match session.ledger.seen(path) {
        None => Err(ToolError::NotRead { path: path.clone() }),
        Some(seen) if seen != file.version => Err(ToolError::Stale { path: path.clone() }),
        Some(_) => Ok(file),
    }
}

/// [`load_checked`] for a text edit: refuses binary files and decodes the text.
pub async fn load_text(session: &Session, path: &VirtualPath) -> Result<Loaded, ToolError> {
    let file = load_checked(session, path).await?;
    if content::looks_binary(&file.content) {
        return Err(ToolError::Binary { path: path.clone() });
    }
    let raw = String::from_utf8_lossy(&file.content).into_owned();
    let (text, format) = line_endings::to_lf(&raw);
    Ok(Loaded { file, text, format })
}

/// Writes new content over a file read with [`load_checked`], conditional on the version read,
/// and records the result in the ledger and undo history.
pub async fn commit(
    session: &Session,
    path: &VirtualPath,
    before: Option<&FileBytes>,
    new_bytes: &[u8],
) -> Result<Version, ToolError> {
    let mode = match before {
        Some(file) => WriteMode::IfVersion(file.version.clone()),
        None => WriteMode::CreateOnly,
    };
    let outcome = session
        .backend
        .write(path, new_bytes, mode)
        .await
        .map_err(|e| match e {
            backend::Error::VersionMismatch { path } => ToolError::Stale { path },
            other => ToolError::Backend(other),
        })?;
    session.ledger.record(path, &outcome.version);
    session.undo.push(
        path,
        UndoStep {
            before: before.map(|f| f.content.clone()),
            after: Some(outcome.version.clone()),
        },
    );
    Ok(outcome.version)
}

/// The answer of an edit-type tool: `headline`, then numbered lines around each change (or a
/// summary when that would flood the agent); the unified diff goes in the structured result.
pub fn describe_change(
    headline: &str,
    path: &VirtualPath,
    old_text: &str,
    new_text: &str,
    occurrences: Option<usize>,
    version: &Version,
) -> ToolReply {
    let ranges = diff::changed_line_ranges(old_text, new_text);
    let stats = diff::diff_stats(old_text, new_text);
    let mut text = headline.to_owned();
    if !ranges.is_empty() {
        let snippet =
            diff::change_snippet(new_text, &ranges, SNIPPET_CONTEXT_LINES, SNIPPET_MAX_CHARS);
        text.push_str(&format!(
            "\n{} line(s) added, {} removed. The changed region(s) now read:\n{snippet}",
            stats.added, stats.removed
        ));
    }
    let mut unified = diff::unified_diff(path.as_str(), old_text, new_text);
    let mut diff_truncated = false;
    if unified.chars().count() > truncate::RESULT_CHAR_LIMIT {
        unified = truncate::cap_result(unified);
        diff_truncated = true;
    }
    let mut structured = json!({
        "path": path.as_str(),
        "version": version.as_str(),
        "lines_added": stats.added,
        "lines_removed": stats.removed,
        "diff": unified,
        "diff_truncated": diff_truncated,
    });
    if let (Some(n), Some(map)) = (occurrences, structured.as_object_mut()) {
        map.insert("occurrences".into(), json!(n));
    }
    ToolReply {
        text: truncate::cap_result(text),
        structured: Some(structured),
        image: None,
    }
}
