//! The CLI's tiny loopback HTTP/1.1 client (`outpost status`, `wait-ready` and the
//! gateway commands talk to their own daemon with it): no HTTP client runtime, the
//! answer capped.

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

/// The largest answer the CLI reads from its daemon (head and body): a gateway's fleet
/// listing is the largest, far below this; anything over it is refused, not buffered.
const MAX_ANSWER_BYTES: usize = 64 * 1024 * 1024;

/// A tiny loopback HTTP/1.1 GET, enough for status without an HTTP client runtime:
/// the status code and the body. With `tls`, over TLS to a server whose certificate
/// carries the key of that pin.
pub(super) fn http_request(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    tls: Option<crate::tls_pin::Pin>,
    read_timeout: Duration,
) -> std::io::Result<(u16, String)> {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(3))?;
    s.set_read_timeout(Some(read_timeout))?;
    s.set_write_timeout(Some(Duration::from_secs(5)))?;
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nAccept: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    let mut request = request.into_bytes();
    request.extend_from_slice(body);
    let mut raw = Vec::new();
    match tls {
        None => {
            let mut s = s;
            s.write_all(&request)?;
            crate::sync::capped::read_blocking(s, MAX_ANSWER_BYTES, &mut raw)?;
        }
        // Only a gateway serves its API over TLS: a device build has no such daemon to
        // ask, and leaves the synchronous TLS client out.
        #[cfg(not(feature = "gateway"))]
        Some(_) => {
            return Err(std::io::Error::other(
                "this build has no gateway: its local API is plain HTTP",
            ))
        }
        #[cfg(feature = "gateway")]
        Some(pin) => {
            use tokio_rustls::rustls;
            let cfg = crate::tls_pin::client_config(std::sync::Arc::new(move || Some(pin)), None)
                .map_err(std::io::Error::other)?;
            let name = rustls_pki_types::ServerName::IpAddress(addr.ip().into());
            let conn = rustls::ClientConnection::new(std::sync::Arc::new(cfg), name)
                .map_err(std::io::Error::other)?;
            let mut t = rustls::StreamOwned::new(conn, s);
            t.write_all(&request)?;
            t.flush()?;
            match crate::sync::capped::read_blocking(&mut t, MAX_ANSWER_BYTES, &mut raw) {
                Ok(_) => {}
                // A peer that closes without close_notify after a whole answer.
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => {}
                Err(e) => return Err(e),
            }
        }
    }
    let buf = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = buf
        .split_once("\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("malformed HTTP response"))?;
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse::<u16>().ok())
        .ok_or_else(|| std::io::Error::other("malformed HTTP status line"))?;
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return Ok((code, dechunk(body)));
    }
    Ok((code, body.to_string()))
}

fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size_line, after)) = rest.split_once("\r\n") {
        let size = usize::from_str_radix(size_line.trim(), 16).unwrap_or(0);
        if size == 0 || after.len() < size {
            break;
        }
        out.push_str(&after[..size]);
        rest = after[size..].trim_start_matches("\r\n");
    }
    out
}
