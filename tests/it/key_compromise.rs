//! A stolen node key (PROTOCOL §15.7): after `identity rotate --compromised`, and after
//! `outpost nodes end-grace` following an ordinary rotation, a request signed by the
//! retired key is refused at once (pull, ack, upload) while the new key works; an
//! ordinary rotation keeps accepting the retired key for its grace.

use outpost::clock::{Clock, SystemClock};
use outpost::envelope::{sign_request, Keys};
use serde_json::{json, Value};

use crate::harness::{gateway_and_node, http, pair, text, Daemon, Home};

const NODE: &str = "node:stolen";

fn keys(node: &Home) -> Keys {
    Keys::load(&node.data().join("keys.json")).unwrap()
}

/// `method pq` with `body`, signed by `keys` as the node: the status.
async fn signed(g: &Daemon, keys: &Keys, method: &str, pq: &str, body: Option<Value>) -> u16 {
    let bytes = body
        .map(|b| serde_json::to_vec(&b).unwrap())
        .unwrap_or_default();
    let ts = SystemClock.now_ms();
    let sig = sign_request(keys, NODE, method, pq, ts, &bytes);
    let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut r = http()
        .request(m, g.url(pq))
        .header("Outpost-Node", NODE)
        .header("Outpost-Timestamp", ts.to_string())
        .header("Outpost-Signature", sig);
    if !bytes.is_empty() {
        r = r.header("content-type", "application/json").body(bytes);
    }
    r.send().await.unwrap().status().as_u16()
}

/// Pull, ack and upload signed by `keys`: their statuses.
async fn pull_ack_upload(g: &Daemon, keys: &Keys) -> [u16; 3] {
    let p = |w: &str| format!("/v1/nodes/{NODE}/{w}");
    [
        signed(g, keys, "GET", &p("pull?wait_s=0"), None).await,
        signed(g, keys, "POST", &p("ack"), Some(json!({"message_ids": []}))).await,
        signed(
            g,
            keys,
            "POST",
            &p("upload"),
            Some(json!({"envelopes": []})),
        )
        .await,
    ]
}

fn rotate(node: &Home, extra: &[&str]) {
    let mut args = vec!["identity", "rotate", "--wait", "30"];
    args.extend_from_slice(extra);
    let o = node.cli(&args);
    assert!(o.status.success(), "{}", text(&o));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_compromised_key_is_refused_at_once_after_rotate_or_end_grace() {
    let (gw, node) = gateway_and_node(NODE, 1);
    pair(&gw, &node);
    let g = gw.start();
    let stolen = keys(&node);
    assert_eq!(pull_ack_upload(&g, &stolen).await, [200; 3]);

    // An ordinary rotation: the retired key keeps working for the grace...
    let n = node.start();
    rotate(&node, &[]);
    n.stop();
    let (retired, current) = (stolen, keys(&node));
    assert_eq!(
        pull_ack_upload(&g, &retired).await,
        [200; 3],
        "in the grace"
    );
    // ...until the operator ends it at the gateway.
    let o = gw.cli(&["nodes", "end-grace", NODE]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("refused from now on"), "{}", text(&o));
    assert_eq!(pull_ack_upload(&g, &retired).await, [401; 3]);
    assert_eq!(pull_ack_upload(&g, &current).await, [200; 3]);
    let o = gw.cli(&["nodes", "end-grace", NODE]);
    assert!(text(&o).contains("nothing to end"), "{}", text(&o));

    // The node rotates again, saying its key is compromised: no grace at all.
    let stolen = current;
    let n = node.start();
    rotate(&node, &["--compromised"]);
    n.stop();
    assert_eq!(pull_ack_upload(&g, &stolen).await, [401; 3]);
    assert_eq!(pull_ack_upload(&g, &keys(&node)).await, [200; 3]);

    // The fleet history has each: two rotations, the grace the operator ended (once:
    // the second end-grace ended nothing), and `audit verify` passes.
    let events = crate::fleet_history::audit_events(&gw);
    let rotations: Vec<&String> = events
        .iter()
        .filter(|e| e.starts_with("rotate ") && e.contains(NODE))
        .collect();
    assert_eq!(
        rotations
            .iter()
            .filter(|e| e.ends_with("retired key grace ended"))
            .count(),
        1,
        "{events:?}"
    );
    assert_eq!(rotations.len(), 3, "{events:?}");

    // A backup of the node holds what its rotations left: the retired signing keys
    // (`audit verify` of older checkpoints needs them) and, in its grace, the retired
    // pair, private keys 0600.
    let b = node.dir.path().join("backup");
    let o = node.cli(&["backup", b.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    for f in ["keys.json", "identity.json", "key-history.json"] {
        assert!(b.join(f).exists(), "{f} not in the backup: {}", text(&o));
    }
    use std::os::unix::fs::PermissionsExt;
    for f in ["keys.json", "keys.previous.json"] {
        let p = b.join(f);
        if node.data().join(f).exists() {
            let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{f}");
        }
    }
}
