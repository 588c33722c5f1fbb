//! The conformance cases: the rules of the `Backend` trait (src/storage/backend/mod.rs), each checked the
//! same way on every backend. A case gets a fresh, empty fixture and works under `fx.base`.

use futures_util::StreamExt;
use std::sync::Arc;
use std::time::Duration;

use mountfs::ground::path::VirtualPath;
use mountfs::ground::search::{GlobMatcher, GrepPattern};
use mountfs::storage::backend::{
    DeleteOptions, EntryKind, Error, FileView, GlobQuery, GrepCollect, GrepQuery, LineWindow,
    RenameOptions, Renamed, Version, WriteMode,
};

use crate::support::fixtures::Fixture;

async fn put(fx: &Fixture, rel: &str, content: &[u8]) {
    fx.backend
        .write(&fx.path(rel), content, WriteMode::Overwrite)
        .await
        .unwrap_or_else(|e| panic!("write {rel}: {e}"));
}

fn names(fx: &Fixture, paths: impl IntoIterator<Item = VirtualPath>) -> Vec<String> {
    let mut names: Vec<String> = paths
        .into_iter()
        .map(|p| p.relative_to(&fx.base).expect("under base").to_owned())
        .collect();
    names.sort();
    names
}

async fn glob(fx: &Fixture, dir: &str, pattern: &str) -> Vec<String> {
    let found = fx
        .backend
        .glob(&GlobQuery {
            dir: fx.path(dir),
            matcher: GlobMatcher::new(pattern).expect("pattern"),
            control: Default::default(),
        })
        .await
        .expect("glob");
    assert!(
        found.iter().all(|e| e.kind == EntryKind::File),
        "glob returns files only"
    );
    names(fx, found.into_iter().map(|e| e.path))
}

async fn ls(fx: &Fixture, dir: &str) -> Vec<String> {
    let entries = fx.backend.ls(&fx.path(dir)).await.expect("ls");
    let mut shown: Vec<String> = entries
        .into_iter()
        .map(|e| {
            let rel = e.path.relative_to(&fx.base).expect("under base").to_owned();
            if e.kind == EntryKind::Directory {
                format!("{rel}/")
            } else {
                format!("{rel} {}", e.size)
            }
        })
        .collect();
    shown.sort();
    shown
}

fn grep_query(fx: &Fixture, dir: &str, pattern: &str, collect: GrepCollect) -> GrepQuery {
    GrepQuery {
        dir: fx.path(dir),
        pattern: Arc::new(GrepPattern::new(pattern, false, false).expect("pattern")),
        file_filter: None,
        collect,
        control: Default::default(),
    }
}

pub async fn write_then_read(fx: &Fixture) {
    let outcome = fx
        .backend
        .write(
            &fx.path("notes.md"),
            b"hello\nworld\n",
            WriteMode::CreateOnly,
        )
        .await
        .unwrap();
    assert!(outcome.created);
    let file = fx.backend.read(&fx.path("notes.md")).await.unwrap();
    assert_eq!(file.content, b"hello\nworld\n");
    assert_eq!(file.version, outcome.version);
    assert!(file.modified.is_some());
}

pub async fn version_is_stable_and_follows_content(fx: &Fixture) {
    put(fx, "v.txt", b"one").await;
    let first = fx.backend.read(&fx.path("v.txt")).await.unwrap().version;
    let again = fx.backend.read(&fx.path("v.txt")).await.unwrap().version;
    assert_eq!(first, again, "reading does not change the version");
    put(fx, "v.txt", b"two").await;
    let second = fx.backend.read(&fx.path("v.txt")).await.unwrap().version;
    assert_ne!(first, second, "a new content is a new version");
}

pub async fn create_only_fails_if_exists(fx: &Fixture) {
    put(fx, "a.txt", b"first").await;
    let err = fx
        .backend
        .write(&fx.path("a.txt"), b"second", WriteMode::CreateOnly)
        .await
        .unwrap_err();
    assert_eq!(
        err,
        Error::AlreadyExists {
            path: fx.path("a.txt")
        }
    );
    assert_eq!(
        fx.backend.read(&fx.path("a.txt")).await.unwrap().content,
        b"first"
    );
}

pub async fn overwrite_keeps_created_time(fx: &Fixture) {
    put(fx, "c.txt", b"v1").await;
    let before = fx.backend.read(&fx.path("c.txt")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let outcome = fx
        .backend
        .write(&fx.path("c.txt"), b"v2", WriteMode::Overwrite)
        .await
        .unwrap();
    assert!(!outcome.created);
    let after = fx.backend.read(&fx.path("c.txt")).await.unwrap();
    assert_eq!(after.content, b"v2");
    if before.created.is_some() {
        assert_eq!(before.created, after.created, "created survives overwrite");
    }
    assert!(after.modified >= before.modified);
}

pub async fn if_version_writes_only_over_that_version(fx: &Fixture) {
    put(fx, "cas.txt", b"base").await;
    let base = fx.backend.read(&fx.path("cas.txt")).await.unwrap().version;
    let next = fx
        .backend
        .write(
            &fx.path("cas.txt"),
            b"mine",
            WriteMode::IfVersion(base.clone()),
        )
        .await
        .unwrap();
    assert_ne!(next.version, base);
    // A second writer still holding the old version loses, and changes nothing.
    let err = fx
        .backend
        .write(
            &fx.path("cas.txt"),
            b"theirs",
            WriteMode::IfVersion(base.clone()),
        )
        .await
        .unwrap_err();
    assert_eq!(
        err,
        Error::VersionMismatch {
            path: fx.path("cas.txt")
        }
    );
    assert_eq!(
        fx.backend.read(&fx.path("cas.txt")).await.unwrap().content,
        b"mine"
    );
    // Update-if-version of a file that does not exist is a mismatch too, and creates nothing.
    let err = fx
        .backend
        .write(&fx.path("gone.txt"), b"x", WriteMode::IfVersion(base))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        Error::VersionMismatch {
            path: fx.path("gone.txt")
        }
    );
    assert!(
        fx.backend
            .stat(&fx.path("gone.txt"))
            .await
            .unwrap()
            .is_none()
    );
}

