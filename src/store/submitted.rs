//! The handle a write call returns: a write already on its way to the writer, to be
//! awaited or waited for.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::sync::oneshot;

use super::error::StoreError;
use super::ops::OpOutcome;

/// A submitted write: `.await` it, or `.wait()` from a thread that is not a runtime
/// worker. The write is already on its way when this exists.
pub struct Submitted<T> {
    rx: Result<oneshot::Receiver<Result<Vec<OpOutcome>, StoreError>>, StoreError>,
    map: fn(Vec<OpOutcome>) -> Result<T, StoreError>,
}

impl<T> Submitted<T> {
    /// A handle on the reply `rx` (or on the error that kept the write from being
    /// submitted), answered through `map`.
    pub(super) fn new(
        rx: Result<oneshot::Receiver<Result<Vec<OpOutcome>, StoreError>>, StoreError>,
        map: fn(Vec<OpOutcome>) -> Result<T, StoreError>,
    ) -> Self {
        Submitted { rx, map }
    }

    /// Blocks until the batch is durable. Panics if called on an async runtime thread
    /// (tokio forbids blocking there) — use `.await` in async code.
    pub fn wait(self) -> Result<T, StoreError> {
        let rx = self.rx?;
        let out = rx.blocking_recv().map_err(|_| StoreError::Closed)??;
        (self.map)(out)
    }
}

impl<T> Future for Submitted<T> {
    type Output = Result<T, StoreError>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let rx = match &mut this.rx {
            Ok(rx) => rx,
            Err(e) => return Poll::Ready(Err(e.clone())),
        };
        match Pin::new(rx).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(_)) => Poll::Ready(Err(StoreError::Closed)),
            Poll::Ready(Ok(Err(e))) => Poll::Ready(Err(e)),
            Poll::Ready(Ok(Ok(out))) => Poll::Ready((this.map)(out)),
        }
    }
}
