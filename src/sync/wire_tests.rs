//! Each message's JSON text is pinned (it is what old nodes and gateways send and
//! expect), checked against the `json!` it replaces, and round-tripped.

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::json;

use super::*;

/// `v` serialises to exactly `text`, which is also what the old `json!` built
/// (`old`), and `text` parses back to `v`.
fn pin<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(
    v: &T,
    old: Value,
    text: &str,
) {
    let ours = serde_json::to_string(v).unwrap();
    assert_eq!(ours, text);
    assert_eq!(serde_json::to_string(&old).unwrap(), text, "json! differs");
    assert_eq!(&serde_json::from_str::<T>(text).unwrap(), v);
}

#[test]
fn pull_answer() {
    // Each envelope goes out exactly as the gateway stored it (not re-serialised, so
    // its key order is the stored one) and comes back as the same text.
    let v = PullAnswer {
        envelopes: vec![RawValue::from_string(r#"{"v":1,"message_id":"m1"}"#.into()).unwrap()],
        pending_count: 3,
        gateway_rotation: None,
    };
    let text = r#"{"envelopes":[{"v":1,"message_id":"m1"}],"pending_count":3}"#;
    assert_eq!(serde_json::to_string(&v).unwrap(), text);
    let back: PullAnswer = serde_json::from_str(text).unwrap();
    assert_eq!(back.pending_count, 3);
    let got: Vec<&str> = back.envelopes.iter().map(|e| e.get()).collect();
    assert_eq!(got, [r#"{"v":1,"message_id":"m1"}"#]);
    // What an older gateway sent (keys sorted) reads the same way.
    let old = json!({"pending_count": 3, "envelopes": [{"v": 1, "message_id": "m1"}]});
    let back: PullAnswer = serde_json::from_str(&old.to_string()).unwrap();
    let env: Value = serde_json::from_str(back.envelopes[0].get()).unwrap();
    assert_eq!(env, json!({"v": 1, "message_id": "m1"}));
}

#[test]
fn ack_request_and_answer() {
    let v = AckRequest {
        message_ids: vec!["m1".into()],
        rejected: vec![AckRejected {
            code: "expired".into(),
            id: "m2".into(),
        }],
    };
    let old = json!({"message_ids": ["m1"], "rejected": [json!({"id": "m2", "code": "expired"})]});
    pin(
        &v,
        old,
        r#"{"message_ids":["m1"],"rejected":[{"code":"expired","id":"m2"}]}"#,
    );
    // Older nodes send no `rejected`; the gateway refuses fields it does not know.
    let bare: AckRequest = serde_json::from_str(r#"{"message_ids":[]}"#).unwrap();
    assert!(bare.rejected.is_empty());
    assert!(serde_json::from_str::<AckRequest>(r#"{"message_ids":[],"x":1}"#).is_err());

    let a = AckAnswer {
        acked: vec!["m1".into()],
    };
    pin(&a, json!({"acked": ["m1"]}), r#"{"acked":["m1"]}"#);
}

#[test]
fn upload_request_and_answer() {
    // Each envelope goes up exactly as the node stored it and is read back as the
    // same text (the gateway parses it once, into an `Envelope`).
    let v = UploadRequest {
        envelopes: vec![RawValue::from_string(r#"{"v":1,"message_id":"m1"}"#.into()).unwrap()],
    };
    let text = r#"{"envelopes":[{"v":1,"message_id":"m1"}]}"#;
    assert_eq!(serde_json::to_string(&v).unwrap(), text);
    let back: UploadRequest = serde_json::from_str(text).unwrap();
    assert_eq!(back.envelopes[0].get(), r#"{"v":1,"message_id":"m1"}"#);
    assert_eq!(raw_message_id(&back.envelopes[0]).as_deref(), Some("m1"));
    // What an older node sent (keys sorted) reads the same way; unknown members of the
    // request are still refused; an envelope without an id has none.
    let old = json!({"envelopes": [{"message_id": "m1", "v": 1}]}).to_string();
    let back: UploadRequest = serde_json::from_str(&old).unwrap();
    assert_eq!(raw_message_id(&back.envelopes[0]).as_deref(), Some("m1"));
    assert!(serde_json::from_str::<UploadRequest>(r#"{"envelopes":[],"x":1}"#).is_err());
    let odd: UploadRequest = serde_json::from_str(r#"{"envelopes":[7,{"v":1}]}"#).unwrap();
    assert!(odd.envelopes.iter().all(|e| raw_message_id(e).is_none()));
    let a = UploadAnswer {
        accepted: vec!["m1".into()],
        duplicates: vec!["m2".into()],
        rejected: vec![UploadRejected {
            code: "bad_request".into(),
            id: "".into(),
        }],
    };
    let old = json!({"accepted": ["m1"], "duplicates": ["m2"],
                     "rejected": [json!({"id": "", "code": "bad_request"})]});
    pin(
        &a,
        old,
        r#"{"accepted":["m1"],"duplicates":["m2"],"rejected":[{"code":"bad_request","id":""}]}"#,
    );
}

#[test]
fn audit_status_upload_and_answer() {
    let s = AuditStatus {
        root: "AAAA".into(),
        size: 5,
    };
    pin(
        &s,
        json!({"size": 5, "root": "AAAA"}),
        r#"{"root":"AAAA","size":5}"#,
    );
    let u = AuditUpload {
        checkpoint: "note\n".into(),
        entries: vec![AuditEntryText::Text(r#"{"index":0}"#.into())],
    };
    pin(
        &u,
        json!({"entries": [r#"{"index":0}"#], "checkpoint": "note\n"}),
        r#"{"checkpoint":"note\n","entries":["{\"index\":0}"]}"#,
    );
    // An entry may come as the object; either way the hashed bytes are the same.
    let obj: AuditUpload =
        serde_json::from_str(r#"{"checkpoint":"","entries":[{"index":0}]}"#).unwrap();
    assert_eq!(
        obj.entries[0].clone().into_bytes(),
        br#"{"index":0}"#.to_vec()
    );
    let bad = serde_json::from_str::<AuditUpload>(r#"{"checkpoint":"","entries":[1]}"#);
    assert!(bad
        .unwrap_err()
        .to_string()
        .contains("entries must be JSON objects or their text"));
    pin(
        &AuditAnswer { size: 7 },
        json!({"size": 7}),
        r#"{"size":7}"#,
    );
}

#[test]
fn revocations() {
    let v = Revocations {
        revoked: vec!["jti-1".into()],
        version: 4,
    };
    pin(
        &v,
        json!({"version": 4, "revoked": ["jti-1"]}),
        r#"{"revoked":["jti-1"],"version":4}"#,
    );
}

#[test]
fn task_request() {
    let v = TaskRequest {
        job_id: Some("job-7".into()),
        token: Some("v4.public.x".into()),
        tool_args: json!({"i": 7}),
        tool_name: "echo".into(),
    };
    let old = json!({"job_id": "job-7", "tool_name": "echo", "tool_args": {"i": 7},
                     "token": "v4.public.x"});
    pin(
        &v,
        old,
        r#"{"job_id":"job-7","token":"v4.public.x","tool_args":{"i":7},"tool_name":"echo"}"#,
    );
    // Node-to-node requests may leave out all but the tool name.
    let bare: TaskRequest = serde_json::from_str(r#"{"tool_name":"echo"}"#).unwrap();
    assert_eq!((bare.job_id, bare.token), (None, None));
    assert_eq!(bare.tool_args, json!({}));
}

#[test]
fn task_result_ok_and_err() {
    let ok = TaskResult {
        error: None,
        evidence: json!({"audit_index": 3}),
        job_id: "j".into(),
        ok: true,
        request_id: Some("r".into()),
        result: Some(Value::Null),
    };
    let old = json!({"job_id": "j", "request_id": "r", "ok": true, "result": Value::Null,
                     "evidence": {"audit_index": 3}});
    pin(
        &ok,
        old,
        r#"{"evidence":{"audit_index":3},"job_id":"j","ok":true,"request_id":"r","result":null}"#,
    );
    let err = TaskResult {
        error: Some(TaskError {
            code: "forbidden".into(),
            message: "no".into(),
        }),
        evidence: Value::Null,
        job_id: "j".into(),
        ok: false,
        request_id: Some("r".into()),
        result: None,
    };
    let old = json!({"job_id": "j", "request_id": "r", "ok": false,
                     "error": {"code": "forbidden", "message": "no"}, "evidence": Value::Null});
    pin(
        &err,
        old,
        r#"{"error":{"code":"forbidden","message":"no"},"evidence":null,"job_id":"j","ok":false,"request_id":"r"}"#,
    );
    // A result without `ok` or `job_id` is malformed, not "failed".
    assert!(serde_json::from_str::<TaskResult>(r#"{"job_id":"j"}"#).is_err());
    assert!(serde_json::from_str::<TaskResult>(r#"{"ok":true}"#).is_err());
}

#[test]
fn inbox_record_node_and_gateway_shapes() {
    let node = InboxRecord {
        created_at_ms: Some(1),
        expires_at_ms: Some(9),
        from: "node:a".into(),
        message_id: "m1".into(),
        payload: json!({"t": 1}),
        payload_type: "TELEMETRY".into(),
        received_at_ms: 5,
    };
    let old = json!({"message_id": "m1", "from": "node:a", "payload_type": "TELEMETRY",
                     "payload": {"t": 1}, "received_at_ms": 5, "created_at_ms": 1,
                     "expires_at_ms": 9});
    pin(
        &node,
        old,
        r#"{"created_at_ms":1,"expires_at_ms":9,"from":"node:a","message_id":"m1","payload":{"t":1},"payload_type":"TELEMETRY","received_at_ms":5}"#,
    );
    assert_eq!(InboxRecord::from_bytes(&node.to_bytes()).unwrap(), node);
    // The gateway's records never had the envelope times.
    let gw = InboxRecord {
        created_at_ms: None,
        expires_at_ms: None,
        ..node
    };
    let old = json!({"message_id": "m1", "from": "node:a", "payload_type": "TELEMETRY",
                     "payload": {"t": 1}, "received_at_ms": 5});
    pin(
        &gw,
        old,
        r#"{"from":"node:a","message_id":"m1","payload":{"t":1},"payload_type":"TELEMETRY","received_at_ms":5}"#,
    );
}

/// A newer gateway may add fields to its answers; an older node must still read them.
#[test]
fn answers_ignore_fields_a_newer_gateway_adds() {
    let p: PullAnswer =
        serde_json::from_str(r#"{"envelopes":[],"pending_count":0,"next_poll_s":5}"#).unwrap();
    assert_eq!(p.pending_count, 0);
    let u: UploadAnswer = serde_json::from_str(
        r#"{"accepted":[],"duplicates":[],"rejected":[{"code":"x","id":"y","why":"z"}],"n":1}"#,
    )
    .unwrap();
    assert_eq!(u.rejected[0].id, "y");
    let r: Revocations =
        serde_json::from_str(r#"{"revoked":[],"version":2,"expires":[]}"#).unwrap();
    assert_eq!(r.version, 2);
    let t: TaskRequest = serde_json::from_str(r#"{"tool_name":"echo","deadline_ms":1}"#).unwrap();
    assert_eq!(t.tool_name, "echo");
}

/// A malformed answer is an error, never a default.
#[test]
fn malformed_answers_are_errors() {
    for (what, text) in [
        ("pull without pending_count", r#"{"envelopes":[]}"#),
        (
            "pull with a string count",
            r#"{"envelopes":[],"pending_count":"3"}"#,
        ),
    ] {
        assert!(serde_json::from_str::<PullAnswer>(text).is_err(), "{what}");
    }
    assert!(serde_json::from_str::<UploadAnswer>(r#"{"accepted":[]}"#).is_err());
    assert!(serde_json::from_str::<AuditStatus>(r#"{"size":-1,"root":""}"#).is_err());
    assert!(serde_json::from_str::<AuditAnswer>(r#"{}"#).is_err());
    assert!(serde_json::from_str::<Revocations>(r#"{"revoked":[1],"version":1}"#).is_err());
    assert!(serde_json::from_str::<AckAnswer>(r#"{"acked":null}"#).is_err());
}
