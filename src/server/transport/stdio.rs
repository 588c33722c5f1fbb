//! The stdio transport: newline-delimited JSON-RPC on stdin and stdout, answering every line.
//!
//! The MCP library's own stdio codec stops the whole server on one invalid UTF-8 byte and drops
//! lines that are not messages without a word; this transport reads bytes, not text:
//! - a line is read up to `\n` (a `\r` before it is dropped) and never grows past
//!   `max_message_bytes`: a longer line is skipped to its end with bounded memory and answered
//!   -32600;
//! - each line is classified by [`message::classify`]: what is not a message is answered there
//!   and then with its JSON-RPC error, and the next line is read;
//! - before the session has begun (no `initialize` yet, nor a first stateless request), the
//!   library ends the connection on any notification or response, so those are dropped here
//!   (a notification is never answered anyway);
//! - every `tools/call` on a `file_path` takes its place in the file's arrival order as it is
//!   read ([`crate::state::arrival::take_turn`]).
//!
//! Writes go through one writer task fed by a bounded queue: the library's answers and ours
//! come out whole, one per line, and a client that stops reading holds the server back instead
//! of growing a buffer. The library answers each request from a task of its own, so a bounded
//! queue alone does not stop it reading: at most [`MAX_OUTSTANDING_REQUESTS`] requests are
//! read and not yet answered (or cancelled); the next waits, unread, until one is.
//!
//! [`stdio`] gives the server its stdin and stdout as readiness-driven (epoll) pipes when they
//! are pipes, as every MCP client makes them: tokio's own `stdin()`/`stdout()` do each read and
//! write on a blocking-pool thread, and those two thread hand-offs per call were most of a small
//! call's CPU (issue 6: futex waits and wake-ups, profiled with `perf`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use rmcp::RoleServer;
use rmcp::model::{
    ClientJsonRpcMessage, ClientNotification, ClientRequest, JsonRpcMessage, RequestId,
};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::task::JoinHandle;

use super::message::{self, INVALID_REQUEST, Incoming};
use crate::state::arrival::ArrivalOrder;

/// Default for `--max-message-bytes`: the largest line (one message) read from stdin.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// Lines waiting for the writer. Small: a client that stops reading stdout stalls the server
/// after this many answers rather than letting them pile up.
const WRITE_QUEUE_LINES: usize = 64;

/// Requests read whose answers are not yet queued for stdout (nor cancelled by the client).
/// Beyond this, stdin is not read: a client flooding requests while never reading stdout
/// held every answer in memory (20,000 `tools/list` took 660 MB).
pub const MAX_OUTSTANDING_REQUESTS: usize = 128;

/// How long closing waits for the writer to put out the last answers.
const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// Bytes read from stdin at a time.
const READ_BUFFER_BYTES: usize = 64 * 1024;

/// The server's stdin and stdout, each a non-blocking pipe driven by the reactor when it is a
/// pipe (FIFO), else tokio's blocking-pool `Stdin`/`Stdout` (a terminal, a file).
///
/// Making a pipe non-blocking sets `O_NONBLOCK` on its open file description, which a process
/// sharing that same end of the pipe would see too; an MCP client creates the pipes for its
/// server alone.
pub fn stdio() -> (
    Box<dyn AsyncRead + Send + Unpin>,
    Box<dyn AsyncWrite + Send + Unpin>,
) {
    #[cfg(unix)]
    {
        use std::os::fd::AsFd;
        use tokio::net::unix::pipe;
        // `from_file` checks that the descriptor is a pipe open the right way before it makes
        // it non-blocking, so a failure leaves it as it was for the blocking fallback.
        let reader: Box<dyn AsyncRead + Send + Unpin> = match std::io::stdin()
            .as_fd()
            .try_clone_to_owned()
            .and_then(|fd| pipe::Receiver::from_file(fd.into()))
        {
            Ok(pipe) => Box::new(pipe),
            Err(_) => Box::new(tokio::io::stdin()),
        };
        let writer: Box<dyn AsyncWrite + Send + Unpin> = match std::io::stdout()
            .as_fd()
            .try_clone_to_owned()
            .and_then(|fd| pipe::Sender::from_file(fd.into()))
        {
            Ok(pipe) => Box::new(pipe),
            Err(_) => Box::new(tokio::io::stdout()),
        };
        (reader, writer)
    }
    #[cfg(not(unix))]
    (Box::new(tokio::io::stdin()), Box::new(tokio::io::stdout()))
}

