//! `StoreBackend`: files as versioned items of one namespace of a [`Store`] (CONTRACT §3).
//!
//! A file is the item whose key is its mount-relative path (`/notes/a.md`); its version is the
//! store's version. Directories are implicit: a directory exists while a key lies under it.
//! Every listing is an indexed range query over the key prefix `dir/`: `ls` reads the files of
//! the directory and seeks past each child directory's subtree (as the memory backend does), so
//! it never reads the rows below a subdirectory; `glob` and `grep` page through the prefix in
//! key order, and `grep` holds one page of contents at a time. Conditional writes are left to
//! the store, which checks them in the database.
//!
//! The file/directory shape checks of `write` (no directory at the path, no file at a parent)
//! are reads before the write: two servers racing to create `/a` as a file and `/a/b` could both
//! succeed. That only bends the tree's shape, never loses content, and the version check that
//! protects content is in the database.

use std::collections::VecDeque;
use std::sync::Arc;

use async_trait::async_trait;

mod transaction;

use super::key_shape;
use super::whole_file::{self, key_prefix};
use super::{
    Backend, BoundedRead, DeleteOptions, Entry, EntryKind, Error, FileBytes, FileView, GlobQuery,
    GrepFile, GrepQuery, GrepResults, HostDir, KeepAside, LineWindow, Posix, Rename, RenameOptions,
    Renamed, Result, Upload, Uploads, Utf8Tracker, Version, WriteMode, WriteOutcome,
    is_reserved_path, refuse_reserved,
};
use crate::ground::path::VirtualPath;
use crate::storage::store::{
    self, CandidateQuery, ItemMeta, ListQuery, ListStart, Namespace, PutCondition, Store,
    StoreUpload, prefix_successor,
};
use transaction::StoreTransaction;

/// Rows per page when paging through a prefix for `glob`.
const LIST_PAGE: usize = 512;
/// Items (with content) per page for `grep`: bounds the memory one search holds.
const SCAN_PAGE: usize = 64;

/// Most bytes of contents one grep holds from a store at once: a page takes as many items as
/// fit, planned from their sizes (at least one), so 64 items at the edit limit are never
/// fetched together.
const SCAN_PAGE_BYTES: u64 = 16 * 1024 * 1024;
/// Candidates (keys and sizes, no content) per page of an indexed `grep`.
const CANDIDATE_PAGE: usize = 2048;
/// Groups of candidates fetched and matched at once by an indexed `grep`, and the most bytes
/// of contents in one group (at least one item): together the [`SCAN_PAGE_BYTES`] a scan
/// holds.
const CANDIDATE_GROUPS_IN_FLIGHT: usize = 2;
const CANDIDATE_GROUP_BYTES: u64 = SCAN_PAGE_BYTES / CANDIDATE_GROUPS_IN_FLIGHT as u64;
/// Fewest candidates in a group when the answer needs only its first files (see
/// [`crate::ground::search::SearchControl::first_files`]).
const FIRST_FILES_GROUP: usize = 8;
/// `ls` page sizes: small right after seeking past a subdirectory (the next row is likely
/// another subdirectory), growing while rows are files of the directory itself.
const LS_PAGE_MIN: usize = 16;
const LS_PAGE_MAX: usize = 1024;

/// A namespace of a store, seen as a file system (see the module doc).
#[derive(Debug, Clone)]
pub struct StoreBackend {
    store: Arc<dyn Store>,
    namespace: Namespace,
    /// `grep` asks the store's search index for candidates (else it always scans).
    use_index: bool,
}

fn file_entry(path: VirtualPath, meta: &ItemMeta) -> Entry {
    Entry {
        path,
        kind: EntryKind::File,
        size: meta.size,
        modified: Some(meta.modified_at),
        created: Some(meta.created_at),
    }
}

fn version_of(raw: i64) -> Version {
    Version::from_raw(raw.to_string())
}

/// Maps a store failure met on `path` to what the agent reads.
fn failure(path: &VirtualPath, error: store::Error) -> Error {
    match error {
        store::Error::Unavailable(message) | store::Error::Schema(message) => {
            Error::Unavailable { message }
        }
        store::Error::AlreadyExists => Error::AlreadyExists { path: path.clone() },
        store::Error::VersionMismatch => Error::VersionMismatch { path: path.clone() },
        store::Error::Query(message) => Error::Io {
            path: path.clone(),
            message,
        },
        store::Error::InvalidNamespace(name) => Error::Unavailable {
            message: format!("namespace '{name}' is not valid"),
        },
    }
}

