//! `decide`: one function per state, each pure. What every state shares (restoring the
//! stable set and the Service) is at the end.

use std::time::Duration;

use lockstep::engine::{Decision, World};

use crate::actions::CanaryAction;
use crate::api::{CanaryAppSpec, Template};
use crate::observe::Observed;
use crate::render::Track;
use crate::state::{CanaryState, CanaryStep};
use crate::table::reason::*;

/// The file whose code takes every edge (the exported statechart links to it).
pub const SOURCE: &str = file!();

/// A decision of this machine.
pub type D = Decision<CanaryState, CanaryAction>;

// ANCHOR: decide
/// Decide what to do next, from the spec, the persisted state and the observed world.
pub fn decide(spec: &CanaryAppSpec, state: &CanaryState, world: &World<Observed>) -> D {
    if world.deleting {
        return match state {
            CanaryState::Deleted => D::stay(GONE, "deleted"),
            _ => D::go(
                CanaryState::Deleted,
                DELETE_REQUESTED,
                "the object is being deleted",
            ),
        };
    }
    let o = &world.observed;
    match state {
        CanaryState::Creating => creating(spec, o),
        CanaryState::Stable { stable, rejected } => resting(spec, stable, rejected.as_deref(), o),
        CanaryState::Canary {
            stable,
            candidate,
            step,
        } => canary(spec, stable, candidate, *step, world),
        CanaryState::Promoting { target } => promoting(spec, target, o),
        CanaryState::RollingBack { stable, rejected } => rolling_back(spec, stable, rejected, o),
        CanaryState::Deleted => D::stay(GONE, "deleted"),
    }
}
// ANCHOR_END: decide

/// The first rollout: create the stable set (only create: a stale reconcile can never
/// rewrite a set that exists), then wait until every pod is Ready at whatever template
/// it was created with. A template changed meanwhile gets a canary from `Stable`.
fn creating(spec: &CanaryAppSpec, o: &Observed) -> D {
    let Some(set) = &o.stable else {
        let create = CanaryAction::CreateStable {
            template: spec.template.clone(),
            replicas: spec.replicas,
        };
        return D::stay(DEPLOYING, "creating the stable StatefulSet")
            .with_actions([create].into_iter().chain(service(o)));
    };
    if o.stable_at_rest(&set.template, set.replicas) {
        let message = format!(
            "{} pods Ready at {} (revision {})",
            set.replicas,
            set.template.image,
            set.template.revision()
        );
        let stable = CanaryState::Stable {
            stable: set.template.clone(),
            rejected: None,
        };
        return D::go(stable, DEPLOYED, message);
    }
    let revision = set.template.revision();
    let ready = o
        .pods_at(Track::Stable, &revision)
        .filter(|p| p.ready)
        .count();
    let message = format!("{ready} of {} pods Ready", set.replicas);
    D::stay(DEPLOYING, message).with_actions(service(o))
}

// ANCHOR: stable
/// At rest. A new template starts a canary, unless its revision is the one that failed.
fn resting(spec: &CanaryAppSpec, stable: &Template, rejected: Option<&str>, o: &Observed) -> D {
    if let Some(set) = &o.canary {
        let delete = CanaryAction::DeleteCanary {
            uid: set.uid.clone(),
        };
        return D::stay(RESTORING, "removing a leftover canary").with_actions([delete]);
    }
    if o.canary_left() {
        return D::stay(REMOVING_CANARY, "waiting for the leftover canary pod to go");
    }
    let restore = restore(spec, stable, o);
    let wanted = spec.template.revision();
    if wanted == stable.revision() {
        if restore.is_empty() {
            let message = format!("serving {} (revision {wanted})", stable.image);
            return D::stay(SERVING, message);
        }
        return D::stay(RESTORING, "restoring the stable objects").with_actions(restore);
    }
    if rejected == Some(wanted.as_str()) {
        let message = format!(
            "revision {wanted} ({}) failed its canary; serving {} (revision {}); change spec.template to try again",
            spec.template.image,
            stable.image,
            stable.revision()
        );
        return D::stay(CANDIDATE_REJECTED, message)
            .degraded()
            .with_actions(restore);
    }
    let to = CanaryState::Canary {
        stable: stable.clone(),
        candidate: spec.template.clone(),
        step: CanaryStep::Starting,
    };
    let message = format!(
        "one canary pod runs {} (revision {wanted})",
        spec.template.image
    );
    let start = CanaryAction::ApplyCanary {
        template: spec.template.clone(),
    };
    D::go(to, CANARY_STARTED, message).with_actions([start])
}
// ANCHOR_END: stable

