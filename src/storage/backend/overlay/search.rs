//! `glob` and `grep` through the view: the base's own search with the hidden paths left out,
//! the layer's matches added, judged by the ignore files as the view has them.

use super::*;

/// One backend's glob or grep, as [`OverlayBackend::search_view`] runs it.
pub(super) type SearchFuture<'a, T> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Vec<T>>> + Send + 'a>>;

impl OverlayBackend {
    /// One glob or grep of `dir` through the overlay (`search` runs it on a backend with a
    /// control): the base's walk and the layer's own search at once, the base's files the
    /// layer hides left out, and the layer's files judged by the ignore files the walk read
    /// (so only after it). The base's walk skips the hidden paths before it counts lines, so
    /// the lines a grep keeps for the answer's page are the view's, not cut short by files it
    /// hides.
    pub(super) async fn search_view<'a, T: Send>(
        &'a self,
        dir: &VirtualPath,
        control: &crate::storage::backend::SearchControl,
        search: impl Fn(
            &Arc<dyn Backend>,
            crate::storage::backend::SearchControl,
        ) -> SearchFuture<'a, T>,
        path_of: impl Fn(&T) -> &VirtualPath,
    ) -> Result<Vec<T>> {
        let plan = self.search_plan(dir).await?;
        // What the base finds is filtered below (hidden files dropped): it must find every
        // file, not stop after the first ones the answer shows.
        let control = &control.every_file();
        let base = async {
            if plan.base {
                search(&self.base, plan.base_control(control)).await
            } else {
                Ok(Vec::new())
            }
        };
        let layer = async {
            if plan.layer {
                search(&self.layer, control.without_view()).await
            } else {
                Ok(Vec::new())
            }
        };
        let (base, layer) = tokio::join!(base, layer);
        let mut out: Vec<T> = base?
            .into_iter()
            .filter(|found| !plan.book.base_hidden(path_of(found)))
            .collect();
        out.extend(self.drop_ignored(&plan, dir, layer?, &path_of).await?);
        Ok(out)
    }
}

/// How one glob or grep through the overlay runs.
pub(super) struct SearchPlan {
    /// The book when the search began.
    book: Arc<Book>,
    /// Search the base (the searched directory is not wholly hidden).
    base: bool,
    /// Search the layer (it holds files there).
    layer: bool,
    /// What the base's walk must skip and read as the layer has it; `None` when the layer
    /// changes nothing the walk sees.
    view: Option<Arc<LayerView>>,
}

impl SearchPlan {
    pub(super) fn base_control(
        &self,
        control: &crate::storage::backend::SearchControl,
    ) -> crate::storage::backend::SearchControl {
        match &self.view {
            Some(view) => {
                control.with_view(view.clone() as Arc<dyn crate::ground::search::SearchView>)
            }
            None => control.clone(),
        }
    }

    /// The ignore files of the directory `dir` as the base's walk read them, if it did.
    pub(super) fn seen(&self, dir: &VirtualPath) -> Option<SeenIgnoreFiles> {
        let view = self.view.as_ref()?;
        let seen = view.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.dirs.get(dir.as_str()).cloned()
    }
}

/// The overlay's [`crate::ground::search::SearchView`]: a snapshot of the book and the content of every
/// ignore file the layer holds.
#[derive(Debug)]
pub(super) struct LayerView {
    book: Arc<Book>,
    ignore_files: BTreeMap<String, Arc<[u8]>>,
    /// The base directories above the layer's files that the walk read, with the ignore
    /// files it read there ([`crate::ground::search::SearchView::saw_dir`]).
    seen: std::sync::Mutex<SeenDirs>,
}

/// What [`LayerView::seen`] holds.
#[derive(Debug, Default)]
pub(super) struct SeenDirs {
    dirs: std::collections::HashMap<String, SeenIgnoreFiles>,
    /// Bytes of ignore files kept, at most [`SEEN_BYTES`].
    bytes: usize,
}

/// Most bytes of ignore files one search keeps for judging the layer's files (a base whose
/// directories hold huge ignore files cannot make a search hold them all).
pub(super) const SEEN_BYTES: usize = 16 * 1024 * 1024;

