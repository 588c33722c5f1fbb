//! The tool registry: tool definitions built from the rows of `tools::table::TOOLS` (their
//! `schemas/` files compiled into the binary) that a server lists ([`Listing`]), and argument
//! validation with path-precise errors.
//!
//! Each `schemas/<tool>.json` is a JSON Schema (2020-12) whose `title` is the tool's name and whose
//! `description` is the tool's description; `x-annotations` carries the MCP tool annotations.
//! `tools/list` serves each file as the tool's `inputSchema` without those definition keys
//! ([`DEFINITION_KEYS`]): the description and the annotations are served once, beside the
//! schema (CONTRACT §5, issue 29: the model reads every byte of `tools/list` on every turn).
//! Each `schemas/<tool>.output.json` is served without its documentation keywords (see
//! [`served_output_schema`]) and with the one error branch of `tools::error_kind`. Every
//! `tools/call` is validated against the input schema before anything runs (CONTRACT §5).

use std::collections::BTreeSet;
use std::sync::{Arc, OnceLock};

use jsonschema::error::ValidationErrorKind;
use jsonschema::{ValidationError, Validator};
use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde_json::Value;
use thiserror::Error;

use crate::tools::table::{Listed, TOOLS, ToolRow};

/// How an output schema's file name ends; the rest is its input schema's file stem.
pub const OUTPUT_SUFFIX: &str = ".output.json";

/// Top-level keys of an input schema file that define the tool rather than its arguments; the
/// served `inputSchema` leaves them out (the name, description and annotations are served
/// beside it, once).
pub const DEFINITION_KEYS: [&str; 4] = ["$schema", "title", "description", "x-annotations"];

/// Keywords that only document a schema for the people reading `schemas/`; the served output
/// schemas leave them out at every level (they validate nothing, and programs, not models,
/// read output schemas).
const DOCUMENTATION_KEYWORDS: [&str; 4] = ["$schema", "$comment", "title", "description"];

/// Which of the tools listed only sometimes ([`Listed`]) a server lists: those of its flags and
/// mounts. The rows themselves are [`TOOLS`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Listing {
    /// `--allow-exec`: `execute`, its description saying whether it runs sandboxed.
    pub exec: Option<crate::storage::exec::ExecMode>,
    /// `--audit`: `history`.
    pub audit: bool,
    /// An overlay mount: `changes`, `commit`, `discard`.
    pub overlay: bool,
}

impl Listing {
    /// Whether a tool listed `when` is listed here.
    pub fn lists(&self, when: Listed) -> bool {
        match when {
            Listed::Always => true,
            Listed::Audit => self.audit,
            Listed::Overlay => self.overlay,
            Listed::Exec => self.exec.is_some(),
        }
    }
}

/// A tool definition that cannot be served. The server refuses to start with it.
#[derive(Debug, Error)]
pub enum DefinitionError {
    /// Not JSON.
    #[error("schemas/{file}: not valid JSON: {reason}")]
    Json {
        /// The file.
        file: String,
        /// The parser's complaint.
        reason: String,
    },
    /// No `title`.
    #[error("schemas/{file}: the tool name (\"title\") is missing or empty")]
    EmptyName {
        /// The file.
        file: String,
    },
    /// No `description`.
    #[error("schemas/{file}: tool '{name}' has no description")]
    EmptyDescription {
        /// The file.
        file: String,
        /// The tool.
        name: String,
    },
    /// A schema whose title is not the name of its row in `tools::table::TOOLS`.
    #[error(
        "schemas/{file}: its title '{title}' is not the tool's name '{name}' in tools::table::TOOLS; make them the same"
    )]
    NameMismatch {
        /// The file.
        file: String,
        /// Its title.
        title: String,
        /// The row's name.
        name: String,
    },
    /// Two tools of one name.
    #[error("schemas/{file}: tool name '{name}' is defined twice")]
    DuplicateName {
        /// The second file.
        file: String,
        /// The tool.
        name: String,
    },
    /// A required property with no definition.
    #[error("schemas/{file}: '{property}' is required at {at} but not defined in its properties")]
    RequiredNotDefined {
        /// The file.
        file: String,
        /// The property.
        property: String,
        /// The JSON pointer of the object schema.
        at: String,
    },
    /// Not a valid JSON Schema, or not an object schema.
    #[error("schemas/{file}: not a valid tool input schema: {reason}")]
    InvalidSchema {
        /// The file.
        file: String,
        /// What is wrong.
        reason: String,
    },
    /// A tool without an output schema (CONTRACT §5: every tool declares one).
    #[error(
        "schemas/{file}: tool '{name}' has no output schema; add schemas/{output} (a JSON Schema of its structuredContent, errors included)"
    )]
    NoOutputSchema {
        /// The input schema's file.
        file: String,
        /// The tool.
        name: String,
        /// The output schema's file name expected.
        output: String,
    },
    /// An output schema whose tool has no input schema.
    #[error("schemas/{file}: an output schema of no tool: there is no schemas/{input}")]
    OrphanOutputSchema {
        /// The output schema's file.
        file: String,
        /// The input schema's file name expected.
        input: String,
    },
    /// An output schema that is not a valid JSON Schema of an object.
    #[error("schemas/{file}: not a valid tool output schema: {reason}")]
    InvalidOutputSchema {
        /// The file.
        file: String,
        /// What is wrong.
        reason: String,
    },
}

