//! The disk backend's containment, attacked through the MCP tools: `..` in every position,
//! encoded and look-alike separators, the reference server's CVE shapes (a sibling directory
//! sharing the root's name as prefix; symlinks pointing out), symlink chains, new nested paths
//! under an outward symlink, check-then-use races driven by a second thread, FIFOs, hard links,
//! devices, very long paths and names with newlines.
//!
//! Every case runs in a fresh temporary directory holding the mount `root/` and, beside it,
//! `outside/` and `root_evil/` full of secrets. After the attack the test compares everything
//! outside `root/` byte for byte with a snapshot taken before (contents, modes, symlink
//! targets, the set of names): nothing may have been read out, listed, created, changed or
//! deleted there; and no answer may carry a secret or a host path.
//! Most cases call the tools in-process on a `Session`; the `stdio_` ones go through the real
//! binary.

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use mountfs::ground::path::VirtualPath;
use mountfs::state::session::{Session, WriteOptions};
use mountfs::storage::backend::{
    Backend, CompositeBackend, DeleteOptions, DiskBackend, DiskOptions, MemoryBackend, Mount,
    Rename,
};
use serde_json::{Value, json};

/// Marks every byte of secret content; no answer may contain it.
const SECRET: &str = "TOP-SECRET-7f3a";
const OUTSIDE_MARK: &str = "outside-only-name";

struct Harness {
    base: tempfile::TempDir,
    session: Session,
    backend: Arc<DiskBackend>,
    before: BTreeMap<PathBuf, String>,
}

fn root_of(base: &Path) -> PathBuf {
    base.join("root")
}

/// A description of everything under `dir` except the mount root: name → kind, mode, content.
fn snapshot(base: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![base.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path == root_of(base) {
                continue;
            }
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let rel = path.strip_prefix(base).unwrap().to_path_buf();
            let description = if meta.file_type().is_symlink() {
                format!("link -> {}", std::fs::read_link(&path).unwrap().display())
            } else if meta.is_dir() {
                stack.push(path.clone());
                format!("dir {:o}", meta.mode())
            } else if meta.is_file() {
                format!(
                    "file {:o} nlink={} {:?}",
                    meta.mode(),
                    meta.nlink(),
                    std::fs::read(&path).unwrap()
                )
            } else {
                format!("special {:o}", meta.mode())
            };
            out.insert(rel, description);
        }
    }
    out
}

impl Harness {
    fn new() -> Self {
        let base = tempfile::tempdir().unwrap();
        let b = base.path();
        let secret = format!("{SECRET}\nline two {SECRET}\n");
        for dir in ["root/a/b", "root/deep/er", "outside/dir", "root_evil"] {
            std::fs::create_dir_all(b.join(dir)).unwrap();
        }
        std::fs::write(b.join("outside/secret.txt"), &secret).unwrap();
        std::fs::write(b.join(format!("outside/{OUTSIDE_MARK}.txt")), &secret).unwrap();
        std::fs::write(b.join("outside/dir/x.txt"), &secret).unwrap();
        // A hard link's content is the same file's wherever it lies: reading it is allowed.
        std::fs::write(b.join("outside/hard_target.txt"), "shared by a hard link\n").unwrap();
        std::fs::write(b.join("root_evil/evil.txt"), &secret).unwrap();
        std::fs::write(b.join("root/a/b/inside.txt"), "inside text\n").unwrap();
        std::fs::write(b.join("root/readme.md"), "hello\n").unwrap();
        let r = root_of(b);
        let link = |target: &Path, name: &str| symlink(target, r.join(name)).unwrap();
        link(&b.join("outside/secret.txt"), "abs_link");
        link(&b.join("outside"), "abs_dir");
        link(Path::new("../outside/secret.txt"), "rel_up");
        link(Path::new("../outside"), "rel_dir_up");
        link(Path::new("../../outside/secret.txt"), "deep/rel");
        link(Path::new("chain2"), "chain1");
        link(Path::new("a/../chain3"), "chain2");
        link(Path::new("rel_up"), "chain3");
        link(Path::new("chain_dir2"), "chain_dir1");
        link(Path::new("rel_dir_up"), "chain_dir2");
        link(Path::new("../root_evil"), "evil_prefix");
        link(&r, "abs_self");
        link(Path::new("/proc/self/root"), "proc_link");
        link(Path::new("a/../../outside"), "dotdot_inside");
        link(Path::new("loop"), "loop");
        link(Path::new("a/b/inside.txt"), "good_link");
        link(Path::new("a/b"), "good_dir_link");
        std::fs::hard_link(b.join("outside/hard_target.txt"), r.join("hard")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            r.join("fifo"),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        let backend =
            Arc::new(DiskBackend::open_without_sweep(&r, DiskOptions::default()).unwrap());
        let composite = CompositeBackend::new(
            vec![Mount {
                prefix: VirtualPath::root(),
                backend: backend.clone(),
                read_only: false,
            }],
            || Arc::new(MemoryBackend::new()),
        );
        let session = Session::new(Arc::new(composite), WriteOptions::default());
        let before = snapshot(b);
        Self {
            base,
            session,
            backend,
            before,
        }
    }

    fn base(&self) -> &Path {
        self.base.path()
    }

    fn root(&self) -> PathBuf {
        root_of(self.base())
    }

    /// Calls a tool (bounded in time: nothing may block); checks the answer leaks nothing.
    async fn call(&self, tool: &str, args: Value) -> Result<String, String> {
        self.call_echoing(tool, args, false).await
    }

    /// [`Harness::call`] for inputs that themselves spell a host path: the answer may echo
    /// the input (as a virtual path), so only secrets are checked.
    async fn call_echoing(&self, tool: &str, args: Value, echoes: bool) -> Result<String, String> {
        let call = crate::support::backends::call(tool, args.clone(), &self.session);
        let result = tokio::time::timeout(Duration::from_secs(10), call)
            .await
            .unwrap_or_else(|_| panic!("{tool}({args}) hung"));
        let text = match &result {
            Ok(reply) => reply.text.clone(),
            Err(error) => error.to_string(),
        };
        if echoes {
            assert!(
                !text.contains(SECRET),
                "{tool}({args}) leaked a secret: {text}"
            );
        } else {
            self.assert_no_leak(&text, &format!("{tool}({args})"));
        }
        result.map(|r| r.text).map_err(|e| e.to_string())
    }

    fn assert_no_leak(&self, text: &str, what: &str) {
        assert!(!text.contains(SECRET), "{what} leaked a secret: {text}");
        assert!(
            !text.contains(OUTSIDE_MARK),
            "{what} listed outside: {text}"
        );
        let host = self.base().to_string_lossy().into_owned();
        assert!(!text.contains(&host), "{what} leaked a host path: {text}");
    }

    /// The call must fail, and its error must contain `expected`.
    async fn refused(&self, tool: &str, args: Value, expected: &str) {
        match self.call(tool, args.clone()).await {
            Ok(text) => panic!("{tool}({args}) should fail but said: {text}"),
            Err(error) => assert!(
                error.contains(expected),
                "{tool}({args}): expected '{expected}' in: {error}"
            ),
        }
    }

    /// Outside the root, nothing changed.
    fn check_outside(&self) {
        let after = snapshot(self.base());
        assert_eq!(self.before, after, "something outside the mount changed");
    }
}

const OUTSIDE: &str = "resolves outside the mount";
const DOTDOT: &str = "'..' components are not allowed";
const NOT_FOUND: &str = "File not found";

/// One attack per test: `attack!(name, |h| async move { ... })`, with the outside checked after.
macro_rules! attack {
    ($name:ident, $h:ident => $body:expr) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let $h = Harness::new();
            $body;
            $h.check_outside();
        }
    };
}

