//! `execute` in a shell mount (issue 27): a command run on the target, in a directory of the
//! mount, over a connection of its own while it runs (file calls keep the pool's meanwhile).
//!
//! The command text travels as a payload on the shell's standard input, never in the frame's
//! line; the script's `ex` function checks the directory as every path is checked (no way
//! out), prints a separator, and runs `sh -c COMMAND` in a process group of its own (`setsid`
//! when the target has it, else `set -m`, which only a shell with job control honours) with a
//! watcher that reads the connection's standard input: a line there (a timeout or a
//! cancellation) or its end (the connection dropped) sends SIGTERM to the group, SIGKILL 2 s
//! later. Without a group (busybox or dash without `setsid`: no job control without a
//! terminal) the watcher finds the command's process tree in `/proc` (`ds`), stops it with
//! SIGSTOP (twice, for children born meanwhile), sends SIGTERM and SIGCONT, and SIGKILL 2 s
//! later; a process that left the tree by a double fork is not reached.
//!
//! The connection is an idle one taken out of the pool (or a new one), holding no slot, and it
//! never goes back: it is dropped when the command ends (its shell killed). A process the
//! command leaves behind outside its group (a server started with `setsid`, or any background
//! process where the target has no `setsid`) still holds the connection's stdout and stderr;
//! on a reused connection what it printed later became part of the next file call's answer
//! (bytes mixed into a file's content, or an answer that could not be read). Dropped, its
//! later writes fail (EPIPE) and reach no call. The cost is one connection opened per command.
//!
//! `ShellBackend::start_command` starts it; the timeout, progress and answer rules are
//! `crate::storage::exec`'s, which drives the [`RemoteRun`].

use thiserror::Error;

use super::conn::{Connection, Piece, Pool};

/// Why a command could not be started on the target. Nothing was run.
#[derive(Debug, Error)]
pub enum RemoteStartError {
    /// The directory is missing.
    #[error("does not exist")]
    NotFound,
    /// The directory is a file.
    #[error("is a file, not a directory")]
    NotDirectory,
    /// The directory resolves outside the mount (a symlink, `..`).
    #[error("resolves outside the mount's directory (a symlink or '..')")]
    Outside,
    /// The connection could not be opened or broke.
    #[error("shell '{name}': {reason}")]
    Connection {
        /// The `--shell` name.
        name: String,
        /// What failed.
        reason: String,
    },
}

/// What a running command gives.
#[derive(Debug, PartialEq, Eq)]
pub enum RunEvent {
    /// Bytes it wrote on stdout.
    Stdout(Vec<u8>),
    /// Bytes it wrote on stderr.
    Stderr(Vec<u8>),
    /// It ended with this status (`wait`'s: 128 + N after signal N).
    Exited(i32),
}

/// A command running on the target; dropping it drops its connection (never given back to
/// the pool, see the module doc), which makes the target's watcher stop the command's process
/// group if it still runs.
#[derive(Debug)]
pub struct RemoteRun<'a> {
    connection: Option<Connection>,
    /// Borrowed for as long as the command runs (the mount outlives its commands).
    _pool: &'a Pool,
    name: String,
    exited: bool,
}

impl<'a> RemoteRun<'a> {
    /// A command under way on `connection`, taken from `pool` (its `ex` function passed the
    /// separator).
    pub(super) fn new(connection: Connection, pool: &'a Pool, name: &str) -> Self {
        Self {
            connection: Some(connection),
            _pool: pool,
            name: name.to_owned(),
            exited: false,
        }
    }

    fn connection(&mut self) -> Result<&mut Connection, String> {
        self.connection
            .as_mut()
            .ok_or_else(|| format!("shell '{}': the command's connection is closed", self.name))
    }

    /// The next output or the end; an error when the connection broke (the command's fate on
    /// the target is then unknown, but its watcher stops it when the connection ends).
    pub async fn next(&mut self) -> Result<RunEvent, String> {
        match self.connection()?.next_piece().await {
            Ok(Piece::Out(bytes)) => Ok(RunEvent::Stdout(bytes)),
            Ok(Piece::Err(bytes)) => Ok(RunEvent::Stderr(bytes)),
            Ok(Piece::End(status)) => {
                self.exited = true;
                Ok(RunEvent::Exited(status))
            }
            Err(error) => Err(format!("shell '{}': {error}", self.name)),
        }
    }

    /// Stderr written just before the end (after [`RunEvent::Exited`]).
    pub async fn rest_of_stderr(&mut self) -> Vec<u8> {
        if !self.exited {
            return Vec::new();
        }
        let Ok(connection) = self.connection() else {
            return Vec::new();
        };
        connection.finish_stderr().await.unwrap_or_default()
    }

    /// Asks the target to stop the command's process group (SIGTERM, SIGKILL 2 s later); its
    /// end still comes through [`Self::next`].
    pub async fn stop(&mut self) -> Result<(), String> {
        self.connection()?
            .send_line(b"stop\n")
            .await
            .map_err(|error| format!("shell '{}': {error}", self.name))
    }
}
