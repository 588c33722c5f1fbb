//! Recording a change: the one place a finished tool call becomes an audit entry.
//!
//! While a call runs, the change primitive's recording step notes each file it changed, with its
//! versions before and after (and a created file's diff), in the call's trail
//! ([`crate::state::call_trail`]); a tool notes what no file says (execute's directory and command, a
//! commit's mount). When the call has succeeded, the server hands that report, the answer and the
//! call's [`Origin`] to [`change_of`], which builds the one entry: the diff is the one the tool
//! already made for its answer (no second diff, no second read of a huge file), cut at 64 KiB.
//! The call's arguments are not read again.

use std::time::SystemTime;

use serde_json::Value;

use crate::change::ToolReply;
use crate::ground::path::VirtualPath;
use crate::state::call_trail::{Collected, Touched};
pub use crate::storage::audit::Origin;
use crate::storage::audit::{
    Change, ClientInfo, FileChange, MAX_FILES_PER_ENTRY, cap_diff, count_diff_lines,
};

/// The entry of a change of `files` files by `tool` on the mount `prefix` that a crash of the
/// server cut short, resolved when the next start opened the mount: `rolled_back` (nothing of
/// it stands; its call was never recorded, as it never answered) or completed (it had been
/// decided: the change stands, and this is its only entry, as its call never answered either).
pub fn recovery_change(tool: &str, prefix: &str, paths: &[String], rolled_back: bool) -> Change {
    let files = paths.len();
    let summary = if rolled_back {
        format!(
            "Rolled back at start: a change of {files} file(s) on {prefix} by {tool} was cut short by a crash of the server; those files are as before it."
        )
    } else {
        format!(
            "Completed at start: a change of {files} file(s) on {prefix} by {tool} had been decided when the server crashed; it stands."
        )
    };
    Change {
        time: SystemTime::now(),
        principal: crate::storage::audit::SERVER_PRINCIPAL.to_owned(),
        workspace: format!("start-up pid {}", std::process::id()),
        client: ClientInfo::default(),
        tool: tool.to_owned(),
        request_id: String::new(),
        files: paths
            .iter()
            .take(MAX_FILES_PER_ENTRY)
            .map(|path| FileChange {
                path: path.clone(),
                before: None,
                after: None,
            })
            .collect(),
        more_files: files.saturating_sub(MAX_FILES_PER_ENTRY) as u64,
        lines_added: 0,
        lines_removed: 0,
        summary,
        command: None,
        exit_code: None,
        diff: String::new(),
        diff_truncated: false,
        private: false,
    }
}

