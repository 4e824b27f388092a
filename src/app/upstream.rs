//! Starting the node's link to its gateway (the sync loop), when `[upstream]` is set.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::core::NodeCore;

pub fn start(core: &Arc<NodeCore>, tracker: &TaskTracker, shutdown: CancellationToken) {
    let _ = (core, tracker, shutdown);
}
