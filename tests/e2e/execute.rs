//! `execute` over stdio (issue 11): output and exit codes, the timeout and cancellation killing a
//! whole process tree, stdin, `cwd` in nested disk mounts, the Landlock sandbox, large output
//! saved to `/scratch/`, and the tool's absence without `--allow-exec`.
//!
//! Sandbox tests need Landlock; where the kernel has none they say so in one SKIPPED line.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::stdio::{StdioClient, text_of};

/// A server with `/` = a writable disk mount of a fresh directory, `/scratch/` = memory.
struct Exec {
    client: StdioClient,
    /// Holds the mounted directories (`root/w` mounted at `/`).
    root: tempfile::TempDir,
}

impl Exec {
    fn start(extra: &[&str]) -> Self {
        Self::start_with("--allow-exec", extra)
    }

    fn start_with(flag: &str, extra: &[&str]) -> Self {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("w")).unwrap();
        let w = format!("/=disk:{}", root.path().join("w").display());
        let mut args = vec![flag, "--mount", &w, "--mount", "/scratch/=memory"];
        args.extend_from_slice(extra);
        Self {
            client: StdioClient::start(&args),
            root,
        }
    }

    fn w(&self) -> PathBuf {
        self.root.path().join("w")
    }

    fn run(&mut self, arguments: Value) -> Value {
        self.client.call("execute", arguments)
    }
}

fn landlock() -> bool {
    match mountfs::exec::sandbox::probe() {
        Ok(()) => true,
        Err(error) => {
            crate::skips::record("the execute sandbox (Landlock)", &error.to_string());
            false
        }
    }
}

fn process_gone(pid: &str) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{}/status", pid.trim()));
    // Gone, or a zombie waiting for init to reap it.
    status.map_or(true, |s| s.contains("State:\tZ"))
}

