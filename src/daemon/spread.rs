//! CPU-bound work over a batch (opening envelopes: signature checks and decryption) on
//! all cores, shared by the node's receive pipeline and the gateway's uploads.
//!
//! Each worker takes the next item not yet taken until none is left, so a batch ends
//! when the last item does, whichever core was busy with something else meanwhile.
//! Splitting the batch into fixed parts, one per core, made it wait for the part
//! whose core the other role or the store's writer was also using (on the node's
//! pulls: 500 envelopes took 50–60 ms to open against ~30 ms of crypto per core).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Cores used at most.
const MAX_WORKERS: usize = 8;

/// `f` of every item, in the items' order, and the items back. Below `parallel_from`
/// items (or on one core) it runs on the calling thread. `None` marks an item whose
/// worker panicked (a bug): the caller decides what that means for the batch.
pub async fn on_all_cores<T, R, F>(
    items: Vec<T>,
    parallel_from: usize,
    f: F,
) -> (Vec<T>, Vec<Option<R>>)
where
    T: Send + Sync + 'static,
    R: Send + 'static,
    F: Fn(&T) -> R + Send + Sync + 'static,
{
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(MAX_WORKERS);
    let n = items.len();
    if n < parallel_from || cores == 1 {
        let out = items.iter().map(|t| Some(f(t))).collect();
        return (items, out);
    }
    let items = Arc::new(items);
    let next = Arc::new(AtomicUsize::new(0));
    let f = Arc::new(f);
    let jobs: Vec<_> = (0..cores.min(n))
        .map(|_| {
            let (items, next, f) = (items.clone(), next.clone(), f.clone());
            tokio::task::spawn_blocking(move || {
                let mut mine = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(t) = items.get(i) else {
                        return mine;
                    };
                    mine.push((i, f(t)));
                }
            })
        })
        .collect();
    let mut out: Vec<Option<R>> = (0..n).map(|_| None).collect();
    for j in jobs {
        match j.await {
            Ok(part) => {
                for (i, r) in part {
                    out[i] = Some(r);
                }
            }
            Err(e) => tracing::error!(event = "internal_error", detail = %e),
        }
    }
    // Every worker has ended (joined above), so the last reference is ours.
    let items = Arc::try_unwrap(items).unwrap_or_else(|_| unreachable!("workers joined"));
    (items, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_item_once_in_order_with_the_items_back() {
        let items: Vec<u64> = (0..1000).collect();
        let (back, out) = on_all_cores(items.clone(), 8, |x| x * 2).await;
        assert_eq!(back, items);
        let out: Vec<u64> = out.into_iter().map(Option::unwrap).collect();
        assert_eq!(out, items.iter().map(|x| x * 2).collect::<Vec<_>>());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panicking_item_is_none_and_the_rest_of_its_worker_too() {
        let items: Vec<u64> = (0..100).collect();
        let (_, out) = on_all_cores(items, 8, |x| {
            assert!(*x != 40, "boom");
            *x
        })
        .await;
        assert!(out[40].is_none());
        // The other worker went on to the end of the batch.
        assert!(out[99].is_some() || out[98].is_some());
    }

    #[tokio::test]
    async fn a_small_batch_runs_inline() {
        let (_, out) = on_all_cores(vec![1, 2, 3], 8, |x| x + 1).await;
        assert_eq!(out, vec![Some(2), Some(3), Some(4)]);
    }
}
