//! Virtual paths: the one validated form in which every tool and backend names a file.
//!
//! A [`VirtualPath`] is absolute, `/`-separated, has no empty, `.` or `..` component and no
//! trailing slash (except the root `/`). Raw input from an agent becomes a `VirtualPath` at the
//! edge ([`VirtualPath::parse`], CONTRACT §1) and is never re-checked downstream. Mount-prefix
//! arithmetic (strip on the way in, put back on the way out) lives here too, done component by
//! component so that `/mem` never claims `/memory/x`.
//!
//! # Names that could forge an answer (CONTRACT §1, issue 10)
//! A name may hold characters that would let it pass for something else in a text answer: a
//! newline (a fake `grep` hit or paging hint), ANSI escapes, tabs, bidi overrides, zero-width
//! characters. The [`Display`](fmt::Display) of a `VirtualPath` is therefore the *shown* form:
//! every such character is written as `\u{XXXX}` (its code point in upper-case hex, at least
//! four digits; see [`escape_name`]). No valid path contains a backslash, so the form is
//! unambiguous, and [`VirtualPath::parse`] decodes it again: a name shown as `/a\u{000A}b` can be
//! passed back as it is to read, move or delete the file. Keys handed to backends and structured
//! results use [`VirtualPath::as_str`], the raw name, and names read back from a backend go
//! through [`VirtualPath::parse_raw`], which decodes nothing. New names with control characters
//! are refused where the tools create files ([`VirtualPath::control_character`]).

use std::fmt;

use thiserror::Error;

/// Longest accepted path, in bytes (CONTRACT §1).
pub const MAX_PATH_BYTES: usize = 4096;
/// Longest accepted path component, in bytes (CONTRACT §1).
pub const MAX_COMPONENT_BYTES: usize = 255;

/// Names of mountfs's own files start with this in every backend: `.mountfs-tmp-*` on disk
/// (temporary files, journals, records of temporary files in flight), `.mountfs-tmp.*` on
/// shell targets. No path an agent gives may hold a component starting with it (issue 41).
pub const RESERVED_PREFIX: &str = ".mountfs-tmp";

/// Why a raw path was refused. The Display text shows the offending input.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PathError {
    /// The path was empty or only whitespace.
    #[error(
        "Error: Invalid path '': the path is empty. Give an absolute path such as /src/main.rs"
    )]
    Empty,
    /// A `..` component.
    #[error(
        "Error: Invalid path '{0}': '..' components are not allowed. Use an absolute path from / without '..'"
    )]
    ParentComponent(String),
    /// A leading `~`.
    #[error(
        "Error: Invalid path '{0}': '~' (home directory) is not supported. Use an absolute virtual path such as /notes.md"
    )]
    Tilde(String),
    /// A NUL byte.
    #[error("Error: Invalid path '{0}': it contains a NUL byte. Remove it")]
    Nul(String),
    /// A Windows drive, UNC path or backslash.
    #[error(
        "Error: Invalid path '{0}': backslashes, drive letters and UNC paths are not allowed. Use '/' separators, e.g. /dir/file.txt"
    )]
    Windows(String),
    /// A `\u{` escape that is not `\u{` + 1 to 6 hex digits of a valid code point + `}`.
    #[error(
        "Error: Invalid path '{0}': a '\\u{{' escape must be 1 to 6 hex digits naming a character followed by '}}', e.g. \\u{{000A}} for a line feed. Copy the path exactly as an answer showed it"
    )]
    BadEscape(String),
    /// A name to be created holds a control character (C0, DEL or C1).
    #[error(
        "Error: Invalid path '{shown}': new names may not contain control characters, and it has U+{code:04X} ({what}) at character {position} of the path. Choose a name without it"
    )]
    ControlCharacter {
        /// The path, escaped.
        shown: String,
        /// The code point.
        code: u32,
        /// Its common name.
        what: &'static str,
        /// Its 1-based position among the raw path's characters.
        position: usize,
    },
    /// A component starting with [`RESERVED_PREFIX`].
    #[error(
        "Error: Invalid path '{0}': names starting with .mountfs-tmp are reserved for mountfs's own temporary files; choose another name"
    )]
    Reserved(String),
    /// Longer than [`MAX_PATH_BYTES`].
    #[error("Error: Invalid path '{shown}…': it is {len} bytes long; the limit is 4096 bytes")]
    TooLong {
        /// The first characters of the input.
        shown: String,
        /// Its length in bytes.
        len: usize,
    },
    /// A component longer than [`MAX_COMPONENT_BYTES`].
    #[error(
        "Error: Invalid path '{shown}…': a component is {len} bytes long; the limit is 255 bytes"
    )]
    ComponentTooLong {
        /// The first characters of the input.
        shown: String,
        /// The component's length in bytes.
        len: usize,
    },
}

