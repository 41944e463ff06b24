//! Scaling: instances are being added or removed; a scale that would remove the primary
//! hands its role to a lower ordinal first.

use super::primary_lost::{lose_primary, primary_down};
use super::{D, choose_target, stay, switch_to, upkeep_at};
use crate::engine::Decision;
use crate::machines::postgres::actions::PgAction;
use crate::machines::postgres::api::PostgresClusterSpec;
use crate::machines::postgres::observe::Observed;
use crate::machines::postgres::state::{PgState, SwitchCause, Topology};
use crate::machines::postgres::table::reason::*;

/// A scale to `replicas` that would remove the primary: hand the role to a lower
/// ordinal first, or say why that cannot happen yet.
fn scale_below_primary(
    cluster: &Topology,
    replicas: i32,
    o: &Observed,
    actions: Vec<PgAction>,
) -> D {
    match choose_target(o, cluster, replicas, None) {
        Some(target) => switch_to(
            cluster,
            target,
            SwitchCause::Scale,
            o,
            PRIMARY_OUTSIDE_SCALE,
            |primary, target| {
                format!(
                    "spec.replicas={replicas} would remove the primary {primary}: switching over to {target} first"
                )
            },
        ),
        None => stay(
            NO_PROMOTION_TARGET,
            format!(
                "spec.replicas={replicas} would remove the primary {}, and no Ready replica below ordinal {replicas} can take over",
                o.pod_name(cluster.primary)
            ),
            actions,
        )
        .degraded(),
    }
}

/// `spec.replicas` is not `cluster.replicas`: scale (in Ready, `from_replicas` is
/// `None`; in Scaling, the count the scaling began at), after handing the primary role to
/// a lower ordinal if the scale would remove it.
pub(crate) fn rescale(
    spec: &PostgresClusterSpec,
    cluster: &Topology,
    from_replicas: Option<i32>,
    o: &Observed,
    actions: Vec<PgAction>,
) -> D {
    if spec.replicas <= cluster.primary {
        return scale_below_primary(cluster, spec.replicas, o, actions);
    }
    let message = match from_replicas {
        None => format!(
            "scaling from {} to {} instances",
            cluster.replicas, spec.replicas
        ),
        Some(_) => format!(
            "scaling to {} instances instead of {}",
            spec.replicas, cluster.replicas
        ),
    };
    Decision::go(
        PgState::Scaling {
            cluster: Topology {
                replicas: spec.replicas,
                ..cluster.clone()
            },
            from_replicas: from_replicas.unwrap_or(cluster.replicas),
        },
        REPLICAS_CHANGED,
        message,
    )
}

/// Decide in Scaling: wait until exactly `cluster.replicas` instances exist, all Ready.
pub(crate) fn scaling(
    spec: &PostgresClusterSpec,
    cluster: &Topology,
    from_replicas: i32,
    o: &Observed,
    now: chrono::DateTime<chrono::Utc>,
) -> D {
    let actions = upkeep_at(spec, cluster, o);
    if let Some(lost) = primary_down(spec, cluster, o, now) {
        return lose_primary(cluster, o, &lost);
    }
    if spec.replicas != cluster.replicas {
        return rescale(spec, cluster, Some(from_replicas), o, actions);
    }
    let n = cluster.replicas;
    let ready = (0..n).filter(|k| o.serving(*k)).count();
    let extra: Vec<i32> = o.pods.keys().copied().filter(|k| *k >= n).collect();
    if actions.is_empty() && extra.is_empty() && ready == usize::try_from(n).unwrap_or(0) {
        return Decision::go(
            PgState::Ready {
                cluster: cluster.clone(),
            },
            SCALING_COMPLETE,
            format!("{n} instances Ready at {}", cluster.image),
        );
    }
    let mut message = format!("{ready}/{n} instances Ready");
    if !extra.is_empty() {
        message.push_str(&format!("; waiting for {} to go", o.pod_names(&extra)));
    }
    stay(WAITING_FOR_PODS, message, actions)
}
