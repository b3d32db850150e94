//! Signed skills from OCI registries: push, trust, install, verify, update, against Debian's
//! docker-registry on loopback and a hostile hand-written registry.

mod common;
#[path = "common/registry.rs"]
mod registry;

use std::path::Path;
use std::time::Duration;

use assert_cmd::Command;
use common::Env;
use registry::{Answer, HostileRegistry, RealRegistry};
use serde_json::{Value, json};
use skillhost::oci::{self, Reference, RegistryOptions, Unsigned, cosign, keys, registry::ImageManifest};

/// The shared CLI helper (home, workspace, no provider variables) with no proxies and no
/// docker credentials of the machine's user.
fn skillhost(env: &Env) -> Command {
    let mut c = env.skillhost();
    for name in ["HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"] {
        c.env_remove(name);
    }
    c.env("DOCKER_CONFIG", env.sources.path());
    c
}

fn json_of(out: &[u8]) -> Value {
    serde_json::from_slice(out).unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(out)))
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A probe skill named `name` at `version`, with a scripts/ file.
fn probe(env: &Env, name: &str, version: &str) -> std::path::PathBuf {
    let made = env.probe_as(name, "");
    let dir = env.sources.path().join(format!("v{version}")).join(name);
    std::fs::create_dir_all(dir.parent().unwrap()).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::rename(&made, &dir).unwrap();
    let md = std::fs::read_to_string(dir.join("SKILL.md")).unwrap();
    std::fs::write(dir.join("SKILL.md"), md.replace("version: 0.1.0", &format!("version: {version}"))).unwrap();
    std::fs::create_dir_all(dir.join("scripts")).unwrap();
    std::fs::write(dir.join("scripts/helper.sh"), format!("echo {version}\n")).unwrap();
    dir
}

fn key(env: &Env, name: &str) -> std::path::PathBuf {
    skillhost(env).args(["key", "generate", name]).assert().success();
    env.home.path().join("keys").join(format!("{name}.pub"))
}

fn push(env: &Env, dir: &Path, reference: &str, sign: Option<&str>) -> Value {
    let mut c = skillhost(env);
    c.args(["--json", "skill", "push"]).arg(dir).arg(reference);
    if let Some(k) = sign {
        c.args(["--sign", k]);
    }
    let out = c.output().unwrap();
    assert!(out.status.success(), "push failed: {}{}", stderr(&out), String::from_utf8_lossy(&out.stdout));
    json_of(&out.stdout)
}

fn install(env: &Env, reference: &str, extra: &[&str]) -> std::process::Output {
    skillhost(env).args(["--json", "skill", "install", reference]).args(extra).output().unwrap()
}

