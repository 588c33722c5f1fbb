//! End-to-end tests: the built `mountfs` binary driven over stdin/stdout with JSON-RPC, as MCP
//! clients drive it. protocol.rs covers the MCP surface (initialize, tools/list, unknown tools,
//! bad arguments, garbage input); session.rs a full agent session; formats.rs pins the exact
//! texts CONTRACT §4 spells out; edits.rs the read-before-edit rules and every edit error;
//! wire.rs the answer to every malformed line, and arrival tickets that never leak; corpus.rs
//! the malformed-input corpus in corpus/.

#[path = "../common/mod.rs"]
mod common;

#[path = "../support/mod.rs"]
mod support;

use support::skips;

mod allow_list;
mod cancel;
mod clients;
mod corpus;
mod edits;
mod execute;
mod formats;
mod large_results;
mod output_schemas;
mod protocol;
mod resources;
mod roots;
mod session;
mod subscriptions;
mod tools_prompt;
mod wire;
