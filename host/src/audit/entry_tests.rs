//! The typed entries write what the ad hoc maps wrote before them, status by status. The
//! `old_*` functions are those writers as they were (library/run.rs `call_entry` and
//! `audit_refused`, mcp/mod.rs `audit_line`, cli/oci.rs `audit_install` at 7331975), kept
//! here verbatim so that any drift of the public log format fails a test.

use serde_json::json;

use super::*;
use crate::audit::CanonicalEntry;
use crate::audit::canonical_json;
use crate::capabilities::{CapabilityKind, Limits};
use crate::library::RunReport;
use crate::oci::Provenance;
use crate::sandbox::{Absorbed, CallOutcome, DenialKind, LogLevel, SkillOutput};

/// Every error a call can end with.
fn errors() -> Vec<CallError> {
    vec![
        CallError::InvalidParams("`n`: expected an integer".into()),
        CallError::Failed("on purpose".into()),
        CallError::CpuLimit("5000 ms".into()),
        CallError::MemoryLimit("64 MiB".into()),
        CallError::Timeout { limit_ms: 5 },
        CallError::Busy { running: 1, waited_ms: 2 },
        CallError::MemoryBudget { asked_mb: 64, budget_mb: 32, waited_ms: 0 },
        CallError::MemoryBudget { asked_mb: 16, budget_mb: 32, waited_ms: 3 },
        CallError::Panic("index out of bounds".into()),
        CallError::Trap("unreachable".into()),
        CallError::Setup("no store".into()),
        CallError::Cancelled,
    ]
}

fn provenance(signed: bool, allowed: bool) -> Provenance {
    Provenance {
        repository: "127.0.0.1:5000/skills/probe".into(),
        tag: Some("1.0".into()),
        digest: format!("sha256:{}", "a".repeat(64)),
        signer: signed.then(|| crate::oci::Signer {
            fingerprint: format!("sha256:{}", "b".repeat(64)),
            algorithm: crate::oci::keys::KeyAlgorithm::EcdsaP256,
            rule: "127.0.0.1:5000/skills".into(),
        }),
        unsigned_allowed: allowed,
    }
}

fn report(result: Result<SkillOutput, CallError>, provenance: Option<Provenance>, params: Value) -> RunReport {
    RunReport {
        skill: "probe".into(),
        version: Some("0.1.0".into()),
        content_hash: "c".repeat(64),
        provenance,
        session: "s-1".into(),
        step: 3,
        transport: None,
        params,
        outcome: CallOutcome {
            result,
            denials: vec![
                Denial::new(CapabilityKind::Memory, "memory #1 proposed at priority 5, stored at 3"),
                Denial::new(DenialKind::Sockets, "tcp-create-socket refused"),
            ],
            logs: vec![
                LogLine { level: LogLevel::Info, message: "hello #0".into() },
                LogLine { level: LogLevel::Warn, message: "careful".into() },
            ],
            stdout: String::new(),
            stderr: String::new(),
            elapsed_us: 248,
            cpu_time_us: 166,
            memory_peak_bytes: 327_680,
        },
        not_granted: vec!["network: https://example.com".into()],
        memories: Absorbed { stored: vec![1, 2], dropped: vec!["too long".into()] },
        compile: None,
        limits: Limits::DEFAULT,
    }
}

fn output(status: Status, text: &str) -> SkillOutput {
    SkillOutput { output: text.into(), status, metadata: Vec::new(), new_memories: Vec::new(), truncated_bytes: 0 }
}

