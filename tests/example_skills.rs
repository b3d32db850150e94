//! The shipped log-analysis skills, installed from `target/skills` and run through the
//! real runtime on the example UART log.

mod common;

use std::path::Path;

use common::{built, output, repo, run, run_with};
use serde_json::{Value, json};
use skillhost::library::{Library, RunOptions, RunReport};
use skillhost::sandbox::CallError;

const SKILLS: [&str; 5] =
    ["read-log-file", "query-issue-kb", "write-analysis-snapshot", "generate-report", "publish-npm-package"];

fn example_dir() -> std::path::PathBuf {
    repo().join("examples/log-analysis/workspace")
}

fn install_all(home: &Path, workspace: &Path) -> Library {
    let lib = Library::open(home, Some(workspace), None).unwrap();
    for s in SKILLS {
        lib.install(&built(s), &|m| Ok(Some(skillhost::policy::Grant::everything(m)))).unwrap();
    }
    lib
}

/// The log line `n` (1-based) of the example log.
fn log_line(n: usize) -> String {
    std::fs::read_to_string(example_dir().join("uart.log")).unwrap().lines().nth(n - 1).unwrap().to_string()
}

fn first_line_with(needle: &str) -> usize {
    std::fs::read_to_string(example_dir().join("uart.log")).unwrap().lines().position(|l| l.contains(needle)).unwrap()
        + 1
}

fn meta<'a>(r: &'a RunReport, key: &str) -> &'a str {
    let out = r.outcome.result.as_ref().unwrap();
    out.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str()).unwrap_or_else(|| panic!("no metadata {key}"))
}

#[test]
fn read_log_file_cites_real_lines_and_remembers_a_summary() {
    let home = tempfile::tempdir().unwrap();
    let lib = install_all(home.path(), &example_dir());
    let r = run(&lib, "read-log-file", json!({"path": "/workspace/uart.log", "level": "ERROR", "max_lines": 20}));
    let out = output(&r);
    let total = std::fs::read_to_string(example_dir().join("uart.log")).unwrap().lines().count();
    assert_eq!(meta(&r, "lines_scanned"), total.to_string());
    let cited: Vec<&str> = out.lines().filter(|l| l.starts_with('L') && l.contains(": ")).collect();
    assert!(!cited.is_empty() && cited.len() <= 20, "{out}");
    for l in &cited {
        let (num, text) = l.split_once(": ").unwrap();
        let n: usize = num[1..].parse().unwrap();
        assert_eq!(text, log_line(n), "L{n} must quote line {n} exactly");
        assert!(text.contains("[ERROR]"));
    }
    // One summarized memory, stored with provenance, not the raw log.
    assert_eq!(r.memories.stored.len(), 1, "{:?}", r.memories);
    let records = lib.store().unwrap().list("default").unwrap();
    assert_eq!(records[0].provenance[0].skill, "read-log-file");
    assert!(records[0].content.len() < 2048);
    assert!(records[0].content.contains("RX overrun"), "{}", records[0].content);

    let r = run(&lib, "read-log-file", json!({"path": "uart.log", "keyword": "OVERRUN", "max_lines": 5000}));
    let out = output(&r);
    let matched: usize = meta(&r, "lines_matched").parse().unwrap();
    let expected = std::fs::read_to_string(example_dir().join("uart.log"))
        .unwrap()
        .lines()
        .filter(|l| l.to_lowercase().contains("overrun"))
        .count();
    assert_eq!(matched, expected);
    assert!(out.lines().filter(|l| l.starts_with('L')).all(|l| l.to_lowercase().contains("overrun")));
}

#[test]
fn read_log_file_since_and_bad_input() {
    let home = tempfile::tempdir().unwrap();
    let lib = install_all(home.path(), &example_dir());
    let r = run(
        &lib,
        "read-log-file",
        json!({"path": "/workspace/uart.log", "since": "2026-03-02T16:00:00", "level": "WARN"}),
    );
    assert!(meta(&r, "first_ts").as_bytes() >= b"2026-03-02 16:00:00".as_slice(), "{}", meta(&r, "first_ts"));
    let r = run(&lib, "read-log-file", json!({"path": "/workspace/uart.log", "since": "yesterday"}));
    assert!(
        matches!(&r.outcome.result, Err(CallError::InvalidParams(m)) if m.contains("since")),
        "{:?}",
        r.outcome.result
    );
    let r = run(&lib, "read-log-file", json!({"path": "/workspace/uart.log", "level": "FATAL"}));
    assert!(
        matches!(&r.outcome.result, Err(CallError::InvalidParams(m)) if m.contains("level")),
        "{:?}",
        r.outcome.result
    );
    let r = run(&lib, "read-log-file", json!({"path": "/etc/passwd"}));
    assert!(r.outcome.result.is_err(), "outside the mount: {:?}", r.outcome.result);
}

