//! Shell mounts against what an agent can do to the target (issue 41): a grep pattern whose
//! temporary file cannot be written whole on a full `$TMPDIR` runs nothing; a write on a full
//! target answers "No space left on device" at once; a search that would run for minutes on a
//! busybox target is stopped by a cancel and by the search bound, leaving no process behind;
//! names holding a newline or named `-` work on every target. Full file systems are small
//! tmpfs mounts (root only: skipped with a visible line elsewhere).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mountfs::ground::path::VirtualPath;
use mountfs::ground::search::{GlobMatcher, GrepPattern};
use mountfs::state::session::WriteOptions;
use mountfs::storage::backend::{
    Backend, DeleteOptions, EntryKind, GlobQuery, GrepCollect, GrepQuery, Rename, RenameOptions,
    SearchControl, ShellBackend, Uploads, WriteMode,
};
use serde_json::json;

use crate::support::backends;
use crate::support::shells::{self, Target};

fn p(path: &str) -> VirtualPath {
    VirtualPath::parse(path).unwrap()
}

/// A 64 KiB tmpfs mounted at a directory, filled to the last byte; unmounted when dropped.
struct FullFs {
    at: PathBuf,
}

impl FullFs {
    /// Mounts it at `at` (an empty directory); `None` (recorded as skipped) where mounting is
    /// not permitted.
    fn mount(group: &str, at: &Path) -> Option<Self> {
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
            .arg(at)
            .stderr(std::process::Stdio::null())
            .status();
        if !status.is_ok_and(|s| s.success()) {
            crate::support::skips::record(
                group,
                "mount -t tmpfs is not permitted here (run the tests as root to have a full file system)",
            );
            return None;
        }
        let fs = Self { at: at.to_owned() };
        fs.fill();
        Some(fs)
    }

    /// Writes a file until the file system refuses more.
    fn fill(&self) {
        use std::io::Write;
        let mut file = std::fs::File::create(self.at.join(".fill")).unwrap();
        let block = vec![b'f'; 4096];
        loop {
            if file.write_all(&block).is_err() {
                break;
            }
        }
        // Bytes the page cache took beyond the limit are refused at the latest here.
        let _ = file.sync_all();
    }

    /// Frees the space again.
    fn free(&self) {
        let _ = std::fs::remove_file(self.at.join(".fill"));
    }
}

impl Drop for FullFs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.at)
            .status();
    }
}

/// `target`'s command with `TMPDIR=tmpdir` set for its shell.
fn with_tmpdir(target: &Target, tmpdir: &Path) -> Vec<String> {
    let set = format!("TMPDIR={}", tmpdir.display());
    let mut command = target.command.clone();
    if command.first().is_some_and(|c| c == "/usr/bin/env") {
        // busybox: /usr/bin/env -i PATH=… busybox sh
        command.insert(2, set);
    } else {
        let last = command.pop().unwrap();
        assert_eq!(last, "sh");
        command.extend(["env".to_owned(), set, "sh".to_owned()]);
    }
    command
}

fn backend_of(target: &Target, command: Vec<String>) -> Arc<ShellBackend> {
    Arc::new(ShellBackend::new(
        "test",
        command,
        target.dir.path().to_str().unwrap(),
    ))
}

