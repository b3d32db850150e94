//! Hybrid ranking: BM25 fused with embedding cosine, each normalised per query.
//!
//! Raw scores do not mix: BM25 is unbounded and always returns something for any shared
//! word, and e5's cosines sit in a narrow band (0.7-0.9) whose level depends on the query
//! and the languages involved (a Chinese query scores every Chinese record higher than any
//! English one). So, per query:
//! - cosine becomes a z-score against the model's crowd (calibration.rs): the query's
//!   cosines to reference passages about unrelated things in the record's script. "How far
//!   above unrelated text of its language" is comparable across languages (which is what
//!   makes cross-lingual matches rank) and across stores: a store of four records measures
//!   its records against the same crowd as one of 100k (a crowd made of the store's own
//!   records had no crowd in a small store, and outranked the answer in a store full of
//!   one topic: issue 31);
//! - BM25 is divided by the query's best BM25 (the lexical evidence relative to the best
//!   lexical match);
//! - score = z + `lexical_weight` x bm25 share; a record is kept only if its z clears the
//!   floor (clearly about the query), or `lexical_floor` while it also matches words. A
//!   query about nothing then returns nothing instead of the least bad records;
//! - the floor grows with the store: the best of n unrelated records stands about
//!   sqrt(2 ln n) above the crowd by chance alone, so the floors (measured on a store of
//!   [`FLOORS_MEASURED_AT`] records) scale with sqrt(ln n);
//! - the floor depends on the query: a query that shares no word with any record of the
//!   namespace (BM25 finds nothing) may be about nothing stored here, so a record needs
//!   the full `floor` on meaning alone; a query that shares words with some records is
//!   asked in this store's vocabulary, and a paraphrase of one record (which by definition
//!   shares no word with it, only with its neighbours) needs `floor_with_words`.
//!
//! Without a model, search is the BM25 ranking unchanged.

use std::collections::HashMap;

use anyhow::{Result, anyhow};

use redb::Database;

use super::calibration::{Crowd, script_slot};
use super::index::MemoryIndex;
use super::records::{MemoryRecord, SearchFilter};
use super::vectors::{Script, Vectors};

/// Candidates taken from each side before fusing.
const CANDIDATES: usize = 100;

/// The store size the floors were measured at (tests/memory_eval's tuning half).
pub const FLOORS_MEASURED_AT: f32 = 263.0;

/// The fusion's constants (chosen on tests/memory_eval's tuning half only; see
/// tests/memory_quality.rs for the held-out half and the second set).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FusionParams {
    pub lexical_weight: f32,
    /// z a record needs on meaning alone when BM25 finds no record for the query.
    pub floor: f32,
    /// z a record needs on meaning alone when BM25 finds some record for the query.
    pub floor_with_words: f32,
    /// z a record that also matches words needs.
    pub lexical_floor: f32,
    /// Exponent of a query word's [`specificity`] weight on its BM25 (0: no weighting).
    pub specificity: f32,
}

impl Default for FusionParams {
    fn default() -> FusionParams {
        FusionParams {
            // Chosen on the tuning half only, over weights 0/0.3/0.7 and floors 2.5-5: the
            // best R@5 (0.867-0.880: 0.3 and `floor_with_words` 3.0 won), then the lowest
            // `floor` that leaves at least half of its queries about nothing unanswered (4.5:
            // every floor costs recall elsewhere). The held-out half and the second set were
            // measured after, not tuned on (tests/memory_quality.rs).
            lexical_weight: 0.3,
            floor: 4.5,
            floor_with_words: 3.0,
            lexical_floor: 0.0,
            // Measured on tests/memory_eval (`fusion_sweep`, fifth value): R@5 is 0.885 for
            // every exponent 0-3; MRR 0.768 at 0, 0.765 at 0.75-1.0, 0.770 at 1.5-2.0. Below
            // 0.5 "like" still outweighs "indentation" in tests/memory_recall.rs.
            specificity: 1.5,
        }
    }
}

/// A query word's weight on its BM25 from how rare it is in ordinary text (its surprisal
/// under the model's unigram tokenizer, in nats; a typical word is ~12): BM25's idf is
/// only this store's, and in a small store "like" and "indentation" are equally rare,
/// though a question that says both is about indentation.
fn specificity(surprisal: f32, exponent: f32) -> f32 {
    (surprisal.clamp(6.0, 24.0) / 12.0).powf(exponent)
}

/// Does `content` hold every one of `terms` (as analyzed)?
fn holds_every_term(content: &str, terms: &[String]) -> bool {
    let own = crate::search::analyze(content);
    terms.iter().all(|t| own.contains(t))
}

/// Does `r` pass the parts of `filter` the vector side cannot check by itself?
fn matches(r: &MemoryRecord, filter: &SearchFilter, now: u64) -> bool {
    r.is_live(now)
        && filter.namespace.as_ref().is_none_or(|ns| &r.namespace == ns)
        && (filter.kinds.is_empty() || filter.kinds.contains(&r.kind))
        && r.priority >= filter.min_priority
        && filter.session.as_ref().is_none_or(|s| &r.session == s || r.provenance.iter().any(|p| &p.session == s))
        && filter.skill.as_ref().is_none_or(|s| r.skills().any(|k| k == s))
}

