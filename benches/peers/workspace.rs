//! The benchmark workspace: a deterministic tree of source-like text, generated once from a fixed
//! seed and reused while its marker says it is complete and of this generation.
//!
//! Ten "repositories" of exactly 2,000 files each: `small/` (the 2,000-file tree of issue 6),
//! `crates/` (the crate-source tree of issue 15) and `large/repo02` … `large/repo09`, so the
//! whole tree holds 20,000 files and ~210 MB, and every size comes from one generation.
//!
//! - `small/` and `large/*` are Rust workspaces of one shape: a `Cargo.toml`, a `README.md` and
//!   crates of 50 files (`Cargo.toml`, `README.md`, `src/*.rs`, `src/util/*.rs`, `tests/*.rs`,
//!   `benches/*.rs`): few, wide directories (~48 for 2,000 files).
//! - `crates/` looks like a registry's unpacked crate sources (`~/.cargo/registry/src/…`):
//!   ~100 crates of 5–40 files, each with `Cargo.toml`, `README.md`, `LICENSE`, `src/lib.rs`
//!   and a module tree up to 7 levels deep, `tests/`, `examples/`, `benches/` in some: many
//!   small directories (~530 for 2,000 files, ~3.8 files each). A few crates carry a
//!   `.gitignore` (`/target`, `Cargo.lock`), and two of those an ignored `target/` holding a
//!   `.toml` file and a file calling [`NEEDLE`]: searches honouring ignore files must not
//!   report them (they are not among the 2,000 files).
//!
//! About one source file in 50 calls [`NEEDLE`], the content searched. There are no other hidden
//! or ignore files.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// Changes whenever the tree's shape or content changes, so an old tree is regenerated.
const GENERATION: &str = "mountfs peers workspace v2 (crates/), seed 0x6d6f756e74667321";
const SEED: u64 = 0x6d6f_756e_7466_7321;

/// Repositories (the first is `small/`) and files in each.
const REPOS: usize = 10;
const FILES_PER_REPO: usize = 2_000;
const FILES_PER_CRATE: usize = 50;
const SRC_FILES: usize = 35;
const UTIL_FILES: usize = 6;
const TEST_FILES: usize = 4;

/// The 2,000-file subtree of wide directories.
pub const SMALL: &str = "small";
/// The 2,000-file subtree shaped like crate sources (many small, deep directories).
pub const CRATES: &str = "crates";
/// The file of the "small read": a 2 KiB README.
pub const READ_FILE: &str = "small/README.md";
/// The directory of the `ls`: 35 files and one subdirectory.
pub const LS_DIR: &str = "small/crates/c00/src";
/// The `glob` pattern (matched below the searched directory at any depth).
pub const GLOB: &str = "**/*.toml";
/// The `grep` pattern: the same text as a regex and as a literal.
pub const NEEDLE: &str = "deprecated_api_call";
/// A regular expression finding the very lines that call [`NEEDLE`]: a literal, a class
/// repeated, another literal (the shape of issue 31's `unsafe\s+impl`), so that the engine's
/// literal prefilter and its per-line check both run.
pub const NEEDLE_REGEX: &str = r"legacy::\s*deprecated_\w+\(";

/// What was generated, and what a correct glob/grep must find.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Files in the whole tree.
    pub files: usize,
    /// Bytes in the whole tree.
    pub bytes: u64,
    /// Paths (relative to the root) of files matching [`GLOB`] / containing [`NEEDLE`].
    pub tomls: Vec<String>,
    pub needles: Vec<String>,
    /// Files ignored by a `.gitignore` (in `crates/`): no search honouring ignore files names
    /// them.
    pub ignored: Vec<String>,
    /// Directories in `crates/` (itself included, ignored ones not).
    pub crate_dirs: usize,
}

impl Stats {
    /// The expected glob or grep answer under `scope` (`""` for the whole tree).
    pub fn expected(&self, grep: bool, scope: &str) -> Vec<&str> {
        let list = if grep { &self.needles } else { &self.tomls };
        list.iter()
            .map(String::as_str)
            .filter(|p| scope.is_empty() || p.starts_with(&format!("{scope}/")))
            .collect()
    }
}

/// A deterministic pseudo-random stream (xorshift64*).
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

