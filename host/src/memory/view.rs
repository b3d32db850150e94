//! The MEMORY.md view: the most valuable live records of a namespace, grouped in sections,
//! within a hard token budget (counted with the real tokenizer on the rendered text).
//!
//! Priority-5 records are always in. Then each section gets its reserved share of the
//! budget, filled by priority then importance (so standing preferences and a project's
//! facts are not crowded out by a burst of fresh task results), and the rest is taken by
//! importance score (see [`MemoryRecord::importance_at`]) while it fits. Writes that would make the priority-5
//! records alone overflow the budget are refused by the store, so the view never has to
//! drop one silently.
//!
//! Records a skill wrote take at most a share of the budget per skill (the policy's
//! `[memory] skill_view_share`), so a skill flooding memory cannot crowd the user's records
//! (or other skills') out of the view; the user's own records are never limited by it.

use serde::Serialize;

use super::records::{MemoryKind, MemoryRecord, is_reserved_source};
use super::tokens::count_tokens;

/// The smallest bullet (`- [#1 p0] x\n`) is more than this many tokens.
const MIN_LINE_TOKENS: usize = 8;
/// Records tried in a row without fitting before the rest are left out.
const MAX_MISSES: usize = 64;

pub const SECTIONS: [&str; 4] = ["User preferences", "Project knowledge", "Pitfalls", "Other"];

fn section_of(kind: MemoryKind) -> usize {
    match kind {
        MemoryKind::Preference => 0,
        MemoryKind::Fact | MemoryKind::TaskResult | MemoryKind::Snapshot => 1,
        MemoryKind::Pitfall => 2,
        MemoryKind::General => 3,
    }
}

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct ViewSection {
    pub title: String,
    pub records: Vec<u64>,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct MemoryView {
    pub namespace: String,
    /// The Markdown that is injected into the prompt.
    pub text: String,
    /// cl100k_base tokens of `text`.
    pub tokens: usize,
    pub budget: usize,
    pub sections: Vec<ViewSection>,
    /// How many live records did not fit.
    pub omitted: usize,
    /// Only possible when priority-5 records alone exceed the budget (e.g. after lowering it).
    pub over_budget: bool,
}

impl MemoryView {
    pub fn included(&self) -> impl Iterator<Item = u64> + '_ {
        self.sections.iter().flat_map(|s| s.records.iter().copied())
    }
}

/// One bullet: the id and priority let a model or user refer to the record. A skill's
/// record that reads like instructions is quoted data (see [`super::instructions`]).
pub(super) fn line(r: &MemoryRecord) -> String {
    format!("- [#{} p{}] {}\n", r.id, r.priority, super::instructions::prompt_content(r))
}

fn header(namespace: &str) -> String {
    format!("# MEMORY.md ({namespace})\n")
}

fn render_text(namespace: &str, chosen: &[&MemoryRecord]) -> (String, Vec<ViewSection>) {
    let mut text = header(namespace);
    let mut sections = Vec::new();
    for (i, title) in SECTIONS.iter().enumerate() {
        let members: Vec<&&MemoryRecord> = chosen.iter().filter(|r| section_of(r.kind) == i).collect();
        if members.is_empty() {
            continue;
        }
        text.push_str(&format!("\n## {title}\n"));
        for r in &members {
            text.push_str(&line(r));
        }
        sections.push(ViewSection { title: title.to_string(), records: members.iter().map(|r| r.id).collect() });
    }
    (text, sections)
}

/// Share of the budget (after the frame) held for each section, in [`SECTIONS`] order; the
/// rest (20%) and whatever a section does not use go to the best remaining records of any
/// section. Without it, recent task results (high category weight, fresh) fill the view
/// and standing preferences and a project's base facts never make it in.
const SECTION_SHARE: [f64; 4] = [0.25, 0.30, 0.15, 0.10];

/// The skill whose share a record counts against: the skill that first wrote it, unless
/// the user wrote it too or it came from a source that is not a skill (an MCP client, an
/// import, the host).
fn skill_of(r: &MemoryRecord) -> Option<&str> {
    if r.is_user_written() {
        return None;
    }
    let first = &r.provenance.first()?.skill;
    (!is_reserved_source(first) && !first.contains(':')).then_some(first.as_str())
}

/// Tokens each skill's records use in the view, against the per-skill share.
struct SkillShares<'a> {
    cap: usize,
    used: std::collections::HashMap<&'a str, usize>,
    /// Skills a record of did not fit: the rest of theirs are skipped untokenized.
    full: std::collections::HashSet<&'a str>,
}

impl<'a> SkillShares<'a> {
    /// Is `r` still worth tokenizing? Records of no skill always are.
    fn admits(&self, r: &MemoryRecord) -> bool {
        match skill_of(r) {
            Some(skill) => !self.full.contains(skill),
            None => true,
        }
    }

    /// Take `cost` from `r`'s skill share; false (and the skill is full) if it does not fit.
    fn take(&mut self, r: &'a MemoryRecord, cost: usize) -> bool {
        let Some(skill) = skill_of(r) else { return true };
        let used = self.used.entry(skill).or_default();
        if *used + cost > self.cap {
            self.full.insert(skill);
            return false;
        }
        *used += cost;
        true
    }
}

