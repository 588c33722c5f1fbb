//! `grep`: search file contents (CONTRACT §4). The pattern is compiled once
//! (`search::GrepPattern`); each backend searches its own files (the disk backend with ripgrep's
//! crates); the merged answer is sorted by path, paged with `head_limit`/`offset`, and formatted
//! in one of three output modes.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::{CallContext, ToolError, ToolReply, ToolResult};
use crate::ground::path::VirtualPath;
use crate::ground::search::{GlobMatcher, GrepPattern};
use crate::ground::text::truncate::{RESULT_CHAR_LIMIT, cap_result};
use crate::state::session::Session;
use crate::storage::backend::{
    self, GrepCollect, GrepFile, GrepQuery, LineWindowBudget, entry_chars, trim_to_window,
};

/// Longest line shown in content mode; longer ones are cut with a marker.
pub const MAX_SHOWN_LINE_CHARS: usize = 2000;

/// What each matching file shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OutputMode {
    /// Paths only.
    #[default]
    FilesWithMatches,
    /// `path: N`.
    Count,
    /// Matching lines with context.
    Content,
}

fn default_path() -> String {
    "/".to_owned()
}

/// Arguments of `grep` (schemas/grep.json).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// The regex (or text).
    pub pattern: String,
    /// Where to search.
    #[serde(default = "default_path")]
    pub path: String,
    /// File filter.
    #[serde(default)]
    pub glob: Option<String>,
    /// Output mode.
    #[serde(default)]
    pub output_mode: OutputMode,
    /// Search the text as written.
    #[serde(default)]
    pub literal: bool,
    /// Ignore case.
    #[serde(default)]
    pub case_insensitive: bool,
    /// Context lines.
    #[serde(default)]
    pub context: usize,
    /// Entries shown at most.
    #[serde(default)]
    pub head_limit: Option<usize>,
    /// Entries skipped.
    #[serde(default)]
    pub offset: usize,
}

