//! Identities, trust store logic, envelope v1 seal/open and HTTP request signatures
//! (`docs/PROTOCOL.md` §2, §3, §5), and the
//! gateway's signed time statements (§5).
//!
//! Pure logic: no I/O except [`Keys::save`] / [`Keys::load`], and no clock — every
//! time-dependent function takes `now_ms`, which callers compute as
//! `max(clock.now_ms(), store time floor)` so a device that boots with a wrong clock
//! neither accepts expired envelopes nor rejects everything.
//!
//! ## API the rest of outpost calls
//!
//! - Encoding: [`pae`], [`b64_encode`], [`b64_decode`].
//! - Node ids: [`validate_node_id`] / [`is_valid_node_id`].
//! - Keys: [`Keys::generate`], [`Keys::save`] (0600, atomic), [`Keys::load`] (refuses
//!   group/world-readable files), [`Keys::sign_pk`], [`Keys::kex_pk`], [`Keys::sign`]
//!   (Ed25519, e.g. for audit checkpoints).
//! - Identity: [`IdentityDocument::new`]`(node_id, role, &keys, created_at)`,
//!   [`IdentityDocument::verify`].
//! - Trust: [`TrustStore`] `add / remove / get / list / to_bytes / from_bytes`, [`Rights`].
//! - Envelopes: [`seal`]`(&keys, sender_id, &recipient_doc, &SealParams, plaintext, &mut rng)
//!   -> Envelope`; [`open`]`(bytes, &OpenContext, &seen) -> Result<Opened, OpenError>`
//!   (and [`open_parsed`] for an already parsed [`Envelope`]); [`OpenError::code`] gives
//!   the API error code. `seen(sender, message_id)` answers "already accepted?"; after a
//!   successful open the caller stores the message and remembers the id durably until
//!   [`replay_keep_until_ms`]`(expires_at_ms, skew_ms)`.
//! - Relaying without decrypting (gateway queues): [`check_relay`]`(&env, &trust, now_ms,
//!   skew_ms, max_ttl_ms)`.
//! - Request signatures: [`sign_request`], [`verify_request`], [`SeenSignatures`].
//! - The gateway's signed time for a node whose timestamp it refused:
//!   [`sign_time_statement`], [`verify_time_statement`].
//!
//! ## Error codes of `open` (→ suggested HTTP status)
//!
//! `payload_too_large` 413 · `bad_request` 400 · `unsupported_version` 400 ·
//! `wrong_recipient` 400 · `expired` / `not_yet_valid` / `ttl_too_long` 400 ·
//! `unknown_sender` 401 · `bad_signature` 401 · `forbidden` 403 · `duplicate` 200
//! `{"duplicate":true}` · `decrypt_failed` 400.

mod hpke_base;
mod identity;
mod keyring;
mod keys;
mod node_id;
mod open;
mod pae;
mod request_sig;
mod rotation;
mod seal;
mod time_statement;
mod trust;
mod wire;
mod x25519;

#[cfg(test)]
pub(crate) mod tests;

pub use identity::{
    kex_pk_is_contributory, parse_kex_pk, parse_sign_pk, IdentityDocument, IdentityError,
    VerifiedKeys, IDENTITY_DOMAIN,
};
pub use keyring::KeyRing;
pub use keys::{KeyFileError, Keys};
pub use node_id::{is_valid_node_id, validate_node_id, InvalidNodeId};
pub use open::{
    check_relay, hpke_open, open, open_parsed, replay_keep_until_ms, OpenContext, OpenError,
    Opened, PrunedAhead,
};
pub use pae::{b64_decode, b64_decode_array, b64_encode, pae};
pub use request_sig::{
    request_signed_bytes, sign_request, verify_request, RequestSigError, SeenSignatures,
    VerifiedRequest, HEADER_NODE, HEADER_SIGNATURE, HEADER_TIMESTAMP, HTTP_DOMAIN,
};
pub use rotation::{KeyRotation, RotationError, ROTATION_DOMAIN, ROTATION_GRACE_MS};
#[cfg(test)]
pub use seal::FixedRng;
pub use seal::{hpke_derive_public, hpke_seal, seal, SealError, SealParams};
pub use time_statement::{
    sign_time_statement, time_statement_signed_bytes, verify_time_statement, TimeStatement,
    TimeStatementError, TIME_DOMAIN,
};
pub use trust::{Peer, Retired, RetiredRow, Rights, Rotated, TrustError, TrustStore};
pub use wire::{
    is_valid_message_id, is_valid_payload_type, Envelope, WireError, ENVELOPE_DOMAIN,
    ENVELOPE_SIG_DOMAIN, ENVELOPE_VERSION, SUITE,
};
