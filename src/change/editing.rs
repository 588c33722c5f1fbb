//! The one edit pipeline every changing tool uses, on every backend:
//! lock the file for this session → read it (with its version) → check the read ledger
//! (read-before-edit, staleness) → pure text change (`text/`) → write conditional on the version
//! read → record the new version and an undo step → describe the change.
//!
//! The conditional write is what makes this safe against other sessions and other servers:
//! if anyone changed the file between our read and our write, the backend refuses and the agent
//! is told to read again. Nothing is written on any failure.
//!
//! `edit_file` and `multi_edit` go one step further ([`edit_text`], CONTRACT §4 "stale but
//! safe"): on a file changed since it was read, the edit still lands when every `old_string`
//! matches the current text exactly as often as it requires, written conditional on the
//! *current* version, and the answer reports the outside change.

use serde_json::json;
use tokio::sync::OwnedMutexGuard;

use super::report::{describe_change, list_ranges};
use super::{Before, Change};
use super::{ToolError, ToolReply, ToolResult};
use crate::ground::content;
use crate::ground::path::VirtualPath;
use crate::ground::text::encoding::{self, FileEncoding, LfText};
use crate::ground::text::numbered::split_lines;
use crate::ground::text::replace::{EditSpec, Matching, Replaced};
use crate::ground::text::{diff, line_endings};
use crate::state::arrival::Turn;
use crate::state::session::{SeenFile, Session};
use crate::storage::backend::{BoundedRead, FileBytes, Version};

/// A text file loaded for editing ([`edit_text`]): its content with LF line endings and no BOM, and what is
/// needed to write it back in its own format.
#[derive(Debug)]
pub struct Loaded {
    /// The raw file.
    pub file: FileBytes,
    /// The text as the agent saw it in read_file (LF, no BOM).
    pub text: String,
    /// The file's own format, restored on write.
    pub format: line_endings::TextFormat,
    /// The file's encoding, kept on write.
    pub encoding: FileEncoding,
}

/// Reads `path` for a change and checks this session may change it: it must have been read in
/// this session and be unchanged since. Call with the session's file lock held. A file over
/// `--max-edit-bytes` is not read: [`ToolError::TooLarge`] (after the read-before-edit checks,
/// which need only its version).
pub async fn load_checked(session: &Session, path: &VirtualPath) -> Result<FileBytes, ToolError> {
    match load_checked_at_most(session, path, edit_limit(session)).await? {
        BoundedRead::Whole(file) => Ok(file),
        BoundedRead::TooLarge { size, .. } => Err(ToolError::TooLarge {
            subject: path.to_string(),
            size,
            limit: edit_limit(session),
            flag: "max-edit-bytes",
            advice: "Changing a file loads it whole, so files this large are not changed by edit tools. Read it in windows with read_file, or ask the user to raise the limit".into(),
        }),
    }
}

/// [`load_checked`] for a change that may not need the old content (an overwrite): a file over
/// `max_bytes` comes back as its size and version only, checked all the same.
pub async fn load_checked_at_most(
    session: &Session,
    path: &VirtualPath,
    max_bytes: u64,
) -> Result<BoundedRead, ToolError> {
    let read = session.backend().read_at_most(path, max_bytes).await?;
    let version = match &read {
        BoundedRead::Whole(file) => &file.version,
        BoundedRead::TooLarge { version, .. } => version,
    };
    match session.ledger.seen(path) {
        None => Err(ToolError::NotRead { path: path.clone() }),
        Some(seen) if seen != *version => Err(ToolError::Stale { path: path.clone() }),
        Some(_) => Ok(read),
    }
}

/// The whole file for a tool that copies it (move), refused with [`ToolError::TooLarge`] over
/// `--max-edit-bytes` without being read. No read-before-edit check.
pub async fn read_for_copy(session: &Session, path: &VirtualPath) -> Result<FileBytes, ToolError> {
    let limit = edit_limit(session);
    match session.backend().read_at_most(path, limit).await? {
        BoundedRead::Whole(file) => Ok(file),
        BoundedRead::TooLarge { size, .. } => Err(ToolError::TooLarge {
            subject: path.to_string(),
            size,
            limit,
            flag: "max-edit-bytes",
            advice: "Moving it would copy it through memory, so nothing was changed. Ask the user to move it, or to raise the limit".into(),
        }),
    }
}

