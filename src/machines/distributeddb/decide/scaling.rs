//! Scaling: replicas are being added or removed.

use super::{D, claim, stay, upkeep};
use crate::engine::Decision;
use crate::machines::distributeddb::actions::Shape;
use crate::machines::distributeddb::api::DistributedDBSpec;
use crate::machines::distributeddb::observe::Observed;
use crate::machines::distributeddb::state::DdbState;
use crate::machines::distributeddb::table::reason::*;

pub(crate) fn scaling(
    spec: &DistributedDBSpec,
    version: &str,
    from_replicas: i32,
    replicas: i32,
    o: &Observed,
) -> D {
    if spec.replicas != replicas {
        return Decision::go(
            DdbState::Scaling {
                version: version.to_owned(),
                from_replicas,
                replicas: spec.replicas,
            },
            REPLICAS_CHANGED,
            format!(
                "scaling to {} replicas instead of {replicas}",
                spec.replicas
            ),
        );
    }
    let shape = Shape {
        image: version.to_owned(),
        replicas,
        claim_size: claim(o).unwrap_or(&spec.storage.size).to_owned(),
    };
    let actions = upkeep(spec, &shape, o);
    let ready = (0..replicas)
        .filter(|k| o.pods.get(k).is_some_and(|p| p.ready && !p.terminating))
        .count();
    let extra: Vec<i32> = o.pods.keys().copied().filter(|k| *k >= replicas).collect();
    let settled = o.statefulset.as_ref().is_some_and(|s| s.holds(&shape));
    if actions.is_empty()
        && settled
        && extra.is_empty()
        && ready == usize::try_from(replicas).unwrap_or(0)
    {
        return Decision::go(
            DdbState::Ready {
                version: version.to_owned(),
                replicas,
            },
            SCALING_COMPLETE,
            format!("{replicas} pods Ready at {version}"),
        );
    }
    let mut message = format!("{ready}/{replicas} pods Ready");
    if !extra.is_empty() {
        message.push_str(&format!("; waiting for pod {} to go", o.pod_names(&extra)));
    }
    stay(WAITING_FOR_PODS, message, actions)
}
