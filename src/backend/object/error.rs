//! What a failure of the object store becomes for the agent: a missing object is
//! `NotFound`, a lost condition (`412 Precondition Failed`, or the object gone under an
//! `If-Match`) is the contract's "modified since it was read", an existing object under
//! `If-None-Match: *` is "already exists", and everything else — wrong credentials, a missing
//! bucket, an endpoint down, throttling past the bounded retries — is the mount being
//! unavailable, on one line that names the bucket and the cause and never a credential.

use crate::backend::Error;
use crate::path::VirtualPath;

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
    }
}
