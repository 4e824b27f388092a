//! `outpost run`: the daemon.

use super::common::load_config;
use super::{ConfigArg, Exit, EXIT_KEY_PERMISSIONS, EXIT_STORE_DAMAGED};
use crate::audit::AuditError;
use crate::envelope::KeyFileError;
use crate::store::StoreError;

pub fn run(arg: &ConfigArg) -> anyhow::Result<()> {
    let cfg = load_config(arg)?;
    // A config naming another identity cannot start, however often systemd retries.
    super::common::check_identity_matches(&cfg)?;
    // One daemon per data directory: a second one would serve the same store twice.
    let _owner = super::common::own_data_dir(&cfg)?;
    crate::service::init_logging();
    // A node named by identity.node_id_from makes its keys at its first start.
    // Without keys and without that setting, restarting cannot help: exit 64.
    let first =
        crate::app::keyfile::create_at_start(&cfg).map_err(|e| match e
            .downcast_ref::<crate::app::keyfile::NoKeys>()
        {
            Some(no) => Exit::usage(no.to_string()).into(),
            None => startup_refusal(&e).map_or(e, Into::into),
        })?;
    if first != crate::app::keyfile::FirstStart::Existing {
        tracing::info!(
            event = "identity_created",
            node_id = %cfg.node_id,
            completed = first == crate::app::keyfile::FirstStart::Completed,
            data_dir = %cfg.data_dir.display(),
        );
    }
    tracing::info!(
        event = "starting",
        node_id = %cfg.node_id,
        role = %cfg.role,
        version = env!("CARGO_PKG_VERSION"),
        config = ?cfg.sources,
        store = %cfg.store_description(),
    );
    crate::roles::run_blocking(cfg).map_err(|e| match startup_refusal(&e) {
        Some(exit) => exit.into(),
        None => e,
    })
}

/// A start that restarting cannot fix, as one line that says what to do next and a
/// dedicated exit code (listed in the units' `RestartPreventExitStatus`).
pub fn startup_refusal(e: &anyhow::Error) -> Option<Exit> {
    for cause in e.chain() {
        // Stated once: the error's own text already carries the OS reason, which
        // `{:#}` would repeat as its source.
        if let Some(crate::roles::StartError::Bind { addr, source }) = cause.downcast_ref() {
            let hint = match source.kind() {
                std::io::ErrorKind::AddrInUse => {
                    "; another process listens there (another `outpost run`?): stop it or change api.listen"
                }
                std::io::ErrorKind::PermissionDenied => {
                    "; ports below 1024 need privileges: use a higher port in api.listen"
                }
                std::io::ErrorKind::AddrNotAvailable => {
                    "; no interface has that address: fix api.listen"
                }
                _ => "",
            };
            return Some(Exit::failed(format!("cannot bind {addr}: {source}{hint}")));
        }
        let damage = match cause.downcast_ref::<StoreError>() {
            Some(StoreError::Corrupt(m)) => Some(m.clone()),
            _ => match cause.downcast_ref::<AuditError>() {
                Some(AuditError::Corrupt(m)) => Some(format!("audit log: {m}")),
                _ => None,
            },
        };
        if let Some(why) = damage {
            return Some(Exit {
                code: EXIT_STORE_DAMAGED,
                message: format!(
                    "store damaged, refusing to start ({why}). Keep the data directory as it \
                     is, run `outpost doctor`, then restore from a backup (OPERATIONS.md, \
                     \"Exit codes\")"
                ),
            });
        }
        if let Some(KeyFileError::Permissions { path, mode }) = cause.downcast_ref() {
            return Some(Exit {
                code: EXIT_KEY_PERMISSIONS,
                message: format!(
                    "key file {} has unsafe permissions (mode {mode:o}), refusing to start: \
                     run `chmod 600 {}` (and check who could have read it)",
                    path.display(),
                    path.display()
                ),
            });
        }
    }
    None
}
