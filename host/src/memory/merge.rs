//! When two records state the same fact, and how they are folded into one: Dice
//! similarity over analyzed terms, with numbers and negations that must agree.

use std::collections::BTreeSet;

use super::records::MemoryRecord;

pub(super) fn numbers(terms: &[String]) -> BTreeSet<&str> {
    terms.iter().filter(|t| t.chars().any(|c| c.is_ascii_digit())).map(String::as_str).collect()
}

/// Dice coefficient over analyzed terms; texts that mention different numbers are never
/// the same fact ("512 errors" vs "513 errors").
pub(super) fn similarity(a: &[String], b: &[String]) -> f64 {
    if a.is_empty() || b.is_empty() || numbers(a) != numbers(b) {
        return 0.0;
    }
    let shared = a.iter().filter(|t| b.contains(t)).count();
    2.0 * shared as f64 / (a.len() + b.len()) as f64
}

/// May these two records be folded into one? Never a user-written record with one a
/// skill proposed: the skill's text would reword the user's, or its provenance would make
/// the user's fact fall with a quarantine of the skill.
pub(super) fn may_merge(a: &MemoryRecord, b: &MemoryRecord) -> bool {
    a.is_user_written() == b.is_user_written()
}

/// Fold `other` into `keep`: the higher priority's wording wins, every provenance stays;
/// a user-written wording is never replaced by one that is not.
/// Returns `keep` as it was when its wording, kind or priority changed (to be archived).
pub(super) fn merge_into(keep: &mut MemoryRecord, other: &MemoryRecord, now: u64) -> Option<MemoryRecord> {
    let before = keep.clone();
    let take_other = match (keep.is_user_written(), other.is_user_written()) {
        (true, false) => false,
        (false, true) => true,
        _ => other.priority > keep.priority,
    };
    if take_other {
        keep.content = other.content.clone();
        keep.kind = other.kind;
        keep.priority = other.priority;
    }
    for t in &other.tags {
        if !keep.tags.contains(t) {
            keep.tags.push(t.clone());
        }
    }
    for p in &other.provenance {
        if !keep.provenance.contains(p) {
            keep.provenance.push(p.clone());
        }
    }
    keep.references = keep.references.saturating_add(other.references);
    keep.expires_ms = match (keep.expires_ms, other.expires_ms) {
        (Some(a), Some(b)) => Some(a.max(b)),
        _ => None,
    };
    keep.updated_ms = now;
    keep.importance = round_importance(keep.importance_at(now));
    (keep.content != before.content || keep.kind != before.kind || keep.priority != before.priority).then_some(before)
}

/// Six decimals: enough to rank, and every such value survives a JSON round trip exactly.
pub(super) fn round_importance(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

const NEGATIONS: [&str; 14] = [
    "no", "not", "never", "none", "nothing", "cannot", "can't", "don't", "doesn't", "isn't", "won't", "without", "nor",
    "neither",
];
const CJK_NEGATIONS: [char; 6] = ['不', '没', '无', '未', '非', '别'];

/// Negation words present in `text`: "X" and "not X" are different facts even though
/// their analyzed terms (stop words removed) are the same.
pub(super) fn negations(text: &str) -> BTreeSet<String> {
    let lower = text.to_lowercase();
    let mut out: BTreeSet<String> = lower
        .split(|c: char| !(c.is_alphanumeric() || c == '\''))
        .filter(|w| NEGATIONS.contains(w) || w.ends_with("n't"))
        .map(str::to_string)
        .collect();
    out.extend(lower.chars().filter(|c| CJK_NEGATIONS.contains(c)).map(String::from));
    out
}

/// Two records are the same memory when what was written, where and by whom match.
pub(super) fn same_identity(a: &MemoryRecord, b: &MemoryRecord) -> bool {
    (a.id, &a.namespace, &a.content, a.kind, a.created_ms, &a.provenance)
        == (b.id, &b.namespace, &b.content, b.kind, b.created_ms, &b.provenance)
}

pub(super) fn same_fact(a_text: &str, a: &[String], b_text: &str, b: &[String], threshold: f64) -> bool {
    similarity(a, b) >= threshold && negations(a_text) == negations(b_text)
}
