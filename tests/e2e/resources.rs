//! Files as MCP resources (issue 13): `resources/list` pages through every mount in path order,
//! `resources/read` gives text or a base64 blob, the template names any file; errors are the
//! JSON-RPC errors MCP gives them, with what to do.

use std::collections::BTreeSet;

use base64::Engine;
use serde_json::{Value, json};

use crate::support::stdio::StdioClient;

/// Every resource of a `resources/list` walk, following cursors; and the number of pages.
fn list_all(client: &mut StdioClient) -> (Vec<Value>, usize) {
    let mut all = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let params = match &cursor {
            Some(cursor) => json!({"cursor": cursor}),
            None => json!({}),
        };
        let page = client.request("resources/list", params);
        let result = &page["result"];
        let resources = result["resources"].as_array().expect("resources array");
        assert!(resources.len() <= 500, "a page holds at most 500 resources");
        all.extend(resources.iter().cloned());
        pages += 1;
        match result["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
        assert!(pages < 100, "cursor never ends");
    }
    (all, pages)
}

#[test]
fn list_pages_through_every_file_of_every_mount_in_path_order() {
    let dir = tempfile::tempdir().unwrap();
    for d in 0..12 {
        let sub = dir.path().join(format!("d{d:02}"));
        std::fs::create_dir(&sub).unwrap();
        for f in 0..100 {
            std::fs::write(sub.join(format!("f{f:03}.txt")), format!("{d} {f}\n")).unwrap();
        }
    }
    std::fs::write(dir.path().join("a b#1.md"), "# title\n").unwrap();
    std::fs::create_dir(dir.path().join(".git")).unwrap();
    std::fs::write(dir.path().join(".git/HEAD"), "ref\n").unwrap();
    let disk = format!("/=disk:{}", dir.path().display());
    let mut client = StdioClient::start(&["--mount", &disk, "--mount", "/scratch/=memory"]);
    client.ok(
        "write_file",
        json!({"file_path": "/scratch/notes.txt", "content": "scratch\n"}),
    );

    let (all, pages) = list_all(&mut client);
    assert_eq!(pages, 3, "1,202 files in pages of 500");
    let uris: Vec<&str> = all.iter().map(|r| r["uri"].as_str().unwrap()).collect();
    assert_eq!(uris.len(), 1202, "every file once, .git left out");
    let unique: BTreeSet<&str> = uris.iter().copied().collect();
    assert_eq!(unique.len(), uris.len(), "no file twice across pages");
    assert_eq!(uris[0], "mountfs:///a%20b%231.md");
    assert_eq!(uris[1], "mountfs:///d00/f000.txt");
    assert_eq!(uris[1201], "mountfs:///scratch/notes.txt");
    let mut sorted = uris.clone();
    sorted.sort();
    assert_eq!(sorted, uris, "path order");
    let first = &all[1];
    assert_eq!(first["name"], "f000.txt");
    assert_eq!(first["title"], "/d00/f000.txt");
    assert_eq!(first["size"], 4);
    assert_eq!(first["mimeType"], "text/plain");
    assert!(
        first["annotations"]["lastModified"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z')),
        "{first}"
    );

    // A cursor the server never gave is refused with what to do.
    let bad = client.request("resources/list", json!({"cursor": "%%%"}));
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
    assert!(
        bad["error"]["message"]
            .as_str()
            .unwrap()
            .contains("pass the nextCursor of the previous resources/list answer"),
        "{bad}"
    );
    assert!(client.finish().success());
}

#[test]
fn read_gives_text_blobs_and_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("hello world.rs"), "fn main() {}\n").unwrap();
    let png = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDRrest";
    std::fs::write(dir.path().join("logo.png"), png).unwrap();
    std::fs::write(dir.path().join("data.bin"), b"\x00\x01\x02\xff").unwrap();
    let big = std::fs::File::create(dir.path().join("big.log")).unwrap();
    big.set_len(5 * 1024 * 1024).unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    std::fs::write(dir.path().join("latin1.txt"), b"caf\xe9 cr\xe8me\n").unwrap();
    let mut utf16 = vec![0xff, 0xfe];
    for unit in "h\u{e9}llo\n".encode_utf16() {
        utf16.extend(unit.to_le_bytes());
    }
    std::fs::write(dir.path().join("wide.txt"), utf16).unwrap();
    let disk = format!("/=disk:{}", dir.path().display());
    let mut client = StdioClient::start(&["--mount", &disk]);

    // Text in any encoding read_file reads is sent decoded.
    for (uri, text) in [
        ("mountfs:///latin1.txt", "caf\u{e9} cr\u{e8}me\n"),
        ("mountfs:///wide.txt", "h\u{e9}llo\n"),
    ] {
        let read = client.request("resources/read", json!({"uri": uri}));
        assert_eq!(read["result"]["contents"][0]["text"], text, "{read}");
    }

    let read = client.request(
        "resources/read",
        json!({"uri": "mountfs:///hello%20world.rs"}),
    );
    let contents = &read["result"]["contents"][0];
    assert_eq!(contents["uri"], "mountfs:///hello%20world.rs", "{read}");
    assert_eq!(contents["text"], "fn main() {}\n");
    assert!(
        contents["mimeType"].as_str().unwrap().starts_with("text/"),
        "{contents}"
    );

    let image = client.request("resources/read", json!({"uri": "mountfs:///logo.png"}));
    let contents = &image["result"]["contents"][0];
    assert_eq!(contents["mimeType"], "image/png", "{image}");
    let blob = base64::engine::general_purpose::STANDARD
        .decode(contents["blob"].as_str().unwrap())
        .unwrap();
    assert_eq!(blob, png);

    let binary = client.request("resources/read", json!({"uri": "mountfs:///data.bin"}));
    let contents = &binary["result"]["contents"][0];
    assert_eq!(contents["mimeType"], "application/octet-stream", "{binary}");
    assert_eq!(contents["blob"], "AAEC/w==");

    let large = client.request("resources/read", json!({"uri": "mountfs:///big.log"}));
    assert_eq!(large["error"]["code"], -32602, "{large}");
    let message = large["error"]["message"].as_str().unwrap();
    assert!(message.contains("5242880 bytes"), "{message}");
    assert!(
        message.contains("read_file tool (offset, limit)"),
        "{message}"
    );

    let missing = client.request("resources/read", json!({"uri": "mountfs:///nope.txt"}));
    assert_eq!(missing["error"]["code"], -32002, "{missing}");
    let directory = client.request("resources/read", json!({"uri": "mountfs:///sub"}));
    assert_eq!(directory["error"]["code"], -32602, "{directory}");
    assert!(
        directory["error"]["message"]
            .as_str()
            .unwrap()
            .contains("is a directory"),
        "{directory}"
    );
    for uri in [
        "file:///etc/passwd",
        "mountfs:///../../etc/passwd",
        "mountfs:///a%ff",
    ] {
        let refused = client.request("resources/read", json!({"uri": uri}));
        assert_eq!(refused["error"]["code"], -32602, "{uri}: {refused}");
    }

    let templates = client.request("resources/templates/list", json!({}));
    assert_eq!(
        templates["result"]["resourceTemplates"][0]["uriTemplate"], "mountfs:///{+path}",
        "{templates}"
    );
    assert!(client.finish().success());
}

