//! Files that grow huge between two reads of one tool call (another program appending to a
//! log, a build writing an image): `read_file` of an image and `file_info`'s line count read
//! through a bound after the first look, never the whole file, so the growth cannot make the
//! process allocate the new size (an allocation failure aborts every session; issue 10).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use mountfs::ground::path::VirtualPath;
use mountfs::storage::backend::{
    AsideFile, Backend, BoundedRead, DeleteOptions, Entry, FileBytes, FileView, GlobQuery,
    GrepFile, GrepQuery, LineWindow, MemoryBackend, RenameOptions, Renamed, Result, Version,
    WriteMode, WriteOutcome,
};
use serde_json::json;

use crate::support::backends::{memory_mount, mount};
use crate::support::fixtures::Fixture;

/// What the trapped files have "grown" to by the time of a second read.
const GROWN: u64 = 6 * 1024 * 1024 * 1024;

/// A memory backend whose files under `/grows/` have grown to [`GROWN`] bytes after the first
/// look (`read_window` still sees them small): a whole read of one counts as the failure.
#[derive(Debug, Default)]
struct GrowingBackend {
    inner: MemoryBackend,
    whole_reads_of_grown: AtomicUsize,
}

fn grows(path: &VirtualPath) -> bool {
    path.as_str().contains("grows")
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl Backend for GrowingBackend {
    async fn stat(&self, path: &VirtualPath) -> Result<Option<Entry>> {
        self.inner.stat(path).await
    }
    async fn ls(&self, dir: &VirtualPath) -> Result<Vec<Entry>> {
        self.inner.ls(dir).await
    }
    async fn read(&self, path: &VirtualPath) -> Result<FileBytes> {
        if grows(path) {
            self.whole_reads_of_grown.fetch_add(1, Ordering::SeqCst);
        }
        self.inner.read(path).await
    }
    async fn read_at_most(&self, path: &VirtualPath, max_bytes: u64) -> Result<BoundedRead> {
        if grows(path) {
            let version = self.inner.read(path).await?.version;
            assert!(GROWN > max_bytes);
            return Ok(BoundedRead::TooLarge {
                size: GROWN,
                version,
            });
        }
        self.inner.read_at_most(path, max_bytes).await
    }
    async fn read_window(&self, path: &VirtualPath, window: LineWindow) -> Result<FileView> {
        let mut view = self.inner.read_window(path, window).await?;
        // As the disk backend answers for a file too big to count cheaply.
        if let FileView::Text(text) = &mut view {
            text.total_lines = None;
        }
        Ok(view)
    }
    async fn read_range(
        &self,
        path: &VirtualPath,
        offset: u64,
        len: usize,
        version: &mountfs::storage::backend::Version,
    ) -> Result<Vec<u8>> {
        self.inner.read_range(path, offset, len, version).await
    }
    async fn content_sha256(
        &self,
        path: &VirtualPath,
        version: &mountfs::storage::backend::Version,
    ) -> Result<Option<String>> {
        self.inner.content_sha256(path, version).await
    }
    async fn check_upload_size(&self, path: &VirtualPath, size: u64) -> Result<()> {
        self.inner.check_upload_size(path, size).await
    }
    async fn begin_upload(
        &self,
        path: &VirtualPath,
        mode: WriteMode,
    ) -> Result<Box<dyn mountfs::storage::backend::Upload + '_>> {
        self.inner.begin_upload(path, mode).await
    }
    async fn write(
        &self,
        path: &VirtualPath,
        content: &[u8],
        mode: WriteMode,
    ) -> Result<WriteOutcome> {
        self.inner.write(path, content, mode).await
    }
    async fn delete(&self, path: &VirtualPath, options: &DeleteOptions) -> Result<()> {
        self.inner.delete(path, options).await
    }
    // The plain answers below are written out as in `faults.rs`'s test double on purpose: the
    // Backend trait has no default methods, so each double states every answer it gives.
    async fn set_aside(
        &self,
        _path: &VirtualPath,
        _version: &Version,
    ) -> Result<Option<AsideFile>> {
        Ok(None)
    }
    async fn write_keeping_aside(
        &self,
        _path: &VirtualPath,
        _content: &[u8],
        _version: &Version,
    ) -> Result<Option<(WriteOutcome, AsideFile)>> {
        Ok(None)
    }
    async fn begin_changes(
        &self,
        _files: &[mountfs::storage::backend::PlannedFile],
        _role: &mountfs::storage::backend::JournalRole,
    ) -> mountfs::storage::backend::Result<Option<Box<dyn mountfs::storage::backend::ChangeJournal>>>
    {
        Ok(None)
    }

    /// Never in place: a move copies and deletes.
    async fn rename(
        &self,
        _from: &VirtualPath,
        _to: &VirtualPath,
        _options: &RenameOptions,
    ) -> Result<Option<Renamed>> {
        Ok(None)
    }
    async fn permissions(&self, _path: &VirtualPath) -> Result<Option<u32>> {
        Ok(None)
    }
    async fn set_permissions(&self, _path: &VirtualPath, _mode: u32) -> Result<Option<Version>> {
        Ok(None)
    }
    async fn same_file(&self, _a: &VirtualPath, _b: &VirtualPath) -> Result<bool> {
        Ok(false)
    }
    async fn is_symlink(&self, _path: &VirtualPath) -> Result<bool> {
        Ok(false)
    }
    fn host_dir(&self) -> Option<&std::path::Path> {
        None
    }
    fn shell(&self) -> Option<&mountfs::storage::backend::ShellBackend> {
        None
    }
    async fn glob(&self, query: &GlobQuery) -> Result<Vec<Entry>> {
        self.inner.glob(query).await
    }
    async fn grep(&self, query: &GrepQuery) -> Result<Vec<GrepFile>> {
        self.inner.grep(query).await
    }
}

