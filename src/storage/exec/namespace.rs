//! The namespaces of `execute` (issue 25): each command runs in new user, mount, PID and IPC
//! namespaces, made with raw system calls between fork and exec, with Landlock (`sandbox.rs`)
//! applied inside them as a second wall.
//!
//! Why raw calls and not `bwrap`: Landlock forbids mount(2)/pivot_root(2) to a process it
//! restricts, so it must be applied after the mounts, by the process that then runs the shell;
//! with `bwrap` that needs a trampoline program between bwrap and the shell, which the server
//! (run in-process by the tests, so `/proc/self/exe` is not `mountfs`) cannot count on, and a
//! package the host must have. Here nothing is executed but the shell.
//!
//! Three processes, all forked from the server and none of them executing anything but the
//! last:
//! - the *keeper* (the server's child, the one tokio waits for): a session and process group of
//!   its own, `PR_SET_PDEATHSIG`=SIGKILL, clones *init* with `CLONE_NEWUSER|NEWNS|NEWPID|NEWIPC`,
//!   writes init's uid/gid maps from outside (only a process in the parent user namespace may
//!   write a map wider than its own id), then closes every descriptor and waits for init;
//! - *init*, PID 1 of the new PID namespace: builds the new root from the [`Plan`] (a private
//!   tmpfs root, the host or only its system directories read-only, the disk mounts at their real
//!   paths, a private `/tmp`, a minimal `/dev`, a fresh `/proc`, the server's files covered),
//!   pivots into it, makes itself non-dumpable (its memory is a copy of the server's), restricts
//!   itself with Landlock, forks the shell, reaps everything until the shell ends, notes in the
//!   [`SharedPage`] the shell's status and whether processes were left, and exits — which ends
//!   the PID namespace: the kernel kills every process left in it (`setsid`, `set -m`, double
//!   forks included);
//! - the *shell*, which returns to the standard library's spawn code and is executed.
//!
//! When the server dies, the keeper gets SIGKILL (death signal), then init (death signal), which
//! ends the namespace. Everything between fork and exec is async-signal-safe: raw system calls on
//! buffers built before the fork (`CString`s of the [`Plan`]), integer formatting on the stack,
//! atomics in a shared anonymous mapping; no allocation, no lock.
//!
//! The new root's steps and their system calls are in [`new_root`]; here are the processes
//! that run them, the page they share and the id maps.

mod new_root;

use std::ffi::{CString, c_char, c_int, c_ulong};
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};

use new_root::{
    Builder, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY, Op, Placement, cstring, depth,
    errno, run, under,
};
pub use new_root::{HostMount, NamespaceError, SYSTEM_DIRS, SandboxPolicy};

/// `struct landlock_path_beneath_attr` (packed in the kernel's ABI).
#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}
const LANDLOCK_RULE_PATH_BENEATH: c_int = 1;

/// Steps that are not in the [`Plan`]'s list, numbered after it.
#[derive(Debug, Clone, Copy)]
#[repr(u32)]
enum Fixed {
    Clone = 10_000,
    UidMap,
    GidMap,
    Setgroups,
    Sync,
    DeathSignal,
    Landlock,
    ForkShell,
    Dumpable,
}

impl Fixed {
    fn describe(step: u32) -> &'static str {
        match step {
            x if x == Fixed::Clone as u32 => {
                "creating the user, mount, PID and IPC namespaces (clone)"
            }
            x if x == Fixed::UidMap as u32 => "writing the user namespace's uid_map",
            x if x == Fixed::GidMap as u32 => "writing the user namespace's gid_map",
            x if x == Fixed::Setgroups as u32 => "writing the user namespace's setgroups",
            x if x == Fixed::Sync as u32 => "waiting for the namespace's id maps",
            x if x == Fixed::DeathSignal as u32 => "setting the parent-death signal",
            x if x == Fixed::Landlock as u32 => "applying the Landlock ruleset",
            x if x == Fixed::ForkShell as u32 => "starting the shell in the namespace",
            x if x == Fixed::Dumpable as u32 => {
                "setting whether the namespace's processes are dumpable"
            }
            _ => "an unknown step",
        }
    }
}

const NO_STEP: u32 = u32::MAX;

