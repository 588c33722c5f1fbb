//! What a command of `execute` runs in: the shell (seed 004 `detect_shell`) and the
//! non-interactive environment (seed 004 `get_non_interactive_env`).
//!
//! Owns no process handling (see `exec/mod.rs`) and no sandbox (see `exec/sandbox.rs`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

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

/// Variables of the server's own environment a command never sees: secrets meant for the
/// server (the HTTP bearer token).
pub const WITHHELD: &[&str] = &[crate::config::TOKEN_ENV];

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
