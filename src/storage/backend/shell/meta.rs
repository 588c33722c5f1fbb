//! What the target says of a file: its `stat` line parsed into kind, size, times and
//! identity, and the versions made of it or of the content.

use super::*;

/// One `stat -c '%f %s %Y %Z %i %d'` line: raw mode (hex), size, mtime, ctime, inode, device,
/// followed by `%y %z` (the same times with nanoseconds) where the target's `stat` shows them.
/// Without `stat -c` the script gives the mtime as `ls --full-time` shows it
/// (`D2026-11-26T03:59:24.123+0000`) and 0 for ctime and device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Meta {
    pub(super) mode: u32,
    pub(super) size: u64,
    /// Seconds since the epoch, when known.
    pub(super) mtime: Option<i64>,
    /// `dev:ino:size:mtime:ctime`, and `:` and the rest of the line when there is one, as the
    /// target printed them: what identity versions hash.
    pub(super) stamp: String,
    pub(super) ino: u64,
    pub(super) dev: u64,
}

impl Meta {
    pub(super) fn parse(line: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(line).ok()?;
        let mut fields = text.split_whitespace();
        let mode = u32::from_str_radix(fields.next()?, 16).ok()?;
        let size_text = fields.next()?;
        let size = size_text.parse().ok()?;
        let mtime_text = fields.next()?;
        let ctime_text = fields.next()?;
        let ino_text = fields.next()?;
        let dev_text = fields.next()?;
        let fine_times: Vec<&str> = fields.collect();
        let mut stamp = format!("{dev_text}:{ino_text}:{size_text}:{mtime_text}:{ctime_text}");
        if !fine_times.is_empty() {
            stamp.push(':');
            stamp.push_str(&fine_times.join(" "));
        }
        let mtime = match mtime_text.strip_prefix('D') {
            Some(full_time) => epoch_of_full_time(full_time),
            None => mtime_text.parse().ok().filter(|s: &i64| *s > 0),
        };
        Some(Self {
            mode,
            size,
            mtime,
            stamp,
            ino: ino_text.parse().ok()?,
            dev: dev_text.parse().ok()?,
        })
    }

    pub(super) fn kind(&self) -> Option<EntryKind> {
        match self.mode & 0xF000 {
            0x4000 => Some(EntryKind::Directory),
            0x8000 => Some(EntryKind::File),
            _ => None,
        }
    }

    pub(super) fn modified(&self) -> Option<SystemTime> {
        let seconds = u64::try_from(self.mtime?).ok().filter(|s| *s > 0)?;
        UNIX_EPOCH.checked_add(Duration::from_secs(seconds))
    }

    /// The version of a file over [`HASHED_SIZE_LIMIT`]: what the script's `vr` prints.
    pub(super) fn identity_version(&self) -> Version {
        let digest = Sha256::digest(self.stamp.as_bytes());
        Version::from_raw(format!("i{}", hex::encode(&digest[..16])))
    }

    pub(super) fn entry(&self, path: VirtualPath) -> Option<Entry> {
        let kind = self.kind()?;
        Some(Entry {
            path,
            kind,
            size: if kind == EntryKind::File {
                self.size
            } else {
                0
            },
            modified: self.modified(),
            created: None,
        })
    }
}

/// Seconds since the epoch of `ls --full-time`'s `YYYY-MM-DDThh:mm:ss[.frac]±hhmm`.
pub(super) fn epoch_of_full_time(text: &str) -> Option<i64> {
    let (date, rest) = text.split_once('T')?;
    let mut ymd = date.split('-').map(|p| p.parse::<i64>().ok());
    let (year, month, day) = (ymd.next()??, ymd.next()??, ymd.next()??);
    let zone_at = rest.find(['+', '-'])?;
    let (time, zone) = rest.split_at(zone_at);
    let mut hms = time.split(':');
    let hours: i64 = hms.next()?.parse().ok()?;
    let minutes: i64 = hms.next()?.parse().ok()?;
    let seconds: i64 = hms.next()?.split('.').next()?.parse().ok()?;
    let sign = if zone.starts_with('-') { -1 } else { 1 };
    let zone_hours: i64 = zone.get(1..3)?.parse().ok()?;
    let zone_minutes: i64 = zone.get(3..5)?.parse().ok()?;
    // Days from 1970-01-01 of a proleptic Gregorian date (the civil-from-days inverse).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(
        days * 86_400 + hours * 3600 + minutes * 60 + seconds
            - sign * (zone_hours * 3600 + zone_minutes * 60),
    )
}

/// The version of `content`, whose file has `meta` when it is too big to hash.
pub(super) fn version_of(content: &[u8], meta: Option<&Meta>) -> Version {
    match meta {
        Some(meta) if content.len() as u64 > HASHED_SIZE_LIMIT => meta.identity_version(),
        _ => Version::of_content(content),
    }
}

/// A version as the target's `vr` prints it (`sha256sum`'s first 32 hex digits, or `i` and 32
/// for a file hashed by identity), or `None` for anything else: a version travels back to the
/// target as a line of a later frame, so nothing but those characters may ever make one.
pub(super) fn target_version(text: &[u8]) -> Option<Version> {
    let digits = text.strip_prefix(b"i").unwrap_or(text);
    (digits.len() == 32
        && digits
            .iter()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
    .then(|| Version::from_raw(String::from_utf8_lossy(text).into_owned()))
}

/// Pairs the NUL-separated `names` with the `metas` lines of one listing batch; `None` when
/// their counts differ.
pub(super) fn pair_batch<'a>(
    names: &'a [u8],
    metas: &'a [u8],
) -> Option<Vec<(&'a [u8], Option<Meta>)>> {
    let names: Vec<&[u8]> = names.split(|b| *b == 0).filter(|n| !n.is_empty()).collect();
    let lines: Vec<&[u8]> = metas
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    if names.len() != lines.len() {
        return None;
    }
    Some(
        names
            .into_iter()
            .zip(lines)
            .map(|(name, line)| (name, Meta::parse(line)))
            .collect(),
    )
}