/// library/run.rs `call_entry` before typed entries.
fn old_call_entry(report: &RunReport) -> Map<String, Value> {
    let mut m = new_entry(EntryKind::Call, &report.session);
    m.insert("step".into(), report.step.into());
    m.insert("skill".into(), report.skill.clone().into());
    m.insert("version".into(), report.version.clone().into());
    m.insert("skill_hash".into(), report.content_hash.clone().into());
    if let Some(p) = &report.provenance {
        m.insert("oci".into(), p.audit_value());
    }
    m.insert("params".into(), crate::bounded::value(&report.params, crate::bounded::MAX_VALUE_BYTES).into_owned());
    match &report.outcome.result {
        Ok(out) => {
            m.insert("status".into(), serde_json::to_value(out.status).unwrap_or(Value::Null));
            m.insert("output_bytes".into(), out.output.len().into());
            m.insert("output_preview".into(), old_preview(&out.output).into());
        }
        Err(e) => {
            let kind = serde_json::to_value(e).ok().and_then(|v| v.get("kind").cloned()).unwrap_or(Value::Null);
            m.insert("status".into(), kind);
            m.insert("error".into(), e.to_string().into());
        }
    }
    m.insert("elapsed_us".into(), report.outcome.elapsed_us.into());
    m.insert("cpu_time_us".into(), report.outcome.cpu_time_us.into());
    m.insert("memory_peak_bytes".into(), report.outcome.memory_peak_bytes.into());
    m.insert("denials".into(), serde_json::to_value(&report.outcome.denials).unwrap_or_default());
    m.insert("not_granted".into(), serde_json::to_value(&report.not_granted).unwrap_or_default());
    m.insert("memories_stored".into(), serde_json::to_value(&report.memories.stored).unwrap_or_default());
    m.insert("memories_dropped".into(), serde_json::to_value(&report.memories.dropped).unwrap_or_default());
    m.insert("logs".into(), serde_json::to_value(&report.outcome.logs).unwrap_or_default());
    m
}

/// audit.rs `preview` before the text module.
fn old_preview(text: &str) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(200) {
        Some((i, _)) => format!("{}…", &flat[..i]),
        None => flat,
    }
}

/// library/run.rs `audit_refused` before typed entries (the denial as a string map).
fn old_refused(name: &str, params: &Value, session: &str, step: u32, error: &anyhow::Error) -> Map<String, Value> {
    let mut m = new_entry(EntryKind::Call, session);
    m.insert("step".into(), step.into());
    m.insert("skill".into(), name.into());
    m.insert("params".into(), crate::bounded::value(params, crate::bounded::MAX_VALUE_BYTES).into_owned());
    m.insert("status".into(), "refused".into());
    m.insert("error".into(), format!("{error:#}").into());
    let denial = json!({ "capability": "integrity", "message": format!("call refused before running: {error:#}") });
    m.insert("denials".into(), json!([denial]));
    m
}

/// mcp/mod.rs `audit_line` (and `Client::audited`) before typed entries.
fn old_mcp_line(
    session: &str,
    transport: &str,
    tool: &str,
    client: (&str, &str),
    params: &Value,
    status: &str,
    extra: Map<String, Value>,
) -> Map<String, Value> {
    use crate::bounded::{MAX_NAME_BYTES, string};
    let mut entry = new_entry(EntryKind::Call, session);
    entry.insert("step".into(), 0.into());
    entry.insert("skill".into(), tool.into());
    entry.insert("params".into(), crate::bounded::value(params, crate::bounded::MAX_VALUE_BYTES).into_owned());
    entry.insert("status".into(), status.into());
    entry.insert("transport".into(), transport.into());
    entry.insert(
        "client".into(),
        json!({ "name": string(client.0, MAX_NAME_BYTES), "version": string(client.1, MAX_NAME_BYTES) }),
    );
    entry.extend(extra);
    entry
}

/// cli/oci.rs `audit_install` before typed entries.
fn old_install(
    name: &str,
    version: Option<String>,
    hash: &str,
    source: &str,
    provenance: &Provenance,
) -> Map<String, Value> {
    let status = match (&provenance.signer, provenance.unsigned_allowed) {
        (Some(_), _) => "signed",
        (None, true) => "unsigned-allowed",
        (None, false) => "unsigned",
    };
    let mut entry = new_entry(EntryKind::Install, "install");
    entry.insert("skill".into(), name.into());
    entry.insert("version".into(), version.into());
    entry.insert("skill_hash".into(), hash.into());
    entry.insert("source".into(), source.into());
    entry.insert("oci".into(), provenance.audit_value());
    entry.insert("status".into(), status.into());
    entry
}

