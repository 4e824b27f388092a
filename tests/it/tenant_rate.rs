//! A tenant's command rate (PROTOCOL §18, `max_commands_per_s`): a tenant sending
//! faster than its rate is refused with 429 `tenant_quota` naming it (nothing queued,
//! `Retry-After: 1`), commands and tool calls alike, while another tenant's commands
//! all go through; the bucket refills, and lifting the quota lifts the refusals.

use std::time::Instant;

use serde_json::json;

use crate::harness::{http, text, Daemon, Home};
use crate::tenants::{send, tenant_token};

async fn depth(gw: &Daemon, operator: &str, address: &str) -> u64 {
    let (st, v) = send(gw, "GET", &format!("/v1/nodes/{address}"), operator, None).await;
    assert_eq!(st, 200, "{v}");
    v["queue_depth"].as_u64().unwrap()
}

/// One command to `node` with `token`: its status, error code and Retry-After.
async fn one(gw: &Daemon, token: &str, node: &str) -> (u16, String, Option<String>) {
    let r = http()
        .post(gw.url("/v1/commands"))
        .bearer_auth(token)
        .json(&json!({"target": {"node_id": node}, "command_type": "note", "body": {}}))
        .send()
        .await
        .unwrap();
    let st = r.status().as_u16();
    let retry = r
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    let v: serde_json::Value = r.json().await.unwrap();
    if st == 429 {
        let m = v["error"]["message"].as_str().unwrap();
        assert!(m.contains("max_commands_per_s"), "{v}");
    }
    let code = v["error"]["code"].as_str().unwrap_or("").to_string();
    (st, code, retry)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_over_its_command_rate_is_refused_and_another_is_not() {
    let home = Home::init("gateway", "gateway:main", "");
    let o = home.cli(&["tenant", "create", "acme", "--max-commands-per-s", "5"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("max commands/s 5"), "{}", text(&o));
    let o = home.cli(&["tenant", "create", "globex"]);
    assert!(o.status.success(), "{}", text(&o));
    for (seed, t) in [(111, "acme"), (112, "globex")] {
        let n = crate::sim::SimNode::with_keys("node:p", seed);
        let o = home.cli_stdin(
            &["trust", "add", "-", "--send", "--tenant", t],
            n.identity_json().as_bytes(),
        );
        assert!(o.status.success(), "{}", text(&o));
    }
    let o = home.cli(&["tenant", "list"]);
    let listed = String::from_utf8(o.stdout).unwrap();
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with("acme ") && l.trim_end().ends_with(" 5")),
        "{listed}"
    );
    let operator = home.token("gateway:main", &["admin"], "1h");
    let acme = tenant_token(&home, "acme", &["admin"]);
    let gw = home.start();

    // acme as fast as it can, globex between: acme gets its burst and its rate.
    let t0 = Instant::now();
    let (mut admitted, mut refused) = (0u64, 0u64);
    for _ in 0..30 {
        match one(&gw, &acme, "node:p").await {
            (202, _, _) => admitted += 1,
            (429, code, retry) => {
                assert_eq!(
                    (code.as_str(), retry.as_deref()),
                    ("tenant_quota", Some("1"))
                );
                refused += 1;
            }
            other => panic!("{other:?}"),
        }
        let (st, code, _) = one(&gw, &operator, "node:p@globex").await;
        assert_eq!(st, 202, "globex refused: {code}");
    }
    let elapsed_s = t0.elapsed().as_secs_f64();
    assert!(refused > 0, "no refusal in {elapsed_s:.2} s");
    let most = 5 + (5.0 * elapsed_s).ceil() as u64;
    assert!(
        (5..=most).contains(&admitted),
        "{admitted} admitted in {elapsed_s:.2} s"
    );
    // A tool call draws from the same bucket.
    let call =
        json!({"target": {"node_id": "node:p"}, "tool_name": "echo", "tool_args": {}, "wait_s": 0});
    let (st, v) = send(&gw, "POST", "/v1/tool_call", &acme, Some(call.clone())).await;
    if st == 429 {
        assert_eq!(v["error"]["code"], "tenant_quota", "{v}");
    }
    let tool_queued = u64::from(st == 202);
    // Nothing refused was queued.
    assert_eq!(
        depth(&gw, &operator, "node:p@acme").await,
        admitted + tool_queued
    );
    assert_eq!(depth(&gw, &operator, "node:p@globex").await, 30);

    // The bucket refills (a token every 200 ms).
    admitted_within(&gw, &acme, 1, 3).await;

    // Lifted: once the gateway rereads its quotas (within a second), nothing is refused.
    let o = home.cli(&["tenant", "set", "acme", "--max-commands-per-s", "none"]);
    assert!(o.status.success(), "{}", text(&o));
    admitted_within(&gw, &acme, 20, 5).await;
}

