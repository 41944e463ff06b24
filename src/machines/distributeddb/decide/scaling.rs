//! Scaling: replicas are added or removed one at a time, each step behind the readiness
//! gate of upgrades, by stepping the StatefulSet's `spec.replicas` (its
//! `podManagementPolicy` is `Parallel` and immutable on a live StatefulSet, so the
//! machine, not the StatefulSet controller, keeps it to one member at a time). Each
//! step may run hooks (`spec.scaling`): a pre-hook before the StatefulSet takes the
//! step, a post-hook once it is done ([`hooked`]).

use super::hooks::{HookedScale, hook_step};
use super::{D, scaling_upkeep, shape_at, stay};
use crate::engine::{Decision, World};
use crate::machines::common::jobs::JobOutcome;
use crate::machines::common::meta::short_hash;
use crate::machines::common::retry::RetryBudget;
use crate::machines::distributeddb::actions::{DdbAction, Shape, hook_key};
use crate::machines::distributeddb::api::DistributedDBSpec;
use crate::machines::distributeddb::observe::Observed;
use crate::machines::distributeddb::state::{DdbState, ScaleHook, ScalePhase};
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

/// Decide in Scaling: the StatefulSet holds `replicas`; `hook` is the scaling hook due,
/// if one is.
pub(crate) fn scaling(
    spec: &DistributedDBSpec,
    version: &str,
    from_replicas: i32,
    replicas: i32,
    hook: Option<&ScaleHook>,
    world: &World<Observed>,
) -> D {
    let o = &world.observed;
    let shape = shape_at(spec, version, replicas, o);
    let actions = scaling_upkeep(spec, &shape, o);
    if let Some(hook) = hook {
        let s = HookedScale {
            version: version.to_owned(),
            from_replicas,
            replicas,
            hook: hook.clone(),
        };
        return hooked(spec, &s, &shape, world, actions);
    }
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
        } if next != replicas => begin_step(
            spec,
            (version, from_replicas, replicas, next),
            if settled {
                NEXT_REPLICA
            } else {
                REPLICAS_CHANGED
            },
            describe_step(o, replicas, next, spec.replicas),
            world,
        ),
        Step::Next { .. } => stay(WAITING_FOR_PODS, format!("{replicas} replicas"), actions),
        Step::Wait(why) => stay(
            WAITING_FOR_PODS,
            format!("{replicas} of {} replicas: {why}", spec.replicas),
            actions,
        ),
    }
}

/// The step of `(version, from_replicas, replicas, next)`: the StatefulSet goes from
/// `replicas` to `next` after the step's pre-hook (at once if none is configured),
/// with its post-hook due if one is configured. The hooks' token is chosen here, so
/// the step's Jobs are named before any of them exists.
pub(crate) fn begin_step(
    spec: &DistributedDBSpec,
    (version, from_replicas, replicas, next): (&str, i32, i32, i32),
    reason: &'static str,
    message: String,
    world: &World<Observed>,
) -> D {
    let (pre, post) = ScalePhase::of_step(replicas, next);
    let ordinal = replicas.max(next) - 1;
    let token = short_hash(&[version, &ordinal.to_string(), &world.now.to_rfc3339()]);
    let due = |phase: ScalePhase| {
        phase
            .hook()
            .of(spec)
            .map(|_| ScaleHook::begin(phase, ordinal, token.clone(), &world.observed))
    };
    let (replicas, hook) = match due(pre) {
        Some(hook) => (replicas, Some(hook)),
        None => (next, due(post)),
    };
    Decision::go(
        DdbState::Scaling {
            version: version.to_owned(),
            from_replicas,
            replicas,
            hook,
        },
        reason,
        message,
    )
}

impl ScaleHook {
    /// `phase`'s hook for member `ordinal`, from its first attempt; the escape-hatch
    /// tokens already set are acknowledged, so only new ones act.
    fn begin(phase: ScalePhase, ordinal: i32, token: String, o: &Observed) -> Self {
        let requests = &o.own.requests;
        ScaleHook {
            phase,
            ordinal,
            token,
            attempt: 1,
            budget: RetryBudget::begin(requests.retry_hook.clone()),
            skip_ack: requests.skip_hook.clone(),
        }
    }
}