// ---- `..` in every position -------------------------------------------------------------

attack!(dotdot_leading_relative, h => h.refused("read_file", json!({"file_path": "../outside/secret.txt"}), DOTDOT).await);
attack!(dotdot_leading_absolute, h => h.refused("read_file", json!({"file_path": "/../outside/secret.txt"}), DOTDOT).await);
attack!(dotdot_in_the_middle, h => h.refused("read_file", json!({"file_path": "/a/../../outside/secret.txt"}), DOTDOT).await);
attack!(dotdot_trailing, h => h.refused("ls", json!({"path": "/a/.."}), DOTDOT).await);
attack!(dotdot_alone, h => h.refused("ls", json!({"path": ".."}), DOTDOT).await);
attack!(dotdot_repeated, h => h.refused("read_file", json!({"file_path": "a/b/../../../../../../etc/passwd"}), DOTDOT).await);
attack!(dotdot_write, h => h.refused("write_file", json!({"file_path": "../outside/new.txt", "content": "x"}), DOTDOT).await);
attack!(dotdot_write_overwrite, h => h.refused("write_file", json!({"file_path": "/a/../../outside/secret.txt", "content": "x"}), DOTDOT).await);
attack!(dotdot_edit, h => h.refused("edit_file", json!({"file_path": "/../outside/secret.txt", "old_string": SECRET, "new_string": "x"}), DOTDOT).await);
attack!(dotdot_multi_edit, h => h.refused("multi_edit", json!({"file_path": "/../outside/secret.txt", "edits": [{"old_string": SECRET, "new_string": "x"}]}), DOTDOT).await);
attack!(dotdot_glob_path, h => h.refused("glob", json!({"pattern": "*", "path": "/.."}), DOTDOT).await);
attack!(dotdot_grep_path, h => h.refused("grep", json!({"pattern": "SECRET", "path": "/../outside"}), DOTDOT).await);
attack!(dotdot_in_glob_pattern_matches_nothing_outside, h => {
    for pattern in ["../outside/*", "../**", "/../../**/*.txt", "**/../../outside/*"] {
        let _ = h.call("glob", json!({"pattern": pattern})).await;
    }
});
attack!(dotdot_in_grep_filter_matches_nothing_outside, h => {
    let _ = h.call("grep", json!({"pattern": "SECRET", "glob": "../**"})).await;
    let _ = h.call("grep", json!({"pattern": "SECRET", "glob": "../outside/*.txt"})).await;
});

// ---- encoded and look-alike separators --------------------------------------------------

attack!(percent_encoded_dots_are_plain_names, h => h.refused("read_file", json!({"file_path": "%2e%2e/outside/secret.txt"}), NOT_FOUND).await);
attack!(percent_encoded_slashes_are_plain_names, h => h.refused("read_file", json!({"file_path": "..%2f..%2foutside%2fsecret.txt"}), NOT_FOUND).await);
attack!(backslash_traversal_is_refused, h => h.refused("read_file", json!({"file_path": "..\\outside\\secret.txt"}), "backslashes").await);
attack!(windows_drive_is_refused, h => h.refused("read_file", json!({"file_path": "C:\\Windows\\win.ini"}), "drive letters").await);
attack!(unc_path_is_refused, h => h.refused("read_file", json!({"file_path": "\\\\server\\share\\x"}), "UNC").await);
attack!(fullwidth_solidus_is_a_plain_name, h => h.refused("read_file", json!({"file_path": "\u{ff0f}..\u{ff0f}outside\u{ff0f}secret.txt"}), NOT_FOUND).await);
attack!(division_slash_is_a_plain_name, h => h.refused("read_file", json!({"file_path": "..\u{2215}outside\u{2215}secret.txt"}), NOT_FOUND).await);
attack!(fullwidth_dots_are_a_plain_name, h => h.refused("read_file", json!({"file_path": "\u{ff0e}\u{ff0e}/outside/secret.txt"}), NOT_FOUND).await);
attack!(one_dot_leader_is_a_plain_name, h => h.refused("read_file", json!({"file_path": "\u{2024}\u{2024}/outside/secret.txt"}), NOT_FOUND).await);
attack!(lookalike_names_written_stay_inside, h => {
    h.call("write_file", json!({"file_path": "\u{ff0e}\u{ff0e}\u{ff0f}x.txt", "content": "ok"})).await.unwrap();
    assert!(h.root().join("\u{ff0e}\u{ff0e}\u{ff0f}x.txt").is_file());
});
attack!(tilde_is_refused, h => h.refused("read_file", json!({"file_path": "~/.ssh/id_rsa"}), "'~'").await);
attack!(nul_byte_is_refused, h => h.refused("read_file", json!({"file_path": "rel_up\u{0}.txt"}), "NUL").await);