/// Where the session is in the MCP lifecycle, as far as the library's start-up loop cares.
#[derive(Debug)]
enum Lifecycle {
    /// No session yet. `candidate` is the last request delivered that may begin one (a
    /// stateless request): if the library has not refused it by the next read, it did.
    NotStarted { candidate: Option<RequestId> },
    /// The library serves every message.
    Started,
}

/// Newline-delimited JSON-RPC over a byte stream pair (see the module doc).
#[derive(Debug)]
pub struct StdioTransport<R> {
    input: BufReader<R>,
    /// The line being read; never longer than `max_message_bytes`.
    line: Vec<u8>,
    /// Skipping the rest of a line that was too long (kept here, not in a local, because the
    /// library may drop a `receive` half-way and call it again).
    skipping: bool,
    max_message_bytes: usize,
    /// An answer of ours waiting for room in the write queue.
    pending_answer: Option<Vec<u8>>,
    output: Option<mpsc::Sender<Vec<u8>>>,
    writer: Option<JoinHandle<()>>,
    arrival: Arc<ArrivalOrder>,
    lifecycle: Lifecycle,
    /// Places for requests read and not yet answered ([`MAX_OUTSTANDING_REQUESTS`]).
    outstanding: Arc<Semaphore>,
    /// The place each unanswered request holds, released when its answer is queued or the
    /// client cancels it (the library then sends no answer).
    answering: HashMap<RequestId, OwnedSemaphorePermit>,
    /// A request read while every place was taken, delivered once one is free (kept here
    /// because the library may drop a `receive` half-way).
    waiting: Option<ClientJsonRpcMessage>,
}

/// One bounded read of a line.
enum LineRead {
    /// A whole line (or the last bytes before end of input) is in `line`.
    Line,
    /// A line over the limit was skipped to its end.
    TooLong,
    /// End of input.
    End,
    /// Reading failed.
    Failed(std::io::Error),
}

impl<R: AsyncRead + Send + Unpin> StdioTransport<R> {
    /// A transport reading `input` and writing `output`; file calls take their places in
    /// `arrival`; a line over `max_message_bytes` is skipped and answered -32600.
    pub fn new<W>(input: R, output: W, arrival: Arc<ArrivalOrder>, max_message_bytes: usize) -> Self
    where
        W: AsyncWrite + Send + Unpin + 'static,
    {
        let (sender, receiver) = mpsc::channel(WRITE_QUEUE_LINES);
        Self {
            input: BufReader::with_capacity(READ_BUFFER_BYTES, input),
            line: Vec::new(),
            skipping: false,
            max_message_bytes: max_message_bytes.max(1),
            pending_answer: None,
            output: Some(sender),
            writer: Some(tokio::spawn(write_lines(output, receiver))),
            arrival,
            lifecycle: Lifecycle::NotStarted { candidate: None },
            outstanding: Arc::new(Semaphore::new(MAX_OUTSTANDING_REQUESTS)),
            answering: HashMap::new(),
            waiting: None,
        }
    }

    /// Reads one line into `self.line`, never letting it pass the limit. Cancel-safe: bytes
    /// are moved from the reader's buffer into `self.line` with no await in between, so a
    /// dropped call leaves a partial line for the next call to finish.
    async fn read_line(&mut self) -> LineRead {
        loop {
            let (used, outcome) = {
                let available = match self.input.fill_buf().await {
                    Ok(available) => available,
                    Err(error) => return LineRead::Failed(error),
                };
                if available.is_empty() {
                    return if self.line.is_empty() || self.skipping {
                        self.skipping = false;
                        LineRead::End
                    } else {
                        LineRead::Line
                    };
                }
                let newline = memchr::memchr(b'\n', available);
                let used = newline.map_or(available.len(), |at| at + 1);
                let outcome = if self.skipping {
                    if newline.is_some() {
                        self.skipping = false;
                        Some(LineRead::TooLong)
                    } else {
                        None
                    }
                } else if self.line.len() + used > self.max_message_bytes + 1 {
                    // (+1: the limit is on the message; its `\n` does not count.)
                    self.line = Vec::new();
                    if newline.is_some() {
                        Some(LineRead::TooLong)
                    } else {
                        self.skipping = true;
                        None
                    }
                } else {
                    self.line.extend_from_slice(&available[..used]);
                    newline.map(|_| LineRead::Line)
                };
                (used, outcome)
            };
            self.input.consume(used);
            if let Some(outcome) = outcome {
                return outcome;
            }
        }
    }