/// The page shared by the server, the keeper and init (an anonymous `MAP_SHARED` mapping
/// survives fork): which step failed, the shell's status, whether processes were left.
#[repr(C)]
struct PageData {
    failed_step: AtomicU32,
    errno: AtomicI32,
    shell_done: AtomicU32,
    shell_status: AtomicI32,
    stray: AtomicU32,
}

/// An anonymous shared mapping holding a [`PageData`].
#[derive(Debug)]
pub struct SharedPage {
    ptr: std::ptr::NonNull<PageData>,
}

// SAFETY: the page holds only atomics, which are safe to share between threads.
unsafe impl Send for SharedPage {}
// SAFETY: as above.
unsafe impl Sync for SharedPage {}

const PAGE_BYTES: usize = 4096;

impl SharedPage {
    fn new() -> std::io::Result<Self> {
        // SAFETY: a fresh anonymous mapping, checked before use; zeroed by the kernel, which
        // is a valid PageData (all atomics 0).
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                PAGE_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let ptr = std::ptr::NonNull::new(ptr.cast::<PageData>())
            .ok_or_else(|| std::io::Error::other("mmap returned null"))?;
        let page = Self { ptr };
        page.data().failed_step.store(NO_STEP, Ordering::SeqCst);
        Ok(page)
    }

    fn data(&self) -> &PageData {
        // SAFETY: the mapping lives as long as `self` and holds a PageData.
        unsafe { self.ptr.as_ref() }
    }

    /// The failed step and its errno, if a step failed.
    fn failure(&self) -> Option<(u32, i32)> {
        let step = self.data().failed_step.load(Ordering::SeqCst);
        (step != NO_STEP).then(|| (step, self.data().errno.load(Ordering::SeqCst)))
    }

    /// The shell's raw wait status, once init saw it end.
    pub fn shell_status(&self) -> Option<i32> {
        (self.data().shell_done.load(Ordering::SeqCst) == 1)
            .then(|| self.data().shell_status.load(Ordering::SeqCst))
    }

    /// Whether processes were left when the shell ended (the namespace's end killed them).
    pub fn stray(&self) -> bool {
        self.data().stray.load(Ordering::SeqCst) == 1
    }
}

impl Drop for SharedPage {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), PAGE_BYTES);
        }
    }
}

/// Everything the keeper and init need, built before the fork.
#[derive(Debug)]
pub struct Plan {
    ops: Vec<Op>,
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
    /// Whether the keeper writes `deny` to setgroups (needed for an unprivileged gid map).
    deny_setgroups: bool,
    /// Directories made inside the namespace that Landlock must let the command write (the
    /// private `/tmp`, `/dev/shm`): rules cannot be made for them before they exist.
    writable_inside: Vec<CString>,
    /// The Landlock rights given beneath them.
    inside_access: u64,
    /// The server's pid: the keeper checks it still has that parent after setting its death
    /// signal.
    server_pid: libc::pid_t,
    page: SharedPage,
}

