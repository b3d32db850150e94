//! Search on a shared PostgreSQL store against the local backend, on the labelled set with
//! the embedding model. A file of its own: it loads 300 memories with embeddings three times
//! and keeps both cores busy for a while, so it must not run beside the timed checks of
//! tests/cluster.rs (a write on one host found on another within a second).

mod common;

use common::postgres::database;

/// Search on a shared store is the local backend's search: the labelled set (tests/memory_eval,
/// with the embedding model) loaded through the memory log on one host and replayed on
/// another ranks every query exactly as the same set loaded into a local store.
#[test]
fn the_labelled_set_ranks_the_same_on_a_shared_store_as_on_a_local_one() {
    use common::memory_eval;
    use skillhost::memory::{EmbedModelChoice, MemoryConfig, Replication, SearchFilter};
    use std::sync::Arc;

    let Some(model) = common::embed_model() else { return };
    let config = || MemoryConfig { embed_model: EmbedModelChoice::File(model.clone()), ..MemoryConfig::default() };
    let dirs = tempfile::tempdir().unwrap();
    let (local, local_ids) = memory_eval::load(&dirs.path().join("local"), config());

    let db = database();
    let store = db.migrated();
    let shared = || {
        let log = skillhost::store::PgMemoryLog::open(&store).unwrap();
        MemoryConfig { replication: Some(Replication(Arc::new(log))), ..config() }
    };
    let (writer, writer_ids) =
        memory_eval::load_memories(&dirs.path().join("writer"), shared(), &memory_eval::memories());
    assert_eq!(writer_ids, local_ids, "the memory log gave other ids than a local store");
    // A second host, started after the writes, replays the whole log.
    let replayer = memory_eval::reopen(&dirs.path().join("replayer"), shared());

    let ranked = |m: &skillhost::memory::Memory, q: &str| -> Vec<(u64, String)> {
        let hits = m.search(q, &SearchFilter::default(), 5).unwrap();
        hits.into_iter().map(|h| (h.record.id, format!("{:.5}", h.score))).collect()
    };
    let queries = memory_eval::queries();
    assert!(queries.len() > 100, "{} queries", queries.len());
    for q in &queries {
        let expected = ranked(&local, &q.query);
        assert_eq!(ranked(&writer, &q.query), expected, "the writing host ranks `{}` differently", q.query);
        assert_eq!(ranked(&replayer, &q.query), expected, "the replaying host ranks `{}` differently", q.query);
    }
    println!("{} queries ranked identically on the local store and two hosts of a shared store", queries.len());
}
