//! Bounded memory whatever the file (issue 10): each case runs in a fresh `mountfs` process and
//! asserts its peak resident memory (`VmHWM` in `/proc/<pid>/status`) afterwards.
//!
//! The huge files are sparse (6 GiB of apparent size, a few KiB on disk), so the cases are cheap
//! to set up; a tool that read one whole would need 6 GiB and abort the process (the allocation
//! failure issue 10 reports), which the bound and the final "still serving" check catch.

use std::io::Write;
use std::path::Path;

use crate::support::stdio::{StdioClient, text_of};
use serde_json::{Value, json};

/// 6 GiB: far over every bound, and more than a test machine can allocate.
const HUGE: u64 = 6 * 1024 * 1024 * 1024;
/// The peak a case may reach. An idle server peaks near 10 MB; the bounds in play
/// (`--max-edit-bytes` 16 MiB, half the undo budget 32 MiB, a grep line 16 MiB, a version hash
/// 8 MiB) keep every case well under this.
const PEAK_LIMIT: u64 = 96 * 1024 * 1024;

/// A sparse file of `size` bytes whose first bytes are `head` and the rest zeros.
fn sparse(path: &Path, head: &[u8], size: u64) {
    let mut file = std::fs::File::create(path).expect("create sparse file");
    file.write_all(head).expect("write head");
    file.set_len(size).expect("extend sparse file");
}

/// A server with `/` = a disk mount of its working directory and `/scratch/` = memory.
fn disk_server(extra: &[&str]) -> StdioClient {
    let mut args = vec!["--mount", "/=disk:.", "--mount", "/scratch/=memory"];
    args.extend_from_slice(extra);
    StdioClient::start(&args)
}

/// Asserts the server's peak memory is under [`PEAK_LIMIT`] and that it still answers.
fn assert_bounded(client: &mut StdioClient, case: &str) -> u64 {
    assert_bounded_by(client, case, PEAK_LIMIT)
}

/// Asserts the server's peak memory is under `limit` and that it still answers.
fn assert_bounded_by(client: &mut StdioClient, case: &str, limit: u64) -> u64 {
    let peak = client.peak_memory().expect("VmHWM (Linux)");
    eprintln!("{case}: VmHWM {:.1} MiB", peak as f64 / 1048576.0);
    assert!(
        peak < limit,
        "{case}: peak memory {peak} bytes, over {limit}"
    );
    let listing = client.ok("ls", json!({"path": "/"}));
    assert!(!listing.is_empty(), "{case}: the server still serves");
    peak
}

/// Reads one line of `path` so that the session may change it.
fn read_first_line(client: &mut StdioClient, path: &str) {
    client.ok("read_file", json!({"file_path": path, "limit": 1}));
}

/// The first bytes of a file.
fn head_of(path: &Path, n: usize) -> Vec<u8> {
    use std::io::Read;
    let mut head = vec![0; n];
    std::fs::File::open(path)
        .expect("open")
        .read_exact(&mut head)
        .expect("read head");
    head
}

/// Names at the top of a directory that start with our temporary prefix.
fn private_entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with(".mountfs-tmp-"))
        .collect()
}

#[test]
fn deleting_a_huge_file_keeps_it_aside_on_disk_and_undo_puts_it_back() {
    let mut client = disk_server(&[]);
    let path = client.cwd().join("huge.log");
    sparse(&path, b"start\n", HUGE);
    let text = client.ok("delete", json!({"file_path": "/huge.log"}));
    assert_eq!(
        text,
        "Deleted /huge.log (6442450944 bytes). undo_edit can restore it."
    );
    assert!(!path.exists());
    assert_eq!(
        private_entries(client.cwd()).len(),
        1,
        "kept aside at the root"
    );
    let listing = client.ok("ls", json!({"path": "/"}));
    assert!(!listing.contains("mountfs-tmp"), "{listing}");
    assert_eq!(
        client.ok("glob", json!({"pattern": "**"})),
        "No files found"
    );
    let text = client.ok("undo_edit", json!({"file_path": "/huge.log"}));
    assert!(
        text.starts_with(
            "Undid the deletion of /huge.log: the file was put back (6442450944 bytes, kept aside on disk)."
        ),
        "{text}"
    );
    assert_eq!(std::fs::metadata(&path).unwrap().len(), HUGE);
    assert_eq!(head_of(&path, 6), b"start\n");
    assert_bounded(&mut client, "delete and undo 6 GiB");
}

