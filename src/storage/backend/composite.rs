//! `CompositeBackend`: routes each call to the mount owning the path, longest prefix first, and
//! merges `ls`/`glob`/`grep` across every mount lying under the searched directory (CONTRACT §2).
//!
//! Mount prefixes are stripped on the way in and put back on the way out, in results and in
//! errors alike. A file of the owning backend that lies under a deeper mount's prefix is shadowed
//! by that mount and never reported. Read-only mounts refuse writes; mount roots cannot be
//! deleted, moved or overwritten. Ordering of merged answers is the tools' job.
//!
//! A search (`glob`, `grep`) over several mounts fails only when the mount owning the searched
//! path fails. A mount lying below it that fails (a store that cannot be reached, a directory it
//! may not read) is skipped and reported ([`SkippedMount`]; for `grep`, as a skipped entry named
//! by the mount's prefix), and the other mounts' results are returned (issue 17).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use async_trait::async_trait;

use super::overlay::OverlayBackend;
use super::{
    AsideFile, Backend, BoundedRead, DeleteOptions, Entry, Error, FileBytes, FileView, GlobQuery,
    GrepFile, GrepQuery, HostDir, KeepAside, LineWindow, Posix, Rename, RenameOptions, Renamed,
    Result, Router, Upload, Uploads, Version, WriteMode, WriteOutcome,
};
use crate::ground::path::VirtualPath;

/// One entry of the mount table.
#[derive(Debug, Clone)]
pub struct Mount {
    /// Where it is mounted (`/` or `/x/y`; shown as `/x/y/` to users).
    pub prefix: VirtualPath,
    /// The backend serving it.
    pub backend: Arc<dyn Backend>,
    /// Refuse writes and deletes.
    pub read_only: bool,
}

/// A mount below a searched directory that could not be searched, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedMount {
    /// Where it is mounted.
    pub prefix: VirtualPath,
    /// What failed (paths already in the composite's coordinates).
    pub error: Error,
}

impl SkippedMount {
    /// Why the mount was skipped, as answers show it after its prefix.
    pub fn reason(&self) -> String {
        format!("this mount could not be searched: {}", self.error)
    }

    /// The line an answer shows for it: `[skipped /x: this mount could not be searched: …]`.
    pub fn note(&self) -> String {
        format!("[skipped {}: {}]", self.prefix, self.reason())
    }
}

/// The router (see the module doc).
#[derive(Debug, Clone)]
pub struct CompositeBackend {
    /// Every mount, hidden ones included, sorted longest prefix first; the last one is `/`.
    routed: Vec<Mount>,
    /// The mount at `/` (also the last of `mounts`), which claims every path.
    root: Mount,
    /// The overlay mounts among `mounts` (prefix, overlay), for `changes`/`commit`/`discard`.
    overlays: Vec<(VirtualPath, Arc<OverlayBackend>)>,
    /// The mounts a principal's grants hide (issue 43): still routed to, so that their paths
    /// are nobody else's, but every path under them answers as one that does not exist, and
    /// they are never listed, searched or offered to `execute`.
    hidden: BTreeSet<VirtualPath>,
    /// `routed` without the hidden ones ([`Router::mounts`]).
    mounts: Vec<Mount>,
    /// The mounts read-only through a principal's grant, with the grant (named in refusals).
    read_only_grants: BTreeMap<VirtualPath, String>,
}

impl CompositeBackend {
    /// Builds the router. There is always a mount at `/`: when none is given, `fallback`
    /// supplies one. Duplicate prefixes are the caller's error (config checks them first);
    /// here the first one given wins.
    pub fn new(mut mounts: Vec<Mount>, fallback: impl FnOnce() -> Arc<dyn Backend>) -> Self {
        let mut seen = BTreeSet::new();
        mounts.retain(|m| seen.insert(m.prefix.clone()));
        let root = match mounts.iter().find(|m| m.prefix.is_root()) {
            Some(root) => root.clone(),
            None => {
                let root = Mount {
                    prefix: VirtualPath::root(),
                    backend: fallback(),
                    read_only: false,
                };
                mounts.push(root.clone());
                root
            }
        };
        mounts.sort_by_key(|m| std::cmp::Reverse(m.prefix.as_str().len()));
        Self {
            mounts: mounts.clone(),
            routed: mounts,
            root,
            overlays: Vec::new(),
            hidden: BTreeSet::new(),
            read_only_grants: BTreeMap::new(),
        }
    }

