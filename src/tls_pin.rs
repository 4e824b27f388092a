//! Pinning a gateway's TLS certificate by its key (PROTOCOL §2.1).
//!
//! A gateway's identity document may carry `tls_spki_sha256`: SHA-256 of the DER
//! SubjectPublicKeyInfo of the certificate it serves (the HPKP-style pin, which survives
//! a renewal with the same key). A node that trusts that document verifies the
//! gateway's TLS by the pin alone: the server's certificate must carry that key, and the
//! handshake must be signed by it (checked with the ring provider's algorithms as
//! usual); host name, CA chain and validity dates are not looked at, since the pin,
//! signed by the gateway's Ed25519 key, says more than any of them. Without a pin the
//! node falls back to `upstream.ca_file` (a CA bundle, checked the usual WebPKI way);
//! with neither, the handshake fails with a message that says so.
//!
//! `outpost status` and `wait-ready` for a gateway use the same verifier with the pin of
//! the certificate the gateway is configured to serve.

use std::path::Path;
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use sha2::{Digest, Sha256};
use tokio_rustls::rustls;
use tokio_rustls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use tokio_rustls::rustls::{DigitallySignedStruct, SignatureScheme};

/// SHA-256 of a SubjectPublicKeyInfo.
pub type Pin = [u8; 32];

/// Where the verifier finds the pin at each handshake (the node's trust store can gain
/// the gateway's document while the daemon runs).
pub type PinSource = Arc<dyn Fn() -> Option<Pin> + Send + Sync>;

/// What an `https://` upstream is checked against when there is no pin.
pub const NO_ANCHOR: &str = "nothing to verify the gateway's TLS certificate against: \
     add the gateway's identity document (`outpost trust add gw.json`; it carries \
     tls_spki_sha256) or set upstream.ca_file";

/// The DER SubjectPublicKeyInfo of an X.509 certificate (its TLV, tag and length
/// included), found by walking the DER of `tbsCertificate` (RFC 5280 §4.1).
pub fn spki_der(cert: &[u8]) -> Result<&[u8], String> {
    let bad = |what: &str| format!("not an X.509 certificate ({what})");
    let (cert_body, _) = der_tlv(cert, 0x30).ok_or_else(|| bad("certificate"))?;
    let (tbs, _) = der_tlv(cert_body, 0x30).ok_or_else(|| bad("tbsCertificate"))?;
    let mut rest = tbs;
    // [0] EXPLICIT version, optional.
    if rest.first() == Some(&0xa0) {
        rest = der_skip(rest).ok_or_else(|| bad("version"))?;
    }
    // serialNumber, signature, issuer, validity, subject.
    for what in ["serialNumber", "signature", "issuer", "validity", "subject"] {
        rest = der_skip(rest).ok_or_else(|| bad(what))?;
    }
    let len = der_len_total(rest).ok_or_else(|| bad("subjectPublicKeyInfo"))?;
    if rest.first() != Some(&0x30) {
        return Err(bad("subjectPublicKeyInfo"));
    }
    Ok(&rest[..len])
}

/// SHA-256 of the certificate's SubjectPublicKeyInfo.
pub fn spki_sha256(cert: &[u8]) -> Result<Pin, String> {
    Ok(Sha256::digest(spki_der(cert)?).into())
}

/// The pin of the first certificate in a PEM file (the server's own, in a chain file).
pub fn spki_sha256_of_pem_file(path: &Path) -> Result<Pin, String> {
    let cert = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .next()
        .ok_or_else(|| format!("{}: no certificate in the file", path.display()))?
        .map_err(|e| format!("{}: {e}", path.display()))?;
    spki_sha256(&cert).map_err(|e| format!("{}: {e}", path.display()))
}

/// Total length (header and contents) of the DER element at the start of `b`.
fn der_len_total(b: &[u8]) -> Option<usize> {
    let first = *b.get(1)?;
    let (header, len) = if first < 0x80 {
        (2, first as usize)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 {
            return None;
        }
        let mut len = 0usize;
        for i in 0..n {
            len = (len << 8) | *b.get(2 + i)? as usize;
        }
        (2 + n, len)
    };
    let total = header.checked_add(len)?;
    (total <= b.len()).then_some(total)
}

