//! The server's own files (attack review of issue 41): its data directory's `mountfs/` (the
//! recovery key, the decisions, the default store, the audit log and its spools), the SQLite
//! files of store and overlay mounts and of the audit log, the token file. A disk mount an
//! operator gives over one of them (the data directory, its parent, `/`) must not hand them to
//! an agent: the recovery key forges the records start-up recovery trusts, the token file and
//! the databases hold other principals' data.
//!
//! They are told by **device and inode**, never by name: a symbolic link, a hard link, a bind
//! mount or any other path to one of them is the same file. The binary [`install`]s their host
//! paths at start; each path that exists is looked at then and again at most once a second (a
//! SQLite `-wal` file comes and goes), and a directory's entries, down to [`MAX_ENTRIES`], are
//! taken too (a hard link to a file inside the data directory is that file). Disk mounts then
//! ask [`is_own`] of every directory on a path and of the file itself, of every entry they list
//! and every directory and file a search walks: a path to one answers "not found", a listing
//! leaves it out, a write or create there is refused. Without an install (the library's tests,
//! an embedding program) nothing is hidden.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

/// Entries of the installed directories looked at, at most, per look (the data directory's
/// decisions and spools are few; the bound keeps a huge one from costing a search its speed).
pub const MAX_ENTRIES: usize = 10_000;

/// How often the paths are looked at again.
const REFRESH: Duration = Duration::from_secs(1);

struct OwnFiles {
    paths: Vec<PathBuf>,
    ids: RwLock<Ids>,
    /// Milliseconds after `start` of the last look.
    looked: AtomicU64,
    start: Instant,
    looking: Mutex<()>,
}

static OWN: OnceLock<OwnFiles> = OnceLock::new();

/// Hides `paths` (the server's own files and directories, host paths) from every disk mount of
/// this process from now on; only the first call counts. Paths that do not exist yet are
/// looked at again later.
pub fn install(paths: Vec<PathBuf>) {
    let own = OwnFiles {
        ids: RwLock::new(Ids::of(&paths)),
        paths,
        looked: AtomicU64::new(0),
        start: Instant::now(),
        looking: Mutex::new(()),
    };
    let _ = OWN.set(own);
}

/// Whether anything is hidden (an install was made): callers skip their looks otherwise.
pub fn active() -> bool {
    OWN.get().is_some()
}

/// Whether the file or directory of device `dev` and inode `ino` is one of the server's own.
pub fn is_own(dev: u64, ino: u64) -> bool {
    let Some(own) = OWN.get() else {
        return false;
    };
    own.confirmed(|ids| ids.own.contains(&(dev, ino)))
}

/// Whether the directory of device `dev` and inode `ino` holds one of the server's own files
/// (is a directory above one, by its host path): removing or moving it would take them along.
pub fn holds_own(dev: u64, ino: u64) -> bool {
    let Some(own) = OWN.get() else {
        return false;
    };
    own.confirmed(|ids| ids.above.contains(&(dev, ino)))
}

/// [`is_own`] of `meta`.
pub fn is_own_meta(meta: &std::fs::Metadata) -> bool {
    is_own(meta.dev(), meta.ino())
}

/// [`is_own`] of a `stat`.
pub fn is_own_stat(stat: &rustix::fs::Stat) -> bool {
    #[allow(clippy::useless_conversion, clippy::unnecessary_cast)]
    is_own(stat.st_dev as u64, stat.st_ino as u64)
}

/// [`holds_own`] of a `stat`.
pub fn holds_own_stat(stat: &rustix::fs::Stat) -> bool {
    #[allow(clippy::useless_conversion, clippy::unnecessary_cast)]
    holds_own(stat.st_dev as u64, stat.st_ino as u64)
}

/// The installed paths (for `mountfs check`).
pub fn paths() -> &'static [PathBuf] {
    OWN.get().map_or(&[], |own| own.paths.as_slice())
}

