//! `outpost init`: keys (0600), identity document, an empty store, and a config file.
//! A gateway listening beyond loopback also gets a TLS certificate and key (0600) in its
//! data dir, unless the operator brings their own (`--tls-cert/--tls-key`) or opts out
//! (`--allow-plaintext`); its identity document carries the certificate's pin
//! (`tls_spki_sha256`, PROTOCOL §2.1), which is what its nodes verify it by.

use std::path::{Path, PathBuf};

use anyhow::Context;

use super::Exit;
use crate::app::keyfile;
use crate::config::{self, Role};
use crate::envelope::is_valid_node_id;

pub struct InitArgs {
    pub role: String,
    pub node_id: String,
    pub data_dir: Option<PathBuf>,
    pub config: Option<PathBuf>,
    pub listen: Option<String>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub allow_plaintext: bool,
    pub upstream_url: Option<String>,
    pub gateway_id: String,
    pub quiet: bool,
}

/// The gateway's TLS, as init sets it up.
enum TlsPlan {
    /// Plain HTTP (loopback, or `--allow-plaintext`).
    None,
    /// The operator's certificate and key, and the certificate's pin.
    Given {
        cert: PathBuf,
        key: PathBuf,
        pin: [u8; 32],
    },
    /// `tls.crt` and `tls.key` made in the data dir.
    Generate { cert: PathBuf, key: PathBuf },
}

/// Where a generated certificate and key go.
pub fn tls_paths(data_dir: &Path) -> (PathBuf, PathBuf) {
    (data_dir.join("tls.crt"), data_dir.join("tls.key"))
}

/// Makes a new identity, store and config, all or nothing; refuses to overwrite any.
pub fn init(a: InitArgs) -> anyhow::Result<()> {
    let role: Role = a.role.parse().map_err(Exit::usage)?;
    check_args(&a, role)?;
    // Absolute in the config, so `run` finds it from any working directory.
    let data_dir = std::path::absolute(
        a.data_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from(config::DEFAULT_DATA_DIR)),
    )?;
    // Resolved the way every other command resolves it: --config, then $OUTPOST_CONFIG,
    // then the default.
    let cfg_path = config::resolve_path(a.config.as_deref());
    let keys_path = keyfile::keys_path(&data_dir);
    if keys_path.exists() {
        return Err(Exit::failed(format!(
            "{} already holds keys; refusing to overwrite an identity",
            data_dir.display()
        ))
        .into());
    }
    if cfg_path.exists() {
        return Err(Exit::failed(format!(
            "{} exists; refusing to overwrite it",
            cfg_path.display()
        ))
        .into());
    }
    let tls = tls_plan(&a, role, &data_dir)?;
    let text = config_text(&a, role, &data_dir, &tls);
    // Check what we are about to write with the same code `config check` uses, before
    // anything is written.
    let cfg = config::from_str(&text).map_err(|e| Exit::usage(e.to_string()))?;

    // All or nothing: on any failure, remove what this init created, so that a retry is
    // not blocked by half an identity.
    let mut made = Made::default();
    let res = write_all(
        &a.node_id, role, &data_dir, &cfg_path, &keys_path, &text, &cfg, &tls, &mut made,
    );
    if res.is_err() {
        made.undo();
    }
    res?;

    if !a.quiet {
        summary(&a, role, &data_dir, &cfg_path, &keys_path, &tls);
    }
    Ok(())
}

/// Refuses a node id that is not one, and `--upstream-url` for a gateway (usage errors).
fn check_args(a: &InitArgs, role: Role) -> anyhow::Result<()> {
    if !is_valid_node_id(&a.node_id) {
        return Err(Exit::usage(format!(
            "--node-id {:?} must look like node:pump-17 (^[a-z][a-z0-9-]{{0,31}}:[A-Za-z0-9._-]{{1,64}}$)",
            a.node_id
        ))
        .into());
    }
    if a.upstream_url.is_some() && role == Role::Gateway {
        return Err(Exit::usage("--upstream-url is for nodes").into());
    }
    Ok(())
}

