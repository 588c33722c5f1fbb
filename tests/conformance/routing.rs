//! Composite routing edge cases: which mount owns a path (`/mem` vs `/mem/` vs `/memory/x`),
//! nested mounts, mount points in listings, merged glob/grep, shadowing, read-only mounts and
//! mount roots that cannot be removed.

use std::sync::Arc;

use mountfs::ground::config::parse_table;
use mountfs::ground::path::VirtualPath;
use mountfs::ground::search::{GlobMatcher, GrepPattern};
use mountfs::server::mounts::MountTable;
use mountfs::storage::backend::{
    Backend, BoundedRead, CompositeBackend, DeleteOptions, Entry, EntryKind, Error, FileBytes,
    FileView, GlobQuery, GrepCollect, GrepFile, GrepQuery, LineWindow, MemoryBackend, Mount,
    RenameOptions, Renamed, Router, Upload, Version, WriteMode, WriteOutcome,
};

use crate::support::forward::{Forward, Intercept};

fn p(s: &str) -> VirtualPath {
    VirtualPath::parse(s).unwrap()
}

struct Table {
    composite: CompositeBackend,
    leaves: Vec<(String, Arc<MemoryBackend>)>,
}

impl Table {
    fn new(prefixes: &[&str]) -> Self {
        Self::with_read_only(prefixes, &[])
    }

    fn with_read_only(prefixes: &[&str], read_only: &[&str]) -> Self {
        let leaves: Vec<(String, Arc<MemoryBackend>)> = prefixes
            .iter()
            .map(|prefix| ((*prefix).to_owned(), Arc::new(MemoryBackend::new())))
            .collect();
        let mounts = leaves
            .iter()
            .map(|(prefix, backend)| Mount {
                prefix: p(prefix),
                backend: backend.clone(),
                read_only: read_only.contains(&prefix.as_str()),
            })
            .collect();
        Self {
            composite: CompositeBackend::new(mounts, || Arc::new(MemoryBackend::new())),
            leaves,
        }
    }

    /// The leaf mounted at `prefix`.
    fn leaf(&self, prefix: &str) -> &MemoryBackend {
        &self.leaves.iter().find(|(p, _)| p == prefix).unwrap().1
    }

    async fn put(&self, path: &str) {
        self.composite
            .write(&p(path), path.as_bytes(), WriteMode::Overwrite)
            .await
            .unwrap();
    }

    async fn ls(&self, dir: &str) -> Vec<String> {
        let mut out: Vec<String> = self
            .composite
            .ls(&p(dir))
            .await
            .unwrap()
            .into_iter()
            .map(|e| match e.kind {
                EntryKind::Directory => format!("{}/", e.path),
                EntryKind::File => e.path.to_string(),
            })
            .collect();
        out.sort();
        out
    }

    async fn glob(&self, dir: &str, pattern: &str) -> Vec<String> {
        let mut out: Vec<String> = self
            .composite
            .glob(&GlobQuery {
                dir: p(dir),
                matcher: GlobMatcher::new(pattern).unwrap(),
                control: Default::default(),
            })
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.path.to_string())
            .collect();
        out.sort();
        out
    }

    async fn grep(&self, dir: &str, pattern: &str, filter: Option<&str>) -> Vec<String> {
        let mut out: Vec<String> = self
            .composite
            .grep(&GrepQuery {
                dir: p(dir),
                pattern: Arc::new(GrepPattern::new(pattern, true, false).unwrap()),
                file_filter: filter.map(|f| GlobMatcher::new(f).unwrap()),
                collect: GrepCollect::Files,
                control: Default::default(),
            })
            .await
            .unwrap()
            .into_iter()
            .map(|f| f.path.to_string())
            .collect();
        out.sort();
        out
    }
}

