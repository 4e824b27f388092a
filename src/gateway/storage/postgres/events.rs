//! The events dashboards follow (`/v1/events`, [`EventTable`]), shared by every
//! replica: staged with the write they describe (or by a replica's events writer), given
//! ids in commit order by a sequencer, read after an id, announced with `NOTIFY`.

use super::super::{EventRow, EventTable, Fut, StateError};
use super::{i, listen, u, unavailable, Postgres};

/// Give staged events their ids, oldest staged first, in one statement: the
/// `events_head` row is locked `FOR UPDATE` until the commit (a second sequencer, at any
/// replica, waits and then reads the advanced head), so ids increase in commit order;
/// rows another sequencer moved meanwhile are skipped by the `DELETE`. Returns how many
/// were moved, and announces the newest id.
const SEQUENCE_EVENTS: &str = "
WITH head AS (
    SELECT next_id FROM events_head
    WHERE one AND EXISTS (SELECT 1 FROM events_staged) FOR UPDATE),
moved AS (
    DELETE FROM events_staged
    WHERE seq IN (SELECT seq FROM events_staged ORDER BY seq LIMIT $1)
    RETURNING seq, ts_ms, event),
numbered AS (
    SELECT (SELECT next_id FROM head) + row_number() OVER (ORDER BY seq) - 1 AS id, ts_ms, event
    FROM moved),
ins AS (
    INSERT INTO events (id, ts_ms, event) SELECT id, ts_ms, event FROM numbered RETURNING id),
advanced AS (
    UPDATE events_head SET next_id = (SELECT next_id FROM head) + (SELECT count(*) FROM moved)
    WHERE one AND EXISTS (SELECT 1 FROM moved) RETURNING next_id),
announced AS (
    SELECT pg_notify($2, (next_id - 1)::text) FROM advanced)
SELECT (SELECT count(*) FROM ins) + 0 * (SELECT count(*) FROM announced)";

/// The most events one sequencing statement moves.
const SEQUENCE_BATCH: i64 = 5_000;

async fn append(pg: &Postgres, events: Vec<(u64, String)>) -> Result<(), StateError> {
    if events.is_empty() {
        return Ok(());
    }
    let mut c = pg.pool.get().await?;
    // Staged (durable, no lock); [`sequence`] gives them ids.
    let st = c
        .prep(
            "INSERT INTO events_staged (ts_ms, event)
             SELECT t, e FROM unnest($1::bigint[], $2::text[]) WITH ORDINALITY AS x(t, e, n)
             ORDER BY n",
        )
        .await?;
    let ts: Vec<i64> = events.iter().map(|(t, _)| i(*t)).collect();
    let json: Vec<&str> = events.iter().map(|(_, j)| j.as_str()).collect();
    c.execute(&st, &[&ts, &json]).await.map_err(unavailable)?;
    Ok(())
}

async fn newest(pg: &Postgres) -> Result<u64, StateError> {
    let c = pg.pool.get().await?;
    let newest: i64 = c
        .query_one("SELECT next_id - 1 FROM events_head", &[])
        .await
        .map_err(unavailable)?
        .get(0);
    Ok(u(newest))
}

async fn sequence(pg: &Postgres) -> Result<u64, StateError> {
    let mut c = pg.pool.get().await?;
    let st = c.prep(SEQUENCE_EVENTS).await?;
    let mut moved = 0u64;
    loop {
        let n: i64 = c
            .query_one(&st, &[&SEQUENCE_BATCH, &listen::CH_EVENTS])
            .await
            .map_err(unavailable)?
            .get(0);
        moved += u(n);
        if n < SEQUENCE_BATCH {
            return Ok(moved);
        }
    }
}

async fn after(pg: &Postgres, after: u64, limit: usize) -> Result<Vec<EventRow>, StateError> {
    let c = pg.pool.get().await?;
    let rows = c
        .query(
            "SELECT id, ts_ms, event FROM events WHERE id > $1 ORDER BY id LIMIT $2",
            &[&i(after), &(limit as i64)],
        )
        .await
        .map_err(unavailable)?;
    Ok(rows
        .into_iter()
        .map(|r| (u(r.get(0)), u(r.get(1)), r.get(2)))
        .collect())
}

impl EventTable for Postgres {
    fn append_events(&self, events: Vec<(u64, String)>) -> Fut<'_, ()> {
        Box::pin(append(self, events))
    }

    fn sequence_events(&self) -> Fut<'_, u64> {
        Box::pin(sequence(self))
    }

    fn events_after(&self, after_id: u64, limit: usize) -> Fut<'_, Vec<EventRow>> {
        Box::pin(after(self, after_id, limit))
    }

    fn newest_event(&self) -> Fut<'_, u64> {
        Box::pin(newest(self))
    }

    fn events_announced(&self) -> tokio::sync::watch::Receiver<u64> {
        self.events_announced.subscribe()
    }
}
