//! Limits: what a skill asks for (SKILL.md `limits:`), what the policy caps, and what is
//! in force for one call. Not a capability: limits take rights away, they grant nothing.

use serde::{Deserialize, Serialize};

/// Limits a skill asks for in SKILL.md (all optional); the policy caps them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_time_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_time_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_kb: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_new_memories: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_memory_bytes: Option<u64>,
    /// The wasm stack (KiB): deep recursion in an interpreter-based guest (JS, Python)
    /// needs more than the default. Rounded down to a power of two from 512 to 8192.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack_kb: Option<u64>,
    /// Bytes one call may write through its read-write mounts (MiB): file contents, growth
    /// by set-size or by writing past the end, and a block for each new file or directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_write_mb: Option<u64>,
    /// The size of an agent session's working memory after a `session.set` (KiB, keys and
    /// values of every skill in the session).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_kb: Option<u64>,
    /// Log text one call may write (KiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_kb: Option<u64>,
}

/// The limits in force for one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Limits {
    pub wall_time_ms: u64,
    pub cpu_time_ms: u64,
    pub memory_mb: u64,
    pub output_kb: u64,
    pub max_new_memories: u64,
    pub max_memory_bytes: u64,
    pub stack_kb: u64,
    pub disk_write_mb: u64,
    pub session_kb: u64,
    pub log_kb: u64,
}

impl Limits {
    /// Used when neither the skill nor the policy says otherwise.
    pub const DEFAULT: Limits = Limits {
        wall_time_ms: 10_000,
        cpu_time_ms: 5_000,
        memory_mb: 64,
        output_kb: 64,
        max_new_memories: 8,
        max_memory_bytes: 2_048,
        stack_kb: 512,
        // As much as the default memory limit lets a skill hold: one output of its own size.
        disk_write_mb: 64,
        // Working memory handed between steps (summaries, snapshots), not a file store.
        session_kb: 1_024,
        // 1,000 lines of 256 bytes: a chatty skill's progress, not a dump.
        log_kb: 256,
    };
    /// No policy can raise a limit above these.
    pub const CEILING: Limits = Limits {
        wall_time_ms: 600_000,
        cpu_time_ms: 300_000,
        memory_mb: 1_024,
        output_kb: 4_096,
        max_new_memories: 100,
        max_memory_bytes: 16_384,
        stack_kb: 8_192,
        disk_write_mb: 4_096,
        // 256 keys of 256 KiB, the most a session could hold before it was a limit.
        session_kb: 65_536,
        // 1,000 lines of 4 KiB, the most a call could log before it was a limit.
        log_kb: 4_096,
    };

    /// The wasm stack sizes the sandbox runs (KiB): one engine per size, so a resolved
    /// `stack_kb` is rounded down to one of these.
    pub const STACK_TIERS_KB: [u64; 5] = [512, 1_024, 2_048, 4_096, 8_192];

    /// Effective limits: the skill's request (or the default), capped by the policy (the
    /// default where the policy says nothing: asking for more than the default is a right
    /// the user grants, like a capability) and by the ceiling.
    pub fn resolve(request: &LimitsRequest, cap: &LimitsRequest) -> Limits {
        let pick = |req: Option<u64>, cap: Option<u64>, default: u64, ceiling: u64| {
            req.unwrap_or(default).min(cap.unwrap_or(default)).min(ceiling)
        };
        let (d, c) = (Limits::DEFAULT, Limits::CEILING);
        Limits {
            wall_time_ms: pick(request.wall_time_ms, cap.wall_time_ms, d.wall_time_ms, c.wall_time_ms),
            cpu_time_ms: pick(request.cpu_time_ms, cap.cpu_time_ms, d.cpu_time_ms, c.cpu_time_ms),
            memory_mb: pick(request.memory_mb, cap.memory_mb, d.memory_mb, c.memory_mb),
            output_kb: pick(request.output_kb, cap.output_kb, d.output_kb, c.output_kb),
            max_new_memories: pick(
                request.max_new_memories,
                cap.max_new_memories,
                d.max_new_memories,
                c.max_new_memories,
            ),
            max_memory_bytes: pick(
                request.max_memory_bytes,
                cap.max_memory_bytes,
                d.max_memory_bytes,
                c.max_memory_bytes,
            ),
            stack_kb: Limits::stack_tier_kb(pick(request.stack_kb, cap.stack_kb, d.stack_kb, c.stack_kb)),
            disk_write_mb: pick(request.disk_write_mb, cap.disk_write_mb, d.disk_write_mb, c.disk_write_mb),
            session_kb: pick(request.session_kb, cap.session_kb, d.session_kb, c.session_kb),
            log_kb: pick(request.log_kb, cap.log_kb, d.log_kb, c.log_kb),
        }
    }

    /// The largest stack tier not above `kb` (the smallest tier when `kb` is below it).
    pub fn stack_tier_kb(kb: u64) -> u64 {
        Limits::STACK_TIERS_KB.iter().copied().rfind(|t| *t <= kb).unwrap_or(Limits::STACK_TIERS_KB[0])
    }
}

impl LimitsRequest {
    pub fn validate(&self) -> Result<(), (String, String)> {
        let fields = [
            ("wall_time_ms", self.wall_time_ms),
            ("cpu_time_ms", self.cpu_time_ms),
            ("memory_mb", self.memory_mb),
            ("output_kb", self.output_kb),
        ];
        for (name, v) in fields {
            if v == Some(0) {
                return Err((name.into(), "must be greater than 0".into()));
            }
        }
        let (low, high) = (Limits::DEFAULT.stack_kb, Limits::CEILING.stack_kb);
        if let Some(kb) = self.stack_kb
            && !(low..=high).contains(&kb)
        {
            return Err(("stack_kb".into(), format!("must be between {low} and {high} (KiB), not {kb}")));
        }
        Ok(())
    }