impl StoreBackend {
    /// The file/directory shape checks of a write (see the module doc): no directory at
    /// `path`, no file at any of its parents.
    async fn check_shape(&self, path: &VirtualPath) -> Result<()> {
        key_shape::check_file_place(self, path).await
    }

    /// A backend over `namespace` of `store`.
    pub fn new(store: Arc<dyn Store>, namespace: Namespace) -> Self {
        Self {
            store,
            namespace,
            use_index: true,
        }
    }

    /// The same backend, whose `grep` always reads every file under the searched directory,
    /// as before the search index existed (for tests and benchmarks that compare the two).
    pub fn without_index(mut self) -> Self {
        self.use_index = false;
        self
    }

    /// The namespace served.
    pub fn namespace(&self) -> &Namespace {
        &self.namespace
    }

    async fn head(&self, path: &VirtualPath) -> Result<Option<ItemMeta>> {
        if path.is_root() {
            return Ok(None);
        }
        self.store
            .head(&self.namespace, path.as_str())
            .await
            .map_err(|e| failure(path, e))
    }

    /// Whether any key lies under `dir` (so that `dir` exists as a directory).
    async fn has_children(&self, dir: &VirtualPath) -> Result<bool> {
        let first = self
            .store
            .list(&self.namespace, &ListQuery::first(key_prefix(dir), 1))
            .await
            .map_err(|e| failure(dir, e))?;
        Ok(!first.is_empty())
    }

    /// Searches the candidates the store's index gives for `candidates.plan` (issue 28), page
    /// by page in key order, with [`whole_file::grep_file`] — the very matcher a scan uses, so
    /// the answer is a scan's — into `out`. Contents are fetched in groups of at most
    /// [`CANDIDATE_GROUP_BYTES`] (and [`SCAN_PAGE`] items), each fetched and matched by a task
    /// of its own, [`CANDIDATE_GROUPS_IN_FLIGHT`] at once: one group is matched while the next
    /// is read, on as many cores as there are. `false` (nothing searched) when the store has no
    /// index ready: the caller scans.
    async fn grep_candidates(
        &self,
        query: &GrepQuery,
        mut candidates: CandidateQuery,
        out: &mut GrepResults,
    ) -> Result<bool> {
        let mut in_flight: VecDeque<GroupTask> = VecDeque::new();
        // A page of the first files wants small groups: few candidates confirmed past it.
        let group_items = match query.control.first_files() {
            Some(wanted) => wanted.clamp(FIRST_FILES_GROUP, SCAN_PAGE),
            None => SCAN_PAGE,
        };
        loop {
            if query.control.stopped() {
                return Ok(true);
            }
            let page = self
                .store
                .candidates(&self.namespace, &candidates)
                .await
                .map_err(|e| failure(&query.dir, e))?;
            let Some(page) = page else {
                return Ok(false);
            };
            let full = page.len() >= candidates.list.limit;
            // The file filter first: a file it leaves out is never fetched.
            let wanted: Vec<&ItemMeta> = page
                .iter()
                .filter(
                    |meta| match (&query.file_filter, VirtualPath::parse_raw(&meta.key)) {
                        (_, Err(_)) => false,
                        // A reserved name is mountfs's own, never searched (issue 41).
                        (_, Ok(path)) if is_reserved_path(&path) => false,
                        (None, Ok(_)) => true,
                        (Some(filter), Ok(path)) => filter.matches_path(&path, &query.dir),
                    },
                )
                .collect();
            let mut group: Vec<String> = Vec::new();
            let mut bytes = 0u64;
            for (index, meta) in wanted.iter().enumerate() {
                group.push(meta.key.clone());
                bytes = bytes.saturating_add(meta.size);
                let next_size = wanted.get(index + 1).map(|m| m.size);
                let flush = match next_size {
                    None => true,
                    Some(next) => {
                        group.len() >= group_items
                            || bytes.saturating_add(next) > CANDIDATE_GROUP_BYTES
                    }
                };
                if !flush {
                    continue;
                }
                if query.control.stopped() {
                    return Ok(true);
                }
                if in_flight.len() >= CANDIDATE_GROUPS_IN_FLIGHT
                    && let Some(oldest) = in_flight.pop_front()
                {
                    oldest.finish(out).await?;
                    if enough(query, out) {
                        return Ok(true);
                    }
                }
                in_flight.push_back(self.search_group(query, std::mem::take(&mut group)));
                bytes = 0;
            }
            match page.last() {
                Some(last) if full => candidates.list.start = ListStart::After(last.key.clone()),
                _ => break,
            }
        }
        while let Some(task) = in_flight.pop_front() {
            task.finish(out).await?;
            if enough(query, out) {
                return Ok(true);
            }
        }
        Ok(true)
    }

