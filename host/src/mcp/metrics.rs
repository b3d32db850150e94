//! What `skillhost mcp` counts for `GET /metrics` (Prometheus text format 0.0.4).
//!
//! Events are counted where the MCP server already knows them, so nothing below the MCP
//! layer learns about metrics: a skill call's status, duration and denials from its
//! [`RunReport`] (the same values its audit line holds), a memory tool's or a refusal's from
//! the MCP audit line written for it, store operations timed around the calls that make them.
//! Levels (calls running, queued, pool and budget use) are read from the runtime when scraped.
//!
//! Label values are bounded: `skill` is an installed skill or one of the fixed memory tool
//! names (an unknown tool name is refused before anything is counted), `status` one of the
//! audit's [`CallStatus`] names, `capability` one of the [`DenialKind`] names, `op` fixed
//! here. The encoding is the Prometheus project's own `prometheus-client` crate.
//!
//! [`DenialKind`]: crate::sandbox::DenialKind

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

use crate::audit::CallStatus;
use crate::library::RunReport;
use crate::sandbox::RuntimeStats;

/// The `Content-Type` of the exposition.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    skill: String,
    status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SkillLabel {
    skill: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CapabilityLabel {
    capability: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpLabel {
    op: &'static str,
}

/// A store operation timed for `skillhost_store_operation_duration_seconds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreOp {
    MemorySearch,
    MemoryAdd,
    MemoryView,
    /// An MCP audit line (a memory tool's, a refusal's); a skill call's line is written by
    /// the library and counted in its call's duration.
    AuditAppend,
    /// The readiness check's store round trip.
    ReadinessCheck,
}

impl StoreOp {
    fn as_str(self) -> &'static str {
        match self {
            StoreOp::MemorySearch => "memory_search",
            StoreOp::MemoryAdd => "memory_add",
            StoreOp::MemoryView => "memory_view",
            StoreOp::AuditAppend => "audit_append",
            StoreOp::ReadinessCheck => "readiness_check",
        }
    }
}

/// 100 µs to ~100 s by factors of 4: a warm trivial call is tens of µs to a ms, a slow one
/// runs to its wall limit (600 s at most, in the +Inf bucket).
fn call_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.000_1, 4.0, 11))
}

/// 20 µs to ~5 s by factors of 4: an in-process store answers in µs, a remote one in ms.
fn store_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.000_02, 4.0, 10))
}

/// The levels read at scrape time (see [`Metrics::encode`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct Levels {
    /// Tool calls answered or running and not yet audited.
    pub in_flight: usize,
    /// `None` before the first call made the runtime.
    pub runtime: Option<RuntimeStats>,
    pub draining: bool,
}

