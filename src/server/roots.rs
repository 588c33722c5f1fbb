//! MCP roots: the client's directories as the session's disk mounts.
//!
//! When the operator gave no `--mount` (the default table) and the client declares the `roots`
//! capability, the server asks `roots/list` once the client is initialized and mounts each root
//! directory as a disk mount in place of the table's disk mount (the working directory): one
//! root at `/`, several at `/<name>/`, the name taken from the root's `name` or its directory's
//! last component, made safe and unique. `notifications/roots/list_changed` mounts the new list.
//! The table's memory and store mounts (`/scratch/`, `/memories/`) stay as they are, contents
//! and all. A client that offers no usable root gets the default table back.
//!
//! Safety, as for the working directory (see `main.rs`): only local `file://` URIs are
//! mounted; a root that is the file-system root or the home directory is refused with a warning
//! on stderr; a table given with `--mount` is never touched ([`RootsFollower::disabled`]).
//! Over HTTP a client's roots name its own machine, not the server's: they are mounted only
//! when the operator gives `--http-roots-under DIR`, and only inside DIR ([`RootsScope`],
//! [`RootsFollower::for_http`]); otherwise the client is told at `initialize` that they are not.
//!
//! Tool calls that arrive while the roots are being fetched and opened wait for them (at most
//! [`SETTLE_WAIT_LIMIT`]), so the first call already sees the client's directories.
//!
//! Change notifications follow the roots: each mounted root directory is registered with the
//! table's [`ChangeHub`] for this session ([`ChangeHub::follow_session`]), so subscribers hear of
//! other programs' changes there (the directories are watched from the first subscription on),
//! and stop hearing of the working directory the roots replaced. When the roots change, the
//! registration is replaced (directories still offered stay watched); when the session ends, it
//! goes.

// Roots are deprecated in MCP 2026-07-28 (SEP-2577), and rmcp marks their types so, but clients
// such as Claude Code still send them: this module is where they are read.
#![allow(deprecated)]

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rmcp::RoleServer;
use rmcp::model::Root;
use rmcp::service::Peer;
use tokio::sync::watch;

use crate::ground::path::VirtualPath;
use crate::observers::changes::{ChangeHub, SessionView, SessionWatch, session_origin_of};
use crate::server::mounts::MountTable;
use crate::state::session::Session;
use crate::storage::backend::MemoryBackend;
use crate::storage::backend::{Backend, CompositeBackend, DiskBackend, DiskOptions, Mount, Router};

/// Told at `initialize` to an HTTP client offering roots when the server mounts none.
pub const ROOTS_REFUSED_OVER_HTTP: &str = "Your client's roots are not mounted: over HTTP they name directories of your machine, not of this server's, and the operator has not allowed client roots (--http-roots-under DIR). The mounts above are what this server serves.";

/// Told at `initialize` to a client whose roots will be mounted, after the mount list.
pub const ROOTS_NOTE: &str = "Your client's roots are mounted as disk mounts in place of the working directory: one root at /, several at /<root name>/ (ls / shows them); they follow roots/list_changed.";

/// How long the server waits for the client's answer to `roots/list`.
pub const ROOTS_ANSWER_LIMIT: Duration = Duration::from_secs(10);

/// How long a tool call waits for the roots to be mounted before it runs on the table as it is.
pub const SETTLE_WAIT_LIMIT: Duration = ROOTS_ANSWER_LIMIT.saturating_add(Duration::from_secs(5));

/// Longest mount name made from a root, in bytes.
pub const MAX_MOUNT_NAME_BYTES: usize = 64;

/// At most this many roots are mounted; the rest of a longer list are left out with a warning
/// (each root is a disk mount with its own open directory).
pub const MAX_ROOTS: usize = 64;

