//! `glob`: files matching a pattern below a directory, newest-modified first, then by path, at
//! most [`MAX_RESULTS`] (CONTRACT §4). Matching is the shared `search::GlobMatcher`.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{CallContext, ToolReply, ToolResult};
use crate::ground::path::VirtualPath;
use crate::ground::search::GlobMatcher;
use crate::state::session::Session;
use crate::storage::backend::{self, GlobQuery};

/// Most files returned.
pub const MAX_RESULTS: usize = 1000;

fn default_path() -> String {
    "/".to_owned()
}

/// Arguments of `glob` (schemas/glob.json).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// The pattern.
    pub pattern: String,
    /// The directory searched.
    #[serde(default = "default_path")]
    pub path: String,
}

/// Runs the tool.
pub async fn run(args: Args, session: &Session, call: &CallContext) -> ToolResult {
    let dir = VirtualPath::parse(&args.path)?;
    let matcher = GlobMatcher::new(&args.pattern)?;
    if session.backend().stat(&dir).await?.is_none() {
        return Err(backend::Error::NotFound { path: dir }.into());
    }
    // A mount below `dir` that fails is skipped and named; the others still answer.
    let control = super::search_control(call);
    let search = async {
        Ok(session
            .backend()
            .glob_noting(&GlobQuery {
                dir: dir.clone(),
                matcher,
                control: control.clone(),
            })
            .await?)
    };
    let (mut files, skipped) = super::watched_search("glob", call, &control, search).await?;
    let mut skipped: Vec<(VirtualPath, String)> = skipped
        .iter()
        .map(|s| (s.prefix.clone(), s.reason()))
        .collect();
    // Directories a disk walk could not read (no permission, no file handle left).
    let (unread, unread_more) = control.unread_dirs();
    skipped.extend(unread);
    let mut notes: String = skipped
        .iter()
        .map(|(path, reason)| format!("\n[skipped {path}: {reason}]"))
        .collect();
    notes.push_str(&super::unread_more_note(unread_more));
    let skipped_json: Vec<Value> = skipped
        .iter()
        .map(|(path, reason)| json!({"path": path.as_str(), "reason": reason}))
        .collect();
    let answer =
        |text: String, paths: &[&VirtualPath], total: usize, saved: Option<&VirtualPath>| {
            // Each fact once (issue 45): whether paths were left out is `total` against the
            // paths given; `skipped` and `saved_to` appear only when they say something.
            let mut structured = json!({
                "path": dir.as_str(),
                "pattern": args.pattern,
                "paths": paths.iter().map(|p| p.as_str()).collect::<Vec<_>>(),
                "total": total,
            });
            if let Some(map) = structured.as_object_mut() {
                if !skipped_json.is_empty() {
                    map.insert("skipped".into(), Value::Array(skipped_json.clone()));
                }
                if let Some(saved) = saved {
                    map.insert("saved_to".into(), json!(saved.as_str()));
                }
            }
            ToolReply {
                text,
                structured: Some(structured),
                image: None,
                file: None,
            }
        };
    if files.is_empty() {
        return Ok(answer(format!("No files found{notes}"), &[], 0, None));
    }
    files.sort_by(|a, b| {
        b.modified
            .cmp(&a.modified)
            .then_with(|| a.path.cmp(&b.path))
    });
    let total = files.len();
    let mut text = files
        .iter()
        .take(MAX_RESULTS)
        .map(|e| e.path.to_string())
        .collect::<Vec<_>>()
        .join("\n");
    if total > MAX_RESULTS {
        text.push_str(&format!(
            "\n... [showing {MAX_RESULTS} of {total} files, newest first; narrow the pattern or path to see the rest]"
        ));
    }
    // The notes go first: a list cut at the cap still says which mounts were not searched.
    if !notes.is_empty() {
        text = format!("{}\n{text}", notes.trim_start());
    }
    let fitted = super::large_result::fit_noting(session, call, "glob", text).await;
    let shown: Vec<&VirtualPath> = files.iter().take(MAX_RESULTS).map(|e| &e.path).collect();
    Ok(answer(fitted.text, &shown, total, fitted.saved_to.as_ref()))
}
