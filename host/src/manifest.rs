//! SKILL.md: YAML front matter + Markdown body.
//!
//! The front matter is parsed with a real YAML parser into typed fields; unknown fields are
//! an error (a typo such as `capabilites:` must not silently drop a declaration). Every
//! error names the file, the line and the field so an author can fix it without guessing.
//! Files in the Agent Skills convention (name/description plus license, compatibility,
//! metadata, allowed-tools) parse too, as instruction skills.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::capabilities::{CapabilitySet, LimitsRequest};

/// A parsed, validated SKILL.md.
#[derive(Debug, Clone, Serialize)]
pub struct Manifest {
    pub name: String,
    pub description: String,
    pub when_to_use: Option<String>,
    pub version: Option<semver::Version>,
    pub parameters: Vec<Parameter>,
    pub capabilities: CapabilitySet,
    pub limits: LimitsRequest,
    /// The Markdown body (procedural knowledge for instruction skills, docs otherwise).
    pub body: String,
    /// Agent Skills fields kept as given, for tools that read them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub license: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compatibility: Option<String>,
}

/// One declared parameter; the list becomes a JSON Schema.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Parameter {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: ParamType,
    #[serde(default)]
    pub required: bool,
    #[serde(default)]
    pub description: String,
    #[serde(default, rename = "enum", skip_serializing_if = "Option::is_none")]
    pub choices: Option<Vec<Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minimum: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maximum: Option<f64>,
    /// Raw JSON Schema for the items of an `array` parameter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub items: Option<Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ParamType {
    String,
    Integer,
    Number,
    Boolean,
    Array,
    Object,
}

