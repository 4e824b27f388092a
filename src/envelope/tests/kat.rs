//! outpost's own known-answer vectors (`tests/vectors/outpost/*.json`): fixed keys and
//! fixed randomness in, exact bytes out, so another implementation can check itself.
//!
//! `generated_*` rebuild each file from the inputs below and compare; `file_*` read the
//! inputs *from the file* and check the file's outputs verify/open with them, so the files
//! stay self-consistent for outside readers.

use serde_json::{json, Value};

use super::{check_or_regen, hex, read_json, to_hex};
use crate::envelope::{
    open, request_signed_bytes, seal, sign_request, verify_request, Envelope, FixedRng,
    IdentityDocument, Keys, OpenContext, Rights, SealParams, TrustStore, ENVELOPE_DOMAIN,
};

pub(crate) struct Ident {
    pub node_id: &'static str,
    pub role: &'static str,
    pub sign_seed: [u8; 32],
    pub kex_sk: [u8; 32],
    pub created_at: &'static str,
}

pub(crate) const GATEWAY: Ident = Ident {
    node_id: "gateway:main",
    role: "gateway",
    sign_seed: [0x11; 32],
    kex_sk: [0x12; 32],
    created_at: "2025-11-22T08:00:00Z",
};

pub(crate) const NODE: Ident = Ident {
    node_id: "node:pump-17",
    role: "node",
    sign_seed: [0x41; 32],
    kex_sk: [0x42; 32],
    created_at: "2025-11-22T08:00:00Z",
};

impl Ident {
    pub fn keys(&self) -> Keys {
        Keys::from_secret_bytes(&self.sign_seed, &self.kex_sk)
    }
    pub fn doc(&self) -> IdentityDocument {
        IdentityDocument::new(self.node_id, self.role, &self.keys(), self.created_at)
    }
    pub fn input_json(&self) -> Value {
        json!({
            "node_id": self.node_id,
            "role": self.role,
            "sign_seed_hex": to_hex(&self.sign_seed),
            "kex_sk_hex": to_hex(&self.kex_sk),
            "created_at": self.created_at,
        })
    }
}

fn keys_from_input(v: &Value) -> Keys {
    let seed: [u8; 32] = hex(v["sign_seed_hex"].as_str().unwrap())
        .try_into()
        .unwrap();
    let kex: [u8; 32] = hex(v["kex_sk_hex"].as_str().unwrap()).try_into().unwrap();
    Keys::from_secret_bytes(&seed, &kex)
}

fn identity_vectors() -> Value {
    let cases: Vec<Value> = [GATEWAY, NODE]
        .iter()
        .map(|id| {
            let doc = id.doc();
            let signed = crate::envelope::pae(&[
                crate::envelope::IDENTITY_DOMAIN.as_bytes(),
                id.node_id.as_bytes(),
                id.role.as_bytes(),
                &doc.sign_pk,
                &doc.kex_pk,
                id.created_at.as_bytes(),
            ]);
            json!({
                "input": id.input_json(),
                "expected": {
                    "sign_pk_hex": to_hex(&doc.sign_pk),
                    "kex_pk_hex": to_hex(&doc.kex_pk),
                    "signed_bytes_hex": to_hex(&signed),
                    "document": serde_json::to_value(&doc).unwrap(),
                }
            })
        })
        .collect();
    json!({
        "description": "outpost identity document v1: Ed25519 key from sign_seed (RFC 8032), X25519 public key of kex_sk (RFC 7748); self_sig = Ed25519(PAE(\"outpost/identity/v1\", node_id, role, sign_pk, kex_pk, created_at)). Binary document fields are base64url without padding.",
        "cases": cases,
    })
}

struct EnvCase {
    params: SealParams,
    plaintext: &'static str,
    eph_ikm: [u8; 32],
}

