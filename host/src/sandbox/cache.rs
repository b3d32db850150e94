//! Compile cache: components are compiled once (at install) and later loaded with
//! `Component::deserialize_file` (an mmap: a 35 MB Python component costs no read, no
//! copy and no hash on a warm start) from files this host wrote.
//!
//! An entry is two files: `SHA-ENGINE.cwasm`, the payload exactly as `Component::serialize`
//! wrote it, and `SHA-ENGINE.seal`, which names the component's sha256, the engine key, the
//! payload's sha256 and the payload file's stamp (device, inode, size, mtime, ctime), under
//! an HMAC with the host's key (`cache/.key`, 0600). Only a payload whose seal verifies and
//! whose file still has the sealed stamp is mapped; a payload with another stamp (copied,
//! touched, restored) is read and hashed once against the seal and re-sealed; anything else
//! (no seal, a forged or damaged seal, other bytes) is recompiled from the separately
//! verified component. So `deserialize` never runs on bytes that did not come from this
//! cache for exactly this component and engine.
//!
//! Mapping trusts that nobody writes the payload in place while it is mapped: the cache
//! lives in the skillhost home (0700 here), which no skill mount may contain or enter.
//! Entries of the previous format (a 32-byte unkeyed tag before the payload) are verified
//! by that tag once and rewritten in this one.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Instant;

use anyhow::{Context as _, Result};
use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

use crate::fsutil::{FileStamp, SealKey, create_private_dir};

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CompileOutcome {
    /// Loaded from the cache.
    Hit { load_us: u64 },
    /// Compiled now (no entry yet).
    Compiled { compile_ms: u64 },
    /// The entry failed its checksum or did not load; recompiled and rewritten.
    Recompiled { compile_ms: u64 },
}

/// Entries younger than this are never swept: another process may have compiled one for an
/// install it has not finished yet (sweeping it would only cost that install a recompile).
pub const SWEEP_GRACE: std::time::Duration = std::time::Duration::from_secs(600);

/// What [`sweep`] removed from a compile cache.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CacheSweep {
    /// Entries (a payload and its seal count as one).
    pub entries: usize,
    pub bytes: u64,
}

/// Remove the entries in `dir` of every component whose sha256 is not in `keep` (the
/// components installed now), whatever engine compiled them, once they are older than
/// `grace`. Only files named like entries are touched (`SHA-ENGINE.cwasm` / `.seal`); the
/// host key and everything else stay. A process that has an entry mapped keeps its mapping.
pub fn sweep(dir: &Path, keep: &std::collections::HashSet<String>, grace: std::time::Duration) -> CacheSweep {
    let mut swept = CacheSweep::default();
    let Ok(entries) = std::fs::read_dir(dir) else { return swept };
    let now = std::time::SystemTime::now();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some((stem, is_payload)) =
            name.strip_suffix(".cwasm").map(|s| (s, true)).or_else(|| name.strip_suffix(".seal").map(|s| (s, false)))
        else {
            continue;
        };
        let Some((sha, engine)) = stem.split_once('-') else { continue };
        let hex = |t: &str, len: usize| t.len() == len && t.bytes().all(|b| b.is_ascii_hexdigit());
        if !hex(sha, 64) || !hex(engine, 16) || keep.contains(sha) {
            continue;
        }
        let Ok(meta) = entry.metadata() else { continue };
        let age = meta.modified().ok().and_then(|m| now.duration_since(m).ok());
        if !meta.is_file() || age.is_none_or(|a| a < grace) {
            continue;
        }
        if std::fs::remove_file(entry.path()).is_ok() && is_payload {
            swept.entries += 1;
            swept.bytes += meta.len();
        }
    }
    swept
}

/// Where the component's bytes come from when the cache has to compile: read lazily, so a
/// warm start never reads (or hashes) the component at all.
pub type ComponentBytes<'a> = &'a dyn Fn() -> Result<Vec<u8>>;

pub(super) struct CompileCache {
    dir: PathBuf,
    engine_key: String,
    key: OnceLock<Option<SealKey>>,
}

/// The seal of one entry, stored as JSON next to its payload.
#[derive(serde::Serialize, serde::Deserialize)]
struct EntrySeal {
    format: u32,
    component_sha256: String,
    engine_key: String,
    payload_sha256: String,
    stamp: FileStamp,
    mac: String,
}

const SEAL_FORMAT: u32 = 3;

impl EntrySeal {
    fn parts(&self) -> [Vec<u8>; 6] {
        [
            b"skillhost compile cache".to_vec(),
            self.format.to_le_bytes().to_vec(),
            self.component_sha256.as_bytes().to_vec(),
            self.engine_key.as_bytes().to_vec(),
            self.payload_sha256.as_bytes().to_vec(),
            serde_json::to_vec(&self.stamp).unwrap_or_default(),
        ]
    }
}

