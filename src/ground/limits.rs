//! The memory bounds that hold whatever the size of a file (issue 10, "bounded memory"): one
//! flag per bound, with defaults a 2-core laptop and a shared server both live with.
//!
//! What each bound keeps out of memory:
//! - `--max-edit-bytes`: content a tool holds whole to change it — `write_file` content, each
//!   file an `apply_patch` writes, a file `edit_file`/`multi_edit` load, a file `move` copies
//!   between mounts. Bigger is refused with the limit named, before anything is read or written.
//! - `--max-undo-memory-bytes`: earlier contents one session keeps for `undo_edit`, over all
//!   files. A file over half of it is never read for undo: on disk it is set aside by rename (see
//!   `backend::disk`), elsewhere the answer says the change cannot be undone.
//! - `--grep-max-line-bytes`: the longest line `grep` holds; a file with a longer line is
//!   reported as skipped, with the reason (ripgrep's searcher heap limit on disk).
//! - `--regex-size-limit` / `--regex-dfa-size-limit`: the compiled program of a `grep` pattern
//!   (a pattern over it is an error naming the flag) and the cache of its lazy DFA (past it the
//!   engine falls back to slower matching; memory stays bounded).
//!
//! - `--memory-quota` / `--memory-budget`: what one workspace holds in memory (memory mounts,
//!   `/scratch/`, in-memory overlay layers, undo history), and all workspaces together; a
//!   change past either is refused before anything changes (see [`crate::ground::quota`]).
//!
//! This module only holds the numbers and their flags; each tool applies its own.

/// Default of `--max-edit-bytes`: 16 MiB.
pub const DEFAULT_MAX_EDIT_BYTES: u64 = 16 * 1024 * 1024;
/// Default of `--max-undo-memory-bytes`: 64 MiB per session.
pub const DEFAULT_MAX_UNDO_MEMORY_BYTES: u64 = 64 * 1024 * 1024;
/// Default of `--grep-max-line-bytes`: 16 MiB.
pub const DEFAULT_GREP_MAX_LINE_BYTES: u64 = 16 * 1024 * 1024;
/// Default of `--regex-size-limit`: 16 MiB.
pub const DEFAULT_REGEX_SIZE_LIMIT: usize = 16 * 1024 * 1024;
/// Default of `--regex-dfa-size-limit`: 8 MiB.
pub const DEFAULT_REGEX_DFA_SIZE_LIMIT: usize = 8 * 1024 * 1024;

/// The bounds (see the module doc). Flattened into the binary's command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::Args)]
pub struct Limits {
    /// The largest content a tool holds whole to change it, in bytes: write_file content,
    /// each file apply_patch writes, a file edit_file/multi_edit loads, a file move copies
    /// between mounts. Larger is refused with an error naming this flag.
    #[arg(global = true, long, value_name = "BYTES", default_value_t = DEFAULT_MAX_EDIT_BYTES)]
    pub max_edit_bytes: u64,

    /// The most bytes of earlier file contents one session keeps in memory for undo_edit,
    /// oldest dropped first. A file over half of it is not read for undo: on a disk mount it
    /// is set aside on disk instead; elsewhere the answer says the change cannot be undone.
    #[arg(global = true, long, value_name = "BYTES", default_value_t = DEFAULT_MAX_UNDO_MEMORY_BYTES)]
    pub max_undo_memory_bytes: u64,

    /// The longest line grep holds in memory, in bytes; a file with a longer line is
    /// reported as skipped, with the reason.
    #[arg(global = true, long, value_name = "BYTES", default_value_t = DEFAULT_GREP_MAX_LINE_BYTES)]
    pub grep_max_line_bytes: u64,

    /// The largest compiled program of a grep pattern, in bytes; a larger pattern is an error.
    #[arg(global = true, long, value_name = "BYTES", default_value_t = DEFAULT_REGEX_SIZE_LIMIT)]
    pub regex_size_limit: usize,

    /// The largest cache of a grep pattern's lazy DFA, in bytes; past it matching falls back
    /// to a slower engine instead of growing.
    #[arg(global = true, long, value_name = "BYTES", default_value_t = DEFAULT_REGEX_DFA_SIZE_LIMIT)]
    pub regex_dfa_size_limit: usize,

    /// The most bytes one workspace (the stdio session, an HTTP session or a stateless
    /// principal) holds in memory: files of memory mounts and /scratch/, in-memory overlay
    /// layers, undo history. A write past it is refused, naming what to free. Default 256 MiB; sizes take K, M or G
    /// (e.g. 64M).
    #[arg(global = true, long, value_name = "BYTES", default_value_t = crate::ground::quota::DEFAULT_MEMORY_QUOTA, value_parser = parse_bytes)]
    pub memory_quota: u64,

