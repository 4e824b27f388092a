//! The node's enrollment client: final codes, and an older gateway's refusal.

use super::answer::retry_wait;
use super::*;

/// An older gateway reads the request with `Sealed` as it was (only `token`, unknown
/// members refused): the failure its 400 makes is recognised as that, and only that.
#[test]
fn an_older_gateways_refusal_of_the_device_member_is_recognised() {
    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct OldSealed {
        token: String,
    }
    let new = serde_json::to_vec(&Sealed {
        token: "t".into(),
        device: Some(crate::fleet::Inventory::default()),
    })
    .unwrap();
    let e = serde_json::from_slice::<OldSealed>(&new).unwrap_err();
    // As the gateway's edge words it (GatewayError::BadRequest) and answer_json
    // turns it into a failure.
    let failure = format!("400 bad_request: enrollment request: {e}");
    assert!(refused_device_member(&failure), "{failure}");
    assert!(!refused_device_member(
        "400 bad_request: envelope: expired (expired)"
    ));
    assert!(!refused_device_member("503 busy: `device` busy"));
}

#[test]
fn final_codes_are_refusals_and_the_rest_retry() {
    for c in [
        codes::TOKEN_EXPIRED,
        codes::TOKEN_EXHAUSTED,
        codes::TOKEN_REVOKED,
        codes::WRONG_GATEWAY,
        codes::REJECTED,
        codes::DUPLICATE_NODE_ID,
        codes::NODE_REVOKED,
    ] {
        assert!(codes::is_final(c), "{c}");
    }
    for c in [
        "rate_limited",
        "storage_unavailable",
        "bad_request",
        crate::enroll::PENDING_APPROVAL,
    ] {
        assert!(!codes::is_final(c), "{c}");
    }
}

#[test]
fn retries_spread_over_the_backoff_and_never_come_before_retry_after() {
    use std::time::Duration;
    let cap = Duration::from_secs(60);
    // Spread over the whole interval, not bunched at its end (the old wait was the
    // backoff plus under a second: 10,000 devices refused together came back together).
    assert_eq!(retry_wait(cap, None, 0.0), Duration::from_millis(100));
    assert_eq!(retry_wait(cap, None, 0.5), Duration::from_secs(30));
    assert!(retry_wait(cap, None, 0.999_999) <= cap);
    // The gateway's Retry-After is a floor.
    assert_eq!(
        retry_wait(cap, Some(Duration::from_secs(2)), 0.0),
        Duration::from_secs(2)
    );
    assert_eq!(
        retry_wait(Duration::from_secs(1), Some(Duration::from_secs(5)), 0.9),
        Duration::from_secs(5)
    );
    // A thousand devices at the cap land in every tenth of the interval.
    let mut tenths = [0u32; 10];
    for i in 0..1000 {
        let w = retry_wait(cap, None, f64::from(i) / 1000.0);
        tenths[(w.as_secs_f64() / 6.0).min(9.0) as usize] += 1;
    }
    assert!(tenths.iter().all(|&n| n >= 90), "{tenths:?}");
}
