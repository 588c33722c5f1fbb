//! Invariants checked on generated inputs (issue 10), with `proptest`.
//!
//! Each property runs a bounded number of cases in the ordinary `cargo test` (the default below,
//! or `MOUNTFS_PROPTEST_CASES`), and a larger number in its `_long` twin, which is `#[ignore]`d:
//! `cargo test --test conformance invariants:: -- --ignored` (the count is then `MOUNTFS_PROPTEST_CASES` or ten
//! times the default). A failing case is shrunk by proptest and printed; pin it as a regression
//! test next to the code it found wrong.
//!
//! Texts are generated with LF, CRLF and mixed line endings, with and without a byte-order mark
//! and a final newline, with non-ASCII, quotes, empty and very long lines (over the 5,000
//! characters at which `read_file` splits a line).

use std::sync::Arc;

use mountfs::ground::path::VirtualPath;
use mountfs::ground::text::diff::unified_diff;
use mountfs::state::session::{Session, WriteOptions};
use mountfs::storage::backend::{
    Backend, CompositeBackend, DiskBackend, DiskOptions, MemoryBackend, Mount, Router,
    StoreBackend, WriteMode,
};
use mountfs::storage::store::{Namespace, SqliteStore};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Value, json};

/// Cases per property in the ordinary run: `MOUNTFS_PROPTEST_CASES`, else `default`.
fn ci_cases(default: u32) -> u32 {
    std::env::var("MOUNTFS_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Cases per property in the long (`--ignored`) profile.
fn long_cases(default: u32) -> u32 {
    std::env::var("MOUNTFS_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default * 10)
}

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    })
}

const BOM: &str = "\u{FEFF}";
const FILE: &str = "/f.txt";

/// A generated text file: its lines (no line breaks inside), the break after each, whether
/// the last line has one, and a BOM.
#[derive(Debug, Clone)]
struct GenText {
    lines: Vec<String>,
    crlf: Vec<bool>,
    final_newline: bool,
    bom: bool,
}

impl GenText {
    /// The text with LF breaks and no BOM: what the edit tools work on.
    fn lf(&self) -> String {
        let mut out = self.lines.join("\n");
        if self.final_newline && !self.lines.is_empty() {
            out.push('\n');
        }
        out
    }

    /// The file's bytes.
    fn bytes(&self) -> Vec<u8> {
        let mut out = String::new();
        if self.bom {
            out.push_str(BOM);
        }
        for (i, line) in self.lines.iter().enumerate() {
            out.push_str(line);
            let last = i + 1 == self.lines.len();
            if !last || self.final_newline {
                out.push_str(if self.crlf[i] { "\r\n" } else { "\n" });
            }
        }
        out.into_bytes()
    }

    /// Whether the file has a line break at all.
    fn has_breaks(&self) -> bool {
        self.lines.len() > 1 || (self.final_newline && !self.lines.is_empty())
    }

    /// `Some(true)` when every break is CRLF, `Some(false)` when every one is LF.
    fn uniform(&self) -> Option<bool> {
        let breaks = if self.final_newline {
            self.lines.len()
        } else {
            self.lines.len().saturating_sub(1)
        };
        let used = &self.crlf[..breaks];
        match used.first() {
            None => Some(false),
            Some(first) => used.iter().all(|c| c == first).then_some(*first),
        }
    }
}

/// One line: mostly short text of every kind, sometimes empty, rarely over 5,000 characters.
fn line() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => "[a-z ]{0,12}",
        3 => "[ -~]{0,16}",
        2 => "[a-zé名ü “”‘’\"' ]{0,10}",
        1 => Just(String::new()),
        1 => (0usize..3, "[a-z]").prop_map(|(n, c)| c.repeat(4990 + 2600 * n)),
    ]
}

