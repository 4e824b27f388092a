//! `pii_redact` on realistic text, including near misses that must survive.

use super::*;

fn r(text: &str) -> Redacted {
    redact(text).unwrap()
}

#[track_caller]
fn redacts(text: &str, kind: PiiKind, expected: &str) {
    let out = r(text);
    assert_eq!(out.text, expected, "input: {text:?}");
    assert_eq!(
        out.count(kind),
        1,
        "input: {text:?} counts: {:?}",
        out.counts
    );
}

#[track_caller]
fn untouched(text: &str) {
    let out = r(text);
    assert_eq!(out.text, text, "counts: {:?}", out.counts);
    assert!(out.counts.iter().all(|(_, n)| *n == 0));
}

#[test]
fn realistic_support_ticket() {
    let text =
        "Ticket #88213 (2024-11-22T07:05:43.123Z): customer Jane <jane.doe+pump@example.co.uk> \
                called from +44 20 7946 0958 about a refund to card 4111 1111 1111 1111 \
                (order 4000123412341235). Refund IBAN: DE89 3704 0044 0532 0130 00. \
                Device at 192.168.1.20, mgmt fe80::1ff:fe23:4567:890a, firmware 1.2.3.4.5.";
    let out = r(text);
    assert_eq!(
        out.text,
        "Ticket #88213 (2024-11-22T07:05:43.123Z): customer Jane <[EMAIL]> \
         called from [PHONE] about a refund to card [CARD] \
         (order 4000123412341235). Refund IBAN: [IBAN]. \
         Device at [IPV4], mgmt [IPV6], firmware 1.2.3.4.5."
    );
    let v = out.to_json();
    assert_eq!(v["redactions"].as_array().unwrap().len(), 6);
    assert_eq!(
        v["redactions"][0],
        serde_json::json!({"kind": "email", "count": 1})
    );
}

#[test]
fn emails() {
    redacts(
        "mail a.b-c_d@sub.example.com now",
        PiiKind::Email,
        "mail [EMAIL] now",
    );
    redacts("X@Y.ORG.", PiiKind::Email, "[EMAIL].");
    untouched("user@localhost and @handle and a@b");
}

#[test]
fn cards_only_when_luhn_valid_with_a_real_issuer() {
    assert!(!luhn("4000123412341235"));
    redacts(
        "Visa 4111-1111-1111-1111 ok",
        PiiKind::Card,
        "Visa [CARD] ok",
    );
    redacts("MC 5500 0000 0000 0004", PiiKind::Card, "MC [CARD]");
    redacts("Amex 3782 822463 10005", PiiKind::Card, "Amex [CARD]");
    redacts(
        "Discover 6011111111111117.",
        PiiKind::Card,
        "Discover [CARD].",
    );
    // Near misses.
    untouched("order number 4000123412341235 shipped");
    untouched("card 4111 1111 1111 1112 declined");
    // Luhn-valid but no issuer starts with 1 or 9: a millisecond timestamp.
    assert!(luhn("1700000000004") && luhn("20241122070549") && luhn("9999999999999995"));
    untouched("ts=1700000000004 seq=42");
    untouched("built 20241122070549 from 9999999999999995");
    untouched("pi is 3.14159265358979323846");
}

#[test]
fn ibans_only_with_valid_check_digits() {
    redacts(
        "pay to GB82 WEST 1234 5698 7654 32 please",
        PiiKind::Iban,
        "pay to [IBAN] please",
    );
    redacts("IBAN DE89370400440532013000", PiiKind::Iban, "IBAN [IBAN]");
    redacts(
        "DE89 3704 0044 0532 0130 00 TOTAL DUE",
        PiiKind::Iban,
        "[IBAN] TOTAL DUE",
    );
    untouched("IBAN DE89 3704 0044 0532 0130 01 (typo)");
    untouched("part AB12CDEF3456GHIJ78 in stock");
}

