//! `execute`'s tool face (issues 11, 25): its arguments, the real directory behind `cwd`, the
//! disk mounts the command sees, and the answer. The process and sandbox machinery that runs
//! the command is `crate::storage::exec`, a floor below, which imports no tool type.

use std::path::PathBuf;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;

use super::{CallContext, ToolError, ToolReply, ToolResult};
use crate::ground::config::display_prefix;
use crate::ground::path::VirtualPath;
use crate::state::session::Session;
use crate::storage::backend::RemoteStartError;
use crate::storage::exec::{self, DEFAULT_TIMEOUT_SECS, ExecError, namespace};

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
pub async fn run(args: Args, session: &Session, context: &CallContext) -> ToolResult {
    let mode = session.write_options.exec.ok_or(ExecError::NotEnabled)?;
    crate::change::confirm::ask_first(context, "execute", true, || {
        // Quoted and escaped: a command's newlines cannot forge lines of the question.
        let cwd = args.cwd.as_deref().map_or_else(
            || "/".to_owned(),
            |cwd| VirtualPath::parse(cwd).map_or_else(|_| format!("{cwd:?}"), |p| p.to_string()),
        );
        format!("Run the command {:?} in {cwd}?", args.command)
    })
    .await?;
    if let Some(remote) = on_target(session, &args, context).await? {
        return Ok(remote);
    }
    let cwd = working_dir(session, args.cwd.as_deref()).await?;
    note(session, &args)?;
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
    Ok(answer(session, context, &args, &outcome).await)
}

/// Notes the call in the audit log: the directory asked for (the root by default), and the
/// command line.
fn note(session: &Session, args: &Args) -> Result<(), ToolError> {
    if let Some(trail) = session.trail() {
        let named = args.cwd.as_deref().map(VirtualPath::parse).transpose()?;
        trail.note_scope(&named.unwrap_or_else(VirtualPath::root));
        trail.note_command(&args.command);
    }
    Ok(())
}

/// The answer for `outcome`, a text over the result cap saved and paged.
async fn answer(
    session: &Session,
    context: &CallContext,
    args: &Args,
    outcome: &exec::Outcome,
) -> ToolReply {
    let text = outcome.text(args.timeout);
    let text = super::large_result::fit(session, context, "execute", text).await;
    ToolReply {
        structured: Some(outcome.structured()),
        ..ToolReply::text(text)
    }
}

/// Runs the command on the target when `cwd` lies in a shell mount (issue 27): in that
/// directory of the target, with the target user's rights (no sandbox there). `None` when
/// `cwd` is elsewhere.
async fn on_target(
    session: &Session,
    args: &Args,
    context: &CallContext,
) -> Result<Option<ToolReply>, ToolError> {
    let Some(cwd) = args.cwd.as_deref() else {
        return Ok(None);
    };
    let path = VirtualPath::parse(cwd)?;
    let backend = session.backend();
    let (mount, inner) = backend.route(&path);
    let Some(shell) = mount.backend.shell() else {
        return Ok(None);
    };
    if mount.read_only {
        return Err(ExecError::ShellReadOnly { path }.into());
    }
    // The same checks as a file path's (no `..` or symlink out of the mount), then again on
    // the target when the command starts.
    // Through the table, so that an error names the path with its mount's prefix (`/t/ld`).
    match backend.stat(&path).await? {
        Some(entry) if entry.is_dir() => {}
        Some(_) => return Err(ExecError::CwdNotDirectory { path }.into()),
        None => return Err(ExecError::CwdNotFound { path }.into()),
    }
    note(session, args)?;
    let run = shell
        .start_command(&inner, &args.command)
        .await
        .map_err(|error| match error {
            RemoteStartError::NotFound => ExecError::CwdNotFound { path: path.clone() },
            RemoteStartError::NotDirectory => ExecError::CwdNotDirectory { path: path.clone() },
            other => ExecError::Remote {
                path: path.clone(),
                reason: other.to_string(),
            },
        })?;
    let outcome = exec::remote::watch(
        run,
        Duration::from_secs(args.timeout),
        &context.cancel,
        context.progress.as_ref(),
    )
    .await;
    Ok(Some(answer(session, context, args, &outcome).await))
}

/// The real directory `cwd` names: a directory of a disk mount (shell mounts: [`on_target`]). Default: the disk mount closest
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
            .filter(|m| m.backend.host_dir().is_some() || m.backend.shell().is_some())
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
    // Through the table, so that an error names the path with its mount's prefix (`/t/ld`).
    match backend.stat(&path).await? {
        Some(entry) if entry.is_dir() => {}
        Some(_) => return Err(ExecError::CwdNotDirectory { path }.into()),
        None => return Err(ExecError::CwdNotFound { path }.into()),
    }
    Ok(inner
        .components()
        .fold(host.to_owned(), |dir, name| dir.join(name)))
}
