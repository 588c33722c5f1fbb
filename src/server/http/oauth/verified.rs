//! Access tokens already verified, so that a client sending the same token on every request
//! pays one signature check per token, not one per request (issue 43's cost target: an RS256
//! verification costs about as much as the `read_file` it guards).
//!
//! An entry is found by a keyed hash (SipHash, a random key per process) of the token's length
//! and its last [`TAIL`] bytes (the end of its signature), and serves only a token equal to the
//! one verified, byte for byte, compared in a time that depends on its length only: hashing a whole token (600+ bytes,
//! even with SHA-256 in hardware) cost more than the rest of the check. The token is held in
//! the server's memory, which is not dumpable (`PR_SET_DUMPABLE 0`), and never written
//! anywhere. An entry holds the principal the checks gave, and serves only:
//! - before the token's `exp` (no leeway: the checks forgave 60 s of clock skew once, the cache
//!   forgives nothing more), and
//! - while the issuer's keys held are the very set that verified it and are fresh: a refetch
//!   (a rotation, a withdrawn key, the keys' maximum age) empties the cache's use of it, and
//!   the next request is verified again against the new keys.
//!
//! Refusals are never cached, nor tokens over [`MAX_TOKEN_BYTES`]. The cache is bounded: at
//! [`MAX_ENTRIES`] expired entries go, and if none had expired it starts over.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use jsonwebtoken::jwk::Jwk;

use crate::server::workspace::Principal;

/// Most tokens held at once (at most [`MAX_TOKEN_BYTES`] each: 16 MiB in all at worst).
pub const MAX_ENTRIES: usize = 4096;
/// Longest token remembered; a longer one is verified on every request.
pub const MAX_TOKEN_BYTES: usize = 4096;
/// How many of a token's last bytes its entry is found by.
pub const TAIL: usize = 64;

/// What an entry is found by (see the module doc).
pub type Key = u64;

/// One verified token.
#[derive(Debug)]
struct Verified {
    token: Box<[u8]>,
    principal: Principal,
    /// The token's `exp`, seconds since the epoch.
    expires: u64,
    /// The key set it was verified against.
    keys: Arc<Vec<Jwk>>,
}

/// The cache (see the module doc).
#[derive(Debug, Default)]
pub struct VerifiedTokens {
    held: Mutex<HashMap<Key, Verified>>,
    /// The hash's key, random per process.
    state: std::collections::hash_map::RandomState,
}

/// Whether `a` and `b` are equal, in a time that depends on their length only: eight bytes
/// at a time, every difference or'ed together, no early exit. (`subtle`'s byte-at-a-time
/// comparison cost more than all the rest of a cached check for a 600-byte token.)
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let word = |chunk: &[u8]| u64::from_ne_bytes(chunk.try_into().unwrap_or([0; 8]));
    let (words_a, words_b) = (a.chunks_exact(8), b.chunks_exact(8));
    let rest = words_a.remainder().iter().zip(words_b.remainder());
    let mut differences = words_a
        .zip(words_b)
        .fold(0u64, |acc, (x, y)| acc | (word(x) ^ word(y)));
    for (x, y) in rest {
        differences |= u64::from(x ^ y);
    }
    std::hint::black_box(differences) == 0
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl VerifiedTokens {
    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Verified>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The key `token` is found by.
    pub fn key(&self, token: &[u8]) -> Key {
        let tail = &token[token.len().saturating_sub(TAIL)..];
        self.state.hash_one((token.len(), tail))
    }

    /// The principal of `token` (found by `key`), when that very token was verified against
    /// `keys` (the fresh keys held now) and has not expired.
    pub fn get(&self, key: Key, token: &[u8], keys: &Arc<Vec<Jwk>>) -> Option<Principal> {
        let mut held = self.held();
        let entry = held.get(&key)?;
        if !same(&entry.token, token) {
            // Another token with the same key: verified in full (and then replaces it).
            return None;
        }
        if entry.expires > now() && Arc::ptr_eq(&entry.keys, keys) {
            return Some(entry.principal.clone());
        }
        held.remove(&key);
        None
    }

    /// Remembers that `token` (found by `key`) was verified against `keys`, naming
    /// `principal` until `expires`.
    pub fn insert(
        &self,
        key: Key,
        token: &[u8],
        principal: Principal,
        expires: u64,
        keys: Arc<Vec<Jwk>>,
    ) {
        let at = now();
        if expires <= at || token.len() > MAX_TOKEN_BYTES {
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
            key,
            Verified {
                token: token.into(),
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

    fn put(
        cache: &VerifiedTokens,
        token: &[u8],
        principal: &str,
        expires: u64,
        keys: &Arc<Vec<Jwk>>,
    ) {
        cache.insert(
            cache.key(token),
            token,
            Principal::named(principal),
            expires,
            keys.clone(),
        );
    }

    fn get(cache: &VerifiedTokens, token: &[u8], keys: &Arc<Vec<Jwk>>) -> Option<Principal> {
        cache.get(cache.key(token), token, keys)
    }

    #[test]
    fn an_entry_serves_only_its_token_before_exp_and_with_the_keys_that_verified_it() {
        let cache = VerifiedTokens::default();
        let keys = Arc::new(Vec::new());
        let other = Arc::new(Vec::new());
        put(
            &cache,
            b"header.payload.signature",
            "oauth:alice",
            now() + 60,
            &keys,
        );
        assert!(get(&cache, b"header.payload.signature", &keys).is_some());
        assert!(get(&cache, b"header.payload.signaturf", &keys).is_none());
        // Same length and tail (the same key), another start: never the cached principal.
        assert!(get(&cache, b"HEADER.payload.signature", &keys).is_none());
        // Another key set (a refetch, even of equal keys): verified again, and forgotten.
        assert!(get(&cache, b"header.payload.signature", &other).is_none());
        assert!(get(&cache, b"header.payload.signature", &keys).is_none());
        // Expired, or expiring now, or too long: never held.
        put(&cache, b"c", "c", now(), &keys);
        put(
            &cache,
            &vec![b'x'; MAX_TOKEN_BYTES + 1],
            "x",
            now() + 60,
            &keys,
        );
        assert!(cache.is_empty());
    }

    #[test]
    fn tokens_are_compared_whole() {
        assert!(same(b"", b""));
        assert!(same(b"0123456789abcdefXYZ", b"0123456789abcdefXYZ"));
        assert!(!same(b"0123456789abcdefXYZ", b"0123456789abcdefXYz"));
        assert!(!same(b"0123456789abcdefXYZ", b"1123456789abcdefXYZ"));
        assert!(!same(b"abc", b"abcd"));
    }

    #[test]
    fn the_cache_stays_bounded() {
        let cache = VerifiedTokens::default();
        let keys = Arc::new(Vec::new());
        for n in 0..(MAX_ENTRIES + 10) {
            put(&cache, n.to_string().as_bytes(), "p", now() + 60, &keys);
        }
        assert!(cache.len() <= MAX_ENTRIES);
        let last = (MAX_ENTRIES + 9).to_string();
        assert!(get(&cache, last.as_bytes(), &keys).is_some());
    }
}
