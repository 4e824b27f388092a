//! `outpost envelope seal|open` (by hand, e.g. to test a peer) and `outpost send`.

use rand_core::OsRng;
use serde_json::Value;

use super::common::{load_config, load_keys, open_store, parse_ttl_ms, read_input};
use super::{ConfigArg, EnvelopeCmd, Exit};
use crate::daemon::trust;
use crate::envelope::{open, seal, OpenContext, PrunedAhead, SealParams};

pub fn envelope_cmd(cfg: &ConfigArg, cmd: EnvelopeCmd) -> anyhow::Result<()> {
    let cfg = load_config(cfg)?;
    let keys = load_keys(&cfg)?;
    let store = open_store(&cfg)?;
    let me = crate::app::keyfile::read_identity(&cfg.data_dir)?;
    let t = trust::effective(&store, &me)?;
    let now = store.now_ms();
    match cmd {
        EnvelopeCmd::Seal {
            to,
            payload_type,
            ttl,
        } => {
            let ttl_ms = parse_ttl_ms(&ttl)?;
            let peer = t
                .get(&to)
                .ok_or_else(|| Exit::failed(format!("{to} is not in the trust store")))?;
            let payload = read_json_object()?;
            let params = SealParams {
                message_id: uuid::Uuid::now_v7().to_string(),
                created_at_ms: now,
                expires_at_ms: now + ttl_ms,
                payload_type,
                priority: 0,
            };
            let env = seal(
                &keys,
                &cfg.node_id,
                &peer.doc,
                &params,
                &payload,
                &mut OsRng,
            )
            .map_err(|e| Exit::failed(e.to_string()))?;
            println!("{}", String::from_utf8_lossy(&env.to_json()));
        }
        EnvelopeCmd::Open => {
            let bytes = read_input("-")?;
            let ctx = OpenContext {
                me: &cfg.node_id,
                keys: &keys,
                previous_keys: None,
                trust: &t,
                now_ms: now,
                skew_ms: cfg.max_clock_skew_s * 1000,
                max_bytes: cfg.queue.max_message_bytes as usize,
                max_ttl_ms: cfg.queue.max_ttl_s * 1000,
                pruned_ahead: store.time_correction().map(|c| PrunedAhead {
                    corrected_at_ms: c.corrected_at_ms,
                    high_water_ms: c.high_water_ms,
                    seen_created_max_ms: c.seen_created_max_ms,
                }),
            };
            // By hand: report a replay as information, do not record the id.
            let seen = |_sender: &str, id: &str| {
                [crate::store::names::Q_INBOX, crate::store::names::Q_TASKS]
                    .iter()
                    .any(|q| store.seen(q, id).unwrap_or(false))
            };
            let o = open(&bytes, &ctx, &seen)
                .map_err(|e| Exit::failed(format!("{}: {e}", e.code())))?;
            let payload: Value = serde_json::from_slice(&o.plaintext).unwrap_or(Value::Null);
            println!(
                "{}",
                serde_json::to_string_pretty(&serde_json::json!({
                    "message_id": o.message_id,
                    "from": o.sender_node_id,
                    "to": o.recipient_node_id,
                    "payload_type": o.payload_type,
                    "created_at_ms": o.created_at_ms,
                    "expires_at_ms": o.expires_at_ms,
                    "payload": payload,
                }))?
            );
        }
    }
    store.close();
    Ok(())
}

fn read_json_object() -> anyhow::Result<Vec<u8>> {
    let bytes = read_input("-")?;
    let v: Value = serde_json::from_slice(&bytes)
        .map_err(|e| Exit::usage(format!("stdin is not JSON: {e}")))?;
    if !v.is_object() {
        return Err(Exit::usage("the payload on stdin must be a JSON object").into());
    }
    Ok(bytes)
}

/// `outpost send`: through the running daemon's API if it is up (so it is counted and
/// woken at once), else straight into the store's outbox.
pub fn send(
    cfg_arg: &ConfigArg,
    to: &str,
    payload_type: &str,
    ttl: Option<&str>,
) -> anyhow::Result<()> {
    let cfg = load_config(cfg_arg)?;
    let ttl_s = ttl
        .map(parse_ttl_ms)
        .transpose()?
        .map(|ms| ms.div_ceil(1000));
    let payload: Value = serde_json::from_slice(&read_json_object()?)?;
    let id = crate::app::offline::queue_outbox(&cfg, to, payload_type, &payload, ttl_s).map_err(
        |e| match e {
            crate::app::offline::OfflineError::Refused(_) => Exit::failed(e.to_string()).into(),
            crate::app::offline::OfflineError::Setup(e) => e,
        },
    )?;
    println!("{{\"queued\":true,\"message_id\":\"{id}\"}}");
    Ok(())
}
