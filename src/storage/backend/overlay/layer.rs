//! The layer's own store: marks written through to a SQLite namespace (so a layer outlives
//! the process) and loaded back page by page.

use super::*;

/// Where the marks of a SQLite layer are written through.
#[derive(Debug, Clone)]
pub(super) struct Persist {
    pub(super) store: Arc<dyn Store>,
    pub(super) namespace: Namespace,
}

/// How many persisted marks one page loads.
pub(super) const LOAD_PAGE: usize = 1000;

impl OverlayBackend {
    pub(super) async fn save_mark(&self, path: &VirtualPath, mark: Option<Mark>) -> Result<()> {
        {
            let mut guard = self.lock_book();
            let book = Arc::make_mut(&mut guard);
            match &mark {
                Some(mark) => book.files.insert(path.as_str().to_owned(), mark.clone()),
                None => book.files.remove(path.as_str()),
            };
        }
        let Some(persist) = &self.persist else {
            return Ok(());
        };
        let key = format!("{FILE_KEY}{path}");
        let done = match mark {
            Some(mark) => persist
                .store
                .put(
                    &persist.namespace,
                    &key,
                    mark.encode().as_bytes(),
                    PutCondition::Overwrite,
                )
                .await
                .map(|_| ()),
            None => persist
                .store
                .delete(&persist.namespace, &key, None)
                .await
                .map(|_| ()),
        };
        done.map_err(|e| layer_failure(path, &e))
    }

    pub(super) async fn save_opaque(&self, dir: &VirtualPath, opaque: bool) -> Result<()> {
        {
            let mut guard = self.lock_book();
            let book = Arc::make_mut(&mut guard);
            if opaque {
                book.opaque.insert(dir.as_str().to_owned());
            } else {
                book.opaque.remove(dir.as_str());
            }
        }
        if opaque {
            // Deleted whole again: what discard showed below it is hidden with the rest.
            for shown in self.shown_under(dir).await? {
                self.save_shown(&shown, false).await?;
            }
        }
        self.persist_mark(&format!("{OPAQUE_KEY}{dir}"), opaque, dir)
            .await
    }

    pub(super) async fn save_shown(&self, path: &VirtualPath, shown: bool) -> Result<()> {
        {
            let mut guard = self.lock_book();
            let book = Arc::make_mut(&mut guard);
            if shown {
                book.shown.insert(path.as_str().to_owned());
            } else {
                book.shown.remove(path.as_str());
            }
        }
        self.persist_mark(&format!("{SHOWN_KEY}{path}"), shown, path)
            .await
    }

    /// Sets (`set`) or clears the marker `key` in a persistent layer's store (nothing to do for
    /// a layer in memory); a failure is named after `path`.
    pub(super) async fn persist_mark(
        &self,
        key: &str,
        set: bool,
        path: &VirtualPath,
    ) -> Result<()> {
        let Some(persist) = &self.persist else {
            return Ok(());
        };
        let done = if set {
            persist
                .store
                .put(
                    &persist.namespace,
                    key,
                    OPAQUE_TEXT.as_bytes(),
                    PutCondition::Overwrite,
                )
                .await
                .map(|_| ())
        } else {
            persist
                .store
                .delete(&persist.namespace, key, None)
                .await
                .map(|_| ())
        };
        done.map_err(|e| layer_failure(path, &e))
    }
}

/// A failure of the layer's store, as the agent reads it.
pub(super) fn layer_failure(path: &VirtualPath, error: &crate::storage::store::Error) -> Error {
    Error::Unavailable {
        message: format!("the overlay layer could not record the change to {path}: {error}"),
    }
}

/// Loads every persisted mark of a SQLite layer, page by page.
pub(super) async fn load_book(persist: &Persist) -> Result<Book> {
    let mut book = Book::default();
    let mut start = ListStart::Beginning;
    loop {
        let query = ListQuery {
            prefix: String::new(),
            start: start.clone(),
            limit: LOAD_PAGE,
        };
        let page = persist
            .store
            .scan(&persist.namespace, &query)
            .await
            .map_err(|e| Error::Unavailable {
                message: format!("the overlay layer's marks could not be loaded: {e}"),
            })?;
        let Some(last) = page.last() else { break };
        start = ListStart::After(last.meta.key.clone());
        let full = page.len() >= LOAD_PAGE;
        for item in page {
            let text = String::from_utf8_lossy(&item.content);
            if let Some(path) = item.meta.key.strip_prefix(FILE_KEY) {
                if let Some(mark) = Mark::decode(&text) {
                    book.files.insert(path.to_owned(), mark);
                }
            } else if let Some(dir) = item.meta.key.strip_prefix(OPAQUE_KEY) {
                book.opaque.insert(dir.to_owned());
            } else if let Some(path) = item.meta.key.strip_prefix(SHOWN_KEY) {
                book.shown.insert(path.to_owned());
            }
        }
        if !full {
            break;
        }
    }
    Ok(book)
}
