//! The schema of the shared database, versioned: [`MIGRATIONS`] is the numbered list of SQL
//! this build knows, and the table `skillhost_schema` records which of them a database has
//! (one row per applied migration). `skillhost store migrate` applies the pending ones;
//! every host checks at start that the database is exactly at the version it knows, because
//! a host running on a newer schema could write what newer hosts misread, and one on an
//! older schema would fail on its first query.
//!
//! Each migration runs in its own transaction (PostgreSQL's DDL is transactional: a failed
//! migration leaves nothing half-done) that first takes a transaction-scoped advisory lock,
//! so hosts migrating at once apply each migration once, one after the other; the second
//! finds it recorded and skips it.
//!
//! Adding a migration: append `Migration { version: N + 1, name, sql }` to [`MIGRATIONS`]
//! (versions are contiguous from 1; a unit test checks), keeping the SQL next to the feature
//! that owns the tables (migration 1: `PG_SCHEMA` in `audit/postgres.rs`). Never edit a
//! migration that has shipped: databases that applied it will not apply it again.

use anyhow::{Result, bail};
use serde::Serialize;

use super::PgStore;

/// One step of the schema.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    /// 1, 2, 3... in order.
    pub version: i32,
    /// What it adds, for `skillhost store status`.
    pub name: &'static str,
    /// Statements run in one transaction (simple query protocol: several statements allowed).
    pub sql: &'static str,
}

/// Every migration this build knows, in order.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "the audit chain (skillhost_audit, skillhost_audit_head)",
        sql: crate::audit::PG_SCHEMA,
    },
    Migration {
        version: 2,
        name: "the memory log (skillhost_memory_log, skillhost_memory_head)",
        sql: super::memory_log::PG_SCHEMA,
    },
    Migration {
        version: 3,
        name: "the shared home: skills, grants, trust, secrets (skillhost_home_units, skillhost_home_head)",
        sql: super::home_sync::PG_SCHEMA,
    },
    Migration {
        version: 4,
        name: "paused agent runs (skillhost_agent_sessions)",
        sql: super::agent_sessions::PG_SCHEMA,
    },
    Migration {
        version: 5,
        name: "checkpoints of the memory log (skillhost_memory_checkpoints)",
        sql: super::memory_log::PG_CHECKPOINTS,
    },
];

/// `pg_advisory_xact_lock` key serializing migrations: "skillhos" in ASCII.
const MIGRATION_LOCK: i64 = 0x736b_696c_6c68_6f73;

const SCHEMA_TABLE: &str = "CREATE TABLE IF NOT EXISTS skillhost_schema (
    version integer PRIMARY KEY CHECK (version >= 1),
    name text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    applied_by text NOT NULL
)";

/// The newest schema version this build knows.
pub fn known_version() -> i32 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// A database's schema against this build's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SchemaState {
    /// At the version this build knows.
    Current,
    /// Older (0: never migrated): `skillhost store migrate` brings it up.
    Behind,
    /// Newer than this build knows: this host must be upgraded.
    Ahead,
}

/// `skillhost store status`.
#[derive(Debug, Clone, Serialize)]
pub struct SchemaStatus {
    /// The database's version (0 when it has no `skillhost_schema` table or no row).
    pub version: i32,
    /// The newest version this build knows.
    pub known: i32,
    pub state: SchemaState,
    /// Applied migrations as recorded: version, name, when, by which host.
    pub applied: Vec<AppliedMigration>,
    /// Versions and names this build would apply.
    pub pending: Vec<(i32, String)>,
}

#[derive(Debug, Clone, Serialize)]
pub struct AppliedMigration {
    pub version: i32,
    pub name: String,
    pub applied_at: String,
    pub applied_by: String,
}

impl SchemaStatus {
    fn new(version: i32, applied: Vec<AppliedMigration>) -> SchemaStatus {
        let known = known_version();
        let state = match version.cmp(&known) {
            std::cmp::Ordering::Equal => SchemaState::Current,
            std::cmp::Ordering::Less => SchemaState::Behind,
            std::cmp::Ordering::Greater => SchemaState::Ahead,
        };
        let pending =
            MIGRATIONS.iter().filter(|m| m.version > version).map(|m| (m.version, m.name.to_string())).collect();
        SchemaStatus { version, known, state, applied, pending }
    }