/// Runs the tool.
pub async fn run(args: Args, session: &Session, call: &CallContext) -> ToolResult {
    let dir = VirtualPath::parse(&args.path)?;
    let pattern = GrepPattern::with_limits(
        &args.pattern,
        args.literal,
        args.case_insensitive,
        session.write_options.limits.regex(),
    )?
    .with_max_line_bytes(session.write_options.limits.grep_max_line_bytes);
    let file_filter = args.glob.as_deref().map(GlobMatcher::new).transpose()?;
    if session.backend().stat(&dir).await?.is_none() {
        return Err(backend::Error::NotFound { path: dir }.into());
    }
    let collect = match args.output_mode {
        OutputMode::FilesWithMatches => GrepCollect::Files,
        OutputMode::Count => GrepCollect::Count,
        OutputMode::Content => GrepCollect::Lines {
            context: args.context,
            window: LineWindowBudget {
                skip: 0,
                offset: args.offset,
                limit: args.head_limit.unwrap_or(usize::MAX),
                chars: RESULT_CHAR_LIMIT,
            },
        },
    };
    let searched = dir.as_str().to_owned();
    let mut control = super::search_control(call);
    // A page of files or counts is the first `offset + head_limit` files in path order: a
    // backend that finds them in that order may stop once it has one more (which proves the
    // page is not the last; how many match in all is then not known). Content mode pages
    // through lines, whose total the answer gives: every file is searched.
    if let (Some(limit @ 1..), OutputMode::FilesWithMatches | OutputMode::Count) =
        (args.head_limit, args.output_mode)
    {
        control = control.with_first_files(args.offset.saturating_add(limit).saturating_add(1));
    }
    let query = GrepQuery {
        dir,
        pattern: Arc::new(pattern),
        file_filter,
        collect,
        control,
    };
    let control = query.control.clone();
    let search = async {
        Ok(match collect {
            GrepCollect::Lines { context, window } if window.offset > DEEP_OFFSET => {
                deep_page(session, query, context, window).await?
            }
            _ => session.backend().grep(&query).await?,
        })
    };
    let mut files = super::watched_search("grep", call, &control, search).await?;
    // Directories a disk walk could not read (no permission, no file handle left).
    let (unread, unread_more) = control.unread_dirs();
    files.extend(
        unread
            .into_iter()
            .map(|(path, reason)| GrepFile::skipped(path, reason)),
    );
    files.sort_by(|a, b| a.path.cmp(&b.path));
    let (mut skipped, mut files): (Vec<GrepFile>, Vec<GrepFile>) =
        files.into_iter().partition(|f| f.skipped.is_some());
    // A search that stopped once it had the page read every file up to the page's end, in path
    // order, and some past it: as many as its read-ahead took by then (a store's indexed
    // search and its scan read ahead differently). Only the files it skipped up to the page's
    // last file are said, so the answer does not depend on what was read past it.
    if control.more_files()
        && let Some(last) = page_end(args.offset, args.head_limit)
            .min(files.len())
            .checked_sub(1)
            .and_then(|index| files.get(index))
            .map(|f| f.path.clone())
    {
        skipped.retain(|f| f.path <= last);
    }
    if let GrepCollect::Lines { window, .. } = collect {
        trim_to_window(&mut files, window);
    }
    let skipped_note = skipped_note(&skipped) + &super::unread_more_note(unread_more);
    let mut structured = json!({
        "mode": mode_name(args.output_mode),
        "pattern": args.pattern,
        "path": searched,
        "offset": args.offset,
    });
    // Only when something was left unsearched: an empty list says nothing (issue 45).
    if !skipped.is_empty()
        && let Some(map) = structured.as_object_mut()
    {
        map.insert(
            "skipped".into(),
            skipped
                .iter()
                .map(|f| json!({"path": f.path.as_str(), "reason": f.skipped.as_deref().unwrap_or_default()}))
                .collect(),
        );
    }
    if files.is_empty() {
        let (key, items) = match args.output_mode {
            OutputMode::FilesWithMatches => ("files", json!([])),
            OutputMode::Count => ("counts", json!({})),
            OutputMode::Content => ("lines", json!({})),
        };
        extend(&mut structured, key, items, Some(0), None);
        let mut reply = ToolReply::text(format!("No matches found{skipped_note}"));
        reply.structured = Some(structured);
        return Ok(reply);
    }
    // Files or counts: `None` when a backend stopped once the page was found (more match).
    let total = (!control.more_files()).then_some(files.len());
    let text = match args.output_mode {
        OutputMode::FilesWithMatches => {
            let rows: Vec<String> = files.iter().map(|f| f.path.to_string()).collect();
            let items = files.iter().map(|f| f.path.as_str());
            let (items, next) = page_items(
                items,
                |path| path.len() + 3,
                files.len(),
                args.head_limit,
                args.offset,
            );
            extend(&mut structured, "files", json!(items), total, next);
            page(rows, total, args.head_limit, args.offset, "files").join("\n")
        }
        OutputMode::Count => {
            let rows: Vec<String> = files
                .iter()
                .map(|f| format!("{}: {}", f.path, f.match_count))
                .collect();
            // `{path: count}`: each path once, no key repeated per file (issue 45).
            let items = files.iter().map(|f| (f.path.as_str(), f.match_count));
            let (items, next) = page_items(
                items,
                |(path, _)| path.len() + 12,
                files.len(),
                args.head_limit,
                args.offset,
            );
            let counts: Map<String, Value> = items
                .into_iter()
                .map(|(path, count)| (path.to_owned(), Value::from(count)))
                .collect();
            extend(
                &mut structured,
                "counts",
                Value::Object(counts),
                total,
                next,
            );
            page(rows, total, args.head_limit, args.offset, "files").join("\n")
        }
        OutputMode::Content => {
            let shown = content(&files, args.head_limit, args.offset);
            let next = args.offset.saturating_add(shown.shown);
            let next = (shown.shown > 0 && next < shown.total).then_some(next);
            extend(
                &mut structured,
                "lines",
                Value::Object(shown.lines),
                Some(shown.total),
                next,
            );
            shown.text
        }
    };
    // The note goes first: a result cut at the cap still says which files were not searched.
    let mut reply = ToolReply::text(cap_result(format!(
        "{}{}{text}",
        skipped_note.trim_start(),
        if skipped_note.is_empty() { "" } else { "\n" }
    )));
    reply.structured = Some(structured);
    Ok(reply)
}

/// The index past the last entry of the page `offset`/`head_limit`.
fn page_end(offset: usize, head_limit: Option<usize>) -> usize {
    offset.saturating_add(head_limit.unwrap_or(usize::MAX))
}

