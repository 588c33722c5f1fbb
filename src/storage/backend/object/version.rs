//! An object's version as mountfs shows it, made from what the store gives: the ETag (S3,
//! Azure) and, where the store has one, the object's version or generation (GCS conditions
//! its writes on the generation). Both are kept in one [`Version`] text so that a write made
//! conditional on it hands the store exactly what it answered (`object_store`'s
//! [`UpdateVersion`] recommends keeping both).

use object_store::{ObjectMeta, PutResult, UpdateVersion};

use crate::storage::backend::Version;

/// Between the ETag and the store's version in the text of a [`Version`]; ETags and
/// generations hold no `~`.
const SEPARATOR: &str = "~v=";

/// The [`Version`] of what the store reported. The ETag is kept without its quotes (a
/// completed multipart upload reports it bare, a HEAD quoted; conditions quote it again), and
/// S3's `null` version of an unversioned bucket is no version.
pub(super) fn from_parts(e_tag: Option<&str>, version: Option<&str>) -> Version {
    let e_tag = e_tag.map(|tag| tag.trim_start_matches("W/").trim_matches('"'));
    let version = version.filter(|v| !v.is_empty() && *v != "null");
    match version {
        Some(version) => Version::from_raw(format!("{}{SEPARATOR}{version}", e_tag.unwrap_or(""))),
        None => Version::from_raw(e_tag.unwrap_or("")),
    }
}

/// The version of a listed or headed object.
pub(super) fn of_meta(meta: &ObjectMeta) -> Version {
    from_parts(meta.e_tag.as_deref(), meta.version.as_deref())
}

/// The version a put left.
pub(super) fn of_put(result: &PutResult) -> Version {
    from_parts(result.e_tag.as_deref(), result.version.as_deref())
}

/// What a conditional write hands the store; `None` for a text this backend never gave out
/// (it cannot be the current version).
pub(super) fn to_update(version: &Version) -> Option<UpdateVersion> {
    let text = version.as_str();
    if text.is_empty() {
        return None;
    }
    let (e_tag, version) = match text.rsplit_once(SEPARATOR) {
        Some((e_tag, version)) => (
            (!e_tag.is_empty()).then(|| format!("\"{e_tag}\"")),
            Some(version.to_owned()),
        ),
        None => (Some(format!("\"{text}\"")), None),
    };
    Some(UpdateVersion { e_tag, version })
}

/// The ETag to send as `If-Match` on reads that must see this version only.
pub(super) fn e_tag_of(version: &Version) -> Option<String> {
    to_update(version).and_then(|update| update.e_tag)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_round_trip_their_etag_and_generation() {
        let plain = from_parts(Some("\"abc\""), Some("null"));
        assert_eq!(plain.as_str(), "abc");
        assert_eq!(
            from_parts(Some("abc"), None),
            plain,
            "bare or quoted, one version"
        );
        assert_eq!(
            to_update(&plain),
            Some(UpdateVersion {
                e_tag: Some("\"abc\"".into()),
                version: None
            })
        );
        let both = from_parts(Some("CJ+x"), Some("1700"));
        assert_eq!(
            to_update(&both),
            Some(UpdateVersion {
                e_tag: Some("\"CJ+x\"".into()),
                version: Some("1700".into())
            })
        );
        assert_eq!(to_update(&Version::from_raw("")), None);
    }
}
