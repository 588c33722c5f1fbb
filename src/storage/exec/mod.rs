//! `execute` (issues 11, 25): one shell command in a disk mount's real directory, sandboxed in
//! its own namespaces with Landlock inside (`namespace.rs`, `sandbox.rs`), stopped at its timeout
//! or on cancellation, its output streamed as progress and returned labelled.
//!
//! This is the process and sandbox machinery, below the tools: it imports no tool type. The
//! tool's face (its arguments, the real directory behind `cwd`, the answer) is
//! `tools::execute`.
//!
//! A command, step by step: prepare the
//! Landlock ruleset (`sandbox.rs`) and the namespaces' plan (`namespace.rs`; unsandboxed: a
//! private `TMPDIR` instead); start the shell (`env.rs`) in a session and process group of its
//! own, confined between fork and exec; read stdout and stderr as they come (bounded); wait for
//! the shell, the timeout or the client's cancellation; then stop whatever is left of the group
//! (SIGTERM, SIGKILL [`KILL_GRACE`] later). Sandboxed, the shell's PID namespace ends with it,
//! which kills every process left, even those that left the group. A call whose future is
//! dropped (the session or the server ends) kills the group in [`ProcessGroup`]'s `Drop`.
//!
//! The answer's text and structured content are built in [`Outcome`]; the tool face sends a
//! text over the result cap through `tools::large_result`.

pub mod env;
pub mod namespace;
pub mod remote;
pub mod restrict;
pub mod sandbox;

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::json;
use thiserror::Error;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio_util::sync::CancellationToken;

use crate::ground::path::VirtualPath;
use crate::ground::progress::ProgressReporter;

/// Whether `execute` is offered, and how (`--allow-exec[=MODE]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExecMode {
    /// Commands run in their own namespaces with Landlock; the server refuses to start where
    /// either cannot be had.
    Sandboxed,
    /// Commands run with the server's full rights (for kernels without Landlock or user
    /// namespaces).
    Unsandboxed,
}

impl ExecMode {
    /// The sentence the tool description ends with, saying which mode is in force.
    pub fn tool_note(self) -> &'static str {
        match self {
            Self::Sandboxed => {
                "Sandbox (Landlock in its own user, mount, PID and IPC namespaces): the command may write only inside the writable disk mounts (at their real paths) and its private /tmp (TMPDIR); everything else is read-only ('Read-only file system' or 'Permission denied'), the server's own files are hidden, and every process it starts ends with the call."
            }
            Self::Unsandboxed => {
                "NOT sandboxed (--allow-exec=unsandboxed): the command runs with the server's full rights and can change any file the server's user can."
            }
        }
    }
}

/// The soft open-files limit (`RLIMIT_NOFILE`) commands start with, when the server raised its
/// own: the limit the server was started with. Set once by the HTTP server before it raises the
/// limit for its connections (`http::conns`), so that a command does not inherit a limit meant
/// for the server (a build tool sizing tables by `ulimit -n`, or a runaway loop of opens).
static COMMAND_OPEN_FILES: std::sync::OnceLock<u64> = std::sync::OnceLock::new();

/// Commands start with a soft open-files limit of at most `soft` from now on (see
/// [`COMMAND_OPEN_FILES`]); only the first call counts.
pub fn keep_open_files_limit_for_commands(soft: u64) {
    let _ = COMMAND_OPEN_FILES.set(soft);
}

/// Seconds a command may run when the call gives no `timeout`.
pub const DEFAULT_TIMEOUT_SECS: u64 = 120;
/// Between SIGTERM and SIGKILL to a command's process group.
pub const KILL_GRACE: Duration = Duration::from_secs(2);
/// Most bytes kept of each of stdout and stderr; more is counted and dropped, so one command
/// cannot grow the server without bound.
pub const CAPTURE_LIMIT_BYTES: usize = 16 * 1024 * 1024;
/// At most one progress notification per this interval.
pub const PROGRESS_INTERVAL: Duration = Duration::from_millis(250);
/// Characters of the last output line a progress notification shows.
const PROGRESS_LINE_CHARS: usize = 200;
/// How long the output pipes may stay open after the process group is gone (a process that
/// left the group, e.g. with `setsid`, may still hold them).
const DRAIN_LIMIT: Duration = Duration::from_secs(1);

