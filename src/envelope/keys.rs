//! This process's secret keys: an Ed25519 signing key and a *separate* X25519 key.
//!
//! The two keys are generated independently from the OS RNG, never derived from each other,
//! so a weakness in one use (signatures vs key agreement) cannot leak the other. Both
//! dalek types zeroize themselves on drop; the key file text is held in `Zeroizing` buffers.
//!
//! The key file is the only I/O in this module tree: JSON `{"v":1,"sign_sk":b64,"kex_sk":b64}`
//! (Ed25519 seed and X25519 scalar, 32 bytes each), mode 0600, written atomically.

use std::fmt;
use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};
use rand_core::{CryptoRng, OsRng, RngCore};
use serde::{Deserialize, Serialize};
use x25519_dalek::{PublicKey as KexPublicKey, StaticSecret};
use zeroize::{Zeroize, Zeroizing};

use super::pae::{b64_decode, b64_encode};

/// Errors of loading or saving the key file. Messages name the path but never key bytes.
#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    #[error("key file {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "key file {path} is readable by group or others (mode {mode:o}); run `chmod 600 {path}`"
    )]
    Permissions { path: PathBuf, mode: u32 },
    #[error("key file {path} is malformed: {reason}")]
    Malformed { path: PathBuf, reason: &'static str },
    #[error("key file {path} already exists; refusing to overwrite an identity")]
    Exists { path: PathBuf },
}

/// The identity's secret keys. Zeroized on drop (both fields are `ZeroizeOnDrop`).
pub struct Keys {
    sign: SigningKey,
    kex: StaticSecret,
    /// `kex`'s public key, computed once (a scalar multiplication each time otherwise;
    /// every HPKE open needs it).
    kex_pk: KexPublicKey,
}

impl fmt::Debug for Keys {
    /// Only public halves: secrets must never reach logs, even via `{:?}`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keys")
            .field("sign_pk", &b64_encode(self.sign_pk().as_bytes()))
            .field("kex_pk", &b64_encode(self.kex_pk().as_bytes()))
            .finish_non_exhaustive()
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyFile {
    v: u32,
    sign_sk: String,
    kex_sk: String,
}

impl Drop for KeyFile {
    fn drop(&mut self) {
        self.sign_sk.zeroize();
        self.kex_sk.zeroize();
    }
}

impl Keys {
    /// Fresh keys from the OS RNG.
    pub fn generate() -> Self {
        Self::generate_with(&mut OsRng)
    }

    /// Fresh keys from `rng` (tests and vectors pass a seeded RNG). Two independent draws.
    pub fn generate_with<R: RngCore + CryptoRng>(rng: &mut R) -> Self {
        let sign = SigningKey::generate(rng);
        let kex = StaticSecret::random_from_rng(rng);
        let kex_pk = KexPublicKey::from(&kex);
        Self { sign, kex, kex_pk }
    }

    /// Build from raw secrets (Ed25519 seed, X25519 scalar); used for known-answer vectors.
    pub fn from_secret_bytes(sign_seed: &[u8; 32], kex_sk: &[u8; 32]) -> Self {
        let kex = StaticSecret::from(*kex_sk);
        Self {
            sign: SigningKey::from_bytes(sign_seed),
            kex_pk: KexPublicKey::from(&kex),
            kex,
        }
    }

    pub fn sign_pk(&self) -> VerifyingKey {
        self.sign.verifying_key()
    }

    pub fn kex_pk(&self) -> KexPublicKey {
        self.kex_pk
    }

    /// X25519 of our key-exchange secret with `their` public key (HPKE's `DH(skR, pkE)`).
    pub(crate) fn kex_diffie_hellman(&self, their: &[u8; 32]) -> zeroize::Zeroizing<[u8; 32]> {
        super::x25519::agree_once(&zeroize::Zeroizing::new(self.kex.to_bytes()), their)
    }

    /// Ed25519 signature (deterministic, RFC 8032).
    pub fn sign(&self, msg: &[u8]) -> [u8; 64] {
        self.sign.sign(msg).to_bytes()
    }

    /// Borrowed (never copied out), so it is still zeroized with `Keys`.
    pub fn signing_key(&self) -> &SigningKey {
        &self.sign
    }

    /// X25519 secret scalar bytes, for handing to HPKE (which takes its own copy).
    pub(crate) fn kex_secret_bytes(&self) -> Zeroizing<[u8; 32]> {
        Zeroizing::new(self.kex.to_bytes())
    }

