//! The `Backend` trait: what every store of files (memory, disk, SQL store, object store, shell
//! target, overlay, and the composite router over them) must do, with the rules each method obeys.
//!
//! The trait is a small core (after arrow-rs `object_store`) that every store answers:
//! stat / ls / read / read_at_most / read_range / read_window / write / delete / glob / grep.
//! Every read returns the file's [`Version`]; every write takes a [`WriteMode`] (create-only,
//! overwrite, or update-if-version). Read-before-edit, staleness and "no lost update" are built
//! once on top of that in `tools/`, not once per backend.
//!
//! What only some stores can do is a capability trait (in [`capability`]) that `Backend`
//! requires as a supertrait, so a `dyn Backend` still offers every method: [`KeepAside`]
//! (content kept aside for undo, change journals), [`Rename`] (in place), [`Posix`] (modes,
//! links), [`HostDir`] (where `execute` runs) and [`Uploads`] (streamed writes, digests). Each
//! default method gives the answer of a store without the capability ("nothing kept aside", "no
//! rename in place", "no modes", ...), written once; a backend without one writes an empty
//! `impl Posix for MemoryBackend {}`, and one that has it implements it.
//!
//! Paths given to a backend are in its own coordinates (a mount's root is `/`); the
//! [`composite`] router strips and restores mount prefixes, including in errors.
//! The shared conformance suite in `tests/conformance` enforces these rules on every backend.
//!
//! A wrapper that forwards to other backends (the [`composite`] router, an overlay, the
//! tests' forwarding double) states what each method does, defaults included: each of its
//! impls, core and capabilities alike, carries `#[deny(clippy::missing_trait_methods)]`, so
//! that a method added later cannot be silently inherited as "nothing here". Backends that
//! hold files whole answer windows and bounded reads with [`FileBytes::into_view`] and
//! [`FileBytes::at_most`]. Tools see the file system through [`Router`], never the concrete
//! [`CompositeBackend`].

pub mod capability;
pub mod composite;
pub mod disk;
mod grep_results;
mod ignore_rules;
mod key_shape;
pub mod memory;
pub mod object;
pub mod overlay;
pub mod shell;
pub mod store;
mod whole_file;

use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

use async_trait::async_trait;
use sha2::{Digest, Sha256};
use thiserror::Error;

use crate::ground::path::{PathError, VirtualPath};
use crate::ground::text::encoding::FileEncoding;

pub use capability::{HostDir, KeepAside, Posix, Rename, Uploads};
pub use composite::{CompositeBackend, Mount, SkippedMount};
pub use disk::{DiskBackend, DiskOptions};
pub use grep_results::{
    GREP_KEPT_LINE_CHARS, GrepFile, GrepLine, GrepResults, WindowedLines, kept_line_text,
    trim_to_window,
};
pub use memory::MemoryBackend;
pub use object::ObjectBackend;
pub use overlay::OverlayBackend;
pub use shell::{DirPlace, RemoteRun, RemoteStartError, RunEvent, ShellBackend, WindowCounters};
pub use store::StoreBackend;
// The query side of the trait's `glob` and `grep` lives in `search` (issue 16).
pub use crate::ground::search::{
    GlobQuery, GrepCollect, GrepQuery, LineWindowBudget, SearchControl, entry_chars,
};

/// The identity of one file content as a backend stores it: a content hash, or a store's row
/// version. Opaque; equal versions mean "unchanged since".
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Version(String);

impl Version {
    /// The version of a content, as the content-hashing backends compute it.
    pub fn of_content(bytes: &[u8]) -> Self {
        let digest = Sha256::digest(bytes);
        Self(hex::encode(&digest[..16]))
    }

    /// Wraps a backend-specific version text (a store's row version, say).
    pub fn from_raw(raw: impl Into<String>) -> Self {
        Self(raw.into())
    }

    /// The text form, as shown in `file_info` and structured results.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Version({})", self.0)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The condition a write is made under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteMode {
    /// Fail with [`Error::AlreadyExists`] if the file exists.
    CreateOnly,
    /// Create or replace unconditionally.
    Overwrite,
    /// Replace only if the file currently has this version, else [`Error::VersionMismatch`]
    /// (also when it no longer exists).
    IfVersion(Version),
}

