//! `StoreBackend` through the `Backend` trait: files as items, implicit directories, listings
//! that seek past subtrees, conditional writes. Each case runs on `memory` (the reference
//! implementation, so the cases describe shared behaviour), `sqlite` and `postgres` (when
//! `MOUNTFS_TEST_POSTGRES` is set). These move into the conformance suite when it lands.

mod support;

use std::sync::Arc;

use mountfs::backend::{
    Backend, DeleteOptions, EntryKind, Error, GlobQuery, GrepCollect, GrepQuery, StateBackend,
    StoreBackend, WriteMode,
};
use mountfs::path::VirtualPath;
use mountfs::search::{GlobMatcher, GrepPattern};
use mountfs::store::{Namespace, PostgresStore, SqliteStore};

struct BackendFixture {
    backend: Arc<dyn Backend>,
    _guard: Option<support::PostgresNamespace>,
    _dir: Option<tempfile::TempDir>,
}

mod fixtures {
    use super::*;

    pub(crate) async fn memory() -> Option<BackendFixture> {
        Some(BackendFixture {
            backend: Arc::new(StateBackend::new()),
            _guard: None,
            _dir: None,
        })
    }

    pub(crate) async fn sqlite() -> Option<BackendFixture> {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("b.db")).await.unwrap();
        Some(BackendFixture {
            backend: Arc::new(StoreBackend::new(
                Arc::new(store),
                Namespace::new("default").unwrap(),
            )),
            _guard: None,
            _dir: Some(dir),
        })
    }

    pub(crate) async fn postgres() -> Option<BackendFixture> {
        let url = support::postgres_url("postgres backend case")?;
        let store = PostgresStore::connect(&url).await.unwrap();
        let ns = support::PostgresNamespace::new(&url, "t-backend");
        Some(BackendFixture {
            backend: Arc::new(StoreBackend::new(
                Arc::new(store),
                Namespace::new(&ns.name).unwrap(),
            )),
            _guard: Some(ns),
            _dir: None,
        })
    }
}

fn p(path: &str) -> VirtualPath {
    VirtualPath::parse(path).unwrap()
}

async fn put(b: &dyn Backend, path: &str, content: &[u8]) {
    b.write(&p(path), content, WriteMode::CreateOnly)
        .await
        .unwrap();
}

async fn names(b: &dyn Backend, dir: &str) -> Vec<String> {
    let mut entries = b.ls(&p(dir)).await.unwrap();
    entries.sort_by(|a, b| a.path.cmp(&b.path));
    entries
        .into_iter()
        .map(|e| match e.kind {
            EntryKind::Directory => format!("{}/", e.path),
            EntryKind::File => format!("{}={}", e.path, e.size),
        })
        .collect()
}

mod cases {
    use super::*;

    pub(crate) async fn ls_shows_files_and_each_subdirectory_once(b: &dyn Backend) {
        for path in [
            "/a/x.md",
            "/a/sub/deep/1",
            "/a/sub/deep/2",
            "/a/sub/2",
            "/a/sub0",
            "/a.md",
            "/a/z",
            "/a/sub.txt",
            "/b/c",
        ] {
            put(b, path, b"12").await;
        }
        assert_eq!(
            names(b, "/a").await,
            [
                "/a/sub/",
                "/a/sub.txt=2",
                "/a/sub0=2",
                "/a/x.md=2",
                "/a/z=2"
            ]
        );
        assert_eq!(names(b, "/").await, ["/a/", "/a.md=2", "/b/"]);
        assert_eq!(names(b, "/a/sub").await, ["/a/sub/2=2", "/a/sub/deep/"]);
    }

    pub(crate) async fn ls_of_a_big_directory_pages_through_every_file(b: &dyn Backend) {
        for i in 0..1500 {
            put(b, &format!("/big/f{i:04}"), b"").await;
            if i % 100 == 0 {
                put(b, &format!("/big/d{i:04}/inner"), b"").await;
            }
        }
        let listed = b.ls(&p("/big")).await.unwrap();
        let files = listed.iter().filter(|e| !e.is_dir()).count();
        let dirs = listed.iter().filter(|e| e.is_dir()).count();
        assert_eq!((files, dirs), (1500, 15));
    }

