//! `skillhost key …`, `skillhost trust …`, `skill push` and the oci:// parts of `skill
//! install` / `update` / `verify`: publishing signed skills and installing them only from
//! publishers the user trusts for that repository.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, Result, anyhow, bail};
use clap::{Args, Subcommand};
use serde_json::json;

use super::print_json;
use crate::library::{InstallOptions, InstallReport, Library, Replacement};
use crate::manifest::Manifest;
use crate::oci::{self, Reference, RegistryOptions, Unsigned, keys, trust::TrustFile};
use crate::policy::Grant;

#[derive(Subcommand)]
pub(super) enum KeyCmd {
    /// Generate a signing key pair in <home>/keys: NAME.key (PKCS#8, mode 0600) and NAME.pub
    /// (SubjectPublicKeyInfo PEM, readable by `cosign verify --key` and openssl).
    Generate {
        /// The key's name (letters, digits, `-`, `_`, `.`).
        name: String,
        /// Ed25519 instead of ECDSA P-256 (cosign's default, and what it verifies).
        #[arg(long)]
        ed25519: bool,
    },
    /// The keys in <home>/keys with their fingerprints.
    List,
}

#[derive(Subcommand)]
pub(super) enum TrustCmd {
    /// Trust the public key in KEY.pub for every repository under PREFIX
    /// (`oci://HOST[:PORT]/PATH`; matched at path boundaries).
    Add {
        /// oci://HOST[:PORT]/PATH (or just a host): the repositories this key may sign.
        prefix: String,
        /// A PEM public key (`skillhost key generate` writes one; so does `cosign generate-key-pair`).
        key: PathBuf,
    },
    /// The trust rules: prefix and key fingerprint.
    List,
    /// Stop trusting keys for PREFIX (only the key with --key FINGERPRINT, if given).
    Remove {
        /// The prefix as `trust list` shows it.
        prefix: String,
        /// A fingerprint (or its first 8+ hex digits) as `trust list` shows it.
        #[arg(long)]
        key: Option<String>,
    },
}

/// How to reach a registry (shared by push, install and update).
#[derive(Args, Debug, Clone, Default)]
pub(super) struct RegistryArgs {
    /// Speak plain http to this registry (HOST:PORT) although it is not on loopback.
    #[arg(long = "insecure-registry", value_name = "HOST:PORT")]
    pub insecure_registry: Vec<String>,
    /// A docker config.json with the registry's credentials (default: $DOCKER_CONFIG/config.json,
    /// else ~/.docker/config.json).
    #[arg(long, value_name = "FILE")]
    pub registry_config: Option<PathBuf>,
    /// A bearer token for the registry (overrides the config file).
    #[arg(long, env = "SKILLHOST_REGISTRY_TOKEN", hide_env_values = true)]
    pub registry_token: Option<String>,
}

impl RegistryArgs {
    fn options(&self, registry: &str) -> Result<RegistryOptions> {
        let auth = match (&self.registry_token, &self.registry_config) {
            (Some(t), _) => Some(oci::Auth::Bearer(t.clone())),
            (None, Some(path)) => {
                let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
                Some(oci::Auth::from_docker_config(&text, registry).map_err(|e| anyhow!("{}: {e}", path.display()))?)
            }
            (None, None) => None,
        };
        Ok(RegistryOptions { insecure: self.insecure_registry.clone(), auth, limits: Default::default() })
    }
}

