//! `skillhost skill …`: install, inspect, run, author and version skills.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, Result, anyhow};
use serde_json::{Value, json};

use super::output::UsageError;
use super::output::{clean, clean_line, one_line, print_list, print_run};
use super::{SkillCmd, ask, print_json};
use crate::library::{InstallOptions, Library, Replacement, RunOptions, params_from_pairs};
use crate::policy::{Grant, Policy, parse_grant};
use crate::sandbox::Status;

pub(super) fn skill(lib: &Library, cmd: SkillCmd, json: bool) -> Result<ExitCode> {
    match cmd {
        SkillCmd::Install { dir, grants, yes, allow_unsigned, allow_downgrade, registry } => {
            install(lib, dir, grants, yes, allow_unsigned, allow_downgrade, registry, json)
        }
        SkillCmd::List => list(lib, json),
        SkillCmd::Search { query, top } => search(lib, query, top, json),
        SkillCmd::Info { name } => info(lib, name, json),
        SkillCmd::Run { name, params, pairs, session } => run_skill(lib, name, params, pairs, session, json),
        SkillCmd::New { name, lang, dir, sdk } => new_skill(name, lang, dir, sdk, json),
        SkillCmd::Build { dir } => build(dir, json),
        SkillCmd::Test { name, cases } => test(lib, name, cases, json),
        SkillCmd::Pack { dir, output, sign } => pack(lib, dir, output, sign, json),
        SkillCmd::Lint { path, agent_skills } => lint(path, agent_skills, json),
        SkillCmd::Import { dir } => import(lib, dir, json),
        SkillCmd::History { name } => history(lib, name, json),
        SkillCmd::Rollback { name, version } => rollback(lib, name, version, json),
        SkillCmd::Update { name, yes, allow_unsigned, allow_downgrade, registry } => {
            update(lib, name, yes, allow_unsigned, allow_downgrade, registry, json)
        }
        SkillCmd::Push { dir, reference, sign, registry } => push(lib, dir, reference, sign, registry, json),
        SkillCmd::Verify { name } => super::oci::verify(lib, &name, json),
        SkillCmd::Remove { name, purge } => remove(lib, name, purge, json),
    }
}

