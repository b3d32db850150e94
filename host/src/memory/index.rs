//! The BM25 index over long-term records and daily notes (tantivy, on disk).
//!
//! redb is the source of truth; this index is derived. Every commit carries a stamp (the
//! store's write generation and a fingerprint of the daily notes); on open, an index whose
//! stamp differs from the store's, or that cannot be read, is rebuilt from the store. So a
//! crash between the redb commit and the index commit costs a rebuild, never a wrong answer.
//! Index files are written without fsync (see `index_dir.rs`): a commit made before the
//! last reboot is verified file by file on open and rebuilt if anything is lost.
//! Text is analyzed like skill search (English stemmed, CJK bigrams: see
//! [`crate::search::analyzer`]). Only live records are indexed; expiry is checked when
//! results are loaded, because it depends on the clock, not on a write.

use std::ops::Bound;
use std::path::Path;
use std::sync::Mutex;

use anyhow::{Context as _, Result, anyhow};
use tantivy::collector::TopDocs;
use tantivy::query::{BooleanQuery, BoostQuery, ConstScoreQuery, Occur, Query, RangeQuery, TermQuery};
use tantivy::schema::Value as _;
use tantivy::schema::{
    FAST, Field, INDEXED, IndexRecordOption, STORED, STRING, Schema, TextFieldIndexing, TextOptions,
};
use tantivy::{Index, IndexReader, IndexSettings, IndexWriter, ReloadPolicy, TantivyDocument, Term, doc};

use super::daily::DailyEntry;
use super::index_dir::{IndexDirectory, boot_id};
use super::records::{MemoryRecord, SearchFilter};

const ANALYZER: &str = "memory_text";
/// Bump when the schema or the analyzer changes: a different version forces a rebuild.
const INDEX_VERSION: u32 = 3;
const WRITER_HEAP: usize = 32_000_000;

struct Fields {
    id: Field,
    doc_type: Field,
    namespace: Field,
    kind: Field,
    priority: Field,
    expires: Field,
    session: Field,
    skill: Field,
    text: Field,
    date: Field,
    line: Field,
    note: Field,
}

pub(super) struct MemoryIndex {
    index: Index,
    reader: IndexReader,
    writer: Mutex<Option<IndexWriter>>,
    f: Fields,
    /// Commits are fsynced (no boot id): the payload is the bare stamp.
    fsync: bool,
}

/// A daily-note hit: which file, which line, what it says.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DailyHit {
    pub date: String,
    pub line: u32,
    pub text: String,
    pub score: f32,
}

fn schema() -> (Schema, Fields) {
    let mut s = Schema::builder();
    let text = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default().set_tokenizer(ANALYZER).set_index_option(IndexRecordOption::WithFreqs),
    );
    let f = Fields {
        id: s.add_u64_field("id", INDEXED | STORED | FAST),
        doc_type: s.add_text_field("doc_type", STRING),
        namespace: s.add_text_field("namespace", STRING),
        kind: s.add_text_field("kind", STRING),
        priority: s.add_u64_field("priority", INDEXED | FAST),
        expires: s.add_u64_field("expires", INDEXED | FAST),
        session: s.add_text_field("session", STRING),
        skill: s.add_text_field("skill", STRING),
        text: s.add_text_field("text", text),
        date: s.add_text_field("date", STRING | STORED),
        line: s.add_u64_field("line", STORED),
        note: s.add_text_field("note", STORED),
    };
    (s.build(), f)
}

/// Words that name the one the memories are about: nearly every preference says "the user",
/// so in a query they are no evidence of relevance.
const QUERY_NOISE: &[&str] = &["user", "用户"];

/// The terms a memory query searches for: the analyzed query (question words and particles
/// are already gone, see [`crate::search::QUESTION_WORDS`]) without [`QUERY_NOISE`], unless
/// the query is nothing but such a word (a search for "user" itself). A query made only of
/// question words has no terms and finds nothing.
pub(super) fn query_terms(query: &str) -> Vec<String> {
    query_words(query).into_iter().map(|(term, _)| term).collect()
}

