//! Half-way failures, forced with a backend that fails on purpose: a move whose source cannot be
//! deleted after the copy, a directory move whose last delete fails, and an apply_patch whose
//! second write fails. In each, nothing may be lost or duplicated: the files end as they began.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use mountfs::ground::path::VirtualPath;
use mountfs::storage::backend::{
    Backend, BoundedRead, DeleteOptions, Error, FileBytes, FileView, LineWindow, MemoryBackend,
    RenameOptions, Renamed, Result, Upload, Version, WriteMode, WriteOutcome,
};
use serde_json::json;

use crate::support::backends::{memory_mount, mount};
use crate::support::fixtures::Fixture;
use crate::support::forward::{Forward, Intercept};

/// A memory backend whose deletes and writes of paths containing `trap` fail while armed.
type FaultyBackend = Forward<Faults>;

/// The switches of a [`FaultyBackend`], and the calls they change.
#[derive(Debug, Default)]
struct Faults {
    fail_deletes: AtomicBool,
    fail_writes: AtomicBool,
    panic_reads: AtomicBool,
    trap: String,
}

impl Faults {
    fn failure(&self, path: &VirtualPath) -> Error {
        Error::Io {
            path: path.clone(),
            message: "injected failure".into(),
        }
    }

    fn trapped(&self, path: &VirtualPath) -> bool {
        path.as_str().contains(&self.trap)
    }
}

#[async_trait]
impl Intercept for Faults {
    async fn read(&self, inner: &dyn Backend, path: &VirtualPath) -> Result<FileBytes> {
        if self.panic_reads.load(Ordering::SeqCst) && self.trapped(path) {
            panic!("injected panic while reading {path}");
        }
        inner.read(path).await
    }

    /// Through [`Intercept::read`] above, so its trap holds for every read.
    async fn read_at_most(
        &self,
        inner: &dyn Backend,
        path: &VirtualPath,
        max_bytes: u64,
    ) -> Result<BoundedRead> {
        Ok(self.read(inner, path).await?.at_most(max_bytes))
    }

    /// Through [`Intercept::read`] above, so its trap holds for every read.
    async fn read_window(
        &self,
        inner: &dyn Backend,
        path: &VirtualPath,
        window: LineWindow,
    ) -> Result<FileView> {
        Ok(self.read(inner, path).await?.into_view(window))
    }

    /// With [`Intercept::read`]'s trap: a trapped file panics every read.
    async fn read_range(
        &self,
        inner: &dyn Backend,
        path: &VirtualPath,
        offset: u64,
        len: usize,
        version: &Version,
    ) -> Result<Vec<u8>> {
        if self.panic_reads.load(Ordering::SeqCst) && self.trapped(path) {
            panic!("injected panic while reading {path}");
        }
        inner.read_range(path, offset, len, version).await
    }

    async fn begin_upload<'a>(
        &'a self,
        inner: &'a dyn Backend,
        path: &VirtualPath,
        mode: WriteMode,
    ) -> Result<Box<dyn Upload + 'a>> {
        if self.fail_writes.load(Ordering::SeqCst) && self.trapped(path) {
            return Err(self.failure(path));
        }
        inner.begin_upload(path, mode).await
    }

    async fn write(
        &self,
        inner: &dyn Backend,
        path: &VirtualPath,
        content: &[u8],
        mode: WriteMode,
    ) -> Result<WriteOutcome> {
        if self.fail_writes.load(Ordering::SeqCst) && self.trapped(path) {
            return Err(self.failure(path));
        }
        inner.write(path, content, mode).await
    }

    async fn delete(
        &self,
        inner: &dyn Backend,
        path: &VirtualPath,
        options: &DeleteOptions,
    ) -> Result<()> {
        if self.fail_deletes.load(Ordering::SeqCst) && self.trapped(path) {
            return Err(self.failure(path));
        }
        inner.delete(path, options).await
    }

    /// Never in place: a move copies and deletes, through the faults above.
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

fn faulty_world(trap: &str) -> (Fixture, Arc<FaultyBackend>) {
    let faulty: Arc<FaultyBackend> = Arc::new(Forward::new(
        Arc::new(MemoryBackend::default()),
        Faults {
            trap: trap.to_owned(),
            ..Faults::default()
        },
    ));
    let fx = Fixture::over(
        vec![memory_mount("/"), mount("/faulty", faulty.clone(), false)],
        "/faulty",
        "/",
    );
    (fx, faulty)
}

