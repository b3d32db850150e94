//! The MCP Skills extension (SEP-2640, `io.modelcontextprotocol/skills`), with rmcp's own
//! types: `skills/list` and `skills/get` describe every served skill (executable and
//! instruction) as a `skill://<name>/SKILL.md` entry with its front matter and its files,
//! each with a `sha256:` digest and size; `resources/read` serves the files' bytes.
//!
//! The digests are the ones install.json recorded, not hashes of whatever is on disk now:
//! the manifest says what was installed, and a file read that no longer matches it is
//! refused (it was changed after the install), so a client's own digest check and ours agree.
//! rmcp's filesystem catalog (feature `skills-fs`) is not used: the skills here are the
//! installed ones, already checked, and only those the profile allows.

use anyhow::{Context as _, Result};
use base64::Engine as _;
use rmcp::model::{MetaObject, ResourceContents, Skill, SkillFrontmatter, SkillResource, SkillResources};
use serde_json::{Map, Value};

use super::McpServer;
use crate::library::SkillInfo;

/// The scheme of skill file URIs.
const SCHEME: &str = "skill://";
/// `_meta` key saying whether the skill is also a tool (`executable`) or a prompt (`instruction`).
const KIND_META: &str = "dev.skillhost/kind";

/// The URI of a file of skill `name`.
fn file_uri(name: &str, path: &str) -> String {
    format!("{SCHEME}{name}/{path}")
}

/// Every served skill as an extension entry, by name. A skill whose entry breaks one of the
/// extension's rules (rmcp checks names, URIs and digests) is left out with a warning, so one
/// odd skill does not fail the whole list.
pub(super) fn list(server: &McpServer) -> Result<Vec<Skill>> {
    let mut out = Vec::new();
    for info in super::tools::skills(server)? {
        match entry(server, &info) {
            Ok(skill) => out.push(skill),
            Err(e) => eprintln!("warning: skill `{}` is not listed in skills/list: {e:#}", info.manifest.name),
        }
    }
    Ok(out)
}

/// The entry of the skill whose SKILL.md is at `uri`, if it is served.
pub(super) fn get(server: &McpServer, uri: &str) -> Result<Option<Skill>> {
    let Some(name) = uri.strip_prefix(SCHEME).and_then(|r| r.strip_suffix("/SKILL.md")) else { return Ok(None) };
    let Some(info) = super::tools::skills(server)?.into_iter().find(|i| i.manifest.name == name) else {
        return Ok(None);
    };
    entry(server, &info).map(Some)
}

fn entry(server: &McpServer, info: &SkillInfo) -> Result<Skill> {
    let name = &info.manifest.name;
    let dir = server.options.home.join("skills").join(name);
    // Read again for its front matter: these bytes are checked against install.json too.
    let bytes = std::fs::read(dir.join("SKILL.md")).context("cannot read SKILL.md")?;
    let recorded = info.record.files.get("SKILL.md").unwrap_or(&info.record.manifest_sha256);
    let actual: String = crate::text::sha256_hex(&bytes);
    anyhow::ensure!(actual == *recorded, "SKILL.md was changed after it was installed; reinstall `{name}`");
    let text = String::from_utf8(bytes).context("SKILL.md is not UTF-8")?;
    let mut frontmatter = SkillFrontmatter::new(name.clone(), super::tools::served(&info.manifest.description));
    // The other fields as served texts too: a `when_to_use` is read by the model as well.
    frontmatter.extra = front_matter_fields(&text)
        .into_iter()
        .map(|(k, v)| {
            let v = match v {
                Value::String(s) => Value::String(super::tools::served(&s)),
                other => crate::controls::neutralise_json(&other),
            };
            (crate::controls::neutralise(&k, false).into_owned(), v)
        })
        .collect();
    let mut files = Vec::new();
    for (path, sha256) in recorded_files(info) {
        let size = std::fs::metadata(dir.join(&path)).with_context(|| format!("cannot stat {path}"))?.len();
        files.push(SkillResource::new(file_uri(name, &path), format!("sha256:{sha256}"), size));
    }
    let kind = if info.record.is_instruction() { "instruction" } else { "executable" };
    let mut meta = MetaObject::new();
    meta.insert(KIND_META.into(), kind.into());
    let skill = Skill::new(file_uri(name, "SKILL.md"), frontmatter, SkillResources::Files(files)).with_meta(meta);
    skill.validate().map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(skill)
}

/// The files install.json names with their sha256 (records from before it listed files
/// name SKILL.md and the component by their own hashes).
fn recorded_files(info: &SkillInfo) -> Vec<(String, String)> {
    let record = &info.record;
    if !record.files.is_empty() {
        return record.files.iter().map(|(p, h)| (p.clone(), h.clone())).collect();
    }
    let mut files = vec![("SKILL.md".to_string(), record.manifest_sha256.clone())];
    if let Some(wasm) = &record.wasm_sha256 {
        files.push(("skill.wasm".to_string(), wasm.clone()));
    }
    files
}

/// Every front matter field except `name` and `description`, as JSON (empty if the YAML
/// does not parse: the library already parsed it once to install the skill).
fn front_matter_fields(text: &str) -> Map<String, Value> {
    let Ok((yaml, _)) = crate::manifest::split_front_matter(text) else { return Map::new() };
    let Ok(Value::Object(mut fields)) = serde_yaml_ng::from_str::<Value>(&yaml) else { return Map::new() };
    fields.remove("name");
    fields.remove("description");
    fields
}

/// The bytes of a skill file at `uri` (`skill://<name>/<path>`), if `path` is one of the
/// files install.json recorded for a served skill. Text files come as text, the rest (the
/// component) base64. A file changed since its install is refused.
pub(super) fn read(server: &McpServer, uri: &str) -> Result<Option<ResourceContents>> {
    let Some((name, path)) = uri.strip_prefix(SCHEME).and_then(|r| r.split_once('/')) else { return Ok(None) };
    let Some(info) = super::tools::skills(server)?.into_iter().find(|i| i.manifest.name == name) else {
        return Ok(None);
    };
    // Only recorded paths: a `..`, an absolute path or install.json never match one.
    let Some((path, sha256)) = recorded_files(&info).into_iter().find(|(p, _)| p == path) else { return Ok(None) };
    let file = server.options.home.join("skills").join(name).join(&path);
    let bytes = std::fs::read(&file).with_context(|| format!("cannot read {}", file.display()))?;
    let actual: String = crate::text::sha256_hex(&bytes);
    if actual != sha256 {
        anyhow::bail!(
            "{uri} was changed after it was installed (sha256 {actual}, install.json says {sha256}); reinstall `{name}` (skillhost skill install)"
        );
    }
    let contents = match String::from_utf8(bytes) {
        Ok(text) if !text.contains('\0') => {
            let mime = if path.ends_with(".md") { "text/markdown" } else { "text/plain" };
            ResourceContents::text(text, uri).with_mime_type(mime)
        }
        Ok(text) => blob(text.into_bytes(), uri, &path),
        Err(e) => blob(e.into_bytes(), uri, &path),
    };
    Ok(Some(contents))
}

fn blob(bytes: Vec<u8>, uri: &str, path: &str) -> ResourceContents {
    let mime = if path.ends_with(".wasm") { "application/wasm" } else { "application/octet-stream" };
    ResourceContents::blob(base64::engine::general_purpose::STANDARD.encode(bytes), uri).with_mime_type(mime)
}
