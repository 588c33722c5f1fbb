//! Writes on the target piece by piece: the write's mode as the script's flag, and an upload
//! appended to a hidden temporary file beside its destination, renamed into place at the end.

use super::*;

/// The `WriteMode` as the script's flag, and the version a conditional write carries.
pub(super) fn mode_flag(mode: &WriteMode) -> (&'static str, Option<&Version>) {
    match mode {
        WriteMode::CreateOnly => ("c", None),
        WriteMode::Overwrite => ("o", None),
        WriteMode::IfVersion(version) => ("v", Some(version)),
    }
}

/// A file of a shell mount written piece by piece (see `script`: `ub`, `ua`, `uf`, `ux`): a
/// temporary file beside the destination on the target, each chunk appended and its length
/// checked, renamed into place under the write's mode at the end. Dropped without `finish` or
/// `abort` (the process killed), the hidden temporary file stays on the target.
#[derive(Debug)]
pub(super) struct ShellUpload<'a> {
    pub(super) backend: &'a ShellBackend,
    pub(super) path: VirtualPath,
    pub(super) mode: WriteMode,
    /// The temporary file's path on the target, as `ub` printed it; `None` once ended.
    pub(super) temp: Option<String>,
    /// Bytes appended.
    pub(super) size: u64,
    /// The content hash of what was appended, while it is no more than [`HASHED_SIZE_LIMIT`].
    pub(super) hasher: Option<ContentHasher>,
}

impl ShellUpload<'_> {
    fn temp(&self) -> Result<&str> {
        self.temp.as_deref().ok_or_else(|| Error::Io {
            path: self.path.clone(),
            message: "the upload already ended".to_owned(),
        })
    }
}

#[async_trait]
impl Upload for ShellUpload<'_> {
    async fn append(&mut self, chunk: &[u8]) -> Result<()> {
        if let Some(hasher) = &mut self.hasher {
            if hasher.bytes() + chunk.len() as u64 > HASHED_SIZE_LIMIT {
                self.hasher = None;
            } else {
                hasher.push(chunk);
            }
        }
        let total = self.size + chunk.len() as u64;
        let frame = Frame::call("ua")
            .arg(chunk.len())
            .arg(total)
            .path(self.temp()?)
            .raw(chunk);
        let reply = self.backend.call(frame).await?;
        if reply.status != 0 {
            return Err(self.backend.failure(&self.path, &reply));
        }
        self.size = total;
        Ok(())
    }

    async fn finish(mut self: Box<Self>) -> Result<WriteOutcome> {
        let (flag, expected) = mode_flag(&self.mode);
        let mut frame = Frame::call("uf").path(relative(&self.path)).arg(flag);
        if let Some(version) = expected {
            frame = frame.version(version.as_str());
        }
        let frame = frame.path(self.temp()?);
        let reply = {
            let _lock = self.backend.lock(&self.path).await;
            self.backend.call(frame).await?
        };
        // `uf` removed the temporary file, or renamed it into place.
        self.temp = None;
        if reply.status != 0 {
            return Err(self.backend.failure(&self.path, &reply));
        }
        let mut lines = reply.stdout.split(|b| *b == b'\n');
        let existed = lines.next().map(trimmed) == Some(b"1".as_slice());
        let meta = lines.next().and_then(|m| Meta::parse(trimmed(m)));
        let version = match (self.hasher.take(), meta) {
            (Some(hasher), _) if self.size <= HASHED_SIZE_LIMIT => hasher.version(),
            (_, Some(meta)) => meta.identity_version(),
            (_, None) => return Err(malformed(&self.path)),
        };
        Ok(WriteOutcome {
            version,
            created: !existed,
        })
    }

    async fn abort(mut self: Box<Self>) {
        if let Some(temp) = self.temp.take() {
            let frame = Frame::call("ux").path(&temp);
            if let Err(error) = self.backend.call(frame).await {
                tracing::warn!(%error, "could not remove the temporary file of an upload on the target");
            }
        }
    }
}
