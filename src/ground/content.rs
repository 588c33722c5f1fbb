//! Content sniffing: is a file text or binary, and is it an image MCP can carry as image content.
//!
//! Per the seeds (003, "二进制文件检测"): a NUL byte in the first 8 KiB, or a known binary magic
//! number, makes a file binary; UTF-16 text with a byte order mark is the exception. Decoding
//! and line handling live in `text/`; I/O in `backend/`.

use crate::ground::text::encoding::{self, StreamedLines};

/// How many leading bytes are inspected (and kept in a binary sample).
pub const SNIFF_BYTES: usize = 8192;

/// Magic numbers of common binary formats (seed 003) plus a few more of the same kind.
const BINARY_MAGIC: &[(&[u8], &str)] = &[
    (b"\x89PNG\r\n\x1a\n", "PNG image"),
    (b"\xff\xd8\xff", "JPEG image"),
    (b"GIF87a", "GIF image"),
    (b"GIF89a", "GIF image"),
    (b"%PDF", "PDF document"),
    (b"PK\x03\x04", "ZIP archive"),
    (b"\x1f\x8b", "gzip archive"),
    (b"\x7fELF", "ELF executable"),
    (b"BZh", "bzip2 archive"),
    (b"\xfd7zXZ\x00", "xz archive"),
    (b"7z\xbc\xaf\x27\x1c", "7-zip archive"),
    (b"SQLite format 3\x00", "SQLite database"),
    (b"\x00asm", "WebAssembly module"),
];

/// Whether the content (or its first [`SNIFF_BYTES`]) looks binary. A head starting with a
/// UTF-16 byte order mark and reading as UTF-16 text is text, though it holds NUL bytes.
pub fn looks_binary(content: &[u8]) -> bool {
    let head = &content[..content.len().min(SNIFF_BYTES)];
    if encoding::is_utf16_text(head) {
        return false;
    }
    // memchr's SIMD search: `contains` is core's byte-at-a-time loop, which was a third of a
    // grep's instructions (issue 15's callgrind).
    memchr::memchr(0, head).is_some()
        || describe_magic(head).is_some()
        || image_mime(head).is_some()
}

/// How a file too big to read whole is shown in line windows, decided from its head alone (its
/// first [`SNIFF_BYTES`]; `whole` when that is the whole file): `None` when it is described by a
/// binary sample — it looks binary, or it is UTF-16, which cannot be cut into lines at `\n`
/// bytes —, else how each of its lines is decoded. The one decision of every mount that streams
/// windows (disk, shell), so a big file looks the same on each.
pub fn streamed_lines(head: &[u8], whole: bool) -> Option<StreamedLines> {
    if looks_binary(head) || encoding::utf16_bom(head).is_some() {
        return None;
    }
    Some(StreamedLines::of_head(head, whole))
}

/// A description of the format when the head carries a known magic number.
pub fn describe_magic(head: &[u8]) -> Option<&'static str> {
    if is_webp(head) {
        return Some("WebP image");
    }
    BINARY_MAGIC
        .iter()
        .find(|(magic, _)| head.starts_with(magic))
        .map(|(_, name)| *name)
}

/// The MIME type of an image MCP clients display (png, jpeg, gif, webp), by magic number.
pub fn image_mime(head: &[u8]) -> Option<&'static str> {
    if head.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if head.starts_with(b"\xff\xd8\xff") {
        Some("image/jpeg")
    } else if head.starts_with(b"GIF87a") || head.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if is_webp(head) {
        Some("image/webp")
    } else {
        None
    }
}

fn is_webp(head: &[u8]) -> bool {
    head.len() >= 12 && head.starts_with(b"RIFF") && &head[8..12] == b"WEBP"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_not_binary() {
        assert!(!looks_binary(b"fn main() {}\n"));
        assert!(!looks_binary("héllo wörld".as_bytes()));
        assert!(!looks_binary(b""));
        assert!(!looks_binary(b"\xff\xfeh\0i\0\n\0"), "UTF-16LE with a BOM");
        assert!(!looks_binary(b"\xfe\xff\0h\0i\0\n"), "UTF-16BE with a BOM");
    }

    #[test]
    fn nul_bytes_and_magic_numbers_are_binary() {
        assert!(looks_binary(b"abc\0def"));
        assert!(looks_binary(b"%PDF-1.7 text after"));
        assert_eq!(image_mime(b"\x89PNG\r\n\x1a\nrest"), Some("image/png"));
        assert_eq!(image_mime(b"RIFF\0\0\0\0WEBPVP8 "), Some("image/webp"));
        assert_eq!(describe_magic(b"PK\x03\x04..."), Some("ZIP archive"));
    }
}
