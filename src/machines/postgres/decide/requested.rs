//! A switchover on demand: `lockstep.dev/switchover: <pod>[:<anything>]` moves the
//! primary role to `<pod>` by the same fenced switchover an upgrade runs (the old
//! primary stops cleanly and releases the Lease with its last WAL position; the target
//! promotes only once it has received it), once per value.
//!
//! A value the cluster cannot serve (it names no instance, one that is not a Ready
//! replica, or one whose standby reports it does not stream,
//! [`crate::pod::streaming`]) is not taken on: Ready stays, Degraded with `SwitchoverRefused` naming why,
//! until it can run or the annotation goes.

use std::ops::ControlFlow;

use super::{D, stay};
use crate::machines::postgres::actions::{PgAction, Role};
use crate::machines::postgres::observe::{Observed, SWITCHOVER};
use crate::machines::postgres::state::{PodRef, SwitchCause, Topology};
use crate::machines::postgres::table::reason::*;

use super::switching_over::begin_switchover;

/// The ordinal of the instance `token` names (`<name>-<k>`, optionally followed by
/// `:<anything>`), if it is one of `cluster`'s.
fn named(token: &str, o: &Observed, cluster: &Topology) -> Option<i32> {
    let pod = token.split(':').next()?.trim();
    (0..cluster.replicas).find(|k| o.pod_name(*k) == pod)
}

/// The switchover `lockstep.dev/switchover` asks for, if its token is new (`served` is
/// the one last taken on): begun, or refused (a Degraded stay naming why and the way
/// out).
pub(crate) fn requested(
    cluster: &Topology,
    served: Option<&str>,
    o: &Observed,
    actions: &[PgAction],
) -> ControlFlow<D> {
    let Some(token) = o
        .own
        .requests
        .switchover
        .as_deref()
        .filter(|t| Some(*t) != served)
    else {
        return ControlFlow::Continue(());
    };
    let refuse = |why: String| {
        ControlFlow::Break(
            stay(
                SWITCHOVER_REFUSED,
                format!(
                    "{SWITCHOVER}={token}: {why}; it runs once it can, or remove the annotation"
                ),
                actions.to_vec(),
            )
            .degraded(),
        )
    };
    let Some(k) = named(token, o, cluster) else {
        return refuse(format!(
            "names no instance of this cluster (its pods are {}-0 to {}-{})",
            o.name,
            o.name,
            cluster.replicas - 1
        ));
    };
    let Some(pod) = o.pods.get(&k) else {
        return refuse(format!("{} does not exist yet", o.pod_name(k)));
    };
    if k != cluster.primary && !(pod.serving() && pod.role == Some(Role::Replica)) {
        return refuse(format!("{} is not a Ready replica", o.pod_name(k)));
    }
    if k != cluster.primary && o.own.lagging.contains(&k) {
        return refuse(format!(
            "{} reports that its standby does not stream from the primary (it is behind: a switchover to it would keep writes unavailable until it caught up)",
            o.pod_name(k)
        ));
    }
    let target = PodRef {
        ordinal: k,
        uid: pod.uid.clone(),
    };
    let message = if k == cluster.primary {
        format!(
            "{SWITCHOVER}={token}: {} is already the primary",
            o.pod_name(k)
        )
    } else {
        format!(
            "{SWITCHOVER}={token}: moving the primary role from {} to {}",
            o.pod_name(cluster.primary),
            o.pod_name(k)
        )
    };
    ControlFlow::Break(begin_switchover(
        cluster,
        target,
        SwitchCause::Requested,
        Some(token.to_owned()),
        o,
        SWITCHOVER_REQUESTED,
        message,
    ))
}
