//! Character encodings of text files: which one a file is in, its text, and the new text put
//! back into the same encoding (CONTRACT §4 `edit_file`: the file's encoding stays).
//!
//! Detection, in order, on the bytes of a file already known not to be binary (or, for
//! [`utf16_bom`], on its head):
//! 1. a byte order mark: UTF-8, UTF-16LE or UTF-16BE (`encoding_rs::Encoding::for_bom`);
//! 2. valid UTF-8;
//! 3. otherwise the legacy encoding `chardetng` guesses (windows-1252 — which is also what
//!    ISO-8859-1/Latin-1 files are read as, as browsers do —, Shift_JIS, GBK, EUC-KR, …).
//!
//! Decoding is checked, never repaired: a file is [`Detection::Text`] only when it decodes
//! without a single replacement character *and* encoding that text again gives back exactly the
//! same bytes. So an edit, which changes the text and encodes the whole of it again, changes no
//! byte outside the change. Anything else is [`Detection::Undecodable`]: it can be shown (with
//! U+FFFD for the bad bytes) but never written back.
//!
//! A BOM stays in the text as a leading U+FEFF, which `line_endings` takes off before an edit
//! and puts back after it; [`encode`] then writes it in the file's own encoding.

use std::borrow::Cow;

use encoding_rs::{EncoderResult, Encoding, UTF_8, UTF_16BE, UTF_16LE};
use thiserror::Error;

use super::line_endings::{self, TextFormat};

/// Most leading bytes `chardetng` looks at to guess a legacy encoding; the guess is then checked
/// on the whole content.
pub const GUESS_SAMPLE_BYTES: usize = 1024 * 1024;

/// The encoding of a text file, and whether it starts with a byte order mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileEncoding {
    encoding: &'static Encoding,
    bom: bool,
}

impl FileEncoding {
    /// UTF-8 without a BOM: what new files are written in.
    pub const UTF8: Self = Self {
        encoding: UTF_8,
        bom: false,
    };

    /// The encoding's WHATWG name: `UTF-8`, `UTF-16LE`, `UTF-16BE`, `windows-1252`,
    /// `Shift_JIS`, `GBK`, …
    pub fn name(self) -> &'static str {
        self.encoding.name()
    }

    /// The name, with `" with BOM"` when the file starts with a byte order mark.
    pub fn label(self) -> String {
        if self.bom {
            format!("{} with BOM", self.name())
        } else {
            self.name().to_owned()
        }
    }

    /// Whether this is UTF-8 (with or without a BOM).
    pub fn is_utf8(self) -> bool {
        self.encoding == UTF_8
    }

    /// Whether the file starts with a byte order mark.
    pub fn has_bom(self) -> bool {
        self.bom
    }
}

impl Default for FileEncoding {
    fn default() -> Self {
        Self::UTF8
    }
}

/// What a text file's bytes turned out to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Detection<'a> {
    /// Text that decodes exactly and encodes back to the very same bytes. A BOM is kept as a
    /// leading U+FEFF.
    Text {
        /// The decoded text.
        text: Cow<'a, str>,
        /// Its encoding.
        encoding: FileEncoding,
    },
    /// Bytes valid in no encoding found for them: shown with U+FFFD, never written back.
    Undecodable {
        /// The bytes decoded with U+FFFD in place of what cannot be decoded (as UTF-8, or in the
        /// encoding its BOM names).
        lossy: Cow<'a, str>,
        /// Why, for the agent: which encodings were tried.
        reason: String,
    },
}

impl<'a> Detection<'a> {
    /// The text to show or search: exact for [`Detection::Text`], with U+FFFD otherwise.
    pub fn into_text(self) -> Cow<'a, str> {
        match self {
            Self::Text { text, .. } => text,
            Self::Undecodable { lossy, .. } => lossy,
        }
    }

    /// The encoding, `None` when undecodable.
    pub fn encoding(&self) -> Option<FileEncoding> {
        match self {
            Self::Text { encoding, .. } => Some(*encoding),
            Self::Undecodable { .. } => None,
        }
    }
}

