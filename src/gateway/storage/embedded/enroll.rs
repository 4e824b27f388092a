//! Enrollment on the embedded store: tokens, their uses and enrollment records in KV,
//! each enrollment one commit with the trust row it changes (one peer's, `daemon::trust`)
//! and its pending audit entry (`enroll/audit.rs`). One process writes
//! uses and records (the gateway, under `enrolling`); `outpost enroll-token` writes
//! only the token records, so neither overwrites the other's writes.

mod audit;

use super::Embedded;
use crate::audit::AuditRecord;
use crate::envelope::{b64_encode, IdentityDocument, KeyRotation, Rotated, RotationError};
use crate::gateway::storage::{
    trust_node, Decision, EnrollmentRecord, Facts, Kind, RecordState, TokenRecord,
};
use crate::gateway::storage::{
    AuditExtension, EnrollmentState, Fut, PendingAudit, RetireAudit, SettleAudit, StateError,
};
use crate::store::names::{
    KV_GW_ENROLLMENTS, KV_GW_ENROLL_TOKENS, KV_GW_ENROLL_USES, KV_GW_ROTATION, Q_TO_NODE,
};
use crate::store::Batch;

fn record_key(node_id: &str, sign_pk: &str) -> String {
    format!("{node_id} {sign_pk}")
}

fn json<T: serde::Serialize>(v: &T) -> Vec<u8> {
    serde_json::to_vec(v).unwrap_or_default()
}

/// The reason messages of a retired node are refused with.
pub const NODE_REVOKED: &str = crate::enroll::codes::NODE_REVOKED;

/// The gateway's own key rotation, as stored (both engines keep this JSON).
#[derive(serde::Serialize, serde::Deserialize)]
pub(crate) struct GatewayRotation {
    pub statement: KeyRotation,
    pub until_ms: u64,
}

impl Embedded {
    fn gateway_rotation_now(&self) -> Result<Option<(KeyRotation, u64)>, StateError> {
        let Some(bytes) = self.store.kv_get(KV_GW_ROTATION, "current")? else {
            return Ok(None);
        };
        let r: GatewayRotation = serde_json::from_slice(&bytes)
            .map_err(|e| StateError::Corrupt(format!("gateway rotation: {e}")))?;
        Ok(Some((r.statement, r.until_ms)))
    }

    /// The trust store as far as peer `id` goes: its row alone (or nothing), so a decision
    /// reads and writes one peer whatever the number trusted.
    fn trust_of(&self, id: &str) -> Result<crate::envelope::TrustStore, StateError> {
        let mut t = crate::envelope::TrustStore::new();
        if let Some(p) =
            crate::daemon::trust::peer(&self.store, id).map_err(super::trust_corrupt)?
        {
            t.insert(p);
        }
        Ok(t)
    }

    /// Peer `id` as `t` holds it now, staged into `batch` (one row, one log entry).
    fn stage_trust(
        &self,
        batch: &mut Batch,
        t: &crate::envelope::TrustStore,
        id: &str,
    ) -> Result<(), StateError> {
        let change = crate::daemon::trust::Change::of(t, id);
        crate::daemon::trust::stage(&self.store, batch, &[change]).map_err(super::trust_corrupt)
    }

    fn uses(&self, token_id: &str) -> Result<u64, StateError> {
        Ok(self
            .store
            .kv_get(KV_GW_ENROLL_USES, token_id)?
            .and_then(|b| String::from_utf8(b).ok()?.parse().ok())
            .unwrap_or(0))
    }

    pub(super) fn token_now(&self, id: &str) -> Result<Option<TokenRecord>, StateError> {
        let Some(mut t) = self.kv_json::<TokenRecord>(KV_GW_ENROLL_TOKENS, id)? else {
            return Ok(None);
        };
        t.uses = self.uses(id)?;
        Ok(Some(t))
    }

    pub(super) fn tokens_now(&self) -> Result<Vec<TokenRecord>, StateError> {
        let mut out = Vec::new();
        for (id, _) in self.store.kv_list(KV_GW_ENROLL_TOKENS)? {
            out.extend(self.token_now(&id)?);
        }
        Ok(out)
    }

    pub(super) async fn token_add_now(
        &self,
        t: TokenRecord,
        audit: &AuditRecord,
    ) -> Result<(), StateError> {
        let mut batch = Batch::new();
        batch.kv_put(KV_GW_ENROLL_TOKENS, &t.claims.id, json(&t));
        self.pend(&mut batch, self.store.now_ms(), audit);
        self.store.commit(batch).await?;
        Ok(())
    }