// ANCHOR: canary
/// A canary runs: judge its pod by readiness, within `readyWithinSeconds`, then over
/// `bakeSeconds`. Only pods of the candidate's revision count.
fn canary(
    spec: &CanaryAppSpec,
    stable: &Template,
    candidate: &Template,
    step: CanaryStep,
    world: &World<Observed>,
) -> D {
    let o = &world.observed;
    let revision = candidate.revision();
    if spec.template.revision() != revision {
        let to = CanaryState::Stable {
            stable: stable.clone(),
            rejected: None,
        };
        let message = format!("spec.template changed before revision {revision} had a verdict");
        return D::go(to, CANARY_SUPERSEDED, message);
    }
    let mut fixes = restore(spec, stable, o);
    if o.canary
        .as_ref()
        .is_none_or(|set| set.template != *candidate)
    {
        fixes.push(CanaryAction::ApplyCanary {
            template: candidate.clone(),
        });
    }
    let ready = o.pods_at(Track::Canary, &revision).any(|p| p.ready);
    let waited = world.in_state_for();
    let policy = &spec.canary;
    match step {
        CanaryStep::Starting if ready => {
            let to = CanaryState::Canary {
                stable: stable.clone(),
                candidate: candidate.clone(),
                step: CanaryStep::Baking,
            };
            D::go(
                to,
                CANARY_READY,
                format!("the canary pod of revision {revision} is Ready"),
            )
        }
        CanaryStep::Starting => {
            let limit = Duration::from_secs(policy.ready_within_seconds.into());
            if waited >= limit {
                let message = format!(
                    "the canary pod of revision {revision} ({}) was not Ready within {}s",
                    candidate.image, policy.ready_within_seconds
                );
                return fail(stable, &revision, message, o);
            }
            D::stay(
                CANARY_STARTING,
                format!("waiting for the canary pod of revision {revision}"),
            )
            .with_actions(fixes)
            .requeue(limit - waited)
        }
        CanaryStep::Baking if !ready => {
            let message = format!(
                "the canary pod of revision {revision} ({}) stopped being Ready during its bake",
                candidate.image
            );
            fail(stable, &revision, message, o)
        }
        CanaryStep::Baking => {
            let bake = Duration::from_secs(policy.bake_seconds.into());
            if waited >= bake {
                let to = CanaryState::Promoting {
                    target: candidate.clone(),
                };
                let message = format!(
                    "the canary pod of revision {revision} stayed Ready for {}s",
                    policy.bake_seconds
                );
                let roll = CanaryAction::ApplyStable {
                    template: candidate.clone(),
                    replicas: spec.replicas,
                };
                return D::go(to, CANARY_PASSED, message).with_actions([roll]);
            }
            D::stay(
                BAKING,
                format!("the canary pod of revision {revision} is Ready; baking"),
            )
            .with_actions(fixes)
            .requeue(bake - waited)
        }
    }
}

/// The verdict: the candidate failed. It is recorded in the state (`rejected`) with the
/// step that removes the canary, so no later reconcile tries it again.
fn fail(stable: &Template, revision: &str, message: String, o: &Observed) -> D {
    let to = CanaryState::RollingBack {
        stable: stable.clone(),
        rejected: revision.to_owned(),
    };
    D::go(to, CANARY_FAILED, message).with_actions(remove_canary(o))
}
// ANCHOR_END: canary

/// The canary passed: the stable set rolls to `target`; once every pod is Ready at it,
/// the canary goes.
fn promoting(spec: &CanaryAppSpec, target: &Template, o: &Observed) -> D {
    if o.stable_at_rest(target, spec.replicas) {
        let to = CanaryState::Stable {
            stable: target.clone(),
            rejected: None,
        };
        let message = format!(
            "{} pods Ready at {} (revision {})",
            spec.replicas,
            target.image,
            target.revision()
        );
        return D::go(to, PROMOTED, message).with_actions(remove_canary(o));
    }
    let revision = target.revision();
    let ready = o
        .pods_at(Track::Stable, &revision)
        .filter(|p| p.ready)
        .count();
    let message = format!(
        "{ready} of {} pods Ready at revision {revision}",
        spec.replicas
    );
    D::stay(ROLLING_OUT, message).with_actions(restore(spec, target, o))
}

/// The canary failed: remove it; once nothing of it is left, rest at the stable
/// template with the candidate rejected.
fn rolling_back(spec: &CanaryAppSpec, stable: &Template, rejected: &str, o: &Observed) -> D {
    if o.canary_left() {
        let message = format!("removing the canary of revision {rejected}");
        let actions = remove_canary(o).into_iter().chain(restore(spec, stable, o));
        return D::stay(REMOVING_CANARY, message).with_actions(actions);
    }
    let to = CanaryState::Stable {
        stable: stable.clone(),
        rejected: Some(rejected.to_owned()),
    };
    let message = format!(
        "revision {rejected} is rejected; {} (revision {}) serves on",
        stable.image,
        stable.revision()
    );
    D::go(to, ROLLED_BACK, message)
}

/// Delete the canary StatefulSet observed, by its UID.
fn remove_canary(o: &Observed) -> Option<CanaryAction> {
    let uid = o.canary.as_ref()?.uid.clone();
    Some(CanaryAction::DeleteCanary { uid })
}

/// Bring the stable set back to `stable` at `spec.replicas`, and the Service back, if
/// someone changed or deleted them: nothing when they match (an idle reconcile sends
/// no request).
fn restore(spec: &CanaryAppSpec, stable: &Template, o: &Observed) -> Vec<CanaryAction> {
    let drifted = o
        .stable
        .as_ref()
        .is_none_or(|s| s.template != *stable || s.replicas != spec.replicas);
    let apply = CanaryAction::ApplyStable {
        template: stable.clone(),
        replicas: spec.replicas,
    };
    drifted
        .then_some(apply)
        .into_iter()
        .chain(service(o))
        .collect()
}

/// The Service, if it is missing.
fn service(o: &Observed) -> Option<CanaryAction> {
    (!o.service).then_some(CanaryAction::ApplyService)
}