/// Whether a name is one of mountfs's own (starts with [`RESERVED_PREFIX`]).
pub fn is_reserved_name(name: &str) -> bool {
    name.starts_with(RESERVED_PREFIX)
}

/// An absolute, normalised virtual path (see the module doc).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VirtualPath(String);

impl VirtualPath {
    /// The root, `/`.
    pub fn root() -> Self {
        Self("/".to_owned())
    }

    /// Parses a path an agent sent (CONTRACT §1): `\u{XXXX}` escapes, the form answers show
    /// names in, are decoded first, then the text is checked as [`parse_raw`](Self::parse_raw)
    /// does.
    pub fn parse(input: &str) -> Result<Self, PathError> {
        if !input.contains(ESCAPE_START) {
            let path = Self::parse_raw(input)?;
            path.refuse_reserved()?;
            return Ok(path);
        }
        let decoded = unescape(input).ok_or_else(|| PathError::BadEscape(escape_name(input)))?;
        let path = Self::parse_raw(&decoded)?;
        path.refuse_reserved()?;
        Ok(path)
    }

    /// Refuses a path with a component starting with [`RESERVED_PREFIX`], in any place: such
    /// a name is mountfs's own (hidden from listings, swept, read by recovery). Every path an
    /// agent or a client gives passes here ([`VirtualPath::parse`]; resource URIs; `mountfs
    /// cp`'s trees), so no backend ever receives one from a tool.
    pub fn refuse_reserved(&self) -> Result<(), PathError> {
        if self.components().any(is_reserved_name) {
            return Err(PathError::Reserved(escape_name(&self.0)));
        }
        Ok(())
    }

    /// Parses a path as it is, decoding no escape: for keys and names read back from a
    /// backend. Relative paths are taken from `/`, repeated and trailing slashes are folded, `.`
    /// components dropped, and everything unsafe refused.
    pub fn parse_raw(input: &str) -> Result<Self, PathError> {
        if input.trim().is_empty() {
            return Err(PathError::Empty);
        }
        if input.len() > MAX_PATH_BYTES {
            return Err(PathError::TooLong {
                shown: escape_name(&input.chars().take(60).collect::<String>()),
                len: input.len(),
            });
        }
        if input.contains('\0') {
            return Err(PathError::Nul(escape_name(input)));
        }
        if input.starts_with('~') {
            return Err(PathError::Tilde(escape_name(input)));
        }
        let bytes = input.as_bytes();
        let drive = bytes.len() >= 2 && bytes[0].is_ascii_alphabetic() && bytes[1] == b':';
        if input.contains('\\') || drive {
            return Err(PathError::Windows(escape_name(input)));
        }
        let mut normalised = String::with_capacity(input.len() + 1);
        for component in input.split('/') {
            match component {
                "" | "." => continue,
                ".." => return Err(PathError::ParentComponent(escape_name(input))),
                name => {
                    if name.len() > MAX_COMPONENT_BYTES {
                        return Err(PathError::ComponentTooLong {
                            shown: escape_name(&input.chars().take(60).collect::<String>()),
                            len: name.len(),
                        });
                    }
                    normalised.push('/');
                    normalised.push_str(name);
                }
            }
        }
        if normalised.is_empty() {
            normalised.push('/');
        }
        Ok(Self(normalised))
    }

