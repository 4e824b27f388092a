//! Names without per-device config: `identity.node_id_from` derives the node id from
//! something each device already has (its systemd machine id, its Raspberry Pi serial,
//! its hostname, or a file), so one config serves a whole fleet of identical images.
//!
//! [`derive_node_id`] is pure: the file reading is passed in, so every source is tested
//! without touching `/etc` or `/proc`. The daemon reads through [`system_reader`],
//! which looks every path up under `$OUTPOST_SYSROOT` when that is set (tests and image
//! builders: a directory holding `etc/machine-id`, `proc/cpuinfo`, … of a device).

use std::fmt;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use super::raw::RawIdentity;
use super::Role;
use crate::envelope::is_valid_node_id;

/// `identity.node_id_prefix` when unset.
pub const DEFAULT_PREFIX: &str = "node:";

/// Where the identity sources are looked up instead of `/` (tests, image builders).
pub const SYSROOT_ENV: &str = "OUTPOST_SYSROOT";

/// outpost's application id for the machine-id source, as systemd's
/// `sd_id128_get_machine_app_specific(3)` asks of each application: the node id is
/// HMAC-SHA256 keyed by the machine id over this, never the machine id itself (which
/// machine-id(5) says to keep confidential). Changing it renames every such node.
/// On a device, `systemd-id128 machine-id --app-specific=c7c15d63087f4c6f86ac8f5f784577aa`
/// prints the same 32 hex digits the node id carries.
pub const MACHINE_APP_ID: [u8; 16] = [
    0xc7, 0xc1, 0x5d, 0x63, 0x08, 0x7f, 0x4c, 0x6f, 0x86, 0xac, 0x8f, 0x5f, 0x78, 0x45, 0x77, 0xaa,
];

/// The largest prefix of a source file read (`/proc/cpuinfo` of a many-core host is
/// tens of KiB; a name is one short line).
const READ_LIMIT: u64 = 1 << 20;

/// What `identity.node_id_from` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeIdSource {
    /// `/etc/machine-id`, hashed with [`MACHINE_APP_ID`].
    MachineId,
    /// The Raspberry Pi serial number (`/proc/cpuinfo` or the device tree).
    Serial,
    /// The kernel's hostname (`/proc/sys/kernel/hostname`, else `/etc/hostname`).
    Hostname,
    /// The first line of an absolute path.
    File(PathBuf),
}

impl std::str::FromStr for NodeIdSource {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "machine-id" => Ok(Self::MachineId),
            "serial" => Ok(Self::Serial),
            "hostname" => Ok(Self::Hostname),
            _ => match s.strip_prefix("file:") {
                Some(p) if p.starts_with('/') => Ok(Self::File(PathBuf::from(p))),
                Some(p) => Err(format!(
                    "file:{p}: the path must be absolute (e.g. \"file:/etc/outpost/device-name\")"
                )),
                None => Err(format!(
                    "{s:?} must be \"machine-id\", \"serial\", \"hostname\" or \"file:<absolute path>\""
                )),
            },
        }
    }
}

impl fmt::Display for NodeIdSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MachineId => f.write_str("machine-id"),
            Self::Serial => f.write_str("serial"),
            Self::Hostname => f.write_str("hostname"),
            Self::File(p) => write!(f, "file:{}", p.display()),
        }
    }
}

const MACHINE_ID: &str = "/etc/machine-id";
const CPUINFO: &str = "/proc/cpuinfo";
const DT_SERIAL: &str = "/sys/firmware/devicetree/base/serial-number";
const KERNEL_HOSTNAME: &str = "/proc/sys/kernel/hostname";
const ETC_HOSTNAME: &str = "/etc/hostname";

/// The node id `prefix` + the value `source` gives, read through `read` (which takes
/// the absolute path a device has it at). Never panics: any input gives a valid node
/// id or an error saying what was wrong and what to do.
pub fn derive_node_id(
    source: &NodeIdSource,
    prefix: &str,
    read: &dyn Fn(&Path) -> std::io::Result<Vec<u8>>,
) -> Result<String, String> {
    check_prefix(prefix)?;
    let value = match source {
        NodeIdSource::MachineId => machine_id(read)?,
        NodeIdSource::Serial => serial(read)?,
        NodeIdSource::Hostname => hostname(read)?,
        NodeIdSource::File(p) => {
            let text = read_text(read, p)?;
            let line = text.lines().next().unwrap_or("").trim();
            if line.is_empty() {
                return Err(format!(
                    "{}: the first line is empty: write this device's name into it",
                    p.display()
                ));
            }
            line.to_string()
        }
    };
    let id = format!("{prefix}{value}");
    if is_valid_node_id(&id) {
        return Ok(id);
    }
    // Refused, not rewritten: two devices whose names differ only in a replaced
    // character would end up with one id.
    if let Some(c) = value
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "the value {:?} holds {c:?}; a node id allows only A-Z a-z 0-9 . _ - after the \
             colon: fix the source or set identity.node_id",
            value.chars().take(80).collect::<String>()
        ));
    }
    let name_len = id.split_once(':').map_or(id.len(), |(_, n)| n.len());
    Err(format!(
        "{id:?} has a name of {name_len} characters, at most 64: shorten \
         identity.node_id_prefix or the value"
    ))
}