/// The `.ignore`, `.gitignore` and `.git/info/exclude` of one directory as a walk read them.
pub(super) type SeenIgnoreFiles = [Option<Arc<[u8]>>; 3];

impl crate::ground::search::SearchView for LayerView {
    fn hides(&self, path: &VirtualPath) -> bool {
        !self.book.base_partly_shown(path)
    }

    fn ignore_file(&self, path: &VirtualPath) -> crate::ground::search::ViewedFile {
        use crate::ground::search::ViewedFile;
        if let Some(content) = self.ignore_files.get(path.as_str()) {
            return ViewedFile::Content(content.clone());
        }
        if self.book.base_hidden(path) {
            ViewedFile::Absent
        } else {
            ViewedFile::Base
        }
    }

    fn untouched(&self, dir: &VirtualPath) -> bool {
        let book = &self.book;
        let prefix = dir_prefix(dir);
        let opaque_below = book
            .opaque
            .range::<str, _>((Bound::Included(prefix.as_str()), Bound::Unbounded))
            .next()
            .is_some_and(|key| key.starts_with(&prefix));
        book.marks_under(dir).next().is_none() && !book.opaque_covers(dir) && !opaque_below
    }

    fn saw_dir(&self, path: &VirtualPath, ignore_files: &[Option<Vec<u8>>; 3]) {
        // Only the directories a layer file's judgement asks about (bounded by the layer), and
        // at most SEEN_BYTES of ignore files in all: past that, directories are not kept, and
        // their ignore files are read again when a layer file is judged.
        if !self.book.layer_dir(path) {
            return;
        }
        let bytes: usize = ignore_files.iter().flatten().map(Vec::len).sum();
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if seen.bytes + bytes > SEEN_BYTES {
            return;
        }
        seen.bytes += bytes;
        let files = ignore_files
            .each_ref()
            .map(|file| file.as_deref().map(Arc::from));
        seen.dirs.insert(path.as_str().to_owned(), files);
    }
}

/// Whether `path` names an ignore file (`.ignore`, `.gitignore`, `.git/info/exclude`).
pub(super) fn is_ignore_file(path: &str) -> bool {
    crate::storage::backend::ignore_rules::IGNORE_FILES
        .iter()
        .any(|name| {
            path.strip_suffix(name)
                .is_some_and(|before| before.ends_with('/'))
        })
}

impl OverlayBackend {
    /// What a search of `dir` reads: the base (unless wholly hidden), the layer (when it holds
    /// files there), and the view the base's walk obeys.
    pub(super) async fn search_plan(&self, dir: &VirtualPath) -> Result<SearchPlan> {
        let book = self.book().await?.clone();
        let base = !book.opaque_covers(dir) || book.shown_within(dir);
        let layer = book.layer_file(dir) || book.layer_dir(dir);
        let view = if book.files.is_empty() && book.opaque.is_empty() && book.shown.is_empty() {
            None
        } else {
            let mut ignore_files = BTreeMap::new();
            for (path, mark) in &book.files {
                if mark.state == MarkState::Changed && is_ignore_file(path) {
                    let path = VirtualPath::parse_raw(path)?;
                    if let BoundedRead::Whole(file) = self
                        .layer
                        .read_at_most(
                            &path,
                            crate::storage::backend::ignore_rules::MAX_IGNORE_FILE_BYTES,
                        )
                        .await?
                    {
                        ignore_files.insert(path.as_str().to_owned(), Arc::from(file.content));
                    }
                }
            }
            Some(Arc::new(LayerView {
                book: book.clone(),
                ignore_files,
                seen: std::sync::Mutex::default(),
            }))
        };
        Ok(SearchPlan {
            book,
            base,
            layer,
            view,
        })
    }