/// Within a section's reserved room: higher priority first; in project knowledge, facts
/// before task results and snapshots; then importance.
fn reserved_rank(r: &MemoryRecord, importance: f64) -> (u8, bool, f64) {
    (r.priority, r.kind == MemoryKind::Fact, importance)
}

/// Render `live` records within `budget` tokens. `line_tokens` counts one bullet (callers
/// cache it); the final text is always counted in full.
///
/// Priority 5 first, then each section's reserved room (see [`SECTION_SHARE`]), then the
/// rest by importance while it fits; a skill's records below priority 5 within
/// `skill_share` of the room (see [`skill_of`]).
pub(super) fn render(
    namespace: &str,
    live: &[&MemoryRecord],
    budget: usize,
    skill_share: f64,
    now_ms: u64,
    line_tokens: &mut dyn FnMut(&MemoryRecord) -> usize,
) -> MemoryView {
    let mut ranked: Vec<(&MemoryRecord, f64)> = live.iter().map(|r| (*r, r.importance_at(now_ms))).collect();
    // Protected first, then by score; newer and then lower id break ties so the view is stable.
    ranked.sort_by(|a, b| {
        (b.0.priority == 5)
            .cmp(&(a.0.priority == 5))
            .then(b.1.total_cmp(&a.1))
            .then(b.0.updated_ms.cmp(&a.0.updated_ms))
            .then(a.0.id.cmp(&b.0.id))
    });
    let frame =
        count_tokens(&header(namespace)) + SECTIONS.iter().map(|t| count_tokens(&format!("\n## {t}\n"))).sum::<usize>();
    let mut used = frame;
    let mut chosen: Vec<&MemoryRecord> = Vec::new();
    let mut taken = vec![false; ranked.len()];
    let mut section_used = [0usize; 4];
    // Priority 5 is always in.
    for (i, (r, _)) in ranked.iter().enumerate() {
        if r.priority == 5 {
            let cost = line_tokens(r);
            used += cost;
            section_used[section_of(r.kind)] += cost;
            chosen.push(r);
            taken[i] = true;
        }
    }
    // Each section's reserved room, filled by its own ranking.
    let room = budget.saturating_sub(frame) as f64;
    let mut shares = SkillShares {
        cap: (room * skill_share.clamp(0.0, 1.0)) as usize,
        used: Default::default(),
        full: Default::default(),
    };
    for (section, share) in SECTION_SHARE.iter().enumerate() {
        let reserved = (room * share) as usize;
        let mut members: Vec<usize> =
            (0..ranked.len()).filter(|&i| !taken[i] && section_of(ranked[i].0.kind) == section).collect();
        members.sort_by(|&a, &b| {
            let (ra, rb) = (reserved_rank(ranked[a].0, ranked[a].1), reserved_rank(ranked[b].0, ranked[b].1));
            rb.0.cmp(&ra.0).then(rb.1.cmp(&ra.1)).then(rb.2.total_cmp(&ra.2)).then(a.cmp(&b))
        });
        let mut misses = 0;
        for i in members {
            if misses >= MAX_MISSES
                || section_used[section] + MIN_LINE_TOKENS > reserved
                || used + MIN_LINE_TOKENS > budget
            {
                break;
            }
            let r = ranked[i].0;
            if !shares.admits(r) {
                continue;
            }
            let cost = line_tokens(r);
            if section_used[section] + cost <= reserved && used + cost <= budget && shares.take(r, cost) {
                used += cost;
                section_used[section] += cost;
                chosen.push(r);
                taken[i] = true;
            } else {
                misses += 1;
            }
        }
    }
    // The rest by importance while it fits. Once the budget is nearly full, what is left
    // rarely fits: stop trying after a run of misses instead of tokenizing every record.
    let mut misses = 0;
    for (i, (r, _)) in ranked.iter().enumerate() {
        if taken[i] {
            continue;
        }
        if misses >= MAX_MISSES || used + MIN_LINE_TOKENS > budget {
            break;
        }
        if !shares.admits(r) {
            continue;
        }
        let cost = line_tokens(r);
        if used + cost <= budget && shares.take(r, cost) {
            used += cost;
            chosen.push(r);
            taken[i] = true;
        } else {
            misses += 1;
        }
    }
    let mut omitted = taken.iter().filter(|t| !**t).count();
    loop {
        let (text, sections) = render_text(namespace, &chosen);
        let tokens = count_tokens(&text);
        // The bullet sum is an estimate (BPE merges across lines); the full count decides.
        let droppable = chosen.iter().rposition(|r| r.priority < 5);
        match droppable {
            Some(i) if tokens > budget => {
                chosen.remove(i);
                omitted += 1;
            }
            _ => {
                return MemoryView {
                    namespace: namespace.to_string(),
                    over_budget: tokens > budget,
                    text,
                    tokens,
                    budget,
                    sections,
                    omitted,
                };
            }
        }
    }
}

/// Tokens the priority-5 records of `live` take when rendered alone.
pub(super) fn protected_tokens(namespace: &str, live: &[MemoryRecord]) -> usize {
    let protected: Vec<&MemoryRecord> = live.iter().filter(|r| r.priority == 5).collect();
    count_tokens(&render_text(namespace, &protected).0)
}
