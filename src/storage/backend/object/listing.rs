//! Directories of an object mount are key prefixes (CONTRACT §3): `ls` is one delimiter
//! listing of `dir/` (its files and its common prefixes, paged by the store's continuation
//! tokens), a directory exists while any key lies under it (one listed key tells), and `glob`,
//! a recursive delete and a directory move walk the keys under a prefix as a stream, page by
//! page, holding only what they keep. Keys the mount cannot name exactly (see `keys`) are
//! left out of every answer.

use futures_util::StreamExt;
use object_store::ObjectMeta;

use super::{ObjectBackend, file_entry};
use crate::ground::path::VirtualPath;
use crate::storage::backend::{Entry, Error, GlobQuery, Result};

impl ObjectBackend {
    /// Whether any key lies under `dir` (so that it exists as a directory).
    pub(super) async fn has_children(&self, dir: &VirtualPath) -> Result<bool> {
        let prefix = self.prefix.dir_key(dir)?;
        let mut listing = self.store.list(prefix.as_ref());
        match listing.next().await {
            None => Ok(false),
            Some(Ok(_)) => Ok(true),
            Some(Err(error)) => Err(self.fail(dir, error)),
        }
    }

    /// The entries directly in `dir` (see [`crate::storage::backend::Backend::ls`]).
    pub(super) async fn list_dir(&self, dir: &VirtualPath) -> Result<Vec<Entry>> {
        if self.head(dir).await?.is_some() {
            return Err(Error::NotADirectory { path: dir.clone() });
        }
        let prefix = self.prefix.dir_key(dir)?;
        let listed = self
            .store
            .list_with_delimiter(prefix.as_ref())
            .await
            .map_err(|e| self.fail(dir, e))?;
        let mut entries = Vec::with_capacity(listed.objects.len() + listed.common_prefixes.len());
        for meta in &listed.objects {
            // A folder marker (`dir/`) reads back as the directory itself: not a file in it.
            if let Some(path) = self.prefix.path_of(&meta.location)
                && path.parent().as_ref() == Some(dir)
            {
                entries.push(file_entry(path, meta));
            }
        }
        for common in &listed.common_prefixes {
            if let Some(path) = self.prefix.path_of(common)
                && path.parent().as_ref() == Some(dir)
            {
                entries.push(Entry::directory(path));
            }
        }
        if entries.is_empty() && !dir.is_root() && listed.objects.is_empty() {
            return Err(Error::NotFound { path: dir.clone() });
        }
        Ok(entries)
    }

    /// Calls `each` with every object under `dir` that the mount can name, page by page as
    /// the store lists them (key order on S3, GCS and Azure). `each` returns `false` to stop.
    pub(super) async fn walk(
        &self,
        dir: &VirtualPath,
        mut each: impl FnMut(VirtualPath, ObjectMeta) -> bool,
    ) -> Result<()> {
        let prefix = self.prefix.dir_key(dir)?;
        let mut listing = self.store.list(prefix.as_ref());
        while let Some(meta) = listing.next().await {
            let meta = meta.map_err(|e| self.fail(dir, e))?;
            if let Some(path) = self.prefix.path_of(&meta.location)
                && path != *dir
                && !each(path, meta)
            {
                break;
            }
        }
        Ok(())
    }

    /// `glob`: the files under `query.dir` whose relative path matches, from a streamed
    /// listing (only matches are kept).
    pub(super) async fn glob_keys(&self, query: &GlobQuery) -> Result<Vec<Entry>> {
        if let Some(meta) = self.head(&query.dir).await? {
            let own = query.matcher.matches_path(&query.dir, &query.dir);
            return Ok(own
                .then(|| file_entry(query.dir.clone(), &meta))
                .into_iter()
                .collect());
        }
        let mut found = Vec::new();
        self.walk(&query.dir, |path, meta| {
            if query.matcher.matches_path(&path, &query.dir) {
                found.push(file_entry(path, &meta));
            }
            !query.control.stopped()
        })
        .await?;
        Ok(found)
    }

    /// Deletes every object under `dir`; how many there were.
    pub(super) async fn delete_under(&self, dir: &VirtualPath) -> Result<usize> {
        let prefix = self.prefix.dir_key(dir)?;
        let listing = self
            .store
            .list(prefix.as_ref())
            .map(|meta| meta.map(|m| m.location))
            .boxed();
        let mut deleted = self.store.delete_stream(listing);
        let mut count = 0usize;
        while let Some(done) = deleted.next().await {
            match done {
                Ok(_) => count += 1,
                Err(object_store::Error::NotFound { .. }) => {}
                Err(error) => return Err(self.fail(dir, error)),
            }
        }
        Ok(count)
    }

    /// Moves every file under `from` to the same place under `to`, one by one (copy, then
    /// delete of the source): a failure half-way leaves the files not yet moved at `from`.
    pub(super) async fn move_dir(&self, from: &VirtualPath, to: &VirtualPath) -> Result<()> {
        // Listed first, then moved: the keys written under `to` are never listed again.
        let mut files = Vec::new();
        self.walk(from, |path, meta| {
            files.push((path, meta));
            true
        })
        .await?;
        if files.is_empty() {
            return Err(Error::NotFound { path: from.clone() });
        }
        for (path, meta) in files {
            let Some(relative) = path.relative_to(from) else {
                continue;
            };
            let target = to.join_relative(relative)?;
            self.move_file(&path, &meta, &target, None).await?;
        }
        Ok(())
    }
}
