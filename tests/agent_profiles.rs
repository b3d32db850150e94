//! Agent profiles and the router: AGENT.md parsing with file:line errors, role slicing by
//! phase, builtin + home profiles, routing by --agent, by the model (a mock OpenAI-compatible
//! server on 127.0.0.1) and by keywords when the model is missing, down or answers nonsense;
//! the `skillhost agent` commands with --json.

mod common;
#[path = "common/llm_mock.rs"]
mod llm_mock;

use std::path::{Path, PathBuf};
use std::time::Duration;

use assert_cmd::Command;
use common::skillhost;
use llm_mock::{MockServer, Reply};
use serde_json::{Value, json};
use skillhost::agent::profile::{AgentProfile, Phase, ProfileError, builtin_general, load_profiles, parse_profile};
use skillhost::agent::provider::{Provider, ProviderConfig, open};
use skillhost::agent::router::{RouteMethod, route};

fn example_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/log-analysis/agents/log-analyst")
}

fn example_profile() -> AgentProfile {
    let path = example_dir().join("AGENT.md");
    let text = std::fs::read_to_string(&path).unwrap();
    parse_profile("log-analyst", &text, Some(&path)).unwrap()
}

fn write_profile(home: &Path, name: &str, text: &str) -> PathBuf {
    let dir = home.join("agents").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("AGENT.md");
    std::fs::write(&path, text).unwrap();
    path
}

/// The error of loading `home`, which must be a [`ProfileError`].
fn load_error(home: &Path) -> ProfileError {
    let error = load_profiles(home).expect_err("the broken profile must be an error");
    error.downcast::<ProfileError>().unwrap_or_else(|e| panic!("not a ProfileError: {e:#}"))
}

const WRITER: &str = "---\ndescription: Writes release notes and changelogs\nkeywords: [changelog, release notes]\n---\n## Identity\nYou write release notes.\n";

// ---------------------------------------------------------------------------------------------
// Parsing

#[test]
fn parse_errors_name_file_line_and_the_fix() {
    let home = tempfile::tempdir().unwrap();

    let path = write_profile(home.path(), "writer", "---\ndescription: d\n---\n# Writer\n\n## Boundaries\nnone\n");
    let e = load_error(home.path());
    assert_eq!((e.file.as_path(), e.line), (path.as_path(), Some(4)));
    assert!(e.to_string().starts_with(&format!("{}:4: no `## Identity` section", path.display())), "{e}");

    let path = write_profile(home.path(), "writer", "---\ndescription: d\n---\n## Identity\nme\n\n## Tone\nfriendly\n");
    let e = load_error(home.path());
    assert_eq!(e.line, Some(7), "{e}");
    let message = e.to_string();
    assert!(message.starts_with(&format!("{}:7: unknown section `## Tone`", path.display())), "{message}");
    for allowed in ["## Identity", "## Boundaries", "## Workflow", "## Output style"] {
        assert!(message.contains(allowed), "{message}");
    }

    write_profile(home.path(), "writer", "---\ndescription: d\nkeywords: [a]\ncolour: blue\n---\n## Identity\nme\n");
    let e = load_error(home.path());
    assert_eq!(e.line, Some(4), "{e}");
    assert!(e.message.contains("unknown field `colour`") && e.message.contains("allowed: description"), "{e}");

    write_profile(home.path(), "writer", "---\ndescription: d\nskills: []\n---\n## Identity\nme\n");
    let e = load_error(home.path());
    assert_eq!(e.line, Some(3), "{e}");
    assert!(e.message.contains("`skills: []`") && e.message.contains("leave `skills` out"), "{e}");

    write_profile(home.path(), "writer", "---\nkeywords: [a]\n---\n## Identity\nme\n");
    let e = load_error(home.path());
    assert!(e.message.contains("missing field `description`"), "{e}");

    std::fs::remove_dir_all(home.path().join("agents/writer")).unwrap();
    let path = write_profile(home.path(), "Log_Analyst", "---\ndescription: d\n---\n## Identity\nme\n");
    let e = load_error(home.path());
    assert_eq!(e.file, path);
    assert!(e.message.contains("`Log_Analyst`") && e.message.contains("rename the directory"), "{e}");

    // A profile directory without AGENT.md is not skipped either.
    std::fs::remove_dir_all(home.path().join("agents/Log_Analyst")).unwrap();
    std::fs::create_dir_all(home.path().join("agents/empty")).unwrap();
    let e = load_profiles(home.path()).unwrap_err().to_string();
    assert!(e.contains("agents/empty") && e.contains("without an AGENT.md"), "{e}");
}

