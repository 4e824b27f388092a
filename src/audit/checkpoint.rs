//! Signed checkpoints: C2SP `tlog-checkpoint` bodies wrapped in a C2SP `signed-note`.
//!
//! ```text
//! outpost/node:pump-17          ← origin (also the signing key's name)
//! 42                            ← tree size, decimal, no leading zeros
//! <base64 std root hash>
//!                               ← blank line ends the note text
//! — outpost/node:pump-17 <base64(key id[4] ‖ Ed25519 signature[64])>
//! ```
//!
//! The signature covers the note text (the three body lines, each ending in `\n`). The
//! key id is the first 4 bytes of `SHA-256(key name ‖ 0x0A ‖ 0x01 ‖ public key)`, 0x01
//! being the signed-note signature type for Ed25519. Using the standard format means
//! off-the-shelf transparency-log tooling can read our checkpoints.
//!
//! Parsing is strict on purpose: exactly three body lines (no extension lines), exactly
//! one signature line, and it must be ours. A checkpoint is evidence; anything we did
//! not write ourselves is refused rather than interpreted.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use sha2::{Digest, Sha256};

use super::merkle::Hash;

/// Signed-note signature type byte for Ed25519.
const SIG_TYPE_ED25519: u8 = 0x01;
/// `—` (U+2014 EM DASH) followed by a space starts every signature line.
const SIG_PREFIX: &str = "\u{2014} ";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    pub origin: String,
    pub size: u64,
    pub root: Hash,
}

#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum CheckpointError {
    #[error("checkpoint note is malformed: {0}")]
    Malformed(&'static str),
    #[error("checkpoint origin does not match the expected origin")]
    WrongOrigin,
    #[error("checkpoint is not signed by the expected key")]
    UnknownKey,
    #[error("checkpoint signature is invalid")]
    BadSignature,
}

/// The origin (and key name) of a node's log: `outpost/<node_id>`.
pub fn origin_for(node_id: &str) -> String {
    format!("outpost/{node_id}")
}

/// Signed-note key id: first 4 bytes of SHA-256(name ‖ "\n" ‖ 0x01 ‖ pubkey).
pub fn key_id(key_name: &str, key: &VerifyingKey) -> [u8; 4] {
    let mut h = Sha256::new();
    h.update(key_name.as_bytes());
    h.update([0x0A, SIG_TYPE_ED25519]);
    h.update(key.as_bytes());
    let d = h.finalize();
    [d[0], d[1], d[2], d[3]]
}

fn body(origin: &str, size: u64, root: &Hash) -> String {
    format!("{origin}\n{size}\n{}\n", STANDARD.encode(root))
}

/// Sign `text` (which must end in `\n`) as a signed note with one signature by `key`
/// under `key_name`.
pub fn sign_note(key: &SigningKey, key_name: &str, text: &str) -> String {
    let sig: Signature = key.sign(text.as_bytes());
    let mut blob = Vec::with_capacity(68);
    blob.extend_from_slice(&key_id(key_name, &key.verifying_key()));
    blob.extend_from_slice(&sig.to_bytes());
    format!("{text}\n{SIG_PREFIX}{key_name} {}\n", STANDARD.encode(blob))
}

/// Verify a signed note carrying exactly one signature, by `key` under `key_name`;
/// returns the note text (ending in `\n`).
pub fn verify_note<'a>(
    note: &'a str,
    key: &VerifyingKey,
    key_name: &str,
) -> Result<&'a str, CheckpointError> {
    use CheckpointError::Malformed;
    let split = note
        .find("\n\n")
        .ok_or(Malformed("no blank line between text and signatures"))?;
    let (text, sigs) = (&note[..split + 1], &note[split + 2..]);
    let sig_line = sigs
        .strip_suffix('\n')
        .ok_or(Malformed("signature line must end with a newline"))?;
    if sig_line.contains('\n') {
        return Err(Malformed("exactly one signature line is accepted"));
    }
    let rest = sig_line
        .strip_prefix(SIG_PREFIX)
        .ok_or(Malformed("signature line must start with an em dash"))?;
    let (name, sig_b64) = rest
        .split_once(' ')
        .ok_or(Malformed("signature line needs a name and a signature"))?;
    if name != key_name {
        return Err(CheckpointError::UnknownKey);
    }
    let blob = STANDARD
        .decode(sig_b64)
        .map_err(|_| Malformed("signature is not base64"))?;
    if blob.len() != 68 {
        return Err(Malformed("signature must be 4 + 64 bytes"));
    }
    if blob[..4] != key_id(name, key) {
        return Err(CheckpointError::UnknownKey);
    }
    let sig = Signature::from_slice(&blob[4..]).map_err(|_| CheckpointError::BadSignature)?;
    key.verify_strict(text.as_bytes(), &sig)
        .map_err(|_| CheckpointError::BadSignature)?;
    Ok(text)
}

