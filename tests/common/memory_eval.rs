//! The labelled bilingual memory sets loaded into real stores, and R@1 / R@5 / MRR per
//! query class. Shared by tests/memory_quality.rs and the memory bench.
//!
//! - tests/memory_eval/: 300 memories of one developer; its queries are split by topic
//!   (held_out.txt) into a tuning half, the only one the fusion's constants may be chosen
//!   on, and a held-out half;
//! - tests/memory_eval2/: written apart (a data-science team and a household), in stores of
//!   5, 50 and 300 records; never tuned on.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Deserialize;
use skillhost::memory::embed::{EmbedModel, TextRole, cosine};
use skillhost::memory::{Memory, MemoryConfig, MemoryKind, NewRecord, Provenance, SearchFilter};

pub const DAY_MS: u64 = 86_400_000;
/// 2025-01-06, the day the set starts.
pub const START_MS: u64 = 1_736_121_600_000;
pub const CLASSES: [&str; 6] = ["exact", "synonym", "paraphrase", "crosslingual", "typo", "newest"];

#[derive(Debug, Clone, Deserialize)]
pub struct EvalMemory {
    pub key: String,
    /// The smallest store of the second set the memory is in (none in the first set).
    #[serde(default)]
    pub tier: Option<usize>,
    pub day: u64,
    pub kind: String,
    pub priority: u8,
    pub content: String,
    pub supersedes: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct EvalQuery {
    pub cls: String,
    pub query: String,
    pub relevant: Vec<String>,
}

pub fn eval_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().join("tests/memory_eval")
}

pub fn second_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().join("tests/memory_eval2")
}

fn jsonl<T: for<'de> Deserialize<'de>>(name: &str) -> Vec<T> {
    jsonl_in(&eval_dir(), name)
}

fn jsonl_in<T: for<'de> Deserialize<'de>>(dir: &Path, name: &str) -> Vec<T> {
    let text = std::fs::read_to_string(dir.join(name)).unwrap();
    text.lines().filter(|l| !l.trim().is_empty()).map(|l| serde_json::from_str(l).unwrap()).collect()
}

pub fn memories() -> Vec<EvalMemory> {
    jsonl("memories.jsonl")
}

pub fn queries() -> Vec<EvalQuery> {
    jsonl("queries.jsonl")
}

/// A half of the first set's queries, split by topic (see tests/memory_eval/held_out.txt).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Half {
    Tuning,
    HeldOut,
}

/// The topic of a memory key: "zh-bill-db-2" -> "bill", "pref-indent-2" -> "pref-indent".
pub fn topic(key: &str) -> String {
    let key = key.strip_prefix("zh-").unwrap_or(key);
    let key = match key.rsplit_once('-') {
        Some((head, n)) if n.chars().all(|c| c.is_ascii_digit()) => head,
        _ => key,
    };
    let parts: Vec<&str> = key.split('-').collect();
    let keep = if parts[0] == "pref" { 2 } else { 1 };
    parts[..keep.min(parts.len())].join("-")
}

/// The first set's queries of one half. The tuning half also holds the queries of
/// tuning_queries.jsonl (issue 31, fourth round): questions about its topics that share no
/// word with their memory, and questions about nothing, written so that a per-query
/// abstention rule can be chosen on it; they are in no other run.
pub fn half(which: Half) -> Vec<EvalQuery> {
    let text = std::fs::read_to_string(eval_dir().join("held_out.txt")).unwrap();
    let held: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).collect();
    let mut nothing = 0;
    queries()
        .into_iter()
        .filter(|q| {
            let held_out = match q.relevant.first() {
                Some(key) => held.contains(&topic(key).as_str()),
                None => {
                    nothing += 1;
                    nothing % 2 == 0
                }
            };
            held_out == (which == Half::HeldOut)
        })
        .chain(if which == Half::Tuning { tuning_queries() } else { vec![] })
        .collect()
}

/// The tuning half's own queries (tests/memory_eval/tuning_queries.jsonl).
pub fn tuning_queries() -> Vec<EvalQuery> {
    jsonl("tuning_queries.jsonl")
}

/// The second set's memories in its store of `size` records (5, 50 or 300).
pub fn second_memories(size: usize) -> Vec<EvalMemory> {
    jsonl_in::<EvalMemory>(&second_dir(), "memories.jsonl").into_iter().filter(|m| m.tier.unwrap() <= size).collect()
}

/// The second set's queries about `memories` (and those about nothing).
pub fn second_queries(memories: &[EvalMemory]) -> Vec<EvalQuery> {
    let keys: Vec<&str> = memories.iter().map(|m| m.key.as_str()).collect();
    jsonl_in::<EvalQuery>(&second_dir(), "queries.jsonl")
        .into_iter()
        .filter(|q| q.relevant.iter().all(|k| keys.contains(&k.as_str())))
        .collect()
}

