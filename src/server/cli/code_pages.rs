//! The executable's start-up code given back to the system once the server serves (issue 45).
//!
//! Most of a busy server's resident memory is its own code: every page of `.text` it has ever
//! run stays mapped, and start-up runs a great deal of code no request runs again (argument
//! parsing, the mount table's checks, opening databases, recovery, the sandbox probe), on top
//! of the pages the kernel maps around each fault. A few seconds after start, the executable's
//! code mappings are dropped from the process (`madvise(MADV_DONTNEED)`); the pages requests
//! need come back at their next use as minor faults from the page cache (the file is
//! unchanged), so what stays resident is the code the server actually runs.
//!
//! Only the executable's own *executable* mappings (`r-xp`) are dropped: they are never written
//! (a position-independent executable has no text relocations), so reading them again gives the
//! same bytes. Writable or relocated data (`.data`, `.data.rel.ro` after relocation, `.bss`)
//! is never touched: dropping it would lose its contents.

use std::time::Duration;

/// How long after start the start-up code is dropped.
pub const AFTER_START: Duration = Duration::from_secs(2);

/// Drops the executable's code pages after `delay`, on a thread of its own (the server goes on
/// meanwhile). Does nothing where `/proc/self/maps` does not exist.
pub fn forget_start_up_code_after(delay: Duration) {
    let spawned = std::thread::Builder::new()
        .name("code-pages".to_owned())
        .spawn(move || {
            std::thread::sleep(delay);
            let dropped = forget_code_pages();
            tracing::debug!(bytes = dropped, "dropped the start-up code pages");
        });
    if let Err(error) = spawned {
        tracing::debug!(%error, "could not start the code-pages thread; start-up code stays");
    }
}

/// The executable mappings of the running executable, as `(start, end)` addresses, read from
/// the text of `/proc/self/maps` (`maps`) for the executable at `exe`.
pub fn code_mappings(maps: &str, exe: &str) -> Vec<(usize, usize)> {
    maps.lines()
        .filter_map(|line| {
            // start-end perms offset dev inode [path]; the path may hold spaces.
            let mut fields = line.splitn(6, ' ');
            let range = fields.next()?;
            let perms = fields.next()?;
            let path = fields.nth(3)?.trim_start();
            if perms != "r-xp" || path != exe {
                return None;
            }
            let (start, end) = range.split_once('-')?;
            let start = usize::from_str_radix(start, 16).ok()?;
            let end = usize::from_str_radix(end, 16).ok()?;
            (end > start).then_some((start, end))
        })
        .collect()
}

/// Drops the executable's code mappings; returns how many bytes of mappings were dropped.
fn forget_code_pages() -> usize {
    #[cfg(target_os = "linux")]
    {
        let Ok(exe) = std::fs::read_link("/proc/self/exe") else {
            return 0;
        };
        let Some(exe) = exe.to_str() else {
            return 0;
        };
        let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
            return 0;
        };
        let mut dropped = 0;
        for (start, end) in code_mappings(&maps, exe) {
            // SAFETY: the range is one whole mapping of the executable's code, read-only and
            // executable, never written (see the module doc): dropping it only makes its next
            // use read the same bytes from the file again. No memory safety depends on it.
            let done = unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED)
            };
            if done == 0 {
                dropped += end - start;
            }
        }
        dropped
    }
    #[cfg(not(target_os = "linux"))]
    {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_executables_code_mappings_are_taken() {
        let maps = "\
5583a0000000-5583a0400000 r--p 00000000 fd:01 123 /usr/bin/my server
5583a0400000-5583a1400000 r-xp 00400000 fd:01 123 /usr/bin/my server
5583a1400000-5583a1800000 r--p 01400000 fd:01 123 /usr/bin/my server
5583a1800000-5583a1900000 rw-p 01800000 fd:01 123 /usr/bin/my server
7f0000000000-7f0000100000 r-xp 00000000 fd:01 456 /usr/lib/x86_64-linux-gnu/libc.so.6
7f0000200000-7f0000300000 r-xp 00000000 00:00 0
";
        assert_eq!(
            code_mappings(maps, "/usr/bin/my server"),
            [(0x5583a0400000, 0x5583a1400000)]
        );
        assert!(code_mappings(maps, "/usr/bin/other").is_empty());
    }

    #[test]
    fn dropping_the_code_pages_keeps_this_process_running() {
        // This test binary's own code: after the drop it still runs (the pages come back).
        forget_code_pages();
        assert_eq!(code_mappings("", "x"), Vec::<(usize, usize)>::new());
    }
}
