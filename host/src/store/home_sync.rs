//! A home's shared state in PostgreSQL (migration 3): the installed skills and their
//! history, the agent profiles, the policy and its grants, the trusted keys, and the
//! secrets' values, for every host of a store to run with.
//!
//! # Units, not rows
//!
//! The library, the policy and the secret store already keep their state as files with
//! careful rules (a skill directory swapped in with two renames, `install.json` as its
//! record, the policy re-read when its file changes). Rather than a second implementation
//! of each over SQL, the store holds that state as *units*: a skill's directory
//! (`skills/NAME`, `history/NAME`, `agents/NAME`) or one file (`policy.toml`, `trust.toml`,
//! `secrets.json`), each a versioned blob. Every host keeps its home as a copy it can
//! rebuild:
//! - a command that may change the home ([`HomeSync::change`]) takes the head row `FOR
//!   UPDATE`, brings the home up to date, runs, then uploads the units it changed under the
//!   next version and commits: two hosts granting at once cannot lose either grant;
//! - every other host picks the new units up ([`HomeSync::pull`]: before each command, and
//!   every [`FOLLOW_EVERY`] in a server), writing a directory unit as the local install
//!   does (staged, then swapped in), so a call never sees half a skill. The library's
//!   per-call revalidation then serves the new version on the next call.
//!
//! Several processes may run on one home (a server and the CLI, or eight `policy grant`s
//! at once). A change, and a pull that has something to apply, hold the home's lock file
//! (`cache/home-sync.lock`) from reading `cache/home-sync.json` to writing it back:
//! otherwise a process starting up could pull the store's last policy over the one a change
//! has just written and not yet shared, and the change would then find nothing to share
//! (its grant lost). A change records the home as current before its command runs, so a
//! pull with nothing to apply (most of them) never waits for a command at a prompt. A
//! change that fails before its commit closes its connection rather than pooling it inside
//! the transaction (`HeadLock`), so no host waits for a lock nobody holds.
//!
//! Compiled code stays a per-host cache keyed by the component's hash: a host compiles a
//! skill it pulled on first use.
//!
//! # Secrets
//!
//! `secrets.json` is never stored in the clear: it is sealed with ChaCha20-Poly1305 under a
//! 32-byte key each host reads from `SKILLHOST_STORE_KEY_FILE` (a file holding 64 hex
//! digits) or `SKILLHOST_STORE_KEY` (the hex itself), with the unit's name as associated
//! data. Its digest in the store is an HMAC under a key derived from the store key (a plain
//! sha256 beside the sealed bytes would let a reader of the database test guesses). A host
//! without the key refuses to upload or apply secrets and says how to give it one; a wrong
//! key fails to open them, saying so.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow, bail};
use deadpool_postgres::Object;
use serde::{Deserialize, Serialize};

use super::PgStore;
use crate::fsutil::{ScratchName, swap_dir, write_atomic};

/// How often a server's follower looks for units other hosts changed.
pub const FOLLOW_EVERY: Duration = Duration::from_millis(200);

/// Migration 3: the units and the head (the last version).
pub const PG_SCHEMA: &str = "
CREATE TABLE skillhost_home_units (
    unit text PRIMARY KEY,
    version bigint NOT NULL CHECK (version >= 1),
    digest text,
    content bytea,
    host text NOT NULL,
    written_at timestamptz NOT NULL DEFAULT now(),
    CHECK ((digest IS NULL) = (content IS NULL))
);
CREATE INDEX skillhost_home_units_by_version ON skillhost_home_units (version);
CREATE TABLE skillhost_home_head (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    version bigint NOT NULL
);
INSERT INTO skillhost_home_head (version) VALUES (0);
";

/// The directories whose entries are units, and the files that are.
const DIR_UNITS: &[&str] = &["skills", "history", "agents"];
const FILE_UNITS: &[&str] = &["policy.toml", "trust.toml", "secrets.json"];
/// The [`ScratchName`] kind of what a pull moved aside (replaced or removed); a dead
/// process's leftover of this kind is deleted, never put back.
pub const PULLED_ASIDE: &str = "pulled";
/// The unit sealed with the store key.
const SECRET_UNIT: &str = "secrets.json";

/// A unit as uploaded: its digest (of the plain content) and its stored bytes.
type Sealed = (String, Vec<u8>);

/// What this host last pulled: the head version, and each unit's digest and version as
/// applied here.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct Pulled {
    version: u64,
    digests: BTreeMap<String, String>,
    /// The version each unit was written at (absent in a state file written before it was
    /// recorded: such a unit is checked by its digest alone).
    #[serde(default)]
    versions: BTreeMap<String, u64>,
}

