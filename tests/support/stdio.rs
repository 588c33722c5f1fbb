//! Shared test helpers: a JSON-RPC client that drives the real `mountfs` binary over stdio, and
//! text assertions that print both sides in full.
//!
//! The client starts the binary, sends one JSON object per line and reads stdout line by line.
//! Every stdout line must be JSON-RPC: [`StdioClient::recv`] fails the test on anything else, so
//! any stray print to stdout is caught by every e2e test.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::Duration;

use serde_json::{Value, json};

/// How long a test waits for one answer before failing.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// Asserts two texts are equal, printing both in full (after ripgrep's `eqnice!`).
#[macro_export]
macro_rules! assert_text_eq {
    ($expected:expr, $got:expr) => {{
        let expected: &str = &$expected;
        let got: &str = &$got;
        if expected != got {
            panic!(
                "\n---- expected ----\n{}\n---- got ----\n{}\n------------------\n",
                expected, got
            );
        }
    }};
}

/// A running `mountfs` process and its stdio.
pub struct StdioClient {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    next_id: u64,
    /// Responses that arrived while the test waited for another id.
    early: std::collections::HashMap<u64, Value>,
    /// Where the server's stderr goes (see [`StdioClient::stderr`]).
    stderr: tempfile::NamedTempFile,
    /// The server's working directory: a fresh temporary directory, so the default mount
    /// table (`/` = disk of the working directory) never writes into the repository.
    cwd: tempfile::TempDir,
}

impl StdioClient {
    /// Starts the binary with `args` (e.g. `["--mount", "/=memory"]`) and initialises it.
    pub fn start(args: &[&str]) -> Self {
        let mut client = Self::spawn(args);
        let init = client.request("initialize", super::initialize_params(json!({})));
        assert!(init.get("result").is_some(), "initialize failed: {init}");
        client.notify("notifications/initialized", json!({}));
        client
    }

    /// Starts the binary without initialising. With no arguments it serves one `memory` mount
    /// at `/`: the default table would open `/memories/` in the user's data directory, which
    /// tests must never touch (the default table has its own test, with a temporary one).
    pub fn spawn(args: &[&str]) -> Self {
        let args: &[&str] = if args.is_empty() {
            &["--mount", "/=memory"]
        } else {
            args
        };
        Self::spawn_with_env(args, &[])
    }

    /// Starts the binary with exactly `args` (none: the default table) and extra environment
    /// variables (`XDG_DATA_HOME` and `HOME`, so the default table stays in temporary
    /// directories), without initialising.
    pub fn spawn_with_env(args: &[&str], env: &[(&str, &std::path::Path)]) -> Self {
        Self::spawn_in(None, args, env)
    }

    /// [`Self::spawn_with_env`] in `dir` (e.g. `/`) instead of a fresh temporary directory.
    pub fn spawn_in(
        dir: Option<&std::path::Path>,
        args: &[&str],
        env: &[(&str, &std::path::Path)],
    ) -> Self {
        let cwd = tempfile::tempdir().expect("working directory for mountfs");
        let stderr = tempfile::NamedTempFile::new().expect("file for mountfs's stderr");
        let mut child = super::mountfs_command(dir.unwrap_or(cwd.path()), args, env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr.reopen().expect("reopen the stderr file"))
            .spawn()
            .expect("start mountfs");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        Self {
            child,
            stdin,
            lines: rx,
            next_id: 1,
            early: std::collections::HashMap::new(),
            stderr,
            cwd,
        }
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The server's peak resident memory (`VmHWM`) in bytes, on Linux.
    pub fn peak_memory(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).ok()?;
        let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    }

    /// The server's working directory (the default `/` mount).
    pub fn cwd(&self) -> &std::path::Path {
        self.cwd.path()
    }

    /// Writes one raw line to the server's stdin.
    pub fn send_raw(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{line}").expect("write to mountfs");
        stdin.flush().expect("flush");
    }

