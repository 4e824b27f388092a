//! `outpost identity` (and `identity rotate`) and `outpost trust add|ls|rm`.

use super::common::{load_config, load_identity, open_store, read_input};
use super::{ConfigArg, Exit};
use crate::daemon::trust;
use crate::envelope::{IdentityDocument, Rights};
use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum TrustCmd {
    /// Add a peer from its identity document (FILE or - for stdin).
    Add {
        /// The peer's identity document (`outpost identity --json` on the peer): a FILE,
        /// or `-` for stdin. Several documents, one per line, or a JSON array enrol a
        /// fleet in one write (all or nothing).
        file: String,
        /// The peer may send envelopes and signed requests to this node.
        #[arg(long)]
        send: bool,
        /// The peer may issue capability tokens this node accepts.
        #[arg(long)]
        issue: bool,
        /// On a gateway: the tenant the nodes join (PROTOCOL §18; `outpost tenant
        /// create` first). Default: the tenant `default`.
        #[arg(long)]
        tenant: Option<String>,
    },
    /// List trusted peers and their rights.
    Ls,
    /// Remove a peer.
    Rm {
        /// The peer's node id (a tenant's node: `<node id>@<tenant>`).
        id: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum IdentityCmd {
    /// Replace this key pair: a new pair and a statement signed by the old and the new
    /// key (PROTOCOL §15.7). On a node, the running node delivers it to its gateway on
    /// its next sync and both switch when the gateway accepts; on a gateway, the running
    /// gateway switches and hands the statement to every node with its next pull.
    /// Nothing queued is lost: the retired key still opens what was sealed to it, and
    /// its signatures are accepted, for 7 days.
    Rotate {
        /// Wait up to this many seconds for the running node or gateway to complete the
        /// rotation (0: do not wait).
        #[arg(long, default_value_t = 0)]
        wait: u64,
        /// Only make the new key pair (`keys.next.json`), to copy to every replica of a
        /// gateway first; a later `identity rotate` uses it.
        #[arg(long)]
        prepare: bool,
        /// The current key was stolen (a node only): the gateway refuses the retired key
        /// as soon as it accepts the rotation, with no 7-day grace, so the thief can no
        /// longer pull, ack or upload as this node. What this node signed with the old
        /// key and has not uploaded yet is refused too.
        #[arg(long, alias = "no-grace")]
        compromised: bool,
    },
}

pub fn identity(cfg: &ConfigArg, json: bool) -> anyhow::Result<()> {
    let cfg = load_config(cfg)?;
    let doc = with_current_tls_pin(&cfg, load_identity(&cfg)?)?;
    if json {
        println!("{}", serde_json::to_string(&doc)?);
    } else {
        println!("{}", serde_json::to_string_pretty(&doc)?);
    }
    Ok(())
}

/// `outpost identity rotate`: leave a rotation for the running node (it delivers it on
/// its next sync), and with `--wait` watch it complete.
pub fn rotate(
    cfg: &ConfigArg,
    wait_s: u64,
    prepare: bool,
    compromised: bool,
) -> anyhow::Result<()> {
    let cfg = load_config(cfg)?;
    if compromised && (prepare || cfg.role == crate::config::Role::Gateway) {
        return Err(Exit::usage(
            "--compromised is for a node's key: its gateway refuses the retired key at once \
             (on a gateway, `outpost nodes end-grace NODE` ends a node's grace)",
        )
        .into());
    }
    if prepare {
        let keys =
            crate::daemon::rotation::prepare(&cfg).map_err(|e| Exit::failed(format!("{e:#}")))?;
        eprintln!(
            "new key pair in {}: copy it (0600, owned by the service user) into the data \
             directory of every other replica, then run `outpost identity rotate` here",
            crate::daemon::rotation::next_keys_path(&cfg.data_dir).display()
        );
        println!("{}", crate::envelope::b64_encode(keys.sign_pk().as_bytes()));
        return Ok(());
    }
    let now_ms = crate::clock::system().now_ms();
    let by = super::actor::local_actor();
    let rot = crate::daemon::rotation::begin(&cfg, now_ms, compromised, &by)
        .map_err(|e| Exit::failed(format!("{e:#}")))?;
    let new_pk = crate::envelope::b64_encode(&rot.new_doc.sign_pk);
    if cfg.role == crate::config::Role::Gateway {
        eprintln!(
            "key rotation to {new_pk} is waiting for the running gateway: it switches within \
             seconds and hands the statement to every node with its next pull"
        );
    } else {
        eprintln!(
            "key rotation to {new_pk} is waiting for the gateway: the running node delivers \
             it on its next sync and switches when the gateway accepts"
        );
    }
    if wait_s == 0 {
        println!("{new_pk}");
        return Ok(());
    }
    let clock = crate::clock::system();
    let deadline = clock.now_ms().saturating_add(wait_s.saturating_mul(1000));
    while crate::daemon::rotation::pending(&cfg.data_dir)?.is_some() {
        if clock.now_ms() >= deadline {
            return Err(Exit::failed(format!(
                "the rotation is still waiting after {wait_s}s: is the daemon running (and, \
                 on a node, connected to its gateway)? (`outpost status`; it completes on \
                 its own once it is)"
            ))
            .into());
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    eprintln!(
        "rotated: this {} now signs with {new_pk}",
        cfg.role.as_str()
    );
    println!("{new_pk}");
    Ok(())
}

/// The stored document, with the TLS pin of the certificate a gateway serves now.
fn with_current_tls_pin(
    cfg: &crate::config::Config,
    doc: IdentityDocument,
) -> anyhow::Result<IdentityDocument> {
    if cfg.tls.is_none() || doc.role != "gateway" {
        return Ok(doc);
    }
    let keys = super::common::load_keys(cfg)?;
    crate::app::keyfile::published_identity(cfg, &keys)
        .map_err(|e| Exit::usage(format!("{e:#}")).into())
}

/// Where the peers live: a node's store, or a gateway's state (its store or the
/// replicas' database: the same `GatewayState` the running gateway writes through, which
/// announces the change to every replica).
enum Book {
    Store(crate::store::Store),
    #[cfg(feature = "gateway")]
    Gateway(super::enroll_cmd::Opened),
}

impl Book {
    fn open(cfg: &crate::config::Config) -> anyhow::Result<Book> {
        #[cfg(feature = "gateway")]
        if cfg.role == crate::config::Role::Gateway {
            return Ok(Book::Gateway(super::enroll_cmd::Opened::open(cfg)?));
        }
        Ok(Book::Store(open_store(cfg)?))
    }

    fn load(&self) -> anyhow::Result<crate::envelope::TrustStore> {
        match self {
            Book::Store(s) => trust::load(s),
            #[cfg(feature = "gateway")]
            Book::Gateway(g) => Ok(g.state.load_trust()?),
        }
    }

    /// Store `t`, edited from `before`. A gateway's own audit log gets an entry per peer
    /// the edit changed, by the local user, in the trust write's transaction (the running
    /// gateway appends it); a node keeps no such log.
    #[cfg_attr(not(feature = "gateway"), allow(unused_variables))]
    fn save(
        &self,
        before: &crate::envelope::TrustStore,
        t: &crate::envelope::TrustStore,
    ) -> anyhow::Result<()> {
        match self {
            Book::Store(s) => trust::save(s, t),
            #[cfg(feature = "gateway")]
            Book::Gateway(g) => {
                let actor = super::actor::local_actor();
                let audit = crate::gateway::own_audit::trust_entries(&actor, before, t);
                let edit = crate::gateway::storage::TrustEdit::between(before, t);
                Ok(g.rt.block_on(g.state.save_trust(&edit, &audit))?)
            }
        }
    }

    /// The tenant `--tenant` names, which must exist (PROTOCOL §18): its record, `None`
    /// for `default`. A node knows no tenants.
    fn tenant(&self, name: &str) -> anyhow::Result<Option<crate::fleet::tenant::TenantRecord>> {
        crate::fleet::tenant::validate_tenant(name).map_err(|e| Exit::usage(e.to_string()))?;
        match self {
            Book::Store(_) => Err(Exit::usage("--tenant is for a gateway: a node knows no tenants").into()),
            #[cfg(feature = "gateway")]
            Book::Gateway(_) if name == crate::fleet::tenant::DEFAULT_TENANT => Ok(None),
            #[cfg(feature = "gateway")]
            Book::Gateway(g) => match g.rt.block_on(g.state.tenant(name))? {
                Some(r) => Ok(Some(r)),
                None => Err(Exit::failed(format!(
                    "no tenant {name} (make it with `outpost tenant create {name}`); nothing was added"
                ))
                .into()),
            },
        }
    }

    /// The gateway's enrollment records (what it retired); none on a node.
    #[cfg(feature = "gateway")]
    fn retirements(&self) -> anyhow::Result<Vec<crate::gateway::enroll::EnrollmentRecord>> {
        match self {
            Book::Store(_) => Ok(Vec::new()),
            Book::Gateway(g) => Ok(g.rt.block_on(g.state.enrollments())?),
        }
    }

    fn close(self) {
        match self {
            Book::Store(s) => s.close(),
            #[cfg(feature = "gateway")]
            Book::Gateway(g) => g.close(),
        }
    }
}

/// `outpost trust add`: every document checked before the one write (all or nothing).
fn trust_add(
    cfg: &crate::config::Config,
    store: &Book,
    before: &crate::envelope::TrustStore,
    t: &mut crate::envelope::TrustStore,
    file: &str,
    rights: Rights,
    tenant: Option<String>,
) -> anyhow::Result<()> {
    let Rights { send, issue } = rights;
    let record = tenant
        .as_deref()
        .map(|n| store.tenant(n))
        .transpose()?
        .flatten();
    let bytes = read_input(file)?;
    let docs = identity_documents(&bytes)?;
    #[cfg(feature = "gateway")]
    let retired = store.retirements()?;
    let mut lines = Vec::with_capacity(docs.len());
    // All or nothing: every document is checked before the one write.
    for doc in docs {
        if doc.node_id == cfg.node_id {
            return Err(Exit::failed("refusing to add our own identity as a peer").into());
        }
        let id = doc.node_id.clone();
        #[cfg(feature = "gateway")]
        if let Some(r) = super::retired::retired_key(&retired, &doc) {
            return Err(Exit::failed(format!(
                "refused {id}: {}; nothing was added",
                super::retired::explain(r)
            ))
            .into());
        }
        if !send && doc.role == "node" && cfg.role == crate::config::Role::Gateway {
            eprintln!(
                "warning: {id} is trusted without --send: it can never fetch what is \
                 queued for it (the gateway refuses to queue for it, 409 \
                 node_without_send); add it again with --send"
            );
        }
        let pinned = if doc.tls_pin().is_some() {
            ", tls pinned"
        } else {
            ""
        };
        let replaced = t
            .add_in(doc, Rights { send, issue }, tenant.as_deref())
            .map_err(|e| Exit::failed(format!("refused {id}: {e}")))?;
        let id = match tenant.as_deref() {
            Some(tn) => crate::fleet::tenant::address(&id, tn),
            None => id,
        };
        lines.push(format!(
            "{} {id} (send: {send}, issue: {issue}{pinned})",
            if replaced.is_some() {
                "updated"
            } else {
                "trusted"
            }
        ));
    }
    if let Some(r) = &record {
        within_node_quota(r, t)?;
    }
    store.save(before, t)?;
    for l in lines {
        println!("{l}");
    }
    Ok(())
}

/// Refuses an edit that leaves tenant `r` more nodes than its `max_nodes` allows.
fn within_node_quota(
    r: &crate::fleet::tenant::TenantRecord,
    t: &crate::envelope::TrustStore,
) -> Result<(), Exit> {
    let Some(max) = r.quotas.max_nodes else {
        return Ok(());
    };
    let nodes = t
        .list()
        .filter(|p| p.doc.role == "node" && p.tenant.as_deref() == Some(r.name.as_str()))
        .count() as u64;
    if nodes > max {
        return Err(Exit::failed(format!(
            "tenant_quota: tenant {} would have {nodes} nodes, above its max_nodes {max}              (`outpost tenant set {} --max-nodes N`); nothing was added",
            r.name, r.name
        )));
    }
    Ok(())
}

/// One identity document, several one after another (`outpost identity --json` of each
/// peer, concatenated: one per line), or a JSON array of them — a fleet enrolled in
/// one write.
fn identity_documents(bytes: &[u8]) -> anyhow::Result<Vec<IdentityDocument>> {
    let bad = |e: serde_json::Error| Exit::failed(format!("not an identity document: {e}"));
    let mut docs = Vec::new();
    for v in serde_json::Deserializer::from_slice(bytes).into_iter::<serde_json::Value>() {
        match v.map_err(bad)? {
            serde_json::Value::Array(items) => {
                for item in items {
                    docs.push(serde_json::from_value(item).map_err(bad)?);
                }
            }
            one => docs.push(serde_json::from_value(one).map_err(bad)?),
        }
    }
    if docs.is_empty() {
        return Err(Exit::failed("no identity document in the input").into());
    }
    Ok(docs)
}

pub fn trust_cmd(cfg: &ConfigArg, cmd: TrustCmd) -> anyhow::Result<()> {
    let cfg = load_config(cfg)?;
    let store = Book::open(&cfg)?;
    let before = store.load()?;
    let mut t = before.clone();
    match cmd {
        TrustCmd::Add {
            file,
            send,
            issue,
            tenant,
        } => trust_add(
            &cfg,
            &store,
            &before,
            &mut t,
            &file,
            Rights { send, issue },
            tenant,
        )?,
        TrustCmd::Ls => {
            if t.is_empty() {
                println!("no trusted peers");
            }
            for p in t.list() {
                println!(
                    "{}\t{}\tsend={}\tissue={}\tcreated_at={}",
                    p.address(),
                    p.doc.role,
                    p.rights.send,
                    p.rights.issue,
                    p.doc.created_at
                );
            }
        }
        TrustCmd::Rm { id } => {
            if t.remove(&id).is_none() {
                return Err(Exit::failed(format!("{id} is not in the trust store")).into());
            }
            store.save(&before, &t)?;
            println!("removed {id}");
        }
    }
    store.close();
    Ok(())
}
