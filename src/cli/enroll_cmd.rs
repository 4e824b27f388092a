//! `outpost enroll-token create|list|revoke` on the gateway host (they act on the
//! gateway's state directly, like `trust add`: the store in the data dir, or the
//! replicas' database), and `outpost nodes pending|approve|reject|revoke` (through the
//! running gateway's API, like `outpost nodes`).

use std::sync::Arc;

use clap::Subcommand;
use rand_core::RngCore;

use super::common::{load_existing_config, load_keys, open_store, parse_duration_ms};
use super::{ConfigArg, Exit};
use crate::config::{Config, Role};
use crate::enroll::{fingerprint, Approve, Token, TokenClaims};
use crate::gateway::enroll::TokenRecord;
use crate::gateway::storage::GatewayState;

#[derive(Debug, Subcommand)]
pub enum EnrollTokenCmd {
    /// Mint a token devices enroll with; prints only the token on stdout.
    Create {
        /// How long it can be used, e.g. 7d, 12h.
        #[arg(long, default_value = "7d")]
        ttl: String,
        /// How many devices may enroll with it.
        #[arg(long)]
        max_uses: u64,
        /// Only node ids starting with this, e.g. node:pump-.
        #[arg(long)]
        node_prefix: Option<String>,
        /// `auto`: trusted at once; `manual`: each waits for `outpost nodes approve`.
        #[arg(long, default_value = "auto")]
        approve: String,
        /// Write the token to this file, readable by its owner only (0600), instead of
        /// stdout (a shell redirect makes it world-readable under the usual umask).
        #[arg(long)]
        out: Option<std::path::PathBuf>,
        /// A label every device it enrolls starts with, `key=value` (repeatable).
        #[arg(long = "label", value_name = "KEY=VALUE")]
        labels: Vec<String>,
        /// The tenant every device it enrolls joins (`outpost tenant create` first).
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Every token: id, uses, limit, expiry, state.
    List {
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Refuse every further enrollment with a token (enrolled nodes stay enrolled).
    Revoke {
        /// The token's id (`enroll-token list`).
        id: String,
    },
}

/// The gateway's state, opened by a command on its host.
pub struct Opened {
    pub rt: tokio::runtime::Runtime,
    pub state: Arc<dyn GatewayState>,
}

impl Opened {
    pub fn open(cfg: &Config) -> anyhow::Result<Opened> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        #[cfg(feature = "postgres")]
        if let Some(db) = &cfg.gateway_db {
            let pg = rt
                .block_on(crate::gateway::storage::postgres::Postgres::open(
                    db,
                    &cfg.queue,
                    crate::clock::system(),
                ))
                .map_err(|e| {
                    Exit::failed(format!(
                        "cannot open the gateway's database {}: {e}",
                        crate::config::redact_url(&db.url)
                    ))
                })?;
            return Ok(Opened { rt, state: pg });
        }
        let state = Arc::new(crate::gateway::storage::embedded::Embedded::new(
            open_store(cfg)?,
        ));
        Ok(Opened { rt, state })
    }

    pub fn close(self) {
        let _ = self.rt.block_on(self.state.close());
    }
}

fn gateway_config(arg: &ConfigArg) -> anyhow::Result<Config> {
    let cfg = load_existing_config(arg)?;
    if cfg.role != Role::Gateway {
        return Err(Exit::usage(format!(
            "enrollment tokens are made on the gateway host, with the gateway's config (this one is a {})",
            cfg.role
        ))
        .into());
    }
    Ok(cfg)
}

fn token_id() -> String {
    let mut b = [0u8; 8];
    rand_core::OsRng.fill_bytes(&mut b);
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("et-{hex}")
}

pub fn enroll_token(arg: &ConfigArg, cmd: EnrollTokenCmd) -> anyhow::Result<()> {
    let cfg = gateway_config(arg)?;
    let st = Opened::open(&cfg)?;
    let out = match cmd {
        EnrollTokenCmd::Create {
            ttl,
            max_uses,
            node_prefix,
            approve,
            out,
            labels,
            tenant,
        } => token_labels(&labels)
            .and_then(|labels| Ok((labels, token_tenant(&st, tenant)?)))
            .and_then(|(labels, tenant)| {
                create(
                    &cfg,
                    &st,
                    &ttl,
                    max_uses,
                    node_prefix,
                    &approve,
                    out.as_deref(),
                    (labels, tenant),
                )
            }),
        EnrollTokenCmd::List { json } => list(&st, json),
        EnrollTokenCmd::Revoke { id } => revoke(&st, &id),
    };
    st.close();
    out
}

/// `--tenant`, which must exist (PROTOCOL §18); `None` for `default`.
fn token_tenant(st: &Opened, tenant: Option<String>) -> anyhow::Result<Option<String>> {
    let Some(t) = tenant else {
        return Ok(None);
    };
    crate::fleet::tenant::validate_tenant(&t).map_err(|e| Exit::usage(format!("--tenant: {e}")))?;
    if t == crate::fleet::tenant::DEFAULT_TENANT {
        return Ok(None);
    }
    if st.rt.block_on(st.state.tenant(&t))?.is_none() {
        return Err(Exit::failed(format!(
            "no tenant {t} (make it with `outpost tenant create {t}`); no token was made"
        ))
        .into());
    }
    Ok(Some(t))
}

/// `--label key=value`s, checked (PROTOCOL §16.1).
fn token_labels(args: &[String]) -> anyhow::Result<crate::fleet::Labels> {
    let change = crate::fleet::LabelChange::parse_args(args)
        .map_err(|e| Exit::usage(format!("--label: {e}")))?;
    if let Some(k) = change.remove.first() {
        return Err(
            Exit::usage(format!("--label {k}-: a new token has no label to remove")).into(),
        );
    }
    crate::fleet::Labels::from_pairs(change.set)
        .map_err(|e| Exit::usage(format!("--label: {e}")).into())
}

#[allow(clippy::too_many_arguments)]
fn create(
    cfg: &Config,
    st: &Opened,
    ttl: &str,
    max_uses: u64,
    node_prefix: Option<String>,
    approve: &str,
    out: Option<&std::path::Path>,
    (labels, tenant): (crate::fleet::Labels, Option<String>),
) -> anyhow::Result<()> {
    let approve = match approve {
        "auto" => Approve::Auto,
        "manual" => Approve::Manual,
        other => {
            return Err(Exit::usage(format!("--approve is auto or manual, not {other:?}")).into())
        }
    };
    if max_uses == 0 {
        return Err(Exit::usage("--max-uses must be at least 1").into());
    }
    if let Some(p) = &node_prefix {
        if p.is_empty() || p.len() > 100 || !p.contains(':') {
            return Err(Exit::usage(format!(
                "--node-prefix {p:?} must be the start of a node id, e.g. node:pump-"
            ))
            .into());
        }
    }
    let ttl_ms = parse_duration_ms("--ttl", ttl)?;
    // Opened before the token is recorded: a path that cannot be written mints nothing.
    let mut file = out.map(open_private).transpose()?;
    let keys = load_keys(cfg)?;
    let doc = crate::app::keyfile::published_identity(cfg, &keys)?;
    let now = st.state.now_ms();
    let claims = TokenClaims {
        v: 1,
        id: token_id(),
        gateway_id: cfg.node_id.clone(),
        gateway_fp: fingerprint(&doc),
        tls_spki_sha256: doc.tls_pin().map(|p| crate::envelope::b64_encode(&p)),
        expires_at_ms: now.saturating_add(ttl_ms),
        max_uses,
        node_prefix,
        approve,
    };
    let token = Token::sign(&keys, claims.clone());
    let audit = crate::gateway::own_audit::enroll_token_created(
        &super::actor::local_actor(),
        &claims,
        tenant.as_deref(),
    );
    let record = TokenRecord {
        claims: claims.clone(),
        created_at_ms: now,
        revoked: false,
        uses: 0,
        labels,
        tenant,
    };
    st.rt.block_on(st.state.enroll_token_add(record, &audit))?;
    eprintln!(
        "enrollment token {} for {} devices, until {} (approve: {}); put it in each device's upstream.enroll_token_file",
        claims.id,
        max_uses,
        crate::token::format_rfc3339_ms(claims.expires_at_ms).unwrap_or_default(),
        approve.as_str()
    );
    match (&mut file, out) {
        (Some(f), Some(path)) => {
            use std::io::Write;
            f.write_all(format!("{}\n", token.to_text()).as_bytes())
                .and_then(|()| f.sync_all())
                .map_err(|e| Exit::failed(format!("writing {}: {e}", path.display())))?;
            eprintln!("wrote {} (mode 0600)", path.display());
        }
        _ => println!("{}", token.to_text()),
    }
    Ok(())
}

/// `path` truncated and readable by its owner only, whatever the umask (and whatever
/// mode an existing file had: it is set to 0600 before the token is written).
fn open_private(path: &std::path::Path) -> anyhow::Result<std::fs::File> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let cannot = |e: std::io::Error| Exit::failed(format!("cannot write {}: {e}", path.display()));
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(cannot)?;
    f.set_permissions(std::fs::Permissions::from_mode(0o600))
        .map_err(cannot)?;
    Ok(f)
}

