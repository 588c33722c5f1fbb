//! `mountfs log`: the audit log for people (and `jq`) — the same entries and lines as the
//! `history` tool, from the command line. The binary only parses flags and prints what
//! [`log_output`] returns.
//!
//! An entry holds what agents wrote (paths, diffs, commands), printed on the operator's
//! terminal: every control character but newline and tab — C0 (ESC among them), DEL and C1 —
//! is printed as `\u{XXXX}`, the form answers show names in (`crate::ground::path::escape_name`);
//! with `--json`, DEL and C1 are written as JSON's `\u00XX` (serde_json escapes C0 itself).

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
    Path(#[from] crate::ground::path::PathError),
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
            json_safe(&format!("{}\n", entry.full()))
        } else {
            terminal_safe(&format!("{}\n", entry.detail()))
        });
    }
    let under = crate::ground::path::VirtualPath::parse(&request.path)?;
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
        return Ok(json_safe(
            &entries
                .iter()
                .map(|entry| format!("{}\n", Entry::listed(entry)))
                .collect::<String>(),
        ));
    }
    Ok(terminal_safe(&format!(
        "{}\n",
        listing_text(&entries, &query, 0, 0)
    )))
}

/// Whether a terminal could act on `c`: C0 but newline and tab, DEL, C1.
fn is_terminal_control(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t') || ('\u{7f}'..='\u{9f}').contains(&c)
}

/// `text` with every [`is_terminal_control`] character written as `\u{XXXX}` (see the module
/// doc).
pub fn terminal_safe(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if is_terminal_control(c) {
            out.push_str(&format!("\\u{{{:04X}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

/// JSON lines with DEL and C1 characters (which serde_json leaves raw) written as `\u00XX`:
/// the same JSON, nothing a terminal acts on.
fn json_safe(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if ('\u{7f}'..='\u{9f}').contains(&c) {
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_but_newlines_and_tabs() {
        assert_eq!(
            terminal_safe("a\u{1b}[31mb\tc\nd\re\u{7f}f\u{9b}g\u{0}"),
            "a\\u{001B}[31mb\tc\nd\\u{000D}e\\u{007F}f\\u{009B}g\\u{0000}"
        );
        let json = json_safe("{\"d\":\"\u{9b}x\"}\n");
        assert_eq!(json, "{\"d\":\"\\u009bx\"}\n");
        let value: serde_json::Value = serde_json::from_str(json.trim()).unwrap();
        assert_eq!(value["d"], "\u{9b}x");
    }
}
