//! Versions of installed skills: upgrade archives the previous version, history shows what
//! changed, rollback restores the exact bytes, and rights never widen by themselves.

mod common;

use common::{Env, output, run};
use serde_json::json;
use skillhost::policy::Grant;

fn version_dir(env: &Env, name: &str, version: &str, extra: &str) -> std::path::PathBuf {
    let dir = env.probe_as(name, extra);
    let text = std::fs::read_to_string(dir.join("SKILL.md"))
        .unwrap()
        .replace("version: 0.1.0", &format!("version: {version}"));
    std::fs::write(dir.join("SKILL.md"), text).unwrap();
    // Keep a pristine copy of this version's sources to compare bytes later.
    let keep = env.sources.path().join(format!("{name}@{version}"));
    std::fs::create_dir_all(&keep).unwrap();
    for f in ["SKILL.md", "skill.wasm"] {
        std::fs::copy(dir.join(f), keep.join(f)).unwrap();
    }
    dir
}

#[test]
fn upgrade_history_rollback_round_trip() {
    let env = Env::new();
    let lib = env.library();
    let v1 = version_dir(&env, "tool", "0.1.0", "");
    lib.install(&v1, &|m| Ok(Some(Grant::everything(m)))).unwrap();
    let first = lib.info("tool").unwrap().record.content_hash;

    // v2 asks for session: the upgrade reports it as a new right and does not grant it.
    let v2 = version_dir(&env, "tool", "0.2.0", "capabilities:\n  session: true\n");
    let report = lib.install(&v2, &|_| Ok(None)).unwrap();
    assert_eq!(report.replaced.as_deref(), Some(first.as_str()));
    assert_eq!(report.new_rights, vec!["session".to_string()]);
    assert!(report.granted.is_empty(), "{:?}", report.granted);
    let r = run(&lib, "tool", json!({"mode": "session-set", "arg": "x"}));
    assert!(r.outcome.result.is_err(), "session must not be granted by the upgrade");

    let history = lib.history("tool").unwrap();
    assert_eq!(history.len(), 2);
    assert!(history[0].installed && history[0].version.as_deref() == Some("0.2.0"));
    assert_eq!(history[0].added_rights, vec!["session".to_string()]);
    assert_eq!(history[1].content_hash, first);
    assert!(history[1].archived_ms.is_some() && history[0].archived_ms.is_none());
    assert!(history[1].granted_then.is_empty(), "v1 declared nothing, so nothing was granted");

    // Rollback restores the exact bytes of 0.1.0 and archives 0.2.0.
    let restored = lib.rollback("tool", "0.1.0").unwrap();
    assert_eq!(restored.content_hash, first);
    let installed = env.home.path().join("skills/tool");
    let pristine = env.sources.path().join("tool@0.1.0");
    for f in ["SKILL.md", "skill.wasm"] {
        assert_eq!(std::fs::read(installed.join(f)).unwrap(), std::fs::read(pristine.join(f)).unwrap(), "{f}");
    }
    assert_eq!(lib.info("tool").unwrap().record.content_hash, first);
    assert_eq!(output(&run(&lib, "tool", json!({"mode": "noop"}))), "ok");
    let history = lib.history("tool").unwrap();
    assert_eq!(history.iter().filter(|e| e.installed).count(), 1);
    assert_eq!(history.iter().find(|e| !e.installed).unwrap().version.as_deref(), Some("0.2.0"));

    // And forward again by content-hash prefix.
    let v2_hash = history.iter().find(|e| !e.installed).unwrap().content_hash.clone();
    lib.rollback("tool", &v2_hash[..10]).unwrap();
    assert_eq!(lib.info("tool").unwrap().record.version.as_deref(), Some("0.2.0"));
    let err = lib.rollback("tool", "9.9.9").unwrap_err().to_string();
    assert!(err.contains("no archived version `9.9.9`") && err.contains("0.1.0"), "{err}");
}