fn text_with(breaks: BoxedStrategy<bool>) -> impl Strategy<Value = GenText> {
    (
        prop::collection::vec((line(), breaks), 0..14),
        any::<bool>(),
        prop::bool::weighted(0.3),
    )
        .prop_map(|(rows, mut final_newline, bom)| {
            let (mut lines, mut crlf): (Vec<String>, Vec<bool>) = rows.into_iter().unzip();
            // "a\n" + "" without a final newline is "a\n": keep one spelling of each file.
            if !final_newline && lines.last().is_some_and(String::is_empty) {
                lines.pop();
                crlf.pop();
                final_newline = true;
            }
            GenText {
                lines,
                crlf,
                final_newline,
                bom,
            }
        })
}

/// Texts with uniform or mixed line endings.
fn any_text() -> impl Strategy<Value = GenText> {
    (0u8..3).prop_flat_map(|mode| {
        text_with(match mode {
            0 => Just(false).boxed(),
            1 => Just(true).boxed(),
            _ => any::<bool>().boxed(),
        })
    })
}

/// Texts whose line endings are all LF or all CRLF.
fn uniform_text() -> impl Strategy<Value = GenText> {
    any::<bool>().prop_flat_map(|crlf| text_with(Just(crlf).boxed()))
}

/// A session whose `/` is memory (`mounts` adds others).
fn session_with(mounts: Vec<Mount>) -> Session {
    let mut all = vec![crate::support::backends::memory_mount("/")];
    all.extend(mounts);
    Session::new(
        Arc::new(crate::support::backends::composite(all)),
        WriteOptions::default(),
    )
}

async fn call(session: &Session, tool: &str, args: Value) -> Result<String, String> {
    crate::support::backends::call(tool, args, session)
        .await
        .map(|r| r.text)
        .map_err(|e| e.to_string())
}

async fn put(session: &Session, path: &str, bytes: &[u8]) {
    let path = VirtualPath::parse(path).unwrap();
    session
        .backend()
        .write(&path, bytes, WriteMode::Overwrite)
        .await
        .unwrap();
}

async fn bytes_of(session: &Session, path: &str) -> Vec<u8> {
    let path = VirtualPath::parse(path).unwrap();
    session.backend().read(&path).await.unwrap().content
}