/// Store every memory of the first set with `memory add` semantics, in day order, on a
/// clock at its day. Returns the store and the id that holds each key.
pub fn load(dir: &Path, config: MemoryConfig) -> (Memory, HashMap<String, u64>) {
    load_memories(dir, config, &memories())
}

/// Store `memories` as [`load`] does.
pub fn load_memories(dir: &Path, config: MemoryConfig, memories: &[EvalMemory]) -> (Memory, HashMap<String, u64>) {
    let clock = Arc::new(AtomicU64::new(START_MS));
    let c = clock.clone();
    let memory = Memory::open(dir, config).unwrap().with_clock(move || c.load(Ordering::SeqCst));
    let mut ids = HashMap::new();
    let mut memories = memories.to_vec();
    memories.sort_by_key(|m| m.day);
    for m in memories {
        clock.store(START_MS + m.day * DAY_MS, Ordering::SeqCst);
        let id = memory
            .add(NewRecord {
                namespace: "default".into(),
                kind: MemoryKind::parse(&m.kind).unwrap(),
                content: m.content.clone(),
                priority: m.priority,
                tags: vec![],
                provenance: Provenance {
                    skill: "user".into(),
                    skill_hash: String::new(),
                    session: format!("day-{}", m.day),
                    step: 0,
                },
            })
            .unwrap();
        ids.insert(m.key, id);
    }
    clock.store(START_MS + 240 * DAY_MS, Ordering::SeqCst);
    (memory, ids)
}

/// Reopen a loaded store (its clock after the last memory).
pub fn reopen(dir: &Path, config: MemoryConfig) -> Memory {
    Memory::open(dir, config).unwrap().with_clock(|| START_MS + 240 * DAY_MS)
}

#[derive(Debug, Default, Clone, Copy)]
pub struct Score {
    pub n: usize,
    pub r1: f64,
    pub r5: f64,
    pub mrr: f64,
}

impl Score {
    fn add(&mut self, rank: Option<usize>) {
        self.n += 1;
        if let Some(r) = rank {
            self.r1 += f64::from(u8::from(r == 0));
            self.r5 += f64::from(u8::from(r < 5));
            self.mrr += 1.0 / (r as f64 + 1.0);
        }
    }
    fn merge(&mut self, o: &Score) {
        self.n += o.n;
        self.r1 += o.r1;
        self.r5 += o.r5;
        self.mrr += o.mrr;
    }
    pub fn r1(&self) -> f64 {
        self.r1 / self.n.max(1) as f64
    }
    pub fn r5(&self) -> f64 {
        self.r5 / self.n.max(1) as f64
    }
    pub fn mrr(&self) -> f64 {
        self.mrr / self.n.max(1) as f64
    }
}

/// Per class, and "overall"; plus the share of "none" queries that returned nothing.
#[derive(Debug, Default, Clone)]
pub struct Table {
    pub classes: BTreeMap<String, Score>,
    pub abstained: f64,
    /// (query, class, wanted, got top 3) of the misses at 5, for a look.
    pub misses: Vec<String>,
    /// (query, rank of its first relevant record) of every graded query.
    pub ranks: Vec<(String, Option<usize>)>,
}

impl Table {
    pub fn class(&self, c: &str) -> Score {
        self.classes.get(c).copied().unwrap_or_default()
    }
    pub fn overall(&self) -> Score {
        let mut all = Score::default();
        for s in self.classes.values() {
            all.merge(s);
        }
        all
    }
}

/// Rank of the first relevant result, by `search` returning ranked ids (top 10), over
/// the first set's queries.
pub fn evaluate(
    search: &mut dyn FnMut(&str) -> Vec<u64>,
    ids: &HashMap<String, u64>,
    content: &HashMap<u64, String>,
) -> Table {
    evaluate_queries(search, ids, content, &queries())
}

/// [`evaluate`] over `queries`.
pub fn evaluate_queries(
    search: &mut dyn FnMut(&str) -> Vec<u64>,
    ids: &HashMap<String, u64>,
    content: &HashMap<u64, String>,
    queries: &[EvalQuery],
) -> Table {
    let mut table = Table::default();
    let (mut none, mut none_empty) = (0, 0);
    for q in queries {
        let got = search(&q.query);
        if q.cls == "none" {
            none += 1;
            none_empty += usize::from(got.is_empty());
            continue;
        }
        let wanted: Vec<u64> = q.relevant.iter().map(|k| ids[k]).collect();
        let rank = got.iter().position(|id| wanted.contains(id));
        if rank.is_none_or(|r| r >= 5) {
            let top: Vec<String> = got.iter().take(3).map(|id| content.get(id).cloned().unwrap_or_default()).collect();
            table.misses.push(format!("[{}] {:?} -> {:?}", q.cls, q.query, top));
        }
        table.classes.entry(q.cls.clone()).or_default().add(rank);
        table.ranks.push((q.query.clone(), rank));
    }
    table.abstained = none_empty as f64 / f64::from(none.max(1) as u32);
    table
}

