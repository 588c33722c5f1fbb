//! The OAuth 2.1 resource server (`--oauth-issuer`): which access tokens from the team's identity
//! provider open `/mcp`, and what a client is told so that it can get one by itself.
//!
//! A token is a JWT signed by one of the issuer's keys (`keys.rs`) with an asymmetric algorithm
//! (RS*, PS*, ES256/ES384, EdDSA; `none` and HMAC are refused before any key is looked at, so a
//! public key can never serve as an HMAC secret), whose `iss` is the issuer, whose `aud` names
//! this server (RFC 8707: `--oauth-audience`, by default the server's public URL), within its
//! `exp`/`nbf` (60 s of leeway), carrying the required scope (`--oauth-scope`) in `scope` or
//! `scp`. The principal is the `sub` claim (or `--oauth-principal-claim`): an ordinary
//! [`Principal`], whose scopes are kept on it. The checks are `jsonwebtoken`'s; nothing here is
//! cryptography.
//!
//! The server publishes RFC 9728 protected resource metadata, and its `401`/`403` carry
//! `WWW-Authenticate: Bearer resource_metadata="…", scope="…"` (MCP's authorization spec), so a
//! client finds the issuer from a refusal. Tokens are never logged; a refusal logs its reason.

pub mod keys;
pub mod verified;

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value, json};

use crate::server::workspace::Principal;

use self::keys::{FetchError, Fetcher, KeyCache};
use self::verified::VerifiedTokens;

/// Default `--oauth-scope`.
pub const DEFAULT_SCOPE: &str = "mountfs";
/// Default `--oauth-principal-claim`.
pub const DEFAULT_PRINCIPAL_CLAIM: &str = "sub";
/// Default `--oauth-jwks-min-interval`.
pub const DEFAULT_MIN_INTERVAL: &str = "30s";
/// Clock skew forgiven on `exp` and `nbf`, seconds.
pub const LEEWAY_SECONDS: u64 = 60;
/// The path of RFC 9728 metadata (and, with the resource's path appended, its suffixed form).
pub const METADATA_PATH: &str = "/.well-known/oauth-protected-resource";
/// Longest principal name taken from a token, bytes.
const MAX_PRINCIPAL_BYTES: usize = 256;
/// What an OAuth principal's name starts with (`oauth:` then the claim's value): the token
/// file's names hold no `:`, so the two namespaces never meet (issue 43's attack review).
pub const OAUTH_PRINCIPAL_PREFIX: &str = "oauth:";

/// The signature algorithms accepted: asymmetric only.
const ALGORITHMS: &[(&str, Algorithm)] = &[
    ("RS256", Algorithm::RS256),
    ("RS384", Algorithm::RS384),
    ("RS512", Algorithm::RS512),
    ("PS256", Algorithm::PS256),
    ("PS384", Algorithm::PS384),
    ("PS512", Algorithm::PS512),
    ("ES256", Algorithm::ES256),
    ("ES384", Algorithm::ES384),
    ("EdDSA", Algorithm::EdDSA),
];

/// The OAuth flags of the command line.
#[derive(Debug, Clone, clap::Args)]
pub struct OAuthArgs {
    /// With --http: accept OAuth 2.1 access tokens (JWTs) issued by this authorization server
    /// (its issuer URL, e.g. https://login.microsoftonline.com/TENANT/v2.0); its keys are found
    /// through its discovery document. Static tokens (--token-file) keep working beside it.
    #[arg(global = true, long, value_name = "URL", requires = "http")]
    pub oauth_issuer: Option<String>,

    /// With --oauth-issuer: the audience tokens must be minted for (RFC 8707). Default: the
    /// server's public URL (--public-url).
    #[arg(global = true, long, value_name = "AUD", requires = "oauth_issuer")]
    pub oauth_audience: Option<String>,

    /// With --oauth-issuer: the token claim naming the principal (sub, oid, email, …).
    #[arg(global = true, long, value_name = "NAME", default_value = DEFAULT_PRINCIPAL_CLAIM)]
    pub oauth_principal_claim: String,

