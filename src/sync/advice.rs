//! Why a node cannot reach its gateway, in the operator's terms: a stable class (a change
//! of class is worth a log line, the same class again is not) and what to do about it.
//! Pure: the worker decides when to say it ([`Reporter`]).

use super::transport::SyncError;

/// The classes that mean no answer came from the gateway at all (as opposed to an
/// answer that refused this node).
pub const UNREACHABLE: &[&str] = &[
    "refused",
    "dns",
    "timeout",
    "unreachable",
    "network",
    "slow",
];

/// A failure's class and the fix to try.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Advice {
    /// Stable, snake_case: `refused`, `dns`, `tls_untrusted`, `tls_pin_mismatch`,
    /// `tls_plain`, `timeout`,
    /// `unreachable`, `network`, `slow`, `unauthorized`, `forbidden`, `not_found`,
    /// `gateway_error`, `status`, `clock_skew`, `malformed`, `setup`, `retired`.
    pub class: &'static str,
    pub hint: &'static str,
}

const fn advice(class: &'static str, hint: &'static str) -> Advice {
    Advice { class, hint }
}

/// What `e` means and what to do.
pub fn advise(e: &SyncError) -> Advice {
    match e {
        SyncError::Network(detail) => network(&detail.to_ascii_lowercase()),
        SyncError::Slow(_) => advice(
            "slow",
            "no answer from the gateway within upstream.request_timeout_s: the gateway is \
             unreachable (a link that drops packets, a gateway host that is down) or \
             overloaded; the node retries on its backoff (upstream.retry_max_s), and on a \
             slow link halves its batches until they get through",
        ),
        SyncError::Status {
            status: 401, code, ..
        } if code == crate::enroll::codes::NODE_REVOKED => advice(
            "retired",
            "the gateway retired this node (`outpost nodes revoke`) and refuses its key for \
                 good; trusting this key again is refused too. To bring the device back, give it \
                 a new key and enroll it again with an enrollment token (docs/INSTALL.md \
                 \"A reflashed card\")",
        ),
        SyncError::Status { status: 401, .. } => advice(
            "unauthorized",
            "the gateway refuses this node's signature: it does not trust this node, or trusts \
             it without `send`; on the gateway run `outpost trust add <this node's identity \
             document> --send`",
        ),
        SyncError::Status { status: 403, .. } => advice(
            "forbidden",
            "the gateway refuses this node: check its trust entry for this node",
        ),
        SyncError::Status { status: 404, .. } => advice(
            "not_found",
            "no such route there: upstream.url must be the gateway's API base URL (scheme, \
             host and port only)",
        ),
        SyncError::Status { status, .. } if *status >= 500 => advice(
            "gateway_error",
            "the gateway is failing or cannot reach its database: see its /readyz and journal",
        ),
        SyncError::Status { .. } => advice("status", "see the gateway's journal"),
        SyncError::ClockSkew { .. } => advice(
            "clock_skew",
            "this node's clock and the gateway's differ by more than \
             security.max_clock_skew_s: fix NTP on the one that is wrong",
        ),
        SyncError::Malformed(_) => advice(
            "malformed",
            "something answers at upstream.url, but not as an outpost gateway: check the URL",
        ),
        SyncError::Setup(_) => advice("setup", "see the message; the node retries"),
    }
}

