//! Progress and cancellation of a multi-file change (a recursive `delete`, a directory `move`,
//! `apply_patch`; issue 13).
//!
//! A [`ChangeSteps`] counts the steps of one call (a file checked, copied, written or removed)
//! against the total known up front, reports them as `notifications/progress` (progress and
//! total: steps; the message: the phase, e.g. `120 of 500 files copied`) to a client that sent a
//! progress token, and tells the tool when the client cancelled the call. The tool asks before
//! each step ([`ChangeSteps::cancelled`]) and, when cancelled, stops there and takes back what it
//! did, so a cancelled change is never half made (each tool says where its commit point is).

use std::time::{Duration, Instant};

use super::{CallContext, ToolError};

/// Shortest time between two progress notifications of one call (the first step of each phase
/// is always reported, so a client sees every phase begin).
pub const CHANGE_PROGRESS_INTERVAL: Duration = Duration::from_millis(100);

/// The steps of one multi-file change (see the module doc).
#[derive(Debug)]
pub struct ChangeSteps<'c> {
    tool: &'static str,
    context: &'c CallContext,
    /// Steps in every phase.
    total: u64,
    /// Steps done, over every phase.
    done: u64,
    /// The phase now: its past participle ("checked", "copied") and its own count and total.
    phase: &'static str,
    phase_done: u64,
    phase_total: u64,
    /// When progress was last reported, and at what count (each report's count is higher).
    reported: Option<(Instant, u64)>,
}

impl<'c> ChangeSteps<'c> {
    /// The steps of a change by `tool` of `total` steps in all, for the call of `context`.
    pub fn new(tool: &'static str, context: &'c CallContext, total: u64) -> Self {
        Self {
            tool,
            context,
            total,
            done: 0,
            phase: "",
            phase_done: 0,
            phase_total: 0,
            reported: None,
        }
    }

    /// Whether the client cancelled the call: the tool stops before its next step.
    pub fn cancelled(&self) -> bool {
        self.context.cancel.is_cancelled()
    }

    /// The error of the cancelled call; `state` says what it left ("nothing was changed").
    pub fn cancellation(&self, state: impl Into<String>) -> ToolError {
        ToolError::ChangeCancelled {
            tool: self.tool,
            state: state.into(),
        }
    }

    /// The total once it is known better (a phase turned out shorter than first counted).
    pub fn set_total(&mut self, total: u64) {
        self.total = total.max(self.done);
    }

    /// Starts a phase of `steps` steps, named by what each step does to a file ("checked",
    /// "copied", "deleted"); reported at once.
    pub async fn phase(&mut self, name: &'static str, steps: u64) {
        self.phase = name;
        self.phase_done = 0;
        self.phase_total = steps;
        self.report(true).await;
    }

    /// One step of the phase done; reported when [`CHANGE_PROGRESS_INTERVAL`] has passed.
    pub async fn step(&mut self) {
        self.done = self.done.saturating_add(1).min(self.total.max(1));
        self.phase_done = self.phase_done.saturating_add(1);
        self.report(false).await;
    }

    /// Steps done so far, over every phase.
    pub fn done(&self) -> u64 {
        self.done
    }

    /// Reports the count when it grew since the last report and the interval has passed (or
    /// `now`: a phase begins).
    async fn report(&mut self, now: bool) {
        let Some(progress) = &self.context.progress else {
            return;
        };
        let due = match self.reported {
            None => true,
            Some((at, count)) => {
                self.done > count && (now || at.elapsed() >= CHANGE_PROGRESS_INTERVAL)
            }
        };
        if !due {
            return;
        }
        self.reported = Some((Instant::now(), self.done));
        progress
            .report_of(
                self.done as f64,
                Some(self.total as f64),
                format!(
                    "{} of {} files {}",
                    self.phase_done, self.phase_total, self.phase
                ),
            )
            .await;
    }
}
