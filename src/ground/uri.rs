//! Resource URIs: a file's URI is `mountfs://` followed by its virtual path, each segment
//! percent-encoded (`/src/a b.rs` → `mountfs:///src/a%20b.rs`). A ground-floor helper: the
//! resources (`resources/list`, `resources/read`) and the change notifications both name files
//! by it.

use percent_encoding::{AsciiSet, CONTROLS, utf8_percent_encode};

use crate::ground::path::VirtualPath;

/// The URI scheme and authority of every resource; the virtual path follows.
pub const URI_PREFIX: &str = "mountfs://";
/// The resource template naming any file.
pub const URI_TEMPLATE: &str = "mountfs:///{+path}";
/// Bytes percent-encoded in a path segment: everything but RFC 3986 unreserved characters and
/// the sub-delimiters that are safe in a path (`/` separates segments and is kept as is).
const SEGMENT: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'[')
    .add(b'\\')
    .add(b']')
    .add(b'^')
    .add(b'`')
    .add(b'{')
    .add(b'|')
    .add(b'}')
    .add(b'/');

/// The URI of the file at `path`.
pub fn uri_of(path: &VirtualPath) -> String {
    let mut uri = String::from(URI_PREFIX);
    for segment in path.components() {
        uri.push('/');
        uri.extend(utf8_percent_encode(segment, SEGMENT));
    }
    if uri.len() == URI_PREFIX.len() {
        uri.push('/');
    }
    uri
}
