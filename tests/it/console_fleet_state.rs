//! Fleet state in the console (issue 35, PROTOCOL §16), in a real headless chromium at
//! desktop size and 390 px wide: an admin sets and removes labels on a node's page (a
//! bad key refused with the API's message, the form kept), the state panel shows the
//! versions, the delta and in-sync and follows a desired write through the JSON API and
//! a simulated node's reports without a reload; the fleet page filters by selector (a
//! malformed one named with its position), shows agent versions, in-sync and the
//! out-of-sync total, live. Over plain HTTP: a read-only session gets no editor and its
//! forms are refused, forged forms too, a stale If-Match comes back, and labels and
//! documents are escaped.

use std::time::Duration;

use fantoccini::Locator::Css;
use serde_json::{json, Value};

use crate::browser::{self, Browser};
use crate::console::sign_in;
use crate::fleet_state::call;
use crate::harness::{Daemon, Home};
use crate::sim::SimNode;

async fn report(sim: &SimNode, d: &Daemon, body: Value) -> (u16, Value) {
    let pq = format!("/v1/nodes/{}/report", sim.id);
    let (st, v) = sim.signed(d, "POST", &pq, Some(&body)).await;
    assert_eq!(st, 200, "{v}");
    (st, v)
}

fn inventory(agent: &str, arch: &str) -> Value {
    json!({"agent_version": agent, "arch": arch, "os": "Debian GNU/Linux 12 (bookworm)",
           "kernel": "6.1.0-rpi7", "hostname": "pump-1", "data_free_bytes": 3_500_000_000u64,
           "store_bytes": 42_000_000u64, "clock_synchronized": true,
           "facts": {"firmware": "2.4.1"}, "tools": ["echo", "sysinfo"]})
}

