//! `--confirm` (issue 46) over Streamable HTTP with the official MCP Python SDK: two principals
//! deleting at one moment are each asked only their own question (the question goes to the
//! session that made the call), and stateless MCP 2026-07-28 requests get an input-required
//! result answered on the retry, bound to the principal, the call's arguments and the question,
//! and answering one retry only.

use super::{ALICE, BOB, Server, token_file};

#[tokio::test]
async fn each_principal_is_asked_only_its_own_questions_in_sessions_and_stateless() {
    let Some(python) = crate::support::python::sdk("the official MCP Python SDK over HTTP") else {
        return;
    };
    let (_t, tokens) = token_file();
    let disk = tempfile::tempdir().unwrap();
    for name in ["a.txt", "b.txt", "c.txt", "d.txt", "e.txt", "f.txt"] {
        std::fs::write(disk.path().join(name), "x\n").unwrap();
    }
    let shared = format!("/shared/=disk:{}", disk.path().display());
    let args = [
        "--token-file",
        tokens.as_str(),
        "--mount",
        "/=memory",
        "--mount",
        shared.as_str(),
        "--confirm",
        "delete",
    ];
    let server = Server::start(&args, &[]).await;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/python/sdk_confirm_http.py"
    );
    let output = tokio::process::Command::from(python)
        .arg(script)
        .args([&server.url, ALICE, BOB])
        .arg(disk.path())
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "python SDK confirm over HTTP failed:\n{stdout}\n{stderr}\nserver:\n{}",
        server.stderr()
    );
    assert!(
        stdout.contains("sessions ok: each principal was asked only its own question"),
        "{stdout}"
    );
    assert!(
        stdout.contains("stateless ok: input-required, answered on the retry, bound to its principal and question"),
        "{stdout}"
    );
    assert!(
        stdout.contains("stateless replay ok: one answer confirms one call with its own arguments"),
        "{stdout}"
    );
}