// ---- host paths and the CVE-2025-53110 prefix shape ---------------------------------------

attack!(host_absolute_path_is_a_virtual_path, h => {
    let host = h.base().join("outside/secret.txt");
    let err = h.call_echoing("read_file", json!({"file_path": host.to_str().unwrap()}), true).await.unwrap_err();
    assert!(err.contains("File not found"), "{err}");
});
attack!(host_path_of_sibling_with_root_as_prefix, h => {
    let host = format!("{}_evil/evil.txt", h.root().display());
    let err = h.call_echoing("read_file", json!({"file_path": host}), true).await.unwrap_err();
    assert!(err.contains("File not found"), "{err}");
});
attack!(symlink_to_sibling_with_root_as_prefix, h => h.refused("read_file", json!({"file_path": "/evil_prefix/evil.txt"}), OUTSIDE).await);
attack!(ls_of_symlink_to_sibling_with_root_as_prefix, h => h.refused("ls", json!({"path": "/evil_prefix"}), OUTSIDE).await);
attack!(write_under_symlink_to_sibling_with_root_as_prefix, h => h.refused("write_file", json!({"file_path": "/evil_prefix/planted.txt", "content": "x"}), OUTSIDE).await);

// ---- symlinks leading out (CVE-2025-53109) ------------------------------------------------

attack!(absolute_symlink_to_file, h => h.refused("read_file", json!({"file_path": "/abs_link"}), OUTSIDE).await);
attack!(absolute_symlink_to_directory, h => h.refused("read_file", json!({"file_path": "/abs_dir/secret.txt"}), OUTSIDE).await);
attack!(absolute_symlink_to_directory_listed, h => h.refused("ls", json!({"path": "/abs_dir"}), OUTSIDE).await);
attack!(absolute_symlink_to_the_root_itself_is_refused, h => h.refused("read_file", json!({"file_path": "/abs_self/readme.md"}), OUTSIDE).await);
attack!(relative_symlink_climbing_out, h => h.refused("read_file", json!({"file_path": "/rel_up"}), OUTSIDE).await);
attack!(relative_directory_symlink_climbing_out, h => h.refused("ls", json!({"path": "/rel_dir_up"}), OUTSIDE).await);
attack!(relative_symlink_two_levels_down, h => h.refused("read_file", json!({"file_path": "/deep/rel"}), OUTSIDE).await);
attack!(symlink_with_dotdot_inside_its_target, h => h.refused("read_file", json!({"file_path": "/dotdot_inside/secret.txt"}), OUTSIDE).await);
attack!(symlink_chain_to_a_file_outside, h => h.refused("read_file", json!({"file_path": "/chain1"}), OUTSIDE).await);
attack!(symlink_chain_to_a_directory_outside, h => h.refused("read_file", json!({"file_path": "/chain_dir1/secret.txt"}), OUTSIDE).await);
attack!(magic_link_through_proc, h => h.refused("read_file", json!({"file_path": "/proc_link/etc/hostname"}), OUTSIDE).await);
attack!(proc_path_is_a_virtual_path, h => h.refused("read_file", json!({"file_path": "/proc/self/root/etc/hostname"}), NOT_FOUND).await);
attack!(symlink_loop_is_an_error_not_a_hang, h => assert!(h.call("read_file", json!({"file_path": "/loop"})).await.is_err()));
attack!(overwrite_through_absolute_symlink, h => h.refused("write_file", json!({"file_path": "/abs_link", "content": "pwned"}), OUTSIDE).await);
attack!(overwrite_through_relative_symlink, h => h.refused("write_file", json!({"file_path": "/rel_up", "content": "pwned"}), OUTSIDE).await);
attack!(overwrite_through_symlink_chain, h => h.refused("write_file", json!({"file_path": "/chain1", "content": "pwned"}), OUTSIDE).await);
attack!(create_under_outward_directory_symlink, h => h.refused("write_file", json!({"file_path": "/rel_dir_up/planted.txt", "content": "x"}), OUTSIDE).await);
attack!(create_new_nested_path_under_outward_symlink, h => h.refused("write_file", json!({"file_path": "/abs_dir/new/deeper/planted.txt", "content": "x"}), OUTSIDE).await);
attack!(create_new_nested_path_under_outward_chain, h => h.refused("write_file", json!({"file_path": "/chain_dir1/new/planted.txt", "content": "x"}), OUTSIDE).await);
attack!(overwrite_existing_outside_file_through_directory_symlink, h => h.refused("write_file", json!({"file_path": "/rel_dir_up/dir/x.txt", "content": "x"}), OUTSIDE).await);
attack!(edit_through_outward_symlink, h => h.refused("edit_file", json!({"file_path": "/rel_up", "old_string": SECRET, "new_string": "x"}), OUTSIDE).await);
attack!(multi_edit_through_outward_symlink, h => h.refused("multi_edit", json!({"file_path": "/abs_link", "edits": [{"old_string": SECRET, "new_string": "x"}]}), OUTSIDE).await);
attack!(grep_in_outward_directory_symlink, h => h.refused("grep", json!({"pattern": "SECRET", "path": "/rel_dir_up"}), OUTSIDE).await);
attack!(glob_in_outward_directory_symlink, h => h.refused("glob", json!({"pattern": "*", "path": "/abs_dir"}), OUTSIDE).await);
attack!(grep_of_the_whole_mount_does_not_follow_symlinks_out, h => {
    for mode in ["files_with_matches", "count", "content"] {
        let _ = h.call("grep", json!({"pattern": "SECRET|secret|evil", "output_mode": mode})).await;
    }
});
attack!(glob_of_the_whole_mount_does_not_follow_symlinks_out, h => {
    let text = h.call("glob", json!({"pattern": "**"})).await.unwrap();
    assert!(!text.contains("x.txt") && !text.contains("evil.txt"), "{text}");
});
attack!(ls_hides_outward_symlinks_and_shows_inside_ones, h => {
    let text = h.call("ls", json!({"path": "/"})).await.unwrap();
    assert!(!text.contains("abs_link") && !text.contains("rel_dir_up"), "{text}");
    assert!(text.contains("/good_link (12 bytes)") && text.contains("/good_dir_link/"), "{text}");
});
attack!(symlinks_inside_the_root_work, h => {
    let text = h.call("read_file", json!({"file_path": "/good_link"})).await.unwrap();
    assert!(text.contains("inside text"), "{text}");
    h.call("edit_file", json!({"file_path": "/good_link", "old_string": "inside", "new_string": "changed"})).await.unwrap();
    assert!(std::fs::symlink_metadata(h.root().join("good_link")).unwrap().file_type().is_symlink(), "the link stays a link");
    assert_eq!(std::fs::read_to_string(h.root().join("a/b/inside.txt")).unwrap(), "changed text\n");
    h.call("write_file", json!({"file_path": "/good_dir_link/new.txt", "content": "n"})).await.unwrap();
    assert!(h.root().join("a/b/new.txt").is_file());
});
attack!(delete_through_outward_directory_symlink, h => {
    let path = VirtualPath::parse("/rel_dir_up/secret.txt").unwrap();
    let err = h.backend.delete(&path, &DeleteOptions::default()).await.unwrap_err();
    assert!(err.to_string().contains(OUTSIDE), "{err}");
    let path = VirtualPath::parse("/abs_dir/dir").unwrap();
    let err = h.backend.delete(&path, &DeleteOptions { recursive: true, if_version: None }).await.unwrap_err();
    assert!(err.to_string().contains(OUTSIDE), "{err}");
});
attack!(deleting_an_outward_symlink_removes_only_the_link, h => {
    let path = VirtualPath::parse("/abs_dir").unwrap();
    h.backend.delete(&path, &DeleteOptions { recursive: true, if_version: None }).await.unwrap();
    assert!(std::fs::symlink_metadata(h.root().join("abs_dir")).is_err());
});

