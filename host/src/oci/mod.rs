//! Skills from OCI registries, signed: push a skill as a CNCF Wasm artifact and sign it in
//! cosign's key-based format; install by resolving a tag to a digest once, verifying that
//! digest's signature against the keys trusted for the repository ([`trust`]), then pulling
//! exactly that digest with every blob checked. What was verified (digest, signer, trust
//! rule) becomes the [`Provenance`] of the install record and of every call's audit line.
//!
//! - [`keys`]: key pairs (ECDSA P-256, Ed25519) stored as PKCS#8 / SubjectPublicKeyInfo PEM.
//! - [`trust`]: `<home>/trust.toml`, keys per registry/repository prefix.
//! - [`cosign`]: the simple-signing payload and the `sha256-<hex>.sig` signature manifest.
//! - [`registry`]: the distribution API over the host's HTTP client, bounded in size and time.
//! - [`artifact`]: the layout of a skill as layers, and unpacking it safely.
//! - [`bundle`]: the same signatures over `.skill` bundles (`bundle:NAME` in the trust file).

use std::path::Path;

use anyhow::{Result, anyhow, bail};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

pub mod artifact;
pub mod bundle;
pub mod cosign;
pub mod keys;
pub mod registry;
pub mod trust;

pub use cosign::Signer;
pub use registry::{Auth, Reference, Registry};

/// Where an installed version came from, as verified at install time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provenance {
    /// `HOST[:PORT]/REPOSITORY`, or `bundle:NAME` for a `.skill` bundle.
    pub repository: String,
    /// The tag installed from, when one was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// The manifest digest that was verified and pulled.
    pub digest: String,
    /// Who signed it; `None` when installed with `--allow-unsigned` over a missing or failed
    /// signature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signer: Option<Signer>,
    /// Installed with `--allow-unsigned` without a signature that verified.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unsigned_allowed: bool,
}

impl Provenance {
    /// From a `.skill` bundle (`repository` is `bundle:NAME`, `digest` its content digest).
    pub fn is_bundle(&self) -> bool {
        self.repository.starts_with("bundle:")
    }

    /// Where it came from, as a user writes it: `oci://HOST/REPO[:TAG]` or `bundle:NAME`.
    pub fn origin(&self) -> String {
        if self.is_bundle() {
            return self.repository.clone();
        }
        format!("oci://{}{}", self.repository, self.tag.as_ref().map(|t| format!(":{t}")).unwrap_or_default())
    }

    /// The small object calls' audit lines carry.
    pub fn audit_value(&self) -> Value {
        json!({
            "repository": self.repository,
            "digest": self.digest,
            "signer": self.signer.as_ref().map(|s| s.fingerprint.clone()),
            "unsigned_allowed": self.unsigned_allowed,
        })
    }
}

/// How to reach registries.
#[derive(Debug, Clone, Default)]
pub struct RegistryOptions {
    /// Registries (`HOST[:PORT]`) spoken to over plain http although not on loopback.
    pub insecure: Vec<String>,
    /// Credentials; `None` reads the docker config.json (`$DOCKER_CONFIG/config.json`, else
    /// `~/.docker/config.json`), anonymous when it has no entry.
    pub auth: Option<Auth>,
    pub limits: registry::Limits,
}

impl RegistryOptions {
    fn open(&self, registry: &str) -> Result<Registry> {
        let auth = match &self.auth {
            Some(a) => a.clone(),
            None => docker_config_auth(registry)?,
        };
        let mut r = Registry::new(registry, &self.insecure, auth)?;
        r.limits = self.limits;
        Ok(r)
    }
}

fn docker_config_auth(registry: &str) -> Result<Auth> {
    let path = match std::env::var_os("DOCKER_CONFIG") {
        Some(d) => std::path::PathBuf::from(d).join("config.json"),
        None => match std::env::var_os("HOME") {
            Some(h) => std::path::PathBuf::from(h).join(".docker").join("config.json"),
            None => return Ok(Auth::Anonymous),
        },
    };
    match std::fs::read_to_string(&path) {
        Ok(text) => Auth::from_docker_config(&text, registry).map_err(|e| anyhow!("{}: {e}", path.display())),
        Err(_) => Ok(Auth::Anonymous),
    }
}

/// What a push wrote.
#[derive(Debug, Clone, Serialize)]
pub struct Pushed {
    pub name: String,
    pub version: Option<String>,
    pub reference: String,
    pub digest: String,
    /// The tag holding the signature, and the signing key's fingerprint.
    pub signature_tag: Option<String>,
    pub signer: Option<String>,
}

/// Push the skill in `dir` to `reference` (which names a tag), signed by `key` if given.
pub async fn push(
    dir: &Path,
    reference: &Reference,
    key: Option<&keys::SigningKey>,
    opts: &RegistryOptions,
) -> Result<Pushed> {
    let Some(tag) = &reference.tag else { bail!("{reference}: a push names a tag (oci://HOST/REPO:TAG)") };
    if reference.digest.is_some() {
        bail!("{reference}: a push names a tag, not a digest");
    }
    let built = artifact::build(dir, &reference.to_string())?;
    let reg = opts.open(&reference.registry)?;
    let repo = &reference.repository;
    for blob in &built.blobs {
        reg.push_blob(repo, blob).await?;
    }
    let digest = reg.push_manifest(repo, tag, &built.manifest).await?;
    let mut pushed = Pushed {
        name: built.name.clone(),
        version: built.version.clone(),
        reference: reference.to_string(),
        digest: digest.clone(),
        signature_tag: None,
        signer: None,
    };
    if let Some(key) = key {
        let tag = sign_and_push(&reg, reference, &digest, key).await?;
        pushed.signature_tag = Some(tag);
        pushed.signer = Some(key.public.fingerprint());
    }
    Ok(pushed)
}

