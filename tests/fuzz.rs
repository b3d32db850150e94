//! Fuzzing the parsers that take untrusted input (issue 11), on the stable toolchain.
//!
//! cargo-fuzz needs a nightly compiler, which this project does not use; this is a
//! mutation fuzzer in plain Rust instead: each target starts from real seeds (a SKILL.md,
//! a policy, a bundle packed by `skill pack`, an audit log written by real calls, a memory
//! export, model replies) and mutates them (byte flips, inserts, deletes, duplicated ranges,
//! splices, tokens of the input's own syntax). It is not coverage-guided. Every target must
//! return an error or a value, never panic, and some check a property on top:
//! `normalize_path` is idempotent, redaction leaves no held value findable, a bundle never
//! writes outside the directory it is unpacked into.
//!
//! `just test` runs a short, deterministic smoke of every target (seed 1). A longer run:
//! `SKILLHOST_FUZZ_ITERS=200000 SKILLHOST_FUZZ_SEED=$RANDOM cargo test --release --test fuzz`.
//! A failure prints the target, seed, iteration and input: add that input as a seed or a
//! regression test next to the parser.

mod common;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

use skillhost::agent::repair::repair_json;
use skillhost::audit::AuditLog;
use skillhost::capabilities::{NetRule, network::normalize_path};
use skillhost::manifest::Manifest;
use skillhost::memory::{Memory, MemoryConfig, MemoryKind, NewRecord, Provenance};
use skillhost::policy::{Policy, parse_grant};
use skillhost::sandbox::LeakScanner;

/// xorshift64*: small, deterministic, good enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 { 0 } else { (self.next() % n as u64) as usize }
    }
}