/// One tool: its MCP definition and its validators, compiled on first use.
///
/// Compiling the ~20 input and output schemas (and checking them against the JSON Schema
/// meta-schema) was 82% of the instructions of start-up (callgrind, issue 15); the compiled-in
/// schemas are checked by the tests instead ([`Registry::from_files`] checks eagerly), and each
/// validator is compiled when its tool is first called.
#[derive(Debug)]
pub struct ToolDefinition {
    /// The definition `tools/list` serves.
    pub tool: Tool,
    /// The schema as written.
    pub schema: Arc<JsonObject>,
    validator: OnceLock<Validator>,
    output_validator: OnceLock<Validator>,
}

/// When a definition's schemas are checked (`required` names defined, the meta-schema) and
/// compiled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Check {
    /// Now: a schema that is not valid refuses to load.
    Now,
    /// On first use: for the compiled-in schemas, which the tests check.
    OnFirstUse,
}

/// The `--tools` allow-list: set once at start-up, then every [`Registry::load`] serves only
/// these tools (`tools/list` and `tools/call` alike, over stdio and HTTP).
static ALLOWED_TOOLS: OnceLock<BTreeSet<String>> = OnceLock::new();

/// `--tools` named a tool this server does not have.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error(
    "--tools: unknown tool name(s): {unknown}. Valid tools: {valid}. Give a comma-separated list of these, e.g. --tools ls,read_file,glob,grep"
)]
pub struct UnknownToolsError {
    /// The names not found, comma-separated.
    pub unknown: String,
    /// Every tool name, comma-separated, in schema order.
    pub valid: String,
}

/// Parses `--tools` text (`a,b,…`; spaces and empty items ignored) against the compiled-in
/// tools: the names, or which ones are unknown together with the valid ones.
pub fn parse_allow_list(text: &str) -> Result<BTreeSet<String>, UnknownToolsError> {
    // Every row, also those listed only with --allow-exec, the audit log or an overlay mount.
    let all: Vec<String> = TOOLS.iter().map(|row| row.name.to_owned()).collect();
    let names: BTreeSet<String> = text
        .split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .map(str::to_owned)
        .collect();
    let unknown: Vec<&str> = names
        .iter()
        .filter(|name| !all.contains(name))
        .map(String::as_str)
        .collect();
    if unknown.is_empty() && !names.is_empty() {
        return Ok(names);
    }
    Err(UnknownToolsError {
        unknown: if unknown.is_empty() {
            "(none given)".to_owned()
        } else {
            unknown.join(", ")
        },
        valid: all.join(", "),
    })
}

/// Serves only `names` from now on (`--tools`); call once, before any registry is loaded. A
/// second call is ignored: the first allow-list stays.
pub fn allow_only(names: BTreeSet<String>) {
    if ALLOWED_TOOLS.set(names).is_err() {
        tracing::warn!("the tool allow-list was already set; the first one stays");
    }
}

/// Every tool this server offers.
#[derive(Debug)]
pub struct Registry {
    tools: Vec<ToolDefinition>,
}

impl Registry {
    /// The tools every server lists, narrowed to the `--tools` allow-list when one was set (see
    /// [`allow_only`]).
    pub fn load() -> Result<Self, DefinitionError> {
        Self::listing(Listing::default())
    }

    /// [`Registry::load`], with `execute` when `exec` allows it.
    pub fn load_with_exec(
        exec: Option<crate::storage::exec::ExecMode>,
    ) -> Result<Self, DefinitionError> {
        Self::listing(Listing {
            exec,
            ..Listing::default()
        })
    }

    /// [`Registry::load_with_exec`], with `history` when the audit log is on.
    pub fn load_for(
        exec: Option<crate::storage::exec::ExecMode>,
        audit: bool,
    ) -> Result<Self, DefinitionError> {
        Self::listing(Listing {
            exec,
            audit,
            overlay: false,
        })
    }

    /// This registry with the review tools (`changes`, `commit`, `discard`) added: for servers
    /// with an overlay mount.
    pub fn with_review_tools(mut self) -> Result<Self, DefinitionError> {
        for row in TOOLS.iter().filter(|row| row.listed == Listed::Overlay) {
            if let Some(definition) = Self::row_definition(row, None)? {
                self.tools.push(definition);
            }
        }
        Ok(self)
    }

    /// The rows of [`TOOLS`] that `listing` lists and the `--tools` allow-list (if any) keeps,
    /// in table order. `execute`'s description then says whether its commands run in the
    /// Landlock sandbox. Their schemas are compiled on first use (see [`ToolDefinition`]).
    pub fn listing(listing: Listing) -> Result<Self, DefinitionError> {
        let mut tools = Vec::new();
        for row in TOOLS.iter().filter(|row| listing.lists(row.listed)) {
            let note = match row.listed {
                Listed::Exec => listing.exec.map(|mode| mode.tool_note()),
                _ => None,
            };
            if let Some(definition) = Self::row_definition(row, note)? {
                tools.push(definition);
            }
        }
        Ok(Self { tools })
    }

