//! mountfs: an MCP server that gives AI agents one file system made of several stores.
//!
//! A mount table maps path prefixes to backends (memory, disk, SQL stores); agents call tools
//! (`ls`, `read_file`, `write_file`, `edit_file`, `multi_edit`, `glob`, `grep`, `delete`, `move`,
//! `file_info`, `undo_edit`, `apply_patch`) on virtual paths.
//! The behaviour users see is fixed by `CONTRACT.md`; this crate is laid out so that each concern
//! has one home.
//!
//! # Layout
//! The modules stand on floors that only point down, declared once in `floors.rs` (a test
//! fails on an import up a floor or a circle): ground (pure helpers: `path`, `limits`, `quota`,
//! `text`, `content`, `config`, `search`, `time`, `uri`, `progress`) < storage (`store`,
//! `backend`, the audit log's store, `exec`'s process and sandbox machinery) < state (`session`,
//! `transport::arrival`) < change (`tools::change` and what every tool shares) < tools (one file
//! per tool, `tools::table`) < observers (`audit::record`, `changes`, `resources`) < server
//! (`mounts`, `registry`, `server`, `transport`, `http`, `workspace`, `roots`).
//!
//! - [`path`]: `VirtualPath`, the validated path every layer speaks, and the escaped form
//!   answers show names in.
//! - [`config`]: the `--mount PREFIX=SPEC` grammar; [`mounts`]: opening it into backends.
//! - [`backend`]: the `Backend` trait (no default methods, so a wrapper states each one) and
//!   `Router`, all that sessions and tools see of the mount table; one backend per grammar
//!   name: `memory`, `disk` (a real directory: `resolve` containment, `version`s, streamed
//!   `window`s with their `line_index`, `walk` for glob/grep, `write`, `rename`, `aside` for
//!   undo, `temp` files and their sweep), `store` (a SQLite or PostgreSQL namespace); `composite`
//!   routes and merges; `whole_file` holds what memory and store do alike (windows, grep).
//! - [`store`]: the `Store` trait (versioned items in namespaces) and its SQLite and PostgreSQL
//!   engines, which `backend::store` turns into files.
//! - [`search`]: what a `glob` or `grep` asks every backend (the queries, the glob matcher, the
//!   grep pattern compiled once into the line matcher every engine uses, the answer's window,
//!   cancellation); [`content`]: binary/image sniffing.
//! - [`text`]: pure text functions (cat -n and its inverse, truncation, replacement, the
//!   near-match search of a string not found, diffs, patches, line
//!   endings, bytes decoded to LF text once (`text::encoding::decode_to_lf`), language by file
//!   name).
//! - [`session`]: per-session read ledger, undo history and file locks; [`limits`]: the
//!   memory bounds (one flag each) every tool keeps whatever the file size; [`quota`]: what a
//!   workspace, and the whole server, may hold in memory (`--memory-quota`, `--memory-budget`).
//! - [`registry`]: tool definitions (from the rows of `tools::table` and their `schemas/`
//!   files) that a server lists, argument validation.
//! - [`exec`]: the opt-in `execute` tool's machinery: shell, namespaces and Landlock sandbox,
//!   timeout and cancellation; its tool face (arguments, `cwd`, the answer) is `tools::execute`.
//! - [`time`], [`uri`]: how answers show times, and resource URIs; [`progress`]: a request's
//!   progress notifications.
//! - [`tools`]: one module per tool; `tools::table` the one table of tools (name, schema files,
//!   when listed, whether it changes files, handler) that the registry, the dispatch and the
//!   audit log derive from; `tools::change` the one change primitive every changing
//!   tool applies, takes back and records (where ledger and undo are updated, and the call's
//!   `trail` gathers what the audit log writes and the subscriptions hear), with its reports
//!   beside it; a call runs with its own handle of the session (`Session::for_call`), which
//!   holds the mount table the call started with; [`server`]: the MCP handler; [`transport`]: bytes to
//!   messages (every malformed line answered), stdio, and `transport::arrival`, where each file
//!   call's arrival ticket is issued (by stdio and HTTP alike) and redeemed; the server hands the
//!   turn to the tool call as an argument (`tools::CallContext::turn`).
//! - [`roots`]: the client's MCP roots mounted in place of the default table's working
//!   directory.
//! - [`audit`]: the audit log of every change (SQLite or PostgreSQL), read by `history` and
//!   `mountfs log`; `audit::spool` takes each entry off the edit's path (a line in a spool file,
//!   written to the database in batches, adopted by the next server after a crash).
//! - [`http`]: Streamable HTTP with bearer tokens; [`workspace`]: whose session state a
//!   request uses when one server serves many agents.

