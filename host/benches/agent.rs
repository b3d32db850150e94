//! `cargo bench --bench agent`: the agent loop's own cost per step with the scripted provider
//! (context composition, parsing the action, executor bookkeeping, the audit step line, the
//! state save), with 50 installed skills and 10k memories, against a bare `Library::run` of
//! the same skill measured in the same run. Overhead = step time - bare call time.
//!
//! Each run is 8 steps (7 calls of a probe copy in `noop` mode, then a reply): runs stay the
//! length the loop is built for, so the history in the prompt does not grow without bound.
//! Step times are the gaps between consecutive progress callbacks, which fire after the
//! step's audit line and state save; the first step of each run is left out (it follows the
//! per-run setup, reported separately: catalog and memory summary loading).

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use skillhost::agent::profile::builtin_general;
use skillhost::agent::provider::scripted::ScriptedProvider;
use skillhost::agent::run::{self as agent, AgentOptions};
use skillhost::library::{Library, RunOptions};
use skillhost::memory::{MemoryKind, NewRecord, Provenance};

const SKILLS: usize = 50;
const MEMORIES: usize = 10_000;
const RUNS: usize = 40;
const STEPS: u32 = 8;

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    samples[((samples.len() as f64 - 1.0) * p).round() as usize]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

const TOPICS: [&str; 10] = [
    "parse CSV files into tables",
    "resize and crop images",
    "query a SQL database",
    "summarize meeting notes",
    "check HTTP endpoints for uptime",
    "translate text between languages",
    "lint YAML configuration",
    "compute file checksums",
    "extract dates from text",
    "convert units of measure",
];

/// The session of the most recent agent run (from the audit log).
fn outcome_session(lib: &Library) -> anyhow::Result<String> {
    let sessions = lib.audit_log().list()?;
    sessions
        .iter()
        .rev()
        .find(|s| s.session.starts_with("s-"))
        .map(|s| s.session.clone())
        .ok_or_else(|| anyhow::anyhow!("no agent session in the audit log"))
}

