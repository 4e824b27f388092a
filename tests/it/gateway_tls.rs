//! The gateway over HTTPS: `[api] tls_cert_file/tls_key_file` on the gateway, a node
//! that pins the CA with `upstream.ca_file`, and clients that do not trust it refused.

use serde_json::Value;

use crate::harness::{http, pair, Home};

/// A throwaway CA and a gateway certificate for 127.0.0.1, made with the openssl CLI.
fn make_pki(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let run = |args: &[&str]| {
        let o = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("the openssl CLI is needed for the TLS test");
        assert!(
            o.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    let mut a = vec!["req", "-x509"];
    a.extend(ec);
    a.extend([
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=outpost test CA",
    ]);
    run(&a);
    let mut b = vec!["req"];
    b.extend(ec);
    b.extend([
        "-keyout",
        "gw.key",
        "-out",
        "gw.csr",
        "-subj",
        "/CN=gateway",
    ]);
    run(&b);
    run(&[
        "x509",
        "-req",
        "-in",
        "gw.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "gw.pem",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
    ]);
    (dir.join("ca.pem"), dir.join("gw.pem"), dir.join("gw.key"))
}

#[tokio::test(flavor = "multi_thread")]
async fn tls_gateway_and_node_pinning_its_ca() {
    // The CA is made with the openssl CLI: without it the test says so and does not run
    // (CI installs it: scripts/setup-ci.sh).
    if std::process::Command::new("openssl")
        .arg("version")
        .output()
        .is_err()
    {
        crate::harness::skipped(
            "TLS with an operator's CA",
            "the openssl CLI is missing (apt-get install openssl)",
        );
        return;
    }
    let gw = Home::init("gateway", "gateway:main", "");
    let node = Home::init("node", "node:tls", "");
    let (ca, cert, key) = make_pki(gw.dir.path());
    let dropin = |h: &Home, text: String| {
        let d = h.dir.path().join("outpost.d");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("50-test.toml"), text).unwrap();
    };
    dropin(
        &gw,
        format!(
            "[api]\ntls_cert_file = {:?}\ntls_key_file = {:?}\n",
            cert, key
        ),
    );
    pair(&gw, &node);
    let admin = gw.token("gateway:main", &["admin"], "1h");
    let g = gw.start();
    dropin(
        &node,
        format!(
            "[upstream]\nurl = \"https://{}\"\ngateway_id = \"gateway:main\"\nca_file = {:?}\npoll_wait_s = 5\n",
            g.addr, ca
        ),
    );
    let _n = node.start();
    let pinned = reqwest::Client::builder()
        .no_proxy()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(&std::fs::read(&ca).unwrap()).unwrap())
        .build()
        .unwrap();
    let url = format!("https://{}/v1/nodes", g.addr);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let v: Value = pinned
            .get(&url)
            .bearer_auth(&admin)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if v["nodes"][0]["polling"] == true {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "node never connected over TLS: {v}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // Plain HTTP to the TLS port and a client that does not trust the CA both fail.
    assert!(
        http()
            .get(format!("http://{}/healthz", g.addr))
            .send()
            .await
            .is_err()
            || !http()
                .get(format!("http://{}/healthz", g.addr))
                .send()
                .await
                .unwrap()
                .status()
                .is_success()
    );
    let untrusting = reqwest::Client::builder()
        .no_proxy()
        .tls_built_in_root_certs(false)
        .build()
        .unwrap();
    assert!(untrusting
        .get(format!("https://{}/healthz", g.addr))
        .send()
        .await
        .is_err());
}