/// Sign a checkpoint for `origin` (e.g. from [`origin_for`]); the key name is the origin.
pub fn sign_checkpoint(key: &SigningKey, origin: &str, size: u64, root: &Hash) -> String {
    sign_note(key, origin, &body(origin, size, root))
}

/// [`parse_and_verify`] with any of `keys` (a node's key history: checkpoints signed
/// before a key rotation carry the retired key's signature). The first key that
/// verifies wins; with none, the error the last key gave.
pub fn parse_and_verify_any(
    note: &str,
    keys: &[VerifyingKey],
    expected_origin: &str,
) -> Result<Checkpoint, CheckpointError> {
    let mut last = Err(CheckpointError::Malformed("no key to verify with"));
    for key in keys.iter().rev() {
        last = parse_and_verify(note, key, expected_origin);
        if last.is_ok() {
            break;
        }
    }
    last
}

/// Parse a note and verify it was signed by `key` under the name `expected_origin`.
pub fn parse_and_verify(
    note: &str,
    key: &VerifyingKey,
    expected_origin: &str,
) -> Result<Checkpoint, CheckpointError> {
    use CheckpointError::Malformed;
    // Check the origin before the signature so a note for another log says so.
    let first = note.split('\n').next().unwrap_or_default();
    if first != expected_origin {
        return Err(if first.is_empty() {
            Malformed("empty origin")
        } else {
            CheckpointError::WrongOrigin
        });
    }
    let text = verify_note(note, key, expected_origin)?;
    let lines: Vec<&str> = text.split_terminator('\n').collect();
    let [origin, size, root_b64] = lines.as_slice() else {
        return Err(Malformed("checkpoint body must have exactly three lines"));
    };
    let size = parse_size(size)?;
    let root_bytes = STANDARD
        .decode(root_b64)
        .map_err(|_| Malformed("root hash is not base64"))?;
    let root: Hash = root_bytes
        .as_slice()
        .try_into()
        .map_err(|_| Malformed("root hash is not 32 bytes"))?;
    Ok(Checkpoint {
        origin: (*origin).to_string(),
        size,
        root,
    })
}

