use serde_json::json;

use super::*;

fn form(kind: &str) -> NewRollout {
    NewRollout {
        selector: " site=north ".into(),
        kind: kind.into(),
        command_type: "reboot".into(),
        body: r#"{"delay_s": 5}"#.into(),
        tool_name: "echo".into(),
        patch: r#"{"fan": 3}"#.into(),
        ..NewRollout::default()
    }
}

#[test]
fn the_form_reads_as_the_spec_the_api_takes() {
    let mut f = form("command");
    f.phases = "1, 10%,100%".into();
    f.error_pct = "10%".into();
    f.deadline = "2d".into();
    f.dynamic = Some("on".into());
    let s = f.spec().unwrap();
    assert_eq!(s.selector, "site=north");
    assert_eq!(
        s.action,
        Action::Command {
            command_type: "reboot".into(),
            body: json!({"delay_s": 5}),
            ttl_s: None
        }
    );
    assert_eq!(
        s.phases,
        [Size::Count(1), Size::Percent(10), Size::Percent(100)]
    );
    assert_eq!(
        (s.success_threshold_pct, s.error_threshold_pct),
        (100, Some(10))
    );
    assert_eq!(
        (s.deadline_s, s.dynamic, s.phase_wait_s),
        (172_800, true, None)
    );
    // Blank fields are the API's defaults.
    let s = form("desired").spec().unwrap();
    assert_eq!(s.action, Action::Desired(json!({"fan": 3})));
    assert!(s.phases.is_empty() && !s.dynamic && s.error_threshold_pct.is_none());
    assert_eq!(s.deadline_s, DEFAULT_DEADLINE_S);
    let s = form("tool_call").spec().unwrap();
    assert_eq!(
        s.action,
        Action::ToolCall {
            tool_name: "echo".into(),
            tool_args: serde_json::Value::Null
        }
    );
}

#[test]
fn what_cannot_be_read_is_named() {
    let err = |f: NewRollout| f.spec().unwrap_err();
    let mut f = form("command");
    f.body = "{nope".into();
    assert!(err(f).starts_with("the command's body is not JSON"));
    let mut f = form("desired");
    f.patch = "".into();
    assert!(err(f).contains("merge patch"));
    let mut f = form("command");
    f.phases = "1,,50%".into();
    assert!(err(f).contains(r#"not """#));
    let mut f = form("command");
    f.phases = "0%".into();
    assert!(err(f).contains("\"0%\""));
    let mut f = form("command");
    f.error_pct = "101".into();
    assert!(err(f).contains("1-100"));
    let mut f = form("command");
    f.deadline = "3 weeks".into();
    assert!(err(f).contains("\"3 weeks\""));
    assert!(err(form("reboot")).contains("choose an action"));
}

#[test]
fn durations_take_a_unit_or_seconds() {
    let d = |t: &str| duration_s(t, "x");
    assert_eq!(d("90"), Ok(Some(90)));
    assert_eq!(d("90s"), Ok(Some(90)));
    assert_eq!(d("30m"), Ok(Some(1_800)));
    assert_eq!(d("12 h"), Ok(Some(43_200)));
    assert_eq!(d("7d"), Ok(Some(604_800)));
    assert_eq!(d(" "), Ok(None));
    assert!(d("1y").is_err() && d("h").is_err() && d("-1").is_err());
    assert!(d("99999999999999999999d").is_err());
}

#[test]
fn a_bar_splits_the_whole_width_in_state_order() {
    let c = Counts {
        succeeded: 1,
        failed: 1,
        queued: 1,
        delivered: 0,
        pending: 0,
        total: 3,
        ..Counts::default()
    };
    let b = bar(&c);
    let kinds: Vec<_> = b.iter().map(|s| (s.kind, s.n, s.x, s.width)).collect();
    assert_eq!(
        kinds,
        [
            ("succeeded", 1, 0, 333),
            ("failed", 1, 333, 333),
            ("in-flight", 1, 666, 334)
        ]
    );
    assert_eq!(b.iter().map(|s| s.width).sum::<u64>(), BAR_WIDTH);
    assert!(bar(&Counts::default()).is_empty());
}
