//! mountfs: an MCP server that gives AI agents one file system made of several stores.
//!
//! A mount table maps path prefixes to backends (memory, disk, SQL stores); agents call tools
//! (`ls`, `read_file`, `write_file`, `edit_file`, `multi_edit`, `glob`, `grep`, `delete`, `move`,
//! `file_info`, `undo_edit`, `apply_patch`) on virtual paths.
//! The behaviour users see is fixed by `CONTRACT.md`; this crate is laid out so that each concern
//! has one home.
//!
//! # Layout
//! Seven floors, one top-level folder each, from the ground up; a file imports only its own
//! floor and those below, never in a circle (`ground/floors.rs` declares them and its tests fail
//! otherwise, or on a loose file). `lib.rs` and `main.rs` (the thin binary) stand on top.
//!
//! - [`ground`]: pure helpers. [`ground::path`] (`VirtualPath`, the validated path every layer
//!   speaks), [`ground::config`] (the `--mount PREFIX=SPEC` and `--shell NAME=COMMAND`
//!   grammar), [`ground::limits`] and [`ground::quota`] (the memory bounds every tool keeps,
//!   what a workspace and the server may hold), [`ground::text`] (cat -n and its inverse,
//!   truncation, replacement, near matches, diffs, patches, line endings, bytes decoded to LF
//!   text once, language by file name), [`ground::search`] (what a `glob` or `grep` asks every
//!   backend: queries, the glob matcher, the line matcher compiled once, cancellation),
//!   [`ground::content`] (binary/image sniffing), [`ground::grants`] and
//!   [`ground::confirm_policy`] (who may see which mount, what a person is asked about),
//!   [`ground::time`], [`ground::uri`], [`ground::progress`].
//! - [`storage`]: files and where they are kept. [`storage::backend`]: the `Backend` trait (a
//!   small core every store answers, and capability traits whose defaults are the answers of a
//!   store without them; a wrapper states each method) and `Router`, all that sessions and tools
//!   see of the mount table; one backend per grammar name: `memory`, `disk` (a real directory:
//!   `resolve` containment, `version`s, streamed `window`s with their `line_index`, `walk` for
//!   glob/grep, `write`, `rename`, `aside` for undo, `temp` files, the `journal` of multi-file
//!   changes), `store` (a SQLite or PostgreSQL namespace), `shell` (a directory in a container or
//!   remote machine through long-lived `sh`s: `conn` frames calls, `script` is the shell side,
//!   `prefilter` and `line_regex` narrow a grep on the target), `overlay` (changes kept apart
//!   until committed), `object` (keys under a bucket prefix through `object_store`); `composite`
//!   routes and merges; `whole_file` holds what memory and store do alike.
//!   [`storage::store`]: the `Store` trait (versioned items in namespaces) and its SQLite and
//!   PostgreSQL engines, each with a trigram search index, and `store::plan` (a grep pattern
//!   turned into what the index can answer). [`storage::audit`]: the audit log's store
//!   (SQLite or PostgreSQL), its `spool` (entries off the edit's path, adopted after a crash).
//!   [`storage::exec`]: the opt-in `execute` tool's machinery (shell, namespaces and Landlock
//!   sandbox, timeout and cancellation).
//! - [`state`]: what a session remembers. [`state::session`] (read ledger, undo history, file
//!   locks; a call runs with its own handle, `Session::for_call`, holding the mount table it
//!   started with and its trail), [`state::call_trail`] (what a call changed, which the audit log
//!   writes and the subscriptions hear), [`state::arrival`] (each file call's arrival ticket,
//!   issued by stdio and HTTP alike as a request is read, redeemed when the tool locks the file).
//! - [`change`]: the one change primitive every changing tool applies, takes back and records
//!   (where ledger and undo are updated), its reports, `change::confirm` (a person asked before
//!   a change, for the tools `--confirm` names), the edit pipeline (`change::editing`), the
//!   steps of a multi-file change, and what every tool shares: `ToolError`, `ToolReply`,
//!   `CallContext`.
//! - [`tools`]: one module per tool (`execute`'s face among them); `tools::table` the one table
//!   of tools (name, schema files, when listed, whether it changes files, handler) that the
//!   registry, the dispatch and the audit log derive from.
//! - [`observers`]: fed by what a call changed: [`observers::audit_record`] (the audit entry),
//!   [`observers::changes`] (change notifications to subscriptions), [`observers::resources`].
//! - [`server`]: [`server::mounts`] (the table opened into backends), [`server::registry`] (tool
//!   definitions from `tools::table` and `schemas/`, argument validation), [`server::handler`]
//!   (the MCP handler), [`server::transport`] (bytes to messages, every malformed line
//!   answered; stdio), [`server::http`] (Streamable HTTP, bearer tokens, OAuth),
//!   [`server::workspace`] (whose session state a request uses), [`server::roots`] (the client's
//!   roots mounted), [`server::elicitation`] (how a question reaches the person),
//!   [`server::prompt`], [`server::cli`] (`check`, `cp`, `log`: the subcommands beside serving).

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
pub mod change;
#[cfg(target_os = "linux")]
pub mod ground;
#[cfg(target_os = "linux")]
pub mod observers;
#[cfg(target_os = "linux")]
pub mod server;
#[cfg(target_os = "linux")]
pub mod state;
#[cfg(target_os = "linux")]
pub mod storage;
#[cfg(target_os = "linux")]
pub mod tools;

#[cfg(target_os = "linux")]
pub use server::serve::{
    ServeError, instructions, serve_session, serve_stdio, set_startup_note, unmounted_cwd_warning,
};