/// `skillhost skill install`.
#[allow(clippy::too_many_arguments)] // one per flag of the command
fn install(
    lib: &Library,
    dir: PathBuf,
    grants: Vec<String>,
    yes: bool,
    allow_unsigned: bool,
    allow_downgrade: bool,
    registry: super::oci::RegistryArgs,
    json: bool,
) -> Result<ExitCode> {
    let interactive = !yes && grants.is_empty() && std::io::stdin().is_terminal() && !json;
    let decide = |m: &crate::manifest::Manifest| -> Result<Option<Grant>> {
        if yes {
            return Ok(Some(Grant::everything(m)));
        }
        let mut set = Policy::default();
        for spec in &grants {
            let g = parse_grant(spec, &m.capabilities, &m.limits).map_err(|e| anyhow!("--grant {spec}: {e}"))?;
            set.apply(&m.name, &g);
        }
        if !grants.is_empty() {
            return Ok(Some(Grant { capabilities: set.granted(&m.name), limits: set.limit_caps(&m.name) }));
        }
        // On an upgrade, ask only about what the new version adds: the user's
        // earlier decisions (including revocations) stay as they are.
        let previous = lib.info(&m.name).ok().map(|i| (i.manifest.capabilities, ()));
        let new_caps = match &previous {
            Some((caps, _)) => m.capabilities.minus(caps),
            None => m.capabilities.clone(),
        };
        let asks: Vec<String> = new_caps.describe().into_iter().chain(m.limits.beyond_default()).collect();
        if interactive && !asks.is_empty() {
            let what = if previous.is_some() { "this version newly asks for" } else { "asks for" };
            eprintln!("{} {what}:", m.name);
            for d in &asks {
                eprintln!("  - {d}");
            }
            if ask("Grant these?") {
                return Ok(Some(Grant { capabilities: new_caps, limits: m.limits }));
            }
        }
        Ok(None)
    };
    // New content under an installed name would inherit its grants: confirm first.
    let tty = std::io::stdin().is_terminal() && !json;
    let confirm = |r: &Replacement| -> Result<bool> {
        if yes {
            return Ok(true);
        }
        if tty {
            eprintln!("{} is installed with different content: this install {r}.", r.name);
            return Ok(ask("Replace it, keeping these grants for the new content?"));
        }
        anyhow::bail!(
            "`{0}` is already installed with different content and holds grants; this install {r}. Pass --yes to replace it and keep the grants for the new content, or `skillhost skill remove {0}` first to install it without them. Nothing was installed.",
            r.name
        )
    };
    let source = dir.to_string_lossy().into_owned();
    let unsigned = if allow_unsigned { crate::oci::Unsigned::Allow } else { crate::oci::Unsigned::Refuse };
    let is_url = source.starts_with("http://") || source.starts_with("https://");
    let report = if source.starts_with("oci://") {
        let how = super::oci::OciInstall { source: &source, unsigned, allow_downgrade, registry: &registry };
        super::oci::install(lib, &how, &decide, &confirm)?
    } else if allow_downgrade || (allow_unsigned && !is_url && !dir.is_file()) {
        return Err(UsageError(
            "--allow-downgrade applies to oci:// installs, --allow-unsigned to oci:// and .skill bundles".into(),
        )
        .into());
    } else if is_url {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let bytes = rt.block_on(crate::bundle::download(&source))?;
        super::oci::install_bundle(lib, &bytes, &source, unsigned, &decide, &confirm)?
    } else if dir.is_file() {
        let bytes = std::fs::read(&dir).with_context(|| format!("cannot read {}", dir.display()))?;
        let path = std::fs::canonicalize(&dir).unwrap_or_else(|_| dir.clone());
        super::oci::install_bundle(lib, &bytes, &path.display().to_string(), unsigned, &decide, &confirm)?
    } else {
        let path = std::fs::canonicalize(&dir).unwrap_or_else(|_| dir.clone());
        let opts =
            InstallOptions { confirm_replace: &confirm, source: Some(path.display().to_string()), provenance: None };
        lib.install_with(&dir, &decide, &opts)?
    };
    if json {
        print_json(&report)?;
    } else {
        println!(
            "installed {} {} ({}, {})",
            report.name,
            report.version.as_deref().unwrap_or(""),
            report.kind,
            &report.content_hash[..12]
        );
        if let Some(p) = &report.provenance {
            println!("  from {} digest {}", p.origin(), p.digest);
            match &p.signer {
                Some(s) => println!("  signed: {s}"),
                None if p.unsigned_allowed => {
                    println!("  ! UNSIGNED: installed with --allow-unsigned; nobody vouches for these bytes")
                }
                None => println!("  unsigned: nobody you trust vouches for these bytes"),
            }
        }
        print_list("declares", &report.declared);
        print_list("granted", &report.granted);
        if !report.imports.is_empty() {
            let short: Vec<&str> = report.imports.iter().map(|i| i.split('@').next().unwrap_or(i)).collect();
            println!("  component imports ({}): {}", short.len(), short.join(", "));
        }
        let mut by_cap: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
        for u in &report.undeclared_imports {
            by_cap.entry(&u.capability).or_default().push(&u.import);
        }
        let runtime = report.toolchain.filter(|t| t.has_runtime());
        for (cap, imports) in by_cap {
            match runtime {
                Some(t) => println!(
                    "  imported by the {} runtime, not declared, so denied: `{cap}` ({})",
                    t.name(),
                    imports.join(", ")
                ),
                None => println!(
                    "  ! imports beyond the declaration: `{cap}` ({}); calls through them are denied",
                    imports.join(", ")
                ),
            }
        }
        if report.unchanged {
            println!("  unchanged: this content was already installed (nothing replaced, grants as they were)");
        } else if let Some(r) = &report.replaces {
            println!("  {r}; the old version is kept in `skillhost skill history {}`", report.name);
        }
        for w in &report.warnings {
            println!("  ! WARNING: {}", w.replace("NAME", &report.name));
        }
        if !report.new_rights.is_empty() {
            println!(
                "  ! this version asks for rights the previous one did not: {} (not granted unless you grant them)",
                report.new_rights.join("; ")
            );
        }
        if !report.limits_requested.is_empty() {
            println!(
                "  asks for limits above the defaults: {} (in force: wall {} ms, cpu {} ms, memory {} MiB, stack {} KiB; grant with `skillhost policy grant {} limits`)",
                report.limits_requested.join("; "),
                report.limits.wall_time_ms,
                report.limits.cpu_time_ms,
                report.limits.memory_mb,
                report.limits.stack_kb,
                report.name
            );
        }
        if !report.not_granted.is_empty() {
            println!(
                "  not granted: {} (grant with `skillhost policy grant {} all`)",
                report.not_granted.join("; "),
                report.name
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `skillhost skill list`.
fn list(lib: &Library, json: bool) -> Result<ExitCode> {
    let scanned = lib.scan()?;
    if json {
        let rows: Vec<Value> = scanned
            .iter()
            .map(|(name, info)| match info {
                Ok(i) => json!({
                    "name": name,
                    "version": i.record.version,
                    "kind": if i.record.is_instruction() { "instruction" } else { "executable" },
                    "description": i.manifest.description,
                    "content_hash": i.record.content_hash,
                    "effective": i.effective,
                }),
                Err(e) => json!({ "name": name, "error": format!("{e:#}") }),
            })
            .collect();
        print_json(&rows)?;
    } else if scanned.is_empty() {
        println!("no skills installed; install one with `skillhost skill install DIR`");
    } else {
        for (name, info) in &scanned {
            match info {
                Ok(i) => println!(
                    "{:<28} {:<8} {:<11} {}",
                    name,
                    i.record.version.as_deref().unwrap_or("-"),
                    if i.record.is_instruction() { "instruction" } else { "executable" },
                    one_line(&i.manifest.description, 72)
                ),
                Err(e) => println!("{name:<28} BROKEN   {e:#}"),
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `skillhost skill search`.
fn search(lib: &Library, query: String, top: usize, json: bool) -> Result<ExitCode> {
    let found = lib.search_skills(&query, top)?;
    let hits = found.hits;
    // Say how it searched: a query in another language finds nothing lexically.
    let how = match &found.semantic {
        Some(_) => "lexical + semantic (the embedding model: any language)".to_string(),
        None => format!("search is {}", crate::memory::embed::lexical_only_notice()),
    };
    if !json || found.semantic.is_none() {
        eprintln!("{how}");
    }
    if json {
        let rows: Vec<Value> = hits
            .iter()
            .map(|(h, i)| {
                json!({
                    "name": h.name,
                    "score": h.score,
                    "kind": if i.record.is_instruction() { "instruction" } else { "executable" },
                    "description": i.manifest.description,
                })
            })
            .collect();
        print_json(&rows)?;
    } else if hits.is_empty() {
        println!("no installed skill matches; try other words, or `skillhost skill list`");
    } else {
        for (h, i) in &hits {
            println!("{:>6.2}  {:<28} {}", h.score, h.name, one_line(&i.manifest.description, 64));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `skillhost skill info`.
fn info(lib: &Library, name: String, json: bool) -> Result<ExitCode> {
    let info = lib.info(&name)?;
    if json {
        print_json(&info)?;
    } else {
        let m = &info.manifest;
        println!("{} {}", m.name, info.record.version.as_deref().unwrap_or(""));
        println!("  {}", clean_line(&m.description));
        if let Some(w) = &m.when_to_use {
            println!("  when to use: {}", clean_line(w));
        }
        println!("  content hash: {}", info.record.content_hash);
        for p in &m.parameters {
            println!(
                "  param {} ({:?}{}){}",
                p.name,
                p.kind,
                if p.required { ", required" } else { "" },
                if p.description.is_empty() { String::new() } else { format!(": {}", clean_line(&p.description)) }
            );
        }
        print_list("declares", &info.declared);
        print_list("granted", &info.granted);
        print_list("effective", &info.effective);
        println!("  limits: {}", serde_json::to_string(&info.limits)?);
        if !info.record.imports.is_empty() {
            print_list("component imports", &info.record.imports);
        }
        if info.record.is_instruction() && !m.body.is_empty() {
            println!("\n{}", clean(&m.body));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `skillhost skill run`.
fn run_skill(
    lib: &Library,
    name: String,
    params: Option<String>,
    pairs: Vec<String>,
    session: Option<String>,
    json: bool,
) -> Result<ExitCode> {
    let mut value = match &params {
        Some(arg) => super::params::parse_params(arg)?,
        None => json!({}),
    };
    if !pairs.is_empty() {
        let manifest = lib.info(&name)?.manifest;
        let extra = params_from_pairs(&manifest, &pairs).map_err(|e| UsageError(format!("{e:#}")))?;
        if let (Some(obj), Value::Object(more)) = (value.as_object_mut(), extra) {
            obj.extend(more);
        }
    }
    let mut opts = RunOptions::default();
    if let Some(s) = session {
        opts.session = s;
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let report = rt.block_on(lib.run(&name, value, &opts))?;
    if json {
        print_json(&report)?;
    } else {
        print_run(&report);
    }
    let ok = matches!(&report.outcome.result, Ok(o) if o.status == Status::Success);
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::from(3) })
}

/// `skillhost skill new`.
fn new_skill(
    name: String,
    lang: crate::authoring::GuestLang,
    dir: Option<PathBuf>,
    sdk: Option<PathBuf>,
    json: bool,
) -> Result<ExitCode> {
    let parent = dir.unwrap_or_else(|| PathBuf::from("."));
    let created =
        crate::authoring::new_skill(&parent, &name, lang, &sdk.unwrap_or_else(crate::authoring::default_sdk_path))?;
    if json {
        print_json(&json!({ "created": created }))?;
    } else {
        println!("created {}", created.display());
        println!(
            "next: skillhost skill build {0} && skillhost skill install {0} --yes && skillhost skill test {name} --cases {0}/cases.json",
            created.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `skillhost skill build`.
fn build(dir: PathBuf, json: bool) -> Result<ExitCode> {
    let wasm = crate::authoring::build(&dir)?;
    let size = std::fs::metadata(&wasm).map(|m| m.len()).unwrap_or(0);
    if json {
        print_json(&json!({ "component": wasm, "bytes": size }))?;
    } else {
        println!("built {} ({} KiB)", wasm.display(), size / 1024);
    }
    Ok(ExitCode::SUCCESS)
}

/// `skillhost skill test`.
fn test(lib: &Library, name: String, cases: PathBuf, json: bool) -> Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let results = rt.block_on(crate::authoring::test(lib, &name, &cases))?;
    let failed = results.iter().filter(|r| !r.passed).count();
    if json {
        print_json(&results)?;
    } else {
        println!("{:<4} {:<32} {:<15} {:>9}  detail", "", "case", "status", "us");
        for r in &results {
            println!(
                "{:<4} {:<32} {:<15} {:>9}  {}",
                if r.passed { "ok" } else { "FAIL" },
                one_line(&r.name, 32),
                r.status,
                r.elapsed_us,
                r.detail
            );
        }
        println!("{} passed, {} failed", results.len() - failed, failed);
    }
    Ok(if failed > 0 { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

/// `skillhost skill pack`.
fn pack(lib: &Library, dir: PathBuf, output: Option<PathBuf>, sign: Option<String>, json: bool) -> Result<ExitCode> {
    let manifest = crate::manifest::Manifest::load_dir(&dir).map_err(|e| anyhow!("{e}"))?;
    let out = output.unwrap_or_else(|| {
        let version = manifest.version.as_ref().map(|v| format!("-{v}")).unwrap_or_default();
        PathBuf::from(format!("{}{version}.skill", manifest.name))
    });
    let key = sign.as_deref().map(|n| crate::oci::keys::load_signing(lib.home(), n)).transpose()?;
    let sign = |b: &crate::bundle::BundleManifest| match &key {
        Some(k) => crate::oci::bundle::sign(&b.name, &b.digest(), k),
        None => Err(anyhow!("no key to sign with")),
    };
    let bundle = crate::bundle::pack_signed(&dir, &out, key.is_some().then_some(&sign as crate::bundle::Sign))?;
    let signer = key.as_ref().map(|k| k.public.fingerprint());
    if json {
        print_json(&json!({ "bundle": out, "manifest": bundle, "digest": bundle.digest(), "signer": signer }))?;
    } else {
        println!("packed {} ({} files) into {}", bundle.name, bundle.files.len(), out.display());
        println!("  content digest: {}", bundle.digest());
        match signer {
            Some(f) => println!(
                "  signed by {f}; installers trust it with `skillhost trust add bundle:{} KEY.pub`",
                bundle.name
            ),
            None => println!("  not signed (sign with --sign KEY)"),
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `skillhost skill lint`.
fn lint(path: PathBuf, agent_skills: bool, json: bool) -> Result<ExitCode> {
    let issues = crate::lint::lint_dir(&path, agent_skills);
    let errors = issues.iter().filter(|i| i.severity == crate::lint::Severity::Error).count();
    if json {
        print_json(&issues)?;
    } else if issues.is_empty() {
        println!("{}: ok", path.join("SKILL.md").display());
    } else {
        for i in &issues {
            println!("{i}");
        }
    }
    Ok(if errors > 0 { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

/// `skillhost skill import`.
fn import(lib: &Library, dir: PathBuf, json: bool) -> Result<ExitCode> {
    let results = lib.import(&dir)?;
    if json {
        print_json(&results)?;
    } else {
        for r in &results {
            let name = r.dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            match (&r.installed, &r.error) {
                (Some(rep), _) => println!("imported {name} ({})", rep.kind),
                (None, Some(e)) => println!("failed   {name}: {e}"),
                (None, None) => println!("skipped  {name}: lint errors"),
            }
            for i in &r.issues {
                println!("    {i}");
            }
            if !r.not_imported.is_empty() {
                println!("    not imported: {}", r.not_imported.join(", "));
            }
        }
    }
    let failed = results.iter().filter(|r| r.installed.is_none()).count();
    Ok(if failed > 0 { ExitCode::from(3) } else { ExitCode::SUCCESS })
}

/// `skillhost skill history`.
fn history(lib: &Library, name: String, json: bool) -> Result<ExitCode> {
    let entries = lib.history(&name)?;
    if json {
        print_json(&entries)?;
    } else {
        for e in &entries {
            println!(
                "{} {:<10} {}  {}",
                if e.installed { "*" } else { " " },
                e.version.as_deref().unwrap_or("-"),
                &e.content_hash[..16],
                if e.installed { "installed" } else { "archived" }
            );
            if !e.granted_then.is_empty() {
                println!("      granted when archived: {}", e.granted_then.join("; "));
            }
            for r in &e.added_rights {
                println!("      + {r}");
            }
            for r in &e.removed_rights {
                println!("      - {r}");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `skillhost skill rollback`.
fn rollback(lib: &Library, name: String, version: String, json: bool) -> Result<ExitCode> {
    let entry = lib.rollback(&name, &version)?;
    if json {
        print_json(&entry)?;
    } else {
        println!(
            "{name} rolled back to {} ({}); grants unchanged: rights it declares that you have not granted stay off",
            entry.version.as_deref().unwrap_or("-"),
            &entry.content_hash[..16]
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `skillhost skill update`.
fn update(
    lib: &Library,
    name: String,
    yes: bool,
    allow_unsigned: bool,
    allow_downgrade: bool,
    registry: super::oci::RegistryArgs,
    json: bool,
) -> Result<ExitCode> {
    let info = lib.info(&name)?;
    let Some(source) = info.record.source else {
        anyhow::bail!(
            "`{name}` has no recorded install source (it was installed before skillhost recorded one); reinstall it with `skillhost skill install DIR|FILE.skill|URL`"
        );
    };
    eprintln!("updating {name} from {source}");
    let install = SkillCmd::Install {
        dir: PathBuf::from(source),
        grants: Vec::new(),
        yes,
        allow_unsigned,
        allow_downgrade,
        registry,
    };
    skill(lib, install, json)
}

/// `skillhost skill push`.
fn push(
    lib: &Library,
    dir: PathBuf,
    reference: String,
    sign: Option<String>,
    registry: super::oci::RegistryArgs,
    json: bool,
) -> Result<ExitCode> {
    super::oci::push(lib, &dir, &reference, sign.as_deref(), &registry, json)
}

/// `skillhost skill remove`.
fn remove(lib: &Library, name: String, purge: bool, json: bool) -> Result<ExitCode> {
    lib.remove(&name, purge)?;
    if json {
        print_json(&json!({ "removed": name }))?;
    } else {
        println!("removed {name}");
    }
    Ok(ExitCode::SUCCESS)
}
