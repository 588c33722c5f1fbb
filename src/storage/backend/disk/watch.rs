//! The disk mount's watcher: changes made under a mount's directory by anyone (other programs,
//! other servers) as virtual paths, for the change notifications (`observers::changes`).

use std::path::Path;

use crate::ground::path::VirtualPath;

/// Names of the disk backend's own files in flight (temporary files, set-asides), never
/// reported.
const OWN_FILE_PREFIX: &str = ".mountfs-tmp";

/// A recursive watcher of a disk mount's directory `dir` mounted at `prefix`: `changed` hears
/// the virtual path of every file or directory that changed there, and whether the change
/// adds, removes or renames one (a listing changes) rather than changing its content.
pub fn watch(
    prefix: &VirtualPath,
    dir: &Path,
    changed: impl Fn(VirtualPath, bool) + Send + 'static,
) -> notify::Result<notify::RecommendedWatcher> {
    use notify::{EventKind, RecursiveMode, Watcher};
    let prefix = prefix.clone();
    let root = dir.to_path_buf();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let event = match event {
            Ok(event) => event,
            Err(error) => {
                tracing::debug!(%error, "file watcher error");
                return;
            }
        };
        let listing = matches!(
            event.kind,
            EventKind::Create(_)
                | EventKind::Remove(_)
                | EventKind::Modify(notify::event::ModifyKind::Name(_))
        );
        if matches!(event.kind, EventKind::Access(_)) {
            return;
        }
        for host in &event.paths {
            if let Some(path) = virtual_of(&prefix, &root, host) {
                changed(path, listing);
            }
        }
    })?;
    watcher.watch(dir, RecursiveMode::Recursive)?;
    Ok(watcher)
}

/// The virtual path of a host path inside a disk mount's `root`; `None` for paths outside it,
/// names that are not UTF-8, version-control internals and the backend's temporary files.
fn virtual_of(prefix: &VirtualPath, root: &Path, host: &Path) -> Option<VirtualPath> {
    let relative = host.strip_prefix(root).ok()?;
    let text = relative.to_str()?;
    if text
        .split('/')
        .any(|name| name == ".git" || name.starts_with(OWN_FILE_PREFIX))
    {
        return None;
    }
    let inner = VirtualPath::parse_raw(&format!("/{text}")).ok()?;
    Some(inner.under(prefix))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(text: &str) -> VirtualPath {
        VirtualPath::parse(text).unwrap()
    }

    #[test]
    fn disk_events_map_to_virtual_paths_without_git_or_temp_files() {
        let root = Path::new("/srv/repo");
        let prefix = path("/work");
        assert_eq!(
            virtual_of(&prefix, root, Path::new("/srv/repo/src/a.rs")),
            Some(path("/work/src/a.rs"))
        );
        assert_eq!(
            virtual_of(&prefix, root, Path::new("/srv/repo/.git/index")),
            None
        );
        assert_eq!(
            virtual_of(&prefix, root, Path::new("/srv/repo/src/.mountfs-tmp-12-3")),
            None
        );
        assert_eq!(virtual_of(&prefix, root, Path::new("/elsewhere/a")), None);
    }
}
