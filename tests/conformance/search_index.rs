//! The stores' search index (issue 28): a grep answered from the index gives exactly the answer
//! of a full scan, on each engine, for generated patterns (literals of any length, ASCII and
//! not; classes, alternations, repetitions, anchors, case-insensitive and literal-free
//! patterns; with and without a `glob` filter and a path prefix) over a 2,000-file store that
//! was also renamed, moved, edited and pruned after it was written, and then had half its
//! items changed again behind the index's back (SQLite: pending, not folded; PostgreSQL: the
//! pass held off, some items behind). The answers compared are the `grep` tool's, exactly as
//! returned: every output mode, paged with `offset`/`head_limit`. A store made by a release
//! without the index gains it in the background, answers the same meanwhile, and resumes a
//! build that was stopped half-way — also when the server building it is killed (SIGKILL).
//! A page of the first files stops an indexed search (and a scan) early.
//! On PostgreSQL a write leaves its item behind for a background pass: searches made before
//! the pass ran answer as a scan does, the pass catches up while writes go on, and the items
//! behind stay bounded.
//!
//! `MOUNTFS_PROPTEST_CASES` sets the generated searches per engine (default 150); a failing
//! one is shrunk and shown with its `grep` arguments and both answers.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mountfs::ground::path::VirtualPath;
use mountfs::ground::search::{GlobMatcher, GrepCollect, GrepPattern, GrepQuery, SearchControl};
use mountfs::storage::backend::{Backend, GrepFile, StoreBackend};
use mountfs::storage::store::{
    BatchOp, ListQuery, Namespace, PostgresStore, PutCondition, SqliteStore, Store, plan,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

const FILES: usize = 2_000;

/// Words the files are made of, with case and Unicode variants the index must not lose
/// (the Kelvin sign and long s match `k` and `s` ignoring case; `%`, `_`, `\` are LIKE's).
const WORDS: &[&str] = &[
    "unsafe",
    "impl",
    "fn",
    "main",
    "HashMap",
    "hashmap",
    "Kelvin",
    "\u{212A}elvin",
    "KELVIN",
    "ſtraße",
    "straße",
    "STRASSE",
    "Σίσυφος",
    "σίσυφος",
    "café",
    "CAFÉ",
    "foo_bar",
    "foo%bar",
    "50%",
    "a\\b",
    "\"quoted\"",
    "error",
    "Error",
    "ERROR",
    "abc",
    "abd",
    "xyz",
    "λx",
    "日本語",
    "🦀crab",
    "struct",
    "Vec<u8>",
    "self",
    "return",
    "match",
    "{}",
];
const SEPARATORS: &[&str] = &[
    " ", "  ", "\t", "::", "(", ")", ", ", ".", " \t ", "\u{a0}", "\u{3000}", "\u{2028}",
];

/// A small deterministic generator (the corpus must be the same on every run).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, below: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 33) % below as u64) as usize
    }
}

fn line(rng: &mut Lcg) -> String {
    let mut out = String::new();
    for i in 0..1 + rng.next(8) {
        if i > 0 {
            out.push_str(SEPARATORS[rng.next(SEPARATORS.len())]);
        }
        out.push_str(WORDS[rng.next(WORDS.len())]);
    }
    out
}

/// The files: mostly small UTF-8 texts (some CRLF), and every kind the index cannot hold or
/// that a search reports whatever it holds: Latin-1 and UTF-16 texts, UTF-8 with a NUL past
/// the binary sniff, a file with one very long line.
fn corpus() -> Vec<(String, Vec<u8>)> {
    let mut rng = Lcg(28);
    let mut files = Vec::with_capacity(FILES);
    for i in 0..FILES {
        let ext = ["rs", "md", "txt"][i % 3];
        let key = format!("/d{}/s{}/f{i}.{ext}", i % 10, (i / 10) % 5);
        let eol = if i % 7 == 0 { "\r\n" } else { "\n" };
        let text: String = (0..1 + rng.next(12))
            .map(|_| line(&mut rng) + eol)
            .collect();
        let content = match i {
            i if i % 97 == 0 => {
                // Latin-1: not UTF-8, decoded by the legacy guess and searched as text.
                let mut bytes: Vec<u8> = b"caf\xe9 unsafe impl Kelvin\n".to_vec();
                bytes.extend(text.chars().filter(char::is_ascii).map(|c| c as u8));
                bytes
            }
            i if i % 101 == 0 => {
                let mut bytes = vec![0xff, 0xfe];
                for unit in format!("unsafe impl HashMap\n{text}").encode_utf16() {
                    bytes.extend(unit.to_le_bytes());
                }
                bytes
            }
            i if i % 89 == 0 => {
                let mut bytes = text.clone().into_bytes();
                bytes.resize(9_000, b'x');
                bytes.extend(b"\n\0 after the sniff: unsafe impl struct\n");
                bytes
            }
            i if i % 53 == 0 => format!("{text}{}\nunsafe\n", "y".repeat(5_000)).into_bytes(),
            _ => text.into_bytes(),
        };
        files.push((key, content));
    }
    files
}

/// Writes the corpus, then changes it through every write path the index must follow.
async fn fill(store: &dyn Store, ns: &Namespace) {
    let ops: Vec<BatchOp> = corpus()
        .into_iter()
        .map(|(key, content)| BatchOp::Put {
            key,
            content,
            condition: PutCondition::Overwrite,
        })
        .collect();
    store.apply_batch(ns, ops).await.unwrap();
    let mut rng = Lcg(2_800);
    for i in (0..FILES).step_by(13) {
        let key = format!(
            "/d{}/s{}/f{i}.{}",
            i % 10,
            (i / 10) % 5,
            ["rs", "md", "txt"][i % 3]
        );
        match i % 4 {
            0 => {
                let text = format!("{}\nedited {}\n", line(&mut rng), line(&mut rng));
                store
                    .put(ns, &key, text.as_bytes(), PutCondition::Overwrite)
                    .await
                    .unwrap();
            }
            1 => {
                store.delete(ns, &key, None).await.unwrap();
            }
            2 => {
                let to = format!("/moved/{i}.rs");
                store.rename(ns, &key, &to, None, None).await.unwrap();
            }
            _ => {
                // Binary over text and back: the index drops and regains the item.
                store
                    .put(ns, &key, &[0xff, 0x00, 0x01], PutCondition::Overwrite)
                    .await
                    .unwrap();
                let text = format!("back {}\n", line(&mut rng));
                store
                    .put(ns, &key, text.as_bytes(), PutCondition::Overwrite)
                    .await
                    .unwrap();
            }
        }
    }
    store
        .rename_prefix(ns, "/d9/", "/renamed/", "/renamed")
        .await
        .unwrap();
    store.delete_prefix(ns, "/d8/s4/").await.unwrap();
    store
        .apply_batch(
            ns,
            vec![BatchOp::Put {
                key: "/batch/new.md".into(),
                content: b"unsafe impl from a batch\n".to_vec(),
                condition: PutCondition::CreateOnly,
            }],
        )
        .await
        .unwrap();
}

/// Changes about half the items of `ns` after the index took them all in, one write each, in
/// an order spread over the key space: rewritten (text, CRLF, Latin-1, binary, empty),
/// deleted, moved (under `/late/`), and new items there. The callers keep the index from
/// following (SQLite: no folder; PostgreSQL: the pass held off), so a search meets items it
/// holds beside items it holds an older content of, or none. Returns how many items changed.
async fn churn(store: &dyn Store, ns: &Namespace) -> usize {
    let keys: Vec<String> = store
        .list(ns, &ListQuery::first("/", 100_000))
        .await
        .unwrap()
        .into_iter()
        .map(|meta| meta.key)
        .collect();
    let mut rng = Lcg(2_801);
    let mut picked: Vec<(usize, String)> = keys
        .into_iter()
        .enumerate()
        .filter(|_| rng.next(2) == 0)
        .collect();
    for i in (1..picked.len()).rev() {
        picked.swap(i, rng.next(i + 1));
    }
    for (n, key) in &picked {
        let text = |rng: &mut Lcg, eol: &str| {
            format!("late {}{eol}{}{eol}", line(rng), line(rng)).into_bytes()
        };
        let content = match rng.next(10) {
            0..=3 => text(&mut rng, "\n"),
            4 => text(&mut rng, "\r\n"),
            5 => {
                store.delete(ns, key, None).await.unwrap();
                continue;
            }
            6 => {
                let to = format!("/late/m{n}.{}", ["rs", "md", "txt"][n % 3]);
                store.rename(ns, key, &to, None, None).await.unwrap();
                continue;
            }
            7 => vec![0xff, 0x00, 0x01],
            8 => b"caf\xe9 late unsafe Kelvin\n".to_vec(),
            _ => Vec::new(),
        };
        store
            .put(ns, key, &content, PutCondition::Overwrite)
            .await
            .unwrap();
    }
    for n in 0..40 {
        let content = format!("new {n}: {}\n", line(&mut rng));
        store
            .put(
                ns,
                &format!("/late/new{n}.md"),
                content.as_bytes(),
                PutCondition::CreateOnly,
            )
            .await
            .unwrap();
    }
    picked.len() + 40
}

/// One generated search.
#[derive(Debug, Clone)]
pub(crate) struct Search {
    pub(crate) pattern: String,
    pub(crate) literal: bool,
    pub(crate) case_insensitive: bool,
    pub(crate) glob: Option<&'static str>,
    pub(crate) dir: &'static str,
    pub(crate) max_line_bytes: Option<u64>,
}

fn word() -> impl Strategy<Value = String> {
    (0..WORDS.len(), 0usize..3, 0usize..3).prop_map(|(w, from, cut)| {
        let chars: Vec<char> = WORDS[w].chars().collect();
        let from = from.min(chars.len().saturating_sub(1));
        let to = chars.len().saturating_sub(cut).max(from + 1);
        chars[from..to].iter().collect()
    })
}

/// Literals of one or two characters (the planner finds no trigram in them: such a search
/// reads every file), ASCII and not, some of them folding to others ignoring case.
const SHORT: &[&str] = &[
    "a", "e", "K", "\u{212A}", "ß", "ſ", "σ", "Σ", "日", "🦀", "é", "É", "fn", "{}", "%", "_",
    "\\", "λx", "本語", "50", "ab", "xy", "\"q",
];

fn short() -> impl Strategy<Value = String> {
    proptest::sample::select(SHORT).prop_map(str::to_owned)
}

fn escaped(text: &str) -> String {
    regex_syntax::escape(text)
}

