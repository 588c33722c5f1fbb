//! Live change notifications (issue 13): a subscribed file or directory is announced with
//! `notifications/resources/updated` when anyone changes it — this session's tools, another
//! program on disk, another server instance on the same PostgreSQL namespace — through legacy
//! `resources/subscribe` and the 2026-07-28 `subscriptions/listen`.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::stdio::StdioClient;

/// How long a notification may take: the coalescing interval, a file watcher's delay and a
/// PostgreSQL round trip, with room for a loaded CI machine.
const NOTICE_WITHIN: Duration = Duration::from_secs(10);

/// Messages received until `until` holds for one of them (returned last) or the time is up.
fn wait_for(client: &mut StdioClient, until: impl Fn(&Value) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + NOTICE_WITHIN;
    let mut seen = Vec::new();
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        let Some(message) = client.recv_within(left) else {
            break;
        };
        let done = until(&message);
        seen.push(message);
        if done {
            return seen;
        }
    }
    panic!("no such message within {NOTICE_WITHIN:?}; saw {seen:?}");
}

fn is_update(uri: &str) -> impl Fn(&Value) -> bool + '_ {
    move |m: &Value| m["method"] == "notifications/resources/updated" && m["params"]["uri"] == uri
}

/// Calls a tool without losing the notifications that arrive around its answer.
fn call_collecting(client: &mut StdioClient, tool: &str, arguments: Value) -> Vec<Value> {
    let id = client.send("tools/call", json!({"name": tool, "arguments": arguments}));
    wait_for(client, |m| m["id"] == id)
}

#[test]
fn a_subscribed_file_is_announced_after_this_sessions_edit_and_another_programs_write() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "one\ntwo\n").unwrap();
    std::fs::write(dir.path().join("other.txt"), "x\n").unwrap();
    let disk = format!("/=disk:{}", dir.path().display());
    let mut client = StdioClient::start(&["--mount", &disk]);
    let init_caps = client.request("resources/list", json!({}));
    assert!(init_caps.get("result").is_some(), "{init_caps}");

    let subscribed = client.request(
        "resources/subscribe",
        json!({"uri": "mountfs:///notes.txt"}),
    );
    assert!(subscribed.get("result").is_some(), "{subscribed}");

    client.ok("read_file", json!({"file_path": "/notes.txt"}));
    let mut seen = call_collecting(
        &mut client,
        "edit_file",
        json!({"file_path": "/notes.txt", "old_string": "two", "new_string": "2"}),
    );
    if !seen.iter().any(is_update("mountfs:///notes.txt")) {
        seen = wait_for(&mut client, is_update("mountfs:///notes.txt"));
    }
    assert!(
        seen.iter().any(is_update("mountfs:///notes.txt")),
        "{seen:?}"
    );

    // Another program writes the file on disk.
    std::thread::sleep(Duration::from_millis(300));
    std::fs::write(dir.path().join("notes.txt"), "changed outside\n").unwrap();
    let seen = wait_for(&mut client, is_update("mountfs:///notes.txt"));
    assert!(
        !seen.iter().any(is_update("mountfs:///other.txt")),
        "only what was subscribed: {seen:?}"
    );

    // Unsubscribed: no more notices for it.
    let done = client.request(
        "resources/unsubscribe",
        json!({"uri": "mountfs:///notes.txt"}),
    );
    assert!(done.get("result").is_some(), "{done}");
    std::thread::sleep(Duration::from_millis(300));
    while client.recv_within(Duration::from_millis(300)).is_some() {}
    std::fs::write(dir.path().join("notes.txt"), "again\n").unwrap();
    let quiet = client.recv_within(Duration::from_secs(1));
    assert!(
        quiet
            .as_ref()
            .is_none_or(|m| !is_update("mountfs:///notes.txt")(m)),
        "{quiet:?}"
    );

    let bad = client.request("resources/subscribe", json!({"uri": "file:///etc/passwd"}));
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
    assert!(client.finish().success());
}

#[test]
fn a_subscribed_directory_announces_new_files_and_the_list_change() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("src")).unwrap();
    let disk = format!("/=disk:{}", dir.path().display());
    let mut client = StdioClient::start(&["--mount", &disk, "--mount", "/scratch/=memory"]);
    let subscribed = client.request("resources/subscribe", json!({"uri": "mountfs:///src"}));
    assert!(subscribed.get("result").is_some(), "{subscribed}");

    std::fs::write(dir.path().join("src/new.rs"), "fn f() {}\n").unwrap();
    let seen = wait_for(&mut client, is_update("mountfs:///src/new.rs"));
    let seen_more = if seen
        .iter()
        .any(|m| m["method"] == "notifications/resources/list_changed")
    {
        seen
    } else {
        wait_for(&mut client, |m| {
            m["method"] == "notifications/resources/list_changed"
        })
    };
    assert!(!seen_more.is_empty());

    // A memory mount: this session's own write is announced too.
    client.request("resources/subscribe", json!({"uri": "mountfs:///scratch"}));
    let mut seen = call_collecting(
        &mut client,
        "write_file",
        json!({"file_path": "/scratch/a.md", "content": "hi\n"}),
    );
    if !seen.iter().any(is_update("mountfs:///scratch/a.md")) {
        seen = wait_for(&mut client, is_update("mountfs:///scratch/a.md"));
    }
    assert!(seen.iter().any(is_update("mountfs:///scratch/a.md")));
    assert!(client.finish().success());
}

