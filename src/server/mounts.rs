//! Builds the mount table from parsed [`MountSpec`]s: opens the shared backends once at start-up
//! (a mount that cannot be opened stops start-up with a clear message) and gives each session
//! its own [`CompositeBackend`], with fresh `memory` mounts and the shared ones.
//!
//! Store mounts naming the same database file or URL share one opened store (one connection
//! pool), each mount seeing its own namespace.
//!
//! A disk mount with `,overlay` gives each workspace its own [`OverlayBackend`] over the one
//! shared disk backend: a fresh memory layer per workspace, or, with `,overlay=sqlite:FILE`, the
//! layer of the workspace's name in FILE (one overlay per name, shared by the workspaces of that
//! name in this process, so two of them never hold diverging copies of one layer).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use thiserror::Error;

use crate::ground::config::{BackendSpec, MountSpec, OverlaySpec, display_prefix};
use crate::ground::grants::{Mode, View};
use crate::ground::path::VirtualPath;
use crate::ground::quota::{MemoryAccount, MemoryBudget};
use crate::observers::changes::ChangeHub;
use crate::storage::backend::{
    Backend, CompositeBackend, DiskBackend, DiskOptions, MemoryBackend, Mount, OverlayBackend,
    ShellBackend, StoreBackend,
};
use crate::storage::store::{self, Namespace, PostgresStore, SqliteStore, Store};

/// What opening the disk mounts resolved of changes a crash cut short (see
/// `backend::disk::journal`), told once, in the next tool answer of any session.
static RECOVERY_NOTES: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// The same changes, for the audit log (see [`take_recoveries`]).
static RECOVERIES: Mutex<Vec<Recovery>> = Mutex::new(Vec::new());

/// A change of several files that a crash cut short, resolved when its mount was opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovery {
    /// The mount.
    pub prefix: String,
    /// The tool whose change it was: `commit` on the base of an overlay mount, `apply_patch`
    /// on a plain disk mount (the only tools that journal a change).
    pub tool: &'static str,
    /// How many files the change planned.
    pub files: usize,
    /// Rolled back (else completed: it had been decided).
    pub rolled_back: bool,
    /// The planned files, as virtual paths (under `prefix`).
    pub paths: Vec<String>,
}

/// Words the agent reads about the unfinished changes of mount `prefix` (made by `tool`)
/// resolved at start.
fn note_resolved(
    prefix: &str,
    tool: &'static str,
    resolved: &[crate::storage::backend::disk::journal::Resolved],
) {
    if resolved.is_empty() {
        return;
    }
    let mut notes = RECOVERY_NOTES
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let mut recoveries = RECOVERIES.lock().unwrap_or_else(PoisonError::into_inner);
    for one in resolved {
        notes.push(if one.rolled_back {
            format!(
                "Note: the server was stopped (a crash or a kill) in the middle of a change of {} file(s) on the mount {prefix} by {tool}; that change was rolled back at this start, so those files are all as they were before it. Read them again before editing, and make the change again if it is still wanted.",
                one.files
            )
        } else {
            format!(
                "Note: the server was stopped (a crash or a kill) just after a change of {} file(s) on the mount {prefix} by {tool} was decided; it was completed at this start, so those files are all as after it.",
                one.files
            )
        });
        recoveries.push(Recovery {
            prefix: prefix.to_owned(),
            tool,
            files: one.files,
            rolled_back: one.rolled_back,
            paths: one
                .paths
                .iter()
                .map(|p| match prefix.trim_end_matches('/') {
                    "" => p.clone(),
                    mount => format!("{mount}{p}"),
                })
                .collect(),
        });
    }
}

/// The changes resolved at start not yet taken (for the audit log: each recorded once).
pub fn take_recoveries() -> Vec<Recovery> {
    std::mem::take(&mut *RECOVERIES.lock().unwrap_or_else(PoisonError::into_inner))
}

/// The notes of [`note_resolved`] not told yet, as one text; `None` once told.
pub fn take_recovery_notes() -> Option<String> {
    let mut notes = RECOVERY_NOTES
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if notes.is_empty() {
        return None;
    }
    Some(std::mem::take(&mut *notes).join("\n"))
}

