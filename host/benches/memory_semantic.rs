//! `just bench` (memory, semantic): search quality on the labelled bilingual set
//! (tests/memory_eval/) for SQLite FTS5, skillhost lexical-only and skillhost hybrid, in
//! one run on the same data; then the costs of the embedding model, each next to a
//! baseline measured in the same run: the query embedding and a passage batch on the fast
//! kernel against the portable one, hybrid search against lexical search on the same
//! store, `memory add` with its embedding against a lexical-only add on the same store,
//! an import of 10k records embedded in batches, hybrid search on it with the query
//! embedding cached against computed, and the process's memory along the way; then a store
//! of 100k records whose vectors come from a cheaper deterministic source (said in the
//! output), for hybrid and lexical search at that size.
//! Needs the model (`bash .ci/embed-model`, or SKILLHOST_EMBED_MODEL).
//! `MEMORY_BENCH_IMPORT=N` sizes the imported store; `MEMORY_BENCH_QUALITY=off` skips the
//! quality tables (and the 300-record store) for a quick cost run; `MEMORY_BENCH_LARGE=N`
//! sizes the large store (`off` skips it).

#[path = "../../tests/common/memory_eval.rs"]
mod memory_eval;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rusqlite::Connection;
use skillhost::memory::embed::{EmbedModel, Kernel, TextRole};
use skillhost::memory::{EmbedModelChoice, Memory, MemoryConfig, MemoryKind, NewRecord, Provenance, SearchFilter};
use skillhost::search::analyze;

/// Records of the import measurement (`MEMORY_BENCH_IMPORT` overrides, for a quick run).
const IMPORT: usize = 10_000;
/// Records per `add_batch` call of the import.
const IMPORT_BATCH: usize = 500;
/// Records of the large store (`MEMORY_BENCH_LARGE` overrides; `off` skips it).
const LARGE: usize = 100_000;
/// Records per `add_batch_embedded` call of the large store.
const LARGE_BATCH: usize = 2_000;

fn pct(samples: &mut [Duration], p: f64) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
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

/// Time `f` once per item.
fn each<T>(items: &[T], mut f: impl FnMut(&T)) -> Vec<Duration> {
    items
        .iter()
        .map(|x| {
            let t = Instant::now();
            f(x);
            t.elapsed()
        })
        .collect()
}

/// One row: a figure, its baseline from the same run, and their ratio.
fn row(what: &str, value: f64, unit: &str, baseline_what: &str, baseline: f64) {
    println!("{what:<52}{value:>9.1} {unit:<4} vs {baseline_what} {baseline:.1} {unit} ({:.2}x)", value / baseline);
}

fn search_lat(memory: &Memory, queries: &[&str]) -> Vec<Duration> {
    each(queries, |q| {
        memory.search(q, &SearchFilter::namespace("default"), 10).unwrap();
    })
}

/// p50 and p99 of `memory add`, one new record per query text.
fn add_p50_p99(memory: &Memory, queries: &[&str], day: &str) -> (f64, f64) {
    let mut lat = Vec::new();
    for (i, q) in queries.iter().enumerate() {
        let t = Instant::now();
        memory.add(record(format!("The user noted on {day} {i}: {q}"), i)).unwrap();
        lat.push(t.elapsed());
    }
    (pct(&mut lat, 0.5), pct(&mut lat, 0.99))
}