// ---- the other changing tools: delete, move, apply_patch, file_info, undo_edit ----------

attack!(delete_tool_through_outward_symlink, h => h.refused("delete", json!({"file_path": "/rel_dir_up/secret.txt"}), OUTSIDE).await);
attack!(delete_tool_recursive_through_outward_chain, h => h.refused("delete", json!({"file_path": "/chain_dir1/dir", "recursive": true}), OUTSIDE).await);
attack!(delete_tool_with_dotdot, h => h.refused("delete", json!({"file_path": "/a/../../outside", "recursive": true}), DOTDOT).await);
attack!(move_out_through_outward_symlink, h => h.refused("move", json!({"source": "/readme.md", "destination": "/abs_dir/stolen.md"}), OUTSIDE).await);
attack!(move_in_from_outside_through_symlink, h => h.refused("move", json!({"source": "/rel_dir_up/secret.txt", "destination": "/stolen.txt"}), OUTSIDE).await);
attack!(move_over_outside_file_with_overwrite, h => h.refused("move", json!({"source": "/readme.md", "destination": "/rel_dir_up/dir/x.txt", "overwrite": true}), OUTSIDE).await);
attack!(move_with_dotdot_destination, h => h.refused("move", json!({"source": "/readme.md", "destination": "/../outside/moved.md"}), DOTDOT).await);
attack!(file_info_through_outward_symlink, h => h.refused("file_info", json!({"file_path": "/abs_link"}), OUTSIDE).await);
attack!(file_info_of_outward_directory_symlink, h => h.refused("file_info", json!({"file_path": "/evil_prefix"}), OUTSIDE).await);
attack!(apply_patch_through_outward_symlink, h => {
    let patch = format!("--- a/rel_dir_up/secret.txt\n+++ b/rel_dir_up/secret.txt\n@@ -1,2 +1,2 @@\n-{SECRET}\n+pwned\n line two {SECRET}\n");
    assert!(h.call("apply_patch", json!({"patch": patch})).await.is_err());
    let patch = "--- /dev/null\n+++ b/abs_dir/planted.txt\n@@ -0,0 +1 @@\n+x\n";
    assert!(h.call("apply_patch", json!({"patch": patch})).await.is_err());
});
attack!(apply_patch_with_dotdot, h => {
    let patch = "--- /dev/null\n+++ b/../outside/planted.txt\n@@ -0,0 +1 @@\n+x\n";
    assert!(h.call("apply_patch", json!({"patch": patch})).await.is_err());
});
attack!(undo_after_the_file_became_an_outward_symlink, h => {
    h.call("write_file", json!({"file_path": "/undo.txt", "content": "one\n"})).await.unwrap();
    h.call("edit_file", json!({"file_path": "/undo.txt", "old_string": "one", "new_string": "two"})).await.unwrap();
    std::fs::remove_file(h.root().join("undo.txt")).unwrap();
    symlink(h.base().join("outside/secret.txt"), h.root().join("undo.txt")).unwrap();
    assert!(h.call("undo_edit", json!({"file_path": "/undo.txt"})).await.is_err());
});

