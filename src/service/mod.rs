//! systemd integration: readiness/watchdog/status notifications, log routing to the
//! journal, and the shutdown signal.
//!
//! Everything here degrades to a no-op outside systemd (no `NOTIFY_SOCKET`, no
//! `JOURNAL_STREAM`), so the same binary runs in a terminal, in tests and on a Pi.

pub mod memory;

use std::time::Duration;

use sd_notify::NotifyState;

/// Thin wrapper over `sd_notify` that never fails the caller: a notification that
/// cannot be sent is logged once at debug level and otherwise ignored, because the
/// daemon's work must not depend on the supervisor being there.
#[derive(Debug, Clone, Copy, Default)]
pub struct Notifier;

impl Notifier {
    fn send(&self, state: &[NotifyState<'_>]) {
        if std::env::var_os("NOTIFY_SOCKET").is_none() {
            return;
        }
        if let Err(e) = sd_notify::notify(false, state) {
            tracing::debug!(event = "sd_notify_failed", error = %e);
        }
    }

    pub fn ready(&self) {
        self.send(&[NotifyState::Ready]);
    }

    pub fn watchdog(&self) {
        self.send(&[NotifyState::Watchdog]);
    }

    pub fn stopping(&self) {
        self.send(&[NotifyState::Stopping]);
    }

    pub fn status(&self, text: &str) {
        self.send(&[NotifyState::Status(text)]);
    }

    /// The watchdog interval systemd asked for (`WATCHDOG_USEC`), if any. We ping at
    /// half of it, as sd_watchdog_enabled(3) recommends.
    pub fn watchdog_interval(&self) -> Option<Duration> {
        let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
        if let Ok(pid) = std::env::var("WATCHDOG_PID") {
            if pid.parse::<u32>().ok() != Some(std::process::id()) {
                return None;
            }
        }
        (usec > 0).then(|| Duration::from_micros(usec / 2))
    }
}

/// Logs go to the journal when we run under it (`JOURNAL_STREAM` set by systemd),
/// otherwise to stderr. `OUTPOST_LOG` (else `RUST_LOG`) filters: [`log_filter`].
pub fn init_logging() {
    use tracing_subscriber::prelude::*;

    let (filter, refused) = log_filter(
        std::env::var("OUTPOST_LOG")
            .or_else(|_| std::env::var("RUST_LOG"))
            .ok()
            .as_deref(),
    );
    let registry = tracing_subscriber::registry().with(filter);
    if std::env::var_os("JOURNAL_STREAM").is_some() {
        if let Ok(journald) = tracing_journald::layer() {
            let _ = registry
                .with(journald.with_syslog_identifier("outpost".into()))
                .try_init();
            return;
        }
    }
    let _ = registry
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(log_colour(
                    std::io::IsTerminal::is_terminal(&std::io::stderr()),
                    std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty()),
                ))
                .with_target(false),
        )
        .try_init();
    if let Some(text) = refused {
        tracing::warn!(event = "log_filter_refused", filter = %text, "OUTPOST_LOG is `level` or `target=level,…` (levels: error, warn, info, debug, trace, off); logging at info");
    }
}

/// The log filter from `OUTPOST_LOG`: a level (`debug`), targets with levels
/// (`outpost::sync=debug,hyper=warn`: other targets silent), or both
/// (`warn,outpost=debug`). Unset or empty: `info`. Anything else: `info`, and the text
/// it refused (said once logging is up).
pub fn log_filter(text: Option<&str>) -> (tracing_subscriber::filter::Targets, Option<String>) {
    use tracing_subscriber::filter::{LevelFilter, Targets};
    let info = || Targets::new().with_default(LevelFilter::INFO);
    match text.map(str::trim).filter(|t| !t.is_empty()) {
        None => (info(), None),
        Some(t) => match t.parse::<Targets>() {
            Ok(f) => (f, None),
            Err(_) => (info(), Some(t.to_string())),
        },
    }
}

/// Colour codes only for a person at a terminal: a log file, a pipe or a collector gets
/// plain text (and `NO_COLOR`, <https://no-color.org>, turns them off everywhere).
pub fn log_colour(stderr_is_terminal: bool, no_color: bool) -> bool {
    stderr_is_terminal && !no_color
}

/// Resolves on the first SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    match (term, int) {
        (Ok(mut t), Ok(mut i)) => {
            tokio::select! {
                _ = t.recv() => tracing::info!(event = "signal", signal = "SIGTERM"),
                _ = i.recv() => tracing::info!(event = "signal", signal = "SIGINT"),
            }
        }
        _ => {
            // Cannot install handlers (should not happen on Linux): fall back to ctrl-c.
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

#[cfg(test)]
mod log_filter_tests {
    use super::log_filter;
    use tracing::Level;

    fn allows(text: Option<&str>, target: &str, level: Level) -> bool {
        let (f, _) = log_filter(text);
        f.would_enable(target, &level)
    }

    #[test]
    fn a_level_targets_and_both_filter_as_written() {
        assert!(allows(None, "outpost::sync", Level::INFO));
        assert!(!allows(None, "outpost::sync", Level::DEBUG));
        assert!(allows(Some("debug"), "hyper", Level::DEBUG));
        assert!(allows(
            Some("outpost::sync=debug"),
            "outpost::sync::worker",
            Level::DEBUG
        ));
        assert!(!allows(Some("outpost::sync=debug"), "hyper", Level::ERROR));
        assert!(allows(
            Some("warn,outpost=debug"),
            "outpost::gateway",
            Level::DEBUG
        ));
        assert!(allows(Some("warn,outpost=debug"), "hyper", Level::WARN));
        assert!(!allows(Some("warn,outpost=debug"), "hyper", Level::INFO));
        assert!(!allows(Some("off"), "outpost", Level::ERROR));
        assert_eq!(log_filter(Some("  ")).1, None);
    }

    #[test]
    fn a_filter_it_cannot_read_is_info_and_said() {
        let (_, refused) = log_filter(Some("outpost=loud"));
        assert_eq!(refused.as_deref(), Some("outpost=loud"));
        assert!(allows(Some("outpost=loud"), "outpost", Level::INFO));
        assert!(!allows(Some("outpost=loud"), "outpost", Level::DEBUG));
    }
}
