//! `outpost demo`: a gateway and a node on loopback, as real child processes of this
//! executable, telling the store-and-forward story with timestamps:
//!
//! 1. a live tool call through the gateway (200 with the node's result);
//! 2. the node goes offline (SIGTERM);
//! 3. the operator queues tool calls and a short-TTL setpoint (202 queued);
//! 4. the setpoint expires in the gateway's queue and is never delivered;
//! 5. the node comes back, is told the pending count, flushes in order
//!    (`was_stored: true`), runs the calls, and the results arrive upstream;
//! 6. the node's audit log syncs and verifies at the gateway;
//!
//! then a summary table. Every step checks its expectation; any miss exits non-zero.
//! Finishes in well under 60 s.

mod procs;

use std::path::PathBuf;
use std::time::Duration;

use tokio::time::Instant;

use anyhow::{bail, Context};
use serde_json::{json, Value};

use procs::{events_of, now_ms, outpost, subscribe, Api, Daemon, Events, Home};

const GATEWAY_ID: &str = "gateway:main";
const NODE_ID: &str = "node:pump-17";
const QUEUED_CALLS: usize = 5;

struct Story {
    t0: Instant,
}

impl Story {
    fn say(&self, what: &str) {
        println!("[{:>6.2}s] {what}", self.t0.elapsed().as_secs_f64());
    }
}

pub fn run(keep: bool) -> anyhow::Result<()> {
    let root =
        std::env::temp_dir().join(format!("outpost-demo-{}-{}", std::process::id(), now_ms()));
    std::fs::create_dir_all(&root)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let res = rt.block_on(story(root.clone()));
    if keep || res.is_err() {
        println!(
            "demo files kept in {} (daemon logs: */daemon.log)",
            root.display()
        );
    } else {
        let _ = std::fs::remove_dir_all(&root);
    }
    res.map_err(|e| super::Exit::failed(format!("demo failed: {e:#}")).into())
}

fn write(path: &PathBuf, text: &str) -> anyhow::Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// The demo's gateway and node, running, and the operator's API client with the
/// gateway's event stream.
struct Stage {
    node: Home,
    g: Daemon,
    n: Daemon,
    api: Api,
    events: Events,
    sse: tokio::task::JoinHandle<()>,
}

async fn story(root: PathBuf) -> anyhow::Result<()> {
    let s = Story { t0: Instant::now() };
    s.say(&format!(
        "setting up a gateway and a node in {}",
        root.display()
    ));
    let Stage {
        node,
        g,
        n,
        api,
        events,
        sse,
    } = stage(&root, &s).await?;
    live_call(&s, &api, &g).await?;
    let (queued, setpoint) = outage(&s, &api, &g, n).await?;
    let back = Instant::now();
    let n = node.start().await?;
    s.say("node back online: pending count → stored flush → live");
    let results = results_after_reconnect(&api, &g, &queued).await?;
    let drain = back.elapsed();
    s.say(&format!(
        "all {results} results arrived upstream {:.2}s after reconnect",
        drain.as_secs_f64()
    ));
    let stored_order = delivered_in_order(&events, &queued, &setpoint)?;
    let audit = audit_synced(&s, &api, &g, &n).await?;
    n.stop().await?;
    g.stop().await?;
    sse.abort();
    let expired = events_of(&events, "expired");
    let summary = [
        ("live calls answered (200)", 1u64),
        ("queued while offline (202)", (QUEUED_CALLS + 1) as u64),
        (
            "delivered after reconnect (was_stored)",
            stored_order.len() as u64,
        ),
        ("expired in queue (never delivered)", expired.len() as u64),
        ("results received upstream", results as u64),
        ("audit entries synced + verified", audit),
    ];
    println!("\n  outpost demo summary");
    println!("  {:-<48}", "");
    for (k, v) in summary {
        println!("  {k:<40} {v:>6}");
    }
    println!(
        "  {:<40} {:>5.2}s",
        "time to drain after reconnect",
        drain.as_secs_f64()
    );
    println!("  {:<40} {:>5.2}s", "total", s.t0.elapsed().as_secs_f64());
    expect(
        expired.len() == 1,
        "exactly one message expired",
        &json!(expired),
    )?;
    println!("\ndemo OK");
    Ok(())
}

