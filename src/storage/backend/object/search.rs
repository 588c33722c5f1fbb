//! `grep` on an object mount: the keys under the searched directory are listed as a stream;
//! each object the file filter keeps is fetched by a task of its own and searched whole with
//! the matcher every whole-file backend uses (`whole_file::grep_file`), at most
//! [`IN_FLIGHT`] objects and [`IN_FLIGHT_BYTES`] bytes at once, and the results are taken in
//! listing (key) order, so an answer that needs only its first files stops early. An object
//! over [`WHOLE_SEARCH_BYTES`] is not held whole: its GET is streamed through the disk mount's
//! searcher (`search_reader`: the same binary sniff, encodings, line bound and answer) a few
//! network chunks at a time, and counts as [`STREAMED_BYTES`] in flight. Memory never holds
//! more than the bytes in flight, however big the bucket or its objects.

use std::collections::VecDeque;

use object_store::{ObjectMeta, ObjectStoreExt};

use super::ObjectBackend;
use crate::ground::path::VirtualPath;
use crate::storage::backend::disk::{Searchers, search_reader};
use crate::storage::backend::whole_file;
use crate::storage::backend::{Error, GrepFile, GrepQuery, GrepResults, Result};

/// Objects fetched and searched at once.
const IN_FLIGHT: usize = 8;
/// Most bytes of objects being fetched or searched at once (at least one object).
const IN_FLIGHT_BYTES: u64 = 64 * 1024 * 1024;
/// Largest object fetched whole and searched in memory; a bigger one is streamed.
const WHOLE_SEARCH_BYTES: u64 = 32 * 1024 * 1024;
/// What one streamed object counts for in [`IN_FLIGHT_BYTES`]: the network chunks queued for
/// its searcher ([`CHUNKS_QUEUED`] of them, tens of KiB each) and the searcher's buffer.
const STREAMED_BYTES: u64 = 4 * 1024 * 1024;
/// Network chunks of a streamed object waiting for its searcher.
const CHUNKS_QUEUED: usize = 16;
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
                        bytes_running + held_bytes(m.size) <= IN_FLIGHT_BYTES
                    }));
            if room && let Some((path, meta)) = pending.pop_front() {
                let size = held_bytes(meta.size);
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

    /// Fetches one object and searches it (streamed when big).
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
        if meta.size > WHOLE_SEARCH_BYTES {
            return self.search_streamed(query, path).await;
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

    /// Searches one big object as its GET streams in: the body's chunks go to the disk
    /// mount's searcher on a blocking thread through a queue of [`CHUNKS_QUEUED`], so memory
    /// holds those chunks and the searcher's buffer (its line bound), whatever the size. The
    /// GET stops when the searcher is done (a line over the bound) or the search is stopped.
    async fn search_streamed(
        &self,
        query: &GrepQuery,
        path: VirtualPath,
    ) -> Result<Option<GrepFile>> {
        use futures_util::StreamExt;
        let Some(matcher) = query.pattern.line_matcher() else {
            return Ok(None);
        };
        let got = match self.store.get(&self.key(&path)?).await {
            Ok(got) => got,
            Err(error) => {
                return match self.fail(&path, error) {
                    // Deleted since it was listed: not there to search.
                    Error::NotFound { .. } => Ok(None),
                    other => Err(other),
                };
            }
        };
        let size = got.meta.size;
        let mut body = got.into_stream();
        let (sender, chunks) = tokio::sync::mpsc::channel(CHUNKS_QUEUED);
        let search = {
            let (matcher, pattern, collect) =
                (matcher.clone(), query.pattern.clone(), query.collect);
            let shown = path.clone();
            tokio::task::spawn_blocking(move || {
                let mut searchers = Searchers::new(collect, &pattern);
                let reader = ChunkReader {
                    chunks,
                    current: bytes::Bytes::new(),
                };
                search_reader(reader, size, &mut searchers, &matcher, collect, || {
                    Some(shown)
                })
            })
        };
        let mut failed = None;
        while !query.control.stopped() {
            match body.next().await {
                Some(Ok(chunk)) => {
                    // The searcher is done before the end (a line over the bound).
                    if sender.send(chunk).await.is_err() {
                        break;
                    }
                }
                Some(Err(error)) => {
                    failed = Some(self.fail(&path, error));
                    break;
                }
                None => break,
            }
        }
        drop((sender, body));
        let found = search.await.map_err(|e| Error::Unavailable {
            message: format!("grep worker failed: {e}"),
        })?;
        if let Some(error) = failed {
            return Err(error);
        }
        query.control.count_file(found.is_some());
        Ok(found)
    }
}

/// What an object counts for in the bytes in flight: its size when fetched whole, the
/// streaming bound when streamed.
fn held_bytes(size: u64) -> u64 {
    if size > WHOLE_SEARCH_BYTES {
        STREAMED_BYTES
    } else {
        size
    }
}

/// The body of a streamed GET as a blocking reader, for the searcher's thread.
struct ChunkReader {
    chunks: tokio::sync::mpsc::Receiver<bytes::Bytes>,
    current: bytes::Bytes,
}

impl std::io::Read for ChunkReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.current.is_empty() {
            match self.chunks.blocking_recv() {
                Some(chunk) => self.current = chunk,
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current[..n]);
        bytes::Buf::advance(&mut self.current, n);
        Ok(n)
    }
}