/// The UTF-16 encoding a head's byte order mark names, if any (`FF FE`: LE, `FE FF`: BE).
pub fn utf16_bom(head: &[u8]) -> Option<FileEncoding> {
    match Encoding::for_bom(head) {
        Some((encoding, _)) if encoding == UTF_16LE || encoding == UTF_16BE => Some(FileEncoding {
            encoding,
            bom: true,
        }),
        _ => None,
    }
}

/// Whether a head starting with a UTF-16 BOM reads as UTF-16 text: valid UTF-16 (a code unit or
/// surrogate cut by the end of the head allowed) with no NUL character. `false` without a BOM.
pub fn is_utf16_text(head: &[u8]) -> bool {
    let Some(found) = utf16_bom(head) else {
        return false;
    };
    let body = &head[2..];
    let units = body.chunks_exact(2).map(|pair| {
        if found.encoding == UTF_16LE {
            u16::from_le_bytes([pair[0], pair[1]])
        } else {
            u16::from_be_bytes([pair[0], pair[1]])
        }
    });
    let mut decoded = char::decode_utf16(units).peekable();
    while let Some(unit) = decoded.next() {
        match unit {
            Ok('\0') => return false,
            Ok(_) => {}
            // A high surrogate whose pair was cut off by the end of the head.
            Err(e)
                if decoded.peek().is_none()
                    && (0xD800..0xDC00).contains(&e.unpaired_surrogate()) => {}
            Err(_) => return false,
        }
    }
    true
}

/// Detects the encoding of `bytes` (a file already known not to be binary) and decodes it,
/// checked both ways (see the module doc).
pub fn detect(bytes: &[u8]) -> Detection<'_> {
    if let Some((encoding, _)) = Encoding::for_bom(bytes) {
        let found = FileEncoding {
            encoding,
            bom: true,
        };
        return decode_checked(bytes, found).unwrap_or_else(|| Detection::Undecodable {
            lossy: encoding.decode_without_bom_handling(bytes).0,
            reason: format!(
                "it starts with a {} byte order mark but is not valid {}",
                encoding.name(),
                encoding.name()
            ),
        });
    }
    if let Ok(text) = std::str::from_utf8(bytes) {
        return Detection::Text {
            text: Cow::Borrowed(text),
            encoding: FileEncoding::UTF8,
        };
    }
    let guess = guess_legacy(bytes);
    let found = FileEncoding {
        encoding: guess,
        bom: false,
    };
    if guess != UTF_8
        && let Some(detected) = decode_checked(bytes, found)
    {
        return detected;
    }
    Detection::Undecodable {
        lossy: String::from_utf8_lossy(bytes),
        reason: format!(
            "it is neither valid UTF-8 nor valid {} (the closest legacy encoding)",
            guess.name()
        ),
    }
}

/// The text of `bytes` to show or search: decoded exactly when an encoding is found, else as
/// UTF-8 with U+FFFD.
pub fn decode_lossy(bytes: &[u8]) -> Cow<'_, str> {
    detect(bytes).into_text()
}

/// A text file's bytes as edits, diffs and answers see them: LF line endings, no BOM, and what
/// puts the file's own format back ([`line_endings::restore`], then [`encode`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LfText {
    /// The text with LF line endings and without BOM (U+FFFD where bytes did not decode).
    pub text: String,
    /// The file's line endings, BOM and final newline.
    pub format: TextFormat,
    /// The file's encoding; `Err` with the reason (which encodings were tried) when its bytes
    /// are valid in no encoding found: then `text` holds U+FFFD and must never be written back.
    pub encoding: Result<FileEncoding, String>,
}

