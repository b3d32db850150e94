//! Reading the store: search (hybrid, or lexical without a model), recall for prompts,
//! references counted once per session, the MEMORY.md view, the archive, daily notes and
//! session working memory. Writes are in `writes.rs`.

use std::collections::HashMap;

use anyhow::{Context as _, Result, anyhow};
use redb::{ReadableDatabase, ReadableTable};

use super::daily::{self, DailyEntry};
use super::hybrid::{self};
use super::index::DailyHit;
use super::merge::{self};
use super::records::{ArchiveEntry, MemoryRecord, SearchFilter, SearchHit, SearchOrder};
use super::schema::{ARCHIVE, BY_NAMESPACE, META, RECORDS, SESSION_KV, decode_record, encode};
use super::store::{MAX_SEARCH_LIMIT, Store, validate_namespace};
use super::tokens::count_tokens;
use super::view::{self, MemoryView};

/// Search hits compared for "the newer of two records about the same subject first": the
/// first ten, fetched whatever the limit, so that the order of the first hits does not
/// depend on how many were asked for (recall's 20 and a caller's 10 see the same top five).
const PREFER_NEWER_WINDOW: usize = 10;
/// Recall: a hit is relevant when its score is at least this share of the best hit's.
const RECALL_RELATIVE_SCORE: f32 = 0.5;
/// Recall: how many search hits are looked at (the recent records among them are skipped,
/// so more than the relevant part's five).
const RECALL_RANKS: usize = 20;
/// Recall: records of each part (the most recent, the relevant).
const RECALL_PART: usize = 5;
/// Recall: for the places recent records freed, hits within this ratio of each other's
/// scores count as equally relevant (and priority decides).
const RECALL_TIE: f32 = 0.9;
/// Recall: scores this close (relative) are equal: search cannot tell the hits apart.
const RECALL_EXACT_TIE: f32 = 1e-4;

impl Store {
    /// Live records relevant to `query` under `filter` (at most [`MAX_SEARCH_LIMIT`]).
    /// With [`SearchOrder::PriorityThenRecency`], the 50 most relevant are ordered by
    /// priority, then recency.
    pub fn search(&self, query: &str, filter: &SearchFilter, limit: usize) -> Result<Vec<SearchHit>> {
        if let Some(ns) = &filter.namespace {
            validate_namespace(ns)?;
        }
        let limit = limit.min(MAX_SEARCH_LIMIT);
        let now = self.now_ms();
        let fetch = match filter.order {
            SearchOrder::Relevance => limit.max(PREFER_NEWER_WINDOW),
            SearchOrder::PriorityThenRecency => (limit.saturating_mul(5)).max(50),
        };
        let sources = hybrid::Sources {
            index: &self.index,
            vectors: &self.vectors,
            db: &self.db,
            fusion: self.config.fusion,
            load: &|ids| self.load(ids),
        };
        let ranked = sources.ranked(query, filter, now, fetch)?;
        let scores: HashMap<u64, f32> = ranked.iter().copied().collect();
        let mut hits: Vec<SearchHit> = self
            .load(ranked.iter().map(|(id, _)| *id))?
            .into_iter()
            .filter(|r| r.is_live(now))
            .map(|r| SearchHit { score: scores.get(&r.id).copied().unwrap_or(0.0), record: r })
            .collect();
        if filter.order == SearchOrder::PriorityThenRecency {
            hits.sort_by(|a, b| {
                b.record.priority.cmp(&a.record.priority).then(b.record.created_ms.cmp(&a.record.created_ms))
            });
        } else {
            merge::prefer_newer(&mut hits, self.config.merge_similarity, PREFER_NEWER_WINDOW);
        }
        hits.truncate(limit);
        tracing::debug!(hits = hits.len(), limit, order = ?filter.order, "memory search");
        Ok(hits)
    }

    /// Daily-note entries relevant to `query`.
    pub fn search_daily(&self, query: &str, limit: usize) -> Result<Vec<DailyHit>> {
        self.index.search_daily(query, limit.min(MAX_SEARCH_LIMIT))
    }

