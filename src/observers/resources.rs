//! Files as MCP resources: `resources/list` pages through every file of every mount,
//! `resources/read` returns one file as text or a base64 blob, the template
//! `mountfs:///{+path}` names any file.
//!
//! A file's URI is `mountfs://` followed by its virtual path, each segment percent-encoded
//! (`/src/a b.rs` → `mountfs:///src/a%20b.rs`). Listing walks the tree in path order, one
//! directory listing at a time, so a page costs the directories on the way to it and never the
//! whole tree; the cursor is the last path of the previous page. Reads go through the same bound
//! as every other whole-file read: a file over [`MAX_RESOURCE_BYTES`] is refused with its size
//! and a pointer to `read_file` windows.

use base64::Engine;
use percent_encoding::percent_decode_str;
use rmcp::model::{Annotations, Resource, ResourceContents};
use thiserror::Error;

use crate::ground::content;
use crate::ground::path::VirtualPath;
use crate::ground::text::encoding::{self, Detection};
use crate::ground::time::format_time;
pub use crate::ground::uri::{URI_PREFIX, URI_TEMPLATE, uri_of};
use crate::storage::backend::{self, Backend, BoundedRead, Entry};

/// Files listed per `resources/list` page.
pub const PAGE_SIZE: usize = 500;
/// The largest file `resources/read` returns; larger ones are read with `read_file` windows.
pub const MAX_RESOURCE_BYTES: u64 = 4 * 1024 * 1024;
/// Directories never listed as resources (version-control internals).
const SKIPPED_DIRS: &[&str] = &[".git"];

/// A resource request that cannot be served.
#[derive(Debug, Error)]
pub enum ResourceError {
    /// The URI is not a `mountfs:///` URI of a valid virtual path.
    #[error(
        "invalid resource URI '{uri}': {reason}. Resource URIs are mountfs:/// followed by an absolute virtual path, e.g. mountfs:///src/main.rs"
    )]
    InvalidUri {
        /// The URI as given.
        uri: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The cursor was not one this server gave.
    #[error(
        "invalid cursor '{0}': pass the nextCursor of the previous resources/list answer, or none to start over"
    )]
    InvalidCursor(String),
    /// Nothing at the path.
    #[error("resource not found: {path} does not exist. List the files with resources/list or ls")]
    NotFound {
        /// The path.
        path: VirtualPath,
    },
    /// A directory, not a file.
    #[error("{path} is a directory, not a file resource; list its files with resources/list or ls")]
    IsADirectory {
        /// The path.
        path: VirtualPath,
    },
    /// Over [`MAX_RESOURCE_BYTES`].
    #[error(
        "{path} has {size} bytes, more than a resource may have ({MAX_RESOURCE_BYTES} bytes); read it in windows with the read_file tool (offset, limit) or search it with grep"
    )]
    TooLarge {
        /// The path.
        path: VirtualPath,
        /// Its size in bytes.
        size: u64,
    },
    /// The backend failed.
    #[error(transparent)]
    Backend(#[from] backend::Error),
}

/// The virtual path a `mountfs:///…` URI names.
pub fn path_of(uri: &str) -> Result<VirtualPath, ResourceError> {
    let invalid = |reason: &str| ResourceError::InvalidUri {
        uri: uri.to_owned(),
        reason: reason.to_owned(),
    };
    let Some(rest) = uri.strip_prefix(URI_PREFIX) else {
        return Err(invalid("it does not start with mountfs:///"));
    };
    if !rest.starts_with('/') {
        return Err(invalid("the path after mountfs:// must start with '/'"));
    }
    if rest.contains(['?', '#']) {
        return Err(invalid(
            "queries and fragments are not part of a file's URI",
        ));
    }
    let decoded = percent_decode_str(rest)
        .decode_utf8()
        .map_err(|_| invalid("its percent-encoded bytes are not UTF-8"))?;
    // Percent-encoding carries names as they are: no `\u{…}` escapes to decode.
    let path = VirtualPath::parse_raw(&decoded).map_err(|error| invalid(&error.to_string()))?;
    path.refuse_reserved()
        .map_err(|error| invalid(&error.to_string()))?;
    Ok(path)
}