#[tokio::test]
async fn prefix_matching_is_by_component_not_by_string() {
    let table = Table::new(&["/", "/mem"]);
    table.put("/mem/a.txt").await;
    table.put("/memory/x.txt").await;
    // /mem/a.txt went to the /mem mount (stored there as /a.txt); /memory/x.txt did not.
    assert!(
        table
            .leaf("/mem")
            .stat(&p("/a.txt"))
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        table
            .leaf("/")
            .stat(&p("/memory/x.txt"))
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        table
            .leaf("/mem")
            .stat(&p("/memory/x.txt"))
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn mount_prefix_with_and_without_slash_is_the_mount_root() {
    let table = Table::new(&["/", "/mem"]);
    table.put("/mem/a.txt").await;
    for dir in ["/mem", "/mem/", "//mem//"] {
        assert_eq!(table.ls(dir).await, vec!["/mem/a.txt"], "{dir}");
    }
    let root = table.composite.stat(&p("/mem")).await.unwrap().unwrap();
    assert_eq!(root.kind, EntryKind::Directory);
}

#[tokio::test]
async fn writing_to_a_mount_root_is_refused() {
    let table = Table::new(&["/", "/mem"]);
    let err = table
        .composite
        .write(&p("/mem"), b"x", WriteMode::Overwrite)
        .await
        .unwrap_err();
    assert_eq!(err, Error::MountRoot { path: p("/mem") });
}

#[tokio::test]
async fn nested_mounts_route_to_the_longest_prefix() {
    let table = Table::new(&["/", "/a", "/a/b"]);
    table.put("/a/b/c.txt").await;
    table.put("/a/x.txt").await;
    table.put("/top.txt").await;
    assert!(
        table
            .leaf("/a/b")
            .stat(&p("/c.txt"))
            .await
            .unwrap()
            .is_some()
    );
    assert!(table.leaf("/a").stat(&p("/x.txt")).await.unwrap().is_some());
    assert!(
        table
            .leaf("/")
            .stat(&p("/top.txt"))
            .await
            .unwrap()
            .is_some()
    );
    let file = table.composite.read(&p("/a/b/c.txt")).await.unwrap();
    assert_eq!(file.content, b"/a/b/c.txt");
}

#[tokio::test]
async fn ls_of_a_parent_shows_mount_points_as_directories() {
    let table = Table::new(&["/", "/memories", "/scratch", "/deep/er/mount"]);
    table.put("/readme.md").await;
    assert_eq!(
        table.ls("/").await,
        vec!["/deep/", "/memories/", "/readme.md", "/scratch/"]
    );
    assert_eq!(table.ls("/deep").await, vec!["/deep/er/"]);
    assert_eq!(table.ls("/deep/er").await, vec!["/deep/er/mount/"]);
    let deep = table.composite.stat(&p("/deep/er")).await.unwrap().unwrap();
    assert_eq!(
        deep.kind,
        EntryKind::Directory,
        "an ancestor of a mount point exists"
    );
}

#[tokio::test]
async fn files_of_the_parent_under_a_mount_prefix_are_shadowed() {
    let table = Table::new(&["/", "/scratch"]);
    // Put a file into the root backend *directly* where the /scratch mount sits.
    table
        .leaf("/")
        .write(&p("/scratch/hidden.txt"), b"hidden", WriteMode::Overwrite)
        .await
        .unwrap();
    table.put("/scratch/visible.txt").await;
    assert_eq!(table.ls("/scratch").await, vec!["/scratch/visible.txt"]);
    assert_eq!(table.ls("/").await, vec!["/scratch/"]);
    assert_eq!(table.glob("/", "*.txt").await, vec!["/scratch/visible.txt"]);
    assert_eq!(table.grep("/", "hidden", None).await, Vec::<String>::new());
}

#[tokio::test]
async fn glob_and_grep_merge_every_mount_under_the_path() {
    let table = Table::new(&["/", "/mem", "/mem/inner", "/other"]);
    table.put("/a.rs").await;
    table.put("/mem/b.rs").await;
    table.put("/mem/inner/c.rs").await;
    table.put("/other/d.rs").await;
    assert_eq!(
        table.glob("/", "*.rs").await,
        vec!["/a.rs", "/mem/b.rs", "/mem/inner/c.rs", "/other/d.rs"]
    );
    assert_eq!(
        table.glob("/mem", "*.rs").await,
        vec!["/mem/b.rs", "/mem/inner/c.rs"]
    );
    // Patterns with '/' are relative to the searched directory, across mounts.
    assert_eq!(table.glob("/", "mem/*.rs").await, vec!["/mem/b.rs"]);
    assert_eq!(
        table.glob("/", "mem/inner/*.rs").await,
        vec!["/mem/inner/c.rs"]
    );
    assert_eq!(
        table.glob("/mem", "inner/*.rs").await,
        vec!["/mem/inner/c.rs"]
    );
    assert_eq!(
        table.grep("/", ".rs", None).await,
        vec!["/a.rs", "/mem/b.rs", "/mem/inner/c.rs", "/other/d.rs"]
    );
    assert_eq!(
        table.grep("/", ".rs", Some("mem/**/*.rs")).await,
        vec!["/mem/b.rs", "/mem/inner/c.rs"]
    );
    assert_eq!(
        table.grep("/mem/inner", ".rs", None).await,
        vec!["/mem/inner/c.rs"]
    );
}

#[tokio::test]
async fn read_only_mounts_refuse_changes() {
    let table = Table::with_read_only(&["/", "/docs"], &["/docs"]);
    table
        .leaf("/docs")
        .write(&p("/guide.md"), b"read me", WriteMode::Overwrite)
        .await
        .unwrap();
    let err = table
        .composite
        .write(&p("/docs/guide.md"), b"changed", WriteMode::Overwrite)
        .await
        .unwrap_err();
    assert_eq!(
        err,
        Error::ReadOnly {
            path: p("/docs/guide.md")
        }
    );
    let err = table
        .composite
        .delete(&p("/docs/guide.md"), &DeleteOptions::default())
        .await
        .unwrap_err();
    assert_eq!(
        err,
        Error::ReadOnly {
            path: p("/docs/guide.md")
        }
    );
    assert_eq!(
        table
            .composite
            .read(&p("/docs/guide.md"))
            .await
            .unwrap()
            .content,
        b"read me"
    );
}

#[tokio::test]
async fn mount_roots_and_their_ancestors_cannot_be_deleted() {
    let table = Table::new(&["/", "/a/b"]);
    table.put("/a/b/f.txt").await;
    table.put("/a/sibling.txt").await;
    let recursive = DeleteOptions {
        recursive: true,
        ..Default::default()
    };
    for path in ["/a/b", "/a", "/"] {
        let err = table
            .composite
            .delete(&p(path), &recursive)
            .await
            .unwrap_err();
        assert_eq!(err, Error::MountRoot { path: p(path) }, "{path}");
    }
    assert!(
        table
            .composite
            .stat(&p("/a/b/f.txt"))
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test]
async fn errors_carry_the_full_virtual_path() {
    let table = Table::new(&["/", "/mem"]);
    let err = table
        .composite
        .read(&p("/mem/missing.txt"))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        Error::NotFound {
            path: p("/mem/missing.txt")
        }
    );
    let err = table.composite.ls(&p("/mem/nope")).await.unwrap_err();
    assert_eq!(
        err,
        Error::NotFound {
            path: p("/mem/nope")
        }
    );
}

#[tokio::test]
async fn each_session_gets_its_own_memory_mounts() {
    let specs = parse_table(&["/=memory", "/scratch=memory"]).unwrap();
    let table = MountTable::open(specs).await.unwrap();
    let first = table.session_backend();
    let second = table.session_backend();
    first
        .write(&p("/scratch/mine.txt"), b"x", WriteMode::CreateOnly)
        .await
        .unwrap();
    assert!(first.stat(&p("/scratch/mine.txt")).await.unwrap().is_some());
    assert!(
        second
            .stat(&p("/scratch/mine.txt"))
            .await
            .unwrap()
            .is_none()
    );
}

/// A mount whose every call fails, as a directory the server may not read would (what it
/// lacks, it answers as a memory mount does; it renames nothing in place).
#[derive(Debug)]
struct Unreadable;

impl Unreadable {
    fn denied(path: &VirtualPath) -> Error {
        Error::Io {
            path: path.clone(),
            message: "Permission denied (os error 13)".into(),
        }
    }

    /// The mount: [`Unreadable`]'s hooks over an empty memory backend.
    fn backend() -> Arc<dyn Backend> {
        Arc::new(Forward::new(Arc::new(MemoryBackend::new()), Unreadable))
    }
}

#[async_trait::async_trait]
impl Intercept for Unreadable {
    async fn stat(&self, _: &dyn Backend, path: &VirtualPath) -> Result<Option<Entry>, Error> {
        Err(Self::denied(path))
    }
    async fn ls(&self, _: &dyn Backend, dir: &VirtualPath) -> Result<Vec<Entry>, Error> {
        Err(Self::denied(dir))
    }
    async fn read(&self, _: &dyn Backend, path: &VirtualPath) -> Result<FileBytes, Error> {
        Err(Self::denied(path))
    }
    async fn read_at_most(
        &self,
        _: &dyn Backend,
        path: &VirtualPath,
        _max: u64,
    ) -> Result<BoundedRead, Error> {
        Err(Self::denied(path))
    }
    async fn read_window(
        &self,
        _: &dyn Backend,
        path: &VirtualPath,
        _w: LineWindow,
    ) -> Result<FileView, Error> {
        Err(Self::denied(path))
    }
    async fn read_range(
        &self,
        _: &dyn Backend,
        path: &VirtualPath,
        _offset: u64,
        _len: usize,
        _version: &Version,
    ) -> Result<Vec<u8>, Error> {
        Err(Self::denied(path))
    }
    async fn begin_upload<'a>(
        &'a self,
        _: &'a dyn Backend,
        path: &VirtualPath,
        _mode: WriteMode,
    ) -> Result<Box<dyn Upload + 'a>, Error> {
        Err(Self::denied(path))
    }
    async fn write(
        &self,
        _: &dyn Backend,
        path: &VirtualPath,
        _content: &[u8],
        _mode: WriteMode,
    ) -> Result<WriteOutcome, Error> {
        Err(Self::denied(path))
    }
    async fn delete(
        &self,
        _: &dyn Backend,
        path: &VirtualPath,
        _options: &DeleteOptions,
    ) -> Result<(), Error> {
        Err(Self::denied(path))
    }
    async fn rename(
        &self,
        _: &dyn Backend,
        _from: &VirtualPath,
        _to: &VirtualPath,
        _options: &RenameOptions,
    ) -> Result<Option<Renamed>, Error> {
        Ok(None)
    }
    async fn glob(&self, _: &dyn Backend, query: &GlobQuery) -> Result<Vec<Entry>, Error> {
        Err(Self::denied(&query.dir))
    }
    async fn grep(&self, _: &dyn Backend, query: &GrepQuery) -> Result<Vec<GrepFile>, Error> {
        Err(Self::denied(&query.dir))
    }
}