pub async fn binary_content_round_trips(fx: &Fixture) {
    let bytes: Vec<u8> = (0..=255u8).chain((0..=255u8).rev()).collect();
    put(fx, "blob.bin", &bytes).await;
    assert_eq!(
        fx.backend.read(&fx.path("blob.bin")).await.unwrap().content,
        bytes
    );
    let invalid_utf8 = b"caf\xe9 \xff\xfe text".to_vec();
    put(fx, "latin1.txt", &invalid_utf8).await;
    assert_eq!(
        fx.backend
            .read(&fx.path("latin1.txt"))
            .await
            .unwrap()
            .content,
        invalid_utf8
    );
    put(fx, "empty", b"").await;
    assert_eq!(
        fx.backend.read(&fx.path("empty")).await.unwrap().content,
        b""
    );
}

pub async fn write_creates_parent_directories(fx: &Fixture) {
    put(fx, "deep/er/still/file.txt", b"x").await;
    for dir in ["deep", "deep/er", "deep/er/still"] {
        let entry = fx.backend.stat(&fx.path(dir)).await.unwrap().expect(dir);
        assert_eq!(entry.kind, EntryKind::Directory, "{dir}");
    }
    assert_eq!(ls(fx, "deep").await, vec!["deep/er/"]);
}

pub async fn write_under_a_file_or_over_a_directory_is_refused(fx: &Fixture) {
    put(fx, "plain.txt", b"x").await;
    let err = fx
        .backend
        .write(&fx.path("plain.txt/child.txt"), b"y", WriteMode::Overwrite)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotADirectory { .. }), "{err:?}");
    put(fx, "dir/inside.txt", b"x").await;
    let err = fx
        .backend
        .write(&fx.path("dir"), b"y", WriteMode::Overwrite)
        .await
        .unwrap_err();
    assert_eq!(
        err,
        Error::IsADirectory {
            path: fx.path("dir")
        }
    );
    assert_eq!(
        fx.backend
            .read(&fx.path("plain.txt"))
            .await
            .unwrap()
            .content,
        b"x"
    );
}

pub async fn read_missing_or_directory_is_refused(fx: &Fixture) {
    let err = fx.backend.read(&fx.path("nope.txt")).await.unwrap_err();
    assert_eq!(
        err,
        Error::NotFound {
            path: fx.path("nope.txt")
        }
    );
    put(fx, "d/f.txt", b"x").await;
    let err = fx.backend.read(&fx.path("d")).await.unwrap_err();
    assert_eq!(err, Error::IsADirectory { path: fx.path("d") });
}

pub async fn stat_reports_files_directories_and_absence(fx: &Fixture) {
    put(fx, "s/f.txt", b"12345").await;
    let file = fx.backend.stat(&fx.path("s/f.txt")).await.unwrap().unwrap();
    assert_eq!((file.kind, file.size), (EntryKind::File, 5));
    assert_eq!(file.path, fx.path("s/f.txt"));
    let dir = fx.backend.stat(&fx.path("s")).await.unwrap().unwrap();
    assert_eq!(dir.kind, EntryKind::Directory);
    assert!(fx.backend.stat(&fx.path("s/none")).await.unwrap().is_none());
    let base = fx.backend.stat(&fx.base).await.unwrap().unwrap();
    assert_eq!(
        base.kind,
        EntryKind::Directory,
        "the root of a mount always exists"
    );
}

pub async fn ls_lists_direct_children_with_sizes(fx: &Fixture) {
    put(fx, "a.txt", b"aaa").await;
    put(fx, "b/c.txt", b"c").await;
    put(fx, "b/d/e.txt", b"e").await;
    put(fx, "b.txt", b"bb").await;
    put(fx, "b-c/x", b"x").await;
    assert_eq!(ls(fx, "").await, vec!["a.txt 3", "b-c/", "b.txt 2", "b/"]);
    assert_eq!(ls(fx, "b").await, vec!["b/c.txt 1", "b/d/"]);
    assert_eq!(ls(fx, "b/d").await, vec!["b/d/e.txt 1"]);
}

pub async fn ls_missing_or_file_is_refused(fx: &Fixture) {
    assert!(
        fx.backend.ls(&fx.base).await.unwrap().is_empty(),
        "an empty root lists empty"
    );
    let err = fx.backend.ls(&fx.path("missing")).await.unwrap_err();
    assert_eq!(
        err,
        Error::NotFound {
            path: fx.path("missing")
        }
    );
    put(fx, "f.txt", b"x").await;
    let err = fx.backend.ls(&fx.path("f.txt")).await.unwrap_err();
    assert_eq!(
        err,
        Error::NotADirectory {
            path: fx.path("f.txt")
        }
    );
}

