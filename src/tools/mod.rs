//! The tools: typed arguments → backend calls → the answer the agent reads.
//!
//! One module per tool (after mini-redis' one file per command); [`call`] (in [`table`], the one
//! table of tools) parses the validated arguments into the tool's `Args` and runs the tool's row.
//! What every tool shares (the floor below: [`ToolError`], [`ToolReply`], [`CallContext`], the
//! edit pipeline, the change primitive) lives in [`crate::change`] and is re-exported here.

pub mod apply_patch;
pub mod changes;
pub mod commit;
pub mod delete;
pub mod discard;
pub mod edit_file;
pub mod execute;
pub mod file_info;
pub mod glob;
pub mod grep;
pub mod history;
pub mod large_result;
pub mod ls;
mod move_copy;
pub mod move_file;
mod moved;
pub mod multi_edit;
pub mod read_file;
pub mod table;
pub mod undo_edit;
pub mod write_file;

pub use table::{call, call_in, derived_schemas, is_known};

pub use crate::change::{
    CallContext, ProgressReporter, SEARCH_PROGRESS_INTERVAL, ToolError, ToolReply, ToolResult,
    counted, release_freed_memory_soon, search_control, unread_more_note, watched_search,
};

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use serde_json::Value;

    use crate::server::registry::{Listing, Registry};

    /// `{property → base JSON type}` and the required set of an object schema, resolving
    /// schemars' `$ref`s into `$defs` and dropping `null` from `Option` types.
    fn shape(schema: &Value, root: &Value) -> (BTreeMap<String, Value>, Vec<String>) {
        let resolve = |v: &Value| -> Value {
            match v.get("$ref").and_then(Value::as_str) {
                Some(r) => root
                    .pointer(r.trim_start_matches('#'))
                    .cloned()
                    .unwrap_or(Value::Null),
                None => v.clone(),
            }
        };
        let schema = resolve(schema);
        let mut props = BTreeMap::new();
        if let Some(map) = schema.get("properties").and_then(Value::as_object) {
            for (name, prop) in map {
                let prop = resolve(prop);
                let ty = match prop.get("type") {
                    Some(Value::Array(types)) => types
                        .iter()
                        .find(|t| *t != "null")
                        .cloned()
                        .unwrap_or(Value::Null),
                    Some(t) => t.clone(),
                    None if !enum_values(&prop).is_empty() => Value::String("string".into()),
                    None => Value::Null,
                };
                let values = enum_values(&prop);
                let nested = if ty == "array" {
                    prop.get("items").map(|items| {
                        let (p, r) = shape(items, root);
                        serde_json::json!({"props": p, "required": r})
                    })
                } else {
                    None
                };
                props.insert(
                    name.clone(),
                    serde_json::json!({"type": ty, "items": nested, "enum": values}),
                );
            }
        }
        let mut required: Vec<String> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| {
                r.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        required.sort();
        (props, required)
    }

    /// The allowed values of a string enum, written as `enum` or as schemars' `oneOf` consts.
    fn enum_values(prop: &Value) -> Vec<String> {
        let mut values: Vec<String> = match (prop.get("enum"), prop.get("oneOf")) {
            (Some(Value::Array(values)), _) => values
                .iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect(),
            (_, Some(Value::Array(variants))) => variants
                .iter()
                .filter_map(|v| v.get("const").and_then(Value::as_str).map(str::to_owned))
                .collect(),
            _ => Vec::new(),
        };
        values.sort();
        values
    }

    /// `execute`, `history` and the review tools are listed only with their flag or mount.
    #[test]
    fn conditional_tools_are_listed_only_when_their_listing_says() {
        assert!(Registry::load().unwrap().get("execute").is_none());
        assert!(
            Registry::load_for(None, false)
                .unwrap()
                .get("history")
                .is_none()
        );
        assert!(Registry::load().unwrap().get("commit").is_none());
        let exec =
            Registry::load_with_exec(Some(crate::storage::exec::ExecMode::Sandboxed)).unwrap();
        assert!(exec.get("execute").is_some());
        assert!(
            Registry::load_for(None, true)
                .unwrap()
                .get("history")
                .is_some()
        );
        let overlay = Registry::load().unwrap().with_review_tools().unwrap();
        assert!(overlay.get("commit").is_some());
    }

    #[test]
    fn typed_args_and_schema_files_agree() {
        let registry = Registry::listing(Listing {
            exec: Some(crate::storage::exec::ExecMode::Sandboxed),
            audit: true,
            overlay: true,
        })
        .unwrap();
        let derived = super::derived_schemas();
        assert_eq!(
            derived.len(),
            registry.tools().count(),
            "one Args per schema file"
        );
        for (name, schema) in derived {
            let derived = schema.as_value().clone();
            let file = Value::Object((*registry.get(name).unwrap().schema).clone());
            assert_eq!(
                shape(&derived, &derived),
                shape(&file, &file),
                "schemas/{name}.json and {name}::Args disagree"
            );
        }
    }

    /// A call's future stays small whatever tool it runs (each tool's own future is boxed):
    /// it is moved whole into the call's task and the library's request task, and unboxed it
    /// was as big as the biggest tool's.
    #[test]
    fn a_call_future_is_small() {
        let table: Arc<dyn crate::storage::backend::Router> = Arc::new(
            crate::storage::backend::CompositeBackend::new(Vec::new(), || {
                Arc::new(crate::storage::backend::MemoryBackend::new())
            }),
        );
        let session = crate::state::session::Session::new(
            table,
            crate::state::session::WriteOptions::default(),
        );
        let context = super::CallContext::default();
        let call = super::call_in("ls", Value::Null, &session, &context);
        let size = std::mem::size_of_val(&call);
        eprintln!("call_in future: {size} bytes");
        assert!(size <= 4096, "call_in's future is {size} bytes");
    }
}