/// Why one root was not mounted (the others still are).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RootError {
    /// Not a `file:` URI.
    #[error("root {uri:?} is not a file:// URI; only local directories can be mounted")]
    NotFile {
        /// The URI as the client sent it.
        uri: String,
    },
    /// A `file://` URI naming another host.
    #[error(
        "root {uri:?} names the host {host:?}; only local file:// URIs (no host, or localhost) can be mounted"
    )]
    RemoteHost {
        /// The URI as the client sent it.
        uri: String,
        /// The host it names.
        host: String,
    },
    /// The URI's path is unusable.
    #[error("root {uri:?} is not a usable directory path: {reason}")]
    BadPath {
        /// The URI as the client sent it.
        uri: String,
        /// Why.
        reason: &'static str,
    },
    /// The file-system root or the home directory.
    #[error(
        "root {dir} is {what}, which is not mounted: it would hand the agent every file there. Offer the project's directory as the root, or start mountfs with --mount /=disk:DIR"
    )]
    Unsafe {
        /// The directory, resolved.
        dir: String,
        /// "the file-system root", "the home directory" or one holding it.
        what: &'static str,
    },
    /// Over HTTP: a directory outside `--http-roots-under`.
    #[error(
        "root {dir} is not mounted: this HTTP server mounts only client roots inside {under} (--http-roots-under). A remote client's roots name directories of its own machine, not of the server's; offer a directory under {under}, or ask the operator to mount it with --mount"
    )]
    OutsideAllowed {
        /// The directory, resolved.
        dir: String,
        /// The directory roots must be inside.
        under: String,
    },
    /// The directory cannot be opened.
    #[error("root {dir} cannot be mounted: {reason}")]
    Open {
        /// The directory as given.
        dir: String,
        /// Why.
        reason: String,
    },
}

/// The local path a `file:` URI names: `file:///a/b%20c` is `/a/b c` (percent-escapes decoded
/// to bytes, so non-UTF-8 names survive). Other schemes, other hosts, queries, fragments, NUL
/// bytes and relative paths are refused.
pub fn path_of_file_uri(uri: &str) -> Result<PathBuf, RootError> {
    let bad = |reason| RootError::BadPath {
        uri: uri.to_owned(),
        reason,
    };
    let scheme_ok = uri
        .get(..5)
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("file:"));
    if !scheme_ok {
        return Err(RootError::NotFile {
            uri: uri.to_owned(),
        });
    }
    let rest = &uri[5..];
    let path = match rest.strip_prefix("//") {
        Some(after) => {
            let end = after.find('/').unwrap_or(after.len());
            let host = &after[..end];
            if !host.is_empty() && !host.eq_ignore_ascii_case("localhost") {
                return Err(RootError::RemoteHost {
                    uri: uri.to_owned(),
                    host: host.to_owned(),
                });
            }
            &after[end..]
        }
        None => rest,
    };
    if path.contains(['?', '#']) {
        return Err(bad("it has a query or fragment"));
    }
    if !path.starts_with('/') {
        return Err(bad("the path is not absolute"));
    }
    let bytes: Vec<u8> = percent_encoding::percent_decode_str(path).collect();
    if bytes.contains(&0) {
        return Err(bad("the path holds a NUL byte"));
    }
    Ok(path_from_bytes(bytes))
}

#[cfg(unix)]
fn path_from_bytes(bytes: Vec<u8>) -> PathBuf {
    use std::os::unix::ffi::OsStringExt;
    PathBuf::from(std::ffi::OsString::from_vec(bytes))
}

#[cfg(not(unix))]
fn path_from_bytes(bytes: Vec<u8>) -> PathBuf {
    PathBuf::from(String::from_utf8_lossy(&bytes).into_owned())
}

/// `path` resolved (symbolic links followed), when it is a directory that may be mounted: not
/// the file-system root, not `home` nor a directory holding it.
pub fn safe_directory(path: &Path, home: Option<&Path>) -> Result<PathBuf, RootError> {
    let open_error = |reason: String| RootError::Open {
        dir: path.display().to_string(),
        reason,
    };
    let dir = std::fs::canonicalize(path).map_err(|e| open_error(e.to_string()))?;
    if !dir.is_dir() {
        return Err(open_error("not a directory".to_owned()));
    }
    let what = if dir.parent().is_none() {
        "the file-system root"
    } else if home.is_some_and(|home| home == dir) {
        "the home directory"
    } else if home.is_some_and(|home| home.starts_with(&dir)) {
        "a directory holding the home directory"
    } else {
        return Ok(dir);
    };
    Err(RootError::Unsafe {
        dir: dir.display().to_string(),
        what,
    })
}

