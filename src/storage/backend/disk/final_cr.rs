//! A reader that ends a text the way `split_lines` does, for the streamed searcher.
//!
//! The whole-file searchers (memory, stores, small files of shell mounts) split a text at `\n`
//! and take one `\r` off the end of every line, the last one included, so a file ending in a
//! lone `\r` has a last line without it. The disk mount's streamed searcher ends lines at `\n`
//! or `\r\n` only, so it kept that `\r`, and crlf-mode `^$` matched after it (ripgrep with
//! `--crlf` agrees with the whole-file searchers). [`WithoutFinalCr`] gives the searcher the
//! same last line: a final lone `\r` after another `\r` is dropped (`a\r\r` → the line `a\r`),
//! any other final lone `\r` becomes `\n` (`a\r` → the line `a`, and a file that is only `\r`
//! keeps its one empty line). Bytes in an ASCII-compatible encoding; not for UTF-16.

use std::io::{self, Read};

/// `inner` with a final lone `\r` made as `split_lines` sees it (see the module doc). Reads
/// straight into the caller's buffer, holding back one byte until the next read (or the end)
/// shows whether it was the last.
pub(in crate::storage::backend) struct WithoutFinalCr<R> {
    inner: R,
    /// The last byte read from `inner`, not given out yet.
    held: Option<u8>,
    /// The byte before `held`.
    before: Option<u8>,
    ended: bool,
}

/// What [`WithoutFinalCr`] makes of a whole text held in memory, in place: a final lone `\r`
/// after another `\r` dropped, any other final `\r` made `\n`.
pub(in crate::storage::backend) fn end_as_split_lines(text: &mut Vec<u8>) {
    if let [.., before, b'\r'] = text.as_slice()
        && *before == b'\r'
    {
        text.pop();
    } else if let Some(last @ b'\r') = text.last_mut() {
        *last = b'\n';
    }
}

impl<R: Read> WithoutFinalCr<R> {
    pub(in crate::storage::backend) fn new(inner: R) -> Self {
        Self {
            inner,
            held: None,
            before: None,
            ended: false,
        }
    }

    fn read_inner(&mut self, out: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.inner.read(out) {
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                other => return other,
            }
        }
    }
}

impl<R: Read> Read for WithoutFinalCr<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if out.is_empty() {
            return Ok(0);
        }
        loop {
            if self.ended {
                return Ok(match self.held.take() {
                    None => 0,
                    Some(b'\r') if self.before == Some(b'\r') => 0,
                    Some(b'\r') => {
                        out[0] = b'\n';
                        1
                    }
                    Some(byte) => {
                        out[0] = byte;
                        1
                    }
                });
            }
            let Some(held) = self.held else {
                // Nothing held yet: the first read.
                let n = self.read_inner(out)?;
                if n == 0 {
                    self.ended = true;
                    continue;
                }
                self.held = Some(out[n - 1]);
                if n >= 2 {
                    self.before = Some(out[n - 2]);
                }
                if n == 1 {
                    continue;
                }
                return Ok(n - 1);
            };
            if out.len() == 1 {
                let mut one = [0u8; 1];
                if self.read_inner(&mut one)? == 0 {
                    self.ended = true;
                    continue;
                }
                out[0] = held;
                self.before = Some(held);
                self.held = Some(one[0]);
                return Ok(1);
            }
            out[0] = held;
            let n = self.read_inner(&mut out[1..])?;
            if n == 0 {
                self.ended = true;
                continue;
            }
            self.held = Some(out[n]);
            self.before = Some(out[n - 1]);
            return Ok(n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn through(bytes: &[u8], read_size: usize) -> Vec<u8> {
        // A source that gives at most 3 bytes a call, to cross chunk edges.
        struct Trickle<'a>(&'a [u8]);
        impl Read for Trickle<'_> {
            fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
                let n = self.0.len().min(out.len()).min(3);
                out[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let mut reader = WithoutFinalCr::new(Trickle(bytes));
        let mut out = Vec::new();
        let mut buf = vec![0u8; read_size];
        loop {
            let n = reader.read(&mut buf).unwrap();
            if n == 0 {
                return out;
            }
            out.extend_from_slice(&buf[..n]);
        }
    }

    #[test]
    fn a_final_lone_cr_ends_the_text_as_split_lines_does() {
        for read_size in [1, 2, 7, 64 * 1024] {
            for (given, wanted) in [
                (&b"one\rtwo\rthree\r"[..], &b"one\rtwo\rthree\n"[..]),
                (b"a\r\r", b"a\r"),
                (b"\r", b"\n"),
                (b"\r\r", b"\r"),
                (b"a\n\r", b"a\n\n"),
                (b"a\r\n", b"a\r\n"),
                (b"a\rb", b"a\rb"),
                (b"", b""),
                (b"no newline", b"no newline"),
            ] {
                assert_eq!(through(given, read_size), wanted, "{given:?} {read_size}");
            }
            let big: Vec<u8> = b"line\r\n"
                .repeat(5_000)
                .into_iter()
                .chain(*b"end\r")
                .collect();
            let mut expected = big.clone();
            *expected.last_mut().unwrap() = b'\n';
            assert_eq!(through(&big, read_size), expected);
        }
    }

    #[test]
    fn a_text_in_memory_ends_as_the_reader_ends_it() {
        let cases: &[&[u8]] = &[
            b"one\rtwo\rthree\r",
            b"a\r\r",
            b"\r",
            b"\r\r",
            b"\r\r\r",
            b"a\n\r",
            b"a\r\n",
            b"a\rb",
            b"",
            b"\n",
            b"no newline",
            b"x\r\ny\r",
        ];
        for given in cases {
            let mut text = given.to_vec();
            end_as_split_lines(&mut text);
            assert_eq!(text, through(given, 64 * 1024), "{given:?}");
        }
    }

    #[test]
    fn the_lines_are_those_of_split_lines() {
        for text in [
            "one\rtwo\rthree\r",
            "a\r\r",
            "\r",
            "\r\r",
            "a\n\r",
            "x\r\ny\r",
            "\n\r\r",
        ] {
            let out = String::from_utf8(through(text.as_bytes(), 5)).unwrap();
            // The streamed searcher's lines: ended by `\n` (a `\r` before it taken off), and
            // the rest, if any, as it is.
            let mut streamed = Vec::new();
            let mut rest = out.as_str();
            while let Some(at) = rest.find('\n') {
                let line = &rest[..at];
                streamed.push(line.strip_suffix('\r').unwrap_or(line));
                rest = &rest[at + 1..];
            }
            if !rest.is_empty() {
                streamed.push(rest);
            }
            assert_eq!(
                streamed,
                crate::ground::text::numbered::split_lines(text),
                "{text:?}"
            );
        }
    }
}