/// The config file init writes: the identity, the `[api]` the flags asked for (with
/// the TLS files of `tls`), and a node's `[upstream]`.
fn config_text(a: &InitArgs, role: Role, data_dir: &Path, tls: &TlsPlan) -> String {
    let mut text = format!(
        "[identity]\nnode_id = \"{}\"\nrole = \"{}\"\ndata_dir = \"{}\"\n",
        a.node_id,
        role.as_str(),
        data_dir.display()
    );
    let mut api = String::new();
    if let Some(l) = &a.listen {
        api.push_str(&format!("listen = \"{l}\"\n"));
    }
    match tls {
        TlsPlan::None => {}
        TlsPlan::Given { cert, key, .. } | TlsPlan::Generate { cert, key } => {
            api.push_str(&format!(
                "tls_cert_file = \"{}\"\ntls_key_file = \"{}\"\n",
                cert.display(),
                key.display()
            ));
        }
    }
    if a.allow_plaintext {
        api.push_str("allow_plaintext = true\n");
    }
    if !api.is_empty() {
        text.push_str(&format!("\n[api]\n{api}"));
    }
    if let Some(u) = &a.upstream_url {
        text.push_str(&format!(
            "\n[upstream]\nurl = \"{u}\"\ngateway_id = \"{}\"\n",
            a.gateway_id
        ));
    }
    text
}

/// What init made and what to do next, on stderr: progress, not data, so `TOKEN=$(outpost
/// token issue --dev …)` on a first use captures only the token.
fn summary(
    a: &InitArgs,
    role: Role,
    data_dir: &Path,
    cfg_path: &Path,
    keys_path: &Path,
    tls: &TlsPlan,
) {
    eprintln!("initialized {} ({})", a.node_id, role.as_str());
    eprintln!("  config   {}", cfg_path.display());
    eprintln!("  keys     {} (0600)", keys_path.display());
    eprintln!("  identity {}", keyfile::identity_path(data_dir).display());
    match tls {
        TlsPlan::None => {}
        TlsPlan::Given { cert, .. } => eprintln!("  tls      {} (yours)", cert.display()),
        TlsPlan::Generate { cert, key } => eprintln!(
            "  tls      {} and {} (0600), self-signed; nodes pin it through the identity document",
            cert.display(),
            key.display()
        ),
    }
    // The hints work as printed: they name the config unless it is the default.
    let with = if cfg_path == Path::new(config::DEFAULT_CONFIG_PATH) {
        String::new()
    } else {
        format!(" --config {}", cfg_path.display())
    };
    eprintln!("next: share the identity document with peers (`outpost identity --json{with}`) and add theirs with `outpost trust add FILE --send{with}`.");
}

/// Whether, and how, this gateway serves HTTPS.
fn tls_plan(a: &InitArgs, role: Role, data_dir: &Path) -> anyhow::Result<TlsPlan> {
    let given = match (&a.tls_cert, &a.tls_key) {
        (Some(c), Some(k)) => Some((std::path::absolute(c)?, std::path::absolute(k)?)),
        (None, None) => None,
        _ => return Err(Exit::usage("--tls-cert and --tls-key go together").into()),
    };
    if role != Role::Gateway {
        if given.is_some() || a.allow_plaintext {
            return Err(Exit::usage(
                "--tls-cert, --tls-key and --allow-plaintext are for a gateway (--role gateway)",
            )
            .into());
        }
        return Ok(TlsPlan::None);
    }
    if let Some((cert, key)) = given {
        if a.allow_plaintext {
            return Err(Exit::usage("--allow-plaintext and --tls-cert exclude each other").into());
        }
        let pin = crate::tls_pin::spki_sha256_of_pem_file(&cert).map_err(Exit::usage)?;
        // Refused now rather than at the first `run` (a build without the gateway
        // refuses `--role gateway` before this).
        #[cfg(feature = "gateway")]
        crate::gateway::tls::acceptor(&cert, &key).map_err(|e| Exit::usage(e.to_string()))?;
        return Ok(TlsPlan::Given { cert, key, pin });
    }
    let beyond_loopback = a
        .listen
        .as_deref()
        .and_then(|l| l.parse::<std::net::SocketAddr>().ok())
        .is_some_and(|l| !l.ip().is_loopback());
    if !beyond_loopback || a.allow_plaintext {
        return Ok(TlsPlan::None);
    }
    if !super::tls_gen::AVAILABLE {
        return Err(Exit::usage(
            "this build cannot generate a TLS certificate (built without the `tls-gen` \
             feature): give --tls-cert and --tls-key (PEM files), or --allow-plaintext \
             behind a TLS-terminating proxy",
        )
        .into());
    }
    let (cert, key) = tls_paths(data_dir);
    Ok(TlsPlan::Generate { cert, key })
}

