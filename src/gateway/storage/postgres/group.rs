//! Group commit of enqueues: commands (and forwards) that arrive while the database
//! is busy committing earlier ones are sent together, pipelined on one connection in
//! one transaction, and committed once. Each caller still gets its own answer, and
//! only after the commit that made its message durable.
//!
//! Why: with 64 clients an enqueue each, PostgreSQL's own work per transaction (a
//! backend woken per statement, a transaction id, a commit record, the WAL flush
//! wait) was the gateway's ceiling on two cores (DECISIONS D14; docs/BENCHMARKS.md, "Gateway on
//! PostgreSQL");
//! one transaction for what is waiting costs that once.
//!
//! How: a caller puts its message on the waiting list, then starts a flusher if fewer
//! than [`FLUSHERS`] run. A flusher takes up to [`MAX_GROUP`] waiting messages in
//! arrival order, runs them, answers them, and goes on while messages wait. It is a
//! task of its own, so a caller that goes away (a client that hung up) cannot cut a
//! group short for the others. Nothing waits for a timer: a message that arrives
//! when a flusher is free is sent at once, alone.
//!
//! What stays as it was:
//! - FIFO per sender: a sender that waited for its 202 queues its next message in a
//!   later group (or alone), which gets a higher `seq`.
//! - Duplicates within a group: each statement sees the earlier ones of its own
//!   transaction, so the second of two with one id is a duplicate.
//! - One bad message cannot fail the others: a group whose transaction fails on a
//!   statement's error (not on the connection) is run again one message per
//!   transaction, so that error reaches only the caller whose message caused it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::sync::{oneshot, Semaphore};

use super::super::{ForNode, Queued, StateError};
use super::queue::{self, Failed};
use super::{listen, Postgres};
use crate::store::StoreError;

/// Groups in flight at once, each on its own connection: one group's statements run
/// while another's commit waits for the WAL flush.
pub const FLUSHERS: usize = 3;
/// Messages in one group at most.
pub const MAX_GROUP: usize = 64;

type Reply = oneshot::Sender<Result<Queued, StateError>>;

/// The waiting list and the flushers' slots (one per [`Postgres`]).
pub struct Enqueues {
    waiting: Mutex<VecDeque<(ForNode, Reply)>>,
    flushers: Arc<Semaphore>,
}

impl Default for Enqueues {
    fn default() -> Self {
        Self {
            waiting: Mutex::new(VecDeque::new()),
            flushers: Arc::new(Semaphore::new(FLUSHERS)),
        }
    }
}

impl Enqueues {
    fn waiting(&self) -> std::sync::MutexGuard<'_, VecDeque<(ForNode, Reply)>> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn take(&self) -> Vec<(ForNode, Reply)> {
        let mut w = self.waiting();
        let n = w.len().min(MAX_GROUP);
        w.drain(..n).collect()
    }
}

/// Queue `msg` durably (its own commit or a group's); returns after that commit.
pub async fn enqueue(pg: &Arc<Postgres>, msg: ForNode) -> Result<Queued, StateError> {
    let (reply, answer) = oneshot::channel();
    pg.enqueues.waiting().push_back((msg, reply));
    start_flusher(pg);
    answer.await.unwrap_or_else(|_| {
        Err(StateError::Unavailable(
            "the enqueue was cut short (the gateway is stopping)".into(),
        ))
    })
}

/// Start a flusher unless [`FLUSHERS`] already run (one of them will take what waits:
/// each looks again after giving its slot back).
fn start_flusher(pg: &Arc<Postgres>) {
    let Ok(slot) = pg.enqueues.flushers.clone().try_acquire_owned() else {
        return;
    };
    let pg = pg.clone();
    tokio::spawn(async move {
        loop {
            let group = pg.enqueues.take();
            if group.is_empty() {
                break;
            }
            flush(&pg, group).await;
        }
        drop(slot);
        // A message put on the list after the last look, while every slot was taken,
        // found no slot: look once more now that this one is free.
        if !pg.enqueues.waiting().is_empty() {
            start_flusher(&pg);
        }
    });
}

/// Run one group and answer each of its callers.
async fn flush(pg: &Postgres, group: Vec<(ForNode, Reply)>) {
    let (msgs, replies): (Vec<ForNode>, Vec<Reply>) = group.into_iter().unzip();
    let answers = match queue::insert_group(pg, &msgs).await {
        Ok(answers) => answers,
        // A statement failed, so the transaction did: run each on its own.
        Err(Failed::Statement) => {
            let mut answers = Vec::with_capacity(msgs.len());
            for m in &msgs {
                answers.push(queue::insert_alone(pg, m).await);
            }
            answers
        }
        Err(Failed::Connection(e)) => msgs.iter().map(|_| Err(copy(&e))).collect(),
    };
    let mut woken: Vec<&str> = Vec::new();
    for ((m, reply), answer) in msgs.iter().zip(replies).zip(answers) {
        if matches!(answer, Ok(Queued::Queued)) && !woken.contains(&m.node_id.as_str()) {
            woken.push(&m.node_id);
            pg.notify(listen::CH_QUEUED, m.node_id.clone());
        }
        // The caller may have gone away; its message is committed all the same.
        let _ = reply.send(answer);
    }
}

/// The same error for each caller of a group.
fn copy(e: &StateError) -> StateError {
    match e {
        StateError::Store(StoreError::StorageFull) => StoreError::StorageFull.into(),
        StateError::Unavailable(why) => StateError::Unavailable(why.clone()),
        StateError::OutcomeUnknown(why) => StateError::OutcomeUnknown(why.clone()),
        other => StateError::Unavailable(other.to_string()),
    }
}
