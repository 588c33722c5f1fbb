//! `ls`: the entries of one directory, sorted by path; directories end in `/`, files show their
//! size, mount points appear as directories (CONTRACT §4).

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::file_info::format_time;
use super::{CallContext, ToolError, ToolReply, counted};
use crate::backend::Entry;
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

/// Most entries the structured answer lists (the text lists them all, or saves them to
/// `/scratch/`); `total` and `truncated` say when there are more.
pub const MAX_STRUCTURED_ENTRIES: usize = 1000;

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
    let fitted = super::large_result::fit_noting(session, context, "ls", listing.text).await;
    let mut structured = listing.structured;
    if let Some(map) = structured.as_object_mut() {
        map.insert(
            "saved_to".into(),
            json!(fitted.saved_to.as_ref().map(VirtualPath::as_str)),
        );
    }
    Ok(ToolReply {
        text: fitted.text,
        structured: Some(structured),
        image: None,
        file: None,
    })
}

/// A directory's listing: the text the agent reads and its structured form
/// (`{path, entries, total, truncated}`, see `schemas/ls.output.json`).
#[derive(Debug)]
pub struct Listing {
    /// One row per entry, or a note that the directory is empty.
    pub text: String,
    /// The entries as objects, at most [`MAX_STRUCTURED_ENTRIES`].
    pub structured: Value,
}

/// The listing of `dir` (shared with read_file on a directory).
pub async fn listing(dir: &VirtualPath, session: &Session) -> Result<Listing, ToolError> {
    let mut entries = session.backend().ls(dir).await?;
    entries.sort_by(|a, b| a.path.cmp(&b.path));
    let structured = json!({
        "path": dir.as_str(),
        "entries": entries
            .iter()
            .take(MAX_STRUCTURED_ENTRIES)
            .map(entry_json)
            .collect::<Vec<_>>(),
        "total": entries.len(),
        "truncated": entries.len() > MAX_STRUCTURED_ENTRIES,
    });
    if entries.is_empty() {
        return Ok(Listing {
            text: format!("Directory {dir} is empty."),
            structured,
        });
    }
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
    Ok(Listing {
        text: rows.join("\n"),
        structured,
    })
}

/// One entry of a structured listing: `{name, path, kind, size, modified}` (`size` is null for
/// directories, `modified` when unknown).
fn entry_json(entry: &Entry) -> Value {
    json!({
        "name": entry.path.file_name().unwrap_or_default(),
        "path": entry.path.as_str(),
        "kind": if entry.is_dir() { "directory" } else { "file" },
        "size": (!entry.is_dir()).then_some(entry.size),
        "modified": entry.modified.map(format_time),
    })
}
