//! The marks of one layer: which paths it changed or hid, which directories it deleted whole
//! (opaque) and which paths below those it shows again — the book every read of the view
//! consults.

use super::*;

/// What the layer holds for one file path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MarkState {
    /// The layer holds the file's content.
    Changed,
    /// The base file is hidden.
    Deleted,
}

/// One file path the layer touched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    /// Shadowed or hidden.
    pub state: MarkState,
    /// The base file's version when the layer first touched the path; `None` when the base had
    /// no file there.
    pub base: Option<Version>,
}

impl Mark {
    pub(super) fn encode(&self) -> String {
        let state = match self.state {
            MarkState::Changed => "changed",
            MarkState::Deleted => "deleted",
        };
        match &self.base {
            Some(version) => format!("{state} {version}"),
            None => state.to_owned(),
        }
    }

    pub(super) fn decode(text: &str) -> Option<Self> {
        let (state, base) = match text.split_once(' ') {
            Some((state, version)) => (state, Some(Version::from_raw(version))),
            None => (text, None),
        };
        let state = match state {
            "changed" => MarkState::Changed,
            "deleted" => MarkState::Deleted,
            _ => return None,
        };
        Some(Self { state, base })
    }
}

/// Key prefixes of the persisted book: file marks, opaque directories and paths shown again.
pub(super) const FILE_KEY: &str = "f:";
pub(super) const OPAQUE_KEY: &str = "d:";
pub(super) const SHOWN_KEY: &str = "s:";
/// The content of a persisted opaque-directory key.
pub(super) const OPAQUE_TEXT: &str = "opaque";

/// The marks of one layer (see the module doc).
#[derive(Debug, Default, Clone)]
pub(super) struct Book {
    pub(super) files: BTreeMap<String, Mark>,
    pub(super) opaque: BTreeSet<String>,
    /// Paths below an opaque directory that `discard` showed again: the base's entry there
    /// (and all below it) is part of the view, while the rest of the opaque directory stays
    /// hidden. The nearest of an opaque or shown ancestor decides.
    pub(super) shown: BTreeSet<String>,
}

/// `"/a/b"` → `"/a/b/"`, `"/"` → `"/"`.
pub(super) fn dir_prefix(dir: &VirtualPath) -> String {
    if dir.is_root() {
        "/".to_owned()
    } else {
        format!("{}/", dir.as_str())
    }
}

impl Book {
    pub(super) fn mark(&self, path: &VirtualPath) -> Option<&Mark> {
        self.files.get(path.as_str())
    }

    pub(super) fn marks_under<'a>(
        &'a self,
        dir: &VirtualPath,
    ) -> impl Iterator<Item = (&'a String, &'a Mark)> {
        let own = self.files.get_key_value(dir.as_str());
        let prefix = dir_prefix(dir);
        let below = self
            .files
            .range::<str, _>((Bound::Included(prefix.as_str()), Bound::Unbounded))
            .take_while(move |(key, _)| key.starts_with(&prefix));
        own.into_iter().chain(below)
    }

    /// The layer holds a file at `path`.
    pub(super) fn layer_file(&self, path: &VirtualPath) -> bool {
        self.mark(path)
            .is_some_and(|m| m.state == MarkState::Changed)
    }

    /// The layer holds a file below `path` (so `path` is a directory in the layer).
    pub(super) fn layer_dir(&self, path: &VirtualPath) -> bool {
        let prefix = dir_prefix(path);
        self.files
            .range::<str, _>((Bound::Included(prefix.as_str()), Bound::Unbounded))
            .take_while(|(key, _)| key.starts_with(&prefix))
            .any(|(_, mark)| mark.state == MarkState::Changed)
    }

    /// A deleted base directory covers `path` (itself or an ancestor), and no path shown
    /// again lies between.
    pub(super) fn opaque_covers(&self, path: &VirtualPath) -> bool {
        if self.opaque.is_empty() {
            return false;
        }
        let mut at = Some(path.clone());
        while let Some(dir) = at {
            if self.shown.contains(dir.as_str()) {
                return false;
            }
            if self.opaque.contains(dir.as_str()) {
                return true;
            }
            at = dir.parent();
        }
        false
    }

    /// `path` or something below it was shown again by `discard` (so the base's directory at
    /// `path` is partly in the view even when it is covered).
    pub(super) fn shown_within(&self, path: &VirtualPath) -> bool {
        if self.shown.is_empty() {
            return false;
        }
        if self.shown.contains(path.as_str()) {
            return true;
        }
        let prefix = dir_prefix(path);
        self.shown
            .range::<str, _>((Bound::Included(prefix.as_str()), Bound::Unbounded))
            .next()
            .is_some_and(|key| key.starts_with(&prefix))
    }

    /// The base's entry at `path`, or part of what lies below it, is in the view.
    pub(super) fn base_partly_shown(&self, path: &VirtualPath) -> bool {
        !self.base_hidden(path) || self.shown_within(path)
    }

    /// The base's entry at `path` is not part of the view.
    pub(super) fn base_hidden(&self, path: &VirtualPath) -> bool {
        self.files.contains_key(path.as_str()) || self.opaque_covers(path)
    }

    /// Reads of `path` go to the layer.
    pub(super) fn routes_to_layer(&self, path: &VirtualPath) -> bool {
        self.layer_file(path) || self.base_hidden(path) || self.layer_dir(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_round_trip_through_their_stored_text() {
        for mark in [
            Mark {
                state: MarkState::Changed,
                base: None,
            },
            Mark {
                state: MarkState::Deleted,
                base: Some(Version::from_raw("abc123")),
            },
        ] {
            assert_eq!(Mark::decode(&mark.encode()), Some(mark));
        }
        assert_eq!(Mark::decode("bogus"), None);
    }

    #[test]
    fn an_opaque_directory_hides_everything_below_it() {
        let mut book = Book::default();
        book.opaque.insert("/d".into());
        let p = |s: &str| VirtualPath::parse(s).unwrap();
        assert!(book.base_hidden(&p("/d")));
        assert!(book.base_hidden(&p("/d/x/y")));
        assert!(!book.base_hidden(&p("/dx")));
        assert!(!book.base_hidden(&p("/")));
    }
}
