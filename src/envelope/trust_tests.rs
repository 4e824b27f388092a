//! Tests of the trust store (`trust.rs`).

use super::*;
use crate::envelope::{KeyRotation, Keys, RotationError};

#[test]
fn add_get_remove_roundtrip() {
    let k = Keys::generate();
    let d = IdentityDocument::new("gateway:main", "gateway", &k, "2026-11-22T06:00:00Z");
    let mut t = TrustStore::new();
    assert!(t
        .add(
            d.clone(),
            Rights {
                send: true,
                issue: true
            }
        )
        .unwrap()
        .is_none());
    assert_eq!(t.get("gateway:main").unwrap().keys.sign, k.sign_pk());
    let back = TrustStore::from_bytes(&t.to_bytes()).unwrap();
    assert_eq!(back, t);
    assert!(t.add(d, Rights::default()).unwrap().is_some());
    assert!(!t.get("gateway:main").unwrap().rights.send);
    assert_eq!(t.list().count(), 1);
    assert!(t.remove("gateway:main").is_some());
    assert!(t.is_empty());
}

#[test]
fn a_rotation_switches_keys_keeps_the_old_one_for_the_grace_and_survives_a_reload() {
    let old = Keys::generate();
    let new = Keys::generate();
    let d = IdentityDocument::new("node:a", "node", &old, "2026-11-22T06:00:00Z");
    let nd = IdentityDocument::new("node:a", "node", &new, "2026-11-27T06:00:00Z");
    let rot = KeyRotation::new(&old, &new, nd.clone());
    let mut t = TrustStore::new();
    assert_eq!(
        t.rotate(&rot, 1_000, 500),
        Err(RotationError::UnknownPeer("node:a".into()))
    );
    let rights = Rights {
        send: true,
        issue: false,
    };
    t.add(d.clone(), rights).unwrap();
    assert_eq!(t.rotate(&rot, 1_000, 500), Ok(Rotated::Applied));
    assert_eq!(t.rotate(&rot, 2_000, 500), Ok(Rotated::AlreadyApplied));
    let p = t.get("node:a").unwrap();
    assert_eq!(p.doc, nd);
    assert_eq!(p.rights, rights);
    let keys = |now| p.sign_keys(now).copied().collect::<Vec<_>>();
    assert_eq!(keys(1_499), vec![new.sign_pk(), old.sign_pk()]);
    assert_eq!(keys(1_500), vec![new.sign_pk()]);
    assert_eq!(p.key_history(), vec![old.sign_pk(), new.sign_pk()]);
    let back = TrustStore::from_bytes(&t.to_bytes()).unwrap();
    assert_eq!(back, t);
    let row = p.rotation_row();
    let mut bare = TrustStore::new();
    bare.add(nd, rights).unwrap();
    let restored = bare
        .get("node:a")
        .unwrap()
        .clone()
        .with_rotation_row(row.as_deref())
        .unwrap();
    assert_eq!(&restored, p);
    // The old key cannot rotate again: it is no longer the trusted one.
    let other = Keys::generate();
    let od = IdentityDocument::new("node:a", "node", &other, "2026-11-27T07:00:00Z");
    assert_eq!(
        t.rotate(&KeyRotation::new(&old, &other, od), 3_000, 500),
        Err(RotationError::Stale("node:a".into()))
    );
    // A second rotation retires the first new key; the history keeps both.
    let third = Keys::generate();
    let td = IdentityDocument::new("node:a", "node", &third, "2026-11-28T06:00:00Z");
    t.rotate(&KeyRotation::new(&new, &third, td), 4_000, 500)
        .unwrap();
    let p = t.get("node:a").unwrap();
    assert_eq!(
        p.key_history(),
        vec![old.sign_pk(), new.sign_pk(), third.sign_pk()]
    );
    assert_eq!(p.previous.as_ref().unwrap().keys.sign, new.sign_pk());
}

#[test]
fn ending_a_grace_leaves_only_the_current_key() {
    let (old, new) = (Keys::generate(), Keys::generate());
    let d = IdentityDocument::new("node:a", "node", &old, "2026-11-22T06:00:00Z");
    let nd = IdentityDocument::new("node:a", "node", &new, "2026-11-27T06:00:00Z");
    let mut t = TrustStore::new();
    assert_eq!(t.end_grace("node:a", 1_000), None);
    t.add(d, Rights::default()).unwrap();
    assert_eq!(t.end_grace("node:a", 1_000), Some(false), "never rotated");
    t.rotate(&KeyRotation::new(&old, &new, nd), 1_000, 500)
        .unwrap();
    assert_eq!(t.end_grace("node:a", 1_200), Some(true));
    let p = t.get("node:a").unwrap();
    assert_eq!(p.sign_keys(1_200).count(), 1);
    assert_eq!(p.key_history(), vec![old.sign_pk(), new.sign_pk()]);
    assert_eq!(t.end_grace("node:a", 1_300), Some(false), "already over");
    // A rotation with no grace at all.
    let third = Keys::generate();
    let td = IdentityDocument::new("node:a", "node", &third, "2026-11-28T06:00:00Z");
    t.rotate(&KeyRotation::new(&new, &third, td), 2_000, 0)
        .unwrap();
    let keys: Vec<_> = t.get("node:a").unwrap().sign_keys(2_000).copied().collect();
    assert_eq!(keys, vec![third.sign_pk()]);
}

