//! The audit chain in PostgreSQL (`--store postgres://...`): one chain for every host of
//! the store, with the same lines, hash rule and verification as the file.
//!
//! Table `skillhost_audit` holds one row per line: `seq`, `prev_hash`, `hash`, the session
//! (for `audit show`), the writing host (`hostname:pid`, outside the hashed line) and `line`,
//! the exact text a file log would hold (without the newline). `skillhost_audit_head` is one
//! row with the `seq` and `hash` of the last line.
//!
//! Appends are serialized in the database: an append's transaction locks the head row
//! (`SELECT ... FOR UPDATE`), chains its lines to it in Rust with the file's code, inserts
//! them and moves the head, then commits (two round trips: BEGIN with the lock, the insert
//! with COMMIT, each pair pipelined, so the lock is held for one round trip and the commit);
//! the next host's transaction waits for the lock and reads the new head.
//!
//! One round trip while no other host writes: a writer that knows the head (it moved it
//! last, and its last locking read found the head where its own commit had left it) chains
//! to that head and sends one statement, its own transaction, that moves the head *only if
//! it is still there* (`UPDATE ... WHERE seq = $known AND hash = $known`) and inserts the
//! lines only if it did. Another host's append in between leaves the head elsewhere: the
//! statement inserts nothing, and the writer takes the locking path, which it keeps while it
//! finds other hosts' lines ahead of its own (under steady contention a guess would cost a
//! round trip per batch).
//!
//! `UNIQUE(seq)` and `UNIQUE(prev_hash)` make a fork impossible even if that were
//! bypassed, and no `seq` comes from a sequence (whose `nextval` order is not commit
//! order). A trigger refuses UPDATE, DELETE and TRUNCATE of the lines: the log is
//! append-only for anyone who does not first disable the trigger (tampering `verify` finds).
//!
//! Group commit: each host (each [`PgChain`], shared by the clones of an [`AuditLog`](super::AuditLog))
//! has one writer task on the store's runtime. Appends queue their entries and wait; the
//! writer takes everything queued (up to [`MAX_BATCH`] lines) into one transaction, so under
//! load one commit (one WAL flush, one hold of the head lock) carries many lines. An append
//! returns only once its transaction committed: an answered call always has its line. A
//! failed transaction fails every append in it (their calls report the error); one that
//! failed before COMMIT was sent wrote nothing and is retried once on a fresh connection
//! (a pooled connection may have died with a server restart).
//!
//! Verification reads the rows in `seq` order inside one repeatable-read transaction (a
//! consistent snapshot while other hosts append), page by page, and feeds the lines to the
//! file log's walker; then it compares the head row with the last line, which the file
//! cannot do: lines cut off the end are found too.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use anyhow::{Result, anyhow};
use serde_json::{Map, Value};
use tokio::sync::{mpsc, oneshot};

use super::canonical::CanonicalEntry;
use super::chain::{chained_line, walk};
use super::{Appended, AuditRead, ChainBreak, Problem, Verified, VerifyError};
use crate::store::PgStore;

/// Migration 1 (see `crate::store::migrations`): the chain's tables.
pub(crate) const PG_SCHEMA: &str = r#"
CREATE TABLE skillhost_audit_head (
    id smallint PRIMARY KEY CHECK (id = 1),
    seq bigint NOT NULL CHECK (seq >= 0),
    hash text NOT NULL
);
INSERT INTO skillhost_audit_head (id, seq, hash)
    VALUES (1, 0, '0000000000000000000000000000000000000000000000000000000000000000');