    /// The same router seen through a principal's grants (issue 43): the mounts at `hidden`
    /// answer as if nothing were there, and those of `read_only` (prefix → grant) refuse
    /// changes naming the grant. Their backends should already be harmless (the mount table
    /// gives a hidden mount an empty one): this keeps even their names out of every answer.
    pub fn with_grants(
        mut self,
        hidden: BTreeSet<VirtualPath>,
        read_only: BTreeMap<VirtualPath, String>,
    ) -> Self {
        self.mounts = self
            .routed
            .iter()
            .filter(|m| !hidden.contains(&m.prefix))
            .cloned()
            .collect();
        self.overlays.retain(|(prefix, _)| !hidden.contains(prefix));
        self.hidden = hidden;
        self.read_only_grants = read_only;
        self
    }

    /// Whether `mount` is hidden by the grants.
    fn is_hidden(&self, mount: &Mount) -> bool {
        !self.hidden.is_empty() && self.hidden.contains(&mount.prefix)
    }

    /// [`Router::route`] for a path that must exist: one under a hidden mount is not found.
    fn visible_route<'a>(&'a self, path: &VirtualPath) -> Result<(&'a Mount, VirtualPath)> {
        let (mount, inner) = self.route(path);
        if self.is_hidden(mount) {
            return Err(Error::NotFound { path: path.clone() });
        }
        Ok((mount, inner))
    }

    /// The same router, told which of its mounts are overlays (each also given as a mount's
    /// backend), so that the review tools can reach their layers.
    pub fn with_overlays(mut self, overlays: Vec<(VirtualPath, Arc<OverlayBackend>)>) -> Self {
        self.overlays = overlays;
        self.overlays
            .retain(|(prefix, _)| !self.hidden.contains(prefix));
        self
    }

    /// Mounts strictly below `dir` (not the owner of `dir` itself).
    fn mounts_below<'a>(&'a self, dir: &'a VirtualPath) -> impl Iterator<Item = &'a Mount> + 'a {
        self.mounts
            .iter()
            .filter(move |m| m.prefix != *dir && m.prefix.starts_with(dir) && !m.prefix.is_root())
    }

    /// Whether a path reported by `owner` is really served by a deeper mount.
    fn shadowed(&self, owner: &Mount, path: &VirtualPath) -> bool {
        self.routed.iter().any(|m| {
            m.prefix.as_str().len() > owner.prefix.as_str().len() && path.starts_with(&m.prefix)
        })
    }

    /// [`Router::route`] for a file: a mount root is a directory, never a file.
    fn file_route<'a>(&'a self, path: &VirtualPath) -> Result<(&'a Mount, VirtualPath)> {
        let (mount, inner) = self.visible_route(path)?;
        if inner.is_root() {
            return Err(Error::IsADirectory { path: path.clone() });
        }
        Ok((mount, inner))
    }

    /// [`CompositeBackend::writable`] for a path that is changed in place (written, deleted,
    /// set aside): never a mount root or a directory holding one.
    fn changeable<'a>(&'a self, path: &VirtualPath) -> Result<(&'a Mount, VirtualPath)> {
        if self.holds_mount_root(path) {
            return Err(Error::MountRoot { path: path.clone() });
        }
        self.writable(path)
    }

    fn writable<'a>(&'a self, path: &VirtualPath) -> Result<(&'a Mount, VirtualPath)> {
        let (mount, inner) = self.visible_route(path)?;
        if let Some(grant) = self.read_only_grants.get(&mount.prefix) {
            return Err(Error::GrantReadOnly {
                path: path.clone(),
                grant: grant.clone(),
            });
        }
        if mount.read_only {
            return Err(Error::ReadOnly { path: path.clone() });
        }
        Ok((mount, inner))
    }
}

