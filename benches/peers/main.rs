//! Benchmarks against the peers (issue 6), side by side in one run: mountfs on a disk mount,
//! the official reference server (`@modelcontextprotocol/server-filesystem`, Node) and
//! `rust-mcp-filesystem` 0.4.x, each started as a child over stdio by the same client, with `rg`
//! on the same searches as the floor.
//!
//! Per server and round: spawn → initialized; sequential and 16-in-flight round trips
//! (calls/s, p50/p99 latency) of a small `read_file`, an `ls`, a `glob` and a `grep` on the
//! 2,000-file tree, and sequential `glob`/`grep` on the whole tree; the server's CPU time per
//! call (/proc/<pid>/stat utime+stime deltas); peak RSS (VmHWM, reset before each measurement).
//! Servers alternate measurement by measurement (A B C, then B C A next round …); the report
//! gives medians over rounds and mountfs/peer ratios.
//!
//! - `workspace.rs`: the deterministic tree; `servers.rs`: the per-server tool table;
//!   `measure.rs`: load, /proc readings, `rg` runs; `report.rs`: medians, ratios, targets.
//!
//! Run everything (installs the peers and `rg` on demand): `scripts/bench-peers`. Directly:
//! `cargo bench --bench peers -- --reference PROGRAM --rmf PROGRAM --rg PROGRAM [--rounds 5]
//! [--workspace DIR] [--out FILE] [--quick]`.

#[path = "../../tests/support/mod.rs"]
mod support;

mod measure;
mod report;
mod servers;
mod workspace;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use measure::Budget;
use report::{Better, Table};
use servers::{Flavor, Op, Scope, Server};
use support::McpServer;

/// Requests in flight in the concurrent measurements.
const IN_FLIGHT: usize = 16;
/// Fresh processes started per server and round to time spawn → initialized.
const SPAWNS: usize = 5;
/// How long one request may take before the run is called broken.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(300);

#[derive(Debug)]
struct Options {
    workspace: PathBuf,
    servers: Vec<Server>,
    rg: Option<PathBuf>,
    rounds: usize,
    quick: bool,
    out: Option<PathBuf>,
}

fn usage() -> ! {
    eprintln!(
        "usage: cargo bench --bench peers -- [--mountfs PROGRAM] [--baseline PROGRAM] [--reference PROGRAM] [--rmf PROGRAM] [--rg PROGRAM] [--rounds N] [--workspace DIR] [--out FILE] [--quick] [--generate-only]"
    );
    std::process::exit(2)
}

fn parse_options() -> Option<Options> {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut options = Options {
        workspace: manifest.join("bench-peers/workspace"),
        servers: vec![Server {
            name: "mountfs",
            flavor: Flavor::Mountfs,
            program: PathBuf::from(env!("CARGO_BIN_EXE_mountfs")),
        }],
        rg: None,
        rounds: 5,
        quick: false,
        out: None,
    };
    let mut generate_only = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| usage());
        match arg.as_str() {
            "--bench" => {}
            "--workspace" => options.workspace = PathBuf::from(value()),
            // Another mountfs build in place of this one.
            "--mountfs" => options.servers[0].program = PathBuf::from(value()),
            // Another mountfs build beside this one, to measure a change in the same run.
            "--baseline" => options.servers.push(Server {
                name: "baseline",
                flavor: Flavor::Mountfs,
                program: PathBuf::from(value()),
            }),
            "--reference" => options.servers.push(Server {
                name: "reference",
                flavor: Flavor::Reference,
                program: PathBuf::from(value()),
            }),
            "--rmf" => options.servers.push(Server {
                name: "rust-mcp-filesystem",
                flavor: Flavor::RustMcpFilesystem,
                program: PathBuf::from(value()),
            }),
            "--rg" => options.rg = Some(PathBuf::from(value())),
            "--rounds" => options.rounds = value().parse().unwrap_or_else(|_| usage()),
            "--out" => options.out = Some(PathBuf::from(value())),
            "--quick" => options.quick = true,
            "--generate-only" => generate_only = true,
            _ => usage(),
        }
    }
    std::fs::create_dir_all(&options.workspace).expect("create the workspace directory");
    options.workspace = options.workspace.canonicalize().expect("workspace path");
    if generate_only {
        workspace::ensure(&options.workspace).expect("generate the workspace");
        return None;
    }
    Some(options)
}

/// The budgets of the small calls, the searches of the 2,000-file tree, the whole-tree
/// searches and the `rg` runs.
struct Budgets {
    small: Budget,
    small_paced: Budget,
    small_concurrent: Budget,
    search: Budget,
    search_concurrent: Budget,
    whole: Budget,
    rg: Budget,
}

