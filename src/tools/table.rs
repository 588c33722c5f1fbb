//! The one table of tools: each row is a tool's name, its schema files, when it is listed, whether
//! its calls change files, its typed arguments and its handler. Everything that names tools —
//! the registry (`tools/list`, `--tools`), the dispatch of `tools/call`, the audit log's changing
//! tools, the test that proves the typed arguments and the schema files agree — derives from
//! [`TOOLS`]. Adding a tool is one row here, its module, and `schemas/<name>.json` +
//! `schemas/<name>.output.json` (a row without them does not compile; a schema file without a
//! row fails `every_schema_file_has_a_row`). The dispatch ([`call`], [`call_in`]), [`is_known`]
//! and [`derived_schemas`] are made here from the rows too (re-exported as `tools::call` etc.).

use std::future::Future;
use std::pin::Pin;

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{
    CallContext, ToolError, ToolResult, apply_patch, changes, commit, delete, discard, edit_file,
    execute, file_info, glob, grep, history, ls, move_file, multi_edit, read_file,
    release_freed_memory_soon, undo_edit, write_file,
};
use crate::state::session::Session;

/// When a tool is listed (and callable).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listed {
    /// On every server.
    Always,
    /// While the audit log is on (`--audit`).
    Audit,
    /// When an overlay mount exists (`--mount …,overlay`).
    Overlay,
    /// With `--allow-exec`.
    Exec,
}

/// A running tool call.
pub type ToolFuture<'a> = Pin<Box<dyn Future<Output = ToolResult> + Send + 'a>>;

/// Parses a call's (schema-validated) arguments into the tool's `Args` and runs it.
pub type Handler = for<'a> fn(Value, &'a Session, &'a CallContext) -> ToolFuture<'a>;

/// One tool (see the module doc).
#[derive(Debug, Clone, Copy)]
pub struct ToolRow {
    /// The tool's name, also the `title` of its input schema and the stem of its files.
    pub name: &'static str,
    /// `schemas/<name>.json`, as compiled in.
    pub input_schema: &'static str,
    /// `schemas/<name>.output.json`, as compiled in.
    pub output_schema: &'static str,
    /// When it is listed.
    pub listed: Listed,
    /// Whether a successful call is a change (one audit log entry).
    pub changes: bool,
    /// The JSON Schema schemars derives from its `Args` (checked against the schema file).
    pub args_schema: fn() -> schemars::Schema,
    /// Runs it.
    pub handler: Handler,
}

/// A row: the name gives the schema files; the module's `run` runs the tool on its parsed `Args`.
macro_rules! row {
    ($name:literal, $listed:ident, changes: $changes:literal, $tool:ident) => {
        ToolRow {
            name: $name,
            input_schema: include_str!(concat!("../../schemas/", $name, ".json")),
            output_schema: include_str!(concat!("../../schemas/", $name, ".output.json")),
            listed: Listed::$listed,
            changes: $changes,
            args_schema: || schemars::schema_for!($tool::Args),
            handler: |arguments, session, context| {
                Box::pin(async move {
                    let args: $tool::Args = parse($name, arguments)?;
                    $tool::run(args, session, context).await
                })
            },
        }
    };
}

/// Every tool, in the order `tools/list` lists them.
pub const TOOLS: &[ToolRow] = &[
    row!("ls", Always, changes: false, ls),
    row!("read_file", Always, changes: false, read_file),
    row!("write_file", Always, changes: true, write_file),
    row!("edit_file", Always, changes: true, edit_file),
    row!("multi_edit", Always, changes: true, multi_edit),
    row!("glob", Always, changes: false, glob),
    row!("grep", Always, changes: false, grep),
    row!("delete", Always, changes: true, delete),
    row!("move", Always, changes: true, move_file),
    row!("file_info", Always, changes: false, file_info),
    row!("undo_edit", Always, changes: true, undo_edit),
    row!("apply_patch", Always, changes: true, apply_patch),
    row!("execute", Exec, changes: true, execute),
    row!("history", Audit, changes: false, history),
    row!("changes", Overlay, changes: false, changes),
    row!("commit", Overlay, changes: true, commit),
    row!("discard", Overlay, changes: true, discard),
];

/// The row of the tool named `name`.
pub fn row(name: &str) -> Option<&'static ToolRow> {
    TOOLS.iter().find(|row| row.name == name)
}

/// Whether a successful call of `tool` is a change (one audit log entry).
pub fn changes_files(tool: &str) -> bool {
    row(tool).is_some_and(|row| row.changes)
}

/// Whether a tool of this name exists here (the registry decides what is listed).
pub fn is_known(name: &str) -> bool {
    row(name).is_some()
}