#[test]
fn add_and_load_refuse_bad_documents() {
    let k = Keys::generate();
    let mut d = IdentityDocument::new("node:a", "node", &k, "2026-11-22T06:00:00Z");
    let mut t = TrustStore::new();
    t.add(d.clone(), Rights::default()).unwrap();
    let good = t.to_bytes();
    d.self_sig[3] ^= 0x10;
    assert!(matches!(
        t.add(d.clone(), Rights::default()),
        Err(TrustError::Identity(IdentityError::BadSelfSig))
    ));
    // A tampered persisted row is refused on load, too.
    let text = String::from_utf8(good).unwrap();
    let orig = crate::envelope::b64_encode(&t.get("node:a").unwrap().doc.self_sig);
    let bad = text.replace(&orig, &crate::envelope::b64_encode(&d.self_sig));
    assert!(TrustStore::from_bytes(bad.as_bytes()).is_err());
    assert!(TrustStore::from_bytes(b"{\"v\":2,\"peers\":[]}").is_err());
    assert!(TrustStore::from_bytes(b"nope").is_err());
}

/// A peer row written before tenants (no `tenant` member) is read into `default` at its
/// node id, and a `default` peer is written as before: a store from an older release
/// opens with every peer where it was, and stays readable by that release.
#[test]
fn rows_from_before_tenants_are_in_default_and_unchanged() {
    let k = Keys::from_secret_bytes(&[3; 32], &[4; 32]);
    let d = IdentityDocument::new("node:pump-17", "node", &k, "2026-11-22T06:00:00Z");
    let old = format!(
        r#"{{"doc":{},"rights":{{"send":true,"issue":false}}}}"#,
        serde_json::to_string(&d).unwrap()
    );
    let p = Peer::from_bytes(old.as_bytes()).unwrap();
    assert_eq!(
        (p.tenant.as_deref(), p.address().as_str()),
        (None, "node:pump-17")
    );
    assert_eq!(p.to_bytes(), old.as_bytes());
    let mut t = TrustStore::new();
    t.add_in(d.clone(), Rights::default(), Some("default"))
        .unwrap();
    assert_eq!(t.get("node:pump-17").unwrap().tenant, None);
}

/// One node id in two tenants: two peers, each at its address, each with its key; a
/// lookup by node id finds every tenant's (and only those: not a longer id).
#[test]
fn one_node_id_in_two_tenants_is_two_peers() {
    let doc = |seed: u8, id: &str| {
        let k = Keys::from_secret_bytes(&[seed; 32], &[seed; 32]);
        IdentityDocument::new(id, "node", &k, "2026-11-22T06:00:00Z")
    };
    let mut t = TrustStore::new();
    t.add(doc(1, "node:pump-17"), Rights::default()).unwrap();
    t.add_in(doc(2, "node:pump-17"), Rights::default(), Some("acme"))
        .unwrap();
    t.add_in(doc(3, "node:pump-17"), Rights::default(), Some("globex"))
        .unwrap();
    t.add(doc(4, "node:pump-170"), Rights::default()).unwrap();
    t.add_in(doc(5, "node:pump-1"), Rights::default(), Some("acme"))
        .unwrap();
    let found: Vec<String> = t
        .with_node_id("node:pump-17")
        .map(|p| p.address())
        .collect();
    assert_eq!(
        found,
        ["node:pump-17", "node:pump-17@acme", "node:pump-17@globex"]
    );
    assert_ne!(
        t.get("node:pump-17@acme").unwrap().keys.sign,
        t.get("node:pump-17").unwrap().keys.sign
    );
    // Written and read back, each keeps its tenant.
    let back = TrustStore::from_bytes(&t.to_bytes()).unwrap();
    assert_eq!(back, t);
    // The tenant's peer as its device names itself: at its node id, alone.
    let one = t.as_sender("node:pump-17@globex");
    assert_eq!(one.len(), 1);
    assert_eq!(
        one.get("node:pump-17").unwrap().keys.sign,
        t.get("node:pump-17@globex").unwrap().keys.sign
    );
    assert!(t.as_sender("node:nobody@acme").is_empty());
    // A tenant name outside the grammar is refused, on add and on load.
    assert!(t
        .add_in(doc(6, "node:x"), Rights::default(), Some("Bad"))
        .is_err());
    let mut row: serde_json::Value =
        serde_json::from_slice(&t.get("node:pump-17@acme").unwrap().to_bytes()).unwrap();
    row["tenant"] = "no@pe".into();
    assert!(Peer::from_bytes(&serde_json::to_vec(&row).unwrap()).is_err());
}
