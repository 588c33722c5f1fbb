//! Crash safety of disk writes: a child process rewrites a set of files as fast as it can
//! through `DiskBackend::write` and is killed with SIGKILL at random moments, several
//! times over. After each kill every file must hold exactly one complete version (never a mix,
//! never a truncation), and after the next start no temporary file may survive.
//!
//! The child is this very test binary, re-run with `--exact crash::crash_writer_child --ignored` and
//! the directory in `MOUNTFS_CRASH_DIR`, so no extra binary target is needed.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use mountfs::ground::path::VirtualPath;
use mountfs::storage::backend::{Backend, DiskBackend, DiskOptions, WriteMode};

const FILES: usize = 8;
const KILLS: usize = 12;
const DIR_VAR: &str = "MOUNTFS_CRASH_DIR";
/// Where the recovery key the child and the parent share is kept (as a server's data
/// directory keeps it across restarts): a record the child wrote is the parent's to sweep.
const KEYS_VAR: &str = "MOUNTFS_CRASH_KEYS";

fn options(keys: &Path) -> DiskOptions {
    let key = mountfs::storage::backend::disk::trust::RecoveryKey::in_dir(keys).unwrap();
    DiskOptions {
        recovery: Some(std::sync::Arc::new(key)),
        ..DiskOptions::default()
    }
}

/// Version `n` of file `i`: a first line naming both, then filler whose length depends on `n`
/// (from 60 bytes to ~60 KiB), every line carrying the same `(i, n)` so a mix shows.
fn version_content(i: usize, n: u64) -> Vec<u8> {
    let lines = 1 + (n % 7) * 150;
    let mut out = format!("file {i} version {n}\n").into_bytes();
    for k in 0..lines {
        out.extend_from_slice(format!("{i}:{n}:{k:08} the quick brown fox jumps\n").as_bytes());
    }
    out
}

/// Whether `content` is exactly some version of file `i`.
fn is_whole_version(i: usize, content: &[u8]) -> bool {
    let Some(first) = content.split(|b| *b == b'\n').next() else {
        return false;
    };
    let Some(n) = std::str::from_utf8(first)
        .ok()
        .and_then(|l| l.strip_prefix(&format!("file {i} version ")))
        .and_then(|n| n.parse::<u64>().ok())
    else {
        return false;
    };
    content == version_content(i, n).as_slice()
}

fn file_path(i: usize) -> VirtualPath {
    VirtualPath::parse(&format!("/dir{}/file{i}.txt", i % 3)).unwrap()
}

/// The child: rewrites the files in a loop until killed (run only by the parent test).
#[test]
#[ignore = "child process of writes_survive_sigkill_at_random_moments"]
fn crash_writer_child() {
    let Some(dir) = std::env::var_os(DIR_VAR) else {
        return;
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let keys = std::env::var_os(KEYS_VAR).unwrap();
    let backend =
        DiskBackend::open_without_sweep(Path::new(&dir), options(Path::new(&keys))).unwrap();
    let start: u64 = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    // Tells the parent where this round's version numbers start, to count the writes done.
    std::fs::write(Path::new(&dir).join("started.txt"), start.to_string()).unwrap();
    // One writer task per file, so the fsyncs of different files overlap (as the server's
    // blocking pool does for concurrent calls) and a round sees many writes.
    let backend = std::sync::Arc::new(backend);
    runtime.block_on(async {
        let mut writers = Vec::new();
        for i in 0..FILES {
            let backend = backend.clone();
            writers.push(tokio::spawn(async move {
                for k in 0.. {
                    let n = start + k * FILES as u64 + i as u64;
                    backend
                        .write(&file_path(i), &version_content(i, n), WriteMode::Overwrite)
                        .await
                        .unwrap();
                }
            }));
        }
        for writer in writers {
            writer.await.unwrap();
        }
    });
}

/// A small xorshift generator: random kill moments without another dependency.
struct Xorshift(u64);

impl Xorshift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn temp_files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(mountfs::storage::backend::disk::TEMP_PREFIX))
            {
                found.push(path);
            }
        }
    }
    found
}

#[test]
fn writes_survive_sigkill_at_random_moments() {
    let dir = tempfile::tempdir().unwrap();
    let keys = tempfile::tempdir().unwrap();
    let mut rng = Xorshift(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
            | 1,
    );
    let mut writes_seen = 0usize;
    let mut writes_done = 0u64;
    let mut temps_left_by_kills = 0usize;
    for round in 0..KILLS {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "crash::crash_writer_child",
                "--ignored",
                "--quiet",
            ])
            .env(DIR_VAR, dir.path())
            .env(KEYS_VAR, keys.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Let it start and write for a random while, then kill it mid-flight.
        let wait = Duration::from_millis(150 + rng.next() % 400);
        std::thread::sleep(wait);
        child.kill().unwrap(); // SIGKILL on Unix
        child.wait().unwrap();

        let started: Option<u64> = std::fs::read_to_string(dir.path().join("started.txt"))
            .ok()
            .and_then(|t| t.parse().ok());
        let mut newest = None;
        for i in 0..FILES {
            let rel = file_path(i);
            let host = dir.path().join(rel.as_str().trim_start_matches('/'));
            let Ok(content) = std::fs::read(&host) else {
                continue; // not written yet in the first round
            };
            writes_seen += 1;
            let version = std::str::from_utf8(&content)
                .ok()
                .and_then(|t| t.lines().next())
                .and_then(|l| l.rsplit(' ').next())
                .and_then(|n| n.parse::<u64>().ok());
            newest = newest.max(version);
            assert!(
                is_whole_version(i, &content),
                "round {round}: {} holds a torn or foreign content ({} bytes)",
                rel,
                content.len()
            );
        }
        if let (Some(started), Some(newest)) = (started, newest) {
            writes_done += newest.saturating_sub(started) + 1;
        }
        temps_left_by_kills += temp_files(dir.path()).len();
    }
    assert!(writes_seen > 0, "the child never wrote anything");

    // The next start removes whatever temporary files the kills left.
    let _backend = DiskBackend::open(dir.path(), options(keys.path())).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !temp_files(dir.path()).is_empty() {
        assert!(
            Instant::now() < deadline,
            "temporary files survived the next start: {:?}",
            temp_files(dir.path())
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!(
        "{KILLS} kills after ~{writes_done} writes, {writes_seen} files checked whole, {temps_left_by_kills} temporary files seen after kills and swept"
    );
    // Typically ~2,500 writes on the 2-core machine; the floor leaves room for a slow disk.
    assert!(
        writes_done >= 500,
        "only ~{writes_done} writes: too few to mean much"
    );
}