pub(super) fn key(home: &Path, cmd: KeyCmd, json: bool) -> Result<ExitCode> {
    match cmd {
        KeyCmd::Generate { name, ed25519 } => {
            let alg = if ed25519 { keys::KeyAlgorithm::Ed25519 } else { keys::KeyAlgorithm::EcdsaP256 };
            let g = keys::generate(home, &name, alg)?;
            if json {
                print_json(&g)?;
            } else {
                println!("generated {} key `{}` ({})", g.algorithm, g.name, g.fingerprint);
                println!("  private: {} (mode 0600; never share it)", g.private_key.display());
                println!("  public:  {} (give this to whoever installs your skills)", g.public_key.display());
                println!("next: skillhost skill push DIR oci://HOST/REPO:TAG --sign {}", g.name);
            }
        }
        KeyCmd::List => {
            let listed = keys::list(home)?;
            if json {
                let rows: Vec<_> = listed
                    .iter()
                    .map(|(n, k)| json!({ "name": n, "algorithm": k.algorithm, "fingerprint": k.fingerprint() }))
                    .collect();
                print_json(&rows)?;
            } else if listed.is_empty() {
                println!("no keys; create one with `skillhost key generate NAME`");
            } else {
                for (n, k) in &listed {
                    println!("{n:<20} {:<11} {}", k.algorithm.to_string(), k.fingerprint());
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub(super) fn trust(home: &Path, cmd: TrustCmd, json: bool) -> Result<ExitCode> {
    let mut file = TrustFile::load(home)?;
    match cmd {
        TrustCmd::Add { prefix, key } => {
            let text = std::fs::read_to_string(&key).with_context(|| format!("cannot read {}", key.display()))?;
            let public = keys::PublicKey::from_pem(&text).with_context(|| format!("{}", key.display()))?;
            let rule = file.add(&prefix, &public)?;
            file.save(home)?;
            if json {
                print_json(&json!({ "prefix": rule.prefix, "fingerprint": rule.fingerprint }))?;
            } else {
                println!(
                    "trusted {} ({}) to sign skills under oci://{}/",
                    rule.fingerprint, public.algorithm, rule.prefix
                );
            }
        }
        TrustCmd::List => {
            if json {
                let rows: Vec<_> =
                    file.rules.iter().map(|r| json!({ "prefix": r.prefix, "fingerprint": r.fingerprint })).collect();
                print_json(&rows)?;
            } else if file.rules.is_empty() {
                println!("no trusted keys; add one with `skillhost trust add oci://HOST/PREFIX KEY.pub`");
            } else {
                for r in &file.rules {
                    println!("oci://{:<40} {}", r.prefix, r.fingerprint);
                }
            }
        }
        TrustCmd::Remove { prefix, key } => {
            let removed = file.remove(&prefix, key.as_deref())?;
            if removed == 0 {
                bail!(
                    "no trust rule for `{prefix}`{} (see `skillhost trust list`)",
                    key.map(|k| format!(" with key {k}")).unwrap_or_default()
                );
            }
            file.save(home)?;
            if json {
                print_json(&json!({ "removed": removed }))?;
            } else {
                println!(
                    "removed {removed} trust rule(s) for {prefix}; installed skills they signed fail `skill verify`"
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread().enable_all().build()?)
}

pub(super) fn push(
    lib: &Library,
    dir: &Path,
    reference: &str,
    sign: Option<&str>,
    registry: &RegistryArgs,
    json: bool,
) -> Result<ExitCode> {
    let reference = Reference::parse(reference)?;
    let key = sign.map(|n| keys::load_signing(lib.home(), n)).transpose()?;
    let opts = registry.options(&reference.registry)?;
    let pushed = runtime()?.block_on(oci::push(dir, &reference, key.as_ref(), &opts))?;
    if json {
        print_json(&pushed)?;
    } else {
        println!("pushed {} {} to {}", pushed.name, pushed.version.as_deref().unwrap_or(""), pushed.reference);
        println!("  digest: {}", pushed.digest);
        match (&pushed.signer, &pushed.signature_tag) {
            (Some(f), Some(t)) => println!("  signed by {f} (tag {t})"),
            _ => println!("  ! NOT SIGNED: installs will refuse it unless --allow-unsigned; push with --sign KEY"),
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// What `skill install oci://…` needs beyond a directory install.
pub(super) struct OciInstall<'a> {
    pub source: &'a str,
    pub unsigned: Unsigned,
    pub allow_downgrade: bool,
    pub registry: &'a RegistryArgs,
}

/// Fetch and verify `how.source`, then install it as a directory with its provenance.
pub(super) fn install(
    lib: &Library,
    how: &OciInstall<'_>,
    decide: &dyn Fn(&Manifest) -> Result<Option<Grant>>,
    confirm: &dyn Fn(&Replacement) -> Result<bool>,
) -> Result<InstallReport> {
    let reference = Reference::parse(how.source)?;
    let opts = how.registry.options(&reference.registry)?;
    let tmp = tempfile::Builder::new()
        .prefix(".oci-")
        .tempdir_in(lib.home())
        .with_context(|| format!("cannot create a temporary directory in {}", lib.home().display()))?;
    let unpacked = tmp.path().join("unpacked");
    let provenance = runtime()?
        .block_on(oci::fetch(lib.home(), &reference, &unpacked, &opts, how.unsigned))
        .map_err(|e| anyhow!("{}: {e:#}\nNothing was installed.", how.source))?;
    // A skill directory is named after the skill: parse SKILL.md, then give it its name.
    let md_path = unpacked.join("SKILL.md");
    let text = std::fs::read_to_string(&md_path).with_context(|| format!("cannot read {}", md_path.display()))?;
    let parsed = Manifest::parse(&md_path, &text).map_err(|e| anyhow!("{}: {e}", how.source))?;
    crate::manifest::validate_name(&parsed.name).map_err(|e| anyhow!("{}: {e}", how.source))?;
    let dir = tmp.path().join(&parsed.name);
    std::fs::rename(&unpacked, &dir)?;
    let manifest = Manifest::load_dir(&dir).map_err(|e| anyhow!("{}: {e}", how.source))?;
    // Shown before any question: what exactly is about to be installed, and who vouches.
    eprintln!(
        "{} {} from {}",
        manifest.name,
        manifest.version.as_ref().map(ToString::to_string).unwrap_or_default(),
        how.source
    );
    eprintln!("  digest: {}", provenance.digest);
    match &provenance.signer {
        Some(s) => eprintln!("  signed: {s}"),
        None => eprintln!(
            "  ! UNSIGNED OR UNTRUSTED: installing only because of --allow-unsigned (recorded in the audit log)"
        ),
    }
    if let Ok(old) = lib.info(&manifest.name) {
        if let Some(p) = &old.record.provenance
            && p.digest != provenance.digest
        {
            eprintln!("  the tag now points at another digest: installed {} -> {}", p.digest, provenance.digest);
        }
        if let (Some(new), Some(installed)) =
            (&manifest.version, old.record.version.as_deref().and_then(|v| semver::Version::parse(v).ok()))
            && *new < installed
            && !how.allow_downgrade
        {
            bail!(
                "{}: {new} is older than the installed {installed} of `{}`: a downgrade (perhaps a replayed old release). Refused; pass --allow-downgrade if you mean it, or `skillhost skill rollback {} {new}` to go back to a version you had. Nothing was installed.",
                how.source,
                manifest.name,
                manifest.name
            );
        }
    }
    let install_opts = InstallOptions {
        confirm_replace: confirm,
        source: Some(how.source.to_string()),
        provenance: Some(provenance.clone()),
    };
    let report = lib.install_with(&dir, decide, &install_opts)?;
    audit_install(lib, &report, how.source, &provenance)?;
    Ok(report)
}

/// The `install` line of the audit log: what was installed, from where, signed by whom.
fn audit_install(lib: &Library, report: &InstallReport, source: &str, provenance: &oci::Provenance) -> Result<()> {
    let entry = crate::audit::InstallEntry {
        skill: report.name.clone(),
        version: report.version.clone(),
        skill_hash: report.content_hash.clone(),
        source: source.to_string(),
        oci: provenance.clone(),
        status: crate::audit::InstallStatus::of(provenance),
    };
    runtime()?.block_on(lib.append_entry(entry.into_entry())).map_err(|e| {
        anyhow!("`{}` was installed, but the install could not be written to the audit log: {e:#}", report.name)
    })
}

/// `skill install FILE.skill|URL`: unpack, check the signature against the trust file, show
/// who signed it before any question, install, and write the `install` audit line.
pub(super) fn install_bundle(
    lib: &Library,
    bytes: &[u8],
    source: &str,
    unsigned: Unsigned,
    decide: &dyn Fn(&Manifest) -> Result<Option<Grant>>,
    confirm: &dyn Fn(&Replacement) -> Result<bool>,
) -> Result<InstallReport> {
    let opened = lib.open_bundle(bytes, unsigned).map_err(|e| anyhow!("{source}: {e:#}\nNothing was installed."))?;
    let provenance = opened.checked.provenance.clone();
    eprintln!("{} {} from {source}", provenance.repository, opened.version.as_deref().unwrap_or(""));
    eprintln!("  content digest: {}", provenance.digest);
    eprintln!("  {}", opened.checked.trust);
    let install_opts = InstallOptions {
        confirm_replace: confirm,
        source: Some(source.to_string()),
        provenance: Some(provenance.clone()),
    };
    let report = lib.install_with(&opened.dir, decide, &install_opts)?;
    audit_install(lib, &report, source, &provenance)?;
    Ok(report)
}

/// `skill verify NAME`: the installed files against their hashes, and the recorded signer
/// against today's trust file.
pub(super) fn verify(lib: &Library, name: &str, json: bool) -> Result<ExitCode> {
    let info = lib.info(name)?;
    let dir = lib.home().join("skills").join(name);
    let files = crate::library::record::verify_files(&dir, &info.record);
    let trust = TrustFile::load(lib.home())?;
    let p = info.record.provenance.as_ref();
    let still_trusted = p
        .and_then(|p| p.signer.as_ref().map(|s| (p, s)))
        .map(|(p, s)| trust.for_repository(&p.repository).iter().any(|r| r.fingerprint == s.fingerprint));
    // An unsigned bundle installed before a trust rule covered its name fails once one does.
    let signature_now_required =
        p.is_some_and(|p| p.signer.is_none() && !p.unsigned_allowed && !trust.for_repository(&p.repository).is_empty());
    let ok = files.is_ok()
        && still_trusted != Some(false)
        && !p.is_some_and(|p| p.unsigned_allowed)
        && !signature_now_required;
    if json {
        print_json(&json!({
            "name": name,
            "ok": ok,
            "content_hash": info.record.content_hash,
            "files": files.as_ref().map(|_| "match".to_string()).unwrap_or_else(|e| format!("{e:#}")),
            "provenance": p,
            "signer_still_trusted": still_trusted,
            "signature_required": signature_now_required,
        }))?;
    } else {
        println!("{name} {}", info.record.version.as_deref().unwrap_or(""));
        println!("  content hash: {}", info.record.content_hash);
        match &files {
            Ok(()) => println!("  files: {} match their hashes", info.record.files.len()),
            Err(e) => println!("  ! files: {e:#}"),
        }
        match p {
            None => {
                println!("  source: {} (local: no signature to check)", info.record.source.as_deref().unwrap_or("-"))
            }
            Some(p) => {
                println!("  source: {}", p.origin());
                println!("  digest: {}", p.digest);
                match (&p.signer, still_trusted) {
                    (Some(s), Some(true)) => println!("  signed: {s} (still trusted)"),
                    (Some(s), _) => println!(
                        "  ! signed: {s}, but that key is no longer trusted for {} (see `skillhost trust list`)",
                        p.origin()
                    ),
                    (None, _) if p.unsigned_allowed => println!("  ! UNSIGNED: installed with --allow-unsigned"),
                    (None, _) if signature_now_required => println!(
                        "  ! UNSIGNED: your trust file now asks for a signature on {}; reinstall a signed bundle",
                        p.repository
                    ),
                    (None, _) => println!("  unsigned bundle (no trust rule asks for a signature on its name)"),
                }
            }
        }
    }
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
