//! Live change notifications: who changed which file, from every source, to the sessions that
//! subscribed to it.
//!
//! One [`ChangeHub`] per mount table carries [`Change`]s on a bounded broadcast channel. Changes
//! come from three sources: the tools of every session of this process (published by the server
//! from each call's trail: the paths the change primitive recorded, see `call_trail`), disk mounts through the OS's file-change API (the `notify`
//! crate: other programs, `execute`), and PostgreSQL mounts through `LISTEN/NOTIFY` (other server
//! instances; a trigger on the items table sends them). The disk and PostgreSQL sources start with
//! the first subscription, so a server nobody subscribes to pays nothing.
//!
//! Each subscription runs a [`Subscriber`] loop: it keeps the changes under its interests in a
//! bounded pending set and sends them within [`FLUSH_TICK`], but one resource at most every
//! [`MIN_RESOURCE_GAP`], so a resource is announced a few times per second at most. Sending never blocks a writer: a subscriber that
//! falls behind the channel loses the detail and announces every interest once instead.
//! Changes in memory mounts (one per session) reach only the session that made them, and so do
//! a tool's changes in an overlay mount's layer (uncommitted, the workspace's own; a `commit`'s
//! reach everyone): [`ChangeHub::private_to_session`] says which, for the notifications and the
//! audit log alike (issue 41).
//!
//! A session whose client's roots are mounted (see `roots.rs`) serves some paths from mounts of
//! its own: it registers them with [`ChangeHub::follow_session`]. Its root directories are then
//! watched like the table's disk mounts (from the first subscription on, and no longer once the
//! roots change or the session ends), their changes and its own tools' changes there reach only
//! that session, and the table's changes under those paths (the working directory the roots
//! replaced) no longer reach it.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::ground::config::{BackendSpec, MountSpec};
use crate::ground::path::VirtualPath;
use crate::ground::uri::uri_of;
use crate::storage::backend::disk::watch::watch;
use crate::storage::store::postgres::listen::listen;

/// The shortest time between two notifications about one resource (and between two
/// `list_changed`) of one subscription.
pub const MIN_RESOURCE_GAP: Duration = Duration::from_millis(250);
/// How often a subscriber sends what is pending: a change is announced within this time unless
/// its resource was announced less than [`MIN_RESOURCE_GAP`] ago.
const FLUSH_TICK: Duration = Duration::from_millis(20);
/// Changes the channel holds for a subscriber that has not caught up.
const CHANNEL_CAPACITY: usize = 4096;
/// Distinct paths one subscriber keeps between two flushes; beyond it, every interest is
/// announced once.
const MAX_PENDING: usize = 1024;
/// Resources (files or directories) one session may subscribe to.
pub const MAX_INTERESTS: usize = 1024;
/// The PostgreSQL channel the items table's trigger notifies (see `store::postgres::listen`).
pub use crate::storage::store::postgres::listen::POSTGRES_CHANNEL;

/// One file or directory that changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// Its virtual path.
    pub path: VirtualPath,
    /// Whether files may have appeared or gone (a creation, deletion or move), which also
    /// changes the resource list.
    pub listing: bool,
    /// The session whose tool made it, or whose root directory it happened in (see
    /// [`session_origin`]).
    pub origin: Option<usize>,
    /// Only the session `origin` sees it: it happened in a mount of that session's own (a
    /// root directory). [`ChangeHub::publish`] sets it for a tool's change there.
    pub private: bool,
}

/// The identity of a session for [`Change::origin`].
pub fn session_origin<T>(session: &Arc<T>) -> usize {
    session_origin_of(&**session)
}

/// [`session_origin`] of a session borrowed from its `Arc`.
pub fn session_origin_of<T>(session: &T) -> usize {
    std::ptr::from_ref(session) as *const () as usize
}

/// The mounts a hub watches, as the table gave them.
#[derive(Debug, Clone)]
enum Source {
    /// Per-session memory: changes stay in their session.
    Memory,
    /// A directory on disk.
    Disk(PathBuf),
    /// A PostgreSQL namespace.
    Postgres { url: String, namespace: String },
    /// SQLite: changes come from this process's tools only.
    Sqlite,
}

