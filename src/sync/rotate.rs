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
        let Some(rot) = self.deps.node.pending_rotation() else {
            return;
        };
        let path = self.t.node_path("rotate");
        let answer: Result<super::wire::RotateAnswer, SyncError> =
            self.t.post(&path, &rot, self.now()).await;
        let outcome = match answer {
            Ok(_) => self.deps.node.rotation_accepted(rot).await,
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
