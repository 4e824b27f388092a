//! The receive pipeline (PROTOCOL §3) as one pure function, cheapest checks first:
//! size → parse → recipient is me → time window (and, after a time correction, the
//! window the replay memory may have lost: [`PrunedAhead`]) → sender trusted with
//! `send` → signature (strict) → replay → decrypt.
//!
//! Ordering is a DoS defence: everything before the signature costs microseconds and
//! needs no secret, and decryption (the only step touching our X25519 secret) runs only
//! for authentic, fresh, first-seen envelopes. The replay check comes *after* the
//! signature so an attacker cannot poison the seen-set with forged ids. Remembering the
//! id durably is the caller's job, done together with storing the message.

use ed25519_dalek::Signature;

use super::keys::Keys;
use super::seal::is_json_object;
use super::trust::TrustStore;
use super::wire::{hpke_info, signed_pae, Envelope, WireError};

/// Everything `open` needs besides the envelope. `now_ms` is the caller's
/// `max(clock, store time floor)`.
#[derive(Debug, Clone, Copy)]
pub struct OpenContext<'a> {
    /// Our node id: envelopes for anyone else are refused.
    pub me: &'a str,
    pub keys: &'a Keys,
    /// The pair a key rotation retired, while its grace lasts: an envelope sealed to it
    /// before the switch still opens.
    pub previous_keys: Option<&'a Keys>,
    pub trust: &'a TrustStore,
    pub now_ms: u64,
    /// Clock-skew tolerance (config `security.max_clock_skew_s` × 1000).
    pub skew_ms: u64,
    /// Maximum size of the JSON envelope in bytes (config; default 1 MiB).
    pub max_bytes: usize,
    /// Longest accepted `expires_at_ms - created_at_ms` (config `queue.max_ttl_s`), which
    /// bounds how long the caller must remember message ids.
    pub max_ttl_ms: u64,
    /// Set when the receiver's time was once moved back (RELIABILITY F2): its replay
    /// memory may be missing ids it pruned while its time was ahead.
    pub pruned_ahead: Option<PrunedAhead>,
}

/// The receiver's time ran ahead up to `high_water_ms` and was moved back at
/// `corrected_at_ms` (its time then). While it was ahead it forgot the ids of envelopes
/// that had expired by *its* time, some of which are still valid in real time. Only
/// ids it had remembered can be among them, and each of those envelopes was created at
/// most at `seen_created_max_ms` (the newest `created_at` it had remembered by the
/// correction). So an envelope created no later than that and before the correction,
/// that expired (with the skew) by the high water, may be one of them and is refused as
/// `expired` — fail closed. Envelopes created after what the receiver had seen are
/// unaffected, and the rule covers nothing once real time is past `high_water_ms`
/// (such an envelope has expired anyway).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrunedAhead {
    pub corrected_at_ms: u64,
    pub high_water_ms: u64,
    pub seen_created_max_ms: u64,
}

impl PrunedAhead {
    /// `true`: `env` may be an envelope whose id the receiver pruned (refuse it).
    fn may_have_been_pruned(&self, env: &Envelope, skew_ms: u64) -> bool {
        env.created_at_ms < self.corrected_at_ms
            && env.created_at_ms <= self.seen_created_max_ms
            && env.expires_at_ms.saturating_add(skew_ms) <= self.high_water_ms
    }
}

/// A verified, decrypted envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opened {
    pub message_id: String,
    pub sender_node_id: String,
    pub recipient_node_id: String,
    pub created_at_ms: u64,
    pub expires_at_ms: u64,
    pub payload_type: String,
    pub priority: u64,
    /// The decrypted JSON object, as bytes.
    pub plaintext: Vec<u8>,
}

