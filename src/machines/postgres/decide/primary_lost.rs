//! PrimaryLost: the primary is not Ready, or has stopped renewing the primary Lease
//! (hung: the kubelet's probes may hang too, so readiness alone never says so); a
//! failover follows if it stays so.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::creating::ordinal_named;
use super::fencing::{expiry, lease_seconds};
use super::{D, choose_target, stay, switch_to, upkeep_at};
use crate::engine::{Decision, World};
use crate::machines::postgres::api::PostgresClusterSpec;
use crate::machines::postgres::observe::{ADOPT_PRIMARY, Observed};
use crate::machines::postgres::state::{PgState, SwitchCause, Topology};
use crate::machines::postgres::table::reason::*;

/// Why the primary counts as lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Lost {
    /// Its pod is not serving (not Ready, or terminating, or gone).
    NotReady,
    /// Its pod released the Lease, so its server is down (it crashed, and its manager
    /// killed what the postmaster left behind, or it stopped on a signal): lost at once,
    /// before the kubelet's probes say so. Counted as not Ready (the same edges).
    Released,
    /// It holds the Lease but has not renewed it since `renewed`, longer than `L + S`
    /// (`bound` seconds) ago: its agent is stuck or the pod frozen or cut off, whatever
    /// its readiness says (found on the real node: a frozen pod's exec probes hang, and
    /// the kubelet never marks it NotReady).
    NotRenewing {
        /// The Lease's `renewTime`.
        renewed: DateTime<Utc>,
        /// `L + S` in seconds.
        bound: i64,
    },
}

impl Lost {
    /// The transition's reason.
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            Lost::NotReady | Lost::Released => PRIMARY_NOT_READY,
            Lost::NotRenewing { .. } => PRIMARY_NOT_RENEWING,
        }
    }

    /// Why, for the primary `name`.
    pub(crate) fn describe(&self, name: &str) -> String {
        match self {
            Lost::NotReady => format!("primary {name} is not Ready"),
            Lost::Released => format!(
                "primary {name} is not Ready: it released the primary Lease, so its server is down"
            ),
            Lost::NotRenewing { renewed, bound } => format!(
                "primary {name} has not renewed the primary Lease since {} (longer than L + S = {bound}s): it is hung or cut off, whatever its readiness says",
                renewed.format("%H:%M:%S")
            ),
        }
    }
}

/// Whether (and why) the primary is lost at `now`: its pod is not serving, or released
/// the Lease (naming nobody since), or the Lease names its pod and has expired unrenewed. A Lease naming another pod is
/// [`super::fencing::keep_lease`]'s concern.
pub(crate) fn primary_down(
    spec: &PostgresClusterSpec,
    cluster: &Topology,
    o: &Observed,
    now: DateTime<Utc>,
) -> Option<Lost> {
    if !o.serving(cluster.primary) {
        return Some(Lost::NotReady);
    }
    let lease = o.own.lease.as_ref()?;
    let id = o.identity(cluster.primary)?;
    if lease.holder.is_none() && lease.released_by.as_deref() == Some(id.as_str()) {
        return Some(Lost::Released);
    }
    if lease.holder.as_deref() != Some(id.as_str()) {
        return None;
    }
    let renewed = lease.renewed?;
    expiry(spec, lease, o)
        .filter(|until| now > *until)
        .map(|_| Lost::NotRenewing {
            renewed,
            bound: lease_seconds(spec, lease, o).saturating_add(spec.fencing.clock_skew_seconds),
        })
}

pub(crate) fn lose_primary(cluster: &Topology, o: &Observed, lost: &Lost) -> D {
    Decision::go(
        PgState::PrimaryLost {
            cluster: cluster.clone(),
        },
        lost.reason(),
        lost.describe(&o.pod_name(cluster.primary)),
    )
}

pub(crate) fn primary_lost(
    spec: &PostgresClusterSpec,
    cluster: &Topology,
    world: &World<Observed>,
) -> D {
    let o = &world.observed;
    let actions = upkeep_at(spec, cluster, o);
    let name = o.pod_name(cluster.primary);
    let Some(lost) = primary_down(spec, cluster, o, world.now) else {
        return Decision::go(
            PgState::Ready {
                cluster: cluster.clone(),
            },
            PRIMARY_RECOVERED,
            format!("primary {name} is Ready again"),
        );
    };
    let why = lost.describe(&name);
    let delay = Duration::from_secs(u64::try_from(spec.failover_delay_seconds).unwrap_or(0));
    let down_for = world.in_state_for();
    if down_for < delay {
        return stay(
            AWAITING_FAILOVER,
            format!(
                "{why}; a Ready replica is promoted if it stays so for failoverDelaySeconds={}",
                spec.failover_delay_seconds
            ),
            actions,
        )
        .degraded()
        .requeue(delay - down_for);
    }
    match choose_target(o, cluster, cluster.replicas, None) {
        Some(target) => switch_to(
            cluster,
            target,
            SwitchCause::Failover,
            o,
            FAILOVER_STARTED,
            |_, target| {
                format!(
                    "{why} for {}s, longer than failoverDelaySeconds={}: failing over to {target}",
                    down_for.as_secs(),
                    spec.failover_delay_seconds,
                )
            },
        ),
        None => {
            let stuck = format!("{why}, no replica is Ready to take over");
            if let Some(adopt) = adoption_requested(o, Some(cluster.primary), &stuck) {
                return adopt;
            }
            stay(
                NO_PROMOTION_TARGET,
                format!(
                    "{why} for longer than failoverDelaySeconds={}, and no replica is Ready to take over; if a member holds the data but cannot start as a standby (no primary to follow), set {ADOPT_PRIMARY}=<pod> to make it the primary",
                    spec.failover_delay_seconds
                ),
                actions,
            )
            .degraded()
        }
    }
}

/// A person's way out of a failover with nothing to promote (`stuck` says why): a member
/// that holds the data but cannot start as a standby (no primary to follow) is named by
/// `lockstep.dev/adopt-primary`, and the cluster is adopted anew around that live pod (not
/// `excluded`), as a lost status is: the primary Lease is handed to it once its holder is
/// certainly fenced. `None`: no such pod is named.
pub(super) fn adoption_requested(o: &Observed, excluded: Option<i32>, stuck: &str) -> Option<D> {
    let k = o
        .own
        .requests
        .adopt_primary
        .as_deref()
        .and_then(|n| ordinal_named(o, n))
        .filter(|k| Some(*k) != excluded && o.live(*k).is_some())?;
    Some(Decision::go(
        PgState::Creating {
            credentials_created: true,
            served_restore: None,
        },
        ADOPTION_REQUESTED,
        format!(
            "{stuck}, and {ADOPT_PRIMARY} names {}: adopting the cluster anew around it (the primary Lease is handed to it once its holder is fenced)",
            o.pod_name(k)
        ),
    ))
}