/// Decodes a text file's bytes into [`LfText`]: the one way bytes become the LF text that edits
/// change and answers show (checked as [`detect`] checks; see the module doc).
pub fn decode_to_lf(bytes: &[u8]) -> LfText {
    let (text, encoding) = match detect(bytes) {
        Detection::Text { text, encoding } => (text, Ok(encoding)),
        Detection::Undecodable { lossy, reason } => (lossy, Err(reason)),
    };
    let (text, format) = line_endings::to_lf(&text);
    LfText {
        text,
        format,
        encoding,
    }
}

/// The encoding of a file known only by its head (a big file streamed, a file searched on disk):
/// `None` for UTF-8 (a character cut by the end of the head allowed) or a UTF-16 BOM, else the
/// legacy encoding `chardetng` guesses from the head. Each line of such a file can be decoded
/// on its own with [`decode_line`]: every legacy encoding `chardetng` names keeps `\n` a byte of
/// its own, never the second byte of a character.
pub fn legacy_of_head(head: &[u8], whole: bool) -> Option<FileEncoding> {
    if utf16_bom(head).is_some() {
        return None;
    }
    match std::str::from_utf8(head) {
        Ok(_) => return None,
        Err(error) if error.error_len().is_none() && !whole => return None,
        Err(_) => {}
    }
    let mut detector = chardetng::EncodingDetector::new(chardetng::Iso2022JpDetection::Deny);
    let sample = &head[..head.len().min(GUESS_SAMPLE_BYTES)];
    detector.feed(sample, whole);
    let encoding = detector.guess(None, chardetng::Utf8Detection::Deny);
    (encoding != UTF_8).then_some(FileEncoding {
        encoding,
        bom: false,
    })
}

/// One line of a file in `encoding`, decoded without replacement (`None` if it is not valid
/// there).
pub fn decode_line(bytes: &[u8], encoding: FileEncoding) -> Option<String> {
    encoding
        .encoding
        .decode_without_bom_handling_and_without_replacement(bytes)
        .map(Cow::into_owned)
}

/// How the lines of a file too big to read whole are decoded, one at a time, as its head decided
/// (`content::streamed_lines` decides whether it is shown in lines at all): in UTF-8, or in the
/// legacy encoding [`legacy_of_head`] found. Every mount that streams windows decodes with it, so
/// a window is the same on each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamedLines {
    /// The legacy encoding of the head; `None` for UTF-8.
    legacy: Option<FileEncoding>,
}

impl StreamedLines {
    /// The decoding of a file whose head (`whole`: the whole file) is not binary nor UTF-16.
    pub fn of_head(head: &[u8], whole: bool) -> Self {
        Self {
            legacy: legacy_of_head(head, whole),
        }
    }

    /// The encoding a window reports.
    pub fn encoding(self) -> FileEncoding {
        self.legacy.unwrap_or(FileEncoding::UTF8)
    }

    /// One line, its `\n` (and a `\r` before it) already dropped; `first_of_file` drops a UTF-8
    /// BOM from its start. Returns its text and whether it did not decode (then it is shown as
    /// UTF-8 with U+FFFD for what does not read).
    pub fn decode(self, line: &[u8], first_of_file: bool) -> (String, bool) {
        let line = if first_of_file {
            line.strip_prefix(b"\xef\xbb\xbf").unwrap_or(line)
        } else {
            line
        };
        let decoded = match self.legacy {
            Some(found) => decode_line(line, found),
            None => std::str::from_utf8(line).ok().map(str::to_owned),
        };
        match decoded {
            Some(text) => (text, false),
            None => (String::from_utf8_lossy(line).into_owned(), true),
        }
    }
}

/// `chardetng`'s guess for bytes that are not UTF-8, from their first [`GUESS_SAMPLE_BYTES`].
fn guess_legacy(bytes: &[u8]) -> &'static Encoding {
    let sample = &bytes[..bytes.len().min(GUESS_SAMPLE_BYTES)];
    let mut detector = chardetng::EncodingDetector::new(chardetng::Iso2022JpDetection::Deny);
    detector.feed(sample, sample.len() == bytes.len());
    detector.guess(None, chardetng::Utf8Detection::Deny)
}

