//! Line windows of disk files that stream instead of loading: a small file is read whole and
//! viewed as the memory backend views it; a big one is sniffed, sought near the wanted line
//! through the [`LineIndex`], skipped the rest of the way counting newlines in bulk, and only
//! the window's lines are kept. Versions are `version`'s; the index is `line_index`'s.

use std::io::{self, BufRead, BufReader};

use rustix::fs::Stat;

use super::line_index::{LineIndex, read_full_at};
use super::version::{HASHED_SIZE_LIMIT, identity_version, modified_of, read_at_most, size_of};
use crate::ground::content;
use crate::storage::backend::whole_file::view_of_bytes;
use crate::storage::backend::{BinarySample, FileView, LineWindow, TextWindow, Version};

/// Longest part of one line kept in a streamed window; the rest of such a line is skipped
/// (read_file shows at most 80,000 characters anyway), so a window of a file with no line
/// breaks still takes bounded memory.
pub(super) const MAX_KEPT_LINE_BYTES: usize = 256 * 1024;

/// Read buffer of the streaming window.
const STREAM_BUFFER_BYTES: usize = 1024 * 1024;

/// The view of a window of an open regular file. Small files are read whole and viewed exactly
/// as the memory backend views them; big files are streamed.
pub(super) fn view(
    file: std::fs::File,
    stat: &Stat,
    window: LineWindow,
    index: &std::sync::Arc<LineIndex>,
) -> io::Result<FileView> {
    let mut file = file;
    let modified = modified_of(stat);
    if size_of(stat) <= HASHED_SIZE_LIMIT
        && let Some(content) = read_at_most(&mut file, HASHED_SIZE_LIMIT, size_of(stat))?
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
    // Binary or UTF-16 (which cannot be cut into lines at '\n' bytes): described, not shown.
    // Else each line is decoded on its own, in a legacy encoding when the head is in one.
    let Some(decoding) = content::streamed_lines(&head, head_len as u64 == size) else {
        return Ok(FileView::Binary(BinarySample {
            modified: None,
            size,
            head,
            version,
        }));
    };
    let shown_encoding = decoding.encoding();
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
        let (text, undecoded) = decoding.decode(&raw, window.offset + lines.len() == 0);
        lossy |= undecoded;
        lines.push(text);
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
    use crate::storage::backend::disk::line_index::{BLOCK_BYTES, Checkpoint};
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
        while index.is_indexing(&version) {
            assert!(
                std::time::Instant::now() < deadline,
                "indexing never finished"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let checkpoints = index.known(&version).unwrap();
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
        let learnt: Vec<Checkpoint> = index.all_known();
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