impl Budgets {
    fn new(quick: bool) -> Self {
        let time = |s: f64| Duration::from_secs_f64(if quick { s / 5.0 } else { s });
        let budget = |min, time| Budget {
            min,
            max: usize::MAX,
            time,
        };
        Self {
            small: budget(100, time(1.5)),
            small_paced: budget(100, time(4.0)),
            small_concurrent: budget(IN_FLIGHT * 10, time(1.5)),
            search: budget(3, time(1.0)),
            search_concurrent: budget(IN_FLIGHT, time(1.0)),
            whole: budget(if quick { 1 } else { 2 }, time(1.0)),
            rg: budget(5, time(1.0)),
        }
    }
}

/// The measurements of one round, in order: (operation, requests in flight; [`PACED`]: one at a
/// time, [`PACE_GAP`] apart).
const PLAN: &[(Op, usize)] = &[
    (Op::Read, PACED),
    (Op::Read, 1),
    (Op::Read, IN_FLIGHT),
    (Op::Ls, PACED),
    (Op::Ls, 1),
    (Op::Ls, IN_FLIGHT),
    (Op::Glob(Scope::Small), 1),
    (Op::Glob(Scope::Small), IN_FLIGHT),
    (Op::Grep(Scope::Small), 1),
    (Op::Grep(Scope::Small), IN_FLIGHT),
    (Op::GrepContent(Scope::Small), 1),
    (Op::GrepRegex(Scope::Small), 1),
    (Op::Glob(Scope::Crates), 1),
    (Op::Grep(Scope::Crates), 1),
    (Op::GrepContent(Scope::Crates), 1),
    (Op::GrepRegex(Scope::Crates), 1),
    (Op::Glob(Scope::All), 1),
    (Op::Grep(Scope::All), 1),
    (Op::GrepContent(Scope::All), 1),
    (Op::GrepRegex(Scope::All), 1),
];

/// In [`PLAN`]: calls one at a time with a pause of [`PACE_GAP`] after each answer, as at an
/// agent's pace (a call, then the model thinks): the server is idle, its threads asleep, when
/// the next call arrives (issue 31).
const PACED: usize = 0;

/// The pause between paced calls: long enough for every server thread to go to sleep.
const PACE_GAP: Duration = Duration::from_millis(2);

/// The soft open-file limit of most Linux desktops (systemd's default), under which MCP clients
/// usually start servers; the robustness check runs every server under it.
const DESKTOP_NOFILE: u64 = 1024;

async fn start(server: &Server, root: &Path) -> McpServer {
    McpServer::spawn(server.command(root, None), REQUEST_TIMEOUT).await
}

/// Each server, started under [`DESKTOP_NOFILE`], answers 16 concurrent greps and globs of the
/// 2,000-file tree: how many fail.
async fn robustness(servers: &[Server], root: &Path, table: &mut Table, ticks: u64) {
    let budget = Budget {
        min: IN_FLIGHT,
        max: IN_FLIGHT,
        time: Duration::ZERO,
    };
    for server in servers {
        let process = Arc::new(
            McpServer::spawn(server.command(root, Some(DESKTOP_NOFILE)), REQUEST_TIMEOUT).await,
        );
        for op in [Op::Glob(Scope::Small), Op::Grep(Scope::Small)] {
            let Some(call) = server.call(op, root) else {
                continue;
            };
            let sample =
                measure::load(&process, &call, IN_FLIGHT, Duration::ZERO, budget, ticks).await;
            table.record_limited(&op.label(), server.name, DESKTOP_NOFILE, &sample);
        }
    }
}