CREATE TABLE skillhost_audit (
    seq bigint PRIMARY KEY CHECK (seq >= 1),
    prev_hash text NOT NULL UNIQUE,
    hash text NOT NULL UNIQUE,
    session text NOT NULL,
    host text NOT NULL,
    line text NOT NULL,
    written_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX skillhost_audit_session ON skillhost_audit (session, seq);
CREATE FUNCTION skillhost_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'skillhost_audit is append-only: % refused', TG_OP;
END $$;
CREATE TRIGGER skillhost_audit_append_only BEFORE UPDATE OR DELETE ON skillhost_audit
    FOR EACH ROW EXECUTE FUNCTION skillhost_audit_append_only();
CREATE TRIGGER skillhost_audit_no_truncate BEFORE TRUNCATE ON skillhost_audit
    FOR EACH STATEMENT EXECUTE FUNCTION skillhost_audit_append_only();
"#;

/// Most lines one transaction carries.
pub const MAX_BATCH: usize = 512;
/// Rows per page when reading the chain back.
const PAGE_ROWS: i64 = 4096;

const LOCK_HEAD: &str = "SELECT seq, hash FROM skillhost_audit_head WHERE id = 1 FOR UPDATE";
const INSERT_AND_MOVE_HEAD: &str = "WITH lines AS (
    INSERT INTO skillhost_audit (seq, prev_hash, hash, session, host, line)
    SELECT s, p, h, se, $5, l FROM unnest($1::int8[], $2::text[], $3::text[], $4::text[], $6::text[]) AS t(s, p, h, se, l)
)
UPDATE skillhost_audit_head SET seq = $7, hash = $8 WHERE id = 1";
/// [`INSERT_AND_MOVE_HEAD`] without the lock: the head moves only if it is still at
/// (`$9`, `$10`), and the lines go in only if it moved. Under READ COMMITTED an UPDATE that
/// waited for another transaction's lock re-checks its WHERE on the row that transaction
/// left, so a head moved meanwhile matches nothing.
const INSERT_IF_HEAD_AT: &str = "WITH head AS (
    UPDATE skillhost_audit_head SET seq = $7, hash = $8 WHERE id = 1 AND seq = $9 AND hash = $10 RETURNING 1
)
INSERT INTO skillhost_audit (seq, prev_hash, hash, session, host, line)
SELECT s, p, h, se, $5, l FROM unnest($1::int8[], $2::text[], $3::text[], $4::text[], $6::text[]) AS t(s, p, h, se, l)
WHERE EXISTS (SELECT 1 FROM head)";

type Reply = Box<dyn FnOnce(Result<Appended>) + Send>;

struct Pending {
    entry: CanonicalEntry,
    reply: Reply,
}

/// One host's writer of the shared chain (see the module doc).
pub(super) struct PgChain {
    store: PgStore,
    queue: mpsc::UnboundedSender<Pending>,
    /// Transactions committed: fewer than the lines under concurrent appends.
    batches: Arc<AtomicU64>,
    /// The last transaction failed: `check_appendable` asks the database before a call runs.
    failing: Arc<AtomicBool>,
    guesses: Arc<GuessCounts>,
}

/// How the writer's one-round-trip appends fared (for tests and the bench).
#[derive(Debug, Default)]
pub(super) struct GuessCounts {
    /// Batches committed in one round trip on the head the writer knew.
    pub(super) hit: AtomicU64,
    /// Batches whose known head had moved (another host appended): they took the locking path.
    pub(super) missed: AtomicU64,
}

impl std::fmt::Debug for PgChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgChain").field("store", &self.store).finish_non_exhaustive()
    }
}

impl PgChain {
    pub(super) fn new(store: &PgStore) -> PgChain {
        let (queue, rx) = mpsc::unbounded_channel();
        let batches = Arc::new(AtomicU64::new(0));
        let failing = Arc::new(AtomicBool::new(false));
        let guesses = Arc::new(GuessCounts::default());
        // The writer holds the pool, not the store: the store's runtime must not be owned
        // by a task running on it.
        let writer = Writer {
            pool: store.pool().clone(),
            store_name: store.url().to_string(),
            begin: PgStore::begin_holding(store.url().lock_hold()),
            host: store.host_id().to_string(),
            batches: batches.clone(),
            failing: failing.clone(),
            head: KnownHead::default(),
            guesses: guesses.clone(),
        };
        store.handle().spawn(writer.run(rx));
        PgChain { store: store.clone(), queue, batches, failing, guesses }
    }