/// Why a command could not be run. Nothing was started.
#[derive(Debug, Error)]
pub enum ExecError {
    /// The server was started without `--allow-exec`.
    #[error(
        "Error: execute is not enabled on this server. The operator can enable it with --allow-exec"
    )]
    NotEnabled,
    /// No disk mount at all.
    #[error(
        "Error: execute: no disk mount to run commands in; only disk mounts, and shell mounts given as cwd, can run commands. Give a cwd in a shell mount, or the operator can mount a directory, e.g. --mount /=disk:DIR"
    )]
    NoDiskMount,
    /// `cwd` lies in a memory or store mount.
    #[error(
        "Error: execute: cwd {path} is not in a disk or shell mount; only those can run commands (memory and store mounts have no real directory). Give a cwd under {disk_mounts}"
    )]
    NotDisk {
        /// The `cwd` given.
        path: VirtualPath,
        /// The disk mounts' prefixes.
        disk_mounts: String,
    },
    /// `cwd` lies in a read-only shell mount.
    #[error(
        "Error: execute: cwd {path} is in a read-only shell mount; a command on the target could change its files, so none is run there. Give a cwd in a writable mount"
    )]
    ShellReadOnly {
        /// The `cwd` given.
        path: VirtualPath,
    },
    /// The command could not be started on a shell mount's target.
    #[error(
        "Error: execute: cannot run the command in {path} on the target: {reason}. Nothing was run; check the directory (ls) and retry"
    )]
    Remote {
        /// The `cwd` given.
        path: VirtualPath,
        /// Why.
        reason: String,
    },
    /// `cwd` does not exist.
    #[error(
        "Error: execute: cwd {path} does not exist. Give an existing directory (ls shows them)"
    )]
    CwdNotFound {
        /// The `cwd` given.
        path: VirtualPath,
    },
    /// `cwd` is a file.
    #[error("Error: execute: cwd {path} is a file, not a directory. Give its directory instead")]
    CwdNotDirectory {
        /// The `cwd` given.
        path: VirtualPath,
    },
    /// The sandbox could not be set up.
    #[error(
        "Error: execute: cannot set up the sandbox: {0}. Nothing was run; the operator can start the server with --allow-exec=unsandboxed on a kernel without Landlock or user namespaces"
    )]
    Sandbox(#[from] sandbox::SandboxError),
    /// The private temporary directory could not be made.
    #[error(
        "Error: execute: cannot create the command's temporary directory: {reason}. Nothing was run; retry"
    )]
    TempDir {
        /// Why.
        reason: String,
    },
    /// The shell could not be started.
    #[error("Error: execute: cannot start the command: {reason}. Nothing was run")]
    Spawn {
        /// Why.
        reason: String,
    },
}

/// One command to run (see the module doc): what `execute`'s tool face (`tools::execute`) found
/// behind the call's arguments and the session's mount table.
#[derive(Debug, Clone, Copy)]
pub struct Command<'a> {
    /// How commands run here (`--allow-exec[=MODE]`).
    pub mode: ExecMode,
    /// The shell command line.
    pub command: &'a str,
    /// The real directory it runs in.
    pub cwd: &'a Path,
    /// How long it may run.
    pub timeout: Duration,
    /// The disk mounts it sees at their real paths (sandboxed).
    pub mounts: &'a [namespace::HostMount],
    /// What the sandbox hides and whether it limits reads.
    pub policy: &'a namespace::SandboxPolicy,
}

