//! `.skill` bundles: one file to publish a skill. A bundle is a tar archive whose first
//! entry, `MANIFEST.json`, lists every other file with its sha256; `skill install` accepts
//! a bundle file or an http(s) URL to one, and refuses it unless every file is listed, every
//! hash matches and every path stays inside the bundle.
//!
//! Packed: SKILL.md, skill.wasm and the Agent Skills folders (scripts/, references/,
//! assets/). Build outputs and sources are not part of a bundle.
//!
//! `skill pack --sign KEY` adds a cosign simple-signing signature to MANIFEST.json over the
//! bundle's content digest (see [`BundleManifest::digest`]); [`crate::oci::bundle`] checks it
//! against the trust file. Readers that predate signatures ignore the field.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Component, Path, PathBuf};

use anyhow::{Context as _, Result, anyhow, bail};
use serde::{Deserialize, Serialize};

use crate::manifest::{Manifest, validate_name};

const FORMAT: &str = "skillhost-bundle/1";
const MANIFEST: &str = "MANIFEST.json";
const PACKED_DIRS: [&str; 3] = ["scripts", "references", "assets"];
const MAX_FILE_BYTES: u64 = 64 << 20;
const MAX_BUNDLE_BYTES: usize = 256 << 20;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BundleManifest {
    pub format: String,
    pub name: String,
    pub version: Option<String>,
    /// Relative path -> sha256 of the file's bytes.
    pub files: BTreeMap<String, String>,
    /// A signature over [`BundleManifest::digest`] (`skill pack --sign`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<BundleSignature>,
}

/// A cosign simple-signing signature carried by a bundle: the payload names `bundle:NAME`
/// and the content digest; the key is there to name the signer, never to decide trust.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BundleSignature {
    /// The simple-signing payload, base64.
    pub payload: String,
    /// The signature over the payload bytes, base64 (DER ECDSA or raw Ed25519).
    pub signature: String,
    /// The signer's public key, PEM (SubjectPublicKeyInfo).
    pub key: String,
}

impl BundleManifest {
    /// `sha256:<content hash>`: the same hash install.json records for these files (path and
    /// sha256 of every file), so a signature covers every byte the bundle installs.
    pub fn digest(&self) -> String {
        format!("sha256:{}", crate::text::content_hash(&self.files))
    }
}

/// A verified bundle unpacked into `dir`, with its manifest (and signature, if any).
pub struct Unpacked {
    pub dir: PathBuf,
    pub manifest: BundleManifest,
}

/// Pack the skill in `dir` into a bundle at `out`.
pub fn pack(dir: &Path, out: &Path) -> Result<BundleManifest> {
    pack_signed(dir, out, None)
}

/// What signs a bundle: its manifest (name and [`BundleManifest::digest`]) in, the signature
/// out (`crate::oci::bundle::sign` with a key). Passed in, so packing knows nothing of keys.
pub type Sign<'a> = &'a dyn Fn(&BundleManifest) -> Result<BundleSignature>;

/// [`pack`], signed by `sign` when given.
pub fn pack_signed(dir: &Path, out: &Path, sign: Option<Sign<'_>>) -> Result<BundleManifest> {
    let manifest = Manifest::load_dir(dir).map_err(|e| anyhow!("{e}"))?;
    let files = skill_files(dir)?;
    let mut listing = BTreeMap::new();
    let mut contents = Vec::new();
    for (rel, path) in &files {
        let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        listing.insert(rel.clone(), crate::text::sha256_hex(&bytes));
        contents.push((rel.clone(), bytes));
    }
    let mut bundle = BundleManifest {
        format: FORMAT.into(),
        name: manifest.name.clone(),
        version: manifest.version.as_ref().map(ToString::to_string),
        files: listing,
        signature: None,
    };
    if let Some(sign) = sign {
        bundle.signature = Some(sign(&bundle)?);
    }
    let mut builder = tar::Builder::new(Vec::new());
    let mut add = |name: &str, bytes: &[u8]| -> Result<()> {
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(0o644);
        header.set_mtime(0);
        header.set_cksum();
        builder.append_data(&mut header, name, bytes).with_context(|| format!("cannot add {name} to the bundle"))
    };
    add(MANIFEST, &serde_json::to_vec_pretty(&bundle)?)?;
    for (rel, bytes) in &contents {
        add(rel, bytes)?;
    }
    let data = builder.into_inner().context("cannot finish the bundle")?;
    crate::fsutil::write_atomic_shared(out, &data)?;
    Ok(bundle)
}

