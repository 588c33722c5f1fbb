//! `changes`: the files an overlay mount's layer changed under a path (added, modified, deleted,
//! with sizes) and a unified diff of each against the base (issue 14). Read only.
//!
//! Also owns finding the overlay mounts a path reaches ([`overlays_at`]), which `commit` and
//! `discard` share. The layer itself (marks, base versions) is `backend::overlay`'s.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::{CallContext, ToolError, ToolReply, ToolResult};
use crate::ground::content;
use crate::ground::path::VirtualPath;
use crate::ground::text::{diff, encoding, truncate};
use crate::state::session::Session;
use crate::storage::backend::overlay::{ChangeKind, LayerChange};
use crate::storage::backend::{BoundedRead, OverlayBackend};

/// Largest file (each side) whose diff `changes` shows; bigger ones are listed with sizes only.
pub const DIFF_MAX_FILE_BYTES: u64 = 1024 * 1024;

/// Most files the structured answers of `changes`, `commit` and `discard` list (`total` counts
/// them all).
pub const MAX_LISTED: usize = 1000;

/// Arguments of `changes` (schemas/changes.json).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// The directory (or file) whose changes to show.
    #[serde(default = "root")]
    pub path: String,
}

pub(super) fn root() -> String {
    "/".to_owned()
}

/// One overlay mount reached by a reviewed path.
#[derive(Debug, Clone)]
pub(super) struct Reached {
    /// Where the overlay is mounted.
    pub prefix: VirtualPath,
    /// The overlay.
    pub overlay: Arc<OverlayBackend>,
    /// The reviewed path in the overlay's coordinates.
    pub inner: VirtualPath,
}

impl Reached {
    /// A path of the overlay, as the agent sees it.
    pub(super) fn outer(&self, inner: &VirtualPath) -> VirtualPath {
        inner.under(&self.prefix)
    }
}

/// Most files a question about a layer names one by one.
const QUESTION_FILES: usize = 20;

/// The question put to the person before `commit` or `discard` (`--confirm`): `what` happens to
/// the layer's changes under `path`, how many, and which.
pub(super) async fn layer_question(
    what: &str,
    path: &VirtualPath,
    reached: &[Reached],
) -> Result<String, ToolError> {
    let mut changed = Vec::new();
    for one in reached {
        for change in one
            .overlay
            .changes(&one.inner)
            .await
            .map_err(|e| e.map_path(|p| p.under(&one.prefix)))?
        {
            changed.push((one.outer(&change.path), change.kind));
        }
    }
    changed.sort_by(|a, b| a.0.cmp(&b.0));
    let mut text = format!(
        "{what} the {} under {path}:",
        super::counted(changed.len(), "changed file")
    );
    for (path, kind) in changed.iter().take(QUESTION_FILES) {
        text.push_str(&format!("\n  {:<8} {path}", kind.as_str()));
    }
    if changed.len() > QUESTION_FILES {
        text.push_str(&format!(
            "\n  … and {} more",
            changed.len() - QUESTION_FILES
        ));
    }
    Ok(text)
}

/// The path a commit or discard names, noted in the call's trail as what it touches, and the
/// overlays it reaches (see [`overlays_at`]).
pub(super) fn changing_scope(
    session: &Session,
    path: &str,
) -> Result<(VirtualPath, Vec<Reached>), ToolError> {
    let path = VirtualPath::parse(path)?;
    if let Some(trail) = session.trail() {
        trail.note_scope(&path);
    }
    let reached = overlays_at(session, &path)?;
    Ok((path, reached))
}

