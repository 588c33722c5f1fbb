//! Memory quotas between agents (issue 34): one principal filling its `--memory-quota` leaves
//! the others writing and reading; the server's `--memory-budget` refuses a further
//! principal's writes (and a new session, 503 with `Retry-After`) while the first keep
//! working; the end of a session gives its memory back, to the budget and to the system.

use serde_json::json;

use super::client::{Client, Protocol, Server};
use super::{ALICE, BOB, session_client};
use crate::quota::{MIB, content_of, proc_status};

const CAROL: &str = "carol-token-0123456789abcdef";

/// A server for alice, bob and carol: `/` and `/scratch/` in memory per workspace, `/shared/`
/// on disk for all.
async fn three_agents(extra: &[&str]) -> (Server, tempfile::TempDir, tempfile::TempDir) {
    let tokens_dir = tempfile::tempdir().unwrap();
    let tokens = tokens_dir.path().join("tokens");
    std::fs::write(
        &tokens,
        format!("alice {ALICE}\nbob {BOB}\ncarol {CAROL}\n"),
    )
    .unwrap();
    let disk = tempfile::tempdir().unwrap();
    std::fs::write(disk.path().join("notes.txt"), "one\ntwo\n").unwrap();
    let tokens = tokens.to_string_lossy().into_owned();
    let shared = format!("/shared/=disk:{}", disk.path().display());
    let mut args = vec![
        "--token-file",
        &tokens,
        "--mount",
        "/=memory",
        "--mount",
        "/scratch/=memory",
        "--mount",
        &shared,
    ];
    args.extend_from_slice(extra);
    (Server::start(&args, &[]).await, tokens_dir, disk)
}

async fn write(client: &mut Client, path: &str, content: &str) -> super::client::ToolAnswer {
    client
        .call("write_file", json!({"file_path": path, "content": content}))
        .await
}

/// The `memory` object of `file_info /`.
async fn memory(client: &mut Client) -> serde_json::Value {
    let info = client.call("file_info", json!({"file_path": "/"})).await;
    assert!(!info.is_error, "{}", info.text);
    info.structured["memory"].clone()
}

/// Reads, lists, and writes to disk: the work that goes on whatever memory holds.
async fn still_works(client: &mut Client, who: &str, own_file: &str) {
    let read = client
        .call("read_file", json!({"file_path": own_file, "limit": 1}))
        .await;
    assert!(!read.is_error, "{who} reads: {}", read.text);
    let listed = client.call("ls", json!({"path": "/"})).await;
    assert!(!listed.is_error, "{who} lists: {}", listed.text);
    let on_disk = write(client, &format!("/shared/{who}.txt"), "on disk\n").await;
    assert!(!on_disk.is_error, "{who} writes to disk: {}", on_disk.text);
    let shared = client
        .call("read_file", json!({"file_path": "/shared/notes.txt"}))
        .await;
    assert!(!shared.is_error, "{who} reads disk: {}", shared.text);
}

#[tokio::test]
async fn one_principal_filling_its_quota_leaves_another_writing_and_reading() {
    let (server, _t, _d) = three_agents(&["--memory-quota", "16M"]).await;
    let mut alice = session_client(&server, ALICE).await;
    let mut bob = session_client(&server, BOB).await;
    let eight = content_of(8);
    for name in ["/a1.txt", "/scratch/a2.txt"] {
        let written = write(&mut alice, name, &eight).await;
        assert!(!written.is_error, "{}", written.text);
    }
    let refused = write(&mut alice, "/a3.txt", &eight).await;
    assert!(refused.is_error);
    assert!(
        refused.text.starts_with(
            "Error: Not enough memory to write /a3.txt (mount /): it needs 8.0 MiB more, and this workspace already holds 16.0 MiB of its memory quota of 16.0 MiB (--memory-quota)"
        ),
        "{}",
        refused.text
    );
    assert_eq!(refused.structured["error"]["kind"], "too_large");

    // Bob's workspace has its own quota: he writes and reads as if alice were not there.
    for name in ["/b1.txt", "/scratch/b2.txt"] {
        let written = write(&mut bob, name, &eight).await;
        assert!(!written.is_error, "{}", written.text);
    }
    let read = bob
        .call("read_file", json!({"file_path": "/b1.txt", "limit": 2}))
        .await;
    assert!(
        !read.is_error && read.text.contains("xxxx"),
        "{}",
        read.text
    );
    assert_eq!(memory(&mut bob).await["used"], 16 * MIB);
    still_works(&mut bob, "bob", "/b1.txt").await;
    // Alice, at her quota, still reads and works on disk.
    still_works(&mut alice, "alice", "/a1.txt").await;
}

