//! Object mounts (issue 44) against a real S3-compatible server (moto, `support::moto`): what
//! the shared suite cannot say because it needs a second client of the bucket, a second
//! server, a bucket that is not there or an endpoint that is down. Each test makes its own
//! bucket; without moto each is skipped with a visible line (or fails under CI).

use std::sync::Arc;

use mountfs::ground::path::VirtualPath;
use mountfs::storage::backend::{
    Backend, DeleteOptions, Error, FileView, LineWindow, Uploads, WriteMode,
};
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutPayload};
use serde_json::json;

use crate::support::backends::{self, memory_mount, mount};
use crate::support::moto::Bucket;

const GROUP: &str = "object mount test";

fn vp(text: &str) -> VirtualPath {
    VirtualPath::parse(text).expect("a valid path")
}

async fn raw_get(bucket: &Bucket, key: &str) -> Option<Vec<u8>> {
    match bucket.client().get(&Path::parse(key).unwrap()).await {
        Ok(got) => Some(got.bytes().await.unwrap().to_vec()),
        Err(object_store::Error::NotFound { .. }) => None,
        Err(other) => panic!("raw get {key}: {other}"),
    }
}

async fn raw_put(bucket: &Bucket, key: &str, content: &[u8]) {
    bucket
        .client()
        .put(
            &Path::parse(key).unwrap(),
            PutPayload::from(content.to_vec()),
        )
        .await
        .expect("raw put");
}

