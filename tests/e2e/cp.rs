//! `mountfs cp --from SPEC --to SPEC` (issue 27), the real binary: a tree taken round
//! disk → SQLite → PostgreSQL → disk comes back byte for byte (CRLF, BOM, UTF-16, legacy and
//! invalid UTF-8 bytes, every byte value, empty files, names with spaces, quotes, `$(…)`,
//! backticks, non-ASCII characters and a leading `-`); disk to disk keeps empty directories and
//! modes; each failure (a missing source, an unwritable or read-only destination, a file that
//! exists, a file where the source has a directory, `memory`) exits non-zero with one message
//! naming what and where, leaving no half-written file; a 300 MiB file goes disk → disk, SQLite,
//! PostgreSQL and shell mounts (local `sh`, busybox, OpenSSH) and back in chunks, the copying
//! process's peak memory under 100 MiB and the bytes equal (compared by `cmp`, never held by
//! the test); a copy killed mid-file leaves no file at the destination; a source file changed
//! mid-copy is reported and not copied torn.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;

use crate::support::{PostgresNamespace, postgres_url};

/// What `mountfs cp` did: exit status, stdout, stderr.
struct Outcome {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Outcome {
    /// Asserts a failure with one message on stderr, starting `mountfs cp: ` and holding each
    /// of `words`; nothing on stdout.
    fn assert_fails_with(&self, words: &[&str]) {
        assert_ne!(self.code, 0, "stderr: {}", self.stderr);
        assert!(self.stdout.is_empty(), "stdout: {}", self.stdout);
        assert!(
            self.stderr.starts_with("mountfs cp: "),
            "one message, from cp: {}",
            self.stderr
        );
        assert_eq!(
            self.stderr.matches("mountfs cp: ").count(),
            1,
            "{}",
            self.stderr
        );
        for word in words {
            assert!(self.stderr.contains(word), "{word:?} in: {}", self.stderr);
        }
    }
}

/// `mountfs cp ARGS` run in `cwd`, as user `uid` when given.
fn cp_as(cwd: &Path, uid: Option<u32>, args: &[&str]) -> Outcome {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_mountfs"));
    command.arg("cp").args(args).current_dir(cwd);
    command.env_remove("RUST_LOG");
    if let Some(uid) = uid {
        command.uid(uid).gid(uid);
    }
    let output = command.output().unwrap();
    Outcome {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8(output.stdout).unwrap(),
        stderr: String::from_utf8(output.stderr).unwrap(),
    }
}

fn cp(cwd: &Path, args: &[&str]) -> Outcome {
    cp_as(cwd, None, args)
}

fn cp_ok(cwd: &Path, args: &[&str]) -> Outcome {
    let outcome = cp(cwd, args);
    assert_eq!(outcome.code, 0, "cp {args:?}: {}", outcome.stderr);
    assert!(
        outcome.stderr.is_empty(),
        "no progress line off a terminal, no log: {}",
        outcome.stderr
    );
    outcome
}

/// One node of a directory tree on disk.
#[derive(Debug, PartialEq, Eq)]
enum Node {
    Dir,
    File { bytes: Vec<u8>, mode: u32 },
}

/// Everything below `root`: relative path → node.
fn snapshot(root: &Path) -> BTreeMap<String, Node> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Node>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.strip_prefix(root).unwrap().display().to_string();
            let meta = std::fs::metadata(&path).unwrap();
            if meta.is_dir() {
                out.insert(name, Node::Dir);
                walk(root, &path, out);
            } else {
                let bytes = std::fs::read(&path).unwrap();
                let mode = meta.permissions().mode() & 0o7777;
                out.insert(name, Node::File { bytes, mode });
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// The files of a snapshot, without modes (stores keep none).
fn files_of(tree: &BTreeMap<String, Node>) -> BTreeMap<&str, &[u8]> {
    tree.iter()
        .filter_map(|(name, node)| match node {
            Node::File { bytes, .. } => Some((name.as_str(), bytes.as_slice())),
            Node::Dir => None,
        })
        .collect()
}

/// Names that a shell or an option parser would misread.
const ODD_NAMES: &[&str] = &[
    "a file with spaces.txt",
    "it's \"quoted\".md",
    "$(touch pwned).txt",
    "`touch pwned2`.txt",
    "-leading-dash",
    "--",
    "naïve 日本語 ✓.txt",
];

/// A tree of every kind of content and name cp must carry byte for byte.
fn make_tree(root: &Path) {
    let put = |name: &str, bytes: &[u8]| {
        let path = root.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    };
    put("crlf.txt", b"one\r\ntwo\r\n\r\nlast without newline");
    put("bom.txt", b"\xEF\xBB\xBFwith a byte order mark\n");
    put("utf16.txt", b"\xFF\xFEh\0i\0\n\0");
    put("latin1.txt", b"caf\xE9 cr\xE8me br\xFBl\xE9e\n");
    put("invalid-utf8.txt", b"ok \xC3\x28 \xFF\xFE not utf-8\n");
    put(
        "all-bytes.bin",
        &(0..=255u8).cycle().take(70_000).collect::<Vec<_>>(),
    );
    put("empty.txt", b"");
    put("deep/er/still/nested.md", b"# nested\n");
    for (i, name) in ODD_NAMES.iter().enumerate() {
        put(&format!("odd/{name}"), format!("odd {i}\n").as_bytes());
    }
    std::fs::create_dir_all(root.join("empty-dir/inner-empty")).unwrap();
    std::fs::set_permissions(
        root.join("deep/er/still/nested.md"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
}

fn disk(dir: &Path) -> String {
    format!("disk:{}", dir.display())
}

#[test]
fn a_tree_goes_round_disk_sqlite_postgres_disk_byte_exact() {
    let work = tempfile::tempdir().unwrap();
    let source = work.path().join("source");
    make_tree(&source);
    let sqlite = format!(
        "store:sqlite:{},namespace=copied",
        work.path().join("s.db").display()
    );
    let out = cp_ok(work.path(), &["--from", &disk(&source), "--to", &sqlite]);
    assert!(
        out.stdout.starts_with(&format!(
            "copied {} file(s)",
            files_of(&snapshot(&source)).len()
        )),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("1 empty director(ies) not kept"),
        "a store holds a directory only while a file lies in it: {}",
        out.stdout
    );
    // Through PostgreSQL when there is one (else one SKIPPED line), then back to disk.
    let namespace = postgres_url("cp round trip through PostgreSQL")
        .map(|url| PostgresNamespace::new(&url, "cp"));
    let last_store = match &namespace {
        Some(ns) => {
            let postgres = format!("store:postgres:{},namespace={}", ns.url, ns.name);
            cp_ok(work.path(), &["--from", &sqlite, "--to", &postgres]);
            postgres
        }
        None => sqlite.clone(),
    };
    let back = work.path().join("back");
    cp_ok(work.path(), &["--from", &last_store, "--to", &disk(&back)]);
    let (before, after) = (snapshot(&source), snapshot(&back));
    assert_eq!(
        files_of(&before),
        files_of(&after),
        "every file byte for byte"
    );
    assert!(
        !after.contains_key("empty-dir"),
        "lost in the stores, as said"
    );
    for name in ODD_NAMES {
        assert!(after.contains_key(&format!("odd/{name}")), "{name}");
    }
    assert!(
        !work.path().join("pwned").exists() && !work.path().join("pwned2").exists(),
        "a name is never run"
    );
}

#[test]
fn disk_to_disk_keeps_empty_directories_and_modes() {
    let work = tempfile::tempdir().unwrap();
    let source = work.path().join("source");
    make_tree(&source);
    let copy = work.path().join("new/copy");
    let out = cp_ok(
        work.path(),
        &["--from", &disk(&source), "--to", &disk(&copy)],
    );
    assert_eq!(snapshot(&source), snapshot(&copy));
    assert!(
        out.stdout.contains("1 empty director(ies) made"),
        "{}",
        out.stdout
    );
    let leftovers: Vec<String> = snapshot(&copy)
        .into_keys()
        .filter(|name| name.contains(".mountfs"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn a_missing_source_fails_with_one_clear_message() {
    let work = tempfile::tempdir().unwrap();
    let to = disk(&work.path().join("to"));
    let outcome = cp(work.path(), &["--from", "disk:no/such/dir", "--to", &to]);
    outcome.assert_fails_with(&[
        "--from disk:no/such/dir",
        "does not exist",
        "Check the path",
    ]);
    let outcome = cp(
        work.path(),
        &["--from", "store:sqlite:missing.db", "--to", &to],
    );
    outcome.assert_fails_with(&["the SQLite file missing.db does not exist"]);
    assert!(!work.path().join("missing.db").exists(), "not created");
    // A namespace with nothing in it: likely a typo.
    std::fs::create_dir(work.path().join("src")).unwrap();
    std::fs::write(work.path().join("src/a"), "a").unwrap();
    cp_ok(
        work.path(),
        &["--from", "disk:src", "--to", "store:sqlite:s.db"],
    );
    let outcome = cp(
        work.path(),
        &["--from", "store:sqlite:s.db,namespace=typo", "--to", &to],
    );
    outcome.assert_fails_with(&["holds no files or directories", "namespace"]);
    assert!(
        !work.path().join("to").exists(),
        "a refused copy creates nothing"
    );
}

#[test]
fn a_bad_spec_and_memory_are_refused_before_anything_opens() {
    let work = tempfile::tempdir().unwrap();
    let outcome = cp(work.path(), &["--from", "floppy:/x", "--to", "disk:out"]);
    outcome.assert_fails_with(&["invalid --from 'floppy:/x'", "mount grammar:"]);
    assert_eq!(outcome.code, 2);
    for args in [
        ["--from", "memory", "--to", "disk:out"],
        ["--from", "disk:.", "--to", "memory"],
    ] {
        let outcome = cp(work.path(), &args);
        outcome
            .assert_fails_with(&["memory: a memory mount lives and dies with one server process"]);
        assert_eq!(outcome.code, 1);
    }
    let outcome = cp(work.path(), &["--from", "disk:.", "--to", "disk:./inside"]);
    outcome.assert_fails_with(&["lies inside, --from disk:."]);
    assert!(!work.path().join("out").exists() && !work.path().join("inside").exists());
}

#[test]
fn an_unwritable_destination_fails_and_leaves_no_half_written_file() {
    let work = tempfile::tempdir().unwrap();
    std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let source = work.path().join("source");
    make_tree(&source);
    // A directory this user may enter but not write: as root (who may write anything) cp runs
    // as `nobody`; as anyone else, the directory is read-only to its owner too.
    let locked = work.path().join("locked");
    std::fs::create_dir(&locked).unwrap();
    let root = rustix::process::geteuid().is_root();
    let mode = if root { 0o755 } else { 0o555 };
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(mode)).unwrap();
    let user = root.then_some(65534);
    let outcome = cp_as(
        work.path(),
        user,
        &["--from", &disk(&source), "--to", &disk(&locked)],
    );
    outcome.assert_fails_with(&[
        "cannot write /",
        "to --to",
        "Nothing of /",
        "the 0 file(s) copied before it stay",
        "run again with --overwrite",
    ]);
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert!(snapshot(&locked).is_empty(), "{:?}", snapshot(&locked));

    // Declared read-only: refused before it is opened.
    let outcome = cp(
        work.path(),
        &[
            "--from",
            &disk(&source),
            "--to",
            &format!("{},ro", disk(&locked)),
        ],
    );
    outcome.assert_fails_with(&["the destination is read-only (,ro)", "Drop ,ro"]);
}

#[test]
fn an_existing_file_refuses_the_whole_copy_unless_overwrite() {
    let work = tempfile::tempdir().unwrap();
    let source = work.path().join("source");
    make_tree(&source);
    let to = work.path().join("to");
    std::fs::create_dir_all(to.join("odd")).unwrap();
    std::fs::write(to.join("odd/-leading-dash"), "theirs\n").unwrap();
    std::fs::write(to.join("only-there.txt"), "kept\n").unwrap();
    let args = ["--from", &disk(&source), "--to", &disk(&to)];
    let outcome = cp(work.path(), &args);
    outcome.assert_fails_with(&[
        "1 file(s) to copy already exist in --to, the first /odd/-leading-dash",
        "Nothing was copied",
        "pass --overwrite",
    ]);
    let untouched = snapshot(&to);
    assert_eq!(untouched.len(), 3, "nothing copied: {untouched:?}");

    let mut overwrite = args.to_vec();
    overwrite.push("--overwrite");
    cp_ok(work.path(), &overwrite);
    let (mine, copied) = (snapshot(&source), snapshot(&to));
    for (name, node) in &mine {
        assert_eq!(copied.get(name), Some(node), "{name}");
    }
    assert!(
        copied.contains_key("only-there.txt"),
        "files only there are left alone"
    );
}

#[test]
fn a_file_where_the_source_has_a_directory_is_refused() {
    let work = tempfile::tempdir().unwrap();
    let source = work.path().join("source");
    make_tree(&source);
    let to = work.path().join("to");
    std::fs::create_dir_all(&to).unwrap();
    std::fs::write(
        to.join("deep"),
        "a file named like the source's directory\n",
    )
    .unwrap();
    let outcome = cp(
        work.path(),
        &["--from", &disk(&source), "--to", &disk(&to), "--overwrite"],
    );
    outcome.assert_fails_with(&[
        "/deep is a directory in --from but a file in --to",
        "Nothing was copied",
    ]);
    assert_eq!(snapshot(&to).len(), 1);
}

/// Peak resident memory of a child, by its own `VmHWM` (`/proc/PID/status`), read every few
/// milliseconds until it exits; and its exit status. Not `wait4`'s `ru_maxrss`: a child
/// started by `posix_spawn` (vfork) inherits into it the high-water mark of this test process,
/// whose threads allocate what other tests hold.
fn run_measuring_peak(mut command: std::process::Command) -> (i32, u64) {
    let mut child = command.stdout(std::process::Stdio::null()).spawn().unwrap();
    let status_file = format!("/proc/{}/status", child.id());
    let mut peak = 0u64;
    let status = loop {
        if let Ok(text) = std::fs::read_to_string(&status_file)
            && let Some(line) = text.lines().find(|l| l.starts_with("VmHWM:"))
        {
            let kib: u64 = line
                .split_whitespace()
                .nth(1)
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            peak = peak.max(kib * 1024);
        }
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    };
    (status.code().unwrap_or(-1), peak)
}

#[test]
fn copying_a_64_mib_file_holds_one_file_at_a_time() {
    const BIG: usize = 64 * 1024 * 1024;
    let work = tempfile::tempdir().unwrap();
    let source = work.path().join("source");
    std::fs::create_dir_all(source.join("d")).unwrap();
    // Not compressible, not text: what a database or a disk really has to hold.
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let big: Vec<u8> = (0..BIG)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    std::fs::write(source.join("d/big.bin"), &big).unwrap();
    drop(big);
    for i in 0..20 {
        std::fs::write(source.join(format!("f{i}.txt")), format!("{i}\n")).unwrap();
    }
    let sqlite = format!("store:sqlite:{}", work.path().join("s.db").display());
    let back = work.path().join("back");
    for (from, to) in [
        (disk(&source), sqlite.clone()),
        (sqlite.clone(), disk(&back)),
    ] {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_mountfs"));
        command.args(["cp", "--from", &from, "--to", &to]);
        let (code, peak) = run_measuring_peak(command);
        assert_eq!(code, 0, "{from} -> {to}");
        eprintln!(
            "cp {from} -> {to}: peak RSS {:.1} MiB",
            peak as f64 / 1048576.0
        );
        // Streamed in 4 MiB chunks: less than the file itself (before streaming, the backends'
        // copies of a whole content made it 2.4x to 4.5x the file).
        assert!(peak < BIG as u64, "{from} -> {to}: peak {peak} bytes");
    }
    assert!(
        std::fs::read(source.join("d/big.bin")).unwrap()
            == std::fs::read(back.join("d/big.bin")).unwrap()
    );
}

#[test]
fn a_terminal_gets_a_progress_line_rewritten_in_place() {
    // `script` (util-linux) runs cp with a pseudo-terminal as its stdout and stderr.
    if std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_err()
    {
        crate::support::skips::record(
            "cp progress line on a terminal",
            "no `script` command (util-linux) to give cp a terminal; install util-linux",
        );
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let source = work.path().join("source");
    make_tree(&source);
    let command = format!(
        "'{}' cp --from '{}' --to '{}'",
        env!("CARGO_BIN_EXE_mountfs"),
        disk(&source),
        disk(&work.path().join("to"))
    );
    let output = std::process::Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(output.status.success());
    let seen = String::from_utf8_lossy(&output.stdout);
    assert!(seen.starts_with("\r["), "{seen:?}");
    assert!(seen.contains("files 0.0MiB/0.1MiB /"), "{seen:?}");
    // Cleared before the summary: the summary starts a clean line.
    assert!(seen.contains(" \rcopied 15 file(s)"), "{seen:?}");
}

/// The size of the big file of the streaming tests: 300 MiB and a bit, not a multiple of the
/// chunk nor of 64 KiB (the last range takes the shell target's `tail | head` path).
const STREAMED: u64 = 300 * 1024 * 1024 + 12_345;
/// What a streaming copy may peak at: a third of the file (measured: 34-52 MiB, debug build).
const STREAM_PEAK: u64 = 100 * 1024 * 1024;

/// Writes `size` bytes to `path`: a 1 MiB block of pseudo-random bytes (not UTF-8, so a store
/// keeps it as binary; not compressible by PostgreSQL's pglz, whose window is 4 KiB) over and
/// over, changed in its first bytes each time so that no two MiB are equal.
fn write_big(path: &Path, size: u64) {
    use std::io::Write;
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut block: Vec<u8> = (0..1024 * 1024)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut left = size;
    let mut n = 0u64;
    while left > 0 {
        block[..8].copy_from_slice(&n.to_le_bytes());
        let take = left.min(block.len() as u64) as usize;
        out.write_all(&block[..take]).unwrap();
        left -= take as u64;
        n += 1;
    }
    out.flush().unwrap();
}

/// Whether two files hold the same bytes, by `cmp` (the test never holds them).
fn same_bytes(a: &Path, b: &Path) -> bool {
    std::process::Command::new("cmp")
        .arg("-s")
        .arg(a)
        .arg(b)
        .status()
        .unwrap()
        .success()
}

/// A source directory holding the big file `big.bin` (and a small one after it).
fn big_source(work: &Path, size: u64) -> std::path::PathBuf {
    let source = work.join("source");
    std::fs::create_dir_all(&source).unwrap();
    write_big(&source.join("big.bin"), size);
    std::fs::write(source.join("small.txt"), "small\n").unwrap();
    source
}

/// `mountfs cp EXTRA --from FROM --to TO`, asserting success and a peak under [`STREAM_PEAK`].
fn cp_streaming(extra: &[&str], from: &str, to: &str) {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_mountfs"));
    command
        .arg("cp")
        .args(extra)
        .args(["--from", from, "--to", to]);
    command.env_remove("RUST_LOG");
    let started = std::time::Instant::now();
    let (code, peak) = run_measuring_peak(command);
    eprintln!(
        "cp {from} -> {to}: peak RSS {:.1} MiB, {:.1} s",
        peak as f64 / 1048576.0,
        started.elapsed().as_secs_f64()
    );
    assert_eq!(code, 0, "cp {from} -> {to}");
    assert!(
        peak < STREAM_PEAK,
        "cp {from} -> {to}: peak {:.1} MiB, over {} MiB",
        peak as f64 / 1048576.0,
        STREAM_PEAK / 1048576
    );
}

/// `disk → via → disk` with a file of `size`: each copy under the peak, the bytes equal.
fn round_trip(work: &Path, size: u64, extra: &[&str], via: &str) {
    let source = big_source(work, size);
    let back = work.join("back");
    cp_streaming(extra, &disk(&source), via);
    cp_streaming(extra, via, &disk(&back));
    assert!(same_bytes(&source.join("big.bin"), &back.join("big.bin")));
    assert_eq!(std::fs::read(back.join("small.txt")).unwrap(), b"small\n");
}

#[test]
fn a_300_mib_file_streams_disk_to_disk_in_bounded_memory() {
    let work = tempfile::tempdir().unwrap();
    let source = big_source(work.path(), STREAMED);
    let to = work.path().join("to");
    cp_streaming(&[], &disk(&source), &disk(&to));
    assert!(same_bytes(&source.join("big.bin"), &to.join("big.bin")));
    // No temporary file left beside it.
    let names: Vec<String> = std::fs::read_dir(&to)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
}

#[test]
fn a_300_mib_file_streams_into_sqlite_and_back_in_bounded_memory() {
    let work = tempfile::tempdir().unwrap();
    let sqlite = format!("store:sqlite:{}", work.path().join("s.db").display());
    round_trip(work.path(), STREAMED, &[], &sqlite);
}

#[test]
fn a_300_mib_file_streams_into_postgres_and_back_in_bounded_memory() {
    let Some(url) = postgres_url("cp streaming through PostgreSQL") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let namespace = PostgresNamespace::new(&url, "cp-stream");
    let postgres = format!("store:postgres:{url},namespace={}", namespace.name);
    round_trip(work.path(), STREAMED, &[], &postgres);
}

/// `--shell NAME=COMMAND` for a target's command words.
fn shell_flag(name: &str, command: &[String]) -> String {
    let words: Vec<String> = command
        .iter()
        .map(|w| format!("'{}'", w.replace('\'', r"'\''")))
        .collect();
    format!("--shell={name}={}", words.join(" "))
}

#[test]
fn a_300_mib_file_streams_onto_a_shell_target_and_back_in_bounded_memory() {
    let target = crate::support::shells::local();
    let work = tempfile::tempdir().unwrap();
    let flag = shell_flag("local", &target.command);
    let via = format!("shell:local:{}", target.dir.path().display());
    round_trip(work.path(), STREAMED, &[&flag], &via);
    // On the target itself: the file, whole, and no temporary file beside it.
    let source = work.path().join("source");
    assert!(same_bytes(
        &source.join("big.bin"),
        &target.dir.path().join("big.bin")
    ));
    assert_eq!(std::fs::read_dir(target.dir.path()).unwrap().count(), 2);
}

#[test]
fn big_files_stream_onto_busybox_and_openssh_targets() {
    // Smaller (20 MiB and a bit: five ranges, the last cut short) — the tools' paths are what
    // is tested here, the memory bound above. Not the minimal busybox: without
    // `dd iflag=fullblock` a payload is copied one byte per read (script.rs), minutes for this.
    let size = 20 * 1024 * 1024 + 777;
    let mut targets = Vec::new();
    targets.extend(crate::support::shells::busybox("cp streaming onto busybox"));
    targets.extend(crate::support::shells::ssh("cp streaming over ssh"));
    for target in targets {
        let work = tempfile::tempdir().unwrap();
        let flag = shell_flag("t", &target.command);
        let via = format!("shell:t:{}", target.dir.path().display());
        round_trip(work.path(), size, &[&flag], &via);
        assert_eq!(
            std::fs::read_dir(target.dir.path()).unwrap().count(),
            2,
            "{:?}",
            target.command
        );
    }
}

/// Waits (up to 20 s) until a temporary file of a disk write shows in `dir` with some bytes.
fn wait_for_temp_file(dir: &Path) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let growing = std::fs::read_dir(dir).ok().into_iter().flatten().any(|e| {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with(".mountfs-tmp-")
                && !name.starts_with(".mountfs-tmp-inflight-")
                && e.metadata().is_ok_and(|m| m.len() > 0)
        });
        if growing {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no temporary file in {}",
            dir.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

#[test]
fn a_copy_killed_mid_file_leaves_no_file_at_the_destination() {
    let work = tempfile::tempdir().unwrap();
    let source = big_source(work.path(), STREAMED);
    let to = work.path().join("to");
    let db = work.path().join("s.db");
    let sqlite = format!("store:sqlite:{}", db.display());
    for destination in [disk(&to), sqlite.clone()] {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_mountfs"))
            .args(["cp", "--from", &disk(&source), "--to", &destination])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        if destination == sqlite {
            // Mid-file: the big file (first in path order) takes seconds to stage.
            std::thread::sleep(std::time::Duration::from_millis(1500));
        } else {
            wait_for_temp_file(&to);
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "{destination}: finished before the kill"
        );
        child.kill().unwrap();
        child.wait().unwrap();
    }
    // Disk: no file, only the hidden temporary file, which the next opening of the mount
    // sweeps away (here: the next cp).
    assert!(!to.join("big.bin").exists());
    let listed = std::fs::read_dir(&to).unwrap().count();
    assert!(
        listed <= 2,
        "a temporary file and its record at most: {listed}"
    );
    let other = work.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("x.txt"), "x\n").unwrap();
    cp_ok(work.path(), &["--from", &disk(&other), "--to", &disk(&to)]);
    let names: Vec<String> = std::fs::read_dir(&to)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec!["x.txt".to_owned()]);
    // SQLite: no item (the staged rows were in a temporary table of the killed connection).
    let conn = rusqlite::Connection::open(&db).unwrap();
    let items: i64 = conn
        .query_row("SELECT count(*) FROM mountfs_items", [], |row| row.get(0))
        .unwrap();
    assert_eq!(items, 0);
}

#[test]
fn a_source_file_changed_mid_copy_is_reported_and_not_copied_torn() {
    use std::io::{Seek, Write};
    let work = tempfile::tempdir().unwrap();
    let source = big_source(work.path(), STREAMED);
    let to = work.path().join("to");
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_mountfs"))
        .args(["cp", "--from", &disk(&source), "--to", &disk(&to)])
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_temp_file(&to);
    // Changed in place, behind the copy's back (as an editor or a log writer would).
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .open(source.join("big.bin"))
        .unwrap();
    file.seek(std::io::SeekFrom::Start(STREAMED - 10)).unwrap();
    file.write_all(b"CHANGED!").unwrap();
    drop(file);
    let output = child.wait_with_output().unwrap();
    let outcome = Outcome {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8(output.stdout).unwrap(),
        stderr: String::from_utf8(output.stderr).unwrap(),
    };
    outcome.assert_fails_with(&[
        "/big.bin changed in --from while it was being copied",
        "Nothing of /big.bin was written",
    ]);
    let names: Vec<String> = std::fs::read_dir(&to)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.is_empty(),
        "nothing left at the destination: {names:?}"
    );
}

/// A big file changed in a store while `cp` streams it out (issue 27: SQLite reads it through a
/// blob handle kept open on a snapshot, PostgreSQL from its uncompressed column): the next range
/// is checked against the item's current version, so the copy stops and nothing is written.
#[test]
fn a_store_item_changed_mid_copy_is_reported_and_not_copied_torn() {
    let work = tempfile::tempdir().unwrap();
    let source = big_source(work.path(), 64 * 1024 * 1024 + 12_345);
    let db = work.path().join("s.db");
    let namespace = postgres_url("cp out of a PostgreSQL item changed mid-copy")
        .map(|url| PostgresNamespace::new(&url, "cp-changed"));
    let mut stores = vec![(format!("store:sqlite:{}", db.display()), None)];
    if let Some(ns) = &namespace {
        let spec = format!("store:postgres:{},namespace={}", ns.url, ns.name);
        stores.push((spec, Some(ns)));
    }
    for (store, postgres) in stores {
        cp_ok(work.path(), &["--from", &disk(&source), "--to", &store]);
        let to = work.path().join(if postgres.is_some() {
            "to-pg"
        } else {
            "to-sqlite"
        });
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_mountfs"))
            .args(["cp", "--from", &store, "--to", &disk(&to)])
            .env_remove("RUST_LOG")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        wait_for_temp_file(&to);
        // The copy is held still while another writer gives the item a new version behind its
        // back, so the change lands mid-copy however fast the copy runs.
        let pid = i32::try_from(child.id()).unwrap();
        // SAFETY: signals the child this test started (and waits for below).
        unsafe { libc::kill(pid, libc::SIGSTOP) };
        match postgres {
            None => {
                let conn = rusqlite::Connection::open(&db).unwrap();
                conn.busy_timeout(std::time::Duration::from_secs(30))
                    .unwrap();
                let changed = conn
                    .execute(
                        "UPDATE mountfs_items SET version = version + 1000000 WHERE key = '/big.bin'",
                        [],
                    )
                    .unwrap();
                assert_eq!(changed, 1);
            }
            Some(ns) => {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                runtime.block_on(async {
                    let (client, connection) =
                        tokio_postgres::connect(&ns.url, tokio_postgres::NoTls)
                            .await
                            .unwrap();
                    tokio::spawn(connection);
                    let changed = client
                        .execute(
                            "UPDATE mountfs_items SET version = nextval('mountfs_versions')
                             WHERE namespace = $1 AND key = '/big.bin'",
                            &[&ns.name],
                        )
                        .await
                        .unwrap();
                    assert_eq!(changed, 1);
                });
            }
        }
        // SAFETY: as above; the child goes on from where it was held.
        unsafe { libc::kill(pid, libc::SIGCONT) };
        let output = child.wait_with_output().unwrap();
        let outcome = Outcome {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8(output.stdout).unwrap(),
            stderr: String::from_utf8(output.stderr).unwrap(),
        };
        outcome.assert_fails_with(&[
            "/big.bin changed in --from while it was being copied",
            "Nothing of /big.bin was written",
        ]);
        let left: Vec<String> = std::fs::read_dir(&to)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name != "small.txt")
            .collect();
        assert!(
            left.is_empty(),
            "{store}: left at the destination: {left:?}"
        );
    }
}

/// A file bigger than a store holds in one value is refused at once, naming the limit, before
/// anything is staged (review finding 4: SQLite failed with "string or blob too big" after
/// staging 1 GiB for 6.5 s, PostgreSQL with "out of memory" after 13.8 s).
#[test]
fn a_file_over_a_stores_value_limit_is_refused_before_staging() {
    let work = tempfile::tempdir().unwrap();
    let source = work.path().join("src");
    std::fs::create_dir(&source).unwrap();
    // Sparse: 1 GiB that takes no disk.
    std::fs::File::create(source.join("huge"))
        .unwrap()
        .set_len(1 << 30)
        .unwrap();
    let mut targets = vec![(
        "SQLITE_LIMIT_LENGTH",
        format!("store:sqlite:{}", work.path().join("s.db").display()),
    )];
    let namespace = postgres_url("cp value limit through PostgreSQL")
        .map(|url| (PostgresNamespace::new(&url, "cp-limit"), url));
    if let Some((namespace, url)) = &namespace {
        targets.push((
            "bytea",
            format!("store:postgres:{url},namespace={}", namespace.name),
        ));
    }
    for (limit, to) in targets {
        let started = std::time::Instant::now();
        let outcome = cp(work.path(), &["--from", &disk(&source), "--to", &to]);
        outcome.assert_fails_with(&["/huge", limit, "1073741824 bytes"]);
        assert!(
            started.elapsed() < std::time::Duration::from_secs(3),
            "{limit}: refused only after {:?}",
            started.elapsed()
        );
    }
}

/// SIGINT in the middle of a big file's copy to a shell target stops it between two chunks,
/// aborts the upload (no temporary file stays on the target), says so and exits 130 (review
/// finding 8: the temporary file stayed for good).
#[test]
fn an_interrupted_copy_removes_its_temporary_file_and_exits_130() {
    let work = tempfile::tempdir().unwrap();
    let source = work.path().join("src");
    let destination = work.path().join("dst");
    std::fs::create_dir(&source).unwrap();
    std::fs::create_dir(&destination).unwrap();
    std::fs::File::create(source.join("big"))
        .unwrap()
        .set_len(2 << 30)
        .unwrap();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_mountfs"))
        .args(["cp", "--shell", "t=sh", "--from"])
        .arg(disk(&source))
        .arg("--to")
        .arg(format!("shell:t:{}", destination.display()))
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let temp_exists = || {
        std::fs::read_dir(&destination).unwrap().any(|e| {
            e.unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with(".mountfs-tmp.")
        })
    };
    let started = std::time::Instant::now();
    while !temp_exists() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "no upload began"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    // SAFETY: kill(2) on the child's pid, a plain syscall.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(130), "stderr: {stderr}");
    assert!(
        stderr.contains("interrupted while copying /big"),
        "{stderr}"
    );
    let left: Vec<_> = std::fs::read_dir(&destination)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "left on the target: {left:?}");
}

/// The `.mountfs-tmp.*` files directly in `dir`.
fn shell_temp_files(dir: &Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(".mountfs-tmp.")
        })
        .collect()
}

/// Whether the process `pid` has ended (gone, or a zombie not reaped yet).
fn process_ended(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X']))
    })
}

