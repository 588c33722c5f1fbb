//! Long searches report progress and stop on `notifications/cancelled` (issue 13): a whole-tree
//! grep of a 200 MB tree, cancelled mid-way, leaves the server idle — no walker still burning
//! CPU, no thread or file handle left behind — and serving the next request.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::stdio::StdioClient;

/// CPU time (user + system) the process has used, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    // utime and stime are fields 14 and 15 of stat, 12 and 13 after the state field's start.
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

fn count_entries(dir: String) -> usize {
    std::fs::read_dir(dir).expect("proc dir").count()
}

/// A tree of 4,000 files of 50 KB (200 MB) whose lines never match [`SLOW_PATTERN`]; the
/// lines hold letters beyond ASCII, so that the pattern's Unicode word boundaries keep every
/// regex engine off its fast paths.
fn big_tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let line = "the quick brown fox jumps över the lazy dog 0123456789 abcdéfghijklmnop\n";
    let content = line.repeat(50 * 1024 / line.len());
    for d in 0..40 {
        let sub = dir.path().join(format!("d{d:02}"));
        std::fs::create_dir(&sub).unwrap();
        for f in 0..100 {
            std::fs::write(sub.join(format!("f{f:03}.txt")), &content).unwrap();
        }
    }
    dir
}

/// A pattern no line of [`big_tree`] matches, without a literal to search for first, and with
/// Unicode word boundaries, which over non-ASCII text the fast (DFA) engines cannot run: every
/// line goes through the slowest engine, so the search lasts seconds even on a fast machine
/// (a literal pattern took well under the two progress intervals the test waits for).
const SLOW_PATTERN: &str = r"\b\w+\d{12}\b";

#[test]
fn a_cancelled_whole_tree_grep_stops_and_frees_its_threads_and_files() {
    let tree = big_tree();
    let disk = format!("/=disk:{}", tree.path().display());
    let mut client = StdioClient::start(&["--mount", &disk]);
    let pid = client.pid();
    // Warm up: the blocking pool thread a search runs on exists from now on.
    client.ok("grep", json!({"pattern": "fox", "path": "/d00/f000.txt"}));
    std::thread::sleep(Duration::from_millis(300));
    let threads_before = count_entries(format!("/proc/{pid}/task"));
    let files_before = count_entries(format!("/proc/{pid}/fd"));

    let id = client.send(
        "tools/call",
        json!({
            "name": "grep",
            "arguments": {"pattern": SLOW_PATTERN, "output_mode": "content"},
            "_meta": {"progressToken": "grep-1"}
        }),
    );
    // Progress arrives while it runs, growing.
    let mut progress: Vec<f64> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while progress.len() < 2 && Instant::now() < deadline {
        let Some(message) = client.recv_within(Duration::from_secs(5)) else {
            break;
        };
        if message["id"] == id {
            panic!("the search ended before it could be cancelled: {message}");
        }
        if message["method"] == "notifications/progress" {
            assert_eq!(message["params"]["progressToken"], "grep-1", "{message}");
            assert!(
                message["params"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("files searched, 0 with matches")),
                "{message}"
            );
            progress.push(message["params"]["progress"].as_f64().unwrap());
        }
    }
    assert_eq!(
        progress.len(),
        2,
        "two progress notifications: {progress:?}"
    );
    assert!(progress[1] > progress[0], "progress grows: {progress:?}");

    client.notify(
        "notifications/cancelled",
        json!({"requestId": id, "reason": "the user pressed stop"}),
    );
    let cancelled_at = Instant::now();
    // Give the walker threads time to see the cancellation, then measure the CPU still used.
    std::thread::sleep(Duration::from_millis(150));
    let ticks = cpu_ticks(pid);
    std::thread::sleep(Duration::from_millis(500));
    let burnt = cpu_ticks(pid) - ticks;
    assert!(
        burnt <= 5,
        "{burnt} ticks of CPU used 150-650 ms after the cancel: the search did not stop"
    );
    assert!(cancelled_at.elapsed() < Duration::from_secs(2));
    // The walker threads end as they see the cancellation; on a loaded machine the last may
    // take a moment to be reaped.
    let mut threads = count_entries(format!("/proc/{pid}/task"));
    for _ in 0..30 {
        if threads <= threads_before {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        threads = count_entries(format!("/proc/{pid}/task"));
    }
    assert!(
        threads <= threads_before,
        "no walker thread left: {threads} threads, {threads_before} before the search"
    );
    assert_eq!(
        count_entries(format!("/proc/{pid}/fd")),
        files_before,
        "no file handle left"
    );

    // The next request is served; a late answer to the cancelled one, if any, says so.
    let next = client.request("tools/call", json!({"name": "ls", "arguments": {}}));
    assert!(
        next["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("d00/")
    );
    let late: Option<Value> = client.take_early(id);
    if let Some(late) = late {
        let text = late["result"]["content"][0]["text"].as_str().unwrap_or("");
        assert!(text.starts_with("Error: grep was cancelled"), "{late}");
    }
    assert!(client.finish().success());
}

// ---------------------------------------------------------------------------------------------
// Multi-file changes (recursive delete, directory move, apply_patch): progress, then a cancel
// that stops the work and leaves every file as it was, with threads and file handles back.
// Each tree is large enough that the change runs for a good while (every disk write is
// fsync'ed, every SQLite commit too), and the cancel is sent only once a progress notification
// shows files changed already, so it lands mid-change whatever the machine's speed.

/// Every file and directory under `dir`: relative path → (size, hash of the content); a
/// directory as `None`.
fn tree_digest(dir: &std::path::Path) -> std::collections::BTreeMap<String, Option<(u64, u64)>> {
    use std::hash::{Hash, Hasher};
    let mut digest = std::collections::BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(current) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&current) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            let relative = path.strip_prefix(dir).unwrap().display().to_string();
            // The server's own temporary files come and go while it writes.
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if name.starts_with(".mountfs") {
                continue;
            }
            if path.is_dir() {
                digest.insert(relative, None);
                pending.push(path);
            } else {
                // (A file removed since the listing is simply not there.)
                let Ok(content) = std::fs::read(&path) else {
                    continue;
                };
                let mut hasher = std::collections::hash_map::DefaultHasher::new();
                content.hash(&mut hasher);
                digest.insert(relative, Some((content.len() as u64, hasher.finish())));
            }
        }
    }
    digest
}

