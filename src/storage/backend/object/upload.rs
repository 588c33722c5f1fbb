//! Writing a file piece by piece (`mountfs cp`, big copies): the chunks are held until
//! [`MULTIPART_BYTES`]; a file that ends below that is one conditional PUT, exactly as
//! `write` (`If-None-Match: *` / `If-Match`). A bigger one becomes a multipart upload of
//! [`PART_BYTES`] parts, [`PARTS_IN_FLIGHT`] at once, so memory stays near
//! `PART_BYTES × PARTS_IN_FLIGHT` whatever the size. Nothing is visible at the key until the
//! upload completes: an upload aborted, failed or killed leaves no object (a killed one leaves
//! its parts to the bucket's lifecycle rule for incomplete uploads, or `aws s3api
//! abort-multipart-upload`).
//!
//! `object_store` 0.14 completes a multipart upload unconditionally, so its condition is
//! checked by a HEAD when the upload begins and again just before it completes: a change
//! landing between that HEAD and the completion is overwritten. Small uploads have no such
//! window.

use async_trait::async_trait;
use object_store::{ObjectStoreExt, WriteMultipart};

use super::{ObjectBackend, error, version};
use crate::ground::path::VirtualPath;
use crate::storage::backend::{Error, Result, Upload, WriteMode, WriteOutcome};

/// A file that grows past this becomes a multipart upload.
pub(super) const MULTIPART_BYTES: usize = 8 * 1024 * 1024;
/// Size of one part (S3's smallest is 5 MiB).
const PART_BYTES: usize = 8 * 1024 * 1024;
/// Parts uploaded at once.
const PARTS_IN_FLIGHT: usize = 4;

/// Whether `mode` holds at `path` now (checked by HEAD): `AlreadyExists` or
/// `VersionMismatch` otherwise.
pub(super) async fn check_condition(
    backend: &ObjectBackend,
    path: &VirtualPath,
    mode: &WriteMode,
) -> Result<()> {
    let current = backend.head(path).await?;
    match (mode, &current) {
        (WriteMode::CreateOnly, Some(_)) => Err(Error::AlreadyExists { path: path.clone() }),
        (WriteMode::IfVersion(expected), Some(meta)) if version::of_meta(meta) != *expected => {
            Err(Error::VersionMismatch { path: path.clone() })
        }
        (WriteMode::IfVersion(_), None) => Err(Error::VersionMismatch { path: path.clone() }),
        _ => Ok(()),
    }
}

/// A file of an object mount being written piece by piece (see the module doc).
pub(super) struct ObjectUpload<'a> {
    backend: &'a ObjectBackend,
    path: VirtualPath,
    mode: WriteMode,
    /// The first bytes, until they pass [`MULTIPART_BYTES`].
    held: Vec<u8>,
    /// The multipart upload, once started.
    multipart: Option<WriteMultipart>,
}

impl std::fmt::Debug for ObjectUpload<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectUpload")
            .field("path", &self.path)
            .field("multipart", &self.multipart.is_some())
            .finish_non_exhaustive()
    }
}

impl<'a> ObjectUpload<'a> {
    pub(super) fn new(
        backend: &'a ObjectBackend,
        path: VirtualPath,
        mode: WriteMode,
    ) -> Result<Self> {
        backend.key(&path)?;
        Ok(Self {
            backend,
            path,
            mode,
            held: Vec::new(),
            multipart: None,
        })
    }
}

#[async_trait]
impl Upload for ObjectUpload<'_> {
    async fn append(&mut self, chunk: &[u8]) -> Result<()> {
        if self.multipart.is_none() {
            if self.held.len() + chunk.len() <= MULTIPART_BYTES {
                self.held.extend_from_slice(chunk);
                return Ok(());
            }
            let key = self.backend.key(&self.path)?;
            let upload = self
                .backend
                .store
                .put_multipart(&key)
                .await
                .map_err(|e| self.backend.fail(&self.path, e))?;
            let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_BYTES);
            writer.write(&std::mem::take(&mut self.held));
            self.multipart = Some(writer);
        }
        if let Some(writer) = self.multipart.as_mut() {
            writer
                .wait_for_capacity(PARTS_IN_FLIGHT)
                .await
                .map_err(|e| self.backend.fail(&self.path, e))?;
            writer.write(chunk);
        }
        Ok(())
    }

    async fn finish(self: Box<Self>) -> Result<WriteOutcome> {
        let Self {
            backend,
            path,
            mode,
            held,
            multipart,
        } = *self;
        let Some(writer) = multipart else {
            backend.check_shape(&path).await?;
            return backend.put(&path, &held, &mode).await;
        };
        let checked = match backend.check_shape(&path).await {
            Ok(()) => check_condition(backend, &path, &mode).await,
            Err(error) => Err(error),
        };
        if let Err(error) = checked {
            if let Err(abort) = writer.abort().await {
                tracing::warn!(path = %path, error = %abort, "could not abort a multipart upload");
            }
            return Err(error);
        }
        let created = !matches!(mode, WriteMode::IfVersion(_))
            && (matches!(mode, WriteMode::CreateOnly) || backend.head(&path).await?.is_none());
        let result = writer.finish().await.map_err(|error| match error {
            // The store no longer knows the upload: a completion that timed out on the way
            // back and was retried may have landed. Not "not found": say what to check.
            object_store::Error::NotFound { .. } => error::unavailable(
                &backend.url,
                &format!(
                    "the completion of the multipart upload of {path} was not confirmed (the store no longer knows the upload; a completion whose answer was lost may have landed): look at {path} before copying it again"
                ),
            ),
            other => backend.fail(&path, other),
        })?;
        Ok(WriteOutcome {
            version: version::of_put(&result),
            created,
        })
    }

    async fn abort(self: Box<Self>) {
        if let Some(writer) = self.multipart
            && let Err(error) = writer.abort().await
        {
            tracing::warn!(path = %self.path, %error, "could not abort a multipart upload");
        }
    }
}
