//! `mountfs cp --from SPEC --to SPEC`: copies a whole tree from one mount to another, of any
//! kinds (issue 27): back up a store to a directory, seed a store from a project, move a
//! namespace from SQLite to PostgreSQL. SPEC is the right side of `--mount` (CONTRACT §2: the
//! same grammar names a tree everywhere), options included (`,namespace=NAME`, `,ro`).
//!
//! Both trees are opened as a server opens its mounts ([`MountTable`]) and read and written
//! only through the [`Backend`] trait, so every mount kind the table can open works here, in
//! either direction. The steps, each finished before the next starts:
//! 1. the specs are parsed and judged: `memory` is refused on either side (a new process has
//!    an empty one, and it would be gone when `cp` exits), as are a read-only or overlay
//!    destination and a destination that is, or lies inside, the source (where a shell mount
//!    is on either side, by what each side's machine says of its directory — boot id, device
//!    and inode of it and its parents — so two commands reaching one machine, or a disk mount
//!    and a shell on this machine, are told apart from paths: `inside`);
//! 2. the source is walked ([`plan`]) and every path checked at the destination: a file that
//!    exists there is refused unless `--overwrite`, a file where the other side has a directory
//!    always — in both cases before anything is written;
//! 3. files are copied one at a time, in path order, streaming: a file of at most
//!    [`CHUNK_BYTES`] is read whole and written whole; a bigger one is read in ranges of
//!    [`CHUNK_BYTES`] ([`Backend::read_range`], each checked against the version the file had
//!    when its copy began, so a file changed meanwhile stops the copy instead of landing torn)
//!    and written through an upload ([`Backend::begin_upload`]: chunks staged where no reader
//!    sees them — a temporary file beside the destination on disk and on a shell target, rows
//!    of a temporary table of the store's own connection — then put in place at once). Memory
//!    therefore follows the chunk, not the file. Both ways are create-only (or overwrite), and
//!    atomic: a failure, or the process interrupted, leaves no half-written file; the files
//!    copied before it stay. Permission bits are copied where both sides keep them (disk to
//!    disk, shell targets with `stat -c`), right after the write.
//!
//! Empty directories are made where the destination kind can hold one (disk): the trait has no
//! `mkdir`, so a marker file is written into it and removed; a store's directories exist only
//! while a file lies under them, so there an empty directory is counted as not kept. On disk
//! `.git/` and mountfs's own `.mountfs-tmp-*` names are not copied; any other entry the source
//! mount's listing leaves out (a name that is not a valid virtual path, a symbolic link leading
//! out, a socket or FIFO, an entry that cannot be looked at) fails the copy before its first
//! write — a copy never reports success after skipping something (issue 41). A name starting
//! with `.mountfs-tmp` listed by any source stops it too. A symbolically linked directory is
//! not followed (it is listed in the summary); a symbolic link to a file is copied as the file
//! it leads to.
//!
//! [`Backend::begin_upload`]: crate::storage::backend::Uploads::begin_upload

mod inside;
mod plan;
pub mod progress;

use std::fmt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use thiserror::Error;
use tokio_util::sync::CancellationToken;

use crate::ground::config::{self, BackendSpec, MOUNT_GRAMMAR, MountSpec};
use crate::ground::path::VirtualPath;
use crate::server::mounts::MountTable;
use crate::storage::backend::{
    self, Backend, BoundedRead, DeleteOptions, DirPlace, ShellBackend, Upload, Version, WriteMode,
};

pub use progress::{Progress, ProgressLine};

/// The unit of memory of a copy: files up to this size are read and written whole, bigger
/// ones in ranges of this size (a multiple of 64 KiB, the block a shell target's `dd` copies).
/// Peak memory is a small multiple of it, whatever the files' sizes.
pub const CHUNK_BYTES: usize = 4 * 1024 * 1024;

/// Which tree a flag names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// `--from`.
    From,
    /// `--to`.
    To,
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::From => "--from",
            Self::To => "--to",
        })
    }
}

/// What `mountfs cp` was asked to do.
#[derive(Debug, Clone)]
pub struct CopyRequest<'a> {
    /// `--from`: the source tree's SPEC.
    pub from: &'a str,
    /// `--to`: the destination tree's SPEC.
    pub to: &'a str,
    /// `--overwrite`: replace files that exist at the destination (else the copy is refused).
    pub overwrite: bool,
    /// The `--shell NAME=COMMAND` texts, for a `shell:NAME:DIR` SPEC (see
    /// [`attach_shell_commands`]).
    pub shells: &'a [String],
}

