//! The connections of a shell mount: the long-lived `sh` processes started by the mount's
//! command, the framing of one call over one of them, and the small pool that lets a few calls
//! run at once (issue 27).
//!
//! A call writes its [`Frame`] to the shell's stdin and reads stdout up to the end marker
//! `\n<NONCE>=STATUS\n`, then stderr up to `\n<NONCE>\n` (stderr is drained by a task of its
//! own, so a command that writes much there never blocks the shell). The nonce is 128 random
//! bits per connection, never written anywhere on the target: a file's content cannot end an
//! answer early unless it holds that number.
//!
//! A connection that breaks (the process ended, a pipe closed, a marker malformed) is dropped,
//! which kills its process; the call in flight fails with [`CallError`] saying so, and the next
//! call opens a fresh connection. A call cancelled half-way (its future dropped) drops its
//! connection too: it is never given back in an unknown state.

use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};

use memchr::memmem;
use thiserror::Error;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::{Notify, Semaphore};

use super::script::{BOOTSTRAP, Frame, status};

/// Most connections one mount keeps open (and so calls it runs at once).
pub(super) const MAX_CONNECTIONS: usize = 4;

/// Most stderr bytes kept for one call (the rest is dropped: an error message needs no more).
const STDERR_KEPT: usize = 16 * 1024;

/// Why a call could not be made.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub(crate) enum CallError {
    /// The command could not be started, or its shell did not answer the opening script.
    #[error("cannot start the shell ({command}): {reason}")]
    Start {
        /// The command as given.
        command: String,
        /// What failed.
        reason: String,
    },
    /// The connection broke during the call.
    #[error(
        "the connection to the shell broke during the call ({reason}); the call may or may not have taken effect on the target: check, then retry (the next call reconnects)"
    )]
    Broken {
        /// What failed.
        reason: String,
    },
}

/// What the target answered to one call.
#[derive(Debug)]
pub(super) struct Reply {
    /// The function's exit status.
    pub(super) status: i32,
    /// Its standard output.
    pub(super) stdout: Vec<u8>,
    /// Its standard error (cut at [`STDERR_KEPT`] bytes).
    pub(super) stderr: Vec<u8>,
    /// What separates the parts of the answer (`\n<NONCE>:\n`).
    separator: Vec<u8>,
}

impl Reply {
    /// The parts of stdout, split at the connection's separator, at most `most` of them (the
    /// last holds the rest: file contents are last and never split).
    pub(super) fn parts(&self, most: usize) -> Vec<&[u8]> {
        let mut parts = Vec::new();
        let mut rest = self.stdout.as_slice();
        let finder = memmem::Finder::new(&self.separator);
        while parts.len() + 1 < most
            && let Some(at) = finder.find(rest)
        {
            parts.push(&rest[..at]);
            rest = &rest[at + self.separator.len()..];
        }
        parts.push(rest);
        parts
    }
}

/// What the opening script found on the target.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Caps {
    /// `sha256sum` is there (needed for versions: a connection without it is refused).
    pub(super) sha256sum: bool,
    /// `stat -c` is there (listings have times and modes).
    pub(super) stat: bool,
    /// `rg` is there (searches use it).
    pub(super) rg: bool,
    /// `readlink -f` is there (symlinks as last components are followed).
    pub(super) readlink: bool,
    /// The target's `grep -E` (no `rg`) tells bytes outside printable ASCII from the rest in
    /// the C locale: a regex search can be narrowed by it (`line_regex`).
    pub(super) grep_regex: bool,
}

impl Caps {
    fn parse(line: &str) -> Option<Self> {
        let mut caps = Self::default();
        let rest = line.trim().strip_prefix("caps ")?;
        for word in rest.split(' ') {
            let (key, value) = word.split_once('=')?;
            let on = value == "1";
            match key {
                "hs" => caps.sha256sum = on,
                "st" => caps.stat = on,
                "rg" => caps.rg = on,
                "rl" => caps.readlink = on,
                "gx" => caps.grep_regex = on,
                _ => {}
            }
        }
        Some(caps)
    }
}