/// [`query_terms`], each with the query's words it came from.
fn query_words(query: &str) -> Vec<(String, &str)> {
    let terms = crate::search::analyze_spans(query);
    let bare = query.trim().trim_end_matches(['?', '？', '.', '。']).to_lowercase();
    if terms.len() == 1 && (bare == terms[0].0 || bare == "users") {
        return terms;
    }
    terms.into_iter().filter(|(t, _)| !QUERY_NOISE.contains(&t.as_str())).collect()
}

/// What the index must have been committed with to match the store.
pub(super) fn stamp(generation: u64, daily_fingerprint: &str) -> String {
    format!("v{INDEX_VERSION}:g{generation}:d{daily_fingerprint}")
}

/// Separates the stamp from the boot an unsynced commit was made in, in a commit's payload.
const BOOT_MARK: &str = ";unsynced-boot=";

/// The payload of a commit: the stamp, and the boot if the commit was not fsynced.
fn payload(stamp: &str, fsync: bool) -> String {
    match boot_id().filter(|_| !fsync) {
        Some(boot) => format!("{stamp}{BOOT_MARK}{boot}"),
        None => stamp.to_string(),
    }
}

/// (stamp, boot of an unsynced commit) of a commit's payload.
fn parse_payload(payload: &str) -> (&str, Option<&str>) {
    match payload.split_once(BOOT_MARK) {
        Some((stamp, boot)) => (stamp, Some(boot)),
        None => (payload, None),
    }
}

/// An index opened from disk, and whether it must be adopted into this boot.
struct Opened {
    index: Index,
    reader: IndexReader,
    stamp: String,
    /// Its last commit was unsynced, in an earlier boot, and every file read back whole.
    from_earlier_boot: bool,
}

/// Does every file of every searchable segment of `index` (in `dir`) read back whole, its
/// checksum right? What a crash of the machine does to unsynced files (empty, torn) fails
/// here; a missing file fails opening the reader before.
fn reads_back_whole(index: &Index, dir: &Path) -> bool {
    let Ok(metas) = index.searchable_segment_metas() else { return false };
    let Ok(entries) = std::fs::read_dir(dir) else { return false };
    let segments: Vec<String> = metas.iter().map(|m| m.id().uuid_string()).collect();
    let directory = index.directory();
    entries.flatten().all(|entry| {
        let name = entry.file_name().to_string_lossy().into_owned();
        let of_a_segment = segments.iter().any(|s| name.starts_with(s.as_str())) && !name.ends_with(".temp");
        !of_a_segment || matches!(directory.validate_checksum(Path::new(&name)), Ok(true))
    })
}

impl MemoryIndex {
    /// Open (or create) the index in `dir`; returns it and whether its stamp equals `expected`.
    /// An unreadable index, or one a crash of the machine may have damaged, is deleted and
    /// recreated empty (it is rebuilt from the store).
    pub fn open(dir: &Path, expected: &str) -> Result<(MemoryIndex, bool)> {
        let (schema, f) = schema();
        let (opened, fresh) = match open_existing(dir, &schema) {
            Some(o) => {
                let fresh = o.stamp == expected;
                (o, fresh)
            }
            None => {
                if dir.exists() {
                    std::fs::remove_dir_all(dir)
                        .with_context(|| format!("cannot clear the stale memory index {}", dir.display()))?;
                }
                std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
                let directory = IndexDirectory::open(dir).context("cannot open the memory index directory")?;
                let index = Index::create(directory, schema, IndexSettings::default())
                    .context("cannot create the memory index")?;
                index.tokenizers().register(ANALYZER, crate::search::analyzer());
                let reader = reader_of(&index)?;
                (Opened { index, reader, stamp: String::new(), from_earlier_boot: false }, false)
            }
        };
        let fsync = IndexDirectory::fsyncs();
        let Opened { index, reader, stamp, from_earlier_boot } = opened;
        let memory_index = MemoryIndex { index, reader, writer: Mutex::new(None), f, fsync };
        if from_earlier_boot && fresh {
            // Verified whole: it is on disk now. Say so in this boot's terms, so the next
            // open does not read it all again.
            memory_index.commit_with(&stamp, |_, _| Ok(()))?;
        }
        Ok((memory_index, fresh))
    }

