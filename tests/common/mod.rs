//! Shared test fixtures: temp homes and workspaces, the probe skill under custom manifests,
//! and a loopback HTTP server.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::Value;
use skillhost::library::{Library, RunOptions, RunReport};

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// An assembled skill dir from `just build-skills`.
pub fn built(name: &str) -> PathBuf {
    let dir = repo().join("target/skills").join(name);
    assert!(dir.join("SKILL.md").exists(), "{} is missing: run `just build-skills` first", dir.display());
    dir
}

/// An external tool a test drives (a real client, a guest toolchain) that `installer`
/// (a script under .ci/) puts at `path`; None after saying loudly why the test does nothing.
/// Under CI (env `CI` set) a missing tool is a failure: CI must run those tests.
pub fn require_installed(path: PathBuf, what: &str, installer: &str) -> Option<PathBuf> {
    if path.exists() {
        return Some(path);
    }
    let message = format!("{what} is not installed at {}: run {installer}", path.display());
    if std::env::var_os("CI").is_some() {
        panic!("{message} (CI is set, so this is a failure)");
    }
    eprintln!("\n!!!!! SKIPPED: {message} !!!!!\n");
    None
}

pub fn probe_wasm() -> PathBuf {
    built("probe").join("skill.wasm")
}

pub struct Env {
    pub home: tempfile::TempDir,
    pub workspace: tempfile::TempDir,
    pub sources: tempfile::TempDir,
}

impl Env {
    pub fn new() -> Env {
        Env {
            home: tempfile::tempdir().unwrap(),
            workspace: tempfile::tempdir().unwrap(),
            sources: tempfile::tempdir().unwrap(),
        }
    }

    pub fn library(&self) -> Library {
        Library::open(self.home.path(), Some(self.workspace.path()), None).unwrap()
    }

    /// A skill dir named `name` with the probe component and a manifest whose front matter
    /// ends with `extra` (capabilities, limits...).
    pub fn probe_as(&self, name: &str, extra: &str) -> PathBuf {
        let dir = self.sources.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("SKILL.md"),
            format!(
                "---\nname: {name}\ndescription: probe under test\nversion: 0.1.0\nparameters:\n  - name: mode\n    type: string\n    required: true\n  - name: arg\n    type: string\n  - name: n\n    type: integer\n    minimum: 0\n  - name: body\n    type: string\n  - name: header\n    type: string\n{extra}---\nbody\n"
            ),
        )
        .unwrap();
        std::fs::copy(probe_wasm(), dir.join("skill.wasm")).unwrap();
        dir
    }

    /// Install `probe_as(name, extra)` granting everything it declares and asks for.
    pub fn install_granted(&self, lib: &Library, name: &str, extra: &str) {
        let dir = self.probe_as(name, extra);
        lib.install(&dir, &|m| Ok(Some(skillhost::policy::Grant::everything(m)))).unwrap();
    }

    /// Install without granting anything.
    pub fn install_ungranted(&self, lib: &Library, name: &str, extra: &str) {
        let dir = self.probe_as(name, extra);
        lib.install(&dir, &|_| Ok(None)).unwrap();
    }
}

pub fn run(lib: &Library, name: &str, params: Value) -> RunReport {
    run_with(lib, name, params, &RunOptions::default())
}

pub fn run_with(lib: &Library, name: &str, params: Value, opts: &RunOptions) -> RunReport {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(lib.run(name, params, opts)).unwrap()
}

pub fn output(r: &RunReport) -> &str {
    match &r.result {
        Ok(o) => &o.output,
        Err(e) => panic!("expected success, got error: {e}"),
    }
}

/// A loopback HTTP/1.1 server answering every request with `200 hello`; counts requests.
pub struct TestServer {
    pub port: u16,
    pub hits: Arc<AtomicUsize>,
}

impl TestServer {
    pub fn start() -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let hits = Arc::new(AtomicUsize::new(0));
        let counter = hits.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().take(64) {
                let Ok(mut s) = stream else { continue };
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf);
                counter.fetch_add(1, Ordering::SeqCst);
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello");
            }
        });
        TestServer { port, hits }
    }

    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

pub mod memory_eval;
pub mod memory_store;

/// The embedding model the memory tests use: `$SKILLHOST_EMBED_MODEL`, else the copy
/// `.ci/run` caches under target/models/ (`skillhost memory model install --to` puts it there).
pub fn embed_model() -> Option<PathBuf> {
    let path = std::env::var_os("SKILLHOST_EMBED_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target/models/multilingual-e5-small-q4.bin"));
    require_installed(path, "the embedding model", "`bash .ci/embed-model` (or `skillhost memory model install`)")
}
