//! The node's own key rotation on its sync link (PROTOCOL §15.7): a statement that
//! `outpost identity rotate` left is sent to the gateway, signed with the key it
//! retires; on the gateway's yes the node switches.

use std::time::Duration;

use super::transport::SyncError;
use super::worker::Worker;

/// How often a connected link looks for a pending key rotation (a file read).
const ROTATION_CHECK: Duration = Duration::from_secs(3);

impl Worker {
    /// Deliver a pending key rotation (PROTOCOL §15.7), asked for at most every
    /// [`ROTATION_CHECK`] while connected. Signed with the current (retiring) key; on the
    /// gateway's yes the node switches. A failure is logged and tried again later: the
    /// rotation waits, nothing else does.
    pub(super) async fn maybe_rotate(&mut self) {
        let now = tokio::time::Instant::now();
        if self
            .rotation_checked
            .is_some_and(|t| now < t + ROTATION_CHECK)
        {
            return;
        }
        self.rotation_checked = Some(now);
        let Some(own) = self.deps.node.pending_rotation() else {
            return;
        };
        let rot = own.statement;
        let mut path = self.t.node_path("rotate");
        if own.no_grace {
            path.push_str("?grace=none");
        }
        let mut answer: Result<super::wire::RotateAnswer, SyncError> =
            self.t.post(&path, &rot, self.now()).await;
        // A no-grace rotation the gateway applied before its answer was lost: the
        // retired key is refused now, and the new one is the node's at the gateway.
        if let (Err(SyncError::Status { status: 401, .. }), Some(next)) = (&answer, &own.next) {
            answer = self.t.post_signed_by(next, &path, &rot, self.now()).await;
        }
        let outcome = match answer {
            Ok(a) => {
                if own.no_grace && !a.grace_ended {
                    tracing::error!(
                        event = "key_rotation_grace_kept",
                        "the gateway did not end the retired key's grace (it does not know \
                         grace=none): run `outpost nodes end-grace` for this node on it"
                    );
                }
                self.deps.node.rotation_accepted(rot).await
            }
            Err(e) => Err(e.to_string()),
        };
        if let Err(e) = outcome {
            tracing::warn!(
                event = "key_rotation_failed",
                error = %e,
                "the key rotation waits: tried again in a few seconds"
            );
        }
    }
}
