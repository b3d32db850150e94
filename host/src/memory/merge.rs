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
    if old.units.is_empty() || new.units.is_empty() {
        return Relation::Unrelated;
    }
    // How much of each is shared, in content units (Chinese characters: robust to word
    // order and to a value swapped in the middle)...
    let (min, max) = (old.units.len().min(new.units.len()), old.units.len().max(new.units.len()));
    let cover_min = shared.len() as f64 / min as f64;
    let cover_max = shared.len() as f64 / max as f64;
    // ...and in words (Chinese as runs of shared character pairs, see `Statement::subject`):
    // a shared project name alone is one word, not five units.
    let shared_pairs = old.subject.intersection(&new.subject).count() as f64;
    let pair_cover_min = shared_pairs / old.subject.len().min(new.subject.len()).max(1) as f64;
    let pair_cover_max = shared_pairs / old.subject.len().max(new.subject.len()).max(1) as f64;
    let substituted = only_old > 0 && only_new > 0;
    // Only the relation verb differs ("lives in Paris" / "likes Paris"): another statement
    // about the same object, not a new value of this one.
    let other_predicate = substituted
        && old.units.difference(&new.units).all(|u| old.predicates.contains(u))
        && new.units.difference(&old.units).all(|u| new.predicates.contains(u));
    if other_predicate && old.values == new.values && !new.marker {
        return Relation::Unrelated;
    }
    // A shared attribute with little else changed, or with a change marker and half the
    // words shared ("林现在是赵磊的导师" / "林是王芳的导师，每两周…").
    let attribute = (shared.iter().any(|u| ATTRIBUTES.contains(&u.as_str()))
        || old.attributes.intersection(&new.attributes).next().is_some())
        && ((only_old <= 2 && only_new <= 2) || (new.marker && cover_min >= 0.5));
    // Numbers that name things ("rule 3", "ticket 42") are part of the subject, unless the
    // new record says it changes something ("now version 3.12").
    let ids_agree = old.ids == new.ids || new.marker;
    // One shared word (a project name) is a subject only when it is most of both records
    // ("now prefers spaces" / "prefers tabs"; 林喜欢用空格缩进 / 林不喜欢用空格缩进).
    // Counting words walks the pairs: only once the cover says it may matter.
    let overlap = if new.marker {
        cover_min >= 0.5 && cover_max >= 0.34 && (cover_max >= 0.5 || old.shared_words(new) >= 2)
    } else {
        // Without a marker the pairs must be shared as widely as the characters: two facts
        // of one project share many characters but few pairs beyond the name.
        cover_min >= 0.6
            && cover_max >= 0.5
            && pair_cover_min >= 0.5
            && pair_cover_max >= 0.5
            && (pair_cover_max >= 0.75 || old.shared_words(new) >= 2)
    };
    let same_subject = ids_agree && (attribute || overlap);
    // A marker with something new ("is now Elena Rossi; Tom Becker left") changes the value
    // even where every old word is still there.
    let value_changed = old.values != new.values
        || old.ids != new.ids
        || old.negated() != new.negated()
        || substituted
        || (new.marker && only_new > 0);
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

#[cfg(test)]
mod tests {
    use super::{Relation, relation};
    use crate::memory::statement::Statement;

    fn rel(old: &str, new: &str) -> Relation {
        relation(&Statement::of(old), &Statement::of(new), 0.75)
    }

    #[test]
    fn a_shared_chinese_project_name_alone_is_no_shared_subject() {
        // Two facts about one project (the stop 18 false update), and two more of that kind.
        assert_eq!(
            rel(
                "青鸟小程序每次发版都要经过微信审核，一般需要一到两天，要提前提交。",
                "青鸟小程序每两周发一个版本，周四提交审核。"
            ),
            Relation::Unrelated
        );
        assert_eq!(
            rel("青鸟小程序的设计师是陈静，设计稿放在蓝湖。", "青鸟小程序的测试由测试组的刘洋负责，用例写在禅道里。"),
            Relation::Unrelated
        );
        // The same project's real updates still are.
        assert_eq!(
            rel("青鸟小程序的日活用户大约八万人。", "青鸟小程序的日活用户已经增长到十五万人。"),
            Relation::Update
        );
        assert_eq!(
            rel("青鸟小程序的会员积分规则是每消费一元积一分。", "青鸟小程序的会员积分规则改成了每消费一元积两分。"),
            Relation::Update
        );
        assert_eq!(rel("用户的编辑器是vim", "用户的编辑器是helix"), Relation::Update);
    }

    #[test]
    fn another_predicate_is_another_statement_and_a_synonym_restates() {
        assert_eq!(rel("Lin lives in Paris", "Lin likes Paris"), Relation::Unrelated);
        assert_eq!(rel("Lin uses Zed for Rust", "Lin hates Zed for Rust"), Relation::Unrelated);
        assert_eq!(rel("林住在巴黎", "林喜欢巴黎"), Relation::Unrelated);
        assert_eq!(rel("Lin lives in Paris", "Lin lives in Berlin"), Relation::Update);
        assert_eq!(rel("Lin prefers tabs for Python", "Lin likes tabs for Python"), Relation::Restatement);
        assert_eq!(rel("The build cache is large", "The build cache is big"), Relation::Restatement);
        assert_eq!(rel("林偏好用tabs缩进", "林喜欢用tabs缩进"), Relation::Restatement);
        // A negated synonym is still a change of value.
        assert_eq!(rel("Lin prefers tabs for Python", "Lin does not like tabs for Python"), Relation::Update);
    }

    #[test]
    fn a_bare_measurement_is_a_value_and_an_identifier_stays_one() {
        assert_eq!(rel("The API rate limit is 500", "The API rate limit is 800"), Relation::Update);
        assert_eq!(rel("网关的限流是500", "网关的限流是800"), Relation::Update);
        assert_eq!(rel("#17 fixes the login bug", "#18 fixes the login bug"), Relation::Unrelated);
        assert_eq!(rel("第3步先备份数据库", "第4步先备份数据库"), Relation::Unrelated);
        assert_eq!(rel("Ticket 41 was a baud mismatch", "Ticket 42 was a baud mismatch"), Relation::Unrelated);
    }
}
