//! The PostgreSQL store on a real server (tests/common/postgres.rs: a throwaway PostgreSQL
//! per test binary, a database per test): schema migrations and the hosts' refusals, the one
//! audit chain that several hosts (pools, threads, processes) append to, tampering found by
//! `audit verify`, and a skill call's line landing in the database.

mod common;

use std::collections::BTreeMap;

use common::Env;
use serde_json::Value;
use skillhost::audit::{AuditLog, EntryKind, Problem, VerifyError, new_entry};
use skillhost::store::{PgStore, SchemaState, StoreUrl};

fn json_of(out: &[u8]) -> Value {
    serde_json::from_slice(out).unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(out)))
}

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// An entry whose `marker` names who wrote it.
fn marked(session: &str, marker: &str) -> serde_json::Map<String, Value> {
    let mut e = new_entry(EntryKind::Call, session);
    e.insert("skill".into(), "writer".into());
    e.insert("status".into(), "success".into());
    e.insert("marker".into(), marker.into());
    e
}

#[test]
fn migrate_and_status_and_hosts_refuse_a_schema_they_do_not_run_on() {
    let db = common::postgres::database();
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
    assert!(said.contains("intact: 0 entries") && said.contains("skillhost_audit"), "{said}");

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
        ("postgres://u:secret@localhost/x?sslmode=verify-ca", &["verify-ca", "verify-full"]),
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
    let server = common::postgres::server();
    let url = format!("postgres://{}@/no_such_db?host={}", common::postgres::USER, server.socket_dir.display());
    let out = env.skillhost().args(["--store", &url, "store", "status"]).output().unwrap();
    let e = stderr_of(&out);
    assert!(e.contains("no_such_db") && e.contains("does not exist") && e.contains("createdb"), "{e}");
}

#[test]
fn three_hosts_from_many_threads_and_two_processes_append_one_linear_chain() {
    const THREADS: usize = 4;
    const EACH: usize = 40;
    let db = common::postgres::database();
    db.migrated();
    // Three hosts: three pools, three writers, each appended to from several threads.
    let hosts: Vec<AuditLog> = (0..3).map(|_| AuditLog::postgres(&db.connect())).collect();
    // And two skillhost processes calling a skill over and over meanwhile.
    let env = Env::new();
    let dir = env.probe_as("probe", "");
    env.skillhost().args(["skill", "install"]).arg(&dir).arg("--yes").assert().success();
    let url = db.url();
    let processes: Vec<_> = (0..2)
        .map(|p| {
            let (home, workspace, url) =
                (env.home.path().to_path_buf(), env.workspace.path().to_path_buf(), url.clone());
            std::thread::spawn(move || {
                for i in 0..4 {
                    let out = common::skillhost_command(&home)
                        .arg("--workspace")
                        .arg(&workspace)
                        .args(["--store", &url, "skill", "run", "probe", "--session", &format!("proc{p}-{i}")])
                        .args(["-p", "mode=noop"])
                        .output()
                        .unwrap();
                    assert!(out.status.success(), "process {p} run {i}: {}", String::from_utf8_lossy(&out.stderr));
                }
            })
        })
        .collect();
    let threads: Vec<_> = hosts
        .iter()
        .enumerate()
        .flat_map(|(h, log)| {
            (0..THREADS).map(move |t| {
                let log = log.clone();
                std::thread::spawn(move || {
                    (0..EACH)
                        .map(|i| log.append(marked(&format!("h{h}t{t}"), &format!("h{h}t{t}i{i}"))).unwrap().seq)
                        .collect::<Vec<u64>>()
                })
            })
        })
        .collect();
    let mut seqs: Vec<u64> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
    for p in processes {
        p.join().unwrap();
    }
    let lines = 3 * THREADS * EACH + 8;
    // Racing hosts: whatever mix of one-round-trip guesses and locking appends each took,
    // the chain below is linear and every line is there once.
    for log in &hosts {
        let (hit, missed) = log.one_trip_appends();
        eprintln!("one-round-trip appends: {hit} committed, {missed} missed");
    }
    // Every append got its own seq.
    seqs.sort();
    seqs.dedup();
    assert_eq!(seqs.len(), 3 * THREADS * EACH);

    // One linear chain: contiguous seq, each line chained to the one before, all verified by
    // any host, and by the CLI.
    for log in &hosts {
        let v = log.verify().unwrap();
        assert_eq!(v.entries, lines as u64);
    }
    assert_eq!(
        db.psql("SELECT min(seq) || ' ' || max(seq) || ' ' || count(*) FROM skillhost_audit"),
        format!("1 {lines} {lines}")
    );
    assert_eq!(db.psql("SELECT seq || ' ' || hash FROM skillhost_audit_head"), {
        let v = hosts[0].verify().unwrap();
        format!("{lines} {}", v.head)
    });
    let out = env.skillhost().args(["--store", &url, "--json", "audit", "verify"]).assert().success();
    assert_eq!(json_of(&out.get_output().stdout)["entries"].as_u64(), Some(lines as u64));

    // Every appended line is there exactly once, in its writer's order.
    let read = hosts[1].read().unwrap();
    assert!(read.unreadable.is_empty());
    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    for e in &read.entries {
        if let Some(m) = e.get("marker").and_then(Value::as_str) {
            *count.entry(m.to_string()).or_default() += 1;
        }
    }
    assert_eq!(count.len(), 3 * THREADS * EACH);
    assert!(count.values().all(|n| *n == 1), "a line twice: {count:?}");
    let ordered: Vec<String> =
        hosts[2].show("h1t2").unwrap().iter().map(|e| e["marker"].as_str().unwrap().to_string()).collect();
    assert_eq!(ordered, (0..EACH).map(|i| format!("h1t2i{i}")).collect::<Vec<_>>());
    let calls = read.entries.iter().filter(|e| e["skill"] == "probe").count();
    assert_eq!(calls, 8, "each process call is one line");
    // Each row's host is recorded (outside the hashed line): 3 pools of this process + 8 processes.
    let writers: usize = db.psql("SELECT count(DISTINCT host) FROM skillhost_audit").parse().unwrap();
    assert_eq!(writers, 1 + 8, "one test process (three pools) and eight skillhost processes");
}

