//! The audit log (issue 14) through real `mountfs` processes over stdio, and its two engines
//! through the library: one entry per change with its versions and diff over memory, disk,
//! SQLite and PostgreSQL mounts; `history` and `mountfs log --json` agreeing; two instances
//! sharing one ordered PostgreSQL log; the spool (`audit::spool`): changes made while the
//! database cannot be written (a locked SQLite file; a PostgreSQL database lost mid-session,
//! then back) landing at once, waiting and written when it is back, a full spool's change not
//! logged and its answer saying so, a SIGKILLed server's spool written once by the next; an
//! unreachable PostgreSQL log stopping start-up; the log's PostgreSQL sessions committing
//! asynchronously; pruning; `history` offered only while the log is on.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, SystemTime};

use crate::support::{self, McpServer, PostgresNamespace, postgres_url, unique};
use mountfs::storage::audit::{
    AuditLog, AuditTarget, Change, ClientInfo, DIFF_CUT_NOTE, FileChange, MAX_DIFF_BYTES, Query,
};
use serde_json::{Value, json};

fn args(mounts: &[String], audit: &str) -> Vec<String> {
    let mut args: Vec<String> = mounts
        .iter()
        .flat_map(|spec| ["--mount".to_owned(), spec.clone()])
        .collect();
    args.extend(["--audit".to_owned(), audit.to_owned()]);
    args
}

/// Every entry of the log under `path`, newest first, as `history` lists them.
async fn history(server: &McpServer, path: &str) -> Vec<Value> {
    let answer = server
        .ok("history", json!({"path": path, "limit": 1000}))
        .await;
    answer.structured["entries"].as_array().unwrap().clone()
}