/// Puts `text` in a fresh memory session and reads it (any window), as an agent would before
/// editing.
async fn read_session(bytes: &[u8]) -> Session {
    let session = session_with(Vec::new());
    put(&session, FILE, bytes).await;
    call(
        &session,
        "read_file",
        json!({"file_path": FILE, "limit": 1}),
    )
    .await
    .unwrap();
    session
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// The `old_string` of an edit: a slice of the file's LF text (found exactly), or any text.
#[derive(Debug, Clone)]
enum Old {
    Slice(prop::sample::Index, prop::sample::Index),
    Other(String),
}

fn old() -> impl Strategy<Value = Old> {
    prop_oneof![
        4 => (any::<prop::sample::Index>(), any::<prop::sample::Index>()).prop_map(|(a, b)| Old::Slice(a, b)),
        1 => "[a-z \n“\"]{0,6}".prop_map(Old::Other),
    ]
}

fn old_string(old: &Old, lf: &str) -> String {
    match old {
        Old::Other(text) => text.clone(),
        Old::Slice(a, b) => {
            let chars: Vec<char> = lf.chars().collect();
            if chars.is_empty() {
                return String::new();
            }
            let (a, b) = (a.index(chars.len()), b.index(chars.len()));
            let (start, end) = (a.min(b), a.max(b) + 1);
            // Keep slices short, so that most of them are unique.
            chars[start..end.min(start + 40)].iter().collect()
        }
    }
}

/// edit_file then undo_edit gives back every byte; a refused edit changes none; a successful
/// exact edit changes only what it replaced and keeps the BOM and (uniform) line endings.
fn check_edits(cases: u32) {
    let rt = rt();
    let strategy = (any_text(), old(), "[a-zé \n“]{0,8}", any::<bool>());
    runner(cases)
        .run(&strategy, |(text, old, new, replace_all)| {
            rt.block_on(async {
                let original = text.bytes();
                let session = read_session(&original).await;
                // Edits work on LF text for a CRLF file, on the text as it is otherwise (a
                // file with mixed line endings keeps every one of them).
                let crlf = text.uniform() == Some(true);
                let lf = if crlf {
                    text.lf()
                } else {
                    String::from_utf8(original.clone()).unwrap().trim_start_matches(BOM).to_owned()
                };
                let old = old_string(&old, &lf);
                let args = json!({"file_path": FILE, "old_string": old, "new_string": new, "replace_all": replace_all});
                match call(&session, "edit_file", args).await {
                    Err(error) => {
                        prop_assert_eq!(bytes_of(&session, FILE).await, original, "refused: {}", error);
                    }
                    Ok(answer) => {
                        let edited = String::from_utf8(bytes_of(&session, FILE).await).unwrap();
                        prop_assert_eq!(edited.starts_with(BOM), text.bom, "BOM kept");
                        let found = lf.matches(old.as_str()).count();
                        if found > 0 && !answer.contains("quote") {
                            let expected_lf = if replace_all { lf.replace(&old, &new) } else { lf.replacen(&old, &new, 1) };
                            let body = edited.trim_start_matches(BOM);
                            let edited_lf = if crlf { body.replace("\r\n", "\n") } else { body.to_owned() };
                            prop_assert_eq!(edited_lf, expected_lf, "only the replaced text changes");
                        }
                        match text.uniform() {
                            Some(true) => prop_assert!(!edited.replace("\r\n", "").contains('\n'), "CRLF file stays CRLF: {:?}", edited),
                            Some(false) => prop_assert!(!edited.contains('\r'), "LF file stays LF: {:?}", edited),
                            None => {}
                        }
                        call(&session, "undo_edit", json!({"file_path": FILE})).await.map_err(TestCaseError::fail)?;
                        prop_assert_eq!(bytes_of(&session, FILE).await, original, "undo restores every byte");
                    }
                }
                Ok(())
            })
        })
        .unwrap();
}

#[test]
fn edit_then_undo_restores_bytes_and_failed_edits_change_nothing() {
    check_edits(ci_cases(128));
}

#[test]
#[ignore = "long profile: cargo test --test conformance invariants:: -- --ignored"]
fn edit_then_undo_restores_bytes_and_failed_edits_change_nothing_long() {
    check_edits(long_cases(128));
}

/// apply_patch of the unified diff from A to B turns the file holding A into B, keeping its
/// BOM and line endings, whether the patch itself has LF or CRLF lines.
fn check_patches(cases: u32) {
    let rt = rt();
    let strategy = (
        uniform_text(),
        prop::collection::vec(line(), 0..14),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    );
    runner(cases)
        .run(&strategy, |(a, b_lines, b_final, crlf_patch, sparse)| {
            // B shares most lines with A, so that diffs have context and several hunks.
            let mut b = a.clone();
            if sparse && !a.lines.is_empty() {
                for (i, line) in b_lines.iter().enumerate() {
                    let at = (i * 7) % (b.lines.len() + 1);
                    if i % 2 == 0 && at < b.lines.len() {
                        b.lines[at] = line.clone();
                    } else {
                        b.lines.insert(at, line.clone());
                        b.crlf.insert(at, a.uniform() == Some(true));
                    }
                }
            } else {
                b.lines = b_lines;
                b.crlf = vec![a.uniform() == Some(true); b.lines.len()];
            }
            b.final_newline = b_final;
            let (a_lf, b_lf) = (a.lf(), b.lf());
            prop_assume!(a_lf != b_lf);
            let mut patch = unified_diff(FILE, &a_lf, &b_lf);
            if crlf_patch {
                patch = patch.replace('\n', "\r\n");
            }
            rt.block_on(async {
                let session = read_session(&a.bytes()).await;
                let answer = call(&session, "apply_patch", json!({"patch": patch})).await;
                prop_assert!(
                    answer.is_ok(),
                    "apply_patch failed: {:?}\npatch:\n{}",
                    answer,
                    patch
                );
                let mut expected = String::new();
                if a.bom {
                    expected.push_str(BOM);
                }
                if a.uniform() == Some(true) && a.has_breaks() {
                    expected.push_str(&b_lf.replace('\n', "\r\n"));
                } else {
                    expected.push_str(&b_lf);
                }
                let got = String::from_utf8(bytes_of(&session, FILE).await).unwrap();
                prop_assert_eq!(got, expected, "patch:\n{}", patch);
                Ok(())
            })
        })
        .unwrap();
}

/// Found by `apply_patch_of_a_diff_turns_a_into_b`: a patch sent with CRLF line breaks whose
/// last added line is marked `\ No newline at end of file` left a stray '\r' at the end of the
/// file (and a file without line breaks took CRLF from such a patch).
#[test]
fn a_crlf_patch_leaves_no_stray_carriage_return() {
    rt().block_on(async {
        for (before, patch, after) in [
            ("", "--- /f.txt\r\n+++ /f.txt\r\n@@ -0,0 +1 @@\r\n+a\r\n\\ No newline at end of file\r\n", "a"),
            ("", "--- /f.txt\r\n+++ /f.txt\r\n@@ -0,0 +1 @@\r\n+a\r\n", "a\n"),
            ("x", "--- /f.txt\r\n+++ /f.txt\r\n@@ -1 +1 @@\r\n-x\r\n\\ No newline at end of file\r\n+y\r\n\\ No newline at end of file\r\n", "y"),
            ("x\n", "--- /f.txt\r\n+++ /f.txt\r\n@@ -1 +1,2 @@\r\n x\r\n+y\r\n\\ No newline at end of file\r\n", "x\ny"),
            ("x\r\n", "--- /f.txt\r\n+++ /f.txt\r\n@@ -1 +1,2 @@\r\n x\r\n+y\r\n\\ No newline at end of file\r\n", "x\r\ny"),
        ] {
            let session = read_session(before.as_bytes()).await;
            call(&session, "apply_patch", json!({"patch": patch})).await.unwrap();
            assert_eq!(String::from_utf8(bytes_of(&session, FILE).await).unwrap(), after, "{patch:?}");
        }
    });
}

#[test]
fn apply_patch_of_a_diff_turns_a_into_b() {
    check_patches(ci_cases(128));
}

#[test]
#[ignore = "long profile: cargo test --test conformance invariants:: -- --ignored"]
fn apply_patch_of_a_diff_turns_a_into_b_long() {
    check_patches(long_cases(128));
}

/// The rows of one read_file answer (`N`, `N.k` continuation rows joined), and the offset
/// its paging note gives, if any.
fn rows_of(answer: &str) -> (Vec<(usize, String)>, Option<usize>) {
    let mut rows: Vec<(usize, String)> = Vec::new();
    let mut next = None;
    for line in answer.split('\n') {
        let trimmed = line.trim_start();
        let Some((number, content)) = trimmed.split_once('\t') else {
            if let Some(at) = line.find("offset=") {
                let digits: String = line[at + 7..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                next = digits.parse().ok();
            }
            continue;
        };
        match number.split_once('.') {
            Some((n, _)) => {
                let last = rows
                    .last_mut()
                    .expect("a continuation row follows its line");
                assert_eq!(
                    last.0.to_string(),
                    n,
                    "continuation of another line: {line:?}"
                );
                last.1.push_str(content);
            }
            None => rows.push((number.parse().expect("a line number"), content.to_owned())),
        }
    }
    (rows, next)
}

/// read_file windows of any size, followed by their paging notes, give the file's lines once
/// each, in order (CRLF shown as LF, the BOM not shown).
fn check_windows(cases: u32) {
    let rt = rt();
    runner(cases)
        .run(&(any_text(), 1usize..20), |(text, limit)| {
            rt.block_on(async {
                let session = session_with(Vec::new());
                put(&session, FILE, &text.bytes()).await;
                let expected = text.lines.clone();
                let mut got: Vec<String> = Vec::new();
                let mut offset = 0;
                loop {
                    let answer = call(
                        &session,
                        "read_file",
                        json!({"file_path": FILE, "offset": offset, "limit": limit}),
                    )
                    .await
                    .map_err(TestCaseError::fail)?;
                    if answer.starts_with("System reminder: File exists but has empty contents") {
                        prop_assert!(
                            expected.iter().all(|l| l.trim().is_empty()),
                            "blank reminder for {:?}",
                            expected
                        );
                        return Ok(());
                    }
                    let (rows, next) = rows_of(&answer);
                    prop_assert!(
                        !rows.is_empty() && rows.len() <= limit,
                        "{} rows for limit {}",
                        rows.len(),
                        limit
                    );
                    for (i, (number, content)) in rows.into_iter().enumerate() {
                        prop_assert_eq!(number, offset + i + 1);
                        got.push(content);
                    }
                    match next {
                        Some(n) => {
                            prop_assert_eq!(
                                n,
                                got.len(),
                                "the note continues where the window ended"
                            );
                            offset = n;
                        }
                        None => break,
                    }
                }
                prop_assert_eq!(got, expected);
                Ok(())
            })
        })
        .unwrap();
}

#[test]
fn read_file_windows_concatenated_give_the_files_lines() {
    check_windows(ci_cases(96));
}

#[test]
#[ignore = "long profile: cargo test --test conformance invariants:: -- --ignored"]
fn read_file_windows_concatenated_give_the_files_lines_long() {
    check_windows(long_cases(96));
}

/// write_file over an existing file keeps its BOM and (uniform) line endings.
fn check_overwrites(cases: u32) {
    let rt = rt();
    runner(cases)
        .run(
            &(uniform_text(), prop::collection::vec("[a-zé ]{0,8}", 1..6)),
            |(text, new_lines)| {
                rt.block_on(async {
                    let session = read_session(&text.bytes()).await;
                    let content = new_lines.join("\n");
                    call(
                        &session,
                        "write_file",
                        json!({"file_path": FILE, "content": content}),
                    )
                    .await
                    .map_err(TestCaseError::fail)?;
                    let mut expected = String::from(if text.bom { BOM } else { "" });
                    expected.push_str(&if text.uniform() == Some(true) && !text.lines.is_empty() {
                        content.replace('\n', "\r\n")
                    } else {
                        content.clone()
                    });
                    let got = String::from_utf8(bytes_of(&session, FILE).await).unwrap();
                    prop_assert_eq!(got, expected);
                    Ok(())
                })
            },
        )
        .unwrap();
}

#[test]
fn write_file_keeps_line_endings_and_bom() {
    check_overwrites(ci_cases(128));
}

#[test]
#[ignore = "long profile: cargo test --test conformance invariants:: -- --ignored"]
fn write_file_keeps_line_endings_and_bom_long() {
    check_overwrites(long_cases(128));
}

/// The encodings the encoding property writes its files in, with the characters its lines use.
const ENCODED_FORMS: [(&str, &str); 4] = [
    ("windows-1252", "[a-zé èàçôœ€“”]"),
    ("Shift_JIS", "[a-z あいうアイウ日本語、]"),
    ("UTF-16LE", "[a-zé 日😀]"),
    ("UTF-16BE", "[a-zé 日😀]"),
];

/// `text` (a BOM as a leading U+FEFF) in the encoding `name` (as `file_info` names it, without
/// " with BOM"), built with encoding_rs or UTF-16 code units; `None` if it does not fit.
fn encoded(text: &str, name: &str) -> Option<Vec<u8>> {
    match name {
        "UTF-16LE" => Some(text.encode_utf16().flat_map(u16::to_le_bytes).collect()),
        "UTF-16BE" => Some(text.encode_utf16().flat_map(u16::to_be_bytes).collect()),
        _ => {
            let encoding = encoding_rs::Encoding::for_label(name.as_bytes())?;
            let (bytes, _, unmappable) = encoding.encode(text);
            (!unmappable).then(|| bytes.into_owned())
        }
    }
}

/// An edit of a file in windows-1252, Shift_JIS or UTF-16 (LF or CRLF) writes exactly the
/// expected text in the encoding file_info reports (so no byte outside the change moves), or is
/// refused with the file untouched (text the encoding cannot hold); undo gives back every byte.
fn check_encoded_edits(cases: u32) {
    let rt = rt();
    let strategy = (0..ENCODED_FORMS.len(), any::<bool>()).prop_flat_map(|(form, crlf)| {
        let chars = ENCODED_FORMS[form].1;
        (
            Just(form),
            Just(crlf),
            prop::collection::vec(
                prop::string::string_regex(&format!("{chars}{{1,12}}")).unwrap(),
                1..5,
            ),
            any::<prop::sample::Index>(),
            any::<prop::sample::Index>(),
            "[a-zé 日😀€“]{0,6}",
        )
    });
    runner(cases)
        .run(&strategy, |(form, crlf, lines, a, b, new)| {
            rt.block_on(async {
                let name = ENCODED_FORMS[form].0;
                let eol = if crlf { "\r\n" } else { "\n" };
                let lf: String = lines.iter().map(|l| format!("{l}\n")).collect();
                let bom = if name.starts_with("UTF-16") { BOM } else { "" };
                let on_disk = format!("{bom}{}", lf.replace('\n', eol));
                let original = encoded(&on_disk, name).expect("generated text fits");
                let session = read_session(&original).await;
                let info = crate::support::backends::call("file_info", json!({"file_path": FILE}), &session)
                    .await
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                let label = info.structured.as_ref().and_then(|s| s["encoding"].as_str()).unwrap_or("").to_owned();
                let detected = label.trim_end_matches(" with BOM").to_owned();
                // The text the server sees: the bytes decoded in the encoding it detected (a
                // short legacy text may be taken for a neighbouring encoding).
                let Some(encoding) = encoding_rs::Encoding::for_label(detected.as_bytes()) else {
                    // No encoding found that gives these bytes back exactly (chardetng can take a
                    // short text for a neighbouring encoding): the file is shown but never
                    // written, so every edit is refused and no byte changes.
                    prop_assert_eq!(label.as_str(), "", "a label encoding_rs does not know");
                    let args = json!({"file_path": FILE, "old_string": "a", "new_string": "b", "replace_all": true});
                    prop_assert!(call(&session, "edit_file", args).await.is_err(), "an undecodable {} file was edited", name);
                    prop_assert_eq!(bytes_of(&session, FILE).await, original, "an undecodable file keeps every byte");
                    return Ok(());
                };
                let seen = encoding.decode_without_bom_handling(&original).0.into_owned();
                let seen_lf = seen.trim_start_matches(BOM).replace(eol, "\n");
                let chars: Vec<char> = seen_lf.chars().collect();
                let (a, b) = (a.index(chars.len()), b.index(chars.len()));
                let old: String = chars[a.min(b)..=a.max(b)].iter().collect();
                let args = json!({"file_path": FILE, "old_string": old, "new_string": new, "replace_all": true});
                match call(&session, "edit_file", args).await {
                    Err(error) => {
                        prop_assert_eq!(bytes_of(&session, FILE).await, original, "refused: {}", error);
                    }
                    Ok(answer) => {
                        prop_assert!(!answer.contains("quote"), "no loose quotes here: {}", answer);
                        let expected_lf = seen_lf.replace(&old, &new);
                        let expected = encoded(&format!("{bom}{}", expected_lf.replace('\n', eol)), &detected);
                        prop_assert!(expected.is_some(), "an edit landed that {} cannot hold", detected);
                        prop_assert_eq!(bytes_of(&session, FILE).await, expected.unwrap_or_default(), "in {} (generated {})", detected, name);
                        call(&session, "undo_edit", json!({"file_path": FILE})).await.map_err(TestCaseError::fail)?;
                        prop_assert_eq!(bytes_of(&session, FILE).await, original, "undo restores every byte");
                    }
                }
                Ok(())
            })
        })
        .unwrap();
}

#[test]
fn edits_in_other_encodings_change_only_what_they_replace() {
    check_encoded_edits(ci_cases(128));
}

#[test]
#[ignore = "long profile: cargo test --test conformance invariants:: -- --ignored"]
fn edits_in_other_encodings_change_only_what_they_replace_long() {
    check_encoded_edits(long_cases(128));
}

/// Raw path text from components that include every troublesome kind.
fn raw_path() -> impl Strategy<Value = String> {
    let component = prop_oneof![
        Just(String::new()),
        Just(".".to_owned()),
        Just("..".to_owned()),
        Just("foo..bar".to_owned()),
        Just("~".to_owned()),
        Just("é名".to_owned()),
        Just("a\u{202E}b".to_owned()),
        Just("x\ny".to_owned()),
        Just("\\u{41}".to_owned()),
        Just("\\u{000A}".to_owned()),
        Just("\\u{2E}\\u{2E}".to_owned()),
        Just("a\\b".to_owned()),
        "[abm]{1,3}",
    ];
    (
        any::<bool>(),
        prop::collection::vec(component, 0..6),
        any::<bool>(),
    )
        .prop_map(|(lead, parts, trail)| {
            let mut text = if lead { "/".to_owned() } else { String::new() };
            text.push_str(&parts.join("/"));
            if trail {
                text.push('/');
            }
            text
        })
}

/// Path normalisation is idempotent, never yields `.`, `..` or empty components, the shown form
/// parses back to the same path, and every accepted path round-trips through the mount table.
fn check_paths(cases: u32) {
    let prefixes = prop::collection::btree_set("/[abm]{1,2}(/[abm]{1,2})?", 0..4);
    runner(cases)
        .run(&(raw_path(), prefixes), |(raw, prefixes)| {
            let Ok(path) = VirtualPath::parse(&raw) else {
                return Ok(());
            };
            prop_assert!(path.as_str().starts_with('/'));
            prop_assert!(path.is_root() || !path.as_str().ends_with('/'));
            for component in path.as_str().split('/').skip(1).filter(|_| !path.is_root()) {
                prop_assert!(
                    !matches!(component, "" | "." | ".."),
                    "{:?} from {:?}",
                    path,
                    raw
                );
            }
            prop_assert_eq!(
                &VirtualPath::parse_raw(path.as_str()).unwrap(),
                &path,
                "idempotent"
            );
            prop_assert_eq!(
                &VirtualPath::parse(&path.to_string()).unwrap(),
                &path,
                "shown form parses back"
            );
            let mounts: Vec<Mount> = prefixes
                .iter()
                .map(|p| Mount {
                    prefix: VirtualPath::parse(p).unwrap(),
                    backend: Arc::new(MemoryBackend::new()),
                    read_only: false,
                })
                .collect();
            let table = CompositeBackend::new(mounts, || Arc::new(MemoryBackend::new()));
            let (mount, inner) = table.route(&path);
            prop_assert_eq!(&inner.under(&mount.prefix), &path, "strip then put back");
            let longest = prefixes
                .iter()
                .map(|p| VirtualPath::parse(p).unwrap())
                .filter(|p| path.starts_with(p))
                .max_by_key(|p| p.as_str().len())
                .unwrap_or_else(VirtualPath::root);
            prop_assert_eq!(&mount.prefix, &longest, "the longest matching prefix wins");
            Ok(())
        })
        .unwrap();
}

#[test]
fn path_normalisation_is_idempotent_and_round_trips_through_the_mount_table() {
    check_paths(ci_cases(256));
}

#[test]
#[ignore = "long profile: cargo test --test conformance invariants:: -- --ignored"]
fn path_normalisation_is_idempotent_and_round_trips_through_the_mount_table_long() {
    check_paths(long_cases(256));
}

/// Relative file paths of a small tree, none a directory of another.
fn tree() -> impl Strategy<Value = Vec<String>> {
    let name = prop_oneof![
        Just("a"),
        Just("b"),
        Just("ab"),
        Just("Ab"),
        Just("x.rs"),
        Just("y.txt"),
        Just(".h"),
        Just("é"),
        Just("a.b.rs"),
        Just("sp ace")
    ];
    prop::collection::vec(prop::collection::vec(name, 1..4), 1..10).prop_map(|paths| {
        let mut files: Vec<String> = Vec::new();
        for parts in paths {
            let path = parts.join("/");
            let clash = files.iter().any(|f| {
                *f == path
                    || f.starts_with(&format!("{path}/"))
                    || path.starts_with(&format!("{f}/"))
            });
            if !clash {
                files.push(path);
            }
        }
        files
    })
}

fn glob_pattern() -> impl Strategy<Value = String> {
    let part = prop_oneof![
        Just("*"),
        Just("?"),
        Just("**"),
        Just("a*"),
        Just("*.rs"),
        Just("{a,b}"),
        Just("[ab]"),
        Just("x.rs"),
        Just("*.{rs,txt}"),
        Just("é"),
        Just("?b"),
        Just(".*"),
        Just("[!a]*")
    ];
    prop::collection::vec(part, 1..4).prop_map(|parts| parts.join("/"))
}

/// glob (and grep's `glob` filter) answers the same files on memory, SQLite and disk for the
/// same tree.
fn check_glob(cases: u32) {
    let rt = rt();
    runner(cases)
        .run(&(tree(), glob_pattern()), |(files, pattern)| {
            rt.block_on(async {
                let disk_dir = tempfile::tempdir().unwrap();
                let db_dir = tempfile::tempdir().unwrap();
                let store = SqliteStore::open(db_dir.path().join("g.db")).await.unwrap();
                let disk = DiskBackend::open_without_sweep(disk_dir.path(), DiskOptions::default())
                    .unwrap();
                let mount = |prefix: &str, backend: Arc<dyn Backend>| Mount {
                    prefix: VirtualPath::parse(prefix).unwrap(),
                    backend,
                    read_only: false,
                };
                let session = session_with(vec![
                    mount("/mem", Arc::new(MemoryBackend::new())),
                    mount(
                        "/sq",
                        Arc::new(StoreBackend::new(
                            Arc::new(store),
                            Namespace::new("g").unwrap(),
                        )),
                    ),
                    mount("/disk", Arc::new(disk)),
                ]);
                for file in &files {
                    put(&session, &format!("/mem/{file}"), b"x\n").await;
                    put(&session, &format!("/sq/{file}"), b"x\n").await;
                    // Plain files, as a checkout holds them (the backend's writes fsync).
                    let on_disk = disk_dir.path().join(file);
                    std::fs::create_dir_all(on_disk.parent().unwrap()).unwrap();
                    std::fs::write(on_disk, b"x\n").unwrap();
                }
                let mut answers = Vec::new();
                for root in ["/mem", "/sq", "/disk"] {
                    let text = call(&session, "glob", json!({"pattern": pattern, "path": root}))
                        .await
                        .map_err(TestCaseError::fail)?;
                    let mut found: Vec<String> = text
                        .lines()
                        .filter_map(|l| l.strip_prefix(root).map(str::to_owned))
                        .collect();
                    found.sort();
                    // grep's `glob` filter is the same matcher.
                    let text = call(
                        &session,
                        "grep",
                        json!({"pattern": "x", "glob": pattern, "path": root}),
                    )
                    .await
                    .map_err(TestCaseError::fail)?;
                    let mut filtered: Vec<String> = text
                        .lines()
                        .filter_map(|l| l.strip_prefix(root).map(str::to_owned))
                        .collect();
                    filtered.sort();
                    prop_assert_eq!(&filtered, &found, "grep's glob filter vs glob on {}", root);
                    answers.push(found);
                }
                prop_assert_eq!(
                    &answers[0],
                    &answers[1],
                    "memory vs SQLite for {} over {:?}",
                    pattern,
                    files
                );
                prop_assert_eq!(
                    &answers[0],
                    &answers[2],
                    "memory vs disk for {} over {:?}",
                    pattern,
                    files
                );
                Ok(())
            })
        })
        .unwrap();
}

#[test]
fn glob_matching_agrees_between_memory_sqlite_and_disk() {
    check_glob(ci_cases(64));
}

#[test]
#[ignore = "long profile: cargo test --test conformance invariants:: -- --ignored"]
fn glob_matching_agrees_between_memory_sqlite_and_disk_long() {
    check_glob(long_cases(64));
}
