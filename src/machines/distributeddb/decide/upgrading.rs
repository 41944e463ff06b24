//! Upgrading: one pod at a time, highest ordinal first, `PreHook → Restart → PostHook`.

use super::hooks::hook_step;
use super::ready::adopt;
use std::time::Duration;

use super::{
    D, Next, READINESS_WINDOW, elapsed, hold_before_delete, next_pod, shape_at, stay, upkeep,
};
use crate::engine::{Decision, Health, Wait, World};
use crate::machines::common::jobs::JobOutcome;
use crate::machines::common::replace::{self, Replacement};
use crate::machines::distributeddb::actions::DdbAction;
use crate::machines::distributeddb::actions::{HookPhase, hook_key};
use crate::machines::distributeddb::api::DistributedDBSpec;
use crate::machines::distributeddb::observe::Observed;
use crate::machines::distributeddb::state::{DdbState, Upgrade, UpgradeStep};
use crate::machines::distributeddb::table::reason::*;

pub(crate) fn upgrading(spec: &DistributedDBSpec, u: &Upgrade, world: &World<Observed>) -> D {
    let o = &world.observed;
    let shape = shape_at(spec, &u.to, u.replicas, o);
    let actions = upkeep(spec, &shape, o);
    if spec.image != u.to && !in_flight(u, world) {
        return retarget(spec, u, o, actions);
    }
    match u.step {
        UpgradeStep::PreHook => pre_hook(spec, u, world, actions),
        UpgradeStep::Restart => within_window(
            restart(u, o, HookPhase::Pre.of(spec).is_some(), actions),
            waited(u, world),
        ),
        UpgradeStep::PostHook => post_hook(spec, u, world, actions),
    }
}

/// How long the `Restart` step has waited: since the replacement was created while it
/// starts, since the step began otherwise.
pub(crate) fn waited(u: &Upgrade, world: &World<Observed>) -> Duration {
    let starting = world
        .observed
        .pods
        .get(&u.ordinal)
        .filter(|p| p.uid != u.pod_uid && !p.terminating)
        .and_then(|p| p.created);
    match starting {
        Some(created) => elapsed(world.now, created),
        None => world.in_state_for(),
    }
}

/// A wait of the `Restart` step is reported `Degraded` once it outlasts the
/// [`READINESS_WINDOW`] (the pause itself goes on), and looks again when the window ends.
/// The stay that deletes the pod acts rather than waits: it is left alone.
fn within_window(mut d: D, waited: Duration) -> D {
    let deletes = d
        .actions()
        .iter()
        .any(|a| matches!(a, DdbAction::EvictPod { .. }));
    if let Decision::Stay {
        message,
        wait,
        health: health @ Health::Healthy,
        ..
    } = &mut d
        && !deletes
    {
        if waited > READINESS_WINDOW {
            let window = READINESS_WINDOW.as_secs();
            *message = format!(
                "{message} (for {}s, longer than the readiness window of {window}s)",
                waited.as_secs()
            );
            *health = Health::Degraded;
        } else {
            let left = READINESS_WINDOW - waited + Duration::from_secs(1);
            *wait = match *wait {
                Wait::Requeue(after) => Wait::Requeue(after.min(left)),
                Wait::Watch => Wait::Requeue(left),
            };
        }
    }
    d
}

/// Whether the step's pod is in flight: its pre-hook Job runs or succeeded, drained by
/// its pre-hook, deleted and not yet
/// recreated, or recreated at the target and still starting within the
/// [`READINESS_WINDOW`]. A retarget waits for it (another pod would be drained while
/// this one waits, the StatefulSet would recreate it from a template in flux, or a
/// starting pod would be deleted without its pre-hook). A replacement that has not
/// become Ready within the window counts as failed to start: a retarget (a rollback)
/// may replace it.
pub(crate) fn in_flight(u: &Upgrade, world: &World<Observed>) -> bool {
    if u.step == UpgradeStep::PreHook {
        // The pre-hook runs (or succeeded and the step is about to move on): the pod is
        // being drained. A failed one drained nothing the user did not see reported.
        let key = hook_key(HookPhase::Pre, u.ordinal, &u.to, &u.pod_uid, u.attempt);
        return world
            .observed
            .job(&key)
            .is_some_and(|j| !matches!(j.outcome, JobOutcome::Failed { .. }));
    }
    if u.step != UpgradeStep::Restart {
        return false;
    }
    match world.observed.pods.get(&u.ordinal) {
        None => true,
        Some(p) if p.terminating => true,
        Some(p) if p.uid == u.pod_uid => u.drained,
        Some(p) => {
            p.image.as_deref() == Some(u.to.as_str())
                && !p.ready
                && waited(u, world) <= READINESS_WINDOW
        }
    }
}

