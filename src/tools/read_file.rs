//! `read_file`: a window of a file as `cat -n` lines (CONTRACT §4), images as MCP image content,
//! other binary files described, directories listed. Every successful read records the file's
//! version in the session's ledger, which is what allows a later edit.

use base64::Engine;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{CallContext, ToolError, ToolReply, ToolResult};
use crate::ground::content;
use crate::ground::path::VirtualPath;
use crate::ground::text::numbered::{EMPTY_CONTENT_WARNING, format_numbered, is_blank};
use crate::ground::text::truncate::RESULT_CHAR_LIMIT;
use crate::state::session::{LEDGER_TEXT_MAX_FILE_BYTES, Session};
use crate::storage::backend::{self, BoundedRead, FileView, LineWindow, TextWindow};

/// Default number of lines returned.
pub const DEFAULT_LIMIT: usize = 2000;
/// Largest image returned as image content; larger ones are described.
pub const MAX_IMAGE_BYTES: u64 = 10 * 1024 * 1024;

fn default_limit() -> usize {
    DEFAULT_LIMIT
}

/// Arguments of `read_file` (schemas/read_file.json).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// The file.
    pub file_path: String,
    /// Lines to skip.
    #[serde(default)]
    pub offset: usize,
    /// Lines to return at most.
    #[serde(default = "default_limit")]
    pub limit: usize,
}

/// Runs the tool.
pub async fn run(args: Args, session: &Session, _context: &CallContext) -> ToolResult {
    let path = VirtualPath::parse(&args.file_path)?;
    let window = LineWindow {
        offset: args.offset,
        limit: args.limit.max(1),
    };
    let view = match session.backend().read_window(&path, window).await {
        Ok(view) => view,
        Err(backend::Error::IsADirectory { .. }) => return directory(&path, session).await,
        Err(e) => return Err(e.into()),
    };
    // The answer links to the file with what the read saw (no second look at the file).
    let (size, modified) = view.file_facts();
    let mut reply = answer(&path, view, window, args.offset, session).await?;
    reply.file = Some(backend::Entry {
        path,
        kind: backend::EntryKind::File,
        size,
        modified,
        created: None,
    });
    Ok(reply)
}

/// The answer for a file's view.
async fn answer(
    path: &VirtualPath,
    view: FileView,
    window: LineWindow,
    offset: usize,
    session: &Session,
) -> ToolResult {
    match view {
        FileView::Text(text) => {
            // The whole text is kept (within the ledger's bounds) so that an edit of the file
            // after someone else changed it can say which lines changed.
            let whole = offset == 0 && !text.has_more;
            if whole && text.size <= LEDGER_TEXT_MAX_FILE_BYTES as u64 {
                session
                    .ledger
                    .record_text(path, &text.version, &text.lines.join("\n"));
            } else {
                session.ledger.record(path, &text.version);
            }
            render_text(path, &text, window)
        }
        FileView::Binary(sample) => {
            session.ledger.record(path, &sample.version);
            if let Some(mime) = content::image_mime(&sample.head)
                && sample.size <= MAX_IMAGE_BYTES
            {
                // Read through the bound only: a file grown huge since the sample is described
                // below instead of read whole.
                if let BoundedRead::Whole(file) = session
                    .backend()
                    .read_at_most(path, MAX_IMAGE_BYTES)
                    .await?
                {
                    session.ledger.record(path, &file.version);
                    let data = base64::engine::general_purpose::STANDARD.encode(&file.content);
                    return Ok(ToolReply {
                        text: format!("Image {path} ({mime}, {} bytes).", file.content.len()),
                        structured: Some(json!({
                            "path": path.as_str(),
                            "kind": "image",
                            "mime": mime,
                            "size": file.content.len(),
                            "version": file.version.as_str(),
                        })),
                        image: Some((data, mime.to_owned())),
                        file: None,
                    });
                }
            }
            let kind = content::describe_magic(&sample.head).unwrap_or("binary data");
            let mut reply = ToolReply::text(format!(
                "{path} is a binary file ({kind}, {} bytes); it is not shown as text.",
                sample.size
            ));
            reply.structured = Some(json!({
                "path": path.as_str(),
                "kind": "binary",
                "format": kind,
                "size": sample.size,
                "version": sample.version.as_str(),
            }));
            Ok(reply)
        }
    }
}

async fn directory(path: &VirtualPath, session: &Session) -> ToolResult {
    let listing = super::ls::listing(path, session).await?;
    let mut structured = listing.structured;
    if let Some(map) = structured.as_object_mut() {
        map.insert("kind".into(), json!("directory"));
    }
    let mut reply = ToolReply::text(format!(
        "{path} is a directory, not a file. Its entries (read_file takes a file path; ls lists directories):\n{}",
        listing.text
    ));
    reply.structured = Some(structured);
    Ok(reply)
}

