//! Installing the pinned Node clients of the tests (`tests/inspector/`, `tests/mcp-conformance/`)
//! once, however many tests ask at the same moment.
//!
//! `cargo test` runs tests on parallel threads, and several `cargo test` runs may share one
//! checkout; two `npm ci` in one directory at once each empty `node_modules` under the other,
//! and one fails (ENOTEMPTY, ENOTDIR), so on a fresh clone one of the two Inspector tests was
//! reported skipped. So an install runs under an exclusive `flock` on the directory itself: the
//! lock belongs to the open file, so it keeps out the other threads of this process (each opens
//! the directory anew) as well as other processes; whoever gets it second finds the files
//! installed and runs nothing.

use rustix::fs::{FlockOperation, flock};
use std::path::Path;
use std::process::Command;

/// Makes sure `wanted` (files below `dir`) exist, running `npm ci` in `dir` when one is
/// missing; returns whether they all exist afterwards.
///
/// Even the first look is made under the lock (a shared one): `npm ci` unpacks the package a
/// test names before its dependencies, so a look without it saw the Inspector's `cli.js` while
/// the other thread's install was still unpacking `rxjs`, and ran a half-installed client
/// ("Cannot find module 'rxjs'" on a fresh clone, issue 42).
pub fn installed(dir: &Path, wanted: &[&Path]) -> bool {
    let present = || wanted.iter().all(|file| file.exists());
    let Ok(handle) = std::fs::File::open(dir) else {
        return false;
    };
    // Held until `handle` is dropped (or changed below); the kernel releases it if the process
    // dies, so a killed test run never blocks the next one. A shared lock waits while an
    // install holds the exclusive one, and lets readers look at once otherwise.
    if flock(&handle, FlockOperation::LockShared).is_err() {
        return false;
    }
    if present() {
        return true;
    }
    // Not installed: become the installer. The shared lock is converted, not kept (two
    // threads converting at once would wait for each other forever), so look again once the
    // exclusive lock is held: another thread may have installed meanwhile.
    if flock(&handle, FlockOperation::Unlock).is_err()
        || flock(&handle, FlockOperation::LockExclusive).is_err()
    {
        return false;
    }
    if present() {
        return true;
    }
    let ran = Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
        .current_dir(dir)
        .status()
        .is_ok_and(|s| s.success());
    ran && present()
}
