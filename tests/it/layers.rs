//! The layering `docs/ARCHITECTURE.md` draws, kept true: no cycle between the crate's
//! top-level modules, nothing below `api/` knows an HTTP status, and no source file
//! over 500 lines (tests aside). Read from the source, as a reviewer would.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::harness::rust_files;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Whether a file is a test (`tests.rs`, `*_tests.rs`, anything under a `tests/`).
fn is_test(rel: &Path) -> bool {
    rel.components().any(|c| c.as_os_str() == "tests")
        || rel
            .file_stem()
            .and_then(|s| s.to_str())
            .is_some_and(|s| s == "tests" || s.ends_with("_tests"))
}

/// `(top-level module, code)` of every non-test source file: comments and the inline
/// `#[cfg(test)] mod tests` dropped.
fn code_by_module() -> Vec<(String, PathBuf, String)> {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut out = Vec::new();
    for f in files {
        let rel = f.strip_prefix(src()).unwrap().to_path_buf();
        if is_test(&rel) {
            continue;
        }
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let module = first.trim_end_matches(".rs").to_string();
        if module == "lib" || module == "main" {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        let text = match text.find("#[cfg(test)]\nmod tests") {
            Some(i) => &text[..i],
            None => &text[..],
        };
        let code: String = text
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        out.push((module, rel, code));
    }
    out
}

/// Module → the top-level modules its code names as `crate::<name>`.
fn dependencies() -> BTreeMap<String, BTreeSet<String>> {
    let files = code_by_module();
    let modules: BTreeSet<String> = files.iter().map(|(m, _, _)| m.clone()).collect();
    let mut deps: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (m, _, code) in &files {
        let entry = deps.entry(m.clone()).or_default();
        for (i, _) in code.match_indices("crate::") {
            let name: String = code[i + "crate::".len()..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            if modules.contains(&name) && &name != m {
                entry.insert(name);
            }
        }
    }
    deps
}

/// A path `from` → … → `to` in `deps`, if any.
fn path(deps: &BTreeMap<String, BTreeSet<String>>, from: &str, to: &str) -> Option<Vec<String>> {
    let mut stack = vec![vec![from.to_string()]];
    let mut seen = BTreeSet::new();
    while let Some(p) = stack.pop() {
        let last = p.last().unwrap().clone();
        if last == to && p.len() > 1 {
            return Some(p);
        }
        if !seen.insert(last.clone()) {
            continue;
        }
        for next in deps.get(&last).into_iter().flatten() {
            let mut q = p.clone();
            q.push(next.clone());
            stack.push(q);
        }
    }
    None
}

#[test]
fn no_cycle_between_top_level_modules() {
    let deps = dependencies();
    assert!(
        deps.get("api").is_some_and(|d| d.contains("app")),
        "the scan found no api -> app edge: {deps:?}"
    );
    for m in deps.keys() {
        if let Some(cycle) = path(&deps, m, m) {
            panic!("module cycle: {}", cycle.join(" -> "));
        }
    }
}

#[test]
fn nothing_below_the_api_knows_an_http_status() {
    let below = ["app", "gateway", "tools", "token", "store", "sync", "audit"];
    for (m, rel, code) in code_by_module() {
        if below.contains(&m.as_str()) {
            assert!(
                !code.contains("StatusCode"),
                "src/{} names an HTTP status; map domain errors in api/",
                rel.display()
            );
        }
    }
}

#[test]
fn no_source_file_over_500_lines() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let long: Vec<String> = files
        .iter()
        .filter(|f| !is_test(f.strip_prefix(src()).unwrap()))
        .filter_map(|f| {
            let n = std::fs::read_to_string(f).unwrap().lines().count();
            (n > 500).then(|| format!("{} ({n} lines)", f.display()))
        })
        .collect();
    assert!(long.is_empty(), "split these by concern: {long:?}");
}

/// The two roles' domains stand apart: the node's (`app`) and the gateway's (`gateway`)
/// import neither each other nor the HTTP edge (`api`) nor the wiring (`roles`); what
/// both need lives below them (`daemon`, `store`, `envelope`, …).
#[test]
fn the_roles_domains_import_neither_each_other_nor_the_edge() {
    let deps = dependencies();
    assert!(
        deps.contains_key("app") && deps.contains_key("gateway"),
        "{deps:?}"
    );
    for (m, other) in [("app", "gateway"), ("gateway", "app")] {
        for f in [other, "api", "roles"] {
            assert!(
                !deps.get(m).is_some_and(|d| d.contains(f)),
                "src/{m} imports crate::{f}: {:?}",
                deps.get(m)
            );
        }
    }
}
