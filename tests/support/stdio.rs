//! The one MCP test client: it starts a server process (the `mountfs` binary, or any other MCP
//! server for `benches/peers`), shakes hands, and reads its stdout on one thread of its own.
//! Two faces share that one process, handshake and read loop:
//! - [`StdioClient`], line by line for wire tests: every message arrives in order through
//!   [`StdioClient::recv`], raw lines and bytes can be sent;
//! - [`super::McpServer`], a thin async face on it for load: many requests in flight at once,
//!   each response handed to its caller by id, notifications on a channel.
//!
//! Every stdout line must be JSON-RPC: [`StdioClient::recv`] fails the test on anything else, so
//! any stray print to stdout is caught by every e2e test.

#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::oneshot;

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

/// Responses awaited by id (the async face), each handed to its waiter by the read loop.
type Waiters = Arc<Mutex<HashMap<u64, oneshot::Sender<Value>>>>;

/// Where the read loop sends the lines no waiter claimed.
enum Rest {
    /// Every such line, in order, for [`StdioClient::recv`].
    Lines(Sender<String>),
    /// Only notifications, to the async face's channel once it asked for them; the rest (the
    /// server's own requests) are dropped.
    Notices(Option<tokio::sync::mpsc::UnboundedSender<Value>>),
}

/// A running MCP server process and its stdio.
pub struct StdioClient {
    child: Child,
    stdin: Mutex<Option<ChildStdin>>,
    lines: Mutex<Receiver<String>>,
    waiters: Waiters,
    rest: Arc<Mutex<Rest>>,
    next_id: AtomicU64,
    /// Responses that arrived while the test waited for another id.
    early: HashMap<u64, Value>,
    /// Where the server's stderr goes (see [`StdioClient::stderr`]).
    stderr: tempfile::NamedTempFile,
    /// The server's working directory when the client chose it: a fresh temporary directory,
    /// so the default mount table (`/` = disk of the working directory) never writes into the
    /// repository.
    cwd: Option<tempfile::TempDir>,
}

impl StdioClient {
    /// Starts the binary with `args` (e.g. `["--mount", "/=memory"]`) and initialises it.
    pub fn start(args: &[&str]) -> Self {
        let mut client = Self::spawn(args);
        client.handshake();
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
        let command = super::mountfs_command(dir.unwrap_or(cwd.path()), args, env);
        let mut client = Self::spawn_command(command);
        client.cwd = Some(cwd);
        client
    }

    /// Starts any MCP server from `command`, taking over its stdio, without initialising: the
    /// one place a test server process is started and its stdout read.
    pub fn spawn_command(mut command: Command) -> Self {
        let stderr = tempfile::NamedTempFile::new().expect("file for the server's stderr");
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr.reopen().expect("reopen the stderr file"))
            .spawn()
            .unwrap_or_else(|e| panic!("start {:?}: {e}", command.get_program()));
        let stdout = child.stdout.take().expect("stdout");
        let (lines, receiver) = channel();
        let waiters: Waiters = Arc::default();
        let rest = Arc::new(Mutex::new(Rest::Lines(lines)));
        let (route_waiters, route_rest) = (waiters.clone(), rest.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if !route(&line, &route_waiters, &route_rest) {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        Self {
            child,
            stdin: Mutex::new(stdin),
            lines: Mutex::new(receiver),
            waiters,
            rest,
            next_id: AtomicU64::new(1),
            early: HashMap::new(),
            stderr,
            cwd: None,
        }
    }

    /// The MCP handshake both faces use: `initialize` (failing the test unless it succeeds),
    /// then `notifications/initialized`.
    pub fn handshake(&mut self) {
        let init = self.request("initialize", super::initialize_params(json!({})));
        assert!(init.get("result").is_some(), "initialize failed: {init}");
        self.notify("notifications/initialized", json!({}));
    }

    /// From now on the read loop hands responses only to waiters ([`Self::await_response`])
    /// and notifications only to `notices` (none: dropped): the async face.
    pub(super) fn route_notices(&self, notices: Option<tokio::sync::mpsc::UnboundedSender<Value>>) {
        *self.rest.lock().unwrap() = Rest::Notices(notices);
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
        self.cwd
            .as_ref()
            .expect("a client started in a directory of its own")
            .path()
    }

    /// Writes one raw line to the server's stdin.
    pub fn send_raw(&self, line: &str) {
        let mut text = String::with_capacity(line.len() + 1);
        text.push_str(line);
        text.push('\n');
        self.send_bytes(text.as_bytes());
    }

    /// Writes raw bytes (any bytes, not only UTF-8) to the server's stdin.
    pub fn send_bytes(&self, bytes: &[u8]) {
        let mut stdin = self.stdin.lock().unwrap();
        let stdin = stdin.as_mut().expect("stdin open");
        stdin.write_all(bytes).expect("write to the server");
        stdin.flush().expect("flush");
    }

    /// The next message, or `None` when none comes within `wait` (for lines that must not be
    /// answered).
    pub fn recv_within(&mut self, wait: Duration) -> Option<Value> {
        match self.lines.get_mut().unwrap().recv_timeout(wait) {
            Ok(line) => Some(
                serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("stdout carried a non-JSON line ({e}): {line}")),
            ),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => panic!("mountfs closed stdout"),
        }
    }