    pub(crate) async fn ls_of_a_missing_path_or_a_file_fails(b: &dyn Backend) {
        put(b, "/f.txt", b"x").await;
        assert_eq!(
            b.ls(&p("/nope")).await,
            Err(Error::NotFound { path: p("/nope") })
        );
        assert_eq!(
            b.ls(&p("/f.txt")).await,
            Err(Error::NotADirectory { path: p("/f.txt") })
        );
        assert_eq!(names(b, "/").await, ["/f.txt=1"]);
    }

    pub(crate) async fn an_empty_root_lists_as_empty(b: &dyn Backend) {
        assert!(b.ls(&VirtualPath::root()).await.unwrap().is_empty());
        let root = b.stat(&VirtualPath::root()).await.unwrap().unwrap();
        assert!(root.is_dir());
    }

    pub(crate) async fn files_and_directories_do_not_collide(b: &dyn Backend) {
        put(b, "/d/f", b"x").await;
        assert_eq!(
            b.write(&p("/d"), b"y", WriteMode::Overwrite).await,
            Err(Error::IsADirectory { path: p("/d") })
        );
        assert_eq!(
            b.write(&p("/d/f/g"), b"y", WriteMode::Overwrite).await,
            Err(Error::NotADirectory { path: p("/d/f") })
        );
        assert_eq!(
            b.read(&p("/d")).await.map(|f| f.content),
            Err(Error::IsADirectory { path: p("/d") })
        );
        assert_eq!(
            b.read(&p("/x")).await.map(|f| f.content),
            Err(Error::NotFound { path: p("/x") })
        );
        assert!(b.stat(&p("/d")).await.unwrap().unwrap().is_dir());
        let file = b.stat(&p("/d/f")).await.unwrap().unwrap();
        assert_eq!((file.kind, file.size), (EntryKind::File, 1));
        assert!(file.created.is_some() && file.modified.is_some());
        assert_eq!(b.stat(&p("/zz")).await.unwrap(), None);
    }

    pub(crate) async fn binary_content_round_trips(b: &dyn Backend) {
        let png: Vec<u8> = b"\x89PNG\r\n\x1a\n\0\x01\xff\xfe"
            .iter()
            .copied()
            .chain(0..=255)
            .collect();
        put(b, "/img.png", &png).await;
        assert_eq!(b.read(&p("/img.png")).await.unwrap().content, png);
    }

    pub(crate) async fn a_stale_version_is_refused_and_changes_nothing(b: &dyn Backend) {
        let first = b
            .write(&p("/n.md"), b"one", WriteMode::CreateOnly)
            .await
            .unwrap();
        assert!(first.created);
        let read = b.read(&p("/n.md")).await.unwrap();
        assert_eq!(read.version, first.version);
        let second = b
            .write(
                &p("/n.md"),
                b"two",
                WriteMode::IfVersion(first.version.clone()),
            )
            .await
            .unwrap();
        assert!(!second.created);
        assert_ne!(second.version, first.version);
        assert_eq!(
            b.write(&p("/n.md"), b"three", WriteMode::IfVersion(first.version))
                .await,
            Err(Error::VersionMismatch { path: p("/n.md") })
        );
        let now = b.read(&p("/n.md")).await.unwrap();
        assert_eq!(now.content, b"two");
        assert_eq!(now.created, read.created);
        assert_eq!(
            b.write(&p("/n.md"), b"x", WriteMode::CreateOnly).await,
            Err(Error::AlreadyExists { path: p("/n.md") })
        );
    }

    pub(crate) async fn delete_needs_recursive_for_a_directory(b: &dyn Backend) {
        put(b, "/d/a", b"x").await;
        put(b, "/d/e/f", b"x").await;
        put(b, "/d0", b"x").await;
        assert_eq!(
            b.delete(&p("/d"), &DeleteOptions::default()).await,
            Err(Error::DirectoryNotEmpty { path: p("/d") })
        );
        let recursive = DeleteOptions {
            recursive: true,
            ..DeleteOptions::default()
        };
        b.delete(&p("/d"), &recursive).await.unwrap();
        assert_eq!(names(b, "/").await, ["/d0=1"]);
        assert_eq!(
            b.delete(&p("/d"), &recursive).await,
            Err(Error::NotFound { path: p("/d") })
        );
        let read = b.read(&p("/d0")).await.unwrap();
        let stale = DeleteOptions {
            if_version: Some(mountfs::backend::Version::from_raw("1234567890")),
            ..DeleteOptions::default()
        };
        assert_eq!(
            b.delete(&p("/d0"), &stale).await,
            Err(Error::VersionMismatch { path: p("/d0") })
        );
        let current = DeleteOptions {
            if_version: Some(read.version),
            ..DeleteOptions::default()
        };
        b.delete(&p("/d0"), &current).await.unwrap();
        assert!(b.ls(&VirtualPath::root()).await.unwrap().is_empty());
    }