/// The resource describing the file `entry` (a listing entry or a stat).
pub fn resource_of(entry: &Entry) -> Resource {
    // Names and titles as answers show them (hidden and control characters escaped).
    let name = crate::ground::path::escape_name(name_of(entry));
    let mut resource = Resource::new(uri_of(&entry.path), name)
        .with_title(entry.path.to_string())
        .with_size(entry.size);
    if let Some(mime) = mime_by_name(&entry.path) {
        resource = resource.with_mime_type(mime);
    }
    if let Some(modified) = entry.modified {
        resource = resource.with_annotations(last_modified(modified));
    }
    resource
}

/// Annotations carrying only `lastModified`.
pub fn last_modified(time: std::time::SystemTime) -> Annotations {
    let mut annotations = Annotations::default();
    annotations.last_modified = Some(format_time(time));
    annotations
}

/// The MIME type the file name suggests, if any.
fn mime_by_name(path: &VirtualPath) -> Option<String> {
    mime_guess::from_path(path.as_str())
        .first()
        .map(|mime| mime.essence_str().to_owned())
}

/// One page of `resources/list`: up to [`PAGE_SIZE`] files after `cursor` in path order, and
/// the cursor of the next page when there may be more.
pub async fn list_page(
    backend: &dyn Backend,
    cursor: Option<&str>,
) -> Result<(Vec<Resource>, Option<String>), ResourceError> {
    let after = cursor
        .map(|text| decode_cursor(text).ok_or_else(|| ResourceError::InvalidCursor(text.into())))
        .transpose()?;
    let files = files_after(backend, after.as_ref(), PAGE_SIZE).await;
    let next = (files.len() == PAGE_SIZE)
        .then(|| files.last().map(|entry| encode_cursor(&entry.path)))
        .flatten();
    Ok((files.iter().map(resource_of).collect(), next))
}

fn encode_cursor(path: &VirtualPath) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(path.as_str())
}

fn decode_cursor(text: &str) -> Option<VirtualPath> {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text)
        .ok()?;
    VirtualPath::parse_raw(std::str::from_utf8(&bytes).ok()?).ok()
}

/// Up to `limit` files that come after `after` in path order (a directory's files right after
/// it, names compared byte by byte), walking one directory listing at a time. A directory that
/// cannot be listed (a mount that is down, no permission) is skipped with a warning in the log:
/// one unreadable corner does not hide every other file.
async fn files_after(
    backend: &dyn Backend,
    after: Option<&VirtualPath>,
    limit: usize,
) -> Vec<Entry> {
    // Each frame: a directory's remaining entries, last-first so that `pop` yields path order.
    let mut stack: Vec<Vec<Entry>> = Vec::new();
    let root = VirtualPath::root();
    match after {
        None => stack.push(listing(backend, &root).await),
        Some(after) => {
            // The ancestors of `after`, root first: in each, what sorts after the component
            // leading to `after`; the deepest ancestor's frame is popped first.
            let mut dir = root;
            for component in after.components() {
                let mut entries = listing(backend, &dir).await;
                entries.retain(|entry| name_of(entry) > component);
                stack.push(entries);
                dir = dir.join(component).unwrap_or_else(|_| dir.clone());
            }
        }
    }
    let mut files = Vec::new();
    while files.len() < limit {
        let Some(frame) = stack.last_mut() else { break };
        let Some(entry) = frame.pop() else {
            stack.pop();
            continue;
        };
        if entry.is_dir() {
            if !SKIPPED_DIRS.contains(&name_of(&entry)) {
                stack.push(listing(backend, &entry.path).await);
            }
        } else {
            files.push(entry);
        }
    }
    files
}

/// The last component of an entry's path.
fn name_of(entry: &Entry) -> &str {
    entry.path.file_name().unwrap_or_default()
}

/// The entries of `dir`, last name first (see [`files_after`]); empty when it cannot be listed.
async fn listing(backend: &dyn Backend, dir: &VirtualPath) -> Vec<Entry> {
    match backend.ls(dir).await {
        Ok(mut entries) => {
            entries.sort_by(|a, b| name_of(b).cmp(name_of(a)));
            entries
        }
        Err(backend::Error::NotFound { .. }) => Vec::new(),
        Err(error) => {
            tracing::warn!(%dir, %error, "resources/list skips a directory it cannot list");
            Vec::new()
        }
    }
}

