//! The labelled bilingual memory set (tests/memory_eval/) loaded into a real store, and
//! R@1 / R@5 / MRR per query class. Shared by tests/memory_quality.rs and the memory bench.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Deserialize;
use skillhost::memory::{Memory, MemoryConfig, MemoryKind, NewRecord, Provenance, SearchFilter};

pub const DAY_MS: u64 = 86_400_000;
/// 2025-01-06, the day the set starts.
pub const START_MS: u64 = 1_736_121_600_000;
pub const CLASSES: [&str; 6] = ["exact", "synonym", "paraphrase", "crosslingual", "typo", "newest"];

#[derive(Debug, Clone, Deserialize)]
pub struct EvalMemory {
    pub key: String,
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

fn jsonl<T: for<'de> Deserialize<'de>>(name: &str) -> Vec<T> {
    let text = std::fs::read_to_string(eval_dir().join(name)).unwrap();
    text.lines().filter(|l| !l.trim().is_empty()).map(|l| serde_json::from_str(l).unwrap()).collect()
}

pub fn memories() -> Vec<EvalMemory> {
    jsonl("memories.jsonl")
}

pub fn queries() -> Vec<EvalQuery> {
    jsonl("queries.jsonl")
}

/// Store every memory with `memory add` semantics, in day order, on a clock at its day.
/// Returns the store and the id that holds each key.
pub fn load(dir: &Path, config: MemoryConfig) -> (Memory, HashMap<String, u64>) {
    let clock = Arc::new(AtomicU64::new(START_MS));
    let c = clock.clone();
    let memory = Memory::open(dir, config).unwrap().with_clock(move || c.load(Ordering::SeqCst));
    let mut ids = HashMap::new();
    for m in memories() {
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

/// Rank of the first relevant result, by `search` returning ranked ids (top 10).
pub fn evaluate(
    search: &mut dyn FnMut(&str) -> Vec<u64>,
    ids: &HashMap<String, u64>,
    content: &HashMap<u64, String>,
) -> Table {
    let mut table = Table::default();
    let (mut none, mut none_empty) = (0, 0);
    for q in queries() {
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