impl OwnFiles {
    /// `test` on what is known; a hit is confirmed by a look begun after it was seen (another
    /// thread's, when one began since, else one taken now): an own file deleted since the last
    /// look (a SQLite `-journal`, a spool, another server's file in a shared data directory) may
    /// have given its inode to a file or directory an agent made since, which must not be
    /// hidden (seen: `mkdir /archive` then a move into it answered "not found"; and a file made
    /// by a test answered "not found" while many servers shared one data directory, when a look
    /// up to 20 ms old was believed). A miss needs no look: a file made since the last look is
    /// found at the next one (within [`REFRESH`]).
    fn confirmed(&self, test: impl Fn(&Ids) -> bool) -> bool {
        self.refresh();
        if !test(&self.ids.read().unwrap_or_else(|e| e.into_inner())) {
            return false;
        }
        let seen = self.now_ms();
        let _guard = self.looking.lock().unwrap_or_else(|e| e.into_inner());
        // A look whose clock reading came a millisecond or more after the hit was seen scanned
        // after the file in question existed: its answer stands.
        if self.looked.load(Ordering::Relaxed) > seen {
            return test(&self.ids.read().unwrap_or_else(|e| e.into_inner()));
        }
        let now = self.now_ms();
        let ids = Ids::of(&self.paths);
        let hit = test(&ids);
        self.looked.store(now, Ordering::Relaxed);
        *self.ids.write().unwrap_or_else(|e| e.into_inner()) = ids;
        hit
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn refresh(&self) {
        let now = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        let looked = self.looked.load(Ordering::Relaxed);
        if now.saturating_sub(looked) < REFRESH.as_millis() as u64 {
            return;
        }
        // One thread looks; the others go on with what is known.
        let Ok(_guard) = self.looking.try_lock() else {
            return;
        };
        self.looked.store(now, Ordering::Relaxed);
        let ids = Ids::of(&self.paths);
        *self.ids.write().unwrap_or_else(|e| e.into_inner()) = ids;
    }
}

/// What one look found.
#[derive(Default)]
struct Ids {
    /// The files themselves and the entries of their folders.
    own: HashSet<(u64, u64)>,
    /// The directories above them (by host path).
    above: HashSet<(u64, u64)>,
}

impl Ids {
    fn of(paths: &[PathBuf]) -> Self {
        let mut above = HashSet::new();
        for path in paths {
            let Ok(real) = std::fs::canonicalize(path) else {
                continue;
            };
            for up in real.ancestors().skip(1) {
                if let Ok(meta) = std::fs::metadata(up) {
                    above.insert((meta.dev(), meta.ino()));
                }
            }
        }
        Self {
            own: ids_of(paths),
            above,
        }
    }
}

/// The device and inode of each of `paths` that exists and, for a directory, of its entries
/// (at most [`MAX_ENTRIES`] in all, symbolic links not followed).
fn ids_of(paths: &[PathBuf]) -> HashSet<(u64, u64)> {
    let mut ids = HashSet::new();
    let mut budget = MAX_ENTRIES;
    for path in paths {
        let Ok(meta) = std::fs::metadata(path) else {
            continue;
        };
        ids.insert((meta.dev(), meta.ino()));
        if meta.is_dir() {
            entries_of(path, &mut ids, &mut budget);
        }
    }
    ids
}

fn entries_of(dir: &Path, ids: &mut HashSet<(u64, u64)>, budget: &mut usize) {
    let mut pending = vec![dir.to_path_buf()];
    while let Some(at) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&at) else {
            continue;
        };
        for entry in entries.flatten() {
            if *budget == 0 {
                return;
            }
            *budget -= 1;
            let Ok(meta) = std::fs::symlink_metadata(entry.path()) else {
                continue;
            };
            if meta.file_type().is_symlink() {
                continue;
            }
            ids.insert((meta.dev(), meta.ino()));
            if meta.is_dir() {
                pending.push(entry.path());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_and_directory_entries_are_told_by_identity() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("mountfs");
        std::fs::create_dir_all(data.join("decisions")).unwrap();
        std::fs::write(data.join("recovery.key"), "k").unwrap();
        std::fs::write(dir.path().join("other"), "o").unwrap();
        let ids = ids_of(&[data.clone(), dir.path().join("missing")]);
        let id = |p: &Path| {
            let m = std::fs::metadata(p).unwrap();
            (m.dev(), m.ino())
        };
        assert!(ids.contains(&id(&data)));
        assert!(ids.contains(&id(&data.join("recovery.key"))));
        assert!(ids.contains(&id(&data.join("decisions"))));
        assert!(!ids.contains(&id(&dir.path().join("other"))));
        // A hard link elsewhere is the same file.
        std::fs::hard_link(data.join("recovery.key"), dir.path().join("alias")).unwrap();
        assert!(ids.contains(&id(&dir.path().join("alias"))));
    }

    /// An identity left from an own file deleted since the last look (its inode now another
    /// file's) is not believed, however young the look: a hit is looked at again. (The e2e
    /// move test saw a directory an agent made answer "not found" before this, and the e2e
    /// memory test a file, with a look under 20 ms old believed.)
    #[test]
    fn a_stale_identity_is_looked_at_again_before_it_hides_anything() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("recovery.key");
        let reused = dir.path().join("archive");
        std::fs::write(&key, "k").unwrap();
        std::fs::create_dir(&reused).unwrap();
        let id = |p: &Path| {
            let m = std::fs::metadata(p).unwrap();
            (m.dev(), m.ino())
        };
        let own = OwnFiles {
            paths: vec![key.clone()],
            ids: RwLock::new(Ids {
                own: HashSet::from([id(&key), id(&reused)]),
                above: HashSet::from([id(&reused)]),
            }),
            looked: AtomicU64::new(0),
            start: Instant::now(),
            looking: Mutex::new(()),
        };
        // The known look is not old (taken this very millisecond, `looked` 0): it is still
        // doubted, since it did not begin after the hit was seen.
        assert!(!own.confirmed(|ids| ids.own.contains(&id(&reused))));
        assert!(!own.confirmed(|ids| ids.above.contains(&id(&reused))));
        assert!(own.confirmed(|ids| ids.own.contains(&id(&key))));
    }
}
