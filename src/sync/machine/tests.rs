use proptest::prelude::*;

use super::*;

fn m() -> Machine {
    Machine::new(MachineConfig {
        poll_wait_s: 25,
        flush_batch: 50,
        pull_batch: 400,
        audit_batch: 2_000,
        stall_retry_ms: 2_000,
        outbox_every_ms: 5_000,
        audit_every_ms: 30_000,
        revocations_every_ms: 60_000,
        inventory_every_ms: 60_000,
        retry_max_ms: 300_000,
    })
}

#[test]
fn reconnect_order_is_count_then_flush_then_live() {
    let mut s = m();
    assert_eq!(
        s.handle(Event::Start, 0),
        Action::Pull {
            wait_s: 0,
            max: 400
        }
    );
    assert_eq!(s.phase(), Phase::Handshake);
    // 120 pending, took 50: keep flushing without waiting.
    assert_eq!(
        s.handle(
            Event::Pulled {
                pending_count: 120,
                received: 50,
                stalled: false
            },
            1
        ),
        Action::Pull {
            wait_s: 0,
            max: 400
        }
    );
    assert_eq!(s.phase(), Phase::Flushing);
    assert_eq!(
        s.handle(
            Event::Pulled {
                pending_count: 70,
                received: 50,
                stalled: false
            },
            2
        ),
        Action::Pull {
            wait_s: 0,
            max: 400
        }
    );
    // Drained: now the outbox (dirty since start), then audit, revocations, the
    // connection's first state report, long-poll.
    assert_eq!(
        s.handle(
            Event::Pulled {
                pending_count: 20,
                received: 20,
                stalled: false
            },
            3
        ),
        Action::Push { max: 50 }
    );
    assert_eq!(s.phase(), Phase::Live);
    assert_eq!(
        s.handle(Event::Pushed { more: false }, 4),
        Action::SyncAudit { max_entries: 2_000 }
    );
    assert_eq!(s.handle(Event::AuditSynced, 5), Action::FetchRevocations);
    assert_eq!(
        s.handle(Event::RevocationsFetched, 6),
        Action::ReportState { fresh: true }
    );
    assert_eq!(
        s.handle(Event::StateReported, 7),
        Action::Pull {
            wait_s: 25,
            max: 400
        }
    );
    assert!(s.connected());
}

#[test]
fn failure_backs_off_on_the_spec_schedule_and_success_resets() {
    let mut s = m();
    s.handle(Event::Start, 0);
    let fail = |s: &mut Machine, now| {
        s.handle(
            Event::Failed {
                error: "x".into(),
                jitter: 0.0,
                slow: false,
            },
            now,
        )
    };
    assert_eq!(fail(&mut s, 1_000), Action::Wait { until_ms: 6_000 });
    assert!(!s.connected());
    // Too early: keep waiting, even when woken.
    assert_eq!(
        s.handle(Event::Woken, 2_000),
        Action::Wait { until_ms: 6_000 }
    );
    assert_eq!(
        s.handle(Event::Timer, 6_000),
        Action::Pull {
            wait_s: 0,
            max: 400
        }
    );
    assert_eq!(fail(&mut s, 6_000), Action::Wait { until_ms: 16_000 });
    s.handle(Event::Timer, 16_000);
    assert_eq!(fail(&mut s, 16_000), Action::Wait { until_ms: 36_000 });
    s.handle(Event::Timer, 36_000);
    s.handle(
        Event::Pulled {
            pending_count: 0,
            received: 0,
            stalled: false,
        },
        36_100,
    );
    assert_eq!(s.failures(), 0);
    assert_eq!(s.last_ok_ms(), Some(36_100));
    assert_eq!(fail(&mut s, 40_000), Action::Wait { until_ms: 45_000 });
    assert_eq!(s.last_error(), Some("x"));
}

