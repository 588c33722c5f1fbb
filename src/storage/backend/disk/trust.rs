//! The key that lets start-up recovery tell the records mountfs wrote from records an agent
//! planted (issue 41): change journals, their `committed` marks, the records of directories a
//! change removed whole, the records of temporary files in flight, and the decisions of
//! changes over several mounts.
//!
//! Every such record lies where an agent may write (the mount itself) or is looked up by a
//! name taken from one, so none is acted on unless it carries an HMAC-SHA256 tag made with
//! this key over the record's kind, the mount it belongs to (the root's canonical host path)
//! and its own name: a forged record does not verify, and a genuine one copied to another
//! mount or under another name does not either.
//!
//! The key is 32 random bytes kept in the server's private data directory
//! (`<data dir>/mountfs/recovery.key`, mode 0600, made on first use), which `execute`'s sandbox
//! hides with the rest of `<data dir>/mountfs/` and no mount is meant to hold. The decisions of
//! changes over several mounts are kept there too (`decisions/<change id>`): each mount's
//! journal names its change, and each mount's recovery looks the decision up there, through
//! no path any journal holds. Without a data directory the key lives in memory only (made once
//! per process): journals still protect a change within the process, but those a crash leaves
//! are not recognised at the next start — they are logged and left for the operator.

use std::collections::HashSet;
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use hmac::{KeyInit, Mac};

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// The key file's name inside the server's data directory (`<data dir>/mountfs/`).
pub const KEY_FILE: &str = "recovery.key";
/// The folder of decisions of changes over several mounts, beside the key.
const DECISIONS: &str = "decisions";
/// Bytes of key.
const KEY_BYTES: usize = 32;
/// Characters of a tag as written in a record (hex of the 32-byte HMAC).
pub(super) const TAG_CHARS: usize = 64;

/// The key recovery trusts, and where decisions of changes over several mounts are kept.
pub struct RecoveryKey {
    key: [u8; KEY_BYTES],
    decisions: Decisions,
}

impl std::fmt::Debug for RecoveryKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key itself.
        f.debug_struct("RecoveryKey")
            .field("decisions", &self.decisions)
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
enum Decisions {
    /// `<dir>/decisions/<change id>`, durable.
    Dir(PathBuf),
    /// This process only (no data directory).
    Memory(Mutex<HashSet<String>>),
}

/// Why a key could not be loaded or made.
#[derive(Debug, thiserror::Error)]
#[error(
    "cannot use the recovery key {file}: {reason}; check that the directory is yours and writable, or remove a damaged key file (journals it signed are then left for you to resolve)"
)]
pub struct KeyError {
    /// The key file (operator side: showing it is fine).
    pub file: String,
    /// Why.
    pub reason: String,
}

