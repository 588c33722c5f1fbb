//! End-to-end tests: the built `mountfs` binary driven over stdin/stdout with JSON-RPC, as MCP
//! clients drive it. protocol.rs covers the MCP surface (initialize, tools/list, unknown tools,
//! bad arguments, garbage input); session.rs a full agent session; formats.rs pins the exact
//! texts CONTRACT §4 spells out; edits.rs the read-before-edit rules and every edit error;
//! wire.rs the answer to every malformed line, and arrival tickets that never leak; corpus.rs
//! the malformed-input corpus in corpus/. http/ drives the binary with `--http`; memory.rs and
//! grep_memory.rs bound a server's peak memory; store_servers.rs runs store mounts through real
//! server processes (persistence, two servers on one PostgreSQL namespace); audit.rs the audit
//! log (one entry per change over every kind of mount, `history` = `mountfs log --json`);
//! cp.rs `mountfs cp` between mount kinds.

#[path = "../support/mod.rs"]
mod support;

mod allow_list;
mod audit;
mod bridge;
mod cancel;
mod check;
mod clients;
mod confirm;
mod corpus;
mod cp;
mod edits;
mod execute;
mod forged_journals;
mod formats;
mod grep_memory;
mod http;
mod inspection;
mod large_results;
mod memory;
mod npm;
mod object_mount;
mod output_schemas;
mod own_files;
mod protocol;
mod quota;
mod registry_entry;
mod resources;
mod roots;
mod session;
mod shell_mount;
mod store_servers;
mod subscriptions;
mod tools_prompt;
mod unreadable_dirs;
mod wire;

use support::skips;