    /// What goes into a prompt besides MEMORY.md: the 5 most recent records of the
    /// namespace plus the 5 records most relevant to `query` that are not among them,
    /// highest priority first. Relevant = the best-ranked hits of [`Store::search`] (lexical
    /// or fused, newer-first applied) scoring at least [`RECALL_RELATIVE_SCORE`] of the best
    /// hit; the best hit itself is always in. Sharing one word is not enough.
    ///
    /// Relevance picks the records, priority orders them and breaks near-ties only for the
    /// places search's top five leave free (see [`relevant_by_priority`]): picking the
    /// highest priority among a wider relevant set let a project's many priority-4 facts,
    /// which all share its name, push out records search ranks in its top five, so recall
    /// found less than search did on tests/memory_eval.
    /// Counts as a reference for each returned record.
    pub fn recall(&self, session: &str, namespace: &str, query: &str) -> Result<Vec<MemoryRecord>> {
        let now = self.now_ms();
        let mut recent = Vec::new();
        {
            let txn = self.db.begin_read()?;
            let by_ns = txn.open_multimap_table(BY_NAMESPACE)?;
            let records = txn.open_table(RECORDS)?;
            for id in by_ns.get(namespace)?.rev() {
                let id = id?.value();
                let Some(v) = records.get(id)? else { continue };
                let r = decode_record(v.value(), id)?;
                if r.is_live(now) {
                    recent.push(r);
                    if recent.len() == RECALL_PART {
                        break;
                    }
                }
            }
        }
        let hits = self.search(query, &SearchFilter::namespace(namespace), RECALL_RANKS)?;
        let recent_ids: Vec<u64> = recent.iter().map(|r| r.id).collect();
        let mut out = recent;
        out.extend(relevant_by_priority(hits, &recent_ids, RECALL_PART));
        self.touch_in_session(session, &out.iter().map(|r| r.id).collect::<Vec<_>>())?;
        Ok(out)
    }

    /// Count a reference to each record, at most once per record per session (an agent
    /// run, a sandbox session, one CLI call), so a skill searching in a loop cannot inflate
    /// importance while a long-lived server still counts every new session. Not fsynced: a
    /// crash may lose a few counts, never a record.
    pub fn touch_in_session(&self, session: &str, ids: &[u64]) -> Result<()> {
        let fresh: Vec<u64> = match self.touched.lock() {
            Ok(mut refs) => refs.fresh(session, ids),
            Err(_) => return Ok(()),
        };
        if fresh.is_empty() {
            return Ok(());
        }
        // In the write order, like every other write (the cache below must follow commits).
        let _written = self.write_guard();
        let mut touched = Vec::new();
        let mut txn = self.db.begin_write()?;
        txn.set_durability(redb::Durability::None).map_err(|e| anyhow!("memory store: {e}"))?;
        {
            let mut t = txn.open_table(RECORDS)?;
            for id in fresh {
                let found = t.get(id)?.map(|v| decode_record(v.value(), id)).transpose()?;
                if let Some(mut r) = found {
                    r.references = r.references.saturating_add(1);
                    r.referenced_ms = Some(self.now_ms());
                    t.insert(id, encode(&r)?.as_slice())?;
                    touched.push(r);
                }
            }
        }
        txn.commit().context("cannot commit to the memory store")?;
        if let Ok(mut cache) = self.records_cache.lock() {
            for r in touched {
                if let Some(ns) = cache.get_mut(&r.namespace) {
                    ns.insert(r.id, r);
                }
            }
        }
        Ok(())
    }

    pub(super) fn cached_line_tokens(&self, r: &MemoryRecord) -> usize {
        let key = (r.id, r.updated_ms, r.priority);
        if let Ok(cache) = self.line_tokens.lock()
            && let Some(n) = cache.get(&key)
        {
            return *n;
        }
        let n = count_tokens(&view::line(r));
        if let Ok(mut cache) = self.line_tokens.lock() {
            cache.insert(key, n);
        }
        n
    }