fn same(new: impl Into<CanonicalEntry>, old: Map<String, Value>) {
    assert_eq!(new.into().canonical_text(), canonical_json(&Value::Object(old)));
}

#[test]
fn step_names_are_the_serialized_ones() {
    for status in [StepStatus::RequireMore, StepStatus::InvalidParams, StepStatus::ParseError, StepStatus::StepLimit] {
        assert_eq!(serde_json::to_value(status).unwrap(), status.as_str());
        assert_eq!(serde_json::from_value::<StepStatus>(status.as_str().into()).unwrap(), status);
    }
    for action in [StepAction::CallSkill, StepAction::RequireMore, StepAction::Invalid, StepAction::StepLimitSummary] {
        assert_eq!(serde_json::to_value(action).unwrap(), action.as_str());
    }
}

/// Every error kind: the call status and the error's own serialized `kind` (the `--json`
/// report) are one name; a step names it the same, except that a step turned away by the
/// memory budget has always said `busy`.
#[test]
fn a_call_error_kind_is_its_status_everywhere() {
    for e in &errors() {
        let kind = serde_json::to_value(e).unwrap()["kind"].clone();
        assert_eq!(serde_json::to_value(CallStatus::from(e)).unwrap(), kind, "{e:?}");
        assert_eq!(CallStatus::from(e).as_str(), kind, "{e:?}");
        let step = if matches!(e, CallError::MemoryBudget { .. }) { json!("busy") } else { kind };
        assert_eq!(StepStatus::from(e).as_str(), step, "{e:?}");
    }
    for s in [Status::Success, Status::Failure, Status::RequireMore] {
        let name = serde_json::to_value(s).unwrap();
        assert_eq!(serde_json::to_value(CallStatus::from(s)).unwrap(), name);
        assert_eq!(StepStatus::from(s).as_str(), name);
    }
    assert_eq!(serde_json::to_value(CallStatus::Refused).unwrap(), "refused");
}

#[test]
fn call_lines_are_the_old_ones_for_every_status() {
    let long = format!("first line\n\n  {}", "é".repeat(300));
    let big = json!({ "blob": "x".repeat(10_000) });
    let mut results: Vec<Result<SkillOutput, CallError>> = vec![
        Ok(output(Status::Success, "typed-audit|0|x")),
        Ok(output(Status::Failure, &long)),
        Ok(output(Status::RequireMore, "")),
    ];
    results.extend(errors().into_iter().map(Err));
    for result in results {
        for provenance in [None, Some(provenance(true, false)), Some(provenance(false, true))] {
            for params in [json!({ "mode": "echo", "arg": "x" }), big.clone(), Value::Null] {
                let r = report(result.clone(), provenance.clone(), params);
                assert_eq!(r.status().as_str(), old_call_entry(&r)["status"], "{:?}", r.outcome.result);
                let entry = crate::library::call_entry(&r);
                // Written straight, not through a `Map` (the point of the typed route).
                assert!(CanonicalEntry::typed_route(EntryKind::Call, &entry.session, &entry).is_ok());
                same(entry.into_entry(), old_call_entry(&r));
            }
        }
    }
}

#[test]
fn refusals_are_the_old_lines() {
    let error = anyhow::anyhow!("no skill `nope` is installed").context("cannot load `nope`");
    for params in [json!({}), json!({ "blob": "y".repeat(5_000) })] {
        let entry = CallEntry {
            session: "s-2".into(),
            step: 9,
            skill: "nope".into(),
            params: params.clone(),
            status: CallStatus::Refused,
            error: Some(format!("{error:#}")),
            detail: CallDetail::Refused {
                denials: vec![Denial::new(DenialKind::Integrity, format!("call refused before running: {error:#}"))],
            },
        };
        same(entry.into_entry(), old_refused("nope", &params, "s-2", 9, &error));
    }
}

