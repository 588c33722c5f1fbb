//! The cap on the size of a tool result (CONTRACT §4: 80,000 characters, cut at a whole line).
//!
//! Owns where a long text is cut and the notice appended after the cut. Saving a whole result
//! somewhere the agent can page through it (`/scratch/large_tool_results/…`) is left to the tools.

/// Most characters (not bytes) a tool result may hold, notice included.
pub const RESULT_CHAR_LIMIT: usize = 80_000;

/// The line appended to a result that was cut (seed 000 §2).
pub const TRUNCATION_GUIDANCE: &str =
    "... [results truncated, try being more specific with your parameters]";

/// Caps `text` at [`RESULT_CHAR_LIMIT`] characters with [`TRUNCATION_GUIDANCE`].
///
/// See [`cap_result_with`] for where the cut falls.
pub fn cap_result(text: String) -> String {
    cap_result_with(text, RESULT_CHAR_LIMIT, TRUNCATION_GUIDANCE)
}

/// Caps `text` at `limit` characters, ending a cut text with a line holding `notice`.
///
/// A text of at most `limit` characters is returned unchanged. Otherwise the result is the longest
/// prefix made of whole lines such that the prefix, `'\n'` and `notice` together hold at most
/// `limit` characters, followed by `'\n'` and `notice`. When even the first line does not fit,
/// that line is cut at a character boundary so the total still fits. (When `notice` alone is
/// longer than `limit`, the result is `'\n'` and `notice`.)
pub fn cap_result_with(text: String, limit: usize, notice: &str) -> String {
    // Bytes bound characters from above, so most results skip the count.
    if text.len() <= limit || text.chars().count() <= limit {
        return text;
    }
    let budget = limit.saturating_sub(notice.chars().count().saturating_add(1));
    let mut cut: Option<usize> = None;
    let mut too_long_at: Option<usize> = None;
    for (chars_before, (byte, ch)) in text.char_indices().enumerate() {
        if chars_before == budget && too_long_at.is_none() {
            too_long_at = Some(byte);
        }
        if ch == '\n' {
            if chars_before > budget {
                break;
            }
            cut = Some(byte);
        } else if chars_before >= budget {
            // The line in progress cannot end within the budget any more.
            break;
        }
    }
    let end = cut.or(too_long_at).unwrap_or(0);
    let mut out = String::with_capacity(end.saturating_add(notice.len()).saturating_add(1));
    out.push_str(text.get(..end).unwrap_or_default());
    out.push('\n');
    out.push_str(notice);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guidance_text_is_pinned() {
        assert_eq!(
            TRUNCATION_GUIDANCE,
            "... [results truncated, try being more specific with your parameters]"
        );
        assert_eq!(RESULT_CHAR_LIMIT, 80_000);
    }

    #[test]
    fn short_text_is_unchanged() {
        assert_eq!(cap_result("a\nb".to_string()), "a\nb");
        assert_eq!(cap_result_with("abcd".to_string(), 4, "!"), "abcd");
    }

    #[test]
    fn text_of_exactly_the_limit_in_characters_is_unchanged() {
        // 80,000 characters but 160,000 bytes.
        let text = "é".repeat(RESULT_CHAR_LIMIT);
        assert_eq!(cap_result(text.clone()), text);
    }

    #[test]
    fn cut_falls_at_a_whole_line() {
        // limit 10, notice "!!": budget for the prefix is 10 - 3 = 7 characters.
        let got = cap_result_with("abc\ndef\nghi\n".to_string(), 10, "!!");
        assert_eq!(got, "abc\ndef\n!!");
        assert!(got.chars().count() <= 10);
    }

    #[test]
    fn prefix_of_exactly_the_budget_is_kept() {
        // "abc\ndefg" is 8 characters; with limit 11 and notice "!!" the budget is 8.
        let got = cap_result_with("abc\ndefg\nhij".to_string(), 11, "!!");
        assert_eq!(got, "abc\ndefg\n!!");
        assert_eq!(got.chars().count(), 11);
    }

    #[test]
    fn a_first_line_longer_than_the_budget_is_cut_inside() {
        let got = cap_result_with("abcdefghijkl\nm".to_string(), 8, "!!");
        assert_eq!(got, "abcde\n!!");
    }

    #[test]
    fn a_cut_inside_a_line_respects_character_boundaries() {
        let got = cap_result_with("ééééééééé".to_string(), 6, "…");
        assert_eq!(got, "éééé\n…");
    }

    #[test]
    fn an_empty_first_line_is_a_whole_line() {
        let got = cap_result_with("\nabcdefghijkl".to_string(), 8, "!!");
        assert_eq!(got, "\n!!");
    }

    #[test]
    fn big_results_end_with_the_guidance_and_fit() {
        let text: String = (0..20_000).map(|i| format!("line number {i}\n")).collect();
        let got = cap_result(text.clone());
        assert!(got.chars().count() <= RESULT_CHAR_LIMIT);
        let body = got
            .strip_suffix(&format!("\n{TRUNCATION_GUIDANCE}"))
            .expect("guidance appended");
        assert!(
            text.starts_with(&format!("{body}\n")),
            "cut at a whole line"
        );
        // The next line would not have fitted.
        let next_line_len = text[body.len() + 1..].find('\n').unwrap() + 1;
        assert!(body.chars().count() + next_line_len + 1 + TRUNCATION_GUIDANCE.len() > 80_000);
    }

    #[test]
    fn a_notice_longer_than_the_limit_still_appears() {
        assert_eq!(
            cap_result_with("abcdef".to_string(), 3, "long notice"),
            "\nlong notice"
        );
    }
}