/// A prefix is a kind, a colon, and optionally the start of a name.
fn check_prefix(prefix: &str) -> Result<(), String> {
    if prefix.contains(':') && is_valid_node_id(&format!("{prefix}x")) {
        Ok(())
    } else {
        Err(format!(
            "identity.node_id_prefix {prefix:?} must be a kind and a colon, optionally with \
             the start of a name (\"node:\", \"node:pump-\")"
        ))
    }
}

fn read_text(
    read: &dyn Fn(&Path) -> std::io::Result<Vec<u8>>,
    path: &Path,
) -> Result<String, String> {
    let bytes = read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    String::from_utf8(bytes).map_err(|_| format!("{} is not UTF-8 text", path.display()))
}

/// systemd's `sd_id128_get_machine_app_specific`: the first 16 bytes of
/// HMAC-SHA256(key = machine id, message = app id), made a version 4 UUID (as systemd
/// does), as 32 lowercase hex digits.
fn machine_id(read: &dyn Fn(&Path) -> std::io::Result<Vec<u8>>) -> Result<String, String> {
    use hkdf::hmac::{Hmac, Mac};
    let path = Path::new(MACHINE_ID);
    let text = read_text(read, path)?;
    let t = text.trim();
    let why = if t.is_empty() || t == "uninitialized" {
        Some(
            "systemd has not written this machine's id yet (first boot): order outpost after \
             systemd-machine-id-commit.service, or use another source",
        )
    } else if t.len() != 32 || !t.bytes().all(|b| b.is_ascii_hexdigit()) {
        Some("is not 32 hex digits (machine-id(5))")
    } else if t.bytes().all(|b| b == b'0') {
        Some("is all zeros")
    } else {
        None
    };
    if let Some(why) = why {
        return Err(format!("{MACHINE_ID} {why}"));
    }
    let mut key = [0u8; 16];
    for (i, k) in key.iter_mut().enumerate() {
        // Checked above: 32 ASCII hex digits.
        *k = u8::from_str_radix(&t[2 * i..2 * i + 2], 16).unwrap_or(0);
    }
    let mut mac =
        <Hmac<sha2::Sha256> as Mac>::new_from_slice(&key).map_err(|_| "HMAC key".to_string())?;
    mac.update(&MACHINE_APP_ID);
    let full = mac.finalize().into_bytes();
    let mut id = [0u8; 16];
    id.copy_from_slice(&full[..16]);
    id[6] = (id[6] & 0x0f) | 0x40;
    id[8] = (id[8] & 0x3f) | 0x80;
    Ok(id.iter().map(|b| format!("{b:02x}")).collect())
}

/// `Serial : 10000000abcdef01` in `/proc/cpuinfo`, else the device tree's
/// NUL-terminated `serial-number`; lowercase, leading zeros kept. An all-zero serial
/// (some boards and VMs) counts as none.
fn serial(read: &dyn Fn(&Path) -> std::io::Result<Vec<u8>>) -> Result<String, String> {
    let usable = |s: &str| !s.is_empty() && !s.bytes().all(|b| b == b'0');
    if let Ok(bytes) = read(Path::new(CPUINFO)) {
        let text = String::from_utf8_lossy(&bytes);
        let found = text.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == "Serial").then(|| v.trim().to_ascii_lowercase())
        });
        if let Some(s) = found.filter(|s| usable(s)) {
            return Ok(s);
        }
    }
    if let Ok(bytes) = read(Path::new(DT_SERIAL)) {
        let s = String::from_utf8_lossy(&bytes)
            .trim_end_matches('\0')
            .trim()
            .to_ascii_lowercase();
        if usable(&s) {
            return Ok(s);
        }
    }
    Err(format!(
        "no serial number: neither a Serial line in {CPUINFO} nor {DT_SERIAL} (not a \
         Raspberry Pi?): use \"machine-id\" or \"file:<path>\", or set identity.node_id"
    ))
}

