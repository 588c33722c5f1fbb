//! `mountfs tools --format json|xml`: the tool definitions the server would serve with the same
//! flags, printed for agents that take their tools in a system prompt.

use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

use crate::support::stdio::StdioClient;

fn run_tools(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mountfs"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run mountfs")
}

fn served_tools(args: &[&str]) -> Value {
    let mut client = StdioClient::start(args);
    let listed = client.request("tools/list", json!({}));
    assert!(client.finish().success());
    listed["result"]["tools"].clone()
}

#[test]
fn json_format_prints_exactly_what_tools_list_serves() {
    let printed = run_tools(&["tools", "--format", "json"]);
    assert!(printed.status.success(), "{printed:?}");
    let value: Value = serde_json::from_slice(&printed.stdout).expect("JSON on stdout");
    assert_eq!(value["tools"], served_tools(&["--mount", "/=memory"]));

    // The same flags narrow it the same way, and --allow-exec adds execute.
    let narrowed = run_tools(&[
        "--tools",
        "ls,grep,execute",
        "--allow-exec=unsandboxed",
        "tools",
        "--format",
        "json",
    ]);
    assert!(narrowed.status.success(), "{narrowed:?}");
    let value: Value = serde_json::from_slice(&narrowed.stdout).expect("JSON on stdout");
    let names: Vec<&str> = value["tools"]
        .as_array()
        .expect("tools array")
        .iter()
        .filter_map(|tool| tool["name"].as_str())
        .collect();
    assert_eq!(names, ["ls", "grep", "execute"]);
    let dir = tempfile::tempdir().unwrap();
    let mount = format!("/=disk:{}", dir.path().display());
    assert_eq!(
        value["tools"],
        served_tools(&[
            "--mount",
            &mount,
            "--tools",
            "ls,grep,execute",
            "--allow-exec=unsandboxed"
        ])
    );
}

#[test]
fn xml_format_is_a_prompt_section_naming_every_tool_with_its_schema() {
    let printed = run_tools(&["tools", "--format", "xml"]);
    assert!(printed.status.success(), "{printed:?}");
    let text = String::from_utf8(printed.stdout).expect("UTF-8");
    assert!(
        text.starts_with("You can use the following tools."),
        "{text}"
    );
    assert!(text.trim_end().ends_with("</tools>"), "{text}");
    let served = served_tools(&["--mount", "/=memory"]);
    let served = served.as_array().expect("tools array");
    assert_eq!(text.matches("<tool>").count(), served.len());
    for tool in served {
        let name = tool["name"].as_str().unwrap();
        assert!(text.contains(&format!("<name>{name}</name>")), "{name}");
    }
    // Parameters are the input schema (less the keys shown elsewhere), escaped: unescaped it
    // parses back to that schema.
    let first = text
        .split("<parameters>")
        .nth(1)
        .and_then(|rest| rest.split("</parameters>").next())
        .expect("a parameters element");
    let unescaped = first
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&");
    let schema: Value = serde_json::from_str(&unescaped).expect("schema JSON");
    let mut expected = served[0]["inputSchema"].clone();
    for key in ["$schema", "title", "description", "x-annotations"] {
        expected.as_object_mut().unwrap().remove(key);
    }
    assert_eq!(schema, expected);
    assert!(schema["properties"].is_object(), "{schema}");
}

#[test]
fn unknown_format_is_refused_with_the_valid_ones() {
    let printed = run_tools(&["tools", "--format", "yaml"]);
    assert_eq!(printed.status.code(), Some(2));
    assert!(printed.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&printed.stderr);
    assert!(stderr.contains("[possible values: json, xml]"), "{stderr}");
}

/// Issue 43: with grants, `--principal NAME` prints what NAME is offered — the reading tools
/// only when its grants let it change no mount.
#[test]
fn a_principal_with_only_read_only_grants_is_printed_the_reading_tools() {
    let names = |grant: &str| -> Vec<String> {
        let printed = run_tools(&[
            "tools",
            "--http",
            "127.0.0.1:0",
            "--mount",
            "/d/=memory",
            "--grant",
            grant,
            "--principal",
            "carol",
        ]);
        assert!(printed.status.success(), "{printed:?}");
        let value: Value = serde_json::from_slice(&printed.stdout).unwrap();
        value["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let reader = names("carol=/d/:ro");
    assert!(reader.contains(&"read_file".to_owned()), "{reader:?}");
    for changing in [
        "write_file",
        "edit_file",
        "delete",
        "move",
        "apply_patch",
        "undo_edit",
    ] {
        assert!(
            !reader.contains(&changing.to_owned()),
            "{changing}: {reader:?}"
        );
    }
    let writer = names("carol=/d/");
    assert!(writer.contains(&"write_file".to_owned()), "{writer:?}");
}
