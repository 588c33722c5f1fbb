//! `ObjectBackend`: the files of an object mount are the keys under a bucket prefix of S3, GCS
//! or Azure, through Apache's `object_store` (CONTRACT §3, issue 44). One implementation for the
//! three clouds; this file holds the [`Backend`] answers and leaves each concern to a part:
//! - `keys`: the key of a path and back, the mount's containment;
//! - `version`: versions are the store's ETag (and generation), never a hash we compute;
//! - `listing`: directories are key prefixes, `ls` by delimiter listing, `glob` by a streamed
//!   listing of the prefix;
//! - `window`: `read_file` windows of big objects by ranged GETs, in bounded memory;
//! - `search`: `grep` lists and reads with bounded concurrency and bytes in flight;
//! - `upload`: writes piece by piece, by multipart upload above a threshold;
//! - `error`: what a store failure becomes (one line, the mount unavailable, others serve);
//! - `connect`: the client from the cloud's environment.
//!
//! Every write is conditional at the store: create is `PutMode::Create` (`If-None-Match: *`),
//! a change of a file read earlier is `PutMode::Update` on the ETag read (`If-Match`), so a
//! change made by anyone else in between — another mountfs server, another S3 client — is the
//! contract's "modified since it was read", never overwritten. What the store cannot condition
//! through `object_store` 0.14 is said where it happens: a delete checks the version by a HEAD
//! just before an unconditional DELETE (the library has no conditional delete); a multipart
//! upload checks its condition before completing (the library completes unconditionally).
//!
//! Directories are implicit (there is no empty directory in a bucket: a directory exists while
//! a key lies under it); a "folder marker" key ending in `/` written by another client is never
//! shown as a file. `move` is copy then delete: not atomic, a crash between leaves both, never
//! neither (the source is deleted only after the copy stands).

mod connect;
mod error;
mod keys;
mod listing;
mod search;
mod upload;
mod version;
mod window;

use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

use async_trait::async_trait;
use object_store::path::Path;
use object_store::{
    GetOptions, GetRange, ObjectMeta, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload,
};

pub use connect::{connect, retry_config, s3_builder};
pub use keys::{KeyPrefix, KeyPrefixError};

use super::key_shape;
use super::{
    Backend, BoundedRead, DeleteOptions, Entry, EntryKind, Error, FileBytes, FileView, GlobQuery,
    GrepFile, GrepQuery, HostDir, KeepAside, LineWindow, Posix, Rename, RenameOptions, Renamed,
    Result, Upload, Uploads, Version, WriteMode, WriteOutcome,
};
use crate::ground::config::ObjectSpec;
use crate::ground::path::VirtualPath;

/// Objects up to this size are read whole for a line window (one GET); bigger ones stream by
/// ranged GETs (`window`).
const WHOLE_READ_BYTES: u64 = 8 * 1024 * 1024;
/// A file moved within the mount up to this size is read and put again under the move's
/// conditions (`If-None-Match: *` / `If-Match` at the destination); a bigger one is copied by
/// the store itself after the same checks by HEAD.
const CONDITIONAL_COPY_BYTES: u64 = 16 * 1024 * 1024;

/// The files under one bucket prefix (see the module doc).
#[derive(Clone)]
pub struct ObjectBackend {
    store: Arc<dyn ObjectStore>,
    prefix: KeyPrefix,
    /// `s3://bucket/prefix`, as errors name the mount.
    url: String,
}

