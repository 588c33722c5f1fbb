//! Whether `mountfs cp`'s destination is, or lies inside, its source when the two are named
//! by different means (issue 27): a disk mount and a shell on this machine, or two `--shell`
//! commands reaching one machine (`sh` and `sh -c 'exec sh'`, `ssh host sh` and `sh` there).
//! Paths cannot tell (each side resolves its own), so each side says where its directory is
//! ([`DirPlace`]: the machine, and device and inode of the directory or its longest existing
//! ancestor and of every parent up to `/`) and the destination is inside the source when both
//! are on one machine and the source's directory is among the destination's ancestors (itself
//! included). The disk side is looked at here with `std`; a shell side by its target
//! ([`crate::storage::backend::ShellBackend::place_of`]). What a shell cannot tell (a target without
//! `stat -c` gives no device) is compared by inode and physical path together.

use std::path::{Component, Path, PathBuf};

use crate::storage::backend::DirPlace;

/// The place of a directory of this machine (it may not exist yet: then its longest existing
/// ancestor's), or `None` when not even `/` can be looked at.
pub(super) fn disk_place(dir: &Path) -> Option<DirPlace> {
    use std::os::unix::fs::MetadataExt;
    let absolute = std::path::absolute(dir).ok()?;
    let mut rest: Vec<String> = Vec::new();
    let mut at: PathBuf = absolute;
    let existing = loop {
        if let Ok(real) = at.canonicalize() {
            break real;
        }
        let name = match at.components().next_back() {
            Some(Component::Normal(name)) => name.to_string_lossy().into_owned(),
            Some(Component::ParentDir) => "..".to_owned(),
            Some(Component::CurDir) => ".".to_owned(),
            _ => return None,
        };
        rest.push(name);
        at = at.parent()?.to_path_buf();
    };
    rest.reverse();
    let chain = existing
        .ancestors()
        .map(|up| std::fs::metadata(up).map(|m| (Some(m.dev()), m.ino())))
        .collect::<std::io::Result<Vec<_>>>()
        .ok()?;
    Some(DirPlace {
        machine: this_machine(),
        existing: existing.to_string_lossy().into_owned(),
        rest: rest.join("/"),
        chain,
    })
}

/// This machine as a shell target names its own (see [`DirPlace::machine`]): the kernel's
/// boot id, shared by every container of this kernel; else the host name and machine id.
fn this_machine() -> String {
    let read = |path: &str| {
        std::fs::read_to_string(path)
            .map(|text| text.split_whitespace().collect::<Vec<_>>().join(" "))
            .unwrap_or_default()
    };
    let boot = read("/proc/sys/kernel/random/boot_id");
    if !boot.is_empty() {
        return format!("boot {boot}");
    }
    let host = read("/proc/sys/kernel/hostname");
    let host = if host.is_empty() {
        read("/etc/hostname")
    } else {
        host
    };
    let id = read("/etc/machine-id");
    if host.is_empty() && id.is_empty() {
        return String::new();
    }
    format!("host {host} {id}")
}

/// One directory of a place's chain.
#[derive(Debug)]
struct Node {
    dev: Option<u64>,
    ino: u64,
    /// Its physical path.
    path: String,
}

impl Node {
    /// Whether two nodes are one directory: by device and inode, or where a device is not
    /// known, by inode and physical path.
    fn same(&self, other: &Node) -> bool {
        match (self.dev, other.dev) {
            (Some(a), Some(b)) => a == b && self.ino == other.ino,
            _ => self.ino == other.ino && self.path == other.path,
        }
    }
}

/// The directories of `place` from the directory (when it exists) or its nearest existing
/// ancestor up to `/`, with `..` in the part not made yet applied (`new/../..` climbs above
/// the existing ancestor), and whether the directory itself exists.
fn resolve(place: &DirPlace) -> (Vec<Node>, bool) {
    let mut below = 0usize;
    let mut ups = 0usize;
    for name in place.rest.split('/') {
        match name {
            "" | "." => {}
            ".." if below > 0 => below -= 1,
            ".." => ups += 1,
            _ => below += 1,
        }
    }
    let mut path = place.existing.trim_end_matches('/').to_owned();
    let mut nodes = Vec::with_capacity(place.chain.len());
    for (dev, ino) in &place.chain {
        nodes.push(Node {
            dev: *dev,
            ino: *ino,
            path: if path.is_empty() {
                "/".to_owned()
            } else {
                path.clone()
            },
        });
        path.truncate(path.rfind('/').unwrap_or(0));
    }
    let skip = ups.min(nodes.len().saturating_sub(1));
    nodes.drain(..skip);
    (nodes, below == 0)
}