    /// Where the chain is, for messages.
    pub(super) fn location(&self) -> String {
        format!("{} (table skillhost_audit)", self.store.url())
    }

    pub(super) fn batches(&self) -> u64 {
        self.batches.load(Ordering::Relaxed)
    }

    /// Batches committed in one round trip on the known head, and guesses that missed.
    pub(super) fn guesses(&self) -> (u64, u64) {
        (self.guesses.hit.load(Ordering::Relaxed), self.guesses.missed.load(Ordering::Relaxed))
    }

    /// Queue `entry` (already checked) and wait, blocking, until its transaction committed.
    pub(super) fn append(&self, entry: CanonicalEntry) -> Result<Appended> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.enqueue(entry, Box::new(move |r| drop(tx.send(r))))?;
        rx.recv().map_err(|_| anyhow!("the audit writer of {} stopped", self.location()))?
    }

    /// [`PgChain::append`] for async callers.
    pub(super) async fn append_async(&self, entry: CanonicalEntry) -> Result<Appended> {
        let (tx, rx) = oneshot::channel();
        self.enqueue(entry, Box::new(move |r| drop(tx.send(r))))?;
        rx.await.map_err(|_| anyhow!("the audit writer of {} stopped", self.location()))?
    }

    fn enqueue(&self, entry: CanonicalEntry, reply: Reply) -> Result<()> {
        self.queue
            .send(Pending { entry, reply })
            .map_err(|_| anyhow!("the audit writer of {} stopped", self.location()))
    }

    /// Can a call be audited? After a failed transaction, only if the database answers now.
    pub(super) fn check_appendable(&self) -> Result<()> {
        if !self.failing.load(Ordering::Relaxed) {
            return Ok(());
        }
        self.store.block_on({
            let store = self.store.clone();
            async move {
                let client = store.client().await?;
                client
                    .query_one("SELECT seq FROM skillhost_audit_head WHERE id = 1", &[])
                    .await
                    .map_err(|e| store.error("cannot read the audit head of", &e))?;
                Ok(())
            }
        })
        .map_err(|e| {
            anyhow!("{e:#}\nSkill calls are refused until the audit chain can take their lines again, so that none runs unaudited.")
        })?;
        self.failing.store(false, Ordering::Relaxed);
        Ok(())
    }

    /// Walk the whole chain in one snapshot (see the module doc).
    pub(super) fn verify(&self) -> Result<Verified, VerifyError> {
        let mut lines = self.lines().map_err(VerifyError::Store)?;
        let w = walk(std::io::BufReader::new(&mut lines)).map_err(|e| VerifyError::Store(anyhow!("{e}")))?;
        if let Some(b) = w.broken {
            return Err(VerifyError::Broken(b));
        }
        if let Some(t) = w.torn_tail {
            // Rows never lack their newline; this is a row ending in a stray one.
            return Err(VerifyError::Broken(ChainBreak {
                line: t.line,
                problem: Problem::Unparseable,
                message: format!("line {} is not a complete entry", t.line),
            }));
        }
        let (head_seq, head_hash) = lines.head.clone();
        if head_seq != w.entries || head_hash != w.head {
            let message = if head_seq > w.entries {
                format!(
                    "the chain ends at line {} (hash {}…), but its head row records line {head_seq} (hash {}…): {} line(s) were deleted from the end",
                    w.entries,
                    short(&w.head),
                    short(&head_hash),
                    head_seq - w.entries
                )
            } else {
                format!(
                    "the head row records line {head_seq} (hash {}…), but the chain goes on to line {} (hash {}…): lines were added after the head, or the head row was edited",
                    short(&head_hash),
                    w.entries,
                    short(&w.head)
                )
            };
            return Err(VerifyError::Broken(ChainBreak {
                line: head_seq.min(w.entries) + 1,
                problem: Problem::HeadMismatch,
                message,
            }));
        }
        Ok(Verified { entries: w.entries, head: w.head, torn_tail: None, sealed: None })
    }

    /// Every line that parses, in order (one snapshot), and the numbers of those that do not.
    pub(super) fn read(&self) -> Result<AuditRead> {
        let mut lines = self.lines()?;
        let mut out = AuditRead::default();
        let mut n = 0u64;
        while let Some(line) = lines.next_line()? {
            n += 1;
            match serde_json::from_str::<Value>(&line) {
                Ok(Value::Object(m)) => out.entries.push(m),
                _ => out.unreadable.push(n),
            }
        }
        Ok(out)
    }

    /// The entries of `session`, in order (through the session index).
    pub(super) fn session(&self, session: &str) -> Result<Vec<Map<String, Value>>> {
        let session = session.to_string();
        let lines: Vec<String> = self.store.block_on({
            let store = self.store.clone();
            async move {
                let client = store.client().await?;
                let rows = client
                    .query("SELECT line FROM skillhost_audit WHERE session = $1 ORDER BY seq", &[&session])
                    .await
                    .map_err(|e| store.error("cannot read the audit chain of", &e))?;
                Ok(rows.iter().map(|r| r.get(0)).collect())
            }
        })?;
        Ok(lines.iter().filter_map(|l| serde_json::from_str::<Map<String, Value>>(l).ok()).collect())
    }

    /// The chain's lines in one repeatable-read snapshot, streamed page by page.
    fn lines(&self) -> Result<Lines> {
        let (tx, mut rx) = mpsc::channel::<Result<Vec<String>>>(2);
        let store = self.store.clone();
        let head: (i64, String) = self.store.block_on({
            let store = store.clone();
            async move {
                let (head_tx, head_rx) = oneshot::channel();
                tokio::spawn(async move {
                    let r = produce(&store, head_tx, &tx).await;
                    if let Err(e) = r {
                        let _ = tx.send(Err(e)).await;
                    }
                });
                head_rx.await.map_err(|_| anyhow!("the audit reader stopped"))?
            }
        })?;
        // Before the first page: a failed snapshot sends its error instead of the head.
        let first = self.store.block_on(async move {
            let page = rx.recv().await;
            Ok((page, rx))
        })?;
        Ok(Lines {
            store,
            head: (u64::try_from(head.0).unwrap_or(0), head.1),
            rx: Some(first.1),
            page: match first.0 {
                Some(p) => p?,
                None => Vec::new(),
            },
            at: 0,
            pending: Vec::new(),
            pending_at: 0,
        })
    }
}

