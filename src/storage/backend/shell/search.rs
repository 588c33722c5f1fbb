//! Glob and grep on a shell mount: the files listed on the target in batches, a grep narrowed
//! there (its own `rg` or `grep -E`, bounded in time) to candidates read back in batches or
//! streamed in chunks, and searched here with the one line matcher every engine uses.

use super::*;

/// Candidate files of a grep read back per call.
pub(super) const GREP_READ_BATCH: usize = 64;

/// Largest grep candidate read whole (in a batch); a bigger one is streamed in chunks through
/// the disk mount's searcher, so the memory a grep needs does not grow with a file's size.
pub(super) const GREP_WHOLE_LIMIT: u64 = 1024 * 1024;

/// Most bytes of file contents one batch of grep candidates carries back.
pub(super) const GREP_BATCH_BYTES: u64 = 4 * 1024 * 1024;

/// A streamed candidate is fetched in chunks of this many blocks of [`GREP_BLOCK`] bytes.
pub(super) const GREP_CHUNK_BLOCKS: u64 = 16;

/// The block size of the target's `dd` for chunks.
pub(super) const GREP_BLOCK: u64 = 64 * 1024;

/// Chunks of a streamed candidate on their way to the searcher at once.
pub(super) const GREP_CHUNKS_IN_FLIGHT: usize = 2;

/// What one search of the target looks for (see [`ShellBackend::candidates`]).
#[derive(Debug)]
pub(super) enum TargetSearch {
    /// Files holding any of these ASCII texts (`prefilter`).
    Texts { texts: Vec<String>, fold_case: bool },
    /// Plain files with a line matching this, and every file that is not plain
    /// (`line_regex`).
    Lines(LineRegex),
    /// Clean files (valid UTF-8, no NUL, `\r` nor BOM) with a line matching this in Unicode
    /// mode, and every file that is not clean (`utf8_regex`; `rg` only).
    Utf8(Utf8Regex),
}

/// Longest a search of the target (`gp`: `rg`, `grep`, `find`) may run before the server
/// stops waiting: its connection is dropped, the target's watcher kills what it started, and
/// every file is read back and judged here instead (the matcher here is linear; a target's
/// `grep -E` over a long line need not be).
pub const TARGET_SEARCH_BOUND: Duration = Duration::from_secs(30);

/// The batches of `gl`'s output (after its `D` line): each is its names, each ended by a NUL,
/// an empty name (one more NUL), then exactly one meta line per name. The format needs no
/// secret marker, so the helper shell that prints it is never given the connection's nonce
/// (a command line is readable by every user of the target). Returns (names, meta lines) per
/// batch, or `None` when the stream does not have that shape.
pub(super) fn glob_batches(mut stream: &[u8]) -> Option<Vec<(&[u8], &[u8])>> {
    let mut batches = Vec::new();
    while !stream.is_empty() {
        let mut names_end = 0;
        let mut count = 0usize;
        loop {
            let rest = &stream[names_end..];
            let nul = memchr::memchr(0, rest)?;
            if nul == 0 {
                break;
            }
            names_end += nul + 1;
            count += 1;
        }
        let names = &stream[..names_end];
        let mut metas_end = names_end + 1;
        for _ in 0..count {
            let newline = memchr::memchr(b'\n', &stream[metas_end..])?;
            metas_end += newline + 1;
        }
        batches.push((names, &stream[names_end + 1..metas_end]));
        stream = &stream[metas_end..];
    }
    Some(batches)
}

/// What one `rm_` batch answered (see [`split_batch`]).
pub(super) struct Batch<'a> {
    /// The files read whole, with their bytes.
    pub(super) whole: Vec<(&'a VirtualPath, &'a [u8])>,
    /// Files over [`GREP_WHOLE_LIMIT`], to stream in chunks.
    pub(super) big: Vec<&'a VirtualPath>,
    /// Files left for a later batch (this one's bytes reached [`GREP_BATCH_BYTES`]).
    pub(super) deferred: Vec<&'a VirtualPath>,
}