    fn memory_doc(&self, r: &MemoryRecord) -> TantivyDocument {
        let f = &self.f;
        let mut d = doc!(
            f.id => r.id,
            f.doc_type => "memory",
            f.namespace => r.namespace.clone(),
            f.kind => r.kind.as_str(),
            f.priority => u64::from(r.priority),
            f.expires => r.expires_ms.unwrap_or(u64::MAX),
            f.text => r.content.clone(),
        );
        let mut sessions: Vec<&str> =
            std::iter::once(r.session.as_str()).chain(r.provenance.iter().map(|p| p.session.as_str())).collect();
        sessions.sort_unstable();
        sessions.dedup();
        for s in sessions {
            d.add_text(f.session, s);
        }
        for tag in &r.tags {
            d.add_text(f.text, tag);
        }
        let mut skills: Vec<&str> = r.skills().collect();
        skills.sort_unstable();
        skills.dedup();
        for s in skills {
            d.add_text(f.skill, s);
        }
        d
    }

    fn daily_doc(&self, e: &DailyEntry) -> TantivyDocument {
        let f = &self.f;
        doc!(
            f.doc_type => "daily",
            f.date => e.date.clone(),
            f.line => u64::from(e.line),
            f.note => e.text.clone(),
            f.text => e.text.clone(),
        )
    }

    /// Run `edit` with the writer, then commit with `stamp` and make the result visible.
    fn commit_with(&self, stamp: &str, edit: impl FnOnce(&IndexWriter, &Fields) -> Result<()>) -> Result<()> {
        let mut guard = self.writer.lock().map_err(|_| anyhow!("memory index writer poisoned by an earlier panic"))?;
        if guard.is_none() {
            *guard = Some(
                self.index
                    .writer_with_num_threads(1, WRITER_HEAP)
                    .context("cannot open the memory index for writing")?,
            );
        }
        let writer = guard.as_mut().ok_or_else(|| anyhow!("memory index writer missing"))?;
        if let Err(e) = edit(writer, &self.f) {
            let _ = writer.rollback();
            return Err(e);
        }
        let committed = writer.prepare_commit().and_then(|mut prepared| {
            prepared.set_payload(&payload(stamp, self.fsync));
            prepared.commit()
        });
        if let Err(e) = committed {
            // A writer that failed to commit is not trusted again: the next write opens a new one.
            *guard = None;
            return Err(e).context("cannot commit the memory index");
        }
        self.reader.reload().context("cannot reload the memory index")?;
        Ok(())
    }