/// The reconnect backoff stops doubling at `retry_max_ms`; the status knows since when
/// the gateway has not answered and when the next attempt goes out.
#[test]
fn the_backoff_stops_at_its_cap_and_says_since_when_and_the_next_attempt() {
    let mut s = Machine::new(MachineConfig {
        retry_max_ms: 15_000,
        ..MachineConfig::default()
    });
    s.handle(Event::Start, 0);
    assert_eq!((s.failing_since_ms(), s.next_attempt_ms()), (None, None));
    let mut now = 1_000;
    let mut waits = Vec::new();
    for _ in 0..5 {
        let a = s.handle(
            Event::Failed {
                error: "x".into(),
                jitter: 0.0,
                slow: false,
            },
            now,
        );
        let Action::Wait { until_ms } = a else {
            panic!("{a:?}")
        };
        assert_eq!(s.next_attempt_ms(), Some(until_ms));
        waits.push(until_ms - now);
        now = until_ms;
        s.handle(Event::Timer, now);
    }
    assert_eq!(waits, [5_000, 10_000, 15_000, 15_000, 15_000]);
    assert_eq!(s.failing_since_ms(), Some(1_000), "the first failure, kept");
    s.handle(
        Event::Pulled {
            pending_count: 0,
            received: 0,
            stalled: false,
        },
        now + 10,
    );
    assert_eq!((s.failing_since_ms(), s.next_attempt_ms()), (None, None));
}

#[test]
fn wake_during_live_pushes_before_polling_again() {
    let mut s = m();
    s.handle(Event::Start, 0);
    s.handle(
        Event::Pulled {
            pending_count: 0,
            received: 0,
            stalled: false,
        },
        1,
    );
    s.handle(Event::Pushed { more: false }, 2);
    s.handle(Event::AuditSynced, 3);
    s.handle(Event::RevocationsFetched, 4);
    assert_eq!(
        s.handle(Event::StateReported, 4),
        Action::Pull {
            wait_s: 25,
            max: 400
        }
    );
    assert_eq!(s.handle(Event::Woken, 5), Action::Push { max: 50 });
    assert_eq!(
        s.handle(Event::Pushed { more: true }, 6),
        Action::Push { max: 50 }
    );
    assert_eq!(
        s.handle(Event::Pushed { more: false }, 7),
        Action::SyncAudit { max_entries: 2_000 }
    );
    assert_eq!(s.handle(Event::Shutdown, 8), Action::Stop);
}

/// The node's store is full: the pulled batch stays upstream, and the next pull waits
/// `stall_retry_ms` instead of spinning on the same envelopes (chores still run).
#[test]
fn a_stalled_pull_waits_before_pulling_again() {
    let mut s = m();
    s.handle(Event::Start, 0);
    let stalled = Event::Pulled {
        pending_count: 30,
        received: 10,
        stalled: true,
    };
    // The outbox is dirty since start: pushed first, then the wait.
    assert_eq!(s.handle(stalled, 10), Action::Push { max: 50 });
    assert_eq!(
        s.handle(Event::Pushed { more: false }, 20),
        Action::SyncAudit { max_entries: 2_000 }
    );
    assert_eq!(s.handle(Event::AuditSynced, 30), Action::FetchRevocations);
    assert_eq!(
        s.handle(Event::RevocationsFetched, 40),
        Action::Wait { until_ms: 2_010 }
    );
    assert_eq!(
        s.handle(Event::Timer, 2_010),
        Action::Pull {
            wait_s: 0,
            max: 400
        }
    );
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        Just(Event::Timer),
        Just(Event::Woken),
        (0u64..300, 0u64..60, any::<bool>()).prop_map(|(p, r, stalled)| Event::Pulled {
            pending_count: p,
            received: r.min(p),
            stalled
        }),
        any::<bool>().prop_map(|more| Event::Pushed { more }),
        Just(Event::AuditSynced),
        Just(Event::RevocationsFetched),
        Just(Event::StateWritten),
        Just(Event::StateReported),
        (-1.0f64..=1.0, any::<bool>()).prop_map(|(jitter, slow)| Event::Failed {
            error: "e".into(),
            jitter,
            slow
        }),
    ]
}