fn main() -> anyhow::Result<()> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap_or(Path::new(".")).to_path_buf();
    let probe = repo.join("target/skills/probe/skill.wasm");
    anyhow::ensure!(probe.exists(), "{} is missing: run `just build-skills` first", probe.display());
    let home = tempfile::tempdir()?;
    let sources = tempfile::tempdir()?;
    let lib = Library::open(home.path(), Some(sources.path()), None)?;

    let t = Instant::now();
    for i in 0..SKILLS {
        let name = format!("tool-{i:02}");
        let dir = sources.path().join(&name);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(
            dir.join("SKILL.md"),
            format!(
                "---\nname: {name}\ndescription: Helps {} (variant {i}).\nversion: 0.1.0\nparameters:\n  - name: mode\n    type: string\n    required: true\n  - name: arg\n    type: string\n  - name: n\n    type: integer\n---\nbody\n",
                TOPICS[i % TOPICS.len()]
            ),
        )?;
        std::fs::copy(&probe, dir.join("skill.wasm"))?;
        lib.install(&dir, &|_| Ok(None))?;
    }
    eprintln!("installed {SKILLS} skills in {:.1} s", t.elapsed().as_secs_f64());

    let t = Instant::now();
    let memory = lib.memory()?;
    let records: Vec<NewRecord> = (0..MEMORIES)
        .map(|i| NewRecord {
            namespace: "default".into(),
            kind: if i % 7 == 0 { MemoryKind::Pitfall } else { MemoryKind::Fact },
            content: format!("fact {i}: service {} answered in {} ms on host h{}", i % 97, i % 1000, i % 13),
            priority: (i % 4) as u8 + 1,
            tags: vec![],
            provenance: Provenance { skill: "bench".into(), skill_hash: "0".into(), session: "bench".into(), step: 0 },
        })
        .collect();
    for chunk in records.chunks(1000) {
        memory.add_batch(chunk.to_vec())?;
    }
    eprintln!("stored {MEMORIES} memories in {:.1} s", t.elapsed().as_secs_f64());

    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let params = json!({"mode": "noop"});
    // Warm the component cache and the loaded-skill cache.
    for i in 0..SKILLS {
        rt.block_on(lib.run(&format!("tool-{i:02}"), params.clone(), &RunOptions::default()))?;
    }

    // Baseline: a bare Library::run (validation, sandbox call, its audit line).
    let mut bare = Vec::new();
    for i in 0..RUNS * (STEPS as usize - 1) {
        let opts =
            RunOptions { session: "bare".into(), step: i as u32, namespace: "default".into(), ..Default::default() };
        let t = Instant::now();
        rt.block_on(lib.run(&format!("tool-{:02}", i % SKILLS), params.clone(), &opts))?;
        bare.push(t.elapsed());
    }

    let decisions_file = sources.path().join("decisions.json");
    let mut steps = Vec::new();
    let mut setups = Vec::new();
    let mut prompt_bytes = Vec::new();
    for run in 0..RUNS {
        let mut decide: Vec<Value> = (0..STEPS - 1)
            .map(|s| {
                json!({"reasoning": "bench", "next_action": "call_skill",
                    "skill_name": format!("tool-{:02}", (run * 7 + s as usize) % SKILLS), "parameters": {"mode": "noop"}})
            })
            .collect();
        decide.push(json!({"reasoning": "bench", "next_action": "reply", "message": "done"}));
        std::fs::write(&decisions_file, json!({ "decide": decide }).to_string())?;
        let provider = ScriptedProvider::load(&decisions_file).map_err(|e| anyhow::anyhow!("{e}"))?;
        let marks: Arc<Mutex<Vec<(Instant, usize)>>> = Arc::default();
        let sink = marks.clone();
        let options = AgentOptions {
            max_steps: Some(STEPS),
            tools: false,
            progress: Some(Box::new(move |s| {
                sink.lock().map(|mut m| m.push((Instant::now(), s.prompt_bytes))).unwrap_or(())
            })),
            ..AgentOptions::default()
        };
        let start = Instant::now();
        let outcome = rt.block_on(agent::run(
            &lib,
            &provider,
            &builtin_general(),
            "summarize meeting notes from the CSV export",
            &options,
        ))?;
        anyhow::ensure!(
            outcome.steps.iter().take(7).all(|s| s.status == "success"),
            "a bench step failed: {:?}",
            outcome.steps
        );
        let marks = marks.lock().map(|m| m.clone()).unwrap_or_default();
        let first_step = outcome.steps.first().map(|s| Duration::from_micros(s.elapsed_us)).unwrap_or_default();
        if let Some((first, _)) = marks.first() {
            setups.push((*first - start).saturating_sub(first_step));
        }
        // Steps 2..7 (the skill calls after the first); the reply step has no skill call.
        for w in marks.windows(2).take(STEPS as usize - 2) {
            steps.push(w[1].0 - w[0].0);
            prompt_bytes.push(w[1].1);
        }
    }

    // The two durable writes every step makes, alone: the audit step line (appended with
    // sync_data) and the state save (a redb commit), at the size the runs above wrote.
    let sample_state = memory.agent_session(&outcome_session(&lib)?)?.unwrap_or(Value::Null);
    let mut saves = Vec::new();
    let mut appends = Vec::new();
    for i in 0..200 {
        let t = Instant::now();
        memory.save_agent_session("bench-save", &sample_state)?;
        saves.push(t.elapsed());
        use skillhost::audit::{StepAction, StepEntry, StepStatus};
        let entry = StepEntry {
            params: json!({"mode": "noop"}),
            ..StepEntry::new("bench", i, StepAction::CallSkill, StepStatus::Success)
        };
        let t = Instant::now();
        lib.audit_log().append(entry.into_entry())?;
        appends.push(t.elapsed());
    }
    let (save50, append50) = (percentile(&mut saves, 0.5), percentile(&mut appends, 0.5));

    let (b50, b99) = (percentile(&mut bare, 0.5), percentile(&mut bare, 0.99));
    let (s50, s99) = (percentile(&mut steps, 0.5), percentile(&mut steps, 0.99));
    let setup50 = percentile(&mut setups, 0.5);
    prompt_bytes.sort();
    println!("agent loop, {SKILLS} skills, {MEMORIES} memories, {} steps over {RUNS} runs of {STEPS}", steps.len());
    println!("  bare Library::run (baseline)   p50 {:>8.1} us   p99 {:>8.1} us", us(b50), us(b99));
    println!("  agent step (call + loop)       p50 {:>8.1} us   p99 {:>8.1} us", us(s50), us(s99));
    println!(
        "  loop overhead per step         p50 {:>8.1} us   p99 {:>8.1} us   (step - bare call; target p50 < 1000 us)",
        us(s50) - us(b50),
        us(s99) - us(b99)
    );
    println!(
        "  of which durable writes        p50 {:>8.1} us   (state save {:.1} us + audit step line {:.1} us, each fsynced)",
        us(save50) + us(append50),
        us(save50),
        us(append50)
    );
    println!(
        "  loop overhead without them     p50 {:>8.1} us   (composition, parse, executor bookkeeping)",
        us(s50) - us(b50) - us(save50) - us(append50)
    );
    println!("  per-run setup (catalog + MEMORY.md view + recall), p50 {:.1} us", us(setup50));
    println!("  prompt size p50 {} bytes", prompt_bytes[prompt_bytes.len() / 2]);
    Ok(())
}
