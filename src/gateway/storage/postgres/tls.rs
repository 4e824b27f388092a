//! TLS to PostgreSQL: rustls with the ring provider (the crypto the gateway already
//! carries). The URL's `sslmode` decides whether TLS is used (`disable`, `prefer` — the
//! default: TLS when the server offers it — or `require`); the server's certificate is
//! verified against `store.postgres_ca_file`, or the system's CA bundle when unset.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;
use tokio_rustls::rustls;

pub type Connector = tokio_postgres_rustls::MakeRustlsConnect;

/// Debian's (and most distributions') bundle of trusted roots.
const SYSTEM_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

pub fn connector(ca_file: Option<&Path>) -> Result<Connector, String> {
    let mut roots = rustls::RootCertStore::empty();
    let path: Option<PathBuf> = match ca_file {
        Some(p) => Some(p.to_path_buf()),
        None => Some(PathBuf::from(SYSTEM_BUNDLE)).filter(|p| p.exists()),
    };
    if let Some(p) = &path {
        let certs =
            CertificateDer::pem_file_iter(p).map_err(|e| format!("{}: {e}", p.display()))?;
        for c in certs {
            let c = c.map_err(|e| format!("{}: {e}", p.display()))?;
            // A bundle may hold certificates rustls cannot use; skip those.
            let _ = roots.add(c);
        }
        if ca_file.is_some() && roots.is_empty() {
            return Err(format!("{}: no usable CA certificate", p.display()));
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(cfg))
}
