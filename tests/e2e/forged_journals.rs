//! Issue 41: a change journal planted in a disk mount by an agent — through `write_file`, a
//! sandboxed `execute`, an overlay `write_file` + `commit`, or a store copied into the mount by
//! `mountfs cp` — is not acted on at the next start. Two variants each: the journal names a
//! directory outside the mount to delete (`secondaries` + `committed`: it still exists
//! after the restart), and an uncommitted journal "puts back" an `a0` the agent wrote over
//! `.git/config` (unchanged after the restart). The plans are in the format of the release
//! that trusted them, so each test fails on that release.

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::support::stdio::StdioClient;

/// The journal directory an agent plants at the mount root.
const JOURNAL: &str = ".mountfs-tmp-journal-1-1";
/// What the agent wants `.git/config` to become.
const EVIL: &str = "[core]\n\tfsmonitor = sh xpl\n";
const CONFIG: &str = "[core]\n\tbare = false\n";

/// One attack's places: the victim directory outside the mount, the mount, the data
/// directory the servers share (their recovery key), and which variant.
struct Attack {
    outside: tempfile::TempDir,
    mount: tempfile::TempDir,
    data: tempfile::TempDir,
    delete_outside: bool,
}

impl Attack {
    fn new(delete_outside: bool) -> Self {
        let attack = Self {
            outside: tempfile::tempdir().unwrap(),
            mount: tempfile::tempdir().unwrap(),
            data: tempfile::tempdir().unwrap(),
            delete_outside,
        };
        std::fs::create_dir_all(attack.victim().join("keep")).unwrap();
        std::fs::write(attack.victim().join("keep/file"), "precious").unwrap();
        std::fs::create_dir_all(attack.mount.path().join(".git")).unwrap();
        std::fs::write(attack.mount.path().join(".git/config"), CONFIG).unwrap();
        attack
    }

    fn victim(&self) -> PathBuf {
        self.outside.path().join("victim")
    }

    /// The files of the planted journal: (name inside the journal, content).
    fn files(&self) -> Vec<(&'static str, String)> {
        if self.delete_outside {
            let plan =
                json!({"pid": 1, "primary": null, "secondaries": [self.victim()], "files": []});
            vec![("journal", plan.to_string()), ("committed", String::new())]
        } else {
            let parts: Vec<Vec<u8>> = vec![b".git".to_vec(), b"config".to_vec()];
            let plan = json!({"pid": 1, "primary": null, "secondaries": [],
                "files": [{"path": parts, "existed": true, "created_dirs": []}]});
            vec![("journal", plan.to_string()), ("a0", EVIL.to_owned())]
        }
    }

    fn server(&self, args: &[&str]) -> StdioClient {
        let mut client = StdioClient::spawn_with_env(args, &[("XDG_DATA_HOME", self.data.path())]);
        client.handshake();
        client
    }

    fn disk_mount(&self) -> String {
        format!("/=disk:{}", self.mount.path().display())
    }

    /// Starts a server on the mount (its recovery runs), stops it, and checks that nothing
    /// the planted journal asked for happened.
    fn restart_and_check(&self, how: &str) {
        let mut client = self.server(&["--mount", &self.disk_mount()]);
        let _ = client.call("ls", json!({"path": "/"}));
        drop(client);
        assert!(
            self.victim().join("keep/file").is_file(),
            "{how}: recovery deleted a directory outside the mount"
        );
        assert_eq!(
            std::fs::read_to_string(self.mount.path().join(".git/config")).unwrap(),
            CONFIG,
            "{how}: recovery put an agent's file over .git/config"
        );
    }
}

fn both(run: impl Fn(&Attack)) {
    for delete_outside in [true, false] {
        run(&Attack::new(delete_outside));
    }
}

/// Writes every file of the journal with `write_file` (today refused: the answers are not
/// looked at, only what the restart does).
fn plant_with_write_file(client: &mut StdioClient, attack: &Attack) {
    for (name, content) in attack.files() {
        let _ = client.call(
            "write_file",
            json!({"file_path": format!("/{JOURNAL}/{name}"), "content": content}),
        );
    }
}

