//! The MCP surface over stdio: initialize, tools/list made of `schemas/` (and lean: what the
//! model reads of it within issue 29's bounds), JSON-RPC errors for unknown tools, tool errors
//! for bad arguments of every tool, and survival of garbage input.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::support::stdio::{StdioClient, text_of};

/// The input schema files served without flags (`execute.json` only with `--allow-exec`; see
/// execute.rs), by tool name; each tool's output schema is `<file stem>.output.json`.
/// A mount table with an overlay mount, so that every tool but `execute` is served.
const WITH_OVERLAY: &[&str] = &["--mount", "/=disk:.,overlay"];

fn schema_files() -> BTreeMap<String, Value> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/schemas");
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .filter(|name| name != "execute.json" && !name.ends_with(".output.json"))
        .map(|name| {
            let path = std::path::Path::new(dir).join(&name);
            let schema: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            (schema["title"].as_str().unwrap().to_owned(), schema)
        })
        .collect()
}

/// `schemas/<stem>.output.json` of the input schema file of tool `name` (`move.json` for
/// `move`, …: the stem is the tool's name).
fn output_schema_file(name: &str) -> Value {
    let path = format!("{}/schemas/{name}.output.json", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn initialize_reports_the_server_and_its_tools_capability() {
    let mut client = StdioClient::spawn(&["--mount", "/=memory"]);
    let init = client.request(
        "initialize",
        json!({
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}
        }),
    );
    let result = &init["result"];
    assert_eq!(result["serverInfo"]["name"], "mountfs");
    assert_eq!(result["protocolVersion"], "2025-06-18");
    assert!(result["capabilities"]["tools"].is_object(), "{init}");
    assert!(
        result["instructions"]
            .as_str()
            .unwrap()
            .contains("/ = memory")
    );
}

#[test]
fn tools_list_serves_exactly_the_schema_files() {
    // The review tools (changes, commit, discard) are served only with an overlay mount.
    let mut plain = StdioClient::start(&[]);
    let listed = plain.request("tools/list", json!({}));
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        !names.contains(&"changes") && !names.contains(&"commit"),
        "{names:?}"
    );
    let mut client = StdioClient::start(WITH_OVERLAY);
    let listed = client.request("tools/list", json!({}));
    let tools = listed["result"]["tools"].as_array().unwrap();
    let files = schema_files();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(sorted, files.keys().map(String::as_str).collect::<Vec<_>>());
    for tool in tools {
        let name = tool["name"].as_str().unwrap();
        let file = &files[name];
        let mut input = file.clone();
        for key in mountfs::server::registry::DEFINITION_KEYS {
            input.as_object_mut().unwrap().remove(key);
        }
        assert_eq!(
            tool["inputSchema"], input,
            "{name}: inputSchema is not schemas/{name}.json less its definition keys"
        );
        let output = mountfs::server::registry::served_output_schema(
            output_schema_file(name).as_object().unwrap().clone(),
        );
        assert_eq!(
            tool["outputSchema"],
            Value::Object(output),
            "{name}: outputSchema is not schemas/{name}.output.json as served"
        );
        // Said once: the description beside the schema, the annotations in `annotations`;
        // no documentation keyword inside the output schema.
        let listed = tool.to_string();
        assert_eq!(
            listed
                .matches(file["description"].as_str().unwrap())
                .count(),
            1,
            "{name}: its description is served more than once"
        );
        assert!(tool.get("x-annotations").is_none() && !listed.contains("x-annotations"));
        assert!(
            !tool["outputSchema"]
                .to_string()
                .contains("\"description\":\""),
            "{name}: its outputSchema carries descriptions"
        );
        assert_eq!(tool["description"], file["description"], "{name}");
        let hints = &file["x-annotations"];
        for key in [
            "readOnlyHint",
            "destructiveHint",
            "idempotentHint",
            "openWorldHint",
        ] {
            assert_eq!(tool["annotations"][key], hints[key], "{name}.{key}");
        }
        assert_eq!(tool["annotations"]["openWorldHint"], false, "{name}");
    }
}