pub async fn ls_of_many_files_is_complete(fx: &Fixture) {
    for i in 0..60 {
        put(fx, &format!("many/f{i:03}.txt"), b"x").await;
        put(fx, &format!("many/sub{}/g{i}.txt", i % 7), b"y").await;
    }
    let listed = ls(fx, "many").await;
    assert_eq!(listed.len(), 60 + 7);
    assert!(listed.contains(&"many/f059.txt 1".to_owned()));
    assert!(listed.contains(&"many/sub6/".to_owned()));
}

pub async fn delete_file_and_directories(fx: &Fixture) {
    put(fx, "x/one.txt", b"1").await;
    put(fx, "x/y/two.txt", b"2").await;
    put(fx, "keep.txt", b"k").await;
    fx.backend
        .delete(&fx.path("x/one.txt"), &DeleteOptions::default())
        .await
        .unwrap();
    assert!(
        fx.backend
            .stat(&fx.path("x/one.txt"))
            .await
            .unwrap()
            .is_none()
    );
    let err = fx
        .backend
        .delete(&fx.path("x/one.txt"), &DeleteOptions::default())
        .await
        .unwrap_err();
    assert_eq!(
        err,
        Error::NotFound {
            path: fx.path("x/one.txt")
        }
    );
    let err = fx
        .backend
        .delete(&fx.path("x"), &DeleteOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err, Error::DirectoryNotEmpty { path: fx.path("x") });
    assert!(
        fx.backend
            .stat(&fx.path("x/y/two.txt"))
            .await
            .unwrap()
            .is_some()
    );
    fx.backend
        .delete(
            &fx.path("x"),
            &DeleteOptions {
                recursive: true,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(fx.backend.stat(&fx.path("x")).await.unwrap().is_none());
    assert_eq!(ls(fx, "").await, vec!["keep.txt 1"]);
}

pub async fn directories_follow_their_files(fx: &Fixture) {
    put(fx, "e/only.txt", b"x").await;
    fx.backend
        .delete(&fx.path("e/only.txt"), &DeleteOptions::default())
        .await
        .unwrap();
    let dir = fx.backend.stat(&fx.path("e")).await.unwrap();
    if fx.caps.implicit_directories {
        assert!(
            dir.is_none(),
            "an implicit directory goes with its last file"
        );
    } else {
        assert_eq!(
            dir.map(|d| d.kind),
            Some(EntryKind::Directory),
            "a real directory stays"
        );
    }
}

pub async fn delete_if_version_refuses_other_versions(fx: &Fixture) {
    put(fx, "d.txt", b"old").await;
    let old = fx.backend.read(&fx.path("d.txt")).await.unwrap().version;
    put(fx, "d.txt", b"new").await;
    let err = fx
        .backend
        .delete(
            &fx.path("d.txt"),
            &DeleteOptions {
                recursive: false,
                if_version: Some(old),
            },
        )
        .await
        .unwrap_err();
    assert_eq!(
        err,
        Error::VersionMismatch {
            path: fx.path("d.txt")
        }
    );
    assert_eq!(
        fx.backend.read(&fx.path("d.txt")).await.unwrap().content,
        b"new"
    );
}

fn text_window(view: FileView) -> mountfs::storage::backend::TextWindow {
    match view {
        FileView::Text(window) => window,
        FileView::Binary(_) => panic!("expected text"),
    }
}

pub async fn read_window_pages_lines(fx: &Fixture) {
    let content: String = (1..=10).map(|i| format!("line {i}\n")).collect();
    put(fx, "ten.txt", content.as_bytes()).await;
    let path = fx.path("ten.txt");
    let window = |offset, limit| LineWindow { offset, limit };
    let w = text_window(fx.backend.read_window(&path, window(0, 3)).await.unwrap());
    assert_eq!(w.lines, vec!["line 1", "line 2", "line 3"]);
    assert!(w.has_more);
    let w = text_window(fx.backend.read_window(&path, window(8, 5)).await.unwrap());
    assert_eq!(w.lines, vec!["line 9", "line 10"]);
    assert!(!w.has_more);
    assert_eq!(
        w.total_lines,
        Some(10),
        "a window reaching the end knows the total"
    );
    let w = text_window(fx.backend.read_window(&path, window(10, 5)).await.unwrap());
    assert!(w.lines.is_empty());
    assert_eq!(w.total_lines, Some(10));
    let version = fx.backend.read(&path).await.unwrap().version;
    assert_eq!(
        w.version, version,
        "a window carries the whole file's version"
    );
    put(fx, "no-final-newline.txt", b"a\nb").await;
    let w = text_window(
        fx.backend
            .read_window(&fx.path("no-final-newline.txt"), window(0, 10))
            .await
            .unwrap(),
    );
    assert_eq!(w.lines, vec!["a", "b"]);
    put(fx, "empty.txt", b"").await;
    let w = text_window(
        fx.backend
            .read_window(&fx.path("empty.txt"), window(0, 10))
            .await
            .unwrap(),
    );
    assert_eq!(
        (w.lines.len(), w.total_lines, w.has_more),
        (0, Some(0), false)
    );
}

pub async fn read_window_shows_crlf_as_lf_and_hides_bom(fx: &Fixture) {
    put(fx, "crlf.txt", b"\xef\xbb\xbfone\r\ntwo\r\n").await;
    let w = text_window(
        fx.backend
            .read_window(
                &fx.path("crlf.txt"),
                LineWindow {
                    offset: 0,
                    limit: 10,
                },
            )
            .await
            .unwrap(),
    );
    assert_eq!(w.lines, vec!["one", "two"]);
    put(fx, "bad-utf8.txt", b"ok\ncaf\xe9\n").await;
    let w = text_window(
        fx.backend
            .read_window(
                &fx.path("bad-utf8.txt"),
                LineWindow {
                    offset: 0,
                    limit: 10,
                },
            )
            .await
            .unwrap(),
    );
    // Not UTF-8, but windows-1252 (Latin-1): decoded, not replaced.
    assert!(!w.lossy);
    assert_eq!(w.encoding.name(), "windows-1252");
    assert_eq!(w.lines, vec!["ok", "café"]);
    // A UTF-8 BOM over bytes that are not UTF-8: valid in nothing found, shown with U+FFFD.
    put(fx, "bad-utf8.txt", b"\xef\xbb\xbfok\ncaf\xe9\n").await;
    let w = text_window(
        fx.backend
            .read_window(
                &fx.path("bad-utf8.txt"),
                LineWindow {
                    offset: 0,
                    limit: 10,
                },
            )
            .await
            .unwrap(),
    );
    assert!(w.lossy);
    assert_eq!(w.lines, vec!["ok", "caf\u{fffd}"]);
}

pub async fn read_window_of_binary_gives_a_sample(fx: &Fixture) {
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    png.extend(std::iter::repeat_n(7u8, 20_000));
    put(fx, "img.png", &png).await;
    match fx
        .backend
        .read_window(
            &fx.path("img.png"),
            LineWindow {
                offset: 0,
                limit: 10,
            },
        )
        .await
        .unwrap()
    {
        FileView::Binary(sample) => {
            assert_eq!(sample.size, png.len() as u64);
            assert!(sample.head.starts_with(b"\x89PNG"));
            assert!(sample.head.len() <= mountfs::ground::content::SNIFF_BYTES);
        }
        FileView::Text(_) => panic!("a PNG is binary"),
    }
}

pub async fn glob_matches_names_at_any_depth(fx: &Fixture) {
    put(fx, "main.rs", b"").await;
    put(fx, "src/lib.rs", b"").await;
    put(fx, "src/deep/mod.rs", b"").await;
    put(fx, "src/notes.md", b"").await;
    put(fx, "Cargo.toml", b"").await;
    assert_eq!(
        glob(fx, "", "*.rs").await,
        vec!["main.rs", "src/deep/mod.rs", "src/lib.rs"]
    );
    assert_eq!(
        glob(fx, "", "*.{md,toml}").await,
        vec!["Cargo.toml", "src/notes.md"]
    );
    assert_eq!(
        glob(fx, "src", "*.rs").await,
        vec!["src/deep/mod.rs", "src/lib.rs"]
    );
    assert_eq!(glob(fx, "", "?ain.rs").await, vec!["main.rs"]);
    assert_eq!(
        glob(fx, "", "[lm]*.rs").await,
        vec!["main.rs", "src/deep/mod.rs", "src/lib.rs"]
    );
    assert!(
        glob(fx, "", "*.RS").await.is_empty(),
        "matching is case-sensitive"
    );
}

pub async fn glob_with_slash_matches_relative_paths(fx: &Fixture) {
    put(fx, "src/a.rs", b"").await;
    put(fx, "src/x/b.rs", b"").await;
    put(fx, "tests/c.rs", b"").await;
    assert_eq!(glob(fx, "", "src/*.rs").await, vec!["src/a.rs"]);
    assert_eq!(
        glob(fx, "", "src/**/*.rs").await,
        vec!["src/a.rs", "src/x/b.rs"]
    );
    assert_eq!(
        glob(fx, "", "**/*.rs").await,
        vec!["src/a.rs", "src/x/b.rs", "tests/c.rs"]
    );
    assert_eq!(glob(fx, "src", "x/*.rs").await, vec!["src/x/b.rs"]);
    assert!(
        glob(fx, "src", "src/*.rs").await.is_empty(),
        "relative to the searched dir"
    );
}

pub async fn glob_of_missing_directory_is_empty(fx: &Fixture) {
    put(fx, "a.rs", b"").await;
    assert!(glob(fx, "nowhere", "*.rs").await.is_empty());
}

pub async fn grep_collects_files_counts_and_lines(fx: &Fixture) {
    put(fx, "a.txt", b"alpha\nbeta\ngamma\nbeta again\ndelta\n").await;
    put(fx, "b/c.txt", b"nothing here\n").await;
    put(fx, "b/d.txt", b"beta\n").await;
    let files = fx
        .backend
        .grep(&grep_query(fx, "", "beta", GrepCollect::Files))
        .await
        .unwrap();
    assert_eq!(
        names(fx, files.into_iter().map(|f| f.path)),
        vec!["a.txt", "b/d.txt"]
    );
    let mut counts: Vec<(String, usize)> = fx
        .backend
        .grep(&grep_query(fx, "", "^beta", GrepCollect::Count))
        .await
        .unwrap()
        .into_iter()
        .map(|f| {
            (
                f.path.relative_to(&fx.base).unwrap().to_owned(),
                f.match_count,
            )
        })
        .collect();
    counts.sort();
    assert_eq!(
        counts,
        vec![("a.txt".to_owned(), 2), ("b/d.txt".to_owned(), 1)]
    );
    let lines = fx
        .backend
        .grep(&grep_query(fx, "", "gamma", GrepCollect::lines(1)))
        .await
        .unwrap();
    assert_eq!(lines.len(), 1);
    let shown: Vec<(usize, &str, bool)> = lines[0]
        .lines
        .iter()
        .map(|l| (l.number, l.text.as_str(), l.is_match))
        .collect();
    assert_eq!(
        shown,
        vec![
            (2, "beta", false),
            (3, "gamma", true),
            (4, "beta again", false)
        ]
    );
}

pub async fn grep_filters_by_glob_and_skips_binary(fx: &Fixture) {
    put(fx, "src/a.rs", b"needle\n").await;
    put(fx, "src/b.py", b"needle\n").await;
    put(fx, "bin.dat", b"needle\0binary").await;
    let mut query = grep_query(fx, "", "needle", GrepCollect::Files);
    let all = fx.backend.grep(&query).await.unwrap();
    assert_eq!(
        names(fx, all.into_iter().map(|f| f.path)),
        vec!["src/a.rs", "src/b.py"]
    );
    query.file_filter = Some(GlobMatcher::new("*.rs").unwrap());
    let rs = fx.backend.grep(&query).await.unwrap();
    assert_eq!(names(fx, rs.into_iter().map(|f| f.path)), vec!["src/a.rs"]);
    query.file_filter = Some(GlobMatcher::new("src/*.py").unwrap());
    let py = fx.backend.grep(&query).await.unwrap();
    assert_eq!(names(fx, py.into_iter().map(|f| f.path)), vec!["src/b.py"]);
}

pub async fn grep_of_one_file_searches_that_file(fx: &Fixture) {
    put(fx, "one.txt", b"x1\nx2\n").await;
    put(fx, "two.txt", b"x3\n").await;
    let found = fx
        .backend
        .grep(&grep_query(fx, "one.txt", "x", GrepCollect::Count))
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].path, fx.path("one.txt"));
    assert_eq!(found[0].match_count, 2);
}

