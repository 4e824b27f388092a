//! Who may talk to the gateway, shared by every replica: the enrolled peers (the trust
//! store, cached per replica and refreshed on `NOTIFY`), token revocations (cached, and
//! refused when the cache cannot be refreshed), and the replay window of signed node
//! requests.

use super::super::{GatewayState, RevocationList, Revoked, StateError, TrustEdit};
use super::trust_copy::TrustCopy;
use super::{i, listen, u, unavailable, Postgres};
use crate::audit::AuditRecord;
use crate::envelope::{Peer, Rights, TrustStore};

#[derive(Default)]
pub(super) struct Revocations {
    version: u64,
    pub(super) jtis: std::collections::HashSet<String>,
    /// When the list was last read successfully (0 = never).
    fresh_at_ms: u64,
}

/// A revocation list older than this is not trusted: tokens are refused (503) until
/// the database answers again, rather than honouring one revoked meanwhile.
const REVOCATIONS_STALE_MS: u64 = 15_000;

/// Database reads of one peer's enrolment ([`Postgres::refresh_peer_now`]) at once.
pub(super) const PEER_LOOKUPS: usize = 4;

impl Postgres {
    pub(super) async fn refresh_revocations(&self) -> Result<(), StateError> {
        let since = self.read_revocations().version;
        let list = self.revocations(since).await?;
        let now = self.now_ms();
        let mut r = self.revoked.write().unwrap_or_else(|p| p.into_inner());
        r.jtis.extend(list.revoked);
        r.version = r.version.max(list.version);
        r.fresh_at_ms = now;
        Ok(())
    }

