//! Our own temporary files on disk: how they are named (`TEMP_PREFIX<pid>-<n>`), the names
//! agents may not use, and the sweep that removes those a killed writer left behind.
//!
//! Writers (`write`) and undo's aside directory (`aside`) take their names from here; listings
//! and walks hide every name [`is_temp_name`] accepts. The sweep runs once per mount, in the
//! background after [`SWEEP_DELAY`], and removes only names of exactly our form whose process
//! is gone.

use std::ffi::{OsStr, OsString};
use std::sync::atomic::{AtomicU64, Ordering};

use cap_std::fs::Dir;

use crate::backend::{Error, Result};
use crate::path::VirtualPath;

/// Names of temporary files start with this; listings never show them and the sweep at start
/// removes those whose writer is gone.
pub const TEMP_PREFIX: &str = ".mountfs-tmp-";

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Whether a directory entry is one of our temporary files.
pub(super) fn is_temp_name(name: &OsStr) -> bool {
    name.as_encoded_bytes().starts_with(TEMP_PREFIX.as_bytes())
}

pub(super) fn temp_name() -> OsString {
    let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    OsString::from(format!("{TEMP_PREFIX}{}-{n}", std::process::id()))
}

/// The writer process a temporary file names, when it parses.
fn temp_owner(name: &OsStr) -> Option<u32> {
    let rest = name.to_str()?.strip_prefix(TEMP_PREFIX)?;
    let (pid, counter) = rest.split_once('-')?;
    counter.parse::<u64>().ok()?;
    pid.parse().ok()
}

/// Refuses a name of the form our temporary files take: such a file would be hidden from
/// listings and could be swept away.
pub(super) fn refuse_temp_name(name: &OsStr, path: &VirtualPath) -> Result<()> {
    if is_temp_name(name) {
        return Err(Error::Unsupported {
            path: path.clone(),
            reason: format!(
                "names starting with {TEMP_PREFIX} are reserved for mountfs's own temporary files; choose another name"
            ),
        });
    }
    Ok(())
}

/// How long the start-up sweep of stale temporary files waits before it walks the mount. The
/// walk covers the whole tree (20,000 files: tens of ms of CPU on two threads); run at once,
/// it competed with the MCP handshake and made spawn → initialized 8–11 ms instead of ~4
/// (issue 6). Nothing depends on its timing: stale temporary files are invisible meanwhile.
pub(super) const SWEEP_DELAY: std::time::Duration = std::time::Duration::from_secs(1);

/// Runs `sweep` on a thread of its own after [`SWEEP_DELAY`], logging what it removed.
pub(super) fn sweep_later(sweep: impl FnOnce() -> usize + Send + 'static) {
    let spawned = std::thread::Builder::new()
        .name("mountfs-sweep".into())
        .spawn(move || {
            std::thread::sleep(SWEEP_DELAY);
            let removed = sweep();
            if removed > 0 {
                tracing::info!(removed, "removed temporary files left by a killed writer");
            }
        });
    if let Err(error) = spawned {
        tracing::warn!(%error, "could not start the temporary-file sweep");
    }
}

/// Removes temporary files left by writers that are no longer running (a crash or a kill):
/// walks the whole root, hidden and ignored directories included, without following symlinks.
/// `threads` walk at once. Returns how many were removed.
pub(super) fn sweep_stale_temp_files(
    root: &Dir,
    walk_root: &std::path::Path,
    threads: usize,
) -> usize {
    let own = std::process::id();
    let removed = AtomicU64::new(0);
    let mut builder = ignore::WalkBuilder::new(walk_root);
    builder
        .standard_filters(false)
        .follow_links(false)
        .threads(threads);
    builder.build_parallel().run(|| {
        Box::new(|entry| {
            let Ok(entry) = entry else {
                return ignore::WalkState::Continue;
            };
            let name = entry.file_name();
            if !is_temp_name(name) {
                return ignore::WalkState::Continue;
            }
            // A directory of ours is where undo keeps contents aside (see `aside`): never
            // walked into, removed whole once its process is gone.
            let is_dir = entry.file_type().is_some_and(|t| t.is_dir());
            let next = if is_dir {
                ignore::WalkState::Skip
            } else {
                ignore::WalkState::Continue
            };
            // Only names of exactly our own form, from a writer that is gone, are ours to remove.
            let Some(pid) = temp_owner(name) else {
                return next;
            };
            if pid == own || process_alive(pid) {
                return next;
            }
            if let Ok(relative) = entry.path().strip_prefix(walk_root) {
                let gone = if is_dir {
                    root.remove_dir_all(relative)
                } else {
                    root.remove_file(relative)
                };
                if gone.is_ok() {
                    removed.fetch_add(1, Ordering::Relaxed);
                }
            }
            next
        })
    });
    usize::try_from(removed.into_inner()).unwrap_or(usize::MAX)
}

/// Whether a process with this id exists (signal 0 probes without sending anything).
fn process_alive(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return false;
    };
    !matches!(
        rustix::process::test_kill_process(pid),
        Err(rustix::io::Errno::SRCH)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_names_carry_the_writer_pid() {
        let name = temp_name();
        assert!(is_temp_name(&name));
        assert_eq!(temp_owner(&name), Some(std::process::id()));
        assert!(!is_temp_name(OsStr::new("notes.md")));
    }
}