impl PgChain {
    /// See [`AuditLog::export_lines`](super::AuditLog::export_lines).
    pub(super) fn export_lines(&self, out: &mut dyn std::io::Write) -> Result<u64> {
        let mut lines = self.lines()?;
        let mut n = 0u64;
        while let Some(line) = lines.next_line()? {
            out.write_all(line.as_bytes())?;
            out.write_all(b"\n")?;
            n += 1;
        }
        Ok(n)
    }
}

/// Rows per INSERT when importing a file's lines.
const IMPORT_ROWS: usize = 2048;

/// Insert `lines` (a verified file's, in order, ending at `head`) into the empty chain of
/// `store`, in one transaction that holds the head row: all or nothing.
pub(super) fn import_lines(store: &PgStore, lines: Vec<String>, head: &str) -> Result<()> {
    let mut rows: (Vec<i64>, Vec<String>, Vec<String>, Vec<String>) = Default::default();
    for (i, line) in lines.iter().enumerate() {
        let entry: Map<String, Value> = serde_json::from_str(line).map_err(|e| anyhow!("audit line {}: {e}", i + 1))?;
        let text = |k: &str| entry.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
        rows.0.push(i as i64 + 1);
        rows.1.push(text("prev"));
        rows.2.push(text("hash"));
        rows.3.push(text("session"));
    }
    let (count, head) = (lines.len() as i64, head.to_string());
    let pg = store.clone();
    store.block_on(async move {
        let mut client = pg.client().await?;
        let failed = |e: tokio_postgres::Error| pg.error("cannot import the audit log into", &e);
        let tx = client.transaction().await.map_err(failed)?;
        let (seq, _): (i64, String) = {
            let row = tx.query_one(LOCK_HEAD, &[]).await.map_err(failed)?;
            (row.get(0), row.get(1))
        };
        if seq != 0 {
            anyhow::bail!(
                "the audit chain of {} already holds {seq} line(s): a home's log is imported only into an empty chain (a new, freshly migrated database), so that its hashes still hold",
                pg.url()
            );
        }
        let insert = tx
            .prepare(
                "INSERT INTO skillhost_audit (seq, prev_hash, hash, session, host, line)
                 SELECT s, p, h, se, $5, l FROM unnest($1::int8[], $2::text[], $3::text[], $4::text[], $6::text[]) AS t(s, p, h, se, l)",
            )
            .await
            .map_err(failed)?;
        let host = format!("{} (import)", pg.host_id());
        for start in (0..lines.len()).step_by(IMPORT_ROWS) {
            let end = (start + IMPORT_ROWS).min(lines.len());
            tx.execute(
                &insert,
                &[&&rows.0[start..end], &&rows.1[start..end], &&rows.2[start..end], &&rows.3[start..end], &host, &&lines[start..end]],
            )
            .await
            .map_err(failed)?;
        }
        tx.execute("UPDATE skillhost_audit_head SET seq = $1, hash = $2 WHERE id = 1", &[&count, &head])
            .await
            .map_err(failed)?;
        tx.commit().await.map_err(failed)?;
        Ok(())
    })
}

