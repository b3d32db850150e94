//! The memory operations, in one table: each line is an operation's wire name and fields,
//! whether it only reads, what it returns, and the [`Store`] call that serves it. From the
//! table come the [`Request`] the owner's socket carries, one typed struct per operation
//! (the [`Op`] a [`Memory`](super::Memory) method hands to `run`), and the owner's dispatch.
//! The process that owns the store runs an op directly; another process sends it to the
//! owner, which runs the same line. Adding an operation is a `Store` method, a line here,
//! and a one-line `Memory` method; the compiler checks that the three agree.
//!
//! The wire format is `{"op": "snake_case_name", ...fields}`, as it was before the table.

use anyhow::Result;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::daily::DailyEntry;
use super::index::DailyHit;
use super::log::CheckpointReport;
use super::records::{ArchiveEntry, MemoryKind, MemoryRecord, NewRecord, SearchFilter, SearchHit};
use super::snapshot::{MemorySnapshot, SnapshotReport};
use super::store::Store;
use super::view::MemoryView;
use super::writes::{CompactReport, ImportReport, MaintainReport};

/// One memory operation, typed: what it carries, what it returns, and how the store runs it.
pub(super) trait Op: Into<Request> + Clone {
    type Output: Serialize + DeserializeOwned;
    /// Safe to send again when the owner went away before answering: it changes nothing
    /// (reference counts aside, which are best effort anyway).
    const READ: bool;
    fn run(self, store: &Store) -> Result<Self::Output>;
}

