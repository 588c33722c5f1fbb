//! `rename` through the view: a layer file moved inside the layer, a base file copied into it
//! with a whiteout left at its old path.

use super::*;

impl OverlayBackend {
    /// Moves the file at `from` (which has `version`, from the base or the layer) to `to`,
    /// over `replaced` (the file there, checked by the caller). A layer file is renamed inside
    /// the layer (content and times kept); a base file is copied into the layer. Returns the
    /// version at `to`.
    pub(super) async fn move_file(
        &self,
        from: &VirtualPath,
        to: &VirtualPath,
        version: Version,
        from_base: bool,
        replaced: Option<(Version, bool)>,
    ) -> Result<Version> {
        let target_mark = self.book().await?.mark(to).cloned();
        let target_base = match (&target_mark, &replaced) {
            (Some(mark), _) => mark.base.clone(),
            (None, Some((version, true))) => Some(version.clone()),
            (None, _) => None,
        };
        let layer_target = replaced
            .as_ref()
            .filter(|(_, in_base)| !in_base)
            .map(|(version, _)| version.clone());
        let moved = if from_base {
            None
        } else {
            let options = RenameOptions {
                if_version: None,
                replacing: layer_target.clone(),
            };
            self.layer.rename(from, to, &options).await?
        };
        let new_version = match moved {
            Some(Renamed {
                version: Some(version),
                ..
            }) => version,
            _ => {
                let file = if from_base {
                    self.base.read(from).await?
                } else {
                    self.layer.read(from).await?
                };
                let written = self
                    .layer
                    .write(to, &file.content, WriteMode::Overwrite)
                    .await?;
                if !from_base {
                    self.layer.delete(from, &DeleteOptions::default()).await?;
                }
                written.version
            }
        };
        self.save_mark(
            to,
            Some(Mark {
                state: MarkState::Changed,
                base: target_base,
            }),
        )
        .await?;
        let source_mark = self.book().await?.mark(from).cloned();
        let source_base = match source_mark {
            Some(mark) => mark.base,
            None if from_base => Some(version),
            None => None,
        };
        let mark = source_base.map(|base| Mark {
            state: MarkState::Deleted,
            base: Some(base),
        });
        self.save_mark(from, mark).await?;
        Ok(new_version)
    }

    /// Hides the file at `path` (which has `version`, from the base or the layer).
    pub(super) async fn hide_file(
        &self,
        path: &VirtualPath,
        version: Version,
        from_base: bool,
    ) -> Result<()> {
        let existing = self.book().await?.mark(path).cloned();
        if !from_base {
            self.layer.delete(path, &DeleteOptions::default()).await?;
        }
        let base = match existing {
            Some(mark) => mark.base,
            None if from_base => Some(version),
            None => None,
        };
        let mark = base.map(|base| Mark {
            state: MarkState::Deleted,
            base: Some(base),
        });
        self.save_mark(path, mark).await
    }
}