/// `--max-edit-bytes` of this session's server.
pub fn edit_limit(session: &Session) -> u64 {
    session.write_options.limits.max_edit_bytes
}

/// [`edit_limit`] as a length in memory.
pub fn edit_limit_bytes(session: &Session) -> usize {
    usize::try_from(edit_limit(session)).unwrap_or(usize::MAX)
}

/// Refuses new content over `--max-edit-bytes` before anything is written; `subject` names it
/// in the error (`"content"`, a path).
pub fn check_edit_size(session: &Session, subject: &str, size: usize) -> Result<(), ToolError> {
    let limit = edit_limit(session);
    if size as u64 > limit {
        return Err(ToolError::TooLarge {
            subject: subject.to_owned(),
            size: size as u64,
            limit,
            flag: "max-edit-bytes",
            advice: "Nothing was written. Split the content into several smaller files, or ask the user to raise the limit".into(),
        });
    }
    Ok(())
}

/// Decodes a file read for a text edit ([`edit_text`]) (LF text without BOM, and its format); refuses binary
/// files.
fn decode_loaded(path: &VirtualPath, file: FileBytes) -> Result<Loaded, ToolError> {
    if content::looks_binary(&file.content) {
        return Err(ToolError::Binary { path: path.clone() });
    }
    let (text, format, encoding) = decode_for_edit(path, &file.content)?;
    Ok(Loaded {
        file,
        text,
        format,
        encoding,
    })
}

/// Decodes a text file's bytes for a change, in its own encoding: LF text without BOM, its
/// format and encoding. A file valid in no encoding found is refused
/// ([`ToolError::Undecodable`]): writing it back would lose bytes.
pub fn decode_for_edit(
    path: &VirtualPath,
    bytes: &[u8],
) -> Result<(String, line_endings::TextFormat, FileEncoding), ToolError> {
    let LfText {
        text,
        format,
        encoding,
    } = encoding::decode_to_lf(bytes);
    match encoding {
        Ok(encoding) => Ok((text, format, encoding)),
        Err(reason) => Err(ToolError::Undecodable {
            path: path.clone(),
            reason,
        }),
    }
}

/// Puts an edited LF text back into the file's own line endings, BOM and encoding
/// ([`ToolError::Unencodable`] naming the first character the encoding cannot hold).
pub fn encode_for_file(
    path: &VirtualPath,
    lf_text: &str,
    format: line_endings::TextFormat,
    file_encoding: FileEncoding,
) -> Result<Vec<u8>, ToolError> {
    let text = line_endings::restore(lf_text, format);
    if file_encoding.is_utf8() {
        return Ok(text.into_bytes());
    }
    encoding::encode(&text, file_encoding).map_err(|error| ToolError::Unencodable {
        path: path.clone(),
        error,
    })
}

/// The bytes of an edited LF text of `loaded`'s file, in its own format and encoding.
fn encode_loaded(path: &VirtualPath, loaded: &Loaded, lf_text: &str) -> Result<Vec<u8>, ToolError> {
    encode_for_file(path, lf_text, loaded.format, loaded.encoding)
}

/// Writes new content over a file read with [`load_checked`] (or creates it, `before` being
/// `None`), conditional on the version read, and records the change.
pub async fn commit(
    session: &Session,
    path: &VirtualPath,
    before: Option<FileBytes>,
    new_bytes: &[u8],
) -> Result<Version, ToolError> {
    let before = before.map_or(Before::Absent, Before::Read);
    let change = Change::write(path.clone(), before, new_bytes);
    let applied = change.apply(session).await?;
    let version = applied.written(path)?;
    change.record(session, applied, None);
    Ok(version)
}

/// What [`commit_large`] did.
#[derive(Debug)]
pub struct LargeCommit {
    /// The new version.
    pub version: Version,
    /// Whether `undo_edit` can take the change back.
    pub undoable: bool,
}

/// Replaces a file too large to keep in memory for undo, conditional on `version`, and records
/// the change. Where the backend cannot keep the old content aside, no undo step is kept: the
/// earlier steps of the file stay, and undo refuses them (the file no longer has the version
/// they left) instead of restoring across this change.
pub async fn commit_large(
    session: &Session,
    path: &VirtualPath,
    version: Version,
    new_bytes: &[u8],
) -> Result<LargeCommit, ToolError> {
    let change = Change::write(path.clone(), Before::Version(version), new_bytes);
    // A disk mount keeps the replaced content aside (a hard link made just before the atomic
    // replacement); elsewhere the change cannot be undone.
    let applied = change.apply_keeping_aside(session).await?;
    let version = applied.written(path)?;
    let undoable = change.record(session, applied, None);
    Ok(LargeCommit { version, undoable })
}

