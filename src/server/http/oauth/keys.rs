//! The issuer's signing keys: its discovery document (OpenID Connect
//! `/.well-known/openid-configuration`, else RFC 8414 `/.well-known/oauth-authorization-server`)
//! names the `jwks_uri`, whose keys are cached here.
//!
//! The cache is refreshed when a token names a key id it does not hold (the issuer rotated its
//! key), at most once per `--oauth-jwks-min-interval` whatever the tokens say, and when it is
//! older than [`KEYS_MAX_AGE`] (so a key the issuer withdrew stops being accepted). A failed
//! fetch keeps the keys held. Fetches go over HTTPS (the platform's certificate verifier); plain
//! HTTP only to a loopback host (a local identity provider, the tests). Redirects are not
//! followed. What the keys verify, and which tokens are accepted, is `oauth/mod.rs`'s concern.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use jsonwebtoken::jwk::{Jwk, JwkSet};
use serde::Deserialize;

/// Cached keys older than this are fetched again before use.
pub const KEYS_MAX_AGE: Duration = Duration::from_secs(600);
/// Longest wait for one discovery or JWKS answer.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest discovery document or JWKS read (real ones are a few KiB).
const MAX_DOCUMENT_BYTES: usize = 1024 * 1024;

/// Why the issuer's keys could not be fetched (the cached ones, if any, stay in use).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchError {
    /// A URL is not https (and not loopback), or does not parse.
    #[error(
        "{url}: {problem}. The issuer and its jwks_uri must be https:// URLs (http:// only on a loopback address such as 127.0.0.1)"
    )]
    Url {
        /// The URL.
        url: String,
        /// What is wrong.
        problem: String,
    },
    /// The request failed or timed out.
    #[error("{url}: {reason}. Check that the issuer is reachable from this server")]
    Request {
        /// The URL.
        url: String,
        /// Why.
        reason: String,
    },
    /// A non-200 answer.
    #[error("{url} answered HTTP {status}")]
    Status {
        /// The URL.
        url: String,
        /// The status.
        status: u16,
    },
    /// The body is not the JSON expected.
    #[error("{url}: {problem}")]
    Document {
        /// The URL.
        url: String,
        /// What is wrong.
        problem: String,
    },
    /// Neither discovery document was found.
    #[error(
        "no discovery document for the issuer {issuer}: {openid}; {rfc8414}. Check --oauth-issuer: it is the issuer URL the provider publishes (the `iss` of its tokens)"
    )]
    NoDiscovery {
        /// The issuer.
        issuer: String,
        /// Why the OpenID Connect document failed.
        openid: String,
        /// Why the RFC 8414 document failed.
        rfc8414: String,
    },
    /// The discovery document names another issuer.
    #[error(
        "the discovery document of {configured} names the issuer {published}: give --oauth-issuer exactly as the provider publishes it"
    )]
    IssuerMismatch {
        /// `--oauth-issuer`.
        configured: String,
        /// The document's `issuer`.
        published: String,
    },
}

/// What discovery found: the issuer as published (the `iss` tokens carry) and the JWKS URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discovered {
    /// The document's `issuer`.
    pub issuer: String,
    /// The document's `jwks_uri`.
    pub jwks_uri: String,
    /// Which document answered.
    pub document: String,
}

#[derive(Deserialize)]
struct DiscoveryDocument {
    issuer: String,
    jwks_uri: String,
}

/// A small HTTPS (or loopback HTTP) GET client for JSON documents.
#[derive(Clone)]
pub struct Fetcher {
    client: Client<hyper_rustls::HttpsConnector<HttpConnector>, Empty<Bytes>>,
}

impl std::fmt::Debug for Fetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fetcher").finish_non_exhaustive()
    }
}

impl Fetcher {
    /// A client trusting the platform's certificate roots.
    pub fn new() -> Result<Self, FetchError> {
        // The provider is named, not taken from the process default: another crate enabling a
        // second rustls provider must not leave the choice (and a panic) to chance.
        let provider = rustls::crypto::aws_lc_rs::default_provider();
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_platform_verifier(provider)
            .map_err(|error| FetchError::Request {
                url: "(TLS set-up)".to_owned(),
                reason: error.to_string(),
            })?
            .https_or_http()
            .enable_http1()
            .build();
        Ok(Self {
            client: Client::builder(TokioExecutor::new()).build(https),
        })
    }