/// Decodes `bytes` in `found` without replacement, and only if encoding the text again gives the
/// same bytes.
fn decode_checked(bytes: &[u8], found: FileEncoding) -> Option<Detection<'_>> {
    let text = found
        .encoding
        .decode_without_bom_handling_and_without_replacement(bytes)?;
    let again = encode(&text, found).ok()?;
    (again == bytes).then_some(Detection::Text {
        text,
        encoding: found,
    })
}

/// New text that the file's encoding cannot hold.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error(
    "the character '{character}' ({code}) on line {line} cannot be written in {encoding}",
    code = code_point(*character)
)]
pub struct Unencodable {
    /// The encoding's name.
    pub encoding: &'static str,
    /// The first character that does not fit.
    pub character: char,
    /// Its 1-based line in the text given to [`encode`].
    pub line: usize,
}

fn code_point(character: char) -> String {
    format!("U+{:04X}", u32::from(character))
}

/// Encodes `text` (a BOM as its leading U+FEFF, if any) in `encoding`, without replacement: the
/// first character the encoding cannot hold is an [`Unencodable`] error and nothing is returned.
pub fn encode(text: &str, encoding: FileEncoding) -> Result<Vec<u8>, Unencodable> {
    let target = encoding.encoding;
    if target == UTF_8 {
        return Ok(text.as_bytes().to_vec());
    }
    if target == UTF_16LE || target == UTF_16BE {
        // encoding_rs decodes UTF-16 but encodes only to UTF-8 (the WHATWG rule): the code
        // units come from the standard library.
        let mut out = Vec::with_capacity(text.len() * 2);
        for unit in text.encode_utf16() {
            let pair = if target == UTF_16LE {
                unit.to_le_bytes()
            } else {
                unit.to_be_bytes()
            };
            out.extend_from_slice(&pair);
        }
        return Ok(out);
    }
    let mut encoder = target.new_encoder();
    let mut out = Vec::with_capacity(text.len() + 16);
    let mut rest = text;
    loop {
        let needed = encoder
            .max_buffer_length_from_utf8_without_replacement(rest.len())
            .unwrap_or(rest.len().saturating_mul(4).saturating_add(16));
        out.reserve(needed);
        let (result, read) =
            encoder.encode_from_utf8_to_vec_without_replacement(rest, &mut out, true);
        match result {
            EncoderResult::InputEmpty => return Ok(out),
            EncoderResult::OutputFull => rest = &rest[read..],
            EncoderResult::Unmappable(character) => {
                let done = text.len() - rest.len() + read;
                let line = 1 + text[..done].matches('\n').count();
                return Err(Unencodable {
                    encoding: target.name(),
                    character,
                    line,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decoding_to_lf_keeps_what_restores_the_file_and_flags_undecodable_bytes() {
        let decoded = decode_to_lf("\u{feff}one\r\ntwo\r\n".as_bytes());
        assert_eq!(decoded.text, "one\ntwo\n");
        assert!(decoded.format.bom);
        assert_eq!(decoded.format.line_ending, line_endings::LineEnding::CrLf);
        assert_eq!(
            decoded.encoding.map(FileEncoding::label),
            Ok("UTF-8 with BOM".to_owned())
        );
        let restored = line_endings::restore(&decoded.text, decoded.format);
        assert_eq!(restored.as_bytes(), "\u{feff}one\r\ntwo\r\n".as_bytes());

        let latin1 = decode_to_lf(b"caf\xe9\r\n");
        assert_eq!(latin1.text, "caf\u{e9}\n");
        assert_eq!(latin1.encoding.map(FileEncoding::name), Ok("windows-1252"));

        let bad = decode_to_lf(b"\xef\xbb\xbfok\xff\n");
        assert!(bad.text.contains('\u{fffd}'), "{}", bad.text);
        assert!(bad.encoding.is_err());
    }

    fn text_of(bytes: &[u8]) -> (String, &'static str, bool) {
        match detect(bytes) {
            Detection::Text { text, encoding } => {
                (text.into_owned(), encoding.name(), encoding.has_bom())
            }
            Detection::Undecodable { reason, .. } => panic!("undecodable: {reason}"),
        }
    }

    #[test]
    fn utf8_with_and_without_bom() {
        assert_eq!(text_of(b"caf\xc3\xa9\n"), ("café\n".into(), "UTF-8", false));
        assert_eq!(
            text_of(b"\xef\xbb\xbfhi\n"),
            ("\u{feff}hi\n".into(), "UTF-8", true)
        );
    }

    #[test]
    fn latin1_is_read_as_windows_1252_and_round_trips() {
        let bytes = b"Le caf\xe9 est tr\xe8s bon, na\xefve \xe0 la cr\xe8me.\n";
        let (text, name, _) = text_of(bytes);
        assert_eq!(name, "windows-1252");
        assert_eq!(text, "Le café est très bon, naïve à la crème.\n");
        let encoding = detect(bytes).encoding().unwrap();
        assert_eq!(encode(&text, encoding).unwrap(), bytes);
    }

    #[test]
    fn utf16_both_orders_with_bom() {
        let le = b"\xff\xfeh\0\xe9\0\n\0";
        assert_eq!(text_of(le), ("\u{feff}hé\n".into(), "UTF-16LE", true));
        let be = b"\xfe\xff\0h\0\xe9\0\n";
        assert_eq!(text_of(be), ("\u{feff}hé\n".into(), "UTF-16BE", true));
        let encoding = detect(be).encoding().unwrap();
        assert_eq!(encode("\u{feff}hé\n", encoding).unwrap(), be);
        assert!(is_utf16_text(le) && is_utf16_text(be));
        assert!(!is_utf16_text(b"\xff\xfe\0\0"), "a NUL is binary");
        assert!(!is_utf16_text(b"plain"));
    }

    #[test]
    fn shift_jis_round_trips_and_refuses_an_emoji() {
        let text = "こんにちは、世界。日本語のテキストです。\n";
        let (bytes, _, _) = encoding_rs::SHIFT_JIS.encode(text);
        let (decoded, name, _) = text_of(&bytes);
        assert_eq!(name, "Shift_JIS");
        assert_eq!(decoded, text);
        let encoding = detect(&bytes).encoding().unwrap();
        let error = encode("日本\n語😀\n", encoding).unwrap_err();
        assert_eq!(error.character, '😀');
        assert_eq!(error.line, 2);
        assert_eq!(
            error.to_string(),
            "the character '😀' (U+1F600) on line 2 cannot be written in Shift_JIS"
        );
    }

    #[test]
    fn bytes_valid_in_nothing_found_are_undecodable() {
        // A BOM promising UTF-16 with an odd length, and UTF-8 cut in the middle of a character.
        assert!(matches!(
            detect(b"\xff\xfeh\0i"),
            Detection::Undecodable { .. }
        ));
        let Detection::Undecodable { lossy, .. } = detect(b"\xef\xbb\xbfok \xc3") else {
            panic!("a UTF-8 BOM over invalid UTF-8 is undecodable");
        };
        assert!(lossy.contains('\u{fffd}'));
    }

    #[test]
    fn long_texts_encode_whole() {
        let text = "é€".repeat(100_000);
        let windows_1252 = FileEncoding {
            encoding: encoding_rs::WINDOWS_1252,
            bom: false,
        };
        let bytes = encode(&text, windows_1252).unwrap();
        assert_eq!(bytes.len(), 200_000);
        assert_eq!(
            decode_line(&bytes, windows_1252).as_deref(),
            Some(text.as_str())
        );
    }
}