    /// With --oauth-issuer: the scope a token must carry (in `scope` or `scp`); others get 403.
    #[arg(global = true, long, value_name = "SCOPE", default_value = DEFAULT_SCOPE)]
    pub oauth_scope: String,

    /// With --oauth-issuer: a token naming a key id the server does not hold makes it fetch
    /// the issuer's keys again, at most this often (30s, 2m).
    #[arg(global = true, long, value_name = "DURATION", default_value = DEFAULT_MIN_INTERVAL, value_parser = crate::ground::time::parse_duration)]
    pub oauth_jwks_min_interval: Duration,

    /// With --http: the URL clients reach /mcp at (e.g. https://mcp.example.com/mcp), when it
    /// is not http://ADDR/mcp (a proxy in front). The OAuth resource and default audience.
    #[arg(global = true, long, value_name = "URL", requires = "http")]
    pub public_url: Option<String>,
}

/// Why the OAuth configuration was refused at start.
#[derive(Debug, thiserror::Error)]
pub enum OAuthError {
    /// The issuer URL is unusable.
    #[error("--oauth-issuer: {0}")]
    Issuer(FetchError),
    /// `--public-url` is unusable.
    #[error(
        "--public-url {0}: give the absolute URL clients use for /mcp, e.g. https://mcp.example.com/mcp"
    )]
    PublicUrl(String),
    /// A non-loopback server without `--public-url`.
    #[error(
        "--oauth-issuer on {0}, which is reachable from other machines, needs --public-url https://HOST/mcp: the URL clients use is the resource tokens are minted for, and this server cannot guess it"
    )]
    NeedsPublicUrl(String),
    /// An empty or unusable flag value.
    #[error("{flag} {value:?}: {problem}")]
    Flag {
        /// The flag.
        flag: &'static str,
        /// Its value.
        value: String,
        /// What is wrong.
        problem: &'static str,
    },
    /// No JWT crypto provider could be had.
    #[error(
        "no JWT crypto provider is available (jsonwebtoken built without one); this is a build problem: report it"
    )]
    NoCrypto,
    /// The HTTPS client could not be built.
    #[error("cannot set up the HTTPS client for the issuer: {0}")]
    Client(FetchError),
}

/// Why a token was refused. The `Display` is the `error_description` the client gets: it
/// says what was wrong, never echoes the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Not a JWS in compact form.
    #[error("the token is not a signed JWT")]
    Malformed,
    /// `alg` is none, HMAC or unknown.
    #[error(
        "the token's algorithm {0} is not accepted: only RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384 and EdDSA"
    )]
    Algorithm(String),
    /// No key of the issuer fits the token.
    #[error("the token was not signed by a current key of the issuer")]
    UnknownKey,
    /// The signature does not verify.
    #[error("the token's signature does not verify")]
    Signature,
    /// `exp` passed.
    #[error("the token has expired")]
    Expired,
    /// `nbf` in the future.
    #[error("the token is not valid yet")]
    NotYetValid,
    /// `iss` is not the issuer.
    #[error("the token was issued by another issuer")]
    WrongIssuer,
    /// `aud` does not name this server.
    #[error("the token was not minted for this server (audience)")]
    WrongAudience,
    /// A required claim is missing or malformed.
    #[error("the token lacks a valid {0} claim")]
    Claim(String),
    /// The principal claim is `email` and the token does not say it was verified.
    #[error("the token's email is not verified (email_verified is not true)")]
    UnverifiedEmail,
    /// The principal claim is unusable.
    #[error("the token's {0} claim is not a usable principal name")]
    Principal(String),
    /// The required scope is missing (403).
    #[error("the token lacks the scope {0}")]
    InsufficientScope(String),
    /// The issuer's keys could never be fetched (503).
    #[error("the issuer's signing keys could not be fetched; retry shortly")]
    KeysUnavailable,
}

