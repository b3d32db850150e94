//! The shared memory log in PostgreSQL (migration 2): the ordered memory writes of every
//! host, which each host's memory replica replays (see `crate::memory::MemoryLog` and the
//! module doc of `memory/replica.rs` for why the log holds operations, not rows).
//!
//! Writers take the head row `FOR UPDATE` in the write's transaction, so appends are one at
//! a time across hosts; `seq` is the primary key and the head moves in the same
//! transaction, so the log has no gap and no fork. An op is stored as the JSON text its
//! host wrote (`text`, not `jsonb`: byte-exact, and a NUL in a memory is not refused).

use std::sync::Arc;

use anyhow::{Result, anyhow};
use deadpool_postgres::Object;

use super::PgStore;
use crate::memory::{
    Checkpoint, HeldHead, LogHead, LoggedOp, MemoryLog, OpsAfter, Pruned, digest_of_sha256, text_digest,
};

/// Migration 2: the log, and its head (the last seq, its time, and the log's identity).
pub const PG_SCHEMA: &str = "
CREATE TABLE skillhost_memory_log (
    seq bigint PRIMARY KEY CHECK (seq >= 1),
    at_ms bigint NOT NULL CHECK (at_ms >= 0),
    model text,
    op text NOT NULL,
    host text NOT NULL,
    written_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE skillhost_memory_head (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    seq bigint NOT NULL,
    at_ms bigint NOT NULL,
    log_id text NOT NULL
);
INSERT INTO skillhost_memory_head (seq, at_ms, log_id)
    VALUES (0, 0, md5(random()::text || clock_timestamp()::text));
";

/// Migration 5: checkpoints of the log (`skillhost store compact`; see `memory/replica.rs`):
/// the state after op `seq`, as a memory snapshot in JSON, from which new replicas start.
pub const PG_CHECKPOINTS: &str = "
CREATE TABLE skillhost_memory_checkpoints (
    seq bigint PRIMARY KEY CHECK (seq >= 1),
    at_ms bigint NOT NULL CHECK (at_ms >= 0),
    model text,
    snapshot text NOT NULL,
    host text NOT NULL,
    written_at timestamptz NOT NULL DEFAULT now()
);
";

/// How much the log holds, for `skillhost store status`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LogStats {
    /// The last op's seq.
    pub head: u64,
    /// Ops still in the table.
    pub ops: u64,
    /// The newest checkpoint's op and when it was written (RFC 3339), if any.
    pub checkpoint: Option<(u64, String)>,
}

/// The memory log of one PostgreSQL store.
pub struct PgMemoryLog {
    store: PgStore,
    id: String,
}

impl PgMemoryLog {
    pub fn open(store: &PgStore) -> Result<PgMemoryLog> {
        let pg = store.clone();
        let id = store.block_on(async move {
            let client = pg.client().await?;
            let row = client
                .query_one("SELECT log_id FROM skillhost_memory_head", &[])
                .await
                .map_err(|e| pg.error("cannot read the memory log of", &e))?;
            Ok(row.get::<_, String>(0))
        })?;
        Ok(PgMemoryLog { store: store.clone(), id })
    }

