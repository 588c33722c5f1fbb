//! The two system calls that put a forked child under the sandbox's Landlock ruleset, between
//! fork and exec. Below both `sandbox.rs` (which builds the ruleset) and `namespace.rs` (whose
//! init calls this inside the namespaces), so that neither imports the other's other half.

use std::os::fd::RawFd;

/// Confines the calling process with the ruleset `ruleset_fd` (from `sandbox::PreparedSandbox`).
///
/// # Safety
/// Meant for the child between fork and exec (`pre_exec`): it only makes two system calls
/// (`prctl(PR_SET_NO_NEW_PRIVS)`, `landlock_restrict_self`), which allocate nothing and take no
/// lock, so it is async-signal-safe. `ruleset_fd` must be a Landlock ruleset descriptor.
pub unsafe fn restrict_child(ruleset_fd: RawFd) -> std::io::Result<()> {
    // SAFETY: plain system calls on integers; see the function's doc.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::syscall(libc::SYS_landlock_restrict_self, ruleset_fd, 0) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}