impl Plan {
    /// The plan for one command: `mounts` at their real paths, `cwd` (a real directory inside
    /// one of them, or `/`), what `policy` hides and limits; `access` is the Landlock write
    /// rights given beneath the private `/tmp` and `/dev/shm`.
    pub fn new(
        mounts: &[HostMount],
        cwd: &Path,
        policy: &SandboxPolicy,
        access: u64,
    ) -> Result<Self, NamespaceError> {
        let c = |s: &str| CString::new(s).map_err(|_| NamespaceError::Nul(s.to_owned()));
        let mut b = Builder { ops: Vec::new() };
        // The pivot into a tmpfs whose /oldroot is the host's root (bubblewrap's way).
        b.push(Op::MakePrivate(c("/")?));
        b.push(Op::Tmpfs {
            to: c("/tmp")?,
            flags: libc::MS_NOSUID | libc::MS_NODEV,
            data: c("mode=0755")?,
        });
        b.push(Op::Mkdir(c("/tmp/newroot")?));
        b.push(Op::Mkdir(c("/tmp/oldroot")?));
        b.push(Op::PivotRoot {
            new: c("/tmp")?,
            old: c("/tmp/oldroot")?,
        });
        b.push(Op::Chdir(c("/")?));

        let mut placements = vec![Placement::Tmp, Placement::Dev, Placement::Proc];
        match &policy.reads {
            None => {
                b.push(Op::Bind {
                    from: c("/oldroot")?,
                    to: c("/newroot")?,
                    recursive: true,
                });
                b.push(Op::Attr {
                    path: c("/newroot")?,
                    set: MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
                    recursive: true,
                });
            }
            Some(extra) => {
                b.push(Op::Tmpfs {
                    to: c("/newroot")?,
                    flags: libc::MS_NOSUID | libc::MS_NODEV,
                    data: c("mode=0755")?,
                });
                let dirs = SYSTEM_DIRS.iter().map(PathBuf::from);
                for dir in dirs.chain(extra.iter().cloned()) {
                    let Ok(meta) = std::fs::symlink_metadata(&dir) else {
                        continue;
                    };
                    if meta.file_type().is_symlink() {
                        if let Ok(target) = std::fs::read_link(&dir) {
                            placements.push(Placement::Link { path: dir, target });
                        }
                    } else if meta.is_dir() {
                        let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
                        placements.push(Placement::ReadOnlyDir(dir));
                    }
                }
            }
        }
        placements.extend(mounts.iter().cloned().map(Placement::Mount));
        // Parents before what lies inside them; at one depth, the given order.
        placements.sort_by_key(|p| depth(p.path()));
        for placement in &placements {
            b.place(placement)?;
        }
        let mut hidden: Vec<(PathBuf, bool)> = policy
            .hidden
            .iter()
            .filter_map(|path| {
                let path = std::fs::canonicalize(path).ok()?;
                let dir = std::fs::metadata(&path).ok()?.is_dir();
                Some((path, dir))
            })
            .collect();
        hidden.sort_by_key(|(path, _)| depth(path));
        for (path, dir) in hidden {
            b.push(Op::Hide {
                path: cstring(&under("/newroot", &path))?,
                dir,
            });
        }
        if policy.reads.is_some() {
            b.push(Op::Attr {
                path: c("/newroot")?,
                set: MOUNT_ATTR_RDONLY,
                recursive: false,
            });
        }
        b.push(Op::Detach(c("/oldroot")?));
        b.push(Op::Chdir(c("/newroot")?));
        b.push(Op::PivotRoot {
            new: c(".")?,
            old: c(".")?,
        });
        b.push(Op::Detach(c(".")?));
        b.push(Op::Chdir(cstring(cwd)?));

        // SAFETY: getuid/getgid/getpid cannot fail.
        let (uid, gid, server_pid) = unsafe { (libc::getuid(), libc::getgid(), libc::getpid()) };
        // Root (allowed to map any id) keeps every id as it is, so files keep their owners and
        // the command root's rights over them, as without namespaces; anyone else maps itself.
        let (uid_map, gid_map, deny_setgroups) = if uid == 0 {
            let all = b"0 0 4294967295\n".to_vec();
            (all.clone(), all, false)
        } else {
            (
                format!("{uid} {uid} 1\n").into_bytes(),
                format!("{gid} {gid} 1\n").into_bytes(),
                true,
            )
        };
        Ok(Self {
            ops: b.ops,
            uid_map,
            gid_map,
            deny_setgroups,
            writable_inside: vec![c("/tmp")?, c("/dev/shm")?],
            inside_access: access,
            server_pid,
            page: SharedPage::new().map_err(NamespaceError::Page)?,
        })
    }

    /// What init saw of the shell.
    pub fn page(&self) -> &SharedPage {
        &self.page
    }

    /// Why the set-up failed, when a step in the child recorded a failure (after a failed
    /// spawn, or a probe's failed run).
    pub fn failure(&self) -> Option<NamespaceError> {
        let (step, errno) = self.page.failure()?;
        let step = match self.ops.get(step as usize) {
            Some(op) => op.describe(),
            None => Fixed::describe(step).to_owned(),
        };
        Some(NamespaceError::Step {
            step,
            reason: std::io::Error::from_raw_os_error(errno).to_string(),
        })
    }

    /// Records that `step` failed with the current errno and returns that error.
    fn fail(&self, step: u32) -> std::io::Error {
        let error = std::io::Error::last_os_error();
        let data = self.page.data();
        data.errno
            .store(error.raw_os_error().unwrap_or(0), Ordering::SeqCst);
        data.failed_step.store(step, Ordering::SeqCst);
        error
    }

