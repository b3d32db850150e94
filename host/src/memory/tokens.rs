//! Token counting for the MEMORY.md budget.
//!
//! The budget is in model tokens, so it is counted with a real BPE: OpenAI's `cl100k_base`
//! (tiktoken-compatible, via `tiktoken-rs`, ranks embedded in the crate: no download).
//! cl100k spends more tokens on Chinese than newer vocabularies, so a view within budget
//! here is within budget for o200k-era models too.

/// Tokens of `text` under cl100k_base, special-token strings counted as plain text.
pub fn count_tokens(text: &str) -> usize {
    tiktoken_rs::cl100k_base_singleton().count_ordinary(text)
}

#[cfg(test)]
mod tests {
    use super::count_tokens;

    #[test]
    fn counts_match_tiktoken() {
        // Reference counts from tiktoken's cl100k_base.
        assert_eq!(count_tokens("hello world"), 2);
        assert_eq!(count_tokens(""), 0);
        assert!(count_tokens("串口乱码与波特率有关") >= 5);
    }
}
