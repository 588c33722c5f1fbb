//! Attack review of issue 41 (defect 3): a `shell:local` target runs unsandboxed as the server's
//! user, so the server makes itself non-dumpable — its `/proc/<pid>/environ` and memory are not
//! readable by that user's other processes, nor can they ptrace it — and starts a local target's
//! `sh` with `execute`'s minimal environment (no ssh agent, docker socket or secret). The
//! server runs as `nobody` when the tests run as root: root reads any process's files whatever
//! its dumpable flag, so only an unprivileged server makes the test real. `execute`'s sandbox,
//! whose keeper writes its init's id maps through `/proc`, still works for such a server.

use std::os::unix::process::CommandExt;
use std::path::Path;

use serde_json::json;

use crate::support::stdio::{StdioClient, text_of};

/// The uid/gid the server runs as when the tests run as root.
const NOBODY: u32 = 65534;

/// A secret the server is given through its environment.
const SECRET: &str = "mountfs-test-secret-4f2a";

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// A directory `nobody` may use: made under `parent`, handed over when the tests run as root.
fn own_dir(parent: &Path, name: &str) -> std::path::PathBuf {
    let dir = parent.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    if is_root() {
        std::os::unix::fs::chown(&dir, Some(NOBODY), Some(NOBODY)).unwrap();
    }
    dir
}

/// A server as `nobody` (when root) with `args`, its environment holding [`SECRET`], an ssh
/// agent socket and a docker host.
fn server(work: &Path, args: &[&str]) -> StdioClient {
    let home = own_dir(work, "home");
    let mut command = crate::support::mountfs_command(
        Path::new("/"),
        args,
        &[("HOME", &home), ("XDG_DATA_HOME", &home)],
    );
    command
        .env("MOUNTFS_TEST_SECRET", SECRET)
        .env("PGPASSWORD", SECRET)
        .env("SSH_AUTH_SOCK", "/tmp/ssh-agent-of-the-operator")
        .env("DOCKER_HOST", "unix:///run/docker-of-the-operator.sock");
    if is_root() {
        command.uid(NOBODY).gid(NOBODY);
    }
    let mut client = StdioClient::spawn_command(command);
    client.handshake();
    client
}

fn tempdir() -> tempfile::TempDir {
    let work = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        work.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    work
}

#[test]
fn a_local_target_reads_neither_the_servers_environment_nor_its_secrets() {
    let work = tempdir();
    let target = own_dir(work.path(), "target");
    let mount = format!("/box/=shell:local:{}", target.display());
    let mut client = server(
        work.path(),
        &[
            "--allow-exec=unsandboxed",
            "--shell",
            "local=sh",
            "--mount",
            &mount,
            "--mount",
            "/=memory",
            "--audit",
            "off",
        ],
    );
    let pid = client.pid();
    let command = format!(
        "echo uid=$(id -u); env; tr '\\0' '\\n' < /proc/{pid}/environ && echo ENVIRON-READ; \
         head -c 16 /proc/{pid}/mem >/dev/null 2>&1 && echo MEM-READ; echo done"
    );
    let answer = client.call("execute", json!({"command": command, "cwd": "/box"}));
    let text = text_of(&answer);
    assert!(text.contains("done"), "{text}");
    if is_root() {
        assert!(text.contains(&format!("uid={NOBODY}")), "{text}");
    }
    assert!(
        !text.contains(SECRET),
        "the server's secret reached the target: {text}"
    );
    assert!(!text.contains("ENVIRON-READ"), "{text}");
    assert!(!text.contains("MEM-READ"), "{text}");
    assert!(!text.contains("SSH_AUTH_SOCK"), "{text}");
    assert!(!text.contains("DOCKER_HOST"), "{text}");
    assert!(text.contains("PATH="), "the minimal environment: {text}");
    client.close();
}

#[test]
fn the_execute_sandbox_works_for_a_non_dumpable_unprivileged_server() {
    let nobody_namespaces = !is_root()
        || std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .args([
                "unshare",
                "--user",
                "--map-root-user",
                "--mount",
                "--pid",
                "--fork",
                "true",
            ])
            .status()
            .is_ok_and(|s| s.success());
    if !nobody_namespaces || mountfs::storage::exec::sandbox::probe().is_err() {
        crate::skips::record(
            "the execute sandbox of a non-dumpable server",
            "needs unprivileged user namespaces and Landlock",
        );
        return;
    }
    let work = tempdir();
    let project = own_dir(work.path(), "project");
    let mount = format!("/=disk:{}", project.display());
    let mut client = server(
        work.path(),
        &["--allow-exec", "--mount", &mount, "--audit", "off"],
    );
    let answer = client.call(
        "execute",
        json!({"command": "echo made > made.txt; cat /proc/1/environ; echo uid=$(id -u)"}),
    );
    let text = text_of(&answer);
    assert!(
        std::fs::read_to_string(project.join("made.txt")).is_ok_and(|t| t == "made\n"),
        "{text}\n{}",
        client.stderr()
    );
    assert!(!text.contains(SECRET), "{text}");
    client.close();
}