fn wait_gone(pid: &str, within: Duration) -> bool {
    let until = Instant::now() + within;
    while Instant::now() < until {
        if process_gone(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    process_gone(pid)
}

#[test]
fn stdout_stderr_and_exit_code_are_labelled() {
    if !landlock() {
        return;
    }
    let mut e = Exec::start(&[]);
    let result = e.run(json!({"command": "echo out; echo err >&2; exit 3"}));
    assert_eq!(result["isError"], false);
    let text = text_of(&result);
    assert!(text.starts_with("exit code 3, "), "{text}");
    assert!(text.ends_with("\nstdout:\nout\nstderr:\nerr"), "{text}");
    let s = &result["structuredContent"];
    assert_eq!(s["exit_code"], 3);
    assert_eq!(s["signal"], Value::Null);
    assert_eq!(s["timed_out"], false);
    assert_eq!(s["cancelled"], false);
    assert_eq!(s["stdout"], "out\n");
    assert_eq!(s["stderr"], "err\n");
    assert!(s["duration_ms"].as_u64().is_some());

    let ok = e.run(json!({"command": "true"}));
    let text = text_of(&ok);
    assert!(text.starts_with("exit code 0, "), "{text}");
    assert!(text.ends_with("stdout: (empty)\nstderr: (empty)"), "{text}");
}

#[test]
fn the_environment_is_non_interactive_and_stdin_is_empty() {
    if !landlock() {
        return;
    }
    let mut e = Exec::start(&[]);
    let started = Instant::now();
    let result = e.run(json!({
        "command": "cat; read line || echo no-input; echo \"$PAGER $GIT_TERMINAL_PROMPT $TERM\"",
        "timeout": 20
    }));
    assert!(started.elapsed() < Duration::from_secs(10));
    let s = &result["structuredContent"];
    assert_eq!(s["stdout"], "no-input\ncat 0 dumb\n");
    assert_eq!(s["exit_code"], 0);
}

#[test]
fn the_timeout_kills_the_whole_process_tree() {
    if !landlock() {
        return;
    }
    let mut e = Exec::start(&[]);
    let started = Instant::now();
    let result = e.run(json!({
        "command": "sh -c 'sleep 300' & echo $! > grandchild.pid; echo started; sleep 300",
        "timeout": 1
    }));
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    let text = text_of(&result);
    assert!(
        text.contains("Stopped: the command timed out after 1 s"),
        "{text}"
    );
    assert!(text.contains("stdout:\nstarted"), "{text}");
    assert_eq!(result["structuredContent"]["timed_out"], true);
    assert_eq!(result["structuredContent"]["signal"], 15);
    let pid = std::fs::read_to_string(e.w().join("grandchild.pid")).unwrap();
    assert!(
        wait_gone(&pid, Duration::from_secs(3)),
        "the sleeper {pid} outlived the call"
    );
}

#[test]
fn background_processes_do_not_outlive_the_call() {
    if !landlock() {
        return;
    }
    let mut e = Exec::start(&[]);
    let result = e.run(json!({"command": "sleep 300 > /dev/null 2>&1 & echo $! > bg.pid"}));
    let text = text_of(&result);
    assert!(text.starts_with("exit code 0"), "{text}");
    assert!(
        text.contains("left running in the background were stopped"),
        "{text}"
    );
    let pid = std::fs::read_to_string(e.w().join("bg.pid")).unwrap();
    assert!(wait_gone(&pid, Duration::from_secs(3)));
}

#[test]
fn cancellation_kills_the_process_tree() {
    if !landlock() {
        return;
    }
    let mut e = Exec::start(&[]);
    let id = e.client.send(
        "tools/call",
        json!({"name": "execute", "arguments": {
            "command": "sleep 300 & echo $! > sleeper.pid; wait",
            "timeout": 600
        }}),
    );
    let pid_file = e.w().join("sleeper.pid");
    let until = Instant::now() + Duration::from_secs(10);
    while std::fs::read_to_string(&pid_file).map_or(true, |p| p.trim().is_empty()) {
        assert!(Instant::now() < until, "the command did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = std::fs::read_to_string(&pid_file).unwrap();
    assert!(!process_gone(&pid));
    e.client.notify(
        "notifications/cancelled",
        json!({"requestId": id, "reason": "test"}),
    );
    assert!(
        wait_gone(&pid, Duration::from_secs(5)),
        "the sleeper {pid} outlived the cancellation"
    );
    // The server keeps serving.
    let after = e.run(json!({"command": "echo still here"}));
    assert_eq!(after["structuredContent"]["stdout"], "still here\n");
}

#[test]
fn ending_the_session_kills_a_running_command() {
    if !landlock() {
        return;
    }
    let e = Exec::start(&[]);
    e.client.send(
        "tools/call",
        json!({"name": "execute", "arguments": {
            "command": "sleep 300 & echo $! > sleeper.pid; wait", "timeout": 600
        }}),
    );
    let pid_file = e.w().join("sleeper.pid");
    let until = Instant::now() + Duration::from_secs(10);
    while std::fs::read_to_string(&pid_file).map_or(true, |p| p.trim().is_empty()) {
        assert!(Instant::now() < until, "the command did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = std::fs::read_to_string(&pid_file).unwrap();
    let Exec {
        client,
        root: _root,
    } = e;
    client.finish();
    assert!(
        wait_gone(&pid, Duration::from_secs(5)),
        "the sleeper {pid} outlived the session"
    );
}

#[test]
fn cwd_may_be_inside_a_nested_disk_mount_but_not_in_memory() {
    if !landlock() {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    for dir in ["a", "b/x"] {
        std::fs::create_dir_all(root.path().join(dir)).unwrap();
    }
    let a = format!("/=disk:{}", root.path().join("a").display());
    let b = format!("/sub/=disk:{}", root.path().join("b").display());
    let mut c = StdioClient::start(&[
        "--allow-exec",
        "--mount",
        &a,
        "--mount",
        &b,
        "--mount",
        "/scratch/=memory",
    ]);
    let result = c.call(
        "execute",
        json!({"command": "echo made > here.txt; basename \"$(pwd)\"", "cwd": "/sub/x"}),
    );
    assert_eq!(result["structuredContent"]["stdout"], "x\n");
    assert_eq!(
        std::fs::read_to_string(root.path().join("b/x/here.txt")).unwrap(),
        "made\n"
    );
    assert_eq!(
        c.ok("read_file", json!({"file_path": "/sub/x/here.txt"})),
        "     1\tmade"
    );

    let err = c.err("execute", json!({"command": "true", "cwd": "/scratch"}));
    assert!(
        err.starts_with(
            "Error: execute: cwd /scratch is not in a disk mount; only disk mounts can run commands"
        ),
        "{err}"
    );
    let err = c.err("execute", json!({"command": "true", "cwd": "/sub/nope"}));
    assert!(
        err.starts_with("Error: execute: cwd /sub/nope does not exist"),
        "{err}"
    );
    let err = c.err(
        "execute",
        json!({"command": "true", "cwd": "/sub/x/here.txt"}),
    );
    assert!(err.contains("is a file, not a directory"), "{err}");
}

#[test]
fn the_sandbox_lets_commands_write_only_in_writable_disk_mounts() {
    if !landlock() {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    for dir in ["w", "ro", "home"] {
        std::fs::create_dir(root.path().join(dir)).unwrap();
    }
    let outside_tmp =
        std::env::temp_dir().join(format!("mountfs-exec-test-{}", std::process::id()));
    let w = format!("/=disk:{}", root.path().join("w").display());
    let ro = format!("/ro/=disk:{},ro", root.path().join("ro").display());
    let mut c = StdioClient::start(&["--allow-exec", "--mount", &w, "--mount", &ro]);
    let home = root.path().join("home");
    let command = format!(
        "touch inside && echo inside-ok; \
         touch ../escaped; \
         touch {home}/in-home; \
         touch {tmp}; \
         touch {ro}/in-ro; \
         touch \"$TMPDIR/scratch\" && echo tmpdir-ok",
        home = home.display(),
        tmp = outside_tmp.display(),
        ro = root.path().join("ro").display(),
    );
    let result = c.call("execute", json!({"command": command}));
    let s = &result["structuredContent"];
    assert_eq!(s["stdout"], "inside-ok\ntmpdir-ok\n", "{result}");
    let stderr = s["stderr"].as_str().unwrap();
    assert_eq!(
        stderr.matches("Permission denied").count(),
        4,
        "every write outside must fail with EACCES: {stderr}"
    );
    assert!(root.path().join("w/inside").exists());
    assert!(!root.path().join("escaped").exists());
    assert!(!home.join("in-home").exists());
    assert!(!outside_tmp.exists());
    assert!(!root.path().join("ro/in-ro").exists());
}

#[test]
fn a_megabyte_of_output_is_saved_to_scratch_and_pages_with_read_file() {
    if !landlock() {
        return;
    }
    let mut e = Exec::start(&[]);
    // A request id with every character the seed's sanitizer replaces.
    e.client.send_raw(
        &json!({"jsonrpc": "2.0", "id": "../big.run\\1", "method": "tools/call",
                "params": {"name": "execute", "arguments": {"command": "seq 1 160000"}}})
        .to_string(),
    );
    let response = loop {
        let message = e.client.recv();
        if message["id"] == "../big.run\\1" {
            break message;
        }
    };
    let result = &response["result"];
    let text = text_of(result);
    assert!(text.chars().count() <= 80_000, "{}", text.len());
    assert!(text.starts_with("exit code 0, "), "{}", &text[..100]);
    assert!(text.contains("\nstdout:\n1\n2\n3\n"));
    assert!(
        text.ends_with("159999\n160000\nstderr: (empty)"),
        "{}",
        &text[text.len() - 100..]
    );
    let path = "/scratch/large_tool_results/___big_run_1";
    assert!(
        text.contains(&format!(
            "is saved in {path}: page through it with read_file"
        )),
        "{text:.300}"
    );
    let page = e.client.ok(
        "read_file",
        json!({"file_path": path, "offset": 100_001, "limit": 3}),
    );
    assert!(
        page.starts_with("100002\t100000\n100003\t100001\n100004\t100002"),
        "{page}"
    );
    // A second large result with the same id gets a file of its own.
    e.client.send_raw(
        &json!({"jsonrpc": "2.0", "id": "../big.run\\1", "method": "tools/call",
                "params": {"name": "execute", "arguments": {"command": "seq 1 160000"}}})
        .to_string(),
    );
    let again = loop {
        let message = e.client.recv();
        if message["id"] == "../big.run\\1" {
            break message;
        }
    };
    assert!(text_of(&again["result"]).contains(&format!("{path}-2")));
}

#[test]
fn without_a_scratch_mount_a_large_output_is_cut_with_the_usual_notice() {
    if !landlock() {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let w = format!("/=disk:{}", root.path().display());
    let mut c = StdioClient::start(&["--allow-exec", "--mount", &w]);
    let text = c.ok("execute", json!({"command": "seq 1 160000"}));
    assert!(text.chars().count() <= 80_000);
    assert!(
        text.ends_with("\n... [results truncated, try being more specific with your parameters]")
    );
}

#[test]
fn a_file_changed_by_a_command_must_be_read_again_before_an_edit() {
    if !landlock() {
        return;
    }
    let mut e = Exec::start(&[]);
    std::fs::write(e.w().join("f.txt"), "one\n").unwrap();
    e.client.ok("read_file", json!({"file_path": "/f.txt"}));
    e.run(json!({"command": "echo two >> f.txt"}));
    let err = e.client.err(
        "write_file",
        json!({"file_path": "/f.txt", "content": "three\n"}),
    );
    assert!(
        err.starts_with("Error: File has been modified since it was read"),
        "{err}"
    );
    assert_eq!(
        e.client.ok("read_file", json!({"file_path": "/f.txt"})),
        "     1\tone\n     2\ttwo"
    );
}

#[test]
fn without_allow_exec_the_tool_does_not_exist() {
    let root = tempfile::tempdir().unwrap();
    let w = format!("/=disk:{}", root.path().display());
    let mut c = StdioClient::start(&["--mount", &w]);
    let listed = c.request("tools/list", json!({}));
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(!names.contains(&"execute"), "{names:?}");
    let response = c.request(
        "tools/call",
        json!({"name": "execute", "arguments": {"command": "touch x"}}),
    );
    assert_eq!(response["error"]["code"], -32602, "{response}");
    assert!(
        response["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("Unknown tool: execute."),
        "{response}"
    );
    assert!(!root.path().join("x").exists());
}

#[test]
fn with_allow_exec_the_tool_is_listed_with_true_annotations_and_its_sandbox() {
    if !landlock() {
        return;
    }
    let mut e = Exec::start(&[]);
    let listed = e.client.request("tools/list", json!({}));
    let tool = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "execute")
        .cloned()
        .expect("execute listed");
    let a = &tool["annotations"];
    assert_eq!(a["readOnlyHint"], false);
    assert_eq!(a["destructiveHint"], true);
    assert_eq!(a["openWorldHint"], true);
    assert!(
        tool["description"]
            .as_str()
            .unwrap()
            .contains("Sandbox (Landlock)"),
        "{tool}"
    );
}

#[test]
fn unsandboxed_mode_says_so_and_runs_commands() {
    let mut e = Exec::start_with("--allow-exec=unsandboxed", &[]);
    let listed = e.client.request("tools/list", json!({}));
    let description = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "execute")
        .map(|t| t["description"].as_str().unwrap().to_owned())
        .unwrap();
    assert!(description.contains("NOT sandboxed"), "{description}");
    let result = e.run(json!({"command": "echo hi"}));
    assert_eq!(result["structuredContent"]["stdout"], "hi\n");
}

#[test]
fn progress_notifications_arrive_with_a_token_and_none_without() {
    if !landlock() {
        return;
    }
    if !crate::clients::python_sdk_available() {
        crate::skips::record(
            "execute progress with the official MCP Python SDK",
            "the SDK is not installed (pip install -r tests/python/requirements.txt)",
        );
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let w = format!("/=disk:{}", root.path().display());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/sdk_progress.py");
    let output = std::process::Command::new("python3")
        .args([
            script,
            env!("CARGO_BIN_EXE_mountfs"),
            "--allow-exec",
            "--mount",
            &w,
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "python SDK progress check failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("progress ok"), "{stdout}");
}
