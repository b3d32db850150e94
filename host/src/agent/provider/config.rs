//! Which provider to use: the `[provider]` table of `<home>/skillhost.toml` (the file is parsed
//! by [`crate::config`]; this module owns only its table), overridden by the environment.
//!
//! ```toml
//! [provider]
//! kind = "openai"                        # "openai" | "anthropic" | "scripted"
//! base_url = "http://127.0.0.1:11434/v1" # default https://api.openai.com/v1 / https://api.anthropic.com
//! model = "qwen3:8b"
//! embedding_model = "nomic-embed-text"   # OpenAI-compatible only; default text-embedding-3-small
//! api_key_env = "OPENAI_API_KEY"         # the variable holding the key; keys never live in files
//! timeout_secs = 60                      # per request attempt
//! max_retries = 3                        # on 429, 5xx and dropped connections
//! decisions = "decisions.json"           # scripted only; relative to the home
//! tool_calling = false                   # for servers without native tool calling (default true)
//! stream = true                          # show replies as they arrive (default: on a terminal)
//! ```
//!
//! Environment wins over the file: `SKILLHOST_PROVIDER` (kind), `SKILLHOST_MODEL`,
//! `SKILLHOST_DECISIONS` (relative to the current directory), `OPENAI_BASE_URL` / `ANTHROPIC_BASE_URL` (for that kind), and the key
//! from the variable `api_key_env` names (default `OPENAI_API_KEY` / `ANTHROPIC_API_KEY`). With no
//! kind in the file or `SKILLHOST_PROVIDER`, a set `OPENAI_API_KEY` or `OPENAI_BASE_URL` selects
//! OpenAI-compatible, else a set `ANTHROPIC_API_KEY` or `ANTHROPIC_BASE_URL` selects Anthropic;
//! with none of these nothing is configured and the caller falls back to its shipped scripted
//! decisions. The proxy comes from `HTTPS_PROXY` / `HTTP_PROXY` / `ALL_PROXY` / `NO_PROXY`
//! ([`crate::http::ProxySettings`]). Empty variables count as unset. The environment is a parameter so tests never
//! touch the process environment.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::ProviderError;
use crate::http::ProxySettings;

pub use crate::config::CONFIG_FILE;

pub const DEFAULT_OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
pub const DEFAULT_ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com";
pub const DEFAULT_OPENAI_MODEL: &str = "gpt-4o-mini";
pub const DEFAULT_ANTHROPIC_MODEL: &str = "claude-sonnet-4-5";
pub const DEFAULT_EMBEDDING_MODEL: &str = "text-embedding-3-small";
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
pub const DEFAULT_MAX_RETRIES: u32 = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum ProviderKind {
    #[serde(rename = "openai")]
    OpenAi,
    #[serde(rename = "anthropic")]
    Anthropic,
    #[serde(rename = "scripted")]
    Scripted,
}

impl ProviderKind {
    fn parse(text: &str) -> Option<ProviderKind> {
        match text {
            "openai" => Some(ProviderKind::OpenAi),
            "anthropic" => Some(ProviderKind::Anthropic),
            "scripted" => Some(ProviderKind::Scripted),
            _ => None,
        }
    }
}

