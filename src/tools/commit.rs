//! `commit`: writes an overlay layer's changes under a path into the base directory, each file
//! atomically as the disk mount writes (temp file, fsync, rename), all or nothing against other
//! programs' changes: when any base file changed since the layer first took it, nothing is
//! written and the conflicts are listed (issue 14). Committed changes leave the layer.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::changes::{Reached, changing_scope, layer_question, listed_changes};
use super::{CallContext, ToolError, ToolReply, ToolResult};
use crate::change::confirm::ask_first;
use crate::ground::path::VirtualPath;
use crate::state::session::Session;
use crate::storage::backend::JournalRole;
use crate::storage::backend::disk::journal::change_id;
use crate::storage::backend::overlay::{Staged, StagedCommit};

/// Arguments of `commit` (schemas/commit.json).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// The directory (or file) whose changes to write to the base.
    #[serde(default = "super::changes::root")]
    pub path: String,
}

/// Runs the tool.
pub async fn run(args: Args, session: &Session, context: &CallContext) -> ToolResult {
    let (path, reached) = changing_scope(session, &args.path)?;
    // Every overlay is checked before any is written: a conflict anywhere writes nothing.
    let mut conflicts = Vec::new();
    for one in &reached {
        for conflict in one
            .overlay
            .conflicts(&one.inner)
            .await
            .map_err(|e| e.map_path(|p| p.under(&one.prefix)))?
        {
            conflicts.push(format!(
                "  {}: {}",
                one.outer(&conflict.path),
                conflict.reason
            ));
        }
    }
    if !conflicts.is_empty() {
        return Err(ToolError::CommitConflicts {
            path,
            count: conflicts.len(),
            list: conflicts.join("\n"),
        });
    }
    if context.confirm.is_some() {
        let question =
            layer_question("Commit (write into the real directory)", &path, &reached).await?;
        ask_first(context, "commit", true, || question).await?;
    }
    // Each overlay writes its changes into its base, keeping them in its layer; only when
    // every one has does any let them go. A failure anywhere puts every base back. Bases that
    // keep a change journal (disk) write through it: one journal per base, the last one
    // (primary) deciding for all, so that a crash leaves every base as before or as after.
    let roles = journal_roles(&reached);
    let mut staged = Vec::new();
    for (one, role) in reached.iter().zip(&roles) {
        match one.overlay.stage_commit(&one.inner, role).await {
            Ok(Staged::Written(stage)) => staged.push((one, stage)),
            Err(error) => {
                undo_stages(staged).await;
                return Err(error.map_path(|p| p.under(&one.prefix)).into());
            }
            Ok(Staged::Conflicts(found)) => {
                // Another program changed a base file between the check and the write.
                undo_stages(staged).await;
                let list: Vec<String> = found
                    .iter()
                    .map(|c| format!("  {}: {}", one.outer(&c.path), c.reason))
                    .collect();
                return Err(ToolError::CommitConflicts {
                    path,
                    count: list.len(),
                    list: list.join("\n"),
                });
            }
            Ok(Staged::Failed {
                path: failed,
                error,
                restored,
                not_restored,
            }) => {
                let mut restored: Vec<VirtualPath> =
                    restored.iter().map(|p| one.outer(p)).collect();
                let mut not_restored: Vec<(VirtualPath, String)> = not_restored
                    .iter()
                    .map(|(p, e)| (one.outer(p), e.to_string()))
                    .collect();
                let (others_restored, others_not_restored) = undo_stages(staged).await;
                restored.extend(others_restored);
                not_restored.extend(others_not_restored);
                return Err(ToolError::PartialFailure {
                    message: failure_message(
                        &path,
                        &one.outer(&failed),
                        &error.map_path(|p| p.under(&one.prefix)),
                        &restored,
                        &not_restored,
                    ),
                });
            }
        }
    }
    // The decision, on the deciding journal; then the journals go, the primary's last.
    let decider = roles
        .iter()
        .position(|r| matches!(r, JournalRole::Primary { .. }))
        .or_else(|| {
            staged
                .iter()
                .position(|(_, stage)| stage.journal_location().is_some())
        });
    if let Some((one, stage)) = decider.and_then(|d| staged.get(d))
        && let Err(error) = stage.decide().await
    {
        let error = error.map_path(|p| p.under(&one.prefix));
        undo_stages(staged).await;
        return Err(error.into());
    }
    let mut closed = true;
    for (k, (_, stage)) in staged.iter().enumerate() {
        if Some(k) != decider {
            closed &= stage.close_journal().await;
        }
    }
    // The decider's journal goes last, and drops the decision: only once no other journal of
    // the change is left to wait for it (else the next start rolls it forward).
    if closed && let Some((_, stage)) = decider.and_then(|d| staged.get(d)) {
        stage.close_journal().await;
    }
    let mut written = Vec::new();
    let mut kept = Vec::new();
    for (one, stage) in staged {
        let (files, kept_dirs) = stage
            .finish()
            .await
            .map_err(|e| e.map_path(|p| p.under(&one.prefix)))?;
        written.extend(
            files
                .iter()
                .map(|change| (one.outer(&change.path), change.kind)),
        );
        kept.extend(kept_dirs.iter().map(|dir| one.outer(dir)));
    }
    let (files, mut text) = listed_changes(
        &mut written,
        format!("Nothing to commit under {path}: the layer holds no changes there."),
        |count, s| format!("Committed {count} file{s} under {path} to the base directory:\n"),
    );
    for dir in &kept {
        text.push_str(&format!(
            "Kept directory {dir} in the base: it holds files created there by someone else since it was deleted here.\n"
        ));
    }
    Ok(ToolReply {
        structured: Some(
            json!({ "files": files, "total": written.len(), "kept_directories": kept.iter().map(|d| d.as_str()).collect::<Vec<_>>() }),
        ),
        ..ToolReply::text(crate::ground::text::truncate::cap_result(text))
    })
}