/// A configured resource server: what it accepts and what it publishes.
#[derive(Debug)]
pub struct ResourceServer {
    issuer: String,
    audience: String,
    resource: String,
    scope: String,
    principal_claim: String,
    keys: KeyCache,
    /// Tokens already verified against the keys held (`verified.rs`).
    verified: VerifiedTokens,
}

impl ResourceServer {
    /// Builds the resource server from the flags; `local` is the address served (the resource
    /// defaults to `http://ADDR/mcp` on a loopback address). Nothing is fetched yet.
    pub fn new(args: &OAuthArgs, local: std::net::SocketAddr) -> Result<Option<Self>, OAuthError> {
        let Some(issuer) = args.oauth_issuer.clone() else {
            return Ok(None);
        };
        keys::check_url(&issuer).map_err(OAuthError::Issuer)?;
        if jsonwebtoken::crypto::CryptoProvider::try_get_default().is_none() {
            return Err(OAuthError::NoCrypto);
        }
        let resource = match &args.public_url {
            Some(url) => {
                let uri: http::Uri = url
                    .parse()
                    .map_err(|_| OAuthError::PublicUrl(url.clone()))?;
                if uri.host().is_none() || !matches!(uri.scheme_str(), Some("https" | "http")) {
                    return Err(OAuthError::PublicUrl(url.clone()));
                }
                url.clone()
            }
            None if local.ip().is_loopback() => format!("http://{local}/mcp"),
            None => return Err(OAuthError::NeedsPublicUrl(local.to_string())),
        };
        let flag = |flag: &'static str, value: &str, problem: &'static str| OAuthError::Flag {
            flag,
            value: value.to_owned(),
            problem,
        };
        let scope = args.oauth_scope.trim().to_owned();
        if scope.is_empty()
            || !scope
                .bytes()
                .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\')
        {
            return Err(flag(
                "--oauth-scope",
                &args.oauth_scope,
                "give one scope: printable characters, no spaces or quotes",
            ));
        }
        let claim = args.oauth_principal_claim.trim().to_owned();
        if claim.is_empty() {
            return Err(flag(
                "--oauth-principal-claim",
                &args.oauth_principal_claim,
                "name a claim, e.g. sub",
            ));
        }
        let audience = args
            .oauth_audience
            .clone()
            .unwrap_or_else(|| resource.clone());
        if audience.trim().is_empty() {
            return Err(flag(
                "--oauth-audience",
                &audience,
                "give the audience tokens are minted for",
            ));
        }
        let fetcher = Fetcher::new().map_err(OAuthError::Client)?;
        Ok(Some(Self {
            keys: KeyCache::new(issuer.clone(), fetcher, args.oauth_jwks_min_interval),
            verified: VerifiedTokens::default(),
            issuer,
            audience,
            resource,
            scope,
            principal_claim: claim,
        }))
    }

    /// Fetches discovery and keys now (at start), so the first request does not wait.
    pub async fn prefetch(&self) -> Result<keys::Discovered, FetchError> {
        self.keys.refresh().await
    }

    /// The resource identifier (the public `/mcp` URL).
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// The audience tokens must carry.
    pub fn audience(&self) -> &str {
        &self.audience
    }

    /// The URL of this resource's RFC 9728 metadata (the path-suffixed form, RFC 9728 §3.1).
    pub fn metadata_url(&self) -> String {
        metadata_url(&self.resource)
    }

    /// The RFC 9728 protected resource metadata document.
    pub fn metadata(&self) -> Value {
        json!({
            "resource": self.resource,
            "authorization_servers": [self.issuer],
            "scopes_supported": [self.scope],
            "bearer_methods_supported": ["header"],
            "resource_name": "mountfs",
        })
    }

