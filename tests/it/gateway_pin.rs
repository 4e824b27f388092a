//! A gateway from `outpost init --role gateway --listen <beyond loopback>` serves HTTPS
//! with a certificate init made; its identity document pins that certificate's key
//! (`tls_spki_sha256`), and a node that trusts the document verifies the gateway by it
//! with no `ca_file` (issue 29). `config check` refuses an `https://` upstream with
//! nothing to verify it against; `status` and `wait-ready` speak TLS to the gateway.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::{outpost, text, wait_for, Home};

/// `outpost init ARGS` into a fresh home (its own data dir and config).
fn init(role: &str, node_id: &str, extra: &[&str]) -> Home {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let cfg = dir.path().join("outpost.toml");
    let mut args = vec![
        "init",
        "--role",
        role,
        "--node-id",
        node_id,
        "--data-dir",
        data.to_str().unwrap(),
        "--config",
        cfg.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let o = outpost(&args);
    assert!(o.status.success(), "init failed: {}", text(&o));
    Home {
        dir,
        node_id: node_id.into(),
        db: None,
    }
}

/// SHA-256 of the certificate's SubjectPublicKeyInfo as openssl computes it, base64url.
fn openssl_pin(cert: &Path) -> Option<String> {
    let o = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "openssl x509 -in {} -pubkey -noout | openssl pkey -pubin -outform der | openssl dgst -sha256 -binary | base64 -w0 | tr '+/' '-_' | tr -d '='",
            cert.display()
        ))
        .output()
        .ok()?;
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

fn doc_pin(json: &str) -> Option<String> {
    let v: Value = serde_json::from_str(json).unwrap();
    v["tls_spki_sha256"].as_str().map(str::to_string)
}

