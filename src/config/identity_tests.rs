use super::*;
use proptest::prelude::*;
use std::collections::HashMap;

/// A device as a map of paths to contents.
fn device(files: &[(&str, &[u8])]) -> impl Fn(&Path) -> std::io::Result<Vec<u8>> {
    let map: HashMap<PathBuf, Vec<u8>> = files
        .iter()
        .map(|(p, b)| (PathBuf::from(p), b.to_vec()))
        .collect();
    move |p: &Path| {
        map.get(p)
            .cloned()
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))
    }
}

fn derive(src: &str, prefix: &str, files: &[(&str, &[u8])]) -> Result<String, String> {
    derive_node_id(&src.parse().unwrap(), prefix, &device(files))
}

#[test]
fn machine_id_is_systemds_app_specific_id() {
    // `systemd-id128 machine-id --app-specific=c7c15d63087f4c6f86ac8f5f784577aa` on a
    // machine whose /etc/machine-id is 0123456789abcdef0123456789abcdef (systemd 252).
    let files: &[(&str, &[u8])] = &[("/etc/machine-id", b"0123456789abcdef0123456789abcdef\n")];
    assert_eq!(
        derive("machine-id", "node:", files).unwrap(),
        "node:696b8fca18bb4a3191b79808da94bd62"
    );
    // Not the machine id itself.
    assert!(!derive("machine-id", "node:", files)
        .unwrap()
        .contains("0123456789abcdef"));
    let upper: &[(&str, &[u8])] = &[("/etc/machine-id", b"0123456789ABCDEF0123456789ABCDEF")];
    assert_eq!(
        derive("machine-id", "node:pump-", upper).unwrap(),
        "node:pump-696b8fca18bb4a3191b79808da94bd62"
    );
    for (bad, says) in [
        (&b""[..], "first boot"),
        (b"uninitialized\n", "first boot"),
        (b"0123", "32 hex"),
        (b"0123456789abcdef0123456789abcdeg", "32 hex"),
        (b"00000000000000000000000000000000", "all zeros"),
    ] {
        let e = derive("machine-id", "node:", &[("/etc/machine-id", bad)]).unwrap_err();
        assert!(e.contains(says), "{e}");
    }
    let e = derive("machine-id", "node:", &[]).unwrap_err();
    assert!(e.contains("cannot read /etc/machine-id"), "{e}");
}

#[test]
fn serial_from_cpuinfo_or_device_tree() {
    let cpuinfo = b"processor\t: 0\nmodel name\t: ARMv7\n\nHardware\t: BCM2835\nRevision\t: a02082\nSerial\t\t: 00000000ABCDEF01\nModel\t\t: Raspberry Pi 3\n";
    assert_eq!(
        derive("serial", "node:", &[("/proc/cpuinfo", cpuinfo)]).unwrap(),
        "node:00000000abcdef01"
    );
    // arm64 kernels without the line: the device tree, NUL-terminated.
    let files: &[(&str, &[u8])] = &[
        ("/proc/cpuinfo", b"processor\t: 0\nBogoMIPS\t: 108.00\n"),
        (
            "/sys/firmware/devicetree/base/serial-number",
            b"10000000abcdef02\0",
        ),
    ];
    assert_eq!(
        derive("serial", "node:", files).unwrap(),
        "node:10000000abcdef02"
    );
    // An all-zero serial is no serial.
    let zero: &[(&str, &[u8])] = &[("/proc/cpuinfo", b"Serial\t\t: 0000000000000000\n")];
    let e = derive("serial", "node:", zero).unwrap_err();
    assert!(e.contains("no serial number"), "{e}");
    assert!(derive("serial", "node:", &[]).is_err());
}

