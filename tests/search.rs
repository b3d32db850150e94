//! Relevance search quality on a labelled set: tests/fixtures/catalog has 35 skills with
//! overlapping vocabulary (English, Chinese and bilingual) and queries.json 58 task
//! descriptions in both languages, each with the one skill that should come first.

mod common;

use common::repo;
use skillhost::manifest::Manifest;
use skillhost::search::{SearchDoc, SkillIndex};

#[derive(serde::Deserialize)]
struct Labelled {
    query: String,
    expected: String,
    lang: String,
}

fn catalog() -> Vec<SearchDoc> {
    let dir = repo().join("tests/fixtures/catalog");
    let mut docs = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            let m = Manifest::load_dir(&path).unwrap();
            docs.push(SearchDoc {
                name: m.name,
                description: m.description,
                when_to_use: m.when_to_use.unwrap_or_default(),
            });
        }
    }
    docs
}

#[test]
fn recall_on_the_labelled_query_set() {
    let docs = catalog();
    assert!(docs.len() >= 25, "catalog has {} skills", docs.len());
    let queries: Vec<Labelled> =
        serde_json::from_slice(&std::fs::read(repo().join("tests/fixtures/catalog/queries.json")).unwrap()).unwrap();
    assert!(queries.len() >= 40);
    let index = SkillIndex::build(&docs).unwrap();
    let (mut at1, mut at3) = (0usize, 0usize);
    let mut by_lang: std::collections::BTreeMap<&str, (usize, usize, usize)> = Default::default();
    let mut misses = Vec::new();
    for q in &queries {
        let hits = index.search(&q.query, 3).unwrap();
        let rank = hits.iter().position(|h| h.name == q.expected);
        let e = by_lang.entry(q.lang.as_str()).or_default();
        e.0 += 1;
        if rank == Some(0) {
            at1 += 1;
            e.1 += 1;
        }
        if rank.is_some() {
            at3 += 1;
            e.2 += 1;
        } else {
            misses.push(format!("{} -> {:?} (wanted {})", q.query, hits.first().map(|h| &h.name), q.expected));
        }
    }
    let n = queries.len() as f64;
    let (r1, r3) = (at1 as f64 / n, at3 as f64 / n);
    println!(
        "search quality over {} skills, {} queries: recall@1 {r1:.3}, recall@3 {r3:.3}",
        docs.len(),
        queries.len()
    );
    for (lang, (total, one, three)) in &by_lang {
        println!("  {lang}: {total} queries, recall@1 {one}/{total}, recall@3 {three}/{total}");
    }
    for m in &misses {
        println!("  miss: {m}");
    }
    assert!(r3 >= 0.9, "recall@3 {r3:.3} below 0.9; misses: {misses:#?}");
    assert!(r1 >= 0.8, "recall@1 {r1:.3} below 0.8");
}