    /// The `WWW-Authenticate` value of a refusal (`None`: no token was sent).
    pub fn challenge(&self, refusal: Option<&Refusal>) -> String {
        let base = format!(
            r#"Bearer resource_metadata="{}", scope="{}""#,
            self.metadata_url(),
            self.scope
        );
        match refusal {
            None => base,
            Some(refusal) => {
                let code = match refusal {
                    Refusal::InsufficientScope(_) => "insufficient_scope",
                    _ => "invalid_token",
                };
                // The descriptions are our own texts: no quote or backslash to escape.
                format!(r#"{base}, error="{code}", error_description="{refusal}""#)
            }
        }
    }

    /// The principal of a bearer token verified before (see `verified.rs`), without waiting:
    /// the gate asks this first, so that a known token costs no future of the full check
    /// (whose state, with the key fetch inside, is kilobytes to set up).
    pub fn cached_principal(&self, token: &[u8]) -> Option<Principal> {
        let keys = self.keys.fresh_keys()?;
        self.verified.get(self.verified.key(token), token, &keys)
    }

    /// The principal of a bearer token, or why it is refused.
    pub async fn principal_of(&self, token: &[u8]) -> Result<Principal, Refusal> {
        if let Some(principal) = self.cached_principal(token) {
            return Ok(principal);
        }
        let found_by = self.verified.key(token);
        let token = std::str::from_utf8(token).map_err(|_| Refusal::Malformed)?;
        let header = parse_header(token)?;
        let algorithm = ALGORITHMS
            .iter()
            .find(|(name, _)| *name == header.alg)
            .map(|(_, algorithm)| *algorithm)
            .ok_or_else(|| Refusal::Algorithm(shown_alg(&header.alg)))?;
        let lookup = self.keys.lookup(header.kid.as_deref()).await;
        if lookup.keys.is_empty() {
            return Err(Refusal::KeysUnavailable);
        }
        let key = pick_key(&lookup.keys, header.kid.as_deref(), algorithm)?;
        let mut validation = Validation::new(algorithm);
        validation.leeway = LEEWAY_SECONDS;
        validation.validate_nbf = true;
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.set_audience(&[&self.audience]);
        // The `iss` tokens carry is the one the discovery document publishes (it may differ from
        // the flag by a trailing slash).
        let issuer = lookup.issuer.unwrap_or_else(|| self.issuer.clone());
        validation.set_issuer(&[issuer]);
        let claims = jsonwebtoken::decode::<Map<String, Value>>(token, &key, &validation)
            .map_err(|error| refusal_of(error.kind()))?
            .claims;
        let name = match claims.get(&self.principal_claim) {
            Some(Value::String(name)) => name.clone(),
            Some(Value::Number(number)) => number.to_string(),
            _ => return Err(Refusal::Claim(self.principal_claim.clone())),
        };
        if name.is_empty() || name.len() > MAX_PRINCIPAL_BYTES || name.chars().any(char::is_control)
        {
            return Err(Refusal::Principal(self.principal_claim.clone()));
        }
        // An address the provider did not verify names whoever typed it.
        if self.principal_claim == "email"
            && !matches!(claims.get("email_verified"), Some(Value::Bool(true)))
            && !matches!(claims.get("email_verified"), Some(Value::String(v)) if v == "true")
        {
            return Err(Refusal::UnverifiedEmail);
        }
        let scopes = scopes_of(&claims);
        if !scopes.contains(&self.scope) {
            return Err(Refusal::InsufficientScope(self.scope.clone()));
        }
        // In a namespace of their own: a token-file name (never holding `:`) is never an
        // OAuth principal, whatever the provider's claim says.
        let principal =
            Principal::with_scopes(Arc::from(format!("{OAUTH_PRINCIPAL_PREFIX}{name}")), scopes);
        // `exp` is a required claim the checks above read as a number of seconds.
        if let Some(expires) = claims.get("exp").and_then(|exp| {
            exp.as_u64()
                .or_else(|| exp.as_f64().filter(|e| *e >= 0.0).map(|e| e as u64))
        }) {
            self.verified.insert(
                found_by,
                token.as_bytes(),
                principal.clone(),
                expires,
                lookup.keys.clone(),
            );
        }
        Ok(principal)
    }
}

/// The URL of the RFC 9728 metadata of `resource`: the well-known path between its host and its
/// path (`https://h/mcp` → `https://h/.well-known/oauth-protected-resource/mcp`).
pub fn metadata_url(resource: &str) -> String {
    let Some((scheme, rest)) = resource.split_once("://") else {
        return format!("{resource}{METADATA_PATH}");
    };
    let rest = rest.split(['?', '#']).next().unwrap_or(rest);
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let path = path.trim_end_matches('/');
    format!("{scheme}://{host}{METADATA_PATH}{path}")
}

/// The two header fields read before any key is touched.
struct TokenHeader {
    alg: String,
    kid: Option<String>,
}

/// The JOSE header of a compact JWS (three base64url parts).
fn parse_header(token: &str) -> Result<TokenHeader, Refusal> {
    let mut parts = token.split('.');
    let (Some(header), Some(_), Some(_), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Refusal::Malformed);
    };
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(header)
        .map_err(|_| Refusal::Malformed)?;
    let header: Map<String, Value> =
        serde_json::from_slice(&bytes).map_err(|_| Refusal::Malformed)?;
    let alg = match header.get("alg") {
        Some(Value::String(alg)) => alg.clone(),
        _ => return Err(Refusal::Malformed),
    };
    let kid = match header.get("kid") {
        Some(Value::String(kid)) => Some(kid.clone()),
        None => None,
        Some(_) => return Err(Refusal::Malformed),
    };
    Ok(TokenHeader { alg, kid })
}

