//! README claims that can drift from the code, checked against it.

use std::collections::BTreeSet;

fn file(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// The lines of `Cargo.toml`'s `[name]` section.
fn cargo_section(name: &str) -> String {
    between(&file("Cargo.toml"), &format!("\n[{name}]\n"), "\n[").to_owned()
}

/// The features `Cargo.toml` declares, but `fuzzing` (not a stable API).
fn cargo_features() -> BTreeSet<String> {
    cargo_section("features")
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| l.split_once('=').map(|(name, _)| name.trim().to_owned()))
        .filter(|name| !name.is_empty() && name != "fuzzing" && name != "default")
        .collect()
}

/// The part of `text` after the first `start`, up to the next `end`.
fn between<'a>(text: &'a str, start: &str, end: &str) -> &'a str {
    let after = text
        .split_once(start)
        .unwrap_or_else(|| panic!("no {start:?}"))
        .1;
    after.split(end).next().unwrap_or_default()
}

/// The features the README's Install table describes.
fn readme_features() -> BTreeSet<String> {
    between(&file("README.md"), "\n## Install\n", "\n## ")
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

/// The README's fenced blocks: (line of the opening fence, info string, body lines).
fn readme_blocks() -> Vec<(usize, String, Vec<String>)> {
    let readme = file("README.md");
    let mut blocks = Vec::new();
    let mut open: Option<(usize, String, Vec<String>)> = None;
    for (n, line) in readme.lines().enumerate() {
        match (&mut open, line.strip_prefix("```")) {
            (None, Some(info)) => open = Some((n + 1, info.trim().to_owned(), Vec::new())),
            (Some(_), Some("")) => blocks.extend(open.take()),
            (Some((_, _, body)), _) => body.push(line.to_owned()),
            (None, None) => {}
        }
    }
    assert!(open.is_none(), "a fence is not closed");
    blocks
}

/// GitHub shows rustdoc's hidden lines (`# ...`) as code, so a reader who copies a
/// block would get lines that are not Rust, or miss the ones hidden: a Rust block
/// shows all of itself, and is a whole program (compiled, and run unless `no_run`,
/// by `cargo test --all-features`: src/lib.rs includes the README as doc tests).
#[test]
fn every_rust_block_in_the_readme_is_a_whole_program_with_nothing_hidden() {
    let blocks: Vec<_> = readme_blocks()
        .into_iter()
        .filter(|(_, info, _)| info.starts_with("rust"))
        .collect();
    assert!(
        blocks.len() >= 6,
        "the README's Rust blocks: {}",
        blocks.len()
    );
    for (line, info, body) in &blocks {
        // Compiled by rustdoc: `ignore` would skip one, and `text` hides none from it.
        assert!(
            info == "rust" || info == "rust,no_run",
            "README.md:{line}: ```{info} is not compiled as shown"
        );
        for (i, l) in body.iter().enumerate() {
            let t = l.trim_start();
            assert!(
                !(t == "#" || t.starts_with("# ")),
                "README.md:{}: a line rustdoc hides and GitHub shows: {l}",
                line + 1 + i
            );
        }
        assert!(
            body.iter().any(|l| l.contains("fn main()")),
            "README.md:{line}: not a whole program (no fn main)"
        );
    }
    let lib = file("src/lib.rs");
    assert!(
        lib.contains(r#"#[doc = include_str!("../README.md")]"#),
        "src/lib.rs no longer compiles the README as doc tests"
    );
}

/// The required (not optional) dependencies `Cargo.toml` declares.
fn cargo_required_dependencies() -> BTreeSet<String> {
    cargo_section("dependencies")
        .lines()
        .filter(|l| !l.trim_start().starts_with('#') && !l.contains("optional = true"))
        .filter_map(|l| l.split_once('=').map(|(name, _)| name.trim().to_owned()))
        .filter(|name| !name.is_empty())
        .collect()
}

#[test]
fn the_install_section_names_every_required_dependency_and_no_other() {
    let readme = file("README.md");
    let sentence = between(
        &readme,
        "Without features the crate needs ",
        ", and nothing else.",
    );
    let named: BTreeSet<String> = sentence
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect();
    assert_eq!(named, cargo_required_dependencies());
}
