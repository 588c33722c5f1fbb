//! Transports: where bytes from a client become MCP messages for the library, and where each
//! file call takes its place in the arrival order of its file.
//!
//! - [`message`]: one line or body → a message, or the JSON-RPC error it deserves (pure).
//! - [`arrival`]: the arrival order of file calls: tickets issued as a request is read, redeemed
//!   when the tool locks the file. Every transport (stdio here, Streamable HTTP in `http`) uses it.
//! - [`stdio`]: newline-delimited JSON-RPC on stdin/stdout, every line answered.

pub mod arrival;
pub mod message;
pub mod stdio;

pub use stdio::{DEFAULT_MAX_MESSAGE_BYTES, StdioTransport, stdio};
