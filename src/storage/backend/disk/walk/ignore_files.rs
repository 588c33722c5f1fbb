//! The ignore files of a disk walk: each `.ignore`, `.gitignore` and `.git/info/exclude` opened
//! by name in its already open directory (no symlink followed, non-blocking, regular files only,
//! bounded) or read from an overlay's view, and the rules of every directory above a path
//! chained so that the deepest matching rule decides.

use super::*;

/// The `.ignore`, `.gitignore` and `.git/info/exclude` matchers of one directory, and those of
/// the directories above it.
pub(super) struct RuleLevel {
    pub(super) matchers: Matchers,
    pub(super) parent: Option<Arc<RuleLevel>>,
}

/// Reads ignore files, each opened by name in its directory without following a symlink,
/// non-blocking, regular files only, bounded; or as an overlay's view has them.
pub(super) struct IgnoreFiles<'a> {
    pub(super) pinned_root: &'a Path,
    pub(super) view: Option<&'a Arc<dyn SearchView>>,
}

impl IgnoreFiles<'_> {
    /// The content of the regular file `name` in `dir`, `None` for anything else.
    pub(super) fn read(dir: BorrowedFd<'_>, name: &CStr) -> Option<Vec<u8>> {
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let file = std::fs::File::from(rustix::fs::openat(dir, name, flags, Mode::empty()).ok()?);
        let stat = rustix::fs::fstat(&file).ok()?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
            return None;
        }
        let mut content = Vec::new();
        file.take(MAX_IGNORE_FILE_BYTES)
            .read_to_end(&mut content)
            .ok()?;
        Some(content)
    }

    /// `.git/info/exclude` of `dir`, each step opened without following a symlink.
    pub(super) fn read_exclude(dir: BorrowedFd<'_>) -> Option<Vec<u8>> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let git = rustix::fs::openat(dir, c".git", flags, Mode::empty()).ok()?;
        let info = rustix::fs::openat(&git, c"info", flags, Mode::empty()).ok()?;
        Self::read(info.as_fd(), c"exclude")
    }

    /// The ignore file `kind` ([`IGNORE_FILES`]) of the directory `dir` (at `relative`) as
    /// the view has it; from disk (`on_disk`, when the listing shows it) where the view has
    /// the base's.
    pub(super) fn content(
        &self,
        dir: BorrowedFd<'_>,
        relative: &Path,
        kind: usize,
        on_disk: bool,
    ) -> Option<Vec<u8>> {
        if let Some(view) = self.view {
            let path = VirtualPath::root()
                .join_relative(relative.join(IGNORE_FILES[kind]).to_str()?)
                .ok()?;
            match view.ignore_file(&path) {
                ViewedFile::Base => {}
                ViewedFile::Absent => return None,
                ViewedFile::Content(content) => {
                    let end = content.len().min(MAX_IGNORE_FILE_BYTES as usize);
                    return Some(content[..end].to_vec());
                }
            }
        }
        if !on_disk {
            return None;
        }
        match kind {
            0 => Self::read(dir, c".ignore"),
            1 => Self::read(dir, c".gitignore"),
            _ => Self::read_exclude(dir),
        }
    }

    /// The level of the directory `fd` (at `relative`) whose listing shows the ignore files
    /// in `has` (`.ignore`, `.gitignore`, `.git`); `None` if none of them holds a rule. The
    /// view, if any, is told what was read for the directory, as `seen_as` (its path in the
    /// view's coordinates).
    pub(super) fn level(
        &self,
        fd: &OwnedFd,
        relative: &Path,
        has: [bool; 3],
        parent: Option<Arc<RuleLevel>>,
        seen_as: Option<&VirtualPath>,
    ) -> Option<Arc<RuleLevel>> {
        let dir = fd.as_fd();
        let root = self.pinned_root.join(relative);
        let content = |kind: usize| {
            // `.git/info/exclude` counts only where `.git` is a directory on disk.
            if kind == 2 && !has[2] {
                return None;
            }
            self.content(dir, relative, kind, has[kind])
        };
        let contents = [content(0), content(1), content(2)];
        if let (Some(view), Some(path)) = (self.view, seen_as) {
            view.saw_dir(path, &contents);
        }
        let matcher = |content: &Option<Vec<u8>>| {
            content
                .as_ref()
                .and_then(|content| ignore_rules::matcher(&root, content))
        };
        let matchers = [
            matcher(&contents[0]),
            matcher(&contents[1]),
            matcher(&contents[2]),
        ];
        matchers.iter().any(Option::is_some).then(|| {
            Arc::new(RuleLevel {
                matchers: Arc::new(matchers),
                parent,
            })
        })
    }

    /// The rules of the directories above `start` (root-relative, not `.`), from the mount
    /// root down; each directory is opened beneath the root. The view is told what was read
    /// for each when `tell_view` (the searched path names `start` itself, no symlink between).
    pub(super) fn ancestors(
        &self,
        root: &Dir,
        start: &Path,
        tell_view: bool,
    ) -> Option<Arc<RuleLevel>> {
        let mut rules = None;
        let mut relative = PathBuf::new();
        let mut dir = root.try_clone().ok()?;
        let components: Vec<_> = start.components().collect();
        for (i, component) in components.iter().enumerate() {
            if i > 0 {
                relative.push(components[i - 1]);
            }
            let fd = OwnedFd::from(dir.try_clone().ok()?.into_std_file());
            let names: [&CStr; 2] = [c".ignore", c".gitignore"];
            let present =
                names.map(|name| rustix::fs::statat(&fd, name, AtFlags::SYMLINK_NOFOLLOW).is_ok());
            let git = rustix::fs::statat(&fd, c".git", AtFlags::SYMLINK_NOFOLLOW)
                .is_ok_and(|s| FileType::from_raw_mode(s.st_mode) == FileType::Directory);
            let seen_as = relative
                .to_str()
                .filter(|_| tell_view)
                .and_then(|r| VirtualPath::root().join_relative(r).ok());
            rules = self
                .level(
                    &fd,
                    &relative,
                    [present[0], present[1], git],
                    rules.clone(),
                    seen_as.as_ref(),
                )
                .or(rules);
            dir = dir.open_dir(component).ok()?;
        }
        rules
    }

    /// Whether `relative` (root-relative) is ignored: per kind, the deepest directory with a
    /// matching rule decides; `.ignore` beats `.gitignore` beats exclude.
    pub(super) fn is_ignored(&self, rules: &Arc<RuleLevel>, relative: &Path, is_dir: bool) -> bool {
        let levels = std::iter::successors(Some(rules), |level| level.parent.as_ref())
            .map(|level| &level.matchers);
        ignore_rules::is_ignored_in(levels, &self.pinned_root.join(relative), is_dir)
    }
}