    /// The log's identity: made when the tables were, so a database dropped and made again
    /// under the same URL is a new log (and a host's replica of the old one is not reused).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The head, the ops held and the newest checkpoint.
    pub fn stats(&self) -> Result<LogStats> {
        let pg = self.store.clone();
        self.store.block_on(async move {
            let client = pg.client().await?;
            let read = |e: tokio_postgres::Error| pg.error("cannot read the memory log of", &e);
            let row = client
                .query_one(
                    "SELECT (SELECT seq FROM skillhost_memory_head), (SELECT count(*) FROM skillhost_memory_log),
                            c.seq, to_char(c.written_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')
                     FROM (SELECT 1) AS one
                     LEFT JOIN (SELECT seq, written_at FROM skillhost_memory_checkpoints ORDER BY seq DESC LIMIT 1) AS c ON true",
                    &[],
                )
                .await
                .map_err(read)?;
            let checkpoint = row.get::<_, Option<i64>>(2).map(|seq| (seq_of(seq), row.get::<_, String>(3)));
            Ok(LogStats { head: seq_of(row.get(0)), ops: seq_of(row.get(1)), checkpoint })
        })
    }
}

fn seq_of(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn logged(row: &tokio_postgres::Row) -> LoggedOp {
    let text: &str = row.get(3);
    LoggedOp {
        seq: seq_of(row.get(0)),
        at_ms: seq_of(row.get(1)),
        model: row.get(2),
        op: serde_json::from_str(text).unwrap_or(serde_json::Value::Null),
        stored_digest: Some(text_digest(text.as_bytes())),
    }
}

const LOCK_HEAD: &str = "SELECT seq, at_ms FROM skillhost_memory_head FOR UPDATE";
const APPEND: &str = "INSERT INTO skillhost_memory_log (seq, at_ms, model, op, host) VALUES ($1, $2, $3, $4, $5)";
const MOVE_HEAD: &str = "UPDATE skillhost_memory_head SET seq = $1, at_ms = $2";
/// The ops after `$1`, and op `$1` itself without its body: its time and the SHA-256 of its
/// text are checked (`memory::text_digest`; the text is the client's UTF-8 whatever the
/// database's encoding, as `convert_to` gives it).
const READ_AFTER: &str = "SELECT seq, at_ms, model, CASE WHEN seq > $1 THEN op END,
    CASE WHEN seq = $1 THEN sha256(convert_to(op, 'UTF8')) END
    FROM skillhost_memory_log WHERE seq >= $1 ORDER BY seq LIMIT $2";

/// [`READ_AFTER`]'s rows as what follows op `after`, at most `limit` ops.
fn ops_after(after: u64, limit: usize, rows: &[tokio_postgres::Row]) -> OpsAfter {
    let (after_at_ms, after_digest, rest) = match rows.split_first() {
        Some((first, rest)) if seq_of(first.get(0)) == after => {
            let sha256: Option<Vec<u8>> = first.get(4);
            (Some(seq_of(first.get(1))), sha256.map(|d| digest_of_sha256(&d)), rest)
        }
        _ => (None, None, rows),
    };
    OpsAfter { after_at_ms, after_digest, ops: rest.iter().take(limit).map(logged).collect() }
}

impl MemoryLog for PgMemoryLog {
    fn head(&self) -> Result<LogHead> {
        let pg = self.store.clone();
        self.store.block_on(async move {
            let client = pg.client().await?;
            let row = client
                .query_one("SELECT seq, at_ms FROM skillhost_memory_head", &[])
                .await
                .map_err(|e| pg.error("cannot read the memory log of", &e))?;
            Ok(LogHead { seq: seq_of(row.get(0)), at_ms: seq_of(row.get(1)) })
        })
    }

    fn read_after(&self, after: u64, limit: usize) -> Result<OpsAfter> {
        let pg = self.store.clone();
        self.store.block_on(async move {
            let client = pg.client().await?;
            let failed = |e| pg.error("cannot read the memory log of", &e);
            let read = client.prepare_cached(READ_AFTER).await.map_err(failed)?;
            // One row more: op `after` itself.
            let rows = client
                .query(&read, &[&(after as i64), &(limit.min(i64::MAX as usize - 1) as i64 + 1)])
                .await
                .map_err(failed)?;
            Ok(ops_after(after, limit, &rows))
        })
    }

    fn lock_head(&self) -> Result<Box<dyn HeldHead + '_>> {
        let pg = self.store.clone();
        let hold = self.store.url().lock_hold();
        let begin = PgStore::begin_holding(hold);
        let (client, seq, at_ms) = self.store.block_on(async move {
            let client = pg.client().await?;
            // BEGIN and the locking read pipelined: one round trip. The statement is prepared
            // first (once per connection): a query string would send its Parse, wait, and
            // only then the execution, which could land after what follows it here.
            let locked = match client.prepare_cached(LOCK_HEAD).await {
                Ok(lock) => {
                    let (begun, locked) = tokio::join!(client.batch_execute(&begin), client.query_one(&lock, &[]));
                    begun.and(locked)
                }
                Err(e) => Err(e),
            };
            match locked {
                Ok(row) => Ok((client, seq_of(row.get(0)), seq_of(row.get(1)))),
                Err(e) => {
                    // Never hand a connection inside a transaction back to the pool.
                    drop(Object::take(client));
                    Err(pg.error("cannot lock the memory log of", &e))
                }
            }
        })?;
        let client = Arc::new(tokio::sync::Mutex::new(Some(client)));
        let keepalive = self.store.handle().spawn(keep_alive(client.clone(), hold / 4));
        Ok(Box::new(PgHeld { store: self.store.clone(), client, keepalive, seq, at_ms, hold }))
    }

    fn checkpoint(&self) -> Result<Option<Checkpoint>> {
        let pg = self.store.clone();
        let row = self.store.block_on(async move {
            let client = pg.client().await?;
            let row = client
                .query_opt(
                    "SELECT seq, at_ms, model, snapshot FROM skillhost_memory_checkpoints ORDER BY seq DESC LIMIT 1",
                    &[],
                )
                .await
                .map_err(|e| pg.error("cannot read the memory checkpoint of", &e))?;
            Ok(row.map(|row| {
                (seq_of(row.get(0)), seq_of(row.get(1)), row.get::<_, Option<String>>(2), row.get::<_, String>(3))
            }))
        })?;
        // Parsed here, not on the store's one runtime thread: a snapshot of a large memory
        // takes a while, and that thread drives every connection of the process.
        Ok(row.map(|(seq, at_ms, model, snapshot)| Checkpoint {
            seq,
            at_ms,
            model,
            snapshot: serde_json::from_str(&snapshot).unwrap_or(serde_json::Value::Null),
        }))
    }

    fn describe(&self) -> String {
        format!("the PostgreSQL store {}", self.store.url())
    }
}

/// The head row, locked in an open transaction on `client`.
struct PgHeld {
    store: PgStore,
    /// The connection inside the transaction (`None` once committed or given up), shared
    /// with [`keep_alive`].
    client: Arc<tokio::sync::Mutex<Option<Object>>>,
    keepalive: tokio::task::JoinHandle<()>,
    seq: u64,
    at_ms: u64,
    /// The store URL's `lock_hold_secs`.
    hold: std::time::Duration,
}

/// How long [`keep_alive`] keeps a head for a running host: a write that hangs (a bug, a
/// stuck embedding) frees the head after this and the store URL's `lock_hold_secs`. An
/// import that embeds a very large home takes minutes, not this.
const KEEP_ALIVE_FOR: std::time::Duration = std::time::Duration::from_secs(60 * 60);

/// A message of `bytes` may take a while to arrive, and the server's idle clock runs while
/// it reads one: before sending one over 1 MiB (a large import's op, a checkpoint), give the
/// transaction the store URL's `hold` plus a second per 256 KiB (a slow link's pace).
fn time_to_send(hold: std::time::Duration, bytes: usize) -> Option<String> {
    (bytes > 1 << 20).then(|| PgStore::hold_for(hold + std::time::Duration::from_secs((bytes >> 18) as u64)))
}

/// While a head is held, say something on its connection every `every` (a quarter of the
/// store URL's `lock_hold_secs`): the server ends a transaction idle that long
/// ([`PgStore::begin_holding`]), which must free the head of a host that was stopped,
/// frozen or cut off, and must not end the write of one that is only slow (an import or a
/// batch embedding many records, a checkpoint of a large memory). This task runs on the
/// store's runtime, so it stops when the host does.
async fn keep_alive(client: Arc<tokio::sync::Mutex<Option<Object>>>, every: std::time::Duration) {
    let every = every.max(std::time::Duration::from_millis(100));
    let since = std::time::Instant::now();
    loop {
        tokio::time::sleep(every).await;
        if since.elapsed() > KEEP_ALIVE_FOR {
            tracing::warn!(
                "this host has held the memory log's head for {} minutes: no longer keeping it; the server ends its transaction after lock_hold_secs and the other hosts go on",
                KEEP_ALIVE_FOR.as_secs() / 60
            );
            return;
        }
        let held = client.lock().await;
        let Some(c) = held.as_ref() else { return };
        // A failure is the next statement's to report (the connection is gone).
        if c.simple_query("SELECT 1").await.is_err() {
            return;
        }
    }
}

impl PgHeld {
    /// Run `f` on the held connection; an error drops the connection (and so the lock).
    /// `ends` says `f` commits: the connection then goes back to the pool.
    fn with_client<T: Send + 'static>(
        &mut self,
        doing: &'static str,
        ends: bool,
        f: impl for<'c> FnOnce(&'c Object) -> futures_like::BoxFuture<'c, Result<T, tokio_postgres::Error>> + Send + 'static,
    ) -> Result<T> {
        let shared = self.client.clone();
        let result = self.store.block_on(async move {
            let mut held = shared.lock().await;
            let client = held.take().ok_or_else(|| anyhow!("the memory log's lock was already given up"))?;
            let result = f(&client).await;
            match &result {
                Ok(_) if !ends => *held = Some(client),
                // Committed: back to the pool, outside any transaction.
                Ok(_) => drop(client),
                // Never hand a connection inside a transaction back to the pool.
                Err(_) => drop(Object::take(client)),
            }
            Ok(result)
        })?;
        if ends || result.is_err() {
            self.keepalive.abort();
        }
        result.map_err(|e| {
            if e.is_closed() || e.code() == Some(&tokio_postgres::error::SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT) {
                // (`PgStore::error`'s advice for a closed connection, check the server, does
                // not fit the usual cause here.)
                anyhow!(
                    "{doing} the PostgreSQL store {}: the connection holding the memory log's head was closed. The server ends a transaction left idle for the store URL's lock_hold_secs ({} s), which a running host never does (it keeps the connection busy), so this host was stopped, frozen or cut off that long, or the connection was lost (the driver said: {e})",
                    self.store.url(),
                    self.hold.as_secs()
                )
            } else {
                self.store.error(doing, &e)
            }
        })
    }
}

