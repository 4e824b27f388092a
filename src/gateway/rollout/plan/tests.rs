use super::*;
use proptest::prelude::*;
use serde_json::json;

fn spec(phases: Vec<Size>) -> Spec {
    Spec {
        selector: String::new(),
        action: Action::Command {
            command_type: "x".into(),
            body: json!({}),
            ttl_s: None,
        },
        phases,
        success_threshold_pct: 100,
        error_threshold_pct: Some(10),
        dynamic: false,
        deadline_s: 3600,
        phase_wait_s: None,
    }
}

fn counts(states: &[&[NodeState]]) -> Vec<Counts> {
    states
        .iter()
        .map(|p| {
            let mut c = Counts::default();
            for s in *p {
                c.add(*s);
            }
            c
        })
        .collect()
}

fn facts(s: &Spec, phase: usize, now_ms: u64) -> Facts<'_> {
    Facts {
        spec: s,
        state: State::Running,
        phase,
        phase_started_ms: 0,
        deadline_ms: 3_600_000,
        now_ms,
        forgiven: 0,
    }
}

#[test]
fn sizes_read_as_counts_and_shares() {
    let v: Vec<Size> = serde_json::from_value(json!([1, "10%", "100%"])).unwrap();
    assert_eq!(v, [Size::Count(1), Size::Percent(10), Size::Percent(100)]);
    assert_eq!(serde_json::to_value(&v).unwrap(), json!([1, "10%", "100%"]));
    for bad in [
        json!(["0%"]),
        json!(["101%"]),
        json!(["ten"]),
        json!([-1]),
        json!([1.5]),
    ] {
        assert!(
            serde_json::from_value::<Vec<Size>>(bad.clone()).is_err(),
            "{bad}"
        );
    }
}

#[test]
fn an_action_is_exactly_one_of_three() {
    let a: Action = serde_json::from_value(json!({"command": {"type": "reboot"}})).unwrap();
    assert_eq!(a.kind(), "command");
    let a: Action =
        serde_json::from_value(json!({"tool_call": {"tool_name": "echo", "tool_args": {"a": 1}}}))
            .unwrap();
    assert_eq!(a.kind(), "tool_call");
    let a: Action = serde_json::from_value(json!({"desired": {"fan": 2}})).unwrap();
    assert_eq!(a, Action::Desired(json!({"fan": 2})));
    for bad in [
        json!({}),
        json!({"command": {"type": "x"}, "desired": {}}),
        json!({"reboot": {}}),
        json!({"command": {"type": "x", "extra": 1}}),
    ] {
        assert!(
            serde_json::from_value::<Action>(bad.clone()).is_err(),
            "{bad}"
        );
    }
}

#[test]
fn phases_split_the_targets_in_order() {
    let sizes = [Size::Count(1), Size::Percent(10), Size::Percent(100)];
    assert_eq!(phase_ends(&sizes, 100), [1, 10, 100]);
    assert_eq!(
        phase_ends(&sizes, 5),
        [1, 1, 5],
        "10 % of 5 is 1: the phase is empty"
    );
    assert_eq!(phase_ends(&[], 7), [7]);
    assert_eq!(
        phase_ends(&[Size::Count(2)], 7),
        [7],
        "the last takes the rest"
    );
    assert_eq!(phase_ends(&[Size::Count(5), Size::Count(5)], 3), [3, 3]);
    let ends = phase_ends(&sizes, 100);
    assert_eq!(
        [0, 1, 9, 10, 99].map(|i| phase_of(&ends, i)),
        [0, 1, 1, 2, 2]
    );
}

proptest! {
    #[test]
    fn phase_ends_cover_every_target_once(
        total in 0usize..5000,
        raw in proptest::collection::vec((any::<bool>(), 1u64..200, 1u8..=100), 0..6),
    ) {
        let sizes: Vec<Size> = raw
            .into_iter()
            .map(|(count, n, p)| if count { Size::Count(n) } else { Size::Percent(p) })
            .collect();
        let ends = phase_ends(&sizes, total);
        prop_assert_eq!(ends.len(), sizes.len().max(1));
        prop_assert_eq!(*ends.last().unwrap(), total);
        prop_assert!(ends.windows(2).all(|w| w[0] <= w[1]));
        for i in 0..total {
            let p = phase_of(&ends, i);
            prop_assert!(i < ends[p] && (p == 0 || i >= ends[p - 1]));
        }
    }

    /// Whatever the counts, a step never names a phase past the next one, and a rollout
    /// that is not running never moves.
    #[test]
    fn a_step_moves_one_phase_at_most(
        phase in 0usize..3,
        per in proptest::collection::vec(proptest::collection::vec(0usize..7, 0..20), 3),
        now in 0u64..4_000_000,
        running in any::<bool>(),
    ) {
        let s = spec(vec![Size::Count(1), Size::Percent(10), Size::Percent(100)]);
        let states: Vec<Vec<NodeState>> = per
            .iter()
            .map(|p| p.iter().map(|&i| NodeState::ALL[i]).collect())
            .collect();
        let refs: Vec<&[NodeState]> = states.iter().map(Vec::as_slice).collect();
        let mut f = facts(&s, phase, now);
        if !running {
            f.state = State::Halted;
        }
        match advance(&f, &counts(&refs)) {
            Step::Start(p) => prop_assert_eq!(p, phase + 1),
            Step::Wait => {}
            _ if !running => prop_assert!(false, "a halted rollout moved"),
            _ => {}
        }
    }
}

