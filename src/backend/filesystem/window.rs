//! Reading disk files: versions, whole reads, and line windows that stream instead of loading.
//!
//! # Versions
//! A file of at most [`HASHED_SIZE_LIMIT`] bytes has the same version as on every other backend,
//! the hash of its content ([`Version::of_content`]): sound against any change, even one that
//! keeps size and timestamps. Hashing a bigger file on every read would break the promise that
//! reading a window of a huge file is cheap (CONTRACT §4: memory and time proportional to the
//! window), so beyond the limit the version is a hash of the inode's identity and change
//! stamps, `(dev, ino, size, mtime_ns, ctime_ns)`. Every write replaces the inode (atomic
//! rename), and any in-place change by another program moves `ctime` (which user space cannot
//! set back), so a changed big file gets a new version; the one blind spot is two in-place
//! changes of a big file within one timestamp tick of the file system that keep its size, which
//! is documented in the module doc of `filesystem`.

use std::io::{self, BufRead, BufReader, Read};

use rustix::fs::Stat;
use sha2::{Digest, Sha256};

use crate::backend::{BinarySample, FileView, LineWindow, TextWindow, Version, view_of_bytes};
use crate::content;
use crate::text::encoding::{self, FileEncoding};

/// Largest file whose version is its content hash; bigger files use identity stamps.
pub const HASHED_SIZE_LIMIT: u64 = 8 * 1024 * 1024;

/// Longest part of one line kept in a streamed window; the rest of such a line is skipped
/// (read_file shows at most 80,000 characters anyway), so a window of a file with no line
/// breaks still takes bounded memory.
pub(crate) const MAX_KEPT_LINE_BYTES: usize = 256 * 1024;

/// Read buffer of the streaming window.
const STREAM_BUFFER_BYTES: usize = 1024 * 1024;

/// The version of a file bigger than [`HASHED_SIZE_LIMIT`], from its `fstat`.
pub(crate) fn identity_version(stat: &Stat) -> Version {
    let stamp = format!(
        "{}:{}:{}:{}.{}:{}.{}",
        stat.st_dev,
        stat.st_ino,
        stat.st_size,
        stat.st_mtime,
        stat.st_mtime_nsec,
        stat.st_ctime,
        stat.st_ctime_nsec
    );
    let digest = Sha256::digest(stamp.as_bytes());
    Version::from_raw(format!("i{}", hex::encode(&digest[..16])))
}

/// The modification time `fstat` reports (`None` before 1970).
pub(crate) fn modified_of(stat: &Stat) -> Option<std::time::SystemTime> {
    let seconds = u64::try_from(stat.st_mtime).ok()?;
    let nanos = u32::try_from(stat.st_mtime_nsec)
        .unwrap_or(0)
        .min(999_999_999);
    std::time::UNIX_EPOCH.checked_add(std::time::Duration::new(seconds, nanos))
}

/// The size in bytes `fstat` reports (never negative for a regular file).
pub(crate) fn size_of(stat: &Stat) -> u64 {
    u64::try_from(stat.st_size).unwrap_or(0)
}

/// The version of the bytes of a file just read, with the `fstat` taken before reading.
pub(crate) fn version_of(content: &[u8], stat: &Stat) -> Version {
    if content.len() as u64 <= HASHED_SIZE_LIMIT {
        Version::of_content(content)
    } else {
        identity_version(stat)
    }
}

/// Reads at most `limit + 1` bytes: `Some(content)` when the file fits in `limit`.
pub(crate) fn read_at_most(file: &mut impl Read, limit: u64) -> io::Result<Option<Vec<u8>>> {
    let mut content = Vec::new();
    file.take(limit.saturating_add(1))
        .read_to_end(&mut content)?;
    Ok((content.len() as u64 <= limit).then_some(content))
}

/// The current version of an open file (for conditional writes): hashes small files, stamps
/// big ones, deciding by the bytes actually there.
pub(crate) fn current_version(file: &mut std::fs::File, stat: &Stat) -> io::Result<Version> {
    if size_of(stat) > HASHED_SIZE_LIMIT {
        return Ok(identity_version(stat));
    }
    match read_at_most(file, HASHED_SIZE_LIMIT)? {
        Some(content) => Ok(Version::of_content(&content)),
        None => Ok(identity_version(stat)),
    }
}

