//! Times as answers show them: RFC 3339 in UTC, whole seconds, or (structured `ls` entries)
//! whole seconds since the epoch. A ground-floor helper: `ls`, `file_info` and the resources'
//! `lastModified` all format times here; the HTTP flags' durations (`90s`, `30m`) are parsed
//! here too, so the HTTP server and its OAuth part share one parser without a circle.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Whole seconds since 1970-01-01 UTC (negative before it): the compact time of structured
/// listings (issue 45).
pub fn unix_seconds(time: SystemTime) -> i64 {
    match time.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(before) => -i64::try_from(before.duration().as_secs()).unwrap_or(i64::MAX),
    }
}

/// `2024-05-01T12:34:56Z` (UTC, whole seconds).
pub fn format_time(time: SystemTime) -> String {
    let seconds = unix_seconds(time);
    let days = seconds.div_euclid(86_400);
    let of_day = seconds.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    if (0..=9999).contains(&year) {
        // Digit by digit: `format!` with six padded fields was 8% of a small `ls`, which
        // formats one time per entry (issue 15, callgrind).
        let mut text = String::with_capacity(20);
        let mut push = |value: i64, digits: u32, after: char| {
            for place in (0..digits).rev() {
                let digit = (value / 10_i64.pow(place)) % 10;
                text.push(char::from(b'0' + u8::try_from(digit).unwrap_or(0)));
            }
            text.push(after);
        };
        push(year, 4, '-');
        push(month, 2, '-');
        push(day, 2, 'T');
        push(of_day / 3600, 2, ':');
        push(of_day % 3600 / 60, 2, ':');
        push(of_day % 60, 2, 'Z');
        return text;
    }
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60
    )
}

/// Days since 1970-01-01 → (year, month, day) in the proleptic Gregorian calendar
/// (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// A duration as `N`, `Ns`, `Nm` or `Nh`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, "s"),
    };
    let seconds_per = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        _ => return Err(format!("{text:?}: use a number with s, m or h, e.g. 30m")),
    };
    let number: u64 = number
        .parse()
        .map_err(|_| format!("{text:?}: use a number with s, m or h, e.g. 30m"))?;
    if number == 0 {
        return Err("the duration must be above zero".to_owned());
    }
    Ok(Duration::from_secs(number.saturating_mul(seconds_per)))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn unix_seconds_count_from_the_epoch_either_way() {
        assert_eq!(
            unix_seconds(UNIX_EPOCH + Duration::from_secs(1_764_331_196)),
            1_764_331_196
        );
        assert_eq!(
            unix_seconds(UNIX_EPOCH - Duration::from_secs(86_400)),
            -86_400
        );
    }

    #[test]
    fn times_are_rfc3339_utc() {
        assert_eq!(format_time(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        // The digit-by-digit form agrees with `format!` across centuries and times of day.
        for seconds in (0..253_402_300_799_u64)
            .step_by(7_777_777_777)
            .chain([86_399, 3_599])
        {
            let seconds = i64::try_from(seconds).unwrap();
            let (year, month, day) = civil_from_days(seconds.div_euclid(86_400));
            let of_day = seconds.rem_euclid(86_400);
            let expected = format!(
                "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
                of_day / 3600,
                of_day % 3600 / 60,
                of_day % 60
            );
            let time = UNIX_EPOCH + Duration::from_secs(seconds.unsigned_abs());
            assert_eq!(format_time(time), expected);
        }
        assert_eq!(
            format_time(UNIX_EPOCH + Duration::from_secs(1_709_251_199)),
            "2024-02-29T23:59:59Z"
        );
        assert_eq!(
            format_time(UNIX_EPOCH + Duration::from_secs(951_782_400)),
            "2000-02-29T00:00:00Z"
        );
    }
}
