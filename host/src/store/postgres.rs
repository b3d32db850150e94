//! [`PgStore`]: one host's handle on the shared PostgreSQL database: the connection pool and
//! the small tokio runtime the pool's connections live on, callable from sync and async code.
//!
//! Why a runtime of its own. Much of the library is sync (`Library::open`, the CLI's
//! commands, an agent step's audit append) and the async parts run on runtimes that come and
//! go: the CLI and the tests build a current-thread runtime per call. A tokio-postgres
//! connection is a task spawned on whatever runtime opened it; opened from a short-lived
//! runtime it dies with it, and the pool would hand out dead connections. So the store owns
//! one small multi-thread runtime (one worker, thread `skillhost-pg`) for as long as any
//! clone of the handle lives, and every database future runs there:
//! - async callers `.await` [`PgStore::run`], which spawns the work on the store's runtime
//!   and awaits its join handle (a tokio join handle may be awaited from any runtime, or
//!   none);
//! - sync callers use [`PgStore::block_on`], which spawns the same way and waits on a
//!   channel. Called on a thread of another runtime it blocks that thread for the round
//!   trip (like any sync I/O there; the work itself runs elsewhere, so nothing deadlocks);
//!   called on the store's own thread it would wait for itself, so it refuses.
//!
//! The alternative, a worker thread fed by a channel of boxed closures, is what this is,
//! with tokio's scheduler as the channel: the pool, statement caches and pipelining of
//! tokio-postgres keep working, and features write ordinary async code against the pool.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow, bail};
use deadpool_postgres::{Manager, ManagerConfig, Pool, PoolError, RecyclingMethod, Runtime, Timeouts};
use tokio_postgres::NoTls;
use tokio_postgres::error::SqlState;

use super::{PgTls, PgUrl};