/// Whether an entry is a file or a directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory (implicit or real).
    Directory,
}

/// One file or directory as `stat`, `ls` and `glob` report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its path, in the answering backend's coordinates.
    pub path: VirtualPath,
    /// File or directory.
    pub kind: EntryKind,
    /// Size in bytes (0 for directories).
    pub size: u64,
    /// Last modification, when known.
    pub modified: Option<SystemTime>,
    /// Creation, when known.
    pub created: Option<SystemTime>,
}

impl Entry {
    /// A directory entry with no metadata (implicit directories, mount points).
    pub fn directory(path: VirtualPath) -> Self {
        Self {
            path,
            kind: EntryKind::Directory,
            size: 0,
            modified: None,
            created: None,
        }
    }

    /// Whether this is a directory.
    pub fn is_dir(&self) -> bool {
        self.kind == EntryKind::Directory
    }
}

/// A whole file: its bytes and the version they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileBytes {
    /// The content.
    pub content: Vec<u8>,
    /// Its version.
    pub version: Version,
    /// Creation time, when known.
    pub created: Option<SystemTime>,
    /// Modification time, when known.
    pub modified: Option<SystemTime>,
}

impl FileBytes {
    /// The window of lines of this whole content (the view every backend gives; see
    /// [`Backend::read_window`]), for backends that hold files whole.
    pub fn into_view(self, window: LineWindow) -> FileView {
        whole_file::view_of_bytes(&self.content, self.version, window).with_modified(self.modified)
    }

    /// This content as [`Backend::read_at_most`] answers for it: whole if it has at most
    /// `max_bytes` bytes, else only its size and version.
    pub fn at_most(self, max_bytes: u64) -> BoundedRead {
        let size = self.content.len() as u64;
        if size > max_bytes {
            return BoundedRead::TooLarge {
                size,
                version: self.version,
            };
        }
        BoundedRead::Whole(self)
    }
}

/// What [`Backend::read_at_most`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BoundedRead {
    /// The whole file: it has at most the bound's bytes.
    Whole(FileBytes),
    /// A file over the bound, left unread: only its size and version.
    TooLarge {
        /// The file's size in bytes.
        size: u64,
        /// Its version (the same a whole read would give).
        version: Version,
    },
}

/// A file being written piece by piece (see [`Uploads::begin_upload`]): the chunks go to a
/// place no reader sees (a temporary file beside the destination, rows staged in the database),
/// and [`Upload::finish`] puts the whole content at the path at once, under the upload's
/// [`WriteMode`], as [`Backend::write`] would have; [`Upload::abort`] (or a failure of any
/// step) leaves nothing behind at the path. Memory does not grow with the file: each chunk is
/// let go once appended.
#[async_trait]
pub trait Upload: Send + fmt::Debug {
    /// Appends `chunk` to what is staged (length-checked where the storage is remote).
    async fn append(&mut self, chunk: &[u8]) -> Result<()>;

    /// Puts the staged content at the path at once, under the upload's mode (checked now, not
    /// when the upload began): `AlreadyExists`, `VersionMismatch`, `IsADirectory` and
    /// `NotADirectory` as [`Backend::write`]. On any failure the path is left as it was and
    /// what was staged is removed.
    async fn finish(self: Box<Self>) -> Result<WriteOutcome>;

    /// Removes what was staged; the path is left as it was. Best effort: a failure to clean up
    /// is only logged (what is left is hidden, and swept where the backend sweeps).
    async fn abort(self: Box<Self>);
}

/// Tracks whether bytes appended piece by piece are valid UTF-8, a sequence cut between two
/// chunks included (the stores keep an item's encoding).
#[derive(Debug, Clone, Default)]
pub struct Utf8Tracker {
    /// The bytes of a character cut at the end of the last chunk (at most 3).
    pending: Vec<u8>,
    /// A byte sequence seen so far is not UTF-8.
    invalid: bool,
}