/// The targets: local sh (with rg), busybox-only sh, ssh.
fn targets(group: &str) -> Vec<(&'static str, Target)> {
    let mut out = vec![("sh", shells::local())];
    if let Some(target) = shells::busybox(group) {
        out.push(("busybox", target));
    }
    if let Some(target) = shells::ssh(group) {
        out.push(("ssh", target));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grep_pattern_cut_short_on_a_full_tmpdir_runs_nothing() {
    let group = "shell grep pattern on a full TMPDIR";
    let mut all = targets(group);
    if let Some(target) = shells::busybox_without_fullblock(group) {
        all.push(("busybox without dd iflag=fullblock", target));
    }
    for (label, target) in all {
        let tmp = tempfile::tempdir().unwrap();
        let Some(_full) = FullFs::mount(group, tmp.path()) else {
            return;
        };
        let backend = backend_of(&target, with_tmpdir(&target, tmp.path()));
        let session = backends::session_over(backend.clone(), WriteOptions::default());
        let canary = target.dir.path().join("canary");
        // Two files the agent wrote: the glob `[sx]*[hl]` of the pattern's rest names them
        // (`sh xpl`), and `xpl` makes the canary.
        let call = |tool: &'static str, args: serde_json::Value| {
            let session = &session;
            async move { backends::call(tool, args, session).await }
        };
        call("write_file", json!({"file_path": "/sh", "content": "x\n"}))
            .await
            .unwrap();
        call(
            "write_file",
            json!({"file_path": "/xpl", "content": format!("touch '{}'\n", canary.display())}),
        )
        .await
        .unwrap();
        call(
            "write_file",
            json!({"file_path": "/hay.txt", "content": "AAAA\nneedle sh\n"}),
        )
        .await
        .unwrap();
        for pattern in [
            format!("{}|[sx]*[hl]", "A".repeat(65535)),
            "AA|[sx]*[hl]".to_owned(),
        ] {
            let found = call("grep", json!({"pattern": pattern, "path": "/"}))
                .await
                .unwrap_or_else(|e| panic!("{label}: grep: {e}"));
            // The answer is still exact: every file is read back when the target's search
            // cannot run.
            assert!(found.text.contains("hay.txt"), "{label}: {}", found.text);
            assert!(!canary.exists(), "{label}: the pattern ran as commands");
        }
        // The mount keeps serving.
        let listing = call("ls", json!({"path": "/"})).await.unwrap();
        assert!(
            listing.text.contains("hay.txt"),
            "{label}: {}",
            listing.text
        );
        let read = backend.read(&p("/hay.txt")).await.unwrap();
        assert_eq!(read.content, b"AAAA\nneedle sh\n", "{label}");
        assert!(!canary.exists(), "{label}: the pattern ran as commands");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_on_a_full_target_answers_no_space_at_once() {
    let group = "shell write on a full target";
    for (label, target) in targets(group) {
        let Some(full) = FullFs::mount(group, target.dir.path()) else {
            return;
        };
        let backend = target.backend();
        // The connection is open before the clock runs (an ssh handshake is not the write's).
        backend.ls(&p("/")).await.unwrap();
        // More writes than the pool has connections: none may be left waiting.
        for i in 0..8 {
            let started = Instant::now();
            let answer = tokio::time::timeout(
                Duration::from_secs(10),
                backend.write(&p(&format!("/f{i}")), b"x", WriteMode::Overwrite),
            )
            .await
            .unwrap_or_else(|_| panic!("{label}: write {i} did not answer in 10 s"));
            let error = answer.expect_err("a full file system takes no byte");
            assert!(
                started.elapsed() < Duration::from_secs(1),
                "{label}: write {i} took {:?}",
                started.elapsed()
            );
            assert_eq!(
                error.to_string(),
                format!(
                    "Error: I/O error on /f{i}: No space left on device on the target of shell 'test' (its file system is full or a quota is reached): nothing was written; free space there, then retry"
                ),
                "{label}"
            );
        }
        // An upload's chunk too.
        let mut upload = backend
            .begin_upload(&p("/up"), WriteMode::Overwrite)
            .await
            .unwrap();
        let started = Instant::now();
        let error = upload.append(&[b'u'; 200_000]).await.unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(1), "{label}");
        assert!(
            error.to_string().contains("No space left on device"),
            "{label}: {error}"
        );
        upload.abort().await;
        // Nothing half-written, and the mount serves once there is space.
        let names: Vec<_> = backend
            .ls(&p("/"))
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.path.as_str().to_owned())
            .collect();
        assert_eq!(names, ["/.fill"], "{label}");
        full.free();
        backend
            .write(&p("/f0"), b"landed", WriteMode::Overwrite)
            .await
            .unwrap_or_else(|e| panic!("{label}: {e}"));
        assert_eq!(backend.read(&p("/f0")).await.unwrap().content, b"landed");
        drop(backend);
        drop(full);
    }
}

/// The processes whose working directory is `dir` or below it.
fn processes_in(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.parse::<u32>().is_err() {
            continue;
        }
        let Ok(cwd) = std::fs::read_link(entry.path().join("cwd")) else {
            continue;
        };
        if cwd.starts_with(dir) {
            let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
            found.push(format!("{name} {}", comm.trim()));
        }
    }
    found
}

