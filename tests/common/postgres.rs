//! A throwaway PostgreSQL server for the store tests: one per test binary, started on first
//! use with Debian's binaries (`bash .ci/postgres` installs them) in a temporary directory,
//! listening on a Unix socket in that directory only (`listen_addresses=''`: never TCP),
//! trust authentication for its own superuser. Each test gets a fresh database
//! ([`database`]). The server stops when the test process ends, however it ends: a watchdog
//! child holds the read end of a pipe whose write end only this process has, and when that
//! closes it runs `pg_ctl stop -m immediate` and removes the directory.
//!
//! initdb and the server refuse to run as root; as root (CI containers) they run as the
//! `postgres` user the package creates, in a directory handed to it. A missing PostgreSQL
//! fails the test naming the installer; nothing passes without a server.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};

/// The server's superuser (trust authentication, so no password).
pub const USER: &str = "skillhost";

pub struct Server {
    /// Holds the server's data directory and socket.
    pub dir: PathBuf,
    /// The socket directory (`host=` in URLs).
    pub socket_dir: PathBuf,
    /// For [`tls_server`]: its loopback TCP port and the CA (PEM) that signed its certificate.
    pub tls: Option<TlsListener>,
    bin: PathBuf,
    /// The user the server runs as, when this process is root.
    run_as: Option<String>,
    /// The watchdog: its stdin is the pipe that closes when this process ends.
    _watchdog: Mutex<Child>,
}

/// The directory holding initdb, pg_ctl, postgres and psql: the newest under
/// /usr/lib/postgresql, else the PATH's. Fails naming the installer.
fn bin_dir() -> PathBuf {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|rd| rd.flatten().map(|e| e.path().join("bin")).filter(|b| b.join("initdb").exists()).collect())
        .unwrap_or_default();
    dirs.sort_by_key(|d| {
        d.parent().and_then(|v| v.file_name()).and_then(|v| v.to_str()).and_then(|v| v.parse::<u32>().ok()).unwrap_or(0)
    });
    if let Some(d) = dirs.pop() {
        return d;
    }
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).find(|d| d.join("initdb").exists() && d.join("pg_ctl").exists()))
        .unwrap_or_default();
    on_path.unwrap_or_else(|| {
        panic!(
            "PostgreSQL is not installed (no initdb under /usr/lib/postgresql/*/bin or on PATH): run `bash .ci/postgres` (or `just test`, which runs it)"
        )
    })
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

impl Server {
    fn command(&self, tool: &str) -> Command {
        command_as(&self.bin, self.run_as.as_deref(), tool)
    }

    fn start() -> Server {
        Server::start_with(false)
    }