/// `spec.image` changed mid-upgrade: the upgrade goes on to the new image. If the step's
/// pod already runs it (an earlier upgrade to it replaced the pod, and a retarget away
/// and back came before that pod's post-hook ran: found by the model check, which took
/// the next member down before the replaced one had caught up), its post-hook runs
/// first, before another pod goes down; a post-hook that already succeeded for that pod
/// is found by its name and passed at once. With every pod at the new image nothing else
/// goes down: its version is adopted.
pub(crate) fn retarget(
    spec: &DistributedDBSpec,
    u: &Upgrade,
    o: &Observed,
    actions: Vec<DdbAction>,
) -> D {
    let at_target = o
        .pods
        .get(&u.ordinal)
        .filter(|p| !p.terminating && p.image.as_deref() == Some(spec.image.as_str()));
    let next = next_pod(o, u.replicas, &spec.image);
    if let Some(p) = at_target.filter(|_| next != Next::Done) {
        return Decision::go(
            DdbState::Upgrading(Upgrade {
                to: spec.image.clone(),
                ..to_upgrade(u, UpgradeStep::PostHook, &p.uid)
            }),
            IMAGE_CHANGED,
            format!(
                "spec.image changed from {} to {} mid-upgrade; {} already runs it: its post-hook runs before another pod goes down",
                u.to,
                spec.image,
                o.pod_name(u.ordinal)
            ),
        );
    }
    match next {
        Next::Pod { ordinal, uid } => Decision::go(
            DdbState::Upgrading(Upgrade {
                to: spec.image.clone(),
                ..u.at(ordinal, uid, o)
            }),
            IMAGE_CHANGED,
            format!(
                "spec.image changed from {} to {} mid-upgrade; continuing with {}",
                u.to,
                spec.image,
                o.pod_name(ordinal)
            ),
        ),
        Next::Done => adopt(spec, u.replicas),
        Next::Wait(why) => stay(
            WAITING_FOR_PODS,
            format!("retarget to {} pending: {why}", spec.image),
            actions,
        ),
    }
}

/// Choose the next pod after `u`'s (or finish).
pub(crate) fn advance(
    u: &Upgrade,
    o: &Observed,
    reason: &'static str,
    done: String,
    actions: Vec<DdbAction>,
) -> D {
    match next_pod(o, u.replicas, &u.to) {
        Next::Pod { ordinal, uid } => Decision::go(
            DdbState::Upgrading(u.at(ordinal, uid, o)),
            reason,
            format!("{done}; next: {}", o.pod_name(ordinal)),
        ),
        Next::Done => Decision::go(
            DdbState::Ready {
                version: u.to.clone(),
                replicas: u.replicas,
            },
            UPGRADE_COMPLETED,
            format!("{done}; all {} pods Ready at {}", u.replicas, u.to),
        ),
        Next::Wait(why) => stay(WAITING_FOR_PODS, format!("{done}; {why}"), actions),
    }
}

pub(crate) fn to_step(u: &Upgrade, step: UpgradeStep, pod_uid: &str) -> DdbState {
    DdbState::Upgrading(to_upgrade(u, step, pod_uid))
}

/// `u` moved on to `step` about `pod_uid`, with a fresh hook budget (not drained).
fn to_upgrade(u: &Upgrade, step: UpgradeStep, pod_uid: &str) -> Upgrade {
    Upgrade {
        step,
        pod_uid: pod_uid.to_owned(),
        attempt: 1,
        budget: u.budget.restart(),
        drained: false,
        ..u.clone()
    }
}