#[tokio::test]
async fn a_move_whose_source_cannot_be_deleted_takes_the_copy_back() {
    let (fx, faulty) = faulty_world("source");
    fx.put("/faulty/source.txt", b"precious\n").await;
    fx.put("/existing.txt", b"was here\n").await;
    faulty.fail_deletes.store(true, Ordering::SeqCst);
    let err = fx
        .refused(
            "move",
            json!({"source": "/faulty/source.txt", "destination": "/copy.txt"}),
            &["/faulty/source.txt", "/copy.txt"],
        )
        .await;
    assert_eq!(
        err,
        "Error: Could not remove /faulty/source.txt after copying it to /copy.txt: Error: I/O error on /faulty/source.txt: injected failure\nThe copy was taken back, so nothing changed."
    );
    // Over an existing destination, its old content is put back.
    fx.read("/existing.txt").await;
    fx.refused(
        "move",
        json!({"source": "/faulty/source.txt", "destination": "/existing.txt", "overwrite": true}),
        &["/faulty/source.txt", "/existing.txt"],
    )
    .await;
    // Nothing to undo: the failed move recorded no step.
    fx.refused(
        "undo_edit",
        json!({"file_path": "/existing.txt"}),
        &["/existing.txt"],
    )
    .await;
}

#[tokio::test]
async fn a_directory_move_failing_half_way_puts_every_file_back() {
    let (fx, faulty) = faulty_world("z_last");
    let files = [
        "/faulty/dir/a.txt",
        "/faulty/dir/b.txt",
        "/faulty/dir/z_last.txt",
    ];
    for path in files {
        fx.put(path, path.as_bytes()).await;
    }
    faulty.fail_deletes.store(true, Ordering::SeqCst);
    let mut untouched: Vec<&str> = files.to_vec();
    untouched.extend(["/moved/a.txt", "/moved/b.txt", "/moved/z_last.txt"]);
    let err = fx
        .refused(
            "move",
            json!({"source": "/faulty/dir", "destination": "/moved"}),
            &untouched,
        )
        .await;
    assert!(
        err.ends_with(
            "The copies made so far were taken back: every file was put back, nothing changed."
        ),
        "{err}"
    );
}

#[tokio::test]
async fn a_patch_whose_second_write_fails_restores_the_first_file() {
    let (fx, faulty) = faulty_world("second");
    fx.put_and_read("/faulty/first.txt", b"1\n").await;
    fx.put_and_read("/faulty/second.txt", b"2\n").await;
    faulty.fail_writes.store(true, Ordering::SeqCst);
    let patch = "--- a/faulty/first.txt\n+++ b/faulty/first.txt\n@@ -1 +1 @@\n-1\n+one\n--- a/faulty/second.txt\n+++ b/faulty/second.txt\n@@ -1 +1 @@\n-2\n+two\n";
    let err = fx
        .refused(
            "apply_patch",
            json!({"patch": patch}),
            &["/faulty/first.txt", "/faulty/second.txt"],
        )
        .await;
    assert_eq!(
        err,
        "Error: apply_patch could not write /faulty/second.txt: Error: I/O error on /faulty/second.txt: injected failure\nThe 1 file(s) written before it were put back; nothing was changed."
    );
    // The session may still edit the first file: its ledger entry is the restored version.
    faulty.fail_writes.store(false, Ordering::SeqCst);
    fx.ok("apply_patch", json!({"patch": patch})).await;
    assert_eq!(fx.text("/faulty/first.txt").await, "one\n");
    assert_eq!(fx.text("/faulty/second.txt").await, "two\n");
}

#[tokio::test]
async fn a_panic_inside_a_tool_is_an_error_result_and_the_server_keeps_serving() {
    let (fx, faulty) = faulty_world("boom");
    fx.put("/faulty/boom.txt", b"x\n").await;
    fx.put("/faulty/fine.txt", b"fine\n").await;
    faulty.panic_reads.store(true, Ordering::SeqCst);
    let answer = fx
        .call(
            "edit_file",
            json!({"file_path": "/faulty/boom.txt", "old_string": "x", "new_string": "y"}),
        )
        .await;
    assert!(answer.is_error);
    assert_eq!(
        answer.text,
        "Error: internal error while running edit_file; nothing was changed by the failed step. Retry, or report this bug"
    );
    // The same session goes on serving, including the file whose call panicked (its lock and
    // turn were released when the task ended).
    fx.ok("read_file", json!({"file_path": "/faulty/fine.txt"}))
        .await;
    faulty.panic_reads.store(false, Ordering::SeqCst);
    assert_eq!(fx.bytes("/faulty/boom.txt").await, Some(b"x\n".to_vec()));
    fx.ok("read_file", json!({"file_path": "/faulty/boom.txt"}))
        .await;
    fx.ok(
        "edit_file",
        json!({"file_path": "/faulty/boom.txt", "old_string": "x", "new_string": "y"}),
    )
    .await;
}
