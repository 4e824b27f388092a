//! `outpost nodes …`'s subcommands on the gateway host: enrollments waiting for an
//! operator (pending, approve, reject), retiring a node and ending a key's grace, and a
//! node's labels, detail and desired state (`gw_fleet.rs`).

use std::time::Duration;

use clap::Subcommand;
use serde_json::json;

use super::fleet;
use super::table::ago;
use super::Client;
use crate::cli::{ConfigArg, Exit};

/// `outpost nodes …`: enrollments waiting for an operator, and retiring a node.
#[derive(Debug, Subcommand)]
pub enum NodesCmd {
    /// Enrollments waiting for approval (manual tokens, and re-keys of reflashed devices).
    Pending {
        /// `GET /v1/enrollments` as JSON, one line.
        #[arg(long)]
        json: bool,
    },
    /// Trust a pending enrollment (a re-key retires the device's old key).
    Approve {
        /// The node ids (one or more).
        #[arg(required_unless_present = "all_from_token")]
        ids: Vec<String>,
        /// Every device waiting with this enrollment token (`enroll-token list`).
        #[arg(long, conflicts_with = "ids")]
        all_from_token: Option<String>,
    },
    /// Refuse pending enrollments; the devices stay out.
    Reject {
        /// The node ids (one or more).
        #[arg(required_unless_present = "all_from_token")]
        ids: Vec<String>,
        /// Every device waiting with this enrollment token.
        #[arg(long, conflicts_with = "ids")]
        all_from_token: Option<String>,
    },
    /// Retire a node: its requests are refused (node_revoked), its queue is refused with
    /// that reason; a reflashed device can enroll again with a new token.
    Revoke {
        /// The node id.
        id: String,
    },
    /// The node's key was stolen and it has already rotated: refuse its retired key now
    /// instead of at the end of the 7-day grace (PROTOCOL §15.7). Messages it signed
    /// with that key and has not uploaded yet are refused too.
    EndGrace {
        /// The node id.
        id: String,
    },
    /// Set (`key=value`) or remove (`key-`) labels of a node, e.g. `site=south role-`.
    Label {
        /// The node id.
        id: String,
        /// `key=value` to set, `key-` to remove.
        #[arg(required = true)]
        changes: Vec<String>,
    },
    /// One node: liveness, labels, inventory, desired and reported state.
    Show {
        /// The node id.
        id: String,
        /// `GET /v1/nodes/{id}` as JSON, one line.
        #[arg(long)]
        json: bool,
    },
    /// Write a node's desired state: a whole document (--set) or a merge patch (--merge).
    Desired {
        /// The node id.
        id: String,
        /// The whole document, JSON.
        #[arg(long, conflicts_with = "merge", required_unless_present = "merge")]
        set: Option<String>,
        /// An RFC 7396 merge patch, JSON (null removes a member).
        #[arg(long)]
        merge: Option<String>,
        /// Only if the document is at this version now (else nothing is written).
        #[arg(long)]
        if_match: Option<u64>,
    },
}

/// `outpost nodes pending|approve|reject|revoke`.
pub(super) fn nodes_cmd(arg: &ConfigArg, cmd: NodesCmd) -> anyhow::Result<()> {
    let c = Client::open(arg)?;
    let t = Duration::from_secs(20);
    match cmd {
        NodesCmd::Pending { json } => {
            let (_, v) = c.call("GET", "/v1/enrollments?state=pending", None, &[], t)?;
            if json {
                println!("{}", serde_json::to_string(&v)?);
                return Ok(());
            }
            let list: PendingList = serde_json::from_value(v)
                .map_err(|e| Exit::failed(format!("the gateway's enrollment list: {e}")))?;
            if list.enrollments.is_empty() {
                println!("no enrollment is waiting for approval");
            }
            let now = crate::clock::system().now_ms();
            for e in &list.enrollments {
                println!("{}", pending_line(e, now));
            }
        }
        NodesCmd::Approve {
            ids,
            all_from_token,
        } => settle(&c, ids, all_from_token.as_deref(), true)?,
        NodesCmd::Reject {
            ids,
            all_from_token,
        } => settle(&c, ids, all_from_token.as_deref(), false)?,
        NodesCmd::Revoke { id } => {
            let body = json!({"node_id": id});
            let (_, v) = c.call("POST", "/v1/node_revocations", Some(&body), &[], t)?;
            let n = v["refused_messages"].as_array().map_or(0, Vec::len);
            println!("retired {id}: its requests are refused (node_revoked); {n} queued messages refused");
        }
        NodesCmd::Label { id, changes } => fleet::label(&c, &id, &changes)?,
        NodesCmd::Show { id, json } => fleet::show(&c, &id, json)?,
        NodesCmd::Desired {
            id,
            set,
            merge,
            if_match,
        } => fleet::desired(&c, &id, set.as_deref(), merge.as_deref(), if_match)?,
        NodesCmd::EndGrace { id } => {
            let body = json!({"node_id": id});
            let (_, v) = c.call("POST", "/v1/node_grace_ends", Some(&body), &[], t)?;
            if v["ended"].as_bool() == Some(true) {
                println!("{id}: its retired key is refused from now on");
            } else {
                println!("{id}: no retired key was in its grace (nothing to end)");
            }
        }
    }
    Ok(())
}

