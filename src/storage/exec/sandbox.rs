//! The Landlock wall of `execute`'s sandbox (issues 11, 25): a command may write only beneath
//! the writable disk mounts' real directories, its private `/tmp` and `/dev/shm`, and never make
//! a device file. The first wall is the namespaces (`namespace.rs`): read-only mounts, hidden
//! files; Landlock also forbids a confined process any mount or unmount, so the command cannot
//! undo them.
//!
//! The ruleset is built in the server, before the fork, with the `landlock` crate (which does
//! the allocation and the error handling); inside the namespaces init adds the rules of the
//! directories made there and makes two raw system calls ([`super::restrict::restrict_child`]), all
//! async-signal-safe. Landlock confines init and everything it starts, and the confinement
//! cannot be undone from inside.
//!
//! Only write access is handled (ABI 3: writing, creating, removing, renaming, linking and
//! truncating files; making block and character devices is handled and granted nowhere), so
//! reads, execution and the network are left as they are; what a command can read is the
//! namespaces' business.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::Path;

use landlock::{
    ABI, AccessFs, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr,
};
use thiserror::Error;

/// The Landlock ABI whose write rights the sandbox needs (Linux 6.2: adds truncate).
pub const REQUIRED_ABI: ABI = ABI::V3;

/// Device files every command may write (`> /dev/null` is everywhere in scripts).
const WRITABLE_DEVICES: &[&str] = &["/dev/null", "/dev/zero", "/dev/full"];

/// Why the sandbox cannot be set up.
#[derive(Debug, Error)]
pub enum SandboxError {
    /// The kernel has no (recent enough) Landlock.
    #[error(
        "the kernel's Landlock LSM is missing, disabled or older than ABI {abi} (Linux 6.2): {reason}"
    )]
    Unsupported {
        /// The required ABI.
        abi: i32,
        /// What the kernel said.
        reason: String,
    },
    /// The user, mount, PID and IPC namespaces cannot be made here.
    #[error(
        "cannot run commands in their own user, mount, PID and IPC namespaces (unprivileged user namespaces may be disabled, e.g. kernel.unprivileged_userns_clone=0 or a container without them): {0}"
    )]
    Namespaces(#[from] super::namespace::NamespaceError),
    /// A rule could not be added for a directory.
    #[error("cannot let the sandbox write in a mounted directory: {reason}")]
    Rule {
        /// What failed.
        reason: String,
    },
}

/// A ruleset ready to be applied in a child, by file descriptor.
#[derive(Debug)]
pub struct PreparedSandbox {
    ruleset: OwnedFd,
}

impl PreparedSandbox {
    /// The ruleset's descriptor, for [`super::restrict::restrict_child`]. It is close-on-exec, so the command
    /// never holds it.
    pub fn raw_fd(&self) -> RawFd {
        self.ruleset.as_raw_fd()
    }
}

fn write_access() -> landlock::BitFlags<AccessFs> {
    AccessFs::from_write(REQUIRED_ABI)
}

/// The rights given beneath a writable directory: every write right but making device files
/// (handled, so refused everywhere: a device node in a mount would open the host's disks).
fn granted_access() -> landlock::BitFlags<AccessFs> {
    write_access() & !(AccessFs::MakeChar | AccessFs::MakeBlock)
}

/// [`granted_access`] as the kernel's bit set, for rules init adds inside the namespaces.
pub fn granted_access_bits() -> u64 {
    granted_access().bits()
}

/// Whether the sandbox can be enforced here, fully: Landlock, and a command run in its own
/// namespaces (`namespace.rs`); the error says what is missing.
pub fn probe() -> Result<(), SandboxError> {
    let ruleset = prepare(&[])?;
    super::namespace::probe(Some(ruleset.raw_fd()), granted_access_bits())?;
    Ok(())
}

/// A ruleset letting a process write only beneath `writable` (directories) and into the
/// harmless device files. Refused unless the kernel enforces every write right of
/// [`REQUIRED_ABI`]: a sandbox that is only partly there is not offered as one.
pub fn prepare(writable: &[&Path]) -> Result<PreparedSandbox, SandboxError> {
    let unsupported = |reason: String| SandboxError::Unsupported {
        abi: REQUIRED_ABI as i32,
        reason,
    };
    let access = write_access();
    let granted = granted_access();
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(access)
        .map_err(|e| unsupported(e.to_string()))?
        .create()
        .map_err(|e| unsupported(e.to_string()))?;
    for dir in writable {
        let fd = PathFd::new(dir).map_err(|e| SandboxError::Rule {
            reason: e.to_string(),
        })?;
        ruleset = ruleset
            .add_rule(PathBeneath::new(fd, granted))
            .map_err(|e| SandboxError::Rule {
                reason: e.to_string(),
            })?;
    }
    let device_access = AccessFs::WriteFile | AccessFs::Truncate;
    for device in WRITABLE_DEVICES {
        // A missing device (a minimal container) is simply not writable.
        let Ok(fd) = PathFd::new(device) else {
            continue;
        };
        ruleset = ruleset
            .add_rule(PathBeneath::new(fd, device_access))
            .map_err(|e| SandboxError::Rule {
                reason: e.to_string(),
            })?;
    }
    let fd: Option<OwnedFd> = ruleset.into();
    match fd {
        Some(ruleset) => Ok(PreparedSandbox { ruleset }),
        None => Err(unsupported("no ruleset was created".into())),
    }
}
