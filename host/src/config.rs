//! `<home>/skillhost.toml`: one table per feature, parsed here so that no feature owns the file.
//!
//! ```toml
//! [provider]        # the LLM provider of the agent loop (agent::provider::config)
//! kind = "openai"
//!
//! [memory]          # the embedding model of memory search (memory::model_setting)
//! embed_model = "models/multilingual-e5-small-q4.bin"   # or "off"
//!
//! [store]           # where the system of record lives (store::StoreUrl)
//! url = "postgres:///skillhost?host=/run/postgresql"    # or "local", the default
//! ```
//!
//! A feature names its table in [`TABLES`] and reads it with [`ConfigFile::table`] into its own
//! type (with `deny_unknown_fields`, so a misspelt key inside a known table is an error naming
//! the key and its line). A table no feature knows is an error naming it and listing the known
//! ones: a typo such as `[providers]` would otherwise be ignored silently. Environment
//! overrides stay with each feature, which knows its variables.

use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use serde::de::{Deserialize, DeserializeOwned, DeserializeSeed, IgnoredAny, MapAccess, Visitor};

/// The configuration file in the skillhost home.
pub const CONFIG_FILE: &str = "skillhost.toml";

/// Every table a `skillhost.toml` may have, one per feature. A new feature adds its name here.
pub const TABLES: &[&str] = &["provider", "memory", "store"];

/// One sentence naming the file, the line where known, and what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// The parsed file (empty when it does not exist), checked for unknown tables.
#[derive(Debug, Clone)]
pub struct ConfigFile {
    path: PathBuf,
    text: String,
}

impl ConfigFile {
    /// Reads `<home>/skillhost.toml`; a missing file is an empty configuration.
    pub fn load(home: &Path) -> Result<ConfigFile, ConfigError> {
        let path = home.join(CONFIG_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(error) => return Err(ConfigError(format!("cannot read {}: {error}", path.display()))),
        };
        ConfigFile::parse(path, text)
    }

    /// Checks `text` as the contents of `path`: valid TOML whose top level holds only the
    /// known tables.
    pub fn parse(path: PathBuf, text: String) -> Result<ConfigFile, ConfigError> {
        let file = ConfigFile { path, text };
        let document = toml::de::DeTable::parse(&file.text).map_err(|error| file.invalid(&error))?;
        for (key, value) in document.get_ref() {
            let line = file.line_of(key.span().start);
            let name = key.get_ref();
            if !TABLES.contains(&name.as_ref()) {
                return Err(ConfigError(format!(
                    "{} has an unknown table `{name}` (line {line}); the known tables are: {}",
                    file.path.display(),
                    known_tables()
                )));
            }
            if !matches!(value.get_ref(), toml::de::DeValue::Table(_)) {
                return Err(ConfigError(format!(
                    "`{name}` in {} (line {line}) must be a table, written `[{name}]` on its own line with its settings below",
                    file.path.display()
                )));
            }
        }
        Ok(file)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The table `name` (one of [`TABLES`]) as a `T`, or `None` when the file has no such table.
    pub fn table<T: DeserializeOwned>(&self, name: &'static str) -> Result<Option<T>, ConfigError> {
        debug_assert!(TABLES.contains(&name), "table `{name}` is not listed in config::TABLES");
        if self.text.trim().is_empty() {
            return Ok(None);
        }
        let document = toml::Deserializer::parse(&self.text).map_err(|error| self.invalid(&error))?;
        OneTable::<T> { name, wanted: PhantomData }.deserialize(document).map_err(|error| self.invalid(&error))
    }

    /// toml's message spans several lines (a source excerpt); the user gets one line.
    fn invalid(&self, error: &toml::de::Error) -> ConfigError {
        let location = error.span().map(|span| format!(" (line {})", self.line_of(span.start))).unwrap_or_default();
        ConfigError(format!("{} is not valid{location}: {}", self.path.display(), error.message().trim()))
    }

    fn line_of(&self, offset: usize) -> usize {
        self.text[..offset.min(self.text.len())].matches('\n').count() + 1
    }
}

fn known_tables() -> String {
    TABLES.iter().map(|t| format!("[{t}]")).collect::<Vec<_>>().join(", ")
}

/// Deserializes only the table `name` of the document, so its errors keep their positions.
struct OneTable<T> {
    name: &'static str,
    wanted: PhantomData<T>,
}

impl<'de, T: Deserialize<'de>> DeserializeSeed<'de> for OneTable<T> {
    type Value = Option<T>;

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<Option<T>, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de, T: Deserialize<'de>> Visitor<'de> for OneTable<T> {
    type Value = Option<T>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "a document of tables")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<T>, A::Error> {
        let mut found = None;
        while let Some(key) = map.next_key::<String>()? {
            if key == self.name {
                found = Some(map.next_value::<T>()?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Provider {
        kind: String,
    }

    fn parse(text: &str) -> Result<ConfigFile, ConfigError> {
        ConfigFile::parse(PathBuf::from("/h/skillhost.toml"), text.to_string())
    }

    #[test]
    fn a_known_table_is_read_into_its_type() {
        let file = parse("# comment\n[provider]\nkind = \"openai\"\n").unwrap();
        assert_eq!(file.table::<Provider>("provider").unwrap(), Some(Provider { kind: "openai".into() }));
        assert_eq!(parse("").unwrap().table::<Provider>("provider").unwrap(), None);
    }

    #[test]
    fn an_unknown_table_is_named_with_the_known_ones() {
        let message = parse("[provider]\nkind = \"x\"\n\n[mcpp]\nport = 1\n").unwrap_err().0;
        assert_eq!(
            message,
            "/h/skillhost.toml has an unknown table `mcpp` (line 4); the known tables are: [provider], [memory], [store]"
        );
        let message = parse("kind = \"openai\"\n").unwrap_err().0;
        assert!(message.contains("unknown table `kind` (line 1)"), "{message}");
    }

    #[test]
    fn a_known_name_that_is_not_a_table_is_refused() {
        let message = parse("provider = \"openai\"\n").unwrap_err().0;
        assert!(message.contains("`provider` in /h/skillhost.toml (line 1) must be a table"), "{message}");
    }

    #[test]
    fn an_unknown_key_inside_a_known_table_names_key_and_line() {
        let file = parse("[provider]\nkind = \"openai\"\nmodle = \"m\"\n").unwrap();
        let message = file.table::<Provider>("provider").unwrap_err().0;
        assert!(message.starts_with("/h/skillhost.toml is not valid (line 3): "), "{message}");
        assert!(message.contains("modle") && !message.contains('\n'), "{message}");
    }

    #[test]
    fn broken_toml_names_the_line() {
        let message = parse("[provider]\nkind = \n").unwrap_err().0;
        assert!(message.starts_with("/h/skillhost.toml is not valid (line 2)"), "{message}");
    }
}
