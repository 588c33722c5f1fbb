//! `MemoryBackend`: per-session scratch files held in memory, gone when the session ends.
//!
//! An ordered map (path → file) under one `RwLock`. Directories are implicit: a directory exists
//! while a file lies under it (CONTRACT §3). Listing a directory seeks past each child
//! directory's subtree, so it costs O(log n) per entry returned, not a scan of every file.
//! The lock is a std lock because no operation awaits while holding it.
//!
//! Every byte of content is accounted to the workspace's [`MemoryAccount`] (issue 34): a write
//! reserves what it adds before anything changes (refused with [`Error::MemoryFull`] past the
//! quota or the server's budget), a delete or a smaller overwrite gives bytes back, and the
//! backend gives back all it holds when it is dropped (the session ended).

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::SystemTime;

use async_trait::async_trait;

use super::whole_file::{self, key_prefix};
use super::{
    Backend, BoundedRead, DeleteOptions, Entry, EntryKind, Error, FileBytes, FileView, GlobQuery,
    GrepFile, GrepQuery, GrepResults, HostDir, KeepAside, LineWindow, Posix, Rename, RenameOptions,
    Renamed, Result, Upload, Uploads, Version, WriteMode, WriteOutcome, is_reserved_path,
    refuse_reserved,
};
use crate::ground::path::VirtualPath;
use crate::ground::quota::MemoryAccount;

#[derive(Debug, Clone)]
struct FileData {
    content: Vec<u8>,
    version: Version,
    created: SystemTime,
    modified: SystemTime,
}

impl FileData {
    fn entry(&self, path: VirtualPath) -> Entry {
        Entry {
            path,
            kind: EntryKind::File,
            size: self.content.len() as u64,
            modified: Some(self.modified),
            created: Some(self.created),
        }
    }
}

/// In-memory backend (see the module doc).
#[derive(Debug)]
pub struct MemoryBackend {
    files: RwLock<BTreeMap<String, FileData>>,
    /// Where the bytes of the contents are accounted.
    account: Arc<MemoryAccount>,
}

impl Default for MemoryBackend {
    fn default() -> Self {
        Self::accounted(MemoryAccount::unlimited())
    }
}

impl Drop for MemoryBackend {
    fn drop(&mut self) {
        // Once, when the workspace ends: the map is about to be freed, so its bytes go back.
        let files = self.files.get_mut().unwrap_or_else(PoisonError::into_inner);
        let held: u64 = files.values().map(|f| f.content.len() as u64).sum();
        self.account.release(held);
    }
}

/// Keys under `prefix`, in order.
fn under<'a>(
    files: &'a BTreeMap<String, FileData>,
    prefix: &'a str,
) -> impl Iterator<Item = (&'a String, &'a FileData)> + 'a {
    files
        .range::<str, _>((Bound::Included(prefix), Bound::Unbounded))
        .take_while(move |(k, _)| k.starts_with(prefix))
}

fn is_dir(files: &BTreeMap<String, FileData>, dir: &VirtualPath) -> bool {
    dir.is_root() || under(files, &key_prefix(dir)).next().is_some()
}

