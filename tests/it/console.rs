//! The operator's console (`/ui`, docs/CONSOLE.md) against a real gateway process: in
//! a real headless chromium (sign-in, the fleet's rows and their liveness, a node
//! coming online without a reload, a command sent from a node's page), and with a
//! plain HTTP client where the browser would hide what is checked (cookies, status
//! codes, forged forms).

use std::time::Duration;

use reqwest::header::{COOKIE, LOCATION, ORIGIN, SET_COOKIE};
use serde_json::Value;

use crate::browser;
use crate::harness::{gateway_and_node, http, pair, Daemon, Home};

/// A client that shows redirects instead of following them.
fn client() -> reqwest::Client {
    client_from(None)
}

/// [`client`], bound to `local` (a loopback alias such as 127.0.0.2) when given.
fn client_from(local: Option<std::net::IpAddr>) -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .local_address(local)
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

fn set_cookie(r: &reqwest::Response, name: &str) -> Option<String> {
    r.headers()
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with(&format!("{name}=")))
        .map(str::to_string)
}

/// The value of `name="<field>" value="…"` in a page.
fn field(html: &str, name: &str) -> Option<String> {
    let at = html.find(&format!("name=\"{name}\" value=\""))? + name.len() + 15;
    Some(html[at..at + html[at..].find('"')?].to_string())
}

/// A console session over plain HTTP.
pub(crate) struct Session {
    base: String,
    pub(crate) origin: String,
    cookie: String,
}

/// Sign in with `token`: the answer, and the session when one was made.
pub(crate) async fn sign_in(gw: &Daemon, token: &str) -> (reqwest::Response, Option<Session>) {
    sign_in_from(gw, token, None).await
}

