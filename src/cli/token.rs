//! `outpost token issue|inspect`.

use super::common::{load_config, load_keys, parse_ttl_ms};
use super::{ConfigArg, Exit, TokenCmd};
use crate::envelope::is_valid_node_id;
use crate::token::{self, Claims};

/// Above this a token is refused without `--force`: a capability that outlives a month
/// is more likely a typo (`--ttl 1y` for `1h`) than a plan, and revocation needs a link.
pub const MAX_TTL_WITHOUT_FORCE_MS: u64 = 31 * 24 * 3600 * 1000;

/// The scope shapes nodes and gateways act on: `tool:<name>`, `tool:*`,
/// `command:<type>`, `read`, `state:read`, `state:write`, `admin`. Any other text is accepted by no check, so a
/// token carrying it is almost certainly a mistake (`tools:echo`, `tool:Echo`).
pub fn known_scope(s: &str) -> bool {
    if matches!(
        s,
        "admin" | "read" | "tool:*" | "state:read" | "state:write"
    ) {
        return true;
    }
    if let Some(name) = s.strip_prefix("tool:") {
        return crate::tools::valid_tool_name(name);
    }
    if let Some(t) = s.strip_prefix("command:") {
        return !t.is_empty() && t.len() <= 64 && !t.chars().any(|c| c.is_whitespace());
    }
    false
}

/// What `token issue` refuses unless `--force`: unknown scope shapes and absurd TTLs.
pub fn check_issue_args(scopes: &[String], ttl_ms: u64) -> Result<(), String> {
    let bad: Vec<&str> = scopes
        .iter()
        .map(String::as_str)
        .filter(|s| !known_scope(s))
        .collect();
    if !bad.is_empty() {
        return Err(format!(
            "unknown scope {bad:?}: use tool:<name> (lowercase, digits, _), tool:*, \
             command:<type>, read, state:read, state:write or admin (--force issues it anyway)"
        ));
    }
    if ttl_ms > MAX_TTL_WITHOUT_FORCE_MS {
        return Err(format!(
            "--ttl of {} days is above 31 days; issue a shorter token (--force issues it anyway)",
            ttl_ms / 86_400_000
        ));
    }
    Ok(())
}

pub fn token_cmd(cfg: &ConfigArg, cmd: TokenCmd) -> anyhow::Result<()> {
    match cmd {
        TokenCmd::Issue {
            aud,
            scope,
            ttl,
            sub,
            force,
            tenant,
        } => {
            if let Some(t) = &tenant {
                crate::fleet::tenant::validate_tenant(t)
                    .map_err(|e| Exit::usage(format!("--tenant: {e}")))?;
            }
            if aud != "*" && !is_valid_node_id(&aud) {
                return Err(Exit::usage(format!("--aud {aud:?} must be a node id or *")).into());
            }
            let ttl_ms = parse_ttl_ms(&ttl)?;
            if !force {
                check_issue_args(&scope, ttl_ms).map_err(Exit::usage)?;
            }
            let cfg = load_config(cfg)?;
            let keys = load_keys(&cfg)?;
            let now = crate::clock::system().now_ms();
            let jti = uuid::Uuid::now_v7().to_string();
            let mut claims = Claims::new(
                &cfg.node_id,
                &sub.unwrap_or_else(super::actor::local_actor),
                &aud,
                scope,
                now,
                ttl_ms,
                &jti,
            )
            .map_err(|e| Exit::usage(e.to_string()))?;
            claims.tenant = tenant;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_of_known_shape_pass_and_typos_do_not() {
        for ok in [
            "admin",
            "read",
            "tool:*",
            "tool:pii_redact",
            "command:setpoint",
        ] {
            assert!(known_scope(ok), "{ok}");
        }
        for bad in [
            "tools:echo",
            "tool:Echo",
            "tool:",
            "Admin",
            "command:",
            "*",
            "tool:a b",
        ] {
            assert!(!known_scope(bad), "{bad}");
        }
    }

    #[test]
    fn ttls_above_a_month_need_force() {
        let s = vec!["tool:echo".to_string()];
        assert!(check_issue_args(&s, MAX_TTL_WITHOUT_FORCE_MS).is_ok());
        assert!(check_issue_args(&s, MAX_TTL_WITHOUT_FORCE_MS + 1).is_err());
    }
}
