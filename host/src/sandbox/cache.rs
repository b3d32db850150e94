//! Compile cache: components are compiled once (at install) and later loaded with
//! `Component::deserialize` from files this process wrote.
//!
//! A cache file is keyed by the component's sha256 and the engine's precompile
//! compatibility hash, and starts with a tag: the sha256 over a domain string, the
//! component's sha256, the engine key and the payload. `deserialize` runs only on bytes
//! whose tag matches the component and engine being loaded, so a corrupted entry, or a
//! valid entry of another component copied over this one's name, is detected and
//! recompiled from the (separately verified) component instead of being trusted.

use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context as _, Result};
use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

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

pub(super) struct CompileCache {
    dir: PathBuf,
    engine_key: String,
}

impl CompileCache {
    pub fn new(dir: PathBuf, engine: &Engine) -> CompileCache {
        // DefaultHasher::new() uses fixed keys: stable for one build of this binary, which
        // is what matters; the crate version guards against format changes between builds.
        let mut h = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        env!("CARGO_PKG_VERSION").hash(&mut h);
        CompileCache { dir, engine_key: format!("{:016x}", h.finish()) }
    }

    fn path_for(&self, sha256: &str) -> PathBuf {
        self.dir.join(format!("{sha256}-{}.cwasm", self.engine_key))
    }

    pub fn compile(
        &self,
        engine: &Engine,
        wasm: &[u8],
        progress: &dyn Fn(&str),
    ) -> Result<(Component, CompileOutcome)> {
        let sha = hex::encode(Sha256::digest(wasm));
        let (component, ms) = self.compile_and_store(engine, wasm, &sha, progress)?;
        Ok((component, CompileOutcome::Compiled { compile_ms: ms }))
    }

    pub fn load(
        &self,
        engine: &Engine,
        wasm: &[u8],
        sha256: &str,
        progress: &dyn Fn(&str),
    ) -> Result<(Component, CompileOutcome)> {
        let path = self.path_for(sha256);
        let started = Instant::now();
        let had_entry = match std::fs::read(&path) {
            Ok(bytes) => {
                if let Some(component) = verified_deserialize(engine, &bytes, sha256, &self.engine_key) {
                    return Ok((component, CompileOutcome::Hit { load_us: started.elapsed().as_micros() as u64 }));
                }
                progress(&format!("cache entry {} is corrupt or stale; recompiling", path.display()));
                true
            }
            Err(_) => false,
        };
        let (component, ms) = self.compile_and_store(engine, wasm, sha256, progress)?;
        let outcome = if had_entry {
            CompileOutcome::Recompiled { compile_ms: ms }
        } else {
            CompileOutcome::Compiled { compile_ms: ms }
        };
        Ok((component, outcome))
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
        let mut file = Vec::with_capacity(payload.len() + 32);
        file.extend_from_slice(&entry_tag(sha256, &self.engine_key, &payload));
        file.extend_from_slice(&payload);
        std::fs::create_dir_all(&self.dir).with_context(|| format!("cannot create {}", self.dir.display()))?;
        crate::library::write_atomic(&self.path_for(sha256), &file)?;
        Ok((component, ms))
    }
}

/// What binds an entry to the component and engine it was compiled for.
fn entry_tag(component_sha256: &str, engine_key: &str, payload: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"skillhost compile cache v2\0");
    h.update(component_sha256.as_bytes());
    h.update(b"\0");
    h.update(engine_key.as_bytes());
    h.update(b"\0");
    h.update(payload);
    h.finalize().into()
}

fn verified_deserialize(engine: &Engine, bytes: &[u8], component_sha256: &str, engine_key: &str) -> Option<Component> {
    if bytes.len() < 32 {
        return None;
    }
    let (tag, payload) = bytes.split_at(32);
    if entry_tag(component_sha256, engine_key, payload).as_slice() != tag {
        return None;
    }
    // SAFETY: `payload` was produced by `Component::serialize` in this cache for exactly
    // this component and engine (the tag, written alongside it by us, binds both), and
    // `deserialize` additionally checks the header itself.
    unsafe { Component::deserialize(engine, payload) }.ok()
}
