//! Where a host keeps its system of record: the local home (the default: redb, tantivy and
//! files under `<home>`, one process at a time) or a PostgreSQL database that several
//! interchangeable hosts share (`--store postgres://...`, or `[store] url` in skillhost.toml).
//!
//! Why a module of its own: the local home is owned by one process (redb and tantivy take file
//! locks, the audit chain is a file), so N hosts behind a load balancer need one database they
//! can all write. This module is the foundation every shared feature builds on: it parses and
//! checks the store URL ([`StoreUrl`]), owns the connection pool and the async runtime it runs
//! on ([`PgStore`], which sync and async code both call), and versions the schema
//! ([`migrations`]): a host refuses to run on a schema newer than it knows, or older than it
//! needs. Features keep their own tables and code (the audit chain: `crate::audit`, its
//! migration 1; the memory log every host's memory replays: [`PgMemoryLog`], migration 2;
//! the skills, grants, trust and sealed secrets every host's home is a copy of:
//! [`HomeSync`], migration 3; paused agent runs: [`agent_sessions`], migration 4); they reach the database through [`PgStore`]. [`transfer`]
//! moves a local home into an empty store and back (`skillhost store import/export`).
//!
//! URLs are libpq-style and parsed by `tokio_postgres::Config`:
//! `postgres:///skillhost?host=/run/postgresql` (a Unix socket directory),
//! `postgres://skillhost@localhost:5432/skillhost`. Only Unix sockets and loopback are
//! accepted without TLS; a remote host needs `sslmode=require` (rustls, always verified: see
//! [`PgTls`]; `sslrootcert=` names the CA) or, to accept plaintext on a network the operator
//! trusts, `sslmode=disable`.

use std::fmt;
use std::net::IpAddr;
use std::path::Path;
use std::str::FromStr;

use anyhow::{Result, anyhow, bail};
use serde::Deserialize;
use tokio_postgres::config::{Host, SslMode};

pub mod agent_sessions;
pub mod home_sync;
mod memory_log;
pub mod migrations;
mod postgres;
pub mod transfer;

pub use home_sync::HomeSync;
pub use memory_log::PgMemoryLog;
pub use migrations::{MIGRATIONS, Migration, SchemaState, SchemaStatus};
pub use postgres::PgStore;

/// The `[store]` table of `<home>/skillhost.toml`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoreTable {
    url: Option<String>,
}

/// Where the system of record lives.
#[derive(Debug, Clone)]
pub enum StoreUrl {
    /// The home directory (the default).
    Local,
    /// A PostgreSQL database shared by every host given the same URL.
    Postgres(PgUrl),
}

/// Where a [`StoreUrl`] came from (for messages and `store status`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreSource {
    Default,
    /// `--store` or `SKILLHOST_STORE`.
    Flag,
    /// `[store] url` in this file.
    ConfigFile(std::path::PathBuf),
}

impl fmt::Display for StoreSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreSource::Default => f.write_str("default"),
            StoreSource::Flag => f.write_str("--store / SKILLHOST_STORE"),
            StoreSource::ConfigFile(p) => write!(f, "[store] url in {}", p.display()),
        }
    }
}

/// A checked PostgreSQL URL: the connection settings, and a form to show that never contains
/// the password.
#[derive(Clone)]
pub struct PgUrl {
    config: Box<tokio_postgres::Config>,
    shown: String,
    tls: PgTls,
    lock_hold: std::time::Duration,
}

/// Whether connections are encrypted, and what they trust.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PgTls {
    /// Plaintext: a Unix socket or loopback (or `sslmode=disable`, asked for by name).
    Off,
    /// TLS, always verified: the server's certificate must chain to `root_cert` (a PEM
    /// file, `sslrootcert=`), or to the bundled Mozilla roots when none is given, and name
    /// the host connected to. (`sslmode=require` is therefore libpq's `verify-full`: a
    /// connection that is encrypted but to whoever answers protects nothing worth a key.)
    Verified { root_cert: Option<std::path::PathBuf> },
}

impl fmt::Debug for PgUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.shown)
    }
}

impl fmt::Display for PgUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.shown)
    }
}

/// Where libpq looks when a URL names no host (Debian's socket directory).
pub const DEFAULT_SOCKET_DIR: &str = "/run/postgresql";

