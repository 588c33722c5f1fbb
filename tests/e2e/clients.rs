//! Real MCP clients nobody here wrote, driving the built binary: the official MCP Python SDK
//! (a whole session over one connection) and the MCP Inspector CLI (one call per process).
//! `.ci/run` installs both (`tests/python/requirements.txt`, `tests/inspector/package.json`), so
//! CI always runs these; elsewhere a missing client is installed if it can be, or the test says
//! in one line at the end of the run that it was skipped.

use std::path::Path;
use std::process::Command;

const BINARY: &str = env!("CARGO_BIN_EXE_mountfs");

#[test]
fn the_official_python_sdk_runs_a_whole_session() {
    let Some(mut python) = crate::support::python::sdk("the official MCP Python SDK") else {
        return;
    };
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/sdk_session.py");
    let output = python
        .args([script, BINARY, "--mount", "/=memory"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "python SDK session failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("session ok"), "{stdout}");
}

/// The Inspector CLI's entry point, installing the pinned version when it is missing (once, under
/// a lock: both Inspector tests ask at the same moment on a fresh clone).
pub fn inspector() -> Option<std::path::PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/inspector");
    let cli = dir.join("node_modules/@modelcontextprotocol/inspector/cli/build/cli.js");
    crate::npm::installed(&dir, &[&cli]).then_some(cli)
}

/// Runs one Inspector CLI call against the binary; returns its parsed JSON output.
pub fn inspect(cli: &Path, server_args: &[&str], call: &[&str]) -> serde_json::Value {
    let output = Command::new("node")
        .arg(cli)
        .arg("--cli")
        .arg(BINARY)
        .args(server_args)
        .args(call)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "inspector {call:?} failed: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("inspector output is not JSON ({e}): {stdout}"))
}

#[test]
fn the_inspector_cli_lists_the_tools() {
    let Some(cli) = inspector() else {
        crate::skips::record(
            "the MCP Inspector CLI",
            "it could not be installed (npm ci in tests/inspector)",
        );
        return;
    };
    let listed = inspect(&cli, &["--mount", "/=memory"], &["--method", "tools/list"]);
    let mut names: Vec<&str> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    names.sort();
    for expected in [
        "edit_file",
        "glob",
        "grep",
        "ls",
        "multi_edit",
        "read_file",
        "write_file",
    ] {
        assert!(names.contains(&expected), "{names:?}");
    }
}

#[test]
fn the_inspector_cli_calls_write_read_and_edit() {
    let Some(cli) = inspector() else {
        crate::skips::record(
            "the MCP Inspector CLI",
            "it could not be installed (npm ci in tests/inspector)",
        );
        return;
    };
    // Each Inspector CLI call is a process (and so an MCP session) of its own: the file lives in
    // a SQLite store mount so that the calls see each other's work.
    let dir = tempfile::tempdir().unwrap();
    let mount = format!(
        "/=store:sqlite:{}",
        dir.path().join("inspector.db").display()
    );
    let server = ["--mount", mount.as_str()];
    let call = |tool: &str, args: &[&str]| {
        let mut call = vec!["--method", "tools/call", "--tool-name", tool];
        for arg in args {
            call.push("--tool-arg");
            call.push(arg);
        }
        inspect(&cli, &server, &call)
    };

    let written = call(
        "write_file",
        &["file_path=/notes/hello.md", "content=hello inspector"],
    );
    assert_eq!(written["isError"], false, "{written}");
    assert_eq!(
        written["content"][0]["text"],
        "Created /notes/hello.md (1 line, 15 bytes)."
    );

    let read = call("read_file", &["file_path=/notes/hello.md"]);
    assert_eq!(
        read["content"][0]["text"], "     1\thello inspector",
        "{read}"
    );

    // A new session has not read the file, so the edit is refused and nothing changes.
    let edit = call(
        "edit_file",
        &[
            "file_path=/notes/hello.md",
            "old_string=hello",
            "new_string=goodbye",
        ],
    );
    assert_eq!(edit["isError"], true, "{edit}");
    assert_eq!(
        edit["content"][0]["text"],
        "Error: File has not been read yet: /notes/hello.md. Read it with read_file first, then retry"
    );
    // The refusal's structuredContent was checked by the Inspector's client (the TypeScript
    // SDK checks isError answers too) against the shared error branch of the output schema.
    assert_eq!(
        edit["structuredContent"]["error"]["kind"], "not_read",
        "{edit}"
    );
    let again = call("read_file", &["file_path=/notes/hello.md"]);
    assert_eq!(again["content"][0]["text"], "     1\thello inspector");

    // ls: entries say each fact once ([name, kind, size, modified]; the path once, above them).
    let listing = call("ls", &["path=/notes"]);
    assert_eq!(listing["isError"], false, "{listing}");
    assert_eq!(listing["structuredContent"]["path"], "/notes", "{listing}");
    let entry = &listing["structuredContent"]["entries"][0];
    assert_eq!(entry[0], "hello.md", "{listing}");
    assert_eq!(entry[1], "file", "{listing}");
    assert!(entry[3].is_i64(), "{listing}");

    // Bad arguments reach the Inspector as a tool error naming the field and the rule.
    let bad = call("read_file", &["file_path=/notes/hello.md", "limit=0"]);
    assert_eq!(bad["isError"], true, "{bad}");
    assert_eq!(
        bad["content"][0]["text"],
        "Invalid arguments for read_file: /limit must be >= 1 (got 0)"
    );
}