    /// The definition of one row (`None` when the `--tools` allow-list leaves it out), its
    /// description followed by `note`.
    fn row_definition(
        row: &ToolRow,
        note: Option<&str>,
    ) -> Result<Option<ToolDefinition>, DefinitionError> {
        if ALLOWED_TOOLS
            .get()
            .is_some_and(|allowed| !allowed.contains(row.name))
        {
            return Ok(None);
        }
        let file = format!("{}.json", row.name);
        let output_file = format!("{}{OUTPUT_SUFFIX}", row.name);
        let mut value = parse_file(&file, row.input_schema)?;
        let title = value.get("title").and_then(Value::as_str).unwrap_or("");
        if title != row.name {
            return Err(DefinitionError::NameMismatch {
                title: title.to_owned(),
                file,
                name: row.name.to_owned(),
            });
        }
        if let (Some(note), Some(Value::String(description))) = (note, value.get_mut("description"))
        {
            description.push(' ');
            description.push_str(note);
        }
        let output = parse_file(&output_file, row.output_schema)?;
        Self::definition(&file, value, (&output_file, output), Check::OnFirstUse).map(Some)
    }

    /// Builds and checks a registry from `(file name, JSON text)` pairs: each tool's input
    /// schema `<tool>.json` and its output schema `<tool>.output.json`, both required; every
    /// schema is checked against the meta-schema and compiled now.
    pub fn from_files(files: &[(&str, &str)]) -> Result<Self, DefinitionError> {
        Self::from_files_checked(files, Check::Now)
    }

    fn from_files_checked(files: &[(&str, &str)], check: Check) -> Result<Self, DefinitionError> {
        let mut tools: Vec<ToolDefinition> = Vec::new();
        let outputs: Vec<(&str, &str)> = files
            .iter()
            .filter(|(file, _)| file.ends_with(OUTPUT_SUFFIX))
            .copied()
            .collect();
        for (file, _) in &outputs {
            let input = format!("{}.json", file.trim_end_matches(OUTPUT_SUFFIX));
            if !files.iter().any(|(name, _)| *name == input) {
                return Err(DefinitionError::OrphanOutputSchema {
                    file: (*file).to_owned(),
                    input,
                });
            }
        }
        for (file, text) in files.iter().filter(|(f, _)| !f.ends_with(OUTPUT_SUFFIX)) {
            let file = (*file).to_owned();
            let value = parse_file(&file, text)?;
            let output_name = format!("{}{OUTPUT_SUFFIX}", file.trim_end_matches(".json"));
            let Some((output_file, output_text)) =
                outputs.iter().find(|(name, _)| *name == output_name)
            else {
                return Err(DefinitionError::NoOutputSchema {
                    name: value
                        .get("title")
                        .and_then(Value::as_str)
                        .unwrap_or(&file)
                        .to_owned(),
                    file,
                    output: output_name,
                });
            };
            let output = parse_file(output_file, output_text)?;
            let definition = Self::definition(&file, value, (output_file, output), check)?;
            if tools.iter().any(|t| t.tool.name == definition.tool.name) {
                return Err(DefinitionError::DuplicateName {
                    file,
                    name: definition.tool.name.to_string(),
                });
            }
            tools.push(definition);
        }
        Ok(Self { tools })
    }

    fn definition(
        file: &str,
        value: Value,
        (output_file, output): (&str, Value),
        check: Check,
    ) -> Result<ToolDefinition, DefinitionError> {
        let invalid = |reason: String| DefinitionError::InvalidSchema {
            file: file.to_owned(),
            reason,
        };
        let schema = object_schema(value).map_err(|reason| invalid(reason.into()))?;
        let name = trimmed_text(&schema, "title");
        if name.is_empty() {
            return Err(DefinitionError::EmptyName {
                file: file.to_owned(),
            });
        }
        let description = trimmed_text(&schema, "description");
        if description.is_empty() {
            return Err(DefinitionError::EmptyDescription {
                file: file.to_owned(),
                name,
            });
        }
        let validator = OnceLock::new();
        let output_validator = OnceLock::new();
        if check == Check::Now {
            let whole = Value::Object(schema.clone());
            check_required_defined(file, &whole, "")?;
            let _ = validator.set(compile(&whole).map_err(invalid)?);
        }
        let output = output_schema(output_file, output, &output_validator, check)?;
        let annotations = schema.get("x-annotations").map(annotations_of);
        let served = served_input_schema(&schema);
        let schema = Arc::new(schema);
        let mut tool =
            Tool::new(name, description, Arc::new(served)).with_raw_output_schema(Arc::new(output));
        if let Some(annotations) = annotations {
            tool = tool.with_annotations(annotations);
        }
        Ok(ToolDefinition {
            tool,
            schema,
            validator,
            output_validator,
        })
    }

