//! What a node reports about itself (PROTOCOL §16.3): its inventory. The type both roles
//! share, the names selectors use for its facts (`inventory.<fact>`), the checks the
//! gateway applies to what a node sends, and when a new reading is worth sending. Pure:
//! the node reads the facts at its edge (`app::inventory`), the gateway stores them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::labels::check_key;

/// Operator-defined facts a node may carry (`[inventory] facts`).
pub const MAX_FACTS: usize = 32;
/// A fact value's length, like a label value's.
pub const MAX_FACT_VALUE: usize = 63;
/// Tool names a node reports at most.
pub const MAX_TOOLS: usize = 256;
/// Free bytes on the data directory's file system are reported again once they moved
/// by more than this share (per cent) of the last reported value.
pub const FREE_MOVE_PCT: u64 = 5;
/// The store's bytes are reported again once they moved by more than this share (per
/// cent) and at least [`STORE_MOVE_MIN_BYTES`].
pub const STORE_MOVE_PCT: u64 = 10;
pub const STORE_MOVE_MIN_BYTES: u64 = 1024 * 1024;

/// A node's inventory. Members in alphabetical order (the wire's key order); optional
/// ones are `null` where the node could not read them (a container without
/// `/etc/os-release`, a board without a serial number).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Inventory {
    /// The outpost version the node runs (`CARGO_PKG_VERSION`).
    pub agent_version: String,
    /// The CPU architecture the binary was built for (`aarch64`, `arm`, `x86_64`).
    pub arch: String,
    /// When the machine booted (Unix ms), from `/proc/stat` `btime`.
    #[serde(default)]
    pub boot_time_ms: Option<u64>,
    /// Whether the kernel says the clock is synchronised (NTP).
    #[serde(default)]
    pub clock_synchronized: Option<bool>,
    /// Free bytes (for unprivileged users) on the data directory's file system.
    #[serde(default)]
    pub data_free_bytes: Option<u64>,
    /// Operator-defined static facts from the node's config (`[inventory] facts`).
    #[serde(default)]
    pub facts: BTreeMap<String, String>,
    #[serde(default)]
    pub hostname: Option<String>,
    /// The kernel release (`uname -r`).
    #[serde(default)]
    pub kernel: Option<String>,
    /// When the node's key last rotated (Unix ms); `null` if it never did.
    #[serde(default)]
    pub key_rotated_at_ms: Option<u64>,
    /// `PRETTY_NAME` of `/etc/os-release`.
    #[serde(default)]
    pub os: Option<String>,
    /// The board's serial number (a Raspberry Pi's, from the device tree or
    /// `/proc/cpuinfo`), where there is one.
    #[serde(default)]
    pub serial: Option<String>,
    /// Bytes the node's store takes on disk.
    #[serde(default)]
    pub store_bytes: Option<u64>,
    /// The tools the node offers, by name.
    #[serde(default)]
    pub tools: Vec<String>,
}

/// The facts a selector can name besides the operator's own (`inventory.<name>`).
pub const BUILT_IN: &[&str] = &[
    "agent_version",
    "arch",
    "boot_time_ms",
    "clock_synchronized",
    "data_free_bytes",
    "hostname",
    "kernel",
    "key_rotated_at_ms",
    "os",
    "serial",
    "store_bytes",
    "tools",
];

/// Why an inventory (or a configured fact) is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InventoryError {
    #[error("fact name {0:?}: {1}")]
    BadFactName(String, String),
    #[error("fact {0:?} is named like a built-in fact; choose another name")]
    BuiltIn(String),
    #[error("fact {0:?}: the value is over {MAX_FACT_VALUE} characters or not printable")]
    BadFactValue(String),
    #[error("{0} facts, at most {MAX_FACTS}")]
    TooManyFacts(usize),
    #[error("{0} tools, at most {MAX_TOOLS}")]
    TooManyTools(usize),
    #[error("{0}: over 255 characters")]
    TooLong(&'static str),
}

/// An operator's fact: named like a label key, valued like a label value, and not
/// named like a built-in fact (which would shadow it).
pub fn check_fact(name: &str, value: &str) -> Result<(), InventoryError> {
    check_key(name).map_err(|e| InventoryError::BadFactName(name.into(), e.to_string()))?;
    if BUILT_IN.contains(&name) {
        return Err(InventoryError::BuiltIn(name.into()));
    }
    if value.chars().count() > MAX_FACT_VALUE || value.chars().any(|c| c.is_control()) {
        return Err(InventoryError::BadFactValue(name.into()));
    }
    Ok(())
}

impl Inventory {
    /// What the gateway accepts: bounded facts, tools and strings.
    pub fn check(&self) -> Result<(), InventoryError> {
        if self.facts.len() > MAX_FACTS {
            return Err(InventoryError::TooManyFacts(self.facts.len()));
        }
        for (k, v) in &self.facts {
            check_fact(k, v)?;
        }
        if self.tools.len() > MAX_TOOLS {
            return Err(InventoryError::TooManyTools(self.tools.len()));
        }
        let strings = [
            ("agent_version", Some(&self.agent_version)),
            ("arch", Some(&self.arch)),
            ("hostname", self.hostname.as_ref()),
            ("kernel", self.kernel.as_ref()),
            ("os", self.os.as_ref()),
            ("serial", self.serial.as_ref()),
        ];
        for (name, s) in strings {
            if s.is_some_and(|s| s.len() > 255) {
                return Err(InventoryError::TooLong(name));
            }
        }
        if self.tools.iter().any(|t| t.len() > 255) {
            return Err(InventoryError::TooLong("tools"));
        }
        Ok(())
    }