    /// Fetches the items at `keys` and greps them on the blocking pool, as a task of its own.
    fn search_group(&self, query: &GrepQuery, keys: Vec<String>) -> GroupTask {
        let (store, namespace, query) = (self.store.clone(), self.namespace.clone(), query.clone());
        GroupTask(tokio::spawn(async move {
            let items = store
                .get_many(&namespace, &keys)
                .await
                .map_err(|e| failure(&query.dir, e))?;
            tokio::task::spawn_blocking(move || {
                items
                    .iter()
                    .filter_map(|item| {
                        let path = VirtualPath::parse_raw(&item.meta.key).ok()?;
                        if is_reserved_path(&path) {
                            return None;
                        }
                        if item.meta.encoding == store::Encoding::Utf8 {
                            whole_file::grep_utf8_file(&path, &item.content, &query)
                        } else {
                            whole_file::grep_file(&path, &item.content, &query)
                        }
                    })
                    .collect()
            })
            .await
            .map_err(|e| Error::Unavailable {
                message: format!("grep worker failed: {e}"),
            })
        }))
    }

    /// Every item under `dir` (without content), page by page, in key order, kept only when
    /// `keep` says so.
    async fn list_under(
        &self,
        dir: &VirtualPath,
        mut keep: impl FnMut(&VirtualPath, &ItemMeta) -> bool,
    ) -> Result<Vec<Entry>> {
        let mut query = ListQuery::first(key_prefix(dir), LIST_PAGE);
        let mut out = Vec::new();
        loop {
            let page = self
                .store
                .list(&self.namespace, &query)
                .await
                .map_err(|e| failure(dir, e))?;
            let full = page.len() >= LIST_PAGE;
            for meta in &page {
                if let Ok(path) = VirtualPath::parse_raw(&meta.key)
                    && !is_reserved_path(&path)
                    && keep(&path, meta)
                {
                    out.push(file_entry(path, meta));
                }
            }
            match page.last() {
                Some(last) if full => query.start = ListStart::After(last.key.clone()),
                _ => return Ok(out),
            }
        }
    }
}

/// A file of a store written piece by piece: the store stages the chunks (see
/// [`Store::begin_upload`]); the item's encoding is learnt on the way.
#[derive(Debug)]
struct StoreFileUpload<'a> {
    backend: &'a StoreBackend,
    path: VirtualPath,
    condition: PutCondition,
    staged: Box<dyn StoreUpload>,
    utf8: Utf8Tracker,
}

#[async_trait]
impl Upload for StoreFileUpload<'_> {
    async fn append(&mut self, chunk: &[u8]) -> Result<()> {
        self.utf8.push(chunk);
        self.staged
            .append(chunk)
            .await
            .map_err(|e| failure(&self.path, e))
    }

    async fn finish(self: Box<Self>) -> Result<WriteOutcome> {
        let Self {
            backend,
            path,
            condition,
            staged,
            utf8,
        } = *self;
        // The shape may have changed while the chunks went in (a file made at a parent).
        if let Err(error) = backend.check_shape(&path).await {
            staged.abort().await;
            return Err(error);
        }
        let encoding = if utf8.is_utf8() {
            store::Encoding::Utf8
        } else {
            store::Encoding::Binary
        };
        let written = staged
            .finish(condition, encoding)
            .await
            .map_err(|e| failure(&path, e))?;
        Ok(WriteOutcome {
            version: version_of(written.version),
            created: written.created,
        })
    }

    async fn abort(self: Box<Self>) {
        self.staged.abort().await;
    }
}