    /// Only the tools that change nothing (`readOnlyHint`): what a principal whose grants let
    /// it change no mount is offered (issue 43).
    pub fn reading_tools(mut self) -> Self {
        self.tools.retain(ToolDefinition::reads_only);
        self
    }

    /// The tools, in schema-file order.
    pub fn tools(&self) -> impl Iterator<Item = &ToolDefinition> {
        self.tools.iter()
    }

    /// The tool named `name`.
    pub fn get(&self, name: &str) -> Option<&ToolDefinition> {
        self.tools.iter().find(|t| t.tool.name == name)
    }
}

fn parse_file(file: &str, text: &str) -> Result<Value, DefinitionError> {
    serde_json::from_str(text).map_err(|e| DefinitionError::Json {
        file: file.to_owned(),
        reason: e.to_string(),
    })
}

/// The `inputSchema` served for an input schema file: the file less [`DEFINITION_KEYS`].
pub fn served_input_schema(schema: &JsonObject) -> JsonObject {
    schema
        .iter()
        .filter(|(key, _)| !DEFINITION_KEYS.contains(&key.as_str()))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect()
}

/// The `outputSchema` served for an output schema file: without [`DOCUMENTATION_KEYWORDS`] at
/// any level, and with the error branch every tool shares (`tools::error_kind::error_branch`)
/// added to its `oneOf` (or, when it has none, the whole file and that branch as an `anyOf`).
pub fn served_output_schema(mut schema: JsonObject) -> JsonObject {
    strip_documentation(&mut schema);
    let error = crate::change::error_kind::error_branch();
    if let Some(Value::Array(branches)) = schema.get_mut("oneOf") {
        branches.push(serde_json::json!({"$ref": "#/$defs/error"}));
        if let Value::Object(defs) = schema
            .entry("$defs")
            .or_insert_with(|| Value::Object(JsonObject::new()))
        {
            defs.insert("error".into(), error);
        }
        return schema;
    }
    let mut whole = JsonObject::new();
    whole.insert("type".into(), Value::String("object".into()));
    whole.insert(
        "anyOf".into(),
        Value::Array(vec![Value::Object(schema), error]),
    );
    whole
}

/// Removes [`DOCUMENTATION_KEYWORDS`] from a schema and every schema inside it, leaving alone
/// the names of properties (a property may be called `description`) and literal values
/// (`const`, `enum`, `default`, `examples`).
fn strip_documentation(schema: &mut JsonObject) {
    for keyword in DOCUMENTATION_KEYWORDS {
        schema.remove(keyword);
    }
    for (keyword, child) in schema.iter_mut() {
        match (keyword.as_str(), child) {
            (
                "properties" | "$defs" | "patternProperties" | "dependentSchemas",
                Value::Object(map),
            ) => {
                for sub in map.values_mut() {
                    if let Value::Object(sub) = sub {
                        strip_documentation(sub);
                    }
                }
            }
            ("oneOf" | "anyOf" | "allOf" | "prefixItems", Value::Array(items)) => {
                for sub in items {
                    if let Value::Object(sub) = sub {
                        strip_documentation(sub);
                    }
                }
            }
            (
                "items"
                | "additionalProperties"
                | "not"
                | "if"
                | "then"
                | "else"
                | "contains"
                | "propertyNames"
                | "unevaluatedProperties"
                | "unevaluatedItems",
                Value::Object(sub),
            ) => strip_documentation(sub),
            _ => {}
        }
    }
}

/// A schema file's top level: an object whose `"type"` is `"object"`, as MCP requires of
/// input and output schemas alike; else what is wrong with it.
fn object_schema(value: Value) -> Result<JsonObject, &'static str> {
    let Value::Object(schema) = value else {
        return Err("the top level must be an object");
    };
    if schema.get("type") != Some(&Value::String("object".into())) {
        return Err("the top-level \"type\" must be \"object\"");
    }
    Ok(schema)
}

/// Checks an output schema (a valid JSON Schema whose top level is `"type": "object"`, as MCP
/// requires of `outputSchema`) and, with [`Check::Now`], compiles it into `validator`; returns
/// the schema as served ([`served_output_schema`]).
fn output_schema(
    file: &str,
    value: Value,
    validator: &OnceLock<Validator>,
    check: Check,
) -> Result<JsonObject, DefinitionError> {
    let invalid = |reason: String| DefinitionError::InvalidOutputSchema {
        file: file.to_owned(),
        reason,
    };
    let schema = object_schema(value).map_err(|reason| invalid(reason.into()))?;
    if check == Check::Now {
        check_required_defined(file, &Value::Object(schema.clone()), "")?;
    }
    let schema = served_output_schema(schema);
    if check == Check::Now {
        let _ = validator.set(compile(&Value::Object(schema.clone())).map_err(invalid)?);
    }
    Ok(schema)
}

/// A schema checked against the JSON Schema meta-schema and compiled.
fn compile(schema: &Value) -> Result<Validator, String> {
    jsonschema::meta::validate(schema).map_err(|e| e.to_string())?;
    jsonschema::validator_for(schema).map_err(|e| e.to_string())
}

