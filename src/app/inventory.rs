//! The node's inventory (PROTOCOL §16.3), read at the edge: files under `/proc`, `/sys`
//! and `/etc`, the kernel's NTP state, the store's size and free disk, the tools, the
//! config's facts. Reading writes nothing (the sync loop reads it about once a minute,
//! within the idle write budget). The file readers take a root directory, so tests feed
//! them a fake `/proc`. Whether a reading is worth sending is `fleet::inventory`'s.

use std::path::Path;

use super::core::NodeCore;
use crate::fleet::inventory::MAX_TOOLS;
use crate::fleet::Inventory;

/// The gateway refuses longer strings (§16.3); a reading is cut to fit rather than sent
/// and refused on every connection.
const MAX_STRING: usize = 255;

/// Everything the node says about itself now.
pub fn read(core: &NodeCore) -> Inventory {
    let base = core.base();
    let store = &base.store;
    let cfg = core.cfg();
    let mut tools: Vec<String> = core
        .calls
        .tools()
        .contracts()
        .into_iter()
        .map(|t| t.name)
        .collect();
    tools.truncate(MAX_TOOLS);
    Inventory {
        data_free_bytes: store.free_bytes(),
        store_bytes: Some(store.held_bytes()),
        tools,
        clock_synchronized: clock_synchronized(),
        key_rotated_at_ms: key_rotated_at_ms(&cfg.data_dir),
        facts: cfg.fleet.facts.clone(),
        ..from_files(Path::new("/"))
    }
}

/// What the node always knows (when a reading could not be taken at all).
pub fn minimal() -> Inventory {
    Inventory {
        agent_version: env!("CARGO_PKG_VERSION").into(),
        arch: std::env::consts::ARCH.into(),
        ..Inventory::default()
    }
}

/// The facts read from files under `root` (`/` on a device).
pub fn from_files(root: &Path) -> Inventory {
    Inventory {
        os: os_pretty_name(root),
        kernel: first_line(root, "proc/sys/kernel/osrelease"),
        hostname: first_line(root, "proc/sys/kernel/hostname"),
        boot_time_ms: boot_time_ms(root),
        serial: serial(root),
        ..minimal()
    }
}

fn read_text(root: &Path, rel: &str) -> Option<String> {
    std::fs::read_to_string(root.join(rel)).ok()
}

/// `s` trimmed, cut to [`MAX_STRING`] bytes (at a character boundary); `None` if empty.
fn fact(s: &str) -> Option<String> {
    let s = s.trim_matches(|c: char| c.is_whitespace() || c == '\0');
    let mut end = s.len().min(MAX_STRING);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    (!s.is_empty()).then(|| s[..end].to_string())
}

fn first_line(root: &Path, rel: &str) -> Option<String> {
    fact(read_text(root, rel)?.lines().next()?)
}

/// `PRETTY_NAME` of `/etc/os-release`, else of `/usr/lib/os-release` (os-release(5)).
fn os_pretty_name(root: &Path) -> Option<String> {
    let text =
        read_text(root, "etc/os-release").or_else(|| read_text(root, "usr/lib/os-release"))?;
    let value = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("PRETTY_NAME="))?;
    let unquoted = value
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .or_else(|| value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
        .unwrap_or(value);
    fact(&unquoted.replace("\\\"", "\"").replace("\\\\", "\\"))
}

/// `btime` of `/proc/stat` (seconds since the epoch) in ms.
fn boot_time_ms(root: &Path) -> Option<u64> {
    let text = read_text(root, "proc/stat")?;
    let secs: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    secs.checked_mul(1000)
}

/// The device tree's serial number (NUL-terminated), else `Serial` of `/proc/cpuinfo`
/// (a Raspberry Pi's).
fn serial(root: &Path) -> Option<String> {
    if let Some(s) = std::fs::read(root.join("sys/firmware/devicetree/base/serial-number"))
        .ok()
        .and_then(|b| fact(&String::from_utf8_lossy(&b)))
    {
        return Some(s);
    }
    read_text(root, "proc/cpuinfo")?.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == "Serial").then(|| fact(v)).flatten()
    })
}