/// A mount that could not be opened.
#[derive(Debug, Error)]
#[error("cannot open mount {prefix}: {reason}")]
pub struct OpenError {
    /// The mount prefix.
    pub prefix: String,
    /// Why.
    pub reason: String,
}

#[derive(Debug, Clone)]
enum Opened {
    /// A fresh memory backend per session.
    PerSession,
    /// One backend shared by every session.
    Shared(Arc<dyn Backend>),
    /// A shared base with one layer per workspace.
    Overlay {
        /// The disk backend every layer lies over.
        base: Arc<dyn Backend>,
        /// The disk mount's `no-ignore`: layer files follow the same rule.
        no_ignore: bool,
        /// Where the layers are kept.
        layers: LayerHome,
    },
}

/// Where the layers of one overlay mount live.
#[derive(Debug, Clone)]
enum LayerHome {
    /// A fresh memory layer per workspace.
    Memory,
    /// Persistent layers in a SQLite file, one per workspace name; the overlays open now, by
    /// name.
    Sqlite {
        store: Arc<dyn Store>,
        open: Arc<Mutex<HashMap<String, Weak<OverlayBackend>>>>,
    },
}

/// A sentence the server's instructions end with, set once at start-up (see
/// `serve::set_startup_note`).
pub(crate) static STARTUP_NOTE: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// The name a workspace's layers are kept under when no HTTP principal names it (stdio).
pub const LOCAL_WORKSPACE: &str = "local";

/// The opened mount table.
#[derive(Debug, Clone)]
pub struct MountTable {
    mounts: Vec<(MountSpec, Opened)>,
    /// Whether a client's MCP roots replace this table's disk mounts (the default table: no
    /// `--mount` was given). A table the operator gave is never widened by a client.
    follows_client_roots: bool,
    /// Where every change of these mounts is announced.
    changes: Arc<ChangeHub>,
    /// Where every change through a tool is logged (`--audit`), when anywhere.
    audit: Option<Arc<crate::storage::audit::AuditLog>>,
    /// What all workspaces together may hold in memory (`--memory-budget`).
    memory: Arc<MemoryBudget>,
}

