//! A real headless chromium driven over WebDriver (Debian's `chromium` and
//! `chromium-driver`; nothing downloads a browser): `chromedriver` started on a free
//! loopback port in its own process group, one chromium session with a throwaway
//! profile and every background network feature off (a machine without internet
//! otherwise hangs on them).
//!
//! Without chromedriver a test says `SKIPPED …` and passes, unless
//! `OUTPOST_TEST_BROWSER_REQUIRE=1` (CI), which fails instead.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder};
use serde_json::{json, Value};

/// The flags every session gets (see the module docs).
pub const CHROMIUM_FLAGS: [&str; 9] = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
];

fn find(candidates: &[&str]) -> Option<PathBuf> {
    candidates.iter().map(PathBuf::from).find(|p| p.is_file())
}

/// chromedriver and the chromium binary, or why not.
fn binaries() -> Result<(PathBuf, PathBuf), String> {
    let driver = std::env::var_os("OUTPOST_TEST_CHROMEDRIVER")
        .map(PathBuf::from)
        .or_else(|| find(&["/usr/bin/chromedriver"]))
        .ok_or("no /usr/bin/chromedriver (apt-get install chromium chromium-driver)")?;
    // The binary itself, not Debian's /usr/bin/chromium wrapper script.
    let chromium = find(&["/usr/lib/chromium/chromium", "/usr/bin/chromium"])
        .ok_or("no chromium (apt-get install chromium)")?;
    Ok((driver, chromium))
}

pub struct Browser {
    pub client: Client,
    driver: Child,
    _profile: tempfile::TempDir,
}

/// A browser session, or `None` after printing why the test is skipped.
pub async fn start(what: &str) -> Option<Browser> {
    let (driver_bin, chromium) = match binaries() {
        Ok(b) => b,
        Err(why) => {
            if std::env::var_os("OUTPOST_TEST_BROWSER_REQUIRE").is_some_and(|v| v == "1") {
                panic!("OUTPOST_TEST_BROWSER_REQUIRE=1: {why}");
            }
            crate::harness::skipped(what, &why);
            return None;
        }
    };
    Some(launch(&driver_bin, &chromium).await)
}

async fn launch(driver_bin: &Path, chromium: &Path) -> Browser {
    use std::os::unix::process::CommandExt;
    let port = crate::harness::free_port();
    let driver = Command::new(driver_bin)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("spawn chromedriver");
    let profile = tempfile::tempdir().unwrap();
    let mut args: Vec<String> = CHROMIUM_FLAGS.iter().map(|s| s.to_string()).collect();
    args.push(format!("--user-data-dir={}", profile.path().display()));
    args.push("--window-size=1280,900".into());
    let mut caps = serde_json::Map::new();
    caps.insert("browserName".into(), json!("chrome"));
    caps.insert(
        "goog:chromeOptions".into(),
        json!({ "binary": chromium, "args": args }),
    );
    let url = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let client = loop {
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        match ClientBuilder::new(connector)
            .capabilities(caps.clone())
            .connect(&url)
            .await
        {
            Ok(c) => break c,
            Err(e) => {
                assert!(
                    Instant::now() < deadline,
                    "no WebDriver session at {url}: {e}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    Browser {
        client,
        driver,
        _profile: profile,
    }
}

impl Browser {
    /// The value of `attr` on the first element matching `css`, if any.
    pub async fn attr(&self, css: &str, attr: &str) -> Option<String> {
        let el = self.client.find(fantoccini::Locator::Css(css)).await.ok()?;
        el.attr(attr).await.ok().flatten()
    }

    /// Poll `f` until it returns `Some` (deadline: `secs`).
    pub async fn wait_for<T, F, Fut>(&self, what: &str, secs: u64, mut f: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(v) = f().await {
                return v;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Wait until the browser shows `path` and that document has finished loading (a
    /// click does not wait for the navigation it starts).
    pub async fn wait_for_page(&self, path: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let url = self.client.current_url().await.ok();
            let state = self
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
                Instant::now() < deadline,
                "timed out waiting for {path}: at {url:?}, readyState {state:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Click `css` and wait for the page it loads at `path`, also when that is the page
    /// already shown (a form that posts back to its own page): the old document is
    /// marked first, and only an unmarked, loaded document at `path` ends the wait.
    pub async fn click_to(&self, css: &str, path: &str) {
        self.js("window.__outpostOld = true; return null").await;
        let el = self
            .client
            .find(fantoccini::Locator::Css(css))
            .await
            .unwrap();
        el.click().await.unwrap();
        self.wait_for(&format!("a new document at {path}"), 20, || async {
            let fresh = self
                .client
                .execute("return window.__outpostOld !== true", vec![])
                .await
                .ok()?;
            (fresh == Value::Bool(true)).then_some(())
        })
        .await;
        self.wait_for_page(path).await;
    }

    /// Run `script` in the page and return its value.
    pub async fn js(&self, script: &str) -> Value {
        self.client.execute(script, vec![]).await.unwrap()
    }

    /// Save a PNG of the page to `$OUTPOST_CONSOLE_SCREENSHOTS/<name>` when that is set
    /// (docs/img/console-*.png are the ones of a run).
    pub async fn screenshot(&self, name: &str) {
        let Some(dir) = std::env::var_os("OUTPOST_CONSOLE_SCREENSHOTS") else {
            return;
        };
        let png = self.client.screenshot().await.unwrap();
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(Path::new(&dir).join(name), png).unwrap();
    }

    /// Sign in to the console at `base` (the gateway's URL) with `token` and wait for
    /// the fleet page.
    pub async fn sign_in(&self, base: &str, token: &str) {
        use fantoccini::Locator::Css;
        let c = &self.client;
        c.goto(&format!("{base}/ui/login")).await.unwrap();
        c.find(Css("#token"))
            .await
            .unwrap()
            .send_keys(token)
            .await
            .unwrap();
        c.find(Css("form button[type=submit]"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        self.wait_for_page("/ui").await;
    }

    pub async fn close(self) {
        let _ = self.client.clone().close().await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // The whole group: chromedriver and the chromium it started.
        // SAFETY: kill(2) on the process group of a child this struct spawned.
        unsafe {
            libc::kill(-(self.driver.id() as i32), libc::SIGKILL);
        }
        let _ = self.driver.wait();
    }
}
