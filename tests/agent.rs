//! The agent loop end to end with real skills in the sandbox: the scripted provider where the
//! HTTP layer is not the point, mock OpenAI-compatible and Anthropic servers on 127.0.0.1
//! where it is. Every model mistake must come back as feedback in the next prompt, never as
//! a crash.

mod common;
#[path = "common/llm_mock.rs"]
mod llm_mock;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use assert_cmd::Command;
use llm_mock::{MockServer, Reply};
use serde_json::{Value, json};
use skillhost::agent::profile::{AgentProfile, builtin_general, load_profiles};
use skillhost::agent::provider::scripted::ScriptedProvider;
use skillhost::agent::provider::{
    ChatReply, ChatRequest, Provider, ProviderConfig, ProviderFuture, ResponseFormat, open,
};
use skillhost::agent::run::{self as agent, AgentOptions, Outcome, OutcomeStatus};
use skillhost::library::Library;

/// A provider that records every request it is asked, then lets `inner` answer.
struct Recording {
    inner: Arc<dyn Provider>,
    requests: Mutex<Vec<ChatRequest>>,
}

impl Recording {
    fn new(inner: Arc<dyn Provider>) -> Recording {
        Recording { inner, requests: Mutex::new(Vec::new()) }
    }

    fn scripted(decisions: Value) -> Recording {
        let provider = ScriptedProvider::parse(Path::new("test-decisions.json"), &decisions.to_string()).unwrap();
        Recording::new(Arc::new(provider))
    }

    fn requests(&self) -> Vec<ChatRequest> {
        self.requests.lock().unwrap().clone()
    }

    /// The user message (goal, skills, memory, history, notes) of request `i`.
    fn prompt(&self, i: usize) -> String {
        self.requests()[i].messages.iter().map(|m| m.content.clone()).collect::<Vec<_>>().join("\n")
    }
}

impl Provider for Recording {
    fn name(&self) -> String {
        self.inner.name()
    }

    fn chat<'a>(&'a self, request: &'a ChatRequest) -> ProviderFuture<'a, ChatReply> {
        self.requests.lock().unwrap().push(request.clone());
        self.inner.chat(request)
    }

    fn embed<'a>(&'a self, text: &'a str) -> ProviderFuture<'a, Vec<f32>> {
        self.inner.embed(text)
    }
}

fn workspace() -> std::path::PathBuf {
    common::repo().join("examples/log-analysis/workspace")
}

/// A home with the four log-analysis skills (granted) and the log-analyst profile.
fn log_home(env: &common::Env) -> Library {
    let lib = Library::open(env.home.path(), Some(&workspace()), None).unwrap();
    for s in ["read-log-file", "query-issue-kb", "write-analysis-snapshot", "generate-report"] {
        lib.install(&common::built(s), &|m| Ok(Some(skillhost::policy::Grant::everything(m)))).unwrap();
    }
    let dest = env.home.path().join("agents/log-analyst");
    std::fs::create_dir_all(&dest).unwrap();
    std::fs::copy(common::repo().join("examples/log-analysis/agents/log-analyst/AGENT.md"), dest.join("AGENT.md"))
        .unwrap();
    lib
}

fn log_analyst(env: &common::Env) -> AgentProfile {
    load_profiles(env.home.path()).unwrap().into_iter().find(|p| p.name == "log-analyst").unwrap()
}

/// A home with the probe (memory: write granted) under the general profile.
fn probe_home(env: &common::Env) -> Library {
    let lib = env.library();
    env.install_granted(&lib, "probe", "capabilities:\n  memory: write\n");
    lib
}

fn call(skill: &str, params: Value) -> Value {
    json!({"reasoning": format!("call {skill}"), "next_action": "call_skill", "skill_name": skill, "parameters": params})
}

fn reply(message: &str) -> Value {
    json!({"reasoning": "done", "next_action": "reply", "message": message})
}

fn options(max_steps: Option<u32>) -> AgentOptions {
    AgentOptions { max_steps, ..AgentOptions::default() }
}

async fn run_general(lib: &Library, provider: &dyn Provider, max_steps: Option<u32>) -> Outcome {
    agent::run(lib, provider, &builtin_general(), "check that the probe answers", &options(max_steps)).await.unwrap()
}

fn statuses(outcome: &Outcome) -> Vec<String> {
    outcome.steps.iter().map(|s| s.status.to_string()).collect()
}