    /// The path as text, e.g. `/src/main.rs`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this is `/`.
    pub fn is_root(&self) -> bool {
        self.0 == "/"
    }

    /// The components, without separators; empty for the root.
    pub fn components(&self) -> impl Iterator<Item = &str> {
        self.0.split('/').filter(|c| !c.is_empty())
    }

    /// The last component; `None` for the root.
    pub fn file_name(&self) -> Option<&str> {
        if self.is_root() {
            None
        } else {
            self.0.rsplit('/').next()
        }
    }

    /// The parent directory; `None` for the root.
    pub fn parent(&self) -> Option<VirtualPath> {
        if self.is_root() {
            return None;
        }
        match self.0.rfind('/') {
            Some(0) | None => Some(Self::root()),
            Some(i) => Some(Self(self.0[..i].to_owned())),
        }
    }

    /// Appends one already-safe component (a name from a listing). Names with `/` or that
    /// are `.`/`..` are refused, so a backend cannot smuggle a traversal through a listing.
    pub fn join(&self, name: &str) -> Result<VirtualPath, PathError> {
        if name.is_empty() || name == "." || name == ".." || name.contains('/') {
            return Err(PathError::ParentComponent(escape_name(&format!(
                "{}/{}",
                self.0, name
            ))));
        }
        let parent = if self.is_root() { "" } else { self.0.as_str() };
        let len = parent.len() + 1 + name.len();
        // The usual name: `self` is normalised and `name` one plain component, so the joined
        // text is already normalised and needs no second pass. A `ls` joins every entry's name;
        // formatting and re-parsing each was two thirds of a disk listing's instructions.
        if len <= MAX_PATH_BYTES
            && name.len() <= MAX_COMPONENT_BYTES
            && !name.bytes().any(|b| b == b'\0' || b == b'\\')
        {
            let mut joined = String::with_capacity(len);
            joined.push_str(parent);
            joined.push('/');
            joined.push_str(name);
            return Ok(Self(joined));
        }
        // Anything else is refused by the parser, with its error.
        Self::parse_raw(&format!("{parent}/{name}"))
    }

    /// Appends a relative path (`a/b`) taken as it is (a name from a listing), validating it.
    pub fn join_relative(&self, relative: &str) -> Result<VirtualPath, PathError> {
        Self::parse_raw(&format!("{}/{}", self.0, relative))
    }

    /// The first control character (C0, DEL or C1) of the path, refused in names the tools
    /// create: `Err` names it and its position, `Ok` when there is none.
    pub fn control_character(&self) -> Result<(), PathError> {
        match self.0.chars().enumerate().find(|(_, c)| c.is_control()) {
            None => Ok(()),
            Some((index, c)) => Err(PathError::ControlCharacter {
                shown: escape_name(&self.0),
                code: u32::from(c),
                what: control_name(c),
                position: index + 1,
            }),
        }
    }

    /// Whether `self` is `dir` or lies beneath it, compared component-wise.
    pub fn starts_with(&self, dir: &VirtualPath) -> bool {
        if dir.is_root() {
            return true;
        }
        self.0 == dir.0
            || (self.0.starts_with(&dir.0) && self.0.as_bytes().get(dir.0.len()) == Some(&b'/'))
    }

    /// `self` relative to `dir` as an absolute path in `dir`'s coordinates
    /// (`/a/b/c` relative to `/a` is `/b/c`; `/a` relative to `/a` is `/`).
    pub fn strip_prefix(&self, dir: &VirtualPath) -> Option<VirtualPath> {
        if !self.starts_with(dir) {
            return None;
        }
        if dir.is_root() {
            return Some(self.clone());
        }
        let rest = &self.0[dir.0.len()..];
        if rest.is_empty() {
            Some(Self::root())
        } else {
            Some(Self(rest.to_owned()))
        }
    }