/// Every metric of one server process.
pub struct Metrics {
    registry: Registry,
    calls: Family<CallLabels, Counter>,
    denials: Family<CapabilityLabel, Counter>,
    call_seconds: Family<SkillLabel, Histogram, fn() -> Histogram>,
    store_seconds: Family<OpLabel, Histogram, fn() -> Histogram>,
    in_flight: Gauge,
    queued: Gauge,
    slots_in_use: Gauge,
    slots: Gauge,
    made_ahead: Gauge,
    memory_reserved: Gauge,
    memory_budget: Gauge,
    draining: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("skillhost");
        let calls = Family::<CallLabels, Counter>::default();
        registry.register("calls", "Tool calls answered, by skill (or memory tool) and audit status", calls.clone());
        let denials = Family::<CapabilityLabel, Counter>::default();
        registry.register(
            "denials",
            "Uses a skill was denied during calls, by capability (the audit's denial kinds)",
            denials.clone(),
        );
        let call_seconds = Family::<SkillLabel, Histogram, fn() -> Histogram>::new_with_constructor(call_buckets);
        registry.register_with_unit(
            "call_duration",
            "Tool call latency from the request's arrival at the handler to its audit line, waits for a slot included",
            Unit::Seconds,
            call_seconds.clone(),
        );
        let store_seconds = Family::<OpLabel, Histogram, fn() -> Histogram>::new_with_constructor(store_buckets);
        registry.register_with_unit(
            "store_operation_duration",
            "Latency of memory and audit store operations made by the MCP server",
            Unit::Seconds,
            store_seconds.clone(),
        );
        let gauge = |registry: &mut Registry, name: &str, help: &str| {
            let g = Gauge::default();
            registry.register(name, help, g.clone());
            g
        };
        let in_flight = gauge(&mut registry, "calls_in_flight", "Tool calls running (or queued) and not yet audited");
        let queued = gauge(&mut registry, "calls_queued", "Skill calls waiting for a call slot of the runtime");
        let slots_in_use =
            gauge(&mut registry, "call_slots_in_use", "Call slots of the instance pool held by running calls");
        let slots =
            gauge(&mut registry, "call_slots", "Call slots of the instance pool (the runtime's concurrent calls)");
        let made_ahead = gauge(
            &mut registry,
            "instances_made_ahead",
            "Instances made ahead of a skill's next call, waiting (each holds a pool slot)",
        );
        let memory_reserved = gauge(
            &mut registry,
            "guest_memory_reserved_bytes",
            "Guest linear memory reserved by running calls from the host budget",
        );
        let memory_budget =
            gauge(&mut registry, "guest_memory_budget_bytes", "The host's guest memory budget (--memory-budget-mb)");
        let draining = gauge(&mut registry, "draining", "1 once a SIGTERM or SIGINT started the drain, else 0");
        Metrics {
            registry,
            calls,
            denials,
            call_seconds,
            store_seconds,
            in_flight,
            queued,
            slots_in_use,
            slots,
            made_ahead,
            memory_reserved,
            memory_budget,
            draining,
        }
    }

    /// A tool call ended with `status` (its audit line's), after `took` when timed.
    pub fn call(&self, skill: &str, status: CallStatus, took: Option<Duration>) {
        self.calls.get_or_create(&CallLabels { skill: skill.to_string(), status: status.as_str() }).inc();
        if let Some(took) = took {
            self.call_seconds.get_or_create(&SkillLabel { skill: skill.to_string() }).observe(took.as_secs_f64());
        }
    }

    /// A skill call that ran through the library: its status, duration and denials.
    pub fn skill_call(&self, report: &RunReport, took: Duration) {
        self.call(&report.skill, report.status(), Some(took));
        for denial in &report.outcome.denials {
            self.denials.get_or_create(&CapabilityLabel { capability: denial.capability.as_str() }).inc();
        }
    }

    pub fn store_op(&self, op: StoreOp, took: Duration) {
        self.store_seconds.get_or_create(&OpLabel { op: op.as_str() }).observe(took.as_secs_f64());
    }

    /// The exposition, with the levels as they are now.
    pub fn encode(&self, levels: Levels) -> String {
        let gauge = |g: &Gauge, v: u64| {
            g.set(i64::try_from(v).unwrap_or(i64::MAX));
        };
        gauge(&self.in_flight, levels.in_flight as u64);
        gauge(&self.draining, u64::from(levels.draining));
        let r = levels.runtime.unwrap_or(RuntimeStats {
            admission: crate::sandbox::AdmissionStats { running: 0, slots: 0, waiting: 0 },
            made_ahead: 0,
            memory_reserved_mb: 0,
            memory_budget_mb: 0,
        });
        gauge(&self.queued, r.admission.waiting as u64);
        gauge(&self.slots_in_use, r.admission.running as u64);
        gauge(&self.slots, r.admission.slots as u64);
        gauge(&self.made_ahead, r.made_ahead as u64);
        gauge(&self.memory_reserved, r.memory_reserved_mb << 20);
        gauge(&self.memory_budget, r.memory_budget_mb << 20);
        let mut out = String::new();
        // Writing to a String cannot fail; an encoder error would be a bug in a label.
        if let Err(e) = prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry) {
            tracing::warn!("cannot encode the metrics: {e}");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_levels_come_out_in_the_prometheus_text_format() {
        let m = Metrics::new();
        m.call("read-log-file", CallStatus::Success, Some(Duration::from_millis(3)));
        m.call("read-log-file", CallStatus::Success, Some(Duration::from_millis(5)));
        m.call("memory_add", CallStatus::Refused, None);
        m.store_op(StoreOp::MemorySearch, Duration::from_micros(300));
        let text = m.encode(Levels { in_flight: 2, runtime: None, draining: true });
        assert!(text.contains("# TYPE skillhost_calls_total counter"), "{text}");
        assert!(text.contains(r#"skillhost_calls_total{skill="read-log-file",status="success"} 2"#), "{text}");
        assert!(text.contains(r#"skillhost_calls_total{skill="memory_add",status="refused"} 1"#), "{text}");
        assert!(text.contains(r#"skillhost_call_duration_seconds_count{skill="read-log-file"} 2"#), "{text}");
        // 3 ms and 5 ms both fall under the 6.4 ms bound, neither under 1.6 ms.
        assert!(
            text.contains(r#"skillhost_call_duration_seconds_bucket{le="0.0064",skill="read-log-file"} 2"#)
                || text.contains(r#"skillhost_call_duration_seconds_bucket{skill="read-log-file",le="0.0064"} 2"#),
            "{text}"
        );
        assert!(text.contains(r#"skillhost_store_operation_duration_seconds_count{op="memory_search"} 1"#), "{text}");
        assert!(text.contains("skillhost_calls_in_flight 2"), "{text}");
        assert!(text.contains("skillhost_draining 1"), "{text}");
        assert!(!text.contains("# EOF"), "the Prometheus text format has no OpenMetrics EOF marker");
    }
}