// ---- special files ------------------------------------------------------------------------

attack!(reading_a_fifo_is_refused_without_blocking, h => h.refused("read_file", json!({"file_path": "/fifo"}), "FIFO").await);
attack!(writing_a_fifo_is_refused, h => {
    assert!(h.call("write_file", json!({"file_path": "/fifo", "content": "x"})).await.is_err());
    assert!(std::fs::symlink_metadata(h.root().join("fifo")).unwrap().file_type().is_fifo_like());
});
attack!(grep_over_a_tree_with_a_fifo_does_not_block, h => {
    let _ = h.call("grep", json!({"pattern": "x", "path": "/"})).await;
});
attack!(writing_a_hard_link_is_refused, h => {
    h.call("read_file", json!({"file_path": "/hard"})).await.unwrap();
    h.refused("write_file", json!({"file_path": "/hard", "content": "pwned"}), "hard links").await;
});
attack!(editing_a_hard_link_is_refused, h => {
    h.call("read_file", json!({"file_path": "/hard"})).await.unwrap();
    h.refused("edit_file", json!({"file_path": "/hard", "old_string": "shared", "new_string": "pwned"}), "hard links").await;
    h.refused("multi_edit", json!({"file_path": "/hard", "edits": [{"old_string": "shared", "new_string": "pwned"}]}), "hard links").await;
});
attack!(reading_a_device_is_refused, h => {
    let made = rustix::fs::mknodat(
        rustix::fs::CWD,
        h.root().join("null"),
        rustix::fs::FileType::CharacterDevice,
        rustix::fs::Mode::from_raw_mode(0o666),
        rustix::fs::makedev(1, 3),
    );
    if made.is_ok() {
        h.refused("read_file", json!({"file_path": "/null"}), "character device").await;
        assert!(h.call("write_file", json!({"file_path": "/null", "content": "x"})).await.is_err());
    }
});

// ---- long paths and odd names -------------------------------------------------------------

attack!(very_long_path_is_refused, h => h.refused("read_file", json!({"file_path": format!("/{}", "a/".repeat(2100))}), "4096 bytes").await);
attack!(very_long_component_is_refused, h => h.refused("write_file", json!({"file_path": format!("/{}", "x".repeat(300)), "content": "x"}), "255 bytes").await);
attack!(deep_path_within_limits_stays_inside, h => {
    let deep = format!("/{}f.txt", "d/".repeat(1000));
    h.call("write_file", json!({"file_path": deep, "content": "deep"})).await.unwrap();
    assert!(h.root().join("d/d/d").is_dir());
});
attack!(newline_in_a_name_is_refused_for_new_files_and_shown_escaped, h => {
    h.refused("write_file", json!({"file_path": "/new\nline.txt", "content": "x"}), "U+000A (line feed)").await;
    assert!(!h.root().join("new\nline.txt").exists());
    std::fs::write(h.root().join("new\nline.txt"), "x").unwrap();
    let text = h.call("ls", json!({"path": "/"})).await.unwrap();
    assert!(text.contains("/new\\u{000A}line.txt (1 byte)"), "{text}");
});
attack!(newline_then_dotdot_is_refused, h => h.refused("read_file", json!({"file_path": "/a\n/../../outside/secret.txt"}), DOTDOT).await);
attack!(name_that_looks_like_a_traversal_is_a_plain_name, h => {
    h.call("write_file", json!({"file_path": "/..foo/bar..", "content": "x"})).await.unwrap();
    assert!(h.root().join("..foo/bar..").is_file());
});
attack!(writing_the_root_is_refused, h => assert!(h.call("write_file", json!({"file_path": "/", "content": "x"})).await.is_err()));

// ---- races between check and use ----------------------------------------------------------

/// Flips `root/race` between a real directory and a symlink to `outside/` until stopped.
fn start_flipper(
    root: PathBuf,
    outside: PathBuf,
) -> (Arc<AtomicBool>, std::thread::JoinHandle<()>) {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let handle = std::thread::spawn(move || {
        let race = root.join("race");
        let real = root.join("race_real");
        let link = root.join("race_link");
        std::fs::create_dir_all(&real).unwrap();
        std::fs::write(real.join("secret.txt"), "harmless\n").unwrap();
        let _ = symlink(&outside, &link);
        while !flag.load(Ordering::Relaxed) {
            // Atomic swaps: `race` is always either the directory or the outward symlink.
            let _ = std::fs::rename(&real, &race);
            std::thread::yield_now();
            let _ = std::fs::rename(&race, &real);
            let _ = std::fs::rename(&link, &race);
            std::thread::yield_now();
            let _ = std::fs::rename(&race, &link);
        }
    });
    (stop, handle)
}

