//! When two records state the same fact (a restatement: folded into one), when a new
//! record updates an older one (same subject, new value: the new one becomes the live
//! record, the old one is archived with a link to it), and how search prefers the newer of
//! two live records about the same subject. The comparison works on [`Statement`]s:
//! content units, numbers read as numbers, negations read as words.

use std::collections::BTreeSet;

use super::records::{MemoryRecord, SearchHit};
use super::statement::Statement;

/// How a new record relates to an older one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Relation {
    /// Same subject, same value, in other words: merge.
    Restatement,
    /// Same subject, a new value (another value, unit, name, or the opposite polarity).
    Update,
    /// Something else.
    Unrelated,
}

/// Nouns (and one verb) that name a single-valued attribute: one shared attribute is enough
/// to say that two short statements are about the same thing ("the user's editor is vim" /
/// "the user's editor is helix"), where one shared ordinary word is not ("prefers tabs" /
/// "prefers dark mode").
const ATTRIBUTES: &[&str] = &[
    "name", "editor", "citi", "timezon", "shell", "email", "phone", "address", "browser", "theme", "font", "locat",
    "live", "birthday", "role", "titl", "employ", "compani", "manag", "ide", "os", "terminal", "laptop", "host", "住",
    "叫", "名",
];

/// Dice coefficient over the statements' terms (content units and numbers).
pub(crate) fn dice(a: &Statement, b: &Statement) -> f64 {
    let (ta, tb) = (a.terms(), b.terms());
    if ta.is_empty() || tb.is_empty() {
        return 0.0;
    }
    let shared = ta.intersection(&tb).count();
    2.0 * shared as f64 / (ta.len() + tb.len()) as f64
}

/// How `new` relates to `old`. `threshold` is the Dice similarity a restatement needs.
pub(crate) fn relation(old: &Statement, new: &Statement, threshold: f64) -> Relation {
    let shared: BTreeSet<&String> = old.units.intersection(&new.units).collect();
    let only_old = old.units.len() - shared.len();
    let only_new = new.units.len() - shared.len();
    let (min, max) = (old.units.len().min(new.units.len()), old.units.len().max(new.units.len()));
    if min == 0 {
        return Relation::Unrelated;
    }
    let cover_min = shared.len() as f64 / min as f64;
    let cover_max = shared.len() as f64 / max as f64;
    let substituted = only_old > 0 && only_new > 0;
    let attribute = shared.iter().any(|u| ATTRIBUTES.contains(&u.as_str())) && only_old <= 2 && only_new <= 2;
    // Numbers that name things ("rule 3", "ticket 42") are part of the subject, unless the
    // new record says it changes something ("now version 3.12").
    let ids_agree = old.ids == new.ids || new.marker;
    let overlap = if new.marker {
        !shared.is_empty() && cover_min >= 0.5 && cover_max >= 0.34
    } else {
        shared.len() >= 2 && cover_min >= 0.6 && cover_max >= 0.5
    };
    let same_subject = ids_agree && (attribute || overlap);
    let value_changed = old.values != new.values || old.ids != new.ids || old.negated() != new.negated() || substituted;
    if same_subject && value_changed {
        return Relation::Update;
    }
    if !substituted && old.numbers() == new.numbers() && old.negations == new.negations && dice(old, new) >= threshold {
        return Relation::Restatement;
    }
    Relation::Unrelated
}

/// May `new` supersede `old`? Never a user-written record by one a skill proposed (a
/// skill's "update" of the user's fact is stored beside it); the user may update anything.
pub(super) fn may_supersede(old: &MemoryRecord, new: &MemoryRecord) -> bool {
    !old.is_user_written() || new.is_user_written()
}

/// Search post-processing: of two hits about the same subject with different values, the
/// newer ranks where the older was (and a record superseded by another hit ranks after it).
/// A skill's newer record never outranks the user's this way (the rule of [`may_supersede`]).
/// Runs after relevance (and fusion) ranking; only the first `window` hits are compared.
pub(super) fn prefer_newer(hits: &mut Vec<SearchHit>, threshold: f64, window: usize) {
    let n = hits.len().min(window);
    if n < 2 {
        return;
    }
    let mut statements: Vec<Statement> = hits[..n].iter().map(|h| Statement::of(&h.record.content)).collect();
    for j in 1..n {
        let newer = &hits[j].record;
        let target = (0..j).find(|&i| {
            let older = &hits[i].record;
            older.superseded_by == Some(newer.id)
                || (older.created_ms < newer.created_ms
                    && older.superseded_by.is_none()
                    && may_supersede(older, newer)
                    && relation(&statements[i], &statements[j], threshold) == Relation::Update)
        });
        if let Some(i) = target {
            let hit = hits.remove(j);
            hits.insert(i, hit);
            let st = statements.remove(j);
            statements.insert(i, st);
        }
    }
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

/// Two records are the same memory when what was written, where and by whom match.
pub(super) fn same_identity(a: &MemoryRecord, b: &MemoryRecord) -> bool {
    (a.id, &a.namespace, &a.content, a.kind, a.created_ms, &a.provenance)
        == (b.id, &b.namespace, &b.content, b.kind, b.created_ms, &b.provenance)
}