/// The bytes a model reads of one tool: the compact JSON of its name, description and input
/// schema, as clients hand them to the model (issue 29's measure).
fn model_visible_bytes(tool: &Value) -> usize {
    json!({
        "name": tool["name"],
        "description": tool["description"],
        "inputSchema": tool["inputSchema"],
    })
    .to_string()
    .len()
}

/// Issue 29: the default tools (a disk mount, the audit log on) cost a model at most 9,000
/// bytes in all and 1,200 each; the whole `tools/list` at most 35,000; each tool that
/// `--allow-exec` or an overlay mount adds at most 1,200. (The reference filesystem server's
/// 14 tools: 7,972 bytes; see BENCHMARKS.md for both measured in one run.)
#[test]
fn tools_list_stays_within_what_a_model_should_read() {
    let root = tempfile::tempdir().unwrap();
    let disk = format!("/=disk:{}", root.path().display());
    let audit = format!("sqlite:{}", root.path().join("audit.db").display());
    let mut client = StdioClient::start(&["--mount", &disk, "--audit", &audit]);
    let listed = client.request("tools/list", json!({}));
    let tools = listed["result"]["tools"].as_array().unwrap();
    assert!(tools.iter().any(|t| t["name"] == "history"), "{listed}");
    let mut total = 0;
    for tool in tools {
        let bytes = model_visible_bytes(tool);
        assert!(bytes <= 1_200, "{}: {bytes} bytes", tool["name"]);
        total += bytes;
    }
    assert!(total <= 9_000, "the default tools cost {total} bytes");
    let whole = listed["result"].to_string().len();
    assert!(whole <= 35_000, "tools/list is {whole} bytes");

    let overlay = format!("/=disk:{},overlay", root.path().display());
    for flags in [
        vec!["--mount", &disk, "--allow-exec=unsandboxed"],
        vec!["--mount", &overlay],
    ] {
        let mut client = StdioClient::start(&flags);
        let listed = client.request("tools/list", json!({}));
        for tool in listed["result"]["tools"].as_array().unwrap() {
            let bytes = model_visible_bytes(tool);
            assert!(
                bytes <= 1_200,
                "{} ({flags:?}): {bytes} bytes",
                tool["name"]
            );
        }
    }
}

#[test]
fn unknown_tool_is_a_json_rpc_invalid_params_error() {
    let mut client = StdioClient::start(&[]);
    let response = client.request("tools/call", json!({"name": "rm_rf", "arguments": {}}));
    assert_eq!(response["error"]["code"], -32602, "{response}");
    let message = response["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("Unknown tool: rm_rf. Available tools: ls, read_file"),
        "{message}"
    );
    assert!(response.get("result").is_none());
}

#[test]
fn garbage_on_stdin_does_not_stop_the_server() {
    let mut client = StdioClient::start(&[]);
    client.send_raw("this is not json");
    client.send_raw("{\"jsonrpc\": \"2.0\", \"id\": 99, \"method\": ");
    client.send_raw("[1, 2, 3]");
    client.send_raw("");
    let text = client.ok(
        "write_file",
        json!({"file_path": "/after.txt", "content": "still here\n"}),
    );
    assert_eq!(text, "Created /after.txt (1 line, 11 bytes).");
    assert_eq!(client.ok("ls", json!({})), "/after.txt (11 bytes)");
}

/// A valid value for a property of the given schema (used to fill the other fields).
fn valid_value(name: &str, schema: &Value) -> Value {
    match schema["type"].as_str() {
        Some("string") => match schema.get("enum") {
            Some(options) => options[0].clone(),
            None if name.contains("path") || name == "source" || name == "destination" => {
                json!("/x")
            }
            None => json!("x"),
        },
        Some("integer") => json!(schema["minimum"].as_u64().unwrap_or(0).max(1)),
        Some("boolean") => json!(false),
        Some("array") => json!([{"old_string": "a", "new_string": "b"}]),
        other => panic!("no valid value for {name}: {other:?}"),
    }
}

/// A value of the wrong JSON type for the schema.
fn wrong_value(schema: &Value) -> Value {
    match schema["type"].as_str() {
        Some("string") => json!(5),
        Some("integer") => json!("five"),
        Some("boolean") => json!("yes"),
        Some("array") => json!("not a list"),
        _ => json!(null),
    }
}

