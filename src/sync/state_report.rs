//! Reporting the node's state (PROTOCOL §16.5): what goes in a report ([`plan`], pure)
//! and the worker's step that reads, sends and remembers it ([`Worker::report_state`]).
//!
//! A report carries the desired version the node holds, its inventory when it moved
//! from the one last taken on this connection (`Inventory::moved_from`), and its reported
//! document when its version is above the one last taken. The first report of a
//! connection carries everything. With nothing moved, no request goes: the minute's
//! inventory look costs file reads, not a request nor a write.

use super::machine::Event;
use super::transport::SyncError;
use super::wire::{ReportAnswer, StateReport};
use super::worker::Worker;
use crate::fleet::Inventory;

/// What the gateway took on this connection.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sent {
    pub inventory: Option<Inventory>,
    pub reported_version: u64,
    /// The desired version the last report said the node holds.
    pub desired_version: u64,
}

/// What a report carries, if one is worth sending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    pub inventory: bool,
    pub reported: bool,
}

/// The report due now: everything when `fresh` (the first of a connection: the reported
/// document only once there is one); otherwise the inventory if it moved from what was
/// sent and the reported document if it is newer than what was sent; `None` when
/// neither.
pub fn plan(fresh: bool, sent: &Sent, reported_version: u64, now: &Inventory) -> Option<Plan> {
    if fresh {
        return Some(Plan {
            inventory: true,
            reported: reported_version > 0,
        });
    }
    let p = Plan {
        inventory: sent.inventory.as_ref().is_none_or(|s| now.moved_from(s)),
        reported: reported_version > sent.reported_version,
    };
    (p.inventory || p.reported).then_some(p)
}

/// A gateway without `POST …/report` (one older than PROTOCOL §16) answers it 404 or
/// 405: that is not a broken link, and ending the connection for it would keep the
/// node from ever long-polling such a gateway.
fn unsupported(e: &SyncError) -> bool {
    matches!(
        e,
        SyncError::Status {
            status: 404 | 405,
            ..
        }
    )
}

impl Worker {
    /// [`super::Action::ReportState`]: read what is due, send it if anything is.
    pub(super) async fn report_state(&mut self, fresh: bool) -> Event {
        if fresh {
            self.state_sent = Sent::default();
        }
        let node = self.deps.node.clone();
        let held = node.state_versions();
        let inventory = node.inventory().await;
        // A desired version stored since the last report is news too: the gateway
        // counts on it (`node_desired_version`, a rollout's delivery).
        let desired_moved = held.desired != self.state_sent.desired_version;
        let Some(p) = plan(fresh, &self.state_sent, held.reported, &inventory).or(desired_moved
            .then_some(Plan {
                inventory: false,
                reported: false,
            }))
        else {
            return Event::StateReported;
        };
        let reported = match p.reported {
            true => match node.reported_state() {
                Ok(r) => Some(r),
                Err(e) => return self.fail(&SyncError::Setup(format!("reported state: {e}"))),
            },
            false => None,
        };
        let body = StateReport {
            desired_version: held.desired,
            inventory: p.inventory.then(|| inventory.clone()),
            reported,
        };
        let pq = self.t.node_path("report");
        match self.t.post::<_, ReportAnswer>(&pq, &body, self.now()).await {
            Ok(answer) => {
                self.state_sent.desired_version = body.desired_version;
                if let Some(r) = &body.reported {
                    self.state_sent.reported_version = r.version;
                    if answer.reported_version < r.version {
                        tracing::warn!(
                            event = "report_not_kept",
                            sent = r.version,
                            held = answer.reported_version
                        );
                    }
                }
                if p.inventory {
                    self.state_sent.inventory = Some(inventory);
                }
                Event::StateReported
            }
            Err(e) if unsupported(&e) => {
                if fresh {
                    tracing::info!(event = "report_unsupported", error = %e, detail = "the gateway takes no state reports (older than PROTOCOL §16); state stays local");
                }
                // Asked again at the next look, not at once: `Sent` is unchanged.
                Event::StateReported
            }
            Err(e) => self.fail(&e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn inv(free: u64, fw: &str) -> Inventory {
        Inventory {
            agent_version: "1".into(),
            arch: "arm".into(),
            data_free_bytes: Some(free),
            facts: [("firmware".to_string(), fw.to_string())].into(),
            ..Inventory::default()
        }
    }

    #[test]
    fn a_fresh_report_carries_everything_there_is() {
        let sent = Sent {
            inventory: Some(inv(100, "a")),
            reported_version: 9,
            desired_version: 0,
        };
        let all = Plan {
            inventory: true,
            reported: true,
        };
        assert_eq!(plan(true, &sent, 9, &inv(100, "a")), Some(all));
        assert_eq!(
            plan(true, &Sent::default(), 0, &inv(100, "a")),
            Some(Plan {
                inventory: true,
                reported: false
            }),
            "no reported document before the first write"
        );
    }

    #[test]
    fn later_reports_carry_what_moved() {
        let sent = Sent {
            inventory: Some(inv(1_000_000, "a")),
            reported_version: 3,
            desired_version: 0,
        };
        assert_eq!(
            plan(false, &sent, 3, &inv(990_000, "a")),
            None,
            "1 % less free: nothing"
        );
        assert_eq!(
            plan(false, &sent, 3, &inv(1_000_000, "b")),
            Some(Plan {
                inventory: true,
                reported: false
            })
        );
        assert_eq!(
            plan(false, &sent, 4, &inv(1_000_000, "a")),
            Some(Plan {
                inventory: false,
                reported: true
            })
        );
        assert_eq!(
            plan(false, &Sent::default(), 0, &inv(1, "a")),
            Some(Plan {
                inventory: true,
                reported: false
            }),
            "nothing taken yet on this connection"
        );
    }

    proptest! {
        /// Once a report was taken, nothing changed means no request, whatever the
        /// small moves of free disk (under 5 %).
        #[test]
        fn nothing_changed_sends_nothing(free in 1_000u64..1_000_000_000, pct in 0u64..5, v in 0u64..10) {
            let sent = Sent { inventory: Some(inv(free, "a")), reported_version: v, desired_version: 0 };
            let now = inv(free - free * pct / 100, "a");
            prop_assert_eq!(plan(false, &sent, v, &now), None);
            // And a reported version at or below the one taken is not sent again.
            prop_assert_eq!(plan(false, &sent, v.saturating_sub(1), &now), None);
        }
    }
}
