//! `write_file`: create a file, or replace a file this session has read and that is unchanged
//! since (CONTRACT §4). Parent directories are created by the backends. Over an existing text
//! file the new content takes the file's line endings and BOM, so a CRLF file stays CRLF.

use schemars::JsonSchema;
use serde::Deserialize;

use super::editing::{commit, describe_change, load_checked};
use super::{ToolError, ToolReply, counted};
use crate::backend::{self, Backend};
use crate::content;
use crate::path::VirtualPath;
use crate::session::Session;
use crate::text::line_endings::{self, TextFormat};
use crate::text::numbered::split_lines;

/// Arguments of `write_file` (schemas/write_file.json).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// The file.
    pub file_path: String,
    /// The whole new content.
    pub content: String,
}

/// Runs the tool.
pub async fn run(args: Args, session: &Session) -> Result<ToolReply, ToolError> {
    let path = VirtualPath::parse(&args.file_path)?;
    let _guard = session.lock_file(&path).await;
    let existing = match session.backend.stat(&path).await? {
        Some(entry) if entry.is_dir() => {
            return Err(backend::Error::IsADirectory { path }.into());
        }
        Some(_) => Some(load_checked(session, &path).await?),
        None => None,
    };
    let old_text = existing
        .as_ref()
        .filter(|f| !content::looks_binary(&f.content))
        .map(|f| line_endings::to_lf(&String::from_utf8_lossy(&f.content)));
    let format = old_text
        .as_ref()
        .map_or_else(TextFormat::default, |(_, f)| *f);
    let mut new_text = line_endings::restore(&args.content, format);
    if session.write_options.ensure_final_newline {
        new_text = line_endings::ensure_final_newline(&new_text, format);
    }
    let version = commit(session, &path, existing.as_ref(), new_text.as_bytes()).await?;
    let lines = split_lines(&args.content).len();
    let bytes = new_text.len();
    match (existing, old_text) {
        (None, _) => Ok(super::ToolReply {
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
        }),
        (Some(_), Some((old_lf, _))) => {
            let (new_lf, _) = line_endings::to_lf(&new_text);
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
        (Some(_), None) => Ok(ToolReply::text(format!(
            "Replaced binary file {path} with text ({}, {}).",
            counted(lines, "line"),
            counted(bytes, "byte")
        ))),
    }
}