#[test]
fn the_official_python_sdk_pages_reads_and_finds_the_template() {
    let Some(mut python) =
        crate::support::python::sdk("resources with the official MCP Python SDK")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    for d in 0..50 {
        let sub = dir.path().join(format!("dir{d:02}"));
        std::fs::create_dir(&sub).unwrap();
        for f in 0..100 {
            std::fs::write(sub.join(format!("file{f:03}.txt")), format!("{d}/{f}\n")).unwrap();
        }
    }
    std::fs::write(dir.path().join("pixel.png"), b"\x89PNG\r\n\x1a\nrest").unwrap();
    let disk = format!("/=disk:{}", dir.path().display());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/sdk_resources.py");
    let output = python
        .args([script, env!("CARGO_BIN_EXE_mountfs"), "--mount", &disk])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("resources ok: 5001 files in 11 pages"),
        "{stdout}"
    );
}

#[test]
fn answers_about_one_file_link_to_it_as_a_resource() {
    let dir = tempfile::tempdir().unwrap();
    let disk = format!("/=disk:{}", dir.path().display());
    let mut client = StdioClient::start(&["--mount", &disk]);
    let link = |result: &Value| {
        result["content"]
            .as_array()
            .expect("content")
            .iter()
            .find(|block| block["type"] == "resource_link")
            .cloned()
    };
    let written = client.call(
        "write_file",
        json!({"file_path": "/docs/a b.md", "content": "hello\n"}),
    );
    let linked = link(&written).expect("write_file links the file");
    assert_eq!(linked["uri"], "mountfs:///docs/a%20b.md", "{linked}");
    assert_eq!(linked["size"], 6);
    assert!(
        linked["annotations"]["lastModified"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z')),
        "{linked}"
    );
    for (tool, arguments) in [
        ("read_file", json!({"file_path": "/docs/a b.md"})),
        (
            "edit_file",
            json!({"file_path": "/docs/a b.md", "old_string": "hello", "new_string": "hi"}),
        ),
        ("file_info", json!({"file_path": "/docs/a b.md"})),
    ] {
        let result = client.call(tool, arguments);
        let linked = link(&result).unwrap_or_else(|| panic!("{tool} links the file: {result}"));
        assert_eq!(linked["uri"], "mountfs:///docs/a%20b.md", "{tool}");
    }
    // Failures and directories link nothing.
    let failed = client.call("read_file", json!({"file_path": "/missing.txt"}));
    assert_eq!(failed["isError"], true);
    assert!(link(&failed).is_none(), "{failed}");
    let listed = client.call("read_file", json!({"file_path": "/docs"}));
    assert!(link(&listed).is_none(), "{listed}");
    assert!(client.finish().success());
}