impl Utf8Tracker {
    /// Takes in the next chunk.
    pub fn push(&mut self, chunk: &[u8]) {
        if self.invalid {
            return;
        }
        let mut rest = chunk;
        // Complete the character cut at the end of the last chunk, one byte at a time.
        while !self.pending.is_empty() {
            let Some((first, tail)) = rest.split_first() else {
                return;
            };
            self.pending.push(*first);
            rest = tail;
            match std::str::from_utf8(&self.pending) {
                Ok(_) => self.pending.clear(),
                Err(error) if error.error_len().is_some() || self.pending.len() >= 4 => {
                    self.invalid = true;
                    return;
                }
                Err(_) => {}
            }
        }
        match std::str::from_utf8(rest) {
            Ok(_) => {}
            Err(error) if error.error_len().is_none() => {
                self.pending = rest[error.valid_up_to()..].to_vec();
            }
            Err(_) => self.invalid = true,
        }
    }

    /// Whether everything pushed is valid UTF-8 (a character left cut at the end is not).
    pub fn is_utf8(&self) -> bool {
        !self.invalid && self.pending.is_empty()
    }
}

/// The version [`Version::of_content`] gives, computed over chunks as they pass (for backends
/// whose small files are versioned by their content hash).
#[derive(Debug, Clone, Default)]
pub struct ContentHasher {
    digest: Sha256,
    bytes: u64,
}

impl ContentHasher {
    /// Takes in the next chunk.
    pub fn push(&mut self, chunk: &[u8]) {
        self.digest.update(chunk);
        self.bytes += chunk.len() as u64;
    }

    /// How many bytes were pushed.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The version of everything pushed.
    pub fn version(self) -> Version {
        let digest = self.digest.finalize();
        Version(hex::encode(&digest[..16]))
    }
}

/// A file's earlier content kept by its backend outside memory (on disk: renamed or linked into
/// a private directory beneath the mount root), so that a change to a file too large to keep
/// in memory can still be undone. Dropping the last handle discards the kept content.
#[async_trait]
pub trait AsideContent: Send + Sync + fmt::Debug {
    /// Size of the kept content in bytes.
    fn size(&self) -> u64;

    /// Puts the content back at the path it was taken from: only if nothing is there when
    /// `replacing` is `None` ([`Error::AlreadyExists`] otherwise), else only over a file that
    /// has that version ([`Error::VersionMismatch`] otherwise). Returns the restored file's
    /// version. The kept content is used up.
    async fn restore(&self, replacing: Option<&Version>) -> Result<WriteOutcome>;
}

/// A shared handle to [`AsideContent`]; equal when it is the same kept content.
#[derive(Debug, Clone)]
pub struct AsideFile(pub Arc<dyn AsideContent>);

impl PartialEq for AsideFile {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for AsideFile {}

/// One file of a multi-file change, as [`KeepAside::begin_changes`] is told it before anything
/// changes: its path and the version it must have now (`None`: it must be absent, the change
/// creates it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedFile {
    /// The file, in the backend's coordinates.
    pub path: VirtualPath,
    /// Its version now; `None`: absent.
    pub before: Option<Version>,
}

/// Where one mount's journal stands in a change over several mounts (an overlay commit over
/// several overlay mounts): all or nothing across them hangs on one decision, the `committed`
/// mark of the primary's journal (see `disk::journal`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JournalRole {
    /// The only mount the change touches: its own journal decides.
    Alone,
    /// One of several: the decision of the change `change`, kept in the server's data
    /// directory (see `disk::trust`), decides.
    Secondary {
        /// The change's id ([`disk::journal::change_id`]).
        change: String,
    },
    /// The deciding journal of the change `change`: it records the decision, and drops it
    /// when it goes, after the secondaries.
    Primary {
        /// The change's id.
        change: String,
    },
}

/// A multi-file change in progress on one mount, kept whole across a crash (see
/// [`KeepAside::begin_changes`]). Each file of the plan is changed through it, by its index in
/// the plan; then it is [`ChangeJournal::finish`]ed (the change stands), or rolled back.
#[async_trait]
pub trait ChangeJournal: Send + Sync + fmt::Debug {
    /// The journal's directory on the host (what a [`JournalRole::Secondary`] names).
    fn location(&self) -> std::path::PathBuf;

    /// Applies the whole plan at once where the backend makes it one transaction (a store: one
    /// database transaction, nothing to roll back after a crash): each planned file's new
    /// content (`None`: removed) in plan order, and the version it was left with; on a failure
    /// the index of the file and why, nothing changed. `None`: this journal changes the files
    /// one by one ([`ChangeJournal::write`], [`ChangeJournal::delete`]).
    async fn apply_at_once(
        &self,
        changes: &[(Option<&[u8]>, Option<Version>)],
    ) -> Option<std::result::Result<Vec<Option<Version>>, (usize, Error)>>;