impl MountTable {
    /// Opens every mount of `specs`.
    pub async fn open(specs: Vec<MountSpec>) -> Result<Self, OpenError> {
        let changes = Arc::new(ChangeHub::new(&specs));
        let mut mounts = Vec::with_capacity(specs.len());
        let mut stores: HashMap<String, Arc<dyn Store>> = HashMap::new();
        for spec in specs {
            let opened =
                match &spec.backend {
                    BackendSpec::Memory => Opened::PerSession,
                    BackendSpec::Disk {
                        dir,
                        no_ignore,
                        overlay,
                    } => {
                        let dir = dir.clone();
                        let options = DiskOptions {
                            no_ignore: *no_ignore,
                            ..DiskOptions::default()
                        };
                        let opened =
                            tokio::task::spawn_blocking(move || DiskBackend::open(&dir, options))
                                .await;
                        if let Ok(Ok(backend)) = &opened {
                            let tool = if overlay.is_some() {
                                "commit"
                            } else {
                                "apply_patch"
                            };
                            note_resolved(&spec.display_prefix(), tool, &backend.take_resolved());
                        }
                        match opened {
                            Ok(Ok(backend)) => match overlay {
                                None => Opened::Shared(Arc::new(backend)),
                                Some(layers) => Opened::Overlay {
                                    base: Arc::new(backend),
                                    no_ignore: *no_ignore,
                                    layers: open_layers(layers, &mut stores).await.map_err(
                                        |error| OpenError {
                                            prefix: spec.display_prefix(),
                                            reason: format!("overlay layers: {error}"),
                                        },
                                    )?,
                                },
                            },
                            Ok(Err(error)) => {
                                return Err(OpenError {
                                    prefix: spec.display_prefix(),
                                    reason: error.to_string(),
                                });
                            }
                            Err(error) => {
                                return Err(OpenError {
                                    prefix: spec.display_prefix(),
                                    reason: error.to_string(),
                                });
                            }
                        }
                    }
                    BackendSpec::Shell { name, dir, command } => {
                        // Started now, as a store is connected now: a target that cannot be
                        // reached stops start-up with the reason, not the first tool call.
                        let backend = ShellBackend::new(name, command.clone(), dir);
                        backend.probe().await.map_err(|reason| OpenError {
                            prefix: spec.display_prefix(),
                            reason,
                        })?;
                        // What killed writers left, removed before any tool touches the mount
                        // (as a disk mount sweeps its own); a sweep that fails stops nothing.
                        match backend.sweep_stale_temp_files().await {
                            Ok(0) => {}
                            Ok(removed) => tracing::info!(
                                mount = %spec.display_prefix(),
                                removed,
                                "removed temporary files left by a killed writer"
                            ),
                            Err(error) => tracing::warn!(
                                mount = %spec.display_prefix(),
                                %error,
                                "could not sweep stale temporary files"
                            ),
                        }
                        Opened::Shared(Arc::new(backend))
                    }
                    // Built without a request: a bucket that cannot be reached (or credentials that
                    // are wrong) fails that mount's calls with one line, and the others serve.
                    BackendSpec::Object(object) => {
                        let backend = crate::storage::backend::ObjectBackend::open(object)
                            .map_err(|reason| OpenError {
                                prefix: spec.display_prefix(),
                                reason,
                            })?;
                        Opened::Shared(Arc::new(backend))
                    }
                    BackendSpec::Sqlite { .. } | BackendSpec::Postgres { .. } => {
                        let backend = open_store_mount(&spec.backend, &mut stores).await.map_err(
                            |error| OpenError {
                                prefix: spec.display_prefix(),
                                reason: match error {
                                    store::Error::Unavailable(message) => {
                                        format!("store unavailable: {message}")
                                    }
                                    other => other.to_string(),
                                },
                            },
                        )?;
                        Opened::Shared(backend)
                    }
                };
            mounts.push((spec, opened));
        }
        Ok(Self {
            mounts,
            follows_client_roots: false,
            changes,
            audit: None,
            memory: Arc::new(MemoryBudget::unlimited()),
        })
    }

    /// Lets clients that offer MCP roots have them mounted in place of this table's disk
    /// mounts (see `roots.rs`): for the default table only, never for one given with `--mount`.
    pub fn follow_client_roots(mut self) -> Self {
        self.follows_client_roots = true;
        self
    }

    /// Whether client roots replace this table's disk mounts.
    pub fn follows_client_roots(&self) -> bool {
        self.follows_client_roots
    }

    /// The prefixes of the disk mounts, which client roots replace.
    pub fn disk_prefixes(&self) -> Vec<VirtualPath> {
        self.mounts
            .iter()
            .filter(|(spec, _)| matches!(spec.backend, BackendSpec::Disk { .. }))
            .map(|(spec, _)| spec.prefix.clone())
            .collect()
    }

    /// Logs every change through a tool to `audit` (`--audit`; `None`: off).
    pub fn with_audit(mut self, audit: Option<Arc<crate::storage::audit::AuditLog>>) -> Self {
        self.audit = audit;
        self
    }

    /// Holds all workspaces of this table together to `budget` bytes of memory
    /// (`--memory-budget`; unlimited until set).
    pub fn with_memory_budget(mut self, budget: u64) -> Self {
        self.memory = Arc::new(MemoryBudget::new(budget));
        self
    }

    /// The server-wide memory budget every workspace's account draws on.
    pub fn memory_budget(&self) -> &Arc<MemoryBudget> {
        &self.memory
    }

    /// The audit log, when the changes are logged.
    pub fn audit(&self) -> Option<&Arc<crate::storage::audit::AuditLog>> {
        self.audit.as_ref()
    }

    /// A new session over this table: its own view ([`MountTable::session_backend`]) with the
    /// table's audit log.
    pub fn new_session(
        &self,
        write_options: crate::state::session::WriteOptions,
    ) -> crate::state::session::Session {
        self.new_workspace_session(LOCAL_WORKSPACE, write_options)
    }

