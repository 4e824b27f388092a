//! The `pii_redact` built-in: find personal data in free text and replace it.
//!
//! Each kind is a candidate regex plus a validator, run in a fixed order (e-mail, IBAN,
//! card, IPv6, IPv4, phone). Replacements (`[EMAIL]`, `[IBAN]`…) contain no digits, so a
//! later pass never re-matches inside an earlier replacement. The validators are what
//! keep this from being a digit shredder:
//!
//! - cards: 13–19 digits (spaces/dashes allowed) that pass Luhn **and** start with a
//!   real issuer prefix for that length (Visa, Mastercard, Amex, Discover, JCB, Diners,
//!   UnionPay, Maestro) — so millisecond timestamps and compact dates stay;
//! - IBANs: country letters + check digits and the ISO 7064 mod-97 check;
//! - IPv4: four octets ≤ 255, not part of a longer dotted run (`1.2.3.4.5` is a
//!   version, not an address);
//! - IPv6: whatever `std::net::Ipv6Addr` parses, standing alone (not `std::fs`, not a
//!   time like `07:05:43`, not a MAC address);
//! - phones: `+`/`00` international numbers (8–15 digits, E.164), North American
//!   `(555) 123-4567` / `555-123-4567`, and national numbers with a trunk `0` and
//!   separators (`030 1234567`, `020 7946 0958`, `01 23 45 67 89`). A bare digit run
//!   without `+` or separators is *not* treated as a phone number: order numbers,
//!   counters and timestamps look exactly like that.
//!
//! Known limits: names and postal addresses are not detected; lowercase IBANs are not
//! detected; a 4-part version string (`1.2.3.4`) is indistinguishable from an IPv4
//! address and is redacted.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::{json, Value};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PiiKind {
    Email,
    Phone,
    Card,
    Iban,
    Ipv4,
    Ipv6,
}