#[test]
fn bad_arguments_for_every_tool_are_tool_errors_naming_the_field_and_rule() {
    let mut client = StdioClient::start(WITH_OVERLAY);
    let mut checked = 0;
    for (tool, schema) in schema_files() {
        let properties = schema["properties"].as_object().unwrap();
        let required: Vec<&str> = schema["required"]
            .as_array()
            .map(|r| r.iter().map(|v| v.as_str().unwrap()).collect())
            .unwrap_or_default();
        let valid: serde_json::Map<String, Value> = required
            .iter()
            .map(|name| ((*name).to_owned(), valid_value(name, &properties[*name])))
            .collect();
        let prefix = format!("Invalid arguments for {tool}: ");

        // An unknown field.
        let mut args = valid.clone();
        args.insert("bogus_field".into(), json!(1));
        let text = client.err(&tool, Value::Object(args));
        assert!(text.starts_with(&prefix), "{text}");
        assert!(
            text.contains("unknown field 'bogus_field' (allowed: "),
            "{text}"
        );
        checked += 1;

        // Each required field missing.
        for name in &required {
            let mut args = valid.clone();
            args.remove(*name);
            let text = client.err(&tool, Value::Object(args));
            assert_eq!(text, format!("{prefix}missing required field '{name}'"));
            checked += 1;
        }

        // Each field of the wrong type.
        for (name, property) in properties {
            let mut args = valid.clone();
            let wrong = wrong_value(property);
            args.insert(name.clone(), wrong.clone());
            let text = client.err(&tool, Value::Object(args));
            let expected = format!(
                "{prefix}/{name} must be of type {} (got {wrong})",
                property["type"].as_str().unwrap()
            );
            assert_eq!(text, expected);
            checked += 1;
        }

        // Each integer below its minimum.
        for (name, property) in properties {
            if let Some(minimum) = property.get("minimum").and_then(Value::as_i64) {
                let mut args = valid.clone();
                args.insert(name.clone(), json!(minimum - 1));
                let text = client.err(&tool, Value::Object(args));
                assert_eq!(
                    text,
                    format!("{prefix}/{name} must be >= {minimum} (got {})", minimum - 1)
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 40, "only {checked} cases");
    // Nothing above touched a backend, and the server is still serving.
    assert_eq!(
        client.ok("ls", json!({"path": "/"})),
        "Directory / is empty."
    );
}

#[test]
fn arguments_may_be_omitted_when_nothing_is_required() {
    let mut client = StdioClient::start(&[]);
    let response = client.request("tools/call", json!({"name": "ls"}));
    assert_eq!(text_of(&response["result"]), "Directory / is empty.");
}

#[test]
fn bad_mount_specs_stop_start_up_with_the_grammar() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_mountfs"))
        .args(["--mount", "/x=floppy:disk"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(output.stdout.is_empty(), "nothing on stdout");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("invalid mount '/x=floppy:disk': unknown backend 'floppy:disk'"),
        "{stderr}"
    );
    assert!(
        stderr.contains("mount grammar: --mount PREFIX=SPEC"),
        "{stderr}"
    );
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_mountfs"))
        .args(["--mount", "/a=memory", "--mount", "/a/=memory"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("two mounts at prefix /a/"));
}

#[test]
fn help_shows_the_mount_grammar_and_default_table() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_mountfs"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&output.stdout);
    assert!(
        help.contains("mount grammar: --mount PREFIX=SPEC"),
        "{help}"
    );
    assert!(help.contains("default mount table"), "{help}");
    assert!(
        help.contains(
            "is left out when the working directory is the file-system root or your home"
        ),
        "{help}"
    );
    assert!(help.contains("--tools <NAME,NAME,...>"), "{help}");
    assert!(
        help.contains("A client offering MCP roots gets its root directories mounted"),
        "{help}"
    );
    assert!(help.contains("With --mount, roots are ignored."), "{help}");
    // The HTTP limits of issue 25, with their defaults.
    for flag in [
        "--http-roots-under <DIR>",
        "--max-connections <N>",
        "[default: 1024]",
        "--header-timeout <DURATION>",
        "[default: 10s]",
        "--max-body-total <BYTES>",
        "[default: 33554432]",
    ] {
        assert!(help.contains(flag), "{flag}: {help}");
    }
}
