//! `OverlayBackend`: a copy-on-write view of a base backend (a disk mount with `,overlay`) in
//! which every change goes to a layer that belongs to one workspace, and the base is never
//! written until `commit` (issue 14).
//!
//! The layer is two things: a files backend holding the content of every file the workspace
//! created or changed (a [`MemoryBackend`] in memory, or a [`StoreBackend`] namespace of a SQLite
//! file for `,overlay=sqlite:FILE`), and a book of **marks**, one per path the layer touched:
//! - `Changed`: the layer holds the file's content (it shadows the base file, if any);
//! - `Deleted`: the base file is hidden (a whiteout);
//! - an **opaque** directory: a base directory deleted as a whole, hidden with everything below.
//!
//! Each file mark remembers the base file's version when the layer first shadowed or hid it
//! (`None`: there was no base file), which is what `commit` checks for conflicts.
//!
//! Reads go to the layer for marked paths and to the base for the rest, so reading a big base
//! file through the overlay reads the base directly (nothing is copied). `glob`/`grep` run the
//! base's own search (streaming and bounded as the base does) and drop the hidden paths, then
//! add the layer's matches. The marks are held in memory (their number follows the changes made,
//! not the tree) and, with a SQLite layer, written through to a namespace of that file so the
//! layer survives restarts. Writes and deletes are serialised by one lock per overlay.
//!
//! `rename` moves layer files inside the layer (times kept) and copies base files into it
//! (leaving a whiteout at the old path). What the overlay does not do: contents are never kept
//! aside for undo (undo keeps them in memory within its budget); `set_permissions` changes
//! nothing (the mode stays the base's). Commands run by `execute` see the base directory
//! ([`Backend::host_dir`]), not the layer.
//!
//! The parts, each owning one thing: `book.rs` the marks (what the layer changed, hid, deleted
//! whole, shows again); `layer.rs` the layer's own store (marks written through to SQLite and
//! loaded back); `commit.rs` review and commit (`changes`, conflicts, the commit staged into
//! the base through its journal, put back or finished, `discard`); `search.rs` glob and grep
//! through the view; `moves.rs` rename through the view; this file the view itself (the
//! `Backend` every read and write goes through) and the overlay's state.
//!
//! [`Backend::host_dir`]: super::HostDir::host_dir

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use tokio::sync::OnceCell;

use super::{
    AsideFile, Backend, BoundedRead, ChangeJournal, DeleteOptions, Entry, Error, FileBytes,
    FileView, GlobQuery, GrepFile, GrepQuery, HostDir, JournalRole, KeepAside, LineWindow,
    PlannedFile, Posix, Rename, RenameOptions, Renamed, Result, Uploads, Version, WriteMode,
    WriteOutcome,
};
use crate::ground::path::VirtualPath;
use crate::ground::search::GlobMatcher;
use crate::storage::store::{ListQuery, ListStart, Namespace, PutCondition, Store};

mod book;
mod commit;
mod layer;
mod moves;
mod search;

use book::{Book, FILE_KEY, OPAQUE_KEY, OPAQUE_TEXT, SHOWN_KEY, dir_prefix};
pub use book::{Mark, MarkState};
pub use commit::{
    ChangeKind, CommitConflict, LayerChange, MAX_ROLLBACK_IN_MEMORY, Staged, StagedCommit,
};
use layer::{Persist, load_book};
use search::SearchFuture;

/// The overlay backend (see the module doc).
#[derive(Debug)]
pub struct OverlayBackend {
    base: Arc<dyn Backend>,
    layer: Arc<dyn Backend>,
    /// Replaced as a whole on change, so a search can hold a snapshot while the book moves on.
    book: Mutex<Arc<Book>>,
    /// Whether the base honours ignore files (not `no-ignore`): layer files are then filtered
    /// by them as disk files in the same place would be.
    ignore_files: bool,
    persist: Option<Persist>,
    loaded: OnceCell<()>,
    /// Serialises changes (write, delete, commit, discard) so that a mark and the layer's file
    /// always change together.
    changing: tokio::sync::Mutex<()>,
}

