//! Known-answer vector for outpost capability tokens (`tests/vectors/outpost/token_v4.json`).

use serde_json::json;

use crate::envelope::tests::kat::GATEWAY;
use crate::envelope::tests::{check_or_regen, hex, read_json, to_hex};
use crate::envelope::{pae, IdentityDocument, Keys, Rights, TrustStore};
use crate::token::{check, issue, Claims, Decision, Request};

fn vectors() -> serde_json::Value {
    let keys = GATEWAY.keys();
    let claims = Claims {
        iss: "gateway:main".into(),
        sub: "operator:alice".into(),
        aud: "node:pump-17".into(),
        iat: "2025-11-22T08:00:00Z".into(),
        nbf: "2025-11-22T08:00:00Z".into(),
        exp: "2025-11-22T09:00:00Z".into(),
        jti: "0193f6a2-7c4d-7e5f-8a9b-0c1d2e3f4a5c".into(),
        scopes: vec!["tool:pii_redact".into(), "tool:echo".into()],
        tenant: None,
    };
    let payload = serde_json::to_string(&claims).unwrap();
    let footer = r#"{"kid":"gateway:main"}"#;
    let token = issue(&keys, &claims).unwrap();
    let m2 = pae(&[b"v4.public.", payload.as_bytes(), footer.as_bytes(), b""]);
    json!({
        "description": "outpost capability token: PASETO v4.public signed by the issuer's Ed25519 key (issuer inputs as in identity_v1.json); payload = claims JSON exactly as below; footer = {\"kid\":iss}; implicit assertion empty. Ed25519 signs PAE(\"v4.public.\", payload, footer, \"\").",
        "issuer": GATEWAY.input_json(),
        "cases": [{
            "input": { "claims": claims, "payload": payload, "footer": footer },
            "expected": { "signed_bytes_hex": to_hex(&m2), "token": token }
        }]
    })
}

#[test]
fn generated_token_vectors_match_file() {
    check_or_regen("outpost/token_v4.json", &vectors());
}

#[test]
fn file_token_checks_with_file_key() {
    let v = read_json("outpost/token_v4.json");
    let i = &v["issuer"];
    let seed: [u8; 32] = hex(i["sign_seed_hex"].as_str().unwrap())
        .try_into()
        .unwrap();
    let kex: [u8; 32] = hex(i["kex_sk_hex"].as_str().unwrap()).try_into().unwrap();
    let keys = Keys::from_secret_bytes(&seed, &kex);
    let doc = IdentityDocument::new(
        i["node_id"].as_str().unwrap(),
        i["role"].as_str().unwrap(),
        &keys,
        i["created_at"].as_str().unwrap(),
    );
    let mut trust = TrustStore::new();
    trust
        .add(
            doc,
            Rights {
                send: false,
                issue: true,
            },
        )
        .unwrap();
    let case = &v["cases"][0];
    let token = case["expected"]["token"].as_str().unwrap();
    let now = 1_763_798_400_000 + 60_000;
    let d = check(
        token,
        &Request::tool("node:pump-17", "pii_redact"),
        now,
        0,
        &trust,
        &|_| false,
    );
    match d {
        Decision::Allow { claims } => assert_eq!(
            serde_json::to_value(claims).unwrap(),
            case["input"]["claims"]
        ),
        other => panic!("{other:?}"),
    }
}
