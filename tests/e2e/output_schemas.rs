//! Typed results (CONTRACT §5, issue 13): every tool's `structuredContent` satisfies the
//! `outputSchema` that `tools/list` serves for it, in every answer shape — each branch of the
//! schema's `oneOf` (grep's three output modes, read_file of text, an empty file, an image, a
//! binary file and a directory, each kind of undo and move, truncated and paged results) and
//! each tool's errors, whose structured `error.message` is the answer's text, byte for byte.
//!
//! The calls go over stdio to the real binary, as a client's would; the schemas are checked
//! with the `jsonschema` crate, and the test fails when a declared branch was never answered.

use std::collections::{BTreeMap, BTreeSet};

use jsonschema::Validator;
use serde_json::{Value, json};

use crate::support::stdio::{StdioClient, text_of};

/// A tool's served output schema: the whole schema's validator, and one per `$defs` branch
/// (named by its key) to tell which shape an answer has.
struct Served {
    whole: Validator,
    branches: Vec<(String, Validator)>,
}

/// At most 2,000 characters of `value`, for failure messages.
fn short(value: &Value) -> String {
    value.to_string().chars().take(2000).collect()
}

/// A server with every tool, and the shapes its answers were seen in.
struct Checker {
    client: StdioClient,
    served: BTreeMap<String, Served>,
    /// tool → the `$defs` branches its answers matched.
    seen: BTreeMap<String, BTreeSet<String>>,
    root: tempfile::TempDir,
}

impl Checker {
    fn start() -> Self {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("w")).unwrap();
        let disk = format!("/=disk:{}", root.path().join("w").display());
        let mut client = StdioClient::start(&[
            "--allow-exec=unsandboxed",
            "--mount",
            &disk,
            "--mount",
            "/mem/=memory",
            "--mount",
            "/scratch/=memory",
        ]);
        let listed = client.request("tools/list", json!({}));
        let mut served = BTreeMap::new();
        for tool in listed["result"]["tools"].as_array().unwrap() {
            let name = tool["name"].as_str().unwrap().to_owned();
            let schema = &tool["outputSchema"];
            assert_eq!(schema["type"], "object", "{name}: {schema}");
            let whole = jsonschema::validator_for(schema)
                .unwrap_or_else(|e| panic!("{name}: outputSchema does not compile: {e}"));
            let branches = schema["$defs"]
                .as_object()
                .unwrap_or_else(|| panic!("{name}: outputSchema has no $defs"))
                .keys()
                .map(|key| {
                    let mut branch = schema.clone();
                    branch["oneOf"] = json!([{"$ref": format!("#/$defs/{key}")}]);
                    (key.clone(), jsonschema::validator_for(&branch).unwrap())
                })
                .collect();
            served.insert(name, Served { whole, branches });
        }
        Self {
            client,
            served,
            seen: BTreeMap::new(),
            root,
        }
    }

    /// The host path of virtual path `/<name>` on the disk mount.
    fn host(&self, name: &str) -> std::path::PathBuf {
        self.root.path().join("w").join(name)
    }

    /// Calls `tool`, checks its structured content against the served schema, and returns
    /// `(shape, structured content)`; `shape` is the one `$defs` branch it matched.
    fn call(&mut self, tool: &str, arguments: Value) -> (String, Value) {
        let result = self.client.call(tool, arguments.clone());
        let structured = result
            .get("structuredContent")
            .cloned()
            .unwrap_or_else(|| panic!("{tool}({arguments}): no structuredContent in {result}"));
        let served = &self.served[tool];
        let problems: Vec<String> = served
            .whole
            .iter_errors(&structured)
            .map(|e| format!("{}: {e}", e.instance_path()))
            .collect();
        assert!(
            problems.is_empty(),
            "{tool}({arguments}): structuredContent does not satisfy the outputSchema:\n{}\n{}",
            problems.join("\n"),
            short(&structured)
        );
        let matched: Vec<&str> = served
            .branches
            .iter()
            .filter(|(_, v)| v.is_valid(&structured))
            .map(|(name, _)| name.as_str())
            .collect();
        assert_eq!(
            matched.len(),
            1,
            "{tool}: {matched:?} for {}",
            short(&structured)
        );
        let shape = matched[0].to_owned();
        let is_error = result["isError"] == true;
        assert_eq!(
            shape == "error",
            is_error,
            "{tool}({arguments}): isError {is_error} but shape {shape}: {}",
            short(&result)
        );
        if is_error {
            assert_eq!(
                structured["error"]["message"].as_str(),
                Some(text_of(&result).as_str()),
                "{tool}: the structured message is not the text"
            );
        }
        self.seen
            .entry(tool.to_owned())
            .or_default()
            .insert(shape.clone());
        (shape, structured)
    }

    /// [`Checker::call`] that must answer in `shape`.
    fn expect(&mut self, tool: &str, arguments: Value, shape: &str) -> Value {
        let (got, structured) = self.call(tool, arguments.clone());
        assert_eq!(got, shape, "{tool}({arguments}): {}", short(&structured));
        structured
    }

    /// A failed call of `tool` with error kind `kind`.
    fn error(&mut self, tool: &str, arguments: Value, kind: &str) {
        let structured = self.expect(tool, arguments, "error");
        assert_eq!(structured["error"]["kind"], kind, "{tool}: {structured}");
    }
}

