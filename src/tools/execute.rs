//! `execute`'s tool face (issues 11, 25): its arguments, the real directory behind `cwd`, the
//! disk mounts the command sees, and the answer. The process and sandbox machinery that runs
//! the command is `crate::exec`, a floor below, which imports no tool type.

use std::path::PathBuf;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;

use super::{CallContext, ToolError, ToolReply};
use crate::config::display_prefix;
use crate::exec::{self, DEFAULT_TIMEOUT_SECS, ExecError, namespace};
use crate::path::VirtualPath;
use crate::session::Session;

/// `execute`'s arguments (see `schemas/execute.json`).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// The shell command line.
    pub command: String,
    /// Seconds before the command is stopped.
    #[serde(default = "default_timeout")]
    pub timeout: u64,
    /// Virtual path of the directory to run in.
    pub cwd: Option<String>,
}

fn default_timeout() -> u64 {
    DEFAULT_TIMEOUT_SECS
}

/// Runs `execute` in `session`; `context` brings the client's cancellation and progress token.
pub async fn run(
    args: Args,
    session: &Session,
    context: &CallContext,
) -> Result<ToolReply, ToolError> {
    let mode = session.write_options.exec.ok_or(ExecError::NotEnabled)?;
    let cwd = working_dir(session, args.cwd.as_deref()).await?;
    if let Some(trail) = session.trail() {
        // What the audit log names: the directory asked for (the root by default), and the
        // command line.
        let named = args.cwd.as_deref().map(VirtualPath::parse).transpose()?;
        trail.note_scope(&named.unwrap_or_else(VirtualPath::root));
        trail.note_command(&args.command);
    }
    let mounts: Vec<namespace::HostMount> = session
        .backend()
        .mounts()
        .iter()
        .filter_map(|mount| {
            Some(namespace::HostMount {
                dir: mount.backend.host_dir()?.to_owned(),
                writable: !mount.read_only,
            })
        })
        .collect();
    let command = exec::Command {
        mode,
        command: &args.command,
        cwd: &cwd,
        timeout: Duration::from_secs(args.timeout),
        mounts: &mounts,
        policy: &session.write_options.sandbox,
    };
    let outcome = exec::run(command, &context.cancel, context.progress.as_ref()).await?;
    let text = outcome.text(args.timeout);
    let text = super::large_result::fit(session, context, "execute", text).await;
    Ok(ToolReply {
        structured: Some(outcome.structured()),
        ..ToolReply::text(text)
    })
}

/// The real directory `cwd` names: a directory of a disk mount. Default: the disk mount closest
/// to the root (`/` when it is a disk mount).
async fn working_dir(session: &Session, cwd: Option<&str>) -> Result<PathBuf, ToolError> {
    let backend = session.backend();
    let mounts = backend.mounts();
    let Some(cwd) = cwd else {
        // Mounts come longest prefix first: the last disk mount is the one closest to `/`.
        let host = mounts.iter().rev().find_map(|m| m.backend.host_dir());
        return Ok(host.ok_or(ExecError::NoDiskMount)?.to_owned());
    };
    let path = VirtualPath::parse(cwd)?;
    let (mount, inner) = backend.route(&path);
    let Some(host) = mount.backend.host_dir() else {
        let mut disk: Vec<String> = mounts
            .iter()
            .filter(|m| m.backend.host_dir().is_some())
            .map(|m| display_prefix(&m.prefix))
            .collect();
        if disk.is_empty() {
            return Err(ExecError::NoDiskMount.into());
        }
        disk.sort();
        return Err(ExecError::NotDisk {
            path,
            disk_mounts: disk.join(", "),
        }
        .into());
    };
    // The backend resolves `inner` beneath its root (no `..`, no symlink out), so a path it
    // calls a directory is one inside the mount.
    match mount.backend.stat(&inner).await? {
        Some(entry) if entry.is_dir() => {}
        Some(_) => return Err(ExecError::CwdNotDirectory { path }.into()),
        None => return Err(ExecError::CwdNotFound { path }.into()),
    }
    Ok(inner
        .components()
        .fold(host.to_owned(), |dir, name| dir.join(name)))
}