/// Shows only the mount's URL: the client's own `Debug` may hold credentials.
impl fmt::Debug for ObjectBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectBackend")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl ObjectBackend {
    /// A backend over `store`, serving the keys under `prefix`; `url` names it in errors.
    pub fn new(store: Arc<dyn ObjectStore>, prefix: KeyPrefix, url: impl Into<String>) -> Self {
        Self {
            store,
            prefix,
            url: url.into(),
        }
    }

    /// The backend of a mount spec, its client configured from the environment (see
    /// `connect`). Fails only on a configuration the client refuses; nothing is contacted.
    pub fn open(spec: &ObjectSpec) -> std::result::Result<Self, String> {
        let prefix = KeyPrefix::parse(&spec.key_prefix).map_err(|e| e.to_string())?;
        let store = connect(spec)?;
        Ok(Self::new(store, prefix, spec.url()))
    }

    /// `mountfs check`'s look: lists one key under the prefix, so that a missing bucket, wrong
    /// credentials or an unreachable endpoint are told now.
    pub async fn probe(&self) -> Result<()> {
        self.has_children(&VirtualPath::root()).await.map(|_| ())
    }

    fn fail(&self, path: &VirtualPath, error: object_store::Error) -> Error {
        error::failure(&self.url, path, error)
    }

    fn key(&self, path: &VirtualPath) -> Result<Path> {
        self.prefix.key_of(path)
    }

    /// The object at `path`, `None` if there is none (the mount root never is one).
    async fn head(&self, path: &VirtualPath) -> Result<Option<ObjectMeta>> {
        if path.is_root() {
            return Ok(None);
        }
        match self.store.head(&self.key(path)?).await {
            Ok(meta) => Ok(Some(meta)),
            Err(object_store::Error::NotFound { source, .. })
                if !source.to_string().contains("NoSuchBucket") =>
            {
                Ok(None)
            }
            Err(other) => Err(self.fail(path, other)),
        }
    }

    /// The file/directory shape checks of a write: no directory at `path`, no file at any of
    /// its parents. Reads before the write, as on a store (two servers racing to create `/a`
    /// and `/a/b` could both succeed; content is protected by the conditions, not by these).
    async fn check_shape(&self, path: &VirtualPath) -> Result<()> {
        key_shape::check_file_place(self, path).await
    }

    /// Puts `content` at `path` under `mode`, shape already checked.
    async fn put(
        &self,
        path: &VirtualPath,
        content: &[u8],
        mode: &WriteMode,
    ) -> Result<WriteOutcome> {
        let key = self.key(path)?;
        let (put_mode, created) = match mode {
            WriteMode::CreateOnly => (PutMode::Create, Some(true)),
            WriteMode::Overwrite => (PutMode::Overwrite, None),
            WriteMode::IfVersion(expected) => match version::to_update(expected) {
                Some(update) => (PutMode::Update(update), Some(false)),
                None => return Err(Error::VersionMismatch { path: path.clone() }),
            },
        };
        let created = match created {
            Some(created) => created,
            None => self.head(path).await?.is_none(),
        };
        let options = PutOptions {
            mode: put_mode,
            ..PutOptions::default()
        };
        let payload = PutPayload::from(bytes::Bytes::copy_from_slice(content));
        match self.store.put_opts(&key, payload, options).await {
            Ok(result) => Ok(WriteOutcome {
                version: version::of_put(&result),
                created,
            }),
            // An `If-Match` on an object deleted since: it is not the version read.
            Err(object_store::Error::NotFound { .. })
                if matches!(mode, WriteMode::IfVersion(_)) =>
            {
                Err(Error::VersionMismatch { path: path.clone() })
            }
            Err(error) => Err(self.fail(path, error)),
        }
    }

    /// A GET of `path` (all or `range`), only while it has `version` when one is given.
    async fn get(
        &self,
        path: &VirtualPath,
        range: Option<GetRange>,
        version: Option<&Version>,
    ) -> Result<(ObjectMeta, bytes::Bytes)> {
        let key = self.key(path)?;
        let options = GetOptions {
            range,
            if_match: version.and_then(version::e_tag_of),
            ..GetOptions::default()
        };
        let got = match self.store.get_opts(&key, options).await {
            Ok(got) => got,
            Err(error) => return Err(self.fail(path, error)),
        };
        let meta = got.meta.clone();
        let bytes = got.bytes().await.map_err(|e| self.fail(path, e))?;
        Ok((meta, bytes))
    }

    /// `NotFound` at `path`, or `IsADirectory` when keys lie under it.
    async fn absent(&self, path: &VirtualPath) -> Error {
        match self.has_children(path).await {
            Ok(true) => Error::IsADirectory { path: path.clone() },
            Ok(false) => Error::NotFound { path: path.clone() },
            Err(error) => error,
        }
    }

    /// Deletes the object at `path` if it still has `version`: checked by a HEAD just before
    /// the DELETE (see the module doc).
    async fn delete_if_version(&self, path: &VirtualPath, expected: &Version) -> Result<()> {
        match self.head(path).await? {
            Some(meta) if version::of_meta(&meta) == *expected => {}
            _ => return Err(Error::VersionMismatch { path: path.clone() }),
        }
        self.store
            .delete(&self.key(path)?)
            .await
            .map_err(|e| self.fail(path, e))
    }

    /// Moves one file: copy to `to` under the destination's condition, then delete `from`
    /// if it is still the version copied. A failure before the copy stands changes nothing;
    /// one after it leaves both (never neither).
    async fn move_file(
        &self,
        from: &VirtualPath,
        source: &ObjectMeta,
        to: &VirtualPath,
        replacing: Option<&Version>,
    ) -> Result<Version> {
        let source_version = version::of_meta(source);
        let mode = match replacing {
            Some(version) => WriteMode::IfVersion(version.clone()),
            None => WriteMode::CreateOnly,
        };
        let moved = if source.size <= CONDITIONAL_COPY_BYTES {
            let (_, content) = match self.get(from, None, Some(&source_version)).await {
                Ok(got) => got,
                Err(Error::VersionMismatch { .. } | Error::NotFound { .. }) => {
                    return Err(Error::VersionMismatch { path: from.clone() });
                }
                Err(error) => return Err(error),
            };
            self.put(to, &content, &mode).await?.version
        } else {
            let target = self.head(to).await?;
            match (&mode, &target) {
                (WriteMode::CreateOnly, Some(_)) => {
                    return Err(Error::AlreadyExists { path: to.clone() });
                }
                (WriteMode::IfVersion(v), Some(meta)) if version::of_meta(meta) == *v => {}
                (WriteMode::IfVersion(_), _) => {
                    return Err(Error::VersionMismatch { path: to.clone() });
                }
                _ => {}
            }
            self.store
                .copy(&self.key(from)?, &self.key(to)?)
                .await
                .map_err(|e| self.fail(from, e))?;
            match self.head(to).await? {
                Some(meta) => version::of_meta(&meta),
                None => return Err(Error::NotFound { path: to.clone() }),
            }
        };
        self.delete_if_version(from, &source_version).await?;
        Ok(moved)
    }
}