/// The broadcast point of one mount table (see the module doc).
#[derive(Debug)]
pub struct ChangeHub {
    sender: broadcast::Sender<Change>,
    /// Longest prefix first.
    mounts: Vec<(VirtualPath, Source)>,
    /// The overlay mounts' prefixes: a tool's change there lands in its workspace's layer.
    overlays: Vec<VirtualPath>,
    /// The disk watchers and PostgreSQL listeners, once started.
    started: Mutex<Option<Vec<Watching>>>,
    /// Whether the disk watchers are set up (a recursive watch of a big tree takes a while, so
    /// it runs on a blocking thread; see [`ChangeHub::ready`]).
    disk_ready: tokio::sync::watch::Sender<bool>,
    /// The sessions serving some paths from mounts of their own (client roots), by origin.
    sessions: Mutex<HashMap<usize, SessionMounts>>,
    /// Session directories whose watch is being set up.
    session_watches_pending: tokio::sync::watch::Sender<usize>,
    /// Numbers [`SessionWatch`]es, so that a replaced one cannot unregister its successor.
    generations: std::sync::atomic::AtomicU64,
}

/// The mounts one session serves itself (client roots), as [`ChangeHub::follow_session`]
/// registers them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionView {
    /// Prefixes of the session's own mounts (its roots, the memory mount at `/` that several
    /// roots come with).
    pub own: Vec<VirtualPath>,
    /// Prefixes of the table's mounts it still serves (`/memories/`, `/scratch/`, ...).
    pub shared: Vec<VirtualPath>,
    /// Its root directories: where each is mounted and the directory, resolved.
    pub disks: Vec<(VirtualPath, PathBuf)>,
}

impl SessionView {
    /// Whether the session serves `path` from a mount of its own: the longest prefix holding it
    /// is one of [`SessionView::own`].
    pub fn owns(&self, path: &VirtualPath) -> bool {
        let longest = |prefixes: &[VirtualPath]| {
            prefixes
                .iter()
                .filter(|prefix| path.starts_with(prefix))
                .map(|prefix| prefix.as_str().len())
                .max()
        };
        match (longest(&self.own), longest(&self.shared)) {
            (Some(own), Some(shared)) => own > shared,
            (Some(_), None) => true,
            (None, _) => false,
        }
    }
}

/// One registered session's view and the watchers of its root directories.
struct SessionMounts {
    generation: u64,
    view: SessionView,
    /// One per entry of `view.disks`, `None` until the hub's sources start (or when watching
    /// failed).
    watchers: Vec<Option<notify::RecommendedWatcher>>,
}

impl std::fmt::Debug for SessionMounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionMounts")
            .field("generation", &self.generation)
            .field("view", &self.view)
            .field(
                "watching",
                &self.watchers.iter().filter(|w| w.is_some()).count(),
            )
            .finish()
    }
}

/// Keeps a session's registration ([`ChangeHub::follow_session`]) and the watches of its root
/// directories; dropping it ends them.
#[derive(Debug)]
pub struct SessionWatch {
    hub: std::sync::Weak<ChangeHub>,
    origin: usize,
    generation: u64,
}

impl Drop for SessionWatch {
    fn drop(&mut self) {
        if let Some(hub) = self.hub.upgrade() {
            let mut sessions = hub.sessions.lock().unwrap_or_else(PoisonError::into_inner);
            if sessions
                .get(&self.origin)
                .is_some_and(|mounts| mounts.generation == self.generation)
            {
                // Dropping the watchers ends their watches (inotify descriptors, threads).
                sessions.remove(&self.origin);
            }
        }
    }
}

/// What keeps a source alive.
enum Watching {
    Disk(#[allow(dead_code)] notify::RecommendedWatcher),
    Postgres(CancellationToken),
}

impl std::fmt::Debug for Watching {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Disk(_) => f.write_str("Watching::Disk"),
            Self::Postgres(_) => f.write_str("Watching::Postgres"),
        }
    }
}

impl Drop for ChangeHub {
    fn drop(&mut self) {
        let started = self
            .started
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        for watching in started.take().unwrap_or_default() {
            if let Watching::Postgres(stop) = watching {
                stop.cancel();
            }
        }
    }
}