/// Waits up to 5 s for no process to be left in `dir`.
async fn none_left_in(dir: &Path, label: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = processes_in(dir);
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{label}: processes left on the target: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn slow_query(control: SearchControl) -> GrepQuery {
    GrepQuery {
        dir: p("/"),
        pattern: Arc::new(GrepPattern::new(r"\w+\s\w+", false, false).unwrap()),
        file_filter: None,
        collect: GrepCollect::Files,
        control,
    }
}

/// A busybox target holding a file of one 2 MiB line of word characters, which busybox
/// `grep -E` takes minutes over (it backtracks from every start), and a file that matches.
fn slow_target(group: &str) -> Option<Target> {
    let target = shells::busybox(group)?;
    let mut line = vec![b'a'; 2 * 1024 * 1024];
    line.push(b'\n');
    std::fs::write(target.dir.path().join("long.txt"), line).unwrap();
    std::fs::write(target.dir.path().join("hit.txt"), "word one\n").unwrap();
    Some(target)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busybox_regex_search_is_stopped_by_cancel_and_leaves_no_process() {
    let Some(target) = slow_target("shell busybox regex cancel") else {
        return;
    };
    let backend = target.backend();
    let cancel = tokio_util::sync::CancellationToken::new();
    let query = slow_query(SearchControl::cancelled_by(cancel.clone()));
    let search = {
        let backend = backend.clone();
        tokio::spawn(async move { backend.grep(&query).await })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        processes_in(target.dir.path()).len() > 1,
        "the search runs on the target: {:?}",
        processes_in(target.dir.path())
    );
    cancel.cancel();
    let answer = tokio::time::timeout(Duration::from_secs(5), search)
        .await
        .expect("the cancelled search answers at once")
        .unwrap();
    assert!(answer.is_ok(), "{answer:?}");
    drop(backend);
    none_left_in(target.dir.path(), "busybox, cancelled").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busybox_regex_search_is_stopped_by_its_bound_and_leaves_no_process() {
    let Some(target) = slow_target("shell busybox regex bound") else {
        return;
    };
    let backend = Arc::new(
        ShellBackend::new(
            "test",
            target.command.clone(),
            target.dir.path().to_str().unwrap(),
        )
        .with_search_bound(Duration::from_secs(2)),
    );
    let answer = tokio::time::timeout(
        Duration::from_secs(30),
        backend.grep(&slow_query(SearchControl::default())),
    )
    .await
    .expect("the bounded search answers")
    .unwrap();
    // Past the bound every file is read back and judged here: the answer is still exact.
    let found: Vec<String> = answer.iter().map(|f| f.path.to_string()).collect();
    assert_eq!(found, ["/hit.txt"]);
    drop(backend);
    none_left_in(target.dir.path(), "busybox, bounded").await;
}

/// Every file's path under `/` by glob, sorted.
async fn globbed(backend: &ShellBackend) -> Vec<String> {
    let mut found: Vec<String> = backend
        .glob(&GlobQuery {
            dir: p("/"),
            matcher: GlobMatcher::new("**/*").unwrap(),
            control: SearchControl::default(),
        })
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.path.as_str().to_owned())
        .collect();
    found.sort();
    found
}

async fn grepped(backend: &ShellBackend, pattern: &str, literal: bool) -> Vec<String> {
    let mut found: Vec<String> = backend
        .grep(&GrepQuery {
            dir: p("/"),
            pattern: Arc::new(GrepPattern::new(pattern, literal, false).unwrap()),
            file_filter: None,
            collect: GrepCollect::Files,
            control: SearchControl::default(),
        })
        .await
        .unwrap()
        .into_iter()
        .map(|f| f.path.as_str().to_owned())
        .collect();
    found.sort();
    found
}

async fn listed(backend: &ShellBackend, dir: &str) -> Vec<(String, bool)> {
    let mut found: Vec<(String, bool)> = backend
        .ls(&p(dir))
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.path.as_str().to_owned(), e.kind == EntryKind::Directory))
        .collect();
    found.sort();
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_with_a_newline_or_a_dash_work_on_every_target() {
    let group = "shell newline and dash names";
    let mut all = targets(group);
    if let Some(target) = shells::without_rg(group) {
        all.push(("sh without rg", target));
    }
    let files = [
        "/-",
        "/sub/-/inner.txt",
        "/a\nb/c\nd.txt",
        "/a\nb/plain.txt",
    ];
    for (label, target) in all {
        let backend = target.backend();
        // `/-` is a file, `/sub/-` a directory.
        for path in &files {
            backend
                .write(&p(path), b"needle here\n", WriteMode::CreateOnly)
                .await
                .unwrap_or_else(|e| panic!("{label}: write {path:?}: {e}"));
        }
        let mut expected: Vec<String> = files.iter().map(|s| (*s).to_owned()).collect();
        expected.sort();
        assert_eq!(
            listed(&backend, "/").await,
            [
                ("/-".to_owned(), false),
                ("/a\nb".to_owned(), true),
                ("/sub".to_owned(), true)
            ],
            "{label}: ls /"
        );
        assert_eq!(
            listed(&backend, "/sub").await,
            [("/sub/-".to_owned(), true)],
            "{label}: ls /sub"
        );
        assert_eq!(
            listed(&backend, "/a\nb").await,
            [
                ("/a\nb/c\nd.txt".to_owned(), false),
                ("/a\nb/plain.txt".to_owned(), false)
            ],
            "{label}: ls /a\\nb"
        );
        assert_eq!(globbed(&backend).await, expected, "{label}: glob");
        assert_eq!(
            grepped(&backend, "needle", true).await,
            expected,
            "{label}: grep -F"
        );
        assert_eq!(
            grepped(&backend, r"ne+dle\s", false).await,
            expected,
            "{label}: grep regex"
        );
        for path in &expected {
            assert_eq!(
                backend.read(&p(path)).await.unwrap().content,
                b"needle here\n",
                "{label}: read {path:?}"
            );
        }
        backend
            .rename(
                &p("/a\nb/plain.txt"),
                &p("/sub/-/moved\nname"),
                &RenameOptions::default(),
            )
            .await
            .unwrap_or_else(|e| panic!("{label}: move: {e}"));
        backend
            .rename(&p("/-"), &p("/sub/-/-"), &RenameOptions::default())
            .await
            .unwrap_or_else(|e| panic!("{label}: move: {e}"));
        assert_eq!(
            std::fs::read(target.dir.path().join("sub/-/moved\nname")).unwrap(),
            b"needle here\n"
        );
        assert_eq!(
            std::fs::read(target.dir.path().join("sub/-/-")).unwrap(),
            b"needle here\n"
        );
        backend
            .delete(&p("/sub/-/-"), &DeleteOptions::default())
            .await
            .unwrap_or_else(|e| panic!("{label}: delete: {e}"));
        backend
            .delete(
                &p("/a\nb"),
                &DeleteOptions {
                    recursive: true,
                    if_version: None,
                },
            )
            .await
            .unwrap_or_else(|e| panic!("{label}: delete: {e}"));
        assert_eq!(
            globbed(&backend).await,
            ["/sub/-/inner.txt", "/sub/-/moved\nname"],
            "{label}: after move and delete"
        );
    }
}

/// A local `sh` target whose `find` and `stat` take ten minutes in any directory holding a
/// file `SLOW`: a tree too big or too slow to walk or list (attack review of issue 41). The
/// second value holds the wrappers.
fn slow_tree_target() -> (Target, tempfile::TempDir) {
    use std::os::unix::fs::PermissionsExt;
    let bin = tempfile::tempdir().unwrap();
    for tool in ["find", "stat"] {
        let real = ["/usr/bin", "/bin"]
            .iter()
            .map(|dir| Path::new(dir).join(tool))
            .find(|path| path.exists())
            .unwrap();
        let wrapper = bin.path().join(tool);
        std::fs::write(
            &wrapper,
            format!(
                "#!/bin/sh\nif [ -e \"$PWD/SLOW\" ]; then sleep 600; fi\nexec {} \"$@\"\n",
                real.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let mut target = shells::local();
    target.command = vec![
        "/usr/bin/env".to_owned(),
        format!("PATH={}:/usr/local/bin:/usr/bin:/bin", bin.path().display()),
        "sh".to_owned(),
    ];
    std::fs::create_dir(target.dir.path().join("tree")).unwrap();
    std::fs::write(target.dir.path().join("tree/SLOW"), "").unwrap();
    std::fs::write(target.dir.path().join("tree/a.txt"), "a").unwrap();
    (target, bin)
}

fn glob_of_tree(control: SearchControl) -> GlobQuery {
    GlobQuery {
        dir: p("/tree"),
        matcher: GlobMatcher::new("**/*").unwrap(),
        control,
    }
}

/// Waits up to 10 s for the slow walk to run on the target.
async fn running_in(dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while processes_in(dir).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the walk never ran on the target"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `glob` and `ls` of a shell mount run under the target's watcher as `grep` does: a cancel
/// stops them at once and leaves no process on the target.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_glob_or_ls_is_stopped_by_cancel_and_leaves_no_process() {
    let (target, _bin) = slow_tree_target();
    let tree = target.dir.path().join("tree");
    let backend = target.backend();

    let cancel = tokio_util::sync::CancellationToken::new();
    let query = glob_of_tree(SearchControl::cancelled_by(cancel.clone()));
    let glob = {
        let backend = backend.clone();
        tokio::spawn(async move { backend.glob(&query).await })
    };
    running_in(&tree).await;
    cancel.cancel();
    let answer = tokio::time::timeout(Duration::from_secs(5), glob)
        .await
        .expect("the cancelled glob answers at once")
        .unwrap();
    assert!(answer.is_ok(), "{answer:?}");
    none_left_in(&tree, "glob, cancelled").await;

    // A call cancelled during `ls` drops the listing's future.
    let ls = {
        let backend = backend.clone();
        tokio::spawn(async move { backend.ls(&p("/tree")).await })
    };
    running_in(&tree).await;
    ls.abort();
    assert!(ls.await.unwrap_err().is_cancelled());
    none_left_in(&tree, "ls, cancelled").await;
    drop(backend);
}

/// Past the search bound, `glob` and `ls` of a shell mount end with an error naming the bound,
/// and leave no process on the target.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_glob_or_ls_is_stopped_by_its_bound_with_a_clear_error() {
    let (target, _bin) = slow_tree_target();
    let tree = target.dir.path().join("tree");
    let backend = Arc::new(
        ShellBackend::new(
            "test",
            target.command.clone(),
            target.dir.path().to_str().unwrap(),
        )
        .with_search_bound(Duration::from_secs(2)),
    );
    let error = tokio::time::timeout(
        Duration::from_secs(30),
        backend.glob(&glob_of_tree(SearchControl::default())),
    )
    .await
    .expect("the bounded glob answers")
    .unwrap_err();
    assert_eq!(
        error.to_string(),
        "Error: I/O error on /tree: the walk of this directory on the target of shell 'test' ran past its bound of 2 s and was stopped (nothing is left running there); name a smaller directory, or narrow the pattern"
    );
    none_left_in(&tree, "glob, bounded").await;
    let error = tokio::time::timeout(Duration::from_secs(30), backend.ls(&p("/tree")))
        .await
        .expect("the bounded ls answers")
        .unwrap_err();
    assert!(
        error.to_string().contains(
            "the listing of this directory on the target of shell 'test' ran past its bound of 2 s"
        ),
        "{error}"
    );
    none_left_in(&tree, "ls, bounded").await;
    // The mount still serves.
    std::fs::remove_file(tree.join("SLOW")).unwrap();
    assert_eq!(
        listed(&backend, "/tree").await,
        [("/tree/a.txt".to_owned(), false)]
    );
}