    /// `self` relative to `dir` without a leading slash (`/a/b/c` under `/a` is `b/c`),
    /// the form glob patterns with a `/` are matched against. Empty when equal.
    pub fn relative_to(&self, dir: &VirtualPath) -> Option<&str> {
        if !self.starts_with(dir) {
            return None;
        }
        if dir.is_root() {
            return Some(&self.0[1..]);
        }
        Some(self.0[dir.0.len()..].trim_start_matches('/'))
    }

    /// The inverse of [`strip_prefix`](Self::strip_prefix): puts a mount prefix back.
    pub fn under(&self, prefix: &VirtualPath) -> VirtualPath {
        if prefix.is_root() {
            self.clone()
        } else if self.is_root() {
            prefix.clone()
        } else {
            Self(format!("{}{}", prefix.0, self.0))
        }
    }
}

/// The shown form of a path: the raw text with every [`is_hidden_or_control`] character
/// escaped (see the module doc). Never use it as a key.
impl fmt::Display for VirtualPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_escaped(f, &self.0)
    }
}

/// How every escape starts; no valid raw path holds a backslash.
const ESCAPE_START: &str = "\\u{";

/// Whether `c` is shown escaped: control characters (C0, DEL, C1), and the characters that are
/// invisible or reorder text (bidi embeddings, overrides, isolates and marks, zero-width
/// characters, the line and paragraph separators, the byte-order mark, Unicode tags), which
/// could make one name look like another or like part of an answer.
pub fn is_hidden_or_control(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{00AD}'
                | '\u{061C}'
                | '\u{180E}'
                | '\u{200B}'..='\u{200F}'
                | '\u{2028}'..='\u{202E}'
                | '\u{2060}'..='\u{206F}'
                | '\u{FEFF}'
                | '\u{FFF9}'..='\u{FFFB}'
                | '\u{E0000}'..='\u{E007F}'
        )
}

fn write_escaped(out: &mut impl fmt::Write, text: &str) -> fmt::Result {
    // Printable ASCII, most names, needs no escape; the scan below costs ~20 instructions a
    // character, a third of a small `ls` (issue 15, callgrind).
    if text.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return out.write_str(text);
    }
    let mut rest = text;
    while let Some(at) = rest.find(is_hidden_or_control) {
        out.write_str(&rest[..at])?;
        let Some(c) = rest[at..].chars().next() else {
            break;
        };
        write!(out, "\\u{{{:04X}}}", u32::from(c))?;
        rest = &rest[at + c.len_utf8()..];
    }
    out.write_str(rest)
}

/// `text` with every [`is_hidden_or_control`] character written as
/// `\u{XXXX}`: the form every answer shows a name in.
pub fn escape_name(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    // Writing to a String cannot fail.
    let _ = write_escaped(&mut out, text);
    out
}

/// Decodes every `\u{XXXX}` of `input`; `None` when one is malformed. Other backslashes are
/// left for the path checks to refuse.
fn unescape(input: &str) -> Option<String> {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(at) = rest.find(ESCAPE_START) {
        out.push_str(&rest[..at]);
        let after = &rest[at + ESCAPE_START.len()..];
        let end = after.find('}')?;
        let digits = &after[..end];
        if digits.is_empty() || digits.len() > 6 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        out.push(char::from_u32(u32::from_str_radix(digits, 16).ok()?)?);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Some(out)
}

/// A short name for a control character, for the error that refuses it.
fn control_name(c: char) -> &'static str {
    match c {
        '\t' => "tab",
        '\n' => "line feed",
        '\r' => "carriage return",
        '\u{1B}' => "escape",
        '\u{7F}' => "delete",
        '\u{0}'..='\u{1F}' => "a C0 control character",
        _ => "a C1 control character",
    }
}