    /// Write the key file atomically with mode 0600: temp file (created 0600) → write →
    /// fsync → rename → fsync the directory. Refuses to replace an existing file so an
    /// identity is never lost by a repeated `init`.
    pub fn save(&self, path: &Path) -> Result<(), KeyFileError> {
        let io = |source| KeyFileError::Io {
            path: path.to_path_buf(),
            source,
        };
        if path.exists() {
            return Err(KeyFileError::Exists {
                path: path.to_path_buf(),
            });
        }
        let file = KeyFile {
            v: 1,
            sign_sk: b64_encode(self.sign.as_bytes()),
            kex_sk: b64_encode(&self.kex_secret_bytes()[..]),
        };
        let text = Zeroizing::new(serde_json::to_vec(&file).map_err(|e| io(e.into()))?);
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
        let result = (|| {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(&text)?;
            f.sync_all()?;
            drop(f);
            std::fs::rename(&tmp, path)?;
            std::fs::File::open(dir)?.sync_all()
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result.map_err(io)
    }

    /// Load the key file, refusing it if group or others can read or write it: a leaked
    /// signing key lets anyone impersonate this node, so we fail loudly rather than run.
    pub fn load(path: &Path) -> Result<Self, KeyFileError> {
        let io = |source| KeyFileError::Io {
            path: path.to_path_buf(),
            source,
        };
        let malformed = |reason| KeyFileError::Malformed {
            path: path.to_path_buf(),
            reason,
        };
        let meta = std::fs::metadata(path).map_err(io)?;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(KeyFileError::Permissions {
                path: path.to_path_buf(),
                mode,
            });
        }
        let text = Zeroizing::new(std::fs::read(path).map_err(io)?);
        let file: KeyFile =
            serde_json::from_slice(&text).map_err(|_| malformed("not the expected JSON object"))?;
        if file.v != 1 {
            return Err(malformed("unsupported key file version"));
        }
        let sign = decode_secret(&file.sign_sk)
            .ok_or_else(|| malformed("sign_sk is not 32 bytes of base64url"))?;
        let kex = decode_secret(&file.kex_sk)
            .ok_or_else(|| malformed("kex_sk is not 32 bytes of base64url"))?;
        Ok(Self::from_secret_bytes(&sign, &kex))
    }
}

fn decode_secret(text: &str) -> Option<Zeroizing<[u8; 32]>> {
    let v = Zeroizing::new(b64_decode(text).ok()?);
    let mut out = Zeroizing::new([0u8; 32]);
    if v.len() != 32 {
        return None;
    }
    out.copy_from_slice(&v);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn save_load_roundtrip_with_mode_0600() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.json");
        let k = Keys::generate();
        k.save(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let back = Keys::load(&path).unwrap();
        assert_eq!(back.sign_pk(), k.sign_pk());
        assert_eq!(back.kex_pk().as_bytes(), k.kex_pk().as_bytes());
        assert!(matches!(k.save(&path), Err(KeyFileError::Exists { .. })));
        // No temp files left behind.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn load_refuses_group_or_world_readable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.json");
        Keys::generate().save(&path).unwrap();
        for mode in [0o640, 0o604, 0o660] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let err = Keys::load(&path).unwrap_err();
            assert!(matches!(err, KeyFileError::Permissions { .. }), "{mode:o}");
            assert!(err.to_string().contains("chmod 600"));
        }
    }

    #[test]
    fn load_refuses_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.json");
        std::fs::write(&path, b"{\"v\":1,\"sign_sk\":\"AA\",\"kex_sk\":\"AA\"}").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(matches!(
            Keys::load(&path),
            Err(KeyFileError::Malformed { .. })
        ));
    }

    #[test]
    fn debug_prints_no_secret() {
        let k = Keys::from_secret_bytes(&[7u8; 32], &[9u8; 32]);
        let dbg = format!("{k:?}");
        assert!(!dbg.contains(&b64_encode(&[7u8; 32])));
        assert!(!dbg.contains(&b64_encode(&[9u8; 32])));
        assert!(dbg.contains(&b64_encode(k.sign_pk().as_bytes())));
    }

    #[test]
    fn keys_are_independent() {
        let k = Keys::generate();
        assert_ne!(k.sign.as_bytes(), &k.kex.to_bytes());
    }
}
