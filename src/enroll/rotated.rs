//! A token made before its gateway rotated its keys (PROTOCOL §15.7): the hello's
//! rotation statement links the token's pinned keys to the gateway's new document.

use sha2::{Digest, Sha256};

use super::{fingerprint, EnrollError, Token};
use crate::envelope::{b64_encode, IdentityDocument};

impl Token {
    /// [`Token::check_gateway`] for a gateway that may have rotated its keys since the
    /// token was made: a token pinning the retired keys is accepted when `rotation`
    /// (both signatures checked) retires exactly those keys for `doc`, and the retired
    /// key signed the token.
    pub fn check_gateway_rotated(
        &self,
        doc: &IdentityDocument,
        rotation: Option<&crate::envelope::KeyRotation>,
    ) -> Result<(), EnrollError> {
        let Some(rot) = rotation.filter(|_| fingerprint(doc) != self.claims.gateway_fp) else {
            return self.check_gateway(doc);
        };
        let wrong = |why: String| EnrollError::WrongGateway(why);
        doc.verify().map_err(|e| wrong(e.to_string()))?;
        if rot.new_doc != *doc || doc.role != "gateway" || doc.node_id != self.claims.gateway_id {
            return Err(wrong(format!(
                "{} sent a key rotation for another document",
                doc.node_id
            )));
        }
        let (old, _) = rot.verify().map_err(|e| wrong(e.to_string()))?;
        let mut h = Sha256::new();
        h.update(&rot.old_sign_pk);
        h.update(&rot.old_kex_pk);
        if b64_encode(&h.finalize()) != self.claims.gateway_fp || !self.verify(&old) {
            return Err(wrong(format!(
                "{} answers with keys other than the token's fingerprint, and its key \
                 rotation does not retire the token's keys (an impersonator?)",
                doc.node_id
            )));
        }
        Ok(())
    }
}