/// What a finished copy did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CopySummary {
    /// Files written.
    pub files: u64,
    /// Bytes written.
    pub bytes: u64,
    /// Empty directories made (or found) at the destination.
    pub empty_dirs_kept: u64,
    /// Empty directories the destination kind cannot hold.
    pub empty_dirs_not_kept: u64,
    /// Symbolically linked directories of the source, not followed.
    pub linked_dirs: Vec<VirtualPath>,
}

impl CopySummary {
    /// The lines `mountfs cp` prints when it is done.
    pub fn lines(&self, request: &CopyRequest<'_>) -> Vec<String> {
        let mut lines = vec![format!(
            "copied {} file(s), {} bytes, from {} to {}",
            self.files, self.bytes, request.from, request.to
        )];
        if self.empty_dirs_kept > 0 {
            lines.push(format!(
                "{} empty director(ies) made at the destination",
                self.empty_dirs_kept
            ));
        }
        if self.empty_dirs_not_kept > 0 {
            lines.push(format!(
                "{} empty director(ies) not kept: the destination holds a directory only while a file lies in it",
                self.empty_dirs_not_kept
            ));
        }
        if !self.linked_dirs.is_empty() {
            let names: Vec<String> = self.linked_dirs.iter().map(|p| p.to_string()).collect();
            lines.push(format!(
                "{} symbolically linked director(ies) not followed: {}",
                self.linked_dirs.len(),
                names.join(", ")
            ));
        }
        lines
    }
}

/// Why a copy failed or was refused. Each says what, where, and how to recover; those raised
/// before the first write say that nothing was copied.
#[derive(Debug, Error)]
pub enum CopyError {
    /// A SPEC that does not parse.
    #[error(
        "invalid {side} '{spec}': {reason}\n(SPEC is what follows PREFIX= in --mount)\n{MOUNT_GRAMMAR}"
    )]
    Spec {
        /// Which flag.
        side: Side,
        /// The text as given.
        spec: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A SPEC `cp` cannot use that way.
    #[error("{side} {spec}: {reason}")]
    Refused {
        /// Which flag.
        side: Side,
        /// The text as given.
        spec: String,
        /// Why, and what to give instead.
        reason: String,
    },
    /// A tree that cannot be opened (or, for `--to`, created).
    #[error("cannot open {side} {spec}: {reason}")]
    Open {
        /// Which flag.
        side: Side,
        /// The text as given.
        spec: String,
        /// Why, and the fix.
        reason: String,
    },
    /// A source with nothing in it.
    #[error(
        "--from {spec} holds no files or directories: nothing to copy. Check the directory, file or namespace"
    )]
    EmptySource {
        /// The text as given.
        spec: String,
    },
    /// A name of the source reserved for mountfs's own files (a store written by an older
    /// release): never copied, so the copy stops before its first write.
    #[error(
        "{path} in --from has a name starting with .mountfs-tmp: names starting with .mountfs-tmp are reserved for mountfs's own temporary files; choose another name. Nothing was copied: rename or remove it in --from, then copy again"
    )]
    Reserved {
        /// The path.
        path: VirtualPath,
    },
    /// An entry of the source the copy would leave out.
    #[error(
        "{path} in --from cannot be copied: {why}. Nothing was copied: move it away, fix it, or copy a directory that does not hold it"
    )]
    Skipped {
        /// The entry, as a virtual path (escaped).
        path: String,
        /// Why it would be left out.
        why: String,
    },
    /// A directory of the source that cannot be listed.
    #[error("cannot list {path} in --from: {reason}. Nothing was copied")]
    List {
        /// The directory.
        path: VirtualPath,
        /// Why.
        reason: String,
    },
    /// A path of the destination that cannot be looked at.
    #[error("cannot look at {path} in --to: {reason}. Nothing was copied")]
    Check {
        /// The path.
        path: VirtualPath,
        /// Why.
        reason: String,
    },
    /// A file on one side where the other has a directory.
    #[error(
        "{path} is a {source_kind} in --from but a {destination_kind} in --to. Nothing was copied: move it away at the destination, or copy somewhere else"
    )]
    KindConflict {
        /// The path.
        path: VirtualPath,
        /// What the source has there.
        source_kind: &'static str,
        /// What the destination has there.
        destination_kind: &'static str,
    },
    /// Files that exist at the destination, without `--overwrite`.
    #[error(
        "{count} file(s) to copy already exist in --to, the first {first}. Nothing was copied: pass --overwrite to replace them, or copy into an empty place"
    )]
    Exists {
        /// The first one, in copy order.
        first: VirtualPath,
        /// How many.
        count: u64,
    },
    /// A file of the source that changed while it was copied.
    #[error(
        "{path} changed in --from while it was being copied. Nothing of {path} was written (a copy never lands torn); the {done} file(s) copied before it stay: run again with --overwrite once it is quiet"
    )]
    Changed {
        /// The file.
        path: VirtualPath,
        /// Files copied before it.
        done: u64,
    },
    /// A file of the source that cannot be read.
    #[error(
        "cannot read {path} from --from: {reason}. The {done} file(s) copied before it stay: fix the cause and run again with --overwrite"
    )]
    Read {
        /// The file.
        path: VirtualPath,
        /// Why.
        reason: String,
        /// Files copied before it.
        done: u64,
    },
    /// Stopped by SIGINT or SIGTERM (`stop` cancelled), between two chunks: the upload in
    /// flight was aborted (its temporary file or staged rows removed).
    #[error(
        "interrupted{at}: nothing of the file in progress was written; the {done} file(s) copied before it stay: run again with --overwrite to finish"
    )]
    Interrupted {
        /// ` while copying PATH`, or empty between files.
        at: String,
        /// Files copied before it.
        done: u64,
    },
    /// A file or directory of the destination that cannot be written.
    #[error(
        "cannot write {path} to --to: {reason}. Nothing of {path} was written (a file is written whole or not at all); the {done} file(s) copied before it stay: fix the cause and run again with --overwrite"
    )]
    Write {
        /// The file or directory.
        path: VirtualPath,
        /// Why.
        reason: String,
        /// Files copied before it.
        done: u64,
    },
}