/// A mount name made from `label` (a root's name or its directory's last component): letters,
/// digits, `-`, `_` and `.`, every other run of characters one `-`, no leading or trailing `-`
/// or `.`, at most [`MAX_MOUNT_NAME_BYTES`]; `root` when nothing is left.
pub fn mount_name(label: &str) -> String {
    let mut name = String::new();
    for c in label.chars() {
        let keep = c.is_alphanumeric() || matches!(c, '-' | '_' | '.');
        let next = if keep { c } else { '-' };
        if next == '-' && name.ends_with('-') {
            continue;
        }
        if name.len() + next.len_utf8() > MAX_MOUNT_NAME_BYTES {
            break;
        }
        name.push(next);
    }
    let name = name.trim_matches(['-', '.']);
    if name.is_empty() {
        "root".to_owned()
    } else {
        name.to_owned()
    }
}

/// `name`, or `name-2`, `name-3`, … when it is taken (compared without case, so two mounts
/// never differ only in case); records the one returned as taken.
fn unique_name(name: String, taken: &mut HashSet<String>) -> String {
    if taken.insert(name.to_lowercase()) {
        return name;
    }
    (2..)
        .map(|n| format!("{name}-{n}"))
        .find(|candidate| taken.insert(candidate.to_lowercase()))
        .unwrap_or(name)
}

/// Which client roots may be mounted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootsScope {
    /// Any local directory but the unsafe ones ([`safe_directory`]): over stdio the client
    /// runs on this machine, and its roots are its user's directories here.
    Local,
    /// Only directories inside this one (resolved): over HTTP with `--http-roots-under`. A
    /// remote client's `file://` URIs name its own machine, so mounting them anywhere on the
    /// server would hand it the server's files (`file:///etc`).
    Under(PathBuf),
}

impl RootsScope {
    /// `dir` (resolved) when this scope allows it.
    pub fn check(&self, dir: PathBuf) -> Result<PathBuf, RootError> {
        match self {
            Self::Local => Ok(dir),
            Self::Under(under) if dir.starts_with(under) => Ok(dir),
            Self::Under(under) => Err(RootError::OutsideAllowed {
                dir: dir.display().to_string(),
                under: under.display().to_string(),
            }),
        }
    }
}

/// One root directory, opened.
#[derive(Debug, Clone)]
pub struct MountedRoot {
    /// Where it is mounted.
    pub prefix: VirtualPath,
    /// The directory, resolved.
    pub dir: PathBuf,
    /// Its disk backend.
    pub backend: Arc<dyn Backend>,
}

/// What a session keeps of its table when roots are mounted: every mount but the table's disk
/// mounts, with a memory mount at `/` when the disk mount was there; and the table itself, served
/// again when the client offers no usable root.
#[derive(Debug, Clone)]
pub struct RootsBase {
    kept: Vec<Mount>,
    /// Whether `kept` ends with a memory mount at `/` of the session's own (the table's disk
    /// mount was there).
    own_root: bool,
    initial: Arc<dyn Router>,
    /// The session's memory account: the memory mount at `/` counts against its quota.
    memory: Arc<crate::ground::quota::MemoryAccount>,
}

impl RootsBase {
    /// The base of a session whose table (before any root) is `initial`; `replaced` are the
    /// table's disk mounts.
    /// `memory` is the session's account, which a memory mount made here counts against.
    pub fn new(
        initial: Arc<dyn Router>,
        replaced: &[VirtualPath],
        memory: Arc<crate::ground::quota::MemoryAccount>,
    ) -> Self {
        let mut kept: Vec<Mount> = initial
            .mounts()
            .iter()
            .filter(|mount| !replaced.contains(&mount.prefix))
            .cloned()
            .collect();
        let own_root = !kept.iter().any(|mount| mount.prefix.is_root());
        if own_root {
            kept.push(Mount {
                prefix: VirtualPath::root(),
                backend: Arc::new(MemoryBackend::accounted(memory.clone())),
                read_only: false,
            });
        }
        Self {
            kept,
            own_root,
            initial,
            memory,
        }
    }

    /// What a session serving `roots` serves itself and from the table, for change
    /// notifications ([`ChangeHub::follow_session`]); `None` when it serves the table as it is.
    pub fn view(&self, roots: &[MountedRoot]) -> Option<SessionView> {
        if roots.is_empty() {
            return None;
        }
        let root_taken = roots.iter().any(|root| root.prefix.is_root());
        let mut own: Vec<VirtualPath> = roots.iter().map(|root| root.prefix.clone()).collect();
        let mut shared = Vec::new();
        for mount in &self.kept {
            if mount.prefix.is_root() && (root_taken || self.own_root) {
                if !root_taken {
                    own.push(mount.prefix.clone());
                }
            } else {
                shared.push(mount.prefix.clone());
            }
        }
        Some(SessionView {
            own,
            shared,
            disks: roots
                .iter()
                .map(|root| (root.prefix.clone(), root.dir.clone()))
                .collect(),
        })
    }

