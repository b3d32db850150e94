//! `just bench` (memory, semantic): search quality on the labelled bilingual set
//! (tests/memory_eval/) for SQLite FTS5, skillhost lexical-only and skillhost hybrid, in
//! one run on the same data; then the costs of the embedding model: hybrid search p50
//! including the query embedding, `memory add` p50 with its embedding, an import of 10k
//! records embedded in batches, and the memory the model and the vectors take.
//! Needs the model (`bash .ci/embed-model`, or SKILLHOST_EMBED_MODEL).

#[path = "../../tests/common/memory_eval.rs"]
mod memory_eval;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use rusqlite::Connection;
use skillhost::memory::{EmbedModelChoice, Memory, MemoryConfig, MemoryKind, NewRecord, Provenance, SearchFilter};
use skillhost::search::analyze;

/// Records of the import measurement (`MEMORY_BENCH_IMPORT` overrides, for a quick run).
const IMPORT: usize = 10_000;

fn pct(samples: &mut [Duration], p: f64) -> f64 {
    samples.sort();
    samples[((samples.len() as f64 - 1.0) * p).round() as usize].as_secs_f64() * 1e3
}

fn rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

fn config(model: EmbedModelChoice) -> MemoryConfig {
    MemoryConfig { embed_model: model, ..MemoryConfig::default() }
}

fn record(content: String, i: usize) -> NewRecord {
    NewRecord {
        namespace: "default".into(),
        kind: MemoryKind::ALL[i % 6],
        content,
        priority: 3,
        tags: vec![],
        provenance: Provenance { skill: "bench".into(), skill_hash: "0".into(), session: "s".into(), step: 0 },
    }
}