impl CopyError {
    /// Whether a SPEC does not parse (exit status 2) rather than the copy being refused or
    /// failing (1).
    pub fn is_usage(&self) -> bool {
        matches!(self, Self::Spec { .. })
    }

    /// Whether the copy was stopped by a signal (exit status 130, as a shell gives SIGINT).
    pub fn is_interrupted(&self) -> bool {
        matches!(self, Self::Interrupted { .. })
    }
}

/// A backend error as the reason inside a [`CopyError`]: its text without the leading
/// `Error: ` the tools' answers start with.
fn reason(error: &backend::Error) -> String {
    let text = error.to_string();
    text.strip_prefix("Error: ").unwrap_or(&text).to_owned()
}

/// Copies `request.from` to `request.to` (see the module doc), telling `progress` where it
/// stands before each file.
pub async fn copy(
    request: &CopyRequest<'_>,
    progress: impl FnMut(&Progress<'_>),
) -> Result<CopySummary, CopyError> {
    copy_until(request, progress, &CancellationToken::new()).await
}

/// [`copy`], stopping with [`CopyError::Interrupted`] once `stop` is cancelled (SIGINT,
/// SIGTERM): checked before each file and each chunk, never in the middle of one, so the
/// upload in flight is aborted cleanly and no temporary file or staged row stays behind.
pub async fn copy_until(
    request: &CopyRequest<'_>,
    mut progress: impl FnMut(&Progress<'_>),
    stop: &CancellationToken,
) -> Result<CopySummary, CopyError> {
    let mut from = parse_spec(request.from, Side::From)?;
    let mut to = parse_spec(request.to, Side::To)?;
    attach_shell_commands(&mut from, request.shells, Side::From)?;
    attach_shell_commands(&mut to, request.shells, Side::To)?;
    judge(&from, request.from, Side::From)?;
    judge(&to, request.to, Side::To)?;
    if destination_inside_source(&from.backend, &to.backend) {
        return Err(CopyError::Refused {
            side: Side::To,
            spec: request.to.to_owned(),
            reason: format!(
                "this is, or lies inside, --from {}: the copy would read what it writes. Copy to a place outside the source",
                request.from
            ),
        });
    }
    let from_root = target_root(&from.backend);
    let to_root = target_root(&to.backend);
    if shell_destination_inside_source(
        (&from.backend, from_root.as_ref(), request.from),
        (&to.backend, to_root.as_ref(), request.to),
    )
    .await?
    {
        return Err(CopyError::Refused {
            side: Side::To,
            spec: request.to.to_owned(),
            reason: format!(
                "this is, or lies inside, --from {} (one directory of one machine, told by device and inode there, whatever the paths, links and commands that name it): the copy would read what it writes. Copy to a place outside the source",
                request.from
            ),
        });
    }
    let source = open_tree(from.clone(), request.from, Side::From, None).await?;
    let host = match &from.backend {
        BackendSpec::Disk { dir, .. } => Some(dir.clone()),
        _ => None,
    };
    let plan = plan::walk(&*source, host.as_deref()).await?;
    if plan.items.is_empty() {
        return Err(CopyError::EmptySource {
            spec: request.from.to_owned(),
        });
    }
    // Opened (a missing directory created) only once the source is known to hold something.
    let destination = open_tree(to, request.to, Side::To, to_root.as_ref()).await?;
    plan::check_destination(&*destination, &plan, request.overwrite).await?;

    let mode = if request.overwrite {
        WriteMode::Overwrite
    } else {
        WriteMode::CreateOnly
    };
    let mut summary = CopySummary {
        linked_dirs: plan.linked_dirs.clone(),
        ..CopySummary::default()
    };
    // Once one empty directory was not kept, the destination kind cannot keep any.
    let mut keeps_empty_dirs = true;
    for item in &plan.items {
        match item {
            plan::Item::Dir { empty: false, .. } => {}
            plan::Item::Dir { path, empty: true } => {
                if keeps_empty_dirs && keep_empty_dir(&*destination, path, summary.files).await? {
                    summary.empty_dirs_kept += 1;
                } else {
                    keeps_empty_dirs = false;
                    summary.empty_dirs_not_kept += 1;
                }
            }
            plan::Item::File { path, .. } => {
                if stop.is_cancelled() {
                    return Err(CopyError::Interrupted {
                        at: String::new(),
                        done: summary.files,
                    });
                }
                let shown = path.to_string();
                progress(&Progress {
                    files_done: summary.files,
                    files_total: plan.files,
                    bytes_done: summary.bytes,
                    bytes_total: plan.bytes,
                    current: &shown,
                });
                let done_before = summary.bytes;
                let size = copy_file(
                    &*source,
                    &*destination,
                    path,
                    &mode,
                    summary.files,
                    stop,
                    &mut |bytes| {
                        progress(&Progress {
                            files_done: summary.files,
                            files_total: plan.files,
                            bytes_done: done_before + bytes,
                            bytes_total: plan.bytes,
                            current: &shown,
                        });
                    },
                )
                .await?;
                summary.files += 1;
                summary.bytes += size;
            }
        }
    }
    progress(&Progress {
        files_done: summary.files,
        files_total: plan.files,
        bytes_done: summary.bytes,
        bytes_total: plan.bytes,
        current: "",
    });
    Ok(summary)
}

/// Copies one file (see the module doc, step 3), telling `copied` how many of its bytes are
/// written after each chunk of a big one; returns its size.
async fn copy_file(
    source: &dyn Backend,
    destination: &dyn Backend,
    path: &VirtualPath,
    mode: &WriteMode,
    done: u64,
    stop: &CancellationToken,
    copied: &mut dyn FnMut(u64),
) -> Result<u64, CopyError> {
    let read_failed = |error: backend::Error| match error {
        backend::Error::VersionMismatch { .. } => CopyError::Changed {
            path: path.clone(),
            done,
        },
        other => CopyError::Read {
            path: path.clone(),
            reason: reason(&other),
            done,
        },
    };
    let write_failed = |error: backend::Error| CopyError::Write {
        path: path.clone(),
        reason: reason(&error),
        done,
    };
    let size = match source
        .read_at_most(path, CHUNK_BYTES as u64)
        .await
        .map_err(read_failed)?
    {
        BoundedRead::Whole(file) => {
            destination
                .write(path, &file.content, mode.clone())
                .await
                .map_err(write_failed)?;
            file.content.len() as u64
        }
        BoundedRead::TooLarge { size, version } => {
            destination
                .check_upload_size(path, size)
                .await
                .map_err(write_failed)?;
            let mut upload = destination
                .begin_upload(path, mode.clone())
                .await
                .map_err(write_failed)?;
            let streamed = stream_ranges(
                source,
                &mut *upload,
                (path, size, &version),
                copied,
                (&read_failed, &write_failed),
                (stop, done),
            )
            .await;
            match streamed {
                Ok(()) => {
                    upload.finish().await.map_err(write_failed)?;
                }
                Err(error) => {
                    upload.abort().await;
                    return Err(error);
                }
            }
            size
        }
    };
    if let Some(bits) = source.permissions(path).await.map_err(read_failed)? {
        destination
            .set_permissions(path, bits)
            .await
            .map_err(write_failed)?;
    }
    Ok(size)
}

/// How a backend error becomes a [`CopyError`], on the source's side and the destination's.
type Failures<'a> = (
    &'a (dyn Fn(backend::Error) -> CopyError + Send + Sync),
    &'a (dyn Fn(backend::Error) -> CopyError + Send + Sync),
);

/// Appends the `size` bytes of `path` to `upload`, [`CHUNK_BYTES`] at a time, each range read
/// only while the file still has `version`: one chunk in memory at a time. At the end, where
/// the source can hash the file where it lives ([`Backend::content_sha256`]), the SHA-256 of
/// what was streamed must be that file's, else the file changed during the copy.
///
/// [`Backend::content_sha256`]: crate::storage::backend::Uploads::content_sha256
async fn stream_ranges(
    source: &dyn Backend,
    upload: &mut dyn Upload,
    (path, size, version): (&VirtualPath, u64, &Version),
    copied: &mut dyn FnMut(u64),
    (read_failed, write_failed): Failures<'_>,
    (stop, done): (&CancellationToken, u64),
) -> Result<(), CopyError> {
    let mut offset = 0u64;
    let mut digest = Sha256::new();
    while offset < size {
        if stop.is_cancelled() {
            return Err(CopyError::Interrupted {
                at: format!(" while copying {path}"),
                done,
            });
        }
        let want = usize::try_from(size - offset)
            .unwrap_or(CHUNK_BYTES)
            .min(CHUNK_BYTES);
        let chunk = source
            .read_range(path, offset, want, version)
            .await
            .map_err(read_failed)?;
        if chunk.len() != want {
            // Shorter than the version's size: it changed (a backend whose version missed it).
            return Err(read_failed(backend::Error::VersionMismatch {
                path: path.clone(),
            }));
        }
        digest.update(&chunk);
        upload.append(&chunk).await.map_err(write_failed)?;
        offset += chunk.len() as u64;
        copied(offset);
    }
    // The ranges were each checked against the version, but a backend's version of a big file
    // may be a stamp a change made in place within one timestamp tick keeps (a shell target):
    // the whole content, hashed where it lives, must be what was streamed.
    let streamed = hex::encode(digest.finalize());
    match source
        .content_sha256(path, version)
        .await
        .map_err(read_failed)?
    {
        Some(there) if there != streamed => Err(read_failed(backend::Error::VersionMismatch {
            path: path.clone(),
        })),
        _ => Ok(()),
    }
}

/// Makes the empty directory `path` at the destination, through the trait (which has no
/// `mkdir`): a marker file is written into it and removed. Whether the directory stays
/// (`false`: the destination's directories exist only while a file lies under them).
async fn keep_empty_dir(
    destination: &dyn Backend,
    path: &VirtualPath,
    done: u64,
) -> Result<bool, CopyError> {
    let failed = |error: backend::Error| CopyError::Write {
        path: path.clone(),
        reason: reason(&error),
        done,
    };
    if destination.stat(path).await.map_err(failed)?.is_some() {
        return Ok(true);
    }
    let marker = path
        .join(&format!(".mountfs-cp-{}", std::process::id()))
        .map_err(|error| failed(error.into()))?;
    destination
        .write(&marker, b"", WriteMode::CreateOnly)
        .await
        .map_err(failed)?;
    destination
        .delete(&marker, &DeleteOptions::default())
        .await
        .map_err(failed)?;
    Ok(destination.stat(path).await.map_err(failed)?.is_some())
}

/// Parses a SPEC as the right side of `--mount`.
fn parse_spec(text: &str, side: Side) -> Result<MountSpec, CopyError> {
    config::parse_mount(&format!("/={text}")).map_err(|error| CopyError::Spec {
        side,
        spec: text.to_owned(),
        reason: error.reason,
    })
}

/// Fills a shell mount's SPEC (`shell:NAME:DIR`, issue 27) with its command from the
/// `--shell NAME=COMMAND` texts, as serving does before opening the table.
fn attach_shell_commands(
    spec: &mut MountSpec,
    shells: &[String],
    side: Side,
) -> Result<(), CopyError> {
    config::attach_shells(std::slice::from_mut(spec), shells).map_err(|error| CopyError::Spec {
        side,
        spec: error.text,
        reason: error.reason,
    })
}

/// Refuses what `cp` cannot use on `side`, and a source that does not exist (opening a store
/// file would create it).
fn judge(spec: &MountSpec, text: &str, side: Side) -> Result<(), CopyError> {
    let refuse = |reason: &str| {
        Err(CopyError::Refused {
            side,
            spec: text.to_owned(),
            reason: reason.to_owned(),
        })
    };
    match (&spec.backend, side) {
        (BackendSpec::Memory, _) => {
            return refuse(
                "a memory mount lives and dies with one server process: a new process has an empty one, and what cp wrote into it would be gone when it exits. Name a disk or store tree (disk:DIR, store:sqlite:FILE, store:postgres:URL)",
            );
        }
        (
            BackendSpec::Disk {
                overlay: Some(_), ..
            },
            Side::To,
        ) => {
            return refuse(
                "an overlay mount keeps changes in a layer until an agent commits them. Copy into the directory itself (drop ,overlay)",
            );
        }
        (_, Side::To) if spec.read_only => {
            return refuse(
                "the destination is read-only (,ro): nothing can be copied into it. Drop ,ro",
            );
        }
        (BackendSpec::Disk { dir, .. }, Side::From) if !dir.is_dir() => {
            return refuse(&format!(
                "the directory {} does not exist (or is not a directory). Check the path",
                dir.display()
            ));
        }
        (BackendSpec::Sqlite { file, .. }, Side::From) if !file.is_file() => {
            return refuse(&format!(
                "the SQLite file {} does not exist. Check the path",
                file.display()
            ));
        }
        _ => {}
    }
    Ok(())
}

/// Whether `below`, or a directory above it, is a directory of the tree at `dir` by identity
/// (device and inode): a bind mount of the source, of a directory inside it, or another path
/// the kernel gives to one of them, puts the copy inside its own source whatever its name
/// (issue 41). The tree is walked as the copy walks it (symbolic links not followed), each
/// directory once.
fn source_tree_holds(dir: &Path, below: &Path) -> bool {
    use std::collections::HashSet;
    use std::os::unix::fs::MetadataExt;
    let id = |meta: &std::fs::Metadata| (meta.dev(), meta.ino());
    // The destination and its ancestors, as far as they exist.
    let above: HashSet<(u64, u64)> = below
        .ancestors()
        .filter_map(|at| std::fs::metadata(at).ok())
        .filter(std::fs::Metadata::is_dir)
        .map(|meta| id(&meta))
        .collect();
    let Ok(top) = std::fs::metadata(dir) else {
        return false;
    };
    let mut seen = HashSet::from([id(&top)]);
    let mut pending = vec![dir.to_path_buf()];
    if above.contains(&id(&top)) {
        return true;
    }
    while let Some(at) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&at) else {
            // The copy's own walk reports what cannot be listed.
            continue;
        };
        for entry in entries.flatten() {
            let Ok(meta) = std::fs::symlink_metadata(entry.path()) else {
                continue;
            };
            if !meta.is_dir() || !seen.insert(id(&meta)) {
                continue;
            }
            if above.contains(&id(&meta)) {
                return true;
            }
            pending.push(entry.path());
        }
    }
    false
}