/// Each reached overlay's place in the commit's journals: alone when one base keeps a
/// journal; else the last such base is the primary (its journal, named here, decides) and the
/// others its secondaries. Bases without a journal are `Alone` (theirs is `None` anyway).
fn journal_roles(reached: &[Reached]) -> Vec<JournalRole> {
    let hosts: Vec<Option<&std::path::Path>> = reached
        .iter()
        .map(|one| one.overlay.base().host_dir())
        .collect();
    let journaled = hosts.iter().filter(|h| h.is_some()).count();
    let primary = hosts.iter().rposition(Option::is_some);
    match primary {
        Some(primary) if journaled > 1 => {
            let change = change_id();
            hosts
                .iter()
                .enumerate()
                .map(|(k, host)| match host {
                    _ if k == primary => JournalRole::Primary {
                        change: change.clone(),
                    },
                    Some(_) => JournalRole::Secondary {
                        change: change.clone(),
                    },
                    None => JournalRole::Alone,
                })
                .collect()
        }
        _ => vec![JournalRole::Alone; reached.len()],
    }
}

/// Undoes the stages of the overlays staged so far, last first: the files put back, and
/// those that could not be with why, in the agent's coordinates.
async fn undo_stages(
    staged: Vec<(&Reached, StagedCommit<'_>)>,
) -> (Vec<VirtualPath>, Vec<(VirtualPath, String)>) {
    let mut restored = Vec::new();
    let mut not_restored = Vec::new();
    for (one, stage) in staged.into_iter().rev() {
        let (back, not_back) = stage.undo().await;
        restored.extend(back.iter().map(|p| one.outer(p)));
        not_restored.extend(not_back.iter().map(|(p, e)| (one.outer(p), e.to_string())));
    }
    (restored, not_restored)
}

/// The answer to a commit that failed part-way: which file, why, what was put back (in every
/// overlay mount the commit reached), and what to do.
fn failure_message(
    path: &VirtualPath,
    failed: &VirtualPath,
    error: &crate::storage::backend::Error,
    restored: &[VirtualPath],
    not_restored: &[(VirtualPath, String)],
) -> String {
    let cause = error.to_string();
    let cause = cause.strip_prefix("Error: ").unwrap_or(&cause);
    let mut text = format!(
        "Error: commit under {path} failed at {failed}: {cause}
"
    );
    if not_restored.is_empty() {
        text.push_str(&format!(
            "Nothing was committed: the {} base file(s) written before it were put back as they were, and the layer keeps all its changes (see changes).
",
            restored.len()
        ));
    } else {
        text.push_str(&format!(
            "{} base file(s) written before it were put back; these could not be and now hold the layer's version:
",
            restored.len()
        ));
        for (p, why) in not_restored {
            text.push_str(&format!(
                "  {p}: {why}
"
            ));
        }
        text.push_str(
            "The layer keeps all its changes (see changes).
",
        );
    }
    text.push_str(&format!(
        "Fix the cause in the base directory (e.g. remove what is in the way of {failed}, free space, or give write permission), then run commit again; or run discard on {failed} and commit the rest."
    ));
    crate::ground::text::truncate::cap_result(text)
}