fn file_entry(path: VirtualPath, meta: &ObjectMeta) -> Entry {
    Entry {
        path,
        kind: EntryKind::File,
        size: meta.size,
        modified: Some(SystemTime::from(meta.last_modified)),
        created: None,
    }
}

#[async_trait]
impl Backend for ObjectBackend {
    async fn stat(&self, path: &VirtualPath) -> Result<Option<Entry>> {
        if path.is_root() {
            return Ok(Some(Entry::directory(path.clone())));
        }
        if let Some(meta) = self.head(path).await? {
            return Ok(Some(file_entry(path.clone(), &meta)));
        }
        Ok(self
            .has_children(path)
            .await?
            .then(|| Entry::directory(path.clone())))
    }

    async fn ls(&self, dir: &VirtualPath) -> Result<Vec<Entry>> {
        self.list_dir(dir).await
    }

    async fn read(&self, path: &VirtualPath) -> Result<FileBytes> {
        if path.is_root() {
            return Err(Error::IsADirectory { path: path.clone() });
        }
        match self.get(path, None, None).await {
            Ok((meta, content)) => Ok(FileBytes {
                content: content.to_vec(),
                version: version::of_meta(&meta),
                created: None,
                modified: Some(SystemTime::from(meta.last_modified)),
            }),
            Err(Error::NotFound { .. }) => Err(self.absent(path).await),
            Err(error) => Err(error),
        }
    }

