//! `OUTPOST_FLEET_ENROLL=token`: every simulated device enrolls itself at once with one
//! enrollment token (PROTOCOL §15), as a site of freshly flashed devices does when its
//! power comes on: each asks `GET /v1/enroll` for the gateway's document and time, seals
//! the token to it and posts `POST /v1/enroll`, and retries a throttled or busy answer
//! as the real node does (`outpost::sync::enroll::retry_wait`: a backoff doubling from
//! 1 s to 60 s, each wait uniform up to it, never before `Retry-After`). Meanwhile an
//! operator loads the console's fleet page (`GET /ui`, one after another). Measured: the
//! time until every device is enrolled, every answer by status, and the console's
//! latency during the burst.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use outpost::enroll::{Hello, Request, Sealed, PAYLOAD_TYPE};
use outpost::envelope::{b64_encode, seal, Keys, SealParams};
use rand::RngCore;
use reqwest::header::{COOKIE, ORIGIN, SET_COOKIE};

/// What the burst measured.
pub struct Burst {
    pub devices: usize,
    pub enrolled: usize,
    pub took_s: f64,
    /// Each answer of `POST /v1/enroll` and `GET /v1/enroll` by status (`0`: no answer:
    /// the connection failed), with the error code for a refusal.
    pub answers: BTreeMap<String, u64>,
    /// Console loads during the burst, in µs, sorted.
    pub console_us: Vec<u64>,
    /// Console loads that did not answer 200.
    pub console_failed: u64,
}

/// One device: its id and keys.
pub struct Device<'a> {
    pub id: &'a str,
    pub keys: &'a Keys,
}

const RETRY_MIN: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(60);

/// Enroll every device at `urls` (round-robin) with `token`, all at once, while the
/// console is loaded with `admin` (an empty `admin`: no console loads).
///
/// The devices and the console's probe each run on a runtime and OS thread of their
/// own, and neither on the caller's: the devices seal in bursts (hundreds of ready
/// futures polled in one task), which would otherwise hold up, on a shared worker,
/// whatever the caller measures meanwhile, and the probe itself. The kernel shares
/// the cores between the threads as it would between separate machines' loads.
pub fn run(urls: &[String], devices: &[Device<'_>], token: &str, admin: &str) -> Burst {
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    };
    let done = tokio_util::sync::CancellationToken::new();
    std::thread::scope(|s| {
        let console = s.spawn(|| {
            runtime().block_on(console_loads(
                urls[0].clone(),
                admin.to_string(),
                done.clone(),
            ))
        });
        let burst = s
            .spawn(|| runtime().block_on(burst(urls, devices, token, done.clone())))
            .join()
            .unwrap();
        done.cancel();
        let (mut console_us, console_failed) = console.join().unwrap();
        console_us.sort_unstable();
        Burst {
            console_us,
            console_failed,
            ..burst
        }
    })
}

/// Every device at once until each is enrolled or refused for good; `done` after it.
async fn burst(
    urls: &[String],
    devices: &[Device<'_>],
    token: &str,
    done: tokio_util::sync::CancellationToken,
) -> Burst {
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let answers = Arc::new(Mutex::new(BTreeMap::new()));
    let t = Instant::now();
    let n = devices.len();
    let progress = tokio::spawn(progress(answers.clone(), n, t, done.clone()));
    // All at once, as one site's devices power on together.
    let outcomes = futures_util::future::join_all(
        devices
            .iter()
            .enumerate()
            .map(|(i, d)| device(&http, &urls[i % urls.len()], d, token, &answers)),
    )
    .await;
    let enrolled = outcomes.into_iter().filter(|ok| *ok).count();
    let took_s = t.elapsed().as_secs_f64();
    done.cancel();
    progress.await.unwrap();
    let answers = answers.lock().unwrap().clone();
    Burst {
        devices: n,
        enrolled,
        took_s,
        answers,
        console_us: Vec::new(),
        console_failed: 0,
    }
}

fn count(answers: &Mutex<BTreeMap<String, u64>>, key: String) {
    *answers.lock().unwrap().entry(key).or_insert(0) += 1;
}

/// One device's enrollment, retried as the node's enroller retries: true once enrolled.
/// Every 10 s until `done`: how many devices are enrolled (answers 200 so far), and
/// the 5xx answers among the rest, so a run stopped early still says how far it got.
async fn progress(
    answers: Arc<Mutex<BTreeMap<String, u64>>>,
    devices: usize,
    t: Instant,
    done: tokio_util::sync::CancellationToken,
) {
    loop {
        tokio::select! {
            _ = done.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(10)) => {}
        }
        let a = answers.lock().unwrap().clone();
        let of = |p: &dyn Fn(&str) -> bool| -> u64 {
            a.iter().filter(|(k, _)| p(k)).map(|(_, n)| n).sum()
        };
        let enrolled = of(&|k| k.starts_with("200"));
        let busy = of(&|k| k.starts_with('5'));
        eprintln!(
            "enroll: {:.0} s: {enrolled} of {devices} enrolled, {busy} answers 5xx so far",
            t.elapsed().as_secs_f64()
        );
    }
}

