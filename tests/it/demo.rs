//! `outpost demo` is the README's first command: it must succeed, quickly, and say what
//! happened.

use std::time::{Duration, Instant};

use crate::harness::{outpost, text};

#[test]
// Measures the wall time of a child process (the README promises < 60 s); no logic
// depends on it.
#[allow(clippy::disallowed_methods)]
fn demo_tells_the_outage_story_and_exits_zero() {
    let t0 = Instant::now();
    let o = outpost(&["demo"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        t0.elapsed() < Duration::from_secs(60),
        "demo took {:?}",
        t0.elapsed()
    );
    for line in [
        "live tool call → 200",
        "setpoint expired in the gateway queue",
        "outpost demo summary",
        "demo OK",
    ] {
        assert!(out.contains(line), "missing {line:?} in:\n{out}");
    }
    let row = |k: &str| -> u64 {
        out.lines()
            .find(|l| l.trim_start().starts_with(k))
            .and_then(|l| l.split_whitespace().last())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no {k:?} row in:\n{out}"))
    };
    assert_eq!(row("delivered after reconnect"), 5);
    assert_eq!(row("expired in queue"), 1);
    assert_eq!(row("results received upstream"), 5);
    assert!(row("audit entries synced") > 0);
}
