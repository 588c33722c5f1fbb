//! What one tool call changed, gathered while it runs: the call's report of its change.
//!
//! The server gives each call a [`CallTrail`]; the call's handle of the session carries it
//! (`Session::for_call`), so everything the call runs — also in tasks it spawns — notes into the
//! same trail, and concurrent calls of one session never mix. The change primitive's one
//! recording step (`tools::change::record`) notes every file it records, with its versions
//! before and after, and the text of a file it created; a tool notes what the call was about
//! when no file says it ([`CallTrail::note_scope`]: execute's directory, commit's mount) and
//! execute its command. When the call ends, the server takes the report once ([`Collected`]):
//! the audit log builds its entry from it (`audit::record::change_of`), the change hub announces
//! its paths ([`Touched`]) to the subscriptions. Nobody re-reads the call's arguments to guess
//! what changed.
//!
//! A session handle without a trail (a test driving tools directly) notes nothing.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use crate::ground::path::VirtualPath;
use crate::storage::audit::{FileChange, MAX_FILES_PER_ENTRY, creation_diff};
use crate::storage::backend::Version;

/// Paths one call announces one by one; past this, the rest are announced as the one directory
/// holding them all (a huge recursive delete or directory move stays a bounded list).
pub const MAX_TOUCHED: usize = 1024;

/// Paths a call names as its scope ([`CallTrail::note_scope`]), at most.
const MAX_SCOPE: usize = 8;

/// One path a call changed, as the change hub announces it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Touched {
    /// The file or directory.
    pub path: VirtualPath,
    /// Whether something appeared or went there (a creation, a removal, either end of a
    /// move), which also changes the resource list.
    pub listing: bool,
}

/// The diff of a file a call created (every line added), made once when the change was
/// recorded, for a log that keeps diffs (the tool's answer shows none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Created {
    /// The file.
    pub path: String,
    /// The unified diff, cut at the audit log's bound.
    pub diff: String,
    /// Whether `diff` was cut.
    pub cut: bool,
    /// Lines of the whole file.
    pub lines: u64,
}

/// What one call changed, once it ended: the report the audit log and the change hub read.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Collected {
    /// Each file with its first version before and last version after, in order, at most
    /// [`MAX_FILES_PER_ENTRY`].
    pub files: Vec<FileChange>,
    /// Files beyond [`MAX_FILES_PER_ENTRY`].
    pub more_files: u64,
    /// Every path to announce, each once (files, and directories or links removed whole).
    pub touched: Vec<Touched>,
    /// What the call was about, as the tool named it when no file says it (execute's working
    /// directory, the mount a commit or discard took), in order, at most a few.
    pub scope: Vec<VirtualPath>,
    /// The first file the call created, as a diff (only when the trail keeps diffs).
    pub created: Option<Created>,
    /// The command an `execute` ran.
    pub command: Option<String>,
    /// What the person answered when asked before the change (`--confirm`): "confirmed by the
    /// person: QUESTION" or "declined: …".
    pub confirmation: Option<String>,
}

/// The report one call builds while it runs (see the module doc); shared by the call's handle of
/// the session and whoever reads it when the call ends.
#[derive(Debug, Default)]
pub struct CallTrail {
    /// Whether created files' diffs are made (an audit log keeps them; nothing else reads them).
    keeps_diffs: bool,
    collected: Mutex<Gathering>,
}

#[derive(Debug, Default)]
struct Gathering {
    files: Vec<FileChange>,
    more_files: u64,
    touched: BTreeMap<VirtualPath, bool>,
    /// The directory holding every path beyond [`MAX_TOUCHED`], and whether any listed.
    beyond: Option<(VirtualPath, bool)>,
    scope: Vec<VirtualPath>,
    created: Option<Created>,
    command: Option<String>,
    confirmation: Option<String>,
}

impl CallTrail {
    /// An empty trail; `keeps_diffs`: make the diff of a created file (for an audit log).
    pub fn new(keeps_diffs: bool) -> Self {
        Self {
            keeps_diffs,
            collected: Mutex::default(),
        }
    }

    /// Whether created files' diffs are made ([`CallTrail::note_created`]).
    pub fn keeps_diffs(&self) -> bool {
        self.keeps_diffs
    }