attack!(race_reading_through_a_swapped_directory, h => {
    let (stop, flipper) = start_flipper(h.root(), h.base().join("outside"));
    for _ in 0..300 {
        let _ = h.call("read_file", json!({"file_path": "/race/secret.txt"})).await;
        let _ = h.call("ls", json!({"path": "/race"})).await;
    }
    stop.store(true, Ordering::Relaxed);
    flipper.join().unwrap();
});
attack!(race_writing_through_a_swapped_directory, h => {
    let (stop, flipper) = start_flipper(h.root(), h.base().join("outside"));
    for i in 0..300 {
        let _ = h.call("write_file", json!({"file_path": format!("/race/planted{i}.txt"), "content": "x"})).await;
        let _ = h.call("write_file", json!({"file_path": "/race/secret.txt", "content": "pwned"})).await;
    }
    stop.store(true, Ordering::Relaxed);
    flipper.join().unwrap();
});
attack!(race_searching_while_a_directory_is_swapped, h => {
    let (stop, flipper) = start_flipper(h.root(), h.base().join("outside"));
    for _ in 0..60 {
        let _ = h.call("grep", json!({"pattern": "SECRET|harmless", "output_mode": "content"})).await;
        let _ = h.call("glob", json!({"pattern": "**/*.txt"})).await;
        let _ = h.call("grep", json!({"pattern": "SECRET", "path": "/race"})).await;
    }
    stop.store(true, Ordering::Relaxed);
    flipper.join().unwrap();
});
attack!(race_file_swapped_for_outward_symlink_between_read_and_edit, h => {
    std::fs::write(h.root().join("swap.txt"), "mine\n").unwrap();
    h.call("read_file", json!({"file_path": "/swap.txt"})).await.unwrap();
    std::fs::remove_file(h.root().join("swap.txt")).unwrap();
    symlink(h.base().join("outside/secret.txt"), h.root().join("swap.txt")).unwrap();
    h.refused("edit_file", json!({"file_path": "/swap.txt", "old_string": "mine", "new_string": "pwned"}), OUTSIDE).await;
    h.refused("write_file", json!({"file_path": "/swap.txt", "content": "pwned"}), OUTSIDE).await;
});
attack!(race_parent_swapped_for_outward_symlink_between_read_and_write, h => {
    h.call("read_file", json!({"file_path": "/a/b/inside.txt"})).await.unwrap();
    std::fs::rename(h.root().join("a/b"), h.root().join("a/b_moved")).unwrap();
    symlink("../../outside/dir", h.root().join("a/b")).unwrap();
    h.refused("write_file", json!({"file_path": "/a/b/inside.txt", "content": "pwned"}), OUTSIDE).await;
    h.refused("write_file", json!({"file_path": "/a/b/x.txt", "content": "pwned"}), OUTSIDE).await;
});

// ---- move is a rename beneath the root (issue 17) ------------------------------------------

attack!(move_directory_out_through_outward_symlink, h => {
    h.refused("move", json!({"source": "/a", "destination": "/abs_dir/stolen"}), OUTSIDE).await;
    h.refused("move", json!({"source": "/deep", "destination": "/chain_dir1/new/deeper"}), OUTSIDE).await;
    h.refused("move", json!({"source": "/a", "destination": "/dotdot_inside/a"}), OUTSIDE).await;
    assert!(h.root().join("a/b/inside.txt").is_file() && h.root().join("deep/er").is_dir());
});
attack!(move_directory_in_from_outside_through_symlink, h => {
    h.refused("move", json!({"source": "/rel_dir_up/dir", "destination": "/stolen_dir"}), OUTSIDE).await;
    h.refused("move", json!({"source": "/chain_dir1/dir/x.txt", "destination": "/stolen.txt"}), OUTSIDE).await;
});
attack!(move_directory_with_dotdot, h => {
    h.refused("move", json!({"source": "/a/../../outside", "destination": "/x"}), DOTDOT).await;
    h.refused("move", json!({"source": "/a", "destination": "/a/../../outside/a"}), DOTDOT).await;
});
attack!(rename_on_the_backend_refuses_outward_paths, h => {
    use mountfs::storage::backend::{Error, RenameOptions};
    let p = |s: &str| VirtualPath::parse(s).unwrap();
    for (from, to) in [
        ("/readme.md", "/rel_dir_up/planted.md"),
        ("/readme.md", "/abs_dir/dir/x.txt"),
        ("/rel_dir_up/secret.txt", "/stolen.txt"),
        ("/abs_dir/dir", "/stolen_dir"),
        ("/a", "/chain_dir1/a"),
        ("/a", "/evil_prefix/a"),
    ] {
        let err = h.backend.rename(&p(from), &p(to), &RenameOptions::default()).await.unwrap_err();
        assert!(matches!(err, Error::OutsideMount { .. }), "rename {from} -> {to}: {err:?}");
    }
    // Over an outside file, even when told its version.
    let replacing = RenameOptions { if_version: None, replacing: Some(mountfs::storage::backend::Version::of_content(format!("{SECRET}\nline two {SECRET}\n").as_bytes())) };
    let err = h.backend.rename(&p("/readme.md"), &p("/rel_up"), &replacing).await.unwrap_err();
    assert!(matches!(err, Error::OutsideMount { .. }), "{err:?}");
    assert!(h.root().join("readme.md").is_file());
});
attack!(race_parent_swapped_for_outward_symlink_between_read_and_move, h => {
    h.call("read_file", json!({"file_path": "/a/b/inside.txt"})).await.unwrap();
    std::fs::rename(h.root().join("a/b"), h.root().join("a/b_moved")).unwrap();
    symlink("../../outside/dir", h.root().join("a/b")).unwrap();
    h.refused("move", json!({"source": "/a/b/x.txt", "destination": "/stolen.txt"}), OUTSIDE).await;
    h.refused("move", json!({"source": "/readme.md", "destination": "/a/b/planted.md"}), OUTSIDE).await;
    h.refused("move", json!({"source": "/a/b", "destination": "/stolen_dir"}), OUTSIDE).await;
});
attack!(race_moving_through_a_swapped_directory, h => {
    let (stop, flipper) = start_flipper(h.root(), h.base().join("outside"));
    for i in 0..200 {
        std::fs::write(h.root().join("m.txt"), "mine\n").unwrap();
        let _ = h.call("move", json!({"source": "/m.txt", "destination": format!("/race/m{i}.txt")})).await;
        let _ = h.call("move", json!({"source": "/race/secret.txt", "destination": format!("/got{i}.txt")})).await;
        let _ = h.call("move", json!({"source": "/race", "destination": format!("/race_dir{i}")})).await;
    }
    stop.store(true, Ordering::Relaxed);
    flipper.join().unwrap();
});

