//! The test tree's own shape: `Cargo.toml` sets `autotests = false` and names a few test
//! binaries (each links the library once, which keeps CI's build short), so a file under
//! `tests/` that no binary declares as a module would never be compiled nor run, silently.
//! [`every_test_file_is_compiled`] follows the `mod` declarations from every `[[test]]` and
//! `[[bench]]` root and fails on any `.rs` file it does not reach.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// `path = "…"` of every `[[test]]` and `[[bench]]` target (benches borrow `tests/support`).
fn target_roots(manifest: &str, package: &Path) -> Vec<PathBuf> {
    let mut roots = Vec::new();
    let mut in_target = false;
    let mut named = None;
    let mut kind = "";
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            if let Some(name) = named.take() {
                // A bench without `path` lives at benches/<name>.rs.
                roots.push(package.join(format!("{kind}/{name}.rs")));
            }
            in_target = line == "[[test]]" || line == "[[bench]]";
            kind = if line == "[[test]]" {
                "tests"
            } else {
                "benches"
            };
            continue;
        }
        if !in_target {
            continue;
        }
        if let Some(value) = line.strip_prefix("path = ") {
            roots.push(package.join(value.trim_matches('"')));
            named = None;
            in_target = false;
        } else if let Some(value) = line.strip_prefix("name = ") {
            named = Some(value.trim_matches('"').to_owned());
        }
    }
    if let Some(name) = named {
        roots.push(package.join(format!("{kind}/{name}.rs")));
    }
    roots
}

/// The files `file` declares as modules (`mod x;`, with or without `#[path = "…"]`).
fn declared_modules(file: &Path, is_mod_rs: bool) -> Vec<(PathBuf, bool)> {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let dir = file.parent().unwrap();
    // Where `mod x;` looks: beside a mod-rs file, or in a folder named after any other file.
    let child_dir = if is_mod_rs {
        dir.to_path_buf()
    } else {
        dir.join(file.file_stem().unwrap())
    };
    let mut found = Vec::new();
    let mut path_attribute: Option<String> = None;
    for line in text.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("#[path = \"") {
            path_attribute = rest.strip_suffix("\"]").map(str::to_owned);
            continue;
        }
        let declaration = line
            .strip_prefix("pub mod ")
            .or_else(|| line.strip_prefix("pub(crate) mod "))
            .or_else(|| line.strip_prefix("mod "));
        if let Some(name) = declaration.and_then(|rest| rest.strip_suffix(';')) {
            match path_attribute.take() {
                Some(relative) => {
                    let target = child_dir.join(relative);
                    let is_mod_rs = target.file_name().is_some_and(|n| n == "mod.rs");
                    found.push((target, is_mod_rs));
                }
                None => {
                    let flat = child_dir.join(format!("{name}.rs"));
                    if flat.exists() {
                        found.push((flat, false));
                    } else {
                        found.push((child_dir.join(name).join("mod.rs"), true));
                    }
                }
            }
        } else if !line.starts_with("#[") {
            path_attribute = None;
        }
    }
    found
}

fn rust_files_under(dir: &Path, files: &mut BTreeSet<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n == "node_modules") {
                continue;
            }
            rust_files_under(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.insert(std::fs::canonicalize(&path).unwrap());
        }
    }
}

#[test]
fn every_test_file_is_compiled() {
    let package = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = std::fs::read_to_string(package.join("Cargo.toml")).unwrap();
    assert!(
        manifest.contains("autotests = false"),
        "this check assumes the test binaries are listed in Cargo.toml"
    );
    let roots = target_roots(&manifest, package);
    assert!(
        roots.iter().any(|r| r.ends_with("tests/tools/main.rs")),
        "the roots were not read from Cargo.toml: {roots:?}"
    );
    let mut reached = BTreeSet::new();
    let mut pending: Vec<(PathBuf, bool)> = roots.into_iter().map(|r| (r, true)).collect();
    while let Some((file, is_mod_rs)) = pending.pop() {
        let canonical = std::fs::canonicalize(&file)
            .unwrap_or_else(|e| panic!("a declared module is missing: {}: {e}", file.display()));
        if reached.insert(canonical) {
            pending.extend(declared_modules(&file, is_mod_rs));
        }
    }
    let mut present = BTreeSet::new();
    rust_files_under(&package.join("tests"), &mut present);
    let orphans: Vec<_> = present.difference(&reached).collect();
    assert!(
        orphans.is_empty(),
        "files under tests/ that no test binary compiles (declare them with `mod` in a \
         binary's main.rs, or list a new [[test]] in Cargo.toml): {orphans:#?}"
    );
}
