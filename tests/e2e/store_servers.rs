//! Store mounts seen through real `mountfs` processes over stdio (issue 4's acceptance points):
//! a SQLite file outlives the process that wrote it; two processes sharing one PostgreSQL
//! namespace lose no update; an unreachable database is a tool error while the other mounts keep
//! working; a database that cannot be opened stops start-up with a clear message; the default
//! table puts `/memories/` in the user's data directory.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::support::{McpServer, PostgresNamespace, postgres_url};
use mountfs::storage::store::{Namespace, PostgresStore, SqliteStore, Store};
use serde_json::json;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

fn mounts(specs: &[String]) -> Vec<String> {
    specs
        .iter()
        .flat_map(|spec| ["--mount".to_owned(), spec.clone()])
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_files_outlive_the_server_process_with_their_created_time() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("data/memories.db");
    let args = mounts(&[
        "/=memory".to_owned(),
        format!("/memories/=store:sqlite:{}", db.display()),
    ]);

    let first = McpServer::start(&args).await;
    first
        .ok(
            "write_file",
            json!({"file_path": "/memories/notes/a.md", "content": "remember this\n"}),
        )
        .await;
    first.stop().await;

    // The created time as the store keeps it (file_info shows the same value).
    let ns = Namespace::new("default").unwrap();
    let created = {
        let store = SqliteStore::open(&db).await.unwrap();
        store
            .head(&ns, "/notes/a.md")
            .await
            .unwrap()
            .unwrap()
            .created_at
    };

    let second = McpServer::start(&args).await;
    let read = second
        .ok("read_file", json!({"file_path": "/memories/notes/a.md"}))
        .await;
    assert!(read.text.contains("remember this"), "{}", read.text);
    let listed = second.ok("ls", json!({"path": "/memories/notes"})).await;
    assert_eq!(listed.text, "/memories/notes/a.md (14 bytes)");
    second
        .ok(
            "edit_file",
            json!({"file_path": "/memories/notes/a.md", "old_string": "this", "new_string": "that"}),
        )
        .await;
    second.stop().await;

    let store = SqliteStore::open(&db).await.unwrap();
    let item = store.get(&ns, "/notes/a.md").await.unwrap().unwrap();
    assert_eq!(item.content, b"remember that\n");
    assert_eq!(item.meta.created_at, created, "created time survives");
    assert!(item.meta.modified_at > created);
}