/// The validator in `cell`, compiling `schema` into it first if need be. Two calls racing
/// both compile; one result is kept.
fn compiled<'a>(cell: &'a OnceLock<Validator>, schema: &Value) -> Result<&'a Validator, String> {
    if let Some(validator) = cell.get() {
        return Ok(validator);
    }
    let validator = jsonschema::validator_for(schema).map_err(|e| e.to_string())?;
    Ok(cell.get_or_init(|| validator))
}

fn annotations_of(value: &Value) -> ToolAnnotations {
    let flag = |key: &str| value.get(key).and_then(Value::as_bool);
    ToolAnnotations::from_raw(
        value
            .get("title")
            .and_then(Value::as_str)
            .map(str::to_owned),
        flag("readOnlyHint"),
        flag("destructiveHint"),
        flag("idempotentHint"),
        flag("openWorldHint"),
    )
}

/// Walks every object schema and checks each `required` name is in its `properties`.
fn check_required_defined(file: &str, schema: &Value, at: &str) -> Result<(), DefinitionError> {
    let Value::Object(map) = schema else {
        return Ok(());
    };
    if let Some(Value::Array(required)) = map.get("required") {
        let properties = map.get("properties").and_then(Value::as_object);
        for property in required.iter().filter_map(Value::as_str) {
            if !properties.is_some_and(|p| p.contains_key(property)) {
                return Err(DefinitionError::RequiredNotDefined {
                    file: file.to_owned(),
                    property: property.to_owned(),
                    at: if at.is_empty() {
                        "/".into()
                    } else {
                        at.to_owned()
                    },
                });
            }
        }
    }
    for (key, child) in map {
        match child {
            Value::Object(_) => check_required_defined(file, child, &format!("{at}/{key}"))?,
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    check_required_defined(file, item, &format!("{at}/{key}/{i}"))?;
                }
            }
            _ => {}
        }
    }
    Ok(())
}

impl ToolDefinition {
    /// The tool's name.
    pub fn name(&self) -> &str {
        &self.tool.name
    }

    /// Whether the tool only reads (its `readOnlyHint`): the tools offered to a principal
    /// whose grants let it change nothing (issue 43).
    pub fn reads_only(&self) -> bool {
        self.tool
            .annotations
            .as_ref()
            .and_then(|a| a.read_only_hint)
            .unwrap_or(false)
    }

    /// Checks a `structuredContent` against the tool's output schema: every violation, each as
    /// `<JSON pointer>: <rule>`.
    pub fn validate_output(&self, structured: &Value) -> Result<(), Vec<String>> {
        let schema = Value::Object(
            self.tool
                .output_schema
                .as_deref()
                .cloned()
                .unwrap_or_default(),
        );
        let validator = compiled(&self.output_validator, &schema).map_err(|reason| {
            vec![format!(
                "{}: the output schema does not compile ({reason}); this is a bug",
                self.name()
            )]
        })?;
        let problems: Vec<String> = validator
            .iter_errors(structured)
            .map(|e| format!("{}: {e}", e.instance_path()))
            .collect();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems)
        }
    }

    /// Validates arguments. The error text names the tool, each offending field by JSON
    /// pointer, and the rule, e.g. `Invalid arguments for read_file: /limit must be >= 1 (got 0)`.
    pub fn validate(&self, arguments: &Value) -> Result<(), String> {
        let validator = compiled(&self.validator, &Value::Object((*self.schema).clone()))
            .map_err(|reason| {
                format!(
                    "Internal error: the input schema of {} does not compile ({reason}); nothing was done. Report this bug",
                    self.name()
                )
            })?;
        // The common case, valid arguments, without collecting errors.
        if validator.is_valid(arguments) {
            return Ok(());
        }
        let errors: Vec<ValidationError<'_>> = validator.iter_errors(arguments).collect();
        // A value of the wrong type also fails its enum/range rules; naming the type is enough.
        let mistyped: BTreeSet<String> = errors
            .iter()
            .filter(|e| matches!(e.kind(), ValidationErrorKind::Type { .. }))
            .map(|e| e.instance_path().to_string())
            .collect();
        let problems: Vec<String> = errors
            .iter()
            .filter(|e| {
                matches!(e.kind(), ValidationErrorKind::Type { .. })
                    || !mistyped.contains(&e.instance_path().to_string())
            })
            .map(|e| describe(&self.schema, e))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "Invalid arguments for {}: {}",
                self.name(),
                problems.join("; ")
            ))
        }
    }
}

fn short(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 60 {
        format!("{}…", text.chars().take(60).collect::<String>())
    } else {
        text
    }
}

