//! The documents agree with the product (issue 29: 10): the README's configuration
//! reference names every key the config parser accepts, the packaged configs set the
//! defaults they appear to set, and the documents cite only documents that exist.
//!
//! The keys are read from the source itself (`src/config/raw.rs`, the `Raw<Section>`
//! structs, and `src/tools/mod.rs`, `ExternalToolConfig`), so a key added there without
//! a line in the README fails here.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The `pub` field names of `pub struct NAME { … }` in `src`, in order.
fn struct_fields(src: &str, name: &str) -> Vec<String> {
    let head = format!("pub struct {name} {{");
    let body = src
        .split(&head)
        .nth(1)
        .unwrap_or_else(|| panic!("no `{head}`"))
        .split("\n}")
        .next()
        .unwrap();
    body.lines()
        .filter_map(|l| l.trim().strip_prefix("pub "))
        .filter_map(|l| l.split_once(':').map(|(f, _)| f.trim().to_string()))
        .collect()
}

/// Every `pub struct Raw<Section>` of raw.rs but `RawConfig`: (section, fields).
fn raw_sections(src: &str) -> Vec<(String, Vec<String>)> {
    src.split("pub struct Raw")
        .skip(1)
        .filter_map(|rest| rest.split_once(" {").map(|(n, _)| n.to_string()))
        .filter(|n| n != "Config")
        .map(|n| {
            let fields = struct_fields(src, &format!("Raw{n}"));
            (n.to_ascii_lowercase(), fields)
        })
        .collect()
}

/// The README documents `key` as `` `key` `` or, for a table of its own (such as
/// `queue.ttl_s`), as `` `key.<…>` ``.
fn documented(readme: &str, key: &str) -> bool {
    readme.contains(&format!("`{key}`")) || readme.contains(&format!("`{key}."))
}

#[test]
fn the_readme_config_table_lists_every_key() {
    let raw = read("src/config/raw.rs");
    let sections = raw_sections(&raw);
    // Each section of the file is one of these structs, or `tools`.
    let top: BTreeSet<String> = struct_fields(&raw, "RawConfig").into_iter().collect();
    let mut known: BTreeSet<String> = sections.iter().map(|(s, _)| s.clone()).collect();
    known.insert("tools".into());
    assert_eq!(
        top, known,
        "RawConfig's sections and the Raw<Section> structs differ: a new section needs its \
         struct named Raw<Section> (and its keys in the README)"
    );
    assert!(sections.len() >= 8, "{sections:?}");

    let readme = read("README.md");
    let reference = readme
        .split("## Configuration reference")
        .nth(1)
        .expect("README has a configuration reference");
    let mut missing = Vec::new();
    let mut count = 0;
    for (section, fields) in &sections {
        assert!(!fields.is_empty(), "no fields found in Raw{section}");
        for f in fields {
            count += 1;
            let key = format!("{section}.{f}");
            if !documented(reference, &key) {
                missing.push(key);
            }
        }
    }
    let tools = struct_fields(&read("src/tools/mod.rs"), "ExternalToolConfig");
    assert!(tools.contains(&"command".to_string()), "{tools:?}");
    for f in &tools {
        count += 1;
        let key = format!("tools[].{f}");
        if !documented(reference, &key) {
            missing.push(key);
        }
    }
    assert!(
        missing.is_empty(),
        "README.md \"Configuration reference\" lacks {} of {count} keys (add a row with \
         the default and what it does): {missing:?}",
        missing.len()
    );
}

/// The leaf keys of a TOML table, dotted (`queue.ttl_s.setpoint`).
fn leaves(t: &toml::Table, prefix: &str, out: &mut Vec<String>) {
    for (k, v) in t {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            toml::Value::Table(sub) => leaves(sub, &key, out),
            _ => out.push(key),
        }
    }
}

fn remove(t: &mut toml::Table, key: &str) {
    match key.split_once('.') {
        Some((head, rest)) => {
            if let Some(toml::Value::Table(sub)) = t.get_mut(head) {
                remove(sub, rest);
            }
        }
        None => {
            t.remove(key);
        }
    }
}

/// The resolved config, as text to compare.
fn resolved(t: &toml::Table) -> String {
    let text = toml::to_string(t).unwrap();
    format!(
        "{:?}",
        outpost::config::from_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
    )
}

/// Lines `# key = <number|true|false>` under a section header that is not itself
/// commented out: the default, shown for the operator to change. (section, key, value)
fn commented_defaults(text: &str) -> Vec<(String, String, String)> {
    let mut section: Option<String> = None;
    let mut out = Vec::new();
    for line in text.lines() {
        let l = line.trim();
        if l.starts_with('[') {
            section = Some(l.trim_matches(['[', ']']).to_string());
            continue;
        }
        if let Some(c) = l.strip_prefix('#') {
            let c = c.trim();
            if c.starts_with('[') {
                section = None; // an example section: its values are examples
                continue;
            }
            // Only plain sections ([api], not [queue.ttl_s]) carry such lines.
            let Some(sec) = section.as_ref().filter(|s| !s.contains('.')) else {
                continue;
            };
            let Some((k, v)) = c.split_once(" = ") else {
                continue;
            };
            let v = v.split('#').next().unwrap().trim();
            let k = k.trim();
            let plain = v.parse::<u64>().is_ok() || v == "true" || v == "false";
            if plain && !k.contains(' ') {
                out.push((sec.clone(), k.to_string(), v.to_string()));
            }
        }
    }
    out
}

