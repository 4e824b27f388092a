//! The audit log seen from outside: exported entries and the signed checkpoint verify
//! with an independent RFC 6962 / C2SP signed-note implementation written here from the
//! specs (not the daemon's code), and altering, removing or reordering one stored entry
//! makes `outpost audit verify` fail.

use base64::Engine as _;
use ed25519_dalek::Verifier;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::harness::{http, text, Home};

/// RFC 6962 §2.1 MTH, straight from the definition.
fn mth(leaves: &[Vec<u8>]) -> [u8; 32] {
    match leaves.len() {
        0 => Sha256::digest([]).into(),
        1 => {
            let mut h = Sha256::new();
            h.update([0u8]);
            h.update(&leaves[0]);
            h.finalize().into()
        }
        n => {
            let mut k = 1;
            while k * 2 < n {
                k *= 2;
            }
            let mut h = Sha256::new();
            h.update([1u8]);
            h.update(mth(&leaves[..k]));
            h.update(mth(&leaves[k..]));
            h.finalize().into()
        }
    }
}

fn stored_store(home: &Home) -> std::path::PathBuf {
    home.data().join("store").join("store.sqlite3")
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn audit_export_and_checkpoint_verify_independently_and_tampering_is_caught() {
    let home = Home::init("node", "node:aud", "");
    let d = home.start();
    let tok = home.token("node:aud", &["tool:echo"], "10m");
    for i in 0..7 {
        let r = http()
            .post(d.url("/v1/tool_call"))
            .bearer_auth(&tok)
            .json(&json!({"tool_name": "echo", "tool_args": {"i": i}}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    // One refusal too.
    let r = http()
        .post(d.url("/v1/tool_call"))
        .json(&json!({"tool_name": "echo", "tool_args": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert!(d.stop().success());

    let cp = home.cli(&["audit", "checkpoint"]);
    assert!(cp.status.success(), "{}", text(&cp));
    let note = String::from_utf8(cp.stdout).unwrap();
    let export = home.cli(&["audit", "export", "--jsonl"]);
    assert!(export.status.success(), "{}", text(&export));
    let lines: Vec<Vec<u8>> = export
        .stdout
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| l.to_vec())
        .collect();
    assert_eq!(lines.len(), 8);
    for (i, l) in lines.iter().enumerate() {
        let v: Value = serde_json::from_slice(l).unwrap();
        assert_eq!(v["index"], i as u64);
        // Canonical JSON: keys sorted, no whitespace; raw args never stored.
        assert_eq!(
            serde_json::to_vec(&v).unwrap(),
            *l,
            "not canonical: {}",
            String::from_utf8_lossy(l)
        );
        assert!(
            !String::from_utf8_lossy(l).contains("\"i\":"),
            "raw args leaked"
        );
    }

    // The signed note: "origin\nsize\nroot\n\n— name base64(keyid4‖sig)\n".
    let (body, sigs) = note.split_once("\n\n").unwrap();
    let body = format!("{body}\n");
    let mut body_lines = body.lines();
    assert_eq!(body_lines.next(), Some("outpost/node:aud"));
    assert_eq!(body_lines.next(), Some("8"));
    let root_b64 = body_lines.next().unwrap();
    let root = base64::engine::general_purpose::STANDARD
        .decode(root_b64)
        .unwrap();
    assert_eq!(
        root,
        mth(&lines).to_vec(),
        "checkpoint root ≠ independent RFC 6962 root"
    );

    let identity: Value = serde_json::from_str(&home.identity_json()).unwrap();
    let pk_bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(identity["sign_pk"].as_str().unwrap())
        .unwrap();
    let pk = ed25519_dalek::VerifyingKey::from_bytes(&pk_bytes.try_into().unwrap()).unwrap();
    let sig_line = sigs.lines().next().unwrap();
    let rest = sig_line
        .strip_prefix("— outpost/node:aud ")
        .expect(sig_line);
    let blob = base64::engine::general_purpose::STANDARD
        .decode(rest)
        .unwrap();
    let mut kid = Sha256::new();
    kid.update(b"outpost/node:aud\n\x01");
    kid.update(pk.as_bytes());
    assert_eq!(&blob[..4], &kid.finalize()[..4], "key id");
    let sig = ed25519_dalek::Signature::from_slice(&blob[4..]).unwrap();
    pk.verify(body.as_bytes(), &sig)
        .expect("checkpoint signature");

    let ok = home.cli(&["audit", "verify"]);
    assert!(ok.status.success(), "{}", text(&ok));

    // Tamper with a copy of the pristine store each time.
    let store_dir = home.data().join("store");
    let pristine = home.dir.path().join("pristine");
    copy_dir(&store_dir, &pristine);
    type Tamper<'a> = (&'a str, &'a dyn Fn(&rusqlite::Connection));
    let tampers: [Tamper; 3] = [
        ("altered", &|c| {
            let mut v: Value = serde_json::from_slice(&lines[2]).unwrap();
            v["outcome"] = json!("refused");
            c.execute(
                "UPDATE t14 SET v = ?1 WHERE k = ?2",
                rusqlite::params![serde_json::to_vec(&v).unwrap(), 2u64.to_be_bytes().to_vec()],
            )
            .unwrap();
        }),
        ("removed", &|c| {
            c.execute(
                "DELETE FROM t14 WHERE k = ?1",
                rusqlite::params![5u64.to_be_bytes().to_vec()],
            )
            .unwrap();
        }),
        ("reordered", &|c| {
            for (k, l) in [(1u64, &lines[3]), (3u64, &lines[1])] {
                c.execute(
                    "UPDATE t14 SET v = ?1 WHERE k = ?2",
                    rusqlite::params![l.clone(), k.to_be_bytes().to_vec()],
                )
                .unwrap();
            }
        }),
    ];
    for (name, tamper) in tampers {
        std::fs::remove_dir_all(&store_dir).unwrap();
        copy_dir(&pristine, &store_dir);
        {
            let c = rusqlite::Connection::open(stored_store(&home)).unwrap();
            tamper(&c);
        }
        let out = home.cli(&["audit", "verify"]);
        assert!(
            !out.status.success(),
            "{name}: verify passed on a tampered log\n{}",
            text(&out)
        );
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("FAIL"),
            "{name}: {}",
            text(&out)
        );
    }
}
