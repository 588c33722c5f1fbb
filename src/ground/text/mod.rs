//! Pure text functions shared by the tools: no I/O, no clocks, no global state.
//!
//! Everything here takes `&str` and returns owned values or errors, so each rule (how a line is
//! numbered, where a result is cut, when a replacement is ambiguous, how CRLF survives an edit)
//! is testable on its own. Reading and writing bytes is left to `backend/`; deciding when to call
//! these functions is left to `tools/`.
//!
//! - [`numbered`]: `cat -n` rows, long-line splitting (`N`, `N.1`, …), the empty-file reminder,
//!   and recognising those row prefixes in text copied back into an edit.
//! - [`truncate`]: the 80,000-character result cap and its notice.
//! - [`replace`]: literal `old_string` → `new_string` replacement with the edit errors of the
//!   contract, and multi-edit sequencing.
//! - [`nearest`]: where an `old_string` that was not found was probably meant (whitespace aside,
//!   or the most similar region), for the not-found error.
//! - [`quotes`]: matching `old_string` with typographic and straight quotes treated as equal, and
//!   writing `new_string` in the file's quote style.
//! - [`diff`]: unified diffs, changed line ranges and the numbered snippet shown after an edit.
//! - [`encoding`]: a file's character encoding (UTF-8, UTF-16, legacy), decoded and encoded
//!   back without loss.
//! - [`line_endings`]: detecting and restoring CRLF and the UTF-8 BOM around an edit.
//! - [`patch`]: parsing unified diffs and applying their hunks (`apply_patch`).
//! - [`language`]: the programming language a file name suggests (`file_info`).
//! - [`shell_words`]: a command line split into words as a POSIX shell would, nothing expanded
//!   (`--shell NAME=COMMAND`).

pub mod diff;
pub mod encoding;
pub mod language;
pub mod line_endings;
pub mod nearest;
pub mod numbered;
pub mod patch;
pub mod quotes;
pub mod replace;
pub mod shell_words;
pub mod truncate;
