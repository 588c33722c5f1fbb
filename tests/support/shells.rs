//! Targets for shell mounts (issue 27), made per test: a local `sh`, a busybox-only `sh` (its
//! PATH holds only busybox's applets: no GNU tools, no `rg`, no python3), and a real OpenSSH
//! server on 127.0.0.1 with host and client keys made for the run and a `known_hosts` that is
//! checked strictly. A target whose tools are missing here is skipped with a visible line
//! ([`super::skips`]), unless `MOUNTFS_REQUIRE_SHELL_TARGETS=1` (set by `.ci/run`): then the
//! test fails, naming the package to install, so CI cannot pass without these targets.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use mountfs::storage::backend::ShellBackend;

/// Where busybox is expected (the Debian package's path).
pub const BUSYBOX: &str = "/usr/bin/busybox";
/// Where the OpenSSH server is expected (the Debian package's path).
pub const SSHD: &str = "/usr/sbin/sshd";

/// A target's directory and whatever keeps the target alive; dropping it stops both.
pub struct Target {
    /// The mount's directory (on this machine: every target here is local).
    pub dir: tempfile::TempDir,
    /// The command that reaches the target.
    pub command: Vec<String>,
    _server: Option<SshServer>,
}

impl Target {
    /// A backend over the target's directory.
    pub fn backend(&self) -> Arc<ShellBackend> {
        Arc::new(ShellBackend::new(
            "test",
            self.command.clone(),
            self.dir.path().to_str().expect("UTF-8 temporary path"),
        ))
    }
}

/// The switch that turns a missing target into a failure (`.ci/run` sets it).
pub const REQUIRE: &str = "MOUNTFS_REQUIRE_SHELL_TARGETS";

/// Whether [`REQUIRE`] is set (to anything but `0` or nothing).
pub fn required() -> bool {
    std::env::var(REQUIRE).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// A target `group` needs is missing for `reason` (which names the package): the test fails
/// when [`REQUIRE`] is set, else it is recorded as skipped ([`super::skips`]).
fn missing(group: &str, reason: &str) {
    assert!(
        !required(),
        "{group}: {reason}; {REQUIRE} is set, so a missing shell target fails the test instead of skipping it"
    );
    super::skips::record(group, reason);
}

/// `sh` on this machine (searching with `rg` when it is on the PATH; with [`REQUIRE`] set it
/// must be, so the "sh with rg" target is not silently a grep one).
pub fn local() -> Target {
    assert!(
        !required() || which("rg").is_some(),
        "no rg on the PATH (apt-get install -y ripgrep, as .ci/run does); {REQUIRE} is set, so the sh-with-rg target must be there"
    );
    Target {
        dir: tempfile::tempdir().expect("temporary directory"),
        command: vec!["sh".to_owned()],
        _server: None,
    }
}

/// busybox's `sh` with a PATH of busybox applets only; `None` (recorded as skipped) without
/// busybox.
pub fn busybox(group: &str) -> Option<Target> {
    let bin = busybox_bin().as_ref().map_err(|reason| {
        missing(group, reason);
    });
    let bin = bin.ok()?;
    Some(Target {
        dir: tempfile::tempdir().expect("temporary directory"),
        command: vec![
            "/usr/bin/env".to_owned(),
            "-i".to_owned(),
            format!("PATH={}", bin.display()),
            BUSYBOX.to_owned(),
            "sh".to_owned(),
        ],
        _server: None,
    })
}

/// Like [`busybox`], without the tools a shell mount only uses when present (`stat`,
/// `readlink`, `mktemp`): the fallbacks of the opening script.
pub fn busybox_minimal(group: &str) -> Option<Target> {
    let bin = busybox_minimal_bin().as_ref().map_err(|reason| {
        missing(group, reason);
    });
    let bin = bin.ok()?;
    Some(Target {
        dir: tempfile::tempdir().expect("temporary directory"),
        command: vec![
            "/usr/bin/env".to_owned(),
            "-i".to_owned(),
            format!("PATH={}", bin.display()),
            BUSYBOX.to_owned(),
            "sh".to_owned(),
        ],
        _server: None,
    })
}

fn busybox_minimal_bin() -> &'static Result<PathBuf, String> {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BIN.get_or_init(|| busybox_bin_without(&["stat", "readlink", "mktemp", "realpath"]))
}