#[test]
fn a_phase_starts_when_the_previous_succeeded_or_waited() {
    use NodeState::*;
    let mut s = spec(vec![Size::Count(1), Size::Percent(100)]);
    let c = counts(&[&[Queued], &[Pending, Pending]]);
    assert_eq!(advance(&facts(&s, 0, 10), &c), Step::Wait);
    let c = counts(&[&[Succeeded], &[Pending, Pending]]);
    assert_eq!(advance(&facts(&s, 0, 10), &c), Step::Start(1));
    s.phase_wait_s = Some(60);
    let c = counts(&[&[Delivered], &[Pending, Pending]]);
    assert_eq!(advance(&facts(&s, 0, 59_999), &c), Step::Wait);
    assert_eq!(advance(&facts(&s, 0, 60_000), &c), Step::Start(1));
    s.success_threshold_pct = 50;
    let c = counts(&[&[Succeeded, Queued], &[Pending]]);
    assert_eq!(advance(&facts(&s, 0, 1), &c), Step::Start(1));
}

#[test]
fn failures_at_the_threshold_halt_and_the_deadline_expires() {
    use NodeState::*;
    let mut s = spec(vec![Size::Count(10), Size::Percent(100)]);
    s.error_threshold_pct = Some(20);
    s.success_threshold_pct = 90;
    let mut p0 = vec![Succeeded; 9];
    p0.push(Failed);
    let c = counts(&[&p0, &[Pending; 5]]);
    assert_eq!(advance(&facts(&s, 0, 1), &c), Step::Start(1), "10 % < 20 %");
    p0[0] = Expired;
    let c = counts(&[&p0, &[Pending; 5]]);
    assert_eq!(
        advance(&facts(&s, 0, 1), &c),
        Step::Halt { failed: 2, of: 10 },
        "expired counts as a failure"
    );
    let mut resumed = facts(&s, 0, 1);
    resumed.forgiven = 2;
    assert_eq!(
        advance(&resumed, &c),
        Step::Wait,
        "a resume forgives what failed before it"
    );
    s.error_threshold_pct = None;
    assert_eq!(
        advance(&facts(&s, 0, 1), &c),
        Step::Wait,
        "no threshold: never halts"
    );
    assert_eq!(advance(&facts(&s, 0, 3_600_000), &c), Step::Expire);
}

#[test]
fn the_last_phase_completes_once_every_node_is_final() {
    use NodeState::*;
    let mut s = spec(vec![Size::Count(1), Size::Percent(100)]);
    s.error_threshold_pct = None;
    let c = counts(&[&[Succeeded], &[Succeeded, Queued]]);
    assert_eq!(advance(&facts(&s, 1, 1), &c), Step::Wait);
    let c = counts(&[&[Succeeded], &[Succeeded, Failed]]);
    assert_eq!(advance(&facts(&s, 1, 1), &c), Step::Complete);
    s.dynamic = true;
    assert_eq!(
        advance(&facts(&s, 1, 1), &c),
        Step::Wait,
        "a dynamic rollout waits for new targets until its deadline"
    );
}

#[test]
fn outcomes_by_action() {
    use NodeState::*;
    let cmd = spec(vec![]).action;
    let seen = |m: &str| Seen {
        message: Some(m.into()),
        ..Seen::default()
    };
    assert_eq!(outcome(&cmd, 0, Queued, &seen("queued")), None);
    assert_eq!(
        outcome(&cmd, 0, Queued, &seen("delivered")),
        Some((Succeeded, None))
    );
    let rejected = Seen {
        reason: Some("node_revoked".into()),
        ..seen("rejected")
    };
    assert_eq!(
        outcome(&cmd, 0, Queued, &rejected),
        Some((Failed, Some("node_revoked".into())))
    );
    assert_eq!(
        outcome(&cmd, 0, Queued, &seen("expired")).unwrap().0,
        Expired
    );
    let tool = Action::ToolCall {
        tool_name: "t".into(),
        tool_args: json!({}),
    };
    assert_eq!(
        outcome(&tool, 0, Queued, &seen("delivered")),
        Some((Delivered, None))
    );
    assert_eq!(outcome(&tool, 0, Delivered, &seen("delivered")), None);
    let failed = Seen {
        result: Some(Err("tool_failed".into())),
        ..seen("delivered")
    };
    assert_eq!(
        outcome(&tool, 0, Delivered, &failed),
        Some((Failed, Some("tool_failed".into())))
    );
    let desired = Action::Desired(json!({"a": 1}));
    let at = |v: u64, in_sync: bool| Seen {
        node_desired_version: v,
        in_sync,
        ..Seen::default()
    };
    assert_eq!(outcome(&desired, 3, Queued, &at(2, true)), None);
    assert_eq!(
        outcome(&desired, 3, Queued, &at(3, false)),
        Some((Delivered, None))
    );
    assert_eq!(
        outcome(&desired, 3, Delivered, &at(4, true)),
        Some((Succeeded, None))
    );
}

#[test]
fn specs_are_checked() {
    let mut s = spec(vec![]);
    assert!(s.check().is_ok());
    s.deadline_s = MAX_DEADLINE_S + 1;
    assert!(s.check().is_err());
    let mut s = spec(vec![Size::Count(0)]);
    assert!(s.check().is_err());
    s = spec(vec![]);
    s.error_threshold_pct = Some(0);
    assert!(s.check().is_err());
    let parsed: Spec =
        serde_json::from_value(json!({"selector": "site=north", "action": {"desired": {"x": 1}}}))
            .unwrap();
    assert_eq!(
        (
            parsed.success_threshold_pct,
            parsed.deadline_s,
            parsed.phases.len()
        ),
        (100, DEFAULT_DEADLINE_S, 0)
    );
    assert!(serde_json::from_value::<Spec>(
        json!({"selector": "", "action": {"desired": {}}, "x": 1})
    )
    .is_err());
}
