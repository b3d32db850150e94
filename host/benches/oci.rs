//! `just bench`: installing a signed skill from a loopback OCI registry (Debian's
//! docker-registry, started as tests/oci.rs starts it) against installing the same skill from
//! a local directory, for the Rust probe and the Python scaffold (~19 MB component, built
//! with componentize-py from `.ci/guest-toolchains`); a second install of the same digest
//! (the compile cache warm); and signature verification alone. Install figures are whole
//! `skillhost skill install` processes in fresh homes; ratios are to the directory install
//! measured in the same run.

#[path = "../../tests/common/registry.rs"]
mod registry;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use skillhost::oci::{self, cosign, keys, trust::TrustFile};

const SKILLHOST: &str = env!("CARGO_BIN_EXE_skillhost");

fn p50(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// `skillhost ARGS` with `home`, no proxies and no docker credentials; panics on failure.
fn skillhost(home: &Path, args: &[&str]) -> std::process::Output {
    let mut c = Command::new(SKILLHOST);
    c.env("SKILLHOST_HOME", home).env("DOCKER_CONFIG", home).env_remove("RUST_LOG").args(args);
    for name in ["HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"] {
        c.env_remove(name);
    }
    let out = c.output().unwrap();
    assert!(out.status.success(), "skillhost {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    out
}

fn timed(home: &Path, args: &[&str]) -> Duration {
    let started = Instant::now();
    skillhost(home, args);
    started.elapsed()
}

struct Row {
    label: &'static str,
    size_kib: u64,
    dir: Duration,
    registry: Duration,
    dir_again: Duration,
    registry_again: Duration,
}

/// Push `dir` signed by the publisher's key, then time installs from the directory and from
/// the registry, each into fresh homes (`samples` of each), and a second install into the
/// same home.
fn measure(label: &'static str, dir: &Path, reference: &str, publisher: &Path, tmp: &Path, samples: usize) -> Row {
    let d = dir.to_str().unwrap();
    skillhost(publisher, &["skill", "push", d, reference, "--sign", "alice"]);
    let prefix = reference.rsplit_once('/').unwrap().0.to_string();
    let public = publisher.join("keys/alice.pub");
    let mut n = 0;
    let mut fresh = |trusted: bool| -> PathBuf {
        n += 1;
        let home = tmp.join(format!("{label}-{n}").replace([' ', '(', ')'], ""));
        if trusted {
            skillhost(&home, &["trust", "add", &prefix, public.to_str().unwrap()]);
        }
        home
    };
    let mut dir_times = Vec::new();
    let mut reg_times = Vec::new();
    let mut dir_again = Vec::new();
    let mut reg_again = Vec::new();
    for _ in 0..samples {
        // Interleaved, so a slower moment of the machine hits both.
        let home = fresh(false);
        dir_times.push(timed(&home, &["skill", "install", d, "--yes"]));
        dir_again.push(timed(&home, &["skill", "install", d, "--yes"]));
        let home = fresh(true);
        reg_times.push(timed(&home, &["skill", "install", reference, "--yes"]));
        reg_again.push(timed(&home, &["skill", "install", reference, "--yes"]));
    }
    Row {
        label,
        size_kib: std::fs::metadata(dir.join("skill.wasm")).unwrap().len() / 1024,
        dir: p50(dir_times),
        registry: p50(reg_times),
        dir_again: p50(dir_again),
        registry_again: p50(reg_again),
    }
}

fn main() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    let probe = repo.join("target/skills/probe");
    assert!(probe.join("skill.wasm").is_file(), "run `just build-skills` first");
    let tmp = tempfile::tempdir().unwrap();
    let reg = registry::RealRegistry::start();
    let host = reg.host();
    let publisher = tmp.path().join("publisher");
    skillhost(&publisher, &["key", "generate", "alice"]);

    let mut rows = vec![measure("probe", &probe, &format!("oci://{host}/alice/probe:1"), &publisher, tmp.path(), 9)];
    let componentize = std::env::var_os("SKILLHOST_COMPONENTIZE_PY")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo.join("target/guest-toolchains/python/bin/componentize-py"));
    if componentize.exists() {
        // SAFETY: set before any thread of this benchmark reads the environment.
        unsafe { std::env::set_var("SKILLHOST_COMPONENTIZE_PY", &componentize) };
        let dir = skillhost::authoring::new_python_skill(tmp.path(), "py-hello").unwrap();
        skillhost::authoring::build(&dir).unwrap();
        let reference = format!("oci://{host}/alice/py-hello:1");
        rows.push(measure("Python (scaffold)", &dir, &reference, &publisher, tmp.path(), 3));
    } else {
        println!("Python: skipped (componentize-py not installed; run .ci/guest-toolchains)");
    }

    // Verification alone: the payload checks, the trust lookup (PEM keys parsed as install
    // does) and the ECDSA P-256 verification; then with the signature's two registry reads.
    let key = keys::load_signing(&publisher, "alice").unwrap();
    let mut trust = TrustFile::default();
    trust.add(&format!("oci://{host}/alice"), &key.public).unwrap();
    let reference = oci::Reference::parse(&format!("oci://{host}/alice/probe:1")).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let reg_client = oci::Registry::new(&host, &[], oci::Auth::Anonymous).unwrap();
    let (digest, _) = rt.block_on(reg_client.manifest(&reference.repository, "1")).unwrap().unwrap();
    let repository = reference.repository_path();
    let payload = cosign::payload(&repository, &digest);
    let stored = [cosign::StoredSignature { signature: key.sign(&payload).unwrap(), payload }];
    let verify_alone = p50((0..500)
        .map(|_| {
            let started = Instant::now();
            cosign::verify(&stored, &repository, &digest, &trust).unwrap();
            started.elapsed()
        })
        .collect());
    let sig_tag = cosign::signature_tag(&digest);
    let fetch_and_verify = p50((0..100)
        .map(|_| {
            let started = Instant::now();
            rt.block_on(async {
                let (_, bytes) = reg_client.manifest(&reference.repository, &sig_tag).await.unwrap().unwrap();
                let m: oci::registry::ImageManifest = serde_json::from_slice(&bytes).unwrap();
                let layer = &m.layers[0];
                let payload = reg_client.blob(&reference.repository, layer).await.unwrap();
                let signature = cosign::signature_of(layer.annotations.as_ref()).unwrap();
                cosign::verify(&[cosign::StoredSignature { payload, signature }], &repository, &digest, &trust)
                    .unwrap();
            });
            started.elapsed()
        })
        .collect());

    println!("skill install, p50 of whole processes in fresh homes (ratio to the directory install, same run)");
    println!(
        "{:<18} {:>9} {:>11} {:>16} {:>7} {:>15} {:>19} {:>7}",
        "skill", "wasm KiB", "dir ms", "registry ms", "ratio", "dir again ms", "registry again ms", "ratio"
    );
    for r in &rows {
        println!(
            "{:<18} {:>9} {:>11.1} {:>16.1} {:>6.2}x {:>15.1} {:>19.1} {:>6.2}x",
            r.label,
            r.size_kib,
            ms(r.dir),
            ms(r.registry),
            r.registry.as_secs_f64() / r.dir.as_secs_f64(),
            ms(r.dir_again),
            ms(r.registry_again),
            r.registry_again.as_secs_f64() / r.dir_again.as_secs_f64(),
        );
    }
    println!("(again: a second install of the same digest into the same home: the compile cache is warm,");
    println!(" the registry is asked again and the signature verified again)");
    println!("signature verification alone (payload, trust rules, ECDSA P-256): {:.3} ms p50", ms(verify_alone));
    println!("signature fetch (.sig manifest + payload blob) + verification: {:.3} ms p50", ms(fetch_and_verify));
    let probe_ratio = rows[0].registry.as_secs_f64() / rows[0].dir.as_secs_f64();
    println!(
        "targets: verification adds < 5 ms: {} ({:.3} ms); registry install of the probe < 2x a directory install: {} ({probe_ratio:.2}x)",
        if fetch_and_verify < Duration::from_millis(5) { "met" } else { "NOT met" },
        ms(fetch_and_verify),
        if probe_ratio < 2.0 { "met" } else { "NOT met" },
    );
}