pub async fn errors_name_virtual_paths(fx: &Fixture) {
    let err = fx
        .backend
        .read(&fx.path("dir/missing.txt"))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(text.starts_with("Error: File not found: "), "{text}");
    assert!(text.contains(fx.path("dir/missing.txt").as_str()), "{text}");
}

pub async fn ls_of_a_large_directory_pages_past_subdirectories(fx: &Fixture) {
    // More files than one listing page holds in the store backends, with subdirectories (and
    // names sorting right around them) spread through the range.
    // The directories first (each once), then the files eight at a time: the shell and object
    // mounts spend most of a write waiting for their target.
    for i in (0..1100).step_by(100) {
        put(fx, &format!("big/d{i:04}/inner/deep"), b"").await;
    }
    let mut names: Vec<String> = (0..1100).map(|i| format!("big/f{i:04}")).collect();
    for i in (0..1100).step_by(100) {
        names.push(format!("big/d{i:04}.txt"));
        names.push(format!("big/d{i:04}0"));
    }
    futures_util::stream::iter(names)
        .for_each_concurrent(8, |name| async move { put(fx, &name, b"").await })
        .await;
    let listed = ls(fx, "big").await;
    let dirs = listed.iter().filter(|e| e.ends_with('/')).count();
    assert_eq!((listed.len() - dirs, dirs), (1100 + 22, 11));
    assert!(listed.contains(&"big/d0500/".to_owned()));
    assert!(listed.contains(&"big/d0500.txt 0".to_owned()));
    assert!(listed.contains(&"big/d05000 0".to_owned()));
    assert_eq!(ls(fx, "big/d0500").await, vec!["big/d0500/inner/"]);
}