    /// Writes the planned file `index` under `mode`, as [`Backend::write`].
    async fn write(&self, index: usize, content: &[u8], mode: WriteMode) -> Result<WriteOutcome>;

    /// Removes the planned file `index` if it has `version`, as [`Backend::delete`].
    async fn delete(&self, index: usize, version: &Version) -> Result<()>;

    /// Removes the directory at `path` whole (a commit of a directory deleted whole), keeping
    /// it so that a roll-back — in this process or at the next start — puts it back as it was:
    /// every file below it (those a listing skips too), empty directories, modes. `Ok(false)`:
    /// this journal cannot keep it (none here, or another file system): nothing was done, and
    /// the caller removes it as any delete does.
    async fn remove_dir(&self, path: &VirtualPath) -> Result<bool> {
        let _ = path;
        Ok(false)
    }

    /// Records that the whole change stands (a primary's decision): from here on a crash rolls
    /// it forward, not back.
    async fn mark_committed(&self) -> Result<()>;

    /// Removes the journal: the change stands (or was rolled back). Last step of a change.
    async fn finish(&self) -> Result<()>;

    /// Puts back the planned files changed so far (`applied`: index and the version each was
    /// left with, `None` removed), each only if it is still what the change left, then removes
    /// the journal. Returns the files that could not be put back, with why.
    async fn roll_back(&self, applied: &[(usize, Option<Version>)]) -> Vec<(usize, Error)>;
}

/// Which source lines of a text file a read wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineWindow {
    /// Lines to skip.
    pub offset: usize,
    /// Lines to return at most.
    pub limit: usize,
}

/// What a windowed read found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileView {
    /// A text file: the requested lines.
    Text(TextWindow),
    /// A binary file: its size and first bytes, never the whole content.
    Binary(BinarySample),
}

impl FileView {
    /// The view with its file's modification time set.
    pub fn with_modified(mut self, modified: Option<SystemTime>) -> Self {
        match &mut self {
            Self::Text(text) => text.modified = modified,
            Self::Binary(sample) => sample.modified = modified,
        }
        self
    }

    /// The file's size and modification time, whatever the view.
    pub fn file_facts(&self) -> (u64, Option<SystemTime>) {
        match self {
            Self::Text(text) => (text.size, text.modified),
            Self::Binary(sample) => (sample.size, sample.modified),
        }
    }
}

/// Lines of a text file, decoded from its own encoding (`text::encoding`; UTF-8 with U+FFFD
/// when it is valid in none), CRLF shown as LF.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextWindow {
    /// Last modification, when the backend knows it.
    pub modified: Option<SystemTime>,
    /// The lines of the window, without line terminators.
    pub lines: Vec<String>,
    /// Total number of lines when the backend knows it cheaply.
    pub total_lines: Option<usize>,
    /// Whether lines remain after the window.
    pub has_more: bool,
    /// Whether bytes valid in no encoding found were replaced by U+FFFD (such a file is shown,
    /// never edited).
    pub lossy: bool,
    /// The file's encoding (UTF-8 when `lossy`, or for a big file streamed as UTF-8).
    pub encoding: FileEncoding,
    /// The file's size in bytes.
    pub size: u64,
    /// The version of the whole file.
    pub version: Version,
}

/// The head of a binary file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BinarySample {
    /// Last modification, when the backend knows it.
    pub modified: Option<SystemTime>,
    /// The file's size in bytes.
    pub size: u64,
    /// Up to [`crate::ground::content::SNIFF_BYTES`] leading bytes.
    pub head: Vec<u8>,
    /// The version of the whole file.
    pub version: Version,
}

/// What a successful write did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteOutcome {
    /// The new version.
    pub version: Version,
    /// Whether the file did not exist before.
    pub created: bool,
}

/// How to delete.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeleteOptions {
    /// Allow deleting a non-empty directory with everything under it.
    pub recursive: bool,
    /// Delete a file only if it has this version.
    pub if_version: Option<Version>,
}