#[tokio::test]
async fn four_step_happy_path_with_memories_provenance_and_audit() {
    let env = common::Env::new();
    let lib = log_home(&env);
    let profile = log_analyst(&env);
    let decisions = ScriptedProvider::load(&common::repo().join("examples/log-analysis/decisions.json")).unwrap();
    let provider = Recording::new(Arc::new(decisions));
    let outcome =
        agent::run(&lib, &provider, &profile, "why does the UART occasionally print garbage?", &options(None))
            .await
            .unwrap();

    assert_eq!(outcome.status, OutcomeStatus::Answered);
    let skills: Vec<Option<&str>> = outcome.steps.iter().map(|s| s.skill.as_deref()).collect();
    assert_eq!(
        skills,
        [Some("read-log-file"), Some("query-issue-kb"), Some("write-analysis-snapshot"), Some("generate-report"), None]
    );
    assert_eq!(statuses(&outcome), ["success", "success", "success", "success", "answered"]);
    assert!(outcome.steps.iter().all(|s| s.max_steps == 8 && !s.repaired && !s.reasked));

    // Step 1 stored a memory in the profile's namespace, with full provenance.
    let stored = &outcome.steps[0].memories_stored;
    assert!(!stored.is_empty(), "read-log-file stores a summary");
    let memory = lib.memory().unwrap();
    let hash = lib.info("read-log-file").unwrap().record.content_hash;
    for id in stored {
        let record = memory.get(*id).unwrap().unwrap();
        assert_eq!(record.namespace, "log-analyst");
        let p = &record.provenance[0];
        assert_eq!(
            (p.skill.as_str(), p.skill_hash.as_str(), p.session.as_str(), p.step),
            ("read-log-file", hash.as_str(), outcome.session.as_str(), 1)
        );
    }
    // ... and step 2 was told so; it also saw step 1's output with the evidence lines.
    let second = provider.prompt(1);
    assert!(second.contains(&format!("memories stored: #{}", stored[0])), "{second}");
    assert!(second.contains("L1243: 2026-03-02 13:52:21.236 [ERROR] uart1: RX overrun"), "{second}");
    assert!(second.contains("step 2 of at most 8: done read-log-file (success)"), "{second}");
    // Role slices: the workflow at the first decision point, not on a plain step.
    assert!(provider.prompt(0).contains("## Workflow") && !second.contains("## Workflow"));
    // The catalog is the profile's allowlist, with parameters.
    assert!(second.contains("- query-issue-kb: ") && second.contains("parameters (JSON Schema)"));
    // Every request asked for JSON and said so.
    for r in provider.requests() {
        assert_eq!(r.format, ResponseFormat::Json);
        assert!(r.messages[0].content.contains("JSON"));
    }

    // The final answer passed the evidence guardrail: every conclusion grounded.
    let evidence = outcome.evidence.as_ref().unwrap();
    assert_eq!((evidence.conclusions, evidence.grounded, evidence.unsupported.len()), (3, 3, 0));
    assert!(outcome.answer.as_ref().unwrap().contains("[L1242, L1243]"));

    // One chained step line per step (and one call line per skill run), verifying.
    let audit = lib.audit_log();
    assert_eq!(audit.verify().unwrap().entries, 9);
    let steps: Vec<_> = audit.show(&outcome.session).unwrap().into_iter().filter(|e| e["kind"] == "step").collect();
    assert_eq!(steps.len(), 5);
    for (i, e) in steps.iter().enumerate() {
        assert_eq!(e["step"], i as u64 + 1);
        assert!(e["prompt_bytes"].as_u64().unwrap() > 500);
    }
    assert_eq!(steps[0]["skill"], "read-log-file");
    assert_eq!(steps[0]["skill_hash"], hash.as_str());
    assert_eq!(steps[0]["params"]["max_lines"], 8);
    assert_eq!(steps[0]["memories_stored"], json!(stored));
    assert_eq!(steps[4]["action"], "reply");
    assert_eq!(steps[4]["evidence"]["grounded"], 3);

    // The saved state holds the whole run.
    let state = agent::load_session(&lib, &outcome.session).unwrap();
    assert!(state.finished);
    assert_eq!(state.decisions.len(), 5);
    assert!(state.facts.lines.contains(&1243) && state.facts.memories == *stored);
    assert_eq!(state.attempts["read-log-file"], 1);
}

#[tokio::test]
async fn malformed_json_is_repaired() {
    let env = common::Env::new();
    let lib = probe_home(&env);
    let fenced = "Sure! Here is my action:\n```json\n{\"reasoning\": \"try it\", \"next_action\": \"call_skill\", \"skill_name\": \"probe\", \"parameters\": {\"mode\": \"noop\",},}\n```";
    let provider =
        Recording::scripted(json!({"decide": [fenced, reply("the probe answers ok"), reply("the probe answers ok")]}));
    let outcome = run_general(&lib, &provider, None).await;
    assert_eq!(statuses(&outcome), ["success", "answered"]);
    assert!(outcome.steps[0].repaired && !outcome.steps[0].reasked);
    // Two decisions and the early reply's one re-ask with the output style; no parse re-ask.
    assert_eq!(provider.requests().len(), 3, "no parse re-ask was needed");
    assert!(outcome.steps[1].styled && !outcome.steps[1].reasked);
}

#[tokio::test]
async fn unrepairable_json_is_reasked_once_then_counts_as_a_failed_step() {
    let env = common::Env::new();
    let lib = probe_home(&env);
    let provider = Recording::scripted(json!({"decide": [
        "I think I should call the probe.",
        call("probe", json!({"mode": "noop"})),
        "still no json",
        "{\"next_action\": \"dance\"}",
        reply("done"),
    ]}));
    let outcome = run_general(&lib, &provider, None).await;
    assert_eq!(statuses(&outcome), ["success", "parse-error", "answered"]);
    assert!(outcome.steps[0].reasked && outcome.steps[1].reasked);
    let requests = provider.requests();
    // The re-ask carries the bad reply and the parse error.
    let reask = &requests[1].messages;
    assert_eq!(reask.len(), 4);
    assert_eq!(reask[2].content, "I think I should call the probe.");
    assert!(reask[3].content.contains("no JSON object found"), "{}", reask[3].content);
    // The second failure (an unknown next_action) became the step's message, shown next step.
    let next = provider.prompt(4);
    assert!(next.contains("`next_action` is `dance`"), "{next}");
}

#[tokio::test]
async fn unknown_skill_then_corrected() {
    let env = common::Env::new();
    let lib = probe_home(&env);
    let provider = Recording::scripted(json!({"decide": [
        call("prob", json!({"mode": "noop"})),
        call("probe", json!({"mode": "noop"})),
        reply("done"),
    ]}));
    let outcome = run_general(&lib, &provider, None).await;
    assert_eq!(statuses(&outcome), ["unknown-skill", "success", "answered"]);
    assert!(outcome.steps[0].summary.contains("did you mean `probe`"), "{}", outcome.steps[0].summary);
    let second = provider.prompt(1);
    assert!(second.contains("there is no skill named `prob`; did you mean `probe`?"), "{second}");
    // After a failure the workflow (decision point) is back in the role.
    assert!(second.contains("## Workflow"));
}

#[tokio::test]
async fn invalid_params_then_corrected() {
    let env = common::Env::new();
    let lib = probe_home(&env);
    let provider = Recording::scripted(json!({"decide": [
        call("probe", json!({"n": "three"})),
        call("probe", json!({"mode": "echo", "arg": "hi"})),
        reply("done"),
    ]}));
    let outcome = run_general(&lib, &provider, None).await;
    assert_eq!(statuses(&outcome), ["invalid-params", "success", "answered"]);
    let second = provider.prompt(1);
    assert!(second.contains("invalid parameters:") && second.contains("mode (string, required)"), "{second}");
    assert!(second.contains("Fix the parameters"), "{second}");
}

