//! Access tokens already verified, so that a client sending the same token on every request
//! pays one signature check per token, not one per request (issue 43's cost target: an RS256
//! verification costs about as much as the `read_file` it guards).
//!
//! An entry is found by the SHA-256 of the token (the token itself is never kept) and holds the
//! principal the checks gave. It serves only:
//! - before the token's `exp` (no leeway: the checks forgave 60 s of clock skew once, the cache
//!   forgives nothing more), and
//! - while the issuer's keys held are the very set that verified it and are fresh: a refetch
//!   (a rotation, a withdrawn key, the keys' maximum age) empties the cache's use of it, and
//!   the next request is verified again against the new keys.
//!
//! Refusals are never cached. The cache is bounded: at [`MAX_ENTRIES`] expired entries go, and
//! if none had expired it starts over.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use jsonwebtoken::jwk::Jwk;
use sha2::{Digest, Sha256};

use crate::workspace::Principal;

/// Most tokens held at once.
pub const MAX_ENTRIES: usize = 8192;

/// One verified token.
#[derive(Debug)]
struct Verified {
    principal: Principal,
    /// The token's `exp`, seconds since the epoch.
    expires: u64,
    /// The key set it was verified against.
    keys: Arc<Vec<Jwk>>,
}

/// The cache (see the module doc).
#[derive(Debug, Default)]
pub struct VerifiedTokens {
    held: Mutex<HashMap<[u8; 32], Verified>>,
}

/// The digest a token is found by.
pub fn digest(token: &[u8]) -> [u8; 32] {
    Sha256::digest(token).into()
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl VerifiedTokens {
    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Verified>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The principal of the token with `digest`, when it was verified against `keys` (the
    /// fresh keys held now) and has not expired.
    pub fn get(&self, digest: &[u8; 32], keys: &Arc<Vec<Jwk>>) -> Option<Principal> {
        let mut held = self.held();
        let entry = held.get(digest)?;
        if entry.expires > now() && Arc::ptr_eq(&entry.keys, keys) {
            return Some(entry.principal.clone());
        }
        held.remove(digest);
        None
    }

    /// Remembers that the token with `digest` was verified against `keys`, naming `principal`
    /// until `expires`.
    pub fn insert(
        &self,
        digest: [u8; 32],
        principal: Principal,
        expires: u64,
        keys: Arc<Vec<Jwk>>,
    ) {
        let at = now();
        if expires <= at {
            return;
        }
        let mut held = self.held();
        if held.len() >= MAX_ENTRIES {
            held.retain(|_, entry| entry.expires > at && Arc::ptr_eq(&entry.keys, &keys));
            if held.len() >= MAX_ENTRIES {
                held.clear();
            }
        }
        held.insert(
            digest,
            Verified {
                principal,
                expires,
                keys,
            },
        );
    }

    /// How many tokens are held.
    pub fn len(&self) -> usize {
        self.held().len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_serves_only_before_exp_and_with_the_keys_that_verified_it() {
        let cache = VerifiedTokens::default();
        let keys = Arc::new(Vec::new());
        let other = Arc::new(Vec::new());
        let alice = Principal::named("oauth:alice");
        cache.insert(digest(b"a"), alice, now() + 60, keys.clone());
        assert!(cache.get(&digest(b"a"), &keys).is_some());
        assert!(cache.get(&digest(b"b"), &keys).is_none());
        // Another key set (a refetch, even of equal keys): verified again, and forgotten.
        assert!(cache.get(&digest(b"a"), &other).is_none());
        assert!(cache.get(&digest(b"a"), &keys).is_none());
        // Expired, or expiring now: never held.
        cache.insert(digest(b"c"), Principal::named("c"), now(), keys.clone());
        assert!(cache.get(&digest(b"c"), &keys).is_none());
        assert!(cache.is_empty());
    }

    #[test]
    fn the_cache_stays_bounded() {
        let cache = VerifiedTokens::default();
        let keys = Arc::new(Vec::new());
        for n in 0..(MAX_ENTRIES + 10) {
            let token = n.to_string();
            cache.insert(
                digest(token.as_bytes()),
                Principal::named("p"),
                now() + 60,
                keys.clone(),
            );
        }
        assert!(cache.len() <= MAX_ENTRIES);
        let last = (MAX_ENTRIES + 9).to_string();
        assert!(cache.get(&digest(last.as_bytes()), &keys).is_some());
    }
}
