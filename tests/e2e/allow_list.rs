//! `--tools`: the allow-list narrows `tools/list` and `tools/call`; with `,ro` mounts it makes a
//! read-only server; an unknown name stops start-up with the valid names.

use std::process::{Command, Stdio};

use serde_json::json;

use crate::support::stdio::StdioClient;

#[test]
fn tools_flag_serves_only_the_named_tools_on_a_read_only_disk() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "alpha\nbeta\n").unwrap();
    let mount = format!("/={},ro", format_args!("disk:{}", dir.path().display()));
    let mut client = StdioClient::start(&["--mount", &mount, "--tools", "grep, ls,read_file"]);

    let listed = client.request("tools/list", json!({}));
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .expect("tools array")
        .iter()
        .map(|tool| tool["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["ls", "read_file", "grep"], "{listed}");

    assert!(
        client
            .ok("read_file", json!({"file_path": "/notes.txt"}))
            .contains("beta")
    );
    assert!(
        client
            .ok("grep", json!({"pattern": "alpha"}))
            .contains("/notes.txt")
    );

    // A tool left out is unknown to this server, exactly as a tool that never existed.
    let refused = client.request(
        "tools/call",
        json!({"name": "write_file", "arguments": {"file_path": "/notes.txt", "content": "x"}}),
    );
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert_eq!(
        refused["error"]["message"],
        "Unknown tool: write_file. Available tools: ls, read_file, grep",
        "{refused}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("notes.txt")).unwrap(),
        "alpha\nbeta\n"
    );
    assert!(client.finish().success());
}

#[test]
fn unknown_tool_name_stops_start_up_listing_the_valid_ones() {
    let output = Command::new(env!("CARGO_BIN_EXE_mountfs"))
        .args(["--mount", "/=memory", "--tools", "ls,cat,read_file,rm"])
        .stdin(Stdio::null())
        .output()
        .expect("run mountfs");
    assert_eq!(output.status.code(), Some(2));
    assert!(output.stdout.is_empty(), "stdout carries only JSON-RPC");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(
            "mountfs: --tools: unknown tool name(s): cat, rm. Valid tools: ls, read_file, write_file, edit_file,"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("e.g. --tools ls,read_file,glob,grep"),
        "{stderr}"
    );
}
