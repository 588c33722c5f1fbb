//! Line endings and the UTF-8 byte order mark, kept intact across an edit.
//!
//! Edits work on LF text without a BOM; [`to_lf`] produces that text and remembers the file's
//! [`TextFormat`], and [`restore`] turns the edited text back into the file's own format, so a
//! CRLF file stays CRLF and a BOM stays (CONTRACT §4 `edit_file`). A file whose line endings are
//! mixed is left as it is, so no byte the edit did not touch changes. Decoding bytes to text is
//! left to the backends.

/// The line terminator a text uses throughout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineEnding {
    /// `"\n"` (also used for mixed text and text without any newline).
    Lf,
    /// `"\r\n"` on every line.
    CrLf,
}

/// How a text is laid out around its lines: BOM, line terminator, final newline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TextFormat {
    /// The text starts with U+FEFF.
    pub bom: bool,
    /// The line terminator used throughout.
    pub line_ending: LineEnding,
    /// The text ends with `'\n'`.
    pub final_newline: bool,
}

impl Default for TextFormat {
    /// No BOM, LF, no final newline.
    fn default() -> Self {
        Self {
            bom: false,
            line_ending: LineEnding::Lf,
            final_newline: false,
        }
    }
}

const BOM: char = '\u{feff}';

/// Detects the format of `text`.
///
/// `bom` is set when the text starts with U+FEFF, `final_newline` when it ends with `'\n'`.
/// `line_ending` is [`LineEnding::CrLf`] only when the text holds at least one `'\n'` and every
/// `'\n'` ends a `"\r\n"` whose `'\r'` is not itself preceded by another `'\r'`. Anything else
/// (LF, mixed, no newline at all, or a `"\r\r\n"` which would be ambiguous once converted) is
/// [`LineEnding::Lf`], which [`to_lf`] leaves untouched.
pub fn detect(text: &str) -> TextFormat {
    let bytes = text.as_bytes();
    let mut newlines = 0usize;
    let mut all_crlf = true;
    for (i, &byte) in bytes.iter().enumerate() {
        if byte != b'\n' {
            continue;
        }
        newlines += 1;
        let cr_before = i.checked_sub(1).and_then(|j| bytes.get(j)) == Some(&b'\r');
        let cr_cr_before = i.checked_sub(2).and_then(|j| bytes.get(j)) == Some(&b'\r');
        if !cr_before || cr_cr_before {
            all_crlf = false;
            break;
        }
    }
    TextFormat {
        bom: text.starts_with(BOM),
        line_ending: if newlines > 0 && all_crlf {
            LineEnding::CrLf
        } else {
            LineEnding::Lf
        },
        final_newline: text.ends_with('\n'),
    }
}

/// Converts `text` to the form edits work on: no BOM and, for a CRLF text, `"\n"` line ends.
///
/// Returns the converted text and the format [`restore`] needs to undo the conversion. A text
/// with mixed line endings keeps them (only its BOM is removed), so an edit changes no byte it
/// did not touch.
pub fn to_lf(text: &str) -> (String, TextFormat) {
    let format = detect(text);
    let body = text.strip_prefix(BOM).unwrap_or(text);
    let converted = match format.line_ending {
        LineEnding::CrLf => body.replace("\r\n", "\n"),
        LineEnding::Lf => body.to_owned(),
    };
    (converted, format)
}

/// Puts back what [`to_lf`] removed: `"\r\n"` line ends for a CRLF format, then the BOM.
///
/// For [`LineEnding::CrLf`], each `'\n'` not already preceded by `'\r'` becomes `"\r\n"`, so text
/// that already carries CRLF (say a `new_string` pasted with them) does not get `"\r\r\n"`.
/// `restore(&to_lf(x).0, to_lf(x).1) == x` for every `x`.
pub fn restore(lf_text: &str, format: TextFormat) -> String {
    let mut out = String::with_capacity(lf_text.len() + lf_text.len() / 32 + 4);
    if format.bom {
        out.push(BOM);
    }
    match format.line_ending {
        LineEnding::Lf => out.push_str(lf_text),
        LineEnding::CrLf => {
            let mut previous = None;
            for ch in lf_text.chars() {
                if ch == '\n' && previous != Some('\r') {
                    out.push('\r');
                }
                out.push(ch);
                previous = Some(ch);
            }
        }
    }
    out
}