/// Whether the destination is the source, or lies inside it (directories compared after
/// resolving symbolic links, and by device and inode; stores by file or URL and namespace).
fn destination_inside_source(from: &BackendSpec, to: &BackendSpec) -> bool {
    match (from, to) {
        (BackendSpec::Disk { dir: a, .. }, BackendSpec::Disk { dir: b, .. }) => {
            resolved(b).starts_with(resolved(a)) || source_tree_holds(a, &resolved(b))
        }
        (
            BackendSpec::Sqlite {
                file: a,
                namespace: m,
            },
            BackendSpec::Sqlite {
                file: b,
                namespace: n,
            },
        ) => m == n && resolved(a) == resolved(b),
        (
            BackendSpec::Postgres {
                url: a,
                namespace: m,
            },
            BackendSpec::Postgres {
                url: b,
                namespace: n,
            },
        ) => m == n && a == b,
        // One bucket, one key prefix or one below it.
        (BackendSpec::Object(a), BackendSpec::Object(b)) => {
            a.cloud == b.cloud
                && a.bucket == b.bucket
                && a.endpoint == b.endpoint
                && (a.key_prefix.is_empty()
                    || b.key_prefix == a.key_prefix
                    || b.key_prefix.starts_with(&format!("{}/", a.key_prefix)))
        }
        // One target (by its --shell name), one directory or one below it.
        (
            BackendSpec::Shell {
                name: a, dir: x, ..
            },
            BackendSpec::Shell {
                name: b, dir: y, ..
            },
        ) => {
            let x = x.trim_end_matches('/');
            a == b && (y == x || y.starts_with(&format!("{x}/")) || x.is_empty())
        }
        _ => false,
    }
}