    pub(super) async fn token_revoke_now(
        &self,
        id: &str,
        audit: &AuditRecord,
    ) -> Result<Option<bool>, StateError> {
        let Some(mut t) = self.kv_json::<TokenRecord>(KV_GW_ENROLL_TOKENS, id)? else {
            return Ok(None);
        };
        if t.revoked {
            return Ok(Some(false));
        }
        t.revoked = true;
        let mut batch = Batch::new();
        batch.kv_put(KV_GW_ENROLL_TOKENS, id, json(&t));
        self.pend(&mut batch, self.store.now_ms(), audit);
        self.store.commit(batch).await?;
        Ok(Some(true))
    }

    pub(super) fn records_now(&self) -> Result<Vec<EnrollmentRecord>, StateError> {
        self.store
            .kv_list(KV_GW_ENROLLMENTS)?
            .into_iter()
            .map(|(k, v)| {
                serde_json::from_slice(&v)
                    .map_err(|e| StateError::Corrupt(format!("{KV_GW_ENROLLMENTS}/{k}: {e}")))
            })
            .collect()
    }

    /// The records of one id: the rows keyed `<id> …`, not every record.
    fn records_of(&self, node_id: &str) -> Result<Vec<EnrollmentRecord>, StateError> {
        let prefix = record_key(node_id, "");
        let mut out = Vec::new();
        for (k, v) in self.store.kv_list_prefix(KV_GW_ENROLLMENTS, &prefix)? {
            let r: EnrollmentRecord = serde_json::from_slice(&v)
                .map_err(|e| StateError::Corrupt(format!("{KV_GW_ENROLLMENTS}/{k}: {e}")))?;
            if r.node_id == node_id {
                out.push(r);
            }
        }
        Ok(out)
    }

