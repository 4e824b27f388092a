//! `outpost config check`: the whole config pipeline, offline.

use std::path::Path;

use super::Exit;
use crate::config;

pub fn check(path: Option<&Path>) -> anyhow::Result<()> {
    let path = config::resolve_path(path);
    match config::load(&path) {
        Ok(cfg) => {
            match super::common::check_identity_matches(&cfg)? {
                Some(_) => {}
                None => eprintln!(
                    "  note: no identity in {} yet ({} creates it)",
                    cfg.data_dir.display(),
                    if cfg.create_keys {
                        "the first start"
                    } else {
                        "`outpost init`"
                    }
                ),
            }
            super::common::check_upstream_tls(&cfg)?;
            println!(
                "config ok: {} ({}), listen {}, data_dir {}",
                cfg.node_id,
                cfg.role,
                cfg.listen,
                cfg.data_dir.display()
            );
            for s in &cfg.sources {
                println!("  read {}", s.display());
            }
            // A gateway beyond loopback is meant to be reached (with TLS, or
            // allow_plaintext, else the config is refused); a node's API is local.
            if cfg.role == config::Role::Node && !cfg.listen.ip().is_loopback() {
                println!(
                    "  warning: api.listen {} is not loopback; the local API is reachable from the network",
                    cfg.listen
                );
            }
            Ok(())
        }
        Err(e) => Err(Exit::usage(e.to_string()).into()),
    }
}