/// `mountfs log` with these arguments: its stdout.
fn log_command(args: &[&str]) -> String {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_mountfs"))
        .arg("log")
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "mountfs log {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// What the scripted session expects of one change's entry.
#[derive(Debug)]
struct Expected {
    tool: &'static str,
    /// (path, version after) as the answer reported it; `None` after: removed.
    files: Vec<(String, Option<String>)>,
    /// The answer's diff (empty: none).
    diff: String,
}

/// One change per changing tool on the mount at `m` (a prefix like `/disk`), plus refused
/// changes that must not be logged. Returns what each logged entry must hold, oldest first.
async fn scripted_session(server: &McpServer, m: &str) -> Vec<Expected> {
    let a = format!("{m}/a.txt");
    let b = format!("{m}/b.txt");
    let c = format!("{m}/c.txt");
    let version =
        |answer: &support::ToolAnswer| answer.structured["version"].as_str().map(str::to_owned);
    let diff = |answer: &support::ToolAnswer| {
        answer.structured["diff"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let mut expected = Vec::new();

    let created = server
        .ok(
            "write_file",
            json!({"file_path": a, "content": "one\ntwo\nthree\n"}),
        )
        .await;
    expected.push(Expected {
        tool: "write_file",
        files: vec![(a.clone(), version(&created))],
        diff: format!("--- /dev/null\n+++ {a}\n@@ -0,0 +1,3 @@\n+one\n+two\n+three\n"),
    });
    let edited = server
        .ok(
            "edit_file",
            json!({"file_path": a, "old_string": "two", "new_string": "2"}),
        )
        .await;
    expected.push(Expected {
        tool: "edit_file",
        files: vec![(a.clone(), version(&edited))],
        diff: diff(&edited),
    });
    // Refused: nothing changed, nothing logged.
    let refused = server
        .call(
            "edit_file",
            json!({"file_path": a, "old_string": "absent", "new_string": "x"}),
        )
        .await;
    assert!(refused.is_error, "{}", refused.text);
    let multi = server
        .ok(
            "multi_edit",
            json!({"file_path": a, "edits": [
                {"old_string": "one", "new_string": "1"},
                {"old_string": "three", "new_string": "3"}
            ]}),
        )
        .await;
    expected.push(Expected {
        tool: "multi_edit",
        files: vec![(a.clone(), version(&multi))],
        diff: diff(&multi),
    });
    let patch = format!(
        "--- {a}\n+++ {a}\n@@ -1,3 +1,3 @@\n 1\n-2\n+two\n 3\n--- /dev/null\n+++ {b}\n@@ -0,0 +1 @@\n+bee\n"
    );
    let patched = server.ok("apply_patch", json!({"patch": patch})).await;
    let patched_files: Vec<(String, Option<String>)> = patched.structured["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_owned(),
                f["version"].as_str().map(str::to_owned),
            )
        })
        .collect();
    expected.push(Expected {
        tool: "apply_patch",
        files: patched_files,
        diff: diff(&patched),
    });
    let moved = server
        .ok("move", json!({"source": b, "destination": c}))
        .await;
    expected.push(Expected {
        tool: "move",
        files: vec![(b.clone(), None), (c.clone(), version(&moved))],
        diff: String::new(),
    });
    let undone = server.ok("undo_edit", json!({"file_path": c})).await;
    expected.push(Expected {
        tool: "undo_edit",
        files: vec![(c.clone(), None), (b.clone(), version(&undone))],
        diff: diff(&undone),
    });
    server.ok("delete", json!({"file_path": b})).await;
    expected.push(Expected {
        tool: "delete",
        files: vec![(b.clone(), None)],
        diff: String::new(),
    });
    expected
}

/// Checks the logged entries of one mount's session against what its answers said: one entry
/// per change, in order, each file's version after as answered and its version before equal to
/// the previous entry's version after for that file; the diff as answered.
fn check_entries(mount: &str, entries: &[Value], expected: &[Expected]) {
    let oldest_first: Vec<&Value> = entries.iter().rev().collect();
    let tools: Vec<&str> = oldest_first
        .iter()
        .map(|e| e["tool"].as_str().unwrap())
        .collect();
    let wanted: Vec<&str> = expected.iter().map(|e| e.tool).collect();
    assert_eq!(tools, wanted, "{mount}: one entry per change, in order");
    let mut last_version: HashMap<String, Option<String>> = HashMap::new();
    for (entry, want) in oldest_first.iter().zip(expected) {
        let files = entry["files"].as_array().unwrap();
        for (path, after) in &want.files {
            let file = files
                .iter()
                .find(|f| f["path"] == path.as_str())
                .unwrap_or_else(|| panic!("{mount} {}: no {path} in {entry}", want.tool));
            assert_eq!(
                file["after"].as_str().map(str::to_owned),
                *after,
                "{mount} {}: version after of {path}",
                want.tool
            );
            let before = last_version.get(path).cloned().flatten();
            // (A move's destination has no version before in the log: it was absent.)
            if !(want.tool == "move" || want.tool == "undo_edit") || after.is_none() {
                assert_eq!(
                    file["before"].as_str().map(str::to_owned),
                    before,
                    "{mount} {}: version before of {path} is the last one logged",
                    want.tool
                );
            }
            last_version.insert(path.clone(), file["after"].as_str().map(str::to_owned));
        }
        assert!(entry.get("diff").is_none(), "listings leave the diff out");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_over_every_kind_of_mount_logs_one_entry_per_change_with_versions_and_diffs() {
    let dir = tempfile::tempdir().unwrap();
    let disk = dir.path().join("disk");
    std::fs::create_dir(&disk).unwrap();
    let audit_db = dir.path().join("audit.db");
    let mut mounts = vec![
        "/=memory".to_owned(),
        format!("/disk/=disk:{}", disk.display()),
        format!(
            "/lite/=store:sqlite:{}",
            dir.path().join("store.db").display()
        ),
    ];
    let pg = postgres_url("audit: PostgreSQL mount in the scripted session")
        .map(|url| PostgresNamespace::new(&url, "audit"));
    if let Some(ns) = &pg {
        mounts.push(format!(
            "/pg/=store:postgres:{},namespace={}",
            ns.url, ns.name
        ));
    }
    let server = McpServer::start(&args(&mounts, &format!("sqlite:{}", audit_db.display()))).await;
    let mut prefixes = vec!["/mem", "/disk", "/lite"];
    if pg.is_some() {
        prefixes.push("/pg");
    }
    let mut all_expected = Vec::new();
    for prefix in &prefixes {
        let expected = scripted_session(&server, prefix).await;
        let entries = history(&server, prefix).await;
        check_entries(prefix, &entries, &expected);
        // Each entry's diff is the one its answer showed.
        for (entry, want) in entries.iter().rev().zip(&expected) {
            let id = entry["id"].as_i64().unwrap();
            let full = server.ok("history", json!({"id": id})).await;
            assert_eq!(
                full.structured["diff"].as_str().unwrap(),
                want.diff,
                "{prefix} {}",
                want.tool
            );
            assert!(full.text.contains(&want.diff), "{}", full.text);
        }
        all_expected.extend(expected);
    }
    // The whole log holds exactly these changes.
    let everything = history(&server, "/").await;
    assert_eq!(everything.len(), all_expected.len());
    let client = support::initialize_params(json!({}))["clientInfo"].clone();
    for entry in &everything {
        assert_eq!(
            entry["client"]["name"], client["name"],
            "the client named at initialize"
        );
        assert_eq!(entry["client"]["version"], client["version"]);
        assert_eq!(entry["principal"], "stdio");
        assert!(!entry["request_id"].as_str().unwrap().is_empty());
    }

    // `mountfs log --json` prints the same entries, newest first.
    let printed = log_command(&[
        "--audit",
        &format!("sqlite:{}", audit_db.display()),
        "--json",
        "--limit",
        "1000",
    ]);
    let printed: Vec<Value> = printed
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(printed, everything);
    let under_disk = log_command(&[
        "--audit",
        &format!("sqlite:{}", audit_db.display()),
        "--json",
        "--path",
        "/disk",
    ]);
    assert_eq!(
        under_disk.lines().count(),
        history(&server, "/disk").await.len()
    );
    // And the human listing has one line per entry plus its heading.
    let listing = server
        .ok("history", json!({"path": "/lite", "limit": 3}))
        .await;
    assert_eq!(
        listing.text.lines().filter(|l| l.starts_with('#')).count(),
        3
    );
    assert!(
        listing.text.contains("delete /lite/b.txt"),
        "{}",
        listing.text
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_diff_is_logged_cut_at_64_kib_with_a_note() {
    let dir = tempfile::tempdir().unwrap();
    let audit_db = dir.path().join("audit.db");
    let server = McpServer::start(&args(
        &["/=memory".to_owned()],
        &format!("sqlite:{}", audit_db.display()),
    ))
    .await;
    let content: String = (0..20_000).map(|i| format!("line {i} x\n")).collect();
    server
        .ok(
            "write_file",
            json!({"file_path": "/big.txt", "content": content}),
        )
        .await;
    server
        .ok(
            "edit_file",
            json!({"file_path": "/big.txt", "old_string": " x\n", "new_string": " y\n", "replace_all": true}),
        )
        .await;
    let entries = history(&server, "/big.txt").await;
    assert_eq!(entries.len(), 2);
    for entry in &entries {
        let full = server.ok("history", json!({"id": entry["id"]})).await;
        let diff = full.structured["diff"].as_str().unwrap();
        assert!(diff.len() <= MAX_DIFF_BYTES, "{}", diff.len());
        assert_eq!(full.structured["diff_truncated"], true);
        assert!(
            diff.lines().last().unwrap().starts_with(DIFF_CUT_NOTE),
            "{}",
            diff.lines().last().unwrap()
        );
    }
    assert_eq!(entries[0]["lines_added"], 20_000);
    assert_eq!(entries[0]["lines_removed"], 20_000);
    server.stop().await;
}

/// The tools of every entry under `/`, newest first.
async fn logged_tools(server: &McpServer) -> Vec<String> {
    history(server, "/")
        .await
        .iter()
        .map(|e| e["tool"].as_str().unwrap().to_owned())
        .collect()
}

/// Another program holds the SQLite log's write lock for longer than the log waits: the
/// changes land and answer at once, wait in the spool (answers made while the log is known to
/// be locked say so), and are written, in order, once the lock is gone. Nothing is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_made_while_the_log_is_locked_wait_in_the_spool_and_are_written_when_it_is_free() {
    let dir = tempfile::tempdir().unwrap();
    let disk = dir.path().join("disk");
    std::fs::create_dir(&disk).unwrap();
    let audit_db = dir.path().join("audit.db");
    let server = McpServer::start(&args(
        &[format!("/=disk:{}", disk.display())],
        &format!("sqlite:{}", audit_db.display()),
    ))
    .await;
    server
        .ok(
            "write_file",
            json!({"file_path": "/a.txt", "content": "old\n"}),
        )
        .await;
    assert_eq!(logged_tools(&server).await, ["write_file"]);
    let locker = rusqlite::Connection::open(&audit_db).unwrap();
    locker.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let started = std::time::Instant::now();
    let edited = server
        .ok(
            "edit_file",
            json!({"file_path": "/a.txt", "old_string": "old", "new_string": "new"}),
        )
        .await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the edit does not wait for the locked log"
    );
    assert!(!edited.text.contains("not logged"), "{}", edited.text);
    assert_eq!(
        std::fs::read_to_string(disk.join("a.txt")).unwrap(),
        "new\n"
    );
    // `history` tries the log once more; it stays locked (5 s), so the listing fails or
    // shows the waiting change as not yet written.
    let listing = server.call("history", json!({})).await;
    if !listing.is_error {
        assert_eq!(listing.structured["waiting"], 1, "{}", listing.text);
        assert!(
            listing
                .text
                .contains("1 change(s) made by this server are not shown yet"),
            "{}",
            listing.text
        );
    }
    // Now the log is known to be locked: an answer says its change waits.
    let waiting = server
        .ok(
            "write_file",
            json!({"file_path": "/b.txt", "content": "b\n"}),
        )
        .await;
    assert!(
        waiting.text.contains("does not answer") && waiting.text.contains("waits in the spool"),
        "{}",
        waiting.text
    );
    locker.execute_batch("ROLLBACK").unwrap();
    drop(locker);
    let listing = server.ok("history", json!({})).await;
    let tools: Vec<&str> = listing.structured["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["tool"].as_str().unwrap())
        .collect();
    assert_eq!(
        tools,
        ["write_file", "edit_file", "write_file"],
        "{}",
        listing.text
    );
    assert_eq!(listing.structured["not_logged"], 0);
    assert_eq!(listing.structured["waiting"], 0);
    let stderr = server.stderr();
    assert_eq!(
        stderr.matches("audit log: cannot write to").count(),
        1,
        "one warning per outage: {stderr}"
    );
    server.stop().await;
}

/// While the log stays locked, waiting changes fill the spool (`--audit-spool-max 1`: 1 MiB);
/// a change beyond that lands, is not logged, and its answer says so; stderr warns and the
/// counter counts it; the changes that fitted are all written once the lock is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_that_does_not_fit_the_full_spool_lands_and_its_answer_says_it_was_not_logged() {
    let dir = tempfile::tempdir().unwrap();
    let audit_db = dir.path().join("audit.db");
    let mut arguments = args(
        &["/=memory".to_owned()],
        &format!("sqlite:{}", audit_db.display()),
    );
    arguments.extend(["--audit-spool-max".to_owned(), "1".to_owned()]);
    let server = McpServer::start(&arguments).await;
    server
        .ok(
            "write_file",
            json!({"file_path": "/first.txt", "content": "1\n"}),
        )
        .await;
    assert_eq!(logged_tools(&server).await, ["write_file"]);
    let locker = rusqlite::Connection::open(&audit_db).unwrap();
    locker.execute_batch("BEGIN EXCLUSIVE").unwrap();
    // Each creation logs its content as added lines, cut at 64 KiB: about 16 fill 1 MiB.
    let content = "x".repeat(99) + "\n";
    let content = content.repeat(700);
    let mut fitted = 0;
    let mut refused = None;
    for i in 0..40 {
        let path = format!("/big{i}.txt");
        let answer = server
            .ok("write_file", json!({"file_path": path, "content": content}))
            .await;
        // The change landed, logged or not.
        server
            .ok("read_file", json!({"file_path": path, "limit": 1}))
            .await;
        if answer
            .text
            .contains("could not be written to the audit log")
        {
            refused = Some(answer.text);
            break;
        }
        fitted += 1;
    }
    let refused = refused.expect("the spool fills up");
    assert!(
        refused.contains("the audit log's spool is full"),
        "{refused}"
    );
    assert!(refused.contains("1 change(s) not logged"), "{refused}");
    assert!(
        (10..=20).contains(&fitted),
        "{fitted} changes fitted in 1 MiB"
    );
    locker.execute_batch("ROLLBACK").unwrap();
    drop(locker);
    let listing = server.ok("history", json!({"limit": 100})).await;
    assert_eq!(
        listing.structured["entries"].as_array().unwrap().len(),
        fitted + 1,
        "every change that fitted is written: {}",
        listing.text
    );
    assert_eq!(listing.structured["not_logged"], 1);
    assert!(
        listing
            .text
            .contains("1 change(s) since this server started could not be logged"),
        "{}",
        listing.text
    );
    let stderr = server.stderr();
    server.stop().await;
    assert!(
        stderr.contains("change made but not written to the audit log"),
        "{stderr}"
    );
}

/// A server killed (SIGKILL) right after its answers leaves its changes in its spool file; the
/// next server on the same log writes them and removes the file. A change written twice by
/// a spool (its line still there when the server died) is kept once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_left_in_the_spool_of_a_killed_server_are_written_once_by_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let audit_db = dir.path().join("audit.db");
    let spool = dir.path().join("audit.db-spool");
    // A disk mount: the next server (another workspace) sees its changes (a memory mount's
    // would be the killed server's own, issue 41).
    let work = tempfile::tempdir().unwrap();
    let arguments = args(
        &[format!("/=disk:{}", work.path().display())],
        &format!("sqlite:{}", audit_db.display()),
    );
    let server = McpServer::start(&arguments).await;
    server.ok("ls", json!({})).await;
    // Another program holds the log, so none of the changes can be written before the kill.
    let locker = rusqlite::Connection::open(&audit_db).unwrap();
    locker.execute_batch("BEGIN EXCLUSIVE").unwrap();
    for i in 0..5 {
        server
            .ok(
                "write_file",
                json!({"file_path": format!("/k{i}.txt"), "content": "k\n"}),
            )
            .await;
    }
    let pid = server.pid().unwrap();
    // SAFETY: kill(2) with a valid signal on the server's own pid.
    assert_eq!(
        unsafe { libc::kill(i32::try_from(pid).unwrap(), libc::SIGKILL) },
        0
    );
    drop(server);
    std::thread::sleep(Duration::from_millis(200));
    let left: Vec<_> = std::fs::read_dir(&spool).unwrap().flatten().collect();
    assert_eq!(left.len(), 1, "the killed server's spool file stays");
    let file = left[0].path();
    let lines = std::fs::read_to_string(&file).unwrap();
    assert_eq!(lines.lines().count(), 5, "{lines}");
    locker.execute_batch("ROLLBACK").unwrap();
    drop(locker);
    // As if the server had died after writing its first entry but before emptying its file:
    // that line again, and a line cut short by the crash.
    let first = lines.lines().next().unwrap().to_owned();
    std::fs::write(&file, format!("{lines}{first}\n{{\"key\": \"cut")).unwrap();

    let next = McpServer::start(&arguments).await;
    let mut paths: Vec<String> = history(&next, "/")
        .await
        .iter()
        .map(|e| e["files"][0]["path"].as_str().unwrap().to_owned())
        .collect();
    for _ in 0..50 {
        if paths.len() >= 5 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        paths = history(&next, "/")
            .await
            .iter()
            .map(|e| e["files"][0]["path"].as_str().unwrap().to_owned())
            .collect();
    }
    assert_eq!(
        paths,
        ["/k4.txt", "/k3.txt", "/k2.txt", "/k1.txt", "/k0.txt"]
    );
    // Removed once its entries are written, which the history above may see first.
    for _ in 0..50 {
        if !file.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!file.exists(), "the adopted spool file is removed");
    next.stop().await;
    assert!(
        !spool.exists(),
        "a server that stops removes its empty spool file, and the directory left empty"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_on_one_postgresql_log_write_one_ordered_log() {
    let Some(url) = postgres_url("audit: two instances sharing a PostgreSQL log") else {
        return;
    };
    // Paths no other test uses, in a disk mount both instances share (each one's memory
    // mount would be its own workspace's, issue 41).
    let prefix = format!("/{}", unique("audit2"));
    let work = tempfile::tempdir().unwrap();
    let mounts = vec![format!("{prefix}/=disk:{}", work.path().display())];
    let first = McpServer::start(&args(&mounts, &format!("postgres:{url}"))).await;
    let second = McpServer::start(&args(&mounts, &format!("postgres:{url}"))).await;
    let mut written = Vec::new();
    for round in 0..3 {
        for (name, server) in [("first", &first), ("second", &second)] {
            let path = format!("{prefix}/{name}-{round}.txt");
            server
                .ok(
                    "write_file",
                    json!({"file_path": path, "content": format!("{round}\n")}),
                )
                .await;
            written.push(path);
        }
    }
    // Each instance's history first writes what it recorded; then either sees the one log,
    // in the order the changes were made.
    history(&first, &prefix).await;
    history(&second, &prefix).await;
    for server in [&first, &second] {
        let entries = history(server, &prefix).await;
        let paths: Vec<&str> = entries
            .iter()
            .rev()
            .map(|e| e["files"][0]["path"].as_str().unwrap())
            .collect();
        assert_eq!(paths, written);
        let times: Vec<&str> = entries
            .iter()
            .rev()
            .map(|e| e["time"].as_str().unwrap())
            .collect();
        assert!(times.windows(2).all(|w| w[0] < w[1]), "{times:?}");
        let workspaces: std::collections::BTreeSet<&str> = entries
            .iter()
            .map(|e| e["workspace"].as_str().unwrap())
            .collect();
        assert_eq!(
            workspaces.len(),
            2,
            "each instance is named: {workspaces:?}"
        );
    }
    let printed = log_command(&[
        "--audit",
        &format!("postgres:{url}"),
        "--json",
        "--path",
        &prefix,
    ]);
    let printed: Vec<Value> = printed
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(printed, history(&first, &prefix).await);
    first.stop().await;
    second.stop().await;
}

async fn names(server: &McpServer) -> Vec<String> {
    let listed = server.request("tools/list", json!({})).await;
    listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_is_offered_only_while_the_log_is_on() {
    let dir = tempfile::tempdir().unwrap();
    let off = McpServer::start(&args(&["/=memory".to_owned()], "off")).await;
    assert!(!names(&off).await.contains(&"history".to_owned()));
    off.ok("write_file", json!({"file_path": "/a", "content": "a"}))
        .await;
    off.stop().await;
    let on = McpServer::start(&args(
        &["/=memory".to_owned()],
        &format!("sqlite:{}", dir.path().join("a.db").display()),
    ))
    .await;
    assert!(names(&on).await.contains(&"history".to_owned()));
    on.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_log_lives_in_the_data_directory() {
    let data = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let env: [(&str, &Path); 2] = [("XDG_DATA_HOME", data.path()), ("HOME", data.path())];
    let server = McpServer::start_with_env(
        &[
            "--mount".to_owned(),
            format!("/=disk:{}", work.path().display()),
        ],
        &env,
    )
    .await;
    server
        .ok(
            "write_file",
            json!({"file_path": "/a.txt", "content": "a\n"}),
        )
        .await;
    server.stop().await;
    let db = data.path().join("mountfs/audit.db");
    let printed = log_command(&["--audit", &format!("sqlite:{}", db.display()), "--json"]);
    assert_eq!(printed.lines().count(), 1, "{printed}");
}

fn change_at(time: SystemTime, path: &str) -> Change {
    Change {
        time,
        principal: "p".into(),
        workspace: "w".into(),
        client: ClientInfo {
            name: "c".into(),
            version: "1".into(),
        },
        tool: "write_file".into(),
        request_id: "1".into(),
        files: vec![FileChange {
            path: path.into(),
            before: None,
            after: Some("v1".into()),
        }],
        more_files: 0,
        lines_added: 1,
        lines_removed: 0,
        summary: "Created".into(),
        command: None,
        exit_code: None,
        diff: "+x\n".into(),
        diff_truncated: false,
        private: false,
    }
}

/// Append, query by path and time, get, and `--audit-keep` pruning, on one engine.
async fn engine_keeps_entries_and_prunes_old_ones(target: AuditTarget, root: &str) {
    let log = AuditLog::open(&target, None).await.unwrap().unwrap();
    let old = SystemTime::now() - Duration::from_secs(10 * 86_400);
    let now = SystemTime::now();
    let first = log
        .append(&change_at(old, &format!("{root}/src/a.rs")))
        .await
        .unwrap();
    let second = log
        .append(&change_at(now, &format!("{root}/src/b.rs")))
        .await
        .unwrap();
    let third = log
        .append(&change_at(now, &format!("{root}/srcx/c.rs")))
        .await
        .unwrap();
    assert!(first < second && second < third);
    let query = |under: String, since: Option<SystemTime>| Query {
        under,
        since,
        limit: 100,
        reader: mountfs::storage::audit::Reader::Operator,
    };
    let ids = |entries: Vec<mountfs::storage::audit::Entry>| {
        entries.iter().map(|e| e.id).collect::<Vec<_>>()
    };
    assert_eq!(
        ids(log
            .query(&query(format!("{root}/src"), None))
            .await
            .unwrap()),
        [second, first]
    );
    assert_eq!(
        ids(log
            .query(&query(format!("{root}/src/a.rs"), None))
            .await
            .unwrap()),
        [first]
    );
    assert_eq!(
        ids(log.query(&query(root.to_owned(), None)).await.unwrap()),
        [third, second, first]
    );
    assert_eq!(
        ids(log
            .query(&query(root.to_owned(), Some(now - Duration::from_secs(60))))
            .await
            .unwrap()),
        [third, second]
    );
    let got = log.get(second).await.unwrap().unwrap();
    assert_eq!(got.change.diff, "+x\n");
    assert_eq!(got.change.files[0].path, format!("{root}/src/b.rs"));
    // Listings leave the diff out of what they read.
    assert_eq!(
        log.query(&query(root.to_owned(), None)).await.unwrap()[0]
            .change
            .diff,
        ""
    );
    drop(log);
    // Reopened with --audit-keep 7: the ten-day-old entry goes.
    let kept = AuditLog::open(&target, Some(7)).await.unwrap().unwrap();
    assert!(kept.get(first).await.unwrap().is_none());
    assert_eq!(
        ids(kept.query(&query(root.to_owned(), None)).await.unwrap()),
        [third, second]
    );
}

#[tokio::test]
async fn sqlite_log_keeps_entries_and_prunes_old_ones() {
    let dir = tempfile::tempdir().unwrap();
    engine_keeps_entries_and_prunes_old_ones(
        AuditTarget::Sqlite(dir.path().join("log/audit.db")),
        "/r",
    )
    .await;
}

/// Appends do not copy the WAL back into the log file themselves (that is a checkpoint's
/// fsync, milliseconds, in the middle of an edit's answer): a checkpoint runs in the
/// background every 200 appends, so the WAL of changes made at a human pace stays small.
/// Without it the WAL of 2,000 appends grows to the appends' own threshold (16 MiB); with it,
/// it stays under 8 MB. Both runtimes: appends run on the calling thread on a multi-threaded
/// one, on the blocking pool otherwise.
async fn sqlite_log_wal_stays_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("audit.db");
    let log = AuditLog::open(&AuditTarget::Sqlite(file.clone()), None)
        .await
        .unwrap()
        .unwrap();
    let wal = dir.path().join("audit.db-wal");
    let mut largest = 0;
    for i in 0..2_000 {
        log.append(&change_at(SystemTime::now(), &format!("/f{i}.rs")))
            .await
            .unwrap();
        if i % 200 == 199 {
            // A pause, as between an agent's edits: the background checkpoint runs.
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        largest = largest.max(std::fs::metadata(&wal).map_or(0, |m| m.len()));
    }
    assert!(largest > 0, "the log is in WAL mode");
    assert!(
        largest < 8 * 1024 * 1024,
        "the WAL grew to {largest} bytes: appends are not checkpointed"
    );
    let entries = log
        .query(&Query {
            under: "/".to_owned(),
            since: None,
            limit: 1,
            reader: mountfs::storage::audit::Reader::Operator,
        })
        .await
        .unwrap();
    assert_eq!(
        entries[0].change.files[0].path, "/f1999.rs",
        "every entry kept"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_log_wal_stays_bounded_on_a_multi_threaded_runtime() {
    sqlite_log_wal_stays_bounded().await;
}

#[tokio::test]
async fn sqlite_log_wal_stays_bounded_on_a_single_threaded_runtime() {
    sqlite_log_wal_stays_bounded().await;
}

#[tokio::test]
async fn postgres_log_keeps_entries_and_prunes_old_ones() {
    let Some(url) = postgres_url("audit: PostgreSQL engine") else {
        return;
    };
    let root = format!("/{}", unique("auditlib"));
    engine_keeps_entries_and_prunes_old_ones(AuditTarget::Postgres(url), &root).await;
}

/// The log's own PostgreSQL sessions commit without waiting for the write-ahead log flush (the
/// cost that kept an append over 10% of an edit); `options` in the URL wins over that.
#[tokio::test]
async fn postgres_log_sessions_commit_asynchronously_unless_the_url_says_otherwise() {
    let Some(url) = postgres_url("audit: PostgreSQL log session settings") else {
        return;
    };
    let log = AuditLog::open(&AuditTarget::Postgres(url.clone()), None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        log.postgres_setting("synchronous_commit").await.unwrap(),
        Some("off".to_owned())
    );
    let joint = if url.contains('?') { '&' } else { '?' };
    let durable = format!("{url}{joint}options=-c%20synchronous_commit%3Don");
    let log = AuditLog::open(&AuditTarget::Postgres(durable), None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        log.postgres_setting("synchronous_commit").await.unwrap(),
        Some("on".to_owned())
    );
}

/// `--audit postgres:URL` naming a port nothing listens on stops start-up, as a store mount's
/// database does: exit code 2, the database named (never its password), and what to do.
#[tokio::test]
async fn an_unreachable_postgresql_log_stops_start_up_with_a_clear_message() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let (code, stderr) = crate::store_servers::start_up_error(&args(
        &["/=memory".to_owned()],
        &format!("postgres://agent:hunter2@127.0.0.1:{port}/db"),
    ))
    .await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "mountfs: audit log (PostgreSQL): PostgreSQL at 127.0.0.1:{port}/db: "
        )),
        "{stderr}"
    );
    assert!(stderr.contains("Connection refused"), "the cause: {stderr}");
    assert!(
        stderr.contains("Check the database, or start with --audit off"),
        "{stderr}"
    );
    assert!(!stderr.contains("hunter2"), "{stderr}");
}

/// The SQLite log is checked at start-up but opened at the first change: a server that
/// changes nothing never loads SQLite (its file stays empty), and a file that is not a
/// database still stops start-up with the cause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sqlite_log_opens_at_the_first_change_and_a_bad_file_stops_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("logs/audit.db");
    let server = McpServer::start(&args(
        &["/=memory".to_owned()],
        &format!("sqlite:{}", db.display()),
    ))
    .await;
    server.ok("ls", json!({})).await;
    server.ok("glob", json!({"pattern": "**/*"})).await;
    assert_eq!(
        std::fs::metadata(&db).unwrap().len(),
        0,
        "created (its directory too), not yet opened by SQLite"
    );
    server
        .ok(
            "write_file",
            json!({"file_path": "/a.txt", "content": "a\n"}),
        )
        .await;
    assert_eq!(history(&server, "/").await.len(), 1);
    server.stop().await;
    assert!(std::fs::metadata(&db).unwrap().len() > 0);

    let not_a_database = dir.path().join("notes.txt");
    std::fs::write(&not_a_database, "these are my notes, not a database\n").unwrap();
    let (code, stderr) = crate::store_servers::start_up_error(&args(
        &["/=memory".to_owned()],
        &format!("sqlite:{}", not_a_database.display()),
    ))
    .await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("file is not a database"), "{stderr}");
    assert!(stderr.contains("give --audit another file"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(&not_a_database).unwrap(),
        "these are my notes, not a database\n",
        "left as it was"
    );
    // A FIFO would hang a read of its header: refused as not a regular file, at once.
    let fifo = dir.path().join("fifo");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let (code, stderr) = crate::store_servers::start_up_error(&args(
        &["/=memory".to_owned()],
        &format!("sqlite:{}", fifo.display()),
    ))
    .await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("not a regular file"), "{stderr}");
}

/// The log's database goes away mid-session (every connection dropped, the port closed): the
/// edits still land and answer at once, their changes wait in the spool (once the server knows
/// the database is gone, answers say so), `history` says the log cannot be read, stderr has
/// one warning, the server keeps serving, and once the database is reachable again every
/// change that waited is written: nothing is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgresql_log_lost_mid_session_warns_once_and_the_waiting_changes_are_written_when_it_is_back()
 {
    let Some(url) = postgres_url("audit: PostgreSQL log lost mid-session") else {
        return;
    };
    let Some((relay, relayed, _db)) = crate::store_servers::relayed_postgres(&url).await else {
        return;
    };
    let prefix = format!("/{}", unique("auditdown"));
    let server = McpServer::start(&args(
        &[format!("{prefix}/=memory")],
        &format!("postgres:{relayed}"),
    ))
    .await;
    let file = format!("{prefix}/a.txt");
    server
        .ok("write_file", json!({"file_path": file, "content": "old\n"}))
        .await;
    assert_eq!(history(&server, &prefix).await.len(), 1);

    relay.cut();
    let edited = server
        .ok(
            "edit_file",
            json!({"file_path": file, "old_string": "old", "new_string": "new"}),
        )
        .await;
    assert!(!edited.text.contains("not logged"), "{}", edited.text);
    // The change landed, and the server keeps serving.
    let read = server.ok("read_file", json!({"file_path": file})).await;
    assert!(read.text.contains("new"), "{}", read.text);
    let down = server.call("history", json!({"path": prefix})).await;
    assert!(down.is_error, "{}", down.text);
    assert!(down.text.contains("audit log"), "{}", down.text);
    // The server knows the database is gone: the next answer says its change waits.
    let waiting = server
        .ok(
            "edit_file",
            json!({"file_path": file, "old_string": "new", "new_string": "newer"}),
        )
        .await;
    assert!(
        waiting
            .text
            .contains(&format!("PostgreSQL at 127.0.0.1:{}/", relay.port))
            && waiting.text.contains("does not answer")
            && waiting.text.contains("waits in the spool"),
        "the note names the database and says the change waits: {}",
        waiting.text
    );

    // The database is reachable again on the same address: what waited is written.
    let restored = crate::store_servers::Relay::start(relay.target, relay.port).await;
    let written = server
        .ok(
            "write_file",
            json!({"file_path": format!("{prefix}/b.txt"), "content": "b\n"}),
        )
        .await;
    assert!(!written.text.contains("not logged"), "{}", written.text);
    let listing = server
        .ok("history", json!({"path": prefix, "limit": 100}))
        .await;
    let logged: Vec<(&str, &str)> = listing.structured["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["tool"].as_str().unwrap(),
                e["files"][0]["path"].as_str().unwrap(),
            )
        })
        .collect();
    let b = format!("{prefix}/b.txt");
    assert_eq!(
        logged,
        [
            ("write_file", b.as_str()),
            ("edit_file", file.as_str()),
            ("edit_file", file.as_str()),
            ("write_file", file.as_str())
        ],
        "{}",
        listing.text
    );
    assert_eq!(listing.structured["not_logged"], 0);
    assert_eq!(listing.structured["waiting"], 0);
    let stderr = server.stderr();
    server.stop().await;
    restored.cut();
    assert_eq!(
        stderr.matches("audit log: cannot write to").count(),
        1,
        "{stderr}"
    );
}

