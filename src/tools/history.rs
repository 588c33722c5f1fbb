//! `history`: the audit log read back (issue 14) — the entries under a path, newest first, one
//! line each, or one entry with its diff. Offered only while the log is on; the log itself and
//! how entries are shown live in `crate::storage::audit` (shared with `mountfs log`). A caller sees the
//! entries of shared mounts and its own workspace's, never another workspace's private ones
//! (issue 41, [`Reader::may_see`]): another's entry answers as one that does not exist.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::{CallContext, ToolError, ToolReply, ToolResult};
use crate::ground::path::VirtualPath;
use crate::ground::text::truncate;
use crate::state::session::Session;
use crate::storage::audit::{DEFAULT_LIMIT, Entry, Query, Reader, listing_text};

/// Arguments of `history` (schemas/history.json).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// Only changes to this file or under this directory (default `/`).
    #[serde(default)]
    pub path: Option<String>,
    /// How many entries (default 20, at most 1000).
    #[serde(default)]
    #[schemars(range(min = 1, max = 1000))]
    pub limit: Option<usize>,
    /// One entry, with its diff.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub id: Option<i64>,
}

/// Runs the tool.
pub async fn run(args: Args, session: &Session, context: &CallContext) -> ToolResult {
    let Some(log) = session.audit() else {
        return Err(ToolError::AuditOff);
    };
    let reader = Reader::of(&context.origin).seeing(session.view().cloned());
    if let Some(id) = args.id {
        let Some(entry) = log
            .get(id)
            .await?
            .filter(|entry| reader.may_see(&entry.change))
        else {
            return Err(ToolError::NoSuchAuditEntry { id });
        };
        return Ok(ToolReply {
            text: truncate::cap_result(entry.detail()),
            structured: Some(entry.full()),
            image: None,
            file: None,
        });
    }
    let under = VirtualPath::parse(args.path.as_deref().unwrap_or("/"))?;
    let query = Query {
        under: under.as_str().to_owned(),
        since: None,
        limit: args.limit.unwrap_or(DEFAULT_LIMIT),
        reader,
    };
    let entries = log.query(&query).await?;
    let waiting = log.waiting();
    Ok(ToolReply {
        text: truncate::cap_result(listing_text(&entries, &query, log.failures(), waiting)),
        structured: Some(json!({
            "entries": entries.iter().map(Entry::listed).collect::<Vec<_>>(),
            "not_logged": log.failures(),
            "waiting": waiting,
        })),
        image: None,
        file: None,
    })
}