impl ParamType {
    fn json_name(self) -> &'static str {
        match self {
            ParamType::String => "string",
            ParamType::Integer => "integer",
            ParamType::Number => "number",
            ParamType::Boolean => "boolean",
            ParamType::Array => "array",
            ParamType::Object => "object",
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FrontMatter {
    name: String,
    description: String,
    #[serde(default)]
    when_to_use: Option<String>,
    #[serde(default)]
    version: Option<String>,
    #[serde(default)]
    parameters: Vec<Parameter>,
    #[serde(default)]
    capabilities: CapabilitySet,
    #[serde(default)]
    limits: LimitsRequest,
    // Agent Skills convention.
    #[serde(default)]
    license: Option<String>,
    #[serde(default)]
    compatibility: Option<String>,
    #[serde(default)]
    #[allow(dead_code)]
    metadata: Option<serde_yaml_ng::Value>,
    #[serde(default, rename = "allowed-tools")]
    #[allow(dead_code)]
    allowed_tools: Option<serde_yaml_ng::Value>,
}

/// A SKILL.md problem, located precisely.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestError {
    pub file: PathBuf,
    pub line: Option<usize>,
    pub field: Option<String>,
    pub message: String,
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if let Some(field) = &self.field {
            write!(f, ": field `{field}`")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for ManifestError {}

const MAX_NAME_LEN: usize = 64;

/// Largest SKILL.md accepted: far above any real one (the Agent Skills guidance is a few
/// thousand words; long material belongs in references/), small enough to parse at once.
pub const MAX_SKILL_MD_BYTES: u64 = 1 << 20;
/// Largest front matter accepted.
pub const MAX_FRONT_MATTER_BYTES: usize = 64 << 10;
/// Deepest nesting of the front matter (block indentation levels, `- ` items and flow
/// brackets together). A real manifest nests about five deep.
pub const MAX_FRONT_MATTER_DEPTH: usize = 32;

/// Check the size and nesting of front matter text before any YAML parser sees it, so a
/// hostile SKILL.md is refused at once instead of stalling the parser. Errors are (line in
/// `yaml`, message).
pub fn check_front_matter_limits(yaml: &str) -> Result<(), (Option<usize>, String)> {
    if yaml.len() > MAX_FRONT_MATTER_BYTES {
        return Err((
            None,
            format!(
                "the front matter is {} bytes, more than the limit of {MAX_FRONT_MATTER_BYTES}; keep it to the declaration and move long text into the body or references/",
                yaml.len()
            ),
        ));
    }
    let too_deep = |line: usize| {
        Err((
            Some(line),
            format!(
                "the front matter nests deeper than {MAX_FRONT_MATTER_DEPTH} levels; a skill declaration never needs that"
            ),
        ))
    };
    let mut indents: Vec<usize> = Vec::new();
    // Lines of a block scalar (`|` or `>`) are text, not structure: skip those indented
    // deeper than the line that opened it.
    let mut scalar_at: Option<usize> = None;
    let mut flow = 0usize;
    for (i, line) in yaml.lines().enumerate() {
        let content = line.trim_start_matches(' ');
        if content.is_empty() || content.starts_with('#') {
            continue;
        }
        let indent = line.len() - content.len();
        if let Some(at) = scalar_at {
            if indent > at {
                continue;
            }
            scalar_at = None;
        }
        while indents.last().is_some_and(|&top| top > indent) {
            indents.pop();
        }
        if indents.last() != Some(&indent) {
            indents.push(indent);
        }
        let mut rest = content;
        let mut dashes = 0;
        while let Some(r) = rest.strip_prefix("- ").or_else(|| (rest == "-").then_some("")) {
            dashes += 1;
            rest = r.trim_start_matches(' ');
        }
        // Flow collections, outside quoted strings.
        // A quote opens a quoted scalar only where a value starts (`it's` is plain text).
        let mut quote: Option<char> = None;
        let mut deepest_flow = flow;
        let mut value_starts = true;
        for c in rest.chars() {
            match (quote, c) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), _) => {}
                (None, '"' | '\'') if value_starts => quote = Some(c),
                (None, '[' | '{') => {
                    flow += 1;
                    deepest_flow = deepest_flow.max(flow);
                }
                (None, ']' | '}') => flow = flow.saturating_sub(1),
                (None, '#') if value_starts => break,
                _ => {}
            }
            if !c.is_whitespace() {
                value_starts = quote.is_none() && matches!(c, ':' | ',' | '[' | '{' | '-');
            }
        }
        if indents.len() + dashes + deepest_flow > MAX_FRONT_MATTER_DEPTH {
            return too_deep(i + 1);
        }
        let trimmed = rest.trim_end();
        if trimmed.ends_with('|')
            || trimmed.ends_with('>')
            || trimmed.ends_with("|-")
            || trimmed.ends_with(">-")
            || trimmed.ends_with("|+")
            || trimmed.ends_with(">+")
        {
            scalar_at = Some(indent);
        }
    }
    Ok(())
}

impl Manifest {
    /// Read and validate `dir/SKILL.md`; the directory name must equal `name`.
    pub fn load_dir(dir: &Path) -> Result<Manifest, ManifestError> {
        let file = dir.join("SKILL.md");
        if let Ok(meta) = std::fs::metadata(&file)
            && meta.len() > MAX_SKILL_MD_BYTES
        {
            return Err(ManifestError {
                file: file.clone(),
                line: None,
                field: None,
                message: format!(
                    "it is {} bytes, more than the limit of {MAX_SKILL_MD_BYTES}; move long material into references/",
                    meta.len()
                ),
            });
        }
        let text = std::fs::read_to_string(&file).map_err(|e| ManifestError {
            file: file.clone(),
            line: None,
            field: None,
            message: format!("cannot read it ({e}); a skill directory needs a SKILL.md"),
        })?;
        let manifest = Manifest::parse(&file, &text)?;
        if let Some(dir_name) = dir.file_name().and_then(|n| n.to_str())
            && dir_name != manifest.name
        {
            return Err(ManifestError {
                file: file.clone(),
                line: field_line(&text, "name"),
                field: Some("name".into()),
                message: format!(
                    "name `{}` differs from the directory name `{dir_name}`; rename one so they match",
                    manifest.name
                ),
            });
        }
        Ok(manifest)
    }

