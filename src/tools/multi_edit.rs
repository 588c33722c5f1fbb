//! `multi_edit`: several replacements applied in order to a working copy of one file, written
//! once, all or nothing (CONTRACT §4). Conflict detection and the per-edit errors
//! (`edit 2 of 3: …`) are `text::replace::apply_edits`.

use schemars::JsonSchema;
use serde::Deserialize;

use super::{CallContext, ToolResult, counted};
use crate::change::editing::{edit_limit_bytes, edit_text};
use crate::ground::path::VirtualPath;
use crate::ground::text::replace::{EditSpec, apply_edits_matching};
use crate::state::session::Session;

/// One edit of a `multi_edit` call.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Edit {
    /// The exact text to replace.
    pub old_string: String,
    /// The replacement.
    pub new_string: String,
    /// Replace every occurrence.
    #[serde(default)]
    pub replace_all: bool,
}

/// Arguments of `multi_edit` (schemas/multi_edit.json).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// The file.
    pub file_path: String,
    /// The edits, in order.
    pub edits: Vec<Edit>,
}

/// Runs the tool.
pub async fn run(args: Args, session: &Session, context: &CallContext) -> ToolResult {
    let path = VirtualPath::parse(&args.file_path)?;
    crate::change::confirm::ask_first(context, "multi_edit", false, || {
        format!(
            "Edit the file {path} ({})?",
            super::counted(args.edits.len(), "edit")
        )
    })
    .await?;
    let _guard = session.lock_file(&path, context.turn.as_deref()).await;
    let specs: Vec<EditSpec<'_>> = args
        .edits
        .iter()
        .map(|e| EditSpec {
            old_string: &e.old_string,
            new_string: &e.new_string,
            replace_all: e.replace_all,
            expected_replacements: None,
        })
        .collect();
    let limit = edit_limit_bytes(session);
    Ok(edit_text(
        session,
        &path,
        &specs,
        |text, matching| Ok(apply_edits_matching(text, &specs, limit, matching)?),
        |replaced| {
            format!(
                "Edited {path}: applied {} ({} replaced).",
                counted(specs.len(), "edit"),
                counted(replaced.occurrences, "occurrence")
            )
        },
    )
    .await
    .map(|reply| reply.linking(session, &path))?
    .await)
}