#[test]
fn hostname_trimmed_and_lowercased() {
    assert_eq!(
        derive(
            "hostname",
            "node:",
            &[("/proc/sys/kernel/hostname", b"Pump-17.Site\n")]
        )
        .unwrap(),
        "node:pump-17.site"
    );
    assert_eq!(
        derive(
            "hostname",
            "node:",
            &[("/etc/hostname", b"# set by the image\n pump-18 \n")]
        )
        .unwrap(),
        "node:pump-18"
    );
    let e = derive(
        "hostname",
        "node:",
        &[("/proc/sys/kernel/hostname", b"localhost\n")],
    )
    .unwrap_err();
    assert!(e.contains("does not tell devices apart"), "{e}");
    let e = derive(
        "hostname",
        "node:",
        &[("/proc/sys/kernel/hostname", b"pump 17\n")],
    )
    .unwrap_err();
    assert!(e.contains("' '") && e.contains("A-Z a-z 0-9"), "{e}");
}

#[test]
fn file_first_line_trimmed() {
    let files: &[(&str, &[u8])] = &[("/etc/outpost/name", b"  Pump_17 \r\nsecond\n")];
    assert_eq!(
        derive("file:/etc/outpost/name", "node:", files).unwrap(),
        "node:Pump_17"
    );
    let e = derive(
        "file:/etc/outpost/name",
        "node:",
        &[("/etc/outpost/name", b"\n")],
    )
    .unwrap_err();
    assert!(e.contains("first line is empty"), "{e}");
    let e = derive(
        "file:/etc/outpost/name",
        "node:",
        &[("/etc/outpost/name", &[0xff, 0xfe])],
    )
    .unwrap_err();
    assert!(e.contains("not UTF-8"), "{e}");
    let e = derive("file:/nope", "node:", &[]).unwrap_err();
    assert!(e.contains("cannot read /nope"), "{e}");
    let long = "n".repeat(70);
    let e = derive(
        "file:/etc/outpost/name",
        "node:",
        &[("/etc/outpost/name", long.as_bytes())],
    )
    .unwrap_err();
    assert!(e.contains("at most 64"), "{e}");
}

#[test]
fn sources_and_prefixes_are_checked() {
    for bad in [
        "",
        "serial-number",
        "file:",
        "file:relative/name",
        "MACHINE-ID",
    ] {
        assert!(bad.parse::<NodeIdSource>().is_err(), "{bad}");
    }
    for s in ["machine-id", "serial", "hostname", "file:/a/b"] {
        assert_eq!(s.parse::<NodeIdSource>().unwrap().to_string(), s);
    }
    let files: &[(&str, &[u8])] = &[("/n", b"x")];
    for bad in ["", "node", "Node:", "node:a:", "node: ", "1node:"] {
        let e = derive("file:/n", bad, files).unwrap_err();
        assert!(e.contains("node_id_prefix"), "{bad}: {e}");
    }
    assert_eq!(derive("file:/n", "sensor-2:", files).unwrap(), "sensor-2:x");
}

fn invalid(text: &str) -> Vec<String> {
    match crate::config::from_str(text) {
        Err(crate::config::ConfigError::Invalid(e)) => e,
        other => panic!("{text}: {other:?}"),
    }
}