/// Stderr of one process as its drain task collects it.
#[derive(Debug, Default)]
struct StderrBuffer {
    bytes: Mutex<(Vec<u8>, bool)>,
    more: Notify,
}

/// One live `sh`.
#[derive(Debug)]
pub(super) struct Connection {
    child: Child,
    stdin: ChildStdin,
    stdout: ChildStdout,
    /// Bytes read from stdout past the last answer (none, in a healthy connection).
    pending: Vec<u8>,
    stderr: Arc<StderrBuffer>,
    end: Vec<u8>,
    stderr_end: Vec<u8>,
    separator: Vec<u8>,
    /// The connection's nonce, which begins every frame (`Frame::into_bytes`).
    nonce: String,
    drain: tokio::task::JoinHandle<()>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.drain.abort();
        // A function still running when the connection is dropped (a cancelled call) outlives
        // the shell: it reads the end of its input, and a payload cut short is never renamed
        // into place (`script` checks every payload's length). A command `execute` started has
        // a watcher that stops its process group when that input ends (killing the shell's
        // whole group here would kill the watcher first and leave the command running).
        // kill_on_drop ends the process; start_kill now saves the wait.
        let _ = self.child.start_kill();
    }
}

fn broken(reason: impl Into<String>) -> CallError {
    CallError::Broken {
        reason: reason.into(),
    }
}

impl Connection {
    /// Starts `command`, sends the opening script and reads what it found.
    async fn open(command: &[String]) -> Result<(Self, Caps), CallError> {
        let shown = command.join(" ");
        let start = |reason: String| CallError::Start {
            command: shown.clone(),
            reason,
        };
        let (program, args) = command
            .split_first()
            .ok_or_else(|| start("the command is empty".to_owned()))?;
        let mut child = Command::new(program)
            .args(args)
            // Not the server's environment (its credentials): on a target started here, every
            // `execute` command would read it (issue 41). A local shell gets what `execute`'s
            // commands get; an ssh/docker/kubectl client what it needs to connect too.
            .env_clear()
            .envs(crate::storage::exec::env::for_target(program))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| start(e.to_string()))?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(start("its standard streams were not piped".to_owned()));
        };
        let nonce = format!("MFS{}", hex::encode(rand::random::<[u8; 16]>()));
        let buffer = Arc::new(StderrBuffer::default());
        let drain = tokio::spawn(drain_stderr(stderr, buffer.clone()));
        let mut connection = Self {
            child,
            stdin,
            stdout,
            pending: Vec::new(),
            stderr: buffer,
            end: format!("\n{nonce}=").into_bytes(),
            stderr_end: format!("\n{nonce}\n").into_bytes(),
            separator: format!("\n{nonce}:\n").into_bytes(),
            nonce: nonce.clone(),
            drain,
        };
        let script = BOOTSTRAP.replace("@NONCE@", &nonce);
        let reply = match connection.exchange(script.as_bytes()).await {
            Ok(reply) => reply,
            Err(error) => {
                let said = connection.stderr_now();
                return Err(start(format!(
                    "{}{}",
                    match error {
                        CallError::Broken { reason } | CallError::Start { reason, .. } => reason,
                    },
                    if said.is_empty() {
                        String::new()
                    } else {
                        format!("; it said: {said}")
                    }
                )));
            }
        };
        let text = String::from_utf8_lossy(&reply.stdout);
        let caps = text
            .lines()
            .find_map(Caps::parse)
            .ok_or_else(|| start(format!("the opening script answered '{}'", text.trim())))?;
        if !caps.sha256sum {
            return Err(start(
                "the target has no sha256sum, which versions of files need; install coreutils or a busybox with sha256sum".to_owned(),
            ));
        }
        Ok((connection, caps))
    }

    /// What the process wrote on stderr so far (for start-up errors).
    fn stderr_now(&self) -> String {
        let guard = self
            .stderr
            .bytes
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        String::from_utf8_lossy(&guard.0)
            .trim()
            .chars()
            .take(500)
            .collect()
    }

    /// Writes `input` and reads one answer.
    async fn exchange(&mut self, input: &[u8]) -> Result<Reply, CallError> {
        self.stdin
            .write_all(input)
            .await
            .map_err(|e| broken(format!("writing to the shell: {e}")))?;
        self.stdin
            .flush()
            .await
            .map_err(|e| broken(format!("writing to the shell: {e}")))?;
        let (stdout, status) = self.read_answer().await?;
        let stderr = self.read_stderr().await?;
        Ok(Reply {
            status,
            stdout,
            stderr,
            separator: self.separator.clone(),
        })
    }

    /// Reads stdout up to the end marker; returns what came before it and the status.
    async fn read_answer(&mut self) -> Result<(Vec<u8>, i32), CallError> {
        let finder = memmem::Finder::new(&self.end);
        let mut buffer = std::mem::take(&mut self.pending);
        let mut searched = 0usize;
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            if let Some(found) = finder.find(&buffer[searched..]) {
                let at = searched + found;
                let after = at + self.end.len();
                if let Some(newline) = memchr::memchr(b'\n', &buffer[after..]) {
                    let digits = std::str::from_utf8(&buffer[after..after + newline])
                        .ok()
                        .and_then(|d| d.parse::<i32>().ok())
                        .ok_or_else(|| broken("a malformed end of answer"))?;
                    self.pending = buffer.split_off(after + newline + 1);
                    buffer.truncate(at);
                    return Ok((buffer, digits));
                }
            } else {
                searched = buffer.len().saturating_sub(self.end.len());
            }
            let read = self
                .stdout
                .read(&mut chunk)
                .await
                .map_err(|e| broken(format!("reading from the shell: {e}")))?;
            if read == 0 {
                return Err(broken("the shell's output ended (the process exited)"));
            }
            buffer.extend_from_slice(&chunk[..read]);
        }
    }

    /// Takes this call's stderr, up to its marker.
    async fn read_stderr(&mut self) -> Result<Vec<u8>, CallError> {
        loop {
            let notified = self.stderr.more.notified();
            {
                let mut guard = self
                    .stderr
                    .bytes
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                if let Some(at) = memmem::find(&guard.0, &self.stderr_end) {
                    let rest = guard.0.split_off(at + self.stderr_end.len());
                    let mut mine = std::mem::replace(&mut guard.0, rest);
                    mine.truncate(at.min(STDERR_KEPT));
                    return Ok(mine);
                }
                if guard.1 {
                    return Err(broken(
                        "the shell's error output ended (the process exited)",
                    ));
                }
            }
            notified.await;
        }
    }
}

