//! HTTPS for the gateway listener (`[api] tls_cert_file` / `tls_key_file`): rustls with
//! the ring provider, HTTP/1.1, one task per connection on the gateway's tracker.
//!
//! axum's `serve` speaks plain TCP only, so this is the small accept loop it would run,
//! plus the handshake. Shutdown: stop accepting, ask every open connection to finish
//! its in-flight request (long-polls and SSE end on the same token), then return.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::{Extension, Router};
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// A TLS handshake that takes longer than this is dropped (slowloris).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

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

/// Accept TLS connections until `shutdown`, serving `app` on each.
pub async fn serve(
    listener: tokio::net::TcpListener,
    acceptor: TlsAcceptor,
    app: Router,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let conns = TaskTracker::new();
    loop {
        let (tcp, peer) = tokio::select! {
            _ = shutdown.cancelled() => break,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // EMFILE and friends: log, breathe, keep serving.
                    tracing::warn!(event = "accept_failed", error = %e);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let acceptor = acceptor.clone();
        let app = app.clone();
        let shutdown = shutdown.clone();
        conns.spawn(async move {
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    tracing::debug!(event = "tls_handshake_failed", %peer, error = %e);
                    return;
                }
                Err(_) => return,
            };
            serve_conn(tls, peer, app, shutdown).await;
        });
    }
    conns.close();
    conns.wait().await;
    Ok(())
}

async fn serve_conn<IO>(io: IO, peer: SocketAddr, app: Router, shutdown: CancellationToken)
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let svc = TowerToHyperService::new(app.layer(Extension(ConnectInfo(peer))));
    let conn = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(io), svc);
    tokio::pin!(conn);
    tokio::select! {
        r = conn.as_mut() => {
            if let Err(e) = r {
                tracing::debug!(event = "connection_error", %peer, error = %e);
            }
        }
        _ = shutdown.cancelled() => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}