    /// The names (first components, lower case) the kept mounts use, which roots must not take.
    fn taken_names(&self) -> HashSet<String> {
        self.kept
            .iter()
            .filter_map(|mount| mount.prefix.components().next())
            .map(str::to_lowercase)
            .collect()
    }

    /// The table with `roots` mounted; the initial table when there are none.
    pub fn compose(&self, roots: &[MountedRoot]) -> Arc<dyn Router> {
        if roots.is_empty() {
            return self.initial.clone();
        }
        let root_taken = roots.iter().any(|root| root.prefix.is_root());
        let mut mounts: Vec<Mount> = self
            .kept
            .iter()
            .filter(|mount| !(root_taken && mount.prefix.is_root()))
            .cloned()
            .collect();
        mounts.extend(roots.iter().map(|root| Mount {
            prefix: root.prefix.clone(),
            backend: root.backend.clone(),
            read_only: false,
        }));
        Arc::new(CompositeBackend::new(mounts, || {
            Arc::new(MemoryBackend::accounted(self.memory.clone()))
        }))
    }
}

/// Where each root goes: `/` for one, `/<name>/` for several (names unique, never one the kept
/// mounts use). `roots` pairs each resolved directory with its label.
fn place(roots: Vec<(PathBuf, String)>, mut taken: HashSet<String>) -> Vec<(VirtualPath, PathBuf)> {
    if let [(dir, _)] = roots.as_slice() {
        return vec![(VirtualPath::root(), dir.clone())];
    }
    roots
        .into_iter()
        .filter_map(|(dir, label)| {
            let name = unique_name(mount_name(&label), &mut taken);
            // A safe name is one valid component; should that ever fail, the root is skipped.
            match VirtualPath::root().join(&name) {
                Ok(prefix) => Some((prefix, dir)),
                Err(error) => {
                    tracing::warn!(%error, dir = %dir.display(), "root not mounted");
                    None
                }
            }
        })
        .collect()
}

/// The label a root's mount is named after: its `name`, else its directory's last component.
fn label_of(root: &Root, dir: &Path) -> String {
    root.name
        .as_deref()
        .filter(|name| !name.trim().is_empty())
        .map(str::to_owned)
        .unwrap_or_else(|| {
            dir.file_name()
                .map(|name| name.to_string_lossy().into_owned())
                .unwrap_or_default()
        })
}

/// The home directory, resolved, which is never mounted.
fn home_directory() -> Option<PathBuf> {
    dirs::home_dir().map(|home| std::fs::canonicalize(&home).unwrap_or(home))
}

/// Follows one MCP connection's roots (see the module doc).
#[derive(Debug)]
pub struct RootsFollower {
    /// The table's disk mounts, which roots replace; `None` when client roots are ignored
    /// (the operator gave `--mount`).
    replaced: Option<Vec<VirtualPath>>,
    /// How many updates are under way; calls wait while it is above zero.
    pending: watch::Sender<usize>,
    /// Whether `initialize` counted the first update in `pending` (released by it).
    first_pending: AtomicBool,
    /// One update at a time, in the order the notifications came.
    state: tokio::sync::Mutex<FollowState>,
    /// Where the table's changes are announced: the mounted roots are registered there.
    changes: Option<Arc<ChangeHub>>,
    /// Which roots may be mounted.
    scope: RootsScope,
    /// Over HTTP without `--http-roots-under`: roots are never mounted, and a client that
    /// offers them is told so at `initialize`.
    refused_over_http: bool,
}

#[derive(Debug, Default)]
struct FollowState {
    base: Option<RootsBase>,
    mounted: Vec<MountedRoot>,
    /// The session's registration with the change hub while roots are mounted.
    watch: Option<SessionWatch>,
}

impl RootsFollower {
    /// Follows roots when `table` allows it (the default table).
    pub fn for_table(table: &MountTable) -> Self {
        let replaced = table.follows_client_roots().then(|| table.disk_prefixes());
        let mut follower = Self::with(replaced);
        follower.changes = Some(table.changes().clone());
        follower
    }

