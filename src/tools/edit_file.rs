//! `edit_file`: one exact, literal replacement (or all of them) in a text file (CONTRACT §4).
//! The replacement rules and their error texts are `text::replace`; the read/check/write cycle is
//! [`crate::change::editing`].

use schemars::JsonSchema;
use serde::Deserialize;

use super::{CallContext, ToolResult, counted};
use crate::change::editing::{edit_limit_bytes, edit_text};
use crate::ground::path::VirtualPath;
use crate::ground::text::replace::{EditSpec, apply_edit_matching};
use crate::state::session::Session;

/// Arguments of `edit_file` (schemas/edit_file.json).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// The file.
    pub file_path: String,
    /// The exact text to replace.
    pub old_string: String,
    /// The replacement.
    pub new_string: String,
    /// Replace every occurrence.
    #[serde(default)]
    pub replace_all: bool,
    /// Required occurrence count.
    #[serde(default)]
    pub expected_replacements: Option<usize>,
}

/// Runs the tool.
pub async fn run(args: Args, session: &Session, context: &CallContext) -> ToolResult {
    let path = VirtualPath::parse(&args.file_path)?;
    crate::change::confirm::ask_first(context, "edit_file", false, || {
        format!("Edit the file {path}?")
    })
    .await?;
    let _guard = session.lock_file(&path, context.turn.as_deref()).await;
    let spec = EditSpec {
        old_string: &args.old_string,
        new_string: &args.new_string,
        replace_all: args.replace_all,
        expected_replacements: args.expected_replacements,
    };
    let limit = edit_limit_bytes(session);
    Ok(edit_text(
        session,
        &path,
        std::slice::from_ref(&spec),
        |text, matching| Ok(apply_edit_matching(text, &spec, limit, matching)?),
        |replaced| {
            format!(
                "Edited {path}: replaced {}.",
                counted(replaced.occurrences, "occurrence")
            )
        },
    )
    .await
    .map(|reply| reply.linking(session, &path))?
    .await)
}