fn growing_world() -> (Fixture, Arc<GrowingBackend>) {
    let growing = Arc::new(GrowingBackend::default());
    let fx = Fixture::over(
        vec![memory_mount("/"), mount("/g", growing.clone(), false)],
        "/g",
        "/",
    );
    (fx, growing)
}

/// The 8 bytes every PNG starts with, and a little more.
const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR";

#[tokio::test]
async fn an_image_grown_huge_since_its_first_look_is_described_not_read() {
    let (fx, growing) = growing_world();
    fx.put("/g/grows.png", PNG).await;
    let answer = fx
        .ok("read_file", json!({"file_path": "/g/grows.png"}))
        .await;
    assert!(
        answer
            .text
            .starts_with("/g/grows.png is a binary file (PNG image"),
        "{}",
        answer.text
    );
    assert_eq!(growing.whole_reads_of_grown.load(Ordering::SeqCst), 0);
    // An image that stayed small still comes back as image content.
    fx.put("/g/stays.png", PNG).await;
    let answer = fx
        .ok("read_file", json!({"file_path": "/g/stays.png"}))
        .await;
    assert!(
        answer.text.starts_with("Image /g/stays.png"),
        "{}",
        answer.text
    );
}

#[tokio::test]
async fn file_info_counts_no_lines_of_a_file_grown_huge_since_its_first_look() {
    let (fx, growing) = growing_world();
    fx.put("/g/grows.log", b"one\ntwo\n").await;
    let answer = fx
        .ok("file_info", json!({"file_path": "/g/grows.log"}))
        .await;
    let info = answer.structured.expect("structured result");
    assert_eq!(info["lines"], json!(null), "{info}");
    assert_eq!(growing.whole_reads_of_grown.load(Ordering::SeqCst), 0);
    fx.put("/g/stays.log", b"one\ntwo\n").await;
    let answer = fx
        .ok("file_info", json!({"file_path": "/g/stays.log"}))
        .await;
    assert_eq!(answer.structured.expect("structured")["lines"], json!(2));
}