/// An algorithm name as shown back: short and printable.
fn shown_alg(alg: &str) -> String {
    let shown: String = alg
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .take(16)
        .collect();
    if shown.is_empty() {
        "(empty)".to_owned()
    } else {
        shown
    }
}

/// The key verifying a token signed with `algorithm`: the one named `kid`, or the only one
/// fitting when the token names none. A key of another type or curve, declared for another
/// algorithm, or for encryption, never fits.
fn pick_key(keys: &[Jwk], kid: Option<&str>, algorithm: Algorithm) -> Result<DecodingKey, Refusal> {
    let fits = |key: &&Jwk| key_fits(key, algorithm);
    let chosen = match kid {
        Some(kid) => keys
            .iter()
            .filter(|key| key.common.key_id.as_deref() == Some(kid))
            .find(fits),
        None => {
            let mut fitting = keys.iter().filter(fits);
            match (fitting.next(), fitting.next()) {
                (Some(only), None) => Some(only),
                _ => None,
            }
        }
    };
    let key = chosen.ok_or(Refusal::UnknownKey)?;
    DecodingKey::from_jwk(key).map_err(|_| Refusal::UnknownKey)
}

fn key_fits(key: &Jwk, algorithm: Algorithm) -> bool {
    if key
        .common
        .public_key_use
        .as_ref()
        .is_some_and(|usage| *usage != PublicKeyUse::Signature)
    {
        return false;
    }
    if let Some(declared) = key.common.key_algorithm
        && declared != KeyAlgorithm::from(algorithm)
    {
        return false;
    }
    match (&key.algorithm, algorithm) {
        (
            AlgorithmParameters::RSA(_),
            Algorithm::RS256
            | Algorithm::RS384
            | Algorithm::RS512
            | Algorithm::PS256
            | Algorithm::PS384
            | Algorithm::PS512,
        ) => true,
        (AlgorithmParameters::EllipticCurve(ec), Algorithm::ES256) => {
            ec.curve == EllipticCurve::P256
        }
        (AlgorithmParameters::EllipticCurve(ec), Algorithm::ES384) => {
            ec.curve == EllipticCurve::P384
        }
        (AlgorithmParameters::OctetKeyPair(okp), Algorithm::EdDSA) => {
            okp.curve == EllipticCurve::Ed25519
        }
        // `oct` (HMAC) keys never verify anything here.
        _ => false,
    }
}

