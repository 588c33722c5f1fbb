//! Files that grow huge between two reads of one tool call (another program appending to a
//! log, a build writing an image): `read_file` of an image and `file_info`'s line count read
//! through a bound after the first look, never the whole file, so the growth cannot make the
//! process allocate the new size (an allocation failure aborts every session; issue 10).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use mountfs::ground::path::VirtualPath;
use mountfs::storage::backend::{
    Backend, BoundedRead, FileBytes, FileView, LineWindow, MemoryBackend, RenameOptions, Renamed,
    Result,
};
use serde_json::json;

use crate::support::backends::{memory_mount, mount};
use crate::support::fixtures::Fixture;
use crate::support::forward::{Forward, Intercept};

/// What the trapped files have "grown" to by the time of a second read.
const GROWN: u64 = 6 * 1024 * 1024 * 1024;

/// A memory backend whose files under `/grows/` have grown to [`GROWN`] bytes after the first
/// look (`read_window` still sees them small): a whole read of one counts as the failure.
type GrowingBackend = Forward<Growth>;

/// What a [`GrowingBackend`] counts, and the calls it changes.
#[derive(Debug, Default)]
struct Growth {
    whole_reads_of_grown: AtomicUsize,
}

fn grows(path: &VirtualPath) -> bool {
    path.as_str().contains("grows")
}

#[async_trait]
impl Intercept for Growth {
    async fn read(&self, inner: &dyn Backend, path: &VirtualPath) -> Result<FileBytes> {
        if grows(path) {
            self.whole_reads_of_grown.fetch_add(1, Ordering::SeqCst);
        }
        inner.read(path).await
    }

    async fn read_at_most(
        &self,
        inner: &dyn Backend,
        path: &VirtualPath,
        max_bytes: u64,
    ) -> Result<BoundedRead> {
        if grows(path) {
            let version = inner.read(path).await?.version;
            assert!(GROWN > max_bytes);
            return Ok(BoundedRead::TooLarge {
                size: GROWN,
                version,
            });
        }
        inner.read_at_most(path, max_bytes).await
    }

    async fn read_window(
        &self,
        inner: &dyn Backend,
        path: &VirtualPath,
        window: LineWindow,
    ) -> Result<FileView> {
        let mut view = inner.read_window(path, window).await?;
        // As the disk backend answers for a file too big to count cheaply.
        if let FileView::Text(text) = &mut view {
            text.total_lines = None;
        }
        Ok(view)
    }

    /// Never in place: a move copies and deletes.
    async fn rename(
        &self,
        _inner: &dyn Backend,
        _from: &VirtualPath,
        _to: &VirtualPath,
        _options: &RenameOptions,
    ) -> Result<Option<Renamed>> {
        Ok(None)
    }
}

fn growing_world() -> (Fixture, Arc<GrowingBackend>) {
    let growing: Arc<GrowingBackend> = Arc::new(Forward::new(
        Arc::new(MemoryBackend::default()),
        Growth::default(),
    ));
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