/// Checks once that each server's glob/grep finds exactly the expected files (by path: every
/// expected one, and none of the files a `.gitignore` hides), so no server is timed on a wrong
/// or truncated answer.
async fn validate(
    server: &Server,
    live: &McpServer,
    root: &Path,
    stats: &workspace::Stats,
) -> Vec<String> {
    let mut problems = Vec::new();
    for &(op, _) in PLAN {
        let Some(call) = server.call(op, root) else {
            continue;
        };
        let answer = match live.try_call(call.tool, call.args.clone()).await {
            Ok(answer) if !answer.is_error => answer,
            Ok(answer) => {
                problems.push(format!(
                    "{} {}: error: {}",
                    server.name,
                    op.label(),
                    answer.text
                ));
                continue;
            }
            Err(response) => {
                problems.push(format!("{} {}: {response}", server.name, op.label()));
                continue;
            }
        };
        let expected = match op {
            Op::Glob(s) => stats.expected(false, s.dir()),
            Op::Grep(s) | Op::GrepContent(s) | Op::GrepRegex(s) => stats.expected(true, s.dir()),
            Op::Read | Op::Ls => continue,
        };
        let shown: Vec<&String> = stats
            .ignored
            .iter()
            .filter(|p| answer.text.contains(p.as_str()))
            .collect();
        if !shown.is_empty() {
            problems.push(format!(
                "{} {}: names {} file(s) a .gitignore hides, e.g. {}",
                server.name,
                op.label(),
                shown.len(),
                shown[0]
            ));
        }
        let found = expected.iter().filter(|p| answer.text.contains(*p)).count();
        if found != expected.len() {
            problems.push(format!(
                "{} {}: found {found} of the {} expected files",
                server.name,
                op.label(),
                expected.len()
            ));
        }
    }
    problems
}

/// Checks once that `rg` names exactly the expected files for each search, so it searches the
/// same files as the servers.
fn validate_rg(rg: &Path, root: &Path, stats: &workspace::Stats) -> Vec<String> {
    let mut problems = Vec::new();
    for &(op, in_flight) in PLAN {
        let Some(args) = servers::rg_args(op, &root.join(op_dir(op))) else {
            continue;
        };
        if in_flight > 1 {
            continue;
        }
        let expected = match op {
            Op::Glob(s) => stats.expected(false, s.dir()),
            Op::Grep(s) | Op::GrepContent(s) | Op::GrepRegex(s) => stats.expected(true, s.dir()),
            Op::Read | Op::Ls => continue,
        };
        let mut expected: Vec<String> = expected.into_iter().map(str::to_owned).collect();
        expected.sort();
        match measure::rg_files(rg, &args, root) {
            Ok(found) if found == expected => {}
            Ok(found) => problems.push(format!(
                "rg {}: named {} files, {} expected (first difference: {:?})",
                op.label(),
                found.len(),
                expected.len(),
                found
                    .iter()
                    .zip(&expected)
                    .find(|(a, b)| a != b)
                    .map(|(a, b)| format!("{a} vs {b}"))
            )),
            Err(error) => problems.push(format!("rg {}: {error}", op.label())),
        }
    }
    problems
}

