//! Creating: the StatefulSet and Service follow `spec.image` until every replica is Ready.

use super::{D, Next, next_pod, shape_at, stay, upkeep};
use crate::engine::Decision;
use crate::machines::distributeddb::actions::DdbAction;
use crate::machines::distributeddb::api::DistributedDBSpec;
use crate::machines::distributeddb::observe::Observed;
use crate::machines::distributeddb::state::{DdbState, Upgrade};
use crate::machines::distributeddb::table::reason::*;

/// The replicas for the StatefulSet: `spec.replicas`, except that an existing one that
/// holds more (adopted after the status was lost, say) is scaled down one replica at a
/// time, like Scaling does: one fewer once its controller has seen it, every pod below
/// its replicas is Ready and none beyond is left.
fn step_down(replicas: i32, o: &Observed) -> i32 {
    match &o.statefulset {
        Some(s) if s.replicas > replicas => {
            let settled = s.caught_up
                && !o.pods.keys().any(|k| *k >= s.replicas)
                && (0..s.replicas)
                    .all(|k| o.pods.get(&k).is_some_and(|p| p.ready && !p.terminating));
            if settled { s.replicas - 1 } else { s.replicas }
        }
        _ => replicas,
    }
}

pub(crate) fn creating(spec: &DistributedDBSpec, o: &Observed) -> D {
    let replicas = spec.replicas;
    let shape = shape_at(spec, &spec.image, step_down(replicas, o), o);
    let mut actions = upkeep(spec, &shape, o);
    let template_current = o
        .statefulset
        .as_ref()
        .is_some_and(|s| s.serves(&spec.image));
    // Pods at an earlier spec.image that never became Ready have never served: replace
    // them now rather than upgrade them later, each only as read (found by the model
    // check: read from a cache behind, a pod that had become Ready since, a member, was
    // deleted with another that was not).
    if template_current {
        actions.extend(
            o.pods
                .iter()
                .filter(|(k, p)| {
                    **k < replicas
                        && !p.terminating
                        && !p.ready
                        && p.image.as_deref() != Some(&spec.image)
                })
                .map(|(k, p)| DdbAction::DeleteUnstarted {
                    ordinal: *k,
                    uid: p.uid.clone(),
                    version: p.version.clone(),
                }),
        );
    }
    let ready = (0..replicas)
        .filter(|k| o.pods.get(k).is_some_and(|p| p.ready && !p.terminating))
        .count();
    let extra = o.pods.keys().any(|k| *k >= replicas);
    // The StatefulSet holds spec.replicas (not only the paced step towards it).
    let scaled = o
        .statefulset
        .as_ref()
        .is_some_and(|s| s.replicas == replicas);
    if ready == usize::try_from(replicas).unwrap_or(0) && !extra && scaled && actions.is_empty() {
        return match next_pod(o, replicas, &spec.image) {
            Next::Done => Decision::go(
                DdbState::Ready {
                    version: spec.image.clone(),
                    replicas,
                },
                ALL_REPLICAS_READY,
                format!("all {replicas} pods Ready at {}", spec.image),
            ),
            Next::Pod { ordinal, uid } => {
                let from = o
                    .pods
                    .get(&ordinal)
                    .and_then(|p| p.image.clone())
                    .unwrap_or_default();
                Decision::go(
                    DdbState::Upgrading(Upgrade::begin(
                        from,
                        spec.image.clone(),
                        replicas,
                        ordinal,
                        uid,
                        o,
                    )),
                    MIXED_IMAGES,
                    format!(
                        "all {replicas} pods Ready, but {} runs an earlier image; upgrading it to {}",
                        o.pod_name(ordinal),
                        spec.image
                    ),
                )
            }
            Next::Wait(why) => stay(WAITING_FOR_PODS, why, actions),
        };
    }
    stay(
        WAITING_FOR_PODS,
        format!("{ready}/{replicas} pods Ready at {}", spec.image),
        actions,
    )
}
