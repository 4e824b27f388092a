//! HTTPS for the gateway listener (`[api] tls_cert_file` / `tls_key_file`): rustls with
//! the ring provider, HTTP/1.1 over ALPN. The handshake runs in `http_server`, under the
//! header timeout and the connection cap like any other slow start.

use std::path::Path;
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls;
use tokio_rustls::TlsAcceptor;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: {detail}")]
    Pem { path: String, detail: String },
    #[error("tls configuration: {0}")]
    Config(#[from] rustls::Error),
}

/// Load the certificate chain and key into a server config (HTTP/1.1 over ALPN).
pub fn acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor, TlsError> {
    let pem = |p: &Path, e: &dyn std::fmt::Display| TlsError::Pem {
        path: p.display().to_string(),
        detail: e.to_string(),
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| pem(cert, &e))?
        .collect::<Result<_, _>>()
        .map_err(|e| pem(cert, &e))?;
    if certs.is_empty() {
        return Err(pem(cert, &"no certificate in the file"));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| pem(key, &e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(cfg)))
}
