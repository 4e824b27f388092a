//! The console's read model without HTTP: filter, sort, pages, totals, "since when".

use super::*;

fn view(id: &str, liveness: &'static str, last_seen: Option<u64>, depth: u64) -> NodeView {
    NodeView {
        node_id: id.into(),
        last_seen,
        liveness,
        polling: false,
        can_connect: true,
        queue_depth: depth,
        oldest_age_s: depth * 10,
        audit_size: 0,
        agent_version: None,
        in_sync: true,
        labels: Default::default(),
    }
}

fn ev(ts_ms: u64, event: GatewayEvent) -> Arc<Event> {
    Arc::new(Event {
        id: ts_ms,
        ts_ms,
        event,
    })
}

#[test]
fn never_seen_is_its_own_label_and_each_state_says_since_when() {
    assert_eq!(liveness_label(&view("n", "offline", None, 0)), "never");
    assert_eq!(liveness_label(&view("n", "offline", Some(5), 0)), "offline");
    let polling = NodeView {
        polling: true,
        ..view("n", "online", None, 0)
    };
    assert_eq!(liveness_label(&polling), "online");
    assert_eq!(liveness_since("online", Some(9), Some(3), 1), Some(3));
    assert_eq!(liveness_since("online", Some(9), None, 1), Some(9));
    assert_eq!(
        liveness_since("stale", Some(9), None, 1),
        Some(9 + ONLINE_MS)
    );
    assert_eq!(
        liveness_since("offline", Some(9), None, 1),
        Some(9 + STALE_MS)
    );
    assert_eq!(liveness_since("dead", Some(9), None, 1), Some(9 + DEAD_MS));
    assert_eq!(liveness_since("never", None, None, 1), Some(1));
}

#[test]
fn rows_take_online_since_from_the_last_node_online_event() {
    let events = vec![
        ev(
            10,
            GatewayEvent::NodeOnline {
                node_id: "node:a".into(),
            },
        ),
        ev(
            20,
            GatewayEvent::NodeOffline {
                node_id: "node:a".into(),
            },
        ),
        ev(
            30,
            GatewayEvent::NodeOnline {
                node_id: "node:a".into(),
            },
        ),
    ];
    let r = rows(
        vec![
            view("node:a", "online", Some(35), 0),
            view("node:b", "dead", Some(1), 2),
        ],
        &events,
        0,
    );
    assert_eq!(r[0].since_ms, Some(30));
    assert_eq!(r[1].since_ms, Some(1 + DEAD_MS));
}

#[test]
fn filter_sort_and_pages_cover_every_node_once() {
    let nodes: Vec<NodeView> = (0..450)
        .map(|i| {
            let l = ["online", "stale", "offline"][i % 3];
            view(&format!("node:n{i:04}"), l, Some(i as u64), (i % 7) as u64)
        })
        .collect();
    let all = rows(nodes, &[], 0);
    let t = totals(&all);
    assert_eq!(
        (t.nodes, t.online, t.stale, t.offline),
        (450, 150, 150, 150)
    );
    assert_eq!(t.queued, all.iter().map(|r| r.queue_depth).sum::<u64>());
    let mut seen = Vec::new();
    for p in 1..=3 {
        let q = FleetQuery {
            page: p,
            ..FleetQuery::default()
        };
        let (rows, matched, page, pages) = page(all.clone(), &q);
        assert_eq!((matched, page, pages), (450, p, 3));
        seen.extend(rows.into_iter().map(|r| r.node_id));
    }
    assert_eq!(seen.len(), 450);
    assert!(
        seen.windows(2).all(|w| w[0] < w[1]),
        "sorted by id, no repeats"
    );
    // A page past the end shows the last one.
    let (_, _, page_n, _) = page(
        all.clone(),
        &FleetQuery {
            page: 99,
            ..FleetQuery::default()
        },
    );
    assert_eq!(page_n, 3);
    // Filter by id substring (any case) or by liveness label.
    let q = FleetQuery {
        filter: "N01".into(),
        ..FleetQuery::default()
    };
    let (rows, matched, _, pages) = page(all.clone(), &q);
    assert_eq!((matched, pages), (100, 1));
    assert!(rows.iter().all(|r| r.node_id.contains("n01")));
    let q = FleetQuery {
        filter: "stale".into(),
        ..FleetQuery::default()
    };
    assert_eq!(page(all.clone(), &q).1, 150);
    // Deepest queue first, ties by id (reversed with the order).
    let q = FleetQuery {
        sort: SortKey::Queue,
        descending: true,
        ..FleetQuery::default()
    };
    let (rows, ..) = page(all.clone(), &q);
    assert_eq!(rows[0].queue_depth, 6);
    assert!(rows
        .windows(2)
        .all(|w| w[0].queue_depth >= w[1].queue_depth));
    let q = FleetQuery {
        sort: SortKey::Liveness,
        ..FleetQuery::default()
    };
    let (rows, ..) = page(all, &q);
    assert_eq!(rows[0].liveness, "online");
    assert_eq!(SortKey::parse("last_seen"), Some(SortKey::LastSeen));
    assert_eq!(SortKey::parse("bogus"), None);
}

#[test]
fn rows_carry_version_and_sync_and_the_totals_count_those_out_of_sync() {
    let nodes = vec![
        NodeView {
            agent_version: Some("0.9.1".into()),
            in_sync: false,
            ..view("node:a", "online", Some(1), 0)
        },
        NodeView {
            agent_version: Some("0.9.0".into()),
            ..view("node:b", "online", Some(1), 0)
        },
        NodeView {
            in_sync: false,
            ..view("node:c", "dead", Some(1), 0)
        },
    ];
    let all = rows(nodes, &[], 0);
    assert_eq!(all[0].agent_version.as_deref(), Some("0.9.1"));
    assert!(!all[0].in_sync && all[1].in_sync);
    assert_eq!(totals(&all).out_of_sync, 2);
    let q = FleetQuery {
        sort: SortKey::Sync,
        ..FleetQuery::default()
    };
    let ids: Vec<String> = page(all.clone(), &q)
        .0
        .into_iter()
        .map(|r| r.node_id)
        .collect();
    assert_eq!(ids, ["node:a", "node:c", "node:b"], "out of sync first");
    let q = FleetQuery {
        sort: SortKey::Agent,
        descending: true,
        ..FleetQuery::default()
    };
    assert_eq!(page(all, &q).0[0].node_id, "node:a");
    assert_eq!(SortKey::parse("in_sync"), Some(SortKey::Sync));
}