#[async_trait]
impl Backend for StoreBackend {
    async fn stat(&self, path: &VirtualPath) -> Result<Option<Entry>> {
        refuse_reserved(path)?;
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
        refuse_reserved(dir)?;
        if self.head(dir).await?.is_some() {
            return Err(Error::NotADirectory { path: dir.clone() });
        }
        let prefix = key_prefix(dir);
        let mut entries = Vec::new();
        // Whether anything lies below, shown or not: a directory holding only reserved names
        // lists empty, as a memory mount's does.
        let mut held = false;
        let mut query = ListQuery::first(prefix.clone(), LS_PAGE_MIN);
        'pages: loop {
            let page = self
                .store
                .list(&self.namespace, &query)
                .await
                .map_err(|e| failure(dir, e))?;
            let full = page.len() >= query.limit;
            for meta in &page {
                let Some(rest) = meta.key.strip_prefix(&prefix) else {
                    break 'pages;
                };
                held = true;
                match rest.split_once('/') {
                    None => {
                        // A reserved name is mountfs's own, never listed (issue 41).
                        if !crate::ground::path::is_reserved_name(rest) {
                            entries.push(file_entry(VirtualPath::parse_raw(&meta.key)?, meta));
                        }
                        query.start = ListStart::After(meta.key.clone());
                    }
                    Some((child, _)) => {
                        if !crate::ground::path::is_reserved_name(child) {
                            entries.push(Entry::directory(dir.join(child)?));
                        }
                        // Seek past the child's whole subtree: its keys all start with
                        // `prefix child /`, and the successor of that bounds them.
                        let subtree = format!("{prefix}{child}/");
                        match prefix_successor(&subtree) {
                            Some(next) => query.start = ListStart::AtOrAfter(next),
                            None => break 'pages,
                        }
                        query.limit = LS_PAGE_MIN;
                        continue 'pages;
                    }
                }
            }
            if !full {
                break;
            }
            query.limit = (query.limit * 2).min(LS_PAGE_MAX);
        }
        if !held && !dir.is_root() {
            return Err(Error::NotFound { path: dir.clone() });
        }
        Ok(entries)
    }

    async fn read(&self, path: &VirtualPath) -> Result<FileBytes> {
        refuse_reserved(path)?;
        if path.is_root() {
            return Err(Error::IsADirectory { path: path.clone() });
        }
        let item = self
            .store
            .get(&self.namespace, path.as_str())
            .await
            .map_err(|e| failure(path, e))?;
        match item {
            Some(item) => Ok(FileBytes {
                content: item.content,
                version: version_of(item.meta.version),
                created: Some(item.meta.created_at),
                modified: Some(item.meta.modified_at),
            }),
            None if self.has_children(path).await? => {
                Err(Error::IsADirectory { path: path.clone() })
            }
            None => Err(Error::NotFound { path: path.clone() }),
        }
    }

    async fn read_at_most(&self, path: &VirtualPath, max_bytes: u64) -> Result<BoundedRead> {
        refuse_reserved(path)?;
        // The item's size comes from an index-only head; an oversized content is never fetched.
        if let Some(meta) = self.head(path).await?
            && meta.size > max_bytes
        {
            return Ok(BoundedRead::TooLarge {
                size: meta.size,
                version: version_of(meta.version),
            });
        }
        self.read(path).await.map(BoundedRead::Whole)
    }

    async fn read_window(&self, path: &VirtualPath, window: LineWindow) -> Result<FileView> {
        refuse_reserved(path)?;
        Ok(self.read(path).await?.into_view(window))
    }

    async fn write(
        &self,
        path: &VirtualPath,
        content: &[u8],
        mode: WriteMode,
    ) -> Result<WriteOutcome> {
        refuse_reserved(path)?;
        self.check_shape(path).await?;
        let condition = put_condition(path, mode)?;
        let written = self
            .store
            .put(&self.namespace, path.as_str(), content, condition)
            .await
            .map_err(|e| failure(path, e))?;
        Ok(WriteOutcome {
            version: version_of(written.version),
            created: written.created,
        })
    }

    async fn read_range(
        &self,
        path: &VirtualPath,
        offset: u64,
        len: usize,
        version: &Version,
    ) -> Result<Vec<u8>> {
        refuse_reserved(path)?;
        if path.is_root() {
            return Err(Error::IsADirectory { path: path.clone() });
        }
        let Ok(expected) = version.as_str().parse::<i64>() else {
            return Err(Error::VersionMismatch { path: path.clone() });
        };
        let bytes = self
            .store
            .read_range(&self.namespace, path.as_str(), offset, len, expected)
            .await
            .map_err(|e| failure(path, e))?;
        match bytes {
            Some(bytes) => Ok(bytes),
            None if self.has_children(path).await? => {
                Err(Error::IsADirectory { path: path.clone() })
            }
            None => Err(Error::NotFound { path: path.clone() }),
        }
    }

    async fn delete(&self, path: &VirtualPath, options: &DeleteOptions) -> Result<()> {
        refuse_reserved(path)?;
        let if_version = match &options.if_version {
            Some(expected) => match expected.as_str().parse::<i64>() {
                Ok(version) => Some(version),
                Err(_) => return Err(Error::VersionMismatch { path: path.clone() }),
            },
            None => None,
        };
        if !path.is_root() {
            let deleted = self
                .store
                .delete(&self.namespace, path.as_str(), if_version)
                .await
                .map_err(|e| failure(path, e))?;
            if deleted {
                return Ok(());
            }
        }
        if !options.recursive {
            return Err(if self.has_children(path).await? {
                Error::DirectoryNotEmpty { path: path.clone() }
            } else {
                Error::NotFound { path: path.clone() }
            });
        }
        let removed = self
            .store
            .delete_prefix(&self.namespace, &key_prefix(path))
            .await
            .map_err(|e| failure(path, e))?;
        if removed == 0 {
            return Err(Error::NotFound { path: path.clone() });
        }
        Ok(())
    }

    async fn glob(&self, query: &GlobQuery) -> Result<Vec<Entry>> {
        if let Some(meta) = self.head(&query.dir).await? {
            let own = query.matcher.matches_path(&query.dir, &query.dir);
            return Ok(own
                .then(|| file_entry(query.dir.clone(), &meta))
                .into_iter()
                .collect());
        }
        self.list_under(&query.dir, |path, _| {
            query.matcher.matches_path(path, &query.dir)
        })
        .await
    }

    async fn grep(&self, query: &GrepQuery) -> Result<Vec<GrepFile>> {
        let mut out = GrepResults::new(query.collect);
        let search = |out: &mut GrepResults, path: &VirtualPath, item: &store::Item| {
            let found = if item.meta.encoding == store::Encoding::Utf8 {
                whole_file::grep_utf8_file(path, &item.content, query)
            } else {
                whole_file::grep_file(path, &item.content, query)
            };
            if let Some(found) = found {
                out.push(found);
            }
        };
        if !query.dir.is_root()
            && let Some(item) = self
                .store
                .get(&self.namespace, query.dir.as_str())
                .await
                .map_err(|e| failure(&query.dir, e))?
        {
            search(&mut out, &query.dir, &item);
            return Ok(out.finish());
        }
        if self.use_index
            && let Some(plan) = store::plan::plan(&query.pattern)
        {
            let candidates = CandidateQuery {
                list: ListQuery::first(key_prefix(&query.dir), CANDIDATE_PAGE),
                plan,
                larger_than: query.pattern.max_line_bytes,
            };
            if self.grep_candidates(query, candidates, &mut out).await? {
                return Ok(out.finish());
            }
        }
        // One page of contents at a time, in key order (keyset paging, no OFFSET): the sizes
        // of the next items are listed first, and only as many as fit SCAN_PAGE_BYTES fetched.
        let mut page_query = ListQuery::first(key_prefix(&query.dir), SCAN_PAGE);
        loop {
            if query.control.stopped() {
                return Ok(out.finish());
            }
            let planned = self
                .store
                .list(&self.namespace, &page_query)
                .await
                .map_err(|e| failure(&query.dir, e))?;
            let Some(first) = planned.first() else {
                return Ok(out.finish());
            };
            let mut take = 1usize;
            let mut bytes = first.size;
            for meta in &planned[1..] {
                bytes = bytes.saturating_add(meta.size);
                if bytes > SCAN_PAGE_BYTES {
                    break;
                }
                take += 1;
            }
            let last_planned = planned[take - 1].key.clone();
            let everything_planned = planned.len() < SCAN_PAGE && take == planned.len();
            let page = self
                .store
                .scan(
                    &self.namespace,
                    &ListQuery {
                        limit: take,
                        ..page_query.clone()
                    },
                )
                .await
                .map_err(|e| failure(&query.dir, e))?;
            let last = page.last().map(|item| item.meta.key.clone());
            for item in page {
                if let Ok(path) = VirtualPath::parse_raw(&item.meta.key)
                    && !is_reserved_path(&path)
                {
                    search(&mut out, &path, &item);
                }
                if enough(query, &out) {
                    return Ok(out.finish());
                }
            }
            if everything_planned && last.as_ref().is_none_or(|k| *k >= last_planned) {
                return Ok(out.finish());
            }
            page_query.start = ListStart::After(last.unwrap_or(last_planned));
        }
    }
}