/// One piece of a streamed answer (`execute`'s command, see `run.rs`).
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Piece {
    /// Bytes the command wrote on stdout.
    Out(Vec<u8>),
    /// Bytes it wrote on stderr.
    Err(Vec<u8>),
    /// The function ended with this status (stderr's last bytes: [`Connection::finish_stderr`]).
    End(i32),
}

impl Connection {
    /// Writes `input` and reads stdout up to the first separator (the function is under way:
    /// `None`) or the end of the answer (it ended before: its whole reply).
    pub(super) async fn start_stream(&mut self, frame: Frame) -> Result<Option<Reply>, CallError> {
        let input = frame.into_bytes(&self.nonce);
        self.stdin
            .write_all(&input)
            .await
            .and(self.stdin.flush().await)
            .map_err(|e| broken(format!("writing to the shell: {e}")))?;
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            let separator = memmem::find(&self.pending, &self.separator);
            let end = memmem::find(&self.pending, &self.end);
            match (separator, end) {
                (Some(at), end) if end.is_none_or(|end| at < end) => {
                    self.pending.drain(..at + self.separator.len());
                    return Ok(None);
                }
                (_, Some(_)) => {
                    let (stdout, status) = self.read_answer().await?;
                    let stderr = self.read_stderr().await?;
                    return Ok(Some(Reply {
                        status,
                        stdout,
                        stderr,
                        separator: self.separator.clone(),
                    }));
                }
                _ => {}
            }
            let read = self
                .stdout
                .read(&mut chunk)
                .await
                .map_err(|e| broken(format!("reading from the shell: {e}")))?;
            if read == 0 {
                return Err(broken("the shell's output ended (the process exited)"));
            }
            self.pending.extend_from_slice(&chunk[..read]);
        }
    }

    /// The next piece of a streamed answer: output as it comes (a marker's possible beginning
    /// held back), then its end. Cancel-safe: what was read stays in the connection.
    pub(super) async fn next_piece(&mut self) -> Result<Piece, CallError> {
        let buffer = self.stderr.clone();
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            if let Some(at) = memmem::find(&self.pending, &self.end) {
                if at > 0 {
                    return Ok(Piece::Out(self.pending.drain(..at).collect()));
                }
                let after = self.end.len();
                if let Some(newline) = memchr::memchr(b'\n', &self.pending[after..]) {
                    let status = std::str::from_utf8(&self.pending[after..after + newline])
                        .ok()
                        .and_then(|d| d.parse::<i32>().ok())
                        .ok_or_else(|| broken("a malformed end of answer"))?;
                    self.pending.drain(..after + newline + 1);
                    return Ok(Piece::End(status));
                }
            } else {
                let safe = self.pending.len() - held_back(&self.pending, &self.end);
                if safe > 0 {
                    return Ok(Piece::Out(self.pending.drain(..safe).collect()));
                }
            }
            let notified = buffer.more.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let closed = {
                let mut guard = buffer.bytes.lock().unwrap_or_else(PoisonError::into_inner);
                let limit = memmem::find(&guard.0, &self.stderr_end)
                    .unwrap_or_else(|| guard.0.len() - held_back(&guard.0, &self.stderr_end));
                if limit > 0 {
                    return Ok(Piece::Err(guard.0.drain(..limit).collect()));
                }
                guard.1
            };
            tokio::select! {
                read = self.stdout.read(&mut chunk) => {
                    let read = read.map_err(|e| broken(format!("reading from the shell: {e}")))?;
                    if read == 0 {
                        return Err(broken("the shell's output ended (the process exited)"));
                    }
                    self.pending.extend_from_slice(&chunk[..read]);
                }
                () = notified, if !closed => {}
            }
        }
    }

    /// The stderr bytes left after a streamed answer's [`Piece::End`].
    pub(super) async fn finish_stderr(&mut self) -> Result<Vec<u8>, CallError> {
        self.read_stderr().await
    }

    /// Sends one line to a streamed function (`execute`'s stop request).
    pub(super) async fn send_line(&mut self, line: &[u8]) -> Result<(), CallError> {
        self.stdin
            .write_all(line)
            .await
            .and(self.stdin.flush().await)
            .map_err(|e| broken(format!("writing to the shell: {e}")))
    }
}