    /// Ok when a host of this build may run on it; else what is wrong and what to do.
    pub fn check(&self, store: &PgStore) -> Result<()> {
        let url = store.url();
        match self.state {
            SchemaState::Current => Ok(()),
            SchemaState::Behind if self.version == 0 => bail!(
                "the PostgreSQL store {url} has no skillhost schema yet (this skillhost needs version {}): run `skillhost store migrate --store {url}` once, then start the hosts",
                self.known
            ),
            SchemaState::Behind => bail!(
                "the PostgreSQL store {url} is at schema version {}, older than the version {} this skillhost needs: run `skillhost store migrate --store {url}`",
                self.version,
                self.known
            ),
            SchemaState::Ahead => bail!(
                "the PostgreSQL store {url} is at schema version {}, newer than the version {} this skillhost knows: a newer skillhost migrated it. Upgrade skillhost on this host; it will not run on a schema it does not know",
                self.version,
                self.known
            ),
        }
    }
}

impl PgStore {
    /// The database's schema version and what was applied when.
    pub fn schema_status(&self) -> Result<SchemaStatus> {
        self.block_on({
            let store = self.clone();
            async move {
                let client = store.client().await?;
                let exists: bool = client
                    .query_one("SELECT to_regclass('skillhost_schema') IS NOT NULL", &[])
                    .await
                    .map_err(|e| store.error("cannot read the schema version of", &e))?
                    .get(0);
                if !exists {
                    return Ok(SchemaStatus::new(0, Vec::new()));
                }
                let rows = client
                    .query(
                        "SELECT version, name, to_char(applied_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), applied_by FROM skillhost_schema ORDER BY version",
                        &[],
                    )
                    .await
                    .map_err(|e| store.error("cannot read the schema version of", &e))?;
                let applied: Vec<AppliedMigration> = rows
                    .iter()
                    .map(|r| AppliedMigration {
                        version: r.get(0),
                        name: r.get(1),
                        applied_at: r.get(2),
                        applied_by: r.get(3),
                    })
                    .collect();
                let version = applied.iter().map(|m| m.version).max().unwrap_or(0);
                Ok(SchemaStatus::new(version, applied))
            }
        })
    }

    /// Refuse a database whose schema is not the one this build knows (see
    /// [`SchemaStatus::check`]).
    pub fn check_schema(&self) -> Result<()> {
        self.schema_status()?.check(self)
    }

    /// Apply the pending migrations, each in its own transaction under the migration lock;
    /// returns the versions applied by this call (empty when the database was current).
    /// Refuses a database newer than this build.
    pub fn migrate(&self) -> Result<Vec<i32>> {
        let mut applied = Vec::new();
        for m in MIGRATIONS {
            let store = self.clone();
            let did = self.block_on(async move {
                let mut client = store.client().await?;
                let failed = |e: tokio_postgres::Error| store.error(&format!("migration {} failed on", m.version), &e);
                let tx = client.transaction().await.map_err(failed)?;
                tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK]).await.map_err(failed)?;
                tx.batch_execute(SCHEMA_TABLE).await.map_err(failed)?;
                let version: i32 = tx
                    .query_one("SELECT coalesce(max(version), 0) FROM skillhost_schema", &[])
                    .await
                    .map_err(failed)?
                    .get(0);
                if version > known_version() {
                    bail!(
                        "the PostgreSQL store {} is at schema version {version}, newer than the version {} this skillhost knows: nothing was changed; migrate with the newer skillhost",
                        store.url(),
                        known_version()
                    );
                }
                if version >= m.version {
                    return Ok(false);
                }
                if version != m.version - 1 {
                    bail!(
                        "the PostgreSQL store {} is at schema version {version}, but the next migration is {}: the skillhost_schema table was edited; restore it from a backup",
                        store.url(),
                        m.version
                    );
                }
                tx.batch_execute(m.sql).await.map_err(failed)?;
                tx.execute(
                    "INSERT INTO skillhost_schema (version, name, applied_by) VALUES ($1, $2, $3)",
                    &[&m.version, &m.name, &store.host_id()],
                )
                .await
                .map_err(failed)?;
                tx.commit().await.map_err(failed)?;
                Ok(true)
            })?;
            if did {
                tracing::info!(version = m.version, name = m.name, "applied a store migration");
                applied.push(m.version);
            }
        }
        Ok(applied)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_contiguous_from_one_and_named() {
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version, i as i32 + 1, "migration {} is out of order", m.name);
            assert!(!m.name.is_empty() && !m.sql.trim().is_empty());
        }
        assert_eq!(known_version(), MIGRATIONS.len() as i32);
    }

    #[test]
    fn the_state_compares_the_database_with_this_build() {
        assert_eq!(SchemaStatus::new(0, vec![]).state, SchemaState::Behind);
        assert_eq!(SchemaStatus::new(0, vec![]).pending.len(), MIGRATIONS.len());
        assert_eq!(SchemaStatus::new(known_version(), vec![]).state, SchemaState::Current);
        assert!(SchemaStatus::new(known_version(), vec![]).pending.is_empty());
        assert_eq!(SchemaStatus::new(known_version() + 1, vec![]).state, SchemaState::Ahead);
    }
}
