//! `outpost audit verify | export --jsonl [--since N] | checkpoint`.

use super::common::{load_config, load_keys, open_store};
use super::{AuditCmd, ConfigArg, Exit};
use crate::app::store_audit::StoreAudit;
use crate::audit::{to_hex, AuditLog};

pub fn audit_cmd(arg: &ConfigArg, cmd: AuditCmd) -> anyhow::Result<()> {
    let cfg = load_config(arg)?;
    #[cfg(feature = "gateway")]
    if cfg.role == crate::config::Role::Gateway {
        return gateway_audit(&cfg, cmd);
    }
    let store = open_store(&cfg)?;
    let log = match AuditLog::open(StoreAudit::new(store.clone())) {
        Ok(l) => l,
        Err(e) => {
            // A gap in the stored entries already fails opening: for `verify` that is
            // the answer, not an error of the tool.
            eprintln!("FAIL: {e}");
            store.close();
            return Err(Exit::failed(
                "audit log verification FAILED: the stored log cannot be replayed",
            )
            .into());
        }
    };
    let res = run(&cfg, &log, cmd);
    store.close();
    res
}

/// The gateway's own log (enrollments, approvals, retirements: PROTOCOL §15.6), read
/// from its state (the store, or the replicas' database) and checked like a node's.
/// It is written only by the running gateway: `checkpoint --now` is not offered.
#[cfg(feature = "gateway")]
fn gateway_audit(cfg: &crate::config::Config, cmd: AuditCmd) -> anyhow::Result<()> {
    if matches!(cmd, AuditCmd::Checkpoint { now: true }) {
        return Err(Exit::usage(
            "the gateway signs a checkpoint with every append to its log; `outpost audit checkpoint` shows the latest",
        )
        .into());
    }
    let st = super::enroll_cmd::Opened::open(cfg)?;
    let read = async {
        let entries = st.state.audit_entries(&cfg.node_id).await?;
        let checkpoints = st.state.audit_checkpoints(&cfg.node_id).await?;
        Ok::<_, crate::gateway::storage::StateError>((entries, checkpoints))
    };
    let read = st.rt.block_on(read);
    st.close();
    let (entries, checkpoints) = read?;
    let mem = crate::audit::MemoryAuditStorage::new();
    use crate::audit::AuditStorage as _;
    for (i, e) in entries.iter().enumerate() {
        mem.append(i as u64, e).map_err(|e| anyhow::anyhow!(e))?;
    }
    for (size, note) in &checkpoints {
        mem.put_checkpoint(*size, note)
            .map_err(|e| anyhow::anyhow!(e))?;
    }
    let log = AuditLog::open(mem).map_err(|e| {
        eprintln!("FAIL: {e}");
        Exit::failed("audit log verification FAILED: the stored log cannot be replayed")
    })?;
    run(cfg, &log, cmd)
}

/// One audit subcommand on an opened log, the node's or the gateway's own.
fn run<S: crate::audit::AuditStorage>(
    cfg: &crate::config::Config,
    log: &AuditLog<S>,
    cmd: AuditCmd,
) -> anyhow::Result<()> {
    match cmd {
        AuditCmd::Verify { require_checkpoint } => verify(cfg, log, require_checkpoint),
        AuditCmd::Export { jsonl: _, since } => {
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::new(stdout.lock());
            log.export_jsonl(since, &mut out)?;
            Ok(())
        }
        AuditCmd::Checkpoint { now: true } => {
            let keys = load_keys(cfg)?;
            // A fresh checkpoint of the current tree, signed and stored.
            let note = log.checkpoint(keys.signing_key(), &cfg.node_id)?;
            print!("{note}");
            Ok(())
        }
        AuditCmd::Checkpoint { now: false } => latest_checkpoint(log),
    }
}

/// `audit verify`: the log replayed against every key it was signed with; fails on any
/// problem, and with `require_checkpoint` on entries no signed checkpoint covers yet.
fn verify<S: crate::audit::AuditStorage>(
    cfg: &crate::config::Config,
    log: &AuditLog<S>,
    require_checkpoint: bool,
) -> anyhow::Result<()> {
    let keys = load_keys(cfg)?;
    let history = crate::daemon::rotation::audit_keys(&cfg.data_dir, &keys)?;
    let report = log.verify(&history, &cfg.node_id)?;
    if !report.is_ok() {
        for f in &report.failures {
            eprintln!("FAIL: {f}");
        }
        return Err(Exit::failed(format!(
            "audit log verification FAILED: {} problem(s) in {} entries",
            report.failures.len(),
            report.entries
        ))
        .into());
    }
    let uncovered = report.entries - report.covered;
    println!(
        "audit log OK: {} entries, root {}, {} checkpoint(s) verified",
        report.entries,
        to_hex(&report.root),
        report.checkpoints_checked
    );
    println!(
        "  {} entries covered by a verified signed checkpoint, {uncovered} not yet{}",
        report.covered,
        if uncovered > 0 {
            " (the daemon signs one within audit.checkpoint_interval_s and on \
             shutdown; `outpost audit checkpoint --now` signs one)"
        } else {
            ""
        }
    );
    if require_checkpoint && uncovered > 0 {
        Err(Exit::failed(format!(
            "{uncovered} audit entries are not covered by a signed checkpoint \
             (--require-checkpoint)"
        ))
        .into())
    } else {
        Ok(())
    }
}

/// `audit checkpoint`: the latest signed checkpoint, with a note when entries came
/// after it; none yet is a failure.
fn latest_checkpoint<S: crate::audit::AuditStorage>(log: &AuditLog<S>) -> anyhow::Result<()> {
    match log.latest_checkpoint()? {
        Some((size, note)) => {
            if size < log.size() {
                eprintln!(
                    "note: this checkpoint covers {size} of {} entries; \
                     `outpost audit checkpoint --now` signs one over all of them",
                    log.size()
                );
            }
            print!("{note}");
            Ok(())
        }
        None => Err(Exit::failed(
            "no signed checkpoint yet; `outpost audit checkpoint --now` signs one",
        )
        .into()),
    }
}