impl DeleteOptions {
    /// Delete one file, only if it still has `version` (the conditional delete the edit tools
    /// use, like [`WriteMode::IfVersion`] for writes).
    pub fn file_if_version(version: Version) -> Self {
        Self {
            recursive: false,
            if_version: Some(version),
        }
    }
}

/// The conditions of a [`Rename::rename`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RenameOptions {
    /// Rename a file only if it has this version (else [`Error::VersionMismatch`]).
    pub if_version: Option<Version>,
    /// Replace the destination file, which must have this version (else
    /// [`Error::VersionMismatch`]); `None`: the destination must not exist (else
    /// [`Error::AlreadyExists`]). A directory never replaces anything.
    pub replacing: Option<Version>,
}

/// What a successful [`Rename::rename`] moved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Renamed {
    /// A file or a whole directory.
    pub kind: EntryKind,
    /// A file's version at its new path (the same content; a backend whose versions are
    /// identities may give a new one). `None` for a directory: the versions of the files in it
    /// are unchanged.
    pub version: Option<Version>,
}

/// Whether `path` has a component that is one of mountfs's own names (`.mountfs-tmp*`, see
/// [`crate::ground::path::RESERVED_PREFIX`]). No tool gives such a path ([`VirtualPath::parse`]
/// refuses it), but a store written by another program, an object made by another client or
/// a file made on the disk or the target holds whatever names they chose: listings leave them
/// out, and every backend refuses them (attack review of issue 41).
pub fn is_reserved_path(path: &VirtualPath) -> bool {
    path.components().any(crate::ground::path::is_reserved_name)
}

/// Refuses a path with a reserved component in any place (see [`is_reserved_path`]).
pub fn refuse_reserved(path: &VirtualPath) -> Result<()> {
    if is_reserved_path(path) {
        return Err(Error::Unsupported {
            path: path.clone(),
            reason: format!(
                "names starting with {} are reserved for mountfs's own temporary files; choose another name",
                crate::ground::path::RESERVED_PREFIX
            ),
        });
    }
    Ok(())
}

/// Why a backend call failed. The Display text is what the agent reads: it names the
/// (virtual) path and says what to do next. Never a host path.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Error {
    /// No such file or directory.
    #[error("Error: File not found: {path}. Check the path with ls or glob")]
    NotFound {
        /// The path.
        path: VirtualPath,
    },
    /// A directory where a file was needed.
    #[error("Error: {path} is a directory, not a file. Use ls to list it")]
    IsADirectory {
        /// The path.
        path: VirtualPath,
    },
    /// A file where a directory was needed (also: a parent of a new file is a file).
    #[error("Error: {path} is a file, not a directory")]
    NotADirectory {
        /// The path.
        path: VirtualPath,
    },
    /// A create-only write found the file.
    #[error("Error: File already exists: {path}. Read it first, then overwrite or edit it")]
    AlreadyExists {
        /// The path.
        path: VirtualPath,
    },
    /// A conditional write or delete found another version.
    #[error("Error: File has been modified since it was read: {path}. Read it again, then retry")]
    VersionMismatch {
        /// The path.
        path: VirtualPath,
    },
    /// A non-recursive delete of a non-empty directory.
    #[error(
        "Error: Directory not empty: {path}. Pass recursive=true to delete it with its contents"
    )]
    DirectoryNotEmpty {
        /// The path.
        path: VirtualPath,
    },
    /// A write under a read-only mount.
    #[error("Error: {path} is on a read-only mount; it cannot be changed")]
    ReadOnly {
        /// The path.
        path: VirtualPath,
    },
    /// A change under a mount the principal's grant makes read-only (issue 43).
    #[error(
        "Error: {path} cannot be changed: your grant {grant} is read-only. Read it freely; ask the server's operator for a :rw grant to change it"
    )]
    GrantReadOnly {
        /// The path.
        path: VirtualPath,
        /// The grant, as written (`bob=/docs/:ro`).
        grant: String,
    },
    /// Deleting, moving or overwriting a mount root (or a directory holding one).
    #[error(
        "Error: {path} is (or contains) a mount point; mount roots cannot be deleted, moved or overwritten"
    )]
    MountRoot {
        /// The path.
        path: VirtualPath,
    },
    /// A path that resolves outside its mount (disk symlinks).
    #[error("Error: {path} resolves outside the mount; it cannot be used")]
    OutsideMount {
        /// The path.
        path: VirtualPath,
    },
    /// Something at the path that this backend refuses to touch (FIFO, device, hard link…).
    #[error("Error: {path}: {reason}")]
    Unsupported {
        /// The path.
        path: VirtualPath,
        /// What and why.
        reason: String,
    },
    /// The storage behind the mount cannot be reached.
    #[error("Error: mount unavailable: {message}. Other mounts still work; retry later")]
    Unavailable {
        /// What failed.
        message: String,
    },
    /// Any other I/O failure.
    #[error("Error: I/O error on {path}: {message}")]
    Io {
        /// The path.
        path: VirtualPath,
        /// What failed (no host paths).
        message: String,
    },
    /// A change that would pass the workspace's memory quota or the server's memory budget
    /// (issue 34): refused before anything changed.
    #[error(
        "Error: Not enough memory to write {path} (mount {}): {refused}",
        crate::ground::config::display_prefix(.mount)
    )]
    MemoryFull {
        /// The path being written.
        path: VirtualPath,
        /// The mount holding it in memory (`/` in the backend's own coordinates).
        mount: VirtualPath,
        /// Which limit, what is used, what was needed.
        refused: crate::ground::quota::MemoryRefused,
    },
    /// A name that is not a valid virtual path component.
    #[error("{0}")]
    InvalidPath(#[from] PathError),
}