/// Gateway and node set up, the node enrolled with a one-use token and polling.
async fn stage(root: &std::path::Path, s: &Story) -> anyhow::Result<Stage> {
    let gw = Home::init(root, "gateway", "gateway", GATEWAY_ID)?;
    let node = Home::init(root, "node", "node", NODE_ID)?;
    // The node enrolls itself with a one-use token (PROTOCOL §15): no identity documents
    // copied by hand; it pins the gateway by the token and both end up trusting each other.
    let enroll_token = node.dir.join("enroll.token");
    write(
        &enroll_token,
        &outpost(&[
            "enroll-token",
            "create",
            "--max-uses",
            "1",
            "--ttl",
            "1h",
            "--config",
            &gw.cfg_arg(),
        ])?,
    )?;
    let token = outpost(&[
        "token",
        "issue",
        "--aud",
        GATEWAY_ID,
        "--scope",
        "admin",
        "--ttl",
        "1h",
        "--config",
        &gw.cfg_arg(),
    ])?
    .trim()
    .to_string();
    let api = Api::new(token)?;

    let g = gw.start().await?;
    s.say(&format!("gateway {GATEWAY_ID} listening on {}", g.addr));
    // The node learns where the gateway is through a drop-in (short long-polls keep the
    // demo brisk).
    let dropin = node.dir.join("outpost.d");
    std::fs::create_dir_all(&dropin)?;
    write(
        &dropin.join("10-upstream.toml"),
        &format!(
            "[upstream]\nurl = \"http://{}\"\nenroll_token_file = \"{}\"\npoll_wait_s = 10\n",
            g.addr,
            enroll_token.display()
        ),
    )?;
    let (events, sse) = subscribe(&api, &g.url("/v1/events")).await?;

    let n = node.start().await?;
    s.say(&format!(
        "node {NODE_ID} up on {}; enrolling with a one-use token, then connecting upstream",
        n.addr
    ));
    wait_polling(&api, &g.url("/v1/nodes"), true).await?;
    s.say("node enrolled and online at the gateway (holding a long-poll)");

    Ok(Stage {
        node,
        g,
        n,
        api,
        events,
        sse,
    })
}

/// Act 1: a tool call answered live.
async fn live_call(s: &Story, api: &Api, g: &Daemon) -> anyhow::Result<()> {
    let (st, body) = api
        .post(
            &g.url("/v1/tool_call"),
            &json!({"target": {"node_id": NODE_ID}, "tool_name": "pii_redact",
                    "tool_args": {"text": "call +1 415 555 0100 or mail ops@example.com"}, "wait_s": 15}),
        )
        .await?;
    expect(
        st == 200 && body["ok"] == true,
        "live tool call answers 200 with the result",
        &body,
    )?;
    s.say(&format!("live tool call → 200: {}", body["result"]["text"]));

    Ok(())
}

/// Acts 2–4: the node goes away; tool calls and a short-lived setpoint are queued; the
/// setpoint expires. Returns the queued calls' ids and the setpoint's.
async fn outage(
    s: &Story,
    api: &Api,
    g: &Daemon,
    n: Daemon,
) -> anyhow::Result<(Vec<String>, String)> {
    n.stop().await?;
    s.say("node stopped (SIGTERM): the site lost its uplink");
    wait_polling(api, &g.url("/v1/nodes"), false).await?;

    // 3. Queue work while it is away.
    let mut queued = Vec::new();
    for i in 0..QUEUED_CALLS {
        let (st, body) = api
            .post(
                &g.url("/v1/tool_call"),
                &json!({"target": {"node_id": NODE_ID}, "tool_name": "echo",
                        "tool_args": {"reading": i}, "wait_s": 0}),
            )
            .await?;
        expect(
            st == 202 && body["queued"] == true,
            "offline tool call is queued (202)",
            &body,
        )?;
        queued.push(body["message_id"].as_str().unwrap_or_default().to_string());
    }
    s.say(&format!("queued {QUEUED_CALLS} tool calls → 202 queued"));
    let (st, body) = api
        .post(
            &g.url("/v1/commands"),
            &json!({"target": {"node_id": NODE_ID}, "command_type": "setpoint",
                    "body": {"valve": 3, "open_pct": 40}, "ttl_s": 2}),
        )
        .await?;
    expect(st == 202, "setpoint command is queued (202)", &body)?;
    let setpoint = body["message_id"].as_str().unwrap_or_default().to_string();
    s.say("queued a setpoint with a 2 s TTL → 202 queued");

    // 4. The setpoint expires in the queue.
    let url = g.url(&format!("/v1/messages/{setpoint}"));
    poll_async(
        "the setpoint to expire",
        Duration::from_secs(10),
        || async {
            let (_, b) = api.get(&url).await?;
            Ok((b["state"] == "expired").then_some(()))
        },
    )
    .await?;
    s.say("setpoint expired in the gateway queue (reason timeout_in_queue); it will never be delivered");

    Ok((queued, setpoint))
}

