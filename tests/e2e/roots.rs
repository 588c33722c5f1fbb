//! MCP roots (issue 12): without `--mount`, a client offering roots gets each root directory
//! mounted (`/` for one, `/<name>/` for several), remounted on `notifications/roots/list_changed`;
//! with `--mount` the roots are never asked for. A client written here answers `roots/list`
//! itself, so every message of the exchange is checked.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::stdio::StdioClient;

/// A client declaring the roots capability, started on the default table (no `--mount`, data
/// and home directories temporary) or on `args`.
struct RootsClient {
    client: StdioClient,
    _data: tempfile::TempDir,
    home: tempfile::TempDir,
}

impl RootsClient {
    fn start(args: &[&str]) -> Self {
        Self::start_in(None, args)
    }

    fn start_in(dir: Option<&Path>, args: &[&str]) -> Self {
        let data = tempfile::tempdir().unwrap();
        let home = tempfile::tempdir().unwrap();
        let mut client = StdioClient::spawn_in(
            dir,
            args,
            &[("XDG_DATA_HOME", data.path()), ("HOME", home.path())],
        );
        let init = client.request(
            "initialize",
            crate::support::initialize_params(json!({"roots": {"listChanged": true}})),
        );
        assert!(init.get("result").is_some(), "initialize failed: {init}");
        client.notify("notifications/initialized", json!({}));
        Self {
            client,
            _data: data,
            home,
        }
    }

    /// Waits for the server's `roots/list` request and answers it with `roots`.
    fn answer_roots(&mut self, roots: Value) {
        let request = self.client.recv();
        assert_eq!(
            request["method"], "roots/list",
            "expected roots/list: {request}"
        );
        let answer = json!({"jsonrpc": "2.0", "id": request["id"], "result": {"roots": roots}});
        self.client.send_raw(&answer.to_string());
    }

    fn listing(&mut self, path: &str) -> Vec<String> {
        let text = self.client.ok("ls", json!({"path": path}));
        text.lines().map(str::to_owned).collect()
    }
}

fn uri(dir: &Path) -> String {
    format!("file://{}", dir.display())
}

/// Two directories with one file each, `alpha/a.txt` and `beta/b.txt`.
fn two_projects() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let top = tempfile::tempdir().unwrap();
    let alpha = top.path().join("alpha");
    let beta = top.path().join("beta project");
    std::fs::create_dir(&alpha).unwrap();
    std::fs::create_dir(&beta).unwrap();
    std::fs::write(alpha.join("a.txt"), "from alpha\n").unwrap();
    std::fs::write(beta.join("b.txt"), "from beta\n").unwrap();
    (top, alpha, beta)
}

#[test]
fn two_roots_are_both_mounted_and_list_changed_remounts_one_at_root() {
    let (_top, alpha, beta) = two_projects();
    let mut c = RootsClient::start(&[]);
    std::fs::write(c.client.cwd().join("cwd-only.txt"), "cwd\n").unwrap();
    // The second root's URI is percent-encoded and unnamed: its directory names its mount.
    let beta_uri = uri(&beta).replace(' ', "%20");
    c.answer_roots(json!([
        {"uri": uri(&alpha), "name": "alpha"},
        {"uri": beta_uri},
    ]));
    let root = c.listing("/");
    for mount in ["/alpha/", "/beta-project/", "/memories/", "/scratch/"] {
        assert!(
            root.contains(&mount.to_owned()),
            "{mount} missing: {root:?}"
        );
    }
    assert!(
        !root.iter().any(|line| line.contains("cwd-only")),
        "the roots replace the working directory: {root:?}"
    );
    let a = c
        .client
        .ok("read_file", json!({"file_path": "/alpha/a.txt"}));
    assert!(a.contains("from alpha"), "{a}");
    let b = c.listing("/beta-project");
    assert_eq!(b, vec!["/beta-project/b.txt (10 bytes)"], "{b:?}");
    // Writes land in the client's directory.
    c.client.ok(
        "write_file",
        json!({"file_path": "/alpha/new.txt", "content": "made\n"}),
    );
    assert_eq!(
        std::fs::read_to_string(alpha.join("new.txt")).unwrap(),
        "made\n"
    );
    c.client.ok(
        "write_file",
        json!({"file_path": "/scratch/keep.txt", "content": "kept\n"}),
    );

    // One root now: mounted at /, the memory mount keeps its contents.
    c.client
        .notify("notifications/roots/list_changed", json!({}));
    c.answer_roots(json!([{"uri": uri(&beta), "name": "beta"}]));
    let root = c.listing("/");
    assert!(root.contains(&"/b.txt (10 bytes)".to_owned()), "{root:?}");
    assert!(root.contains(&"/scratch/".to_owned()), "{root:?}");
    assert!(!root.iter().any(|line| line.contains("alpha")), "{root:?}");
    let kept = c
        .client
        .ok("read_file", json!({"file_path": "/scratch/keep.txt"}));
    assert!(kept.contains("kept"), "{kept}");
    let b = c.client.ok("read_file", json!({"file_path": "/b.txt"}));
    assert!(b.contains("from beta"), "{b}");
}

