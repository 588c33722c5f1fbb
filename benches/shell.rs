//! Shell-mount benchmark (issue 27), over a real OpenSSH server on 127.0.0.1 started here:
//! the persistent design (one long-lived `ssh … sh`, every call a frame on it) side by side with
//! the per-call design (one fresh `ssh host cmd` per operation), in the same run, on the same
//! files: `read_file` of a 2 KiB file, a 100-line window in the middle of a 64 MiB file (the
//! same window again and again, the next page each time, and the first window of the file on a
//! mount that remembers none of its line starts yet), and a
//! grep of a literal in 2,000 files (~4 KiB each, 1 in 10 holding it), and a grep of a regex with
//! no literal (`\d{4}-\d{2}-\d{2}`) in the same files (another 1 in 10 matching), and in a copy
//! of them where every file also holds a non-ASCII UTF-8 comment.
//!
//! The persistent side goes through `ShellBackend` (what a tool call does below the tool
//! layer); the per-call side runs `ssh … cat FILE`, `ssh … sed -n 'A,Bp;Bq' FILE` and
//! `ssh … grep -rlF NEEDLE DIR` and `ssh … grep -rlE '[0-9]{4}-…' DIR`. Timings are medians of
//! warm runs.
//!
//! Run: `apt-get install openssh-server openssh-client`, then `cargo bench --bench shell`.

#[path = "../tests/support/mod.rs"]
mod support;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mountfs::ground::path::VirtualPath;
use mountfs::ground::search::GrepPattern;
use mountfs::storage::backend::{
    Backend, GrepCollect, GrepQuery, LineWindow, SearchControl, ShellBackend,
};
use support::shells::SshServer;

const SMALL_RUNS: usize = 40;
const GREP_RUNS: usize = 8;
/// First windows of the big file, each on a mount that remembers nothing yet.
const FIRST_RUNS: usize = 5;
const FILES: usize = 2_000;
const NEEDLE: &str = "needle_4f2a";
/// A regex without a literal the target could be asked for (issue 27), and the same for
/// `grep -E`.
const DATED: &str = r"\d{4}-\d{2}-\d{2}";
const DATED_ERE: &str = "'[0-9]{4}-[0-9]{2}-[0-9]{2}'";

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn time_async<F, Fut>(runtime: &tokio::runtime::Runtime, runs: usize, mut op: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    runtime.block_on(op()); // warm
    let samples = (0..runs)
        .map(|_| {
            let start = Instant::now();
            runtime.block_on(op());
            start.elapsed()
        })
        .collect();
    median(samples)
}

