//! `[store] engine = "postgres"`: where a database-backed gateway keeps its state.

use std::path::PathBuf;

use super::{raw, Role};

/// Where a database-backed gateway keeps its state.
#[derive(Clone)]
pub struct PostgresConfig {
    /// The connection URL; may hold a password, so it is never printed whole.
    pub url: String,
    pub pool: u32,
    pub ca_file: Option<PathBuf>,
}

impl std::fmt::Debug for PostgresConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresConfig")
            .field("url", &redact_url(&self.url))
            .field("pool", &self.pool)
            .field("ca_file", &self.ca_file)
            .finish()
    }
}

/// `postgres://user:secret@host/db` → `postgres://user:***@host/db`.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (auth, host) = match rest.rsplit_once('@') {
        Some(x) => x,
        None => return url.to_string(),
    };
    match auth.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_string(),
    }
}

pub(super) fn postgres_config(
    raw: &raw::RawStore,
    role: Role,
    errs: &mut Vec<String>,
) -> Option<PostgresConfig> {
    if role != Role::Gateway {
        errs.push(
            "store.engine = \"postgres\" is for the gateway role only: a node keeps its store on its own disk"
                .into(),
        );
        return None;
    }
    if !cfg!(feature = "postgres") {
        errs.push("store.engine = \"postgres\" needs a build with the `postgres` feature".into());
        return None;
    }
    let Some(url) = raw.postgres_url.clone() else {
        errs.push("store.engine = \"postgres\" needs store.postgres_url".into());
        return None;
    };
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        errs.push(format!(
            "store.postgres_url must start with postgres:// (got {})",
            redact_url(&url)
        ));
        return None;
    }
    let pool = raw.postgres_pool.unwrap_or(16);
    if !(1..=256).contains(&pool) {
        errs.push(format!("store.postgres_pool must be 1..=256 (got {pool})"));
        return None;
    }
    Some(PostgresConfig {
        url,
        pool,
        ca_file: raw.postgres_ca_file.clone(),
    })
}