#[test]
fn subscriptions_listen_of_2026_07_28_carries_the_subscription_id() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "a\n").unwrap();
    let disk = format!("/=disk:{}", dir.path().display());
    let mut client = StdioClient::spawn(&["--mount", &disk]);
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "mountfs-tests", "version": "0"}
    });
    let listen = client.send(
        "subscriptions/listen",
        json!({
            "_meta": meta,
            "notifications": {"resourceSubscriptions": ["mountfs:///a.txt"], "resourcesListChanged": true}
        }),
    );
    let acknowledged = wait_for(&mut client, |m| {
        m["method"] == "notifications/subscriptions/acknowledged"
    });
    let ack = acknowledged.last().unwrap();
    assert_eq!(
        ack["params"]["notifications"]["resourceSubscriptions"],
        json!(["mountfs:///a.txt"]),
        "{ack}"
    );
    std::fs::write(dir.path().join("a.txt"), "changed\n").unwrap();
    let seen = wait_for(&mut client, is_update("mountfs:///a.txt"));
    let update = seen.last().unwrap();
    assert_eq!(
        update["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], listen,
        "{update}"
    );
    client.notify(
        "notifications/cancelled",
        json!({"requestId": listen, "reason": "done"}),
    );
    assert!(client.finish().success());
}

#[test]
fn a_write_on_another_instance_reaches_a_subscriber_through_postgresql() {
    let Some(url) =
        crate::support::postgres_url("PostgreSQL change notifications across instances")
    else {
        return;
    };
    let namespace = format!("notify{}", std::process::id());
    let mount = format!("/shared/=store:postgres:{url},namespace={namespace}");
    let mut writer = StdioClient::start(&["--mount", "/=memory", "--mount", &mount]);
    writer.ok(
        "write_file",
        json!({"file_path": "/shared/plan.md", "content": "v1\n"}),
    );
    let mut subscriber = StdioClient::start(&["--mount", "/=memory", "--mount", &mount]);
    let subscribed = subscriber.request(
        "resources/subscribe",
        json!({"uri": "mountfs:///shared/plan.md"}),
    );
    assert!(subscribed.get("result").is_some(), "{subscribed}");
    // The listener connects when the first subscription starts; give it a moment to LISTEN.
    std::thread::sleep(Duration::from_millis(500));

    writer.ok("read_file", json!({"file_path": "/shared/plan.md"}));
    writer.ok(
        "edit_file",
        json!({"file_path": "/shared/plan.md", "old_string": "v1", "new_string": "v2"}),
    );
    wait_for(&mut subscriber, is_update("mountfs:///shared/plan.md"));
    writer.ok("delete", json!({"file_path": "/shared/plan.md"}));
    wait_for(&mut subscriber, |m| {
        m["method"] == "notifications/resources/list_changed"
    });
    assert!(writer.finish().success());
    assert!(subscriber.finish().success());
}

/// What is announced is what the change primitive recorded, not what the call's arguments
/// name: `undo_edit` of a move names the moved file's new path, yet the file it changes most is
/// the one it brings back at the old path; a call that fails changes nothing and announces
/// nothing.
#[test]
fn undoing_a_move_announces_the_path_it_brings_back_and_a_failed_call_announces_nothing() {
    let mut client = StdioClient::start(&["--mount", "/=memory"]);
    client.ok(
        "write_file",
        json!({"file_path": "/a.txt", "content": "one\n"}),
    );
    client.ok("move", json!({"source": "/a.txt", "destination": "/b.txt"}));
    let subscribed = client.request("resources/subscribe", json!({"uri": "mountfs:///a.txt"}));
    assert!(subscribed.get("result").is_some(), "{subscribed}");

    let mut seen = call_collecting(&mut client, "undo_edit", json!({"file_path": "/b.txt"}));
    assert_eq!(seen.last().unwrap()["result"]["isError"], false, "{seen:?}");
    if !seen.iter().any(is_update("mountfs:///a.txt")) {
        seen = wait_for(&mut client, is_update("mountfs:///a.txt"));
    }
    assert!(seen.iter().any(is_update("mountfs:///a.txt")), "{seen:?}");

    std::thread::sleep(Duration::from_millis(400));
    client.ok("read_file", json!({"file_path": "/a.txt"}));
    let failed = call_collecting(
        &mut client,
        "edit_file",
        json!({"file_path": "/a.txt", "old_string": "absent", "new_string": "x"}),
    );
    assert_eq!(
        failed.last().unwrap()["result"]["isError"],
        true,
        "{failed:?}"
    );
    let quiet = client.recv_within(Duration::from_secs(1));
    assert!(
        failed
            .iter()
            .chain(quiet.iter())
            .all(|m| !is_update("mountfs:///a.txt")(m)),
        "{failed:?} {quiet:?}"
    );
    assert!(client.finish().success());
}