    pub(super) fn read_revocations(&self) -> std::sync::RwLockReadGuard<'_, Revocations> {
        self.revoked.read().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) async fn refresh_trust(&self) -> Result<(), StateError> {
        let c = self.pool.get().await?;
        let rows = c
            .query(
                "SELECT document, may_send, may_issue, rotation, node_id FROM peers ORDER BY node_id",
                &[],
            )
            .await
            .map_err(unavailable)?;
        let mut t = TrustStore::new();
        for r in rows {
            t.insert(peer_row(&r)?);
        }
        let mut g = self.trust.write().unwrap_or_else(|p| p.into_inner());
        match &mut *g {
            Some(copy) => copy.replace(t),
            None => *g = Some(TrustCopy::new(t)),
        }
        Ok(())
    }

    /// Put what the database has at some addresses into the replica's copy: `held` are
    /// the addresses of the copy the read covered (those not `found` are gone).
    fn put_peers(&self, held: impl FnOnce(&TrustStore) -> Vec<String>, found: Vec<Peer>) {
        let mut g = self.trust.write().unwrap_or_else(|p| p.into_inner());
        // Not read whole yet: the first full read (at open) brings these too.
        if let Some(copy) = &mut *g {
            let held = held(copy.peers());
            copy.put(held, found);
        }
    }

    /// The peers at `addresses` read again (another replica's `NOTIFY` named them):
    /// one indexed read for the lot.
    pub(super) async fn refresh_peers_now(&self, addresses: &[String]) -> Result<(), StateError> {
        let c = self.pool.get().await?;
        let rows = c
            .query(
                "SELECT document, may_send, may_issue, rotation, node_id FROM peers
                 WHERE node_id = ANY($1)",
                &[&addresses],
            )
            .await
            .map_err(unavailable)?;
        let found = rows.iter().map(peer_row).collect::<Result<Vec<_>, _>>()?;
        self.put_peers(
            |copy| {
                addresses
                    .iter()
                    .filter(|a| copy.get(a).is_some())
                    .cloned()
                    .collect()
            },
            found,
        );
        Ok(())
    }

    /// Read `node_id`'s enrolment from the database into the replica's copy: a lookup
    /// that missed may be ahead of this replica's `NOTIFY` (`trust add` on another host,
    /// or a moment ago). One indexed read; at most [`PEER_LOOKUPS`] at once, so a flood
    /// of requests naming unknown nodes cannot load the database.
    /// `node_id` is an address (one peer) or a node id: then the peers of that id in
    /// every tenant (PROTOCOL §18), each by its primary key.
    pub(super) async fn refresh_peer_now(&self, node_id: &str) -> Result<(), StateError> {
        let _permit = self
            .peer_lookups
            .acquire()
            .await
            .map_err(|_| StateError::Unavailable("shutting down".into()))?;
        let c = self.pool.get().await?;
        let rows = if node_id.contains('@') {
            c.query(
                "SELECT document, may_send, may_issue, rotation, node_id FROM peers
                 WHERE node_id = $1",
                &[&node_id],
            )
            .await
        } else {
            c.query(
                "SELECT document, may_send, may_issue, rotation, node_id FROM peers
                 WHERE node_id = $1 OR node_id IN (SELECT $1 || '@' || name FROM tenants)",
                &[&node_id],
            )
            .await
        }
        .map_err(unavailable)?;
        let found = rows.iter().map(peer_row).collect::<Result<Vec<_>, _>>()?;
        self.put_peers(
            |copy| {
                if node_id.contains('@') {
                    copy.get(node_id).map(|p| p.address()).into_iter().collect()
                } else {
                    copy.with_node_id(node_id).map(|p| p.address()).collect()
                }
            },
            found,
        );
        Ok(())
    }

    /// Apply `edit` (what `outpost trust add/rm` changed) to the peer rows, with `audit`
    /// pending in the same transaction, and tell every replica. Rows the edit does not
    /// name are not touched: a node a replica enrolls meanwhile stays.
    pub(super) async fn save_trust_now(
        &self,
        edit: &TrustEdit,
        audit: &[AuditRecord],
    ) -> Result<(), StateError> {
        let (mut ids, mut roles, mut docs, mut send, mut issue) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut rotations: Vec<Option<String>> = Vec::new();
        for p in &edit.put {
            rotations.push(p.rotation_row());
            ids.push(p.address());
            roles.push(p.doc.role.clone());
            docs.push(
                serde_json::to_string(&p.doc)
                    .map_err(|e| StateError::Corrupt(format!("identity document: {e}")))?,
            );
            send.push(p.rights.send);
            issue.push(p.rights.issue);
        }
        let mut c = self.pool.get().await?;
        let tx = c.transaction().await.map_err(unavailable)?;
        // Only what changed is written: one `trust add` to a fleet of thousands touches
        // one row.
        tx.execute("DELETE FROM peers WHERE node_id = ANY($1)", &[&edit.remove])
            .await
            .map_err(unavailable)?;
        tx.execute(
            "INSERT INTO peers (node_id, role, document, may_send, may_issue, added_at_ms, rotation)
             SELECT n, r, d, s, i, $6, o
             FROM unnest($1::text[], $2::text[], $3::text[], $4::bool[], $5::bool[], $7::text[])
                  AS x(n, r, d, s, i, o)
             ON CONFLICT (node_id) DO UPDATE
                 SET role = excluded.role, document = excluded.document,
                     may_send = excluded.may_send, may_issue = excluded.may_issue,
                     rotation = excluded.rotation
                 WHERE (peers.role, peers.document, peers.may_send, peers.may_issue, peers.rotation)
                       IS DISTINCT FROM
                       (excluded.role, excluded.document, excluded.may_send, excluded.may_issue,
                        excluded.rotation)",
            &[&ids, &roles, &docs, &send, &issue, &i(self.now_ms()), &rotations],
        )
        .await
        .map_err(unavailable)?;
        let now = self.now_ms();
        for a in audit {
            super::own_audit::pend(&tx, now, a).await?;
        }
        tx.execute("SELECT pg_notify($1, '')", &[&listen::CH_TRUST])
            .await
            .map_err(unavailable)?;
        tx.commit().await.map_err(unavailable)?;
        self.refresh_trust().await
    }

    /// Record a node request's signature; false when any replica saw it before.
    pub(super) async fn first_use_now(
        &self,
        signature: &[u8; 64],
        keep_until_ms: u64,
    ) -> Result<bool, StateError> {
        let mut c = self.pool.get().await?;
        let sig: String = signature.iter().map(|b| format!("{b:02x}")).collect();
        // Relaxed commit: a replay window that loses its last moments only if
        // PostgreSQL itself crashes (each replica also keeps its own in memory).
        let st = c
            .prep(
                "INSERT INTO seen_signatures (signature, keep_until_ms) VALUES ($1, $2)
                 ON CONFLICT DO NOTHING RETURNING 1",
            )
            .await?;
        let rows = c.query_relaxed(&st, &[&sig, &i(keep_until_ms)]).await?;
        Ok(rows.len() == 1)
    }

    pub(super) fn is_revoked_now(&self, jti: &str) -> Result<bool, StateError> {
        let r = self.read_revocations();
        if r.jtis.contains(jti) {
            return Ok(true);
        }
        if self.now_ms().saturating_sub(r.fresh_at_ms) > REVOCATIONS_STALE_MS {
            return Err(StateError::Unavailable(
                "the revocation list could not be refreshed from the database".into(),
            ));
        }
        Ok(false)
    }
}