    /// Writes raw bytes (any bytes, not only UTF-8) to the server's stdin.
    pub fn send_bytes(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(bytes).expect("write to mountfs");
        stdin.flush().expect("flush");
    }

    /// The next message, or `None` when none comes within `wait` (for lines that must not be
    /// answered).
    pub fn recv_within(&mut self, wait: Duration) -> Option<Value> {
        match self.lines.recv_timeout(wait) {
            Ok(line) => Some(
                serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("stdout carried a non-JSON line ({e}): {line}")),
            ),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => panic!("mountfs closed stdout"),
        }
    }

    /// Sends a notification.
    pub fn notify(&mut self, method: &str, params: Value) {
        let message = json!({"jsonrpc": "2.0", "method": method, "params": params});
        self.send_raw(&message.to_string());
    }

    /// Sends a request without waiting; returns its id.
    pub fn send(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send_raw(&message.to_string());
        id
    }

    /// The next JSON-RPC message from stdout (every line must be one).
    pub fn recv(&mut self) -> Value {
        match self.lines.recv_timeout(ANSWER_TIMEOUT) {
            Ok(line) => {
                let value: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("stdout carried a non-JSON line ({e}): {line}"));
                assert_eq!(value["jsonrpc"], "2.0", "not JSON-RPC: {line}");
                value
            }
            Err(RecvTimeoutError::Timeout) => {
                panic!("no answer from mountfs within {ANSWER_TIMEOUT:?}")
            }
            Err(RecvTimeoutError::Disconnected) => panic!("mountfs closed stdout"),
        }
    }

    /// Waits for the response with `id`, skipping notifications and keeping responses to
    /// other requests for later (responses to concurrent requests come in any order).
    pub fn response(&mut self, id: u64) -> Value {
        if let Some(message) = self.early.remove(&id) {
            return message;
        }
        loop {
            let message = self.recv();
            match message.get("id").and_then(Value::as_u64) {
                Some(got) if got == id => return message,
                Some(other) => {
                    self.early.insert(other, message);
                }
                None => {}
            }
        }
    }

    /// The response to `id` if it already arrived while waiting for another one.
    pub fn take_early(&mut self, id: u64) -> Option<Value> {
        self.early.remove(&id)
    }

    /// Sends a request and waits for its response.
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(method, params);
        self.response(id)
    }

    /// Calls a tool; returns the `result` object (panics on a JSON-RPC error).
    pub fn call(&mut self, tool: &str, arguments: Value) -> Value {
        let response = self.request("tools/call", json!({"name": tool, "arguments": arguments}));
        response
            .get("result")
            .cloned()
            .unwrap_or_else(|| panic!("tools/call {tool} failed: {response}"))
    }

    /// Calls a tool that must succeed; returns its first text.
    pub fn ok(&mut self, tool: &str, arguments: Value) -> String {
        let result = self.call(tool, arguments.clone());
        assert_eq!(
            result["isError"],
            false,
            "{tool}({arguments}) failed: {}",
            text_of(&result)
        );
        text_of(&result)
    }

    /// Calls a tool that must fail; returns its error text.
    pub fn err(&mut self, tool: &str, arguments: Value) -> String {
        let result = self.call(tool, arguments.clone());
        assert_eq!(
            result["isError"],
            true,
            "{tool}({arguments}) should have failed but said: {}",
            text_of(&result)
        );
        text_of(&result)
    }

    /// What the server wrote to stderr so far (all of it once [`Self::close`] returned).
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.stderr.path()).unwrap_or_default()
    }

    /// Closes stdin and waits for the process to exit.
    pub fn finish(mut self) -> std::process::ExitStatus {
        self.close()
    }

    /// Closes stdin and waits for the process to exit (killed after 5 s).
    pub fn close(&mut self) -> std::process::ExitStatus {
        drop(self.stdin.take());
        for _ in 0..100 {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        self.child.wait().expect("wait")
    }
}

impl Drop for StdioClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The first text content of a tool result.
pub fn text_of(result: &Value) -> String {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}