#[test]
fn tampered_archive_is_refused_and_remove_keeps_history_unless_purged() {
    let env = Env::new();
    let lib = env.library();
    lib.install(&version_dir(&env, "tool", "0.1.0", ""), &|_| Ok(None)).unwrap();
    let first = lib.info("tool").unwrap().record.content_hash;
    lib.install(&version_dir(&env, "tool", "0.2.0", "capabilities:\n  session: true\n"), &|_| Ok(None)).unwrap();

    let archived = env.home.path().join("history/tool").join(&first).join("SKILL.md");
    let original = std::fs::read(&archived).unwrap();
    std::fs::write(&archived, [original.as_slice(), b"\n<!-- tampered -->\n"].concat()).unwrap();
    let err = lib.rollback("tool", "0.1.0").unwrap_err().to_string();
    assert!(err.contains("do not match their recorded hash"), "{err}");
    assert_eq!(lib.info("tool").unwrap().record.version.as_deref(), Some("0.2.0"), "nothing changed");
    std::fs::write(&archived, &original).unwrap();

    // Removing keeps both versions; rollback reinstalls one.
    lib.remove("tool", false).unwrap();
    assert!(lib.names().unwrap().is_empty());
    assert_eq!(lib.history("tool").unwrap().len(), 2);
    lib.rollback("tool", "0.1.0").unwrap();
    assert_eq!(output(&run(&lib, "tool", json!({"mode": "noop"}))), "ok");

    lib.remove("tool", true).unwrap();
    assert!(lib.history("tool").is_err(), "purge deletes the history");
}

#[test]
fn reinstalling_the_same_bytes_adds_no_history() {
    let env = Env::new();
    let lib = env.library();
    let v1 = version_dir(&env, "tool", "0.1.0", "");
    lib.install(&v1, &|_| Ok(None)).unwrap();
    lib.install(&v1, &|_| Ok(None)).unwrap();
    assert_eq!(lib.history("tool").unwrap().len(), 1);
}