const WORDS: &[&str] = &[
    "buffer", "request", "handler", "result", "state", "index", "mount", "path", "stream",
    "window", "matcher", "entry", "writer", "reader", "config", "session", "ledger", "version",
    "cursor", "token", "frame", "header", "payload", "offset", "limit", "record", "table", "cache",
    "queue", "worker", "signal", "budget", "schema", "column", "prefix", "suffix", "digest",
    "chunk", "block", "page", "socket", "client", "server", "route", "filter", "batch", "commit",
    "snapshot", "journal", "segment", "bucket", "shard", "replica", "lease", "clock", "metric",
];
const TYPES: &[&str] = &[
    "u64",
    "usize",
    "String",
    "&str",
    "Vec<u8>",
    "bool",
    "Option<usize>",
    "PathBuf",
    "Duration",
];

fn camel(word: &str) -> String {
    let mut chars = word.chars();
    chars
        .next()
        .map(|c| c.to_ascii_uppercase().to_string() + chars.as_str())
        .unwrap_or_default()
}

/// Rust-like source of about `size` bytes; calls [`NEEDLE`] once, half-way, when `needle` is set.
fn rust_source(rng: &mut Rng, size: usize, mut needle: bool) -> String {
    let mut text = String::with_capacity(size + 512);
    let (a, b) = (rng.pick(WORDS), rng.pick(WORDS));
    let _ = writeln!(
        text,
        "//! The {a} {b}: what it owns and what it leaves to others.\n"
    );
    let _ = writeln!(text, "use std::collections::HashMap;");
    let _ = writeln!(
        text,
        "use crate::{}::{};\n",
        rng.pick(WORDS),
        camel(rng.pick(WORDS))
    );
    while text.len() < size {
        let (a, b, c) = (rng.pick(WORDS), rng.pick(WORDS), rng.pick(WORDS));
        if rng.below(4) == 0 {
            let _ = writeln!(
                text,
                "/// A {a} of {b}s, kept in {c} order.\n#[derive(Debug, Clone, Default)]\npub struct {}{} {{\n    {a}: {},\n    {b}_count: usize,\n    {c}s: HashMap<String, {}>,\n}}\n",
                camel(a),
                camel(b),
                rng.pick(TYPES),
                rng.pick(TYPES)
            );
            continue;
        }
        let _ = writeln!(
            text,
            "/// Returns the {b} of `{a}` after applying the {c}.\npub fn {a}_{b}({a}: &{}, {c}: {}) -> Result<{}, Error> {{",
            camel(a),
            rng.pick(TYPES),
            rng.pick(TYPES)
        );
        for _ in 0..2 + rng.below(8) {
            let (d, e) = (rng.pick(WORDS), rng.pick(WORDS));
            let n = rng.below(100_000);
            let _ = match rng.below(5) {
                0 => writeln!(text, "    // The {d} must not outlive the {e} ({n})."),
                1 => writeln!(
                    text,
                    "    if {d}.is_empty() {{\n        return Err(Error::{}(\"{e} {n}\".into()));\n    }}",
                    camel(e)
                ),
                2 => writeln!(
                    text,
                    "    for {d} in {a}.{e}s.iter().take({n}) {{\n        {c}.push({d}.clone());\n    }}"
                ),
                _ => writeln!(text, "    let {d}_{n} = {a}.{e}({c}, {n})?;"),
            };
        }
        if needle && text.len() >= size / 2 {
            let _ = writeln!(text, "    legacy::{NEEDLE}({a}, {c});");
            needle = false;
        }
        let _ = writeln!(text, "    Ok({c}.into())\n}}\n");
    }
    if needle {
        let _ = writeln!(text, "pub fn shim() {{\n    legacy::{NEEDLE}(0, 0);\n}}");
    }
    text
}

fn cargo_toml(rng: &mut Rng, name: &str) -> String {
    let mut text = format!(
        "[package]\nname = \"{name}\"\nversion = \"0.{}.{}\"\nedition = \"2024\"\n\n[dependencies]\n",
        rng.below(20),
        rng.below(10)
    );
    for _ in 0..3 + rng.below(6) {
        let _ = writeln!(
            text,
            "{}-{} = \"{}.{}\"",
            rng.pick(WORDS),
            rng.pick(WORDS),
            rng.below(3),
            rng.below(40)
        );
    }
    text
}

fn readme(rng: &mut Rng, name: &str, lines: usize) -> String {
    let mut text = format!("# {name}\n\n");
    for i in 0..lines {
        let _ = writeln!(
            text,
            "- The {} keeps its {} in {} order; see `{}::{}` ({i}).",
            rng.pick(WORDS),
            rng.pick(WORDS),
            rng.pick(WORDS),
            rng.pick(WORDS),
            rng.pick(WORDS)
        );
    }
    text
}