/// A gateway with the simulated nodes `ids` enrolled by hand, and an admin token.
async fn gateway_with(ids: &[&str]) -> (Home, Daemon, Vec<SimNode>, String) {
    let gw = Home::init("gateway", "gateway:main", "");
    let d = gw.start();
    let sims: Vec<SimNode> = ids.iter().map(|id| SimNode::generated(id)).collect();
    for s in &sims {
        s.enroll(&gw);
    }
    let admin = gw.token("gateway:main", &["admin"], "1h");
    // The running gateway reads the trust store again within about a second.
    for id in ids {
        let path = format!("/v1/nodes/{id}");
        for _ in 0..200 {
            if call(&d, "GET", &path, &admin, &[], None).await.0 == 200 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    (gw, d, sims, admin)
}

async fn text_of(b: &Browser, css: &str) -> String {
    match b.client.find(Css(css)).await {
        Ok(e) => e.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    }
}

async fn type_into(b: &Browser, css: &str, text: &str) {
    let el = b.client.find(Css(css)).await.unwrap();
    el.clear().await.unwrap();
    el.send_keys(text).await.unwrap();
}

/// The page follows the event stream.
async fn live(b: &Browser) {
    b.wait_for("the live stream", 10, || async {
        (b.js("return document.getElementById('live').textContent")
            .await
            == "live")
            .then_some(())
    })
    .await;
}

/// `attr` of the state panel.
async fn panel(b: &Browser, attr: &str) -> String {
    b.attr("#state-panel", attr).await.unwrap_or_default()
}

/// The labels shown as chips, `k=v` in key order.
async fn chips(b: &Browser) -> Vec<String> {
    let v = b
        .js("return Array.from(document.querySelectorAll('#node-labels li[data-label]')).map(function (l) { return l.getAttribute('data-label') + '=' + l.getAttribute('data-value'); })")
        .await;
    serde_json::from_value(v).unwrap_or_default()
}

/// Submit the label editor with `op` and wait for the page it leads to: the node's
/// page, or (refused) the form's own address.
async fn label_form(b: &Browser, key: &str, value: &str, op: &str, to: &str) {
    type_into(b, "#label-key", key).await;
    type_into(b, "#label-value", value).await;
    b.click_to(&format!("#label-{op}"), to).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn in_a_browser_an_admin_edits_labels_and_the_state_panel_follows_desired_and_reports() {
    let Some(b) = browser::start("console: node state panel and label editor").await else {
        return;
    };
    let (_gw, d, sims, admin) = gateway_with(&["node:pump-1"]).await;
    let sim = &sims[0];
    b.sign_in(&d.url(""), &admin).await;
    let c = &b.client;
    let page = "/ui/nodes/node:pump-1";
    c.goto(&d.url(page)).await.unwrap();
    b.wait_for_page(page).await;
    assert_eq!(panel(&b, "data-in-sync").await, "true");
    assert_eq!(panel(&b, "data-desired-version").await, "0");
    assert!(text_of(&b, "#inventory-none")
        .await
        .contains("Not reported yet"));

    // Labels: set two, one refused whole with the API's message (the form kept), remove one.
    label_form(&b, "site", "north", "set", page).await;
    label_form(&b, "rack", "7", "set", page).await;
    assert_eq!(chips(&b).await, ["rack=7", "site=north"]);
    label_form(&b, "Rack", "8", "set", &format!("{page}/labels")).await;
    let err = text_of(&b, "#form-error").await;
    assert!(
        err.contains("bad_label") && err.contains("\"Rack\""),
        "{err}"
    );
    assert_eq!(
        b.js("return document.getElementById('label-key').value")
            .await,
        "Rack"
    );
    assert_eq!(
        b.js("return document.getElementById('label-value').value")
            .await,
        "8"
    );
    assert_eq!(chips(&b).await, ["rack=7", "site=north"], "nothing applied");
    b.click_to(r#"li[data-label="rack"] button.chip-remove"#, page)
        .await;
    assert_eq!(chips(&b).await, ["site=north"]);
    live(&b).await;

    // Desired state written through the JSON API: the panel follows without a reload.
    let doc = json!({"fan": {"speed": 3}, "mode": "auto", "note": "<img src=x>"});
    let path = "/v1/nodes/node:pump-1/desired";
    let (st, v) = call(&d, "PUT", path, &admin, &[], Some(doc)).await;
    assert_eq!(st, 200, "{v}");
    b.wait_for("desired version 1, out of sync", 10, || async {
        (panel(&b, "data-desired-version").await == "1"
            && panel(&b, "data-in-sync").await == "false")
            .then_some(())
    })
    .await;
    assert_eq!(panel(&b, "data-node-desired-version").await, "0");
    assert!(text_of(&b, "#state-panel h2").await.contains("out of sync"));
    let delta = text_of(&b, "#state-delta").await;
    assert!(
        delta.contains("\"speed\": 3") && delta.contains("\"mode\""),
        "{delta}"
    );
    assert!(
        text_of(&b, "#state-desired").await.contains("<img src=x>"),
        "shown as text"
    );
    assert_eq!(
        b.js("return document.querySelectorAll('#node-fleet-state img').length")
            .await,
        0
    );

    // The node reports: its inventory and part of the state, then all of it.
    let rep = |version: u64, doc: Value| json!({"desired_version": 1, "reported": {"doc": doc, "version": version}});
    let mut first = rep(1, json!({"fan": {"speed": 3}}));
    first["inventory"] = inventory("0.9.1", "aarch64");
    report(sim, &d, first).await;
    b.wait_for("reported version 1 and the inventory", 10, || async {
        let agent = text_of(&b, r#"dd[data-fact="Agent version"]"#).await;
        (panel(&b, "data-reported-version").await == "1" && agent == "0.9.1").then_some(())
    })
    .await;
    assert_eq!(panel(&b, "data-node-desired-version").await, "1");
    assert_eq!(panel(&b, "data-in-sync").await, "false");
    let delta = text_of(&b, "#state-delta").await;
    assert!(
        delta.contains("\"mode\"") && !delta.contains("speed"),
        "{delta}"
    );
    assert_eq!(text_of(&b, r#"dd[data-fact="Free disk"]"#).await, "3.3 GiB");
    assert_eq!(
        text_of(&b, r#"dd[data-fact="Operator facts"]"#).await,
        "firmware=2.4.1"
    );
    let all = json!({"fan": {"speed": 3}, "mode": "auto", "note": "<img src=x>", "uptime_s": 5});
    report(sim, &d, rep(2, all)).await;
    b.wait_for("in sync at reported version 2", 10, || async {
        (panel(&b, "data-in-sync").await == "true"
            && panel(&b, "data-reported-version").await == "2")
            .then_some(())
    })
    .await;
    assert_eq!(text_of(&b, "#state-delta").await, "{}");
    assert!(text_of(&b, "#state-panel h2").await.contains("in sync"));
    // The events list names them as they come.
    let events = text_of(&b, "#node-events").await;
    assert!(
        events.contains("state_reported") && events.contains("desired_set"),
        "{events}"
    );

    // A stale desired value once more, for the picture: out of sync with its delta.
    let patch = json!({"fan": {"speed": 4}});
    let (st, _) = call(&d, "PATCH", path, &admin, &[], Some(patch)).await;
    assert_eq!(st, 200);
    b.wait_for("desired version 2", 10, || async {
        (panel(&b, "data-desired-version").await == "2").then_some(())
    })
    .await;
    c.set_window_size(1280, 1500).await.unwrap();
    b.js("document.getElementById('labels-panel').scrollIntoView()")
        .await;
    b.screenshot("console-node-state.png").await;

    // 390 px: the documents stack and nothing runs off the screen.
    c.set_window_size(390, 844).await.unwrap();
    b.js("document.getElementById('state-panel').scrollIntoView()")
        .await;
    let fits = b
        .js("var w = document.documentElement.clientWidth; return ['state-desired', 'state-reported', 'state-delta', 'label-form'].every(function (id) { var r = document.getElementById(id).getBoundingClientRect(); return r.left >= 0 && r.right <= w + 1; }) && document.getElementById('state-reported').getBoundingClientRect().top > document.getElementById('state-desired').getBoundingClientRect().bottom")
        .await;
    assert_eq!(fits, true, "the state panel does not fit 390 px");
    b.screenshot("console-node-state-phone.png").await;
    b.close().await;
}

/// The fleet table's hooks of `node`: (agent version, in sync).
async fn row_of(b: &Browser, node: &str) -> (String, String) {
    let tr = format!(r#"tr[data-node-id="{node}"]"#);
    let agent = text_of(b, &format!("{tr} td[data-agent-version]")).await;
    let sync = b
        .attr(&format!("{tr} [data-in-sync]"), "data-in-sync")
        .await
        .unwrap_or_default();
    (agent, sync)
}

async fn rows_shown(b: &Browser) -> Vec<String> {
    let v = b
        .js("return Array.from(document.querySelectorAll('#fleet-rows tr[data-node-id]')).map(function (r) { return r.getAttribute('data-node-id'); })")
        .await;
    serde_json::from_value(v).unwrap_or_default()
}

async fn filter_by(b: &Browser, selector: &str) {
    type_into(b, "#selector", selector).await;
    b.click_to("form.filter button[type=submit]", "/ui").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn in_a_browser_the_fleet_filters_by_selector_and_counts_nodes_out_of_sync() {
    let Some(b) = browser::start("console: fleet selector, versions, in sync").await else {
        return;
    };
    let (_gw, d, sims, admin) = gateway_with(&["node:a", "node:b", "node:c"]).await;
    let labels = [
        ("node:a", json!({"site": "north", "role": "pump"})),
        ("node:b", json!({"site": "north"})),
        ("node:c", json!({"site": "south"})),
    ];
    for (id, set) in labels {
        let path = format!("/v1/nodes/{id}/labels");
        let (st, v) = call(&d, "PATCH", &path, &admin, &[], Some(json!({ "set": set }))).await;
        assert_eq!(st, 200, "{v}");
    }
    let inv = |agent: &str, arch: &str| json!({"desired_version": 0, "inventory": inventory(agent, arch)});
    report(&sims[0], &d, inv("0.9.1", "aarch64")).await;
    report(&sims[2], &d, inv("0.8.7", "armv7l")).await;
    let desired = |id: &str| format!("/v1/nodes/{id}/desired");
    let (st, _) = call(
        &d,
        "PUT",
        &desired("node:b"),
        &admin,
        &[],
        Some(json!({"fan": 1})),
    )
    .await;
    assert_eq!(st, 200);

    b.sign_in(&d.url(""), &admin).await;
    assert_eq!(rows_shown(&b).await, ["node:a", "node:b", "node:c"]);
    assert_eq!(row_of(&b, "node:a").await, ("0.9.1".into(), "true".into()));
    assert_eq!(row_of(&b, "node:b").await, ("—".into(), "false".into()));
    assert_eq!(text_of(&b, r#"[data-total="out_of_sync"] b"#).await, "1");

    filter_by(&b, "site=north").await;
    assert_eq!(rows_shown(&b).await, ["node:a", "node:b"]);
    assert_eq!(text_of(&b, "#fleet-count").await, "2 of 3 nodes");
    filter_by(&b, "site = north, inventory.arch in (aarch64, x86_64)").await;
    assert_eq!(rows_shown(&b).await, ["node:a"]);
    live(&b).await;

    // Live: node:a goes out of sync; the totals follow, the selector stays applied.
    let (st, _) = call(
        &d,
        "PUT",
        &desired("node:a"),
        &admin,
        &[],
        Some(json!({"fan": 2})),
    )
    .await;
    assert_eq!(st, 200);
    b.wait_for("node:a out of sync and 2 in the totals", 10, || async {
        let total = text_of(&b, r#"[data-total="out_of_sync"] b"#).await;
        (row_of(&b, "node:a").await.1 == "false" && total == "2").then_some(())
    })
    .await;
    assert_eq!(
        rows_shown(&b).await,
        ["node:a"],
        "the selector survives live updates"
    );
    assert!(b
        .client
        .current_url()
        .await
        .unwrap()
        .query()
        .unwrap_or("")
        .contains("sel="));
    b.screenshot("console-fleet-selector.png").await;

    // Malformed: the API's bad_selector message with its position; the input kept.
    filter_by(&b, "site=north,,x").await;
    let err = text_of(&b, "#selector-error").await;
    assert!(
        err.contains("bad_selector") && err.contains("at character 11"),
        "{err}"
    );
    assert_eq!(
        b.attr("#selector-error", "data-pos").await.as_deref(),
        Some("11")
    );
    assert_eq!(
        b.js("return document.getElementById('selector').value")
            .await,
        "site=north,,x"
    );
    assert!(rows_shown(&b).await.is_empty());
    b.close().await;
}

/// The body of `r`.
async fn body(r: reqwest::Response) -> (u16, String) {
    (r.status().as_u16(), r.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn label_and_desired_forms_need_an_admin_this_origin_and_escape_what_they_show() {
    let (gw, d, _sims, admin) = gateway_with(&["node:a"]).await;
    let read = gw.token("gateway:main", &["read"], "1h");
    let note = json!({"set": {"note": "<i>x</i>"}});
    let (st, v) = call(
        &d,
        "PATCH",
        "/v1/nodes/node:a/labels",
        &admin,
        &[],
        Some(note),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    let labels = || async {
        call(&d, "GET", "/v1/nodes/node:a", &admin, &[], None)
            .await
            .1["labels"]
            .clone()
    };

    // A read-only session: the panels, no editor; its forms are refused.
    let (_, r) = sign_in(&d, &read).await;
    let r = r.expect("read session");
    let (st, html) = body(r.get("/ui/nodes/node:a").await).await;
    assert_eq!(st, 200);
    assert!(html.contains(r#"id="state-panel""#) && html.contains(r#"id="labels-panel""#));
    assert!(
        !html.contains("label-form")
            && !html.contains("desired-form")
            && !html.contains("chip-remove"),
        "{html}"
    );
    assert!(
        html.contains("note=&lt;i&gt;x&lt;/i&gt;") && !html.contains("<i>x</i>"),
        "{html}"
    );
    let csrf = r.csrf().await;
    let set = [
        ("csrf", csrf.as_str()),
        ("key", "site"),
        ("value", "x"),
        ("op", "set"),
    ];
    assert_eq!(
        r.post("/ui/nodes/node:a/labels", Some(&r.origin), &set)
            .await
            .status(),
        403
    );
    let put = [
        ("csrf", csrf.as_str()),
        ("doc", "{}"),
        ("mode", "replace"),
        ("if_match", ""),
    ];
    assert_eq!(
        r.post("/ui/nodes/node:a/desired", Some(&r.origin), &put)
            .await
            .status(),
        403
    );

    // An admin session: forged forms (another origin, no CSRF token) are refused.
    let (_, s) = sign_in(&d, &admin).await;
    let s = s.expect("admin session");
    let csrf = s.csrf().await;
    let set = [
        ("csrf", csrf.as_str()),
        ("key", "site"),
        ("value", "x"),
        ("op", "set"),
    ];
    let path = "/ui/nodes/node:a/labels";
    assert_eq!(
        s.post(path, Some("http://evil.example"), &set)
            .await
            .status(),
        403
    );
    assert_eq!(s.post(path, None, &set).await.status(), 403);
    assert_eq!(s.post(path, Some(&s.origin), &set[1..]).await.status(), 403);
    assert_eq!(
        labels().await,
        json!({"note": "<i>x</i>"}),
        "nothing was changed"
    );
    assert_eq!(s.post(path, Some(&s.origin), &set).await.status(), 303);
    assert_eq!(labels().await, json!({"note": "<i>x</i>", "site": "x"}));

    // Desired through the form; a stale If-Match comes back (412) with what was typed.
    let doc = r#"{"fan": "<b>"}"#;
    let put = |m: &'static str| {
        [
            ("csrf", csrf.clone()),
            ("doc", doc.into()),
            ("mode", "replace".into()),
            ("if_match", m.into()),
        ]
    };
    let form =
        |f: &[(&'static str, String)]| f.iter().map(|(k, v)| (*k, v.clone())).collect::<Vec<_>>();
    let send = |m: &'static str| {
        let f = form(&put(m));
        let s = &s;
        async move {
            let f: Vec<(&str, &str)> = f.iter().map(|(k, v)| (*k, v.as_str())).collect();
            s.post("/ui/nodes/node:a/desired", Some(&s.origin), &f)
                .await
        }
    };
    let r = send("0").await;
    assert_eq!(r.status(), 303);
    assert!(r.headers()["location"]
        .to_str()
        .unwrap()
        .contains("desired=1"));
    let (st, html) = body(send("0").await).await;
    assert_eq!(st, 412, "{html}");
    assert!(
        html.contains("version_conflict") && html.contains("at version 1, not 0"),
        "{html}"
    );
    assert!(
        html.contains("{&quot;fan&quot;: &quot;&lt;b&gt;&quot;}"),
        "the document kept, escaped: {html}"
    );
    let (st, html) = body(send("x").await).await;
    assert_eq!(st, 400);
    assert!(html.contains("If-Match must be"), "{html}");
    let (st, v) = call(&d, "GET", "/v1/nodes/node:a/state", &admin, &[], None).await;
    assert_eq!((st, v["desired_version"].as_u64()), (200, Some(1)), "{v}");

    // The live fragment needs a session.
    let anon = crate::harness::http()
        .get(d.url("/ui/nodes/node:a/fleet_state"))
        .send()
        .await
        .unwrap();
    assert_eq!(anon.status(), 401);
}
