//! The new root a command's init builds (see the parent module): what the sandbox shows and
//! hides ([`SandboxPolicy`], [`HostMount`]), the steps ([`Op`]) a `Plan` lists, placed parents
//! first, and the system calls each step makes between fork and exec.

use std::ffi::{CString, c_char, c_int, c_ulong};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

/// System directories a command may read when reads are limited (`--http` with several
/// principals): what a build needs. Those missing on the host are skipped; symbolic links
/// (`/bin` -> `usr/bin`) are recreated as links.
pub const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt",
];

/// Device files bound into the command's `/dev` (a tmpfs; nothing else is there).
const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

/// What the sandbox must hide or limit, beyond the mounts of the session.
#[derive(Debug, Clone, Default)]
pub struct SandboxPolicy {
    /// Host paths a command must not see (the server's data directory, token file, audit log,
    /// store databases): covered by an empty read-only directory or file.
    pub hidden: Arc<Vec<PathBuf>>,
    /// When set, a command sees only [`SYSTEM_DIRS`], these directories (`--exec-read`) and
    /// the mounts; when `None` it sees the whole host, read-only.
    pub reads: Option<Arc<Vec<PathBuf>>>,
}

impl SandboxPolicy {
    /// Whether reads are limited (see [`SandboxPolicy::reads`]).
    pub fn limits_reads(&self) -> bool {
        self.reads.is_some()
    }
}

/// One disk mount a command sees at its real path.
#[derive(Debug, Clone)]
pub struct HostMount {
    /// The real directory.
    pub dir: PathBuf,
    /// Whether the command may write in it.
    pub writable: bool,
}

// Mount attributes of mount_setattr(2) (linux/mount.h); libc has the call's number only.
pub(super) const MOUNT_ATTR_RDONLY: u64 = 0x1;
pub(super) const MOUNT_ATTR_NOSUID: u64 = 0x2;
pub(super) const MOUNT_ATTR_NODEV: u64 = 0x4;
const MOUNT_ATTR_NOEXEC: u64 = 0x8;
const AT_RECURSIVE: c_int = 0x8000;

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// One step of building the command's root, run by init.
#[derive(Debug)]
pub(super) enum Op {
    /// Stop mount events from propagating to the host (`MS_REC|MS_PRIVATE`).
    MakePrivate(CString),
    /// A tmpfs with these flags and data.
    Tmpfs {
        to: CString,
        flags: c_ulong,
        data: CString,
    },
    /// A directory (an existing one is fine).
    Mkdir(CString),
    /// An empty file as a mount point (an existing one is fine).
    Touch(CString),
    /// A symbolic link.
    Symlink {
        target: CString,
        link: CString,
    },
    /// A bind mount.
    Bind {
        from: CString,
        to: CString,
        recursive: bool,
    },
    /// Mount attributes added (never removed: a user namespace may only add them).
    Attr {
        path: CString,
        set: u64,
        recursive: bool,
    },
    /// A fresh proc for the new PID namespace.
    Proc(CString),
    /// Cover a host path of the server's, if the command could see it (a directory by an empty
    /// read-only tmpfs, a file by `/dev/null` read-only).
    Hide {
        path: CString,
        dir: bool,
    },
    Chdir(CString),
    PivotRoot {
        new: CString,
        old: CString,
    },
    /// `umount2(MNT_DETACH)`.
    Detach(CString),
}

impl Op {
    /// What the step does, for an error message.
    pub(super) fn describe(&self) -> String {
        let s = |c: &CString| c.to_string_lossy().into_owned();
        match self {
            Op::MakePrivate(p) => format!("making the mounts of {} private", s(p)),
            Op::Tmpfs { to, .. } => format!("mounting a tmpfs on {}", s(to)),
            Op::Mkdir(p) => format!("creating the directory {}", s(p)),
            Op::Touch(p) => format!("creating the mount point {}", s(p)),
            Op::Symlink { link, .. } => format!("creating the link {}", s(link)),
            Op::Bind { from, to, .. } => format!("bind-mounting {} on {}", s(from), s(to)),
            Op::Attr { path, .. } => format!("making {} read-only/nodev/nosuid", s(path)),
            Op::Proc(p) => format!("mounting a new /proc on {}", s(p)),
            Op::Hide { path, .. } => format!("hiding {}", s(path)),
            Op::Chdir(p) => format!("changing directory to {}", s(p)),
            Op::PivotRoot { new, .. } => format!("pivot_root to {}", s(new)),
            Op::Detach(p) => format!("unmounting {}", s(p)),
        }
    }
}

