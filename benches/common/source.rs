//! Rust-like source text for the benchmarks' generated trees, from a fixed seed: the same
//! bytes in every run, with a `TODO(needle)` line now and then for the searches to find.

/// A deterministic pseudo-random stream (xorshift).
pub struct Rng(pub u64);

impl Rng {
    /// The seed every generated tree starts from.
    pub fn seeded() -> Self {
        Rng(0x9e37_79b9_7f4a_7c15)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

const WORDS: &[&str] = &[
    "let", "value", "config", "parse", "buffer", "request", "handler", "result", "error", "state",
    "index", "mount", "path", "stream", "window", "matcher", "entry", "writer",
];

/// One file's text of at least `bytes` bytes; about one line in `needle_every` is a
/// `// TODO(needle): …` line.
pub fn source_file(rng: &mut Rng, bytes: usize, needle_every: u64) -> String {
    let mut text = String::with_capacity(bytes + 200);
    let mut line = 0;
    while text.len() < bytes {
        line += 1;
        let a = WORDS[(rng.next() % WORDS.len() as u64) as usize];
        let b = WORDS[(rng.next() % WORDS.len() as u64) as usize];
        let n = rng.next() % 100_000;
        if rng.next().is_multiple_of(needle_every) {
            text.push_str(&format!("    // TODO(needle): revisit {a} {n}\n"));
        } else {
            text.push_str(&format!("    let {a}_{line} = {b}::new({n}); // {a} {b}\n"));
        }
    }
    text
}