fn refusal_of(kind: &jsonwebtoken::errors::ErrorKind) -> Refusal {
    use jsonwebtoken::errors::ErrorKind;
    match kind {
        ErrorKind::InvalidSignature => Refusal::Signature,
        ErrorKind::ExpiredSignature => Refusal::Expired,
        ErrorKind::ImmatureSignature => Refusal::NotYetValid,
        ErrorKind::InvalidIssuer => Refusal::WrongIssuer,
        ErrorKind::InvalidAudience => Refusal::WrongAudience,
        ErrorKind::MissingRequiredClaim(claim) | ErrorKind::InvalidClaimFormat(claim) => {
            Refusal::Claim(shown_alg(claim))
        }
        ErrorKind::InvalidAlgorithm => Refusal::UnknownKey,
        _ => Refusal::Malformed,
    }
}

/// The scopes a token grants: `scope` (RFC 8693/9068, space-separated) and `scp` (Entra ID: a
/// space-separated string; Okta: an array).
fn scopes_of(claims: &Map<String, Value>) -> Vec<String> {
    let mut scopes = Vec::new();
    for claim in ["scope", "scp"] {
        match claims.get(claim) {
            Some(Value::String(text)) => scopes.extend(text.split_whitespace().map(str::to_owned)),
            Some(Value::Array(items)) => {
                scopes.extend(items.iter().filter_map(Value::as_str).map(str::to_owned))
            }
            _ => {}
        }
    }
    scopes.sort();
    scopes.dedup();
    scopes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(value: &Value) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(value.to_string())
    }

    #[test]
    fn the_metadata_url_puts_the_well_known_path_before_the_resource_path() {
        assert_eq!(
            metadata_url("https://mcp.example.com/mcp"),
            "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(
            metadata_url("http://127.0.0.1:8765/team/mcp/"),
            "http://127.0.0.1:8765/.well-known/oauth-protected-resource/team/mcp"
        );
        assert_eq!(
            metadata_url("https://mcp.example.com"),
            "https://mcp.example.com/.well-known/oauth-protected-resource"
        );
    }

    #[test]
    fn headers_are_read_strictly() {
        let header = encoded(&json!({"alg": "RS256", "kid": "k1"}));
        let parsed = parse_header(&format!("{header}.e30.sig")).unwrap();
        assert_eq!(
            (parsed.alg.as_str(), parsed.kid.as_deref()),
            ("RS256", Some("k1"))
        );
        for bad in [
            "",
            "a.b",
            "a.b.c.d",
            "!!.e30.x",
            &format!("{}.e30.x", encoded(&json!({"kid": 1, "alg": "RS256"}))),
        ] {
            assert!(
                matches!(parse_header(bad), Err(Refusal::Malformed)),
                "{bad}"
            );
        }
        assert_eq!(shown_alg("none\"\n"), "none");
    }

    #[test]
    fn scopes_come_from_scope_and_scp() {
        let claims = json!({"scope": "a mountfs", "scp": ["b", "a"]});
        let Value::Object(claims) = claims else {
            unreachable!()
        };
        assert_eq!(scopes_of(&claims), vec!["a", "b", "mountfs"]);
    }

    #[test]
    fn hmac_keys_and_mismatched_keys_never_fit() {
        let oct: Jwk =
            serde_json::from_value(json!({"kty": "oct", "k": "c2VjcmV0", "kid": "h"})).unwrap();
        assert!(!key_fits(&oct, Algorithm::RS256));
        let rsa: Jwk = serde_json::from_value(json!({
            "kty": "RSA", "kid": "r", "alg": "RS256", "use": "sig", "n": "sXch", "e": "AQAB"
        }))
        .unwrap();
        assert!(key_fits(&rsa, Algorithm::RS256));
        assert!(!key_fits(&rsa, Algorithm::PS256), "declared for RS256 only");
        assert!(!key_fits(&rsa, Algorithm::ES256));
        let enc: Jwk = serde_json::from_value(json!({
            "kty": "RSA", "kid": "e", "use": "enc", "n": "sXch", "e": "AQAB"
        }))
        .unwrap();
        assert!(!key_fits(&enc, Algorithm::RS256));
        assert_eq!(
            pick_key(&[oct], Some("h"), Algorithm::RS256).err(),
            Some(Refusal::UnknownKey)
        );
    }
}