#[test]
fn a_journal_planted_by_write_file_is_not_acted_on() {
    both(|attack| {
        let mut client = attack.server(&["--mount", &attack.disk_mount()]);
        plant_with_write_file(&mut client, attack);
        drop(client);
        attack.restart_and_check("write_file");
    });
}

#[test]
fn a_journal_planted_by_an_overlay_commit_is_not_acted_on() {
    both(|attack| {
        let overlay = format!("{},overlay", attack.disk_mount());
        let mut client = attack.server(&["--mount", &overlay]);
        plant_with_write_file(&mut client, attack);
        let _ = client.call("commit", json!({"path": "/"}));
        drop(client);
        attack.restart_and_check("overlay commit");
    });
}

#[test]
fn a_journal_planted_by_a_sandboxed_execute_is_not_acted_on() {
    if let Err(error) = mountfs::storage::exec::sandbox::probe() {
        crate::skips::record("the execute sandbox (Landlock)", &error.to_string());
        return;
    }
    both(|attack| {
        let mut client = attack.server(&["--allow-exec", "--mount", &attack.disk_mount()]);
        let mut script = format!("mkdir -p {JOURNAL}");
        for (name, content) in attack.files() {
            // `%b` with octal escapes: every sh's printf (dash's has no `\x`).
            let hex: String = content.bytes().map(|b| format!("\\0{b:03o}")).collect();
            script.push_str(&format!(" && printf '%b' '{hex}' > {JOURNAL}/{name}"));
        }
        let answer = client.call("execute", json!({"command": script}));
        drop(client);
        for (name, content) in attack.files() {
            assert_eq!(
                std::fs::read_to_string(attack.mount.path().join(JOURNAL).join(name)).unwrap(),
                content,
                "the sandbox wrote the journal: {answer}"
            );
        }
        attack.restart_and_check("execute");
        assert!(
            attack.mount.path().join(JOURNAL).join("journal").is_file(),
            "the unverified journal is left for the operator"
        );
    });
}

#[test]
fn a_journal_copied_in_by_cp_from_a_store_is_not_acted_on() {
    both(|attack| {
        let store = attack.data.path().join("agent.db");
        let spec = format!("store:sqlite:{}", store.display());
        let mut client = attack.server(&["--mount", &format!("/={spec}")]);
        plant_with_write_file(&mut client, attack);
        // The store may hold the journal (an older release, or a store written by others).
        drop(client);
        plant_in_store_directly(&store, attack);
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_mountfs"))
            .args(["cp", "--from", &spec, "--to"])
            .arg(format!("disk:{}", attack.mount.path().display()))
            .env("XDG_DATA_HOME", attack.data.path())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            !attack.mount.path().join(JOURNAL).exists(),
            "cp copied a reserved name into the mount: {stderr}"
        );
        attack.restart_and_check("cp");
    });
}

/// Puts the journal's files into the SQLite store as a store of an older release could hold
/// them, through the server's own store layer (no tool refuses there).
fn plant_in_store_directly(store: &Path, attack: &Attack) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let opened = mountfs::storage::store::SqliteStore::open(store)
            .await
            .unwrap();
        let namespace = mountfs::storage::store::Namespace::new("default").unwrap();
        let backend =
            mountfs::storage::backend::StoreBackend::new(std::sync::Arc::new(opened), namespace);
        for (name, content) in attack.files() {
            // As a backend reads a key back: no tool could give this path.
            let path = mountfs::ground::path::VirtualPath::parse_raw(&format!("/{JOURNAL}/{name}"))
                .unwrap();
            let _ = mountfs::storage::backend::Backend::write(
                &backend,
                &path,
                content.as_bytes(),
                mountfs::storage::backend::WriteMode::Overwrite,
            )
            .await;
        }
    });
}