const URL_FORMS: &str =
    "postgres:///DBNAME?host=/run/postgresql (a Unix socket directory) or postgres://USER@localhost:5432/DBNAME";

impl PgUrl {
    /// The connection settings (host, port, user, database...).
    pub fn config(&self) -> &tokio_postgres::Config {
        &self.config
    }

    /// Whether and how connections are encrypted.
    pub fn tls(&self) -> &PgTls {
        &self.tls
    }

    /// How long a host may leave the memory log's or the audit chain's head row locked
    /// without a word to the database (`lock_hold_secs=`, default [`DEFAULT_LOCK_HOLD`]):
    /// the server then ends that host's transaction and session (PostgreSQL's
    /// `idle_in_transaction_session_timeout`, set for those transactions only), so a host
    /// that was stopped, frozen or cut off while holding a head does not stop every other
    /// host's memory writes and audit lines for good. A running host holding the memory
    /// log's head keeps its connection busy, so a long write is not cut short.
    pub fn lock_hold(&self) -> std::time::Duration {
        self.lock_hold
    }

    fn parse(url: &str) -> Result<PgUrl> {
        let (url_for_driver, wanted) = own_params(url)?;
        let mut config = tokio_postgres::Config::from_str(&url_for_driver)
            .map_err(|e| anyhow!("`{}` is not a valid PostgreSQL URL ({e}); write it as {URL_FORMS}", redact(url)))?;
        if config.get_hosts().is_empty() && config.get_hostaddrs().is_empty() {
            config.host_path(DEFAULT_SOCKET_DIR);
        }
        let shown = show(&config);
        let tls = match config.get_ssl_mode() {
            SslMode::Require => {
                if config.get_hosts().iter().any(|h| matches!(h, Host::Unix(_))) {
                    bail!(
                        "{shown} asks for TLS on a Unix socket, where PostgreSQL never offers it: leave sslmode out for a socket, or name a TCP host"
                    );
                }
                PgTls::Verified { root_cert: wanted.root_cert.clone() }
            }
            SslMode::Disable => PgTls::Off,
            _ => {
                let remote: Vec<String> = config
                    .get_hosts()
                    .iter()
                    .filter_map(|h| match h {
                        Host::Tcp(name) if !is_loopback(name) => Some(name.clone()),
                        _ => None,
                    })
                    .chain(config.get_hostaddrs().iter().filter(|a| !a.is_loopback()).map(IpAddr::to_string))
                    .collect();
                if !remote.is_empty() {
                    bail!(
                        "{shown}: the connection to {} would not be encrypted: add sslmode=require to the URL for TLS (verified against the bundled Mozilla roots, or your CA with sslrootcert=/path/to/ca.pem), or sslmode=disable to accept plaintext on a network you trust",
                        remote.join(", ")
                    );
                }
                if wanted.root_cert.is_some() {
                    bail!("{shown}: sslrootcert is given but TLS is not asked for: add sslmode=require");
                }
                PgTls::Off
            }
        };
        if tls == PgTls::Off && wanted.root_cert.is_some() {
            bail!("{shown}: sslrootcert is given with sslmode=disable: drop one of them");
        }
        config.application_name("skillhost");
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(std::time::Duration::from_secs(10));
        }
        Ok(PgUrl { config: Box::new(config), shown, tls, lock_hold: wanted.lock_hold })
    }
}

/// See [`PgUrl::lock_hold`]. A running host keeps the connection of a head it holds busy
/// (a statement every quarter of this), however long its write takes, so this is only how
/// long the other hosts wait for one that stopped: it covers a long pause of a loaded
/// machine or a network blip.
pub const DEFAULT_LOCK_HOLD: std::time::Duration = std::time::Duration::from_secs(30);

/// The settings of a URL the driver does not read itself.
struct OwnParams {
    root_cert: Option<std::path::PathBuf>,
    lock_hold: std::time::Duration,
}

impl Default for OwnParams {
    fn default() -> OwnParams {
        OwnParams { root_cert: None, lock_hold: DEFAULT_LOCK_HOLD }
    }
}

