//! `memory`: `memory.search` needs `memory: read` (or write); proposed new memories are
//! stored only with `memory: write`, within the count and size limits, with provenance.
//! Everything refused is a [`Denial`](crate::sandbox::Denial) the model and the audit log can read.

use std::sync::Arc;

use anyhow::Result;
use wasmtime::component::{HasData, Linker};
use wasmtime_wasi::WasiCtxBuilder;

use crate::capabilities::CapabilityKind;
use crate::capabilities::MemoryAccess;
use crate::capabilities::memory::Memory;
use crate::memory::{MemoryKind, MemoryStore, NewRecord, Provenance};
use crate::sandbox::bindings::skillhost::skill::memory::{self as wit_memory, Host};
use crate::sandbox::bindings::skillhost::skill::types::{HostError, MemoryHit, MemoryKind as WitKind, NewMemory};
use crate::sandbox::capability::{CallSetup, Enforce, off_executor};
use crate::sandbox::{CallState, Denial, ProposedMemory};

const MAX_SEARCH_LIMIT: u32 = 50;

/// The memory slice of a call: what `memory.search` sees.
pub(crate) struct MemoryState {
    access: MemoryAccess,
    store: Option<Arc<dyn MemoryStore>>,
    namespace: String,
    /// References a search hands out are counted once per record per session.
    session_id: String,
    denials: Vec<Denial>,
}

/// Links `skillhost:skill/memory` to a call's [`MemoryState`] only.
struct MemoryView;

impl HasData for MemoryView {
    type Data<'a> = &'a mut MemoryState;
}

impl Enforce for Memory {
    type State = MemoryState;
    const GOVERNS: &'static [&'static str] = &["skillhost:skill/memory"];

    fn add_to_linker(linker: &mut Linker<CallState>) -> Result<()> {
        wit_memory::add_to_linker::<CallState, MemoryView>(linker, |s| &mut s.caps.memory)?;
        Ok(())
    }

    fn prepare(
        access: &MemoryAccess,
        call: &CallSetup<'_>,
        _: &mut WasiCtxBuilder,
        _: &mut Vec<Denial>,
    ) -> Result<MemoryState> {
        Ok(MemoryState {
            access: *access,
            store: call.grant.store.clone(),
            namespace: call.grant.namespace.clone(),
            session_id: call.invocation.session_id.clone(),
            denials: Vec::new(),
        })
    }

    fn take_denials(state: &mut MemoryState) -> Vec<Denial> {
        std::mem::take(&mut state.denials)
    }
}

fn kind_from_wit(k: WitKind) -> MemoryKind {
    match k {
        WitKind::Preference => MemoryKind::Preference,
        WitKind::Fact => MemoryKind::Fact,
        WitKind::TaskResult => MemoryKind::TaskResult,
        WitKind::Snapshot => MemoryKind::Snapshot,
        WitKind::Pitfall => MemoryKind::Pitfall,
        WitKind::General => MemoryKind::General,
    }
}

fn kind_to_wit(k: MemoryKind) -> WitKind {
    match k {
        MemoryKind::Preference => WitKind::Preference,
        MemoryKind::Fact => WitKind::Fact,
        MemoryKind::TaskResult => WitKind::TaskResult,
        MemoryKind::Snapshot => WitKind::Snapshot,
        MemoryKind::Pitfall => WitKind::Pitfall,
        MemoryKind::General => WitKind::General,
    }
}

pub(crate) fn proposed_from_wit(m: NewMemory) -> ProposedMemory {
    ProposedMemory { kind: kind_from_wit(m.kind), content: m.content, priority: m.priority.min(5), tags: m.tags }
}