/// How many of the last bytes of `bytes` may be the beginning of `marker` (kept back from a
/// streamed answer until the next read tells).
fn held_back(bytes: &[u8], marker: &[u8]) -> usize {
    (1..marker.len().min(bytes.len() + 1))
        .rev()
        .find(|&k| bytes.ends_with(&marker[..k]))
        .unwrap_or(0)
}

/// Collects a process's stderr, keeping at most [`STDERR_KEPT`] bytes before a marker.
async fn drain_stderr(mut stderr: tokio::process::ChildStderr, buffer: Arc<StderrBuffer>) {
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        let read = stderr.read(&mut chunk).await.unwrap_or(0);
        {
            let mut guard = buffer.bytes.lock().unwrap_or_else(PoisonError::into_inner);
            if read == 0 {
                guard.1 = true;
            } else {
                guard.0.extend_from_slice(&chunk[..read]);
                // Keep a bounded amount; the marker is always in the last bytes read.
                if guard.0.len() > 4 * STDERR_KEPT {
                    let cut = guard.0.len() - 2 * STDERR_KEPT;
                    guard.0.drain(..cut);
                }
            }
        }
        buffer.more.notify_waiters();
        if read == 0 {
            return;
        }
    }
}

/// The connections of one mount: up to [`MAX_CONNECTIONS`], opened on demand, each used by one
/// call at a time.
#[derive(Debug)]
pub(super) struct Pool {
    command: Vec<String>,
    /// The `init` frame every new connection gets (it enters the mount's directory).
    init: Frame,
    idle: Mutex<Vec<Connection>>,
    slots: Semaphore,
    caps: Mutex<Option<(Caps, String)>>,
}