    /// Enters the namespaces: run in the server's child between fork and exec (`pre_exec`);
    /// returns only in the shell's process (or with an error). `ruleset` is the Landlock
    /// ruleset to apply, when any.
    ///
    /// # Safety
    /// Only between fork and exec of a child of this process: it forks twice with raw
    /// `clone`, and the keeper and init never return (they `_exit`). Async-signal-safe: see
    /// the module's doc.
    pub unsafe fn enter(&self, ruleset: Option<RawFd>) -> std::io::Result<()> {
        // SAFETY: the caller's contract; every call below is a plain system call on buffers
        // owned by `self`, or on the stack.
        unsafe {
            // A session of its own: its own process group (killed as one) and no controlling
            // terminal, so nothing can prompt on the operator's terminal.
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(self.fail(Fixed::DeathSignal as u32));
            }
            if libc::getppid() != self.server_pid {
                // The server died before the death signal was set.
                libc::_exit(1);
            }
            let mut sync = [0 as c_int; 2];
            if libc::pipe2(sync.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
                return Err(self.fail(Fixed::Sync as u32));
            }
            let flags = libc::CLONE_NEWUSER
                | libc::CLONE_NEWNS
                | libc::CLONE_NEWPID
                | libc::CLONE_NEWIPC
                | libc::SIGCHLD;
            // The server is non-dumpable (main.rs), and so is this copy of it: the files of
            // /proc/<init>/ would then belong to root, and the keeper (not root) could not
            // write init's maps. Init is made dumpable — it inherits it from here — until it
            // has built its root (it then makes itself non-dumpable again, below); the keeper
            // is made non-dumpable again at once.
            if libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) != 0 {
                return Err(self.fail(Fixed::Dumpable as u32));
            }
            let init = clone(flags as c_ulong);
            if init != 0 && libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) != 0 {
                if init > 0 {
                    libc::kill(init, libc::SIGKILL);
                }
                return Err(self.fail(Fixed::Dumpable as u32));
            }
            if init < 0 {
                return Err(self.fail(Fixed::Clone as u32));
            }
            if init == 0 {
                libc::close(sync[1]);
                let mut byte = 0u8;
                loop {
                    let n = libc::read(sync[0], (&raw mut byte).cast(), 1);
                    if n == 1 {
                        break;
                    }
                    if n < 0 && errno() == libc::EINTR {
                        continue;
                    }
                    // The keeper could not write the maps (it recorded why) or died.
                    libc::_exit(1);
                }
                libc::close(sync[0]);
                return self.init(ruleset);
            }
            libc::close(sync[0]);
            if let Err(error) = self.write_maps(init) {
                libc::kill(init, libc::SIGKILL);
                return Err(error);
            }
            if libc::write(sync[1], b"g".as_ptr().cast(), 1) != 1 {
                libc::kill(init, libc::SIGKILL);
                return Err(self.fail(Fixed::Sync as u32));
            }
            libc::close(sync[1]);
            self.keep(init)
        }
    }

    /// The keeper: writes init's id maps from outside its user namespace.
    unsafe fn write_maps(&self, init: libc::pid_t) -> std::io::Result<()> {
        // SAFETY: plain system calls on stack buffers.
        unsafe {
            let mut path = [0u8; 64];
            if self.deny_setgroups {
                proc_path(&mut path, init, b"setgroups");
                write_file(&path, b"deny").map_err(|_| self.fail(Fixed::Setgroups as u32))?;
            }
            proc_path(&mut path, init, b"uid_map");
            write_file(&path, &self.uid_map).map_err(|_| self.fail(Fixed::UidMap as u32))?;
            proc_path(&mut path, init, b"gid_map");
            write_file(&path, &self.gid_map).map_err(|_| self.fail(Fixed::GidMap as u32))?;
        }
        Ok(())
    }

    /// The keeper, once init runs: holds nothing open, ignores the SIGTERM sent to the whole
    /// group (the shell gets it; init ends with the shell), waits for init and exits.
    unsafe fn keep(&self, init: libc::pid_t) -> ! {
        // SAFETY: plain system calls; `_exit` never returns.
        unsafe {
            close_all_from(0);
            for signal in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
                libc::signal(signal, libc::SIG_IGN);
            }
            let mut status = 0;
            loop {
                let r = libc::waitpid(init, &mut status, 0);
                if r == init || (r < 0 && errno() != libc::EINTR) {
                    break;
                }
            }
            libc::_exit(0)
        }
    }

    /// Init, PID 1 of the new namespaces: the mounts, Landlock, the shell, then the reaping.
    unsafe fn init(&self, ruleset: Option<RawFd>) -> std::io::Result<()> {
        // SAFETY: plain system calls on `self`'s buffers and the stack; `_exit` never returns.
        unsafe {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(self.fail(Fixed::DeathSignal as u32));
            }
            for (index, op) in self.ops.iter().enumerate() {
                if run(op) != 0 {
                    return Err(self.fail(index as u32));
                }
            }
            // Init's memory is a copy of the server's (its environment included): no process
            // of the command may read it through /proc/1.
            if libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) != 0 {
                return Err(self.fail(Fixed::Dumpable as u32));
            }
            if let Some(ruleset) = ruleset {
                for dir in &self.writable_inside {
                    let fd = libc::open(dir.as_ptr(), libc::O_PATH | libc::O_CLOEXEC);
                    if fd < 0 {
                        continue;
                    }
                    let attr = PathBeneathAttr {
                        allowed_access: self.inside_access,
                        parent_fd: fd,
                    };
                    let added = libc::syscall(
                        libc::SYS_landlock_add_rule,
                        ruleset,
                        LANDLOCK_RULE_PATH_BENEATH,
                        &raw const attr,
                        0,
                    );
                    libc::close(fd);
                    if added != 0 {
                        return Err(self.fail(Fixed::Landlock as u32));
                    }
                }
                if super::restrict::restrict_child(ruleset).is_err() {
                    return Err(self.fail(Fixed::Landlock as u32));
                }
            }
            let shell = clone(libc::SIGCHLD as c_ulong);
            if shell < 0 {
                return Err(self.fail(Fixed::ForkShell as u32));
            }
            if shell == 0 {
                return Ok(());
            }
            close_all_from(0);
            let data = self.page.data();
            let mut status = 0;
            loop {
                let r = libc::waitpid(-1, &mut status, 0);
                if r == shell {
                    data.shell_status.store(status, Ordering::SeqCst);
                    data.shell_done.store(1, Ordering::SeqCst);
                    break;
                }
                if r < 0 && errno() != libc::EINTR {
                    break;
                }
            }
            // Reap what already ended; whatever still runs is killed as init exits.
            loop {
                let r = libc::waitpid(-1, &mut status, libc::WNOHANG);
                if r > 0 {
                    continue;
                }
                if r == 0 {
                    data.stray.store(1, Ordering::SeqCst);
                }
                break;
            }
            libc::_exit(0)
        }
    }
}

