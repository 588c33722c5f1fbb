//! Where a string that was not found was probably meant to be: the near-match search behind
//! `edit_file`'s "String not found" error (CONTRACT §4, seed 003). First the same text with
//! different whitespace or line endings, else the most similar region of the file, found within a
//! bounded amount of work so a 10 MB file stays fast. Pure; the error text around the hint is
//! [`super::replace`]'s.

use std::collections::HashMap;

use similar::{Algorithm, capture_diff_slices, diff_ratio};

use super::numbered::{format_numbered, split_lines};

/// Lowest similarity (0..=1) for a region to be offered as the closest match.
const MIN_SIMILARITY: f32 = 0.5;
/// Most windows scored when looking for the closest region.
const MAX_WINDOWS: usize = 2_000;
/// Files up to this size have every window scored (when there are at most [`MAX_WINDOWS`]).
const FULL_SCAN_BYTES: usize = 200 * 1024;
/// Characters of windows scored at most, so a 10 MB file stays fast.
const SCORE_BUDGET_CHARS: usize = 4_000_000;
/// Windows with the best cheap score that get the exact similarity.
const SHORTLIST: usize = 8;
/// Above this many characters (both sides) similarity is measured on lines, not characters.
const CHAR_RATIO_MAX_CHARS: usize = 10_000;
/// Most positions remembered per distinct line of `old_string` when anchoring windows.
const MAX_ANCHOR_OFFSETS: usize = 16;

/// What the not-found error adds to help the agent find the right text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotFoundHint {
    /// Nothing similar enough was found.
    None,
    /// The text is there once spaces, tabs and line endings are ignored (1-based lines).
    WhitespaceDiffers {
        /// First line of the matching region.
        first_line: usize,
        /// Last line of the matching region.
        last_line: usize,
    },
    /// The most similar region of the file (1-based lines).
    Closest {
        /// First line of the region.
        first_line: usize,
        /// Last line of the region.
        last_line: usize,
        /// The region's lines, numbered as `read_file` shows them.
        excerpt: String,
    },
}

/// Where the text `old` was probably meant to match in `content`.
pub fn hint(content: &str, old: &str) -> NotFoundHint {
    if let Some((first_line, last_line)) = whitespace_insensitive_match(content, old) {
        return NotFoundHint::WhitespaceDiffers {
            first_line,
            last_line,
        };
    }
    let lines = split_lines(content);
    match closest_region(&lines, content.len(), old) {
        Some((first_line, last_line)) => NotFoundHint::Closest {
            first_line,
            last_line,
            excerpt: lines
                .get(first_line - 1..last_line)
                .map(|rows| format_numbered(rows, first_line))
                .unwrap_or_default(),
        },
        None => NotFoundHint::None,
    }
}

/// 1-based first and last line of the first place where `old` matches `content` once all
/// whitespace (spaces, tabs, `\r`, `\n`, …) is removed from both.
fn whitespace_insensitive_match(content: &str, old: &str) -> Option<(usize, usize)> {
    let key: String = old.chars().filter(|c| !c.is_whitespace()).collect();
    if key.is_empty() {
        return None;
    }
    let mut squeezed = String::with_capacity(content.len());
    // Byte offset in `squeezed` at which each line starts; line 1 starts at 0.
    let mut line_starts = vec![0usize];
    for ch in content.chars() {
        if ch == '\n' {
            line_starts.push(squeezed.len());
        } else if !ch.is_whitespace() {
            squeezed.push(ch);
        }
    }
    let start = squeezed.find(&key)?;
    let last = start + key.len() - 1;
    let line_of = |byte: usize| line_starts.partition_point(|&line_start| line_start <= byte);
    Some((line_of(start), line_of(last)))
}

/// 1-based first and last line of the window of `lines` most similar to `old`, if its
/// similarity is at least [`MIN_SIMILARITY`].
///
/// Windows have as many lines as `old`. The work is bounded so a 10 MB file stays fast: small
/// files have every window considered; larger ones only windows anchored on a line they share
/// with `old` (trimmed), or, when there is none, windows from the top of the file. Candidates get
/// a cheap score (character-bigram overlap) within [`SCORE_BUDGET_CHARS`]; the best
/// [`SHORTLIST`] get `similar`'s ratio, on characters or, for long texts, on lines.
fn closest_region(lines: &[&str], content_bytes: usize, old: &str) -> Option<(usize, usize)> {
    let old_lines = split_lines(old);
    let total = lines.len();
    if total == 0 || old_lines.is_empty() {
        return None;
    }
    let height = old_lines.len().min(total);
    let windows = total - height + 1;
    let target = old_lines.join("\n");
    let target_chars: Vec<char> = target.chars().collect();
    let target_grams = bigrams(&target_chars);

    let candidates: Vec<usize> = if windows <= MAX_WINDOWS && content_bytes <= FULL_SCAN_BYTES {
        (0..windows).collect()
    } else {
        let anchored = anchored_windows(lines, &old_lines, windows);
        if anchored.is_empty() {
            (0..windows).collect()
        } else {
            anchored
        }
    };

    let mut spent = 0usize;
    let mut scored: Vec<(f32, usize)> = Vec::new();
    for start in candidates {
        if spent > SCORE_BUDGET_CHARS {
            break;
        }
        let Some(window) = lines.get(start..start + height) else {
            continue;
        };
        let chars: Vec<char> = window.join("\n").chars().collect();
        spent += chars.len() + 1;
        if length_bound(target_chars.len(), chars.len()) < MIN_SIMILARITY {
            continue;
        }
        scored.push((dice(&target_grams, &bigrams(&chars)), start));
    }
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    scored.truncate(SHORTLIST);

    let mut best: Option<(f32, usize)> = None;
    for (_, start) in scored {
        let Some(window) = lines.get(start..start + height) else {
            continue;
        };
        let ratio = similarity(&target, &window.join("\n"));
        let better = match best {
            None => true,
            Some((best_ratio, best_start)) => {
                ratio > best_ratio || (ratio == best_ratio && start < best_start)
            }
        };
        if better {
            best = Some((ratio, start));
        }
    }
    let (ratio, start) = best?;
    (ratio >= MIN_SIMILARITY).then_some((start + 1, start + height))
}