/// Started in `/` (as Claude Desktop on macOS starts servers), the default table mounts no
/// directory; a client's root is then mounted at `/`.
#[test]
fn started_in_the_file_system_root_a_single_root_is_mounted_at_root() {
    let (_top, alpha, _beta) = two_projects();
    let mut c = RootsClient::start_in(Some(Path::new("/")), &[]);
    c.answer_roots(json!([{"uri": uri(&alpha)}]));
    let root = c.listing("/");
    assert!(root.contains(&"/a.txt (11 bytes)".to_owned()), "{root:?}");
    assert!(root.contains(&"/memories/".to_owned()), "{root:?}");
    assert!(!root.iter().any(|line| line.contains("/etc")), "{root:?}");
    let a = c.client.ok("read_file", json!({"file_path": "/a.txt"}));
    assert!(a.contains("from alpha"), "{a}");
}

#[test]
fn unsafe_and_foreign_roots_are_refused_and_the_default_table_stays() {
    let mut c = RootsClient::start(&[]);
    std::fs::write(c.client.cwd().join("cwd-only.txt"), "cwd\n").unwrap();
    let home = uri(c.home.path());
    let above_home = uri(c.home.path().parent().unwrap());
    c.answer_roots(json!([
        {"uri": "file:///", "name": "everything"},
        {"uri": home},
        {"uri": above_home},
        {"uri": "https://example.com/repo"},
        {"uri": "file://server/share"},
    ]));
    let root = c.listing("/");
    assert!(
        root.contains(&"/cwd-only.txt (4 bytes)".to_owned()),
        "no usable root: the working directory stays mounted: {root:?}"
    );
    assert!(!root.iter().any(|line| line.contains("/etc")), "{root:?}");
}