    /// Over HTTP: follows roots inside `under` (`--http-roots-under`, resolved) when `table`
    /// allows it; without `under`, never mounts them.
    pub fn for_http(table: &MountTable, under: Option<&Path>) -> Self {
        match under {
            Some(under) => {
                let mut follower = Self::for_table(table);
                follower.scope = RootsScope::Under(under.to_path_buf());
                follower
            }
            None => {
                let mut follower = Self::disabled();
                follower.refused_over_http = table.follows_client_roots();
                follower
            }
        }
    }

    /// Never mounts client roots.
    pub fn disabled() -> Self {
        Self::with(None)
    }

    fn with(replaced: Option<Vec<VirtualPath>>) -> Self {
        Self {
            replaced,
            pending: watch::Sender::new(0),
            first_pending: AtomicBool::new(false),
            state: tokio::sync::Mutex::default(),
            changes: None,
            scope: RootsScope::Local,
            refused_over_http: false,
        }
    }

    /// What a client with these capabilities is told at `initialize` about its roots, beyond
    /// the mount list: `None` when it offers none, or when they do not matter (`--mount`).
    pub fn client_note(&self, client: Option<&rmcp::model::ClientCapabilities>) -> Option<String> {
        let offers = client.is_some_and(|c| c.roots.is_some());
        if !offers {
            return None;
        }
        if self.refused_over_http {
            return Some(ROOTS_REFUSED_OVER_HTTP.to_owned());
        }
        // With --mount, roots do not matter.
        self.replaced.as_ref()?;
        Some(match &self.scope {
            RootsScope::Local => ROOTS_NOTE.to_owned(),
            RootsScope::Under(under) => format!(
                "{ROOTS_NOTE} Only roots inside the server's {} are mounted (--http-roots-under); others are refused.",
                under.display()
            ),
        })
    }

    /// Whether the roots of a client with these capabilities are mounted: the table follows
    /// roots and the client declared the `roots` capability.
    pub fn follows(&self, client: Option<&rmcp::model::ClientCapabilities>) -> bool {
        self.replaced.is_some() && client.is_some_and(|c| c.roots.is_some())
    }

    /// At `initialize`, for a client that declared roots: calls wait until the roots asked for
    /// after `notifications/initialized` are mounted.
    pub fn expect_first_update(&self) {
        if !self.first_pending.swap(true, Ordering::SeqCst) {
            self.pending.send_modify(|n| *n += 1);
        }
    }

    /// Waits (at most [`SETTLE_WAIT_LIMIT`]) until no update is under way. A client that never
    /// sends `notifications/initialized` delays only its first call: then the wait is given up.
    pub async fn settled(&self) {
        let mut pending = self.pending.subscribe();
        if *pending.borrow() == 0 {
            return;
        }
        let waited = tokio::time::timeout(SETTLE_WAIT_LIMIT, pending.wait_for(|n| *n == 0)).await;
        if waited.is_err() {
            tracing::warn!(
                "the client's roots were not mounted in time; serving the table as it is"
            );
            self.abandon_first_update();
        }
    }

    /// Releases the update `initialize` announced when it will not run.
    pub fn abandon_first_update(&self) {
        if self.first_pending.swap(false, Ordering::SeqCst) {
            self.pending.send_modify(|n| *n = n.saturating_sub(1));
        }
    }

    /// Asks `peer` for its roots and mounts them in `session` (see the module doc). `first`:
    /// this is the update `initialize` announced.
    pub async fn update(&self, session: &Session, peer: &Peer<RoleServer>, first: bool) {
        if !first {
            self.pending.send_modify(|n| *n += 1);
        }
        self.update_now(session, peer).await;
        if first {
            self.abandon_first_update();
        } else {
            self.pending.send_modify(|n| *n = n.saturating_sub(1));
        }
    }