/// Leaves on the disk mount `root` what a server killed in the middle of a change of `a.txt`
/// (replaced) and `new/b.txt` (created) leaves: both written through the change's journal,
/// decided (`decided`) or not, the journal never finished.
async fn cut_short_change(root: &Path, decided: bool) {
    use mountfs::ground::path::VirtualPath;
    use mountfs::storage::backend::{
        Backend, DiskBackend, DiskOptions, JournalRole, KeepAside, PlannedFile, WriteMode,
    };
    std::fs::write(root.join("a.txt"), "old\n").unwrap();
    // Sealed with the key the server process will trust: the one in its data directory
    // (XDG_DATA_HOME, which .cargo/config.toml sets for test runs), as a crashed server's
    // journals are (issue 41: recovery acts only on records it can prove it wrote).
    let data = std::env::var_os("XDG_DATA_HOME")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| Path::new(&std::env::var_os("HOME").unwrap()).join(".local/share"));
    let key =
        mountfs::storage::backend::disk::trust::RecoveryKey::in_dir(&data.join("mountfs")).unwrap();
    let options = DiskOptions {
        recovery: Some(std::sync::Arc::new(key)),
        ..DiskOptions::default()
    };
    let disk = DiskBackend::open_without_sweep(root, options).unwrap();
    let a = VirtualPath::parse("/a.txt").unwrap();
    let old = disk.read(&a).await.unwrap().version;
    let files = [
        PlannedFile {
            path: a,
            before: Some(old.clone()),
        },
        PlannedFile {
            path: VirtualPath::parse("/new/b.txt").unwrap(),
            before: None,
        },
    ];
    let journal = disk
        .begin_changes(&files, &JournalRole::Alone)
        .await
        .unwrap()
        .unwrap();
    journal
        .write(0, b"new\n", WriteMode::IfVersion(old))
        .await
        .unwrap();
    journal
        .write(1, b"b\n", WriteMode::CreateOnly)
        .await
        .unwrap();
    if decided {
        journal.mark_committed().await.unwrap();
    }
    drop(journal); // the process is gone, and its lock with it
}