/// Two processes, one PostgreSQL namespace, one shared file of 3,200 lines. Each process runs 8
/// concurrent clients (8 requests in flight on its stdio session), each applying 200 edits to
/// its own lines and re-reading on a stale error, as an agent would.
///
/// Each edit's `old_string` is untouched by the other process's edits, so stale-but-safe edits
/// land on the current content: stale errors (agent re-reads) fall from ~5,700 for 3,200 edits
/// (before stale-safe edits, 2026-11-23) to near zero; the server's own retries after a lost
/// compare-and-swap are counted from `write_attempts`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_servers_sharing_a_postgres_namespace_lose_no_update() {
    const PROCESSES: usize = 2;
    const CLIENTS: usize = 8;
    const EDITS: usize = 200;
    const LINES: usize = PROCESSES * CLIENTS * EDITS;
    let Some(url) = postgres_url("two_servers_sharing_a_postgres_namespace_lose_no_update") else {
        return;
    };
    let ns = PostgresNamespace::new(&url, "t-share");
    let args = mounts(&[
        "/=memory".to_owned(),
        format!("/team/=store:postgres:{url},namespace={}", ns.name),
    ]);
    let mut servers = Vec::new();
    for _ in 0..PROCESSES {
        servers.push(Arc::new(McpServer::start(&args).await));
    }
    let initial: String = (0..LINES).map(|i| format!("line {i:04}: todo\n")).collect();
    servers[0]
        .ok(
            "write_file",
            json!({"file_path": "/team/shared.txt", "content": initial}),
        )
        .await;

    let started = Instant::now();
    let mut workers: Vec<(usize, JoinHandle<(usize, u64)>)> = Vec::new();
    for (p, server) in servers.iter().enumerate() {
        for c in 0..CLIENTS {
            let server = server.clone();
            workers.push((
                p,
                tokio::spawn(async move {
                    let mut stale = 0;
                    let mut retries = 0;
                    let window = json!({"file_path": "/team/shared.txt", "limit": 1});
                    server.ok("read_file", window.clone()).await;
                    for k in 0..EDITS {
                        let line = (p * CLIENTS + c) * EDITS + k;
                        let edit = json!({
                            "file_path": "/team/shared.txt",
                            "old_string": format!("line {line:04}: todo"),
                            "new_string": format!("line {line:04}: done by p{p} c{c}"),
                        });
                        loop {
                            let answer = server.call("edit_file", edit.clone()).await;
                            if !answer.is_error {
                                let attempts = answer.structured["write_attempts"]
                                    .as_u64()
                                    .expect("write_attempts");
                                retries += attempts - 1;
                                break;
                            }
                            assert!(
                                answer
                                    .text
                                    .starts_with("Error: File has been modified since it was read"),
                                "unexpected: {}",
                                answer.text
                            );
                            stale += 1;
                            server.ok("read_file", window.clone()).await;
                        }
                    }
                    (stale, retries)
                }),
            ));
        }
    }
    let mut stale_by_process = [0usize; PROCESSES];
    let mut retries_by_process = [0u64; PROCESSES];
    for (p, worker) in workers {
        let (stale, retries) = worker.await.unwrap();
        stale_by_process[p] += stale;
        retries_by_process[p] += retries;
    }
    let elapsed = started.elapsed();

    // The whole file, straight from the database (a read_file answer is capped at 80,000
    // characters).
    let store = PostgresStore::connect(&url).await.unwrap();
    let item = store
        .get(&Namespace::new(&ns.name).unwrap(), "/shared.txt")
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8(item.content).unwrap();
    let done = text.matches(": done by p").count();
    let todo = text.matches(": todo").count();
    println!(
        "{LINES} edits in {elapsed:?}; stale errors per process: {stale_by_process:?}; \
         server retries after a lost compare-and-swap per process: {retries_by_process:?}; \
         done {done}, todo {todo}"
    );
    assert_eq!((done, todo), (LINES, 0), "every edit landed, none lost");
    for p in 0..PROCESSES {
        for c in 0..CLIENTS {
            for k in 0..EDITS {
                let line = (p * CLIENTS + c) * EDITS + k;
                let expected = format!("line {line:04}: done by p{p} c{c}\n");
                assert!(text.contains(&expected), "missing: {expected}");
            }
        }
    }
    let stale: usize = stale_by_process.iter().sum();
    let retries: u64 = retries_by_process.iter().sum();
    assert!(
        retries > 0,
        "no write was retried: the processes did not race"
    );
    assert!(
        stale * 100 <= LINES,
        "{stale} stale errors for {LINES} edits: edits whose text is untouched should land"
    );
    for server in servers {
        Arc::try_unwrap(server).unwrap().stop().await;
    }
}