#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr
)]

pub mod audit;
pub mod backend;
pub mod changes;
pub mod cli;
pub mod config;
pub mod content;
pub mod exec;
#[cfg(test)]
mod floors;
pub mod http;
pub mod limits;
pub mod mounts;
pub mod path;
pub mod progress;
pub mod prompt;
pub mod quota;
pub mod registry;
pub mod resources;
pub mod roots;
pub mod search;
pub mod server;
pub mod session;
pub mod store;
pub mod text;
pub mod time;
pub mod tools;
pub mod transport;
pub mod uri;
pub mod workspace;

use std::sync::Arc;

use rmcp::ServiceExt;

use crate::mounts::MountTable;
use crate::registry::Registry;
use crate::server::MountfsServer;
use crate::session::{Session, WriteOptions};

/// Errors that stop the server.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A tool definition is broken.
    #[error("tool registry: {0}")]
    Registry(#[from] registry::DefinitionError),
    /// The MCP transport failed.
    #[error("MCP transport: {0}")]
    Transport(String),
}

/// Serves one session on stdin/stdout until the client goes away; a line over
/// `max_message_bytes` is skipped and answered (`--max-message-bytes`).
pub async fn serve_stdio(
    table: &MountTable,
    write_options: WriteOptions,
    max_message_bytes: usize,
) -> Result<(), ServeError> {
    let session = Arc::new(table.new_session(write_options));
    let (stdin, stdout) = transport::stdio();
    let wire =
        transport::StdioTransport::new(stdin, stdout, session.arrival.clone(), max_message_bytes);
    serve_session(table, session, wire).await
}

/// Serves `session` over any MCP transport until the client goes away.
pub async fn serve_session<T, E, A>(
    table: &MountTable,
    session: Arc<Session>,
    transport: T,
) -> Result<(), ServeError>
where
    T: rmcp::transport::IntoTransport<rmcp::RoleServer, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    let registry = Registry::listing(crate::registry::Listing {
        exec: session.write_options.exec,
        audit: session.audit().is_some(),
        overlay: table.has_overlay(),
    })?;
    let registry = Arc::new(registry);
    let instructions = instructions(table);
    let server = MountfsServer::new(registry, session, instructions, table.changes().clone())
        .with_roots(roots::RootsFollower::for_table(table));
    let running = server
        .serve(transport)
        .await
        .map_err(|e| ServeError::Transport(e.to_string()))?;
    running
        .waiting()
        .await
        .map_err(|e| ServeError::Transport(e.to_string()))?;
    Ok(())
}

/// The server's instructions to the client: what is mounted where, and the start-up note if
/// one was set ([`set_startup_note`]).
pub fn instructions(table: &MountTable) -> String {
    let note = STARTUP_NOTE
        .get()
        .map(|note| format!("\n{note}"))
        .unwrap_or_default();
    format!(
        "mountfs: one file system made of several stores. Paths are absolute virtual paths with '/' separators. Mounts:\n{}\nRead a file before editing or overwriting it.{note}",
        table.describe()
    )
}

/// A sentence the server's instructions end with, set once at start-up (the default table left
/// the working directory out, see [`unmounted_cwd_warning`]).
static STARTUP_NOTE: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Ends every session's instructions with `note` from now on; only the first note is kept.
pub fn set_startup_note(note: String) {
    let _ = STARTUP_NOTE.set(note);
}

/// Why the default table has no `/` disk mount, and how to add one: printed on stderr and told
/// to the client in the instructions.
pub fn unmounted_cwd_warning(dir: &std::path::Path) -> String {
    let what = if dir.parent().is_none() {
        "the file-system root"
    } else {
        "the home directory"
    };
    format!(
        "the working directory {} is {what}, so no directory is mounted: files live only in this session's memory and /memories/. To serve a directory, start mountfs with --mount /=disk:/path/to/project (repeat --mount for more), or start it in the project's directory.",
        dir.display()
    )
}