/// How the store's units up to a home's version relate to what that home recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum History {
    /// The store continues this home's history.
    Same,
    /// The store's head is behind this home: restored from a backup, or another store.
    Behind,
    /// The store holds, at or below this home's version, units this home did not record
    /// there: restored from a backup and written past this home's version since, or
    /// another store.
    Other,
}

impl Pulled {
    /// Whether the store's units (`unit`, `version`, `digest`; every row) continue this
    /// home's history: each one at or below this home's version is as recorded here, and
    /// each unit recorded here is in the store.
    fn continued_by(&self, rows: &[(String, u64, Option<String>)]) -> bool {
        let mut held = 0;
        for (unit, version, digest) in rows {
            let recorded = self.digests.get(unit);
            if recorded.is_some() {
                held += 1;
            }
            if *version > self.version {
                continue;
            }
            let same_version = self.versions.get(unit).is_none_or(|v| v == version);
            if recorded != digest.as_ref() || (digest.is_some() && !same_version) {
                return false;
            }
        }
        held == self.digests.len()
    }
}

/// One host's link between its home and the store's units.
#[derive(Clone)]
pub struct HomeSync {
    store: PgStore,
    home: PathBuf,
    key: Option<StoreKey>,
    /// Held while pulling or changing: one at a time in this process.
    busy: std::sync::Arc<std::sync::Mutex<()>>,
    /// The version this home was last brought to, and the checks of [`HomeSync::ensure_current`].
    fresh: std::sync::Arc<Freshness>,
}

/// The barrier in front of every call on a host of a shared store ([`HomeSync::ensure_current`]):
/// checks are numbered as they start and run one at a time; a call waits for a check that
/// started after it arrived, so concurrent calls share one round trip and none runs on a
/// home older than the store was when it came in.
#[derive(Default)]
struct Freshness {
    /// The shared-home version this home holds (as `cache/home-sync.json` records it).
    applied: AtomicU64,
    /// Checks started, and the number of the last one completed.
    started: AtomicU64,
    completed: AtomicU64,
    turn: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for HomeSync {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HomeSync({})", self.home.display())
    }
}

/// A unit's content as bytes: its files (relative paths, sorted) and their bytes.
fn encode_unit(files: &BTreeMap<String, Vec<u8>>) -> Vec<u8> {
    let mut out = Vec::new();
    for (path, bytes) in files {
        out.extend_from_slice(&(path.len() as u32).to_be_bytes());
        out.extend_from_slice(path.as_bytes());
        out.extend_from_slice(&(bytes.len() as u64).to_be_bytes());
        out.extend_from_slice(bytes);
    }
    out
}

fn decode_unit(unit: &str, mut bytes: &[u8]) -> Result<BTreeMap<String, Vec<u8>>> {
    let damaged = || {
        anyhow!("the store's copy of {unit} is damaged (cut short); install or set it again from a host that has it")
    };
    let mut files = BTreeMap::new();
    while !bytes.is_empty() {
        let (len, rest) = bytes.split_first_chunk::<4>().ok_or_else(damaged)?;
        let len = u32::from_be_bytes(*len) as usize;
        let (path, rest) = rest.split_at_checked(len).ok_or_else(damaged)?;
        let (len, rest) = rest.split_first_chunk::<8>().ok_or_else(damaged)?;
        let len = usize::try_from(u64::from_be_bytes(*len)).map_err(|_| damaged())?;
        let (content, rest) = rest.split_at_checked(len).ok_or_else(damaged)?;
        let path = std::str::from_utf8(path).map_err(|_| damaged())?;
        // Only plain relative names inside the unit: a damaged or hostile row must not write
        // outside it.
        let safe =
            !path.is_empty() && Path::new(path).components().all(|c| matches!(c, std::path::Component::Normal(_)));
        if !safe {
            bail!("the store's copy of {unit} names a file `{path}` outside it; refusing to apply it");
        }
        files.insert(path.to_string(), content.to_vec());
        bytes = rest;
    }
    Ok(files)
}

/// Is `name` an entry of a unit directory (not a scratch or hidden name)?
fn is_unit_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// The files under `dir`, by path relative to it.
fn read_tree(dir: &Path) -> Result<BTreeMap<String, Vec<u8>>> {
    let mut files = BTreeMap::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        for entry in std::fs::read_dir(dir.join(&rel)).with_context(|| format!("cannot read {}", dir.display()))? {
            let entry = entry?;
            let name = entry.file_name();
            let rel = rel.join(&name);
            let kind = entry.file_type()?;
            if kind.is_dir() {
                stack.push(rel);
            } else if kind.is_file() {
                let path = rel.to_str().ok_or_else(|| anyhow!("{} is not UTF-8", rel.display()))?.to_string();
                files.insert(path, std::fs::read(entry.path())?);
            }
        }
    }
    Ok(files)
}