proptest! {
    /// Invariants over any event sequence:
    /// - no live long-poll while the gateway still reports stored messages pending;
    /// - offline, nothing goes on the wire before the retry time;
    /// - backoff is within the PROTOCOL §14 bounds (≤ 300 s + 10 %), never zero after a failure;
    /// - shutdown always stops.
    #[test]
    fn invariants(events in proptest::collection::vec((event(), 0u64..20_000), 1..200)) {
        let mut s = m();
        let mut now = 0u64;
        let mut last_remaining = 0u64;
        let mut stalled_until = 0u64;
        s.handle(Event::Start, now);
        for (ev, dt) in events {
            now += dt;
            let was_offline = s.phase() == Phase::Offline;
            let retry_at = s.retry_at_ms();
            if let Event::Pulled { pending_count, received, stalled } = &ev {
                last_remaining = pending_count - received;
                if *stalled {
                    stalled_until = now + 2_000;
                }
            }
            let failed = matches!(ev, Event::Failed { .. });
            let halves = matches!(ev, Event::Failed { slow: true, .. })
                && s.in_flight().is_some_and(|k| s.can_shrink(k));
            if failed {
                stalled_until = 0;
            }
            let idle = matches!(ev, Event::Timer | Event::Woken);
            let a = s.handle(ev, now);
            if let Action::Pull { wait_s, .. } = a {
                // A pull the node could not store is not repeated at once (it would
                // spin); reconnecting after a failure starts over.
                if !was_offline {
                    prop_assert!(now >= stalled_until, "pull {} ms after a stalled one", now + 2_000 - stalled_until);
                }
                if wait_s > 0 {
                    prop_assert_eq!(last_remaining, 0, "live poll while stored messages pending");
                }
            }
            if was_offline && idle && now < retry_at {
                prop_assert!(matches!(a, Action::Wait { .. }), "network action before retry time: {:?}", a);
            }
            if failed {
                let Action::Wait { until_ms } = a else { panic!("failure must wait") };
                if halves {
                    // A slow answer with batches left to halve: the smaller one goes now.
                    prop_assert_eq!(until_ms, now);
                } else {
                    prop_assert!(until_ms > now && until_ms <= now + 330_000);
                }
            }
            match a {
                Action::Pull { max, .. } => prop_assert!((1..=400).contains(&max)),
                Action::Push { max } => prop_assert!((1..=50).contains(&max)),
                Action::SyncAudit { max_entries } => prop_assert!((1..=2_000).contains(&max_entries)),
                _ => {}
            }
            if !matches!(a, Action::Pull { .. }) && matches!(s.phase(), Phase::Handshake) {
                prop_assert!(false, "handshake must be a pull");
            }
        }
        prop_assert_eq!(s.handle(Event::Shutdown, now), Action::Stop);
    }
}

/// A slow answer halves the batch of the request it answered (down to one), and the
/// smaller request goes at once; full batches of that kind that get through double it
/// back, up to the configured size; the other kinds keep their sizes. Before this a pull
/// or upload too large for the link timed out on every retry.
#[test]
fn a_slow_link_halves_the_batch_that_timed_out_and_full_batches_restore_it() {
    let mut s = m();
    let slow = |s: &mut Machine, now| {
        s.handle(
            Event::Failed {
                error: "no answer in time".into(),
                jitter: 0.0,
                slow: true,
            },
            now,
        )
    };
    assert_eq!(
        s.handle(Event::Start, 0),
        Action::Pull {
            wait_s: 0,
            max: 400
        }
    );
    for expect in [200, 100, 50] {
        assert_eq!(slow(&mut s, 10), Action::Wait { until_ms: 10 }, "at once");
        assert_eq!(
            s.handle(Event::Timer, 10),
            Action::Pull {
                wait_s: 0,
                max: expect
            }
        );
    }
    // A connection error (not slow) keeps the size and waits by the schedule.
    assert_eq!(
        s.handle(
            Event::Failed {
                error: "refused".into(),
                jitter: 0.0,
                slow: false,
            },
            10
        ),
        Action::Wait { until_ms: 5_010 }
    );
    assert_eq!(
        s.handle(Event::Timer, 5_010),
        Action::Pull { wait_s: 0, max: 50 }
    );
    // A full pull (50 of 50, more pending) doubles it; the outbox push is untouched.
    assert_eq!(
        s.handle(
            Event::Pulled {
                pending_count: 60,
                received: 50,
                stalled: false
            },
            5_011
        ),
        Action::Pull {
            wait_s: 0,
            max: 100
        }
    );
    // A part-full one (10 of 100) does not.
    assert_eq!(
        s.handle(
            Event::Pulled {
                pending_count: 10,
                received: 10,
                stalled: false
            },
            5_012
        ),
        Action::Push { max: 50 }
    );
    // The push is slow: halved, tried again at once (through the handshake pull).
    assert_eq!(slow(&mut s, 5_013), Action::Wait { until_ms: 5_013 });
    assert_eq!(
        s.handle(Event::Timer, 5_013),
        Action::Pull {
            wait_s: 0,
            max: 100
        }
    );
    assert_eq!(
        s.handle(
            Event::Pulled {
                pending_count: 0,
                received: 0,
                stalled: false
            },
            5_014
        ),
        Action::Push { max: 25 }
    );
    // A full push (more to send) doubles it back to 50, never above.
    assert_eq!(
        s.handle(Event::Pushed { more: true }, 5_015),
        Action::Push { max: 50 }
    );
    assert_eq!(
        s.handle(Event::Pushed { more: true }, 5_016),
        Action::Push { max: 50 }
    );
    // Slow answers beyond what halving can do: the size stays 1 and the schedule
    // applies again.
    for _ in 0..6 {
        slow(&mut s, 5_017);
        s.handle(Event::Timer, 5_017);
        s.handle(
            Event::Pulled {
                pending_count: 0,
                received: 0,
                stalled: false,
            },
            5_017,
        );
    }
    assert_eq!(s.handle(Event::Woken, 5_017), Action::Push { max: 1 });
    assert_eq!(slow(&mut s, 5_018), Action::Wait { until_ms: 10_018 });
}