/// Issue 27, leftover 1: a copy to a shell target killed with SIGKILL mid-file leaves its
/// hidden temporary file there (nothing can abort the upload); the next opening of the mount
/// (here: the next `cp`) removes it once no live writer can own it (older than an hour, its
/// shell gone), and keeps it while it is young.
#[test]
fn a_copy_to_a_shell_target_killed_mid_file_leaves_a_temporary_file_the_next_open_sweeps() {
    let work = tempfile::tempdir().unwrap();
    let source = work.path().join("src");
    let destination = work.path().join("dst");
    std::fs::create_dir(&source).unwrap();
    std::fs::create_dir(&destination).unwrap();
    // Sparse: 2 GiB that take no disk, and seconds to copy.
    std::fs::File::create(source.join("big"))
        .unwrap()
        .set_len(2 << 30)
        .unwrap();
    let to = format!("shell:t:{}", destination.display());
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_mountfs"))
        .args([
            "cp",
            "--shell",
            "t=sh",
            "--from",
            &disk(&source),
            "--to",
            &to,
        ])
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while shell_temp_files(&destination).is_empty() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "no upload began"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(
        child.try_wait().unwrap().is_none(),
        "finished before the kill"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    let left = shell_temp_files(&destination);
    assert_eq!(left.len(), 1, "{left:?}");
    let temp = left[0].clone();
    assert!(!destination.join("big").exists());
    // Its name carries the pid of the shell that wrote it; that shell ends with its input.
    let name = temp.file_name().unwrap().to_string_lossy().into_owned();
    let pid = name
        .strip_prefix(".mountfs-tmp.")
        .and_then(|rest| rest.split('.').next())
        .unwrap()
        .to_owned();
    assert!(pid.bytes().all(|b| b.is_ascii_digit()), "{name}");
    while !process_ended(&pid) {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "shell {pid} still runs"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let other = work.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("x.txt"), "x\n").unwrap();
    // Young: kept (it could be a live upload's).
    cp_ok(
        work.path(),
        &["--shell", "t=sh", "--from", &disk(&other), "--to", &to],
    );
    assert!(temp.exists(), "a young temporary file was swept");
    // Older than an hour, its shell gone: the next opening sweeps it.
    let hours_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(2 * 3600);
    std::fs::File::open(&temp)
        .unwrap()
        .set_modified(hours_ago)
        .unwrap();
    cp_ok(
        work.path(),
        &[
            "--shell",
            "t=sh",
            "--overwrite",
            "--from",
            &disk(&other),
            "--to",
            &to,
        ],
    );
    let mut names: Vec<String> = std::fs::read_dir(&destination)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["x.txt"]);
}

