//! PrimaryLost: the primary is not Ready; a failover follows if it stays so.

use super::{D, choose_target, stay, switch_to, upkeep_at};
use crate::engine::{Decision, World};
use crate::machines::postgres::api::PostgresClusterSpec;
use crate::machines::postgres::observe::Observed;
use crate::machines::postgres::state::{PgState, SwitchCause, Topology};
use crate::machines::postgres::table::reason::*;
use std::time::Duration;

/// The primary's pod is not serving (and the cluster has someone to fail over to or at
/// least a reason to say so).
pub(crate) fn primary_down(cluster: &Topology, o: &Observed) -> bool {
    !o.serving(cluster.primary)
}

pub(crate) fn lose_primary(cluster: &Topology, o: &Observed) -> D {
    Decision::go(
        PgState::PrimaryLost {
            cluster: cluster.clone(),
        },
        PRIMARY_NOT_READY,
        format!("primary {} is not Ready", o.pod_name(cluster.primary)),
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
    if !primary_down(cluster, o) {
        return Decision::go(
            PgState::Ready {
                cluster: cluster.clone(),
            },
            PRIMARY_RECOVERED,
            format!("primary {name} is Ready again"),
        );
    }
    let delay = Duration::from_secs(u64::try_from(spec.failover_delay_seconds).unwrap_or(0));
    let down_for = world.in_state_for();
    if down_for < delay {
        return stay(
            AWAITING_FAILOVER,
            format!(
                "primary {name} is not Ready; a Ready replica is promoted if it stays so for failoverDelaySeconds={}",
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
                    "primary {name} not Ready for {}s, longer than failoverDelaySeconds={}: failing over to {target}",
                    down_for.as_secs(),
                    spec.failover_delay_seconds,
                )
            },
        ),
        None => stay(
            NO_PROMOTION_TARGET,
            format!(
                "primary {name} is not Ready for longer than failoverDelaySeconds={}, and no replica is Ready to take over",
                spec.failover_delay_seconds
            ),
            actions,
        )
        .degraded(),
    }
}