impl PiiKind {
    pub const ALL: [PiiKind; 6] = [
        Self::Email,
        Self::Phone,
        Self::Card,
        Self::Iban,
        Self::Ipv4,
        Self::Ipv6,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Email => "email",
            Self::Phone => "phone",
            Self::Card => "card",
            Self::Iban => "iban",
            Self::Ipv4 => "ipv4",
            Self::Ipv6 => "ipv6",
        }
    }

    pub fn placeholder(self) -> &'static str {
        match self {
            Self::Email => "[EMAIL]",
            Self::Phone => "[PHONE]",
            Self::Card => "[CARD]",
            Self::Iban => "[IBAN]",
            Self::Ipv4 => "[IPV4]",
            Self::Ipv6 => "[IPV6]",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redacted {
    pub text: String,
    /// How many of each kind were replaced (zero counts included).
    pub counts: Vec<(PiiKind, usize)>,
}

impl Redacted {
    pub fn count(&self, kind: PiiKind) -> usize {
        self.counts
            .iter()
            .find(|(k, _)| *k == kind)
            .map_or(0, |(_, n)| *n)
    }

    /// The tool's result: `{"text", "redactions":[{"kind","count"}]}`, kinds with a
    /// non-zero count only, in a fixed order.
    pub fn to_json(&self) -> Value {
        let redactions: Vec<Value> = PiiKind::ALL
            .iter()
            .filter_map(|k| {
                let n = self.count(*k);
                (n > 0).then(|| json!({"kind": k.as_str(), "count": n}))
            })
            .collect();
        json!({"text": self.text, "redactions": redactions})
    }
}

pub fn args_schema() -> Value {
    json!({
        "type": "object",
        "required": ["text"],
        "additionalProperties": false,
        "properties": {"text": {"type": "string", "maxLength": 1_048_576}}
    })
}

pub fn result_schema() -> Value {
    json!({
        "type": "object",
        "required": ["text", "redactions"],
        "properties": {
            "text": {"type": "string"},
            "redactions": {"type": "array", "items": {
                "type": "object",
                "required": ["kind", "count"],
                "properties": {
                    "kind": {"enum": ["email", "phone", "card", "iban", "ipv4", "ipv6"]},
                    "count": {"type": "integer", "minimum": 1}
                }
            }}
        }
    })
}

struct Patterns {
    email: Regex,
    iban: Regex,
    card: Regex,
    ipv6: Regex,
    ipv4: Regex,
    phone_plus: Regex,
    phone_00: Regex,
    phone_nanp: Regex,
    phone_national: Regex,
    phone_fr: Regex,
}

/// Compiled once. The patterns are literals covered by the tests below; compiling them
/// cannot fail at run time, but we still return an error rather than panic if it did.
static PATTERNS: LazyLock<Result<Patterns, regex::Error>> = LazyLock::new(|| {
    Ok(Patterns {
        email: Regex::new(
            r"[\p{L}\p{N}][\p{L}\p{N}._%+-]*@[\p{L}\p{N}](?:[\p{L}\p{N}-]*[\p{L}\p{N}])?(?:\.[\p{L}\p{N}](?:[\p{L}\p{N}-]*[\p{L}\p{N}])?)*\.\p{L}{2,24}\b",
        )?,
        iban: Regex::new(r"\b[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]){11,30}\b")?,
        card: Regex::new(r"\b\d(?:[ -]?\d){12,18}\b")?,
        ipv6: Regex::new(r"[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}(?:\.\d{1,3}){0,3}")?,
        ipv4: Regex::new(r"\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}\b")?,
        phone_plus: Regex::new(r"\+\d{1,3}(?:[ .\-]?\(\d{1,4}\)|[ .\-/]?\d{1,5}){1,7}")?,
        phone_00: Regex::new(r"\b00[1-9]\d{0,2}(?:[ .\-/]\(?\d{1,8}\)?){2,6}")?,
        phone_nanp: Regex::new(r"(?:\(\d{3}\) ?|\b\d{3}[.\- ])\d{3}[.\- ]\d{4}\b")?,
        phone_national: Regex::new(r"\b0\d{1,4}(?:[ /\-]\d{2,8}){1,4}\b")?,
        phone_fr: Regex::new(r"\b0[1-9](?:[ .]\d{2}){4}\b")?,
    })
});

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the redactor's patterns failed to compile")]
pub struct RedactorUnavailable;

/// Redact `text`. See the module docs for what counts as what.
pub fn redact(text: &str) -> Result<Redacted, RedactorUnavailable> {
    let p = PATTERNS.as_ref().map_err(|_| RedactorUnavailable)?;
    let mut counts = Vec::new();
    let mut t = text.to_string();
    let mut run = |kind: PiiKind, passes: &[(&Regex, Accept)]| {
        let mut n = 0;
        for (re, accept) in passes {
            let (out, c) = pass(&t, re, kind.placeholder(), *accept);
            t = out;
            n += c;
        }
        counts.push((kind, n));
    };
    run(PiiKind::Email, &[(&p.email, accept_email)]);
    run(PiiKind::Iban, &[(&p.iban, accept_iban)]);
    run(PiiKind::Card, &[(&p.card, accept_card)]);
    run(PiiKind::Ipv6, &[(&p.ipv6, accept_ipv6)]);
    run(PiiKind::Ipv4, &[(&p.ipv4, accept_ipv4)]);
    run(
        PiiKind::Phone,
        &[
            (&p.phone_plus, accept_phone_plus),
            (&p.phone_00, accept_phone_00),
            (&p.phone_nanp, accept_phone_nanp),
            (&p.phone_fr, accept_phone_national),
            (&p.phone_national, accept_phone_national),
        ],
    );
    Ok(Redacted { text: t, counts })
}

/// Decides whether a candidate `[start, end)` is the real thing; may narrow the span.
type Accept = fn(&str, usize, usize) -> Option<(usize, usize)>;

fn pass(text: &str, re: &Regex, placeholder: &str, accept: Accept) -> (String, usize) {
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    let mut n = 0;
    for m in re.find_iter(text) {
        if let Some((s, e)) = accept(text, m.start(), m.end()) {
            if s < last || e > m.end() || s >= e {
                continue;
            }
            out.push_str(&text[last..s]);
            out.push_str(placeholder);
            last = e;
            n += 1;
        }
    }
    out.push_str(&text[last..]);
    (out, n)
}

fn prev(text: &str, i: usize) -> Option<char> {
    text[..i].chars().next_back()
}

fn next(text: &str, i: usize) -> Option<char> {
    text[i..].chars().next()
}

/// True when `text[i..]` continues a number: a digit, or `.`/`-`/`/`/`:` then a digit.
fn continues_number(text: &str, i: usize, seps: &str) -> bool {
    let mut it = text[i..].chars();
    match it.next() {
        Some(c) if c.is_ascii_digit() => true,
        Some(c) if seps.contains(c) => it.next().is_some_and(|d| d.is_ascii_digit()),
        _ => false,
    }
}

/// True when the candidate is the tail of a longer digit-group run ("3704 0044 0532"):
/// the character before it is a digit, or a separator preceded by a digit.
fn after_digit_group(text: &str, s: usize) -> bool {
    let mut it = text[..s].chars().rev();
    match it.next() {
        Some(c) if c.is_ascii_digit() => true,
        Some(' ' | '.' | '-' | '/') => it.next().is_some_and(|c| c.is_ascii_digit()),
        _ => false,
    }
}

fn digits(s: &str) -> String {
    s.chars().filter(char::is_ascii_digit).collect()
}

fn accept_email(text: &str, s: usize, e: usize) -> Option<(usize, usize)> {
    // The regex starts at the first local-part character; reject if it is glued to more
    // local-part characters the regex could not start with (e.g. a leading dot).
    match prev(text, s) {
        Some(c) if c.is_alphanumeric() || "._%+-".contains(c) => None,
        _ => Some((s, e)),
    }
}

fn iban_valid(compact: &str) -> bool {
    let b = compact.as_bytes();
    if !(15..=34).contains(&b.len()) {
        return false;
    }
    let mut rem: u32 = 0;
    for &c in b[4..].iter().chain(&b[..4]) {
        let v = match c {
            b'0'..=b'9' => u32::from(c - b'0'),
            b'A'..=b'Z' => u32::from(c - b'A') + 10,
            _ => return false,
        };
        rem = if v >= 10 {
            (rem * 100 + v) % 97
        } else {
            (rem * 10 + v) % 97
        };
    }
    rem == 1
}

fn accept_iban(text: &str, s: usize, e: usize) -> Option<(usize, usize)> {
    // The candidate may have swallowed following words ("… 00 TOTAL"); try the longest
    // prefix ending at a group boundary that validates.
    let cand = &text[s..e];
    let mut ends: Vec<usize> = cand
        .char_indices()
        .filter(|(_, c)| *c == ' ')
        .map(|(i, _)| i)
        .collect();
    ends.push(cand.len());
    ends.into_iter()
        .rev()
        .find(|&end| iban_valid(&cand[..end].replace(' ', "")))
        .map(|end| (s, s + end))
}

fn luhn(d: &str) -> bool {
    let mut sum = 0u32;
    for (i, c) in d.bytes().rev().enumerate() {
        let mut v = u32::from(c - b'0');
        if i % 2 == 1 {
            v *= 2;
            if v > 9 {
                v -= 9;
            }
        }
        sum += v;
    }
    sum % 10 == 0
}

/// Issuer prefix and length plausible for a payment card.
fn issuer_ok(d: &str) -> bool {
    let len = d.len();
    let p = |n: usize| d[..n].parse::<u32>().unwrap_or(0);
    let in_range = |n: usize, lo: u32, hi: u32| (lo..=hi).contains(&p(n));
    match d.as_bytes()[0] {
        b'4' => matches!(len, 13 | 16 | 19), // Visa
        b'5' => (in_range(2, 51, 55) && len == 16) || in_range(2, 50, 59) && len >= 13, // MC, Maestro
        b'2' => in_range(4, 2221, 2720) && len == 16, // Mastercard 2-series
        b'3' => {
            (in_range(2, 34, 34) || in_range(2, 37, 37)) && len == 15        // Amex
                || in_range(4, 3528, 3589) && (16..=19).contains(&len)        // JCB
                || (in_range(3, 300, 305) || in_range(2, 36, 36) || in_range(2, 38, 39))
                    && (14..=19).contains(&len) // Diners
        }
        b'6' => (16..=19).contains(&len) || len >= 13 && in_range(2, 60, 69), // Discover, UnionPay, Maestro
        _ => false,
    }
}

fn accept_card(text: &str, s: usize, e: usize) -> Option<(usize, usize)> {
    if matches!(prev(text, s), Some('+' | '.' | ',')) || continues_number(text, e, ".,") {
        return None;
    }
    let d = digits(&text[s..e]);
    ((13..=19).contains(&d.len()) && issuer_ok(&d) && luhn(&d)).then_some((s, e))
}

fn accept_ipv6(text: &str, s: usize, e: usize) -> Option<(usize, usize)> {
    let cand = &text[s..e];
    if !cand.bytes().any(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    if prev(text, s).is_some_and(|c| c.is_alphanumeric() || "_:.".contains(c)) {
        return None;
    }
    if next(text, e).is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
        return None;
    }
    cand.parse::<std::net::Ipv6Addr>().ok().map(|_| (s, e))
}

fn accept_ipv4(text: &str, s: usize, e: usize) -> Option<(usize, usize)> {
    if matches!(prev(text, s), Some('.')) || continues_number(text, e, ".") {
        return None;
    }
    let ok = text[s..e].split('.').all(|o| o.parse::<u8>().is_ok());
    ok.then_some((s, e))
}

fn accept_phone_plus(text: &str, s: usize, e: usize) -> Option<(usize, usize)> {
    if prev(text, s).is_some_and(|c| c.is_alphanumeric() || c == '+') {
        return None;
    }
    if continues_number(text, e, ".-/:") {
        return None;
    }
    (8..=15)
        .contains(&digits(&text[s..e]).len())
        .then_some((s, e))
}

fn accept_phone_00(text: &str, s: usize, e: usize) -> Option<(usize, usize)> {
    if after_digit_group(text, s) {
        return None;
    }
    if matches!(prev(text, s), Some('.' | '-' | '/' | ':' | '+'))
        || continues_number(text, e, ".-/:")
    {
        return None;
    }
    (10..=15)
        .contains(&digits(&text[s..e]).len())
        .then_some((s, e))
}

fn accept_phone_nanp(text: &str, s: usize, e: usize) -> Option<(usize, usize)> {
    if after_digit_group(text, s) {
        return None;
    }
    if matches!(prev(text, s), Some('.' | '-' | '/' | ':' | '+'))
        || continues_number(text, e, ".-/:")
    {
        return None;
    }
    Some((s, e))
}

fn accept_phone_national(text: &str, s: usize, e: usize) -> Option<(usize, usize)> {
    if after_digit_group(text, s) {
        return None;
    }
    if matches!(prev(text, s), Some('.' | '-' | '/' | ':' | '+'))
        || continues_number(text, e, ".-/:")
    {
        return None;
    }
    (9..=12)
        .contains(&digits(&text[s..e]).len())
        .then_some((s, e))
}

#[cfg(test)]
#[path = "pii_tests.rs"]
mod tests;