/// When this node's key last rotated: the retired key's grace ends
/// `ROTATION_GRACE_MS` after the switch (`key-history.json`). `None` if it never did.
fn key_rotated_at_ms(data_dir: &Path) -> Option<u64> {
    let h = crate::daemon::rotation::history(data_dir).ok()?;
    (!h.retired.is_empty()).then(|| {
        h.previous_until_ms
            .saturating_sub(crate::envelope::ROTATION_GRACE_MS)
    })
}

/// The kernel's NTP state (`adjtimex(2)` with no modes set: a read): synchronised unless
/// it answers `TIME_ERROR` or the status has `STA_UNSYNC`. `None` when it cannot say.
#[cfg(target_os = "linux")]
fn clock_synchronized() -> Option<bool> {
    // SAFETY: adjtimex writes into the zeroed struct we own; `modes == 0` changes
    // nothing.
    let mut tx: libc::timex = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::adjtimex(&mut tx) };
    if rc == -1 {
        return None;
    }
    Some(rc != libc::TIME_ERROR && tx.status & libc::STA_UNSYNC == 0)
}

#[cfg(not(target_os = "linux"))]
fn clock_synchronized() -> Option<bool> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(root: &Path, rel: &str, text: &[u8]) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    #[test]
    fn reads_a_raspberry_pi() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        put(
            r,
            "etc/os-release",
            b"NAME=\"Raspbian\"\nPRETTY_NAME=\"Raspbian GNU/Linux 11 (bullseye)\"\nID=raspbian\n",
        );
        put(r, "proc/sys/kernel/osrelease", b"6.1.21-v8+\n");
        put(r, "proc/sys/kernel/hostname", b"pump-17\n");
        put(
            r,
            "proc/stat",
            b"cpu  1 2 3\nintr 5\nbtime 1700000000\nprocesses 9\n",
        );
        put(
            r,
            "sys/firmware/devicetree/base/serial-number",
            b"10000000abcdef01\0",
        );
        put(
            r,
            "proc/cpuinfo",
            b"processor\t: 0\nSerial\t\t: 00000000ffffffff\n",
        );
        let i = from_files(r);
        assert_eq!(i.os.as_deref(), Some("Raspbian GNU/Linux 11 (bullseye)"));
        assert_eq!(i.kernel.as_deref(), Some("6.1.21-v8+"));
        assert_eq!(i.hostname.as_deref(), Some("pump-17"));
        assert_eq!(i.boot_time_ms, Some(1_700_000_000_000));
        assert_eq!(
            i.serial.as_deref(),
            Some("10000000abcdef01"),
            "the device tree first"
        );
        assert_eq!(i.agent_version, env!("CARGO_PKG_VERSION"));
        assert!(i.check().is_ok());
    }

    #[test]
    fn falls_back_and_says_none_for_what_is_missing() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        assert_eq!(
            from_files(r),
            minimal(),
            "a container without any of the files"
        );
        put(r, "usr/lib/os-release", b"PRETTY_NAME='Debian 12'\n");
        put(
            r,
            "proc/cpuinfo",
            b"model\t: x\nSerial\t\t: 00000000c0ffee00\n",
        );
        put(r, "proc/stat", b"btime nope\n");
        put(r, "proc/sys/kernel/hostname", "h".repeat(300).as_bytes());
        let i = from_files(r);
        assert_eq!(i.os.as_deref(), Some("Debian 12"));
        assert_eq!(i.serial.as_deref(), Some("00000000c0ffee00"));
        assert_eq!(i.boot_time_ms, None);
        assert_eq!(
            i.hostname.map(|h| h.len()),
            Some(MAX_STRING),
            "cut to what the gateway takes"
        );
    }

    #[test]
    fn reading_writes_nothing() {
        let d = tempfile::tempdir().unwrap();
        put(d.path(), "proc/stat", b"btime 5\n");
        let before = std::fs::read_dir(d.path()).unwrap().count();
        from_files(d.path());
        key_rotated_at_ms(d.path());
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), before);
    }

    #[test]
    fn the_kernel_answers_about_its_clock() {
        // On Linux the call is a read any user may make.
        if cfg!(target_os = "linux") {
            assert!(clock_synchronized().is_some());
        }
    }
}
