//! Node liveness as the gateway reports it (SPEC §6 `GET /v1/nodes`): a pure function of
//! when the node was last heard from and whether it is holding a long-poll right now.

/// A node holding an open long-poll is online regardless of age: it is waiting for us.
pub const ONLINE_MS: u64 = 30_000;
pub const STALE_MS: u64 = 100_000;
pub const DEAD_MS: u64 = 300_000;

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