    pub(super) async fn enroll_now(
        &self,
        node: &IdentityDocument,
        token_id: &str,
        online: &[String],
        decide: &(dyn Fn(&Facts<'_>) -> Decision + Send + Sync),
    ) -> Result<Decision, StateError> {
        let _one = self.enrolling.lock().await;
        let token = self.token_now(token_id)?;
        let address = match &token {
            Some(t) => t.address_of(&node.node_id),
            None => node.node_id.clone(),
        };
        let key = b64_encode(&node.sign_pk);
        let records = self.records_of(&address)?;
        let same = records.iter().find(|r| r.node_sign_pk == key);
        let pending_other = records
            .iter()
            .any(|r| r.node_sign_pk != key && r.state == RecordState::Pending);
        let mut trust = self.trust_of(&address)?;
        let trusted = trust
            .get(&address)
            .filter(|p| p.doc.role == "node")
            .map(|p| p.doc.clone());
        let facts = Facts {
            now_ms: self.store.now_ms(),
            node,
            token: token.as_ref(),
            same,
            trusted: trusted.as_ref(),
            pending_other,
            online: online.contains(&address),
            tenant: self.tenant_room(crate::fleet::tenant::tenant_of(&address))?,
        };
        let decision = decide(&facts);
        if let Decision::Record {
            record,
            consume,
            audit,
        } = &decision
        {
            let mut batch = Batch::new();
            self.pend(&mut batch, facts.now_ms, audit);
            if *consume {
                let uses = token.as_ref().map_or(0, |t| t.uses) + 1;
                batch.kv_put(KV_GW_ENROLL_USES, token_id, uses.to_string().into_bytes());
            }
            batch.kv_put(
                KV_GW_ENROLLMENTS,
                &record_key(&record.node_id, &record.node_sign_pk),
                json(record),
            );
            let mut _labels = None;
            if record.state == RecordState::Enrolled {
                trust_node(&mut trust, &record.node_id, &record.document)
                    .map_err(StateError::Corrupt)?;
                self.stage_trust(&mut batch, &trust, &record.node_id)?;
                _labels = self
                    .stage_token_labels(&mut batch, &record.node_id, &record.labels)
                    .await?;
            }
            self.store.commit(batch).await?;
        }
        Ok(decision)
    }

    pub(super) async fn settle_now(
        &self,
        node_id: &str,
        approve: bool,
        now_ms: u64,
        by: &str,
        audit: &SettleAudit<'_>,
    ) -> Result<Option<EnrollmentRecord>, StateError> {
        let _one = self.enrolling.lock().await;
        let records = self.records_of(node_id)?;
        let mut trust = self.trust_of(node_id)?;
        let trusted = trust.get(node_id).map(|p| b64_encode(&p.doc.sign_pk));
        let Some(mut r) =
            crate::gateway::storage::settleable(&records, approve, trusted.as_deref())
        else {
            return Ok(None);
        };
        let mut batch = Batch::new();
        let mut _labels = None;
        r.decided_at_ms = Some(now_ms);
        r.decided_by = Some(by.to_string());
        if approve {
            r.state = RecordState::Enrolled;
            if r.kind == Kind::Rekey {
                // The key it replaces is retired: a device coming back with it is refused.
                let old = trusted;
                for mut o in records
                    .into_iter()
                    .filter(|o| Some(&o.node_sign_pk) == old.as_ref())
                {
                    o.state = RecordState::Revoked;
                    o.decided_at_ms = Some(now_ms);
                    o.decided_by = Some(by.to_string());
                    batch.kv_put(
                        KV_GW_ENROLLMENTS,
                        &record_key(node_id, &o.node_sign_pk),
                        json(&o),
                    );
                }
            }
            trust_node(&mut trust, &r.node_id, &r.document).map_err(StateError::Corrupt)?;
            self.stage_trust(&mut batch, &trust, node_id)?;
            _labels = self
                .stage_token_labels(&mut batch, node_id, &r.labels)
                .await?;
        } else {
            r.state = RecordState::Rejected;
        }
        batch.kv_put(
            KV_GW_ENROLLMENTS,
            &record_key(node_id, &r.node_sign_pk),
            json(&r),
        );
        self.pend(&mut batch, now_ms, &audit(&r));
        self.store.commit(batch).await?;
        Ok(Some(r))
    }

    pub(super) async fn revoke_node_now(
        &self,
        node_id: &str,
        now_ms: u64,
        by: &str,
        audit: &RetireAudit<'_>,
    ) -> Result<Option<Vec<String>>, StateError> {
        let _one = self.enrolling.lock().await;
        let mut trust = self.trust_of(node_id)?;
        let Some(doc) = trust
            .get(node_id)
            .filter(|p| p.doc.role == "node")
            .map(|p| p.doc.clone())
        else {
            return Ok(None);
        };
        trust.remove(node_id);
        let mut batch = Batch::new();
        for r in crate::gateway::storage::retired_records(
            self.records_of(node_id)?,
            node_id,
            &doc,
            now_ms,
            by,
        ) {
            batch.kv_put(
                KV_GW_ENROLLMENTS,
                &record_key(node_id, &r.node_sign_pk),
                json(&r),
            );
        }
        self.stage_trust(&mut batch, &trust, node_id)?;
        let mut ids = Vec::new();
        let mut after = None;
        loop {
            let page = self
                .store
                .list(Q_TO_NODE, Some(node_id), after.as_deref(), 1_000)?;
            ids.extend(page.items.into_iter().map(|m| m.message_id));
            match page.next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
        for id in &ids {
            batch.reject(Q_TO_NODE, node_id, id, NODE_REVOKED, now_ms);
        }
        self.pend(&mut batch, now_ms, &audit(&doc, ids.len()));
        self.store.commit(batch).await?;
        Ok(Some(ids))
    }

    pub(super) fn revoked_node_now(
        &self,
        node_id: &str,
    ) -> Result<Option<EnrollmentRecord>, StateError> {
        Ok(self
            .records_of(node_id)?
            .into_iter()
            .filter(|r| r.state == RecordState::Revoked)
            .max_by_key(|r| r.decided_at_ms))
    }
}

impl EnrollmentState for Embedded {
    fn enroll_token_add<'a>(&'a self, token: TokenRecord, audit: &'a AuditRecord) -> Fut<'a, ()> {
        Box::pin(self.token_add_now(token, audit))
    }

    fn enroll_tokens(&self) -> Fut<'_, Vec<TokenRecord>> {
        Box::pin(async move { self.tokens_now() })
    }

    fn enroll_token_revoke<'a>(
        &'a self,
        id: &'a str,
        audit: &'a AuditRecord,
    ) -> Fut<'a, Option<bool>> {
        Box::pin(self.token_revoke_now(id, audit))
    }

