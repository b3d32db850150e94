//! Every `tests/*.rs` is a test binary and every `host/benches/*.rs` a benchmark. The tests live
//! outside the package directory, where cargo does not discover them, so host/Cargo.toml lists
//! each by hand; a file without its `[[test]]` entry would be a test that never runs, so this
//! one (run by `cargo test`, hence by `just test`) fails naming the entry to add.

use std::collections::BTreeSet;
use std::path::Path;

/// The `path`s of `host/Cargo.toml`'s `[[kind]]` entries (cargo's default when none is given).
fn listed(manifest: &toml::Table, kind: &str) -> BTreeSet<String> {
    let entries = manifest.get(kind).and_then(toml::Value::as_array).cloned().unwrap_or_default();
    entries
        .iter()
        .map(|e| {
            let name = e["name"].as_str().expect("every entry has a name");
            e.get("path")
                .and_then(toml::Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| format!("{}/{name}.rs", if kind == "bench" { "benches" } else { "tests" }))
        })
        .collect()
}

/// The `.rs` files directly in `dir`, as `prefix` + file name.
fn files(dir: &Path, prefix: &str) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".rs"))
        .map(|n| format!("{prefix}{n}"))
        .collect()
}

#[test]
fn every_test_and_bench_file_has_its_cargo_entry() {
    let host = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest: toml::Table = toml::from_str(&std::fs::read_to_string(host.join("Cargo.toml")).unwrap()).unwrap();
    for (kind, dir, prefix) in
        [("test", host.join("../tests"), "../tests/"), ("bench", host.join("benches"), "benches/")]
    {
        let on_disk = files(&dir, prefix);
        let entries = listed(&manifest, kind);
        assert!(on_disk.len() >= 2, "found only {on_disk:?} in {}", dir.display());
        let missing: Vec<_> = on_disk.difference(&entries).collect();
        assert!(
            missing.is_empty(),
            "host/Cargo.toml has no [[{kind}]] entry for {missing:?}, so cargo never builds or runs it: add\n{}",
            missing
                .iter()
                .map(|p| format!(
                    "[[{kind}]]\nname = \"{}\"\npath = \"{p}\"\n",
                    Path::new(p).file_stem().unwrap().to_string_lossy()
                ))
                .collect::<String>()
        );
        let stale: Vec<_> = entries.difference(&on_disk).collect();
        assert!(stale.is_empty(), "host/Cargo.toml lists [[{kind}]] files that do not exist: {stale:?}");
    }
}