/// The entry of a successful call of `tool`, or `None` when the tool changes nothing, built
/// from the call's report (`changed`, see [`crate::state::call_trail`]) and its answer; the call's
/// arguments are not read again. Its files are those the report noted with their versions; when
/// it noted none, the files the answer lists (apply_patch), else the paths the call removed or
/// moved whole (`touched`), else what the tool named as its scope (execute's directory, a
/// commit's mount), without versions.
pub fn change_of(
    tool: &str,
    reply: &ToolReply,
    changed: Collected,
    touched: &[Touched],
    origin: &Origin,
) -> Option<Change> {
    if !crate::tools::table::changes_files(tool) {
        return None;
    }
    let Collected {
        mut files,
        more_files,
        scope,
        created,
        command,
        confirmation,
        ..
    } = changed;
    let structured = reply.structured.as_ref();
    if files.is_empty() {
        files = answered_paths(structured);
    }
    if files.is_empty() {
        files = unversioned(touched.iter().map(|t| &t.path));
    }
    if files.is_empty() {
        files = unversioned(scope.iter());
    }
    let diff = structured
        .and_then(|s| s.get("diff"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let cut_by_tool = structured
        .and_then(|s| s.get("diff_truncated"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let (diff, diff_truncated, counts) = match created {
        // A file the call created, when its tool shows no diff (write_file): its content as
        // added lines, as the change primitive made it.
        Some(created) if diff.is_empty() && tool == "write_file" => {
            (created.diff, created.cut, Some((created.lines, 0)))
        }
        _ => {
            let (diff, cut) = cap_diff(diff, cut_by_tool);
            (diff, cut, line_counts(structured))
        }
    };
    let (lines_added, lines_removed) = counts.unwrap_or_else(|| count_diff_lines(&diff));
    let exit_code = structured
        .filter(|_| command.is_some())
        .and_then(|s| s.get("exit_code"))
        .and_then(Value::as_i64);
    Some(Change {
        time: SystemTime::now(),
        principal: origin.principal.clone(),
        workspace: origin.workspace.clone(),
        client: origin.client.clone(),
        tool: tool.to_owned(),
        request_id: origin.request_id.clone(),
        files,
        more_files,
        lines_added,
        lines_removed,
        summary: with_confirmation(reply.text.lines().next().unwrap_or_default(), confirmation),
        command,
        exit_code,
        diff,
        diff_truncated,
        // Set by the server, which knows the mounts (`mark_private`).
        private: false,
    })
}

/// An answer's first line, and what the person said when asked first (`--confirm`).
fn with_confirmation(first_line: &str, confirmation: Option<String>) -> String {
    match confirmation {
        Some(confirmation) => format!("{first_line} [{confirmation}]"),
        None => first_line.to_owned(),
    }
}

/// The entry of a call of `tool` that changed nothing because the person did not confirm it
/// (`--confirm`: declined, cancelled, unanswered): the question and the answer in its summary,
/// the paths the tool named as its scope, no diff. `None` when nobody was asked.
pub fn unconfirmed_change(tool: &str, changed: Collected, origin: &Origin) -> Option<Change> {
    let confirmation = changed.confirmation?;
    Some(Change {
        time: SystemTime::now(),
        principal: origin.principal.clone(),
        workspace: origin.workspace.clone(),
        client: origin.client.clone(),
        tool: tool.to_owned(),
        request_id: origin.request_id.clone(),
        files: unversioned(changed.scope.iter()),
        more_files: 0,
        lines_added: 0,
        lines_removed: 0,
        summary: format!("Nothing changed: {confirmation}"),
        command: changed.command,
        exit_code: None,
        diff: String::new(),
        diff_truncated: false,
        // Set by the server, which knows the mounts (`mark_private`).
        private: false,
    })
}

/// Marks `change` private to its workspace ([`Change::private`]) when it ran a command or any
/// path it touched lies in a mount private to the workspace that made it (`in_private_mount`:
/// the server's mount table knows which).
pub fn mark_private(
    change: &mut Change,
    touched: &[Touched],
    in_private_mount: impl Fn(&str) -> bool,
) {
    change.private = change.command.is_some()
        || change.files.iter().any(|file| in_private_mount(&file.path))
        || touched.iter().any(|t| in_private_mount(t.path.as_str()));
}

/// `paths` as files of an entry without versions, at most [`MAX_FILES_PER_ENTRY`].
fn unversioned<'p>(paths: impl Iterator<Item = &'p VirtualPath>) -> Vec<FileChange> {
    paths
        .take(MAX_FILES_PER_ENTRY)
        .map(|path| FileChange {
            path: path.as_str().to_owned(),
            before: None,
            after: None,
        })
        .collect()
}

/// Lines added and removed as the answer counts them: at its top level, or summed over its
/// `files` (apply_patch).
fn line_counts(structured: Option<&Value>) -> Option<(u64, u64)> {
    let structured = structured?;
    let pair = |v: &Value| {
        Some((
            v.get("lines_added")?.as_u64()?,
            v.get("lines_removed")?.as_u64()?,
        ))
    };
    if let Some(counts) = pair(structured) {
        return Some(counts);
    }
    let files = structured.get("files")?.as_array()?;
    files.iter().map(pair).try_fold((0, 0), |(a, r), counts| {
        counts.map(|(added, removed)| (a + added, r + removed))
    })
}

/// The files an answer lists (`files: [{path, version}]`, apply_patch), without versions
/// before.
fn answered_paths(structured: Option<&Value>) -> Vec<FileChange> {
    let Some(files) = structured
        .and_then(|s| s.get("files"))
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    files
        .iter()
        .filter_map(|file| {
            Some(FileChange {
                path: file.get("path")?.as_str()?.to_owned(),
                before: None,
                after: file
                    .get("version")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            })
        })
        .take(MAX_FILES_PER_ENTRY)
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::state::call_trail::CallTrail;
    use crate::storage::backend::Version;

    fn p(text: &str) -> VirtualPath {
        VirtualPath::parse(text).unwrap()
    }

    fn v(text: &str) -> Version {
        Version::from_raw(text)
    }

    #[test]
    fn an_entry_reuses_the_answers_diff_and_counts() {
        let reply = ToolReply {
            text: "Edited /a (1 occurrence).\nmore".into(),
            structured: Some(json!({
                "path": "/a", "version": "2", "lines_added": 1, "lines_removed": 1,
                "diff": "--- /a\n+++ /a\n@@ -1 +1 @@\n-x\n+y\n", "diff_truncated": false
            })),
            image: None,
            file: None,
        };
        let trail = CallTrail::new(true);
        trail.note_file(&p("/a"), Some(&v("1")), Some(&v("2")));
        let files = vec![FileChange {
            path: "/a".into(),
            before: Some("1".into()),
            after: Some("2".into()),
        }];
        let origin = Origin {
            request_id: "5".into(),
            ..Origin::default()
        };
        let change = change_of("edit_file", &reply, trail.take(), &[], &origin)
            .expect("edit_file is a change");
        assert_eq!(change.files, files);
        assert_eq!(change.summary, "Edited /a (1 occurrence).");
        assert_eq!((change.lines_added, change.lines_removed), (1, 1));
        assert!(change.diff.contains("-x\n+y"));
        assert_eq!(change.request_id, "5");
        assert!(change_of("read_file", &reply, Collected::default(), &[], &origin).is_none());
    }

    #[test]
    fn execute_is_one_entry_with_its_command_and_exit_code() {
        let reply = ToolReply {
            text: "exit code 3".into(),
            structured: Some(json!({"exit_code": 3, "stdout": "", "stderr": ""})),
            image: None,
            file: None,
        };
        let trail = CallTrail::new(true);
        trail.note_scope(&p("/src"));
        trail.note_command("make test");
        let change = change_of("execute", &reply, trail.take(), &[], &Origin::default()).unwrap();
        assert_eq!(change.command.as_deref(), Some("make test"));
        assert_eq!(change.exit_code, Some(3));
        assert_eq!(change.files[0].path, "/src");
        assert!(change.diff.is_empty());
    }

    #[test]
    fn a_directory_removed_whole_is_named_by_the_paths_the_call_touched() {
        let reply = ToolReply::text("Deleted /gone (directory).");
        let touched = [Touched {
            path: p("/gone"),
            listing: true,
        }];
        let change = change_of(
            "delete",
            &reply,
            Collected::default(),
            &touched,
            &Origin::default(),
        )
        .unwrap();
        assert_eq!(change.files.len(), 1);
        assert_eq!(change.files[0].path, "/gone");
        assert_eq!(change.files[0].before, None);
    }

    #[test]
    fn a_created_file_is_logged_as_every_line_added_within_the_cap() {
        let reply = ToolReply {
            text: "Created /n.txt (2 lines, 4 bytes).".into(),
            structured: Some(
                json!({"path": "/n.txt", "version": "1", "created": true, "bytes": 4}),
            ),
            image: None,
            file: None,
        };
        let created = |content: &str| {
            let trail = CallTrail::new(true);
            trail.note_file(&p("/n.txt"), None, Some(&v("1")));
            trail.note_created(&p("/n.txt"), content);
            trail.take()
        };
        let change = change_of(
            "write_file",
            &reply,
            created("a\nb"),
            &[],
            &Origin::default(),
        )
        .unwrap();
        assert_eq!(
            change.diff,
            "--- /dev/null\n+++ /n.txt\n@@ -0,0 +1,2 @@\n+a\n+b\n\\ No newline at end of file\n"
        );
        assert_eq!((change.lines_added, change.lines_removed), (2, 0));
        let huge = "line\n".repeat(1_000_000);
        let change = change_of(
            "write_file",
            &reply,
            created(&huge),
            &[],
            &Origin::default(),
        )
        .unwrap();
        assert!(change.diff_truncated);
        assert!(change.diff.len() <= crate::storage::audit::MAX_DIFF_BYTES);
        assert_eq!(change.lines_added, 1_000_000);
    }

    #[test]
    fn apply_patch_counts_are_summed_over_its_files() {
        let structured = json!({"files": [
            {"lines_added": 2, "lines_removed": 1}, {"lines_added": 0, "lines_removed": 4}
        ]});
        assert_eq!(line_counts(Some(&structured)), Some((2, 5)));
    }
}
