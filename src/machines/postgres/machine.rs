//! The PostgresCluster machine: a primary and streaming replicas in one StatefulSet,
//! whose roles the operator assigns with the pod label `lockstep.dev/role`.
//!
//! ```text
//!  [*] ─► Creating ──ClusterCreated, Adopted──► Ready ◄─────PrimaryRecovered──┐
//!          │ ▲ CredentialsGenerated    │ │ │ ▲                               │
//!          └─┘                         │ │ │ └ BackupSucceeded/Failed/… ─ BackingUp
//!          └─MixedImages─┐   ImageChanged│ │ └ BackupRequested ─────────────►│
//!                        ▼             ▼ │                                   │
//!                    Upgrading ◄──────┘ │ ReplicasChanged ─► Scaling ──ScalingComplete─► Ready
//!   PodChosen, PodUpgraded, │  ▲          │                                   │
//!   Replanned, ImageChanged └──┘          │ PrimaryOutsideScale               │
//!                        │ SwitchoverStarted ▼                                │
//!                        └──────────► SwitchingOver ──SwitchoverCompleted──► Upgrading | Ready
//!                                      │  ▲  OldPrimaryDemoted, LeaseHandedOver, LeaseLost,
//!                                      │  │  PromotionRetried, TargetChanged
//!    Ready, Scaling, Upgrading,        │  └──┘
//!    BackingUp ──PrimaryNotReady,──► PrimaryLost ──FailoverStarted──► SwitchingOver(failover)
//!                PrimaryNotRenewing
//!                                                                    ──FailoverCompleted──► Ready
//!
//!  Ready ──RestoreRequested──► RestoringInPlace: StopWrites ─WritesStopped─► ReplaceVolumes
//!    ─VolumesReplaced─► RestorePrimary ─PrimaryRestored─► CloneReplicas ─RestoreCompleted─► Ready
//!
//!  Ready ──HibernationRequested──► Hibernating: Stopping ─InstancesStopped─► Asleep
//!    ─WakeRequested─► Waking ─ClusterWoken─► Ready   (Waking ─HibernationRequested─► Stopping)
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
//! place, its agent treats `demoted` like `replica` (it rewinds).
//!
//! **Upgrading** (a change of `spec.version`'s minor or of `spec.image`): one pod at a
//! time, the pod's UID persisted before its UID-preconditioned delete, each waiting for
//! its replacement to be Ready at the target image: replicas first, highest ordinal
//! first, then a **switchover** to an upgraded Ready replica, then the old primary,
//! which rejoins as a standby (its agent rewinds it).
//!
//! **Fencing.** The Lease `<name>-primary` (coordination.k8s.io) names the one pod,
//! `<pod-name>/<pod-uid>`, allowed to run a writable server. The pods run as
//! `<name>-instance`, whose Role may get, update and patch that Lease and nothing else.
//! The holder's agent (`lockstep instance`, `docs/instance-manager.md`) renews it every
//! `R` = 2 s with its own clock as `renewTime`, and stops its server at once (an
//! immediate stop, then a kill) when the Lease names someone else or nobody, when its
//! role label is no role, when it never renewed, or when no renewal succeeded for
//! `T` = ⌊L/2⌋ seconds; a server stopped on purpose (a demotion) releases the Lease
//! (`lockstep.dev/released-by`). A pod starts a writable server, or promotes its running
//! standby, only right after a renewal of its own, while it holds the Lease and is
//! labelled `primary`: nobody promotes a server from outside. The operator is the only one who hands
//! the Lease to a new holder, with a merge patch fenced on the Lease's resourceVersion as
//! read, and only once the current holder is **certainly fenced**: it released the Lease,
//! or `renewTime + L + S` has passed on the operator's clock, or a person asserted it
//! (`lockstep.dev/fenced`). `S` = `spec.fencing.clockSkewSeconds`; `L` is the longest
//! lease duration any living holder may run with: the largest of the Lease's
//! `leaseDurationSeconds` (a holder writes the `L` its fence runs with at each renewal),
//! `spec.fencing.leaseDurationSeconds`, and the `L` each observed pod was created with
//! (its `LOCKSTEP_LEASE_SECONDS`; pods are `OnDelete`, so lowering the spec's `L` never
//! shortens a wait for a pod created under a longer one). A pod that is no longer
//! observed is **not** fenced by that alone: a pod force-deleted while its node is
//! partitioned keeps running its container, and a pod whose labels or owner reference
//! were removed looks gone too; its Lease must expire (or a person say so). A Lease
//! always has a renewal time: one the operator creates naming nobody carries its
//! creation time, and one found without (edited by hand) is stamped with the operator's
//! clock, so no wait is without end. Renewals alone trigger no reconcile: a wait
//! computes the expiry and asks for a requeue at that time, and at rest the machine
//! looks again when the primary's Lease would expire unrenewed.
//!
//! **SwitchingOver** (for an upgrade, a scale-down or a failover):
//! 1. the target is chosen and persisted with the old primary's UID (*intent first*);
//! 2. `Demote`: the old primary is labelled `demoted`, so `-rw` selects nobody from here
//!    on and `-ro` does not route to the old primary either, and its agent stops its
//!    server (a failover also deletes the failed primary, UID-preconditioned, so it can
//!    only come back as a standby); persisted only after the label is in;
//! 3. `Fence`: the machine waits until the Lease's holder is certainly fenced (looking
//!    again at the expiry; Degraded with a Warning Event past `L + S` + 30 s, and at once
//!    when the Lease names nobody that nobody released, or is missing: it is created
//!    naming nobody), then hands the Lease to the target in the transition to `Promote`
//!    (a target that is no longer a Ready replica is replaced first). A planned
//!    switchover (upgrade, scale-down) never hands the Lease over **by expiry** while it
//!    still names the old primary and carries no released position
//!    (`lockstep.dev/released-lsn`): the old primary hung, was cut off or crashed in its
//!    clean stop, and nobody knows what it acknowledged. It waits, Degraded
//!    (`WaitingForRelease`), for the release, or for a person to set
//!    `lockstep.dev/fenced: <pod>/<uid>` of the old primary (the target is then promoted
//!    without that position: what only the old primary had is lost). Waiting rather than
//!    reading the members' positions instead: the positions say which standby is most
//!    advanced, not whether it has everything the old primary acknowledged, which is the
//!    promise of a planned switchover; the old primary's agent keeps renewing while its
//!    clean stop runs, so an expiry there means it is no longer running as it should;
//! 4. `Promote`: the target, holding the Lease, is labelled `primary` (the old primary
//!    is `demoted`, so `-rw` selects at most one pod). Its agent then promotes its own
//!    server, right after a renewal of the Lease of its own, and reports it on its pod
//!    (`lockstep.dev/Server`: a writable server holding the Lease's term); the operator
//!    waits for that report and promotes nothing itself, so nothing it started can
//!    promote a target late. An attempt that ends unreported is followed by another,
//!    and a target that is no longer Ready is replaced by another Ready one
//!    (back to `Fence`: the Lease names the previous target, which is relabelled
//!    `demoted` and stops, or, cut off, stops by itself before its Lease expires). If the
//!    Lease no longer names the target, back to `Fence` (`LeaseLost`);
//! 5. once the Job succeeded, one transition carries both label moves, the old primary
//!    to `demoted` (`replica` if it was already recreated) first and then the target to
//!    `primary`. The old primary is labelled `replica` only once it has restarted: a new
//!    pod (new UID) is labelled `replica`.
//!
//! **Failover.** When the primary is not Ready, or holds the Lease but has not renewed
//! it for longer than `L + S` (`PrimaryNotRenewing`: hung, frozen or cut off; a frozen
//! pod's exec probes hang, so the kubelet may never mark it NotReady), the machine moves
//! to `PrimaryLost` and `PrimaryAvailable` turns False naming which; if the primary is
//! still lost `spec.failoverDelaySeconds` later, a failover begins
//! (with a provisional target): `Demote` labels and deletes the failed primary; `Fence`
//! waits until it is certainly fenced (so no WAL moves any more); `Survey` asks every
//! other live pod for its WAL positions through the Lease (a token in the annotation
//! `lockstep.dev/survey`), which each standby's instance manager answers on its own pod
//! ([`crate::pod::answers`]), and records the most advanced Ready standby that answered (the
//! newest timeline, then the highest receive LSN, then replay LSN, then the lowest
//! ordinal) as the target, with the positions (`MostAdvancedChosen`, intent first; a
//! standby that did not answer is never chosen, and is waited for up to 3 surveys); then `Fence` hands it the Lease and `Promote` promotes it as above. The
//! history, the `PrimaryAvailable` condition and `status.lastFailover` say why.
//!
//! **Creating and a lost status.** A brand-new cluster (no Lease, and no volume claim,
//! StatefulSet or pod) creates the Lease first, naming nobody and marked
//! `lockstep.dev/never-held`, and hands it to pod 0 as soon as pod 0 exists, before pod 0
//! is labelled `primary`; a cluster of which anything exists but the Lease creates it
//! naming nobody, carrying the longest `L` any former holder may use, and names the
//! primary only once it expired (`decide/creating.rs`). A cluster whose status was
//! lost is adopted as it runs: the pod the Lease names (if that pod, with that UID,
//! exists) is the primary; otherwise the ordinal the Lease or its last releaser named
//! (its pod was recreated), else the one pod labelled `primary`, else the one pod not
//! labelled `replica`, gets the Lease once its holder is certainly fenced (a missing
//! Lease is created naming nobody, so that any former holder's window runs out first).
//! Nothing else is relabelled primary, deleted or restarted; with all instances Ready
//! the cluster is Ready again (`Adopted`, or `ClusterCreated` when pod 0 is primary and
//! the Lease never moved: indistinguishable from a bootstrap). When it is ambiguous
//! (several pods labelled `primary`, or none and several unlabelled), the machine holds
//! Degraded until `lockstep.dev/adopt-primary: <pod-name>` names the primary. A pod
//! labelled `replica` or `demoted` that is to get the Lease is labelled `primary` first
//! (its agent would give back a Lease handed to it under another role). A primary that
//! stays lost with no Ready replica to promote (`NoPromotionTarget`: say the only data is
//! on a member that cannot start as a standby, having no primary to follow), or whose
//! failover's surveys found none and cannot go back to the old primary, is adopted anew
//! around the pod a person names the same way (`AdoptionRequested`). In a
//! state naming the primary, a missing Lease (deleted) is created naming nobody and
//! handed to the primary's pod once it expired: the pod now at that ordinal may not be
//! the one that held it.
//!
//! **Design.** The Lease plays the part of Patroni's leader key: a record with a time to
//! live in a store every member reads (here the API server), which only its holder
//! renews; Patroni demotes a primary as soon as an update of its key fails, and its
//! replicas take over only once the key has expired. Lockstep keeps the expiry rule but
//! lets the operator, not the replicas, decide, and counts the clock-skew bound `S`
//! explicitly, because the holder's renewal time is its own clock. From CloudNativePG
//! come the in-pod supervisor (its instance manager runs as the container's first
//! process and owns the postmaster's lifecycle and probes) and the idea behind its
//! primary isolation check: a primary that can no longer reach the API server must not
//! go on accepting writes, so the pod fences itself rather than waiting for the
//! operator. The liveness probe fails only for a server that does not answer at all.
//!
//! # Guarantees
//! - **At most one writable server**, under a partition, a slow kubelet, a deposed
//!   operator and a lost status, given the assumptions below: a server is writable only
//!   while its pod holds the Lease and is labelled `primary` and renews within `T`; the
//!   Lease changes holder only by the operator's fenced hand-over, made only once the old
//!   holder is certainly fenced; a server is promoted only by its own agent, right after
//!   it renewed the Lease (the operator only waits for its report), so a promotion that comes late
//!   cannot make a second writable server.
//! - **At most one pod carries the primary label.** A pod is labelled `primary` only if
//!   the persisted state names it, or mid-switchover if it holds the Lease (after the old
//!   primary was labelled `demoted`); the last transition labels the old primary
//!   `demoted` before the new one `primary` (and waits while the old primary's pod is not
//!   observed at all; a target already labelled `primary` keeps its label meanwhile, so
//!   that its agent does not stop the server it promotes).
//! - **No pod labelled `replica` is writable** (`-ro` never routes to a primary): a pod
//!   that is or may be a primary (labelled `primary` or `demoted`) is labelled `demoted`
//!   until it is recreated.
//! - **A replica that is not Ready is never chosen**: the Lease is handed, and the
//!   target labelled `primary`, only for a target observed Ready with the UID the intent
//!   recorded.
//! - **A switchover on demand** (`lockstep.dev/switchover: <pod>[:<anything>]`) is a
//!   planned switchover like an upgrade's, with the same guarantees; it runs once per
//!   value (recorded in the record's acks as it begins), and a value it cannot serve
//!   (no such instance, or not a Ready replica) is a Degraded stay (`SwitchoverRefused`),
//!   not taken on.
//! - **A planned switchover whose old primary released no position** (its stop was not
//!   clean, or a person asserted it down) surveys the standbys and promotes the most
//!   advanced, as a failover does: the target chosen before may lack commits another
//!   standby received.
//! - **With `spec.synchronous` Required, a failover after the primary dies loses no
//!   acknowledged commit**: every such commit is on `number` of the other members, the
//!   survey must read `replicas - number` of them (else it waits, Degraded, and surveys
//!   again), and the most advanced member read is promoted
//!   ([`crate::pod::synchronous`]; a pause or a partition of the primary is not yet covered).
//! - **A planned switchover loses no acknowledged commit**: the old primary stops
//!   cleanly before the Lease moves (its walsenders send all WAL to connected standbys
//!   before it exits) and releases the Lease with its last position
//!   (`lockstep.dev/released-lsn`); the target's agent promotes only once it has
//!   received up to it. A target that missed it (not streaming then, and nobody has it
//!   now) holds the switchover Degraded (`PromotionExhausted` after its retries) until a
//!   person removes the annotation, accepting the loss. The Lease is never handed over
//!   by expiry alone while it names the old primary without a released position
//!   (`WaitingForRelease`, Degraded, until the release or `lockstep.dev/fenced`).
//!   A failover makes no such promise: its hand-over removes the released position in
//!   the same fenced patch, so an old primary that came back after a crash and stopped
//!   before any standby reconnected cannot hold the new primary back.
//! - **A hung primary is failed over**: a primary that holds the Lease but has not
//!   renewed it for longer than `L + S` is lost whatever its readiness says
//!   (`PrimaryAvailable=False`, reason `PrimaryNotRenewing`), and failed over after
//!   `failoverDelaySeconds` like one that is not Ready.
//! - **No wait for fencing is without end**: every Lease has a renewal time (a created
//!   one naming nobody carries its creation time; one without is stamped), so it
//!   expires; a Lease that is missing or names nobody unreleased is reported Degraded at
//!   once, naming `lockstep.dev/fenced`.
//! - **A failover promotes the most advanced available replica**: among the Ready
//!   standbys a survey read after the old primary was certainly fenced, the one that
//!   received the most WAL of the newest timeline (WAL past a newer timeline's fork,
//!   which a standby that has not rewound may hold, never wins).
//! - **A lost status never labels a second primary**, never runs `initdb` over existing
//!   data (the agent keeps a data directory) and never promotes a replica while a
//!   primary holds the Lease.
//! - **Replicas are upgraded before the primary**, and the serving primary is never
//!   deleted for an upgrade while another instance could take over: it first hands the
//!   role over by switchover.
//! - **No pod is deleted twice.** The UID is persisted before the delete, which carries it
//!   as a precondition; a pod already at the target image is never chosen.
//! - **Intent before action.** A switchover's target and the old primary's UID are
//!   persisted before the first label moves; Job names derive from (target, UID,
//!   attempt), so a restarted operator finds the same Job instead of running another.
//! - **An in-place restore** (`spec.restore`, `decide/restoring_in_place.rs`) runs
//!   once per token (recorded in the acks as it begins; a
//!   token present when the cluster is created or adopted is taken as served, never
//!   run). It replaces the data only once nothing writes: the StatefulSet holds no pod
//!   and the Lease holder is certainly fenced (as for a hand-over); then every volume
//!   claim and the Lease are deleted (UID-preconditioned), so no member can start on the
//!   pre-restore history. Pod 0 alone restores, replays to the target listening on no
//!   address and promotes there (a new timeline) before it serves; the replicas clone
//!   it. A time target is not taken on before its WAL can be archived
//!   (`archive_timeout` + 30 s after it), nor while the primary reports archiving
//!   failing (`RestoreRefused`, Degraded, nothing stopped).
//! - **Backups.** S3 and database credentials reach Jobs only as secret references; the
//!   finalizer is held until a final backup Job succeeded or the user skipped it.
//! - **Quiet at rest.** Owned objects are re-applied only when the rendered object is not
//!   contained in the live one, labels only when they differ, the Lease only when it does
//!   not name the primary's pod; its renewals trigger nothing. At rest the machine looks
//!   again when the primary's Lease would expire unrenewed (`renewTime + L + S` + 1 s,
//!   reading caches only and writing nothing while it is renewed), and at the latest
//!   every `RESYNC` (five minutes), so a missed watch event cannot postpone noticing a
//!   failed primary for longer.
//!
//! # Assumptions
//! - **Clocks.** Any node's clock and the operator's differ by at most `S` =
//!   `spec.fencing.clockSkewSeconds` (default 2 s); keep them synchronized (NTP) well
//!   within it. With `T` = ⌊L/2⌋ and `R` = 2, `T + R + 1 ≤ L` for every allowed `L`
//!   (5..120, default 15), so a holder has stopped by `renewTime + T + R + 1` on its own
//!   clock, at the latest `renewTime + L + S` on the operator's.
//! - **The pods do their part** (`scripts/README.md`): the holder renews with its own
//!   clock taken before the request, measures `T` on a monotonic clock, stops its server
//!   at once (bounded, then SIGKILL) when it must, releases the Lease only after its
//!   server is down, and starts or promotes a writable server only right after a
//!   renewal of its own, while it holds the Lease and is labelled `primary`. Nobody
//!   else calls `pg_promote()` (one who does makes a server the agent fences within
//!   `R + 1` s). A pod keeps the `spec.fencing` it was created with (its environment);
//!   the holder writes its `L` into the Lease at each renewal, and the operator waits
//!   for the longest `L` of the Lease, the spec and every observed pod.
//! - **A vanished pod is not assumed down**: its Lease must expire (`renewTime + L +
//!   S`) unless it released it. A person who knows its node is dead (powered off,
//!   deleted from the provider) may say so with `lockstep.dev/fenced: <pod>/<uid>`;
//!   saying so wrongly can make two writable servers.
//! - **A Lease recreated in place of one that vanished** names nobody and carries the
//!   longest `L` the status ever saw the spec or a pod carry
//!   (`status.longestLeaseSeconds`, never decreasing), or the CRD's maximum (120) when
//!   the status was lost: every pod is created from a template whose `L` a status write
//!   saw (one created and lost while every status write failed is not covered).
//! - **A pause of the whole pod** (a VM pause, a hung disk, a frozen cgroup) stops its
//!   agent, its fence and its server together; the operator counts the Lease's expiry
//!   from the last renewal, so it hands the Lease over only after the paused holder's
//!   own deadline has passed. When the pod thaws, its fence (counting on a monotonic
//!   clock) must stop the server before the server accepts a write: in asynchronous
//!   replication this is an assumption, until the zero-loss issue removes it (a
//!   synchronous standby would refuse to acknowledge a thawed primary's commits).
//! - The StatefulSet controller recreates deleted pods (`OnDelete`, `Parallel`) as
//!   `<name>-<ordinal>`, from the current template, with the same volume claim.
//! - A pod reads its role label when it starts (its agent waits for the label), and
//!   its readiness probe (`pg_isready`) is what "Ready" means here.
//! - Only Lockstep writes `lockstep.dev/role`, and only Lockstep and the holder's agent
//!   write the Lease. Volume claims are not deleted by hand (a primary that lost its data
//!   would bootstrap an empty cluster).
//! - Failover measures `failoverDelaySeconds` from when the operator first saw the
//!   primary not Ready (`PrimaryLost` entered), so a stopped operator delays it.
//! - A change of `spec.replicas` during an upgrade or a switchover waits until it is done.
//! - **An in-place restore discards on purpose** everything committed after its target,
//!   and its data exists only in the archive between the volumes' deletion and the
//!   restored primary's first backup: a restore that cannot reach its target (a name
//!   never created, an LSN or time the archive does not hold) leaves the cluster
//!   serving nothing, `RestoreFailed`, until a new token names a reachable target (none:
//!   the end of the archive).
//!
//! # Errors
//! `decide` has no error path. A failing promote or backup Job is a Degraded stay naming
//! the Job and its reason; a blocked step (no Ready replica to promote, a scale-down
//! below the primary with nobody to hand over to, a Lease holder that may still be
//! writable past `L + S` + 30 s, a Lease missing or naming nobody unreleased, a planned
//! switchover's old primary fenced by expiry without its released position, an
//! ambiguous adoption) is a Degraded stay saying what
//! would unblock it (the escape hatches `lockstep.dev/fenced: <pod>/<uid>` and
//! `lockstep.dev/adopt-primary: <pod>`). A hand-over refused because the Lease changed
//! since it was read is a conflict: re-read and re-decided. States have deadlines ([`Machine::deadline`]) after which a silent stall
//! is reported.