    /// Parse SKILL.md text; `file` is used only in error messages.
    pub fn parse(file: &Path, text: &str) -> Result<Manifest, ManifestError> {
        let err = |line: Option<usize>, field: Option<&str>, message: String| ManifestError {
            file: file.to_path_buf(),
            line,
            field: field.map(str::to_owned),
            message,
        };
        if text.len() as u64 > MAX_SKILL_MD_BYTES {
            return Err(err(
                None,
                None,
                format!(
                    "it is {} bytes, more than the limit of {MAX_SKILL_MD_BYTES}; move long material into references/",
                    text.len()
                ),
            ));
        }
        let (yaml, body) = split_front_matter(text).map_err(|(line, m)| err(line, None, m))?;
        // Line numbers inside `yaml` are offset by the opening `---`.
        check_front_matter_limits(&yaml).map_err(|(line, m)| err(line.map(|l| l + 1), None, m))?;
        let body = body.trim().to_string();
        let fm: FrontMatter = serde_yaml_ng::from_str(&yaml).map_err(|e| {
            let line = e.location().map(|l| l.line() + 1);
            let msg = e.to_string();
            let field = msg
                .split('`')
                .nth(1)
                .filter(|_| msg.contains("field"))
                .map(str::to_owned)
                .or_else(|| msg.split(':').next().filter(|p| !p.contains(' ')).map(str::to_owned));
            err(line, field.as_deref(), format!("invalid front matter: {msg}"))
        })?;
        let at = |field: &str| field_line(&yaml, field).map(|l| l + 1);

        validate_name(&fm.name).map_err(|m| err(at("name"), Some("name"), m))?;
        if fm.name == "reply" {
            return Err(err(
                at("name"),
                Some("name"),
                "`reply` is reserved: it is the agent's final-answer action (a tool of that name would clash); rename the skill".into(),
            ));
        }
        if fm.description.trim().is_empty() {
            return Err(err(
                at("description"),
                Some("description"),
                "must say what the skill does and when to use it".into(),
            ));
        }
        let version =
            match &fm.version {
                None => None,
                Some(v) => Some(semver::Version::parse(v.trim()).map_err(|e| {
                    err(at("version"), Some("version"), format!("`{v}` is not semver like 1.2.3 ({e})"))
                })?),
            };
        let mut seen = std::collections::HashSet::new();
        for p in &fm.parameters {
            let field = format!("parameters.{}", p.name);
            let line = field_line(&yaml, &format!("name: {}", p.name)).map(|l| l + 1).or(at("parameters"));
            if p.name.is_empty() || !p.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
                return Err(err(line, Some(&field), "parameter names use letters, digits, `_` and `-`".into()));
            }
            if !seen.insert(p.name.clone()) {
                return Err(err(line, Some(&field), "declared twice".into()));
            }
            if let Some(default) = &p.default {
                let probe = jsonschema::validator_for(&p.schema())
                    .map_err(|e| err(line, Some(&field), format!("does not form a valid JSON Schema: {e}")))?;
                if let Err(e) = probe.validate(default) {
                    return Err(err(line, Some(&field), format!("default {default} does not fit the parameter: {e}")));
                }
            }
        }
        fm.capabilities.validate().map_err(|(f, m)| {
            err(at(f.split('.').next().unwrap_or(&f)).or(at("capabilities")), Some(&format!("capabilities.{f}")), m)
        })?;
        if let Some((i, s)) = fm.capabilities.secrets.iter().enumerate().find(|(_, s)| s.hosts.is_empty()) {
            return Err(err(
                at("secrets").or(at("capabilities")),
                Some(&format!("capabilities.secrets.{i}.hosts")),
                format!("secret `{}` names no hosts: a secret is sent only to the hosts it lists", s.name),
            ));
        }
        fm.limits.validate().map_err(|(f, m)| err(at(&f).or(at("limits")), Some(&format!("limits.{f}")), m))?;

