//! Enrollment tokens on PostgreSQL (`outpost enroll-token create|list|revoke`): a row
//! per token, its uses counted by enrollments under the row's lock (`enroll.rs`); a
//! token made or revoked commits its gateway audit entry, pending, with it.

use super::enroll::{to_json, token_row};
use super::{own_audit, unavailable, Postgres};
use crate::audit::AuditRecord;
use crate::gateway::storage::{GatewayState, StateError, TokenRecord};

impl Postgres {
    pub(super) async fn token_add_now(
        &self,
        t: TokenRecord,
        audit: &AuditRecord,
    ) -> Result<(), StateError> {
        let mut c = self.pool.get().await?;
        let tx = c.transaction().await.map_err(unavailable)?;
        tx.execute(
            "INSERT INTO enroll_tokens (id, record, revoked, uses) VALUES ($1, $2, false, 0)",
            &[&t.claims.id, &to_json(&t)?],
        )
        .await
        .map_err(unavailable)?;
        own_audit::pend(&tx, self.now_ms(), audit).await?;
        tx.commit().await.map_err(unavailable)?;
        Ok(())
    }

    pub(super) async fn tokens_now(&self) -> Result<Vec<TokenRecord>, StateError> {
        let c = self.pool.get().await?;
        let rows = c
            .query(
                "SELECT record, revoked, uses FROM enroll_tokens ORDER BY id",
                &[],
            )
            .await
            .map_err(unavailable)?;
        rows.iter().map(token_row).collect()
    }

    pub(super) async fn token_revoke_now(
        &self,
        id: &str,
        audit: &AuditRecord,
    ) -> Result<Option<bool>, StateError> {
        let mut c = self.pool.get().await?;
        let tx = c.transaction().await.map_err(unavailable)?;
        let row = tx
            .query_opt(
                "SELECT revoked FROM enroll_tokens WHERE id = $1 FOR UPDATE",
                &[&id],
            )
            .await
            .map_err(unavailable)?;
        match row.map(|r| r.get::<_, bool>(0)) {
            None => return Ok(None),
            Some(true) => return Ok(Some(false)),
            Some(false) => {}
        }
        tx.execute(
            "UPDATE enroll_tokens SET revoked = true WHERE id = $1",
            &[&id],
        )
        .await
        .map_err(unavailable)?;
        own_audit::pend(&tx, self.now_ms(), audit).await?;
        tx.commit().await.map_err(unavailable)?;
        Ok(Some(true))
    }
}