/// Every unit of `home` and its content (bytes before sealing).
fn scan(home: &Path) -> Result<BTreeMap<String, Vec<u8>>> {
    let mut units = BTreeMap::new();
    for dir in DIR_UNITS {
        let Ok(entries) = std::fs::read_dir(home.join(dir)) else { continue };
        for entry in entries {
            let entry = entry?;
            let Some(name) = entry.file_name().to_str().map(str::to_string) else { continue };
            if entry.file_type()?.is_dir() && is_unit_name(&name) {
                units.insert(format!("{dir}/{name}"), encode_unit(&read_tree(&entry.path())?));
            }
        }
    }
    for file in FILE_UNITS {
        match std::fs::read(home.join(file)) {
            Ok(bytes) => {
                units.insert(file.to_string(), bytes);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", home.join(file).display())),
        }
    }
    Ok(units)
}

/// The store key: it seals `secrets.json`, and keys its digest (a plain sha256 of the
/// secrets, kept in the clear beside them, would let whoever reads the database test
/// guesses of them).
#[derive(Clone)]
struct StoreKey {
    seal: ring::aead::LessSafeKey,
    digest: ring::hmac::Key,
}

/// The store key from the environment, if one is given.
fn store_key() -> Result<Option<StoreKey>> {
    let hex_key = match (std::env::var("SKILLHOST_STORE_KEY_FILE"), std::env::var("SKILLHOST_STORE_KEY")) {
        (Ok(file), _) => std::fs::read_to_string(&file)
            .with_context(|| format!("cannot read the store key file {file} (SKILLHOST_STORE_KEY_FILE)"))?,
        (_, Ok(key)) => key,
        _ => return Ok(None),
    };
    let bytes = hex::decode(hex_key.trim())
        .ok()
        .filter(|b| b.len() == 32)
        .ok_or_else(|| anyhow!("the store key must be 64 hex digits (32 random bytes: `openssl rand -hex 32`)"))?;
    let key = ring::aead::UnboundKey::new(&ring::aead::CHACHA20_POLY1305, &bytes)
        .map_err(|_| anyhow!("cannot use the store key"))?;
    // The digest's key is derived from the store key, not the store key itself.
    let derived = ring::hmac::sign(&ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &bytes), b"skillhost home digest");
    Ok(Some(StoreKey {
        seal: ring::aead::LessSafeKey::new(key),
        digest: ring::hmac::Key::new(ring::hmac::HMAC_SHA256, derived.as_ref()),
    }))
}

/// The store's home lock: a connection inside `BEGIN` that holds the head row `FOR UPDATE`.
/// Dropped without [`HeadLock::release`] (an error before the commit, a panic in the
/// command), the connection is closed instead of going back to the pool, so the server rolls
/// the transaction back and the other hosts' changes go on at once; a connection returned
/// to the pool inside the transaction would hold the lock until this process exits.
struct HeadLock(Option<Object>);

impl HeadLock {
    fn client(&self) -> &Object {
        self.0.as_ref().expect("a HeadLock holds its connection until it is released or dropped")
    }

    /// Back to the pool, after the transaction ended (`COMMIT`).
    fn release(mut self) {
        drop(self.0.take());
    }
}

impl Drop for HeadLock {
    fn drop(&mut self) {
        if let Some(client) = self.0.take() {
            drop(Object::take(client));
        }
    }
}

/// A unit as the store holds it: the version that wrote it, its digest and stored bytes
/// (`None` for a removed unit).
struct StoredUnit {
    unit: String,
    version: u64,
    digest: Option<String>,
    content: Option<Vec<u8>>,
}

const NO_KEY: &str = "the secrets are kept in the shared store sealed with a key every host must have: set SKILLHOST_STORE_KEY_FILE to a file holding 64 hex digits (`openssl rand -hex 32`), the same on every host";

impl HomeSync {
    pub fn new(store: &PgStore, home: &Path) -> Result<HomeSync> {
        let sync = HomeSync {
            store: store.clone(),
            home: home.to_path_buf(),
            key: store_key()?,
            busy: Default::default(),
            fresh: Default::default(),
        };
        sync.fresh.applied.store(sync.load_state().version, Ordering::SeqCst);
        Ok(sync)
    }

