//! The PostgresCluster machine: a primary and streaming replicas in one StatefulSet,
//! whose roles the operator assigns with the pod label `lockstep.dev/role`.
//!
//! ```text
//!  [*] ─► Creating ──ClusterCreated──► Ready ◄─────────────PrimaryRecovered──┐
//!          │ ▲ CredentialsGenerated    │ │ │ ▲                               │
//!          └─┘                         │ │ │ └ BackupSucceeded/Failed/… ─ BackingUp
//!          └─MixedImages─┐   ImageChanged│ │ └ BackupRequested ─────────────►│
//!                        ▼             ▼ │                                   │
//!                    Upgrading ◄──────┘ │ ReplicasChanged ─► Scaling ──ScalingComplete─► Ready
//!   PodChosen, PodUpgraded, │  ▲          │                                   │
//!   Replanned, ImageChanged └──┘          │ PrimaryOutsideScale               │
//!                        │ SwitchoverStarted ▼                                │
//!                        └──────────► SwitchingOver ──SwitchoverCompleted──► Upgrading | Ready
//!                                      │  ▲  OldPrimaryDemoted, PromotionRetried, TargetChanged
//!    Ready, Scaling, Upgrading,        │  └──┘
//!    BackingUp ──PrimaryNotReady──► PrimaryLost ──FailoverStarted──► SwitchingOver(failover)
//!                                                                    ──FailoverCompleted──► Ready
//!
//!  every state above ──deleting──► Finalizing(attempt) ──FinalBackupSucceeded──► Finalized
//!                    └──deleting, no spec.backup / skip annotation─────────────► Finalized
//! ```
//!
//! **Roles.** The operator is the only writer of `lockstep.dev/role`: the state names the
//! primary's ordinal (pod 0 at creation), the pod at that ordinal is labelled `primary`
//! and every other pod `replica`, except a pod that is (or may still be) a writable
//! primary but must not serve: it is labelled `demoted`. A pod reads its role at start
//! (downward API), so a role change takes effect when the pod restarts; `<name>-rw`
//! selects the primary label, `<name>-ro` the replica label, and neither selects
//! `demoted`. A `demoted` pod keeps that label until it is recreated (a new pod has no
//! label, waits for one and is labelled `replica`); outside a switchover the machine
//! deletes it (UID-preconditioned) so that it comes back as a standby. If it restarts in
//! place, its entrypoint treats `demoted` like `replica` (it rewinds).
//!
//! **Upgrading** (a change of `spec.version`'s minor or of `spec.image`): one pod at a
//! time, the pod's UID persisted before its UID-preconditioned delete, each waiting for
//! its replacement to be Ready at the target image: replicas first, highest ordinal
//! first, then a **switchover** to an upgraded Ready replica, then the old primary,
//! which rejoins as a standby (the entrypoint rewinds it).
//!
//! **SwitchingOver** (for an upgrade, a scale-down below the primary, or a failover):
//! 1. the target is chosen and persisted with the old primary's UID (*intent first*);
//! 2. `Demote`: the old primary is labelled `demoted`, so `-rw` selects nobody from here
//!    on and `-ro` does not route to the still-writable old primary either (a failover
//!    also deletes the failed primary, UID-preconditioned, so it can only
//!    come back as a standby); persisted only after the label is in;
//! 3. `Promote`: the promote Job (`promote.sh`: `pg_promote()` over the network) runs
//!    against the target, which must be Ready; the target is labelled `demoted` when
//!    the Job is created (out of `-ro` before it can become writable). In a planned switchover it first ends
//!    the old primary's client sessions and waits until the target has replayed all
//!    the old primary wrote, so no acknowledged commit is lost. A failed attempt is
//!    retried with backoff as a new Job, and a target that is no longer Ready is
//!    replaced by another Ready one;
//! 4. once the Job succeeded, one transition carries both label moves, the old primary
//!    to `demoted` (`replica` if it was already recreated) first and then the target to
//!    `primary`: `-rw` never selects two pods. The old primary is labelled `replica`
//!    only once it has restarted: a new pod (new UID) is labelled `replica`.
//!
//! **Failover.** When the primary is not Ready, the machine moves to `PrimaryLost`; if
//! the primary is still not Ready `spec.failoverDelaySeconds` later, a Ready replica is
//! promoted as above, and the history, the `PrimaryAvailable` condition and
//! `status.lastFailover` say why.
//!
//! # Guarantees
//! - **At most one pod carries the primary label.** A pod is labelled `primary` only if
//!   the persisted state names it; the state names a new primary only through a
//!   switchover, whose last transition labels the old primary `demoted` before the new
//!   one `primary` (and waits while the old primary's pod is not observed at all).
//! - **No pod labelled `replica` is writable** (`-ro` never routes to a primary): a pod
//!   that is or may be a primary (labelled `primary` or `demoted`, or a promote target)
//!   is labelled `demoted` until it is recreated.
//! - **A replica that is not Ready is never promoted**: the promote Job is created only
//!   for a target observed Ready with the UID the intent recorded.
//! - **Replicas are upgraded before the primary**, and the serving primary is never
//!   deleted for an upgrade while another instance could take over: it first hands the
//!   role over by switchover.
//! - **No pod is deleted twice.** The UID is persisted before the delete, which carries it
//!   as a precondition; a pod already at the target image is never chosen.
//! - **Intent before action.** A switchover's target and the old primary's UID are
//!   persisted before the first label moves; Job names derive from (target, UID,
//!   attempt), so a restarted operator finds the same Job instead of running another.
//! - **Backups.** S3 and database credentials reach Jobs only as secret references; the
//!   finalizer is held until a final backup Job succeeded or the user skipped it.
//! - **Quiet at rest.** Owned objects are re-applied only when the rendered object is not
//!   contained in the live one, labels only when they differ. At rest the machine looks
//!   again every `RESYNC` (five minutes) without any event (reading caches only), so a missed watch
//!   event cannot postpone noticing a failed primary for longer.
//!
//! # Assumptions
//! - The StatefulSet controller recreates deleted pods (`OnDelete`, `Parallel`) as
//!   `<name>-<ordinal>`, from the current template, with the same volume claim.
//! - A pod reads its role label when it starts (the entrypoint waits for the label), and
//!   its readiness probe (`pg_isready`) is what "Ready" means here.
//! - Only Lockstep writes `lockstep.dev/role`. Volume claims are not deleted by hand (a
//!   primary that lost its data would bootstrap an empty cluster).
//! - Failover measures `failoverDelaySeconds` from when the operator first saw the
//!   primary not Ready (`PrimaryLost` entered), so a stopped operator delays it.
//! - A change of `spec.replicas` during an upgrade or a switchover waits until it is done.
//!
//! # Errors
//! `decide` has no error path. A failing promote or backup Job is a Degraded stay naming
//! the Job and its reason; a blocked step (no Ready replica to promote, a scale-down
//! below the primary with nobody to hand over to) is a Degraded stay saying what would
//! unblock it. States have deadlines ([`Machine::deadline`]) after which a silent stall
//! is reported.