/// Act 5: every queued call's result arrives upstream; returns how many.
async fn results_after_reconnect(
    api: &Api,
    g: &Daemon,
    queued: &[String],
) -> anyhow::Result<usize> {
    let mut results = 0;
    for id in queued {
        let url = g.url(&format!("/v1/messages/{id}"));
        let r = poll_async(
            "a queued call's result",
            Duration::from_secs(20),
            || async {
                let (_, b) = api.get(&url).await?;
                Ok(b.get("result").filter(|r| !r.is_null()).cloned())
            },
        )
        .await?;
        expect(r["ok"] == true, "queued call succeeded on the node", &r)?;
        results += 1;
    }
    Ok(results)
}

/// The stored messages went out in FIFO order marked `was_stored`, and the expired
/// setpoint never did; returns the stored messages in delivery order.
fn delivered_in_order(
    events: &Events,
    queued: &[String],
    setpoint: &str,
) -> anyhow::Result<Vec<String>> {
    let delivered = events_of(events, "delivered");
    let stored_order: Vec<String> = delivered
        .iter()
        .filter(|e| e["was_stored"] == true)
        .filter_map(|e| e["message_id"].as_str().map(str::to_string))
        .collect();
    expect(
        stored_order == queued,
        "stored messages were delivered in FIFO order with was_stored: true",
        &json!({"queued": queued, "delivered_stored": stored_order}),
    )?;
    expect(
        !delivered.iter().any(|e| e["message_id"] == setpoint),
        "the expired setpoint was never delivered",
        &json!(setpoint),
    )?;
    Ok(stored_order)
}

/// Act 6: the node's audit log reaches the gateway, verified; returns its size.
async fn audit_synced(s: &Story, api: &Api, g: &Daemon, n: &Daemon) -> anyhow::Result<u64> {
    let node_status = n.url("/v1/status");
    let nodes_url = g.url("/v1/nodes");
    let audit = poll_async("the audit log to sync", Duration::from_secs(30), || async {
        let (_, local) = procs::answer(reqwest::get(&node_status).await?).await?;
        let size = local["audit"]["size"].as_u64().unwrap_or(0);
        let (_, nodes) = api.get(&nodes_url).await?;
        let at_gw = nodes["nodes"][0]["audit_size"].as_u64().unwrap_or(0);
        Ok((size > 0 && at_gw == size).then_some(size))
    })
    .await?;
    s.say(&format!(
        "audit log synced: {audit} entries verified against the node's signed checkpoint"
    ));

    Ok(audit)
}

fn expect(ok: bool, what: &str, detail: &Value) -> anyhow::Result<()> {
    if !ok {
        bail!("expected: {what}; got {detail}");
    }
    Ok(())
}

async fn wait_polling(api: &Api, nodes_url: &str, want: bool) -> anyhow::Result<()> {
    poll_async(
        "the node's connection state at the gateway",
        Duration::from_secs(20),
        || async {
            let (_, b) = api.get(nodes_url).await?;
            let polling = b["nodes"]
                .as_array()
                .and_then(|a| a.iter().find(|n| n["node_id"] == NODE_ID))
                .map(|n| n["polling"] == true)
                .unwrap_or(false);
            Ok((polling == want).then_some(()))
        },
    )
    .await
}

/// [`poll`] for async checks.
async fn poll_async<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = f().await? {
            return Ok(v);
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