fn parse<T: DeserializeOwned>(tool: &str, arguments: Value) -> Result<T, ToolError> {
    let arguments = if arguments.is_null() {
        Value::Object(Default::default())
    } else {
        arguments
    };
    serde_json::from_value(arguments).map_err(|e| ToolError::Arguments {
        tool: tool.to_owned(),
        reason: e.to_string(),
    })
}

/// Runs tool `name` with schema-validated `arguments` in `session`.
#[tracing::instrument(skip_all, fields(tool = name))]
pub async fn call(name: &str, arguments: Value, session: &Session) -> ToolResult {
    call_with(name, arguments, session, &CallContext::default()).await
}

/// [`call`] with the request's context: the tool's row in [`TOOLS`] parses the
/// arguments and runs it.
async fn call_with(
    name: &str,
    arguments: Value,
    session: &Session,
    context: &CallContext,
) -> ToolResult {
    // Each tool's future is boxed (the rows' handlers return [`ToolFuture`]): unboxed,
    // this future was as big as the biggest tool's (with every state of every tool), and it was
    // moved whole into the call's task and the library's request task, ~80,000 bytes copied per
    // call, however small the call (issue 15, callgrind: memcpy under tokio::spawn was 14% of a
    // small read_file).
    match row(name) {
        Some(row) => (row.handler)(arguments, session, context).await,
        None => Err(ToolError::Arguments {
            tool: name.to_owned(),
            reason: "no such tool".into(),
        }),
    }
}

/// [`call`] with what the request brings beyond its arguments: `execute` (only listed with
/// `--allow-exec`), the searches and the multi-file changes (`delete`, `move`, `apply_patch`)
/// use the cancellation and progress of `context`.
pub async fn call_in(
    name: &str,
    arguments: Value,
    session: &Session,
    context: &CallContext,
) -> ToolResult {
    let held_before = session.memory.used();
    // One mount table for the whole call, even when the client's roots change meanwhile: the
    // call's handle of the session holds it.
    let call = session.for_call().with_trail(context.trail.clone());
    let outcome = call_with(name, arguments, &call, context).await;
    // Freed memory (a delete, a discard, a commit of an in-memory layer) goes back to the
    // system, not only to the allocator's free lists, so the server's RSS follows the quota.
    if held_before.saturating_sub(session.memory.used()) >= FREED_WORTH_TRIMMING {
        release_freed_memory_soon();
    }
    outcome
}

/// Bytes a call must free from its workspace's memory before the allocator is asked to give
/// free memory back to the system ([`release_freed_memory_soon`]).
const FREED_WORTH_TRIMMING: u64 = 1024 * 1024;

/// The JSON Schema schemars derives from each tool's typed `Args`, for the test that proves the
/// structs and `schemas/` agree.
pub fn derived_schemas() -> Vec<(&'static str, schemars::Schema)> {
    TOOLS
        .iter()
        .map(|row| (row.name, (row.args_schema)()))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// Every `schemas/*.json` belongs to a row (as its input or output schema), and every row's
    /// two files are there, spelled as the row compiles them in.
    #[test]
    fn every_schema_file_has_a_row_and_every_row_its_schema_files() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas");
        let on_disk: BTreeSet<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .filter(|name| name.ends_with(".json"))
            .collect();
        let mut expected = BTreeSet::new();
        for row in TOOLS {
            for (file, compiled) in [
                (format!("{}.json", row.name), row.input_schema),
                (format!("{}.output.json", row.name), row.output_schema),
            ] {
                let text = std::fs::read_to_string(dir.join(&file))
                    .unwrap_or_else(|e| panic!("row {}: schemas/{file}: {e}", row.name));
                assert_eq!(text, compiled, "schemas/{file}");
                expected.insert(file);
            }
        }
        let orphans: Vec<&String> = on_disk.difference(&expected).collect();
        assert!(
            orphans.is_empty(),
            "schema files without a row in tools::table::TOOLS: {orphans:?}"
        );
    }

    #[test]
    fn names_are_unique_and_each_is_its_schemas_title() {
        let mut seen = BTreeSet::new();
        for row in TOOLS {
            assert!(seen.insert(row.name), "{} has two rows", row.name);
            let schema: Value = serde_json::from_str(row.input_schema).unwrap();
            assert_eq!(schema["title"], row.name, "schemas/{}.json", row.name);
        }
    }

    /// Changing tools are exactly those whose schema does not say they only read.
    #[test]
    fn the_changing_tools_are_those_not_read_only() {
        for row in TOOLS {
            let schema: Value = serde_json::from_str(row.input_schema).unwrap();
            let read_only = schema["x-annotations"]["readOnlyHint"].as_bool();
            assert_eq!(read_only, Some(!row.changes), "{}", row.name);
        }
    }
}