async fn raw_keys(bucket: &Bucket) -> Vec<String> {
    use futures_util::TryStreamExt;
    let mut keys: Vec<String> = bucket
        .client()
        .list(None)
        .map_ok(|m| m.location.to_string())
        .try_collect()
        .await
        .unwrap();
    keys.sort();
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_keys_round_trip_exactly_both_ways() {
    let Some(bucket) = Bucket::new(GROUP) else {
        return;
    };
    let backend = bucket.backend("p");
    let long = "l".repeat(250);
    let names = [
        "a b.txt".to_owned(),
        "plus+sign.txt".to_owned(),
        "per%cent%20x.txt".to_owned(),
        "ünï/cödé 😀.md".to_owned(),
        "semi;colon=eq&amp@at,comma'quote(paren).txt".to_owned(),
        format!("deep/{long}/{long}/{long}.txt"),
    ];
    for (i, name) in names.iter().enumerate() {
        let path = vp(&format!("/{name}"));
        backend
            .write(
                &path,
                format!("content {i}\n").as_bytes(),
                WriteMode::CreateOnly,
            )
            .await
            .unwrap_or_else(|e| panic!("write {name}: {e}"));
        // Another client sees exactly the key PREFIX/name, with the content.
        assert_eq!(
            raw_get(&bucket, &format!("p/{name}")).await,
            Some(format!("content {i}\n").into_bytes()),
            "{name}"
        );
        assert_eq!(
            backend.read(&path).await.unwrap().content,
            format!("content {i}\n").as_bytes()
        );
    }
    // A key written by another client is read back under its own name.
    raw_put(&bucket, "p/from outside+%2F é.txt", b"outside\n").await;
    assert_eq!(
        backend
            .read(&vp("/from outside+%2F é.txt"))
            .await
            .unwrap()
            .content,
        b"outside\n"
    );
    let mut root: Vec<String> = backend
        .ls(&VirtualPath::root())
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.path.as_str().to_owned())
        .collect();
    root.sort();
    assert_eq!(
        root,
        [
            "/a b.txt",
            "/deep",
            "/from outside+%2F é.txt",
            "/per%cent%20x.txt",
            "/plus+sign.txt",
            "/semi;colon=eq&amp@at,comma'quote(paren).txt",
            "/ünï",
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_outside_the_prefix_is_reachable() {
    let Some(bucket) = Bucket::new(GROUP) else {
        return;
    };
    // Neighbours sharing the prefix's text, and keys no virtual path names exactly.
    for key in [
        "team/filesX/secret.txt",
        "team/files.txt",
        "team/secret.txt",
        "secret.txt",
        "team/files/~home.txt",
        "team/files/back\\slash.txt",
    ] {
        raw_put(&bucket, key, b"secret needle\n").await;
    }
    raw_put(&bucket, "team/files/mine.txt", b"mine needle\n").await;
    let backend = bucket.backend("team/files");
    let listed: Vec<String> = backend
        .ls(&VirtualPath::root())
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.path.as_str().to_owned())
        .collect();
    assert_eq!(listed, ["/mine.txt"]);
    let session = backends::session(vec![mount("/", Arc::new(backend.clone()), false)]);
    let found = backends::call("grep", json!({"pattern": "needle"}), &session)
        .await
        .unwrap();
    assert_eq!(found.text.trim(), "/mine.txt");
    let globbed = backends::call("glob", json!({"pattern": "**"}), &session)
        .await
        .unwrap();
    assert_eq!(globbed.text.trim(), "/mine.txt");
    // `..` never reaches the backend: the path is refused as the agent sent it.
    let refused = backends::call(
        "read_file",
        json!({"file_path": "/../team/secret.txt"}),
        &session,
    )
    .await
    .unwrap_err();
    assert!(
        refused.to_string().contains(".."),
        "the refusal shows the input: {refused}"
    );
    // A recursive delete of the whole mount's content leaves every neighbour.
    backend
        .delete(
            &vp("/mine.txt"),
            &DeleteOptions {
                recursive: true,
                if_version: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(
        raw_keys(&bucket).await,
        [
            "secret.txt",
            "team/files.txt",
            "team/files/back\\slash.txt",
            "team/files/~home.txt",
            "team/filesX/secret.txt",
            "team/secret.txt",
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_made_by_another_client_makes_the_next_write_stale() {
    let Some(bucket) = Bucket::new(GROUP) else {
        return;
    };
    let backend = Arc::new(bucket.backend("p"));
    let session = backends::session(vec![mount("/", backend.clone(), false)]);
    backends::call(
        "write_file",
        json!({"file_path": "/notes.md", "content": "one\ntwo\n"}),
        &session,
    )
    .await
    .unwrap();
    backends::call("read_file", json!({"file_path": "/notes.md"}), &session)
        .await
        .unwrap();
    // Behind the server's back.
    raw_put(&bucket, "p/notes.md", b"one\nTWO from outside\n").await;
    let stale = backends::call(
        "write_file",
        json!({"file_path": "/notes.md", "content": "mine\n"}),
        &session,
    )
    .await
    .unwrap_err();
    assert!(
        stale
            .to_string()
            .starts_with("Error: File has been modified since it was read: /notes.md"),
        "{stale}"
    );
    assert_eq!(
        raw_get(&bucket, "p/notes.md").await.unwrap(),
        b"one\nTWO from outside\n",
        "nothing overwritten"
    );
    // At the store itself: a write conditional on the old ETag is refused by the server
    // (If-Match), with no look of ours in between.
    let old = backend.read(&vp("/notes.md")).await.unwrap().version;
    raw_put(&bucket, "p/notes.md", b"changed again\n").await;
    let lost = backend
        .write(&vp("/notes.md"), b"late\n", WriteMode::IfVersion(old))
        .await
        .unwrap_err();
    assert_eq!(
        lost,
        Error::VersionMismatch {
            path: vp("/notes.md")
        }
    );
    assert_eq!(
        raw_get(&bucket, "p/notes.md").await.unwrap(),
        b"changed again\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_with_eight_writers_each_lose_no_update() {
    let Some(bucket) = Bucket::new(GROUP) else {
        return;
    };
    // Two servers: two clients of their own, one object.
    let servers = [
        Arc::new(bucket.backend("shared")),
        Arc::new(bucket.backend("shared")),
    ];
    let path = vp("/counter.txt");
    servers[0]
        .write(&path, b"", WriteMode::CreateOnly)
        .await
        .unwrap();
    let mut writers = tokio::task::JoinSet::new();
    for (server, backend) in servers.iter().enumerate() {
        for writer in 0..8 {
            let backend = backend.clone();
            let path = path.clone();
            writers.spawn(async move {
                let line = format!("server {server} writer {writer}\n");
                let mut attempts = 0;
                loop {
                    attempts += 1;
                    let read = backend.read(&path).await.unwrap();
                    let mut next = read.content.clone();
                    next.extend_from_slice(line.as_bytes());
                    match backend
                        .write(&path, &next, WriteMode::IfVersion(read.version))
                        .await
                    {
                        Ok(_) => return attempts,
                        Err(Error::VersionMismatch { .. }) => continue,
                        Err(other) => panic!("write: {other}"),
                    }
                }
            });
        }
    }
    let mut retries = 0;
    while let Some(attempts) = writers.join_next().await {
        retries += attempts.unwrap() - 1;
    }
    let final_text =
        String::from_utf8(raw_get(&bucket, "shared/counter.txt").await.unwrap()).unwrap();
    let mut lines: Vec<&str> = final_text.lines().collect();
    lines.sort();
    let mut expected: Vec<String> = (0..2)
        .flat_map(|s| (0..8).map(move |w| format!("server {s} writer {w}")))
        .collect();
    expected.sort();
    assert_eq!(
        lines, expected,
        "every acknowledged edit present ({retries} retries)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_bucket_or_a_down_endpoint_fails_that_mount_only() {
    let Some(bucket) = Bucket::new(GROUP) else {
        return;
    };
    let mut missing = bucket.clone();
    missing.name = "no-such-bucket-here".into();
    // A port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut down = bucket.clone();
    down.endpoint = format!("http://127.0.0.1:{closed}");
    let session = backends::session(vec![
        memory_mount("/"),
        mount("/missing", Arc::new(missing.backend("p")), false),
        mount("/down", Arc::new(down.backend("p")), false),
        mount("/ok", Arc::new(bucket.backend("p")), false),
    ]);
    let gone = backends::call("ls", json!({"path": "/missing"}), &session)
        .await
        .unwrap_err()
        .to_string();
    assert_eq!(
        gone,
        "Error: mount unavailable: object store s3://no-such-bucket-here/p: the bucket does not exist (check the mount's bucket name). Other mounts still work; retry later"
    );
    let started = std::time::Instant::now();
    let refused = backends::call(
        "write_file",
        json!({"file_path": "/down/a.txt", "content": "x"}),
        &session,
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        refused.starts_with("Error: mount unavailable: object store s3://"),
        "{refused}"
    );
    assert!(!refused.contains('\n'), "one line: {refused}");
    assert!(!refused.contains(crate::support::moto::SECRET_KEY));
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "retries are bounded: {:?}",
        started.elapsed()
    );
    // The other mounts serve.
    backends::call(
        "write_file",
        json!({"file_path": "/ok/a.txt", "content": "fine\n"}),
        &session,
    )
    .await
    .unwrap();
    backends::call(
        "write_file",
        json!({"file_path": "/scratch.txt", "content": "fine\n"}),
        &session,
    )
    .await
    .unwrap();
    let read = backends::call("read_file", json!({"file_path": "/ok/a.txt"}), &session)
        .await
        .unwrap();
    assert!(read.text.contains("fine"), "{}", read.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_deep_in_a_big_object_is_read_by_ranges() {
    let Some(bucket) = Bucket::new(GROUP) else {
        return;
    };
    // 20 MiB of numbered lines: more than one whole read, many ranges.
    let mut content = Vec::new();
    let mut n = 0usize;
    while content.len() < 20 * 1024 * 1024 {
        content.extend_from_slice(format!("line {n:08} of the big object\r\n").as_bytes());
        n += 1;
    }
    let key = "p/big.log";
    let client = bucket.client();
    let mut upload = object_store::WriteMultipart::new(
        client
            .put_multipart(&Path::parse(key).unwrap())
            .await
            .unwrap(),
    );
    upload.write(&content);
    upload.finish().await.unwrap();
    let backend = bucket.backend("p");
    let deep = n - 3;
    let view = backend
        .read_window(
            &vp("/big.log"),
            LineWindow {
                offset: deep - 2,
                limit: 2,
            },
        )
        .await
        .unwrap();
    let FileView::Text(text) = view else {
        panic!("a text window")
    };
    assert_eq!(
        text.lines,
        [
            format!("line {:08} of the big object", deep - 2),
            format!("line {:08} of the big object", deep - 1)
        ]
    );
    assert!(text.has_more);
    let last = backend
        .read_window(
            &vp("/big.log"),
            LineWindow {
                offset: n - 1,
                limit: 5,
            },
        )
        .await
        .unwrap();
    let FileView::Text(last) = last else {
        panic!("a text window")
    };
    assert_eq!(last.lines, [format!("line {:08} of the big object", n - 1)]);
    assert_eq!(last.total_lines, Some(n));
    assert!(!last.has_more);
    let past = backend
        .read_window(
            &vp("/big.log"),
            LineWindow {
                offset: n + 10,
                limit: 5,
            },
        )
        .await
        .unwrap();
    let FileView::Text(past) = past else {
        panic!("a text window")
    };
    assert!(past.lines.is_empty());
    assert_eq!(past.total_lines, Some(n));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_big_upload_is_multipart_and_an_aborted_one_leaves_no_object() {
    let Some(bucket) = Bucket::new(GROUP) else {
        return;
    };
    let backend = bucket.backend("p");
    let content: Vec<u8> = (0..(20 * 1024 * 1024 + 17))
        .map(|i: usize| (i % 251) as u8)
        .collect();
    let mut upload = backend
        .begin_upload(&vp("/up/big.bin"), WriteMode::CreateOnly)
        .await
        .unwrap();
    for chunk in content.chunks(1024 * 1024) {
        upload.append(chunk).await.unwrap();
    }
    assert_eq!(
        raw_get(&bucket, "p/up/big.bin").await,
        None,
        "nothing before the end"
    );
    let outcome = upload.finish().await.unwrap();
    assert!(outcome.created);
    let stored = raw_get(&bucket, "p/up/big.bin").await.unwrap();
    assert!(stored == content, "the bytes, whole");
    assert_eq!(
        backend.read(&vp("/up/big.bin")).await.unwrap().version,
        outcome.version
    );
    // A second create-only upload of the same path is refused before completing.
    let refused = backend
        .begin_upload(&vp("/up/big.bin"), WriteMode::CreateOnly)
        .await
        .unwrap_err();
    assert_eq!(
        refused,
        Error::AlreadyExists {
            path: vp("/up/big.bin")
        }
    );
    // Aborted after several parts: no object.
    let mut aborted = backend
        .begin_upload(&vp("/up/aborted.bin"), WriteMode::CreateOnly)
        .await
        .unwrap();
    for chunk in content.chunks(1024 * 1024) {
        aborted.append(chunk).await.unwrap();
    }
    aborted.abort().await;
    assert_eq!(raw_keys(&bucket).await, ["p/up/big.bin"]);
}

/// A loopback proxy in front of the test S3 server that answers `503 SlowDown` to its first
/// `throttled` requests (each on a connection it then closes) and forwards everything after.
/// Returns its endpoint and the count of requests it throttled.
async fn throttling_proxy(
    upstream: &str,
    throttled: usize,
) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::Ordering;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let upstream = upstream.trim_start_matches("http://").to_owned();
    let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = count.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut client, _)) = listener.accept().await else {
                return;
            };
            let (upstream, seen) = (upstream.clone(), seen.clone());
            tokio::spawn(async move {
                // The request's head (and whatever of its body came with it).
                let mut read = Vec::new();
                let head_end = loop {
                    let mut buf = [0u8; 8192];
                    let n = client.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    read.extend_from_slice(&buf[..n]);
                    if let Some(at) = read.windows(4).position(|w| w == b"\r\n\r\n") {
                        break at + 4;
                    }
                };
                let throttle = seen
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                        (n < throttled).then_some(n + 1)
                    })
                    .is_ok();
                if throttle {
                    let head = String::from_utf8_lossy(&read[..head_end]).to_ascii_lowercase();
                    let length: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse().ok())
                        .unwrap_or(0);
                    let mut left = length.saturating_sub(read.len() - head_end);
                    let mut buf = [0u8; 8192];
                    while left > 0 {
                        let n = client.read(&mut buf).await.unwrap_or(0);
                        if n == 0 {
                            break;
                        }
                        left = left.saturating_sub(n);
                    }
                    let body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>";
                    let answer = format!(
                        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = client.write_all(answer.as_bytes()).await;
                    let _ = client.shutdown().await;
                    return;
                }
                let Ok(mut server) = tokio::net::TcpStream::connect(&upstream).await else {
                    return;
                };
                if server.write_all(&read).await.is_err() {
                    return;
                }
                let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
            });
        }
    });
    (endpoint, count)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttling_is_retried_with_bounded_backoff_then_told_in_one_line() {
    use std::sync::atomic::Ordering;
    let Some(bucket) = Bucket::new(GROUP) else {
        return;
    };
    // Two 503s, then the store answers: the write lands after the retries.
    let (endpoint, throttled) = throttling_proxy(&bucket.endpoint, 2).await;
    let mut slow = bucket.clone();
    slow.endpoint = endpoint;
    let session = backends::session(vec![
        memory_mount("/"),
        mount("/slow", Arc::new(slow.backend("p")), false),
    ]);
    backends::call(
        "write_file",
        json!({"file_path": "/slow/a.txt", "content": "after the throttling\n"}),
        &session,
    )
    .await
    .unwrap();
    assert_eq!(
        throttled.load(Ordering::SeqCst),
        2,
        "two throttled, then forwarded"
    );
    assert_eq!(
        raw_get(&bucket, "p/a.txt").await.as_deref(),
        Some(&b"after the throttling\n"[..])
    );
    // Always 503: the retries are bounded (3 after the first try), then one clear line; the
    // other mounts serve.
    let (endpoint, throttled) = throttling_proxy(&bucket.endpoint, usize::MAX).await;
    let mut jammed = bucket.clone();
    jammed.endpoint = endpoint;
    let session = backends::session(vec![
        memory_mount("/"),
        mount("/jammed", Arc::new(jammed.backend("p")), false),
    ]);
    let started = std::time::Instant::now();
    let refused = backends::call("read_file", json!({"file_path": "/jammed/a.txt"}), &session)
        .await
        .unwrap_err()
        .to_string();
    assert_eq!(throttled.load(Ordering::SeqCst), 4, "one try and 3 retries");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "bounded: {:?}",
        started.elapsed()
    );
    assert!(
        refused.starts_with(&format!(
            "Error: mount unavailable: object store s3://{}/p: the store is throttling requests (503 SlowDown) and still was after 3 retries with backoff; retry later",
            bucket.name
        )),
        "{refused}"
    );
    assert!(!refused.contains('\n'), "one line: {refused}");
    backends::call(
        "write_file",
        json!({"file_path": "/scratch.txt", "content": "fine\n"}),
        &session,
    )
    .await
    .unwrap();
}