    /// A fact by the name a selector gives it (`inventory.<name>`): a built-in one as
    /// text (`tools` as the names joined by commas, a boolean as `true`/`false`), else
    /// the operator's. `None` when the node has no such fact (or could not read it).
    pub fn fact(&self, name: &str) -> Option<String> {
        let num = |v: Option<u64>| v.map(|n| n.to_string());
        match name {
            "agent_version" => Some(self.agent_version.clone()),
            "arch" => Some(self.arch.clone()),
            "boot_time_ms" => num(self.boot_time_ms),
            "clock_synchronized" => self.clock_synchronized.map(|b| b.to_string()),
            "data_free_bytes" => num(self.data_free_bytes),
            "hostname" => self.hostname.clone(),
            "kernel" => self.kernel.clone(),
            "key_rotated_at_ms" => num(self.key_rotated_at_ms),
            "os" => self.os.clone(),
            "serial" => self.serial.clone(),
            "store_bytes" => num(self.store_bytes),
            "tools" => Some(self.tools.join(",")),
            other => self.facts.get(other).cloned(),
        }
    }

    /// Whether this reading is worth sending after `sent` (the last one the gateway
    /// took): any fact changed, except that free disk and store bytes count only once
    /// they moved by more than their share ([`FREE_MOVE_PCT`], [`STORE_MOVE_PCT`]) —
    /// they move with every message, and a report for each would cost the gateway a
    /// write per message.
    pub fn moved_from(&self, sent: &Inventory) -> bool {
        let steady = |i: &Inventory| Inventory {
            data_free_bytes: None,
            store_bytes: None,
            ..i.clone()
        };
        if steady(self) != steady(sent) {
            return true;
        }
        let moved = |now: Option<u64>, then: Option<u64>, pct: u64, min: u64| match (now, then) {
            (Some(a), Some(b)) => {
                let d = a.abs_diff(b);
                d > min && d.saturating_mul(100) > b.saturating_mul(pct)
            }
            (a, b) => a.is_some() != b.is_some(),
        };
        moved(self.data_free_bytes, sent.data_free_bytes, FREE_MOVE_PCT, 0)
            || moved(
                self.store_bytes,
                sent.store_bytes,
                STORE_MOVE_PCT,
                STORE_MOVE_MIN_BYTES,
            )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inv() -> Inventory {
        Inventory {
            agent_version: "0.1.0".into(),
            arch: "aarch64".into(),
            data_free_bytes: Some(1_000_000_000),
            store_bytes: Some(10_000_000),
            facts: [("firmware".to_string(), "2.4.1".to_string())].into(),
            tools: vec!["echo".into(), "sysinfo".into()],
            ..Inventory::default()
        }
    }

    #[test]
    fn facts_by_name() {
        let i = inv();
        assert_eq!(i.fact("agent_version").as_deref(), Some("0.1.0"));
        assert_eq!(i.fact("firmware").as_deref(), Some("2.4.1"));
        assert_eq!(i.fact("tools").as_deref(), Some("echo,sysinfo"));
        assert_eq!(i.fact("os"), None);
        assert_eq!(i.fact("nope"), None);
        assert_eq!(i.fact("data_free_bytes").as_deref(), Some("1000000000"));
    }

    #[test]
    fn free_disk_counts_past_five_percent() {
        let sent = inv();
        let mut now = inv();
        now.data_free_bytes = Some(960_000_000);
        assert!(!now.moved_from(&sent), "4 % is not worth a report");
        now.data_free_bytes = Some(940_000_000);
        assert!(now.moved_from(&sent), "6 % is");
        now.data_free_bytes = None;
        assert!(now.moved_from(&sent), "gone unreadable is a change");
    }

    #[test]
    fn store_bytes_need_share_and_size() {
        let sent = inv();
        let mut now = inv();
        now.store_bytes = Some(10_900_000);
        assert!(!now.moved_from(&sent));
        now.store_bytes = Some(12_000_000);
        assert!(now.moved_from(&sent));
        let mut small = inv();
        small.store_bytes = Some(100_000);
        let mut grown = small.clone();
        grown.store_bytes = Some(200_000);
        assert!(!grown.moved_from(&small), "under 1 MiB moved is noise");
    }

    #[test]
    fn any_other_fact_counts() {
        let sent = inv();
        let mut now = inv();
        now.facts.insert("firmware".into(), "2.4.2".into());
        assert!(now.moved_from(&sent));
        let mut now = inv();
        now.clock_synchronized = Some(true);
        assert!(now.moved_from(&sent));
        assert!(!inv().moved_from(&sent));
    }

    #[test]
    fn checks() {
        assert!(inv().check().is_ok());
        assert!(matches!(
            check_fact("os", "x"),
            Err(InventoryError::BuiltIn(_))
        ));
        assert!(check_fact("Firmware", "x").is_err());
        assert!(check_fact("firmware", &"x".repeat(64)).is_err());
        assert!(check_fact("firmware", "a\nb").is_err());
        let mut i = inv();
        i.hostname = Some("h".repeat(256));
        assert_eq!(i.check(), Err(InventoryError::TooLong("hostname")));
    }

    #[test]
    fn wire_shape() {
        let text = serde_json::to_string(&inv()).unwrap();
        assert!(
            text.starts_with(r#"{"agent_version":"0.1.0","arch":"aarch64","boot_time_ms":null"#)
        );
        let back: Inventory = serde_json::from_str(&text).unwrap();
        assert_eq!(back, inv());
        assert!(
            serde_json::from_str::<Inventory>(r#"{"agent_version":"x","arch":"y","extra":1}"#)
                .is_err()
        );
        // Optional members may be left out.
        let min: Inventory = serde_json::from_str(r#"{"agent_version":"x","arch":"y"}"#).unwrap();
        assert_eq!(min.tools, Vec::<String>::new());
    }
}