impl Error {
    /// Rewrites the path this error names (the composite puts mount prefixes back).
    pub fn map_path(self, f: impl Fn(&VirtualPath) -> VirtualPath) -> Self {
        match self {
            Self::NotFound { path } => Self::NotFound { path: f(&path) },
            Self::IsADirectory { path } => Self::IsADirectory { path: f(&path) },
            Self::NotADirectory { path } => Self::NotADirectory { path: f(&path) },
            Self::AlreadyExists { path } => Self::AlreadyExists { path: f(&path) },
            Self::VersionMismatch { path } => Self::VersionMismatch { path: f(&path) },
            Self::DirectoryNotEmpty { path } => Self::DirectoryNotEmpty { path: f(&path) },
            Self::ReadOnly { path } => Self::ReadOnly { path: f(&path) },
            Self::GrantReadOnly { path, grant } => Self::GrantReadOnly {
                path: f(&path),
                grant,
            },
            Self::MountRoot { path } => Self::MountRoot { path: f(&path) },
            Self::OutsideMount { path } => Self::OutsideMount { path: f(&path) },
            Self::Unsupported { path, reason } => Self::Unsupported {
                path: f(&path),
                reason,
            },
            Self::Io { path, message } => Self::Io {
                path: f(&path),
                message,
            },
            Self::MemoryFull {
                path,
                mount,
                refused,
            } => Self::MemoryFull {
                path: f(&path),
                mount: f(&mount),
                refused,
            },
            other @ (Self::Unavailable { .. } | Self::InvalidPath(_)) => other,
        }
    }
}