    async fn read_at_most(&self, path: &VirtualPath, max_bytes: u64) -> Result<BoundedRead> {
        let Some(meta) = self.head(path).await? else {
            return Err(if path.is_root() {
                Error::IsADirectory { path: path.clone() }
            } else {
                self.absent(path).await
            });
        };
        if meta.size > max_bytes {
            return Ok(BoundedRead::TooLarge {
                size: meta.size,
                version: version::of_meta(&meta),
            });
        }
        // Only the version just headed: a bigger one put since is never fetched.
        match self.get(path, None, Some(&version::of_meta(&meta))).await {
            Ok((meta, content)) => Ok(BoundedRead::Whole(FileBytes {
                content: content.to_vec(),
                version: version::of_meta(&meta),
                created: None,
                modified: Some(SystemTime::from(meta.last_modified)),
            })),
            Err(Error::VersionMismatch { .. }) => {
                Box::pin(self.read_at_most(path, max_bytes)).await
            }
            Err(error) => Err(error),
        }
    }

    async fn read_range(
        &self,
        path: &VirtualPath,
        offset: u64,
        len: usize,
        version: &Version,
    ) -> Result<Vec<u8>> {
        if path.is_root() {
            return Err(Error::IsADirectory { path: path.clone() });
        }
        let Some(meta) = self.head(path).await? else {
            return Err(self.absent(path).await);
        };
        if version::of_meta(&meta) != *version {
            return Err(Error::VersionMismatch { path: path.clone() });
        }
        let end = offset.saturating_add(len as u64).min(meta.size);
        if offset >= end {
            return Ok(Vec::new());
        }
        match self
            .get(path, Some(GetRange::Bounded(offset..end)), Some(version))
            .await
        {
            Ok((_, bytes)) => Ok(bytes.to_vec()),
            Err(Error::NotFound { .. }) => Err(Error::NotFound { path: path.clone() }),
            Err(error) => Err(error),
        }
    }

    async fn read_window(&self, path: &VirtualPath, window: LineWindow) -> Result<FileView> {
        if path.is_root() {
            return Err(Error::IsADirectory { path: path.clone() });
        }
        // One GET: its headers give the size and the version of the very bytes that follow,
        // so a small object costs one round trip (a HEAD first made it two). A big one's body
        // is dropped unread and the window is read by ranges of that version.
        let got = match self
            .store
            .get_opts(&self.key(path)?, GetOptions::default())
            .await
        {
            Ok(got) => got,
            Err(error) => {
                return Err(match self.fail(path, error) {
                    Error::NotFound { .. } => self.absent(path).await,
                    other => other,
                });
            }
        };
        let meta = got.meta.clone();
        if meta.size > WHOLE_READ_BYTES {
            drop(got);
            return window::stream(self, path, &meta, window).await;
        }
        let content = got.bytes().await.map_err(|e| self.fail(path, e))?;
        Ok(FileBytes {
            content: content.to_vec(),
            version: version::of_meta(&meta),
            created: None,
            modified: Some(SystemTime::from(meta.last_modified)),
        }
        .into_view(window))
    }

    async fn write(
        &self,
        path: &VirtualPath,
        content: &[u8],
        mode: WriteMode,
    ) -> Result<WriteOutcome> {
        self.check_shape(path).await?;
        self.put(path, content, &mode).await
    }

