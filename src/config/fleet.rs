//! `[inventory]` and `[state]`: what a node says about itself beyond what it reads
//! (operator facts, PROTOCOL §16.3) and how it applies desired state (§16.4).

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::fleet::inventory::{check_fact, MAX_FACTS};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawInventory {
    /// Static facts the node reports in its inventory (`firmware = "2.4.1"`).
    pub facts: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawState {
    /// A tool run with each new desired version (its object result is merged into the
    /// reported state).
    pub apply_tool: Option<String>,
}

/// The resolved `[inventory]` and `[state]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FleetConfig {
    pub facts: BTreeMap<String, String>,
    pub apply_tool: Option<String>,
}

/// Each bad fact named; at most [`MAX_FACTS`]; `apply_tool` a tool name.
pub fn check(inv: &RawInventory, state: &RawState, errs: &mut Vec<String>) -> FleetConfig {
    let facts = inv.facts.clone().unwrap_or_default();
    if facts.len() > MAX_FACTS {
        errs.push(format!(
            "inventory.facts: {} facts, at most {MAX_FACTS}",
            facts.len()
        ));
    }
    for (name, value) in &facts {
        if let Err(e) = check_fact(name, value) {
            errs.push(format!("inventory.facts.{name}: {e}"));
        }
    }
    if let Some(t) = &state.apply_tool {
        if !crate::tools::valid_tool_name(t) {
            errs.push(format!(
                "state.apply_tool {t:?} must be a tool name ([a-z][a-z0-9_]{{0,63}})"
            ));
        }
    }
    FleetConfig {
        facts,
        apply_tool: state.apply_tool.clone(),
    }
}

#[cfg(test)]
mod tests {
    use crate::config::from_str;

    const BASE: &str = "[identity]\nnode_id = \"node:a\"\n";

    #[test]
    fn facts_are_read_and_checked() {
        let c = from_str(&format!(
            "{BASE}[inventory]\nfacts = {{ firmware = \"2.4.1\" }}\n"
        ))
        .unwrap();
        assert_eq!(
            c.fleet.facts.get("firmware").map(String::as_str),
            Some("2.4.1")
        );
        assert_eq!(from_str(BASE).unwrap().fleet.facts.len(), 0);

        let e = from_str(&format!(
            "{BASE}[inventory]\nfacts = {{ Firmware = \"x\", os = \"y\", ok = \"z\" }}\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(e.contains("inventory.facts.Firmware"), "{e}");
        assert!(e.contains("inventory.facts.os"), "{e}");
        assert!(!e.contains("inventory.facts.ok"), "{e}");

        let many: Vec<String> = (0..33).map(|i| format!("f{i} = \"v\"")).collect();
        let e = from_str(&format!("{BASE}[inventory.facts]\n{}\n", many.join("\n")))
            .unwrap_err()
            .to_string();
        assert!(e.contains("33 facts, at most 32"), "{e}");
        assert!(from_str(&format!("{BASE}[inventory]\nother = 1\n")).is_err());
    }

    #[test]
    fn apply_tool_is_a_tool_name() {
        let c = from_str(&format!("{BASE}[state]\napply_tool = \"apply_fan\"\n")).unwrap();
        assert_eq!(c.fleet.apply_tool.as_deref(), Some("apply_fan"));
        let e = from_str(&format!("{BASE}[state]\napply_tool = \"Bad Name\"\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("state.apply_tool"), "{e}");
    }
}
