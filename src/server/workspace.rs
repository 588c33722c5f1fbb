//! Workspaces: whose [`Session`] (memory mounts, read ledger, undo history, arrival order) a
//! request uses when one server serves many agents over HTTP.
//!
//! A workspace belongs to the MCP session when the client has one (`Mcp-Session-Id`, MCP
//! 2025-11-25), otherwise to the authenticated principal (stateless MCP 2026-07-28). Sessions
//! are owned by the principal that opened them: another principal presenting the same session
//! id is told the session does not exist. Workspaces unused for the idle timeout are dropped
//! by [`Workspaces::sweep`]; the number of sessions is capped.
//!
//! stdio needs none of this: its one process is its one workspace (see `lib.rs`). The HTTP
//! transport (`http/`) decides which key a request has; this module only keeps the map.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::ground::grants::{Grants, View};
use crate::server::mounts::MountTable;
use crate::state::session::{Session, WriteOptions};

/// Who a request comes from: the NAME of its static bearer token (see `http::auth`), or the
/// principal claim of its OAuth access token (see `http::oauth`), with the scopes that token
/// granted.
///
/// A principal is its name: two requests of one name are one principal (one stateless
/// workspace, the owner of the same sessions) whatever scopes their tokens carry, so equality
/// and hashing look at the name only. The scopes are those of the request at hand: read them
/// from the request's principal, never from a stored owner.
#[derive(Debug, Clone)]
pub struct Principal(pub Arc<str>, Option<Arc<[String]>>);

impl Principal {
    /// A principal with no OAuth scopes (a static token's).
    pub fn named(name: impl Into<Arc<str>>) -> Self {
        Self(name.into(), None)
    }

    /// A principal from an OAuth access token granting `scopes`.
    pub fn with_scopes(name: impl Into<Arc<str>>, scopes: Vec<String>) -> Self {
        Self(name.into(), Some(scopes.into()))
    }

    /// The scopes of the OAuth token the request carried; `None` for a static token.
    pub fn scopes(&self) -> Option<&[String]> {
        self.1.as_deref()
    }
}

impl PartialEq for Principal {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

impl Eq for Principal {}

impl std::hash::Hash for Principal {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

impl std::fmt::Display for Principal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a workspace is keyed by.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum WorkspaceKey {
    /// An MCP session (`Mcp-Session-Id`).
    Session(Arc<str>),
    /// A principal's stateless requests.
    Principal(Principal),
}

/// Why a session could not be opened or used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkspaceError {
    /// The session id is unknown, expired, or owned by another principal (the same answer for
    /// all three, so that ids cannot be probed).
    #[error(
        "Session not found: it expired after being idle, was closed, or was never opened by this token. Start a new session (send initialize again)"
    )]
    UnknownSession,
    /// The session's principal now holds other grants (a token with other scopes): the
    /// session was closed, with its subscriptions (review of issue 43: a subscription kept
    /// the grants it was opened under). Told as [`WorkspaceError::UnknownSession`] is.
    #[error(
        "Session not found: it was opened under other grants than this token holds, and is closed. Start a new session (send initialize again)"
    )]
    Regranted,
    /// `--max-sessions` are open.
    #[error(
        "Too many sessions: this server holds at most {0} (--max-sessions). Close an unused session (HTTP DELETE with its Mcp-Session-Id) or retry when an idle one has expired"
    )]
    TooManySessions(usize),
    /// The server's `--memory-budget` is (nearly) used up: a new workspace could not hold a
    /// single file (issue 34).
    #[error(
        "Server memory budget used up: all workspaces together hold {used} of {budget} (--memory-budget). Retry later, when other sessions have freed memory or ended, or ask the operator to raise --memory-budget"
    )]
    MemoryBudget {
        /// Held, as people read it.
        used: String,
        /// The budget, as people read it.
        budget: String,
    },
}

#[derive(Debug)]
struct Entry {
    session: Arc<Session>,
    owner: Principal,
    last_used: Instant,
}

impl Entry {
    /// Whether `view` is what this workspace was built to see (a principal whose OAuth scopes
    /// changed may be granted other mounts: its old workspace is not its own any more).
    fn sees_as(&self, view: Option<&Arc<View>>) -> bool {
        match (self.session.view(), view) {
            (Some(held), Some(wanted)) => Arc::ptr_eq(held, wanted) || **held == **wanted,
            (held, wanted) => held.is_none() && wanted.is_none(),
        }
    }
}

