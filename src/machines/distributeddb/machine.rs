//! The DistributedDB machine: a StatefulSet of database pods, upgraded one ordinal at a
//! time around hooks, backed up on a schedule and on demand, and backed up once more
//! before it goes away.
//!
//! The statechart is generated from the declared table ([`super::table`]):
//! `machines/distributeddb.md` draws every edge and links it to the file that takes it.
//! In short: `Creating` → `Ready`; from `Ready` to `Scaling`, `Upgrading` or `BackingUp`
//! and back; any state → `Finalizing` (a final backup) → `Finalized`.
//!
//! Within `Upgrading { ordinal, step }`, each pod goes through
//! `PreHook → Restart → PostHook`, highest ordinal first:
//!
//! ```text
//!  PreHook(k, uid)  pre-hook Job succeeds (or none is configured, or pod k is already down)
//!     │ PreHookSucceeded / PreHookSkipped
//!  Restart(k, uid)  the uid is persisted first; then pod k is evicted with a UID
//!     │             precondition, only while every other pod is Ready and the
//!     │             StatefulSet's template is at the target and seen by its controller
//!     │ PodReplaced (the recreated pod is Ready at the target image)
//!  PostHook(k, uid') post-hook Job succeeds
//!     │ PodUpgraded
//!  PreHook(j, …)    the next ordinal j < k   …   UpgradeCompleted → Ready(version = target)
//! ```
//!
//! Within `Scaling { replicas, hook }`, each member added (ascending) or removed
//! (descending) is one step, its hooks optional (`spec.scaling`):
//!
//! ```text
//!  hook PreScaleUp(k)    StatefulSet at k; the hook adds member k      ScaleHookSucceeded
//!  hook PostScaleUp(k)   StatefulSet at k+1; runs once pod k exists    ScaleHookSucceeded
//!  no hook               StatefulSet at k+1; every pod Ready → next step (NextReplica)
//!                        or ScalingComplete → Ready
//!  hook PreScaleDown(k)  StatefulSet at k+1; the hook removes member k ScaleHookSucceeded
//!  hook PostScaleDown(k) StatefulSet at k; runs once pod k is gone     ScaleHookSucceeded
//! ```
//!
//! # Guarantees
//! - **One pod down at a time, deliberately.** A pod is evicted only when every other
//!   pod is Ready, the StatefulSet holds the target image and its controller has seen
//!   it; the eviction goes through the PodDisruptionBudget, so a member someone else
//!   evicted a moment before (which a lagging cache may not show) refuses it. A pod that is already down and needs replacing is replaced first; otherwise
//!   ordinals go strictly descending. (Before the cluster first served, Creating replaces
//!   pods at a superseded `spec.image` that it sees not Ready; through a stale cache
//!   such a pod may have just become Ready. Nothing has served yet, so this is allowed.)
//! - **At most one member deliberately out of service.** A pod whose pre-hook ran is
//!   drained (`Upgrade::drained`): it is replaced next, and nothing else is taken down,
//!   drained or re-planned while it waits (if another pod goes down meanwhile, the
//!   drained pod waits for it to be Ready again). A pod chosen while down skips its
//!   pre-hook; if it is Ready again before it is deleted, its pre-hook runs first.
//!   Scaling adds or removes one replica at a time, each once every pod is Ready and the
//!   previous one is gone (a replica that is not Ready may be removed at once: it serves
//!   nothing).
//! - **The membership before the pods.** With scaling hooks, the StatefulSet grows only
//!   after the member's pre-scale-up hook succeeded (the database knows the member before
//!   its pod starts) and shrinks only after its pre-scale-down hook succeeded (the
//!   database no longer counts it in its quorum when its pod goes). The hooks' Jobs are
//!   named from (hook, ordinal, a token persisted when the step began, attempt): a
//!   restart adopts them, and each runs once per step and attempt.
//! - **Pods stay at the version.** At rest, a pod running another image (made from a
//!   template someone edited) is replaced through the same hooked protocol.
//! - **No pod is deleted twice.** The pod's UID is persisted in the state before it is
//!   evicted, and the eviction carries it as a precondition: after a crash it is
//!   re-issued against the same UID and cannot hit the recreated pod. A pod already at
//!   the target image is never deleted.
//! - **Hooks are ordered and run once per attempt.** The pre-hook Job succeeds before
//!   the delete; the post-hook Job succeeds before the next pod is touched. Job names
//!   are derived from (hook, ordinal, target, pod UID, attempt), so a restart finds the
//!   same Job instead of starting another.
//! - **No image nobody asked for.** The StatefulSet's template follows the state's
//!   target, which changes only by a persisted `ImageChanged` edge taken when no pod is
//!   in flight: none has its pre-hook Job running or done and waits to be deleted,
//!   none is deleted and not yet recreated, or recreated at the previous target and
//!   still starting within the
//!   readiness window (`decide::READINESS_WINDOW`, 5 minutes; a replacement
//!   that is not Ready by then counts as failed to start, so that a rollback can replace
//!   it). A pod recreated from a stale template is replaced again.
//! - **Quiet at rest.** Owned objects are re-applied only when the rendered object is not
//!   contained in the live one ([`crate::machines::common::subset`]), so an idle
//!   reconcile makes no request.
//! - **Backups.** S3 credentials only travel as secret references. The finalizer is held
//!   until a final backup succeeded or the user skipped it.
//! - **Certificates before members.** With `spec.tls` and no Secret of the user's, the
//!   certificates are issued before the StatefulSet is applied, and their leaves renewed
//!   at rest only, on the Secret as read ([`super::tls`]).
//!
//! # Assumptions
//! - The StatefulSet controller recreates deleted pods from the current template
//!   (`OnDelete`), and names them `<name>-<ordinal>`.
//! - Hook and backup images are idempotent enough to be retried as new attempts; a
//!   scaling hook finds its work done when run again (a member already added, already
//!   removed).
//! - A change of `replicas` during an upgrade waits for the upgrade to finish; a change
//!   of `image` during Scaling waits until it finishes. Creating follows `spec.image`
//!   directly (nothing has served yet): pods that never became Ready at an earlier image
//!   are replaced, and Ready ones are upgraded once creation finishes (`MixedImages`).
//! - The PodDisruptionBudget ([`super::render::pdb`]) exists when an upgrade evicts, and
//!   the disruption controller's count of healthy members is current: a member deleted
//!   directly (not evicted) or failing at that moment is one more failure the budget
//!   cannot see, as it is to any operator.
//!
//! # Errors
//! `decide` has no error path. A failing hook or backup is a Degraded stay naming the pod,
//! the hook and the Job's reason; a wait that only a human can end says which annotation
//! ends it ([`crate::machines::common::annotations`]). A `Restart` step that waits
//! longer than the readiness window (a replacement that does not become Ready, a pod that
//! is not recreated, another pod that is not Ready) is a Degraded stay naming the pod and
//! what it waits for; the upgrade keeps waiting. An eviction the budget refuses (429) is
//! the driver's error, retried with backoff and shown in `lastError`. States have deadlines
//! ([`Machine::deadline`]) after which a silent stall is reported.