/// Why an envelope was refused. [`OpenError::code`] is the stable API error code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    #[error("envelope larger than {limit} bytes")]
    PayloadTooLarge { limit: usize },
    #[error("malformed envelope: {0}")]
    BadRequest(String),
    #[error("unsupported envelope version or suite")]
    UnsupportedVersion,
    #[error("envelope is addressed to another node")]
    WrongRecipient,
    #[error("envelope expired")]
    Expired,
    #[error("envelope created in the future beyond the allowed clock skew")]
    NotYetValid,
    #[error("envelope lifetime exceeds the maximum TTL")]
    TtlTooLong,
    #[error("sender is not in the trust store")]
    UnknownSender,
    #[error("sender is not allowed to send envelopes")]
    Forbidden,
    #[error("envelope signature does not verify")]
    BadSignature,
    #[error("message id already seen from this sender")]
    Duplicate,
    #[error("envelope could not be decrypted")]
    DecryptFailed,
}

impl OpenError {
    /// Stable snake_case code for API answers, metrics and audit `detail`.
    pub fn code(&self) -> &'static str {
        match self {
            Self::PayloadTooLarge { .. } => "payload_too_large",
            Self::BadRequest(_) => "bad_request",
            Self::UnsupportedVersion => "unsupported_version",
            Self::WrongRecipient => "wrong_recipient",
            Self::Expired => "expired",
            Self::NotYetValid => "not_yet_valid",
            Self::TtlTooLong => "ttl_too_long",
            Self::UnknownSender => "unknown_sender",
            Self::Forbidden => "forbidden",
            Self::BadSignature => "bad_signature",
            Self::Duplicate => "duplicate",
            Self::DecryptFailed => "decrypt_failed",
        }
    }
}

impl From<WireError> for OpenError {
    fn from(e: WireError) -> Self {
        match e {
            WireError::UnsupportedVersion => Self::UnsupportedVersion,
            WireError::Malformed(m) => Self::BadRequest(m),
        }
    }
}

/// Full pipeline from raw request bytes.
///
/// `seen(sender, message_id)` must answer from the durable dedup set. If that lookup can
/// fail, either answer `true` (fail closed; the sender retries) or pass `|_, _| false` and
/// run the dedup check on the returned [`Opened`] before storing — the same outcome at
/// the cost of decrypting a replay once.
pub fn open(
    bytes: &[u8],
    ctx: &OpenContext<'_>,
    seen: &dyn Fn(&str, &str) -> bool,
) -> Result<Opened, OpenError> {
    if bytes.len() > ctx.max_bytes {
        return Err(OpenError::PayloadTooLarge {
            limit: ctx.max_bytes,
        });
    }
    let env = Envelope::from_json(bytes)?;
    open_parsed(&env, ctx, seen)
}

/// Pipeline for an already parsed envelope (e.g. one element of an upload batch). The
/// size limit is applied to the ciphertext, the only unbounded field.
pub fn open_parsed(
    env: &Envelope,
    ctx: &OpenContext<'_>,
    seen: &dyn Fn(&str, &str) -> bool,
) -> Result<Opened, OpenError> {
    if env.ciphertext.len() > ctx.max_bytes {
        return Err(OpenError::PayloadTooLarge {
            limit: ctx.max_bytes,
        });
    }
    env.check_syntax()?;
    if env.recipient_node_id != ctx.me {
        return Err(OpenError::WrongRecipient);
    }
    check_time(env, ctx.now_ms, ctx.skew_ms, ctx.max_ttl_ms)?;
    if let Some(p) = ctx.pruned_ahead {
        if p.may_have_been_pruned(env, ctx.skew_ms) {
            return Err(OpenError::Expired);
        }
    }
    let header = env.header_bytes();
    verify_sender(env, ctx.trust, &header, ctx.now_ms)?;
    if seen(&env.sender_node_id, &env.message_id) {
        return Err(OpenError::Duplicate);
    }
    let info = hpke_info(&env.recipient_node_id);
    let opened = hpke_open(ctx.keys, &env.enc, &info, &env.ciphertext, &header);
    let plaintext = match (opened, ctx.previous_keys) {
        (Err(OpenError::DecryptFailed), Some(old)) => {
            hpke_open(old, &env.enc, &info, &env.ciphertext, &header)?
        }
        (opened, _) => opened?,
    };
    if !is_json_object(&plaintext) {
        return Err(OpenError::BadRequest(
            "plaintext is not a JSON object".into(),
        ));
    }
    Ok(Opened {
        message_id: env.message_id.clone(),
        sender_node_id: env.sender_node_id.clone(),
        recipient_node_id: env.recipient_node_id.clone(),
        created_at_ms: env.created_at_ms,
        expires_at_ms: env.expires_at_ms,
        payload_type: env.payload_type.clone(),
        priority: env.priority,
        plaintext,
    })
}

