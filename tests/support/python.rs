//! The official MCP Python SDK for the tests that drive the server with it, installed the way
//! the Node clients are (`tests/e2e/npm.rs`): when the machine's `python3` cannot import the
//! pinned SDK, `pip install --target` puts it under `target/` once, under a lock, and the tests
//! run `python3` with that directory on `PYTHONPATH`. So the README's `cargo test` needs no
//! `pip install` by hand on a fresh machine (issue 42); `.ci/run` still installs the SDK into
//! the machine's Python first, which the tests then use as it is.
//!
//! A machine where neither works (no `python3`, no `pip`, no registry) gets the usual visible
//! skip line ([`super::skips`]) with the reason.

use std::path::{Path, PathBuf};
use std::process::Command;

use rustix::fs::{FlockOperation, flock};

/// The pinned requirements (one line, `mcp==X.Y.Z`).
const REQUIREMENTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/requirements.txt");

/// What a test imports to check the SDK is there (the Streamable HTTP client is the newest part
/// the tests use).
const PROBE: &str = "import mcp, mcp.client.streamable_http";

/// A `python3` command that can import the pinned SDK, or `None` after recording `group` as
/// skipped (with the reason and what to do).
pub fn sdk(group: &str) -> Option<Command> {
    match installed() {
        Ok(path) => Some(python(path.as_deref())),
        Err(reason) => {
            super::skips::record(group, reason);
            None
        }
    }
}

/// Decided once per test binary: `Ok(None)` when the machine's `python3` has the SDK,
/// `Ok(Some(dir))` when it was installed under `target/`, else why not.
fn installed() -> &'static Result<Option<PathBuf>, String> {
    static SDK: std::sync::OnceLock<Result<Option<PathBuf>, String>> = std::sync::OnceLock::new();
    SDK.get_or_init(|| {
        let wanted = std::fs::read_to_string(REQUIREMENTS)
            .map_err(|e| format!("cannot read {REQUIREMENTS}: {e}"))?;
        let pinned = wanted.trim();
        if imports(None) && version_is(None, pinned) {
            return Ok(None);
        }
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("python-sdk");
        install(&dir, pinned).map(Some)
    })
}

/// Installs `pinned` into `dir/site` unless the marker written last says it is there.
fn install(dir: &Path, pinned: &str) -> Result<PathBuf, String> {
    let site = dir.join("site");
    let marker = dir.join("installed");
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let lock =
        std::fs::File::open(dir).map_err(|e| format!("cannot open {}: {e}", dir.display()))?;
    // Several test binaries (and `cargo test` runs) may install at once: one does, the others
    // wait here and find the marker. Released when `lock` is dropped, or the process dies.
    flock(&lock, FlockOperation::LockExclusive).map_err(|e| format!("cannot lock: {e}"))?;
    let done = || std::fs::read_to_string(&marker).is_ok_and(|m| m == pinned);
    if !done() {
        let _ = std::fs::remove_dir_all(&site);
        let output = Command::new("python3")
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .args(["--no-warn-script-location", "--target"])
            .arg(&site)
            .args(["-r", REQUIREMENTS])
            .output()
            .map_err(|e| format!("python3 could not be run ({e}): install Python 3"))?;
        if !output.status.success() {
            return Err(format!(
                "pip install -r tests/python/requirements.txt failed ({}); install it by hand",
                String::from_utf8_lossy(&output.stderr)
                    .lines()
                    .last()
                    .unwrap_or("no output")
            ));
        }
        // Written last: a run killed during the install finds no marker and installs again.
        std::fs::write(&marker, pinned).map_err(|e| format!("cannot write the marker: {e}"))?;
    }
    if imports(Some(&site)) {
        Ok(site)
    } else {
        Err(format!(
            "the SDK installed in {} cannot be imported",
            site.display()
        ))
    }
}

fn python(path: Option<&Path>) -> Command {
    let mut command = Command::new("python3");
    if let Some(path) = path {
        command.env("PYTHONPATH", path);
    }
    command
}

/// Whether `python3` (with `path` first on its module path) imports the SDK.
fn imports(path: Option<&Path>) -> bool {
    python(path)
        .args(["-c", PROBE])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Whether the SDK `python3` finds is the pinned one (`mcp==X.Y.Z`).
fn version_is(path: Option<&Path>, pinned: &str) -> bool {
    let Some(version) = pinned.strip_prefix("mcp==") else {
        return true;
    };
    python(path)
        .args([
            "-c",
            "import importlib.metadata as m; print(m.version('mcp'))",
        ])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == version)
}