#[test]
fn overwriting_a_huge_file_keeps_the_old_one_aside_and_undo_puts_it_back() {
    let mut client = disk_server(&[]);
    let path = client.cwd().join("huge.log");
    sparse(&path, b"start\n", HUGE);
    read_first_line(&mut client, "/huge.log");
    let text = client.ok(
        "write_file",
        json!({"file_path": "/huge.log", "content": "small now\n"}),
    );
    assert_eq!(
        text,
        "Replaced /huge.log (6442450944 bytes) with 1 line, 10 bytes. undo_edit can restore the previous content."
    );
    assert_eq!(std::fs::read(&path).unwrap(), b"small now\n");
    let text = client.ok("undo_edit", json!({"file_path": "/huge.log"}));
    assert!(
        text.starts_with(
            "Undid the last change to /huge.log: its previous content (6442450944 bytes, kept aside on disk) is back."
        ),
        "{text}"
    );
    assert_eq!(std::fs::metadata(&path).unwrap().len(), HUGE);
    assert_eq!(head_of(&path, 6), b"start\n");
    assert_bounded(&mut client, "overwrite and undo 6 GiB");
}

#[test]
fn undo_of_a_huge_delete_is_refused_when_the_path_was_taken_since() {
    let mut client = disk_server(&[]);
    let path = client.cwd().join("huge.log");
    sparse(&path, b"start\n", HUGE);
    client.ok("delete", json!({"file_path": "/huge.log"}));
    std::fs::write(&path, "someone else's\n").unwrap();
    let error = client.err("undo_edit", json!({"file_path": "/huge.log"}));
    assert!(
        error.starts_with("Error: Cannot undo the last change to /huge.log: this session deleted it, but a file has been created there since."),
        "{error}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), b"someone else's\n");
    // Once the path is free again, the kept content still comes back.
    std::fs::remove_file(&path).unwrap();
    client.ok("undo_edit", json!({"file_path": "/huge.log"}));
    assert_eq!(std::fs::metadata(&path).unwrap().len(), HUGE);
}

#[test]
fn contents_kept_aside_are_removed_when_their_server_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let mount = format!("/=disk:{}", dir.path().display());
    sparse(&dir.path().join("huge.log"), b"start\n", HUGE);
    let mut first = StdioClient::start(&["--mount", &mount]);
    first.ok("delete", json!({"file_path": "/huge.log"}));
    assert_eq!(private_entries(dir.path()).len(), 1);
    first.finish();
    // The next server sweeps what a gone process left (after its one-second start delay).
    let _second = StdioClient::start(&["--mount", &mount]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !private_entries(dir.path()).is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(private_entries(dir.path()), Vec::<String>::new());
}

#[test]
fn overwriting_a_huge_file_changed_since_it_was_read_is_refused() {
    let mut client = disk_server(&[]);
    let path = client.cwd().join("huge.log");
    sparse(&path, b"start\n", HUGE);
    read_first_line(&mut client, "/huge.log");
    sparse(&path, b"other\n", HUGE + 1);
    let error = client.err(
        "write_file",
        json!({"file_path": "/huge.log", "content": "x"}),
    );
    assert!(
        error.starts_with("Error: File has been modified since it was read: /huge.log."),
        "{error}"
    );
    assert_eq!(std::fs::metadata(&path).unwrap().len(), HUGE + 1);
    assert_bounded(&mut client, "stale overwrite 6 GiB");
}

#[test]
fn editing_a_huge_file_is_refused_with_the_limit_named() {
    let mut client = disk_server(&[]);
    sparse(&client.cwd().join("huge.txt"), b"alpha\nbeta\n", HUGE);
    read_first_line(&mut client, "/huge.txt");
    let error = client.err(
        "edit_file",
        json!({"file_path": "/huge.txt", "old_string": "alpha", "new_string": "omega"}),
    );
    assert!(
        error.starts_with(
            "Error: /huge.txt is 6442450944 bytes, over the limit of 16777216 bytes (--max-edit-bytes)."
        ),
        "{error}"
    );
    let error = client.err(
        "multi_edit",
        json!({"file_path": "/huge.txt", "edits": [{"old_string": "alpha", "new_string": "omega"}]}),
    );
    assert!(error.contains("(--max-edit-bytes)"), "{error}");
    let error = client.err(
        "apply_patch",
        json!({"patch": "--- a/huge.txt\n+++ b/huge.txt\n@@ -1,1 +1,1 @@\n-alpha\n+omega\n"}),
    );
    assert!(error.contains("(--max-edit-bytes)"), "{error}");
    assert_bounded(&mut client, "edit 6 GiB");
}

#[test]
fn moving_a_huge_file_never_copies_it_through_memory() {
    let mut client = disk_server(&[]);
    sparse(&client.cwd().join("huge.log"), b"start\n", HUGE);
    // Across mounts a move copies: refused with the limit named, the source untouched.
    let error = client.err(
        "move",
        json!({"source": "/huge.log", "destination": "/scratch/huge.log"}),
    );
    assert!(error.contains("(--max-edit-bytes)"), "{error}");
    assert!(client.cwd().join("huge.log").exists());
    // Within the disk mount: a rename, never a copy.
    let text = client.ok(
        "move",
        json!({"source": "/huge.log", "destination": "/moved.log"}),
    );
    assert!(text.contains("renamed in place"), "{text}");
    assert_eq!(
        std::fs::metadata(client.cwd().join("moved.log"))
            .unwrap()
            .len(),
        HUGE
    );
    client.ok("undo_edit", json!({"file_path": "/moved.log"}));
    assert_eq!(head_of(&client.cwd().join("huge.log"), 6), b"start\n");
    assert_bounded(&mut client, "move 6 GiB");
}

/// 2 GiB.
const TWO_GIB: u64 = 2 * 1024 * 1024 * 1024;

/// What a rename may add to the peak: nothing of the content, only the call's own buffers.
const RENAME_GROWTH_LIMIT: u64 = 4 * 1024 * 1024;

#[test]
fn moving_a_2_gib_directory_or_file_within_the_disk_mount_keeps_memory_flat() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let mut client = disk_server(&[]);
    let root = client.cwd().to_path_buf();
    std::fs::create_dir_all(root.join("data/logs")).unwrap();
    sparse(&root.join("data/a.bin"), b"\0binary", TWO_GIB / 2);
    sparse(&root.join("data/logs/b.log"), b"log line\n", TWO_GIB / 2);
    sparse(&root.join("big.log"), b"start\n", TWO_GIB);
    std::fs::set_permissions(
        root.join("data/a.bin"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let inode = |path: &str| std::fs::metadata(root.join(path)).unwrap().ino();
    let (dir_inode, file_inode) = (inode("data"), inode("big.log"));
    // Warm up: the answer paths of ls and move run once before the peak is taken.
    client.ok("ls", json!({"path": "/"}));
    client.err("move", json!({"source": "/missing", "destination": "/x"}));
    let before = client.peak_memory().expect("VmHWM (Linux)");
    let text = client.ok(
        "move",
        json!({"source": "/data", "destination": "/archive/2026/data"}),
    );
    assert!(text.contains("in one rename"), "{text}");
    let text = client.ok(
        "move",
        json!({"source": "/big.log", "destination": "/archive/big.log"}),
    );
    assert!(text.contains("renamed in place"), "{text}");
    let after = client.peak_memory().expect("VmHWM (Linux)");
    eprintln!(
        "2 GiB directory + 2 GiB file moved: VmHWM {:.1} MiB before, {:.1} MiB after",
        before as f64 / 1048576.0,
        after as f64 / 1048576.0
    );
    assert!(
        after - before < RENAME_GROWTH_LIMIT,
        "peak grew from {before} to {after} bytes"
    );
    assert_eq!(inode("archive/2026/data"), dir_inode);
    assert_eq!(inode("archive/big.log"), file_inode);
    let mode = std::fs::metadata(root.join("archive/2026/data/a.bin"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o755);
    client.ok("undo_edit", json!({"file_path": "/archive/2026/data"}));
    client.ok("undo_edit", json!({"file_path": "/archive/big.log"}));
    assert_eq!(inode("data"), dir_inode);
    assert_eq!(inode("big.log"), file_inode);
    assert_eq!(head_of(&root.join("data/logs/b.log"), 9), b"log line\n");
    let after_undo = client.peak_memory().expect("VmHWM (Linux)");
    assert!(
        after_undo - before < RENAME_GROWTH_LIMIT,
        "undo grew the peak from {before} to {after_undo} bytes"
    );
    assert_bounded(&mut client, "move and undo of 2 GiB");
}

#[test]
fn undo_after_a_file_grew_huge_compares_versions_without_reading_it() {
    let mut client = disk_server(&[]);
    client.ok(
        "write_file",
        json!({"file_path": "/grow.log", "content": "one\n"}),
    );
    // Another program makes it huge: undo must see the change without loading the file.
    sparse(&client.cwd().join("grow.log"), b"one\n", HUGE);
    let error = client.err("undo_edit", json!({"file_path": "/grow.log"}));
    assert!(
        error.starts_with(
            "Error: Cannot undo the last change to /grow.log: it has been modified since"
        ),
        "{error}"
    );
    assert_eq!(
        std::fs::metadata(client.cwd().join("grow.log"))
            .unwrap()
            .len(),
        HUGE
    );
    assert_bounded(&mut client, "undo over 6 GiB");
}

#[test]
fn content_over_the_edit_limit_is_refused_before_anything_is_written() {
    let mut client = disk_server(&["--max-edit-bytes", "1000"]);
    let big = "x".repeat(1001);
    let error = client.err(
        "write_file",
        json!({"file_path": "/big.txt", "content": big}),
    );
    assert_eq!(
        error,
        "Error: content is 1001 bytes, over the limit of 1000 bytes (--max-edit-bytes). Nothing was written. Split the content into several smaller files, or ask the user to raise the limit"
    );
    assert!(!client.cwd().join("big.txt").exists());
    let patch = format!("--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1,1 @@\n+{big}\n");
    let error = client.err("apply_patch", json!({"patch": patch}));
    assert!(
        error.starts_with(
            "Error: /new.txt is 1002 bytes, over the limit of 1000 bytes (--max-edit-bytes)."
        ),
        "{error}"
    );
    assert!(!client.cwd().join("new.txt").exists());
    // A replace_all that would multiply the file past the limit is refused unbuilt.
    client.ok(
        "write_file",
        json!({"file_path": "/small.txt", "content": "a".repeat(100)}),
    );
    let error = client.err(
        "edit_file",
        json!({"file_path": "/small.txt", "old_string": "a", "new_string": "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", "replace_all": true}),
    );
    assert!(
        error.starts_with("Error: the edited text would be 5500 bytes, over the limit of 1000 bytes (--max-edit-bytes)."),
        "{error}"
    );
    assert_eq!(
        std::fs::read_to_string(client.cwd().join("small.txt")).unwrap(),
        "a".repeat(100)
    );
}

#[test]
fn every_tool_on_huge_files_keeps_the_server_alive_and_bounded() {
    let mut client = disk_server(&[]);
    let root = client.cwd().to_path_buf();
    sparse(&root.join("zeros.bin"), b"", HUGE);
    sparse(&root.join("text.log"), b"needle one\nneedle two\n", HUGE);
    let calls: Vec<(&str, Value)> = vec![
        ("ls", json!({"path": "/"})),
        ("file_info", json!({"file_path": "/text.log"})),
        ("file_info", json!({"file_path": "/zeros.bin"})),
        ("read_file", json!({"file_path": "/text.log", "limit": 2})),
        ("read_file", json!({"file_path": "/zeros.bin"})),
        ("glob", json!({"pattern": "*.log"})),
        ("grep", json!({"pattern": "needle"})),
        ("grep", json!({"pattern": "needle", "output_mode": "count"})),
        (
            "grep",
            json!({"pattern": "needle", "output_mode": "content", "context": 100}),
        ),
        (
            "edit_file",
            json!({"file_path": "/text.log", "old_string": "one", "new_string": "1"}),
        ),
        (
            "write_file",
            json!({"file_path": "/zeros.bin", "content": "replaced"}),
        ),
        ("undo_edit", json!({"file_path": "/zeros.bin"})),
        (
            "move",
            json!({"source": "/text.log", "destination": "/scratch/text.log"}),
        ),
        ("delete", json!({"file_path": "/text.log"})),
        ("undo_edit", json!({"file_path": "/text.log"})),
    ];
    for (tool, arguments) in calls {
        let result = client.call(tool, arguments.clone());
        eprintln!(
            "{tool}: {}",
            text_of(&result).chars().take(300).collect::<String>()
        );
        assert!(
            result["content"].is_array(),
            "{tool}({arguments}) gave no answer: {result}"
        );
    }
    assert_bounded(&mut client, "every tool on 6 GiB files");
}

#[test]
fn outside_disk_mounts_a_change_too_large_for_undo_says_it_cannot_be_undone() {
    let mut client = disk_server(&["--max-undo-memory-bytes", "1000"]);
    let content = "y".repeat(600);
    client.ok(
        "write_file",
        json!({"file_path": "/scratch/a.txt", "content": content}),
    );
    let text = client.ok("delete", json!({"file_path": "/scratch/a.txt"}));
    assert_eq!(
        text,
        "Deleted /scratch/a.txt (600 bytes). It was too large to keep for undo_edit (--max-undo-memory-bytes): this deletion cannot be undone."
    );
    client.ok(
        "write_file",
        json!({"file_path": "/scratch/b.txt", "content": content}),
    );
    let text = client.ok(
        "write_file",
        json!({"file_path": "/scratch/b.txt", "content": "short"}),
    );
    assert_eq!(
        text,
        "Replaced /scratch/b.txt (600 bytes) with 1 line, 5 bytes. The previous content was too large to keep for undo_edit: this change cannot be undone."
    );
    // The same size on disk is kept aside instead.
    client.ok(
        "write_file",
        json!({"file_path": "/c.txt", "content": content}),
    );
    let text = client.ok("delete", json!({"file_path": "/c.txt"}));
    assert_eq!(
        text,
        "Deleted /c.txt (600 bytes). undo_edit can restore it."
    );
    client.ok("undo_edit", json!({"file_path": "/c.txt"}));
    assert_eq!(
        std::fs::read_to_string(client.cwd().join("c.txt")).unwrap(),
        content
    );
}

#[test]
fn editing_a_file_of_millions_of_lines_never_splits_it_into_vectors() {
    // 8 MiB of two-byte lines: the line diff of an edit used to hold three vectors of 4 million
    // lines (and the snippet a fourth): 365 MiB for one changed line of a 16 MiB file.
    let mut client = disk_server(&[]);
    let mut text = "a\n".repeat(4 * 1024 * 1024 - 8);
    text.insert_str(0, "first\n");
    std::fs::write(client.cwd().join("lines.txt"), &text).unwrap();
    read_first_line(&mut client, "/lines.txt");
    let out = client.ok(
        "edit_file",
        json!({"file_path": "/lines.txt", "old_string": "first", "new_string": "changed"}),
    );
    assert!(
        out.starts_with("Edited /lines.txt: replaced 1 occurrence.\n1 line(s) added, 1 removed."),
        "{out}"
    );
    let out = client.ok(
        "edit_file",
        json!({"file_path": "/lines.txt", "old_string": "a\n", "new_string": "b\n", "replace_all": true}),
    );
    assert!(
        out.starts_with("Edited /lines.txt: replaced 4194296 occurrences.\n4194296 line(s) added, 4194296 removed in 1 region(s), too many to show here: lines 2-4194297."),
        "{out}"
    );
    // The texts themselves are held a few times over (raw, decoded, edited, written back).
    assert_bounded_by(
        &mut client,
        "edits of an 8 MiB file of 4 million lines",
        144 * 1024 * 1024,
    );
}