/// The relative paths of one repository's files, in a fixed order.
fn repo_paths(repo: &str) -> Vec<String> {
    if repo == CRATES {
        return crate_tree().0;
    }
    let mut paths = vec![format!("{repo}/Cargo.toml"), format!("{repo}/README.md")];
    let mut krate = 0;
    while paths.len() < FILES_PER_REPO {
        let dir = format!("{repo}/crates/c{krate:02}");
        let mut files = vec![format!("{dir}/Cargo.toml"), format!("{dir}/README.md")];
        files.extend((0..SRC_FILES).map(|i| format!("{dir}/src/m{i:02}.rs")));
        files.extend((0..UTIL_FILES).map(|i| format!("{dir}/src/util/u{i}.rs")));
        files.extend((0..TEST_FILES).map(|i| format!("{dir}/tests/t{i}.rs")));
        let mut b = 0;
        while files.len() < FILES_PER_CRATE {
            files.push(format!("{dir}/benches/b{b}.rs"));
            b += 1;
        }
        files.truncate(FILES_PER_REPO - paths.len());
        paths.extend(files);
        krate += 1;
    }
    paths
}

/// Names of the crates in `crates/`.
const CRATE_WORDS: &[&str] = &[
    "tokio",
    "serde",
    "rand",
    "regex",
    "memchr",
    "bytes",
    "mio",
    "libc",
    "log",
    "syn",
    "quote",
    "itoa",
    "ryu",
    "hashbrown",
    "smallvec",
    "either",
    "futures",
    "pin",
    "slab",
    "anyhow",
];

/// The crate-source tree: its files (in a fixed order), its directories, and the files below
/// ignored `target/` directories (written besides, not among the 2,000).
fn crate_tree() -> (Vec<String>, usize, Vec<String>) {
    let mut rng = Rng::new(SEED ^ 0x6372_6174_6573);
    let mut paths = Vec::with_capacity(FILES_PER_REPO);
    let mut ignored = Vec::new();
    let mut dirs = 1;
    let mut krate = 0;
    while paths.len() < FILES_PER_REPO {
        let name = format!(
            "{CRATES}/{}-{}-{}.{}.{}",
            rng.pick(CRATE_WORDS),
            rng.pick(WORDS),
            rng.below(3),
            rng.below(30),
            krate
        );
        let mut files = vec![
            format!("{name}/Cargo.toml"),
            format!("{name}/README.md"),
            format!("{name}/LICENSE"),
            format!("{name}/src/lib.rs"),
        ];
        let mut crate_dirs = vec![name.clone(), format!("{name}/src")];
        // A module tree: each directory holds 2–6 files and 0–3 subdirectories, fewer deeper.
        let budget = 5 + rng.below(36);
        let mut stack = vec![(format!("{name}/src"), 1usize)];
        while let Some((dir, depth)) = stack.pop() {
            if files.len() >= budget {
                break;
            }
            for f in 0..2 + rng.below(5) {
                files.push(format!("{dir}/{}_{f}.rs", rng.pick(WORDS)));
            }
            if depth < 7 {
                for d in 0..rng.below(4usize.saturating_sub(depth / 2)) {
                    let sub = format!("{dir}/{}{d}", rng.pick(WORDS));
                    crate_dirs.push(sub.clone());
                    stack.push((sub, depth + 1));
                }
            }
        }
        for (extra, odds) in [("tests", 3), ("examples", 5), ("benches", 8)] {
            if rng.below(odds) == 0 {
                crate_dirs.push(format!("{name}/{extra}"));
                for f in 0..1 + rng.below(3) {
                    files.push(format!("{name}/{extra}/{}_{f}.rs", rng.pick(WORDS)));
                }
            }
        }
        if krate % 20 == 7 {
            files.push(format!("{name}/.gitignore"));
            if krate % 40 == 7 {
                ignored.push(format!("{name}/target/debug/build/out/generated.rs"));
                ignored.push(format!("{name}/target/debug/deps/fingerprint.toml"));
            }
        }
        // Directories that end up empty (budget spent) are not created.
        files.truncate(FILES_PER_REPO - paths.len());
        dirs += crate_dirs
            .iter()
            .filter(|d| files.iter().any(|f| f.starts_with(&format!("{d}/"))))
            .count();
        paths.extend(files);
        krate += 1;
    }
    (paths, dirs, ignored)
}

/// The content of a `.gitignore` in `crates/`.
const GITIGNORE: &str = "/target\n**/*.rs.bk\nCargo.lock\n";