    /// GETs `url` (checked by [`check_url`]) and parses its JSON body.
    pub async fn json<T: serde::de::DeserializeOwned>(&self, url: &str) -> Result<T, FetchError> {
        let uri = check_url(url)?;
        let request = http::Request::get(uri)
            .header(http::header::ACCEPT, "application/json")
            .header(http::header::USER_AGENT, "mountfs")
            .body(Empty::new())
            .map_err(|error| FetchError::Url {
                url: url.to_owned(),
                problem: error.to_string(),
            })?;
        let request_error = |reason: String| FetchError::Request {
            url: url.to_owned(),
            reason,
        };
        let fetched = tokio::time::timeout(FETCH_TIMEOUT, async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|error| request_error(error.to_string()))?;
            let status = response.status();
            if status != http::StatusCode::OK {
                return Err(FetchError::Status {
                    url: url.to_owned(),
                    status: status.as_u16(),
                });
            }
            Limited::new(response.into_body(), MAX_DOCUMENT_BYTES)
                .collect()
                .await
                .map(|body| body.to_bytes())
                .map_err(|error| request_error(error.to_string()))
        })
        .await
        .map_err(|_| request_error(format!("no answer within {} s", FETCH_TIMEOUT.as_secs())))??;
        serde_json::from_slice(&fetched).map_err(|error| FetchError::Document {
            url: url.to_owned(),
            problem: format!("not the JSON expected ({error})"),
        })
    }

    /// Finds the issuer's discovery document: OpenID Connect's, else RFC 8414's.
    pub async fn discover(&self, issuer: &str) -> Result<Discovered, FetchError> {
        check_url(issuer)?;
        let trimmed = issuer.trim_end_matches('/');
        let openid = format!("{trimmed}/.well-known/openid-configuration");
        let openid_error = match self.json::<DiscoveryDocument>(&openid).await {
            Ok(document) => return found(issuer, document, openid),
            Err(error) => error.to_string(),
        };
        // RFC 8414 §3: the well-known segment goes between the host and the issuer's path.
        let rfc8414 = match trimmed.split_once("://") {
            Some((scheme, rest)) => {
                let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
                format!("{scheme}://{host}/.well-known/oauth-authorization-server{path}")
            }
            None => format!("{trimmed}/.well-known/oauth-authorization-server"),
        };
        match self.json::<DiscoveryDocument>(&rfc8414).await {
            Ok(document) => found(issuer, document, rfc8414),
            Err(error) => Err(FetchError::NoDiscovery {
                issuer: issuer.to_owned(),
                openid: openid_error,
                rfc8414: error.to_string(),
            }),
        }
    }
}

fn found(
    configured: &str,
    document: DiscoveryDocument,
    url: String,
) -> Result<Discovered, FetchError> {
    // OpenID Connect Discovery §4.3 / RFC 8414 §3.3: the document must name the issuer it was
    // fetched for; one trailing slash is forgiven in the flag, never in the tokens' `iss`.
    if document.issuer.trim_end_matches('/') != configured.trim_end_matches('/') {
        return Err(FetchError::IssuerMismatch {
            configured: configured.to_owned(),
            published: document.issuer,
        });
    }
    check_url(&document.jwks_uri)?;
    Ok(Discovered {
        issuer: document.issuer,
        jwks_uri: document.jwks_uri,
        document: url,
    })
}

/// `url` parsed, when it is `https://`, or `http://` to a loopback host.
pub fn check_url(url: &str) -> Result<http::Uri, FetchError> {
    let problem = |problem: &str| FetchError::Url {
        url: url.to_owned(),
        problem: problem.to_owned(),
    };
    let uri: http::Uri = url.parse().map_err(|_| problem("not a URL"))?;
    let host = uri.host().ok_or_else(|| problem("no host"))?;
    match uri.scheme_str() {
        Some("https") => Ok(uri),
        Some("http") if is_loopback(host) => Ok(uri),
        Some("http") => Err(problem("plain http to a host that is not loopback")),
        _ => Err(problem("not an http(s) URL")),
    }
}

