//! Times of the audit log as people read and type them: RFC 3339 in UTC
//! (`2026-11-23T12:04:05.123456Z`) out, and for `mountfs log --since` a date, a date-time or an
//! age (`90m`, `6h`, `2d`) in. Pure functions (civil-from-days after Howard Hinnant's
//! algorithms), so no date crate is needed for this one format.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::AuditError;

const SECONDS_PER_DAY: i64 = 86_400;

/// `YYYY-MM-DDTHH:MM:SS.ffffffZ` in UTC.
pub fn format(time: SystemTime) -> String {
    let micros = crate::storage::store::to_micros(time);
    let seconds = micros.div_euclid(1_000_000);
    let fraction = micros.rem_euclid(1_000_000);
    let days = seconds.div_euclid(SECONDS_PER_DAY);
    let of_day = seconds.rem_euclid(SECONDS_PER_DAY);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{fraction:06}Z",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60
    )
}

/// Parses `--since`: `2026-11-23`, `2026-11-23T12:00:00Z` (seconds and fraction optional, `Z` or
/// none for UTC, or `+HH:MM`), or an age before `now` (`30s`, `90m`, `6h`, `2d`, `1w`).
pub fn parse_since(text: &str, now: SystemTime) -> Result<SystemTime, AuditError> {
    let bad = || AuditError::Since(text.to_owned());
    let text = text.trim();
    if let Some(age) = parse_age(text) {
        return Ok(now.checked_sub(age).unwrap_or(UNIX_EPOCH));
    }
    let (date, clock) = match text.split_once(['T', ' ']) {
        Some((date, clock)) => (date, Some(clock)),
        None => (text, None),
    };
    let mut parts = date.splitn(3, '-');
    let year: i64 = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
    let month: u32 = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
    let day: u32 = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return Err(bad());
    }
    let mut seconds = days_from_civil(year, month, day) * SECONDS_PER_DAY;
    let mut micros = 0i64;
    if let Some(clock) = clock {
        let (clock, offset) = split_offset(clock).ok_or_else(bad)?;
        let (whole, fraction) = match clock.split_once('.') {
            Some((whole, fraction)) => (whole, Some(fraction)),
            None => (clock, None),
        };
        let fields: Vec<&str> = whole.split(':').collect();
        if !(2..=3).contains(&fields.len()) {
            return Err(bad());
        }
        let number = |field: &str, max: i64| -> Result<i64, AuditError> {
            field
                .parse::<i64>()
                .ok()
                .filter(|n| (0..=max).contains(n))
                .ok_or_else(bad)
        };
        seconds += number(fields[0], 23)? * 3600 + number(fields[1], 59)? * 60;
        if let Some(second) = fields.get(2) {
            seconds += number(second, 60)?;
        }
        if let Some(fraction) = fraction {
            if fraction.is_empty() || !fraction.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            let digits: String = fraction.chars().chain("000000".chars()).take(6).collect();
            micros = digits.parse().map_err(|_| bad())?;
        }
        seconds -= offset;
    }
    Ok(crate::storage::store::from_micros(
        seconds.saturating_mul(1_000_000).saturating_add(micros),
    ))
}

/// `30s`, `90m`, `6h`, `2d`, `1w`.
fn parse_age(text: &str) -> Option<Duration> {
    let unit = text.chars().last()?;
    let scale = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        'd' => 86_400,
        'w' => 7 * 86_400,
        _ => return None,
    };
    let number: u64 = text[..text.len() - 1].parse().ok()?;
    Some(Duration::from_secs(number.checked_mul(scale)?))
}

/// A clock and its UTC offset in seconds (`Z`, none, `+HH:MM`, `-HH:MM`).
fn split_offset(clock: &str) -> Option<(&str, i64)> {
    if let Some(clock) = clock.strip_suffix(['Z', 'z']) {
        return Some((clock, 0));
    }
    match clock.rfind(['+', '-']) {
        Some(at) => {
            let (clock, offset) = clock.split_at(at);
            let sign = if offset.starts_with('-') { -1 } else { 1 };
            let (hours, minutes) = offset[1..].split_once(':')?;
            let hours: i64 = hours.parse().ok()?;
            let minutes: i64 = minutes.parse().ok()?;
            Some((clock, sign * (hours * 3600 + minutes * 60)))
        }
        None => Some((clock, 0)),
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month = i64::from(month);
    let day_of_year =
        (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The date of a day count since 1970-01-01.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = u32::try_from(day_of_year - (153 * mp + 2) / 5 + 1).unwrap_or(1);
    let month = u32::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).unwrap_or(1);
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Serde as RFC 3339 text (see [`format`]).
pub mod rfc3339 {
    use std::time::SystemTime;

    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes the time as [`super::format`] does.
    pub fn serialize<S: Serializer>(time: &SystemTime, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&super::format(*time))
    }

    /// Reads what [`serialize`] wrote.
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<SystemTime, D::Error> {
        let text = String::deserialize(deserializer)?;
        super::parse_since(&text, SystemTime::now()).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_shown_in_utc_to_the_microsecond() {
        assert_eq!(format(UNIX_EPOCH), "1970-01-01T00:00:00.000000Z");
        let t = UNIX_EPOCH + Duration::from_micros(1_795_435_445_123_456);
        assert_eq!(format(t), "2026-11-23T12:04:05.123456Z");
        assert_eq!(parse_since(&format(t), SystemTime::now()).unwrap(), t);
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(format(leap), "2000-02-29T00:00:00.000000Z");
    }

    #[test]
    fn since_takes_dates_date_times_offsets_and_ages() {
        let now = UNIX_EPOCH + Duration::from_secs(1_795_435_445);
        let day = parse_since("2026-11-23", now).unwrap();
        assert_eq!(format(day), "2026-11-23T00:00:00.000000Z");
        let noon = parse_since("2026-11-23T12:00Z", now).unwrap();
        assert_eq!(format(noon), "2026-11-23T12:00:00.000000Z");
        let offset = parse_since("2026-11-23T13:00:00+01:00", now).unwrap();
        assert_eq!(offset, noon);
        assert_eq!(
            parse_since("90m", now).unwrap(),
            now - Duration::from_secs(5400)
        );
        assert_eq!(
            parse_since("2d", now).unwrap(),
            now - Duration::from_secs(172_800)
        );
        for bad in ["yesterday", "2026-13-01", "2026-11-23T25:00Z", "5x", ""] {
            assert_eq!(
                parse_since(bad, now).unwrap_err(),
                AuditError::Since(bad.to_owned()),
                "{bad}"
            );
        }
    }
}