/// The view of a window of an open regular file. Small files are read whole and viewed exactly
/// as the memory backend views them; big files are streamed.
pub(crate) fn view(
    file: std::fs::File,
    stat: &Stat,
    window: LineWindow,
    index: &std::sync::Arc<LineIndex>,
) -> io::Result<FileView> {
    let mut file = file;
    let modified = modified_of(stat);
    if size_of(stat) <= HASHED_SIZE_LIMIT
        && let Some(content) = read_at_most(&mut file, HASHED_SIZE_LIMIT)?
    {
        let version = Version::of_content(&content);
        return Ok(view_of_bytes(&content, version, window).with_modified(modified));
    }
    // Either big from the start, or it grew past the limit while we looked: stream it from
    // the beginning (a fresh read position via a seek).
    Ok(stream_window(file, stat, window, index)?.with_modified(modified))
}

/// Streams a big file: sniffs its head, jumps near line `window.offset` (see [`LineIndex`]),
/// skips the rest of the way counting newlines in bulk, keeps `window.limit` lines, and looks
/// one byte further to know whether more remain.
fn stream_window(
    file: std::fs::File,
    stat: &Stat,
    window: LineWindow,
    index: &std::sync::Arc<LineIndex>,
) -> io::Result<FileView> {
    use std::io::{Seek, SeekFrom};
    use std::os::unix::fs::FileExt;

    let version = identity_version(stat);
    let size = size_of(stat);
    // An agent that opened a huge file usually pages on through it: index the whole file in
    // the background now, so that the next window, however deep, starts one block away.
    if let Ok(copy) = file.try_clone() {
        index.index_in_background(&version, copy, size);
    }
    let mut head = vec![0u8; content::SNIFF_BYTES];
    let head_len = read_full_at(&file, &mut head, 0)?;
    head.truncate(head_len);
    // A big UTF-16 file cannot be cut into lines at '\n' bytes: it is described, not shown.
    if content::looks_binary(&head) || encoding::utf16_bom(&head).is_some() {
        return Ok(FileView::Binary(BinarySample {
            modified: None,
            size,
            head,
            version,
        }));
    }
    // A legacy encoding is guessed from the head; each line is decoded on its own in it.
    let legacy = encoding::legacy_of_head(&head, head_len as u64 == size);
    let shown_encoding = legacy.unwrap_or(FileEncoding::UTF8);
    let wanted = window.offset as u64;
    let start = index.seek(&version, &file, size, wanted)?;
    let mut in_line = false;
    if start.byte > 0 {
        let mut before = [0u8; 1];
        in_line = file.read_at(&mut before, start.byte - 1)? == 1 && before[0] != b'\n';
    }
    let mut file = file;
    file.seek(SeekFrom::Start(start.byte))?;
    let mut reader = BufReader::with_capacity(STREAM_BUFFER_BYTES, file);
    let remaining = usize::try_from(wanted - start.lines).unwrap_or(usize::MAX);
    let skipped = skip_lines(&mut reader, remaining, in_line)?;
    let reached = usize::try_from(start.lines).unwrap_or(usize::MAX) + skipped.reached;
    let mut lines = Vec::new();
    let mut lossy = false;
    if reached < window.offset {
        return Ok(FileView::Text(TextWindow {
            modified: None,
            lines,
            total_lines: Some(reached),
            has_more: false,
            lossy,
            encoding: shown_encoding,
            size,
            version,
        }));
    }
    let mut at_end = false;
    while lines.len() < window.limit {
        let Some(raw) = next_line(&mut reader)? else {
            at_end = true;
            break;
        };
        let mut bytes: &[u8] = &raw;
        if window.offset + lines.len() == 0 {
            bytes = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes);
        }
        let decoded = match legacy {
            Some(found) => encoding::decode_line(bytes, found),
            None => std::str::from_utf8(bytes).ok().map(str::to_owned),
        };
        match decoded {
            Some(text) => lines.push(text),
            None => {
                lossy = true;
                lines.push(String::from_utf8_lossy(bytes).into_owned());
            }
        }
    }
    let has_more = !at_end && !reader.fill_buf()?.is_empty();
    let total_lines = (!has_more).then_some(window.offset + lines.len());
    Ok(FileView::Text(TextWindow {
        modified: None,
        lines,
        total_lines,
        has_more,
        lossy,
        encoding: shown_encoding,
        size,
        version,
    }))
}

