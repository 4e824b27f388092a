//! Node liveness as the gateway reports it (PROTOCOL §11 `GET /v1/nodes`): a pure function of
//! when the node was last heard from and whether it is holding a long-poll right now.

/// A node holding an open long-poll is online regardless of age: it is waiting for us.
pub const ONLINE_MS: u64 = 30_000;
pub const STALE_MS: u64 = 100_000;
pub const DEAD_MS: u64 = 300_000;

/// A node that long-polls re-polls as soon as a poll ends (after its chores): this long
/// after its last request ended without a new one, it is not listening any more.
pub const REPOLL_GRACE_MS: u64 = 3_000;

/// How long a `not_queueable` command accepted for a listening node lives at most: it
/// goes out at once on a held long-poll, or on the poll that follows within
/// [`REPOLL_GRACE_MS`]. Not delivered by then, it expires rather than reach the node
/// late, whatever the gateway believed about the node when it accepted it.
pub const NOT_QUEUEABLE_TTL_S: u64 = 10;

/// Can a message sent now reach the node now? Only while it holds a long-poll, or within
/// [`REPOLL_GRACE_MS`] of its last request (between two polls) unless its last poll
/// ended because it closed the connection (`left`: it went away, it is not between two
/// polls). `not_queueable` commands are refused otherwise: queued, they would be
/// delivered later.
pub fn reachable_now(last_seen_ms: Option<u64>, polling: bool, left: bool, now_ms: u64) -> bool {
    polling
        || (!left && last_seen_ms.is_some_and(|seen| now_ms.saturating_sub(seen) < REPOLL_GRACE_MS))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    Online,
    Stale,
    Offline,
    Dead,
}

impl Liveness {
    pub fn as_str(self) -> &'static str {
        match self {
            Liveness::Online => "online",
            Liveness::Stale => "stale",
            Liveness::Offline => "offline",
            Liveness::Dead => "dead",
        }
    }
}

/// `online` < 30 s (or polling now), `stale` < 100 s, `dead` ≥ 5 min, `offline` between
/// those and for a node never seen since the gateway started.
pub fn classify(last_seen_ms: Option<u64>, polling: bool, now_ms: u64) -> Liveness {
    if polling {
        return Liveness::Online;
    }
    let Some(seen) = last_seen_ms else {
        return Liveness::Offline;
    };
    let age = now_ms.saturating_sub(seen);
    if age < ONLINE_MS {
        Liveness::Online
    } else if age < STALE_MS {
        Liveness::Stale
    } else if age >= DEAD_MS {
        Liveness::Dead
    } else {
        Liveness::Offline
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reachable_only_while_polling_or_between_polls() {
        assert!(reachable_now(None, true, false, 10));
        assert!(!reachable_now(None, false, false, 10));
        assert!(reachable_now(
            Some(1_000),
            false,
            false,
            1_000 + REPOLL_GRACE_MS - 1
        ));
        assert!(!reachable_now(
            Some(1_000),
            false,
            false,
            1_000 + REPOLL_GRACE_MS
        ));
        // Online for liveness purposes, but not listening: not reachable now.
        assert_eq!(classify(Some(1_000), false, 10_000), Liveness::Online);
        assert!(!reachable_now(Some(1_000), false, false, 10_000));
    }

    /// A node whose poll ended with its connection closed is not between two polls.
    #[test]
    fn a_node_that_hung_up_gets_no_grace() {
        assert!(!reachable_now(Some(1_000), false, true, 1_001));
        // Holding a poll again (here or at another replica) is listening.
        assert!(reachable_now(Some(1_000), true, true, 1_001));
    }

    #[test]
    fn boundaries() {
        let now = 1_000_000;
        assert_eq!(classify(None, false, now), Liveness::Offline);
        assert_eq!(classify(None, true, now), Liveness::Online);
        assert_eq!(classify(Some(now - 29_999), false, now), Liveness::Online);
        assert_eq!(classify(Some(now - 30_000), false, now), Liveness::Stale);
        assert_eq!(classify(Some(now - 99_999), false, now), Liveness::Stale);
        assert_eq!(classify(Some(now - 100_000), false, now), Liveness::Offline);
        assert_eq!(classify(Some(now - 299_999), false, now), Liveness::Offline);
        assert_eq!(classify(Some(now - 300_000), false, now), Liveness::Dead);
        assert_eq!(classify(Some(now - 900_000), true, now), Liveness::Online);
        // A clock that went backwards never makes a node look older.
        assert_eq!(classify(Some(now + 5_000), false, now), Liveness::Online);
    }
}
