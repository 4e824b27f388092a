//! `[inventory]`: what a node says about itself beyond what it reads (operator facts,
//! PROTOCOL §16.3).

use std::collections::BTreeMap;

use super::raw::RawInventory;
use crate::fleet::inventory::{check_fact, MAX_FACTS};

/// The resolved `[inventory]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FleetConfig {
    pub facts: BTreeMap<String, String>,
}

/// Each bad fact named; at most [`MAX_FACTS`].
pub fn check(inv: &RawInventory, errs: &mut Vec<String>) -> FleetConfig {
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
    FleetConfig { facts }
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
        assert!(from_str(&format!("{BASE}[state]\napply_tool = \"x\"\n")).is_err());
    }
}
