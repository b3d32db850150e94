//! What is installed: names, per-skill info (declared, granted and effective rights) and
//! relevance search over the catalog.

use anyhow::{Context as _, Result, anyhow, bail};
use serde::Serialize;
use serde_json::Value;

use super::Library;
use super::record::InstallRecord;
use crate::capabilities::Limits;
use crate::manifest::Manifest;

/// What [`Library::search_skills`] found, and how.
#[derive(Debug, Clone)]
pub struct SkillSearch {
    pub hits: Vec<(crate::search::SearchHit, SkillInfo)>,
    /// The embedding model that took part, `None` when the search was lexical only.
    pub semantic: Option<String>,
}

/// The cached skill vectors: the model that made them, and each by the sha256 of its text.
#[derive(Debug, Default, Serialize, serde::Deserialize)]
struct SkillVectors {
    model: String,
    vectors: std::collections::BTreeMap<String, Vec<f32>>,
}

const SKILL_VECTORS: &str = "cache/skill-vectors.json";

/// What a skill's vector is made of.
fn skill_text(doc: &crate::search::SearchDoc) -> String {
    format!("{}. {} {}", doc.name.replace('-', " "), doc.description.trim(), doc.when_to_use.trim())
}

/// The cosine of `query` to every skill, with whether its text is mostly CJK; missing
/// vectors are embedded (one batch) and the cache rewritten. A cache that cannot be read
/// or written costs time, never an answer.
fn skill_cosines(
    home: &std::path::Path,
    model: &crate::memory::embed::EmbedModel,
    docs: &[crate::search::SearchDoc],
    query: &str,
) -> Vec<(String, bool, f32)> {
    use crate::memory::embed::{TextRole, cosine};
    let path = home.join(SKILL_VECTORS);
    let mut cache: SkillVectors = std::fs::read(&path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .filter(|c: &SkillVectors| c.model == model.identity())
        .unwrap_or_default();
    let texts: Vec<String> = docs.iter().map(skill_text).collect();
    let keys: Vec<String> = texts.iter().map(crate::text::sha256_hex).collect();
    let missing: Vec<usize> =
        (0..docs.len()).filter(|&i| cache.vectors.get(&keys[i]).is_none_or(|v| v.len() != model.dim())).collect();
    let stale = cache.vectors.keys().any(|k| !keys.contains(k));
    if !missing.is_empty() || stale || cache.model.is_empty() {
        let batch: Vec<&str> = missing.iter().map(|&i| texts[i].as_str()).collect();
        for (&i, vector) in missing.iter().zip(model.embed_batch(TextRole::Passage, &batch)) {
            cache.vectors.insert(keys[i].clone(), vector);
        }
        cache.vectors.retain(|k, _| keys.contains(k));
        cache.model = model.identity().to_string();
        tracing::debug!(embedded = missing.len(), skills = docs.len(), "skill vectors updated");
        if let Err(e) =
            serde_json::to_vec(&cache).map_err(anyhow::Error::from).and_then(|b| super::write_atomic(&path, &b))
        {
            tracing::warn!("cannot cache the skill vectors ({e:#}); the next search embeds them again");
        }
    }
    let q = model.embed(TextRole::Query, query);
    docs.iter()
        .zip(&keys)
        .zip(&texts)
        .filter_map(|((doc, key), text)| {
            let v = cache.vectors.get(key)?;
            Some((doc.name.clone(), crate::search::mostly_cjk(text), cosine(&q, v)))
        })
        .collect()
}

/// One installed skill, for list/info.
#[derive(Debug, Clone, Serialize)]
pub struct SkillInfo {
    pub record: InstallRecord,
    pub manifest: Manifest,
    pub declared: Vec<String>,
    pub granted: Vec<String>,
    pub effective: Vec<String>,
    pub limits: Limits,
    pub params_schema: Value,
}

impl Library {
    /// Names of installed skills, sorted.
    pub fn names(&self) -> Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(self.root.join("skills"))? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.starts_with('.') && entry.path().join("install.json").exists() {
                names.push(name);
            }
        }
        names.sort();
        Ok(names)
    }

    /// Every installed skill, each loaded on its own: one broken skill is reported next to
    /// the others instead of hiding them.
    pub fn scan(&self) -> Result<Vec<(String, Result<SkillInfo>)>> {
        Ok(self
            .names()?
            .into_iter()
            .map(|n| {
                let info = self.info(&n);
                (n, info)
            })
            .collect())
    }

    /// Installed skills ranked by relevance to a task description (see [`crate::search`]).
    /// Skills that fail to load are skipped, not fatal.
    pub fn search(&self, query: &str, top: usize) -> Result<Vec<(crate::search::SearchHit, SkillInfo)>> {
        Ok(self.search_skills(query, top)?.hits)
    }

    /// [`Library::search`], and how it searched: with the embedding model (the memory's, see
    /// [`crate::memory::embed::model_path`]) BM25 is fused with the meaning of each skill's
    /// name, description and when_to_use, so a query in another language finds it; without
    /// one, lexically. Skill vectors are cached under `cache/skill-vectors.json`, keyed by
    /// the sha256 of the embedded text and stamped with the model, so a search embeds only
    /// the query and the skills that changed.
    pub fn search_skills(&self, query: &str, top: usize) -> Result<SkillSearch> {
        let infos: Vec<SkillInfo> = self.scan()?.into_iter().filter_map(|(_, i)| i.ok()).collect();
        let docs: Vec<crate::search::SearchDoc> = infos
            .iter()
            .map(|i| crate::search::SearchDoc {
                name: i.manifest.name.clone(),
                description: i.manifest.description.clone(),
                when_to_use: i.manifest.when_to_use.clone().unwrap_or_default(),
            })
            .collect();
        let index = crate::search::SkillIndex::build(&docs)?;
        let model = crate::memory::embed::model_path(&self.root).and_then(|path| {
            crate::memory::embed::EmbedModel::shared(&path)
                .map_err(|e| tracing::warn!("{e:#}; skill search is lexical only"))
                .ok()
        });
        let (hits, semantic) = match model {
            // A query of only question words asks about nothing, with or without the model.
            Some(model) if !crate::search::analyze(query).is_empty() && top > 0 => {
                let lexical = index.search(query, docs.len().max(1))?;
                let cosines = skill_cosines(&self.root, &model, &docs, query);
                (crate::search::fuse(query, &lexical, &cosines, top), Some(model.identity().to_string()))
            }
            Some(model) => (Vec::new(), Some(model.identity().to_string())),
            None => (index.search(query, top)?, None),
        };
        let hits = hits
            .into_iter()
            .filter_map(|h| infos.iter().find(|i| i.manifest.name == h.name).map(|i| (h, i.clone())))
            .collect();
        Ok(SkillSearch { hits, semantic })
    }

    pub fn info(&self, name: &str) -> Result<SkillInfo> {
        let record = self.read_record(name)?;
        let dir = self.skill_dir(name);
        let text = std::fs::read_to_string(dir.join("SKILL.md"))?;
        self.info_of(name, record, &text)
    }

    /// [`Library::info`] from a SKILL.md whose bytes are the installed ones (the sha256
    /// install.json recorded), with its text: what a server shows clients. A SKILL.md
    /// edited in the home after its install is an error naming the change, so what is
    /// listed is what calls run (they verify every file again).
    pub fn verified_info(&self, name: &str) -> Result<(SkillInfo, String)> {
        let record = self.read_record(name)?;
        let path = self.skill_dir(name).join("SKILL.md");
        // Read once, hashed and parsed from the same bytes.
        let bytes = std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
        let recorded = record.files.get("SKILL.md").unwrap_or(&record.manifest_sha256);
        let actual = crate::text::sha256_hex(&bytes);
        if actual != *recorded {
            bail!(
                "{} was changed after it was installed (sha256 {}, install.json says {}); it is not served until `{name}` is reinstalled (skillhost skill install)",
                path.display(),
                super::record::short_hash(&actual),
                super::record::short_hash(recorded)
            );
        }
        let text = String::from_utf8(bytes).map_err(|_| anyhow!("{} is not UTF-8", path.display()))?;
        Ok((self.info_of(name, record, &text)?, text))
    }

    fn info_of(&self, name: &str, record: InstallRecord, text: &str) -> Result<SkillInfo> {
        let dir = self.skill_dir(name);
        let manifest = Manifest::parse(&dir.join("SKILL.md"), text).map_err(|e| anyhow!("{e}"))?;
        let policy = self.policy()?;
        let granted = policy.granted(name);
        let effective = manifest.capabilities.intersect(&granted);
        Ok(SkillInfo {
            declared: manifest.capabilities.describe(),
            granted: granted.describe(),
            effective: effective.describe(),
            limits: Limits::resolve(&manifest.limits, &policy.limit_caps(name)),
            params_schema: manifest.params_schema(),
            record,
            manifest,
        })
    }
}