impl OverlayBackend {
    /// An overlay of `base` whose layer lives in memory.
    pub fn in_memory(base: Arc<dyn Backend>) -> Self {
        Self::with_layer(base, Arc::new(super::MemoryBackend::new()), None)
    }

    /// [`Self::in_memory`], the layer's contents counted against `account` (the workspace's
    /// memory quota): a write past it is refused before the layer or its marks change, and a
    /// commit or discard gives the bytes back as it empties the layer.
    pub fn in_memory_accounted(
        base: Arc<dyn Backend>,
        account: Arc<crate::ground::quota::MemoryAccount>,
    ) -> Self {
        Self::with_layer(
            base,
            Arc::new(super::MemoryBackend::accounted(account)),
            None,
        )
    }

    /// An overlay of `base` whose layer's files are in `files` (a store namespace) and whose
    /// marks are written through to `marks` of `store`, loaded on first use.
    pub fn persistent(
        base: Arc<dyn Backend>,
        store: Arc<dyn Store>,
        files: Namespace,
        marks: Namespace,
    ) -> Self {
        let layer = Arc::new(super::StoreBackend::new(store.clone(), files));
        Self::with_layer(
            base,
            layer,
            Some(Persist {
                store,
                namespace: marks,
            }),
        )
    }

    fn with_layer(
        base: Arc<dyn Backend>,
        layer: Arc<dyn Backend>,
        persist: Option<Persist>,
    ) -> Self {
        Self {
            base,
            layer,
            book: Mutex::new(Arc::new(Book::default())),
            ignore_files: true,
            persist,
            loaded: OnceCell::new(),
            changing: tokio::sync::Mutex::new(()),
        }
    }

    /// The same overlay over a base mounted with `no-ignore` when `no_ignore`: layer files are
    /// then never hidden by ignore files either.
    pub fn with_no_ignore(mut self, no_ignore: bool) -> Self {
        self.ignore_files = !no_ignore;
        self
    }

    /// The base backend.
    pub fn base(&self) -> &Arc<dyn Backend> {
        &self.base
    }