/// Reads into `buffer` from `offset` until it is full or the file ends; returns the length.
fn read_full_at(file: &std::fs::File, buffer: &mut [u8], offset: u64) -> io::Result<usize> {
    use std::os::unix::fs::FileExt;
    let mut filled = 0;
    while filled < buffer.len() {
        match file.read_at(&mut buffer[filled..], offset + filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// A point of a file where the number of newlines before it is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Checkpoint {
    /// Newlines in `[0, byte)`.
    lines: u64,
    /// The byte offset.
    byte: u64,
}

/// Bytes counted per block when jumping through a big file (two blocks at once, one per core).
const BLOCK_BYTES: usize = 4 * 1024 * 1024;
/// Big files whose checkpoints are remembered; beyond it the memory is cleared and rebuilt.
const MAX_INDEXED_FILES: usize = 64;

/// Where the lines of big files start, learnt while skipping: one checkpoint per
/// [`BLOCK_BYTES`] block (16 bytes per 4 MiB, so 4 KiB for a gigabyte file), keyed by the
/// file's identity version, so a changed file never uses a stale index. The first window deep
/// in a file costs one pass over the bytes before it, counted on two threads at memory speed;
/// every later window (an agent paging through a log) starts at most one block away.
#[derive(Debug, Default)]
pub(crate) struct LineIndex {
    files: std::sync::Mutex<std::collections::HashMap<Version, Vec<Checkpoint>>>,
    /// Files being indexed by a background thread, so that one is started per file at most.
    indexing: std::sync::Mutex<std::collections::HashSet<Version>>,
}

impl LineIndex {
    /// Counts every checkpoint of the file on a background thread, unless it is known already
    /// or being counted. One pass over the file at page-cache speed, holding two blocks.
    pub(crate) fn index_in_background(
        self: &std::sync::Arc<Self>,
        version: &Version,
        file: std::fs::File,
        size: u64,
    ) {
        let known_to_end = self
            .checkpoints()
            .get(version)
            .and_then(|c| c.last().copied())
            .is_some_and(|last| last.byte + BLOCK_BYTES as u64 >= size);
        if known_to_end {
            return;
        }
        let started = self
            .indexing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(version.clone());
        if !started {
            return;
        }
        let index = self.clone();
        let counted = version.clone();
        let spawned = std::thread::Builder::new()
            .name("mountfs-line-index".into())
            .spawn(move || {
                if let Err(error) = index.seek(&counted, &file, size, u64::MAX) {
                    tracing::debug!(%error, "background line indexing stopped");
                }
                index
                    .indexing
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .remove(&counted);
            });
        if spawned.is_err() {
            self.indexing
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .remove(version);
        }
    }

    fn checkpoints(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<Version, Vec<Checkpoint>>> {
        // Each update replaces one value whole: a poisoned map is still consistent.
        self.files
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The furthest known point at or before line `wanted` (0-based: newlines to pass),
    /// counting forward in blocks from the best remembered checkpoint. The wanted line starts
    /// within one block after the answer.
    fn seek(
        &self,
        version: &Version,
        file: &std::fs::File,
        size: u64,
        wanted: u64,
    ) -> io::Result<Checkpoint> {
        let mut known = self.checkpoints().get(version).cloned().unwrap_or_default();
        let mut start = known
            .iter()
            .rev()
            .find(|c| c.lines < wanted || (wanted == 0 && c.byte == 0))
            .copied()
            .unwrap_or(Checkpoint { lines: 0, byte: 0 });
        if wanted == 0 {
            return Ok(Checkpoint { lines: 0, byte: 0 });
        }
        if wanted != u64::MAX {
            self.wait_for_background(version, wanted);
            known = self.checkpoints().get(version).cloned().unwrap_or_default();
            start = known
                .iter()
                .rev()
                .find(|c| c.lines < wanted)
                .copied()
                .unwrap_or(Checkpoint { lines: 0, byte: 0 });
        }
        let mut learnt = Vec::new();
        let mut first = vec![0u8; BLOCK_BYTES];
        let mut second = vec![0u8; BLOCK_BYTES];
        while start.byte < size {
            let next_byte = start.byte + BLOCK_BYTES as u64;
            let (one, two) = std::thread::scope(|scope| {
                let helper = scope.spawn(|| {
                    let len = read_full_at(file, &mut second, next_byte)?;
                    Ok::<_, io::Error>((len, bytecount::count(&second[..len], b'\n') as u64))
                });
                let len = read_full_at(file, &mut first, start.byte)?;
                let one = (len, bytecount::count(&first[..len], b'\n') as u64);
                let two = helper
                    .join()
                    .unwrap_or_else(|_| Err(io::Error::other("a counting thread failed")))?;
                Ok::<_, io::Error>((one, two))
            })?;
            let after_one = Checkpoint {
                lines: start.lines + one.1,
                byte: start.byte + one.0 as u64,
            };
            if after_one.lines >= wanted || one.0 < BLOCK_BYTES {
                break;
            }
            learnt.push(after_one);
            let after_two = Checkpoint {
                lines: after_one.lines + two.1,
                byte: after_one.byte + two.0 as u64,
            };
            if after_two.lines >= wanted || two.0 < BLOCK_BYTES {
                start = after_one;
                break;
            }
            learnt.push(after_two);
            start = after_two;
            // Publish progress as it goes, so a window asked for meanwhile can use it.
            if learnt.len() >= PUBLISH_EVERY_CHECKPOINTS {
                self.remember(version, &mut known, &mut learnt);
            }
        }
        self.remember(version, &mut known, &mut learnt);
        Ok(start)
    }

    /// Adds `learnt` to the checkpoints remembered for `version`.
    fn remember(
        &self,
        version: &Version,
        known: &mut Vec<Checkpoint>,
        learnt: &mut Vec<Checkpoint>,
    ) {
        if learnt.is_empty() {
            return;
        }
        known.append(learnt);
        known.sort_by_key(|c| c.byte);
        known.dedup();
        let mut files = self.checkpoints();
        if files.len() >= MAX_INDEXED_FILES && !files.contains_key(version) {
            files.clear();
        }
        let merged = match files.get(version) {
            Some(theirs) => {
                let mut merged: Vec<Checkpoint> =
                    theirs.iter().chain(known.iter()).copied().collect();
                merged.sort_by_key(|c| c.byte);
                merged.dedup();
                merged
            }
            None => known.clone(),
        };
        files.insert(version.clone(), merged);
    }

    /// While a background pass is indexing `version` and has not yet reached line `wanted`,
    /// waits for it rather than counting the same bytes a second time beside it.
    fn wait_for_background(&self, version: &Version, wanted: u64) {
        let deadline = std::time::Instant::now() + BACKGROUND_WAIT_LIMIT;
        loop {
            let running = self
                .indexing
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .contains(version);
            let reached = self
                .checkpoints()
                .get(version)
                .and_then(|c| c.last().copied())
                .is_some_and(|last| last.lines >= wanted);
            if !running || reached || std::time::Instant::now() >= deadline {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}

/// How many new checkpoints a counting pass gathers before publishing them (64 MiB of file).
const PUBLISH_EVERY_CHECKPOINTS: usize = 16;
/// Longest a window waits for a background pass before counting on its own.
const BACKGROUND_WAIT_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

/// How far [`skip_lines`] got.
struct Skipped {
    /// Lines passed: `wanted`, or the file's line count when it ended first.
    reached: usize,
}

/// Consumes `wanted` lines. Whole buffers are counted with a SIMD byte count, so skipping runs
/// at memory speed and holds one buffer, never the file.
fn skip_lines(
    reader: &mut BufReader<std::fs::File>,
    wanted: usize,
    in_line: bool,
) -> io::Result<Skipped> {
    let mut passed = 0usize;
    // Whether bytes of an unfinished line were consumed (a last line without newline counts).
    let mut in_line = in_line;
    while passed < wanted {
        let buffer = reader.fill_buf()?;
        if buffer.is_empty() {
            return Ok(Skipped {
                reached: passed + usize::from(in_line),
            });
        }
        let newlines = bytecount::count(buffer, b'\n');
        if passed + newlines < wanted {
            passed += newlines;
            in_line = buffer.last() != Some(&b'\n');
            let consumed = buffer.len();
            reader.consume(consumed);
            continue;
        }
        // The line we want to stop after ends in this buffer.
        let needed = wanted - passed;
        let end = memchr::memchr_iter(b'\n', buffer)
            .nth(needed - 1)
            .map_or(buffer.len(), |i| i + 1);
        reader.consume(end);
        passed = wanted;
    }
    Ok(Skipped { reached: passed })
}

/// The next line without its terminator (`\n`, and one `\r` before it), at most
/// [`MAX_KEPT_LINE_BYTES`] of it; `None` at end of file.
fn next_line(reader: &mut BufReader<std::fs::File>) -> io::Result<Option<Vec<u8>>> {
    let mut line = Vec::new();
    let mut any = false;
    loop {
        let buffer = reader.fill_buf()?;
        if buffer.is_empty() {
            break;
        }
        any = true;
        let (chunk, done) = match memchr::memchr(b'\n', buffer) {
            Some(i) => (&buffer[..i], Some(i + 1)),
            None => (buffer, None),
        };
        let room = MAX_KEPT_LINE_BYTES.saturating_sub(line.len());
        line.extend_from_slice(&chunk[..chunk.len().min(room)]);
        let consumed = done.unwrap_or(buffer.len());
        reader.consume(consumed);
        if done.is_some() {
            break;
        }
    }
    if !any {
        return Ok(None);
    }
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    Ok(Some(line))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn stat_of(file: &std::fs::File) -> Stat {
        rustix::fs::fstat(file).unwrap()
    }

    fn streamed(content: &[u8], window: LineWindow) -> TextWindow {
        let mut tmp = tempfile::tempfile().unwrap();
        tmp.write_all(content).unwrap();
        use std::io::Seek;
        tmp.rewind().unwrap();
        let stat = stat_of(&tmp);
        match stream_window(tmp, &stat, window, &std::sync::Arc::default()).unwrap() {
            FileView::Text(text) => text,
            FileView::Binary(_) => panic!("binary"),
        }
    }

    fn memory(content: &[u8], window: LineWindow) -> TextWindow {
        match view_of_bytes(content, Version::of_content(content), window) {
            FileView::Text(text) => text,
            FileView::Binary(_) => panic!("binary"),
        }
    }

    /// The streamed window agrees with the in-memory view on lines, has_more and (where the
    /// stream knows it) the total.
    #[test]
    fn streaming_agrees_with_the_in_memory_view() {
        let contents: [&[u8]; 8] = [
            b"",
            b"a",
            b"a\n",
            b"a\nb",
            b"a\r\nb\r\n\r\n",
            b"\xef\xbb\xbfbom\nx\n",
            b"\n\n\n",
            b"caf\xe9\nok\n",
        ];
        for content in contents {
            for offset in 0..5 {
                for limit in 1..5 {
                    let window = LineWindow { offset, limit };
                    let s = streamed(content, window);
                    let m = memory(content, window);
                    assert_eq!(s.lines, m.lines, "{content:?} {window:?}");
                    assert_eq!(s.has_more, m.has_more, "{content:?} {window:?}");
                    // The stream only knows about the lines it decoded.
                    assert!(!s.lossy || m.lossy, "{content:?} {window:?}");
                    if let Some(total) = s.total_lines {
                        assert_eq!(Some(total), m.total_lines, "{content:?} {window:?}");
                    }
                    if !s.has_more {
                        assert!(s.total_lines.is_some(), "{content:?} {window:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn skipping_crosses_buffer_boundaries() {
        let mut content = Vec::new();
        for i in 0..400_000 {
            content.extend_from_slice(format!("line {i}\n").as_bytes());
        }
        let s = streamed(
            &content,
            LineWindow {
                offset: 300_000,
                limit: 2,
            },
        );
        assert_eq!(s.lines, vec!["line 300000", "line 300001"]);
        assert!(s.has_more);
        assert_eq!(s.total_lines, None);
        let s = streamed(
            &content,
            LineWindow {
                offset: 500_000,
                limit: 2,
            },
        );
        assert_eq!(s.total_lines, Some(400_000));
        assert!(s.lines.is_empty());
    }

    #[test]
    fn a_first_window_indexes_the_whole_file_in_the_background() {
        let mut content = Vec::new();
        let mut n = 0usize;
        while content.len() < 3 * BLOCK_BYTES + 100_000 {
            content.extend_from_slice(format!("line {n}\n").as_bytes());
            n += 1;
        }
        let mut tmp = tempfile::tempfile().unwrap();
        tmp.write_all(&content).unwrap();
        let stat = stat_of(&tmp);
        let index = std::sync::Arc::new(LineIndex::default());
        let head = LineWindow {
            offset: 0,
            limit: 2,
        };
        stream_window(tmp.try_clone().unwrap(), &stat, head, &index).unwrap();
        let version = identity_version(&stat);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while index.indexing.lock().unwrap().contains(&version) {
            assert!(
                std::time::Instant::now() < deadline,
                "indexing never finished"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let checkpoints = index.checkpoints().get(&version).cloned().unwrap();
        let last = checkpoints.last().unwrap();
        assert!(
            last.byte + BLOCK_BYTES as u64 >= content.len() as u64,
            "{checkpoints:?}"
        );
        // Every checkpoint is right: the line count of the bytes before it.
        for checkpoint in &checkpoints {
            let before = &content[..checkpoint.byte as usize];
            assert_eq!(checkpoint.lines, bytecount::count(before, b'\n') as u64);
        }
        // A deep window now reads the right line.
        let deep = LineWindow {
            offset: n - 2,
            limit: 5,
        };
        let FileView::Text(text) = stream_window(tmp, &stat, deep, &index).unwrap() else {
            panic!("binary");
        };
        assert_eq!(
            text.lines,
            vec![format!("line {}", n - 2), format!("line {}", n - 1)]
        );
    }

    #[test]
    fn remembered_checkpoints_give_the_same_windows() {
        // ~13 MB: more than three counting blocks, lines of varying length.
        let mut content = Vec::new();
        let mut n = 0usize;
        while content.len() < 3 * BLOCK_BYTES + 500_000 {
            content.extend_from_slice(format!("{n} {}\n", "x".repeat(n % 17)).as_bytes());
            n += 1;
        }
        let mut tmp = tempfile::tempfile().unwrap();
        tmp.write_all(&content).unwrap();
        let stat = stat_of(&tmp);
        let index = std::sync::Arc::new(LineIndex::default());
        let expected = |offset: usize| format!("{offset} {}", "x".repeat(offset % 17));
        // Deep first (learns checkpoints), then earlier and later windows reuse them.
        for offset in [n - 3, 10, n / 2, n / 3 + 1, n - 1, 0, n / 4] {
            let file = tmp.try_clone().unwrap();
            let FileView::Text(text) =
                stream_window(file, &stat, LineWindow { offset, limit: 3 }, &index).unwrap()
            else {
                panic!("binary");
            };
            assert_eq!(text.lines[0], expected(offset), "offset {offset}");
            assert_eq!(text.has_more, offset + 3 < n, "offset {offset}");
            if !text.has_more {
                assert_eq!(text.total_lines, Some(n));
            }
        }
        for offset in [n, n + 5] {
            let file = tmp.try_clone().unwrap();
            let FileView::Text(text) =
                stream_window(file, &stat, LineWindow { offset, limit: 3 }, &index).unwrap()
            else {
                panic!("binary");
            };
            assert!(text.lines.is_empty());
            assert_eq!(text.total_lines, Some(n), "offset {offset}");
        }
        let learnt: Vec<Checkpoint> = index.checkpoints().values().flatten().copied().collect();
        assert!(!learnt.is_empty());
        for checkpoint in learnt {
            let around = checkpoint.lines as usize;
            for offset in [around - 1, around, around + 1] {
                let file = tmp.try_clone().unwrap();
                let window = LineWindow { offset, limit: 2 };
                let FileView::Text(text) = stream_window(file, &stat, window, &index).unwrap()
                else {
                    panic!("binary");
                };
                assert_eq!(text.lines[0], expected(offset), "offset {offset}");
                assert_eq!(text.lines[1], expected(offset + 1), "offset {offset}");
            }
        }
    }

    #[test]
    fn a_line_without_breaks_keeps_bounded_memory() {
        let content = vec![b'x'; MAX_KEPT_LINE_BYTES * 3];
        let s = streamed(
            &content,
            LineWindow {
                offset: 0,
                limit: 10,
            },
        );
        assert_eq!(s.lines.len(), 1);
        assert_eq!(s.lines[0].len(), MAX_KEPT_LINE_BYTES);
        assert_eq!(s.total_lines, Some(1));
    }
}
