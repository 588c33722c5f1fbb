//! Cost of issue 43's checks, next to the call they guard (in one process, one run):
//!
//! - **grants per call**: a `read_file` of a small disk file through a principal's stateless
//!   workspace (`Workspaces::principal`, as each HTTP request finds its workspace, then the tool
//!   through the session's mount table), with no grant vs with grants (the principal's view found in
//!   the map's cache on every request, and every path routed through it). Rounds alternate the two
//!   so that both see the same machine; medians are compared.
//! - **token check per request**: an OAuth access token (RS256, JWKS cached after the first
//!   fetch from an issuer served in this process on 127.0.0.1) checked by
//!   `ResourceServer::principal_of` on every request of a client (verified once, then found by
//!   digest), the same check for 200 tokens each seen once (the signature verified), and a
//!   static token by `Tokens::principal_of`, each against the `read_file` call above.
//!
//! Run: `cargo bench --bench grants` (`-- --calls N` per round; default 20000).

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use mountfs::ground::grants::{Grants, parse};
use mountfs::server::workspace::{Principal, WorkspaceLimits, Workspaces};
use mountfs::state::session::WriteOptions;
use serde_json::json;

const ROUNDS: usize = 7;

fn main() {
    let calls = std::env::args()
        .skip_while(|a| a != "--calls")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(20_000usize);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(run(calls));
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

async fn workspaces(dirs: &[std::path::PathBuf], grants: Grants) -> Workspaces {
    let mut texts: Vec<String> = dirs
        .iter()
        .enumerate()
        .map(|(i, dir)| format!("/m{i}/=disk:{}", dir.display()))
        .collect();
    texts.push("/scratch/=memory".to_owned());
    let specs = mountfs::ground::config::parse_table(&texts).expect("table");
    let table = mountfs::server::mounts::MountTable::open(specs)
        .await
        .expect("open");
    Workspaces::new(
        table,
        WriteOptions::default(),
        WorkspaceLimits {
            idle_timeout: Duration::from_secs(3600),
            max_sessions: 16,
        },
    )
    .with_grants(grants)
}

/// `calls` read_file calls of `/m1/f.txt` by `who`, each finding its workspace first.
async fn read_calls(map: &Workspaces, who: &Principal, calls: usize) -> Duration {
    let started = Instant::now();
    for _ in 0..calls {
        let session = map.principal(who);
        let args = serde_json::from_value(json!({"file_path": "/m1/f.txt"})).expect("args");
        let reply = mountfs::tools::read_file::run(args, &session.for_call(), &Default::default())
            .await
            .expect("read_file");
        std::hint::black_box(reply);
    }
    started.elapsed()
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// An RSA key made by `openssl` (PKCS#1 DER, and the modulus for the JWKS).
fn rsa_key(dir: &std::path::Path) -> (Vec<u8>, Vec<u8>) {
    let pem = dir.join("key.pem");
    let made = std::process::Command::new("openssl")
        .args(["genrsa", "-out"])
        .arg(&pem)
        .arg("2048")
        .output()
        .expect("openssl genrsa");
    assert!(made.status.success(), "{made:?}");
    let modulus = std::process::Command::new("openssl")
        .args(["rsa", "-noout", "-modulus", "-in"])
        .arg(&pem)
        .output()
        .expect("openssl rsa");
    let text = String::from_utf8(modulus.stdout).expect("modulus");
    let hex_modulus = text.trim().trim_start_matches("Modulus=");
    let der = std::process::Command::new("openssl")
        .args(["rsa", "-traditional", "-outform", "DER", "-in"])
        .arg(&pem)
        .output()
        .expect("openssl rsa -outform DER");
    assert!(der.status.success(), "{der:?}");
    (der.stdout, hex::decode(hex_modulus).expect("hex"))
}

async fn run(calls: usize) {
    let root = tempfile::tempdir().expect("tempdir");
    let dirs: Vec<_> = (0..6)
        .map(|i| {
            let dir = root.path().join(format!("d{i}"));
            std::fs::create_dir(&dir).expect("dir");
            let text: String = (0..40)
                .map(|n| format!("line {n} of a small file\n"))
                .collect();
            std::fs::write(dir.join("f.txt"), text).expect("file");
            dir
        })
        .collect();
    let grants = Grants::new(
        [
            "alice=/m0/,/m1/:ro,/m2/,/scratch/",
            "bob=/m3/,/m4/",
            "*=/m5/:ro",
        ]
        .iter()
        .flat_map(|g| parse(g).expect("grant"))
        .collect(),
    );
    let open = workspaces(&dirs, Grants::default()).await;
    let granted = workspaces(&dirs, grants).await;
    let alice = Principal::named("alice");
    // Warm both (file caches, workspaces made).
    read_calls(&open, &alice, calls / 10).await;
    read_calls(&granted, &alice, calls / 10).await;
    let (mut plain, mut with) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        plain.push(read_calls(&open, &alice, calls).await);
        with.push(read_calls(&granted, &alice, calls).await);
    }
    let (plain, with) = (median(plain), median(with));
    let per = |d: Duration| d.as_secs_f64() * 1e6 / calls as f64;
    println!("read_file, no grants:   {:.2} µs/call", per(plain));
    println!("read_file, with grants: {:.2} µs/call", per(with));
    println!(
        "grants per call: {:+.2} µs, ratio {:.3} (target <= 1.05)",
        per(with) - per(plain),
        with.as_secs_f64() / plain.as_secs_f64()
    );

    // The token checks.
    let (pem, modulus) = rsa_key(root.path());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let issuer = format!("http://{}", listener.local_addr().expect("addr"));
    let jwks = json!({"keys": [{"kty": "RSA", "kid": "k1", "alg": "RS256", "use": "sig",
                                "n": b64(&modulus), "e": "AQAB"}]});
    let discovery = json!({"issuer": issuer, "jwks_uri": format!("{issuer}/jwks")});
    let app = axum::Router::new()
        .route(
            "/.well-known/openid-configuration",
            axum::routing::get(move || {
                let body = discovery.clone();
                async move { ([("content-type", "application/json")], body.to_string()) }
            }),
        )
        .route(
            "/jwks",
            axum::routing::get(move || {
                let body = jwks.clone();
                async move { ([("content-type", "application/json")], body.to_string()) }
            }),
        );
    tokio::spawn(async move { axum::serve(listener, app).await });
    let server_addr: std::net::SocketAddr = "127.0.0.1:8765".parse().expect("addr");
    let args = mountfs::server::http::oauth::OAuthArgs {
        oauth_issuer: Some(issuer.clone()),
        oauth_audience: None,
        oauth_principal_claim: "sub".to_owned(),
        oauth_scope: "mountfs".to_owned(),
        oauth_jwks_min_interval: Duration::from_secs(30),
        public_url: None,
    };
    let resource = Arc::new(
        mountfs::server::http::oauth::ResourceServer::new(&args, server_addr)
            .expect("oauth")
            .expect("issuer"),
    );
    resource.prefetch().await.expect("discovery");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    let claims = json!({"iss": issuer, "aud": format!("http://{server_addr}/mcp"),
                        "sub": "alice", "scope": "openid mountfs", "exp": now + 3600, "iat": now});
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
    header.kid = Some("k1".to_owned());
    let key = jsonwebtoken::EncodingKey::from_rsa_der(&pem);
    let token = jsonwebtoken::encode(&header, &claims, &key).expect("sign");
    let principal = resource
        .principal_of(token.as_bytes())
        .await
        .expect("valid");
    assert_eq!(principal.0.as_ref(), "oauth:alice");
    let checks = calls;
    let mut oauth = Vec::new();
    for _ in 0..ROUNDS {
        let started = Instant::now();
        for _ in 0..checks {
            // As the HTTP gate asks: a token verified before first, the full check else.
            let principal = match resource.cached_principal(token.as_bytes()) {
                Some(principal) => principal,
                None => resource
                    .principal_of(token.as_bytes())
                    .await
                    .expect("valid"),
            };
            std::hint::black_box(principal);
        }
        oauth.push(started.elapsed());
    }
    let tokens_dir = tempfile::tempdir().expect("tempdir");
    let file = tokens_dir.path().join("tokens");
    std::fs::write(&file, "alice static-token-0123456789abcdef\n").expect("tokens");
    let tokens = mountfs::server::http::auth::Tokens::from_file(&file).expect("tokens");
    let mut fixed = Vec::new();
    for _ in 0..ROUNDS {
        let started = Instant::now();
        for _ in 0..checks {
            std::hint::black_box(
                tokens.principal_of(Some(b"Bearer static-token-0123456789abcdef")),
            );
        }
        fixed.push(started.elapsed());
    }
    // A token seen for the first time: the full check (RS256 signature), once per token.
    let fresh: Vec<String> = (0..200)
        .map(|n| {
            let mut claims = claims.clone();
            claims["jti"] = json!(format!("t{n}"));
            jsonwebtoken::encode(&header, &claims, &key).expect("sign")
        })
        .collect();
    let started = Instant::now();
    for token in &fresh {
        std::hint::black_box(
            resource
                .principal_of(token.as_bytes())
                .await
                .expect("valid"),
        );
    }
    let first = started.elapsed().as_secs_f64() * 1e6 / fresh.len() as f64;
    let (oauth, fixed) = (median(oauth), median(fixed));
    let per_check = |d: Duration| d.as_secs_f64() * 1e6 / checks as f64;
    println!(
        "OAuth token check (RS256, cached JWKS): {:.2} µs/request = {:.1}% of a read_file call",
        per_check(oauth),
        100.0 * per_check(oauth) / per(plain)
    );
    println!(
        "OAuth token seen first (RS256 signature verified): {first:.2} µs/request = {:.1}% of a read_file call",
        100.0 * first / per(plain)
    );
    println!(
        "static token check: {:.2} µs/request = {:.1}% of a read_file call",
        per_check(fixed),
        100.0 * per_check(fixed) / per(plain)
    );
}