/// Open the snapshot, send the head, then send pages until the end (an empty page).
async fn produce(
    store: &PgStore,
    head_tx: oneshot::Sender<Result<(i64, String)>>,
    pages: &mpsc::Sender<Result<Vec<String>>>,
) -> Result<()> {
    let mut client = match store.client().await {
        Ok(c) => c,
        Err(e) => {
            let _ = head_tx.send(Err(e));
            return Ok(());
        }
    };
    let read = |e: tokio_postgres::Error| store.error("cannot read the audit chain of", &e);
    let tx = client
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await;
    let tx = match tx {
        Ok(tx) => tx,
        Err(e) => {
            let _ = head_tx.send(Err(read(e)));
            return Ok(());
        }
    };
    match tx.query_opt("SELECT seq, hash FROM skillhost_audit_head WHERE id = 1", &[]).await {
        Ok(Some(row)) => {
            let _ = head_tx.send(Ok((row.get(0), row.get(1))));
        }
        Ok(None) => {
            let _ = head_tx.send(Err(anyhow!(
                "the audit head row of {} is missing: it was deleted, or the schema is incomplete; restore it from a backup",
                store.url()
            )));
            return Ok(());
        }
        Err(e) => {
            let _ = head_tx.send(Err(read(e)));
            return Ok(());
        }
    }
    let page =
        tx.prepare("SELECT seq, line FROM skillhost_audit WHERE seq > $1 ORDER BY seq LIMIT $2").await.map_err(read)?;
    let mut after = i64::MIN;
    loop {
        let rows = tx.query(&page, &[&after, &PAGE_ROWS]).await.map_err(read)?;
        let Some(last) = rows.last() else { break };
        after = last.get(0);
        let lines: Vec<String> = rows.iter().map(|r| r.get(1)).collect();
        if pages.send(Ok(lines)).await.is_err() {
            return Ok(()); // the reader went away
        }
    }
    let _ = pages.send(Ok(Vec::new())).await;
    let _ = tx.commit().await;
    Ok(())
}