impl fmt::Debug for VirtualPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> VirtualPath {
        VirtualPath::parse(s).unwrap()
    }

    #[test]
    fn relative_repeated_and_trailing_slashes_are_folded() {
        assert_eq!(p("src/a.rs").as_str(), "/src/a.rs");
        assert_eq!(p("//src///a.rs/").as_str(), "/src/a.rs");
        assert_eq!(p("/./src/./a.rs").as_str(), "/src/a.rs");
        assert_eq!(p("/").as_str(), "/");
        assert_eq!(p("///").as_str(), "/");
    }

    /// Why `VirtualPath::parse` refuses `input`.
    fn refused(input: &str) -> PathError {
        VirtualPath::parse(input).unwrap_err()
    }

    #[test]
    fn unsafe_inputs_are_refused_with_the_input_shown() {
        for bad in ["/a/../b", "..", "../x", "a/.."] {
            let err = VirtualPath::parse(bad).unwrap_err();
            assert!(matches!(err, PathError::ParentComponent(_)), "{bad}");
            assert!(err.to_string().contains(bad), "{err}");
        }
        assert!(matches!(refused("~/x"), PathError::Tilde(_)));
        assert!(matches!(refused("/a\0b"), PathError::Nul(_)));
        assert!(matches!(refused("C:\\x"), PathError::Windows(_)));
        assert!(matches!(refused("c:/x"), PathError::Windows(_)));
        assert!(matches!(refused("\\\\server\\x"), PathError::Windows(_)));
        assert!(matches!(refused("/a\\b"), PathError::Windows(_)));
        assert!(matches!(VirtualPath::parse(""), Err(PathError::Empty)));
        let long = format!("/{}", "a".repeat(4100));
        assert!(matches!(
            VirtualPath::parse(&long),
            Err(PathError::TooLong { .. })
        ));
        let comp = format!("/{}", "a".repeat(256));
        assert!(matches!(
            VirtualPath::parse(&comp),
            Err(PathError::ComponentTooLong { .. })
        ));
        assert!(VirtualPath::parse(&format!("/{}", "a".repeat(255))).is_ok());
    }

    #[test]
    fn dots_inside_names_are_fine() {
        assert_eq!(p("/foo..bar.txt").as_str(), "/foo..bar.txt");
        assert_eq!(p("/.hidden").as_str(), "/.hidden");
        assert_eq!(p("/...").as_str(), "/...");
    }

    #[test]
    fn prefix_arithmetic_is_component_wise() {
        let mem = p("/mem");
        assert!(p("/mem").starts_with(&mem));
        assert!(p("/mem/a").starts_with(&mem));
        assert!(!p("/memory/x").starts_with(&mem));
        assert_eq!(p("/mem/a/b").strip_prefix(&mem).unwrap().as_str(), "/a/b");
        assert_eq!(p("/mem").strip_prefix(&mem).unwrap().as_str(), "/");
        assert_eq!(p("/memory").strip_prefix(&mem), None);
        assert_eq!(p("/a/b").under(&mem).as_str(), "/mem/a/b");
        assert_eq!(VirtualPath::root().under(&mem).as_str(), "/mem");
        assert_eq!(p("/mem/a/b").relative_to(&mem), Some("a/b"));
        assert_eq!(p("/a/b").relative_to(&VirtualPath::root()), Some("a/b"));
    }

    #[test]
    fn parent_join_and_file_name() {
        assert_eq!(p("/a/b").parent().unwrap().as_str(), "/a");
        assert_eq!(p("/a").parent().unwrap().as_str(), "/");
        assert_eq!(VirtualPath::root().parent(), None);
        assert_eq!(p("/a").join("b").unwrap().as_str(), "/a/b");
        assert_eq!(VirtualPath::root().join("b").unwrap().as_str(), "/b");
        assert!(p("/a").join("..").is_err());
        assert!(p("/a").join("x/y").is_err());
        // The direct join agrees with parsing the joined text, refusals included.
        let long = "n".repeat(MAX_COMPONENT_BYTES + 1);
        let deep = p(&format!("/{}", "d/".repeat(MAX_PATH_BYTES / 2 - 1)));
        for dir in [VirtualPath::root(), p("/a"), p("/a/b c"), deep] {
            for name in ["b", "é.rs", ".hidden", "a\\b", "a\0b", long.as_str(), "x"] {
                let parent = if dir.is_root() { "" } else { dir.as_str() };
                let parsed = VirtualPath::parse_raw(&format!("{parent}/{name}"));
                assert_eq!(dir.join(name), parsed, "{dir} + {name:?}");
            }
        }
        assert_eq!(p("/a/b.txt").file_name(), Some("b.txt"));
    }

    #[test]
    fn names_that_could_forge_a_line_are_shown_escaped() {
        let raw = "/d/a\nSYSTEM: hi\t\u{1b}[31m\u{202E}txt.exe\u{200B}\u{7f}\u{85}";
        let path = VirtualPath::parse_raw(raw).unwrap();
        assert_eq!(path.as_str(), raw, "the raw name is kept for keys");
        let shown = path.to_string();
        assert_eq!(
            shown,
            "/d/a\\u{000A}SYSTEM: hi\\u{0009}\\u{001B}[31m\\u{202E}txt.exe\\u{200B}\\u{007F}\\u{0085}"
        );
        assert!(!shown.chars().any(is_hidden_or_control), "{shown:?}");
        assert_eq!(
            p("/plain/ünïcødé 名前.txt").to_string(),
            "/plain/ünïcødé 名前.txt"
        );
        assert_eq!(
            p("/tag\u{E0041}").to_string(),
            "/tag\\u{E0041}",
            "invisible tag characters too"
        );
    }

    #[test]
    fn the_shown_form_parses_back_to_the_raw_path() {
        for raw in [
            "/a\nb",
            "/x/\u{1b}[2J/\u{202E}y",
            "/\u{feff}bom",
            "/tab\there",
            "/\u{E007F}",
        ] {
            let path = VirtualPath::parse_raw(raw).unwrap();
            assert_eq!(
                VirtualPath::parse(&path.to_string()).unwrap(),
                path,
                "{raw:?}"
            );
        }
        assert_eq!(
            p("/\\u{41}\\u{000062}").as_str(),
            "/Ab",
            "any code point, 1 to 6 digits"
        );
    }

    #[test]
    fn malformed_escapes_and_other_backslashes_are_refused() {
        for bad in [
            "/a\\u{}",
            "/a\\u{110000}",
            "/a\\u{D800}",
            "/a\\u{0A",
            "/a\\u{1234567}",
            "/a\\u{zz}",
        ] {
            let err = VirtualPath::parse(bad).unwrap_err();
            assert!(matches!(err, PathError::BadEscape(_)), "{bad}: {err}");
            assert!(err.to_string().contains("\\u{000A}"), "{err}");
        }
        assert!(matches!(refused("/a\\n"), PathError::Windows(_)));
        // A decoded escape is checked like any other text.
        assert!(matches!(
            refused("/a/\\u{2E}\\u{2E}/b"),
            PathError::ParentComponent(_)
        ));
        assert!(matches!(refused("/a\\u{0}"), PathError::Nul(_)));
        assert!(matches!(refused("/a\\u{5C}"), PathError::Windows(_)));
        // Raw input is never decoded.
        assert!(VirtualPath::parse_raw("/a\\u{41}").is_err());
    }

    #[test]
    fn control_characters_are_named_with_their_position() {
        assert!(
            p("/fine/\u{202E}bidi is shown escaped, not refused")
                .control_character()
                .is_ok()
        );
        let err = VirtualPath::parse_raw("/ab\ncd")
            .unwrap()
            .control_character()
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Error: Invalid path '/ab\\u{000A}cd': new names may not contain control characters, and it has U+000A (line feed) at character 4 of the path. Choose a name without it"
        );
        for (c, what) in [
            ('\u{7f}', "delete"),
            ('\u{9b}', "a C1 control character"),
            ('\u{1}', "a C0 control character"),
        ] {
            let path = VirtualPath::parse_raw(&format!("/x{c}")).unwrap();
            let err = path.control_character().unwrap_err().to_string();
            assert!(err.contains(what) && err.contains("character 3"), "{err}");
        }
    }

    #[test]
    fn errors_show_the_input_escaped() {
        let err = VirtualPath::parse("/a\n/../b").unwrap_err().to_string();
        assert!(
            err.contains("/a\\u{000A}/../b") && !err.contains('\n'),
            "{err}"
        );
    }
}
