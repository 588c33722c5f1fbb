//! `execute` with a `cwd` in a shell mount (issue 27): the command runs on the target, in that
//! directory, with stdout, stderr and the exit code kept apart; a file it writes is what
//! read_file then sees (and a read made before it is stale); the timeout and a cancellation
//! stop the command and its children on the target; the text runs exactly as given; a cwd
//! leading out of the mount is refused. On a local `sh`, a busybox-only `sh` and a real
//! OpenSSH server (those present here; a missing one prints a SKIPPED line).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mountfs::state::session::{Session, WriteOptions};
use mountfs::storage::backend::Backend;
use mountfs::storage::exec::ExecMode;
use mountfs::tools::{CallContext, ToolError, ToolReply};
use serde_json::{Value, json};

use crate::support::backends;
use crate::support::shells::{self, Target};

fn targets(group: &str) -> Vec<(&'static str, Target)> {
    let mut out = vec![("sh", shells::local())];
    if let Some(target) = shells::busybox(group) {
        out.push(("busybox", target));
    }
    if let Some(target) = shells::busybox_without_setsid(group) {
        out.push(("busybox without setsid", target));
    }
    if let Some(target) = shells::ssh(group) {
        out.push(("ssh", target));
    }
    out
}

fn session(target: &Target) -> Session {
    let backend: Arc<dyn Backend> = target.backend();
    backends::session_over(
        backend,
        WriteOptions {
            exec: Some(ExecMode::Sandboxed),
            ..WriteOptions::default()
        },
    )
}

async fn execute(session: &Session, args: Value) -> Result<ToolReply, ToolError> {
    mountfs::tools::call_in("execute", args, session, &CallContext::default()).await
}

async fn call(session: &Session, tool: &str, args: Value) -> Result<ToolReply, ToolError> {
    mountfs::tools::call_in(tool, args, session, &CallContext::default()).await
}