/// Like [`busybox`], with a `grep` that refuses `-a` (as a grep without it would): a regex
/// search then finds the files holding a NUL past their first 8 KiB with `tr`.
pub fn busybox_grep_without_a(group: &str) -> Option<Target> {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let bin = BIN.get_or_init(|| {
        let dir = busybox_bin_without(&["grep"])?;
        let script = format!(
            "#!{BUSYBOX} sh\nfor a; do [ \"$a\" = -a ] && exit 2; done\nexec {BUSYBOX} grep \"$@\"\n"
        );
        let grep = dir.join("grep");
        std::fs::write(&grep, script).map_err(|e| e.to_string())?;
        std::fs::set_permissions(&grep, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .map_err(|e| e.to_string())?;
        Ok(dir)
    });
    let bin = bin.as_ref().map_err(|reason| {
        missing(group, reason);
    });
    let bin = bin.ok()?;
    Some(Target {
        dir: tempfile::tempdir().expect("temporary directory"),
        command: vec![
            "/usr/bin/env".to_owned(),
            "-i".to_owned(),
            format!("PATH={}", bin.display()),
            BUSYBOX.to_owned(),
            "sh".to_owned(),
        ],
        _server: None,
    })
}

/// Like [`busybox`], with a `dd` that refuses `iflag=fullblock` (as older ones do): payloads
/// are then copied one byte per `read`.
pub fn busybox_without_fullblock(group: &str) -> Option<Target> {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let bin = BIN.get_or_init(|| {
        let dir = busybox_bin_without(&["dd"])?;
        let script = format!(
            "#!{BUSYBOX} sh\nfor a; do case $a in iflag=*) echo \"dd: unknown flag $a\" >&2; exit 1;; esac; done\nexec {BUSYBOX} dd \"$@\"\n"
        );
        let dd = dir.join("dd");
        std::fs::write(&dd, script).map_err(|e| e.to_string())?;
        std::fs::set_permissions(&dd, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .map_err(|e| e.to_string())?;
        Ok(dir)
    });
    let bin = bin.as_ref().map_err(|reason| {
        missing(group, reason);
    });
    let bin = bin.ok()?;
    Some(Target {
        dir: tempfile::tempdir().expect("temporary directory"),
        command: vec![
            "/usr/bin/env".to_owned(),
            "-i".to_owned(),
            format!("PATH={}", bin.display()),
            BUSYBOX.to_owned(),
            "sh".to_owned(),
        ],
        _server: None,
    })
}

/// Like [`busybox`], without `setsid`: `execute` cannot give the command a process group of
/// its own there (busybox `sh` has no job control without a terminal), so a stop must find
/// the command's children another way.
pub fn busybox_without_setsid(group: &str) -> Option<Target> {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let bin = BIN.get_or_init(|| busybox_bin_without(&["setsid"]));
    let bin = bin.as_ref().map_err(|reason| {
        missing(group, reason);
    });
    let bin = bin.ok()?;
    Some(Target {
        dir: tempfile::tempdir().expect("temporary directory"),
        command: vec![
            "/usr/bin/env".to_owned(),
            "-i".to_owned(),
            format!("PATH={}", bin.display()),
            BUSYBOX.to_owned(),
            "sh".to_owned(),
        ],
        _server: None,
    })
}

/// `sh` on this machine with its GNU tools but without `rg` on the PATH: searches are narrowed
/// by GNU `grep -F`; `None` (recorded as skipped) when the PATH cannot be made.
pub fn without_rg(group: &str) -> Option<Target> {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let bin = BIN
        .get_or_init(tools_without_rg)
        .as_ref()
        .map_err(|reason| {
            missing(group, reason);
        });
    let bin = bin.ok()?;
    Some(Target {
        dir: tempfile::tempdir().expect("temporary directory"),
        command: vec![
            "/usr/bin/env".to_owned(),
            format!("PATH={}", bin.display()),
            "sh".to_owned(),
        ],
        _server: None,
    })
}

/// A directory of links to every program of `/usr/bin` and `/bin` but `rg`.
fn tools_without_rg() -> Result<PathBuf, String> {
    let dir = tempfile::Builder::new()
        .prefix("mountfs-no-rg-")
        .tempdir()
        .map_err(|e| e.to_string())?
        .keep();
    for from in ["/usr/bin", "/bin"] {
        let Ok(entries) = std::fs::read_dir(from) else {
            continue;
        };
        for entry in entries {
            let entry = entry.map_err(|e| e.to_string())?;
            let name = entry.file_name();
            if name == "rg" || dir.join(&name).symlink_metadata().is_ok() {
                continue;
            }
            std::os::unix::fs::symlink(entry.path(), dir.join(&name)).map_err(|e| e.to_string())?;
        }
    }
    Ok(dir)
}

/// A directory of busybox applet links without the applets `left_out`.
fn busybox_bin_without(left_out: &[&str]) -> Result<PathBuf, String> {
    let full = busybox_bin().as_ref().map_err(Clone::clone)?;
    let dir = tempfile::Builder::new()
        .prefix("mountfs-busybox-min-")
        .tempdir()
        .map_err(|e| e.to_string())?
        .keep();
    for entry in std::fs::read_dir(full).map_err(|e| e.to_string())? {
        let entry = entry.map_err(|e| e.to_string())?;
        let name = entry.file_name();
        if left_out.iter().any(|left_out| name == *left_out) {
            continue;
        }
        std::os::unix::fs::symlink(BUSYBOX, dir.join(&name)).map_err(|e| e.to_string())?;
    }
    Ok(dir)
}

/// The directory of busybox applet links, made once per test binary.
fn busybox_bin() -> &'static Result<PathBuf, String> {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BIN.get_or_init(|| {
        if !Path::new(BUSYBOX).exists() {
            return Err(format!(
                "no {BUSYBOX} (apt-get install -y busybox, as .ci/run does)"
            ));
        }
        let dir = tempfile::Builder::new()
            .prefix("mountfs-busybox-")
            .tempdir()
            .map_err(|e| e.to_string())?
            .keep();
        let status = Command::new(BUSYBOX)
            .arg("--install")
            .arg("-s")
            .arg(&dir)
            .status()
            .map_err(|e| e.to_string())?;
        if !status.success() {
            return Err(format!("busybox --install -s failed: {status}"));
        }
        Ok(dir)
    })
}