#[tokio::test]
async fn a_failing_mount_below_a_search_is_skipped_and_named() {
    let root = Arc::new(MemoryBackend::new());
    let other = Arc::new(MemoryBackend::new());
    let mounts = vec![
        Mount {
            prefix: p("/"),
            backend: root.clone(),
            read_only: false,
        },
        Mount {
            prefix: p("/locked"),
            backend: Unreadable::backend(),
            read_only: false,
        },
        Mount {
            prefix: p("/other"),
            backend: other.clone(),
            read_only: false,
        },
    ];
    let composite = CompositeBackend::new(mounts, || Arc::new(MemoryBackend::new()));
    for path in ["/a.txt", "/other/b.txt"] {
        composite
            .write(&p(path), b"needle\n", WriteMode::CreateOnly)
            .await
            .unwrap();
    }
    let query = GrepQuery {
        dir: p("/"),
        pattern: Arc::new(GrepPattern::new("needle", false, false).unwrap()),
        file_filter: None,
        collect: GrepCollect::Files,
        control: Default::default(),
    };
    let mut found = composite
        .grep(&query)
        .await
        .expect("the other mounts answer");
    found.sort_by(|a, b| a.path.cmp(&b.path));
    let shown: Vec<(String, Option<String>)> = found
        .iter()
        .map(|f| (f.path.to_string(), f.skipped.clone()))
        .collect();
    assert_eq!(
        shown,
        vec![
            ("/a.txt".to_owned(), None),
            (
                "/locked".to_owned(),
                Some(
                    "this mount could not be searched: Error: I/O error on /locked: Permission denied (os error 13)"
                        .to_owned()
                )
            ),
            ("/other/b.txt".to_owned(), None),
        ]
    );
    let glob = GlobQuery {
        dir: p("/"),
        matcher: GlobMatcher::new("*.txt").unwrap(),
        control: Default::default(),
    };
    let (files, skipped) = composite.glob_noting(&glob).await.unwrap();
    let mut names: Vec<String> = files.iter().map(|e| e.path.to_string()).collect();
    names.sort();
    assert_eq!(names, vec!["/a.txt", "/other/b.txt"]);
    assert_eq!(skipped.len(), 1);
    assert_eq!(
        skipped[0].note(),
        "[skipped /locked: this mount could not be searched: Error: I/O error on /locked: Permission denied (os error 13)]"
    );
    // The strict trait call still fails, and a search of the failing mount's own path fails.
    assert!(composite.glob(&glob).await.is_err());
    let own = GrepQuery {
        dir: p("/locked"),
        ..query.clone()
    };
    assert_eq!(
        composite.grep(&own).await.unwrap_err(),
        Error::Io {
            path: p("/locked"),
            message: "Permission denied (os error 13)".into()
        }
    );
    // ls of / names the mount point without asking it.
    let listed: Vec<String> = composite
        .ls(&p("/"))
        .await
        .unwrap()
        .iter()
        .map(|e| e.path.to_string())
        .collect();
    assert!(listed.contains(&"/locked".to_owned()), "{listed:?}");
}