/// [`sign_in`] from the local address `local` (the gateway sees it as the client's).
pub(crate) async fn sign_in_from(
    gw: &Daemon,
    token: &str,
    local: Option<std::net::IpAddr>,
) -> (reqwest::Response, Option<Session>) {
    let c = client_from(local);
    let r = c.get(gw.url("/ui/login")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let nonce_cookie = set_cookie(&r, "outpost_login").expect("a sign-in nonce cookie");
    let nonce_cookie = nonce_cookie.split(';').next().unwrap().to_string();
    let html = r.text().await.unwrap();
    let nonce = field(&html, "login_csrf").expect("the nonce field");
    let origin = format!("http://{}", gw.addr);
    let r = c
        .post(gw.url("/ui/login"))
        .header(COOKIE, &nonce_cookie)
        .header(ORIGIN, &origin)
        .form(&[("token", token), ("login_csrf", &nonce)])
        .send()
        .await
        .unwrap();
    let s = set_cookie(&r, "outpost_session")
        .filter(|c| !c.starts_with("outpost_session=;"))
        .map(|c| Session {
            base: gw.url(""),
            origin,
            cookie: c.split(';').next().unwrap().to_string(),
        });
    (r, s)
}

impl Session {
    pub(crate) async fn get(&self, path: &str) -> reqwest::Response {
        client()
            .get(format!("{}{path}", self.base))
            .header(COOKIE, &self.cookie)
            .send()
            .await
            .unwrap()
    }

    /// The CSRF token of this session (from the fleet page's sign-out form).
    pub(crate) async fn csrf(&self) -> String {
        let html = self.get("/ui").await.text().await.unwrap();
        field(&html, "csrf").expect("a csrf field")
    }

    pub(crate) async fn post(
        &self,
        path: &str,
        origin: Option<&str>,
        form: &[(&str, &str)],
    ) -> reqwest::Response {
        let mut req = client()
            .post(format!("{}{path}", self.base))
            .header(COOKIE, &self.cookie)
            .form(form);
        if let Some(o) = origin {
            req = req.header(ORIGIN, o);
        }
        req.send().await.unwrap()
    }
}

/// A gateway with node `node:a` paired, a `node:b` enrolled but never started, and an
/// admin token. Returns (gateway home, node a home, node b home, gateway, admin token).
pub(crate) fn fleet(poll_wait_s: u64) -> (Home, Home, Home, Daemon, String) {
    let (gw_home, a) = gateway_and_node("node:a", poll_wait_s);
    pair(&gw_home, &a);
    let gw = gw_home.start();
    let b = Home::init(
        "node",
        "node:b",
        &format!(
            "[upstream]\nurl = \"http://{}\"\ngateway_id = \"gateway:main\"\npoll_wait_s = {poll_wait_s}\n",
            gw.addr
        ),
    );
    pair(&gw_home, &b);
    let admin = gw_home.token("gateway:main", &["admin"], "1h");
    // The running gateway reads the trust store again within about a second.
    crate::harness::wait_for("node:b enrolled", Duration::from_secs(20), || {
        let o = gw_home.cli(&["nodes", "--json"]);
        String::from_utf8_lossy(&o.stdout)
            .contains("node:b")
            .then_some(())
    });
    (gw_home, a, b, gw, admin)
}

async fn liveness_of(gw: &Daemon, token: &str, node: &str) -> Option<String> {
    let r = http()
        .get(gw.url("/v1/nodes"))
        .bearer_auth(token)
        .send()
        .await
        .ok()?;
    let v: Value = r.json().await.ok()?;
    v["nodes"]
        .as_array()?
        .iter()
        .find(|n| n["node_id"] == node)
        .and_then(|n| n["liveness"].as_str().map(str::to_string))
}

/// Signing in with an admin token shows every node with its liveness; a node that
/// starts while the page is open turns `online` in place (no reload); a command sent
/// from a node's page is queued through the same flow as `POST /v1/commands`.
#[tokio::test(flavor = "multi_thread")]
async fn in_a_browser_an_admin_sees_the_fleet_live_and_queues_a_command() {
    let Some(b) = browser::start("console browser test").await else {
        return;
    };
    let (_gw_home, a_home, b_home, gw, admin) = fleet(2);
    let _a = a_home.start();
    b.wait_for("node:a online", 30, || async {
        liveness_of(&gw, &admin, "node:a")
            .await
            .filter(|l| l == "online")
    })
    .await;
    let c = &b.client;
    use fantoccini::Locator::Css;

    // No session: the page sends the browser to the sign-in.
    c.goto(&gw.url("/ui")).await.unwrap();
    assert_eq!(c.current_url().await.unwrap().path(), "/ui/login");

    // A wrong token: the form says so, and no session cookie is set.
    c.find(Css("#token"))
        .await
        .unwrap()
        .send_keys("v4.public.not-a-token")
        .await
        .unwrap();
    c.find(Css("form button[type=submit]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let err = match c.wait().for_element(Css("#login-error")).await {
        Ok(e) => e,
        Err(e) => panic!(
            "no sign-in error shown ({e}): {} {}",
            c.current_url().await.unwrap(),
            c.source().await.unwrap_or_default()
        ),
    };
    assert!(err.text().await.unwrap().contains("not accepted"));
    assert!(
        c.get_named_cookie("outpost_session").await.is_err(),
        "no session cookie"
    );

    // The admin token.
    c.find(Css("#token"))
        .await
        .unwrap()
        .send_keys(&admin)
        .await
        .unwrap();
    c.find(Css("form button[type=submit]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    b.wait_for_page("/ui").await;
    assert!(c.get_named_cookie("outpost_session").await.is_ok());
    let rows = c.find_all(Css("tr[data-node-id]")).await.unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(
        b.attr(r#"tr[data-node-id="node:a"]"#, "data-liveness")
            .await
            .as_deref(),
        Some("online")
    );
    assert_eq!(
        b.attr(r#"tr[data-node-id="node:b"]"#, "data-liveness")
            .await
            .as_deref(),
        Some("never")
    );

    // node:b starts with the page open: its row turns online without a reload.
    b.js("window.__outpostNoReload = 1; return 1").await;
    b.wait_for("the live stream", 20, || async {
        (b.js("return document.getElementById('live').textContent")
            .await
            == "live")
            .then_some(())
    })
    .await;
    let _b = b_home.start();
    b.wait_for("node:b's row online", 30, || async {
        (b.attr(r#"tr[data-node-id="node:b"]"#, "data-liveness")
            .await
            .as_deref()
            == Some("online"))
        .then_some(())
    })
    .await;
    assert_eq!(
        b.js("return window.__outpostNoReload || 0").await,
        1,
        "the page was reloaded"
    );
    b.screenshot("console-fleet.png").await;
    // On a phone's width the page does not scroll sideways (only the table may, inside
    // its own box), and the less important columns fold away.
    c.set_window_size(390, 844).await.unwrap();
    let overflow = b
        .js("return document.documentElement.scrollWidth - document.documentElement.clientWidth")
        .await;
    assert_eq!(overflow, 0, "the page is wider than a phone's screen");
    let since_shown = b
        .js("return getComputedStyle(document.querySelector('td.wide')).display")
        .await;
    assert_eq!(since_shown, "none");
    b.screenshot("console-fleet-phone.png").await;
    c.set_window_size(1280, 900).await.unwrap();
    // Typing in the filter box narrows the rows shown, without asking the server.
    c.find(Css("#filter"))
        .await
        .unwrap()
        .send_keys("node:b")
        .await
        .unwrap();
    let shown = b
        .js("return Array.from(document.querySelectorAll('tr[data-node-id]')).filter(function (r) { return !r.hidden; }).map(function (r) { return r.getAttribute('data-node-id'); })")
        .await;
    assert_eq!(shown, serde_json::json!(["node:b"]));
    assert_eq!(b.js("return window.__outpostNoReload || 0").await, 1);
    b.js("var f = document.getElementById('filter'); f.value = ''; f.dispatchEvent(new Event('input')); return 1")
        .await;

    // A command from node:a's page.
    c.find(Css(r#"tr[data-node-id="node:a"] a"#))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    b.wait_for_page("/ui/nodes/node:a").await;
    c.find(Css("#command_type"))
        .await
        .unwrap()
        .send_keys("setpoint")
        .await
        .unwrap();
    c.find(Css("#body"))
        .await
        .unwrap()
        .send_keys(r#"{"value": 42}"#)
        .await
        .unwrap();
    c.find(Css("section.actions button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let sent = b
        .wait_for("the command's id", 20, || async {
            let url = c.current_url().await.ok()?;
            url.query_pairs()
                .find(|(k, _)| k == "sent")
                .map(|(_, v)| v.into_owned())
        })
        .await;
    b.wait_for_page("/ui/nodes/node:a").await;
    let r = http()
        .get(gw.url(&format!("/v1/messages/{sent}")))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "the command exists at the gateway");
    let m: Value = r.json().await.unwrap();
    assert_eq!(m["node_id"], "node:a", "{m}");
    // The node page lists its events live: the delivery of that command shows up.
    let mut shown = String::new();
    for _ in 0..300 {
        shown = c
            .find(Css("#node-events"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if shown.contains("delivered") && shown.contains(&sent) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let m: Value = http()
        .get(gw.url(&format!("/v1/messages/{sent}")))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ring = if shown.contains("delivered") {
        String::new()
    } else {
        let mut r = http()
            .get(gw.url("/v1/events"))
            .bearer_auth(&admin)
            .header("last-event-id", "1")
            .send()
            .await
            .unwrap();
        let mut buf = String::new();
        let _ = tokio::time::timeout(Duration::from_secs(2), async {
            while let Ok(Some(chunk)) = r.chunk().await {
                buf.push_str(&String::from_utf8_lossy(&chunk));
            }
        })
        .await;
        buf
    };
    assert!(
        shown.contains("delivered") && shown.contains(&sent),
        "the delivery of {sent} is not on the page ({m}): {shown}\nthe gateway's events: {ring}\n{}\n{}",
        c.source().await.unwrap_or_default(),
        gw.log_text()
            .lines()
            .filter(|l| l.contains(&sent) || l.contains("console"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    b.screenshot("console-node.png").await;
    b.close().await;
}

/// Without a session: pages redirect to the sign-in, fragments and the stream answer
/// 401 in the API's error shape; a wrong token sets no session cookie; sign-out deletes
/// the session itself (its cookie no longer works).
#[tokio::test(flavor = "multi_thread")]
async fn without_a_session_nothing_is_shown_and_sign_out_ends_the_session() {
    let home = Home::init("gateway", "gateway:main", "");
    let gw = home.start();
    let c = client();
    for page in ["/ui", "/ui/nodes/node:x"] {
        let r = c.get(gw.url(page)).send().await.unwrap();
        assert_eq!(r.status(), 303, "{page}");
        assert_eq!(r.headers()[LOCATION], "/ui/login");
        let csp = r.headers()["content-security-policy"].to_str().unwrap();
        assert!(csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"));
    }
    for fragment in ["/ui/fleet/rows", "/ui/nodes/node:x/queue", "/ui/events"] {
        let r = c.get(gw.url(fragment)).send().await.unwrap();
        assert_eq!(r.status(), 401, "{fragment}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["ok"], false);
        assert_eq!(v["error"]["code"], "unauthorized");
    }
    // A forged cookie is no session either.
    let r = c
        .get(gw.url("/ui"))
        .header(COOKIE, format!("outpost_session={}", "a".repeat(64)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);

    let (r, s) = sign_in(&gw, "v4.public.bogus").await;
    assert_eq!(r.status(), 401);
    assert!(s.is_none(), "no session cookie for a wrong token");
    assert!(r.text().await.unwrap().contains("not accepted"));
    // A token for another tool only (no read, no admin) makes no session either.
    let tool = home.token("gateway:main", &["tool:echo"], "1h");
    let (r, s) = sign_in(&gw, &tool).await;
    assert_eq!(r.status(), 403);
    assert!(s.is_none());

    let admin = home.token("gateway:main", &["admin"], "1h");
    let (r, s) = sign_in(&gw, &admin).await;
    assert_eq!(r.status(), 303);
    let s = s.expect("a session");
    let cookie_line = set_cookie(&r, "outpost_session").unwrap();
    for attr in ["HttpOnly", "SameSite=Strict", "Path=/ui"] {
        assert!(cookie_line.contains(attr), "{cookie_line}");
    }
    assert!(!cookie_line.contains("Secure"), "plain HTTP: {cookie_line}");
    assert!(!gw.log_text().contains(&admin), "the token is never logged");
    let r = s.get("/ui").await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-content-type-options"], "nosniff");
    // `same-origin`, not `no-referrer`: under that, browsers send `Origin: null`.
    assert_eq!(r.headers()["referrer-policy"], "same-origin");
    assert_eq!(s.get("/ui/fleet/rows").await.status(), 200);
    let csrf = s.csrf().await;
    let r = s
        .post("/ui/logout", Some(&s.origin), &[("csrf", &csrf)])
        .await;
    assert_eq!(r.status(), 303);
    assert_eq!(
        s.get("/ui").await.status(),
        303,
        "the old cookie names no session"
    );
    assert_eq!(s.get("/ui/fleet/rows").await.status(), 401);
}

/// Every POST needs this console's Origin and the session's CSRF token; a read-only
/// session can look but not act; revoking a token (through the console) ends the
/// sessions it signed in.
#[tokio::test(flavor = "multi_thread")]
async fn forms_need_origin_and_csrf_read_sessions_cannot_act_and_revocation_ends_sessions() {
    let (gw_home, a) = gateway_and_node("node:a", 2);
    pair(&gw_home, &a);
    let gw = gw_home.start();
    let admin = gw_home.token("gateway:main", &["admin"], "1h");
    let read = gw_home.token("gateway:main", &["read"], "1h");
    let (_, s) = sign_in(&gw, &admin).await;
    let s = s.expect("admin session");
    let csrf = s.csrf().await;
    let form = |jti: &'static str| vec![("csrf", csrf.clone()), ("jti", jti.to_string())];
    let post = |path: &'static str, origin: Option<String>, f: Vec<(&'static str, String)>| {
        let s = &s;
        async move {
            let f: Vec<(&str, &str)> = f.iter().map(|(k, v)| (*k, v.as_str())).collect();
            s.post(path, origin.as_deref(), &f).await
        }
    };
    // No CSRF token, a wrong one, a foreign Origin, no Origin: 403, nothing revoked.
    let r = post(
        "/ui/revocations",
        Some(s.origin.clone()),
        vec![("jti", "j-1".into())],
    )
    .await;
    assert_eq!(r.status(), 403);
    let wrong = vec![("csrf", "0".repeat(64)), ("jti", "j-1".into())];
    assert_eq!(
        post("/ui/revocations", Some(s.origin.clone()), wrong)
            .await
            .status(),
        403
    );
    let r = post(
        "/ui/revocations",
        Some("http://evil.example".into()),
        form("j-1"),
    )
    .await;
    assert_eq!(r.status(), 403);
    assert_eq!(
        post("/ui/revocations", None, form("j-1")).await.status(),
        403
    );
    let r = post(
        "/ui/nodes/node:a/commands",
        Some("http://evil.example".into()),
        vec![("csrf", csrf.clone()), ("command_type", "setpoint".into())],
    )
    .await;
    assert_eq!(r.status(), 403);

    // A read-only session: sees the fleet, no forms, and its POSTs are refused.
    let (_, r_s) = sign_in(&gw, &read).await;
    let r_s = r_s.expect("read session");
    let html = r_s.get("/ui/nodes/node:a").await.text().await.unwrap();
    assert!(html.contains("Read-only session"), "{html}");
    assert!(!html.contains("name=\"command_type\""));
    let r_csrf = r_s.csrf().await;
    let r = r_s
        .post(
            "/ui/nodes/node:a/commands",
            Some(&r_s.origin),
            &[("csrf", &r_csrf), ("command_type", "setpoint")],
        )
        .await;
    assert_eq!(r.status(), 403);
    assert!(r.text().await.unwrap().contains("read token"));
    let r = r_s
        .post(
            "/ui/revocations",
            Some(&r_s.origin),
            &[("csrf", &r_csrf), ("jti", "j-2")],
        )
        .await;
    assert_eq!(r.status(), 403);

    // The admin session queues a command (the same flow and answer as the JSON API)…
    let r = post(
        "/ui/nodes/node:a/commands",
        Some(s.origin.clone()),
        vec![
            ("csrf", csrf.clone()),
            ("command_type", "setpoint".into()),
            ("body", r#"{"value": 7}"#.into()),
            ("ttl_s", "600".into()),
        ],
    )
    .await;
    assert_eq!(r.status(), 303, "{}", r.text().await.unwrap_or_default());
    let loc = r.headers()[LOCATION].to_str().unwrap().to_string();
    let id = loc
        .split("sent=")
        .nth(1)
        .expect("the message id")
        .to_string();
    let m: Value = http()
        .get(gw.url(&format!("/v1/messages/{id}")))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(m["node_id"], "node:a", "{m}");
    // …refuses what the JSON API refuses, as a readable page with its status…
    let r = post(
        "/ui/nodes/node:nobody/commands",
        Some(s.origin.clone()),
        vec![("csrf", csrf.clone()), ("command_type", "setpoint".into())],
    )
    .await;
    assert_eq!(r.status(), 404);
    assert!(r.text().await.unwrap().contains("not an enrolled node"));
    let r = post(
        "/ui/nodes/node:a/commands",
        Some(s.origin.clone()),
        vec![
            ("csrf", csrf.clone()),
            ("command_type", "setpoint".into()),
            ("body", "{not json".into()),
        ],
    )
    .await;
    assert_eq!(r.status(), 400);

    // …and revokes the read token, which ends the read session at its next request.
    let jti = outpost::token::inspect(&read).unwrap().0.jti;
    let events = http()
        .get(gw.url("/v1/events"))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap();
    assert_eq!(events.status(), 200);
    let r = r_s.get("/ui").await;
    assert_eq!(r.status(), 200);
    let f = vec![("csrf", csrf.clone()), ("jti", jti.clone())];
    let r = post("/ui/revocations", Some(s.origin.clone()), f).await;
    assert_eq!(r.status(), 303);
    assert!(r.headers()[LOCATION]
        .to_str()
        .unwrap()
        .starts_with("/ui?revoked="));
    assert_eq!(
        r_s.get("/ui").await.status(),
        303,
        "a revoked token's session ends"
    );
    let (r, none) = sign_in(&gw, &read).await;
    assert!(none.is_none(), "{}", r.status());
    // The revocation left its event in the log.
    let mut events = events;
    let seen = tokio::time::timeout(Duration::from_secs(10), async {
        let mut buf = String::new();
        while let Some(chunk) = events.chunk().await.unwrap() {
            buf.push_str(&String::from_utf8_lossy(&chunk));
            if buf.contains("event: revoked") && buf.contains(&jti) {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(seen, Ok(true), "a revoked event naming the jti");
    // Repeating it is answered, not an error.
    let f = vec![("csrf", csrf.clone()), ("jti", jti.clone())];
    let r = post("/ui/revocations", Some(s.origin.clone()), f).await;
    assert!(r.headers()[LOCATION].to_str().unwrap().ends_with("&dup=1"));
}

/// Failed sign-ins are limited per address: past the burst a token that does not
/// verify is refused for a while (429, without saying why), but a good token from the
/// same address still signs in.
#[tokio::test(flavor = "multi_thread")]
async fn failed_sign_ins_are_rate_limited() {
    let home = Home::init("gateway", "gateway:main", "");
    let gw = home.start();
    let admin = home.token("gateway:main", &["admin"], "1h");
    let mut statuses = Vec::new();
    for _ in 0..12 {
        statuses.push(sign_in(&gw, "v4.public.wrong").await.0.status().as_u16());
    }
    assert_eq!(&statuses[..10], &[401; 10]);
    assert_eq!(&statuses[10..], &[429; 2]);
    let (r, s) = sign_in(&gw, &admin).await;
    assert_eq!(r.status(), 303, "{}", gw.log_text());
    assert!(s.is_some());
}

/// An admin calls a tool from a node's page: the call goes through the same flow as
/// `POST /v1/tool_call`, and its result arrives upstream.
#[tokio::test(flavor = "multi_thread")]
async fn an_admin_calls_a_tool_from_the_node_page() {
    let (_gw_home, a_home, _b_home, gw, admin) = fleet(2);
    let _a = a_home.start();
    let (_, s) = sign_in(&gw, &admin).await;
    let s = s.expect("an admin session");
    let page = s.get("/ui/nodes/node:a").await.text().await.unwrap();
    assert!(page.contains("/ui/nodes/node:a/tool_calls"), "{page}");
    let csrf = s.csrf().await;
    let r = s
        .post(
            "/ui/nodes/node:a/tool_calls",
            Some(&s.origin),
            &[
                ("csrf", csrf.as_str()),
                ("tool_name", "echo"),
                ("tool_args", r#"{"reading": 7}"#),
            ],
        )
        .await;
    assert_eq!(r.status(), 303);
    let to = r.headers()[LOCATION].to_str().unwrap().to_string();
    let id = to
        .split("call=")
        .nth(1)
        .and_then(|v| v.split('#').next())
        .expect("the message id")
        .to_string();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let v: Value = http()
            .get(gw.url(&format!("/v1/messages/{id}")))
            .bearer_auth(&admin)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if v["result"]["ok"] == true {
            assert_eq!(v["result"]["result"]["reading"], 7, "{v}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{v}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The page the browser is sent to follows that call.
    let page = s.get(&to).await.text().await.unwrap();
    assert!(
        page.contains(&format!("data-message-id=\"{id}\"")),
        "{page}"
    );
    // Arguments that are not JSON: a readable refusal, nothing queued.
    let r = s
        .post(
            "/ui/nodes/node:a/tool_calls",
            Some(&s.origin),
            &[
                ("csrf", csrf.as_str()),
                ("tool_name", "echo"),
                ("tool_args", "{"),
            ],
        )
        .await;
    assert_eq!(r.status(), 400);
}

/// In a real browser, without a reload: a node going away turns its badge from online,
/// a command that waited for it expires on its page, and the node coming back turns the
/// badge online again.
#[tokio::test(flavor = "multi_thread")]
async fn in_a_browser_a_node_goes_away_a_command_expires_and_it_comes_back() {
    let Some(b) = browser::start("console offline/expiry browser test").await else {
        return;
    };
    let (_gw_home, a_home, _b_home, gw, admin) = fleet(2);
    let a = a_home.start();
    b.wait_for("node:a online", 30, || async {
        liveness_of(&gw, &admin, "node:a")
            .await
            .filter(|l| l == "online")
    })
    .await;
    let c = &b.client;
    b.sign_in(&gw.url(""), &admin).await;
    c.goto(&gw.url("/ui/nodes/node:a")).await.unwrap();
    b.wait_for_page("/ui/nodes/node:a").await;
    b.js("window.__outpostNoReload = 1; return 1").await;
    let badge = || async { b.attr("#node-liveness", "data-liveness").await };
    assert_eq!(badge().await.as_deref(), Some("online"));

    // The site loses its uplink: after the online window (30 s) the badge changes.
    a.stop();
    b.wait_for("node:a no longer online", 60, || async {
        badge().await.filter(|l| l != "online")
    })
    .await;
    // A command with a 2 s TTL waits for it, and expires: its page says so, live.
    let r = http()
        .post(gw.url("/v1/commands"))
        .bearer_auth(&admin)
        .json(
            &serde_json::json!({"target": {"node_id": "node:a"}, "command_type": "setpoint",
                                  "body": {"v": 1}, "ttl_s": 2}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    b.wait_for("the expiry in the node's events", 30, || async {
        let text = b
            .js("return document.getElementById('node-events').textContent")
            .await;
        text.as_str()
            .filter(|t| t.contains("expired"))
            .map(str::to_string)
    })
    .await;
    // Back online.
    let _a = a_home.start();
    b.wait_for("node:a online again", 30, || async {
        badge().await.filter(|l| l == "online")
    })
    .await;
    assert_eq!(
        b.js("return window.__outpostNoReload || 0").await,
        1,
        "the page was reloaded"
    );
    b.close().await;
}