use std::time::Duration;

use super::actions::PgAction;
use super::api::PostgresClusterSpec;
use super::decide::fencing::keep_lease;
use super::decide::{
    D, backing_up::backing_up, creating::creating, finalizing::begin_finalizing,
    finalizing::finalizing, primary_lost::primary_lost, ready::ready, scaling::scaling,
    switching_over::switching_over, upgrading::upgrading,
};
use super::observe::Observed;
use super::state::{PgKind, PgState};
use super::table::{TABLE, reason::FINALIZED};
use crate::engine::{Decision, Edge, Machine, Wait, World};

/// In a state naming the primary (not Creating, not mid-switchover), a stay also keeps
/// the primary Lease naming the primary's pod ([`keep_lease`]), and looks again when a
/// holder that may still be writable would expire.
fn keep_lease_at_rest(
    spec: &PostgresClusterSpec,
    state: &PgState,
    world: &World<Observed>,
    d: crate::machines::postgres::decide::D,
) -> crate::machines::postgres::decide::D {
    let primary = match state {
        PgState::Ready { cluster }
        | PgState::Scaling { cluster, .. }
        | PgState::Upgrading { cluster, .. }
        | PgState::PrimaryLost { cluster }
        | PgState::BackingUp { cluster, .. } => cluster.primary,
        _ => return d,
    };
    let Decision::Stay { wait, .. } = &d else {
        return d;
    };
    let (moves, wake) = keep_lease(spec, primary, &world.observed, world.now);
    let wait = match (*wait, wake) {
        (Wait::Requeue(w), Some(v)) => Some(w.min(v)),
        (Wait::Watch, Some(v)) => Some(v),
        (_, None) => None,
    };
    let d = d.with_actions(moves);
    match wait {
        Some(w) => d.requeue(w),
        None => d,
    }
}
use crate::machines::common::annotations::BACKUP_NOW;
use crate::machines::common::on_demand;