pub async fn grep_and_glob_page_through_many_files(fx: &Fixture) {
    for i in 0..300 {
        let text: &[u8] = if i % 3 == 0 { b"needle\n" } else { b"hay\n" };
        put(fx, &format!("g/{i:03}.txt"), text).await;
    }
    let found = fx
        .backend
        .grep(&grep_query(fx, "", "needle", GrepCollect::Files))
        .await
        .unwrap();
    assert_eq!(found.len(), 100);
    assert_eq!(glob(fx, "g", "*.txt").await.len(), 300);
}

// ---------------------------------------------------------------------------------------------
// rename (issue 17)

async fn rename(
    fx: &Fixture,
    from: &str,
    to: &str,
    options: RenameOptions,
) -> Result<Option<Renamed>, Error> {
    fx.backend
        .rename(&fx.path(from), &fx.path(to), &options)
        .await
}

pub async fn rename_moves_a_file_in_place(fx: &Fixture) {
    put(fx, "a.txt", b"hello\n").await;
    let before = fx.backend.read(&fx.path("a.txt")).await.unwrap();
    let meta = fx.backend.stat(&fx.path("a.txt")).await.unwrap().unwrap();
    let renamed = rename(
        fx,
        "a.txt",
        "sub/deeper/b.txt",
        RenameOptions {
            if_version: Some(before.version.clone()),
            replacing: None,
        },
    )
    .await
    .expect("rename")
    .expect("every backend renames within itself");
    assert_eq!(renamed.kind, EntryKind::File);
    let after = fx.backend.read(&fx.path("sub/deeper/b.txt")).await.unwrap();
    assert_eq!(after.content, b"hello\n");
    assert_eq!(
        Some(after.version),
        renamed.version,
        "the version it reports"
    );
    assert_eq!(fx.backend.stat(&fx.path("a.txt")).await.unwrap(), None);
    let moved = fx
        .backend
        .stat(&fx.path("sub/deeper/b.txt"))
        .await
        .unwrap()
        .unwrap();
    if fx.caps.rename_keeps_times {
        assert_eq!(moved.modified, meta.modified, "a rename keeps the time");
    }
    assert_eq!(moved.size, 6);
}