    fn gathering(&self) -> std::sync::MutexGuard<'_, Gathering> {
        self.collected
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// What the call changed so far, leaving the trail empty (read once, when the call ended;
    /// also when it failed part-way: what landed is in it).
    pub fn take(&self) -> Collected {
        let gathering = std::mem::take(&mut *self.gathering());
        let mut touched: Vec<Touched> = gathering
            .touched
            .into_iter()
            .map(|(path, listing)| Touched { path, listing })
            .collect();
        if let Some((path, listing)) = gathering.beyond {
            touched.push(Touched { path, listing });
        }
        Collected {
            files: gathering.files,
            more_files: gathering.more_files,
            touched,
            scope: gathering.scope,
            created: gathering.created,
            command: gathering.command,
            confirmation: gathering.confirmation,
        }
    }

    /// Notes that the file at `path` went from `before` to `after` (`None`: absent then): for
    /// the audit log with its versions, and announced (listing when it appeared or went).
    pub fn note_file(&self, path: &VirtualPath, before: Option<&Version>, after: Option<&Version>) {
        let mut gathering = self.gathering();
        gathering.file(path.as_str(), before, after);
        gathering.touch(path, before.is_none() || after.is_none());
    }

    /// Notes that what was at `path` (a symbolic link, a directory) is gone without being a
    /// file change: announced, not a file of the audit entry.
    pub fn note_gone(&self, path: &VirtualPath) {
        self.gathering().touch(path, true);
    }

    /// Notes that the call created the file at `path` holding `text`: the first such file's
    /// diff is kept, when the trail keeps diffs.
    pub fn note_created(&self, path: &VirtualPath, text: &str) {
        if !self.keeps_diffs || self.gathering().created.is_some() {
            return;
        }
        let (diff, cut) = creation_diff(path.as_str(), text);
        let created = Created {
            path: path.as_str().to_owned(),
            diff,
            cut,
            lines: text.lines().count() as u64,
        };
        self.gathering().created.get_or_insert(created);
    }

    /// Notes what the call is about when no file it changes says it: a directory, a mount.
    pub fn note_scope(&self, path: &VirtualPath) {
        let mut gathering = self.gathering();
        if gathering.scope.len() < MAX_SCOPE && !gathering.scope.contains(path) {
            gathering.scope.push(path.clone());
        }
    }

    /// Notes that the person confirmed the change `question` described (`--confirm`).
    pub fn note_confirmed(&self, question: &str) {
        self.gathering().confirmation = Some(format!("confirmed by the person: {question}"));
    }

    /// Notes that the change `question` described did not happen: `how` (the person declined,
    /// cancelled, did not answer).
    pub fn note_declined(&self, question: &str, how: &str) {
        self.gathering().confirmation = Some(format!("not confirmed, {how}: {question}"));
    }

    /// Notes the command line the call ran (`execute`).
    pub fn note_command(&self, command: &str) {
        self.gathering().command = Some(command.to_owned());
    }
}

impl Gathering {
    fn file(&mut self, path: &str, before: Option<&Version>, after: Option<&Version>) {
        let after = after.map(|v| v.as_str().to_owned());
        // A file changed twice in one call (a patch's rename, a move's copy then removal of
        // one path) is one change: from its first version to its last.
        if let Some(seen) = self.files.iter_mut().find(|f| f.path == path) {
            seen.after = after;
            return;
        }
        if self.files.len() >= MAX_FILES_PER_ENTRY {
            self.more_files += 1;
            return;
        }
        self.files.push(FileChange {
            path: path.to_owned(),
            before: before.map(|v| v.as_str().to_owned()),
            after,
        });
    }

    fn touch(&mut self, path: &VirtualPath, listing: bool) {
        if let Some(seen) = self.touched.get_mut(path) {
            *seen |= listing;
            return;
        }
        if self.touched.len() < MAX_TOUCHED {
            self.touched.insert(path.clone(), listing);
            return;
        }
        self.beyond = Some(match self.beyond.take() {
            None => (path.clone(), listing),
            Some((dir, listed)) => (common_dir(&dir, path), listed || listing),
        });
    }
}