    /// With `tls`, the server also listens on a free loopback TCP port with a certificate for
    /// `localhost` signed by a CA made here, and accepts TCP connections only over TLS.
    fn start_with(tls: bool) -> Server {
        let bin = bin_dir();
        let run_as = is_root().then(|| "postgres".to_string());
        let dir = tempfile::Builder::new().prefix("skillhost-pg-").tempdir().unwrap().keep();
        let (data, socket_dir, log) = (dir.join("data"), dir.join("sock"), dir.join("server.log"));
        std::fs::create_dir_all(&socket_dir).unwrap();
        if let Some(user) = &run_as {
            let out = Command::new("chown").arg("-R").arg(format!("{user}:")).arg(&dir).output().unwrap();
            assert!(
                out.status.success(),
                "cannot hand {} to the `{user}` user PostgreSQL runs as (initdb refuses root): {}; `bash .ci/postgres` creates that user",
                dir.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        // The watchdog first, so that nothing below leaks a server if it fails.
        let watchdog = Command::new("sh")
            .arg("-c")
            .arg(
                r#"trap '' INT HUP TERM; cat >/dev/null; "$@" >/dev/null 2>&1; rm -rf "$DIR""#
                    .replace("$DIR", &dir.display().to_string()),
            )
            .arg("watchdog")
            .args(stop_args(&bin, run_as.as_deref(), &data))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("cannot start sh for the PostgreSQL watchdog");
        let mut server = Server {
            dir: dir.clone(),
            socket_dir: socket_dir.clone(),
            tls: None,
            bin,
            run_as,
            _watchdog: Mutex::new(watchdog),
        };
        let out = server
            .command("initdb")
            .args(["-A", "trust", "-U", USER, "-E", "UTF8", "--locale=C", "--no-sync", "-D"])
            .arg(&data)
            .output()
            .unwrap_or_else(|e| panic!("cannot run initdb: {e}; run `bash .ci/postgres`"));
        assert!(
            out.status.success(),
            "initdb failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        // Short socket path: a Unix socket path is limited to ~107 bytes.
        let mut options = format!(
            "-c listen_addresses='' -k {} -c fsync=on -c max_connections=400 -c shared_buffers=32MB",
            socket_dir.display()
        );
        if tls {
            let listener = server.make_tls(&data);
            options = format!(
                "-c listen_addresses=127.0.0.1 -p {} -k {} -c fsync=on -c max_connections=100 -c shared_buffers=16MB -c ssl=on -c ssl_cert_file=server.pem -c ssl_key_file=server.key",
                listener.port,
                socket_dir.display()
            );
            server.tls = Some(listener);
        }
        let out = server
            .command("pg_ctl")
            .arg("-D")
            .arg(&data)
            .arg("-o")
            .arg(options)
            .arg("-l")
            .arg(&log)
            .args(["-w", "-t", "60", "start"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "pg_ctl start failed: {}{}\nserver log:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        server
    }

    /// The certificates of a TLS server (in `data`, which initdb made) and a pg_hba.conf
    /// that takes TCP connections over TLS only.
    fn make_tls(&self, data: &Path) -> TlsListener {
        let certs = self.dir.join("certs");
        std::fs::create_dir_all(&certs).unwrap();
        let ca = make_ca(&certs, "ca");
        let openssl = |args: &[&str]| {
            let out = Command::new("openssl").args(args).current_dir(&certs).output().expect(
                "openssl is needed for the TLS store test: `bash .ci/oci-tools` installs it (`just test` runs it)",
            );
            assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        };
        std::fs::write(
            certs.join("server.ext"),
            "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        openssl(&[
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=localhost",
        ]);
        openssl(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.pem",
            "-days",
            "2",
            "-extfile",
            "server.ext",
        ]);
        for file in ["server.pem", "server.key"] {
            std::fs::copy(certs.join(file), data.join(file)).unwrap();
        }
        let hba = "local all all trust\nhostssl all all 127.0.0.1/32 trust\n";
        std::fs::write(data.join("pg_hba.conf"), hba).unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(data.join("server.key"), std::fs::Permissions::from_mode(0o600)).unwrap();
        if let Some(user) = &self.run_as {
            let out = Command::new("chown").arg("-R").arg(format!("{user}:")).arg(data).output().unwrap();
            assert!(out.status.success(), "chown {}: {}", data.display(), String::from_utf8_lossy(&out.stderr));
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        TlsListener { port, ca }
    }

    /// `psql` against database `db` as the superuser; stdout, or a failure with stderr.
    pub fn psql(&self, db: &str, sql: &str) -> String {
        let out = self.try_psql(db, sql);
        match out {
            Ok(s) => s,
            Err(e) => panic!("psql -c {sql:?} on {db}: {e}"),
        }
    }

    /// `psql` as [`Server::psql`], returning stderr on failure.
    pub fn try_psql(&self, db: &str, sql: &str) -> Result<String, String> {
        let out = Command::new(self.bin.join("psql"))
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h"])
            .arg(&self.socket_dir)
            .args(["-p", &self.tls.as_ref().map_or(5432, |t| t.port).to_string()])
            .args(["-U", USER, "-d", db, "-c", sql])
            .output()
            .unwrap();
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }
}

fn command_as(bin: &Path, run_as: Option<&str>, tool: &str) -> Command {
    match run_as {
        Some(user) => {
            let mut c = Command::new("runuser");
            c.args(["-u", user, "--"]).arg(bin.join(tool));
            c
        }
        None => Command::new(bin.join(tool)),
    }
}

fn stop_args(bin: &Path, run_as: Option<&str>, data: &Path) -> Vec<String> {
    let mut v = Vec::new();
    if let Some(user) = run_as {
        v.extend(["runuser".to_string(), "-u".into(), user.into(), "--".into()]);
    }
    v.push(bin.join("pg_ctl").display().to_string());
    v.extend([
        "-D".to_string(),
        data.display().to_string(),
        "-m".into(),
        "immediate".into(),
        "-w".into(),
        "stop".into(),
    ]);
    v
}

/// The test binary's server, started on first use.
pub fn server() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER.get_or_init(Server::start)
}

/// A [`Server::start_with`] TLS server's TCP side.
pub struct TlsListener {
    /// Its loopback port.
    pub port: u16,
    /// The CA certificate (PEM) that signed the server's certificate.
    pub ca: PathBuf,
}

/// A CA of its own in `dir` (`NAME.key`, `NAME.pem`): its certificate's path.
pub fn make_ca(dir: &Path, name: &str) -> PathBuf {
    let out = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2"])
        .args([
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.pem"),
            "-subj",
            &format!("/CN=skillhost test {name}"),
        ])
        .args(["-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"])
        .current_dir(dir)
        .output()
        .expect("openssl is needed for the TLS store test: `bash .ci/oci-tools` installs it (`just test` runs it)");
    assert!(out.status.success(), "openssl req -x509: {}", String::from_utf8_lossy(&out.stderr));
    dir.join(format!("{name}.pem"))
}

/// A second server of the test binary, reachable over loopback TCP with TLS only (started on
/// first use; its Unix socket, for [`Server::psql`], takes plain connections).
pub fn tls_server() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER.get_or_init(|| Server::start_with(true))
}

/// A fresh, empty database of the test binary's server.
pub struct Database {
    pub name: String,
}

impl Database {
    /// `postgres:///NAME?host=SOCKET&user=skillhost`: what `--store` takes.
    pub fn url(&self) -> String {
        format!("postgres://{USER}@/{}?host={}", self.name, server().socket_dir.display())
    }

    /// The URL parsed as skillhost parses it.
    pub fn store_url(&self) -> skillhost::store::PgUrl {
        match self.url().parse::<skillhost::store::StoreUrl>().unwrap() {
            skillhost::store::StoreUrl::Postgres(u) => u,
            skillhost::store::StoreUrl::Local => unreachable!(),
        }
    }

    /// A new connection pool (as one more host would have) on this database.
    pub fn connect(&self) -> skillhost::store::PgStore {
        skillhost::store::PgStore::connect(&self.store_url()).unwrap()
    }

    /// [`Database::connect`] after migrating: what a host has once `store migrate` ran.
    pub fn migrated(&self) -> skillhost::store::PgStore {
        let store = self.connect();
        store.migrate().unwrap();
        store
    }

    pub fn psql(&self, sql: &str) -> String {
        server().psql(&self.name, sql)
    }

    pub fn try_psql(&self, sql: &str) -> Result<String, String> {
        server().try_psql(&self.name, sql)
    }
}

/// A new database on the test binary's server (its own name; left for the server's
/// removal at exit).
pub fn database() -> Database {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let server = server();
    let name = format!("t{}_{}", std::process::id(), NEXT.fetch_add(1, Ordering::SeqCst));
    server.psql("postgres", &format!("CREATE DATABASE {name}"));
    Database { name }
}