/// A resolved provider configuration. `Debug` never prints the key.
#[derive(Clone, PartialEq)]
pub struct ProviderConfig {
    pub kind: ProviderKind,
    /// Without a trailing slash. Unused by `scripted`.
    pub base_url: String,
    pub model: String,
    pub embedding_model: String,
    pub api_key: Option<String>,
    /// Where the key came from (or should come from), named in auth errors.
    pub api_key_env: String,
    /// Per request attempt, connect to last byte.
    pub timeout: Duration,
    pub max_retries: u32,
    /// First backoff delay; doubled per retry, with jitter. Not in the file: tests shorten it.
    pub backoff_base: Duration,
    /// Cap on any single wait, including a server's `Retry-After`.
    pub max_backoff: Duration,
    /// The decisions file of `scripted`.
    pub decisions: Option<PathBuf>,
    /// The HTTP proxy to reach the service through (`HTTPS_PROXY`, `HTTP_PROXY`, `NO_PROXY`).
    pub proxy: ProxySettings,
    /// Native tool calling for the agent's decisions (SPEC section 6: used where the provider
    /// has it). Default true for OpenAI-compatible and Anthropic; `tool_calling = false` in
    /// the `[provider]` table for servers that lack it (JSON mode then). Never for `scripted`.
    pub tool_calling: bool,
    /// Stream replies and show them as they arrive: `Some(true)` always (but never under
    /// `--json`), `Some(false)` never, `None` when stderr is a terminal (the CLI decides).
    pub stream: Option<bool>,
}

impl std::fmt::Debug for ProviderConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderConfig")
            .field("kind", &self.kind)
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("embedding_model", &self.embedding_model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("api_key_env", &self.api_key_env)
            .field("timeout", &self.timeout)
            .field("max_retries", &self.max_retries)
            .field("backoff_base", &self.backoff_base)
            .field("max_backoff", &self.max_backoff)
            .field("decisions", &self.decisions)
            .field("proxy", &self.proxy)
            .field("tool_calling", &self.tool_calling)
            .field("stream", &self.stream)
            .finish()
    }
}

impl ProviderConfig {
    fn with_defaults(kind: ProviderKind, base_url: &str, model: &str, api_key_env: &str) -> ProviderConfig {
        ProviderConfig {
            kind,
            base_url: base_url.trim_end_matches('/').to_string(),
            model: model.to_string(),
            embedding_model: DEFAULT_EMBEDDING_MODEL.to_string(),
            api_key: None,
            api_key_env: api_key_env.to_string(),
            timeout: DEFAULT_TIMEOUT,
            max_retries: DEFAULT_MAX_RETRIES,
            backoff_base: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
            decisions: None,
            proxy: ProxySettings::from_process_env(),
            tool_calling: kind != ProviderKind::Scripted,
            stream: None,
        }
    }

    /// An OpenAI-compatible server at `base_url` (e.g. `http://127.0.0.1:11434/v1`), no key.
    pub fn openai(base_url: &str, model: &str) -> ProviderConfig {
        ProviderConfig::with_defaults(ProviderKind::OpenAi, base_url, model, "OPENAI_API_KEY")
    }

    /// Anthropic Messages at `base_url` (e.g. `https://api.anthropic.com`).
    pub fn anthropic(base_url: &str, model: &str, api_key: &str) -> ProviderConfig {
        ProviderConfig {
            api_key: Some(api_key.to_string()),
            ..ProviderConfig::with_defaults(ProviderKind::Anthropic, base_url, model, "ANTHROPIC_API_KEY")
        }
    }

