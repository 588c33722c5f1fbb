//! `mountfs log`: the audit log for people (and `jq`) — the same entries and lines as the
//! `history` tool, from the command line. The binary only parses flags and prints what
//! [`log_output`] returns.

use std::time::SystemTime;

use super::{AuditError, AuditLog, AuditTarget, Entry, Query, listing_text, time};

/// What `mountfs log` was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRequest {
    /// Only changes to this file or under this directory.
    pub path: String,
    /// `--since` as typed.
    pub since: Option<String>,
    /// At most this many entries.
    pub limit: usize,
    /// One entry in full.
    pub id: Option<i64>,
    /// One JSON object per line.
    pub json: bool,
}

/// Why `mountfs log` printed nothing.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The log could not be opened or read.
    #[error("{0}")]
    Audit(#[from] AuditError),
    /// `--audit off`.
    #[error(
        "the audit log is off (--audit off): there is nothing to show. Give --audit sqlite:FILE or --audit postgres:URL to read a log"
    )]
    Off,
    /// The SQLite file does not exist.
    #[error(
        "no audit log at {0} yet: no change has been logged there. Give --audit sqlite:FILE or --audit postgres:URL if the server logs elsewhere"
    )]
    Missing(String),
    /// `--path` is not a valid path.
    #[error("--path: {0}")]
    Path(#[from] crate::path::PathError),
    /// `--id` names no entry.
    #[error(
        "no audit log entry #{0}: it was never written, or pruned (--audit-keep). Run mountfs log without --id to list the entries"
    )]
    NoSuchEntry(i64),
}

/// The text `mountfs log` prints for `request` on the log at `target` (`None`: off).
pub async fn log_output(
    target: Option<AuditTarget>,
    keep_days: Option<u32>,
    request: &LogRequest,
) -> Result<String, LogError> {
    let target = target.ok_or(LogError::Off)?;
    if let AuditTarget::Sqlite(file) = &target
        && !file.exists()
    {
        return Err(LogError::Missing(file.display().to_string()));
    }
    let log = AuditLog::open(&target, keep_days)
        .await?
        .ok_or(LogError::Off)?;
    if let Some(id) = request.id {
        let entry = log.get(id).await?.ok_or(LogError::NoSuchEntry(id))?;
        return Ok(if request.json {
            format!("{}\n", entry.full())
        } else {
            format!("{}\n", entry.detail())
        });
    }
    let under = crate::path::VirtualPath::parse(&request.path)?;
    let since = request
        .since
        .as_deref()
        .map(|text| time::parse_since(text, SystemTime::now()))
        .transpose()?;
    let query = Query {
        under: under.as_str().to_owned(),
        since,
        limit: request.limit,
        reader: super::Reader::Operator,
    };
    let entries = log.query(&query).await?;
    if request.json {
        return Ok(entries
            .iter()
            .map(|entry| format!("{}\n", Entry::listed(entry)))
            .collect());
    }
    Ok(format!("{}\n", listing_text(&entries, &query, 0, 0)))
}
