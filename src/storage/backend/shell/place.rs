//! The mount's place on the target: what the target offers (the probe), its directory made
//! or found, and the sweep of temporary files left by shells that no longer run.

use super::*;

/// Name prefix of the temporary files of writes in flight (hidden from every answer).
pub(super) const TEMP_PREFIX: &str = ".mountfs-tmp.";

/// How old (by its modification time, in minutes) a temporary file must be before the sweep
/// at opening may remove it. A write in flight changes its temporary file all along (the
/// payload of a write, each chunk of an upload); the longest pause is an upload's last step,
/// the source hashing the whole file, minutes for the largest files. The disk mount needs no
/// age: it knows its writers by a locked record; a shell target may be written by servers in
/// other pid namespaces or on other machines, whose shells cannot be seen from here.
pub const STALE_TEMP_MINUTES: u32 = 60;

/// What `mountfs check` reports of a shell mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellProbe {
    /// The mount's directory as the target resolves it.
    pub root: String,
    /// Whether the target user may write in it.
    pub writable: bool,
    /// Whether searches use the target's `rg`.
    pub rg: bool,
    /// Whether listings have times and modes (`stat -c` on the target).
    pub stat: bool,
}

/// Where a directory is, as the machine holding it tells: what `mountfs cp` compares to
/// refuse a destination inside its source across mount kinds and commands (two commands that
/// reach one machine, a disk mount and a shell on this machine). Inode numbers identify a
/// directory within one device, and device numbers within one running kernel, whatever the
/// mount namespace: so the machine is the kernel's boot id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirPlace {
    /// `boot <boot id>`, else `host <name> <machine id>`; empty when unknown.
    pub machine: String,
    /// The physical path (symbolic links resolved) of the directory's longest existing
    /// ancestor (the directory itself when it exists).
    pub existing: String,
    /// The rest of the directory's path below `existing`, as written (empty when it exists).
    pub rest: String,
    /// `(device, inode)` of `existing` and of each of its parents up to `/`, in that order;
    /// the device is `None` where the target cannot tell it (no `stat -c`).
    pub chain: Vec<(Option<u64>, u64)>,
}

impl ShellBackend {
    /// Opens a connection now and reports what the target offers (start-up, `mountfs check`).
    pub async fn probe(&self) -> std::result::Result<ShellProbe, String> {
        self.pool.warm().await.map_err(|e| e.to_string())?;
        let reply = self
            .pool
            .call(Frame::call("wt"))
            .await
            .map_err(|e| e.to_string())?;
        let (caps, root) = self.pool.caps().unwrap_or_default();
        Ok(ShellProbe {
            root,
            writable: trimmed(&reply.stdout) == b"1",
            rg: caps.rg,
            stat: caps.stat,
        })
    }

    /// Removes the temporary files that writers which are gone left under the mount's
    /// directory (a `mountfs cp` killed mid-upload, a connection lost mid-write): those older
    /// than [`STALE_TEMP_MINUTES`] whose name carries the pid of a shell that no longer runs
    /// on the target (or no pid: a name of an older release); one `find` on the target, which
    /// follows no symbolic link and stays on the directory's file system. Returns how many.
    /// The mount table calls it when it opens the mount, as the disk mount sweeps its own.
    pub async fn sweep_stale_temp_files(&self) -> std::result::Result<u64, String> {
        let reply = self
            .pool
            .call(Frame::call("sw").arg(STALE_TEMP_MINUTES))
            .await
            .map_err(|e| format!("shell '{}': {e}", self.name))?;
        if reply.status != 0 {
            return Err(format!(
                "shell '{}': the sweep of temporary files failed (status {})",
                self.name, reply.status
            ));
        }
        Ok(String::from_utf8_lossy(&reply.stdout)
            .split_whitespace()
            .filter_map(|n| n.parse::<u64>().ok())
            .sum())
    }

    /// Where the absolute directory `dir` is on the target (see [`DirPlace`]), asked of a
    /// mount made with `/` as its directory (`mountfs cp` compares two trees with it).
    pub async fn place_of(&self, dir: &str) -> std::result::Result<DirPlace, String> {
        let reply = self
            .pool
            .call(Frame::call("pl").path(dir))
            .await
            .map_err(|e| format!("shell '{}': {e}", self.name))?;
        if reply.status != 0 {
            return Err(format!(
                "shell '{}': {dir} cannot be looked at on the target (status {}){}",
                self.name,
                reply.status,
                String::from_utf8_lossy(trimmed(&reply.stderr))
                    .lines()
                    .next()
                    .map(|said| format!(": {said}"))
                    .unwrap_or_default()
            ));
        }
        let parts = reply.parts(4);
        let malformed = || format!("shell '{}': a malformed answer about {dir}", self.name);
        let [machine, existing, rest, chain] = parts.as_slice() else {
            return Err(malformed());
        };
        let mut nodes = Vec::new();
        for line in chain.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let text = std::str::from_utf8(line).map_err(|_| malformed())?;
            let (dev, ino) = text.split_once(' ').ok_or_else(malformed)?;
            nodes.push((
                dev.parse::<u64>().ok(),
                ino.trim().parse::<u64>().map_err(|_| malformed())?,
            ));
        }
        if nodes.is_empty() {
            return Err(malformed());
        }
        Ok(DirPlace {
            machine: String::from_utf8_lossy(machine)
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" "),
            existing: String::from_utf8_lossy(existing).into_owned(),
            rest: String::from_utf8_lossy(rest).into_owned(),
            chain: nodes,
        })
    }

    /// Makes the absolute directory `dir` on the target with its parents (`mkdir -p`), for a
    /// mount made with `/` as its directory: `mountfs cp` into a directory that does not exist
    /// yet, as it makes one on disk. The error is the target's own words.
    pub async fn make_dir_all(&self, dir: &str) -> std::result::Result<(), String> {
        let reply = self
            .pool
            .call(Frame::call("md").path(dir))
            .await
            .map_err(|e| format!("shell '{}': {e}", self.name))?;
        if reply.status == 0 {
            return Ok(());
        }
        let said = String::from_utf8_lossy(trimmed(&reply.stderr)).into_owned();
        Err(if said.is_empty() {
            format!("the target's mkdir failed (status {})", reply.status)
        } else {
            said.chars().take(500).collect()
        })
    }
}