/// Returns `text` ending with a newline: `"\n"`, or `"\r\n"` for a CRLF format.
///
/// An empty text, or one already ending with `'\n'`, is returned as it is.
pub fn ensure_final_newline(text: &str, format: TextFormat) -> String {
    let mut out = text.to_owned();
    if !text.is_empty() && !text.ends_with('\n') {
        if format.line_ending == LineEnding::CrLf {
            out.push('\r');
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn format(bom: bool, line_ending: LineEnding, final_newline: bool) -> TextFormat {
        TextFormat {
            bom,
            line_ending,
            final_newline,
        }
    }

    #[test]
    fn default_is_plain_lf_without_final_newline() {
        assert_eq!(TextFormat::default(), format(false, LineEnding::Lf, false));
    }

    #[test]
    fn detect_pure_lf() {
        assert_eq!(detect("a\nb\n"), format(false, LineEnding::Lf, true));
        assert_eq!(detect("a\nb"), format(false, LineEnding::Lf, false));
    }

    #[test]
    fn detect_pure_crlf() {
        assert_eq!(detect("a\r\nb\r\n"), format(false, LineEnding::CrLf, true));
        assert_eq!(
            detect("\u{feff}a\r\nb"),
            format(true, LineEnding::CrLf, false)
        );
    }

    #[test]
    fn detect_mixed_or_no_newline_is_lf() {
        assert_eq!(detect("a\r\nb\nc\r\n").line_ending, LineEnding::Lf);
        assert_eq!(detect("a\nb\r\n").line_ending, LineEnding::Lf);
        assert_eq!(detect("abc").line_ending, LineEnding::Lf);
        assert_eq!(detect("a\rb\r").line_ending, LineEnding::Lf);
        assert_eq!(detect(""), TextFormat::default());
    }

    #[test]
    fn detect_double_cr_is_not_crlf() {
        // "a\r\r\n" would become "a\r\n" and could not be told apart from a real CRLF on restore.
        assert_eq!(detect("a\r\r\nb\r\n").line_ending, LineEnding::Lf);
    }

    #[test]
    fn detect_bom_only_at_start() {
        assert!(detect("\u{feff}x").bom);
        assert!(!detect("x\u{feff}").bom);
    }

    #[test]
    fn to_lf_converts_crlf_and_strips_bom() {
        let (text, fmt) = to_lf("\u{feff}one\r\ntwo\r\n");
        assert_eq!(text, "one\ntwo\n");
        assert_eq!(fmt, format(true, LineEnding::CrLf, true));
    }

    #[test]
    fn to_lf_leaves_mixed_text_alone() {
        let (text, fmt) = to_lf("\u{feff}one\r\ntwo\nthree\r\n");
        assert_eq!(text, "one\r\ntwo\nthree\r\n");
        assert_eq!(fmt.line_ending, LineEnding::Lf);
        assert!(fmt.bom);
    }

    #[test]
    fn to_lf_keeps_lone_carriage_returns() {
        let (text, fmt) = to_lf("a\rb\r\nc\r");
        assert_eq!(text, "a\rb\nc\r");
        assert_eq!(restore(&text, fmt), "a\rb\r\nc\r");
    }

    #[test]
    fn restore_adds_crlf_and_bom() {
        let fmt = format(true, LineEnding::CrLf, true);
        assert_eq!(restore("x\ny\n", fmt), "\u{feff}x\r\ny\r\n");
    }

    #[test]
    fn restore_does_not_double_existing_crlf() {
        let fmt = format(false, LineEnding::CrLf, true);
        assert_eq!(restore("x\r\ny\nz", fmt), "x\r\ny\r\nz");
    }

    #[test]
    fn restore_lf_only_adds_bom() {
        assert_eq!(
            restore("a\r\nb\n", format(true, LineEnding::Lf, true)),
            "\u{feff}a\r\nb\n"
        );
        assert_eq!(restore("a\nb", TextFormat::default()), "a\nb");
    }

    #[test]
    fn an_edit_of_a_crlf_file_stays_crlf() {
        let original = "\u{feff}fn main() {\r\n    old();\r\n}\r\n";
        let (lf, fmt) = to_lf(original);
        let edited = lf.replace("old();", "new();\n    more();");
        assert_eq!(
            restore(&edited, fmt),
            "\u{feff}fn main() {\r\n    new();\r\n    more();\r\n}\r\n"
        );
    }

    #[test]
    fn ensure_final_newline_adds_the_right_terminator() {
        assert_eq!(ensure_final_newline("a", TextFormat::default()), "a\n");
        assert_eq!(
            ensure_final_newline("a\r\nb", format(false, LineEnding::CrLf, false)),
            "a\r\nb\r\n"
        );
        assert_eq!(ensure_final_newline("a\n", TextFormat::default()), "a\n");
        assert_eq!(
            ensure_final_newline("a\r\n", format(false, LineEnding::CrLf, true)),
            "a\r\n"
        );
        assert_eq!(
            ensure_final_newline("", format(false, LineEnding::CrLf, false)),
            ""
        );
    }

    /// A small deterministic generator (xorshift64*), so the property test needs no crate.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }

        fn below(&mut self, n: u64) -> usize {
            (self.next() % n) as usize
        }

        fn line(&mut self) -> String {
            const PIECES: [&str; 8] = ["a", "b", " ", "\t", "é", "😀", "\r", "\u{feff}"];
            let len = self.below(6);
            (0..len)
                .map(|_| PIECES[self.below(PIECES.len() as u64)])
                .collect()
        }

        /// Lines joined by `sep` (or a random terminator when `sep` is None), maybe with a BOM
        /// and maybe with a final terminator.
        fn text(&mut self, sep: Option<&str>) -> String {
            let mut out = String::new();
            if self.below(2) == 0 {
                out.push('\u{feff}');
            }
            let lines = self.below(6);
            for i in 0..lines {
                out.push_str(&self.line());
                let last = i + 1 == lines;
                if !last || self.below(2) == 0 {
                    let terminator = match sep {
                        Some(sep) => sep,
                        None => ["\n", "\r\n", "\r", "\r\r\n"][self.below(4)],
                    };
                    out.push_str(terminator);
                }
            }
            out
        }
    }

    fn assert_round_trip(x: &str) {
        let (lf, fmt) = to_lf(x);
        assert_eq!(
            restore(&lf, fmt),
            x,
            "round trip of {x:?} via {lf:?} and {fmt:?}"
        );
        assert!(!lf.starts_with('\u{feff}') || x.starts_with("\u{feff}\u{feff}"));
    }

    #[test]
    fn round_trip_holds_for_generated_texts() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        for _ in 0..300 {
            let lf = rng.text(Some("\n"));
            assert_round_trip(&lf);
            let crlf = rng.text(Some("\r\n"));
            assert_round_trip(&crlf);
            let mixed = rng.text(None);
            assert_round_trip(&mixed);
        }
    }

    #[test]
    fn generated_crlf_texts_convert_to_lf() {
        let mut rng = Rng(42);
        for _ in 0..300 {
            let crlf = rng.text(Some("\r\n"));
            if crlf.contains("\r\r\n") || !crlf.contains('\n') {
                continue;
            }
            let (lf, fmt) = to_lf(&crlf);
            assert_eq!(fmt.line_ending, LineEnding::CrLf, "{crlf:?}");
            assert!(!lf.contains("\r\n"), "{lf:?}");
        }
    }

    #[test]
    fn round_trip_holds_for_edge_cases() {
        for x in [
            "",
            "\u{feff}",
            "\u{feff}\u{feff}a",
            "\n",
            "\r\n",
            "\r",
            "\r\r\n",
            "a\r\r\nb\r\n",
            "\r\n\n",
            "\n\r\n",
            "a\r\nb\rc\r\n",
            "😀\r\n😀",
        ] {
            assert_round_trip(x);
        }
    }
}
