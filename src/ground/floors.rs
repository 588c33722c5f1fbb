//! The floors of the crate, declared once, and the test that keeps every import pointing down.
//!
//! Each file of `src/` stands on one floor ([`FLOORS`]); a file may import files of its own floor
//! and of the floors below it, never above, and the files' imports never close a circle. The
//! imports are read as `tools/cycles.py` reads them: every `use` declaration (nested `{…}`
//! groups, the crate root, `super` and `self` paths) and every inline path from the crate root,
//! outside a file's trailing unit-test module, each mapped to the file that defines the deepest
//! module it names. A folder's own `mod child;` declarations are not imports.
//!
//! A new file must be given its floor here; a test fails until it is.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use regex::Regex;

/// The floors, from the ground up: each is one top-level folder of `src/`, named for it (issue
/// 42), so the tree shows the layers; `lib.rs` and `main.rs` stand loose on top. Each floor may
/// import only itself and those below.
pub(crate) const FLOORS: &[(&str, &[&str])] = &[
    // Pure helpers: paths, limits, quotas, text, content sniffing, the mount grammar, grants,
    // search queries, times, URIs, progress. No crate type above them.
    ("ground", &["ground/"]),
    // Files and where they are kept: backends and store engines, the audit log's store,
    // execute's process and sandbox machinery (it imports no tool type).
    ("storage", &["storage/"]),
    // A session's state: read ledger, undo history, locks, the call's trail, arrival order.
    ("state", &["state/"]),
    // The change primitive and what every tool shares (ToolError, ToolReply, CallContext, the
    // edit pipeline, the steps of a multi-file change).
    ("change", &["change/"]),
    // One file per tool (execute's face too), and the one table of tools.
    ("tools", &["tools/"]),
    // Fed by what a call changed: the audit entry, the change notifications, resources.
    ("observers", &["observers/"]),
    // The mount table opened into sessions, registry, MCP handler, transports, HTTP, workspaces,
    // roots, the CLI; lib.rs and main.rs on top.
    ("server", &["server/", "lib.rs", "main.rs"]),
];

/// The floor (index into [`FLOORS`]) of a file, by its path under `src/` with `/` separators.
fn floor_of(file: &str) -> Option<usize> {
    let mut best: Option<(usize, usize)> = None;
    for (floor, (_, members)) in FLOORS.iter().enumerate() {
        for member in *members {
            let fits = if member.ends_with('/') {
                file.starts_with(member)
            } else {
                file == *member
            };
            if fits && best.is_none_or(|(len, _)| member.len() > len) {
                best = Some((member.len(), floor));
            }
        }
    }
    best.map(|(_, floor)| floor)
}

/// The files of `src` importing each other: file → (imported file → names), paths relative to
/// `src` with `/` separators.
type Graph = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn relative(src: &Path, file: &Path) -> String {
    let parts: Vec<String> = file
        .strip_prefix(src)
        .unwrap()
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    parts.join("/")
}

/// The module path of a file: `tools/change.rs` → `[tools, change]`, `tools/mod.rs` → `[tools]`.
fn module_path(rel: &str) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_owned)
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The file defining the deepest module of `parts` that exists.
fn module_file(src: &Path, parts: &[String]) -> Option<String> {
    for n in (0..=parts.len()).rev() {
        let candidates: Vec<PathBuf> = if n == 0 {
            vec![src.join("lib.rs"), src.join("main.rs")]
        } else {
            let base = parts[..n].iter().fold(src.to_path_buf(), |p, s| p.join(s));
            vec![base.with_extension("rs"), base.join("mod.rs")]
        };
        if let Some(found) = candidates.into_iter().find(|c| c.is_file()) {
            return Some(relative(src, &found));
        }
    }
    None
}

/// The paths of a use tree: `a::{b, c::{d, e}}` → `a::b`, `a::c::d`, `a::c::e`.
fn expand(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        // `a::b as c` names `a::b`.
        let words: Vec<&str> = tree.split_whitespace().collect();
        let plain = match words.as_slice() {
            [path @ .., "as", _] => path.join(" "),
            _ => tree.to_owned(),
        };
        let plain = plain.trim();
        return if plain.is_empty() {
            Vec::new()
        } else {
            vec![plain.to_owned()]
        };
    };
    let prefix = &tree[..open];
    // A `use` in prose or a string may have no closing brace: its body runs to the end.
    let close = tree
        .rfind('}')
        .filter(|&close| close > open)
        .unwrap_or(tree.len());
    let body = &tree[open + 1..close];
    let (mut parts, mut depth, mut current) = (Vec::new(), 0_i32, String::new());
    for ch in body.chars() {
        if ch == ',' && depth == 0 {
            parts.push(std::mem::take(&mut current));
            continue;
        }
        depth += i32::from(ch == '{') - i32::from(ch == '}');
        current.push(ch);
    }
    parts.push(current);
    let mut out = Vec::new();
    for part in parts {
        for path in expand(&part) {
            if path == "self" {
                out.push(prefix.trim_end_matches(':').to_owned());
            } else {
                out.push(format!("{prefix}{path}"));
            }
        }
    }
    out
}