/// How many times [`edit_text`] tries to write an edit before it gives up as stale: a write
/// refused because the file changed between its read and its write is tried again on the new
/// content, under the same rule, this many times at most.
pub const EDIT_WRITE_ATTEMPTS: usize = 25;
/// Beyond [`EDIT_WRITE_ATTEMPTS`], a write that keeps losing races is tried again while the edit
/// has run for less than this: on a loaded machine each attempt is slower, so a fixed count runs
/// out while many writers take turns on one file (seen: 16 sessions on one PostgreSQL row).
const EDIT_RETRY_BUDGET: std::time::Duration = std::time::Duration::from_secs(2);
/// Most attempts in any case, however fast they fail.
const EDIT_WRITE_ATTEMPTS_MAX: usize = 200;
/// Longest pause, in milliseconds, before the n-th new attempt is this times n: a random pause
/// (jitter) so that writers racing for one file do not collide again in lock step.
const EDIT_RETRY_PAUSE_MS: u64 = 4;
/// Longest pause before any new attempt, in milliseconds.
const EDIT_RETRY_PAUSE_MAX_MS: u64 = 50;

/// The edit cycle of `edit_file` and `multi_edit`, run with the session's file lock held.
///
/// Reads the file and checks the ledger: never read is [`ToolError::NotRead`]. When the file is
/// as the session last saw it, `apply` runs on its text with [`Matching::Tolerant`] and its
/// errors are the answer. When it changed since (another program, session or server), the edit
/// may still land on the current text ("stale but safe"): each `old_string` must occur as often
/// as in the text the session saw ([`counts_still_hold`]; that text is kept within bounds by
/// [`crate::state::session::ReadLedger`]), and `apply` runs with [`Matching::Exact`]; any failure is
/// [`ToolError::Stale`], today's answer. The
/// result is written conditional on the version just read, so nothing written in between is
/// lost; a write refused because the file changed again starts over on the new content,
/// [`EDIT_WRITE_ATTEMPTS`] times, then on while the edit has run for less than
/// [`EDIT_RETRY_BUDGET`] (at most [`EDIT_WRITE_ATTEMPTS_MAX`] attempts). `headline` names the change; the answer adds the lines changed
/// from outside, when there were any.
pub async fn edit_text(
    session: &Session,
    path: &VirtualPath,
    specs: &[EditSpec<'_>],
    apply: impl Fn(&str, Matching) -> Result<Replaced, ToolError>,
    headline: impl Fn(&Replaced) -> String,
) -> ToolResult {
    let mut attempt = 0usize;
    let started = std::time::Instant::now();
    loop {
        attempt += 1;
        // One mount table for the read and the conditional write of this attempt.
        let backend = session.backend();
        let read = backend.read_at_most(path, edit_limit(session)).await?;
        let seen = session
            .ledger
            .seen_file(path)
            .ok_or_else(|| ToolError::NotRead { path: path.clone() })?;
        let current = match &read {
            BoundedRead::Whole(file) => &file.version,
            BoundedRead::TooLarge { version, .. } => version,
        };
        let changed = seen.version != *current;
        let file = match read {
            BoundedRead::Whole(file) => file,
            BoundedRead::TooLarge { .. } if changed => {
                return Err(ToolError::Stale { path: path.clone() });
            }
            BoundedRead::TooLarge { size, .. } => {
                return Err(ToolError::TooLarge {
                    subject: path.to_string(),
                    size,
                    limit: edit_limit(session),
                    flag: "max-edit-bytes",
                    advice: "Changing a file loads it whole, so files this large are not changed by edit tools. Read it in windows with read_file, or ask the user to raise the limit".into(),
                });
            }
        };
        let stale = || ToolError::Stale { path: path.clone() };
        let loaded = match decode_loaded(path, file) {
            Ok(loaded) => loaded,
            Err(_) if changed => return Err(stale()),
            Err(error) => return Err(error),
        };
        let replaced = if changed {
            if !counts_still_hold(&seen, &loaded.text, specs) {
                return Err(stale());
            }
            apply(&loaded.text, Matching::Exact).map_err(|_| stale())?
        } else {
            apply(&loaded.text, Matching::Tolerant)?
        };
        let bytes = encode_loaded(path, &loaded, &replaced.content)?;
        let change = Change::write(path.clone(), Before::Read(loaded.file), bytes);
        let applied = match change.apply(session).await {
            Ok(applied) => applied,
            Err(ToolError::Stale { .. })
                if attempt < EDIT_WRITE_ATTEMPTS
                    || (attempt < EDIT_WRITE_ATTEMPTS_MAX
                        && started.elapsed() < EDIT_RETRY_BUDGET) =>
            {
                tracing::debug!(%path, attempt, "file changed during the edit; trying again");
                let most = (EDIT_RETRY_PAUSE_MS * attempt as u64).min(EDIT_RETRY_PAUSE_MAX_MS);
                let pause = rand::random_range(0..=most);
                tokio::time::sleep(std::time::Duration::from_millis(pause)).await;
                continue;
            }
            Err(error) => return Err(error),
        };
        let version = applied.written(path)?;
        change.record(session, applied, Some(&replaced.content));
        let outside = changed.then(|| outside_change(&seen, &loaded.text));
        return Ok(edit_answer(
            path,
            &loaded.text,
            &replaced,
            &headline(&replaced),
            &version,
            outside.as_ref(),
            attempt,
        ));
    }
}

/// Whether the edits may be applied to `current`, a file changed since the session saw it: each
/// `old_string` must occur in `current` exactly as often as in the text the session saw, so an
/// edit never reaches text the agent has not seen (text someone else added, or more occurrences
/// of it for `replace_all`). When that text was not kept, the edits are allowed except a
/// `replace_all` without `expected_replacements`, whose reach cannot be checked.
fn counts_still_hold(seen: &SeenFile, current: &str, specs: &[EditSpec<'_>]) -> bool {
    specs.iter().all(|spec| {
        if spec.old_string.is_empty() {
            return false;
        }
        match &seen.text {
            Some(read) => {
                read.matches(spec.old_string).count() == current.matches(spec.old_string).count()
            }
            None => !spec.replace_all || spec.expected_replacements.is_some(),
        }
    })
}

/// What changed in a file since the session saw it, as far as the ledger can tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutsideChange {
    /// 1-based line ranges of the file as found (before this edit) that differ from the text
    /// seen; empty when only line endings, the final newline or the encoding changed.
    Lines(Vec<std::ops::RangeInclusive<usize>>),
    /// The text seen was not kept (a window of the file was read, or it is large).
    Unknown,
}

/// The lines of `current` that differ from the text the session saw.
fn outside_change(seen: &SeenFile, current: &str) -> OutsideChange {
    match &seen.text {
        Some(read) => {
            let read = split_lines(read).join("\n");
            let now = split_lines(current).join("\n");
            OutsideChange::Lines(diff::changed_line_ranges(&read, &now))
        }
        None => OutsideChange::Unknown,
    }
}

/// Most outside-changed ranges an answer lists by number.
const OUTSIDE_RANGES_LISTED: usize = 20;

/// The sentence telling the agent the file had changed since it read it.
fn outside_change_note(path: &VirtualPath, change: &OutsideChange) -> String {
    let what = match change {
        OutsideChange::Lines(ranges) if ranges.is_empty() => {
            "no line differs (only line endings, the final newline or the encoding changed)"
                .to_owned()
        }
        OutsideChange::Lines(ranges) => {
            let shown = ranges.get(..OUTSIDE_RANGES_LISTED).unwrap_or(ranges);
            let more = ranges.len() - shown.len();
            format!(
                "changed lines (numbered as the file was found, before this edit): {}{}",
                list_ranges(shown),
                if more > 0 {
                    format!(" and {more} more region(s)")
                } else {
                    String::new()
                }
            )
        }
        OutsideChange::Unknown => {
            "which lines changed is not known (only part of the file was read, or it is large)"
                .to_owned()
        }
    };
    format!(
        "Note: {path} had changed since this session read it (another program, session or server wrote it); {what}. Every old_string still matched the current content exactly, so the edit was applied to it. Read the file again before relying on the rest of it."
    )
}

/// The answer of [`edit_text`]: `headline`, the loose-quotes and outside-change notes, then the
/// change report of [`describe_change`].
fn edit_answer(
    path: &VirtualPath,
    old_text: &str,
    replaced: &Replaced,
    headline: &str,
    version: &Version,
    outside: Option<&OutsideChange>,
    attempts: usize,
) -> ToolReply {
    let mut headline = headline.to_owned();
    if replaced.loose_quotes > 0 {
        headline.push(' ');
        headline.push_str(LOOSE_QUOTES_NOTE);
    }
    if let Some(change) = outside {
        headline.push('\n');
        headline.push_str(&outside_change_note(path, change));
    }
    let mut reply = describe_change(
        &headline,
        path,
        old_text,
        &replaced.content,
        Some(replaced.occurrences),
        version,
    );
    if let Some(map) = reply.structured.as_mut().and_then(|s| s.as_object_mut()) {
        map.insert(
            "quotes_matched_loosely".into(),
            json!(replaced.loose_quotes),
        );
        let changed = match outside {
            None => json!(false),
            Some(OutsideChange::Unknown) => json!({"lines": null}),
            Some(OutsideChange::Lines(ranges)) => json!({
                "lines": ranges.iter().map(|r| [r.start(), r.end()]).collect::<Vec<_>>()
            }),
        };
        map.insert("changed_since_read".into(), changed);
        map.insert("write_attempts".into(), json!(attempts));
    }
    reply
}

/// Added to an edit answer when some `old_string` was found only with typographic and straight
/// quotes treated as equal.
pub const LOOSE_QUOTES_NOTE: &str = "Quotes matched loosely: old_string was found only with \
    typographic and straight quotes treated as equal (“ ” = \", ‘ ’ = '); new_string was written \
    with the file's quotes.";

/// A stale-check for tools that may change a file the session never read (delete, move):
/// unread is allowed (like `rm`), but read-and-changed-since is refused, because the agent would
/// be acting on content it has not seen.
pub fn check_not_stale(
    session: &Session,
    path: &VirtualPath,
    current: &Version,
) -> Result<(), ToolError> {
    match session.ledger.seen(path) {
        Some(seen) if &seen != current => Err(ToolError::Stale { path: path.clone() }),
        _ => Ok(()),
    }
}

/// Every file under `dir`, in path order: what a recursive `delete` and a directory `move`
/// check, lock and change one by one.
pub async fn files_under(
    session: &Session,
    dir: &VirtualPath,
) -> Result<Vec<crate::storage::backend::Entry>, ToolError> {
    let mut entries = session
        .backend()
        .glob(&crate::storage::backend::GlobQuery {
            dir: dir.clone(),
            matcher: crate::ground::search::GlobMatcher::new("*")?,
            control: Default::default(),
        })
        .await?;
    entries.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(entries)
}

/// Takes this session's locks on `paths` in path order. Every tool that changes several files
/// takes its locks this way, so two such calls never wait on each other in a cycle. `turn` is
/// the call's place in the arrival order of the file it names ([`Session::lock_file`]).
pub async fn lock_files(
    session: &Session,
    mut paths: Vec<VirtualPath>,
    turn: Option<&Turn>,
) -> Vec<OwnedMutexGuard<()>> {
    paths.sort();
    paths.dedup();
    let mut guards = Vec::with_capacity(paths.len());
    for path in &paths {
        guards.push(session.lock_file(path, turn).await);
    }
    guards
}

/// Decodes a text file's bytes to show them (a diff): LF text without BOM, and its format. A
/// file valid in no encoding found is shown with U+FFFD.
pub fn decode_text(bytes: &[u8]) -> (String, line_endings::TextFormat) {
    let decoded = encoding::decode_to_lf(bytes);
    (decoded.text, decoded.format)
}

/// Refuses to create a name with a control character (CONTRACT §1, issue 10): `path` and each
/// of its directories whose own name holds one must already exist. Names already present (on
/// disk, or in a store written by an older version) can still be overwritten or written under.
pub async fn refuse_new_control_names(
    session: &Session,
    path: &VirtualPath,
) -> Result<(), ToolError> {
    let Err(refusal) = path.control_character() else {
        return Ok(());
    };
    let mut ancestors = Vec::new();
    let mut cursor = Some(path.clone());
    while let Some(current) = cursor {
        cursor = current.parent();
        ancestors.push(current);
    }
    // Shallowest first: the first missing one is the name this call would create.
    for ancestor in ancestors.into_iter().rev() {
        let own_name_has_one = ancestor
            .file_name()
            .is_some_and(|name| name.chars().any(char::is_control));
        if own_name_has_one && session.backend().stat(&ancestor).await?.is_none() {
            return Err(refusal.into());
        }
    }
    Ok(())
}
