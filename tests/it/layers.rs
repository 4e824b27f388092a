//! The layering `docs/ARCHITECTURE.md` draws, kept true: no cycle between the crate's
//! top-level modules, nothing below `api/` knows an HTTP status, no source file over
//! 500 lines and no function over 80 (tests aside); inside the gateway, no cycle between
//! files, a storage that imports no flow, and leaves (the event bus, the enrollment
//! admission, the per-source budgets) that import nothing above them. Read from the
//! source, as a reviewer would.

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

/// Longest span a function may have (from its `fn` line to its closing brace): what a
/// reader scrolls, doc comment aside.
const MAX_FN_LINES: usize = 80;

/// Whether an attribute line turns the item under it into test code.
fn is_test_attr(line: &str) -> bool {
    let t = line.trim();
    t == "#[cfg(test)]" || t.starts_with("#[cfg(all(test,")
}

/// Whether a line opens a function (`pub(crate) async fn name…`), and its name.
fn fn_name(line: &str) -> Option<&str> {
    let mut rest = line.trim_start();
    loop {
        let before = rest;
        for q in ["pub ", "const ", "async ", "unsafe "] {
            rest = rest.strip_prefix(q).unwrap_or(rest);
        }
        if rest.starts_with("pub(") {
            rest = rest[rest.find(") ")? + 2..].trim_start();
        }
        if rest.starts_with("extern \"") {
            rest = rest[rest[8..].find('"')? + 9..].trim_start();
        }
        if rest == before {
            break;
        }
    }
    let name = rest.strip_prefix("fn ")?;
    let end = name.find(|c: char| !(c.is_alphanumeric() || c == '_'))?;
    (end > 0).then(|| &name[..end])
}

/// The line (index) of the brace that closes the item opening at `start`: the first
/// later line at the item's own indentation that starts with `}`, as rustfmt lays it
/// out. Braces inside strings and comments never count, as no brace is counted.
fn closing_line(lines: &[&str], start: usize) -> Option<usize> {
    let indent = |l: &str| l.len() - l.trim_start().len();
    let at = indent(lines[start]);
    (start + 1..lines.len()).find(|&i| indent(lines[i]) == at && lines[i].trim().starts_with('}'))
}

/// `(first line, span, name)` of every function of one file's text with a body, test
/// code (`#[cfg(test)]` items, to their closing brace) skipped. Nested functions and
/// methods count on their own.
fn function_spans(text: &str) -> Vec<(usize, usize, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if is_test_attr(lines[i]) {
            // The item under the attribute (past any further attributes), to its
            // closing brace or the end of its line.
            let mut item = i + 1;
            while item < lines.len() && lines[item].trim_start().starts_with("#[") {
                item += 1;
            }
            let head = head_end(&lines, item);
            i = match head {
                Some((_, true)) => closing_line(&lines, item).unwrap_or(lines.len()),
                Some((k, false)) => k,
                None => lines.len(),
            } + 1;
            continue;
        }
        if let Some(name) = fn_name(lines[i]) {
            if let (Some((_, true)), Some(end)) = (head_end(&lines, i), closing_line(&lines, i)) {
                out.push((i + 1, end - i + 1, name.to_string()));
            }
        }
        i += 1;
    }
    out
}

/// Where the head of the item opening at `start` ends, and whether a body follows: a
/// head ending with `{` opens one; one ending with `;` is all there is (a trait's
/// method without a default, `mod tests;`), as is `{}` on the line.
fn head_end(lines: &[&str], start: usize) -> Option<(usize, bool)> {
    (start..lines.len()).find_map(|k| {
        let t = lines[k].trim_end();
        (t.ends_with('{') || t.ends_with(';') || t.ends_with('}')).then(|| (k, t.ends_with('{')))
    })
}

/// Functions that fit on a screen (STYLE.md): no non-test function spans more than
/// [`MAX_FN_LINES`] lines from its `fn` line to its closing brace. Split a longer one
/// by concern into named helpers.
#[test]
fn no_function_over_80_lines() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    files.sort();
    let mut seen = 0;
    let mut long = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(src()).unwrap();
        if is_test(rel) {
            continue;
        }
        for (line, span, name) in function_spans(&std::fs::read_to_string(f).unwrap()) {
            seen += 1;
            if span > MAX_FN_LINES {
                long.push(format!(
                    "src/{}:{line} {name} ({span} lines)",
                    rel.display()
                ));
            }
        }
    }
    assert!(seen > 1000, "the scan found only {seen} functions");
    assert!(
        long.is_empty(),
        "functions over {MAX_FN_LINES} lines; split them by concern: {long:#?}"
    );
}

