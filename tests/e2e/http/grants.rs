//! Per-principal grants (issue 43): alice, bob and carol on one HTTP server, each granted other
//! mounts — through `--grant`, a `grant` line of the token file and a `--grant-file` policy —
//! see exactly their grants on every surface: tools (`ls /`, `glob`, `grep`, reads, writes,
//! `move` and `apply_patch` across mounts), resources, subscriptions, `history`, overlay
//! review, `execute`'s sandbox, large results and `tools/list`. A path outside the grants
//! answers as one that does not exist; a read-only grant refuses changes naming the grant.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::client::{Client, Protocol, Server};

const ALICE: &str = "alice-grant-token-0123456789";
const BOB: &str = "bob-grant-token-0123456789ab";
const CAROL: &str = "carol-grant-token-0123456789";

struct Team {
    server: Server,
    a: std::path::PathBuf,
    b: std::path::PathBuf,
    shared: std::path::PathBuf,
    _dirs: Vec<tempfile::TempDir>,
}

/// `/a/` alice's, `/b/` bob's, `/shared/` alice's and read-only bob's, `/docs/` read-only to
/// everyone, `/o/` an overlay mount of alice's, `/scratch/` memory for alice and bob. carol
/// holds only the read-only docs.
async fn team(extra: &[&str]) -> Team {
    // Not under /tmp, which execute's sandbox replaces with its own: the mounts' host
    // directories must be where a command could otherwise read them.
    let root = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let logs = tempfile::tempdir().unwrap();
    let dir = |name: &str| {
        let dir = root.path().join(name);
        std::fs::create_dir(&dir).unwrap();
        dir
    };
    let (a, b, shared, docs, lower) = (dir("a"), dir("b"), dir("shared"), dir("docs"), dir("o"));
    std::fs::write(a.join("secret.txt"), "alice-secret needle\n").unwrap();
    std::fs::write(b.join("plan.txt"), "bob-plan needle\n").unwrap();
    std::fs::write(shared.join("common.txt"), "shared needle\n").unwrap();
    std::fs::write(docs.join("guide.md"), "docs needle\n").unwrap();
    std::fs::write(lower.join("base.txt"), "base\n").unwrap();
    let tokens = root.path().join("tokens");
    std::fs::write(
        &tokens,
        format!(
            "alice {ALICE}\nbob {BOB}\ncarol {CAROL}\n# bob's grant lives with his token\ngrant bob=/b/,/shared/:ro,/scratch/\n"
        ),
    )
    .unwrap();
    let policy = root.path().join("policy");
    std::fs::write(&policy, "# everyone reads the docs\ngrant *=/docs/:ro\n").unwrap();
    let mount = |prefix: &str, dir: &std::path::Path, tail: &str| {
        format!("{prefix}=disk:{}{tail}", dir.display())
    };
    let audit = format!("sqlite:{}", logs.path().join("audit.db").display());
    let mut args: Vec<String> = [
        "--token-file".to_owned(),
        tokens.display().to_string(),
        "--grant-file".to_owned(),
        policy.display().to_string(),
        "--grant".to_owned(),
        "alice=/a/,/shared/:rw,/o/,/scratch/".to_owned(),
        "--mount".to_owned(),
        mount("/a/", &a, ""),
        "--mount".to_owned(),
        mount("/b/", &b, ""),
        "--mount".to_owned(),
        mount("/shared/", &shared, ""),
        "--mount".to_owned(),
        mount("/docs/", &docs, ""),
        "--mount".to_owned(),
        mount("/o/", &lower, ",overlay"),
        "--mount".to_owned(),
        "/scratch/=memory".to_owned(),
        "--audit".to_owned(),
        audit,
    ]
    .into_iter()
    .collect();
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = Server::start(&args, &[]).await;
    Team {
        server,
        a,
        b,
        shared,
        _dirs: vec![root, logs],
    }
}

