//! Encodings through the tools, on every backend (issue 9): a file in windows-1252/Latin-1,
//! Shift_JIS, UTF-16 LE/BE or UTF-8 with a BOM, with LF or CRLF, is read decoded, and every edit
//! tool writes it back in its own encoding, BOM and line endings. The bytes are compared whole
//! against bytes built here independently (encoding_rs for legacy encodings, code units for
//! UTF-16), so any byte changed outside an edit fails the case.

use mountfs::ground::path::VirtualPath;
use mountfs::state::session::{Session, WriteOptions};
use mountfs::storage::backend::WriteMode;
use mountfs::tools::{ToolError, ToolReply};

use crate::support::backends;
use serde_json::{Value, json};

use crate::support::fixtures::Fixture;

/// How a sample file is written.
#[derive(Debug, Clone, Copy)]
enum Form {
    /// A legacy encoding (no BOM).
    Legacy(&'static encoding_rs::Encoding),
    Utf16Le,
    Utf16Be,
    Utf8Bom,
}

/// A sample: its lines, form, line ending, and what read_file/file_info call its encoding.
struct Sample {
    name: &'static str,
    form: Form,
    crlf: bool,
    label: &'static str,
    lines: [&'static str; 3],
    /// Replacements, line by line, all representable in the form.
    news: [&'static str; 3],
}

fn samples() -> Vec<Sample> {
    vec![
        Sample {
            name: "latin1.txt",
            form: Form::Legacy(encoding_rs::WINDOWS_1252),
            crlf: false,
            label: "windows-1252",
            lines: ["Le café crème brûlée", "naïve façade", "à bientôt"],
            news: ["LE CAFÉ CRÈME", "Noël à Zürich", "où êtes-vous"],
        },
        Sample {
            name: "cp1252-crlf.txt",
            form: Form::Legacy(encoding_rs::WINDOWS_1252),
            crlf: true,
            label: "windows-1252",
            lines: ["Prix: 5€ “net”", "deuxième ligne – ok", "fin…"],
            news: ["Prix: 7€ „brut“", "l’été", "Ende…"],
        },
        Sample {
            name: "utf16le-crlf.txt",
            form: Form::Utf16Le,
            crlf: true,
            label: "UTF-16LE with BOM",
            lines: ["Grüße aus Köln", "zweite Zeile", "Ende"],
            news: ["Grüße 😀 aus Köln", "zweite Zeile ✓", "日本"],
        },
        Sample {
            name: "utf16be.txt",
            form: Form::Utf16Be,
            crlf: false,
            label: "UTF-16BE with BOM",
            lines: ["Ελληνικά κείμενο", "δεύτερη γραμμή", "τέλος"],
            news: ["ΕΛΛΗΝΙΚΆ", "δεύτερη 😀", "end"],
        },
        Sample {
            name: "utf8bom-crlf.txt",
            form: Form::Utf8Bom,
            crlf: true,
            label: "UTF-8 with BOM",
            lines: ["Ünïcödé", "second line", "end"],
            news: ["Ü 😀", "zweite", "終"],
        },
        Sample {
            name: "sjis.txt",
            form: Form::Legacy(encoding_rs::SHIFT_JIS),
            crlf: false,
            label: "Shift_JIS",
            lines: ["日本語のテキスト", "二行目です", "終わり"],
            news: ["日本語の文章", "三行目です", "おしまい"],
        },
        Sample {
            name: "sjis-crlf.txt",
            form: Form::Legacy(encoding_rs::SHIFT_JIS),
            crlf: true,
            label: "Shift_JIS",
            lines: ["こんにちは、世界。", "カタカナ", "ひらがな"],
            news: ["さようなら、世界。", "漢字", "終わり"],
        },
    ]
}

/// The bytes of `lines` in `form`, every line ended, built without mountfs.
fn bytes_of(form: Form, crlf: bool, lines: &[&str]) -> Vec<u8> {
    let eol = if crlf { "\r\n" } else { "\n" };
    let mut text: String = lines.iter().map(|l| format!("{l}{eol}")).collect();
    match form {
        Form::Legacy(encoding) => {
            let (bytes, _, unmappable) = encoding.encode(&text);
            assert!(!unmappable, "sample text fits {}", encoding.name());
            bytes.into_owned()
        }
        Form::Utf8Bom => {
            text.insert(0, '\u{feff}');
            text.into_bytes()
        }
        Form::Utf16Le | Form::Utf16Be => {
            text.insert(0, '\u{feff}');
            text.encode_utf16()
                .flat_map(|unit| match form {
                    Form::Utf16Le => unit.to_le_bytes(),
                    _ => unit.to_be_bytes(),
                })
                .collect()
        }
    }
}

/// A session over the fixture's backend mounted at `/` (so `fx.path` names work as they are).
fn session_over(fx: &Fixture) -> Session {
    backends::session_over(fx.backend.clone(), WriteOptions::default())
}

async fn call(session: &Session, tool: &str, args: Value) -> Result<ToolReply, ToolError> {
    backends::call(tool, args, session).await
}

async fn ok(session: &Session, tool: &str, args: Value) -> ToolReply {
    call(session, tool, args.clone())
        .await
        .unwrap_or_else(|e| panic!("{tool} {args}: {e}"))
}

async fn bytes_at(fx: &Fixture, path: &VirtualPath) -> Vec<u8> {
    fx.backend.read(path).await.expect("read back").content
}

async fn put(fx: &Fixture, path: &VirtualPath, bytes: &[u8]) {
    fx.backend
        .write(path, bytes, WriteMode::Overwrite)
        .await
        .expect("write sample");
}

pub async fn encodings_round_trip_through_every_edit_tool(fx: &Fixture) {
    let session = session_over(fx);
    for sample in samples() {
        let path = fx.path(sample.name);
        let p = path.as_str();
        let (form, crlf) = (sample.form, sample.crlf);
        let [l1, l2, l3] = sample.lines;
        let [n1, n2, n3] = sample.news;
        let b0 = bytes_of(form, crlf, &[l1, l2, l3]);
        put(fx, &path, &b0).await;
        let what = format!("{} on {p}", sample.name);

        // read_file: decoded lines, one note naming the encoding (none for UTF-8).
        let read = ok(&session, "read_file", json!({"file_path": p}))
            .await
            .text;
        for (i, line) in sample.lines.iter().enumerate() {
            assert!(
                read.lines()
                    .any(|row| row == format!("{:>6}\t{line}", i + 1)),
                "{what}: line {} shown decoded:\n{read}",
                i + 1
            );
        }
        assert!(
            !read.contains('\u{fffd}'),
            "{what}: nothing replaced:\n{read}"
        );
        let note = format!("is encoded in {}", sample.label);
        match form {
            Form::Utf8Bom => assert!(!read.contains("(Note"), "{what}: no note:\n{read}"),
            _ => assert_eq!(read.matches(&note).count(), 1, "{what}: one note:\n{read}"),
        }

        // file_info names the encoding.
        let info = ok(&session, "file_info", json!({"file_path": p})).await;
        let structured = info.structured.expect("file_info structured");
        assert_eq!(structured["encoding"], json!(sample.label), "{what}");
        assert!(
            info.text.contains(&format!("encoding: {}", sample.label)),
            "{what}: {}",
            info.text
        );

        // grep searches the decoded text and reports it as text.
        let found = ok(
            &session,
            "grep",
            json!({"pattern": l2, "path": p, "literal": true, "output_mode": "content"}),
        )
        .await
        .text;
        assert!(
            found.contains(&format!("2: {l2}")),
            "{what}: grep:\n{found}"
        );

        // edit_file: one line.
        ok(
            &session,
            "edit_file",
            json!({"file_path": p, "old_string": l1, "new_string": n1}),
        )
        .await;
        let b1 = bytes_of(form, crlf, &[n1, l2, l3]);
        assert_eq!(bytes_at(fx, &path).await, b1, "{what}: edit_file");

        // multi_edit: the two other lines, one of them across a line break.
        ok(
            &session,
            "multi_edit",
            json!({"file_path": p, "edits": [
                {"old_string": l2, "new_string": n2},
                {"old_string": format!("\n{l3}"), "new_string": format!("\n{n3}")},
            ]}),
        )
        .await;
        let b2 = bytes_of(form, crlf, &[n1, n2, n3]);
        assert_eq!(bytes_at(fx, &path).await, b2, "{what}: multi_edit");

        // apply_patch: line 2 back to what it was.
        let patch = format!("--- a{p}\n+++ b{p}\n@@ -1,3 +1,3 @@\n {n1}\n-{n2}\n+{l2}\n {n3}\n");
        ok(&session, "apply_patch", json!({"patch": patch})).await;
        let b3 = bytes_of(form, crlf, &[n1, l2, n3]);
        assert_eq!(bytes_at(fx, &path).await, b3, "{what}: apply_patch");

        // write_file over it keeps encoding, BOM and line endings.
        ok(
            &session,
            "write_file",
            json!({"file_path": p, "content": format!("{l3}\n{l2}\n{l1}\n")}),
        )
        .await;
        let b4 = bytes_of(form, crlf, &[l3, l2, l1]);
        assert_eq!(bytes_at(fx, &path).await, b4, "{what}: write_file");

        // undo_edit, step by step, back to the very first bytes.
        for (step, expected) in [(4, &b3), (3, &b2), (2, &b1), (1, &b0)] {
            ok(&session, "undo_edit", json!({"file_path": p})).await;
            assert_eq!(
                &bytes_at(fx, &path).await,
                expected,
                "{what}: undo back to step {step}"
            );
        }
    }
}

pub async fn the_latin1_edit_of_issue_9_keeps_every_other_byte(fx: &Fixture) {
    let session = session_over(fx);
    let path = fx.path("cafe.txt");
    put(fx, &path, b"caf\xe9\n").await;
    ok(&session, "read_file", json!({"file_path": path.as_str()})).await;
    ok(
        &session,
        "edit_file",
        json!({"file_path": path.as_str(), "old_string": "caf", "new_string": "CAF"}),
    )
    .await;
    assert_eq!(bytes_at(fx, &path).await, b"CAF\xe9\n");
}

pub async fn text_the_encoding_cannot_hold_is_refused_and_nothing_written(fx: &Fixture) {
    let session = session_over(fx);
    for (name, form, encoding_name) in [
        (
            "cp1252.txt",
            Form::Legacy(encoding_rs::WINDOWS_1252),
            "windows-1252",
        ),
        (
            "sjis.txt",
            Form::Legacy(encoding_rs::SHIFT_JIS),
            "Shift_JIS",
        ),
    ] {
        let path = fx.path(name);
        let p = path.as_str();
        let lines = match form {
            Form::Legacy(e) if e == encoding_rs::SHIFT_JIS => ["日本語のテキスト", "二行目です"],
            _ => ["Le café crème", "à bientôt"],
        };
        let before = bytes_of(form, true, &lines);
        put(fx, &path, &before).await;
        ok(&session, "read_file", json!({"file_path": p})).await;
        let attempts = [
            (
                "edit_file",
                json!({"file_path": p, "old_string": lines[1], "new_string": "ok 😀 ok"}),
            ),
            (
                "multi_edit",
                json!({"file_path": p, "edits": [
                    {"old_string": lines[0], "new_string": "fine"},
                    {"old_string": lines[1], "new_string": "ok 😀 ok"},
                ]}),
            ),
            (
                "write_file",
                json!({"file_path": p, "content": "fine\nok 😀 ok\n"}),
            ),
            (
                "apply_patch",
                json!({"patch": format!(
                    "--- a{p}\n+++ b{p}\n@@ -1,2 +1,2 @@\n {}\n-{}\n+ok 😀 ok\n",
                    lines[0], lines[1]
                )}),
            ),
        ];
        for (tool, args) in attempts {
            let error = call(&session, tool, args)
                .await
                .expect_err("refused")
                .to_string();
            assert!(
                error.starts_with("Error:")
                    && error.contains(encoding_name)
                    && error.contains("'😀' (U+1F600) on line 2")
                    && error.contains("Nothing was written"),
                "{tool} on {name}: {error}"
            );
            assert_eq!(bytes_at(fx, &path).await, before, "{tool} on {name}");
        }
    }
}

pub async fn a_file_valid_in_no_encoding_is_shown_but_never_edited(fx: &Fixture) {
    let session = session_over(fx);
    // A UTF-8 BOM over bytes that are not UTF-8, and a UTF-16 BOM over an odd number of bytes.
    for (name, bytes) in [
        ("bad-utf8.txt", &b"\xef\xbb\xbfcaf\xe9 ok\nline two\n"[..]),
        (
            "bad-utf16.txt",
            &b"\xff\xfeo\0k\0\n\0l\0i\0n\0e\0 \0t\0w\0o\0\n\0x"[..],
        ),
    ] {
        let path = fx.path(name);
        let p = path.as_str();
        put(fx, &path, bytes).await;
        let read = ok(&session, "read_file", json!({"file_path": p}))
            .await
            .text;
        assert!(
            read.contains("line two") && read.contains("Edits to it are refused"),
            "{name}: {read}"
        );
        let attempts = [
            (
                "edit_file",
                json!({"file_path": p, "old_string": "line two", "new_string": "LINE"}),
            ),
            (
                "multi_edit",
                json!({"file_path": p, "edits": [{"old_string": "line two", "new_string": "L"}]}),
            ),
            (
                "write_file",
                json!({"file_path": p, "content": "line one\nline two\n"}),
            ),
            (
                "apply_patch",
                json!({"patch": format!("--- a{p}\n+++ b{p}\n@@ -2 +2 @@\n-line two\n+LINE\n")}),
            ),
        ];
        for (tool, args) in attempts {
            let error = call(&session, tool, args)
                .await
                .expect_err("refused")
                .to_string();
            assert!(
                error.starts_with(&format!("Error: {p} cannot be changed as text"))
                    && error.contains("U+FFFD")
                    && error.contains("Nothing was written"),
                "{tool} on {name}: {error}"
            );
            assert_eq!(bytes_at(fx, &path).await, bytes, "{tool} on {name}");
        }
    }
}

pub async fn new_files_are_utf8(fx: &Fixture) {
    let session = session_over(fx);
    let path = fx.path("new.txt");
    ok(
        &session,
        "write_file",
        json!({"file_path": path.as_str(), "content": "café 😀\n"}),
    )
    .await;
    assert_eq!(bytes_at(fx, &path).await, "café 😀\n".as_bytes());
    let info = ok(&session, "file_info", json!({"file_path": path.as_str()})).await;
    assert_eq!(
        info.structured.expect("structured")["encoding"],
        json!("UTF-8")
    );
}