    async fn delete(&self, path: &VirtualPath, options: &DeleteOptions) -> Result<()> {
        if !path.is_root()
            && let Some(meta) = self.head(path).await?
        {
            return match &options.if_version {
                Some(expected) => self.delete_if_version(path, expected).await,
                None => {
                    let _ = meta;
                    self.store
                        .delete(&self.key(path)?)
                        .await
                        .map_err(|e| self.fail(path, e))
                }
            };
        }
        if options.if_version.is_some() {
            return Err(if self.has_children(path).await? {
                Error::IsADirectory { path: path.clone() }
            } else {
                Error::VersionMismatch { path: path.clone() }
            });
        }
        if !options.recursive {
            return Err(if self.has_children(path).await? {
                Error::DirectoryNotEmpty { path: path.clone() }
            } else {
                Error::NotFound { path: path.clone() }
            });
        }
        let removed = self.delete_under(path).await?;
        if removed == 0 {
            return Err(Error::NotFound { path: path.clone() });
        }
        Ok(())
    }

    async fn glob(&self, query: &GlobQuery) -> Result<Vec<Entry>> {
        self.glob_keys(query).await
    }

    async fn grep(&self, query: &GrepQuery) -> Result<Vec<GrepFile>> {
        self.grep_keys(query).await
    }
}

/// Nothing is kept outside memory here: undo keeps the content itself. No journal: a bucket has
/// no transaction over several keys; the caller changes the files one by one, each under its
/// own condition.
impl KeepAside for ObjectBackend {}

#[async_trait]
impl Rename for ObjectBackend {
    async fn rename(
        &self,
        from: &VirtualPath,
        to: &VirtualPath,
        options: &RenameOptions,
    ) -> Result<Option<Renamed>> {
        let target = key_shape::check_move(self, from, to).await?;
        if let Some(source) = self.head(from).await? {
            if let Some(expected) = &options.if_version
                && version::of_meta(&source) != *expected
            {
                return Err(Error::VersionMismatch { path: from.clone() });
            }
            match (&options.replacing, &target) {
                (None, Some(_)) => return Err(Error::AlreadyExists { path: to.clone() }),
                (Some(expected), Some(meta)) if version::of_meta(meta) != *expected => {
                    return Err(Error::VersionMismatch { path: to.clone() });
                }
                (Some(_), None) => return Err(Error::VersionMismatch { path: to.clone() }),
                _ => {}
            }
            let version = self
                .move_file(from, &source, to, options.replacing.as_ref())
                .await?;
            return Ok(Some(Renamed {
                kind: EntryKind::File,
                version: Some(version),
            }));
        }
        if !self.has_children(from).await? {
            return Err(Error::NotFound { path: from.clone() });
        }
        if options.if_version.is_some() {
            return Err(Error::VersionMismatch { path: from.clone() });
        }
        if target.is_some() {
            return Err(Error::AlreadyExists { path: to.clone() });
        }
        self.move_dir(from, to).await?;
        Ok(Some(Renamed {
            kind: EntryKind::Directory,
            version: None,
        }))
    }
}

/// No permission bits are kept; a key names one object only: no links, no case folding, no
/// symbolic links in a bucket.
impl Posix for ObjectBackend {}

/// No directory on disk is behind these files.
impl HostDir for ObjectBackend {}

#[async_trait]
impl Uploads for ObjectBackend {
    async fn begin_upload(
        &self,
        path: &VirtualPath,
        mode: WriteMode,
    ) -> Result<Box<dyn Upload + '_>> {
        self.check_shape(path).await?;
        upload::check_condition(self, path, &mode).await?;
        Ok(Box::new(upload::ObjectUpload::new(
            self,
            path.clone(),
            mode,
        )?))
    }
}

#[async_trait]
impl key_shape::Keys for ObjectBackend {
    type Meta = ObjectMeta;

    async fn file(&self, path: &VirtualPath) -> Result<Option<ObjectMeta>> {
        self.head(path).await
    }

    async fn has_children(&self, dir: &VirtualPath) -> Result<bool> {
        ObjectBackend::has_children(self, dir).await
    }
}
