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

/// What a test needs that `just test` installs first (with the `.ci/` script named here,
/// idempotent, cached under target/). A test that cannot find it fails, naming what is missing
/// and the command that installs it; only an explicit opt-out (the variable named here, set to
/// `1`) turns that into a skip, and `just test` repeats each opt-out loudly at its end.
#[derive(Clone, Copy, Debug)]
pub enum Needs {
    /// componentize-py, componentize-js, zig cc, Go, wasm-tools, wit-bindgen-cli, a C compiler.
    GuestToolchains,
    /// The Python MCP SDK and the MCP conformance suite.
    McpClients,
    /// The multilingual embedding model of semantic search.
    EmbedModel,
}

impl Needs {
    pub fn installer(self) -> &'static str {
        match self {
            Needs::GuestToolchains => "bash .ci/guest-toolchains",
            Needs::McpClients => "bash .ci/mcp-clients",
            Needs::EmbedModel => "bash .ci/embed-model",
        }
    }

    pub fn opt_out(self) -> &'static str {
        match self {
            Needs::GuestToolchains => "SKILLHOST_SKIP_GUESTS",
            Needs::McpClients => "SKILLHOST_SKIP_MCP_CLIENTS",
            Needs::EmbedModel => "SKILLHOST_SKIP_EMBED_MODEL",
        }
    }

    /// Whether the user opted out of the tests needing this (never under CI: CI runs them).
    pub fn skipped(self) -> bool {
        std::env::var_os("CI").is_none() && std::env::var(self.opt_out()).is_ok_and(|v| v == "1")
    }

    /// `what` is missing (`why`): a failure naming the installer, unless the user opted out,
    /// when it says so loudly and returns (the caller's test then does nothing).
    pub fn missing(self, what: &str, why: &str) {
        let message = format!("{what} is missing ({why}): run `{}` (or `just test`, which runs it)", self.installer());
        if !self.skipped() {
            panic!("{message}; to run the other tests without this one, set {}=1", self.opt_out());
        }
        eprintln!("\n!!!!! SKIPPED ({}=1): {message} !!!!!\n", self.opt_out());
    }
}

/// An external tool a test drives (a real client, a guest toolchain, the model) that
/// `needs.installer()` puts at `path`: the path, or a failure naming what is missing and how
/// to install it; None only when the user opted out (see [`Needs`]).
pub fn require_installed(path: PathBuf, what: &str, needs: Needs) -> Option<PathBuf> {
    if path.exists() {
        return Some(path);
    }
    needs.missing(what, &format!("nothing at {}", path.display()));
    None
}

/// The caller's variables that would change what a CLI test's `skillhost` does: log levels,
/// the LLM provider settings (a developer's own key must not reach a test) and the store.
const HOST_ENV: [&str; 11] = [
    "RUST_LOG",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "SKILLHOST_PROVIDER",
    "SKILLHOST_MODEL",
    "SKILLHOST_DECISIONS",
    "SKILLHOST_STORE",
    "SKILLHOST_STORE_KEY",
    "SKILLHOST_STORE_KEY_FILE",
];

/// `home`'s audit chain as JSON values, in order ([`audit_text`]).
pub fn audit_entries(home: &Path) -> Vec<Value> {
    audit_text(home).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// The skillhost binary as a user runs it, with `home` as its home (SKILLHOST_HOME) and none
/// of [`HOST_ENV`]: the one start of every CLI test (`std::process::Command` for tests that
/// spawn and hold the child; [`skillhost`] for the asserting one). Under
/// `SKILLHOST_TEST_STORE=postgres` the home's system of record is its own PostgreSQL
/// database (see [`TestStore`]).
pub fn skillhost_command(home: &Path) -> std::process::Command {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_skillhost"));
    c.env("SKILLHOST_HOME", home);
    for var in HOST_ENV {
        c.env_remove(var);
    }
    if let Some(url) = store_for(home) {
        c.env("SKILLHOST_STORE", url).env("SKILLHOST_STORE_KEY", TEST_STORE_KEY);
    }
    c
}

/// Which backend the store-touching tests run on: `SKILLHOST_TEST_STORE` unset or `local`,
/// the embedded default (redb and files in the home); `postgres`, every home a test makes
/// through [`skillhost_command`] or [`Env::library`] gets a PostgreSQL database of its own
/// (on the test binary's server, `postgres.rs`), migrated, as `store migrate` leaves it, so
/// the same test runs against the shared backend. `just test` runs the store-touching test
/// binaries both ways.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestStore {
    Local,
    Postgres,
}

pub fn test_store() -> TestStore {
    match std::env::var("SKILLHOST_TEST_STORE").as_deref() {
        Err(_) | Ok("") | Ok("local") => TestStore::Local,
        Ok("postgres") => TestStore::Postgres,
        Ok(other) => panic!("SKILLHOST_TEST_STORE must be `local` or `postgres`, not `{other}`"),
    }
}