/// What `commit` and `discard` answer with: the changes sorted by path, at most [`MAX_LISTED`]
/// of them in the structured `files`, and a text that is `nothing` when there are none, else
/// `heading(count)` followed by one line per change.
pub(super) fn listed_changes(
    changes: &mut [(VirtualPath, ChangeKind)],
    nothing: String,
    heading: impl FnOnce(usize, &str) -> String,
) -> (Vec<serde_json::Value>, String) {
    changes.sort_by(|a, b| a.0.cmp(&b.0));
    let files = changes
        .iter()
        .take(MAX_LISTED)
        .map(|(path, kind)| json!({"path": path.as_str(), "kind": kind.as_str()}))
        .collect();
    if changes.is_empty() {
        return (files, nothing);
    }
    let plural = if changes.len() == 1 { "" } else { "s" };
    let mut text = heading(changes.len(), plural);
    for (p, kind) in changes.iter() {
        text.push_str(&format!("  {:<8} {p}\n", kind.as_str()));
    }
    (files, text)
}

/// The overlay mounts at or below `path`: the one owning it, and those mounted under it.
pub(super) fn overlays_at(
    session: &Session,
    path: &VirtualPath,
) -> Result<Vec<Reached>, ToolError> {
    let backend = session.backend();
    let reached: Vec<Reached> = backend
        .overlays()
        .iter()
        .filter_map(|(prefix, overlay)| {
            let inner = match path.strip_prefix(prefix) {
                Some(inner) => inner,
                None if prefix.starts_with(path) => VirtualPath::root(),
                None => return None,
            };
            Some(Reached {
                prefix: prefix.clone(),
                overlay: overlay.clone(),
                inner,
            })
        })
        .collect();
    if reached.is_empty() {
        return Err(ToolError::NoOverlay { path: path.clone() });
    }
    Ok(reached)
}

/// A change with the sizes and diff `changes` shows.
struct Shown {
    path: VirtualPath,
    kind: ChangeKind,
    base_size: Option<u64>,
    size: Option<u64>,
    diff: Option<String>,
    added: usize,
    removed: usize,
    note: Option<&'static str>,
}

/// The content of one side, when small enough and text: `(size, Some(text))`.
fn side(read: Option<BoundedRead>) -> (Option<u64>, Option<Vec<u8>>) {
    match read {
        None => (None, None),
        Some(BoundedRead::Whole(file)) => (Some(file.content.len() as u64), Some(file.content)),
        Some(BoundedRead::TooLarge { size, .. }) => (Some(size), None),
    }
}

/// Sizes, and the diff when `with_diff` (once the answer is full, later files are listed with
/// their sizes only, so memory follows the answer, not the number of changes).
async fn show(
    reached: &Reached,
    change: &LayerChange,
    with_diff: bool,
) -> Result<Option<Shown>, ToolError> {
    let overlay = &reached.overlay;
    let max = if with_diff { DIFF_MAX_FILE_BYTES } else { 0 };
    let base = match change.kind {
        ChangeKind::Added => None,
        _ => match overlay
            .base_read_at_most(&change.path, DIFF_MAX_FILE_BYTES)
            .await
        {
            Ok(read) => Some(read),
            Err(crate::storage::backend::Error::NotFound { .. }) => None,
            Err(error) => return Err(error.map_path(|p| p.under(&reached.prefix)).into()),
        },
    };
    let layer = match change.kind {
        ChangeKind::Deleted => None,
        _ => Some(
            overlay
                .layer_read_at_most(&change.path, max)
                .await
                .map_err(|e| e.map_path(|p| p.under(&reached.prefix)))?,
        ),
    };
    let (base_size, old) = side(base);
    let (size, new) = side(layer);
    let outer = reached.outer(&change.path);
    // The change shown without its diff, and why (`None`: none was asked).
    let undiffed = |note: Option<&'static str>| Shown {
        path: outer.clone(),
        kind: change.kind,
        base_size,
        size,
        diff: None,
        added: 0,
        removed: 0,
        note,
    };
    if !with_diff {
        return Ok(Some(undiffed(None)));
    }
    if change.kind == ChangeKind::Modified && old.is_some() && old == new {
        // Changed, then changed back: nothing to review.
        return Ok(None);
    }
    let empty = Vec::new();
    let (old_bytes, new_bytes) = match (&change.kind, &old, &new) {
        (ChangeKind::Added, _, Some(new)) => (&empty, new),
        (ChangeKind::Deleted, Some(old), _) => (old, &empty),
        (_, Some(old), Some(new)) => (old, new),
        _ => {
            return Ok(Some(undiffed(Some("over 1 MiB: no diff shown"))));
        }
    };
    if content::looks_binary(old_bytes) || content::looks_binary(new_bytes) {
        return Ok(Some(undiffed(Some("binary: no diff shown"))));
    }
    let (old_text, new_text) = (
        encoding::decode_lossy(old_bytes),
        encoding::decode_lossy(new_bytes),
    );
    let stats = diff::diff_stats(&old_text, &new_text);
    let unified = diff::unified_diff_within(
        outer.as_str(),
        &old_text,
        &new_text,
        truncate::RESULT_CHAR_LIMIT * 4,
    );
    Ok(Some(Shown {
        path: outer,
        kind: change.kind,
        base_size,
        size,
        diff: Some(unified),
        added: stats.added,
        removed: stats.removed,
        note: None,
    }))
}