/// `url` without the parameters the driver does not know (`sslrootcert=PATH`;
/// `sslmode=verify-full`, given to it as `require`: every TLS connection here is verified;
/// `lock_hold_secs=N`), and those settings. `sslmode=verify-ca` (the chain without the host
/// name) is refused.
fn own_params(url: &str) -> Result<(String, OwnParams)> {
    let Some((base, query)) = url.split_once('?') else { return Ok((url.to_string(), OwnParams::default())) };
    let mut wanted = OwnParams::default();
    let mut kept = Vec::new();
    for pair in query.split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let decoded = || percent_encoding::percent_decode_str(value).decode_utf8_lossy().into_owned();
        match (key, value) {
            ("sslrootcert", _) if value.is_empty() => {
                bail!("`{}`: sslrootcert needs the path of a PEM file of CA certificates", redact(url))
            }
            ("sslrootcert", _) => wanted.root_cert = Some(decoded().into()),
            ("lock_hold_secs", _) => {
                wanted.lock_hold = match value.parse::<u64>() {
                    Ok(secs @ 1..=86_400) => std::time::Duration::from_secs(secs),
                    _ => bail!(
                        "`{}`: lock_hold_secs must be a whole number of seconds from 1 to 86400 (how long a host may hold the memory log's or audit chain's head idle; default {})",
                        redact(url),
                        DEFAULT_LOCK_HOLD.as_secs()
                    ),
                }
            }
            ("sslmode", "verify-full") => kept.push("sslmode=require".to_string()),
            ("sslmode", "verify-ca") => bail!(
                "`{}`: sslmode=verify-ca checks the certificate but not that it names the server; skillhost always checks both: use sslmode=verify-full (or require, the same here)",
                redact(url)
            ),
            _ => kept.push(pair.to_string()),
        }
    }
    let url = if kept.is_empty() { base.to_string() } else { format!("{base}?{}", kept.join("&")) };
    Ok((url, wanted))
}

fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost") || host.parse::<IpAddr>().is_ok_and(|a| a.is_loopback())
}

/// `url` with anything between `://` and `@` (user and password) reduced to the user.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_string() };
    match rest.split_once('@') {
        Some((creds, tail)) if !creds.contains('/') => {
            let user = creds.split(':').next().unwrap_or_default();
            format!("{scheme}://{user}@{tail}")
        }
        _ => url.to_string(),
    }
}

/// `postgres://USER@HOSTS:PORT/DB` (or `postgres://USER@/DB?host=DIR` for a Unix socket)
/// from the parsed settings: never the password.
fn show(config: &tokio_postgres::Config) -> String {
    let user = config.get_user().map(|u| format!("{u}@")).unwrap_or_default();
    let ports = config.get_ports();
    let port_of = |i: usize| ports.get(i).or(ports.first()).copied().unwrap_or(5432);
    let db = config.get_dbname().unwrap_or_default();
    let hosts = config.get_hosts();
    if !hosts.is_empty() && hosts.iter().all(|h| matches!(h, Host::Unix(_))) {
        let dirs: Vec<String> = hosts
            .iter()
            .filter_map(|h| if let Host::Unix(d) = h { Some(d.display().to_string()) } else { None })
            .collect();
        let port = if port_of(0) == 5432 { String::new() } else { format!("&port={}", port_of(0)) };
        return format!("postgres://{user}/{db}?host={}{port}", dirs.join(","));
    }
    let hosts: Vec<String> = hosts
        .iter()
        .enumerate()
        .map(|(i, h)| match h {
            Host::Tcp(name) if name.contains(':') => format!("[{name}]:{}", port_of(i)),
            Host::Tcp(name) => format!("{name}:{}", port_of(i)),
            Host::Unix(dir) => format!("{}:{}", dir.display(), port_of(i)),
        })
        .chain(config.get_hostaddrs().iter().map(|a| a.to_string()))
        .collect();
    format!("postgres://{user}{}/{db}", hosts.join(","))
}

impl FromStr for StoreUrl {
    type Err = anyhow::Error;

