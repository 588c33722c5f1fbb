//! Results too large for one answer (CONTRACT §4 "Large results", seed 000 §5.2): saved whole to
//! `/scratch/large_tool_results/<id>` on the session's `/scratch/` mount, the answer holding the
//! first and last lines and the path to page through with `read_file`.
//!
//! For tools that cannot page by themselves (`execute`, `ls`, `glob`); tools with
//! `offset`/`head_limit` cap their own answers. Without a writable `/scratch/` mount the answer is cut with the usual
//! notice (`text::truncate`).

use crate::ground::path::VirtualPath;
use crate::ground::text::truncate::{RESULT_CHAR_LIMIT, cap_result};
use crate::state::session::Session;
use crate::storage::backend::{Error as BackendError, WriteMode};
use crate::tools::CallContext;

/// The mount large results are saved on.
pub const SCRATCH_MOUNT: &str = "/scratch";
/// The directory they are saved in.
pub const RESULTS_DIR: &str = "/scratch/large_tool_results";
/// Most characters of a saved result's file name.
pub const MAX_ID_CHARS: usize = 64;
/// Characters of the head, and of the tail, an answer shows of a saved result.
pub const PREVIEW_CHARS: usize = 20_000;

/// A request id made safe as a file name: `.`, `/`, `\` (seed 000 `sanitize_tool_call_id`) and
/// every other character that is not a letter, digit, `-` or `_` become `_`, at most
/// [`MAX_ID_CHARS`] characters; an empty id becomes `call`.
pub fn safe_id(id: &str) -> String {
    let safe: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(MAX_ID_CHARS)
        .collect();
    if safe.is_empty() {
        "call".to_owned()
    } else {
        safe
    }
}

/// What [`fit_noting`] made of a result.
#[derive(Debug, Clone, PartialEq)]
pub struct Fitted {
    /// The answer's text.
    pub text: String,
    /// Where the whole result was saved, when it was.
    pub saved_to: Option<VirtualPath>,
    /// Whether the text is not the whole result (saved elsewhere, or cut).
    pub cut: bool,
}

/// `text` if it fits in one answer; else the saved file's preview, or `text` cut with the usual
/// notice when there is nowhere to save it.
pub async fn fit(session: &Session, context: &CallContext, tool: &str, text: String) -> String {
    fit_noting(session, context, tool, text).await.text
}

/// [`fit`], saying where the whole result went (for the structured answer).
pub async fn fit_noting(
    session: &Session,
    context: &CallContext,
    tool: &str,
    text: String,
) -> Fitted {
    let whole = |text: String| Fitted {
        text,
        saved_to: None,
        cut: false,
    };
    let cut = |text: String| Fitted {
        text: cap_result(text),
        saved_to: None,
        cut: true,
    };
    if text.len() <= RESULT_CHAR_LIMIT || text.chars().count() <= RESULT_CHAR_LIMIT {
        return whole(text);
    }
    let scratch = session
        .backend()
        .mounts()
        .iter()
        .any(|mount| mount.prefix.as_str() == SCRATCH_MOUNT && !mount.read_only);
    if !scratch {
        return cut(text);
    }
    let id = safe_id(context.request_id.as_deref().unwrap_or(tool));
    match save(session, &id, text.as_bytes()).await {
        Ok(path) => Fitted {
            text: preview(&text, &path),
            saved_to: Some(path),
            cut: true,
        },
        Err(error) => {
            tracing::warn!(%error, "could not save a large result to /scratch/");
            cut(text)
        }
    }
}

/// Writes `content` to a new file named after `id` (`id`, `id-2`, `id-3`, … until one is free).
async fn save(session: &Session, id: &str, content: &[u8]) -> Result<VirtualPath, BackendError> {
    let mut attempt = 1u32;
    loop {
        let name = if attempt == 1 {
            id.to_owned()
        } else {
            format!("{id}-{attempt}")
        };
        let path = VirtualPath::parse(&format!("{RESULTS_DIR}/{name}"))?;
        match session
            .backend()
            .write(&path, content, WriteMode::CreateOnly)
            .await
        {
            Ok(_) => return Ok(path),
            Err(BackendError::AlreadyExists { .. }) if attempt < 1000 => attempt += 1,
            Err(error) => return Err(error),
        }
    }
}

/// The first and last whole lines of `text` (about [`PREVIEW_CHARS`] each) around a notice
/// naming the saved file.
fn preview(text: &str, path: &VirtualPath) -> String {
    let lines: Vec<&str> = text.split('\n').collect();
    let total_chars = text.chars().count();
    let mut head = 0;
    let mut chars = 0;
    while head < lines.len() {
        let next = lines[head].chars().count() + 1;
        if chars + next > PREVIEW_CHARS {
            break;
        }
        chars += next;
        head += 1;
    }
    let mut tail = lines.len();
    chars = 0;
    while tail > head {
        let next = lines[tail - 1].chars().count() + 1;
        if chars + next > PREVIEW_CHARS {
            break;
        }
        chars += next;
        tail -= 1;
    }
    let mut out = String::new();
    for line in &lines[..head] {
        out.push_str(line);
        out.push('\n');
    }
    if head == 0 {
        // One enormous first line: show its start.
        out.extend(text.chars().take(PREVIEW_CHARS));
        out.push('\n');
    }
    out.push_str(&format!(
        "... [{} lines omitted. The whole result ({} lines, {total_chars} characters) is saved in {path}: page through it with read_file (file_path \"{path}\", offset, limit), or search it with grep]\n",
        tail - head,
        lines.len(),
    ));
    for line in &lines[tail..] {
        out.push_str(line);
        out.push('\n');
    }
    out.truncate(out.trim_end_matches('\n').len());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_lose_separators_and_dots_and_stay_bounded() {
        assert_eq!(safe_id("call.1/2\\3"), "call_1_2_3");
        assert_eq!(safe_id("../../etc/passwd"), "______etc_passwd");
        assert_eq!(safe_id("42"), "42");
        assert_eq!(safe_id(""), "call");
        assert_eq!(safe_id("a\u{0}b é"), "a_b__");
        assert_eq!(safe_id(&"x".repeat(500)).len(), MAX_ID_CHARS);
    }

    #[test]
    fn preview_keeps_head_and_tail_within_the_cap() {
        let text: String = (1..=100_000).map(|n| format!("line {n}\n")).collect();
        let path = VirtualPath::parse("/scratch/large_tool_results/7").unwrap();
        let shown = preview(&text, &path);
        assert!(shown.chars().count() < RESULT_CHAR_LIMIT);
        assert!(shown.starts_with("line 1\nline 2\n"));
        assert!(shown.ends_with("line 100000"));
        assert!(shown.contains("is saved in /scratch/large_tool_results/7"));
    }
}