    /// [`Self::new_session`] for the workspace named `workspace`: its overlay mounts get that
    /// workspace's layer (see [`Self::workspace_backend`]).
    pub fn new_workspace_session(
        &self,
        workspace: &str,
        write_options: crate::state::session::WriteOptions,
    ) -> crate::state::session::Session {
        self.new_granted_session(workspace, write_options, None)
    }

    /// [`Self::new_workspace_session`] seen through a principal's grants (issue 43; `None`:
    /// everything): the mounts the view hides are replaced by empty ones that answer "not
    /// found" and are never listed, those it makes read-only refuse changes naming the grant.
    pub fn new_granted_session(
        &self,
        workspace: &str,
        write_options: crate::state::session::WriteOptions,
        view: Option<Arc<View>>,
    ) -> crate::state::session::Session {
        let account = MemoryAccount::new(write_options.limits.memory_quota, self.memory.clone());
        let backend = self.granted_backend(workspace, account.clone(), view.as_deref());
        crate::state::session::Session::accounted(Arc::new(backend), write_options, account)
            .with_audit(self.audit.clone())
            .with_view(view)
    }

    /// The prefixes of every mount, for [`crate::ground::grants::Grants::view`].
    pub fn prefixes(&self) -> Vec<VirtualPath> {
        self.mounts
            .iter()
            .map(|(spec, _)| spec.prefix.clone())
            .collect()
    }

    /// The disk mounts' (and overlays') host directories, canonical, for
    /// [`crate::ground::grants::Grants::nested_conflict`].
    pub fn host_dirs(&self) -> Vec<(VirtualPath, std::path::PathBuf)> {
        let specs: Vec<MountSpec> = self.mounts.iter().map(|(spec, _)| spec.clone()).collect();
        crate::ground::config::host_dirs(&specs)
    }

    /// The hub announcing changes of these mounts to subscribers.
    pub fn changes(&self) -> &Arc<ChangeHub> {
        &self.changes
    }

    /// A new session's view: fresh memory mounts, shared everything else; overlay mounts with
    /// the layer of the workspace [`LOCAL_WORKSPACE`].
    pub fn session_backend(&self) -> CompositeBackend {
        self.workspace_backend(LOCAL_WORKSPACE)
    }

    /// A new workspace's view: fresh memory mounts, shared everything else, and for each
    /// overlay mount the layer of the workspace named `workspace` (a fresh one in memory).
    pub fn workspace_backend(&self, workspace: &str) -> CompositeBackend {
        self.accounted_backend(workspace, MemoryAccount::unlimited())
    }

    /// [`Self::workspace_backend`] whose memory mounts and in-memory overlay layers count
    /// against `account` (the workspace's quota, issue 34).
    pub fn accounted_backend(
        &self,
        workspace: &str,
        account: Arc<MemoryAccount>,
    ) -> CompositeBackend {
        self.granted_backend(workspace, account, None)
    }

    /// [`Self::accounted_backend`] seen through `view` (see [`Self::new_granted_session`]).
    pub fn granted_backend(
        &self,
        workspace: &str,
        account: Arc<MemoryAccount>,
        view: Option<&View>,
    ) -> CompositeBackend {
        let memory = || Arc::new(MemoryBackend::accounted(account.clone()));
        let mut overlays = Vec::new();
        let mut hidden = BTreeSet::new();
        let mut read_only = BTreeMap::new();
        if let Some(view) = view {
            // The root is routed to even when no mount is there: hidden unless granted.
            if view.mount(&VirtualPath::root()).is_none() {
                hidden.insert(VirtualPath::root());
            }
        }
        let mounts = self
            .mounts
            .iter()
            .map(|(spec, opened)| {
                let access = view.map(|view| view.mount(&spec.prefix));
                match access {
                    // Hidden: an empty backend of its own, nothing of the mount's reachable.
                    Some(None) => {
                        hidden.insert(spec.prefix.clone());
                        return Mount {
                            prefix: spec.prefix.clone(),
                            backend: Arc::new(MemoryBackend::new()),
                            read_only: true,
                        };
                    }
                    Some(Some((Mode::ReadOnly, grant))) if !spec.read_only => {
                        read_only.insert(spec.prefix.clone(), grant.to_owned());
                    }
                    _ => {}
                }
                let granted_read_only = read_only.contains_key(&spec.prefix);
                Mount {
                    prefix: spec.prefix.clone(),
                    backend: match opened {
                        Opened::PerSession => memory() as Arc<dyn Backend>,
                        Opened::Shared(backend) => backend.clone(),
                        Opened::Overlay {
                            base,
                            layers,
                            no_ignore,
                        } => {
                            let overlay =
                                layers.overlay(base, &spec.prefix, workspace, *no_ignore, &account);
                            // A read-only grant leaves nothing to review or commit.
                            if !granted_read_only {
                                overlays.push((spec.prefix.clone(), overlay.clone()));
                            }
                            overlay as Arc<dyn Backend>
                        }
                    },
                    read_only: spec.read_only || granted_read_only,
                }
            })
            .collect();
        CompositeBackend::new(mounts, || memory() as Arc<dyn Backend>)
            .with_overlays(overlays)
            .with_grants(hidden, read_only)
    }