use super::actions::PgAction;
use super::api::PostgresClusterSpec;
use super::decide::fencing::keep_lease;
use super::decide::ready::Served;
use super::decide::{
    D,
    backing_up::backing_up,
    creating::creating,
    hibernating::{self, hibernating},
    primary_lost::primary_lost,
    ready::ready,
    restoring_in_place::{RESTORE_ACK, restoring_in_place},
    scaling::scaling,
    switching_over::switching_over,
    upgrading::upgrading,
};
use super::observe::{Observed, SWITCHOVER};
use super::state::{HibernateStep, PgKind, PgState, RestoreStep, SwitchStep, Switchover};
use super::table::{
    TABLE,
    reason::{FINALIZED, HIBERNATE_WAY_OUT, RESTORE_WAY_OUT},
};
use crate::engine::{Deadline, Decision, Edge, Machine, Wait, World};

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
    d.with_actions(moves).requeue_if_any(wait)
}
use crate::machines::common::{finalize, on_demand};

/// The way out of a wait for pods (Creating, Scaling, Upgrading), named when its
/// deadline passes.
pub const PODS_WAY_OUT: &str = "fix what keeps the pod named above from becoming Ready (its image, its node, its volume claim); the machine goes on by itself once it is";
/// The way out of a switchover or failover step that does not finish, named when its
/// deadline passes.
pub const SWITCH_WAY_OUT: &str = "see why the pod named above does not do its part (kubectl describe pod; kubectl logs: its instance manager's); the step goes on by itself once it does";
/// The way out of a failover's survey that reads too few members, named when its
/// deadline passes.
pub const SURVEY_WAY_OUT: &str = "see why the standbys named above do not answer (kubectl describe pod: the lockstep.dev/Surveyed condition; kubectl logs: the instance manager's); with spec.synchronous Required, spec.synchronous.dataDurability: Preferred promotes the most advanced member that answered";
/// The way out of a lost primary with nobody to fail over to, named when its deadline
/// passes.
pub const PRIMARY_LOST_WAY_OUT: &str = "bring the primary or a replica back to Ready (kubectl describe pod); a Ready replica is promoted by itself";

