//! A small Streamable HTTP MCP client for the tests and the load bench: starts the `mountfs`
//! binary with `--http 127.0.0.1:0`, and speaks MCP 2025-11-25 (sessions) or 2026-07-28
//! (stateless) over one keep-alive HTTP/1.1 connection per client.
#![allow(dead_code)] // the tests and the bench each use a subset

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// One `mountfs --http` process.
#[derive(Debug)]
pub struct Server {
    pub child: Child,
    /// `http://127.0.0.1:PORT/mcp`.
    pub url: String,
    stderr: Arc<Mutex<String>>,
}

impl Server {
    /// Starts the binary with `--http 127.0.0.1:0` and `args`; waits until it listens.
    pub async fn start(args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::start_at("127.0.0.1:0", args, env).await
    }

    /// [`Server::start`] on `addr`.
    pub async fn start_at(addr: &str, args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::start_in(None, addr, args, env).await
    }

    /// [`Server::start_at`] with `cwd` as the working directory (the default table's `/`).
    pub async fn start_in(
        cwd: Option<&std::path::Path>,
        addr: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        Self::start_limited(cwd, addr, args, env, None).await
    }

    /// [`Server::start_in`], the process starting with a soft open-files limit of
    /// `open_files` when given (the hard limit stays), as a service manager's default of 1024.
    pub async fn start_limited(
        cwd: Option<&std::path::Path>,
        addr: &str,
        args: &[&str],
        env: &[(&str, &str)],
        open_files: Option<u64>,
    ) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_mountfs"));
        if let Some(cwd) = cwd {
            command.current_dir(cwd);
        }
        if let Some(soft) = open_files {
            // SAFETY: only setrlimit(2), async-signal-safe, runs between fork and exec.
            unsafe {
                command.pre_exec(move || {
                    let mut limit = libc::rlimit {
                        rlim_cur: 0,
                        rlim_max: 0,
                    };
                    if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    limit.rlim_cur = soft.min(limit.rlim_max);
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        command
            .arg("--http")
            .arg(addr)
            .args(args)
            .env_remove("MOUNTFS_TOKEN")
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().expect("spawn mountfs");
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let (found, listening) = tokio::sync::oneshot::channel();
        let sink = stderr.clone();
        tokio::spawn(async move {
            let mut found = Some(found);
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(url) = line.strip_prefix("mountfs: serving MCP on ")
                    && let Some(found) = found.take()
                {
                    let _ = found.send(url.to_owned());
                }
                let mut text = sink.lock().unwrap();
                text.push_str(&line);
                text.push('\n');
            }
        });
        let url = tokio::time::timeout(Duration::from_secs(30), listening)
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_else(|| panic!("mountfs did not start: {}", stderr.lock().unwrap()));
        Self { child, url, stderr }
    }

    /// Everything the server wrote on stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base(&self) -> &str {
        self.url.trim_end_matches("/mcp")
    }
}

/// An HTTP answer.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: String,
}

impl Reply {
    /// The JSON-RPC message of the answer: the body itself, or the last `data:` event of an
    /// SSE stream that holds a response.
    pub fn message(&self) -> Value {
        if let Ok(value) = serde_json::from_str(&self.body) {
            return value;
        }
        self.body
            .lines()
            .rev()
            .filter_map(|line| line.strip_prefix("data:"))
            .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
            .find(|m| m.get("result").is_some() || m.get("error").is_some())
            .unwrap_or_else(|| panic!("no JSON-RPC answer in: {} {}", self.status, self.body))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// What a `tools/call` answered.
#[derive(Debug, Clone)]
pub struct ToolAnswer {
    pub is_error: bool,
    pub text: String,
    /// `structuredContent`, or null.
    pub structured: Value,
}

/// Which MCP revision a client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// 2025-11-25: `initialize`, then requests carrying `Mcp-Session-Id`.
    Session,
    /// 2026-07-28: no session; each request carries its protocol metadata.
    Stateless,
}

/// One client on one keep-alive connection.
pub struct Client {
    url: String,
    authority: String,
    token: Option<String>,
    pub session: Option<String>,
    protocol: Protocol,
    sender: Option<SendRequest<Full<Bytes>>>,
    /// The next JSON-RPC id; clients sharing one session must not reuse each other's ids.
    pub next_id: u64,
    /// Extra headers sent with every request (e.g. `Origin`).
    pub extra_headers: Vec<(String, String)>,
    /// How many TCP connections this client has opened (one unless the server closed one).
    pub connects: usize,
}

impl Client {
    /// A client of `url` with `token` (none: no `Authorization` header).
    pub fn new(url: &str, token: Option<&str>, protocol: Protocol) -> Self {
        let authority = url
            .trim_start_matches("http://")
            .split('/')
            .next()
            .unwrap()
            .to_owned();
        Self {
            url: url.to_owned(),
            authority,
            token: token.map(str::to_owned),
            session: None,
            protocol,
            sender: None,
            next_id: 1,
            extra_headers: Vec::new(),
            connects: 0,
        }
    }

