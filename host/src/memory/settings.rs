//! Which embedding model and which fusion a home uses: `[memory]` in skillhost.toml and
//! `$SKILLHOST_EMBED_MODEL`, read and checked.

use std::path::{Path, PathBuf};

use super::embed;
use super::hybrid::FusionParams;

/// Where the embedding model setting of a home came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSource {
    /// `$SKILLHOST_EMBED_MODEL`: it wins over the file.
    Environment,
    /// `embed_model` in the `[memory]` table of this skillhost.toml.
    ConfigFile(PathBuf),
    /// Neither is set: the model installed under the home, if there is one.
    Installed,
}

impl std::fmt::Display for ModelSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ModelSource::Environment => write!(f, "{}", embed::MODEL_ENV),
            ModelSource::ConfigFile(p) => write!(f, "[memory] embed_model in {}", p.display()),
            ModelSource::Installed => write!(f, "installed model"),
        }
    }
}

/// The embedding model a home uses and where that was decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelSetting {
    /// `None`: lexical search only (turned `off`, or nothing installed).
    pub path: Option<PathBuf>,
    pub source: ModelSource,
}

/// The `[memory]` table of skillhost.toml.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct MemoryTable {
    /// A model file (relative to the home) or "off". Read as any value so that a wrong type
    /// gets an error naming the key.
    embed_model: Option<toml::Value>,
    /// How search fuses its lexical and semantic parts: "default", "calibrated" or
    /// "store-crowd".
    fusion: Option<toml::Value>,
}

/// The fusions a home may choose with `[memory] fusion` (see [`FusionParams`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FusionChoice {
    /// [`FusionParams::meaning_first`]: what is kept as `Calibrated` keeps it, ranked by
    /// meaning first (README, Memory).
    Default,
    /// [`FusionParams::calibrated`]: a record of the other script is judged against the
    /// query's cosines to reference passages, so a small store answers across languages;
    /// ranked by that z plus the words' share.
    Calibrated,
    /// [`FusionParams::store_crowd`]: the default until issue 31's second round: the
    /// store's own crowd and a constant prior; leaves more queries about nothing unanswered
    /// in larger stores, and answers fewer across languages (README, Memory).
    StoreCrowd,
}

impl FusionChoice {
    pub fn params(self) -> FusionParams {
        match self {
            FusionChoice::Default => FusionParams::default(),
            FusionChoice::Calibrated => FusionParams::calibrated(),
            FusionChoice::StoreCrowd => FusionParams::store_crowd(),
        }
    }
}

/// `[memory] fusion` in `<home>/skillhost.toml`, if set. A value other than "default",
/// "calibrated" or "store-crowd" is an error naming the file and the key.
pub fn fusion_setting(home: &Path) -> Result<Option<FusionChoice>, crate::config::ConfigError> {
    use crate::config::{ConfigError, ConfigFile};
    let file = ConfigFile::load(home)?;
    let Some(value) = file.table::<MemoryTable>("memory")?.and_then(|t| t.fusion) else { return Ok(None) };
    match value.as_str() {
        Some("default") => Ok(Some(FusionChoice::Default)),
        Some("calibrated") => Ok(Some(FusionChoice::Calibrated)),
        Some("store-crowd") => Ok(Some(FusionChoice::StoreCrowd)),
        _ => Err(ConfigError(format!(
            "`fusion` in the [memory] table of {} is `{value}`; set it to \"default\", \"calibrated\" or \"store-crowd\" (how memory search weighs meaning across languages; see the README's Memory section)",
            file.path().display()
        ))),
    }
}

/// Which embedding model `home` uses: `$SKILLHOST_EMBED_MODEL` (a path, or `off`), else
/// `[memory] embed_model` in `<home>/skillhost.toml` (a path, relative to the home, or
/// `"off"`), else the model installed under the home. A bad value in the file is an error
/// naming the file and the key.
pub fn model_setting(home: &Path) -> Result<ModelSetting, crate::config::ConfigError> {
    use crate::config::{ConfigError, ConfigFile};
    match std::env::var_os(embed::MODEL_ENV) {
        Some(v) if v == "off" || v.is_empty() => {
            return Ok(ModelSetting { path: None, source: ModelSource::Environment });
        }
        Some(v) => return Ok(ModelSetting { path: Some(PathBuf::from(v)), source: ModelSource::Environment }),
        None => {}
    }
    let file = ConfigFile::load(home)?;
    let file_path = file.path().to_path_buf();
    let bad = |what: &str| {
        ConfigError(format!(
            "`embed_model` in the [memory] table of {} {what}; set it to the path of the model file (`skillhost memory model install` puts one under the home) or to \"off\" for lexical search only",
            file_path.display()
        ))
    };
    let setting = file.table::<MemoryTable>("memory")?.and_then(|t| t.embed_model);
    let Some(value) = setting else {
        let installed = Some(home.join(embed::MODEL_FILE)).filter(|p| p.exists());
        return Ok(ModelSetting { path: installed, source: ModelSource::Installed });
    };
    let source = ModelSource::ConfigFile(file_path.clone());
    let text = match value {
        toml::Value::String(s) => s,
        other => return Err(bad(&format!("is {} `{other}`, not a string", other.type_str()))),
    };
    if text == "off" {
        return Ok(ModelSetting { path: None, source });
    }
    if text.trim().is_empty() {
        return Err(bad("is empty"));
    }
    let path = home.join(&text);
    if !path.is_file() {
        return Err(bad(&format!("names {}, which is not a file", path.display())));
    }
    Ok(ModelSetting { path: Some(path), source })
}