// ---- through the real binary over stdio ---------------------------------------------------

fn stdio_client(h: &Harness) -> crate::support::stdio::StdioClient {
    let mount = format!("/=disk:{}", h.root().display());
    crate::support::stdio::StdioClient::start(&["--mount", &mount])
}

fn stdio_refused(
    client: &mut crate::support::stdio::StdioClient,
    h: &Harness,
    tool: &str,
    args: Value,
    expected: &str,
) {
    let text = client.err(tool, args.clone());
    h.assert_no_leak(&text, tool);
    assert!(text.contains(expected), "{tool}({args}): {text}");
}

attack!(stdio_symlink_escapes_are_refused, h => {
    let mut client = stdio_client(&h);
    stdio_refused(&mut client, &h, "read_file", json!({"file_path": "/abs_link"}), OUTSIDE);
    stdio_refused(&mut client, &h, "read_file", json!({"file_path": "/chain1"}), OUTSIDE);
    stdio_refused(&mut client, &h, "ls", json!({"path": "/rel_dir_up"}), OUTSIDE);
    stdio_refused(&mut client, &h, "write_file", json!({"file_path": "/abs_dir/new/x.txt", "content": "x"}), OUTSIDE);
    stdio_refused(&mut client, &h, "read_file", json!({"file_path": "/fifo"}), "FIFO");
    client.finish();
});
attack!(stdio_dotdot_and_encodings_are_refused, h => {
    let mut client = stdio_client(&h);
    stdio_refused(&mut client, &h, "read_file", json!({"file_path": "/../outside/secret.txt"}), DOTDOT);
    stdio_refused(&mut client, &h, "write_file", json!({"file_path": "..\\outside\\x", "content": "x"}), "backslashes");
    stdio_refused(&mut client, &h, "grep", json!({"pattern": "x", "path": "/evil_prefix"}), OUTSIDE);
    let text = client.ok("grep", json!({"pattern": "SECRET|inside", "output_mode": "content"}));
    h.assert_no_leak(&text, "grep");
    let text = client.ok("glob", json!({"pattern": "**"}));
    h.assert_no_leak(&text, "glob");
    client.finish();
});

/// `FileType::is_fifo` lives in an extension trait; this keeps the assertion readable.
trait FifoLike {
    fn is_fifo_like(&self) -> bool;
}

impl FifoLike for std::fs::FileType {
    fn is_fifo_like(&self) -> bool {
        use std::os::unix::fs::FileTypeExt;
        self.is_fifo()
    }
}

#[test]
fn new_files_get_0644_less_the_umask() {
    // Not an attack, but the same harness: a created file is not world-writable.
    let h = Harness::new();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime
        .block_on(h.call(
            "write_file",
            json!({"file_path": "/fresh.txt", "content": "x"}),
        ))
        .unwrap();
    let mode = std::fs::metadata(h.root().join("fresh.txt"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o002, 0, "{mode:o}");
    assert_eq!(mode & 0o600, 0o600, "{mode:o}");
}

// ---- review findings ------------------------------------------------------------------------

/// `ignore` opens `.gitignore`/`.ignore` itself, by host path, following symlinks: an ignore
/// file that is a symlink leading out is read, and its content decides what glob/grep show.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_gitignore_symlinked_outside_is_not_read() {
    let mut h = Harness::new();
    std::fs::write(h.base().join("outside/ignore_list"), "readme.md\n").unwrap();
    symlink("../outside/ignore_list", h.root().join(".gitignore")).unwrap();
    h.before = snapshot(h.base());
    let text = h
        .call("glob", json!({"pattern": "**/readme.md"}))
        .await
        .unwrap();
    assert!(
        text.contains("/readme.md"),
        "a file outside the mount decided what glob shows: {text}"
    );
    h.check_outside();
}

/// The same open blocks forever on a FIFO named `.gitignore` (inside the mount, no symlink).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_fifo_named_gitignore_does_not_hang_the_walk() {
    use std::os::unix::fs::OpenOptionsExt;
    let h = Harness::new();
    let fifo = h.root().join("a/.gitignore");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    let call = crate::support::backends::call("glob", json!({"pattern": "**/*.txt"}), &h.session);
    let outcome = tokio::time::timeout(Duration::from_secs(5), call).await;
    // Release a walker thread stuck in open(2), so that the runtime can shut down.
    let _ = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(&fifo);
    assert!(outcome.is_ok(), "glob hung opening a FIFO named .gitignore");
}