#[test]
fn read_log_file_streams_a_large_log_in_constant_memory() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    // ~96 MiB of log, larger than the 32 MiB of linear memory the skill gets below.
    let sample = std::fs::read_to_string(example_dir().join("uart.log")).unwrap();
    let mut f = std::io::BufWriter::new(std::fs::File::create(ws.path().join("big.log")).unwrap());
    let mut written = 0;
    while written < 96 << 20 {
        std::io::Write::write_all(&mut f, sample.as_bytes()).unwrap();
        written += sample.len();
    }
    drop(f);
    let lib = install_all(home.path(), ws.path());
    let mut policy = skillhost::policy::Policy::load(&home.path().join("policy.toml")).unwrap();
    policy.skill_limits.insert(
        "read-log-file".into(),
        skillhost::capabilities::LimitsRequest { memory_mb: Some(32), ..Default::default() },
    );
    policy.save(&home.path().join("policy.toml")).unwrap();
    let r = run(
        &lib,
        "read-log-file",
        json!({"path": "/workspace/big.log", "keyword": "descriptor ring exhausted", "max_lines": 3}),
    );
    let matched: usize = meta(&r, "lines_matched").parse().unwrap();
    assert_eq!(
        matched,
        sample.lines().filter(|l| l.contains("descriptor ring exhausted")).count() * written.div_ceil(sample.len())
    );
    assert!(r.outcome.memory_peak_bytes < 32 << 20, "peak {}", r.outcome.memory_peak_bytes);
}

#[test]
fn query_issue_kb_ranks_the_matching_incident_first() {
    let home = tempfile::tempdir().unwrap();
    let lib = install_all(home.path(), &example_dir());
    let r = run(
        &lib,
        "query-issue-kb",
        json!({"query": "uart RX overrun DMA descriptor ring exhausted during flash erase"}),
    );
    assert_eq!(meta(&r, "top_id"), "KB-005", "{}", output(&r));
    let r = run(&lib, "query-issue-kb", json!({"query": "I2C bus stuck low"}));
    assert_eq!(meta(&r, "top_id"), "KB-008");
    let r = run(&lib, "query-issue-kb", json!({"query": "串口乱码"}));
    assert_ne!(meta(&r, "hits"), "0", "Chinese query: {}", output(&r));
    let r = run(&lib, "query-issue-kb", json!({"query": "zebra giraffe"}));
    assert_eq!(meta(&r, "hits"), "0");
    let r = run(&lib, "query-issue-kb", json!({"query": "overrun", "kb_path": "/workspace/uart.log"}));
    assert!(matches!(&r.outcome.result, Err(CallError::Failed(m)) if m.contains("uart.log")), "{:?}", r.outcome.result);
}

#[test]
fn snapshot_then_report_cites_every_conclusion() {
    let home = tempfile::tempdir().unwrap();
    let lib = install_all(home.path(), &example_dir());
    let opts = RunOptions { session: "analysis-1".into(), step: 3, ..Default::default() };
    let overrun = first_line_with("RX overrun");
    let exhausted = first_line_with("descriptor ring exhausted");
    let findings = json!([
        {"claim": "RX DMA ring runs dry", "evidence": [format!("L{exhausted}")]},
        {"claim": "Overruns drop bytes", "evidence": [format!("L{overrun}")]},
    ]);
    let r = run_with(&lib, "write-analysis-snapshot", json!({"findings": findings}), &opts);
    assert_eq!(meta(&r, "count"), "2");
    let stored =
        lib.store().unwrap().session_get("analysis-1", "findings").unwrap().expect("snapshot in session memory");
    assert!(stored.contains("RX DMA ring runs dry"));

    let r = run_with(&lib, "generate-report", json!({"title": "UART garbage"}), &opts);
    let report = output(&r);
    assert!(report.starts_with("# UART garbage"), "{report}");
    assert!(report.contains(&format!("L{exhausted}")) && report.contains(&format!("L{overrun}")), "{report}");

    // Another session sees nothing.
    let other = RunOptions { session: "analysis-2".into(), ..Default::default() };
    let r = run_with(&lib, "generate-report", json!({}), &other);
    assert!(matches!(&r.outcome.result, Err(CallError::InvalidParams(_))), "{:?}", r.outcome.result);

    // A conclusion without evidence is refused, naming it.
    let r = run_with(
        &lib,
        "generate-report",
        json!({"findings": [{"claim": "cosmic rays", "evidence": []}, {"claim": "ok", "evidence": ["L12"]}]}),
        &opts,
    );
    assert!(
        matches!(&r.outcome.result, Err(CallError::InvalidParams(m)) if m.contains("cosmic rays")),
        "{:?}",
        r.outcome.result
    );
    let r =
        run_with(&lib, "generate-report", json!({"findings": [{"claim": "vague", "evidence": ["somewhere"]}]}), &opts);
    assert!(
        matches!(&r.outcome.result, Err(CallError::InvalidParams(m)) if m.contains("vague")),
        "{:?}",
        r.outcome.result
    );
}

#[test]
fn instruction_skill_installs_but_does_not_run() {
    let home = tempfile::tempdir().unwrap();
    let lib = install_all(home.path(), &example_dir());
    let info = lib.info("publish-npm-package").unwrap();
    assert!(info.record.is_instruction());
    for section in ["## Steps", "## Pitfalls", "## Verification"] {
        assert!(info.manifest.body.contains(section), "missing {section}");
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let err = rt.block_on(lib.run("publish-npm-package", Value::Null, &RunOptions::default())).unwrap_err();
    assert!(err.to_string().contains("instruction skill"), "{err}");
}
