//! Which toolchain built a component, from what the component says about itself: the
//! `producers` custom sections (language, processed-by) of the component and its nested
//! core modules, and the names of the core modules a runtime links in.
//!
//! Why: a language runtime (CPython, StarlingMonkey, Go's) imports WASI filesystem and
//! sockets and the skill world's memory and session interfaces whether or not the skill
//! uses them. The install report should not cry wolf over a normal Python skill, yet must
//! stay meaningful for a hostile component. So this only changes the *wording* of the
//! report ("imported by the Python runtime, not declared, so denied"); every call through
//! such an import is denied exactly as before. A component can claim any producer, so
//! nothing here grants or widens anything.

use serde::Serialize;
use wasmparser::{KnownCustom, Parser, Payload};

/// The toolchain a component says built it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Toolchain {
    Rust,
    C,
    Go,
    Python,
    JavaScript,
}

impl Toolchain {
    pub fn name(self) -> &'static str {
        match self {
            Toolchain::Rust => "Rust",
            Toolchain::C => "C",
            Toolchain::Go => "Go",
            Toolchain::Python => "Python",
            Toolchain::JavaScript => "JavaScript",
        }
    }

    /// Whether the language ships a runtime that imports interfaces on its own behalf (C:
    /// wasi-libc and the preview1 adapter import the filesystem whether or not it is used).
    pub fn has_runtime(self) -> bool {
        matches!(self, Toolchain::C | Toolchain::Go | Toolchain::Python | Toolchain::JavaScript)
    }
}

/// What the producers sections and module names say; `None` when they say nothing we know.
/// A component with several languages (CPython's own Rust and C parts) is named by the
/// runtime language: Python, JavaScript and Go outrank C, which outranks Rust.
pub fn detect(wasm: &[u8]) -> Option<Toolchain> {
    let mut seen: Vec<Toolchain> = Vec::new();
    for payload in Parser::new(0).parse_all(wasm) {
        let Ok(payload) = payload else { break };
        match payload {
            Payload::CustomSection(section) => {
                if let KnownCustom::Producers(reader) = section.as_known() {
                    for field in reader.into_iter().flatten() {
                        for value in field.values.into_iter().flatten() {
                            if let Some(t) = from_producer(field.name, value.name) {
                                seen.push(t);
                            }
                        }
                    }
                }
            }
            Payload::ImportSection(imports) => {
                for import in imports.into_imports().flatten() {
                    if let Some(t) = from_runtime_module(import.module) {
                        seen.push(t);
                    }
                }
            }
            _ => {}
        }
    }
    [Toolchain::Python, Toolchain::JavaScript, Toolchain::Go, Toolchain::C, Toolchain::Rust]
        .into_iter()
        .find(|t| seen.contains(t))
}

fn from_producer(field: &str, value: &str) -> Option<Toolchain> {
    let value = value.to_ascii_lowercase();
    match field {
        "language" => match value.as_str() {
            "rust" => Some(Toolchain::Rust),
            "c" | "c89" | "c99" | "c11" | "c17" | "c23" | "c++" | "c++11" | "c++14" | "c++17" | "c++20" => {
                Some(Toolchain::C)
            }
            "go" => Some(Toolchain::Go),
            "python" => Some(Toolchain::Python),
            "javascript" => Some(Toolchain::JavaScript),
            _ => None,
        },
        "processed-by" => {
            if value.starts_with("componentize-py") {
                Some(Toolchain::Python)
            } else if value.starts_with("componentize-js")
                || value.starts_with("componentize-qjs")
                || value.contains("starlingmonkey")
            {
                Some(Toolchain::JavaScript)
            } else if value.starts_with("wit-bindgen-go") || value == "go" {
                Some(Toolchain::Go)
            } else {
                None
            }
        }
        _ => None,
    }
}

/// Core modules that componentize-py links in (its runtime glue and CPython).
fn from_runtime_module(module: &str) -> Option<Toolchain> {
    (module == "componentize_py_runtime" || module.starts_with("libpython")).then_some(Toolchain::Python)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A core module with a producers section and the given imports.
    fn module(producers: &[(&str, &str)], import_modules: &[&str]) -> Vec<u8> {
        use wasm_encoder::{EntityType, ImportSection, Module, ProducersField, ProducersSection, TypeSection};
        let mut m = Module::new();
        if !import_modules.is_empty() {
            let mut types = TypeSection::new();
            types.ty().function([], []);
            m.section(&types);
            let mut imports = ImportSection::new();
            for name in import_modules {
                imports.import(name, "f", EntityType::Function(0));
            }
            m.section(&imports);
        }
        let mut section = ProducersSection::new();
        for (field, value) in producers {
            let mut f = ProducersField::new();
            f.value(value, "1.0");
            section.field(field, &f);
        }
        m.section(&section);
        m.finish()
    }

    #[test]
    fn the_runtime_language_names_the_component() {
        assert_eq!(detect(&module(&[("language", "Rust"), ("processed-by", "rustc")], &[])), Some(Toolchain::Rust));
        assert_eq!(detect(&module(&[("language", "C11")], &[])), Some(Toolchain::C));
        // CPython's parts are Rust and C; the runtime module names it Python.
        assert_eq!(detect(&module(&[("language", "Rust")], &["componentize_py_runtime"])), Some(Toolchain::Python));
        assert_eq!(detect(&module(&[("processed-by", "StarlingMonkey")], &[])), Some(Toolchain::JavaScript));
        assert_eq!(detect(&module(&[("processed-by", "wit-component")], &["env"])), None);
        assert_eq!(detect(b"not wasm at all"), None, "garbage says nothing, and does not panic");
        assert!(Toolchain::Python.has_runtime() && !Toolchain::Rust.has_runtime());
    }
}
