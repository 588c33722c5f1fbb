//! `apply_patch`: apply a unified diff touching one or more files, all files or none
//! (CONTRACT §4; seed 004's `apply_diff`).
//!
//! In named steps: parse the patch (`text::patch`) → lock every file it touches, in path order →
//! check and compute every file before writing any (a modified or deleted file must have been
//! read in this session and be unchanged since, like `edit_file`; a created file must not exist;
//! every hunk must match) → write each file conditional on the version read (create-only for new
//! files) → if a later write fails, put back the files already written, conditional on the
//! versions just written → record ledger and undo steps → show what changed in each file.
//!
//! Line endings: a CRLF file is patched as LF text and written back CRLF (so both an LF patch
//! and a `git diff` whose rows carry `'\r'` apply); other files are matched byte for byte.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::{CallContext, ToolError, ToolReply, ToolResult};
use crate::change::confirm::ask_first;
use crate::change::editing::{
    check_edit_size, decode_for_edit, decode_text, encode_for_file, load_checked, lock_files,
};
use crate::change::report::report_change;
use crate::change::steps::ChangeSteps;
use crate::change::{ApplyAllFailure, Before, Change, apply_all};
use crate::ground::content;
use crate::ground::path::VirtualPath;
use crate::ground::text::line_endings::LineEnding;
use crate::ground::text::patch::{self, FilePatch, Hunk, RowKind};
use crate::ground::text::truncate;
use crate::state::session::Session;
use crate::storage::backend::Version;

/// Arguments of `apply_patch` (schemas/apply_patch.json).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// The unified diff.
    pub patch: String,
}

/// What the patch does to one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Create,
    Modify,
    Delete,
}

impl Action {
    fn past_tense(self) -> &'static str {
        match self {
            Self::Create => "Created",
            Self::Modify => "Modified",
            Self::Delete => "Deleted",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Create => "created",
            Self::Modify => "modified",
            Self::Delete => "deleted",
        }
    }
}

/// One file's change as the answer shows it.
#[derive(Debug)]
struct Planned {
    path: VirtualPath,
    action: Action,
    /// LF texts before and after.
    old_text: String,
    new_text: String,
}

/// Runs the tool.
///
/// With a progress token the call reports each file checked, then each file changed; when the
/// client cancels it, it stops before its next file: while checking, nothing was changed yet;
/// while changing, the files changed so far are put back (every file as it was before).
pub async fn run(args: Args, session: &Session, context: &CallContext) -> ToolResult {
    let targets = targets(patch::parse(&args.patch)?)?;
    let paths = targets.iter().map(|(p, _, _)| p.clone()).collect();
    let _guards = lock_files(session, paths, context.turn.as_deref()).await;
    let files = targets.len() as u64;
    let mut steps = ChangeSteps::new("apply_patch", context, 2 * files);
    steps.phase("checked", files).await;
    let mut plans = Vec::with_capacity(targets.len());
    let mut changes = Vec::with_capacity(targets.len());
    for (path, action, file_patch) in targets {
        if steps.cancelled() {
            return Err(steps.cancellation("Nothing was changed."));
        }
        let (planned, change) = plan(session, path, action, &file_patch.hunks).await?;
        plans.push(planned);
        changes.push(change);
        steps.step().await;
    }
    ask_first(
        context,
        "apply_patch",
        plans.iter().any(|p| p.action == Action::Delete),
        || question(&plans),
    )
    .await?;
    let applied = apply_all(session, &changes, &mut steps)
        .await
        .map_err(failure)?;
    let versions: Vec<Option<Version>> = applied.iter().map(|a| a.version.clone()).collect();
    for (change, applied) in changes.into_iter().zip(applied) {
        change.record(session, applied, None);
    }
    Ok(answer(&plans, &versions))
}

/// Most files a question about a patch names one by one.
const QUESTION_FILES: usize = 20;