/// The pre-hook step: run the pod's pre-hook Job (or skip it) before the pod goes down.
pub(crate) fn pre_hook(
    spec: &DistributedDBSpec,
    u: &Upgrade,
    world: &World<Observed>,
    actions: Vec<DdbAction>,
) -> D {
    let o = &world.observed;
    let k = u.ordinal;
    let pod = match o.pods.get(&k) {
        Some(p) if p.uid == u.pod_uid && !p.terminating => p,
        _ => {
            return advance(
                u,
                o,
                REPLANNED,
                format!("{} was replaced by someone else", o.pod_name(k)),
                actions,
            );
        }
    };
    let hook = HookPhase::Pre.of(spec);
    let key = hook_key(HookPhase::Pre, k, &u.to, &u.pod_uid, u.attempt);
    let job = o.job(&key);
    if job.is_none() {
        if let Some(replan) = overtaken(u, o) {
            return replan;
        }
        if let Some(why) = hold_before_delete(o, k, u.replicas, &u.to) {
            return stay(WAITING_FOR_PODS, why, actions);
        }
        let skip = match hook {
            None => Some("no preHook is configured"),
            Some(_) if !pod.ready => Some("the pod is not Ready, so there is nothing to prepare"),
            Some(_) => None,
        };
        if let Some(why) = skip {
            return Decision::go(
                to_step(u, UpgradeStep::Restart, &u.pod_uid),
                PRE_HOOK_SKIPPED,
                format!("{}: {why}; replacing it", o.pod_name(k)),
            );
        }
    }
    let Some(hook) = hook else {
        return Decision::go(
            DdbState::Upgrading(Upgrade {
                drained: job.is_some(),
                ..to_upgrade(u, UpgradeStep::Restart, &u.pod_uid)
            }),
            PRE_HOOK_SKIPPED,
            format!(
                "{}: preHook was removed from the spec; replacing it",
                o.pod_name(k)
            ),
        );
    };
    hook_step(
        u,
        world,
        HookPhase::Pre,
        hook,
        key,
        job,
        actions,
        |u, message, _| {
            // The pre-hook ran (or the user went on without it): the pod is drained.
            Decision::go(
                DdbState::Upgrading(Upgrade {
                    drained: true,
                    ..to_upgrade(u, UpgradeStep::Restart, &u.pod_uid)
                }),
                PRE_HOOK_SUCCEEDED,
                message,
            )
        },
    )
}

/// Another pod now comes first: the step's pod was chosen because it was down and is
/// Ready again (the highest one needing replacement goes first), or another pod that
/// needs replacing went down (replacing it takes nothing else down). Re-plan, so that a
/// Ready pod is never taken down out of order. Never for a drained pod: it is out of
/// service already, so it is replaced before anything else is touched.
pub(crate) fn overtaken(u: &Upgrade, o: &Observed) -> Option<D> {
    if u.drained {
        return None;
    }
    match next_pod(o, u.replicas, &u.to) {
        Next::Pod { ordinal, uid } if ordinal != u.ordinal => {
            let down = o.pods.get(&ordinal).is_some_and(|p| !p.ready);
            let why = if down {
                format!(
                    "{} is not Ready and needs replacing, so it goes before {}",
                    o.pod_name(ordinal),
                    o.pod_name(u.ordinal)
                )
            } else {
                format!(
                    "{} is Ready again, so {} goes first",
                    o.pod_name(u.ordinal),
                    o.pod_name(ordinal)
                )
            };
            Some(Decision::go(
                DdbState::Upgrading(u.at(ordinal, uid, o)),
                REPLANNED,
                why,
            ))
        }
        _ => None,
    }
}