#[test]
fn a_host_group_commits_concurrent_appends_and_answers_only_after_commit() {
    let db = common::postgres::database();
    db.migrated();
    let log = AuditLog::postgres(&db.connect());
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let appended: Vec<u64> = rt.block_on(async {
        let tasks: Vec<_> = (0..300)
            .map(|i| {
                let log = log.clone();
                tokio::spawn(async move { log.append_async(marked("gc", &format!("m{i}"))).await.unwrap().seq })
            })
            .collect();
        let mut seqs = Vec::new();
        for t in tasks {
            let seq = t.await.unwrap();
            seqs.push(seq);
        }
        seqs
    });
    // Answered means committed: every answered seq is visible to another connection now.
    let max = *appended.iter().max().unwrap();
    assert_eq!(db.psql("SELECT count(*) FROM skillhost_audit"), "300");
    assert_eq!(max, 300);
    let batches = log.syncs();
    assert!((1..100).contains(&batches), "300 queued appends went into {batches} transactions");
    assert_eq!(log.verify().unwrap().entries, 300);
}

#[test]
fn a_host_appending_alone_commits_in_one_round_trip_and_falls_back_when_another_appended() {
    let db = common::postgres::database();
    db.migrated();
    let (a, b) = (AuditLog::postgres(&db.connect()), AuditLog::postgres(&db.connect()));
    let mut seqs = Vec::new();
    // A's first two appends lock the head (it knows none yet, then learns nobody else wrote);
    // from then on it guesses the head it left, one round trip each.
    for i in 0..5 {
        seqs.push(a.append(marked("alone", &format!("a{i}"))).unwrap().seq);
    }
    assert_eq!(a.one_trip_appends(), (3, 0));
    seqs.push(b.append(marked("alone", "b0")).unwrap().seq);
    // B appended: A's guess misses, writes nothing, and A takes the lock, where it finds
    // B's line ahead of its own; the next locking read finds only its own, and it guesses again.
    for i in 5..8 {
        seqs.push(a.append(marked("alone", &format!("a{i}"))).unwrap().seq);
    }
    assert_eq!(a.one_trip_appends(), (4, 1));
    assert_eq!(seqs, (1..=9).collect::<Vec<u64>>(), "every append got the next seq, no gap, none twice");
    assert_eq!(b.verify().unwrap().entries, 9);
    let order: Vec<String> =
        a.show("alone").unwrap().iter().map(|e| e["marker"].as_str().unwrap().to_string()).collect();
    assert_eq!(order, ["a0", "a1", "a2", "a3", "a4", "b0", "a5", "a6", "a7"]);
    assert_eq!(db.psql("SELECT seq FROM skillhost_audit_head"), "9");
}

