//! A change of several files of a store as one database transaction: the store keeps no
//! journal of its own, so [`StoreTransaction`] applies the whole plan at once
//! ([`ChangeJournal::apply_at_once`](super::super::ChangeJournal::apply_at_once)) and refuses
//! the one-by-one steps a disk journal takes.

use super::*;

/// A change of several files of a store, made in one database transaction (see
/// [`StoreBackend::begin_changes`]).
#[derive(Debug)]
pub(super) struct StoreTransaction {
    pub(super) backend: StoreBackend,
    pub(super) paths: Vec<VirtualPath>,
}

impl StoreTransaction {
    fn one_by_one(&self, index: usize) -> Error {
        Error::Unsupported {
            path: self
                .paths
                .get(index)
                .cloned()
                .unwrap_or_else(VirtualPath::root),
            reason: "a store changes several files in one transaction, not one by one".into(),
        }
    }

    fn path(&self, index: usize) -> Result<&VirtualPath> {
        self.paths.get(index).ok_or_else(|| Error::Unavailable {
            message: format!("store transaction: no planned file {index}"),
        })
    }
}

#[async_trait]
impl super::super::ChangeJournal for StoreTransaction {
    fn location(&self) -> std::path::PathBuf {
        std::path::PathBuf::new()
    }

    async fn apply_at_once(
        &self,
        changes: &[(Option<&[u8]>, Option<Version>)],
    ) -> Option<std::result::Result<Vec<Option<Version>>, (usize, Error)>> {
        let mut ops = Vec::with_capacity(changes.len());
        for (index, (content, before)) in changes.iter().enumerate() {
            let path = match self.path(index) {
                Ok(path) => path,
                Err(error) => return Some(Err((index, error))),
            };
            let mismatch = || (index, Error::VersionMismatch { path: path.clone() });
            let version = match before {
                Some(v) => match v.as_str().parse::<i64>() {
                    Ok(v) => Some(v),
                    Err(_) => return Some(Err(mismatch())),
                },
                None => None,
            };
            match content {
                Some(content) => {
                    // The shape checks of `write`, read before the transaction as there.
                    if let Err(error) = self.backend.check_shape(path).await {
                        return Some(Err((index, error)));
                    }
                    ops.push(store::BatchOp::Put {
                        key: path.as_str().to_owned(),
                        content: content.to_vec(),
                        condition: match version {
                            Some(v) => PutCondition::IfVersion(v),
                            None => PutCondition::CreateOnly,
                        },
                    });
                }
                None => match version {
                    Some(version) => ops.push(store::BatchOp::Delete {
                        key: path.as_str().to_owned(),
                        version,
                    }),
                    None => return Some(Err(mismatch())),
                },
            }
        }
        let done = self
            .backend
            .store
            .apply_batch(&self.backend.namespace, ops)
            .await;
        Some(match done {
            Ok(versions) => Ok(versions.into_iter().map(|v| v.map(version_of)).collect()),
            Err((index, error)) => {
                let path = self
                    .paths
                    .get(index)
                    .cloned()
                    .unwrap_or_else(VirtualPath::root);
                Err((index, failure(&path, error)))
            }
        })
    }

    /// Never file by file: [`Self::apply_at_once`] makes the whole change.
    async fn write(&self, index: usize, _content: &[u8], _mode: WriteMode) -> Result<WriteOutcome> {
        Err(self.one_by_one(index))
    }

    /// Never file by file: [`Self::apply_at_once`] makes the whole change.
    async fn delete(&self, index: usize, _version: &Version) -> Result<()> {
        Err(self.one_by_one(index))
    }

    async fn mark_committed(&self) -> Result<()> {
        Ok(())
    }

    async fn finish(&self) -> Result<()> {
        Ok(())
    }

    async fn roll_back(&self, _applied: &[(usize, Option<Version>)]) -> Vec<(usize, Error)> {
        Vec::new()
    }
}