async fn session(server: &Server, token: &str) -> Client {
    let mut client = Client::new(&server.url, Some(token), Protocol::Session);
    let reply = client.initialize().await;
    assert_eq!(reply.status, 200, "{}\n{}", reply.body, server.stderr());
    client
}

/// The answer of a tool that must fail as a path that does not exist.
fn assert_not_found(what: &str, answer: &super::client::ToolAnswer) {
    assert!(answer.is_error, "{what}: {}", answer.text);
    let lower = answer.text.to_lowercase();
    assert!(
        lower.contains("not found")
            || lower.contains("does not exist")
            || lower.contains("no such"),
        "{what}: {}",
        answer.text
    );
    for revealing in ["grant", "forbidden", "permission", "denied", "read-only"] {
        assert!(
            !lower.contains(revealing),
            "{what} reveals: {}",
            answer.text
        );
    }
}

#[tokio::test]
async fn each_principal_sees_exactly_its_grants_through_every_tool() {
    let team = team(&[]).await;
    let mut alice = session(&team.server, ALICE).await;
    let mut bob = session(&team.server, BOB).await;
    let mut bob_stateless = Client::new(&team.server.url, Some(BOB), Protocol::Stateless);

    // `ls /`: only the granted mounts.
    let listed = bob.call("ls", json!({"path": "/"})).await;
    assert!(!listed.is_error, "{}", listed.text);
    for shown in ["b", "shared", "docs", "scratch"] {
        assert!(listed.text.contains(shown), "{shown}: {}", listed.text);
    }
    for hidden in ["a/", "/a", "o/", "/o"] {
        assert!(!listed.text.contains(hidden), "{hidden}: {}", listed.text);
    }
    let listed = alice.call("ls", json!({"path": "/"})).await;
    assert!(
        listed.text.contains("a/") || listed.text.contains("/a"),
        "{}",
        listed.text
    );
    assert!(!listed.text.contains("b/"), "{}", listed.text);

    // Outside paths are not found, for reads and writes alike, session and stateless.
    for client in [&mut bob, &mut bob_stateless] {
        assert_not_found(
            "read",
            &client
                .call("read_file", json!({"file_path": "/a/secret.txt"}))
                .await,
        );
        assert_not_found(
            "write",
            &client
                .call(
                    "write_file",
                    json!({"file_path": "/a/secret.txt", "content": "bob was here\n"}),
                )
                .await,
        );
        assert_not_found("ls", &client.call("ls", json!({"path": "/a"})).await);
        assert_not_found(
            "file_info",
            &client
                .call("file_info", json!({"file_path": "/a/secret.txt"}))
                .await,
        );
        assert_not_found(
            "delete",
            &client
                .call("delete", json!({"file_path": "/a/secret.txt"}))
                .await,
        );
        assert_not_found(
            "write at the root",
            &client
                .call(
                    "write_file",
                    json!({"file_path": "/loose.txt", "content": "x\n"}),
                )
                .await,
        );
    }
    assert_eq!(
        std::fs::read_to_string(team.a.join("secret.txt")).unwrap(),
        "alice-secret needle\n"
    );

    // glob and grep over `/` search only the granted mounts.
    let grep = bob
        .call(
            "grep",
            json!({"pattern": "needle", "path": "/", "output_mode": "content"}),
        )
        .await;
    assert!(!grep.is_error, "{}", grep.text);
    assert!(grep.text.contains("bob-plan"), "{}", grep.text);
    assert!(grep.text.contains("docs needle"), "{}", grep.text);
    assert!(!grep.text.contains("alice-secret"), "{}", grep.text);
    let glob = bob
        .call("glob", json!({"pattern": "**/*", "path": "/"}))
        .await;
    assert!(glob.text.contains("/b/plan.txt"), "{}", glob.text);
    assert!(!glob.text.contains("secret"), "{}", glob.text);
    assert!(!glob.text.contains("/o/"), "{}", glob.text);
    assert_not_found(
        "glob in a hidden mount",
        &bob.call("glob", json!({"pattern": "*", "path": "/a"}))
            .await,
    );
    assert_not_found(
        "grep in a hidden mount",
        &bob.call("grep", json!({"pattern": "needle", "path": "/a"}))
            .await,
    );

    // A read-only grant reads, and refuses every change naming the grant.
    let read = bob
        .call("read_file", json!({"file_path": "/shared/common.txt"}))
        .await;
    assert!(read.text.contains("shared needle"), "{}", read.text);
    let refused = bob
        .call(
            "edit_file",
            json!({"file_path": "/shared/common.txt", "old_string": "shared", "new_string": "bob"}),
        )
        .await;
    assert!(refused.is_error, "{}", refused.text);
    assert!(refused.text.contains("bob=/shared/:ro"), "{}", refused.text);
    let refused = bob
        .call(
            "write_file",
            json!({"file_path": "/docs/new.md", "content": "x\n"}),
        )
        .await;
    assert!(refused.text.contains("*=/docs/:ro"), "{}", refused.text);
    let refused = bob
        .call(
            "move",
            json!({"source": "/shared/common.txt", "destination": "/b/stolen.txt"}),
        )
        .await;
    assert!(refused.text.contains("bob=/shared/:ro"), "{}", refused.text);
    assert!(team.shared.join("common.txt").exists());

    // move and apply_patch across mounts: a hidden side is not found, a read-only one refused.
    assert_not_found(
        "move out of a hidden mount",
        &bob.call(
            "move",
            json!({"source": "/a/secret.txt", "destination": "/b/got.txt"}),
        )
        .await,
    );
    let moved = bob
        .call(
            "move",
            json!({"source": "/b/plan.txt", "destination": "/a/plan.txt"}),
        )
        .await;
    assert!(moved.is_error, "{}", moved.text);
    assert!(team.b.join("plan.txt").exists());
    assert!(!team.a.join("plan.txt").exists());
    let patch = "--- /dev/null\n+++ /b/new.txt\n@@ -0,0 +1 @@\n+mine\n--- /dev/null\n+++ /a/planted.txt\n@@ -0,0 +1 @@\n+planted\n";
    let patched = bob.call("apply_patch", json!({"patch": patch})).await;
    assert!(patched.is_error, "{}", patched.text);
    assert!(!team.a.join("planted.txt").exists());
    assert!(
        !team.b.join("new.txt").exists(),
        "a refused patch changes nothing"
    );

    // alice, granted rw, changes /shared/ and her own mount.
    let wrote = alice
        .call(
            "write_file",
            json!({"file_path": "/shared/from-alice.txt", "content": "hi\n"}),
        )
        .await;
    assert!(!wrote.is_error, "{}", wrote.text);
}

