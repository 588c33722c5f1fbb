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
//! `text`, `content`, `config`, `confirm_policy`, `search`, `time`, `uri`, `progress`) < storage (`store`,
//! `backend`, the audit log's store, `exec`'s process and sandbox machinery) < state (`session`,
//! `transport::arrival`) < change (`tools::change` and what every tool shares) < tools (one file
//! per tool, `tools::table`) < observers (`audit::record`, `changes`, `resources`) < server
//! (`mounts`, `registry`, `server`, `elicitation`, `transport`, `http`, `workspace`, `roots`).
//!
//! - [`path`]: `VirtualPath`, the validated path every layer speaks, and the escaped form
//!   answers show names in.
//! - [`config`]: the `--mount PREFIX=SPEC` and `--shell NAME=COMMAND` grammar; [`mounts`]:
//!   opening it into backends.
//! - [`backend`]: the `Backend` trait (no default methods, so a wrapper states each one) and
//!   `Router`, all that sessions and tools see of the mount table; one backend per grammar
//!   name: `memory`, `disk` (a real directory: `resolve` containment, `version`s, streamed
//!   `window`s with their `line_index`, `walk` for glob/grep, `write`, `rename`, `aside` for
//!   undo, `temp` files and their sweep), `store` (a SQLite or PostgreSQL namespace), `shell` (a
//!   directory in a container or remote machine through long-lived `sh`s: `conn` frames calls
//!   on them, `script` is the shell side, `prefilter` and `line_regex` narrow a grep on the target),
//!   `object` (keys under a bucket prefix through `object_store`: `keys`, ETag `version`s,
//!   `listing`, ranged-GET `window`s, `search`, multipart `upload`s, `error`, `connect`); `composite`
//!   routes and merges; `whole_file` holds what memory and store do alike (windows, grep).
//! - [`store`]: the `Store` trait (versioned items in namespaces) and its SQLite and PostgreSQL
//!   engines, which `backend::store` turns into files; each engine keeps a trigram search index
//!   (FTS5, PostgreSQL GIN over trigram arrays), and `store::plan` turns a grep pattern into what the index can answer.
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
//!   trail, [`call_trail`], gathers what the audit log writes and the subscriptions hear), with
//!   its reports beside it; a call runs with its own handle of the session (`Session::for_call`),
//!   which holds the mount table the call started with and the call's trail; [`server`]: the MCP handler; [`transport`]: bytes to
//!   messages (every malformed line answered), stdio, and `transport::arrival`, where each file
//!   call's arrival ticket is issued (by stdio and HTTP alike) and redeemed; the server hands the
//!   turn to the tool call as an argument (`tools::CallContext::turn`).
//! - A person in the loop (issue 46): [`confirm_policy`] is what `--confirm` asks about;
//!   `tools::change::confirm` asks, beside the change primitive, once a tool knows what it will
//!   change and before it changes anything (the call's `tools::CallContext::confirm`, present
//!   only for the tools named); [`elicitation`] is how the question reaches the person
//!   (`elicitation/create` to the peer of the call, or a 2026-07-28 input-required result).
//! - [`roots`]: the client's MCP roots mounted in place of the default table's working
//!   directory.
//! - [`cli`]: the binary's subcommands beside serving: `cli::check` (a configuration checked
//!   item by item), `cli::cp` (a tree copied between two mounts of any kind, its plan and its
//!   progress line).
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

// mountfs runs on Linux only: disk mounts stand on openat2 and O_TMPFILE, `execute` on Landlock
// and namespaces. Elsewhere the build stops here, with one message, rather than with the errors
// of every module that uses them.
#[cfg(not(target_os = "linux"))]
compile_error!(
    "mountfs builds and runs on Linux only (its disk mounts use openat2, its execute sandbox Landlock). On macOS or Windows, run mountfs on a Linux machine, VM or container with --http, and connect your client through the mcp-remote bridge: see README.md, \"Per client\" and \"Platforms\"."
);

#[cfg(target_os = "linux")]
pub mod audit;
#[cfg(target_os = "linux")]
pub mod backend;
#[cfg(target_os = "linux")]
pub mod call_trail;
#[cfg(target_os = "linux")]
pub mod changes;
#[cfg(target_os = "linux")]
pub mod cli;
#[cfg(target_os = "linux")]
pub mod config;
pub mod confirm_policy;
#[cfg(target_os = "linux")]
pub mod content;
pub mod elicitation;
#[cfg(target_os = "linux")]
pub mod exec;
#[cfg(test)]
mod floors;
pub mod grants;
#[cfg(target_os = "linux")]
pub mod http;
#[cfg(target_os = "linux")]
pub mod limits;
#[cfg(target_os = "linux")]
pub mod mounts;
#[cfg(target_os = "linux")]
pub mod path;
#[cfg(target_os = "linux")]
pub mod progress;
#[cfg(target_os = "linux")]
pub mod prompt;
#[cfg(target_os = "linux")]
pub mod quota;
#[cfg(target_os = "linux")]
pub mod registry;
#[cfg(target_os = "linux")]
pub mod resources;
#[cfg(target_os = "linux")]
pub mod roots;
#[cfg(target_os = "linux")]
pub mod search;
#[cfg(target_os = "linux")]
mod serve;
#[cfg(target_os = "linux")]
pub mod server;
#[cfg(target_os = "linux")]
pub mod session;
#[cfg(target_os = "linux")]
pub mod store;
#[cfg(target_os = "linux")]
pub mod text;
#[cfg(target_os = "linux")]
pub mod time;
#[cfg(target_os = "linux")]
pub mod tools;
#[cfg(target_os = "linux")]
pub mod transport;
#[cfg(target_os = "linux")]
pub mod uri;
#[cfg(target_os = "linux")]
pub mod workspace;

#[cfg(target_os = "linux")]
pub use serve::{
    ServeError, instructions, serve_session, serve_stdio, set_startup_note, unmounted_cwd_warning,
};