    /// Replays `decisions`.
    pub fn scripted(decisions: &Path) -> ProviderConfig {
        ProviderConfig {
            decisions: Some(decisions.to_path_buf()),
            ..ProviderConfig::with_defaults(ProviderKind::Scripted, "", "scripted", "")
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProviderTable {
    kind: Option<ProviderKind>,
    base_url: Option<String>,
    model: Option<String>,
    embedding_model: Option<String>,
    api_key_env: Option<String>,
    timeout_secs: Option<u64>,
    max_retries: Option<u32>,
    decisions: Option<PathBuf>,
    tool_calling: Option<bool>,
    stream: Option<bool>,
}

/// [`resolve`] with the process environment.
pub fn resolve_from_process_env(home: &Path) -> Result<Option<ProviderConfig>, ProviderError> {
    resolve(home, &|name| std::env::var(name).ok())
}

/// The provider configured by `<home>/skillhost.toml` and `env` (see the module docs), or `None`
/// when nothing is configured.
pub fn resolve(home: &Path, env: &dyn Fn(&str) -> Option<String>) -> Result<Option<ProviderConfig>, ProviderError> {
    let env = |name: &str| env(name).filter(|value| !value.trim().is_empty());
    let file = crate::config::ConfigFile::load(home).map_err(|e| ProviderError::Config(e.0))?;
    let path = file.path().to_path_buf();
    let table = file.table::<ProviderTable>("provider").map_err(|e| ProviderError::Config(e.0))?;
    let table_present = table.is_some();
    let table = table.unwrap_or_default();

    let kind = match env("SKILLHOST_PROVIDER") {
        Some(text) => Some(ProviderKind::parse(text.trim()).ok_or_else(|| {
            ProviderError::Config(format!(
                "SKILLHOST_PROVIDER is `{text}`, which is not a provider kind; use openai, anthropic or scripted"
            ))
        })?),
        None => table.kind,
    };
    let kind = match kind {
        Some(kind) => kind,
        None if env("OPENAI_API_KEY").is_some() || env("OPENAI_BASE_URL").is_some() => ProviderKind::OpenAi,
        None if env("ANTHROPIC_API_KEY").is_some() || env("ANTHROPIC_BASE_URL").is_some() => ProviderKind::Anthropic,
        None if table_present => {
            return Err(ProviderError::Config(format!(
                "the [provider] table in {} has no `kind`; set kind = \"openai\", \"anthropic\" or \"scripted\"",
                path.display()
            )));
        }
        None => return Ok(None),
    };

    let mut config = match kind {
        ProviderKind::OpenAi => {
            ProviderConfig::with_defaults(kind, DEFAULT_OPENAI_BASE_URL, DEFAULT_OPENAI_MODEL, "OPENAI_API_KEY")
        }
        ProviderKind::Anthropic => ProviderConfig::with_defaults(
            kind,
            DEFAULT_ANTHROPIC_BASE_URL,
            DEFAULT_ANTHROPIC_MODEL,
            "ANTHROPIC_API_KEY",
        ),
        ProviderKind::Scripted => ProviderConfig::with_defaults(kind, "", "scripted", ""),
    };

    let base_env = match kind {
        ProviderKind::OpenAi => Some("OPENAI_BASE_URL"),
        ProviderKind::Anthropic => Some("ANTHROPIC_BASE_URL"),
        ProviderKind::Scripted => None,
    };
    let base_from_env = base_env.and_then(|name| env(name).map(|url| (url, name.to_string())));
    let base_from_file = table.base_url.map(|url| (url, format!("`base_url` in {}", path.display())));
    if let Some((url, source)) = base_from_env.or(base_from_file) {
        check_base_url(&url, &source)?;
        config.base_url = url.trim().trim_end_matches('/').to_string();
    }

    if let Some(model) = env("SKILLHOST_MODEL").or(table.model) {
        config.model = model.trim().to_string();
    }
    if let Some(model) = table.embedding_model {
        config.embedding_model = model;
    }
    if let Some(name) = table.api_key_env {
        config.api_key_env = name;
    }
    if !config.api_key_env.is_empty() {
        config.api_key = env(&config.api_key_env).map(|key| key.trim().to_string());
    }
    if let Some(secs) = table.timeout_secs {
        if secs == 0 {
            return Err(ProviderError::Config(format!(
                "`timeout_secs` in {} is 0; use a number of seconds such as 60",
                path.display()
            )));
        }
        config.timeout = Duration::from_secs(secs);
    }
    if let Some(retries) = table.max_retries {
        config.max_retries = retries;
    }
    if let Some(tools) = table.tool_calling {
        config.tool_calling = tools && kind != ProviderKind::Scripted;
    }
    config.stream = table.stream;
    config.decisions = match env("SKILLHOST_DECISIONS") {
        Some(file) => Some(PathBuf::from(file)),
        None => table.decisions.map(|file| home.join(file)),
    };
    config.proxy = ProxySettings::from_env(&env);
    if kind == ProviderKind::Scripted && config.decisions.is_none() {
        return Err(ProviderError::Config(format!(
            "provider kind `scripted` needs a decisions file: set `decisions` in the [provider] table of {} or SKILLHOST_DECISIONS",
            path.display()
        )));
    }
    Ok(Some(config))
}

/// Where a setting's value came from (`skillhost config show`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "from", rename_all = "kebab-case")]
pub enum SettingSource {
    /// The built-in default.
    Default,
    /// The `[provider]` table of the file at `path`.
    File { path: PathBuf },
    /// The environment variable `name`.
    Env { name: String },
    /// Derived from other settings (`why` says which).
    Derived { why: String },
}

impl std::fmt::Display for SettingSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SettingSource::Default => f.write_str("default"),
            SettingSource::File { path } => write!(f, "{}", path.display()),
            SettingSource::Env { name } => write!(f, "environment {name}"),
            SettingSource::Derived { why } => f.write_str(why),
        }
    }
}