/// A step with its hook due. A pre-hook runs at once (the step was begun once a member
/// could be added or removed) and, once it succeeds or is skipped, the StatefulSet
/// takes the step, with the post-hook due if one is configured. A post-hook runs once
/// the step is done (the added member's pod created, the removed one's gone). When
/// `spec.replicas` goes back below a member added whose post-scale-up hook has not
/// started or has failed, the hook is dropped, so that the member can be removed
/// (through its pre-scale-down hook) without waiting for a person.
fn hooked(
    spec: &DistributedDBSpec,
    s: &HookedScale,
    shape: &Shape,
    world: &World<Observed>,
    actions: Vec<DdbAction>,
) -> D {
    let o = &world.observed;
    let h = &s.hook;
    let phase = h.phase.hook();
    let name = o.pod_name(h.ordinal);
    let key = hook_key(phase, h.ordinal, &s.version, &h.token, h.attempt);
    let job = o.job(&key);
    let up = h.phase.is_up();
    // Where the scaling goes once this hook is behind it (done, or dropped): after a
    // pre-hook, the StatefulSet's step (and the post-hook, if configured); after a
    // post-hook, the next step.
    let after = |s: &HookedScale, reason, message| {
        if !h.phase.is_pre() {
            return Decision::go(s.state(s.replicas, None), reason, message);
        }
        let next = if up { s.replicas + 1 } else { s.replicas - 1 };
        let (_, post) = ScalePhase::of_step(s.replicas, next);
        let post = post
            .hook()
            .of(spec)
            .map(|_| ScaleHook::begin(post, h.ordinal, h.token.clone(), o));
        Decision::go(s.state(next, post), reason, message)
    };
    if !h.phase.is_pre() {
        let failed = job.is_some_and(|j| matches!(j.outcome, JobOutcome::Failed { .. }));
        if up && spec.replicas < s.replicas && (job.is_none() || failed) {
            return Decision::go(
                s.state(s.replicas, None),
                SCALE_HOOK_DROPPED,
                format!(
                    "spec.replicas is {}: {name} is removed without its {}",
                    spec.replicas,
                    phase.describe()
                ),
            );
        }
        if job.is_none() && !step_done(shape, o, h.ordinal, up, !actions.is_empty()) {
            let what = if up { "to be created" } else { "to go" };
            return stay(
                WAITING_FOR_PODS,
                format!("waiting for {name} {what} before its {}", phase.describe()),
                actions,
            );
        }
    }
    let Some(hook) = phase.of(spec) else {
        let message = format!("{name}: the {} was removed from the spec", phase.describe());
        return after(s, SCALE_HOOK_DROPPED, message);
    };
    hook_step(s, world, phase, hook, key, job, actions, |s, message, _| {
        after(s, SCALE_HOOK_SUCCEEDED, message)
    })
}

/// The step that added or removed member `ordinal` is done: the StatefulSet holds
/// `shape` and its controller has seen it, no pod is left beyond it, and an added
/// member's pod exists. (Not Ready: a database may only call a member Ready once the
/// post-scale-up hook has made it a full one, as etcd does of a learner. The step's
/// end, like every next step, still waits for every pod to be Ready.)
fn step_done(shape: &Shape, o: &Observed, ordinal: i32, up: bool, upkeep_pending: bool) -> bool {
    let seen = !upkeep_pending
        && o.statefulset
            .as_ref()
            .is_some_and(|s| s.holds(&shape.image, shape.replicas) && s.caught_up);
    let beyond = o.pods.keys().any(|k| *k >= shape.replicas);
    let member_started = o.pods.get(&ordinal).is_some_and(|p| !p.terminating);
    seen && !beyond && (!up || member_started)
}