fn iterations(default: usize) -> usize {
    std::env::var("SKILLHOST_FUZZ_ITERS").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn seed() -> u64 {
    std::env::var("SKILLHOST_FUZZ_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(1).max(1)
}

fn mutate(rng: &mut Rng, input: &[u8], seeds: &[Vec<u8>], tokens: &[&str]) -> Vec<u8> {
    let mut out = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        let len = out.len();
        match rng.below(7) {
            0 if len > 0 => {
                let i = rng.below(len);
                out[i] ^= 1 << rng.below(8);
            }
            1 => {
                let i = rng.below(len + 1);
                out.insert(i, rng.next() as u8);
            }
            2 if len > 0 => {
                let a = rng.below(len);
                let b = (a + 1 + rng.below(16)).min(len);
                out.drain(a..b);
            }
            3 if len > 0 => {
                let a = rng.below(len);
                let b = (a + 1 + rng.below(64)).min(len);
                let piece = out[a..b].to_vec();
                let at = rng.below(out.len() + 1);
                out.splice(at..at, piece);
            }
            4 if !tokens.is_empty() => {
                let t = tokens[rng.below(tokens.len())].as_bytes();
                let at = rng.below(len + 1);
                out.splice(at..at, t.iter().copied());
            }
            5 if !seeds.is_empty() => {
                let other = &seeds[rng.below(seeds.len())];
                let cut = rng.below(len + 1);
                let from = rng.below(other.len() + 1);
                out.truncate(cut);
                out.extend_from_slice(&other[from..]);
            }
            _ if len > 0 => out.truncate(rng.below(len)),
            _ => {}
        }
    }
    out
}

/// Run `target` on mutations of `seeds`; a panic fails the test with what reproduces it.
fn fuzz(name: &str, seeds: &[Vec<u8>], tokens: &[&str], default_iters: usize, mut target: impl FnMut(&[u8])) {
    let seed = seed();
    let mut rng =
        Rng(seed ^ name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3)));
    let mut input = seeds[0].clone();
    for i in 0..iterations(default_iters) {
        // Mostly mutate further, sometimes restart from a seed, so inputs stay near the syntax.
        if i % 8 == 0 {
            input = seeds[rng.below(seeds.len())].clone();
        }
        input = mutate(&mut rng, &input, seeds, tokens);
        input.truncate(64 * 1024);
        if catch_unwind(AssertUnwindSafe(|| target(&input))).is_err() {
            panic!(
                "fuzz target {name} panicked (SKILLHOST_FUZZ_SEED={seed}, iteration {i}) on input:\n{}",
                String::from_utf8_lossy(&input).escape_debug()
            );
        }
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

const YAML_TOKENS: &[&str] = &[
    "---\n",
    ":",
    ": ",
    "- ",
    "\n  ",
    "\n    ",
    "capabilities:",
    "parameters:",
    "limits:",
    "secrets:",
    "network:",
    "filesystem:",
    "{",
    "}",
    "[",
    "]",
    "\"",
    "'",
    "&a ",
    "*a",
    "!!binary ",
    "<<: *a",
    "%YAML 1.2\n",
    "\t",
    "\u{feff}",
    "\u{202e}",
    "~",
    "null",
    "true",
    "0x10",
    "1e999",
    "-1",
    "18446744073709551616",
    "$WORKSPACE",
    "..",
    "#",
    "|\n",
    ">\n",
];

#[test]
fn skill_md() {
    let seeds: Vec<Vec<u8>> = ["read-log-file", "query-issue-kb", "generate-report", "publish-npm-package"]
        .iter()
        .map(|n| std::fs::read(common::repo().join("skills-src").join(n).join("SKILL.md")).unwrap())
        .chain([b"---\nname: s\ndescription: d\nversion: 0.1.0\ncapabilities:\n  secrets:\n    - name: T\n      hosts: [api.example.com]\n  network: [https://api.example.com/v1]\n  filesystem:\n    - host: $WORKSPACE/x\n      guest: /w\n      access: read-write\nlimits:\n  memory_mb: 64\n---\nbody\n".to_vec()])
        .collect();
    fuzz("skill_md", &seeds, YAML_TOKENS, 3000, |b| {
        let _ = Manifest::parse(Path::new("fuzz/SKILL.md"), &text(b));
    });
}

#[test]
fn policy_and_grant_specs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.toml");
    let seeds: Vec<Vec<u8>> = vec![
        b"[paths]\nWORKSPACE = \"/tmp/w\"\n\n[memory]\nmax_skill_priority = 3\n\n[skills.gh]\nnetwork = [\"https://api.github.com\"]\nsecrets = [\"GITHUB_TOKEN\", { name = \"X\", hosts = [\"a.example.com\"] }]\nenv = [\"LANG\"]\nmemory = \"read\"\nsession = true\n\n[skills.gh.limits]\nwall_time_ms = 60000\n".to_vec(),
        b"[skills.fs]\nfilesystem = [{ host = \"$WORKSPACE\", guest = \"/w\", access = \"read-write\" }]\n".to_vec(),
    ];
    let tokens =
        ["[", "]", "[[", "=", "\"", "'''", "\n", "skills.", "limits", "{", "}", ",", "inf", "nan", "-0", "1979-05-27"];
    fuzz("policy", &seeds, &tokens, 2000, |b| {
        std::fs::write(&path, b).unwrap();
        let _ = Policy::load(&path);
    });
    let declared = Manifest::parse(Path::new("SKILL.md"), &text(&seeds_for_grants())).unwrap();
    let spec_seeds: Vec<Vec<u8>> = [
        "filesystem=/w:read",
        "network=https://api.example.com/v1/x",
        "env=LANG",
        "memory=read",
        "secrets=T",
        "limits",
        "all",
        "session",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    fuzz("grant_spec", &spec_seeds, &["=", ":", "/", "*", "..", "%2e", "read-write", ","], 3000, |b| {
        let _ = parse_grant(&text(b), &declared.capabilities, &declared.limits);
    });
}

fn seeds_for_grants() -> Vec<u8> {
    b"---\nname: g\ndescription: d\nversion: 0.1.0\ncapabilities:\n  filesystem:\n    - host: $WORKSPACE\n      guest: /w\n      access: read-write\n  network: [https://api.example.com/v1]\n  env: [LANG]\n  memory: write\n  session: true\n  secrets:\n    - name: T\n      hosts: [api.example.com]\nlimits:\n  wall_time_ms: 60000\n---\n".to_vec()
}

#[test]
fn network_rules_and_paths() {
    let seeds: Vec<Vec<u8>> = [
        "https://api.example.com/v1",
        "http://127.0.0.1:8080/ok",
        "https://*.example.com:*",
        "http://[::1]:9000/a/b",
        "/ok/../admin;x",
        "/a/%2e%2E/b/%7e/./c",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    let tokens = ["://", ":", "*", ".", "..", "/", "%", "%2", "%2f", "%25", ";", "[", "]", "@", "?", "#", "\\", "%00"];
    fuzz("net_rule", &seeds, &tokens, 5000, |b| {
        let t = text(b);
        if let Ok(rule) = NetRule::parse(&t) {
            let _ = rule.to_string();
            let half: String = t.chars().skip(t.chars().count() / 2).collect();
            let path = format!("/{half}");
            let _ = rule.matches("https", "api.example.com", 443, &path);
        }
        if let Some(n) = normalize_path(&t) {
            assert_eq!(normalize_path(&n).as_deref(), Some(n.as_str()), "normal form of {t:?} is not stable");
            assert!(!n.split('/').any(|s| s == ".." || s == "."), "dot segment left in {n:?}");
        }
    });
}

#[test]
fn leak_redaction_leaves_nothing_findable() {
    let values = ["sk-live-7f3a9c2e51d84b60", "hunter2hunter2", "p@ss w0rd/with+symbols=="];
    let scanner = LeakScanner::new(values.iter().enumerate().map(|(i, v)| (format!("secret S{i}"), *v, 4)));
    let seeds: Vec<Vec<u8>> = values.iter().map(|v| format!("token={v}&x=1").into_bytes()).collect();
    fuzz("leak_scan", &seeds, &values, 3000, |b| {
        let mut t = text(b);
        scanner.redact(&mut t);
        assert!(scanner.find(t.as_bytes()).is_none(), "redacted text still holds a value: {t:?}");
        let mut bytes = b.to_vec();
        scanner.mask(&mut bytes);
        assert_eq!(bytes.len(), b.len());
    });
}

#[test]
fn model_reply_json_repair() {
    let seeds: Vec<Vec<u8>> = [
        r#"{"reasoning": "read it", "next_action": "call_skill", "skill_name": "read-log-file", "parameters": {"path": "uart.log"}}"#,
        "Sure! ```json\n{\"next_action\": \"reply\", \"message\": \"done\",}\n```",
        r#"{"next_action": "require_more", "message": "which port?" "#,
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    let tokens =
        ["{", "}", "[", "]", "\"", ",", ":", "```", "json", "\\", "\\u", "\\ud800", "null", "1e309", "/*", "*/"];
    fuzz("json_repair", &seeds, &tokens, 5000, |b| {
        let _ = repair_json(&text(b));
    });
}

#[test]
fn bundle_unpacking_stays_inside_its_directory() {
    let src = tempfile::tempdir().unwrap();
    let dir = src.path().join("fuzzed");
    std::fs::create_dir_all(dir.join("references")).unwrap();
    std::fs::write(dir.join("SKILL.md"), "---\nname: fuzzed\ndescription: d\nversion: 0.1.0\n---\nbody\n").unwrap();
    std::fs::write(dir.join("references").join("notes.md"), "notes").unwrap();
    let packed = src.path().join("fuzzed.skill");
    skillhost::bundle::pack(&dir, &packed).unwrap();
    let seeds = vec![std::fs::read(&packed).unwrap()];
    let outer = tempfile::tempdir().unwrap();
    let into = outer.path().join("into");
    let tokens = ["../", "/", "\0", "ustar", "SKILL.md", "manifest.json", "..", "\u{ff}"];
    fuzz("bundle", &seeds, &tokens, 600, |b| {
        std::fs::create_dir_all(&into).unwrap();
        let _ = skillhost::bundle::unpack(b, &into);
        let escaped: Vec<_> = std::fs::read_dir(outer.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name())
            .filter(|n| n != "into")
            .collect();
        assert!(escaped.is_empty(), "the bundle wrote outside its directory: {escaped:?}");
        std::fs::remove_dir_all(&into).unwrap();
    });
}

#[test]
fn audit_reader() {
    let env = common::Env::new();
    let lib = env.library();
    env.install_granted(&lib, "p", "");
    for mode in ["noop", "echo", "fail"] {
        common::run(&lib, "p", serde_json::json!({"mode": mode, "arg": "x"}));
    }
    let log_path = env.home.path().join("audit").join("audit.jsonl");
    let seeds = vec![std::fs::read(&log_path).unwrap()];
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let tokens = ["\n", "{", "}", "\"hash\"", "\"prev\"", "\"seq\":", "0", "-1", "null", "\"", "\r\n"];
    fuzz("audit", &seeds, &tokens, 1500, |b| {
        std::fs::write(&path, b).unwrap();
        let log = AuditLog::new(&path);
        let _ = log.verify();
        let _ = log.read();
        let _ = log.list();
    });
}

#[test]
fn memory_import() {
    let dir = tempfile::tempdir().unwrap();
    let memory = Memory::open(dir.path(), MemoryConfig::default()).unwrap();
    let provenance = Provenance { skill: "user".into(), skill_hash: String::new(), session: "s".into(), step: 0 };
    for (i, text) in
        ["prefers tabs over spaces", "项目使用 pnpm 管理依赖", "UART 115200 8N1 on ttyS2"].iter().enumerate()
    {
        memory
            .add(NewRecord {
                namespace: "default".into(),
                kind: if i == 0 { MemoryKind::Preference } else { MemoryKind::Fact },
                content: text.to_string(),
                priority: 3,
                tags: vec!["seed".into()],
                provenance: provenance.clone(),
            })
            .unwrap();
    }
    let mut export = Vec::new();
    memory.export(&mut export).unwrap();
    let seeds = vec![export];
    let tokens = [
        "\n",
        "{",
        "}",
        "\"priority\":",
        "9",
        "-1",
        "\"kind\":",
        "\"unknown\"",
        "\"content\":",
        "\"\"",
        "\"namespace\":",
        "\"../x\"",
    ];
    fuzz("memory_import", &seeds, &tokens, 300, |b| {
        let _ = memory.import(&text(b), "fuzz");
    });
    // The store is still whole: the seeds are there and it answers searches.
    assert!(memory.all_records().unwrap().len() >= 3);
    memory.search("tabs", &Default::default(), 5).unwrap();
}
