//! Revoking a capability token by its id: the one flow behind `POST /v1/revocations`
//! and the console's revoke form. Nodes fetch the list (`GET /v1/nodes/{id}/revocations`)
//! and refuse the token offline from then on.

use super::error::GatewayError;
use super::events::GatewayEvent;
use super::state::Gateway;
use super::storage::Revoked;

/// Revoke `jti` on behalf of token subject `by`; leaves a `revoked` event when it was
/// added (a repeat changes nothing and says so).
pub async fn revoke(gw: &Gateway, by: &str, jti: &str) -> Result<Revoked, GatewayError> {
    if jti.is_empty() || jti.len() > 128 {
        return Err(GatewayError::BadRequest(
            "jti must be 1..=128 characters".into(),
        ));
    }
    let r = gw.state.revoke(jti).await?;
    if let Revoked::Added { version } = r {
        tracing::info!(event = "token_revoked", jti = %jti, version, by = %by);
        gw.publish(GatewayEvent::Revoked {
            jti: jti.to_string(),
            version,
            by: by.to_string(),
        });
        gw.events_committed().await;
    }
    Ok(r)
}