/// The TLS client settings of a verified connection: trust `root_cert`'s certificates (a PEM
/// file) or, without one, the bundled Mozilla roots; the server's name is checked by rustls.
fn tls_config(root_cert: Option<&std::path::Path>, url: &PgUrl) -> Result<rustls::ClientConfig> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject as _;
    let mut roots = rustls::RootCertStore::empty();
    match root_cert {
        Some(path) => {
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect())
                .map_err(|e| anyhow!("{url}: cannot read the CA certificates in sslrootcert={} ({e}): it must be a PEM file of certificates", path.display()))?;
            if certs.is_empty() {
                bail!("{url}: sslrootcert={} holds no certificate (a PEM file of CA certificates)", path.display());
            }
            for cert in certs {
                roots.add(cert).map_err(|e| {
                    anyhow!("{url}: a certificate in sslrootcert={} is not usable: {e}", path.display())
                })?;
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| anyhow!("cannot set up TLS: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// Name of the store runtime's threads.
const THREAD: &str = "skillhost-pg";

/// Connections one host keeps at most. Each host of N holds up to this many, so N hosts
/// need `N * POOL_SIZE` of the server's `max_connections` (100 by default).
pub const POOL_SIZE: usize = 16;

/// A handle on the shared database; clones share the pool and the runtime (see the module
/// doc). Dropping the last clone closes the connections.
#[derive(Clone)]
pub struct PgStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore").field("url", &self.inner.url).finish_non_exhaustive()
    }
}

struct Inner {
    url: PgUrl,
    host_id: String,
    pool: Pool,
    // Last: dropped after the pool, whose connections' tasks it runs.
    runtime: OwnedRuntime,
}

/// Shut down without waiting, so that the last handle may be dropped anywhere (dropping a
/// runtime inside another runtime's task would panic).
struct OwnedRuntime(Option<tokio::runtime::Runtime>);

impl Drop for OwnedRuntime {
    fn drop(&mut self) {
        let Some(rt) = self.0.take() else { return };
        if std::thread::current().name() == Some(THREAD) {
            // The last handle went with a task of this runtime: shut it down from outside.
            let _ =
                std::thread::Builder::new().name("skillhost-pg-stop".into()).spawn(move || rt.shutdown_background());
        } else {
            rt.shutdown_background();
        }
    }
}

impl PgStore {
    /// Build the pool for `url` and make one connection, so that a wrong URL, a server that
    /// is down or a missing database is reported now, in one sentence saying what to check.
    /// Does not look at the schema: see [`PgStore::open`].
    pub fn connect(url: &PgUrl) -> Result<PgStore> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .max_blocking_threads(4)
            .thread_name(THREAD)
            .enable_all()
            .build()
            .context("cannot start the PostgreSQL store's runtime")?;
        let manager_config = ManagerConfig { recycling_method: RecyclingMethod::Fast };
        let manager = match url.tls() {
            PgTls::Off => Manager::from_config(url.config().clone(), NoTls, manager_config),
            PgTls::Verified { root_cert } => Manager::from_config(
                url.config().clone(),
                tokio_postgres_rustls::MakeRustlsConnect::new(tls_config(root_cert.as_deref(), url)?),
                manager_config,
            ),
        };
        // Last in, first out: a call takes the connection used last, whose server process
        // is the one just scheduled and whose statements are prepared; first in, first out
        // would wake the least recently used of the idle processes each time.
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .queue_mode(deadpool_postgres::QueueMode::Lifo)
            .runtime(Runtime::Tokio1)
            .timeouts(Timeouts {
                wait: Some(Duration::from_secs(30)),
                create: Some(Duration::from_secs(15)),
                recycle: Some(Duration::from_secs(5)),
            })
            .build()
            .map_err(|e| anyhow!("cannot set up the connection pool for {url}: {e}"))?;
        let store = PgStore {
            inner: Arc::new(Inner { url: url.clone(), host_id: host_id(), pool, runtime: OwnedRuntime(Some(runtime)) }),
        };
        store.block_on({
            let store = store.clone();
            async move {
                let client = store.client().await?;
                client.simple_query("SELECT 1").await.map_err(|e| store.error("cannot query", &e))?;
                Ok(())
            }
        })?;
        Ok(store)
    }

    /// What a host does at start: [`PgStore::connect`], then refuse a schema this build does
    /// not know or that needs `skillhost store migrate` (see [`PgStore::check_schema`]).
    pub fn open(url: &PgUrl) -> Result<PgStore> {
        let store = PgStore::connect(url)?;
        store.check_schema()?;
        Ok(store)
    }

    /// The URL, as shown to users (no password).
    pub fn url(&self) -> &PgUrl {
        &self.inner.url
    }

    /// The pool. Take connections only inside futures run by [`PgStore::run`] or
    /// [`PgStore::block_on`] (a connection opened on another runtime dies with it); prefer
    /// [`PgStore::client`], whose errors say what to check.
    pub fn pool(&self) -> &Pool {
        &self.inner.pool
    }

    /// The store's runtime (to spawn long-lived store tasks, e.g. a writer).
    pub fn handle(&self) -> &tokio::runtime::Handle {
        self.inner.runtime.0.as_ref().expect("the runtime lives as long as the store").handle()
    }

    /// This process as the database sees it (`hostname:pid`): recorded next to what it writes.
    pub fn host_id(&self) -> &str {
        &self.inner.host_id
    }

    /// A pooled connection; call only on the store's runtime (inside [`PgStore::run`] or
    /// [`PgStore::block_on`]).
    pub async fn client(&self) -> Result<deadpool_postgres::Client> {
        self.inner.pool.get().await.map_err(|e| self.pool_error(e))
    }

    /// Run `f`'s future on the store's runtime and await its result, from any async context.
    /// `f` gets a clone of the handle (for [`PgStore::client`]).
    pub async fn run<T, F, Fut>(&self, f: F) -> Result<T>
    where
        F: FnOnce(PgStore) -> Fut,
        Fut: Future<Output = Result<T>> + Send + 'static,
        T: Send + 'static,
    {
        let fut = f(self.clone());
        self.handle().spawn(fut).await.map_err(|e| anyhow!("a PostgreSQL store task stopped: {e}"))?
    }

    /// Run `fut` on the store's runtime and wait for it, from sync code (see the module doc).
    pub fn block_on<T, Fut>(&self, fut: Fut) -> Result<T>
    where
        Fut: Future<Output = Result<T>> + Send + 'static,
        T: Send + 'static,
    {
        if std::thread::current().name() == Some(THREAD) {
            bail!(
                "PgStore::block_on was called on the store's own runtime, where it would wait for itself; await PgStore::run instead"
            );
        }
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.handle().spawn(async move {
            let _ = tx.send(fut.await);
        });
        rx.recv().map_err(|_| anyhow!("a PostgreSQL store task stopped before it finished"))?
    }

    /// The statements that open a transaction which may hold a head row (the memory log's,
    /// the audit chain's) idle for at most `hold` (see [`PgUrl::lock_hold`]): past that the
    /// server ends it, and with it the session, releasing the lock. Set for the transaction
    /// only: the shared home's lock is held while a command runs (it may prompt) and has
    /// no such limit.
    pub fn begin_holding(hold: Duration) -> String {
        format!("BEGIN; {}", PgStore::hold_for(hold))
    }

    /// The statement that lets the open transaction sit idle for `hold` from now on.
    pub fn hold_for(hold: Duration) -> String {
        let ms = hold.as_millis().clamp(1, i32::MAX as u128);
        format!("SET LOCAL idle_in_transaction_session_timeout = {ms}")
    }

    /// `e` from the database as one sentence: what failed (`doing`), on which store, why, and
    /// for the usual causes what to do.
    pub fn error(&self, doing: &str, e: &tokio_postgres::Error) -> anyhow::Error {
        anyhow!("{doing} the PostgreSQL store {}: {}{}", self.inner.url, cause(e), advice(e))
    }

    fn pool_error(&self, e: PoolError) -> anyhow::Error {
        let url = &self.inner.url;
        match e {
            PoolError::Backend(e) => self.error("cannot connect to", &e),
            PoolError::Timeout(deadpool_postgres::TimeoutType::Wait) => anyhow!(
                "all {POOL_SIZE} connections to the PostgreSQL store {url} stayed busy for 30 s: the database is slow or a transaction is stuck (see pg_stat_activity)"
            ),
            PoolError::Timeout(_) => anyhow!(
                "cannot connect to the PostgreSQL store {url}: no answer within 15 s. Check that the server runs and the URL's host and port are right (`pg_isready` with the same host and port)"
            ),
            other => anyhow!("cannot connect to the PostgreSQL store {url}: {other}"),
        }
    }
}

