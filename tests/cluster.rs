//! Several hosts on one PostgreSQL store (issue 33): each host has a home of its own (its
//! caches), and skills, grants, secrets, memory and the audit chain are shared. Every host
//! here is the real `skillhost` binary, as an operator runs it, on a real PostgreSQL 15
//! started by the fixture on a Unix socket.

#[path = "mcp/client.rs"]
mod client;
mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use client::{HttpServer, rpc};
use common::postgres::{Database, database};
use common::{Env, skillhost};
use serde_json::{Value, json};

/// One host: a home of its own, the shared store, the same store key.
struct Host {
    home: tempfile::TempDir,
    url: String,
    key_file: std::path::PathBuf,
}

impl Host {
    fn new(db: &Database, key_file: &Path) -> Host {
        Host { home: tempfile::tempdir().unwrap(), url: db.url(), key_file: key_file.to_path_buf() }
    }

    fn cmd(&self) -> assert_cmd::Command {
        let mut c = skillhost(self.home.path());
        c.env("SKILLHOST_STORE", &self.url).env("SKILLHOST_STORE_KEY_FILE", &self.key_file);
        c
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.cmd().args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn json(&self, args: &[&str]) -> Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        serde_json::from_str(&self.ok(&all)).unwrap()
    }
}

fn key_file(dir: &Path, hex: &str) -> std::path::PathBuf {
    let path = dir.join("store.key");
    std::fs::write(&path, hex).unwrap();
    path
}

const KEY: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

/// A migrated database, the store key in a file of `keys`, and two hosts on them.
struct Cluster {
    db: Database,
    keys: tempfile::TempDir,
    key: std::path::PathBuf,
    a: Host,
    b: Host,
}

impl Cluster {
    fn new() -> Cluster {
        let db = database();
        let keys = tempfile::tempdir().unwrap();
        let key = key_file(keys.path(), KEY);
        let (a, b) = (Host::new(&db, &key), Host::new(&db, &key));
        a.ok(&["store", "migrate"]);
        Cluster { db, keys, key, a, b }
    }
}
const SECRET: &str = "sk-live-7f3a9c2e55b1d0c4";

#[test]
fn two_hosts_share_skills_grants_secrets_memory_and_one_audit_chain() {
    let Cluster { db, keys: _keys, a, b, .. } = Cluster::new();
    let env = Env::new();

    // Installed and granted on A; B runs it without installing anything.
    let dir = env.probe_as("echoer", "capabilities:\n  session: true\n");
    a.ok(&["skill", "install", dir.to_str().unwrap()]);
    let listed = b.json(&["skill", "list"]);
    assert!(listed.to_string().contains("echoer"), "B does not see A's install: {listed}");
    let ran = b.json(&["skill", "run", "echoer", "-p", "mode=echo", "-p", "arg=from B"]);
    assert!(ran["result"]["ok"]["output"].as_str().is_some_and(|o| o.ends_with("|from B")), "{ran}");
    assert!(ran["compile"]["compiled"].is_object(), "B compiled the component itself (its own cache): {ran}");
    assert_eq!(ran["not_granted"], serde_json::json!(["session"]), "{ran}");
    b.ok(&["policy", "grant", "echoer", "session"]);
    let ran = a.json(&["skill", "run", "echoer", "-p", "mode=noop"]);
    assert_eq!(ran["not_granted"], serde_json::json!([]), "A runs with B's grant: {ran}");

    // A secret set on A is B's too, and PostgreSQL never holds its value in the clear.
    a.cmd().args(["secret", "set", "API_TOKEN"]).write_stdin(format!("{SECRET}\n")).assert().success();
    assert!(b.ok(&["secret", "list"]).contains("API_TOKEN"));
    let stored = db.psql("SELECT encode(content, 'escape') FROM skillhost_home_units WHERE unit = 'secrets.json'");
    assert!(!stored.is_empty() && !stored.contains(SECRET), "the secret is stored in the clear: {stored}");
    // Nor a plain digest of them, which would let a reader of the database test guesses.
    let digest = db.psql("SELECT digest FROM skillhost_home_units WHERE unit = 'secrets.json'");
    let plain = std::fs::read(b.home.path().join("secrets.json")).unwrap();
    let unkeyed = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&plain));
    assert!(digest.trim().starts_with("hmac-sha256:") && !digest.contains(&unkeyed), "{digest}");
    // A host with another key cannot open them, and says why.
    let other_keys = tempfile::tempdir().unwrap();
    let wrong = key_file(other_keys.path(), &"ab".repeat(32));
    let c = Host::new(&db, &wrong);
    let out = c.cmd().args(["secret", "list"]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not the key they were sealed with"), "{err}");

    // A memory written on A is found on B, with the same id.
    let added = a.json(&["memory", "add", "The release pipeline needs approval from two maintainers"]);
    let id = added["record"]["id"].as_u64().unwrap_or_else(|| panic!("{added}"));
    let found = b.json(&["memory", "search", "release approval maintainers"]);
    assert_eq!(found[0]["record"]["id"], id, "{found}");

    // One audit chain for both hosts: A's and B's calls, verified whole.
    let verified = b.ok(&["audit", "verify"]);
    assert!(verified.contains("audit log intact: 2 entries"), "{verified}");
    let calls = db.psql("SELECT count(*) FROM skillhost_audit WHERE line LIKE '%\"skill\":\"echoer\"%'");
    assert_eq!(calls.trim(), "2", "one audit line per call, from both hosts");
}