    /// Queues an answer of ours; returns false when the output is gone.
    async fn flush_pending_answer(&mut self) -> bool {
        let Some(output) = &self.output else {
            return false;
        };
        if self.pending_answer.is_some() {
            // `reserve` is cancel-safe, and the answer stays in `self` until it has a place.
            let Ok(permit) = output.reserve().await else {
                return false;
            };
            if let Some(answer) = self.pending_answer.take() {
                permit.send(answer);
            }
        }
        true
    }

    /// What to do with a message the library may or may not be ready for (see [`Lifecycle`]).
    fn admit(&mut self, message: &ClientJsonRpcMessage) -> bool {
        let Lifecycle::NotStarted { candidate } = &mut self.lifecycle else {
            return true;
        };
        if candidate.is_some() {
            // The library answered nothing for it before reading on: it began the session.
            self.lifecycle = Lifecycle::Started;
            return true;
        }
        match message {
            JsonRpcMessage::Request(request) => match &request.request {
                ClientRequest::InitializeRequest(_) => self.lifecycle = Lifecycle::Started,
                ClientRequest::PingRequest(_) | ClientRequest::DiscoverRequest(_) => {}
                _ => *candidate = Some(request.id.clone()),
            },
            JsonRpcMessage::Notification(_)
            | JsonRpcMessage::Response(_)
            | JsonRpcMessage::Error(_) => {
                tracing::debug!("dropped a notification or response sent before initialize");
                return false;
            }
        }
        true
    }
}

fn answer_bytes(answer: &Value) -> Vec<u8> {
    let mut bytes = answer.to_string().into_bytes();
    bytes.push(b'\n');
    bytes
}

/// Writes queued lines to `output` in order, flushing whenever the queue runs dry.
async fn write_lines<W: AsyncWrite + Unpin>(mut output: W, mut lines: mpsc::Receiver<Vec<u8>>) {
    while let Some(line) = lines.recv().await {
        if let Err(error) = output.write_all(&line).await {
            tracing::warn!(%error, "stdout could not be written; the client is gone");
            return;
        }
        if lines.is_empty()
            && let Err(error) = output.flush().await
        {
            tracing::warn!(%error, "stdout could not be flushed; the client is gone");
            return;
        }
    }
    let _ = output.flush().await;
}