/// The PostgresCluster machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Postgres;

impl Machine for Postgres {
    const NAME: &'static str = "postgrescluster";
    const DELETION_WAY_OUT: Option<&'static str> = Some(finalize::WAY_OUT);

    type Spec = PostgresClusterSpec;
    type State = PgState;
    type Kind = PgKind;
    type Observed = Observed;
    type Action = PgAction;

    fn initial() -> PgState {
        PgState::Creating {
            credentials_created: false,
            served_restore: None,
        }
    }

    fn table() -> &'static [Edge<PgKind>] {
        TABLE
    }

    fn decide(spec: &PostgresClusterSpec, state: &PgState, world: &World<Observed>) -> D {
        if world.deleting {
            let (o, configured) = (&world.observed, spec.backup.is_some());
            let skip = o.requests.skip_final_backup;
            if let PgState::Hibernating(h) = state
                && configured
                && !skip
            {
                return hibernating::deleting(spec, h, world);
            }
            return finalize::deleting(state, configured, skip, &o.jobs, world.now);
        }
        let o = &world.observed;
        let d = match state {
            PgState::Creating {
                credentials_created,
                served_restore,
            } => creating(spec, *credentials_created, served_restore.as_deref(), world),
            PgState::Ready { cluster } => {
                let lost = on_demand::lost(world, o.requests.backup_now.as_deref());
                ready(
                    spec,
                    cluster,
                    Served {
                        backup: on_demand::Served::of(world),
                        switchover: world.acked(SWITCHOVER),
                        restore: world.acked(RESTORE_ACK),
                    },
                    lost,
                    o,
                    world.now,
                )
            }
            PgState::Scaling {
                cluster,
                from_replicas,
            } => scaling(spec, cluster, *from_replicas, o, world.now),
            PgState::Upgrading { cluster, pod } => {
                upgrading(spec, cluster, pod.as_ref(), o, world.now)
            }
            PgState::SwitchingOver(s) => switching_over(spec, s, world),
            PgState::PrimaryLost { cluster } => primary_lost(spec, cluster, world),
            PgState::BackingUp {
                cluster,
                request,
                job,
            } => {
                let key = on_demand::serving(request, job.as_deref());
                backing_up(spec, cluster, (request, &key), world)
            }
            PgState::RestoringInPlace(r) => restoring_in_place(spec, r, world),
            PgState::Hibernating(h) => hibernating(spec, h, world),
            PgState::Finalizing { .. } | PgState::Finalized => {
                Decision::stay(FINALIZED, "waiting for the object to be deleted")
            }
        };
        keep_lease_at_rest(spec, state, world, d)
    }

    fn is_ready(state: &PgState) -> bool {
        matches!(state, PgState::Ready { .. } | PgState::BackingUp { .. })
    }

    fn rests(state: &PgState) -> bool {
        Self::is_ready(state)
            || matches!(
                state,
                PgState::Hibernating(h) if h.hibernate_step == HibernateStep::Asleep
            )
    }

    fn deadline(state: &PgState) -> Deadline {
        match state {
            PgState::Creating { .. } | PgState::Scaling { .. } | PgState::Upgrading { .. } => {
                Deadline::minutes(15, PODS_WAY_OUT)
            }
            PgState::SwitchingOver(s) => match s.step {
                // A survey waits SURVEY_WAIT_SECONDS for answers, up to 3 surveys.
                SwitchStep::Survey => Deadline::minutes(3, SURVEY_WAY_OUT),
                SwitchStep::Demote | SwitchStep::Fence | SwitchStep::Promote => {
                    Deadline::minutes(10, SWITCH_WAY_OUT)
                }
            },
            PgState::PrimaryLost { .. } => Deadline::minutes(15, PRIMARY_LOST_WAY_OUT),
            PgState::BackingUp { .. } => Deadline::minutes(6 * 60, on_demand::WAY_OUT),
            // A restore replays as much WAL as the target needs: the manager's own bound
            // (LOCKSTEP_RECOVERY_TIMEOUT_SECONDS) is 6 hours.
            PgState::RestoringInPlace(r) => match r.restore_step {
                RestoreStep::RestorePrimary => Deadline::minutes(6 * 60, RESTORE_WAY_OUT),
                RestoreStep::StopWrites
                | RestoreStep::ReplaceVolumes
                | RestoreStep::CloneReplicas => Deadline::minutes(15, RESTORE_WAY_OUT),
            },
            PgState::Hibernating(h) => match h.hibernate_step {
                // At rest ([`Machine::rests`]): it waits for nothing but the person.
                HibernateStep::Asleep => Deadline::None,
                HibernateStep::Stopping | HibernateStep::Waking => {
                    Deadline::minutes(15, HIBERNATE_WAY_OUT)
                }
            },
            PgState::Finalizing { .. } => Deadline::minutes(60, finalize::WAY_OUT),
            PgState::Ready { .. } | PgState::Finalized => Deadline::None,
        }
    }

    fn finalized(state: &PgState) -> bool {
        finalize::States::is_finalized(state)
    }

    fn acks(state: &PgState) -> Vec<(&'static str, String)> {
        match state {
            PgState::BackingUp { request, job, .. } => on_demand::acks(request, job.as_deref()),
            PgState::SwitchingOver(Switchover {
                request: Some(token),
                ..
            }) => vec![(SWITCHOVER, token.clone())],
            PgState::RestoringInPlace(r) => vec![(RESTORE_ACK, r.restore.token.clone())],
            PgState::Creating {
                served_restore: Some(token),
                ..
            } => vec![(RESTORE_ACK, token.clone())],
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
            PgState::RestoringInPlace(r) => Some(r.restore_step.to_string()),
            PgState::Hibernating(h) => Some(h.hibernate_step.to_string()),
            _ => None,
        }
    }
}
