//! What a memory is: the record, who wrote it, and how it is searched.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MemoryKind {
    Preference,
    Fact,
    TaskResult,
    Snapshot,
    Pitfall,
    General,
}

impl MemoryKind {
    pub const ALL: [MemoryKind; 6] = [
        MemoryKind::Preference,
        MemoryKind::Fact,
        MemoryKind::TaskResult,
        MemoryKind::Snapshot,
        MemoryKind::Pitfall,
        MemoryKind::General,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            MemoryKind::Preference => "preference",
            MemoryKind::Fact => "fact",
            MemoryKind::TaskResult => "task-result",
            MemoryKind::Snapshot => "snapshot",
            MemoryKind::Pitfall => "pitfall",
            MemoryKind::General => "general",
        }
    }

    pub fn parse(s: &str) -> Result<MemoryKind, String> {
        MemoryKind::ALL.into_iter().find(|k| k.as_str() == s).ok_or_else(|| {
            format!("unknown memory kind `{s}`; use one of: {}", MemoryKind::ALL.map(MemoryKind::as_str).join(", "))
        })
    }

    /// Category weight of the importance score: pitfall > project > preference > general.
    pub fn weight(self) -> f64 {
        match self {
            MemoryKind::Pitfall => 1.0,
            MemoryKind::Fact | MemoryKind::TaskResult | MemoryKind::Snapshot => 0.8,
            MemoryKind::Preference => 0.6,
            MemoryKind::General => 0.4,
        }
    }
}

/// Who wrote a memory: the skill, the exact bytes of its version, and when in which session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provenance {
    pub skill: String,
    pub skill_hash: String,
    pub session: String,
    pub step: u32,
}

/// Provenance names that are not skills: the user (`memory add`), promoted daily notes,
/// MCP clients (`mcp:NAME@VERSION`), imports and the host itself. No skill may be
/// installed under one of them, or its memories would pass for the user's.
pub const RESERVED_SOURCES: &[&str] = &["user", "daily-note", "mcp", "import", "skillhost", "host", "agent", "system"];

/// The sources whose records are the user's own.
const USER_SOURCES: &[&str] = &["user", "daily-note"];

/// Is `name` a provenance source rather than a possible skill name?
pub fn is_reserved_source(name: &str) -> bool {
    RESERVED_SOURCES.contains(&name)
}

impl Provenance {
    /// Written by the user rather than a skill or a client.
    pub fn is_user(&self) -> bool {
        USER_SOURCES.contains(&self.skill.as_str())
    }
}

/// Why and when a record was deprecated (quarantine, or by hand).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Deprecation {
    pub at_ms: u64,
    pub reason: String,
}

/// One long-term memory. `provenance` has one entry per write that contributed to it
/// (merging two near-duplicates keeps both).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryRecord {
    pub id: u64,
    pub namespace: String,
    /// The session that first wrote it.
    pub session: String,
    pub kind: MemoryKind,
    pub content: String,
    /// 0-5; 5 is never dropped from the MEMORY.md view, <= 1 expires after a day.
    pub priority: u8,
    /// Importance score when last computed (insert, compaction); see [`MemoryRecord::importance_at`].
    pub importance: f64,
    pub tags: Vec<String>,
    pub created_ms: u64,
    pub updated_ms: u64,
    pub expires_ms: Option<u64>,
    pub deprecated: Option<Deprecation>,
    /// How many times the record was handed to a model or a skill.
    pub references: u32,
    pub provenance: Vec<Provenance>,
    /// When it was last handed to a model or a skill (recall, search): a record in use does
    /// not decay as unused. Absent in records written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub referenced_ms: Option<u64>,
    /// Ids of the records this one replaced as an update (they are in the archive, each
    /// with `superseded_by` naming this one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub supersedes: Vec<u64>,
    /// Set on a record an update replaced: the id of its successor. A restored outdated
    /// record keeps it while the successor is live, and search ranks it after that one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub superseded_by: Option<u64>,
}

const DAY_MS: f64 = 86_400_000.0;
const HALF_LIFE_DAYS: f64 = 30.0;

impl MemoryRecord {
    /// Importance at `now_ms`: category weight x priority x recency (30-day half-life since
    /// the last update or reference) x reference boost. Used to choose what the MEMORY.md view keeps.
    pub fn importance_at(&self, now_ms: u64) -> f64 {
        let last_used = self.updated_ms.max(self.referenced_ms.unwrap_or(0));
        let age_days = now_ms.saturating_sub(last_used) as f64 / DAY_MS;
        let recency = 0.5f64.powf(age_days / HALF_LIFE_DAYS);
        let priority = (1.0 + f64::from(self.priority)) / 6.0;
        let references = 1.0 + (1.0 + f64::from(self.references)).ln();
        self.kind.weight() * priority * recency * references
    }

    pub fn is_live(&self, now_ms: u64) -> bool {
        self.deprecated.is_none() && self.expires_ms.is_none_or(|e| e > now_ms)
    }

    /// Names of the skills that wrote it.
    pub fn skills(&self) -> impl Iterator<Item = &str> {
        self.provenance.iter().map(|p| p.skill.as_str())
    }

    /// Did the user write it (`memory add`, a promoted daily note)? Such a record is never
    /// merged with or reworded by what a skill proposes.
    pub fn is_user_written(&self) -> bool {
        self.provenance.iter().any(Provenance::is_user)
    }
}

/// A record to store; the store assigns id, times, expiry and importance.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NewRecord {
    pub namespace: String,
    pub kind: MemoryKind,
    pub content: String,
    pub priority: u8,
    pub tags: Vec<String>,
    pub provenance: Provenance,
}

/// Something compaction removed, kept so that `memory restore` can undo it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArchiveEntry {
    pub id: u64,
    pub at_ms: u64,
    /// merged, superseded (a merge replaced its wording), outdated (an update replaced
    /// it: see `superseded_by`), expired, deprecated, demoted, forgotten
    pub reason: String,
    /// The record as it was before removal (for a merge: the version that was folded in).
    pub record: MemoryRecord,
    /// For a merge: the record that absorbed it.
    pub merged_into: Option<u64>,
    /// For an outdated record: the update that replaced it (its successor).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub superseded_by: Option<u64>,
}

/// Archive reasons (the `reason` of an [`ArchiveEntry`]).
pub mod archive_reason {
    /// Folded into a record stating the same fact.
    pub const MERGED: &str = "merged";
    /// The wording a merge replaced (same fact).
    pub const SUPERSEDED: &str = "superseded";
    /// Replaced by an update (same subject, new value).
    pub const OUTDATED: &str = "outdated";
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum SearchOrder {
    /// BM25 relevance.
    #[default]
    Relevance,
    /// Relevant records, highest priority first, then most recent.
    PriorityThenRecency,
}

/// Which records a search may return. Empty fields do not filter.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SearchFilter {
    pub namespace: Option<String>,
    pub kinds: Vec<MemoryKind>,
    pub min_priority: u8,
    pub session: Option<String>,
    pub skill: Option<String>,
    pub order: SearchOrder,
}

impl SearchFilter {
    pub fn namespace(ns: &str) -> SearchFilter {
        SearchFilter { namespace: Some(ns.to_string()), ..SearchFilter::default() }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchHit {
    pub record: MemoryRecord,
    pub score: f32,
}
