//! The servers compared, how each is started, and the per-server tool table: the tool and
//! arguments each one uses for our `read_file`, `ls`, `glob` and `grep` (its closest equivalent;
//! BENCHMARKS.md says where they differ).

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use std::process::Command;

use crate::workspace::{CRATES, GLOB, LS_DIR, NEEDLE, NEEDLE_REGEX, READ_FILE, SMALL};

/// Which server a [`Server`] is; each speaks its own tool names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// This crate's binary, `--mount /=disk:WORKSPACE`.
    Mountfs,
    /// `@modelcontextprotocol/server-filesystem` (Node), the official reference server.
    Reference,
    /// `rust-mcp-filesystem` 0.4.x.
    RustMcpFilesystem,
}

/// One server under test.
#[derive(Debug, Clone)]
pub struct Server {
    pub name: &'static str,
    pub flavor: Flavor,
    pub program: PathBuf,
}

/// What one call does, in our terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `read_file` of a 2 KiB README.
    Read,
    /// `ls` of a directory of 36 entries.
    Ls,
    /// `glob **/*.toml`.
    Glob(Scope),
    /// `grep` of one identifier (literal), files with matches.
    Grep(Scope),
    /// `grep` of one identifier (literal), matching lines with their numbers.
    GrepContent(Scope),
    /// `grep` of a regular expression with literals in it, matching lines with their numbers.
    GrepRegex(Scope),
}

/// Where a search runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The 2,000-file tree `small/`.
    Small,
    /// The 2,000-file crate-source tree `crates/`.
    Crates,
    /// The whole 20,000-file, ~220 MB tree.
    All,
}

impl Scope {
    /// The directory searched, relative to the workspace root (`""` is the root).
    pub fn dir(self) -> &'static str {
        match self {
            Scope::Small => SMALL,
            Scope::Crates => CRATES,
            Scope::All => "",
        }
    }
}

impl Op {
    /// A short label for tables.
    pub fn label(self) -> String {
        let scope = |s: Scope| match s {
            Scope::Small => "2,000 files",
            Scope::Crates => "2,000 crate files",
            Scope::All => "20,000 files",
        };
        match self {
            Op::Read => "read_file 2 KiB".to_owned(),
            Op::Ls => "ls 36 entries".to_owned(),
            Op::Glob(s) => format!("glob {GLOB}, {}", scope(s)),
            Op::Grep(s) => format!("grep, {}", scope(s)),
            Op::GrepContent(s) => format!("grep content, {}", scope(s)),
            Op::GrepRegex(s) => format!("grep regex content, {}", scope(s)),
        }
    }
}

/// A tool call: name and arguments.
#[derive(Debug, Clone)]
pub struct Call {
    pub tool: &'static str,
    pub args: Value,
}

impl Server {
    /// The command starting this server on the workspace `root` (absolute, canonical), with
    /// the soft open-file limit lowered to `nofile` if given (by `sh`, which then `exec`s the
    /// server, so the process id stays the one /proc is read for).
    pub fn command(&self, root: &Path, nofile: Option<u64>) -> Command {
        let mut command = match nofile {
            None => Command::new(&self.program),
            Some(limit) => {
                let mut shell = Command::new("sh");
                shell
                    .arg("-c")
                    .arg(format!("ulimit -Sn {limit} && exec \"$0\" \"$@\""))
                    .arg(&self.program);
                shell
            }
        };
        match self.flavor {
            Flavor::Mountfs => {
                command.args(["--mount", &format!("/=disk:{}", root.display())]);
            }
            // Read-only: neither needs write access for these calls (the reference has no
            // such switch; rust-mcp-filesystem is read-only unless given --allow-write).
            Flavor::Reference | Flavor::RustMcpFilesystem => {
                command.arg(root);
            }
        }
        command
    }

    /// This server's equivalent of `op` on the workspace `root`, or `None` if it has none.
    pub fn call(&self, op: Op, root: &Path) -> Option<Call> {
        // mountfs speaks virtual paths under its `/` mount; the peers take host paths.
        let path = |rel: &str| match self.flavor {
            Flavor::Mountfs => format!("/{rel}"),
            _ => root.join(rel).display().to_string(),
        };
        let call = |tool, args| Some(Call { tool, args });
        match (self.flavor, op) {
            (Flavor::Mountfs, Op::Read) => call("read_file", json!({"file_path": path(READ_FILE)})),
            (Flavor::Mountfs, Op::Ls) => call("ls", json!({"path": path(LS_DIR)})),
            (Flavor::Mountfs, Op::Glob(s)) => {
                call("glob", json!({"pattern": GLOB, "path": path(s.dir())}))
            }
            (Flavor::Mountfs, Op::Grep(s)) => call(
                "grep",
                json!({"pattern": NEEDLE, "path": path(s.dir()), "literal": true}),
            ),
            (Flavor::Mountfs, Op::GrepContent(s)) => call(
                "grep",
                json!({"pattern": NEEDLE, "path": path(s.dir()), "literal": true, "output_mode": "content"}),
            ),
            (Flavor::Mountfs, Op::GrepRegex(s)) => call(
                "grep",
                json!({"pattern": NEEDLE_REGEX, "path": path(s.dir()), "output_mode": "content"}),
            ),
            (_, Op::Read) => call("read_text_file", json!({"path": path(READ_FILE)})),
            (_, Op::Ls) => call("list_directory", json!({"path": path(LS_DIR)})),
            (_, Op::Glob(s)) => call(
                "search_files",
                json!({"path": path(s.dir()), "pattern": GLOB}),
            ),
            // The reference server has no content search.
            (Flavor::Reference, Op::Grep(_) | Op::GrepContent(_) | Op::GrepRegex(_)) => None,
            // rust-mcp-filesystem's content search answers matching lines: measured once.
            (Flavor::RustMcpFilesystem, Op::GrepContent(_) | Op::GrepRegex(_)) => None,
            (Flavor::RustMcpFilesystem, Op::Grep(s)) => call(
                "search_files_content",
                json!({"path": path(s.dir()), "pattern": "*", "query": NEEDLE, "is_regex": true}),
            ),
        }
    }
}

/// `rg`'s equivalent of a glob or grep under `dir`, with our ignore semantics, so both search
/// the same files: hidden files searched (`--hidden`; there is no `.git` in the tree), `.gitignore`
/// and `.ignore` honoured outside git repositories too (`--no-require-git`), none above the
/// root (`--no-ignore-parent`: the workspace may lie in a git-ignored folder of this repository,
/// and the servers look at no ignore file above their root either).
pub fn rg_args(op: Op, dir: &Path) -> Option<Vec<String>> {
    let mut args: Vec<String> = ["--hidden", "--no-require-git", "--no-ignore-parent"]
        .map(String::from)
        .into();
    match op {
        Op::Glob(_) => args.extend(["--files", "-g", "*.toml"].map(String::from)),
        Op::Grep(_) => args.extend(["-l", "-F", NEEDLE].map(String::from)),
        Op::GrepContent(_) => args.extend(["-n", "-F", NEEDLE].map(String::from)),
        Op::GrepRegex(_) => args.extend(["-n", NEEDLE_REGEX].map(String::from)),
        Op::Read | Op::Ls => return None,
    }
    args.push(dir.display().to_string());
    Some(args)
}
