//! `ls`: the entries of one directory, sorted by path; directories end in `/`, files show their
//! size, mount points appear as directories (CONTRACT §4).

use schemars::JsonSchema;
use serde::Deserialize;

use super::{CallContext, ToolError, ToolReply, counted};
use crate::backend::Backend;
use crate::path::VirtualPath;
use crate::session::Session;

fn default_path() -> String {
    "/".to_owned()
}

/// Arguments of `ls` (schemas/ls.json).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// The directory.
    #[serde(default = "default_path")]
    pub path: String,
}

/// Runs the tool.
/// A listing too long for one answer is saved to `/scratch/large_tool_results/` (ls cannot
/// page by itself), or cut with the usual notice without a `/scratch/` mount.
pub async fn run(
    args: Args,
    session: &Session,
    context: &CallContext,
) -> Result<ToolReply, ToolError> {
    let dir = VirtualPath::parse(&args.path)?;
    let listing = listing(&dir, session).await?;
    Ok(ToolReply::text(
        super::large_result::fit(session, context, "ls", listing).await,
    ))
}

/// The formatted listing of `dir` (shared with read_file on a directory).
pub async fn listing(dir: &VirtualPath, session: &Session) -> Result<String, ToolError> {
    let mut entries = session.backend().ls(dir).await?;
    if entries.is_empty() {
        return Ok(format!("Directory {dir} is empty."));
    }
    entries.sort_by(|a, b| a.path.cmp(&b.path));
    let rows: Vec<String> = entries
        .iter()
        .map(|e| {
            if e.is_dir() {
                format!("{}/", e.path)
            } else {
                format!("{} ({})", e.path, counted(e.size as usize, "byte"))
            }
        })
        .collect();
    Ok(rows.join("\n"))
}
