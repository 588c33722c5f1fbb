//! Server floor: the mount table opened into sessions, and everything that faces a client.
//!
//! [`mounts`] (the table opened into backends), [`workspace`] (whose session state a request
//! uses), [`roots`] (the client's roots mounted), [`registry`] (tool definitions and argument
//! validation), [`prompt`], [`elicitation`] (how a question reaches the person), [`handler`] (the
//! MCP handler), `serve` (a session served over a transport), [`transport`] (bytes to messages,
//! stdio), [`http`] (Streamable HTTP, bearer tokens and OAuth) and [`cli`] (the binary's
//! subcommands beside serving).

pub mod cli;
pub mod elicitation;
pub mod handler;
pub mod http;
pub mod mounts;
pub mod prompt;
pub mod registry;
pub mod roots;
pub(crate) mod serve;
pub mod transport;
pub mod workspace;