/// The question put to the person (`--confirm`): how many files, and what happens to each.
fn question(plans: &[Planned]) -> String {
    let mut text = format!("Apply a patch to {}:", super::counted(plans.len(), "file"));
    for planned in plans.iter().take(QUESTION_FILES) {
        let verb = match planned.action {
            Action::Create => "create",
            Action::Modify => "modify",
            Action::Delete => "DELETE",
        };
        text.push_str(&format!("\n  {verb} {}", planned.path));
    }
    if plans.len() > QUESTION_FILES {
        text.push_str(&format!("\n  … and {} more", plans.len() - QUESTION_FILES));
    }
    text
}

/// The answer when a file could not be written: which, why, and what was put back.
fn failure(failed: ApplyAllFailure) -> ToolError {
    let state = if failed.not_reverted.is_empty() {
        match failed.applied_before {
            0 => "Nothing was changed.".to_owned(),
            n => format!("The {n} file(s) written before it were put back; nothing was changed."),
        }
    } else {
        let left: Vec<String> = failed
            .not_reverted
            .iter()
            .map(|(path, e)| format!("{path} ({e})"))
            .collect();
        format!(
            "Putting back the files written before it failed for: {}. Read them and fix them by hand",
            left.join(", ")
        )
    };
    if let ToolError::ChangeCancelled { tool, .. } = failed.error {
        return ToolError::ChangeCancelled { tool, state };
    }
    ToolError::PartialFailure {
        message: format!(
            "Error: apply_patch could not write {}: {}\n{state}",
            failed.at, failed.error
        ),
    }
}

/// Each file patch with its validated path and action; a file named twice is refused.
fn targets(patches: Vec<FilePatch>) -> Result<Vec<(VirtualPath, Action, FilePatch)>, ToolError> {
    let mut out: Vec<(VirtualPath, Action, FilePatch)> = Vec::with_capacity(patches.len());
    for file_patch in patches {
        let (path, action) = match (&file_patch.old_path, &file_patch.new_path) {
            (None, Some(new)) => (VirtualPath::parse(new)?, Action::Create),
            (Some(old), None) => (VirtualPath::parse(old)?, Action::Delete),
            (Some(old), Some(new)) => {
                let (old_path, new_path) = (VirtualPath::parse(old)?, VirtualPath::parse(new)?);
                if old_path != new_path {
                    return Err(ToolError::PatchTarget {
                        path: new_path,
                        reason: format!(
                            "its '---' line names {old_path} but its '+++' line names it; apply_patch changes files in place, so give one path on both lines (use the move tool to rename)"
                        ),
                    });
                }
                (new_path, Action::Modify)
            }
            (None, None) => continue,
        };
        if out.iter().any(|(p, _, _)| *p == path) {
            return Err(ToolError::PatchTarget {
                path,
                reason: "the patch changes this file in two sections; merge them into one".into(),
            });
        }
        out.push((path, action, file_patch));
    }
    Ok(out)
}