/// Why the namespaces could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum NamespaceError {
    /// A path holds a NUL byte.
    #[error("the path {0} holds a NUL byte")]
    Nul(String),
    /// The shared page could not be mapped.
    #[error("cannot map the sandbox's shared page: {0}")]
    Page(std::io::Error),
    /// A step of the set-up failed in the child.
    #[error("{step} failed: {reason}")]
    Step {
        /// Which step.
        step: String,
        /// The system's error.
        reason: String,
    },
}

pub(super) fn cstring(path: &Path) -> Result<CString, NamespaceError> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| NamespaceError::Nul(path.display().to_string()))
}

/// `root` + the absolute `path`.
pub(super) fn under(root: &str, path: &Path) -> PathBuf {
    let mut joined = PathBuf::from(root);
    for component in path.components() {
        if let Component::Normal(name) = component {
            joined.push(name);
        }
    }
    joined
}

pub(super) fn depth(path: &Path) -> usize {
    path.components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .count()
}

/// What is placed in the new root, in the order of depth (a parent before what is inside).
#[derive(Debug)]
pub(super) enum Placement {
    ReadOnlyDir(PathBuf),
    Link { path: PathBuf, target: PathBuf },
    Mount(HostMount),
    Tmp,
    Dev,
    Proc,
}

impl Placement {
    pub(super) fn path(&self) -> &Path {
        match self {
            Placement::ReadOnlyDir(p) | Placement::Link { path: p, .. } => p,
            Placement::Mount(m) => &m.dir,
            Placement::Tmp => Path::new("/tmp"),
            Placement::Dev => Path::new("/dev"),
            Placement::Proc => Path::new("/proc"),
        }
    }
}

pub(super) struct Builder {
    pub(super) ops: Vec<Op>,
}

impl Builder {
    pub(super) fn push(&mut self, op: Op) {
        self.ops.push(op);
    }

    /// Every directory from `/newroot` down to `path` (inside the new root).
    fn mkdirs(&mut self, path: &Path) -> Result<(), NamespaceError> {
        let mut dir = PathBuf::from("/newroot");
        for component in path.components() {
            if let Component::Normal(name) = component {
                dir.push(name);
                self.ops.push(Op::Mkdir(cstring(&dir)?));
            }
        }
        Ok(())
    }

    fn bind(&mut self, host: &Path, attrs: u64) -> Result<(), NamespaceError> {
        self.mkdirs(host)?;
        let to = cstring(&under("/newroot", host))?;
        self.push(Op::Bind {
            from: cstring(&under("/oldroot", host))?,
            to: to.clone(),
            recursive: true,
        });
        self.push(Op::Attr {
            path: to,
            set: attrs,
            recursive: true,
        });
        Ok(())
    }

    pub(super) fn place(&mut self, placement: &Placement) -> Result<(), NamespaceError> {
        let c = |s: &str| CString::new(s).map_err(|_| NamespaceError::Nul(s.to_owned()));
        match placement {
            Placement::ReadOnlyDir(dir) => {
                self.bind(
                    dir,
                    MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
                )?;
            }
            Placement::Link { path, target } => self.push(Op::Symlink {
                target: cstring(target)?,
                link: cstring(&under("/newroot", path))?,
            }),
            Placement::Mount(mount) => {
                let mut attrs = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
                if !mount.writable {
                    attrs |= MOUNT_ATTR_RDONLY;
                }
                self.bind(&mount.dir, attrs)?;
            }
            Placement::Tmp => {
                self.push(Op::Mkdir(c("/newroot/tmp")?));
                self.push(Op::Tmpfs {
                    to: c("/newroot/tmp")?,
                    flags: libc::MS_NOSUID | libc::MS_NODEV,
                    data: c("mode=1777")?,
                });
            }
            Placement::Dev => {
                self.push(Op::Mkdir(c("/newroot/dev")?));
                self.push(Op::Tmpfs {
                    to: c("/newroot/dev")?,
                    flags: libc::MS_NOSUID | libc::MS_NOEXEC,
                    data: c("mode=0755")?,
                });
                for device in DEVICES {
                    if !Path::new("/dev").join(device).exists() {
                        continue;
                    }
                    let to = c(&format!("/newroot/dev/{device}"))?;
                    self.push(Op::Touch(to.clone()));
                    self.push(Op::Bind {
                        from: c(&format!("/oldroot/dev/{device}"))?,
                        to: to.clone(),
                        recursive: false,
                    });
                    self.push(Op::Attr {
                        path: to,
                        set: MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC,
                        recursive: false,
                    });
                }
                for (link, target) in [
                    ("fd", "/proc/self/fd"),
                    ("stdin", "/proc/self/fd/0"),
                    ("stdout", "/proc/self/fd/1"),
                    ("stderr", "/proc/self/fd/2"),
                ] {
                    self.push(Op::Symlink {
                        target: c(target)?,
                        link: c(&format!("/newroot/dev/{link}"))?,
                    });
                }
                self.push(Op::Mkdir(c("/newroot/dev/shm")?));
                self.push(Op::Tmpfs {
                    to: c("/newroot/dev/shm")?,
                    flags: libc::MS_NOSUID | libc::MS_NODEV,
                    data: c("mode=1777")?,
                });
                // No file may be created in /dev itself.
                self.push(Op::Attr {
                    path: c("/newroot/dev")?,
                    set: MOUNT_ATTR_RDONLY,
                    recursive: false,
                });
            }
            Placement::Proc => {
                self.push(Op::Mkdir(c("/newroot/proc")?));
                self.push(Op::Proc(c("/newroot/proc")?));
            }
        }
        Ok(())
    }
}