/// What the server or the connection said, without tokio-postgres's generic prefixes.
fn cause(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let mut s = format!("{} {}", db.severity(), db.message());
        if let Some(detail) = db.detail() {
            s.push_str(&format!(" ({detail})"));
        }
        return s;
    }
    let mut s = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(inner) = source {
        s.push_str(&format!(": {inner}"));
        source = inner.source();
    }
    s
}

fn advice(e: &tokio_postgres::Error) -> &'static str {
    match e.code() {
        Some(c) if *c == SqlState::INVALID_CATALOG_NAME => {
            ". Create the database first (`createdb NAME`, as a user who may), then `skillhost store migrate`"
        }
        Some(c) if *c == SqlState::INVALID_PASSWORD || *c == SqlState::INVALID_AUTHORIZATION_SPECIFICATION => {
            ". Check the user (and password) in the URL, and the server's pg_hba.conf"
        }
        Some(c) if *c == SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT => {
            ". This host held a head row's lock longer than the store URL's lock_hold_secs allows without a word to the database (it was stopped, frozen or cut off), so the server ended its transaction and nothing of it was written"
        }
        Some(c) if *c == SqlState::TOO_MANY_CONNECTIONS => {
            ". The server's max_connections is reached: fewer hosts, or raise it (each host keeps up to 16 connections)"
        }
        Some(_) => "",
        None if cause(e).contains("certificate") || cause(e).contains("TLS handshake") => {
            ". The server's certificate was not accepted: name its CA with sslrootcert=/path/to/ca.pem in the URL (a PEM file; without it only the bundled public roots are trusted), and connect with a host name the certificate names"
        }
        None if cause(e).contains("server does not support TLS") => {
            ". The server has TLS off (ssl = on in postgresql.conf turns it on), or the URL names the wrong server"
        }
        None if e.as_db_error().is_none() && e.to_string().contains("connect") => {
            ". Check that the server runs and that the URL's host (a socket directory or loopback address) and port are right (`pg_isready -h HOST -p PORT`)"
        }
        None => "",
    }
}

/// `hostname:pid`.
fn host_id() -> String {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into());
    format!("{name}:{}", std::process::id())
}
