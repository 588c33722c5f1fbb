//! `mountfs --http --oauth-issuer` against a real identity provider: `oauth2-mock-server`
//! (pinned in `tests/oauth-idp/`, run under its pinned Node 22 by `launch.mjs`) on 127.0.0.1,
//! issuing RS256-signed JWTs with OpenID discovery and a JWKS. A good token opens the server and
//! the audit log names its subject; every kind of bad token is refused with the status and
//! `WWW-Authenticate` the OAuth specs give; the provider rotates its key and new tokens work
//! without a restart; RFC 9728 metadata is served at both well-known paths; `mountfs check`
//! reaches the issuer; and two real clients — the official Python SDK's OAuth client and the
//! pinned `mcp-remote` bridge — run the whole flow from a bare 401 to tool calls.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

use super::client::{Client, Protocol, Server};

/// A running identity provider; stops when dropped (its stdin closes, and it is killed).
struct Idp {
    _child: tokio::process::Child,
    /// `http://127.0.0.1:PORT`.
    issuer: String,
}

/// Node and the launcher, installing the pinned packages when missing.
fn launcher() -> Option<(PathBuf, PathBuf)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oauth-idp");
    let node = dir.join("node_modules/.bin/node");
    let package = dir.join("node_modules/oauth2-mock-server/package.json");
    if crate::npm::installed(&dir, &[&node, &package]) {
        Some((node, dir.join("launch.mjs")))
    } else {
        crate::support::skips::record(
            "the OAuth identity provider",
            "it could not be installed (npm ci in tests/oauth-idp; needs npm)",
        );
        None
    }
}

impl Idp {
    async fn start() -> Option<Self> {
        let (node, script) = launcher()?;
        let mut child = tokio::process::Command::new(node)
            .arg(script)
            .arg("0")
            .arg("alice")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("start the identity provider");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("the identity provider did not start")
            .unwrap()
            .unwrap();
        let issuer = line.strip_prefix("ready ").expect(&line).to_owned();
        Some(Self {
            _child: child,
            issuer,
        })
    }

    /// A token signed by the provider's current key: its default claims (iss, iat, exp, nbf)
    /// with `claims` laid over (null removes one).
    async fn mint(&self, claims: Value) -> String {
        self.mint_with(json!({}), claims, 3600).await
    }

    async fn mint_with(&self, header: Value, claims: Value, expires_in: i64) -> String {
        let answer = post(
            &format!("{}/test/mint", self.issuer),
            json!({"header": header, "claims": claims, "expiresIn": expires_in}),
        )
        .await;
        answer["token"].as_str().unwrap().to_owned()
    }

    /// A new key signs from now on; the old one leaves the JWKS.
    async fn rotate(&self) {
        post(&format!("{}/test/rotate", self.issuer), json!({})).await;
    }
}

async fn request(uri: &str, method: &str, body: Option<Value>) -> (u16, http::HeaderMap, String) {
    let uri: http::Uri = uri.parse().unwrap();
    let authority = uri.authority().unwrap().to_string();
    let stream = tokio::net::TcpStream::connect(&authority).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let builder = http::Request::builder()
        .method(method)
        .uri(uri.path_and_query().unwrap().as_str())
        .header("host", authority);
    let response = match body {
        Some(body) => sender
            .send_request(
                builder
                    .header("content-type", "application/json")
                    .body(Full::new(Bytes::from(body.to_string())).boxed())
                    .unwrap(),
            )
            .await
            .unwrap(),
        None => sender
            .send_request(builder.body(Empty::new().boxed()).unwrap())
            .await
            .unwrap(),
    };
    let (parts, body) = response.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    (
        parts.status.as_u16(),
        parts.headers,
        String::from_utf8_lossy(&body).into_owned(),
    )
}

async fn post(uri: &str, body: Value) -> Value {
    let (status, _, text) = request(uri, "POST", Some(body)).await;
    assert_eq!(status, 200, "{uri}: {text}");
    serde_json::from_str(&text).unwrap()
}

