//! What the disk backend does beyond the shared conformance suite, through the tools: ignore
//! files and `,no-ignore`, `.git/`, permission bits, faithful line endings and BOMs,
//! `--ensure-final-newline`, staleness after another program's change (small and big files),
//! directories, images, invalid UTF-8, empty directories, conditional writes racing, and
//! search answers equal to the memory backend's for the same tree. The default mount table is
//! checked through the real binary.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

use mountfs::ground::path::VirtualPath;
use mountfs::state::session::{Session, WriteOptions};
use mountfs::storage::backend::{
    Backend, CompositeBackend, DiskBackend, DiskOptions, MemoryBackend, Mount, WriteMode,
};
use serde_json::{Value, json};

fn p(s: &str) -> VirtualPath {
    VirtualPath::parse(s).unwrap()
}

use crate::support::backends::session_over;
use crate::support::stdio::{StdioClient, text_of};

struct Disk {
    dir: tempfile::TempDir,
    backend: Arc<DiskBackend>,
    session: Session,
}

impl Disk {
    fn new() -> Self {
        Self::with(DiskOptions::default(), WriteOptions::default())
    }

    fn with(options: DiskOptions, write: WriteOptions) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let backend = Arc::new(DiskBackend::open(dir.path(), options).unwrap());
        let session = session_over(backend.clone(), write);
        Self {
            dir,
            backend,
            session,
        }
    }

    fn put(&self, rel: &str, content: impl AsRef<[u8]>) {
        let path = self.dir.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }

    fn bytes(&self, rel: &str) -> Vec<u8> {
        std::fs::read(self.dir.path().join(rel)).unwrap()
    }

    async fn ok(&self, tool: &str, args: Value) -> String {
        match crate::support::backends::call(tool, args.clone(), &self.session).await {
            Ok(reply) => reply.text,
            Err(e) => panic!("{tool}({args}) failed: {e}"),
        }
    }

    async fn err(&self, tool: &str, args: Value) -> String {
        match crate::support::backends::call(tool, args.clone(), &self.session).await {
            Ok(reply) => panic!("{tool}({args}) should fail, said: {}", reply.text),
            Err(e) => e.to_string(),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gitignore_is_honoured_by_glob_and_grep_but_not_by_ls() {
    let d = Disk::new();
    d.put(".gitignore", "ignored/\n*.log\n");
    d.put("ignored/a.rs", "needle\n");
    d.put("x.log", "needle\n");
    d.put("src/a.rs", "needle\n");
    d.put("src/deep/y.log", "needle\n");
    let glob = d.ok("glob", json!({"pattern": "**"})).await;
    assert!(
        glob.contains("/src/a.rs") && glob.contains("/.gitignore"),
        "{glob}"
    );
    assert!(
        !glob.contains("ignored/a.rs") && !glob.contains(".log"),
        "{glob}"
    );
    let grep = d.ok("grep", json!({"pattern": "needle"})).await;
    assert_eq!(grep, "/src/a.rs");
    // A subdirectory search still obeys the root's ignore file.
    let grep = d
        .ok("grep", json!({"pattern": "needle", "path": "/src"}))
        .await;
    assert_eq!(grep, "/src/a.rs");
    // Naming an ignored directory or file searches it, as rg does.
    let grep = d
        .ok("grep", json!({"pattern": "needle", "path": "/ignored"}))
        .await;
    assert_eq!(grep, "/ignored/a.rs");
    let grep = d
        .ok("grep", json!({"pattern": "needle", "path": "/x.log"}))
        .await;
    assert_eq!(grep, "/x.log");
    let ls = d.ok("ls", json!({"path": "/"})).await;
    assert!(ls.contains("/ignored/") && ls.contains("/x.log"), "{ls}");
}

/// The walk reads ignore files where a directory's listing shows them (issue 15), at every
/// depth: nested `.gitignore`s, `.ignore` over `.gitignore`, `!` re-including, a nested
/// repository's `.git/info/exclude`, and the rules above a searched subdirectory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_ignore_files_are_honoured_at_every_depth() {
    let d = Disk::new();
    d.put("a/b/c/.gitignore", "*.gen\n/out/\n");
    d.put("a/b/c/x.gen", "needle\n");
    d.put("a/b/c/out/y.rs", "needle\n");
    d.put("a/b/c/d/out/z.rs", "needle\n");
    d.put("a/b/c/d/e/w.gen", "needle\n");
    d.put("a/b/.ignore", "!keep.gen\n");
    d.put("a/b/c/keep.gen", "needle\n");
    d.put("r/.git/info/exclude", "secret.txt\n");
    d.put("r/deep/secret.txt", "needle\n");
    d.put("r/deep/open.txt", "needle\n");
    let expected = "/a/b/c/d/out/z.rs\n/a/b/c/keep.gen\n/r/deep/open.txt";
    assert_eq!(d.ok("grep", json!({"pattern": "needle"})).await, expected);
    let glob = d.ok("glob", json!({"pattern": "**/*.{rs,gen,txt}"})).await;
    let mut found: Vec<&str> = glob.lines().collect();
    found.sort_unstable();
    assert_eq!(found.join("\n"), expected);
    assert_eq!(
        d.ok("grep", json!({"pattern": "needle", "path": "/a/b/c/d"}))
            .await,
        "/a/b/c/d/out/z.rs"
    );
    assert_eq!(
        d.ok("grep", json!({"pattern": "needle", "path": "/r/deep"}))
            .await,
        "/r/deep/open.txt"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_ignore_mount_option_searches_ignored_files() {
    let d = Disk::with(
        DiskOptions {
            no_ignore: true,
            ..DiskOptions::default()
        },
        WriteOptions::default(),
    );
    d.put(".gitignore", "ignored/\n*.log\n");
    d.put("ignored/a.rs", "needle\n");
    d.put("x.log", "needle\n");
    let grep = d.ok("grep", json!({"pattern": "needle"})).await;
    assert_eq!(grep, "/ignored/a.rs\n/x.log");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_directory_is_never_listed_or_searched() {
    for no_ignore in [false, true] {
        let d = Disk::with(
            DiskOptions {
                no_ignore,
                ..DiskOptions::default()
            },
            WriteOptions::default(),
        );
        d.put(".git/config", "needle\n");
        d.put("sub/.git/HEAD", "needle\n");
        d.put("a.txt", "needle\n");
        assert!(!d.ok("ls", json!({"path": "/"})).await.contains(".git"));
        assert!(!d.ok("ls", json!({"path": "/sub"})).await.contains(".git"));
        assert_eq!(d.ok("glob", json!({"pattern": "**"})).await, "/a.txt");
        assert_eq!(d.ok("grep", json!({"pattern": "needle"})).await, "/a.txt");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_keep_the_permission_bits() {
    let d = Disk::new();
    d.put("run.sh", "#!/bin/sh\necho one\n");
    let host = d.dir.path().join("run.sh");
    std::fs::set_permissions(&host, std::fs::Permissions::from_mode(0o750)).unwrap();
    d.ok("read_file", json!({"file_path": "/run.sh"})).await;
    d.ok(
        "edit_file",
        json!({"file_path": "/run.sh", "old_string": "one", "new_string": "two"}),
    )
    .await;
    let mode = std::fs::metadata(&host).unwrap().permissions().mode();
    assert_eq!(mode & 0o7777, 0o750);
    assert_eq!(d.bytes("run.sh"), b"#!/bin/sh\necho two\n");
}

/// Mode, modification time and inode of a host path, as a move must keep them.
fn identity(path: &Path) -> (u32, std::time::SystemTime, u64) {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(path).unwrap();
    (meta.mode() & 0o7777, meta.modified().unwrap(), meta.ino())
}

/// Sets a host file's or directory's mode and backdates its modification time.
fn age(path: &Path, mode: u32) {
    let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_500_000_000);
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    std::fs::File::open(path)
        .unwrap()
        .set_modified(old)
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_within_the_mount_is_a_rename_keeping_mode_times_inode_and_links() {
    use std::os::unix::fs::MetadataExt;
    let d = Disk::new();
    let root = d.dir.path();
    d.put("run.sh", "#!/bin/sh\necho run\n");
    age(&root.join("run.sh"), 0o755);
    std::fs::hard_link(root.join("run.sh"), root.join("alias.sh")).unwrap();
    let before = identity(&root.join("run.sh"));
    d.ok("read_file", json!({"file_path": "/run.sh"})).await;
    let text = d
        .ok(
            "move",
            json!({"source": "/run.sh", "destination": "/bin/run.sh"}),
        )
        .await;
    assert_eq!(
        text,
        "Moved /run.sh to /bin/run.sh, 19 bytes (renamed in place: mode, times and links kept). To reverse it, call undo_edit on /bin/run.sh."
    );
    assert!(!root.join("run.sh").exists());
    assert_eq!(
        identity(&root.join("bin/run.sh")),
        before,
        "mode, mtime, inode"
    );
    let alias = std::fs::metadata(root.join("alias.sh")).unwrap();
    assert_eq!(
        (alias.ino(), alias.nlink()),
        (before.2, 2),
        "the hard link stays"
    );
    // Undo renames it back: the same inode, mode and content at the old path.
    let text = d.ok("undo_edit", json!({"file_path": "/bin/run.sh"})).await;
    assert!(
        text.starts_with("Undid the move of /run.sh to /bin/run.sh: it is back at /run.sh."),
        "{text}"
    );
    assert!(!root.join("bin/run.sh").exists());
    let (mode, _, ino) = identity(&root.join("run.sh"));
    assert_eq!((mode, ino), (0o755, before.2));
    assert_eq!(d.bytes("run.sh"), b"#!/bin/sh\necho run\n");
    // The session's read followed the file there and back: it can be edited at once (after
    // dropping the second name: edits refuse files with several links), keeping its mode.
    std::fs::remove_file(root.join("alias.sh")).unwrap();
    d.ok(
        "edit_file",
        json!({"file_path": "/run.sh", "old_string": "run", "new_string": "ran"}),
    )
    .await;
    assert_eq!(identity(&root.join("run.sh")).0, 0o755);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_moves_in_one_rename_keeping_modes_and_times() {
    let d = Disk::new();
    let root = d.dir.path();
    d.put("tools/bin/build.sh", "#!/bin/sh\n");
    d.put("tools/.hidden-ignored", "kept too\n");
    std::fs::write(root.join(".gitignore"), ".hidden-ignored\n").unwrap();
    age(&root.join("tools/bin/build.sh"), 0o755);
    age(&root.join("tools/bin"), 0o750);
    age(&root.join("tools"), 0o700);
    let dir_before = identity(&root.join("tools"));
    let file_before = identity(&root.join("tools/bin/build.sh"));
    let text = d
        .ok(
            "move",
            json!({"source": "/tools", "destination": "/moved/tools"}),
        )
        .await;
    assert_eq!(
        text,
        "Moved directory /tools to /moved/tools in one rename: everything in it moved, with modes and times kept. To reverse it, call undo_edit on /moved/tools."
    );
    assert!(!root.join("tools").exists());
    assert_eq!(identity(&root.join("moved/tools")), dir_before);
    assert_eq!(
        identity(&root.join("moved/tools/bin/build.sh")),
        file_before
    );
    assert_eq!(identity(&root.join("moved/tools/bin")).0, 0o750);
    assert_eq!(d.bytes("moved/tools/.hidden-ignored"), b"kept too\n");
    d.ok("undo_edit", json!({"file_path": "/moved/tools"}))
        .await;
    assert!(!root.join("moved/tools").exists());
    assert_eq!(identity(&root.join("tools")), dir_before);
    assert_eq!(identity(&root.join("tools/bin/build.sh")), file_before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_over_a_file_replaces_it_and_two_undos_bring_both_back() {
    let d = Disk::new();
    let root = d.dir.path();
    d.put("new.sh", "new\n");
    d.put("old.sh", "old\n");
    age(&root.join("new.sh"), 0o755);
    let before = identity(&root.join("new.sh"));
    d.ok("read_file", json!({"file_path": "/old.sh"})).await;
    d.ok(
        "move",
        json!({"source": "/new.sh", "destination": "/old.sh", "overwrite": true}),
    )
    .await;
    assert_eq!(identity(&root.join("old.sh")), before);
    assert_eq!(d.bytes("old.sh"), b"new\n");
    d.ok("undo_edit", json!({"file_path": "/old.sh"})).await;
    assert_eq!(identity(&root.join("new.sh")), before);
    assert!(!root.join("old.sh").exists());
    d.ok("undo_edit", json!({"file_path": "/old.sh"})).await;
    assert_eq!(d.bytes("old.sh"), b"old\n");
    assert_eq!(d.bytes("new.sh"), b"new\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_between_disk_mounts_keeps_the_mode_and_undo_copies_it_back() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mount = |prefix: &str, dir: &Path| Mount {
        prefix: p(prefix),
        backend: Arc::new(DiskBackend::open(dir, DiskOptions::default()).unwrap()),
        read_only: false,
    };
    let composite =
        CompositeBackend::new(vec![mount("/", a.path()), mount("/b", b.path())], || {
            Arc::new(MemoryBackend::new())
        });
    let session = Session::new(Arc::new(composite), WriteOptions::default());
    std::fs::write(a.path().join("run.sh"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(
        a.path().join("run.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let call = |tool: &'static str, args: Value| {
        let session = &session;
        async move {
            match crate::support::backends::call(tool, args.clone(), session).await {
                Ok(reply) => reply.text,
                Err(e) => panic!("{tool}({args}) failed: {e}"),
            }
        }
    };
    let text = call(
        "move",
        json!({"source": "/run.sh", "destination": "/b/bin/run.sh"}),
    )
    .await;
    assert!(
        text.contains("(copied across mounts, then the source deleted)"),
        "{text}"
    );
    let mode = std::fs::metadata(b.path().join("bin/run.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o755);
    assert!(!a.path().join("run.sh").exists());
    call("undo_edit", json!({"file_path": "/b/bin/run.sh"})).await;
    assert!(!b.path().join("bin/run.sh").exists());
    let mode = std::fs::metadata(a.path().join("run.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o755);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_keep_the_owner_where_allowed() {
    use std::os::unix::fs::MetadataExt;
    let d = Disk::new();
    d.put("owned.txt", "one\n");
    let host = d.dir.path().join("owned.txt");
    // Only root may give a file away; elsewhere the owner is already ours and stays so.
    let _ = std::os::unix::fs::chown(&host, Some(4321), Some(4321));
    let before = std::fs::metadata(&host).unwrap();
    d.ok("read_file", json!({"file_path": "/owned.txt"})).await;
    d.ok(
        "edit_file",
        json!({"file_path": "/owned.txt", "old_string": "one", "new_string": "two"}),
    )
    .await;
    let after = std::fs::metadata(&host).unwrap();
    assert_eq!((after.uid(), after.gid()), (before.uid(), before.gid()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crlf_bom_and_missing_final_newline_survive_edits_on_disk() {
    let d = Disk::new();
    d.put("win.txt", "\u{feff}one\r\ntwo\r\nthree");
    let read = d.ok("read_file", json!({"file_path": "/win.txt"})).await;
    assert_eq!(read, "     1\tone\n     2\ttwo\n     3\tthree");
    d.ok(
        "edit_file",
        json!({"file_path": "/win.txt", "old_string": "two\nthree", "new_string": "2\n3"}),
    )
    .await;
    assert_eq!(d.bytes("win.txt"), "\u{feff}one\r\n2\r\n3".as_bytes());
    d.ok(
        "write_file",
        json!({"file_path": "/win.txt", "content": "a\nb\n"}),
    )
    .await;
    assert_eq!(d.bytes("win.txt"), "\u{feff}a\r\nb\r\n".as_bytes());
    d.ok(
        "write_file",
        json!({"file_path": "/new.txt", "content": "x\ny"}),
    )
    .await;
    assert_eq!(
        d.bytes("new.txt"),
        b"x\ny",
        "new files are LF, written as given"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ensure_final_newline_applies_on_disk() {
    let d = Disk::with(
        DiskOptions::default(),
        WriteOptions {
            ensure_final_newline: true,
            ..WriteOptions::default()
        },
    );
    d.ok("write_file", json!({"file_path": "/a.txt", "content": "x"}))
        .await;
    assert_eq!(d.bytes("a.txt"), b"x\n");
    d.put("crlf.txt", "a\r\nb");
    d.ok("read_file", json!({"file_path": "/crlf.txt"})).await;
    d.ok(
        "write_file",
        json!({"file_path": "/crlf.txt", "content": "a\nc"}),
    )
    .await;
    assert_eq!(d.bytes("crlf.txt"), b"a\r\nc\r\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_programs_change_is_reported_or_makes_the_edit_stale() {
    let d = Disk::new();
    d.put("a.txt", "one\ntwo\n");
    d.ok("read_file", json!({"file_path": "/a.txt"})).await;
    // Changed where old_string was: today's stale error, nothing written.
    d.put("a.txt", "uno, changed by an editor\ntwo\n");
    let err = d
        .err(
            "edit_file",
            json!({"file_path": "/a.txt", "old_string": "one", "new_string": "1"}),
        )
        .await;
    assert!(
        err.starts_with("Error: File has been modified since it was read"),
        "{err}"
    );
    assert_eq!(d.bytes("a.txt"), b"uno, changed by an editor\ntwo\n");
    // Changed elsewhere: the edit lands on the current content and says what changed.
    let text = d
        .ok(
            "edit_file",
            json!({"file_path": "/a.txt", "old_string": "two", "new_string": "2"}),
        )
        .await;
    assert!(
        text.contains("had changed since this session read it") && text.contains(": 1."),
        "{text}"
    );
    assert_eq!(d.bytes("a.txt"), b"uno, changed by an editor\n2\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_place_change_to_a_big_file_is_detected() {
    use std::os::unix::fs::FileExt;
    let d = Disk::new();
    let line = "0123456789 abcdefghij 0123456789 abcdefghij 0123456789\n";
    let big = line.repeat((mountfs::storage::backend::disk::HASHED_SIZE_LIMIT as usize) / 50);
    d.put("big.log", &big);
    let text = d
        .ok(
            "read_file",
            json!({"file_path": "/big.log", "offset": 100_000, "limit": 2}),
        )
        .await;
    assert!(text.starts_with("100001\t0123456789"), "{text}");
    // Same inode, same size, new bytes: only the change stamps tell.
    std::thread::sleep(std::time::Duration::from_millis(30));
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(d.dir.path().join("big.log"))
        .unwrap();
    file.write_all_at(b"X", 5).unwrap();
    drop(file);
    // The change is seen: the edit (its old_string still there once) says so.
    let text = d
        .ok(
            "edit_file",
            json!({"file_path": "/big.log", "old_string": "X", "new_string": "Y"}),
        )
        .await;
    assert!(
        text.contains("had changed since this session read it")
            && text.contains("which lines changed is not known"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directories_images_and_invalid_utf8_read_as_the_contract_says() {
    let d = Disk::new();
    d.put("dir/a.txt", "a\n");
    std::fs::create_dir(d.dir.path().join("dir/empty")).unwrap();
    let listing = d.ok("read_file", json!({"file_path": "/dir"})).await;
    assert!(listing.contains("/dir/a.txt (2 bytes)"), "{listing}");
    assert!(
        listing.contains("/dir/empty/"),
        "empty directories exist on disk: {listing}"
    );
    let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
    d.put("pic.png", &png);
    let reply =
        crate::support::backends::call("read_file", json!({"file_path": "/pic.png"}), &d.session)
            .await
            .unwrap();
    assert_eq!(
        reply.image.as_ref().map(|(_, mime)| mime.as_str()),
        Some("image/png")
    );
    d.put("latin1.txt", b"caf\xe9\n");
    let text = d.ok("read_file", json!({"file_path": "/latin1.txt"})).await;
    assert!(text.starts_with("     1\tcafé"), "{text}");
    assert!(text.contains("is encoded in windows-1252"), "{text}");
    d.put("bad.txt", b"\xef\xbb\xbfcaf\xe9\n");
    let text = d.ok("read_file", json!({"file_path": "/bad.txt"})).await;
    assert!(text.starts_with("     1\tcaf\u{fffd}"), "{text}");
    assert!(text.contains("not valid UTF-8"), "{text}");
    d.put("blob.bin", b"\0\x01\x02binary");
    let text = d.ok("read_file", json!({"file_path": "/blob.bin"})).await;
    assert!(text.contains("binary file"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conditional_writes_racing_on_one_version_have_one_winner() {
    let d = Disk::new();
    let path = p("/race.txt");
    let base = d
        .backend
        .write(&path, b"base", WriteMode::CreateOnly)
        .await
        .unwrap()
        .version;
    let mut tasks = Vec::new();
    for i in 0..16 {
        let backend = d.backend.clone();
        let (path, base) = (path.clone(), base.clone());
        tasks.push(tokio::spawn(async move {
            backend
                .write(
                    &path,
                    format!("writer {i}").as_bytes(),
                    WriteMode::IfVersion(base),
                )
                .await
                .is_ok()
        }));
    }
    let mut winners = 0;
    for task in tasks {
        winners += usize::from(task.await.unwrap());
    }
    assert_eq!(winners, 1);
}

/// Builds one tree on a backend: nested dirs, hidden files, CRLF, BOM, binary, a NUL after the
/// sniffed head, invalid UTF-8, an empty file, no final newline, close matches for context.
async fn build_tree(backend: &dyn Backend) {
    // 9,000 bytes of text, then a NUL: past the 8 KiB sniff, so still a text file.
    let mut late_nul = "text line with needle\n".repeat(400).into_bytes();
    late_nul.extend_from_slice(b"\0 needle after the head\n");
    let files: Vec<(&str, Vec<u8>)> = vec![
        ("/a.rs", b"fn main() {\n    needle();\n}\n".to_vec()),
        (
            "/src/lib.rs",
            b"// Needle\nneedle\nx\nneedle\ny\nz\nw\nneedle".to_vec(),
        ),
        ("/src/deep/er/mod.rs", b"nothing here\n".to_vec()),
        (
            "/src/deep/notes.md",
            b"a needle in md\n\n\ntrailing   \n".to_vec(),
        ),
        ("/.hidden/secret.txt", b"hidden needle\n".to_vec()),
        ("/.env", b"NEEDLE=1\n".to_vec()),
        ("/win.txt", b"needle\r\nline\r\nneedle end\r\n".to_vec()),
        (
            "/bom.txt",
            "\u{feff}needle first\nsecond\n".as_bytes().to_vec(),
        ),
        ("/bin.dat", b"\0\0needle\0".to_vec()),
        ("/late_nul.txt", late_nul),
        ("/latin1.txt", b"caf\xe9 needle\n".to_vec()),
        ("/empty.txt", Vec::new()),
        ("/regex.txt", b"a.b(c)\n[x]\n$dollar\n".to_vec()),
    ];
    for (path, content) in files {
        backend
            .write(&p(path), &content, WriteMode::CreateOnly)
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_answers_equal_the_memory_backends() {
    let d = Disk::new();
    build_tree(&*d.backend).await;
    let memory = Arc::new(MemoryBackend::new());
    build_tree(&*memory).await;
    let memory_session = session_over(memory, WriteOptions::default());
    let greps = [
        json!({"pattern": "needle"}),
        json!({"pattern": "needle", "output_mode": "count"}),
        json!({"pattern": "needle", "output_mode": "content"}),
        json!({"pattern": "needle", "output_mode": "content", "context": 2}),
        json!({"pattern": "needle", "case_insensitive": true, "output_mode": "content"}),
        json!({"pattern": "a.b(c)", "literal": true, "output_mode": "content"}),
        json!({"pattern": "^$", "output_mode": "count"}),
        json!({"pattern": "\\s+$", "output_mode": "content"}),
        json!({"pattern": "end$", "output_mode": "content"}),
        json!({"pattern": "needle\\nline"}),
        json!({"pattern": "[^a-z ]needle", "output_mode": "content"}),
        json!({"pattern": "needle", "glob": "*.rs", "output_mode": "count"}),
        json!({"pattern": "needle", "glob": "src/**/*.{rs,md}"}),
        json!({"pattern": "needle", "path": "/src", "glob": "deep/*"}),
        json!({"pattern": "needle", "path": "/src/lib.rs", "output_mode": "content"}),
        json!({"pattern": "needle", "output_mode": "content", "head_limit": 3, "offset": 2}),
        json!({"pattern": "caf. needle", "output_mode": "content"}),
        json!({"pattern": "^needle first", "output_mode": "content"}),
    ];
    for args in greps {
        let disk = d.ok("grep", args.clone()).await;
        let mem = crate::support::backends::call("grep", args.clone(), &memory_session)
            .await
            .unwrap()
            .text;
        if disk != mem {
            let first = disk
                .lines()
                .zip(mem.lines())
                .position(|(a, b)| a != b)
                .unwrap_or(disk.lines().count().min(mem.lines().count()));
            let show = |t: &str| {
                t.lines()
                    .skip(first.saturating_sub(2))
                    .take(5)
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            panic!(
                "grep {args}: first difference at line {first}\ndisk:\n{}\nmemory:\n{}",
                show(&disk),
                show(&mem)
            );
        }
    }
    for (pattern, path) in [
        ("*.rs", "/"),
        ("**", "/"),
        ("src/*.rs", "/"),
        ("**/*.{rs,md}", "/"),
        ("deep/**", "/src"),
        (".*", "/"),
        ("*.txt", "/src/deep"),
        ("lib.rs", "/src/lib.rs"),
    ] {
        let args = json!({"pattern": pattern, "path": path});
        // Newest first differs (write times differ); the set of files must not.
        let sorted = |text: String| {
            let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
            lines.sort();
            lines
        };
        let disk = sorted(d.ok("glob", args.clone()).await);
        let mem = sorted(
            crate::support::backends::call("glob", args.clone(), &memory_session)
                .await
                .unwrap()
                .text,
        );
        assert_eq!(disk, mem, "glob {args}");
    }
}

/// The default table (no --mount): `/` is the working directory, `/scratch/` memory,
/// `/memories/` SQLite in the data directory.
#[test]
fn default_table_mounts_the_working_directory_at_root() {
    let cwd = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    std::fs::write(cwd.path().join("hello.txt"), "hi\n").unwrap();
    let (_, listing, wrote, _) = default_table_in(cwd.path(), home.path());
    for expected in ["/hello.txt (3 bytes)", "/memories/", "/scratch/"] {
        assert!(listing.contains(expected), "{listing}");
    }
    assert_eq!(wrote["result"]["isError"], false, "{wrote}");
    assert_eq!(
        std::fs::read(Path::new(cwd.path()).join("made.txt")).unwrap(),
        b"m\n"
    );
}

/// Runs the default table (no --mount) in `cwd` with `home` as the home directory; returns the
/// instructions, the `ls /` text, the answer to a write at `/made.txt` (sent at once, so the
/// listing may show it), and stderr.
fn default_table_in(cwd: &Path, home: &Path) -> (String, String, Value, String) {
    let data = tempfile::tempdir().unwrap();
    let mut client = StdioClient::spawn_in(
        Some(cwd),
        &[],
        &[("XDG_DATA_HOME", data.path()), ("HOME", home)],
    );
    let init = client.request("initialize", crate::support::initialize_params(json!({})));
    client.notify("notifications/initialized", json!({}));
    let listed = client.send(
        "tools/call",
        json!({"name": "ls", "arguments": {"path": "/"}}),
    );
    let written = client.send(
        "tools/call",
        json!({"name": "write_file", "arguments": {"file_path": "/made.txt", "content": "m\n"}}),
    );
    let listing = text_of(&client.response(listed)["result"]);
    let wrote = client.response(written);
    client.close();
    let instructions = init["result"]["instructions"].as_str().unwrap().to_owned();
    (instructions, listing, wrote, client.stderr())
}

/// `ls /` shows the store and memory mounts and what the session wrote, no file from disk.
fn assert_only_memory_mounts(listing: &str) {
    let lines: Vec<&str> = listing.lines().collect();
    assert!(lines.contains(&"/memories/"), "{listing}");
    assert!(lines.contains(&"/scratch/"), "{listing}");
    for line in lines {
        assert!(
            ["/memories/", "/scratch/", "/made.txt (2 bytes)"].contains(&line),
            "{listing}"
        );
    }
}

/// Started from `/` (as Claude Desktop on macOS does) with no --mount, the server mounts no
/// directory: only /memories/ and /scratch/, and says how to mount one.
#[test]
fn default_table_in_the_file_system_root_mounts_no_directory() {
    let home = tempfile::tempdir().unwrap();
    let (instructions, listing, write, stderr) = default_table_in(Path::new("/"), home.path());
    assert_only_memory_mounts(&listing);
    assert!(!instructions.contains("\n/ = "), "{instructions}");
    let warning = "the working directory / is the file-system root, so no directory is mounted: files live only in this session's memory and /memories/. To serve a directory, start mountfs with --mount /=disk:/path/to/project (repeat --mount for more), or start it in the project's directory.";
    assert!(instructions.ends_with(warning), "{instructions}");
    assert!(
        stderr.contains(&format!("mountfs: warning: {warning}")),
        "{stderr}"
    );
    // The write lands in the session's memory, never on disk.
    assert_eq!(write["result"]["isError"], false, "{write}");
    assert!(!Path::new("/made.txt").exists());
}

/// Started from the home directory with no --mount: no directory is mounted either.
#[test]
fn default_table_in_the_home_directory_mounts_no_directory() {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("private.txt"), "secret\n").unwrap();
    let (instructions, listing, write, stderr) = default_table_in(home.path(), home.path());
    assert_only_memory_mounts(&listing);
    assert!(!listing.contains("private.txt"), "{listing}");
    let resolved = std::fs::canonicalize(home.path()).unwrap();
    let warning = format!(
        "the working directory {} is the home directory, so no directory is mounted",
        resolved.display()
    );
    assert!(instructions.contains(&warning), "{instructions}");
    assert!(stderr.contains(&warning), "{stderr}");
    // The write lands in the session's memory, never on disk.
    assert_eq!(write["result"]["isError"], false, "{write}");
    assert!(!home.path().join("made.txt").exists());
}