    /// `local`, or a `postgres://` / `postgresql://` URL.
    fn from_str(s: &str) -> Result<StoreUrl> {
        let s = s.trim();
        if s == "local" {
            return Ok(StoreUrl::Local);
        }
        if s.starts_with("postgres://") || s.starts_with("postgresql://") {
            return Ok(StoreUrl::Postgres(PgUrl::parse(s)?));
        }
        if s.starts_with("postgres:") || s.starts_with("postgresql:") {
            bail!("`{}` is not a PostgreSQL URL: write it as {URL_FORMS}", redact(s));
        }
        bail!(
            "unknown store `{}`: use `local` (the home directory, the default) or a PostgreSQL URL such as {URL_FORMS}",
            redact(s)
        )
    }
}

impl fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreUrl::Local => f.write_str("local"),
            StoreUrl::Postgres(url) => url.fmt(f),
        }
    }
}

impl StoreUrl {
    /// The store in force: `flag` (`--store` / `SKILLHOST_STORE`) when given, else `[store] url`
    /// in `<home>/skillhost.toml`, else the local home. A bad value is an error naming where it
    /// came from.
    pub fn resolve(flag: Option<&str>, home: &Path) -> Result<(StoreUrl, StoreSource)> {
        if let Some(flag) = flag {
            let url = flag.parse().map_err(|e: anyhow::Error| anyhow!("--store: {e:#}"))?;
            return Ok((url, StoreSource::Flag));
        }
        let file = crate::config::ConfigFile::load(home).map_err(|e| anyhow!("{e}"))?;
        let Some(url) = file.table::<StoreTable>("store").map_err(|e| anyhow!("{e}"))?.and_then(|t| t.url) else {
            return Ok((StoreUrl::Local, StoreSource::Default));
        };
        let source = StoreSource::ConfigFile(file.path().to_path_buf());
        let url = url
            .parse()
            .map_err(|e: anyhow::Error| anyhow!("`url` in the [store] table of {}: {e:#}", file.path().display()))?;
        Ok((url, source))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_and_postgres_urls_parse_and_others_are_refused_with_the_forms() {
        assert!(matches!("local".parse::<StoreUrl>().unwrap(), StoreUrl::Local));
        let StoreUrl::Postgres(url) = "postgres:///skillhost?host=/run/postgresql".parse::<StoreUrl>().unwrap() else {
            panic!("not postgres")
        };
        assert_eq!(url.config().get_dbname(), Some("skillhost"));
        assert_eq!(url.config().get_hosts(), &[Host::Unix("/run/postgresql".into())]);
        // No host: Debian's socket directory, as libpq does.
        let StoreUrl::Postgres(url) = "postgresql:///db".parse::<StoreUrl>().unwrap() else { panic!() };
        assert_eq!(url.config().get_hosts(), &[Host::Unix(DEFAULT_SOCKET_DIR.into())]);
        assert!(matches!("postgres://u@127.0.0.1:5433/db".parse::<StoreUrl>().unwrap(), StoreUrl::Postgres(_)));
        assert!(matches!("postgres://u@[::1]/db".parse::<StoreUrl>().unwrap(), StoreUrl::Postgres(_)));

        let e = "redis://x".parse::<StoreUrl>().unwrap_err().to_string();
        assert!(e.contains("unknown store") && e.contains("postgres:///"), "{e}");
        let e = "postgres://u@localhost/db?nonsense=1".parse::<StoreUrl>().unwrap_err().to_string();
        assert!(e.contains("not a valid PostgreSQL URL"), "{e}");
    }

    fn pg(url: &str) -> PgUrl {
        match url.parse::<StoreUrl>().unwrap() {
            StoreUrl::Postgres(u) => u,
            StoreUrl::Local => panic!("not postgres"),
        }
    }

    #[test]
    fn tls_is_verified_remote_plaintext_is_refused_and_passwords_never_shown() {
        // TLS, verified: the bundled roots, or the CA file given; verify-full is the same.
        let url = pg("postgres://u:hunter2@db.example.com/db?sslmode=require");
        assert_eq!(url.tls(), &PgTls::Verified { root_cert: None });
        let url = pg(
            "postgres://u@db.example.com:6432/db?sslmode=verify-full&sslrootcert=/etc/ssl/my%20ca.pem&connect_timeout=5",
        );
        assert_eq!(url.tls(), &PgTls::Verified { root_cert: Some("/etc/ssl/my ca.pem".into()) });
        assert_eq!(url.config().get_ssl_mode(), SslMode::Require);
        assert_eq!(url.config().get_connect_timeout(), Some(&std::time::Duration::from_secs(5)));
        assert_eq!(url.to_string(), "postgres://u@db.example.com:6432/db");
        for (bad, says) in [
            ("postgres://u:hunter2@db.example.com/db?sslmode=verify-ca", "verify-full"),
            ("postgres://u:hunter2@db.example.com/db?sslrootcert=", "PEM file"),
            ("postgres://u:hunter2@localhost/db?sslrootcert=/ca.pem", "sslmode=require"),
            ("postgres://u:hunter2@db.example.com/db?sslmode=disable&sslrootcert=/ca.pem", "drop one"),
            ("postgres://u:hunter2@/db?host=/run/postgresql&sslmode=require", "Unix socket"),
        ] {
            let e = bad.parse::<StoreUrl>().unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
            assert!(!e.contains("hunter2"), "{e}");
        }
        assert_eq!(pg("postgres://u@localhost/db").tls(), &PgTls::Off);
        let e = "postgres://u:hunter2@db.example.com/db".parse::<StoreUrl>().unwrap_err().to_string();
        assert!(e.contains("db.example.com") && e.contains("sslmode=disable") && e.contains("sslmode=require"), "{e}");
        assert!(!e.contains("hunter2"), "{e}");
        let ok = "postgres://u:hunter2@db.example.com/db?sslmode=disable".parse::<StoreUrl>().unwrap();
        assert_eq!(ok.to_string(), "postgres://u@db.example.com:5432/db");
        let e = "postgres://u:hunter2@localhost/db?bogus".parse::<StoreUrl>().unwrap_err().to_string();
        assert!(!e.contains("hunter2"), "{e}");
    }

    #[test]
    fn lock_hold_secs_is_read_bounded_and_not_passed_to_the_driver() {
        assert_eq!(pg("postgres:///db?host=/tmp").lock_hold(), DEFAULT_LOCK_HOLD);
        let url = pg("postgres:///db?host=/tmp&lock_hold_secs=5&connect_timeout=3");
        assert_eq!(url.lock_hold(), std::time::Duration::from_secs(5));
        for (given, secs) in [("1", 1), ("86400", 86_400)] {
            let url = pg(&format!("postgres:///db?lock_hold_secs={given}&host=/tmp"));
            assert_eq!(url.lock_hold(), std::time::Duration::from_secs(secs));
        }
        assert_eq!(url.config().get_connect_timeout(), Some(&std::time::Duration::from_secs(3)));
        for bad in ["0", "-1", "1.5", "", "86401", "ten"] {
            let e = format!("postgres://u:hunter2@/db?host=/tmp&lock_hold_secs={bad}")
                .parse::<StoreUrl>()
                .unwrap_err()
                .to_string();
            assert!(e.contains("lock_hold_secs must be a whole number of seconds from 1 to 86400"), "{bad}: {e}");
            assert!(!e.contains("hunter2"), "{e}");
        }
    }

    #[test]
    fn the_config_file_is_read_and_the_flag_wins() {
        let home = tempfile::tempdir().unwrap();
        assert!(matches!(StoreUrl::resolve(None, home.path()).unwrap(), (StoreUrl::Local, StoreSource::Default)));
        std::fs::write(home.path().join("skillhost.toml"), "[store]\nurl = \"postgres:///x?host=/tmp\"\n").unwrap();
        let (url, source) = StoreUrl::resolve(None, home.path()).unwrap();
        assert_eq!(url.to_string(), "postgres:///x?host=/tmp");
        assert!(matches!(source, StoreSource::ConfigFile(_)));
        assert!(matches!(StoreUrl::resolve(Some("local"), home.path()).unwrap(), (StoreUrl::Local, StoreSource::Flag)));
        std::fs::write(home.path().join("skillhost.toml"), "[store]\nurl = \"mysql://x\"\n").unwrap();
        let e = StoreUrl::resolve(None, home.path()).unwrap_err().to_string();
        assert!(e.contains("[store]") && e.contains("skillhost.toml") && e.contains("unknown store"), "{e}");
        std::fs::write(home.path().join("skillhost.toml"), "[store]\nuri = \"local\"\n").unwrap();
        let e = StoreUrl::resolve(None, home.path()).unwrap_err().to_string();
        assert!(e.contains("uri"), "{e}");
    }
}