async fn device(
    http: &reqwest::Client,
    url: &str,
    d: &Device<'_>,
    token: &str,
    answers: &Mutex<BTreeMap<String, u64>>,
) -> bool {
    let mut backoff = RETRY_MIN;
    loop {
        let (status, code, retry_after) = attempt(http, url, d, token).await;
        count(answers, format!("{status} {code}"));
        match status {
            200 => return true,
            429 | 503 | 0 => {}
            s if s >= 500 => {}
            _ => return false,
        }
        let unit = f64::from(rand::thread_rng().next_u32()) / (f64::from(u32::MAX) + 1.0);
        tokio::time::sleep(outpost::sync::enroll::retry_wait(
            backoff,
            retry_after,
            unit,
        ))
        .await;
        backoff = (backoff * 2).min(RETRY_MAX);
    }
}

/// What ended an attempt: its status, error code and `Retry-After`.
type Outcome = (u16, String, Option<Duration>);

/// Hello, seal, post: how the step that ended the attempt answered.
async fn attempt(http: &reqwest::Client, url: &str, d: &Device<'_>, token: &str) -> Outcome {
    let mut nonce = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut nonce);
    let hello = match http
        .get(format!(
            "{url}/v1/enroll?node_id={}&nonce={}",
            d.id,
            b64_encode(&nonce)
        ))
        .send()
        .await
    {
        Ok(r) if r.status() == 200 => match r.json::<Hello>().await {
            Ok(h) => h,
            Err(_) => return (0, "hello_unreadable".into(), None),
        },
        Ok(r) => return answered(r).await,
        Err(_) => return (0, "connect".into(), None),
    };
    let now = hello.time.now_ms;
    let params = SealParams {
        message_id: format!("enroll-{}", uuid::Uuid::now_v7().simple()),
        created_at_ms: now,
        expires_at_ms: now + 600_000,
        payload_type: PAYLOAD_TYPE.into(),
        priority: 0,
    };
    let sealed = serde_json::to_vec(&Sealed {
        token: token.to_string(),
        device: None,
    })
    .unwrap();
    let env = seal(
        d.keys,
        d.id,
        &hello.gateway,
        &params,
        &sealed,
        &mut rand::rngs::OsRng,
    )
    .unwrap();
    let doc =
        outpost::envelope::IdentityDocument::new(d.id, "node", d.keys, "2026-01-01T00:00:00Z");
    let body = serde_json::to_vec(&Request {
        node: doc,
        envelope: serde_json::to_value(&env).unwrap(),
    })
    .unwrap();
    match http
        .post(format!("{url}/v1/enroll"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
    {
        Ok(r) => answered(r).await,
        Err(_) => (0, "connect".into(), None),
    }
}

async fn answered(r: reqwest::Response) -> Outcome {
    let status = r.status().as_u16();
    if status < 300 {
        return (status, String::new(), None);
    }
    let retry_after = r
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok()?.trim().parse().ok())
        .map(Duration::from_secs);
    // The error answer's code, typed as the node reads it; `-` for a body that is not one.
    let code = r
        .json::<outpost::sync::wire::ErrorAnswer>()
        .await
        .map_or_else(|_| "-".to_string(), |e| e.error.code);
    (status, code, retry_after)
}

/// Sign in to the console with `admin` and load the fleet page again and again until
/// `done`: each load's time in µs, and how many did not answer 200.
async fn console_loads(
    url: String,
    admin: String,
    done: tokio_util::sync::CancellationToken,
) -> (Vec<u64>, u64) {
    let c = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    if admin.is_empty() {
        return (Vec::new(), 0);
    }
    let cookie = sign_in(&c, &url, &admin).await;
    let (mut took, mut failed) = (Vec::new(), 0);
    while !done.is_cancelled() {
        let t = Instant::now();
        let ok = c
            .get(format!("{url}/ui"))
            .header(COOKIE, &cookie)
            .send()
            .await
            .map(|r| r.status() == 200);
        took.push(t.elapsed().as_micros() as u64);
        if !matches!(ok, Ok(true)) {
            failed += 1;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (took, failed)
}

/// The console's sign-in form (docs/CONSOLE.md): the session cookie.
async fn sign_in(c: &reqwest::Client, url: &str, admin: &str) -> String {
    let cookie_of = |r: &reqwest::Response, name: &str| {
        r.headers()
            .get_all(SET_COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find(|v| v.starts_with(&format!("{name}=")))
            .map(|v| v.split(';').next().unwrap().to_string())
    };
    let r = c.get(format!("{url}/ui/login")).send().await.unwrap();
    let nonce_cookie = cookie_of(&r, "outpost_login").expect("a sign-in nonce cookie");
    let html = r.text().await.unwrap();
    let marker = "name=\"login_csrf\" value=\"";
    let at = html.find(marker).expect("the sign-in form's nonce") + marker.len();
    let nonce = &html[at..at + html[at..].find('"').unwrap()];
    let r = c
        .post(format!("{url}/ui/login"))
        .header(COOKIE, &nonce_cookie)
        .header(ORIGIN, url)
        .form(&[("token", admin), ("login_csrf", nonce)])
        .send()
        .await
        .unwrap();
    cookie_of(&r, "outpost_session").expect("signed in to the console")
}