/// Issue 41: a destination that is the source by identity — a bind mount of it, whatever its
/// path — is refused, as a path inside it is; a symbolic link to it too. The bind mount is
/// made in a private mount namespace (`unshare --mount`, as root) that dies with the command.
#[test]
fn a_destination_that_is_the_source_by_identity_is_refused() {
    let work = tempfile::tempdir().unwrap();
    let source = work.path().join("source");
    make_tree(&source);
    std::os::unix::fs::symlink(&source, work.path().join("alias")).unwrap();
    let outcome = cp(
        work.path(),
        &["--from", &disk(&source), "--to", "disk:./alias/copy"],
    );
    outcome.assert_fails_with(&["lies inside, --from"]);
    assert!(!source.join("copy").exists());

    if !crate::skips::private_mounts_or_skip("cp into a bind mount of its source") {
        return;
    }
    let bound = work.path().join("bound");
    std::fs::create_dir(&bound).unwrap();
    let script = format!(
        "mount --bind {src} {bound} && exec {bin} cp --from disk:{src} --to disk:{bound}/copy",
        src = source.display(),
        bound = bound.display(),
        bin = env!("CARGO_BIN_EXE_mountfs"),
    );
    let output = std::process::Command::new("unshare")
        .args(["--mount", "sh", "-c", &script])
        .current_dir(work.path())
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success(),
        "cp into a bind mount of its source: {stderr}"
    );
    assert!(stderr.contains("lies inside, --from"), "{stderr}");
    assert!(
        !source.join("copy").exists(),
        "the tree was copied into itself"
    );
}