/// The answer of one `rm_` batch: a flag per path (`0` not a regular file, `1` read, `2` big,
/// `3` deferred), the sizes of the files read as `stat` gave them before the `cat`, their
/// bytes (cut at the sum of those sizes), and their sizes again after it. `None` when the
/// answer does not add up (a file changed in between).
pub(super) fn split_batch<'a>(batch: &'a [VirtualPath], reply: &'a Reply) -> Option<Batch<'a>> {
    let parts = reply.parts(4);
    let [flags, sizes, content, after] = parts.as_slice() else {
        return None;
    };
    let lines = |text: &'a [u8]| {
        text.split(|b| *b == b'\n')
            .map(trimmed)
            .filter(|l| !l.is_empty())
    };
    let flags: Vec<&[u8]> = lines(flags).collect();
    let sizes: Vec<usize> = lines(sizes)
        .map(|l| std::str::from_utf8(l).ok()?.parse().ok())
        .collect::<Option<_>>()?;
    let after: Vec<&[u8]> = lines(after).collect();
    if flags.len() != batch.len()
        || after.len() != sizes.len()
        || sizes.iter().sum::<usize>() != content.len()
        || sizes
            .iter()
            .zip(&after)
            .any(|(size, again)| size.to_string().as_bytes() != *again)
    {
        return None;
    }
    let mut out = Batch {
        whole: Vec::new(),
        big: Vec::new(),
        deferred: Vec::new(),
    };
    let mut sizes = sizes.into_iter();
    let mut at = 0usize;
    for (path, flag) in batch.iter().zip(flags) {
        match flag {
            b"1" => {
                let size = sizes.next()?;
                out.whole.push((path, &content[at..at + size]));
                at += size;
            }
            b"2" => out.big.push(path),
            b"3" => out.deferred.push(path),
            _ => {}
        }
    }
    Some(out)
}

/// Hands the chunks of a streamed grep candidate to the searcher on its blocking thread: the
/// end of the channel is the end of the file.
pub(super) struct ChunkReader {
    pub(super) chunks: tokio::sync::mpsc::Receiver<Vec<u8>>,
    pub(super) current: Vec<u8>,
    pub(super) at: usize,
}

