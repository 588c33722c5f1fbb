//! What a command of `execute` runs in: the shell (seed 004 `detect_shell`) and its
//! environment — a minimal one (issue 41): from the server's own environment only the names of
//! [`PASSED`] and `LC_*`, then the non-interactive variables (seed 004
//! `get_non_interactive_env`), then what the operator names with `--exec-env`. The server's
//! credentials (`PGPASSWORD`, `AWS_SECRET_ACCESS_KEY`, `DATABASE_URL`, its bearer token...)
//! never reach a command unless the operator names them.
//!
//! Owns no process handling (see `exec/mod.rs`) and no sandbox (see `exec/sandbox.rs`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use thiserror::Error;

/// The shell used when `$SHELL` is not one we know to take `-c` the POSIX way.
pub const FALLBACK_SHELL: &str = "/bin/sh";

/// Shells `$SHELL` may name (by file name) to be used as it is.
const KNOWN_SHELLS: &[&str] = &["bash", "zsh", "sh"];

/// Variables set for every command so that nothing waits for a person: no pager, no editor, no
/// terminal prompt, no colour codes in the output the agent reads.
pub const NON_INTERACTIVE: &[(&str, &str)] = &[
    ("PAGER", "cat"),
    ("GIT_PAGER", "cat"),
    ("MANPAGER", "cat"),
    ("SYSTEMD_PAGER", ""),
    ("GIT_TERMINAL_PROMPT", "0"),
    ("GIT_EDITOR", "true"),
    ("EDITOR", "true"),
    ("VISUAL", "true"),
    ("DEBIAN_FRONTEND", "noninteractive"),
    ("NO_COLOR", "1"),
    ("TERM", "dumb"),
    ("CI", "1"),
];

/// Variables of the server's own environment every command gets (when the server has them):
/// where programs are, who and where the user is, the locale and time zone. `TERM` is then set
/// to `dumb` by [`NON_INTERACTIVE`].
pub const PASSED: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TERM",
];

/// Prefixes of variables of the server's environment every command gets too (the locale's
/// categories).
pub const PASSED_PREFIXES: &[&str] = &["LC_"];

/// `PATH` for commands when the server has none.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Variables a command never gets, not even through `--exec-env`: secrets meant for the server
/// (the HTTP bearer token).
pub const WITHHELD: &[&str] = &[crate::ground::config::TOKEN_ENV];

/// One `--exec-env` item: `NAME` passes the server's value of `NAME` (nothing when it has
/// none), `NAME=VALUE` sets it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtraVar {
    /// The variable's name.
    pub name: String,
    /// The value set; `None`: the server's own.
    pub value: Option<String>,
}

/// Why an `--exec-env` item was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ExtraVarError {
    /// Not `NAME` or `NAME=VALUE` with a name of letters, digits and `_`.
    #[error(
        "--exec-env '{0}': give NAME or NAME=VALUE, NAME made of letters, digits and '_' and not starting with a digit (e.g. --exec-env CARGO_HOME or --exec-env RUST_LOG=info)"
    )]
    Name(String),
    /// A variable that is never passed.
    #[error(
        "--exec-env {0}: this is the server's own bearer token, never passed to commands; remove it"
    )]
    Withheld(String),
}

impl std::str::FromStr for ExtraVar {
    type Err = ExtraVarError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (name, value) = match text.split_once('=') {
            Some((name, value)) => (name, Some(value.to_owned())),
            None => (text, None),
        };
        let valid = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid || value.as_deref().is_some_and(|v| v.contains('\0')) {
            return Err(ExtraVarError::Name(text.to_owned()));
        }
        if WITHHELD.contains(&name) {
            return Err(ExtraVarError::Withheld(name.to_owned()));
        }
        Ok(Self {
            name: name.to_owned(),
            value,
        })
    }
}

/// The operator's `--exec-env` items, set once at start ([`set_extra`]).
static EXTRA: OnceLock<Vec<ExtraVar>> = OnceLock::new();

/// Commands get `extra` (`--exec-env`) from now on; only the first call counts. Set by the
/// binary before it serves: one process serves one operator's choice.
pub fn set_extra(extra: Vec<ExtraVar>) {
    let _ = EXTRA.set(extra);
}

/// The operator's `--exec-env` items ([`set_extra`]); none until set.
pub fn extra() -> &'static [ExtraVar] {
    EXTRA.get().map_or(&[], Vec::as_slice)
}