/// Runs `command` until it exits, times out, or `cancel` is cancelled; its output so far goes
/// to `progress`, when the client asked for progress.
pub async fn run(
    command: Command<'_>,
    cancel: &CancellationToken,
    progress: Option<&ProgressReporter>,
) -> Result<Outcome, ExecError> {
    let shell = env::shell(std::env::var_os("SHELL"));
    let watch = Watch { cancel, progress };
    match command.mode {
        ExecMode::Sandboxed => {
            let policy = command.policy;
            let writable: Vec<&Path> = command
                .mounts
                .iter()
                .filter(|m| m.writable)
                .map(|m| m.dir.as_path())
                .collect();
            let ruleset = sandbox::prepare(&writable)?;
            let plan = namespace::Plan::new(
                command.mounts,
                command.cwd,
                policy,
                sandbox::granted_access_bits(),
            )
            .map_err(|e| ExecError::Sandbox(e.into()))?;
            // With limited reads the shell must be one the command can see.
            let shell = if policy.limits_reads()
                && !namespace::SYSTEM_DIRS
                    .iter()
                    .any(|dir| shell.starts_with(dir))
            {
                PathBuf::from(env::FALLBACK_SHELL)
            } else {
                shell
            };
            let invocation = Invocation {
                shell: &shell,
                command: command.command,
                cwd: command.cwd,
                temp: Path::new("/tmp"),
                confinement: Some(Confinement {
                    ruleset: ruleset.raw_fd(),
                    plan: Arc::new(plan),
                }),
                timeout: command.timeout,
            };
            let outcome = invocation.run(watch).await;
            drop(ruleset);
            outcome
        }
        ExecMode::Unsandboxed => {
            let temp = PrivateTemp::create().await?;
            let invocation = Invocation {
                shell: &shell,
                command: command.command,
                cwd: command.cwd,
                temp: temp.path(),
                confinement: None,
                timeout: command.timeout,
            };
            let outcome = invocation.run(watch).await;
            temp.remove().await;
            outcome
        }
    }
}

/// What the client sees of a running command.
#[derive(Clone, Copy)]
struct Watch<'a> {
    cancel: &'a CancellationToken,
    progress: Option<&'a ProgressReporter>,
}

/// A directory only this command's `TMPDIR` points at, removed after the call.
#[derive(Debug)]
struct PrivateTemp {
    path: PathBuf,
}

impl PrivateTemp {
    async fn create() -> Result<Self, ExecError> {
        let base = std::env::temp_dir();
        tokio::task::spawn_blocking(move || {
            let mut last_error = None;
            for _ in 0..8 {
                let path = base.join(format!("mountfs-exec-{:016x}", rand::random::<u64>()));
                let mut builder = std::fs::DirBuilder::new();
                std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
                match builder.create(&path) {
                    Ok(()) => return Ok(Self { path }),
                    Err(error) => last_error = Some(error),
                }
            }
            Err(ExecError::TempDir {
                reason: last_error.map_or_else(String::new, |e| e.to_string()),
            })
        })
        .await
        .map_err(|e| ExecError::TempDir {
            reason: e.to_string(),
        })?
    }

    fn path(&self) -> &Path {
        &self.path
    }

    async fn remove(self) {
        let path = self.path.clone();
        let removed = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(path)).await;
        if let Ok(Err(error)) = removed {
            tracing::warn!(%error, "could not remove a command's temporary directory");
        }
    }
}

/// One command to start.
struct Invocation<'a> {
    shell: &'a Path,
    command: &'a str,
    cwd: &'a Path,
    /// `TMPDIR` (`/tmp`, private, in the sandbox).
    temp: &'a Path,
    /// The sandbox; `None` when unsandboxed.
    confinement: Option<Confinement>,
    timeout: Duration,
}

/// How a sandboxed command is confined: its namespaces' plan and the Landlock ruleset init
/// applies in them.
struct Confinement {
    ruleset: std::os::fd::RawFd,
    plan: Arc<namespace::Plan>,
}

/// How the wait for the shell ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Exited,
    TimedOut,
    Cancelled,
}

