//! The forwarding test double: [`Forward`] wraps an `Arc<dyn Backend>` and answers every method
//! of every backend trait through the hooks of an [`Intercept`], whose defaults forward to the
//! inner backend; a double (a backend that fails on purpose, say) overrides only what it changes.

use std::fmt;
use std::ops::Deref;
use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use mountfs::ground::path::VirtualPath;
use mountfs::storage::backend::{
    AsideFile, Backend, BoundedRead, ChangeJournal, DeleteOptions, Entry, FileBytes, FileView,
    GlobQuery, GrepFile, GrepQuery, HostDir, JournalRole, KeepAside, LineWindow, PlannedFile,
    Posix, Rename, RenameOptions, Renamed, Result, ShellBackend, Upload, Uploads, Version,
    WriteMode, WriteOutcome,
};

/// The hooks of a [`Forward`], one a backend method, each given the inner backend: by default
/// each forwards the call to it unchanged.
#[async_trait]
pub trait Intercept: Send + Sync + fmt::Debug {
    async fn stat(&self, inner: &dyn Backend, path: &VirtualPath) -> Result<Option<Entry>> {
        inner.stat(path).await
    }

    async fn ls(&self, inner: &dyn Backend, dir: &VirtualPath) -> Result<Vec<Entry>> {
        inner.ls(dir).await
    }

    async fn read(&self, inner: &dyn Backend, path: &VirtualPath) -> Result<FileBytes> {
        inner.read(path).await
    }

    async fn read_at_most(
        &self,
        inner: &dyn Backend,
        path: &VirtualPath,
        max_bytes: u64,
    ) -> Result<BoundedRead> {
        inner.read_at_most(path, max_bytes).await
    }

    async fn read_range(
        &self,
        inner: &dyn Backend,
        path: &VirtualPath,
        offset: u64,
        len: usize,
        version: &Version,
    ) -> Result<Vec<u8>> {
        inner.read_range(path, offset, len, version).await
    }

    async fn read_window(
        &self,
        inner: &dyn Backend,
        path: &VirtualPath,
        window: LineWindow,
    ) -> Result<FileView> {
        inner.read_window(path, window).await
    }

    async fn write(
        &self,
        inner: &dyn Backend,
        path: &VirtualPath,
        content: &[u8],
        mode: WriteMode,
    ) -> Result<WriteOutcome> {
        inner.write(path, content, mode).await
    }

    async fn delete(
        &self,
        inner: &dyn Backend,
        path: &VirtualPath,
        options: &DeleteOptions,
    ) -> Result<()> {
        inner.delete(path, options).await
    }

    async fn glob(&self, inner: &dyn Backend, query: &GlobQuery) -> Result<Vec<Entry>> {
        inner.glob(query).await
    }

    async fn grep(&self, inner: &dyn Backend, query: &GrepQuery) -> Result<Vec<GrepFile>> {
        inner.grep(query).await
    }

    async fn set_aside(
        &self,
        inner: &dyn Backend,
        path: &VirtualPath,
        version: &Version,
    ) -> Result<Option<AsideFile>> {
        inner.set_aside(path, version).await
    }

    async fn write_keeping_aside(
        &self,
        inner: &dyn Backend,
        path: &VirtualPath,
        content: &[u8],
        version: &Version,
    ) -> Result<Option<(WriteOutcome, AsideFile)>> {
        inner.write_keeping_aside(path, content, version).await
    }

    async fn begin_changes(
        &self,
        inner: &dyn Backend,
        files: &[PlannedFile],
        role: &JournalRole,
    ) -> Result<Option<Box<dyn ChangeJournal>>> {
        inner.begin_changes(files, role).await
    }

    async fn rename(
        &self,
        inner: &dyn Backend,
        from: &VirtualPath,
        to: &VirtualPath,
        options: &RenameOptions,
    ) -> Result<Option<Renamed>> {
        inner.rename(from, to, options).await
    }

    async fn permissions(&self, inner: &dyn Backend, path: &VirtualPath) -> Result<Option<u32>> {
        inner.permissions(path).await
    }

    async fn set_permissions(
        &self,
        inner: &dyn Backend,
        path: &VirtualPath,
        mode: u32,
    ) -> Result<Option<Version>> {
        inner.set_permissions(path, mode).await
    }

    async fn same_file(
        &self,
        inner: &dyn Backend,
        a: &VirtualPath,
        b: &VirtualPath,
    ) -> Result<bool> {
        inner.same_file(a, b).await
    }

    async fn is_symlink(&self, inner: &dyn Backend, path: &VirtualPath) -> Result<bool> {
        inner.is_symlink(path).await
    }

    fn host_dir<'a>(&'a self, inner: &'a dyn Backend) -> Option<&'a Path> {
        inner.host_dir()
    }

    fn shell<'a>(&'a self, inner: &'a dyn Backend) -> Option<&'a ShellBackend> {
        inner.shell()
    }

    async fn content_sha256(
        &self,
        inner: &dyn Backend,
        path: &VirtualPath,
        version: &Version,
    ) -> Result<Option<String>> {
        inner.content_sha256(path, version).await
    }

    async fn check_upload_size(
        &self,
        inner: &dyn Backend,
        path: &VirtualPath,
        size: u64,
    ) -> Result<()> {
        inner.check_upload_size(path, size).await
    }