pub async fn rename_moves_a_directory_whole(fx: &Fixture) {
    put(fx, "d/x.txt", b"x").await;
    put(fx, "d/e/y.txt", b"yy").await;
    put(fx, "dd.txt", b"sibling").await;
    let renamed = rename(fx, "d", "n/d2", RenameOptions::default())
        .await
        .expect("rename")
        .expect("renamed");
    assert_eq!(
        renamed,
        Renamed {
            kind: EntryKind::Directory,
            version: None
        }
    );
    assert_eq!(
        glob(fx, "", "*").await,
        vec!["dd.txt", "n/d2/e/y.txt", "n/d2/x.txt"]
    );
    assert_eq!(ls(fx, "n/d2").await, vec!["n/d2/e/", "n/d2/x.txt 1"]);
    assert_eq!(fx.backend.stat(&fx.path("d")).await.unwrap(), None);
    // And back.
    rename(fx, "n/d2", "d", RenameOptions::default())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        glob(fx, "", "*").await,
        vec!["d/e/y.txt", "d/x.txt", "dd.txt"]
    );
}

pub async fn rename_checks_versions_and_the_destination(fx: &Fixture) {
    put(fx, "s.txt", b"old").await;
    let old = fx.backend.read(&fx.path("s.txt")).await.unwrap().version;
    put(fx, "s.txt", b"source").await;
    let current = fx.backend.read(&fx.path("s.txt")).await.unwrap().version;
    put(fx, "t.txt", b"target").await;
    let target = fx.backend.read(&fx.path("t.txt")).await.unwrap().version;
    put(fx, "dir/inside.txt", b"i").await;
    let stale = RenameOptions {
        if_version: Some(old.clone()),
        replacing: None,
    };
    assert_eq!(
        rename(fx, "s.txt", "u.txt", stale).await.unwrap_err(),
        Error::VersionMismatch {
            path: fx.path("s.txt")
        }
    );
    assert_eq!(
        rename(fx, "s.txt", "t.txt", RenameOptions::default())
            .await
            .unwrap_err(),
        Error::AlreadyExists {
            path: fx.path("t.txt")
        }
    );
    let wrong_target = RenameOptions {
        if_version: Some(current.clone()),
        replacing: Some(old),
    };
    assert_eq!(
        rename(fx, "s.txt", "t.txt", wrong_target)
            .await
            .unwrap_err(),
        Error::VersionMismatch {
            path: fx.path("t.txt")
        }
    );
    assert_eq!(
        rename(fx, "s.txt", "dir", RenameOptions::default())
            .await
            .unwrap_err(),
        Error::IsADirectory {
            path: fx.path("dir")
        }
    );
    let under_a_file = rename(fx, "s.txt", "t.txt/under", RenameOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(under_a_file, Error::NotADirectory { .. }),
        "{under_a_file:?}"
    );
    assert_eq!(
        rename(fx, "missing.txt", "m.txt", RenameOptions::default())
            .await
            .unwrap_err(),
        Error::NotFound {
            path: fx.path("missing.txt")
        }
    );
    let into_itself = rename(fx, "dir", "dir/deeper", RenameOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&into_itself, Error::Unsupported { path, .. } if *path == fx.path("dir/deeper")),
        "{into_itself:?}"
    );
    assert_eq!(
        rename(fx, "dir", "t.txt", RenameOptions::default())
            .await
            .unwrap_err(),
        Error::AlreadyExists {
            path: fx.path("t.txt")
        }
    );
    // Nothing of the refusals changed anything.
    assert_eq!(
        glob(fx, "", "*").await,
        vec!["dir/inside.txt", "s.txt", "t.txt"]
    );
    assert_eq!(
        fx.backend.read(&fx.path("t.txt")).await.unwrap().content,
        b"target"
    );
    // Over the destination at the version it has: replaced in one step.
    let replace = RenameOptions {
        if_version: Some(current),
        replacing: Some(target),
    };
    rename(fx, "s.txt", "t.txt", replace)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        fx.backend.read(&fx.path("t.txt")).await.unwrap().content,
        b"source"
    );
    assert_eq!(glob(fx, "", "*").await, vec!["dir/inside.txt", "t.txt"]);
}

/// A content of `len` bytes, every byte value, not a multiple of 64 KiB.
fn ranged_content(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 256) as u8).collect()
}

pub async fn read_range_gives_the_bytes_of_that_version_only(fx: &Fixture) {
    let content = ranged_content(200_003);
    let path = fx.path("dir/ranged.bin");
    let version = fx
        .backend
        .write(&path, &content, WriteMode::CreateOnly)
        .await
        .unwrap()
        .version;
    for (offset, len) in [
        (0u64, 100usize),
        (65_536, 65_536),
        (131_072, 131_072),
        (199_999, 10),
        (200_003, 5),
        (300_000, 5),
    ] {
        let bytes = fx
            .backend
            .read_range(&path, offset, len, &version)
            .await
            .unwrap_or_else(|e| panic!("range {offset}+{len}: {e}"));
        let start = (offset as usize).min(content.len());
        let end = (start + len).min(content.len());
        assert_eq!(bytes, &content[start..end], "range {offset}+{len}");
    }
    put(fx, "dir/ranged.bin", b"changed").await;
    let stale = fx.backend.read_range(&path, 0, 10, &version).await;
    assert!(
        matches!(stale, Err(Error::VersionMismatch { .. })),
        "{stale:?}"
    );
    let missing = fx
        .backend
        .read_range(&fx.path("dir/none.bin"), 0, 10, &version)
        .await;
    assert!(
        matches!(missing, Err(Error::NotFound { .. })),
        "{missing:?}"
    );
    let directory = fx
        .backend
        .read_range(&fx.path("dir"), 0, 10, &version)
        .await;
    assert!(
        matches!(directory, Err(Error::IsADirectory { .. })),
        "{directory:?}"
    );
}