impl Invocation<'_> {
    fn command(&self) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(self.shell);
        command
            .arg("-c")
            .arg(self.command)
            .current_dir(self.cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        // A minimal environment (issue 41): never the server's own (its credentials).
        command.env_clear().envs(env::for_commands());
        for name in ["TMPDIR", "TMP", "TEMP"] {
            command.env(name, self.temp);
        }
        command.env("PWD", self.cwd);
        match &self.confinement {
            Some(confinement) => {
                let plan = confinement.plan.clone();
                let ruleset = confinement.ruleset;
                restore_open_files_limit(&mut command);
                // SAFETY: `enter` is made to run between fork and exec: async-signal-safe
                // system calls only, on buffers built before the fork (see namespace.rs).
                unsafe {
                    command.pre_exec(move || plan.enter(Some(ruleset)));
                }
            }
            None => {
                restore_open_files_limit(&mut command);
                // SAFETY: the closure runs between fork and exec and only calls setsid(2),
                // which is async-signal-safe; the error path builds an io::Error from an
                // errno, no heap.
                unsafe {
                    command.pre_exec(|| {
                        // A session of its own: its own process group (killed as one) and no
                        // controlling terminal, so nothing can prompt on the operator's
                        // terminal.
                        if libc::setsid() < 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                        Ok(())
                    });
                }
            }
        }
        command
    }

    async fn run(&self, context: Watch<'_>) -> Result<Outcome, ExecError> {
        let started = Instant::now();
        let mut child = self.command().spawn().map_err(|e| {
            match self.confinement.as_ref().and_then(|c| c.plan.failure()) {
                Some(failure) => ExecError::Sandbox(failure.into()),
                None => ExecError::Spawn {
                    reason: e.to_string(),
                },
            }
        })?;
        let pgid = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .ok_or_else(|| ExecError::Spawn {
                reason: "the command exited before its process id was known".into(),
            })?;
        let mut group = ProcessGroup { pgid, done: false };
        let live = Arc::new(Mutex::new(Live::default()));
        let readers = [
            child
                .stdout
                .take()
                .map(|pipe| tokio::spawn(pump(pipe, Stream::Stdout, live.clone()))),
            child
                .stderr
                .take()
                .map(|pipe| tokio::spawn(pump(pipe, Stream::Stderr, live.clone()))),
        ];

        let deadline = tokio::time::sleep(self.timeout);
        tokio::pin!(deadline);
        let mut ticker = tokio::time::interval(PROGRESS_INTERVAL);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut reported_lines = None;
        let (end, mut status) = loop {
            tokio::select! {
                status = child.wait() => break (End::Exited, status.ok()),
                () = &mut deadline => break (End::TimedOut, None),
                () = context.cancel.cancelled() => break (End::Cancelled, None),
                _ = ticker.tick(), if context.progress.is_some() => {
                    let snapshot = lock(&live).progress();
                    if let (Some(progress), Some((lines, last))) = (&context.progress, snapshot)
                        && reported_lines != Some(lines)
                    {
                        reported_lines = Some(lines);
                        progress.report(lines as f64, format!("{lines} lines of output; last: {last}")).await;
                    }
                }
            }
        };
        let mut stray = group.stop(&mut child, &mut status).await;
        if let Some(confinement) = &self.confinement {
            // The keeper's status says nothing of the command: init noted the shell's.
            let page = confinement.plan.page();
            if let Some(raw) = page.shell_status() {
                status = Some(ExitStatus::from_raw(raw));
            }
            stray |= page.stray();
        }
        let mut drained = true;
        for reader in readers.into_iter().flatten() {
            let abort = reader.abort_handle();
            match tokio::time::timeout(DRAIN_LIMIT, reader).await {
                Ok(_) => {}
                Err(_) => {
                    abort.abort();
                    drained = false;
                }
            }
        }
        let live = std::mem::take(&mut *lock(&live));
        Ok(Outcome {
            status,
            end,
            stray,
            drained,
            stdout: live.stdout,
            stderr: live.stderr,
            duration: started.elapsed(),
        })
    }
}

/// A command's process group; killed when dropped before it was stopped (the call's future
/// was dropped: the session or the server ended).
#[derive(Debug)]
struct ProcessGroup {
    pgid: i32,
    done: bool,
}