    async fn update_now(&self, session: &Session, peer: &Peer<RoleServer>) {
        let Some(replaced) = &self.replaced else {
            return;
        };
        let asked = tokio::time::timeout(ROOTS_ANSWER_LIMIT, peer.list_roots()).await;
        let roots = match asked {
            Ok(Ok(answer)) => answer.roots,
            Ok(Err(error)) => {
                tracing::warn!(%error, "roots/list failed; the mount table stays as it is");
                return;
            }
            Err(_) => {
                tracing::warn!(
                    "no answer to roots/list within {ROOTS_ANSWER_LIMIT:?}; the mount table stays as it is"
                );
                return;
            }
        };
        let mut state = self.state.lock().await;
        let base = state
            .base
            .get_or_insert_with(|| {
                RootsBase::new(session.backend(), replaced, session.memory.clone())
            })
            .clone();
        let previous = std::mem::take(&mut state.mounted);
        let opened = open_roots(roots, &previous, base.taken_names(), &self.scope).await;
        session.replace_backend(base.compose(&opened));
        // Registered before the previous registration goes, so directories still offered keep
        // their watch.
        state.watch = match (&self.changes, base.view(&opened)) {
            (Some(hub), Some(view)) => Some(hub.follow_session(session_origin_of(session), view)),
            _ => None,
        };
        if opened.is_empty() {
            tracing::info!("the client offers no usable root; serving the default mount table");
        }
        for root in &opened {
            tracing::info!(
                prefix = %crate::ground::config::display_prefix(&root.prefix),
                dir = %root.dir.display(),
                "mounted the client's root"
            );
        }
        state.mounted = opened;
    }
}

/// Resolves, checks and opens `roots`, reusing the backends of `previous` for directories
/// still offered; a root that cannot be mounted is left out with a warning.
async fn open_roots(
    roots: Vec<Root>,
    previous: &[MountedRoot],
    taken: HashSet<String>,
    scope: &RootsScope,
) -> Vec<MountedRoot> {
    let scope_for_check = scope.clone();
    let checked = tokio::task::spawn_blocking(move || {
        let home = home_directory();
        let mut seen = HashSet::new();
        let mut usable = Vec::new();
        if roots.len() > MAX_ROOTS {
            tracing::warn!(
                offered = roots.len(),
                "the client offers more than {MAX_ROOTS} roots; only the first {MAX_ROOTS} are mounted"
            );
        }
        for root in roots.into_iter().take(MAX_ROOTS) {
            let dir = path_of_file_uri(&root.uri)
                .and_then(|path| safe_directory(&path, home.as_deref()))
                .and_then(|dir| scope_for_check.check(dir));
            match dir {
                Ok(dir) if seen.insert(dir.clone()) => {
                    let label = label_of(&root, &dir);
                    usable.push((dir, label));
                }
                Ok(_) => {}
                Err(error) => warn_refused(&error),
            }
        }
        usable
    })
    .await
    .unwrap_or_default();
    let mut opened = Vec::new();
    for (prefix, dir) in place(checked, taken) {
        let reused = previous.iter().find(|root| root.dir == dir);
        let backend = match reused {
            Some(root) => root.backend.clone(),
            None => match open_disk(dir.clone(), scope).await {
                Ok(backend) => backend,
                Err(error) => {
                    tracing::warn!("{error}");
                    continue;
                }
            },
        };
        opened.push(MountedRoot {
            prefix,
            dir,
            backend,
        });
    }
    opened
}

/// Logs a root left out. A root refused for safety goes to stderr whatever `RUST_LOG` says,
/// like the working directory left out of the default table.
#[allow(clippy::print_stderr)]
fn warn_refused(error: &RootError) {
    if matches!(
        error,
        RootError::Unsafe { .. } | RootError::OutsideAllowed { .. }
    ) {
        eprintln!("mountfs: warning: {error}");
    } else {
        tracing::warn!("{error}");
    }
}

