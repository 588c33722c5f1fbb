//! A real S3-compatible server for the object-mount tests: `moto` in server mode (PyPI
//! `moto[server]`, pinned in `tests/python/requirements-moto.txt`; it honours `If-Match` and
//! `If-None-Match: *` on PutObject, which is what the tests rely on), started once per test
//! binary on a free port of 127.0.0.1, waited for, and stopped when the binary exits: at
//! exit by `atexit`, and by a watchdog shell that kills it when the test process is gone
//! (a crashed or killed test binary leaves no server behind).
//!
//! It is started through `tests/python/moto_serial.py`, one request at a time: moto checks a
//! condition and then stores without a lock, so under `moto_server`'s thread per request two
//! racing conditional PUTs can both land (a lost update that real S3 never allows). The
//! requests of the tests still race on the wire; the server makes each one atomic, as S3 does.
//!
//! Each test gets a bucket of its own ([`Bucket::new`], created with one plain S3 request:
//! `object_store` cannot create buckets; moto does not check signatures on it), so cases run
//! in parallel. Without `moto_server` the tests are skipped with a visible line
//! ([`super::skips`]); under CI (`CI` set) or with `MOUNTFS_REQUIRE_OBJECT_SERVER=1` a missing
//! server fails instead, as `MOUNTFS_REQUIRE_SHELL_TARGETS` does for shell targets.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use mountfs::ground::config::{ObjectCloud, ObjectSpec};
use mountfs::storage::backend::ObjectBackend;
use mountfs::storage::backend::object::KeyPrefix;
use object_store::aws::AmazonS3Builder;

/// The switch that turns a missing server into a failure (CI sets `CI`).
pub const REQUIRE: &str = "MOUNTFS_REQUIRE_OBJECT_SERVER";

/// The access key the tests use (moto accepts any).
pub const ACCESS_KEY: &str = "mountfs-test";
/// The secret the tests use.
pub const SECRET_KEY: &str = "mountfs-test-secret";

fn required() -> bool {
    let set = |name: &str| std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0");
    set(REQUIRE) || set("CI")
}

/// The one moto server of this test binary: its endpoint, or why there is none.
fn server() -> &'static Result<String, String> {
    static SERVER: OnceLock<Result<String, String>> = OnceLock::new();
    SERVER.get_or_init(start)
}

fn start() -> Result<String, String> {
    launch(true)
}

/// Starts a moto server of its own on a free port; `main` marks the binary's shared one (the
/// one stopped at exit; any other is stopped by its watchdog once this process is gone).
fn launch(main: bool) -> Result<String, String> {
    let found = Command::new("python3")
        .args(["-c", "import moto.moto_server.werkzeug_app, flask"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        return Err(
            "python3 cannot import moto's server (moto[server]); install it with `pip install -r tests/python/requirements-moto.txt`".into(),
        );
    }
    let launcher = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/moto_serial.py");
    let program = format!("python3 '{launcher}'");
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("no free port: {e}"))?
        .port();
    // The watchdog: moto runs while this test process does, and is killed when it is gone.
    let script = format!(
        "{program} 127.0.0.1 {port} >/dev/null 2>&1 & m=$!; \
         trap 'kill $m 2>/dev/null; exit 0' TERM INT; \
         while kill -0 {parent} 2>/dev/null && kill -0 $m 2>/dev/null; do sleep 1; done; \
         kill $m 2>/dev/null",
        parent = std::process::id()
    );
    let child = Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start {program}: {e}"))?;
    if main {
        WATCHDOG.get_or_init(|| child.id());
        // SAFETY: registers a plain `extern "C" fn` with the C runtime, to run once at exit.
        unsafe {
            libc::atexit(stop);
        }
    }
    let endpoint = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if request(port, "GET", "/", None).is_ok_and(|status| status < 500) {
            return Ok(endpoint);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(format!(
        "{program} did not answer on {endpoint} within 30 s"
    ))
}

static WATCHDOG: OnceLock<u32> = OnceLock::new();

extern "C" fn stop() {
    if let Some(pid) = WATCHDOG.get()
        && let Ok(pid) = i32::try_from(*pid)
    {
        // SAFETY: signals the watchdog shell this binary started; it kills moto and exits.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
    }
}

/// One plain HTTP/1.1 request to moto; its status code.
fn request(port: u16, method: &str, path: &str, body: Option<&[u8]>) -> std::io::Result<u16> {
    exchange(port, method, path, &[], body.unwrap_or(b"")).map(|(status, _)| status)
}

/// One plain HTTP/1.1 request to moto with `headers`; its status code and whole answer.
fn exchange(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    stream.write_all(body)?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer)?;
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no status line in {text:?}")))?;
    Ok((status, text))
}