/// With write_file alone the agent makes the walk read a host file of its choosing (any
/// `…/info/exclude`): a `.git` *file* holding `gitdir: <host path>` is followed by `ignore` to
/// `<gitdir>/commondir`, and from there to `<commondir>/info/exclude`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_agent_written_git_file_does_not_make_the_walk_read_outside() {
    let mut h = Harness::new();
    let base = h.base().to_path_buf();
    std::fs::create_dir_all(base.join("outside/repo/info")).unwrap();
    std::fs::write(base.join("outside/repo/info/exclude"), "probe.txt\n").unwrap();
    // A `.git` file (as a worktree or submodule has) pointing into the mount. Agents cannot
    // write one (nothing named .git is changed through the tools), so it is already there.
    let gitdir = format!("gitdir: {}\n", h.root().join("fake").display());
    std::fs::create_dir_all(h.root().join("sub")).unwrap();
    std::fs::write(h.root().join("sub/.git"), gitdir).unwrap();
    h.before = snapshot(&base);
    // From here on only tool calls: the agent knows host paths (its working directory).
    let commondir = format!("{}\n", base.join("outside/repo").display());
    h.call_echoing(
        "write_file",
        json!({"file_path": "/fake/commondir", "content": commondir}),
        true,
    )
    .await
    .unwrap();
    h.call(
        "write_file",
        json!({"file_path": "/sub/probe.txt", "content": "x\n"}),
    )
    .await
    .unwrap();
    let text = h
        .call("glob", json!({"pattern": "**/probe.txt"}))
        .await
        .unwrap();
    assert!(
        text.contains("/sub/probe.txt"),
        "glob obeyed outside/repo/info/exclude: {text}"
    );
    h.check_outside();
}

// /good_link -> a/b/inside.txt: the same file under two names.
attack!(review_move_onto_a_symlink_to_the_same_file_keeps_the_content, h => {
    let result = h.call("move", json!({"source": "/a/b/inside.txt", "destination": "/good_link", "overwrite": true})).await;
    let survived = std::fs::read_to_string(h.root().join("a/b/inside.txt")).ok();
    assert_eq!(survived.as_deref(), Some("inside text\n"), "move said {result:?}; the only copy is gone");
});
// /good_dir_link -> a/b: /good_dir_link/inside.txt is /a/b/inside.txt.
attack!(review_move_into_a_symlinked_alias_of_its_own_directory_keeps_the_file, h => {
    let result = h.call("move", json!({"source": "/a/b/inside.txt", "destination": "/good_dir_link/inside.txt", "overwrite": true})).await;
    assert!(h.root().join("a/b/inside.txt").is_file(), "move said {result:?}; the only copy is gone");
});
attack!(review_recursive_delete_of_an_inside_directory_symlink_removes_only_the_link, h => {
    let result = h.call("delete", json!({"file_path": "/good_dir_link", "recursive": true})).await;
    assert!(
        h.root().join("a/b/inside.txt").is_file(),
        "delete said {result:?} and emptied the link's target /a/b"
    );
});
attack!(review_sweep_removes_only_our_own_temporary_files, h => {
    std::fs::write(h.root().join(".mountfs-tmp-settings.json"), "{}\n").unwrap();
    let written = h.call("write_file", json!({"file_path": "/notes/.mountfs-tmp-plan.md", "content": "plan\n"})).await;
    let listed = h.call("ls", json!({"path": "/notes"})).await;
    h.backend.sweep_stale_temp_files();
    if written.is_ok() {
        assert!(h.root().join("notes/.mountfs-tmp-plan.md").is_file(), "write_file said {written:?}, ls said {listed:?}; the sweep then deleted it");
    }
    assert!(h.root().join(".mountfs-tmp-settings.json").is_file(), "the start-up sweep deleted a user's file");
});
attack!(review_a_read_only_file_is_not_overwritten, h => {
    let file = h.root().join("readme.md");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o444)).unwrap();
    h.call("read_file", json!({"file_path": "/readme.md"})).await.unwrap();
    let result = h.call("write_file", json!({"file_path": "/readme.md", "content": "replaced\n"})).await;
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "hello\n", "write_file said {result:?}");
});
// Not an escape: a symlink to a file inside the root can never be deleted (always "modified
// since it was read", because the backend's conditional delete refuses a non-regular file).
attack!(review_deleting_an_inside_file_symlink_removes_the_link, h => {
    h.call("read_file", json!({"file_path": "/good_link"})).await.unwrap();
    let result = h.call("delete", json!({"file_path": "/good_link"})).await;
    assert!(std::fs::symlink_metadata(h.root().join("good_link")).is_err(), "delete said {result:?}");
    assert!(h.root().join("a/b/inside.txt").is_file(), "the link's target must stay");
});
// git runs hooks and config-named commands from .git/ outside the mount: nothing there may be
// created, changed or deleted through the tools, also not through a symlink leading into it.
attack!(nothing_inside_dot_git_is_changed, h => {
    std::fs::create_dir_all(h.root().join(".git/hooks")).unwrap();
    std::fs::write(h.root().join(".git/config"), "[core]\n").unwrap();
    std::os::unix::fs::symlink(".git", h.root().join("gitlink")).unwrap();
    let before = std::fs::read(h.root().join(".git/config")).unwrap();
    for (tool, args) in [
        ("write_file", json!({"file_path": "/.git/hooks/pre-commit", "content": "#!/bin/sh\ntouch /tmp/pwned\n"})),
        ("write_file", json!({"file_path": "/gitlink/hooks/post-checkout", "content": "#!/bin/sh\n"})),
        ("delete", json!({"file_path": "/.git/config"})),
        ("move", json!({"source": "/readme.md", "destination": "/.git/hooks/pre-push"})),
    ] {
        let result = h.call(tool, args.clone()).await;
        assert!(result.is_err(), "{tool}({args}) was allowed: {result:?}");
    }
    assert!(!h.root().join(".git/hooks/pre-commit").exists());
    assert!(!h.root().join(".git/hooks/post-checkout").exists());
    assert!(!h.root().join(".git/hooks/pre-push").exists());
    assert_eq!(std::fs::read(h.root().join(".git/config")).unwrap(), before);
    assert!(h.root().join("readme.md").is_file(), "the failed move keeps its source");
    h.call("read_file", json!({"file_path": "/.git/config"})).await.unwrap();
    let result = h.call("write_file", json!({"file_path": "/.git/config", "content": "x"})).await;
    let text = format!("{result:?}");
    assert!(text.contains("inside .git/"), "{text}");
});