    /// Replace everything with `records` (live ones only) and `daily`.
    pub fn rebuild<'a>(
        &self,
        records: impl Iterator<Item = &'a MemoryRecord>,
        daily: &[DailyEntry],
        stamp: &str,
    ) -> Result<()> {
        self.commit_with(stamp, |w, _| {
            w.delete_all_documents()?;
            for r in records.filter(|r| r.deprecated.is_none()) {
                w.add_document(self.memory_doc(r))?;
            }
            for e in daily {
                w.add_document(self.daily_doc(e))?;
            }
            Ok(())
        })
    }

    /// Reindex `upserts`, drop `deletes`, add `daily` entries; one commit.
    pub fn apply(&self, upserts: &[&MemoryRecord], deletes: &[u64], daily: &[DailyEntry], stamp: &str) -> Result<()> {
        self.commit_with(stamp, |w, f| {
            for id in deletes.iter().copied().chain(upserts.iter().map(|r| r.id)) {
                w.delete_term(Term::from_field_u64(f.id, id));
            }
            for r in upserts.iter().filter(|r| r.deprecated.is_none()) {
                w.add_document(self.memory_doc(r))?;
            }
            for e in daily {
                w.add_document(self.daily_doc(e))?;
            }
            Ok(())
        })
    }

    fn text_query(&self, query: &str, weigh: Option<&dyn Fn(&str) -> f32>) -> Option<Box<dyn Query>> {
        let words = query_words(query);
        if words.is_empty() {
            return None;
        }
        let clauses: Vec<(Occur, Box<dyn Query>)> = words
            .iter()
            .map(|(t, word)| {
                let q: Box<dyn Query> =
                    Box::new(TermQuery::new(Term::from_field_text(self.f.text, t), IndexRecordOption::WithFreqs));
                let q = match weigh {
                    Some(weigh) => Box::new(BoostQuery::new(q, weigh(word))),
                    None => q,
                };
                (Occur::Should, q)
            })
            .collect();
        Some(Box::new(BooleanQuery::new(clauses)))
    }

    fn filter_term(&self, field: Field, value: &str) -> (Occur, Box<dyn Query>) {
        let q = TermQuery::new(Term::from_field_text(field, value), IndexRecordOption::Basic);
        (Occur::Must, Box::new(ConstScoreQuery::new(Box::new(q), 0.0)))
    }

    /// Ids of records matching `query` under `filter`, best first.
    pub fn search(&self, query: &str, filter: &SearchFilter, now_ms: u64, limit: usize) -> Result<Vec<(u64, f32)>> {
        self.search_weighted(query, None, filter, now_ms, limit)
    }

    /// [`MemoryIndex::search`] with each query word's BM25 multiplied by `weigh(word)`.
    pub fn search_weighted(
        &self,
        query: &str,
        weigh: Option<&dyn Fn(&str) -> f32>,
        filter: &SearchFilter,
        now_ms: u64,
        limit: usize,
    ) -> Result<Vec<(u64, f32)>> {
        let Some(text) = self.text_query(query, weigh) else { return Ok(Vec::new()) };
        if limit == 0 {
            return Ok(Vec::new());
        }
        let f = &self.f;
        let alive = RangeQuery::new(Bound::Excluded(Term::from_field_u64(f.expires, now_ms)), Bound::Unbounded);
        let mut clauses = vec![
            (Occur::Must, text),
            self.filter_term(f.doc_type, "memory"),
            (Occur::Must, Box::new(ConstScoreQuery::new(Box::new(alive), 0.0)) as Box<dyn Query>),
        ];
        if let Some(ns) = &filter.namespace {
            clauses.push(self.filter_term(f.namespace, ns));
        }
        if let Some(s) = &filter.session {
            clauses.push(self.filter_term(f.session, s));
        }
        if let Some(s) = &filter.skill {
            clauses.push(self.filter_term(f.skill, s));
        }
        if !filter.kinds.is_empty() {
            let kinds: Vec<(Occur, Box<dyn Query>)> = filter
                .kinds
                .iter()
                .map(|k| {
                    let q: Box<dyn Query> =
                        Box::new(TermQuery::new(Term::from_field_text(f.kind, k.as_str()), IndexRecordOption::Basic));
                    (Occur::Should, q)
                })
                .collect();
            clauses.push((Occur::Must, Box::new(ConstScoreQuery::new(Box::new(BooleanQuery::new(kinds)), 0.0))));
        }
        if filter.min_priority > 0 {
            let range = RangeQuery::new(
                Bound::Included(Term::from_field_u64(f.priority, u64::from(filter.min_priority))),
                Bound::Unbounded,
            );
            clauses.push((Occur::Must, Box::new(ConstScoreQuery::new(Box::new(range), 0.0))));
        }
        let searcher = self.reader.searcher();
        let top = searcher.search(&BooleanQuery::new(clauses), &TopDocs::with_limit(limit).order_by_score())?;
        // Ids from the fast-field column, not the stored documents: no block of the doc
        // store is decompressed per hit (the hybrid ranking asks for 100 candidates).
        let mut ids_of_segment = vec![None; searcher.segment_readers().len()];
        let mut out = Vec::with_capacity(top.len());
        for (score, address) in top {
            let column = match &mut ids_of_segment[address.segment_ord as usize] {
                Some(column) => column,
                slot => slot.insert(searcher.segment_reader(address.segment_ord).fast_fields().u64("id")?),
            };
            if let Some(id) = column.first(address.doc_id) {
                out.push((id, score));
            }
        }
        // Equal scores come back in segment order, which background merges change: break
        // ties by id (as the hybrid ranking does) so the same store answers the same way.
        out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        Ok(out)
    }

    /// Daily-note entries matching `query`, best first.
    pub fn search_daily(&self, query: &str, limit: usize) -> Result<Vec<DailyHit>> {
        let Some(text) = self.text_query(query, None) else { return Ok(Vec::new()) };
        if limit == 0 {
            return Ok(Vec::new());
        }
        let f = &self.f;
        let q = BooleanQuery::new(vec![(Occur::Must, text), self.filter_term(f.doc_type, "daily")]);
        let searcher = self.reader.searcher();
        let top = searcher.search(&q, &TopDocs::with_limit(limit).order_by_score())?;
        let mut out = Vec::with_capacity(top.len());
        for (score, address) in top {
            let d: TantivyDocument = searcher.doc(address)?;
            let date = d.get_first(f.date).and_then(|v| v.as_str()).unwrap_or_default().to_string();
            let line = d.get_first(f.line).and_then(|v| v.as_u64()).unwrap_or(0) as u32;
            let text = d.get_first(f.note).and_then(|v| v.as_str()).unwrap_or_default().to_string();
            out.push(DailyHit { date, line, text, score });
        }
        Ok(out)
    }
}

