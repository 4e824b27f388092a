//! The README as a newcomer meets it (issue 38: 14): the by-hand block's `outpost` is
//! on the PATH only if the README says how, the first build's minutes are announced,
//! and a `SKIPPED` line always names something this machine lacks (a test skipped by
//! design on one engine is not printed as if the machine were at fault).

use std::path::PathBuf;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The text of README's section `title` up to the next `## `.
fn section(readme: &str, title: &str) -> String {
    let start = readme
        .find(&format!("\n## {title}\n"))
        .unwrap_or_else(|| panic!("no section {title}"));
    let rest = &readme[start + 1..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |i| i + 3);
    rest[..end].to_string()
}

#[test]
fn the_readme_says_how_outpost_gets_on_the_path_and_how_long_the_first_build_takes() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let by_hand = section(&readme, "A gateway and a node by hand");
    let before_block = by_hand.split("```sh").next().unwrap();
    assert!(
        before_block.contains("cargo install --path")
            && before_block.contains("target/release/outpost"),
        "the by-hand block calls `outpost` without saying how to install it:\n{before_block}"
    );
    let quick = section(&readme, "Quick start");
    assert!(
        quick.contains("minutes"),
        "the quick start does not say how long the first build takes"
    );
}

#[test]
fn skipped_lines_name_what_the_machine_lacks_not_a_design_choice() {
    let mut files = Vec::new();
    crate::harness::rust_files(&repo().join("tests/it"), &mut files);
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            if !l.contains("harness::skipped(") {
                continue;
            }
            let before = &lines[i.saturating_sub(6)..i];
            assert!(
                !before.iter().any(|b| b.contains("GATEWAY_ENGINE ==")),
                "{}:{}: a skip by design (one gateway engine) printed as SKIPPED",
                f.display(),
                i + 1
            );
        }
    }
}
