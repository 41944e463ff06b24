//! Scaling: instances are being added or removed; a scale that would remove the primary
//! hands its role to a lower ordinal first.

use super::primary_lost::{lose_primary, primary_down};
use super::switching_over::strictest;
use super::{D, choose_planned_target, held_back, stay, switch_to, upkeep_at};
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
    match choose_planned_target(o, cluster, replicas, None) {
        Ok(target) => switch_to(
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
        Err(behind) => match held_back(o, &behind) {
            Some(why) => stay(
                WAITING_FOR_PODS,
                format!(
                    "spec.replicas={replicas} would remove the primary {}: {why}",
                    o.pod_name(cluster.primary)
                ),
                actions,
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
        },
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
    if spec.replicas < cluster.replicas
        && let Some(why) = narrowing(spec, cluster, o)
    {
        return stay(WAITING_FOR_PODS, why, actions);
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

/// Under `Required`, why a scale-down to `spec.replicas` may not remove a member yet;
/// `None` once it may. Each member removed has its volume deleted with it, and a commit
/// the primary acknowledged under terms that named it may be on it alone. So first every
/// member runs the narrowed terms (the settings naming the remaining members only: each
/// reported it judged them, and the synchronous terms recorded no longer name more
/// members, [`strictest`]), after which every commit acknowledged waits for a remaining
/// member; and every remaining standby streams (none reports it stopped), so that what
/// was acknowledged before reaches them from the primary (an assumption:
/// `docs/fencing.md`).
fn narrowing(spec: &PostgresClusterSpec, cluster: &Topology, o: &Observed) -> Option<String> {
    let q = strictest(spec, o)?;
    let remaining = spec.replicas;
    if q.members > remaining {
        let behind: Vec<i32> = (0..cluster.replicas.max(q.members))
            .filter(|k| !o.own.judged.contains(k))
            .collect();
        return Some(format!(
            "spec.replicas={remaining}: commits may have been acknowledged by members beyond it alone (spec.synchronous.dataDurability Required); waiting until every member runs the synchronous terms naming the remaining {remaining} only ({} not yet) before any is removed with its volume",
            o.pod_names(&behind)
        ));
    }
    let lagging: Vec<i32> = (0..remaining)
        .filter(|k| *k != cluster.primary && o.own.lagging.contains(k))
        .collect();
    (!lagging.is_empty()).then(|| {
        format!(
            "spec.replicas={remaining}: {} not streaming; waiting until every remaining standby streams, so that the commits the removed members acknowledged reach it, before any is removed with its volume",
            o.pod_names(&lagging)
        )
    })
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