        let manifest = Manifest {
            name: fm.name,
            description: fm.description.trim().to_string(),
            when_to_use: fm.when_to_use.map(|s| s.trim().to_string()),
            version,
            parameters: fm.parameters,
            capabilities: fm.capabilities,
            limits: fm.limits,
            body,
            license: fm.license,
            compatibility: fm.compatibility,
        };
        // Fail at load time, not at the first call, if the schema is unusable.
        jsonschema::validator_for(&manifest.params_schema())
            .map_err(|e| err(at("parameters"), Some("parameters"), format!("do not form a valid JSON Schema: {e}")))?;
        Ok(manifest)
    }

    /// The JSON Schema (draft 2020-12) that every call's parameters must satisfy.
    pub fn params_schema(&self) -> Value {
        let mut props = Map::new();
        let mut required = Vec::new();
        for p in &self.parameters {
            props.insert(p.name.clone(), p.schema());
            if p.required {
                required.push(Value::String(p.name.clone()));
            }
        }
        json!({
            "type": "object",
            "properties": props,
            "required": required,
            "additionalProperties": false,
        })
    }
}

impl Parameter {
    fn schema(&self) -> Value {
        let mut s = Map::new();
        s.insert("type".into(), json!(self.kind.json_name()));
        if !self.description.is_empty() {
            s.insert("description".into(), json!(self.description));
        }
        if let Some(choices) = &self.choices {
            s.insert("enum".into(), Value::Array(choices.clone()));
        }
        if let Some(min) = self.minimum {
            s.insert("minimum".into(), json!(min));
        }
        if let Some(max) = self.maximum {
            s.insert("maximum".into(), json!(max));
        }
        if let Some(items) = &self.items {
            s.insert("items".into(), items.clone());
        }
        if let Some(default) = &self.default {
            s.insert("default".into(), default.clone());
        }
        Value::Object(s)
    }
}

/// Names: lowercase ASCII letters, digits and single `-`, 1-64 chars (also the Agent Skills rule).
pub fn validate_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(format!("must be 1-{MAX_NAME_LEN} characters long"));
    }
    if !name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-') {
        return Err(format!("`{name}` may contain only lowercase letters, digits and `-`"));
    }
    if name.starts_with('-') || name.ends_with('-') || name.contains("--") {
        return Err(format!("`{name}` must not start or end with `-` or contain `--`"));
    }
    Ok(())
}

/// Split SKILL.md text into the YAML front matter (without the `---` lines; its line 1 is
/// the file's line 2) and the body. Errors are (line, message).
pub fn split_front_matter(text: &str) -> Result<(String, &str), (Option<usize>, String)> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.split_inclusive('\n');
    let first = lines.next().unwrap_or("");
    if first.trim_end() != "---" {
        return Err((Some(1), "SKILL.md must start with a `---` line opening the YAML front matter".into()));
    }
    let mut yaml = String::new();
    let mut consumed = first.len();
    for line in lines {
        consumed += line.len();
        if line.trim_end() == "---" {
            return Ok((yaml, &text[consumed..]));
        }
        yaml.push_str(line);
    }
    Err((None, "the front matter has no closing `---` line".into()))
}