/// A shell side's target, opened with `/` as its directory: where its directory is
/// ([`ShellBackend::place_of`]) and, for `--to`, making it. Nothing starts before its first call.
fn target_root(spec: &BackendSpec) -> Option<ShellBackend> {
    match spec {
        BackendSpec::Shell { name, command, .. } if !command.is_empty() => {
            Some(ShellBackend::new(name, command.clone(), "/"))
        }
        _ => None,
    }
}

/// Whether, a shell mount being on at least one side, the destination is, or lies inside, the
/// source: the two sides tell where their directories are (machine, devices and inodes, see
/// `inside`), so two commands reaching one machine, or a disk mount and a shell on this
/// machine, are compared as one machine's directories. Each side is `(spec, its target opened
/// at /, the SPEC as given)`.
async fn shell_destination_inside_source(
    (from, from_root, from_text): (&BackendSpec, Option<&ShellBackend>, &str),
    (to, to_root, to_text): (&BackendSpec, Option<&ShellBackend>, &str),
) -> Result<bool, CopyError> {
    if from_root.is_none() && to_root.is_none() {
        return Ok(false);
    }
    fn failed(side: Side, spec: &str) -> impl Fn(String) -> CopyError + '_ {
        move |reason| CopyError::Open {
            side,
            spec: spec.to_owned(),
            reason,
        }
    }
    let Some(source) = place_of(from, from_root)
        .await
        .map_err(failed(Side::From, from_text))?
    else {
        return Ok(false);
    };
    let Some(destination) = place_of(to, to_root)
        .await
        .map_err(failed(Side::To, to_text))?
    else {
        return Ok(false);
    };
    Ok(inside::inside(&source, &destination))
}