/// fork(2) without glibc's atfork handlers (which may take locks): `clone` with `flags`.
unsafe fn clone(flags: c_ulong) -> libc::pid_t {
    // SAFETY: clone without CLONE_VM and without a new stack behaves like fork; the remaining
    // arguments (tid pointers, tls) are unused and zero on every architecture's order.
    unsafe { libc::syscall(libc::SYS_clone, flags, 0usize, 0usize, 0usize, 0usize) as libc::pid_t }
}

unsafe fn close_all_from(first: u32) {
    // SAFETY: close_range on a range of descriptors; nothing here uses them afterwards.
    unsafe {
        libc::syscall(libc::SYS_close_range, first, u32::MAX, 0);
    }
}

/// `/proc/<pid>/<name>` NUL-terminated in `buffer`, without allocating.
fn proc_path(buffer: &mut [u8; 64], pid: libc::pid_t, name: &[u8]) {
    let mut at = 0;
    let mut put = |bytes: &[u8]| {
        for &b in bytes {
            if at < buffer.len() - 1 {
                buffer[at] = b;
                at += 1;
            }
        }
    };
    put(b"/proc/");
    let mut digits = [0u8; 12];
    let mut n = pid.unsigned_abs();
    let mut len = 0;
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    digits[..len].reverse();
    put(&digits[..len]);
    put(b"/");
    put(name);
    buffer[at] = 0;
}

