//! The gateway's own TLS certificate, made by `outpost init --role gateway` (rcgen,
//! ring backend; the `tls-gen` cargo feature, on by default and off in device builds).
//!
//! Self-signed, ECDSA P-256: nodes pin its key through the gateway's identity document
//! (`tls_spki_sha256`), so no CA is involved and its names and dates matter only to
//! other clients (it names `localhost`, the host's name, loopback and the listen
//! address, and is valid for 30 years).

/// What init writes and signs.
pub struct Generated {
    pub cert_pem: String,
    /// PKCS#8 PEM; written 0600.
    pub key_pem: String,
    /// SHA-256 of the certificate's SubjectPublicKeyInfo.
    pub pin: [u8; 32],
}

/// Whether this build can generate a certificate.
pub const AVAILABLE: bool = cfg!(feature = "tls-gen");

/// A self-signed certificate for gateway `node_id` listening on `listen`.
#[cfg(feature = "tls-gen")]
pub fn generate(node_id: &str, listen: std::net::IpAddr) -> Result<Generated, String> {
    let key =
        rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(|e| e.to_string())?;
    let mut names = vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ];
    if let Some(h) = host_name() {
        names.push(h);
    }
    if !listen.is_unspecified() && !listen.is_loopback() {
        names.push(listen.to_string());
    }
    let mut params = rcgen::CertificateParams::new(names).map_err(|e| e.to_string())?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("outpost {node_id}"));
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::days(1);
    params.not_after = now + time::Duration::days(365 * 30);
    let cert = params.self_signed(&key).map_err(|e| e.to_string())?;
    let pin = crate::tls_pin::spki_sha256(cert.der())?;
    Ok(Generated {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        pin,
    })
}

#[cfg(not(feature = "tls-gen"))]
pub fn generate(node_id: &str, listen: std::net::IpAddr) -> Result<Generated, String> {
    let _ = (node_id, listen);
    Err("this build has no certificate generator (the `tls-gen` feature)".into())
}

/// This host's name, when it is a usable DNS name.
#[cfg(feature = "tls-gen")]
fn host_name() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates within it
    // on success (a truncated name is refused below by the DNS-name check).
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0)?;
    let name = std::str::from_utf8(&buf[..end]).ok()?.to_ascii_lowercase();
    let ok = !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
        && name != "localhost";
    ok.then_some(name)
}

#[cfg(all(test, feature = "tls-gen"))]
mod tests {
    use super::*;
    use rcgen::PublicKeyData;

    /// The DER walk of crate::tls_pin finds exactly the SubjectPublicKeyInfo the
    /// certificate was made with, and rustls takes the pair as a server identity.
    #[test]
    fn the_pin_is_the_hash_of_the_key_it_was_made_with() {
        use sha2::Digest;
        let g = generate("gateway:main", "0.0.0.0".parse().unwrap()).unwrap();
        let key = rcgen::KeyPair::from_pem(&g.key_pem).unwrap();
        let want: [u8; 32] = sha2::Sha256::digest(key.subject_public_key_info()).into();
        assert_eq!(g.pin, want);
        let dir = tempfile::tempdir().unwrap();
        let (c, k) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
        std::fs::write(&c, &g.cert_pem).unwrap();
        std::fs::write(&k, &g.key_pem).unwrap();
        assert_eq!(crate::tls_pin::spki_sha256_of_pem_file(&c).unwrap(), want);
        crate::gateway::tls::acceptor(&c, &k).unwrap();
    }
}