/// RELIABILITY F2: the gateway said (signed) the node's time is a week ahead. The
/// machine asks for a correction; once time moved back it reconnects at once, whatever
/// it had scheduled with the week-ahead time.
#[test]
fn a_corrected_clock_reconnects_at_once_and_forgets_deadlines_from_the_wrong_time() {
    const WEEK: u64 = 7 * 86_400_000;
    let real = 1_780_000_000_000;
    let mut s = m();
    s.handle(Event::Start, real + WEEK);
    // Failures while a week ahead schedule the retry a week ahead of real time.
    let wait = s.handle(
        Event::Failed {
            error: "401".into(),
            jitter: 0.0,
            slow: false,
        },
        real + WEEK,
    );
    assert_eq!(
        wait,
        Action::Wait {
            until_ms: real + WEEK + 5_000
        }
    );
    assert_eq!(
        s.handle(
            Event::ClockSkew {
                error: "clock_skew".into(),
                gateway_ms: real
            },
            real + WEEK
        ),
        Action::CorrectTime { gateway_ms: real }
    );
    assert_eq!(s.phase(), Phase::Offline);
    assert_eq!(
        s.handle(
            Event::TimeCorrected {
                moved: true,
                jitter: 0.0
            },
            real
        ),
        Action::Pull {
            wait_s: 0,
            max: 400
        },
        "reconnects now, not a week from now"
    );
    assert_eq!(s.phase(), Phase::Handshake);
    // Then live traffic as usual: the outbox first.
    s.handle(
        Event::Pulled {
            pending_count: 0,
            received: 0,
            stalled: false,
        },
        real + 1,
    );
    assert_eq!(s.retry_at_ms(), 0);
}

/// A correction that was refused (the node's clock is still ahead): an ordinary
/// failure, on the backoff schedule, so a node with a wrong clock does not hammer its
/// gateway.
#[test]
fn a_refused_correction_backs_off_like_any_failure() {
    let mut s = m();
    s.handle(Event::Start, 0);
    assert_eq!(
        s.handle(
            Event::ClockSkew {
                error: "clock_skew".into(),
                gateway_ms: 1
            },
            100
        ),
        Action::CorrectTime { gateway_ms: 1 }
    );
    assert_eq!(
        s.handle(
            Event::TimeCorrected {
                moved: false,
                jitter: 0.0
            },
            100
        ),
        Action::Wait { until_ms: 5_100 }
    );
    assert_eq!(s.failures(), 1);
    assert_eq!(s.last_error(), Some("clock_skew"));
}