/// A mount below a search that failed with `error`, logged and kept for the answer.
fn skip(mount: &Mount, error: Error) -> SkippedMount {
    let error = error.map_path(outward(&mount.prefix));
    tracing::warn!(mount = %mount.prefix, %error, "a mount below the searched path was skipped");
    SkippedMount {
        prefix: mount.prefix.clone(),
        error,
    }
}

fn outward(prefix: &VirtualPath) -> impl Fn(&VirtualPath) -> VirtualPath + '_ {
    move |p| p.under(prefix)
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl Router for CompositeBackend {
    fn mounts(&self) -> &[Mount] {
        &self.mounts
    }

    fn overlays(&self) -> &[(VirtualPath, Arc<OverlayBackend>)] {
        &self.overlays
    }

    fn route(&self, path: &VirtualPath) -> (&Mount, VirtualPath) {
        self.routed
            .iter()
            .find_map(|m| path.strip_prefix(&m.prefix).map(|inner| (m, inner)))
            .unwrap_or((&self.root, path.clone()))
    }

    fn check_writable(&self, path: &VirtualPath) -> Result<()> {
        self.writable(path).map(|_| ())
    }

    fn holds_mount_root(&self, path: &VirtualPath) -> bool {
        self.routed.iter().any(|m| m.prefix.starts_with(path))
    }

    async fn glob_noting(&self, query: &GlobQuery) -> Result<(Vec<Entry>, Vec<SkippedMount>)> {
        let (owner, inner) = self.route(&query.dir);
        let mut out = Vec::new();
        let mut skipped = Vec::new();
        let own = if self.is_hidden(owner) {
            if self.mounts_below(&query.dir).next().is_none() {
                return Err(Error::NotFound {
                    path: query.dir.clone(),
                });
            }
            Vec::new()
        } else {
            owner
                .backend
                .glob(&GlobQuery {
                    dir: inner,
                    matcher: query.matcher.clone(),
                    control: query.control.within_mount(&owner.prefix),
                })
                .await
                .map_err(|e| e.map_path(outward(&owner.prefix)))?
        };
        for mut entry in own {
            entry.path = entry.path.under(&owner.prefix);
            if !self.shadowed(owner, &entry.path) {
                out.push(entry);
            }
        }
        for below in self.mounts_below(&query.dir) {
            let rel = below.prefix.relative_to(&query.dir).unwrap_or_default();
            let found = below
                .backend
                .glob(&GlobQuery {
                    dir: VirtualPath::root(),
                    matcher: query.matcher.with_prefix(rel),
                    control: query.control.within_mount(&below.prefix),
                })
                .await;
            let found = match found {
                Ok(found) => found,
                Err(error) => {
                    skipped.push(skip(below, error));
                    continue;
                }
            };
            for mut entry in found {
                entry.path = entry.path.under(&below.prefix);
                if !self.shadowed(below, &entry.path) {
                    out.push(entry);
                }
            }
        }
        Ok((out, skipped))
    }
}