/// The store's own search (`Memory::search`, relevance order).
pub fn store_search(memory: &Memory) -> impl Fn(&str) -> Vec<u64> + '_ {
    move |q| {
        memory.search(q, &SearchFilter::namespace("default"), 10).unwrap().into_iter().map(|h| h.record.id).collect()
    }
}

pub fn print_table(title: &str, t: &Table) {
    println!("{title}");
    println!("  {:<13} {:>4} {:>6} {:>6} {:>6}", "class", "n", "R@1", "R@5", "MRR");
    for c in CLASSES {
        let s = t.class(c);
        println!("  {c:<13} {:>4} {:>6.3} {:>6.3} {:>6.3}", s.n, s.r1(), s.r5(), s.mrr());
    }
    let o = t.overall();
    println!("  {:<13} {:>4} {:>6.3} {:>6.3} {:>6.3}", "overall", o.n, o.r1(), o.r5(), o.mrr());
    println!("  queries about nothing answered with nothing: {:.0} %", t.abstained * 100.0);
}

/// Script of a text, as the store tells it (vectors.rs): a quarter of CJK characters.
fn is_cjk(text: &str) -> bool {
    let letters = text.chars().filter(|c| c.is_alphanumeric()).count();
    let cjk = text.chars().filter(|c| matches!(*c as u32, 0x3040..=0x30ff | 0x3400..=0x4dbf | 0x4e00..=0x9fff)).count();
    cjk * 4 >= letters.max(1)
}

/// The dense-only baseline of issue 31: the live records of `memory` ranked by the e5
/// cosine to the query minus the query's mean cosine to the records of the same script
/// (per-language mean centring), no lexical part and no threshold (it always answers).
pub fn dense_search(model: &EmbedModel, memory: &Memory) -> impl FnMut(&str) -> Vec<u64> {
    let now = memory.now_ms();
    let live: Vec<_> = memory.all_records().unwrap().into_iter().filter(|r| r.is_live(now)).collect();
    let texts: Vec<&str> = live.iter().map(|r| r.content.trim()).collect();
    let vectors = model.embed_batch(TextRole::Passage, &texts);
    let scripts: Vec<bool> = live.iter().map(|r| is_cjk(&r.content)).collect();
    let ids: Vec<u64> = live.iter().map(|r| r.id).collect();
    move |q| {
        let v = model.embed(TextRole::Query, q.trim());
        let cos: Vec<f32> = vectors.iter().map(|r| cosine(&v, r)).collect();
        let mean = |s: bool| {
            let xs: Vec<f32> = cos.iter().zip(&scripts).filter(|(_, k)| **k == s).map(|(c, _)| *c).collect();
            xs.iter().sum::<f32>() / xs.len().max(1) as f32
        };
        let (latin, cjk) = (mean(false), mean(true));
        let mut scored: Vec<(u64, f32)> =
            ids.iter().zip(&cos).zip(&scripts).map(|((id, c), s)| (*id, c - if *s { cjk } else { latin })).collect();
        scored.sort_by(|a, b| b.1.total_cmp(&a.1));
        scored.into_iter().take(10).map(|(id, _)| id).collect()
    }
}

/// R@5 per class (and R@1, MRR overall) of several rankers side by side.
pub fn print_columns(title: &str, columns: &[(&str, &Table)]) {
    println!("{title}");
    print!("  {:<13} {:>4}", "R@5", "n");
    for (name, _) in columns {
        print!(" {name:>9}");
    }
    println!();
    let row = |label: &str, n: usize, f: &dyn Fn(&Table) -> f64| {
        print!("  {label:<13} {n:>4}");
        for (_, t) in columns {
            print!(" {:>9.3}", f(t));
        }
        println!();
    };
    for c in CLASSES {
        let n = columns.first().map_or(0, |(_, t)| t.class(c).n);
        if n > 0 {
            row(c, n, &|t| t.class(c).r5());
        }
    }
    let n = columns.first().map_or(0, |(_, t)| t.overall().n);
    row("overall", n, &|t| t.overall().r5());
    row("R@1 overall", n, &|t| t.overall().r1());
    row("MRR overall", n, &|t| t.overall().mrr());
    row("none empty", 0, &|t| t.abstained);
}