/// Result of backend calls.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A store of files addressed by [`VirtualPath`]: the core every store answers, and (as
/// supertraits, each with the answers of a store without it as defaults) the capabilities. See
/// the module doc for the shared rules.
#[async_trait]
pub trait Backend:
    KeepAside + Rename + Posix + HostDir + Uploads + Send + Sync + fmt::Debug
{
    /// The entry at `path`, `None` if nothing is there. The root `/` is always a directory.
    async fn stat(&self, path: &VirtualPath) -> Result<Option<Entry>>;

    /// The entries directly in `dir`, in any order (the tools sort). Subdirectories appear once
    /// each as [`EntryKind::Directory`]. `NotFound` if `dir` does not exist (the root always
    /// exists, even empty); `NotADirectory` if it is a file.
    async fn ls(&self, dir: &VirtualPath) -> Result<Vec<Entry>>;

    /// The whole file. `NotFound`, or `IsADirectory`.
    async fn read(&self, path: &VirtualPath) -> Result<FileBytes>;

    /// The whole file if it has at most `max_bytes` bytes, else only its size and version:
    /// memory never grows with the file beyond `max_bytes` (plus, on disk, the 8 MiB a
    /// content-hash version reads). `NotFound`, or `IsADirectory`, as [`Backend::read`]. A
    /// backend that holds files whole can answer with [`FileBytes::at_most`].
    async fn read_at_most(&self, path: &VirtualPath, max_bytes: u64) -> Result<BoundedRead>;

    /// At most `len` bytes of the file from byte `offset` on (fewer at its end, none past it),
    /// only while the file has `version` (else [`Error::VersionMismatch`]): a file changed
    /// between two ranges is never read torn. Memory follows `len`, not the file (a disk or
    /// shell file small enough to be versioned by its content hash, at most 8 MiB, is hashed
    /// whole to check it). `NotFound` (also when it is gone since the version was taken), or
    /// `IsADirectory`, as [`Backend::read`].
    async fn read_range(
        &self,
        path: &VirtualPath,
        offset: u64,
        len: usize,
        version: &Version,
    ) -> Result<Vec<u8>>;

    /// A window of lines of a text file, or the head of a binary one. Memory proportional to
    /// the window, not the file, where the backend can (disk); a backend that holds files whole
    /// answers with [`FileBytes::into_view`].
    async fn read_window(&self, path: &VirtualPath, window: LineWindow) -> Result<FileView>;

    /// Writes the whole file under `mode`, creating parent directories. `IsADirectory` if a
    /// directory is there, `NotADirectory` if a parent is a file.
    async fn write(
        &self,
        path: &VirtualPath,
        content: &[u8],
        mode: WriteMode,
    ) -> Result<WriteOutcome>;

    /// Deletes a file, or a directory (non-empty only when `recursive`). `NotFound` if absent.
    async fn delete(&self, path: &VirtualPath, options: &DeleteOptions) -> Result<()>;

    /// Files (never directories) below `query.dir` whose relative path matches, in any order.
    /// A `query.dir` that does not exist gives an empty answer; a file gives itself if it matches
    /// its own name.
    async fn glob(&self, query: &GlobQuery) -> Result<Vec<Entry>>;

    /// Files below `query.dir` (or the file `query.dir` itself) with at least one matching line,
    /// in any order. Binary files are skipped.
    async fn grep(&self, query: &GrepQuery) -> Result<Vec<GrepFile>>;
}

/// The file system a session sees: a [`Backend`] over a table of mounts, that tools also ask
/// which mount owns a path (is it read-only, where is it mounted), whether a path holds a mount
/// root, and for a `glob` that skips a failing mount with a note instead of failing. Tools and
/// sessions hold a `dyn Router`, never the concrete [`CompositeBackend`], so that an overlay or a
/// test double can stand in for it. It has no default methods: a wrapper states what each one
/// does (`#[deny(clippy::missing_trait_methods)]` on its impls, as on its `Backend` ones).
#[async_trait]
pub trait Router: Backend {
    /// The mounts, longest prefix first; the last one is `/`.
    fn mounts(&self) -> &[Mount];

    /// The mount owning `path` and the path in its coordinates.
    fn route(&self, path: &VirtualPath) -> (&Mount, VirtualPath);

    /// Whether `path` is a mount root or an ancestor of one (and so cannot be removed).
    fn holds_mount_root(&self, path: &VirtualPath) -> bool;

    /// Whether a file at `path` may be changed: not on a read-only mount (nor one a grant
    /// makes read-only), not under a mount the grants hide (that one is not found).
    fn check_writable(&self, path: &VirtualPath) -> Result<()>;

    /// The overlay mounts among the mounts (prefix, overlay), for `changes`/`commit`/`discard`.
    fn overlays(&self) -> &[(VirtualPath, Arc<OverlayBackend>)];

    /// [`Backend::glob`] over the owner of `query.dir` and every mount below it, where a mount
    /// below that fails is skipped and returned beside the files found; an error of the owner
    /// fails the call.
    async fn glob_noting(&self, query: &GlobQuery) -> Result<(Vec<Entry>, Vec<SkippedMount>)>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(skip: usize, offset: usize, limit: usize, chars: usize) -> LineWindowBudget {
        LineWindowBudget {
            skip,
            offset,
            limit,
            chars,
        }
    }

    fn collected(budget: LineWindowBudget, n: usize, text: &str) -> WindowedLines {
        let mut lines = WindowedLines::new(budget);
        for i in 0..n {
            lines.push(i + 1, true, || text.to_owned());
        }
        lines
    }