fn env_cases() -> Vec<EnvCase> {
    vec![
        EnvCase {
            params: SealParams {
                message_id: "01JDQ4Z5X7S8C1V2B3N4M5K6J7".into(),
                created_at_ms: 1_763_798_400_000,
                expires_at_ms: 1_763_798_460_000,
                payload_type: "COMMAND".into(),
                priority: 5,
            },
            plaintext: r#"{"command_type":"setpoint","value":21.5}"#,
            eph_ikm: [0xe1; 32],
        },
        EnvCase {
            params: SealParams {
                message_id: "0193f6a2-7c4d-7e5f-8a9b-0c1d2e3f4a5b".into(),
                created_at_ms: 1_763_798_400_000,
                expires_at_ms: 1_763_884_800_000,
                payload_type: "TASK_REQUEST".into(),
                priority: 0,
            },
            plaintext: r#"{"job_id":"job-1","tool_name":"echo","tool_args":{"hello":"wörld"},"token":""}"#,
            eph_ikm: [0xe2; 32],
        },
    ]
}

fn envelope_vectors() -> Value {
    let (sender, recipient) = (GATEWAY.keys(), NODE.doc());
    let cases: Vec<Value> = env_cases()
        .into_iter()
        .map(|c| {
            let env = seal(
                &sender,
                GATEWAY.node_id,
                &recipient,
                &c.params,
                c.plaintext.as_bytes(),
                &mut FixedRng::new(&c.eph_ikm),
            )
            .unwrap();
            let mut info = ENVELOPE_DOMAIN.as_bytes().to_vec();
            info.extend_from_slice(NODE.node_id.as_bytes());
            json!({
                "input": {
                    "message_id": c.params.message_id,
                    "created_at_ms": c.params.created_at_ms,
                    "expires_at_ms": c.params.expires_at_ms,
                    "payload_type": c.params.payload_type,
                    "priority": c.params.priority,
                    "plaintext": c.plaintext,
                    "hpke_ephemeral_ikm_hex": to_hex(&c.eph_ikm),
                },
                "expected": {
                    "header_pae_hex": to_hex(&env.header_bytes()),
                    "hpke_info_hex": to_hex(&info),
                    "enc_hex": to_hex(&env.enc),
                    "ciphertext_hex": to_hex(&env.ciphertext),
                    "signed_bytes_hex": to_hex(&env.signed_bytes()),
                    "signature_hex": to_hex(&env.signature),
                    "envelope": serde_json::to_value(&env).unwrap(),
                }
            })
        })
        .collect();
    json!({
        "description": "outpost envelope v1 from sender to recipient. HPKE base mode (RFC 9180) DHKEM(X25519,HKDF-SHA256)/HKDF-SHA256/ChaCha20Poly1305 to the recipient's kex_pk; the ephemeral key pair is DeriveKeyPair(hpke_ephemeral_ikm). info = \"outpost/envelope/v1\" || recipient_node_id; aad = header PAE; signature = Ed25519(sender, PAE(\"outpost/envelope/v1/sig\", header PAE, enc, ciphertext)). Identity inputs as in identity_v1.json.",
        "sender": GATEWAY.input_json(),
        "recipient": NODE.input_json(),
        "cases": cases,
    })
}

struct ReqCase {
    method: &'static str,
    path_and_query: &'static str,
    timestamp_ms: u64,
    body: &'static str,
}

const REQ_CASES: [ReqCase; 2] = [
    ReqCase {
        method: "GET",
        path_and_query: "/v1/nodes/node:pump-17/pull?wait_s=25&max=50",
        timestamp_ms: 1_763_798_400_000,
        body: "",
    },
    ReqCase {
        method: "POST",
        path_and_query: "/v1/nodes/node:pump-17/ack",
        timestamp_ms: 1_763_798_401_234,
        body: r#"{"message_ids":["01JDQ4Z5X7S8C1V2B3N4M5K6J7"]}"#,
    },
];

fn request_vectors() -> Value {
    let keys = NODE.keys();
    let cases: Vec<Value> = REQ_CASES
        .iter()
        .map(|c| {
            let ts = c.timestamp_ms.to_string();
            use sha2::Digest as _;
            json!({
                "input": {
                    "method": c.method,
                    "path_and_query": c.path_and_query,
                    "timestamp": ts,
                    "body": c.body,
                },
                "expected": {
                    "body_sha256_hex": to_hex(&sha2::Sha256::digest(c.body.as_bytes())),
                    "signed_bytes_hex": to_hex(&request_signed_bytes(NODE.node_id, c.method, c.path_and_query, &ts, c.body.as_bytes())),
                    "headers": {
                        "Outpost-Node": NODE.node_id,
                        "Outpost-Timestamp": ts,
                        "Outpost-Signature": sign_request(&keys, NODE.node_id, c.method, c.path_and_query, c.timestamp_ms, c.body.as_bytes()),
                    }
                }
            })
        })
        .collect();
    json!({
        "description": "outpost node-side HTTP request signature v1: Outpost-Signature = base64url(Ed25519(PAE(\"outpost/http/v1\", node_id, method, path_and_query, timestamp text, SHA-256(body))))",
        "signer": NODE.input_json(),
        "cases": cases,
    })
}