/// The files that make up a skill in `dir`, as (relative path, path): SKILL.md, skill.wasm
/// if present, and everything under scripts/, references/ and assets/. The same set is
/// packed, installed and hashed into the skill's content hash.
pub fn skill_files(dir: &Path) -> Result<Vec<(String, PathBuf)>> {
    let mut files: Vec<(String, PathBuf)> = vec![("SKILL.md".into(), dir.join("SKILL.md"))];
    if dir.join("skill.wasm").is_file() {
        files.push(("skill.wasm".into(), dir.join("skill.wasm")));
    }
    for sub in PACKED_DIRS {
        collect(dir, &dir.join(sub), &mut files)?;
    }
    Ok(files)
}

fn collect(root: &Path, dir: &Path, out: &mut Vec<(String, PathBuf)>) -> Result<()> {
    let Ok(rd) = std::fs::read_dir(dir) else { return Ok(()) };
    let mut entries: Vec<_> = rd.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let path = e.path();
        let kind = e.file_type()?;
        if kind.is_symlink() {
            bail!("{} is a symlink; bundles hold regular files only", path.display());
        } else if kind.is_dir() {
            collect(root, &path, out)?;
        } else {
            let rel = path.strip_prefix(root).unwrap_or(&path).to_string_lossy().replace('\\', "/");
            out.push((rel, path));
        }
    }
    Ok(())
}

/// Unpack and verify `bytes` into `into/<name>/`; returns that directory.
pub fn unpack(bytes: &[u8], into: &Path) -> Result<PathBuf> {
    unpack_with_manifest(bytes, into).map(|u| u.dir)
}

/// [`unpack`], returning the bundle's manifest too (its signature is not checked here).
pub fn unpack_with_manifest(bytes: &[u8], into: &Path) -> Result<Unpacked> {
    if bytes.len() > MAX_BUNDLE_BYTES {
        bail!("the bundle is {} bytes, over the limit of {MAX_BUNDLE_BYTES}", bytes.len());
    }
    let mut archive = tar::Archive::new(bytes);
    let mut entries = archive.entries().context("not a .skill bundle (not a tar archive)")?;
    let mut first = entries
        .next()
        .ok_or_else(|| anyhow!("the bundle is empty"))?
        .context("not a .skill bundle (unreadable first entry)")?;
    if first.path()?.to_string_lossy() != MANIFEST {
        bail!("not a .skill bundle: the first entry must be {MANIFEST}");
    }
    let mut text = Vec::new();
    first.by_ref().take(1 << 20).read_to_end(&mut text)?;
    let manifest: BundleManifest =
        serde_json::from_slice(&text).map_err(|e| anyhow!("{MANIFEST} in the bundle is invalid: {e}"))?;
    if manifest.format != FORMAT {
        bail!("unsupported bundle format `{}` (this skillhost reads {FORMAT})", manifest.format);
    }
    validate_name(&manifest.name).map_err(|e| anyhow!("bundle name `{}`: {e}", manifest.name))?;
    let dir = into.join(&manifest.name);
    std::fs::create_dir_all(&dir)?;
    let mut seen = BTreeMap::new();
    for entry in entries {
        let mut entry = entry.context("the bundle is truncated or corrupt")?;
        let path = entry.path()?.into_owned();
        let rel = path.to_string_lossy().into_owned();
        if !entry.header().entry_type().is_file() {
            bail!("bundle entry `{rel}` is not a regular file; refusing the bundle");
        }
        if path.components().any(|c| !matches!(c, Component::Normal(_))) {
            bail!("bundle entry `{rel}` escapes the bundle; refusing it");
        }
        let expected =
            manifest.files.get(&rel).ok_or_else(|| anyhow!("bundle entry `{rel}` is not listed in {MANIFEST}"))?;
        if entry.size() > MAX_FILE_BYTES {
            bail!("bundle entry `{rel}` is larger than {MAX_FILE_BYTES} bytes");
        }
        let mut bytes = Vec::new();
        entry.read_to_end(&mut bytes)?;
        let actual = crate::text::sha256_hex(&bytes);
        if &actual != expected {
            bail!(
                "bundle entry `{rel}` does not match its hash in {MANIFEST} (expected {expected}, found {actual}); the bundle was modified"
            );
        }
        let target = dir.join(&path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&target, &bytes)?;
        seen.insert(rel, ());
    }
    if let Some(missing) = manifest.files.keys().find(|k| !seen.contains_key(*k)) {
        bail!("the bundle lists `{missing}` but does not contain it");
    }
    Ok(Unpacked { dir, manifest })
}

