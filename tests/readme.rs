//! README claims that can drift from the code, checked against it.

use std::collections::BTreeSet;

fn file(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// The features `Cargo.toml` declares, but `fuzzing` (not a stable API).
fn cargo_features() -> BTreeSet<String> {
    let toml = file("Cargo.toml");
    let section = toml
        .split("\n[features]\n")
        .nth(1)
        .expect("a [features] section")
        .split("\n[")
        .next()
        .unwrap_or_default();
    section
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| l.split_once('=').map(|(name, _)| name.trim().to_owned()))
        .filter(|name| !name.is_empty() && name != "fuzzing" && name != "default")
        .collect()
}

/// The features the README's Install table describes.
fn readme_features() -> BTreeSet<String> {
    let readme = file("README.md");
    let install = readme
        .split("\n## Install\n")
        .nth(1)
        .expect("an Install section")
        .split("\n## ")
        .next()
        .unwrap_or_default();
    install
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once("` |").map(|(name, _)| name.to_owned()))
        .collect()
}

#[test]
fn the_install_section_describes_every_feature_and_no_other() {
    assert_eq!(readme_features(), cargo_features());
}

#[test]
fn the_install_section_names_this_version() {
    let toml = file("Cargo.toml");
    let version = toml
        .lines()
        .find_map(|l| l.strip_prefix("version = \""))
        .and_then(|v| v.split('"').next())
        .expect("a version");
    let minor: Vec<&str> = version.split('.').take(2).collect();
    let line = format!("jsonrpc-peer = \"{}\"", minor.join("."));
    assert!(file("README.md").contains(&line), "README lacks {line}");
}
