//! The `sysinfo` built-in: what a field engineer checks first on a sick device.
//!
//! Reads `/proc/uptime`, `/proc/loadavg`, `/proc/meminfo`, `statvfs(data_dir)` and
//! `/sys/class/thermal/thermal_zone*/{type,temp}`. Anything missing (containers, boards
//! without a sensor) is `null` rather than an error: a partial answer beats none. The
//! data directory's path is not echoed back (paths are internal details).

use std::path::Path;

use serde_json::{json, Value};

pub fn result_schema() -> Value {
    let n = json!({"type": ["number", "null"]});
    json!({
        "type": "object",
        "properties": {
            "uptime_s": n,
            "load": {"type": ["object", "null"], "properties": {"1m": n, "5m": n, "15m": n}},
            "memory": {"type": ["object", "null"], "properties": {
                "total_bytes": n, "available_bytes": n, "free_bytes": n,
                "swap_total_bytes": n, "swap_free_bytes": n}},
            "disk": {"type": ["object", "null"], "properties": {
                "total_bytes": n, "free_bytes": n, "available_bytes": n}},
            "cpu_temp_c": n
        }
    })
}

/// Collect from the real `/proc` and `/sys`.
pub fn collect(data_dir: &Path) -> Value {
    collect_from(
        Path::new("/proc"),
        Path::new("/sys/class/thermal"),
        data_dir,
    )
}

/// Collect from given roots (tests point these at fixtures).
pub fn collect_from(proc_root: &Path, thermal_root: &Path, data_dir: &Path) -> Value {
    let read = |name: &str| std::fs::read_to_string(proc_root.join(name)).ok();
    json!({
        "uptime_s": read("uptime").as_deref().and_then(parse_uptime),
        "load": read("loadavg").as_deref().and_then(parse_loadavg),
        "memory": read("meminfo").as_deref().map(parse_meminfo),
        "disk": disk(data_dir),
        "cpu_temp_c": cpu_temp_c(thermal_root),
    })
}

fn parse_uptime(s: &str) -> Option<f64> {
    s.split_whitespace().next()?.parse().ok()
}

fn parse_loadavg(s: &str) -> Option<Value> {
    let mut it = s.split_whitespace().map(|f| f.parse::<f64>().ok());
    let (a, b, c) = (it.next()??, it.next()??, it.next()??);
    Some(json!({"1m": a, "5m": b, "15m": c}))
}

fn parse_meminfo(s: &str) -> Value {
    let field = |name: &str| -> Option<u64> {
        s.lines().find_map(|l| {
            let rest = l.strip_prefix(name)?.strip_prefix(':')?;
            let mut parts = rest.split_whitespace();
            let n: u64 = parts.next()?.parse().ok()?;
            // /proc/meminfo says "kB" and means KiB.
            Some(match parts.next() {
                Some("kB") => n.saturating_mul(1024),
                _ => n,
            })
        })
    };
    json!({
        "total_bytes": field("MemTotal"),
        "available_bytes": field("MemAvailable"),
        "free_bytes": field("MemFree"),
        "swap_total_bytes": field("SwapTotal"),
        "swap_free_bytes": field("SwapFree"),
    })
}

fn disk(dir: &Path) -> Value {
    match crate::store::disk_usage(dir) {
        Some(d) => json!({
            "total_bytes": d.total,
            "free_bytes": d.free,
            "available_bytes": d.available,
        }),
        None => Value::Null,
    }
}

/// The CPU's zone if one is labelled as such (`cpu-thermal` on Raspberry Pi OS,
/// `x86_pkg_temp`, `soc_thermal`…), else the first zone with a readable temperature.
fn cpu_temp_c(root: &Path) -> Option<f64> {
    let mut zones: Vec<_> = std::fs::read_dir(root)
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("thermal_zone"))
        })
        .collect();
    zones.sort();
    let reading = |p: &Path| -> Option<f64> {
        let milli: f64 = std::fs::read_to_string(p.join("temp"))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        Some((milli / 100.0).round() / 10.0)
    };
    let is_cpu = |p: &Path| {
        std::fs::read_to_string(p.join("type")).is_ok_and(|t| {
            let t = t.to_ascii_lowercase();
            t.contains("cpu") || t.contains("soc") || t.contains("x86_pkg")
        })
    };
    zones
        .iter()
        .filter(|p| is_cpu(p))
        .find_map(|p| reading(p))
        .or_else(|| zones.iter().find_map(|p| reading(p)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_fixture_files() {
        let dir = tempfile::tempdir().unwrap();
        let proc_root = dir.path().join("proc");
        let thermal = dir.path().join("thermal");
        std::fs::create_dir_all(&proc_root).unwrap();
        std::fs::write(proc_root.join("uptime"), "12345.67 40000.00\n").unwrap();
        std::fs::write(proc_root.join("loadavg"), "0.52 0.58 0.59 1/191 4242\n").unwrap();
        std::fs::write(
            proc_root.join("meminfo"),
            "MemTotal:        3884096 kB\nMemFree:          123456 kB\nMemAvailable:    2000000 kB\nSwapTotal:        102396 kB\nSwapFree:         102396 kB\n",
        )
        .unwrap();
        for (zone, ty, temp) in [
            ("thermal_zone0", "acpitz\n", "27800\n"),
            ("thermal_zone1", "cpu-thermal\n", "48312\n"),
        ] {
            std::fs::create_dir_all(thermal.join(zone)).unwrap();
            std::fs::write(thermal.join(zone).join("type"), ty).unwrap();
            std::fs::write(thermal.join(zone).join("temp"), temp).unwrap();
        }
        let v = collect_from(&proc_root, &thermal, dir.path());
        assert_eq!(v["uptime_s"], 12345.67);
        assert_eq!(v["load"]["15m"], 0.59);
        assert_eq!(v["memory"]["total_bytes"], 3_884_096u64 * 1024);
        assert_eq!(v["memory"]["available_bytes"], 2_000_000u64 * 1024);
        assert_eq!(v["cpu_temp_c"], 48.3);
        assert!(v["disk"]["total_bytes"].as_u64().unwrap() > 0);
        assert!(
            v["disk"]["available_bytes"].as_u64().unwrap()
                <= v["disk"]["total_bytes"].as_u64().unwrap()
        );
    }

    #[test]
    fn missing_sources_are_null_not_errors() {
        let dir = tempfile::tempdir().unwrap();
        let v = collect_from(
            &dir.path().join("nope"),
            &dir.path().join("nope"),
            &dir.path().join("missing"),
        );
        assert!(v["uptime_s"].is_null() && v["load"].is_null() && v["memory"].is_null());
        assert!(v["disk"].is_null() && v["cpu_temp_c"].is_null());
    }

    #[test]
    fn real_system_answers() {
        let dir = tempfile::tempdir().unwrap();
        let v = collect(dir.path());
        assert!(v["uptime_s"].as_f64().unwrap() > 0.0);
        assert!(v["memory"]["total_bytes"].as_u64().unwrap() > 0);
    }
}