macro_rules! memory_ops {
    ($(
        $(#[$doc:meta])*
        $access:ident $op:ident { $($field:ident : $fty:ty),* $(,)? } -> $out:ty = |$store:ident| $call:expr;
    )*) => {
        /// One operation of [`Memory`](super::Memory), as a client sends it to the owner.
        #[derive(Debug, Serialize, Deserialize)]
        #[serde(tag = "op", rename_all = "snake_case")]
        pub(super) enum Request {
            $($op($op),)*
        }

        $(
            $(#[$doc])*
            #[derive(Debug, Clone, Serialize, Deserialize)]
            pub(super) struct $op {
                $(pub $field: $fty,)*
            }

            impl From<$op> for Request {
                fn from(op: $op) -> Request {
                    Request::$op(op)
                }
            }

            impl Op for $op {
                type Output = $out;
                const READ: bool = memory_ops!(@read $access);
                #[allow(unused_variables)]
                fn run(self, $store: &Store) -> Result<$out> {
                    let $op { $($field),* } = self;
                    $call
                }
            }
        )*

        impl Request {
            /// Run it on the owner's store; the answer as the client will read it.
            pub fn serve(self, store: &Store) -> Result<Value> {
                Ok(match self {
                    $(Request::$op(op) => serde_json::to_value(op.run(store)?)?,)*
                })
            }

            /// Whether it only reads (see [`Op::READ`]).
            pub fn is_read(&self) -> bool {
                match self {
                    $(Request::$op(_) => <$op as Op>::READ,)*
                }
            }
        }
    };
    (@read read) => { true };
    (@read write) => { false };
}

memory_ops! {
    /// Who owns the store (its pid): the first frame of every connection.
    read Hello {} -> Value = |s| Ok(serde_json::json!({ "pid": std::process::id() }));
    read NowMs {} -> u64 = |s| Ok(s.now_ms());
    read Get { id: u64 } -> Option<MemoryRecord> = |s| s.get(id);
    read AllRecords {} -> Vec<MemoryRecord> = |s| s.all_records();
    read Live { namespace: String } -> Vec<MemoryRecord> = |s| s.live(&namespace);
    read List { namespace: String } -> Vec<MemoryRecord> = |s| s.list(&namespace);
    write Add { record: NewRecord } -> (u64, bool) = |s| s.add_detailed(record);
    write AddBatch { records: Vec<NewRecord> } -> Vec<u64> = |s| s.add_batch(records);
    read Search { query: String, filter: SearchFilter, limit: usize } -> Vec<SearchHit> =
        |s| s.search(&query, &filter, limit);
    read SearchInSession { session: String, namespace: String, query: String, limit: usize } -> Vec<(MemoryRecord, f32)> =
        |s| s.search_in_session(&session, &namespace, &query, limit);
    read SearchDaily { query: String, limit: usize } -> Vec<DailyHit> = |s| s.search_daily(&query, limit);
    read Recall { session: String, namespace: String, query: String } -> Vec<MemoryRecord> =
        |s| s.recall(&session, &namespace, &query);
    read Touch { session: String, ids: Vec<u64> } -> () = |s| s.touch_in_session(&session, &ids);
    read View { namespace: String } -> MemoryView = |s| s.view(&namespace);
    write SetPriority { id: u64, priority: u8 } -> MemoryRecord = |s| s.set_priority(id, priority);
    write PromoteDaily { date: String, line: u32, namespace: String, kind: MemoryKind, priority: u8 } -> u64 =
        |s| s.promote_daily(&date, line, &namespace, kind, priority);
    write Forget { id: u64 } -> u64 = |s| s.forget(id);
    write Restore { archive_id: u64 } -> MemoryRecord = |s| s.restore(archive_id);
    read Archive {} -> Vec<ArchiveEntry> = |s| s.archive();
    write Quarantine { skill: String, hash_prefix: Option<String> } -> Vec<u64> =
        |s| s.quarantine(&skill, hash_prefix.as_deref());
    write Compact { namespace: Option<String> } -> CompactReport = |s| s.compact(namespace.as_deref());
    write Maintain { namespace: String } -> MaintainReport = |s| s.maintain(&namespace);
    write Note { text: String } -> DailyEntry = |s| s.note(&text);
    read Daily { date: Option<String> } -> (String, Vec<DailyEntry>) = |s| s.daily(date.as_deref());
    write Import { input: String, source: String } -> ImportReport = |s| s.import(&input, &source);
    read RebuildIndex {} -> () = |s| s.rebuild_index();
    read SessionGet { session: String, key: String } -> Option<String> = |s| s.session_get(&session, &key);
    write SessionSet { session: String, key: String, value: String } -> () =
        |s| s.session_set(&session, &key, &value);
    read SessionKeys { session: String } -> Vec<String> = |s| s.session_keys(&session);
    /// The whole store, for `skillhost store import/export` (see `snapshot.rs`).
    read TakeSnapshot {} -> MemorySnapshot = |s| s.snapshot();
    /// Load a whole store into an empty one; on a shared log, only as its first op.
    write LoadSnapshot { snapshot: MemorySnapshot } -> SnapshotReport = |s| s.load_snapshot(snapshot);
    /// Write a checkpoint of a replica into its shared log (`skillhost store compact`): the
    /// replica serves it (`replica.rs`), never the store, and it is not logged.
    write Checkpoint { retain_secs: u64 } -> CheckpointReport = |s| s.refuse_checkpoint();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wire_format_is_what_it_was() {
        let get: Request = Get { id: 7 }.into();
        assert_eq!(serde_json::to_string(&get).unwrap(), r#"{"op":"get","id":7}"#);
        let hello: Request = serde_json::from_str(r#"{"op":"hello"}"#).unwrap();
        assert!(matches!(hello, Request::Hello(_)));
        let q: Request =
            serde_json::from_str(r#"{"op":"search_in_session","session":"s","namespace":"n","query":"q","limit":3}"#)
                .unwrap();
        assert!(matches!(q, Request::SearchInSession(SearchInSession { limit: 3, .. })));
        const { assert!(<SearchInSession as Op>::READ && <Touch as Op>::READ) };
        const { assert!(!<SessionSet as Op>::READ && !<Add as Op>::READ, "a write is never sent twice") };
        let set: Request = SessionSet { session: "s".into(), key: "k".into(), value: "v".into() }.into();
        assert_eq!(serde_json::to_value(&set).unwrap()["op"], "session_set");
        assert!(serde_json::from_str::<Request>(r#"{"op":"drop_everything"}"#).is_err());
    }
}