use super::actions::DdbAction;
use super::api::DistributedDBSpec;
use super::decide::{
    D, backing_up::backing_up, creating::creating, ready::ready, scaling::scaling,
    upgrading::upgrading,
};
use super::observe::Observed;
use super::state::{DdbKind, DdbState, UpgradeStep};
use super::table::{TABLE, reason::FINALIZED};
use crate::engine::{Deadline, Decision, Edge, Machine, World};
use crate::machines::common::retry::HOOK_WAY_OUT;
use crate::machines::common::{finalize, on_demand};

/// The way out of a wait for pods (Creating, Scaling), named when its deadline passes.
pub const PODS_WAY_OUT: &str = "fix what keeps the pod named above from becoming Ready (its image, its node, its volume claim); the machine goes on by itself once it is";
/// The way out of a replacement that does not become Ready, named when its deadline
/// passes.
pub const RESTART_WAY_OUT: &str = "fix what keeps the replacement pod from becoming Ready, or set spec.image back (a rollback replaces a pod that does not start)";

/// The DistributedDB machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DistributedDb;

impl Machine for DistributedDb {
    const NAME: &'static str = "distributeddb";
    const DELETION_WAY_OUT: Option<&'static str> = Some(finalize::WAY_OUT);

    type Spec = DistributedDBSpec;
    type State = DdbState;
    type Kind = DdbKind;
    type Observed = Observed;
    type Action = DdbAction;

