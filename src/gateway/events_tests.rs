//! The event bus: event names and frames, and the log's ids and replay.

mod frames {
    use super::super::*;

    #[test]
    fn frame_names_event_and_carries_fields() {
        let f = GatewayEvent::Delivered {
            message_id: "m1".into(),
            node_id: "node:a".into(),
            was_stored: true,
        }
        .sse_frame(7, 42);
        assert!(f.starts_with("id: 7\nevent: delivered\ndata: {"), "{f}");
        assert!(f.contains("\"was_stored\":true"));
        assert!(f.contains("\"type\":\"delivered\""));
        assert!(f.contains("\"ts_ms\":42"));
        assert!(f.ends_with("\n\n"));
    }
}

mod log {
    use super::super::*;

    fn online(n: &str) -> GatewayEvent {
        GatewayEvent::NodeOnline { node_id: n.into() }
    }

    #[test]
    fn local_ids_grow_and_a_resuming_subscriber_gets_what_it_missed() {
        let log = EventLog::local(1_000);
        let mut rx = log.subscribe();
        for n in ["a", "b", "c"] {
            log.publish(5, online(n));
        }
        let ids: Vec<u64> = (0..3).map(|_| rx.try_recv().unwrap().id).collect();
        assert_eq!(ids, [1_000, 1_001, 1_002]);
        let (missed, complete) = log.replay(1_000);
        assert!(complete);
        assert_eq!(
            missed.iter().map(|e| e.id).collect::<Vec<_>>(),
            [1_001, 1_002]
        );
        assert!(log.replay(1_002).0.is_empty());
        // From before the first event: everything, and nothing is known to be missing.
        let (all, complete) = log.replay(0);
        assert_eq!(all.len(), 3);
        assert!(!complete, "ids below the first are unknown to this log");
        let (all, complete) = log.replay(999);
        assert_eq!(all.len(), 3);
        assert!(complete);
    }

    #[test]
    fn the_ring_forgets_the_oldest_and_says_so() {
        let log = EventLog::local(1);
        for _ in 0..REPLAY + 10 {
            log.publish(1, online("a"));
        }
        let (kept, complete) = log.replay(1);
        assert!(!complete);
        assert_eq!(kept.len(), REPLAY);
        assert_eq!(kept.last().unwrap().id, (REPLAY + 10) as u64);
    }

    use crate::gateway::storage::{Fut, NodeSeen, Notice, SharedState};

    /// The replicas' event table as a list; nothing else of the shared state is asked
    /// by the event log.
    struct Table(Vec<(u64, u64, String)>);

    impl SharedState for Table {
        fn events_after(&self, after: u64, limit: usize) -> Fut<'_, Vec<(u64, u64, String)>> {
            let rows: Vec<_> = self
                .0
                .iter()
                .filter(|r| r.0 > after)
                .take(limit)
                .cloned()
                .collect();
            Box::pin(async move { Ok(rows) })
        }
        fn refresh_peer<'a>(&'a self, _: &'a str) -> Fut<'a, ()> {
            unreachable!("the event log reads only events")
        }
        fn append_events(&self, _: Vec<(u64, String)>) -> Fut<'_, u64> {
            unreachable!("the event log reads only events")
        }
        fn sequence_events(&self) -> Fut<'_, u64> {
            unreachable!("the event log reads only events")
        }
        fn node_heard<'a>(&'a self, _: &'a str, _: u64) -> Fut<'a, bool> {
            unreachable!("the event log reads only events")
        }
        fn nodes_polling(&self, _: Vec<String>, _: u64, _: u64) -> Fut<'_, ()> {
            unreachable!("the event log reads only events")
        }
        fn poll_abandoned<'a>(&'a self, _: &'a str, _: u64, _: u64) -> Fut<'a, ()> {
            unreachable!("the event log reads only events")
        }
        fn sweep_offline(&self, _: u64, _: u64) -> Fut<'_, Vec<String>> {
            unreachable!("the event log reads only events")
        }
        fn nodes_seen<'a>(
            &'a self,
            _: &'a [String],
        ) -> Fut<'a, std::collections::HashMap<String, NodeSeen>> {
            unreachable!("the event log reads only events")
        }
        fn notices(&self) -> tokio::sync::broadcast::Receiver<Notice> {
            unreachable!("the event log reads only events")
        }
        fn first_use<'a>(&'a self, _: &'a [u8; 64], _: u64) -> Fut<'a, bool> {
            unreachable!("the event log reads only events")
        }
    }

    /// A subscriber resuming further back than memory holds: locally it lagged; with
    /// replicas the table has the rest, memory's newer events follow without repeats.
    #[tokio::test]
    async fn a_resume_past_memory_reads_the_replicas_table_or_says_it_lagged() {
        let local = EventLog::local(1);
        for _ in 0..REPLAY + 5 {
            local.publish(1, online("a"));
        }
        let m = local.missed(2).await;
        assert!(m.lagged);
        assert_eq!(m.events.len(), REPLAY);

        let json = serde_json::to_string(&online("b")).unwrap();
        let table = Table((3..=5).map(|id| (id, 9, json.clone())).collect());
        let (log, _writer) = EventLog::shared(std::sync::Arc::new(table));
        let at = |id| Event {
            id,
            ts_ms: 9,
            event: online("b"),
        };
        log.deliver(vec![at(5), at(6)]);
        let m = log.missed(1).await;
        assert!(!m.lagged);
        let ids: Vec<u64> = m.events.iter().map(|e| e.id).collect();
        assert_eq!(ids, [3, 4, 5, 6]);
    }

    #[test]
    fn shared_mode_delivers_each_database_event_once_in_id_order() {
        let (log, mut writer) = EventLog::shared(std::sync::Arc::new(Table(Vec::new())));
        let mut rx = log.subscribe();
        log.publish(3, online("a"));
        // Published events go to the writer, not to subscribers…
        assert!(matches!(writer.try_recv().unwrap(), ToWriter::Event(3, e) if e == online("a")));
        assert!(rx.try_recv().is_err());
        // …which get what the database returns, once, even if read twice.
        let read = |id| Event {
            id,
            ts_ms: 3,
            event: online("a"),
        };
        log.deliver(vec![read(7), read(8)]);
        log.deliver(vec![read(8), read(9)]);
        let ids: Vec<u64> = std::iter::from_fn(|| rx.try_recv().ok().map(|e| e.id)).collect();
        assert_eq!(ids, [7, 8, 9]);
        assert_eq!(log.last_id(), 9);
    }
}
