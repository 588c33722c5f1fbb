//! `server.json`, the entry for the official MCP Registry (issue 30): valid against the rules
//! the registry documents for `server.json` (name in reverse-DNS form with one slash, a
//! description of at most 100 characters, exact versions, each package's registry, identifier,
//! version and transport, argument and variable shapes), and true to this build: the crate's
//! name and version, every flag it names accepted by `mountfs --help`, and the README's
//! `mcp-name:` line naming it.
//!
//! The registry's published schema itself is not kept here: a copy of it is public material this
//! repository may not commit, and the machines that run the tests cannot fetch it. The rules
//! below are the documented ones, written as a JSON Schema of our own.

use serde_json::{Value, json};

fn rules() -> Value {
    let input = json!({
        "type": "object",
        "properties": {
            "description": {"type": "string"},
            "isRequired": {"type": "boolean"},
            "isSecret": {"type": "boolean"},
            "isRepeated": {"type": "boolean"},
            "format": {"enum": ["string", "number", "boolean", "filepath"]},
            "value": {"type": "string"},
            "default": {"type": "string"},
            "placeholder": {"type": "string"},
            "choices": {"type": "array", "items": {"type": "string"}},
            "variables": {"type": "object"}
        }
    });
    let argument = json!({
        "allOf": [input.clone(), {
            "required": ["type"],
            "properties": {"type": {"enum": ["positional", "named"]}},
            "if": {"properties": {"type": {"const": "named"}}},
            "then": {"required": ["name"]},
            "else": {"anyOf": [{"required": ["valueHint"]}, {"required": ["value"]}]}
        }]
    });
    let transport = json!({
        "type": "object",
        "required": ["type"],
        "properties": {"type": {"enum": ["stdio", "streamable-http", "sse"]}}
    });
    let package = json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["registryType", "identifier", "version", "transport"],
        "properties": {
            "registryType": {"type": "string"},
            "registryBaseUrl": {"type": "string", "pattern": "^https://"},
            "identifier": {"type": "string"},
            "version": {"type": "string", "minLength": 1, "not": {"const": "latest"}},
            "fileSha256": {"type": "string", "pattern": "^[a-f0-9]{64}$"},
            "runtimeHint": {"type": "string"},
            "transport": transport,
            "runtimeArguments": {"type": "array", "items": argument.clone()},
            "packageArguments": {"type": "array", "items": argument},
            "environmentVariables": {
                "type": "array",
                "items": {"allOf": [input, {"required": ["name"]}]}
            }
        }
    });
    json!({
        "type": "object",
        "required": ["name", "description", "version"],
        "properties": {
            "$schema": {"type": "string", "pattern": "^https://static\\.modelcontextprotocol\\.io/schemas/"},
            "name": {"type": "string", "pattern": "^[a-zA-Z0-9.-]+/[a-zA-Z0-9._-]+$", "minLength": 3, "maxLength": 200},
            "title": {"type": "string", "maxLength": 100},
            "description": {"type": "string", "minLength": 1, "maxLength": 100},
            "version": {"type": "string", "maxLength": 255, "pattern": "^[0-9]+\\.[0-9]+\\.[0-9]+"},
            "repository": {
                "type": "object",
                "required": ["url", "source"],
                "properties": {"url": {"type": "string", "pattern": "^https://"}, "source": {"type": "string"}}
            },
            "packages": {"type": "array", "minItems": 1, "items": package}
        }
    })
}

fn entry() -> Value {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/server.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn server_json_follows_the_registry_rules() {
    let validator = jsonschema::validator_for(&rules()).unwrap();
    let entry = entry();
    let errors: Vec<String> = validator
        .iter_errors(&entry)
        .map(|e| e.to_string())
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
    // The rules catch what the registry refuses.
    for (pointer, bad) in [
        ("/name", json!("mountfs")),
        ("/description", json!("x".repeat(101))),
        ("/packages/0/version", json!("latest")),
        ("/packages/0/transport/type", json!("pipe")),
    ] {
        let mut broken = entry.clone();
        *broken.pointer_mut(pointer).unwrap() = bad;
        assert!(!validator.is_valid(&broken), "{pointer} should be refused");
    }
}

#[test]
fn server_json_is_true_to_this_build() {
    let entry = entry();
    assert_eq!(entry["version"], env!("CARGO_PKG_VERSION"));
    let package = &entry["packages"][0];
    assert_eq!(package["registryType"], "cargo");
    assert_eq!(package["identifier"], env!("CARGO_PKG_NAME"));
    assert_eq!(package["version"], env!("CARGO_PKG_VERSION"));
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_mountfs"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    for argument in package["packageArguments"].as_array().unwrap() {
        let name = argument["name"].as_str().unwrap();
        assert!(
            help.lines().any(|l| l.trim_start().starts_with(name)),
            "{name} is not a flag of mountfs --help"
        );
    }
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let name = entry["name"].as_str().unwrap();
    assert!(
        readme.contains(&format!("mcp-name: {name}")),
        "the README names the entry for the registry's ownership check"
    );
}