#[tokio::test]
async fn trapping_skill_becomes_a_message_and_the_run_continues() {
    let env = common::Env::new();
    let lib = probe_home(&env);
    let provider = Recording::scripted(json!({"decide": [
        call("probe", json!({"mode": "panic", "arg": "boom"})),
        call("probe", json!({"mode": "noop"})),
        reply("the probe works unless asked to panic"),
    ]}));
    let outcome = run_general(&lib, &provider, None).await;
    assert_eq!(statuses(&outcome), ["panic", "success", "answered"]);
    let second = provider.prompt(1);
    assert!(second.contains("skill panicked") && second.contains("the host is fine"), "{second}");
    let audit = lib.audit_log().show(&outcome.session).unwrap();
    assert!(audit.iter().any(|e| e["kind"] == "step" && e["status"] == "panic"));
}

#[tokio::test]
async fn repeat_rule_tells_the_model_it_may_conclude() {
    let env = common::Env::new();
    let lib = probe_home(&env);
    let noop = call("probe", json!({"mode": "noop"}));
    let provider = Recording::scripted(json!({"decide": [noop, noop, noop, reply("ok")]}));
    let outcome = run_general(&lib, &provider, None).await;
    assert_eq!(statuses(&outcome), ["success", "success", "success", "answered"]);
    assert!(outcome.steps[1].notes.is_empty(), "two calls are not a repeat yet");
    assert!(outcome.steps[2].notes.iter().any(|n| n.contains("may conclude")), "{:?}", outcome.steps[2].notes);
    let fourth = provider.prompt(3);
    assert!(fourth.contains("you called `probe` 3 times in a row") && fourth.contains("may conclude"), "{fourth}");
    // ... and that prompt is the final phase: it carries the output style.
    assert!(fourth.contains("## Output style") && !provider.prompt(2).contains("## Output style"));
}

#[tokio::test]
async fn step_limit_ends_with_a_summary() {
    let env = common::Env::new();
    let lib = probe_home(&env);
    let noop = call("probe", json!({"mode": "echo", "arg": "a"}));
    let provider = Recording::scripted(json!({
        "decide": [noop, call("probe", json!({"mode": "echo", "arg": "b"}))],
        "summarize": ["Known: the probe echoes. Open: nothing was concluded."],
    }));
    let outcome = run_general(&lib, &provider, Some(2)).await;
    assert_eq!(outcome.status, OutcomeStatus::StepLimit);
    assert_eq!(outcome.answer.as_deref(), Some("Known: the probe echoes. Open: nothing was concluded."));
    // The last step was told it was the last one.
    assert!(provider.prompt(1).contains("This is the last step"));
    let summarize = provider.requests().pop().unwrap();
    assert_eq!(summarize.purpose, skillhost::agent::provider::Purpose::Summarize);
    assert!(summarize.messages[1].content.contains("step 2: call_skill probe"));

    // Without a summary from the model, a deterministic one.
    let provider = Recording::scripted(json!({"decide": [call("probe", json!({"mode": "noop"}))]}));
    let outcome = run_general(&lib, &provider, Some(1)).await;
    assert_eq!(outcome.status, OutcomeStatus::StepLimit);
    let answer = outcome.answer.unwrap();
    assert!(answer.contains("step limit (1)") && answer.contains("Known:") && answer.contains("Open:"), "{answer}");
    assert!(answer.contains("step 1 probe: ok"), "{answer}");
}

#[tokio::test]
async fn require_more_pauses_and_resume_continues_with_state() {
    let env = common::Env::new();
    let lib = probe_home(&env);
    let first = Recording::scripted(json!({"decide": [
        call("probe", json!({"mode": "echo", "arg": "first"})),
        {"reasoning": "need the port", "next_action": "require_more", "message": "Which serial port?"},
    ]}));
    let paused = run_general(&lib, &first, None).await;
    assert_eq!(paused.status, OutcomeStatus::Paused);
    assert_eq!(paused.question.as_deref(), Some("Which serial port?"));
    let state = agent::load_session(&lib, &paused.session).unwrap();
    assert_eq!((state.step, state.pending_question.as_deref()), (2, Some("Which serial port?")));

    let second = Recording::scripted(json!({"decide": [reply("use COM3")]}));
    let done = agent::resume(&lib, &second, &builtin_general(), state, Some("COM3"), &options(None)).await.unwrap();
    assert_eq!(done.status, OutcomeStatus::Answered);
    assert_eq!((done.session.as_str(), done.total_steps), (paused.session.as_str(), 3));
    let prompt = second.prompt(0);
    assert!(prompt.contains("Q: Which serial port? A: COM3"), "{prompt}");
    assert!(prompt.contains("step 1: call_skill probe") && prompt.contains("|1|first"), "history survives: {prompt}");
    assert!(prompt.contains("step 3 of at most 8"), "{prompt}");
}

#[test]
fn cli_require_more_then_resume() {
    let env = common::Env::new();
    let lib = probe_home(&env);
    drop(lib);
    let d1 = env.sources.path().join("d1.json");
    let d2 = env.sources.path().join("d2.json");
    std::fs::write(&d1, json!({"decide": [{"next_action": "require_more", "message": "Which port?"}]}).to_string())
        .unwrap();
    std::fs::write(&d2, json!({"decide": [reply("use COM3")]}).to_string()).unwrap();
    let cmd = || {
        let mut c = Command::cargo_bin("skillhost").unwrap();
        c.env("SKILLHOST_HOME", env.home.path())
            .envs(common::store_env(env.home.path()))
            .current_dir(env.workspace.path());
        c
    };
    let out = cmd().args(["run", "--decisions"]).arg(&d1).arg("find the port").assert().code(3);
    let stdout = String::from_utf8_lossy(&out.get_output().stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).to_string();
    assert!(stdout.contains("Which port?"), "{stdout}");
    assert!(stderr.contains("provider: scripted ("), "{stderr}");
    let session =
        stderr.split("skillhost run --resume ").nth(1).unwrap().split_whitespace().next().unwrap().to_string();
    let out =
        cmd().args(["run", "--json", "--decisions"]).arg(&d2).args(["--resume", &session, "COM3"]).assert().success();
    let outcome: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    assert_eq!(outcome["status"], "answered");
    assert_eq!(outcome["answer"], "use COM3");
    assert_eq!(outcome["session"], session.as_str());
    assert_eq!(outcome["total_steps"], 2);
}