#[test]
fn servers_on_two_hosts_serve_what_either_host_installs_and_remembers() {
    let Cluster { db, keys: _keys, key, a, b } = Cluster::new();
    let env = Env::new();
    let store_env = [("SKILLHOST_STORE", a.url.as_str()), ("SKILLHOST_STORE_KEY_FILE", key.to_str().unwrap())];
    let server_a = HttpServer::start(a.home.path(), &["--memory", "write"], &store_env);
    let server_b = HttpServer::start(b.home.path(), &["--memory", "write"], &store_env);

    // Installed on A's host while both serve: B's very next call runs it (no waiting for
    // B's follower, which comes by every 0.2 s).
    let dir = env.probe_as("latecomer", "capabilities:\n  clock: true\n");
    a.ok(&["skill", "install", dir.to_str().unwrap()]);
    let call = json!({ "name": "latecomer", "arguments": { "mode": "echo", "arg": "hi" } });
    let answer = rpc(server_b.addr, "tools/call", call, &[]).json();
    assert_eq!(answer["result"]["isError"], false, "B's next call after A's install: {answer}");
    assert!(answer.to_string().contains("hi"), "{answer}");
    // A grant and a revocation on A apply to B's next call, every time.
    let clock = json!({ "name": "latecomer", "arguments": { "mode": "clock" } });
    let wall_clock_on_b = || {
        let answer = rpc(server_b.addr, "tools/call", clock.clone(), &[]).json();
        let output = answer["result"]["structuredContent"]["output"].as_str().unwrap_or_else(|| panic!("{answer}"));
        output.parse::<u64>().unwrap_or_else(|_| panic!("{answer}"))
    };
    for _ in 0..3 {
        a.ok(&["policy", "grant", "latecomer", "clock"]);
        assert!(wall_clock_on_b() > 1_700_000_000, "B's next call after A's grant ran without it");
        a.ok(&["policy", "revoke", "latecomer", "clock"]);
        assert_eq!(wall_clock_on_b(), 0, "B's next call after A's revocation still held the grant");
    }

    // A memory added through B's server is found through A's within a second.
    let added = rpc(
        server_b.addr,
        "tools/call",
        json!({ "name": "memory_add", "arguments": { "content": "The staging database is rebuilt every Sunday night" } }),
        &[],
    )
    .json();
    assert_eq!(added["result"]["isError"], false, "{added}");
    let search = json!({ "name": "memory_search", "arguments": { "query": "when is the staging database rebuilt" } });
    let started = Instant::now();
    loop {
        let found = rpc(server_a.addr, "tools/call", search.clone(), &[]).json();
        if found.to_string().contains("rebuilt every Sunday") {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(1), "A does not find B's memory after 1 s: {found}");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop((server_a, server_b));
    // Both servers' calls are lines of the one chain, which verifies.
    a.ok(&["audit", "verify"]);
    let lines = db.psql("SELECT count(*) FROM skillhost_audit WHERE line LIKE '%\"transport\":\"http\"%'");
    assert!(lines.trim().parse::<u32>().unwrap() >= 3, "{lines}");
}

#[test]
fn readyz_follows_the_store_a_schema_it_does_not_know_or_a_dropped_database_is_not_ready() {
    let db = database();
    let keys = tempfile::tempdir().unwrap();
    let key = key_file(keys.path(), KEY);
    let a = Host::new(&db, &key);
    a.ok(&["store", "migrate"]);
    let store_env = [("SKILLHOST_STORE", a.url.as_str()), ("SKILLHOST_STORE_KEY_FILE", key.to_str().unwrap())];
    let server = HttpServer::start(a.home.path(), &["--stateless"], &store_env);
    let readyz = || {
        let r = client::http(server.addr, "GET", "/readyz", &[], b"");
        (r.status, r.json())
    };
    assert_eq!(readyz(), (200, json!({ "status": "ready" })));

    // Migrated by a newer skillhost under the running host: not ready, until it is undone.
    let newer: i64 = db.psql("SELECT max(version) + 1 FROM skillhost_schema").parse().unwrap();
    db.psql(&format!(
        "INSERT INTO skillhost_schema (version, name, applied_by) VALUES ({newer}, 'from the future', 'test')"
    ));
    assert_eq!(readyz(), (503, json!({ "status": "not-ready", "reason": "store schema not current" })));
    db.psql(&format!("DELETE FROM skillhost_schema WHERE version = {newer}"));
    assert_eq!(readyz(), (200, json!({ "status": "ready" })));

    // The database dropped under it: not ready, and still alive.
    common::postgres::server().psql("postgres", &format!("DROP DATABASE {} WITH (FORCE)", db.name));
    assert_eq!(readyz(), (503, json!({ "status": "not-ready", "reason": "store unreachable" })));
    assert_eq!(client::http(server.addr, "GET", "/healthz", &[], b"").status, 200);
}

#[test]
fn a_run_paused_on_one_host_resumes_on_another() {
    let Cluster { db, keys, a, b, .. } = Cluster::new();
    let d1 = keys.path().join("d1.json");
    let d2 = keys.path().join("d2.json");
    std::fs::write(&d1, r#"{"decide": [{"next_action": "require_more", "message": "Which port?"}]}"#).unwrap();
    std::fs::write(&d2, r#"{"decide": [{"next_action": "reply", "message": "use COM3"}]}"#).unwrap();

    let out = a.cmd().args(["run", "--decisions"]).arg(&d1).arg("find the port").output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    let id = stderr.split("skillhost run --resume ").nth(1).unwrap().split_whitespace().next().unwrap().to_string();
    // Saved in the store, not in A's replica (derived state, wiped when it is rebuilt).
    assert_eq!(db.psql(&format!("SELECT count(*) FROM skillhost_agent_sessions WHERE id = '{id}'")), "1");
    assert!(!a.home.path().join("memory").join("sessions").exists());

    let done = b.json(&["run", "--decisions", d2.to_str().unwrap(), "--resume", &id, "COM3"]);
    assert_eq!((done["status"].as_str(), done["answer"].as_str()), (Some("answered"), Some("use COM3")), "{done}");
    assert_eq!(done["session"], id.as_str(), "{done}");
    // Finished on B: A cannot resume it again.
    let out = a.cmd().args(["run", "--decisions"]).arg(&d2).args(["--resume", &id, "again"]).output().unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("already finished"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // And the run's steps from both hosts are one chain.
    assert!(b.ok(&["audit", "verify"]).contains("audit log intact"));
}

/// Several processes on one home (here `HomeSync`s of their own, each with the in-process
/// lock a process has): four grant again and again, and one pulls as fast as it can, as every
/// command does when it starts and a server's follower does every 0.2 s. A pull that read the
/// store before a grant was shared must never write the store's older policy over that grant
/// (the grant would then be shared by no one, or dropped by the next change): every grant
/// reaches the store and stays in the home.
#[test]
fn a_pull_on_a_home_never_undoes_a_change_being_made_on_it() {
    use skillhost::capabilities::CapabilitySet;
    use skillhost::policy::Policy;
    use skillhost::store::HomeSync;
    use std::sync::atomic::{AtomicUsize, Ordering};
    const CHANGERS: usize = 4;
    const GRANTS_EACH: usize = 30;
    let store = database().migrated();
    let home = tempfile::tempdir().unwrap();
    let policy = home.path().join("policy.toml");
    let sync = || HomeSync::new(&store, home.path()).unwrap();
    let (changing, pulls) = (AtomicUsize::new(CHANGERS), AtomicUsize::new(0));
    std::thread::scope(|s| {
        let (puller, changing, pulls) = (sync(), &changing, &pulls);
        s.spawn(move || {
            while changing.load(Ordering::SeqCst) > 0 {
                puller.pull().unwrap();
                pulls.fetch_add(1, Ordering::SeqCst);
            }
        });
        for c in 0..CHANGERS {
            let (changer, policy) = (sync(), &policy);
            s.spawn(move || {
                for i in 0..GRANTS_EACH {
                    let grant = CapabilitySet { env: vec![format!("V{c}_{i}")], ..Default::default() };
                    // The command goes on working for a moment after writing the policy.
                    let granted = changer.change(|| {
                        Policy::update(policy, |p| {
                            p.grant("p", &grant);
                            Ok(())
                        })?;
                        std::thread::sleep(Duration::from_millis(2));
                        Ok(())
                    });
                    granted.unwrap();
                }
                changing.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    assert!(pulls.load(Ordering::SeqCst) > 0, "the puller ran alongside the grants");
    // What the store holds, as a new host's home pulls it.
    let fresh = tempfile::tempdir().unwrap();
    HomeSync::new(&store, fresh.path()).unwrap().pull().unwrap();
    let all: Vec<String> = (0..CHANGERS).flat_map(|c| (0..GRANTS_EACH).map(move |i| format!("V{c}_{i}"))).collect();
    let missing = |held: Vec<String>| all.iter().filter(|g| !held.contains(g)).cloned().collect::<Vec<_>>();
    let shared = Policy::load(&fresh.path().join("policy.toml")).unwrap().granted("p").env;
    assert_eq!(missing(shared), Vec::<String>::new(), "grants lost in the store");
    let kept = Policy::load(&policy).unwrap().granted("p").env;
    assert_eq!(missing(kept), Vec::<String>::new(), "grants lost in the home");
}

/// A pull that finds nothing new takes no lock and writes nothing, so it never waits for a
/// change another process is making on the same home (which may sit at a prompt); a pull
/// that has something to apply waits for it.
#[test]
fn only_a_pull_with_something_to_apply_waits_for_the_home_lock() {
    use skillhost::store::HomeSync;
    let store = database().migrated();
    let (home, elsewhere) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let write = |home: &Path, text: &'static str| {
        let sync = HomeSync::new(&store, home).unwrap();
        let path = home.join("trust.toml");
        sync.change(|| Ok(std::fs::write(&path, text)?)).unwrap();
    };
    write(home.path(), "# one\n");
    let held = skillhost::fsutil::lock_exclusive(&home.path().join("cache").join("home-sync.lock")).unwrap();
    let pull_in_background = || {
        let (tx, rx) = std::sync::mpsc::channel();
        let sync = HomeSync::new(&store, home.path()).unwrap();
        std::thread::spawn(move || tx.send(sync.pull().map_err(|e| format!("{e:#}"))));
        rx
    };
    let nothing_new = pull_in_background();
    nothing_new.recv_timeout(Duration::from_secs(20)).expect("a pull with nothing new waited for the lock").unwrap();
    // Another host shares a change: this home's next pull applies it, under the lock.
    write(elsewhere.path(), "# two\n");
    let something_new = pull_in_background();
    assert!(something_new.recv_timeout(Duration::from_millis(500)).is_err(), "a pull applied units without the lock");
    drop(held);
    something_new.recv_timeout(Duration::from_secs(20)).expect("the pull went on once the lock was free").unwrap();
    assert_eq!(std::fs::read_to_string(home.path().join("trust.toml")).unwrap(), "# two\n");
}

/// A change that fails to be shared (here: secrets, on a host without the store key) ends
/// its transaction at once: the store's home lock is not left with a pooled connection
/// for as long as the process lives, and another host's change goes through.
#[test]
fn a_change_that_cannot_be_shared_does_not_keep_the_store_locked() {
    use skillhost::policy::Policy;
    use skillhost::store::HomeSync;
    assert!(
        std::env::var_os("SKILLHOST_STORE_KEY").is_none() && std::env::var_os("SKILLHOST_STORE_KEY_FILE").is_none(),
        "this test needs a test process without a store key"
    );
    let db = database();
    let (store, other_store) = (db.migrated(), db.connect());
    let (home, other_home) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let secrets = home.path().join("secrets.json");
    let err = HomeSync::new(&store, home.path()).unwrap().change(|| Ok(std::fs::write(&secrets, "{}")?)).unwrap_err();
    let err = format!("{err:#}");
    assert!(err.contains("could not be shared") && err.contains("SKILLHOST_STORE_KEY_FILE"), "{err}");
    let (tx, rx) = std::sync::mpsc::channel();
    let policy = other_home.path().join("policy.toml");
    let other = HomeSync::new(&other_store, other_home.path()).unwrap();
    std::thread::spawn(move || {
        let grant = skillhost::capabilities::CapabilitySet { env: vec!["HOME".into()], ..Default::default() };
        let done = other.change(|| {
            Policy::update(&policy, |p| {
                p.grant("p", &grant);
                Ok(())
            })
        });
        tx.send(done.map(|_| ()).map_err(|e| format!("{e:#}")))
    });
    rx.recv_timeout(Duration::from_secs(20)).expect("the other host's change waited for a lock nobody holds").unwrap();
    // The store (and this test's pool) is still usable from the first host.
    HomeSync::new(&store, home.path()).unwrap().pull().unwrap();
    let shared = Policy::load(&home.path().join("policy.toml")).unwrap().granted("p").env;
    assert_eq!(shared, vec!["HOME".to_string()]);
}

/// A removal reaches a home that does not know it held the unit (its state file lost, as
/// `cache/` is derived): the home must not keep, and share again, what the store removed.
#[test]
fn a_removal_reaches_a_home_that_lost_its_state() {
    use skillhost::store::HomeSync;
    let store = database().migrated();
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let trust = a.path().join("trust.toml");
    let on_a = HomeSync::new(&store, a.path()).unwrap();
    on_a.change(|| Ok(std::fs::write(&trust, "# keys\n")?)).unwrap();
    HomeSync::new(&store, b.path()).unwrap().pull().unwrap();
    assert!(b.path().join("trust.toml").exists());
    std::fs::remove_file(b.path().join("cache").join("home-sync.json")).unwrap();
    on_a.change(|| Ok(std::fs::remove_file(&trust)?)).unwrap();
    HomeSync::new(&store, b.path()).unwrap().pull().unwrap();
    assert!(!b.path().join("trust.toml").exists(), "a unit the store removed is kept");
}

/// A store behind the home's copy of it (restored from a backup, or another store than the
/// one the home copied): the versions the home saw mean nothing there, so the home takes
/// every unit the store holds again instead of waiting, unaware, for the store's versions
/// to pass its own.
#[test]
fn a_home_ahead_of_its_store_takes_the_store_as_it_is() {
    use skillhost::store::HomeSync;
    let (first, second) = (database().migrated(), database().migrated());
    let (home, elsewhere) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let trust = home.path().join("trust.toml");
    let sync = HomeSync::new(&first, home.path()).unwrap();
    for n in 0..3 {
        sync.change(|| Ok(std::fs::write(&trust, format!("# first store, change {n}\n"))?)).unwrap();
    }
    // The second store holds one change, made by another host: version 1.
    let other = elsewhere.path().join("trust.toml");
    HomeSync::new(&second, elsewhere.path())
        .unwrap()
        .change(|| Ok(std::fs::write(&other, "# second store\n")?))
        .unwrap();
    HomeSync::new(&second, home.path()).unwrap().pull().unwrap();
    assert_eq!(std::fs::read_to_string(&trust).unwrap(), "# second store\n");
    // And a change made here now goes to the second store under its next version.
    HomeSync::new(&second, home.path())
        .unwrap()
        .change(|| Ok(std::fs::write(&trust, "# changed on the second store\n")?))
        .unwrap();
    HomeSync::new(&second, elsewhere.path()).unwrap().pull().unwrap();
    assert_eq!(std::fs::read_to_string(&other).unwrap(), "# changed on the second store\n");
}

/// A store written past a home's version in another history (restored from a backup and
/// changed since, or another store at a higher version): the home does not take only the
/// versions above its own, which would keep what the store no longer holds below it; it
/// takes every unit as the store holds it.
#[test]
fn a_home_whose_store_took_another_history_takes_the_store_as_it_is() {
    use skillhost::store::HomeSync;
    let (first, second) = (database().migrated(), database().migrated());
    let (home, elsewhere) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (trust, policy) = (home.path().join("trust.toml"), home.path().join("policy.toml"));
    let sync = HomeSync::new(&first, home.path()).unwrap();
    for n in 0..3 {
        sync.change(|| Ok(std::fs::write(&trust, format!("# first store, change {n}\n"))?)).unwrap();
    }
    // The second store: trust.toml at version 1, then policy.toml at versions 2 to 4.
    let other = HomeSync::new(&second, elsewhere.path()).unwrap();
    other.change(|| Ok(std::fs::write(elsewhere.path().join("trust.toml"), "# second store\n")?)).unwrap();
    for n in 0..3 {
        other.change(|| Ok(std::fs::write(elsewhere.path().join("policy.toml"), format!("# policy {n}\n"))?)).unwrap();
    }
    HomeSync::new(&second, home.path()).unwrap().pull().unwrap();
    assert_eq!(std::fs::read_to_string(&trust).unwrap(), "# second store\n", "kept another history's unit");
    assert_eq!(std::fs::read_to_string(&policy).unwrap(), "# policy 2\n");
    // Taken whole, the home is that store's: its next change is shared as the next version,
    // and a pull with nothing new leaves it as it is.
    HomeSync::new(&second, home.path())
        .unwrap()
        .change(|| Ok(std::fs::write(&trust, "# changed on the second store\n")?))
        .unwrap();
    other.pull().unwrap();
    assert_eq!(
        std::fs::read_to_string(elsewhere.path().join("trust.toml")).unwrap(),
        "# changed on the second store\n"
    );
    HomeSync::new(&second, home.path()).unwrap().pull().unwrap();
    assert_eq!(std::fs::read_to_string(&trust).unwrap(), "# changed on the second store\n");
}