impl RecoveryKey {
    /// The key kept in `dir` (the server's `<data dir>/mountfs`), made there (mode 0600; the
    /// directory 0700 when made here) when missing. Two servers starting at once agree on one
    /// key: it is written aside and linked into place, never overwritten.
    pub fn in_dir(dir: &Path) -> Result<Self, KeyError> {
        let file = dir.join(KEY_FILE);
        let fail = |reason: String| KeyError {
            file: file.display().to_string(),
            reason,
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| fail(e.to_string()))?;
        let key = match read_key(&file) {
            Ok(key) => key,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                make_key(dir, &file).map_err(|e| fail(e.to_string()))?
            }
            Err(e) => return Err(fail(e.to_string())),
        };
        let decisions = dir.join(DECISIONS);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&decisions)
            .map_err(|e| fail(e.to_string()))?;
        Ok(Self {
            key,
            decisions: Decisions::Dir(decisions),
        })
    }

    /// A key of this process only (see the module doc).
    pub fn ephemeral() -> Self {
        Self {
            key: rand::random(),
            decisions: Decisions::Memory(Mutex::default()),
        }
    }

    /// The tag of a record made of `parts` (each length-prefixed: no two lists of parts
    /// give the same bytes), as hex.
    pub(super) fn tag(&self, parts: &[&[u8]]) -> String {
        hex::encode(self.mac(parts).finalize().into_bytes())
    }

    /// Whether `tag` (hex, as written) is the tag of `parts`, compared in constant time.
    pub(super) fn verify(&self, parts: &[&[u8]], tag: &[u8]) -> bool {
        let Ok(tag) = std::str::from_utf8(tag) else {
            return false;
        };
        let Ok(bytes) = hex::decode(tag.trim_end()) else {
            return false;
        };
        self.mac(parts).verify_slice(&bytes).is_ok()
    }

    fn mac(&self, parts: &[&[u8]]) -> HmacSha256 {
        // A 32-byte key is always accepted by HMAC.
        let mut mac = <HmacSha256 as KeyInit>::new_from_slice(&self.key)
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
        for part in parts {
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part);
        }
        mac
    }

    /// Records, durably, that the change `change` over several mounts stands.
    pub(super) fn decide(&self, change: &str) -> io::Result<()> {
        let tag = self.tag(&[b"decision", change.as_bytes()]);
        match &self.decisions {
            Decisions::Memory(set) => {
                set.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(change.to_owned());
                Ok(())
            }
            Decisions::Dir(dir) => {
                let path = decision_file(dir, change)?;
                let mut file = std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .mode(0o600)
                    .open(&path)?;
                file.write_all(tag.as_bytes())?;
                file.sync_all()?;
                std::fs::File::open(dir)?.sync_all()
            }
        }
    }

    /// Whether the change `change` was decided (a decision that does not verify is none).
    pub(super) fn decided(&self, change: &str) -> bool {
        match &self.decisions {
            Decisions::Memory(set) => set
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(change),
            Decisions::Dir(dir) => {
                let Ok(path) = decision_file(dir, change) else {
                    return false;
                };
                let mut tag = Vec::new();
                let read = std::fs::File::open(path)
                    .and_then(|f| f.take(TAG_CHARS as u64 + 1).read_to_end(&mut tag));
                read.is_ok() && self.verify(&[b"decision", change.as_bytes()], &tag)
            }
        }
    }

    /// Drops the decision of `change` once no journal of it is left.
    pub(super) fn forget(&self, change: &str) {
        match &self.decisions {
            Decisions::Memory(set) => {
                set.lock().unwrap_or_else(|e| e.into_inner()).remove(change);
            }
            Decisions::Dir(dir) => {
                if let Ok(path) = decision_file(dir, change) {
                    let _ = std::fs::remove_file(path);
                }
            }
        }
    }
}

/// What the records of one journal are tagged with: the key, the mount, the journal's name.
#[derive(Debug, Clone)]
pub(crate) struct Seal {
    key: Arc<RecoveryKey>,
    /// The root's canonical host path: a record is valid on its own mount only.
    mount: Vec<u8>,
}

impl Seal {
    pub(super) fn new(key: Arc<RecoveryKey>, host_root: &Path) -> Self {
        Self {
            key,
            mount: host_root.as_os_str().as_bytes().to_vec(),
        }
    }

    /// The key.
    pub(super) fn key(&self) -> &RecoveryKey {
        &self.key
    }

    fn parts<'a>(&'a self, kind: &'a [u8], journal: &'a [u8], rest: &'a [u8]) -> [&'a [u8]; 4] {
        [kind, &self.mount, journal, rest]
    }

    /// The tag of `body`, a record of `kind` named `name` (a record of temporary files in
    /// flight tags each line so).
    pub(super) fn tag_of(&self, kind: &[u8], name: &[u8], body: &[u8]) -> String {
        self.key.tag(&self.parts(kind, name, body))
    }

    /// Whether `tag` is [`Seal::tag_of`] the same.
    pub(super) fn verifies(&self, kind: &[u8], name: &[u8], body: &[u8], tag: &[u8]) -> bool {
        self.key.verify(&self.parts(kind, name, body), tag)
    }

    pub(super) fn tag(&self, kind: &[u8], journal: &str, rest: &[u8]) -> String {
        self.key.tag(&self.parts(kind, journal.as_bytes(), rest))
    }

    /// `tag` + newline + `body`, as a record is written.
    pub(super) fn sealed(&self, kind: &[u8], journal: &str, body: &[u8]) -> Vec<u8> {
        let mut out = self.tag(kind, journal, body).into_bytes();
        out.push(b'\n');
        out.extend_from_slice(body);
        out
    }

    /// The body of a record written by [`Seal::sealed`], when its tag verifies.
    pub(super) fn open<'a>(
        &self,
        kind: &[u8],
        journal: &[u8],
        record: &'a [u8],
    ) -> Option<&'a [u8]> {
        let (tag, body) = record.split_at_checked(TAG_CHARS)?;
        let body = body.strip_prefix(b"\n")?;
        self.key
            .verify(&self.parts(kind, journal, body), tag)
            .then_some(body)
    }
}