fn sizes(shown: &Shown) -> String {
    match (shown.kind, shown.base_size, shown.size) {
        (ChangeKind::Modified, Some(old), Some(new)) => format!("{old} -> {new} bytes"),
        (_, _, Some(new)) => format!("{new} bytes"),
        (_, Some(old), None) => format!("{old} bytes"),
        _ => "size unknown".to_owned(),
    }
}

/// Runs the tool.
pub async fn run(args: Args, session: &Session, _context: &CallContext) -> ToolResult {
    let path = VirtualPath::parse(&args.path)?;
    let mut shown = Vec::new();
    let mut diff_chars = 0usize;
    for reached in overlays_at(session, &path)? {
        let changes = reached
            .overlay
            .changes(&reached.inner)
            .await
            .map_err(|e| e.map_path(|p| p.under(&reached.prefix)))?;
        for change in &changes {
            let with_diff = diff_chars <= truncate::RESULT_CHAR_LIMIT;
            if let Some(one) = show(&reached, change, with_diff).await? {
                diff_chars += one.diff.as_ref().map_or(0, String::len);
                shown.push(one);
            }
        }
    }
    shown.sort_by(|a, b| a.path.cmp(&b.path));
    if shown.is_empty() {
        return Ok(ToolReply {
            structured: Some(json!({"files": [], "total": 0})),
            ..ToolReply::text(format!(
                "No changes under {path}: the overlay shows the base directory as it is."
            ))
        });
    }
    let mut text = format!(
        "{} changed file{} under {path} (not yet in the base directory; commit writes them, discard drops them):\n",
        shown.len(),
        if shown.len() == 1 { "" } else { "s" }
    );
    for one in &shown {
        let counts = if one.diff.is_some() {
            format!(", +{} -{}", one.added, one.removed)
        } else {
            String::new()
        };
        text.push_str(&format!(
            "  {:<8} {} ({}{counts})\n",
            one.kind.as_str(),
            one.path,
            sizes(one)
        ));
    }
    for one in &shown {
        match (&one.diff, one.note) {
            (Some(diff), _) => {
                text.push('\n');
                text.push_str(diff);
            }
            (None, Some(note)) => text.push_str(&format!("\n{}: {note}\n", one.path)),
            (None, None) => {}
        }
    }
    let files: Vec<_> = shown
        .iter()
        .take(MAX_LISTED)
        .map(|one| {
            json!({
                "path": one.path.as_str(),
                "kind": one.kind.as_str(),
                "base_size": one.base_size,
                "size": one.size,
                "added": one.added,
                "removed": one.removed,
            })
        })
        .collect();
    let notice = format!(
        "{}; narrow the path (e.g. changes {{\"path\": \"{}\"}}) to see the other diffs",
        truncate::TRUNCATION_GUIDANCE,
        shown[0].path
    );
    Ok(ToolReply {
        structured: Some(json!({ "files": files, "total": shown.len() })),
        ..ToolReply::text(truncate::cap_result_with(
            text,
            truncate::RESULT_CHAR_LIMIT,
            &notice,
        ))
    })
}