pub(super) async fn revoke(
    pg: &Postgres,
    jti: &str,
    audit: &AuditRecord,
) -> Result<Revoked, StateError> {
    let mut c = pg.pool.get().await?;
    let tx = c.transaction().await.map_err(unavailable)?;
    // Versions are assigned one at a time, across replicas.
    tx.execute("LOCK TABLE revocations IN EXCLUSIVE MODE", &[])
        .await
        .map_err(unavailable)?;
    if tx
        .query_opt("SELECT 1 FROM revocations WHERE jti = $1", &[&jti])
        .await
        .map_err(unavailable)?
        .is_some()
    {
        return Ok(Revoked::Duplicate);
    }
    let version: i64 = tx
        .query_one(
            "INSERT INTO revocations (version, jti, revoked_at_ms)
             SELECT coalesce(max(version), 0) + 1, $1, $2 FROM revocations
             RETURNING version",
            &[&jti, &i(pg.now_ms())],
        )
        .await
        .map_err(unavailable)?
        .get(0);
    super::own_audit::pend(&tx, pg.now_ms(), audit).await?;
    tx.execute("SELECT pg_notify($1, $2)", &[&listen::CH_REVOKED, &jti])
        .await
        .map_err(unavailable)?;
    tx.commit().await.map_err(unavailable)?;
    let mut r = pg.revoked.write().unwrap_or_else(|p| p.into_inner());
    r.jtis.insert(jti.to_string());
    Ok(Revoked::Added {
        version: u(version),
    })
}

pub(super) async fn revocations(pg: &Postgres, since: u64) -> Result<RevocationList, StateError> {
    let c = pg.pool.get().await?;
    let rows = c
        .query(
            "SELECT version, jti FROM revocations WHERE version > $1 ORDER BY version",
            &[&i(since)],
        )
        .await
        .map_err(unavailable)?;
    let newest: i64 = c
        .query_one("SELECT coalesce(max(version), 0) FROM revocations", &[])
        .await
        .map_err(unavailable)?
        .get(0);
    Ok(RevocationList {
        revoked: rows.iter().map(|r| r.get(1)).collect(),
        version: u(newest),
    })
}

/// A `peers` row (`document, may_send, may_issue, rotation, node_id`), verified as
/// [`TrustStore::add`] and [`Peer::with_rotation_row`] verify; `node_id` is the peer's
/// address, which names its tenant (PROTOCOL §18) and must name its document's id.
pub(super) fn peer_row(r: &tokio_postgres::Row) -> Result<Peer, StateError> {
    let corrupt = |e: &dyn std::fmt::Display| StateError::Corrupt(format!("peers: {e}"));
    let doc: crate::envelope::IdentityDocument =
        serde_json::from_str(r.get::<_, &str>(0)).map_err(|e| corrupt(&e))?;
    let rights = Rights {
        send: r.get(1),
        issue: r.get(2),
    };
    let address: &str = r.get(4);
    let (id, tenant) = crate::fleet::tenant::split_address(address);
    if id != doc.node_id {
        return Err(corrupt(&format!(
            "row {address} holds the document of {}",
            doc.node_id
        )));
    }
    let mut one = TrustStore::new();
    one.add_in(doc, rights, Some(tenant))
        .map_err(|e| corrupt(&e))?;
    let peer = one.remove(address).ok_or_else(|| corrupt(&"vanished"))?;
    peer.with_rotation_row(r.get::<_, Option<&str>>(3))
        .map_err(|e| corrupt(&e))
}
