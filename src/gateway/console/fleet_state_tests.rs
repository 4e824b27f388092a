use super::*;
use serde_json::json;

#[test]
fn a_blank_selector_selects_all_and_a_bad_one_names_its_position() {
    assert_eq!(parse_selector("  "), Ok(None));
    assert!(parse_selector("site=north").unwrap().is_some());
    let e = parse_selector("site=north,,x").unwrap_err();
    assert_eq!(e.pos, 11, "{e}");
    assert!(e.to_string().contains("at character 11"), "{e}");
}

#[test]
fn the_label_form_is_one_set_or_one_removal() {
    let c = label_change("set", " site ", " north ").unwrap();
    assert_eq!(c.set.get("site").map(String::as_str), Some("north"));
    assert!(c.remove.is_empty());
    let c = label_change("remove", "site", "ignored").unwrap();
    assert_eq!(c.remove, vec!["site".to_string()]);
    assert!(c.set.is_empty());
    assert!(label_change("set", " ", "x").is_err());
    assert!(label_change("drop", "site", "").is_err());
    // The key's own rules are the flow's: this change is refused there, not here.
    assert!(label_change("set", "Site", "x").is_ok());
}

#[test]
fn the_desired_form_reads_a_document_a_mode_and_a_version() {
    let (w, m) = desired_write("replace", r#"{"fan": 1}"#, "").unwrap();
    assert_eq!((w, m), (Write::Replace(json!({"fan": 1})), None));
    let (w, m) = desired_write("merge", r#"{"fan": null}"#, " 3 ").unwrap();
    assert_eq!((w, m), (Write::Merge(json!({"fan": null})), Some(3)));
    assert!(desired_write("replace", "{fan", "")
        .unwrap_err()
        .contains("not JSON"));
    assert!(desired_write("replace", "{}", "v3")
        .unwrap_err()
        .contains("If-Match"));
    assert!(desired_write("put", "{}", "").is_err());
}

#[test]
fn sizes_read_in_binary_units() {
    assert_eq!(bytes(0), "0 B");
    assert_eq!(bytes(1023), "1023 B");
    assert_eq!(bytes(1536), "1.5 KiB");
    assert_eq!(bytes(3 * 1024 * 1024 * 1024), "3.0 GiB");
}

#[test]
fn an_inventory_lists_every_fact_and_dashes_what_is_unknown() {
    let mut inv = Inventory {
        agent_version: "0.9.1".into(),
        arch: "aarch64".into(),
        data_free_bytes: Some(2048),
        clock_synchronized: Some(true),
        tools: vec!["echo".into(), "sysinfo".into()],
        ..Inventory::default()
    };
    inv.facts.insert("rack".into(), "7".into());
    let facts = inventory_facts(&inv);
    let text = |name: &str| {
        facts.iter().find_map(|f| match f {
            Fact::Text(n, v) if *n == name => Some(v.clone()),
            _ => None,
        })
    };
    assert_eq!(facts.len(), 13);
    assert_eq!(text("Agent version").as_deref(), Some("0.9.1"));
    assert_eq!(text("OS").as_deref(), Some("—"));
    assert_eq!(text("Free disk").as_deref(), Some("2.0 KiB"));
    assert_eq!(text("Clock synchronised").as_deref(), Some("yes"));
    assert_eq!(text("Tools").as_deref(), Some("echo, sysinfo"));
    assert_eq!(text("Operator facts").as_deref(), Some("rack=7"));
}

#[test]
fn long_documents_are_cut_on_a_character_boundary() {
    let v = json!({"k": "é".repeat(100)});
    let s = pretty_cut(&v, 20);
    assert!(s.contains("… (cut"), "{s}");
    assert!(pretty_cut(&json!({"a": 1}), 100).starts_with("{\n  \"a\": 1\n}"));
}