    /// The MEMORY.md view of `namespace`.
    pub fn view(&self, namespace: &str) -> Result<MemoryView> {
        validate_namespace(namespace)?;
        let now = self.now_ms();
        let generation = self.generation()?;
        if let Ok(views) = self.views.lock()
            && let Some((g, valid_until, v)) = views.get(namespace)
            && *g == generation
            && now < *valid_until
        {
            return Ok(v.clone());
        }
        let (view, next_expiry) = self.with_namespace(namespace, |records| {
            let live: Vec<&MemoryRecord> = records.values().filter(|r| r.is_live(now)).collect();
            let view = view::render(
                namespace,
                &live,
                self.config.budget_tokens,
                self.config.skill_view_share,
                now,
                &mut |r| self.cached_line_tokens(r),
            );
            (view, live.iter().filter_map(|r| r.expires_ms).min().unwrap_or(u64::MAX))
        })?;
        // Valid until the next hour (recency moves slowly) or the next expiry, whichever is first.
        let valid_until = (now / 3_600_000 + 1).saturating_mul(3_600_000).min(next_expiry);
        if let Ok(mut views) = self.views.lock() {
            views.insert(namespace.to_string(), (generation, valid_until, view.clone()));
        }
        Ok(view)
    }

    pub(super) fn generation(&self) -> Result<u64> {
        let txn = self.db.begin_read()?;
        Ok(txn.open_table(META)?.get("generation")?.map(|v| v.value()).unwrap_or(0))
    }

    /// The archive, oldest first.
    pub fn archive(&self) -> Result<Vec<ArchiveEntry>> {
        let txn = self.db.begin_read()?;
        let t = txn.open_table(ARCHIVE)?;
        let mut out = Vec::new();
        for row in t.iter()? {
            let (k, v) = row?;
            out.push(
                serde_json::from_slice(v.value()).with_context(|| format!("archive entry {} is corrupt", k.value()))?,
            );
        }
        Ok(out)
    }

    /// Entries of the daily note of `date` (default: today).
    pub fn daily(&self, date: Option<&str>) -> Result<(String, Vec<DailyEntry>)> {
        let date = date.map(str::to_string).unwrap_or_else(|| daily::date_of(self.now_ms()));
        let entries = self.daily.read(&date)?;
        Ok((date, entries))
    }

    /// The sandbox's search: live records of `namespace`, each counted as a reference of `session`.
    pub fn search_in_session(
        &self,
        session: &str,
        namespace: &str,
        query: &str,
        limit: usize,
    ) -> Result<Vec<(MemoryRecord, f32)>> {
        let hits = self.search(query, &SearchFilter::namespace(namespace), limit)?;
        self.touch_in_session(session, &hits.iter().map(|h| h.record.id).collect::<Vec<_>>())?;
        Ok(hits.into_iter().map(|h| (h.record, h.score)).collect())
    }

    pub fn list(&self, namespace: &str) -> Result<Vec<MemoryRecord>> {
        self.load(self.ids_of_namespace(namespace)?)
    }

    pub fn session_get(&self, session: &str, key: &str) -> Result<Option<String>> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(SESSION_KV)?;
        Ok(table.get((session, key))?.map(|v| v.value().to_string()))
    }

    pub fn session_set(&self, session: &str, key: &str, value: &str) -> Result<()> {
        let txn = self.begin()?;
        txn.txn.open_table(SESSION_KV)?.insert((session, key), value)?;
        txn.commit()?;
        Ok(())
    }

    pub fn session_keys(&self, session: &str) -> Result<Vec<String>> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(SESSION_KV)?;
        let mut keys = Vec::new();
        for row in table.range((session, "")..)? {
            let (k, _) = row?;
            let (s, key) = k.value();
            if s != session {
                break;
            }
            keys.push(key.to_string());
        }
        Ok(keys)
    }
}

/// A search hit and its rank in search's order.
type RankedHit = (usize, SearchHit);