unsafe fn write_file(path: &[u8; 64], bytes: &[u8]) -> std::io::Result<()> {
    // SAFETY: `path` is NUL-terminated (proc_path); plain system calls.
    unsafe {
        let fd = libc::open(
            path.as_ptr().cast::<c_char>(),
            libc::O_WRONLY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let written = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        let error = std::io::Error::last_os_error();
        libc::close(fd);
        if written != bytes.len() as isize {
            return Err(error);
        }
    }
    Ok(())
}

/// Whether commands can run in the namespaces here: runs `true` in them (with `ruleset`, when
/// given, as a command would). The error names the step that failed.
pub fn probe(ruleset: Option<RawFd>, access: u64) -> Result<(), NamespaceError> {
    let plan = Plan::new(&[], Path::new("/"), &SandboxPolicy::default(), access)?;
    let plan = Arc::new(plan);
    let mut command = std::process::Command::new("/bin/sh");
    command
        .arg("-c")
        .arg("exit 0")
        .current_dir("/")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let child_plan = plan.clone();
    // SAFETY: `enter` is async-signal-safe and made for this place (see its doc).
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut command, move || {
            child_plan.enter(ruleset)
        });
    }
    let spawned = command.status();
    if let Some(failure) = plan.failure() {
        return Err(failure);
    }
    let status = spawned.map_err(|e| NamespaceError::Step {
        step: "starting a command in the namespaces".into(),
        reason: e.to_string(),
    })?;
    match plan.page().shell_status() {
        Some(0) => Ok(()),
        Some(other) => Err(NamespaceError::Step {
            step: "running `sh -c 'exit 0'` in the namespaces".into(),
            reason: format!("it ended with wait status {other}"),
        }),
        None => Err(NamespaceError::Step {
            step: "running `sh -c 'exit 0'` in the namespaces".into(),
            reason: format!("the namespace ended before the shell did ({status})"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_paths_are_formatted_without_allocating() {
        let mut buffer = [0u8; 64];
        proc_path(&mut buffer, 12345, b"uid_map");
        let end = buffer.iter().position(|&b| b == 0).unwrap();
        assert_eq!(&buffer[..end], b"/proc/12345/uid_map");
    }

    #[test]
    fn mounts_are_placed_parents_first_and_after_the_private_tmp() {
        let plan = Plan::new(
            &[
                HostMount {
                    dir: "/tmp/a/b".into(),
                    writable: true,
                },
                HostMount {
                    dir: "/srv".into(),
                    writable: false,
                },
            ],
            Path::new("/srv"),
            &SandboxPolicy::default(),
            0,
        )
        .unwrap();
        let binds: Vec<String> = plan
            .ops
            .iter()
            .filter_map(|op| match op {
                Op::Bind { to, .. } => Some(to.to_string_lossy().into_owned()),
                Op::Tmpfs { to, .. } => Some(format!("tmpfs {}", to.to_string_lossy())),
                _ => None,
            })
            .filter(|s| !s.contains("/dev/"))
            .collect();
        assert_eq!(
            binds,
            [
                "tmpfs /tmp",
                "/newroot",
                "tmpfs /newroot/tmp",
                "tmpfs /newroot/dev",
                "/newroot/srv",
                "/newroot/tmp/a/b"
            ]
        );
    }

    #[test]
    fn limited_reads_bind_only_system_dirs_and_hide_after_the_mounts() {
        let policy = SandboxPolicy {
            hidden: Arc::new(vec!["/usr/share".into()]),
            reads: Some(Arc::new(vec!["/nowhere/at/all".into()])),
        };
        let mounts = [HostMount {
            dir: "/srv".into(),
            writable: true,
        }];
        let plan = Plan::new(&mounts, Path::new("/srv"), &policy, 0).unwrap();
        let position = |wanted: &dyn Fn(&Op) -> bool| plan.ops.iter().position(wanted);
        let bind_to = |target: &'static str| move |op: &Op| matches!(op, Op::Bind { to, .. } if to.as_bytes() == target.as_bytes());
        assert_eq!(
            position(&bind_to("/newroot")),
            None,
            "the host root is not bound"
        );
        assert!(position(&bind_to("/newroot/usr")).is_some());
        assert!(position(&bind_to("/newroot/nowhere/at/all")).is_none());
        let srv = position(&bind_to("/newroot/srv")).unwrap();
        let hide = position(&|op: &Op| {
            matches!(op, Op::Hide { path, dir: true } if path.as_bytes() == b"/newroot/usr/share")
        })
        .unwrap();
        assert!(hide > srv);
        if std::fs::symlink_metadata("/bin").is_ok_and(|m| m.file_type().is_symlink()) {
            assert!(
                position(&|op: &Op| matches!(op, Op::Symlink { link, .. } if link.as_bytes() == b"/newroot/bin"))
                    .is_some()
            );
        }
    }
}