/// Refuse stale, far-future and over-long envelopes.
///
/// Skew is tolerated on both edges (PROTOCOL §3.5 "not expired (with clock-skew tolerance)"):
/// accepted while `created_at - skew <= now < expires_at + skew`. That is why receivers
/// remember ids for TTL + 2×skew: any replay inside the acceptance window is still known.
fn check_time(env: &Envelope, now_ms: u64, skew_ms: u64, max_ttl_ms: u64) -> Result<(), OpenError> {
    if now_ms >= env.expires_at_ms.saturating_add(skew_ms) {
        return Err(OpenError::Expired);
    }
    if env.created_at_ms > now_ms.saturating_add(skew_ms) {
        return Err(OpenError::NotYetValid);
    }
    if env.expires_at_ms.saturating_sub(env.created_at_ms) > max_ttl_ms {
        return Err(OpenError::TtlTooLong);
    }
    Ok(())
}

/// Sender trusted with `send`, and its strict Ed25519 signature over (H, enc, ciphertext)
/// by its key, or by the key it retired while that key's grace lasts (an envelope
/// sealed before a rotation).
fn verify_sender(
    env: &Envelope,
    trust: &TrustStore,
    header: &[u8],
    now_ms: u64,
) -> Result<(), OpenError> {
    let peer = trust
        .get(&env.sender_node_id)
        .ok_or(OpenError::UnknownSender)?;
    if !peer.rights.send {
        return Err(OpenError::Forbidden);
    }
    let sig =
        <[u8; 64]>::try_from(env.signature.as_slice()).map_err(|_| OpenError::BadSignature)?;
    let (msg, sig) = (
        signed_pae(header, &env.enc, &env.ciphertext),
        Signature::from_bytes(&sig),
    );
    peer.sign_keys(now_ms)
        .find(|k| k.verify_strict(&msg, &sig).is_ok())
        .map(|_| ())
        .ok_or(OpenError::BadSignature)
}

/// The relay check, for a hop that stores and forwards an envelope it cannot decrypt
/// (the gateway queueing for a node): syntax, time window, sender trusted with `send`,
/// strict signature. Same codes as [`open`]; the final recipient still runs the full
/// pipeline, so this only keeps junk and forgeries out of queues.
pub fn check_relay(
    env: &Envelope,
    trust: &TrustStore,
    now_ms: u64,
    skew_ms: u64,
    max_ttl_ms: u64,
) -> Result<(), OpenError> {
    env.check_syntax()?;
    check_time(env, now_ms, skew_ms, max_ttl_ms)?;
    verify_sender(env, trust, &env.header_bytes(), now_ms)
}

/// How long a receiver must remember `(sender, message_id)` after accepting it: until the
/// envelope can no longer pass [`check_time`].
pub fn replay_keep_until_ms(expires_at_ms: u64, skew_ms: u64) -> u64 {
    expires_at_ms.saturating_add(skew_ms)
}

/// Single-shot HPKE base-mode open with outpost's suite ([`super::hpke_base`]).
pub fn hpke_open(
    keys: &Keys,
    enc: &[u8],
    info: &[u8],
    ciphertext: &[u8],
    aad: &[u8],
) -> Result<Vec<u8>, OpenError> {
    let enc: &[u8; 32] = enc.try_into().map_err(|_| OpenError::DecryptFailed)?;
    super::hpke_base::open(keys, enc, info, ciphertext, aad).map_err(|_| OpenError::DecryptFailed)
}