/// Window starts anchored on lines shared with `old_lines`, most anchors first, at most
/// [`MAX_WINDOWS`].
fn anchored_windows(lines: &[&str], old_lines: &[&str], windows: usize) -> Vec<usize> {
    let mut offsets: HashMap<&str, Vec<usize>> = HashMap::new();
    for (offset, line) in old_lines.iter().enumerate() {
        let trimmed = line.trim();
        if !trimmed.is_empty() {
            let entry = offsets.entry(trimmed).or_default();
            if entry.len() < MAX_ANCHOR_OFFSETS {
                entry.push(offset);
            }
        }
    }
    let last_start = windows.saturating_sub(1);
    let mut hits: HashMap<usize, usize> = HashMap::new();
    for (index, line) in lines.iter().enumerate() {
        if let Some(offsets) = offsets.get(line.trim()) {
            for &offset in offsets {
                let start = index.saturating_sub(offset).min(last_start);
                *hits.entry(start).or_default() += 1;
            }
        }
    }
    let mut ranked: Vec<(usize, usize)> = hits.into_iter().collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    ranked.truncate(MAX_WINDOWS);
    ranked.into_iter().map(|(start, _)| start).collect()
}

/// Highest ratio two texts of these lengths can reach (`2·min / (a + b)`).
fn length_bound(a: usize, b: usize) -> f32 {
    if a + b == 0 {
        1.0
    } else {
        2.0 * a.min(b) as f32 / (a + b) as f32
    }
}

/// Sorted character bigrams (a single character counts as one gram).
fn bigrams(chars: &[char]) -> Vec<u64> {
    let mut grams: Vec<u64> = match chars {
        [] => Vec::new(),
        [only] => vec![(u64::from(*only) << 32) | u64::from(u32::MAX)],
        _ => chars
            .windows(2)
            .map(|pair| match pair {
                [a, b] => (u64::from(*a) << 32) | u64::from(*b),
                _ => 0,
            })
            .collect(),
    };
    grams.sort_unstable();
    grams
}

/// Dice coefficient of two sorted gram multisets.
fn dice(a: &[u64], b: &[u64]) -> f32 {
    if a.is_empty() && b.is_empty() {
        return 1.0;
    }
    let (mut i, mut j, mut common) = (0usize, 0usize, 0usize);
    while let (Some(x), Some(y)) = (a.get(i), b.get(j)) {
        match x.cmp(y) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                common += 1;
                i += 1;
                j += 1;
            }
        }
    }
    2.0 * common as f32 / (a.len() + b.len()) as f32
}

/// `similar`'s ratio of two texts: on characters, or on lines when both together are long.
fn similarity(a: &str, b: &str) -> f32 {
    let (a_chars, b_chars): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    if a_chars.len() + b_chars.len() <= CHAR_RATIO_MAX_CHARS {
        let ops = capture_diff_slices(Algorithm::Myers, &a_chars, &b_chars);
        diff_ratio(&ops, a_chars.len(), b_chars.len())
    } else {
        let a_lines: Vec<&str> = a.split('\n').collect();
        let b_lines: Vec<&str> = b.split('\n').collect();
        let ops = capture_diff_slices(Algorithm::Myers, &a_lines, &b_lines);
        diff_ratio(&ops, a_lines.len(), b_lines.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_differing_only_in_whitespace_is_pointed_at_by_its_lines() {
        let content = "a\nfn  main() {\r\n\tbody();\n}\nz\n";
        assert_eq!(
            hint(content, "fn main() {\n    body();\n}"),
            NotFoundHint::WhitespaceDiffers {
                first_line: 2,
                last_line: 4
            }
        );
    }

    #[test]
    fn the_closest_region_comes_with_its_numbered_lines() {
        let content = "one\ntwo\nthe quick brown fox\nfour\n";
        assert_eq!(
            hint(content, "the quick brown fax"),
            NotFoundHint::Closest {
                first_line: 3,
                last_line: 3,
                excerpt: "     3\tthe quick brown fox".into(),
            }
        );
    }

    #[test]
    fn nothing_similar_enough_gives_no_hint() {
        assert_eq!(hint("alpha\nbeta\n", "0123456789"), NotFoundHint::None);
        assert_eq!(hint("", "anything"), NotFoundHint::None);
    }

    #[test]
    fn similarity_scores_bound_and_order_texts() {
        assert_eq!(similarity("same", "same"), 1.0);
        assert!(similarity("kitten", "sitting") > similarity("kitten", "zzzzzzz"));
        assert_eq!(length_bound(10, 10), 1.0);
        assert_eq!(length_bound(1, 3), 0.5);
        assert_eq!(dice(&bigrams(&['a', 'b']), &bigrams(&['a', 'b'])), 1.0);
        assert_eq!(dice(&bigrams(&['a', 'b']), &bigrams(&['c', 'd'])), 0.0);
    }
}