/// Whether the server's variable `name` is passed to commands by default.
fn passed(name: &str) -> bool {
    PASSED.contains(&name) || PASSED_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// The environment a command starts with, from the server's environment `server`: the names of
/// [`PASSED`] and [`PASSED_PREFIXES`], `PATH` ([`DEFAULT_PATH`] when the server has none), then
/// [`NON_INTERACTIVE`], then `extra` (`--exec-env`, a later item winning). Never a name of
/// [`WITHHELD`]. `TMPDIR` and `PWD` are the caller's to add.
pub fn command_environment(
    server: impl IntoIterator<Item = (OsString, OsString)>,
    extra: &[ExtraVar],
) -> Vec<(OsString, OsString)> {
    let server: Vec<(OsString, OsString)> = server.into_iter().collect();
    let mut env: std::collections::BTreeMap<OsString, OsString> = server
        .iter()
        .filter(|(name, _)| name.to_str().is_some_and(passed))
        .cloned()
        .collect();
    env.entry("PATH".into())
        .or_insert_with(|| DEFAULT_PATH.into());
    for (name, value) in NON_INTERACTIVE {
        env.insert((*name).into(), (*value).into());
    }
    for var in extra {
        let value = match &var.value {
            Some(value) => Some(OsString::from(value)),
            None => server
                .iter()
                .find(|(name, _)| name.to_str() == Some(var.name.as_str()))
                .map(|(_, value)| value.clone()),
        };
        if let Some(value) = value {
            env.insert(var.name.clone().into(), value);
        }
    }
    for name in WITHHELD {
        env.remove(std::ffi::OsStr::new(name));
    }
    env.into_iter().collect()
}

/// [`command_environment`] of this server's environment and `--exec-env`.
pub fn for_commands() -> Vec<(OsString, OsString)> {
    command_environment(std::env::vars_os(), extra())
}

/// Variables of the server's environment the client that reaches a shell mount's target
/// (`--shell NAME=COMMAND` starting one of [`LAUNCHERS`]: ssh, docker, kubectl...) gets beside
/// [`for_commands`]'s: how it finds its agent, daemon or configuration. These clients pass none
/// of their environment to the shell they start there (ssh only what the target's sshd
/// accepts), so the agent socket stays with the client. Nothing else of the server's.
pub const LAUNCHER_PASSED: &[&str] = &[
    "SSH_AUTH_SOCK",
    "SSH_AGENT_PID",
    "KUBECONFIG",
    "DOCKER_HOST",
    "DOCKER_CONTEXT",
    "DOCKER_CONFIG",
    "DOCKER_CERT_PATH",
    "DOCKER_TLS_VERIFY",
    "CONTAINER_HOST",
    "XDG_RUNTIME_DIR",
    "XDG_CONFIG_HOME",
];

/// Programs (by file name) that reach a target elsewhere — another machine, a container, a
/// pod — and get [`LAUNCHER_PASSED`]. Any other `--shell` command (`sh`, `bash`, `env`, `sudo`,
/// a script...) runs its shell here, as the server's user: it gets what `execute`'s commands
/// get and nothing more (attack review of issue 41), so an ssh agent, a docker socket or a
/// secret does not reach a local target's commands. An operator whose wrapper needs one names
/// it with `--exec-env`.
pub const LAUNCHERS: &[&str] = &[
    "ssh", "docker", "podman", "nerdctl", "kubectl", "oc", "lxc", "incus",
];

/// Whether the `--shell` command's first word `program` is one of [`LAUNCHERS`] (by file name).
fn is_launcher(program: &str) -> bool {
    Path::new(program)
        .file_name()
        .and_then(|name| name.to_str())
        .is_some_and(|name| LAUNCHERS.contains(&name))
}

/// The environment of the `--shell` command `program` (its first word): [`for_commands`], and
/// the server's [`LAUNCHER_PASSED`] variables when `program` is one of [`LAUNCHERS`].
pub fn for_target(program: &str) -> Vec<(OsString, OsString)> {
    let mut env = for_commands();
    if !is_launcher(program) {
        return env;
    }
    for name in LAUNCHER_PASSED {
        if env.iter().any(|(have, _)| have == name) {
            continue;
        }
        if let Some(value) = std::env::var_os(name) {
            env.push(((*name).into(), value));
        }
    }
    env
}

/// The names a command gets from the server or `--exec-env`, for `mountfs check` (names only,
/// never values): the default ones, then `extra`'s.
pub fn described(extra: &[ExtraVar]) -> String {
    let mut text = format!(
        "commands get a minimal environment: {}, LC_*, TMPDIR and the non-interactive variables ({})",
        PASSED.join(", "),
        NON_INTERACTIVE
            .iter()
            .map(|(name, _)| *name)
            .filter(|name| *name != "TERM")
            .collect::<Vec<_>>()
            .join(", ")
    );
    if extra.is_empty() {
        text.push_str("; no --exec-env");
    } else {
        let names: Vec<String> = extra
            .iter()
            .map(|var| match var.value {
                Some(_) => format!("{} (set)", var.name),
                None => format!("{} (the server's)", var.name),
            })
            .collect();
        text.push_str(&format!("; --exec-env: {}", names.join(", ")));
    }
    text
}

/// The shell for commands: `shell_var` (`$SHELL`) when it names bash, zsh or sh and exists,
/// else [`FALLBACK_SHELL`].
pub fn shell(shell_var: Option<OsString>) -> PathBuf {
    shell_var
        .map(PathBuf::from)
        .filter(|path| {
            path.is_absolute()
                && path
                    .file_name()
                    .and_then(|name| name.to_str())
                    .is_some_and(|name| KNOWN_SHELLS.contains(&name))
                && path.is_file()
        })
        .unwrap_or_else(|| Path::new(FALLBACK_SHELL).to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(list: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        list.iter()
            .map(|(n, v)| ((*n).into(), (*v).into()))
            .collect()
    }

    #[test]
    fn only_clients_of_targets_elsewhere_are_launchers() {
        for program in ["ssh", "/usr/bin/ssh", "docker", "kubectl", "podman"] {
            assert!(is_launcher(program), "{program}");
        }
        for program in [
            "sh",
            "/bin/sh",
            "bash",
            "env",
            "sudo",
            "ssh-wrapper",
            "",
            "/",
        ] {
            assert!(!is_launcher(program), "{program}");
        }
    }

    #[test]
    fn commands_get_only_the_minimal_environment_and_what_the_operator_names() {
        let server = vars(&[
            ("PATH", "/bin"),
            ("HOME", "/root"),
            ("LC_TIME", "C"),
            ("PGPASSWORD", "pw"),
            ("AWS_SECRET_ACCESS_KEY", "aws"),
            ("DATABASE_URL", "postgres://u:pw@h/db"),
            ("MOUNTFS_TOKEN", "tok"),
            ("FOO", "from-server"),
        ]);
        let env = command_environment(server.clone(), &[]);
        let names: Vec<&str> = env.iter().filter_map(|(n, _)| n.to_str()).collect();
        for secret in [
            "PGPASSWORD",
            "AWS_SECRET_ACCESS_KEY",
            "DATABASE_URL",
            "MOUNTFS_TOKEN",
            "FOO",
        ] {
            assert!(!names.contains(&secret), "{secret} passed: {names:?}");
        }
        for kept in ["PATH", "HOME", "LC_TIME", "PAGER", "TERM"] {
            assert!(names.contains(&kept), "{kept} missing: {names:?}");
        }
        let extra: Vec<ExtraVar> = ["FOO", "BAR=set", "PATH=/x"]
            .iter()
            .map(|t| t.parse().unwrap())
            .collect();
        let env = command_environment(server, &extra);
        let get = |name: &str| {
            env.iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.to_str().unwrap().to_owned())
        };
        assert_eq!(get("FOO").as_deref(), Some("from-server"));
        assert_eq!(get("BAR").as_deref(), Some("set"));
        assert_eq!(get("PATH").as_deref(), Some("/x"));
        assert_eq!(
            command_environment(Vec::new(), &[])
                .iter()
                .find(|(n, _)| n == "PATH")
                .map(|(_, v)| v.clone()),
            Some(DEFAULT_PATH.into())
        );
    }

    #[test]
    fn exec_env_items_are_names_or_assignments() {
        assert_eq!(
            "A_1=x=y".parse::<ExtraVar>(),
            Ok(ExtraVar {
                name: "A_1".into(),
                value: Some("x=y".into())
            })
        );
        assert_eq!(
            "1A".parse::<ExtraVar>().unwrap_err().to_string(),
            "--exec-env '1A': give NAME or NAME=VALUE, NAME made of letters, digits and '_' and not starting with a digit (e.g. --exec-env CARGO_HOME or --exec-env RUST_LOG=info)"
        );
        assert!("=x".parse::<ExtraVar>().is_err());
        assert_eq!(
            "MOUNTFS_TOKEN".parse::<ExtraVar>().unwrap_err().to_string(),
            "--exec-env MOUNTFS_TOKEN: this is the server's own bearer token, never passed to commands; remove it"
        );
    }

    #[test]
    fn known_shells_are_used_and_others_fall_back_to_sh() {
        assert_eq!(shell(Some("/bin/bash".into())), PathBuf::from("/bin/bash"));
        assert_eq!(shell(Some("/bin/sh".into())), PathBuf::from("/bin/sh"));
        assert_eq!(
            shell(Some("/usr/bin/fish".into())),
            PathBuf::from("/bin/sh")
        );
        assert_eq!(shell(Some("bash".into())), PathBuf::from("/bin/sh"));
        assert_eq!(shell(Some("/nowhere/zsh".into())), PathBuf::from("/bin/sh"));
        assert_eq!(shell(None), PathBuf::from("/bin/sh"));
    }
}
