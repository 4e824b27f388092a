//! `outpost token issue|inspect`.

use super::common::{load_config, load_keys, parse_ttl_ms};
use super::{ConfigArg, Exit, TokenCmd};
use crate::envelope::is_valid_node_id;
use crate::token::{self, Claims};

pub fn token_cmd(cfg: &ConfigArg, cmd: TokenCmd) -> anyhow::Result<()> {
    match cmd {
        TokenCmd::Issue {
            aud,
            scope,
            ttl,
            sub,
        } => {
            let cfg = load_config(cfg)?;
            if aud != "*" && !is_valid_node_id(&aud) {
                return Err(Exit::usage(format!("--aud {aud:?} must be a node id or *")).into());
            }
            let ttl_ms = parse_ttl_ms(&ttl)?;
            let keys = load_keys(&cfg)?;
            let now = crate::clock::system().now_ms();
            let jti = uuid::Uuid::now_v7().to_string();
            let claims = Claims::new(
                &cfg.node_id,
                sub.as_deref().unwrap_or("operator"),
                &aud,
                scope,
                now,
                ttl_ms,
                &jti,
            )
            .map_err(|e| Exit::usage(e.to_string()))?;
            println!("{}", token::issue(&keys, &claims)?);
        }
        TokenCmd::Inspect { token: t } => {
            let (claims, footer) = token::inspect(t.trim())
                .map_err(|e| Exit::failed(format!("not a v4.public token: {e}")))?;
            println!(
                "{}",
                serde_json::to_string_pretty(&serde_json::json!({
                    "claims": claims,
                    "footer": footer,
                    "note": "signature NOT verified (inspect only decodes)",
                }))?
            );
        }
    }
    Ok(())
}