fn audit_lines(env: &Env) -> Vec<Value> {
    let text = std::fs::read_to_string(env.home.path().join("audit/audit.jsonl")).unwrap_or_default();
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn push_sign_trust_install_run_and_verify_through_a_real_registry() {
    let reg = RealRegistry::start();
    let env = Env::new();
    let alice = key(&env, "alice");
    let dir = probe(&env, "tool", "1.0.0");
    let reference = format!("oci://{}/alice/tool:1.0.0", reg.host());
    let pushed = push(&env, &dir, &reference, Some("alice"));
    let digest = pushed["digest"].as_str().unwrap().to_string();

    // Nobody is trusted yet: refused, saying what to do.
    let out = install(&env, &reference, &["--yes"]);
    assert!(!out.status.success());
    let e = json_of(&out.stdout)["error"].as_str().unwrap().to_string();
    assert!(
        e.contains("no key is trusted") && e.contains("skillhost trust add") && e.contains("--allow-unsigned"),
        "{e}"
    );
    assert!(!env.home.path().join("skills/tool").exists());

    skillhost(&env).args(["trust", "add", &format!("oci://{}/alice/", reg.host())]).arg(&alice).assert().success();
    let out = install(&env, &reference, &["--yes"]);
    assert!(out.status.success(), "{}{}", stderr(&out), String::from_utf8_lossy(&out.stdout));
    let report = json_of(&out.stdout);
    assert_eq!(report["provenance"]["digest"], digest.as_str());
    assert_eq!(report["provenance"]["signer"]["rule"], format!("{}/alice", reg.host()));
    let fingerprint = report["provenance"]["signer"]["fingerprint"].as_str().unwrap().to_string();
    assert!(stderr(&out).contains(&format!("digest: {digest}")), "the prompt shows the digest: {}", stderr(&out));
    let record: Value =
        serde_json::from_slice(&std::fs::read(env.home.path().join("skills/tool/install.json")).unwrap()).unwrap();
    assert_eq!(record["provenance"]["digest"], digest.as_str());
    assert_eq!(std::fs::read_to_string(env.home.path().join("skills/tool/scripts/helper.sh")).unwrap(), "echo 1.0.0\n");

    // Every call's audit line carries the digest and signer; the install has a line too.
    skillhost(&env).args(["skill", "run", "tool", "-p", "mode=echo", "-p", "arg=hi"]).assert().success();
    let lines = audit_lines(&env);
    let install_line = lines.iter().find(|l| l["kind"] == "install").expect("an install line");
    assert_eq!(install_line["status"], "signed");
    let call = lines.iter().find(|l| l["kind"] == "call").expect("a call line");
    assert_eq!(call["oci"]["digest"], digest.as_str());
    assert_eq!(call["oci"]["signer"], fingerprint.as_str());
    skillhost(&env).args(["audit", "verify"]).assert().success();

    let out = skillhost(&env).args(["skill", "verify", "tool"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(String::from_utf8_lossy(&out.stdout).contains("still trusted"));

    // Pinned by digest: the same bytes.
    let pinned = format!("oci://{}/alice/tool@{digest}", reg.host());
    let out = install(&env, &pinned, &["--yes"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(json_of(&out.stdout)["unchanged"], true);

    // A key removed from trust: verify fails, a new install is refused.
    skillhost(&env).args(["trust", "remove", &format!("oci://{}/alice", reg.host())]).assert().success();
    let out = skillhost(&env).args(["skill", "verify", "tool"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("no longer trusted"));
    let out = install(&env, &reference, &["--yes"]);
    assert!(!out.status.success());

    // The registry down: the installed digest still runs; an install says what failed.
    let mut reg = reg;
    reg.stop();
    skillhost(&env).args(["skill", "run", "tool", "-p", "mode=echo", "-p", "arg=hi"]).assert().success();
    let out = install(&env, &reference, &["--yes"]);
    let e = json_of(&out.stdout)["error"].as_str().unwrap().to_string();
    assert!(e.contains("cannot reach the registry") && e.contains("Nothing was installed"), "{e}");
}

#[test]
fn unsigned_is_refused_and_allow_unsigned_is_loud_and_audited() {
    let reg = RealRegistry::start();
    let env = Env::new();
    let dir = probe(&env, "loose", "0.1.0");
    let reference = format!("oci://{}/someone/loose:0.1.0", reg.host());
    push(&env, &dir, &reference, None);
    let out = install(&env, &reference, &["--yes"]);
    let e = json_of(&out.stdout)["error"].as_str().unwrap().to_string();
    assert!(e.contains("is not signed") && e.contains("--allow-unsigned"), "{e}");
    let out = install(&env, &reference, &["--yes", "--allow-unsigned"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("UNSIGNED"), "{}", stderr(&out));
    assert_eq!(json_of(&out.stdout)["provenance"]["unsigned_allowed"], true);
    let lines = audit_lines(&env);
    assert!(lines.iter().any(|l| l["kind"] == "install" && l["status"] == "unsigned-allowed"), "{lines:?}");
    assert_eq!(skillhost(&env).args(["skill", "verify", "loose"]).output().unwrap().status.code(), Some(1));

    // `skill update` refuses the unsigned new version too, unless --allow-unsigned, which
    // is loud and audited again.
    push(&env, &probe(&env, "loose", "0.2.0"), &reference, None);
    let out = skillhost(&env).args(["--json", "skill", "update", "loose", "--yes"]).output().unwrap();
    let e = json_of(&out.stdout)["error"].as_str().unwrap().to_string();
    assert!(e.contains("is not signed") && e.contains("--allow-unsigned"), "{e}");
    let out =
        skillhost(&env).args(["--json", "skill", "update", "loose", "--yes", "--allow-unsigned"]).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("UNSIGNED"), "{}", stderr(&out));
    assert_eq!(json_of(&out.stdout)["version"], "0.2.0");
    let allowed =
        audit_lines(&env).iter().filter(|l| l["kind"] == "install" && l["status"] == "unsigned-allowed").count();
    assert_eq!(allowed, 2);
}

/// Write `<DOCKER_CONFIG>/config.json` with basic credentials for `registry`.
fn docker_config(env: &Env, registry: &str, user: &str, password: &str) -> String {
    use base64::Engine as _;
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    let config = json!({ "auths": { registry: { "auth": auth } } });
    std::fs::write(env.sources.path().join("config.json"), serde_json::to_vec(&config).unwrap()).unwrap();
    auth
}

/// Every file under `dir`, as text (lossy).
fn all_text(dir: &Path) -> String {
    let mut out = String::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.push_str(&all_text(&p));
        } else if let Ok(bytes) = std::fs::read(&p) {
            out.push_str(&String::from_utf8_lossy(&bytes));
        }
    }
    out
}

#[test]
fn basic_auth_against_a_real_registry_refuses_a_wrong_password_and_never_records_credentials() {
    let password = "correct-horse-battery";
    let reg = RealRegistry::start_with_htpasswd("alice", password);
    let env = Env::new();
    let alice = key(&env, "alice");
    skillhost(&env).args(["trust", "add", &format!("oci://{}/alice", reg.host())]).arg(&alice).assert().success();
    let dir = probe(&env, "tool", "1.0.0");
    let reference = format!("oci://{}/alice/tool:1.0.0", reg.host());
    let push_out = |env: &Env| {
        skillhost(env)
            .args(["--json", "skill", "push"])
            .arg(&dir)
            .arg(&reference)
            .args(["--sign", "alice"])
            .output()
            .unwrap()
    };

    // No credentials: refused, saying how to give them.
    let out = push_out(&env);
    let e = json_of(&out.stdout)["error"].as_str().unwrap().to_string();
    assert!(e.contains("asks for credentials (401)") && e.contains("config.json"), "{e}");

    // A wrong password: refused naming the user, never the password.
    docker_config(&env, &reg.host(), "alice", "wrong-password");
    let out = push_out(&env);
    let e = json_of(&out.stdout)["error"].as_str().unwrap().to_string();
    assert!(e.contains("refused the password of user `alice` (401)"), "{e}");
    assert!(!e.contains("wrong-password"), "{e}");

    // The right one: push, then install (debug logging on), then run.
    let auth = docker_config(&env, &reg.host(), "alice", password);
    let out = push_out(&env);
    assert!(out.status.success(), "{}{}", stderr(&out), String::from_utf8_lossy(&out.stdout));
    let out = skillhost(&env)
        .env("RUST_LOG", "debug")
        .args(["--json", "skill", "install", &reference, "--yes"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}{}", stderr(&out), String::from_utf8_lossy(&out.stdout));
    assert!(json_of(&out.stdout)["provenance"]["signer"]["fingerprint"].is_string());
    skillhost(&env).args(["skill", "run", "tool", "-p", "mode=noop"]).assert().success();
    let everything = all_text(env.home.path()) + &stderr(&out) + &String::from_utf8_lossy(&out.stdout);
    assert!(
        !everything.contains(password) && !everything.contains(&auth),
        "credentials leaked into the home or the output"
    );
    assert!(all_text(&env.home.path().join("audit")).contains("\"kind\":\"install\""), "the audit log was read");
}

#[test]
fn bearer_tokens_come_from_the_token_service_for_a_password_or_a_refresh_token() {
    let x = hostile();
    let dir = probe(&x.env, "tool", "1.0.0");
    let built = oci::artifact::build(&dir, "test").unwrap();
    let repo_path = format!("{}/alice/tool", x.h.host());
    publish(&x.h, "alice/tool", "1", &built, &x.key, &repo_path);
    x.h.require_token(registry::TokenAuth {
        user: "alice".into(),
        password: "s3cret-pw".into(),
        refresh: "refresh-abc".into(),
        token: "tok-123".into(),
    });
    let reference = format!("oci://{repo_path}:1");
    let basic = |user: &str, password: &str| oci::Auth::Basic { user: user.into(), password: password.into() };

    let e = format!("{:#}", fetch_as(&x, &reference, oci::Auth::Anonymous).unwrap_err());
    assert!(e.contains("asks for credentials"), "{e}");
    let e = format!("{:#}", fetch_as(&x, &reference, basic("alice", "wrong-pw")).unwrap_err());
    assert!(e.contains("refused the password of user `alice`") && !e.contains("wrong-pw"), "{e}");
    let e = format!("{:#}", fetch_as(&x, &reference, oci::Auth::Bearer("stale".into())).unwrap_err());
    assert!(e.contains("refused the registry token") && !e.contains("stale"), "{e}");

    // The password fetches a token (GET with basic auth, service and scope from the
    // challenge); every registry request after it carries that token.
    let before = x.h.seen().len();
    fetch_as(&x, &reference, basic("alice", "s3cret-pw")).expect("basic credentials through the token service");
    let seen = &x.h.seen()[before..];
    let token_req = seen.iter().find(|s| s.path.starts_with("/token")).expect("a token request");
    assert_eq!(token_req.method, "GET");
    assert!(
        token_req.path.contains("service=hostile") && token_req.path.contains("scope=repository%3Aalice%2Ftool%3Apull"),
        "{token_req:?}"
    );
    let after_token: Vec<_> = seen.iter().skip_while(|s| !s.path.starts_with("/token")).skip(1).collect();
    assert!(
        !after_token.is_empty() && after_token.iter().all(|s| s.authorization.as_deref() == Some("Bearer tok-123")),
        "{after_token:?}"
    );

    // A docker `identitytoken` is an OAuth2 refresh token: exchanged by POST, never sent to the registry.
    let before = x.h.seen().len();
    fetch_as(&x, &reference, oci::Auth::IdentityToken("refresh-abc".into())).expect("the refresh token flow");
    let seen = &x.h.seen()[before..];
    assert!(seen.iter().any(|s| s.method == "POST" && s.path.starts_with("/token")), "{seen:?}");
    assert!(
        seen.iter().filter(|s| s.path.starts_with("/v2/")).all(|s| !s
            .authorization
            .as_deref()
            .unwrap_or("")
            .contains("refresh-abc"))
    );
    // And a token given directly (--registry-token) is used as it is.
    fetch_as(&x, &reference, oci::Auth::Bearer("tok-123".into())).expect("a registry token");

    // config.json's `identitytoken` is that refresh token; Debug never shows a secret.
    let e = oci::Auth::from_docker_config(r#"{"auths":{"reg:1":{"identitytoken":"t"}}}"#, "reg:1").unwrap();
    assert!(matches!(e, oci::Auth::IdentityToken(_)));
    assert!(!format!("{:?}", basic("alice", "s3cret-pw")).contains("s3cret"), "Debug shows the password");
}

#[test]
fn a_manifest_swapped_under_a_signed_tag_and_a_moved_tag_are_caught() {
    let reg = RealRegistry::start();
    let env = Env::new();
    let alice = key(&env, "alice");
    skillhost(&env).args(["trust", "add", &format!("oci://{}/alice", reg.host())]).arg(&alice).assert().success();
    let reference = format!("oci://{}/alice/tool:latest", reg.host());
    push(&env, &probe(&env, "tool", "1.0.0"), &reference, Some("alice"));
    let out = install(&env, &reference, &["--yes"]);
    assert!(out.status.success(), "{}", stderr(&out));

    // Someone without the key pushes other content under the signed tag.
    let v2 = probe(&env, "tool", "2.0.0");
    push(&env, &v2, &reference, None);
    let out = skillhost(&env).args(["--json", "skill", "update", "tool", "--yes"]).output().unwrap();
    let e = json_of(&out.stdout)["error"].as_str().unwrap().to_string();
    assert!(e.contains("is not signed"), "{e}");

    // Alice signs 2.0.0: the update shows the tag moved (the probe holds no grants, so
    // nothing is asked without a tty).
    push(&env, &v2, &reference, Some("alice"));
    let out = skillhost(&env).args(["--json", "skill", "update", "tool"]).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("the tag now points at another digest"), "{}", stderr(&out));
    assert_eq!(json_of(&out.stdout)["version"], "2.0.0");

    // Downgrade to the older signed release: refused unless --allow-downgrade.
    let old = format!("oci://{}/alice/tool:1.0.0", reg.host());
    push(&env, &probe(&env, "tool", "1.0.0"), &old, Some("alice"));
    let out = install(&env, &old, &["--yes"]);
    let e = json_of(&out.stdout)["error"].as_str().unwrap().to_string();
    assert!(e.contains("downgrade") && e.contains("--allow-downgrade"), "{e}");
    let out = install(&env, &old, &["--yes", "--allow-downgrade"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(json_of(&out.stdout)["version"], "1.0.0");
}

#[test]
fn an_independent_reader_pulls_the_component_over_the_registry_api() {
    let reg = RealRegistry::start();
    let env = Env::new();
    key(&env, "alice");
    let dir = probe(&env, "tool", "1.0.0");
    push(&env, &dir, &format!("oci://{}/alice/tool:1.0.0", reg.host()), Some("alice"));
    let script = r#"
import hashlib, json, sys, urllib.request
base, repo, tag, out = sys.argv[1:5]
req = urllib.request.Request(f"{base}/v2/{repo}/manifests/{tag}", headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})
m = json.load(urllib.request.urlopen(req))
assert m["config"]["mediaType"] == "application/vnd.wasm.config.v0+json", m["config"]
layer = m["layers"][0]
assert layer["mediaType"] == "application/wasm", layer
blob = urllib.request.urlopen(f"{base}/v2/{repo}/blobs/{layer['digest']}").read()
assert "sha256:" + hashlib.sha256(blob).hexdigest() == layer["digest"]
cfg = json.load(urllib.request.urlopen(f"{base}/v2/{repo}/blobs/{m['config']['digest']}"))
assert cfg["architecture"] == "wasm" and cfg["os"] == "wasip2", cfg
open(out, "wb").write(blob)
print(m["artifactType"], m["annotations"]["org.opencontainers.image.version"])
"#;
    let out_file = env.sources.path().join("pulled.wasm");
    let out = std::process::Command::new("python3")
        .args(["-c", script, &format!("http://{}", reg.host()), "alice/tool", "1.0.0"])
        .arg(&out_file)
        .env_remove("HTTP_PROXY")
        .env_remove("http_proxy")
        .output()
        .expect("python3 is needed for the independent OCI reader");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "application/vnd.skillhost.skill.v1 1.0.0");
    assert_eq!(std::fs::read(out_file).unwrap(), std::fs::read(dir.join("skill.wasm")).unwrap());
}

#[test]
fn a_signature_made_by_openssl_verifies_and_openssl_verifies_ours() {
    let openssl = Path::new("/usr/bin/openssl");
    assert!(openssl.exists(), "openssl is needed for this interop test: apt-get install -y openssl (.ci/run does)");
    let tmp = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let out = std::process::Command::new(openssl).args(args).current_dir(tmp.path()).output().unwrap();
        assert!(out.status.success(), "openssl {args:?}: {}", stderr(&out));
    };
    run(&["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "ec.pem"]);
    run(&["pkey", "-in", "ec.pem", "-pubout", "-out", "ec.pub"]);
    let digest = format!("sha256:{}", "c".repeat(64));
    let repository = "127.0.0.1:5000/alice/tool";
    let payload = cosign::payload(repository, &digest);
    std::fs::write(tmp.path().join("payload.json"), &payload).unwrap();
    run(&["dgst", "-sha256", "-sign", "ec.pem", "-out", "sig.der", "payload.json"]);
    let public = keys::PublicKey::from_pem(&std::fs::read_to_string(tmp.path().join("ec.pub")).unwrap()).unwrap();
    let signature = std::fs::read(tmp.path().join("sig.der")).unwrap();
    let mut trust = oci::trust::TrustFile::default();
    trust.add("oci://127.0.0.1:5000/alice", &public).unwrap();
    let stored = [cosign::StoredSignature { payload: payload.clone(), signature: signature.clone() }];
    let signer = cosign::verify(&stored, repository, &digest, &trust).expect("openssl's signature verifies");
    assert_eq!(signer.fingerprint, public.fingerprint());
    // openssl's own fingerprint of the key: sha256 over the DER SubjectPublicKeyInfo.
    run(&["pkey", "-pubin", "-in", "ec.pub", "-outform", "DER", "-out", "ec.der"]);
    assert_eq!(keys::PublicKey::from_spki(&std::fs::read(tmp.path().join("ec.der")).unwrap()).unwrap(), public);

    // And the other way: openssl checks a signature by a skillhost key.
    let home = tempfile::tempdir().unwrap();
    for (name, alg) in [("p", keys::KeyAlgorithm::EcdsaP256), ("e", keys::KeyAlgorithm::Ed25519)] {
        let g = keys::generate(home.path(), name, alg).unwrap();
        let key = keys::load_signing(home.path(), name).unwrap();
        std::fs::write(tmp.path().join("ours.sig"), key.sign(&payload).unwrap()).unwrap();
        let pub_path = g.public_key.to_str().unwrap();
        match alg {
            keys::KeyAlgorithm::EcdsaP256 => {
                run(&["dgst", "-sha256", "-verify", pub_path, "-signature", "ours.sig", "payload.json"])
            }
            keys::KeyAlgorithm::Ed25519 => run(&[
                "pkeyutl",
                "-verify",
                "-pubin",
                "-inkey",
                pub_path,
                "-rawin",
                "-in",
                "payload.json",
                "-sigfile",
                "ours.sig",
            ]),
        }
        // openssl reads our private keys too (Ed25519 is written as PKCS#8 v1 for it), and
        // derives the same public key.
        run(&["pkey", "-in", g.private_key.to_str().unwrap(), "-pubout", "-out", "derived.pub"]);
        let derived = std::fs::read_to_string(tmp.path().join("derived.pub")).unwrap();
        assert_eq!(keys::PublicKey::from_pem(&derived).unwrap(), key.public, "{alg}");
    }
    // A tampered payload does not verify.
    let mut bad = payload.clone();
    bad[10] ^= 1;
    assert!(!public.verify(&bad, &signature));
}

// ---- the hostile registry ------------------------------------------------------------

struct Published {
    digest: String,
    manifest: ImageManifest,
    blobs: Vec<Vec<u8>>,
}

/// Serve `built` as REPO:TAG on the hostile registry, signed by `key` for `signed_for`.
fn publish(
    h: &HostileRegistry,
    repo: &str,
    tag: &str,
    built: &oci::artifact::Built,
    key: &keys::SigningKey,
    signed_for: &str,
) -> Published {
    let manifest: ImageManifest = serde_json::from_slice(&built.manifest).unwrap();
    let digest = oci::registry::digest_of(&built.manifest);
    h.set(&format!("/v2/{repo}/manifests/{tag}"), Answer::Bytes(built.manifest.clone()));
    h.set(&format!("/v2/{repo}/manifests/{digest}"), Answer::Bytes(built.manifest.clone()));
    for b in &built.blobs {
        h.set(&format!("/v2/{repo}/blobs/{}", oci::registry::digest_of(b)), Answer::Bytes(b.clone()));
    }
    let payload = cosign::payload(signed_for, &digest);
    let signature = cosign::sign(key, &payload).unwrap();
    let payload_digest = oci::registry::digest_of(&payload);
    h.set(&format!("/v2/{repo}/blobs/{payload_digest}"), Answer::Bytes(payload.clone()));
    let sig = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": { "mediaType": "application/vnd.oci.image.config.v1+json", "digest": oci::registry::digest_of(b"{}"), "size": 2 },
        "layers": [{ "mediaType": cosign::PAYLOAD_MEDIA_TYPE, "digest": payload_digest, "size": payload.len(),
                     "annotations": { cosign::SIGNATURE_ANNOTATION: signature } }],
    });
    h.set(
        &format!("/v2/{repo}/manifests/{}", cosign::signature_tag(&digest)),
        Answer::Bytes(serde_json::to_vec(&sig).unwrap()),
    );
    Published { digest, manifest, blobs: built.blobs.clone() }
}

struct Hostile {
    env: Env,
    h: HostileRegistry,
    key: keys::SigningKey,
}

fn hostile() -> Hostile {
    let env = Env::new();
    let h = HostileRegistry::start();
    keys::generate(env.home.path(), "alice", keys::KeyAlgorithm::EcdsaP256).unwrap();
    let key = keys::load_signing(env.home.path(), "alice").unwrap();
    let mut trust = oci::trust::TrustFile::default();
    trust.add(&format!("oci://{}/alice", h.host()), &key.public).unwrap();
    trust.save(env.home.path()).unwrap();
    Hostile { env, h, key }
}

fn fetch(x: &Hostile, reference: &str, limits: oci::registry::Limits) -> anyhow::Result<oci::Provenance> {
    fetch_with(x, reference, limits, oci::Auth::Anonymous)
}

fn fetch_as(x: &Hostile, reference: &str, auth: oci::Auth) -> anyhow::Result<oci::Provenance> {
    fetch_with(x, reference, short_limits(), auth)
}

fn fetch_with(
    x: &Hostile,
    reference: &str,
    limits: oci::registry::Limits,
    auth: oci::Auth,
) -> anyhow::Result<oci::Provenance> {
    let into = tempfile::tempdir().unwrap();
    let opts = RegistryOptions { insecure: Vec::new(), auth: Some(auth), limits };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(oci::fetch(
        x.env.home.path(),
        &Reference::parse(reference).unwrap(),
        into.path(),
        &opts,
        Unsigned::Refuse,
    ))
}

fn short_limits() -> oci::registry::Limits {
    oci::registry::Limits {
        manifest_bytes: 1 << 20,
        blob_bytes: 8 << 20,
        first_byte: Duration::from_secs(2),
        between_bytes: Duration::from_millis(500),
        total: Duration::from_secs(5),
    }
}

#[test]
fn hostile_registry_tampered_blob_other_repository_and_bounds() {
    let x = hostile();
    let dir = probe(&x.env, "tool", "1.0.0");
    let built = oci::artifact::build(&dir, "test").unwrap();
    let repo_path = format!("{}/alice/tool", x.h.host());
    let p = publish(&x.h, "alice/tool", "1", &built, &x.key, &repo_path);
    let reference = format!("oci://{repo_path}:1");
    // The honest registry: fetched and verified.
    let prov = fetch(&x, &reference, short_limits()).unwrap();
    assert_eq!(prov.digest, p.digest);

    // A tampered blob (the component's bytes changed, its digest kept).
    let wasm = &p.manifest.layers[0];
    let mut evil = p.blobs[1].clone();
    evil[100] ^= 0xff;
    x.h.set(&format!("/v2/alice/tool/blobs/{}", wasm.digest), Answer::Bytes(evil));
    let e = format!("{:#}", fetch(&x, &reference, short_limits()).unwrap_err());
    assert!(e.contains("tampered"), "{e}");

    // Endless and stalled blobs end at the bounds.
    x.h.set(&format!("/v2/alice/tool/blobs/{}", wasm.digest), Answer::Endless);
    let e = format!("{:#}", fetch(&x, &reference, short_limits()).unwrap_err());
    assert!(e.contains("larger than"), "{e}");
    x.h.set(&format!("/v2/alice/tool/blobs/{}", wasm.digest), Answer::Stall);
    let e = format!("{:#}", fetch(&x, &reference, short_limits()).unwrap_err());
    assert!(e.contains("stalled"), "{e}");
    // A huge manifest.
    x.h.set("/v2/alice/tool/manifests/huge", Answer::Endless);
    let e = format!("{:#}", fetch(&x, &format!("oci://{repo_path}:huge"), short_limits()).unwrap_err());
    assert!(e.contains("larger than"), "{e}");

    // A blob served through a redirect to another loopback server: allowed, digest-checked.
    let other = HostileRegistry::start();
    other.set("/elsewhere", Answer::Bytes(p.blobs[1].clone()));
    x.h.set(
        &format!("/v2/alice/tool/blobs/{}", wasm.digest),
        Answer::Redirect(format!("http://{}/elsewhere", other.host())),
    );
    fetch(&x, &reference, short_limits()).expect("a redirected blob with the right digest is fine");
    other.set("/elsewhere", Answer::Bytes(b"not the component".to_vec()));
    let e = format!("{:#}", fetch(&x, &reference, short_limits()).unwrap_err());
    assert!(e.contains("tampered"), "{e}");

    // Alice's valid signature over Bob's repository, copied next to Bob's artifact: Bob's
    // repository is trusted with Alice's key too, so only the payload check stops it.
    let bob_path = format!("{}/bob/tool", x.h.host());
    let mut trust = oci::trust::TrustFile::load(x.env.home.path()).unwrap();
    trust.add(&format!("oci://{bob_path}"), &x.key.public).unwrap();
    trust.save(x.env.home.path()).unwrap();
    publish(&x.h, "bob/tool", "1", &built, &x.key, &repo_path);
    let e = format!("{:#}", fetch(&x, &format!("oci://{bob_path}:1"), short_limits()).unwrap_err());
    assert!(e.contains("signs repository"), "{e}");
}

fn with_files_layer(
    built: &oci::artifact::Built,
    tar_bytes: Vec<u8>,
    listing: &[(&str, &[u8])],
) -> oci::artifact::Built {
    let mut manifest: ImageManifest = serde_json::from_slice(&built.manifest).unwrap();
    let mut blobs = built.blobs.clone();
    let listing_json = {
        let mut m: std::collections::BTreeMap<String, String> = serde_json::from_slice(blobs.last().unwrap()).unwrap();
        for (rel, bytes) in listing {
            m.insert(rel.to_string(), hex::encode(<sha2::Sha256 as sha2::Digest>::digest(bytes)));
        }
        serde_json::to_vec(&m).unwrap()
    };
    let files_index = manifest.layers.iter().position(|l| l.media_type == oci::artifact::FILES_LAYER).unwrap();
    manifest.layers[files_index] = oci::registry::Descriptor {
        annotations: None,
        ..oci::registry::Descriptor::of(oci::artifact::FILES_LAYER, &tar_bytes)
    };
    blobs[files_index + 1] = tar_bytes;
    let last = manifest.layers.len() - 1;
    manifest.layers[last] = oci::registry::Descriptor::of(oci::artifact::LISTING_LAYER, &listing_json);
    *blobs.last_mut().unwrap() = listing_json;
    oci::artifact::Built {
        blobs,
        manifest: serde_json::to_vec(&manifest).unwrap(),
        name: built.name.clone(),
        version: built.version.clone(),
    }
}

#[test]
fn hostile_registry_a_climbing_path_or_a_symlink_in_the_files_layer_is_refused() {
    let x = hostile();
    let dir = probe(&x.env, "tool", "1.0.0");
    let built = oci::artifact::build(&dir, "test").unwrap();
    let repo_path = format!("{}/alice/tool", x.h.host());

    // `scripts/../../escape` written into the raw header (the tar crate refuses to set it).
    let evil = b"owned\n";
    let mut header = tar::Header::new_old();
    let name = b"scripts/../../escape";
    header.as_old_mut().name[..name.len()].copy_from_slice(name);
    header.set_size(evil.len() as u64);
    header.set_mode(0o644);
    header.set_cksum();
    let mut data = header.as_bytes().to_vec();
    data.extend_from_slice(evil);
    data.resize(data.len().div_ceil(512) * 512 + 1024, 0);
    let climbing = with_files_layer(&built, data, &[("scripts/../../escape", evil)]);
    publish(&x.h, "alice/tool", "climb", &climbing, &x.key, &repo_path);
    let e = format!("{:#}", fetch(&x, &format!("oci://{repo_path}:climb"), short_limits()).unwrap_err());
    assert!(e.contains("outside scripts/"), "{e}");
    assert!(!x.env.home.path().parent().unwrap().join("escape").exists());

    let mut t = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Symlink);
    h.set_size(0);
    h.set_mode(0o777);
    t.append_link(&mut h, "scripts/link", "/etc/passwd").unwrap();
    let linked = with_files_layer(&built, t.into_inner().unwrap(), &[]);
    publish(&x.h, "alice/tool", "link", &linked, &x.key, &repo_path);
    let e = format!("{:#}", fetch(&x, &format!("oci://{repo_path}:link"), short_limits()).unwrap_err());
    assert!(e.contains("not a regular file"), "{e}");
}
