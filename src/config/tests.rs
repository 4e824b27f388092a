use super::*;

const MINIMAL: &str = r#"
[identity]
node_id = "node:pump-17"
"#;

#[test]
fn minimal_config_gets_documented_defaults() {
    let c = from_str(MINIMAL).unwrap();
    assert_eq!(c.role, Role::Node);
    assert_eq!(c.listen.to_string(), "127.0.0.1:8000");
    assert_eq!(c.queue.max_messages_per_recipient, 10_000);
    assert_eq!(c.queue.ttl_for("setpoint", None), 60);
    assert_eq!(c.queue.ttl_for("DATA", None), 86_400);
    assert_eq!(c.queue.ttl_for("DATA", Some(10 * 86_400)), HARD_MAX_TTL_S);
    assert!(!c.queue.is_queueable("system"));
    assert!(c.upstream.is_none());
}

/// A device build (no `gateway` feature) says why it cannot be a gateway.
#[cfg(not(feature = "gateway"))]
#[test]
fn a_build_without_the_gateway_refuses_the_role() {
    let e = from_str("[identity]\nnode_id = \"gateway:main\"\nrole = \"gateway\"\n").unwrap_err();
    assert!(e.to_string().contains("this build has no gateway"), "{e}");
    assert!("gateway"
        .parse::<Role>()
        .unwrap_err()
        .contains("cargo feature `gateway`"));
}

// The gateway role: not in a build without the `gateway` feature.
#[cfg(feature = "gateway")]
#[test]
fn gateway_listens_on_8787_by_default() {
    let c = from_str("[identity]\nnode_id = \"gateway:main\"\nrole = \"gateway\"\n").unwrap();
    assert_eq!(c.listen.port(), 8787);
    assert!(c.listen.ip().is_loopback());
}

#[test]
fn unknown_keys_are_errors() {
    let e = from_str("[identity]\nnode_id = \"node:a\"\nnodeid = \"x\"\n").unwrap_err();
    assert!(e.to_string().contains("nodeid"), "{e}");
    let e = from_str("[identity]\nnode_id = \"node:a\"\n[queue]\ndefault_ttl = 5\n").unwrap_err();
    assert!(e.to_string().contains("default_ttl"), "{e}");
}

#[test]
fn every_problem_is_reported_at_once() {
    let e = from_str(
        r#"
[identity]
node_id = "Node:x"
role = "hub"
[api]
listen = "localhost"
[queue]
max_ttl_s = 999999999
"#,
    )
    .unwrap_err();
    let ConfigError::Invalid(list) = e else {
        panic!("expected Invalid")
    };
    assert!(list.len() >= 4, "{list:?}");
}