/// A content past every store's large-item bound (PostgreSQL keeps contents over 4 MiB apart,
/// uncompressed; SQLite reads an item over 1 MiB through a blob handle it keeps open), read as
/// a copy reads it, range after range in order, then at its edges; a change between two ranges
/// is reported, and the new content reads whole under its own version.
pub async fn read_range_reads_a_large_item_range_after_range(fx: &Fixture) {
    const MIB: usize = 1 << 20;
    // Text a database compresses well, not a multiple of the ranges.
    let content: Vec<u8> = (0..9 * MIB + 12_345)
        .map(|i| b"0123456789abcdef\n"[(i / 3 + i / 4099) % 17])
        .collect();
    let path = fx.path("big/large.txt");
    let version = fx
        .backend
        .write(&path, &content, WriteMode::CreateOnly)
        .await
        .unwrap()
        .version;
    let read = |offset: u64, len: usize, version: Version| {
        let path = path.clone();
        async move { fx.backend.read_range(&path, offset, len, &version).await }
    };
    let mut got = Vec::with_capacity(content.len());
    while got.len() < content.len() {
        let bytes = read(got.len() as u64, MIB, version.clone())
            .await
            .unwrap_or_else(|e| panic!("range at {}: {e}", got.len()));
        assert!(!bytes.is_empty(), "range at {} is empty", got.len());
        got.extend_from_slice(&bytes);
    }
    assert!(got == content, "the ranges joined differ from the content");
    let len = content.len();
    for (offset, want) in [
        (0, 1),
        (len - 1, 1),
        (len - 1, 10),
        (4 * MIB - 3, 6),
        (8 * MIB, MIB),
        (5 * MIB, 0),
        (len, 10),
        (len + 5, 5),
    ] {
        let bytes = read(offset as u64, want, version.clone())
            .await
            .unwrap_or_else(|e| panic!("range {offset}+{want}: {e}"));
        let start = offset.min(len);
        let end = (start + want).min(len);
        assert!(bytes == content[start..end], "range {offset}+{want}");
    }
    // Changed between two ranges of a copy: the next range is refused.
    read(0, MIB, version.clone()).await.unwrap();
    read(MIB as u64, MIB, version.clone()).await.unwrap();
    let mut changed = content.clone();
    changed[5 * MIB] = b'#';
    let now = fx
        .backend
        .write(&path, &changed, WriteMode::Overwrite)
        .await
        .unwrap()
        .version;
    let stale = read(2 * MIB as u64, MIB, version.clone()).await;
    assert!(
        matches!(stale, Err(Error::VersionMismatch { .. })),
        "{stale:?}"
    );
    let mut got = Vec::with_capacity(changed.len());
    while got.len() < changed.len() {
        got.extend(read(got.len() as u64, 4 * MIB, now.clone()).await.unwrap());
    }
    assert!(got == changed, "the new content's ranges differ from it");
    // Gone between two ranges: not found.
    read(0, MIB, now.clone()).await.unwrap();
    fx.backend
        .delete(&path, &DeleteOptions::default())
        .await
        .unwrap();
    let gone = read(MIB as u64, MIB, now).await;
    assert!(matches!(gone, Err(Error::NotFound { .. })), "{gone:?}");
}