/// A mount's upload, its errors naming paths as the router shows them.
#[derive(Debug)]
struct RoutedUpload<'a> {
    upload: Box<dyn Upload + 'a>,
    prefix: &'a VirtualPath,
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl Upload for RoutedUpload<'_> {
    async fn append(&mut self, chunk: &[u8]) -> Result<()> {
        self.upload
            .append(chunk)
            .await
            .map_err(|e| e.map_path(outward(self.prefix)))
    }

    async fn finish(self: Box<Self>) -> Result<WriteOutcome> {
        let prefix = self.prefix;
        self.upload
            .finish()
            .await
            .map_err(|e| e.map_path(outward(prefix)))
    }

    async fn abort(self: Box<Self>) {
        self.upload.abort().await;
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl Backend for CompositeBackend {
    async fn stat(&self, path: &VirtualPath) -> Result<Option<Entry>> {
        let (mount, inner) = self.route(path);
        if self.is_hidden(mount) {
            return Ok(self
                .mounts_below(path)
                .next()
                .map(|_| Entry::directory(path.clone())));
        }
        let found = mount
            .backend
            .stat(&inner)
            .await
            .map_err(|e| e.map_path(outward(&mount.prefix)))?;
        if let Some(mut entry) = found {
            entry.path = path.clone();
            return Ok(Some(entry));
        }
        // An ancestor of a mount point exists as a directory even if its owner has nothing.
        if self.mounts_below(path).next().is_some() {
            return Ok(Some(Entry::directory(path.clone())));
        }
        Ok(None)
    }

    async fn ls(&self, dir: &VirtualPath) -> Result<Vec<Entry>> {
        let (mount, inner) = self.route(dir);
        let listed = if self.is_hidden(mount) {
            Err(Error::NotFound {
                path: inner.clone(),
            })
        } else {
            mount.backend.ls(&inner).await
        };
        let mut entries: Vec<Entry> = match listed {
            Ok(entries) => entries
                .into_iter()
                .map(|mut e| {
                    e.path = e.path.under(&mount.prefix);
                    e
                })
                .filter(|e| !self.shadowed(mount, &e.path))
                .collect(),
            Err(Error::NotFound { .. }) if self.mounts_below(dir).next().is_some() => Vec::new(),
            Err(e) => return Err(e.map_path(outward(&mount.prefix))),
        };
        if self.mounts_below(dir).next().is_none() {
            // The usual case: no mount point to add, no set of the names shown to build.
            return Ok(entries);
        }
        let mut shown: BTreeSet<VirtualPath> = entries.iter().map(|e| e.path.clone()).collect();
        for below in self.mounts_below(dir) {
            let Some(first) = below
                .prefix
                .relative_to(dir)
                .and_then(|rel| rel.split('/').next())
            else {
                continue;
            };
            let child = dir.join(first)?;
            if shown.insert(child.clone()) {
                entries.push(Entry::directory(child));
            }
        }
        Ok(entries)
    }

    async fn read(&self, path: &VirtualPath) -> Result<FileBytes> {
        let (mount, inner) = self.file_route(path)?;
        mount
            .backend
            .read(&inner)
            .await
            .map_err(|e| e.map_path(outward(&mount.prefix)))
    }

    async fn read_at_most(&self, path: &VirtualPath, max_bytes: u64) -> Result<BoundedRead> {
        let (mount, inner) = self.file_route(path)?;
        mount
            .backend
            .read_at_most(&inner, max_bytes)
            .await
            .map_err(|e| e.map_path(outward(&mount.prefix)))
    }

    async fn read_window(&self, path: &VirtualPath, window: LineWindow) -> Result<FileView> {
        let (mount, inner) = self.file_route(path)?;
        mount
            .backend
            .read_window(&inner, window)
            .await
            .map_err(|e| e.map_path(outward(&mount.prefix)))
    }

    async fn read_range(
        &self,
        path: &VirtualPath,
        offset: u64,
        len: usize,
        version: &Version,
    ) -> Result<Vec<u8>> {
        let (mount, inner) = self.file_route(path)?;
        mount
            .backend
            .read_range(&inner, offset, len, version)
            .await
            .map_err(|e| e.map_path(outward(&mount.prefix)))
    }

    async fn write(
        &self,
        path: &VirtualPath,
        content: &[u8],
        mode: WriteMode,
    ) -> Result<WriteOutcome> {
        let (mount, inner) = self.changeable(path)?;
        mount
            .backend
            .write(&inner, content, mode)
            .await
            .map_err(|e| e.map_path(outward(&mount.prefix)))
    }

    async fn delete(&self, path: &VirtualPath, options: &DeleteOptions) -> Result<()> {
        let (mount, inner) = self.changeable(path)?;
        mount
            .backend
            .delete(&inner, options)
            .await
            .map_err(|e| e.map_path(outward(&mount.prefix)))
    }

    /// Strict: a mount below that fails fails the call (the `glob` tool uses
    /// [`Router::glob_noting`] to skip it with a note instead).
    async fn glob(&self, query: &GlobQuery) -> Result<Vec<Entry>> {
        let (found, skipped) = self.glob_noting(query).await?;
        match skipped.into_iter().next() {
            Some(failed) => Err(failed.error),
            None => Ok(found),
        }
    }

    /// A mount below that fails is reported as a skipped entry named by its prefix (see the
    /// module doc); an error of the owner fails the call.
    async fn grep(&self, query: &GrepQuery) -> Result<Vec<GrepFile>> {
        let (owner, inner) = self.route(&query.dir);
        let mut out = Vec::new();
        let below: Vec<&Mount> = self.mounts_below(&query.dir).collect();
        // The owner's files under a mount below are dropped (shadowed): with a mount below,
        // every backend finds every file, none stops after the first ones the answer shows.
        let control = if below.is_empty() {
            query.control.clone()
        } else {
            query.control.every_file()
        };
        let own = if self.is_hidden(owner) {
            if below.is_empty() {
                return Err(Error::NotFound {
                    path: query.dir.clone(),
                });
            }
            Vec::new()
        } else {
            owner
                .backend
                .grep(&GrepQuery {
                    dir: inner,
                    control: control.within_mount(&owner.prefix),
                    ..query.clone()
                })
                .await
                .map_err(|e| e.map_path(outward(&owner.prefix)))?
        };
        for mut file in own {
            file.path = file.path.under(&owner.prefix);
            if !self.shadowed(owner, &file.path) {
                out.push(file);
            }
        }
        for below in below {
            if query.control.stopped() {
                break;
            }
            let rel = below.prefix.relative_to(&query.dir).unwrap_or_default();
            let found = below
                .backend
                .grep(&GrepQuery {
                    dir: VirtualPath::root(),
                    file_filter: query.file_filter.as_ref().map(|f| f.with_prefix(rel)),
                    control: control.within_mount(&below.prefix),
                    ..query.clone()
                })
                .await;
            let found = match found {
                Ok(found) => found,
                Err(error) => {
                    // Reported like a file left unsearched, named by the mount's prefix.
                    let skipped = skip(below, error);
                    out.push(GrepFile::skipped(skipped.prefix.clone(), skipped.reason()));
                    continue;
                }
            };
            for mut file in found {
                file.path = file.path.under(&below.prefix);
                if !self.shadowed(below, &file.path) {
                    out.push(file);
                }
            }
        }
        Ok(out)
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl KeepAside for CompositeBackend {
    async fn set_aside(&self, path: &VirtualPath, version: &Version) -> Result<Option<AsideFile>> {
        let (mount, inner) = self.changeable(path)?;
        mount
            .backend
            .set_aside(&inner, version)
            .await
            .map_err(|e| e.map_path(outward(&mount.prefix)))
    }

    async fn write_keeping_aside(
        &self,
        path: &VirtualPath,
        content: &[u8],
        version: &Version,
    ) -> Result<Option<(WriteOutcome, AsideFile)>> {
        let (mount, inner) = self.changeable(path)?;
        mount
            .backend
            .write_keeping_aside(&inner, content, version)
            .await
            .map_err(|e| e.map_path(outward(&mount.prefix)))
    }

    /// Within one mount: that mount's journal, paths in its coordinates; a change over
    /// several mounts is not journaled here (the change layer begins one per mount).
    async fn begin_changes(
        &self,
        files: &[super::PlannedFile],
        role: &super::JournalRole,
    ) -> Result<Option<Box<dyn super::ChangeJournal>>> {
        let Some(first) = files.first() else {
            return Ok(None);
        };
        // A file the mount refuses is left to the change itself, which says why.
        let Ok((mount, _)) = self.changeable(&first.path) else {
            return Ok(None);
        };
        let mut inner = Vec::with_capacity(files.len());
        for file in files {
            let Ok((owner, path)) = self.changeable(&file.path) else {
                return Ok(None);
            };
            if owner.prefix != mount.prefix {
                return Ok(None);
            }
            inner.push(super::PlannedFile {
                path,
                before: file.before.clone(),
            });
        }
        let prefix = mount.prefix.clone();
        mount
            .backend
            .begin_changes(&inner, role)
            .await
            .map_err(|e| e.map_path(|p| p.under(&prefix)))
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl Rename for CompositeBackend {
    /// Within one mount: that mount's rename. Across mounts: `Ok(None)` (the caller copies).
    async fn rename(
        &self,
        from: &VirtualPath,
        to: &VirtualPath,
        options: &RenameOptions,
    ) -> Result<Option<Renamed>> {
        for path in [from, to] {
            if self.holds_mount_root(path) {
                return Err(Error::MountRoot { path: path.clone() });
            }
        }
        let (source, inner_from) = self.writable(from)?;
        let (target, inner_to) = self.writable(to)?;
        if source.prefix != target.prefix {
            return Ok(None);
        }
        source
            .backend
            .rename(&inner_from, &inner_to, options)
            .await
            .map_err(|e| e.map_path(outward(&source.prefix)))
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl Posix for CompositeBackend {
    async fn permissions(&self, path: &VirtualPath) -> Result<Option<u32>> {
        let (mount, inner) = self.visible_route(path)?;
        mount
            .backend
            .permissions(&inner)
            .await
            .map_err(|e| e.map_path(outward(&mount.prefix)))
    }

    async fn set_permissions(&self, path: &VirtualPath, mode: u32) -> Result<Option<Version>> {
        let (mount, inner) = self.writable(path)?;
        mount
            .backend
            .set_permissions(&inner, mode)
            .await
            .map_err(|e| e.map_path(outward(&mount.prefix)))
    }

    async fn same_file(&self, a: &VirtualPath, b: &VirtualPath) -> Result<bool> {
        let ((mount_a, inner_a), (mount_b, inner_b)) = (self.route(a), self.route(b));
        if mount_a.prefix != mount_b.prefix || self.is_hidden(mount_a) {
            return Ok(false);
        }
        mount_a
            .backend
            .same_file(&inner_a, &inner_b)
            .await
            .map_err(|e| e.map_path(outward(&mount_a.prefix)))
    }

    async fn is_symlink(&self, path: &VirtualPath) -> Result<bool> {
        let (mount, inner) = self.route(path);
        if self.is_hidden(mount) {
            return Ok(false);
        }
        mount
            .backend
            .is_symlink(&inner)
            .await
            .map_err(|e| e.map_path(outward(&mount.prefix)))
    }
}

#[deny(clippy::missing_trait_methods)]
impl HostDir for CompositeBackend {
    /// None: the mounts have their own (`execute` asks each through [`Router::mounts`]).
    fn host_dir(&self) -> Option<&std::path::Path> {
        None
    }

    /// None: a shell mount below is found through [`Router::route`].
    fn shell(&self) -> Option<&super::ShellBackend> {
        None
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl Uploads for CompositeBackend {
    async fn check_upload_size(&self, path: &VirtualPath, size: u64) -> Result<()> {
        let (mount, inner) = self.file_route(path)?;
        mount
            .backend
            .check_upload_size(&inner, size)
            .await
            .map_err(|e| e.map_path(outward(&mount.prefix)))
    }

    async fn content_sha256(
        &self,
        path: &VirtualPath,
        version: &Version,
    ) -> Result<Option<String>> {
        let (mount, inner) = self.file_route(path)?;
        mount
            .backend
            .content_sha256(&inner, version)
            .await
            .map_err(|e| e.map_path(outward(&mount.prefix)))
    }

    async fn begin_upload(
        &self,
        path: &VirtualPath,
        mode: WriteMode,
    ) -> Result<Box<dyn Upload + '_>> {
        let (mount, inner) = self.changeable(path)?;
        let upload = mount
            .backend
            .begin_upload(&inner, mode)
            .await
            .map_err(|e| e.map_path(outward(&mount.prefix)))?;
        Ok(Box::new(RoutedUpload {
            upload,
            prefix: &mount.prefix,
        }))
    }
}
