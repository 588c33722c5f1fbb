//! Versions of disk files, and the `fstat` facts they are made from.
//!
//! A file of at most [`HASHED_SIZE_LIMIT`] bytes has the same version as on every other backend,
//! the hash of its content ([`Version::of_content`]): sound against any change, even one that
//! keeps size and timestamps. Hashing a bigger file on every read would break the promise that
//! reading a window of a huge file is cheap (CONTRACT §4: memory and time proportional to the
//! window), so beyond the limit the version is a hash of the inode's identity and change
//! stamps, `(dev, ino, size, mtime_ns, ctime_ns)`. Every write replaces the inode (atomic
//! rename), and any in-place change by another program moves `ctime` (which user space cannot
//! set back), so a changed big file gets a new version; the one blind spot is two in-place
//! changes of a big file within one timestamp tick of the file system that keep its size, which
//! is documented in the module doc of `disk`.
//!
//! Reading windows is `window`'s; writing is `write`'s (both take their versions from here).

use std::io::{self, Read};

use rustix::fs::Stat;
use sha2::{Digest, Sha256};

use crate::storage::backend::Version;

/// Largest file whose version is its content hash; bigger files use identity stamps.
pub const HASHED_SIZE_LIMIT: u64 = 8 * 1024 * 1024;

/// The version of a file bigger than [`HASHED_SIZE_LIMIT`], from its `fstat`.
pub(super) fn identity_version(stat: &Stat) -> Version {
    let stamp = format!(
        "{}:{}:{}:{}.{}:{}.{}",
        stat.st_dev,
        stat.st_ino,
        stat.st_size,
        stat.st_mtime,
        stat.st_mtime_nsec,
        stat.st_ctime,
        stat.st_ctime_nsec
    );
    let digest = Sha256::digest(stamp.as_bytes());
    Version::from_raw(format!("i{}", hex::encode(&digest[..16])))
}

/// The modification time `fstat` reports (`None` before 1970).
pub(super) fn modified_of(stat: &Stat) -> Option<std::time::SystemTime> {
    let seconds = u64::try_from(stat.st_mtime).ok()?;
    let nanos = u32::try_from(stat.st_mtime_nsec)
        .unwrap_or(0)
        .min(999_999_999);
    std::time::UNIX_EPOCH.checked_add(std::time::Duration::new(seconds, nanos))
}

/// The size in bytes `fstat` reports (never negative for a regular file).
pub(super) fn size_of(stat: &Stat) -> u64 {
    u64::try_from(stat.st_size).unwrap_or(0)
}

/// The version of the bytes of a file just read, with the `fstat` taken before reading.
pub(super) fn version_of(content: &[u8], stat: &Stat) -> Version {
    if content.len() as u64 <= HASHED_SIZE_LIMIT {
        Version::of_content(content)
    } else {
        identity_version(stat)
    }
}

/// Reads at most `limit + 1` bytes: `Some(content)` when the file fits in `limit`.
/// `expected` is the size `fstat` gave: the buffer starts that big (plus the byte that shows the
/// end), so a small file takes two `read`s; from an empty buffer, a 2 KiB file took eight
/// (32, 32, 64, … 1024 bytes, then the end; issue 15, `strace`).
pub(super) fn read_at_most(
    file: &mut impl Read,
    limit: u64,
    expected: u64,
) -> io::Result<Option<Vec<u8>>> {
    let capacity = usize::try_from(expected.min(limit).saturating_add(1)).unwrap_or(0);
    let mut content = Vec::with_capacity(capacity);
    file.take(limit.saturating_add(1))
        .read_to_end(&mut content)?;
    Ok((content.len() as u64 <= limit).then_some(content))
}

/// The current version of an open file (for conditional writes): hashes small files, stamps
/// big ones, deciding by the bytes actually there.
pub(super) fn current_version(file: &mut std::fs::File, stat: &Stat) -> io::Result<Version> {
    if size_of(stat) > HASHED_SIZE_LIMIT {
        return Ok(identity_version(stat));
    }
    match read_at_most(file, HASHED_SIZE_LIMIT, size_of(stat))? {
        Some(content) => Ok(Version::of_content(&content)),
        None => Ok(identity_version(stat)),
    }
}
