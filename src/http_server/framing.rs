//! Where each request head starts and whether it is acceptable, as a pure function of
//! the bytes a client sends: no I/O, no clock.
//!
//! hyper answers a head it cannot parse itself, with an empty body. To answer in our
//! JSON shape instead, [`super::guard`] holds each head back until [`Framing`] has
//! checked it with the same parser (httparse) and the same rules hyper applies
//! (`hyper::proto::h1::role::Server::parse`), and only then passes it on. Finding the
//! next head on a keep-alive connection means following the body framing too
//! (Content-Length, chunked); hyper stays the authority on the body itself: when the
//! chunked framing is broken, hyper fails that body and closes, and we stop checking
//! ([`Phase::Opaque`]) rather than guess.

use axum::http::StatusCode;

use crate::api::ApiError;

/// A head larger than this is refused with 431 (hyper's own limit is ~400 KiB; ours
/// must be lower so that we answer first). Tokens and signatures fit many times over.
pub const MAX_HEAD_BYTES: usize = 32 * 1024;
/// hyper's default `max_headers`.
pub const MAX_HEADERS: usize = 100;
/// A chunk-size line or trailer section longer than this: stop following the framing.
const MAX_CHUNK_LINE: usize = 4096;

/// What the connection is reading, for timeouts and for eviction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Between requests: no byte of the next head yet.
    Idle,
    /// Some bytes of a head, not all of them.
    Head,
    /// A request body.
    Body,
    /// We no longer follow the framing; hyper decides.
    Opaque,
}

#[derive(Debug)]
enum State {
    Head,
    Length(u64),
    ChunkSize,
    ChunkData(u64),
    ChunkEnd(u8),
    Trailers { line_len: usize, total: usize },
    Opaque,
}

/// The byte-stream follower; one per connection.
#[derive(Debug)]
pub struct Framing {
    state: State,
    /// Head bytes held back (or a partial chunk-size line).
    held: Vec<u8>,
}

impl Default for Framing {
    fn default() -> Self {
        Framing {
            state: State::Head,
            held: Vec::new(),
        }
    }
}

impl Framing {
    pub fn phase(&self) -> Phase {
        match self.state {
            State::Head if self.held.is_empty() => Phase::Idle,
            State::Head => Phase::Head,
            State::Opaque => Phase::Opaque,
            _ => Phase::Body,
        }
    }

    /// Take `input` as received; append to `out` what may go on to hyper. On `Err` the
    /// connection must be answered with that error and closed.
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), ApiError> {
        let mut carry: Vec<u8>;
        let mut input = input;
        while !input.is_empty() {
            match &mut self.state {
                State::Head => {
                    let newline = input.contains(&b'\n');
                    self.held.extend_from_slice(input);
                    input = &[];
                    let Some(len) = self.check_head(newline)? else {
                        continue;
                    };
                    out.extend_from_slice(&self.held[..len]);
                    carry = self.held.split_off(len);
                    self.held.clear();
                    input = &carry[..];
                }
                State::Length(n) => {
                    let k = (*n).min(input.len() as u64) as usize;
                    out.extend_from_slice(&input[..k]);
                    input = &input[k..];
                    *n -= k as u64;
                    if *n == 0 {
                        self.state = State::Head;
                    }
                }
                State::ChunkSize => input = self.chunk_size(input, out),
                State::ChunkData(n) => {
                    let k = (*n).min(input.len() as u64) as usize;
                    out.extend_from_slice(&input[..k]);
                    input = &input[k..];
                    *n -= k as u64;
                    if *n == 0 {
                        self.state = State::ChunkEnd(0);
                    }
                }
                State::ChunkEnd(seen) => {
                    // hyper accepts CRLF or a bare LF after the data.
                    let b = input[0];
                    out.push(b);
                    input = &input[1..];
                    self.state = match (*seen, b) {
                        (_, b'\n') => State::ChunkSize,
                        (0, b'\r') => State::ChunkEnd(1),
                        _ => State::Opaque,
                    };
                }
                State::Trailers { .. } => {
                    let b = input[0];
                    out.push(b);
                    input = &input[1..];
                    self.trailer(b);
                }
                State::Opaque => {
                    out.extend_from_slice(input);
                    input = &[];
                }
            }
        }
        Ok(())
    }

    /// Follows a chunk-size line: passes on what `input` holds of it and returns the
    /// rest. A complete line says what follows (the chunk's data, or the trailers after
    /// the last chunk); one that does not parse, or grows past [`MAX_CHUNK_LINE`],
    /// stops the following ([`State::Opaque`]).
    fn chunk_size<'i>(&mut self, input: &'i [u8], out: &mut Vec<u8>) -> &'i [u8] {
        let nl = input.iter().position(|&b| b == b'\n');
        let k = nl.map_or(input.len(), |i| i + 1);
        out.extend_from_slice(&input[..k]);
        self.held.extend_from_slice(&input[..k]);
        if nl.is_some() {
            self.state = match httparse::parse_chunk_size(&self.held) {
                Ok(httparse::Status::Complete((_, 0))) => State::Trailers {
                    line_len: 0,
                    total: 0,
                },
                Ok(httparse::Status::Complete((_, n))) => State::ChunkData(n),
                _ => State::Opaque,
            };
            self.held.clear();
        } else if self.held.len() > MAX_CHUNK_LINE {
            self.held.clear();
            self.state = State::Opaque;
        }
        &input[k..]
    }

    /// One byte of the trailer section (already passed on): an empty line ends it and
    /// the next head follows; a section longer than [`MAX_CHUNK_LINE`] stops the
    /// following.
    fn trailer(&mut self, b: u8) {
        let State::Trailers { line_len, total } = &mut self.state else {
            return;
        };
        *total += 1;
        if b == b'\n' {
            if *line_len == 0 {
                self.state = State::Head;
                return;
            }
            *line_len = 0;
        } else if b != b'\r' || *line_len > 0 {
            *line_len += 1;
        }
        if *total > MAX_CHUNK_LINE {
            self.state = State::Opaque;
        }
    }

    /// `Ok(Some(len))` when `held` starts with a complete, acceptable head of `len`
    /// bytes (and `state` is now its body), `Ok(None)` when more is needed.
    ///
    /// `newline`: the bytes just added hold one. A head ends with a newline, so parse
    /// only then: a client that trickles bytes does not make us re-parse for each one.
    fn check_head(&mut self, newline: bool) -> Result<Option<usize>, ApiError> {
        if !newline && self.held.len() <= MAX_HEAD_BYTES {
            return Ok(None);
        }
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut req = httparse::Request::new(&mut headers);
        let len = match req.parse(&self.held) {
            Ok(httparse::Status::Complete(len)) if len <= MAX_HEAD_BYTES => len,
            Ok(_) if self.held.len() <= MAX_HEAD_BYTES => return Ok(None),
            Ok(_) if !self.held.contains(&b'\n') => return Err(uri_too_long()),
            Ok(_) | Err(httparse::Error::TooManyHeaders) => return Err(too_large()),
            Err(httparse::Error::Token) if req.method.is_none() => {
                return Err(bad("the request method is not valid"))
            }
            Err(httparse::Error::Token) => return Err(bad("the request target is not valid")),
            Err(httparse::Error::Version) => {
                return Err(bad("only HTTP/1.0 and HTTP/1.1 are served"))
            }
            Err(_) => return Err(bad("the request line or a header is malformed")),
        };
        let method = req.method.unwrap_or_default();
        if axum::http::Method::from_bytes(method.as_bytes()).is_err() {
            return Err(bad("the request method is not valid"));
        }
        if axum::http::Uri::try_from(req.path.unwrap_or_default()).is_err() {
            return Err(bad("the request target is not valid"));
        }
        self.state = body_framing(req.version == Some(1), req.headers)?;
        Ok(Some(len))
    }
}