fn atom() -> impl Strategy<Value = String> {
    prop_oneof![
        // Literals, whole words or pieces of them, and very short ones.
        6 => word().prop_map(|w| escaped(&w)),
        2 => short().prop_map(|s| escaped(&s)),
        // Classes.
        1 => Just("[a-e]".to_owned()),
        1 => Just("[Hh]ash".to_owned()),
        1 => Just("[^a-z ]".to_owned()),
        1 => Just("[ſsS]tra".to_owned()),
        1 => Just(r"\p{Greek}+".to_owned()),
        1 => Just("[[:upper:]]{2}".to_owned()),
        1 => Just("[0-9]+%".to_owned()),
        // Nothing the index can use.
        1 => Just(r"\d".to_owned()),
        1 => Just(r"\s+".to_owned()),
        // Whitespace, which the index squeezes to one space (store/plan.rs).
        1 => Just(r"\s".to_owned()),
        1 => Just(r"\s*".to_owned()),
        1 => Just("[ \t]+".to_owned()),
        1 => Just(" {2}".to_owned()),
        1 => Just(r"[\s,]+".to_owned()),
        1 => Just(".".to_owned()),
        1 => Just(r"\w+".to_owned()),
        1 => Just(".*".to_owned()),
        1 => Just(r"\b".to_owned()),
        // Alternations (the planner's sets of required literals): of two to six words, of
        // words and a short one (then nothing is required), with an empty branch (likewise),
        // with anchors inside.
        3 => (word(), word()).prop_map(|(a, b)| format!("({}|{})", escaped(&a), escaped(&b))),
        2 => (word(), word(), word()).prop_map(|(a, b, c)| format!(
            "(?:{}|{}|{})",
            escaped(&a),
            escaped(&b),
            escaped(&c)
        )),
        1 => proptest::collection::vec(word(), 4..7).prop_map(|words| {
            let branches: Vec<String> = words.iter().map(|w| escaped(w)).collect();
            format!("({})", branches.join("|"))
        }),
        1 => (word(), word(), short()).prop_map(|(a, b, c)| format!(
            "(?:{}|{}|{})",
            escaped(&a),
            escaped(&b),
            escaped(&c)
        )),
        1 => word().prop_map(|a| format!("({}|)", escaped(&a))),
        1 => (word(), word()).prop_map(|(a, b)| format!("(^{}|{}$)", escaped(&a), escaped(&b))),
        // Repetitions.
        2 => (word(), proptest::sample::select(&["+", "*", "?", "{2}", "{1,3}", "{0,2}"][..]))
            .prop_map(|(w, r)| format!("(?:{}){r}", escaped(&w))),
        1 => short().prop_map(|s| format!("{}+", escaped(&s))),
        // Case: for the rest of the pattern, for a group, and case-sensitive within an
        // insensitive search.
        1 => Just("(?i)kelvin".to_owned()),
        1 => word().prop_map(|w| format!("(?i){}", escaped(&w))),
        1 => word().prop_map(|w| format!("(?i:{})", escaped(&w))),
        1 => word().prop_map(|w| format!("(?-i:{})", escaped(&w))),
    ]
}

fn search() -> impl Strategy<Value = Search> {
    let regex = (
        proptest::option::of(Just("^")),
        proptest::collection::vec(atom(), 1..4),
        proptest::option::of(Just("$")),
    )
        .prop_map(|(start, atoms, end)| {
            format!(
                "{}{}{}",
                start.unwrap_or(""),
                atoms.concat(),
                end.unwrap_or("")
            )
        });
    let pattern = prop_oneof![
        6 => regex.prop_map(|p| (p, false)),
        2 => word().prop_map(|w| (w, true)),
        1 => short().prop_map(|s| (s, true)),
        2 => (word(), word()).prop_map(|(a, b)| (format!("{a} {b}"), true)),
    ];
    (
        pattern,
        any::<bool>(),
        proptest::option::of(prop_oneof![
            Just("*.rs"),
            Just("**/*.md"),
            Just("d1/**"),
            Just("*.txt"),
            Just("f1*"),
            Just("**/s2/*"),
            Just("{*.md,*.txt}"),
        ]),
        prop_oneof![
            8 => Just("/"),
            2 => Just("/d3"),
            1 => Just("/d1/s2"),
            1 => Just("/moved"),
            1 => Just("/renamed"),
            1 => Just("/late"),
        ],
        proptest::option::of(Just(4_096u64)),
    )
        .prop_map(
            |((pattern, literal), case_insensitive, glob, dir, max_line_bytes)| Search {
                pattern,
                literal,
                case_insensitive,
                glob,
                dir,
                max_line_bytes,
            },
        )
}

/// Searches every run asks besides the generated ones (pattern, case-insensitive).
const PLANNER_EDGES: &[(&str, bool)] = &[
    ("(?:\"quoted\"|main|Kelvin)", false),
    ("(?:unsafe|ſtraße|a)", false),
    ("(HashMap|)", true),
    ("(?:fn|impl|struct|enum|trait)", false),
    ("(?:HashMap|unsafe impl|Kelvin|KELVIN)$", false),
    ("^(?:use|mod|pub) ", false),
    ("(?:^fn|impl$|σ|日)", false),
    ("(?i)(?:straße|STRASSE|kelvin)", false),
    ("(?:ab|main|HashMap)", true),
    ("unsafe(?:\\s+impl|\\s*\\{|)", false),
    ("unsafe\\s+impl", false),
    ("(?-u)unsafe\\s+impl", true),
    ("unsafe {2}impl", false),
    ("fn[ \\t]+main", true),
    ("main\\s*HashMap", false),
    ("impl\\x{a0}main", false),
    ("café\\x{3000}+CAFÉ", true),
    ("\\s+impl\\s+", false),
    ("Kelvin\\s\\s?error", false),
];

/// How a generated search is asked for and paged through, as the `grep` tool takes it.
#[derive(Debug, Clone)]
struct Page {
    mode: &'static str,
    head_limit: Option<usize>,
    offset: usize,
    context: usize,
}

fn page() -> impl Strategy<Value = Page> {
    (
        proptest::sample::select(&["files_with_matches", "count", "content"][..]),
        proptest::option::of(prop_oneof![Just(1usize), 2usize..8, Just(70usize)]),
        prop_oneof![4 => Just(0usize), 2 => 1usize..6, 1 => Just(40usize), 1 => Just(900usize)],
        0usize..3,
    )
        .prop_map(|(mode, head_limit, offset, context)| Page {
            mode,
            head_limit,
            offset,
            context,
        })
}

/// The arguments of the `grep` tool call asking for `search`, paged as `page` says.
fn grep_arguments(search: &Search, page: &Page) -> serde_json::Value {
    let mut args = serde_json::json!({
        "pattern": search.pattern,
        "path": search.dir,
        "output_mode": page.mode,
        "literal": search.literal,
        "case_insensitive": search.case_insensitive,
        "offset": page.offset,
    });
    if let Some(glob) = search.glob {
        args["glob"] = glob.into();
    }
    if let Some(limit) = page.head_limit {
        args["head_limit"] = limit.into();
    }
    if page.mode == "content" {
        args["context"] = page.context.into();
    }
    args
}

/// A `grep` tool answer as the agent gets it: its text and structured content, or the error.
type Answer = Result<(String, Option<serde_json::Value>), String>;

async fn grep_answer(
    session: &mountfs::state::session::Session,
    args: &serde_json::Value,
) -> Answer {
    crate::support::backends::call("grep", args.clone(), session)
        .await
        .map(|reply| (reply.text, reply.structured))
        .map_err(|error| error.to_string())
}

/// An answer for a failure message: whole, or its first 2,000 characters (a page of content
/// may hold 80,000).
fn clipped(answer: &Answer) -> String {
    let whole = format!("{answer:?}");
    match whole.char_indices().nth(2_000) {
        Some((at, _)) => format!("{} … ({} characters)", &whole[..at], whole.chars().count()),
        None => whole,
    }
}

/// Where two answers first differ, with a few lines around it from each (whole answers may be
/// the 80,000 characters of a full page).
fn first_difference(with: &Answer, without: &Answer) -> String {
    let text = |answer: &Answer| match answer {
        Ok((text, structured)) => format!(
            "{text}\n--- structured:\n{}",
            serde_json::to_string_pretty(structured).unwrap_or_default()
        ),
        Err(error) => format!("error: {error}"),
    };
    let (a, b) = (text(with), text(without));
    let (a, b): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
    let at = a
        .iter()
        .zip(&b)
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(b.len()));
    let around = |lines: &[&str]| {
        lines[at.saturating_sub(3)..(at + 4).min(lines.len())]
            .iter()
            .map(|line| format!("    | {line}\n"))
            .collect::<String>()
    };
    format!(
        "first difference at line {} (of {} with the index, {} without):\n  with the index:\n{}  without the index:\n{}",
        at + 1,
        a.len(),
        b.len(),
        around(&a),
        around(&b)
    )
}

pub(crate) fn query(search: &Search) -> Option<GrepQuery> {
    let mut pattern =
        GrepPattern::new(&search.pattern, search.literal, search.case_insensitive).ok()?;
    if let Some(bytes) = search.max_line_bytes {
        pattern = pattern.with_max_line_bytes(bytes);
    }
    Some(GrepQuery {
        dir: VirtualPath::parse(search.dir).unwrap(),
        pattern: Arc::new(pattern),
        file_filter: search.glob.map(|g| GlobMatcher::new(g).unwrap()),
        collect: GrepCollect::lines(1),
        control: SearchControl::default(),
    })
}

pub(crate) async fn sorted(backend: &StoreBackend, query: &GrepQuery) -> Vec<GrepFile> {
    let mut found = backend.grep(query).await.unwrap();
    found.sort_by(|a, b| a.path.cmp(&b.path));
    found
}

/// Files a grep looked at (searched with the matcher).
async fn files_read(backend: &StoreBackend, query: &GrepQuery) -> u64 {
    let query = GrepQuery {
        control: SearchControl::default(),
        ..query.clone()
    };
    backend.grep(&query).await.unwrap();
    query.control.counts().0
}

