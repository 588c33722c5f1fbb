//! Searches through an overlay mount (issue 14) equal the plain disk mount's on the same tree:
//! the same tool calls are made on an overlay over one copy of a tree and on a plain disk
//! mount of another copy, then every page of `grep` (content mode, paged by `head_limit` and
//! `offset`), `glob` and `ls` must read the same. Covers paging across base and layer files
//! with files the layer hides, and ignore rules applied to files that exist only in the layer
//! (`.gitignore` in the base, and one written in the layer).

use std::sync::Arc;

use mountfs::ground::config::parse_table;
use mountfs::server::mounts::MountTable;
use mountfs::state::session::{Session, WriteOptions};
use serde_json::{Value, json};

/// The same tree in two directories, one mounted as an overlay, one as a plain disk mount.
struct Twin {
    _dirs: (tempfile::TempDir, tempfile::TempDir),
    overlay: Arc<Session>,
    disk: Arc<Session>,
}

/// The entries (`  N: text` matches) of a content-mode grep answer.
fn entries(answer: &str) -> usize {
    answer
        .lines()
        .filter(|l| {
            l.strip_prefix("  ")
                .and_then(|l| l.split_once(": "))
                .is_some_and(|(n, _)| n.parse::<usize>().is_ok())
        })
        .count()
}

fn tree(dir: &std::path::Path) {
    // Distinct modification times, the same in both copies: glob lists newest first.
    let mut second = 0;
    let mut put = |rel: &str, content: &str| {
        let path = dir.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, content).unwrap();
        second += 1;
        let time = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000 + second);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(time)
            .unwrap();
    };
    for i in 0..12 {
        let lines: String = (0..4).map(|j| format!("needle {i} {j}\nhay\n")).collect();
        put(&format!("a/f{i:02}.txt"), &lines);
    }
    // Enough matching lines that the disk search trims what it keeps to the answer's page.
    for i in 0..12 {
        let lines: String = (0..400).map(|j| format!("pin {i} {j}\n")).collect();
        put(&format!("big/g{i:02}.txt"), &lines);
    }
    put("b/one.txt", "needle b\n");
    put(".gitignore", "ignored/\n*.log\n");
    put("ignored/old.txt", "needle ignored\n");
    put("keep.log", "needle log\n");
    // A repository whose `.git/info/exclude` hides `*.tmp` below it.
    put("repo/.git/info/exclude", "*.tmp\n");
    put("repo/sub/a.txt", "needle repo\n");
    put("repo/sub/b.tmp", "needle excluded\n");
}

async fn session(spec: String) -> Arc<Session> {
    let table = MountTable::open(parse_table(&[spec]).unwrap())
        .await
        .unwrap();
    Arc::new(Session::new(
        Arc::new(table.workspace_backend("alice")),
        WriteOptions::default(),
    ))
}

impl Twin {
    async fn new(options: &str) -> Self {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        tree(a.path());
        tree(b.path());
        let overlay = session(format!("/=disk:{}{options},overlay", a.path().display())).await;
        let disk = session(format!("/=disk:{}{options}", b.path().display())).await;
        Self {
            _dirs: (a, b),
            overlay,
            disk,
        }
    }

    /// Makes the same call on both; both must succeed.
    async fn both(&self, tool: &str, args: Value) {
        for session in [&self.overlay, &self.disk] {
            if let Err(e) = mountfs::tools::call(tool, args.clone(), session).await {
                panic!("{tool}({args}) failed: {e}");
            }
        }
    }

    /// Makes the same call on both: the answers must be the same.
    async fn same(&self, tool: &str, args: Value) -> String {
        let answer = |session| {
            let args = args.clone();
            async move {
                match mountfs::tools::call(tool, args, session).await {
                    Ok(reply) => reply.text,
                    Err(e) => e.to_string(),
                }
            }
        };
        let (overlay, disk) = (answer(&self.overlay).await, answer(&self.disk).await);
        if tool == "glob" {
            // Newest first: files the test wrote moments apart may tie differently.
            let sorted = |text: &str| {
                let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
                lines.sort();
                lines
            };
            assert_eq!(
                sorted(&overlay),
                sorted(&disk),
                "{tool}({args}) through the overlay"
            );
        } else {
            assert_eq!(overlay, disk, "{tool}({args}) through the overlay");
        }
        overlay
    }