    /// Whether any mount is an overlay (the review tools are served then).
    pub fn has_overlay(&self) -> bool {
        self.mounts
            .iter()
            .any(|(_, opened)| matches!(opened, Opened::Overlay { .. }))
    }

    /// The server's instructions through a principal's grants (`None`: every mount): the
    /// mounts it sees and the start-up note.
    pub fn instructions_seen(&self, view: Option<&View>) -> String {
        let note = STARTUP_NOTE
            .get()
            .map(|note| format!("\n{note}"))
            .unwrap_or_default();
        format!(
            "mountfs: one file system made of several stores. Paths are absolute virtual paths with '/' separators. Mounts:\n{}\nRead a file before editing or overwriting it.{note}",
            self.describe_seen(view)
        )
    }

    /// One line per mount, for the server's instructions and the start-up log.
    pub fn describe(&self) -> String {
        self.describe_seen(None)
    }

    /// [`Self::describe`] through a principal's grants: only the mounts it sees, a read-only
    /// grant said so.
    pub fn describe_seen(&self, view: Option<&View>) -> String {
        let mut lines: Vec<String> = self
            .mounts
            .iter()
            .filter_map(|(spec, _)| {
                let granted = match view {
                    None => None,
                    Some(view) => Some(view.mount(&spec.prefix)?),
                };
                let read_only = spec.read_only || matches!(granted, Some((Mode::ReadOnly, _)));
                Some(format!(
                    "{} = {}{}",
                    display_prefix(&spec.prefix),
                    kind(&spec.backend),
                    if read_only { " (read-only)" } else { "" }
                ))
            })
            .collect();
        lines.sort();
        lines.join("\n")
    }
}

impl LayerHome {
    /// The overlay of `base` (mounted at `prefix`) for the workspace `workspace`.
    fn overlay(
        &self,
        base: &Arc<dyn Backend>,
        prefix: &VirtualPath,
        workspace: &str,
        no_ignore: bool,
        account: &Arc<MemoryAccount>,
    ) -> Arc<OverlayBackend> {
        match self {
            Self::Memory => Arc::new(
                OverlayBackend::in_memory_accounted(base.clone(), account.clone())
                    .with_no_ignore(no_ignore),
            ),
            Self::Sqlite { store, open } => {
                let (files, marks) = match layer_namespaces(prefix, workspace) {
                    Ok(names) => names,
                    Err(error) => {
                        // Not reached: the names are built from valid parts.
                        tracing::error!(%error, "overlay layer name; this workspace's layer is kept in memory");
                        return Arc::new(
                            OverlayBackend::in_memory_accounted(base.clone(), account.clone())
                                .with_no_ignore(no_ignore),
                        );
                    }
                };
                let mut open = open.lock().unwrap_or_else(PoisonError::into_inner);
                if let Some(overlay) = open.get(files.as_str()).and_then(Weak::upgrade) {
                    return overlay;
                }
                open.retain(|_, overlay| overlay.strong_count() > 0);
                let overlay = Arc::new(
                    OverlayBackend::persistent(base.clone(), store.clone(), files.clone(), marks)
                        .with_no_ignore(no_ignore),
                );
                open.insert(files.as_str().to_owned(), Arc::downgrade(&overlay));
                overlay
            }
        }
    }
}

