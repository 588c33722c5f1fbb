//! `file_info`: what a path is without reading it into the conversation (CONTRACT §4): kind,
//! size, line count, created/modified times, language guessed from the name, version, and the
//! mount serving it.
//!
//! `file_info` of a mount's root also says what the workspace holds in memory against its
//! quota, and the server against its budget (issue 34, `memory`).
//!
//! The line count comes from a one-line windowed read, so a backend that knows it cheaply never
//! loads the file; otherwise files up to [`COUNT_LINES_MAX_BYTES`] are read to count it. This
//! tool does not record a read in the session's ledger: the agent has not seen the content, so
//! it may not edit the file on the strength of `file_info` alone.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{CallContext, ToolReply, ToolResult};
use crate::ground::content;
use crate::ground::path::VirtualPath;
use crate::ground::text::encoding;
use crate::ground::text::language::language_of;
use crate::ground::text::numbered::split_lines;
use crate::ground::time::format_time;
use crate::state::session::Session;
use crate::storage::backend::{self, BoundedRead, FileView, LineWindow};

/// Largest file read whole to count its lines when the backend does not report the count.
pub const COUNT_LINES_MAX_BYTES: u64 = 16 * 1024 * 1024;

/// Arguments of `file_info` (schemas/file_info.json).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// The file or directory.
    pub file_path: String,
}

/// Runs the tool.
pub async fn run(args: Args, session: &Session, _context: &CallContext) -> ToolResult {
    let path = VirtualPath::parse(&args.file_path)?;
    let backend = session.backend();
    let Some(entry) = backend.stat(&path).await? else {
        return Err(backend::Error::NotFound { path }.into());
    };
    let (mount, _) = backend.route(&path);
    let mut info = serde_json::Map::new();
    info.insert("path".into(), json!(path.as_str()));
    let kind;
    if entry.is_dir() {
        kind = "directory".to_owned();
        let entries = session.backend().ls(&path).await.map(|e| e.len()).ok();
        info.insert("kind".into(), json!("directory"));
        info.insert("entries".into(), json!(entries));
    } else {
        let view = session
            .backend()
            .read_window(
                &path,
                LineWindow {
                    offset: 0,
                    limit: 1,
                },
            )
            .await?;
        match view {
            FileView::Text(text) => {
                let lines = match text.total_lines {
                    Some(n) => Some(n),
                    // Read through the bound only: a file grown since the window is not
                    // read whole.
                    None if text.size <= COUNT_LINES_MAX_BYTES => match session
                        .backend()
                        .read_at_most(&path, COUNT_LINES_MAX_BYTES)
                        .await?
                    {
                        BoundedRead::Whole(file) => {
                            Some(split_lines(&encoding::decode_lossy(&file.content)).len())
                        }
                        BoundedRead::TooLarge { .. } => None,
                    },
                    None => None,
                };
                kind = if text.lossy {
                    "text file (valid in no encoding found: shown with U+FFFD, edits refused)"
                        .to_owned()
                } else {
                    "text file".to_owned()
                };
                info.insert("kind".into(), json!("file"));
                info.insert("binary".into(), json!(false));
                let encoding_name = (!text.lossy).then(|| text.encoding.label());
                info.insert("encoding".into(), json!(encoding_name));
                info.insert("lines".into(), json!(lines));
                info.insert("version".into(), json!(text.version.as_str()));
            }
            FileView::Binary(sample) => {
                let format = content::describe_magic(&sample.head).unwrap_or("binary data");
                kind = format!("binary file ({format})");
                info.insert("kind".into(), json!("file"));
                info.insert("binary".into(), json!(true));
                info.insert("format".into(), json!(format));
                info.insert("version".into(), json!(sample.version.as_str()));
            }
        }
        let language = path.file_name().and_then(language_of);
        info.insert("language".into(), json!(language));
    }
    info.insert("size".into(), json!(entry.size));
    info.insert("modified".into(), json!(entry.modified.map(format_time)));
    info.insert("created".into(), json!(entry.created.map(format_time)));
    info.insert("mount".into(), json!(mount_name(&mount.prefix)));
    info.insert("mount_root".into(), json!(mount.prefix == path));
    info.insert("read_only".into(), json!(mount.read_only));
    if mount.prefix == path {
        // A mount's root answers what the workspace holds in memory (issue 34), the one place
        // an agent looks before writing much.
        let memory = &session.memory;
        let mut usage = json!({"used": memory.used(), "quota": memory.quota()});
        let server = memory.server();
        if server.budget() != u64::MAX {
            usage["server_used"] = json!(server.used());
            usage["server_budget"] = json!(server.budget());
        }
        info.insert("memory".into(), usage);
    }
    let mut text = render(&path, &kind, &info);
    if mount.prefix == path {
        text.push('\n');
        text.push_str(&session.memory.describe());
    }
    Ok(ToolReply {
        text,
        structured: Some(Value::Object(info)),
        image: None,
        // The answer links to the file it describes (a directory gets no link).
        file: Some(entry),
    })
}

fn mount_name(prefix: &VirtualPath) -> String {
    if prefix.is_root() {
        "/".to_owned()
    } else {
        format!("{prefix}/")
    }
}

fn render(path: &VirtualPath, kind: &str, info: &serde_json::Map<String, Value>) -> String {
    let text_of = |key: &str| -> Option<String> {
        match info.get(key)? {
            Value::Null => None,
            Value::String(s) => Some(s.clone()),
            other => Some(other.to_string()),
        }
    };
    let mut rows = vec![path.to_string(), format!("kind: {kind}")];
    if let Some(size) = text_of("size")
        && kind != "directory"
    {
        rows.push(format!("size: {size} bytes"));
    }
    if let Some(entries) = text_of("entries") {
        rows.push(format!("entries: {entries}"));
    }
    if kind.starts_with("text file") {
        rows.push(format!(
            "lines: {}",
            text_of("lines").unwrap_or_else(|| "unknown (file too large to count)".into())
        ));
    }
    if kind.starts_with("text file") {
        rows.push(format!(
            "encoding: {}",
            text_of("encoding").unwrap_or_else(|| "unknown (undecodable)".into())
        ));
    }
    if kind != "directory" {
        rows.push(format!(
            "language: {}",
            text_of("language").unwrap_or_else(|| "unknown".into())
        ));
    }
    for key in ["modified", "created", "version"] {
        if let Some(value) = text_of(key) {
            rows.push(format!("{key}: {value}"));
        }
    }
    let mount = text_of("mount").unwrap_or_default();
    let mut mount_row = format!("mount: {mount}");
    if info.get("mount_root") == Some(&Value::Bool(true)) {
        mount_row.push_str(" (this is the mount's root)");
    }
    if info.get("read_only") == Some(&Value::Bool(true)) {
        mount_row.push_str(" (read-only)");
    }
    rows.push(mount_row);
    rows.join("\n")
}