    /// The same changes on both: hidden base files early in path order, layer files between
    /// base files and in a new directory.
    async fn change(&self) {
        for gone in [
            "/a/f01.txt",
            "/a/f02.txt",
            "/a/f05.txt",
            "/big/g01.txt",
            "/big/g02.txt",
        ] {
            self.both("delete", json!({"file_path": gone})).await;
        }
        self.both(
            "write_file",
            json!({"file_path": "/a/f03b.txt", "content": "needle layer 1\nneedle layer 2\n"}),
        )
        .await;
        self.both(
            "write_file",
            json!({"file_path": "/c/new.txt", "content": "needle c\n"}),
        )
        .await;
        self.both("read_file", json!({"file_path": "/a/f07.txt"}))
            .await;
        self.both(
            "edit_file",
            json!({"file_path": "/a/f07.txt", "old_string": "needle 7 0", "new_string": "needle seven\nneedle more"}),
        )
        .await;
    }

    /// Every page of a content-mode grep of `pattern` (and the whole answer) reads the same.
    async fn same_grep_pages(&self, pattern: &str, path: &str) {
        let whole = self
            .same(
                "grep",
                json!({"pattern": pattern, "path": path, "output_mode": "content"}),
            )
            .await;
        let entries = entries(&whole);
        assert!(entries > 10, "{whole}");
        for limit in [1, 5, 7] {
            let mut offset = 0;
            while offset <= entries {
                self.same(
                    "grep",
                    json!({"pattern": pattern, "path": path, "output_mode": "content",
                           "head_limit": limit, "offset": offset}),
                )
                .await;
                offset += limit;
            }
        }
        for mode in ["files_with_matches", "count"] {
            self.same(
                "grep",
                json!({"pattern": pattern, "path": path, "output_mode": mode}),
            )
            .await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grep_pages_through_an_overlay_are_the_disk_mounts() {
    let twin = Twin::new("").await;
    twin.change().await;
    twin.same_grep_pages("needle", "/").await;
    twin.same_grep_pages("needle", "/a").await;
    let page = twin
        .same(
            "grep",
            json!({"pattern": "needle", "path": "/a", "output_mode": "content", "head_limit": 5}),
        )
        .await;
    assert_eq!(entries(&page), 5, "{page}");
    // Pages deep into many matches, where the base's search keeps only what the page can show.
    for offset in [0, 390, 1000, 2390, 3500] {
        let page = twin
            .same(
                "grep",
                json!({"pattern": "pin", "path": "/big", "output_mode": "content",
                       "head_limit": 50, "offset": offset}),
            )
            .await;
        assert_eq!(entries(&page), 50, "offset {offset}: {page}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ignore_rules_apply_to_layer_files_as_to_disk_files() {
    for options in ["", ",no-ignore"] {
        let twin = Twin::new(options).await;
        twin.change().await;
        // Layer files in an ignored directory, matching an ignored pattern, and in `.git/`.
        for (path, content) in [
            ("/ignored/new.txt", "needle new ignored\n"),
            ("/c/new.log", "needle new log\n"),
            ("/deep/ignored/x.txt", "needle deep\n"),
            ("/repo/sub/new.tmp", "needle new excluded\n"),
            ("/repo/sub/deeper/new.txt", "needle new repo\n"),
        ] {
            twin.both("write_file", json!({"file_path": path, "content": content}))
                .await;
        }
        let check = async |twin: &Twin| {
            for (pattern, path) in [("**/*", "/"), ("*.txt", "/"), ("*", "/c"), ("*", "/a")] {
                twin.same("glob", json!({"pattern": pattern, "path": path}))
                    .await;
            }
            twin.same_grep_pages("needle", "/").await;
            // Searches that start below the directories holding the ignore files.
            for path in ["/repo", "/repo/sub", "/repo/sub/deeper", "/a"] {
                twin.same("glob", json!({"pattern": "**/*", "path": path}))
                    .await;
                twin.same(
                    "grep",
                    json!({"pattern": "needle", "path": path, "output_mode": "files_with_matches"}),
                )
                .await;
            }
            // Searching an ignored directory itself shows its files, as on disk.
            twin.same("glob", json!({"pattern": "*", "path": "/ignored"}))
                .await;
            for dir in ["/", "/a", "/c", "/ignored"] {
                twin.same("ls", json!({"path": dir})).await;
            }
        };
        check(&twin).await;
        // A `.gitignore` written in the layer takes effect on base and layer files below it.
        twin.both(
            "write_file",
            json!({"file_path": "/a/.gitignore", "content": "f1*.txt\nf03b.txt\n"}),
        )
        .await;
        check(&twin).await;
        // And one deleted in the layer stops taking effect.
        twin.both("read_file", json!({"file_path": "/.gitignore"}))
            .await;
        twin.both("delete", json!({"file_path": "/.gitignore"}))
            .await;
        check(&twin).await;
    }
}