/// A server taking tokens from `idp` (keys refetched at most once a second), `/` in memory, the
/// audit log in `dir`.
async fn server(idp: &Idp, dir: &Path, extra: &[&str]) -> Server {
    let audit = format!("sqlite:{}", dir.join("audit.db").display());
    let mut args = vec![
        "--oauth-issuer",
        &idp.issuer,
        "--oauth-jwks-min-interval",
        "1s",
        "--mount",
        "/=memory",
        "--audit",
        &audit,
    ];
    args.extend_from_slice(extra);
    Server::start(&args, &[]).await
}

/// The claims of a good token for `server`.
fn good(server: &Server, sub: &str) -> Value {
    json!({"sub": sub, "aud": server.url, "scope": "openid mountfs"})
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// What a client with `token` gets from `initialize`: status and `WWW-Authenticate`.
async fn try_token(server: &Server, token: Option<&str>) -> (u16, String, String) {
    let mut client = Client::new(&server.url, token, Protocol::Session);
    let reply = client.initialize().await;
    let challenge = reply.header("www-authenticate").unwrap_or("").to_owned();
    (reply.status, challenge, reply.body)
}

/// The newest entry of the audit log in `dir` (written in the background: waited for).
async fn newest_audit_entry(dir: &Path) -> Value {
    for _ in 0..100 {
        let log = std::process::Command::new(env!("CARGO_BIN_EXE_mountfs"))
            .args(["log", "--json", "--audit"])
            .arg(format!("sqlite:{}", dir.join("audit.db").display()))
            .output()
            .unwrap();
        let log = String::from_utf8(log.stdout).unwrap();
        if let Some(line) = log.lines().next() {
            return serde_json::from_str(line).unwrap();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no audit entry");
}

fn metadata_url(server: &Server) -> String {
    format!("{}/.well-known/oauth-protected-resource/mcp", server.base())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_from_the_issuer_opens_the_server_and_the_audit_log_names_its_subject() {
    let Some(idp) = Idp::start().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = server(&idp, dir.path(), &[]).await;
    let token = idp.mint(good(&server, "carol@example.com")).await;
    let mut client = Client::new(&server.url, Some(&token), Protocol::Session);
    let reply = client.initialize().await;
    assert_eq!(reply.status, 200, "{}\n{}", reply.body, server.stderr());
    let wrote = client
        .call(
            "write_file",
            json!({"file_path": "/hello.txt", "content": "hi\n"}),
        )
        .await;
    assert!(!wrote.is_error, "{}", wrote.text);
    let read = client
        .call("read_file", json!({"file_path": "/hello.txt"}))
        .await;
    assert!(read.text.contains("hi"), "{}", read.text);

    let entry = newest_audit_entry(dir.path()).await;
    assert_eq!(entry["tool"], "write_file");
    assert_eq!(entry["principal"], "oauth:carol@example.com");
    // No token reaches the server's log.
    let stderr = server.stderr();
    assert!(!stderr.contains(&token), "a token was logged");
    let signature = token.rsplit('.').next().unwrap();
    assert!(
        !stderr.contains(signature),
        "a token's signature was logged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tokens_are_refused_with_the_status_and_challenge_the_specs_give() {
    let Some(idp) = Idp::start().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = server(&idp, dir.path(), &[]).await;
    let metadata = metadata_url(&server);
    let base = format!(r#"Bearer resource_metadata="{metadata}", scope="mountfs""#);

    // No token: 401, the challenge names the metadata and the scope, no error code.
    let (status, challenge, _) = try_token(&server, None).await;
    assert_eq!((status, challenge.as_str()), (401, base.as_str()));

    let good_token = idp.mint(good(&server, "alice")).await;
    let [header, payload, signature] =
        [0, 1, 2].map(|i| good_token.split('.').nth(i).unwrap().to_owned());
    let b64 = |value: &Value| {
        use base64::Engine as _;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(value.to_string())
    };
    let unsigned_header = b64(&json!({"alg": "none", "typ": "JWT"}));
    let alg_none = format!("{unsigned_header}.{payload}.");
    // A flipped signature character.
    let mut tampered_signature = signature.clone().into_bytes();
    tampered_signature[10] = if tampered_signature[10] == b'A' {
        b'B'
    } else {
        b'A'
    };
    let tampered_signature = format!(
        "{header}.{payload}.{}",
        String::from_utf8(tampered_signature).unwrap()
    );
    // Another subject put into a correctly signed token's payload.
    let mut claims: Value = {
        use base64::Engine as _;
        serde_json::from_slice(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(&payload)
                .unwrap(),
        )
        .unwrap()
    };
    claims["sub"] = json!("mallory");
    let tampered_payload = format!("{header}.{}.{signature}", b64(&claims));
    // HS256 keyed with the issuer's public key (the classic confusion attack).
    let (_, _, jwks) = request(&format!("{}/jwks", idp.issuer), "GET", None).await;
    let jwks: Value = serde_json::from_str(&jwks).unwrap();
    let public_n = jwks["keys"][0]["n"].as_str().unwrap().to_owned();
    let mut hmac_header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
    hmac_header.kid = jwks["keys"][0]["kid"].as_str().map(str::to_owned);
    let hmac = jsonwebtoken::encode(
        &hmac_header,
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(public_n.as_bytes()).unwrap(),
    )
    .unwrap();

    let invalid = |description: &str| {
        format!(r#"{base}, error="invalid_token", error_description="{description}""#)
    };
    let cases = [
        (
            "wrong audience",
            idp.mint(json!({"sub": "alice", "aud": "https://other.example.com/mcp", "scope": "mountfs"}))
                .await,
            401,
            invalid("the token was not minted for this server (audience)"),
        ),
        (
            "no audience",
            idp.mint(json!({"sub": "alice", "scope": "mountfs"})).await,
            401,
            invalid("the token lacks a valid aud claim"),
        ),
        (
            "wrong issuer",
            idp.mint(json!({"sub": "alice", "aud": server.url, "scope": "mountfs", "iss": "https://evil.example.com"}))
                .await,
            401,
            invalid("the token was issued by another issuer"),
        ),
        (
            "expired beyond the leeway",
            idp.mint_with(json!({}), good(&server, "alice"), -120).await,
            401,
            invalid("the token has expired"),
        ),
        (
            "not yet valid beyond the leeway",
            idp.mint(json!({"sub": "alice", "aud": server.url, "scope": "mountfs", "nbf": now() + 600}))
                .await,
            401,
            invalid("the token is not valid yet"),
        ),
        (
            "tampered signature",
            tampered_signature,
            401,
            invalid("the token's signature does not verify"),
        ),
        (
            "tampered payload",
            tampered_payload,
            401,
            invalid("the token's signature does not verify"),
        ),
        (
            "alg none",
            alg_none,
            401,
            invalid("the token's algorithm none is not accepted: only RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384 and EdDSA"),
        ),
        (
            "HS256 keyed with the public key",
            hmac,
            401,
            invalid("the token's algorithm HS256 is not accepted: only RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384 and EdDSA"),
        ),
        (
            "an unknown key id",
            idp.mint_with(json!({"kid": "no-such-key"}), good(&server, "alice"), 3600)
                .await,
            401,
            invalid("the token was not signed by a current key of the issuer"),
        ),
        (
            "missing scope",
            idp.mint(json!({"sub": "alice", "aud": server.url, "scope": "openid profile"}))
                .await,
            403,
            format!(
                r#"{base}, error="insufficient_scope", error_description="the token lacks the scope mountfs""#
            ),
        ),
        (
            "not a JWT",
            "x".repeat(40),
            401,
            invalid("the token is not a signed JWT"),
        ),
    ];
    for (what, token, status, expected) in cases {
        let (got, challenge, body) = try_token(&server, Some(&token)).await;
        assert_eq!(got, status, "{what}: {body}");
        assert_eq!(challenge, expected, "{what}");
    }

    // Within the leeway, the clock skew is forgiven.
    let skewed = idp
        .mint(json!({"sub": "alice", "aud": server.url, "scope": "mountfs", "nbf": now() + 20}))
        .await;
    assert_eq!(try_token(&server, Some(&skewed)).await.0, 200);
    assert_eq!(try_token(&server, Some(&good_token)).await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_issuer_rotates_its_key_and_new_tokens_work_without_a_restart() {
    let Some(idp) = Idp::start().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = server(&idp, dir.path(), &[]).await;
    let before = idp.mint(good(&server, "alice")).await;
    assert_eq!(try_token(&server, Some(&before)).await.0, 200);

    idp.rotate().await;
    let after = idp.mint(good(&server, "alice")).await;
    // The keys were fetched at start; a new key id is fetched once the interval (1 s) passed.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (status, _, body) = try_token(&server, Some(&after)).await;
    assert_eq!(status, 200, "{body}\n{}", server.stderr());
    // The retired key left the JWKS fetched: tokens it signed are refused now.
    let (status, challenge, _) = try_token(&server, Some(&before)).await;
    assert_eq!(status, 401);
    assert!(
        challenge.contains("not signed by a current key"),
        "{challenge}"
    );
    assert!(
        server
            .stderr()
            .contains("fetched the OAuth issuer's signing keys")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protected_resource_metadata_is_served_at_both_well_known_paths() {
    let Some(idp) = Idp::start().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = server(&idp, dir.path(), &["--oauth-scope", "files"]).await;
    let expected = json!({
        "resource": server.url,
        "authorization_servers": [idp.issuer],
        "scopes_supported": ["files"],
        "bearer_methods_supported": ["header"],
        "resource_name": "mountfs",
    });
    for path in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    ] {
        let (status, headers, body) =
            request(&format!("{}{path}", server.base()), "GET", None).await;
        assert_eq!(status, 200, "{path}: {body}");
        assert_eq!(headers["content-type"], "application/json");
        assert_eq!(
            serde_json::from_str::<Value>(&body).unwrap(),
            expected,
            "{path}"
        );
    }
    let (_, challenge, _) = try_token(&server, None).await;
    assert_eq!(
        challenge,
        format!(
            r#"Bearer resource_metadata="{}", scope="files""#,
            metadata_url(&server)
        )
    );

    // A server without --oauth-issuer publishes none (and keeps its old challenge).
    let (_t, tokens) = super::token_file();
    let plain = Server::start(&["--token-file", &tokens, "--mount", "/=memory"], &[]).await;
    let (status, _, _) = request(
        &format!("{}/.well-known/oauth-protected-resource", plain.base()),
        "GET",
        None,
    )
    .await;
    assert_eq!(status, 404);
    assert_eq!(try_token(&plain, None).await.1, r#"Bearer realm="mountfs""#);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_tokens_keep_working_beside_oauth() {
    let Some(idp) = Idp::start().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (_t, tokens) = super::token_file();
    let server = server(&idp, dir.path(), &["--token-file", &tokens]).await;
    assert_eq!(try_token(&server, Some(super::ALICE)).await.0, 200);
    let token = idp.mint(good(&server, "dave")).await;
    assert_eq!(try_token(&server, Some(&token)).await.0, 200);
    let (status, challenge, _) = try_token(&server, Some("not-a-configured-token-xyz")).await;
    assert_eq!(status, 401);
    assert!(challenge.contains("resource_metadata="), "{challenge}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_python_sdk_runs_the_oauth_flow_from_a_401_to_a_tool_call() {
    let Some(idp) = Idp::start().await else {
        return;
    };
    let Some(mut python) = crate::support::python::sdk("the Python SDK's OAuth client") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = server(&idp, dir.path(), &[]).await;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/python/sdk_http_oauth.py"
    );
    let output = tokio::task::spawn_blocking({
        let url = server.url.clone();
        move || python.arg(script).arg(url).output().unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "python SDK OAuth flow failed:\n{stdout}\n{stderr}\nserver:\n{}",
        server.stderr()
    );
    assert!(stdout.contains("token scope: mountfs"), "{stdout}");
    assert!(stdout.ends_with("done\n"), "{stdout}");
    // The provider's authorization-code tokens name alice: the audit log says so.
    let entry = newest_audit_entry(dir.path()).await;
    assert_eq!(entry["principal"], "oauth:alice");
}

/// `mountfs check ARGS`: exit status and stdout.
fn check(args: &[&str]) -> (i32, String) {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_mountfs"))
        .arg("check")
        .args([
            "--http",
            "127.0.0.1:0",
            "--mount",
            "/=memory",
            "--audit",
            "off",
        ])
        .args(args)
        .output()
        .unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8(output.stdout).unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mountfs_check_reaches_the_issuers_discovery_document_and_keys() {
    let Some(idp) = Idp::start().await else {
        return;
    };
    let issuer = idp.issuer.clone();
    let (code, out) = tokio::task::spawn_blocking(move || check(&["--oauth-issuer", &issuer]))
        .await
        .unwrap();
    assert_eq!(code, 0, "{out}");
    let expected = format!(
        "ok    OAuth issuer: discovery at {0}/.well-known/openid-configuration, 1 key(s) at {0}/jwks",
        idp.issuer
    );
    assert!(out.lines().any(|line| line == expected), "{out}");

    // Nothing answering there.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port())
    };
    let (code, out) = tokio::task::spawn_blocking(move || check(&["--oauth-issuer", &closed]))
        .await
        .unwrap();
    assert_eq!(code, 1, "{out}");
    let last = out.lines().last().unwrap();
    assert!(
        last.starts_with("FAIL  OAuth issuer: no discovery document for the issuer"),
        "{out}"
    );
    assert!(last.contains("Check --oauth-issuer"), "{out}");

    // Plain http to another machine.
    let (code, out) =
        tokio::task::spawn_blocking(|| check(&["--oauth-issuer", "http://idp.example.com"]))
            .await
            .unwrap();
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("plain http to a host that is not loopback"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_remote_signs_in_through_the_provider_and_calls_tools() {
    let Some(idp) = Idp::start().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let bridge = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp-remote");
    let proxy = bridge.join("node_modules/mcp-remote/dist/proxy.js");
    if !crate::npm::installed(&bridge, &[&proxy]) {
        crate::support::skips::record("mcp-remote with OAuth", "npm ci in tests/mcp-remote failed");
        return;
    }
    let server = server(&idp, dir.path(), &[]).await;
    // The person's browser, headless: it opens the authorization URL and follows the
    // provider's redirect to the bridge's local callback.
    let browser = dir.path().join("browser");
    std::fs::write(&browser, "#!/bin/sh\nexec curl -sfL -o /dev/null \"$1\"\n").unwrap();
    std::fs::set_permissions(
        &browser,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let mut command = std::process::Command::new("node");
    command
        .arg(&proxy)
        .arg(&server.url)
        .arg("--allow-http")
        .env("BROWSER", &browser)
        .env("MCP_REMOTE_CONFIG_DIR", dir.path().join("bridge-state"));
    let texts = tokio::task::spawn_blocking(move || {
        let mut client = crate::support::stdio::StdioClient::spawn_command(command);
        client.handshake();
        let wrote = client.call(
            "write_file",
            json!({"file_path": "/signed-in.txt", "content": "via mcp-remote\n"}),
        );
        let read = client.call("read_file", json!({"file_path": "/signed-in.txt"}));
        [&wrote, &read].map(crate::support::stdio::text_of)
    })
    .await
    .unwrap();
    assert!(
        texts[0].starts_with("Created /signed-in.txt"),
        "{}",
        texts[0]
    );
    assert!(texts[1].contains("via mcp-remote"), "{}", texts[1]);
    assert_eq!(
        newest_audit_entry(dir.path()).await["principal"],
        "oauth:alice"
    );
}

/// OAuth principals live in a namespace of their own (issue 43's attack review): a provider
/// whose email claim says `alice` is `oauth:alice`, never the token file's `alice`, so it gets
/// `oauth:alice`'s grants; an unverified email is refused; a scope grant adds a mount.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oauth_principals_are_namespaced_verified_and_granted_by_name_or_scope() {
    let Some(idp) = Idp::start().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    for side in ["a", "b"] {
        std::fs::create_dir(dir.path().join(side)).unwrap();
        std::fs::write(
            dir.path().join(side).join("f.txt"),
            format!("{side}-file\n"),
        )
        .unwrap();
    }
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "alice static-alice-token-0123456789\n").unwrap();
    let a = format!("/a/=disk:{}", dir.path().join("a").display());
    let b = format!("/b/=disk:{}", dir.path().join("b").display());
    let tokens = tokens.display().to_string();
    let server = server(
        &idp,
        dir.path(),
        &[
            "--token-file",
            &tokens,
            "--oauth-principal-claim",
            "email",
            "--mount",
            &a,
            "--mount",
            &b,
            "--grant",
            "alice=/a/",
            "--grant",
            "oauth:alice=/b/",
            "--grant",
            "scope:auditors=/a/:ro",
        ],
    )
    .await;
    let claims = |verified: Value, scope: &str| json!({"sub": "x1", "email": "alice", "email_verified": verified, "aud": server.url, "scope": scope});

    let unverified = idp.mint(claims(json!(false), "mountfs")).await;
    let (status, challenge, _) = try_token(&server, Some(&unverified)).await;
    assert_eq!(status, 401, "{challenge}");
    assert!(challenge.contains("email is not verified"), "{challenge}");

    let token = idp.mint(claims(json!(true), "mountfs")).await;
    let mut oauth = Client::new(&server.url, Some(&token), Protocol::Session);
    assert_eq!(oauth.initialize().await.status, 200);
    let theirs = oauth
        .call("read_file", json!({"file_path": "/b/f.txt"}))
        .await;
    assert!(theirs.text.contains("b-file"), "{}", theirs.text);
    let not_theirs = oauth
        .call("read_file", json!({"file_path": "/a/f.txt"}))
        .await;
    assert!(
        not_theirs.is_error,
        "the static alice's mount: {}",
        not_theirs.text
    );
    assert!(!not_theirs.text.contains("a-file"), "{}", not_theirs.text);

    let auditor = idp.mint(claims(json!(true), "mountfs auditors")).await;
    let mut auditor = Client::new(&server.url, Some(&auditor), Protocol::Stateless);
    let read = auditor
        .call("read_file", json!({"file_path": "/a/f.txt"}))
        .await;
    assert!(read.text.contains("a-file"), "{}", read.text);
    let write = auditor
        .call(
            "write_file",
            json!({"file_path": "/a/f.txt", "content": "x\n"}),
        )
        .await;
    assert!(
        write.text.contains("scope:auditors=/a/:ro"),
        "{}",
        write.text
    );

    let mut static_alice = Client::new(
        &server.url,
        Some("static-alice-token-0123456789"),
        Protocol::Session,
    );
    assert_eq!(static_alice.initialize().await.status, 200);
    let mine = static_alice
        .call("read_file", json!({"file_path": "/a/f.txt"}))
        .await;
    assert!(mine.text.contains("a-file"), "{}", mine.text);
    let b_side = static_alice
        .call("read_file", json!({"file_path": "/b/f.txt"}))
        .await;
    assert!(b_side.is_error, "{}", b_side.text);
}