/// Reads the imports of every file of `src` (see the module doc).
fn graph(src: &Path) -> Graph {
    let root = "crate";
    let comment = Regex::new(r"//[^\n]*").unwrap();
    let uses = Regex::new(r"(?s)\buse\s+([^;]+);").unwrap();
    let inline = Regex::new(&format!(r"\b{root}((?:::[A-Za-z_][A-Za-z0-9_]*)+)")).unwrap();
    // `super::x::f()` and `self::x::f()` written inline name modules too (the circle in
    // `exec/` went unseen while only `use` lines were read for them, issue 42).
    let relative_inline =
        Regex::new(r"(?:^|[^A-Za-z0-9_:])((?:super|self)(?:::[A-Za-z_][A-Za-z0-9_]*)+)").unwrap();
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut graph = Graph::new();
    for file in &files {
        let rel = relative(src, file);
        let text = std::fs::read_to_string(file).unwrap();
        let mut text = comment.replace_all(&text, "").into_owned();
        if let Some(cut) = text.find("#[cfg(test)]\nmod ") {
            text.truncate(cut);
        }
        let here = module_path(&rel);
        let mut paths: Vec<String> = uses
            .captures_iter(&text)
            .flat_map(|c| expand(&c[1]))
            .collect();
        paths.extend(
            inline
                .captures_iter(&text)
                .map(|c| format!("{root}{}", &c[1])),
        );
        paths.extend(
            relative_inline
                .captures_iter(&text)
                .map(|c| c[1].to_owned()),
        );
        let edges = graph.entry(rel.clone()).or_default();
        for path in paths {
            let mut segs: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
            let Some(&first) = segs.first() else { continue };
            let base: Vec<String> = if first == root {
                segs.remove(0);
                Vec::new()
            } else if first == "super" || first == "self" {
                let mut base = here.clone();
                while let Some(&seg) = segs.first() {
                    match seg {
                        "super" => {
                            base.pop();
                        }
                        "self" => {}
                        _ => break,
                    }
                    segs.remove(0);
                }
                base
            } else {
                continue; // another crate, or a name in scope
            };
            let modules: Vec<String> = base
                .into_iter()
                .chain(
                    segs.iter()
                        .filter(|s| s.starts_with(|c: char| c.is_lowercase()))
                        .map(|s| (*s).to_owned()),
                )
                .collect();
            let Some(target) = module_file(src, &modules) else {
                continue;
            };
            if target == rel || target == "lib.rs" || target == "main.rs" {
                continue;
            }
            let name = segs.last().copied().unwrap_or("self").to_owned();
            edges.entry(target).or_default().insert(name);
        }
    }
    graph
}

/// Every import that points up a floor, and every file without a floor.
fn upward_imports(graph: &Graph) -> Vec<String> {
    let name = |floor: usize| FLOORS[floor].0;
    let mut found = Vec::new();
    for (file, edges) in graph {
        let Some(from) = floor_of(file) else {
            found.push(format!("{file} has no floor: add it to floors::FLOORS"));
            continue;
        };
        for (target, names) in edges {
            let Some(to) = floor_of(target) else { continue };
            if to > from {
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                found.push(format!(
                    "{file} ({}) imports {target} ({}): {}",
                    name(from),
                    name(to),
                    names.join(", ")
                ));
            }
        }
    }
    found
}

