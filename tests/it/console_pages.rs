//! Moving around the console in a real headless chromium for a while: every page opens
//! the live event stream, and a browser allows only 6 connections per host over
//! HTTP/1.1, so a page kept in the back/forward cache must not keep its stream open
//! (docs/CONSOLE.md, "What each page shows").

use std::time::{Duration, Instant};

use fantoccini::Locator::Css;

use crate::browser::{self, Browser};
use crate::harness::{gateway_and_node, pair};

/// The longest one page change may take.
const PAGE_S: u64 = 5;

/// Wait for `path` to be shown and loaded, within [`PAGE_S`].
async fn arrived(b: &Browser, step: usize, what: &str, path: &str) {
    let t0 = Instant::now();
    loop {
        let url = b.client.current_url().await.ok();
        let state = b
            .client
            .execute("return document.readyState", vec![])
            .await
            .ok();
        if url.as_ref().is_some_and(|u| u.path() == path)
            && state.as_ref().is_some_and(|s| s == "complete")
        {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(PAGE_S),
            "page {step} ({what}) did not load within {PAGE_S} s: at {url:?}, readyState {state:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Click the element `css` finds. The page may replace it in between (the table is
/// fetched again when a page is shown from history): then find it again.
async fn click(b: &Browser, css: &str) {
    let t0 = Instant::now();
    loop {
        let el = b
            .client
            .find(Css(css))
            .await
            .unwrap_or_else(|e| panic!("no {css}: {e}"));
        match el.click().await {
            Ok(()) => return,
            Err(e) if e.to_string().contains("stale element") => {
                assert!(t0.elapsed() < Duration::from_secs(PAGE_S), "{css}: {e}");
            }
            Err(e) => panic!("clicking {css} stalled: {e}"),
        }
    }
}

/// Fleet, node, back, forward (12 page changes), sign-out and sign-in again, three
/// times: 42 page changes in one browser session, and none stalls.
#[tokio::test(flavor = "multi_thread")]
async fn in_a_browser_forty_page_changes_never_stall() {
    let Some(b) = browser::start("console page changes").await else {
        return;
    };
    let (gw_home, a) = gateway_and_node("node:a", 2);
    pair(&gw_home, &a);
    let gw = gw_home.start();
    let admin = gw_home.token("gateway:main", &["admin"], "1h");
    let c = &b.client;
    // A stalled navigation must fail the test, not hang WebDriver for minutes.
    c.update_timeouts(fantoccini::wd::TimeoutConfiguration::new(
        Some(Duration::from_secs(10)),
        Some(Duration::from_secs(10)),
        Some(Duration::ZERO),
    ))
    .await
    .unwrap();
    b.sign_in(&gw.url(""), &admin).await;
    let node = "/ui/nodes/node:a";
    let mut step = 0;
    let mut next = |what: &str| {
        step += 1;
        eprintln!("page {step}: {what}");
        step
    };
    for _ in 0..3 {
        // More page changes in one session than a browser has connections per host.
        for _ in 0..3 {
            click(&b, r#"tr[data-node-id="node:a"] a"#).await;
            arrived(&b, next("node"), "node", node).await;
            click(&b, "a.brand").await;
            arrived(&b, next("fleet"), "fleet", "/ui").await;
            let _ = c.back().await;
            arrived(&b, next("back"), "back to the node", node).await;
            live(&b, "the node page shown again").await;
            let _ = c.forward().await;
            arrived(&b, next("forward"), "forward to the fleet", "/ui").await;
        }
        click(&b, "header form button[type=submit]").await;
        arrived(&b, next("sign-out"), "sign-out", "/ui/login").await;
        c.find(Css("#token"))
            .await
            .unwrap()
            .send_keys(&admin)
            .await
            .unwrap();
        click(&b, "form button[type=submit]").await;
        arrived(&b, next("sign-in"), "sign-in", "/ui").await;
    }
    assert!(step >= 40);
    live(&b, "the last page").await;
    b.close().await;
}

/// The page shown follows the event stream (a page restored from the back/forward
/// cache opens it again).
async fn live(b: &Browser, what: &str) {
    b.wait_for(&format!("{what}: the live stream"), PAGE_S, || async {
        (b.js("return document.getElementById('live').textContent")
            .await
            == "live")
            .then_some(())
    })
    .await;
}
