//! `execute` on a shell mount's target (issue 27): the timeout, cancellation and progress of
//! a command that `backend::shell` started there, and its [`Outcome`], by the same rules and
//! the same answer as a local command. No sandbox applies: the command has the target user's
//! rights. Stopping is the target's watcher's job (SIGTERM to the command's process group,
//! SIGKILL [`KILL_GRACE`] later); if the end does not come in time after that, the connection
//! is dropped, which makes the watcher stop the group too.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::{End, Live, Outcome, PROGRESS_INTERVAL, Stream};
use crate::ground::progress::ProgressReporter;
use crate::storage::backend::{RemoteRun, RunEvent};

/// How long after a stop request the command's end may take to arrive (the grace, then the
/// round trip) before the connection is dropped.
const STOP_LIMIT: Duration = Duration::from_secs(5);

/// Watches `run` until it ends, times out after `timeout`, or `cancel` is cancelled.
pub async fn watch(
    mut run: RemoteRun<'_>,
    timeout: Duration,
    cancel: &CancellationToken,
    progress: Option<&ProgressReporter>,
) -> Outcome {
    let started = Instant::now();
    let mut live = Live::default();
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    let mut ticker = tokio::time::interval(PROGRESS_INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut reported_lines = None;
    let mut end = End::Exited;
    let mut stop_by: Option<tokio::time::Instant> = None;
    let mut broken = None;
    let status = loop {
        let limit = stop_by.unwrap_or_else(|| tokio::time::Instant::now() + timeout + STOP_LIMIT);
        tokio::select! {
            event = run.next() => match event {
                Ok(RunEvent::Stdout(bytes)) => live.push(Stream::Stdout, &bytes),
                Ok(RunEvent::Stderr(bytes)) => live.push(Stream::Stderr, &bytes),
                Ok(RunEvent::Exited(code)) => {
                    live.push(Stream::Stderr, &run.rest_of_stderr().await);
                    break Some(code);
                }
                Err(reason) => {
                    broken = Some(reason);
                    break None;
                }
            },
            () = &mut deadline, if stop_by.is_none() => {
                end = End::TimedOut;
                stop_by = Some(tokio::time::Instant::now() + STOP_LIMIT);
                let _ = run.stop().await;
            }
            () = cancel.cancelled(), if stop_by.is_none() => {
                end = End::Cancelled;
                stop_by = Some(tokio::time::Instant::now() + STOP_LIMIT);
                let _ = run.stop().await;
            }
            () = tokio::time::sleep_until(limit), if stop_by.is_some() => break None,
            _ = ticker.tick(), if progress.is_some() => {
                if let (Some(progress), Some((lines, last))) = (progress, live.progress())
                    && reported_lines != Some(lines)
                {
                    reported_lines = Some(lines);
                    progress.report(lines as f64, format!("{lines} lines of output; last: {last}")).await;
                }
            }
        }
    };
    // Dropping the connection ends the command's group on the target if it still runs.
    drop(run);
    if let Some(reason) = broken {
        live.push(
            Stream::Stderr,
            format!("\n[mountfs: {reason}; the command's process group is stopped when the connection ends]\n")
                .as_bytes(),
        );
    }
    Outcome {
        status: status.map(|code| exit_status(code, end != End::Exited)),
        end,
        stray: false,
        drained: true,
        stdout: live.stdout,
        stderr: live.stderr,
        duration: started.elapsed(),
    }
}

/// The status `wait` gave on the target as an exit status: 128 + N is signal N when the
/// command was stopped (a command may also exit with such a code by itself).
fn exit_status(code: i32, stopped: bool) -> ExitStatus {
    if stopped && (129..=128 + 64).contains(&code) {
        ExitStatus::from_raw(code - 128)
    } else {
        ExitStatus::from_raw((code & 0xff) << 8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_of_stopped_commands_are_signals() {
        assert_eq!(exit_status(143, true).signal(), Some(15));
        assert_eq!(exit_status(143, false).code(), Some(143));
        assert_eq!(exit_status(3, true).code(), Some(3));
    }
}