/// Every circle of files importing each other (Tarjan's strongly connected components of more
/// than one file), each with the imports that tie it.
fn circles(graph: &Graph) -> Vec<String> {
    struct Walk<'g> {
        graph: &'g Graph,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        found: Vec<Vec<&'g str>>,
    }
    impl<'g> Walk<'g> {
        fn visit(&mut self, v: &'g str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.graph.get(v).into_iter().flat_map(BTreeMap::keys) {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort_unstable();
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for file in graph.keys() {
        if !walk.index.contains_key(file.as_str()) {
            walk.visit(file);
        }
    }
    walk.found
        .iter()
        .map(|component| {
            let members: BTreeSet<&str> = component.iter().copied().collect();
            let mut text = format!("a circle of {} files:", component.len());
            for file in component {
                for (target, names) in &graph[*file] {
                    if members.contains(target.as_str()) {
                        let names: Vec<&str> = names.iter().map(String::as_str).collect();
                        text.push_str(&format!("\n  {file} -> {target}: {}", names.join(", ")));
                    }
                }
            }
            text
        })
        .collect()
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn no_file_imports_a_floor_above_its_own() {
    let found = upward_imports(&graph(&src_dir()));
    assert!(
        found.is_empty(),
        "imports must point down the floors of floors::FLOORS:\n{}",
        found.join("\n")
    );
}

#[test]
fn no_files_import_each_other_in_a_circle() {
    let found = circles(&graph(&src_dir()));
    assert!(found.is_empty(), "{}", found.join("\n"));
}

/// The checks see what they are for: an import up a floor, a circle through `super`, a nested
/// use group, an inline path, and a `mod.rs` named through its folder.
#[test]
fn the_checks_find_an_upward_import_and_a_circle() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    let root = "crate";
    for folder in ["ground/text", "state", "change", "storage/exec", "tools"] {
        std::fs::create_dir_all(src.join(folder)).unwrap();
    }
    let write = |file: &str, text: String| std::fs::write(src.join(file), text).unwrap();
    write(
        "lib.rs",
        "pub mod ground;\npub mod state;\npub mod tools;\npub mod change;\n".into(),
    );
    write(
        "ground/path.rs",
        format!("use {root}::state::session::Session;\n"),
    );
    write(
        "state/session.rs",
        format!("pub struct Session;\nfn f() {{ {root}::ground::text::wrap::go(); }}\n"),
    );
    write("ground/text/wrap.rs", "pub fn go() {}\n".into());
    // A circle through inline `super::` paths only, no `use` line.
    write(
        "storage/exec/a.rs",
        "pub fn go() { super::b::go(); }\n".into(),
    );
    write(
        "storage/exec/b.rs",
        "pub fn go() { super::a::go(); }\n".into(),
    );
    write(
        "change/mod.rs",
        format!("use {root}::{{ground::path, change::report::{{self, Report}}}};\n"),
    );
    write("change/report.rs", "use super::ToolError;\n".into());
    write(
        "change/steps.rs",
        "#[cfg(test)]\nmod tests { use super::super::ToolError; }\n".into(),
    );
    let graph = graph(src);
    assert_eq!(
        upward_imports(&graph),
        ["ground/path.rs (ground) imports state/session.rs (state): Session"]
    );
    let circles = circles(&graph);
    assert_eq!(circles.len(), 2, "{circles:?}");
    assert!(
        circles.iter().any(
            |c| c.contains("change/report.rs -> change/mod.rs: ToolError")
                && c.contains("change/mod.rs -> change/report.rs: Report, report")
        ),
        "{circles:?}"
    );
    assert!(
        circles
            .iter()
            .any(|c| c.contains("storage/exec/a.rs -> storage/exec/b.rs: go")
                && c.contains("storage/exec/b.rs -> storage/exec/a.rs: go")),
        "{circles:?}"
    );
    assert!(graph["state/session.rs"].contains_key("ground/text/wrap.rs"));
    assert!(graph["change/steps.rs"].is_empty(), "unit tests left out");
}

#[test]
fn every_file_has_one_floor_and_it_is_its_folder() {
    assert_eq!(floor_of("tools/read_file.rs"), Some(4));
    assert_eq!(floor_of("change/report.rs"), Some(3));
    assert_eq!(floor_of("observers/audit_record.rs"), Some(5));
    assert_eq!(floor_of("storage/audit/spool.rs"), Some(1));
    assert_eq!(floor_of("state/arrival.rs"), Some(2));
    assert_eq!(floor_of("nowhere.rs"), None);
}

/// The folder tree is the floors (issue 42): every top-level folder of `src/` is a floor named
/// for it, and the only loose files are `lib.rs` and `main.rs`.
#[test]
fn the_top_level_folders_of_src_are_the_floors() {
    let names: Vec<&str> = FLOORS.iter().map(|(name, _)| *name).collect();
    let mut found = Vec::new();
    for entry in std::fs::read_dir(src_dir()).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.path().is_dir() {
            if !names.contains(&name.as_str()) {
                found.push(format!("src/{name}/ is not a floor of floors::FLOORS"));
            }
        } else if !["lib.rs", "main.rs"].contains(&name.as_str()) {
            found.push(format!(
                "src/{name} stands loose: move it into its floor's folder"
            ));
        }
    }
    for (floor, (name, members)) in FLOORS.iter().enumerate() {
        assert_eq!(floor_of(&format!("{name}/x.rs")), Some(floor));
        assert!(
            members
                .iter()
                .all(|m| m.starts_with(&format!("{name}/")) || ["lib.rs", "main.rs"].contains(m))
        );
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}