/// RFC 9112 §6.3 for requests, as hyper applies it: Transfer-Encoding (HTTP/1.1 only,
/// `chunked` last) wins over Content-Length; Content-Length is digits only and every
/// copy agrees; otherwise there is no body.
fn body_framing(http11: bool, headers: &[httparse::Header<'_>]) -> Result<State, ApiError> {
    let mut te: Option<bool> = None;
    let mut cl: Option<u64> = None;
    for h in headers {
        if h.name.eq_ignore_ascii_case("transfer-encoding") {
            if !http11 {
                return Err(bad("Transfer-Encoding is not allowed in HTTP/1.0"));
            }
            let last = std::str::from_utf8(h.value)
                .ok()
                .and_then(|s| s.rsplit(',').next());
            te = Some(last.is_some_and(|e| e.trim().eq_ignore_ascii_case("chunked")));
        } else if h.name.eq_ignore_ascii_case("content-length") && te.is_none() {
            let n = digits(h.value)
                .ok_or_else(|| bad("Content-Length must be a non-negative decimal number"))?;
            if cl.is_some_and(|prev| prev != n) {
                return Err(bad("conflicting Content-Length headers"));
            }
            cl = Some(n);
        }
    }
    Ok(match (te, cl) {
        (Some(true), _) => State::ChunkSize,
        (Some(false), _) => return Err(bad("Transfer-Encoding must end with chunked")),
        (None, Some(n)) if n >= u64::MAX - 2 => return Err(too_large()),
        (None, Some(0)) | (None, None) => State::Head,
        (None, Some(n)) => State::Length(n),
    })
}

fn digits(b: &[u8]) -> Option<u64> {
    if b.is_empty() {
        return None;
    }
    b.iter().try_fold(0u64, |acc, &c| match c {
        b'0'..=b'9' => acc.checked_mul(10)?.checked_add(u64::from(c - b'0')),
        _ => None,
    })
}

fn bad(message: &str) -> ApiError {
    ApiError::bad_request(message)
}

fn too_large() -> ApiError {
    ApiError::new(
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        "headers_too_large",
        format!("the request head exceeds {MAX_HEAD_BYTES} bytes or {MAX_HEADERS} headers"),
    )
}

fn uri_too_long() -> ApiError {
    ApiError::new(
        StatusCode::URI_TOO_LONG,
        "uri_too_long",
        format!("the request line exceeds {MAX_HEAD_BYTES} bytes"),
    )
}

#[cfg(test)]
#[path = "framing_tests.rs"]
mod tests;