/// Attack review of issue 41 (defect 6): a destination inside a bind mount of a directory
/// *inside* the source is inside the source too — the copy would read what it writes — and is
/// refused, whatever its path; found by device and inode of every directory of the source.
#[test]
fn a_destination_in_a_bind_mount_of_a_source_subdirectory_is_refused() {
    if !crate::skips::private_mounts_or_skip("cp into a bind mount of a subdirectory of its source")
    {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let source = work.path().join("source");
    make_tree(&source);
    let deep = source.join("inner/sub");
    std::fs::create_dir_all(&deep).unwrap();
    std::fs::write(deep.join("x.txt"), "x\n").unwrap();
    let bound = work.path().join("bound");
    std::fs::create_dir(&bound).unwrap();
    // The destination itself, and a directory not made yet below it.
    for to in ["", "/copy/new"] {
        let script = format!(
            "mount --bind {deep} {bound} && exec {bin} cp --from disk:{src} --to disk:{bound}{to}",
            deep = deep.display(),
            src = source.display(),
            bound = bound.display(),
            bin = env!("CARGO_BIN_EXE_mountfs"),
        );
        let output = std::process::Command::new("unshare")
            .args(["--mount", "sh", "-c", &script])
            .current_dir(work.path())
            .env_remove("RUST_LOG")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            !output.status.success(),
            "cp into a bind mount of a subdirectory of its source ({to}): {stderr}"
        );
        assert!(stderr.contains("lies inside, --from"), "{stderr}");
        let mut names: Vec<String> = std::fs::read_dir(&deep)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["x.txt"], "the tree was copied into itself ({to})");
    }
}