pub async fn an_upload_lands_whole_under_its_mode_or_not_at_all(fx: &Fixture) {
    let path = fx.path("up/big.bin");
    let content = ranged_content(300_007);
    let upload = match fx.backend.begin_upload(&path, WriteMode::CreateOnly).await {
        Ok(upload) => upload,
        Err(Error::Unsupported { reason, .. }) => {
            // Files held in memory (memory, overlay layers) take whole writes only.
            assert!(reason.contains("whole writes only"), "{reason}");
            return;
        }
        Err(error) => panic!("begin_upload: {error}"),
    };
    let mut upload = upload;
    for chunk in content.chunks(65_536) {
        upload.append(chunk).await.unwrap();
    }
    // Nothing shows before the end: no file, no temporary file in a listing.
    assert!(fx.backend.stat(&path).await.unwrap().is_none());
    let outcome = upload.finish().await.unwrap();
    assert!(outcome.created);
    let file = fx.backend.read(&path).await.unwrap();
    assert!(file.content == content, "the bytes, whole");
    assert_eq!(file.version, outcome.version);
    assert_eq!(
        names(
            fx,
            fx.backend
                .ls(&fx.path("up"))
                .await
                .unwrap()
                .into_iter()
                .map(|e| e.path)
        ),
        vec!["up/big.bin"]
    );

    // Create-only over a file: refused before anything is sent, and at the end when the file
    // appeared meanwhile (the other content stays).
    let refused = fx.backend.begin_upload(&path, WriteMode::CreateOnly).await;
    assert!(
        matches!(refused, Err(Error::AlreadyExists { .. })),
        "{:?}",
        refused.map(|_| ())
    );
    let late = fx.path("up/late.txt");
    let mut upload = fx
        .backend
        .begin_upload(&late, WriteMode::CreateOnly)
        .await
        .unwrap();
    upload.append(b"from the upload").await.unwrap();
    put(fx, "up/late.txt", b"written meanwhile").await;
    let lost = upload.finish().await;
    assert!(matches!(lost, Err(Error::AlreadyExists { .. })), "{lost:?}");
    assert_eq!(
        fx.backend.read(&late).await.unwrap().content,
        b"written meanwhile"
    );

    // A stale version is refused at the start; overwrite replaces.
    let stale = fx
        .backend
        .begin_upload(
            &path,
            WriteMode::IfVersion(Version::from_raw("9999999999999")),
        )
        .await;
    assert!(
        matches!(stale, Err(Error::VersionMismatch { .. })),
        "{:?}",
        stale.map(|_| ())
    );
    let mut upload = fx
        .backend
        .begin_upload(&path, WriteMode::IfVersion(outcome.version.clone()))
        .await
        .unwrap();
    upload.append(b"new ").await.unwrap();
    upload.append(b"content").await.unwrap();
    let replaced = upload.finish().await.unwrap();
    assert!(!replaced.created);
    let file = fx.backend.read(&path).await.unwrap();
    assert_eq!(file.content, b"new content");
    assert_eq!(file.version, replaced.version);

    // Aborted: nothing at the path, nothing beside it.
    let mut upload = fx
        .backend
        .begin_upload(&fx.path("up/aborted.bin"), WriteMode::Overwrite)
        .await
        .unwrap();
    upload.append(&content[..70_000]).await.unwrap();
    upload.abort().await;
    assert!(
        fx.backend
            .stat(&fx.path("up/aborted.bin"))
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(
        names(
            fx,
            fx.backend
                .ls(&fx.path("up"))
                .await
                .unwrap()
                .into_iter()
                .map(|e| e.path)
        ),
        vec!["up/big.bin", "up/late.txt"]
    );
}

/// Issue 41: names starting with `.mountfs-tmp` are mountfs's own on every backend (disk
/// temporary files and journals, shell targets' temporary files): a path holding one in any
/// component — first, middle or last, with `-` or `.` after it, written plainly or as an
/// escape — is refused where every path an agent gives is parsed, naming the path, before any
/// backend sees it; a name holding the text elsewhere is an ordinary name here.
pub async fn reserved_names_are_refused_in_every_component(fx: &Fixture) {
    let base = fx.path("dir");
    for tail in [
        ".mountfs-tmp-journal-1-1/journal",
        "a/.mountfs-tmp.x/b",
        "a/b/.mountfs-tmp-9-9",
        ".mountfs-tmp/x",
    ] {
        let text = format!("{}/{tail}", base.as_str());
        let error = VirtualPath::parse(&text).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "Error: Invalid path '{text}': names starting with .mountfs-tmp are reserved for mountfs's own temporary files; choose another name"
            )
        );
        let escaped = text.replace("/.mountfs", "/\\u{2E}mountfs");
        assert!(VirtualPath::parse(&escaped).is_err(), "{escaped}");
    }
    let fine = VirtualPath::parse(&format!(
        "{}/notes.mountfs-tmp-x/a.mountfs-tmp",
        base.as_str()
    ))
    .unwrap();
    fx.backend
        .write(&fine, b"x", WriteMode::CreateOnly)
        .await
        .unwrap();
    assert_eq!(fx.backend.read(&fine).await.unwrap().content, b"x");

    // Attack review of issue 41: a path built from a listing skips the parser, so every
    // backend refuses a reserved name in any component itself.
    let planted = [
        "dir/.mountfs-tmp-journal-1-1/journal",
        "dir/a/.mountfs-tmp.x",
        "dir/.mountfs-tmp/x.txt",
        "dir/a/b/.mountfs-tmp-9-9",
    ];
    for tail in planted {
        let raw = VirtualPath::parse_raw(&format!("{}/{tail}", base.as_str())).unwrap();
        assert!(
            fx.backend
                .write(&raw, b"x", WriteMode::CreateOnly)
                .await
                .is_err(),
            "written: {raw}"
        );
    }
    // Names planted behind the server's back (another program writing the directory, the
    // store's table, the bucket or the target) are never listed, searched nor read.
    let Some(plant) = &fx.plant else {
        return;
    };
    for tail in planted {
        plant(tail.to_owned(), b"planted secret\n".to_vec()).await;
    }
    plant("dir/a/seen.txt".to_owned(), b"planted secret\n".to_vec()).await;
    let reserved = |name: &String| name.split('/').any(|c| c.starts_with(".mountfs-tmp"));
    for dir in ["dir", "dir/a"] {
        let listed = ls(fx, dir).await;
        assert!(!listed.iter().any(reserved), "ls {dir}: {listed:?}");
    }
    // A directory holding nothing but a reserved name lists empty, or (a store's directories
    // exist through what they hold) not at all.
    match fx.backend.ls(&fx.path("dir/a/b")).await {
        Ok(entries) => assert!(entries.is_empty(), "ls dir/a/b: {entries:?}"),
        Err(error) => assert!(
            matches!(error, mountfs::storage::backend::Error::NotFound { .. }),
            "{error}"
        ),
    }
    let globbed = glob(fx, "dir", "**/*").await;
    assert!(!globbed.iter().any(reserved), "glob: {globbed:?}");
    assert!(
        globbed.contains(&"dir/a/seen.txt".to_owned()),
        "{globbed:?}"
    );
    let found = fx
        .backend
        .grep(&grep_query(fx, "", "planted secret", GrepCollect::Files))
        .await
        .expect("grep");
    assert_eq!(
        names(fx, found.into_iter().map(|f| f.path)),
        ["dir/a/seen.txt"]
    );
    for tail in planted {
        let raw = VirtualPath::parse_raw(&format!("{}/{tail}", base.as_str())).unwrap();
        let read = fx.backend.read(&raw).await;
        assert!(read.is_err(), "read {raw}: {read:?}");
        let read = fx.backend.read_at_most(&raw, 1 << 20).await;
        assert!(read.is_err(), "read {raw}");
    }
}
