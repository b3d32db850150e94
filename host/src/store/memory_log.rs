//! The shared memory log in PostgreSQL (migration 2): the ordered memory writes of every
//! host, which each host's memory replica replays (see `crate::memory::MemoryLog` and the
//! module doc of `memory/replica.rs` for why the log holds operations, not rows).
//!
//! Writers take the head row `FOR UPDATE` in the write's transaction, so appends are one at
//! a time across hosts; `seq` is the primary key and the head moves in the same
//! transaction, so the log has no gap and no fork. An op is stored as the JSON text its
//! host wrote (`text`, not `jsonb`: byte-exact, and a NUL in a memory is not refused).

use anyhow::{Result, anyhow};
use deadpool_postgres::Object;

use super::PgStore;
use crate::memory::{HeldHead, LoggedOp, MemoryLog};

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
}

fn seq_of(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn logged(row: &tokio_postgres::Row) -> LoggedOp {
    LoggedOp {
        seq: seq_of(row.get(0)),
        at_ms: seq_of(row.get(1)),
        model: row.get(2),
        op: serde_json::from_str(row.get::<_, &str>(3)).unwrap_or(serde_json::Value::Null),
    }
}

const READ_AFTER: &str = "SELECT seq, at_ms, model, op FROM skillhost_memory_log WHERE seq > $1 ORDER BY seq LIMIT $2";

impl MemoryLog for PgMemoryLog {
    fn head(&self) -> Result<u64> {
        let pg = self.store.clone();
        self.store.block_on(async move {
            let client = pg.client().await?;
            let row = client
                .query_one("SELECT seq FROM skillhost_memory_head", &[])
                .await
                .map_err(|e| pg.error("cannot read the memory log of", &e))?;
            Ok(seq_of(row.get(0)))
        })
    }

    fn read_after(&self, after: u64, limit: usize) -> Result<Vec<LoggedOp>> {
        let pg = self.store.clone();
        self.store.block_on(async move {
            let client = pg.client().await?;
            let rows = client
                .query(READ_AFTER, &[&(after as i64), &(limit.min(i64::MAX as usize) as i64)])
                .await
                .map_err(|e| pg.error("cannot read the memory log of", &e))?;
            Ok(rows.iter().map(logged).collect())
        })
    }

    fn lock_head(&self) -> Result<Box<dyn HeldHead + '_>> {
        let pg = self.store.clone();
        let (client, seq, at_ms) = self.store.block_on(async move {
            let client = pg.client().await?;
            let locked = async {
                client.batch_execute("BEGIN").await?;
                client.query_one("SELECT seq, at_ms FROM skillhost_memory_head FOR UPDATE", &[]).await
            }
            .await;
            match locked {
                Ok(row) => Ok((client, seq_of(row.get(0)), seq_of(row.get(1)))),
                Err(e) => {
                    // Never hand a connection inside a transaction back to the pool.
                    drop(Object::take(client));
                    Err(pg.error("cannot lock the memory log of", &e))
                }
            }
        })?;
        Ok(Box::new(PgHeld { store: self.store.clone(), client: Some(client), seq, at_ms }))
    }

    fn describe(&self) -> String {
        format!("the PostgreSQL store {}", self.store.url())
    }
}

/// The head row, locked in an open transaction on `client`.
struct PgHeld {
    store: PgStore,
    client: Option<Object>,
    seq: u64,
    at_ms: u64,
}

impl PgHeld {
    /// Run `f` on the held connection; an error drops the connection (and so the lock).
    fn with_client<T: Send + 'static>(
        &mut self,
        doing: &'static str,
        f: impl for<'c> FnOnce(&'c Object) -> futures_like::BoxFuture<'c, Result<T, tokio_postgres::Error>> + Send + 'static,
    ) -> Result<T> {
        let client = self.client.take().ok_or_else(|| anyhow!("the memory log's lock was already given up"))?;
        let pg = self.store.clone();
        let (client, result) = self.store.block_on(async move {
            let result = f(&client).await;
            Ok((client, result))
        })?;
        match result {
            Ok(v) => {
                self.client = Some(client);
                Ok(v)
            }
            Err(e) => {
                drop(Object::take(client));
                Err(pg.error(doing, &e))
            }
        }
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

    fn read_after(&mut self, after: u64) -> Result<Vec<LoggedOp>> {
        let rows = self.with_client("cannot read the memory log of", move |c| {
            Box::pin(async move { c.query(READ_AFTER, &[&(after as i64), &i64::MAX]).await })
        })?;
        Ok(rows.iter().map(logged).collect())
    }

    fn append(mut self: Box<Self>, op: &LoggedOp) -> Result<()> {
        let (seq, at_ms, model) = (op.seq as i64, op.at_ms as i64, op.model.clone());
        let text = serde_json::to_string(&op.op)?;
        let host = self.store.host_id().to_string();
        self.with_client("cannot append to the memory log of", move |c| {
            Box::pin(async move {
                c.execute(
                    "INSERT INTO skillhost_memory_log (seq, at_ms, model, op, host) VALUES ($1, $2, $3, $4, $5)",
                    &[&seq, &at_ms, &model, &text, &host],
                )
                .await?;
                c.execute("UPDATE skillhost_memory_head SET seq = $1, at_ms = $2", &[&seq, &at_ms]).await?;
                c.batch_execute("COMMIT").await
            })
        })?;
        // Committed: the connection goes back to the pool outside any transaction.
        self.client = None;
        Ok(())
    }
}

impl Drop for PgHeld {
    fn drop(&mut self) {
        let Some(client) = self.client.take() else { return };
        let _ = self.store.block_on(async move {
            if client.batch_execute("ROLLBACK").await.is_err() {
                drop(Object::take(client));
            }
            Ok(())
        });
    }
}