/// Replace the step's pod: evict it (UID-preconditioned) once no other is down, then
/// wait for its replacement at the target.
pub(crate) fn restart(u: &Upgrade, o: &Observed, pre_hook: bool, actions: Vec<DdbAction>) -> D {
    let k = u.ordinal;
    let name = o.pod_name(k);
    let seen = o.pods.get(&k);
    match replace::replacement(seen, &u.pod_uid, &u.to) {
        Replacement::Terminating => {
            stay(REPLACING_POD, replace::terminating(&name, &u.to), actions)
        }
        Replacement::Present { ready, .. } => {
            if ready && let Some(replan) = overtaken(u, o) {
                return replan;
            }
            if ready && pre_hook && !u.drained {
                // Chosen while down (so its pre-hook was skipped), it is Ready again: it
                // serves, so its pre-hook runs before it goes down.
                return Decision::go(
                    to_step(u, UpgradeStep::PreHook, &u.pod_uid),
                    REPLANNED,
                    format!("{name} is Ready again; its pre-hook runs before it goes down"),
                );
            }
            match hold_before_delete(o, k, u.replicas, &u.to) {
                Some(why) => stay(WAITING_FOR_PODS, why, actions),
                None => stay(
                    REPLACING_POD,
                    replace::deleting(&name, &u.pod_uid, &u.to),
                    actions,
                )
                .with_actions([DdbAction::EvictPod {
                    ordinal: k,
                    uid: u.pod_uid.clone(),
                }]),
            }
        }
        Replacement::Stale { uid, image } => {
            if !o.statefulset.as_ref().is_some_and(|s| s.serves(&u.to)) {
                return stay(
                    REPLACING_POD,
                    format!(
                        "{name} came back at a stale image; waiting for the StatefulSet template to hold {}",
                        u.to
                    ),
                    actions,
                );
            }
            Decision::go(
                to_step(u, UpgradeStep::PreHook, uid),
                RECREATED_AT_STALE_IMAGE,
                format!(
                    "{name} came back at {image} instead of {}; replacing it again, from its pre-hook",
                    u.to
                ),
            )
        }
        Replacement::Starting => stay(REPLACING_POD, replace::starting(&name, &u.to), actions),
        Replacement::Replaced { uid } => Decision::go(
            to_step(u, UpgradeStep::PostHook, uid),
            POD_REPLACED,
            format!("{name} is Ready at {}", u.to),
        ),
        Replacement::Missing => stay(REPLACING_POD, replace::missing(&name, &u.to), actions),
    }
}

/// The post-hook step: run the replaced pod's post-hook Job, then take the next pod.
pub(crate) fn post_hook(
    spec: &DistributedDBSpec,
    u: &Upgrade,
    world: &World<Observed>,
    actions: Vec<DdbAction>,
) -> D {
    let (o, k) = (&world.observed, u.ordinal);
    let name = o.pod_name(k);
    let pod = match o.pods.get(&k) {
        Some(p) if p.uid == u.pod_uid && !p.terminating => p,
        Some(p) if !p.terminating && p.image.as_deref() == Some(&u.to) && p.ready => {
            return Decision::go(
                to_step(u, UpgradeStep::PostHook, &p.uid),
                POD_RESTARTED,
                format!(
                    "{name} was recreated before its post-hook finished; running it for the new pod"
                ),
            );
        }
        Some(p) if !p.terminating && p.image.as_deref() != Some(&u.to) => {
            return advance(
                u,
                o,
                REPLANNED,
                format!("{name} was replaced by someone else"),
                actions,
            );
        }
        _ => {
            return stay(
                WAITING_FOR_PODS,
                format!("waiting for {name} to come back"),
                actions,
            );
        }
    };
    let done = format!("{name} upgraded to {}", u.to);
    let Some(hook) = HookPhase::Post.of(spec) else {
        return advance(u, o, POD_UPGRADED, done, actions);
    };
    let key = hook_key(HookPhase::Post, k, &u.to, &u.pod_uid, u.attempt);
    let job = o.job(&key);
    if job.is_none() && !pod.ready {
        return stay(
            WAITING_FOR_PODS,
            format!("waiting for {name} to be Ready before its post-upgrade hook"),
            actions,
        );
    }
    hook_step(
        u,
        world,
        HookPhase::Post,
        hook,
        key,
        job,
        actions,
        |u, message, actions| advance(u, o, POD_UPGRADED, format!("{message}; {done}"), actions),
    )
}
