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

/// A tree of 4,000 files of 50 KB (200 MB) whose lines never match `needle`.
fn big_tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let line = "the quick brown fox jumps over the lazy dog 0123456789 abcdefghijklmnop\n";
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
            "arguments": {"pattern": "needle-[0-9]+-never", "output_mode": "content"},
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
    assert!(
        count_entries(format!("/proc/{pid}/task")) <= threads_before,
        "no walker thread left"
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
