//! An enqueue whose commit was sent and not answered (PostgreSQL crashed or the
//! connection broke in between) may or may not be stored. Answering "nothing was
//! written, retry" would make a retry queue the command twice; so the write is run
//! again, the same message under the same id, until the database answers: every
//! enqueue is idempotent by message id (and by job or key binding), so a repeat either
//! stores it now or finds the first one committed — what is true either way. A repeat
//! that meets a transaction still committing waits for it (unique index), so it never
//! reads "absent" before a late commit lands.
//!
//! When the database is not back within [`SETTLE_WITHIN`], the caller gets
//! [`StateError::OutcomeUnknown`] (503 `outcome_unknown`): retry with the same
//! idempotency key, or look the message id up.

use std::future::Future;
use std::time::Duration;

use super::super::{Queued, StateError};
use crate::store::StoreError;

/// How long an enqueue with a lost commit waits for the database to answer again.
pub const SETTLE_WITHIN: Duration = Duration::from_secs(10);
/// Pause between repeats while the database is away.
pub const SETTLE_EVERY: Duration = Duration::from_millis(200);

/// Run `write`; if its commit's outcome is unknown, repeat it until the answer is
/// known or [`SETTLE_WITHIN`] passed. `plain`: the write binds nothing but its message
/// id (a fresh one), so a repeat that finds the id taken found the first attempt.
pub async fn settle<F, Fut>(write: F, plain: bool) -> Result<Queued, StateError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Queued, StateError>>,
{
    settle_within(write, plain, SETTLE_WITHIN, SETTLE_EVERY).await
}

async fn settle_within<F, Fut>(
    mut write: F,
    plain: bool,
    within: Duration,
    every: Duration,
) -> Result<Queued, StateError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Queued, StateError>>,
{
    let first = write().await;
    let Err(StateError::OutcomeUnknown(why)) = first else {
        return first;
    };
    tracing::warn!(event = "enqueue_outcome_unknown", detail = %why);
    let deadline = tokio::time::Instant::now() + within;
    let mut last = why;
    loop {
        tokio::time::sleep(every).await;
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            break;
        }
        let Ok(answer) = tokio::time::timeout(left, write()).await else {
            break;
        };
        match step(answer, plain) {
            Step::Done(out) => {
                tracing::info!(event = "enqueue_outcome_settled", ok = out.is_ok());
                return out;
            }
            Step::Again(why) => last = why,
        }
    }
    Err(StateError::OutcomeUnknown(format!(
        "the database did not answer again within {} ms: {last}",
        within.as_millis()
    )))
}

#[derive(Debug, PartialEq)]
enum Step {
    Done(Result<Queued, StateError>),
    Again(String),
}

/// What a repeat's answer says of the write whose commit was lost.
fn step(answer: Result<Queued, StateError>, plain: bool) -> Step {
    match answer {
        // Its fresh id is known: the first attempt's commit landed.
        Ok(Queued::Duplicate) if plain => Step::Done(Ok(Queued::Queued)),
        // Stored now, or the binding is taken (the caller answers from the binding).
        Ok(q) => Step::Done(Ok(q)),
        Err(StateError::Unavailable(why) | StateError::OutcomeUnknown(why)) => Step::Again(why),
        // Refused before the database was asked: that says nothing of the first.
        Err(StateError::Store(StoreError::Expired)) => Step::Done(Err(StateError::OutcomeUnknown(
            "the message expired before its outcome was known".into(),
        ))),
        // The database's own answer (queue full…): the id was not known, so the first
        // attempt did not commit.
        Err(e) => Step::Done(Err(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unknown() -> StateError {
        StateError::OutcomeUnknown("connection closed".into())
    }

    #[test]
    fn a_repeat_that_finds_the_id_taken_found_the_first_commit() {
        assert_eq!(
            step(Ok(Queued::Duplicate), true),
            Step::Done(Ok(Queued::Queued))
        );
        // A binding (job, key) taken is the caller's to answer from.
        assert_eq!(
            step(Ok(Queued::Duplicate), false),
            Step::Done(Ok(Queued::Duplicate))
        );
        assert_eq!(
            step(Ok(Queued::Queued), true),
            Step::Done(Ok(Queued::Queued))
        );
    }

    #[test]
    fn the_database_still_away_is_asked_again_and_a_refusal_is_final() {
        assert!(matches!(step(Err(unknown()), true), Step::Again(_)));
        assert!(matches!(
            step(Err(StateError::Unavailable("refused".into())), true),
            Step::Again(_)
        ));
        let full = StateError::Store(StoreError::QueueFull { retry_after_s: 1 });
        assert_eq!(step(Err(full.clone()), true), Step::Done(Err(full)));
        assert!(matches!(
            step(Err(StoreError::Expired.into()), true),
            Step::Done(Err(StateError::OutcomeUnknown(_)))
        ));
    }

    #[tokio::test]
    async fn a_lost_commit_is_settled_once_the_database_answers_or_reported_unknown() {
        let (within, every) = (Duration::from_millis(60), Duration::from_millis(5));
        // Lost, then away twice, then the repeat finds the id: 202, not 503.
        let mut answers = vec![
            Ok(Queued::Duplicate),
            Err(StateError::Unavailable("refused".into())),
            Err(StateError::Unavailable("refused".into())),
            Err(unknown()),
        ];
        let out = settle_within(
            || std::future::ready(answers.pop().unwrap()),
            true,
            within,
            every,
        )
        .await;
        assert_eq!(out, Ok(Queued::Queued));
        // A definite first answer is passed on untouched.
        let away = || std::future::ready(Err(StateError::Unavailable("x".into())));
        let out = settle_within(away, true, within, every).await;
        assert_eq!(out, Err(StateError::Unavailable("x".into())));
        // Never back: unknown, after SETTLE_WITHIN.
        let started = tokio::time::Instant::now();
        let out = settle_within(|| std::future::ready(Err(unknown())), true, within, every).await;
        assert!(matches!(out, Err(StateError::OutcomeUnknown(_))), "{out:?}");
        assert!(started.elapsed() >= within);
    }
}