/// Approve (or reject) the pending enrollments of `ids`, or of every device waiting with
/// `token`; each one said, and a failure of one does not stop the others (the exit
/// status says whether all went through).
fn settle(c: &Client, ids: Vec<String>, token: Option<&str>, approve: bool) -> anyhow::Result<()> {
    let t = Duration::from_secs(20);
    let ids = match token {
        None => ids,
        Some(token) => {
            let (_, v) = c.call("GET", "/v1/enrollments?state=pending", None, &[], t)?;
            let ids: Vec<String> = v["enrollments"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|e| e["token_id"] == token)
                .filter_map(|e| e["node_id"].as_str().map(str::to_string))
                .collect();
            if ids.is_empty() {
                println!("no device waits for approval with token {token}");
            }
            ids
        }
    };
    let verb = if approve { "approve" } else { "reject" };
    let mut failed = 0;
    for id in &ids {
        let path = format!(
            "/v1/enrollments/{}/{verb}",
            id.replace('%', "%25").replace('/', "%2F")
        );
        match c.call("POST", &path, None, &[], t) {
            Ok((_, v)) if approve => println!(
                "approved {id} ({}): it is trusted from now on",
                v["kind"].as_str().unwrap_or("?")
            ),
            Ok(_) => println!("rejected {id}: it stays out"),
            Err(e) => {
                failed += 1;
                eprintln!("{id}: {e}");
            }
        }
    }
    if failed > 0 {
        return Err(Exit::failed(format!("{failed} of {} could not be {verb}d", ids.len())).into());
    }
    Ok(())
}

/// `GET /v1/enrollments` as the CLI reads it.
#[derive(serde::Deserialize)]
struct PendingList {
    enrollments: Vec<PendingRow>,
}

#[derive(serde::Deserialize)]
struct PendingRow {
    node_id: String,
    kind: String,
    node_sign_pk: String,
    token_id: String,
    created_at_ms: u64,
    #[serde(default)]
    device: Option<crate::fleet::Inventory>,
    #[serde(default)]
    source: Option<String>,
}

/// One waiting device: what it says it is (host name, serial, OS, agent version) and
/// where it asked from, beside its id, key and token: what an operator matches against
/// a delivery note.
fn pending_line(e: &PendingRow, now_ms: u64) -> String {
    let d = e.device.as_ref();
    let or_dash = |s: Option<&String>| s.map_or("-".to_string(), Clone::clone);
    format!(
        "{}\t{}\thost {}\tserial {}\t{}\toutpost {}\tfrom {}\tkey {}…\ttoken {}\tasked {}",
        e.node_id,
        e.kind,
        or_dash(d.and_then(|d| d.hostname.as_ref())),
        or_dash(d.and_then(|d| d.serial.as_ref())),
        or_dash(d.and_then(|d| d.os.as_ref())),
        or_dash(d.map(|d| &d.agent_version)),
        or_dash(e.source.as_ref()),
        e.node_sign_pk.chars().take(12).collect::<String>(),
        e.token_id,
        ago(now_ms, Some(e.created_at_ms))
    )
}

#[cfg(test)]
mod pending_tests {
    use super::*;

    #[test]
    fn a_waiting_device_shows_what_it_said_and_dashes_for_what_it_did_not() {
        let v = serde_json::json!({"enrollments": [
            {"node_id": "node:a1", "kind": "new", "node_sign_pk": "AAAABBBBCCCCDDDD", "token_id": "t1",
             "created_at_ms": 1000, "decided_at_ms": null, "state": "pending", "source": "10.0.0.7",
             "device": {"agent_version": "0.9.0", "arch": "aarch64", "hostname": "pump-17",
                        "serial": "10000000abcd", "os": "Debian GNU/Linux 12 (bookworm)"}},
            {"node_id": "node:a2", "kind": "rekey", "node_sign_pk": "EEEE", "token_id": "t1",
             "created_at_ms": 1000, "decided_at_ms": null, "state": "pending", "device": null, "source": null}
        ]});
        let list: PendingList = serde_json::from_value(v).unwrap();
        let a = pending_line(&list.enrollments[0], 61_000);
        for want in [
            "node:a1",
            "host pump-17",
            "serial 10000000abcd",
            "Debian GNU/Linux 12 (bookworm)",
            "outpost 0.9.0",
            "from 10.0.0.7",
            "key AAAABBBBCCCC…",
            "token t1",
        ] {
            assert!(a.contains(want), "{want} in {a}");
        }
        let b = pending_line(&list.enrollments[1], 61_000);
        assert!(b.contains("host -\tserial -\t-\toutpost -\tfrom -"), "{b}");
    }
}
