//! `outpost init`: keys (0600), identity document, an empty store, and a config file.

use std::path::{Path, PathBuf};

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
    // Absolute in the config, so `run` finds it from any working directory.
    let data_dir = std::path::absolute(
        a.data_dir
            .unwrap_or_else(|| PathBuf::from(config::DEFAULT_DATA_DIR)),
    )?;
    // Resolved the way every other command resolves it: --config, then $OUTPOST_CONFIG,
    // then the default.
    let cfg_path = config::resolve_path(a.config.as_deref());
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
    // Check what we are about to write with the same code `config check` uses, before
    // anything is written.
    let cfg = config::from_str(&text).map_err(|e| Exit::usage(e.to_string()))?;

    // All or nothing: on any failure, remove what this init created, so that a retry is
    // not blocked by half an identity.
    let mut made = Made::default();
    let res = write_all(
        &a.node_id, role, &data_dir, &cfg_path, &keys_path, &text, &cfg, &mut made,
    );
    if res.is_err() {
        made.undo();
    }
    res?;

    if !a.quiet {
        // Progress, not data: stderr, so `TOKEN=$(outpost token issue --dev …)` on a
        // first use captures only the token.
        eprintln!("initialized {} ({})", a.node_id, role.as_str());
        eprintln!("  config   {}", cfg_path.display());
        eprintln!("  keys     {} (0600)", keys_path.display());
        eprintln!("  identity {}", keyfile::identity_path(&data_dir).display());
        // The hints work as printed: they name the config unless it is the default.
        let with = if cfg_path == Path::new(config::DEFAULT_CONFIG_PATH) {
            String::new()
        } else {
            format!(" --config {}", cfg_path.display())
        };
        eprintln!("next: share the identity document with peers (`outpost identity --json{with}`) and add theirs with `outpost trust add FILE --send{with}`.");
    }
    Ok(())
}

/// What an init created, newest last, so a failed init can take it back.
#[derive(Default)]
struct Made {
    files: Vec<PathBuf>,
    dirs: Vec<PathBuf>,
}

impl Made {
    /// Creates `dir` and the missing directories above it, remembering the new ones.
    fn dir_all(&mut self, dir: &Path, private: bool) -> std::io::Result<()> {
        let mut missing = Vec::new();
        let mut d = Some(dir);
        while let Some(p) = d.filter(|p| !p.as_os_str().is_empty() && !p.exists()) {
            missing.push(p.to_path_buf());
            d = p.parent();
        }
        if private {
            keyfile::create_private_dir(dir)?;
        } else {
            std::fs::create_dir_all(dir)?;
        }
        self.dirs.extend(missing.into_iter().rev());
        Ok(())
    }

    fn undo(self) {
        for f in self.files.iter().rev() {
            let _ = std::fs::remove_file(f);
        }
        for d in self.dirs.iter().rev() {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn write_all(
    node_id: &str,
    role: Role,
    data_dir: &Path,
    cfg_path: &Path,
    keys_path: &Path,
    text: &str,
    cfg: &config::Config,
    made: &mut Made,
) -> anyhow::Result<()> {
    made.dir_all(data_dir, true)
        .with_context(|| format!("creating {}", data_dir.display()))?;
    let keys = Keys::generate();
    made.files.push(keys_path.to_path_buf());
    keys.save(keys_path)
        .with_context(|| format!("writing {}", keys_path.display()))?;
    let now_ms = crate::clock::system().now_ms();
    let created_at = crate::token::format_rfc3339_ms(now_ms - now_ms % 1000)
        .ok_or_else(|| anyhow::anyhow!("clock out of range"))?;
    let doc = IdentityDocument::new(node_id, role.as_str(), &keys, &created_at);
    made.files.push(keyfile::identity_path(data_dir));
    keyfile::write_identity(data_dir, &doc)?;

    let cfg_dir = keyfile::parent_dir(cfg_path);
    made.dir_all(cfg_dir, false)
        .with_context(|| format!("creating {}", cfg_dir.display()))?;
    made.files.push(cfg_path.to_path_buf());
    keyfile::write_atomic(cfg_path, text.as_bytes(), 0o644)
        .with_context(|| format!("writing {}", cfg_path.display()))?;
    // Create the store now, so the first `run` starts from a known schema.
    let store_dir = keyfile::store_dir(data_dir);
    if !store_dir.exists() {
        made.dirs.push(store_dir);
    }
    let store = crate::app::open_store(cfg, crate::clock::system())?;
    store.close();
    Ok(())
}