fn parse_size(s: &str) -> Result<u64, CheckpointError> {
    let ok =
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'));
    if !ok {
        return Err(CheckpointError::Malformed(
            "tree size is not a canonical decimal",
        ));
    }
    s.parse()
        .map_err(|_| CheckpointError::Malformed("tree size out of range"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::merkle::{leaf_hash, root};

    fn key(seed: u8) -> SigningKey {
        SigningKey::from_bytes(&[seed; 32])
    }

    #[test]
    fn round_trip_and_exact_format() {
        let k = key(1);
        let r = root(&[leaf_hash(b"a"), leaf_hash(b"b")]);
        let origin = origin_for("node:pump-17");
        let note = sign_checkpoint(&k, &origin, 2, &r);
        let lines: Vec<&str> = note.split('\n').collect();
        assert_eq!(lines[0], "outpost/node:pump-17");
        assert_eq!(lines[1], "2");
        assert_eq!(lines[2], STANDARD.encode(r));
        assert_eq!(lines[3], "");
        assert!(lines[4].starts_with("\u{2014} outpost/node:pump-17 "));
        assert_eq!(lines[5], "");
        assert_eq!(lines.len(), 6);
        let cp = parse_and_verify(&note, &k.verifying_key(), &origin).unwrap();
        assert_eq!(
            cp,
            Checkpoint {
                origin,
                size: 2,
                root: r
            }
        );
    }

    /// The key id is computed independently here from the signed-note definition.
    #[test]
    fn key_id_matches_signed_note_definition() {
        let k = key(2).verifying_key();
        let mut input = b"outpost/node:a".to_vec();
        input.push(b'\n');
        input.push(1);
        input.extend_from_slice(k.as_bytes());
        let d = Sha256::digest(&input);
        assert_eq!(key_id("outpost/node:a", &k), [d[0], d[1], d[2], d[3]]);
    }

    /// The reference example of golang.org/x/mod/sumdb/note (`note_test.go`): Ed25519 is
    /// deterministic, so signing the same text with the same key must reproduce the
    /// published note byte for byte — Go-ecosystem verifiers then accept our notes.
    #[test]
    fn reproduces_the_go_signed_note_reference_vector() {
        let skey = STANDARD
            .decode("AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz")
            .unwrap();
        let vkey = STANDARD
            .decode("ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW")
            .unwrap();
        assert_eq!((skey[0], vkey[0]), (1, 1));
        let k = SigningKey::from_bytes(skey[1..].try_into().unwrap());
        assert_eq!(k.verifying_key().as_bytes(), &vkey[1..]);
        assert_eq!(
            key_id("PeterNeumann", &k.verifying_key()),
            [0xc7, 0x4f, 0x20, 0xa3]
        );
        let text = "If you think cryptography is the answer to your problem,\n\
                    then you don't know what your problem is.\n";
        let expected = format!(
            "{text}\n\u{2014} PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"
        );
        assert_eq!(sign_note(&k, "PeterNeumann", text), expected);
        assert_eq!(
            verify_note(&expected, &k.verifying_key(), "PeterNeumann"),
            Ok(text)
        );
    }

    #[test]
    fn rejects_tampering_and_strangers() {
        let k = key(3);
        let vk = k.verifying_key();
        let o = origin_for("node:x");
        let r = leaf_hash(b"x");
        let note = sign_checkpoint(&k, &o, 1, &r);
        assert!(parse_and_verify(&note, &vk, &o).is_ok());

        let other = key(4).verifying_key();
        assert_eq!(
            parse_and_verify(&note, &other, &o),
            Err(CheckpointError::UnknownKey)
        );
        assert_eq!(
            parse_and_verify(&note, &vk, "outpost/node:y"),
            Err(CheckpointError::WrongOrigin)
        );
        let bigger = note.replacen("\n1\n", "\n2\n", 1);
        assert_eq!(
            parse_and_verify(&bigger, &vk, &o),
            Err(CheckpointError::BadSignature)
        );
        let cases = [
            note.replacen("\n1\n", "\n01\n", 1),
            note.replacen("\n\n", "\nextension line\n\n", 1),
            note.replacen("\n\n", "\n", 1),
            format!("{note}\u{2014} someone AAAA\n"),
            note.trim_end_matches('\n').to_string(),
            note.replacen('\u{2014}', "-", 1),
            String::new(),
            "garbage".into(),
        ];
        for c in cases {
            assert!(parse_and_verify(&c, &vk, &o).is_err(), "accepted: {c:?}");
        }
        // Correctly signed, but not a checkpoint we write: extension lines, bad size,
        // short root.
        let root_b64 = STANDARD.encode(r);
        for text in [
            format!("{o}\n1\n{root_b64}\nextension\n"),
            format!("{o}\n01\n{root_b64}\n"),
            format!("{o}\n1\n{}\n", STANDARD.encode([0u8; 31])),
            format!("{o}\n1\n"),
        ] {
            let signed = sign_note(&k, &o, &text);
            assert!(
                matches!(
                    parse_and_verify(&signed, &vk, &o),
                    Err(CheckpointError::Malformed(_))
                ),
                "accepted: {text:?}"
            );
        }
    }
}
