//! `skillhost policy …`: show, grant and revoke what skills may use.

use std::process::ExitCode;

use anyhow::Result;

use super::output::print_list;
use super::{PolicyCmd, print_json};
use crate::library::Library;
use crate::policy::{Policy, parse_grant};

pub(super) fn policy(lib: &Library, cmd: PolicyCmd, json: bool) -> Result<ExitCode> {
    let files = lib.policy_files();
    match cmd {
        PolicyCmd::Show { name } => {
            let p = files.load()?;
            let shown = match &name {
                Some(n) => {
                    let mut one = Policy { paths: p.paths.clone(), limits: p.limits, ..Default::default() };
                    one.skills.insert(n.clone(), p.granted(n));
                    if let Some(l) = p.skill_limits.get(n) {
                        one.skill_limits.insert(n.clone(), *l);
                    }
                    one
                }
                None => p,
            };
            if json {
                print_json(&shown)?;
            } else {
                println!("# user policy: {}", files.user.display());
                if let Some(pp) = &files.project {
                    println!("# project policy (overrides): {}", pp.display());
                }
                print!("{}", toml::to_string_pretty(&shown)?);
            }
            Ok(ExitCode::SUCCESS)
        }
        PolicyCmd::Grant { name, specs } => {
            let manifest = lib.info(&name)?.manifest;
            change_grants(lib, &name, &specs, json, "grant", |p, spec| {
                p.apply(&name, &parse_grant(spec, &manifest.capabilities, &manifest.limits)?);
                Ok(())
            })
        }
        PolicyCmd::Revoke { name, specs } => {
            change_grants(lib, &name, &specs, json, "revoke", |p, spec| p.revoke(&name, spec))
        }
    }
}

/// Apply `change` for each spec to the user policy, save it, and show the result.
fn change_grants(
    lib: &Library,
    name: &str,
    specs: &[String],
    json: bool,
    verb: &str,
    mut change: impl FnMut(&mut Policy, &str) -> Result<()>,
) -> Result<ExitCode> {
    if specs.is_empty() {
        anyhow::bail!("say what to {verb}: {}", crate::capabilities::grant_syntax());
    }
    let (p, ()) = Policy::update(&lib.policy_files().user, |p| specs.iter().try_for_each(|spec| change(p, spec)))?;
    let caps = p.granted(name);
    for w in crate::capabilities::filesystem::broad_write_warnings(&caps.filesystem) {
        eprintln!("! WARNING: {name}: {}", w.replace("NAME", name));
    }
    if json {
        print_json(&caps)?;
    } else {
        let mut granted = caps.describe();
        granted.extend(p.skill_limits.get(name).map(|l| l.describe()).unwrap_or_default());
        print_list(&format!("{name} granted"), &granted);
    }
    Ok(ExitCode::SUCCESS)
}