fn network(d: &str) -> Advice {
    let has = |needles: &[&str]| needles.iter().any(|n| d.contains(n));
    if has(&["connection refused"]) {
        advice(
            "refused",
            "nothing listens there: is the gateway running, and does its api.listen reach \
             beyond loopback (e.g. 0.0.0.0:8787)?",
        )
    } else if has(&[
        "dns error",
        "failed to lookup",
        "name or service not known",
        "no address",
    ]) {
        advice(
            "dns",
            "the gateway's host name does not resolve: check upstream.url and the node's DNS \
             (or /etc/hosts)",
        )
    } else if has(&[
        "invalidcontenttype",
        "corrupt message",
        "wrong version number",
    ]) {
        advice(
            "tls_plain",
            "an https:// URL, but the gateway speaks plain HTTP: give the gateway a certificate \
             (api.tls_cert_file) or use http:// on a network you trust",
        )
    } else if has(&["document pins"]) {
        advice(
            "tls_pin_mismatch",
            "the gateway serves another key than its trusted identity document pins (a new \
             certificate key, or someone else at that address): take the gateway's current \
             `outpost identity --json` and `outpost trust add` it again, or find who answers",
        )
    } else if has(&[
        "unknownissuer",
        "invalid peer certificate",
        "certificate",
        "notvalidforname",
    ]) {
        advice(
            "tls_untrusted",
            "the gateway's TLS certificate is not trusted here: trust the gateway's identity \
             document (`outpost trust add gw.json --send --issue`) or set upstream.ca_file to \
             the CA that signed it",
        )
    } else if has(&["timed out", "timeout"]) {
        advice(
            "timeout",
            "no answer to the connection: a firewall, or a wrong address in upstream.url",
        )
    } else if has(&["unreachable", "no route"]) {
        advice(
            "unreachable",
            "no route to the gateway: check this node's network",
        )
    } else {
        advice(
            "network",
            "check upstream.url and the network between node and gateway",
        )
    }
}

/// When a failure is worth a log line: the first one, every change of class, and the same
/// class again only after `repeat_ms` (a reminder, not a line per retry). Reset by a
/// success. Pure: the caller passes the time.
#[derive(Debug, Default)]
pub struct Reporter {
    last: Option<(&'static str, u64)>,
}

impl Reporter {
    /// A failure of `class` at `now_ms`: whether to log it.
    pub fn failed(&mut self, class: &'static str, now_ms: u64, repeat_ms: u64) -> bool {
        let due = match self.last {
            Some((c, at)) => c != class || now_ms.saturating_sub(at) >= repeat_ms,
            None => true,
        };
        if due {
            self.last = Some((class, now_ms));
        }
        due
    }

    /// The gateway answered: the next failure is a first one again.
    pub fn ok(&mut self) {
        self.last = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_details_map_to_what_to_do() {
        let n = |s: &str| advise(&SyncError::Network(s.into())).class;
        assert_eq!(n("error sending request: client error (Connect): tcp connect error: Connection refused (os error 111)"), "refused");
        assert_eq!(n("error sending request: dns error: failed to lookup address information: Name or service not known"), "dns");
        assert_eq!(
            n("error sending request: received corrupt message of type InvalidContentType"),
            "tls_plain"
        );
        assert_eq!(
            n("invalid peer certificate: UnknownIssuer"),
            "tls_untrusted"
        );
        assert_eq!(n("operation timed out"), "timeout");
        assert_eq!(n("something else"), "network");
        let s = |status: u16| {
            advise(&SyncError::Status {
                status,
                code: "x".into(),
                message: String::new(),
            })
            .class
        };
        assert_eq!(
            (s(401), s(404), s(503)),
            ("unauthorized", "not_found", "gateway_error")
        );
        assert!(advise(&SyncError::Status {
            status: 401,
            code: "unauthorized".into(),
            message: String::new(),
        })
        .hint
        .contains("--send"));
        let retired = advise(&SyncError::Status {
            status: 401,
            code: "node_revoked".into(),
            message: String::new(),
        });
        assert_eq!(retired.class, "retired");
        assert!(
            !retired.hint.contains("trust add") && retired.hint.contains("enrollment token"),
            "{}",
            retired.hint
        );
    }

    #[test]
    fn the_first_failure_and_each_change_are_said_once_then_reminded() {
        let mut r = Reporter::default();
        assert!(r.failed("refused", 0, 600_000));
        assert!(!r.failed("refused", 5_000, 600_000));
        assert!(r.failed("tls_untrusted", 10_000, 600_000));
        assert!(!r.failed("tls_untrusted", 20_000, 600_000));
        assert!(r.failed("tls_untrusted", 610_000, 600_000));
        r.ok();
        assert!(r.failed("tls_untrusted", 611_000, 600_000));
    }
}
