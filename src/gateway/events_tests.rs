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
    use crate::gateway::storage::Fut;

    fn online(n: &str) -> GatewayEvent {
        GatewayEvent::NodeOnline { node_id: n.into() }
    }

    fn at(id: u64) -> Event {
        Event {
            id,
            ts_ms: 9,
            event: online("a"),
        }
    }

    fn ids(events: &[Arc<Event>]) -> Vec<u64> {
        events.iter().map(|e| e.id).collect()
    }

    /// A state's event table as a list (`None` when it cannot be read), and the newest
    /// id it gave (at least its last row's).
    struct Table(Mutex<Option<Vec<EventRow>>>, u64);

    fn rows(ids: impl IntoIterator<Item = u64>) -> Option<Vec<EventRow>> {
        let json = serde_json::to_string(&online("a")).unwrap();
        Some(ids.into_iter().map(|id| (id, 9, json.clone())).collect())
    }

    impl Table {
        /// Rows with these ids.
        fn of(ids: impl IntoIterator<Item = u64>) -> Self {
            Self(Mutex::new(rows(ids)), 0)
        }

        fn rows(&self) -> Result<Vec<EventRow>, StateError> {
            let rows = self.0.lock().unwrap().clone();
            rows.ok_or_else(|| StateError::Unavailable("down".into()))
        }
    }

    impl EventTable for Table {
        fn append_events(&self, _: Vec<(u64, String)>) -> Fut<'_, ()> {
            unreachable!("the event log only reads the table")
        }
        fn sequence_events(&self) -> Fut<'_, u64> {
            unreachable!("the event log only reads the table")
        }
        fn events_after(&self, after: u64, limit: usize) -> Fut<'_, Vec<EventRow>> {
            let rows = self.rows().map(|rows| {
                rows.into_iter()
                    .filter(|r| r.0 > after)
                    .take(limit)
                    .collect()
            });
            Box::pin(async move { rows })
        }
        fn newest_event(&self) -> Fut<'_, u64> {
            let newest = self.rows().map(|r| r.last().map_or(0, |r| r.0).max(self.1));
            Box::pin(async move { newest })
        }
        fn events_announced(&self) -> tokio::sync::watch::Receiver<u64> {
            unreachable!("the reader task waits on it, not the log")
        }
    }

    #[tokio::test]
    async fn subscribers_get_the_tables_events_and_a_resuming_one_what_it_missed() {
        let (log, _writer) = EventLog::new();
        let mut rx = log.subscribe();
        let table = Table::of(1_000..=1_002);
        log.catch_up(&table).await;
        let got: Vec<u64> = (0..3).map(|_| rx.try_recv().unwrap().id).collect();
        assert_eq!(got, [1_000, 1_001, 1_002]);
        assert_eq!(log.last_id(), 1_002);
        let (missed, complete) = log.replay(1_000);
        assert!(complete);
        assert_eq!(ids(&missed), [1_001, 1_002]);
        assert!(log.replay(1_002).0.is_empty());
        // From before the first event: everything, and nothing is known to be missing.
        let (all, complete) = log.replay(0);
        assert_eq!(all.len(), 3);
        assert!(!complete, "ids below the first are unknown to memory");
        let (all, complete) = log.replay(999);
        assert_eq!(all.len(), 3);
        assert!(complete);
        // What the table gains later is read once, from where memory stopped.
        *table.0.lock().unwrap() = rows(1_000..=1_003);
        log.catch_up(&table).await;
        assert_eq!(rx.try_recv().unwrap().id, 1_003);
        assert!(rx.try_recv().is_err());
    }

    #[tokio::test]
    async fn the_first_read_keeps_the_newest_and_a_resume_further_back_reads_the_table() {
        let (log, _writer) = EventLog::new();
        let newest = (REPLAY + 100) as u64;
        let table = Table::of(1..=newest);
        log.catch_up(&table).await;
        let (kept, complete) = log.replay(100);
        assert!(complete);
        assert_eq!(kept.len(), REPLAY);
        assert!(!log.replay(99).1);
        let m = log.missed(&table, 10).await;
        assert!(!m.lagged);
        // At most REPLAY from the table, then memory's newer ones.
        assert_eq!(ids(&m.events), (11..=newest).collect::<Vec<_>>());
    }

    #[test]
    fn the_ring_forgets_the_oldest_and_says_so() {
        let (log, _writer) = EventLog::new();
        log.deliver((1..=(REPLAY + 10) as u64).map(at).collect());
        let (kept, complete) = log.replay(1);
        assert!(!complete);
        assert_eq!(kept.len(), REPLAY);
        assert_eq!(kept.last().unwrap().id, (REPLAY + 10) as u64);
        assert!(log.replay(10).1);
    }

    /// A subscriber resuming further back than memory holds reads the table; where the
    /// table does not reach back either (or cannot be read), it lagged. Memory's newer
    /// events follow the table's without repeats.
    #[tokio::test]
    async fn a_resume_past_memory_reads_the_table_or_says_it_lagged() {
        let (log, _writer) = EventLog::new();
        let table = Table::of(3..=5);
        log.deliver(vec![at(5), at(6)]);
        let m = log.missed(&table, 2).await;
        assert!(!m.lagged);
        assert_eq!(ids(&m.events), [3, 4, 5, 6]);
        let m = log.missed(&table, 1).await;
        assert!(m.lagged, "event 2 is gone");
        assert_eq!(ids(&m.events), [3, 4, 5, 6]);
        *table.0.lock().unwrap() = None;
        let m = log.missed(&table, 2).await;
        assert!(m.lagged);
        assert_eq!(ids(&m.events), [5, 6]);
    }

    /// After a restart of the embedded engine its table is empty (ids start past the old
    /// ones): a subscriber resuming from before lagged; one resuming from after did not.
    #[tokio::test]
    async fn a_resume_from_before_an_empty_table_lagged() {
        let (log, _writer) = EventLog::new();
        let fresh = Table(Mutex::new(Some(Vec::new())), 99);
        log.catch_up(&fresh).await;
        assert_eq!(log.last_id(), 99);
        let m = log.missed(&fresh, 10).await;
        assert!(m.lagged && m.events.is_empty());
        let m = log.missed(&fresh, 99).await;
        assert!(!m.lagged && m.events.is_empty());
    }

    #[test]
    fn published_events_go_to_the_writer_and_subscribers_get_the_tables_once_in_order() {
        let (log, mut writer) = EventLog::new();
        let mut rx = log.subscribe();
        log.publish(3, online("a"));
        // Published events go to the writer, not to subscribers…
        assert!(matches!(writer.try_recv().unwrap(), ToWriter::Event(3, e) if e == online("a")));
        assert!(rx.try_recv().is_err());
        // …which get what the table returns, once, even if read twice.
        log.deliver(vec![at(7), at(8)]);
        log.deliver(vec![at(8), at(9)]);
        let got: Vec<u64> = std::iter::from_fn(|| rx.try_recv().ok().map(|e| e.id)).collect();
        assert_eq!(got, [7, 8, 9]);
        assert_eq!(log.last_id(), 9);
    }

    #[test]
    fn a_writes_events_are_staged_as_json_and_sequenced_after_it() {
        let (log, mut writer) = EventLog::new();
        let mut staged = log.stage(4, [("m1".to_string(), online("a"))]).unwrap();
        let json = serde_json::to_string(&online("a")).unwrap();
        assert_eq!(staged.take_row(), Some((4, json)));
        assert_eq!(staged.take_rows(), (4, Vec::new()), "taken by the write");
        log.committed(staged);
        assert!(matches!(writer.try_recv().unwrap(), ToWriter::Sequence));
    }
}