/// Nothing is kept outside memory here (undo keeps the content itself): `set_aside` and
/// `write_keeping_aside` are the defaults.
#[async_trait]
impl KeepAside for StoreBackend {
    /// A change of several files is one database transaction ([`Store::apply_batch`]): a crash
    /// leaves all of it or none, with nothing to resolve at the next start.
    async fn begin_changes(
        &self,
        files: &[super::PlannedFile],
        _role: &super::JournalRole,
    ) -> Result<Option<Box<dyn super::ChangeJournal>>> {
        Ok(Some(Box::new(StoreTransaction {
            backend: self.clone(),
            paths: files.iter().map(|f| f.path.clone()).collect(),
        })))
    }
}

#[async_trait]
impl Rename for StoreBackend {
    async fn rename(
        &self,
        from: &VirtualPath,
        to: &VirtualPath,
        options: &RenameOptions,
    ) -> Result<Option<Renamed>> {
        refuse_reserved(from)?;
        refuse_reserved(to)?;
        // The shape checks are reads before the transaction, as for writes (see the module
        // doc); what is at `to` and the versions are checked in the database.
        let target = key_shape::check_move(self, from, to).await?;
        let parse = |version: &Option<Version>, path: &VirtualPath| -> Result<Option<i64>> {
            match version {
                None => Ok(None),
                Some(v) => v
                    .as_str()
                    .parse::<i64>()
                    .map(Some)
                    .map_err(|_| Error::VersionMismatch { path: path.clone() }),
            }
        };
        let if_version = parse(&options.if_version, from)?;
        let replacing = parse(&options.replacing, to)?;
        if self.head(from).await?.is_some() {
            let renamed = self
                .store
                .rename(
                    &self.namespace,
                    from.as_str(),
                    to.as_str(),
                    if_version,
                    replacing,
                )
                .await;
            let renamed = match renamed {
                Ok(renamed) => renamed,
                Err(store::Error::VersionMismatch) => {
                    // Which side moved on is told by a second look at the destination.
                    let target_moved = match replacing {
                        Some(expected) => {
                            self.head(to).await?.is_none_or(|m| m.version != expected)
                        }
                        None => false,
                    };
                    let path = if target_moved { to } else { from };
                    return Err(Error::VersionMismatch { path: path.clone() });
                }
                Err(store::Error::AlreadyExists) => {
                    return Err(Error::AlreadyExists { path: to.clone() });
                }
                Err(other) => return Err(failure(from, other)),
            };
            return match renamed {
                Some(version) => Ok(Some(Renamed {
                    kind: EntryKind::File,
                    version: Some(version_of(version)),
                })),
                None => Err(Error::NotFound { path: from.clone() }),
            };
        }
        if !self.has_children(from).await? {
            return Err(Error::NotFound { path: from.clone() });
        }
        if if_version.is_some() {
            return Err(Error::VersionMismatch { path: from.clone() });
        }
        if target.is_some() {
            return Err(Error::AlreadyExists { path: to.clone() });
        }
        let moved = self
            .store
            .rename_prefix(
                &self.namespace,
                &key_prefix(from),
                &key_prefix(to),
                to.as_str(),
            )
            .await
            .map_err(|e| match e {
                store::Error::AlreadyExists => Error::AlreadyExists { path: to.clone() },
                other => failure(from, other),
            })?;
        if moved == 0 {
            return Err(Error::NotFound { path: from.clone() });
        }
        Ok(Some(Renamed {
            kind: EntryKind::Directory,
            version: None,
        }))
    }
}

