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
    match mountfs::storage::exec::sandbox::probe() {
        Ok(()) => true,
        Err(error) => {
            crate::skips::record("the execute sandbox (Landlock)", &error.to_string());
            false
        }
    }
}

/// Host pids of the live `sleep SECONDS` processes (zombies excluded). A command's own pids
/// are those of its PID namespace, meaningless outside: a test names its sleeper by a
/// duration no other test uses and finds it from outside.
fn sleepers(seconds: u32) -> Vec<u32> {
    let wanted = format!("sleep\0{seconds}\0");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == wanted.as_bytes())
                && std::fs::read_to_string(format!("/proc/{pid}/status"))
                    .is_ok_and(|s| !s.contains("State:\tZ"))
        })
        .collect()
}

/// Whether every `sleep SECONDS` is gone within `within`.
fn sleepers_gone(seconds: u32, within: Duration) -> bool {
    let until = Instant::now() + within;
    while Instant::now() < until {
        if sleepers(seconds).is_empty() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    sleepers(seconds).is_empty()
}

/// How many `sleep <seconds>` processes run, once one does (within 5 s): a shell writes `$!`
/// as soon as it forked the child, which may not have become `sleep` yet on a loaded machine.
fn sleepers_started(seconds: u32) -> usize {
    let until = Instant::now() + Duration::from_secs(5);
    while sleepers(seconds).is_empty() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    sleepers(seconds).len()
}

/// Waits until the command wrote `file` in the mount (it started).
fn wait_for_file(file: &std::path::Path) {
    let until = Instant::now() + Duration::from_secs(10);
    while std::fs::read_to_string(file).map_or(true, |p| p.trim().is_empty()) {
        assert!(Instant::now() < until, "the command did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
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
        "command": "sh -c 'sleep 3011' & echo started; sleep 300",
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
    assert!(
        sleepers_gone(3011, Duration::from_secs(3)),
        "the sleeper outlived the call"
    );
}

#[test]
fn background_processes_do_not_outlive_the_call() {
    if !landlock() {
        return;
    }
    let mut e = Exec::start(&[]);
    let result = e.run(json!({"command": "sleep 3012 > /dev/null 2>&1 &"}));
    let text = text_of(&result);
    assert!(text.starts_with("exit code 0"), "{text}");
    assert!(
        text.contains("left running in the background were stopped"),
        "{text}"
    );
    assert!(sleepers_gone(3012, Duration::from_secs(3)));
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
            "command": "sleep 3013 & echo $! > sleeper.pid; wait",
            "timeout": 600
        }}),
    );
    wait_for_file(&e.w().join("sleeper.pid"));
    assert_eq!(sleepers_started(3013), 1);
    e.client.notify(
        "notifications/cancelled",
        json!({"requestId": id, "reason": "test"}),
    );
    assert!(
        sleepers_gone(3013, Duration::from_secs(5)),
        "the sleeper outlived the cancellation"
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
            "command": "sleep 3014 & echo $! > sleeper.pid; wait", "timeout": 600
        }}),
    );
    wait_for_file(&e.w().join("sleeper.pid"));
    assert_eq!(sleepers_started(3014), 1);
    let Exec {
        client,
        root: _root,
    } = e;
    client.finish();
    assert!(
        sleepers_gone(3014, Duration::from_secs(5)),
        "the sleeper outlived the session"
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
            "Error: execute: cwd /scratch is not in a disk or shell mount; only those can run commands"
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
    // The command's /tmp is a private tmpfs, where the mount's real path is recreated: `..`
    // and the test's own temporary directories are there, not on the host; the read-only
    // mount refuses writes.
    let stderr = s["stderr"].as_str().unwrap();
    assert!(stderr.contains("Read-only file system"), "{stderr}");
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
            .contains("Sandbox (Landlock in its own user, mount, PID and IPC namespaces)"),
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
    let Some(mut python) =
        crate::support::python::sdk("execute progress with the official MCP Python SDK")
    else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let w = format!("/=disk:{}", root.path().display());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/sdk_progress.py");
    let output = python
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

/// A fresh directory outside `/tmp` (commands get a private `/tmp`, so a host file there is
/// out of sight anyway): what these tests show must hold where the command can see. In
/// `/var/tmp`, since a checkout, and its `target/tmp`, may itself lie under `/tmp` (CI clones
/// there); in `target/tmp` where there is no `/var/tmp`.
pub(crate) fn outside_tmp() -> tempfile::TempDir {
    let var_tmp = std::path::Path::new("/var/tmp");
    let base = if var_tmp.is_dir() {
        var_tmp
    } else {
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
    };
    tempfile::tempdir_in(base).unwrap()
}

/// Whether `file` has no `user.x` attribute (python3's os.getxattr; without python3 the
/// command's attempt could not run either).
fn xattr_absent(file: &std::path::Path) -> bool {
    let script = format!(
        "import os\ntry:\n    os.getxattr('{}', 'user.x'); print('present')\nexcept OSError:\n    print('absent')",
        file.display()
    );
    std::process::Command::new("python3")
        .args(["-c", &script])
        .output()
        .map_or(true, |o| {
            String::from_utf8_lossy(&o.stdout).trim() == "absent"
        })
}

#[test]
fn metadata_changes_and_device_files_are_refused_outside_the_writable_mounts() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if !landlock() {
        return;
    }
    let outside = outside_tmp();
    let file = outside.path().join("t.txt");
    std::fs::write(&file, "x").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let before = std::fs::metadata(&file).unwrap();
    let mut e = Exec::start(&[]);
    let f = file.display();
    let command = format!(
        "chmod 777 {f} || echo chmod-refused; \
         chown 1234 {f} || echo chown-refused; \
         touch -d 2001-01-01 {f} || echo touch-refused; \
         python3 -c \"import os; os.setxattr('{f}', 'user.x', b'1')\" 2>/dev/null || echo setxattr-refused; \
         mknod blk b 7 0 || echo mknod-block-refused; \
         mknod chr c 1 3 || echo mknod-char-refused; \
         chmod 600 mine 2>/dev/null; touch mine && chmod 640 mine && echo inside-ok"
    );
    let result = e.run(json!({ "command": command }));
    let stdout = result["structuredContent"]["stdout"].as_str().unwrap();
    assert_eq!(
        stdout,
        "chmod-refused\nchown-refused\ntouch-refused\nsetxattr-refused\nmknod-block-refused\nmknod-char-refused\ninside-ok\n",
        "{result}"
    );
    let after = std::fs::metadata(&file).unwrap();
    assert_eq!(after.permissions().mode() & 0o777, 0o600);
    assert_eq!(after.uid(), before.uid());
    assert_eq!(after.mtime(), before.mtime());
    assert!(xattr_absent(&file));
    assert!(!e.w().join("blk").exists() && !e.w().join("chr").exists());
    assert_eq!(
        std::fs::metadata(e.w().join("mine"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o640
    );
}

#[test]
fn the_servers_environment_and_data_directory_are_hidden_from_commands() {
    if !landlock() {
        return;
    }
    let outside = outside_tmp();
    let data = outside.path().join("data");
    std::fs::create_dir_all(data.join("mountfs")).unwrap();
    std::fs::write(data.join("mountfs/secret.txt"), "data-secret").unwrap();
    std::fs::write(outside.path().join("visible.txt"), "visible").unwrap();
    let work = tempfile::tempdir().unwrap();
    let w = format!("/=disk:{}", work.path().display());
    let memories = format!(
        "/memories/=store:sqlite:{}",
        data.join("mountfs/memories.db").display()
    );
    let audit = format!("sqlite:{}", data.join("mountfs/audit.db").display());
    let token = "token-secret-0123456789abcdef";
    let token_path = PathBuf::from(token);
    let mut c = StdioClient::spawn_with_env(
        &[
            "--allow-exec",
            "--mount",
            &w,
            "--mount",
            &memories,
            "--audit",
            &audit,
        ],
        &[
            ("XDG_DATA_HOME", data.as_path()),
            ("MOUNTFS_TOKEN", token_path.as_path()),
        ],
    );
    c.handshake();
    c.ok(
        "write_file",
        json!({"file_path": "/memories/m.txt", "content": "memory-secret\n"}),
    );
    assert!(data.join("mountfs/memories.db").exists());
    let command = format!(
        "cat /proc/$PPID/environ; cat /proc/1/environ; cat /proc/*/environ; \
         echo; echo procs=$(ls /proc | grep -c '^[0-9]'); \
         cat {d}/mountfs/secret.txt; cat {d}/mountfs/memories.db {d}/mountfs/audit.db; \
         grep -r secret {d}; cat {o}/visible.txt",
        d = data.display(),
        o = outside.path().display(),
    );
    let result = c.call("execute", json!({ "command": command }));
    let s = &result["structuredContent"];
    let all = format!("{}{}", s["stdout"], s["stderr"]);
    for secret in [token, "data-secret", "memory-secret"] {
        assert!(!all.contains(secret), "{secret} leaked: {all}");
    }
    // The host is readable elsewhere (this server has one principal): hiding, not blindness.
    assert!(all.contains("visible"), "{all}");
    // Only the command's own processes are in its /proc: init, the shell, ls and grep.
    let stdout = s["stdout"].as_str().unwrap();
    let count: u32 = stdout
        .lines()
        .find_map(|line| line.strip_prefix("procs=")?.parse().ok())
        .unwrap_or(u32::MAX);
    assert!(count <= 5, "{count} processes visible: {stdout}");
}

#[test]
fn setsid_job_control_and_double_forks_end_with_the_call() {
    if !landlock() {
        return;
    }
    let mut e = Exec::start(&[]);
    let result = e.run(json!({"command": "setsid sleep 3021 >/dev/null 2>&1 & \
        (set -m; sleep 3022 >/dev/null 2>&1 &); \
        sh -c '(sleep 3023 >/dev/null 2>&1 &) &'; \
        sleep 0.3; echo started"}));
    assert_eq!(
        result["structuredContent"]["stdout"], "started\n",
        "{result}"
    );
    for seconds in [3021, 3022, 3023] {
        assert!(
            sleepers_gone(seconds, Duration::from_secs(3)),
            "sleep {seconds} outlived the call"
        );
    }
}

#[test]
fn killing_the_server_ends_its_commands() {
    if !landlock() {
        return;
    }
    let e = Exec::start(&[]);
    e.client.send(
        "tools/call",
        json!({"name": "execute", "arguments": {
            "command": "setsid sleep 3024 >/dev/null 2>&1 & echo go > started; sleep 3025",
            "timeout": 600
        }}),
    );
    wait_for_file(&e.w().join("started"));
    let until = Instant::now() + Duration::from_secs(5);
    while sleepers(3024).is_empty() || sleepers(3025).is_empty() {
        assert!(Instant::now() < until, "the sleepers did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: SIGKILL to the server this test started.
    unsafe {
        libc::kill(e.client.pid() as i32, libc::SIGKILL);
    }
    for seconds in [3024, 3025] {
        assert!(
            sleepers_gone(seconds, Duration::from_secs(5)),
            "sleep {seconds} outlived the killed server"
        );
    }
}

/// A server with a shell mount `/t/` over `sh` on this machine (issue 27), beside the disk
/// mount at `/`; the directory it serves.
fn with_shell_mount() -> (Exec, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mount = format!("/t/=shell:local:{}", dir.path().display());
    let flag = if landlock() {
        "--allow-exec"
    } else {
        "--allow-exec=unsandboxed"
    };
    let e = Exec::start_with(flag, &["--shell", "local=sh", "--mount", &mount]);
    (e, dir)
}

#[test]
fn in_a_shell_mount_ending_the_session_stops_a_running_command_on_the_target() {
    let (e, dir) = with_shell_mount();
    e.client.send(
        "tools/call",
        json!({"name": "execute", "arguments": {
            "command": "sleep 3016 & echo $! > sleeper.pid; wait", "timeout": 600, "cwd": "/t"
        }}),
    );
    wait_for_file(&dir.path().join("sleeper.pid"));
    assert_eq!(sleepers_started(3016), 1);
    let Exec {
        client,
        root: _root,
    } = e;
    client.finish();
    assert!(
        sleepers_gone(3016, Duration::from_secs(10)),
        "the sleeper on the target outlived the session"
    );
}

#[test]
fn in_a_shell_mount_progress_notifications_arrive_with_a_token() {
    let Some(mut python) = crate::support::python::sdk(
        "execute progress in a shell mount with the official MCP Python SDK",
    ) else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let w = format!("/=disk:{}", root.path().display());
    let t = format!("/t/=shell:local:{}", dir.path().display());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/sdk_progress.py");
    let output = python
        .env("PROGRESS_CWD", "/t")
        .args([
            script,
            env!("CARGO_BIN_EXE_mountfs"),
            "--allow-exec=unsandboxed",
            "--mount",
            &w,
            "--shell",
            "local=sh",
            "--mount",
            &t,
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

/// The `NAME=VALUE` lines of `env`'s output.
fn env_names(stdout: &str) -> Vec<&str> {
    stdout
        .lines()
        .filter_map(|line| line.split_once('=').map(|(name, _)| name))
        .collect()
}

#[test]
fn commands_get_a_minimal_environment_without_the_servers_credentials() {
    let root = tempfile::tempdir().unwrap();
    let target = tempfile::tempdir().unwrap();
    let w = format!("/=disk:{}", root.path().display());
    let t = format!("/t/=shell:local:{}", target.path().display());
    let flag = if landlock() {
        "--allow-exec"
    } else {
        "--allow-exec=unsandboxed"
    };
    let secrets = [
        ("PGPASSWORD", "pg-secret-4711"),
        ("AWS_SECRET_ACCESS_KEY", "aws-secret-4712"),
        ("DATABASE_URL", "postgres://u:db-secret-4713@h/db"),
        ("FOO", "foo-value-4714"),
        ("NOT_NAMED", "not-named-4715"),
    ];
    let env: Vec<(&str, PathBuf)> = secrets
        .iter()
        .map(|(name, value)| (*name, PathBuf::from(value)))
        .collect();
    let env: Vec<(&str, &std::path::Path)> = env.iter().map(|(n, v)| (*n, v.as_path())).collect();
    for exec_env in [
        &[][..],
        &["--exec-env", "FOO", "--exec-env", "BAR=set-4716"][..],
    ] {
        let mut args = vec![flag, "--mount", &w, "--shell", "local=sh", "--mount", &t];
        args.extend_from_slice(exec_env);
        let mut c = StdioClient::spawn_with_env(&args, &env);
        c.handshake();
        for cwd in ["/", "/t"] {
            let result = c.call("execute", json!({"command": "env", "cwd": cwd}));
            let stdout = result["structuredContent"]["stdout"].as_str().unwrap();
            for (_, value) in &secrets[..3] {
                assert!(!stdout.contains(value), "{value} leaked in {cwd}: {stdout}");
            }
            assert!(!stdout.contains("not-named-4715"), "{cwd}: {stdout}");
            let names = env_names(stdout);
            for name in ["PGPASSWORD", "AWS_SECRET_ACCESS_KEY", "DATABASE_URL"] {
                assert!(!names.contains(&name), "{name} in {cwd}: {stdout}");
            }
            for name in ["PATH", "HOME"] {
                assert!(names.contains(&name), "{name} missing in {cwd}: {stdout}");
            }
            if exec_env.is_empty() {
                assert!(!names.contains(&"FOO"), "{cwd}: {stdout}");
            } else {
                assert!(stdout.contains("FOO=foo-value-4714\n"), "{cwd}: {stdout}");
                assert!(stdout.contains("BAR=set-4716\n"), "{cwd}: {stdout}");
            }
        }
    }
}

#[test]
fn in_a_shell_mount_errors_name_the_cwd_with_its_mount_prefix() {
    let (mut e, dir) = with_shell_mount();
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), dir.path().join("ld")).unwrap();
    std::fs::write(dir.path().join("file"), "x").unwrap();
    let result = e.run(json!({"command": "true", "cwd": "/t/ld"}));
    assert_eq!(result["isError"], true, "{result}");
    let text = text_of(&result);
    assert!(text.contains("/t/ld"), "{text}");
    assert!(!text.contains(" /ld"), "{text}");
    let result = e.run(json!({"command": "true", "cwd": "/t/file"}));
    let text = text_of(&result);
    assert!(text.starts_with("Error: execute: cwd /t/file "), "{text}");
    let result = e.run(json!({"command": "true", "cwd": "/t/none"}));
    let text = text_of(&result);
    assert!(
        text.starts_with("Error: execute: cwd /t/none does not exist"),
        "{text}"
    );
}