    async fn begin_upload<'a>(
        &'a self,
        inner: &'a dyn Backend,
        path: &VirtualPath,
        mode: WriteMode,
    ) -> Result<Box<dyn Upload + 'a>> {
        inner.begin_upload(path, mode).await
    }
}

/// A backend that answers through `hooks` over `inner` (see the module doc). Derefs to its
/// hooks, so a test reaches the double's switches and counters directly.
#[derive(Debug)]
pub struct Forward<I> {
    pub inner: Arc<dyn Backend>,
    pub hooks: I,
}

impl<I: Intercept> Forward<I> {
    pub fn new(inner: Arc<dyn Backend>, hooks: I) -> Self {
        Self { inner, hooks }
    }
}

impl<I> Deref for Forward<I> {
    type Target = I;

    fn deref(&self) -> &I {
        &self.hooks
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl<I: Intercept> Backend for Forward<I> {
    async fn stat(&self, path: &VirtualPath) -> Result<Option<Entry>> {
        self.hooks.stat(&*self.inner, path).await
    }

    async fn ls(&self, dir: &VirtualPath) -> Result<Vec<Entry>> {
        self.hooks.ls(&*self.inner, dir).await
    }

    async fn read(&self, path: &VirtualPath) -> Result<FileBytes> {
        self.hooks.read(&*self.inner, path).await
    }

    async fn read_at_most(&self, path: &VirtualPath, max_bytes: u64) -> Result<BoundedRead> {
        self.hooks.read_at_most(&*self.inner, path, max_bytes).await
    }

    async fn read_range(
        &self,
        path: &VirtualPath,
        offset: u64,
        len: usize,
        version: &Version,
    ) -> Result<Vec<u8>> {
        self.hooks
            .read_range(&*self.inner, path, offset, len, version)
            .await
    }

    async fn read_window(&self, path: &VirtualPath, window: LineWindow) -> Result<FileView> {
        self.hooks.read_window(&*self.inner, path, window).await
    }

    async fn write(
        &self,
        path: &VirtualPath,
        content: &[u8],
        mode: WriteMode,
    ) -> Result<WriteOutcome> {
        self.hooks.write(&*self.inner, path, content, mode).await
    }

    async fn delete(&self, path: &VirtualPath, options: &DeleteOptions) -> Result<()> {
        self.hooks.delete(&*self.inner, path, options).await
    }

    async fn glob(&self, query: &GlobQuery) -> Result<Vec<Entry>> {
        self.hooks.glob(&*self.inner, query).await
    }

    async fn grep(&self, query: &GrepQuery) -> Result<Vec<GrepFile>> {
        self.hooks.grep(&*self.inner, query).await
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl<I: Intercept> KeepAside for Forward<I> {
    async fn set_aside(&self, path: &VirtualPath, version: &Version) -> Result<Option<AsideFile>> {
        self.hooks.set_aside(&*self.inner, path, version).await
    }

    async fn write_keeping_aside(
        &self,
        path: &VirtualPath,
        content: &[u8],
        version: &Version,
    ) -> Result<Option<(WriteOutcome, AsideFile)>> {
        self.hooks
            .write_keeping_aside(&*self.inner, path, content, version)
            .await
    }

    async fn begin_changes(
        &self,
        files: &[PlannedFile],
        role: &JournalRole,
    ) -> Result<Option<Box<dyn ChangeJournal>>> {
        self.hooks.begin_changes(&*self.inner, files, role).await
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl<I: Intercept> Rename for Forward<I> {
    async fn rename(
        &self,
        from: &VirtualPath,
        to: &VirtualPath,
        options: &RenameOptions,
    ) -> Result<Option<Renamed>> {
        self.hooks.rename(&*self.inner, from, to, options).await
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl<I: Intercept> Posix for Forward<I> {
    async fn permissions(&self, path: &VirtualPath) -> Result<Option<u32>> {
        self.hooks.permissions(&*self.inner, path).await
    }

    async fn set_permissions(&self, path: &VirtualPath, mode: u32) -> Result<Option<Version>> {
        self.hooks.set_permissions(&*self.inner, path, mode).await
    }

    async fn same_file(&self, a: &VirtualPath, b: &VirtualPath) -> Result<bool> {
        self.hooks.same_file(&*self.inner, a, b).await
    }

    async fn is_symlink(&self, path: &VirtualPath) -> Result<bool> {
        self.hooks.is_symlink(&*self.inner, path).await
    }
}

#[deny(clippy::missing_trait_methods)]
impl<I: Intercept> HostDir for Forward<I> {
    fn host_dir(&self) -> Option<&Path> {
        self.hooks.host_dir(&*self.inner)
    }

    fn shell(&self) -> Option<&ShellBackend> {
        self.hooks.shell(&*self.inner)
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl<I: Intercept> Uploads for Forward<I> {
    async fn content_sha256(
        &self,
        path: &VirtualPath,
        version: &Version,
    ) -> Result<Option<String>> {
        self.hooks.content_sha256(&*self.inner, path, version).await
    }

    async fn check_upload_size(&self, path: &VirtualPath, size: u64) -> Result<()> {
        self.hooks.check_upload_size(&*self.inner, path, size).await
    }

    async fn begin_upload(
        &self,
        path: &VirtualPath,
        mode: WriteMode,
    ) -> Result<Box<dyn Upload + '_>> {
        self.hooks.begin_upload(&*self.inner, path, mode).await
    }
}
