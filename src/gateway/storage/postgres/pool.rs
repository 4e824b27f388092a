//! A small connection pool: at most `size` connections, each opened on demand with a
//! connect timeout, dropped when PostgreSQL closed it, and reopened by the next caller
//! (so a restarted database is reconnected to without anyone restarting the gateway).
//!
//! Why our own and not a pool crate: this is all the gateway needs (no recycling
//! hooks, no statement cache), and every failure maps to one error the HTTP edge
//! answers with 503 `storage_unavailable` (docs/DECISIONS.md).

use std::sync::Mutex;
use std::time::Duration;

use std::collections::HashMap;

use tokio::sync::{Semaphore, SemaphorePermit};
use tokio_postgres::{Client, Statement};

use super::super::StateError;
use super::tls::Connector;

/// How long a caller waits for a free connection before answering 503.
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long opening a connection (TCP, TLS, authentication) may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Statements this connection has prepared, by their SQL (each is parsed once per
/// connection, then only bound and executed: one round trip instead of two).
type Prepared = HashMap<&'static str, Statement>;

pub struct Pool {
    config: tokio_postgres::Config,
    tls: Connector,
    idle: Mutex<Vec<(Client, Prepared, i16)>>,
    slots: Semaphore,
    /// The counter shard the next opened connection writes (see [`Conn::shard`]).
    next_shard: std::sync::atomic::AtomicU16,
}

/// A connection borrowed from the pool; returned to it when dropped (unless closed).
pub struct Conn<'a> {
    client: Option<Client>,
    prepared: Prepared,
    pool: &'a Pool,
    shard: i16,
    _slot: SemaphorePermit<'a>,
}

impl Conn<'_> {
    /// This connection's row of a sharded counter (`queue_depth`): connections of one
    /// replica get consecutive shards from a random start, so concurrent transactions
    /// rarely update the same row (an updated row stays locked until its commit, and
    /// writers of one row would wait for each other's commit in turn).
    pub fn shard(&self) -> i16 {
        self.shard
    }

    /// `sql` prepared on this connection (once; later calls reuse it).
    pub async fn prep(&mut self, sql: &'static str) -> Result<Statement, StateError> {
        if let Some(s) = self.prepared.get(sql) {
            return Ok(s.clone());
        }
        let s = self
            .client
            .as_ref()
            .expect("a live connection")
            .prepare(sql)
            .await
            .map_err(super::unavailable)?;
        self.prepared.insert(sql, s.clone());
        Ok(s)
    }
}

impl Conn<'_> {
    /// `st` in a transaction of its own, committed with `synchronous_commit = off`: the
    /// commit does not wait for the WAL flush (PostgreSQL flushes it within a few
    /// hundred milliseconds). Only for bookkeeping whose last moments may be lost if
    /// PostgreSQL itself crashes (liveness, replay window, delivery counters), never for
    /// a write that is acknowledged to anyone. `BEGIN`, the statement and `COMMIT` are
    /// sent together (pipelined): one round trip. A failing statement turns the
    /// `COMMIT` into a rollback, leaving the connection clean.
    pub async fn query_relaxed(
        &self,
        st: &Statement,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<tokio_postgres::Row>, StateError> {
        let c: &Client = self;
        let (begin, rows, commit) = futures_util::future::join3(
            c.batch_execute("BEGIN; SET LOCAL synchronous_commit = off"),
            c.query(st, params),
            c.batch_execute("COMMIT"),
        )
        .await;
        begin.map_err(super::unavailable)?;
        let rows = rows.map_err(super::unavailable)?;
        commit.map_err(super::unavailable)?;
        Ok(rows)
    }
}

impl std::ops::Deref for Conn<'_> {
    type Target = Client;
    fn deref(&self) -> &Client {
        self.client.as_ref().expect("a live connection")
    }
}

impl std::ops::DerefMut for Conn<'_> {
    fn deref_mut(&mut self) -> &mut Client {
        self.client.as_mut().expect("a live connection")
    }
}

impl Drop for Conn<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.client.take() {
            if !c.is_closed() {
                let prepared = std::mem::take(&mut self.prepared);
                self.pool
                    .idle
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((c, prepared, self.shard));
            }
        }
    }
}

impl Pool {
    pub fn new(mut config: tokio_postgres::Config, tls: Connector, size: u32) -> Self {
        config
            .connect_timeout(CONNECT_TIMEOUT)
            .keepalives(true)
            .keepalives_idle(Duration::from_secs(30))
            .tcp_user_timeout(Duration::from_secs(30));
        if config.get_application_name().is_none() {
            config.application_name("outpost-gateway");
        }
        Self {
            config,
            tls,
            idle: Mutex::new(Vec::new()),
            slots: Semaphore::new(size as usize),
            next_shard: std::sync::atomic::AtomicU16::new(rand::random::<u16>()),
        }
    }

    /// A connection, opened if no idle one is left.
    pub async fn get(&self) -> Result<Conn<'_>, StateError> {
        let slot = tokio::time::timeout(ACQUIRE_TIMEOUT, self.slots.acquire())
            .await
            .map_err(|_| StateError::Unavailable("no database connection free within 5 s".into()))?
            .map_err(|_| StateError::Unavailable("the pool is closed".into()))?;
        let reused = {
            let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
            idle.retain(|(c, _, _)| !c.is_closed());
            idle.pop()
        };
        let (client, prepared, shard) = match reused {
            Some(c) => c,
            None => {
                let n = self
                    .next_shard
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let shard = (n % super::queue::DEPTH_SHARDS as u16) as i16;
                (self.connect().await?, HashMap::new(), shard)
            }
        };
        Ok(Conn {
            client: Some(client),
            prepared,
            pool: self,
            shard,
            _slot: slot,
        })
    }

    /// A connection outside the pool, for the notification listener.
    pub async fn connect_with<F>(&self, on_message: F) -> Result<Client, StateError>
    where
        F: FnMut(tokio_postgres::AsyncMessage) + Send + 'static,
    {
        self.open(Some(Box::new(on_message))).await
    }

    async fn connect(&self) -> Result<Client, StateError> {
        self.open(None).await
    }

    async fn open(
        &self,
        mut on_message: Option<Box<dyn FnMut(tokio_postgres::AsyncMessage) + Send>>,
    ) -> Result<Client, StateError> {
        let (client, mut conn) =
            tokio::time::timeout(CONNECT_TIMEOUT, self.config.connect(self.tls.clone()))
                .await
                .map_err(|_| StateError::Unavailable("connecting to PostgreSQL timed out".into()))?
                .map_err(super::unavailable)?;
        tokio::spawn(async move {
            let mut messages = futures_util::stream::poll_fn(move |cx| conn.poll_message(cx));
            use futures_util::StreamExt;
            while let Some(m) = messages.next().await {
                match m {
                    Ok(m) => {
                        if let Some(f) = on_message.as_mut() {
                            f(m)
                        }
                    }
                    Err(e) => {
                        tracing::debug!(event = "postgres_connection_closed", error = %e);
                        break;
                    }
                }
            }
        });
        Ok(client)
    }
}