/// Keep the `n` highest-scoring of `scored` (in no order).
fn keep_best(scored: &mut Vec<(u64, f32)>, n: usize) {
    if n > 0 && n < scored.len() {
        scored.select_nth_unstable_by(n - 1, |a, b| b.1.total_cmp(&a.1));
        scored.truncate(n);
    }
}

/// What a ranking reads: the store's parts, lent by the store for one search.
pub(super) struct Sources<'a> {
    pub index: &'a MemoryIndex,
    pub vectors: &'a Vectors,
    pub db: &'a Database,
    pub fusion: FusionParams,
    /// The records of some ids (those that exist, any state).
    pub load: &'a dyn Fn(Vec<u64>) -> Result<Vec<MemoryRecord>>,
}

impl Sources<'_> {
    /// Ids of the records relevant to `query` under `filter`, best first, with their scores.
    pub(super) fn ranked(&self, query: &str, filter: &SearchFilter, now: u64, limit: usize) -> Result<Vec<(u64, f32)>> {
        // A query with no terms (only question words, particles, "the user") asks about
        // nothing: the vectors of such a question sit near every record, so none is evidence.
        let terms = super::index::query_terms(query);
        let has_terms = !terms.is_empty();
        let Some(semantic) = self.vectors.semantic.as_ref().filter(|_| has_terms) else {
            return self.index.search(query, filter, now, limit);
        };
        let p = self.fusion;
        let weigh = |word: &str| specificity(semantic.model.surprisal(word), p.specificity);
        let lexical = self.index.search_weighted(query, Some(&weigh), filter, now, CANDIDATES.max(limit))?;
        let q = self.vectors.query_embedding(&semantic.model, query.trim());
        // Approximate cosines of every record in the namespace (byte vectors, see vectors.rs).
        let dense = semantic
            .table
            .read()
            .map_err(|_| anyhow!("memory vectors poisoned"))?
            .scan(&q, filter.namespace.as_deref());
        let crowd = semantic.calibration.crowd(&q);
        let z_of = |c: f32, s: Script| {
            let Crowd { mean, std } = crowd[script_slot(s)];
            (c - mean) / std
        };
        // The floors grow with the records a query is measured against (see the module doc).
        let scale = ((dense.len().max(2) as f32).ln() / FLOORS_MEASURED_AT.ln()).sqrt();
        // The dense candidates are the best by z, not by raw cosine: a Chinese query's
        // cosine to every Chinese record is above its cosine to any English one, so a
        // cut by cosine would leave no English record to match it across languages. Twice
        // as many as fused, so that the byte rounding cannot push a close one out.
        let mut by_z: Vec<(u64, f32)> = dense.iter().map(|d| (d.id, z_of(d.cosine, d.script))).collect();
        drop(dense);
        keep_best(&mut by_z, 2 * CANDIDATES.max(limit));
        // The final cosines of the candidates and the lexical matches are the exact ones.
        let ids = by_z.iter().map(|(id, _)| *id).chain(lexical.iter().map(|(id, _)| *id));
        let cos_of = self.vectors.exact_cosines(&self.db, &q, ids)?;
        let mut dense: Vec<(u64, f32)> =
            by_z.iter().filter_map(|(id, _)| cos_of.get(id).map(|&(c, s)| (*id, z_of(c, s)))).collect();
        keep_best(&mut dense, CANDIDATES.max(limit));
        let best_bm25 = lexical.iter().map(|(_, s)| *s).fold(0f32, f32::max);
        let floor = scale * if lexical.is_empty() { p.floor } else { p.floor_with_words };
        let bm25: HashMap<u64, f32> = lexical.iter().copied().collect();
        let mut ids: Vec<u64> = lexical.iter().map(|(id, _)| *id).collect();
        ids.extend(dense.iter().map(|(id, _)| *id).filter(|id| !bm25.contains_key(id)));
        let mut out = Vec::new();
        for r in (self.load)(ids)? {
            if !matches(&r, filter, now) {
                continue;
            }
            let share = bm25.get(&r.id).map(|s| if best_bm25 > 0.0 { s / best_bm25 } else { 0.0 });
            // A record without a vector (being embedded) competes on words alone.
            let z = match cos_of.get(&r.id) {
                Some(&(c, script)) => z_of(c, script),
                None => p.lexical_floor,
            };
            // A record that holds every word of the query is kept whatever its meaning
            // scores: hybrid search never drops what words alone find best.
            let keep =
                z >= floor || (share.is_some() && (z >= p.lexical_floor || holds_every_term(&r.content, &terms)));
            if keep {
                out.push((r.id, z + p.lexical_weight * share.unwrap_or(0.0)));
            }
        }
        out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        out.truncate(limit);
        Ok(out)
    }
}