/// The recall rule's relevant part: of `hits` (best first), those not in `shown` that score
/// at least [`RECALL_RELATIVE_SCORE`] of the best (the best hit always counts). Search's
/// first `n` of these are recalled, except that hits tied with the lowest of them (equal
/// scores, which search cannot tell apart: a lexical store with records holding the same
/// words) compete for those places by priority. The places that shown records free go to
/// the next relevant hits, where priority decides among those about as good as the last
/// one that fits (within [`RECALL_TIE`] of its score). Then highest priority first, rank
/// breaking ties. So recall finds whatever search's top `n` finds, unless it is shown, a
/// weak match or an exact tie of lower priority.
///
/// Letting priority compete for search's own places among near-ties lost records: a
/// project's priority-4 facts, which all share its name, pushed out the one record search
/// ranked fifth, 3 % above them (tests/memory_eval, "atlas-web 的端到端测试用什么工具？").
fn relevant_by_priority(hits: Vec<SearchHit>, shown: &[u64], n: usize) -> Vec<MemoryRecord> {
    let Some(best) = hits.first().map(|h| h.score) else { return Vec::new() };
    let (mut chosen, mut rest): (Vec<RankedHit>, Vec<RankedHit>) = hits
        .into_iter()
        .enumerate()
        .filter(|(rank, h)| *rank == 0 || best <= 0.0 || h.score >= best * RECALL_RELATIVE_SCORE)
        .filter(|(_, h)| !shown.contains(&h.record.id))
        .partition(|(rank, _)| *rank < n);
    if let Some(low) = chosen.iter().map(|(_, h)| h.score).reduce(f32::min) {
        let tied = |(_, h): &RankedHit| (h.score - low).abs() <= low.abs() * RECALL_EXACT_TIE;
        let (tied_in, kept): (Vec<_>, Vec<_>) = chosen.into_iter().partition(tied);
        let (tied_out, others): (Vec<_>, Vec<_>) = rest.into_iter().partition(tied);
        let places = tied_in.len();
        let (won, mut lost) = by_priority_for(places, tied_in.into_iter().chain(tied_out).collect());
        chosen = kept.into_iter().chain(won).collect();
        lost.extend(others);
        lost.sort_by_key(|(rank, _)| *rank);
        rest = lost;
    }
    let free = n.saturating_sub(chosen.len());
    // The next `free` always compete (search's newer-first rule may have moved a hit above
    // one that scores more), and so do later hits about as good as the last of them.
    let last = rest.get(free.wrapping_sub(1)).map(|(_, h)| h.score).filter(|s| *s > 0.0);
    let band =
        rest.into_iter().enumerate().filter(|(i, (_, h))| *i < free || last.is_none_or(|l| h.score >= l * RECALL_TIE));
    chosen.extend(by_priority_for(free, band.map(|(_, hit)| hit).collect()).0);
    chosen.sort_by(by_priority);
    chosen.into_iter().map(|(_, h)| h.record).collect()
}

/// Highest priority first, search's rank breaking ties.
fn by_priority(a: &RankedHit, b: &RankedHit) -> std::cmp::Ordering {
    b.1.record.priority.cmp(&a.1.record.priority).then(a.0.cmp(&b.0))
}

/// `pool` by priority, split after `places`: (the winners, the rest).
fn by_priority_for(places: usize, mut pool: Vec<RankedHit>) -> (Vec<RankedHit>, Vec<RankedHit>) {
    pool.sort_by(by_priority);
    let rest = pool.split_off(places.min(pool.len()));
    (pool, rest)
}

