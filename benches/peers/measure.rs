//! Load and measurement: calls with N in flight against a running server, the server's own CPU
//! time and peak RSS from /proc (so the client's cost is out of those figures), and wall time of
//! `rg` runs.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::servers::Call;
use crate::support::McpServer;

/// How long a measurement runs: at least `min` calls, then until `time` has passed (at most
/// `max` calls).
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    pub min: usize,
    pub max: usize,
    pub time: Duration,
}

/// What one measurement saw.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    pub calls: usize,
    pub failures: usize,
    pub first_failure: Option<String>,
    pub elapsed: Duration,
    pub latencies: Vec<Duration>,
    /// Server CPU time (user + system) spent during the measurement.
    pub cpu: Duration,
    /// Server peak RSS during the measurement, KiB.
    pub peak_rss_kib: u64,
}

impl Sample {
    pub fn rate(&self) -> f64 {
        self.calls as f64 / self.elapsed.as_secs_f64()
    }

    /// The `q` quantile of latency (nearest rank), ms.
    pub fn quantile_ms(&self, q: f64) -> f64 {
        let mut sorted = self.latencies.clone();
        sorted.sort();
        let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len().max(1));
        sorted
            .get(rank - 1)
            .map_or(f64::NAN, |d| d.as_secs_f64() * 1e3)
    }

    pub fn cpu_ms_per_call(&self) -> f64 {
        self.cpu.as_secs_f64() * 1e3 / self.calls as f64
    }
}

/// Clock ticks per second of /proc/<pid>/stat's times.
pub fn clock_ticks() -> u64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100)
}

/// Total CPU time (utime + stime, all threads, live or gone) of a process so far.
pub fn cpu_time(pid: u32, ticks: u64) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the `(comm)`: state is field 3, utime field 14, stime field 15.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<u64> = after
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    let used = fields.get(10).unwrap_or(&0) + fields.get(11).unwrap_or(&0);
    Duration::from_secs_f64(used as f64 / ticks as f64)
}

/// A line of /proc/<pid>/status in KiB, e.g. `VmHWM`.
pub fn status_kib(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Resets the process's peak RSS (VmHWM) to its current RSS (Linux ≥ 4.0), so the next
/// reading is the peak of one measurement only.
pub fn reset_peak_rss(pid: u32) {
    let _ = std::fs::write(format!("/proc/{pid}/clear_refs"), "5");
}

/// Calls `call` on `server` with `in_flight` requests outstanding until `budget` is spent; each
/// worker pauses `gap` after each answer (paced calls: the server idle between them; the
/// pauses count in the elapsed time, not in the latencies).
pub async fn load(
    server: &Arc<McpServer>,
    call: &Call,
    in_flight: usize,
    gap: Duration,
    budget: Budget,
    ticks: u64,
) -> Sample {
    let pid = server.pid().unwrap_or(0);
    reset_peak_rss(pid);
    let cpu_before = cpu_time(pid, ticks);
    let started = Instant::now();
    let claimed = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::with_capacity(in_flight);
    for _ in 0..in_flight {
        let (server, call, claimed) = (server.clone(), call.clone(), claimed.clone());
        workers.push(tokio::spawn(async move {
            let mut seen = Sample::default();
            loop {
                let n = claimed.fetch_add(1, Ordering::Relaxed);
                if n >= budget.max || (n >= budget.min && started.elapsed() >= budget.time) {
                    break seen;
                }
                let sent = Instant::now();
                let outcome = server.try_call(call.tool, call.args.clone()).await;
                seen.latencies.push(sent.elapsed());
                seen.calls += 1;
                let failure = match outcome {
                    Ok(answer) if !answer.is_error => None,
                    Ok(answer) => Some(answer.text),
                    Err(response) => Some(response.to_string()),
                };
                if let Some(text) = failure {
                    seen.failures += 1;
                    seen.first_failure.get_or_insert(text);
                }
                if !gap.is_zero() {
                    // A thread sleep, not the runtime's timer: the client's own wake-up stays
                    // out of the way of the server's, on a runtime of one thread.
                    std::thread::sleep(gap);
                }
            }
        }));
    }
    let mut sample = Sample::default();
    for worker in workers {
        let seen = worker.await.expect("load worker");
        sample.calls += seen.calls;
        sample.failures += seen.failures;
        sample.latencies.extend(seen.latencies);
        if sample.first_failure.is_none() {
            sample.first_failure = seen.first_failure;
        }
    }
    sample.elapsed = started.elapsed();
    sample.cpu = cpu_time(pid, ticks).saturating_sub(cpu_before);
    sample.peak_rss_kib = status_kib(pid, "VmHWM");
    sample
}

/// Runs `program` once with stdout piped and read (`rg` answers "is there a match" alone
/// when it sees /dev/null); returns whether it succeeded and its own user + system time, from
/// `wait4` (exactly this child's, whatever else the driver runs meanwhile).
fn run_once(program: &Path, args: &[String]) -> (bool, Duration) {
    use std::io::Read as _;
    let Ok(mut child) = std::process::Command::new(program)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
    else {
        return (false, Duration::ZERO);
    };
    if let Some(mut stdout) = child.stdout.take() {
        let _ = stdout.read_to_end(&mut Vec::new());
    }
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: zeroed rusage is a valid value; wait4 writes only the two pointers given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers; the child is ours and not yet waited for (std's `Child` never
    // waits on drop).
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let time = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    let ok = waited == pid && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    (ok, time(usage.ru_utime) + time(usage.ru_stime))
}

/// Runs `rg` with `args` until `budget` is spent; latencies are wall times of whole runs, `cpu`
/// the runs' user + system time.
pub fn rg(program: &Path, args: &[String], budget: Budget) -> Sample {
    let mut sample = Sample::default();
    let started = Instant::now();
    while sample.calls < budget.max
        && (sample.calls < budget.min || started.elapsed() < budget.time)
    {
        let sent = Instant::now();
        let (ok, cpu) = run_once(program, args);
        sample.latencies.push(sent.elapsed());
        sample.calls += 1;
        sample.cpu += cpu;
        if !ok {
            sample.failures += 1;
        }
    }
    sample.elapsed = started.elapsed();
    sample
}

/// The files one `rg` run names (its output's paths, before a `:` in content mode), relative to
/// `root`.
pub fn rg_files(program: &Path, args: &[String], root: &Path) -> std::io::Result<Vec<String>> {
    let output = std::process::Command::new(program).args(args).output()?;
    let prefix = format!("{}/", root.display());
    let mut files: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| {
            let path = line.strip_prefix(&prefix).unwrap_or(line);
            path.split(':').next().unwrap_or(path).to_owned()
        })
        .collect();
    files.sort();
    files.dedup();
    Ok(files)
}
