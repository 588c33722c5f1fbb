//! Object mounts through real `mountfs` processes (issue 44): the mount spec on the command
//! line, credentials and endpoint from the environment only (`AWS_*`), the tools over stdio on
//! a bucket of the test S3 server (moto, `support::moto`), and `mountfs check` telling a
//! reachable bucket from a missing one.

use serde_json::json;

use crate::support::McpServer;
use crate::support::moto::Bucket;

const GROUP: &str = "object mount server test";

fn server_command(bucket: &Bucket, mounts: &[String]) -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_mountfs"));
    for spec in mounts {
        command.arg("--mount").arg(spec);
    }
    command
        .args(["--audit", "off"])
        .env("RUST_LOG", "warn")
        .envs(bucket.env());
    command
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_mounts_a_bucket_from_the_environment_and_another_client_sees_its_keys() {
    let Some(bucket) = Bucket::new(GROUP) else {
        return;
    };
    let command = server_command(
        &bucket,
        &[
            "/=memory".to_owned(),
            format!("/b/={}", bucket.mount_text("team/docs")),
        ],
    );
    let server = McpServer::spawn(command, std::time::Duration::from_secs(60)).await;
    server
        .ok(
            "write_file",
            json!({"file_path": "/b/notes/a b+c.md", "content": "hello bucket\n"}),
        )
        .await;
    server
        .ok(
            "edit_file",
            json!({"file_path": "/b/notes/a b+c.md", "old_string": "hello", "new_string": "hi"}),
        )
        .await;
    let listed = server.ok("ls", json!({"path": "/b/notes"})).await;
    assert!(listed.text.contains("a b+c.md"), "{}", listed.text);
    let found = server
        .ok("grep", json!({"pattern": "hi bucket", "path": "/"}))
        .await;
    assert_eq!(found.text.trim(), "/b/notes/a b+c.md");
    server.stop().await;
    use object_store::ObjectStoreExt;
    let stored = bucket
        .client()
        .get(&object_store::path::Path::parse("team/docs/notes/a b+c.md").unwrap())
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(&stored[..], b"hi bucket\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_tells_a_reachable_bucket_from_a_missing_one() {
    let Some(bucket) = Bucket::new(GROUP) else {
        return;
    };
    let run = |spec: String| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_mountfs"))
            .arg("check")
            .args(["--mount", &spec, "--audit", "off"])
            .envs(bucket.env())
            .output()
            .unwrap();
        (
            output.status.code(),
            String::from_utf8(output.stdout).unwrap(),
        )
    };
    let (code, text) = run(format!("/b/={}", bucket.mount_text("p")));
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains(&format!(
            "s3://{}/p reachable, credentials accepted",
            bucket.name
        )),
        "{text}"
    );
    let (code, text) = run("/b/=object:s3://no-such-bucket-here/p".to_owned());
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("object store s3://no-such-bucket-here/p: the bucket does not exist"),
        "{text}"
    );
    assert!(!text.contains(crate::support::moto::SECRET_KEY), "{text}");
}