#[test]
fn mcp_lines_are_the_old_ones_for_every_status() {
    let session = "mcp-stdio-probe@1.0-1";
    let long_name = "n".repeat(300);
    let stored = json!({ "id": 7, "stored": true });
    let found = json!({ "hits": [{ "id": 1, "content": "a" }, { "id": 4, "content": "b" }] });
    let cases: Vec<(CallStatus, Option<&str>, Option<&Value>)> = vec![
        (CallStatus::Success, None, Some(&stored)),
        (CallStatus::Success, None, Some(&found)),
        (CallStatus::Success, None, None),
        (CallStatus::Failed, None, None),
        (CallStatus::InvalidParams, None, None),
        (CallStatus::Refused, Some("unknown tool `memory_add`: this server was started with --memory read"), None),
        (CallStatus::Busy, Some("server busy: 1 skill calls are already running"), None),
    ];
    for (transport, client) in [("stdio", ("claude-code", "1.2.3")), ("http", (long_name.as_str(), "v"))] {
        for (status, error, answer) in &cases {
            let params = json!({ "query": "cargo" });
            let stored = answer.and_then(|v| v.get("id")).map(|id| vec![id.clone()]);
            let read = answer
                .and_then(|v| v.get("hits"))
                .and_then(Value::as_array)
                .map(|hits| hits.iter().filter_map(|h| h.get("id").cloned()).collect::<Vec<_>>());
            let entry = CallEntry {
                session: session.into(),
                step: 0,
                skill: "memory_search".into(),
                params: params.clone(),
                status: *status,
                error: error.map(String::from),
                detail: CallDetail::Mcp(McpCall {
                    transport: if transport == "stdio" { "stdio" } else { "http" },
                    client: ClientInfo { name: client.0.into(), version: client.1.into() },
                    memories_stored: stored.clone(),
                    memories_read: read.clone(),
                }),
            };
            // The old writer's `extra`: an error sentence, or the memory tool's audit fields.
            let mut extra = Map::new();
            if let Some(e) = error {
                extra.insert("error".into(), (*e).into());
            }
            if let Some(ids) = stored {
                extra.insert("memories_stored".into(), Value::Array(ids));
            }
            if let Some(ids) = read {
                extra.insert("memories_read".into(), Value::Array(ids));
            }
            let old = old_mcp_line(session, transport, "memory_search", client, &params, status.as_str(), extra);
            assert!(CanonicalEntry::typed_route(EntryKind::Call, &entry.session, &entry).is_ok());
            same(entry.into_entry(), old);
        }
    }
}

#[test]
fn install_lines_are_the_old_ones_for_every_status() {
    for (signed, allowed) in [(true, false), (false, true), (false, false)] {
        let p = provenance(signed, allowed);
        for version in [Some("1.0.0".to_string()), None] {
            let entry = InstallEntry {
                skill: "probe".into(),
                version: version.clone(),
                skill_hash: "d".repeat(64),
                source: "oci://127.0.0.1:5000/skills/probe:1.0".into(),
                oci: p.clone(),
                status: InstallStatus::of(&p),
            };
            let old = old_install("probe", version, &"d".repeat(64), "oci://127.0.0.1:5000/skills/probe:1.0", &p);
            same(entry.into_entry(), old);
        }
    }
}

#[test]
fn step_lines_name_actions_and_statuses_as_before() {
    let step = StepEntry {
        skill: Some("probe".into()),
        prompt_tokens: Some(12),
        ..StepEntry::new("s-3", 2, StepAction::CallSkill, StepStatus::MemoryLimit)
    };
    let m = step.into_entry();
    assert_eq!(
        (&m["kind"], &m["action"], &m["status"]),
        (&json!("step"), &json!("call_skill"), &json!("memory-limit"))
    );
    assert!(!m.contains_key("completion_tokens"));
}