    /// Before a call: make sure this home holds at least the version the store held when the
    /// call arrived, pulling if not, so that a skill installed, updated or removed, or a
    /// grant changed, on any host applies to this host's next call (not only once the
    /// follower comes by). One round trip, shared by the calls that arrive meanwhile.
    pub async fn ensure_current(&self) -> Result<()> {
        let fresh = &self.fresh;
        let ticket = fresh.started.load(Ordering::SeqCst);
        let _turn = fresh.turn.lock().await;
        if fresh.completed.load(Ordering::SeqCst) > ticket {
            return Ok(());
        }
        let number = fresh.started.fetch_add(1, Ordering::SeqCst) + 1;
        let head = self
            .store
            .run(|pg| async move {
                let client = pg.client().await?;
                let read = |e: tokio_postgres::Error| pg.error("cannot read the shared home of", &e);
                // Prepared once per connection: a plain query string would cost a second
                // round trip (parse, then execute) on every call.
                let head = client.prepare_cached("SELECT version FROM skillhost_home_head").await.map_err(read)?;
                let row = client.query_one(&head, &[]).await.map_err(read)?;
                Ok(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0))
            })
            .await?;
        if head > fresh.applied.load(Ordering::SeqCst) {
            let this = self.clone();
            tokio::task::spawn_blocking(move || this.pull())
                .await
                .map_err(|e| anyhow!("the shared home's pull stopped: {e}"))??;
        }
        fresh.completed.store(number, Ordering::SeqCst);
        Ok(())
    }

    fn state_path(&self) -> PathBuf {
        self.home.join("cache").join("home-sync.json")
    }

    /// The home's lock, held by a pull or a change from reading the state to saving it (see
    /// the module doc). Taken after `busy`, and before the store's home lock by a change,
    /// always in that order.
    fn lock_home(&self) -> Result<std::fs::File> {
        let cache = self.home.join("cache");
        crate::fsutil::create_private_dir(&cache).with_context(|| format!("cannot create {}", cache.display()))?;
        crate::fsutil::lock_exclusive(&cache.join("home-sync.lock"))
    }

    fn load_state(&self) -> Pulled {
        std::fs::read(self.state_path()).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default()
    }

    fn save_state(&self, state: &Pulled) -> Result<()> {
        crate::fsutil::create_private_dir(&self.home.join("cache"))?;
        write_atomic(&self.state_path(), &serde_json::to_vec(state)?)?;
        self.fresh.applied.store(state.version, Ordering::SeqCst);
        Ok(())
    }

    /// The digest `unit`'s plain content is known by: sha256, keyed for the secrets.
    fn digest(&self, unit: &str, plain: &[u8]) -> Result<String> {
        if unit != SECRET_UNIT {
            return Ok(crate::text::sha256_hex(plain));
        }
        let key = &self.key.as_ref().ok_or_else(|| anyhow!("cannot share the secrets: {NO_KEY}"))?.digest;
        Ok(format!("hmac-sha256:{}", hex::encode(ring::hmac::sign(key, plain))))
    }

    fn seal(&self, unit: &str, plain: Vec<u8>) -> Result<Vec<u8>> {
        if unit != SECRET_UNIT {
            return Ok(plain);
        }
        let key = &self.key.as_ref().ok_or_else(|| anyhow!("cannot share the secrets: {NO_KEY}"))?.seal;
        let mut nonce = [0u8; 12];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut nonce)
            .map_err(|_| anyhow!("no randomness for sealing the secrets"))?;
        let mut sealed = plain;
        key.seal_in_place_append_tag(
            ring::aead::Nonce::assume_unique_for_key(nonce),
            ring::aead::Aad::from(unit.as_bytes()),
            &mut sealed,
        )
        .map_err(|_| anyhow!("cannot seal the secrets"))?;
        let mut out = nonce.to_vec();
        out.extend_from_slice(&sealed);
        Ok(out)
    }

    fn open_sealed(&self, unit: &str, stored: Vec<u8>) -> Result<Vec<u8>> {
        if unit != SECRET_UNIT {
            return Ok(stored);
        }
        let key = &self.key.as_ref().ok_or_else(|| anyhow!("cannot read the shared secrets: {NO_KEY}"))?.seal;
        let (nonce, sealed) = stored
            .split_first_chunk::<12>()
            .ok_or_else(|| anyhow!("the store's sealed secrets are damaged (too short)"))?;
        let mut sealed = sealed.to_vec();
        let plain = key
            .open_in_place(
                ring::aead::Nonce::assume_unique_for_key(*nonce),
                ring::aead::Aad::from(unit.as_bytes()),
                &mut sealed,
            )
            .map_err(|_| {
                anyhow!("cannot open the store's secrets with this host's key: it is not the key they were sealed with (every host needs the same SKILLHOST_STORE_KEY_FILE)")
            })?;
        Ok(plain.to_vec())
    }

    /// Write `unit` (or remove it: `None`) into the home, a directory staged then swapped in.
    fn apply(&self, unit: &str, content: Option<Vec<u8>>) -> Result<()> {
        let target = self.home.join(unit);
        let Some((parent_name, name)) = unit.split_once('/') else {
            return match content {
                Some(bytes) => write_atomic(&target, &bytes),
                None => match std::fs::remove_file(&target) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
                    _ => Ok(()),
                },
            };
        };
        if !DIR_UNITS.contains(&parent_name) || !is_unit_name(name) {
            bail!("the store holds a unit `{unit}` this host does not know; upgrade it");
        }
        let parent = self.home.join(parent_name);
        std::fs::create_dir_all(&parent)?;
        // Its own kind of scratch name: what a pull moved aside is never put back by the
        // recovery of interrupted installs (the store, not the aside copy, is the record).
        let aside = ScratchName::new_path(&parent, PULLED_ASIDE, name);
        match content {
            Some(bytes) => {
                let staging = ScratchName::new_path(&parent, "staging", name);
                let written = (|| -> Result<()> {
                    for (rel, data) in decode_unit(unit, &bytes)? {
                        let path = staging.join(&rel);
                        if let Some(dir) = path.parent() {
                            std::fs::create_dir_all(dir)?;
                        }
                        write_atomic(&path, &data)?;
                    }
                    std::fs::create_dir_all(&staging)?;
                    Ok(())
                })();
                if let Err(e) = written {
                    let _ = std::fs::remove_dir_all(&staging);
                    return Err(e);
                }
                if swap_dir(&target, &staging, &aside)? {
                    let _ = std::fs::remove_dir_all(&aside);
                }
            }
            None => {
                // Renamed aside first (no check-then-act: a unit already gone is fine).
                match std::fs::rename(&target, &aside) {
                    Ok(()) => {
                        let _ = std::fs::remove_dir_all(&aside);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e).with_context(|| format!("cannot remove {}", target.display())),
                }
            }
        }
        Ok(())
    }

    /// The store's head version, read with `client`.
    async fn head(&self, client: &Object) -> Result<u64> {
        let row = client
            .query_one("SELECT version FROM skillhost_home_head", &[])
            .await
            .map_err(|e| self.store.error("cannot read the shared home of", &e))?;
        Ok(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0))
    }

    /// Every unit's version and digest (no content), read with `client`.
    async fn unit_versions(&self, client: &Object) -> Result<Vec<(String, u64, Option<String>)>> {
        let rows = client
            .query("SELECT unit, version, digest FROM skillhost_home_units", &[])
            .await
            .map_err(|e| self.store.error("cannot read the shared home of", &e))?;
        Ok(rows
            .into_iter()
            .map(|row| (row.get(0), u64::try_from(row.get::<_, i64>(1)).unwrap_or(0), row.get(2)))
            .collect())
    }

    /// The units written after version `since`, oldest first, read with `client`.
    async fn changed_since(&self, client: &Object, since: u64) -> Result<Vec<StoredUnit>> {
        let rows = client
            .query(
                "SELECT unit, version, digest, content FROM skillhost_home_units WHERE version > $1 ORDER BY version",
                &[&(since as i64)],
            )
            .await
            .map_err(|e| self.store.error("cannot read the shared home of", &e))?;
        Ok(rows
            .into_iter()
            .map(|row| StoredUnit {
                unit: row.get(0),
                version: u64::try_from(row.get::<_, i64>(1)).unwrap_or(0),
                digest: row.get(2),
                content: row.get(3),
            })
            .collect())
    }

    /// Apply `units` (oldest first) to the home and record them in `state`. On the calling
    /// thread, not the store's: a unit's files are written with an fsync each, and the
    /// store's one runtime thread drives every connection of the process.
    fn apply_all(&self, units: Vec<StoredUnit>, state: &mut Pulled) -> Result<()> {
        for StoredUnit { unit, version, digest, content } in units {
            // A removal is always applied: removing what is not there does nothing, and a
            // home whose state does not list the unit (its state file lost, a copy joined
            // late) must not keep, and later share again, what the store removed.
            if digest.is_none() || state.digests.get(&unit) != digest.as_ref() {
                let content = content.map(|c| self.open_sealed(&unit, c)).transpose()?;
                self.apply(&unit, content).with_context(|| format!("cannot apply {unit} from the shared store"))?;
            }
            match digest {
                Some(d) => {
                    state.versions.insert(unit.clone(), version);
                    state.digests.insert(unit, d);
                }
                None => {
                    state.versions.remove(&unit);
                    state.digests.remove(&unit);
                }
            }
            state.version = state.version.max(version);
        }
        Ok(())
    }

    /// Bring this home up to what the store holds.
    pub fn pull(&self) -> Result<()> {
        let _one = self.busy.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // Most pulls find nothing new (a follower looks every 0.2 s): those read the state
        // and the head without the home's lock and write nothing, so they never wait for a
        // change another process is making on this home (which saved its state first).
        let state = self.load_state();
        // What this home holds, whatever brought it there (another process on the same
        // home may have pulled).
        self.fresh.applied.fetch_max(state.version, Ordering::SeqCst);
        let this = self.clone();
        let head = self.store.block_on(async move { this.head(&this.store.client().await?).await })?;
        if head == state.version {
            return Ok(());
        }
        let _home = self.lock_home()?;
        // Read again under the lock: another process may have pulled or changed meanwhile.
        let mut state = self.load_state();
        let (this, seen) = (self.clone(), state.clone());
        let (head, (units, history)) = self.store.block_on(async move {
            let client = this.store.client().await?;
            let head = this.head(&client).await?;
            Ok((head, this.missing(&client, head, &seen).await?))
        })?;
        if units.is_empty() && history == History::Same {
            self.fresh.applied.fetch_max(state.version, Ordering::SeqCst);
            return Ok(());
        }
        self.restart_unless_same(&mut state, head, history);
        self.apply_all(units, &mut state)?;
        state.version = state.version.max(head);
        self.save_state(&state)
    }

    /// What a home at `seen` needs from a store whose head is `head`: the units written
    /// after its version; or every unit when the store does not continue its history
    /// (behind it, or holding other units at or below its version: the store was restored
    /// from a backup, or is not the one this home copied), as the versions this home saw
    /// may have been given to other changes since.
    async fn missing(&self, client: &Object, head: u64, seen: &Pulled) -> Result<(Vec<StoredUnit>, History)> {
        let history = if head < seen.version {
            History::Behind
        } else if seen.version > 0 && !seen.continued_by(&self.unit_versions(client).await?) {
            History::Other
        } else {
            History::Same
        };
        let since = if history == History::Same { seen.version } else { 0 };
        Ok((self.changed_since(client, since).await?, history))
    }

    /// After [`HomeSync::missing`]: start `state` afresh when the store does not continue it.
    fn restart_unless_same(&self, state: &mut Pulled, head: u64, history: History) {
        let why = match history {
            History::Same => return,
            History::Behind => format!("is at version {head}, behind this home's {}", state.version),
            History::Other => format!(
                "holds other units at or below this home's version {} than this home took from it",
                state.version
            ),
        };
        tracing::warn!(
            "the shared home of {} {why} ({}): the store was restored or replaced; taking every unit it holds again (units only this home has are shared by its next change)",
            self.store.url(),
            self.home.display()
        );
        *state = Pulled::default();
    }

    /// Run `change` on an up-to-date home while holding the store's home lock, then share
    /// what it changed (see the module doc). `change`'s error is returned after whatever it
    /// changed before failing is shared too.
    pub fn change<T>(&self, change: impl FnOnce() -> Result<T>) -> Result<T> {
        let _one = self.busy.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let _home = self.lock_home()?;
        let mut state = self.load_state();
        let (this, seen) = (self.clone(), state.clone());
        let (held, head, (units, history)) = self.store.block_on(async move {
            let client = this.store.client().await?;
            let locked = async {
                client.batch_execute("BEGIN").await?;
                client.query_one("SELECT version FROM skillhost_home_head FOR UPDATE", &[]).await
            }
            .await;
            let held = HeadLock(Some(client));
            let head = match locked {
                Ok(row) => u64::try_from(row.get::<_, i64>(0)).unwrap_or(0),
                Err(e) => return Err(this.store.error("cannot lock the shared home of", &e)),
            };
            let units = this.missing(held.client(), head, &seen).await?;
            Ok((held, head, units))
        })?;
        self.restart_unless_same(&mut state, head, history);
        self.apply_all(units, &mut state)?;
        state.version = state.version.max(head);
        // The home is current: a pull by another process on it now finds nothing to do and
        // does not wait for this command (which may prompt, download or compile).
        self.save_state(&state)?;
        let outcome = change();
        let shared = self.push(held, &mut state);
        if let Err(e) = self.save_state(&state) {
            // The next pull applies again what this change shared: nothing is lost.
            tracing::warn!("cannot record the shared home's version in {}: {e:#}", self.state_path().display());
        }
        match (outcome, shared) {
            (Ok(v), Ok(())) => Ok(v),
            (Err(e), Ok(())) => Err(e),
            (Err(e), Err(not_shared)) => Err(anyhow!(
                "{e:#}\n(and what the command changed before it failed could not be shared with the other hosts: {not_shared:#})"
            )),
            (Ok(_), Err(e)) => {
                Err(e.context("the change was made on this host but could not be shared with the others; run it again"))
            }
        }
    }

    /// Upload the units that differ from `state`, under the next version, and commit.
    fn push(&self, held: HeadLock, state: &mut Pulled) -> Result<()> {
        let units = scan(&self.home)?;
        let mut changed: Vec<(String, Option<Sealed>)> = Vec::new();
        for (unit, plain) in units.iter() {
            let digest = self.digest(unit, plain)?;
            if state.digests.get(unit) != Some(&digest) {
                changed.push((unit.clone(), Some((digest, self.seal(unit, plain.clone())?))));
            }
        }
        for unit in state.digests.keys() {
            if !units.contains_key(unit) {
                changed.push((unit.clone(), None));
            }
        }
        let version = state.version + 1;
        let host = self.store.host_id().to_string();
        let to_send = changed.clone();
        let pg = self.store.clone();
        self.store.block_on(async move {
            let client = held.client();
            let sent = async {
                if !to_send.is_empty() {
                    let upsert = client
                        .prepare(
                            "INSERT INTO skillhost_home_units (unit, version, digest, content, host) VALUES ($1, $2, $3, $4, $5)
                             ON CONFLICT (unit) DO UPDATE SET version = $2, digest = $3, content = $4, host = $5, written_at = now()",
                        )
                        .await?;
                    for (unit, content) in &to_send {
                        let (digest, bytes) = match content {
                            Some((d, b)) => (Some(d.as_str()), Some(b.as_slice())),
                            None => (None, None),
                        };
                        client.execute(&upsert, &[unit, &(version as i64), &digest, &bytes, &host]).await?;
                    }
                    client.execute("UPDATE skillhost_home_head SET version = $1", &[&(version as i64)]).await?;
                }
                client.batch_execute("COMMIT").await
            }
            .await;
            match sent {
                Ok(()) => {
                    held.release();
                    Ok(())
                }
                Err(e) => Err(pg.error("cannot share the change with", &e)),
            }
        })?;
        if !changed.is_empty() {
            state.version = version;
            for (unit, content) in changed {
                match content {
                    Some((digest, _)) => {
                        state.versions.insert(unit.clone(), version);
                        state.digests.insert(unit, digest)
                    }
                    None => {
                        state.versions.remove(&unit);
                        state.digests.remove(&unit)
                    }
                };
            }
        }
        Ok(())
    }

    /// `skillhost store import`: upload every unit of this home, as version 1, into a store
    /// whose shared home is empty (refused otherwise, saying why). What was uploaded is not
    /// recorded in this home: the home imported from does not become a copy of the store.
    /// Returns the units' names.
    pub fn import_home(&self) -> Result<Vec<String>> {
        let mut sealed: Vec<(String, String, Vec<u8>)> = Vec::new();
        for (unit, plain) in scan(&self.home)? {
            let digest = self.digest(&unit, &plain)?;
            let bytes = self.seal(&unit, plain)?;
            sealed.push((unit, digest, bytes));
        }
        let names = sealed.iter().map(|(u, ..)| u.clone()).collect();
        let pg = self.store.clone();
        self.store.block_on(async move {
            let mut client = pg.client().await?;
            let failed = |e: tokio_postgres::Error| pg.error("cannot import the home into", &e);
            let tx = client.transaction().await.map_err(failed)?;
            let version: i64 =
                tx.query_one("SELECT version FROM skillhost_home_head FOR UPDATE", &[]).await.map_err(failed)?.get(0);
            let units: i64 =
                tx.query_one("SELECT count(*) FROM skillhost_home_units", &[]).await.map_err(failed)?.get(0);
            if version != 0 || units != 0 {
                bail!(
                    "the shared home of {} already holds {units} unit(s) at version {version}: a home is imported only into an empty store (a new, freshly migrated database)",
                    pg.url()
                );
            }
            let insert = tx
                .prepare("INSERT INTO skillhost_home_units (unit, version, digest, content, host) VALUES ($1, 1, $2, $3, $4)")
                .await
                .map_err(failed)?;
            let host = format!("{} (import)", pg.host_id());
            for (unit, digest, bytes) in &sealed {
                tx.execute(&insert, &[unit, digest, bytes, &host]).await.map_err(failed)?;
            }
            if !sealed.is_empty() {
                tx.execute("UPDATE skillhost_home_head SET version = 1", &[]).await.map_err(failed)?;
            }
            tx.commit().await.map_err(failed)?;
            Ok(())
        })?;
        Ok(names)
    }

    /// `skillhost store export`: write every unit the store holds into this home (the
    /// secrets opened with the store key), as a pull would, without recording a pull: the
    /// exported home is a home of its own. Returns the units' names.
    pub fn export_home(&self) -> Result<Vec<String>> {
        let pg = self.store.clone();
        let rows: Vec<(String, Vec<u8>)> = self.store.block_on(async move {
            let client = pg.client().await?;
            let rows = client
                .query("SELECT unit, content FROM skillhost_home_units WHERE content IS NOT NULL ORDER BY unit", &[])
                .await
                .map_err(|e| pg.error("cannot read the shared home of", &e))?;
            Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
        })?;
        std::fs::create_dir_all(&self.home).with_context(|| format!("cannot create {}", self.home.display()))?;
        let mut names = Vec::new();
        for (unit, stored) in rows {
            let plain = self.open_sealed(&unit, stored)?;
            self.apply(&unit, Some(plain))
                .with_context(|| format!("cannot write {unit} into {}", self.home.display()))?;
            names.push(unit);
        }
        Ok(names)
    }

    /// Would [`HomeSync::import_home`] need the store key (the home has secrets) and lack it?
    pub fn check_can_import(&self) -> Result<()> {
        if self.key.is_none() && self.home.join(SECRET_UNIT).exists() {
            bail!("{} has secrets, and {NO_KEY}", self.home.display());
        }
        Ok(())
    }

    /// Pull every [`FOLLOW_EVERY`] on a thread of its own, for as long as `alive` says.
    pub fn follow(&self, alive: impl Fn() -> bool + Send + 'static) -> Result<()> {
        let this = self.clone();
        std::thread::Builder::new()
            .name("home-follower".into())
            .spawn(move || {
                let mut failing = false;
                while alive() {
                    std::thread::sleep(FOLLOW_EVERY);
                    match this.pull() {
                        Ok(()) => failing = false,
                        Err(e) if !failing => {
                            tracing::warn!("cannot follow the shared home: {e:#}; retrying");
                            failing = true;
                        }
                        Err(_) => {}
                    }
                }
            })
            .context("cannot start the shared home's follower thread")?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pulled(version: u64, units: &[(&str, u64, &str)], with_versions: bool) -> Pulled {
        Pulled {
            version,
            digests: units.iter().map(|(u, _, d)| (u.to_string(), d.to_string())).collect(),
            versions: if with_versions {
                units.iter().map(|(u, v, _)| (u.to_string(), *v)).collect()
            } else {
                BTreeMap::new()
            },
        }
    }

    fn rows(units: &[(&str, u64, Option<&str>)]) -> Vec<(String, u64, Option<String>)> {
        units.iter().map(|(u, v, d)| (u.to_string(), *v, d.map(str::to_string))).collect()
    }

    #[test]
    fn a_store_continues_a_home_only_if_its_units_up_to_the_home_are_those_the_home_recorded() {
        let home = pulled(3, &[("trust.toml", 3, "a"), ("policy.toml", 1, "p")], true);
        // The same units, and later changes (a unit rewritten, one removed, one added).
        assert!(home.continued_by(&rows(&[("trust.toml", 3, Some("a")), ("policy.toml", 1, Some("p"))])));
        assert!(home.continued_by(&rows(&[
            ("trust.toml", 5, Some("b")),
            ("policy.toml", 4, None),
            ("skills/echo", 6, Some("e"))
        ])));
        // Another digest, or the same digest at another version, at or below the home's.
        assert!(!home.continued_by(&rows(&[("trust.toml", 3, Some("x")), ("policy.toml", 1, Some("p"))])));
        assert!(!home.continued_by(&rows(&[("trust.toml", 2, Some("a")), ("policy.toml", 1, Some("p"))])));
        // A unit the home never had, or a removal it never saw, at or below its version.
        assert!(!home.continued_by(&rows(&[
            ("trust.toml", 3, Some("a")),
            ("policy.toml", 1, Some("p")),
            ("skills/echo", 2, Some("e"))
        ])));
        assert!(!home.continued_by(&rows(&[("trust.toml", 3, Some("a")), ("policy.toml", 2, None)])));
        // A unit the home holds that the store does not.
        assert!(!home.continued_by(&rows(&[("trust.toml", 3, Some("a"))])));
        // A removal the home saw (it no longer lists the unit) is no difference.
        assert!(home.continued_by(&rows(&[
            ("trust.toml", 3, Some("a")),
            ("policy.toml", 1, Some("p")),
            ("agents/old", 2, None)
        ])));
        // A state file written before versions were recorded: digests alone.
        let old = pulled(3, &[("trust.toml", 3, "a")], false);
        assert!(old.continued_by(&rows(&[("trust.toml", 2, Some("a"))])));
        assert!(!old.continued_by(&rows(&[("trust.toml", 2, Some("x"))])));
    }
}
