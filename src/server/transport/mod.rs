//! Transports: where bytes from a client become MCP messages for the library, and where each
//! file call takes its place in the arrival order of its file.
//!
//! - [`message`]: one line or body → a message, or the JSON-RPC error it deserves (pure).
//! - `crate::state::arrival`: the arrival order of file calls: tickets issued as a request is read, redeemed
//!   when the tool locks the file. Every transport (stdio here, Streamable HTTP in `http`) uses it.
//! - [`stdio`]: newline-delimited JSON-RPC on stdin/stdout, every line answered.

pub mod message;
pub mod stdio;

/// The session header of MCP 2025-11-25 (Streamable HTTP): how `http::gate` finds a request's
/// workspace, and how the server tells a request's workspace in the audit log.
pub const SESSION_HEADER: &str = "mcp-session-id";

pub use stdio::{DEFAULT_MAX_MESSAGE_BYTES, StdioTransport, stdio};