#[tokio::test]
async fn resources_history_overlay_and_tools_list_follow_the_grants() {
    let team = team(&[]).await;
    let mut alice = session(&team.server, ALICE).await;
    let mut bob = session(&team.server, BOB).await;
    let mut carol = session(&team.server, CAROL).await;

    // The instructions name only the mounts bob sees.
    let mut fresh = Client::new(&team.server.url, Some(BOB), Protocol::Session);
    let reply = fresh.initialize().await;
    assert!(reply.body.contains("/b/ = disk"), "{}", reply.body);
    assert!(
        reply.body.contains("/shared/ = disk (read-only)"),
        "{}",
        reply.body
    );
    assert!(!reply.body.contains("/a/ = "), "{}", reply.body);
    assert!(!reply.body.contains("/o/ = "), "{}", reply.body);

    // resources/list and resources/read.
    let listed = bob.request("resources/list", json!({})).await;
    let text = listed.to_string();
    assert!(text.contains("mountfs:///b/plan.txt"), "{text}");
    assert!(!text.contains("secret"), "{text}");
    let read = bob
        .request_reply("resources/read", json!({"uri": "mountfs:///a/secret.txt"}))
        .await;
    assert!(!read.body.contains("alice-secret"), "{}", read.body);
    assert!(read.message().get("error").is_some(), "{}", read.body);
    let read = bob
        .request("resources/read", json!({"uri": "mountfs:///b/plan.txt"}))
        .await;
    assert!(read.to_string().contains("bob-plan"), "{read}");

    // history: bob sees his own and the changes of mounts he is granted, never /a/.
    let wrote = alice
        .call(
            "write_file",
            json!({"file_path": "/a/diary.md", "content": "alice-diary\n"}),
        )
        .await;
    assert!(!wrote.is_error, "{}", wrote.text);
    let wrote = alice
        .call(
            "write_file",
            json!({"file_path": "/shared/notes.md", "content": "shared-notes\n"}),
        )
        .await;
    assert!(!wrote.is_error, "{}", wrote.text);
    let hers = alice.call("history", json!({"limit": 50})).await;
    assert!(hers.text.contains("/a/diary.md"), "{}", hers.text);
    let diary_id = hers
        .text
        .lines()
        .find(|l| l.contains("/a/diary.md"))
        .and_then(|l| {
            l.trim_start_matches('#')
                .split(' ')
                .next()?
                .parse::<i64>()
                .ok()
        })
        .unwrap();
    let his = bob.call("history", json!({"limit": 50})).await;
    assert!(his.text.contains("/shared/notes.md"), "{}", his.text);
    assert!(!his.text.contains("diary"), "{}", his.text);
    let detail = bob.call("history", json!({"id": diary_id})).await;
    assert!(detail.is_error, "{}", detail.text);
    assert!(!detail.text.contains("alice-diary"), "{}", detail.text);

    // Overlay review: alice's /o/ is hers; bob has no overlay to review.
    let wrote = alice
        .call(
            "write_file",
            json!({"file_path": "/o/draft.txt", "content": "draft\n"}),
        )
        .await;
    assert!(!wrote.is_error, "{}", wrote.text);
    let changes = alice.call("changes", json!({})).await;
    assert!(changes.text.contains("draft.txt"), "{}", changes.text);
    let changes = bob.call("changes", json!({})).await;
    assert!(!changes.text.contains("draft"), "{}", changes.text);
    let commit = bob.call("commit", json!({"path": "/o"})).await;
    assert!(commit.is_error, "{}", commit.text);

    // tools/list: carol, with only a read-only grant, is offered the reading tools.
    let tools = |message: &Value| -> Vec<String> {
        message["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let hers = tools(&carol.request("tools/list", json!({})).await);
    assert!(hers.contains(&"read_file".to_owned()), "{hers:?}");
    assert!(hers.contains(&"grep".to_owned()), "{hers:?}");
    for changing in ["write_file", "edit_file", "delete", "move", "apply_patch"] {
        assert!(!hers.contains(&changing.to_owned()), "{changing}: {hers:?}");
    }
    let his = tools(&bob.request("tools/list", json!({})).await);
    assert!(his.contains(&"write_file".to_owned()), "{his:?}");
    let read = carol
        .call("read_file", json!({"file_path": "/docs/guide.md"}))
        .await;
    assert!(read.text.contains("docs needle"), "{}", read.text);
}

#[tokio::test]
async fn change_notifications_of_hidden_mounts_never_reach_a_principal() {
    let team = team(&[]).await;
    let mut alice = session(&team.server, ALICE).await;
    let mut bob = Client::new(&team.server.url, Some(BOB), Protocol::Session);
    assert_eq!(bob.initialize().await.status, 200);
    let mut events =
        super::principals::event_stream(&team.server, BOB, bob.session.as_deref().unwrap()).await;
    let subscribed = bob
        .request("resources/subscribe", json!({"uri": "mountfs:///"}))
        .await;
    assert!(subscribed.get("result").is_some(), "{subscribed}");
    for (path, content) in [
        ("/a/hidden-one.txt", "x\n"),
        ("/o/hidden-two.txt", "x\n"),
        ("/shared/visible.txt", "x\n"),
    ] {
        let wrote = alice
            .call("write_file", json!({"file_path": path, "content": content}))
            .await;
        assert!(!wrote.is_error, "{path}: {}", wrote.text);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    loop {
        let left = deadline
            .checked_duration_since(Instant::now())
            .unwrap_or_else(|| panic!("bob never heard of /shared/visible.txt: {seen:?}"));
        let Ok(Some(message)) = tokio::time::timeout(left, events.recv()).await else {
            panic!("bob never heard of /shared/visible.txt: {seen:?}");
        };
        let done = message["params"]["uri"] == "mountfs:///shared/visible.txt";
        seen.push(message);
        if done {
            break;
        }
    }
    while let Ok(Some(message)) =
        tokio::time::timeout(Duration::from_millis(500), events.recv()).await
    {
        seen.push(message);
    }
    let all = serde_json::to_string(&seen).unwrap();
    assert!(!all.contains("hidden-one"), "{all}");
    assert!(!all.contains("hidden-two"), "{all}");
}

#[tokio::test]
async fn execute_binds_only_the_granted_disk_mounts_and_large_results_stay_in_scratch() {
    if mountfs::storage::exec::sandbox::probe().is_err() {
        crate::skips::record("the execute sandbox (Landlock)", "probe failed");
        return;
    }
    let team = team(&["--allow-exec"]).await;
    let mut bob = session(&team.server, BOB).await;
    let command = format!(
        "cat {a}/secret.txt; cat {s}/common.txt; touch {s}/bob-was-here; touch {b}/ran && echo ran-ok",
        a = team.a.display(),
        s = team.shared.display(),
        b = team.b.display(),
    );
    let run = bob
        .call("execute", json!({"command": command, "cwd": "/b"}))
        .await;
    assert!(!run.is_error, "{}", run.text);
    let stdout = run.structured["stdout"].as_str().unwrap_or_default();
    assert!(stdout.contains("shared needle"), "{}", run.text);
    assert!(stdout.contains("ran-ok"), "{}", run.text);
    assert!(!stdout.contains("alice-secret"), "{}", run.text);
    assert!(
        !team.shared.join("bob-was-here").exists(),
        "a :ro grant is bound read-only"
    );
    assert!(team.b.join("ran").exists());
    let elsewhere = bob
        .call("execute", json!({"command": "true", "cwd": "/a"}))
        .await;
    assert!(elsewhere.is_error, "{}", elsewhere.text);
    assert!(
        !elsewhere.text.contains(&*team.a.display().to_string()),
        "{}",
        elsewhere.text
    );

    // A large result is saved in bob's own /scratch/ and read back from there.
    let big = bob
        .call(
            "execute",
            json!({"command": "yes grants | head -c 300000", "cwd": "/b"}),
        )
        .await;
    assert!(big.text.contains("/scratch/"), "{}", big.text);
}

#[tokio::test]
async fn a_grant_naming_no_mount_stops_start_up() {
    let tokens = tempfile::tempdir().unwrap();
    let file = tokens.path().join("tokens");
    std::fs::write(&file, format!("alice {ALICE}\n")).unwrap();
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_mountfs"))
        .args([
            "--http",
            "127.0.0.1:0",
            "--token-file",
            &file.display().to_string(),
            "--mount",
            "/x/=memory",
            "--grant",
            "alice=/nope/",
        ])
        .output()
        .await
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("alice=/nope/:rw names no mount"),
        "{stderr}"
    );
}

/// One principal with a grant (attack review of issue 43): its commands read neither the host
/// directory of a mount it is not granted nor anything else outside the narrowed sandbox, as
/// with several principals. Before, one principal kept the whole host readable to `execute`.
#[tokio::test]
async fn one_principal_with_a_grant_cannot_read_an_ungranted_mount_through_execute() {
    if mountfs::storage::exec::sandbox::probe().is_err() {
        crate::skips::record("the execute sandbox (Landlock)", "probe failed");
        return;
    }
    // Not under /tmp, which the sandbox replaces with its own.
    let root = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let (a, b) = (root.path().join("a"), root.path().join("b"));
    std::fs::create_dir(&a).unwrap();
    std::fs::create_dir(&b).unwrap();
    std::fs::write(a.join("secret.txt"), "ungranted-secret\n").unwrap();
    std::fs::write(b.join("plan.txt"), "granted-plan\n").unwrap();
    let tokens = root.path().join("tokens");
    std::fs::write(&tokens, format!("bob {BOB}\ngrant bob=/b/\n")).unwrap();
    let (mount_a, mount_b) = (
        format!("/a/=disk:{}", a.display()),
        format!("/b/=disk:{}", b.display()),
    );
    let token_file = tokens.display().to_string();
    let server = Server::start(
        &[
            "--token-file",
            &token_file,
            "--mount",
            &mount_a,
            "--mount",
            &mount_b,
            "--allow-exec",
        ],
        &[],
    )
    .await;
    let mut bob = session(&server, BOB).await;
    let command = format!(
        "cat {}/secret.txt; cat {}/plan.txt",
        a.display(),
        b.display()
    );
    let run = bob
        .call("execute", json!({"command": command, "cwd": "/b"}))
        .await;
    let stdout = run.structured["stdout"].as_str().unwrap_or_default();
    assert!(stdout.contains("granted-plan"), "{}", run.text);
    assert!(!stdout.contains("ungranted-secret"), "{}", run.text);
}

/// A granted mount whose directory holds the directory of a mount granted less (attack review
/// of issue 43, F3): bob, granted `/all/`, would read `/secret/`'s files through it (and
/// through `execute`, which binds `/all/`'s directory). The server refuses to start with that
/// table and `mountfs check` says why; granted alike, both start.
#[tokio::test]
async fn a_granted_mount_holding_a_mount_granted_less_stops_start_up() {
    let root = tempfile::tempdir().unwrap();
    let secret = root.path().join("secret");
    std::fs::create_dir(&secret).unwrap();
    std::fs::write(secret.join("key.txt"), "alice-only\n").unwrap();
    let tokens = root.path().join("tokens");
    std::fs::write(&tokens, format!("alice {ALICE}\nbob {BOB}\n")).unwrap();
    std::fs::set_permissions(&tokens, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let args = |bob: &str| {
        vec![
            "--token-file".to_owned(),
            tokens.display().to_string(),
            "--mount".to_owned(),
            format!("/all/=disk:{}", root.path().display()),
            "--mount".to_owned(),
            format!("/secret/=disk:{}", secret.display()),
            "--grant".to_owned(),
            "alice=/all/,/secret/".to_owned(),
            "--grant".to_owned(),
            bob.to_owned(),
            "--audit".to_owned(),
            "off".to_owned(),
        ]
    };
    let run = |check: bool, bob: &str| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_mountfs"));
        if check {
            command.arg("check");
        }
        command
            .args(["--http", "127.0.0.1:0"])
            .args(args(bob))
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    let refused = run(false, "bob=/all/:ro");
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("mount /all/ (")
            && stderr.contains("holds the directory of mount /secret/")
            && stderr.contains("bob is granted /all/ but is not granted /secret/"),
        "{stderr}"
    );
    let checked = run(true, "bob=/all/:ro");
    assert!(!checked.status.success());
    let stdout = String::from_utf8_lossy(&checked.stdout);
    assert!(
        stdout.contains("bob is granted /all/ but is not granted /secret/"),
        "{stdout}"
    );
    // Granted alike: the check passes (and so would the start).
    let alike = run(true, "bob=/all/:ro,/secret/:ro");
    let stdout = String::from_utf8_lossy(&alike.stdout);
    assert!(alike.status.success(), "{stdout}");
}