    fn lock_book(&self) -> MutexGuard<'_, Arc<Book>> {
        // Every update of the book is one insert or remove: a panic cannot half-update it.
        self.book.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The book, loaded from the layer's store on first use.
    async fn book(&self) -> Result<MutexGuard<'_, Arc<Book>>> {
        self.loaded
            .get_or_try_init(|| async {
                let Some(persist) = &self.persist else {
                    return Ok(());
                };
                let loaded = load_book(persist).await?;
                *self.lock_book() = Arc::new(loaded);
                Ok::<(), Error>(())
            })
            .await?;
        Ok(self.lock_book())
    }

    /// The paths shown again at or under `dir`.
    async fn shown_under(&self, dir: &VirtualPath) -> Result<Vec<VirtualPath>> {
        let book = self.book().await?;
        let prefix = dir_prefix(dir);
        book.shown
            .iter()
            .filter(|d| d.as_str() == dir.as_str() || d.starts_with(&prefix))
            .map(|d| Ok(VirtualPath::parse_raw(d)?))
            .collect()
    }

    /// The version of the base file at `path`, `None` when the base has no file there.
    async fn base_version(&self, path: &VirtualPath) -> Result<Option<Version>> {
        match self.base.stat(path).await? {
            Some(entry) if !entry.is_dir() => match self.base.read_at_most(path, 0).await? {
                BoundedRead::Whole(file) => Ok(Some(file.version)),
                BoundedRead::TooLarge { version, .. } => Ok(Some(version)),
            },
            _ => Ok(None),
        }
    }

    /// The version of the file the view shows at `path`: from the layer or the base, with
    /// whether it came from the base. `IsADirectory` for a directory.
    async fn current(&self, path: &VirtualPath) -> Result<Option<(Version, bool)>> {
        let (layer_file, layer_dir, hidden) = {
            let book = self.book().await?;
            (
                book.layer_file(path),
                book.layer_dir(path),
                book.base_hidden(path),
            )
        };
        if layer_file {
            return Ok(Some((
                version_of(self.layer.read_at_most(path, 0).await?),
                false,
            )));
        }
        if layer_dir || path.is_root() {
            return Err(Error::IsADirectory { path: path.clone() });
        }
        if hidden {
            return Ok(None);
        }
        match self.base.stat(path).await? {
            Some(entry) if entry.is_dir() => Err(Error::IsADirectory { path: path.clone() }),
            Some(_) => Ok(Some((
                version_of(self.base.read_at_most(path, 0).await?),
                true,
            ))),
            None => Ok(None),
        }
    }

    /// Refuses a new file at `path` whose parent directories the view shows as a file.
    async fn check_parents(&self, path: &VirtualPath) -> Result<()> {
        let mut at = path.parent();
        while let Some(dir) = at {
            if dir.is_root() {
                return Ok(());
            }
            let (layer_file, layer_dir, hidden) = {
                let book = self.book().await?;
                (
                    book.layer_file(&dir),
                    book.layer_dir(&dir),
                    book.base_hidden(&dir),
                )
            };
            if layer_file {
                return Err(Error::NotADirectory { path: dir });
            }
            if layer_dir {
                return Ok(());
            }
            if !hidden {
                match self.base.stat(&dir).await? {
                    Some(entry) if entry.is_dir() => return Ok(()),
                    Some(_) => return Err(Error::NotADirectory { path: dir }),
                    None => {}
                }
            }
            at = dir.parent();
        }
        Ok(())
    }

    /// The files the view shows below `dir`, each with whether it is the layer's.
    async fn files_below(&self, dir: &VirtualPath) -> Result<Vec<(VirtualPath, bool)>> {
        let shown = self.book().await?.base_partly_shown(dir);
        let mut out = Vec::new();
        if shown && self.base.stat(dir).await?.is_some_and(|e| e.is_dir()) {
            let query = GlobQuery {
                dir: dir.clone(),
                matcher: GlobMatcher::new("*").map_err(|e| Error::Unavailable {
                    message: e.to_string(),
                })?,
                control: super::SearchControl::default(),
            };
            let found = self.base.glob(&query).await?;
            let book = self.book().await?;
            out.extend(
                found
                    .into_iter()
                    .filter(|e| !book.base_hidden(&e.path))
                    .map(|e| (e.path, false)),
            );
        }
        let book = self.book().await?;
        for (key, mark) in book.marks_under(dir) {
            if mark.state == MarkState::Changed && key != dir.as_str() {
                out.push((VirtualPath::parse_raw(key)?, true));
            }
        }
        Ok(out)
    }

    /// The layer's content of a changed file (what the agent sees).
    pub async fn layer_read_at_most(&self, path: &VirtualPath, max: u64) -> Result<BoundedRead> {
        self.layer.read_at_most(path, max).await
    }

    /// The base's content of a file (what `commit` would replace).
    pub async fn base_read_at_most(&self, path: &VirtualPath, max: u64) -> Result<BoundedRead> {
        self.base.read_at_most(path, max).await
    }
}