#[test]
fn example_profile_fields() {
    let profile = example_profile();
    assert_eq!(profile.name, "log-analyst");
    assert!(profile.evidence);
    assert_eq!(profile.namespace, "log-analyst");
    assert_eq!(profile.skills, ["read-log-file", "query-issue-kb", "write-analysis-snapshot", "generate-report"]);
    for keyword in ["uart", "log", "garbage", "串口", "乱码", "日志"] {
        assert!(profile.keywords.iter().any(|k| k == keyword), "keyword {keyword} missing");
    }
    assert!(profile.allows("query-issue-kb") && !profile.allows("publish-npm-package"));
    assert!(builtin_general().allows("publish-npm-package"));
    assert!(!builtin_general().evidence);
}

#[test]
fn role_text_is_sliced_by_phase() {
    let profile = example_profile();
    let has = |text: &str, part: &str| text.contains(part.trim());
    let step = profile.role(Phase::Step);
    let decision = profile.role(Phase::DecisionPoint);
    let last = profile.role(Phase::Final);
    for text in [&step, &decision, &last] {
        assert!(has(text, &profile.identity) && has(text, &profile.boundaries), "{text}");
    }
    assert!(!has(&step, &profile.workflow) && !has(&step, &profile.output_style), "{step}");
    assert!(has(&decision, &profile.workflow) && !has(&decision, &profile.output_style), "{decision}");
    assert!(!has(&last, &profile.workflow) && has(&last, &profile.output_style), "{last}");
    assert!(last.contains("L<n>"), "evidence profiles get the citation rule: {last}");
}

#[test]
fn load_profiles_merges_builtin_and_home() {
    let home = tempfile::tempdir().unwrap();
    // No agents directory at all: just the builtin.
    assert_eq!(load_profiles(home.path()).unwrap(), vec![builtin_general()]);

    write_profile(home.path(), "writer", WRITER);
    std::fs::write(home.path().join("agents/README.txt"), "not a profile").unwrap();
    std::fs::create_dir_all(home.path().join("agents/.add-x-1")).unwrap();
    let names: Vec<String> = load_profiles(home.path()).unwrap().into_iter().map(|p| p.name).collect();
    assert_eq!(names, ["general", "writer"]);

    // A home-defined general replaces the builtin.
    let general = write_profile(home.path(), "general", "---\ndescription: mine\n---\n## Identity\nMy own general.\n");
    let profiles = load_profiles(home.path()).unwrap();
    assert_eq!(profiles.len(), 2);
    assert_eq!((profiles[0].description.as_str(), profiles[0].source.as_deref()), ("mine", Some(general.as_path())));

    // Two profiles in one namespace would share memories.
    write_profile(home.path(), "copy", &WRITER.replace("---\n## Identity", "namespace: writer\n---\n## Identity"));
    let e = load_error(home.path());
    assert!(e.message.contains("both use the memory namespace `writer`"), "{e}");
    assert!(e.file.ends_with("agents/copy/AGENT.md"), "{e}");
    assert_eq!(e.line, Some(4), "{e}");
}

// ---------------------------------------------------------------------------------------------
// Router

fn profiles() -> Vec<AgentProfile> {
    let writer = parse_profile("release-writer", WRITER, None).unwrap();
    vec![builtin_general(), example_profile(), writer]
}

fn mock_provider(server: &MockServer) -> std::sync::Arc<dyn Provider> {
    let mut config = ProviderConfig::openai(&format!("{}/v1", server.base), "route-model");
    config.api_key = Some("sk-test".into());
    config.max_retries = 0;
    config.backoff_base = Duration::from_millis(10);
    open(&config).unwrap()
}

