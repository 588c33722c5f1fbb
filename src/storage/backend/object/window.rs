//! Line windows of big objects, by ranged GETs: the head is sniffed (binary or text, and the
//! text's encoding, as the disk and shell mounts decide it: `content::streamed_lines`), then
//! the object is read range after range from its start, newlines before the window counted in
//! bulk, only the window's lines kept (each at most [`MAX_KEPT_LINE_BYTES`]). Memory follows
//! the window and one range, never the object: a window of a 1 GiB object holds one
//! [`RANGE_BYTES`] range at a time. Every range is asked with `If-Match` on the version headed
//! first, so an object replaced half-way is never shown torn: the window starts over, a few
//! times at most.

use std::time::SystemTime;

use object_store::{GetRange, ObjectMeta};

use super::{ObjectBackend, version};
use crate::ground::content;
use crate::ground::path::VirtualPath;
use crate::storage::backend::{BinarySample, Error, FileView, LineWindow, Result, TextWindow};

/// Bytes asked per ranged GET.
const RANGE_BYTES: u64 = 1024 * 1024;
/// Longest part of one line kept; the rest of such a line is skipped (as on disk).
const MAX_KEPT_LINE_BYTES: usize = 256 * 1024;
/// Starts over when the object changes while it is read, at most this many times.
const ATTEMPTS: usize = 3;

/// The window of the object `meta` at `path` (big: not read whole).
pub(super) async fn stream(
    backend: &ObjectBackend,
    path: &VirtualPath,
    meta: &ObjectMeta,
    window: LineWindow,
) -> Result<FileView> {
    let mut meta = meta.clone();
    for _ in 1..ATTEMPTS {
        match attempt(backend, path, &meta, window).await {
            Err(Error::VersionMismatch { .. }) => match backend.head(path).await? {
                Some(now) => meta = now,
                None => return Err(Error::NotFound { path: path.clone() }),
            },
            other => return other,
        }
    }
    attempt(backend, path, &meta, window).await
}

/// What the lines of the window are being gathered into.
struct Gathered {
    lines: Vec<String>,
    /// Lines passed so far (0-based number of the line being read).
    line: usize,
    /// Bytes of the current line (kept only inside the window).
    current: Vec<u8>,
    /// Whether bytes of the current line were read.
    in_line: bool,
    lossy: bool,
}

async fn attempt(
    backend: &ObjectBackend,
    path: &VirtualPath,
    meta: &ObjectMeta,
    window: LineWindow,
) -> Result<FileView> {
    let version = version::of_meta(meta);
    let size = meta.size;
    let modified = Some(SystemTime::from(meta.last_modified));
    let head_end = size.min(content::SNIFF_BYTES as u64);
    let (_, head) = backend
        .get(path, Some(GetRange::Bounded(0..head_end)), Some(&version))
        .await?;
    let Some(decoding) = content::streamed_lines(&head, head_end == size) else {
        return Ok(FileView::Binary(BinarySample {
            modified,
            size,
            head: head.to_vec(),
            version,
        }));
    };
    let mut got = Gathered {
        lines: Vec::new(),
        line: 0,
        current: Vec::new(),
        in_line: false,
        lossy: false,
    };
    let mut start = 0u64;
    let mut has_more = false;
    'ranges: while start < size {
        let end = start.saturating_add(RANGE_BYTES).min(size);
        let (_, chunk) = backend
            .get(path, Some(GetRange::Bounded(start..end)), Some(&version))
            .await?;
        let mut rest: &[u8] = &chunk;
        while !rest.is_empty() {
            if got.line < window.offset {
                // Before the window: count newlines in bulk.
                let needed = window.offset - got.line;
                let newlines = bytecount::count(rest, b'\n');
                if newlines < needed {
                    got.line += newlines;
                    got.in_line = rest.last() != Some(&b'\n');
                    break;
                }
                let cut = memchr::memchr_iter(b'\n', rest)
                    .nth(needed - 1)
                    .map_or(rest.len(), |i| i + 1);
                rest = &rest[cut..];
                got.line = window.offset;
                got.in_line = false;
                continue;
            }
            if got.lines.len() >= window.limit {
                has_more = true;
                break 'ranges;
            }
            let (piece, done) = match memchr::memchr(b'\n', rest) {
                Some(i) => (&rest[..i], Some(i + 1)),
                None => (rest, None),
            };
            let room = MAX_KEPT_LINE_BYTES.saturating_sub(got.current.len());
            got.current
                .extend_from_slice(&piece[..piece.len().min(room)]);
            got.in_line = true;
            match done {
                Some(consumed) => {
                    finish_line(&mut got, decoding, window);
                    rest = &rest[consumed..];
                }
                None => rest = &[],
            }
        }
        start = end;
    }
    if !has_more && got.in_line {
        // The last line has no newline; it counts.
        if got.line >= window.offset && got.lines.len() < window.limit {
            finish_line(&mut got, decoding, window);
        } else if got.line < window.offset {
            got.line += 1;
        } else {
            has_more = true;
        }
    }
    let total_lines = (!has_more).then_some(got.line);
    Ok(FileView::Text(TextWindow {
        modified,
        lines: got.lines,
        total_lines,
        has_more,
        lossy: got.lossy,
        encoding: decoding.encoding(),
        size,
        version,
    }))
}

/// Ends the current line inside the window: without its `\r`, decoded, kept.
fn finish_line(
    got: &mut Gathered,
    decoding: crate::ground::text::encoding::StreamedLines,
    window: LineWindow,
) {
    let mut raw = std::mem::take(&mut got.current);
    if raw.last() == Some(&b'\r') {
        raw.pop();
    }
    let (text, undecoded) = decoding.decode(&raw, window.offset + got.lines.len() == 0);
    got.lossy |= undecoded;
    got.lines.push(text);
    got.line += 1;
    got.in_line = false;
}