/// Issue 32: a change a crash cut short is resolved at the next start before any tool touches
/// its mount, the next answer says what was done, and the audit log records it once as such:
/// a commit (on an overlay mount's base) rolled back, a patch (on a plain disk mount) that had
/// been decided completed; each entry names its files and shows what happened in the listing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_cut_short_by_a_crash_is_logged_once_as_rolled_back_or_completed() {
    let dir = tempfile::tempdir().unwrap();
    let (base, plain) = (dir.path().join("base"), dir.path().join("plain"));
    std::fs::create_dir_all(&base).unwrap();
    std::fs::create_dir_all(&plain).unwrap();
    cut_short_change(&base, false).await;
    cut_short_change(&plain, true).await;
    let audit_db = dir.path().join("audit.db");
    let arguments = args(
        &[
            format!(
                "/=disk:{},overlay=sqlite:{}",
                base.display(),
                dir.path().join("layer.db").display()
            ),
            format!("/p=disk:{}", plain.display()),
        ],
        &format!("sqlite:{}", audit_db.display()),
    );
    let server = McpServer::start(&arguments).await;
    assert_eq!(
        std::fs::read_to_string(base.join("a.txt")).unwrap(),
        "old\n"
    );
    assert!(
        !base.join("new").exists(),
        "the created file and directory go"
    );
    assert_eq!(
        std::fs::read_to_string(plain.join("a.txt")).unwrap(),
        "new\n"
    );
    assert_eq!(
        std::fs::read_to_string(plain.join("new/b.txt")).unwrap(),
        "b\n"
    );

    let first = server.ok("ls", json!({"path": "/"})).await;
    assert!(
        first
            .text
            .contains("in the middle of a change of 2 file(s) on the mount / by commit;")
            && first.text.contains("rolled back at this start"),
        "{}",
        first.text
    );
    assert!(
        first.text.contains(
            "just after a change of 2 file(s) on the mount /p/ by apply_patch was decided"
        ) && first.text.contains("completed at this start"),
        "{}",
        first.text
    );
    let second = server.ok("ls", json!({"path": "/"})).await;
    assert!(
        !second.text.contains("Note: the server was stopped"),
        "told once"
    );

    let mut entries = Vec::new();
    for _ in 0..50 {
        entries = history(&server, "/").await;
        if entries.len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    server.stop().await;
    let mut found: Vec<(String, String, Vec<String>, String)> = entries
        .iter()
        .map(|e| {
            (
                e["tool"].as_str().unwrap().to_owned(),
                e["principal"].as_str().unwrap().to_owned(),
                e["files"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|f| f["path"].as_str().unwrap().to_owned())
                    .collect(),
                e["summary"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    found.sort();
    assert_eq!(found.len(), 2, "one entry per resolved change: {entries:?}");
    assert_eq!(found[0].0, "apply_patch");
    assert_eq!(found[0].1, "mountfs");
    assert_eq!(found[0].2, ["/p/a.txt", "/p/new/b.txt"]);
    assert!(
        found[0].3.starts_with("Completed at start"),
        "{}",
        found[0].3
    );
    assert_eq!(found[1].0, "commit");
    assert_eq!(found[1].2, ["/a.txt", "/new/b.txt"]);
    assert!(
        found[1].3.starts_with("Rolled back at start"),
        "{}",
        found[1].3
    );

    let printed = log_command(&["--audit", &format!("sqlite:{}", audit_db.display())]);
    assert!(
        printed.contains("mountfs commit /a.txt (+1 more) +0 -0 [Rolled back at start"),
        "{printed}"
    );
    // The next start finds nothing to resolve and logs nothing more.
    let again = McpServer::start(&arguments).await;
    again.ok("ls", json!({})).await;
    again.stop().await;
    let printed = log_command(&[
        "--audit",
        &format!("sqlite:{}", audit_db.display()),
        "--json",
    ]);
    assert_eq!(printed.lines().count(), 2, "{printed}");
}

/// `mountfs log` prints what agents wrote on the operator's terminal: their escape sequences
/// (ESC, BEL, CR, DEL, C1's CSI) come out as `\u{XXXX}`, newlines and tabs as they are; its
/// JSON stays JSON with none of them raw.
#[tokio::test]
async fn mountfs_log_escapes_control_characters_an_agent_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let audit_db = dir.path().join("audit.db");
    let audit = format!("sqlite:{}", audit_db.display());
    let server = McpServer::start(&args(
        &[format!("/=disk:{}", work.path().display())],
        &audit,
    ))
    .await;
    let content = "\u{1b}]0;owned\u{7}\u{1b}[2J\tred\r\u{7f}\u{9b}31m\n";
    server
        .ok(
            "write_file",
            json!({"file_path": "/evil.txt", "content": content}),
        )
        .await;
    let id = history(&server, "/").await[0]["id"].as_i64().unwrap();
    server.stop().await;
    let raw = |text: &str| {
        text.chars()
            .any(|c| (c.is_control() && c != '\n' && c != '\t') || c == '\u{7f}')
    };
    let detail = log_command(&["--audit", &audit, "--id", &id.to_string()]);
    assert!(!raw(&detail), "{detail:?}");
    assert!(
        detail.contains(
            "+\\u{001B}]0;owned\\u{0007}\\u{001B}[2J\tred\\u{000D}\\u{007F}\\u{009B}31m\n"
        ),
        "{detail}"
    );
    for listing in [
        log_command(&["--audit", &audit]),
        log_command(&["--audit", &audit, "--json"]),
        log_command(&["--audit", &audit, "--json", "--id", &id.to_string()]),
    ] {
        assert!(!raw(&listing), "{listing:?}");
    }
    let json = log_command(&["--audit", &audit, "--json", "--id", &id.to_string()]);
    let entry: Value = serde_json::from_str(json.trim()).unwrap();
    assert!(
        entry["diff"].as_str().unwrap().contains(content.trim_end()),
        "{entry}"
    );
}

/// Through grants, `history` finds a granted entry behind more than a page of entries the
/// principal may not see (issue 43): the log is read page after page (keyset paging by time
/// and id), not only the newest 1,000 entries.
async fn granted_history_pages_past_hidden_entries(target: AuditTarget, root: &str) {
    let log = AuditLog::open(&target, None).await.unwrap().unwrap();
    let visible = log
        .append(&change_at(SystemTime::now(), &format!("{root}/b/plan.md")))
        .await
        .unwrap();
    for i in 0..2_500 {
        log.append(&change_at(SystemTime::now(), &format!("{root}/a/f{i}.md")))
            .await
            .unwrap();
    }
    let grants = mountfs::ground::grants::Grants::new(
        mountfs::ground::grants::parse(&format!("bob={root}/b/")).unwrap(),
    );
    let prefixes = [format!("{root}/a/"), format!("{root}/b/")]
        .iter()
        .map(|p| mountfs::ground::path::VirtualPath::parse(p).unwrap())
        .collect::<Vec<_>>();
    let view = grants.view("bob", None, &prefixes);
    assert!(view.is_some());
    let entries = log
        .query(&Query {
            under: root.to_owned(),
            since: None,
            limit: 5,
            reader: mountfs::storage::audit::Reader::Workspace {
                principal: "bob".into(),
                workspace: "bob".into(),
                view,
            },
        })
        .await
        .unwrap();
    let ids: Vec<i64> = entries.iter().map(|e| e.id).collect();
    assert_eq!(ids, [visible]);
}

#[tokio::test]
async fn sqlite_granted_history_pages_past_hidden_entries() {
    let dir = tempfile::tempdir().unwrap();
    granted_history_pages_past_hidden_entries(
        AuditTarget::Sqlite(dir.path().join("audit.db")),
        "/r",
    )
    .await;
}

#[tokio::test]
async fn postgres_granted_history_pages_past_hidden_entries() {
    let Some(url) = postgres_url("audit: granted history paging on PostgreSQL") else {
        return;
    };
    let root = format!("/{}", unique("auditpage"));
    granted_history_pages_past_hidden_entries(AuditTarget::Postgres(url), &root).await;
}