/// What reading an entry found.
enum Entry {
    Loaded(Component),
    Missing,
    /// Present but not trusted; why, for the progress line.
    Untrusted(&'static str),
}

impl CompileCache {
    pub fn new(dir: PathBuf, engine: &Engine) -> CompileCache {
        // DefaultHasher::new() uses fixed keys: stable for one build of this binary, which
        // is what matters; the crate version guards against format changes between builds.
        let mut h = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        env!("CARGO_PKG_VERSION").hash(&mut h);
        CompileCache { dir, engine_key: format!("{:016x}", h.finish()), key: OnceLock::new() }
    }

    /// Use `key` (the host key its owner already loaded) instead of loading it again.
    pub fn use_key(&mut self, key: Option<SealKey>) {
        self.key = OnceLock::from(key);
    }

    fn path_for(&self, sha256: &str) -> PathBuf {
        self.dir.join(format!("{sha256}-{}.cwasm", self.engine_key))
    }

    /// The host key, created with the cache directory on first use. Without one (a
    /// read-only home), nothing is sealed and every load verifies the payload's bytes.
    fn key(&self) -> Option<&SealKey> {
        self.key
            .get_or_init(|| {
                create_private_dir(&self.dir).ok()?;
                SealKey::load_or_create(&self.dir.join(".key")).ok()
            })
            .as_ref()
    }

    pub fn compile(
        &self,
        engine: &Engine,
        wasm: &[u8],
        progress: &dyn Fn(&str),
    ) -> Result<(Component, CompileOutcome)> {
        let sha = crate::text::sha256_hex(wasm);
        // The same bytes installed again (a reinstall, one component under several names)
        // reuse their sealed entry: it was compiled from exactly these bytes by this engine.
        let started = Instant::now();
        if let Entry::Loaded(component) = self.read_entry(engine, &self.path_for(&sha), &sha) {
            return Ok((component, CompileOutcome::Hit { load_us: started.elapsed().as_micros() as u64 }));
        }
        let (component, ms) = self.compile_and_store(engine, wasm, &sha, progress)?;
        Ok((component, CompileOutcome::Compiled { compile_ms: ms }))
    }

    /// Load the component whose sha256 is `sha256`, compiling `wasm()` only when the cache
    /// has no entry it can trust.
    pub fn load(
        &self,
        engine: &Engine,
        wasm: ComponentBytes<'_>,
        sha256: &str,
        progress: &dyn Fn(&str),
    ) -> Result<(Component, CompileOutcome)> {
        let path = self.path_for(sha256);
        let started = Instant::now();
        let had_entry = match self.read_entry(engine, &path, sha256) {
            Entry::Loaded(component) => {
                return Ok((component, CompileOutcome::Hit { load_us: started.elapsed().as_micros() as u64 }));
            }
            Entry::Missing => false,
            Entry::Untrusted(why) => {
                progress(&format!("cache entry {} {why}; recompiling", path.display()));
                true
            }
        };
        let wasm = wasm()?;
        let (component, ms) = self.compile_and_store(engine, &wasm, sha256, progress)?;
        let outcome = if had_entry {
            CompileOutcome::Recompiled { compile_ms: ms }
        } else {
            CompileOutcome::Compiled { compile_ms: ms }
        };
        Ok((component, outcome))
    }