/// 1-based line of the first line in `yaml` whose trimmed text starts with `key:` (or
/// `- key:`); used to point errors found after parsing at the right line.
pub(crate) fn field_line(yaml: &str, key: &str) -> Option<usize> {
    let needle = if key.contains(':') { key.to_string() } else { format!("{key}:") };
    yaml.lines()
        .position(|l| {
            let t = l.trim_start().trim_start_matches("- ");
            t.starts_with(&needle)
        })
        .map(|i| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Manifest, ManifestError> {
        Manifest::parse(Path::new("x/SKILL.md"), text)
    }

    #[test]
    fn full_manifest_parses_and_builds_schema() {
        let m = parse(
            "---\nname: read-log-file\ndescription: Reads logs.\nversion: 1.2.0\nparameters:\n  - name: path\n    type: string\n    required: true\n  - name: max_lines\n    type: integer\n    default: 10\n    minimum: 1\ncapabilities:\n  memory: write\n---\n# Body\n",
        )
        .unwrap();
        assert_eq!(m.name, "read-log-file");
        assert_eq!(m.body, "# Body");
        let schema = m.params_schema();
        assert_eq!(schema["required"], json!(["path"]));
        assert_eq!(schema["properties"]["max_lines"]["minimum"], json!(1.0));
    }

    #[test]
    fn errors_name_line_and_field() {
        let e = parse("---\nname: ok\ndescription: d\nversion: one\n---\n").unwrap_err();
        assert_eq!(e.line, Some(4));
        assert_eq!(e.field.as_deref(), Some("version"));
        let e = parse("---\nname: Bad_Name\ndescription: d\n---\n").unwrap_err();
        assert_eq!((e.line, e.field.as_deref()), (Some(2), Some("name")));
        let e = parse("---\nname: ok\ndescription: d\ncapabilites:\n  memory: read\n---\n").unwrap_err();
        assert!(e.message.contains("capabilites"), "{e}");
        assert_eq!(e.line, Some(4), "{e}");
        let e = parse("no front matter").unwrap_err();
        assert_eq!(e.line, Some(1));
        let e = parse(
            "---\nname: ok\ndescription: d\nparameters:\n  - name: n\n    type: integer\n    default: abc\n---\n",
        )
        .unwrap_err();
        assert_eq!(e.field.as_deref(), Some("parameters.n"), "{e}");
        assert_eq!(e.line, Some(5), "{e}");
    }

    #[test]
    fn huge_or_deeply_nested_front_matter_is_refused_before_parsing() {
        let deep_flow =
            format!("---\nname: ok\ndescription: d\nmetadata: {}{}\n---\n", "[".repeat(100_000), "]".repeat(100_000));
        let started = std::time::Instant::now();
        let e = parse(&deep_flow).unwrap_err();
        assert!(e.message.contains("more than the limit") || e.message.contains("nests deeper"), "{e}");
        let deep_block: String = (0..40).map(|i| format!("{}k{i}:\n", " ".repeat(i * 2))).collect();
        let e = parse(&format!("---\nname: ok\ndescription: d\nmetadata:\n{deep_block}---\n")).unwrap_err();
        assert!(e.message.contains("nests deeper than 32"), "{e}");
        assert!(e.to_string().starts_with("x/SKILL.md:"), "names the file: {e}");
        let dashes = format!("---\nname: ok\ndescription: d\nmetadata:\n  {}x\n---\n", "- ".repeat(40));
        assert!(parse(&dashes).unwrap_err().message.contains("nests deeper"));
        let huge = format!("---\nname: ok\ndescription: {}\n---\n", "x".repeat(2 << 20));
        assert!(parse(&huge).unwrap_err().message.contains("more than the limit of 1048576"));
        assert!(started.elapsed() < std::time::Duration::from_secs(2), "{:?}", started.elapsed());
        // Deep indentation inside a block scalar is text, and quoted brackets are not structure.
        let code: String = (0..40).map(|i| format!("  {}line\n", " ".repeat(i * 2))).collect();
        let m = parse(&format!(
            "---\nname: ok\ndescription: |\n{code}when_to_use: \"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\"\n---\n"
        ))
        .unwrap();
        assert!(m.description.contains("line"));
    }

    #[test]
    fn alias_bombs_are_refused_with_a_message() {
        // Nine levels of nine aliases expand to 9^9 nodes: the parser's repetition limit
        // must stop it, with an error that names the file.
        let mut yaml =
            String::from("---\nname: ok\ndescription: d\nmetadata:\n  a0: &a0 [x, x, x, x, x, x, x, x, x]\n");
        for i in 1..10 {
            let refs = vec![format!("*a{}", i - 1); 9].join(", ");
            yaml.push_str(&format!("  a{i}: &a{i} [{refs}]\n"));
        }
        yaml.push_str("---\n");
        let e = parse(&yaml).unwrap_err();
        assert!(e.message.contains("repetition limit"), "{e}");
        assert!(e.to_string().starts_with("x/SKILL.md"), "{e}");
    }

    #[test]
    fn agent_skills_fields_are_accepted() {
        let m = parse("---\nname: pdf\ndescription: Work with PDFs.\nlicense: MIT\nallowed-tools: Bash\nmetadata:\n  author: x\n---\nbody").unwrap();
        assert_eq!(m.license.as_deref(), Some("MIT"));
        assert!(m.capabilities.is_empty());
    }
}