#[test]
fn config_keys_are_checked_together() {
    let dir = tempfile::tempdir().unwrap();
    let name = dir.path().join("name");
    std::fs::write(&name, "pump-9\n").unwrap();
    let from = format!("node_id_from = \"file:{}\"", name.display());
    let cfg = crate::config::from_str(&format!("[identity]\n{from}\n")).unwrap();
    assert_eq!(cfg.node_id, "node:pump-9");
    assert!(cfg.create_keys);
    let cfg = crate::config::from_str(&format!(
        "[identity]\n{from}\nnode_id_prefix = \"sensor:\"\ncreate_keys = false\n"
    ))
    .unwrap();
    assert_eq!(cfg.node_id, "sensor:pump-9");
    assert!(!cfg.create_keys);
    let cfg = crate::config::from_str("[identity]\nnode_id = \"node:a\"\n").unwrap();
    assert!(!cfg.create_keys, "as before: keys come from `outpost init`");

    let e = invalid(&format!("[identity]\nnode_id = \"node:a\"\n{from}\n"));
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].contains("both set") && e[0].contains("keep one"),
        "{e:?}"
    );
    let e = invalid("[identity]\nnode_id = \"node:a\"\nnode_id_prefix = \"node:\"\n");
    assert!(
        e[0].contains("node_id_prefix needs identity.node_id_from"),
        "{e:?}"
    );
    let e = invalid("[identity]\nrole = \"node\"\n");
    assert!(
        e[0].contains("node_id is required (or identity.node_id_from)"),
        "{e:?}"
    );
    let e = invalid("[identity]\nnode_id_from = \"file:/nonexistent/outpost-name\"\n");
    assert!(
        e[0].starts_with("identity.node_id_from = \"file:/nonexistent/outpost-name\": cannot read"),
        "{e:?}"
    );
    let e = invalid("[identity]\nnode_id_from = \"mac\"\n");
    assert!(e[0].contains("\"machine-id\", \"serial\""), "{e:?}");
    if cfg!(feature = "gateway") {
        let e = invalid(&format!(
            "[identity]\nrole = \"gateway\"\n{from}\ncreate_keys = true\n"
        ));
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(e.iter().all(|m| m.contains("is for nodes")), "{e:?}");
    }
}

#[test]
fn a_later_file_names_the_device_whichever_key_it_uses() {
    let dir = tempfile::tempdir().unwrap();
    let name = dir.path().join("name");
    std::fs::write(&name, "from-file\n").unwrap();
    let main = dir.path().join("outpost.toml");
    std::fs::write(&main, "[identity]\nnode_id = \"node:unconfigured\"\n").unwrap();
    let d = dir.path().join("outpost.d");
    std::fs::create_dir(&d).unwrap();
    let fleet = format!(
        "[identity]\nnode_id_from = \"file:{}\"\nnode_id_prefix = \"node:f-\"\n",
        name.display()
    );
    std::fs::write(d.join("50-fleet.toml"), &fleet).unwrap();
    assert_eq!(
        crate::config::load(&main).unwrap().node_id,
        "node:f-from-file"
    );
    // A later node_id wins again (and drops the prefix that went with node_id_from).
    std::fs::write(
        d.join("60-name.toml"),
        "[identity]\nnode_id = \"node:by-hand\"\n",
    )
    .unwrap();
    let cfg = crate::config::load(&main).unwrap();
    assert_eq!(cfg.node_id, "node:by-hand");
    assert!(!cfg.create_keys);
    // Both in one file: an error still.
    std::fs::write(
        d.join("60-name.toml"),
        format!("{fleet}node_id = \"node:by-hand\"\n"),
    )
    .unwrap();
    assert!(crate::config::load(&main).is_err());
}

proptest! {
    /// Any content of any source gives a valid node id or an error, never a panic.
    #[test]
    fn any_input_gives_a_valid_id_or_an_error(
        content in proptest::collection::vec(any::<u8>(), 0..120),
        text in "[ -~\t\n\0é]{0,80}",
        prefix in "[a-z:-]{0,12}|node:[A-Za-z0-9._-]{0,70}",
        src in 0usize..4,
    ) {
        let source = ["machine-id", "serial", "hostname", "file:/f"][src];
        for bytes in [&content[..], text.as_bytes()] {
            let files: Vec<(&str, &[u8])> = [
                "/etc/machine-id", "/proc/cpuinfo",
                "/sys/firmware/devicetree/base/serial-number",
                "/proc/sys/kernel/hostname", "/etc/hostname", "/f",
            ].iter().map(|p| (*p, bytes)).collect();
            match derive(source, &prefix, &files) {
                Ok(id) => prop_assert!(is_valid_node_id(&id), "{id:?}"),
                Err(e) => prop_assert!(!e.is_empty()),
            }
        }
    }
}