impl ProcessGroup {
    fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill(2) on a process group id we created (setsid made the shell its leader).
        unsafe {
            libc::kill(-self.pgid, signal);
        }
    }

    /// Whether any process is left in the group (an unreaped leader counts).
    fn alive(&self) -> bool {
        // SAFETY: signal 0 only checks for existence.
        let result = unsafe { libc::kill(-self.pgid, 0) };
        result == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
    }

    /// Stops every process left in the group — SIGTERM, then SIGKILL after [`KILL_GRACE`] —
    /// and reaps the shell into `status`. Returns whether processes other than an exited
    /// shell had to be stopped.
    ///
    /// The group id is the shell's pid, which cannot be reused while any member lives; the
    /// shell is reaped here, in the same loop that watches the group.
    async fn stop(
        &mut self,
        child: &mut tokio::process::Child,
        status: &mut Option<ExitStatus>,
    ) -> bool {
        let reap = |child: &mut tokio::process::Child, status: &mut Option<ExitStatus>| {
            if status.is_none()
                && let Ok(Some(exited)) = child.try_wait()
            {
                *status = Some(exited);
            }
        };
        reap(child, status);
        if !self.alive() {
            self.done = true;
            return false;
        }
        self.signal(libc::SIGTERM);
        let grace_ends = Instant::now() + KILL_GRACE;
        loop {
            tokio::time::sleep(Duration::from_millis(20)).await;
            reap(child, status);
            if !self.alive() {
                break;
            }
            if Instant::now() >= grace_ends {
                self.signal(libc::SIGKILL);
                if status.is_none() {
                    *status = child.wait().await.ok();
                }
                // Members reparented to init are reaped by it at once; wait for that briefly.
                for _ in 0..50 {
                    if !self.alive() {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                break;
            }
        }
        self.done = true;
        true
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        if !self.done {
            self.signal(libc::SIGKILL);
        }
    }
}

/// Which output a chunk came from.
#[derive(Debug, Clone, Copy)]
enum Stream {
    Stdout,
    Stderr,
}

/// One output stream, bounded to [`CAPTURE_LIMIT_BYTES`].
#[derive(Debug, Default)]
struct Capture {
    bytes: Vec<u8>,
    /// Bytes read past the limit and dropped.
    dropped: u64,
}

impl Capture {
    fn push(&mut self, chunk: &[u8]) {
        let room = CAPTURE_LIMIT_BYTES.saturating_sub(self.bytes.len());
        let kept = chunk.len().min(room);
        self.bytes.extend_from_slice(&chunk[..kept]);
        self.dropped += (chunk.len() - kept) as u64;
    }

    /// The stream as text for the answer (invalid UTF-8 replaced), with a note when bytes
    /// were dropped.
    fn text(&self) -> String {
        let mut text = String::from_utf8_lossy(&self.bytes).into_owned();
        if self.dropped > 0 {
            if !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&format!(
                "[{} more bytes of output were not kept: at most {} MiB of each stream are]",
                self.dropped,
                CAPTURE_LIMIT_BYTES / (1024 * 1024)
            ));
        }
        text
    }
}

/// The output so far, shared by the readers and the progress reports.
#[derive(Debug, Default)]
struct Live {
    stdout: Capture,
    stderr: Capture,
    /// Complete lines seen, both streams together.
    lines: u64,
    /// The last non-empty line seen (shortened), for progress.
    last_line: String,
}

impl Live {
    fn push(&mut self, stream: Stream, chunk: &[u8]) {
        match stream {
            Stream::Stdout => self.stdout.push(chunk),
            Stream::Stderr => self.stderr.push(chunk),
        }
        self.lines += bytecount::count(chunk, b'\n') as u64;
        if let Some(line) = chunk
            .split(|&b| b == b'\n')
            .rev()
            .find(|line| !line.iter().all(u8::is_ascii_whitespace))
        {
            self.last_line = String::from_utf8_lossy(line)
                .chars()
                .take(PROGRESS_LINE_CHARS)
                .collect();
        }
    }

    /// `(lines, last line)` once there is output.
    fn progress(&self) -> Option<(u64, String)> {
        (!self.last_line.is_empty()).then(|| (self.lines, self.last_line.clone()))
    }
}

fn lock(live: &Mutex<Live>) -> std::sync::MutexGuard<'_, Live> {
    // Each update is one append: a poisoned capture is still consistent.
    live.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Copies one pipe into `live` until it closes.
async fn pump(mut pipe: impl AsyncRead + Unpin, stream: Stream, live: Arc<Mutex<Live>>) {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        match pipe.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => lock(&live).push(stream, &buffer[..n]),
        }
    }
}

/// What happened to one command.
#[derive(Debug)]
pub struct Outcome {
    status: Option<ExitStatus>,
    end: End,
    /// Processes other than an exited shell had to be stopped.
    stray: bool,
    /// Both pipes reached their end.
    drained: bool,
    stdout: Capture,
    stderr: Capture,
    duration: Duration,
}

impl Outcome {
    fn exit_code(&self) -> Option<i32> {
        self.status.and_then(|s| s.code())
    }

    fn signal(&self) -> Option<i32> {
        self.status.and_then(|s| s.signal())
    }