/// The span scan reads a function as rustfmt lays it out: braces in strings and
/// comments, nested functions, declarations without a body and test modules do not
/// mislead it.
#[test]
fn the_function_scan_reads_rustfmt_layout() {
    let text = r#"
pub(crate) async fn outer(x: u32) -> u32 {
    let s = "} not a brace";
    // } neither
    fn inner() {
        let _ = '}';
    }
    x
}
trait T {
    fn declared(&self);
    fn defaulted(&self) {}
}
impl S {
    pub fn method<'a>(
        &self,
    ) -> &'a str
    where
        Self: Sized,
    {
        ""
    }
}
#[cfg(test)]
mod tests {
    fn in_a_test() {
        body();
    }
}
"#;
    let want: Vec<(usize, usize, String)> = [(2, 8, "outer"), (5, 3, "inner"), (15, 8, "method")]
        .into_iter()
        .map(|(line, span, name)| (line, span, name.to_string()))
        .collect();
    assert_eq!(function_spans(text), want);
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

/// The module path of a source file: `gateway/storage/mod.rs` → `gateway::storage`,
/// `gateway/enroll.rs` → `gateway::enroll`.
fn module_of(rel: &Path) -> Vec<String> {
    let mut m: Vec<String> = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if m.last().is_some_and(|l| l == "mod") {
        m.pop();
    }
    m
}