fn main() {
    let model = std::env::var_os("SKILLHOST_EMBED_MODEL").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/models/multilingual-e5-small-q4.bin")
    });
    if !model.exists() {
        println!("memory_semantic: SKIPPED, no embedding model at {} (run `bash .ci/embed-model`)", model.display());
        return;
    }
    let rss_start = rss_mb();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("eval");
    let t = Instant::now();
    let (memory, ids) = memory_eval::load(&dir, config(EmbedModelChoice::File(model.clone())));
    let load_eval = t.elapsed();
    let content: HashMap<u64, String> = memory.all_records().unwrap().into_iter().map(|r| (r.id, r.content)).collect();
    let mut hybrid_lat = Vec::new();
    let hybrid = memory_eval::evaluate(
        &mut |q| {
            let t = Instant::now();
            let hits = memory.search(q, &SearchFilter::namespace("default"), 10).unwrap();
            hybrid_lat.push(t.elapsed());
            hits.into_iter().map(|h| h.record.id).collect()
        },
        &ids,
        &content,
    );
    drop(memory);
    let memory = memory_eval::reopen(&dir, config(EmbedModelChoice::Off));
    let lexical = memory_eval::evaluate(&mut memory_eval::store_search(&memory), &ids, &content);
    drop(memory);

    // SQLite FTS5 with bm25 on the same analyzed terms (rowid = our record id).
    let db = Connection::open_in_memory().unwrap();
    db.execute_batch("CREATE VIRTUAL TABLE f USING fts5(terms, tokenize='unicode61');").unwrap();
    for (id, c) in &content {
        db.execute("INSERT INTO f(rowid, terms) VALUES (?1, ?2)", rusqlite::params![*id as i64, analyze(c).join(" ")])
            .unwrap();
    }
    let mut stmt = db.prepare("SELECT rowid FROM f WHERE f MATCH ?1 ORDER BY bm25(f) LIMIT 10").unwrap();
    let fts = memory_eval::evaluate(
        &mut |q| {
            let terms = analyze(q);
            if terms.is_empty() {
                return Vec::new();
            }
            let expr = terms.iter().map(|t| format!("\"{}\"", t.replace('"', ""))).collect::<Vec<_>>().join(" OR ");
            stmt.query_map([&expr], |r| r.get::<_, i64>(0)).unwrap().map(|r| r.unwrap() as u64).collect()
        },
        &ids,
        &content,
    );
    println!(
        "memory search quality: {} memories, {} queries (tests/memory_eval), top 10",
        content.len(),
        memory_eval::queries().len()
    );
    memory_eval::print_table("sqlite fts5 bm25 (same analyzed terms)", &fts);
    memory_eval::print_table("skillhost lexical only (tantivy bm25)", &lexical);
    memory_eval::print_table("skillhost hybrid (bm25 + multilingual-e5-small cosine)", &hybrid);
    println!(
        "ratio R@5 overall: hybrid/fts5 {:.2}x, hybrid/lexical {:.2}x",
        hybrid.overall().r5() / fts.overall().r5().max(1e-9),
        hybrid.overall().r5() / lexical.overall().r5().max(1e-9)
    );

    // Costs. A store of 10k records imported in batches (embedded in batched passes).
    let import_n: usize = std::env::var("MEMORY_BENCH_IMPORT").ok().and_then(|v| v.parse().ok()).unwrap_or(IMPORT);
    let texts: Vec<String> = (0..import_n)
        .map(|i| {
            let m = &memory_eval::memories()[i % 300];
            format!("{} (note {i})", m.content)
        })
        .collect();
    let big = Memory::open(&tmp.path().join("big"), config(EmbedModelChoice::File(model.clone()))).unwrap();
    let t = Instant::now();
    for (n, chunk) in texts.chunks(500).enumerate() {
        big.add_batch(chunk.iter().enumerate().map(|(i, c)| record(c.clone(), n * 500 + i)).collect()).unwrap();
    }
    let import = t.elapsed();
    let queries = memory_eval::queries();
    let mut search_lat = Vec::new();
    for q in queries.iter().take(100) {
        let t = Instant::now();
        let _ = big.search(&q.query, &SearchFilter::namespace("default"), 10).unwrap();
        search_lat.push(t.elapsed());
    }
    let mut add_lat = Vec::new();
    for (i, q) in queries.iter().take(40).enumerate() {
        let t = Instant::now();
        big.add(record(format!("The user noted on day {i}: {}", q.query), i)).unwrap();
        add_lat.push(t.elapsed());
    }
    let stats = big.semantic_stats().unwrap();
    let rss_end = rss_mb();

    println!("memory semantic costs (same run)");
    println!("{:<56}{:>10.1} s", "load the 300-memory set one add at a time", load_eval.as_secs_f64());
    println!("{:<56}{:>10.1} ms", "hybrid search p50 on the 300 (incl. query embedding)", pct(&mut hybrid_lat, 0.5));
    println!(
        "{:<56}{:>10.1} s  ({:.0} records/s)",
        format!("import {import_n} records, 500 per batch, embedded"),
        import.as_secs_f64(),
        import_n as f64 / import.as_secs_f64()
    );
    println!(
        "{:<56}{:>10.1} ms  p99 {:.1} ms",
        format!("hybrid search p50 over {} records (incl. embedding)", stats.vectors),
        pct(&mut search_lat, 0.5),
        pct(&mut search_lat, 0.99)
    );
    println!(
        "{:<56}{:>10.1} ms  p99 {:.1} ms",
        "memory add p50 (with its embedding)",
        pct(&mut add_lat, 0.5),
        pct(&mut add_lat, 0.99)
    );
    println!(
        "footprint: model file {:.1} MB (mapped, shared), expanded weights {:.1} MB, vectors {:.1} MB for {} records ({:.0} B each); process RSS {:.0} -> {:.0} MB",
        stats.model_file_bytes as f64 / 1e6,
        stats.model_heap_bytes as f64 / 1e6,
        stats.vector_bytes as f64 / 1e6,
        stats.vectors,
        stats.vector_bytes as f64 / stats.vectors.max(1) as f64,
        rss_start,
        rss_end
    );
    println!(
        "targets: hybrid p50 <= 30 ms: {}; add <= 100 ms: {}",
        if pct(&mut search_lat, 0.5) <= 30.0 { "met" } else { "MISSED" },
        if pct(&mut add_lat, 0.5) <= 100.0 { "met" } else { "MISSED" }
    );
}