fn reader_of(index: &Index) -> Result<IndexReader> {
    index.reader_builder().reload_policy(ReloadPolicy::Manual).try_into().context("cannot open the memory index reader")
}

/// The index in `dir` if it can be used as it is: it opens, has our schema, its reader
/// opens, and a last commit left unsynced before the last reboot reads back whole.
fn open_existing(dir: &Path, schema: &Schema) -> Option<Opened> {
    if !dir.join("meta.json").exists() {
        return None;
    }
    let directory = IndexDirectory::open(dir).ok()?;
    let index = Index::open(directory).ok().filter(|i| i.schema() == *schema)?;
    index.tokenizers().register(ANALYZER, crate::search::analyzer());
    let payload = index.load_metas().ok()?.payload.unwrap_or_default();
    let (stamp, boot) = parse_payload(&payload);
    let stamp = stamp.to_string();
    let from_earlier_boot = boot.is_some_and(|b| Some(b) != boot_id());
    let reader = reader_of(&index).ok()?;
    if from_earlier_boot && !reads_back_whole(&index, dir) {
        tracing::warn!(index = %dir.display(), "the memory search index was not fully written before the machine restarted; rebuilding it from the store");
        return None;
    }
    Some(Opened { index, reader, stamp, from_earlier_boot })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_names_the_boot_of_an_unsynced_commit_only() {
        let stamp = stamp(7, "abc");
        assert_eq!(parse_payload(&payload(&stamp, true)), (stamp.as_str(), None));
        match boot_id() {
            Some(boot) => assert_eq!(parse_payload(&payload(&stamp, false)), (stamp.as_str(), Some(boot))),
            None => assert_eq!(parse_payload(&payload(&stamp, false)), (stamp.as_str(), None)),
        }
        // A payload of an older skillhost (the bare stamp) reads as a synced commit.
        assert_eq!(parse_payload("v3:g1:dx"), ("v3:g1:dx", None));
    }
}
