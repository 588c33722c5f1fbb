//! Attack review of issue 41 (defect 1): a disk mount that covers the server's data directory
//! (or its token file, its databases) hands none of them to an agent. They are told by device
//! and inode: the path of the data directory, a symbolic link to it, a hard link to a file in
//! it, a bind mount of it all answer "not found"; listings and searches leave them out;
//! writes and creates there are refused; `mountfs cp` leaves them out; `mountfs check` warns.

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::support::stdio::StdioClient;

/// A word only the planted file in the data directory holds.
const PLANTED: &str = "planted-in-the-data-directory-7c1e";

/// A work directory holding `data/` (the server's XDG_DATA_HOME, with a file planted in its
/// `mountfs/`) and `project/`.
fn work() -> (tempfile::TempDir, PathBuf) {
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    std::fs::create_dir_all(data.join("mountfs")).unwrap();
    std::fs::write(data.join("mountfs/notes.txt"), format!("{PLANTED}\n")).unwrap();
    std::fs::create_dir_all(work.path().join("project")).unwrap();
    std::fs::write(work.path().join("project/readme.md"), "# hello\n").unwrap();
    (work, data)
}

fn server(work: &Path, data: &Path, program: Option<(&str, Vec<String>)>) -> StdioClient {
    let mount = format!("/=disk:{}", work.display());
    let args = ["--mount", &mount, "--mount", "/scratch/=memory"];
    let mut command = match program {
        None => crate::support::mountfs_command(work, &args, &[]),
        Some((program, before)) => {
            let mut command = std::process::Command::new(program);
            command
                .args(before)
                .arg(env!("CARGO_BIN_EXE_mountfs"))
                .args(args)
                .current_dir(work)
                .env("RUST_LOG", "warn");
            command
        }
    };
    command.env("HOME", work).env("XDG_DATA_HOME", data);
    let mut client = StdioClient::spawn_command(command);
    client.handshake();
    client
}

#[test]
fn the_servers_own_files_are_not_found_by_any_path_nor_listed_nor_written() {
    let (work, data) = work();
    let mut client = server(work.path(), &data, None);
    let own = data.join("mountfs");
    assert!(own.join("recovery.key").is_file(), "made at start");
    // Other paths to them, made once the server runs: a symbolic link to the folder, a hard
    // link to the key and to the planted file.
    std::os::unix::fs::symlink("../data/mountfs", work.path().join("project/own")).unwrap();
    std::fs::hard_link(own.join("recovery.key"), work.path().join("project/key")).unwrap();
    std::fs::hard_link(own.join("notes.txt"), work.path().join("project/notes.txt")).unwrap();

    for path in [
        "/data/mountfs/recovery.key",
        "/data/mountfs/notes.txt",
        "/project/own/recovery.key",
        "/project/key",
        "/project/notes.txt",
    ] {
        let error = client.err("read_file", json!({"file_path": path}));
        assert!(error.contains("not found"), "{path}: {error}");
    }
    let error = client.err("ls", json!({"path": "/data/mountfs"}));
    assert!(error.contains("not found"), "{error}");
    let listing = client.ok("ls", json!({"path": "/data"}));
    assert!(!listing.contains("mountfs"), "{listing}");
    let listing = client.ok("ls", json!({"path": "/project"}));
    assert!(listing.contains("readme.md"), "{listing}");
    for hidden in ["key", "notes.txt", "own"] {
        assert!(!listing.contains(hidden), "{hidden}: {listing}");
    }
    let found = client.ok("glob", json!({"pattern": "**/*"}));
    assert!(found.contains("readme.md"), "{found}");
    for hidden in ["recovery.key", "notes.txt", "/project/key", "decisions"] {
        assert!(!found.contains(hidden), "{hidden}: {found}");
    }
    let found = client.call("grep", json!({"pattern": PLANTED, "path": "/"}));
    let text = crate::support::stdio::text_of(&found);
    assert!(!text.contains("notes.txt"), "{text}");

    // Writes and creates there are refused, and nothing lands.
    let key = std::fs::read(own.join("recovery.key")).unwrap();
    for path in [
        "/data/mountfs/recovery.key",
        "/project/key",
        "/data/mountfs/new.txt",
        "/project/own/decisions/x",
    ] {
        client.err(
            "write_file",
            json!({"file_path": path, "content": "forged"}),
        );
    }
    assert_eq!(std::fs::read(own.join("recovery.key")).unwrap(), key);
    assert!(!own.join("new.txt").exists());
    assert!(!own.join("decisions/x").exists());
    client.err("delete", json!({"file_path": "/project/key"}));
    assert!(work.path().join("project/key").exists());
    client.err(
        "move",
        json!({"source": "/project/readme.md", "destination": "/data/mountfs/readme.md"}),
    );
    assert!(!own.join("readme.md").exists());
    // A directory above them is neither removed nor moved (they would go with it).
    client.err("delete", json!({"file_path": "/data", "recursive": true}));
    client.err(
        "move",
        json!({"source": "/data", "destination": "/elsewhere"}),
    );
    assert!(own.join("recovery.key").is_file());
    client.close();
}

