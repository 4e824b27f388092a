//! Why a daemon that listens is not ready yet (a gateway waiting for its database):
//! the start updates it on every retry, and the HTTP edge answers with it
//! (`api::starting`).

use std::sync::{Arc, Mutex};

/// Why the daemon is not ready yet, as the start sees it (updated on every retry).
#[derive(Clone, Default)]
pub struct Starting {
    reason: Arc<Mutex<String>>,
}

impl Starting {
    pub fn new(reason: impl Into<String>) -> Self {
        Self {
            reason: Arc::new(Mutex::new(reason.into())),
        }
    }

    pub fn set(&self, reason: impl Into<String>) {
        *self.reason.lock().unwrap_or_else(|p| p.into_inner()) = reason.into();
    }

    pub fn reason(&self) -> String {
        self.reason
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}
