//! Serving one MCP session over stdio (or any transport), and the words every session starts
//! with: the server's instructions and the start-up note.

use std::sync::Arc;

use rmcp::ServiceExt;

use super::{registry, roots, transport};
use crate::server::handler::MountfsServer;
use crate::server::mounts::MountTable;
use crate::server::registry::Registry;
use crate::state::session::{Session, WriteOptions};

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
    let registry = Registry::listing(crate::server::registry::Listing {
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
    table.instructions_seen(None)
}

/// Ends every session's instructions with `note` from now on; only the first note is kept.
pub fn set_startup_note(note: String) {
    let _ = crate::server::mounts::STARTUP_NOTE.set(note);
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