    /// The answer: status line, what stopped it, then stdout and stderr, each labelled.
    pub fn text(&self, timeout_secs: u64) -> String {
        let status = match (self.exit_code(), self.signal()) {
            (Some(code), _) => format!("exit code {code}"),
            (None, Some(signal)) => format!("killed by signal {signal} ({})", signal_name(signal)),
            (None, None) => "exit status unknown".to_owned(),
        };
        let mut text = format!("{status}, {}\n", duration_text(self.duration));
        let stop = "its process group got SIGTERM, then SIGKILL 2 s later if still running; the output so far is below";
        match self.end {
            End::TimedOut => text.push_str(&format!(
                "Stopped: the command timed out after {timeout_secs} s; {stop}. Give a larger timeout (up to 600 s) or run less at once\n"
            )),
            End::Cancelled => text.push_str(&format!(
                "Stopped: the client cancelled the call; {stop}\n"
            )),
            End::Exited if self.stray => text.push_str(
                "Processes the command left running in the background were stopped (nothing outlives the call)\n",
            ),
            End::Exited => {}
        }
        if !self.drained {
            text.push_str("A process that left the command's process group still held its output open; output after the stop was not collected\n");
        }
        for (label, capture) in [("stdout", &self.stdout), ("stderr", &self.stderr)] {
            let body = capture.text();
            if body.is_empty() {
                text.push_str(&format!("{label}: (empty)\n"));
            } else {
                text.push_str(&format!(
                    "{label}:\n{}\n",
                    body.strip_suffix('\n').unwrap_or(&body)
                ));
            }
        }
        text.truncate(text.trim_end_matches('\n').len());
        text
    }

    /// `{exit_code, signal, timed_out, cancelled, stdout, stderr, duration_ms}`; the output
    /// fields are capped like the text (the whole output is in the saved file, if any).
    pub fn structured(&self) -> serde_json::Value {
        let cap = |capture: &Capture| crate::ground::text::truncate::cap_result(capture.text());
        json!({
            "exit_code": self.exit_code(),
            "signal": self.signal(),
            "timed_out": self.end == End::TimedOut,
            "cancelled": self.end == End::Cancelled,
            "stdout": cap(&self.stdout),
            "stderr": cap(&self.stderr),
            "duration_ms": u64::try_from(self.duration.as_millis()).unwrap_or(u64::MAX),
        })
    }
}

fn duration_text(duration: Duration) -> String {
    if duration < Duration::from_secs(1) {
        format!("{} ms", duration.as_millis())
    } else {
        format!("{:.2} s", duration.as_secs_f64())
    }
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        _ => "signal",
    }
}

/// Lowers the command's soft open-files limit to [`COMMAND_OPEN_FILES`] when one was kept,
/// between fork and exec (before the sandbox is entered: every process of the call inherits it).
fn restore_open_files_limit(command: &mut tokio::process::Command) {
    let Some(&soft) = COMMAND_OPEN_FILES.get() else {
        return;
    };
    let soft = soft as libc::rlim_t;
    // SAFETY: the closure runs between fork and exec and only calls getrlimit(2) and
    // setrlimit(2) on a value on its own stack: async-signal-safe, no heap.
    unsafe {
        command.pre_exec(move || {
            let mut limit = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur > soft {
                limit.rlim_cur = soft;
                if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_keeps_its_limit_and_counts_the_rest() {
        let mut capture = Capture::default();
        capture.push(&vec![b'a'; CAPTURE_LIMIT_BYTES - 1]);
        capture.push(b"bcd");
        assert_eq!(capture.bytes.len(), CAPTURE_LIMIT_BYTES);
        assert_eq!(capture.dropped, 2);
        assert!(capture.text().ends_with(
            "[2 more bytes of output were not kept: at most 16 MiB of each stream are]"
        ));
    }

    #[test]
    fn progress_counts_lines_and_shows_the_last() {
        let mut live = Live::default();
        assert_eq!(live.progress(), None);
        live.push(Stream::Stdout, b"one\ntwo\n");
        live.push(Stream::Stderr, b"three\n\n");
        assert_eq!(live.progress(), Some((4, "three".to_owned())));
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(duration_text(Duration::from_millis(12)), "12 ms");
        assert_eq!(duration_text(Duration::from_millis(2346)), "2.35 s");
    }
}