#[test]
fn tools_need_absolute_commands_and_unique_names() {
    let e = from_str(
        r#"
[identity]
node_id = "node:a"
[[tools]]
name = "read_sensor"
command = ["read_sensor"]
[[tools]]
name = "read_sensor"
command = ["/bin/true"]
[[tools]]
name = "echo"
command = ["/bin/true"]
"#,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("absolute path"), "{e}");
    assert!(e.contains("defined twice"), "{e}");
    assert!(e.contains("shadows a built-in"), "{e}");
}

#[test]
fn dropins_merge_in_name_order() {
    let dir = tempfile::tempdir().unwrap();
    let main = dir.path().join("outpost.toml");
    std::fs::write(
        &main,
        "[identity]\nnode_id = \"node:a\"\n[queue]\nflush_batch = 10\n",
    )
    .unwrap();
    std::fs::create_dir(dir.path().join("outpost.d")).unwrap();
    std::fs::write(
        dir.path().join("outpost.d/20-late.toml"),
        "[queue]\nflush_batch = 30\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("outpost.d/10-early.toml"),
        "[queue]\nflush_batch = 20\nmax_attempts = 7\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("outpost.d/ignored.txt"), "garbage").unwrap();
    let c = load(&main).unwrap();
    assert_eq!(c.queue.flush_batch, 30);
    assert_eq!(c.queue.max_attempts, 7);
    assert_eq!(c.sources.len(), 3);
}

#[test]
fn node_id_rule_matches_spec() {
    for ok in ["node:pump-17", "gateway:main", "a:b", "x-1:A.b_c-9"] {
        assert!(valid_node_id(ok), "{ok}");
    }
    let long_kind = format!("{}:x", "a".repeat(33));
    let long_name = format!("node:{}", "x".repeat(65));
    for bad in [
        "", "node", ":x", "Node:x", "1node:x", "node:", "node:a b", "node:a:b", &long_kind,
        &long_name,
    ] {
        assert!(!valid_node_id(bad), "{bad}");
    }
}

// The gateway role: not in a build without the `gateway` feature.
#[cfg(feature = "gateway")]
#[test]
fn http_limits_default_by_role_and_are_range_checked() {
    let node = from_str(MINIMAL).unwrap();
    assert_eq!(node.http, HttpLimits::defaults(Role::Node));
    assert_eq!(node.http.max_connections, 256);
    let gw = from_str("[identity]\nnode_id = \"gateway:main\"\nrole = \"gateway\"\n").unwrap();
    assert_eq!(gw.http.max_connections, 4096);
    assert_eq!(gw.http.header_timeout_ms, 10_000);
    let set = from_str(&format!(
        "{MINIMAL}[api]\nheader_timeout_ms = 1000\nbody_timeout_ms = 2000\nidle_timeout_ms = 3000\nmax_connections = 9\n"
    ))
    .unwrap();
    assert_eq!(
        (
            set.http.header_timeout_ms,
            set.http.body_timeout_ms,
            set.http.idle_timeout_ms
        ),
        (1000, 2000, 3000)
    );
    assert_eq!(set.http.max_connections, 9);
    let e = from_str(&format!(
        "{MINIMAL}[api]\nheader_timeout_ms = 5\nmax_connections = 0\n"
    ))
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("api.header_timeout_ms") && e.contains("api.max_connections"),
        "{e}"
    );
}

#[test]
fn upstream_takes_one_url_or_a_list_of_replicas() {
    let one = from_str(&format!(
        "{MINIMAL}[upstream]\nurl = \"http://gw:8787/\"\ngateway_id = \"gateway:main\"\n"
    ))
    .unwrap();
    let up = one.upstream.unwrap();
    assert_eq!(up.urls, vec!["http://gw:8787".to_string()]);
    assert_eq!(up.url, "http://gw:8787");
    let two = from_str(&format!(
        "{MINIMAL}[upstream]\nurls = [\"https://a:8787\", \"https://b:8787\"]\ngateway_id = \"gateway:main\"\n"
    ))
    .unwrap();
    let up = two.upstream.unwrap();
    assert_eq!(up.urls.len(), 2);
    assert_eq!(up.url, "https://a:8787");
    for (bad, why) in [
        ("url = \"http://a\"\nurls = [\"http://b\"]", "not both"),
        ("urls = []", "1 to 16"),
        ("", "needs url"),
        ("urls = [\"http://a\", \"ftp://b\"]", "ftp://b"),
    ] {
        let e = from_str(&format!(
            "{MINIMAL}[upstream]\n{bad}\ngateway_id = \"gateway:main\"\n"
        ))
        .unwrap_err();
        assert!(e.to_string().contains(why), "{bad}: {e}");
    }
}

// The gateway role: not in a build without the `gateway` feature.
#[cfg(feature = "gateway")]
#[test]
fn postgres_is_for_gateways_and_needs_a_url() {
    let gw = "[identity]\nnode_id = \"gateway:main\"\nrole = \"gateway\"\n[store]\nengine = \"postgres\"\n";
    let e = from_str(gw).unwrap_err();
    if cfg!(feature = "postgres") {
        assert!(e.to_string().contains("postgres_url"), "{e}");
    } else {
        // A device build (no PostgreSQL client) says so, whatever else is missing.
        assert!(e.to_string().contains("`postgres` feature"), "{e}");
    }
    let node = "[identity]\nnode_id = \"node:a\"\n[store]\nengine = \"postgres\"\npostgres_url = \"postgres://x@h/db\"\n";
    let e = from_str(node).unwrap_err();
    assert!(e.to_string().contains("gateway role only"), "{e}");
    let stray = "[identity]\nnode_id = \"node:a\"\n[store]\npostgres_url = \"postgres://x@h/db\"\n";
    let e = from_str(stray).unwrap_err();
    assert!(e.to_string().contains("need store.engine"), "{e}");
    #[cfg(feature = "postgres")]
    {
        let c = from_str(&format!(
            "{gw}postgres_url = \"postgres://gw:s3cret@db.example:5432/outpost\"\npostgres_pool = 4\n"
        ))
        .unwrap();
        let db = c.gateway_db.expect("postgres config");
        assert_eq!(db.pool, 4);
        let shown = format!("{db:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("gw:***@db.example"), "{shown}");
    }
}

/// A gateway reachable from the network serves HTTPS, or says on purpose that it does
/// not (a TLS-terminating proxy in front): plain HTTP beyond loopback is refused.
#[cfg(feature = "gateway")]
#[test]
fn a_gateway_beyond_loopback_needs_tls_or_allow_plaintext() {
    let gw = "[identity]\nnode_id = \"gateway:main\"\nrole = \"gateway\"\n";
    let e = from_str(&format!("{gw}[api]\nlisten = \"0.0.0.0:8787\"\n")).unwrap_err();
    let e = e.to_string();
    assert!(
        e.contains("beyond loopback") && e.contains("allow_plaintext"),
        "{e}"
    );
    let c = from_str(&format!(
        "{gw}[api]\nlisten = \"0.0.0.0:8787\"\nallow_plaintext = true\n"
    ))
    .unwrap();
    assert!(c.allow_plaintext && c.tls.is_none());
    let c = from_str(&format!(
        "{gw}[api]\nlisten = \"10.0.0.1:8787\"\ntls_cert_file = \"/c\"\ntls_key_file = \"/k\"\n"
    ))
    .unwrap();
    assert!(c.tls.is_some());
    // Loopback needs neither; a node's local API is not concerned.
    from_str(&format!("{gw}[api]\nlisten = \"127.0.0.1:8787\"\n")).unwrap();
    from_str("[identity]\nnode_id = \"node:a\"\n[api]\nlisten = \"0.0.0.0:8000\"\n").unwrap();
}

/// The results' defaults follow a small store: `max_store_bytes` at its minimum (1 MiB)
/// stays a valid config (the result cap defaults to at most the results' budget).
#[test]
fn a_one_mib_store_is_still_a_valid_config() {
    let cfg =
        from_str("[identity]\nnode_id = \"node:small\"\n[queue]\nmax_store_bytes = 1048576\n")
            .expect("valid");
    assert_eq!(cfg.queue.max_result_store_bytes, 131_072);
    assert_eq!(cfg.queue.max_result_bytes, 131_072);
}
