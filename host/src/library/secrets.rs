//! The values of secrets, kept host-side in the home: `secrets.json`, mode 0600, written
//! atomically under a lock. Skills never read this file (no mount may contain the home);
//! the sandbox gets the values of a call's effective secrets and injects them into the
//! requests they are meant for (`sandbox::secrets`).
//!
//! The file is refused when other users can read it (like ssh's keys), and a damaged file
//! is never overwritten: the user fixes or removes it.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, anyhow, bail};
use serde::{Deserialize, Serialize};

use crate::capabilities::SecretUse;
use crate::capabilities::secrets::validate_secret_name;
use crate::sandbox::SecretValues;

/// A value fits one HTTP header line.
pub const MAX_SECRET_BYTES: usize = 16 * 1024;

#[derive(Default, Serialize, Deserialize)]
struct SecretsFile {
    version: u32,
    secrets: BTreeMap<String, StoredSecret>,
}

#[derive(Clone, Serialize, Deserialize)]
struct StoredSecret {
    value: String,
    /// RFC 3339.
    set_at: String,
}

/// A secret as `secret list` shows it: never its value.
#[derive(Debug, Clone, Serialize)]
pub struct SecretInfo {
    pub name: String,
    pub set_at: String,
    pub bytes: usize,
}

/// The secrets of one skillhost home.
pub struct SecretStore {
    path: PathBuf,
}

impl SecretStore {
    pub fn in_home(home: &Path) -> SecretStore {
        SecretStore { path: home.join("secrets.json") }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn load(&self) -> Result<SecretsFile> {
        let meta = match std::fs::metadata(&self.path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(SecretsFile { version: 1, ..Default::default() });
            }
            Err(e) => return Err(anyhow!("cannot read {}: {e}", self.path.display())),
        };
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            bail!(
                "{} can be read by other users (mode {mode:03o}); secrets are not used until it is private: run `chmod 600 {}`",
                self.path.display(),
                self.path.display()
            );
        }
        let text =
            std::fs::read_to_string(&self.path).with_context(|| format!("cannot read {}", self.path.display()))?;
        let file: SecretsFile = serde_json::from_str(&text).map_err(|e| {
            anyhow!(
                "{} is damaged ({e}); skillhost will not overwrite it: fix it, or move it aside and set the secrets again",
                self.path.display()
            )
        })?;
        if file.version != 1 {
            bail!(
                "{} has version {}, this skillhost reads version 1: upgrade skillhost",
                self.path.display(),
                file.version
            );
        }
        Ok(file)
    }

    fn save(&self, file: &SecretsFile) -> Result<()> {
        let dir = self.path.parent().ok_or_else(|| anyhow!("{} has no directory", self.path.display()))?;
        std::fs::create_dir_all(dir)?;
        // NamedTempFile is created 0600, and a rename keeps the mode.
        let mut tmp =
            crate::fsutil::temp_file_for(&self.path).with_context(|| format!("cannot write in {}", dir.display()))?;
        tmp.as_file().set_permissions(std::fs::Permissions::from_mode(0o600))?;
        tmp.write_all(serde_json::to_string_pretty(file)?.as_bytes())?;
        tmp.as_file().sync_all()?;
        tmp.persist(&self.path).map_err(|e| anyhow!("cannot replace {}: {}", self.path.display(), e.error))?;
        Ok(())
    }

    fn locked<T>(&self, f: impl FnOnce(&mut SecretsFile) -> Result<T>) -> Result<T> {
        let _lock = crate::fsutil::lock_exclusive(&self.path.with_extension("lock"))?;
        let mut file = self.load()?;
        let out = f(&mut file)?;
        self.save(&file)?;
        Ok(out)
    }

    /// Set (or replace) `name`. Returns whether it replaced a value.
    pub fn set(&self, name: &str, value: &str) -> Result<bool> {
        validate_secret_name(name).map_err(|m| anyhow!(m))?;
        if value.is_empty() {
            bail!("the value of {name} is empty: nothing to store");
        }
        if value.len() > MAX_SECRET_BYTES {
            bail!("the value of {name} is {} bytes; a secret is at most {MAX_SECRET_BYTES} bytes", value.len());
        }
        if value.contains(['\r', '\n', '\0']) {
            bail!("the value of {name} holds a line break or NUL; a secret is sent in one HTTP header line");
        }
        let set_at =
            time::OffsetDateTime::now_utc().format(&time::format_description::well_known::Rfc3339).unwrap_or_default();
        self.locked(|file| {
            file.version = 1;
            Ok(file.secrets.insert(name.to_string(), StoredSecret { value: value.to_string(), set_at }).is_some())
        })
    }

    /// Remove `name`; false when it was not set.
    pub fn remove(&self, name: &str) -> Result<bool> {
        if !self.path.exists() {
            return Ok(false);
        }
        self.locked(|file| Ok(file.secrets.remove(name).is_some()))
    }

    pub fn list(&self) -> Result<Vec<SecretInfo>> {
        Ok(self
            .load()?
            .secrets
            .into_iter()
            .map(|(name, s)| SecretInfo { name, set_at: s.set_at, bytes: s.value.len() })
            .collect())
    }

    /// The values of the secrets a call may use (unset ones are left out: the sandbox says so
    /// when the skill tries to use them).
    pub fn values_for(&self, uses: &[SecretUse]) -> Result<SecretValues> {
        if uses.is_empty() {
            return Ok(SecretValues::default());
        }
        let file = self.load()?;
        Ok(SecretValues::new(
            uses.iter().filter_map(|u| file.secrets.get(&u.name).map(|s| (u.name.clone(), s.value.clone()))).collect(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_list_remove_with_a_private_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = SecretStore::in_home(dir.path());
        assert!(store.list().unwrap().is_empty());
        assert!(!store.set("GITHUB_TOKEN", "ghp_abc123").unwrap());
        assert!(store.set("GITHUB_TOKEN", "ghp_def456").unwrap());
        let mode = std::fs::metadata(store.path()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let listed = store.list().unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].name, "GITHUB_TOKEN");
        assert!(!format!("{listed:?}").contains("ghp_"), "a listing never shows a value");
        let v = store.values_for(&[SecretUse::named("GITHUB_TOKEN"), SecretUse::named("UNSET")]).unwrap();
        assert_eq!(v.get("GITHUB_TOKEN"), Some("ghp_def456"));
        assert_eq!(v.get("UNSET"), None);
        assert!(!format!("{v:?}").contains("ghp_"));
        assert!(store.remove("GITHUB_TOKEN").unwrap());
        assert!(!store.remove("GITHUB_TOKEN").unwrap());
    }

    #[test]
    fn bad_values_names_and_files_are_refused_without_loss() {
        let dir = tempfile::tempdir().unwrap();
        let store = SecretStore::in_home(dir.path());
        assert!(store.set("bad-name", "x").is_err());
        assert!(store.set("A", "").is_err());
        assert!(store.set("A", "line\nbreak").unwrap_err().to_string().contains("line break"));
        store.set("A", "value-one").unwrap();
        std::fs::set_permissions(store.path(), std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = store.values_for(&[SecretUse::named("A")]).unwrap_err().to_string();
        assert!(e.contains("chmod 600"), "{e}");
        std::fs::set_permissions(store.path(), std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(store.path(), "{ not json").unwrap();
        let e = store.set("B", "value-two").unwrap_err().to_string();
        assert!(e.contains("damaged") && e.contains("will not overwrite"), "{e}");
        assert_eq!(std::fs::read_to_string(store.path()).unwrap(), "{ not json", "the damaged file is kept");
    }
}
