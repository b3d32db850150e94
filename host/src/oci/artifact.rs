//! A skill as an OCI artifact, in the CNCF "Wasm OCI artifact" layout so other Wasm tools
//! (wkg, wash, Wassette) can pull the component: an image manifest whose config is
//! `application/vnd.wasm.config.v0+json` and whose first layer is the component
//! (`application/wasm`). The rest of the skill rides in further layers with skillhost media
//! types: SKILL.md, a tar of scripts/, references/ and assets/, and the file listing (path ->
//! sha256) that every unpacked file is checked against.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::{Component, Path};

use anyhow::{Context as _, Result, anyhow, bail};
use serde_json::{Map, Value, json};

use super::registry::{Descriptor, ImageManifest, OCI_MANIFEST, digest_of};
use crate::manifest::Manifest;
use crate::text::sha256_hex;

pub const ARTIFACT_TYPE: &str = "application/vnd.skillhost.skill.v1";
pub const WASM_CONFIG: &str = "application/vnd.wasm.config.v0+json";
pub const WASM_LAYER: &str = "application/wasm";
pub const SKILL_MD_LAYER: &str = "application/vnd.skillhost.skill.manifest.v1+markdown";
pub const FILES_LAYER: &str = "application/vnd.skillhost.skill.files.v1.tar";
pub const LISTING_LAYER: &str = "application/vnd.skillhost.skill.listing.v1+json";
const TITLE: &str = "org.opencontainers.image.title";

/// An artifact ready to push: the blobs (config first) and the manifest bytes.
pub struct Built {
    pub blobs: Vec<Vec<u8>>,
    pub manifest: Vec<u8>,
    pub name: String,
    pub version: Option<String>,
}

fn titled(media_type: &str, bytes: &[u8], title: &str) -> Descriptor {
    let mut d = Descriptor::of(media_type, bytes);
    d.annotations = Some(Map::from_iter([(TITLE.to_string(), Value::String(title.into()))]));
    d
}

/// The artifact of the skill in `dir`.
pub fn build(dir: &Path, source: &str) -> Result<Built> {
    let manifest = Manifest::load_dir(dir).map_err(|e| anyhow!("{e}"))?;
    let mut listing = BTreeMap::new();
    let mut wasm = None;
    let mut skill_md = Vec::new();
    let mut tar = tar::Builder::new(Vec::new());
    let mut has_files = false;
    for (rel, path) in crate::bundle::skill_files(dir)? {
        let bytes = std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
        listing.insert(rel.clone(), sha256_hex(&bytes));
        match rel.as_str() {
            "skill.wasm" => wasm = Some(bytes),
            "SKILL.md" => skill_md = bytes,
            _ => {
                let mut header = tar::Header::new_gnu();
                header.set_size(bytes.len() as u64);
                header.set_mode(0o644);
                header.set_mtime(0);
                header.set_cksum();
                tar.append_data(&mut header, &rel, bytes.as_slice()).with_context(|| format!("cannot pack {rel}"))?;
                has_files = true;
            }
        }
    }
    let mut layers = Vec::new();
    let mut blobs = Vec::new();
    if let Some(w) = wasm {
        layers.push(titled(WASM_LAYER, &w, "skill.wasm"));
        blobs.push(w);
    }
    layers.push(titled(SKILL_MD_LAYER, &skill_md, "SKILL.md"));
    blobs.push(skill_md);
    if has_files {
        let t = tar.into_inner().context("cannot finish the files layer")?;
        layers.push(titled(FILES_LAYER, &t, "files.tar"));
        blobs.push(t);
    }
    let listing = serde_json::to_vec_pretty(&listing)?;
    layers.push(titled(LISTING_LAYER, &listing, "files.json"));
    blobs.push(listing);

    let created = time::OffsetDateTime::now_utc().format(&time::format_description::well_known::Rfc3339)?;
    let config = serde_json::to_vec(&json!({
        "created": created,
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": layers.iter().filter(|l| l.media_type == WASM_LAYER).map(|l| l.digest.clone()).collect::<Vec<_>>(),
    }))?;
    let mut annotations = Map::new();
    annotations.insert(TITLE.into(), manifest.name.clone().into());
    if let Some(v) = &manifest.version {
        annotations.insert("org.opencontainers.image.version".into(), v.to_string().into());
    }
    let description: String = manifest.description.chars().take(512).collect();
    annotations.insert("org.opencontainers.image.description".into(), description.into());
    annotations.insert("org.opencontainers.image.created".into(), created.into());
    annotations.insert("org.opencontainers.image.source".into(), source.into());
    let image = ImageManifest {
        schema_version: 2,
        media_type: Some(OCI_MANIFEST.into()),
        artifact_type: Some(ARTIFACT_TYPE.into()),
        config: Descriptor::of(WASM_CONFIG, &config),
        layers,
        annotations: Some(annotations),
    };
    let mut all = vec![config];
    all.extend(blobs);
    Ok(Built {
        blobs: all,
        manifest: serde_json::to_vec(&image)?,
        name: manifest.name.clone(),
        version: manifest.version.as_ref().map(ToString::to_string),
    })
}

