//! Shared helpers of the store tests and the benchmarks: unique names, the PostgreSQL test URL
//! (found by itself on 127.0.0.1:5432, else one visible skip line per group, see [`skips`]),
//! clean-up of test namespaces, and the one MCP test client ([`stdio::StdioClient`], which
//! drives a real server process over stdio: the `mountfs` binary, or any other MCP server for
//! `benches/peers`) with its async face [`McpServer`] (many requests in flight at once), and
//! the forwarding backend double ([`forward::Forward`]) that a test overrides method by method.
//! The backends every in-process suite runs on are in [`fixtures`] (one registry, one
//! `Fixture`, and `per_backend!`).
#![allow(dead_code)] // each test binary uses its own subset

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

pub mod backends;
pub mod fixtures;
pub mod forward;
pub mod moto;
pub mod python;
pub mod shells;
pub mod skips;
pub mod stdio;

/// The environment variable naming the test PostgreSQL server; `off` skips those tests.
pub const POSTGRES_ENV: &str = "MOUNTFS_TEST_POSTGRES";

/// The server tried when [`POSTGRES_ENV`] is unset (the one `.ci/run` and docs/development.md use).
pub const LOCAL_POSTGRES: &str = "postgres://postgres@127.0.0.1:5432/test";

/// The PostgreSQL URL to test against: [`POSTGRES_ENV`] when set, else [`LOCAL_POSTGRES`] when
/// a server answers there. Otherwise `None`, and `group` is recorded as skipped (one line at
/// the end of the test binary, see [`skips`]).
pub fn postgres_url(group: &str) -> Option<String> {
    match postgres_target() {
        Ok(url) => Some(url.clone()),
        Err(reason) => {
            skips::record(group, reason);
            None
        }
    }
}

/// Decided once per test binary: the URL, or why there is none.
fn postgres_target() -> &'static Result<String, String> {
    static TARGET: std::sync::OnceLock<Result<String, String>> = std::sync::OnceLock::new();
    TARGET.get_or_init(|| match std::env::var(POSTGRES_ENV) {
        Ok(value) if value.eq_ignore_ascii_case("off") => Err(format!(
            "{POSTGRES_ENV}=off; unset it to use a PostgreSQL on 127.0.0.1:5432, or set it to a URL"
        )),
        Ok(url) if !url.is_empty() => Ok(url),
        _ if local_postgres_answers() => Ok(LOCAL_POSTGRES.to_owned()),
        _ => Err(format!(
            "{POSTGRES_ENV} is unset and no PostgreSQL answers at {LOCAL_POSTGRES}; start one there or set {POSTGRES_ENV}=postgres://USER@HOST:PORT/DB"
        )),
    })
}

/// Whether [`LOCAL_POSTGRES`] accepts a connection and a query (on a thread of its own, since
/// callers may be inside a runtime).
pub fn local_postgres_answers() -> bool {
    std::thread::spawn(|| {
        let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return false;
        };
        runtime.block_on(async {
            let Ok(mut config) = LOCAL_POSTGRES.parse::<tokio_postgres::Config>() else {
                return false;
            };
            config.connect_timeout(Duration::from_secs(2));
            let attempt = async {
                let (client, connection) = config.connect(tokio_postgres::NoTls).await.ok()?;
                let task = tokio::spawn(connection);
                let answered = client.simple_query("SELECT 1").await.is_ok();
                drop(client);
                let _ = task.await;
                Some(answered)
            };
            tokio::time::timeout(Duration::from_secs(5), attempt)
                .await
                .ok()
                .flatten()
                .unwrap_or(false)
        })
    })
    .join()
    .unwrap_or(false)
}

/// A name no other test (nor an earlier run) uses: `prefix-<pid>-<time>-<n>`.
pub fn unique(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() % 1_000_000_000_000)
        .unwrap_or(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}-{}-{nanos}-{n}", std::process::id())
}

/// Deletes a PostgreSQL test namespace when dropped (on a thread of its own, since a test's
/// runtime cannot block in `drop`).
#[derive(Debug)]
pub struct PostgresNamespace {
    pub url: String,
    pub name: String,
}

impl PostgresNamespace {
    pub fn new(url: &str, prefix: &str) -> Self {
        Self {
            url: url.to_owned(),
            name: unique(prefix),
        }
    }
}

impl Drop for PostgresNamespace {
    fn drop(&mut self) {
        let (url, name) = (self.url.clone(), self.name.clone());
        let cleanup = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async {
                let Ok((client, connection)) =
                    tokio_postgres::connect(&url, tokio_postgres::NoTls).await
                else {
                    return;
                };
                let task = tokio::spawn(connection);
                let _ = client
                    .execute("DELETE FROM mountfs_items WHERE namespace = $1", &[&name])
                    .await;
                drop(client);
                let _ = task.await;
            });
        });
        let _ = cleanup.join();
    }
}

