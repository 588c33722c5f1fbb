//! The toolset cases, each an `async fn(&Fixture)` run on every fixture (see `main.rs`).
//! Paths are built under `fx.work` / `fx.other`, so the same case works inside any mount.

use std::process::Command;

use serde_json::{Value, json};

use crate::support::fixtures::Fixture;

fn diff_of(answer: &crate::support::fixtures::Answer) -> String {
    answer
        .structured
        .as_ref()
        .and_then(|s| s.get("diff"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

// ---------------------------------------------------------------------------------------------
// undo_edit

pub async fn undo_steps_back_through_every_change(fx: &Fixture) {
    let f = fx.p("notes.txt");
    fx.ok(
        "write_file",
        json!({"file_path": f, "content": "one\ntwo\n"}),
    )
    .await;
    fx.ok(
        "edit_file",
        json!({"file_path": f, "old_string": "two", "new_string": "TWO"}),
    )
    .await;
    fx.ok(
        "multi_edit",
        json!({"file_path": f, "edits": [{"old_string": "one", "new_string": "ONE"}]}),
    )
    .await;
    fx.ok(
        "write_file",
        json!({"file_path": f, "content": "replaced\n"}),
    )
    .await;

    let undo = fx.ok("undo_edit", json!({"file_path": f})).await;
    assert_eq!(fx.text(&f).await, "ONE\nTWO\n");
    assert!(
        undo.text
            .starts_with(&format!("Undid the last change to {f}.")),
        "{}",
        undo.text
    );
    assert!(
        undo.text.contains("     1\tONE\n     2\tTWO"),
        "{}",
        undo.text
    );
    assert!(
        undo.text
            .contains("3 earlier change(s) can still be undone"),
        "{}",
        undo.text
    );
    assert!(
        diff_of(&undo).contains("-replaced\n+ONE\n+TWO\n"),
        "{}",
        diff_of(&undo)
    );

    fx.ok("undo_edit", json!({"file_path": f})).await;
    assert_eq!(fx.text(&f).await, "one\nTWO\n");
    fx.ok("undo_edit", json!({"file_path": f})).await;
    assert_eq!(fx.text(&f).await, "one\ntwo\n");
    let last = fx.ok("undo_edit", json!({"file_path": f})).await;
    assert!(
        last.text.starts_with(&format!("Undid the creation of {f}")),
        "{}",
        last.text
    );
    assert_eq!(fx.bytes(&f).await, None);
    let err = fx
        .refused("undo_edit", json!({"file_path": f}), &[&f])
        .await;
    assert!(
        err.starts_with(&format!("Error: Nothing to undo for {f}")),
        "{err}"
    );
}

pub async fn undo_keeps_twenty_steps_per_file(fx: &Fixture) {
    let f = fx.p("count.txt");
    fx.put_and_read(&f, b"0\n").await;
    for i in 1..=25 {
        fx.ok(
            "edit_file",
            json!({"file_path": f, "old_string": format!("{}\n", i - 1), "new_string": format!("{i}\n")}),
        )
        .await;
    }
    for i in (5..25).rev() {
        fx.ok("undo_edit", json!({"file_path": f})).await;
        assert_eq!(fx.text(&f).await, format!("{i}\n"));
    }
    let err = fx
        .refused("undo_edit", json!({"file_path": f}), &[&f])
        .await;
    assert!(err.contains("at most 20 steps per file are kept"), "{err}");
}

pub async fn undo_is_refused_when_nothing_is_left(fx: &Fixture) {
    let f = fx.p("untouched.txt");
    fx.put_and_read(&f, b"as it was\n").await;
    let err = fx
        .refused("undo_edit", json!({"file_path": f}), &[&f])
        .await;
    assert_eq!(
        err,
        format!(
            "Error: Nothing to undo for {f}: this session has made no change to it that can still be undone (at most 20 steps per file are kept). Use read_file to see its content"
        )
    );
    let missing = fx.p("never.txt");
    fx.refused("undo_edit", json!({"file_path": missing}), &[&missing])
        .await;
}

pub async fn undo_is_refused_after_someone_else_changed_the_file(fx: &Fixture) {
    let f = fx.p("shared.txt");
    fx.put_and_read(&f, b"a\nb\n").await;
    fx.ok(
        "edit_file",
        json!({"file_path": f, "old_string": "b", "new_string": "B"}),
    )
    .await;
    fx.put(&f, b"someone else's\n").await;
    let err = fx
        .refused("undo_edit", json!({"file_path": f}), &[&f])
        .await;
    assert_eq!(
        err,
        format!(
            "Error: Cannot undo the last change to {f}: it has been modified since (not by this session's last change). The file was left as it is; read it with read_file and change it with edit_file or write_file instead"
        )
    );
    // Refused again, the step is kept rather than lost.
    fx.refused("undo_edit", json!({"file_path": f}), &[&f])
        .await;
    assert_eq!(fx.text(&f).await, "someone else's\n");
}

pub async fn undo_of_a_delete_recreates_the_file(fx: &Fixture) {
    let f = fx.p("gone.txt");
    fx.put(&f, b"keep me\r\nplease\r\n").await;
    fx.ok("delete", json!({"file_path": f})).await;
    assert_eq!(fx.bytes(&f).await, None);
    let undo = fx.ok("undo_edit", json!({"file_path": f})).await;
    assert!(
        undo.text.starts_with(&format!(
            "Undid the deletion of {f}: the file was recreated (17 bytes)."
        )),
        "{}",
        undo.text
    );
    assert_eq!(fx.bytes(&f).await.unwrap(), b"keep me\r\nplease\r\n");
    // Recreated by this session, so it may be edited without another read.
    fx.ok(
        "edit_file",
        json!({"file_path": f, "old_string": "please", "new_string": "thanks"}),
    )
    .await;
    assert_eq!(fx.bytes(&f).await.unwrap(), b"keep me\r\nthanks\r\n");
}

pub async fn undo_of_a_delete_is_refused_when_the_file_was_recreated(fx: &Fixture) {
    let f = fx.p("gone.txt");
    fx.put(&f, b"old\n").await;
    fx.ok("delete", json!({"file_path": f})).await;
    fx.put(&f, b"someone recreated it\n").await;
    let err = fx
        .refused("undo_edit", json!({"file_path": f}), &[&f])
        .await;
    assert!(
        err.contains("this session deleted it, but a file has been created there since"),
        "{err}"
    );
}

pub async fn undo_of_a_create_is_refused_when_the_file_was_deleted(fx: &Fixture) {
    let f = fx.p("new.txt");
    fx.ok("write_file", json!({"file_path": f, "content": "fresh\n"}))
        .await;
    fx.session
        .backend()
        .delete(
            &mountfs::ground::path::VirtualPath::parse(&f).unwrap(),
            &Default::default(),
        )
        .await
        .unwrap();
    let err = fx
        .refused("undo_edit", json!({"file_path": f}), &[&f])
        .await;
    assert!(
        err.contains("it has been deleted since by someone else"),
        "{err}"
    );
}

pub async fn undo_restores_crlf_bytes_exactly(fx: &Fixture) {
    let f = fx.p("win.txt");
    let original = b"\xef\xbb\xbfline one\r\nline two\r\n".to_vec();
    fx.put_and_read(&f, &original).await;
    fx.ok(
        "edit_file",
        json!({"file_path": f, "old_string": "line two", "new_string": "line 2\nline 3"}),
    )
    .await;
    assert_eq!(
        fx.bytes(&f).await.unwrap(),
        b"\xef\xbb\xbfline one\r\nline 2\r\nline 3\r\n"
    );
    fx.ok("undo_edit", json!({"file_path": f})).await;
    assert_eq!(fx.bytes(&f).await.unwrap(), original);
}

// ---------------------------------------------------------------------------------------------
// apply_patch

pub async fn patch_modifies_creates_and_deletes_and_undo_takes_it_back(fx: &Fixture) {
    let (a, b, c) = (fx.p("a.txt"), fx.p("new/b.txt"), fx.p("c.txt"));
    fx.put_and_read(&a, b"alpha\nbeta\ngamma\n").await;
    fx.put_and_read(&c, b"doomed\n").await;
    let patch = format!(
        "--- a{a}\n+++ b{a}\n@@ -1,3 +1,3 @@\n alpha\n-beta\n+BETA\n gamma\n--- /dev/null\n+++ b{b}\n@@ -0,0 +1,2 @@\n+hello\n+world\n--- a{c}\n+++ /dev/null\n@@ -1 +0,0 @@\n-doomed\n"
    );
    let answer = fx.ok("apply_patch", json!({"patch": patch})).await;
    assert!(
        answer
            .text
            .starts_with("Applied the patch to 3 file(s): 1 modified, 1 created, 1 deleted."),
        "{}",
        answer.text
    );
    assert!(answer.text.contains(&format!("Modified {a}.\n1 line(s) added, 1 removed. The changed region(s) now read:\n     1\talpha\n     2\tBETA\n     3\tgamma")), "{}", answer.text);
    assert!(
        answer.text.contains(&format!("Created {b}.")),
        "{}",
        answer.text
    );
    assert!(
        answer.text.contains(&format!("Deleted {c}.")),
        "{}",
        answer.text
    );
    let diff = diff_of(&answer);
    assert!(diff.contains("-beta\n+BETA\n"), "{diff}");
    let files = answer.structured.as_ref().unwrap()["files"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(files.len(), 3);
    assert_eq!(files[1]["action"], "created");

    assert_eq!(fx.text(&a).await, "alpha\nBETA\ngamma\n");
    assert_eq!(fx.text(&b).await, "hello\nworld\n");
    assert_eq!(fx.bytes(&c).await, None);
    // The session wrote them, so a follow-up edit needs no new read.
    fx.ok(
        "edit_file",
        json!({"file_path": b, "old_string": "world", "new_string": "there"}),
    )
    .await;
    fx.ok("undo_edit", json!({"file_path": b})).await;

    for path in [&a, &b, &c] {
        fx.ok("undo_edit", json!({"file_path": path})).await;
    }
    assert_eq!(fx.text(&a).await, "alpha\nbeta\ngamma\n");
    assert_eq!(fx.bytes(&b).await, None);
    assert_eq!(fx.text(&c).await, "doomed\n");
}

pub async fn patch_is_all_or_nothing_when_a_hunk_does_not_match(fx: &Fixture) {
    let (a, b, created) = (fx.p("a.txt"), fx.p("b.txt"), fx.p("created.txt"));
    fx.put_and_read(&a, b"1\n2\n3\n").await;
    let b_text: String = (1..=12)
        .map(|i| format!("line {i}\n"))
        .collect::<String>()
        .replace("line 9\n", "line nine\n");
    fx.put_and_read(&b, b_text.as_bytes()).await;
    let patch = format!(
        "--- a{a}\n+++ b{a}\n@@ -2 +2 @@\n-2\n+two\n--- /dev/null\n+++ b{created}\n@@ -0,0 +1 @@\n+x\n--- a{b}\n+++ b{b}\n@@ -1,2 +1,2 @@\n-line 1\n+LINE 1\n line 2\n@@ -8,3 +8,3 @@\n line 8\n-line 9\n+LINE 9\n line 10\n"
    );
    let err = fx
        .refused("apply_patch", json!({"patch": patch}), &[&a, &b, &created])
        .await;
    assert_eq!(
        err,
        format!(
            "Error: apply_patch: {b}: hunk 2 of 2 (@@ -8,3 +8,3 @@) does not match: line 9 should be \"line 9\"; the file has there:\n     7\tline 7\n     8\tline 8\n     9\tline nine\n    10\tline 10\n    11\tline 11\nNothing was changed. Read the file again and make the patch against its current content"
        )
    );
}

pub async fn patch_requires_read_and_unchanged_files(fx: &Fixture) {
    let (a, b) = (fx.p("a.txt"), fx.p("b.txt"));
    fx.put_and_read(&a, b"a\n").await;
    fx.put(&b, b"b\n").await;
    let patch = format!(
        "--- a{a}\n+++ b{a}\n@@ -1 +1 @@\n-a\n+A\n--- a{b}\n+++ b{b}\n@@ -1 +1 @@\n-b\n+B\n"
    );
    let err = fx
        .refused("apply_patch", json!({"patch": patch}), &[&a, &b])
        .await;
    assert_eq!(
        err,
        format!("Error: File has not been read yet: {b}. Read it with read_file first, then retry")
    );
    fx.read(&b).await;
    fx.put(&a, b"a\n\n").await;
    let err = fx
        .refused("apply_patch", json!({"patch": patch}), &[&a, &b])
        .await;
    assert!(
        err.starts_with(&format!(
            "Error: File has been modified since it was read: {a}"
        )),
        "{err}"
    );
    // A deletion needs the read too.
    let c = fx.p("c.txt");
    fx.put(&c, b"c\n").await;
    let delete = format!("--- a{c}\n+++ /dev/null\n@@ -1 +0,0 @@\n-c\n");
    fx.refused("apply_patch", json!({"patch": delete}), &[&c])
        .await;
}

pub async fn patch_refuses_creating_an_existing_file(fx: &Fixture) {
    let f = fx.p("exists.txt");
    fx.put_and_read(&f, b"here\n").await;
    let patch = format!("--- /dev/null\n+++ b{f}\n@@ -0,0 +1 @@\n+new\n");
    let err = fx
        .refused("apply_patch", json!({"patch": patch}), &[&f])
        .await;
    assert!(
        err.contains("the patch creates it (its '---' line is /dev/null) but it already exists"),
        "{err}"
    );
}

pub async fn patch_refuses_a_partial_delete_and_a_malformed_patch(fx: &Fixture) {
    let f = fx.p("f.txt");
    fx.put_and_read(&f, b"one\ntwo\n").await;
    let partial = format!("--- a{f}\n+++ /dev/null\n@@ -1 +0,0 @@\n-one\n");
    let err = fx
        .refused("apply_patch", json!({"patch": partial}), &[&f])
        .await;
    assert!(
        err.contains("removes only part of it (4 bytes would remain)"),
        "{err}"
    );
    let err = fx
        .refused(
            "apply_patch",
            json!({"patch": "please change one to 1"}),
            &[&f],
        )
        .await;
    assert!(
        err.starts_with("Error: Invalid patch: no file changes found"),
        "{err}"
    );
    let bad_counts = format!("--- a{f}\n+++ b{f}\n@@ -1,5 +1,5 @@\n-one\n+1\n");
    let err = fx
        .refused("apply_patch", json!({"patch": bad_counts}), &[&f])
        .await;
    assert!(err.contains("the patch ends inside hunk"), "{err}");
    let renamed = format!("--- a{f}\n+++ b{f}.new\n@@ -1 +1 @@\n-one\n+1\n");
    let err = fx
        .refused("apply_patch", json!({"patch": renamed}), &[&f])
        .await;
    assert!(err.contains("use the move tool to rename"), "{err}");
    let err = fx.refused("apply_patch", json!({"patch": ""}), &[&f]).await;
    assert!(
        err.starts_with("Invalid arguments for apply_patch"),
        "{err}"
    );
}

pub async fn patch_applies_shifted_hunks(fx: &Fixture) {
    let f = fx.p("shifted.txt");
    let body: String = (1..=20).map(|i| format!("{i}\n")).collect();
    fx.put_and_read(&f, format!("inserted\nabove\n{body}").as_bytes())
        .await;
    // Made against the file without the two inserted lines.
    let patch = format!("--- a{f}\n+++ b{f}\n@@ -9,3 +9,3 @@\n 9\n-10\n+ten\n 11\n");
    fx.ok("apply_patch", json!({"patch": patch})).await;
    assert_eq!(
        fx.text(&f).await,
        format!("inserted\nabove\n{}", body.replace("\n10\n", "\nten\n"))
    );
}

pub async fn patch_keeps_crlf_with_lf_or_crlf_rows(fx: &Fixture) {
    let f = fx.p("win.txt");
    fx.put_and_read(&f, b"one\r\ntwo\r\nthree\r\n").await;
    let lf_rows = format!("--- a{f}\n+++ b{f}\n@@ -1,3 +1,3 @@\n one\n-two\n+TWO\n three\n");
    fx.ok("apply_patch", json!({"patch": lf_rows})).await;
    assert_eq!(fx.bytes(&f).await.unwrap(), b"one\r\nTWO\r\nthree\r\n");
    let crlf_rows =
        format!("--- a{f}\n+++ b{f}\n@@ -1,3 +1,4 @@\n one\r\n TWO\r\n-three\r\n+3\r\n+4\r\n");
    fx.ok("apply_patch", json!({"patch": crlf_rows})).await;
    assert_eq!(fx.bytes(&f).await.unwrap(), b"one\r\nTWO\r\n3\r\n4\r\n");
}

/// Runs git in `dir`, failing the test on error.
fn git(dir: &std::path::Path, args: &[&str]) -> Vec<u8> {
    let out = Command::new("git")
        .args(["-c", "core.autocrlf=false", "-c", "core.safecrlf=false"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .output()
        .expect("run git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

pub async fn patch_made_by_git_diff_round_trips_with_undo(fx: &Fixture) {
    if Command::new("git").arg("--version").output().is_err() {
        crate::support::skips::record("patches made by git diff", "git is not installed");
        return;
    }
    let repo = tempfile::tempdir().unwrap();
    let dir = repo.path();
    let before: Vec<(&str, Vec<u8>)> = vec![
        (
            "src/lib.rs",
            b"fn a() {}\n\nfn b() {}\n\nfn c() {}\n".to_vec(),
        ),
        ("src/win.txt", b"first\r\nsecond\r\nthird\r\n".to_vec()),
        ("docs/old.md", b"# Old\n\nremove me\n".to_vec()),
        ("no_newline.txt", b"last line".to_vec()),
        ("empty_then_full.txt", b"".to_vec()),
    ];
    let after: Vec<(&str, Vec<u8>)> = vec![
        (
            "src/lib.rs",
            b"fn a() {}\n\nfn b() { todo!() }\n\nfn c() {}\n\nfn d() {}\n".to_vec(),
        ),
        (
            "src/win.txt",
            b"first\r\nSECOND\r\nthird\r\nfourth\r\n".to_vec(),
        ),
        ("src/new.rs", b"pub const NEW: u8 = 1;\n".to_vec()),
        ("docs/new_crlf.txt", b"made\r\non windows\r\n".to_vec()),
        ("no_newline.txt", b"last line, changed".to_vec()),
        ("empty_then_full.txt", b"now with text\n".to_vec()),
        ("created_empty.txt", b"".to_vec()),
    ];
    let write_tree = |files: &[(&str, Vec<u8>)]| {
        for (rel, bytes) in files {
            let path = dir.join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, bytes).unwrap();
        }
    };
    git(dir, &["init", "-q"]);
    write_tree(&before);
    git(dir, &["add", "-A"]);
    git(
        dir,
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-qm",
            "before",
        ],
    );
    for (rel, _) in &before {
        std::fs::remove_file(dir.join(rel)).unwrap();
    }
    write_tree(&after);
    git(dir, &["add", "-A"]);
    let base = fx.work.trim_start_matches('/');
    let src_prefix = format!("--src-prefix=a/{base}/");
    let dst_prefix = format!("--dst-prefix=b/{base}/");
    let patch = git(
        dir,
        &[
            "diff",
            "--cached",
            "--no-renames",
            "--no-color",
            &src_prefix,
            &dst_prefix,
        ],
    );
    let patch = String::from_utf8(patch).unwrap();
    assert!(
        patch.contains("\r\n"),
        "the CRLF file's rows carry CR:\n{patch}"
    );

    for (rel, bytes) in &before {
        fx.put_and_read(&fx.p(rel), bytes).await;
    }
    let answer = fx.ok("apply_patch", json!({"patch": patch})).await;
    assert!(
        answer
            .text
            .starts_with("Applied the patch to 8 file(s): 4 modified, 3 created, 1 deleted."),
        "{}",
        answer.text
    );
    for (rel, bytes) in &after {
        assert_eq!(
            fx.bytes(&fx.p(rel)).await.as_deref(),
            Some(bytes.as_slice()),
            "{rel} after the patch"
        );
    }
    assert_eq!(fx.bytes(&fx.p("docs/old.md")).await, None);

    let touched = [
        "src/lib.rs",
        "src/win.txt",
        "src/new.rs",
        "docs/new_crlf.txt",
        "docs/old.md",
        "no_newline.txt",
        "empty_then_full.txt",
        "created_empty.txt",
    ];
    for rel in touched {
        fx.ok("undo_edit", json!({"file_path": fx.p(rel)})).await;
    }
    for (rel, bytes) in &before {
        assert_eq!(
            fx.bytes(&fx.p(rel)).await.as_deref(),
            Some(bytes.as_slice()),
            "{rel} after undo"
        );
    }
    for rel in ["src/new.rs", "docs/new_crlf.txt", "created_empty.txt"] {
        assert_eq!(fx.bytes(&fx.p(rel)).await, None, "{rel} after undo");
    }
}

pub async fn patch_rolls_back_when_a_later_write_fails(fx: &Fixture) {
    let Some(read_only) = &fx.read_only_dir else {
        return;
    };
    let a = fx.p("a.txt");
    let blocked = format!("{read_only}/new.txt");
    fx.put_and_read(&a, b"a\n").await;
    let patch = format!(
        "--- a{a}\n+++ b{a}\n@@ -1 +1 @@\n-a\n+A\n--- /dev/null\n+++ b{blocked}\n@@ -0,0 +1 @@\n+x\n"
    );
    let err = fx
        .refused("apply_patch", json!({"patch": patch}), &[&a, &blocked])
        .await;
    assert!(
        err.starts_with(&format!(
            "Error: apply_patch could not write {blocked}: Error: {blocked} is on a read-only mount"
        )),
        "{err}"
    );
    assert!(
        err.ends_with("The 1 file(s) written before it were put back; nothing was changed."),
        "{err}"
    );
    // The failed patch left no undo step behind.
    fx.refused("undo_edit", json!({"file_path": a}), &[&a])
        .await;
}

// ---------------------------------------------------------------------------------------------
// delete

pub async fn delete_removes_a_file_and_undo_restores_it(fx: &Fixture) {
    let f = fx.p("bye.txt");
    fx.put_and_read(&f, b"content\n").await;
    let answer = fx.ok("delete", json!({"file_path": f})).await;
    assert_eq!(
        answer.text,
        format!("Deleted {f} (8 bytes). undo_edit can restore it.")
    );
    assert_eq!(fx.bytes(&f).await, None);
    // Deleted, so forgotten: a new file there must be read before it is overwritten.
    fx.put(&f, b"other\n").await;
    fx.refused("write_file", json!({"file_path": f, "content": "x"}), &[&f])
        .await;
    fx.session
        .backend()
        .delete(
            &mountfs::ground::path::VirtualPath::parse(&f).unwrap(),
            &Default::default(),
        )
        .await
        .unwrap();
    fx.ok("undo_edit", json!({"file_path": f})).await;
    assert_eq!(fx.text(&f).await, "content\n");
}

pub async fn delete_allows_unread_but_refuses_stale_files(fx: &Fixture) {
    let unread = fx.p("unread.txt");
    fx.put(&unread, b"never read\n").await;
    fx.ok("delete", json!({"file_path": unread})).await;
    assert_eq!(fx.bytes(&unread).await, None);

    let stale = fx.p("stale.txt");
    fx.put_and_read(&stale, b"seen\n").await;
    fx.put(&stale, b"changed since\n").await;
    let err = fx
        .refused("delete", json!({"file_path": stale}), &[&stale])
        .await;
    assert_eq!(
        err,
        format!(
            "Error: File has been modified since it was read: {stale}. Read it again with read_file, then retry"
        )
    );
}

pub async fn delete_of_a_directory_needs_recursive(fx: &Fixture) {
    let (x, y) = (fx.p("dir/x.txt"), fx.p("dir/sub/y.txt"));
    fx.put(&x, b"x\n").await;
    fx.put(&y, b"y\n").await;
    let dir = fx.p("dir");
    let err = fx
        .refused("delete", json!({"file_path": dir}), &[&x, &y])
        .await;
    assert_eq!(
        err,
        format!(
            "Error: Directory not empty: {dir}. Pass recursive=true to delete it with its contents"
        )
    );
    // A stale file inside stops the whole recursive delete.
    fx.read(&y).await;
    fx.put(&y, b"y changed\n").await;
    fx.refused(
        "delete",
        json!({"file_path": dir, "recursive": true}),
        &[&x, &y],
    )
    .await;
    fx.read(&y).await;
    let answer = fx
        .ok("delete", json!({"file_path": dir, "recursive": true}))
        .await;
    assert_eq!(
        answer.text,
        format!(
            "Deleted directory {dir} with 2 file(s), 12 bytes: {y}, {x}. undo_edit on a file's path restores that file."
        )
    );
    assert_eq!(fx.bytes(&x).await, None);
    assert_eq!(fx.bytes(&y).await, None);
    fx.ok("undo_edit", json!({"file_path": y})).await;
    assert_eq!(fx.text(&y).await, "y changed\n");
}

pub async fn delete_refuses_missing_paths_and_mount_roots(fx: &Fixture) {
    let missing = fx.p("missing.txt");
    let err = fx
        .refused("delete", json!({"file_path": missing}), &[&missing])
        .await;
    assert_eq!(
        err,
        format!("Error: File not found: {missing}. Check the path with ls or glob")
    );
    let keep = fx.p("keep.txt");
    fx.put(&keep, b"keep\n").await;
    let err = fx
        .refused(
            "delete",
            json!({"file_path": "/", "recursive": true}),
            &[&keep],
        )
        .await;
    assert!(
        err.starts_with("Error: / is (or contains) a mount point"),
        "{err}"
    );
    for root in &fx.mount_roots {
        let err = fx
            .refused(
                "delete",
                json!({"file_path": root, "recursive": true}),
                &[&keep],
            )
            .await;
        assert!(err.contains("mount roots cannot be deleted"), "{err}");
        // A directory holding a mount point cannot go either.
        if let Some(parent) = mountfs::ground::path::VirtualPath::parse(root)
            .unwrap()
            .parent()
            && !parent.is_root()
        {
            fx.refused(
                "delete",
                json!({"file_path": parent.as_str(), "recursive": true}),
                &[&keep],
            )
            .await;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// move

pub async fn move_renames_a_file_and_undo_reverses_it(fx: &Fixture) {
    let (from, to) = (fx.p("old name.txt"), fx.p("sub/new.txt"));
    fx.put_and_read(&from, b"moving\r\n").await;
    let answer = fx
        .ok("move", json!({"source": from, "destination": to}))
        .await;
    assert!(
        answer
            .text
            .starts_with(&format!("Moved {from} to {to}, 8 bytes (")),
        "{}",
        answer.text
    );
    assert!(
        answer
            .text
            .ends_with(&format!("To reverse it, call undo_edit on {to}.")),
        "{}",
        answer.text
    );
    assert_eq!(fx.bytes(&from).await, None);
    assert_eq!(fx.bytes(&to).await.unwrap(), b"moving\r\n");
    // The agent had read the content, so the moved file may be edited directly.
    fx.ok(
        "edit_file",
        json!({"file_path": to, "old_string": "moving", "new_string": "moved"}),
    )
    .await;
    fx.ok("undo_edit", json!({"file_path": to})).await;
    // One more undo at the destination moves the file back.
    let undone = fx.ok("undo_edit", json!({"file_path": to})).await;
    assert!(
        undone.text.starts_with(&format!(
            "Undid the move of {from} to {to}: it is back at {from}."
        )),
        "{}",
        undone.text
    );
    assert_eq!(fx.bytes(&to).await, None);
    assert_eq!(fx.bytes(&from).await.unwrap(), b"moving\r\n");
    // The ledger followed it back: still known as read, so it can be edited at once.
    fx.ok(
        "edit_file",
        json!({"file_path": from, "old_string": "moving", "new_string": "back"}),
    )
    .await;
    assert_eq!(fx.bytes(&from).await.unwrap(), b"back\r\n");
}

pub async fn move_crosses_mounts(fx: &Fixture) {
    let (from, to) = (fx.p("travel.bin"), fx.o("arrived.bin"));
    let bytes = b"\x89PNG\r\n\x1a\n\0\x01binary".to_vec();
    fx.put(&from, &bytes).await;
    fx.ok("move", json!({"source": from, "destination": to}))
        .await;
    assert_eq!(fx.bytes(&from).await, None);
    assert_eq!(fx.bytes(&to).await.unwrap(), bytes);
    // Never read: the destination needs a read before it can be overwritten.
    fx.refused(
        "write_file",
        json!({"file_path": to, "content": "x"}),
        &[&to],
    )
    .await;
    fx.ok("move", json!({"source": to, "destination": from}))
        .await;
    assert_eq!(fx.bytes(&from).await.unwrap(), bytes);
    assert_eq!(fx.bytes(&to).await, None);
}

pub async fn move_never_overwrites_unless_asked(fx: &Fixture) {
    let (from, to) = (fx.p("src.txt"), fx.o("dst.txt"));
    fx.put(&from, b"new content\n").await;
    fx.put(&to, b"old content\n").await;
    let err = fx
        .refused(
            "move",
            json!({"source": from, "destination": to}),
            &[&from, &to],
        )
        .await;
    assert_eq!(
        err,
        format!(
            "Error: Destination already exists: {to}. Pass overwrite=true to replace it, or choose another destination"
        )
    );
    // A replaced file that changed since it was read is stale.
    fx.read(&to).await;
    fx.put(&to, b"old content, changed\n").await;
    fx.refused(
        "move",
        json!({"source": from, "destination": to, "overwrite": true}),
        &[&from, &to],
    )
    .await;
    fx.read(&to).await;
    let answer = fx
        .ok(
            "move",
            json!({"source": from, "destination": to, "overwrite": true}),
        )
        .await;
    assert!(
        answer
            .text
            .contains(&format!("(replacing the previous {to})")),
        "{}",
        answer.text
    );
    assert_eq!(fx.text(&to).await, "new content\n");
    assert_eq!(fx.bytes(&from).await, None);
    // The first undo moves the file back, the second brings back the file it replaced.
    fx.ok("undo_edit", json!({"file_path": to})).await;
    assert_eq!(fx.text(&from).await, "new content\n");
    assert_eq!(fx.bytes(&to).await, None);
    fx.ok("undo_edit", json!({"file_path": to})).await;
    assert_eq!(fx.text(&to).await, "old content, changed\n");
    assert_eq!(fx.text(&from).await, "new content\n");
}

pub async fn move_refuses_bad_sources_and_destinations(fx: &Fixture) {
    let (file, missing) = (fx.p("file.txt"), fx.p("missing.txt"));
    fx.put(&file, b"f\n").await;
    let err = fx
        .refused(
            "move",
            json!({"source": missing, "destination": fx.p("x")}),
            &[&file],
        )
        .await;
    assert_eq!(
        err,
        format!("Error: File not found: {missing}. Check the path with ls or glob")
    );
    let err = fx
        .refused(
            "move",
            json!({"source": file, "destination": file}),
            &[&file],
        )
        .await;
    assert_eq!(
        err,
        format!(
            "Error: Source and destination are the same path: {file}. Give a different destination"
        )
    );
    let inner = fx.p("dir/inner.txt");
    fx.put(&inner, b"i\n").await;
    let dir = fx.p("dir");
    let err = fx
        .refused(
            "move",
            json!({"source": dir, "destination": fx.p("dir/deeper")}),
            &[&inner],
        )
        .await;
    assert!(
        err.starts_with(&format!("Error: Cannot move {dir} into itself")),
        "{err}"
    );
    let err = fx
        .refused(
            "move",
            json!({"source": file, "destination": dir}),
            &[&file, &inner],
        )
        .await;
    assert_eq!(
        err,
        format!(
            "Error: Destination already exists: {dir}. It is a directory; to move the file into it, give the full new path, e.g. {dir}/file.txt"
        )
    );
    let err = fx
        .refused(
            "move",
            json!({"source": "/", "destination": fx.p("root")}),
            &[&file],
        )
        .await;
    assert!(
        err.contains("mount roots cannot be deleted, moved or overwritten"),
        "{err}"
    );
    for root in &fx.mount_roots {
        let err = fx
            .refused(
                "move",
                json!({"source": root, "destination": fx.p("r")}),
                &[&file],
            )
            .await;
        assert!(err.contains("mount point"), "{err}");
        let err = fx
            .refused(
                "move",
                json!({"source": file, "destination": root}),
                &[&file],
            )
            .await;
        assert!(err.contains("mount point"), "{err}");
    }
    if let Some(read_only) = &fx.read_only_dir {
        let target = format!("{read_only}/file.txt");
        let err = fx
            .refused(
                "move",
                json!({"source": file, "destination": target}),
                &[&file, &target],
            )
            .await;
        assert!(err.contains("read-only mount"), "{err}");
    }
    let err = fx
        .refused(
            "move",
            json!({"source": file, "destination": "../x"}),
            &[&file],
        )
        .await;
    assert!(err.starts_with("Error: Invalid path '../x'"), "{err}");
}

pub async fn move_refuses_a_stale_source(fx: &Fixture) {
    let (from, to) = (fx.p("s.txt"), fx.p("t.txt"));
    fx.put_and_read(&from, b"seen\n").await;
    fx.put(&from, b"changed\n").await;
    let err = fx
        .refused(
            "move",
            json!({"source": from, "destination": to}),
            &[&from, &to],
        )
        .await;
    assert!(
        err.starts_with(&format!(
            "Error: File has been modified since it was read: {from}"
        )),
        "{err}"
    );
}

pub async fn move_carries_a_directory(fx: &Fixture) {
    let files = [
        ("a.txt", b"a\n".to_vec()),
        ("deep/b.txt", b"b\r\n".to_vec()),
    ];
    for (rel, bytes) in &files {
        fx.put(&fx.p(&format!("tree/{rel}")), bytes).await;
    }
    let taken = fx.o("taken/x.txt");
    fx.put(&taken, b"x\n").await;
    let err = fx
        .refused(
            "move",
            json!({"source": fx.p("tree"), "destination": fx.o("taken")}),
            &[&fx.p("tree/a.txt"), &taken],
        )
        .await;
    assert!(
        err.contains("A directory is moved to a path that does not exist yet"),
        "{err}"
    );
    let answer = fx
        .ok(
            "move",
            json!({"source": fx.p("tree"), "destination": fx.o("moved")}),
        )
        .await;
    let renamed = answer.structured.as_ref().unwrap()["renamed"] == true;
    let headline = if renamed {
        format!(
            "Moved directory {} to {} in one rename",
            fx.p("tree"),
            fx.o("moved")
        )
    } else {
        format!(
            "Moved directory {} to {}: 2 file(s), 5 bytes",
            fx.p("tree"),
            fx.o("moved")
        )
    };
    assert!(answer.text.starts_with(&headline), "{}", answer.text);
    for (rel, bytes) in &files {
        assert_eq!(fx.bytes(&fx.p(&format!("tree/{rel}"))).await, None);
        assert_eq!(
            fx.bytes(&fx.o(&format!("moved/{rel}"))).await.as_ref(),
            Some(bytes)
        );
    }
    // Nothing is left of the source directory.
    let ls = fx.call("ls", json!({"path": fx.work})).await;
    assert!(!ls.text.contains("tree"), "{}", ls.text);
    assert!(fx.call("ls", json!({"path": fx.p("tree")})).await.is_error);
    // Undo moves it back: the directory in one step when it was renamed, else file by file.
    if renamed {
        fx.ok("undo_edit", json!({"file_path": fx.o("moved")}))
            .await;
    } else {
        for (rel, _) in &files {
            fx.ok(
                "undo_edit",
                json!({"file_path": fx.o(&format!("moved/{rel}"))}),
            )
            .await;
        }
    }
    for (rel, bytes) in &files {
        assert_eq!(
            fx.bytes(&fx.p(&format!("tree/{rel}"))).await.as_ref(),
            Some(bytes)
        );
        assert_eq!(fx.bytes(&fx.o(&format!("moved/{rel}"))).await, None);
    }
}

// ---------------------------------------------------------------------------------------------
// file_info

pub async fn file_info_describes_files_and_directories(fx: &Fixture) {
    let f = fx.p("src/main.rs");
    fx.put(&f, b"fn main() {\r\n    println!(\"hi\");\r\n}\r\n")
        .await;
    let answer = fx.ok("file_info", json!({"file_path": f})).await;
    let info = answer.structured.clone().unwrap();
    assert_eq!(info["kind"], "file");
    assert_eq!(info["lines"], 3);
    assert_eq!(info["size"], 37);
    assert_eq!(info["language"], "Rust");
    assert_eq!(info["binary"], false);
    assert_eq!(info["encoding"], "UTF-8");
    let version = info["version"].as_str().unwrap().to_owned();
    assert!(!version.is_empty());
    let modified = info["modified"].as_str().unwrap();
    assert!(
        modified.len() == 20 && modified.ends_with('Z'),
        "{modified}"
    );
    assert!(
        answer.text.starts_with(&format!(
            "{f}\nkind: text file\nsize: 37 bytes\nlines: 3\nencoding: UTF-8\nlanguage: Rust\nmodified: "
        )),
        "{}",
        answer.text
    );
    assert!(
        answer.text.contains(&format!("version: {version}")),
        "{}",
        answer.text
    );

    let png = fx.p("logo.png");
    fx.put(&png, b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR").await;
    let answer = fx.ok("file_info", json!({"file_path": png})).await;
    assert!(
        answer.text.contains("kind: binary file (PNG image)"),
        "{}",
        answer.text
    );
    assert_eq!(answer.structured.unwrap()["binary"], true);

    let dir = fx.p("src");
    let answer = fx.ok("file_info", json!({"file_path": dir})).await;
    assert!(
        answer
            .text
            .starts_with(&format!("{dir}\nkind: directory\nentries: 1\n")),
        "{}",
        answer.text
    );

    let root = fx.ok("file_info", json!({"file_path": "/"})).await;
    assert!(
        root.text.contains("mount: / (this is the mount's root)"),
        "{}",
        root.text
    );

    let missing = fx.p("nope.txt");
    let err = fx
        .refused("file_info", json!({"file_path": missing}), &[])
        .await;
    assert_eq!(
        err,
        format!("Error: File not found: {missing}. Check the path with ls or glob")
    );
}

pub async fn file_info_does_not_count_as_a_read(fx: &Fixture) {
    let f = fx.p("info.txt");
    fx.put(&f, b"abc\n").await;
    fx.ok("file_info", json!({"file_path": f})).await;
    fx.refused(
        "edit_file",
        json!({"file_path": f, "old_string": "abc", "new_string": "xyz"}),
        &[&f],
    )
    .await;
}

// ---------------------------------------------------------------------------------------------
// the answers of edit-type tools

pub async fn edit_answers_show_counts_snippets_and_diffs(fx: &Fixture) {
    let f = fx.p("report.txt");
    let text: String = (1..=30).map(|i| format!("line {i}\n")).collect();
    fx.put_and_read(&f, text.as_bytes()).await;
    let edit = fx
        .ok(
            "edit_file",
            json!({"file_path": f, "old_string": "line 15\n", "new_string": "line fifteen\n"}),
        )
        .await;
    assert_eq!(
        edit.text,
        format!(
            "Edited {f}: replaced 1 occurrence.\n1 line(s) added, 1 removed. The changed region(s) now read:\n    11\tline 11\n    12\tline 12\n    13\tline 13\n    14\tline 14\n    15\tline fifteen\n    16\tline 16\n    17\tline 17\n    18\tline 18\n    19\tline 19"
        )
    );
    assert_eq!(
        diff_of(&edit),
        format!(
            "--- {f}\n+++ {f}\n@@ -12,7 +12,7 @@\n line 12\n line 13\n line 14\n-line 15\n+line fifteen\n line 16\n line 17\n line 18\n"
        )
    );
    let multi = fx
        .ok("multi_edit", json!({"file_path": f, "edits": [{"old_string": "line 1\n", "new_string": "line one\n"}, {"old_string": "line 30", "new_string": "line thirty"}]}))
        .await;
    assert!(
        multi.text.contains("2 line(s) added, 2 removed."),
        "{}",
        multi.text
    );
    assert!(
        multi.text.contains("     1\tline one") && multi.text.contains("    30\tline thirty"),
        "{}",
        multi.text
    );
    let write = fx
        .ok("write_file", json!({"file_path": f, "content": "short\n"}))
        .await;
    assert!(
        write.text.contains("1 line(s) added, 30 removed."),
        "{}",
        write.text
    );
    assert!(diff_of(&write).contains("+short\n"));
    let undo = fx.ok("undo_edit", json!({"file_path": f})).await;
    assert!(
        undo.text.contains("30 line(s) added, 1 removed."),
        "{}",
        undo.text
    );
    assert!(diff_of(&undo).contains("-short\n"));
}

pub async fn a_huge_change_is_summarised(fx: &Fixture) {
    let f = fx.p("big.txt");
    let old: String = (1..=3000).map(|i| format!("old {i}\n")).collect();
    let new: String = (1..=3000)
        .map(|i| {
            if i % 2 == 0 {
                format!("new {i}\n")
            } else {
                format!("old {i}\n")
            }
        })
        .collect();
    fx.put_and_read(&f, old.as_bytes()).await;
    let answer = fx
        .ok("write_file", json!({"file_path": f, "content": new}))
        .await;
    assert!(answer.text.len() < 1000, "{}", answer.text);
    assert!(
        answer.text.ends_with("\n1500 line(s) added, 1500 removed in 1500 region(s), too many to show here: lines 2, 4, 6, 8, 10, 12, 14, 16, 18, 20 and 1490 more. The unified diff is in the structured result; use read_file with offset/limit to see the new text."),
        "{}",
        answer.text
    );
    assert!(diff_of(&answer).starts_with(&format!("--- {f}\n")));
}