/// GET `url` (http or https) through the host's pooled client ([`crate::http`]: proxies from
/// the environment, redirects followed up to a bound, a loop refused), with a first-byte and a
/// between-bytes timeout and a size cap.
pub async fn download(url: &str) -> Result<Vec<u8>> {
    let client = crate::http::shared().map_err(|e| anyhow!("cannot fetch {url}: {e}"))?;
    download_with(&client, url).await
}

/// [`download`] with a given client.
pub async fn download_with(client: &reqwest::Client, url: &str) -> Result<Vec<u8>> {
    use std::time::Duration;
    const FIRST_BYTE: Duration = Duration::from_secs(30);
    const BETWEEN_BYTES: Duration = Duration::from_secs(30);
    let parsed = reqwest::Url::parse(url).map_err(|e| anyhow!("`{url}` is not a URL: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") || !parsed.has_host() {
        bail!("`{url}` is not an http(s) URL with a host");
    }
    let failed = |e: reqwest::Error| match crate::http::RedirectRefused::find(&e) {
        Some(refused) => anyhow!("cannot fetch {url}: {refused}; refusing it"),
        None => anyhow!("cannot fetch {url}: {}", error_chain(&e)),
    };
    let mut response = tokio::time::timeout(FIRST_BYTE, client.get(parsed).send())
        .await
        .map_err(|_| anyhow!("cannot fetch {url}: no answer within {} s", FIRST_BYTE.as_secs()))?
        .map_err(failed)?;
    let status = response.status();
    let fetched = response.url().to_string();
    let shown = if fetched == url { String::new() } else { format!(" (redirected to {fetched})") };
    if !status.is_success() {
        bail!("fetching {url}{shown} answered {status}");
    }
    if response.content_length().is_some_and(|n| n > MAX_BUNDLE_BYTES as u64) {
        bail!("{url}{shown} is larger than {MAX_BUNDLE_BYTES} bytes");
    }
    let mut bytes = Vec::new();
    loop {
        let chunk = tokio::time::timeout(BETWEEN_BYTES, response.chunk())
            .await
            .map_err(|_| anyhow!("download of {url} stalled: nothing for {} s", BETWEEN_BYTES.as_secs()))?
            .map_err(|e| anyhow!("download of {url} failed: {}", error_chain(&e)))?;
        let Some(chunk) = chunk else { break };
        bytes.extend_from_slice(&chunk);
        if bytes.len() > MAX_BUNDLE_BYTES {
            bail!("{url}{shown} is larger than {MAX_BUNDLE_BYTES} bytes");
        }
    }
    Ok(bytes)
}

/// reqwest's message and its causes, on one line ("error sending request" alone says nothing).
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![error.to_string()];
    let mut cause = error.source();
    while let Some(current) = cause {
        let text = current.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        cause = current.source();
    }
    parts.join(": ")
}
