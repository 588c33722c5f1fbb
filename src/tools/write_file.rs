//! `write_file`: create a file, or replace a file this session has read and that is unchanged
//! since (CONTRACT §4). Parent directories are created by the backends. Over an existing text
//! file the new content takes the file's line endings and BOM, so a CRLF file stays CRLF.

use schemars::JsonSchema;
use serde::Deserialize;

use super::{CallContext, ToolReply, ToolResult, counted};
use crate::change::confirm::ask_first;
use crate::change::editing::{
    check_edit_size, commit, commit_large, decode_for_edit, encode_for_file, load_checked_at_most,
    refuse_new_control_names,
};
use crate::change::report::describe_change;
use crate::ground::content;
use crate::ground::path::VirtualPath;
use crate::ground::text::line_endings::{self, TextFormat};
use crate::ground::text::numbered::split_lines;
use crate::state::session::Session;
use crate::storage::backend::{self, BoundedRead, Version};

/// Arguments of `write_file` (schemas/write_file.json).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// The file.
    pub file_path: String,
    /// The whole new content.
    pub content: String,
}

/// Runs the tool; the answer links to the file written.
pub async fn run(args: Args, session: &Session, context: &CallContext) -> ToolResult {
    let path = VirtualPath::parse(&args.file_path)?;
    let reply = write(path.clone(), args, session, context).await?;
    Ok(reply.linking(session, &path).await)
}

async fn write(
    path: VirtualPath,
    args: Args,
    session: &Session,
    context: &CallContext,
) -> ToolResult {
    check_edit_size(session, "content", args.content.len())?;
    let _guard = session.lock_file(&path, context.turn.as_deref()).await;
    let existing = match session.backend().stat(&path).await? {
        Some(entry) if entry.is_dir() => {
            return Err(backend::Error::IsADirectory { path }.into());
        }
        Some(_) => {
            // The old content is read only when it can be kept for undo; a bigger file is
            // replaced on its version alone (and the answer says the change cannot be undone).
            let bound = session.write_options.limits.max_undo_snapshot_bytes();
            let file = load_checked_at_most(session, &path, bound).await?;
            let size = match &file {
                BoundedRead::Whole(file) => file.content.len() as u64,
                BoundedRead::TooLarge { size, .. } => *size,
            };
            ask_first(context, "write_file", true, || {
                format!(
                    "Overwrite the existing file {path} ({size} bytes) with new content ({})?",
                    counted(args.content.len(), "byte")
                )
            })
            .await?;
            match file {
                BoundedRead::Whole(file) => Some(file),
                BoundedRead::TooLarge { size, version } => {
                    return overwrite_large(session, &path, &args.content, size, version).await;
                }
            }
        }
        None => {
            refuse_new_control_names(session, &path).await?;
            ask_first(context, "write_file", false, || {
                format!(
                    "Create the file {path} ({})?",
                    counted(args.content.len(), "byte")
                )
            })
            .await?;
            None
        }
    };
    // Over a text file the new content takes its line endings, BOM and encoding; a file valid
    // in no encoding is refused rather than replaced by text the agent saw with U+FFFD.
    let old_text = match existing
        .as_ref()
        .filter(|f| !content::looks_binary(&f.content))
    {
        Some(file) => {
            let (text, format, encoding) = decode_for_edit(&path, &file.content)?;
            Some((text, format, encoding))
        }
        None => None,
    };
    let (format, file_encoding) = old_text
        .as_ref()
        .map_or_else(Default::default, |(_, f, e)| (*f, *e));
    let mut new_lf = args.content.clone();
    if session.write_options.ensure_final_newline {
        new_lf = line_endings::ensure_final_newline(&new_lf, TextFormat::default());
    }
    let new_bytes = encode_for_file(&path, &new_lf, format, file_encoding)?;
    let replaced = existing.is_some();
    let version = commit(session, &path, existing, &new_bytes).await?;
    let lines = split_lines(&args.content).len();
    let bytes = new_bytes.len();
    match (replaced, old_text) {
        (false, _) => Ok(super::ToolReply {
            text: format!(
                "Created {path} ({}, {}).",
                counted(lines, "line"),
                counted(bytes, "byte")
            ),
            structured: Some(serde_json::json!({
                "path": path.as_str(),
                "version": version.as_str(),
                "created": true,
                "bytes": bytes,
            })),
            image: None,
            file: None,
        }),
        (true, Some((old_lf, _, _))) => {
            let (new_lf, _) = line_endings::to_lf(&line_endings::restore(&new_lf, format));
            Ok(describe_change(
                &format!(
                    "Updated {path} ({}, {}).",
                    counted(lines, "line"),
                    counted(bytes, "byte")
                ),
                &path,
                &old_lf,
                &new_lf,
                None,
                &version,
            ))
        }
        (true, None) => Ok(ToolReply {
            text: format!(
                "Replaced binary file {path} with text ({}, {}).",
                counted(lines, "line"),
                counted(bytes, "byte")
            ),
            structured: Some(serde_json::json!({
                "path": path.as_str(),
                "version": version.as_str(),
                "created": false,
                "bytes": bytes,
            })),
            image: None,
            file: None,
        }),
    }
}

/// Replaces a file too large to read for undo: conditional on the version checked, with the
/// file's line endings unknown (the content is written as given), and no diff.
async fn overwrite_large(
    session: &Session,
    path: &VirtualPath,
    content: &str,
    old_size: u64,
    version: Version,
) -> ToolResult {
    let mut new_text = content.to_owned();
    if session.write_options.ensure_final_newline {
        new_text = line_endings::ensure_final_newline(&new_text, TextFormat::default());
    }
    let outcome = commit_large(session, path, version, new_text.as_bytes()).await?;
    let lines = split_lines(content).len();
    let bytes = new_text.len();
    let note = if outcome.undoable {
        "undo_edit can restore the previous content."
    } else {
        "The previous content was too large to keep for undo_edit: this change cannot be undone."
    };
    Ok(ToolReply {
        text: format!(
            "Replaced {path} ({old_size} bytes) with {}, {}. {note}",
            counted(lines, "line"),
            counted(bytes, "byte")
        ),
        structured: Some(serde_json::json!({
            "path": path.as_str(),
            "version": outcome.version.as_str(),
            "created": false,
            "bytes": bytes,
            "undoable": outcome.undoable,
        })),
        image: None,
        file: None,
    })
}
