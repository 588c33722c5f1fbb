//! `grep` on an object mount: the keys under the searched directory are listed as a stream;
//! each object the file filter keeps is fetched by a task of its own and searched whole with
//! the matcher every whole-file backend uses (`whole_file::grep_file`), at most
//! [`IN_FLIGHT`] objects and [`IN_FLIGHT_BYTES`] bytes at once, and the results are taken in
//! listing (key) order, so an answer that needs only its first files stops early. An object
//! over [`SEARCHED_BYTES`] is reported as skipped, with the reason, not read: memory never
//! holds more than the bytes in flight, however big the bucket or its objects.

use std::collections::VecDeque;

use object_store::ObjectMeta;

use super::ObjectBackend;
use crate::backend::whole_file;
use crate::backend::{Error, GrepFile, GrepQuery, GrepResults, Result};
use crate::path::VirtualPath;

/// Objects fetched and searched at once.
const IN_FLIGHT: usize = 8;
/// Most bytes of objects being fetched or searched at once (at least one object).
const IN_FLIGHT_BYTES: u64 = 64 * 1024 * 1024;
/// Largest object searched; a bigger one is skipped with a note.
const SEARCHED_BYTES: u64 = 32 * 1024 * 1024;
/// Objects listed ahead of the searches (a page of the store's listing).
const LISTED_AHEAD: usize = 1000;

/// One object being fetched and searched.
struct Search {
    size: u64,
    task: tokio::task::JoinHandle<Result<Option<GrepFile>>>,
}

impl Drop for Search {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ObjectBackend {
    /// See the module doc.
    pub(super) async fn grep_keys(&self, query: &GrepQuery) -> Result<Vec<GrepFile>> {
        let mut out = GrepResults::new(query.collect);
        if let Some(meta) = self.head(&query.dir).await? {
            let file = self.search_one(query, query.dir.clone(), meta).await?;
            if let Some(file) = file {
                out.push(file);
            }
            return Ok(out.finish());
        }
        // Listed a page at a time (the listing's own paging), searched as listed.
        let mut pending: VecDeque<(VirtualPath, ObjectMeta)> = VecDeque::new();
        let mut after: Option<object_store::path::Path> = None;
        let mut listed_all = false;
        let mut running: VecDeque<Search> = VecDeque::new();
        let mut bytes_running = 0u64;
        loop {
            if query.control.stopped() {
                return Ok(out.finish());
            }
            if pending.is_empty() && !listed_all {
                let (page, last, done) = self.list_page(&query.dir, after.as_ref()).await?;
                after = last;
                listed_all = done;
                for (path, meta) in page {
                    let kept = query
                        .file_filter
                        .as_ref()
                        .is_none_or(|filter| filter.matches_path(&path, &query.dir));
                    if kept {
                        pending.push_back((path, meta));
                    }
                }
                if !pending.is_empty() || !listed_all {
                    continue;
                }
            }
            let room = running.len() < IN_FLIGHT
                && (running.is_empty()
                    || pending.front().is_some_and(|(_, m)| {
                        bytes_running + m.size.min(SEARCHED_BYTES) <= IN_FLIGHT_BYTES
                    }));
            if room && let Some((path, meta)) = pending.pop_front() {
                let size = meta.size.min(SEARCHED_BYTES);
                bytes_running += size;
                let (backend, query) = (self.clone(), query.clone());
                running.push_back(Search {
                    size,
                    task: tokio::spawn(async move { backend.search_one(&query, path, meta).await }),
                });
                continue;
            }
            let Some(mut oldest) = running.pop_front() else {
                return Ok(out.finish());
            };
            bytes_running -= oldest.size;
            let found = (&mut oldest.task).await.map_err(|e| Error::Unavailable {
                message: format!("grep worker failed: {e}"),
            })??;
            if let Some(file) = found {
                out.push(file);
            }
            if query
                .control
                .first_files()
                .is_some_and(|wanted| out.matched() >= wanted)
            {
                query.control.note_more_files();
                return Ok(out.finish());
            }
        }
    }

    /// One page of the keys under `dir` after `after`, in key order: the files the mount can
    /// name, the last key listed, and whether the listing is done.
    async fn list_page(
        &self,
        dir: &VirtualPath,
        after: Option<&object_store::path::Path>,
    ) -> Result<(
        Vec<(VirtualPath, ObjectMeta)>,
        Option<object_store::path::Path>,
        bool,
    )> {
        use futures_util::StreamExt;
        let prefix = self.prefix.dir_key(dir)?;
        let mut listing = match after {
            Some(offset) => self.store.list_with_offset(prefix.as_ref(), offset),
            None => self.store.list(prefix.as_ref()),
        };
        let mut page = Vec::new();
        let mut last = after.cloned();
        let mut count = 0usize;
        while count < LISTED_AHEAD {
            let Some(meta) = listing.next().await else {
                return Ok((page, last, true));
            };
            let meta = meta.map_err(|e| self.fail(dir, e))?;
            count += 1;
            last = Some(meta.location.clone());
            if let Some(path) = self.prefix.path_of(&meta.location)
                && path != *dir
            {
                page.push((path, meta));
            }
        }
        Ok((page, last, false))
    }

    /// Fetches one object and searches it (skipped, with why, when too big).
    async fn search_one(
        &self,
        query: &GrepQuery,
        path: VirtualPath,
        meta: ObjectMeta,
    ) -> Result<Option<GrepFile>> {
        if let Some(filter) = &query.file_filter
            && !filter.matches_path(&path, &query.dir)
        {
            return Ok(None);
        }
        if meta.size > SEARCHED_BYTES {
            return Ok(Some(GrepFile::skipped(
                path,
                format!(
                    "{} bytes is more than grep reads of one object ({SEARCHED_BYTES} bytes); read it with read_file windows",
                    meta.size
                ),
            )));
        }
        let content = match self.get(&path, None, None).await {
            Ok((_, content)) => content,
            // Deleted since it was listed: not there to search.
            Err(Error::NotFound { .. }) => return Ok(None),
            Err(error) => return Err(error),
        };
        let query = query.clone();
        tokio::task::spawn_blocking(move || whole_file::grep_file(&path, &content, &query))
            .await
            .map_err(|e| Error::Unavailable {
                message: format!("grep worker failed: {e}"),
            })
    }
}