/// Limits of a [`Workspaces`] map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkspaceLimits {
    /// A workspace unused this long is dropped (`--idle-timeout`).
    pub idle_timeout: Duration,
    /// At most this many MCP sessions at once (`--max-sessions`).
    pub max_sessions: usize,
}

/// Every live workspace of one server (see the module doc).
#[derive(Debug)]
pub struct Workspaces {
    table: MountTable,
    write_options: WriteOptions,
    limits: WorkspaceLimits,
    /// Who sees which mounts (issue 43); empty: everybody everything.
    grants: Grants,
    /// The table's mount prefixes, for [`Grants::view`].
    prefixes: Vec<crate::ground::path::VirtualPath>,
    // One short-held std lock: every operation is a hash-map lookup or insert, never awaited.
    entries: Mutex<HashMap<WorkspaceKey, Entry>>,
    /// Each principal's view, computed once per name and scopes (grants are fixed at start), so
    /// a request finds it with one lookup instead of building it anew (issue 43's cost target).
    views: Mutex<HashMap<ViewKey, Arc<View>>>,
}

/// Who a cached view is for: the principal's name and its token's scopes.
type ViewKey = (Arc<str>, Option<Arc<[String]>>);

/// At most this many views are cached; past it the cache starts over (a flood of new OAuth
/// principals costs each a view computed again, never unbounded memory).
const MAX_CACHED_VIEWS: usize = 4096;

impl Workspaces {
    /// An empty map whose workspaces see `table` (fresh memory mounts each, shared others).
    pub fn new(table: MountTable, write_options: WriteOptions, limits: WorkspaceLimits) -> Self {
        Self {
            prefixes: table.prefixes(),
            table,
            write_options,
            limits,
            grants: Grants::default(),
            entries: Mutex::new(HashMap::new()),
            views: Mutex::new(HashMap::new()),
        }
    }

    /// The same map, each workspace seeing only what `grants` give its principal.
    pub fn with_grants(mut self, grants: Grants) -> Self {
        self.grants = grants;
        self.views = Mutex::new(HashMap::new());
        self
    }

    /// The grants every workspace is built with.
    pub fn grants(&self) -> &Grants {
        &self.grants
    }

    /// What `principal` (with the scopes of the request at hand) is granted; `None`: no grants.
    pub fn view_of(&self, principal: &Principal) -> Option<Arc<View>> {
        if self.grants.is_empty() {
            return None;
        }
        let key: ViewKey = (principal.0.clone(), principal.1.clone());
        let mut views = self.views.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(view) = views.get(&key) {
            return Some(view.clone());
        }
        let view = self
            .grants
            .view(&principal.0, principal.scopes(), &self.prefixes)?;
        if views.len() >= MAX_CACHED_VIEWS {
            views.clear();
        }
        views.insert(key, view.clone());
        Some(view)
    }

    /// The mount table every workspace starts from.
    pub fn table(&self) -> &MountTable {
        &self.table
    }

    /// The limits this map enforces.
    pub fn limits(&self) -> WorkspaceLimits {
        self.limits
    }