/// The kernel's hostname, else `/etc/hostname` (its first line that is not a comment);
/// trimmed, lowercase. Names every unconfigured machine has are refused.
fn hostname(read: &dyn Fn(&Path) -> std::io::Result<Vec<u8>>) -> Result<String, String> {
    let first = |p: &str| {
        read(Path::new(p)).ok().and_then(|b| {
            String::from_utf8_lossy(&b)
                .lines()
                .map(str::trim)
                .find(|l| !l.is_empty() && !l.starts_with('#'))
                .map(str::to_ascii_lowercase)
        })
    };
    let Some(h) = first(KERNEL_HOSTNAME).or_else(|| first(ETC_HOSTNAME)) else {
        return Err(format!(
            "no hostname in {KERNEL_HOSTNAME} or {ETC_HOSTNAME}: use another source or set \
             identity.node_id"
        ));
    };
    if ["localhost", "localhost.localdomain", "(none)"].contains(&h.as_str()) {
        return Err(format!(
            "the hostname is {h:?}, which does not tell devices apart: give each device its \
             own hostname, or use \"machine-id\" or \"serial\""
        ));
    }
    Ok(h)
}

/// Reads `path` as the device has it: under `$OUTPOST_SYSROOT` when that is set, at
/// most [`READ_LIMIT`] bytes.
pub fn system_reader() -> impl Fn(&Path) -> std::io::Result<Vec<u8>> {
    let root = sysroot();
    move |path: &Path| {
        let full = match &root {
            Some(r) => r.join(path.strip_prefix("/").unwrap_or(path)),
            None => path.to_path_buf(),
        };
        let mut out = Vec::new();
        std::fs::File::open(full)?
            .take(READ_LIMIT)
            .read_to_end(&mut out)?;
        Ok(out)
    }
}

fn sysroot() -> Option<PathBuf> {
    std::env::var_os(SYSROOT_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// The `[identity]` naming keys, checked: the node id (given or derived) and whether a
/// missing key pair is created at start. Problems go to `errs`.
pub(super) fn resolve(raw: &RawIdentity, role: Role, errs: &mut Vec<String>) -> (String, bool) {
    let from = raw.node_id_from.as_deref();
    let for_nodes = |key: &str, errs: &mut Vec<String>| {
        if role == Role::Gateway {
            errs.push(format!(
                "identity.{key} is for nodes: name a gateway with identity.node_id and \
                 `outpost init --role gateway`"
            ));
        }
    };
    if from.is_some() {
        for_nodes("node_id_from", errs);
    }
    if raw.create_keys == Some(true) {
        for_nodes("create_keys", errs);
    }
    if raw.node_id_prefix.is_some() && from.is_none() {
        errs.push("identity.node_id_prefix needs identity.node_id_from".into());
    }
    let create_keys = raw.create_keys.unwrap_or(from.is_some());
    let node_id = match (&raw.node_id, from) {
        (Some(_), Some(_)) => {
            errs.push(
                "identity.node_id and identity.node_id_from are both set in one file: keep \
                 one (node_id names this device, node_id_from derives its name)"
                    .into(),
            );
            String::new()
        }
        (Some(id), None) => {
            if id.is_empty() {
                errs.push("identity.node_id is required (or identity.node_id_from)".into());
            } else if !is_valid_node_id(id) {
                errs.push(format!(
                    "identity.node_id {id:?} must match ^[a-z][a-z0-9-]{{0,31}}:[A-Za-z0-9._-]{{1,64}}$"
                ));
            }
            id.clone()
        }
        (None, None) => {
            errs.push("identity.node_id is required (or identity.node_id_from)".into());
            String::new()
        }
        (None, Some(text)) => {
            let prefix = raw.node_id_prefix.as_deref().unwrap_or(DEFAULT_PREFIX);
            let derived = text
                .parse::<NodeIdSource>()
                .and_then(|source| derive_node_id(&source, prefix, &system_reader()));
            match derived {
                Ok(id) => id,
                Err(e) => {
                    let under = sysroot()
                        .map(|r| format!(" (paths under {SYSROOT_ENV}={})", r.display()))
                        .unwrap_or_default();
                    errs.push(format!("identity.node_id_from = {text:?}: {e}{under}"));
                    String::new()
                }
            }
        }
    };
    (node_id, create_keys)
}

/// Merging a drop-in: `node_id` and `node_id_from` are two spellings of one setting,
/// so a later file's one replaces an earlier file's other (a fleet drop-in's
/// `node_id_from` overrides the packaged placeholder `node_id`). Both in one file stay
/// an error.
pub(super) fn later_name_wins(merged: &mut toml::Table, over: &toml::Table) {
    let Some(toml::Value::Table(new)) = over.get("identity") else {
        return;
    };
    let Some(toml::Value::Table(old)) = merged.get_mut("identity") else {
        return;
    };
    for (key, other) in [("node_id", "node_id_from"), ("node_id_from", "node_id")] {
        if new.contains_key(key) && !new.contains_key(other) {
            old.remove(other);
            if key == "node_id" {
                old.remove("node_id_prefix");
            }
        }
    }
}

#[cfg(test)]
#[path = "identity_tests.rs"]
mod tests;