#[tokio::test]
async fn requested_agent_wins_and_an_unknown_one_lists_the_names() {
    let r = route("UART prints garbage", &profiles(), Some("release-writer"), None).await.unwrap();
    assert_eq!((r.profile.as_str(), r.method), ("release-writer", RouteMethod::Requested));
    let e = route("x", &profiles(), Some("poet"), None).await.unwrap_err().to_string();
    assert!(e.contains("no agent profile `poet`") && e.contains("general, log-analyst, release-writer"), "{e}");
}

#[tokio::test]
async fn the_model_picks_the_profile_from_a_json_mode_request_listing_them() {
    let answer = r#"{"profile": "log-analyst", "reason": "a device log question"}"#;
    let server = MockServer::start(vec![Reply::ok(llm_mock::openai_text(answer))]).await;
    let provider = mock_provider(&server);
    let r = route("the board resets at night", &profiles(), None, Some(provider.as_ref())).await.unwrap();
    assert_eq!((r.profile.as_str(), r.method), ("log-analyst", RouteMethod::Llm));
    assert_eq!(r.reason, "a device log question");

    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let body = &requests[0].body;
    assert_eq!(body["response_format"], json!({"type": "json_object"}));
    let system = body["messages"][0]["content"].as_str().unwrap();
    for profile in profiles() {
        assert!(system.contains(&format!("- {}: {}", profile.name, profile.description)), "{system}");
    }
    assert!(system.contains("JSON") && system.contains("\"profile\""), "{system}");
    assert_eq!(body["messages"][1], json!({"role": "user", "content": "the board resets at night"}));
}

