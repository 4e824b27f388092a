use super::*;

/// Feed `input` in pieces of `step` bytes; what hyper would see, or the first refusal.
fn run(input: &[u8], step: usize) -> Result<(Vec<u8>, Phase), ApiError> {
    let mut f = Framing::default();
    let mut out = Vec::new();
    for piece in input.chunks(step) {
        f.feed(piece, &mut out)?;
    }
    Ok((out, f.phase()))
}

fn every_split(input: &[u8]) -> Vec<Result<(Vec<u8>, Phase), ApiError>> {
    [1, 2, 3, 7, 64, input.len().max(1)]
        .iter()
        .map(|&s| run(input, s))
        .collect()
}

const GET: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";

#[test]
fn valid_keep_alive_streams_pass_through_whole_in_any_split() {
    let mut stream = GET.to_vec();
    stream.extend_from_slice(b"POST /v1/x HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello");
    stream.extend_from_slice(
        b"POST /v1/x HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n\
          5;ext=1\r\nhello\r\n0\r\nX-T: 1\r\n\r\n",
    );
    stream.extend_from_slice(b"POST /v1/x HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n");
    stream.extend_from_slice(GET);
    for r in every_split(&stream) {
        let (out, phase) = r.unwrap();
        assert_eq!(out, stream);
        assert_eq!(phase, Phase::Idle);
    }
}

#[test]
fn a_partial_head_is_held_back_and_a_partial_body_is_not() {
    let (out, phase) = run(b"GET / HTTP/1.1\r\nHost:", 100).unwrap();
    assert!(out.is_empty());
    assert_eq!(phase, Phase::Head);
    let (out, phase) = run(b"POST / HTTP/1.1\r\nContent-Length: 100\r\n\r\nx", 100).unwrap();
    assert_eq!(out.len(), 41);
    assert_eq!(phase, Phase::Body);
}

#[test]
fn body_bytes_that_look_like_a_bad_head_are_body() {
    let s =
        b"POST / HTTP/1.1\r\nContent-Length: 12\r\n\r\n\x00garbage\r\n\r\nGET / HTTP/1.1\r\n\r\n";
    for r in every_split(s) {
        assert_eq!(r.unwrap().0, s.to_vec());
    }
}

fn refused(input: &[u8]) -> (u16, &'static str) {
    let mut codes: Vec<(u16, &'static str)> = every_split(input)
        .into_iter()
        .map(|r| {
            let e = r.expect_err("refused");
            (e.status.as_u16(), e.code)
        })
        .collect();
    codes.dedup();
    assert_eq!(codes.len(), 1, "same answer in every split: {codes:?}");
    codes[0]
}

#[test]
fn malformed_heads_get_our_codes() {
    let cases: &[(&[u8], u16, &str)] = &[
        (b"\x01\x02garbage\r\n\r\n", 400, "bad_request"),
        (b"GET /\x7f HTTP/1.1\r\n\r\n", 400, "bad_request"),
        (b"GET / HTTP/2.0\r\n\r\n", 400, "bad_request"),
        (
            b"GET / HTTP/1.1\r\nBad Header: x\r\n\r\n",
            400,
            "bad_request",
        ),
        (
            b"POST / HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
            400,
            "bad_request",
        ),
        (
            b"POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
            400,
            "bad_request",
        ),
        (
            b"POST / HTTP/1.1\r\nContent-Length: 5, 5\r\n\r\n",
            400,
            "bad_request",
        ),
        (
            b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
            400,
            "bad_request",
        ),
        (
            b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
            400,
            "bad_request",
        ),
        (
            b"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n",
            400,
            "bad_request",
        ),
    ];
    for (input, status, code) in cases {
        assert_eq!(
            refused(input),
            (*status, *code),
            "{}",
            String::from_utf8_lossy(input)
        );
    }
}

#[test]
fn oversized_heads_are_431_and_long_request_lines_414() {
    let mut big = b"GET / HTTP/1.1\r\nX-Big: ".to_vec();
    big.extend(std::iter::repeat_n(b'a', MAX_HEAD_BYTES));
    big.extend_from_slice(b"\r\n\r\n");
    assert_eq!(refused(&big), (431, "headers_too_large"));
    let mut many = b"GET / HTTP/1.1\r\n".to_vec();
    for i in 0..=MAX_HEADERS {
        many.extend_from_slice(format!("X-{i}: 1\r\n").as_bytes());
    }
    many.extend_from_slice(b"\r\n");
    assert_eq!(refused(&many), (431, "headers_too_large"));
    let mut line = b"GET /".to_vec();
    line.extend(std::iter::repeat_n(b'a', MAX_HEAD_BYTES + 10));
    assert_eq!(refused(&line), (414, "uri_too_long"));
}

#[test]
fn a_head_just_under_the_limit_passes() {
    let mut h = b"GET / HTTP/1.1\r\nX-Big: ".to_vec();
    h.extend(std::iter::repeat_n(b'a', MAX_HEAD_BYTES - h.len() - 4));
    h.extend_from_slice(b"\r\n\r\n");
    assert_eq!(h.len(), MAX_HEAD_BYTES);
    assert_eq!(run(&h, 1000).unwrap().0, h);
}

#[test]
fn broken_chunked_framing_is_left_to_hyper() {
    let s = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n\x00\x01 anything";
    let (out, phase) = run(s, 5).unwrap();
    assert_eq!(out, s.to_vec());
    assert_eq!(phase, Phase::Opaque);
}
