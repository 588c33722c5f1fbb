//! A directory the server cannot read (no permission; the same path serves "no file handle
//! left") is named in `glob` and `grep` answers, text and `skipped`, with the mount's prefix:
//! its files were not searched, and the agent is told so instead of reading a silently short
//! answer. The rest of the tree is searched.
//!
//! The server runs as `nobody` when the tests run as root (root reads every directory).

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;

use serde_json::{Value, json};

use crate::support::stdio::StdioClient;

/// The uid/gid the server runs as when the tests run as root.
const NOBODY: u32 = 65534;

fn put(root: &Path, relative: &str, content: &str) {
    let path = root.join(relative);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A server over `tree` mounted at `/proj` (beside a memory mount at `/`), as a user who
/// cannot read the directories made mode 000.
fn server(tree: &Path) -> StdioClient {
    let disk = format!("/proj=disk:{}", tree.display());
    let home = tree.parent().unwrap();
    let mut command = crate::support::mountfs_command(
        Path::new("/"),
        &["--mount", "/=memory", "--mount", &disk, "--audit", "off"],
        &[("HOME", home), ("XDG_DATA_HOME", home)],
    );
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        command.uid(NOBODY).gid(NOBODY);
    }
    let mut client = StdioClient::spawn_command(command);
    client.handshake();
    client
}

/// The tree in a directory anyone may enter, with its files readable by anyone.
fn open_tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    set_mode(dir.path(), 0o755);
    dir
}

fn skipped_paths(result: &Value) -> Vec<String> {
    // Absent when nothing was skipped (issue 45: each fact once).
    result["structuredContent"]
        .get("skipped")
        .map(|s| {
            s.as_array()
                .unwrap_or_else(|| panic!("skipped is not a list: {result}"))
                .clone()
        })
        .unwrap_or_default()
        .iter()
        .map(|s| s["path"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn glob_and_grep_name_the_directories_they_could_not_read() {
    let dir = open_tree();
    let tree = dir.path().join("tree");
    put(&tree, "a/ok.txt", "needle here\n");
    put(&tree, "locked/secret.txt", "needle secret\n");
    put(&tree, "deep/x/shut/inner.txt", "needle inner\n");
    for path in ["", "a", "deep", "deep/x"] {
        set_mode(&tree.join(path), 0o755);
    }
    set_mode(&tree.join("a/ok.txt"), 0o644);
    set_mode(&tree.join("locked"), 0o000);
    set_mode(&tree.join("deep/x/shut"), 0o000);
    let mut client = server(&tree);

    let reason = "could not read this directory: Permission denied (os error 13); the files below \
                  it were not searched (check its permissions, or the server's open-file limit)";
    let grep = client.call(
        "grep",
        json!({"pattern": "needle", "output_mode": "files_with_matches"}),
    );
    let text = grep["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("/proj/a/ok.txt"), "{text}");
    assert!(!text.contains("secret.txt"), "{text}");
    for locked in ["/proj/deep/x/shut", "/proj/locked"] {
        assert!(
            text.contains(&format!("[skipped {locked}: {reason}]")),
            "{locked} named with why: {text}"
        );
    }
    assert_eq!(
        skipped_paths(&grep),
        ["/proj/deep/x/shut", "/proj/locked"],
        "{grep}"
    );
    assert_eq!(
        grep["structuredContent"]["skipped"][1]["reason"], reason,
        "{grep}"
    );

    let glob = client.call("glob", json!({"pattern": "**/*.txt", "path": "/proj"}));
    let text = glob["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("/proj/a/ok.txt"), "{text}");
    assert!(
        text.contains(&format!("[skipped /proj/locked: {reason}]")),
        "{text}"
    );
    assert_eq!(
        skipped_paths(&glob),
        ["/proj/deep/x/shut", "/proj/locked"],
        "{glob}"
    );
    assert_eq!(glob["structuredContent"]["total"], 1, "{glob}");

    // A search that meets no locked directory says nothing of them.
    let clean = client.call("glob", json!({"pattern": "*.txt", "path": "/proj/a"}));
    assert_eq!(skipped_paths(&clean), Vec::<String>::new(), "{clean}");
    assert!(client.finish().success());

    for path in ["locked", "deep/x/shut"] {
        set_mode(&tree.join(path), 0o755);
    }
}

#[test]
fn many_unreadable_directories_are_named_up_to_twenty_and_counted() {
    let dir = open_tree();
    let tree = dir.path().join("tree");
    for i in 0..25 {
        put(&tree, &format!("d{i:02}/f.txt"), "needle\n");
    }
    set_mode(&tree, 0o755);
    for i in 0..25 {
        set_mode(&tree.join(format!("d{i:02}")), 0o000);
    }
    let mut client = server(&tree);
    for (tool, args) in [
        ("grep", json!({"pattern": "needle", "path": "/proj"})),
        ("glob", json!({"pattern": "**/*", "path": "/proj"})),
    ] {
        let result = client.call(tool, args);
        let text = result["content"][0]["text"].as_str().unwrap();
        let named = skipped_paths(&result);
        assert_eq!(named.len(), 20, "{tool}: {result}");
        let mut sorted = named.clone();
        sorted.sort();
        assert_eq!(named, sorted, "{tool}: in path order: {result}");
        assert!(named.iter().all(|p| p.starts_with("/proj/d")), "{result}");
        assert!(
            text.contains("[5 more directories could not be read; their files were not searched]"),
            "{tool}: {text}"
        );
    }
    assert!(client.finish().success());
    for i in 0..25 {
        set_mode(&tree.join(format!("d{i:02}")), 0o755);
    }
}