fn main() {
    let model = std::env::var_os("SKILLHOST_EMBED_MODEL").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/models/multilingual-e5-small-q4.bin")
    });
    if !model.exists() {
        println!("memory_semantic: SKIPPED, no embedding model at {} (run `bash .ci/embed-model`)", model.display());
        return;
    }
    let quality = std::env::var("MEMORY_BENCH_QUALITY").map(|v| v != "off").unwrap_or(true);
    let import_n: usize = std::env::var("MEMORY_BENCH_IMPORT").ok().and_then(|v| v.parse().ok()).unwrap_or(IMPORT);
    let rss_start = rss_mb();
    let queries = memory_eval::queries();
    let query_texts: Vec<&str> = queries.iter().map(|q| q.query.as_str()).collect();

    // The engine alone: the same texts on the detected kernel and on the portable one.
    // The shared model is the one the stores below use too.
    let t = Instant::now();
    let engine = EmbedModel::shared(&model).unwrap();
    let model_load = t.elapsed();
    let rss_model = rss_mb();
    let portable = EmbedModel::load(&model).unwrap().with_kernel(Kernel::Portable).unwrap();
    let sample: Vec<&str> = query_texts.iter().step_by(4).copied().collect();
    let mut embed_fast = each(&sample, |q| drop(engine.embed(TextRole::Query, q)));
    let mut embed_portable = each(&sample, |q| drop(portable.embed(TextRole::Query, q)));
    let passages: Vec<String> = memory_eval::memories().into_iter().take(64).map(|m| m.content).collect();
    let passage_refs: Vec<&str> = passages.iter().map(String::as_str).collect();
    let t = Instant::now();
    drop(engine.embed_batch(TextRole::Passage, &passage_refs));
    let batch_fast = t.elapsed();
    let t = Instant::now();
    drop(portable.embed_batch(TextRole::Passage, &passage_refs));
    let batch_portable = t.elapsed();
    drop(portable);

    let tmp = tempfile::tempdir().unwrap();
    let small = quality.then(|| quality_tables(tmp.path(), &model));

    // A store of `import_n` records imported in batches (embedded in batched passes).
    let texts: Vec<String> = (0..import_n)
        .map(|i| {
            let m = &memory_eval::memories()[i % 300];
            format!("{} (note {i})", m.content)
        })
        .collect();
    let big_dir = tmp.path().join("big");
    let big = Memory::open(&big_dir, config(EmbedModelChoice::File(model.clone()))).unwrap();
    let t = Instant::now();
    for (n, chunk) in texts.chunks(IMPORT_BATCH).enumerate() {
        big.add_batch(chunk.iter().enumerate().map(|(i, c)| record(c.clone(), n * IMPORT_BATCH + i)).collect())
            .unwrap();
    }
    let import = t.elapsed();
    let rss_import = rss_mb();
    let stats = big.semantic_stats().unwrap();
    drop(big);
    // Same store, same queries: lexical only, then hybrid (vectors read back from redb).
    let lexical_store = Memory::open(&big_dir, config(EmbedModelChoice::Off)).unwrap();
    let big_lexical = pct(&mut search_lat(&lexical_store, &query_texts), 0.5);
    drop(lexical_store);
    let big = Memory::open(&big_dir, config(EmbedModelChoice::File(model.clone()))).unwrap();
    let mut big_lat = search_lat(&big, &query_texts);
    let big_hybrid = pct(&mut big_lat, 0.5);
    // The same queries again: their embeddings are in the store's query cache now.
    let big_cached = pct(&mut search_lat(&big, &query_texts), 0.5);
    let (add_hybrid, add_hybrid_p99) = add_p50_p99(&big, &query_texts[..40], "day");
    let (mut concurrent_lat, concurrent_wall) = concurrent_adds(&big, &query_texts[80..120]);
    let rss_end = rss_mb();
    drop(big);
    let lexical_store = Memory::open(&big_dir, config(EmbedModelChoice::Off)).unwrap();
    let (add_lexical, _) = add_p50_p99(&lexical_store, &query_texts[40..80], "night");
    drop(lexical_store);

    println!(
        "memory semantic costs (same run; kernel {:?}, {} threads)",
        engine.kernel(),
        rayon::current_num_threads()
    );
    let (fast_p50, portable_p50) = (pct(&mut embed_fast, 0.5), pct(&mut embed_portable, 0.5));
    row("query embedding p50", fast_p50, "ms", "portable kernel", portable_p50);
    let per_text = |d: Duration| d.as_secs_f64() * 1e3 / passages.len() as f64;
    row(
        &format!("passage batch of {}, per text", passages.len()),
        per_text(batch_fast),
        "ms",
        "portable kernel",
        per_text(batch_portable),
    );
    if let Some(s) = &small {
        println!("{:<52}{:>9.1} s", "load the 300-memory set one add at a time", s.load.as_secs_f64());
        row("hybrid search p50 on the 300 (incl. embedding)", s.hybrid_p50, "ms", "lexical", s.lexical_p50);
    }
    println!(
        "{:<52}{:>9.1} s    ({:.0} records/s, {IMPORT_BATCH} per batch)",
        format!("import {import_n} records, embedded"),
        import.as_secs_f64(),
        import_n as f64 / import.as_secs_f64()
    );
    row(
        &format!("hybrid search p50 over {} records (incl. embedding)", stats.vectors),
        big_hybrid,
        "ms",
        "lexical",
        big_lexical,
    );
    println!("{:<52}{:>9.1} ms", "hybrid search p99", pct(&mut big_lat, 0.99));
    row("hybrid search p50, query embedding cached", big_cached, "ms", "computed", big_hybrid);
    row("memory add p50 (with its embedding)", add_hybrid, "ms", "lexical-only add", add_lexical);
    println!("{:<52}{:>9.1} ms", "memory add p99 (with its embedding)", add_hybrid_p99);
    println!(
        "{:<52}{:>9.1} ms   ({} adds from 4 threads: {:.1} ms of wall time per add)",
        "memory add p50, 4 threads at once",
        pct(&mut concurrent_lat, 0.5),
        concurrent_lat.len(),
        concurrent_wall.as_secs_f64() * 1e3 / concurrent_lat.len().max(1) as f64,
    );
    println!(
        "footprint: model file {:.1} MB (mapped, shared), expanded weights {:.1} MB, vectors {:.1} MB for {} records ({:.0} B each)",
        stats.model_file_bytes as f64 / 1e6,
        stats.model_heap_bytes as f64 / 1e6,
        stats.vector_bytes as f64 / 1e6,
        stats.vectors,
        stats.vector_bytes as f64 / stats.vectors.max(1) as f64,
    );
    println!(
        "process RSS: {rss_start:.0} MB at start, {rss_model:.0} MB with the model loaded ({:.2} s), {rss_import:.0} MB after the import, {rss_end:.0} MB at the end",
        model_load.as_secs_f64()
    );
    let large = large_store(tmp.path(), &model, &engine, &query_texts);
    println!(
        "targets: hybrid p50 <= 30 ms: {}; add <= 100 ms: {}; import of {import_n} in minutes: {:.1} min{}",
        if big_hybrid <= 30.0 { "met" } else { "MISSED" },
        if add_hybrid <= 100.0 { "met" } else { "MISSED" },
        import.as_secs_f64() / 60.0,
        match large {
            Some((n, hybrid, lexical)) => format!(
                "; at {n}: hybrid p50 <= 30 ms: {}, lexical p50 <= 1 ms: {}",
                if hybrid <= 30.0 { "met" } else { "MISSED" },
                if lexical <= 1.0 { "met" } else { "MISSED" }
            ),
            None => String::new(),
        }
    );
}

