//! The progress line of `mountfs cp` on a terminal: one line rewritten in place with `\r`
//! (files and bytes done of the total, a bar, the file being copied), at most ten times a
//! second. Whether to show it at all (only when stderr is a terminal) is the caller's choice;
//! this module only draws, into any writer, so that its output can be tested.

use std::io::Write;
use std::time::{Duration, Instant};

/// Where a copy stands, as [`super::copy`] reports it before each file.
#[derive(Debug, Clone, Copy)]
pub struct Progress<'a> {
    /// Files copied so far.
    pub files_done: u64,
    /// Files to copy in all.
    pub files_total: u64,
    /// Bytes copied so far.
    pub bytes_done: u64,
    /// Bytes to copy in all.
    pub bytes_total: u64,
    /// The file being copied now (its virtual path, escaped as answers show it).
    pub current: &'a str,
}

/// How often the line is redrawn at most: a tree of many small files would otherwise spend
/// its time writing to the terminal.
const REDRAW_EVERY: Duration = Duration::from_millis(100);

/// Characters of the bar between `[` and `]`.
const BAR_WIDTH: usize = 20;

/// The line drawn on a terminal of `width` columns (see the module doc).
#[derive(Debug)]
pub struct ProgressLine<W: Write> {
    out: W,
    width: usize,
    last_drawn: Option<Instant>,
    drawn_chars: usize,
}

impl<W: Write> ProgressLine<W> {
    /// A line written to `out`, cut to `width` columns.
    pub fn new(out: W, width: usize) -> Self {
        Self {
            out,
            width: width.max(20),
            last_drawn: None,
            drawn_chars: 0,
        }
    }

    /// Redraws the line for `progress`, unless it was drawn less than 100 ms ago. A terminal
    /// that cannot be written is ignored: the copy matters more than its progress line.
    pub fn update(&mut self, progress: &Progress<'_>) {
        let now = Instant::now();
        if self
            .last_drawn
            .is_some_and(|at| now.duration_since(at) < REDRAW_EVERY)
        {
            return;
        }
        self.last_drawn = Some(now);
        let line = render(progress, self.width);
        self.draw(&line);
    }

    /// Clears the line, leaving the cursor at the start of an empty line.
    pub fn finish(&mut self) {
        if self.drawn_chars > 0 {
            self.draw("");
        }
    }

    fn draw(&mut self, line: &str) {
        let chars = line.chars().count();
        let padding = self.drawn_chars.saturating_sub(chars);
        let _ = write!(self.out, "\r{line}{:padding$}\r", "");
        let _ = self.out.flush();
        self.drawn_chars = chars;
    }
}

/// One progress line cut to `width` characters:
/// `[#########           ]  45% 12/340 files 3.4MiB/7.5MiB /path/to/file`.
pub fn render(progress: &Progress<'_>, width: usize) -> String {
    let fraction = if progress.bytes_total > 0 {
        progress.bytes_done as f64 / progress.bytes_total as f64
    } else if progress.files_total > 0 {
        progress.files_done as f64 / progress.files_total as f64
    } else {
        1.0
    };
    let fraction = fraction.clamp(0.0, 1.0);
    // Truncation towards zero: a bar is full only when everything is done.
    let filled = (fraction * BAR_WIDTH as f64) as usize;
    let mut line = format!(
        "[{}{}] {:>3}% {}/{} files {}/{} {}",
        "#".repeat(filled),
        " ".repeat(BAR_WIDTH - filled),
        (fraction * 100.0) as u32,
        progress.files_done,
        progress.files_total,
        mib(progress.bytes_done),
        mib(progress.bytes_total),
        progress.current,
    );
    if line.chars().count() > width {
        line = line.chars().take(width.saturating_sub(1)).collect();
        line.push('…');
    }
    line
}

/// Bytes as MiB with one decimal: `3.4MiB`.
fn mib(bytes: u64) -> String {
    format!("{:.1}MiB", bytes as f64 / (1024.0 * 1024.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(files_done: u64, bytes_done: u64) -> Progress<'static> {
        Progress {
            files_done,
            files_total: 4,
            bytes_done,
            bytes_total: 4 * 1024 * 1024,
            current: "/docs/a file.md",
        }
    }

    #[test]
    fn the_line_shows_counts_bytes_a_bar_and_the_current_file() {
        assert_eq!(
            render(&at(2, 2 * 1024 * 1024), 200),
            "[##########          ]  50% 2/4 files 2.0MiB/4.0MiB /docs/a file.md"
        );
        assert_eq!(
            render(&at(4, 4 * 1024 * 1024), 200),
            "[####################] 100% 4/4 files 4.0MiB/4.0MiB /docs/a file.md"
        );
    }

    #[test]
    fn a_tree_of_empty_files_counts_files_and_an_empty_tree_is_done() {
        let mut empty = at(1, 0);
        empty.bytes_total = 0;
        assert!(render(&empty, 200).contains(" 25% 1/4 files"));
        empty.files_total = 0;
        empty.files_done = 0;
        assert!(render(&empty, 200).contains("100% 0/0 files"));
    }

    #[test]
    fn a_long_line_is_cut_to_the_terminal_width() {
        let mut long = at(1, 0);
        let path = format!("/{}", "é".repeat(300));
        long.current = &path;
        let line = render(&long, 80);
        assert_eq!(line.chars().count(), 80);
        assert!(line.ends_with('…'));
    }

    #[test]
    fn the_line_is_rewritten_in_place_and_cleared_at_the_end() {
        let mut out = Vec::new();
        let mut line = ProgressLine::new(&mut out, 80);
        line.update(&at(1, 0));
        // Within 100 ms of the last draw: not redrawn.
        line.update(&at(2, 0));
        line.finish();
        let text = String::from_utf8(out).unwrap();
        let drawn = render(&at(1, 0), 80);
        let blank = " ".repeat(drawn.chars().count());
        assert_eq!(text, format!("\r{drawn}\r\r{blank}\r"));
        assert!(!text.contains('\n'), "stdout-free, newline-free: {text:?}");
    }
}
