//! SwitchingOver: the primary role moves (for an upgrade, a scale-down or a failover):
//! intent, demote, fence, survey (a failover), promote, elect.

use super::PROMOTE_RETRY_LIMIT;
use super::fencing::recreate_lease;
use super::fencing::{By, Fence, fence, hand_gated, hatch, lease_seconds, stamp, wait_for};
use super::old_primary_role;
use super::survey::{Choice, Reach, answered, describe, furthest_unready, most_advanced, reach};
use super::{D, choose_target, label_moves, objects, promoting_moves, stay};
use crate::engine::{Decision, World};
use crate::machines::common::annotations::RETRY_PROMOTE;
use crate::machines::common::retry::RetryBudget;
use crate::machines::postgres::actions::{DeleteCause, LsnGate, PgAction, Role, survey_key};
use crate::machines::postgres::api::PostgresClusterSpec;
use crate::machines::postgres::observe::{Observed, RELEASED_LSN, SWITCHOVER, holder_identity};
use crate::machines::postgres::state::{
    PgState, PodRef, Surveyed, SwitchCause, SwitchStep, Switchover, Topology,
};
use crate::machines::postgres::status;
use crate::machines::postgres::table::reason::*;
use crate::machines::postgres::terms::{self, Quorum};

mod hand_over;
pub(crate) mod promote;
pub(crate) mod surveying;

use hand_over::*;
use promote::*;
use surveying::*;
pub(crate) use surveying::{retarget, strictest};

/// How long past `L + S` a switchover may wait for the Lease holder to be fenced before
/// it reports Degraded (the holder keeps renewing: its server is alive and writable).
pub(crate) const FENCE_GRACE_SECONDS: i64 = 30;

pub(crate) fn begin_switchover(
    cluster: &Topology,
    target: PodRef,
    cause: SwitchCause,
    request: Option<String>,
    o: &Observed,
    reason: &'static str,
    message: String,
) -> D {
    Decision::go(
        PgState::SwitchingOver(Switchover {
            cluster: cluster.clone(),
            old_uid: o.pods.get(&cluster.primary).map(|p| p.uid.clone()),
            target,
            step: SwitchStep::Demote,
            attempt: 1,
            cause,
            budget: RetryBudget::begin(o.own.requests.retry_promote.clone()),
            survey_attempt: None,
            surveyed: None,
            request,
        }),
        reason,
        message,
    )
}

