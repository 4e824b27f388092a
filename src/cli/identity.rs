//! `outpost identity` and `outpost trust add|ls|rm`.

use super::common::{load_config, load_identity, open_store, read_input};
use super::{ConfigArg, Exit, TrustCmd};
use crate::daemon::trust;
use crate::envelope::{IdentityDocument, Rights};

pub fn identity(cfg: &ConfigArg, json: bool) -> anyhow::Result<()> {
    let cfg = load_config(cfg)?;
    let doc = load_identity(&cfg)?;
    if json {
        println!("{}", serde_json::to_string(&doc)?);
    } else {
        println!("{}", serde_json::to_string_pretty(&doc)?);
    }
    Ok(())
}

pub fn trust_cmd(cfg: &ConfigArg, cmd: TrustCmd) -> anyhow::Result<()> {
    let cfg = load_config(cfg)?;
    let store = open_store(&cfg)?;
    let mut t = trust::load(&store)?;
    match cmd {
        TrustCmd::Add { file, send, issue } => {
            let bytes = read_input(&file)?;
            let doc: IdentityDocument = serde_json::from_slice(&bytes)
                .map_err(|e| Exit::failed(format!("not an identity document: {e}")))?;
            if doc.node_id == cfg.node_id {
                return Err(Exit::failed("refusing to add our own identity as a peer").into());
            }
            let id = doc.node_id.clone();
            let replaced = t
                .add(doc, Rights { send, issue })
                .map_err(|e| Exit::failed(format!("refused: {e}")))?;
            trust::save(&store, &t)?;
            println!(
                "{} {id} (send: {send}, issue: {issue})",
                if replaced.is_some() {
                    "updated"
                } else {
                    "trusted"
                }
            );
        }
        TrustCmd::Ls => {
            if t.is_empty() {
                println!("no trusted peers");
            }
            for p in t.list() {
                println!(
                    "{}\t{}\tsend={}\tissue={}\tcreated_at={}",
                    p.doc.node_id, p.doc.role, p.rights.send, p.rights.issue, p.doc.created_at
                );
            }
        }
        TrustCmd::Rm { id } => {
            if t.remove(&id).is_none() {
                return Err(Exit::failed(format!("{id} is not in the trust store")).into());
            }
            trust::save(&store, &t)?;
            println!("removed {id}");
        }
    }
    store.close();
    Ok(())
}