fn port_of(endpoint: &str) -> u16 {
    endpoint
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("the endpoint's port")
}

/// The multipart uploads begun and not completed nor aborted in `bucket` (moto's
/// `ListMultipartUploads`, unsigned): the count of their upload ids.
pub fn open_uploads(bucket: &Bucket) -> usize {
    let (status, text) = exchange(
        port_of(&bucket.endpoint),
        "GET",
        &format!("/{}?uploads", bucket.name),
        &[],
        b"",
    )
    .expect("list multipart uploads");
    assert_eq!(status, 200, "{text}");
    text.matches("<UploadId>").count()
}

/// A moto server of its own that checks signatures (moto's IAM-enforced mode): one bucket,
/// one IAM user allowed `s3:*`, and from then on every request must be signed with that
/// user's key. The shared server never checks, so a wrong key there would pass.
#[derive(Debug, Clone)]
pub struct AuthServer {
    pub bucket: Bucket,
    pub access_key: String,
    pub secret_key: String,
}

impl AuthServer {
    /// Starts it, or `None` (after a skip line, or a failure under CI) without moto.
    pub fn start(group: &str) -> Option<Self> {
        let endpoint = match launch(false) {
            Ok(endpoint) => endpoint,
            Err(reason) => {
                assert!(
                    !required(),
                    "{group}: {reason}; CI or {REQUIRE} is set, so a missing S3 server fails the test instead of skipping it"
                );
                super::skips::record(group, &reason);
                return None;
            }
        };
        let port = port_of(&endpoint);
        let name = super::unique("mfs").to_ascii_lowercase();
        assert_eq!(
            request(port, "PUT", &format!("/{name}"), None).unwrap(),
            200
        );
        // IAM calls, unsigned while moto does not check yet (the credential scope routes them).
        let iam = |action: &str| {
            let (status, text) = exchange(
                port,
                "POST",
                "/",
                &[
                    (
                        "Authorization",
                        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20240101/us-east-1/iam/aws4_request, SignedHeaders=host, Signature=0",
                    ),
                    ("Content-Type", "application/x-www-form-urlencoded"),
                ],
                format!("{action}&UserName=mountfs&Version=2010-05-08").as_bytes(),
            )
            .expect("an IAM call");
            assert_eq!(status, 200, "{action}: {text}");
            text
        };
        iam("Action=CreateUser");
        let key = iam("Action=CreateAccessKey");
        let between = |open: &str, close: &str| {
            let start = key.find(open).expect("a key in the answer") + open.len();
            let end = start + key[start..].find(close).expect("its end");
            key[start..end].to_owned()
        };
        let (access_key, secret_key) = (
            between("<AccessKeyId>", "</AccessKeyId>"),
            between("<SecretAccessKey>", "</SecretAccessKey>"),
        );
        iam(
            "Action=PutUserPolicy&PolicyName=all&PolicyDocument=%7B%22Version%22%3A%222012-10-17%22%2C%22Statement%22%3A%5B%7B%22Effect%22%3A%22Allow%22%2C%22Action%22%3A%22s3%3A%2A%22%2C%22Resource%22%3A%22%2A%22%7D%5D%7D",
        );
        // From now on every request is authenticated.
        let (status, text) = exchange(
            port,
            "POST",
            "/moto-api/reset-auth",
            &[("Content-Type", "text/plain")],
            b"0",
        )
        .expect("moto's reset-auth");
        assert_eq!(status, 200, "{text}");
        Some(Self {
            bucket: Bucket { endpoint, name },
            access_key,
            secret_key,
        })
    }