/// The lines of a snapshot as a byte stream (each followed by a newline) for the walker.
struct Lines {
    store: PgStore,
    /// `seq` and `hash` of the head row in the snapshot.
    head: (u64, String),
    rx: Option<mpsc::Receiver<Result<Vec<String>>>>,
    page: Vec<String>,
    at: usize,
    /// Bytes of the line being read, and how far.
    pending: Vec<u8>,
    pending_at: usize,
}

impl Lines {
    /// The next line; `None` at the end.
    fn next_line(&mut self) -> Result<Option<String>> {
        loop {
            if self.at < self.page.len() {
                self.at += 1;
                return Ok(Some(std::mem::take(&mut self.page[self.at - 1])));
            }
            let Some(mut rx) = self.rx.take() else { return Ok(None) };
            let (page, rx) = self.store.block_on(async move {
                let page = rx.recv().await;
                Ok((page, rx))
            })?;
            match page {
                Some(Ok(p)) if !p.is_empty() => {
                    self.page = p;
                    self.at = 0;
                    self.rx = Some(rx);
                }
                Some(Err(e)) => return Err(e),
                // The end page, or the producer stopped.
                Some(Ok(_)) | None => return Ok(None),
            }
        }
    }
}

impl std::io::Read for Lines {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.pending_at == self.pending.len() {
            match self.next_line().map_err(|e| std::io::Error::other(format!("{e:#}")))? {
                Some(line) => {
                    self.pending = line.into_bytes();
                    self.pending.push(b'\n');
                    self.pending_at = 0;
                }
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.pending.len() - self.pending_at);
        buf[..n].copy_from_slice(&self.pending[self.pending_at..self.pending_at + n]);
        self.pending_at += n;
        Ok(n)
    }
}

fn short(hash: &str) -> &str {
    hash.get(..12).unwrap_or(hash)
}

/// The writer task of one host.
struct Writer {
    pool: deadpool_postgres::Pool,
    /// The store's URL as shown (no password), for messages.
    store_name: String,
    /// Opens a transaction holding the head: a host stopped inside it releases the head
    /// after the store URL's `lock_hold_secs` (see `PgUrl::lock_hold`).
    begin: String,
    host: String,
    batches: Arc<AtomicU64>,
    failing: Arc<AtomicBool>,
    head: KnownHead,
    guesses: Arc<GuessCounts>,
}

/// What the writer knows of the head row.
#[derive(Debug, Default)]
struct KnownHead {
    /// Where this writer's last commit left the head (`seq`, `hash`), if it committed.
    left: Option<(i64, String)>,
    /// Guess that the head is still at `left`: set when a locking read found the head where
    /// this writer's previous commit had left it (no other host wrote in between), cleared
    /// when it found other hosts' lines ahead or a guess missed.
    alone: bool,
}

/// A failed transaction: whether it failed before COMMIT was sent (then nothing was
/// written and it may be retried), and why.
struct Failed {
    before_commit: bool,
    error: anyhow::Error,
}

