//! `file_info`: what a path is without reading it into the conversation (CONTRACT §4): kind,
//! size, line count, created/modified times, language guessed from the name, version, and the
//! mount serving it.
//!
//! `file_info` of a mount's root also says what the workspace holds in memory against its
//! quota, and the server against its budget (issue 34, `memory`).
//!
//! The line count comes from a one-line windowed read, so a backend that knows it cheaply never
//! loads the file; otherwise files up to [`COUNT_LINES_MAX_BYTES`] are read to count it. This
//! tool does not record a read in the session's ledger: the agent has not seen the content, so
//! it may not edit the file on the strength of `file_info` alone.

use std::time::{SystemTime, UNIX_EPOCH};

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ToolError, ToolReply};
use crate::backend::{self, BoundedRead, FileView, LineWindow};
use crate::content;
use crate::path::VirtualPath;
use crate::session::Session;
use crate::text::encoding;
use crate::text::language::language_of;
use crate::text::numbered::split_lines;

/// Largest file read whole to count its lines when the backend does not report the count.
pub const COUNT_LINES_MAX_BYTES: u64 = 16 * 1024 * 1024;

/// Arguments of `file_info` (schemas/file_info.json).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// The file or directory.
    pub file_path: String,
}

/// Runs the tool.
pub async fn run(args: Args, session: &Session) -> Result<ToolReply, ToolError> {
    let path = VirtualPath::parse(&args.file_path)?;
    let backend = session.backend();
    let Some(entry) = backend.stat(&path).await? else {
        return Err(backend::Error::NotFound { path }.into());
    };
    let (mount, _) = backend.route(&path);
    let mut info = serde_json::Map::new();
    info.insert("path".into(), json!(path.as_str()));
    let kind;
    if entry.is_dir() {
        kind = "directory".to_owned();
        let entries = session.backend().ls(&path).await.map(|e| e.len()).ok();
        info.insert("kind".into(), json!("directory"));
        info.insert("entries".into(), json!(entries));
    } else {
        let view = session
            .backend()
            .read_window(
                &path,
                LineWindow {
                    offset: 0,
                    limit: 1,
                },
            )
            .await?;
        match view {
            FileView::Text(text) => {
                let lines = match text.total_lines {
                    Some(n) => Some(n),
                    // Read through the bound only: a file grown since the window is not
                    // read whole.
                    None if text.size <= COUNT_LINES_MAX_BYTES => match session
                        .backend()
                        .read_at_most(&path, COUNT_LINES_MAX_BYTES)
                        .await?
                    {
                        BoundedRead::Whole(file) => {
                            Some(split_lines(&encoding::decode_lossy(&file.content)).len())
                        }
                        BoundedRead::TooLarge { .. } => None,
                    },
                    None => None,
                };
                kind = if text.lossy {
                    "text file (valid in no encoding found: shown with U+FFFD, edits refused)"
                        .to_owned()
                } else {
                    "text file".to_owned()
                };
                info.insert("kind".into(), json!("file"));
                info.insert("binary".into(), json!(false));
                let encoding_name = (!text.lossy).then(|| text.encoding.label());
                info.insert("encoding".into(), json!(encoding_name));
                info.insert("lines".into(), json!(lines));
                info.insert("version".into(), json!(text.version.as_str()));
            }
            FileView::Binary(sample) => {
                let format = content::describe_magic(&sample.head).unwrap_or("binary data");
                kind = format!("binary file ({format})");
                info.insert("kind".into(), json!("file"));
                info.insert("binary".into(), json!(true));
                info.insert("format".into(), json!(format));
                info.insert("version".into(), json!(sample.version.as_str()));
            }
        }
        let language = path.file_name().and_then(language_of);
        info.insert("language".into(), json!(language));
    }
    info.insert("size".into(), json!(entry.size));
    info.insert("modified".into(), json!(entry.modified.map(format_time)));
    info.insert("created".into(), json!(entry.created.map(format_time)));
    info.insert("mount".into(), json!(mount_name(&mount.prefix)));
    info.insert("mount_root".into(), json!(mount.prefix == path));
    info.insert("read_only".into(), json!(mount.read_only));
    if mount.prefix == path {
        // A mount's root answers what the workspace holds in memory (issue 34), the one place
        // an agent looks before writing much.
        let memory = &session.memory;
        let mut usage = json!({"used": memory.used(), "quota": memory.quota()});
        let server = memory.server();
        if server.budget() != u64::MAX {
            usage["server_used"] = json!(server.used());
            usage["server_budget"] = json!(server.budget());
        }
        info.insert("memory".into(), usage);
    }
    let mut text = render(&path, &kind, &info);
    if mount.prefix == path {
        text.push('\n');
        text.push_str(&session.memory.describe());
    }
    Ok(ToolReply {
        text,
        structured: Some(Value::Object(info)),
        image: None,
        // The answer links to the file it describes (a directory gets no link).
        file: Some(entry),
    })
}

fn mount_name(prefix: &VirtualPath) -> String {
    if prefix.is_root() {
        "/".to_owned()
    } else {
        format!("{prefix}/")
    }
}

fn render(path: &VirtualPath, kind: &str, info: &serde_json::Map<String, Value>) -> String {
    let text_of = |key: &str| -> Option<String> {
        match info.get(key)? {
            Value::Null => None,
            Value::String(s) => Some(s.clone()),
            other => Some(other.to_string()),
        }
    };
    let mut rows = vec![path.to_string(), format!("kind: {kind}")];
    if let Some(size) = text_of("size")
        && kind != "directory"
    {
        rows.push(format!("size: {size} bytes"));
    }
    if let Some(entries) = text_of("entries") {
        rows.push(format!("entries: {entries}"));
    }
    if kind.starts_with("text file") {
        rows.push(format!(
            "lines: {}",
            text_of("lines").unwrap_or_else(|| "unknown (file too large to count)".into())
        ));
    }
    if kind.starts_with("text file") {
        rows.push(format!(
            "encoding: {}",
            text_of("encoding").unwrap_or_else(|| "unknown (undecodable)".into())
        ));
    }
    if kind != "directory" {
        rows.push(format!(
            "language: {}",
            text_of("language").unwrap_or_else(|| "unknown".into())
        ));
    }
    for key in ["modified", "created", "version"] {
        if let Some(value) = text_of(key) {
            rows.push(format!("{key}: {value}"));
        }
    }
    let mount = text_of("mount").unwrap_or_default();
    let mut mount_row = format!("mount: {mount}");
    if info.get("mount_root") == Some(&Value::Bool(true)) {
        mount_row.push_str(" (this is the mount's root)");
    }
    if info.get("read_only") == Some(&Value::Bool(true)) {
        mount_row.push_str(" (read-only)");
    }
    rows.push(mount_row);
    rows.join("\n")
}

/// `2024-05-01T12:34:56Z` (UTC, whole seconds).
pub fn format_time(time: SystemTime) -> String {
    let seconds = match time.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(before) => -i64::try_from(before.duration().as_secs()).unwrap_or(i64::MAX),
    };
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

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