/// A new store is created aside and renamed into place, so `store.redb` is never a
/// half-created (empty) file of ours.
#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::records::MemoryKind;
    use super::*;

    fn hit(id: u64, score: f32, priority: u8) -> SearchHit {
        let record = MemoryRecord {
            id,
            namespace: "default".into(),
            session: "s".into(),
            kind: MemoryKind::Fact,
            content: format!("record {id}"),
            priority,
            importance: 0.0,
            tags: vec![],
            created_ms: 0,
            updated_ms: 0,
            expires_ms: None,
            deprecated: None,
            references: 0,
            provenance: vec![],
            referenced_ms: None,
            supersedes: vec![],
            superseded_by: None,
        };
        SearchHit { record, score }
    }

    #[test]
    fn many_high_priority_near_ties_do_not_push_out_search_top_five() {
        // The shape of tests/memory_eval's "atlas-web 的端到端测试用什么工具？": the relevant
        // record is fifth, a priority-4 record sixth at nearly the same score.
        let scores = [2.991, 2.808, 2.736, 2.678, 2.646, 2.560, 2.490, 2.431];
        let hits: Vec<SearchHit> =
            scores.iter().enumerate().map(|(i, s)| hit(i as u64, *s, if i == 5 { 4 } else { 3 })).collect();
        let ids: Vec<u64> = relevant_by_priority(hits, &[], 5).iter().map(|r| r.id).collect();
        assert_eq!(ids, [0, 1, 2, 3, 4]);
    }

    #[test]
    fn places_freed_by_shown_records_go_to_the_highest_priority_near_tie() {
        let hits = vec![hit(0, 3.0, 3), hit(1, 2.9, 3), hit(2, 2.0, 2), hit(3, 1.95, 5), hit(4, 1.0, 5)];
        // Record 1 is among the recent ones already shown: its place goes to 3 (priority 5,
        // about as good as 2), never to 4 (under half the best score).
        let ids: Vec<u64> = relevant_by_priority(hits, &[1], 3).iter().map(|r| r.id).collect();
        assert_eq!(ids, [3, 0, 2]);
    }

    #[test]
    fn exact_ties_at_the_last_place_compete_by_priority() {
        // Twelve records holding the same words: BM25 ties them all after the first two.
        let mut hits = vec![hit(1, 0.17, 0), hit(7, 0.16, 0)];
        hits.extend([2, 3, 4, 5, 6].map(|id| hit(id, 0.15, (id - 1) as u8)));
        let ids: Vec<u64> = relevant_by_priority(hits, &[], 5).iter().map(|r| r.id).collect();
        assert_eq!(ids, [6, 5, 4, 1, 7]);
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

        /// Whatever the priorities and scores: a relevant hit of search's top `n` that is not
        /// shown is recalled, or an exact tie of at least its priority took its place;
        /// nothing shown or under the relative cut is; at most `n`, highest priority first.
        #[test]
        fn recall_keeps_search_top_n(
            // Few distinct scores, so that exact ties are common.
            raw in prop::collection::vec(((0u8..24).prop_map(|s| f32::from(s) / 2.0), 0u8..=5, any::<bool>()), 0..20),
            n in 1usize..7,
        ) {
            let mut scored: Vec<(f32, u8, bool)> = raw;
            // Mostly descending, as search returns them; a newer-first swap may break it.
            scored.sort_by(|a, b| b.0.total_cmp(&a.0));
            if scored.len() > 3 {
                scored.swap(1, 2);
            }
            let shown: Vec<u64> = (0..scored.len() as u64).filter(|i| scored[*i as usize].2).collect();
            let hits: Vec<SearchHit> =
                scored.iter().enumerate().map(|(i, (s, p, _))| hit(i as u64, *s, *p)).collect();
            let best = scored.first().map_or(0.0, |h| h.0);
            let relevant = |i: usize| i == 0 || best <= 0.0 || scored[i].0 >= best * RECALL_RELATIVE_SCORE;
            let out = relevant_by_priority(hits, &shown, n);
            let ids: Vec<u64> = out.iter().map(|r| r.id).collect();
            prop_assert!(ids.len() <= n);
            for i in 0..scored.len().min(n) {
                if relevant(i) && !shown.contains(&(i as u64)) && !ids.contains(&(i as u64)) {
                    let (score, priority) = (scored[i].0, scored[i].1);
                    let replaced = out.iter().any(|r| {
                        let j = r.id as usize;
                        j >= n && scored[j].0 == score && scored[j].1 >= priority
                    });
                    prop_assert!(replaced, "top-{n} hit {i} lost: {ids:?} of {scored:?}");
                }
            }
            for id in &ids {
                prop_assert!(!shown.contains(id) && relevant(*id as usize), "{id} in {ids:?} of {scored:?}");
            }
            let eligible = (0..scored.len()).filter(|i| relevant(*i) && !shown.contains(&(*i as u64))).count();
            prop_assert_eq!(ids.len(), eligible.min(n), "free places left empty");
            prop_assert!(out.windows(2).all(|w| w[0].priority >= w[1].priority));
        }
    }
}