/// Sign `repository@digest` with `key` and store the signature under its `.sig` tag (next to
/// signatures already there, as cosign does).
pub async fn sign_and_push(
    reg: &Registry,
    reference: &Reference,
    digest: &str,
    key: &keys::SigningKey,
) -> Result<String> {
    let repo = &reference.repository;
    let payload = cosign::payload(&reference.repository_path(), digest);
    let signature = cosign::sign(key, &payload)?;
    let payload_digest = reg.push_blob(repo, &payload).await?;
    let config = serde_json::to_vec(&json!({
        "architecture": "", "os": "", "config": {},
        "rootfs": { "type": "layers", "diff_ids": [payload_digest] },
    }))?;
    reg.push_blob(repo, &config).await?;
    let tag = cosign::signature_tag(digest);
    let mut layers: Vec<registry::Descriptor> = match reg.manifest(repo, &tag).await? {
        Some((_, bytes)) => serde_json::from_slice::<registry::ImageManifest>(&bytes)
            .map(|m| m.layers.into_iter().filter(|l| l.digest != payload_digest).collect())
            .unwrap_or_default(),
        None => Vec::new(),
    };
    let mut layer = registry::Descriptor::of(cosign::PAYLOAD_MEDIA_TYPE, &payload);
    layer.annotations = Some(Map::from_iter([(cosign::SIGNATURE_ANNOTATION.to_string(), Value::String(signature))]));
    layers.push(layer);
    let manifest = registry::ImageManifest {
        schema_version: 2,
        media_type: Some(registry::OCI_MANIFEST.into()),
        artifact_type: None,
        config: registry::Descriptor::of("application/vnd.oci.image.config.v1+json", &config),
        layers,
        annotations: None,
    };
    reg.push_manifest(repo, &tag, &serde_json::to_vec(&manifest)?).await?;
    Ok(tag)
}

/// Most signature layers read from one `.sig` manifest.
const MAX_SIGNATURES: usize = 16;

/// The signatures stored for `digest` (none when there is no `.sig` tag).
async fn signatures(reg: &Registry, repo: &str, digest: &str) -> Result<Vec<cosign::StoredSignature>> {
    let Some((_, bytes)) = reg.manifest(repo, &cosign::signature_tag(digest)).await? else { return Ok(Vec::new()) };
    let m: registry::ImageManifest =
        serde_json::from_slice(&bytes).map_err(|e| anyhow!("the signature manifest of {digest} is invalid: {e}"))?;
    let mut out = Vec::new();
    for l in m.layers.iter().filter(|l| l.media_type == cosign::PAYLOAD_MEDIA_TYPE).take(MAX_SIGNATURES) {
        if l.size > 64 << 10 {
            continue;
        }
        let Ok(signature) = cosign::signature_of(l.annotations.as_ref()) else { continue };
        let payload = reg.blob(repo, l).await?;
        out.push(cosign::StoredSignature { payload, signature });
    }
    Ok(out)
}

/// Whether an install may go ahead without a signature that verifies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Unsigned {
    #[default]
    Refuse,
    /// `--allow-unsigned`: installed, recorded and audited as such.
    Allow,
}

/// Resolve `reference` to a digest, verify its signature against `home`'s trust file, pull
/// that digest and unpack it into `into` (a fresh directory). Nothing is written elsewhere.
pub async fn fetch(
    home: &Path,
    reference: &Reference,
    into: &Path,
    opts: &RegistryOptions,
    unsigned: Unsigned,
) -> Result<Provenance> {
    let reg = opts.open(&reference.registry)?;
    let repo = &reference.repository;
    let wanted = reference.digest.clone().or(reference.tag.clone()).unwrap_or_default();
    // One resolution: the bytes received are hashed, and that digest is what is verified and
    // installed (a tag moved in between changes nothing here).
    let (digest, manifest_bytes) = reg
        .manifest(repo, &wanted)
        .await?
        .ok_or_else(|| anyhow!("{reference}: the registry has no such manifest (404); check the repository and tag"))?;
    let trust = trust::TrustFile::load(home)?;
    let repository = reference.repository_path();
    let found = signatures(&reg, repo, &digest).await?;
    let signer = match cosign::verify(&found, &repository, &digest, &trust) {
        Ok(s) => Some(s),
        Err(why) if unsigned == Unsigned::Allow => {
            tracing::warn!("installing {reference} ({digest}) without a verified signature: {}", reasons(&why));
            None
        }
        Err(why) => {
            let what = if found.is_empty() {
                format!("{reference} ({digest}) is not signed (no {} tag)", cosign::signature_tag(&digest))
            } else {
                format!("no signature of {reference} ({digest}) verifies: {}", reasons(&why))
            };
            bail!(
                "{what}. Refusing to install it. If you trust its publisher, get their public key and run `skillhost trust add oci://{repository} KEY.pub`; to install it anyway, pass --allow-unsigned (recorded in the audit log)."
            );
        }
    };
    let manifest: registry::ImageManifest = serde_json::from_slice(&manifest_bytes)
        .map_err(|e| anyhow!("{reference}: the manifest is not an OCI image manifest: {e}"))?;
    let layers = artifact::layers(&manifest)?;
    let mut fetched = Vec::new();
    for (kind, d) in layers {
        fetched.push((kind, reg.blob(repo, d).await?));
    }
    artifact::unpack(&fetched, into)?;
    let unsigned_allowed = signer.is_none();
    Ok(Provenance { repository, tag: reference.tag.clone(), digest, signer, unsigned_allowed })
}

fn reasons(why: &[cosign::SignatureRejected]) -> String {
    if why.is_empty() {
        return "there are no signatures".into();
    }
    why.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}
