//! Builds the mount table from parsed [`MountSpec`]s: opens the shared backends once at start-up
//! (a mount that cannot be opened stops start-up with a clear message) and gives each session
//! its own [`CompositeBackend`], with fresh `memory` mounts and the shared ones.
//!
//! Store mounts naming the same database file or URL share one opened store (one connection
//! pool), each mount seeing its own namespace.

use std::collections::HashMap;
use std::sync::Arc;

use thiserror::Error;

use crate::backend::{
    Backend, CompositeBackend, DiskBackend, DiskOptions, MemoryBackend, Mount, StoreBackend,
};
use crate::changes::ChangeHub;
use crate::config::{BackendSpec, MountSpec, display_prefix};
use crate::path::VirtualPath;
use crate::store::{self, Namespace, PostgresStore, SqliteStore, Store};

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
}

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
    audit: Option<Arc<crate::audit::AuditLog>>,
}

impl MountTable {
    /// Opens every mount of `specs`.
    pub async fn open(specs: Vec<MountSpec>) -> Result<Self, OpenError> {
        let changes = Arc::new(ChangeHub::new(&specs));
        let mut mounts = Vec::with_capacity(specs.len());
        let mut stores: HashMap<String, Arc<dyn Store>> = HashMap::new();
        for spec in specs {
            let opened = match &spec.backend {
                BackendSpec::Memory => Opened::PerSession,
                BackendSpec::Disk { dir, no_ignore } => {
                    let dir = dir.clone();
                    let options = DiskOptions {
                        no_ignore: *no_ignore,
                    };
                    let opened =
                        tokio::task::spawn_blocking(move || DiskBackend::open(&dir, options)).await;
                    match opened {
                        Ok(Ok(backend)) => Opened::Shared(Arc::new(backend)),
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
                BackendSpec::Sqlite { .. } | BackendSpec::Postgres { .. } => {
                    let backend =
                        open_store_mount(&spec.backend, &mut stores)
                            .await
                            .map_err(|error| OpenError {
                                prefix: spec.display_prefix(),
                                reason: match error {
                                    store::Error::Unavailable(message) => {
                                        format!("store unavailable: {message}")
                                    }
                                    other => other.to_string(),
                                },
                            })?;
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
    pub fn with_audit(mut self, audit: Option<Arc<crate::audit::AuditLog>>) -> Self {
        self.audit = audit;
        self
    }

    /// The audit log, when the changes are logged.
    pub fn audit(&self) -> Option<&Arc<crate::audit::AuditLog>> {
        self.audit.as_ref()
    }

    /// A new session over this table: its own view ([`MountTable::session_backend`]) with the
    /// table's audit log.
    pub fn new_session(
        &self,
        write_options: crate::session::WriteOptions,
    ) -> crate::session::Session {
        crate::session::Session::new(Arc::new(self.session_backend()), write_options)
            .with_audit(self.audit.clone())
    }

    /// The hub announcing changes of these mounts to subscribers.
    pub fn changes(&self) -> &Arc<ChangeHub> {
        &self.changes
    }

    /// A new session's view: fresh memory mounts, shared everything else.
    pub fn session_backend(&self) -> CompositeBackend {
        let mounts = self
            .mounts
            .iter()
            .map(|(spec, opened)| Mount {
                prefix: spec.prefix.clone(),
                backend: match opened {
                    Opened::PerSession => Arc::new(MemoryBackend::new()) as Arc<dyn Backend>,
                    Opened::Shared(backend) => backend.clone(),
                },
                read_only: spec.read_only,
            })
            .collect();
        CompositeBackend::new(mounts, || Arc::new(MemoryBackend::new()))
    }

    /// One line per mount, for the server's instructions and the start-up log.
    pub fn describe(&self) -> String {
        let mut lines: Vec<String> = self
            .mounts
            .iter()
            .map(|(spec, _)| {
                format!(
                    "{} = {}{}",
                    display_prefix(&spec.prefix),
                    kind(&spec.backend),
                    if spec.read_only { " (read-only)" } else { "" }
                )
            })
            .collect();
        lines.sort();
        lines.join("\n")
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
        BackendSpec::Disk { .. } => "disk",
        BackendSpec::Sqlite { .. } => "SQLite store",
        BackendSpec::Postgres { .. } => "PostgreSQL store",
    }
}