/// Opens `dir`, and checks `scope` again on the directory actually opened (the path could have
/// been swapped for a symbolic link since it was resolved).
async fn open_disk(dir: PathBuf, scope: &RootsScope) -> Result<Arc<dyn Backend>, RootError> {
    let shown = dir.display().to_string();
    let opened =
        tokio::task::spawn_blocking(move || DiskBackend::open(&dir, DiskOptions::default())).await;
    match opened {
        Ok(Ok(backend)) => {
            scope.check(backend.opened_dir())?;
            Ok(Arc::new(backend))
        }
        Ok(Err(error)) => Err(RootError::Open {
            dir: shown,
            reason: error.to_string(),
        }),
        Err(error) => Err(RootError::Open {
            dir: shown,
            reason: error.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_uris_decode_to_paths() {
        assert_eq!(
            path_of_file_uri("file:///home/me/my%20project").unwrap(),
            PathBuf::from("/home/me/my project")
        );
        assert_eq!(
            path_of_file_uri("FILE://localhost/srv/x").unwrap(),
            PathBuf::from("/srv/x")
        );
        assert_eq!(
            path_of_file_uri("file:/srv/x").unwrap(),
            PathBuf::from("/srv/x")
        );
        #[cfg(unix)]
        {
            use std::os::unix::ffi::OsStrExt;
            let odd = path_of_file_uri("file:///tmp/a%FFb").unwrap();
            assert_eq!(odd.as_os_str().as_bytes(), b"/tmp/a\xffb");
        }
    }

    /// Why `path_of_file_uri` refuses `uri`: the name of its error.
    fn refused(uri: &str) -> &'static str {
        match path_of_file_uri(uri).unwrap_err() {
            RootError::NotFile { .. } => "NotFile",
            RootError::RemoteHost { .. } => "RemoteHost",
            RootError::BadPath { .. } => "BadPath",
            other => panic!("{other}"),
        }
    }

    #[test]
    fn other_uris_are_refused() {
        for (uri, error) in [
            ("https://example.com/x", "NotFile"),
            ("file://server/share", "RemoteHost"),
            ("file:///tmp/a%00b", "BadPath"),
            ("file:///tmp/x?y", "BadPath"),
            ("file:relative", "BadPath"),
            ("fil", "NotFile"),
        ] {
            assert_eq!(refused(uri), error, "{uri}");
        }
    }

    #[test]
    fn the_file_system_root_and_home_are_refused() {
        assert!(matches!(
            safe_directory(Path::new("/"), None),
            Err(RootError::Unsafe {
                what: "the file-system root",
                ..
            })
        ));
        let home = tempfile::tempdir().unwrap();
        let resolved = std::fs::canonicalize(home.path()).unwrap();
        assert!(matches!(
            safe_directory(home.path(), Some(&resolved)),
            Err(RootError::Unsafe {
                what: "the home directory",
                ..
            })
        ));
        let parent = resolved.parent().unwrap();
        assert!(matches!(
            safe_directory(parent, Some(&resolved)),
            Err(RootError::Unsafe {
                what: "a directory holding the home directory",
                ..
            })
        ));
        let project = home.path().join("project");
        std::fs::create_dir(&project).unwrap();
        assert_eq!(
            safe_directory(&project, Some(&resolved)).unwrap(),
            resolved.join("project")
        );
        let file = home.path().join("f");
        std::fs::write(&file, "x").unwrap();
        assert!(matches!(
            safe_directory(&file, None),
            Err(RootError::Open { .. })
        ));
    }

    #[test]
    fn mount_names_are_safe_components() {
        assert_eq!(mount_name("frontend"), "frontend");
        assert_eq!(mount_name("My Project (v2)"), "My-Project-v2");
        assert_eq!(mount_name("../../etc"), "etc");
        assert_eq!(mount_name("a/b\\c"), "a-b-c");
        assert_eq!(mount_name("\u{202e}evil\u{200b}"), "evil");
        assert_eq!(mount_name("..."), "root");
        assert_eq!(mount_name(""), "root");
        assert_eq!(mount_name("données"), "données");
        let long = mount_name(&"é".repeat(100));
        assert!(long.len() <= MAX_MOUNT_NAME_BYTES, "{long}");
        for name in ["x", "My Project", "../..", "a/b", "\u{0}"] {
            assert!(
                VirtualPath::root().join(&mount_name(name)).is_ok(),
                "{name}"
            );
        }
    }

    #[test]
    fn one_root_goes_to_slash_several_get_unique_names() {
        let taken: HashSet<String> = ["memories".to_owned(), "scratch".to_owned()].into();
        let one = place(vec![(PathBuf::from("/p/a"), "a".into())], taken.clone());
        assert_eq!(one, vec![(VirtualPath::root(), PathBuf::from("/p/a"))]);
        let several = place(
            vec![
                (PathBuf::from("/p/app"), "app".into()),
                (PathBuf::from("/q/app"), "App".into()),
                (PathBuf::from("/p/scratch"), "scratch".into()),
            ],
            taken,
        );
        let prefixes: Vec<&str> = several.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(prefixes, vec!["/app", "/App-2", "/scratch-2"]);
    }
}