pub(super) fn errno() -> c_int {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Runs one step; 0 on success, -1 with errno set.
pub(super) unsafe fn run(op: &Op) -> c_int {
    let null = std::ptr::null::<c_char>();
    // SAFETY: plain system calls on NUL-terminated strings owned by `op`.
    unsafe {
        match op {
            Op::MakePrivate(path) => libc::mount(
                null,
                path.as_ptr(),
                null,
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ),
            Op::Tmpfs { to, flags, data } => libc::mount(
                c"tmpfs".as_ptr(),
                to.as_ptr(),
                c"tmpfs".as_ptr(),
                *flags,
                data.as_ptr().cast(),
            ),
            Op::Mkdir(path) => {
                if libc::mkdir(path.as_ptr(), 0o755) == 0 || errno() == libc::EEXIST {
                    0
                } else {
                    -1
                }
            }
            Op::Touch(path) => {
                let fd = libc::open(
                    path.as_ptr(),
                    libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                    0o644,
                );
                if fd < 0 {
                    return -1;
                }
                libc::close(fd);
                0
            }
            Op::Symlink { target, link } => {
                if libc::symlink(target.as_ptr(), link.as_ptr()) == 0 || errno() == libc::EEXIST {
                    0
                } else {
                    -1
                }
            }
            Op::Bind {
                from,
                to,
                recursive,
            } => {
                let mut flags = libc::MS_BIND;
                if *recursive {
                    flags |= libc::MS_REC;
                }
                libc::mount(from.as_ptr(), to.as_ptr(), null, flags, std::ptr::null())
            }
            Op::Attr {
                path,
                set,
                recursive,
            } => set_attr(path, *set, *recursive),
            Op::Proc(path) => libc::mount(
                c"proc".as_ptr(),
                path.as_ptr(),
                c"proc".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                std::ptr::null(),
            ),
            Op::Hide { path, dir } => {
                // Only what the command could see: a path not in the new root needs nothing.
                if libc::faccessat(libc::AT_FDCWD, path.as_ptr(), libc::F_OK, 0) != 0 {
                    return 0;
                }
                if *dir {
                    let flags =
                        libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
                    libc::mount(
                        c"tmpfs".as_ptr(),
                        path.as_ptr(),
                        c"tmpfs".as_ptr(),
                        flags,
                        c"mode=0755".as_ptr().cast(),
                    )
                } else {
                    if libc::mount(
                        c"/oldroot/dev/null".as_ptr(),
                        path.as_ptr(),
                        null,
                        libc::MS_BIND,
                        std::ptr::null(),
                    ) != 0
                    {
                        return -1;
                    }
                    set_attr(path, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOEXEC, false)
                }
            }
            Op::Chdir(path) => libc::chdir(path.as_ptr()),
            Op::PivotRoot { new, old } => {
                libc::syscall(libc::SYS_pivot_root, new.as_ptr(), old.as_ptr()) as c_int
            }
            Op::Detach(path) => libc::umount2(path.as_ptr(), libc::MNT_DETACH),
        }
    }
}

unsafe fn set_attr(path: &CString, set: u64, recursive: bool) -> c_int {
    let attr = MountAttr {
        attr_set: set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    let flags = if recursive { AT_RECURSIVE } else { 0 };
    // SAFETY: mount_setattr on a NUL-terminated path and a struct on the stack.
    unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            path.as_ptr(),
            flags,
            &raw const attr,
            std::mem::size_of::<MountAttr>(),
        ) as c_int
    }
}
