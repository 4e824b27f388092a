//! `outpost gateway migrate --to postgres://…`.

use super::{ConfigArg, Exit, GatewayCmd};

pub fn gateway_cmd(arg: &ConfigArg, cmd: GatewayCmd) -> anyhow::Result<()> {
    match cmd {
        GatewayCmd::Migrate { to } => migrate(arg, &to),
    }
}

#[cfg(all(feature = "gateway", not(feature = "postgres")))]
fn migrate(_arg: &ConfigArg, _to: &str) -> anyhow::Result<()> {
    Err(Exit::usage("this build has no PostgreSQL support (cargo feature `postgres`)").into())
}

#[cfg(not(feature = "gateway"))]
fn migrate(_arg: &ConfigArg, _to: &str) -> anyhow::Result<()> {
    Err(Exit::usage(format!(
        "`outpost gateway migrate`: {}",
        crate::config::NO_GATEWAY
    ))
    .into())
}

#[cfg(feature = "postgres")]
fn migrate(arg: &ConfigArg, to: &str) -> anyhow::Result<()> {
    use super::common::{load_config, open_store};
    use crate::config::{redact_url, PostgresConfig, Role};
    use crate::gateway::storage::{embedded, postgres::Postgres};

    let cfg = load_config(arg)?;
    if cfg.role != Role::Gateway {
        return Err(Exit::usage("only a gateway's state moves to PostgreSQL").into());
    }
    if cfg.gateway_db.is_some() {
        return Err(Exit::usage("this gateway already keeps its state in PostgreSQL").into());
    }
    if !(to.starts_with("postgres://") || to.starts_with("postgresql://")) {
        return Err(Exit::usage("--to must be a postgres:// URL").into());
    }
    // A running gateway would go on changing what is being copied: the data directory's
    // lock, held by `outpost run` for its whole life, says whether one runs.
    let _owner = super::common::own_data_dir(&cfg)?;
    let store = open_store(&cfg)?;
    let snap = embedded::snapshot::read(&store);
    store.close();
    let snap = snap?;
    eprintln!(
        "read {} queued message(s), {} job(s), {} result(s), {} revocation(s), {} peer(s), {} audit cop(ies) from {}",
        snap.messages.len(),
        snap.jobs.len(),
        snap.results.len(),
        snap.revocations.len(),
        snap.trust.len(),
        snap.audit.len(),
        cfg.data_dir.display()
    );
    let db = PostgresConfig {
        url: to.to_string(),
        pool: 2,
        ca_file: None,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let report = rt.block_on(async {
        let pg = Postgres::open(&db, &cfg.queue, crate::clock::system()).await?;
        pg.import(&snap).await
    });
    let report =
        report.map_err(|e| Exit::failed(format!("migration to {} failed: {e}", redact_url(to))))?;
    println!(
        "copied and verified: {} message(s), {} job(s), {} result(s), {} revocation(s), {} peer(s), {} audit entr(ies) of {} node(s), {} tenant(s); audit roots match",
        report.messages,
        report.jobs,
        report.results,
        report.revocations,
        report.peers,
        report.audit_entries,
        report.audit_nodes,
        report.tenants
    );
    // The URL as given, password included: a masked one pasted into the config could
    // never connect. It is the operator's own command line, shown on their terminal.
    eprintln!(
        "next: add to the gateway's config (it holds the database password: keep the file \
         readable by root and the service user only)\n  [store]\n  engine = \"postgres\"\n  postgres_url = \"{to}\"\nand start it (and any replicas, with a copy of {}/keys.json and identity)",
        cfg.data_dir.display()
    );
    Ok(())
}