/// A real OpenSSH server on 127.0.0.1 with keys made for this test, and `ssh -T … sh` as the
/// command; `None` (recorded as skipped) without sshd or ssh.
pub fn ssh(group: &str) -> Option<Target> {
    match SshServer::start() {
        Ok(server) => {
            let command = server.command();
            Some(Target {
                dir: tempfile::tempdir().expect("temporary directory"),
                command,
                _server: Some(server),
            })
        }
        Err(reason) => {
            missing(group, &reason);
            None
        }
    }
}

/// A running `sshd -D` and its files.
pub struct SshServer {
    child: Child,
    pub port: u16,
    pub files: tempfile::TempDir,
    user: String,
}

impl Drop for SshServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn run(command: &mut Command) -> Result<(), String> {
    let output = command
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{command:?}: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{command:?}: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

impl SshServer {
    /// Starts a server on a free port of 127.0.0.1.
    pub fn start() -> Result<Self, String> {
        if !Path::new(SSHD).exists() || which("ssh").is_none() || which("ssh-keygen").is_none() {
            return Err(format!(
                "no {SSHD}, ssh or ssh-keygen (apt-get install -y openssh-server openssh-client, as .ci/run does)"
            ));
        }
        let files = tempfile::Builder::new()
            .prefix("mountfs-sshd-")
            .tempdir()
            .map_err(|e| e.to_string())?;
        let at = |name: &str| files.path().join(name);
        for key in ["host_key", "client_key"] {
            run(Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-f"])
                .arg(at(key)))?;
        }
        std::fs::copy(at("client_key.pub"), at("authorized_keys")).map_err(|e| e.to_string())?;
        // sshd run by root needs its privilege-separation directory.
        if rustix::process::geteuid().is_root() {
            let _ = std::fs::create_dir_all("/run/sshd");
        }
        let port = free_port()?;
        let user = whoami()?;
        let config = format!(
            "ListenAddress 127.0.0.1\nHostKey {}\nAuthorizedKeysFile {}\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\nUsePAM no\nStrictModes no\nPermitRootLogin prohibit-password\nPidFile {}\nMaxSessions 64\nMaxStartups 64\n",
            at("host_key").display(),
            at("authorized_keys").display(),
            at("sshd.pid").display(),
        );
        std::fs::write(at("sshd_config"), config).map_err(|e| e.to_string())?;
        let host_key = std::fs::read_to_string(at("host_key.pub")).map_err(|e| e.to_string())?;
        std::fs::write(
            at("known_hosts"),
            format!("[127.0.0.1]:{port} {}", host_key.trim()),
        )
        .map_err(|e| e.to_string())?;
        let child = Command::new(SSHD)
            .arg("-D")
            .arg("-e")
            .arg("-f")
            .arg(at("sshd_config"))
            .arg("-p")
            .arg(port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("{SSHD}: {e}"))?;
        let server = Self {
            child,
            port,
            files,
            user,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                return Err(format!("{SSHD} did not listen on 127.0.0.1:{port}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(server)
    }

    /// `ssh` to this server running `remote` (words), host key checked strictly.
    pub fn ssh_command(&self, remote: &[&str]) -> Vec<String> {
        let at = |name: &str| self.files.path().join(name).display().to_string();
        let mut words: Vec<String> = vec![
            "ssh".into(),
            "-T".into(),
            "-i".into(),
            at("client_key"),
            "-o".into(),
            "IdentitiesOnly=yes".into(),
            "-o".into(),
            format!("UserKnownHostsFile={}", at("known_hosts")),
            "-o".into(),
            "StrictHostKeyChecking=yes".into(),
            "-o".into(),
            "BatchMode=yes".into(),
            "-o".into(),
            "LogLevel=ERROR".into(),
            "-F".into(),
            "/dev/null".into(),
            "-p".into(),
            self.port.to_string(),
            format!("{}@127.0.0.1", self.user),
        ];
        words.extend(remote.iter().map(|w| (*w).to_owned()));
        words
    }

    /// The shell mount's command: `ssh … sh`.
    pub fn command(&self) -> Vec<String> {
        self.ssh_command(&["sh"])
    }
}

fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|candidate| candidate.is_file())
    })
}

fn free_port() -> Result<u16, String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(listener.local_addr().map_err(|e| e.to_string())?.port())
}

fn whoami() -> Result<String, String> {
    let output = Command::new("id")
        .arg("-un")
        .output()
        .map_err(|e| e.to_string())?;
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}
