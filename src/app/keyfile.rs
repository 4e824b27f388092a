//! Where a role keeps its files inside the data directory, and how they are written.

use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::config::{Config, Role};
use crate::envelope::Keys;

pub use crate::daemon::files::{
    create_keys, create_private_dir, identity_path, keys_path, new_identity, parent_dir,
    published_identity, read_identity, write_atomic, write_identity,
};

pub fn store_dir(data_dir: &Path) -> PathBuf {
    crate::daemon::store_dir(data_dir)
}

/// A start without keys that the config, not a retry, must fix.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NoKeys(pub String);

/// What [`create_at_start`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FirstStart {
    /// Keys and identity were there already.
    Existing,
    /// A new key pair and identity.
    Created,
    /// Keys without an identity (a first start cut short between the two writes): the
    /// identity was written for them.
    Completed,
}

/// A node whose config sets `identity.create_keys` (on by default with
/// `identity.node_id_from`) and whose data dir has no key pair yet makes it, and its
/// identity, the way `outpost init` does. Without the setting, a missing key pair is an
/// error that says how to make one. The caller holds the data dir's lock.
///
/// Crash-safe: the key file appears whole or not at all ([`Keys::save`]); a start cut
/// short after it and before the identity finishes the identity next time; temp files
/// a cut left behind (secret material) are removed first.
pub fn create_at_start(cfg: &Config) -> anyhow::Result<FirstStart> {
    let (keys_path, id_path) = (keys_path(&cfg.data_dir), identity_path(&cfg.data_dir));
    let have_keys = keys_path.exists();
    if have_keys && id_path.exists() {
        return Ok(FirstStart::Existing);
    }
    if !cfg.create_keys || cfg.role != Role::Node {
        if have_keys {
            // As before: NodeCore::open says identity.json is missing.
            return Ok(FirstStart::Existing);
        }
        return Err(NoKeys(format!(
            "no key pair in {}: run `outpost init` for this node, or set \
             identity.node_id_from (or identity.create_keys = true) so that the first start \
             creates it",
            cfg.data_dir.display()
        ))
        .into());
    }
    if have_keys {
        let keys = Keys::load(&keys_path)?;
        write_identity(
            &cfg.data_dir,
            &new_identity(&cfg.node_id, cfg.role, &keys, None)?,
        )?;
        return Ok(FirstStart::Completed);
    }
    if id_path.exists() {
        return Err(NoKeys(format!(
            "{} is there but its key pair {} is not: restore keys.json from a backup; or, to \
             give this device a new key pair (its gateway must approve the re-key), move \
             identity.json away",
            id_path.display(),
            keys_path.display()
        ))
        .into());
    }
    create_private_dir(&cfg.data_dir)
        .with_context(|| format!("creating {}", cfg.data_dir.display()))?;
    remove_temp_keys(&cfg.data_dir);
    let keys = create_keys(&keys_path)?;
    write_identity(
        &cfg.data_dir,
        &new_identity(&cfg.node_id, cfg.role, &keys, None)?,
    )?;
    Ok(FirstStart::Created)
}

/// `.keys.json.tmp-<pid>` files a start cut short before its rename left behind.
fn remove_temp_keys(data_dir: &Path) {
    let Ok(rd) = std::fs::read_dir(data_dir) else {
        return;
    };
    for e in rd.flatten() {
        if e.file_name()
            .to_str()
            .is_some_and(|n| n.starts_with(".keys.json.tmp"))
        {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config_in(dir: &Path, extra: &str) -> Config {
        let name = dir.join("name");
        std::fs::write(&name, "k1\n").unwrap();
        crate::config::from_str(&format!(
            "[identity]\nnode_id_from = \"file:{}\"\ndata_dir = \"{}\"\n{extra}",
            name.display(),
            dir.join("data").display()
        ))
        .unwrap()
    }

    #[test]
    fn first_start_creates_completes_and_refuses_a_lost_key_pair() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = config_in(dir.path(), "");
        let data = &cfg.data_dir;
        // A temp key file a cut-short start left behind is removed, not reused.
        create_private_dir(data).unwrap();
        std::fs::write(data.join(".keys.json.tmp-1"), "half").unwrap();
        assert_eq!(create_at_start(&cfg).unwrap(), FirstStart::Created);
        assert!(!data.join(".keys.json.tmp-1").exists());
        let pk = read_identity(data).unwrap().sign_pk_b64();
        assert_eq!(read_identity(data).unwrap().node_id, "node:k1");
        assert_eq!(create_at_start(&cfg).unwrap(), FirstStart::Existing);

        // Cut short after the keys: the identity is written for the same keys.
        std::fs::remove_file(identity_path(data)).unwrap();
        assert_eq!(create_at_start(&cfg).unwrap(), FirstStart::Completed);
        assert_eq!(read_identity(data).unwrap().sign_pk_b64(), pk);

        // An identity without its keys is not silently replaced.
        std::fs::remove_file(keys_path(data)).unwrap();
        let e = create_at_start(&cfg).unwrap_err();
        assert!(e.downcast_ref::<NoKeys>().is_some(), "{e}");
        assert!(!keys_path(data).exists());

        // Without create_keys: no keys is an error that says how to make them.
        let dir = tempfile::tempdir().unwrap();
        let off = config_in(dir.path(), "create_keys = false\n");
        let e = create_at_start(&off).unwrap_err().to_string();
        assert!(e.contains("outpost init"), "{e}");
        assert!(!keys_path(&off.data_dir).exists());
    }
}