#[tokio::test]
async fn unusable_model_answers_fall_back_to_keywords_and_say_why() {
    let cases = [
        (llm_mock::openai_text(r#"{"profile": "poet", "reason": "rhymes"}"#), "`poet`, which is not a profile"),
        (llm_mock::openai_text(r#"{"profile": "log-analyst""#), "not usable JSON"),
    ];
    for (reply, says) in cases {
        let server = MockServer::start(vec![Reply::ok(reply)]).await;
        let provider = mock_provider(&server);
        let r = route("why does the UART print garbage?", &profiles(), None, Some(provider.as_ref())).await.unwrap();
        assert_eq!((r.profile.as_str(), r.method), ("log-analyst", RouteMethod::Keywords), "{says}");
        assert!(r.reason.starts_with("LLM not used: ") && r.reason.contains(says), "{}", r.reason);
        assert!(r.reason.contains("uart") && r.reason.contains("garbage"), "{}", r.reason);
    }

    // Server down: a port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut config = ProviderConfig::openai(&format!("http://127.0.0.1:{port}/v1"), "route-model");
    config.max_retries = 0;
    let provider = open(&config).unwrap();
    let r = route("write the changelog", &profiles(), None, Some(provider.as_ref())).await.unwrap();
    assert_eq!((r.profile.as_str(), r.method), ("release-writer", RouteMethod::Keywords));
    assert!(r.reason.contains("the provider failed") && r.reason.contains("cannot reach"), "{}", r.reason);
}

#[tokio::test]
async fn chinese_requests_route_by_keywords() {
    let r = route("为什么串口偶尔输出乱码？", &profiles(), None, None).await.unwrap();
    assert_eq!((r.profile.as_str(), r.method), ("log-analyst", RouteMethod::Keywords));
    assert!(
        r.reason.contains("no LLM provider") && r.reason.contains("串口") && r.reason.contains("乱码"),
        "{}",
        r.reason
    );
    let r = route("今天天气怎么样", &profiles(), None, None).await.unwrap();
    assert_eq!((r.profile.as_str(), r.method), ("general", RouteMethod::Default));
}

// ---------------------------------------------------------------------------------------------
// CLI

fn json_of(out: &[u8]) -> Value {
    serde_json::from_slice(out).unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(out)))
}

fn stdout_json(command: &mut Command) -> Value {
    json_of(&command.assert().success().get_output().stdout)
}

#[test]
fn cli_add_list_show_route() {
    let home = tempfile::tempdir().unwrap();
    let added = stdout_json(skillhost(home.path()).args(["--json", "agent", "add"]).arg(example_dir()));
    assert_eq!(added["added"], "log-analyst");
    assert_eq!(added["replaced"], false);
    assert!(home.path().join("agents/log-analyst/AGENT.md").is_file());

    let out = skillhost(home.path()).args(["agent", "add"]).arg(example_dir()).assert().failure();
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).to_string();
    assert!(stderr.contains("already installed") && stderr.contains("--replace"), "{stderr}");
    let replaced = stdout_json(skillhost(home.path()).args(["--json", "agent", "add", "--replace"]).arg(example_dir()));
    assert_eq!(replaced["replaced"], true);

    let list = stdout_json(skillhost(home.path()).args(["--json", "agent", "list"]));
    let rows = list.as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["name"], "general");
    assert_eq!(rows[0]["source"], Value::Null);
    assert_eq!(rows[1]["name"], "log-analyst");
    assert_eq!(rows[1]["namespace"], "log-analyst");
    assert_eq!(rows[1]["evidence"], true);
    assert_eq!(rows[1]["skills"][0], "read-log-file");
    assert!(rows[1]["source"].as_str().unwrap().ends_with("agents/log-analyst/AGENT.md"));

    let shown = stdout_json(skillhost(home.path()).args(["--json", "agent", "show", "log-analyst"]));
    assert_eq!(shown["profile"]["name"], "log-analyst");
    let workflow = shown["profile"]["workflow"].as_str().unwrap();
    assert!(shown["roles"]["decision_point"].as_str().unwrap().contains(workflow));
    assert!(!shown["roles"]["step"].as_str().unwrap().contains(workflow));
    assert!(shown["roles"]["final"].as_str().unwrap().contains("L<n>"));

    let out = skillhost(home.path()).args(["--json", "agent", "show", "poet"]).assert().failure();
    let error = json_of(&out.get_output().stdout);
    assert!(error["error"].as_str().unwrap().contains("general, log-analyst"), "{error}");

    let routed = stdout_json(skillhost(home.path()).args(["--json", "agent", "route", "为什么串口偶尔输出乱码？"]));
    assert_eq!(routed["profile"], "log-analyst");
    assert_eq!(routed["method"], "keywords");
    assert_eq!(routed["provider"], Value::Null);
    let routed = stdout_json(skillhost(home.path()).args(["--json", "agent", "route", "--agent", "general", "uart"]));
    assert_eq!((routed["profile"].as_str(), routed["method"].as_str()), (Some("general"), Some("requested")));

    // A broken directory is refused and nothing is installed.
    let broken = tempfile::tempdir().unwrap();
    let dir = broken.path().join("broken");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("AGENT.md"), "---\ndescription: d\n---\n## Identity\nme\n## Tone\nx\n").unwrap();
    let out = skillhost(home.path()).args(["agent", "add"]).arg(&dir).assert().failure();
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).to_string();
    assert!(stderr.contains("AGENT.md:6: unknown section `## Tone`"), "{stderr}");
    assert!(!home.path().join("agents/broken").exists());
}

#[tokio::test]
async fn cli_route_uses_the_configured_provider() {
    let home = tempfile::tempdir().unwrap();
    write_profile(home.path(), "release-writer", WRITER);
    let answer = r#"{"profile": "release-writer", "reason": "asks for notes"}"#;
    let server = MockServer::start(vec![Reply::ok(llm_mock::openai_text(answer))]).await;
    let mut command = skillhost(home.path());
    command
        .env("SKILLHOST_PROVIDER", "openai")
        .env("OPENAI_BASE_URL", format!("{}/v1", server.base))
        .env("OPENAI_API_KEY", "sk-test")
        .args(["--json", "agent", "route", "summarise what changed"]);
    let routed = tokio::task::spawn_blocking(move || stdout_json(&mut command)).await.unwrap();
    assert_eq!(routed["profile"], "release-writer");
    assert_eq!(routed["method"], "llm");
    assert_eq!(routed["reason"], "asks for notes");
    assert!(routed["provider"].as_str().unwrap().contains(&server.base), "{routed}");
    assert_eq!(server.requests().len(), 1);
}