    /// The most bytes all workspaces together hold in memory (as --memory-quota counts them).
    /// Past it, writes into memory are refused and new HTTP sessions get 503; reads and
    /// disk/store work go on. Default 1 GiB (e.g. 4G).
    #[arg(global = true, long, value_name = "BYTES", default_value_t = crate::ground::quota::DEFAULT_MEMORY_BUDGET, value_parser = parse_bytes)]
    pub memory_budget: u64,
}

/// A size in bytes, with an optional unit: `1048576`, `512K`, `256M`, `1G` (also `KiB`, `MiB`,
/// `GiB`; powers of 1024).
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let at = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(at);
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        _ => {
            return Err(format!(
                "{text:?}: give a number of bytes, optionally with K, M or G (e.g. 256M)"
            ));
        }
    };
    let number: u64 = number
        .parse()
        .map_err(|_| format!("{text:?}: give a number of bytes, e.g. 268435456 or 256M"))?;
    number
        .checked_mul(1 << shift)
        .ok_or_else(|| format!("{text:?}: too large"))
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_edit_bytes: DEFAULT_MAX_EDIT_BYTES,
            max_undo_memory_bytes: DEFAULT_MAX_UNDO_MEMORY_BYTES,
            grep_max_line_bytes: DEFAULT_GREP_MAX_LINE_BYTES,
            regex_size_limit: DEFAULT_REGEX_SIZE_LIMIT,
            regex_dfa_size_limit: DEFAULT_REGEX_DFA_SIZE_LIMIT,
            memory_quota: crate::ground::quota::DEFAULT_MEMORY_QUOTA,
            memory_budget: crate::ground::quota::DEFAULT_MEMORY_BUDGET,
        }
    }
}

impl Limits {
    /// The largest single content kept in memory for undo: half the session's budget, so one
    /// step never evicts the whole history at once.
    pub fn max_undo_snapshot_bytes(&self) -> u64 {
        self.max_undo_memory_bytes / 2
    }

    /// The regex bounds alone, as `search::GrepPattern` takes them.
    pub fn regex(&self) -> RegexLimits {
        RegexLimits {
            size_limit: self.regex_size_limit,
            dfa_size_limit: self.regex_dfa_size_limit,
        }
    }
}

/// Bounds of one compiled grep pattern (`--regex-size-limit`, `--regex-dfa-size-limit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegexLimits {
    /// Largest compiled program, in bytes.
    pub size_limit: usize,
    /// Largest lazy-DFA cache, in bytes.
    pub dfa_size_limit: usize,
}

impl Default for RegexLimits {
    fn default() -> Self {
        Limits::default().regex()
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        limits: Limits,
    }

    #[test]
    fn flags_default_to_the_documented_values() {
        let cli = Cli::try_parse_from(["mountfs"]).unwrap();
        assert_eq!(cli.limits, Limits::default());
        assert_eq!(cli.limits.max_edit_bytes, 16 * 1024 * 1024);
        assert_eq!(cli.limits.max_undo_snapshot_bytes(), 32 * 1024 * 1024);
        assert_eq!(cli.limits.memory_quota, 256 * 1024 * 1024);
        assert_eq!(cli.limits.memory_budget, 1024 * 1024 * 1024);
    }

    #[test]
    fn sizes_take_units() {
        assert_eq!(parse_bytes("1048576"), Ok(1 << 20));
        assert_eq!(parse_bytes("512K"), Ok(512 << 10));
        assert_eq!(parse_bytes("256MiB"), Ok(256 << 20));
        assert_eq!(parse_bytes("2g"), Ok(2 << 30));
        assert!(parse_bytes("12 parsecs").is_err());
        assert!(parse_bytes("").is_err());
    }

    #[test]
    fn each_flag_sets_its_bound() {
        let cli = Cli::try_parse_from([
            "mountfs",
            "--max-edit-bytes",
            "10",
            "--max-undo-memory-bytes",
            "20",
            "--grep-max-line-bytes",
            "30",
            "--regex-size-limit",
            "40",
            "--regex-dfa-size-limit",
            "50",
            "--memory-quota",
            "64M",
            "--memory-budget",
            "70",
        ])
        .unwrap();
        assert_eq!(
            cli.limits,
            Limits {
                max_edit_bytes: 10,
                max_undo_memory_bytes: 20,
                grep_max_line_bytes: 30,
                regex_size_limit: 40,
                regex_dfa_size_limit: 50,
                memory_quota: 64 * 1024 * 1024,
                memory_budget: 70,
            }
        );
    }
}