fn list(st: &Opened, json: bool) -> anyhow::Result<()> {
    let tokens = st.rt.block_on(st.state.enroll_tokens())?;
    let now = st.state.now_ms();
    if json {
        for t in &tokens {
            println!(
                "{}",
                serde_json::json!({
                    "id": t.claims.id,
                    "uses": t.uses,
                    "max_uses": t.claims.max_uses,
                    "expires_at_ms": t.claims.expires_at_ms,
                    "state": t.state(now),
                    "approve": t.claims.approve.as_str(),
                    "node_prefix": t.claims.node_prefix,
                    "tenant": t.tenant.as_deref().unwrap_or(crate::fleet::tenant::DEFAULT_TENANT),
                })
            );
        }
        return Ok(());
    }
    if tokens.is_empty() {
        println!("no enrollment tokens (make one with `outpost enroll-token create --max-uses N`)");
        return Ok(());
    }
    println!("ID                   USES     EXPIRES               STATE      APPROVE  PREFIX");
    for t in tokens {
        println!(
            "{:<20} {:<8} {:<21} {:<10} {:<8} {}",
            t.claims.id,
            format!("{}/{}", t.uses, t.claims.max_uses),
            crate::token::format_rfc3339_ms(t.claims.expires_at_ms).unwrap_or_default(),
            t.state(now),
            t.claims.approve.as_str(),
            t.claims.node_prefix.as_deref().unwrap_or("-"),
        );
    }
    Ok(())
}

fn revoke(st: &Opened, id: &str) -> anyhow::Result<()> {
    let audit = crate::gateway::own_audit::enroll_token_revoked(&super::actor::local_actor(), id);
    match st.rt.block_on(st.state.enroll_token_revoke(id, &audit))? {
        None => Err(Exit::failed(format!(
            "no enrollment token {id} (see `outpost enroll-token list`)"
        ))
        .into()),
        Some(false) => {
            println!("{id} was already revoked");
            Ok(())
        }
        Some(true) => {
            println!("revoked {id}: further enrollments with it are refused (token_revoked)");
            Ok(())
        }
    }
}