/// A file's code without comments and without its inline test modules
/// (`#[cfg(test)] mod name { … }`, to its closing brace).
fn code_of(text: &str) -> String {
    let code: String = text
        .lines()
        .map(|l| match l.find("//") {
            Some(i) if !l[..i].contains('"') => &l[..i],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = String::new();
    let mut rest = &code[..];
    while let Some(at) = rest.find("#[cfg(test)]\nmod ") {
        let head_end = rest[at..].find(['{', ';']).map_or(rest.len(), |n| at + n);
        if !rest[head_end..].starts_with('{') {
            out.push_str(&rest[..head_end]);
            rest = &rest[head_end..];
            continue;
        }
        out.push_str(&rest[..at]);
        let mut depth = 0usize;
        let mut end = rest.len();
        let mut in_str = false;
        let mut prev = ' ';
        for (i, c) in rest[head_end..].char_indices() {
            let quoted = prev == '\'' && rest[head_end + i + 1..].starts_with('\'');
            prev = c;
            match c {
                _ if quoted => {}
                '"' if !rest[..head_end + i].ends_with('\\') => in_str = !in_str,
                _ if in_str => {}
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = head_end + i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// The paths of one `use` tree (`a::{b, c::{d as e}}` → `a::b`, `a::c::d`).
fn expand_use(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let path = tree.split(" as ").next().unwrap().trim();
        return vec![path.trim_end_matches("::self").to_string()];
    };
    let prefix = tree[..open].trim_end_matches("::").trim();
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let (mut depth, mut start, mut parts) = (0, 0, Vec::new());
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|p| !p.trim().is_empty())
        .flat_map(expand_use)
        .map(|p| match p.as_str() {
            "self" => prefix.to_string(),
            _ => format!("{prefix}::{p}"),
        })
        .collect()
}

/// Every path a file's code names (its `use` trees expanded, and the `crate::`,
/// `super::` and `self::` paths written inline), as segments from the crate root.
fn named_paths(module: &[String], code: &str) -> Vec<Vec<String>> {
    let mut raw: Vec<String> = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("use ") {
        let boundary = i == 0
            || !rest.as_bytes()[i - 1].is_ascii_alphanumeric() && rest.as_bytes()[i - 1] != b'_';
        let Some(end) = rest[i..].find(';') else {
            break;
        };
        if boundary {
            raw.extend(expand_use(&rest[i + 4..i + end]));
        }
        rest = &rest[i + 4..];
    }
    let bytes = code.as_bytes();
    for root in ["crate::", "super::", "self::"] {
        for (i, _) in code.match_indices(root) {
            if i > 0 && (bytes[i - 1].is_ascii_alphanumeric() || b"_:".contains(&bytes[i - 1])) {
                continue;
            }
            // `pub(in crate::gateway)` names a visibility, not an import.
            if code[..i].ends_with("(in ") {
                continue;
            }
            let path: String = code[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            // `use super::{…}`: the tree is expanded above.
            if !path.ends_with("::") {
                raw.push(path);
            }
        }
    }
    raw.into_iter()
        .filter_map(|p| {
            let segs: Vec<&str> = p.split("::").filter(|s| !s.is_empty()).collect();
            let mut at: Vec<String> = module.to_vec();
            let mut rest = &segs[..];
            match rest.first() {
                Some(&"crate") => {
                    at.clear();
                    rest = &rest[1..];
                }
                Some(&"self") => rest = &rest[1..],
                Some(&"super") => {
                    while rest.first() == Some(&"super") {
                        at.pop()?;
                        rest = &rest[1..];
                    }
                }
                // A child module named without `self::` (in a `use` only).
                Some(_) => {}
                None => return None,
            }
            at.extend(rest.iter().map(|s| s.to_string()));
            Some(at)
        })
        .collect()
}

/// File → the other files of `under` (`src/<under>/…`) its code names: each named path
/// goes to the file of its longest prefix that is a module. A module naming its own
/// submodules (declaring, re-exporting them) is its structure, not an import.
fn file_imports(under: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(&src().join(under), &mut files);
    let mut by_module: BTreeMap<Vec<String>, String> = BTreeMap::new();
    let mut texts = Vec::new();
    for f in files {
        let rel = f.strip_prefix(src()).unwrap().to_path_buf();
        if is_test(&rel) {
            continue;
        }
        let module = module_of(&rel);
        by_module.insert(module.clone(), rel.display().to_string());
        texts.push((module, rel, code_of(&std::fs::read_to_string(&f).unwrap())));
    }
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, rel, code) in &texts {
        let entry = out.entry(rel.display().to_string()).or_default();
        for path in named_paths(module, code) {
            let Some(target) = (1..=path.len())
                .rev()
                .find(|n| by_module.contains_key(&path[..*n]))
                .map(|n| &path[..n])
            else {
                continue;
            };
            if target.starts_with(module) {
                continue;
            }
            entry.insert(by_module[target].clone());
        }
    }
    out
}

/// The gateway's files depend on each other one way: no file reaches itself through
/// others (a circle of files is one module split by lines, not by concern).
#[test]
fn no_file_cycle_inside_the_gateway() {
    let deps = file_imports("gateway");
    assert!(
        deps.get("gateway/commands/mod.rs")
            .is_some_and(|d| d.contains("gateway/storage/mod.rs")),
        "the scan found no commands -> storage edge: {deps:?}"
    );
    let cycles: Vec<String> = deps
        .keys()
        .filter_map(|f| path(&deps, f, f))
        .map(|c| c.join(" -> "))
        .collect();
    assert!(cycles.is_empty(), "file cycles in src/gateway: {cycles:#?}");
}

/// The gateway's storage is below every flow: its contract and both engines name
/// nothing of `gateway/` outside `gateway/storage/` (record types live with the
/// contract).
#[test]
fn the_gateway_storage_imports_no_flow() {
    let deps = file_imports("gateway");
    let up: Vec<String> = deps
        .iter()
        .filter(|(f, _)| f.starts_with("gateway/storage/"))
        .flat_map(|(f, to)| {
            to.iter()
                .filter(|t| !t.starts_with("gateway/storage/"))
                .map(move |t| format!("{f} -> {t}"))
        })
        .collect();
    assert!(up.is_empty(), "gateway/storage imports from above: {up:#?}");
}

/// The leaves of the gateway (the event bus and its kinds, the enrollment admission and
/// its decision slots, the per-source
/// budgets, liveness's pure rules, the state node authentication, audit sync and
/// liveness own) name nothing of
/// `gateway/` but the storage below them and each other: `Gateway` holds them without
/// a cycle.
#[test]
fn the_gateway_leaves_import_nothing_above_them() {
    let deps = file_imports("gateway");
    let leaves = [
        "gateway/events.rs",
        "gateway/event_kinds.rs",
        "gateway/enroll/admission.rs",
        "gateway/enroll/slots.rs",
        "gateway/source_budget.rs",
        "gateway/node_auth/replays.rs",
        "gateway/audit_sync/frontiers.rs",
        "gateway/live/table.rs",
        "gateway/liveness.rs",
    ];
    for leaf in leaves {
        let up: Vec<&String> = deps[leaf]
            .iter()
            .filter(|t| !t.starts_with("gateway/storage/") && !leaves.contains(&t.as_str()))
            .collect();
        assert!(up.is_empty(), "{leaf} imports from above it: {up:?}");
    }
}

/// The engine is chosen once (issue 34): where one process and replicas behave
/// differently, the service got its body for the mode when `Gateway` was built; no flow
/// asks the state whether replicas share it.
#[test]
fn no_gateway_flow_asks_which_engine_is_underneath() {
    let asking: Vec<String> = code_by_module()
        .into_iter()
        .filter(|(m, rel, code)| {
            m == "gateway" && !rel.starts_with("gateway/storage") && code.contains(".replicas()")
        })
        .map(|(_, rel, _)| rel.display().to_string())
        .collect();
    assert!(
        asking.is_empty(),
        "flows asking for the replicas: {asking:?}"
    );
}
