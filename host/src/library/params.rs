//! A call's parameters: checked against the skill's JSON Schema (defaults filled in)
//! before anything runs, and `-p key=value` pairs typed by the declared parameters.

use anyhow::{Result, anyhow};
use serde_json::Value;

use crate::manifest::{Manifest, ParamType};
use crate::sandbox::CallError;

pub(super) fn validate_params(
    manifest: &Manifest,
    validator: &jsonschema::Validator,
    mut params: Value,
) -> Result<Value, CallError> {
    let expected = || {
        let list: Vec<String> = manifest
            .parameters
            .iter()
            .map(|p| {
                let mut s =
                    format!("{} ({:?}{})", p.name, p.kind, if p.required { ", required" } else { "" }).to_lowercase();
                if let Some(c) = &p.choices {
                    s.push_str(&format!(" one of {}", Value::Array(c.clone())));
                }
                s
            })
            .collect();
        if list.is_empty() {
            "this skill takes no parameters".to_string()
        } else {
            format!("expected: {}", list.join(", "))
        }
    };
    let Some(obj) = params.as_object_mut() else {
        return Err(CallError::InvalidParams(format!(
            "parameters must be a JSON object, got {params}; {}",
            expected()
        )));
    };
    for p in &manifest.parameters {
        if let Some(d) = &p.default
            && !obj.contains_key(&p.name)
        {
            obj.insert(p.name.clone(), d.clone());
        }
    }
    let problems: Vec<String> = validator
        .iter_errors(&params)
        .map(|e| {
            let path = e.instance_path().to_string();
            if path.is_empty() { e.to_string() } else { format!("`{}`: {e}", path.trim_start_matches('/')) }
        })
        .collect();
    if !problems.is_empty() {
        return Err(CallError::InvalidParams(format!("{}; {}", problems.join("; "), expected())));
    }
    Ok(params)
}

/// Parse `-p key=value` pairs using the declared parameter types (a string parameter
/// keeps `123` as text; others take JSON).
pub fn params_from_pairs(manifest: &Manifest, pairs: &[String]) -> Result<Value> {
    let mut obj = serde_json::Map::new();
    for pair in pairs {
        let (k, v) = pair.split_once('=').ok_or_else(|| anyhow!("`-p {pair}`: write it as -p name=value"))?;
        let kind = manifest.parameters.iter().find(|p| p.name == k).map(|p| p.kind);
        let value = match kind {
            Some(ParamType::String) | None => serde_json::from_str::<Value>(v)
                .ok()
                .filter(|j| kind.is_none() && !j.is_string())
                .unwrap_or_else(|| Value::String(v.to_string())),
            // A value that is not of the declared type goes on as text, so the parameter check
            // reports it exactly as it would the same value given in `--params`.
            Some(_) => serde_json::from_str(v).unwrap_or_else(|_| Value::String(v.to_string())),
        };
        obj.insert(k.to_string(), value);
    }
    Ok(Value::Object(obj))
}
