//! `discard`: drops an overlay layer's changes under a path, so the view shows the base
//! directory there again (issue 14). The base is not touched.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::changes::{changing_scope, layer_question, listed_changes};
use super::{CallContext, ToolReply, ToolResult};
use crate::change::confirm::ask_first;
use crate::state::session::Session;

/// Arguments of `discard` (schemas/discard.json).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// The directory (or file) whose changes to drop.
    #[serde(default = "super::changes::root")]
    pub path: String,
}

/// Runs the tool.
pub async fn run(args: Args, session: &Session, context: &CallContext) -> ToolResult {
    let (path, reached) = changing_scope(session, &args.path)?;
    if context.confirm.is_some() {
        let question = layer_question("Discard (lose for good)", &path, &reached).await?;
        ask_first(context, "discard", true, || question).await?;
    }
    let mut dropped = Vec::new();
    for reached in reached {
        let changes = reached
            .overlay
            .discard(&reached.inner)
            .await
            .map_err(|e| e.map_path(|p| p.under(&reached.prefix)))?;
        for change in changes {
            let outer = reached.outer(&change.path);
            // What this session read of the layer's version no longer holds.
            session.ledger.forget(&outer);
            dropped.push((outer, change.kind));
        }
    }
    let (files, text) = listed_changes(
        &mut dropped,
        format!("Nothing to discard under {path}: the layer holds no changes there."),
        |count, s| {
            format!(
                "Discarded {count} change{s} under {path}; the base directory's files show again (read them before editing):\n"
            )
        },
    );
    Ok(ToolReply {
        structured: Some(json!({ "files": files, "total": dropped.len() })),
        ..ToolReply::text(truncate(text))
    })
}

fn truncate(text: String) -> String {
    crate::ground::text::truncate::cap_result(text)
}