/// The `mountfs` binary under test, run in `cwd` with `args`, extra `env` and `RUST_LOG=warn`;
/// the client ([`stdio::StdioClient`], and through it [`McpServer`]) starts it from here.
pub fn mountfs_command(
    cwd: &std::path::Path,
    args: &[&str],
    env: &[(&str, &std::path::Path)],
) -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_mountfs"));
    command
        .args(args)
        .current_dir(cwd)
        .env("RUST_LOG", "warn")
        .envs(env.iter().copied());
    command
}

/// The `initialize` request's parameters the client sends, with the client's `capabilities`.
pub fn initialize_params(capabilities: Value) -> Value {
    json!({
        "protocolVersion": "2025-06-18",
        "capabilities": capabilities,
        "clientInfo": {"name": "mountfs-tests", "version": "1"}
    })
}

/// What a `tools/call` answered.
#[derive(Debug, Clone)]
pub struct ToolAnswer {
    pub is_error: bool,
    pub text: String,
    pub structured: Value,
}

/// How long [`McpServer::request`] waits for an answer unless told otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// One MCP server process and its stdio session, for load: a thin async face on the one
/// client, [`stdio::StdioClient`] (its process, handshake and read loop). Requests may be sent
/// concurrently; the read loop hands each response to its caller by id.
pub struct McpServer {
    client: stdio::StdioClient,
    timeout: Duration,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer")
            .field("pid", &self.client.pid())
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl McpServer {
    /// The server's notifications from now on (a second call takes them over).
    pub fn notifications(&self) -> tokio::sync::mpsc::UnboundedReceiver<Value> {
        let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
        self.client.route_notices(Some(sender));
        receiver
    }

    /// Starts the binary with these arguments and completes the MCP handshake.
    pub async fn start(args: &[String]) -> Self {
        Self::start_with_env(args, &[]).await
    }

    /// [`McpServer::start`] with extra environment variables.
    pub async fn start_with_env(args: &[String], env: &[(&str, &std::path::Path)]) -> Self {
        Self::start_in(None, args, env).await
    }

    /// [`McpServer::start_with_env`] in working directory `cwd` (where the default table's
    /// `/` = `disk:.` points), or this process's own when `None`.
    pub async fn start_in(
        cwd: Option<&std::path::Path>,
        args: &[String],
        env: &[(&str, &std::path::Path)],
    ) -> Self {
        let here = std::env::current_dir().expect("the test's working directory");
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let command = mountfs_command(cwd.unwrap_or(&here), &args, env);
        Self::spawn(command, DEFAULT_TIMEOUT).await
    }

    /// Starts any MCP server from `command` (its stdio is taken over) and completes the MCP
    /// handshake; each request then waits at most `timeout` for its answer.
    pub async fn spawn(command: std::process::Command, timeout: Duration) -> Self {
        let mut client = stdio::StdioClient::spawn_command(command);
        client.handshake();
        client.route_notices(None);
        Self { client, timeout }
    }

    /// The server's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        Some(self.client.pid())
    }

    /// Sends one request and waits for its response.
    pub async fn request(&self, method: &str, params: Value) -> Value {
        let response = self.client.send_awaited(method, params);
        match tokio::time::timeout(self.timeout, response).await {
            Ok(Ok(response)) => response,
            _ => panic!(
                "no response to {method}; server stderr:\n{}",
                self.client.stderr()
            ),
        }
    }

    /// Calls a tool.
    pub async fn call(&self, tool: &str, arguments: Value) -> ToolAnswer {
        self.try_call(tool, arguments)
            .await
            .unwrap_or_else(|response| panic!("tools/call {tool} got a protocol error: {response}"))
    }

    /// Calls a tool; a JSON-RPC error response is `Err(response)`.
    pub async fn try_call(&self, tool: &str, arguments: Value) -> Result<ToolAnswer, Value> {
        let response = self
            .request("tools/call", json!({"name": tool, "arguments": arguments}))
            .await;
        let Some(result) = response.get("result") else {
            return Err(response);
        };
        let text = result["content"]
            .as_array()
            .map(|parts| {
                parts
                    .iter()
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default();
        Ok(ToolAnswer {
            is_error: result
                .get("isError")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            text,
            structured: result
                .get("structuredContent")
                .cloned()
                .unwrap_or(Value::Null),
        })
    }

    /// Calls a tool that must succeed; returns its text.
    pub async fn ok(&self, tool: &str, arguments: Value) -> ToolAnswer {
        let answer = self.call(tool, arguments.clone()).await;
        assert!(
            !answer.is_error,
            "{tool} {arguments} failed: {}",
            answer.text
        );
        answer
    }

    /// Closes stdin and waits for the process to exit.
    pub async fn stop(mut self) {
        self.client.close_stdin();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Some(status) = self.client.try_wait() {
                break status;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "server exits when stdin closes"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert!(status.success(), "server exited with {status}");
    }

    /// What the server wrote to stderr so far.
    pub fn stderr(&self) -> String {
        self.client.stderr()
    }
}