/// Files in `/many`: over the 1,000 entries a structured listing holds.
const MANY: usize = 1500;

/// 1x1 PNG.
const PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4,
    0x89, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0x00, 0x01, 0x00, 0x00,
    0x05, 0x00, 0x01, 0x0d, 0x0a, 0x2d, 0xb4, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae,
    0x42, 0x60, 0x82,
];

#[test]
fn every_tool_answers_every_shape_within_its_output_schema() {
    let mut c = Checker::start();
    std::fs::write(c.host("a.txt"), "alpha\nbeta\nalpha again\n").unwrap();
    std::fs::write(c.host("empty.txt"), "").unwrap();
    std::fs::write(c.host("pic.png"), PNG).unwrap();
    std::fs::write(c.host("data.bin"), b"\x00\x01\x02binary\x00").unwrap();
    std::fs::create_dir(c.host("dir")).unwrap();
    std::fs::write(c.host("dir/one.txt"), "one\n").unwrap();
    std::fs::create_dir(c.host("many")).unwrap();
    // Long enough names that the listing's text is over the result limit and saved whole.
    for n in 0..MANY {
        let name = format!("many/a-rather-long-file-name-to-fill-the-answer-{n:05}.txt");
        std::fs::write(c.host(&name), "needle\n").unwrap();
    }

    // ls: a listing, a listing cut to 1,000 entries (and saved whole), errors.
    let listing = c.expect("ls", json!({"path": "/"}), "listing");
    assert!(
        listing["entries"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e[0] == "a.txt" && e[1] == "file" && e[2] == 23 && e[3].is_i64()),
        "{listing}"
    );
    let many = c.expect("ls", json!({"path": "/many"}), "listing");
    assert_eq!(many["total"], MANY);
    assert_eq!(many["entries"].as_array().unwrap().len(), 1000);
    assert!(
        many["saved_to"]
            .as_str()
            .is_some_and(|p| p.starts_with("/scratch/large_tool_results/")),
        "{}",
        many["saved_to"]
    );
    c.error("ls", json!({"path": "/nope"}), "not_found");
    c.error("ls", json!({"path": "/a/../../etc"}), "invalid_path");
    c.error("ls", json!({"paht": "/"}), "invalid_arguments");

    // read_file: text (whole and paged), empty, image, binary, directory, errors.
    let text = c.expect("read_file", json!({"file_path": "/a.txt"}), "text");
    assert_eq!(text["text"], "alpha\nbeta\nalpha again");
    assert_eq!(text["total_lines"], 3);
    assert_eq!(text["truncated"], false);
    let paged = c.expect(
        "read_file",
        json!({"file_path": "/a.txt", "offset": 1, "limit": 1}),
        "text",
    );
    assert_eq!(paged["text"], "beta");
    assert_eq!(paged["next_offset"], 2);
    assert_eq!(paged["truncated"], true);
    let empty = c.expect("read_file", json!({"file_path": "/empty.txt"}), "text");
    assert_eq!(empty["empty"], true);
    let image = c.expect("read_file", json!({"file_path": "/pic.png"}), "image");
    assert_eq!(image["mime"], "image/png");
    c.expect("read_file", json!({"file_path": "/data.bin"}), "binary");
    c.expect("read_file", json!({"file_path": "/dir"}), "directory");
    c.error("read_file", json!({"file_path": "/nope.txt"}), "not_found");
    c.error(
        "read_file",
        json!({"file_path": "/a.txt", "offset": 10}),
        "offset_past_end",
    );
    c.error(
        "read_file",
        json!({"file_path": "/a.txt", "limit": 0}),
        "invalid_arguments",
    );

    // file_info: directory, text file, binary file, error.
    c.expect("file_info", json!({"file_path": "/dir"}), "directory");
    c.expect("file_info", json!({"file_path": "/a.txt"}), "text_file");
    c.expect(
        "file_info",
        json!({"file_path": "/data.bin"}),
        "binary_file",
    );
    c.error("file_info", json!({"file_path": "/nope"}), "not_found");

    // glob: matches, truncated at 1,000, none, errors.
    c.expect("glob", json!({"pattern": "*.txt"}), "matches");
    let globbed = c.expect(
        "glob",
        json!({"pattern": "**/*.txt", "path": "/many"}),
        "matches",
    );
    assert_eq!(globbed["total"], MANY);
    assert_eq!(globbed["paths"].as_array().unwrap().len(), 1000);
    let none = c.expect("glob", json!({"pattern": "*.nothing"}), "matches");
    assert_eq!(none["paths"], json!([]));
    c.error(
        "glob",
        json!({"pattern": "a[", "path": "/"}),
        "invalid_pattern",
    );
    c.error(
        "glob",
        json!({"pattern": "*", "path": "/nope"}),
        "not_found",
    );

    // grep: each output mode, paged, no match, errors.
    let files = c.expect("grep", json!({"pattern": "alpha"}), "files_with_matches");
    assert_eq!(files["files"], json!(["/a.txt"]));
    let counts = c.expect(
        "grep",
        json!({"pattern": "alpha", "output_mode": "count"}),
        "count",
    );
    assert_eq!(counts["counts"], json!({"/a.txt": 2}));
    let lines = c.expect(
        "grep",
        json!({"pattern": "alpha", "path": "/a.txt", "output_mode": "content", "context": 1}),
        "content",
    );
    assert_eq!(
        lines["lines"],
        json!({"/a.txt": [[1, "alpha", true], [2, "beta", false], [3, "alpha again", true]]})
    );
    let page = c.expect(
        "grep",
        json!({"pattern": "needle", "path": "/many", "head_limit": 10, "offset": 5}),
        "files_with_matches",
    );
    assert_eq!(page["total"], MANY);
    assert_eq!(page["next_offset"], 15);
    assert_eq!(page["files"].as_array().unwrap().len(), 10);
    let content_page = c.expect(
        "grep",
        json!({"pattern": "needle", "path": "/many", "output_mode": "content", "head_limit": 3}),
        "content",
    );
    assert_eq!(content_page["next_offset"], 3);
    let count_page = c.expect(
        "grep",
        json!({"pattern": "needle", "path": "/many", "output_mode": "count", "head_limit": 2}),
        "count",
    );
    assert_eq!(count_page["next_offset"], 2);
    let nothing = c.expect(
        "grep",
        json!({"pattern": "zzz", "output_mode": "content"}),
        "content",
    );
    assert_eq!(nothing["total"], 0);
    c.error("grep", json!({"pattern": "("}), "invalid_pattern");
    c.error(
        "grep",
        json!({"pattern": "x", "path": "/nope"}),
        "not_found",
    );
    c.error(
        "grep",
        json!({"pattern": "x", "output_mode": "lines"}),
        "invalid_arguments",
    );

    // write_file: created, replaced (diff), binary replaced by text, errors.
    c.expect(
        "write_file",
        json!({"file_path": "/new.txt", "content": "one\ntwo\n"}),
        "written",
    );
    c.expect(
        "write_file",
        json!({"file_path": "/new.txt", "content": "one\n2\n"}),
        "changed",
    );
    c.expect(
        "write_file",
        json!({"file_path": "/data.bin", "content": "now text\n"}),
        "written",
    );
    c.error(
        "write_file",
        json!({"file_path": "/dir", "content": "x"}),
        "is_a_directory",
    );
    c.error(
        "write_file",
        json!({"file_path": "/dir/one.txt", "content": "unread"}),
        "not_read",
    );

    // edit_file and multi_edit: an edit, and each one's refusals.
    let edited = c.expect(
        "edit_file",
        json!({"file_path": "/a.txt", "old_string": "beta", "new_string": "BETA"}),
        "edited",
    );
    assert_eq!(edited["occurrences"], 1);
    c.error(
        "edit_file",
        json!({"file_path": "/a.txt", "old_string": "alpha", "new_string": "x"}),
        "edit_refused",
    );
    c.error(
        "edit_file",
        json!({"file_path": "/dir/one.txt", "old_string": "one", "new_string": "1"}),
        "not_read",
    );
    c.expect(
        "multi_edit",
        json!({"file_path": "/a.txt", "edits": [
            {"old_string": "BETA", "new_string": "b"},
            {"old_string": "again", "new_string": "twice"},
        ]}),
        "edited",
    );
    c.error(
        "multi_edit",
        json!({"file_path": "/a.txt", "edits": [{"old_string": "missing", "new_string": "x"}]}),
        "edit_refused",
    );
    c.error(
        "multi_edit",
        json!({"file_path": "/a.txt", "edits": []}),
        "invalid_arguments",
    );

    // undo_edit: each kind of step taken back, and its refusals.
    c.expect("undo_edit", json!({"file_path": "/a.txt"}), "restored");
    let binary_back = c.expect(
        "undo_edit",
        json!({"file_path": "/data.bin"}),
        "restored_bytes",
    );
    assert_eq!(binary_back["bytes"], 10);
    c.expect(
        "write_file",
        json!({"file_path": "/created.txt", "content": "x\n"}),
        "written",
    );
    c.expect(
        "undo_edit",
        json!({"file_path": "/created.txt"}),
        "creation_undone",
    );
    c.expect(
        "write_file",
        json!({"file_path": "/nul.bin", "content": "a\u{0}b"}),
        "written",
    );
    c.expect(
        "undo_edit",
        json!({"file_path": "/nul.bin"}),
        "creation_undone_bytes",
    );
    c.error(
        "undo_edit",
        json!({"file_path": "/dir/one.txt"}),
        "nothing_to_undo",
    );

    // move: a file, a directory renamed, a directory copied across mounts, undone, refused.
    c.expect(
        "move",
        json!({"source": "/new.txt", "destination": "/moved.txt"}),
        "file",
    );
    c.expect(
        "undo_edit",
        json!({"file_path": "/moved.txt"}),
        "move_undone",
    );
    c.expect(
        "move",
        json!({"source": "/dir", "destination": "/dir2"}),
        "directory_renamed",
    );
    c.expect(
        "move",
        json!({"source": "/dir2", "destination": "/mem/dir3"}),
        "directory_copied",
    );
    c.error(
        "move",
        json!({"source": "/a.txt", "destination": "/a.txt"}),
        "same_path",
    );
    c.error(
        "move",
        json!({"source": "/a.txt", "destination": "/pic.png"}),
        "destination_exists",
    );

    // apply_patch: a patch applied, a malformed one, one that does not match.
    c.expect(
        "apply_patch",
        json!({"patch": "--- /dev/null\n+++ b/patched.txt\n@@ -0,0 +1,2 @@\n+first\n+second\n"}),
        "patched",
    );
    c.error(
        "apply_patch",
        json!({"patch": "not a patch"}),
        "invalid_patch",
    );
    c.expect("read_file", json!({"file_path": "/patched.txt"}), "text");
    c.error(
        "apply_patch",
        json!({"patch": "--- a/patched.txt\n+++ b/patched.txt\n@@ -1,2 +1,2 @@\n-other\n+x\n second\n"}),
        "patch_mismatch",
    );

    // delete: a file, a directory, refusals.
    c.expect("delete", json!({"file_path": "/patched.txt"}), "deleted");
    c.expect(
        "delete",
        json!({"file_path": "/mem/dir3", "recursive": true}),
        "deleted",
    );
    c.error("delete", json!({"file_path": "/nope"}), "not_found");
    c.error("delete", json!({"file_path": "/mem"}), "mount_root");

    // execute: a command run, one that cannot start.
    let ran = c.expect("execute", json!({"command": "echo hi; exit 3"}), "ran");
    assert_eq!(ran["exit_code"], 3);
    assert_eq!(ran["stdout"], "hi\n");
    c.error(
        "execute",
        json!({"command": "true", "cwd": "/scratch"}),
        "exec_failed",
    );

    // history (the audit log is on by default): a listing, one entry, an unknown id.
    let listing = c.expect("history", json!({"path": "/"}), "listing");
    let id = listing["entries"][0]["id"].clone();
    c.expect("history", json!({"id": id}), "entry");
    c.error("history", json!({"id": 999_999_999}), "not_found");

    // Every tool served was called, and every shape its schema declares was answered.
    for (tool, served) in &c.served {
        let seen = c.seen.get(tool).cloned().unwrap_or_default();
        let declared: BTreeSet<String> = served.branches.iter().map(|(n, _)| n.clone()).collect();
        assert_eq!(
            seen, declared,
            "{tool}: shapes answered vs declared in its outputSchema"
        );
    }
    assert_eq!(c.served.len(), 14, "{:?}", c.served.keys());
    assert!(c.client.finish().success());
}

