//! Names without per-device config (issue 27: 3): nodes started from one config
//! template, with no `outpost init`, each name themselves from what their device has
//! (machine id, Raspberry Pi serial, a file; each device a sysroot of its own through
//! `$OUTPOST_SYSROOT`), create their key pair (0600) and identity at the first start,
//! and keep both across a restart.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

use crate::harness::{bin, http, text, Home};

/// The one config every device gets; only the data dir is per test home.
const TEMPLATE: &str = "[identity]\nnode_id_from = \"SOURCE\"\nnode_id_prefix = \"node:pump-\"\n\
                        data_dir = \"DATA\"\n\n[api]\nlisten = \"127.0.0.1:0\"\n";

/// A home with only a config (no `outpost init`) and a sysroot with `files`.
fn device(source: &str, files: &[(&str, &[u8])]) -> (Home, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let cfg = TEMPLATE
        .replace("SOURCE", source)
        .replace("DATA", data.to_str().unwrap());
    std::fs::write(dir.path().join("outpost.toml"), cfg).unwrap();
    let root = tempfile::tempdir().unwrap();
    for (path, bytes) in files {
        let p = root.path().join(path.trim_start_matches('/'));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    }
    let home = Home {
        dir,
        node_id: String::new(),
        db: None,
    };
    (home, root)
}

/// `outpost ARGS --config <home>` on the device `root`.
fn cli(home: &Home, root: &Path, args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .arg("--config")
        .arg(home.config())
        .env("OUTPOST_SYSROOT", root)
        .env_remove("OUTPOST_CONFIG")
        .output()
        .unwrap()
}

async fn status_node_id(home: &Home, root: &Path) -> (String, String, String) {
    let d = home.start_with_env(&[("OUTPOST_SYSROOT", root.to_str().unwrap())]);
    let st: Value = http()
        .get(d.url("/v1/status"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let o = cli(home, root, &["identity", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["node_id"], st["node_id"], "{doc} {st}");
    let keys = std::fs::read_to_string(home.data().join("keys.json")).unwrap();
    let log = d.log_text();
    let created = log.contains("identity_created");
    d.stop();
    (
        st["node_id"].as_str().unwrap().to_string(),
        format!("{}", doc["sign_pk"]),
        format!("{created} {keys}"),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn three_devices_from_one_template_name_themselves_and_keep_their_name() {
    let devices = [
        device(
            "machine-id",
            &[("/etc/machine-id", b"0123456789abcdef0123456789abcdef\n")],
        ),
        device(
            "serial",
            &[(
                "/proc/cpuinfo",
                b"Hardware\t: BCM2835\nSerial\t\t: 10000000ABCDEF01\nModel\t\t: Raspberry Pi 4\n",
            )],
        ),
        device(
            "file:/etc/outpost/device-name",
            &[("/etc/outpost/device-name", b"north-7\n")],
        ),
    ];
    let mut ids = Vec::new();
    for (home, root) in &devices {
        assert!(!home.data().join("keys.json").exists());
        let o = cli(home, root.path(), &["config", "check"]);
        assert!(o.status.success(), "{}", text(&o));
        let (id, pk, keys) = status_node_id(home, root.path()).await;
        assert!(
            keys.starts_with("true "),
            "first start logs identity_created"
        );
        assert!(outpost::envelope::is_valid_node_id(&id), "{id}");
        let mode = std::fs::metadata(home.data().join("keys.json"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{id}");
        // No temp file of the key write is left.
        let names: Vec<String> = std::fs::read_dir(home.data())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(!names.iter().any(|n| n.contains(".tmp")), "{names:?}");

        // A restart keeps the name and the keys, and creates nothing.
        let (id2, pk2, keys2) = status_node_id(home, root.path()).await;
        assert_eq!((&id2, &pk2), (&id, &pk));
        assert_eq!(keys2, keys.replacen("true ", "false ", 1));
        ids.push(id);
    }
    assert_eq!(
        ids,
        [
            "node:pump-696b8fca18bb4a3191b79808da94bd62",
            "node:pump-10000000abcdef01",
            "node:pump-north-7",
        ]
    );
}

#[test]
fn without_a_source_the_device_says_why_and_nothing_is_created() {
    // The serial source on a device that has none: a config error naming the source.
    let (home, root) = device("serial", &[("/proc/cpuinfo", b"processor\t: 0\n")]);
    let o = cli(&home, root.path(), &["run"]);
    assert_eq!(o.status.code(), Some(64), "{}", text(&o));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("identity.node_id_from = \"serial\"") && e.contains("no serial number"),
        "{e}"
    );
    assert!(!home.data().join("keys.json").exists());

    // A node named by hand without keys: exit 64, and how to make them.
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("outpost.toml");
    std::fs::write(
        &cfg,
        format!(
            "[identity]\nnode_id = \"node:hand\"\ndata_dir = \"{}\"\n",
            dir.path().join("data").display()
        ),
    )
    .unwrap();
    let o = crate::harness::outpost(&["run", "--config", cfg.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(64), "{}", text(&o));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("outpost init") && e.contains("node_id_from"),
        "{e}"
    );
    assert!(!dir.path().join("data/keys.json").exists());
}