    /// A new workspace's state. Everything per workspace lives in the one [`Session`] (its
    /// backend with fresh memory mounts, ledger, undo history, arrival order), so a per-session
    /// mount table (client roots) attaches by giving that session another backend.
    ///
    /// Overlay mounts with persistent layers give it the layer named after `owner`: sessions
    /// of one principal share it, and it outlives them (and the server).
    fn fresh_session(&self, owner: &Principal, view: Option<Arc<View>>) -> Arc<Session> {
        Arc::new(
            self.table
                .new_granted_session(&owner.0, self.write_options.clone(), view),
        )
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<WorkspaceKey, Entry>> {
        // Each operation leaves the map consistent; a panic elsewhere cannot half-update it.
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether one more session may be opened now: fewer than `--max-sessions` are open, and
    /// the server's memory budget has room for one more workspace.
    pub fn check_session_room(&self) -> Result<(), WorkspaceError> {
        let sessions = self.session_count();
        if sessions >= self.limits.max_sessions {
            return Err(WorkspaceError::TooManySessions(self.limits.max_sessions));
        }
        self.check_memory_room()
    }

    fn check_memory_room(&self) -> Result<(), WorkspaceError> {
        let budget = self.table.memory_budget();
        if budget.is_exhausted() {
            return Err(WorkspaceError::MemoryBudget {
                used: crate::ground::quota::size(budget.used()),
                budget: crate::ground::quota::size(budget.budget()),
            });
        }
        Ok(())
    }

    /// Records a session the MCP library has just opened for `owner`, with a fresh workspace;
    /// refused when the limit was reached meanwhile (initializations racing past
    /// [`Workspaces::check_session_room`]), and the caller closes the session again.
    pub fn open_session(&self, id: &str, owner: &Principal) -> Result<(), WorkspaceError> {
        let session = self.fresh_session(owner, self.view_of(owner));
        let mut entries = self.lock();
        let sessions = entries
            .keys()
            .filter(|key| matches!(key, WorkspaceKey::Session(_)))
            .count();
        if sessions >= self.limits.max_sessions {
            return Err(WorkspaceError::TooManySessions(self.limits.max_sessions));
        }
        let entry = Entry {
            session,
            owner: owner.clone(),
            last_used: Instant::now(),
        };
        entries.insert(WorkspaceKey::Session(Arc::from(id)), entry);
        Ok(())
    }

    /// The workspace of session `id` used by `principal`; marks it used.
    pub fn session(&self, id: &str, principal: &Principal) -> Result<Arc<Session>, WorkspaceError> {
        let view = self.view_of(principal);
        let mut entries = self.lock();
        let key = WorkspaceKey::Session(Arc::from(id));
        match entries.get_mut(&key) {
            Some(entry) if entry.owner == *principal && entry.sees_as(view.as_ref()) => {
                entry.last_used = Instant::now();
                Ok(entry.session.clone())
            }
            Some(entry) if entry.owner == *principal => {
                // Its grants changed: nothing may go on under the old ones.
                let removed = entries.remove(&key);
                drop(entries);
                drop(removed);
                Err(WorkspaceError::Regranted)
            }
            _ => Err(WorkspaceError::UnknownSession),
        }
    }

    /// The stateless workspace of `principal`, made on first use; marks it used.
    pub fn principal(&self, principal: &Principal) -> Arc<Session> {
        let view = self.view_of(principal);
        let mut entries = self.lock();
        let key = WorkspaceKey::Principal(principal.clone());
        // Granted other mounts now (its token's scopes changed): a new workspace.
        let replaced = match entries.get(&key) {
            Some(entry) if !entry.sees_as(view.as_ref()) => entries.remove(&key),
            _ => None,
        };
        let entry = entries.entry(key).or_insert_with(|| Entry {
            session: self.fresh_session(principal, view),
            owner: principal.clone(),
            last_used: Instant::now(),
        });
        entry.last_used = Instant::now();
        let session = entry.session.clone();
        drop(entries);
        drop(replaced);
        session
    }

    /// Drops the workspace of session `id` (the client closed it); its memory goes back to
    /// the server's budget, and then to the system.
    pub fn close_session(&self, id: &str) {
        let removed = self.lock().remove(&WorkspaceKey::Session(Arc::from(id)));
        // Dropped outside the lock: freeing a workspace's memory can take a while.
        if removed.is_some() {
            drop(removed);
            crate::change::release_freed_memory_soon();
        }
    }

    /// Drops every workspace idle for longer than the idle timeout at `now`; returns the ids of
    /// the sessions dropped, for the caller to close in the MCP library too.
    pub fn sweep(&self, now: Instant) -> Vec<Arc<str>> {
        let mut closed = Vec::new();
        let mut dropped = 0;
        self.lock().retain(|key, entry| {
            let idle = now.saturating_duration_since(entry.last_used) > self.limits.idle_timeout;
            // A call still running holds the session: in use, not idle.
            let busy = Arc::strong_count(&entry.session) > 1;
            let keep = !idle || busy;
            if !keep && let WorkspaceKey::Session(id) = key {
                closed.push(id.clone());
            }
            dropped += usize::from(!keep);
            keep
        });
        if dropped > 0 {
            crate::change::release_freed_memory_soon();
        }
        closed
    }

    /// The ids of the sessions held.
    pub fn session_ids(&self) -> Vec<Arc<str>> {
        self.lock()
            .keys()
            .filter_map(|key| match key {
                WorkspaceKey::Session(id) => Some(id.clone()),
                WorkspaceKey::Principal(_) => None,
            })
            .collect()
    }

    /// How many MCP sessions are open.
    pub fn session_count(&self) -> usize {
        self.lock()
            .keys()
            .filter(|key| matches!(key, WorkspaceKey::Session(_)))
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ground::config;

    async fn workspaces(max_sessions: usize) -> Workspaces {
        let specs = config::parse_table(&["/=memory".to_owned()]).unwrap();
        let table = MountTable::open(specs).await.unwrap();
        Workspaces::new(
            table,
            WriteOptions::default(),
            WorkspaceLimits {
                idle_timeout: Duration::from_secs(60),
                max_sessions,
            },
        )
    }

    fn who(name: &str) -> Principal {
        Principal::named(name)
    }

    #[test]
    fn a_principal_is_its_name_whatever_its_scopes() {
        let scoped = Principal::with_scopes("alice", vec!["mountfs".to_owned()]);
        assert_eq!(scoped, who("alice"));
        assert_eq!(scoped.scopes(), Some(&["mountfs".to_owned()][..]));
        assert_eq!(who("alice").scopes(), None);
        assert_ne!(scoped, who("bob"));
    }

    /// A session used with a token whose scopes grant other mounts is closed, not only
    /// refused: its workspace (and, over HTTP, its MCP session and subscriptions) goes, so
    /// nothing keeps serving under the grants it was opened with.
    #[tokio::test]
    async fn a_session_whose_grants_changed_is_closed() {
        let grants = crate::ground::grants::Grants::new(
            crate::ground::grants::parse("scope:team=/").unwrap(),
        );
        let map = workspaces(4).await.with_grants(grants);
        let team = Principal::with_scopes("oauth:alice", vec!["team".to_owned()]);
        let plain = Principal::with_scopes("oauth:alice", vec!["mountfs".to_owned()]);
        map.open_session("s1", &team).unwrap();
        assert!(map.session("s1", &team).is_ok());
        assert_eq!(
            map.session("s1", &plain).unwrap_err(),
            WorkspaceError::Regranted
        );
        assert_eq!(map.session_count(), 0);
        assert_eq!(
            map.session("s1", &team).unwrap_err(),
            WorkspaceError::UnknownSession
        );
    }

    #[tokio::test]
    async fn a_session_is_only_found_by_its_owner() {
        let map = workspaces(4).await;
        map.open_session("s1", &who("alice")).unwrap();
        assert!(map.session("s1", &who("alice")).is_ok());
        assert_eq!(
            map.session("s1", &who("bob")).unwrap_err(),
            WorkspaceError::UnknownSession
        );
        assert_eq!(
            map.session("nope", &who("alice")).unwrap_err(),
            WorkspaceError::UnknownSession
        );
    }

    #[tokio::test]
    async fn principals_get_one_workspace_each() {
        let map = workspaces(4).await;
        let a1 = map.principal(&who("alice"));
        let a2 = map.principal(&who("alice"));
        let b = map.principal(&who("bob"));
        assert!(Arc::ptr_eq(&a1, &a2));
        assert!(!Arc::ptr_eq(&a1, &b));
        assert_eq!(
            map.session_count(),
            0,
            "principal workspaces are not sessions"
        );
        assert!(map.session_ids().is_empty());
        map.open_session("s1", &who("alice")).unwrap();
        assert_eq!(map.session_ids(), vec![Arc::<str>::from("s1")]);
    }

    #[tokio::test]
    async fn the_session_limit_is_enforced() {
        let map = workspaces(2).await;
        map.open_session("s1", &who("a")).unwrap();
        map.open_session("s2", &who("a")).unwrap();
        assert_eq!(
            map.check_session_room().unwrap_err(),
            WorkspaceError::TooManySessions(2)
        );
        assert_eq!(
            map.open_session("s3", &who("a")).unwrap_err(),
            WorkspaceError::TooManySessions(2)
        );
        map.close_session("s1");
        assert!(map.check_session_room().is_ok());
    }

    #[tokio::test]
    async fn idle_workspaces_are_swept_unless_busy() {
        let map = workspaces(4).await;
        map.open_session("idle", &who("a")).unwrap();
        map.open_session("busy", &who("a")).unwrap();
        map.principal(&who("b"));
        let held = map.session("busy", &who("a")).unwrap();
        let later = Instant::now() + Duration::from_secs(61);
        let closed = map.sweep(later);
        assert_eq!(closed, vec![Arc::<str>::from("idle")]);
        assert!(map.session("busy", &who("a")).is_ok());
        drop(held);
        assert_eq!(map.session_count(), 1);
        assert!(!map.lock().contains_key(&WorkspaceKey::Principal(who("b"))));
    }
}
