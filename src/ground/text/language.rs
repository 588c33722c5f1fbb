//! The language a file is written in, guessed from its name alone (seed 004: "自动检测编程语言"),
//! as `file_info` reports it. No content is inspected here; binary sniffing is `content.rs`.

/// File names that say their language without an extension.
const BY_NAME: &[(&str, &str)] = &[
    ("Makefile", "Makefile"),
    ("GNUmakefile", "Makefile"),
    ("Dockerfile", "Dockerfile"),
    ("CMakeLists.txt", "CMake"),
    ("Cargo.lock", "TOML"),
    ("Gemfile", "Ruby"),
    ("Rakefile", "Ruby"),
    ("Justfile", "Just"),
    ("justfile", "Just"),
];

/// Extensions (lower case, without the dot) and their language.
const BY_EXTENSION: &[(&str, &str)] = &[
    ("rs", "Rust"),
    ("py", "Python"),
    ("pyi", "Python"),
    ("js", "JavaScript"),
    ("mjs", "JavaScript"),
    ("cjs", "JavaScript"),
    ("jsx", "JavaScript (JSX)"),
    ("ts", "TypeScript"),
    ("mts", "TypeScript"),
    ("tsx", "TypeScript (TSX)"),
    ("go", "Go"),
    ("java", "Java"),
    ("kt", "Kotlin"),
    ("kts", "Kotlin"),
    ("scala", "Scala"),
    ("swift", "Swift"),
    ("c", "C"),
    ("h", "C"),
    ("cc", "C++"),
    ("cpp", "C++"),
    ("cxx", "C++"),
    ("hpp", "C++"),
    ("hh", "C++"),
    ("cs", "C#"),
    ("fs", "F#"),
    ("rb", "Ruby"),
    ("php", "PHP"),
    ("pl", "Perl"),
    ("lua", "Lua"),
    ("r", "R"),
    ("jl", "Julia"),
    ("hs", "Haskell"),
    ("ml", "OCaml"),
    ("ex", "Elixir"),
    ("exs", "Elixir"),
    ("erl", "Erlang"),
    ("clj", "Clojure"),
    ("dart", "Dart"),
    ("zig", "Zig"),
    ("nim", "Nim"),
    ("sh", "Shell"),
    ("bash", "Shell"),
    ("zsh", "Shell"),
    ("fish", "Fish"),
    ("ps1", "PowerShell"),
    ("bat", "Batch"),
    ("sql", "SQL"),
    ("html", "HTML"),
    ("htm", "HTML"),
    ("css", "CSS"),
    ("scss", "SCSS"),
    ("sass", "Sass"),
    ("less", "Less"),
    ("vue", "Vue"),
    ("svelte", "Svelte"),
    ("json", "JSON"),
    ("jsonl", "JSON Lines"),
    ("yaml", "YAML"),
    ("yml", "YAML"),
    ("toml", "TOML"),
    ("xml", "XML"),
    ("ini", "INI"),
    ("cfg", "INI"),
    ("md", "Markdown"),
    ("markdown", "Markdown"),
    ("rst", "reStructuredText"),
    ("tex", "LaTeX"),
    ("txt", "Plain text"),
    ("csv", "CSV"),
    ("tsv", "TSV"),
    ("proto", "Protocol Buffers"),
    ("graphql", "GraphQL"),
    ("tf", "Terraform"),
    ("nix", "Nix"),
    ("diff", "Diff"),
    ("patch", "Diff"),
];

/// The language suggested by `file_name` (the last path component), if any.
pub fn language_of(file_name: &str) -> Option<&'static str> {
    if let Some((_, language)) = BY_NAME.iter().find(|(name, _)| *name == file_name) {
        return Some(language);
    }
    let (stem, extension) = file_name.rsplit_once('.')?;
    if stem.is_empty() {
        // `.bashrc`, `.gitignore`: a hidden file, not an extension.
        return None;
    }
    let extension = extension.to_ascii_lowercase();
    BY_EXTENSION
        .iter()
        .find(|(known, _)| *known == extension)
        .map(|(_, language)| *language)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extensions_name_their_language() {
        assert_eq!(language_of("main.rs"), Some("Rust"));
        assert_eq!(language_of("App.TSX"), Some("TypeScript (TSX)"));
        assert_eq!(language_of("notes.md"), Some("Markdown"));
        assert_eq!(language_of("archive.tar.gz"), None);
    }

    #[test]
    fn some_names_need_no_extension() {
        assert_eq!(language_of("Makefile"), Some("Makefile"));
        assert_eq!(language_of("Dockerfile"), Some("Dockerfile"));
    }

    #[test]
    fn hidden_files_and_bare_names_are_unknown() {
        assert_eq!(language_of(".gitignore"), None);
        assert_eq!(language_of("README"), None);
    }
}