/// The store key every test home on PostgreSQL seals its secrets with (64 hex digits).
pub const TEST_STORE_KEY: &str = "5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed";

/// The homes of this test binary on PostgreSQL (their databases), and those a test keeps
/// on the local backend whatever [`test_store`] says ([`Env::local`]).
#[derive(Default)]
struct TestHomes {
    databases: std::collections::HashMap<PathBuf, String>,
    local: std::collections::HashSet<PathBuf>,
}

fn test_homes() -> std::sync::MutexGuard<'static, TestHomes> {
    static HOMES: std::sync::OnceLock<std::sync::Mutex<TestHomes>> = std::sync::OnceLock::new();
    HOMES.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner())
}

fn home_key(home: &Path) -> PathBuf {
    std::fs::canonicalize(home).unwrap_or_else(|_| home.to_path_buf())
}

/// Under [`TestStore::Postgres`], `home`'s database (made and migrated on its first use,
/// then the same for every process the test starts on that home); `None` on the local
/// backend.
pub fn database_for(home: &Path) -> Option<postgres::Database> {
    if test_store() == TestStore::Local {
        return None;
    }
    let key = home_key(home);
    let mut homes = test_homes();
    if homes.local.contains(&key) {
        return None;
    }
    let name = homes.databases.entry(key).or_insert_with(|| {
        let db = postgres::database();
        db.migrated();
        db.name
    });
    Some(postgres::Database { name: name.clone() })
}

/// [`database_for`]'s store URL.
pub fn store_for(home: &Path) -> Option<String> {
    database_for(home).map(|db| db.url())
}

/// The variables a `skillhost` started on `home` by hand (through `script`, `sh`...) needs
/// to reach the same store as [`skillhost_command`]'s: none on the local backend.
pub fn store_env(home: &Path) -> Vec<(&'static str, String)> {
    match store_for(home) {
        Some(url) => vec![("SKILLHOST_STORE", url), ("SKILLHOST_STORE_KEY", TEST_STORE_KEY.to_string())],
        None => vec![],
    }
}

/// `home`'s database if a process or library of this test already put it on PostgreSQL.
fn database_in_use(home: &Path) -> Option<postgres::Database> {
    let name = test_homes().databases.get(&home_key(home)).cloned()?;
    Some(postgres::Database { name })
}

/// Every line of `home`'s audit chain as stored, wherever it is: the rows of its PostgreSQL
/// database in order, once the home runs there; else the file log's `audit/audit.jsonl` (a
/// test may open a `Library` of its own on the local backend).
pub fn audit_text(home: &Path) -> String {
    match database_in_use(home) {
        Some(db) => db.psql("SELECT coalesce(string_agg(line, E'\\n' ORDER BY seq), '') FROM skillhost_audit"),
        None => std::fs::read_to_string(home.join("audit").join("audit.jsonl")).unwrap_or_default(),
    }
}

/// [`skillhost_command`] as an `assert_cmd` command.
pub fn skillhost(home: &Path) -> assert_cmd::Command {
    assert_cmd::Command::from_std(skillhost_command(home))
}

impl Env {
    /// [`skillhost`] in this env's home, with `--workspace` its workspace.
    pub fn skillhost(&self) -> assert_cmd::Command {
        let mut c = skillhost(self.home.path());
        c.arg("--workspace").arg(self.workspace.path());
        c
    }
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

    /// An env whose home stays on the local backend under any [`test_store`]: for a test
    /// of the local backend's own files (the file audit log damaged by hand...).
    pub fn local() -> Env {
        let env = Env::new();
        test_homes().local.insert(home_key(env.home.path()));
        env
    }

    /// The library of this env's home, on the backend [`test_store`] names.
    pub fn library(&self) -> Library {
        let mut lib = Library::open(self.home.path(), Some(self.workspace.path()), None).unwrap();
        if let Some(url) = store_for(self.home.path()) {
            let skillhost::store::StoreUrl::Postgres(url) = url.parse().unwrap() else { unreachable!() };
            lib.use_postgres(skillhost::store::PgStore::open(&url).unwrap()).unwrap();
        }
        lib
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
    match &r.outcome.result {
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
pub mod postgres;

/// The embedding model the memory tests use: `$SKILLHOST_EMBED_MODEL`, else the copy
/// `.ci/run` caches under target/models/ (`skillhost memory model install --to` puts it there).
pub fn embed_model() -> Option<PathBuf> {
    let path = std::env::var_os("SKILLHOST_EMBED_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target/models/multilingual-e5-small-q4.bin"));
    require_installed(path, "the embedding model", Needs::EmbedModel)
}