impl Writer {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Pending>) {
        while let Some(first) = rx.recv().await {
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(p) => batch.push(p),
                    Err(_) => break,
                }
            }
            let entries: Vec<CanonicalEntry> = batch.iter_mut().map(|p| std::mem::take(&mut p.entry)).collect();
            let mut result = self.commit(&entries).await;
            if let Err(Failed { before_commit: true, .. }) = &result {
                result = self.commit(&entries).await;
            }
            match result {
                Ok(appended) => {
                    self.failing.store(false, Ordering::Relaxed);
                    self.batches.fetch_add(1, Ordering::Relaxed);
                    for (p, a) in batch.into_iter().zip(appended) {
                        (p.reply)(Ok(a));
                    }
                }
                Err(f) => {
                    self.failing.store(true, Ordering::Relaxed);
                    let message = if f.before_commit {
                        format!("{:#}", f.error)
                    } else {
                        format!(
                            "{:#} (the commit's outcome is unknown: `skillhost audit verify` shows whether the line is there)",
                            f.error
                        )
                    };
                    tracing::warn!(store = %self.store_name, lines = batch.len(), "cannot append to the audit chain: {message}");
                    for p in batch {
                        (p.reply)(Err(anyhow!("{message}")));
                    }
                }
            }
        }
    }

    /// One transaction: chain `entries` to the head, insert them, move the head. On the
    /// head this writer knows when it guesses no other host wrote, else under the head's lock.
    async fn commit(&mut self, entries: &[CanonicalEntry]) -> Result<Vec<Appended>, Failed> {
        let client = self.pool.get().await.map_err(|e| Failed {
            before_commit: true,
            error: anyhow!("cannot connect to the PostgreSQL store {}: {e}", self.store_name),
        })?;
        let mut result = Ok(None);
        if let (true, Some(head)) = (self.head.alone, self.head.left.clone()) {
            result = self.commit_on_known(&client, entries, head).await;
            match &result {
                Ok(Some(_)) => self.guesses.hit.fetch_add(1, Ordering::Relaxed),
                _ => self.guesses.missed.fetch_add(1, Ordering::Relaxed),
            };
        }
        let result = match result {
            Ok(Some(appended)) => Ok(appended),
            Ok(None) => self.commit_on(&client, entries).await,
            Err(e) => Err(e),
        };
        match &result {
            Ok(appended) => {
                self.head.left = appended.last().map(|last| (last.seq as i64, last.hash.clone()));
            }
            Err(_) => {
                self.head = KnownHead::default();
                // It may be inside an open or aborted transaction: never hand it to another user.
                drop(deadpool_postgres::Object::take(client));
            }
        }
        result
    }

    /// The one-round-trip append on the head at `known`: `None` (nothing written) if the
    /// head has moved since.
    async fn commit_on_known(
        &mut self,
        client: &deadpool_postgres::ClientWrapper,
        entries: &[CanonicalEntry],
        known: (i64, String),
    ) -> Result<Option<Vec<Appended>>, Failed> {
        let insert = client.prepare_cached(INSERT_IF_HEAD_AT).await.map_err(|e| before(self.db(&e)))?;
        let rows = Rows::chain(entries, known.0, &known.1);
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 10] = [
            &rows.seqs,
            &rows.prevs,
            &rows.hashes,
            &rows.sessions,
            &self.host,
            &rows.lines,
            &rows.seq,
            &rows.head,
            &known.0,
            &known.1,
        ];
        // One statement in its own (implicit) transaction: committed when the server says
        // it is ready again, which `execute` waits for. As in `commit_on`: a refused
        // statement wrote nothing; a lost connection leaves the outcome unknown.
        let inserted = client
            .execute(&insert, &params)
            .await
            .map_err(|e| Failed { before_commit: e.as_db_error().is_some(), error: self.db(&e) })?;
        if inserted == 0 {
            // Another host appended: the transaction committed nothing.
            self.head.alone = false;
            return Ok(None);
        }
        if inserted != entries.len() as u64 {
            return Err(Failed {
                before_commit: false,
                error: anyhow!(
                    "the audit chain of {} took {inserted} of {} lines in one statement: check the table's triggers and rules",
                    self.store_name,
                    entries.len()
                ),
            });
        }
        Ok(Some(rows.appended))
    }

    fn db(&self, e: &tokio_postgres::Error) -> anyhow::Error {
        let detail = e.as_db_error().map_or_else(|| e.to_string(), |d| d.message().to_string());
        anyhow!("cannot append to the audit chain of {}: {detail}", self.store_name)
    }

    /// The transaction in two round trips, so that the head stays locked for one round trip
    /// and the commit (the other hosts wait for that lock): BEGIN with the locking read,
    /// then the insert with COMMIT, each pair pipelined on the connection.
    async fn commit_on(
        &mut self,
        client: &deadpool_postgres::ClientWrapper,
        entries: &[CanonicalEntry],
    ) -> Result<Vec<Appended>, Failed> {
        let lock = client.prepare_cached(LOCK_HEAD).await.map_err(|e| before(self.db(&e)))?;
        let insert = client.prepare_cached(INSERT_AND_MOVE_HEAD).await.map_err(|e| before(self.db(&e)))?;
        let (begun, head) = tokio::join!(client.batch_execute(&self.begin), client.query_opt(&lock, &[]));
        begun.map_err(|e| before(self.db(&e)))?;
        let head = head.map_err(|e| before(self.db(&e)))?.ok_or_else(|| {
            before(anyhow!(
                "the audit head row of {} is missing: the store was not migrated (`skillhost store migrate`) or the row was deleted",
                self.store_name
            ))
        })?;
        let (seq, prev): (i64, String) = (head.get(0), head.get(1));
        // Nobody wrote since this writer's last commit: guess so next time.
        self.head.alone = self.head.left.as_ref().is_some_and(|(s, h)| *s == seq && *h == prev);
        let rows = Rows::chain(entries, seq, &prev);
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 8] =
            [&rows.seqs, &rows.prevs, &rows.hashes, &rows.sessions, &self.host, &rows.lines, &rows.seq, &rows.head];
        let (inserted, committed) = tokio::join!(client.execute(&insert, &params), client.batch_execute("COMMIT"));
        // The server refused the insert: the transaction was aborted and COMMIT only ended
        // it, nothing was written. Any other failure (the connection lost) leaves the
        // outcome unknown, as a failed COMMIT does: no retry then, or a line could be twice.
        inserted.map_err(|e| Failed { before_commit: e.as_db_error().is_some(), error: self.db(&e) })?;
        committed.map_err(|e| Failed { before_commit: false, error: self.db(&e) })?;
        Ok(rows.appended)
    }
}