/// One resolved setting and where it came from. Keys are shown as set, never their values.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Setting {
    /// The key in the `[provider]` table.
    pub key: &'static str,
    pub value: serde_json::Value,
    pub source: SettingSource,
}

/// The configuration [`resolve`] yields, setting by setting, with where each value came from;
/// empty when no provider is configured.
pub fn explain(home: &Path, env: &dyn Fn(&str) -> Option<String>) -> Result<Vec<Setting>, ProviderError> {
    let Some(config) = resolve(home, env)? else { return Ok(Vec::new()) };
    let env = |name: &str| env(name).filter(|value| !value.trim().is_empty());
    let file = crate::config::ConfigFile::load(home).map_err(|e| ProviderError::Config(e.0))?;
    let path = file.path().to_path_buf();
    let table = file.table::<ProviderTable>("provider").map_err(|e| ProviderError::Config(e.0))?.unwrap_or_default();
    let from_file = SettingSource::File { path: path.clone() };
    let pick = |env_name: Option<&str>, in_file: bool| match env_name.filter(|name| env(name).is_some()) {
        Some(name) => SettingSource::Env { name: name.to_string() },
        None if in_file => from_file.clone(),
        None => SettingSource::Default,
    };
    let kind_name = match config.kind {
        ProviderKind::OpenAi => "openai",
        ProviderKind::Anthropic => "anthropic",
        ProviderKind::Scripted => "scripted",
    };
    let kind_source = match pick(Some("SKILLHOST_PROVIDER"), table.kind.is_some()) {
        SettingSource::Default => {
            let set: Vec<&str> = ["OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"]
                .into_iter()
                .filter(|name| env(name).is_some())
                .collect();
            SettingSource::Derived { why: format!("chosen because {} is set", set.first().copied().unwrap_or("a key")) }
        }
        other => other,
    };
    let base_env = match config.kind {
        ProviderKind::OpenAi => Some("OPENAI_BASE_URL"),
        ProviderKind::Anthropic => Some("ANTHROPIC_BASE_URL"),
        ProviderKind::Scripted => None,
    };
    let mut settings = vec![Setting { key: "kind", value: kind_name.into(), source: kind_source }];
    let mut add = |key: &'static str, value: serde_json::Value, source: SettingSource| {
        settings.push(Setting { key, value, source })
    };
    if config.kind == ProviderKind::Scripted {
        let source = pick(Some("SKILLHOST_DECISIONS"), table.decisions.is_some());
        add("decisions", serde_json::json!(config.decisions), source);
    } else {
        add("base_url", config.base_url.clone().into(), pick(base_env, table.base_url.is_some()));
        add("model", config.model.clone().into(), pick(Some("SKILLHOST_MODEL"), table.model.is_some()));
        if config.kind == ProviderKind::OpenAi {
            add("embedding_model", config.embedding_model.clone().into(), pick(None, table.embedding_model.is_some()));
        }
        add("api_key_env", config.api_key_env.clone().into(), pick(None, table.api_key_env.is_some()));
        let key = if config.api_key.is_some() { "(set)" } else { "(not set)" };
        let key_source = match config.api_key {
            Some(_) => SettingSource::Env { name: config.api_key_env.clone() },
            None => SettingSource::Default,
        };
        add("api_key", key.into(), key_source);
        add("timeout_secs", config.timeout.as_secs().into(), pick(None, table.timeout_secs.is_some()));
        add("max_retries", config.max_retries.into(), pick(None, table.max_retries.is_some()));
        add("tool_calling", config.tool_calling.into(), pick(None, table.tool_calling.is_some()));
        let proxy: Vec<&str> = ["HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY"]
            .into_iter()
            .filter(|name| env(name).is_some())
            .collect();
        if !proxy.is_empty() {
            // Proxy URLs may hold credentials: only which variables are set.
            add("proxy", "(set)".into(), SettingSource::Env { name: proxy.join(", ") });
        }
    }
    Ok(settings)
}