/// Which layer of a skill artifact a descriptor is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerKind {
    Component,
    SkillMd,
    Files,
    Listing,
}

/// Check the manifest's shape and say which layer is which. Unknown layers are refused (a
/// layer skillhost does not read could not be checked against the listing).
pub fn layers(m: &ImageManifest) -> Result<Vec<(LayerKind, &Descriptor)>> {
    if m.config.media_type != WASM_CONFIG {
        bail!("not a Wasm artifact: its config is `{}`, not {WASM_CONFIG}", m.config.media_type);
    }
    if m.layers.len() > 8 {
        bail!("the artifact has {} layers; a skill has at most 4", m.layers.len());
    }
    let mut out = Vec::new();
    for (i, l) in m.layers.iter().enumerate() {
        let kind = match l.media_type.as_str() {
            WASM_LAYER if i == 0 => LayerKind::Component,
            SKILL_MD_LAYER => LayerKind::SkillMd,
            FILES_LAYER => LayerKind::Files,
            LISTING_LAYER => LayerKind::Listing,
            other => bail!("layer {i} has media type `{other}`, which a skill artifact does not contain; refusing it"),
        };
        if out.iter().any(|(k, _)| *k == kind) {
            bail!("the artifact has two {kind:?} layers; refusing it");
        }
        out.push((kind, l));
    }
    for needed in [LayerKind::SkillMd, LayerKind::Listing] {
        if !out.iter().any(|(k, _)| *k == needed) {
            bail!("the artifact has no {needed:?} layer: it is not a skill pushed by `skillhost skill push`");
        }
    }
    Ok(out)
}

/// Write the fetched layers into `dir` as a skill directory, checking every file against the
/// listing: each listed file present with its hash, nothing unlisted, every path a plain
/// relative one under scripts/, references/ or assets/ (the component and SKILL.md come in
/// their own layers), regular files only.
pub fn unpack(layers: &[(LayerKind, Vec<u8>)], dir: &Path) -> Result<()> {
    let get = |k: LayerKind| layers.iter().find(|(kind, _)| *kind == k).map(|(_, b)| b.as_slice());
    let listing: BTreeMap<String, String> = serde_json::from_slice(get(LayerKind::Listing).unwrap_or_default())
        .map_err(|e| anyhow!("the artifact's file listing is invalid: {e}"))?;
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    if let Some(w) = get(LayerKind::Component) {
        files.push(("skill.wasm".into(), w.to_vec()));
    }
    files.push(("SKILL.md".into(), get(LayerKind::SkillMd).unwrap_or_default().to_vec()));
    if let Some(t) = get(LayerKind::Files) {
        let mut archive = tar::Archive::new(t);
        for entry in archive.entries().context("the files layer is not a tar archive")? {
            let mut entry = entry.context("the files layer is truncated or corrupt")?;
            let path = entry.path()?.into_owned();
            let rel = path.to_string_lossy().into_owned();
            if entry.header().entry_type().is_dir() {
                continue;
            }
            if !entry.header().entry_type().is_file() {
                bail!("files layer entry `{rel}` is not a regular file (a link?); refusing the artifact");
            }
            let top = path.components().next();
            let inside = path.components().all(|c| matches!(c, Component::Normal(_)))
                && matches!(top, Some(Component::Normal(t)) if ["scripts", "references", "assets"].contains(&t.to_string_lossy().as_ref()));
            if !inside {
                bail!("files layer entry `{rel}` is outside scripts/, references/ and assets/; refusing the artifact");
            }
            if files.iter().any(|(r, _)| *r == rel) {
                bail!("files layer entry `{rel}` appears twice; refusing the artifact");
            }
            let mut bytes = Vec::new();
            entry.read_to_end(&mut bytes)?;
            files.push((rel, bytes));
        }
    }
    for (rel, bytes) in &files {
        let expected =
            listing.get(rel).ok_or_else(|| anyhow!("`{rel}` is not in the artifact's file listing; refusing it"))?;
        let actual = sha256_hex(bytes);
        if *expected != actual {
            bail!("`{rel}` does not match the artifact's listing (expected {expected}, found {actual}); refusing it");
        }
    }
    if let Some(missing) = listing.keys().find(|k| !files.iter().any(|(r, _)| r == *k)) {
        bail!("the artifact lists `{missing}` but does not contain it");
    }
    for (rel, bytes) in &files {
        let target = dir.join(rel);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&target, bytes).with_context(|| format!("cannot write {}", target.display()))?;
    }
    Ok(())
}

/// The digest the manifest bytes have (for display of a pushed artifact).
pub fn manifest_digest(built: &Built) -> String {
    digest_of(&built.manifest)
}