/// Whether process `pid` is gone (or a zombie nobody reaped yet), checked for up to 10 s.
fn gone(pid: i32) -> bool {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rsplit(')').next().map(|r| r.trim().to_owned()));
        match state {
            None => return true,
            Some(s) if s.starts_with('Z') => return true,
            Some(_) if Instant::now() > until => return false,
            Some(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// The pids a command wrote into `file` (waits for it to hold `count` of them).
fn pids(file: &Path, count: usize) -> Vec<i32> {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let found: Vec<i32> = text
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        if found.len() >= count && text.ends_with('\n') {
            return found;
        }
        assert!(Instant::now() < until, "no pids in {}", file.display());
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_runs_in_its_directory_on_the_target_with_streams_apart() {
    for (label, target) in targets("shell execute") {
        let session = session(&target);
        std::fs::create_dir(target.dir.path().join("sub dir")).unwrap();
        let reply = execute(
            &session,
            json!({"command": "pwd; echo out; echo err >&2; exit 3", "cwd": "/sub dir"}),
        )
        .await
        .unwrap_or_else(|e| panic!("{label}: {e}"));
        let s = reply.structured.unwrap();
        let real = std::fs::canonicalize(target.dir.path().join("sub dir")).unwrap();
        assert_eq!(s["exit_code"], 3, "{label}: {s}");
        assert_eq!(
            s["stdout"],
            format!("{}\nout\n", real.display()),
            "{label}: {s}"
        );
        assert_eq!(s["stderr"], "err\n", "{label}: {s}");
        assert_eq!(s["timed_out"], false);
        assert!(
            reply.text.starts_with("exit code 3"),
            "{label}: {}",
            reply.text
        );
        // A connection given back after a command serves file calls and commands after it.
        for i in 0..3 {
            let command = format!("echo {i}; echo e{i} >&2");
            let again = execute(&session, json!({"command": command, "cwd": "/"}))
                .await
                .unwrap();
            let s = again.structured.unwrap();
            assert_eq!(s["stdout"], format!("{i}\n"), "{label}");
            assert_eq!(s["stderr"], format!("e{i}\n"), "{label}");
            let name = format!("/n{i}.txt");
            call(
                &session,
                "write_file",
                json!({"file_path": name, "content": "n"}),
            )
            .await
            .unwrap();
            let listing = call(&session, "ls", json!({"path": "/"})).await.unwrap();
            assert!(
                listing.text.contains(&name[1..]),
                "{label}: {}",
                listing.text
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_text_runs_exactly_as_given() {
    let command = "printf '%s|' \"it's\" '$(echo no)' \"$(echo yes)\" `echo tick` 'a\\b'\nprintf '\\n%s\\n' second-line";
    for (label, target) in targets("shell execute text") {
        let session = session(&target);
        let reply = execute(&session, json!({"command": command, "cwd": "/"}))
            .await
            .unwrap_or_else(|e| panic!("{label}: {e}"));
        let s = reply.structured.unwrap();
        assert_eq!(
            s["stdout"], "it's|$(echo no)|yes|tick|a\\b|\nsecond-line\n",
            "{label}: {s}"
        );
        assert_eq!(s["exit_code"], 0, "{label}: {s}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_the_command_writes_is_read_back_and_an_earlier_read_is_stale() {
    for (label, target) in targets("shell execute writes") {
        let session = session(&target);
        call(
            &session,
            "write_file",
            json!({"file_path": "/f.txt", "content": "one\n"}),
        )
        .await
        .unwrap();
        call(&session, "read_file", json!({"file_path": "/f.txt"}))
            .await
            .unwrap();
        execute(&session, json!({"command": "echo two > f.txt", "cwd": "/"}))
            .await
            .unwrap_or_else(|e| panic!("{label}: {e}"));
        let stale = call(
            &session,
            "edit_file",
            json!({"file_path": "/f.txt", "old_string": "one", "new_string": "three"}),
        )
        .await;
        assert!(stale.is_err(), "{label}: a stale edit went through");
        let read = call(&session, "read_file", json!({"file_path": "/f.txt"}))
            .await
            .unwrap();
        assert!(read.text.contains("two"), "{label}: {}", read.text);
    }
}

const SLEEPER: &str = "sleep 100 & echo $! > pids; sleep 100 & echo $! >> pids; wait";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_timeout_stops_the_command_and_its_children_on_the_target() {
    for (label, target) in targets("shell execute timeout") {
        let session = session(&target);
        let reply = execute(
            &session,
            json!({"command": SLEEPER, "cwd": "/", "timeout": 1}),
        )
        .await
        .unwrap_or_else(|e| panic!("{label}: {e}"));
        let s = reply.structured.unwrap();
        assert_eq!(s["timed_out"], true, "{label}: {s}");
        assert!(
            reply.text.contains("timed out after 1 s"),
            "{label}: {}",
            reply.text
        );
        for pid in pids(&target.dir.path().join("pids"), 2) {
            assert!(gone(pid), "{label}: sleep {pid} outlived the timeout");
        }
        // The mount still works, and so do commands.
        call(&session, "ls", json!({"path": "/"})).await.unwrap();
        let after = execute(&session, json!({"command": "echo after", "cwd": "/"}))
            .await
            .unwrap();
        assert_eq!(after.structured.unwrap()["stdout"], "after\n", "{label}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancellation_stops_the_command_and_file_calls_work_meanwhile() {
    for (label, target) in targets("shell execute cancel") {
        let session = Arc::new(session(&target));
        let context = CallContext::default();
        let cancel = context.cancel.clone();
        let running = {
            let session = session.clone();
            tokio::spawn(async move {
                mountfs::tools::call_in(
                    "execute",
                    json!({"command": SLEEPER, "cwd": "/"}),
                    &session,
                    &context,
                )
                .await
            })
        };
        let file = target.dir.path().join("pids");
        let found = tokio::task::spawn_blocking(move || pids(&file, 2))
            .await
            .unwrap();
        // A file call is not held up by the running command.
        call(
            &session,
            "write_file",
            json!({"file_path": "/x.txt", "content": "x"}),
        )
        .await
        .unwrap_or_else(|e| panic!("{label}: {e}"));
        cancel.cancel();
        let reply = running.await.unwrap().unwrap();
        let s = reply.structured.unwrap();
        assert_eq!(s["cancelled"], true, "{label}: {s}");
        for pid in found {
            assert!(gone(pid), "{label}: sleep {pid} outlived the cancellation");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cwd_leading_out_of_the_mount_is_refused() {
    for (label, target) in targets("shell execute way out") {
        let session = session(&target);
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), target.dir.path().join("out")).unwrap();
        std::fs::create_dir(target.dir.path().join("in")).unwrap();
        for cwd in ["/out", "/in/../..", "/../"] {
            let refused = execute(&session, json!({"command": "touch ran", "cwd": cwd})).await;
            assert!(refused.is_err(), "{label}: cwd {cwd} was accepted");
        }
        assert!(!outside.path().join("ran").exists(), "{label}");
        let file = execute(&session, json!({"command": "true", "cwd": "/nope"})).await;
        assert!(
            file.unwrap_err().to_string().contains("does not exist"),
            "{label}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_output_is_saved_and_paged_and_read_only_mounts_and_the_default_cwd_stay_off() {
    let target = shells::local();
    let options = WriteOptions {
        exec: Some(ExecMode::Sandboxed),
        ..WriteOptions::default()
    };
    let session = Session::new(
        Arc::new(backends::composite(vec![
            backends::mount("/t/", target.backend(), false),
            backends::mount("/ro/", target.backend(), true),
            backends::memory_mount("/scratch/"),
        ])),
        options,
    );
    let reply = execute(
        &session,
        json!({"command": "i=0; while [ $i -lt 20000 ]; do echo line $i; i=$((i+1)); done", "cwd": "/t"}),
    )
    .await
    .unwrap();
    assert!(
        reply.text.contains("saved in /scratch/large_tool_results/"),
        "{}",
        &reply.text[..reply.text.len().min(2000)]
    );
    assert!(
        reply.text.contains("line 19999"),
        "the last lines are shown"
    );
    let refused = execute(&session, json!({"command": "touch ran", "cwd": "/ro"})).await;
    assert!(
        refused
            .unwrap_err()
            .to_string()
            .contains("read-only shell mount"),
        "a read-only shell mount ran a command"
    );
    assert!(!target.dir.path().join("ran").exists());
    // Without a cwd the default stays the disk mount closest to /: there is none here.
    let default = execute(&session, json!({"command": "true"})).await;
    assert!(
        default.unwrap_err().to_string().contains("no disk mount"),
        "a command ran without a disk mount"
    );
}

/// A process a command leaves behind outside its group (a dev server started with `setsid`,
/// or any background process where the target has no `setsid`) keeps the connection's stdout
/// and stderr: what it prints later must never reach a file call's answer. The connection the
/// command ran on used to go back to the pool, and the next call on it read the leftover's
/// `TICK` lines as part of its answer (a malformed answer, or bytes mixed into a file's
/// content).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_of_a_process_left_behind_never_reaches_a_later_call() {
    // Prints for 4 s, from outside the command's process group where the target can.
    const LEFT: &str = "t='sleep 0.5; i=0; while [ $i -lt 400 ]; do echo TICK; echo TOCK >&2; sleep 0.01; i=$((i+1)); done'; \
        if command -v setsid >/dev/null 2>&1; then setsid sh -c \"$t\" & else sh -c \"$t\" & fi; sleep 0.2; echo started";
    for (label, target) in targets("shell execute leftovers") {
        let backend = target.backend();
        let session = backends::session_over(
            backend.clone(),
            WriteOptions {
                exec: Some(ExecMode::Sandboxed),
                ..WriteOptions::default()
            },
        );
        let content: Vec<u8> = (0..200_000u32)
            .flat_map(|i| format!("line {i}\n").into_bytes())
            .collect();
        std::fs::write(target.dir.path().join("f.txt"), &content).unwrap();
        let reply = execute(&session, json!({"command": LEFT, "cwd": "/"}))
            .await
            .unwrap_or_else(|e| panic!("{label}: {e}"));
        assert_eq!(reply.structured.unwrap()["stdout"], "started\n", "{label}");
        let until = Instant::now() + Duration::from_secs(3);
        let mut reads = 0;
        while Instant::now() < until {
            let read = backend
                .read(&mountfs::ground::path::VirtualPath::parse("/f.txt").unwrap())
                .await
                .unwrap_or_else(|e| panic!("{label}: read {reads} failed: {e}"));
            assert!(
                read.content == content,
                "{label}: read {reads} came back with {} bytes, not the file's {}",
                read.content.len(),
                content.len()
            );
            reads += 1;
        }
        let listing = call(&session, "ls", json!({"path": "/"}))
            .await
            .unwrap_or_else(|e| panic!("{label}: {e}"));
        assert!(!listing.text.contains("TICK"), "{label}: {}", listing.text);
        // Let the leftover end before the target's directory goes.
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}