/// No permission bits are kept; a path names one file only: no links, no case folding.
impl Posix for StoreBackend {}

/// No directory on disk is behind these files.
impl HostDir for StoreBackend {}

#[async_trait]
impl Uploads for StoreBackend {
    async fn check_upload_size(&self, path: &VirtualPath, size: u64) -> Result<()> {
        match self.store.largest_value() {
            Some((largest, limit)) if size > largest => Err(Error::Unsupported {
                path: path.clone(),
                reason: format!(
                    "{size} bytes is more than this store holds in one file: {largest} bytes at most ({limit}). Keep the file on a disk mount, or split it"
                ),
            }),
            _ => Ok(()),
        }
    }

    async fn begin_upload(
        &self,
        path: &VirtualPath,
        mode: WriteMode,
    ) -> Result<Box<dyn Upload + '_>> {
        refuse_reserved(path)?;
        self.check_shape(path).await?;
        let condition = put_condition(path, mode)?;
        // Checked now so that a copy that cannot land sends nothing; checked again, in the
        // database, by the statement that puts the content.
        let current = self.head(path).await?;
        match (condition, &current) {
            (PutCondition::CreateOnly, Some(_)) => {
                return Err(Error::AlreadyExists { path: path.clone() });
            }
            (PutCondition::IfVersion(expected), Some(meta)) if meta.version != expected => {
                return Err(Error::VersionMismatch { path: path.clone() });
            }
            (PutCondition::IfVersion(_), None) => {
                return Err(Error::VersionMismatch { path: path.clone() });
            }
            _ => {}
        }
        let staged = self
            .store
            .begin_upload(&self.namespace, path.as_str())
            .await
            .map_err(|e| failure(path, e))?;
        Ok(Box::new(StoreFileUpload {
            backend: self,
            path: path.clone(),
            condition,
            staged,
            utf8: Utf8Tracker::default(),
        }))
    }
}