fn describe(schema: &JsonObject, error: &ValidationError<'_>) -> String {
    let at = error.instance_path().to_string();
    let field = if at.is_empty() { "/".to_owned() } else { at };
    let got = short(error.instance());
    let keyword_path = error.schema_path().to_string();
    match error.kind() {
        ValidationErrorKind::Required { property } => {
            let name = property
                .as_str()
                .map_or_else(|| property.to_string(), str::to_owned);
            if field == "/" {
                format!("missing required field '{name}'")
            } else {
                format!("{field}: missing required field '{name}'")
            }
        }
        ValidationErrorKind::AdditionalProperties { unexpected } => {
            let allowed = allowed_properties(schema, &keyword_path);
            let where_ = if field == "/" {
                String::new()
            } else {
                format!("{field}: ")
            };
            format!(
                "{where_}unknown field{} {} (allowed: {})",
                if unexpected.len() == 1 { "" } else { "s" },
                unexpected
                    .iter()
                    .map(|u| format!("'{u}'"))
                    .collect::<Vec<_>>()
                    .join(", "),
                allowed.join(", ")
            )
        }
        ValidationErrorKind::Type { .. } => {
            let expected = lookup(schema, &keyword_path)
                .map(|t| match t {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .unwrap_or_else(|| "the declared type".into());
            format!("{field} must be of type {expected} (got {got})")
        }
        ValidationErrorKind::Minimum { limit } => format!("{field} must be >= {limit} (got {got})"),
        ValidationErrorKind::Maximum { limit } => format!("{field} must be <= {limit} (got {got})"),
        ValidationErrorKind::ExclusiveMinimum { limit } => {
            format!("{field} must be > {limit} (got {got})")
        }
        ValidationErrorKind::ExclusiveMaximum { limit } => {
            format!("{field} must be < {limit} (got {got})")
        }
        ValidationErrorKind::MinItems { limit } => {
            format!("{field} must have at least {limit} item(s) (got {got})")
        }
        ValidationErrorKind::MaxItems { limit } => {
            format!("{field} must have at most {limit} item(s)")
        }
        ValidationErrorKind::MinLength { limit } => {
            format!("{field} must be at least {limit} character(s) long (got {got})")
        }
        ValidationErrorKind::MaxLength { limit } => {
            format!("{field} must be at most {limit} character(s) long")
        }
        ValidationErrorKind::Enum { options } => {
            let options = match options.as_ref() {
                Value::Array(items) => items.iter().map(short).collect::<Vec<_>>().join(", "),
                other => short(other),
            };
            format!("{field} must be one of {options} (got {got})")
        }
        _ => format!("{field}: {error}"),
    }
}

/// The value at a JSON pointer of the schema.
fn lookup<'a>(schema: &'a JsonObject, pointer: &str) -> Option<&'a Value> {
    let mut parts = pointer.split('/').filter(|p| !p.is_empty());
    let first = parts.next()?;
    let mut current = schema.get(&unescape(first))?;
    for part in parts {
        current = match current {
            Value::Object(map) => map.get(&unescape(part))?,
            Value::Array(items) => items.get(part.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(current)
}

fn unescape(segment: &str) -> String {
    segment.replace("~1", "/").replace("~0", "~")
}

/// The property names of the object schema whose `additionalProperties` failed.
fn allowed_properties(schema: &JsonObject, keyword_path: &str) -> Vec<String> {
    let parent = keyword_path.rsplit_once('/').map_or("", |(p, _)| p);
    let properties = if parent.is_empty() {
        schema.get("properties")
    } else {
        lookup(schema, &format!("{parent}/properties"))
    };
    properties
        .and_then(Value::as_object)
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default()
}

/// The text of `schema[key]` without surrounding blanks; empty when it is missing.
fn trimmed_text(schema: &JsonObject, key: &str) -> String {
    schema
        .get(key)
        .and_then(Value::as_str)
        .map(str::trim)
        .unwrap_or_default()
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn registry() -> Registry {
        Registry::load().unwrap()
    }

    fn check(tool: &str, args: Value) -> Result<(), String> {
        registry().get(tool).unwrap().validate(&args)
    }

    #[test]
    fn annotations_say_which_tools_change_and_destroy() {
        let registry = registry();
        for (name, read_only, destructive, idempotent) in [
            ("file_info", true, false, true),
            ("delete", false, true, false),
            ("move", false, true, false),
            ("undo_edit", false, true, false),
            ("apply_patch", false, true, false),
        ] {
            let annotations = registry
                .get(name)
                .unwrap()
                .tool
                .annotations
                .clone()
                .unwrap();
            assert_eq!(annotations.read_only_hint, Some(read_only), "{name}");
            assert_eq!(annotations.destructive_hint, Some(destructive), "{name}");
            assert_eq!(annotations.idempotent_hint, Some(idempotent), "{name}");
            assert_eq!(annotations.open_world_hint, Some(false), "{name}");
        }
    }

    /// The tools every server lists, in order.
    const LISTED_ALWAYS: [&str; 12] = [
        "ls",
        "read_file",
        "write_file",
        "edit_file",
        "multi_edit",
        "glob",
        "grep",
        "delete",
        "move",
        "file_info",
        "undo_edit",
        "apply_patch",
    ];

    #[test]
    fn every_shipped_schema_loads() {
        let names: Vec<String> = registry().tools().map(|t| t.name().to_owned()).collect();
        assert_eq!(names, LISTED_ALWAYS);
    }

    #[test]
    fn out_of_range_value_names_field_and_rule() {
        assert_eq!(
            check("read_file", json!({"file_path": "/a", "limit": 0})).unwrap_err(),
            "Invalid arguments for read_file: /limit must be >= 1 (got 0)"
        );
    }

    #[test]
    fn missing_unknown_and_wrong_type_fields_are_named() {
        assert_eq!(
            check("read_file", json!({})).unwrap_err(),
            "Invalid arguments for read_file: missing required field 'file_path'"
        );
        assert_eq!(
            check("ls", json!({"paht": "/"})).unwrap_err(),
            "Invalid arguments for ls: unknown field 'paht' (allowed: path)"
        );
        assert_eq!(
            check("read_file", json!({"file_path": 3})).unwrap_err(),
            "Invalid arguments for read_file: /file_path must be of type string (got 3)"
        );
        assert_eq!(
            check("grep", json!({"pattern": "x", "output_mode": "lines"})).unwrap_err(),
            "Invalid arguments for grep: /output_mode must be one of \"files_with_matches\", \"count\", \"content\" (got \"lines\")"
        );
        assert_eq!(
            check(
                "multi_edit",
                json!({"file_path": "/a", "edits": [{"old_string": "x"}]})
            )
            .unwrap_err(),
            "Invalid arguments for multi_edit: /edits/0: missing required field 'new_string'"
        );
        assert_eq!(
            check("multi_edit", json!({"file_path": "/a", "edits": []})).unwrap_err(),
            "Invalid arguments for multi_edit: /edits must have at least 1 item(s) (got [])"
        );
        assert!(check("read_file", json!({"file_path": "/a", "offset": 3})).is_ok());
    }

    #[test]
    fn bad_definitions_refuse_to_load() {
        let cases = [
            (r#"{"type":"object","description":"d"}"#, "tool name"),
            (r#"{"type":"object","title":"t"}"#, "no description"),
            (
                r#"{"type":"object","title":"t","description":"d","required":["x"],"properties":{}}"#,
                "'x' is required",
            ),
            (
                r#"{"type":"object","title":"t","description":"d","properties":{"x":{"type":"strang"}}}"#,
                "not a valid tool input schema",
            ),
            ("{", "not valid JSON"),
        ];
        let output = r#"{"type":"object"}"#;
        for (text, expected) in cases {
            let err = Registry::from_files(&[("t.json", text), ("t.output.json", output)])
                .unwrap_err()
                .to_string();
            assert!(err.contains(expected), "{err}");
        }
        let ok = r#"{"type":"object","title":"t","description":"d"}"#;
        let err = Registry::from_files(&[
            ("a.json", ok),
            ("a.output.json", output),
            ("b.json", ok),
            ("b.output.json", output),
        ])
        .unwrap_err()
        .to_string();
        assert!(err.contains("defined twice"), "{err}");
    }

    #[test]
    fn a_tool_without_a_valid_output_schema_refuses_to_load() {
        let ok = r#"{"type":"object","title":"t","description":"d"}"#;
        let cases: [(&[(&str, &str)], &str); 5] = [
            (
                &[("t.json", ok)],
                "schemas/t.json: tool 't' has no output schema; add schemas/t.output.json",
            ),
            (
                &[("t.json", ok), ("u.output.json", r#"{"type":"object"}"#)],
                "schemas/u.output.json: an output schema of no tool: there is no schemas/u.json",
            ),
            (
                &[("t.json", ok), ("t.output.json", r#"{"type":"array"}"#)],
                "schemas/t.output.json: not a valid tool output schema: the top-level \"type\" must be \"object\"",
            ),
            (
                &[
                    ("t.json", ok),
                    (
                        "t.output.json",
                        r#"{"type":"object","properties":{"x":{"type":"strang"}}}"#,
                    ),
                ],
                "schemas/t.output.json: not a valid tool output schema",
            ),
            (
                &[
                    ("t.json", ok),
                    ("t.output.json", r#"{"type":"object","required":["x"]}"#),
                ],
                "schemas/t.output.json: 'x' is required at / but not defined in its properties",
            ),
        ];
        for (files, expected) in cases {
            let err = Registry::from_files(files).unwrap_err().to_string();
            assert!(err.starts_with(expected), "{err}");
        }
        let registry =
            Registry::from_files(&[("t.json", ok), ("t.output.json", r#"{"type":"object"}"#)])
                .unwrap();
        assert_eq!(
            registry.get("t").unwrap().tool.output_schema.as_deref(),
            Some(
                &json!({"type": "object", "anyOf": [
                    {"type": "object"},
                    crate::change::error_kind::error_branch()
                ]})
                .as_object()
                .unwrap()
                .clone()
            )
        );
    }

    /// The compiled-in schemas are checked against the meta-schema here, not at every start-up
    /// (they are compiled on first use there): each one, the optional tools' included.
    #[test]
    fn every_compiled_in_schema_is_valid_and_compiles() {
        let names: Vec<(String, String)> = TOOLS
            .iter()
            .map(|row| {
                (
                    format!("{}.json", row.name),
                    format!("{}.output.json", row.name),
                )
            })
            .collect();
        let mut files: Vec<(&str, &str)> = Vec::new();
        for (row, (input, output)) in TOOLS.iter().zip(&names) {
            files.extend([
                (input.as_str(), row.input_schema),
                (output.as_str(), row.output_schema),
            ]);
        }
        let registry = Registry::from_files(&files).unwrap();
        assert_eq!(registry.tools().count(), TOOLS.len());
        for definition in registry.tools() {
            assert!(
                definition.validator.get().is_some(),
                "{}",
                definition.name()
            );
            assert!(
                definition.output_validator.get().is_some(),
                "{}",
                definition.name()
            );
        }
        // Served registries compile nothing until a tool is called.
        let served =
            Registry::load_for(Some(crate::storage::exec::ExecMode::Sandboxed), true).unwrap();
        let ls = served.get("ls").unwrap();
        assert!(ls.validator.get().is_none());
        assert_eq!(ls.validate(&json!({"path": "/"})), Ok(()));
        assert!(ls.validator.get().is_some());
        assert!(ls.validate(&json!({"path": 5})).is_err());
    }

    /// Every tool served, with or without `--allow-exec`, declares an output schema: a tool
    /// added without one fails here (and the server refuses to start).
    #[test]
    fn every_tool_declares_an_output_schema_with_the_error_shape() {
        let registry = Registry::listing(Listing {
            exec: Some(crate::storage::exec::ExecMode::Sandboxed),
            audit: true,
            overlay: true,
        })
        .unwrap();
        let names: Vec<&str> = registry.tools().map(|t| t.name()).collect();
        for &name in LISTED_ALWAYS.iter().chain(&["execute"]) {
            assert!(names.contains(&name), "{name} is not registered");
            assert!(crate::tools::is_known(name), "{name}");
        }
        for definition in registry.tools() {
            let name = definition.name();
            let schema = definition
                .tool
                .output_schema
                .as_ref()
                .unwrap_or_else(|| panic!("{name} has no outputSchema"));
            assert_eq!(schema.get("type"), Some(&json!("object")), "{name}");
            assert_eq!(
                schema["$defs"]["error"],
                crate::change::error_kind::error_branch(),
                "{name}: its output schema's error branch is not the shared one"
            );
            for kind in crate::change::error_kind::ErrorKind::ALL {
                let error = kind.structured("Error: x");
                assert_eq!(definition.validate_output(&error), Ok(()), "{name}");
            }
            assert!(
                definition.validate_output(&json!({})).is_err(),
                "{name}: an empty object satisfies its output schema"
            );
        }
    }

    /// grep's answers can hold thousands of files and lines: its served output schema gives
    /// their containers (`files`, `counts`, `lines`) a type and no subschema for each entry, so
    /// a client that checks every answer against it (the official Python SDK does, at a few
    /// microseconds per subschema) pays the same for a whole-tree answer as for one file
    /// (issue 45: 3.4 ms of a whole-tree files answer, 3.2 ms of a content one, before).
    #[test]
    fn grep_entries_are_checked_as_one_container_not_one_by_one() {
        let registry = Registry::listing(Listing::default()).unwrap();
        let grep = registry.get("grep").unwrap();
        let schema = grep.tool.output_schema.as_ref().unwrap();
        let per_entry = [
            "items",
            "prefixItems",
            "additionalProperties",
            "patternProperties",
            "propertyNames",
            "contains",
            "unevaluatedItems",
            "unevaluatedProperties",
        ];
        for (branch, container) in [
            ("files_with_matches", "files"),
            ("count", "counts"),
            ("content", "lines"),
        ] {
            let container_schema = &schema["$defs"][branch]["properties"][container];
            let object = container_schema
                .as_object()
                .unwrap_or_else(|| panic!("{branch}.{container}: {container_schema}"));
            assert!(object.contains_key("type"), "{branch}.{container}");
            for keyword in per_entry {
                assert!(
                    !object.contains_key(keyword),
                    "{branch}.{container} has {keyword}: every entry would be checked"
                );
            }
        }
        // And answers of every mode still satisfy it, while a wrong container does not.
        for answer in [
            json!({"mode": "files_with_matches", "pattern": "x", "path": "/", "offset": 0,
                   "files": ["/a", "/b"], "total": 2, "next_offset": null}),
            json!({"mode": "count", "pattern": "x", "path": "/", "offset": 0,
                   "counts": {"/a": 2}, "total": 1, "next_offset": null}),
            json!({"mode": "content", "pattern": "x", "path": "/", "offset": 0,
                   "lines": {"/a": [[1, "x", true]]}, "total": 1, "next_offset": null}),
        ] {
            assert_eq!(grep.validate_output(&answer), Ok(()), "{answer}");
        }
        let wrong = json!({"mode": "files_with_matches", "pattern": "x", "path": "/",
                           "offset": 0, "files": {"/a": 1}, "total": 1, "next_offset": null});
        assert!(grep.validate_output(&wrong).is_err());
    }
}