/// Checks one file and computes its new content.
async fn plan(
    session: &Session,
    path: VirtualPath,
    action: Action,
    hunks: &[Hunk],
) -> Result<(Planned, Change<'static>), ToolError> {
    if action == Action::Create {
        if session.backend().stat(&path).await?.is_some() {
            return Err(ToolError::PatchTarget {
                path,
                reason: "the patch creates it (its '---' line is /dev/null) but it already exists; read it and make the patch against its content".into(),
            });
        }
        crate::change::editing::refuse_new_control_names(session, &path).await?;
        let new_raw =
            patch::apply_hunks("", hunks, false).map_err(|mismatch| ToolError::PatchMismatch {
                path: path.clone(),
                mismatch,
            })?;
        check_edit_size(session, path.as_str(), new_raw.len())?;
        let new_text = decode_text(new_raw.as_bytes()).0;
        let change = Change::write(path.clone(), Before::Absent, new_raw.into_bytes());
        let planned = Planned {
            path,
            action,
            old_text: String::new(),
            new_text,
        };
        return Ok((planned, change));
    }
    let file = load_checked(session, &path).await?;
    if content::looks_binary(&file.content) {
        return Err(ToolError::PatchTarget {
            path,
            reason: "it is a binary file; patches change text files only (use write_file)".into(),
        });
    }
    let (old_text, format, file_encoding) = decode_for_edit(&path, &file.content)?;
    let hunks = without_bom(hunks, format.bom);
    let crlf = format.line_ending == LineEnding::CrLf;
    // Rows ending in '\r' for a file holding no '\r' at all: the patch was sent with CRLF line
    // breaks, so the '\r's are its breaks, never content (kept, an added last line marked
    // `\ No newline at end of file` left a stray '\r' in the file).
    let crlf_patch = !old_text.contains('\r')
        && hunks
            .iter()
            .flat_map(|h| &h.rows)
            .any(|r| r.text.ends_with('\r'));
    let mut applied = patch::apply_hunks(&old_text, &hunks, crlf || crlf_patch);
    if applied.is_err() && !crlf && rows_carry_cr(&hunks) {
        // An LF file patched with CRLF rows (a patch pasted with Windows line breaks).
        applied = patch::apply_hunks(&old_text, &hunks, true);
    }
    let new_text = applied.map_err(|mismatch| ToolError::PatchMismatch {
        path: path.clone(),
        mismatch,
    })?;
    let change = match action {
        Action::Delete if !new_text.is_empty() => {
            return Err(ToolError::PatchTarget {
                path,
                reason: format!(
                    "the patch deletes it ('+++ /dev/null') but removes only part of it ({} bytes would remain); read it again and regenerate the patch",
                    new_text.len()
                ),
            });
        }
        Action::Delete => Change::removal(path.clone(), Before::Read(file)),
        _ => {
            let bytes = encode_for_file(&path, &new_text, format, file_encoding)?;
            check_edit_size(session, path.as_str(), bytes.len())?;
            Change::write(path.clone(), Before::Read(file), bytes)
        }
    };
    let planned = Planned {
        path,
        action,
        old_text,
        new_text,
    };
    Ok((planned, change))
}

/// The hunks with a leading BOM dropped from their rows when the file has one (the file is
/// patched without it, and `git diff` shows it on the first line).
fn without_bom(hunks: &[Hunk], bom: bool) -> Vec<Hunk> {
    let mut hunks = hunks.to_vec();
    if bom {
        for row in hunks.iter_mut().flat_map(|h| h.rows.iter_mut()) {
            if let Some(rest) = row.text.strip_prefix('\u{feff}') {
                row.text = rest.to_owned();
            }
        }
    }
    hunks
}

fn rows_carry_cr(hunks: &[Hunk]) -> bool {
    hunks
        .iter()
        .flat_map(|h| &h.rows)
        .any(|r| r.kind != RowKind::Added && r.text.ends_with('\r'))
}

fn answer(plans: &[Planned], versions: &[Option<Version>]) -> ToolReply {
    let count = |action: Action| plans.iter().filter(|p| p.action == action).count();
    let mut text = format!(
        "Applied the patch to {} file(s): {} modified, {} created, {} deleted. undo_edit on a file takes its change back.",
        plans.len(),
        count(Action::Modify),
        count(Action::Create),
        count(Action::Delete)
    );
    let mut files = Vec::with_capacity(plans.len());
    let mut diff = String::new();
    let mut diff_truncated = false;
    for (plan, version) in plans.iter().zip(versions) {
        let report = report_change(&plan.path, &plan.old_text, &plan.new_text);
        text.push_str(&format!("\n\n{} {}.", plan.action.past_tense(), plan.path));
        if !report.section.is_empty() {
            text.push('\n');
            text.push_str(&report.section);
        }
        diff.push_str(&report.diff);
        diff_truncated |= report.diff_truncated;
        files.push(json!({
            "path": plan.path.as_str(),
            "action": plan.action.name(),
            "version": version.as_ref().map(Version::as_str),
            "lines_added": report.stats.added,
            "lines_removed": report.stats.removed,
        }));
    }
    if diff.chars().count() > truncate::RESULT_CHAR_LIMIT {
        diff = truncate::cap_result(diff);
        diff_truncated = true;
    }
    ToolReply {
        text: truncate::cap_result(text),
        structured: Some(json!({
            "files": files,
            "diff": diff,
            "diff_truncated": diff_truncated,
        })),
        image: None,
        file: None,
    }
}