/// The deepest path that is `a` or `b` or holds them both.
fn common_dir(a: &VirtualPath, b: &VirtualPath) -> VirtualPath {
    let mut dir = a.clone();
    while !b.starts_with(&dir) {
        match dir.parent() {
            Some(parent) => dir = parent,
            None => break,
        }
    }
    dir
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version(text: &str) -> Version {
        Version::from_raw(text)
    }

    fn p(text: &str) -> VirtualPath {
        VirtualPath::parse(text).unwrap()
    }

    #[test]
    fn a_call_collects_each_file_once_from_first_to_last_version() {
        let trail = CallTrail::new(false);
        let (a, b) = (p("/a"), p("/b"));
        trail.note_file(&a, None, Some(&version("1")));
        trail.note_file(&b, Some(&version("7")), None);
        trail.note_file(&a, Some(&version("1")), Some(&version("2")));
        let collected = trail.take();
        assert_eq!(collected.more_files, 0);
        assert_eq!(
            collected.files,
            vec![
                FileChange {
                    path: "/a".into(),
                    before: None,
                    after: Some("2".into())
                },
                FileChange {
                    path: "/b".into(),
                    before: Some("7".into()),
                    after: None
                },
            ]
        );
        assert_eq!(trail.take(), Collected::default(), "read once");
    }

    #[tokio::test]
    async fn concurrent_calls_keep_their_own_trails() {
        let (one, two) = (
            std::sync::Arc::new(CallTrail::new(false)),
            std::sync::Arc::new(CallTrail::new(false)),
        );
        let first = {
            let one = one.clone();
            tokio::spawn(async move {
                one.note_file(&p("/one"), None, None);
                tokio::task::yield_now().await;
            })
        };
        let second = {
            let two = two.clone();
            tokio::spawn(async move {
                tokio::task::yield_now().await;
                two.note_file(&p("/two"), None, None);
            })
        };
        first.await.unwrap();
        second.await.unwrap();
        assert_eq!(one.take().files[0].path, "/one");
        assert_eq!(two.take().files.len(), 1);
    }

    #[test]
    fn only_appearing_or_going_paths_change_the_listing() {
        let trail = CallTrail::new(false);
        trail.note_file(&p("/edited"), Some(&version("1")), Some(&version("2")));
        trail.note_file(&p("/created"), None, Some(&version("1")));
        trail.note_file(&p("/removed"), Some(&version("1")), None);
        trail.note_gone(&p("/dir"));
        let collected = trail.take();
        let listed: Vec<(&str, bool)> = collected
            .touched
            .iter()
            .map(|t| (t.path.as_str(), t.listing))
            .collect();
        assert_eq!(
            listed,
            vec![
                ("/created", true),
                ("/dir", true),
                ("/edited", false),
                ("/removed", true)
            ]
        );
        assert_eq!(
            collected.files.len(),
            3,
            "a directory gone is not a file change"
        );
    }

    #[test]
    fn paths_beyond_the_bound_are_announced_as_the_directory_holding_them() {
        let trail = CallTrail::new(false);
        for i in 0..MAX_TOUCHED + 10 {
            let dir = if i % 2 == 0 { "/d/x" } else { "/d/y" };
            trail.note_file(&p(&format!("{dir}/f{i}")), Some(&version("1")), None);
        }
        let collected = trail.take();
        assert_eq!(collected.touched.len(), MAX_TOUCHED + 1);
        assert_eq!(
            collected.touched.last(),
            Some(&Touched {
                path: p("/d"),
                listing: true
            })
        );
    }

    #[test]
    fn a_created_files_diff_is_made_once_and_only_for_a_log_that_keeps_diffs() {
        let quiet = CallTrail::new(false);
        quiet.note_created(&p("/n.txt"), "a\nb");
        assert_eq!(quiet.take().created, None);

        let kept = CallTrail::new(true);
        kept.note_created(&p("/n.txt"), "a\nb");
        kept.note_created(&p("/second.txt"), "c\n");
        let created = kept.take().created.expect("the first creation is kept");
        assert_eq!(created.path, "/n.txt");
        assert_eq!(created.lines, 2);
        assert!(!created.cut);
        assert!(
            created
                .diff
                .contains("+a\n+b\n\\ No newline at end of file")
        );
    }

    #[test]
    fn scope_and_command_are_what_the_tool_named() {
        let trail = CallTrail::new(false);
        trail.note_scope(&p("/work"));
        trail.note_scope(&p("/work"));
        for i in 0..20 {
            trail.note_scope(&p(&format!("/s{i}")));
        }
        trail.note_command("make test");
        let collected = trail.take();
        assert_eq!(collected.scope.len(), MAX_SCOPE);
        assert_eq!(collected.scope[0], p("/work"));
        assert_eq!(collected.command.as_deref(), Some("make test"));
    }
}
