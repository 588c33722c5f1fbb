//! `ls`: the entries of one directory, sorted by path; directories end in `/`, files show their
//! size, mount points appear as directories (CONTRACT §4).

use schemars::JsonSchema;
use serde::Deserialize;
use std::fmt::Write as _;

use serde_json::{Map, Value, json};

use super::{CallContext, ToolError, ToolReply, ToolResult};
use crate::ground::path::VirtualPath;
use crate::ground::time::unix_seconds;
use crate::state::session::Session;
use crate::storage::backend::Entry;

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
pub async fn run(args: Args, session: &Session, context: &CallContext) -> ToolResult {
    let dir = VirtualPath::parse(&args.path)?;
    let listing = listing(&dir, session).await?;
    let fitted = super::large_result::fit_noting(session, context, "ls", listing.text).await;
    let mut structured = listing.structured;
    if let (Some(map), Some(saved)) = (structured.as_object_mut(), fitted.saved_to.as_ref()) {
        map.insert("saved_to".into(), json!(saved.as_str()));
    }
    Ok(ToolReply {
        text: fitted.text,
        structured: Some(structured),
        image: None,
        file: None,
    })
}

/// A directory's listing: the text the agent reads and its structured form
/// (`{path, entries, total}`, see `schemas/ls.output.json`).
#[derive(Debug)]
pub struct Listing {
    /// One row per entry, or a note that the directory is empty.
    pub text: String,
    /// The entries as objects, at most [`MAX_STRUCTURED_ENTRIES`].
    pub structured: Value,
}

/// The listing of `dir` (shared with read_file on a directory).
///
/// Both forms are built directly, without `json!` or `format!` per entry: building the
/// structured form through `json!` copied every entry's object once more (a `Vec<Value>` is
/// converted, not moved), and with the per-entry `format!`s that was half of a small `ls`'s
/// instructions (issue 15, callgrind).
pub async fn listing(dir: &VirtualPath, session: &Session) -> Result<Listing, ToolError> {
    let mut entries = session.backend().ls(dir).await?;
    entries.sort_by(|a, b| a.path.cmp(&b.path));
    let mut structured = Map::new();
    structured.insert("path".into(), Value::String(dir.as_str().to_owned()));
    structured.insert(
        "entries".into(),
        Value::Array(
            entries
                .iter()
                .take(MAX_STRUCTURED_ENTRIES)
                .map(entry_json)
                .collect(),
        ),
    );
    // Whether entries were left out is `total` against the entries given: said once (issue 45).
    structured.insert("total".into(), Value::from(entries.len()));
    let structured = Value::Object(structured);
    if entries.is_empty() {
        return Ok(Listing {
            text: format!("Directory {dir} is empty."),
            structured,
        });
    }
    let mut text = String::with_capacity(entries.len() * 48);
    for (i, entry) in entries.iter().enumerate() {
        if i > 0 {
            text.push('\n');
        }
        // Writing to a String cannot fail.
        let _ = write!(text, "{}", entry.path);
        if entry.is_dir() {
            text.push('/');
        } else if entry.size == 1 {
            text.push_str(" (1 byte)");
        } else {
            let _ = write!(text, " ({} bytes)", entry.size);
        }
    }
    Ok(Listing { text, structured })
}

/// One entry of a structured listing: `[name, kind, size, modified]` (`size` is null for
/// directories; `modified` in whole seconds since 1970-01-01 UTC, null when unknown). The
/// entry's path is the listing's `path` joined with `name`, so it is not repeated, and the keys
/// are said once in the output schema rather than in every entry: an object per entry with its
/// four keys and an RFC 3339 time was 2.3× the text's bytes (CONTRACT §5 asks at most 1.2×,
/// issue 45).
fn entry_json(entry: &Entry) -> Value {
    let is_dir = entry.is_dir();
    Value::Array(vec![
        Value::String(entry.path.file_name().unwrap_or_default().to_owned()),
        Value::String(if is_dir { "directory" } else { "file" }.to_owned()),
        if is_dir {
            Value::Null
        } else {
            Value::from(entry.size)
        },
        entry
            .modified
            .map_or(Value::Null, |time| Value::from(unix_seconds(time))),
    ])
}