fn render_text(path: &VirtualPath, window: &TextWindow, asked: LineWindow) -> ToolResult {
    let lines: Vec<&str> = window.lines.iter().map(String::as_str).collect();
    let whole_file_blank =
        asked.offset == 0 && !window.has_more && (lines.is_empty() || is_blank(&lines));
    if window.total_lines == Some(0) || whole_file_blank {
        let mut reply = ToolReply::text(EMPTY_CONTENT_WARNING);
        reply.structured = Some(text_json(path, window, asked, &lines, None, true));
        return Ok(reply);
    }
    if lines.is_empty() {
        return Err(ToolError::OffsetPastEnd {
            offset: asked.offset,
            lines: window.total_lines.unwrap_or(asked.offset),
        });
    }
    // Fit whole source lines under the result cap; the rest is reached by paging.
    let budget = RESULT_CHAR_LIMIT - 200;
    // `body_chars` is `body.chars().count()`, kept as lines are added: counting the whole body
    // again for every line made a window quadratic in its length (12% of a 32-line read's
    // instructions; issue 15, callgrind).
    let mut body = String::new();
    let mut body_chars = 0;
    let mut shown = 0;
    for (i, line) in lines.iter().enumerate() {
        let rows = format_numbered(&[line], asked.offset + i + 1);
        let row_chars = rows.chars().count();
        if shown > 0 && body_chars + row_chars + 1 > budget {
            break;
        }
        if !body.is_empty() {
            body.push('\n');
            body_chars += 1;
        }
        body.push_str(&rows);
        body_chars += row_chars;
        shown += 1;
        if body_chars > budget {
            break;
        }
    }
    let body = crate::ground::text::truncate::cap_result(body);
    let next = asked.offset + shown;
    let more_in_window = shown < lines.len();
    if more_in_window || window.has_more {
        let remaining = window.total_lines.map(|t| t.saturating_sub(next));
        let note = match remaining {
            Some(n) => format!(
                "\n\n... {n} more {} not shown. Call read_file with offset={next} to continue.",
                if n == 1 { "line" } else { "lines" }
            ),
            None => format!(
                "\n\n... more lines not shown. Call read_file with offset={next} to continue."
            ),
        };
        let mut text = body;
        text.push_str(&note);
        let structured = text_json(path, window, asked, &lines[..shown], Some(next), false);
        return Ok(finish(path, text, window, structured));
    }
    let structured = text_json(path, window, asked, &lines[..shown], None, false);
    Ok(finish(path, body, window, structured))
}

/// The structured answer of a text read (`schemas/read_file.output.json`, `text_window`): the
/// window asked for and shown, the shown lines' text (cut at the result limit), and where to
/// continue (`next_offset`, when more lines follow).
fn text_json(
    path: &VirtualPath,
    window: &TextWindow,
    asked: LineWindow,
    shown: &[&str],
    next_offset: Option<usize>,
    empty: bool,
) -> Value {
    let mut text = shown.join("\n");
    let mut cut = false;
    if text.len() > RESULT_CHAR_LIMIT
        && let Some((at, _)) = text.char_indices().nth(RESULT_CHAR_LIMIT)
    {
        text.truncate(at);
        cut = true;
    }
    json!({
        "path": path.as_str(),
        "kind": "text",
        "offset": asked.offset,
        "limit": asked.limit,
        "lines_shown": shown.len(),
        "total_lines": window.total_lines,
        "next_offset": next_offset,
        "truncated": cut || next_offset.is_some(),
        "empty": empty,
        "text": text,
        "encoding": (!window.lossy).then(|| window.encoding.label()),
        "lossy": window.lossy,
        "size": window.size,
        "version": window.version.as_str(),
    })
}

fn finish(
    path: &VirtualPath,
    mut text: String,
    window: &TextWindow,
    structured: Value,
) -> ToolReply {
    if window.lossy {
        text.push_str(&format!(
            "\n\n(Note: {path} is not valid UTF-8, nor valid in any other encoding found for it; invalid bytes are shown as U+FFFD '\u{fffd}'. Edits to it are refused, so that no byte is lost.)"
        ));
    } else if !window.encoding.is_utf8() {
        text.push_str(&format!(
            "\n\n(Note: {path} is encoded in {label}; it is shown decoded, and edits write it back in {label}.)",
            label = window.encoding.label()
        ));
    }
    let mut reply = ToolReply::text(text);
    reply.structured = Some(structured);
    reply
}