fn openai(server: &MockServer) -> ProviderConfig {
    let mut config = ProviderConfig::openai(&format!("{}/v1", server.base), "mock-model");
    config.backoff_base = Duration::from_millis(10);
    config
}

#[tokio::test]
async fn openai_json_mode_survives_500s() {
    let env = common::Env::new();
    let lib = probe_home(&env);
    let server = MockServer::start(vec![
        Reply::error(500, "overloaded"),
        Reply::error(503, "overloaded"),
        Reply::ok(llm_mock::openai_text(&call("probe", json!({"mode": "noop"})).to_string())),
        Reply::ok(llm_mock::openai_text(&reply("probe ok").to_string())),
        Reply::ok(llm_mock::openai_text(&reply("probe ok").to_string())),
    ])
    .await;
    let provider = open(&openai(&server)).unwrap();
    let outcome = run_general(&lib, provider.as_ref(), None).await;
    assert_eq!(statuses(&outcome), ["success", "answered"]);
    assert_eq!(outcome.answer.as_deref(), Some("probe ok"));
    let requests = server.requests();
    assert_eq!(requests.len(), 5);
    for r in &requests {
        assert_eq!(r.body["response_format"]["type"], "json_object");
        assert!(r.body["messages"][0]["content"].as_str().unwrap().contains("JSON"));
    }
}

#[test]
fn provider_down_is_one_clear_error() {
    let env = common::Env::new();
    // A loopback port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    std::fs::write(
        env.home.path().join("skillhost.toml"),
        format!("[provider]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:{port}/v1\"\nmax_retries = 0\n"),
    )
    .unwrap();
    let out = Command::cargo_bin("skillhost")
        .unwrap()
        .env("SKILLHOST_HOME", env.home.path())
        .envs(common::store_env(env.home.path()))
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("SKILLHOST_PROVIDER")
        .current_dir(env.workspace.path())
        .args(["run", "hello"])
        .assert()
        .code(1);
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).to_string();
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert!(errors[0].contains("cannot reach") && errors[0].contains(&format!("127.0.0.1:{port}")), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    // The run is saved and can be retried once a provider answers (here: a scripted reply).
    let id = errors[0].split("--resume ").nth(1).and_then(|s| s.split('`').next()).expect("resume hint").to_string();
    let decisions = env.sources.path().join("retry.json");
    std::fs::write(&decisions, r#"{"decide": [{"next_action": "reply", "message": "hello back"}]}"#).unwrap();
    let out = Command::cargo_bin("skillhost")
        .unwrap()
        .env("SKILLHOST_HOME", env.home.path())
        .envs(common::store_env(env.home.path()))
        .current_dir(env.workspace.path())
        .args(["--json", "run", "--resume", &id, "--decisions"])
        .arg(&decisions)
        .assert()
        .code(0);
    let outcome: serde_json::Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    assert_eq!((outcome["session"].as_str(), outcome["answer"].as_str()), (Some(id.as_str()), Some("hello back")));

    // Nothing configured at all: say how to configure one.
    let bare = common::Env::new();
    let out = Command::cargo_bin("skillhost")
        .unwrap()
        .env("SKILLHOST_HOME", bare.home.path())
        .envs(common::store_env(bare.home.path()))
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("ANTHROPIC_BASE_URL")
        .env_remove("SKILLHOST_PROVIDER")
        .current_dir(bare.workspace.path())
        .args(["run", "hello"])
        .assert()
        .code(1);
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).to_string();
    for hint in ["OPENAI_API_KEY", "ANTHROPIC_API_KEY", "skillhost.toml", "--decisions"] {
        assert!(stderr.contains(hint), "{hint}: {stderr}");
    }
}