    /// Granted limits (`self`) bounded by what the skill `declared`: each field the grant
    /// sets, lowered to the declared value; a field it leaves unset stays unset, so the
    /// policy's `[limits]` keep capping it (an unset field read as the default would
    /// override a lower global cap for any skill that merely asks for more).
    pub fn granted_within(&self, declared: &LimitsRequest) -> LimitsRequest {
        let f = |granted: Option<u64>, asked: Option<u64>| granted.map(|g| asked.map_or(g, |a| g.min(a)));
        LimitsRequest {
            wall_time_ms: f(self.wall_time_ms, declared.wall_time_ms),
            cpu_time_ms: f(self.cpu_time_ms, declared.cpu_time_ms),
            memory_mb: f(self.memory_mb, declared.memory_mb),
            output_kb: f(self.output_kb, declared.output_kb),
            max_new_memories: f(self.max_new_memories, declared.max_new_memories),
            max_memory_bytes: f(self.max_memory_bytes, declared.max_memory_bytes),
            stack_kb: f(self.stack_kb, declared.stack_kb),
            disk_write_mb: f(self.disk_write_mb, declared.disk_write_mb),
            session_kb: f(self.session_kb, declared.session_kb),
            log_kb: f(self.log_kb, declared.log_kb),
        }
    }

    /// Per-field minimum of `self` (unset meaning the default) and `lower` where it is set.
    pub fn lowered_by(&self, lower: &LimitsRequest) -> LimitsRequest {
        let d = Limits::DEFAULT;
        let f = |mine: Option<u64>, theirs: Option<u64>, default: u64| match theirs {
            Some(t) => Some(mine.unwrap_or(default).min(t)),
            None => mine,
        };
        LimitsRequest {
            wall_time_ms: f(self.wall_time_ms, lower.wall_time_ms, d.wall_time_ms),
            cpu_time_ms: f(self.cpu_time_ms, lower.cpu_time_ms, d.cpu_time_ms),
            memory_mb: f(self.memory_mb, lower.memory_mb, d.memory_mb),
            output_kb: f(self.output_kb, lower.output_kb, d.output_kb),
            max_new_memories: f(self.max_new_memories, lower.max_new_memories, d.max_new_memories),
            max_memory_bytes: f(self.max_memory_bytes, lower.max_memory_bytes, d.max_memory_bytes),
            stack_kb: f(self.stack_kb, lower.stack_kb, d.stack_kb),
            disk_write_mb: f(self.disk_write_mb, lower.disk_write_mb, d.disk_write_mb),
            session_kb: f(self.session_kb, lower.session_kb, d.session_kb),
            log_kb: f(self.log_kb, lower.log_kb, d.log_kb),
        }
    }

    /// The fields where `self` asks for more than the default, for consent.
    pub fn beyond_default(&self) -> Vec<String> {
        let d = Limits::DEFAULT;
        [
            ("wall_time_ms", self.wall_time_ms, d.wall_time_ms),
            ("cpu_time_ms", self.cpu_time_ms, d.cpu_time_ms),
            ("memory_mb", self.memory_mb, d.memory_mb),
            ("output_kb", self.output_kb, d.output_kb),
            ("max_new_memories", self.max_new_memories, d.max_new_memories),
            ("max_memory_bytes", self.max_memory_bytes, d.max_memory_bytes),
            ("stack_kb", self.stack_kb, d.stack_kb),
            ("disk_write_mb", self.disk_write_mb, d.disk_write_mb),
            ("session_kb", self.session_kb, d.session_kb),
            ("log_kb", self.log_kb, d.log_kb),
        ]
        .into_iter()
        .filter_map(|(name, v, default)| {
            v.filter(|v| *v > default).map(|v| format!("limit {name} {v} (default {default})"))
        })
        .collect()
    }

    /// The fields that are set, as `limit NAME VALUE`.
    pub fn describe(&self) -> Vec<String> {
        [
            ("wall_time_ms", self.wall_time_ms),
            ("cpu_time_ms", self.cpu_time_ms),
            ("memory_mb", self.memory_mb),
            ("output_kb", self.output_kb),
            ("max_new_memories", self.max_new_memories),
            ("max_memory_bytes", self.max_memory_bytes),
            ("stack_kb", self.stack_kb),
            ("disk_write_mb", self.disk_write_mb),
            ("session_kb", self.session_kb),
            ("log_kb", self.log_kb),
        ]
        .into_iter()
        .filter_map(|(name, v)| v.map(|v| format!("limit {name} {v}")))
        .collect()
    }

    /// Per-field: `self` where set, else `fallback`.
    pub fn or(&self, fallback: &LimitsRequest) -> LimitsRequest {
        LimitsRequest {
            wall_time_ms: self.wall_time_ms.or(fallback.wall_time_ms),
            cpu_time_ms: self.cpu_time_ms.or(fallback.cpu_time_ms),
            memory_mb: self.memory_mb.or(fallback.memory_mb),
            output_kb: self.output_kb.or(fallback.output_kb),
            max_new_memories: self.max_new_memories.or(fallback.max_new_memories),
            max_memory_bytes: self.max_memory_bytes.or(fallback.max_memory_bytes),
            stack_kb: self.stack_kb.or(fallback.stack_kb),
            disk_write_mb: self.disk_write_mb.or(fallback.disk_write_mb),
            session_kb: self.session_kb.or(fallback.session_kb),
            log_kb: self.log_kb.or(fallback.log_kb),
        }
    }
}