/// The cases per engine: `MOUNTFS_PROPTEST_CASES`, else 150 (the suite's 10 minutes on 2 cores;
/// 300 and more in a deep run, docs/development.md).
fn cases() -> u32 {
    std::env::var("MOUNTFS_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(150)
}

/// Runs the generated searches through the `grep` tool over `store` with and without the
/// index, and requires the same answer, exactly as the agent gets it: text and structured
/// content (paths in order, counts, lines, the page `offset`/`head_limit` cut, the total and
/// where the next page starts, the files skipped), or the same error. `behind`: items of `ns`
/// the index does not hold yet (SQLite: pending, PostgreSQL: behind), candidates of every
/// search. The store is shared by every case (it is written once).
fn same_answers(
    runtime: &tokio::runtime::Runtime,
    store: Arc<dyn Store>,
    ns: Namespace,
    behind: u64,
) {
    let sessions = |limits: mountfs::ground::limits::Limits| {
        let options = mountfs::state::session::WriteOptions {
            limits,
            ..Default::default()
        };
        let over = |backend: StoreBackend| {
            crate::support::backends::session_over(Arc::new(backend), options.clone())
        };
        (
            over(StoreBackend::new(store.clone(), ns.clone())),
            over(StoreBackend::new(store.clone(), ns.clone()).without_index()),
        )
    };
    let default_lines = sessions(mountfs::ground::limits::Limits::default());
    let short_lines = sessions(mountfs::ground::limits::Limits {
        grep_max_line_bytes: 4_096,
        ..Default::default()
    });
    let cases = cases();
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        // Each step searches the store twice: a failure shrinks in a minute or two.
        max_shrink_iters: 512,
        ..Config::default()
    });
    // Patterns the planner is most sensitive to (alternations of three or more branches,
    // short, empty or non-ASCII branches, anchors inside branches), asked on every run next to
    // the random ones: a planner that drops a branch or a literal fails here every time.
    for (pattern, case_insensitive) in PLANNER_EDGES {
        for mode in ["files_with_matches", "content"] {
            let search = Search {
                pattern: (*pattern).to_owned(),
                literal: false,
                case_insensitive: *case_insensitive,
                glob: None,
                dir: "/",
                max_line_bytes: None,
            };
            let page = Page {
                mode,
                head_limit: None,
                offset: 0,
                context: 0,
            };
            let args = grep_arguments(&search, &page);
            let (indexed, scanning) = &default_lines;
            let (with, without) = runtime.block_on(async {
                (
                    grep_answer(indexed, &args).await,
                    grep_answer(scanning, &args).await,
                )
            });
            assert!(
                with == without,
                "grep {} answers differently with the index and without: {}\n\
                 with the index: {}\nwithout the index: {}",
                args,
                first_difference(&with, &without),
                clipped(&with),
                clipped(&without)
            );
        }
    }
    let planned = std::sync::atomic::AtomicU32::new(0);
    let answered = std::sync::atomic::AtomicU32::new(0);
    runner
        .run(&(search(), page()), |(search, page)| {
            let (indexed, scanning) = match search.max_line_bytes {
                Some(4_096) => &short_lines,
                _ => &default_lines,
            };
            if let Ok(pattern) =
                GrepPattern::new(&search.pattern, search.literal, search.case_insensitive)
                && plan::plan(&pattern).is_some()
            {
                planned.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            let args = grep_arguments(&search, &page);
            let (with, without) = runtime.block_on(async {
                (
                    grep_answer(indexed, &args).await,
                    grep_answer(scanning, &args).await,
                )
            });
            if matches!(&without, Ok((text, _)) if !text.starts_with("No matches")) {
                answered.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            prop_assert!(
                with == without,
                "grep {} answers differently with the index and without: {}\n\
                 with the index: {}\nwithout the index: {}",
                args,
                first_difference(&with, &without),
                clipped(&with),
                clipped(&without)
            );
            Ok(())
        })
        .unwrap();
    let (planned, answered) = (planned.into_inner(), answered.into_inner());
    assert!(
        planned * 3 >= cases,
        "only {planned} of {cases} patterns used the index: the property tests too little"
    );
    assert!(
        answered * 4 >= cases,
        "only {answered} of {cases} searches found anything: the property tests too little"
    );
    let indexed = StoreBackend::new(store.clone(), ns.clone());
    let scanning = StoreBackend::new(store, ns).without_index();
    // The index is really used: a rare literal reads few files beyond those it does not hold.
    let rare = query(&Search {
        pattern: "unsafe impl".into(),
        literal: true,
        case_insensitive: false,
        glob: None,
        dir: "/",
        max_line_bytes: None,
    })
    .unwrap();
    let (with, without) = runtime.block_on(async {
        (
            files_read(&indexed, &rare).await,
            files_read(&scanning, &rare).await,
        )
    });
    assert!(
        with < behind + without.saturating_sub(behind) / 2,
        "indexed grep read {with} files ({behind} not in the index), a scan {without}"
    );
    for backend in [&indexed, &scanning] {
        runtime.block_on(first_files_stop_the_search(backend, behind));
    }
}

/// A page of the first files (`head_limit` in `files_with_matches` and `count`) stops the
/// search once it has them: a bounded number of files is confirmed, whatever the matches, and
/// they are the full answer's first, in path order; the search says more match. A page that
/// reaches past the last match is the full answer. `behind`: items behind the index, which are
/// candidates whether they match or not (each may be confirmed too).
async fn first_files_stop_the_search(backend: &StoreBackend, behind: u64) {
    for collect in [GrepCollect::Files, GrepCollect::Count] {
        let all = GrepQuery {
            dir: VirtualPath::root(),
            pattern: Arc::new(GrepPattern::new("impl", true, false).unwrap()),
            file_filter: None,
            collect,
            control: SearchControl::default(),
        };
        let full = sorted(backend, &all).await;
        assert!(full.len() > 500, "{} files hold impl", full.len());
        for wanted in [1, 6, 70] {
            let control = SearchControl::default().with_first_files(wanted);
            let page = GrepQuery {
                control: control.clone(),
                ..all.clone()
            };
            let found = sorted(backend, &page).await;
            assert!(control.more_files(), "{wanted}");
            assert!(found.len() >= wanted, "{wanted}: {}", found.len());
            assert_eq!(found[..wanted], full[..wanted], "{wanted}");
            // What a stop may confirm: the candidates up to the wanted-th match (about
            // FILES / matches per match, in path order), the rest of its group and the one
            // group read ahead while it is matched (groups of at least 8 files), and the 64
            // files a scan's page may hold past them. Independent of how many match in all;
            // how much of the read-ahead group ran when the stop came depends on the moment.
            let confirmed = control.counts().0;
            let needed = (wanted * FILES).div_ceil(full.len());
            // Items behind the index are candidates whether they match or not.
            let bound = needed + 2 * wanted.max(8) + 64 + behind as usize;
            assert!(
                confirmed <= bound as u64,
                "{wanted} files wanted, {confirmed} confirmed (at most {bound})"
            );
        }
        let control = SearchControl::default().with_first_files(full.len() + 1);
        let page = GrepQuery {
            control: control.clone(),
            ..all.clone()
        };
        assert_eq!(sorted(backend, &page).await, full);
        assert!(!control.more_files());
    }
}

/// Items listed in `mountfs_text_pending` that still exist: the ones a search reads whatever
/// the FTS5 index says.
fn pending_items(file: &std::path::Path) -> i64 {
    rusqlite::Connection::open(file)
        .unwrap()
        .query_row(
            "SELECT count(*) FROM mountfs_text_pending AS p JOIN mountfs_items AS i
                 ON i.rowid = p.item",
            [],
            |row| row.get(0),
        )
        .unwrap()
}

/// Waits until the folder has folded every pending item (and forgotten the deleted ones).
async fn wait_folded(file: &std::path::Path) {
    let started = Instant::now();
    loop {
        let left: i64 = rusqlite::Connection::open(file)
            .unwrap()
            .query_row("SELECT count(*) FROM mountfs_text_pending", [], |row| {
                row.get(0)
            })
            .unwrap();
        if left == 0 {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the folder left {left} items pending for 60 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// SQLite: the 2,000-file store written, changed and folded into the FTS5 index, then about
/// half its items changed again with no folder running (the store serving the searches was
/// opened on a runtime that is gone, which took its folder with it): the index holds the rest,
/// some with the trigrams of an older content.
#[test]
fn sqlite_index_answers_as_a_scan_does() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("s.db");
    let ns = Namespace::new("default").unwrap();
    runtime.block_on(async {
        let store = SqliteStore::open(&file).await.unwrap();
        assert!(store.index_ready().await.unwrap(), "a new store is indexed");
        fill(&store, &ns).await;
        wait_folded(&file).await;
    });
    // A store whose folder never runs: its tasks are spawned on this runtime, dropped with it.
    let store = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(SqliteStore::open(&file))
        .unwrap();
    let (items, changed) = runtime.block_on(async {
        let items = store
            .list(&ns, &ListQuery::first("/", 100_000))
            .await
            .unwrap()
            .len();
        (items, churn(&store, &ns).await)
    });
    let pending = pending_items(&file);
    assert!(
        (items as i64 * 2 / 5..=items as i64 * 3 / 5).contains(&pending),
        "{pending} of {items} items pending ({changed} changed): not the half wanted"
    );
    same_answers(
        &runtime,
        Arc::new(store.clone()),
        ns.clone(),
        pending as u64,
    );
    assert_eq!(pending_items(&file), pending, "a folder ran meanwhile");
    drop(store);
    // The next store folds what was left pending, exactly.
    runtime.block_on(async {
        let store = SqliteStore::open(&file).await.unwrap();
        wait_folded(&file).await;
        drop(store);
    });
    assert!(index_is_exact(&file));
}

/// PostgreSQL: the 2,000-file store written, changed and indexed by the pass, then about
/// half its items changed again while the pass is held off: the first
/// [`MAX_BEHIND`](mountfs::storage::store::postgres::MAX_BEHIND) writes leave their items behind
/// (trigrams `NULL`, read by every search), spread over the key space; the later ones index
/// their item themselves, so what every search reads in full stays bounded. Once released,
/// the pass catches up and every item's trigrams are those of its content.
#[test]
fn postgres_index_answers_as_a_scan_does() {
    let Some(url) = crate::support::postgres_url("postgres search index") else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let ns = Namespace::new("default").unwrap();
    let (db, paused, client, store, left_behind) = runtime.block_on(async {
        let db = OwnDatabase::new(&url, "mountfs_index").await;
        let store = PostgresStore::connect(&db.url).await.unwrap();
        wait_ready_postgres(&store).await;
        fill(&store, &ns).await;
        let client = db.client().await;
        wait_caught_up(&client).await;
        let paused = PassPaused::new(&db).await;
        let changed = churn(&store, &ns).await as i64;
        let behind = behind(&client).await;
        let bound = mountfs::storage::store::postgres::MAX_BEHIND;
        assert!(changed > bound * 2, "{changed} items changed");
        assert!(
            (bound / 2..=bound + 16).contains(&behind),
            "{behind} items behind, the bound is {bound}"
        );
        let null: i64 = client
            .query_one(
                "SELECT count(*) FROM mountfs_items WHERE text_keys IS NULL AND encoding = 'utf-8'
                     AND (text_keys_version IS DISTINCT FROM version) IS TRUE",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(null, behind, "the items behind have no trigrams");
        (db, paused, client, store, behind)
    });
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    same_answers(&runtime, shared, ns, left_behind as u64);
    runtime.block_on(async {
        assert_eq!(
            behind(&client).await,
            left_behind,
            "the pass ran while paused"
        );
        paused.release().await;
        wait_caught_up(&client).await;
        trigrams_are_exact(&client).await;
        drop(store);
        db.drop().await;
    });
}

/// The schema of the release before the index (SQLite `user_version` 1), as it wrote it.
const SCHEMA_V1: &str = "
    CREATE TABLE mountfs_items (
        namespace   TEXT    NOT NULL,
        key         TEXT    NOT NULL,
        encoding    TEXT    NOT NULL,
        size        INTEGER NOT NULL,
        created_at  INTEGER NOT NULL,
        modified_at INTEGER NOT NULL,
        version     INTEGER NOT NULL,
        content     BLOB    NOT NULL,
        PRIMARY KEY (namespace, key)
    );
    CREATE TABLE mountfs_counters (
        name  TEXT PRIMARY KEY,
        value INTEGER NOT NULL
    );
    INSERT INTO mountfs_counters (name, value) VALUES ('version', 0);
    PRAGMA user_version = 1;
";

/// Writes `count` UTF-8 items the old way, straight into an old-schema file.
fn old_store(file: &std::path::Path, count: usize) {
    let mut conn = rusqlite::Connection::open(file).unwrap();
    conn.execute_batch(SCHEMA_V1).unwrap();
    let tx = conn.transaction().unwrap();
    let mut rng = Lcg(7);
    for i in 0..count {
        let text: String = (0..1 + rng.next(6))
            .map(|_| line(&mut rng) + "\n")
            .collect();
        let version = i64::try_from(i + 1).unwrap();
        tx.execute(
            "INSERT INTO mountfs_items VALUES ('default', ?1, 'utf-8', ?2, 0, 0, ?3, ?4)",
            rusqlite::params![
                format!("/n/{}/{i}.md", i % 17),
                i64::try_from(text.len()).unwrap(),
                version,
                text.into_bytes()
            ],
        )
        .unwrap();
    }
    tx.execute(
        "UPDATE mountfs_counters SET value = ?1",
        [i64::try_from(count).unwrap()],
    )
    .unwrap();
    tx.commit().unwrap();
}

/// Whether the FTS5 index holds exactly the squeezed trigrams and the joins of the items, once
/// every write is folded into it (waits for that): FTS5's own integrity check of both tables
/// (for a contentless table, of the index's inner consistency), then, for every term of the
/// items, the items each table finds against those tables built afresh from the items find.
fn index_is_exact(file: &std::path::Path) -> bool {
    let conn = rusqlite::Connection::open(file).unwrap();
    conn.busy_timeout(Duration::from_secs(10)).unwrap();
    let started = Instant::now();
    while conn
        .query_row("SELECT count(*) FROM mountfs_text_pending", [], |row| {
            row.get::<_, i64>(0)
        })
        .unwrap()
        > 0
    {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "writes never folded"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let consistent = ["mountfs_items_squeezed", "mountfs_items_joins"]
        .iter()
        .all(|table| {
            conn.execute(
                &format!("INSERT INTO {table} ({table}, rank) VALUES ('integrity-check', 1)"),
                [],
            )
            .is_ok()
        });
    conn.execute_batch(
        "CREATE VIRTUAL TABLE temp.fresh USING fts5(content, tokenize = 'trigram', detail = 'none');
         CREATE VIRTUAL TABLE temp.fresh_joins USING fts5(content, tokenize = 'ascii', detail = 'none');
         CREATE VIRTUAL TABLE temp.fresh_terms USING fts5vocab(temp, fresh, 'row');
         CREATE VIRTUAL TABLE temp.fresh_join_terms USING fts5vocab(temp, fresh_joins, 'row');",
    )
    .unwrap();
    let items: Vec<(i64, Vec<u8>)> = conn
        .prepare(
            "SELECT rowid, content FROM mountfs_items WHERE encoding = 'utf-8' AND size <= 1048576",
        )
        .unwrap()
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    for (rowid, content) in items {
        let squeezed = plan::squeeze(std::str::from_utf8(&content).unwrap()).into_owned();
        let words = mountfs::storage::store::sqlite::join_words(&squeezed).join(" ");
        conn.execute(
            "INSERT INTO temp.fresh (rowid, content) VALUES (?1, ?2)",
            rusqlite::params![rowid, squeezed],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO temp.fresh_joins (rowid, content) VALUES (?1, ?2)",
            rusqlite::params![rowid, words],
        )
        .unwrap();
    }
    let terms = |vocab: &str| -> Vec<String> {
        conn.prepare(&format!("SELECT term FROM temp.{vocab}"))
            .unwrap()
            .query_map([], |row| row.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    let answer = |table: &str, term: &str| -> (i64, i64) {
        let quoted = format!("\"{}\"", term.replace('"', "\"\""));
        conn.query_row(
            &format!("SELECT count(*), total(rowid) FROM {table} WHERE {table} MATCH ?1"),
            [quoted],
            |row| Ok((row.get(0)?, row.get::<_, f64>(1)? as i64)),
        )
        .unwrap()
    };
    let (text_terms, join_terms) = (terms("fresh_terms"), terms("fresh_join_terms"));
    let same = text_terms
        .iter()
        .all(|term| answer("mountfs_items_squeezed", term) == answer("fresh", term))
        && join_terms
            .iter()
            .all(|term| answer("mountfs_items_joins", term) == answer("fresh_joins", term));
    assert!(!text_terms.is_empty());
    consistent && same
}

async fn wait_ready(store: &SqliteStore) {
    let started = Instant::now();
    while !store.index_ready().await.unwrap() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "index not built in 60 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn literal(text: &str) -> GrepQuery {
    query(&Search {
        pattern: text.into(),
        literal: true,
        case_insensitive: true,
        glob: None,
        dir: "/",
        max_line_bytes: None,
    })
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_made_before_the_index_gains_it_in_the_background_and_answers_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("old.db");
    old_store(&file, 6_000);
    let ns = Namespace::new("default").unwrap();
    let store = SqliteStore::open(&file).await.unwrap();
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let indexed = StoreBackend::new(shared.clone(), ns.clone());
    let scanning = StoreBackend::new(shared.clone(), ns.clone()).without_index();
    let q = literal("HashMap");
    // Served while the build runs (it scans until the index is ready), writes included.
    let expected = sorted(&scanning, &q).await;
    assert!(!expected.is_empty());
    assert_eq!(sorted(&indexed, &q).await, expected);
    shared
        .put(
            &ns,
            "/n/new.md",
            b"HashMap written during the build\n",
            PutCondition::CreateOnly,
        )
        .await
        .unwrap();
    shared.delete(&ns, "/n/3/3.md", None).await.unwrap();
    wait_ready(&store).await;
    let expected = sorted(&scanning, &q).await;
    assert_eq!(sorted(&indexed, &q).await, expected);
    assert!(files_read(&indexed, &literal("unsafe impl")).await < 6_000 / 2);
    assert!(index_is_exact(&file));
    // A server of an earlier release still running on the file (it checked the version when
    // it opened it) fails on the old table's name rather than fold the text as it is where
    // the squeezed text belongs.
    let conn = rusqlite::Connection::open(&file).unwrap();
    let earlier_fold = conn.execute(
        "INSERT INTO mountfs_items_text (rowid, content)
         SELECT rowid, CAST(content AS TEXT) FROM mountfs_items LIMIT 1",
        [],
    );
    assert!(
        earlier_fold
            .unwrap_err()
            .to_string()
            .contains("no such table")
    );
}

/// `unsafe\s+impl` over files that mostly hold `unsafe` and `impl` apart (with every trigram
/// of `unsafe impl`), a few where whitespace of every kind joins them: the index squeezes the
/// whitespace and keeps the join `fe im`, so only the files where the words meet are read, and
/// the answer is a scan's. Writes `store` and waits until `caught_up` says the index holds all.
async fn only_files_where_the_words_meet_are_read<F, Fut>(shared: Arc<dyn Store>, caught_up: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let ns = Namespace::new("default").unwrap();
    let joined = [
        "unsafe impl Send for A {}",
        "    unsafe\t\timpl Sync for B {}",
        "unsafe\u{a0}\u{3000} impl C",
        "x unsafe   impl<T> D for T {}",
    ];
    for i in 0..600 {
        let text = match i % 150 {
            0..=3 => format!("// {i}\n{}\n", joined[i % 150]),
            // The words apart, or on two lines: candidates a trigram index cannot tell apart.
            4 => format!("// {i}\nunsafe\nimpl X {{}}\n"),
            _ => format!("// {i}\nunsafe fn f() {{}}\ntype impl X {{}}\n"),
        };
        shared
            .put(
                &ns,
                &format!("/w/{i}.rs"),
                text.as_bytes(),
                PutCondition::Overwrite,
            )
            .await
            .unwrap();
    }
    caught_up().await;
    let indexed = StoreBackend::new(shared.clone(), ns.clone());
    let scanning = StoreBackend::new(shared.clone(), ns.clone()).without_index();
    for (pattern, ci, matching) in [
        (r"unsafe\s+impl", false, 16),
        (r"UNSAFE\s+IMPL", true, 16),
        (r"unsafe\s*impl", false, 16),
        (r"(?-u)unsafe[ \t]+impl", false, 12),
    ] {
        let q = query(&Search {
            pattern: pattern.into(),
            literal: false,
            case_insensitive: ci,
            glob: None,
            dir: "/",
            max_line_bytes: None,
        })
        .unwrap();
        let expected = sorted(&scanning, &q).await;
        assert_eq!(expected.len(), matching, "{pattern}: the scan's answer");
        assert_eq!(sorted(&indexed, &q).await, expected, "{pattern}");
        let read = files_read(&indexed, &q).await;
        // The 16 where whitespace joins the words, and the 4 with them on two lines
        // (squeezed, they meet); without the joins, all 600.
        assert!(read <= 20, "{pattern}: {read} files read of 600");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_reads_only_the_files_where_whitespace_joins_the_words() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("join.db");
    let store = SqliteStore::open(&file).await.unwrap();
    wait_ready(&store).await;
    only_files_where_the_words_meet_are_read(Arc::new(store.clone()), || async {
        assert!(index_is_exact(&file));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_reads_only_the_files_where_whitespace_joins_the_words() {
    let Some(url) = crate::support::postgres_url("postgres search index") else {
        return;
    };
    let db = OwnDatabase::new(&url, "mountfs_join").await;
    let store = PostgresStore::connect(&db.url).await.unwrap();
    wait_ready_postgres(&store).await;
    let client = db.client().await;
    only_files_where_the_words_meet_are_read(Arc::new(store.clone()), || async {
        wait_caught_up(&client).await;
        trigrams_are_exact(&client).await;
    })
    .await;
    drop(store);
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_stopped_half_way_resumes_at_the_next_open() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("old.db");
    old_store(&file, 3_000);
    {
        let store = SqliteStore::open(&file).await.unwrap();
        wait_ready(&store).await;
    }
    // What a server killed after half the batches leaves: the items past the recorded point
    // are not in the index (each batch commits its items and the point together).
    {
        let conn = rusqlite::Connection::open(&file).unwrap();
        conn.execute_batch(
            "BEGIN;
             DELETE FROM mountfs_items_squeezed
                 WHERE rowid IN (SELECT rowid FROM mountfs_items WHERE rowid > 1500);
             DELETE FROM mountfs_items_joins
                 WHERE rowid IN (SELECT rowid FROM mountfs_items WHERE rowid > 1500);
             UPDATE mountfs_text_index SET built_upto = 1500;
             COMMIT;",
        )
        .unwrap();
    }
    let store = SqliteStore::open(&file).await.unwrap();
    let ns = Namespace::new("default").unwrap();
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    // A write to an item not yet indexed, while the build is on its way.
    shared
        .put(
            &ns,
            "/n/7/2999.md",
            b"HashMap rewritten\n",
            PutCondition::Overwrite,
        )
        .await
        .unwrap();
    wait_ready(&store).await;
    assert!(index_is_exact(&file));
    let indexed = StoreBackend::new(shared.clone(), ns.clone());
    let scanning = StoreBackend::new(shared, ns).without_index();
    for text in ["HashMap", "unsafe impl", "Kelvin"] {
        let q = literal(text);
        assert_eq!(
            sorted(&indexed, &q).await,
            sorted(&scanning, &q).await,
            "{text}"
        );
    }
}

/// How far the background build of `file` has come (`built_upto`), read by another connection.
fn built_upto(file: &std::path::Path) -> Option<i64> {
    let conn = rusqlite::Connection::open(file).ok()?;
    conn.busy_timeout(Duration::from_secs(5)).ok()?;
    conn.query_row("SELECT built_upto FROM mountfs_text_index", [], |row| {
        row.get(0)
    })
    .ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_during_the_build_loses_nothing_and_the_next_start_resumes_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("old.db");
    const ITEMS: usize = 30_000;
    old_store(&file, ITEMS);
    let spec = format!("/=store:sqlite:{}", file.display());
    let mut server =
        crate::support::mountfs_command(dir.path(), &["--audit", "off", "--mount", &spec], &[])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
    // Kill it (SIGKILL: no destructor, no rollback but SQLite's own) once the build has
    // committed some batches and not all of them.
    let started = Instant::now();
    let killed_at = loop {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the server's build never got half-way"
        );
        match built_upto(&file) {
            Some(upto) if upto > 0 && upto < i64::try_from(ITEMS / 2).unwrap() => {
                server.kill().unwrap();
                server.wait().unwrap();
                break upto;
            }
            Some(i64::MAX) => panic!("the build finished before it could be killed"),
            _ => std::thread::sleep(Duration::from_millis(5)),
        }
    };
    // What the killed build committed is there, nothing else half-done.
    let after_kill = built_upto(&file).unwrap();
    assert!(
        after_kill >= killed_at && after_kill < i64::MAX,
        "{after_kill}"
    );
    let store = SqliteStore::open(&file).await.unwrap();
    wait_ready(&store).await;
    assert!(index_is_exact(&file));
    let ns = Namespace::new("default").unwrap();
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let all = shared
        .list(
            &ns,
            &mountfs::storage::store::ListQuery::first("/", ITEMS + 1),
        )
        .await
        .unwrap();
    assert_eq!(all.len(), ITEMS, "no item lost");
    let indexed = StoreBackend::new(shared.clone(), ns.clone());
    let scanning = StoreBackend::new(shared, ns).without_index();
    for text in ["HashMap", "unsafe impl", "Kelvin", "café"] {
        let q = literal(text);
        let expected = sorted(&scanning, &q).await;
        assert!(!expected.is_empty(), "{text}");
        assert_eq!(sorted(&indexed, &q).await, expected, "{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_writes_are_found_before_they_are_folded_into_the_trigram_table() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("new.db");
    let store = SqliteStore::open(&file).await.unwrap();
    wait_ready(&store).await;
    let ns = Namespace::new("default").unwrap();
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    for i in 0..40 {
        let content = format!("a HashMap of {i}\n");
        shared
            .put(
                &ns,
                &format!("/a/{i}.md"),
                content.as_bytes(),
                PutCondition::Overwrite,
            )
            .await
            .unwrap();
    }
    // The folder waits for the writes to pause: these items are still only listed.
    let pending: i64 = rusqlite::Connection::open(&file)
        .unwrap()
        .query_row("SELECT count(*) FROM mountfs_text_pending", [], |row| {
            row.get(0)
        })
        .unwrap();
    assert!(pending > 0, "the writes were folded before the search");
    let indexed = StoreBackend::new(shared.clone(), ns.clone());
    let scanning = StoreBackend::new(shared.clone(), ns.clone()).without_index();
    let q = literal("HashMap");
    let expected = sorted(&scanning, &q).await;
    assert_eq!(expected.len(), 40);
    assert_eq!(sorted(&indexed, &q).await, expected);
    // Folded: the trigram table alone answers, and exactly.
    assert!(index_is_exact(&file));
    shared.delete(&ns, "/a/3.md", None).await.unwrap();
    assert!(index_is_exact(&file));
    assert_eq!(sorted(&indexed, &q).await, sorted(&scanning, &q).await);
}

/// An item over 1 MiB is not tokenized into the trigram table (that would hold its whole text
/// in memory), and is a candidate of every search instead: still found, exactly as a scan.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_items_over_a_mebibyte_are_searched_without_being_indexed() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("large.db");
    let store = SqliteStore::open(&file).await.unwrap();
    wait_ready(&store).await;
    let ns = Namespace::new("default").unwrap();
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let mut large = "filler line of text\n".repeat(60_000); // 1.2 MB
    large.push_str("the zebraquokka lives here\n");
    shared
        .put(&ns, "/big.txt", large.as_bytes(), PutCondition::Overwrite)
        .await
        .unwrap();
    shared
        .put(
            &ns,
            "/small.txt",
            b"a zebraquokka too\n",
            PutCondition::Overwrite,
        )
        .await
        .unwrap();
    assert!(index_is_exact(&file));
    let conn = rusqlite::Connection::open(&file).unwrap();
    let indexed_rows: Vec<i64> = conn
        .prepare(
            "SELECT rowid FROM mountfs_items_squeezed WHERE mountfs_items_squeezed MATCH '\"uok\"'",
        )
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        indexed_rows.len(),
        1,
        "only the small item is in the trigram table"
    );
    let indexed = StoreBackend::new(shared.clone(), ns.clone());
    let scanning = StoreBackend::new(shared, ns).without_index();
    let q = literal("zebraquokka");
    let expected = sorted(&scanning, &q).await;
    assert_eq!(expected.len(), 2);
    assert_eq!(sorted(&indexed, &q).await, expected);
}

/// Writes committed by another process (here a plain connection: nothing wakes this store's
/// folder) are folded by its poll, which looks only when the file changed; an idle store's poll
/// finds the file unchanged and does nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_writes_by_another_process_are_folded_by_the_poll() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("shared.db");
    let store = SqliteStore::open(&file).await.unwrap();
    wait_ready(&store).await;
    let ns = Namespace::new("default").unwrap();
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    shared
        .put(&ns, "/seed.md", b"a HashMap\n", PutCondition::Overwrite)
        .await
        .unwrap();
    let pending = |file: &std::path::Path| -> i64 {
        rusqlite::Connection::open(file)
            .unwrap()
            .query_row("SELECT count(*) FROM mountfs_text_pending", [], |row| {
                row.get(0)
            })
            .unwrap()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while pending(&file) > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "own write never folded"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // Idle: a few polls pass and the file is left exactly as it was.
    let stamp = |file: &std::path::Path| {
        let mut wal = file.as_os_str().to_owned();
        wal.push("-wal");
        let meta = |p: &std::path::Path| {
            std::fs::metadata(p)
                .map(|m| (m.len(), m.modified().unwrap()))
                .ok()
        };
        (meta(file), meta(std::path::Path::new(&wal)))
    };
    let idle = stamp(&file);
    tokio::time::sleep(std::time::Duration::from_millis(4500)).await;
    assert_eq!(
        stamp(&file),
        idle,
        "an idle store's folder wrote to its file"
    );
    // Another process writes through the schema's triggers, which list the item as pending.
    {
        let other = rusqlite::Connection::open(&file).unwrap();
        other
            .execute(
                "UPDATE mountfs_items SET content = CAST('a BTreeMap now' AS BLOB),
                     size = 14, version = version + 1000
                 WHERE key = '/seed.md'",
                [],
            )
            .unwrap();
    }
    assert!(
        pending(&file) > 0,
        "the other process's write is not listed"
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while pending(&file) > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "another process's write was never folded by the poll"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(index_is_exact(&file));
}

/// A bulk load outpaces the folder (it gives way to writers and pauses between batches): past
/// 1,024 pending items (`PENDING_BOUND`) a write folds its own item in its transaction, so the
/// backlog every search reads, and the folder's catching up after the load, stay bounded.
/// The load here is another process's (nothing wakes this store's folder, and its poll looks
/// every 2 s): this store's next writes find 4,000 items pending and fold their own. (With 1,100
/// the folder's poll, folding 256 a batch, could bring the backlog under the bound between the
/// two writes on a loaded machine, and the second write rightly left its item pending.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_write_past_the_pending_bound_folds_its_own_item() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bulk.db");
    let store = SqliteStore::open(&file).await.unwrap();
    wait_ready(&store).await;
    let ns = Namespace::new("default").unwrap();
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let own_pending = |file: &std::path::Path, keys: &[&str]| -> Vec<String> {
        let conn = rusqlite::Connection::open(file).unwrap();
        keys.iter()
            .filter(|key| {
                conn.query_row(
                    "SELECT count(*) FROM mountfs_text_pending AS p
                     JOIN mountfs_items AS i ON i.rowid = p.item WHERE i.key = ?1",
                    [key],
                    |row| row.get::<_, i64>(0),
                )
                .unwrap()
                    > 0
            })
            .map(|key| (*key).to_owned())
            .collect()
    };
    // Below the bound a write only lists its item.
    shared
        .put(&ns, "/first.md", b"a HashMap\n", PutCondition::Overwrite)
        .await
        .unwrap();
    assert_eq!(own_pending(&file, &["/first.md"]), ["/first.md"]);
    {
        let mut other = rusqlite::Connection::open(&file).unwrap();
        other.busy_timeout(Duration::from_secs(10)).unwrap();
        let tx = other.transaction().unwrap();
        for i in 0..4000 {
            tx.execute(
                "INSERT INTO mountfs_items
                     (namespace, key, encoding, size, created_at, modified_at, version, content)
                 VALUES ('default', ?1, 'utf-8', 12, 0, 0, ?2, CAST('a BTreeMap\n' AS BLOB))",
                rusqlite::params![format!("/bulk/{i:04}.md"), 1_000_000 + i],
            )
            .unwrap();
        }
        tx.commit().unwrap();
    }
    shared
        .put(
            &ns,
            "/past.md",
            b"a HashMap past\n",
            PutCondition::Overwrite,
        )
        .await
        .unwrap();
    shared
        .put(
            &ns,
            "/first.md",
            b"a HashMap edited\n",
            PutCondition::Overwrite,
        )
        .await
        .unwrap();
    assert_eq!(
        own_pending(&file, &["/past.md", "/first.md"]),
        Vec::<String>::new(),
        "writes past the bound left their items to the folder"
    );
    let indexed = StoreBackend::new(shared.clone(), ns.clone());
    let scanning = StoreBackend::new(shared, ns).without_index();
    for text in ["HashMap", "HashMap edited", "BTreeMap"] {
        let q = literal(text);
        assert_eq!(
            sorted(&indexed, &q).await,
            sorted(&scanning, &q).await,
            "{text}"
        );
    }
    assert!(index_is_exact(&file));
}

/// A PostgreSQL database of the test's own (the test changes the table's shape, which the
/// other tests share in theirs), dropped at the end.
pub(crate) struct OwnDatabase {
    admin: String,
    name: String,
    pub(crate) url: String,
}

impl OwnDatabase {
    pub(crate) async fn new(url: &str, prefix: &str) -> Self {
        let name = crate::support::unique(prefix).replace('-', "_");
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap();
        let (base, options) = url.split_once('?').map_or((url, ""), |(b, o)| (b, o));
        let (server, _) = base.rsplit_once('/').unwrap();
        let own = if options.is_empty() {
            format!("{server}/{name}")
        } else {
            format!("{server}/{name}?{options}")
        };
        Self {
            admin: url.to_owned(),
            name,
            url: own,
        }
    }

    async fn client(&self) -> tokio_postgres::Client {
        let (client, connection) = tokio_postgres::connect(&self.url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        client
    }

    pub(crate) async fn drop(self) {
        let (client, connection) = tokio_postgres::connect(&self.admin, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        client
            .batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ))
            .await
            .unwrap();
    }
}

async fn wait_ready_postgres(store: &PostgresStore) {
    let started = Instant::now();
    while !store.index_ready().await.unwrap() {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "index not built in 120 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Items whose trigrams are not those of their current version.
async fn behind(client: &tokio_postgres::Client) -> i64 {
    client
        .query_one(
            "SELECT count(*) FROM mountfs_items WHERE text_keys_version IS DISTINCT FROM version",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

/// Writes `count` UTF-8 items as the release before the index did: without trigrams.
async fn write_old_way(client: &tokio_postgres::Client, count: usize) {
    let mut rng = Lcg(7);
    for i in 0..count {
        let text: String = (0..1 + rng.next(6))
            .map(|_| line(&mut rng) + "\n")
            .collect();
        let size = i64::try_from(text.len()).unwrap();
        client
            .execute(
                "INSERT INTO mountfs_items
                     (namespace, key, encoding, size, created_at, modified_at, version, content)
                 VALUES ('default', $1, 'utf-8', $2, 0, 0, nextval('mountfs_versions'), $3)",
                &[&format!("/n/{}/{i}.md", i % 17), &size, &text.into_bytes()],
            )
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_store_made_before_the_index_gains_it_in_the_background_and_answers_the_same() {
    let Some(url) = crate::support::postgres_url("postgres search index") else {
        return;
    };
    let db = OwnDatabase::new(&url, "mountfs_upgrade").await;
    // The table as the release before the index made it: no trigram columns, no index.
    {
        let store = PostgresStore::connect(&db.url).await.unwrap();
        wait_ready_postgres(&store).await;
    }
    let client = db.client().await;
    client
        .batch_execute(
            "DROP INDEX mountfs_items_text_keys, mountfs_items_text_keys_behind,
                 mountfs_items_not_utf8, mountfs_items_size;
             DROP STATISTICS mountfs_items_text_keys_behind_stats;
             ALTER TABLE mountfs_items DROP COLUMN text_keys, DROP COLUMN text_keys_version;
             ALTER TABLE mountfs_items ALTER COLUMN content SET COMPRESSION pglz;",
        )
        .await
        .unwrap();
    write_old_way(&client, 3_000).await;

    let store = PostgresStore::connect(&db.url).await.unwrap();
    let ns = Namespace::new("default").unwrap();
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let indexed = StoreBackend::new(shared.clone(), ns.clone());
    let scanning = StoreBackend::new(shared.clone(), ns.clone()).without_index();
    // Contents written from now on are compressed with lz4 (this server has it).
    let compression: String = client
        .query_one(
            "SELECT attcompression::text FROM pg_attribute
             WHERE attrelid = 'mountfs_items'::regclass AND attname = 'content'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(compression, "l");
    let q = literal("HashMap");
    // Served while the build runs, writes included.
    assert_eq!(sorted(&indexed, &q).await, sorted(&scanning, &q).await);
    shared
        .put(
            &ns,
            "/n/new.md",
            b"HashMap written during the build\n",
            PutCondition::CreateOnly,
        )
        .await
        .unwrap();
    shared.delete(&ns, "/n/3/3.md", None).await.unwrap();
    wait_ready_postgres(&store).await;
    // The write made during the build is indexed by the pass once the index is ready.
    wait_caught_up(&client).await;
    // A server of the older release rewrites an item: its trigrams fall behind, and the item
    // is still found.
    client
        .execute(
            "UPDATE mountfs_items SET content = 'written by an older server: Kelvinator\n',
                 version = nextval('mountfs_versions')
             WHERE namespace = 'default' AND key = '/n/5/5.md'",
            &[],
        )
        .await
        .unwrap();
    for text in ["HashMap", "unsafe impl", "Kelvinator"] {
        let q = literal(text);
        let expected = sorted(&scanning, &q).await;
        assert_eq!(sorted(&indexed, &q).await, expected, "{text}");
    }
    assert_eq!(sorted(&indexed, &literal("Kelvinator")).await.len(), 1);
    assert!(files_read(&indexed, &literal("unsafe impl")).await < 3_000 / 2);
    // The running server's poll, or the next start, computes what the older server left
    // behind.
    let restarted = PostgresStore::connect(&db.url).await.unwrap();
    wait_caught_up(&client).await;
    drop((indexed, scanning, shared, store, restarted));
    db.drop().await;
}

/// The table's statistics: (rows as the planner counts them, `ANALYZE`s run on it).
async fn table_statistics(client: &tokio_postgres::Client) -> (f64, i64) {
    let row = client
        .query_one(
            "SELECT c.reltuples::float8, s.analyze_count + s.autoanalyze_count
             FROM pg_class c JOIN pg_stat_user_tables s ON s.relid = c.oid
             WHERE c.oid = 'mountfs_items'::regclass",
            &[],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

/// Issue 45: a store filled through its writes (autovacuum off) keeps the planner's view of
/// its table current: the server analyses the table once a tenth of its rows changed, so the
/// candidates query of a search right after the fill is planned on the rows that are there
/// (the trigram index), not on statistics taken when the table was nearly empty (which
/// scanned the primary key and filtered every row: 257 ms against 11 ms).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_store_filled_through_its_writes_keeps_its_statistics_current() {
    let Some(url) = crate::support::postgres_url("postgres search index") else {
        return;
    };
    let db = OwnDatabase::new(&url, "mountfs_analyze").await;
    let store = PostgresStore::connect(&db.url).await.unwrap();
    wait_ready_postgres(&store).await;
    let client = db.client().await;
    // As on a server with autovacuum off (this one's may be on): only mountfs analyses.
    client
        .batch_execute("ALTER TABLE mountfs_items SET (autovacuum_enabled = false)")
        .await
        .unwrap();
    let (rows_before, analyzed_before) = table_statistics(&client).await;
    assert!(rows_before < 1.0, "a new table: {rows_before} rows");
    let ns = Namespace::new("default").unwrap();
    let backend = StoreBackend::new(Arc::new(store.clone()), ns);
    const FILES: usize = 3_000;
    let mut rng = Lcg(45);
    for i in 0..FILES {
        let mut text: String = (0..4 + rng.next(12))
            .map(|_| line(&mut rng) + "\n")
            .collect();
        if i % 50 == 7 {
            text.push_str("    legacy::deprecated_api_call(1, 2);\n");
        }
        backend
            .write(
                &VirtualPath::parse(&format!("/crate{:02}/src/m{i:04}.rs", i % 40)).unwrap(),
                text.as_bytes(),
                mountfs::storage::backend::WriteMode::Overwrite,
            )
            .await
            .unwrap();
    }
    // The server's background pass analyses the table once the fill is indexed, and the
    // candidates query's trigram arm is then planned on the trigram index.
    let keys = mountfs::storage::store::postgres::text_keys(b"deprecated_api_call");
    let started = Instant::now();
    let (rows, analyzed, plan) = loop {
        let (rows, analyzed) = table_statistics(&client).await;
        let plan: Vec<String> = client
            .query(
                "EXPLAIN SELECT key FROM mountfs_items
                 WHERE namespace = $1 AND key >= $2 AND text_keys_version = version
                   AND text_keys @> $3::integer[]",
                &[&"default", &"", &keys],
            )
            .await
            .unwrap()
            .iter()
            .map(|row| row.get(0))
            .collect();
        let plan = plan.join("\n");
        let current = rows >= FILES as f64 * 0.9 && analyzed > analyzed_before;
        if (current && plan.contains("mountfs_items_text_keys"))
            || started.elapsed() > Duration::from_secs(60)
        {
            break (rows, analyzed, plan);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        rows >= FILES as f64 * 0.9 && analyzed > analyzed_before,
        "60 s after writing {FILES} files the planner counts {rows} rows \
         ({analyzed_before} ANALYZEs before the fill, {analyzed} after)"
    );
    assert!(plan.contains("mountfs_items_text_keys"), "{plan}");
    drop((backend, store));
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_build_stopped_half_way_resumes_at_the_next_start() {
    let Some(url) = crate::support::postgres_url("postgres search index") else {
        return;
    };
    let db = OwnDatabase::new(&url, "mountfs_resume").await;
    {
        let store = PostgresStore::connect(&db.url).await.unwrap();
        wait_ready_postgres(&store).await;
        let client = db.client().await;
        write_old_way(&client, 2_000).await;
        // The first server's pass indexes every item before it is stopped, so what the test
        // leaves behind below is exactly what it says.
        wait_caught_up(&client).await;
    }
    let client = db.client().await;
    // The dropped server's background pass may still be finishing a step on its last
    // connection: wait until no other session is on this database, so none indexes what the
    // next statement leaves behind.
    let started = std::time::Instant::now();
    loop {
        let others: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND pid <> pg_backend_pid()",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if others == 0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{others} sessions stay"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // What a server killed half way through the pass leaves: some items given their
    // trigrams, the others still behind, and the GIN index not made yet.
    client
        .batch_execute(
            "UPDATE mountfs_items SET text_keys = NULL, text_keys_version = NULL
                 WHERE key >= '/n/3';
             DROP INDEX mountfs_items_text_keys;",
        )
        .await
        .unwrap();
    let left_behind: i64 = client
        .query_one(
            "SELECT count(*) FROM mountfs_items WHERE key >= '/n/3'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(left_behind > 500, "{left_behind} items left behind");
    assert_eq!(behind(&client).await, left_behind);
    let store = PostgresStore::connect(&db.url).await.unwrap();
    wait_ready_postgres(&store).await;
    wait_caught_up(&client).await;
    let ns = Namespace::new("default").unwrap();
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let indexed = StoreBackend::new(shared.clone(), ns.clone());
    let scanning = StoreBackend::new(shared.clone(), ns).without_index();
    for text in ["HashMap", "unsafe impl", "Kelvin"] {
        let q = literal(text);
        assert_eq!(
            sorted(&indexed, &q).await,
            sorted(&scanning, &q).await,
            "{text}"
        );
    }
    assert!(files_read(&indexed, &literal("unsafe impl")).await < 2_000 / 2);
    drop((indexed, scanning, shared, store));
    db.drop().await;
}

/// Whether the index `mountfs_items_text_keys` is valid, and its access method.
async fn trigram_index_state(client: &tokio_postgres::Client) -> Option<(bool, String)> {
    client
        .query_opt(
            "SELECT i.indisvalid, a.amname FROM pg_index i
               JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam
              WHERE i.indexrelid = to_regclass('mountfs_items_text_keys')",
            &[],
        )
        .await
        .unwrap()
        .map(|row| (row.get::<_, bool>(0), row.get::<_, String>(1)))
}

/// A write that leaves its item behind does not touch the trigram GIN index: the index holds
/// only the rows whose trigrams are not `NULL`. Before, it held every row, and each such write
/// appended a key for its `NULL` to the index's pending list. A store built by the earlier
/// releases (the trigrams of the text as it is in the column `trigrams`, the GIN over every
/// row, `mountfs_items_trigrams`, and the partial one over it) gains the index of squeezed text
/// at its next start, without trusting the old trigrams (made wrong here on purpose), and the
/// old indexes are dropped (the old columns stay, for a server of that build that may still
/// write them); answers stay exact throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_write_left_behind_does_not_touch_the_trigram_index() {
    let Some(url) = crate::support::postgres_url("postgres search index") else {
        return;
    };
    let db = OwnDatabase::new(&url, "mountfs_partial").await;
    {
        let store = PostgresStore::connect(&db.url).await.unwrap();
        wait_ready_postgres(&store).await;
        write_old_way(&db.client().await, 300).await;
    }
    let client = db.client().await;
    // The index as the earlier releases made it, its trigrams wrong.
    client
        .batch_execute(
            "DROP INDEX mountfs_items_text_keys, mountfs_items_text_keys_behind;
             DROP STATISTICS mountfs_items_text_keys_behind_stats;
             ALTER TABLE mountfs_items DROP COLUMN text_keys, DROP COLUMN text_keys_version,
                 ADD COLUMN trigrams INTEGER[], ADD COLUMN trigrams_version BIGINT;
             UPDATE mountfs_items SET trigrams = '{1,2,3}', trigrams_version = version;
             CREATE INDEX mountfs_items_trigrams ON mountfs_items USING gin (trigrams);
             CREATE INDEX mountfs_items_trigram_keys ON mountfs_items USING gin (trigrams)
                 WHERE trigrams IS NOT NULL;
             CREATE INDEX mountfs_items_trigrams_behind ON mountfs_items (namespace, key)
                 WHERE (trigrams_version IS DISTINCT FROM version) IS TRUE;
             CREATE STATISTICS mountfs_items_trigrams_behind_stats
                 ON ((trigrams_version IS DISTINCT FROM version)) FROM mountfs_items;",
        )
        .await
        .unwrap();
    let store = PostgresStore::connect(&db.url).await.unwrap();
    wait_ready_postgres(&store).await;
    let ns = Namespace::new("default").unwrap();
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let indexed = StoreBackend::new(shared.clone(), ns.clone());
    let scanning = StoreBackend::new(shared.clone(), ns.clone()).without_index();
    exact(&indexed, &scanning).await;
    let started = Instant::now();
    let earlier = || async {
        client
            .query_one(
                "SELECT (SELECT count(*) FROM pg_class WHERE relname IN ('mountfs_items_trigrams',
                         'mountfs_items_trigram_keys', 'mountfs_items_trigrams_behind'))
                      + (SELECT count(*) FROM pg_statistic_ext
                         WHERE stxname = 'mountfs_items_trigrams_behind_stats')",
                &[],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
    };
    while earlier().await > 0 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the earlier index was not dropped"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let predicate: Option<String> = client
        .query_one(
            "SELECT pg_get_expr(indpred, indrelid) FROM pg_index
              WHERE indexrelid = to_regclass('mountfs_items_text_keys')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(predicate.as_deref(), Some("(text_keys IS NOT NULL)"));
    wait_caught_up(&client).await;
    // Writes left behind (the pass held off) add nothing to the index, not even to its
    // pending list, whose size PostgreSQL's pgstattuple reports.
    let paused = PassPaused::new(&db).await;
    client
        .batch_execute("CREATE EXTENSION IF NOT EXISTS pgstattuple")
        .await
        .unwrap();
    client.batch_execute("VACUUM mountfs_items").await.unwrap();
    let pending = || async {
        client
            .query_one(
                "SELECT pending_tuples FROM pgstatginindex('mountfs_items_text_keys')",
                &[],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
    };
    assert_eq!(pending().await, 0);
    for i in 0..40 {
        shared
            .put(
                &ns,
                &format!("/behind/{i}.md"),
                format!("unsafe impl Send for Behind{i}\n").as_bytes(),
                PutCondition::Overwrite,
            )
            .await
            .unwrap();
    }
    assert!(behind(&client).await >= 40);
    assert_eq!(pending().await, 0, "writes left behind touched the index");
    exact(&indexed, &scanning).await;
    paused.release().await;
    wait_caught_up(&client).await;
    exact(&indexed, &scanning).await;
    trigrams_are_exact(&client).await;
    drop((indexed, scanning, shared, store));
    db.drop().await;
}

/// A few literals answer as a scan does.
async fn exact(indexed: &StoreBackend, scanning: &StoreBackend) {
    for text in ["HashMap", "unsafe impl", "Kelvin"] {
        let q = literal(text);
        assert_eq!(
            sorted(indexed, &q).await,
            sorted(scanning, &q).await,
            "{text}"
        );
    }
}

/// A `CREATE INDEX CONCURRENTLY` that fails leaves its index behind, INVALID (as one whose
/// server was killed does): made here for real under the very name the store uses (a unique
/// index the rows violate). The next start drops it and builds the search index again; grep
/// answers as a scan meanwhile and after, and then from the index.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_index_left_invalid_is_dropped_and_built_again() {
    let Some(url) = crate::support::postgres_url("postgres search index") else {
        return;
    };
    let db = OwnDatabase::new(&url, "mountfs_invalid").await;
    {
        let store = PostgresStore::connect(&db.url).await.unwrap();
        wait_ready_postgres(&store).await;
        write_old_way(&db.client().await, 2_000).await;
    }
    let client = db.client().await;
    client
        .batch_execute("DROP INDEX mountfs_items_text_keys")
        .await
        .unwrap();
    let failed = client
        .batch_execute(
            "CREATE UNIQUE INDEX CONCURRENTLY mountfs_items_text_keys ON mountfs_items (namespace)",
        )
        .await;
    assert!(failed.is_err(), "the unique index was built");
    assert_eq!(
        trigram_index_state(&client).await,
        Some((false, "btree".to_owned())),
        "left INVALID"
    );
    let store = PostgresStore::connect(&db.url).await.unwrap();
    let ns = Namespace::new("default").unwrap();
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let indexed = StoreBackend::new(shared.clone(), ns.clone());
    let scanning = StoreBackend::new(shared.clone(), ns).without_index();
    let started = Instant::now();
    while !store.index_ready().await.unwrap() {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "index not built again in 120 s"
        );
        exact(&indexed, &scanning).await;
    }
    exact(&indexed, &scanning).await;
    assert_eq!(
        trigram_index_state(&client).await,
        Some((true, "gin".to_owned())),
        "dropped and built again"
    );
    assert!(files_read(&indexed, &literal("unsafe impl")).await < 2_000 / 2);
    drop((indexed, scanning, shared, store));
    db.drop().await;
}

/// An item written by an upload (`mountfs cp` of a big file, chunk by chunk) is held by the
/// search index as one written by `put` is: left behind for the pass (while it is, a search
/// reads it and finds it), then given the trigrams of the content that was staged, under each
/// condition, so a grep finds it through the index and skips it when the text is not there
/// (before, an upload's trigrams stayed behind until the next start: a candidate of every
/// search, read each time). Uploads count toward
/// [`MAX_BEHIND`](mountfs::storage::store::postgres::MAX_BEHIND) as puts do: past it an upload indexes
/// its item itself. One bigger than the index holds is never behind, and found through its
/// size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_upload_is_held_by_the_index_as_a_put_is() {
    let Some(url) = crate::support::postgres_url("postgres search index") else {
        return;
    };
    let db = OwnDatabase::new(&url, "mountfs_upload_index").await;
    let store = PostgresStore::connect(&db.url).await.unwrap();
    wait_ready_postgres(&store).await;
    let client = db.client().await;
    let ns = Namespace::new("default").unwrap();
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let backend = StoreBackend::new(shared.clone(), ns.clone());
    let upload = |key: &'static str, chunks: Vec<Vec<u8>>, condition: PutCondition| {
        let (shared, ns) = (shared.clone(), ns.clone());
        async move {
            let mut staged = shared.begin_upload(&ns, key).await.unwrap();
            for chunk in &chunks {
                staged.append(chunk).await.unwrap();
            }
            staged
                .finish(condition, mountfs::storage::store::Encoding::Utf8)
                .await
                .unwrap()
        }
    };
    let found = |text: &'static str| {
        let backend = &backend;
        async move {
            let hits: Vec<String> = sorted(backend, &literal(text))
                .await
                .into_iter()
                .map(|f| f.path.to_string())
                .collect();
            (hits, files_read(backend, &literal(text)).await)
        }
    };
    // Left behind by the upload, and found meanwhile: every search reads it.
    let paused = PassPaused::new(&db).await;
    // A trigram across two chunks ("plo" of "uploaded") is one of the item's.
    let first = upload(
        "/up/small.md",
        vec![b"hello up".to_vec(), b"loaded world\n".to_vec()],
        PutCondition::CreateOnly,
    )
    .await;
    assert_eq!(behind(&client).await, 1, "the upload is left behind");
    assert_eq!(
        found("uploaded").await,
        (vec!["/up/small.md".to_owned()], 1)
    );
    assert_eq!(found("zebra").await, (vec![], 1), "read while behind");
    paused.release().await;
    wait_caught_up(&client).await;
    assert_eq!(
        found("uploaded").await,
        (vec!["/up/small.md".to_owned()], 1)
    );
    assert_eq!(found("zebra").await, (vec![], 0), "not a candidate");
    // Replaced by uploads under a version and by an overwrite: the trigrams follow.
    let second = upload(
        "/up/small.md",
        vec![b"goodbye zebra\n".to_vec()],
        PutCondition::IfVersion(first.version),
    )
    .await;
    assert_eq!(found("zebra").await.0, vec!["/up/small.md".to_owned()]);
    wait_caught_up(&client).await;
    assert_eq!(found("uploaded").await, (vec![], 0));
    assert_eq!(found("zebra").await, (vec!["/up/small.md".to_owned()], 1));
    assert!(!second.created);
    upload(
        "/up/small.md",
        vec![b"giraffe\n".to_vec()],
        PutCondition::Overwrite,
    )
    .await;
    assert_eq!(found("giraffe").await.0, vec!["/up/small.md".to_owned()]);
    wait_caught_up(&client).await;
    assert_eq!(found("zebra").await, (vec![], 0));
    assert_eq!(found("giraffe").await, (vec!["/up/small.md".to_owned()], 1));
    // Over the index's size: no trigrams, yet never behind, and found through its size.
    let mut big = vec![b'a'; (mountfs::storage::store::postgres::MAX_INDEXED_BYTES + 10) as usize];
    big.extend_from_slice(b"\nneedle\n");
    upload(
        "/up/big.md",
        big.chunks(300_000).map(<[u8]>::to_vec).collect(),
        PutCondition::CreateOnly,
    )
    .await;
    assert_eq!(
        behind(&client).await,
        0,
        "a big upload is never left behind"
    );
    assert_eq!(found("needle").await.0, vec!["/up/big.md".to_owned()]);
    // With MAX_BEHIND items behind (a batch's puts), an upload indexes its item itself.
    let paused = PassPaused::new(&db).await;
    let bound = mountfs::storage::store::postgres::MAX_BEHIND;
    let ops = (0..bound)
        .map(|i| BatchOp::Put {
            key: format!("/many/{i}.md"),
            content: format!("item {i}\n").into_bytes(),
            condition: PutCondition::CreateOnly,
        })
        .collect();
    shared.apply_batch(&ns, ops).await.unwrap();
    assert_eq!(behind(&client).await, bound, "the batch's puts are behind");
    upload(
        "/up/late.md",
        vec![b"a late ".to_vec(), b"upload\n".to_vec()],
        PutCondition::CreateOnly,
    )
    .await;
    assert_eq!(
        behind(&client).await,
        bound,
        "past the bound, indexed by its write"
    );
    let stamped: bool = client
        .query_one(
            "SELECT text_keys_version = version AND text_keys IS NOT NULL FROM mountfs_items
             WHERE key = '/up/late.md'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(stamped, "the late upload has its trigrams");
    paused.release().await;
    wait_caught_up(&client).await;
    trigrams_are_exact(&client).await;
    drop((backend, shared, store));
    db.drop().await;
}

/// Holds [`mountfs::storage::store::postgres::INDEX_LOCK`] from a connection of its own: every
/// server's background pass finds it taken (as when another server is indexing) and leaves
/// the items behind until it is released.
struct PassPaused(tokio_postgres::Client);

impl PassPaused {
    async fn new(db: &OwnDatabase) -> Self {
        let client = db.client().await;
        client
            .execute(
                "SELECT pg_advisory_lock($1)",
                &[&mountfs::storage::store::postgres::INDEX_LOCK],
            )
            .await
            .unwrap();
        Self(client)
    }

    async fn release(self) {
        self.0
            .execute(
                "SELECT pg_advisory_unlock($1)",
                &[&mountfs::storage::store::postgres::INDEX_LOCK],
            )
            .await
            .unwrap();
    }
}

/// Waits until no item is behind (the pass caught up).
async fn wait_caught_up(client: &tokio_postgres::Client) {
    let started = Instant::now();
    while behind(client).await > 0 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the pass left {} items behind for 60 s",
            behind(client).await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every item's stored trigrams are those of its content (or none for an item the index
/// does not hold), stamped with its version.
async fn trigrams_are_exact(client: &tokio_postgres::Client) {
    let rows = client
        .query(
            // The content wherever it is kept (`content` is NULL for one over 4 MiB).
            "SELECT key, encoding,
                    CASE WHEN large_version = version THEN large_content ELSE content END,
                    text_keys, text_keys_version, version
             FROM mountfs_items",
            &[],
        )
        .await
        .unwrap();
    for row in rows {
        let key: String = row.get(0);
        let encoding: String = row.get(1);
        let content: Vec<u8> = row.get(2);
        let trigrams: Option<Vec<i32>> = row.get(3);
        let (stamp, version): (Option<i64>, i64) = (row.get(4), row.get(5));
        assert_eq!(stamp, Some(version), "{key}");
        let expected = mountfs::storage::store::postgres::text_keys_of(
            mountfs::storage::store::Encoding::parse(&encoding),
            &content,
        );
        assert_eq!(trigrams, expected, "{key}");
    }
}

/// Once writes pause the pass indexes what they left behind, while writes go on: writes
/// never wait for it, and it ends with every item's trigrams those of its content. Two
/// servers share the database; the one that did not write may do the work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_pass_catches_up_without_blocking_writes() {
    let Some(url) = crate::support::postgres_url("postgres search index") else {
        return;
    };
    let db = OwnDatabase::new(&url, "mountfs_catchup").await;
    let store = PostgresStore::connect(&db.url).await.unwrap();
    wait_ready_postgres(&store).await;
    let other = PostgresStore::connect(&db.url).await.unwrap();
    wait_ready_postgres(&other).await;
    let client = db.client().await;
    let ns = Namespace::new("default").unwrap();
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let paused = PassPaused::new(&db).await;
    for i in 0..200 {
        let text = format!("note {i}: a HashMap of {}\n", line(&mut Lcg(i)));
        shared
            .put(
                &ns,
                &format!("/p/{i}.md"),
                text.as_bytes(),
                PutCondition::Overwrite,
            )
            .await
            .unwrap();
    }
    shared
        .put(&ns, "/p/bin", &[0xff, 0x00, 0x01], PutCondition::Overwrite)
        .await
        .unwrap();
    // Held off: the text items are behind, the binary one is not (nothing to compute).
    assert_eq!(behind(&client).await, 200);
    let indexed = StoreBackend::new(shared.clone(), ns.clone());
    let scanning = StoreBackend::new(shared.clone(), ns.clone()).without_index();
    let q = literal("HashMap");
    assert_eq!(sorted(&indexed, &q).await.len(), 200);
    assert_eq!(sorted(&indexed, &q).await, sorted(&scanning, &q).await);

    // Released while a writer keeps rewriting other items.
    let writing = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let written = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let writer = {
        let (shared, ns) = (shared.clone(), ns.clone());
        let (writing, written) = (writing.clone(), written.clone());
        tokio::spawn(async move {
            let mut writes = 0u64;
            while writing.load(std::sync::atomic::Ordering::Acquire) {
                let text = format!("busy {writes}: unsafe impl\n");
                shared
                    .put(
                        &ns,
                        &format!("/w/{}.md", writes % 20),
                        text.as_bytes(),
                        PutCondition::Overwrite,
                    )
                    .await
                    .unwrap();
                writes += 1;
                written.store(writes, std::sync::atomic::Ordering::Release);
            }
        })
    };
    paused.release().await;
    let before = written.load(std::sync::atomic::Ordering::Acquire);
    let started = Instant::now();
    loop {
        let left: i64 = client
            .query_one(
                "SELECT count(*) FROM mountfs_items
                 WHERE key LIKE '/p/%' AND text_keys_version IS DISTINCT FROM version",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if left == 0 {
            assert!(
                written.load(std::sync::atomic::Ordering::Acquire) > before,
                "no write completed while the pass caught up"
            );
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{left} items still behind"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    writing.store(false, std::sync::atomic::Ordering::Release);
    writer.await.unwrap();
    wait_caught_up(&client).await;
    trigrams_are_exact(&client).await;
    for text in ["HashMap", "unsafe impl", "busy 1"] {
        let q = literal(text);
        assert_eq!(
            sorted(&indexed, &q).await,
            sorted(&scanning, &q).await,
            "{text}"
        );
    }
    drop((indexed, scanning, shared, store, other));
    db.drop().await;
}

/// A page of files that stopped the search once it had it says the files skipped up to the
/// page's last file, not those past it that the search happened to read (how far a store
/// reads ahead of the page differs with the index and without, and with the moment).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_says_only_the_files_skipped_up_to_its_end() {
    use crate::support::backends::call;
    let (store, _dir) = crate::support::backends::sqlite().await;
    let session = crate::support::backends::session_over(
        store,
        mountfs::state::session::WriteOptions {
            limits: mountfs::ground::limits::Limits {
                grep_max_line_bytes: 4_096,
                ..Default::default()
            },
            ..Default::default()
        },
    );
    let long = format!("needle {}\n", "y".repeat(5_000));
    let mut files: Vec<(String, &str)> = (0..200)
        .map(|i| (format!("/f{i:03}.md"), "needle\n"))
        .collect();
    files.extend([
        ("/a-long.md".to_owned(), long.as_str()),
        ("/f003-long.md".to_owned(), long.as_str()),
        ("/z-long.md".to_owned(), long.as_str()),
    ]);
    for (path, content) in files {
        session
            .backend()
            .write(
                &VirtualPath::parse(&path).unwrap(),
                content.as_bytes(),
                mountfs::storage::backend::WriteMode::Overwrite,
            )
            .await
            .unwrap();
    }
    let grep = |args: serde_json::Value| {
        let session = &session;
        async move {
            let reply = call("grep", args, session).await.unwrap();
            let structured = reply.structured.unwrap();
            let skipped: Vec<String> = structured
                .get("skipped")
                .map(|s| s.as_array().unwrap().clone())
                .unwrap_or_default()
                .iter()
                .map(|f| f["path"].as_str().unwrap().to_owned())
                .collect();
            (skipped, structured["total"].clone(), reply.text)
        }
    };
    // Each search stops soon after the page and one more file, having read /f003-long.md.
    let (skipped, total, text) =
        grep(serde_json::json!({"pattern": "needle", "head_limit": 1})).await;
    assert_eq!(skipped, ["/a-long.md"], "{text}");
    assert_eq!(total, serde_json::Value::Null, "{text}");
    let (skipped, total, text) = grep(serde_json::json!({
        "pattern": "needle", "head_limit": 2, "offset": 3, "output_mode": "count"
    }))
    .await;
    assert_eq!(skipped, ["/a-long.md", "/f003-long.md"], "{text}");
    assert_eq!(total, serde_json::Value::Null, "{text}");
    // Unpaged, every file skipped is said.
    let (skipped, total, text) = grep(serde_json::json!({"pattern": "needle"})).await;
    assert_eq!(
        skipped,
        ["/a-long.md", "/f003-long.md", "/z-long.md"],
        "{text}"
    );
    assert_eq!(total, 200, "{text}");
}