#[tokio::test]
async fn openai_tool_calling_path() {
    let env = common::Env::new();
    let lib = probe_home(&env);
    let server = MockServer::start(vec![
        Reply::ok(llm_mock::openai_tool_call("c1", "probe", "{\"mode\": \"noop\",}")),
        Reply::ok(llm_mock::openai_tool_call("c2", "reply", "{\"message\": \"probe ok\"}")),
    ])
    .await;
    let provider = open(&openai(&server)).unwrap();
    let opts = AgentOptions { tools: true, ..AgentOptions::default() };
    let outcome = agent::run(&lib, provider.as_ref(), &builtin_general(), "check the probe", &opts).await.unwrap();
    assert_eq!(statuses(&outcome), ["success", "answered"]);
    assert!(outcome.steps[0].repaired, "the trailing comma in the arguments was repaired");
    assert_eq!(outcome.answer.as_deref(), Some("probe ok"));
    let body = &server.requests()[0].body;
    let names: Vec<&str> =
        body["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["probe", "reply", "require_more"]);
    assert_eq!(body["tools"][0]["function"]["parameters"]["required"], json!(["mode"]));
    assert!(body.get("response_format").is_none());
}

#[tokio::test]
async fn anthropic_tool_use_path() {
    let env = common::Env::new();
    let lib = probe_home(&env);
    let server = MockServer::start(vec![
        Reply::ok(llm_mock::anthropic_tool_use("t1", "probe", json!({"mode": "echo", "arg": "x"}))),
        Reply::ok(llm_mock::anthropic_tool_use("t2", "reply", json!({"message": "probe echoes"}))),
    ])
    .await;
    let mut config = ProviderConfig::anthropic(&server.base, "claude-mock", "sk-ant-test");
    config.backoff_base = Duration::from_millis(10);
    let provider = open(&config).unwrap();
    let opts = AgentOptions { tools: true, ..AgentOptions::default() };
    let outcome = agent::run(&lib, provider.as_ref(), &builtin_general(), "check the probe", &opts).await.unwrap();
    assert_eq!(statuses(&outcome), ["success", "answered"]);
    assert_eq!(outcome.answer.as_deref(), Some("probe echoes"));
    let requests = server.requests();
    let names: Vec<&str> =
        requests[0].body["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["probe", "reply", "require_more"]);
    // Step 2's context shows step 1's tool result.
    assert!(requests[1].body.to_string().contains("step 1: call_skill probe"));
}

fn profile(name: &str, namespace: &str) -> AgentProfile {
    AgentProfile { name: name.into(), namespace: namespace.into(), ..builtin_general() }
}

#[tokio::test]
async fn memories_of_one_profile_stay_out_of_another_profiles_context() {
    let env = common::Env::new();
    let lib = probe_home(&env);
    let alpha = profile("alpha", "ns-alpha");
    let beta = profile("beta", "ns-beta");
    let writer = Recording::scripted(json!({"decide": [
        call("probe", json!({"mode": "remember", "arg": "zebra-secret-fact", "n": 1})),
        reply("stored"),
    ]}));
    let outcome = agent::run(&lib, &writer, &alpha, "remember the zebra fact", &options(None)).await.unwrap();
    assert_eq!(outcome.steps[0].memories_stored.len(), 1);
    assert!(writer.prompt(1).contains("zebra-secret-fact #0"), "alpha's own next step sees it");

    let other = Recording::scripted(json!({"decide": [reply("nothing")]}));
    agent::run(&lib, &other, &beta, "what is the zebra fact?", &options(None)).await.unwrap();
    let prompt = other.prompt(0);
    assert!(prompt.contains("# Memory") && !prompt.contains("zebra-secret-fact"), "{prompt}");

    let again = Recording::scripted(json!({"decide": [reply("zebra")]}));
    agent::run(&lib, &again, &alpha, "what is the zebra fact?", &options(None)).await.unwrap();
    assert!(again.prompt(0).contains("zebra-secret-fact #0"), "alpha's next run recalls it");
}

#[tokio::test]
async fn guardrail_marks_an_uncited_conclusion() {
    let env = common::Env::new();
    let lib = log_home(&env);
    let provider = Recording::scripted(json!({"decide": [
        call("read-log-file", json!({"path": "/workspace/uart.log", "keyword": "RX overrun", "max_lines": 3})),
        reply("The UART drops bytes because flash erases stall it. The first overrun is at L1243. It also crashed at L9999."),
    ]}));
    let outcome = agent::run(&lib, &provider, &log_analyst(&env), "why does the UART print garbage?", &options(None))
        .await
        .unwrap();
    let answer = outcome.answer.unwrap();
    assert!(answer.contains("stall it [unsupported: no log line cited]."), "{answer}");
    assert!(answer.contains("[L9999: not in any skill result]"), "{answer}");
    let evidence = outcome.evidence.unwrap();
    assert_eq!(
        (evidence.conclusions, evidence.grounded, evidence.unsupported.len(), evidence.not_returned.len()),
        (3, 1, 1, 1)
    );
    let steps = lib.audit_log().show(&outcome.session).unwrap();
    let last = steps.iter().rfind(|e| e["kind"] == "step").unwrap();
    assert_eq!(last["evidence"]["unsupported"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn a_damaged_audit_log_stops_the_run_which_resumes_after_the_seal() {
    // The file log damaged by hand: the local backend's own failure (PostgreSQL's chain
    // refuses any change to a written line; tests/store_postgres.rs pins that).
    let env = common::Env::local();
    let lib = probe_home(&env);
    let log = lib.audit_log();
    std::fs::create_dir_all(log.path().parent().unwrap()).unwrap();
    let mut damaged = std::fs::read(log.path()).unwrap_or_default();
    damaged.extend_from_slice(b"not a chain line\n");
    std::fs::write(log.path(), &damaged).unwrap();

    let provider = Recording::scripted(json!({"decide": [call("probe", json!({"mode": "noop"})), reply("done")]}));
    let err = agent::run(&lib, &provider, &builtin_general(), "check the probe", &options(None))
        .await
        .expect_err("a run must not go on unaudited");
    let message = format!("{err:#}");
    assert!(message.contains("audit line cannot be written") && message.contains("skillhost audit seal"), "{message}");
    assert_eq!(std::fs::read(log.path()).unwrap(), damaged, "nothing was appended to the damaged log");
    assert_eq!(provider.requests().len(), 1, "the run stopped at its first step");
    let session =
        message.split("--resume ").nth(1).and_then(|s| s.split('`').next()).expect("the error names the session");

    log.seal().unwrap();
    let state = agent::load_session(&lib, session).expect("the stopped step was saved");
    let second = Recording::scripted(json!({"decide": [reply("done")]}));
    let done = agent::resume(&lib, &second, &builtin_general(), state, None, &options(None)).await.unwrap();
    assert_eq!(done.status, OutcomeStatus::Answered);
    log.verify().expect("the new segment verifies");
    let lines = std::fs::read_to_string(log.path()).unwrap();
    assert!(lines.contains(session), "the resumed run is audited: {lines}");
}

// ---------------------------------------------------------------------------------------------
// The agent with a real model (issue 14)

#[tokio::test]
async fn an_early_reply_is_asked_once_more_with_the_output_style() {
    let env = common::Env::new();
    let lib = probe_home(&env);
    let provider = Recording::scripted(json!({"decide": [
        call("probe", json!({"mode": "noop"})),
        reply("early, unstyled"),
        reply("styled answer"),
    ]}));
    let outcome = run_general(&lib, &provider, None).await;
    assert_eq!(statuses(&outcome), ["success", "answered"]);
    assert_eq!(outcome.answer.as_deref(), Some("styled answer"), "the styled reply is the one accepted");
    assert!(outcome.steps[1].styled && !outcome.steps[0].styled);
    let requests = provider.requests();
    assert_eq!(requests.len(), 3);
    // The early reply was decided without the output style; the re-ask carries it and the reply.
    assert!(!provider.prompt(1).contains("## Output style"));
    let reask = provider.prompt(2);
    assert!(reask.contains("## Output style") && reask.contains("early, unstyled"), "{reask}");
    assert!(reask.contains("Before this answer is accepted"), "{reask}");
    // Once per run: saved in the state.
    assert!(agent::load_session(&lib, &outcome.session).unwrap().output_style_given);

    // A reply in the final phase (here: at the step limit) is accepted as it comes.
    let provider = Recording::scripted(json!({"decide": [reply("final at once")]}));
    let outcome = run_general(&lib, &provider, Some(1)).await;
    assert_eq!(outcome.answer.as_deref(), Some("final at once"));
    assert_eq!(provider.requests().len(), 1);
    assert!(!outcome.steps[0].styled);
}

#[tokio::test]
async fn the_reask_after_an_unparseable_reply_clips_what_it_echoes() {
    let env = common::Env::new();
    let lib = probe_home(&env);
    let huge = format!("no json here {}", "x".repeat(1_000_000));
    let provider = Recording::scripted(
        json!({"decide": [huge, call("probe", json!({"mode": "noop"})), reply("ok"), reply("ok")]}),
    );
    let outcome = run_general(&lib, &provider, None).await;
    assert!(outcome.steps[0].reasked);
    let reask = &provider.requests()[1].messages;
    let echoed = &reask[reask.len() - 2].content;
    assert!(echoed.starts_with("no json here xxx"), "{}", &echoed[..40]);
    assert!(echoed.len() < 3_000, "echoed {} bytes", echoed.len());
    assert!(echoed.contains("more characters not repeated"), "{}", &echoed[echoed.len() - 60..]);
    let request_bytes: usize = reask.iter().map(|m| m.content.len()).sum();
    assert!(request_bytes < 60_000, "the re-ask request is {request_bytes} bytes");
}

#[tokio::test]
async fn the_repeat_rule_fires_for_read_log_file_returning_the_same_lines() {
    let env = common::Env::new();
    let lib = log_home(&env);
    let profile = log_analyst(&env);
    let read = call(
        "read-log-file",
        json!({"path": "/workspace/uart.log", "since": "2026-03-02 13:52:20.078", "max_lines": 8}),
    );
    let provider =
        Recording::scripted(json!({"decide": [read, read, read, reply("done [L1243]"), reply("done [L1243]")]}));
    let outcome =
        agent::run(&lib, &provider, &profile, "why does the UART print garbage?", &options(None)).await.unwrap();
    assert_eq!(statuses(&outcome)[..3], ["success", "success", "success"]);
    // Every call stores its summary (merged into the previous one): that is no new fact.
    assert!(outcome.steps.iter().take(3).all(|s| !s.memories_stored.is_empty()));
    assert!(outcome.steps[1].notes.iter().all(|n| !n.contains("may conclude")), "{:?}", outcome.steps[1].notes);
    assert!(outcome.steps[2].notes.iter().any(|n| n.contains("may conclude")), "{:?}", outcome.steps[2].notes);
    let state = agent::load_session(&lib, &outcome.session).unwrap();
    let new: Vec<bool> = state.decisions.iter().take(3).map(|d| d.new_facts).collect();
    assert_eq!(new, [true, false, false]);
    assert!(provider.prompt(3).contains("you called `read-log-file` 3 times in a row"));
}

#[tokio::test]
async fn token_usage_and_elapsed_time_per_step_and_run_reach_the_outcome_and_the_audit_line() {
    let env = common::Env::new();
    let lib = probe_home(&env);
    // openai_text reports 12 prompt + 5 completion tokens per request.
    let server = MockServer::start(vec![
        Reply::ok(llm_mock::openai_text("not json at all")),
        Reply::ok(llm_mock::openai_text(&call("probe", json!({"mode": "noop"})).to_string())),
        Reply::ok(llm_mock::openai_text(&reply("probe ok").to_string())),
        Reply::ok(llm_mock::openai_text(&reply("probe ok").to_string())),
    ])
    .await;
    let provider = open(&openai(&server)).unwrap();
    let outcome = run_general(&lib, provider.as_ref(), None).await;
    assert_eq!(statuses(&outcome), ["success", "answered"]);
    // Step 1 asked twice (a re-ask), step 2 twice (the output style): both summed.
    let tokens: Vec<(Option<u64>, Option<u64>)> =
        outcome.steps.iter().map(|s| (s.prompt_tokens, s.completion_tokens)).collect();
    assert_eq!(tokens, [(Some(24), Some(10)), (Some(24), Some(10))]);
    assert_eq!((outcome.prompt_tokens, outcome.completion_tokens), (48, 20));
    assert!(outcome.steps.iter().all(|s| s.model_us > 0 && s.elapsed_us >= s.model_us));
    let steps_us: u64 = outcome.steps.iter().map(|s| s.elapsed_us).sum();
    assert!(outcome.elapsed_us >= steps_us, "{} < {steps_us}", outcome.elapsed_us);
    let lines: Vec<serde_json::Map<String, Value>> =
        lib.audit_log().show(&outcome.session).unwrap().into_iter().filter(|e| e["kind"] == "step").collect();
    assert_eq!(lines.len(), 2);
    for line in &lines {
        assert_eq!((line["prompt_tokens"].as_u64(), line["completion_tokens"].as_u64()), (Some(24), Some(10)));
        assert!(line["model_us"].as_u64().unwrap() > 0 && line["elapsed_us"].as_u64().unwrap() > 0);
    }
    assert!(lib.audit_log().verify().is_ok());

    // A provider that reports no usage: the fields are absent, not zero.
    let provider = Recording::scripted(json!({"decide": [reply("a"), reply("a")]}));
    let outcome = run_general(&lib, &provider, None).await;
    assert_eq!(outcome.steps[0].prompt_tokens, None);
    let line = lib.audit_log().show(&outcome.session).unwrap().into_iter().find(|e| e["kind"] == "step").unwrap();
    assert!(line.get("prompt_tokens").is_none(), "{line:?}");
}

/// `skillhost` with a home and no provider settings from the test's own environment (the
/// shared CLI helper), run in `cwd`.
fn bare_cli(home: &Path, cwd: &Path) -> Command {
    let mut c = common::skillhost(home);
    c.current_dir(cwd);
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_native_tool_calling_by_default_json_mode_by_switch_and_retries_shown() {
    let env = common::Env::new();
    drop(probe_home(&env));
    let probe_call = llm_mock::openai_tool_call("c1", "probe", r#"{"mode": "noop"}"#);
    let reply_call = llm_mock::openai_tool_call("c2", "reply", r#"{"message": "the probe answers"}"#);
    let server = MockServer::start(vec![
        Reply::error(429, "slow down").with_header("retry-after", "0.2"),
        Reply::ok(probe_call),
        Reply::ok(reply_call.clone()),
        Reply::ok(reply_call),
    ])
    .await;
    let base = format!("{}/v1", server.base);
    let (home, cwd) = (env.home.path().to_path_buf(), env.workspace.path().to_path_buf());
    let out = tokio::task::spawn_blocking(move || {
        bare_cli(&home, &cwd)
            .env("OPENAI_BASE_URL", &base)
            .args(["run", "--agent", "general", "check the probe"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "the probe answers");
    assert!(stderr.contains("(native tool calling)"), "{stderr}");
    assert!(
        stderr.contains("is rate limiting (HTTP 429) on attempt 1 of 4; retrying in 0.2 s (as its Retry-After asked)"),
        "{stderr}"
    );
    let step = stderr.lines().find(|l| l.starts_with("[step 1/8] probe")).expect("a progress line");
    assert!(step.contains("20+8 tokens"), "{step}");
    assert!(stderr.contains("60 prompt + 24 completion tokens"), "{stderr}");
    let requests = server.requests();
    assert_eq!(requests.len(), 4);
    for r in &requests[1..] {
        assert_eq!(r.body["tool_choice"], "required");
        assert!(r.body["tools"].as_array().is_some_and(|t| t.iter().any(|t| t["function"]["name"] == "probe")));
        assert!(r.body.get("response_format").is_none());
    }

    // `tool_calling = false`: JSON mode; under --json the retry is an event line on stderr.
    let server = MockServer::start(vec![
        Reply::error(503, "overloaded"),
        Reply::ok(llm_mock::openai_text(&call("probe", json!({"mode": "noop"})).to_string())),
        Reply::ok(llm_mock::openai_text(&reply("fine").to_string())),
        Reply::ok(llm_mock::openai_text(&reply("fine").to_string())),
    ])
    .await;
    std::fs::write(
        env.home.path().join("skillhost.toml"),
        format!("[provider]\nkind = \"openai\"\nbase_url = \"{}/v1\"\ntool_calling = false\n", server.base),
    )
    .unwrap();
    let (home, cwd) = (env.home.path().to_path_buf(), env.workspace.path().to_path_buf());
    let out = tokio::task::spawn_blocking(move || {
        bare_cli(&home, &cwd).args(["--json", "run", "--agent", "general", "check the probe"]).output().unwrap()
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let outcome: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((outcome["answer"].as_str(), outcome["prompt_tokens"].as_u64()), (Some("fine"), Some(36)));
    let events: Vec<Value> = stderr.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).collect();
    assert_eq!(events.len(), 1, "{stderr}");
    assert_eq!((events[0]["event"].as_str(), events[0]["reason"]["kind"].as_str()), (Some("retry"), Some("status")));
    assert_eq!((events[0]["reason"]["status"].as_u64(), events[0]["failed_attempt"].as_u64()), (Some(503), Some(1)));
    assert!(events[0]["wait_ms"].as_u64().is_some());
    assert!(stderr.contains("(JSON mode)"), "{stderr}");
    for r in &server.requests()[1..] {
        assert_eq!(r.body["response_format"]["type"], "json_object");
        assert!(r.body.get("tools").is_none());
    }

    // `--tools` overrides the file; `--no-tools` the default.
    let server = MockServer::start(vec![Reply::ok(llm_mock::openai_text(&reply("x").to_string()))]).await;
    std::fs::remove_file(env.home.path().join("skillhost.toml")).unwrap();
    let (home, cwd, base) =
        (env.home.path().to_path_buf(), env.workspace.path().to_path_buf(), format!("{}/v1", server.base));
    let out = tokio::task::spawn_blocking(move || {
        bare_cli(&home, &cwd)
            .env("OPENAI_BASE_URL", &base)
            .args(["run", "--no-tools", "--max-steps", "1", "--agent", "general", "x"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(server.requests()[0].body["response_format"]["type"], "json_object");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_on_a_terminal_saves_the_session_and_resume_continues_in_its_workspace() {
    let env = common::Env::new();
    drop(log_home(&env));
    let server = MockServer::start(vec![Reply::Hang]).await;
    let bin = assert_cmd::cargo::cargo_bin("skillhost");
    let command = format!(
        "exec '{}' run --agent log-analyst --workspace '{}' 'why does the UART print garbage?'",
        bin.display(),
        workspace().display()
    );
    let mut child = std::process::Command::new("script")
        .args(["-qefc", &command, "/dev/null"])
        .env("SKILLHOST_HOME", env.home.path())
        .envs(common::store_env(env.home.path()))
        .env("OPENAI_BASE_URL", format!("{}/v1", server.base))
        .env_remove("OPENAI_API_KEY")
        .env_remove("SKILLHOST_PROVIDER")
        .current_dir(env.workspace.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("util-linux script");
    let mut stdout = child.stdout.take().unwrap();
    let seen = Arc::new(Mutex::new(String::new()));
    let sink = seen.clone();
    let reader = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = std::io::Read::read(&mut stdout, &mut buf) {
            if n == 0 {
                break;
            }
            sink.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    // Wait until the run is waiting on the model (the mock never answers).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while server.requests().is_empty() {
        assert!(std::time::Instant::now() < deadline, "the run never asked the model: {}", seen.lock().unwrap());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), b"\x03").unwrap();
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap()).await.unwrap();
    reader.join().unwrap();
    let shown = seen.lock().unwrap().clone();
    assert_eq!(status.code(), Some(130), "{shown}");
    assert!(shown.contains("interrupted: session "), "{shown}");
    let id =
        shown.split("skillhost run --resume ").nth(1).and_then(|s| s.split_whitespace().next()).expect("resume hint");
    assert!(shown.contains(&format!("session {id} is saved after step 0 of 8")), "{shown}");

    // Resumed from a directory that is not the run's workspace, without --workspace: the
    // log is read from the workspace the run started in.
    let decisions = env.sources.path().join("resume.json");
    let read = call(
        "read-log-file",
        json!({"path": "/workspace/uart.log", "since": "2026-03-02 13:52:20.078", "max_lines": 8}),
    );
    std::fs::write(&decisions, json!({"decide": [read, reply("done [L1243]"), reply("done [L1243]")]}).to_string())
        .unwrap();
    let out = bare_cli(env.home.path(), env.workspace.path())
        .args(["--json", "run", "--resume", id, "--decisions"])
        .arg(&decisions)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let canonical = std::fs::canonicalize(workspace()).unwrap();
    assert!(stderr.contains(&format!("workspace: {} (as the run started)", canonical.display())), "{stderr}");
    let outcome: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(outcome["session"], id);
    assert_eq!(outcome["steps"][0]["status"], "success", "{outcome:#}");
    assert!(outcome["steps"][0]["summary"].as_str().unwrap().contains("lines"), "{outcome:#}");
}

/// The streamed form of `action` (a JSON-mode reply), split before `split_at`, with the
/// second part held back until `gate` opens when one is given.
fn streamed_action(action: &Value, split_at: &str, gate: Option<Arc<tokio::sync::Notify>>) -> Reply {
    let text = action.to_string();
    let cut = text.find(split_at).expect("split point in the action");
    let mut parts = llm_mock::openai_stream_text(&[&text[..cut], &text[cut..]]);
    if let Some(gate) = gate {
        // After the role chunk and the first piece.
        parts.insert(2, llm_mock::StreamPart::Wait(gate));
    }
    Reply::Stream(parts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_terminal_the_reply_appears_while_it_arrives() {
    let env = common::Env::new();
    drop(log_home(&env));
    let gate = Arc::new(tokio::sync::Notify::new());
    let answer = reply("The UART baud rate is wrong [L1243].");
    let server = MockServer::start(vec![
        streamed_action(&answer, "baud rate", Some(gate.clone())),
        streamed_action(&answer, "baud rate", None),
        streamed_action(&answer, "baud rate", None),
    ])
    .await;
    std::fs::write(
        env.home.path().join("skillhost.toml"),
        format!("[provider]\nkind = \"openai\"\nbase_url = \"{}/v1\"\ntool_calling = false\n", server.base),
    )
    .unwrap();
    let bin = assert_cmd::cargo::cargo_bin("skillhost");
    let command = format!("exec '{}' run --agent general 'why does the UART print garbage?'", bin.display());
    let mut child = std::process::Command::new("script")
        .args(["-qefc", &command, "/dev/null"])
        .env("SKILLHOST_HOME", env.home.path())
        .envs(common::store_env(env.home.path()))
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("SKILLHOST_PROVIDER")
        .env_remove("RUST_LOG")
        .current_dir(env.workspace.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("util-linux script");
    let mut stdout = child.stdout.take().unwrap();
    let seen = Arc::new(Mutex::new(String::new()));
    let sink = seen.clone();
    let reader = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = std::io::Read::read(&mut stdout, &mut buf) {
            if n == 0 {
                break;
            }
            sink.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    // The first half of the reply is on the terminal while the rest is still held back.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !seen.lock().unwrap().contains("\"The UART ") {
        assert!(std::time::Instant::now() < deadline, "the first piece never showed: {}", seen.lock().unwrap());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let early = seen.lock().unwrap().clone();
    assert!(early.contains("  model: {"), "{early}");
    assert!(!early.contains("baud rate"), "the held-back piece cannot be there yet: {early}");
    gate.notify_one();
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap()).await.unwrap();
    reader.join().unwrap();
    let shown = seen.lock().unwrap().clone();
    assert_eq!(status.code(), Some(0), "{shown}");
    assert!(shown.contains("baud rate is wrong [L1243].\""), "the rest followed: {shown}");
    assert!(server.requests()[0].body["stream"] == true, "a terminal streams by default");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_flag_shows_replies_off_a_terminal_but_never_under_json() {
    let env = common::Env::new();
    drop(log_home(&env));
    let answer = reply("The UART baud rate is wrong [L1243].");
    // A server streams only when asked; otherwise it answers with the whole JSON.
    let replies = |streams: bool| {
        (0..3)
            .map(|_| match streams {
                true => streamed_action(&answer, "baud", None),
                false => Reply::ok(llm_mock::openai_text(&answer.to_string())),
            })
            .collect::<Vec<_>>()
    };
    for (args, streams) in
        [(&["run", "--stream"][..], true), (&["--json", "run", "--stream"][..], false), (&["run"][..], false)]
    {
        let server = MockServer::start(replies(streams)).await;
        std::fs::write(
            env.home.path().join("skillhost.toml"),
            format!("[provider]\nkind = \"openai\"\nbase_url = \"{}/v1\"\ntool_calling = false\n", server.base),
        )
        .unwrap();
        let (home, cwd) = (env.home.path().to_path_buf(), env.workspace.path().to_path_buf());
        let out = tokio::task::spawn_blocking(move || {
            bare_cli(&home, &cwd).args(args).args(["--agent", "general", "why?"]).output().unwrap()
        })
        .await
        .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        assert_eq!(stderr.contains("  model: {\"message\":\"The UART baud rate"), streams, "{args:?}: {stderr}");
        assert_eq!(server.requests()[0].body.get("stream").is_some(), streams, "{args:?}");
        if args[0] == "--json" {
            let outcome: Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(outcome["answer"], "The UART baud rate is wrong [L1243].");
        } else {
            assert!(String::from_utf8_lossy(&out.stdout).contains("The UART baud rate is wrong [L1243]."));
        }
    }
}