/// A TCP relay to the test PostgreSQL server that can be cut (every connection dropped, the
/// port closed) and restored on the same port: an outage after start-up. Also used by the
/// audit log's outage test (audit.rs).
pub(crate) struct Relay {
    pub(crate) port: u16,
    pub(crate) target: SocketAddr,
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Relay {
    pub(crate) async fn start(target: SocketAddr, port: u16) -> Self {
        let listener = TcpListener::bind(("127.0.0.1", port)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let tasks: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let registry = tasks.clone();
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let relay = tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                registry.lock().unwrap().push(relay);
            }
        });
        tasks.lock().unwrap().push(accept);
        Self {
            port,
            target,
            tasks,
        }
    }

    pub(crate) fn cut(&self) {
        for task in self.tasks.lock().unwrap().drain(..) {
            task.abort();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_database_is_a_tool_error_and_other_mounts_keep_working() {
    let Some(url) = postgres_url("an_unreachable_database_is_a_tool_error") else {
        return;
    };
    let config: tokio_postgres::Config = url.parse().unwrap();
    let Some(tokio_postgres::config::Host::Tcp(host)) = config.get_hosts().first().cloned() else {
        crate::support::skips::record(
            "an unreachable database (relay needs TCP)",
            &format!("{} is not a TCP address", crate::support::POSTGRES_ENV),
        );
        return;
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let target = tokio::net::lookup_host((host.as_str(), port))
        .await
        .unwrap()
        .next()
        .unwrap();
    let relay = Relay::start(target, 0).await;
    let user = config.get_user().unwrap_or("postgres");
    let password = config
        .get_password()
        .map(|p| format!(":{}", String::from_utf8_lossy(p)))
        .unwrap_or_default();
    let db = config.get_dbname().unwrap_or("postgres");
    let relayed = format!("postgres://{user}{password}@127.0.0.1:{}/{db}", relay.port);
    let ns = PostgresNamespace::new(&url, "t-outage");
    let server = McpServer::start(&mounts(&[
        "/=memory".to_owned(),
        format!("/shared/=store:postgres:{relayed},namespace={}", ns.name),
    ]))
    .await;
    server
        .ok(
            "write_file",
            json!({"file_path": "/shared/a.md", "content": "kept\n"}),
        )
        .await;

    relay.cut();
    let listed = server.call("ls", json!({"path": "/shared"})).await;
    assert!(listed.is_error, "{}", listed.text);
    let expected_start = format!(
        "Error: mount unavailable: PostgreSQL at 127.0.0.1:{}/{db}: ",
        relay.port
    );
    assert!(listed.text.starts_with(&expected_start), "{}", listed.text);
    assert!(
        listed
            .text
            .ends_with("Other mounts still work; retry later"),
        "{}",
        listed.text
    );
    let read = server
        .call("read_file", json!({"file_path": "/shared/a.md"}))
        .await;
    assert!(
        read.is_error && read.text.starts_with(&expected_start),
        "{}",
        read.text
    );
    server
        .ok(
            "write_file",
            json!({"file_path": "/local.md", "content": "still here\n"}),
        )
        .await;
    let root = server.ok("ls", json!({"path": "/"})).await;
    assert_eq!(root.text, "/local.md (11 bytes)\n/shared/");

    // The database comes back on the same address: the mount works again, nothing lost.
    let restored = Relay::start(relay.target, relay.port).await;
    let read = server
        .ok("read_file", json!({"file_path": "/shared/a.md"}))
        .await;
    assert!(read.text.contains("kept"), "{}", read.text);
    restored.cut();
    server.stop().await;
}

/// A relay to the test PostgreSQL server and the URL reaching the database through it; `None`
/// (with the skip recorded) when the server is not on TCP.
pub(crate) async fn relayed_postgres(url: &str) -> Option<(Relay, String, String)> {
    let config: tokio_postgres::Config = url.parse().unwrap();
    let Some(tokio_postgres::config::Host::Tcp(host)) = config.get_hosts().first().cloned() else {
        crate::support::skips::record(
            "an unreachable database (relay needs TCP)",
            &format!("{} is not a TCP address", crate::support::POSTGRES_ENV),
        );
        return None;
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let target = tokio::net::lookup_host((host.as_str(), port))
        .await
        .unwrap()
        .next()
        .unwrap();
    let relay = Relay::start(target, 0).await;
    let user = config.get_user().unwrap_or("postgres");
    let password = config
        .get_password()
        .map(|p| format!(":{}", String::from_utf8_lossy(p)))
        .unwrap_or_default();
    let db = config.get_dbname().unwrap_or("postgres").to_owned();
    let relayed = format!("postgres://{user}{password}@127.0.0.1:{}/{db}", relay.port);
    Some((relay, relayed, db))
}

/// Issue 17: grep, glob and ls over `/` with a PostgreSQL mount whose connection is cut return
/// the disk and memory mounts' results plus a note naming the mount that is down; only a search
/// of the down mount's own path fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_over_several_mounts_skips_a_down_store_with_a_note() {
    let Some(url) = postgres_url("a_search_over_several_mounts_skips_a_down_store") else {
        return;
    };
    let Some((relay, relayed, db)) = relayed_postgres(&url).await else {
        return;
    };
    let disk = tempfile::tempdir().unwrap();
    std::fs::write(disk.path().join("disk.md"), "needle on disk\n").unwrap();
    let ns = PostgresNamespace::new(&url, "t-skip-down");
    let server = McpServer::start(&mounts(&[
        format!("/=disk:{}", disk.path().display()),
        "/scratch/=memory".to_owned(),
        format!("/shared/=store:postgres:{relayed},namespace={}", ns.name),
    ]))
    .await;
    for path in ["/scratch/mem.md", "/shared/db.md"] {
        server
            .ok(
                "write_file",
                json!({"file_path": path, "content": "needle in a mount\n"}),
            )
            .await;
    }
    let all = server.ok("grep", json!({"pattern": "needle"})).await;
    assert_eq!(all.text, "/disk.md\n/scratch/mem.md\n/shared/db.md");

    relay.cut();
    let down = format!(
        "[skipped /shared: this mount could not be searched: Error: mount unavailable: PostgreSQL at 127.0.0.1:{}/{db}: ",
        relay.port
    );
    let grep = server.ok("grep", json!({"pattern": "needle"})).await;
    eprintln!("grep over / with /shared/ down:\n{}", grep.text);
    let (note, hits) = grep.text.split_once('\n').unwrap();
    assert!(note.starts_with(&down), "{}", grep.text);
    assert!(
        note.ends_with("Other mounts still work; retry later]"),
        "{}",
        grep.text
    );
    assert_eq!(hits, "/disk.md\n/scratch/mem.md");
    let counted = server
        .ok("grep", json!({"pattern": "needle", "output_mode": "count"}))
        .await;
    assert!(
        counted.text.starts_with(&down)
            && counted.text.ends_with("\n/disk.md: 1\n/scratch/mem.md: 1"),
        "{}",
        counted.text
    );
    let lines = server
        .ok(
            "grep",
            json!({"pattern": "needle", "output_mode": "content"}),
        )
        .await;
    assert!(
        lines.text.starts_with(&down)
            && lines.text.ends_with(
                "\n/disk.md:\n  1: needle on disk\n/scratch/mem.md:\n  1: needle in a mount"
            ),
        "{}",
        lines.text
    );
    let glob = server.ok("glob", json!({"pattern": "**/*.md"})).await;
    let (note, hits) = glob.text.split_once('\n').unwrap();
    assert!(note.starts_with(&down), "{}", glob.text);
    let mut hits: Vec<&str> = hits.lines().collect();
    hits.sort_unstable();
    assert_eq!(hits, vec!["/disk.md", "/scratch/mem.md"]);
    let listed = server.ok("ls", json!({"path": "/"})).await;
    assert_eq!(
        listed.text, "/disk.md (15 bytes)\n/scratch/\n/shared/",
        "ls of / names the mount point without asking the store"
    );
    // The down mount's own path: the call fails, saying so.
    for (tool, args) in [
        ("grep", json!({"pattern": "needle", "path": "/shared"})),
        ("glob", json!({"pattern": "*", "path": "/shared"})),
        ("ls", json!({"path": "/shared"})),
    ] {
        let failed = server.call(tool, args).await;
        assert!(
            failed.is_error
                && failed
                    .text
                    .starts_with("Error: mount unavailable: PostgreSQL at "),
            "{tool}: {}",
            failed.text
        );
    }
    server.stop().await;
}

/// A `mountfs` run with `args` that must stop at start-up: its exit code and stderr.
pub(crate) async fn start_up_error(args: &[String]) -> (Option<i32>, String) {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_mountfs"))
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .unwrap();
    assert!(output.stdout.is_empty(), "nothing on stdout");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test]
async fn a_database_that_cannot_be_opened_stops_start_up_with_a_clear_message() {
    let (code, stderr) = start_up_error(&mounts(&[
        "/=memory".to_owned(),
        "/team/=store:postgres:postgres://agent:hunter2@127.0.0.1:1/db".to_owned(),
    ]))
    .await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "mountfs: cannot open mount /team/: store unavailable: PostgreSQL at 127.0.0.1:1/db: "
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("hunter2"), "{stderr}");

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("blocker"), b"a file, not a directory").unwrap();
    let file = dir.path().join("blocker/memories.db");
    let (code, stderr) = start_up_error(&mounts(&[format!(
        "/memories/=store:sqlite:{}",
        file.display()
    )]))
    .await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("mountfs: cannot open mount /memories/: store unavailable: cannot create the SQLite database's directory"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_table_keeps_memories_in_the_user_data_directory() {
    let data = tempfile::tempdir().unwrap();
    let env: [(&str, &Path); 2] = [("XDG_DATA_HOME", data.path()), ("HOME", data.path())];
    // The default `/` is the working directory: give it an empty one, not the repository.
    let workspace = tempfile::tempdir().unwrap();
    let server = McpServer::start_in(Some(workspace.path()), &[], &env).await;
    let root = server.ok("ls", json!({"path": "/"})).await;
    assert!(root.text.contains("/memories/"), "{}", root.text);
    server
        .ok(
            "write_file",
            json!({"file_path": "/memories/me.md", "content": "likes tea\n"}),
        )
        .await;
    server.stop().await;
    let db = data.path().join("mountfs/memories.db");
    assert!(
        db.is_file(),
        "the default store lives at $XDG_DATA_HOME/mountfs/memories.db"
    );
    let store = SqliteStore::open(&db).await.unwrap();
    let item = store
        .get(&Namespace::new("default").unwrap(), "/me.md")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(item.content, b"likes tea\n");
}