    pub(crate) async fn glob_and_grep_search_below_a_directory(b: &dyn Backend) {
        put(b, "/notes/a.md", b"alpha\nbeta\n").await;
        put(b, "/notes/deep/b.md", b"beta\ngamma\n").await;
        put(b, "/notes/c.txt", b"beta\n").await;
        put(b, "/notes/bin.dat", b"beta\0binary").await;
        put(b, "/other/d.md", b"beta\n").await;
        let glob = GlobQuery {
            dir: p("/notes"),
            matcher: GlobMatcher::new("*.md").unwrap(),
        };
        let mut found: Vec<String> = b
            .glob(&glob)
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.path.to_string())
            .collect();
        found.sort();
        assert_eq!(found, ["/notes/a.md", "/notes/deep/b.md"]);
        let grep = GrepQuery {
            dir: p("/notes"),
            pattern: Arc::new(GrepPattern::new("beta", false, false).unwrap()),
            file_filter: None,
            collect: GrepCollect::Count,
        };
        let mut hits: Vec<String> = b
            .grep(&grep)
            .await
            .unwrap()
            .into_iter()
            .map(|f| format!("{}:{}", f.path, f.match_count))
            .collect();
        hits.sort();
        assert_eq!(
            hits,
            ["/notes/a.md:1", "/notes/c.txt:1", "/notes/deep/b.md:1"]
        );
        let filtered = GrepQuery {
            file_filter: Some(GlobMatcher::new("deep/*.md").unwrap()),
            collect: GrepCollect::Lines { context: 1 },
            ..grep.clone()
        };
        let lines = b.grep(&filtered).await.unwrap();
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0].lines.len(), 2);
        let single = GrepQuery {
            dir: p("/notes/a.md"),
            ..grep
        };
        assert_eq!(b.grep(&single).await.unwrap().len(), 1);
        let nowhere = GlobQuery {
            dir: p("/missing"),
            matcher: GlobMatcher::new("*").unwrap(),
        };
        assert!(b.glob(&nowhere).await.unwrap().is_empty());
    }

    pub(crate) async fn grep_pages_through_many_files(b: &dyn Backend) {
        for i in 0..300 {
            let text = if i % 3 == 0 { "needle\n" } else { "hay\n" };
            put(b, &format!("/g/{i:03}.txt"), text.as_bytes()).await;
        }
        let grep = GrepQuery {
            dir: VirtualPath::root(),
            pattern: Arc::new(GrepPattern::new("needle", true, false).unwrap()),
            file_filter: None,
            collect: GrepCollect::Files,
        };
        assert_eq!(b.grep(&grep).await.unwrap().len(), 100);
    }
}

macro_rules! backend_cases {
    ($backend:ident: $($case:ident),* $(,)?) => {
        mod $backend {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let Some(fx) = fixtures::$backend().await else { return };
                    cases::$case(&*fx.backend).await;
                }
            )*
        }
    };
}

macro_rules! every_backend {
    ($($backend:ident),*) => {
        $(
            backend_cases!($backend:
                ls_shows_files_and_each_subdirectory_once,
                ls_of_a_big_directory_pages_through_every_file,
                ls_of_a_missing_path_or_a_file_fails,
                an_empty_root_lists_as_empty,
                files_and_directories_do_not_collide,
                binary_content_round_trips,
                a_stale_version_is_refused_and_changes_nothing,
                delete_needs_recursive_for_a_directory,
                glob_and_grep_search_below_a_directory,
                grep_pages_through_many_files,
            );
        )*
    };
}

every_backend!(memory, sqlite, postgres);