impl Pool {
    /// A pool for `command`, whose connections enter `dir` when opened.
    pub(super) fn new(command: Vec<String>, dir: &str) -> Self {
        Self {
            command,
            init: Frame::call("init").path(dir),
            idle: Mutex::new(Vec::new()),
            slots: Semaphore::new(MAX_CONNECTIONS),
            caps: Mutex::new(None),
        }
    }

    /// What the target has, and the physical path of the mount's directory there (known once
    /// a connection has opened).
    pub(super) fn caps(&self) -> Option<(Caps, String)> {
        self.caps
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    async fn connect(&self) -> Result<Connection, CallError> {
        let (mut connection, caps) = Connection::open(&self.command).await?;
        let init = self.init.clone().into_bytes(&connection.nonce);
        let reply = connection.exchange(&init).await?;
        if reply.status != 0 {
            return Err(CallError::Start {
                command: self.command.join(" "),
                reason: format!(
                    "the mount's directory: {}",
                    String::from_utf8_lossy(&reply.stderr).trim()
                ),
            });
        }
        let root = String::from_utf8_lossy(&reply.stdout).into_owned();
        *self.caps.lock().unwrap_or_else(PoisonError::into_inner) = Some((caps, root));
        Ok(connection)
    }

    /// Runs one call on an idle connection (a new one when none is idle).
    pub(super) async fn call(&self, frame: Frame) -> Result<Reply, CallError> {
        let _slot = self
            .slots
            .acquire()
            .await
            .map_err(|_| broken("the mount is closing"))?;
        let mut connection = match self.take_idle() {
            Some(connection) => connection,
            None => self.connect().await?,
        };
        // On error the connection is dropped here (its process killed): the next call opens
        // a new one. So is one whose function could not prove it read its whole payload
        // (`LOST`): its shell has left its loop.
        let input = frame.into_bytes(&connection.nonce);
        let reply = connection.exchange(&input).await?;
        if reply.status == status::LOST {
            return Ok(reply);
        }
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(connection);
        Ok(reply)
    }

    /// An idle connection whose process still runs; one whose process has ended (a killed
    /// ssh client, a stopped container) is dropped here, so the caller gets a fresh one
    /// instead of the error.
    fn take_idle(&self) -> Option<Connection> {
        loop {
            let mut connection = self
                .idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop()?;
            if matches!(connection.child.try_wait(), Ok(None)) {
                return Some(connection);
            }
        }
    }

    /// A connection taken out of the pool (an idle one, or a new one) for an `execute`
    /// command, which holds it for as long as it runs without holding a slot: file calls
    /// keep theirs. It never comes back (see `run.rs`: a process the command left behind may
    /// still write to it).
    pub(super) async fn dedicated(&self) -> Result<Connection, CallError> {
        match self.take_idle() {
            Some(connection) => Ok(connection),
            None => self.connect().await,
        }
    }

    /// Opens a connection now (start-up and `mountfs check`), keeping it for the next call.
    pub(super) async fn warm(&self) -> Result<(), CallError> {
        let connection = self.connect().await?;
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(connection);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_may_begin_a_marker_is_held_back() {
        assert_eq!(held_back(b"line 1\n", b"\nMFS12="), 1);
        assert_eq!(held_back(b"line 1\nMF", b"\nMFS12="), 3);
        assert_eq!(held_back(b"line 1", b"\nMFS12="), 0);
        assert_eq!(held_back(b"", b"\nMFS12="), 0);
        assert_eq!(held_back(b"\nMFS12", b"\nMFS12="), 6);
    }

    #[test]
    fn caps_are_read_from_the_opening_line() {
        let caps = Caps::parse("caps hs=1 st=0 fb=1 rl=1 rg=1 mt=1").unwrap();
        assert!(caps.sha256sum && !caps.stat && caps.rg && caps.readlink && !caps.grep_regex);
        assert!(Caps::parse("caps hs=1 rg=0 gx=1").unwrap().grep_regex);
        assert!(Caps::parse("hello").is_none());
    }
}