    fn initial() -> DdbState {
        DdbState::Creating
    }

    fn table() -> &'static [Edge<DdbKind>] {
        TABLE
    }

    fn decide(spec: &DistributedDBSpec, state: &DdbState, world: &World<Observed>) -> D {
        if world.deleting {
            let (o, configured) = (&world.observed, spec.backup_policy.is_some());
            let skip = o.requests.skip_final_backup;
            return finalize::deleting(state, configured, skip, &o.jobs, world.now);
        }
        let o = &world.observed;
        match state {
            DdbState::Creating => creating(spec, o),
            DdbState::Ready { version, replicas } => {
                let lost = on_demand::lost(world, o.requests.backup_now.as_deref());
                ready(
                    spec,
                    version,
                    *replicas,
                    on_demand::Served::of(world),
                    lost,
                    world,
                )
            }
            DdbState::Scaling {
                version,
                from_replicas,
                replicas,
                hook,
            } => scaling(
                spec,
                version,
                *from_replicas,
                *replicas,
                hook.as_ref(),
                world,
            ),
            DdbState::Upgrading(u) => upgrading(spec, u, world),
            DdbState::BackingUp {
                version,
                replicas,
                request,
                job,
            } => {
                let key = on_demand::serving(request, job.as_deref());
                backing_up(spec, version, *replicas, (request, &key), world)
            }
            DdbState::Finalizing { .. } | DdbState::Finalized => {
                Decision::stay(FINALIZED, "waiting for the object to be deleted")
            }
        }
    }

    fn is_ready(state: &DdbState) -> bool {
        matches!(state, DdbState::Ready { .. } | DdbState::BackingUp { .. })
    }

    fn deadline(state: &DdbState) -> Deadline {
        match state {
            DdbState::Scaling { hook: Some(_), .. } => Deadline::minutes(60, HOOK_WAY_OUT),
            DdbState::Creating | DdbState::Scaling { .. } => Deadline::minutes(15, PODS_WAY_OUT),
            DdbState::Upgrading(u) => match u.step {
                UpgradeStep::Restart => Deadline::minutes(15, RESTART_WAY_OUT),
                UpgradeStep::PreHook | UpgradeStep::PostHook => Deadline::minutes(60, HOOK_WAY_OUT),
            },
            DdbState::BackingUp { .. } => Deadline::minutes(6 * 60, on_demand::WAY_OUT),
            DdbState::Finalizing { .. } => Deadline::minutes(60, finalize::WAY_OUT),
            DdbState::Ready { .. } | DdbState::Finalized => Deadline::None,
        }
    }

    fn finalized(state: &DdbState) -> bool {
        finalize::States::is_finalized(state)
    }

    fn acks(state: &DdbState) -> Vec<(&'static str, String)> {
        match state {
            DdbState::BackingUp { request, job, .. } => on_demand::acks(request, job.as_deref()),
            _ => Vec::new(),
        }
    }

    /// Data may exist once a StatefulSet, a pod or a volume claim does.
    fn holds_data(o: &Observed) -> bool {
        o.statefulset.is_some() || !o.pods.is_empty() || !o.own.volumes.is_empty()
    }

    fn step_label(state: &DdbState) -> Option<String> {
        match state {
            DdbState::Scaling {
                from_replicas,
                replicas,
                hook: None,
                ..
            } => Some(format!("{from_replicas}->{replicas}")),
            DdbState::Scaling {
                from_replicas,
                replicas,
                hook: Some(h),
                ..
            } => Some(format!(
                "{from_replicas}->{replicas}/{}:{}{}",
                h.phase,
                h.ordinal,
                if h.attempt > 1 {
                    format!("#{}", h.attempt)
                } else {
                    String::new()
                }
            )),
            DdbState::Upgrading(u) if u.attempt > 1 => {
                Some(format!("{}/{}#{}", u.ordinal, u.step, u.attempt))
            }
            DdbState::Upgrading(u) => Some(format!("{}/{}", u.ordinal, u.step)),
            DdbState::Finalizing { attempt } => Some(format!("FinalBackup#{attempt}")),
            _ => None,
        }
    }
}
