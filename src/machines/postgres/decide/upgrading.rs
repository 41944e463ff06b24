//! Upgrading: one pod at a time, replicas first (highest ordinal first), then a
//! switchover, then the old primary. A pod is replaced when it runs another image than
//! the target, or when its instance reports a parameter its server applies only at a
//! start ([`waits_for_restart`]): a rolling restart is an upgrade to the same image.

use super::primary_lost::{lose_primary, primary_down};
use super::{D, choose_planned_target, held_back, stay, switch_to, upkeep_at};
use crate::engine::Decision;
use crate::machines::common::replace::{self, Replacement};
use crate::machines::postgres::actions::{DeleteCause, PgAction, spec_image};
use crate::machines::postgres::api::PostgresClusterSpec;
use crate::machines::postgres::observe::Observed;
use crate::machines::postgres::state::{PgState, PodRef, SwitchCause, Topology};
use crate::machines::postgres::table::reason::*;

/// The instance at `k` reports a parameter its server applies only at its next start
/// ([`crate::pod::applied`]).
pub(crate) fn waits_for_restart(o: &Observed, k: i32) -> bool {
    o.own
        .settings
        .get(&k)
        .is_some_and(|r| !r.pending_restart.is_empty())
}

/// What pod `k` is replaced for: `to run <target>`, or `to apply <parameters>`.
fn replaced_for(o: &Observed, k: i32, target: &str) -> String {
    match o.live(k) {
        Some(p) if p.image.as_deref() != Some(target) => format!("to run {target}"),
        _ => {
            let pending = o
                .own
                .settings
                .get(&k)
                .map(|r| r.pending_restart.join(", "))
                .unwrap_or_default();
            format!("to apply {pending} at its start")
        }
    }
}

/// Why pod `k` may not be taken down now, if it may not
/// ([`replace::hold_before_delete`]).
pub(crate) fn hold_before_delete(o: &Observed, k: i32, cluster: &Topology) -> Option<String> {
    let (sts, image) = (o.statefulset.as_ref(), &cluster.image);
    replace::hold_before_delete(&o.name, k, cluster.replicas, |j| o.serving(j), sts, image)
}

/// The chosen pod was deleted and not yet recreated: the template must not change under
/// it.
pub(crate) fn in_flight(pod: Option<&PodRef>, o: &Observed) -> bool {
    pod.is_some_and(|p| match o.pods.get(&p.ordinal) {
        None => true,
        Some(live) => live.uid == p.uid && live.terminating,
    })
}

pub(crate) fn upgrading(
    spec: &PostgresClusterSpec,
    cluster: &Topology,
    pod: Option<&PodRef>,
    o: &Observed,
    now: chrono::DateTime<chrono::Utc>,
) -> D {
    let actions = upkeep_at(spec, cluster, o);
    let image = spec_image(spec);
    if image != cluster.image && !in_flight(pod, o) {
        return Decision::go(
            PgState::Upgrading {
                cluster: Topology {
                    image: image.clone(),
                    ..cluster.clone()
                },
                pod: None,
            },
            IMAGE_CHANGED,
            format!(
                "the spec's image changed from {} to {image} mid-upgrade; retargeting",
                cluster.image
            ),
        );
    }
    let replacing_primary = pod.is_some_and(|p| p.ordinal == cluster.primary);
    if !replacing_primary && let Some(lost) = primary_down(spec, cluster, o, now) {
        return lose_primary(cluster, o, &lost);
    }
    match pod {
        None => plan_upgrade(cluster, o, actions),
        Some(p) => replace(cluster, p, o, actions),
    }
}