/// Threads and open files of the server process. The SQLite mount's database files are not
/// counted: its connection pool opens another connection when calls overlap (the polling below
/// runs beside the change) and keeps it for reuse, bounded; a change's own handles are counted.
fn resources_of(pid: u32) -> (usize, usize) {
    let files = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .filter(|target| {
            let target = target.to_string_lossy();
            !(target.ends_with(".db") || target.ends_with(".db-wal") || target.ends_with(".db-shm"))
        })
        .count();
    (count_entries(format!("/proc/{pid}/task")), files)
}

/// Waits (at most 20 s: tokio keeps an idle blocking thread 10 s) until the server holds no
/// more threads and open files than `before`.
fn resources_back_to(pid: u32, before: (usize, usize)) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let now = resources_of(pid);
        if now.0 <= before.0 && now.1 <= before.1 {
            return;
        }
        if Instant::now() >= deadline {
            let files: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
                .unwrap()
                .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .map(|p| p.display().to_string())
                .collect();
            panic!(
                "threads and open files {now:?}, {before:?} before the change: something was left behind: {files:?}"
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Sends `tool(arguments)` with a progress token and reads its progress notifications until
/// one says `phase` has done at least one file; returns the request id and every progress seen.
/// Panics when the call answers first (it was too short to cancel).
fn call_until_phase(
    client: &mut StdioClient,
    tool: &str,
    arguments: Value,
    phase: &str,
) -> (u64, Vec<Value>) {
    let token = format!("{tool}-progress");
    let id = client.send(
        "tools/call",
        json!({"name": tool, "arguments": arguments, "_meta": {"progressToken": token}}),
    );
    let mut progress = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let Some(message) = client.recv_within(Duration::from_secs(30)) else {
            break;
        };
        if message["id"] == id {
            panic!("{tool} ended before it could be cancelled: {message}");
        }
        if message["method"] != "notifications/progress" {
            continue;
        }
        assert_eq!(message["params"]["progressToken"], token.as_str());
        let text = message["params"]["message"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        progress.push(message["params"].clone());
        let done_in_phase: u64 = text
            .split(' ')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        if text.ends_with(phase) && done_in_phase > 0 {
            return (id, progress);
        }
    }
    panic!("no progress in the {phase} phase of {tool}: {progress:?}");
}

/// Progress values grow with every notification, each under the total it carries.
fn assert_progress_grows(progress: &[Value]) {
    assert!(progress.len() >= 2, "{progress:?}");
    for pair in progress.windows(2) {
        let (a, b) = (pair[0]["progress"].as_f64(), pair[1]["progress"].as_f64());
        assert!(b > a, "progress must grow: {progress:?}");
    }
    for p in progress {
        let (done, total) = (
            p["progress"].as_f64().unwrap(),
            p["total"].as_f64().unwrap(),
        );
        assert!(done <= total, "{p}");
    }
}

/// Cancels `id`; then the server answers another request, and the cancelled call is either
/// not answered (rmcp drops the answer of a cancelled request) or answered as cancelled.
fn cancel_and_check_answer(client: &mut StdioClient, id: u64, tool: &str) -> Instant {
    client.notify(
        "notifications/cancelled",
        json!({"requestId": id, "reason": "the user pressed stop"}),
    );
    let cancelled_at = Instant::now();
    let next = client.request("tools/call", json!({"name": "ls", "arguments": {}}));
    assert!(next.get("result").is_some(), "{next}");
    if let Some(late) = client.take_early(id) {
        let text = late["result"]["content"][0]["text"].as_str().unwrap_or("");
        assert!(
            text.starts_with(&format!("Error: {tool} was cancelled.")),
            "{late}"
        );
    }
    cancelled_at
}

/// Polls `done` every 5 ms until it holds (at most 30 s); returns how long that took.
fn time_until(since: Instant, mut done: impl FnMut() -> bool, what: &str) -> Duration {
    let deadline = since + Duration::from_secs(30);
    while !done() {
        assert!(
            Instant::now() < deadline,
            "{what}: not within 30 s of the cancel"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    since.elapsed()
}

#[test]
fn a_cancelled_cross_mount_directory_move_leaves_the_source_whole_and_no_destination() {
    let top = tempfile::tempdir().unwrap();
    let (from_dir, to_dir) = (top.path().join("a"), top.path().join("b"));
    let source = from_dir.join("src");
    for d in 0..4 {
        std::fs::create_dir_all(source.join(format!("d{d}"))).unwrap();
        for f in 0..50 {
            let content = format!("file {d}/{f}\n").repeat(16 * 1024);
            std::fs::write(source.join(format!("d{d}/f{f:02}.txt")), content).unwrap();
        }
    }
    std::fs::create_dir(&to_dir).unwrap();
    std::fs::write(from_dir.join("warm.txt"), "warm\n").unwrap();
    let (a, b) = (
        format!("/a/=disk:{}", from_dir.display()),
        format!("/b/=disk:{}", to_dir.display()),
    );
    let mut client = StdioClient::start(&["--mount", &a, "--mount", &b]);
    let pid = client.pid();
    // Warm up: a small directory move across the mounts, and back.
    client.ok(
        "write_file",
        json!({"file_path": "/a/w/x.txt", "content": "x\n"}),
    );
    client.ok("move", json!({"source": "/a/w", "destination": "/b/w"}));
    client.ok("move", json!({"source": "/b/w", "destination": "/a/w"}));
    std::thread::sleep(Duration::from_millis(300));
    let before = resources_of(pid);
    let (source_before, destination_before) = (tree_digest(&from_dir), tree_digest(&to_dir));

    let (id, progress) = call_until_phase(
        &mut client,
        "move",
        json!({"source": "/a/src", "destination": "/b/moved/src"}),
        "files copied",
    );
    assert_progress_grows(&progress);
    assert_eq!(progress[0]["total"], 400.0, "{progress:?}");
    let cancelled_at = cancel_and_check_answer(&mut client, id, "move");
    let took = time_until(
        cancelled_at,
        || tree_digest(&to_dir) == destination_before,
        "the copies were not taken back",
    );
    eprintln!("cancelled directory move: destination gone {took:?} after the cancel");
    assert_eq!(tree_digest(&from_dir), source_before, "the source is whole");
    assert!(!to_dir.join("moved").exists(), "no partial destination");
    resources_back_to(pid, before);
    // Nothing is locked or half-recorded: the move runs whole when asked again.
    client.ok(
        "move",
        json!({"source": "/a/src", "destination": "/b/moved/src"}),
    );
    assert_eq!(tree_digest(&to_dir.join("moved/src")), {
        let mut moved = source_before.clone();
        moved.retain(|path, _| path.starts_with("src/"));
        moved
            .into_iter()
            .map(|(path, digest)| (path["src/".len()..].to_owned(), digest))
            .collect()
    });
    assert!(client.finish().success());
}

/// A patch changing the first line of each of `files` files `f0000.txt`….
fn patch_of_many(files: usize) -> String {
    (0..files)
        .map(|n| {
            format!(
                "--- a/p/f{n:04}.txt\n+++ b/p/f{n:04}.txt\n@@ -1,2 +1,2 @@\n-first line of {n}\n+changed line of {n}\n second line\n"
            )
        })
        .collect()
}

#[test]
fn a_cancelled_apply_patch_leaves_every_file_as_it_was() {
    const FILES: usize = 600;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("p")).unwrap();
    for n in 0..FILES {
        std::fs::write(
            dir.path().join(format!("p/f{n:04}.txt")),
            format!("first line of {n}\nsecond line\n"),
        )
        .unwrap();
    }
    let disk = format!("/=disk:{}", dir.path().display());
    let mut client = StdioClient::start(&["--mount", &disk]);
    let pid = client.pid();
    // A patch changes only files this session read.
    for n in 0..FILES {
        client.ok("read_file", json!({"file_path": format!("/p/f{n:04}.txt")}));
    }
    client.ok(
        "write_file",
        json!({"file_path": "/warm.txt", "content": "a\n"}),
    );
    client.ok(
        "apply_patch",
        json!({"patch": "--- a/warm.txt\n+++ b/warm.txt\n@@ -1 +1 @@\n-a\n+b\n"}),
    );
    std::thread::sleep(Duration::from_millis(300));
    let before = resources_of(pid);
    let digest_before = tree_digest(dir.path());

    let (id, progress) = call_until_phase(
        &mut client,
        "apply_patch",
        json!({"patch": patch_of_many(FILES)}),
        "files changed",
    );
    assert_progress_grows(&progress);
    assert_eq!(progress[0]["total"], (2 * FILES) as f64, "{progress:?}");
    let cancelled_at = cancel_and_check_answer(&mut client, id, "apply_patch");
    let took = time_until(
        cancelled_at,
        || tree_digest(dir.path()) == digest_before,
        "the files changed were not put back",
    );
    eprintln!("cancelled apply_patch: every file as before {took:?} after the cancel");
    resources_back_to(pid, before);
    // Nothing half-recorded: the same patch applies whole now.
    client.ok("apply_patch", json!({"patch": patch_of_many(FILES)}));
    let changed = std::fs::read_to_string(dir.path().join("p/f0599.txt")).unwrap();
    assert_eq!(changed, "changed line of 599\nsecond line\n");
    assert!(client.finish().success());
}

#[test]
fn a_cancelled_recursive_delete_deletes_nothing() {
    const FILES: usize = 600;
    let top = tempfile::tempdir().unwrap();
    let (disk_dir, db) = (top.path().join("disk"), top.path().join("store.db"));
    let tree = disk_dir.join("tree");
    for n in 0..FILES {
        let sub = tree.join(format!("d{}", n % 10));
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(
            sub.join(format!("f{n:04}.md")),
            format!("note {n}\n").repeat(40),
        )
        .unwrap();
    }
    let original = tree_digest(&tree);
    let (disk, store) = (
        format!("/disk/=disk:{}", disk_dir.display()),
        format!("/store/=store:sqlite:{}", db.display()),
    );
    let mut client = StdioClient::start(&["--mount", &disk, "--mount", &store]);
    let pid = client.pid();
    // Into the store (one SQLite commit per file, each fsync'ed: the slow path).
    client.ok(
        "move",
        json!({"source": "/disk/tree", "destination": "/store/tree"}),
    );
    client.ok(
        "write_file",
        json!({"file_path": "/store/w/x.md", "content": "x\n"}),
    );
    client.ok(
        "delete",
        json!({"file_path": "/store/w", "recursive": true}),
    );
    std::thread::sleep(Duration::from_millis(300));
    let before = resources_of(pid);

    let (id, progress) = call_until_phase(
        &mut client,
        "delete",
        json!({"file_path": "/store/tree", "recursive": true}),
        "files deleted",
    );
    assert_progress_grows(&progress);
    assert_eq!(progress[0]["total"], (2 * FILES) as f64, "{progress:?}");
    let cancelled_at = cancel_and_check_answer(&mut client, id, "delete");
    let took = time_until(
        cancelled_at,
        || {
            let listed = client.ok("glob", json!({"pattern": "**/*.md", "path": "/store/tree"}));
            listed.lines().filter(|l| l.ends_with(".md")).count() == FILES
        },
        "the files deleted were not written back",
    );
    eprintln!("cancelled recursive delete: every file back {took:?} after the cancel");
    resources_back_to(pid, before);
    // Every byte is back: moved out to disk again, the tree is the original one.
    client.ok(
        "move",
        json!({"source": "/store/tree", "destination": "/disk/back"}),
    );
    assert_eq!(tree_digest(&disk_dir.join("back")), original);
    assert!(client.finish().success());
}