/// Connected and reported: a local write of reported state ends the long-poll with a
/// report (not fresh); every minute the worker gets to look at the inventory; a failure
/// makes the next connection's report fresh again.
#[test]
fn state_is_reported_on_connect_on_a_write_and_every_minute() {
    let mut s = m();
    s.handle(Event::Start, 0);
    s.handle(
        Event::Pulled {
            pending_count: 0,
            received: 0,
            stalled: false,
        },
        1,
    );
    s.handle(Event::Pushed { more: false }, 2);
    s.handle(Event::AuditSynced, 3);
    assert_eq!(
        s.handle(Event::RevocationsFetched, 4),
        Action::ReportState { fresh: true }
    );
    let poll = Action::Pull {
        wait_s: 25,
        max: 400,
    };
    assert_eq!(s.handle(Event::StateReported, 5), poll);
    assert_eq!(
        s.handle(Event::StateWritten, 6),
        Action::ReportState { fresh: false }
    );
    assert_eq!(s.handle(Event::StateReported, 7), poll);
    // Nothing due before the minute is up (outbox pushes come every 5 s: answer them).
    assert_eq!(s.handle(Event::Timer, 4_000), poll);
    let mut a = s.handle(Event::Timer, 60_007);
    while let Action::Push { .. } | Action::SyncAudit { .. } | Action::FetchRevocations = a {
        a = s.handle(
            match a {
                Action::Push { .. } => Event::Pushed { more: false },
                Action::SyncAudit { .. } => Event::AuditSynced,
                _ => Event::RevocationsFetched,
            },
            60_008,
        );
    }
    assert_eq!(a, Action::ReportState { fresh: false });
    assert_eq!(s.handle(Event::StateReported, 60_009), poll);
    // A write while offline is reported once connected, as part of the fresh report.
    s.handle(
        Event::Failed {
            error: "e".into(),
            jitter: 0.0,
            slow: false,
        },
        60_010,
    );
    s.handle(Event::StateWritten, 60_011);
    let a = s.handle(Event::Timer, 70_000);
    assert!(matches!(a, Action::Pull { wait_s: 0, .. }), "{a:?}");
    s.handle(
        Event::Pulled {
            pending_count: 0,
            received: 0,
            stalled: false,
        },
        70_001,
    );
    s.handle(Event::Pushed { more: false }, 70_002);
    s.handle(Event::AuditSynced, 70_003);
    assert_eq!(
        s.handle(Event::RevocationsFetched, 70_004),
        Action::ReportState { fresh: true }
    );
}

/// What the worker answers to each action, as a well-behaved link would.
fn answer(a: Action) -> Option<Event> {
    Some(match a {
        Action::Pull { .. } => Event::Pulled {
            pending_count: 0,
            received: 0,
            stalled: false,
        },
        Action::Push { .. } => Event::Pushed { more: false },
        Action::SyncAudit { .. } => Event::AuditSynced,
        Action::FetchRevocations => Event::RevocationsFetched,
        Action::ReportState { .. } => Event::StateReported,
        Action::Wait { .. } => Event::Timer,
        Action::CorrectTime { .. } | Action::Stop => return None,
    })
}

proptest! {
    /// Over any events: every connection has a fresh report answered before its first
    /// long-poll, and only one (later reports are not fresh until it reconnects).
    #[test]
    fn every_connection_reports_once_before_the_long_poll(
        events in proptest::collection::vec((event(), 0u64..20_000), 1..200)
    ) {
        let mut s = m();
        let mut now = 0u64;
        let mut a = s.handle(Event::Start, now);
        // A fresh report of this connection was answered.
        let mut reported = false;
        for (ev, dt) in events {
            now += dt;
            // Mostly the answer the action asked for; sometimes the random event. (A
            // report is only ever answered when it was asked for.)
            let ev = match (answer(a), ev) {
                (Some(e), _) if dt % 3 != 0 => e,
                (_, Event::StateReported) if !matches!(a, Action::ReportState { .. }) => Event::Timer,
                (_, ev) => ev,
            };
            if a == (Action::ReportState { fresh: true }) && ev == Event::StateReported {
                reported = true;
            }
            let was_offline = s.phase() == Phase::Offline;
            a = s.handle(ev, now);
            if s.phase() == Phase::Offline {
                // The connection ended.
                reported = false;
            }
            match a {
                Action::Pull { wait_s: 0, .. } if was_offline => reported = false,
                Action::ReportState { fresh: true } => {
                    prop_assert!(!reported, "a second fresh report on one connection");
                }
                Action::Pull { wait_s, .. } if wait_s > 0 => {
                    prop_assert!(reported, "a long-poll before the connection's report");
                }
                _ => {}
            }
        }
    }
}