/// Choose what the upgrade does next.
pub(crate) fn plan_upgrade(cluster: &Topology, o: &Observed, actions: Vec<PgAction>) -> D {
    let n = cluster.replicas;
    let target = cluster.image.as_str();
    let missing: Vec<i32> = (0..n).filter(|k| o.live(*k).is_none()).collect();
    if !missing.is_empty() {
        return stay(
            WAITING_FOR_PODS,
            format!("waiting for {} to be (re)created", o.pod_names(&missing)),
            actions,
        );
    }
    let stale = |k: &i32| {
        o.live(*k).and_then(|p| p.image.as_deref()) != Some(target) || waits_for_restart(o, *k)
    };
    let down: Vec<i32> = (0..n).filter(|k| !o.serving(*k)).collect();
    let replicas: Vec<i32> = (0..n)
        .filter(|k| *k != cluster.primary && stale(k))
        .collect();
    let pick = if let Some(highest) = replicas.iter().max() {
        match down.as_slice() {
            [] => *highest,
            // A replica that is already down and needs replacing goes first: replacing
            // it takes nothing else down.
            [k] if replicas.contains(k) => *k,
            _ => {
                return stay(
                    WAITING_FOR_PODS,
                    format!(
                        "waiting for {} to be Ready before replacing another replica",
                        o.pod_names(&down)
                    ),
                    actions,
                );
            }
        }
    } else if stale(&cluster.primary) {
        if n > 1 {
            // A replica yet to judge the spec's settings may say next that it waits for
            // a restart too: the role moves to it only once it has said it does not.
            let unjudged: Vec<i32> = o.own.unjudged.iter().copied().collect();
            if !unjudged.is_empty() {
                return stay(
                    WAITING_FOR_PODS,
                    format!(
                        "every replica runs {target}; waiting for {} to read the spec's settings before the switchover",
                        o.pod_names(&unjudged)
                    ),
                    actions,
                );
            }
            let chosen = choose_planned_target(o, cluster, n, Some(target));
            return match chosen {
                Ok(t) if down.is_empty() => switch_to(
                    cluster,
                    t,
                    SwitchCause::Upgrade,
                    o,
                    SWITCHOVER_STARTED,
                    |from, to| {
                        format!("every replica runs {target}; switching over from {from} to {to}")
                    },
                ),
                Err(behind) if down.is_empty() => stay(
                    WAITING_FOR_PODS,
                    format!(
                        "every replica runs {target}; {}",
                        held_back(o, &behind)
                            .unwrap_or_else(|| "no replica can take over".to_owned())
                    ),
                    actions,
                ),
                _ => stay(
                    WAITING_FOR_PODS,
                    format!(
                        "every replica runs {target}; waiting for {} to be Ready before the switchover",
                        o.pod_names(&down)
                    ),
                    actions,
                ),
            };
        }
        // A single instance: nobody can take over, so it is replaced in place.
        cluster.primary
    } else if down.is_empty() {
        return Decision::go(
            PgState::Ready {
                cluster: cluster.clone(),
            },
            UPGRADE_COMPLETED,
            format!(
                "all {n} instances Ready at {target}; {} is primary",
                o.pod_name(cluster.primary)
            ),
        );
    } else {
        return stay(
            WAITING_FOR_PODS,
            format!("waiting for {} to be Ready", o.pod_names(&down)),
            actions,
        );
    };
    if let Some(why) = hold_before_delete(o, pick, cluster) {
        return stay(WAITING_FOR_PODS, why, actions);
    }
    let uid = o.pods.get(&pick).map(|p| p.uid.clone()).unwrap_or_default();
    Decision::go(
        PgState::Upgrading {
            cluster: cluster.clone(),
            pod: Some(PodRef { ordinal: pick, uid }),
        },
        POD_CHOSEN,
        format!(
            "replacing {} {}",
            o.pod_name(pick),
            replaced_for(o, pick, target)
        ),
    )
}

/// Replace the chosen pod: delete it (UID-preconditioned), wait for its replacement.
pub(crate) fn replace(cluster: &Topology, p: &PodRef, o: &Observed, actions: Vec<PgAction>) -> D {
    let k = p.ordinal;
    let name = o.pod_name(k);
    let target = cluster.image.as_str();
    let next = || PgState::Upgrading {
        cluster: cluster.clone(),
        pod: None,
    };
    let seen = o.pods.get(&k);
    match replace::replacement(seen, &p.uid, target) {
        Replacement::Terminating => {
            stay(REPLACING_POD, replace::terminating(&name, target), actions)
        }
        // It runs the target with nothing waiting for a restart (its server restarted in
        // place, as an old primary does when it rejoins): nothing to do.
        Replacement::Present { image, .. } if image == Some(target) && !waits_for_restart(o, k) => {
            Decision::go(next(), REPLANNED, format!("{name} already runs {target}"))
        }
        Replacement::Present { .. } => match hold_before_delete(o, k, cluster) {
            Some(why) => stay(WAITING_FOR_PODS, why, actions),
            None => stay(
                REPLACING_POD,
                replace::deleting(&name, &p.uid, target),
                actions,
            )
            .with_actions([PgAction::DeletePod {
                ordinal: k,
                uid: p.uid.clone(),
                cause: DeleteCause::Upgrade,
            }]),
        },
        Replacement::Stale { image, .. } => Decision::go(
            next(),
            REPLANNED,
            format!("{name} was recreated at {image} instead of {target}; choosing again"),
        ),
        Replacement::Starting => stay(REPLACING_POD, replace::starting(&name, target), actions),
        Replacement::Replaced { .. } => {
            Decision::go(next(), POD_UPGRADED, format!("{name} is Ready at {target}"))
        }
        Replacement::Missing => stay(REPLACING_POD, replace::missing(&name, target), actions),
    }
}