/// A bind mount of the data directory's folder inside the mount (made in a private mount
/// namespace, as root) is the same directory: not found, not listed.
#[test]
fn a_bind_mount_of_the_data_directory_is_not_found_either() {
    if !crate::skips::private_mounts_or_skip("own files behind a bind mount") {
        return;
    }
    let (work, data) = work();
    let bound = work.path().join("project/bound");
    std::fs::create_dir(&bound).unwrap();
    let script = format!(
        "mount --bind {own} {bound} && exec \"$0\" \"$@\"",
        own = data.join("mountfs").display(),
        bound = bound.display(),
    );
    let mut client = server(
        work.path(),
        &data,
        Some((
            "unshare",
            vec!["--mount".into(), "sh".into(), "-c".into(), script],
        )),
    );
    let error = client.err(
        "read_file",
        json!({"file_path": "/project/bound/notes.txt"}),
    );
    assert!(error.contains("not found"), "{error}");
    let error = client.err("ls", json!({"path": "/project/bound"}));
    assert!(error.contains("not found"), "{error}");
    let listing = client.ok("ls", json!({"path": "/project"}));
    assert!(!listing.contains("bound"), "{listing}");
    let found = client.ok("glob", json!({"pattern": "**/*.txt"}));
    assert!(!found.contains("notes.txt"), "{found}");
    client.close();
}

#[test]
fn mountfs_cp_leaves_them_out_and_check_warns() {
    let (work, data) = work();
    // The key exists once a server (or cp) ran.
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_mountfs"))
            .args(args)
            .current_dir(work.path())
            .env("HOME", work.path())
            .env("XDG_DATA_HOME", &data)
            .env_remove("RUST_LOG")
            .output()
            .unwrap()
    };
    let to = work.path().join("..").join(format!(
        "{}-copy",
        work.path().file_name().unwrap().to_string_lossy()
    ));
    let copy = run(&[
        "cp",
        "--from",
        &format!("disk:{}", work.path().display()),
        "--to",
        &format!("disk:{}", to.display()),
    ]);
    let copied = std::fs::read_dir(to.join("data")).map(|d| d.count());
    let _ = std::fs::remove_dir_all(&to);
    assert!(
        copy.status.success(),
        "{}",
        String::from_utf8_lossy(&copy.stderr)
    );
    assert_eq!(
        copied.unwrap_or(0),
        0,
        "the data directory's folder was copied"
    );

    let check = run(&[
        "check",
        "--audit",
        "off",
        "--mount",
        &format!("/=disk:{}", work.path().display()),
    ]);
    let out = String::from_utf8_lossy(&check.stdout);
    assert!(check.status.success(), "{out}");
    assert!(
        out.lines().any(
            |l| l.starts_with("WARN  mount /") && l.contains("recovery.key")
                || l.starts_with("WARN  mount /") && l.contains("mountfs")
        ),
        "{out}"
    );
}