fn is_loopback(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    bare.eq_ignore_ascii_case("localhost")
        || bare
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// What the cache holds.
#[derive(Debug, Default)]
struct Held {
    /// Discovery's answer, once had.
    discovered: Option<Discovered>,
    keys: Arc<Vec<Jwk>>,
    /// When keys were last fetched (or tried).
    tried: Option<Instant>,
    /// When keys were last fetched successfully.
    fetched: Option<Instant>,
}

/// The issuer's keys, cached (see the module doc).
#[derive(Debug)]
pub struct KeyCache {
    issuer: String,
    fetcher: Fetcher,
    min_interval: Duration,
    held: Mutex<Held>,
    /// One refresh at a time; the others wait for it and use its keys.
    refreshing: tokio::sync::Mutex<()>,
}

/// What a lookup found.
#[derive(Debug, Clone)]
pub struct Lookup {
    /// The keys held after any refresh.
    pub keys: Arc<Vec<Jwk>>,
    /// The issuer as its discovery document names it (`None`: discovery never answered).
    pub issuer: Option<String>,
}

impl KeyCache {
    /// An empty cache for `issuer`, refreshing at most once per `min_interval`.
    pub fn new(issuer: String, fetcher: Fetcher, min_interval: Duration) -> Self {
        Self {
            issuer,
            fetcher,
            min_interval,
            held: Mutex::new(Held::default()),
            refreshing: tokio::sync::Mutex::new(()),
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn snapshot(&self) -> Lookup {
        let held = self.held();
        Lookup {
            keys: held.keys.clone(),
            issuer: held.discovered.as_ref().map(|d| d.issuer.clone()),
        }
    }

    /// The keys held now when they are fresh (fetched within [`KEYS_MAX_AGE`]), without waiting:
    /// a verified token is taken from the cache only while the keys that verified it are still
    /// the ones held (see `verified.rs`).
    pub fn fresh_keys(&self) -> Option<Arc<Vec<Jwk>>> {
        let held = self.held();
        held.fetched
            .is_some_and(|at| at.elapsed() < KEYS_MAX_AGE)
            .then(|| held.keys.clone())
    }

    /// The keys, refreshed first when `wanted` (a key id, or any key when `None`) is not held
    /// or the keys are stale, within the refresh interval.
    pub async fn lookup(&self, wanted: Option<&str>) -> Lookup {
        let fresh = |held: &Held| {
            held.fetched
                .is_some_and(|at| at.elapsed() < KEYS_MAX_AGE && has(&held.keys, wanted))
        };
        if fresh(&self.held()) {
            return self.snapshot();
        }
        let _refreshing = self.refreshing.lock().await;
        {
            let held = self.held();
            let recently_tried = held
                .tried
                .is_some_and(|at| at.elapsed() < self.min_interval);
            if fresh(&held) || recently_tried {
                drop(held);
                return self.snapshot();
            }
        }
        if let Err(error) = self.refresh().await {
            tracing::warn!(%error, "could not fetch the OAuth issuer's keys; keeping those held");
        }
        self.snapshot()
    }

    /// Fetches discovery (once it has answered, its answer is kept) and the JWKS now.
    pub async fn refresh(&self) -> Result<Discovered, FetchError> {
        let known = self.held().discovered.clone();
        self.held().tried = Some(Instant::now());
        let discovered = match known {
            Some(discovered) => discovered,
            None => {
                let discovered = self.fetcher.discover(&self.issuer).await?;
                self.held().discovered = Some(discovered.clone());
                discovered
            }
        };
        let set: JwkSet = self.fetcher.json(&discovered.jwks_uri).await?;
        let count = set.keys.len();
        let mut held = self.held();
        held.keys = Arc::new(set.keys);
        held.fetched = Some(Instant::now());
        drop(held);
        tracing::info!(keys = count, "fetched the OAuth issuer's signing keys");
        Ok(discovered)
    }
}

fn has(keys: &[Jwk], wanted: Option<&str>) -> bool {
    match wanted {
        Some(kid) => keys
            .iter()
            .any(|key| key.common.key_id.as_deref() == Some(kid)),
        None => !keys.is_empty(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issuer_urls_must_be_https_unless_loopback() {
        for ok in [
            "https://login.example.com/tenant/v2.0",
            "http://127.0.0.1:8080",
            "http://localhost:9000/realms/x",
            "http://[::1]:9000",
        ] {
            assert!(check_url(ok).is_ok(), "{ok}");
        }
        let refused = check_url("http://idp.example.com").unwrap_err().to_string();
        assert!(
            refused.contains("plain http to a host that is not loopback"),
            "{refused}"
        );
        assert!(check_url("ftp://x.example.com").is_err());
        assert!(check_url("not a url").is_err());
    }

    #[test]
    fn a_discovery_document_must_name_the_configured_issuer() {
        let document = |issuer: &str| DiscoveryDocument {
            issuer: issuer.to_owned(),
            jwks_uri: "https://idp.example.com/keys".to_owned(),
        };
        let url = "u".to_owned();
        assert!(
            found(
                "https://idp.example.com/",
                document("https://idp.example.com"),
                url.clone()
            )
            .is_ok()
        );
        let error = found(
            "https://idp.example.com",
            document("https://evil.example.com"),
            url,
        )
        .unwrap_err()
        .to_string();
        assert!(
            error.contains("names the issuer https://evil.example.com"),
            "{error}"
        );
    }
}