fn before(error: anyhow::Error) -> Failed {
    Failed { before_commit: true, error }
}

/// A batch chained to a head: the columns of its rows, where it leaves the head, and what
/// each append is told.
struct Rows {
    seqs: Vec<i64>,
    prevs: Vec<String>,
    hashes: Vec<String>,
    sessions: Vec<String>,
    lines: Vec<String>,
    /// The head after the batch.
    seq: i64,
    head: String,
    appended: Vec<Appended>,
}

impl Rows {
    fn chain(entries: &[CanonicalEntry], mut seq: i64, prev: &str) -> Rows {
        let n = entries.len();
        let mut prev = prev.to_string();
        let mut rows = Rows {
            seqs: Vec::with_capacity(n),
            prevs: Vec::with_capacity(n),
            hashes: Vec::with_capacity(n),
            sessions: Vec::with_capacity(n),
            lines: Vec::with_capacity(n),
            seq,
            head: String::new(),
            appended: Vec::with_capacity(n),
        };
        for entry in entries {
            seq += 1;
            let session = entry.session().unwrap_or_default();
            let (mut line, hash) = chained_line(entry.clone(), seq as u64, &prev);
            line.pop(); // the newline
            rows.appended.push(Appended { seq: seq as u64, hash: hash.clone(), torn_tail_bytes: 0 });
            rows.seqs.push(seq);
            rows.prevs.push(std::mem::replace(&mut prev, hash.clone()));
            rows.hashes.push(hash);
            rows.sessions.push(session);
            rows.lines.push(line);
        }
        rows.seq = seq;
        rows.head = prev;
        rows
    }
}

/// Refusals that have no meaning for a database chain.
pub(super) fn no_seal(location: &str) -> anyhow::Error {
    anyhow!(
        "the audit chain in {location} needs no seal: appends chain to the head row, never to the last line, so a damaged row does not stop auditing. `skillhost audit verify` names it; the row stays as evidence"
    )
}