/// Issue 41: an entry of a disk source the listing would leave out — a symbolic link leading
/// out, a FIFO — fails the copy with its path and why, before anything is written, instead of
/// a "copied" that silently lacks it; a file the copying user cannot read fails it too.
#[test]
fn an_entry_the_copy_would_skip_fails_it() {
    let work = tempfile::tempdir().unwrap();
    std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let source = work.path().join("source");
    std::fs::create_dir_all(source.join("box")).unwrap();
    std::fs::write(source.join("a.txt"), "a").unwrap();
    let out = work.path().join("out");
    std::fs::create_dir(&out).unwrap();
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o777)).unwrap();

    std::os::unix::fs::symlink("/etc/hostname", source.join("box/out-link")).unwrap();
    let outcome = cp(
        work.path(),
        &["--from", &disk(&source), "--to", &disk(&out)],
    );
    outcome.assert_fails_with(&[
        "/box/out-link in --from cannot be copied: it is a symbolic link leading out of --from, or to nothing",
        "Nothing was copied",
    ]);
    assert!(snapshot(&out).is_empty(), "{:?}", snapshot(&out));
    std::fs::remove_file(source.join("box/out-link")).unwrap();

    rustix::fs::mknodat(
        rustix::fs::CWD,
        source.join("box/pipe"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    let outcome = cp(
        work.path(),
        &["--from", &disk(&source), "--to", &disk(&out)],
    );
    outcome.assert_fails_with(&[
        "/box/pipe in --from cannot be copied: it is neither a file nor a directory",
    ]);
    assert!(snapshot(&out).is_empty(), "{:?}", snapshot(&out));
    std::fs::remove_file(source.join("box/pipe")).unwrap();

    // A file the copying user cannot read (as root, cp runs as `nobody`).
    std::fs::write(source.join("box/secret.txt"), "s").unwrap();
    std::fs::set_permissions(
        source.join("box/secret.txt"),
        std::fs::Permissions::from_mode(0o000),
    )
    .unwrap();
    for dir in [&source, &source.join("box")] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::set_permissions(source.join("a.txt"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let root = rustix::process::geteuid().is_root();
    let outcome = cp_as(
        work.path(),
        root.then_some(65534),
        &["--from", &disk(&source), "--to", &disk(&out)],
    );
    outcome.assert_fails_with(&["cannot read /box/secret.txt from --from"]);
    assert!(!out.join("box/secret.txt").exists());
}

/// Issue 41: a name reserved for mountfs's own files in a source (a store written by an older
/// release, or by another program) is never copied: the source's listing never shows it (attack
/// review of issue 41), so the copy goes on without it.
#[test]
fn a_reserved_name_in_the_source_is_not_copied() {
    let work = tempfile::tempdir().unwrap();
    let db = work.path().join("old.db");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        // Written in the table as another program would: the store backend refuses the name.
        let store = mountfs::storage::store::SqliteStore::open(&db)
            .await
            .unwrap();
        let namespace = mountfs::storage::store::Namespace::new("default").unwrap();
        for key in ["/a.txt", "/d/.mountfs-tmp-journal-1-1/journal"] {
            mountfs::storage::store::Store::put(
                &store,
                &namespace,
                key,
                b"x",
                mountfs::storage::store::PutCondition::CreateOnly,
            )
            .await
            .unwrap();
        }
    });
    let out = work.path().join("out");
    let outcome = cp(
        work.path(),
        &[
            "--from",
            &format!("store:sqlite:{}", db.display()),
            "--to",
            &disk(&out),
        ],
    );
    assert_eq!(outcome.code, 0, "stderr: {}", outcome.stderr);
    assert_eq!(std::fs::read(out.join("a.txt")).unwrap(), b"x");
    assert!(!out.join("d/.mountfs-tmp-journal-1-1").exists());
}
