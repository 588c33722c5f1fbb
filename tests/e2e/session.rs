//! A full agent session over stdio, as an agent would run it: write, read, edit, multi_edit,
//! glob, grep, ls — with the exact answers it reads.

use serde_json::json;

use crate::assert_text_eq;
use crate::support::stdio::StdioClient;

#[test]
fn an_agent_session_writes_reads_edits_and_searches() {
    let mut c = StdioClient::start(&["--mount", "/=memory", "--mount", "/scratch/=memory"]);

    let created = c.ok(
        "write_file",
        json!({"file_path": "/src/main.rs", "content": "fn main() {\n    println!(\"hello\");\n}\n"}),
    );
    assert_text_eq!("Created /src/main.rs (3 lines, 37 bytes).", created);

    let read = c.ok("read_file", json!({"file_path": "/src/main.rs"}));
    assert_text_eq!(
        "     1\tfn main() {\n     2\t    println!(\"hello\");\n     3\t}",
        read
    );

    let result = c.call(
        "edit_file",
        json!({"file_path": "/src/main.rs", "old_string": "hello", "new_string": "hello, world"}),
    );
    assert_eq!(result["isError"], false);
    assert_text_eq!(
        "Edited /src/main.rs: replaced 1 occurrence.\n\
         1 line(s) added, 1 removed. The changed region(s) now read:\n\
         \x20    1\tfn main() {\n\
         \x20    2\t    println!(\"hello, world\");\n\
         \x20    3\t}",
        crate::support::stdio::text_of(&result)
    );
    let structured = &result["structuredContent"];
    assert_eq!(structured["occurrences"], 1);
    assert_text_eq!(
        "--- /src/main.rs\n+++ /src/main.rs\n@@ -1,3 +1,3 @@\n fn main() {\n-    println!(\"hello\");\n+    println!(\"hello, world\");\n }\n",
        structured["diff"].as_str().unwrap()
    );

    let multi = c.ok(
        "multi_edit",
        json!({"file_path": "/src/main.rs", "edits": [
            {"old_string": "fn main", "new_string": "pub fn main"},
            {"old_string": "world", "new_string": "mountfs"}
        ]}),
    );
    assert!(
        multi.starts_with("Edited /src/main.rs: applied 2 edits (2 occurrences replaced)."),
        "{multi}"
    );

    c.ok(
        "write_file",
        json!({"file_path": "/src/lib.rs", "content": "pub mod x;\n"}),
    );
    c.ok(
        "write_file",
        json!({"file_path": "/scratch/notes.md", "content": "- says hello\n"}),
    );
    c.ok(
        "write_file",
        json!({"file_path": "/README.md", "content": "# demo\n"}),
    );

    let mut rs = c
        .ok("glob", json!({"pattern": "*.rs"}))
        .lines()
        .map(str::to_owned)
        .collect::<Vec<_>>();
    rs.sort();
    assert_eq!(rs, vec!["/src/lib.rs", "/src/main.rs"]);
    assert_text_eq!(
        "/src/main.rs",
        c.ok("glob", json!({"pattern": "src/m*.rs"}))
    );
    assert_text_eq!("No files found", c.ok("glob", json!({"pattern": "*.py"})));

    assert_text_eq!(
        "/scratch/notes.md\n/src/main.rs",
        c.ok("grep", json!({"pattern": "hello"}))
    );
    assert_text_eq!(
        "/src/main.rs:\n  2:     println!(\"hello, mountfs\");",
        c.ok(
            "grep",
            json!({"pattern": "mountfs", "output_mode": "content"})
        )
    );
    assert_text_eq!(
        "/src/lib.rs: 1\n/src/main.rs: 1",
        c.ok("grep", json!({"pattern": "pub", "output_mode": "count"}))
    );
    assert_text_eq!(
        "/README.md (7 bytes)\n/scratch/\n/src/",
        c.ok("ls", json!({"path": "/"}))
    );
    assert_text_eq!(
        "/scratch/notes.md (13 bytes)",
        c.ok("ls", json!({"path": "/scratch"}))
    );
    let status = c.finish();
    assert!(
        status.success(),
        "clean exit when the client closes stdin: {status}"
    );
}

#[test]
fn parallel_edits_from_one_session_all_land_in_order() {
    let mut c = StdioClient::start(&[]);
    let lines: String = (0..20).map(|i| format!("line {i}\n")).collect();
    c.ok(
        "write_file",
        json!({"file_path": "/shared.txt", "content": lines}),
    );
    c.ok("read_file", json!({"file_path": "/shared.txt"}));
    // Twenty edits in flight at once, each to its own line, plus an append chain that only
    // works if the edits land in the order they were sent.
    let mut ids = Vec::new();
    for i in 0..20 {
        ids.push(c.send(
            "tools/call",
            json!({"name": "edit_file", "arguments": {
                "file_path": "/shared.txt",
                "old_string": format!("line {i}\n"),
                "new_string": format!("line {i} edited\n"),
            }}),
        ));
    }
    for step in 0..10 {
        ids.push(c.send(
            "tools/call",
            json!({"name": "edit_file", "arguments": {
                "file_path": "/shared.txt",
                "old_string": format!("line 19 edited{}\n", "+".repeat(step)),
                "new_string": format!("line 19 edited{}\n", "+".repeat(step + 1)),
            }}),
        ));
    }
    for id in ids {
        let response = c.response(id);
        assert_eq!(response["result"]["isError"], false, "{response}");
    }
    let expected: String = (0..20)
        .map(|i| {
            let suffix = if i == 19 {
                "+".repeat(10)
            } else {
                String::new()
            };
            format!("line {i} edited{suffix}")
        })
        .enumerate()
        .map(|(n, line)| format!("{:>6}\t{line}", n + 1))
        .collect::<Vec<_>>()
        .join("\n");
    assert_text_eq!(
        expected,
        c.ok("read_file", json!({"file_path": "/shared.txt"}))
    );
}
