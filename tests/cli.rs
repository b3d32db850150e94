//! The `skillhost` binary end to end: install with grants, list, info, run, policy, remove,
//! with `--json` output and exit codes.

mod common;

use assert_cmd::Command;
use common::Env;
use serde_json::Value;

fn json_of(out: &[u8]) -> Value {
    serde_json::from_slice(out).unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(out)))
}

#[test]
fn install_grant_run_revoke_remove() {
    let env = Env::new();
    std::fs::write(env.workspace.path().join("notes.txt"), "hello from the workspace").unwrap();
    let dir = env.probe_as(
        "reader",
        "capabilities:\n  filesystem:\n    - host: $WORKSPACE\n      guest: /workspace\n      access: read\n  session: true\n",
    );

    let out = env
        .skillhost()
        .args(["--json", "skill", "install"])
        .arg(&dir)
        .args(["--grant", "filesystem"])
        .assert()
        .success();
    let report = json_of(&out.get_output().stdout);
    assert_eq!(report["name"], "reader");
    assert_eq!(report["kind"], "executable");
    assert_eq!(report["granted"], serde_json::json!(["filesystem $WORKSPACE -> /workspace (read)"]));
    assert_eq!(report["not_granted"], serde_json::json!(["session"]));
    assert!(
        report["imports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i.as_str().unwrap().starts_with("wasi:filesystem/preopens"))
    );

    let out = env.skillhost().args(["--json", "skill", "list"]).assert().success();
    let list = json_of(&out.get_output().stdout);
    assert_eq!(list[0]["name"], "reader");

    let out = env
        .skillhost()
        .args(["--json", "skill", "run", "reader", "-p", "mode=read-file", "-p", "arg=/workspace/notes.txt"])
        .assert()
        .success();
    let run = json_of(&out.get_output().stdout);
    assert_eq!(run["result"]["ok"]["output"], "hello from the workspace");
    assert_eq!(run["result"]["ok"]["status"], "success");

    // `-p n=5` is typed by SKILL.md (integer), `-p arg=123` stays a string.
    env.skillhost()
        .args(["skill", "run", "reader", "-p", "mode=echo", "-p", "arg=123", "-p", "n=5"])
        .assert()
        .success();

    // Invalid params: exit 3 with a message naming the parameter.
    let out = env.skillhost().args(["skill", "run", "reader", "--params", r#"{"mode": 1}"#]).assert().code(3);
    let stdout = String::from_utf8_lossy(&out.get_output().stdout).to_string();
    assert!(stdout.contains("invalid parameters") && stdout.contains("`mode`"), "{stdout}");
    // Unparsable --params: a usage error (exit 2), says what to pass.
    let out = env.skillhost().args(["skill", "run", "reader", "--params", "{mode"]).assert().code(2);
    assert!(String::from_utf8_lossy(&out.get_output().stderr).contains("from --params are not valid JSON"));

    env.skillhost().args(["policy", "revoke", "reader", "filesystem"]).assert().success();
    let out = env
        .skillhost()
        .args(["--json", "skill", "run", "reader", "-p", "mode=read-file", "-p", "arg=/workspace/notes.txt"])
        .assert()
        .code(3);
    let run = json_of(&out.get_output().stdout);
    assert_eq!(run["result"]["error"]["kind"], "failed");

    env.skillhost().args(["policy", "grant", "reader", "session", "filesystem=/workspace:read"]).assert().success();
    let out = env.skillhost().args(["--json", "policy", "show", "reader"]).assert().success();
    let policy = json_of(&out.get_output().stdout);
    assert_eq!(policy["skills"]["reader"]["session"], true);
    // Granting what the skill never declared is refused.
    let out = env.skillhost().args(["policy", "grant", "reader", "env=HOME"]).assert().code(1);
    assert!(String::from_utf8_lossy(&out.get_output().stderr).contains("does not declare env HOME"));

    let out = env.skillhost().args(["--json", "skill", "info", "reader"]).assert().success();
    let info = json_of(&out.get_output().stdout);
    assert_eq!(info["effective"].as_array().unwrap().len(), 2);

    env.skillhost().args(["skill", "remove", "reader"]).assert().success();
    let out = env.skillhost().args(["skill", "run", "reader", "-p", "mode=noop"]).assert().code(1);
    assert!(String::from_utf8_lossy(&out.get_output().stderr).contains("not installed"));
    let out = env.skillhost().args(["--json", "policy", "show"]).assert().success();
    assert!(json_of(&out.get_output().stdout)["skills"].get("reader").is_none(), "grants removed with the skill");
}

#[test]
fn install_errors_are_readable() {
    let env = Env::new();
    let out = env.skillhost().args(["skill", "install", "/nonexistent/skill"]).assert().code(1);
    let err = String::from_utf8_lossy(&out.get_output().stderr).to_string();
    assert!(err.contains("/nonexistent/skill/SKILL.md") && err.contains("cannot read"), "{err}");

    let dir = env.sources.path().join("typo");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("SKILL.md"), "---\nname: typo\ndescription: x\ncapabilites:\n  memory: read\n---\n")
        .unwrap();
    let out = env.skillhost().args(["skill", "install"]).arg(&dir).assert().code(1);
    let err = String::from_utf8_lossy(&out.get_output().stderr).to_string();
    assert!(err.contains("typo/SKILL.md:4") && err.contains("capabilites"), "{err}");

    let dir = env.probe_as("p", "");
    let out = env.skillhost().args(["skill", "install"]).arg(&dir).args(["--grant", "network"]).assert().code(1);
    assert!(String::from_utf8_lossy(&out.get_output().stderr).contains("does not declare network access"));
    env.skillhost().args(["skill", "run", "p", "-p", "mode=noop"]).assert().code(1);
}

#[test]
fn project_policy_can_only_narrow() {
    let env = Env::new();
    std::fs::write(env.workspace.path().join("notes.txt"), "user workspace").unwrap();
    let dir = env.probe_as(
        "reader",
        "capabilities:\n  filesystem:\n    - host: $WORKSPACE\n      guest: /workspace\n      access: read\n  env: [PATH]\n",
    );
    env.skillhost().args(["skill", "install"]).arg(&dir).args(["--grant", "filesystem"]).assert().success();
    let read = ["--json", "skill", "run", "reader", "-p", "mode=read-file", "-p", "arg=/workspace/notes.txt"];

    // A project file (which a skill with write access could have planted) tries to repoint
    // $WORKSPACE and to grant env: both are ignored.
    let project = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(project.path().join(".skillhost")).unwrap();
    std::fs::write(
        project.path().join(".skillhost/policy.toml"),
        "[paths]\nWORKSPACE = \"/etc\"\n\n[skills.reader]\nenv = [\"PATH\"]\nfilesystem = [{ host = \"$WORKSPACE\", guest = \"/workspace\", access = \"read\" }]\n",
    )
    .unwrap();
    let out = env.skillhost().current_dir(project.path()).args(read).assert().success();
    assert_eq!(json_of(&out.get_output().stdout)["result"]["ok"]["output"], "user workspace");
    let out = env
        .skillhost()
        .current_dir(project.path())
        .args(["--json", "skill", "run", "reader", "-p", "mode=env", "-p", "arg=PATH"])
        .assert()
        .success();
    assert_eq!(json_of(&out.get_output().stdout)["result"]["ok"]["output"], "PATH is not set");

    // Narrowing works: an empty table takes the grant away in this project.
    std::fs::write(project.path().join(".skillhost/policy.toml"), "[skills.reader]\n").unwrap();
    let out = env.skillhost().current_dir(project.path()).args(read).assert().code(3);
    let run = json_of(&out.get_output().stdout);
    assert!(run["not_granted"].to_string().contains("filesystem"), "{run}");

    std::fs::write(project.path().join(".skillhost/policy.toml"), "[skills.reader\n").unwrap();
    let out = env
        .skillhost()
        .current_dir(project.path())
        .args(["skill", "run", "reader", "-p", "mode=noop"])
        .assert()
        .code(1);
    let err = String::from_utf8_lossy(&out.get_output().stderr).to_string();
    assert!(err.contains(".skillhost/policy.toml is invalid"), "{err}");
}

#[test]
fn limits_above_the_defaults_need_consent() {
    let env = Env::new();
    let dir = env.probe_as("slow", "limits:\n  wall_time_ms: 60000\n  memory_mb: 16\n");
    let out = env.skillhost().args(["--json", "skill", "install"]).arg(&dir).assert().success();
    let report = json_of(&out.get_output().stdout);
    assert_eq!(report["limits_requested"], serde_json::json!(["limit wall_time_ms 60000 (default 10000)"]));
    assert_eq!(report["limits"]["wall_time_ms"], 10000);
    assert_eq!(report["limits"]["memory_mb"], 16, "asking for less needs no consent");
    env.skillhost().args(["policy", "grant", "slow", "limits"]).assert().success();
    let out = env.skillhost().args(["--json", "skill", "info", "slow"]).assert().success();
    assert_eq!(json_of(&out.get_output().stdout)["limits"]["wall_time_ms"], 60000);
    env.skillhost().args(["policy", "revoke", "slow", "limits"]).assert().success();
    let out = env.skillhost().args(["--json", "skill", "info", "slow"]).assert().success();
    assert_eq!(json_of(&out.get_output().stdout)["limits"]["wall_time_ms"], 10000);
}

#[test]
fn misuse_is_refused_clearly() {
    let env = Env::new();
    let dir = env.probe_as("p", "capabilities:\n  session: true\n");
    // --yes and --grant contradict each other.
    env.skillhost().args(["skill", "install"]).arg(&dir).args(["--yes", "--grant", "session"]).assert().code(2);
    env.skillhost().args(["skill", "install"]).arg(&dir).args(["--grant", "session"]).assert().success();
    // Revoking what is not held says so.
    let out = env.skillhost().args(["policy", "revoke", "p", "env=HOME"]).assert().code(1);
    assert!(String::from_utf8_lossy(&out.get_output().stderr).contains("holds nothing matching"));
    // Names are names, not paths.
    let out = env.skillhost().args(["skill", "run", "../../p", "-p", "mode=noop"]).assert().code(1);
    assert!(String::from_utf8_lossy(&out.get_output().stderr).contains("is not a skill name"));
}

#[test]
fn a_held_memory_store_does_not_block_the_skills_that_need_it() {
    let env = Env::new();
    let plain = env.probe_as("plain", "");
    let stateful = env.probe_as("stateful", "capabilities:\n  session: true\n");
    env.skillhost().args(["skill", "install"]).arg(&plain).arg("--yes").assert().success();
    env.skillhost().args(["skill", "install"]).arg(&stateful).arg("--yes").assert().success();
    let held =
        skillhost::memory::Memory::open(&env.home.path().join("memory"), skillhost::memory::MemoryConfig::default())
            .unwrap();
    assert!(held.is_owner());
    env.skillhost().args(["skill", "run", "plain", "-p", "mode=noop"]).assert().success();
    // The run is served by the process that holds the store (issue 9, defect 8).
    env.skillhost()
        .args(["skill", "run", "stateful", "-p", "mode=session-get"])
        .env("SKILLHOST_MEMORY_WAIT_MS", "200")
        .assert()
        .success();
}

#[test]
fn the_demo_runs_end_to_end() {
    let home = tempfile::tempdir().unwrap();
    let out = std::process::Command::new("bash")
        .arg(common::repo().join("examples/log-analysis/demo.sh"))
        .env("SKILLHOST_DEMO_HOME", home.path())
        .env("SKILLHOST_BIN", assert_cmd::cargo::cargo_bin("skillhost"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "demo failed: {stdout}\n{stderr}");
    // Offline, the provider is announced as the scripted replay of the shipped decisions.
    assert!(stderr.contains("provider: scripted (") && stderr.contains("decisions.json"), "{stderr}");
    // Live progress: the four skills of the source's happy path, then the reply.
    let steps: Vec<&str> = stderr.lines().filter(|l| l.starts_with("[step ")).collect();
    let expected = ["read-log-file", "query-issue-kb", "write-analysis-snapshot", "generate-report", "reply"];
    assert_eq!(steps.len(), expected.len(), "{stderr}");
    for (i, (line, what)) in steps.iter().zip(expected).enumerate() {
        assert!(line.starts_with(&format!("[step {}/8] {what}", i + 1)), "{line}");
        assert!(line.contains("-> success") || line.contains("-> answered"), "{line}");
    }
    // The host's note is a line of its own, not an escaped newline at the end of the step's.
    assert!(stderr.lines().any(|l| l.starts_with("    memories stored: #")), "{stderr}");
    assert!(!stderr.contains("\\u{a}"), "{stderr}");
    // The final answer cites the chain around the first overrun, all grounded.
    assert!(stdout.contains("# Why does the UART occasionally print garbage?"), "{stdout}");
    for line in ["L1240", "L1241", "L1242", "L1243", "L1244"] {
        assert!(stdout.contains(line), "{line} not cited: {stdout}");
    }
    assert!(!stdout.contains("[unsupported"), "{stdout}");
    assert!(stderr.contains("3 conclusions, 3 cited, 3 grounded, 0 marked unsupported"), "{stderr}");
    assert!(stdout.contains("does not exist inside the sandbox"), "{stdout}");
    let audit = skillhost::audit::AuditLog::in_home(home.path());
    let entries = audit.read().unwrap().entries;
    let step_entries = entries.iter().filter(|e| e["kind"] == "step").count();
    assert_eq!(step_entries, 5, "one audit line per agent step");
    // 4 skill calls by the agent + 1 refused read at the end, each with its own call line.
    assert_eq!(entries.iter().filter(|e| e["kind"] == "call").count(), 5);
    assert_eq!(audit.verify().unwrap().entries, 10, "one chained audit line per step and per skill run");
}

#[test]
fn concurrent_grants_are_not_lost() {
    let env = Env::new();
    let names: Vec<String> = (0..8).map(|i| format!("V{i}")).collect();
    let dir = env.probe_as("p", &format!("capabilities:\n  env: [{}]\n", names.join(", ")));
    env.skillhost().args(["skill", "install"]).arg(&dir).assert().success();
    let children: Vec<_> = names
        .iter()
        .map(|n| {
            std::process::Command::new(assert_cmd::cargo::cargo_bin("skillhost"))
                .env("SKILLHOST_HOME", env.home.path())
                .envs(common::store_env(env.home.path()))
                .args(["policy", "grant", "p", &format!("env={n}")])
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let out = env.skillhost().args(["--json", "policy", "show", "p"]).assert().success();
    let granted = json_of(&out.get_output().stdout)["skills"]["p"]["env"].as_array().unwrap().len();
    assert_eq!(granted, 8, "every concurrent grant kept");
}

#[test]
fn search_finds_installed_skills_by_task() {
    let env = Env::new();
    for s in ["read-log-file", "query-issue-kb", "generate-report", "publish-npm-package"] {
        env.skillhost().args(["skill", "install"]).arg(common::built(s)).assert().success();
    }
    let top = |query: &str| {
        let out = env.skillhost().args(["--json", "skill", "search", query, "--top", "2"]).assert().success();
        let hits = json_of(&out.get_output().stdout);
        hits[0]["name"].as_str().unwrap_or("").to_string()
    };
    assert_eq!(top("I need to release my package to npm"), "publish-npm-package");
    assert_eq!(top("find past incidents with the same symptom"), "query-issue-kb");
    assert_eq!(top("帮我把 npm 包发布出去"), "publish-npm-package");
    let out = env.skillhost().args(["--json", "skill", "search", "zebra giraffe"]).assert().success();
    assert_eq!(json_of(&out.get_output().stdout), serde_json::json!([]));
}

/// Run `skillhost ARGS` on a pseudo-terminal (util-linux `script`), answering `answer`.
fn on_tty(env: &Env, args: &str, answer: &str) -> String {
    let bin = assert_cmd::cargo::cargo_bin("skillhost");
    let out = std::process::Command::new("script")
        .args(["-qec", &format!("{} {args}", bin.display()), "/dev/null"])
        .env("SKILLHOST_HOME", env.home.path())
        .envs(common::store_env(env.home.path()))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(answer.as_bytes())?;
            c.wait_with_output()
        })
        .expect("util-linux `script` runs the command on a pty");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn install_asks_on_a_tty_and_upgrades_ask_only_for_new_rights() {
    let env = Env::new();
    let v1 = env.probe_as("asker", "capabilities:\n  env: [PATH]\n");
    let screen = on_tty(&env, &format!("skill install {}", v1.display()), "y\n");
    assert!(screen.contains("asker asks for:") && screen.contains("env PATH"), "{screen}");
    let out = env.skillhost().args(["--json", "policy", "show", "asker"]).assert().success();
    assert_eq!(json_of(&out.get_output().stdout)["skills"]["asker"]["env"], serde_json::json!(["PATH"]));

    // v2 adds session: the user first confirms that the new content keeps env PATH (issue
    // 11), then only session is asked, and declining keeps env granted and session off.
    std::fs::write(
        v1.join("SKILL.md"),
        std::fs::read_to_string(v1.join("SKILL.md"))
            .unwrap()
            .replace("  env: [PATH]\n", "  env: [PATH]\n  session: true\n"),
    )
    .unwrap();
    let screen = on_tty(&env, &format!("skill install {}", v1.display()), "y\nn\n");
    assert!(screen.contains("(grants kept: env PATH)") && screen.contains("Replace it"), "{screen}");
    assert!(screen.contains("newly asks for:") && screen.contains("- session"), "{screen}");
    let prompt = &screen[screen.find("newly asks for:").unwrap()..screen.find("Grant these?").unwrap()];
    assert!(!prompt.contains("env PATH"), "already granted rights are not asked again: {prompt}");
    let out = env.skillhost().args(["--json", "policy", "show", "asker"]).assert().success();
    let granted = json_of(&out.get_output().stdout)["skills"]["asker"].clone();
    assert_eq!(granted["env"], serde_json::json!(["PATH"]));
    assert!(granted.get("session").is_none(), "{granted}");
    let out = env.skillhost().args(["--json", "skill", "info", "asker"]).assert().success();
    let declared = json_of(&out.get_output().stdout)["declared"].clone();
    assert!(declared.to_string().contains("session"), "the confirmed version is installed: {declared}");
}

#[test]
fn workspace_precedence_flag_then_user_policy_then_cwd() {
    let env = Env::new();
    let dir = env.probe_as(
        "reader",
        "capabilities:\n  filesystem:\n    - host: $WORKSPACE\n      guest: /workspace\n      access: read\n",
    );
    env.skillhost().args(["skill", "install"]).arg(&dir).arg("--yes").assert().success();
    let [from_flag, from_policy, from_cwd] = [(); 3].map(|_| tempfile::tempdir().unwrap());
    for (d, text) in [(&from_flag, "flag"), (&from_policy, "policy"), (&from_cwd, "cwd")] {
        std::fs::write(d.path().join("where.txt"), text).unwrap();
    }
    let read = |cwd: &std::path::Path, flag: Option<&std::path::Path>| {
        let mut c = Command::cargo_bin("skillhost").unwrap();
        c.env("SKILLHOST_HOME", env.home.path()).envs(common::store_env(env.home.path())).current_dir(cwd);
        if let Some(f) = flag {
            c.arg("--workspace").arg(f);
        }
        let out = c
            .args(["--json", "skill", "run", "reader", "-p", "mode=read-file", "-p", "arg=/workspace/where.txt"])
            .assert()
            .success();
        json_of(&out.get_output().stdout)["result"]["ok"]["output"].as_str().unwrap().to_string()
    };
    assert_eq!(read(from_cwd.path(), None), "cwd");
    let policy = env.home.path().join("policy.toml");
    let text = std::fs::read_to_string(&policy).unwrap();
    std::fs::write(&policy, format!("[paths]\nWORKSPACE = \"{}\"\n\n{text}", from_policy.path().display())).unwrap();
    assert_eq!(read(from_cwd.path(), None), "policy");
    assert_eq!(read(from_cwd.path(), Some(from_flag.path())), "flag");
}

#[test]
fn memory_commands_search_quarantine_export_and_import() {
    let env = Env::new();
    for name in ["notes", "kb"] {
        let dir = env.probe_as(name, "capabilities:\n  memory: write\n");
        env.skillhost().args(["skill", "install"]).arg(&dir).arg("--yes").assert().success();
    }
    env.skillhost()
        .args([
            "skill",
            "run",
            "notes",
            "-p",
            "mode=remember",
            "-p",
            "arg=the staging server is called atlas",
            "-p",
            "n=2",
        ])
        .assert()
        .success();
    env.skillhost()
        .args(["skill", "run", "kb", "-p", "mode=remember", "-p", "arg=ticket 42 was a baud mismatch", "-p", "n=1"])
        .assert()
        .success();
    let notes_hash =
        json_of(&env.skillhost().args(["--json", "skill", "info", "notes"]).output().unwrap().stdout)["record"]["content_hash"]
            .as_str()
            .unwrap()
            .to_string();

    let hits = json_of(&env.skillhost().args(["--json", "memory", "search", "atlas staging"]).output().unwrap().stdout);
    let hits = hits.as_array().unwrap();
    assert_eq!(hits.len(), 2);
    let prov = &hits[0]["record"]["provenance"][0];
    assert_eq!((prov["skill"].as_str(), prov["skill_hash"].as_str()), (Some("notes"), Some(notes_hash.as_str())));

    let view = json_of(&env.skillhost().args(["--json", "memory", "show"]).output().unwrap().stdout);
    assert!(view["tokens"].as_u64().unwrap() <= 2000);
    assert!(view["text"].as_str().unwrap().contains("atlas") && view["text"].as_str().unwrap().contains("ticket 42"));

    // Poisoned-memory response: everything `notes` wrote (this version) is deprecated.
    let prefix = &notes_hash[..12];
    let q = json_of(
        &env.skillhost()
            .args(["--json", "memory", "quarantine", "--skill", "notes", "--version", prefix])
            .output()
            .unwrap()
            .stdout,
    );
    assert_eq!(q["deprecated"].as_array().unwrap().len(), 2);
    let after =
        json_of(&env.skillhost().args(["--json", "memory", "search", "atlas staging"]).output().unwrap().stdout);
    assert_eq!(after.as_array().unwrap().len(), 0);
    let shown = env.skillhost().args(["memory", "show"]).output().unwrap();
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(!text.contains("atlas") && text.contains("ticket 42"), "{text}");

    // Export from this home, import into a fresh one: identical export.
    let file = env.sources.path().join("mem.jsonl");
    env.skillhost().args(["memory", "export", "-o"]).arg(&file).assert().success();
    let other = Env::new();
    let imported = json_of(&other.skillhost().args(["--json", "memory", "import"]).arg(&file).output().unwrap().stdout);
    assert_eq!(imported["imported"], 3);
    let a = env.skillhost().args(["memory", "export"]).output().unwrap().stdout;
    let b = other.skillhost().args(["memory", "export"]).output().unwrap().stdout;
    assert_eq!(String::from_utf8_lossy(&a), String::from_utf8_lossy(&b));

    // Bad input: clear errors, exit 1, nothing stored.
    let out = other.skillhost().args(["memory", "add", "x", "--priority", "9"]).assert().code(1);
    assert!(String::from_utf8_lossy(&out.get_output().stderr).contains("0 (ephemeral) to 5"));
    let out = other.skillhost().args(["memory", "add", "x", "--kind", "rumour"]).assert().code(2);
    assert!(String::from_utf8_lossy(&out.get_output().stderr).contains("preference, fact"));
    let out = other.skillhost().args(["memory", "forget", "999"]).assert().code(1);
    assert!(String::from_utf8_lossy(&out.get_output().stderr).contains("no memory #999"));

    // Forget is reversible; daily notes are searchable.
    let forgotten = json_of(&other.skillhost().args(["--json", "memory", "forget", "3"]).output().unwrap().stdout);
    let archive_id = forgotten["archive_id"].as_u64().unwrap().to_string();
    other.skillhost().args(["memory", "archive", "--restore", &archive_id]).assert().success();
    assert_eq!(
        json_of(&other.skillhost().args(["--json", "memory", "search", "ticket"]).output().unwrap().stdout)
            .as_array()
            .unwrap()
            .len(),
        1
    );
    other.skillhost().args(["memory", "daily", "--add", "串口 乱码 seen again on board 7"]).assert().success();
    let daily =
        json_of(&other.skillhost().args(["--json", "memory", "search", "--daily", "乱码"]).output().unwrap().stdout);
    assert_eq!(daily.as_array().unwrap().len(), 1);
}

#[test]
fn a_short_content_hash_in_an_old_install_json_is_an_error_not_a_panic() {
    let env = Env::new();
    let dir = env.probe_as("old", "");
    env.skillhost().args(["skill", "install"]).arg(&dir).assert().success();
    let record_path = env.home.path().join("skills/old/install.json");
    let mut record: Value = serde_json::from_slice(&std::fs::read(&record_path).unwrap()).unwrap();
    record["content_hash"] = "abc".into();
    std::fs::write(&record_path, serde_json::to_vec(&record).unwrap()).unwrap();

    for args in [
        vec!["skill", "info", "old"],
        vec!["skill", "run", "old", "-p", "mode=noop"],
        vec!["skill", "history", "old"],
        vec!["skill", "rollback", "old", "0.1.0"],
    ] {
        let out = env.skillhost().args(&args).assert().code(1);
        let err = String::from_utf8_lossy(&out.get_output().stderr).to_string();
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    let out = env.skillhost().args(["skill", "info", "old"]).assert().code(1);
    let err = String::from_utf8_lossy(&out.get_output().stderr).to_string();
    assert!(err.contains("install.json is corrupt") && err.contains("`abc` is not a sha256"), "{err}");
    let out = env.skillhost().args(["skill", "list"]).assert().success();
    assert!(!String::from_utf8_lossy(&out.get_output().stderr).contains("panicked"));
    // Reinstalling over it works and says nothing of a previous hash it cannot trust.
    let out = env.skillhost().args(["skill", "install"]).arg(&dir).assert().success();
    let text = String::from_utf8_lossy(&out.get_output().stdout).to_string();
    assert!(text.contains("installed old 0.1.0") && !text.contains("replaced"), "{text}");
    env.skillhost().args(["skill", "run", "old", "-p", "mode=noop"]).assert().success();
}

#[test]
fn a_huge_or_deeply_nested_skill_md_is_refused_at_once() {
    let env = Env::new();
    let huge = env.sources.path().join("huge");
    std::fs::create_dir_all(&huge).unwrap();
    let mut text = String::from("---\nname: huge\ndescription: d\n---\n");
    text.push_str(&"body line\n".repeat(300_000));
    std::fs::write(huge.join("SKILL.md"), &text).unwrap();
    let deep = env.sources.path().join("deep");
    std::fs::create_dir_all(&deep).unwrap();
    let nested = format!("---\nname: deep\ndescription: d\nmetadata: {}{}\n---\n", "[".repeat(1000), "]".repeat(1000));
    std::fs::write(deep.join("SKILL.md"), nested).unwrap();
    for (dir, says) in [(&huge, "more than the limit of 1048576"), (&deep, "nests deeper than 32")] {
        let started = std::time::Instant::now();
        let out = env.skillhost().args(["skill", "install"]).arg(dir).assert().code(1);
        let err = String::from_utf8_lossy(&out.get_output().stderr).to_string();
        assert!(err.contains(&dir.join("SKILL.md").display().to_string()) && err.contains(says), "{err}");
        assert!(started.elapsed() < std::time::Duration::from_secs(10), "{:?}", started.elapsed());
        env.skillhost().args(["skill", "lint", "--agent-skills"]).arg(dir).assert().code(1);
    }
}

#[test]
fn not_granted_rights_are_shown_as_information() {
    let env = Env::new();
    let dir = env.probe_as("asker", "capabilities:\n  env: [PATH]\n");
    env.skillhost().args(["skill", "install"]).arg(&dir).assert().success();
    let out = env.skillhost().args(["skill", "run", "asker", "-p", "mode=noop"]).assert().success();
    let text = String::from_utf8_lossy(&out.get_output().stdout).to_string();
    assert!(text.contains("not granted (the call ran without it): env PATH"), "{text}");
    assert!(!text.contains("denied"), "{text}");
    let out = env.skillhost().args(["--json", "skill", "run", "asker", "-p", "mode=noop"]).assert().success();
    let run = json_of(&out.get_output().stdout);
    assert_eq!(run["not_granted"], serde_json::json!(["env PATH"]));
    assert_eq!(run["denials"], serde_json::json!([]));
}

/// A loopback server for `skill install URL`: `/a` redirects to `/b.skill` (the bundle),
/// `/loop1` and `/loop2` redirect to each other, anything else is 404. One request per
/// connection, at most `connections` of them.
fn redirecting_server(bundle: Vec<u8>, connections: usize) -> u16 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(connections) {
            let Ok(mut s) = stream else { continue };
            let mut buf = [0u8; 4096];
            let n = s.read(&mut buf).unwrap_or(0);
            let request = String::from_utf8_lossy(&buf[..n]).to_string();
            let path = request.split_whitespace().nth(1).unwrap_or("").to_string();
            let redirect = |to: &str| {
                format!("HTTP/1.1 302 Found\r\nLocation: {to}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            };
            let _ = match path.as_str() {
                "/a" => s.write_all(redirect("/b.skill").as_bytes()),
                "/loop1" => s.write_all(redirect(&format!("http://127.0.0.1:{port}/loop2")).as_bytes()),
                "/loop2" => s.write_all(redirect("/loop1").as_bytes()),
                "/b.skill" => {
                    let head =
                        format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", bundle.len());
                    s.write_all(head.as_bytes()).and_then(|()| s.write_all(&bundle))
                }
                _ => s.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"),
            };
        }
    });
    port
}

/// `skillhost` with no proxy from the machine's environment (the servers are on loopback).
fn skillhost_direct(env: &Env) -> Command {
    let mut c = env.skillhost();
    for name in ["HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"] {
        c.env_remove(name);
    }
    c
}

fn packed_probe(env: &Env) -> Vec<u8> {
    let dir = env.probe_as("fetched", "");
    let out = env.sources.path().join("fetched.skill");
    env.skillhost().args(["skill", "pack"]).arg(&dir).arg("-o").arg(&out).assert().success();
    std::fs::read(&out).unwrap()
}

#[test]
fn install_from_a_url_follows_a_redirect() {
    let env = Env::new();
    let port = redirecting_server(packed_probe(&env), 4);
    let out = skillhost_direct(&env)
        .args(["--json", "skill", "install", &format!("http://127.0.0.1:{port}/a"), "--yes"])
        .assert()
        .success();
    assert_eq!(json_of(&out.get_output().stdout)["name"], "fetched");
    env.skillhost().args(["skill", "run", "fetched", "-p", "mode=echo", "-p", "arg=hi"]).assert().success();
}

#[test]
fn install_from_a_url_refuses_a_redirect_loop() {
    let env = Env::new();
    let port = redirecting_server(packed_probe(&env), 8);
    let url = format!("http://127.0.0.1:{port}/loop1");
    let out = skillhost_direct(&env).args(["skill", "install", &url, "--yes"]).assert().code(1);
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).to_string();
    assert!(
        stderr.contains(&format!(
            "cannot fetch {url}: it redirects in a loop ({url} -> http://127.0.0.1:{port}/loop2 -> {url})"
        )),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    let out = env.skillhost().args(["--json", "skill", "list"]).assert().success();
    assert_eq!(json_of(&out.get_output().stdout), serde_json::json!([]), "nothing was installed");
}

// ---------------------------------------------------------------------------------------------
// The daily CLI (issue 14)

/// Every argument of every subcommand, as "path: arg", that has no help text.
fn args_without_help(command: &clap::Command, path: &str, missing: &mut Vec<String>) {
    for arg in command.get_arguments() {
        let id = arg.get_id().as_str();
        if matches!(id, "help" | "version") {
            continue;
        }
        if arg.get_help().is_none_or(|h| h.to_string().trim().is_empty()) {
            missing.push(format!("{path}: {id}"));
        }
    }
    for sub in command.get_subcommands() {
        args_without_help(sub, &format!("{path} {}", sub.get_name()), missing);
    }
}

#[test]
fn every_argument_has_help_and_the_grant_syntax_lists_every_capability() {
    let command = skillhost::cli::command();
    command.clone().debug_assert();
    let mut missing = Vec::new();
    args_without_help(&command, "skillhost", &mut missing);
    assert!(missing.is_empty(), "arguments without help:\n{}", missing.join("\n"));

    let env = Env::new();
    for args in [&["skill", "install", "--help"][..], &["policy", "grant", "--help"], &["policy", "revoke", "--help"]] {
        let out = env.skillhost().args(args).assert().success();
        let help = String::from_utf8_lossy(&out.get_output().stdout).to_string();
        for kind in skillhost::capabilities::CapabilityKind::ALL {
            assert!(help.contains(kind.name()), "{args:?} help misses `{}`:\n{help}", kind.name());
        }
        assert!(help.contains("limits") && help.contains("all"), "{help}");
    }
    let out = env.skillhost().args(["run", "--help"]).assert().success();
    let help = String::from_utf8_lossy(&out.get_output().stdout).to_string();
    assert!(help.contains("step by step") && help.contains("--resume") && help.contains("--no-tools"), "{help}");
}

fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).to_string()
}

#[test]
fn completions_for_bash_zsh_and_fish() {
    let env = Env::new();
    for (shell, marker) in [("bash", "_skillhost()"), ("zsh", "#compdef skillhost"), ("fish", "complete -c skillhost")]
    {
        let out = env.skillhost().args(["completions", shell]).assert().success();
        let script = text(&out.get_output().stdout);
        assert!(script.contains(marker), "{shell}: {}", &script[..script.len().min(300)]);
        for word in ["rollback", "completions", "resume"] {
            assert!(script.contains(word), "{shell} completion lacks `{word}`");
        }
    }
    env.skillhost().args(["completions", "tcsh"]).assert().code(2);
}

#[test]
fn usage_errors_under_json_are_json_objects_with_exit_code_2() {
    let env = Env::new();
    for args in [
        &["--json", "skill", "frobnicate"][..],
        &["--json", "skill", "run"],
        &["run", "--max-steps", "0", "x", "--json"],
    ] {
        let out = env.skillhost().args(args).assert().code(2);
        let error = json_of(&out.get_output().stdout);
        assert_eq!(
            (error["kind"].as_str(), error["exit_code"].as_u64()),
            (Some("usage"), Some(2)),
            "{args:?}: {error}"
        );
        assert!(
            !error["error"].as_str().unwrap().is_empty() && error["usage"].as_str().unwrap().contains("--help"),
            "{error}"
        );
    }
    // Without --json: clap's text on stderr, same exit code.
    let out = env.skillhost().args(["skill", "frobnicate"]).assert().code(2);
    assert!(out.get_output().stdout.is_empty() && text(&out.get_output().stderr).contains("frobnicate"));
    // --help is no error, even with --json.
    env.skillhost().args(["--json", "skill", "--help"]).assert().success();
}

#[test]
fn params_from_a_file_or_stdin_and_the_same_mistake_gives_the_same_exit_code() {
    let env = Env::new();
    let dir = env.probe_as("echoer", "");
    env.skillhost().args(["skill", "install", "--yes"]).arg(&dir).assert().success();
    let big = "y".repeat(200_000);
    let file = env.sources.path().join("params.json");
    std::fs::write(&file, serde_json::json!({"mode": "echo", "arg": big}).to_string()).unwrap();
    let out = env
        .skillhost()
        .args(["--json", "skill", "run", "echoer", "--params"])
        .arg(format!("@{}", file.display()))
        .assert()
        .success();
    assert_eq!(json_of(&out.get_output().stdout)["result"]["ok"]["status"], "success");
    let out = env
        .skillhost()
        .args(["--json", "skill", "run", "echoer", "--params", "-"])
        .write_stdin(r#"{"mode": "echo", "arg": "from stdin"}"#)
        .assert()
        .success();
    assert!(json_of(&out.get_output().stdout)["result"]["ok"]["output"].as_str().unwrap().contains("from stdin"));

    // Unparseable input: a usage error (2) either way.
    let code =
        |args: &[&str]| env.skillhost().args(["skill", "run", "echoer"]).args(args).output().unwrap().status.code();
    assert_eq!(code(&["--params", "{mode: echo"]), Some(2));
    assert_eq!(code(&["-p", "mode"]), Some(2));
    assert_eq!(code(&["--params", "[1, 2]"]), Some(2));
    let missing = env.sources.path().join("nope.json");
    assert_eq!(code(&["--params", &format!("@{}", missing.display())]), Some(2));
    // A value of the wrong type: the parameter check (3) either way, with the same message.
    let by_pair = env.skillhost().args(["skill", "run", "echoer", "-p", "mode=echo", "-p", "n=lots"]).output().unwrap();
    let by_json = env
        .skillhost()
        .args(["skill", "run", "echoer", "--params", r#"{"mode": "echo", "n": "lots"}"#])
        .output()
        .unwrap();
    assert_eq!((by_pair.status.code(), by_json.status.code()), (Some(3), Some(3)));
    assert_eq!(text(&by_pair.stdout), text(&by_json.stdout));
    // Under --json the usage error is an object.
    let out = env.skillhost().args(["--json", "skill", "run", "echoer", "--params", "nope"]).assert().code(2);
    let error = json_of(&out.get_output().stdout);
    assert_eq!(error["kind"], "usage");
    assert!(error["error"].as_str().unwrap().contains("not valid JSON"), "{error}");
}

#[test]
fn config_show_names_where_each_value_came_from() {
    let env = Env::new();
    let show = |envs: &[(&str, &str)]| {
        // The shared helper removes the provider variables; the proxies are this test's own.
        let mut c = env.skillhost();
        for name in ["HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY"] {
            c.env_remove(name);
        }
        for (k, v) in envs {
            c.env(k, v);
        }
        c.args(["--json", "config", "show"]).assert().success().get_output().stdout.clone()
    };
    let config = json_of(&show(&[]));
    assert_eq!(config["provider"], serde_json::json!([]));
    assert_eq!(config["file_exists"], false);

    std::fs::write(
        env.home.path().join("skillhost.toml"),
        "[provider]\nkind = \"openai\"\nmodel = \"qwen3\"\nmax_retries = 5\n",
    )
    .unwrap();
    let config = json_of(&show(&[("SKILLHOST_MODEL", "llama3"), ("OPENAI_API_KEY", "sk-very-secret")]));
    let out = text(&serde_json::to_vec(&config).unwrap());
    assert!(!out.contains("sk-very-secret"), "a key is never shown: {out}");
    let setting = |key: &str| config["provider"].as_array().unwrap().iter().find(|s| s["key"] == key).unwrap().clone();
    assert_eq!(setting("kind")["source"]["from"], "file");
    assert_eq!(setting("model")["value"], "llama3");
    assert_eq!(setting("model")["source"], serde_json::json!({"from": "env", "name": "SKILLHOST_MODEL"}));
    assert_eq!(
        (setting("max_retries")["value"].as_u64(), setting("max_retries")["source"]["from"].as_str()),
        (Some(5), Some("file"))
    );
    assert_eq!(setting("timeout_secs")["source"]["from"], "default");
    assert_eq!(setting("tool_calling")["value"], true);
    assert_eq!(
        (setting("api_key")["value"].as_str(), setting("api_key")["source"]["name"].as_str()),
        (Some("(set)"), Some("OPENAI_API_KEY"))
    );

    // Human output: one line per setting with its source.
    let out = env.skillhost().env_remove("SKILLHOST_MODEL").args(["config", "show"]).assert().success();
    let human = text(&out.get_output().stdout);
    assert!(human.lines().any(|l| l.starts_with("model = \"qwen3\"") && l.contains("skillhost.toml")), "{human}");
    assert!(human.lines().any(|l| l.starts_with("timeout_secs = 60") && l.ends_with("# default")), "{human}");
}

#[test]
fn agent_remove_and_memory_list_and_get() {
    let env = Env::new();
    let profile = env.sources.path().join("helper");
    std::fs::create_dir_all(&profile).unwrap();
    std::fs::write(
        profile.join("AGENT.md"),
        "---\ndescription: helps with things\nnamespace: helper\n---\n# Helper\n\n## Identity\nA helper.\n",
    )
    .unwrap();
    env.skillhost().args(["agent", "add"]).arg(&profile).assert().success();
    let out = env.skillhost().args(["agent", "remove", "helper"]).assert().success();
    assert!(text(&out.get_output().stdout).contains("namespace `helper`"));
    assert!(!env.home.path().join("agents/helper").exists());
    let out = env.skillhost().args(["--json", "agent", "list"]).assert().success();
    assert!(!text(&out.get_output().stdout).contains("\"helper\""));
    let out = env.skillhost().args(["agent", "remove", "helper"]).assert().code(1);
    assert!(text(&out.get_output().stderr).contains("no agent profile named `helper`"));
    let out = env.skillhost().args(["agent", "remove", "general"]).assert().code(1);
    assert!(text(&out.get_output().stderr).contains("built in"), "{}", text(&out.get_output().stderr));

    for (t, ns) in [("the board is rev C", "default"), ("COM3 is the debug port", "lab")] {
        env.skillhost().args(["memory", "add", t, "--namespace", ns]).assert().success();
    }
    let out = env.skillhost().args(["--json", "memory", "list"]).assert().success();
    let all = json_of(&out.get_output().stdout);
    assert_eq!(all.as_array().unwrap().len(), 2);
    let out = env.skillhost().args(["--json", "memory", "list", "--namespace", "lab"]).assert().success();
    let lab = json_of(&out.get_output().stdout);
    assert_eq!(lab.as_array().unwrap().len(), 1);
    let id = lab[0]["id"].as_u64().unwrap();
    let out = env.skillhost().args(["memory", "list"]).assert().success();
    let listed = text(&out.get_output().stdout);
    assert!(listed.contains(&format!("#{id} [lab ")) && listed.contains("2 records"), "{listed}");
    let out = env.skillhost().args(["memory", "get", &id.to_string()]).assert().success();
    let shown = text(&out.get_output().stdout);
    assert!(shown.contains("COM3 is the debug port") && shown.contains("namespace lab"), "{shown}");
    let out = env.skillhost().args(["--json", "memory", "get", &id.to_string()]).assert().success();
    assert_eq!(json_of(&out.get_output().stdout)["content"], "COM3 is the debug port");
    let out = env.skillhost().args(["memory", "get", "999999"]).assert().code(1);
    assert!(text(&out.get_output().stderr).contains("no memory #999999"));
}

#[test]
fn skill_update_reinstalls_from_the_recorded_source_with_the_usual_confirmation() {
    let env = Env::new();
    let dir = env.probe_as("updatable", "capabilities:\n  session: true\n");
    env.skillhost().args(["skill", "install", "--yes"]).arg(&dir).assert().success();
    // Same bytes: nothing replaced, and it says so.
    let out = env.skillhost().args(["skill", "update", "updatable"]).assert().success();
    let said = text(&out.get_output().stdout);
    assert!(said.contains("unchanged") && !said.contains("replaces") && !said.contains("kept in"), "{said}");
    assert!(
        text(&out.get_output().stderr)
            .contains(&format!("updating updatable from {}", std::fs::canonicalize(&dir).unwrap().display()))
    );
    let out = env.skillhost().args(["--json", "skill", "install", "--yes"]).arg(&dir).assert().success();
    let report = json_of(&out.get_output().stdout);
    assert_eq!((report["unchanged"].as_bool(), report["replaced"].is_null()), (Some(true), true), "{report}");

    // Changed content at the source: refused without a tty unless --yes, as an install is.
    let manifest = std::fs::read_to_string(dir.join("SKILL.md")).unwrap().replace("version: 0.1.0", "version: 0.2.0");
    std::fs::write(dir.join("SKILL.md"), manifest).unwrap();
    let out = env.skillhost().args(["skill", "update", "updatable"]).assert().code(1);
    assert!(text(&out.get_output().stderr).contains("Pass --yes"), "{}", text(&out.get_output().stderr));
    let out = env.skillhost().args(["--json", "skill", "update", "updatable", "--yes"]).assert().success();
    let report = json_of(&out.get_output().stdout);
    assert_eq!(report["version"], "0.2.0");
    assert_eq!(report["unchanged"], false);
    assert!(report["replaced"].is_string());
    let out = env.skillhost().args(["skill", "update", "nosuch"]).assert().code(1);
    assert!(text(&out.get_output().stderr).contains("nosuch"));
}

#[test]
fn a_denial_names_the_grant_command() {
    let env = Env::new();
    let dir = env.probe_as("rememberer", "capabilities:\n  session: true\n");
    env.skillhost().args(["skill", "install"]).arg(&dir).assert().success();
    let out =
        env.skillhost().args(["skill", "run", "rememberer", "-p", "mode=session-set", "-p", "arg=x"]).output().unwrap();
    let said = text(&out.stdout);
    assert!(said.contains("denied (session)"), "{said}");
    assert!(said.contains("to allow it: skillhost policy grant rememberer session"), "{said}");
    // ... and that command works.
    env.skillhost().args(["policy", "grant", "rememberer", "session"]).assert().success();
    let out =
        env.skillhost().args(["skill", "run", "rememberer", "-p", "mode=session-set", "-p", "arg=x"]).output().unwrap();
    assert!(!text(&out.stdout).contains("denied"), "{}", text(&out.stdout));
}

#[test]
fn rollback_prefixes_and_purge_after_remove() {
    let env = Env::new();
    let dir = env.probe_as("versioned", "");
    env.skillhost().args(["skill", "install", "--yes"]).arg(&dir).assert().success();
    let mut hashes = Vec::new();
    for n in 1..=2 {
        // The same version string, different content: only the hash tells them apart.
        let manifest = std::fs::read_to_string(dir.join("SKILL.md")).unwrap();
        std::fs::write(dir.join("SKILL.md"), format!("{manifest}revision {n}\n")).unwrap();
        let out = env.skillhost().args(["--json", "skill", "install", "--yes"]).arg(&dir).assert().success();
        hashes.push(json_of(&out.get_output().stdout)["replaced"].as_str().unwrap().to_string());
    }
    let out = env.skillhost().args(["skill", "rollback", "versioned", &hashes[0][..3]]).assert().code(1);
    let said = text(&out.get_output().stderr);
    assert!(said.contains("too short") && said.contains("at least 8"), "{said}");
    assert!(said.contains(&hashes[0][..12]) && said.contains(&hashes[1][..12]), "versions listed by hash: {said}");
    let out = env.skillhost().args(["skill", "rollback", "versioned", "0.1.0"]).assert().code(1);
    let said = text(&out.get_output().stderr);
    assert!(said.contains("matches 2 archived versions") && said.contains(&hashes[1][..12]), "{said}");
    env.skillhost().args(["skill", "rollback", "versioned", &hashes[0][..8]]).assert().success();

    env.skillhost().args(["skill", "remove", "versioned"]).assert().success();
    assert!(env.home.path().join("history/versioned").is_dir());
    env.skillhost().args(["skill", "remove", "versioned", "--purge"]).assert().success();
    assert!(!env.home.path().join("history/versioned").exists());
    env.skillhost().args(["skill", "remove", "versioned", "--purge"]).assert().code(1);
}

#[test]
fn doctor_checks_toolchains_home_stores_and_the_provider() {
    let env = Env::new();
    let dir = env.probe_as("checked", "");
    env.skillhost().args(["skill", "install", "--yes"]).arg(&dir).assert().success();
    let doctor = |base: &str| {
        let mut c = env.skillhost();
        for name in [
            "OPENAI_API_KEY",
            "ANTHROPIC_API_KEY",
            "ANTHROPIC_BASE_URL",
            "SKILLHOST_PROVIDER",
            "HTTPS_PROXY",
            "HTTP_PROXY",
            "ALL_PROXY",
        ] {
            c.env_remove(name);
        }
        c.env("OPENAI_BASE_URL", base).args(["--json", "doctor"]).output().unwrap()
    };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let up = format!("http://{}/v1", listener.local_addr().unwrap());
    let out = doctor(&up);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    let checks = json_of(&out.stdout);
    let find = |checks: &Value, area: &str, name: &str| {
        checks
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["area"] == area && c["name"].as_str().unwrap().contains(name))
            .cloned()
            .unwrap()
    };
    assert_eq!(find(&checks, "toolchain", "cargo")["status"], "ok");
    assert_eq!(find(&checks, "toolchain", "wasm32-wasip2")["status"], "ok");
    assert_eq!(find(&checks, "home", "")["status"], "ok");
    let skills = find(&checks, "store", "skills");
    assert_eq!((skills["status"].as_str(), skills["detail"].as_str()), (Some("ok"), Some("1 installed, all readable")));
    assert_eq!(find(&checks, "store", "audit log")["status"], "ok");
    assert_eq!(find(&checks, "provider", "127.0.0.1")["status"], "ok");
    drop(listener);

    // Provider down and a damaged skill: exit 1, each with what to fix.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let skill_md = env.home.path().join("skills/checked/SKILL.md");
    let original = std::fs::read_to_string(&skill_md).unwrap();
    std::fs::write(&skill_md, format!("{original}tampered\n")).unwrap();
    let out = doctor(&format!("http://127.0.0.1:{port}/v1"));
    assert_eq!(out.status.code(), Some(1));
    let checks = json_of(&out.stdout);
    let provider = find(&checks, "provider", "127.0.0.1");
    assert_eq!(provider["status"], "fail");
    assert!(provider["fix"].as_str().unwrap().contains("OPENAI_BASE_URL"), "{provider}");
    let skills = find(&checks, "store", "skills");
    assert_eq!(skills["status"], "fail", "{skills}");
    assert!(skills["fix"].as_str().unwrap().contains("skill update"), "{skills}");
    // Human output: a FAIL line with its fix.
    let mut c = env.skillhost();
    c.env_remove("OPENAI_API_KEY").env("OPENAI_BASE_URL", format!("http://127.0.0.1:{port}/v1"));
    let out = c.arg("doctor").output().unwrap();
    let human = text(&out.stdout);
    assert!(human.contains("FAIL provider:") && human.contains("     fix: start the server"), "{human}");
}

#[test]
fn verbosity_and_rust_log_choose_the_diagnostics_on_stderr_and_stdout_stays_clean() {
    let env = Env::new();
    let stderr_of = |out: &std::process::Output| String::from_utf8_lossy(&out.stderr).to_string();
    let search = |extra: &[&str], rust_log: Option<&str>| {
        let mut c = env.skillhost();
        c.env("SKILLHOST_EMBED_MODEL", "off");
        if let Some(filter) = rust_log {
            c.env("RUST_LOG", filter);
        }
        c.args(extra).args(["memory", "search", "anything"]).output().unwrap()
    };
    // The default level hides info lines; -v shows them, but no debug lines.
    let quiet = search(&[], None);
    assert!(quiet.status.success(), "{}", stderr_of(&quiet));
    assert!(!stderr_of(&quiet).contains("memory store opened"), "{}", stderr_of(&quiet));
    let verbose = search(&["-v"], None);
    let shown = stderr_of(&verbose);
    assert!(shown.contains("info: memory store opened store="), "{shown}");
    assert!(shown.contains("semantic=\"off (lexical only)\""), "{shown}");
    assert!(!shown.contains("debug:"), "{shown}");
    // RUST_LOG picks the level per module and wins over -v.
    let debug = stderr_of(&search(&[], Some("skillhost=debug")));
    assert!(debug.contains("debug: [skillhost::memory::reads] memory search hits=0"), "{debug}");
    let off = stderr_of(&search(&["-vv"], Some("off")));
    assert!(!off.contains("info:") && !off.contains("debug:"), "{off}");
    // --json with -vv: the diagnostics go to stderr, stdout is the one JSON value.
    let json = search(&["--json", "-vv"], None);
    assert!(stderr_of(&json).contains("debug: [skillhost::memory::reads] memory search"), "{}", stderr_of(&json));
    assert_eq!(json_of(&json.stdout), serde_json::json!([]));

    // Warnings of the library still show at the default level (a model file that is not one).
    let bogus = env.workspace.path().join("not-a-model.bin");
    std::fs::write(&bogus, b"definitely not a model").unwrap();
    let out = env.skillhost().env("SKILLHOST_EMBED_MODEL", &bogus).args(["memory", "search", "x"]).output().unwrap();
    let warned = stderr_of(&out);
    assert!(out.status.success(), "{warned}");
    assert!(warned.contains("warning: ") && warned.contains("memory search is lexical only"), "{warned}");
}

/// `SKILLHOST_TEST_STORE` (tests/common/mod.rs) really moves this suite's homes: on
/// `postgres` every command of a test home runs on its own migrated database (its calls'
/// audit lines land there, not in the home's file), on the default the home's own files.
#[test]
fn the_suite_runs_on_the_backend_skillhost_test_store_names() {
    let env = Env::new();
    let status: serde_json::Value = serde_json::from_slice(
        &env.skillhost().args(["--json", "store", "status"]).assert().success().get_output().stdout,
    )
    .unwrap();
    let dir = env.probe_as("probe", "");
    env.skillhost().args(["skill", "install"]).arg(&dir).arg("--yes").assert().success();
    env.skillhost().args(["skill", "run", "probe", "-p", "mode=noop"]).assert().success();
    let file_log = env.home.path().join("audit").join("audit.jsonl");
    match common::test_store() {
        common::TestStore::Local => {
            assert_eq!(status["store"], "local", "{status}");
            assert_eq!(std::fs::read_to_string(&file_log).unwrap().lines().count(), 1);
        }
        common::TestStore::Postgres => {
            assert!(status["store"].as_str().is_some_and(|s| s.starts_with("postgres://")), "{status}");
            assert_eq!(status["state"], "current", "{status}");
            let db = common::database_for(env.home.path()).unwrap();
            assert_eq!(db.psql("SELECT count(*) FROM skillhost_audit"), "1");
            assert!(!file_log.exists(), "a call on PostgreSQL wrote the home's file log");
        }
    }
}