    /// Drops from `found` (layer files of a search of `dir`) what the disk walk would not
    /// report for a disk file in the same place: files below a `.git` directory, and, unless
    /// the mount is `no-ignore`, files that the ignore files (as the view has them) ignore, or
    /// that lie in an ignored directory below `dir`.
    pub(super) async fn drop_ignored<T>(
        &self,
        plan: &SearchPlan,
        dir: &VirtualPath,
        found: Vec<T>,
        path_of: impl Fn(&T) -> &VirtualPath,
    ) -> Result<Vec<T>> {
        let mut rules = LayerIgnoreRules {
            dirs: std::collections::HashMap::new(),
            plan,
        };
        let mut kept = Vec::with_capacity(found.len());
        for item in found {
            let path = path_of(&item);
            let Some(relative) = path.relative_to(dir) else {
                kept.push(item);
                continue;
            };
            let relative = relative.to_owned();
            if relative.split('/').any(|part| part == ".git") {
                continue;
            }
            if self.ignore_files && !relative.is_empty() {
                // Each step below `dir`, as the walk meets it: a directory, then the file.
                let mut ignored = false;
                let mut at = dir.clone();
                let parts: Vec<&str> = relative.split('/').collect();
                for (i, part) in parts.iter().enumerate() {
                    at = at.join_relative(part)?;
                    let is_dir = i + 1 < parts.len();
                    if self.ignored_in_view(&mut rules, &at, is_dir).await? {
                        ignored = true;
                        break;
                    }
                }
                if ignored {
                    continue;
                }
            }
            kept.push(item);
        }
        Ok(kept)
    }

    /// Whether the ignore files of `path`'s ancestors, read through this overlay's view, ignore it.
    pub(super) async fn ignored_in_view(
        &self,
        rules: &mut LayerIgnoreRules<'_>,
        path: &VirtualPath,
        is_dir: bool,
    ) -> Result<bool> {
        let mut levels = Vec::new();
        let mut at = path.parent();
        while let Some(dir) = at {
            levels.push(self.matchers_in_view(rules, &dir).await?);
            at = dir.parent();
        }
        Ok(crate::storage::backend::ignore_rules::is_ignored(
            &levels,
            std::path::Path::new(path.as_str()),
            is_dir,
        ))
    }

    /// The ignore matchers of `dir` as the view has its ignore files, cached in `rules`.
    pub(super) async fn matchers_in_view(
        &self,
        rules: &mut LayerIgnoreRules<'_>,
        dir: &VirtualPath,
    ) -> Result<crate::storage::backend::ignore_rules::Matchers> {
        if let Some(found) = rules.dirs.get(dir.as_str()) {
            return Ok(found.clone());
        }
        let root = std::path::Path::new(dir.as_str());
        // Where the base's walk read `dir`, the files it read are the view's: nothing is read
        // again (a `.git/info/exclude` counts, for the walk, only below a `.git` directory on
        // disk; one the layer made is read here).
        let seen = rules.plan.seen(dir);
        let mut found: [Option<ignore::gitignore::Gitignore>; 3] = [None, None, None];
        for (kind, (slot, name)) in found
            .iter_mut()
            .zip(crate::storage::backend::ignore_rules::IGNORE_FILES.iter())
            .enumerate()
        {
            if let Some(files) = &seen {
                let layer_git = || {
                    dir.join_relative(".git")
                        .is_ok_and(|git| rules.plan.book.layer_dir(&git))
                };
                match &files[kind] {
                    Some(content) => {
                        *slot = crate::storage::backend::ignore_rules::matcher(root, content);
                        continue;
                    }
                    None if kind == 2 && layer_git() => {}
                    None => continue,
                }
            }
            if name.starts_with(".git/") {
                let git = dir.join_relative(".git")?;
                if !self
                    .stat(&git)
                    .await
                    .ok()
                    .flatten()
                    .is_some_and(|e| e.is_dir())
                {
                    continue;
                }
            }
            let file = dir.join_relative(name)?;
            if let Ok(BoundedRead::Whole(content)) = self
                .read_at_most(
                    &file,
                    crate::storage::backend::ignore_rules::MAX_IGNORE_FILE_BYTES,
                )
                .await
            {
                *slot = crate::storage::backend::ignore_rules::matcher(root, &content.content);
            }
        }
        let found: crate::storage::backend::ignore_rules::Matchers = Arc::new(found);
        rules.dirs.insert(dir.as_str().to_owned(), found.clone());
        Ok(found)
    }
}

/// The ignore matchers read through the view during one search, per directory.
pub(super) struct LayerIgnoreRules<'p> {
    dirs: std::collections::HashMap<String, crate::storage::backend::ignore_rules::Matchers>,
    /// The search: which directories its base walk read, and what their listings show.
    plan: &'p SearchPlan,
}