    async fn sender(&mut self) -> &mut SendRequest<Full<Bytes>> {
        let closed = self.sender.as_ref().is_none_or(|s| s.is_closed());
        if closed {
            let stream = tokio::net::TcpStream::connect(&self.authority)
                .await
                .expect("connect");
            stream.set_nodelay(true).ok();
            let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .expect("handshake");
            tokio::spawn(connection);
            self.sender = Some(sender);
            self.connects += 1;
        }
        self.sender.as_mut().unwrap()
    }

    /// Sends `method` to `/mcp` with `body`, the client's headers and `headers`.
    pub async fn send(&mut self, method: &str, body: &str, headers: &[(&str, &str)]) -> Reply {
        self.send_bytes(method, body.as_bytes().to_vec(), headers)
            .await
    }

    /// [`Client::send`] with a body of any bytes.
    pub async fn send_bytes(
        &mut self,
        method: &str,
        body: Vec<u8>,
        headers: &[(&str, &str)],
    ) -> Reply {
        let mut request = http::Request::builder()
            .method(method)
            .uri(self.url.clone())
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json");
        if let Some(token) = &self.token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        if let Some(session) = &self.session {
            request = request.header("mcp-session-id", session.clone());
        }
        if !self
            .extra_headers
            .iter()
            .any(|(name, _)| name.eq_ignore_ascii_case("host"))
        {
            request = request.header("host", self.authority.clone());
        }
        for (name, value) in &self.extra_headers {
            request = request.header(name.as_str(), value.as_str());
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request.body(Full::new(Bytes::from(body))).unwrap();
        let sender = self.sender().await;
        sender.ready().await.expect("connection ready");
        let response = sender.send_request(request).await.expect("send request");
        let (parts, body) = response.into_parts();
        let body = body.collect().await.expect("read body").to_bytes();
        Reply {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        }
    }

    /// POSTs one JSON-RPC message.
    pub async fn post(&mut self, message: &Value, headers: &[(&str, &str)]) -> Reply {
        self.send("POST", &message.to_string(), headers).await
    }

    /// `initialize` + `notifications/initialized` (session protocol only); returns the reply.
    pub async fn initialize(&mut self) -> Reply {
        self.session = None;
        let reply = self
            .post(
                &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "mountfs-http-test", "version": "0"}
                }}),
                &[],
            )
            .await;
        if reply.status == 200 {
            self.session = reply.header("mcp-session-id").map(str::to_owned);
            let done = self
                .post(
                    &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
                    &[("mcp-protocol-version", "2025-11-25")],
                )
                .await;
            assert_eq!(done.status, 202, "initialized: {}", done.body);
        }
        reply
    }

    /// One JSON-RPC request; the whole HTTP reply.
    pub async fn request_reply(&mut self, method: &str, mut params: Value) -> Reply {
        let id = self.next_id;
        self.next_id += 1;
        let mut headers: Vec<(&str, String)> = Vec::new();
        match self.protocol {
            Protocol::Session => headers.push(("mcp-protocol-version", "2025-11-25".into())),
            Protocol::Stateless => {
                headers.push(("mcp-protocol-version", "2026-07-28".into()));
                headers.push(("mcp-method", method.into()));
                if let Some(name) = params.get("name").and_then(Value::as_str) {
                    headers.push(("mcp-name", name.into()));
                }
                params.as_object_mut().unwrap().insert(
                    "_meta".into(),
                    json!({
                        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                        "io.modelcontextprotocol/clientCapabilities": {},
                        "io.modelcontextprotocol/clientInfo": {"name": "mountfs-http-test", "version": "0"}
                    }),
                );
            }
        }
        let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        self.post(
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
            &headers,
        )
        .await
    }

    /// One JSON-RPC request; its response message.
    pub async fn request(&mut self, method: &str, params: Value) -> Value {
        let reply = self.request_reply(method, params).await;
        assert_eq!(reply.status, 200, "{method}: {}", reply.body);
        reply.message()
    }

    /// `tools/call`.
    pub async fn call(&mut self, tool: &str, arguments: Value) -> ToolAnswer {
        let message = self
            .request("tools/call", json!({"name": tool, "arguments": arguments}))
            .await;
        let result = message
            .get("result")
            .unwrap_or_else(|| panic!("{tool}: {message}"));
        ToolAnswer {
            is_error: result["isError"].as_bool().unwrap_or(false),
            text: result["content"][0]["text"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            structured: result
                .get("structuredContent")
                .cloned()
                .unwrap_or(Value::Null),
        }
    }
}