/// The store namespaces of one workspace's layer of the overlay mounted at `prefix`: its files
/// and its marks. Readable when the workspace name is a valid namespace part, else a hash of it.
fn layer_namespaces(
    prefix: &VirtualPath,
    workspace: &str,
) -> Result<(Namespace, Namespace), store::Error> {
    use sha2::{Digest, Sha256};
    let mount = hex::encode(&Sha256::digest(prefix.as_str().as_bytes())[..4]);
    let name = if workspace.len() <= 40 && crate::ground::config::valid_namespace(workspace) {
        workspace.to_owned()
    } else {
        format!(
            "h{}",
            hex::encode(&Sha256::digest(workspace.as_bytes())[..12])
        )
    };
    let namespace = |kind: &str| Namespace::new(&format!("overlay-{kind}-{mount}.{name}"));
    Ok((namespace("files")?, namespace("marks")?))
}

/// Opens where an overlay mount's layers live.
async fn open_layers(
    spec: &OverlaySpec,
    stores: &mut HashMap<String, Arc<dyn Store>>,
) -> Result<LayerHome, store::Error> {
    match spec {
        OverlaySpec::Memory => Ok(LayerHome::Memory),
        OverlaySpec::Sqlite(file) => {
            let identity = format!("sqlite:{}", file.display());
            let store = match stores.get(&identity) {
                Some(store) => store.clone(),
                None => {
                    let opened: Arc<dyn Store> = Arc::new(SqliteStore::open(file).await?);
                    stores.insert(identity, opened.clone());
                    opened
                }
            };
            Ok(LayerHome::Sqlite {
                store,
                open: Arc::default(),
            })
        }
    }
}

/// Opens (or reuses, for the same file or URL) the store of a store mount and wraps its
/// namespace as a backend.
async fn open_store_mount(
    spec: &BackendSpec,
    stores: &mut HashMap<String, Arc<dyn Store>>,
) -> Result<Arc<dyn Backend>, store::Error> {
    let (identity, namespace) = match spec {
        BackendSpec::Sqlite { file, namespace } => {
            (format!("sqlite:{}", file.display()), namespace)
        }
        BackendSpec::Postgres { url, namespace } => (format!("postgres:{url}"), namespace),
        _ => return Err(store::Error::Query("not a store mount".to_owned())),
    };
    let namespace = Namespace::new(namespace)?;
    let store = match stores.get(&identity) {
        Some(store) => store.clone(),
        None => {
            let opened: Arc<dyn Store> = match spec {
                BackendSpec::Sqlite { file, .. } => Arc::new(SqliteStore::open(file).await?),
                BackendSpec::Postgres { url, .. } => Arc::new(PostgresStore::connect(url).await?),
                _ => return Err(store::Error::Query("not a store mount".to_owned())),
            };
            stores.insert(identity, opened.clone());
            opened
        }
    };
    Ok(Arc::new(StoreBackend::new(store, namespace)))
}

fn kind(spec: &BackendSpec) -> &'static str {
    match spec {
        BackendSpec::Memory => "memory (per session)",
        BackendSpec::Disk { overlay: None, .. } => "disk",
        BackendSpec::Disk {
            overlay: Some(OverlaySpec::Memory),
            ..
        } => "disk, overlay (changes kept per workspace in memory until commit)",
        BackendSpec::Disk {
            overlay: Some(OverlaySpec::Sqlite(_)),
            ..
        } => "disk, overlay (changes kept per workspace in SQLite until commit)",
        BackendSpec::Sqlite { .. } => "SQLite store",
        BackendSpec::Postgres { .. } => "PostgreSQL store",
        BackendSpec::Shell { .. } => "shell (a directory in a target reached through sh)",
        BackendSpec::Object(_) => "object storage (keys under a bucket prefix)",
    }
}
