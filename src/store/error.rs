//! What a store call can fail with, and how engine and I/O errors map onto it.

use super::engine::EngineError;

/// Everything a store call can fail with. Cloneable: one failed group commit answers
/// every caller of the group.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("queue full")]
    QueueFull { retry_after_s: u64 },
    #[error("storage full")]
    StorageFull,
    #[error("message too large: {size} bytes (max {max})")]
    TooLarge { size: u64, max: u64 },
    #[error("message already expired")]
    Expired,
    #[error("invalid input: {0}")]
    Invalid(String),
    #[error("not found")]
    NotFound,
    #[error("audit index {got} does not extend the log (length {expected})")]
    AuditIndex { expected: u64, got: u64 },
    #[error("store schema version {found} is newer than this binary supports ({supported}); upgrade outpost or restore a backup")]
    SchemaTooNew { found: u64, supported: u64 },
    #[error("store corrupt: {0}")]
    Corrupt(String),
    #[error("storage engine: {0}")]
    Engine(String),
    #[error("i/o: {0}")]
    Io(String),
    #[error("store is closed")]
    Closed,
}

impl StoreError {
    pub(crate) fn from_io(what: &str, e: &std::io::Error) -> Self {
        match EngineError::from_io(e) {
            EngineError::Full(_) => StoreError::StorageFull,
            _ => StoreError::Io(format!("{what}: {e}")),
        }
    }
}

impl From<EngineError> for StoreError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::Full(_) => StoreError::StorageFull,
            EngineError::Corrupt(m) => StoreError::Corrupt(m),
            EngineError::Other(m) => StoreError::Engine(m),
        }
    }
}