mod futures_like {
    pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;
}

impl HeldHead for PgHeld {
    fn seq(&self) -> u64 {
        self.seq
    }

    fn at_ms(&self) -> u64 {
        self.at_ms
    }

    fn read_after(&mut self, after: u64) -> Result<OpsAfter> {
        let rows = self.with_client("cannot read the memory log of", false, move |c| {
            Box::pin(async move {
                let read = c.prepare_cached(READ_AFTER).await?;
                c.query(&read, &[&(after as i64), &i64::MAX]).await
            })
        })?;
        Ok(ops_after(after, usize::MAX, &rows))
    }

    fn append(mut self: Box<Self>, op: &LoggedOp) -> Result<()> {
        let (seq, at_ms, model) = (op.seq as i64, op.at_ms as i64, op.model.clone());
        // The text the op's digest is of (`LoggedOp::digest`).
        let text = op.text()?;
        let longer = time_to_send(self.hold, text.len());
        let host = self.store.host_id().to_string();
        self.with_client("cannot append to the memory log of", true, move |c| {
            Box::pin(async move {
                if let Some(longer) = &longer {
                    c.batch_execute(longer).await?;
                }
                // Pipelined, one round trip. A refused INSERT aborts the transaction: the
                // UPDATE is refused too and COMMIT only rolls back, so the first error is
                // the answer and nothing was written.
                // Prepared first, as in `lock_head`, so the three go out in this order.
                let insert = c.prepare_cached(APPEND).await?;
                let head = c.prepare_cached(MOVE_HEAD).await?;
                let row: [&(dyn tokio_postgres::types::ToSql + Sync); 5] = [&seq, &at_ms, &model, &text, &host];
                let moved_to: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&seq, &at_ms];
                let (inserted, moved, committed) =
                    tokio::join!(c.execute(&insert, &row), c.execute(&head, &moved_to), c.batch_execute("COMMIT"));
                inserted?;
                moved?;
                committed
            })
        })
    }

    fn write_checkpoint(mut self: Box<Self>, checkpoint: &Checkpoint, retain: std::time::Duration) -> Result<Pruned> {
        self.write_checkpoint_now(checkpoint, retain)
    }
}