/// The version a bounded read found.
fn version_of(read: BoundedRead) -> Version {
    match read {
        BoundedRead::Whole(file) => file.version,
        BoundedRead::TooLarge { version, .. } => version,
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl Backend for OverlayBackend {
    async fn stat(&self, path: &VirtualPath) -> Result<Option<Entry>> {
        super::refuse_reserved(path)?;
        let (layer_file, layer_dir, hidden) = {
            let book = self.book().await?;
            (
                book.layer_file(path),
                book.layer_dir(path),
                !book.base_partly_shown(path),
            )
        };
        if layer_file {
            return self.layer.stat(path).await;
        }
        if hidden {
            return Ok((layer_dir || path.is_root()).then(|| Entry::directory(path.clone())));
        }
        match self.base.stat(path).await? {
            Some(entry) if entry.is_dir() || !layer_dir => Ok(Some(entry)),
            _ if layer_dir => Ok(Some(Entry::directory(path.clone()))),
            other => Ok(other),
        }
    }

    async fn ls(&self, dir: &VirtualPath) -> Result<Vec<Entry>> {
        super::refuse_reserved(dir)?;
        match self.stat(dir).await? {
            None => return Err(Error::NotFound { path: dir.clone() }),
            Some(entry) if !entry.is_dir() => {
                return Err(Error::NotADirectory { path: dir.clone() });
            }
            Some(_) => {}
        }
        let (hidden, layer_dir) = {
            let book = self.book().await?;
            (!book.base_partly_shown(dir), book.layer_dir(dir))
        };
        let mut entries: BTreeMap<String, Entry> = BTreeMap::new();
        if !hidden && self.base.stat(dir).await?.is_some_and(|e| e.is_dir()) {
            let listed = self.base.ls(dir).await?;
            let book = self.book().await?;
            for entry in listed {
                if book.base_partly_shown(&entry.path) {
                    entries.insert(entry.path.as_str().to_owned(), entry);
                }
            }
        }
        if layer_dir {
            for entry in self.layer.ls(dir).await? {
                match entries.get(entry.path.as_str()) {
                    Some(base) if base.is_dir() && entry.is_dir() => {}
                    _ => {
                        entries.insert(entry.path.as_str().to_owned(), entry);
                    }
                }
            }
        }
        Ok(entries.into_values().collect())
    }

    async fn read(&self, path: &VirtualPath) -> Result<FileBytes> {
        super::refuse_reserved(path)?;
        if self.book().await?.routes_to_layer(path) {
            self.layer.read(path).await
        } else {
            self.base.read(path).await
        }
    }

    async fn read_at_most(&self, path: &VirtualPath, max_bytes: u64) -> Result<BoundedRead> {
        super::refuse_reserved(path)?;
        if self.book().await?.routes_to_layer(path) {
            self.layer.read_at_most(path, max_bytes).await
        } else {
            self.base.read_at_most(path, max_bytes).await
        }
    }

    async fn read_window(&self, path: &VirtualPath, window: LineWindow) -> Result<FileView> {
        super::refuse_reserved(path)?;
        if self.book().await?.routes_to_layer(path) {
            self.layer.read_window(path, window).await
        } else {
            self.base.read_window(path, window).await
        }
    }

    async fn read_range(
        &self,
        path: &VirtualPath,
        offset: u64,
        len: usize,
        version: &Version,
    ) -> Result<Vec<u8>> {
        super::refuse_reserved(path)?;
        if self.book().await?.routes_to_layer(path) {
            self.layer.read_range(path, offset, len, version).await
        } else {
            self.base.read_range(path, offset, len, version).await
        }
    }

    async fn write(
        &self,
        path: &VirtualPath,
        content: &[u8],
        mode: WriteMode,
    ) -> Result<WriteOutcome> {
        super::refuse_reserved(path)?;
        let _changing = self.changing.lock().await;
        let current = self.current(path).await?;
        match (&mode, &current) {
            (WriteMode::CreateOnly, Some(_)) => {
                return Err(Error::AlreadyExists { path: path.clone() });
            }
            (WriteMode::IfVersion(expected), Some((version, _))) if version != expected => {
                return Err(Error::VersionMismatch { path: path.clone() });
            }
            (WriteMode::IfVersion(_), None) => {
                return Err(Error::VersionMismatch { path: path.clone() });
            }
            _ => {}
        }
        self.check_parents(path).await?;
        let outcome = self
            .layer
            .write(path, content, WriteMode::Overwrite)
            .await?;
        let base = match self.book().await?.mark(path) {
            Some(mark) => mark.base.clone(),
            None => match &current {
                Some((version, true)) => Some(version.clone()),
                _ => None,
            },
        };
        let mark = Mark {
            state: MarkState::Changed,
            base,
        };
        self.save_mark(path, Some(mark)).await?;
        Ok(WriteOutcome {
            version: outcome.version,
            created: current.is_none(),
        })
    }

    async fn delete(&self, path: &VirtualPath, options: &DeleteOptions) -> Result<()> {
        super::refuse_reserved(path)?;
        let _changing = self.changing.lock().await;
        let Some(entry) = self.stat(path).await? else {
            return Err(Error::NotFound { path: path.clone() });
        };
        if !entry.is_dir() {
            let Some((version, from_base)) = self.current(path).await? else {
                return Err(Error::NotFound { path: path.clone() });
            };
            if options.if_version.as_ref().is_some_and(|v| *v != version) {
                return Err(Error::VersionMismatch { path: path.clone() });
            }
            return self.hide_file(path, version, from_base).await;
        }
        let files = self.files_below(path).await?;
        if !files.is_empty() && !options.recursive {
            return Err(Error::DirectoryNotEmpty { path: path.clone() });
        }
        for (file, in_layer) in files {
            let version = if in_layer {
                version_of(self.layer.read_at_most(&file, 0).await?)
            } else {
                version_of(self.base.read_at_most(&file, 0).await?)
            };
            self.hide_file(&file, version, !in_layer).await?;
        }
        let base_dir = {
            let shown = self.book().await?.base_partly_shown(path);
            shown && self.base.stat(path).await?.is_some_and(|e| e.is_dir())
        };
        if base_dir {
            self.save_opaque(path, true).await?;
        }
        Ok(())
    }

    async fn glob(&self, query: &GlobQuery) -> Result<Vec<Entry>> {
        let search = |backend: &Arc<dyn Backend>, control| -> SearchFuture<'_, Entry> {
            let backend = backend.clone();
            Box::pin(async move {
                backend
                    .glob(&GlobQuery {
                        control,
                        ..query.clone()
                    })
                    .await
            })
        };
        self.search_view(&query.dir, &query.control, search, |e| &e.path)
            .await
    }

    async fn grep(&self, query: &GrepQuery) -> Result<Vec<GrepFile>> {
        let search = |backend: &Arc<dyn Backend>, control| -> SearchFuture<'_, GrepFile> {
            let backend = backend.clone();
            Box::pin(async move {
                backend
                    .grep(&GrepQuery {
                        control,
                        ..query.clone()
                    })
                    .await
            })
        };
        self.search_view(&query.dir, &query.control, search, |f| &f.path)
            .await
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl KeepAside for OverlayBackend {
    async fn set_aside(
        &self,
        _path: &VirtualPath,
        _version: &Version,
    ) -> Result<Option<AsideFile>> {
        // The layer keeps no content outside memory: undo keeps the earlier content itself.
        Ok(None)
    }

    async fn write_keeping_aside(
        &self,
        _path: &VirtualPath,
        _content: &[u8],
        _version: &Version,
    ) -> Result<Option<(WriteOutcome, AsideFile)>> {
        Ok(None)
    }

    /// Changes go to the layer, file by file; a commit journals its base itself (`stage_commit`).
    async fn begin_changes(
        &self,
        _files: &[super::PlannedFile],
        _role: &super::JournalRole,
    ) -> Result<Option<Box<dyn super::ChangeJournal>>> {
        Ok(None)
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl Rename for OverlayBackend {
    async fn rename(
        &self,
        from: &VirtualPath,
        to: &VirtualPath,
        options: &RenameOptions,
    ) -> Result<Option<Renamed>> {
        super::refuse_reserved(from)?;
        super::refuse_reserved(to)?;
        let _changing = self.changing.lock().await;
        if from.is_root() {
            return Err(Error::MountRoot { path: from.clone() });
        }
        if to.is_root() {
            return Err(Error::MountRoot { path: to.clone() });
        }
        let Some(source) = self.stat(from).await? else {
            return Err(Error::NotFound { path: from.clone() });
        };
        if to.starts_with(from) {
            return Err(Error::Unsupported {
                path: to.clone(),
                reason: format!("it lies inside {from}; a directory cannot be moved into itself"),
            });
        }
        let source_version = if source.is_dir() {
            None
        } else {
            self.current(from).await?
        };
        if let Some(expected) = &options.if_version
            && source_version.as_ref().is_none_or(|(v, _)| v != expected)
        {
            return Err(Error::VersionMismatch { path: from.clone() });
        }
        let destination = match self.stat(to).await? {
            Some(entry) if entry.is_dir() => return Err(Error::IsADirectory { path: to.clone() }),
            Some(_) => self.current(to).await?,
            None => None,
        };
        self.check_parents(to).await?;
        match (&destination, &options.replacing) {
            (None, None) => {}
            (None, Some(_)) => return Err(Error::VersionMismatch { path: to.clone() }),
            (Some(_), None) => return Err(Error::AlreadyExists { path: to.clone() }),
            (Some(_), Some(_)) if source.is_dir() => {
                return Err(Error::AlreadyExists { path: to.clone() });
            }
            (Some((existing, _)), Some(expected)) if existing != expected => {
                return Err(Error::VersionMismatch { path: to.clone() });
            }
            (Some(_), Some(_)) => {}
        }
        if let Some((version, from_base)) = source_version {
            let version = self
                .move_file(from, to, version, from_base, destination)
                .await?;
            return Ok(Some(Renamed {
                kind: super::EntryKind::File,
                version: Some(version),
            }));
        }
        let base_dir = {
            let shown = self.book().await?.base_partly_shown(from);
            shown && self.base.stat(from).await?.is_some_and(|e| e.is_dir())
        };
        for (file, in_layer) in self.files_below(from).await? {
            let Some(relative) = file.relative_to(from) else {
                continue;
            };
            let target = to.join_relative(relative)?;
            let version = if in_layer {
                version_of(self.layer.read_at_most(&file, 0).await?)
            } else {
                version_of(self.base.read_at_most(&file, 0).await?)
            };
            let replaced = self.current(&target).await?;
            self.move_file(&file, &target, version, !in_layer, replaced)
                .await?;
        }
        if base_dir {
            self.save_opaque(from, true).await?;
        }
        Ok(Some(Renamed {
            kind: super::EntryKind::Directory,
            version: None,
        }))
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl Posix for OverlayBackend {
    async fn permissions(&self, path: &VirtualPath) -> Result<Option<u32>> {
        if self.book().await?.routes_to_layer(path) {
            return Ok(None);
        }
        self.base.permissions(path).await
    }

    async fn set_permissions(&self, _path: &VirtualPath, _mode: u32) -> Result<Option<Version>> {
        // The base is never written before commit; a committed file keeps the base's mode.
        Ok(None)
    }

    async fn same_file(&self, a: &VirtualPath, b: &VirtualPath) -> Result<bool> {
        let layered = {
            let book = self.book().await?;
            book.routes_to_layer(a) || book.routes_to_layer(b)
        };
        if layered {
            return Ok(a == b);
        }
        self.base.same_file(a, b).await
    }

    async fn is_symlink(&self, path: &VirtualPath) -> Result<bool> {
        if self.book().await?.routes_to_layer(path) {
            return Ok(false);
        }
        self.base.is_symlink(path).await
    }
}

#[deny(clippy::missing_trait_methods)]
impl HostDir for OverlayBackend {
    /// None: a command run on a shell target would not see the layer's changes.
    fn shell(&self) -> Option<&crate::storage::backend::ShellBackend> {
        None
    }

    fn host_dir(&self) -> Option<&std::path::Path> {
        // `execute` runs in the base directory: its commands see the base, not the layer.
        self.base.host_dir()
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl Uploads for OverlayBackend {
    async fn content_sha256(
        &self,
        path: &VirtualPath,
        version: &Version,
    ) -> Result<Option<String>> {
        if self.book().await?.routes_to_layer(path) {
            self.layer.content_sha256(path, version).await
        } else {
            self.base.content_sha256(path, version).await
        }
    }

    /// No file is streamed into an overlay (see `begin_upload`): no limit to check here.
    async fn check_upload_size(&self, _path: &VirtualPath, _size: u64) -> Result<()> {
        Ok(())
    }

    /// Changes go to the layer whole (the layer may be memory), and are reviewed before a
    /// commit: no file is streamed into an overlay.
    async fn begin_upload(
        &self,
        path: &VirtualPath,
        _mode: WriteMode,
    ) -> Result<Box<dyn super::Upload + '_>> {
        super::refuse_reserved(path)?;
        Err(Error::Unsupported {
            path: path.clone(),
            reason: "an overlay mount keeps changes in its layer until they are committed; it takes whole writes only, not a file streamed piece by piece".to_owned(),
        })
    }
}