impl<R: AsyncRead + Send + Unpin> Transport<RoleServer> for StdioTransport<R> {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        if let (Lifecycle::NotStarted { candidate }, JsonRpcMessage::Error(error)) =
            (&mut self.lifecycle, &item)
            && error.id.is_some()
            && *candidate == error.id
        {
            // The library refused the would-be first request; it is still waiting for one.
            *candidate = None;
        }
        let answered = match &item {
            JsonRpcMessage::Response(response) => Some(&response.id),
            JsonRpcMessage::Error(error) => error.id.as_ref(),
            _ => None,
        };
        let place = answered.and_then(|id| self.answering.remove(id));
        let output = self.output.clone();
        let line = serde_json::to_vec(&item).map(|mut line| {
            line.push(b'\n');
            line
        });
        async move {
            let mut line = line.map_err(std::io::Error::other)?;
            if let JsonRpcMessage::Error(error) = &item
                && error.id.is_none()
            {
                // JSON-RPC 2.0 §5: an error that cannot name its request says `"id": null`.
                if let Ok(mut value) = serde_json::from_slice::<Value>(&line) {
                    value["id"] = Value::Null;
                    line = answer_bytes(&value);
                }
            }
            let Some(output) = output else {
                return Err(closed());
            };
            let sent = output.send(line).await.map_err(|_| closed());
            // The answer is in the bounded queue: its request no longer counts.
            drop(place);
            sent
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            if !self.flush_pending_answer().await {
                return None;
            }
            if let Some(message) = self.waiting.take() {
                // Cancel-safe: the request goes back before the wait, out again after it.
                self.waiting = Some(message);
                let place = self.outstanding.clone().acquire_owned().await.ok()?;
                let message = self.waiting.take()?;
                if let JsonRpcMessage::Request(request) = &message {
                    self.answering.insert(request.id.clone(), place);
                }
                return Some(message);
            }
            match self.read_line().await {
                LineRead::Line => {}
                LineRead::TooLong => {
                    tracing::warn!(
                        limit = self.max_message_bytes,
                        "skipped a message over --max-message-bytes"
                    );
                    self.pending_answer = Some(answer_bytes(&json!({
                        "jsonrpc": "2.0",
                        "id": null,
                        "error": {
                            "code": INVALID_REQUEST,
                            "message": format!(
                                "Invalid Request: the message is longer than {} bytes (--max-message-bytes) and was skipped; send a smaller message",
                                self.max_message_bytes
                            ),
                        },
                    })));
                    continue;
                }
                LineRead::End => return None,
                LineRead::Failed(error) => {
                    tracing::warn!(%error, "stdin could not be read");
                    return None;
                }
            }
            let line = std::mem::take(&mut self.line);
            let body = line.strip_suffix(b"\n").unwrap_or(&line);
            let body = body.strip_suffix(b"\r").unwrap_or(body);
            let incoming = message::classify(body);
            // Keep the buffer's capacity for the next line unless it was a big one.
            if line.capacity() <= READ_BUFFER_BYTES {
                self.line = line;
                self.line.clear();
            }
            match incoming {
                Incoming::Message(mut message) => {
                    if !self.admit(&message) {
                        continue;
                    }
                    crate::state::arrival::take_turn(&mut message, &self.arrival);
                    match &*message {
                        JsonRpcMessage::Request(_) => {
                            // Delivered above once it has a place.
                            self.waiting = Some(*message);
                            continue;
                        }
                        JsonRpcMessage::Notification(notification) => {
                            if let ClientNotification::CancelledNotification(cancelled) =
                                &notification.notification
                                && let Some(id) = &cancelled.params.request_id
                            {
                                self.answering.remove(id);
                            }
                        }
                        _ => {}
                    }
                    return Some(*message);
                }
                Incoming::Answer(answer) => {
                    tracing::debug!(%answer, "answered a malformed line");
                    self.pending_answer = Some(answer_bytes(&answer));
                }
                Incoming::Dropped(reason) => {
                    tracing::debug!(reason, "dropped a line");
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        drop(self.output.take());
        if let Some(writer) = self.writer.take() {
            let _ = tokio::time::timeout(CLOSE_WAIT, writer).await;
        }
        Ok(())
    }
}

fn closed() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::BrokenPipe, "stdout is closed")
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, DuplexStream};

    /// A transport reading what the test writes to the returned input end; its output end is
    /// returned too.
    fn transport(limit: usize) -> (StdioTransport<DuplexStream>, DuplexStream, DuplexStream) {
        let (input, feed) = tokio::io::duplex(1 << 16);
        let (output, answers) = tokio::io::duplex(1 << 16);
        let transport =
            StdioTransport::new(input, output, Arc::new(ArrivalOrder::default()), limit);
        (transport, feed, answers)
    }

    fn method(message: &ClientJsonRpcMessage) -> String {
        serde_json::to_value(message).unwrap()["method"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;

    #[tokio::test]
    async fn an_over_long_line_is_skipped_without_growing_the_buffer() {
        let (mut transport, mut feed, mut answers) = transport(1024);
        let writer = tokio::spawn(async move {
            feed.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"x\":\"")
                .await
                .unwrap();
            feed.write_all(&vec![b'a'; 4 << 20]).await.unwrap();
            feed.write_all(b"\"}\r\n{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}\r\n")
                .await
                .unwrap();
            feed
        });
        let message = transport.receive().await.unwrap();
        assert_eq!(method(&message), "ping");
        assert!(
            transport.line.capacity() <= 2048,
            "{}",
            transport.line.capacity()
        );
        let _feed = writer.await.unwrap();
        let mut answer = vec![0; 4096];
        let n = answers.read(&mut answer).await.unwrap();
        let answer: Value = serde_json::from_slice(&answer[..n]).unwrap();
        assert_eq!(answer["error"]["code"], INVALID_REQUEST);
        assert_eq!(answer["id"], Value::Null);
    }

    #[tokio::test]
    async fn a_last_line_without_newline_is_still_read() {
        let (mut transport, mut feed, _answers) = transport(1024);
        feed.write_all(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
            .await
            .unwrap();
        drop(feed);
        assert_eq!(method(&transport.receive().await.unwrap()), "ping");
        assert!(transport.receive().await.is_none());
    }

    #[tokio::test]
    async fn notifications_wait_for_the_session_to_begin() {
        let (mut transport, mut feed, _answers) = transport(1024);
        let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
        feed.write_all(format!("{initialized}\n{INITIALIZE}\n{initialized}\n").as_bytes())
            .await
            .unwrap();
        assert_eq!(method(&transport.receive().await.unwrap()), "initialize");
        assert_eq!(
            method(&transport.receive().await.unwrap()),
            "notifications/initialized"
        );
    }

    #[tokio::test]
    async fn a_refused_first_request_leaves_the_session_unbegun() {
        let (mut transport, mut feed, _answers) = transport(1024);
        let list = r#"{"jsonrpc":"2.0","id":5,"method":"tools/list"}"#;
        let note = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
        feed.write_all(format!("{list}\n{note}\n{list}\n{note}\n").as_bytes())
            .await
            .unwrap();
        assert_eq!(method(&transport.receive().await.unwrap()), "tools/list");
        // The library refuses it (no initialize, no stateless metadata) …
        let refusal = TxJsonRpcMessage::<RoleServer>::error(
            rmcp::model::ErrorData::invalid_params("request _meta is missing", None),
            Some(RequestId::Number(5)),
        );
        transport.send(refusal).await.unwrap();
        // … so the notification after it is dropped, the next request delivered; that one is
        // not refused, so the session has begun and the last notification is delivered.
        assert_eq!(method(&transport.receive().await.unwrap()), "tools/list");
        assert_eq!(
            method(&transport.receive().await.unwrap()),
            "notifications/initialized"
        );
    }

    #[tokio::test]
    async fn a_client_not_reading_answers_stops_being_read() {
        let (mut transport, mut feed, _answers) = transport(1024);
        let mut lines = format!("{INITIALIZE}\n");
        for id in 1..=MAX_OUTSTANDING_REQUESTS + 2 {
            lines.push_str(&format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"tools/list\"}}\n"
            ));
            if id == 2 {
                // Cancelled: the library will never answer it, so it frees its place.
                lines.push_str(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}"#);
                lines.push('\n');
            }
        }
        let writer = tokio::spawn(async move {
            feed.write_all(lines.as_bytes()).await.unwrap();
            feed
        });
        let mut read = 0;
        while let Ok(message) =
            tokio::time::timeout(Duration::from_millis(200), transport.receive()).await
        {
            message.unwrap();
            read += 1;
        }
        // initialize, requests 1..=128 and the cancellation; 129 waits, unread.
        assert_eq!(read, MAX_OUTSTANDING_REQUESTS + 2);
        // An answer queued frees a place: the waiting request is read, and no more.
        let answer = TxJsonRpcMessage::<RoleServer>::response(
            rmcp::model::ServerResult::empty(()),
            RequestId::Number(1),
        );
        transport.send(answer).await.unwrap();
        let next = tokio::time::timeout(Duration::from_secs(5), transport.receive()).await;
        assert_eq!(method(&next.unwrap().unwrap()), "tools/list");
        let blocked = tokio::time::timeout(Duration::from_millis(200), transport.receive()).await;
        assert!(blocked.is_err(), "read on with every request unanswered");
        let _feed = writer.await.unwrap();
    }
}