#[test]
fn roots_never_widen_a_table_given_with_mount() {
    let served = tempfile::tempdir().unwrap();
    std::fs::write(served.path().join("given.txt"), "given\n").unwrap();
    let mount = format!("/=disk:{}", served.path().display());
    let mut c = RootsClient::start(&["--mount", &mount]);
    // The server never asks for the roots, and a change announced is ignored too.
    c.client
        .notify("notifications/roots/list_changed", json!({}));
    let id = c.client.send(
        "tools/call",
        json!({"name": "ls", "arguments": {"path": "/"}}),
    );
    let mut answer = None;
    while answer.is_none() {
        let message = c
            .client
            .recv_within(Duration::from_secs(5))
            .expect("an answer to ls");
        assert_ne!(
            message["method"], "roots/list",
            "roots asked for: {message}"
        );
        if message["id"] == id {
            answer = Some(message);
        }
    }
    let text = answer.unwrap()["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(text, "/given.txt (6 bytes)", "{text}");
    assert!(
        c.client.recv_within(Duration::from_millis(300)).is_none(),
        "nothing more is sent"
    );
}

/// The official MCP Python SDK offers two roots (`list_roots_callback`), then one.
#[test]
fn the_python_sdk_s_roots_are_mounted_and_followed() {
    let Some(mut python) = crate::support::python::sdk("roots with the official MCP Python SDK")
    else {
        return;
    };
    let (top, alpha, beta) = two_projects();
    let cwd = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/sdk_roots.py");
    let output = python
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_mountfs"))
        .arg(&alpha)
        .arg(&beta)
        .current_dir(cwd.path())
        .env("XDG_DATA_HOME", data.path())
        .env("HOME", home.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "python SDK roots check failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("roots ok"), "{stdout}");
    assert!(
        stdout.contains("another program's write under a root: resources/updated"),
        "{stdout}"
    );
    drop(top);
}

/// The inotify instances the server holds (one per watched directory tree).
fn inotify_instances(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .filter(|target| target.to_string_lossy().contains("inotify"))
        .count()
}

/// Messages until one announces `uri` (returned true), or none within `wait` (false).
fn announced_within(c: &mut RootsClient, uri: &str, wait: Duration) -> bool {
    let deadline = std::time::Instant::now() + wait;
    while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
        let Some(message) = c.client.recv_within(left) else {
            return false;
        };
        if message["method"] == "notifications/resources/updated" && message["params"]["uri"] == uri
        {
            return true;
        }
    }
    false
}

/// Reads messages until none comes for a second.
fn quiet(c: &mut RootsClient) {
    while c.client.recv_within(Duration::from_secs(1)).is_some() {}
}

/// Subscribes to `uri`; answered once the server's watchers (the roots' too) see changes.
fn subscribe(c: &mut RootsClient, uri: &str) {
    let subscribed = c.client.request("resources/subscribe", json!({"uri": uri}));
    assert!(subscribed.get("result").is_some(), "{subscribed}");
}

#[test]
fn another_program_s_changes_under_a_root_are_announced_and_the_watch_follows_the_roots() {
    let (_top, alpha, beta) = two_projects();
    let mut c = RootsClient::start(&[]);
    let pid = c.client.pid();
    c.answer_roots(json!([{"uri": uri(&alpha), "name": "alpha"}]));
    subscribe(&mut c, "mountfs:///a.txt");
    let watching = inotify_instances(pid);

    // Another program writes the file in the root directory: announced.
    std::fs::write(alpha.join("a.txt"), "changed by another program\n").unwrap();
    assert!(
        announced_within(&mut c, "mountfs:///a.txt", Duration::from_secs(10)),
        "a write under the root was not announced"
    );
    // The working directory the root replaced is not this session's /: a file of the same
    // name there is not announced (once the write above is announced in full: a write is
    // several events, coalesced into notices 250 ms apart).
    quiet(&mut c);
    std::fs::write(c.client.cwd().join("a.txt"), "in the working directory\n").unwrap();
    assert!(
        !announced_within(&mut c, "mountfs:///a.txt", Duration::from_millis(1500)),
        "a change outside the roots was announced as /a.txt"
    );

    // The roots change: beta at / is watched, alpha no longer.
    c.client
        .notify("notifications/roots/list_changed", json!({}));
    c.answer_roots(json!([{"uri": uri(&beta), "name": "beta"}]));
    subscribe(&mut c, "mountfs:///a.txt");
    // The old root's watcher is dropped on the hub's own thread: wait for it (bounded).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while inotify_instances(pid) != watching && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        inotify_instances(pid),
        watching,
        "the old root's watch ends when the new root's begins"
    );
    quiet(&mut c);
    std::fs::write(alpha.join("a.txt"), "alpha is no longer mounted\n").unwrap();
    assert!(
        !announced_within(&mut c, "mountfs:///a.txt", Duration::from_millis(1500)),
        "a change in a root no longer mounted was announced"
    );
    std::fs::write(beta.join("a.txt"), "new in beta\n").unwrap();
    assert!(
        announced_within(&mut c, "mountfs:///a.txt", Duration::from_secs(10)),
        "a file created under the new root was not announced"
    );
    // This session's own write under its root is announced to it too.
    c.client.ok("read_file", json!({"file_path": "/a.txt"}));
    c.client.ok(
        "write_file",
        json!({"file_path": "/a.txt", "content": "by the tool\n"}),
    );
    assert!(announced_within(
        &mut c,
        "mountfs:///a.txt",
        Duration::from_secs(10)
    ));
    assert!(c.client.finish().success());
}