    fn enroll<'a>(
        &'a self,
        node: &'a IdentityDocument,
        token_id: &'a str,
        online: &'a [String],
        decide: &'a (dyn Fn(&Facts<'_>) -> Decision + Send + Sync),
    ) -> Fut<'a, Decision> {
        Box::pin(self.enroll_now(node, token_id, online, decide))
    }

    fn enrollments(&self) -> Fut<'_, Vec<EnrollmentRecord>> {
        Box::pin(async move { self.records_now() })
    }

    fn settle_enrollment<'a>(
        &'a self,
        node_id: &'a str,
        approve: bool,
        now_ms: u64,
        by: &'a str,
        audit: &'a SettleAudit<'a>,
    ) -> Fut<'a, Option<EnrollmentRecord>> {
        Box::pin(self.settle_now(node_id, approve, now_ms, by, audit))
    }

    fn revoke_node<'a>(
        &'a self,
        node_id: &'a str,
        now_ms: u64,
        by: &'a str,
        audit: &'a RetireAudit<'a>,
    ) -> Fut<'a, Option<Vec<String>>> {
        Box::pin(self.revoke_node_now(node_id, now_ms, by, audit))
    }

    fn revoked_node<'a>(&'a self, node_id: &'a str) -> Fut<'a, Option<EnrollmentRecord>> {
        Box::pin(async move { self.revoked_node_now(node_id) })
    }

    fn end_node_grace<'a>(
        &'a self,
        node_id: &'a str,
        now_ms: u64,
        audit: &'a AuditRecord,
    ) -> Fut<'a, Option<bool>> {
        Box::pin(async move {
            let _one = self.enrolling.lock().await;
            let mut trust = self.trust_of(node_id)?;
            let ended = trust.end_grace(node_id, now_ms);
            if ended == Some(true) {
                let mut batch = Batch::new();
                self.stage_trust(&mut batch, &trust, node_id)?;
                self.pend(&mut batch, now_ms, audit);
                self.store.commit(batch).await?;
            }
            Ok(ended)
        })
    }

    fn put_gateway_rotation<'a>(
        &'a self,
        rotation: &'a KeyRotation,
        until_ms: u64,
        audit: &'a AuditRecord,
    ) -> Fut<'a, ()> {
        Box::pin(async move {
            let _one = self.enrolling.lock().await;
            if self
                .gateway_rotation_now()?
                .is_some_and(|(r, _)| &r == rotation)
            {
                return Ok(());
            }
            let mut batch = Batch::new();
            batch.kv_put(
                KV_GW_ROTATION,
                "current",
                json(&GatewayRotation {
                    statement: rotation.clone(),
                    until_ms,
                }),
            );
            self.pend(&mut batch, self.store.now_ms(), audit);
            self.store.commit(batch).await?;
            Ok(())
        })
    }

    fn gateway_rotation(&self) -> Fut<'_, Option<(KeyRotation, u64)>> {
        Box::pin(async move { self.gateway_rotation_now() })
    }

    fn rotate_node<'a>(
        &'a self,
        address: &'a str,
        rotation: &'a KeyRotation,
        now_ms: u64,
        grace_ms: u64,
        audit: &'a AuditRecord,
    ) -> Fut<'a, Result<Rotated, RotationError>> {
        Box::pin(async move {
            let _one = self.enrolling.lock().await;
            let node_id = address;
            let mut trust = self.trust_of(node_id)?;
            match trust.rotate_at(address, rotation, now_ms, grace_ms) {
                Ok(Rotated::Applied) => {}
                other => return Ok(other),
            }
            let mut batch = Batch::new();
            self.stage_trust(&mut batch, &trust, node_id)?;
            let records = self.records_of(node_id)?;
            for r in crate::gateway::storage::rotated_records(records, rotation, now_ms) {
                batch.kv_put(
                    KV_GW_ENROLLMENTS,
                    &record_key(node_id, &r.node_sign_pk),
                    json(&r),
                );
            }
            self.pend(&mut batch, now_ms, audit);
            self.store.commit(batch).await?;
            Ok(Ok(Rotated::Applied))
        })
    }

    fn audit_pending(&self, max: usize) -> Fut<'_, Vec<PendingAudit>> {
        Box::pin(async move { self.pending_now(max) })
    }

    fn audit_append_pending<'a>(
        &'a self,
        node: &'a str,
        ext: AuditExtension,
        seqs: &'a [u64],
    ) -> Fut<'a, bool> {
        Box::pin(self.append_pending_now(node, ext, seqs))
    }
}
