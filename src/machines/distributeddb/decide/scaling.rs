//! Scaling: replicas are added or removed one at a time, each step behind the readiness
//! gate of upgrades, by stepping the StatefulSet's `spec.replicas` (its
//! `podManagementPolicy` is `Parallel` and immutable on a live StatefulSet, so the
//! machine, not the StatefulSet controller, keeps it to one member at a time).

use super::{D, shape_at, stay, upkeep};
use crate::engine::Decision;
use crate::machines::distributeddb::actions::Shape;
use crate::machines::distributeddb::api::DistributedDBSpec;
use crate::machines::distributeddb::observe::Observed;
use crate::machines::distributeddb::state::DdbState;
use crate::machines::distributeddb::table::reason::*;

/// The next step of scaling from the StatefulSet's `replicas` towards `wanted`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// The StatefulSet goes to these replicas. `settled`: the step at `replicas` is done
    /// (every pod Ready, none beyond); otherwise the replica removed is one that is not
    /// Ready (it serves nothing, so removing it takes nothing down).
    Next { replicas: i32, settled: bool },
    /// Not now: why.
    Wait(String),
}

/// One replica closer to `wanted`, from a StatefulSet that should hold `shape`: once it
/// does and its controller has seen it, every pod below `shape.replicas` is Ready and
/// no pod beyond is left (the gate of upgrades: a member is added or removed only while
/// every other is Ready). Removing a replica that is not Ready does not wait for the
/// others (a replica being added that never starts can be scaled away).
pub(crate) fn next_step(shape: &Shape, wanted: i32, o: &Observed, upkeep_pending: bool) -> Step {
    let replicas = shape.replicas;
    let next = replicas + (wanted - replicas).signum();
    let holds = !upkeep_pending
        && o.statefulset
            .as_ref()
            .is_some_and(|s| s.holds(&shape.image, shape.replicas));
    let seen = holds && o.statefulset.as_ref().is_some_and(|s| s.caught_up);
    let extra: Vec<i32> = o.pods.keys().copied().filter(|k| *k >= replicas).collect();
    let not_ready: Vec<i32> = (0..replicas)
        .filter(|k| !o.pods.get(k).is_some_and(|p| p.ready && !p.terminating))
        .collect();
    if !seen {
        return Step::Wait(format!(
            "waiting for the StatefulSet to hold {replicas} replicas"
        ));
    }
    if !extra.is_empty() {
        return Step::Wait(format!("waiting for pod {} to go", o.pod_names(&extra)));
    }
    if not_ready.is_empty() {
        return Step::Next {
            replicas: next,
            settled: true,
        };
    }
    if next < replicas && not_ready.contains(&next) {
        return Step::Next {
            replicas: next,
            settled: false,
        };
    }
    Step::Wait(format!(
        "waiting for pod {} to become Ready",
        o.pod_names(&not_ready)
    ))
}

/// What a step does, for messages.
pub(crate) fn describe_step(o: &Observed, from: i32, to: i32, wanted: i32) -> String {
    if to > from {
        format!(
            "adding {} ({from} -> {to} replicas, towards {wanted})",
            o.pod_name(to - 1)
        )
    } else {
        format!(
            "removing {} ({from} -> {to} replicas, towards {wanted})",
            o.pod_name(to)
        )
    }
}

pub(crate) fn scaling(
    spec: &DistributedDBSpec,
    version: &str,
    from_replicas: i32,
    replicas: i32,
    o: &Observed,
) -> D {
    let shape = shape_at(spec, version, replicas, o);
    let actions = upkeep(spec, &shape, o);
    match next_step(&shape, spec.replicas, o, !actions.is_empty()) {
        Step::Next { settled: true, .. } if spec.replicas == replicas => Decision::go(
            DdbState::Ready {
                version: version.to_owned(),
                replicas,
            },
            SCALING_COMPLETE,
            format!("{replicas} pods Ready at {version}"),
        ),
        Step::Next {
            replicas: next,
            settled,
        } if next != replicas => Decision::go(
            DdbState::Scaling {
                version: version.to_owned(),
                from_replicas,
                replicas: next,
            },
            if settled {
                NEXT_REPLICA
            } else {
                REPLICAS_CHANGED
            },
            describe_step(o, replicas, next, spec.replicas),
        ),
        Step::Next { .. } => stay(WAITING_FOR_PODS, format!("{replicas} replicas"), actions),
        Step::Wait(why) => stay(
            WAITING_FOR_PODS,
            format!("{replicas} of {} replicas: {why}", spec.replicas),
            actions,
        ),
    }
}