    fn read_entry(&self, engine: &Engine, path: &Path, sha256: &str) -> Entry {
        let seal_path = path.with_extension("seal");
        let seal = match std::fs::read(&seal_path) {
            Ok(bytes) => serde_json::from_slice::<EntrySeal>(&bytes).ok(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return self.read_legacy_entry(engine, path, sha256),
            Err(_) => None,
        };
        let Some(seal) = seal else { return Entry::Untrusted("has a damaged seal") };
        let Some(key) = self.key() else { return Entry::Untrusted("cannot be checked (no host key)") };
        let parts = seal.parts();
        let parts: Vec<&[u8]> = parts.iter().map(|p| p.as_slice()).collect();
        if seal.format != SEAL_FORMAT
            || seal.component_sha256 != sha256
            || seal.engine_key != self.engine_key
            || !key.verify(&parts, &seal.mac)
        {
            return Entry::Untrusted("has a seal that does not verify");
        }
        let Ok(Some(before)) = FileStamp::of(path) else { return Entry::Untrusted("has no payload") };
        if before == seal.stamp {
            // SAFETY: the sealed stamp says these are the bytes this cache hashed after
            // `Component::serialize` wrote them for this component and engine, unchanged
            // since; the stamp is checked again after mapping to catch a swap in between.
            let mapped = unsafe { Component::deserialize_file(engine, path) };
            if let Ok(component) = mapped
                && matches!(FileStamp::of(path), Ok(Some(after)) if after == before)
            {
                return Entry::Loaded(component);
            }
            return Entry::Untrusted("changed while it was loaded");
        }
        // Same bytes under a new stamp (a copied or restored home): hash them once.
        let Ok(payload) = std::fs::read(path) else { return Entry::Untrusted("cannot be read") };
        if crate::text::sha256_hex(&payload) != seal.payload_sha256 {
            return Entry::Untrusted("does not match its seal");
        }
        // SAFETY: the payload's sha256 is the one sealed with the host key for this
        // component and engine when this cache wrote it.
        match unsafe { Component::deserialize(engine, &payload) } {
            Ok(component) => {
                let _ = self.write_seal(path, sha256, &seal.payload_sha256);
                Entry::Loaded(component)
            }
            Err(_) => Entry::Untrusted("does not load"),
        }
    }

    /// An entry of the previous format: a 32-byte unkeyed tag, then the payload. Verified
    /// by its tag once, then rewritten (payload alone, sealed).
    fn read_legacy_entry(&self, engine: &Engine, path: &Path, sha256: &str) -> Entry {
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Entry::Missing,
            Err(_) => return Entry::Untrusted("cannot be read"),
        };
        if bytes.len() < 32 {
            return Entry::Untrusted("is corrupt or stale");
        }
        let (tag, payload) = bytes.split_at(32);
        if legacy_tag(sha256, &self.engine_key, payload).as_slice() != tag {
            return Entry::Untrusted("is corrupt or stale");
        }
        // SAFETY: `payload` was produced by `Component::serialize` in this cache for exactly
        // this component and engine (the tag, written alongside it by us, binds both), and
        // `deserialize` additionally checks the header itself.
        match unsafe { Component::deserialize(engine, payload) } {
            Ok(component) => {
                let _ = self.store_payload(path, sha256, payload);
                Entry::Loaded(component)
            }
            Err(_) => Entry::Untrusted("is corrupt or stale"),
        }
    }

    fn compile_and_store(
        &self,
        engine: &Engine,
        wasm: &[u8],
        sha256: &str,
        progress: &dyn Fn(&str),
    ) -> Result<(Component, u64)> {
        progress(&format!("compiling component ({} KiB) to native code...", wasm.len() / 1024));
        let started = Instant::now();
        let component =
            Component::new(engine, wasm).map_err(|e| anyhow::anyhow!("the component does not compile: {e:#}"))?;
        let ms = started.elapsed().as_millis() as u64;
        progress(&format!("compiled in {ms} ms"));
        let payload =
            component.serialize().map_err(anyhow::Error::from).context("cannot serialize the compiled component")?;
        create_private_dir(&self.dir).with_context(|| format!("cannot create {}", self.dir.display()))?;
        self.store_payload(&self.path_for(sha256), sha256, &payload)?;
        self.remove_other_engines(sha256);
        Ok((component, ms))
    }

    /// Remove this component's entries compiled by other engines (an older skillhost or
    /// wasmtime): nothing loads them again, and a Python component's entry is ~35 MB.
    fn remove_other_engines(&self, sha256: &str) {
        let Ok(dir) = std::fs::read_dir(&self.dir) else { return };
        let ours = format!("{sha256}-{}.", self.engine_key);
        for entry in dir.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let stale = name.starts_with(sha256)
                && name.as_bytes().get(sha256.len()) == Some(&b'-')
                && (name.ends_with(".cwasm") || name.ends_with(".seal"))
                && !name.starts_with(&ours);
            if stale {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }

    /// Write the payload, then its seal: a crash in between leaves a payload whose old (or
    /// missing) seal does not match, which the next load recompiles.
    fn store_payload(&self, path: &Path, sha256: &str, payload: &[u8]) -> Result<()> {
        crate::fsutil::write_atomic(path, payload)?;
        self.write_seal(path, sha256, &crate::text::sha256_hex(payload))
    }

    fn write_seal(&self, path: &Path, sha256: &str, payload_sha256: &str) -> Result<()> {
        let seal_path = path.with_extension("seal");
        let Some(key) = self.key() else {
            let _ = std::fs::remove_file(&seal_path);
            return Ok(());
        };
        let stamp = FileStamp::of(path)?.context("the cache entry vanished while it was written")?;
        let mut seal = EntrySeal {
            format: SEAL_FORMAT,
            component_sha256: sha256.to_string(),
            engine_key: self.engine_key.clone(),
            payload_sha256: payload_sha256.to_string(),
            stamp,
            mac: String::new(),
        };
        let parts = seal.parts();
        seal.mac = key.seal(&parts.iter().map(|p| p.as_slice()).collect::<Vec<_>>());
        crate::fsutil::write_atomic(&seal_path, &serde_json::to_vec(&seal)?)
    }
}

/// What bound an entry of the previous format to its component and engine.
fn legacy_tag(component_sha256: &str, engine_key: &str, payload: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"skillhost compile cache v2\0");
    h.update(component_sha256.as_bytes());
    h.update(b"\0");
    h.update(engine_key.as_bytes());
    h.update(b"\0");
    h.update(payload);
    h.finalize().into()
}