pub(crate) fn switching_over(
    spec: &PostgresClusterSpec,
    s: &Switchover,
    world: &World<Observed>,
) -> D {
    let o = &world.observed;
    let cluster = &s.cluster;
    let old = cluster.primary;
    let t = s.target.ordinal;
    let what = match s.cause {
        SwitchCause::Failover => "failover",
        SwitchCause::Upgrade | SwitchCause::Scale | SwitchCause::Requested => "switchover",
    };
    // A request for the pod that is already primary moves nothing: it is served (its
    // token recorded as this state began) and done.
    if s.cause == SwitchCause::Requested && t == old {
        return Decision::go(
            PgState::Ready {
                cluster: cluster.clone(),
            },
            ALREADY_PRIMARY,
            format!(
                "{SWITCHOVER}={}: {} is already the primary; nothing moved",
                s.request.as_deref().unwrap_or_default(),
                o.pod_name(old)
            ),
        );
    }
    // Mid-switchover nobody is labelled primary until the target holds the Lease, and
    // only the target's own pod: a pod that replaced it at its ordinal waits for a
    // Lease naming it, so it starts as a standby meanwhile (and may be chosen again).
    let mut actions = objects(spec, &cluster.image, cluster.replicas, o);
    let target_seen = o.pods.get(&t).is_some_and(|p| p.uid == s.target.uid);
    actions.extend(match s.step {
        // Not while the old primary is unseen: it may still carry the label. The target
        // keeps the label it has meanwhile: demoted while it holds the Lease, its agent
        // would stop the server it is promoting (found by the model check at 6,000
        // cases: the old primary evicted mid-promotion, and nobody left to promote).
        // Nor while the target is not Ready (found by the deep model check: its probe
        // failed after the hand-over, and it was labelled, and so promoted, anyway):
        // `promote` chooses another or waits for it.
        SwitchStep::Promote if target_seen && lease_holds_target(s, o).is_ok() => {
            let serving = o.pods.get(&t).is_some_and(|p| p.serving());
            if o.pods.contains_key(&old) && serving {
                promoting_moves(o, t)
            } else {
                label_moves(o, None)
                    .into_iter()
                    .filter(|a| !matches!(a, PgAction::Label { ordinal, .. } if *ordinal == t))
                    .collect()
            }
        }
        _ => label_moves(o, None),
    });
    match s.step {
        SwitchStep::Demote => {
            let mut demote = vec![];
            if let Some(pod) = o.pods.get(&old) {
                // Still running as a writable primary until it restarts: served by
                // neither Service (`replica` would put it behind `-ro`).
                demote.push(pod.label(old, old_primary_role(s, pod)));
                if s.cause == SwitchCause::Failover
                    && !pod.terminating
                    && s.old_uid.as_deref() == Some(pod.uid.as_str())
                {
                    demote.push(PgAction::DeletePod {
                        ordinal: old,
                        uid: pod.uid.clone(),
                        cause: DeleteCause::Fence,
                    });
                }
            }
            let demoted_as: &str = match demote.first() {
                Some(PgAction::Label { role, .. }) => (*role).into(),
                _ => "demoted",
            };
            let fenced = if demote.len() > 1 {
                " and deleted, so that it restarts as a standby"
            } else {
                ""
            };
            Decision::go(
                PgState::SwitchingOver(Switchover {
                    step: SwitchStep::Fence,
                    ..s.clone()
                }),
                OLD_PRIMARY_DEMOTED,
                format!(
                    "{what}: {} labelled {}{fenced}; {} is promoted once it is certainly fenced",
                    o.pod_name(old),
                    demoted_as,
                    o.pod_name(t)
                ),
            )
            .with_actions(demote)
        }
        SwitchStep::Fence => hand_over(spec, s, world, what, actions),
        SwitchStep::Survey => survey(spec, s, world, what, actions),
        SwitchStep::Promote => match lease_holds_target(s, o) {
            Ok(()) => promote(spec, s, world, what, actions),
            Err(why) => Decision::go(
                PgState::SwitchingOver(Switchover {
                    step: SwitchStep::Fence,
                    ..s.clone()
                }),
                LEASE_LOST,
                format!(
                    "{what}: {why}; {} is promoted once the Lease is handed to it again",
                    o.pod_name(t)
                ),
            ),
        },
    }
}

/// Whether the Lease names the target (the pod the intent recorded), or why not.
fn lease_holds_target(s: &Switchover, o: &Observed) -> Result<(), String> {
    let t = s.target.ordinal;
    let want = holder_identity(&o.pod_name(t), &s.target.uid);
    match o.own.lease.as_ref().and_then(|l| l.holder.as_deref()) {
        Some(h) if h == want => Ok(()),
        Some(h) => Err(format!("the Lease names {h}, not {want}")),
        None => Err(format!("the Lease names nobody, not {want}")),
    }
}

/// The switchover's target: its ordinal and its pod's name.
fn target_pod(s: &Switchover, o: &Observed) -> (i32, String) {
    (s.target.ordinal, o.pod_name(s.target.ordinal))
}

/// The ordinals a switchover may promote: below `spec.replicas` when it makes room for a
/// scale-down, any otherwise.
pub(crate) fn target_bound(spec: &PostgresClusterSpec, s: &Switchover) -> i32 {
    match s.cause {
        SwitchCause::Scale => spec.replicas.min(s.cluster.replicas),
        SwitchCause::Upgrade | SwitchCause::Failover | SwitchCause::Requested => s.cluster.replicas,
    }
}