/// A fresh change id (128 random bits, hex): names one change over several mounts.
pub(crate) fn change_id() -> String {
    hex::encode(rand::random::<[u8; 16]>())
}

/// The decision file of `change`; only ids of our form (hex) name a file.
fn decision_file(dir: &Path, change: &str) -> io::Result<PathBuf> {
    if change.is_empty() || change.len() > 64 || !change.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a change id",
        ));
    }
    Ok(dir.join(change))
}

fn read_key(file: &Path) -> io::Result<[u8; KEY_BYTES]> {
    let mut bytes = Vec::new();
    std::fs::File::open(file)?
        .take(KEY_BYTES as u64 + 1)
        .read_to_end(&mut bytes)?;
    bytes.try_into().map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("it does not hold exactly {KEY_BYTES} bytes"),
        )
    })
}

/// Writes a fresh key aside, durably, and links it into place; a key another server linked
/// first wins.
fn make_key(dir: &Path, file: &Path) -> io::Result<[u8; KEY_BYTES]> {
    let key: [u8; KEY_BYTES] = rand::random();
    let aside = dir.join(format!(
        "{KEY_FILE}.{}-{}",
        std::process::id(),
        hex::encode(rand::random::<[u8; 8]>())
    ));
    let written = (|| {
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&aside)?;
        out.write_all(&key)?;
        out.sync_all()?;
        std::fs::hard_link(&aside, file)
    })();
    let _ = std::fs::remove_file(&aside);
    match written {
        Ok(()) => {
            std::fs::File::open(dir)?.sync_all()?;
            Ok(key)
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => read_key(file),
        Err(e) => Err(e),
    }
}

static PROCESS_KEY: OnceLock<Arc<RecoveryKey>> = OnceLock::new();

/// Makes `key` the one disk mounts opened without their own ([`super::DiskOptions::recovery`])
/// use: the server's, from its data directory. Called once, at start, before any mount opens;
/// `false` when a key was in use already.
pub fn install(key: RecoveryKey) -> bool {
    PROCESS_KEY.set(Arc::new(key)).is_ok()
}

/// The key of this process: the one [`install`]ed, else one of this process only.
pub fn process_key() -> Arc<RecoveryKey> {
    Arc::clone(PROCESS_KEY.get_or_init(|| Arc::new(RecoveryKey::ephemeral())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_key_is_made_once_private_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("mountfs");
        let one = RecoveryKey::in_dir(&data).unwrap();
        let two = RecoveryKey::in_dir(&data).unwrap();
        assert_eq!(one.key, two.key);
        let mode = std::fs::metadata(data.join(KEY_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, 0o600);
        let tag = one.tag(&[b"a", b"bc"]);
        assert!(two.verify(&[b"a", b"bc"], tag.as_bytes()));
        assert!(
            !two.verify(&[b"ab", b"c"], tag.as_bytes()),
            "parts are framed"
        );
        assert!(!RecoveryKey::ephemeral().verify(&[b"a", b"bc"], tag.as_bytes()));
        let names: Vec<_> = std::fs::read_dir(&data)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(
            names.len(),
            2,
            "the key and the decisions folder: {names:?}"
        );
    }

    #[test]
    fn decisions_verify_and_are_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let key = RecoveryKey::in_dir(dir.path()).unwrap();
        let change = change_id();
        assert!(!key.decided(&change));
        key.decide(&change).unwrap();
        assert!(key.decided(&change));
        // A decision written without the key is none.
        let forged = change_id();
        std::fs::write(dir.path().join(DECISIONS).join(&forged), "00".repeat(32)).unwrap();
        assert!(!key.decided(&forged));
        assert!(!key.decided("../recovery.key"));
        key.forget(&change);
        assert!(!key.decided(&change));
    }
}
