//! Skipped tests, said out loud: a test that cannot run here (no PostgreSQL, no Python SDK, …)
//! calls [`record`] and returns; when the test binary exits, one line per group goes to stderr,
//! after libtest's summary and outside its output capture:
//!
//! ```text
//! SKIPPED 41 tests of "postgres conformance case": no PostgreSQL ... (postgres::write_then_read, …)
//! ```
//!
//! libtest counts such a test as passed; these lines are what keeps the count honest
//! (`cargo test 2>&1 | grep SKIPPED`). Each line starts with `SKIPPED` so it can be found.
#![allow(dead_code)] // each test binary uses its own subset

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Mutex, Once, PoisonError};

/// (group, reason) → names of the tests skipped for it.
static SKIPPED: Mutex<BTreeMap<(String, String), Vec<String>>> = Mutex::new(BTreeMap::new());

/// Notes that the running test skips `group` (what it would have exercised) because of
/// `reason` (which says how to make it run).
pub fn record(group: &str, reason: &str) {
    static REPORT_AT_EXIT: Once = Once::new();
    REPORT_AT_EXIT.call_once(|| {
        // SAFETY: registers a plain `extern "C" fn` with the C runtime, to run once at exit.
        unsafe {
            libc::atexit(report);
        }
    });
    let test = std::thread::current()
        .name()
        .unwrap_or("(unnamed)")
        .to_owned();
    let mut skipped = SKIPPED.lock().unwrap_or_else(PoisonError::into_inner);
    let tests = skipped
        .entry((group.to_owned(), reason.to_owned()))
        .or_default();
    if !tests.contains(&test) {
        tests.push(test);
    }
}

/// The lines [`report`] writes.
pub fn summary() -> Vec<String> {
    let skipped = SKIPPED.lock().unwrap_or_else(PoisonError::into_inner);
    skipped
        .iter()
        .map(|((group, reason), tests)| {
            let mut names: Vec<&str> = tests.iter().map(String::as_str).collect();
            names.sort_unstable();
            let shown = names.iter().take(3).copied().collect::<Vec<_>>().join(", ");
            let more = if names.len() > 3 { ", …" } else { "" };
            let count = names.len();
            let noun = if count == 1 { "test" } else { "tests" };
            format!("SKIPPED {count} {noun} of \"{group}\": {reason} ({shown}{more})")
        })
        .collect()
}

extern "C" fn report() {
    let lines = summary();
    if lines.is_empty() {
        return;
    }
    // Straight to the stderr handle: libtest captures `print!`/`eprint!`, not this.
    let mut stderr = std::io::stderr().lock();
    for line in lines {
        let _ = writeln!(stderr, "{line}");
    }
    let _ = stderr.flush();
}

/// Whether this process may make private mount namespaces (root, and `unshare --mount` runs);
/// if not, records `group` as skipped with what it needs and returns `false`.
pub fn private_mounts_or_skip(group: &str) -> bool {
    let works = rustix::process::geteuid().is_root()
        && std::process::Command::new("unshare")
            .args(["--mount", "true"])
            .status()
            .is_ok_and(|s| s.success());
    if !works {
        record(group, "needs root and unshare --mount");
    }
    works
}
