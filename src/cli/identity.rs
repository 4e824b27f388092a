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

/// Where the peers live: the data dir's store, or a database-backed gateway's tables
/// (which every replica reads; they reload on the change's `NOTIFY`).
enum Book {
    Store(crate::store::Store),
    #[cfg(feature = "postgres")]
    Database {
        rt: tokio::runtime::Runtime,
        state: std::sync::Arc<crate::gateway::storage::postgres::Postgres>,
    },
}

impl Book {
    fn open(cfg: &crate::config::Config) -> anyhow::Result<Book> {
        #[cfg(feature = "postgres")]
        if let Some(db) = &cfg.gateway_db {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let state = rt
                .block_on(crate::gateway::storage::postgres::Postgres::open(
                    db,
                    &cfg.queue,
                    crate::clock::system(),
                ))
                .map_err(|e| {
                    Exit::failed(format!(
                        "cannot open the gateway's database {}: {e}",
                        crate::config::redact_url(&db.url)
                    ))
                })?;
            return Ok(Book::Database { rt, state });
        }
        Ok(Book::Store(open_store(cfg)?))
    }

    fn load(&self) -> anyhow::Result<crate::envelope::TrustStore> {
        match self {
            Book::Store(s) => trust::load(s),
            #[cfg(feature = "postgres")]
            Book::Database { state, .. } => {
                use crate::gateway::storage::GatewayState;
                Ok(state.load_trust()?)
            }
        }
    }

    fn save(&self, t: &crate::envelope::TrustStore) -> anyhow::Result<()> {
        match self {
            Book::Store(s) => trust::save(s, t),
            #[cfg(feature = "postgres")]
            Book::Database { rt, state } => {
                use crate::gateway::storage::GatewayState;
                Ok(rt.block_on(state.save_trust(t))?)
            }
        }
    }

    fn close(self) {
        match self {
            Book::Store(s) => s.close(),
            #[cfg(feature = "postgres")]
            Book::Database { .. } => {}
        }
    }
}

pub fn trust_cmd(cfg: &ConfigArg, cmd: TrustCmd) -> anyhow::Result<()> {
    let cfg = load_config(cfg)?;
    let store = Book::open(&cfg)?;
    let mut t = store.load()?;
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
            store.save(&t)?;
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
            store.save(&t)?;
            println!("removed {id}");
        }
    }
    store.close();
    Ok(())
}