impl ChangeHub {
    /// A hub for the mounts of `specs`.
    pub fn new(specs: &[MountSpec]) -> Self {
        let mut mounts: Vec<(VirtualPath, Source)> = specs
            .iter()
            .map(|spec| {
                let source = match &spec.backend {
                    BackendSpec::Memory => Source::Memory,
                    BackendSpec::Disk { dir, .. } => {
                        Source::Disk(std::fs::canonicalize(dir).unwrap_or_else(|_| dir.clone()))
                    }
                    // Like SQLite: changes come from this process's tools only (a shell mount's
                    // target is not watched; issue 27).
                    // An object mount's bucket is not watched either (issue 44): changes made by
                    // other servers or clients are seen at the next read, as stale edits.
                    BackendSpec::Sqlite { .. }
                    | BackendSpec::Shell { .. }
                    | BackendSpec::Object(_) => Source::Sqlite,
                    BackendSpec::Postgres { url, namespace } => Source::Postgres {
                        url: url.clone(),
                        namespace: namespace.clone(),
                    },
                };
                (spec.prefix.clone(), source)
            })
            .collect();
        mounts.sort_by_key(|(prefix, _)| std::cmp::Reverse(prefix.as_str().len()));
        let overlays = specs
            .iter()
            .filter(|spec| {
                matches!(
                    spec.backend,
                    BackendSpec::Disk {
                        overlay: Some(_),
                        ..
                    }
                )
            })
            .map(|spec| spec.prefix.clone())
            .collect();
        Self {
            sender: broadcast::channel(CHANNEL_CAPACITY).0,
            mounts,
            overlays,
            started: Mutex::new(None),
            disk_ready: tokio::sync::watch::Sender::new(false),
            sessions: Mutex::new(HashMap::new()),
            session_watches_pending: tokio::sync::watch::Sender::new(0),
            generations: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Announces a change to every subscriber that may see it; never waits. A tool's change in
    /// a mount of its session's own (a root directory) is kept to that session.
    pub fn publish(&self, mut change: Change) {
        if let Some(origin) = change.origin
            && !change.private
        {
            let sessions = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
            change.private = sessions
                .get(&origin)
                .is_some_and(|mounts| mounts.view.owns(&change.path));
        }
        // No receiver is not an error: nobody subscribed.
        let _ = self.sender.send(change);
    }

    /// Registers the mounts session `origin` serves itself (its client's roots) until the
    /// returned guard is dropped; replaces what it registered before. Its root directories are
    /// watched from the first subscription to this hub on (at once when there is one), and
    /// directories it registered before are not watched again.
    pub fn follow_session(self: &Arc<Self>, origin: usize, view: SessionView) -> SessionWatch {
        let generation = self
            .generations
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut sessions = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        let mut previous = sessions.remove(&origin);
        let watchers = view
            .disks
            .iter()
            .map(|disk| {
                let previous = previous.as_mut()?;
                let at = previous.view.disks.iter().position(|old| old == disk)?;
                previous.watchers.get_mut(at)?.take()
            })
            .collect();
        sessions.insert(
            origin,
            SessionMounts {
                generation,
                view,
                watchers,
            },
        );
        drop(sessions);
        // The previous watchers not reused end here, outside the lock.
        drop(previous);
        let started = self
            .started
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some();
        if started {
            self.watch_session_disks(origin);
        }
        SessionWatch {
            hub: Arc::downgrade(self),
            origin,
            generation,
        }
    }

    /// Starts watching the directories of session `origin` not watched yet, on a blocking
    /// thread ([`ChangeHub::ready`] waits for it).
    fn watch_session_disks(self: &Arc<Self>, origin: usize) {
        let wanted: Vec<(usize, VirtualPath, PathBuf)> = {
            let sessions = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
            let Some(mounts) = sessions.get(&origin) else {
                return;
            };
            mounts
                .view
                .disks
                .iter()
                .zip(&mounts.watchers)
                .enumerate()
                .filter(|(_, (_, watcher))| watcher.is_none())
                .map(|(index, ((prefix, dir), _))| (index, prefix.clone(), dir.clone()))
                .collect()
        };
        if wanted.is_empty() {
            return;
        }
        self.session_watches_pending.send_modify(|n| *n += 1);
        let hub = Arc::downgrade(self);
        let sender = self.sender.clone();
        tokio::task::spawn_blocking(move || {
            let mut made = Vec::new();
            for (index, prefix, dir) in wanted {
                match watch_disk(&prefix, &dir, &sender, Some(origin)) {
                    Ok(watcher) => made.push((index, prefix, dir, watcher)),
                    Err(error) => tracing::warn!(
                        mount = %prefix, %error,
                        "cannot watch the client's root; changes by other programs there are not notified"
                    ),
                }
            }
            let Some(hub) = hub.upgrade() else {
                return;
            };
            let mut unused = Vec::new();
            {
                let mut sessions = hub.sessions.lock().unwrap_or_else(PoisonError::into_inner);
                for (index, prefix, dir, watcher) in made {
                    // Kept only when the session still has that root where it had it.
                    let slot = sessions.get_mut(&origin).and_then(|mounts| {
                        let same = mounts.view.disks.get(index) == Some(&(prefix, dir));
                        same.then(|| mounts.watchers.get_mut(index)).flatten()
                    });
                    match slot {
                        Some(slot) if slot.is_none() => *slot = Some(watcher),
                        _ => unused.push(watcher),
                    }
                }
            }
            drop(unused);
            hub.session_watches_pending
                .send_modify(|n| *n = n.saturating_sub(1));
        });
    }

    /// A receiver of every change from now on; starts the disk and PostgreSQL sources the
    /// first time.
    pub fn receiver(self: &Arc<Self>) -> broadcast::Receiver<Change> {
        let receiver = self.sender.subscribe();
        self.start_sources();
        receiver
    }

    /// Whether a change that session `origin`'s call of `tool` made at `path` is private to that
    /// session's workspace: `path` lies in a memory mount, in a mount of the session's own (a
    /// client's root), or in an overlay mount's layer (every tool but `commit`, which writes
    /// the shared directory). The one predicate over (workspace, mount) for notifications and
    /// the audit log; grants will narrow what is shared per principal here.
    pub fn private_to_session(&self, origin: usize, path: &VirtualPath, tool: &str) -> bool {
        if self.is_per_session(path) {
            return true;
        }
        let in_layer = tool != "commit"
            && self
                .mounts
                .iter()
                .find(|(prefix, _)| path.starts_with(prefix))
                .is_some_and(|(prefix, _)| self.overlays.contains(prefix));
        in_layer
            || self
                .sessions
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(&origin)
                .is_some_and(|mounts| mounts.view.owns(path))
    }

    /// Whether `path` lies in a per-session memory mount.
    fn is_per_session(&self, path: &VirtualPath) -> bool {
        self.mounts
            .iter()
            .find(|(prefix, _)| path.starts_with(prefix))
            .is_some_and(|(_, source)| matches!(source, Source::Memory))
    }

    /// Whether `change` concerns the session `origin`: memory-mount changes and changes in a
    /// session's own mounts only their own; the table's changes not a session that serves their
    /// path from a mount of its own.
    fn visible_to(&self, change: &Change, origin: usize) -> bool {
        if change.private || self.is_per_session(&change.path) {
            return change.origin == Some(origin);
        }
        let sessions = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        !sessions
            .get(&origin)
            .is_some_and(|mounts| mounts.view.owns(&change.path))
    }

    /// Waits until the disk watchers started by the first [`ChangeHub::receiver`] watch, and
    /// those of sessions' root directories (at once when there is nothing to watch): a change
    /// made after this is seen.
    pub async fn ready(&self) {
        let mut ready = self.disk_ready.subscribe();
        let _ = ready.wait_for(|ready| *ready).await;
        let mut pending = self.session_watches_pending.subscribe();
        let _ = pending.wait_for(|pending| *pending == 0).await;
    }

    /// How many root directories of sessions are watched now (for tests and logs).
    pub fn watched_session_dirs(&self) -> usize {
        self.sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .map(|mounts| mounts.watchers.iter().filter(|w| w.is_some()).count())
            .sum()
    }

    fn start_sources(self: &Arc<Self>) {
        let mut started = self.started.lock().unwrap_or_else(PoisonError::into_inner);
        if started.is_some() {
            return;
        }
        let mut watching = Vec::new();
        let mut postgres_urls: Vec<&str> = Vec::new();
        let mut disks: Vec<(VirtualPath, PathBuf)> = Vec::new();
        for (prefix, source) in &self.mounts {
            match source {
                Source::Disk(dir) => disks.push((prefix.clone(), dir.clone())),
                Source::Postgres { url, .. } if !postgres_urls.contains(&url.as_str()) => {
                    postgres_urls.push(url);
                }
                _ => {}
            }
        }
        if disks.is_empty() {
            self.disk_ready.send_replace(true);
        } else {
            // A recursive watch visits every directory of the tree: off the async threads.
            let hub = Arc::downgrade(self);
            let sender = self.sender.clone();
            tokio::task::spawn_blocking(move || {
                let mut watchers = Vec::new();
                for (prefix, dir) in disks {
                    match watch_disk(&prefix, &dir, &sender, None) {
                        Ok(watcher) => watchers.push(Watching::Disk(watcher)),
                        Err(error) => tracing::warn!(
                            mount = %prefix, %error,
                            "cannot watch the directory; changes by other programs there are not notified"
                        ),
                    }
                }
                if let Some(hub) = hub.upgrade() {
                    hub.started
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .get_or_insert_with(Vec::new)
                        .extend(watchers);
                    hub.disk_ready.send_replace(true);
                }
            });
        }
        for url in postgres_urls {
            let stop = CancellationToken::new();
            let targets: Vec<(VirtualPath, String)> = self
                .mounts
                .iter()
                .filter_map(|(prefix, source)| match source {
                    Source::Postgres { url: u, namespace } if u == url => {
                        Some((prefix.clone(), namespace.clone()))
                    }
                    _ => None,
                })
                .collect();
            let sender = self.sender.clone();
            let changed = move |path, listing| {
                let _ = sender.send(Change {
                    path,
                    listing,
                    origin: None,
                    private: false,
                });
            };
            tokio::spawn(listen(url.to_owned(), targets, changed, stop.clone()));
            watching.push(Watching::Postgres(stop));
        }
        *started = Some(watching);
        drop(started);
        let origins: Vec<usize> = self
            .sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .copied()
            .collect();
        for origin in origins {
            self.watch_session_disks(origin);
        }
    }
}

/// A recursive watcher of a disk mount's directory (see `disk::watch`), publishing its changes
/// under `prefix`; for the session `session` only when it is one of that session's root
/// directories.
fn watch_disk(
    prefix: &VirtualPath,
    dir: &Path,
    sender: &broadcast::Sender<Change>,
    session: Option<usize>,
) -> notify::Result<notify::RecommendedWatcher> {
    let sender = sender.clone();
    watch(prefix, dir, move |path, listing| {
        let _ = sender.send(Change {
            path,
            listing,
            origin: session,
            private: session.is_some(),
        });
    })
}

/// The files and directories one subscription follows.
#[derive(Debug, Default)]
pub struct Interests {
    paths: BTreeSet<VirtualPath>,
}

impl Interests {
    /// Follows `path` (a file, or a directory and everything under it); false when the session
    /// already follows [`MAX_INTERESTS`] paths.
    pub fn add(&mut self, path: VirtualPath) -> bool {
        if self.paths.len() >= MAX_INTERESTS && !self.paths.contains(&path) {
            return false;
        }
        self.paths.insert(path);
        true
    }

    /// Stops following `path`.
    pub fn remove(&mut self, path: &VirtualPath) {
        self.paths.remove(path);
    }

    /// The paths to announce for a change of `changed`: the changed path itself when it lies at
    /// or under an interest (`exact` false), or the interests it touches (`exact` true: the
    /// interest itself; also an interest inside a changed directory, removed or moved).
    fn touched(&self, changed: &VirtualPath, exact: bool) -> Vec<VirtualPath> {
        let mut touched = Vec::new();
        for interest in &self.paths {
            if changed.starts_with(interest) {
                touched.push(if exact {
                    interest.clone()
                } else {
                    changed.clone()
                });
            } else if interest.starts_with(changed) {
                touched.push(interest.clone());
            }
        }
        touched
    }
}

/// Where a subscriber sends its notifications.
#[async_trait::async_trait]
pub trait Notifier: Send + Sync {
    /// `notifications/resources/updated` for `uri`; an error ends the subscription.
    async fn updated(&self, uri: String) -> Result<(), String>;
    /// `notifications/resources/list_changed`; an error ends the subscription.
    async fn list_changed(&self) -> Result<(), String>;
}

/// One subscription's loop (see the module doc).
#[derive(Debug)]
pub struct Subscriber {
    /// What it follows.
    pub interests: Arc<Mutex<Interests>>,
    /// Announce the interest itself rather than the changed file below it.
    pub exact: bool,
    /// Send `list_changed` when files appear or go.
    pub list_changed: bool,
    /// The session whose memory-mount changes it may see.
    pub origin: usize,
    /// What its principal is granted (issue 43): a change outside never reaches it. `None`:
    /// no grants.
    pub view: Option<Arc<crate::ground::grants::View>>,
}

impl Subscriber {
    /// Runs until `stop`, the hub's end, or a failed send. `changes` is taken from
    /// [`ChangeHub::receiver`] before the subscription is acknowledged, so that nothing
    /// changed after the acknowledgement is missed.
    pub async fn run(
        self,
        hub: Arc<ChangeHub>,
        mut changes: broadcast::Receiver<Change>,
        notifier: impl Notifier,
        stop: CancellationToken,
    ) {
        let mut pending: BTreeSet<VirtualPath> = BTreeSet::new();
        // When each recently announced resource was announced (pruned every flush, so it holds
        // at most what one MIN_RESOURCE_GAP announced).
        let mut announced: HashMap<VirtualPath, Instant> = HashMap::new();
        let mut list_announced: Option<Instant> = None;
        let mut overflowed = false;
        let mut list_dirty = false;
        let mut tick = tokio::time::interval(FLUSH_TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                received = changes.recv() => match received {
                    Ok(change) => {
                        if !hub.visible_to(&change, self.origin)
                            || self.view.as_ref().is_some_and(|view| !view.sees(&change.path))
                        {
                            continue;
                        }
                        list_dirty |= change.listing && self.list_changed;
                        let interests = self.interests.lock().unwrap_or_else(PoisonError::into_inner);
                        for path in interests.touched(&change.path, self.exact) {
                            if pending.len() < MAX_PENDING {
                                pending.insert(path);
                            } else {
                                overflowed = true;
                            }
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        tracing::debug!(missed, "a subscriber fell behind; announcing every interest");
                        overflowed = true;
                        list_dirty |= self.list_changed;
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                },
                _ = tick.tick(), if overflowed || list_dirty || !pending.is_empty() => {
                    let now = Instant::now();
                    announced.retain(|_, at| now.duration_since(*at) < MIN_RESOURCE_GAP);
                    if overflowed {
                        let interests = self.interests.lock().unwrap_or_else(PoisonError::into_inner);
                        pending.extend(interests.paths.iter().cloned());
                        overflowed = false;
                    }
                    let due: Vec<VirtualPath> = pending
                        .iter()
                        .filter(|path| !announced.contains_key(*path))
                        .cloned()
                        .collect();
                    let mut failed = false;
                    if list_dirty
                        && list_announced.is_none_or(|at| now.duration_since(at) >= MIN_RESOURCE_GAP)
                    {
                        list_dirty = false;
                        list_announced = Some(now);
                        failed |= notifier.list_changed().await.is_err();
                    }
                    for path in due {
                        if failed {
                            break;
                        }
                        pending.remove(&path);
                        failed |= notifier.updated(uri_of(&path)).await.is_err();
                        announced.insert(path, now);
                    }
                    if failed {
                        tracing::debug!("a subscription's client is gone; it ends");
                        return;
                    }
                }
            }
        }
    }
}

/// The legacy (`resources/subscribe`) subscriptions of one connection: one interest set and one
/// loop, started by the first subscription, stopped when the connection's handler is dropped.
#[derive(Debug, Default)]
pub struct LegacySubscriptions {
    interests: Arc<Mutex<Interests>>,
    running: Mutex<Option<CancellationToken>>,
}

impl Drop for LegacySubscriptions {
    fn drop(&mut self) {
        if let Some(stop) = self
            .running
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            stop.cancel();
        }
    }
}

impl LegacySubscriptions {
    /// Follows `path`; false when the session already follows [`MAX_INTERESTS`] paths.
    pub fn add(&self, path: VirtualPath) -> bool {
        self.interests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .add(path)
    }

    /// Stops following `path`.
    pub fn remove(&self, path: &VirtualPath) {
        self.interests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(path);
    }

    /// Starts the loop unless it runs: `start` receives the subscriber and its stop token.
    pub fn ensure_running(
        &self,
        origin: usize,
        view: Option<Arc<crate::ground::grants::View>>,
        start: impl FnOnce(Subscriber, CancellationToken),
    ) {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        if running.as_ref().is_some_and(|stop| !stop.is_cancelled()) {
            return;
        }
        let stop = CancellationToken::new();
        *running = Some(stop.clone());
        start(
            Subscriber {
                interests: self.interests.clone(),
                exact: false,
                list_changed: true,
                origin,
                view,
            },
            stop,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(text: &str) -> VirtualPath {
        VirtualPath::parse(text).expect("valid path")
    }

    #[test]
    fn interests_match_files_under_directories_and_directories_above_files() {
        let mut interests = Interests::default();
        interests.add(path("/src"));
        interests.add(path("/notes/a.md"));
        assert_eq!(
            interests.touched(&path("/src/x/y.rs"), false),
            [path("/src/x/y.rs")]
        );
        assert_eq!(
            interests.touched(&path("/src/x/y.rs"), true),
            [path("/src")]
        );
        assert_eq!(
            interests.touched(&path("/notes/a.md"), true),
            [path("/notes/a.md")]
        );
        // The directory holding a followed file went away.
        assert_eq!(
            interests.touched(&path("/notes"), false),
            [path("/notes/a.md")]
        );
        assert!(interests.touched(&path("/srcx/a"), false).is_empty());
        assert!(interests.touched(&path("/other.txt"), false).is_empty());
    }

    #[test]
    fn interests_are_bounded() {
        let mut interests = Interests::default();
        for n in 0..MAX_INTERESTS {
            assert!(interests.add(path(&format!("/f{n}"))));
        }
        assert!(!interests.add(path("/one-more")));
        assert!(interests.add(path("/f0")), "an existing one is fine");
    }

    #[test]
    fn a_session_owns_the_paths_its_roots_serve_not_the_table_mounts_kept() {
        // One root at `/`: everything but the kept table mounts.
        let one = SessionView {
            own: vec![path("/")],
            shared: vec![path("/scratch"), path("/memories")],
            disks: Vec::new(),
        };
        assert!(one.owns(&path("/src/a.rs")));
        assert!(one.owns(&path("/")));
        assert!(!one.owns(&path("/scratch/a")));
        assert!(!one.owns(&path("/memories")));
        // Several roots: their mounts and the memory mount at `/` they come with.
        let several = SessionView {
            own: vec![path("/app"), path("/lib"), path("/")],
            shared: vec![path("/scratch")],
            disks: Vec::new(),
        };
        assert!(several.owns(&path("/app/x")));
        assert!(several.owns(&path("/loose.txt")));
        assert!(!several.owns(&path("/scratch/x")));
        assert!(!SessionView::default().owns(&path("/x")));
    }

    #[tokio::test]
    async fn changes_in_a_session_s_own_mounts_reach_only_that_session() {
        let specs = crate::ground::config::parse_table(&[
            "/=disk:.",
            "/shared/=store:sqlite:/tmp/never-opened.db",
        ])
        .unwrap();
        let hub = Arc::new(ChangeHub::new(&specs));
        let (roots_session, plain_session) = (1usize, 2usize);
        let watch = hub.follow_session(
            roots_session,
            SessionView {
                own: vec![path("/")],
                shared: vec![path("/shared")],
                disks: Vec::new(),
            },
        );
        let mut received = hub.sender.subscribe();
        // The roots session's own write under its root: kept to it.
        hub.publish(Change {
            path: path("/a.txt"),
            listing: true,
            origin: Some(roots_session),
            private: false,
        });
        let own = received.recv().await.unwrap();
        assert!(own.private);
        assert!(hub.visible_to(&own, roots_session));
        assert!(!hub.visible_to(&own, plain_session));
        // The table's disk mount (the working directory its root replaced): not for it.
        let table = Change {
            path: path("/a.txt"),
            listing: false,
            origin: None,
            private: false,
        };
        assert!(!hub.visible_to(&table, roots_session));
        assert!(hub.visible_to(&table, plain_session));
        // A shared store mount: for everyone, whoever wrote.
        hub.publish(Change {
            path: path("/shared/n.md"),
            listing: false,
            origin: Some(roots_session),
            private: false,
        });
        let shared = received.recv().await.unwrap();
        assert!(!shared.private);
        assert!(hub.visible_to(&shared, roots_session));
        assert!(hub.visible_to(&shared, plain_session));
        // Once the guard is gone the session is an ordinary one again.
        drop(watch);
        assert!(hub.visible_to(&table, roots_session));
    }
}
