//! An operator's ordinary day in the console (issue 38), in a real headless chromium at
//! desktop size and 390 px wide: the waiting devices on top and approved several at
//! once, the totals following liveness live, a tool call's result (or its error) on the
//! page, a form sent back filled in, retiring behind the typed node id, and a revoked
//! session told why it ended.

use fantoccini::Locator::Css;
use serde_json::Value;

use crate::browser::{self, Browser};
use crate::console::{fleet, sign_in};
use crate::harness::{gateway_and_node, http, pair, text, Home};
use crate::self_enroll::{enrolling_node, enrollment_becomes, gw_url, make_token};

/// A machine-id name, as golden-image fleets have.
const LONG: &str = "node:3f9a2c7e5b1d4e8f9a0b1c2d3e4f5a6b";

/// `text` of the first element `css` finds (empty when none).
async fn text_of(b: &Browser, css: &str) -> String {
    match b.client.find(Css(css)).await {
        Ok(e) => e.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    }
}

/// On a phone (390 × 844): the page is no wider than the screen, and everything `css`
/// selects is shown within it (not scrolled sideways, not folded away); a screenshot
/// as `shot` with the first of them in view; back to the desktop size after.
async fn fits_a_phone(b: &Browser, css: &[&str], shot: &str) {
    b.client.set_window_size(390, 844).await.unwrap();
    let overflow = b
        .js("return document.documentElement.scrollWidth - document.documentElement.clientWidth")
        .await;
    assert_eq!(
        overflow, 0,
        "{shot}: the page is wider than a phone's screen"
    );
    for sel in css {
        let script = format!(
            "var all = Array.from(document.querySelectorAll({sel:?})); \
             if (!all.length) {{ return 'none'; }} \
             return all.filter(function (e) {{ var r = e.getBoundingClientRect(); \
               return r.width === 0 || r.left < 0 || r.right > window.innerWidth; }}).length"
        );
        assert_eq!(
            b.js(&script).await,
            0,
            "{shot}: `{sel}` is missing or off a 390 px screen"
        );
    }
    // The picture shows the first of them.
    b.js(&format!(
        "document.querySelector({:?}).scrollIntoView({{block: 'center'}}); return 1",
        css[0]
    ))
    .await;
    b.screenshot(shot).await;
    b.client.set_window_size(1280, 900).await.unwrap();
}

/// The number a totals cell shows (`stale` → `1`).
async fn total(b: &Browser, which: &str) -> String {
    text_of(b, &format!(".totals [data-total={which}] b")).await
}

