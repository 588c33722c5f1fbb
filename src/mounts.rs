//! Builds the mount table from parsed [`MountSpec`]s: opens the shared backends once at start-up
//! (a mount that cannot be opened stops start-up with a clear message) and gives each session
//! its own [`CompositeBackend`], with fresh `memory` mounts and the shared ones.

use std::sync::Arc;

use thiserror::Error;

use crate::backend::{
    Backend, CompositeBackend, FilesystemBackend, FilesystemOptions, Mount, StateBackend,
};
use crate::config::{BackendSpec, MountSpec, display_prefix};

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
}

impl MountTable {
    /// Opens every mount of `specs`.
    pub async fn open(specs: Vec<MountSpec>) -> Result<Self, OpenError> {
        let mut mounts = Vec::with_capacity(specs.len());
        for spec in specs {
            let opened = match &spec.backend {
                BackendSpec::Memory => Opened::PerSession,
                BackendSpec::Disk { dir, no_ignore } => {
                    let dir = dir.clone();
                    let options = FilesystemOptions {
                        no_ignore: *no_ignore,
                    };
                    let opened =
                        tokio::task::spawn_blocking(move || FilesystemBackend::open(&dir, options))
                            .await;
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
                other => {
                    return Err(OpenError {
                        prefix: spec.display_prefix(),
                        reason: format!(
                            "{} mounts are not available in this build yet",
                            kind(other)
                        ),
                    });
                }
            };
            mounts.push((spec, opened));
        }
        Ok(Self { mounts })
    }

    /// A new session's view: fresh memory mounts, shared everything else.
    pub fn session_backend(&self) -> CompositeBackend {
        let mounts = self
            .mounts
            .iter()
            .map(|(spec, opened)| Mount {
                prefix: spec.prefix.clone(),
                backend: match opened {
                    Opened::PerSession => Arc::new(StateBackend::new()) as Arc<dyn Backend>,
                    Opened::Shared(backend) => backend.clone(),
                },
                read_only: spec.read_only,
            })
            .collect();
        CompositeBackend::new(mounts, || Arc::new(StateBackend::new()))
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

fn kind(spec: &BackendSpec) -> &'static str {
    match spec {
        BackendSpec::Memory => "memory (per session)",
        BackendSpec::Disk { .. } => "disk",
        BackendSpec::Sqlite { .. } => "SQLite store",
        BackendSpec::Postgres { .. } => "PostgreSQL store",
    }
}
