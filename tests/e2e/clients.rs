//! Real MCP clients nobody here wrote, driving the built binary: the official MCP Python SDK
//! (a whole session over one connection) and the MCP Inspector CLI (one call per process).
//! `.ci/run` installs both (`tests/python/requirements.txt`, `tests/inspector/package.json`), so
//! CI always runs these; elsewhere a missing client is installed if it can be, or the test says
//! in one line that it was skipped.

use std::path::Path;
use std::process::Command;

const BINARY: &str = env!("CARGO_BIN_EXE_mountfs");

fn python_sdk_available() -> bool {
    Command::new("python3")
        .args(["-c", "import mcp"])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn the_official_python_sdk_runs_a_whole_session() {
    if !python_sdk_available() {
        println!(
            "skipped: the MCP Python SDK is not installed (pip install -r tests/python/requirements.txt)"
        );
        return;
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/sdk_session.py");
    let output = Command::new("python3")
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

/// The Inspector CLI's entry point, installing the pinned version when it is missing.
pub fn inspector() -> Option<std::path::PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/inspector");
    let cli = dir.join("node_modules/@modelcontextprotocol/inspector/cli/build/cli.js");
    if !cli.exists() {
        let installed = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(&dir)
            .status()
            .is_ok_and(|s| s.success());
        if !installed {
            return None;
        }
    }
    cli.exists().then_some(cli)
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
        println!(
            "skipped: the MCP Inspector CLI could not be installed (npm ci in tests/inspector)"
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