/// The PostgresCluster machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Postgres;

impl Machine for Postgres {
    const NAME: &'static str = "postgrescluster";

    type Spec = PostgresClusterSpec;
    type State = PgState;
    type Kind = PgKind;
    type Observed = Observed;
    type Action = PgAction;

    fn initial() -> PgState {
        PgState::Creating {
            credentials_created: false,
        }
    }

    fn table() -> &'static [Edge<PgKind>] {
        TABLE
    }

    fn decide(spec: &PostgresClusterSpec, state: &PgState, world: &World<Observed>) -> D {
        if world.deleting {
            return match state {
                PgState::Finalizing { attempt } => finalizing(spec, *attempt, world),
                PgState::Finalized => Decision::stay(FINALIZED, "finalizer released"),
                _ => begin_finalizing(spec, &world.observed),
            };
        }
        let o = &world.observed;
        let d = match state {
            PgState::Creating {
                credentials_created,
            } => creating(spec, *credentials_created, world),
            PgState::Ready { cluster } => ready(spec, cluster, world.acked(BACKUP_NOW), o),
            PgState::Scaling {
                cluster,
                from_replicas,
            } => scaling(spec, cluster, *from_replicas, o),
            PgState::Upgrading { cluster, pod } => upgrading(spec, cluster, pod.as_ref(), o),
            PgState::SwitchingOver(s) => switching_over(spec, s, world),
            PgState::PrimaryLost { cluster } => primary_lost(spec, cluster, world),
            PgState::BackingUp { cluster, request } => backing_up(
                spec,
                cluster,
                request,
                world.acked(BACKUP_NOW),
                world.in_state_for(),
                o,
            ),
            PgState::Finalizing { .. } | PgState::Finalized => {
                Decision::stay(FINALIZED, "waiting for the object to be deleted")
            }
        };
        keep_lease_at_rest(spec, state, world, d)
    }

    fn is_ready(state: &PgState) -> bool {
        matches!(state, PgState::Ready { .. } | PgState::BackingUp { .. })
    }

    fn deadline(state: &PgState) -> Option<Duration> {
        const MINUTE: u64 = 60;
        let minutes = match state {
            PgState::Creating { .. } | PgState::Scaling { .. } | PgState::Upgrading { .. } => 15,
            PgState::SwitchingOver(_) => 10,
            PgState::BackingUp { .. } => 6 * 60,
            PgState::Finalizing { .. } => 60,
            PgState::Ready { .. } | PgState::PrimaryLost { .. } | PgState::Finalized => {
                return None;
            }
        };
        Some(Duration::from_secs(minutes * MINUTE))
    }

    fn finalized(state: &PgState) -> bool {
        matches!(state, PgState::Finalized)
    }

    fn acks(state: &PgState) -> Vec<(&'static str, String)> {
        match state {
            PgState::BackingUp { request, .. } => vec![on_demand::ack(request)],
            _ => Vec::new(),
        }
    }

    /// Data may exist once a StatefulSet or a pod does.
    fn holds_data(o: &Observed) -> bool {
        o.statefulset.is_some() || !o.pods.is_empty()
    }

    fn step_label(state: &PgState) -> Option<String> {
        match state {
            PgState::Scaling {
                cluster,
                from_replicas,
            } => Some(format!("{from_replicas}->{}", cluster.replicas)),
            PgState::Upgrading { pod: Some(pod), .. } => Some(format!("pod {}", pod.ordinal)),
            PgState::SwitchingOver(s) if s.attempt > 1 => Some(format!(
                "{}->{}/{}#{}",
                s.cluster.primary, s.target.ordinal, s.step, s.attempt
            )),
            PgState::SwitchingOver(s) => Some(format!(
                "{}->{}/{}",
                s.cluster.primary, s.target.ordinal, s.step
            )),
            PgState::Finalizing { attempt } => Some(format!("FinalBackup#{attempt}")),
            _ => None,
        }
    }
}
