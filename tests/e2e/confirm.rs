//! `--confirm` (issue 46) through the built binary: the official MCP Python SDK's elicitation
//! callback as the person (declined, cancelled, accepted, unanswered, a file changed while the
//! question was open, execute's command, a client without elicitation), the audit log's record
//! of what the person said, `mountfs check`, `--help`, and a list naming a tool that changes
//! nothing. Over HTTP (two principals, stateless requests): `http::confirm`.

use std::process::Command;

const BINARY: &str = env!("CARGO_BIN_EXE_mountfs");

#[test]
fn the_python_sdk_person_declines_cancels_accepts_and_leaves_questions_unanswered() {
    let Some(mut python) = crate::support::python::sdk("the official MCP Python SDK") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let served = dir.path().join("served");
    std::fs::create_dir(&served).unwrap();
    let audit = dir.path().join("audit.db");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/sdk_confirm.py");
    let output = python
        .arg(script)
        .arg(BINARY)
        .arg(&served)
        .arg(&audit)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "python SDK confirm session failed:\n{stdout}\n{stderr}"
    );
    for line in [
        "not named: never asked",
        "declined: intact, the answer says declined, the question names the path",
        "cancelled, or accepted with no: intact",
        "accepted: done",
        "accepted, but the file changed meanwhile: stale",
        "unanswered: timed out as declined, intact",
        "execute: the question names the command and its directory; declined: not run",
        "no elicitation capability: refused, intact",
        "confirm ok",
    ] {
        assert!(stdout.contains(line), "missing {line:?} in:\n{stdout}");
    }

    // The audit log of the execute server: the declined command as an entry that changed
    // nothing, the accepted one with the person's confirmation.
    let log = Command::new(BINARY)
        .args(["log", "--json", "--audit"])
        .arg(format!("sqlite:{}", audit.display()))
        .output()
        .unwrap();
    assert!(
        log.status.success(),
        "{}",
        String::from_utf8_lossy(&log.stderr)
    );
    let entries: Vec<serde_json::Value> = String::from_utf8_lossy(&log.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(entries.len(), 2, "{entries:?}");
    // Newest first.
    let summary = |i: usize| entries[i]["summary"].as_str().unwrap().to_owned();
    assert!(
        summary(0).ends_with(
            "[confirmed by the person: Run the command \"echo yes > made.txt\\necho done\" in /?]"
        ),
        "{}",
        summary(0)
    );
    assert_eq!(entries[0]["command"], "echo yes > made.txt\necho done");
    assert_eq!(
        summary(1),
        "Nothing changed: not confirmed, the person declined: Run the command \"echo no > nope.txt\" in /?"
    );
    assert_eq!(entries[1]["tool"], "execute");
}

#[test]
fn check_and_help_describe_confirm_and_a_tool_that_changes_nothing_stops_start_up() {
    let output = Command::new(BINARY)
        .args([
            "check",
            "--audit",
            "off",
            "--mount",
            "/=memory",
            "--confirm",
            "destructive,edit_file",
            "--confirm-timeout",
            "30",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    assert!(
        stdout.lines().any(|line| line
            == "ok    confirm: the person is asked (MCP elicitation) before edit_file, the destructive calls of delete, move, write_file, apply_patch, commit, discard, execute; a question unanswered in 30 s counts as declined; a client that cannot elicit is refused those calls"),
        "{stdout}"
    );

    let help = Command::new(BINARY).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("--confirm <TOOL,...|destructive>"), "{help}");
    assert!(help.contains("--confirm-timeout <SECS>"), "{help}");
    assert!(help.contains("through MCP elicitation"), "{help}");

    let refused = Command::new(BINARY)
        .args(["--mount", "/=memory", "--confirm", "read_file"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("mountfs: --confirm: \"read_file\" is not a tool that changes files; name any of write_file, edit_file, multi_edit, delete, move, undo_edit, apply_patch, execute, commit, discard, or destructive"),
        "{stderr}"
    );
}

/// On the wire: the question is an `elicitation/create` request carrying the message and the
/// yes/no form; cancelling the tool call withdraws it (`notifications/cancelled` naming the
/// question's request id) and changes nothing.
#[test]
fn cancelling_the_call_withdraws_the_question_and_changes_nothing() {
    use crate::support::stdio::StdioClient;
    use serde_json::json;

    let mut client = StdioClient::spawn(&[
        "--mount",
        "/=memory",
        "--confirm",
        "delete",
        "--audit",
        "off",
    ]);
    let init = client.request(
        "initialize",
        crate::support::initialize_params(json!({"elicitation": {}})),
    );
    assert!(init.get("result").is_some(), "{init}");
    client.notify("notifications/initialized", json!({}));
    client.ok(
        "write_file",
        json!({"file_path": "/a.txt", "content": "keep"}),
    );
    let call = client.send(
        "tools/call",
        json!({"name": "delete", "arguments": {"file_path": "/a.txt"}}),
    );
    let question = client.recv();
    assert_eq!(question["method"], "elicitation/create", "{question}");
    assert_eq!(
        question["params"]["message"],
        "Delete the file /a.txt (4 bytes)?"
    );
    assert_eq!(question["params"]["mode"], "form");
    assert_eq!(
        question["params"]["requestedSchema"]["properties"]["confirm"]["type"],
        "boolean"
    );
    client.notify(
        "notifications/cancelled",
        json!({"requestId": call, "reason": "the user pressed stop"}),
    );
    let withdrawn = loop {
        let message = client
            .recv_within(std::time::Duration::from_secs(10))
            .expect("the question was not withdrawn");
        if message["method"] == "notifications/cancelled" {
            break message;
        }
    };
    assert_eq!(
        withdrawn["params"]["requestId"], question["id"],
        "{withdrawn}"
    );
    let read = client.ok("read_file", json!({"file_path": "/a.txt"}));
    assert_eq!(read, "     1\tkeep");
    assert!(client.finish().success());
}