fn time_ssh(server: &SshServer, runs: usize, remote: &[&str], expect: &dyn Fn(&[u8])) -> Duration {
    let command = server.ssh_command(remote);
    let run = || {
        let output = Command::new(&command[0])
            .args(&command[1..])
            .stdin(Stdio::null())
            .output()
            .expect("ssh");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        expect(&output.stdout);
    };
    run();
    let samples = (0..runs)
        .map(|_| {
            let start = Instant::now();
            run();
            start.elapsed()
        })
        .collect();
    median(samples)
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

fn main() {
    let server = match SshServer::start() {
        Ok(server) => server,
        Err(reason) => {
            eprintln!("SKIPPED shell benchmark: {reason}");
            return;
        }
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    // The files.
    let small: String = (0..64)
        .map(|i| format!("line {i:02} of a small file, 32 bytes\n"))
        .collect::<String>()[..2048]
        .to_owned();
    std::fs::write(root.join("small.txt"), &small).unwrap();
    let mut big = String::with_capacity(70 << 20);
    let mut lines = 0usize;
    while big.len() < 64 << 20 {
        big.push_str(&format!(
            "{lines:08} a line of the big log with some text in it\n"
        ));
        lines += 1;
    }
    std::fs::write(root.join("big.log"), &big).unwrap();
    for i in 0..FILES {
        let sub = root.join(format!("tree/d{:02}", i % 40));
        std::fs::create_dir_all(&sub).unwrap();
        let mut text: String = (0..100)
            .map(|l| format!("fn item_{i}_{l}() {{ let x = {l}; }}\n"))
            .collect();
        if i % 10 == 0 {
            text.push_str(&format!("// {NEEDLE} here\n"));
        }
        if i % 10 == 5 {
            text.push_str("// released 2026-11-26\n");
        }
        std::fs::write(sub.join(format!("f{i:04}.rs")), &text).unwrap();
        // The same files with a comment in German and Japanese: valid UTF-8, not ASCII.
        let sub = root.join(format!("tree-utf8/d{:02}", i % 40));
        std::fs::create_dir_all(&sub).unwrap();
        text.push_str("// Grüße, 日本語のコメント\n");
        std::fs::write(sub.join(format!("f{i:04}.rs")), text).unwrap();
    }
    let root_text = root.to_str().unwrap().to_owned();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let backend = Arc::new(ShellBackend::new("bench", server.command(), &root_text));
    runtime.block_on(backend.probe()).expect("connect");
    let p = |s: &str| VirtualPath::parse(s).unwrap();
    let mid = lines / 2;
    // Line starts of a file are remembered once its ctime is two seconds old (see
    // `backend::shell`): let the files written above get there.
    std::thread::sleep(Duration::from_millis(2_200));

    // Persistent shell.
    let b = backend.clone();
    let read_small = time_async(&runtime, SMALL_RUNS, || {
        let b = b.clone();
        async move {
            let file = b.read(&p("/small.txt")).await.unwrap();
            assert_eq!(file.content.len(), 2048);
        }
    });
    let b = backend.clone();
    let window = time_async(&runtime, SMALL_RUNS, || {
        let b = b.clone();
        async move {
            let view = b
                .read_window(
                    &p("/big.log"),
                    LineWindow {
                        offset: mid,
                        limit: 100,
                    },
                )
                .await
                .unwrap();
            let mountfs::storage::backend::FileView::Text(text) = view else {
                panic!("text")
            };
            assert_eq!(text.lines.len(), 100);
        }
    });
    let after_repeats = backend.window_counters();
    // Paging on from the middle: each window starts where the one before it ended.
    let page = Arc::new(std::sync::atomic::AtomicUsize::new(mid + 100));
    let b = backend.clone();
    let next_page = time_async(&runtime, SMALL_RUNS, || {
        let b = b.clone();
        let offset = page.fetch_add(100, std::sync::atomic::Ordering::Relaxed);
        async move {
            let view = b
                .read_window(&p("/big.log"), LineWindow { offset, limit: 100 })
                .await
                .unwrap();
            let mountfs::storage::backend::FileView::Text(text) = view else {
                panic!("text")
            };
            assert_eq!(text.lines.len(), 100);
        }
    });
    // The first window of the file: a mount that remembers nothing yet (its connection opened
    // before the clock starts).
    let first_window = median(
        (0..FIRST_RUNS)
            .map(|_| {
                let fresh = ShellBackend::new("bench", server.command(), &root_text);
                runtime.block_on(fresh.probe()).expect("connect");
                let start = Instant::now();
                let view = runtime
                    .block_on(fresh.read_window(
                        &p("/big.log"),
                        LineWindow {
                            offset: mid,
                            limit: 100,
                        },
                    ))
                    .unwrap();
                let elapsed = start.elapsed();
                assert!(matches!(view, mountfs::storage::backend::FileView::Text(_)));
                assert_eq!(fresh.window_counters().lines_passed, mid as u64);
                elapsed
            })
            .collect(),
    );
    let pattern = Arc::new(GrepPattern::new(NEEDLE, true, false).unwrap());
    let b = backend.clone();
    let grep = time_async(&runtime, GREP_RUNS, || {
        let b = b.clone();
        let pattern = pattern.clone();
        async move {
            let found = b
                .grep(&GrepQuery {
                    dir: p("/tree"),
                    pattern,
                    file_filter: None,
                    collect: GrepCollect::Files,
                    control: SearchControl::default(),
                })
                .await
                .unwrap();
            assert_eq!(found.len(), FILES / 10);
        }
    });

    let dated = Arc::new(GrepPattern::new(DATED, false, false).unwrap());
    let b = backend.clone();
    let grep_regex = time_async(&runtime, GREP_RUNS, || {
        let b = b.clone();
        let pattern = dated.clone();
        async move {
            let found = b
                .grep(&GrepQuery {
                    dir: p("/tree"),
                    pattern,
                    file_filter: None,
                    collect: GrepCollect::Files,
                    control: SearchControl::default(),
                })
                .await
                .unwrap();
            assert_eq!(found.len(), FILES / 10);
        }
    });

    let b = backend.clone();
    let grep_regex_utf8 = time_async(&runtime, GREP_RUNS, || {
        let b = b.clone();
        let pattern = dated.clone();
        async move {
            let found = b
                .grep(&GrepQuery {
                    dir: p("/tree-utf8"),
                    pattern,
                    file_filter: None,
                    collect: GrepCollect::Files,
                    control: SearchControl::default(),
                })
                .await
                .unwrap();
            assert_eq!(found.len(), FILES / 10);
        }
    });

    // One fresh ssh per operation.
    let small_path = format!("{root_text}/small.txt");
    let big_path = format!("{root_text}/big.log");
    let tree_path = format!("{root_text}/tree");
    let ssh_small = time_ssh(&server, SMALL_RUNS / 2, &["cat", &small_path], &|out| {
        assert_eq!(out.len(), 2048)
    });
    // ssh hands the words to the remote shell joined by spaces: quote the script.
    let range = format!("'{},{}p;{}q'", mid + 1, mid + 100, mid + 100);
    let ssh_window = time_ssh(
        &server,
        SMALL_RUNS / 2,
        &["sed", "-n", &range, &big_path],
        &|out| assert_eq!(out.iter().filter(|b| **b == b'\n').count(), 100),
    );
    let ssh_grep = time_ssh(
        &server,
        GREP_RUNS,
        &["grep", "-rlF", NEEDLE, &tree_path],
        &|out| assert_eq!(out.iter().filter(|b| **b == b'\n').count(), FILES / 10),
    );

    let ssh_grep_regex = time_ssh(
        &server,
        GREP_RUNS,
        &["grep", "-rlE", DATED_ERE, &tree_path],
        &|out| assert_eq!(out.iter().filter(|b| **b == b'\n').count(), FILES / 10),
    );

    let tree_utf8_path = format!("{root_text}/tree-utf8");
    let ssh_grep_regex_utf8 = time_ssh(
        &server,
        GREP_RUNS,
        &["grep", "-rlE", DATED_ERE, &tree_utf8_path],
        &|out| assert_eq!(out.iter().filter(|b| **b == b'\n').count(), FILES / 10),
    );

    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "shell mount over loopback ssh (medians; load {})",
        load.trim()
    );
    println!(
        "{:<44} {:>12} {:>16} {:>8}",
        "operation", "persistent", "fresh ssh/op", "ratio"
    );
    for (name, persistent, fresh) in [
        ("read_file, 2 KiB file", read_small, ssh_small),
        (
            "100-line window, middle of a 64 MiB file",
            window,
            ssh_window,
        ),
        (
            "  the same, paging on (the next 100 lines)",
            next_page,
            ssh_window,
        ),
        (
            "  the same, first window of the file",
            first_window,
            ssh_window,
        ),
        ("grep literal, 2,000 files (200 match)", grep, ssh_grep),
        (
            "grep literal-free regex, 2,000 files (200)",
            grep_regex,
            ssh_grep_regex,
        ),
        (
            "the same, every file also non-ASCII UTF-8",
            grep_regex_utf8,
            ssh_grep_regex_utf8,
        ),
    ] {
        println!(
            "{:<44} {:>12} {:>16} {:>7.1}x",
            name,
            ms(persistent),
            ms(fresh),
            fresh.as_secs_f64() / persistent.as_secs_f64()
        );
    }
    println!(
        "windows of the 64 MiB file in the repeated run: {} read, {} begun at a remembered line start, {} lines read through on the target",
        after_repeats.windows, after_repeats.from_marks, after_repeats.lines_passed
    );
}