/// Whether the directory of `destination` is that of `source` or lies inside it: one machine,
/// and the source's directory (which must exist) among the destination's and its ancestors.
pub(super) fn inside(source: &DirPlace, destination: &DirPlace) -> bool {
    if source.machine.is_empty() || source.machine != destination.machine {
        return false;
    }
    let (source_nodes, source_exists) = resolve(source);
    let Some(top) = source_nodes.first().filter(|_| source_exists) else {
        return false;
    };
    let (destination_nodes, _) = resolve(destination);
    destination_nodes.iter().any(|node| node.same(top))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(existing: &str, rest: &str, chain: &[(Option<u64>, u64)]) -> DirPlace {
        DirPlace {
            machine: "boot 1".to_owned(),
            existing: existing.to_owned(),
            rest: rest.to_owned(),
            chain: chain.to_vec(),
        }
    }

    #[test]
    fn a_destination_is_inside_when_the_source_is_among_its_ancestors() {
        let source = place("/a/src", "", &[(Some(1), 30), (Some(1), 20), (Some(1), 2)]);
        let sub = place(
            "/a/src/x",
            "new",
            &[(Some(1), 40), (Some(1), 30), (Some(1), 20), (Some(1), 2)],
        );
        let same = place("/mnt/src", "", &[(Some(1), 30), (Some(9), 5), (Some(9), 2)]);
        let sibling = place(
            "/a/other",
            "",
            &[(Some(1), 31), (Some(1), 20), (Some(1), 2)],
        );
        let not_yet = place("/a", "src/deeper", &[(Some(1), 20), (Some(1), 2)]);
        assert!(inside(&source, &sub));
        assert!(inside(&source, &same), "a bind mount of the same directory");
        assert!(!inside(&source, &sibling));
        // Made later: /a/src exists, so the place would say so; a parent of it is not inside.
        assert!(!inside(&source, &not_yet));
        // Another machine with equal numbers.
        let mut elsewhere = place("/a/src/x", "", &[(Some(1), 40), (Some(1), 30)]);
        elsewhere.machine = "boot 2".to_owned();
        assert!(!inside(&source, &elsewhere));
        // `new/../..` climbs from /a/src/x to /a/src: still inside; one more, to /a: not.
        let up = place(
            "/a/src/x",
            "new/../..",
            &[(Some(1), 40), (Some(1), 30), (Some(1), 20), (Some(1), 2)],
        );
        assert!(inside(&source, &up));
        let above = place(
            "/a/src",
            "../x/../..",
            &[(Some(1), 30), (Some(1), 20), (Some(1), 2)],
        );
        assert!(!inside(&source, &above));
        // A source that does not exist contains nothing.
        let missing = place("/a", "gone", &[(Some(1), 20), (Some(1), 2)]);
        assert!(!inside(&missing, &sub));
    }

    #[test]
    fn without_a_device_inode_and_path_decide_together() {
        let source = place("/w/src", "", &[(None, 30), (None, 20), (None, 2)]);
        let inner = place(
            "/w/src/a",
            "",
            &[(Some(5), 77), (Some(5), 30), (Some(5), 20), (Some(5), 2)],
        );
        let other_fs_root = place("/data", "", &[(Some(8), 2), (Some(5), 2)]);
        let root_source = place("/", "", &[(None, 2)]);
        assert!(inside(&source, &inner));
        // Inode 2 is the root of every ext4 file system: the path tells them apart.
        assert!(inside(&root_source, &other_fs_root), "/ holds /data");
        let data = place("/data", "", &[(None, 2), (None, 2)]);
        let elsewhere = place("/srv/x", "", &[(Some(5), 12), (Some(5), 11), (Some(5), 2)]);
        assert!(!inside(&data, &elsewhere));
    }

    #[test]
    fn this_machines_disk_place_has_every_ancestor() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("a")).unwrap();
        let place = disk_place(&dir.path().join("a/b/c")).unwrap();
        assert_eq!(place.rest, "b/c");
        assert!(place.existing.ends_with("/a"));
        assert_eq!(
            place.chain.len(),
            Path::new(&place.existing).ancestors().count()
        );
        assert!(!place.machine.is_empty());
        let source = disk_place(&dir.path().join("a")).unwrap();
        assert!(inside(&source, &place));
        assert!(!inside(&place, &source));
    }
}