/// Whether `out`, the files found in key order so far, holds all the answer needs (see
/// [`crate::ground::search::SearchControl::first_files`]); if so, says that more may match.
fn enough(query: &GrepQuery, out: &GrepResults) -> bool {
    let enough = query
        .control
        .first_files()
        .is_some_and(|wanted| out.matched() >= wanted);
    if enough {
        query.control.note_more_files();
    }
    enough
}

/// One group of an indexed grep's candidates being fetched and matched (see
/// [`StoreBackend::grep_candidates`]); stopped when dropped (a cancelled or failed search).
struct GroupTask(tokio::task::JoinHandle<Result<Vec<GrepFile>>>);

impl GroupTask {
    /// Waits for the group and adds what it found to `out`.
    async fn finish(mut self, out: &mut GrepResults) -> Result<()> {
        let found = (&mut self.0).await.map_err(|e| Error::Unavailable {
            message: format!("grep worker failed: {e}"),
        })??;
        for file in found {
            out.push(file);
        }
        Ok(())
    }
}

impl Drop for GroupTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The store's condition for a write of `path` in `mode`.
fn put_condition(path: &VirtualPath, mode: WriteMode) -> Result<PutCondition> {
    Ok(match mode {
        WriteMode::CreateOnly => PutCondition::CreateOnly,
        WriteMode::Overwrite => PutCondition::Overwrite,
        WriteMode::IfVersion(expected) => match expected.as_str().parse::<i64>() {
            Ok(version) => PutCondition::IfVersion(version),
            // Not a version this store ever gave out: it cannot be the current one.
            Err(_) => return Err(Error::VersionMismatch { path: path.clone() }),
        },
    })
}

#[async_trait]
impl key_shape::Keys for StoreBackend {
    type Meta = ItemMeta;

    async fn file(&self, path: &VirtualPath) -> Result<Option<ItemMeta>> {
        self.head(path).await
    }

    async fn has_children(&self, dir: &VirtualPath) -> Result<bool> {
        StoreBackend::has_children(self, dir).await
    }
}
