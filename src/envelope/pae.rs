//! PASETO pre-authentication encoding and base64url helpers.
//!
//! Every signature and every AEAD associated data in outpost is computed over PAE, never
//! over JSON text: PAE is injective (lengths are explicit), so two different tuples of
//! pieces can never produce the same signed bytes, whatever characters the pieces hold.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;

/// PASETO PAE: `u64le(n)` followed by `u64le(len(p)) ‖ p` for each piece.
///
/// PASETO clears the top bit of every length; with lengths bounded by memory that bit is
/// always zero anyway, so this is byte-identical to the reference encoding.
pub fn pae(pieces: &[&[u8]]) -> Vec<u8> {
    let total: usize = 8 + pieces.iter().map(|p| 8 + p.len()).sum::<usize>();
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(&le64(pieces.len()));
    for p in pieces {
        out.extend_from_slice(&le64(p.len()));
        out.extend_from_slice(p);
    }
    out
}

fn le64(n: usize) -> [u8; 8] {
    ((n as u64) & (u64::MAX >> 1)).to_le_bytes()
}

/// base64url without padding (RFC 4648 §5), the encoding of every binary field on the wire.
pub fn b64_encode(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Strict base64url-no-pad decode: padding, the standard alphabet and non-zero trailing
/// bits are all refused, so each byte string has exactly one accepted text form (a
/// signature cannot be "re-encoded" to dodge a seen-signature cache).
pub fn b64_decode(text: &str) -> Result<Vec<u8>, base64::DecodeError> {
    URL_SAFE_NO_PAD.decode(text)
}

/// Decode into a fixed-size array, refusing any other length.
pub fn b64_decode_array<const N: usize>(text: &str) -> Option<[u8; N]> {
    let v = b64_decode(text).ok()?;
    <[u8; N]>::try_from(v.as_slice()).ok()
}

/// serde adapter: `Vec<u8>` as base64url-no-pad text.
pub(crate) mod serde_b64 {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::b64_encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        super::b64_decode(&text)
            .map_err(|_| serde::de::Error::custom("invalid base64url (no padding)"))
    }
}

/// serde adapter: `Option<Vec<u8>>` as base64url-no-pad text (absent when `None`).
pub(crate) mod serde_b64_opt {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match bytes {
            Some(b) => s.serialize_str(&super::b64_encode(b)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        super::b64_decode(&text)
            .map(Some)
            .map_err(|_| serde::de::Error::custom("invalid base64url (no padding)"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The PAE examples from the PASETO specification (Common.md, "PAE Definition").
    #[test]
    fn pae_matches_paseto_spec_examples() {
        assert_eq!(pae(&[]), b"\x00\x00\x00\x00\x00\x00\x00\x00".to_vec());
        assert_eq!(
            pae(&[b""]),
            b"\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00".to_vec()
        );
        let mut want = Vec::new();
        want.extend_from_slice(b"\x01\x00\x00\x00\x00\x00\x00\x00");
        want.extend_from_slice(b"\x04\x00\x00\x00\x00\x00\x00\x00");
        want.extend_from_slice(b"test");
        assert_eq!(pae(&[b"test"]), want);
    }

    #[test]
    fn pae_is_injective_on_split_points() {
        assert_ne!(pae(&[b"ab", b"c"]), pae(&[b"a", b"bc"]));
    }

    #[test]
    fn b64_is_strict() {
        assert_eq!(b64_encode(&[0xfb, 0xff]), "-_8");
        assert_eq!(b64_decode("-_8").unwrap(), vec![0xfb, 0xff]);
        assert!(b64_decode("-_8=").is_err(), "padding refused");
        assert!(b64_decode("+/8").is_err(), "standard alphabet refused");
        assert!(b64_decode("-_9").is_err(), "non-zero trailing bits refused");
        assert!(b64_decode_array::<2>("-_8").is_some());
        assert!(b64_decode_array::<3>("-_8").is_none());
    }
}