fn check_base_url(url: &str, source: &str) -> Result<(), ProviderError> {
    let url = url.trim();
    // The authority's port, as written: a parser that drops a bad port would send the
    // requests to the scheme's default port instead.
    let authority = url.split_once("://").map(|(_, rest)| rest.split(['/', '?', '#']).next().unwrap_or_default());
    let port = authority
        .map(|a| a.rsplit_once('@').map_or(a, |(_, host)| host))
        .and_then(|host| host.rsplit_once(':').filter(|(h, _)| !h.ends_with(']') || h.starts_with('[')))
        .map(|(_, port)| port)
        .filter(|port| !port.is_empty() && !port.contains(']'));
    if let Some(port) = port
        && port.parse::<u16>().is_err()
    {
        return Err(ProviderError::Config(format!(
            "the base URL `{url}` from {source} has port `{port}`, which is not a TCP port (1 to 65535); fix the port, e.g. http://127.0.0.1:11434/v1"
        )));
    }
    let parsed = reqwest::Url::parse(url);
    let ok =
        parsed.is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.host_str().is_some_and(|h| !h.is_empty()));
    if ok {
        Ok(())
    } else {
        Err(ProviderError::Config(format!(
            "the base URL `{url}` from {source} is not an http(s) URL; use e.g. http://127.0.0.1:11434/v1 or https://api.openai.com/v1"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_url_must_be_http() {
        assert!(check_base_url("http://127.0.0.1:11434/v1", "test").is_ok());
        assert!(check_base_url("https://api.openai.com/v1", "test").is_ok());
        let error = check_base_url("127.0.0.1:11434", "OPENAI_BASE_URL").unwrap_err().to_string();
        assert!(error.contains("OPENAI_BASE_URL") && error.contains("not an http(s) URL"), "{error}");
        assert!(check_base_url("ftp://host/x", "test").is_err());
        assert!(check_base_url("http://[::1]:8080/v1", "test").is_ok());
        assert!(check_base_url("http://[::1]/v1", "test").is_ok());
        for bad in
            ["http://127.0.0.1:70000/v1", "http://127.0.0.1:65536", "http://user@h:99999/v1", "http://[::1]:1000000/v1"]
        {
            let error = check_base_url(bad, "OPENAI_BASE_URL").unwrap_err().to_string();
            assert!(
                error.contains("not a TCP port (1 to 65535)") && error.contains("OPENAI_BASE_URL"),
                "{bad}: {error}"
            );
        }
    }

    #[test]
    fn debug_redacts_the_key() {
        let config = ProviderConfig::anthropic("https://api.anthropic.com", "m", "sk-secret-123");
        let shown = format!("{config:?}");
        assert!(!shown.contains("sk-secret-123") && shown.contains("<redacted>"), "{shown}");
    }
}
