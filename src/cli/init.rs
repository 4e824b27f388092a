//! `outpost init`: keys (0600), identity document, an empty store, and a config file.

use std::path::PathBuf;

use anyhow::Context;

use super::Exit;
use crate::app::keyfile;
use crate::config::{self, Role};
use crate::envelope::{is_valid_node_id, IdentityDocument, Keys};

pub struct InitArgs {
    pub role: String,
    pub node_id: String,
    pub data_dir: Option<PathBuf>,
    pub config: Option<PathBuf>,
    pub listen: Option<String>,
    pub upstream_url: Option<String>,
    pub gateway_id: String,
    pub quiet: bool,
}

pub fn init(a: InitArgs) -> anyhow::Result<()> {
    let role: Role = a.role.parse().map_err(Exit::usage)?;
    if !is_valid_node_id(&a.node_id) {
        return Err(Exit::usage(format!(
            "--node-id {:?} must look like node:pump-17 (^[a-z][a-z0-9-]{{0,31}}:[A-Za-z0-9._-]{{1,64}}$)",
            a.node_id
        ))
        .into());
    }
    if a.upstream_url.is_some() && role == Role::Gateway {
        return Err(Exit::usage("--upstream-url is for nodes").into());
    }
    let data_dir = a
        .data_dir
        .unwrap_or_else(|| PathBuf::from(config::DEFAULT_DATA_DIR));
    let cfg_path = a
        .config
        .unwrap_or_else(|| PathBuf::from(config::DEFAULT_CONFIG_PATH));
    let keys_path = keyfile::keys_path(&data_dir);
    if keys_path.exists() {
        return Err(Exit::failed(format!(
            "{} already holds keys; refusing to overwrite an identity",
            data_dir.display()
        ))
        .into());
    }
    if cfg_path.exists() {
        return Err(Exit::failed(format!(
            "{} exists; refusing to overwrite it",
            cfg_path.display()
        ))
        .into());
    }
    keyfile::create_private_dir(&data_dir)
        .with_context(|| format!("creating {}", data_dir.display()))?;

    let keys = Keys::generate();
    keys.save(&keys_path)
        .with_context(|| format!("writing {}", keys_path.display()))?;
    let now_ms = crate::clock::system().now_ms();
    let created_at = crate::token::format_rfc3339_ms(now_ms - now_ms % 1000)
        .ok_or_else(|| anyhow::anyhow!("clock out of range"))?;
    let doc = IdentityDocument::new(&a.node_id, role.as_str(), &keys, &created_at);
    keyfile::write_identity(&data_dir, &doc)?;

    let mut text = format!(
        "[identity]\nnode_id = \"{}\"\nrole = \"{}\"\ndata_dir = \"{}\"\n",
        a.node_id,
        role.as_str(),
        data_dir.display()
    );
    if let Some(l) = &a.listen {
        text.push_str(&format!("\n[api]\nlisten = \"{l}\"\n"));
    }
    if let Some(u) = &a.upstream_url {
        text.push_str(&format!(
            "\n[upstream]\nurl = \"{u}\"\ngateway_id = \"{}\"\n",
            a.gateway_id
        ));
    }
    // Check what we are about to write with the same code `config check` uses.
    let cfg = config::from_str(&text).map_err(|e| Exit::usage(e.to_string()))?;
    if let Some(parent) = cfg_path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    keyfile::write_atomic(&cfg_path, text.as_bytes(), 0o644)?;
    // Create the store now, so the first `run` starts from a known schema.
    let store = crate::app::open_store(&cfg, crate::clock::system())?;
    store.close();

    if !a.quiet {
        println!("initialized {} ({})", a.node_id, role.as_str());
        println!("  config   {}", cfg_path.display());
        println!("  keys     {} (0600)", keys_path.display());
        println!("  identity {}", keyfile::identity_path(&data_dir).display());
        println!("next: share the identity document with peers (`outpost identity --json`) and add theirs with `outpost trust add`.");
    }
    Ok(())
}
