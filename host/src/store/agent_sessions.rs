//! Paused agent runs on a PostgreSQL store (migration 4), so that a run paused on one host
//! (a question for the user, Ctrl-C, a damaged audit log) resumes on any other.
//!
//! On the local backend a paused run is one file under `memory/sessions/`
//! (`memory/sessions.rs`). On a shared store those files would sit in a host's memory
//! replica (`cache/memory-replica/`), which is derived state: rebuilt, and with it wiped,
//! whenever the replica is found interrupted, and seen by that host only. So here each run
//! is one row, replaced whole on every save (a run saves after every step), keyed by its
//! session id. The state is kept as the JSON text the agent wrote (`text`, not `jsonb`:
//! `jsonb` refuses a `\u0000` a skill's output may carry, and reorders nothing we need).
//!
//! A run is driven by one process at a time: two hosts resuming the same session at once
//! each save their own steps, and the last save wins, as with two processes on one local
//! home. The audit chain records both.

use anyhow::{Context as _, Result};

use super::PgStore;

/// Migration 4.
pub const PG_SCHEMA: &str = "
CREATE TABLE skillhost_agent_sessions (
    id text PRIMARY KEY,
    state text NOT NULL,
    host text NOT NULL,
    saved_at timestamptz NOT NULL DEFAULT now()
);
";

/// The saved state of session `id`, if one was saved.
pub fn get(store: &PgStore, id: &str) -> Result<Option<serde_json::Value>> {
    let pg = store.clone();
    let id_owned = id.to_string();
    let text: Option<String> = store.block_on(async move {
        let client = pg.client().await?;
        let row = client
            .query_opt("SELECT state FROM skillhost_agent_sessions WHERE id = $1", &[&id_owned])
            .await
            .map_err(|e| pg.error("cannot read a paused agent run from", &e))?;
        Ok(row.map(|r| r.get(0)))
    })?;
    text.map(|t| serde_json::from_str(&t).with_context(|| format!("agent session {id} in the store is corrupt")))
        .transpose()
}

/// Save (replace) the state of session `id`.
pub fn save(store: &PgStore, id: &str, state: &serde_json::Value) -> Result<()> {
    let text = serde_json::to_string(state).context("cannot encode the agent session")?;
    let pg = store.clone();
    let id = id.to_string();
    store.block_on(async move {
        let client = pg.client().await?;
        client
            .execute(
                "INSERT INTO skillhost_agent_sessions (id, state, host) VALUES ($1, $2, $3)
                 ON CONFLICT (id) DO UPDATE SET state = EXCLUDED.state, host = EXCLUDED.host, saved_at = now()",
                &[&id, &text, &pg.host_id()],
            )
            .await
            .map_err(|e| pg.error("cannot save a paused agent run in", &e))?;
        Ok(())
    })
}

/// Every saved session, by id (for `store export`).
pub fn all(store: &PgStore) -> Result<Vec<(String, serde_json::Value)>> {
    let pg = store.clone();
    let rows: Vec<(String, String)> = store.block_on(async move {
        let client = pg.client().await?;
        let rows = client
            .query("SELECT id, state FROM skillhost_agent_sessions ORDER BY id", &[])
            .await
            .map_err(|e| pg.error("cannot read the paused agent runs of", &e))?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    })?;
    rows.into_iter()
        .map(|(id, text)| {
            let state =
                serde_json::from_str(&text).with_context(|| format!("agent session {id} in the store is corrupt"))?;
            Ok((id, state))
        })
        .collect()
}
