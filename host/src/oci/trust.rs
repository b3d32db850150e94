//! The trust file, `<home>/trust.toml`: which public keys may sign skills for which registry
//! and repository prefix. A signature only counts when its key is trusted for the repository
//! being installed: a valid signature by Alice's key over Bob's repository is refused unless
//! a rule says Alice signs for Bob. Rules hold the key itself (PEM), so the file is the whole
//! decision and nothing it trusts can change behind it.
//!
//! Signed `.skill` bundles have no registry: their rules are `bundle:NAME` (that skill) or
//! `bundle:*` (every bundle), see [`super::bundle`].

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, anyhow, bail};
use serde::{Deserialize, Serialize};

use super::keys::PublicKey;

/// One rule: `key` signs for every repository under `prefix` (`HOST[:PORT]/PATH`, matched at
/// path boundaries: `reg/alice` covers `reg/alice/tool`, not `reg/alicevil/tool`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct TrustRule {
    pub prefix: String,
    pub fingerprint: String,
    /// The public key, PEM (SubjectPublicKeyInfo).
    pub key: String,
}

impl TrustRule {
    /// Does this rule cover `repository` (`HOST[:PORT]/PATH`)?
    pub fn covers(&self, repository: &str) -> bool {
        if self.prefix == BUNDLE_ANY {
            return repository.starts_with("bundle:");
        }
        if self.prefix.starts_with("bundle:") {
            return repository == self.prefix;
        }
        repository == self.prefix || repository.strip_prefix(self.prefix.as_str()).is_some_and(|r| r.starts_with('/'))
    }

    pub fn public_key(&self) -> Result<PublicKey> {
        PublicKey::from_pem(&self.key).with_context(|| format!("the trust rule for `{}`", self.prefix))
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TrustFile {
    #[serde(default, rename = "rule")]
    pub rules: Vec<TrustRule>,
}

pub fn trust_path(home: &Path) -> PathBuf {
    home.join("trust.toml")
}

/// The rule that trusts a key for every bundle.
const BUNDLE_ANY: &str = "bundle:*";

/// `oci://HOST/PATH/`, `HOST/PATH` -> `HOST/PATH` (no scheme, no trailing slash);
/// `bundle:NAME` and `bundle:*` as they are.
pub fn normalize_prefix(prefix: &str) -> Result<String> {
    if let Some(name) = prefix.strip_prefix("bundle:") {
        if name != "*" {
            crate::manifest::validate_name(name).map_err(|e| {
                anyhow!("trust prefix `{prefix}`: `{name}` is not a skill name ({e}); or use `bundle:*`")
            })?;
        }
        return Ok(prefix.to_string());
    }
    let p = prefix.strip_prefix("oci://").unwrap_or(prefix).trim_end_matches('/');
    // A port is digits: `bundle:x/...` can never be mistaken for a registry.
    let host = p.split('/').next().unwrap_or_default();
    if let Some((_, port)) = host.rsplit_once(':').filter(|_| !host.ends_with(']'))
        && (port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()))
    {
        bail!("trust prefix `{prefix}`: `{host}` is not HOST[:PORT] (a port is digits)");
    }
    if p.is_empty() || p.contains("://") || p.contains(char::is_whitespace) || p.contains('@') {
        bail!("trust prefix `{prefix}`: expected `oci://HOST[:PORT]/REPOSITORY-PREFIX` (or just a host)");
    }
    if p.split('/').any(|s| s.is_empty() || s == "." || s == "..") {
        bail!("trust prefix `{prefix}` has an empty, `.` or `..` path segment");
    }
    Ok(p.to_string())
}

impl TrustFile {
    pub fn load(home: &Path) -> Result<TrustFile> {
        let path = trust_path(home);
        match std::fs::read_to_string(&path) {
            Ok(text) => toml::from_str(&text)
                .map_err(|e| anyhow!("{} is not a valid trust file ({e}); fix or remove it", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(TrustFile::default()),
            Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
        }
    }

    pub fn save(&self, home: &Path) -> Result<()> {
        crate::fsutil::write_atomic(&trust_path(home), toml::to_string_pretty(self)?.as_bytes())
    }

    /// Trust `key` for `prefix`; returns the rule (an identical rule is not added twice).
    pub fn add(&mut self, prefix: &str, key: &PublicKey) -> Result<TrustRule> {
        let rule = TrustRule { prefix: normalize_prefix(prefix)?, fingerprint: key.fingerprint(), key: key.to_pem() };
        if !self.rules.iter().any(|r| r.prefix == rule.prefix && r.fingerprint == rule.fingerprint) {
            self.rules.push(rule.clone());
        }
        Ok(rule)
    }

    /// Remove the rules for `prefix` (only those of the key with `fingerprint`, when given;
    /// a fingerprint prefix of 8+ characters is enough). Returns how many went.
    pub fn remove(&mut self, prefix: &str, fingerprint: Option<&str>) -> Result<usize> {
        let prefix = normalize_prefix(prefix)?;
        let before = self.rules.len();
        self.rules.retain(|r| {
            let key_matches = fingerprint.is_none_or(|f| {
                let f = f.strip_prefix("sha256:").unwrap_or(f);
                f.len() >= 8 && r.fingerprint.trim_start_matches("sha256:").starts_with(f)
            });
            !(r.prefix == prefix && key_matches)
        });
        Ok(before - self.rules.len())
    }

    /// The rules that cover `repository`, most specific first.
    pub fn for_repository(&self, repository: &str) -> Vec<&TrustRule> {
        let mut rules: Vec<&TrustRule> = self.rules.iter().filter(|r| r.covers(repository)).collect();
        rules.sort_by_key(|r| std::cmp::Reverse(r.prefix.len()));
        rules
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_match_at_path_boundaries_only() {
        let rule = |p: &str| TrustRule {
            prefix: normalize_prefix(p).unwrap(),
            fingerprint: String::new(),
            key: String::new(),
        };
        let alice = rule("oci://reg:5000/alice/");
        assert_eq!(alice.prefix, "reg:5000/alice");
        assert!(alice.covers("reg:5000/alice/tool"));
        assert!(alice.covers("reg:5000/alice"));
        assert!(!alice.covers("reg:5000/alicevil/tool"));
        assert!(!alice.covers("reg:5001/alice/tool"));
        assert!(rule("reg:5000").covers("reg:5000/anyone/tool"));
        assert!(normalize_prefix("oci://reg/../x").is_err());
        assert!(normalize_prefix("https://reg/x").is_err());
        assert!(normalize_prefix("oci://bundle:tool/x").is_err());
        assert!(normalize_prefix("bundle:Bad Name").is_err());
        let tool = rule("bundle:tool");
        assert!(tool.covers("bundle:tool") && !tool.covers("bundle:toolbox") && !tool.covers("bundle:tool/x"));
        assert!(rule("bundle:*").covers("bundle:any") && !rule("bundle:*").covers("reg/any"));
    }
}