    /// Sends a notification.
    pub fn notify(&self, method: &str, params: Value) {
        let message = json!({"jsonrpc": "2.0", "method": method, "params": params});
        self.send_raw(&message.to_string());
    }

    fn fresh_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Sends a request without waiting; returns its id.
    pub fn send(&self, method: &str, params: Value) -> u64 {
        let id = self.fresh_id();
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send_raw(&message.to_string());
        id
    }

    /// Sends a request whose response the read loop hands to the returned receiver (the async
    /// face; the response never reaches [`Self::recv`]).
    pub fn send_awaited(&self, method: &str, params: Value) -> oneshot::Receiver<Value> {
        let id = self.fresh_id();
        let (reply, response) = oneshot::channel();
        self.waiters.lock().unwrap().insert(id, reply);
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send_raw(&message.to_string());
        response
    }

    /// The next JSON-RPC message from stdout (every line must be one).
    pub fn recv(&mut self) -> Value {
        match self.lines.get_mut().unwrap().recv_timeout(ANSWER_TIMEOUT) {
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

    /// Closes stdin (the server's signal to finish).
    pub fn close_stdin(&self) {
        drop(self.stdin.lock().unwrap().take());
    }

    /// The exit status, if the process has exited.
    pub fn try_wait(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Closes stdin and waits for the process to exit.
    pub fn finish(mut self) -> std::process::ExitStatus {
        self.close()
    }

    /// Closes stdin and waits for the process to exit (killed after 5 s).
    pub fn close(&mut self) -> std::process::ExitStatus {
        self.close_stdin();
        for _ in 0..100 {
            if let Some(status) = self.try_wait() {
                return status;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        self.child.wait().expect("wait")
    }
}

/// The read loop's step for one stdout line: a response someone awaits goes to its waiter,
/// anything else where [`Rest`] says. False once nobody listens any more.
fn route(line: &str, waiters: &Waiters, rest: &Mutex<Rest>) -> bool {
    let message: Option<Value> = serde_json::from_str(line).ok();
    let awaited = message.as_ref().and_then(|message| {
        if message.get("method").is_some() {
            return None;
        }
        let id = message.get("id").and_then(Value::as_u64)?;
        waiters.lock().unwrap().remove(&id)
    });
    if let (Some(reply), Some(message)) = (awaited, message.clone()) {
        let _ = reply.send(message);
        return true;
    }
    match &*rest.lock().unwrap() {
        Rest::Lines(lines) => lines.send(line.to_owned()).is_ok(),
        Rest::Notices(notices) => {
            let message = message.unwrap_or_else(|| panic!("stdout line is not JSON-RPC: {line}"));
            if message.get("method").is_some()
                && message.get("id").is_none()
                && let Some(notices) = notices
            {
                let _ = notices.send(message);
            }
            true
        }
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