/// `memory add` from 4 threads at once (a server's callers): each add's latency, and the
/// wall time of them all.
fn concurrent_adds(memory: &Memory, queries: &[&str]) -> (Vec<Duration>, Duration) {
    let lat = std::sync::Mutex::new(Vec::new());
    let started = Instant::now();
    std::thread::scope(|s| {
        for (t, chunk) in queries.chunks(queries.len().div_ceil(4)).enumerate() {
            let lat = &lat;
            s.spawn(move || {
                for (i, q) in chunk.iter().enumerate() {
                    let started = Instant::now();
                    memory.add(record(format!("Thread {t} noted #{i}: {q}"), i)).unwrap();
                    lat.lock().unwrap().push(started.elapsed());
                }
            });
        }
    });
    let wall = started.elapsed();
    (lat.into_inner().unwrap(), wall)
}

/// A small deterministic generator (xorshift) for the large store's vectors.
struct Rng(u64);

impl Rng {
    fn unit(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    }
}

/// Hybrid and lexical search over a store of `MEMORY_BENCH_LARGE` records (100k unless
/// set). Embedding 100k passages one by one takes hours on this engine, so their vectors
/// come from a cheaper deterministic source: each record is one of the 300 labelled
/// memories with a note number, and its vector is that memory's real embedding plus a
/// little seeded noise (renormalised). Search cost does not depend on the values; the
/// query embedding is computed for real. Returns (records, hybrid p50, lexical p50).
fn large_store(tmp: &Path, model: &Path, engine: &EmbedModel, queries: &[&str]) -> Option<(usize, f64, f64)> {
    let n = match std::env::var("MEMORY_BENCH_LARGE").ok().as_deref() {
        Some("off") => return None,
        Some(v) => v.parse().unwrap_or(LARGE),
        None => LARGE,
    };
    let base: Vec<String> = memory_eval::memories().into_iter().map(|m| m.content).collect();
    let base_refs: Vec<&str> = base.iter().map(String::as_str).collect();
    let t = Instant::now();
    let base_vectors = engine.embed_batch(TextRole::Passage, &base_refs);
    let embed_base = t.elapsed();
    let dir = tmp.join("large");
    let memory = Memory::open(&dir, config(EmbedModelChoice::File(model.to_path_buf()))).unwrap();
    let mut rng = Rng(0x5eed_1234_abcd_ef01);
    let t = Instant::now();
    for start in (0..n).step_by(LARGE_BATCH) {
        let batch = (start..(start + LARGE_BATCH).min(n))
            .map(|i| {
                let v: Vec<f32> = base_vectors[i % base.len()].iter().map(|x| x + 0.02 * rng.unit()).collect();
                (record(format!("{} (note {i})", base[i % base.len()]), i), v)
            })
            .collect();
        memory.add_batch_embedded(batch).unwrap();
    }
    let load = t.elapsed();
    let stats = memory.semantic_stats().unwrap();
    let rss_loaded = rss_mb();
    let mut hybrid_lat = search_lat(&memory, queries);
    let hybrid = pct(&mut hybrid_lat, 0.5);
    let cached = pct(&mut search_lat(&memory, queries), 0.5);
    let (add, _) = add_p50_p99(&memory, &queries[..20], "large");
    drop(memory);
    let lexical_store = Memory::open(&dir, config(EmbedModelChoice::Off)).unwrap();
    let lexical = pct(&mut search_lat(&lexical_store, queries), 0.5);
    drop(lexical_store);
    println!(
        "large store: {n} records; vectors NOT embedded one by one (hours here): each is the real embedding of one of the {} labelled memories (computed in {:.1} s) plus seeded noise, renormalised; query embeddings are real",
        base.len(),
        embed_base.as_secs_f64()
    );
    println!(
        "{:<52}{:>9.1} s    ({:.0} records/s, {LARGE_BATCH} per batch, vectors given)",
        format!("load {n} records"),
        load.as_secs_f64(),
        n as f64 / load.as_secs_f64()
    );
    row(
        &format!("hybrid search p50 over {} records (incl. embedding)", stats.vectors),
        hybrid,
        "ms",
        "lexical",
        lexical,
    );
    println!("{:<52}{:>9.1} ms", "hybrid search p99", pct(&mut hybrid_lat, 0.99));
    row("hybrid search p50, query embedding cached", cached, "ms", "computed", hybrid);
    println!("{:<52}{:>9.3} ms", format!("lexical search p50 over {n} records"), lexical);
    println!("{:<52}{:>9.1} ms", "memory add p50 (with its embedding)", add);
    println!(
        "large store footprint: vectors {:.1} MB for {} records; process RSS {rss_loaded:.0} MB loaded, {:.0} MB after searching",
        stats.vector_bytes as f64 / 1e6,
        stats.vectors,
        rss_mb()
    );
    Some((n, hybrid, lexical))
}

/// What the 300-record quality run measured of latency.
struct SmallStore {
    load: Duration,
    hybrid_p50: f64,
    lexical_p50: f64,
}

/// The quality tables (FTS5, lexical, hybrid on the labelled set), and the latency on it.
fn quality_tables(tmp: &Path, model: &Path) -> SmallStore {
    let dir = tmp.join("eval");
    let t = Instant::now();
    let (memory, ids) = memory_eval::load(&dir, config(EmbedModelChoice::File(model.to_path_buf())));
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
    let mut lexical_lat = Vec::new();
    let lexical = {
        let memory = memory_eval::reopen(&dir, config(EmbedModelChoice::Off));
        let search = memory_eval::store_search(&memory);
        memory_eval::evaluate(
            &mut |q| {
                let t = Instant::now();
                let hits = search(q);
                lexical_lat.push(t.elapsed());
                hits
            },
            &ids,
            &content,
        )
    };

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

    SmallStore { load: load_eval, hybrid_p50: pct(&mut hybrid_lat, 0.5), lexical_p50: pct(&mut lexical_lat, 0.5) }
}
