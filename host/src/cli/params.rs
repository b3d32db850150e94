//! `--params` for `skill run`: a JSON object inline, from a file (`@FILE`) or from stdin (`-`)
//! for inputs too large for a command line. A malformed value is a usage error (exit code 2),
//! as a malformed `-p name=value` is.

use std::io::Read as _;

use anyhow::{Context as _, Result};
use serde_json::Value;

use super::output::UsageError;

/// Most bytes read for `--params @FILE` / `-`: far beyond any parameter object a skill takes.
const MAX_PARAMS_BYTES: u64 = 64 << 20;

pub(super) fn parse_params(arg: &str) -> Result<Value> {
    let (text, origin) = if arg == "-" {
        let mut text = String::new();
        std::io::stdin()
            .take(MAX_PARAMS_BYTES + 1)
            .read_to_string(&mut text)
            .context("cannot read --params from stdin")?;
        (text, "stdin".to_string())
    } else if let Some(path) = arg.strip_prefix('@') {
        let file =
            std::fs::File::open(path).map_err(|e| UsageError(format!("--params @{path}: cannot read {path} ({e})")))?;
        let mut text = String::new();
        file.take(MAX_PARAMS_BYTES + 1).read_to_string(&mut text).with_context(|| format!("cannot read {path}"))?;
        (text, path.to_string())
    } else {
        (arg.to_string(), "--params".to_string())
    };
    if text.len() as u64 > MAX_PARAMS_BYTES {
        return Err(
            UsageError(format!("the parameters from {origin} are larger than {} MiB", MAX_PARAMS_BYTES >> 20)).into()
        );
    }
    let value: Value = serde_json::from_str(&text).map_err(|e| {
        UsageError(format!(
            "the parameters from {origin} are not valid JSON ({e}); pass an object like '{{\"path\": \"x.log\"}}'"
        ))
    })?;
    if !value.is_object() {
        return Err(UsageError(format!("the parameters from {origin} must be a JSON object, not {value}")).into());
    }
    Ok(value)
}
