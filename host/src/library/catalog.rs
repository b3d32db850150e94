//! What is installed: names, per-skill info (declared, granted and effective rights) and
//! relevance search over the catalog.

use anyhow::{Result, anyhow};
use serde::Serialize;
use serde_json::Value;

use super::Library;
use super::record::InstallRecord;
use crate::capabilities::Limits;
use crate::manifest::Manifest;

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
        let infos: Vec<SkillInfo> = self.scan()?.into_iter().filter_map(|(_, i)| i.ok()).collect();
        let docs: Vec<crate::search::SearchDoc> = infos
            .iter()
            .map(|i| crate::search::SearchDoc {
                name: i.manifest.name.clone(),
                description: i.manifest.description.clone(),
                when_to_use: i.manifest.when_to_use.clone().unwrap_or_default(),
            })
            .collect();
        let hits = crate::search::SkillIndex::build(&docs)?.search(query, top)?;
        Ok(hits
            .into_iter()
            .filter_map(|h| infos.iter().find(|i| i.manifest.name == h.name).map(|i| (h, i.clone())))
            .collect())
    }

    pub fn info(&self, name: &str) -> Result<SkillInfo> {
        let record = self.read_record(name)?;
        let dir = self.skill_dir(name);
        let text = std::fs::read_to_string(dir.join("SKILL.md"))?;
        let manifest = Manifest::parse(&dir.join("SKILL.md"), &text).map_err(|e| anyhow!("{e}"))?;
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