#[test]
fn tampered_rows_are_found_by_verify_and_the_log_is_append_only() {
    let db = common::postgres::database();
    db.migrated();
    let log = AuditLog::postgres(&db.connect());
    for i in 0..6 {
        log.append(marked("t", &format!("m{i}"))).unwrap();
    }
    assert_eq!(log.verify().unwrap().entries, 6);

    // The trigger refuses edits and deletes from anyone who does not disable it first.
    let e = db.try_psql("UPDATE skillhost_audit SET line = replace(line, 'm2', 'mX') WHERE seq = 3").unwrap_err();
    assert!(e.contains("append-only"), "{e}");
    assert!(db.try_psql("DELETE FROM skillhost_audit WHERE seq = 6").unwrap_err().contains("append-only"));

    // Someone with the rights to disable it edits line 3: named, as an edit.
    db.psql("ALTER TABLE skillhost_audit DISABLE TRIGGER skillhost_audit_append_only");
    db.psql("UPDATE skillhost_audit SET line = replace(line, '\"m2\"', '\"mX\"') WHERE seq = 3");
    match log.verify() {
        Err(VerifyError::Broken(b)) => {
            assert_eq!((b.line, b.problem), (3, Problem::HashMismatch), "{}", b.message);
        }
        other => panic!("expected a break, got {other:?}"),
    }
    let env = Env::new();
    let out = env.skillhost().args(["--store", &db.url(), "audit", "verify"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr_of(&out).contains("TAMPERED") && stderr_of(&out).contains("line 3"), "{}", stderr_of(&out));
    db.psql("UPDATE skillhost_audit SET line = replace(line, '\"mX\"', '\"m2\"') WHERE seq = 3");
    assert_eq!(log.verify().unwrap().entries, 6, "restored");

    // A deleted middle line: the next one no longer follows.
    let saved = db.psql("SELECT line FROM skillhost_audit WHERE seq = 4");
    db.psql("DELETE FROM skillhost_audit WHERE seq = 4");
    match log.verify() {
        Err(VerifyError::Broken(b)) => assert_eq!((b.line, b.problem), (4, Problem::PrevMismatch), "{}", b.message),
        other => panic!("expected a break, got {other:?}"),
    }
    // Appends go on regardless (they chain to the head row), and the damage stays named.
    log.append(marked("t", "after")).unwrap();
    assert!(matches!(log.verify(), Err(VerifyError::Broken(b)) if b.line == 4));
    let _ = saved;

    // Lines cut off the end, which a file cannot show: the head row still records them.
    let db2 = common::postgres::database();
    db2.migrated();
    let log2 = AuditLog::postgres(&db2.connect());
    for i in 0..4 {
        log2.append(marked("t", &format!("m{i}"))).unwrap();
    }
    db2.psql("ALTER TABLE skillhost_audit DISABLE TRIGGER skillhost_audit_append_only");
    db2.psql("DELETE FROM skillhost_audit WHERE seq = 4");
    match log2.verify() {
        Err(VerifyError::Broken(b)) => {
            assert_eq!(b.problem, Problem::HeadMismatch, "{}", b.message);
            assert!(b.message.contains("1 line(s) were deleted from the end"), "{}", b.message);
        }
        other => panic!("expected a break, got {other:?}"),
    }
    // A seal means nothing here: refused, saying why.
    let e = log2.seal().unwrap_err().to_string();
    assert!(e.contains("needs no seal"), "{e}");
}

#[test]
fn a_skill_run_on_the_postgres_store_writes_its_call_line_there() {
    let db = common::postgres::database();
    db.migrated();
    let env = Env::new();
    let dir = env.probe_as("probe", "");
    env.skillhost().args(["skill", "install"]).arg(&dir).arg("--yes").assert().success();
    let url = db.url();
    env.skillhost()
        .args(["--store", &url, "skill", "run", "probe", "--session", "pg-run", "-p", "mode=echo", "-p", "arg=hello"])
        .assert()
        .success();
    // The line is in the database, not in the home.
    assert!(!env.home.path().join("audit/audit.jsonl").exists(), "nothing written to the home's log");
    let line: Value = serde_json::from_str(&db.psql("SELECT line FROM skillhost_audit WHERE seq = 1")).unwrap();
    assert_eq!(
        (line["kind"].as_str(), line["skill"].as_str(), line["session"].as_str()),
        (Some("call"), Some("probe"), Some("pg-run"))
    );
    assert_eq!(line["status"], "success");
    assert_eq!(db.psql("SELECT session FROM skillhost_audit WHERE seq = 1"), "pg-run");

    // `audit show`, `list` and `verify` read it back from the store; without --store, the
    // home's (empty) log.
    let out = env.skillhost().args(["--store", &url, "--json", "audit", "show", "pg-run"]).assert().success();
    let shown = json_of(&out.get_output().stdout);
    assert_eq!(shown.as_array().unwrap().len(), 1);
    assert_eq!(shown[0]["hash"].as_str().map(str::len), Some(64));
    let out = env.skillhost().args(["--store", &url, "--json", "audit", "list"]).assert().success();
    assert_eq!(json_of(&out.get_output().stdout)[0]["session"], "pg-run");
    env.skillhost().args(["--store", &url, "audit", "verify"]).assert().success();
    let out = env.skillhost().args(["--json", "audit", "list"]).assert().success();
    assert_eq!(json_of(&out.get_output().stdout), serde_json::json!([]));

    // SKILLHOST_STORE works as the flag does; a refusal is a line too.
    env.skillhost()
        .env("SKILLHOST_STORE", &url)
        .args(["skill", "run", "probe", "--session", "pg-run", "-p", "mode=bogus"])
        .assert()
        .code(3);
    assert_eq!(db.psql("SELECT count(*) FROM skillhost_audit WHERE session = 'pg-run'"), "2");
}

#[test]
fn the_store_url_parses_libpq_style_and_the_bridge_serves_sync_and_async_callers() {
    let db = common::postgres::database();
    let StoreUrl::Postgres(url) = db.url().parse::<StoreUrl>().unwrap() else { panic!("not postgres") };
    assert_eq!(url.config().get_dbname(), Some(db.name.as_str()));
    assert_eq!(url.config().get_user(), Some(common::postgres::USER));
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

fn pg_url(url: &str) -> skillhost::store::PgUrl {
    match url.parse::<skillhost::store::StoreUrl>().unwrap() {
        skillhost::store::StoreUrl::Postgres(u) => u,
        skillhost::store::StoreUrl::Local => unreachable!(),
    }
}

/// A store reached over TCP: TLS (rustls), verified against the CA the URL names and for the
/// host name connected to; the server here takes TCP connections over TLS only, so a call
/// that works went encrypted, and the server says so (`pg_stat_ssl`). Every way the trust can
/// be wrong is one clear error.
#[test]
fn a_store_over_tcp_is_reached_with_verified_tls() {
    let server = common::postgres::tls_server();
    let tls = server.tls.as_ref().unwrap();
    server.psql("postgres", "CREATE DATABASE tls_store");
    let url =
        |host: &str, rest: &str| format!("postgres://{}@{host}:{}/tls_store?{rest}", common::postgres::USER, tls.port);
    let good = url("localhost", &format!("sslmode=verify-full&sslrootcert={}", tls.ca.display()));

    let store = PgStore::connect(&pg_url(&good)).unwrap();
    store.migrate().unwrap();
    let encrypted: (bool, String) = store
        .block_on({
            let store = store.clone();
            async move {
                let client = store.client().await?;
                let row =
                    client.query_one("SELECT ssl, version FROM pg_stat_ssl WHERE pid = pg_backend_pid()", &[]).await?;
                Ok((row.get(0), row.get(1)))
            }
        })
        .unwrap();
    assert!(encrypted.0 && encrypted.1.starts_with("TLS"), "{encrypted:?}");

    // The real binary, as an operator runs it: a call, its audit line in the store, verified.
    let env = Env::new();
    let run = |args: &[&str]| {
        let out = common::skillhost(env.home.path()).env("SKILLHOST_STORE", &good).args(args).output().unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let dir = env.probe_as("echoer", "");
    run(&["skill", "install", dir.to_str().unwrap(), "--yes"]);
    run(&["skill", "run", "echoer", "-p", "mode=noop"]);
    assert!(run(&["audit", "verify"]).contains("audit log intact: 1 entries"));
    assert_eq!(server.psql("tls_store", "SELECT count(*) FROM skillhost_audit"), "1");

    // Trust that does not hold: each refused, saying what to do.
    let other_ca = common::postgres::make_ca(&server.dir.join("certs"), "other-ca");
    for (bad, says) in [
        // Another CA: the server's certificate does not chain to it.
        (url("localhost", &format!("sslmode=require&sslrootcert={}", other_ca.display())), "UnknownIssuer"),
        // No CA given: the bundled public roots do not know the test CA.
        (url("localhost", "sslmode=require"), "name its CA with sslrootcert="),
        // The right CA, but an address the certificate does not name.
        (
            url("127.0.0.1", &format!("sslmode=require&sslrootcert={}", tls.ca.display())),
            "not valid for name \"127.0.0.1\"",
        ),
        // Plaintext over TCP: the server takes TLS only (pg_hba.conf `hostssl`).
        (url("127.0.0.1", "sslmode=disable"), "pg_hba.conf"),
        // A CA file that is not one.
        (
            url("localhost", &format!("sslmode=require&sslrootcert={}", server.dir.join("certs/server.ext").display())),
            "holds no certificate",
        ),
    ] {
        let e = PgStore::connect(&pg_url(&bad)).err().unwrap_or_else(|| panic!("{bad} connected"));
        let e = format!("{e:#}");
        assert!(e.contains(says), "{bad}: {e}");
    }
}

/// Holds the memory log's head of `$HEAD_HOLDER_URL` for the test below (printing `held
/// SEQ`), then, given a line on stdin, appends an op on it and prints what came of it.
#[test]
#[ignore = "run as a child process by the test below"]
fn head_holder_child() {
    use skillhost::memory::{LoggedOp, MemoryLog as _};
    let Ok(url) = std::env::var("HEAD_HOLDER_URL") else { return };
    let store = PgStore::connect(&pg_url(&url)).unwrap();
    let log = skillhost::store::PgMemoryLog::open(&store).unwrap();
    let held = log.lock_head().unwrap();
    println!("held {}", held.seq());
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let op = LoggedOp {
        seq: held.seq() + 1,
        at_ms: 1,
        model: None,
        op: serde_json::json!({"op": "note", "text": "stale"}),
        stored_digest: None,
    };
    match held.append(&op) {
        Ok(()) => println!("appended"),
        Err(e) => println!("refused {e:#}"),
    }
}

/// A host that holds the memory log's head holds up the other hosts' memory writes for as
/// long as it is running (a slow write, an import embedding many records, is not cut short:
/// it keeps its connection busy), and, once it is stopped (SIGSTOP here; frozen, cut off),
/// only for its store URL's `lock_hold_secs`: the server then ends its transaction, another
/// host's write goes through, and the stopped host's append, when it wakes, is refused with
/// the reason, leaving the log as the other host left it.
#[test]
fn a_stopped_host_holds_up_the_memory_log_only_for_lock_hold_secs_a_running_one_as_long_as_it_needs() {
    use skillhost::memory::MemoryLog as _;
    use std::io::{BufRead as _, Write as _};
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    let db = common::postgres::database();
    db.migrated();
    let env = Env::new();
    /// The holder process: let go (continued, then killed) however the test ends.
    struct Holder(std::process::Child);
    impl Holder {
        fn signal(&self, signal: i32) {
            // SAFETY: kill(2) on our own child's pid; no memory is passed.
            assert_eq!(unsafe { libc::kill(self.0.id() as i32, signal) }, 0, "kill({signal}) of the holder");
        }
    }
    impl Drop for Holder {
        fn drop(&mut self) {
            if let Ok(None) = self.0.try_wait() {
                // SAFETY: as in `signal`.
                unsafe { libc::kill(self.0.id() as i32, libc::SIGCONT) };
                let _ = self.0.kill();
                let _ = self.0.wait();
            }
        }
    }
    const HOLD_SECS: u64 = 5;
    let mut holder = Holder(
        Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "head_holder_child", "--ignored", "--nocapture", "--test-threads=1"])
            .env("HEAD_HOLDER_URL", format!("{}&lock_hold_secs={HOLD_SECS}", db.url()))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut to_holder = holder.0.stdin.take().unwrap();
    let (tx, from_holder) = std::sync::mpsc::channel::<String>();
    let out = holder.0.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // The first line of the holder's that holds one of `words`, from that word on (libtest
    // prints the test's name before it, on the same line).
    let said = |words: &[&str]| -> String {
        loop {
            let line = from_holder.recv_timeout(Duration::from_secs(60)).expect("the holder said nothing");
            if let Some(at) = words.iter().filter_map(|w| line.find(w)).min() {
                return line[at..].to_string();
            }
        }
    };
    assert_eq!(said(&["held "]), "held 0");

    // Another host (a real process, on the default lock_hold) writes a memory meanwhile.
    let mut other = common::skillhost_command(env.home.path())
        .args(["--store", &db.url(), "memory", "add", "the release needs two approvals (发布需要两人批准)"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // It reaches the head's lock and waits there...
    let waiters = || -> u32 {
        db.psql("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'")
            .parse()
            .unwrap()
    };
    let started = Instant::now();
    while waiters() == 0 {
        assert!(other.try_wait().unwrap().is_none(), "a write went through while a running host held the head");
        assert!(started.elapsed() < Duration::from_secs(60), "the other host never reached the head's lock");
        std::thread::sleep(Duration::from_millis(100));
    }
    // ...for as long as the holder runs, idle far longer than lock_hold_secs.
    std::thread::sleep(Duration::from_secs(HOLD_SECS * 5 / 2));
    assert!(other.try_wait().unwrap().is_none(), "a write went through while a running host held the head");
    assert!(waiters() >= 1, "nothing waits for the head's lock");

    // The holder is stopped: within lock_hold_secs of its last word the head is free.
    holder.signal(libc::SIGSTOP);
    let stopped = Instant::now();
    let status = loop {
        if let Some(status) = other.try_wait().unwrap() {
            break status;
        }
        if stopped.elapsed() > Duration::from_secs(30) {
            other.kill().unwrap();
            panic!(
                "the other host's memory write still waited 30 s after the holder (lock_hold_secs={HOLD_SECS}) was stopped"
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let waited = stopped.elapsed();
    let out = other.wait_with_output().unwrap();
    assert!(status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    eprintln!("the write went through {waited:?} after the holder was stopped");
    assert_eq!(db.psql("SELECT seq || ' ' || (op LIKE '%two approvals%') FROM skillhost_memory_log"), "1 true");

    // The holder wakes and appends on the head it held: refused, saying why.
    holder.signal(libc::SIGCONT);
    writeln!(to_holder, "append").unwrap();
    let answer = said(&["refused", "appended"]);
    assert!(answer.starts_with("refused") && answer.contains(&format!("lock_hold_secs ({HOLD_SECS} s)")), "{answer}");
    eprintln!("the stopped host's append: {answer}");
    assert!(holder.0.wait().unwrap().success());
    assert_eq!(db.psql("SELECT count(*) || ' ' || max(seq) FROM skillhost_memory_log"), "1 1");
    assert_eq!(db.psql("SELECT seq FROM skillhost_memory_head"), "1");

    // The digest the database computes over op 1's stored text is the one a replica that
    // read and applied it records (what tells op 1 from another history's op 1).
    let log = skillhost::store::PgMemoryLog::open(&db.connect()).unwrap();
    let ops = log.read_after(0, 10).unwrap().ops;
    assert_eq!(ops.len(), 1);
    let after = log.read_after(1, 10).unwrap();
    assert!(after.ops.is_empty());
    assert_eq!(after.after_at_ms, Some(ops[0].at_ms));
    assert_eq!(after.after_digest, Some(ops[0].digest()));
    let stored = db.psql("SELECT op FROM skillhost_memory_log WHERE seq = 1");
    assert_eq!(skillhost::memory::text_digest(stored.as_bytes()), ops[0].digest(), "{stored}");
    let reserialized = skillhost::memory::LoggedOp { stored_digest: None, ..ops[0].clone() };
    assert_eq!(reserialized.digest(), ops[0].digest(), "the writer's text is the stored text");
}