/// The contents of the file a `mountfs:///…` URI names: text in any encoding `read_file` reads
/// as text (decoded, a BOM left out), anything else as a base64 blob with its MIME type.
pub async fn read(backend: &dyn Backend, uri: &str) -> Result<ResourceContents, ResourceError> {
    let path = path_of(uri)?;
    let file = match backend.read_at_most(&path, MAX_RESOURCE_BYTES).await {
        Ok(BoundedRead::Whole(file)) => file,
        Ok(BoundedRead::TooLarge { size, .. }) => {
            return Err(ResourceError::TooLarge { path, size });
        }
        Err(backend::Error::NotFound { .. }) => return Err(ResourceError::NotFound { path }),
        Err(backend::Error::IsADirectory { .. }) => {
            return Err(ResourceError::IsADirectory { path });
        }
        Err(error) => return Err(error.into()),
    };
    let uri = uri_of(&path);
    let by_name = mime_by_name(&path);
    let head = &file.content[..file.content.len().min(content::SNIFF_BYTES)];
    if !content::looks_binary(&file.content) || encoding::is_utf16_text(head) {
        // Decoded as read_file decodes it: UTF-8, UTF-16 with a BOM or a legacy encoding, checked
        // both ways; bytes valid in no encoding are sent as they are, as a blob.
        if let Detection::Text { text, .. } = encoding::detect(&file.content) {
            let text = text.strip_prefix('\u{FEFF}').unwrap_or(&text).to_owned();
            let mime = by_name
                .filter(|mime| mime.starts_with("text/") || mime.ends_with("json"))
                .unwrap_or_else(|| "text/plain".to_owned());
            return Ok(ResourceContents::TextResourceContents {
                uri,
                mime_type: Some(mime),
                text,
                meta: None,
            });
        }
    }
    let mime = content::image_mime(&file.content)
        .map(str::to_owned)
        .or(by_name)
        .unwrap_or_else(|| "application/octet-stream".to_owned());
    Ok(ResourceContents::BlobResourceContents {
        uri,
        mime_type: Some(mime),
        blob: base64::engine::general_purpose::STANDARD.encode(&file.content),
        meta: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(text: &str) -> VirtualPath {
        VirtualPath::parse(text).expect("valid path")
    }

    #[test]
    fn uris_percent_encode_segments_and_decode_back() {
        for text in [
            "/a.txt",
            "/src/a b.rs",
            "/dir/100%/x#y?z.md",
            "/ünïcode/日本.txt",
            "/memories/[brackets]{braces}.json",
        ] {
            let uri = uri_of(&path(text));
            assert!(uri.starts_with("mountfs:///"), "{uri}");
            assert!(!uri.contains([' ', '#', '?']), "{uri}");
            assert_eq!(path_of(&uri).expect("parses back"), path(text), "{uri}");
        }
        assert_eq!(uri_of(&path("/src/a b.rs")), "mountfs:///src/a%20b.rs");
        assert_eq!(uri_of(&path("/")), "mountfs:///");
    }

    #[test]
    fn bad_uris_are_refused_with_the_reason() {
        for (uri, reason) in [
            ("file:///etc/passwd", "does not start with mountfs:///"),
            ("mountfs://host/a", "must start with '/'"),
            ("mountfs:///a%ff", "not UTF-8"),
            ("mountfs:///a?x=1", "queries and fragments"),
            ("mountfs:///../etc/passwd", ""),
        ] {
            let error = path_of(uri).expect_err(uri).to_string();
            assert!(error.contains(reason), "{uri}: {error}");
            assert!(error.contains("mountfs:///src/main.rs"), "{error}");
        }
    }

    #[test]
    fn cursors_round_trip_and_foreign_ones_are_refused() {
        let cursor = encode_cursor(&path("/a/b c.txt"));
        assert_eq!(decode_cursor(&cursor), Some(path("/a/b c.txt")));
        assert_eq!(decode_cursor("not base64!"), None);
    }
}