/// The pending list is above the fleet table and readable on a phone (long ids do not
/// push the liveness off the screen); two devices are approved at once with their
/// checkboxes, each decision in the audit log.
#[tokio::test(flavor = "multi_thread")]
async fn in_a_browser_the_waiting_devices_come_first_and_are_approved_together() {
    let Some(b) = browser::start("console: pending on top, bulk approval").await else {
        return;
    };
    let (gw_home, a_home) = gateway_and_node("node:a", 2);
    pair(&gw_home, &a_home);
    let gwd = gw_home.start();
    let long = Home::init(
        "node",
        LONG,
        &format!(
            "[upstream]\nurl = \"http://{}\"\ngateway_id = \"gateway:main\"\n",
            gwd.addr
        ),
    );
    pair(&gw_home, &long);
    let manual = make_token(&gw_home, &["--max-uses", "5", "--approve", "manual"]);
    let url = gw_url(&gwd);
    let (p1, _) = enrolling_node("node:7d1e0c9b8a7f6e5d4c3b2a1908f7e6d5", &url, &manual);
    let (p2, _) = enrolling_node("node:pump-8", &url, &manual);
    let (d1, d2) = (p1.start(), p2.start());
    enrollment_becomes(&d1, "pending").await;
    enrollment_becomes(&d2, "pending").await;
    let _a = a_home.start();
    let admin = gw_home.token("gateway:main", &["admin"], "1h");
    b.sign_in(&gwd.url(""), &admin).await;
    let c = &b.client;
    b.wait_for("node:a online and the long id listed", 30, || async {
        let a = b
            .attr(r#"tr[data-node-id="node:a"]"#, "data-liveness")
            .await;
        let l = b
            .attr(&format!(r#"tr[data-node-id="{LONG}"]"#), "data-liveness")
            .await;
        (a.as_deref() == Some("online") && l.is_some()).then_some(())
    })
    .await;
    if b.attr("#live", "class").await.as_deref() != Some("live on") {
        c.refresh().await.unwrap();
        b.wait_for_page("/ui").await;
    }

    // Above the fleet: the list comes before the table in the page.
    let first = b
        .js("var p = document.getElementById('pending-enrollments'), t = document.getElementById('fleet'); \
             return !!p && !!(p.compareDocumentPosition(t) & Node.DOCUMENT_POSITION_FOLLOWING)")
        .await;
    assert_eq!(first, true, "the pending list is above the fleet table");
    // Each waiting device with what it said about itself and where it asked from.
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_string();
    for id in ["node:7d1e0c9b8a7f6e5d4c3b2a1908f7e6d5", "node:pump-8"] {
        let cell = text_of(
            &b,
            &format!(r#"#pending-enrollments tr[data-enrollment="{id}"] td.device"#),
        )
        .await;
        assert!(
            cell.contains(&host) && cell.contains("from 127.0.0.1"),
            "{id}'s device cell: {cell:?}"
        );
    }
    b.screenshot("console-fleet-approve.png").await;

    // On a phone: no sideways page, and every row's liveness within the screen.
    c.set_window_size(390, 844).await.unwrap();
    let off = b
        .js("return Array.from(document.querySelectorAll('#fleet-rows tr[data-node-id] td:nth-child(2)')) \
             .filter(function (td) { return td.getBoundingClientRect().right > window.innerWidth; }) \
             .map(function (td) { return td.parentElement.getAttribute('data-node-id'); })")
        .await;
    assert_eq!(
        off,
        serde_json::json!([]),
        "liveness pushed off a 390 px screen"
    );
    let overflow = b
        .js("return document.documentElement.scrollWidth - document.documentElement.clientWidth")
        .await;
    assert_eq!(overflow, 0, "the page is wider than a phone's screen");
    // Every waiting device's Approve and Reject within the screen, not scrolled away.
    let hidden = b
        .js("return Array.from(document.querySelectorAll('#pending-enrollments td.decide button')) \
             .filter(function (e) { var r = e.getBoundingClientRect(); return r.right > window.innerWidth || r.width === 0; }) \
             .map(function (e) { return e.closest('tr').getAttribute('data-enrollment') + ' ' + e.textContent; })")
        .await;
    assert_eq!(
        hidden,
        serde_json::json!([]),
        "a decision off a 390 px screen"
    );
    c.set_window_size(1280, 900).await.unwrap();
    // Approving several at once works on a phone too: every box and the button shown.
    fits_a_phone(
        &b,
        &[
            "#pending-enrollments input[name=node]",
            "#bulk-approve button[type=submit]",
            "#pending-enrollments td.device",
        ],
        "console-fleet-pending-phone.png",
    )
    .await;

    // Both devices ticked, one click.
    for id in ["node:7d1e0c9b8a7f6e5d4c3b2a1908f7e6d5", "node:pump-8"] {
        c.find(Css(&format!(
            r#"#pending-enrollments input[name=node][value="{id}"]"#
        )))
        .await
        .unwrap_or_else(|e| panic!("no checkbox for {id}: {e}"))
        .click()
        .await
        .unwrap();
    }
    c.find(Css("#bulk-approve button[type=submit]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    b.wait_for("the approvals' notice", 20, || async {
        let html = c.source().await.ok()?;
        (html.contains("2 enrollments approved") && !html.contains("data-enrollment="))
            .then_some(())
    })
    .await;
    enrollment_becomes(&d1, "enrolled").await;
    enrollment_becomes(&d2, "enrolled").await;
    let audit = gw_home.cli(&["audit", "export", "--jsonl"]);
    let approvals = String::from_utf8_lossy(&audit.stdout)
        .lines()
        .filter(|l| l.contains("\"approve\""))
        .count();
    assert_eq!(
        approvals,
        2,
        "one audit entry per decision: {}",
        text(&audit)
    );

    b.close().await;
}

/// A node falls silent while the fleet page is open: its row turns stale, and the
/// totals above the table with it (the same fetch brings both), without a reload; a
/// command queued meanwhile shows in the chart and the queued total. Totals and chart
/// fit a phone's screen.
#[tokio::test(flavor = "multi_thread")]
async fn in_a_browser_the_fleet_totals_follow_a_node_going_stale() {
    let Some(b) = browser::start("console: live totals").await else {
        return;
    };
    let (_gw_home, a_home, _b_home, gwd, admin) = fleet(2);
    let a = a_home.start();
    b.sign_in(&gwd.url(""), &admin).await;
    b.wait_for("node:a online", 30, || async {
        (total(&b, "online").await == "1").then_some(())
    })
    .await;
    b.js("window.__outpostNoReload = 1; return 1").await;
    let legend = || async { text_of(&b, ".chart .legend .key.queued").await };
    assert_eq!(legend().await, "queued 0");
    // node:b never connects: what is queued for it stays queued.
    let r = http()
        .post(gwd.url("/v1/commands"))
        .bearer_auth(&admin)
        .json(
            &serde_json::json!({"target": {"node_id": "node:b"}, "command_type": "setpoint",
                                  "body": {"v": 1}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    b.wait_for("the chart and the totals to count it", 10, || async {
        (legend().await == "queued 1" && total(&b, "queued").await == "1").then_some(())
    })
    .await;
    let bars = b
        .js("return Array.from(document.querySelectorAll('.chart rect.queued')).filter(function (r) { return Number(r.getAttribute('height')) > 0; }).length")
        .await;
    assert_eq!(bars, 1, "one bucket's queued bar drawn");
    a.stop();
    b.wait_for("node:a's row stale", 70, || async {
        (b.attr(r#"tr[data-node-id="node:a"]"#, "data-liveness")
            .await
            .as_deref()
            == Some("stale"))
        .then_some(())
    })
    .await;
    // The totals come with the same fetch as the rows: within a second of them.
    b.wait_for("the totals to say 1 stale", 3, || async {
        (total(&b, "stale").await == "1").then_some(())
    })
    .await;
    assert_eq!(total(&b, "online").await, "0");
    assert_eq!(b.js("return window.__outpostNoReload || 0").await, 1);
    b.screenshot("console-fleet-stale.png").await;
    fits_a_phone(
        &b,
        &[".totals [data-total]", ".chart svg", ".chart .legend"],
        "console-fleet-stale-phone.png",
    )
    .await;
    assert_eq!(b.js("return window.__outpostNoReload || 0").await, 1);
    b.close().await;
}

/// A tool call from a node's page shows what the tool answered when it arrives, and a
/// failure (an unknown tool; a call the node never took in time) with its code; the
/// banner says it was a tool call; arguments that are not JSON send the form back
/// filled in.
#[tokio::test(flavor = "multi_thread")]
async fn in_a_browser_a_tool_calls_result_or_error_appears_on_the_page() {
    let Some(b) = browser::start("console: tool call results").await else {
        return;
    };
    let (_gw_home, a_home, _b_home, gwd, admin) = fleet(2);
    let _a = a_home.start();
    b.sign_in(&gwd.url(""), &admin).await;
    let c = &b.client;

    async fn call(b: &Browser, node: &str, tool: &str, args: &str, ttl: &str) {
        let c = &b.client;
        let path = format!("/ui/nodes/{node}");
        if c.current_url().await.unwrap().path() != path {
            c.goto(&format!("{}{path}", base(c).await)).await.unwrap();
            b.wait_for_page(&path).await;
        }
        for (id, v) in [
            ("#tool_name", tool),
            ("#tool_args", args),
            ("#call_ttl_s", ttl),
        ] {
            if id == "#call_ttl_s" && v.is_empty() {
                continue;
            }
            let el = c.find(Css(id)).await.unwrap();
            el.clear().await.unwrap();
            if !v.is_empty() {
                el.send_keys(v).await.unwrap();
            }
        }
        c.find(Css(r#"form[action$="/tool_calls"] button[type=submit]"#))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
    }
    async fn base(c: &fantoccini::Client) -> String {
        let u = c.current_url().await.unwrap();
        format!("http://{}:{}", u.host_str().unwrap(), u.port().unwrap())
    }
    async fn outcome(b: &Browser) -> (String, Option<String>, String) {
        // Read together in one script: the live page may replace the element between
        // two separate reads (a stale element reads as no attribute).
        b.wait_for("the call's outcome", 40, || async {
            let v = b
                .js(
                    "const e = document.querySelector('#call-result > [data-state]'); \
                     return e ? [e.getAttribute('data-state'), e.getAttribute('data-code'), \
                     document.querySelector('#call-result').innerText] : null",
                )
                .await;
            let st = v.get(0)?.as_str()?.to_string();
            if st == "waiting" {
                return None;
            }
            let code = v.get(1).and_then(|c| c.as_str()).map(str::to_string);
            Some((st, code, v.get(2)?.as_str()?.to_string()))
        })
        .await
    }

    // node:a answers: the tool's result, on the page, without a reload.
    call(&b, "node:a", "echo", r#"{"reading": 7}"#, "").await;
    b.wait_for("the call's box", 20, || async {
        b.attr("#call-result", "data-message-id").await
    })
    .await;
    b.js("window.__outpostNoReload = 1; return 1").await;
    let banner = text_of(&b, "#call-result").await;
    assert!(
        !banner.contains("Command queued") && !banner.contains("/v1/messages"),
        "the banner of a tool call: {banner}"
    );
    let (state, _, shown) = outcome(&b).await;
    assert_eq!(state, "ok", "{shown}");
    assert!(shown.contains("\"reading\": 7"), "{shown}");
    assert_eq!(b.js("return window.__outpostNoReload || 0").await, 1);
    b.screenshot("console-node-call.png").await;
    c.set_window_size(390, 844).await.unwrap();
    let overflow = b
        .js("return document.documentElement.scrollWidth - document.documentElement.clientWidth")
        .await;
    assert_eq!(overflow, 0, "the page is wider than a phone's screen");
    b.screenshot("console-node-call-phone.png").await;
    c.set_window_size(1280, 900).await.unwrap();
    // Recent results shows what the tool answered (not only `result ok job …`), live.
    b.wait_for("the result under Recent results", 10, || async {
        let results = text_of(&b, "#node-results").await;
        results.contains("\"reading\": 7").then_some(())
    })
    .await;
    assert_eq!(b.js("return window.__outpostNoReload || 0").await, 1);

    // A tool the node does not have: the error and its code.
    call(&b, "node:a", "no_such_tool", "", "").await;
    let (state, code, shown) = outcome(&b).await;
    assert_eq!(
        (state.as_str(), code.as_deref()),
        ("failed", Some("unknown_tool")),
        "{shown}"
    );

    // node:b never connects: a call that may wait 2 s ends unanswered, and says so.
    call(&b, "node:b", "echo", "{}", "2").await;
    let (state, code, shown) = outcome(&b).await;
    assert_eq!(state, "failed", "{shown}");
    let code = code.unwrap_or_default();
    assert!(!code.is_empty() && shown.contains(&code), "{shown}");
    assert!(shown.contains("expired"), "{shown}");
    b.screenshot("console-node-call-expired.png").await;
    fits_a_phone(
        &b,
        &["#call-result [data-code]"],
        "console-node-call-expired-phone.png",
    )
    .await;

    // Arguments that are not JSON: the page again, the form as typed, the reason above.
    call(&b, "node:a", "echo", "{\"reading\": ", "").await;
    b.wait_for("the refusal", 20, || async {
        let e = text_of(&b, "#form-error").await;
        (!e.is_empty()).then_some(e)
    })
    .await;
    let kept = b
        .js("return [document.getElementById('tool_name').value, document.getElementById('tool_args').value]")
        .await;
    assert_eq!(kept, serde_json::json!(["echo", "{\"reading\": "]));
    assert!(text_of(&b, "#form-error").await.contains("not JSON"));
    fits_a_phone(
        &b,
        &["#form-error", "#tool_args"],
        "console-node-call-refused-phone.png",
    )
    .await;
    // The same for a command's body.
    for (id, v) in [("#command_type", "setpoint"), ("#body", "{not json")] {
        let el = c.find(Css(id)).await.unwrap();
        el.clear().await.unwrap();
        el.send_keys(v).await.unwrap();
    }
    c.find(Css(r#"form[action$="/commands"] button[type=submit]"#))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    b.wait_for("the command form sent back", 20, || async {
        let kept = b
            .js("var e = document.getElementById('form-error'); return e && e.textContent.indexOf('body is not JSON') >= 0 ? document.getElementById('body').value : null")
            .await;
        kept.as_str().map(str::to_string)
    })
    .await;
    assert_eq!(
        b.js("return [document.getElementById('command_type').value, document.getElementById('body').value]")
            .await,
        serde_json::json!(["setpoint", "{not json"])
    );
    b.close().await;
}

/// Retiring asks for the node id typed again (the button stays disabled until then, and
/// the gateway refuses a form without it), looks destructive, and the audit entry names
/// the session's token subject.
#[tokio::test(flavor = "multi_thread")]
async fn in_a_browser_retiring_needs_the_node_id_typed_and_records_who() {
    let Some(b) = browser::start("console: retiring").await else {
        return;
    };
    let (gw_home, _a_home, _b_home, gwd, _admin) = fleet(2);
    let o = gw_home.cli(&[
        "token",
        "issue",
        "--aud",
        "gateway:main",
        "--ttl",
        "1h",
        "--scope",
        "admin",
        "--sub",
        "alice@site-3",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let alice = String::from_utf8(o.stdout).unwrap().trim().to_string();

    // Without the typed id the gateway refuses, whatever the browser did.
    let (_, s) = sign_in(&gwd, &alice).await;
    let s = s.expect("a session");
    let csrf = s.csrf().await;
    let r = s
        .post(
            "/ui/nodes/node:b/retire",
            Some(&s.origin),
            &[("csrf", &csrf)],
        )
        .await;
    assert_eq!(r.status(), 400);
    let page = r.text().await.unwrap();
    assert!(page.contains("type the node id"), "{page}");
    assert!(
        String::from_utf8_lossy(&gw_home.cli(&["nodes", "--json"]).stdout).contains("node:b"),
        "not retired"
    );

    b.sign_in(&gwd.url(""), &alice).await;
    let c = &b.client;
    c.goto(&gwd.url("/ui/nodes/node:b")).await.unwrap();
    b.wait_for_page("/ui/nodes/node:b").await;
    let disabled = || async {
        b.js("return document.getElementById('retire-button').disabled")
            .await
    };
    assert_eq!(disabled().await, true, "disabled until the id is typed");
    let bg = b
        .js("return getComputedStyle(document.getElementById('retire-button')).backgroundColor")
        .await;
    let send_bg = b
        .js("return getComputedStyle(document.querySelector('form[action$=\"/commands\"] button')).backgroundColor")
        .await;
    assert_ne!(bg, send_bg, "retiring looks unlike the other buttons");
    assert_eq!(bg, "rgb(207, 34, 46)", "retiring is red");
    let confirm = c.find(Css("#retire-confirm")).await.unwrap();
    confirm.send_keys("node:a").await.unwrap();
    assert_eq!(disabled().await, true, "another node's id does not confirm");
    confirm.clear().await.unwrap();
    confirm.send_keys("node:b").await.unwrap();
    assert_eq!(disabled().await, false);
    b.js("document.getElementById('retire').scrollIntoView(); return 1")
        .await;
    b.screenshot("console-node-retire.png").await;
    fits_a_phone(
        &b,
        &["#retire-confirm", "#retire-button"],
        "console-node-retire-phone.png",
    )
    .await;
    b.js("document.getElementById('retire').scrollIntoView(); return 1")
        .await;
    c.find(Css("#retire-button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    b.wait_for("the retirement's notice", 20, || async {
        let html = c.source().await.ok()?;
        html.contains("node:b is retired by alice@site-3")
            .then_some(())
    })
    .await;
    let audit = gw_home.cli(&["audit", "export", "--jsonl"]);
    let entry: Value = String::from_utf8_lossy(&audit.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["event"] == "revoke")
        .unwrap_or_else(|| panic!("no revoke entry: {}", text(&audit)));
    assert_eq!(entry["actor"], "alice@site-3", "{entry}");
    b.close().await;
}

/// A session whose token is revoked while its page is open ends, and the sign-in page
/// it lands on says why.
#[tokio::test(flavor = "multi_thread")]
async fn in_a_browser_a_revoked_session_is_told_why_it_ended() {
    let Some(b) = browser::start("console: revoked session").await else {
        return;
    };
    let (gw_home, _a, _b, gwd, admin) = fleet(2);
    let read = gw_home.token("gateway:main", &["read"], "1h");
    b.sign_in(&gwd.url(""), &read).await;
    b.wait_for("the live stream", 20, || async {
        (b.js("return document.getElementById('live').textContent")
            .await
            == "live")
            .then_some(())
    })
    .await;
    let jti = outpost::token::inspect(&read).unwrap().0.jti;
    let r = http()
        .post(gwd.url("/v1/revocations"))
        .bearer_auth(&admin)
        .json(&serde_json::json!({ "jti": jti }))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    b.wait_for("the sign-in page", 30, || async {
        let u = b.client.current_url().await.ok()?;
        (u.path() == "/ui/login").then_some(())
    })
    .await;
    b.wait_for_page("/ui/login").await;
    let why = text_of(&b, "#session-ended").await;
    assert!(why.contains("revoked"), "the reason: {why:?}");
    b.screenshot("console-login-revoked.png").await;
    fits_a_phone(&b, &["#session-ended"], "console-login-revoked-phone.png").await;
    b.close().await;
}

/// A node's page keeps its facts live too: a command queued for it (by the API, while
/// the page is open) shows in "Queued", and its expiry takes it out again, without a
/// reload, as the queue table below does.
#[tokio::test(flavor = "multi_thread")]
async fn in_a_browser_a_nodes_facts_follow_its_queue() {
    let Some(b) = browser::start("console: node facts live").await else {
        return;
    };
    let (_gw_home, _a, _b, gwd, admin) = fleet(2);
    b.sign_in(&gwd.url(""), &admin).await;
    b.client.goto(&gwd.url("/ui/nodes/node:b")).await.unwrap();
    b.wait_for_page("/ui/nodes/node:b").await;
    b.wait_for("the live stream", 20, || async {
        (b.js("return document.getElementById('live').textContent")
            .await
            == "live")
            .then_some(())
    })
    .await;
    b.js("window.__outpostNoReload = 1; return 1").await;
    let queued = || async {
        b.js("return document.querySelector('#node-summary [data-fact=queued], dl.facts dd:nth-of-type(5)').textContent")
            .await
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(queued().await, "0");
    let r = http()
        .post(gwd.url("/v1/commands"))
        .bearer_auth(&admin)
        .json(
            &serde_json::json!({"target": {"node_id": "node:b"}, "command_type": "setpoint",
                                  "body": {"v": 1}, "ttl_s": 3}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    b.wait_for("Queued to say 1", 10, || async {
        queued().await.starts_with("1,").then_some(())
    })
    .await;
    b.wait_for("Queued back to 0 after the expiry", 30, || async {
        (queued().await == "0").then_some(())
    })
    .await;
    assert_eq!(b.js("return window.__outpostNoReload || 0").await, 1);
    b.close().await;
}
