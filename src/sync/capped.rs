//! Reading a peer's answer with a cap: every body this binary reads from another
//! process (the gateway's answers to a node, an enrollment's hello and answer, a
//! daemon's answer to the CLI) goes through here, so a peer that answers with an
//! endless body costs at most the cap in memory, never the whole stream.
//!
//! The body is streamed and the read stops as soon as it exceeds the cap (a declared
//! `Content-Length` over it is refused before reading anything).

use std::io::Read;

/// Why a capped body could not be read.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("answer too large (over {max} bytes)")]
    TooLarge { max: usize },
    #[error(transparent)]
    Read(#[from] reqwest::Error),
}

/// The body of `resp`, refused once it exceeds `max` bytes.
pub async fn read(mut resp: reqwest::Response, max: usize) -> Result<Vec<u8>, BodyError> {
    if resp.content_length().is_some_and(|n| n > max as u64) {
        return Err(BodyError::TooLarge { max });
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await? {
        if body.len() + chunk.len() > max {
            return Err(BodyError::TooLarge { max });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// [`read`] for a blocking reader (the CLI's loopback client): everything `r` yields,
/// refused once it exceeds `max` bytes. What was read before an error is in `out`.
pub fn read_blocking(r: impl Read, max: usize, out: &mut Vec<u8>) -> std::io::Result<()> {
    let limit = u64::try_from(max).unwrap_or(u64::MAX).saturating_add(1);
    r.take(limit).read_to_end(out)?;
    if out.len() > max {
        return Err(std::io::Error::other(format!(
            "answer too large (over {max} bytes)"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blocking_read_stops_after_the_cap() {
        let mut out = Vec::new();
        read_blocking(std::io::repeat(b'x'), 1000, &mut out).unwrap_err();
        assert_eq!(out.len(), 1001, "one byte past the cap, then stop");
        let mut out = Vec::new();
        read_blocking(&b"exactly"[..], 7, &mut out).unwrap();
        assert_eq!(out, b"exactly");
    }
}