    #[test]
    fn a_file_keeps_what_the_window_can_reach_and_counts_the_rest() {
        let lines = collected(window(0, 3, 2, usize::MAX), 100, "x");
        assert_eq!(lines.entries, 100);
        let numbers: Vec<usize> = lines.lines.iter().map(|l| l.number).collect();
        assert_eq!(numbers, vec![1, 2, 3, 4, 5]);
        // Known to start the search: the lines before the offset are counted only.
        let lines = collected(window(3, 3, 2, usize::MAX), 100, "x");
        let numbers: Vec<usize> = lines.lines.iter().map(|l| l.number).collect();
        assert_eq!(numbers, vec![4, 5]);
        // The character cap ends the window at the entry that crosses it.
        let lines = collected(window(0, 1, usize::MAX, 25), 100, "0123456789");
        assert_eq!(
            lines.lines.len(),
            3,
            "1 before the offset, then 15 + 15 chars"
        );
        assert!(lines.is_full());
    }

    #[test]
    fn utf8_is_tracked_across_chunk_cuts() {
        let text = "añ€😀 z".as_bytes();
        for cut in 0..=text.len() {
            for second in cut..=text.len() {
                let mut tracker = Utf8Tracker::default();
                tracker.push(&text[..cut]);
                tracker.push(&text[cut..second]);
                tracker.push(&text[second..]);
                assert!(tracker.is_utf8(), "cuts at {cut} and {second}");
            }
        }
        let mut cut_short = Utf8Tracker::default();
        cut_short.push(&text[..4]);
        assert!(!cut_short.is_utf8());
        let mut invalid = Utf8Tracker::default();
        invalid.push(&[0xE2, 0x82]);
        invalid.push(b"a");
        invalid.push(b"plain");
        assert!(!invalid.is_utf8());
        let mut hasher = ContentHasher::default();
        hasher.push(&text[..4]);
        hasher.push(&text[4..]);
        assert_eq!(hasher.bytes(), text.len() as u64);
        assert_eq!(hasher.version(), Version::of_content(text));
    }

    #[test]
    fn long_lines_are_kept_cut_one_character_past_what_grep_shows() {
        let long = "é".repeat(5000);
        assert_eq!(kept_line_text(&long).chars().count(), GREP_KEPT_LINE_CHARS);
        assert_eq!(kept_line_text("short"), "short");
    }

    fn file(name: &str, entries: usize, lines_from: usize, kept: usize) -> GrepFile {
        GrepFile {
            path: VirtualPath::parse(name).unwrap(),
            match_count: entries,
            lines: (0..kept)
                .map(|i| GrepLine {
                    number: lines_from + i + 1,
                    text: "x".into(),
                    is_match: true,
                })
                .collect(),
            entries,
            lines_from,
            skipped: None,
        }
    }

    #[test]
    fn trimming_keeps_the_window_in_path_order_across_files() {
        // Entries 0..4 in /a, 4..7 in /b, 7..9 in /c; the window is entries 3..6.
        let mut files = vec![
            file("/a", 4, 0, 4),
            file("/b", 3, 0, 3),
            file("/c", 2, 0, 2),
        ];
        trim_to_window(&mut files, window(0, 3, 3, usize::MAX));
        let kept: Vec<usize> = files.iter().map(|f| f.lines.len()).collect();
        assert_eq!(kept, vec![4, 2, 0]);
        // A file whose backend stopped keeping at the window's end ends the window there.
        let mut files = vec![file("/a", 10, 0, 2), file("/b", 3, 0, 3)];
        trim_to_window(&mut files, window(0, 0, 2, usize::MAX));
        let kept: Vec<usize> = files.iter().map(|f| f.lines.len()).collect();
        assert_eq!(kept, vec![2, 0]);
        // Counted-only files before the window do not end it; kept lines start at lines_from.
        let mut files = vec![
            file("/a", 10, 0, 0),
            file("/b", 6, 2, 2),
            file("/c", 1, 0, 1),
        ];
        trim_to_window(&mut files, window(0, 12, 2, usize::MAX));
        let kept: Vec<usize> = files.iter().map(|f| f.lines.len()).collect();
        assert_eq!(kept, vec![0, 2, 0]);
    }
}
