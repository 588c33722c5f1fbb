//! What a failure of the object store becomes for the agent: a missing object is
//! `NotFound`, a lost condition (`412 Precondition Failed`, or the object gone under an
//! `If-Match`) is the contract's "modified since it was read", an existing object under
//! `If-None-Match: *` is "already exists", and everything else — wrong credentials, a missing
//! bucket, an endpoint down, throttling past the bounded retries — is the mount being
//! unavailable, on one line that names the bucket and the cause and never a credential.

use crate::ground::path::VirtualPath;
use crate::storage::backend::Error;

/// Longest cause shown from the store's own error text.
const MAX_CAUSE_CHARS: usize = 300;

/// Maps an `object_store` error met on `path` of the mount at `url` (`s3://bucket/prefix`).
pub(super) fn failure(url: &str, path: &VirtualPath, error: object_store::Error) -> Error {
    use object_store::Error as E;
    match error {
        E::NotFound { ref source, .. } if is_missing_bucket(&source.to_string()) => unavailable(
            url,
            "the bucket does not exist (check the mount's bucket name)",
        ),
        E::NotFound { .. } => Error::NotFound { path: path.clone() },
        E::AlreadyExists { .. } => Error::AlreadyExists { path: path.clone() },
        E::Precondition { .. } => Error::VersionMismatch { path: path.clone() },
        E::PermissionDenied { source, .. } | E::Unauthenticated { source, .. } => unavailable(
            url,
            &format!(
                "access denied; check the credentials in the environment ({})",
                cause(&source.to_string())
            ),
        ),
        other => {
            let text = other.to_string();
            if is_missing_bucket(&text) {
                unavailable(
                    url,
                    "the bucket does not exist (check the mount's bucket name)",
                )
            } else if is_refused(answer_of(&text)) {
                // A 403 the client did not classify (a listing's, a multipart call's).
                unavailable(
                    url,
                    &format!(
                        "access denied; check the credentials in the environment (the store said {})",
                        s3_code(answer_of(&text)).unwrap_or("403 Forbidden")
                    ),
                )
            } else if is_throttled(answer_of(&text)) {
                unavailable(
                    url,
                    &format!(
                        "the store is throttling requests (503 SlowDown) and still was after {} retries with backoff; retry later ({})",
                        super::connect::MAX_RETRIES,
                        cause(&text)
                    ),
                )
            } else {
                unavailable(url, &cause(&text))
            }
        }
    }
}

/// The mount as unavailable, with why.
pub(super) fn unavailable(url: &str, why: &str) -> Error {
    Error::Unavailable {
        message: format!("object store {url}: {why}"),
    }
}

fn is_missing_bucket(text: &str) -> bool {
    text.contains("NoSuchBucket")
}

/// The server's answer in a client error's text (`Server returned …`: status and body), empty
/// when there was none (a connection that failed). The request's URL before it holds the key,
/// which an agent names: a key called `SlowDown` must not make an error look like throttling.
fn answer_of(text: &str) -> &str {
    text.find("Server returned").map_or("", |at| &text[at..])
}

/// A refusal of the request's credentials or signature: `403 Forbidden`, or S3's codes for it.
fn is_refused(text: &str) -> bool {
    text.contains("403 Forbidden")
        || [
            "SignatureDoesNotMatch",
            "InvalidAccessKeyId",
            "AccessDenied",
            "ExpiredToken",
        ]
        .iter()
        .any(|code| text.contains(code))
}

/// The S3 error code in an error body (`<Code>…</Code>`), when it is a plain word.
fn s3_code(text: &str) -> Option<&str> {
    let start = text.find("<Code>")? + "<Code>".len();
    let code = &text[start..start + text[start..].find("</Code>")?];
    (!code.is_empty() && code.len() <= 64 && code.chars().all(|c| c.is_ascii_alphanumeric()))
        .then_some(code)
}

/// A store asking to slow down: S3's `503 SlowDown`, a `429 Too Many Requests`, past the
/// bounded retries (`connect`).
fn is_throttled(text: &str) -> bool {
    text.contains("SlowDown")
        || text.contains("503 Service Unavailable")
        || text.contains("429 Too Many Requests")
}

/// The store's error text on one line, bounded.
fn cause(text: &str) -> String {
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match one_line.char_indices().nth(MAX_CAUSE_CHARS) {
        Some((end, _)) => format!("{}…", &one_line[..end]),
        None => one_line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions_and_absence_keep_their_meaning_and_the_rest_is_one_line() {
        let path = VirtualPath::parse("/a.txt").unwrap();
        let lost = object_store::Error::Precondition {
            path: "k".into(),
            source: "412".into(),
        };
        assert_eq!(
            failure("s3://b", &path, lost),
            Error::VersionMismatch { path: path.clone() }
        );
        let down = object_store::Error::Generic {
            store: "S3",
            source: "error sending request\n  connection refused".into(),
        };
        assert_eq!(
            failure("s3://b/p", &path, down).to_string(),
            "Error: mount unavailable: object store s3://b/p: Generic S3 error: error sending request connection refused. Other mounts still work; retry later"
        );
        let refused = object_store::Error::Generic {
            store: "S3",
            source: "Error performing GET http://h/b?list-type=2 - Server returned non-2xx status code: 403 Forbidden: <?xml version=\"1.0\"?>\n<Error><Code>SignatureDoesNotMatch</Code></Error>".into(),
        };
        assert_eq!(
            failure("s3://b/p", &path, refused).to_string(),
            "Error: mount unavailable: object store s3://b/p: access denied; check the credentials in the environment (the store said SignatureDoesNotMatch). Other mounts still work; retry later"
        );
        // A key an agent named is in the URL: it does not make the error another one.
        let named = object_store::Error::Generic {
            store: "S3",
            source: "Error performing GET http://h/b/p/SlowDown%20403%20Forbidden.txt in 2ms - error sending request".into(),
        };
        let told = failure("s3://b/p", &path, named).to_string();
        assert!(
            !told.contains("throttling") && !told.contains("access denied"),
            "{told}"
        );
    }
}
