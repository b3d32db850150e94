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

fn cli(home: &std::path::Path, model: Option<&std::path::Path>) -> assert_cmd::Command {
    let mut c = common::skillhost(home);
    match model {
        Some(path) => c.env("SKILLHOST_EMBED_MODEL", path),
        None => c.env("SKILLHOST_EMBED_MODEL", "off"),
    };
    c
}

/// The shipped English skills, and one described only in Chinese.
fn bilingual_home(env: &common::Env) {
    let lib = env.library();
    for s in ["read-log-file", "query-issue-kb", "write-analysis-snapshot", "generate-report", "publish-npm-package"] {
        lib.install(&common::built(s), &|m| Ok(Some(skillhost::policy::Grant::everything(m)))).unwrap();
    }
    let dir = env.sources.path().join("shrink-image");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("SKILL.md"),
        "---\nname: shrink-image\ndescription: 压缩图片文件，减小体积，保持清晰度。\nwhen_to_use: 图片太大，需要上传或者发邮件之前。\nversion: 0.1.0\n---\n\n# 压缩图片\n",
    )
    .unwrap();
    lib.install(&dir, &|m| Ok(Some(skillhost::policy::Grant::everything(m)))).unwrap();
}

fn top_hit(out: &std::process::Output) -> Option<String> {
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    rows.get(0).and_then(|r| r["name"].as_str()).map(str::to_string)
}

#[test]
fn skill_search_crosses_languages_with_the_embedding_model() {
    let Some(model) = common::embed_model() else { return };
    let env = common::Env::new();
    bilingual_home(&env);
    let search =
        |query: &str| cli(env.home.path(), Some(&model)).args(["--json", "skill", "search", query]).output().unwrap();
    for (query, expected) in [
        ("读取日志", "read-log-file"),
        ("查看日志文件里的错误", "read-log-file"),
        ("压缩照片", "shrink-image"),
        ("发布一个新版本到npm", "publish-npm-package"),
        ("串口乱码 已知问题", "query-issue-kb"),
        ("make a photo smaller before emailing it", "shrink-image"),
    ] {
        let out = search(query);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(top_hit(&out).as_deref(), Some(expected), "{query}: {}", String::from_utf8_lossy(&out.stdout));
    }
    // A query about nothing the skills do finds nothing, in either language.
    for query in ["明天的天气预报", "weather forecast for tomorrow"] {
        assert_eq!(top_hit(&search(query)), None, "{query}");
    }
    // The vectors are cached by content: a second search embeds nothing and rewrites nothing.
    let cache = env.home.path().join("cache/skill-vectors.json");
    let stamp = std::fs::metadata(&cache).unwrap().modified().unwrap();
    let cached: serde_json::Value = serde_json::from_slice(&std::fs::read(&cache).unwrap()).unwrap();
    assert_eq!(cached["vectors"].as_object().unwrap().len(), 6);
    let human = cli(env.home.path(), Some(&model)).args(["skill", "search", "读取日志"]).output().unwrap();
    assert!(String::from_utf8_lossy(&human.stdout).contains("read-log-file"));
    assert!(
        String::from_utf8_lossy(&human.stderr).contains("lexical + semantic"),
        "{}",
        String::from_utf8_lossy(&human.stderr)
    );
    assert_eq!(std::fs::metadata(&cache).unwrap().modified().unwrap(), stamp);
}

#[test]
fn without_the_model_skill_search_says_it_is_lexical_only() {
    let env = common::Env::new();
    bilingual_home(&env);
    let out = cli(env.home.path(), None).args(["skill", "search", "读取日志"]).output().unwrap();
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("search is lexical only"), "{stderr}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("no installed skill matches"),
        "a Chinese query finds no English skill lexically"
    );
    // Under --json too (on stderr; stdout stays the array), and words of the skill's own
    // language still find it.
    let out = cli(env.home.path(), None).args(["--json", "skill", "search", "read a log file"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("lexical only"));
    assert_eq!(top_hit(&out).as_deref(), Some("read-log-file"));
    assert!(!env.home.path().join("cache/skill-vectors.json").exists());
}