impl Host for MemoryState {
    async fn search(&mut self, query: String, limit: u32) -> wasmtime::Result<Result<Vec<MemoryHit>, HostError>> {
        if self.access == MemoryAccess::None {
            let message =
                "memory.search needs the `memory: read` capability, which this skill does not hold".to_string();
            self.denials.push(Denial { capability: CapabilityKind::Memory.into(), message: message.clone() });
            return Ok(Err(HostError::Denied(message)));
        }
        let limit = limit.clamp(1, MAX_SEARCH_LIMIT) as usize;
        let (namespace, session) = (self.namespace.clone(), self.session_id.clone());
        Ok(off_executor(self.store.as_ref(), move |store| {
            let hits = store
                .search_in_session(&session, &namespace, &query, limit)
                .map_err(|e| HostError::Unavailable(format!("{e:#}")))?;
            Ok(hits
                .into_iter()
                .map(|(r, score)| MemoryHit {
                    id: r.id.to_string(),
                    kind: kind_to_wit(r.kind),
                    content: r.content,
                    priority: r.priority,
                    tags: r.tags,
                    score,
                    created_ms: r.created_ms,
                })
                .collect())
        })
        .await)
    }
}

/// Result of storing a call's proposed memories.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Absorbed {
    pub stored: Vec<u64>,
    pub dropped: Vec<String>,
}

/// The rules every memory written on someone else's behalf passes: a skill's proposals
/// after its call, and an MCP client's `memory_add`. The one place they are decided.
pub struct MemoryAdmission<'a> {
    /// Only `write` stores anything.
    pub access: MemoryAccess,
    /// Memories kept from one call; the rest are dropped.
    pub max_count: u64,
    /// Bytes of content and tags one memory may have.
    pub max_bytes: u64,
    /// Priorities above this belong to the user (`[memory] max_skill_priority`): a memory
    /// proposed above it is stored at it.
    pub max_priority: u8,
    pub namespace: &'a str,
    pub provenance: &'a Provenance,
}

/// Store what was proposed, as far as `rules` admit it; every drop and every lowered
/// priority is a `memory` denial, in the order they happened.
pub fn admit_memories(
    proposed: &[ProposedMemory],
    rules: &MemoryAdmission<'_>,
    store: Option<&dyn MemoryStore>,
) -> (Absorbed, Vec<Denial>) {
    let mut out = Absorbed::default();
    let mut denials = Vec::new();
    if proposed.is_empty() {
        return (out, denials);
    }
    let (MemoryAccess::Write, Some(store)) = (rules.access, store) else {
        out.dropped
            .push(format!("{} proposed memories dropped: the skill does not hold `memory: write`", proposed.len()));
        denials.extend(out.dropped.iter().map(|d| Denial::new(CapabilityKind::Memory, d.clone())));
        return (out, denials);
    };
    let cap = rules.max_priority;
    for (i, m) in proposed.iter().enumerate().filter(|(_, m)| m.priority > cap) {
        denials.push(Denial::new(
            CapabilityKind::Memory,
            format!(
                "memory #{} proposed at priority {}, stored at {cap}: priorities above {cap} belong to the user ([memory] max_skill_priority in the policy)",
                i + 1,
                m.priority
            ),
        ));
    }
    for (i, m) in proposed.iter().enumerate() {
        if i as u64 >= rules.max_count {
            out.dropped.push(format!(
                "{} proposed memories over the limit of {} dropped",
                proposed.len() - i,
                rules.max_count
            ));
            break;
        }
        let size = m.content.len() + m.tags.iter().map(String::len).sum::<usize>();
        if size as u64 > rules.max_bytes {
            out.dropped.push(format!(
                "memory #{} dropped: {size} bytes (content and tags) exceeds the limit of {}; summarize it (counts and key lines)",
                i + 1,
                rules.max_bytes
            ));
            continue;
        }
        if m.content.trim().is_empty() {
            out.dropped.push(format!("memory #{} dropped: empty content", i + 1));
            continue;
        }
        let record = NewRecord {
            namespace: rules.namespace.to_string(),
            kind: m.kind,
            content: m.content.clone(),
            priority: m.priority.min(cap),
            tags: m.tags.clone(),
            provenance: rules.provenance.clone(),
        };
        match store.insert(record) {
            Ok(id) => out.stored.push(id),
            Err(e) => out.dropped.push(format!("memory #{} not stored: {e:#}", i + 1)),
        }
    }
    denials.extend(out.dropped.iter().map(|d| Denial::new(CapabilityKind::Memory, d.clone())));
    (out, denials)
}