impl MemoryBackend {
    /// An empty backend whose contents are not limited (no quota, no budget).
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty backend whose contents count against `account` (a workspace's quota).
    pub fn accounted(account: Arc<MemoryAccount>) -> Self {
        Self {
            files: RwLock::new(BTreeMap::new()),
            account,
        }
    }

    /// The account its contents count against.
    pub fn account(&self) -> &Arc<MemoryAccount> {
        &self.account
    }

    fn read_map(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, FileData>> {
        // A panic while holding the lock cannot leave the map half-updated (each update is a
        // single insert/remove), so a poisoned lock is still safe to use.
        self.files.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write_map(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, FileData>> {
        self.files.write().unwrap_or_else(PoisonError::into_inner)
    }

    fn files_under(&self, dir: &VirtualPath) -> Vec<(VirtualPath, FileData)> {
        let files = self.read_map();
        let own = files.get(dir.as_str()).map(|f| (dir.clone(), f.clone()));
        let prefix = key_prefix(dir);
        let mut out: Vec<(VirtualPath, FileData)> = own.into_iter().collect();
        for (key, data) in under(&files, &prefix) {
            // A reserved name is mountfs's own, never listed (attack review of issue 41).
            if let Ok(path) = VirtualPath::parse_raw(key)
                && !is_reserved_path(&path)
            {
                out.push((path, data.clone()));
            }
        }
        out
    }
}

#[async_trait]
impl Backend for MemoryBackend {
    async fn stat(&self, path: &VirtualPath) -> Result<Option<Entry>> {
        refuse_reserved(path)?;
        let files = self.read_map();
        if let Some(file) = files.get(path.as_str()) {
            return Ok(Some(file.entry(path.clone())));
        }
        Ok(is_dir(&files, path).then(|| Entry::directory(path.clone())))
    }

    async fn ls(&self, dir: &VirtualPath) -> Result<Vec<Entry>> {
        refuse_reserved(dir)?;
        let files = self.read_map();
        if files.contains_key(dir.as_str()) {
            return Err(Error::NotADirectory { path: dir.clone() });
        }
        if !is_dir(&files, dir) {
            return Err(Error::NotFound { path: dir.clone() });
        }
        let prefix = key_prefix(dir);
        let mut entries = Vec::new();
        let mut cursor = prefix.clone();
        loop {
            let next = files
                .range::<str, _>((Bound::Included(cursor.as_str()), Bound::Unbounded))
                .next();
            let Some((key, data)) = next else { break };
            let Some(rest) = key.strip_prefix(&prefix) else {
                break;
            };
            match rest.split_once('/') {
                None => {
                    if !crate::ground::path::is_reserved_name(rest) {
                        entries.push(data.entry(VirtualPath::parse_raw(key)?));
                    }
                    // Next key strictly after this one.
                    cursor = format!("{key}\0");
                }
                Some((child, _)) => {
                    if !crate::ground::path::is_reserved_name(child) {
                        entries.push(Entry::directory(dir.join(child)?));
                    }
                    // '0' is the byte after '/': skip the child's whole subtree.
                    cursor = format!("{prefix}{child}0");
                }
            }
        }
        Ok(entries)
    }

    async fn read(&self, path: &VirtualPath) -> Result<FileBytes> {
        refuse_reserved(path)?;
        let files = self.read_map();
        match files.get(path.as_str()) {
            Some(file) => Ok(FileBytes {
                content: file.content.clone(),
                version: file.version.clone(),
                created: Some(file.created),
                modified: Some(file.modified),
            }),
            None if is_dir(&files, path) => Err(Error::IsADirectory { path: path.clone() }),
            None => Err(Error::NotFound { path: path.clone() }),
        }
    }

    async fn read_at_most(&self, path: &VirtualPath, max_bytes: u64) -> Result<BoundedRead> {
        refuse_reserved(path)?;
        // Checked under the lock, so an oversized content is never cloned.
        {
            let files = self.read_map();
            if let Some(file) = files.get(path.as_str())
                && file.content.len() as u64 > max_bytes
            {
                return Ok(BoundedRead::TooLarge {
                    size: file.content.len() as u64,
                    version: file.version.clone(),
                });
            }
        }
        self.read(path).await.map(BoundedRead::Whole)
    }

    async fn read_window(&self, path: &VirtualPath, window: LineWindow) -> Result<FileView> {
        refuse_reserved(path)?;
        Ok(self.read(path).await?.into_view(window))
    }

    async fn read_range(
        &self,
        path: &VirtualPath,
        offset: u64,
        len: usize,
        version: &Version,
    ) -> Result<Vec<u8>> {
        refuse_reserved(path)?;
        let files = self.read_map();
        match files.get(path.as_str()) {
            Some(file) if &file.version == version => {
                let start = usize::try_from(offset)
                    .unwrap_or(usize::MAX)
                    .min(file.content.len());
                let end = start.saturating_add(len).min(file.content.len());
                Ok(file.content[start..end].to_vec())
            }
            Some(_) => Err(Error::VersionMismatch { path: path.clone() }),
            None if is_dir(&files, path) => Err(Error::IsADirectory { path: path.clone() }),
            None => Err(Error::NotFound { path: path.clone() }),
        }
    }

    async fn write(
        &self,
        path: &VirtualPath,
        content: &[u8],
        mode: WriteMode,
    ) -> Result<WriteOutcome> {
        refuse_reserved(path)?;
        let mut files = self.write_map();
        if is_dir(&files, path) {
            return Err(Error::IsADirectory { path: path.clone() });
        }
        let mut ancestor = path.parent();
        while let Some(dir) = ancestor {
            if files.contains_key(dir.as_str()) {
                return Err(Error::NotADirectory { path: dir });
            }
            ancestor = dir.parent();
        }
        let existing = files.get(path.as_str());
        match (&mode, existing) {
            (WriteMode::CreateOnly, Some(_)) => {
                return Err(Error::AlreadyExists { path: path.clone() });
            }
            (WriteMode::IfVersion(expected), Some(file)) if &file.version != expected => {
                return Err(Error::VersionMismatch { path: path.clone() });
            }
            (WriteMode::IfVersion(_), None) => {
                return Err(Error::VersionMismatch { path: path.clone() });
            }
            _ => {}
        }
        // Reserved before the content is copied in: past the quota nothing has changed.
        let old_len = existing.map_or(0, |f| f.content.len() as u64);
        let new_len = content.len() as u64;
        let reserved = self
            .account
            .reserve(new_len.saturating_sub(old_len))
            .map_err(|refused| Error::MemoryFull {
                path: path.clone(),
                mount: VirtualPath::root(),
                refused,
            })?;
        let now = SystemTime::now();
        let created = existing.map_or(now, |f| f.created);
        let version = Version::of_content(content);
        let was_new = existing.is_none();
        let replaced = files.insert(
            path.as_str().to_owned(),
            FileData {
                content: content.to_vec(),
                version: version.clone(),
                created,
                modified: now,
            },
        );
        reserved.keep();
        drop(replaced);
        self.account.release(old_len.saturating_sub(new_len));
        Ok(WriteOutcome {
            version,
            created: was_new,
        })
    }

    async fn delete(&self, path: &VirtualPath, options: &DeleteOptions) -> Result<()> {
        refuse_reserved(path)?;
        let mut files = self.write_map();
        if let Some(file) = files.get(path.as_str()) {
            if let Some(expected) = &options.if_version
                && &file.version != expected
            {
                return Err(Error::VersionMismatch { path: path.clone() });
            }
            let removed = files.remove(path.as_str());
            self.account
                .release(removed.map_or(0, |f| f.content.len() as u64));
            return Ok(());
        }
        let prefix = key_prefix(path);
        let doomed: Vec<String> = under(&files, &prefix).map(|(k, _)| k.clone()).collect();
        if doomed.is_empty() {
            return Err(Error::NotFound { path: path.clone() });
        }
        if !options.recursive {
            return Err(Error::DirectoryNotEmpty { path: path.clone() });
        }
        let mut freed = 0;
        for key in doomed {
            freed += files.remove(&key).map_or(0, |f| f.content.len() as u64);
        }
        self.account.release(freed);
        Ok(())
    }

    async fn glob(&self, query: &GlobQuery) -> Result<Vec<Entry>> {
        Ok(self
            .files_under(&query.dir)
            .into_iter()
            .filter(|(path, _)| query.matcher.matches_path(path, &query.dir))
            .map(|(path, data)| data.entry(path))
            .collect())
    }

    async fn grep(&self, query: &GrepQuery) -> Result<Vec<GrepFile>> {
        let mut out = GrepResults::new(query.collect);
        for (path, data) in self.files_under(&query.dir) {
            if query.control.stopped() {
                break;
            }
            if let Some(found) = whole_file::grep_file(&path, &data.content, query) {
                out.push(found);
            }
        }
        Ok(out.finish())
    }
}

#[async_trait]
impl Uploads for MemoryBackend {
    /// Contents live in memory here: a file too large to hold cannot be written piece by piece
    /// into memory either.
    async fn begin_upload(
        &self,
        path: &VirtualPath,
        _mode: WriteMode,
    ) -> Result<Box<dyn Upload + '_>> {
        refuse_reserved(path)?;
        Err(Error::Unsupported {
            path: path.clone(),
            reason: "a memory mount holds every file whole in memory; it takes whole writes only, not a file streamed piece by piece".to_owned(),
        })
    }
}

#[async_trait]
impl Rename for MemoryBackend {
    async fn rename(
        &self,
        from: &VirtualPath,
        to: &VirtualPath,
        options: &RenameOptions,
    ) -> Result<Option<Renamed>> {
        refuse_reserved(from)?;
        refuse_reserved(to)?;
        // One write lock over the whole check and move: nobody sees a half-moved directory.
        let mut files = self.write_map();
        if from.is_root() {
            return Err(Error::MountRoot { path: from.clone() });
        }
        if to.is_root() {
            return Err(Error::MountRoot { path: to.clone() });
        }
        let source_is_file = files.contains_key(from.as_str());
        if !source_is_file && !is_dir(&files, from) {
            return Err(Error::NotFound { path: from.clone() });
        }
        if to.starts_with(from) {
            return Err(Error::Unsupported {
                path: to.clone(),
                reason: format!("it lies inside {from}; a directory cannot be moved into itself"),
            });
        }
        if let Some(expected) = &options.if_version
            && files
                .get(from.as_str())
                .is_none_or(|f| f.version != *expected)
        {
            return Err(Error::VersionMismatch { path: from.clone() });
        }
        if is_dir(&files, to) {
            return Err(Error::IsADirectory { path: to.clone() });
        }
        let mut ancestor = to.parent();
        while let Some(dir) = ancestor {
            if files.contains_key(dir.as_str()) {
                return Err(Error::NotADirectory { path: dir });
            }
            ancestor = dir.parent();
        }
        match (files.get(to.as_str()), &options.replacing) {
            (None, None) => {}
            (None, Some(_)) => return Err(Error::VersionMismatch { path: to.clone() }),
            (Some(_), None) => return Err(Error::AlreadyExists { path: to.clone() }),
            (Some(_), Some(_)) if !source_is_file => {
                return Err(Error::AlreadyExists { path: to.clone() });
            }
            (Some(existing), Some(expected)) if existing.version != *expected => {
                return Err(Error::VersionMismatch { path: to.clone() });
            }
            (Some(_), Some(_)) => {}
        }
        if let Some(file) = files.remove(from.as_str()) {
            let version = file.version.clone();
            let replaced = files.insert(to.as_str().to_owned(), file);
            self.account
                .release(replaced.map_or(0, |f| f.content.len() as u64));
            return Ok(Some(Renamed {
                kind: EntryKind::File,
                version: Some(version),
            }));
        }
        let (old_prefix, new_prefix) = (key_prefix(from), key_prefix(to));
        let keys: Vec<String> = under(&files, &old_prefix).map(|(k, _)| k.clone()).collect();
        for key in keys {
            if let Some(file) = files.remove(&key) {
                let rest = &key[old_prefix.len()..];
                let replaced = files.insert(format!("{new_prefix}{rest}"), file);
                self.account
                    .release(replaced.map_or(0, |f| f.content.len() as u64));
            }
        }
        Ok(Some(Renamed {
            kind: EntryKind::Directory,
            version: None,
        }))
    }
}

/// Nothing is kept outside memory here: undo keeps the content itself. Nothing in memory
/// survives a crash: no journal (the caller changes file by file).
impl KeepAside for MemoryBackend {}

/// No permission bits are kept; a path names one file only: no links, no case folding.
impl Posix for MemoryBackend {}

/// No directory on disk is behind these files.
impl HostDir for MemoryBackend {}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::ground::quota::{MemoryAccount, MemoryBudget, MemoryLimit};

    fn p(s: &str) -> VirtualPath {
        VirtualPath::parse(s).unwrap()
    }

    #[tokio::test]
    async fn every_change_keeps_the_account_exact_and_a_drop_gives_all_back() {
        let budget = Arc::new(MemoryBudget::new(1000));
        let account = MemoryAccount::new(100, budget.clone());
        let memory = MemoryBackend::accounted(account.clone());
        memory
            .write(&p("/a"), &[1; 60], WriteMode::Overwrite)
            .await
            .unwrap();
        memory
            .write(&p("/d/b"), &[2; 30], WriteMode::Overwrite)
            .await
            .unwrap();
        assert_eq!(account.used(), 90);
        let refused = memory
            .write(&p("/c"), &[3; 11], WriteMode::Overwrite)
            .await
            .unwrap_err();
        match refused {
            Error::MemoryFull { path, refused, .. } => {
                assert_eq!(path, p("/c"));
                assert_eq!(refused.limit, MemoryLimit::Quota);
                assert_eq!((refused.used, refused.needed), (90, 11));
            }
            other => panic!("{other:?}"),
        }
        assert!(
            memory.stat(&p("/c")).await.unwrap().is_none(),
            "nothing changed"
        );
        // Growing a file needs only the difference; shrinking gives the rest back.
        memory
            .write(&p("/a"), &[1; 70], WriteMode::Overwrite)
            .await
            .unwrap();
        assert_eq!(account.used(), 100);
        memory
            .write(&p("/a"), &[1; 10], WriteMode::Overwrite)
            .await
            .unwrap();
        assert_eq!(account.used(), 40);
        // A rename over a file frees the file replaced.
        let options = RenameOptions {
            replacing: Some(Version::of_content(&[1; 10])),
            ..RenameOptions::default()
        };
        memory.rename(&p("/d/b"), &p("/a"), &options).await.unwrap();
        assert_eq!(account.used(), 30);
        memory
            .write(&p("/d/e"), &[4; 5], WriteMode::Overwrite)
            .await
            .unwrap();
        memory
            .delete(
                &p("/d"),
                &DeleteOptions {
                    recursive: true,
                    ..DeleteOptions::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(account.used(), 30);
        drop(memory);
        assert_eq!((account.used(), budget.used()), (0, 0));
    }
}