impl std::io::Read for ChunkReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.at >= self.current.len() {
            match self.chunks.blocking_recv() {
                Some(chunk) => {
                    self.current = chunk;
                    self.at = 0;
                }
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len() - self.at);
        buf[..n].copy_from_slice(&self.current[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

impl ShellBackend {
    /// [`Backend::grep`] on the target: its own search where it has one (narrowed by the
    /// prefilter), else the files read in batches and searched here.
    pub(super) async fn grep_files(&self, query: &GrepQuery) -> Result<Vec<GrepFile>> {
        if query.pattern.line_matcher().is_none() {
            // A pattern that can only match a line break never matches within one line.
            return Ok(Vec::new());
        }
        let Some(meta) = self.meta(&query.dir).await? else {
            return Ok(Vec::new());
        };
        let candidates = match meta.kind() {
            Some(EntryKind::File) => vec![query.dir.clone()],
            Some(EntryKind::Directory) => match self.candidates(query).await? {
                Some(paths) => paths,
                None => self
                    .files_under(&query.dir, &query.control)
                    .await?
                    .into_iter()
                    .map(|entry| entry.path)
                    .collect(),
            },
            None => return Ok(Vec::new()),
        };
        let candidates: Vec<VirtualPath> = candidates
            .into_iter()
            .filter(|path| {
                query
                    .file_filter
                    .as_ref()
                    .is_none_or(|filter| filter.matches_path(path, &query.dir))
            })
            .collect();
        let mut out = GrepResults::new(query.collect);
        // Small candidates are read back in batches of at most GREP_BATCH_BYTES, one call each
        // (a call per file costs a round trip per file); a big one, a name with a newline, or
        // a file that changed while its batch was read is streamed in chunks on its own.
        let (plain, mut streamed): (Vec<VirtualPath>, Vec<VirtualPath>) = candidates
            .into_iter()
            .partition(|path| !path.as_str().contains('\n'));
        let mut queue: std::collections::VecDeque<VirtualPath> = plain.into();
        while !queue.is_empty() {
            if query.control.stopped() {
                break;
            }
            let batch: Vec<VirtualPath> = queue.drain(..queue.len().min(GREP_READ_BATCH)).collect();
            let mut frame = Frame::call("rm_")
                .arg(batch.len())
                .arg(GREP_WHOLE_LIMIT)
                .arg(GREP_BATCH_BYTES);
            for path in &batch {
                frame = frame.line_payload(relative(path));
            }
            let reply = self.call_at(&query.dir, frame).await?;
            let Some(read) = split_batch(&batch, &reply) else {
                // A file changed size while the batch was read.
                streamed.extend(batch);
                continue;
            };
            for (path, content) in read.whole {
                if let Some(found) = grep_file(path, content, query) {
                    out.push(found);
                }
            }
            streamed.extend(read.big.into_iter().cloned());
            for path in read.deferred.into_iter().rev() {
                queue.push_front(path.clone());
            }
        }
        for path in streamed {
            if query.control.stopped() {
                break;
            }
            if let Some(found) = self.grep_streamed(&path, query).await? {
                out.push(found);
            }
        }
        Ok(out.finish())
    }
}

impl ShellBackend {
    /// The entries of one listing batch under `dir` (names relative to it, maybe `./`-led).
    pub(super) fn batch_entries(
        &self,
        dir: &VirtualPath,
        names: &[u8],
        metas: &[u8],
        out: &mut Vec<Entry>,
    ) -> Result<()> {
        let pairs = pair_batch(names, metas).ok_or_else(|| Error::Io {
            path: dir.clone(),
            message: "the directory changed while it was listed; retry".to_owned(),
        })?;
        for (name, meta) in pairs {
            let Ok(name) = std::str::from_utf8(name) else {
                // A name that is not UTF-8 has no virtual path.
                continue;
            };
            let name = name.strip_prefix("./").unwrap_or(name);
            if name.split('/').any(hidden) {
                continue;
            }
            let (Some(meta), Ok(path)) = (meta, dir.join_relative(name)) else {
                continue;
            };
            if let Some(entry) = meta.entry(path) {
                out.push(entry);
            }
        }
        Ok(())
    }

    /// Every file below `dir` (or `dir` itself when it is a file), with `.git/` skipped.
    pub(super) async fn files_under(
        &self,
        dir: &VirtualPath,
        control: &SearchControl,
    ) -> Result<Vec<Entry>> {
        let Some(reply) = self
            .bounded(Frame::call("gl").path(relative(dir)), dir, control, "walk")
            .await?
        else {
            return Ok(Vec::new());
        };
        match reply.status {
            0 => {}
            status::NOT_FOUND => return Ok(Vec::new()),
            _ => return Err(self.failure(dir, &reply)),
        }
        let mut out = Vec::new();
        if let Some(rest) = reply.stdout.strip_prefix(b"F\n") {
            if let Some(entry) = Meta::parse(trimmed(rest)).and_then(|m| m.entry(dir.clone())) {
                out.push(entry);
            }
            return Ok(out);
        }
        let stream = reply.stdout.strip_prefix(b"D\n").unwrap_or(&reply.stdout);
        let batches = glob_batches(stream).ok_or_else(|| Error::Io {
            path: dir.clone(),
            message: "the target's file list was cut short or malformed; retry".to_owned(),
        })?;
        for (names, metas) in batches {
            self.batch_entries(dir, names, metas, &mut out)?;
        }
        Ok(out)
    }

    /// Runs `frame`, a walk or listing of `dir` that runs under the target's watcher (`bw`), as
    /// a search is: `None` when `control` is cancelled; an error naming the bound when it runs
    /// past [`TARGET_SEARCH_BOUND`]. Either way the call's future is dropped, which drops its
    /// connection, and the target's watcher kills what it started.
    pub(super) async fn bounded(
        &self,
        frame: Frame,
        dir: &VirtualPath,
        control: &SearchControl,
        what: &str,
    ) -> Result<Option<Reply>> {
        tokio::select! {
            reply = self.call(frame) => reply.map(Some),
            () = control.cancelled() => Ok(None),
            () = tokio::time::sleep(self.search_bound) => Err(Error::Io {
                path: dir.clone(),
                message: format!(
                    "the {what} of this directory on the target of shell '{}' ran past its bound of {} s and was stopped (nothing is left running there); name a smaller directory, or narrow the pattern",
                    self.name,
                    self.search_bound.as_secs()
                ),
            }),
        }
    }

    /// The files of `dir` that the target's search tools say may match; `None` when nothing
    /// narrows the search. The rewritten regex (`line_regex`) judges the plain files and
    /// passes every other one; the fixed texts (`prefilter`) then narrow those others, when
    /// the pattern has texts and the regex left more than one batch of files to read. Both
    /// lists hold every file that can match, and so does what they share.
    pub(super) async fn candidates(&self, query: &GrepQuery) -> Result<Option<Vec<VirtualPath>>> {
        let caps = self.pool.caps().map(|(caps, _)| caps).unwrap_or_default();
        // `rg` judges every clean UTF-8 file (`utf8_regex`); `grep -E`, in the C locale, only
        // the plain ASCII ones (`line_regex`), as `rg` does when the pattern is too big to
        // send written out in Unicode ranges.
        let search = if caps.rg {
            utf8_regex::utf8_regex(&query.pattern)
                .map(TargetSearch::Utf8)
                .or_else(|| line_regex::line_regex(&query.pattern).map(TargetSearch::Lines))
        } else if caps.grep_regex {
            line_regex::line_regex(&query.pattern).map(TargetSearch::Lines)
        } else {
            None
        };
        let mut found = match search {
            Some(search) => self.target_search(query, search, caps.rg).await?,
            None => None,
        };
        if found
            .as_ref()
            .is_none_or(|paths| paths.len() > GREP_READ_BATCH)
            && let Plan::Texts { texts, fold_case } = prefilter::plan(&query.pattern)
            && let Some(by_texts) = self
                .target_search(query, TargetSearch::Texts { texts, fold_case }, caps.rg)
                .await?
        {
            found = Some(match found {
                Some(mut paths) => {
                    paths.retain(|path| by_texts.binary_search(path).is_ok());
                    paths
                }
                None => by_texts,
            });
        }
        Ok(found)
    }

    /// The files of `dir` one search of the target finds (`gp`), sorted; `None` when the
    /// target's tool failed (its list may be short: every file is read instead).
    pub(super) async fn target_search(
        &self,
        query: &GrepQuery,
        search: TargetSearch,
        rg: bool,
    ) -> Result<Option<Vec<VirtualPath>>> {
        let tool = if rg { "r" } else { "g" };
        let mut payload = Vec::new();
        // The script's mode word: `x` a regex (and the weird-byte line), `i` fixed texts
        // compared without (ASCII) case, `-` fixed texts.
        let mode = match &search {
            TargetSearch::Texts { texts, fold_case } => {
                for text in texts {
                    payload.extend_from_slice(text.as_bytes());
                    payload.push(b'\n');
                }
                if !rg {
                    // `grep` sees no ASCII text in UTF-16: every file with a UTF-16 BOM is a
                    // candidate (`rg` transcodes those itself).
                    payload.extend_from_slice(b"\xff\xfe\n\xfe\xff\n");
                }
                if *fold_case { "i" } else { "-" }
            }
            TargetSearch::Lines(lines) => {
                if let LineRegex::Pattern { ere, rust } = lines {
                    payload.extend_from_slice(if rg { rust } else { ere }.as_bytes());
                    payload.push(b'\n');
                }
                let weird = if rg {
                    line_regex::WEIRD_RUST
                } else {
                    line_regex::WEIRD_ERE
                };
                payload.extend_from_slice(weird.as_bytes());
                payload.push(b'\n');
                "x"
            }
            TargetSearch::Utf8(utf8) => {
                if let Utf8Regex::Pattern(rust) = utf8 {
                    payload.extend_from_slice(rust.as_bytes());
                    payload.push(b'\n');
                }
                payload.extend_from_slice(utf8_regex::NOT_CLEAN.as_bytes());
                payload.push(b'\n');
                "x"
            }
        };
        // A file longer than the line bound may hold a line over it, which the answer reports
        // as skipped whatever it holds: every such file is a candidate (as a store's are).
        let long = query.pattern.max_line_bytes.min(1 << 50);
        let frame = Frame::call("gp")
            .path(relative(&query.dir))
            .arg(payload.len())
            .arg(mode)
            .arg(tool)
            .arg(long)
            .raw(&payload);
        // Cancelled, or past the bound: the call's future is dropped here, which drops its
        // connection; the target's watcher (`bw`) then kills the search's processes.
        let reply = tokio::select! {
            reply = self.call(frame) => reply?,
            () = query.control.cancelled() => return Ok(Some(Vec::new())),
            () = tokio::time::sleep(self.search_bound) => {
                tracing::debug!(shell = %self.name, "a search of the target passed its bound; every file is read instead");
                return Ok(None);
            }
        };
        match reply.status {
            0 => {}
            status::NOT_FOUND => return Ok(Some(Vec::new())),
            _ => return Err(self.failure(&query.dir, &reply)),
        }
        // The names, a mark, the names holding a newline (`grep` lists one a line), the files
        // over the line bound.
        let parts = reply.parts(4);
        let [found, mark, with_newlines, long_files] = parts.as_slice() else {
            return Err(self.malformed(&query.dir, "grep"));
        };
        // `E`: the tool failed (exit 2: a pattern its regex engine rejects — an older `rg`
        // than this crate's — or a file it could not read): its list may miss files, so
        // every file is read instead, never a silently short answer.
        if trimmed(mark) == b"E" {
            return Ok(None);
        }
        let mut names: Vec<&[u8]> = Vec::new();
        if rg {
            names.extend(found.split(|b| *b == 0));
        } else {
            names.extend(found.split(|b| *b == b'\n'));
        }
        names.extend(with_newlines.split(|b| *b == 0));
        names.extend(long_files.split(|b| *b == 0));
        let mut paths: Vec<VirtualPath> = names
            .into_iter()
            .filter(|n| !n.is_empty())
            .filter_map(|n| std::str::from_utf8(n).ok())
            .map(|n| n.strip_prefix("./").unwrap_or(n))
            .filter(|n| !n.split('/').any(hidden))
            .filter_map(|n| query.dir.join_relative(n).ok())
            .collect();
        paths.sort();
        paths.dedup();
        Ok(Some(paths))
    }

    /// One chunk of a streamed grep candidate: its metadata and up to
    /// `GREP_CHUNK_BLOCKS * GREP_BLOCK` bytes from block `skip`; `None` when it is gone or no
    /// longer a regular file.
    pub(super) async fn grep_chunk(
        &self,
        path: &VirtualPath,
        skip: u64,
    ) -> Result<Option<(Meta, Vec<u8>)>> {
        let frame = Frame::call("gk")
            .path(relative(path))
            .arg(skip)
            .arg(GREP_CHUNK_BLOCKS);
        let reply = self.call(frame).await?;
        match reply.status {
            0 => {}
            status::NOT_FOUND | status::IS_A_DIRECTORY | status::UNSUPPORTED => return Ok(None),
            _ => return Err(self.failure(path, &reply)),
        }
        let parts = reply.parts(2);
        let (Some(meta), Some(bytes)) = (
            parts.first().and_then(|m| Meta::parse(trimmed(m))),
            parts.get(1),
        ) else {
            return Err(self.malformed(path, "grep"));
        };
        Ok(Some((meta, bytes.to_vec())))
    }

    /// Greps one candidate streamed in chunks through the disk mount's searcher (its binary
    /// sniff, encodings, line bound and answer), so at most a few chunks and one line bound
    /// are held, whatever the file's size (a self-contained range read: `gk` on the target).
    pub(super) async fn grep_streamed(
        &self,
        path: &VirtualPath,
        query: &GrepQuery,
    ) -> Result<Option<GrepFile>> {
        let Some(matcher) = query.pattern.line_matcher() else {
            return Ok(None);
        };
        let Some((meta, first)) = self.grep_chunk(path, 0).await? else {
            return Ok(None);
        };
        let chunk_bytes = usize::try_from(GREP_CHUNK_BLOCKS * GREP_BLOCK).unwrap_or(usize::MAX);
        let mut more = first.len() == chunk_bytes;
        let (sender, chunks) = tokio::sync::mpsc::channel(GREP_CHUNKS_IN_FLIGHT);
        let search = {
            let matcher = matcher.clone();
            let pattern = query.pattern.clone();
            let collect = query.collect;
            let shown = path.clone();
            let size = meta.size;
            tokio::task::spawn_blocking(move || {
                let mut searchers = Searchers::new(collect, &pattern);
                let reader = ChunkReader {
                    chunks,
                    current: Vec::new(),
                    at: 0,
                };
                search_reader(reader, size, &mut searchers, &matcher, collect, || {
                    Some(shown)
                })
            })
        };
        let mut failed = None;
        if sender.send(first).await.is_err() {
            more = false;
        }
        let mut skip = GREP_CHUNK_BLOCKS;
        while more && !query.control.stopped() {
            match self.grep_chunk(path, skip).await {
                Ok(Some((_, bytes))) => {
                    more = bytes.len() == chunk_bytes;
                    // The searcher is done (a match was enough, or a line over the bound).
                    if sender.send(bytes).await.is_err() {
                        break;
                    }
                    skip += GREP_CHUNK_BLOCKS;
                }
                Ok(None) => break,
                Err(error) => {
                    failed = Some(error);
                    break;
                }
            }
        }
        drop(sender);
        let found = search.await.map_err(|error| Error::Io {
            path: path.clone(),
            message: format!("the search of the file stopped: {error}"),
        })?;
        if let Some(error) = failed {
            return Err(error);
        }
        query.control.count_file(found.is_some());
        Ok(found)
    }
}
