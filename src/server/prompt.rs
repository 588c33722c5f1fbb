//! Tool definitions as text for a system prompt (`mountfs tools --format json|xml`).
//!
//! Some agents take their tools in the system prompt rather than through MCP's `tools/list`
//! (seed `004`, `ToolPromptGenerator`). This module prints the very definitions the server
//! would serve with the same flags: `json` is the `tools` array of a `tools/list` answer (name,
//! description, input schema, output schema, annotations), ready for an API's tool list; `xml`
//! is a prompt section that names each tool with its description and its parameters' JSON
//! Schema (not its output schema: a model reads the answer's text, and the prompt stays short).

use std::fmt::Write as _;

use thiserror::Error;

use crate::server::registry::Registry;

/// The text formats `mountfs tools` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PromptFormat {
    /// `{"tools": [...]}` exactly as `tools/list` serves it.
    Json,
    /// A system-prompt section: `<tools><tool><name>…</name>…</tool></tools>`.
    Xml,
}

/// The definitions could not be turned into text.
#[derive(Debug, Error)]
#[error("cannot print the tool definitions: {0}")]
pub struct PromptError(String);

/// The tool definitions of `registry` in `format`, ending with a newline.
pub fn tools_prompt(registry: &Registry, format: PromptFormat) -> Result<String, PromptError> {
    match format {
        PromptFormat::Json => tools_json(registry),
        PromptFormat::Xml => tools_xml(registry),
    }
}

fn tools_json(registry: &Registry) -> Result<String, PromptError> {
    let tools: Vec<&rmcp::model::Tool> = registry.tools().map(|t| &t.tool).collect();
    let mut text = serde_json::to_string_pretty(&serde_json::json!({ "tools": tools }))
        .map_err(|e| PromptError(e.to_string()))?;
    text.push('\n');
    Ok(text)
}

fn tools_xml(registry: &Registry) -> Result<String, PromptError> {
    let mut text = String::from(
        "You can use the following tools. Call a tool with its name and a JSON object of \
         arguments that satisfies its parameters schema.\n<tools>\n",
    );
    for definition in registry.tools() {
        let tool = &definition.tool;
        let parameters =
            serde_json::to_string(&*tool.input_schema).map_err(|e| PromptError(e.to_string()))?;
        let description = tool.description.as_deref().unwrap_or_default();
        // `write!` into a String cannot fail.
        let _ = write!(
            text,
            "<tool>\n<name>{}</name>\n<description>{}</description>\n",
            xml_escape(&tool.name),
            xml_escape(description),
        );
        if let Some(annotations) = &tool.annotations {
            let hint = |name: &str, value: Option<bool>| {
                value
                    .map(|v| format!(" {name}=\"{v}\""))
                    .unwrap_or_default()
            };
            let _ = writeln!(
                text,
                "<annotations{}{}{}{}/>",
                hint("readOnly", annotations.read_only_hint),
                hint("destructive", annotations.destructive_hint),
                hint("idempotent", annotations.idempotent_hint),
                hint("openWorld", annotations.open_world_hint),
            );
        }
        let _ = write!(
            text,
            "<parameters>{}</parameters>\n</tool>\n",
            xml_escape(&parameters)
        );
    }
    text.push_str("</tools>\n");
    Ok(text)
}

/// `text` made safe as XML element content: `&`, `<` and `>` replaced by entities (quotes need
/// no escaping outside attributes, so JSON stays readable).
fn xml_escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            _ => escaped.push(c),
        }
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn xml_escape_replaces_markup_characters() {
        assert_eq!(
            xml_escape("a < b && \"c\" > d"),
            "a &lt; b &amp;&amp; \"c\" &gt; d"
        );
    }

    #[test]
    fn xml_names_every_tool_once_and_escapes_schemas() {
        let registry = Registry::load_with_exec(None).expect("compiled-in schemas load");
        let text = tools_prompt(&registry, PromptFormat::Xml).expect("prints");
        for tool in registry.tools() {
            let tag = format!("<name>{}</name>", tool.name());
            assert_eq!(text.matches(&tag).count(), 1, "{tag}");
        }
        let inside = text
            .split("<parameters>")
            .skip(1)
            .map(|part| part.split("</parameters>").next().unwrap_or_default());
        for parameters in inside {
            assert!(!parameters.contains('<'));
            assert!(serde_json::from_str::<Value>(&parameters.replace("&lt;", "<")).is_ok());
        }
    }

    #[test]
    fn json_is_the_tools_list_array() {
        let registry = Registry::load_with_exec(None).expect("compiled-in schemas load");
        let text = tools_prompt(&registry, PromptFormat::Json).expect("prints");
        let value: Value = serde_json::from_str(&text).expect("valid JSON");
        let names: Vec<&str> = value["tools"]
            .as_array()
            .expect("tools array")
            .iter()
            .filter_map(|t| t["name"].as_str())
            .collect();
        let expected: Vec<&str> = registry.tools().map(|t| t.name()).collect();
        assert_eq!(names, expected);
        for (tool, definition) in value["tools"]
            .as_array()
            .unwrap()
            .iter()
            .zip(registry.tools())
        {
            assert!(tool["inputSchema"].is_object());
            assert_eq!(
                tool["outputSchema"],
                Value::Object((**definition.tool.output_schema.as_ref().unwrap()).clone()),
                "{}",
                definition.name()
            );
        }
    }
}
