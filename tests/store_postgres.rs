//! The PostgreSQL store on a real server (tests/common/postgres.rs: a throwaway PostgreSQL
//! per test binary, a database per test): schema migrations and the hosts' refusals, URLs,
//! and the sync/async bridge.

mod common;
#[path = "common/postgres.rs"]
mod postgres;

use common::Env;
use serde_json::Value;
use skillhost::store::{PgStore, SchemaState, StoreUrl};

fn json_of(out: &[u8]) -> Value {
    serde_json::from_slice(out).unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(out)))
}

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn migrate_and_status_and_hosts_refuse_a_schema_they_do_not_run_on() {
    let db = postgres::database();
    let env = Env::new();
    let url = db.url();

    // Never migrated: a host refuses, saying what to run; status says behind (exit 1).
    let out = env.skillhost().args(["--store", &url, "audit", "verify"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr_of(&out));
    let e = stderr_of(&out);
    assert!(e.contains("no skillhost schema yet") && e.contains("skillhost store migrate"), "{e}");
    let out = env.skillhost().args(["--store", &url, "--json", "store", "status"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let status = json_of(&out.stdout);
    assert_eq!((status["version"].as_i64(), status["state"].as_str()), (Some(0), Some("behind")), "{status}");
    assert_eq!(status["pending"].as_array().unwrap().len(), skillhost::store::MIGRATIONS.len());

    // Migrate applies every migration once; again, nothing.
    let known = skillhost::store::migrations::known_version();
    let out = env.skillhost().args(["--store", &url, "--json", "store", "migrate"]).assert().success();
    let applied = json_of(&out.get_output().stdout);
    assert_eq!(applied["applied"].as_array().unwrap().len(), known as usize, "{applied}");
    assert_eq!(applied["version"].as_i64(), Some(known as i64));
    let out = env.skillhost().args(["--store", &url, "store", "migrate"]).assert().success();
    assert!(String::from_utf8_lossy(&out.get_output().stdout).contains("nothing to apply"));
    assert_eq!(db.psql("SELECT count(*) FROM skillhost_schema"), known.to_string());

    // Current: status exit 0, the host runs (an empty chain verifies).
    let out = env.skillhost().args(["--store", &url, "--json", "store", "status"]).assert().success();
    assert_eq!(json_of(&out.get_output().stdout)["state"], "current");
    let out = env.skillhost().args(["--store", &url, "audit", "verify"]).assert().success();
    let said = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
    assert!(said.contains("intact: 0 entries"), "{said}");

    // A newer skillhost migrated it: hosts of this build refuse, naming both versions, and so
    // does migrate (nothing changed).
    let newer = known + 1;
    db.psql(&format!(
        "INSERT INTO skillhost_schema (version, name, applied_by) VALUES ({newer}, 'from the future', 'test')"
    ));
    let out = env.skillhost().args(["--store", &url, "audit", "verify"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let e = stderr_of(&out);
    assert!(
        e.contains(&format!("schema version {newer}, newer than the version {known}"))
            && e.contains("Upgrade skillhost"),
        "{e}"
    );
    let out = env.skillhost().args(["--store", &url, "store", "migrate"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr_of(&out).contains("nothing was changed"), "{}", stderr_of(&out));
    let store = db.connect();
    assert_eq!(store.schema_status().unwrap().state, SchemaState::Ahead);
    assert!(PgStore::open(&db.store_url()).is_err());

    // [store] url in skillhost.toml is read like the flag.
    std::fs::write(env.home.path().join("skillhost.toml"), format!("[store]\nurl = \"{url}\"\n")).unwrap();
    let out = env.skillhost().args(["--json", "store", "status"]).output().unwrap();
    let status = json_of(&out.stdout);
    assert_eq!((status["state"].as_str(), status["version"].as_i64()), (Some("ahead"), Some(newer as i64)), "{status}");
    assert!(status["source"].as_str().unwrap().contains("skillhost.toml"), "{status}");
}

#[test]
fn bad_urls_and_unreachable_servers_are_one_clear_error() {
    let env = Env::new();
    let cases: [(&str, &[&str]); 4] = [
        ("mysql://localhost/x", &["unknown store", "postgres://"]),
        ("postgres://u:secret@db.example.com/x", &["would not be encrypted", "sslmode=disable"]),
        ("postgres://u:secret@localhost/x?sslmode=require", &["TLS", "not support"]),
        (
            "postgres://u@/x?host=/nonexistent-socket-dir",
            &["cannot connect to", "/nonexistent-socket-dir", "pg_isready"],
        ),
    ];
    for (url, wanted) in cases {
        let out = env.skillhost().args(["--store", url, "audit", "list"]).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{url}: {}", stderr_of(&out));
        let e = stderr_of(&out);
        assert!(wanted.iter().all(|w| e.contains(w)), "{url}: {e}");
        assert!(!e.contains("secret") && !e.contains("panicked"), "{url}: {e}");
        assert_eq!(e.trim().lines().count(), 1, "one line: {e}");
    }
    // A database that does not exist on a running server.
    let server = postgres::server();
    let url = format!("postgres://{}@/no_such_db?host={}", postgres::USER, server.socket_dir.display());
    let out = env.skillhost().args(["--store", &url, "store", "status"]).output().unwrap();
    let e = stderr_of(&out);
    assert!(e.contains("no_such_db") && e.contains("does not exist") && e.contains("createdb"), "{e}");
}

#[test]
fn the_store_url_parses_libpq_style_and_the_bridge_serves_sync_and_async_callers() {
    let db = postgres::database();
    let StoreUrl::Postgres(url) = db.url().parse::<StoreUrl>().unwrap() else { panic!("not postgres") };
    assert_eq!(url.config().get_dbname(), Some(db.name.as_str()));
    assert_eq!(url.config().get_user(), Some(postgres::USER));
    // connect() makes a connection: a live server answers.
    let store = PgStore::connect(&url).unwrap();
    assert_eq!(store.schema_status().unwrap().version, 0);
    assert!(store.migrate().unwrap().len() == skillhost::store::MIGRATIONS.len());
    assert!(store.migrate().unwrap().is_empty());
    // block_on from inside another runtime's task (a current-thread runtime, as the CLI's)
    // and run() from async code both reach the database.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let n: i64 = rt.block_on(async {
        let blocking = store.block_on({
            let s = store.clone();
            async move { Ok(s.client().await?.query_one("SELECT 41::int8", &[]).await?.get::<_, i64>(0)) }
        });
        let awaited = store
            .run(|s| async move { Ok(s.client().await?.query_one("SELECT 1::int8", &[]).await?.get::<_, i64>(0)) })
            .await;
        blocking.unwrap() + awaited.unwrap()
    });
    assert_eq!(n, 42);
    drop(rt);
    // The last handle may drop inside an async task without panicking.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async move { drop(store) });
}