/// What an init created, newest last, so a failed init can take it back.
#[derive(Default)]
struct Made {
    files: Vec<PathBuf>,
    dirs: Vec<PathBuf>,
}

impl Made {
    /// Creates `dir` and the missing directories above it, remembering the new ones.
    fn dir_all(&mut self, dir: &Path, private: bool) -> std::io::Result<()> {
        let mut missing = Vec::new();
        let mut d = Some(dir);
        while let Some(p) = d.filter(|p| !p.as_os_str().is_empty() && !p.exists()) {
            missing.push(p.to_path_buf());
            d = p.parent();
        }
        if private {
            keyfile::create_private_dir(dir)?;
        } else {
            std::fs::create_dir_all(dir)?;
        }
        self.dirs.extend(missing.into_iter().rev());
        Ok(())
    }

    fn undo(self) {
        for f in self.files.iter().rev() {
            let _ = std::fs::remove_file(f);
        }
        for d in self.dirs.iter().rev() {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn write_all(
    node_id: &str,
    role: Role,
    data_dir: &Path,
    cfg_path: &Path,
    keys_path: &Path,
    text: &str,
    cfg: &config::Config,
    tls: &TlsPlan,
    made: &mut Made,
) -> anyhow::Result<()> {
    made.dir_all(data_dir, true)
        .with_context(|| format!("creating {}", data_dir.display()))?;
    made.files.push(keys_path.to_path_buf());
    let keys = keyfile::create_keys(keys_path)?;
    let pin = match tls {
        TlsPlan::None => None,
        TlsPlan::Given { pin, .. } => Some(*pin),
        TlsPlan::Generate { cert, key } => {
            let made_tls = super::tls_gen::generate(node_id, cfg.listen.ip())
                .map_err(|e| anyhow::anyhow!("generating the TLS certificate: {e}"))?;
            made.files.push(key.clone());
            keyfile::write_atomic(key, made_tls.key_pem.as_bytes(), 0o600)
                .with_context(|| format!("writing {}", key.display()))?;
            made.files.push(cert.clone());
            keyfile::write_atomic(cert, made_tls.cert_pem.as_bytes(), 0o644)
                .with_context(|| format!("writing {}", cert.display()))?;
            Some(made_tls.pin)
        }
    };
    let doc = keyfile::new_identity(node_id, role, &keys, pin)?;
    made.files.push(keyfile::identity_path(data_dir));
    keyfile::write_identity(data_dir, &doc)?;

    let cfg_dir = keyfile::parent_dir(cfg_path);
    made.dir_all(cfg_dir, false)
        .with_context(|| format!("creating {}", cfg_dir.display()))?;
    made.files.push(cfg_path.to_path_buf());
    keyfile::write_atomic(cfg_path, text.as_bytes(), 0o644)
        .with_context(|| format!("writing {}", cfg_path.display()))?;
    // Create the store now, so the first `run` starts from a known schema.
    let store_dir = keyfile::store_dir(data_dir);
    if !store_dir.exists() {
        made.dirs.push(store_dir);
    }
    let store = crate::app::open_store(cfg, crate::clock::system())?;
    store.close();
    Ok(())
}
