//! Pipelined pulls (PROTOCOL §12.1 `after`, §12.6), on both engines: a node asks for
//! its next batch while it stores and acks the previous one.

use crate::harness::Home;
use crate::sim::{command, SimNode};

#[tokio::test(flavor = "multi_thread")]
async fn a_pull_after_the_last_envelope_handed_out_continues_the_queue() {
    let home = Home::init("gateway", "gateway:main", "");
    let gw = home.start();
    let n = SimNode::new(30);
    n.enroll(&home);
    let admin = home.token("gateway:main", &["admin"], "1h");
    let mut ids = Vec::new();
    for i in 0..7 {
        ids.push(command(&gw, &admin, &n.id, i, 600).await);
    }

    let (a, pending) = n.pull(&gw, 0, 2).await;
    assert_eq!((a.as_slice(), pending), (&ids[0..2], 7));
    // Batch a is not acked yet (the node is still storing it): the next two, not a
    // again (before: every pull began at the head, so asking early re-sent a).
    let b = n.pull_after(&gw, 2, &a[1]).await;
    assert_eq!(b, ids[2..4]);
    // a's ack and the pull after b cross; the queue goes on after b.
    n.ack(&gw, &a).await;
    let c = n.pull_after(&gw, 2, &b[1]).await;
    assert_eq!(c, ids[4..6]);
    n.ack(&gw, &b).await;
    n.ack(&gw, &c).await;
    let d = n.pull_after(&gw, 2, &c[1]).await;
    assert_eq!(d, ids[6..7]);

    // An `after` the gateway does not know: the head, with what is not acked (d).
    let head = n.pull_after(&gw, 2, "no-such-message").await;
    assert_eq!(head, ids[6..7]);
    n.ack(&gw, &head).await;
    let (empty, pending) = n.pull(&gw, 0, 2).await;
    assert!(empty.is_empty() && pending == 0, "{empty:?} {pending}");
}