#[test]
fn generated_identity_vectors_match_file() {
    check_or_regen("outpost/identity_v1.json", &identity_vectors());
}

#[test]
fn generated_envelope_vectors_match_file() {
    check_or_regen("outpost/envelope_v1.json", &envelope_vectors());
}

#[test]
fn generated_request_vectors_match_file() {
    check_or_regen("outpost/http_request_v1.json", &request_vectors());
}

#[test]
fn file_identity_documents_verify() {
    let v = read_json("outpost/identity_v1.json");
    for case in v["cases"].as_array().unwrap() {
        let doc: IdentityDocument =
            serde_json::from_value(case["expected"]["document"].clone()).unwrap();
        let keys = doc.verify().unwrap();
        let input_keys = keys_from_input(&case["input"]);
        assert_eq!(keys.sign, input_keys.sign_pk());
        assert_eq!(&keys.kex, input_keys.kex_pk().as_bytes());
    }
}

#[test]
fn file_envelopes_open_with_file_keys() {
    let v = read_json("outpost/envelope_v1.json");
    let sender = keys_from_input(&v["sender"]);
    let recipient = keys_from_input(&v["recipient"]);
    let s = &v["sender"];
    let sender_doc = IdentityDocument::new(
        s["node_id"].as_str().unwrap(),
        s["role"].as_str().unwrap(),
        &sender,
        s["created_at"].as_str().unwrap(),
    );
    let mut trust = TrustStore::new();
    trust
        .add(
            sender_doc,
            Rights {
                send: true,
                issue: false,
            },
        )
        .unwrap();
    for case in v["cases"].as_array().unwrap() {
        let env: Envelope = serde_json::from_value(case["expected"]["envelope"].clone()).unwrap();
        let bytes = serde_json::to_vec(&case["expected"]["envelope"]).unwrap();
        let ctx = OpenContext {
            me: v["recipient"]["node_id"].as_str().unwrap(),
            keys: &recipient,
            previous_keys: None,
            trust: &trust,
            now_ms: env.created_at_ms,
            skew_ms: 0,
            max_bytes: 1 << 20,
            max_ttl_ms: 7 * 86_400_000,
            pruned_ahead: None,
        };
        let opened = open(&bytes, &ctx, &|_, _| false).unwrap();
        assert_eq!(
            opened.plaintext,
            case["input"]["plaintext"].as_str().unwrap().as_bytes()
        );
        assert_eq!(
            to_hex(&env.header_bytes()),
            case["expected"]["header_pae_hex"].as_str().unwrap()
        );
        assert_eq!(
            to_hex(&env.signed_bytes()),
            case["expected"]["signed_bytes_hex"].as_str().unwrap()
        );
    }
}

#[test]
fn file_request_signatures_verify() {
    let v = read_json("outpost/http_request_v1.json");
    let keys = keys_from_input(&v["signer"]);
    let s = &v["signer"];
    let node_id = s["node_id"].as_str().unwrap();
    let mut trust = TrustStore::new();
    let doc = IdentityDocument::new(
        node_id,
        s["role"].as_str().unwrap(),
        &keys,
        s["created_at"].as_str().unwrap(),
    );
    trust
        .add(
            doc,
            Rights {
                send: true,
                issue: false,
            },
        )
        .unwrap();
    for case in v["cases"].as_array().unwrap() {
        let i = &case["input"];
        let h = &case["expected"]["headers"];
        let ts = h["Outpost-Timestamp"].as_str().unwrap();
        verify_request(
            &trust,
            h["Outpost-Node"].as_str().unwrap(),
            i["method"].as_str().unwrap(),
            i["path_and_query"].as_str().unwrap(),
            ts,
            h["Outpost-Signature"].as_str().unwrap(),
            i["body"].as_str().unwrap().as_bytes(),
            ts.parse().unwrap(),
            0,
        )
        .unwrap();
    }
}