/// The `mode` of a structured answer: the output mode's name as the arguments spell it.
fn mode_name(mode: OutputMode) -> &'static str {
    match mode {
        OutputMode::FilesWithMatches => "files_with_matches",
        OutputMode::Count => "count",
        OutputMode::Content => "content",
    }
}

/// Adds the page (`key`: the items), the number of entries in all (`None`: not known, the
/// search stopped once it had the page) and where the next page starts to a structured answer.
fn extend(
    structured: &mut Value,
    key: &str,
    items: Value,
    total: Option<usize>,
    next: Option<usize>,
) {
    if let Some(map) = structured.as_object_mut() {
        map.insert(key.into(), items);
        map.insert("total".into(), json!(total));
        map.insert("next_offset".into(), json!(next));
    }
}

/// The structured page of files or counts: `offset`/`head_limit` applied as in the text, and cut
/// to about [`RESULT_CHAR_LIMIT`] characters of JSON (`json_len`: an item's length, about; the
/// text is capped likewise); with where the next page starts, when entries remain.
fn page_items<T>(
    items: impl Iterator<Item = T>,
    json_len: impl Fn(&T) -> usize,
    total: usize,
    head_limit: Option<usize>,
    offset: usize,
) -> (Vec<T>, Option<usize>) {
    let mut page = Vec::new();
    let mut chars = 0usize;
    for item in items.skip(offset).take(head_limit.unwrap_or(usize::MAX)) {
        chars += json_len(&item);
        if !page.is_empty() && chars > RESULT_CHAR_LIMIT {
            break;
        }
        page.push(item);
    }
    let end = offset.saturating_add(page.len());
    let next = (!page.is_empty() && end < total).then_some(end);
    (page, next)
}

/// Above this `offset` (in reported lines), content mode searches in two passes (see
/// [`deep_page`]) instead of keeping every line before the offset: at most this many kept lines
/// of up to 2,001 characters each is the bound of the one-pass way.
pub const DEEP_OFFSET: usize = 1000;

/// Content mode far into the matches, in memory for the page and one count per file: a first
/// pass counts each file's reported lines and keeps none; the second searches again, each
/// alone, only the files the page falls in, keeping only the page's lines (a single-file search
/// knows where the file's lines start). Sorted by path. (A file changed between the passes
/// shows its lines as they are at the second.)
async fn deep_page(
    session: &Session,
    query: GrepQuery,
    context: usize,
    window: LineWindowBudget,
) -> Result<Vec<GrepFile>, ToolError> {
    let mut files = session
        .backend()
        .grep(&GrepQuery {
            collect: GrepCollect::Lines {
                context,
                window: LineWindowBudget::COUNT_ONLY,
            },
            ..query.clone()
        })
        .await?;
    files.sort_by(|a, b| a.path.cmp(&b.path));
    let mut start = 0usize;
    let mut limit_left = window.limit;
    let mut chars_left = window.chars;
    for file in files.iter_mut().filter(|f| f.skipped.is_none()) {
        let end = start.saturating_add(file.entries);
        if end > window.offset && limit_left > 0 && chars_left > 0 {
            let local_offset = window.offset.saturating_sub(start);
            let page = LineWindowBudget {
                skip: local_offset,
                offset: local_offset,
                limit: limit_left,
                chars: chars_left,
            };
            let found = session
                .backend()
                .grep(&GrepQuery {
                    dir: file.path.clone(),
                    file_filter: None,
                    collect: GrepCollect::Lines {
                        context,
                        window: page,
                    },
                    ..query.clone()
                })
                .await?;
            if let Some(again) = found.into_iter().find(|f| f.path == file.path) {
                file.lines = again.lines;
                file.lines_from = again.lines_from.min(file.entries);
                file.lines.truncate(file.entries - file.lines_from);
            }
            limit_left = limit_left.saturating_sub(file.lines.len());
            let used: usize = file.lines.iter().map(|l| entry_chars(&l.text)).sum();
            chars_left = chars_left.saturating_sub(used);
        }
        start = end;
    }
    Ok(files)
}