/// One file's content, from its own seed (so repositories can be written in parallel).
fn content(index: u64, path: &str) -> (String, bool) {
    let mut rng = Rng::new(SEED ^ index.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let name = path.rsplit('/').nth(1).unwrap_or("root");
    if path.ends_with(".gitignore") {
        (GITIGNORE.to_owned(), false)
    } else if path.ends_with(".toml") {
        (cargo_toml(&mut rng, name), false)
    } else if path.ends_with("README.md") || path.ends_with("LICENSE") {
        (readme(&mut rng, name, 24), false)
    } else {
        // 1 KB to 21 KB, mean ~11 KB: ~220 MB over 20,000 files.
        let size = 1_000 + rng.below(20_000);
        let needle = rng.below(50) == 0;
        (rust_source(&mut rng, size, needle), needle)
    }
}

fn repo_name(r: usize) -> String {
    match r {
        0 => SMALL.to_owned(),
        1 => CRATES.to_owned(),
        _ => format!("large/repo{r:02}"),
    }
}

/// Writes one repository; returns (files, bytes, tomls, needles).
fn write_repo(root: &Path, r: usize) -> std::io::Result<Stats> {
    let mut stats = Stats::default();
    for (i, path) in repo_paths(&repo_name(r)).into_iter().enumerate() {
        let (text, needle) = content((r * FILES_PER_REPO + i) as u64, &path);
        let file = root.join(&path);
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&file, &text)?;
        stats.files += 1;
        stats.bytes += text.len() as u64;
        if path.ends_with(".toml") {
            stats.tomls.push(path.clone());
        }
        if needle {
            stats.needles.push(path);
        }
    }
    if r == 1 {
        // The ignored files: one `.toml`, one calling the needle.
        for path in crate_tree().2 {
            let file = root.join(&path);
            if let Some(parent) = file.parent() {
                std::fs::create_dir_all(parent)?;
            }
            let (text, _) = content(u64::MAX, &path);
            let text = if path.ends_with(".rs") {
                format!("{text}\nfn ignored() {{\n    legacy::{NEEDLE}(1, 2);\n}}\n")
            } else {
                text
            };
            std::fs::write(&file, text)?;
        }
    }
    Ok(stats)
}

/// The marker beside the tree (outside it, so no server sees it).
fn marker(root: &Path) -> PathBuf {
    let mut name = root.as_os_str().to_owned();
    name.push(".complete");
    PathBuf::from(name)
}

/// The tree's statistics, computed without writing (same seed, same order).
fn expected_stats() -> Stats {
    let mut stats = Stats::default();
    for r in 0..REPOS {
        for (i, path) in repo_paths(&repo_name(r)).into_iter().enumerate() {
            let (text, needle) = content((r * FILES_PER_REPO + i) as u64, &path);
            stats.files += 1;
            stats.bytes += text.len() as u64;
            if path.ends_with(".toml") {
                stats.tomls.push(path.clone());
            }
            if needle {
                stats.needles.push(path);
            }
        }
    }
    let (_, dirs, ignored) = crate_tree();
    stats.crate_dirs = dirs;
    stats.ignored = ignored;
    stats
}

/// Makes sure the tree under `root` is complete and of this generation; returns its statistics.
pub fn ensure(root: &Path) -> std::io::Result<Stats> {
    let marker = marker(root);
    if std::fs::read_to_string(&marker).is_ok_and(|m| m == GENERATION) {
        return Ok(expected_stats());
    }
    let started = std::time::Instant::now();
    eprintln!("generating the workspace under {} …", root.display());
    if root.exists() {
        std::fs::remove_dir_all(root)?;
    }
    // Two writers: the machine of issue 6 has two cores.
    let parts: Vec<std::io::Result<Stats>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..2)
            .map(|half| {
                scope.spawn(move || {
                    let mut all = Stats::default();
                    for r in (half..REPOS).step_by(2) {
                        let part = write_repo(root, r)?;
                        all.files += part.files;
                        all.bytes += part.bytes;
                    }
                    Ok(all)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(std::io::Error::other("writer panicked")))
            })
            .collect()
    });
    for part in parts {
        part?;
    }
    let stats = expected_stats();
    std::fs::File::create(&marker)?.write_all(GENERATION.as_bytes())?;
    eprintln!(
        "generated {} files, {:.0} MB in {:.1} s",
        stats.files,
        stats.bytes as f64 / 1e6,
        started.elapsed().as_secs_f64()
    );
    Ok(stats)
}