/// Each key the packaged configs set, and each `# key = value` they show commented out,
/// is the default unless listed here as a deliberate choice of that file.
#[test]
fn the_packaged_configs_set_the_defaults() {
    let cases: [(&str, &[&str]); 2] = [
        (
            "packaging/outpost.toml",
            &["identity.node_id"], // every device sets its own
        ),
        (
            "packaging/gateway.toml",
            &[
                "identity.node_id",
                "identity.role",
                "identity.data_dir",     // the gateway unit's StateDirectory
                "queue.max_store_bytes", // 1 GiB: every node's queue
            ],
        ),
    ];
    for (file, chosen) in cases {
        let text = read(file);
        let table: toml::Table = text.parse().unwrap_or_else(|e| panic!("{file}: {e}"));
        let whole = resolved(&table);
        let mut keys = Vec::new();
        leaves(&table, "", &mut keys);
        assert!(keys.len() >= 8, "{file}: {keys:?}");
        for key in keys.iter().filter(|k| !chosen.contains(&k.as_str())) {
            let mut without = table.clone();
            remove(&mut without, key);
            assert_eq!(
                resolved(&without),
                whole,
                "{file}: {key} is not the default; make it the default, or say why it differs \
                 (and list it in this test)"
            );
        }
        for (section, key, value) in commented_defaults(&text) {
            let mut with = table.clone();
            let toml::Value::Table(sec) = with
                .entry(section.clone())
                .or_insert(toml::Value::Table(Default::default()))
            else {
                panic!("{file}: [{section}] is not a table")
            };
            let v: toml::Value =
                format!("v = {value}").parse::<toml::Table>().unwrap()["v"].clone();
            sec.insert(key.clone(), v);
            assert_eq!(
                resolved(&with),
                whole,
                "{file}: `# {key} = {value}` in [{section}] reads as the default but is not"
            );
        }
    }
}

/// `outpost config check` accepts both packaged configs as shipped.
#[test]
fn config_check_accepts_the_packaged_configs() {
    for file in ["packaging/outpost.toml", "packaging/gateway.toml"] {
        let path = repo().join(file);
        let o = crate::harness::outpost(&["config", "check", "--config", path.to_str().unwrap()]);
        assert!(
            o.status.success(),
            "{file}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

/// The user-facing documents: the README, docs/*.md but the measurement and decision
/// records, and the packaged configs.
fn user_docs() -> Vec<PathBuf> {
    let mut files = vec![
        repo().join("README.md"),
        repo().join("packaging/outpost.toml"),
        repo().join("packaging/gateway.toml"),
    ];
    for e in std::fs::read_dir(repo().join("docs")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "md") {
            files.push(p);
        }
    }
    files
}

/// Every `docs/NAME.md` a document cites is in the repository.
#[test]
fn the_documents_cite_only_documents_that_exist() {
    let mut missing = Vec::new();
    for f in user_docs() {
        let text = std::fs::read_to_string(&f).unwrap();
        for (i, _) in text.match_indices("docs/") {
            let rest = &text[i..];
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || "/._-".contains(c)))
                .unwrap_or(rest.len());
            let cited = rest[..end].trim_end_matches('.');
            if cited.ends_with(".md") && !Path::new(&repo().join(cited)).exists() {
                missing.push(format!("{}: {cited}", f.display()));
            }
        }
        assert!(
            !text.contains("SPEC §"),
            "{} cites a SPEC the repository does not have",
            f.display()
        );
    }
    assert!(missing.is_empty(), "{missing:?}");
}

/// The documents an operator follows describe the product as it is, not the history
/// of its making ("session N").
#[test]
fn the_operator_documents_have_no_history_wording() {
    for rel in [
        "README.md",
        "docs/INSTALL.md",
        "docs/OPERATIONS.md",
        "docs/GATEWAY.md",
        "docs/ARCHITECTURE.md",
        "docs/PROTOCOL.md",
        "docs/DEVIATIONS.md",
    ] {
        let text = read(rel).to_ascii_lowercase();
        for (i, _) in text.match_indices("session ") {
            let after = &text[i + "session ".len()..];
            assert!(
                !after.starts_with(|c: char| c.is_ascii_digit()),
                "{rel}: history wording: {:?}",
                text.get(i.saturating_sub(40)..(i + 40).min(text.len()))
            );
        }
    }
}