/// A client that trusts the gateway's own certificate (as `curl --cacert` would).
fn trusting(cert: &Path) -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .tls_built_in_root_certs(false)
        .add_root_certificate(
            reqwest::Certificate::from_pem(&std::fs::read(cert).unwrap()).unwrap(),
        )
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_pins_its_gateways_tls_through_the_identity_document() {
    // Beyond loopback (0.0.0.0, port 0): init makes tls.crt and tls.key (0600).
    let gw = init("gateway", "gateway:main", &["--listen", "0.0.0.0:0"]);
    let (cert, key) = (gw.data().join("tls.crt"), gw.data().join("tls.key"));
    let mode = std::fs::metadata(&key).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "tls.key mode {mode:o}");
    let cfg_text = std::fs::read_to_string(gw.config()).unwrap();
    assert!(cfg_text.contains("tls_cert_file"), "{cfg_text}");
    let gw_json = gw.identity_json();
    let pin = doc_pin(&gw_json).expect("the gateway's document carries tls_spki_sha256");
    if let Some(want) = openssl_pin(&cert) {
        assert_eq!(
            pin, want,
            "the pin is SHA-256 of the DER SubjectPublicKeyInfo"
        );
    }
    let check = gw.cli(&["config", "check"]);
    assert!(check.status.success(), "{}", text(&check));

    let g = gw.start();
    let port = g.addr.port();
    // status and wait-ready reach the HTTPS gateway (they spoke plain HTTP before).
    let o = gw.cli(&["wait-ready", "--timeout", "10s"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        format!("https://127.0.0.1:{port}")
    );
    let o = gw.cli(&["status"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("gateway:main (gateway)"), "{}", text(&o));

    let node = init(
        "node",
        "node:pump-17",
        &[
            "--listen",
            "127.0.0.1:0",
            "--upstream-url",
            &format!("https://127.0.0.1:{port}"),
            "--gateway-id",
            "gateway:main",
        ],
    );
    // Nothing to verify the gateway against yet: config check says what to do.
    let o = node.cli(&["config", "check"]);
    assert_eq!(o.status.code(), Some(64), "{}", text(&o));
    assert!(text(&o).contains("outpost trust add"), "{}", text(&o));
    let o = node.cli_stdin(
        &["trust", "add", "-", "--send", "--issue"],
        gw_json.as_bytes(),
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("tls pinned"), "{}", text(&o));
    let o = node.cli(&["config", "check"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = gw.cli_stdin(
        &["trust", "add", "-", "--send"],
        node.identity_json().as_bytes(),
    );
    assert!(o.status.success(), "{}", text(&o));
    let n = node.start();

    let client = trusting(&cert);
    let token = gw.token("gateway:main", &["tool:echo", "read"], "1h");
    let base = format!("https://127.0.0.1:{port}");
    wait_for_polling(&client, &base, &token, &n).await;
    let v: Value = client
        .post(format!("{base}/v1/tool_call"))
        .bearer_auth(&token)
        .json(
            &json!({"target": {"node_id": "node:pump-17"}, "tool_name": "echo",
                      "tool_args": {"hi": 1}, "wait_s": 20}),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["result"], json!({"hi": 1}), "{v}");
}

async fn wait_for_polling(
    client: &reqwest::Client,
    base: &str,
    token: &str,
    n: &crate::harness::Daemon,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let v: Value = client
            .get(format!("{base}/v1/nodes"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if v["nodes"][0]["polling"] == true {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the node never connected over TLS: {v}\n{}",
            n.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A node pinning another key than the one the gateway serves refuses the handshake,
/// and says why in its log and its status (before, a node with no anchor logged
/// nothing).
#[test]
fn a_node_refuses_a_gateway_whose_key_is_not_the_pinned_one() {
    let gw = init("gateway", "gateway:main", &["--listen", "0.0.0.0:0"]);
    let other = init("gateway", "gateway:main", &["--listen", "0.0.0.0:0"]);
    let g = gw.start();
    let node = init(
        "node",
        "node:a",
        &[
            "--listen",
            "127.0.0.1:0",
            "--upstream-url",
            &format!("https://127.0.0.1:{}", g.addr.port()),
        ],
    );
    let o = node.cli_stdin(
        &["trust", "add", "-", "--send", "--issue"],
        other.identity_json().as_bytes(),
    );
    assert!(o.status.success(), "{}", text(&o));
    let n = node.start();
    let log = wait_for(
        "the node to log the refused key",
        Duration::from_secs(20),
        || {
            let l = n.log_text();
            l.contains("upstream_unreachable").then_some(l)
        },
    );
    assert!(log.contains("tls_spki_sha256"), "{log}");
    let o = node.cli(&["status", "--json"]);
    let v: Value = serde_json::from_str(&String::from_utf8_lossy(&o.stdout)).unwrap();
    assert!(
        v["upstream"]["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("pins")),
        "{v}"
    );
    // One encoding, plain words: the pin as the identity document writes it
    // (base64url), not hex inside rustls' debug text.
    let doc: Value = serde_json::from_str(&other.identity_json()).unwrap();
    let pinned = doc["tls_spki_sha256"].as_str().unwrap();
    let e = v["upstream"]["last_error"].as_str().unwrap();
    assert!(e.contains(&format!("pins tls_spki_sha256 {pinned}")), "{e}");
    assert!(!e.contains("OtherError") && !e.contains("Refused("), "{e}");
    assert!(!log.contains("OtherError"), "{log}");
}

/// A node with an `https://` upstream and no anchor at all says so when it starts.
#[test]
fn a_node_with_nothing_to_verify_its_gateway_says_so() {
    let node = init(
        "node",
        "node:a",
        &[
            "--listen",
            "127.0.0.1:0",
            "--upstream-url",
            "https://127.0.0.1:9",
        ],
    );
    let n = node.start();
    let log = wait_for("the warning", Duration::from_secs(20), || {
        let l = n.log_text();
        l.contains("upstream_tls_unverifiable").then_some(l)
    });
    assert!(log.contains("outpost trust add"), "{log}");
}

/// `--allow-plaintext`: no certificate; `--tls-cert/--tls-key`: the operator's,
/// pinned in the document. A node's init takes neither.
#[test]
fn init_takes_an_operators_certificate_or_plain_http_on_purpose() {
    let plain = init(
        "gateway",
        "gateway:main",
        &["--listen", "0.0.0.0:0", "--allow-plaintext"],
    );
    assert!(!plain.data().join("tls.crt").exists());
    assert!(doc_pin(&plain.identity_json()).is_none());
    let o = plain.cli(&["config", "check"]);
    assert!(o.status.success(), "{}", text(&o));

    let made = init("gateway", "gateway:main", &["--listen", "0.0.0.0:0"]);
    let (c, k) = (made.data().join("tls.crt"), made.data().join("tls.key"));
    let own = init(
        "gateway",
        "gateway:main",
        &[
            "--listen",
            "0.0.0.0:0",
            "--tls-cert",
            c.to_str().unwrap(),
            "--tls-key",
            k.to_str().unwrap(),
        ],
    );
    assert!(!own.data().join("tls.crt").exists());
    assert_eq!(
        doc_pin(&own.identity_json()),
        doc_pin(&made.identity_json()),
        "the same key, the same pin"
    );

    let dir = tempfile::tempdir().unwrap();
    let o = outpost(&[
        "init",
        "--node-id",
        "node:a",
        "--data-dir",
        dir.path().join("d").to_str().unwrap(),
        "--config",
        dir.path().join("c.toml").to_str().unwrap(),
        "--allow-plaintext",
    ]);
    assert_eq!(o.status.code(), Some(64), "{}", text(&o));
}

/// This host's address on its default route (no packet is sent), if it has one beyond
/// loopback.
fn non_loopback_ip() -> Option<std::net::IpAddr> {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    s.connect("192.0.2.1:9").ok()?;
    let ip = s.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

/// A gateway bound to one address beyond loopback is reached from that address, where
/// its status needs a `read` token: `outpost status` and `wait-ready` sign one with the
/// gateway's key (they answered 401 without a way to pass one).
#[test]
fn status_works_on_a_gateway_bound_to_one_address() {
    let Some(ip) = non_loopback_ip() else {
        crate::harness::skipped(
            "gateway_pin::status_works_on_a_gateway_bound_to_one_address",
            "this host has no address beyond loopback",
        );
        return;
    };
    let gw = init("gateway", "gateway:main", &["--listen", &format!("{ip}:0")]);
    let _g = gw.start();
    let o = gw.cli(&["wait-ready", "--timeout", "20s"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = gw.cli(&["status", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["role"], "gateway", "{v}");
    let o = gw.cli(&["status"]);
    assert!(o.status.success(), "{}", text(&o));
}
