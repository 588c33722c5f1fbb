//! Windows of lines read on the target: what the window call found (its last line), the
//! window's whole lines, and the line starts remembered for the next window.

use super::*;

/// What the target's `rw` says after a window of a big file (its last line): how it found
/// the window's start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct WindowFound {
    /// The target's clock (seconds) just after the stamp was taken; `None` when not read (the
    /// file still had the identity its marks are filed under) or not known.
    pub(super) now: Option<i64>,
    /// The file's ctime as the target shows it: seconds, or `D` and `ls --full-time`'s time.
    pub(super) ctime: String,
    /// Line feeds before `byte`: the window's line feeds before it when it starts there, fewer
    /// when the file ended first (then all of the file's).
    pub(super) lines: u64,
    /// Where the window starts (a line start), or the end of the file.
    pub(super) byte: u64,
    /// The line start the server sent was not one: the file changed under its stamp.
    pub(super) stale: bool,
    /// The line start the target began at (0: the file's start).
    pub(super) from: u64,
    /// Lines the target read through to find the window's start.
    pub(super) passed: u64,
    /// The file ended before the window, and its last line has no line feed (a line more
    /// than `lines`).
    pub(super) partial_last: bool,
}

impl WindowFound {
    pub(super) fn parse(info: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(trimmed(info)).ok()?;
        let fields: Vec<&str> = text.split(' ').collect();
        let [now, ctime, lines, byte, state, from, passed, partial] = fields.as_slice() else {
            return None;
        };
        Some(Self {
            now: now.parse().ok(),
            ctime: (*ctime).to_owned(),
            lines: lines.parse().ok()?,
            byte: byte.parse().ok()?,
            stale: match *state {
                "k" => false,
                "x" => true,
                _ => return None,
            },
            from: from.parse().ok()?,
            passed: passed.parse().ok()?,
            partial_last: match *partial {
                "0" => false,
                "1" => true,
                _ => return None,
            },
        })
    }
}

/// The length of the first `limit` lines of a window as the target printed it, when each is
/// whole (none cut at 256 KiB, no NUL byte a `cut` could have stopped at) and another line
/// follows them (so the last one's line feed is the file's, not one `cut` added at the end):
/// where the line after them starts.
pub(super) fn whole_lines_length(raw: &[u8], limit: usize) -> Option<u64> {
    if memchr::memchr(0, raw).is_some() {
        return None;
    }
    let mut at = 0usize;
    for _ in 0..limit {
        let end = memchr::memchr(b'\n', raw.get(at..)?)?;
        if end >= WINDOW_LINE_BYTES {
            return None;
        }
        at += end + 1;
    }
    (at < raw.len()).then_some(at as u64)
}

/// The most bytes of one line a window of a big file carries (`cut -b 1-262144` on the target).
pub(super) const WINDOW_LINE_BYTES: usize = 256 * 1024;

/// The lines of a window the target printed: `limit` at most, CR of CRLF dropped, each decoded
/// as `decoding` says (a UTF-8 BOM dropped from the file's first line); whether more followed;
/// whether any line did not decode.
pub(super) fn window_lines(
    bytes: &[u8],
    first_line: bool,
    limit: usize,
    decoding: StreamedLines,
) -> (Vec<String>, bool, bool) {
    let mut raw: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
    if raw.last().is_some_and(|l| l.is_empty()) {
        raw.pop();
    }
    let has_more = raw.len() > limit;
    raw.truncate(limit);
    let mut lossy = false;
    let lines = raw
        .into_iter()
        .enumerate()
        .map(|(index, line)| {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let (text, undecoded) = decoding.decode(line, index == 0 && first_line);
            lossy |= undecoded;
            text
        })
        .collect();
    (lines, has_more, lossy)
}

impl ShellBackend {
    /// [`Backend::read_window`] on the target: the window's lines read there, the line starts
    /// learned on the way remembered for the next window of the same file version.
    pub(super) async fn window_of(
        &self,
        path: &VirtualPath,
        window: LineWindow,
    ) -> Result<FileView> {
        refuse_temp_name(path)?;
        // The window's first line and one past its last (to see more), counted from 1.
        let first = window.offset.saturating_add(1).min(1 << 60);
        let past = first.saturating_add(window.limit).min(1 << 61);
        let at = relative(path);
        let mut frame = Frame::call("rw").path(at).arg(first).arg(past);
        // The nearest remembered line start at or before the window, with the identity it is
        // filed under: the target seeks there when the file still has that identity.
        if let Some((key, mark)) = self.marks.best(at, first as u64 - 1) {
            frame = frame.arg(mark.byte).arg(mark.lines).line_payload(&key);
        }
        let reply = self.call_at(path, frame).await?;
        let parts = reply.parts(4);
        let (Some(meta), Some(rest)) = (
            parts.first().and_then(|m| Meta::parse(trimmed(m))),
            parts.get(1),
        ) else {
            return Err(self.malformed(path, "read_file"));
        };
        if meta.size <= HASHED_SIZE_LIMIT {
            // The whole file: everything after the stamp, separators included.
            let whole = reply.parts(2);
            let rest = whole.get(1).copied().unwrap_or(rest);
            // `rw` prints at most one byte past the limit: the file grew past it while read.
            if rest.len() as u64 > HASHED_SIZE_LIMIT {
                return Err(Error::Io {
                    path: path.clone(),
                    message: "the file grew past 8 MiB while it was read; retry".to_owned(),
                });
            }
            let version = Version::of_content(rest);
            return Ok(view_of_bytes(rest, version, window).with_modified(meta.modified()));
        }
        let version = meta.identity_version();
        let (Some(head), Some(lines)) = (parts.get(1), parts.get(2)) else {
            return Err(self.malformed(path, "read_file"));
        };
        // The disk mount's decision from the same head (`head -c 8192`): binary or UTF-16 is
        // described; else each line is decoded on its own, in a legacy encoding when the head
        // is in one.
        let whole = head.len() as u64 == meta.size;
        let decoding = content::streamed_lines(head, whole);
        let found = parts.get(3).and_then(|info| WindowFound::parse(info));
        if let Some(found) = &found {
            // The printed lines of a binary or UTF-16 file say nothing of where its lines end:
            // busybox `cut` ends a line at a NUL byte as well (and no NUL is left to see).
            let raw = decoding.is_some().then_some(*lines);
            let (stamp, wanted) = (trimmed(parts[0]), first as u64 - 1);
            self.learn_marks(at, stamp, found, raw, wanted, window.limit);
        }
        let Some(decoding) = decoding else {
            return Ok(FileView::Binary(BinarySample {
                modified: meta.modified(),
                size: meta.size,
                head: head.to_vec(),
                version,
            }));
        };
        let (lines, has_more, lossy) =
            window_lines(lines, window.offset == 0, window.limit, decoding);
        let total_lines = if lines.is_empty() && window.offset > 0 {
            // No line at the window's start: the file's lines were all passed on the way (a
            // last line without a line feed counts, as on a disk mount).
            match &found {
                Some(found) => usize::try_from(found.lines + u64::from(found.partial_last)).ok(),
                None => {
                    let reply = self.call(Frame::call("wl").path(at)).await?;
                    std::str::from_utf8(trimmed(&reply.stdout))
                        .ok()
                        .and_then(|n| n.parse::<usize>().ok())
                }
            }
        } else {
            None
        };
        Ok(FileView::Text(TextWindow {
            modified: meta.modified(),
            lines,
            total_lines,
            has_more,
            lossy,
            encoding: decoding.encoding(),
            size: meta.size,
            version,
        }))
    }
}