/// Lines naming the files left unsearched and why (empty when none), each starting with a
/// newline; listed by path, at most 20.
fn skipped_note(skipped: &[GrepFile]) -> String {
    const LISTED: usize = 20;
    let mut note = String::new();
    for file in skipped.iter().take(LISTED) {
        let reason = file.skipped.as_deref().unwrap_or_default();
        note.push_str(&format!("\n[skipped {}: {reason}]", file.path));
    }
    if skipped.len() > LISTED {
        note.push_str(&format!(
            "\n[skipped {} more files for the same kind of reason]",
            skipped.len() - LISTED
        ));
    }
    note
}

/// Applies offset/head_limit to entries and appends a paging note when entries remain. `total`
/// is the number of entries in all, `None` when the search stopped once it had more than the
/// page (the rows then end past it, and the note says more match without a total).
fn page(
    rows: Vec<String>,
    total: Option<usize>,
    head_limit: Option<usize>,
    offset: usize,
    what: &str,
) -> Vec<String> {
    let found = rows.len();
    let limit = head_limit.unwrap_or(usize::MAX);
    let mut shown: Vec<String> = rows.into_iter().skip(offset).take(limit).collect();
    let end = offset.saturating_add(shown.len());
    match total {
        _ if shown.is_empty() => shown.push(format!(
            "No entries at offset {offset}: there are {} {what}. Use a smaller offset.",
            total.unwrap_or(found)
        )),
        Some(total) if end < total => shown.push(format!(
            "... [showing {what} {}-{end} of {total}; call again with offset={end} for more]",
            offset + 1
        )),
        None => shown.push(format!(
            "... [showing {what} {}-{end}; more match: call again with offset={end}]",
            offset + 1
        )),
        Some(_) => {}
    }
    shown
}

fn shown_line(text: &str) -> String {
    if text.chars().count() > MAX_SHOWN_LINE_CHARS {
        let cut: String = text.chars().take(MAX_SHOWN_LINE_CHARS).collect();
        format!("{cut} … [line truncated]")
    } else {
        text.to_owned()
    }
}

/// A page of content mode: the text, the structured lines shown (`{path: [[line, text,
/// match], …]}`), how many and the lines in all.
struct ContentPage {
    text: String,
    lines: Map<String, Value>,
    shown: usize,
    total: usize,
}

/// Content mode: entries are the match and context lines; headers and `--` separators are
/// repeated as needed around the page.
fn content(files: &[GrepFile], head_limit: Option<usize>, offset: usize) -> ContentPage {
    // Counted over every reported line, including those the backends did not keep because no
    // page of this size at this offset could show them.
    let total: usize = files.iter().map(|f| f.entries).sum();
    let limit = head_limit.unwrap_or(usize::MAX);
    let mut out: Vec<String> = Vec::new();
    // Grouped under their file, its path once; each line `[number, text, match]`, its keys
    // said once in the output schema (issue 45: a `{path, line, text, match}` object per line
    // was 1.8× the text).
    let mut lines: Map<String, Value> = Map::new();
    // Global index of the current file's first reported line.
    let mut start = 0usize;
    let mut shown = 0usize;
    for file in files {
        let mut header_done = false;
        let mut previous: Option<usize> = None;
        let mut rows: Vec<Value> = Vec::new();
        for (i, line) in file.lines.iter().enumerate() {
            let this = start + file.lines_from + i;
            if this < offset || shown >= limit {
                previous = Some(line.number);
                continue;
            }
            if !header_done {
                out.push(format!("{}:", file.path));
                header_done = true;
            } else if previous.is_some_and(|p| p + 1 != line.number) {
                out.push("  --".to_owned());
            }
            let mark = if line.is_match { ':' } else { '-' };
            let text = shown_line(&line.text);
            out.push(format!("  {}{mark} {text}", line.number));
            rows.push(json!([line.number, text, line.is_match]));
            previous = Some(line.number);
            shown += 1;
        }
        if !rows.is_empty() {
            lines.insert(file.path.as_str().to_owned(), Value::Array(rows));
        }
        start += file.entries;
    }
    let end = offset.saturating_add(shown);
    if shown == 0 {
        out.push(format!(
            "No entries at offset {offset}: there are {total} lines. Use a smaller offset."
        ));
    } else if end < total {
        out.push(format!(
            "... [showing lines {}-{end} of {total}; call again with offset={end} for more]",
            offset + 1
        ));
    }
    ContentPage {
        text: out.join("\n"),
        lines,
        shown,
        total,
    }
}