impl PgHeld {
    fn write_checkpoint_now(&mut self, checkpoint: &Checkpoint, retain: std::time::Duration) -> Result<Pruned> {
        let (seq, at_ms, model) = (checkpoint.seq as i64, checkpoint.at_ms as i64, checkpoint.model.clone());
        let text = serde_json::to_string(&checkpoint.snapshot)?;
        let longer = time_to_send(self.hold, text.len());
        let host = self.store.host_id().to_string();
        let retain = retain.as_secs_f64();
        let pruned = self.with_client("cannot write the memory checkpoint to", true, move |c| {
            Box::pin(async move {
                if let Some(longer) = &longer {
                    c.batch_execute(longer).await?;
                }
                // Written once per op: a second compaction with no write since keeps the first.
                c.execute(
                    "INSERT INTO skillhost_memory_checkpoints (seq, at_ms, model, snapshot, host)
                     VALUES ($1, $2, $3, $4, $5) ON CONFLICT (seq) DO NOTHING",
                    &[&seq, &at_ms, &model, &text, &host],
                )
                .await?;
                // The newest checkpoint at least `retain` old (now() is the transaction's
                // start, the new row's time too: with no retention, the new one).
                let cut: Option<i64> = c
                    .query_one(
                        "SELECT max(seq) FROM skillhost_memory_checkpoints WHERE written_at <= now() - make_interval(secs => $1)",
                        &[&retain],
                    )
                    .await?
                    .get(0);
                let (mut ops_removed, mut checkpoints_removed) = (0, 0);
                if let Some(cut) = cut {
                    ops_removed = c.execute("DELETE FROM skillhost_memory_log WHERE seq <= $1", &[&cut]).await?;
                    checkpoints_removed =
                        c.execute("DELETE FROM skillhost_memory_checkpoints WHERE seq < $1", &[&cut]).await?;
                }
                let left: i64 = c.query_one("SELECT count(*) FROM skillhost_memory_log", &[]).await?.get(0);
                c.batch_execute("COMMIT").await?;
                Ok(Pruned { ops_removed, checkpoints_removed, ops_left: seq_of(left) })
            })
        })?;
        Ok(pruned)
    }
}

impl Drop for PgHeld {
    fn drop(&mut self) {
        self.keepalive.abort();
        if self.client.try_lock().is_ok_and(|held| held.is_none()) {
            // Committed or given up: nothing to roll back.
            return;
        }
        let shared = self.client.clone();
        let rolled_back = self.store.block_on(async move {
            let Some(client) = shared.lock().await.take() else { return Ok(()) };
            if client.batch_execute("ROLLBACK").await.is_err() {
                drop(Object::take(client));
            }
            Ok(())
        });
        if rolled_back.is_err()
            && let Ok(mut held) = self.client.try_lock()
            && let Some(client) = held.take()
        {
            // Dropped where `block_on` cannot wait (the store's own thread): close the
            // connection rather than pool it inside the transaction, holding the head.
            drop(Object::take(client));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_over_a_mebibyte_gets_time_to_arrive() {
        let hold = std::time::Duration::from_secs(30);
        assert_eq!(time_to_send(hold, 1 << 20), None);
        assert_eq!(
            time_to_send(hold, 300 << 20).as_deref(),
            Some("SET LOCAL idle_in_transaction_session_timeout = 1230000"),
            "30 s and a second per 256 KiB"
        );
    }
}
