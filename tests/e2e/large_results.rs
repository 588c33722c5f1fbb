//! Answers of tools that cannot page by themselves (`ls`; `glob` too, past its 1,000 paths) that exceed 80,000 characters
//! are saved whole to `/scratch/large_tool_results/` and previewed, as `execute`'s are (issue 11:
//! "use the same mechanism for any other tool result that cannot page by itself").

use serde_json::json;

use crate::support::stdio::StdioClient;

fn big_directory() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("many");
    std::fs::create_dir(&sub).unwrap();
    for n in 0..3000 {
        let name = format!("a-rather-long-file-name-to-fill-the-answer-{n:05}.txt");
        std::fs::write(sub.join(name), "x\n").unwrap();
    }
    dir
}

#[test]
fn a_huge_listing_is_saved_to_scratch_and_pages_with_read_file() {
    let dir = big_directory();
    let disk = format!("/=disk:{}", dir.path().display());
    let mut client = StdioClient::start(&["--mount", &disk, "--mount", "/scratch/=memory"]);
    let text = client.ok("ls", json!({"path": "/many"}));
    assert!(text.chars().count() <= 80_000, "{}", text.len());
    assert!(
        text.starts_with("/many/a-rather-long-file-name-to-fill-the-answer-00000.txt (2 bytes)"),
        "{text:.200}"
    );
    let saved = text
        .split("is saved in ")
        .nth(1)
        .and_then(|rest| rest.split(':').next())
        .expect("the answer names the saved file")
        .to_owned();
    assert!(saved.starts_with("/scratch/large_tool_results/"), "{saved}");
    let page = client.ok(
        "read_file",
        json!({"file_path": saved, "offset": 2999, "limit": 1}),
    );
    assert!(
        page.contains("/many/a-rather-long-file-name-to-fill-the-answer-02999.txt (2 bytes)"),
        "{page}"
    );
    assert!(client.finish().success());
}

#[test]
fn without_scratch_a_huge_listing_is_cut_with_the_usual_notice() {
    let dir = big_directory();
    let disk = format!("/=disk:{}", dir.path().display());
    let mut client = StdioClient::start(&["--mount", &disk]);
    let text = client.ok("ls", json!({"path": "/many"}));
    assert!(text.chars().count() <= 80_200, "{}", text.len());
    assert!(!text.contains("large_tool_results"), "{text:.200}");
    assert!(client.finish().success());
}
