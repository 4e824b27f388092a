//! `outpost audit verify | export --jsonl [--since N] | checkpoint`.

use super::common::{load_config, load_keys, open_store};
use super::{AuditCmd, ConfigArg, Exit};
use crate::app::store_audit::StoreAudit;
use crate::audit::{to_hex, AuditLog};

pub fn audit_cmd(arg: &ConfigArg, cmd: AuditCmd) -> anyhow::Result<()> {
    let cfg = load_config(arg)?;
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
    let res = match cmd {
        AuditCmd::Verify => {
            let keys = load_keys(&cfg)?;
            let report = log.verify(&keys.sign_pk(), &cfg.node_id)?;
            if report.is_ok() {
                println!(
                    "audit log OK: {} entries, root {}, {} checkpoint(s) verified",
                    report.entries,
                    to_hex(&report.root),
                    report.checkpoints_checked
                );
                Ok(())
            } else {
                for f in &report.failures {
                    eprintln!("FAIL: {f}");
                }
                Err(Exit::failed(format!(
                    "audit log verification FAILED: {} problem(s) in {} entries",
                    report.failures.len(),
                    report.entries
                ))
                .into())
            }
        }
        AuditCmd::Export { jsonl: _, since } => {
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::new(stdout.lock());
            log.export_jsonl(since, &mut out)?;
            Ok(())
        }
        AuditCmd::Checkpoint => {
            let keys = load_keys(&cfg)?;
            // A fresh checkpoint of the current tree, signed and stored.
            let note = log.checkpoint(keys.signing_key(), &cfg.node_id)?;
            print!("{note}");
            Ok(())
        }
    };
    store.close();
    res
}
