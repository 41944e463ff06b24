//! Waiting to see a pod this reconcile deleted going, before the next decision reads
//! the pod store.

use std::time::Duration;

use super::Target;
use crate::driver::execute::Executed;
use crate::driver::{Cache, Op};

/// How long a reconcile waits for the pod store to show a pod it deleted going.
pub const DELETE_SEEN_WITHIN: Duration = Duration::from_secs(10);

/// After the API server took `op`, a deletion or eviction of a pod by UID, wait until
/// the pod store shows it going, for at most [`DELETE_SEEN_WITHIN`]: the next decision
/// must not read the pod as live and serving (an upgrade would take a pod it is
/// replacing for one it may leave, and report the upgrade complete while the pod goes).
/// Only a removal the server took ([`Executed::Taken`]) is waited for: one it refused on
/// its preconditions (the pod gone, replaced, or changed since it was read) leaves the
/// pod as the store shows it. Past the bound (a watch that lags) the reconcile goes on,
/// as it did before this wait. Says whether the store shows what the op did (always,
/// for any other op).
pub(super) async fn until_pod_seen_going(
    cache: &Cache,
    target: &Target<'_>,
    (op, executed): (&Op, Executed),
) -> bool {
    if executed != Executed::Taken {
        return true;
    }
    let (name, uid) = match op {
        Op::Delete {
            resource,
            name,
            uid: Some(uid),
            ..
        } if resource.kind == "Pod" => (name, uid),
        Op::Evict { name, uid } => (name, uid),
        _ => return true,
    };
    let ns = Some(target.namespace);
    let seen = cache
        .pods
        .until(DELETE_SEEN_WITHIN, |pods| {
            pods.shows_going(ns, target.name, name, uid)
        })
        .await;
    if !seen {
        tracing::warn!(pod = %name, "the pod store does not show the deleted pod going yet");
    }
    seen
}