/// Wait (up to `secs`) until `n` commands of `token` in a row are admitted; a refused
/// one queues nothing and starts the count again.
async fn admitted_within(gw: &Daemon, token: &str, n: usize, secs: u64) {
    let deadline = Instant::now() + std::time::Duration::from_secs(secs);
    let mut run = 0;
    while run < n {
        match one(gw, token, "node:p").await {
            (202, _, _) => run += 1,
            (429, _, _) => {
                run = 0;
                assert!(Instant::now() < deadline, "still refused after {secs} s");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            other => panic!("{other:?}"),
        }
    }
}

/// The states of a rollout's targets, counted.
async fn states(gw: &Daemon, token: &str, id: &str) -> std::collections::BTreeMap<String, u64> {
    let (st, v) = send(gw, "GET", &format!("/v1/rollouts/{id}/nodes"), token, None).await;
    assert_eq!(st, 200, "{v}");
    let mut out = std::collections::BTreeMap::new();
    for n in v["nodes"].as_array().unwrap() {
        *out.entry(n["state"].as_str().unwrap().to_string())
            .or_insert(0) += 1;
    }
    out
}

/// A tenant's rollout is paced by its `max_commands_per_s` (its nodes wait, none
/// fails), and never holds up another tenant's rollout: the driver used to end its
/// whole pass at the first refusal, so a rollout made after a throttled one waited
/// until the throttled one had sent everything.
#[tokio::test(flavor = "multi_thread")]
async fn a_throttled_tenants_rollout_never_holds_up_anothers() {
    let home = Home::init("gateway", "gateway:main", "");
    let o = home.cli(&["tenant", "create", "acme", "--max-commands-per-s", "1"]);
    assert!(o.status.success(), "{}", text(&o));
    for t in ["globex", "initech"] {
        let o = home.cli(&["tenant", "create", t]);
        assert!(o.status.success(), "{}", text(&o));
    }
    for (k, (tenant, n)) in [("acme", 20u32), ("globex", 3), ("initech", 3)]
        .into_iter()
        .enumerate()
    {
        let docs: String = (0..n)
            .map(|i| {
                let seed = 1000 * (k as u32 + 1) + i;
                let sim = crate::sim::SimNode::numbered(&format!("node:r{i}"), seed);
                format!("{}\n", sim.identity_json())
            })
            .collect();
        let o = home.cli_stdin(
            &["trust", "add", "-", "--send", "--tenant", tenant],
            docs.as_bytes(),
        );
        assert!(o.status.success(), "{}", text(&o));
    }
    let tokens: Vec<String> = ["globex", "acme", "initech"]
        .iter()
        .map(|t| tenant_token(&home, t, &["admin"]))
        .collect();
    let gw = home.start();
    // globex's, acme's, initech's, in that order: whichever way the driver lists them,
    // one of the others comes after acme's.
    let rollout = json!({"selector": "", "action": {"command": {"type": "note", "body": {}}}});
    let mut ids = Vec::new();
    for t in &tokens {
        let (st, v) = send(&gw, "POST", "/v1/rollouts", t, Some(rollout.clone())).await;
        assert_eq!(st, 201, "{v}");
        ids.push(v["rollout_id"].as_str().unwrap().to_string());
    }
    let (acme, slow) = (&tokens[1], &ids[1]);

    // The others' three nodes each are sent within a few passes, while acme's go one
    // a second.
    let deadline = Instant::now() + std::time::Duration::from_secs(6);
    for i in [0, 2] {
        loop {
            let s = states(&gw, &tokens[i], &ids[i]).await;
            if !s.contains_key("pending") {
                assert_eq!(s.values().sum::<u64>(), 3, "{s:?}");
                break;
            }
            assert!(Instant::now() < deadline, "rollout {i} held up: {s:?}");
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    }
    let s = states(&gw, acme, slow).await;
    assert!(!s.contains_key("failed"), "a throttled node failed: {s:?}");
    let pending = s.get("pending").copied().unwrap_or(0);
    assert!(
        (1..20).contains(&pending),
        "acme's rollout not paced: {s:?}"
    );
}