/// Where the directory of a disk or shell tree is (`None` for other kinds).
async fn place_of(
    spec: &BackendSpec,
    root: Option<&ShellBackend>,
) -> Result<Option<DirPlace>, String> {
    match (spec, root) {
        (BackendSpec::Disk { dir, .. }, _) => Ok(inside::disk_place(dir)),
        (BackendSpec::Shell { dir, .. }, Some(root)) => root.place_of(dir).await.map(Some),
        _ => Ok(None),
    }
}

/// `path` made absolute with its longest existing ancestor's symbolic links resolved (the rest,
/// which does not exist yet, kept as written).
fn resolved(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    let mut tail = Vec::new();
    let mut at = absolute.as_path();
    loop {
        if let Ok(real) = at.canonicalize() {
            return tail.iter().rev().fold(real, |path, name| path.join(name));
        }
        match (at.parent(), at.file_name()) {
            (Some(parent), Some(name)) => {
                tail.push(name.to_owned());
                at = parent;
            }
            _ => return absolute,
        }
    }
}

/// Opens one tree as a server opens a mount at `/`, and gives its view (a fresh session's).
/// A destination directory that does not exist yet is created first, with its parents: on
/// disk here, on a shell target by the target (`root`, the target opened at `/`).
async fn open_tree(
    spec: MountSpec,
    text: &str,
    side: Side,
    root: Option<&ShellBackend>,
) -> Result<Box<dyn Backend>, CopyError> {
    let failed = |reason: String| CopyError::Open {
        side,
        spec: text.to_owned(),
        reason,
    };
    if let (BackendSpec::Disk { dir, .. }, Side::To) = (&spec.backend, side)
        && !dir.is_dir()
    {
        std::fs::create_dir_all(dir).map_err(|error| {
            failed(format!(
                "cannot create the directory {}: {error}. Create it yourself, or choose a writable place",
                dir.display()
            ))
        })?;
    }
    if let (BackendSpec::Shell { name, dir, .. }, Side::To, Some(root)) =
        (&spec.backend, side, root)
    {
        root.make_dir_all(dir).await.map_err(|error| {
            failed(format!(
                "cannot create the directory {dir} on the target of shell '{name}': {error}. Create it yourself, or choose a writable place"
            ))
        })?;
    }
    let table = MountTable::open(vec![spec])
        .await
        .map_err(|error| failed(error.reason))?;
    Ok(Box::new(table.session_backend()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(text: &str) -> BackendSpec {
        parse_spec(text, Side::From).unwrap().backend
    }

    #[test]
    fn a_destination_inside_the_source_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        std::fs::create_dir(&a).unwrap();
        let a_text = a.display().to_string();
        assert!(destination_inside_source(
            &spec(&format!("disk:{a_text}")),
            &spec(&format!("disk:{a_text}/new/backup"))
        ));
        assert!(destination_inside_source(
            &spec(&format!("disk:{a_text}")),
            &spec(&format!("disk:{a_text}/."))
        ));
        assert!(!destination_inside_source(
            &spec(&format!("disk:{a_text}/sub")),
            &spec(&format!("disk:{a_text}"))
        ));
        assert!(!destination_inside_source(
            &spec(&format!("disk:{a_text}")),
            &spec(&format!("disk:{a_text}b"))
        ));
        assert!(destination_inside_source(
            &spec("store:sqlite:/tmp/x.db,namespace=n"),
            &spec("store:sqlite:/tmp/./x.db,namespace=n")
        ));
        assert!(!destination_inside_source(
            &spec("store:sqlite:/tmp/x.db,namespace=n"),
            &spec("store:sqlite:/tmp/x.db,namespace=m")
        ));
        assert!(destination_inside_source(
            &spec("store:postgres:postgres://h/db"),
            &spec("store:postgres:postgres://h/db")
        ));
    }

    #[test]
    fn memory_overlay_and_read_only_destinations_are_refused() {
        for (text, side, words) in [
            ("memory", Side::From, "a memory mount lives and dies"),
            ("memory", Side::To, "a memory mount lives and dies"),
            ("disk:/tmp,overlay", Side::To, "drop ,overlay"),
            ("disk:/tmp,ro", Side::To, "Drop ,ro"),
            (
                "store:sqlite:/nonexistent/x.db",
                Side::From,
                "does not exist",
            ),
        ] {
            let parsed = parse_spec(text, side).unwrap();
            let error = judge(&parsed, text, side).unwrap_err();
            assert!(!error.is_usage());
            let message = error.to_string();
            assert!(
                message.starts_with(&format!("{side} {text}: ")),
                "{message}"
            );
            assert!(message.contains(words), "{message}");
        }
        let ro = parse_spec("disk:/tmp,ro", Side::From).unwrap();
        assert!(judge(&ro, "disk:/tmp,ro", Side::From).is_ok());
    }

    #[test]
    fn a_bad_spec_names_the_flag_and_shows_the_grammar() {
        let message = parse_spec("floppy:/x", Side::To).unwrap_err().to_string();
        assert!(
            message.starts_with("invalid --to 'floppy:/x': unknown backend 'floppy:/x'"),
            "{message}"
        );
        assert!(message.contains("mount grammar:"), "{message}");
        assert!(parse_spec("floppy:/x", Side::To).unwrap_err().is_usage());
    }
}