#[test]
fn killing_an_install_midway_leaves_a_runnable_skill() {
    let env = Env::new();
    let v1 = version_dir(&env, "tool", "0.1.0", "");
    let v2 = version_dir(&env, "tool", "0.2.0", "limits:\n  memory_mb: 32\n");
    let bin = assert_cmd::cargo::cargo_bin("skillhost");
    let cli = |args: &[&str]| {
        std::process::Command::new(&bin)
            .env("SKILLHOST_HOME", env.home.path())
            .envs(common::store_env(env.home.path()))
            .args(args)
            .output()
            .unwrap()
    };
    // The first install compiles; later ones reuse the compile cache and take a few ms, so
    // the kill points spread over what a whole install of v2 takes here (timed once).
    assert!(cli(&["skill", "install", v1.to_str().unwrap()]).status.success());
    let timed = std::time::Instant::now();
    assert!(cli(&["skill", "install", v2.to_str().unwrap()]).status.success());
    let whole_us = (timed.elapsed().as_micros() as u64).max(1_000);
    // Deterministic pseudo-random kill points across the install (staging, swap).
    let mut seed: u64 = 0x5eed;
    let mut killed_midway = 0;
    // At least 12 rounds, and more (up to 36) until 3 were cut off midway: on a loaded
    // machine the one timed install may have been slow, which spreads the kill points past
    // where most installs end.
    for round in 0..36 {
        if round >= 12 && killed_midway >= 3 {
            break;
        }
        let src = if round % 2 == 0 { &v2 } else { &v1 };
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let delay = std::time::Duration::from_micros((seed >> 33) % whole_us);
        let mut child = std::process::Command::new(&bin)
            .env("SKILLHOST_HOME", env.home.path())
            .envs(common::store_env(env.home.path()))
            .args(["skill", "install", src.to_str().unwrap()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(delay);
        let _ = child.kill(); // SIGKILL
        let status = child.wait().unwrap();
        if !status.success() {
            killed_midway += 1;
        }
        let run = cli(&["skill", "run", "tool", "-p", "mode=noop"]);
        assert!(
            run.status.success(),
            "round {round} (killed after {delay:?}): the skill must stay runnable: {}",
            String::from_utf8_lossy(&run.stderr)
        );
        let info = cli(&["--json", "skill", "info", "tool"]);
        let version = serde_json::from_slice::<serde_json::Value>(&info.stdout).unwrap()["record"]["version"].clone();
        assert!(version == "0.1.0" || version == "0.2.0", "{version}");
    }
    assert!(killed_midway >= 3, "only {killed_midway} installs were interrupted; the test did not exercise much");
}

#[test]
fn a_crash_between_the_swap_renames_is_repaired_on_next_open() {
    let env = Env::new();
    {
        let lib = env.library();
        lib.install(&version_dir(&env, "tool", "0.1.0", ""), &|_| Ok(None)).unwrap();
    }
    // The state a crash leaves between "move the old version aside" and "move the new one in".
    let dead_pid = {
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let pid = c.id();
        c.wait().unwrap();
        pid
    };
    let skills = env.home.path().join("skills");
    std::fs::rename(skills.join("tool"), skills.join(format!(".old-tool-{dead_pid}"))).unwrap();
    std::fs::create_dir_all(skills.join(format!(".staging-tool-{dead_pid}"))).unwrap();
    let lib = env.library();
    assert_eq!(lib.names().unwrap(), vec!["tool".to_string()]);
    assert_eq!(output(&run(&lib, "tool", json!({"mode": "noop"}))), "ok");
    assert!(!skills.join(format!(".staging-tool-{dead_pid}")).exists(), "stale staging removed");
}

#[test]
fn history_remembers_what_was_granted_when_a_version_was_archived() {
    let env = Env::new();
    let lib = env.library();
    lib.install(&version_dir(&env, "tool", "0.1.0", "capabilities:\n  session: true\n"), &|m| {
        Ok(Some(Grant::everything(m)))
    })
    .unwrap();
    lib.install(&version_dir(&env, "tool", "0.2.0", "capabilities:\n  session: true\n  env: [PATH]\n"), &|_| Ok(None))
        .unwrap();
    let history = lib.history("tool").unwrap();
    assert_eq!(history[1].version.as_deref(), Some("0.1.0"));
    assert_eq!(history[1].granted_then, vec!["session".to_string()]);
    assert_eq!(history[0].added_rights, vec!["env PATH".to_string()]);
    lib.remove("tool", false).unwrap();
    let history = lib.history("tool").unwrap();
    let v2 = history.iter().find(|e| e.version.as_deref() == Some("0.2.0")).unwrap();
    assert_eq!(v2.granted_then, vec!["session".to_string()], "grants captured before remove revoked them");
}

#[test]
fn a_broken_policy_stops_an_install_before_anything_changes() {
    let env = Env::new();
    let lib = env.library();
    let v1 = version_dir(&env, "tool", "0.1.0", "");
    lib.install(&v1, &|_| Ok(None)).unwrap();
    let v1_hash = lib.info("tool").unwrap().record.content_hash;
    std::fs::write(env.home.path().join("policy.toml"), "[skills.tool\n").unwrap();

    // An upgrade and a new skill both fail up front, with the file named and nothing changed.
    let v2 = version_dir(&env, "tool", "0.2.0", "");
    let other = version_dir(&env, "other", "0.1.0", "");
    for dir in [&v2, &other] {
        let err = format!("{:#}", lib.install(dir, &|m| Ok(Some(Grant::everything(m)))).unwrap_err());
        assert!(err.contains("policy.toml is invalid") && err.contains("Nothing was installed"), "{err}");
    }
    let record = skillhost::library::InstallRecord::read(&env.home.path().join("skills/tool")).unwrap();
    assert_eq!(record.content_hash, v1_hash, "the installed version is untouched");
    assert!(!env.home.path().join("history/tool").exists(), "nothing archived");
    assert_eq!(lib.names().unwrap(), vec!["tool".to_string()], "`other` was not installed");
    let leftovers: Vec<_> = std::fs::read_dir(env.home.path().join("skills"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "no staging left behind: {leftovers:?}");
    let err = format!("{:#}", lib.import(env.sources.path()).unwrap_err());
    assert!(err.contains("Nothing was imported"), "{err}");
}

#[test]
fn scratch_directories_are_named_with_pid_and_randomness_and_recovered_after_a_crash() {
    let env = Env::new();
    {
        let lib = env.library();
        lib.install(&version_dir(&env, "tool", "0.1.0", ""), &|_| Ok(None)).unwrap();
    }
    let dead_pid = {
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let pid = c.id();
        c.wait().unwrap();
        pid
    };
    let skills = env.home.path().join("skills");
    let old = skills.join(format!(".old-tool-{dead_pid}-0123456789abcdef"));
    let staging = skills.join(format!(".staging-tool-{dead_pid}-fedcba9876543210"));
    let live = skills.join(format!(".staging-tool-{}-00112233aabbccdd", std::process::id()));
    std::fs::rename(skills.join("tool"), &old).unwrap();
    std::fs::create_dir_all(&staging).unwrap();
    std::fs::create_dir_all(&live).unwrap();
    let lib = env.library();
    assert_eq!(lib.names().unwrap(), vec!["tool".to_string()], "the moved-aside version is put back");
    assert_eq!(output(&run(&lib, "tool", json!({"mode": "noop"}))), "ok");
    assert!(!staging.exists() && !old.exists(), "a dead process's scratch is cleaned up");
    assert!(live.exists(), "a live process's scratch is left alone");
    std::fs::remove_dir_all(&live).unwrap();
    // What a shared store's pull moved aside (a skill replaced or removed there) is deleted,
    // never put back: the store, not the copy, says what the home holds.
    let pulled = skills.join(format!(".pulled-gone-{dead_pid}-0123456789abcdef"));
    std::fs::create_dir_all(&pulled).unwrap();
    std::fs::write(pulled.join("SKILL.md"), "---\nname: gone\n---\n").unwrap();
    drop(lib);
    let lib = env.library();
    assert!(!pulled.exists() && !skills.join("gone").exists(), "a pull's aside copy came back");
    assert_eq!(lib.names().unwrap(), vec!["tool".to_string()]);

    // New scratch names carry the pid and a random part, so two installs of one process never share one.
    let a = skillhost::fsutil::ScratchName::new_path(&skills, "staging", "tool");
    let b = skillhost::fsutil::ScratchName::new_path(&skills, "staging", "tool");
    assert_ne!(a, b);
    let parsed = skillhost::fsutil::ScratchName::parse(a.file_name().unwrap().to_str().unwrap()).unwrap();
    assert_eq!((parsed.kind.as_str(), parsed.name.as_str(), parsed.pid), ("staging", "tool", std::process::id()));
}

#[test]
fn library_open_sweeps_temp_files_of_killed_atomic_writes_in_the_home() {
    let env = Env::new();
    let home = env.home.path();
    std::fs::create_dir_all(home.join("cache")).unwrap();
    std::fs::create_dir_all(home.join("audit")).unwrap();
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    let dead = gone.id();
    gone.wait().unwrap();
    let mut live = std::process::Command::new("sleep").arg("60").spawn().unwrap();
    let swept = [
        home.join(format!(".policy.toml.{dead}-abcdefABCDEF.tmp")),
        home.join(format!(".secrets.json.{dead}-abcdefABCDEF.tmp")),
        home.join("cache").join(format!(".x.cwasm.{dead}-abcdefABCDEF.tmp")),
        home.join("audit").join(format!(".seal.json.{dead}-abcdefABCDEF.tmp")),
    ];
    let kept = [home.join(format!(".policy.toml.{}-abcdefABCDEF.tmp", live.id())), home.join("notes.tmp")];
    for path in swept.iter().chain(&kept) {
        std::fs::write(path, b"half-written").unwrap();
    }
    let lib = env.library();
    for path in &swept {
        assert!(!path.exists(), "{} should be swept", path.display());
    }
    for path in &kept {
        assert!(path.exists(), "{} should be kept", path.display());
    }
    // The home still works: a policy write goes through its own temp file and leaves none.
    let dir = env.probe_as("tool", "capabilities:\n  session: true\n");
    lib.install(&dir, &|m| Ok(Some(Grant::everything(m)))).unwrap();
    let leftovers: Vec<_> = std::fs::read_dir(home)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp") && n.contains(&format!(".{}-", std::process::id())))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    live.kill().unwrap();
    live.wait().unwrap();
}

/// The compile cache's payload files (`SHA-ENGINE.cwasm`), by component sha256.
fn cache_payloads(env: &Env) -> std::collections::BTreeSet<String> {
    std::fs::read_dir(env.home.path().join("cache"))
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_suffix(".cwasm").map(|s| s[..64].to_string()))
        .collect()
}

/// Make every file in the home's cache look `secs` old.
fn age_cache(env: &Env, secs: u64) {
    for e in std::fs::read_dir(env.home.path().join("cache")).unwrap().flatten() {
        if e.path().is_file() {
            let f = std::fs::File::options().write(true).open(e.path()).unwrap();
            f.set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(secs)).unwrap();
        }
    }
}

#[test]
fn compile_cache_entries_of_components_no_longer_installed_are_swept() {
    let env = Env::new();
    let lib = env.library();
    let sha = |path: &std::path::Path| {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(std::fs::read(path).unwrap()))
    };
    let probe = sha(&common::probe_wasm());
    let other_wasm = common::built("generate-report").join("skill.wasm");
    let other = sha(&other_wasm);
    // Two skills on the probe's component, one (`x`) on another component.
    env.install_granted(&lib, "a", "");
    env.install_granted(&lib, "b", "");
    let x = env.probe_as("x", "");
    std::fs::copy(&other_wasm, x.join("skill.wasm")).unwrap();
    lib.install(&x, &|_| Ok(None)).unwrap();
    assert_eq!(cache_payloads(&env), [probe.clone(), other.clone()].into());

    // What else lives in the cache, or was left there by others: files that are not
    // entries, an old entry of a component nobody installed, a fresh one (an install in
    // progress elsewhere may have just compiled it).
    let cache = env.home.path().join("cache");
    let stale = "ab".repeat(32);
    std::fs::write(cache.join("notes.txt"), b"not an entry").unwrap();
    std::fs::write(cache.join(format!("{stale}-00000000deadbeef.cwasm")), b"old").unwrap();
    std::fs::write(cache.join(format!("{stale}-00000000deadbeef.seal")), b"old").unwrap();
    age_cache(&env, 3600);
    let fresh = "cd".repeat(32);
    std::fs::write(cache.join(format!("{fresh}-00000000deadbeef.cwasm")), b"new").unwrap();

    // Removing `a` leaves the probe's entry: `b` still runs that component.
    lib.remove("a", false).unwrap();
    assert_eq!(cache_payloads(&env), [probe.clone(), other.clone(), fresh.clone()].into());
    assert!(!cache.join(format!("{stale}-00000000deadbeef.seal")).exists(), "the stale seal went with its payload");
    assert!(cache.join("notes.txt").exists() && cache.join(".key").exists());

    // Upgrading `x` to the probe's component leaves the other component installed nowhere.
    env.install_granted(&lib, "x", "");
    assert_eq!(cache_payloads(&env), [probe.clone(), fresh.clone()].into());
    let seals: Vec<_> = std::fs::read_dir(&cache)
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| n.ends_with(".seal"))
        .collect();
    assert!(seals.iter().all(|n| n.starts_with(&probe)), "{seals:?}");
    assert_eq!(output(&run(&lib, "x", json!({"mode": "noop"}))), "ok");

    // A record that cannot be read means the installed components are not known: nothing goes.
    age_cache(&env, 3600);
    std::fs::write(env.home.path().join("skills/b/install.json"), b"{ damaged").unwrap();
    assert_eq!(lib.sweep_compile_cache(std::time::Duration::ZERO), Default::default());
    assert!(cache.join(format!("{fresh}-00000000deadbeef.cwasm")).exists());
    std::fs::remove_dir_all(env.home.path().join("skills/b")).unwrap();
    let swept = lib.sweep_compile_cache(std::time::Duration::ZERO);
    assert_eq!(swept.entries, 1, "{swept:?}");
    assert_eq!(cache_payloads(&env), [probe].into());
}