#[test]
fn phones_international_and_national() {
    redacts(
        "call +49 30 1234567 today",
        PiiKind::Phone,
        "call [PHONE] today",
    );
    redacts("call +1 (555) 123-4567", PiiKind::Phone, "call [PHONE]");
    redacts("tel:+4915112345678", PiiKind::Phone, "tel:[PHONE]");
    redacts(
        "US office (555) 123-4567.",
        PiiKind::Phone,
        "US office [PHONE].",
    );
    redacts("fax 555.123.4567", PiiKind::Phone, "fax [PHONE]");
    redacts("Tel. 030 1234567", PiiKind::Phone, "Tel. [PHONE]");
    redacts("Tel 030/12345678", PiiKind::Phone, "Tel [PHONE]");
    redacts("UK 020 7946 0958", PiiKind::Phone, "UK [PHONE]");
    redacts("FR 01 23 45 67 89", PiiKind::Phone, "FR [PHONE]");
    redacts("from 0049 30 1234567", PiiKind::Phone, "from [PHONE]");
}

#[test]
fn phone_near_misses_survive() {
    untouched("order 1234567890123456 and counter 0012345678");
    untouched("2024-11-22 07:05:43 and 22.11.2024 12:30 and 05/11/2024 10:00");
    untouched("temperature +21.5 C, delta +3.2%, growth +100");
    untouched("range 10-20-30, ISO 8601 2024-W47-5");
    untouched("due 01/02/2024 12:30");
}

#[test]
fn ip_addresses() {
    redacts(
        "from 10.0.0.1:8080 ok",
        PiiKind::Ipv4,
        "from [IPV4]:8080 ok",
    );
    redacts("net 192.168.100.255/24", PiiKind::Ipv4, "net [IPV4]/24");
    redacts("peer [2001:db8::1]:443", PiiKind::Ipv6, "peer [[IPV6]]:443");
    redacts("lo ::1 up", PiiKind::Ipv6, "lo [IPV6] up");
    redacts(
        "mapped ::ffff:192.0.2.1 here",
        PiiKind::Ipv6,
        "mapped [IPV6] here",
    );
    redacts(
        "full 2001:0db8:85a3:0000:0000:8a2e:0370:7334.",
        PiiKind::Ipv6,
        "full [IPV6].",
    );
    untouched("firmware 1.2.3.4.5 and 256.1.1.1 and 1.2.3");
    untouched("at 07:05:43, mac aa:bb:cc:dd:ee:ff, path std::fs::read");
}

#[test]
fn empty_and_unicode_text() {
    untouched("");
    redacts(
        "Grüße an jürgen@example.de 😀",
        PiiKind::Email,
        "Grüße an [EMAIL] 😀",
    );
}

#[test]
fn result_lists_only_nonzero_kinds() {
    let v = r("nothing here").to_json();
    assert_eq!(
        v,
        serde_json::json!({"text": "nothing here", "redactions": []})
    );
    let v = r("a@b.io, c@d.io").to_json();
    assert_eq!(
        v["redactions"],
        serde_json::json!([{"kind": "email", "count": 2}])
    );
}

#[test]
fn machine_log_lines_survive() {
    for line in [
        "2024-11-22T07:05:43.123456+01:00 INFO request_id=550e8400-e29b-41d4-a716-446655440000 GET /api/v1/items/12345 200 1.234ms",
        "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08 size=104857600",
        "build v2.10.3-rc.1 (commit 3f2a9c1) on 22/11/2024 at 14:30:00, uptime 12:34:56",
        "price $1,234.56, qty 1000000, ratio 0.000123, temp -12.5°C, id 2024.11.22",
        "pid 4242 ppid 1 rss 12345678 kB, load 0.52 0.58 0.59, epoch 1732262743",
        "modbus reg 40001=0x1F4, crc 0xA001, serial 123456789012",
    ] {
        untouched(line);
    }
}