/// Writes a tree shaped like the peers bench's `small/` workspace (issue 45): a Rust workspace
/// of `crates` crates of 50 files each (`Cargo.toml`, `README.md`, `src/m00.rs`…`src/m34.rs`,
/// `src/util/u0.rs`…, `tests/t0.rs`…, `benches/b0.rs`…), source-like lines of varied length,
/// every fourth module with an `unsafe impl` (every eighth with two).
fn write_source_tree(root: &std::path::Path, crates: usize) {
    let write = |rel: &str, text: &str| {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write(
        "Cargo.toml",
        "[workspace]\nmembers = [\"crates/*\"]\nresolver = \"2\"\n",
    );
    write("README.md", "# workspace\n\nA generated workspace.\n");
    for k in 0..crates {
        let dir = format!("crates/c{k:02}");
        write(
            &format!("{dir}/Cargo.toml"),
            &format!(
                "[package]\nname = \"c{k:02}\"\nversion = \"0.1.{k}\"\nedition = \"2021\"\n\n[dependencies]\nserde = \"1\"\n"
            ),
        );
        write(
            &format!("{dir}/README.md"),
            &format!("# c{k:02}\n\nCrate number {k} of the workspace.\n"),
        );
        let mut modules: Vec<String> = (0..35).map(|i| format!("{dir}/src/m{i:02}.rs")).collect();
        modules.extend((0..6).map(|i| format!("{dir}/src/util/u{i}.rs")));
        modules.extend((0..4).map(|i| format!("{dir}/tests/t{i}.rs")));
        modules.extend((0..2).map(|i| format!("{dir}/benches/b{i}.rs")));
        modules.push(format!("{dir}/src/lib.rs"));
        for (i, path) in modules.iter().enumerate() {
            let n = k * 100 + i;
            let mut text = format!(
                "//! Module {n}: handlers for the requests of kind {n}.\n\nuse std::collections::HashMap;\nuse std::sync::Arc;\n\n/// What the handler keeps between calls.\npub struct Handler{n} {{\n    inner: HashMap<String, usize>,\n    shared: Arc<Vec<u8>>,\n}}\n\n"
            );
            if n % 4 == 0 {
                text.push_str(&format!("unsafe impl Send for Handler{n} {{}}\n"));
            }
            if n % 8 == 0 {
                text.push_str(&format!("unsafe impl Sync for Handler{n} {{}}\n"));
            }
            text.push_str(&format!(
                "\nimpl Handler{n} {{\n    /// A handler with nothing in it yet.\n    pub fn new(shared: Arc<Vec<u8>>) -> Self {{\n        Self {{ inner: HashMap::new(), shared }}\n    }}\n\n    /// The value kept for `key`, if any.\n    pub fn lookup(&self, key: &str) -> Option<usize> {{\n        self.inner.get(key).copied()\n    }}\n\n    /// Counts one more request for `key` and returns how many there were.\n    pub fn record(&mut self, key: &str) -> usize {{\n        let count = self.inner.entry(key.to_owned()).or_insert(0);\n        *count += 1;\n        *count + self.shared.len() % {}\n    }}\n}}\n",
                n % 7 + 2
            ));
            write(path, &text);
        }
    }
}

/// CONTRACT §5, issue 45: `structuredContent` says each fact once, so on a realistic tree it is
/// at most 1.2× the text's bytes for grep's content and count modes, `ls` and `glob` (compact
/// JSON, as the server sends it, against the text's UTF-8 bytes; a byte count, not a timing).
#[test]
fn structured_content_is_at_most_1_2_times_the_text_on_a_source_tree() {
    let root = tempfile::tempdir().unwrap();
    write_source_tree(root.path(), 40);
    let disk = format!("/=disk:{},ro", root.path().display());
    let mut client = StdioClient::start(&["--mount", &disk, "--mount", "/scratch/=memory"]);
    let calls = [
        (
            "grep",
            json!({"pattern": r"unsafe\s+impl", "output_mode": "content"}),
        ),
        (
            "grep",
            json!({"pattern": r"pub fn \w+", "path": "/crates/c01", "output_mode": "content"}),
        ),
        (
            "grep",
            json!({"pattern": "lookup", "path": "/crates/c02", "output_mode": "content", "context": 1}),
        ),
        (
            "grep",
            json!({"pattern": r"unsafe\s+impl", "output_mode": "count"}),
        ),
        (
            "grep",
            json!({"pattern": "Handler", "output_mode": "count"}),
        ),
        ("ls", json!({"path": "/crates/c00/src"})),
        ("ls", json!({"path": "/crates/c00/src/util"})),
        ("glob", json!({"pattern": "**/*.toml"})),
        ("glob", json!({"pattern": "**/*.rs", "path": "/crates/c03"})),
    ];
    let mut over = Vec::new();
    for (tool, arguments) in calls {
        let result = client.call(tool, arguments.clone());
        assert_ne!(result["isError"], true, "{tool}({arguments}): {result}");
        let text = text_of(&result);
        let structured = serde_json::to_string(&result["structuredContent"]).unwrap();
        assert!(
            text.len() > 200,
            "{tool}({arguments}): too small a case: {text}"
        );
        let ratio = structured.len() as f64 / text.len() as f64;
        eprintln!(
            "{tool}({arguments}): text {} bytes, structuredContent {} bytes, {ratio:.2}×",
            text.len(),
            structured.len()
        );
        if ratio > 1.2 {
            over.push(format!(
                "{tool}({arguments}): {ratio:.2}× ({} / {} bytes)",
                structured.len(),
                text.len()
            ));
        }
    }
    assert!(over.is_empty(), "over 1.2× the text:\n{}", over.join("\n"));
}