/// The contents of the element at the start of `b` (which must have tag `tag`) and
/// what follows it.
fn der_tlv(b: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    if *b.first()? != tag {
        return None;
    }
    let total = der_len_total(b)?;
    let header = if b[1] < 0x80 {
        2
    } else {
        2 + (b[1] & 0x7f) as usize
    };
    Some((&b[header..total], &b[total..]))
}

/// What follows the element at the start of `b`.
fn der_skip(b: &[u8]) -> Option<&[u8]> {
    let total = der_len_total(b)?;
    Some(&b[total..])
}

/// A refusal of the verifier, in plain words: rustls shows it with `{:?}` inside its
/// own error (`Other(OtherError(…))`), so its `Debug` is the message too, and
/// [`plain_error`] takes the wrapper off.
struct Refused(String);

impl std::fmt::Debug for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

const WRAPPER: &str = "Other(OtherError(";

/// A transport error's text with rustls' debug wrapper around this verifier's
/// refusals taken off (the message inside is the whole story).
pub fn plain_error(detail: &str) -> String {
    let mut out = String::with_capacity(detail.len());
    let mut rest = detail;
    while let Some(i) = rest.find(WRAPPER) {
        out.push_str(&rest[..i]);
        let inner = &rest[i + WRAPPER.len()..];
        match inner.find("))") {
            Some(j) => {
                out.push_str(&inner[..j]);
                rest = &inner[j + 2..];
            }
            None => {
                out.push_str(inner);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// A pin as the identity document writes it (`tls_spki_sha256`, base64url).
fn pin_text(pin: &Pin) -> String {
    crate::envelope::b64_encode(pin)
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for Refused {}

fn refused(msg: String) -> rustls::Error {
    rustls::Error::InvalidCertificate(rustls::CertificateError::Other(rustls::OtherError(
        Arc::new(Refused(msg)),
    )))
}

/// Verifies a server by its pinned key when [`PinSource`] has one, else by the CA
/// roots given (if any), else refuses.
pub struct PinVerifier {
    pin: PinSource,
    webpki: Option<Arc<dyn ServerCertVerifier>>,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl std::fmt::Debug for PinVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinVerifier")
            .field("ca_roots", &self.webpki.is_some())
            .finish()
    }
}

impl ServerCertVerifier for PinVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if let Some(want) = (self.pin)() {
            let got = spki_sha256(end_entity).map_err(refused)?;
            // Both are public values; no constant-time comparison is needed.
            if got == want {
                return Ok(ServerCertVerified::assertion());
            }
            return Err(refused(format!(
                "the server's TLS key is {}, but the gateway's identity document pins \
                 tls_spki_sha256 {}",
                pin_text(&got),
                pin_text(&want)
            )));
        }
        match &self.webpki {
            Some(v) => {
                v.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
            }
            None => Err(refused(NO_ANCHOR.to_string())),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The CA certificates of a PEM bundle.
fn read_roots(ca_file: &Path) -> Result<rustls::RootCertStore, String> {
    let mut roots = rustls::RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(ca_file)
        .map_err(|e| format!("reading {}: {e}", ca_file.display()))?;
    for c in certs {
        let c = c.map_err(|e| format!("{}: {e}", ca_file.display()))?;
        roots
            .add(c)
            .map_err(|e| format!("{}: {e}", ca_file.display()))?;
    }
    if roots.is_empty() {
        return Err(format!(
            "{}: no CA certificate in the file",
            ca_file.display()
        ));
    }
    Ok(roots)
}

/// A client config (ring provider, HTTP/1.1 over ALPN) whose server check is
/// [`PinVerifier`]: `pin` first, else the CAs of `ca_file`, else refused.
pub fn client_config(
    pin: PinSource,
    ca_file: Option<&Path>,
) -> Result<rustls::ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let webpki: Option<Arc<dyn ServerCertVerifier>> = match ca_file {
        Some(p) => {
            let roots = Arc::new(read_roots(p)?);
            let v = rustls::client::WebPkiServerVerifier::builder_with_provider(
                roots,
                provider.clone(),
            )
            .build()
            .map_err(|e| format!("{}: {e}", p.display()))?;
            Some(v)
        }
        None => None,
    };
    let verifier = Arc::new(PinVerifier {
        pin,
        webpki,
        provider: provider.clone(),
    });
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn der_walk_refuses_garbage() {
        assert!(spki_der(b"").is_err());
        assert!(spki_der(&[0x30, 0x03, 0x30, 0x01]).is_err());
        assert!(spki_der(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]).is_err());
    }
}