#[tokio::test]
async fn the_server_budget_refuses_a_third_principal_while_the_first_two_keep_working() {
    let (server, _t, _d) = three_agents(&["--memory-quota", "8M", "--memory-budget", "20M"]).await;
    let mut alice = session_client(&server, ALICE).await;
    let mut bob = session_client(&server, BOB).await;
    let mut carol = session_client(&server, CAROL).await;
    let eight = content_of(8);
    for client in [&mut alice, &mut bob] {
        let written = write(client, "/mine.txt", &eight).await;
        assert!(!written.is_error, "{}", written.text);
    }
    let refused = write(&mut carol, "/mine.txt", &eight).await;
    assert!(refused.is_error);
    assert_eq!(
        refused.text,
        "Error: Not enough memory to write /mine.txt (mount /): it needs 8.0 MiB more, and the \
         server's memory budget of 20.0 MiB (--memory-budget) is used up by all workspaces \
         together (16.0 MiB held). Free space: delete files you no longer need from memory \
         mounts or /scratch/, commit or discard the overlay's changes, retry later when other \
         workspaces have ended, or ask the operator to raise --memory-budget"
    );
    let usage = memory(&mut carol).await;
    assert_eq!(usage["used"], 0, "{usage}");
    assert_eq!(usage["server_used"], 16 * MIB, "{usage}");
    assert_eq!(usage["server_budget"], 20 * MIB, "{usage}");
    // Carol's reads and disk work go on.
    still_works(&mut carol, "carol", "/shared/notes.txt").await;
    // What is left she may use; then the budget is used up and a new session is refused.
    let small = write(&mut carol, "/small.txt", &content_of(3)).await;
    assert!(!small.is_error, "{}", small.text);
    // Less than 1 MiB of the budget is left now.
    let tiny = write(&mut carol, "/tiny.txt", &"y".repeat(600 * 1024)).await;
    assert!(!tiny.is_error, "{}", tiny.text);
    let mut dave = Client::new(&server.url, Some(CAROL), Protocol::Session);
    let reply = dave.initialize().await;
    assert_eq!(reply.status, 503, "{}", reply.body);
    assert_eq!(reply.header("retry-after"), Some("30"));
    assert!(reply.body.contains("--memory-budget"), "{}", reply.body);

    // The first two keep working: reads, disk, and changes that do not grow memory.
    for (client, who) in [(&mut alice, "alice"), (&mut bob, "bob")] {
        still_works(client, who, "/mine.txt").await;
        let smaller = write(client, "/mine.txt", "smaller now\n").await;
        assert!(!smaller.is_error, "{who}: {}", smaller.text);
        assert!(
            !smaller.text.contains("undo_edit can"),
            "{who}: {}",
            smaller.text
        );
    }
    // Their overwrites gave the memory back (the 8 MiB earlier contents could not be kept for
    // undo within an 8 MiB quota, and the answers said so): room for a new session again.
    let reply = dave.initialize().await;
    assert_eq!(
        reply.status, 200,
        "room again after the overwrites: {}",
        reply.body
    );
}

#[tokio::test]
async fn ending_a_session_gives_its_memory_back() {
    let (server, _t, _d) = three_agents(&["--memory-quota", "128M"]).await;
    let pid = server.child.id().expect("server pid");
    let mut bob = session_client(&server, BOB).await;
    let settle = || tokio::time::sleep(std::time::Duration::from_millis(2000));
    settle().await;
    // Anonymous memory: the server drops its start-up code pages two seconds after start
    // (`cli::code_pages`), and its code comes back as it runs; the files are anonymous.
    let before = proc_status(pid, "RssAnon");
    let mut alice = session_client(&server, ALICE).await;
    let eight = content_of(8);
    for i in 0..8 {
        let written = write(&mut alice, &format!("/scratch/f{i}.txt"), &eight).await;
        assert!(!written.is_error, "{}", written.text);
    }
    assert_eq!(memory(&mut bob).await["used"], 0);
    assert_eq!(memory(&mut alice).await["used"], 64 * MIB);
    settle().await;
    let full = proc_status(pid, "RssAnon");
    let closed = alice.send("DELETE", "", &[]).await;
    assert_eq!(closed.status, 200, "{}", closed.body);
    settle().await;
    let after = proc_status(pid, "RssAnon");
    eprintln!(
        "anonymous RSS before {:.1} MiB, with a 64 MiB workspace {:.1} MiB, after its session ended {:.1} MiB",
        before as f64 / MIB as f64,
        full as f64 / MIB as f64,
        after as f64 / MIB as f64
    );
    assert!(full > before + 56 * MIB, "the files were resident");
    assert!(
        after < before + 16 * MIB,
        "RSS {after} did not come back near {before} after the session ended"
    );
    // Accounting: nothing of alice's is held any more, by any measure bob can see.
    let usage = memory(&mut bob).await;
    assert_eq!(usage["used"], 0, "{usage}");
    assert_eq!(usage["server_used"], 0, "{usage}");
}