async fn run(options: Options) {
    let root = options.workspace.clone();
    let stats = workspace::ensure(&root).expect("generate the workspace");
    let ticks = measure::clock_ticks();
    let budgets = Budgets::new(options.quick);
    let mut table = Table::new(options.servers.iter().map(|s| s.name).collect());
    let started = Instant::now();
    println!(
        "workspace: {} files, {:.0} MB; {} .toml files ({} in small/, {} in crates/), {} files with the needle ({} in small/, {} in crates/); crates/ has {} directories and {} ignored files",
        stats.files,
        stats.bytes as f64 / 1e6,
        stats.tomls.len(),
        stats.expected(false, workspace::SMALL).len(),
        stats.expected(false, workspace::CRATES).len(),
        stats.needles.len(),
        stats.expected(true, workspace::SMALL).len(),
        stats.expected(true, workspace::CRATES).len(),
        stats.crate_dirs,
        stats.ignored.len(),
    );
    // Warm the page cache: every figure below is a warm-cache figure.
    if let Some(rg) = &options.rg {
        let _ = std::process::Command::new(rg)
            .args(["-c", "--no-ignore-parent", "zzz_warm_up_zzz"])
            .arg(&root)
            .output();
        for problem in validate_rg(rg, &root, &stats) {
            eprintln!("warning: {problem}");
            table.note(problem);
        }
    }

    for round in 0..options.rounds {
        let mut order = options.servers.clone();
        let turn = round % order.len();
        order.rotate_left(turn);
        eprintln!(
            "round {}/{} (order: {}) at {:.0} s",
            round + 1,
            options.rounds,
            order.iter().map(|s| s.name).collect::<Vec<_>>().join(", "),
            started.elapsed().as_secs_f64()
        );

        for server in &order {
            let mut times = Vec::with_capacity(SPAWNS);
            for _ in 0..SPAWNS {
                let spawned = Instant::now();
                let live = start(server, &root).await;
                times.push(spawned.elapsed().as_secs_f64() * 1e3);
                drop(live);
            }
            table.record(
                "spawn → initialized, ms",
                Better::Lower,
                server.name,
                report::median(&mut times),
            );
        }

        let mut live = Vec::new();
        for server in &order {
            let process = Arc::new(start(server, &root).await);
            if round == 0 {
                for problem in validate(server, &process, &root, &stats).await {
                    eprintln!("warning: {problem}");
                    table.note(problem);
                }
            }
            // Warm-up, not measured.
            for op in [Op::Read, Op::Ls] {
                if let Some(call) = server.call(op, &root) {
                    for _ in 0..20 {
                        let _ = process.try_call(call.tool, call.args.clone()).await;
                    }
                }
            }
            live.push((server.clone(), process));
        }

        let mut concurrent_peak: Vec<u64> = vec![0; live.len()];
        let mut any_peak: Vec<u64> = vec![0; live.len()];
        for &(op, in_flight) in PLAN {
            let budget = match (op, in_flight) {
                (Op::Read | Op::Ls, PACED) => budgets.small_paced,
                (Op::Read | Op::Ls, 1) => budgets.small,
                (Op::Read | Op::Ls, _) => budgets.small_concurrent,
                (
                    Op::Glob(Scope::All)
                    | Op::Grep(Scope::All)
                    | Op::GrepContent(Scope::All)
                    | Op::GrepRegex(Scope::All),
                    _,
                ) => budgets.whole,
                (_, 1) => budgets.search,
                _ => budgets.search_concurrent,
            };
            let mode = match in_flight {
                PACED => format!("paced {} ms apart", PACE_GAP.as_millis()),
                1 => "sequential".to_owned(),
                _ => format!("{in_flight} in flight"),
            };
            let (in_flight, gap) = match in_flight {
                PACED => (1, PACE_GAP),
                n => (n, Duration::ZERO),
            };
            let label = format!("{}, {mode}", op.label());
            for (i, (server, process)) in live.iter().enumerate() {
                let Some(call) = server.call(op, &root) else {
                    continue;
                };
                let sample = measure::load(process, &call, in_flight, gap, budget, ticks).await;
                if let Some(failure) = &sample.first_failure {
                    let failure: String = failure.chars().take(160).collect();
                    eprintln!(
                        "  {} {label}: {} of {} calls failed, e.g. {failure}",
                        server.name, sample.failures, sample.calls
                    );
                    table.note(format!(
                        "{} {label}: {} of {} calls failed in round {}, e.g. {failure}",
                        server.name,
                        sample.failures,
                        sample.calls,
                        round + 1
                    ));
                }
                table.record_sample(&label, server.name, &sample);
                any_peak[i] = any_peak[i].max(sample.peak_rss_kib);
                if in_flight > 1 {
                    concurrent_peak[i] = concurrent_peak[i].max(sample.peak_rss_kib);
                }
            }
            if let (Some(rg), Some(args)) =
                (&options.rg, servers::rg_args(op, &root.join(op_dir(op))))
                && in_flight == 1
            {
                let sample = measure::rg(rg, &args, budgets.rg);
                table.record(
                    &format!("{label}: p50 ms"),
                    Better::Lower,
                    "rg",
                    sample.quantile_ms(0.5),
                );
                table.record(
                    &format!("{label}: server CPU ms/call"),
                    Better::Lower,
                    "rg",
                    sample.cpu_ms_per_call(),
                );
            }
        }
        for (i, (server, _)) in live.iter().enumerate() {
            table.record(
                "peak RSS under 16 in flight, MiB",
                Better::Lower,
                server.name,
                concurrent_peak[i] as f64 / 1024.0,
            );
            table.record(
                "peak RSS, any measurement, MiB",
                Better::Lower,
                server.name,
                any_peak[i] as f64 / 1024.0,
            );
        }
        drop(live);
    }
    robustness(&options.servers, &root, &mut table, ticks).await;

    let machine = report::machine();
    let text = table.render(options.rounds, &machine, started.elapsed());
    println!("{text}");
    if let Some(out) = &options.out {
        std::fs::write(out, &text).expect("write the results file");
        eprintln!("results written to {}", out.display());
    }
}

fn op_dir(op: Op) -> &'static str {
    match op {
        Op::Glob(s) | Op::Grep(s) | Op::GrepContent(s) | Op::GrepRegex(s) => s.dir(),
        Op::Read | Op::Ls => "",
    }
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` runs this as a quick check only.
    if !std::env::args().any(|a| a == "--bench") {
        println!("peers bench: run with scripts/bench-peers or `cargo bench --bench peers`");
        return;
    }
    let Some(options) = parse_options() else {
        return;
    };
    // One client thread: the client's own cost stays small and off the server's cores as much
    // as two cores allow.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(run(options));
}