    /// The environment of a `mountfs` process mounting the bucket with `secret` as the key's
    /// secret.
    pub fn env(&self, secret: &str) -> Vec<(&'static str, String)> {
        let mut env = self.bucket.env();
        for (name, value) in &mut env {
            match *name {
                "AWS_ACCESS_KEY_ID" => *value = self.access_key.clone(),
                "AWS_SECRET_ACCESS_KEY" => *value = secret.to_owned(),
                _ => {}
            }
        }
        env
    }
}

/// A fresh bucket on the test server.
#[derive(Debug, Clone)]
pub struct Bucket {
    pub endpoint: String,
    pub name: String,
}

impl Bucket {
    /// A new bucket, or `None` (after a skip line, or a failure under CI) without moto.
    pub fn new(group: &str) -> Option<Self> {
        let endpoint = match server() {
            Ok(endpoint) => endpoint.clone(),
            Err(reason) => {
                assert!(
                    !required(),
                    "{group}: {reason}; CI or {REQUIRE} is set, so a missing S3 server fails the test instead of skipping it"
                );
                super::skips::record(group, reason);
                return None;
            }
        };
        let name = super::unique("mfs").to_ascii_lowercase();
        let port = port_of(&endpoint);
        let status = request(port, "PUT", &format!("/{name}"), None).expect("create a bucket");
        assert_eq!(status, 200, "moto created bucket {name}");
        Some(Self { endpoint, name })
    }

    /// The spec of a mount of this bucket under `key_prefix`.
    pub fn spec(&self, key_prefix: &str) -> ObjectSpec {
        ObjectSpec {
            cloud: ObjectCloud::S3,
            bucket: self.name.clone(),
            key_prefix: key_prefix.to_owned(),
            endpoint: Some(self.endpoint.clone()),
            region: Some("us-east-1".into()),
            allow_http: true,
        }
    }

    /// The environment a `mountfs` process needs to mount this bucket.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY.into()),
            ("AWS_SECRET_ACCESS_KEY", SECRET_KEY.into()),
            ("AWS_ENDPOINT_URL", self.endpoint.clone()),
            ("AWS_ALLOW_HTTP", "true".into()),
            ("AWS_REGION", "us-east-1".into()),
        ]
    }

    /// The `--mount` spec text of this bucket under `key_prefix` (endpoint and keys from
    /// [`Bucket::env`]).
    pub fn mount_text(&self, key_prefix: &str) -> String {
        if key_prefix.is_empty() {
            format!("object:s3://{}", self.name)
        } else {
            format!("object:s3://{}/{key_prefix}", self.name)
        }
    }

    /// A raw `object_store` client of the whole bucket: "another S3 client", behind the
    /// server's back.
    pub fn client(&self) -> Arc<dyn object_store::ObjectStore> {
        Arc::new(
            mountfs::storage::backend::object::s3_builder(
                AmazonS3Builder::new()
                    .with_access_key_id(ACCESS_KEY)
                    .with_secret_access_key(SECRET_KEY),
                &self.spec(""),
            )
            .build()
            .expect("an S3 client"),
        )
    }

    /// An object backend over this bucket under `key_prefix`.
    pub fn backend(&self, key_prefix: &str) -> ObjectBackend {
        let spec = self.spec(key_prefix);
        let store = mountfs::storage::backend::object::s3_builder(
            AmazonS3Builder::new()
                .with_access_key_id(ACCESS_KEY)
                .with_secret_access_key(SECRET_KEY),
            &spec,
        )
        .build()
        .expect("an S3 client");
        ObjectBackend::new(
            Arc::new(store),
            KeyPrefix::parse(key_prefix).expect("a valid key prefix"),
            spec.url(),
        )
    }
}
