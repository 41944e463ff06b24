//! The PostgresCluster machine's declared transition table and its reasons.
//!
//! Each row names the file whose code takes the edge; `machines/postgrescluster.md` links
//! to it, and a test keeps the two in step (the file names the reason; no other decide
//! file does).

use super::state::PgKind;
use crate::engine::Edge;
use crate::machines::common::finalize::finalize_edges;
use crate::machines::common::on_demand::on_demand_edges;

/// Reasons: every edge's, and the stays' (stay reasons show in Degraded conditions and
/// logs).
pub mod reason {
    pub use crate::machines::common::finalize::{
        DELETION_REQUESTED, FINAL_BACKUP_FAILED, FINAL_BACKUP_RETRIED, FINAL_BACKUP_RUNNING,
        FINAL_BACKUP_SKIPPED, FINAL_BACKUP_SUCCEEDED, FINALIZED, NO_BACKUP_POLICY,
    };
    pub use crate::machines::common::on_demand::{
        BACKUP_FAILED, BACKUP_LOST, BACKUP_NOT_CONFIGURED, BACKUP_OUTCOME_UNKNOWN,
        BACKUP_REQUESTED, BACKUP_RUNNING, BACKUP_SUCCEEDED,
    };

    /// Edge: the generated Secrets were created: `<name>-tls` and `<name>-app` always,
    /// `<name>-credentials` without `spec.credentialsSecret`.
    pub const CREDENTIALS_GENERATED: &str = "CredentialsGenerated";
    /// Edge: every instance is Ready with its role, at the spec's image.
    pub const CLUSTER_CREATED: &str = "ClusterCreated";
    /// Edge: creation finished with instances at more than one image; they are upgraded.
    pub const MIXED_IMAGES: &str = "MixedImages";
    /// Edge: the spec's image (version or image) changed.
    pub const IMAGE_CHANGED: &str = "ImageChanged";
    /// Edge: the pod to replace next is chosen; its UID is recorded before the delete.
    pub const POD_CHOSEN: &str = "PodChosen";
    /// Edge: the replaced pod is Ready at the target image.
    pub const POD_UPGRADED: &str = "PodUpgraded";
    /// Edge: the chosen pod was replaced by someone else; the next one is chosen again.
    pub const REPLANNED: &str = "Replanned";
    /// Edge: every replica runs the target; the primary role moves to one of them.
    pub const SWITCHOVER_STARTED: &str = "SwitchoverStarted";
    /// Edge: every instance is Ready at the target image.
    pub const UPGRADE_COMPLETED: &str = "UpgradeCompleted";
    /// Edge: `spec.replicas` changed.
    pub const REPLICAS_CHANGED: &str = "ReplicasChanged";
    /// Edge: `spec.replicas` would remove the primary's ordinal; the role moves first.
    pub const PRIMARY_OUTSIDE_SCALE: &str = "PrimaryOutsideScale";
    /// Edge: exactly `spec.replicas` instances exist and all are Ready.
    pub const SCALING_COMPLETE: &str = "ScalingComplete";
    /// Edge: the old primary is labelled demoted (and, in a failover, fenced).
    pub const OLD_PRIMARY_DEMOTED: &str = "OldPrimaryDemoted";
    /// Edge: the target reported no promotion within an attempt's bound; the next
    /// attempt waits again.
    pub const PROMOTION_RETRIED: &str = "PromotionRetried";
    /// Edge: the target is no longer a Ready replica; another one is promoted instead.
    pub const TARGET_CHANGED: &str = "TargetChanged";
    /// A planned switchover's target reported no promotion within the bound while the
    /// Lease holds the old primary's released position: the target may lack that WAL;
    /// the members are surveyed.
    pub const TARGET_SHORT_OF_RELEASED: &str = "TargetShortOfReleased";
    /// Edge: the target is promoted and labelled primary (switchover for an upgrade or a
    /// scale-down).
    pub const SWITCHOVER_COMPLETED: &str = "SwitchoverCompleted";
    /// Edge: the target is promoted and labelled primary after a failover.
    pub const FAILOVER_COMPLETED: &str = "FailoverCompleted";
    /// Edge: the Lease holder is certainly fenced; the Lease is handed to the target.
    pub const LEASE_HANDED_OVER: &str = "LeaseHandedOver";
    /// Edge: failover: the old primary is certainly fenced; the standbys are surveyed.
    pub const OLD_PRIMARY_FENCED: &str = "OldPrimaryFenced";
    /// Edge: failover: the survey read the standbys' WAL positions; the most advanced
    /// Ready one is the target (recorded with the positions).
    pub const MOST_ADVANCED_CHOSEN: &str = "MostAdvancedChosen";
    /// Edge: failover: the survey read too few members, or no Ready standby; another
    /// survey asks again.
    pub const SURVEY_RETRIED: &str = "SurveyRetried";
    /// Edge: mid-promotion, the Lease no longer names the target; it is fenced again.
    pub const LEASE_LOST: &str = "LeaseLost";
    /// Edge: a cluster whose status was lost is adopted: the Lease holder (or the one pod
    /// labelled primary) is the primary; nothing is relabelled primary, deleted or
    /// restarted.
    pub const ADOPTED: &str = "Adopted";
    /// Edge: the primary is not Ready, or released the primary Lease (its server is
    /// down: crashed, or stopped on a signal).
    pub const PRIMARY_NOT_READY: &str = "PrimaryNotReady";
    /// Edge: the primary's pod may look Ready, but it has not renewed the primary Lease
    /// for longer than `L + S` (hung, frozen, or cut off from the API server): it is
    /// lost whatever the kubelet says.
    pub const PRIMARY_NOT_RENEWING: &str = "PrimaryNotRenewing";
    /// Edge: the lost primary is Ready again before the failover began.
    pub const PRIMARY_RECOVERED: &str = "PrimaryRecovered";
    /// Edge: the primary stayed not Ready longer than `failoverDelaySeconds`.
    pub const FAILOVER_STARTED: &str = "FailoverStarted";

    /// Stay: at rest.
    pub const SERVING: &str = "Serving";
    /// Stay: restoring owned objects or labels to what the state wants.
    pub const RESTORING: &str = "Restoring";
    /// Stay (Degraded): at rest, but some replicas are not Ready.
    pub const REPLICAS_NOT_READY: &str = "ReplicasNotReady";
    /// Stay (Degraded): at rest, but an instance reports a setting of `spec.postgresql`
    /// that its server refused (it runs on the last value it accepted).
    pub const SETTINGS_REFUSED: &str = "SettingsRefused";
    /// Stay (Degraded): at rest, but the primary could not apply an entry of
    /// `spec.roles` or `spec.databases` (it applied the others;
    /// [`crate::pod::managed`]).
    pub const OBJECTS_REFUSED: &str = "ObjectsRefused";
    /// Stay (Degraded): at rest, but the primary reports that its WAL does not reach
    /// the archive (`spec.backup.walArchive`; [`crate::pod::archiving`]).
    pub const ARCHIVE_FAILING: &str = "ArchiveFailing";
    /// Stay (Degraded): at rest, but the primary's Lease renewals are dated beyond
    /// `spec.fencing.clockSkewSeconds` from when the operator sees them (its node's
    /// clock is off).
    pub const HOLDER_CLOCK_SKEWED: &str = "HolderClockSkewed";
    /// Edge: an instance reports a parameter its server applies only at its next start:
    /// a rolling restart (an upgrade to the same image).
    pub const SETTINGS_NEED_RESTART: &str = "SettingsNeedRestart";
    /// Stay: waiting for pods (to exist, to be Ready, to be labelled).
    pub const WAITING_FOR_PODS: &str = "WaitingForPods";
    /// Stay (Degraded): the first primary's bootstrap from backups
    /// (`spec.bootstrap.recovery`) failed ([`crate::pod::recovery`]); its
    /// pod tries again, and never serves a half-restored server.
    pub const RECOVERY_FAILED: &str = "RecoveryFailed";
    /// Stay: the chosen pod is being deleted and recreated.
    pub const REPLACING_POD: &str = "ReplacingPod";
    /// Stay: the target holds the Lease; its manager promotes it, and the switchover
    /// waits for its report.
    pub const PROMOTING: &str = "Promoting";
    /// Stay (Degraded): an earlier attempt ended without the target's report; the next
    /// attempt waits again, naming what the target last reported.
    pub const PROMOTION_OVERDUE: &str = "PromotionOverdue";
    /// Stay reason (Degraded): the target reported no promotion in more attempts than
    /// the retry limit; a new `lockstep.dev/retry-promote` token waits again, and a
    /// report that comes meanwhile still elects it.
    pub const PROMOTION_EXHAUSTED: &str = "PromotionExhausted";
    /// Stay (Degraded): no Ready replica to promote.
    pub const NO_PROMOTION_TARGET: &str = "NoPromotionTarget";
    /// Stay: the target, further than any other candidate its survey read, is not Ready
    /// (restarting, or recreated on its volume); waited for a while before a member
    /// behind it is promoted.
    pub const TARGET_RETURNING: &str = "TargetReturning";
    /// Edge: the primary stayed lost with no Ready replica to promote, and
    /// `lockstep.dev/adopt-primary` names another live pod: the cluster is adopted anew
    /// around it (Creating), as a cluster whose status was lost is.
    pub const ADOPTION_REQUESTED: &str = "AdoptionRequested";
    /// Edge: a failover or switchover found no standby to promote while the old primary's
    /// pod is live on its volume and the Lease never left its ordinal: it is the primary
    /// again.
    pub const BACK_TO_OLD_PRIMARY: &str = "BackToOldPrimary";
    /// Stay (Degraded): the primary is not Ready; waiting `failoverDelaySeconds`.
    pub const AWAITING_FAILOVER: &str = "AwaitingFailover";
    /// Stay (Degraded after `L + S` + 30 s): the Lease holder may still be writable.
    pub const WAITING_FOR_FENCE: &str = "WaitingForFence";
    /// Stay (Degraded): a planned switchover's old primary is fenced by expiry, but it
    /// never released the Lease with its last WAL position; waiting for the release or
    /// for `lockstep.dev/fenced`.
    pub const WAITING_FOR_RELEASE: &str = "WaitingForRelease";
    /// Stay: the survey asks the standbys for their WAL positions, or waits for their
    /// answers.
    pub const SURVEYING: &str = "Surveying";
    /// Stay: the primary Lease is created or handed to the primary before it is labelled.
    pub const WAITING_FOR_LEASE: &str = "WaitingForLease";
    /// Stay (Degraded): a lost status cannot be re-adopted unambiguously; waiting for
    /// `lockstep.dev/adopt-primary`.
    pub const ADOPTION_AMBIGUOUS: &str = "AdoptionAmbiguous";
    /// Stay: the old primary's pod must be seen before the primary label moves.
    pub const WAITING_FOR_OLD_PRIMARY: &str = "WaitingForOldPrimary";
    /// Edge: `lockstep.dev/switchover` has a token not yet served, naming an instance.
    pub const SWITCHOVER_REQUESTED: &str = "SwitchoverRequested";
    /// Edge: the requested switchover named the pod that is already primary.
    pub const ALREADY_PRIMARY: &str = "AlreadyPrimary";
    /// Stay (Degraded): the requested switchover cannot run (it names no instance, or
    /// one that is not a Ready replica); it waits until it can, or the annotation goes.
    pub const SWITCHOVER_REFUSED: &str = "SwitchoverRefused";
    /// Edge: `spec.restore.token` was set when the cluster was created (or its status
    /// was lost): taken as served without a restore.
    pub const RESTORE_TOKEN_SERVED: &str = "RestoreTokenServed";
    /// Edge: `spec.restore` has a token not yet served: the in-place restore begins.
    pub const RESTORE_REQUESTED: &str = "RestoreRequested";
    /// Stay (Degraded): the requested restore cannot start yet (its target's WAL may
    /// not be archived, or the primary reports archiving failing); nothing stopped.
    pub const RESTORE_REFUSED: &str = "RestoreRefused";
    /// Edge: no pod is left and the Lease holder is certainly fenced.
    pub const WRITES_STOPPED: &str = "WritesStopped";
    /// Edge: no volume claim and no primary Lease is left.
    pub const VOLUMES_REPLACED: &str = "VolumesReplaced";
    /// Edge: the restored primary serves: its recovery reached the target and promoted.
    pub const PRIMARY_RESTORED: &str = "PrimaryRestored";
    /// Edge: every instance is Ready on the restored timeline.
    pub const RESTORE_COMPLETED: &str = "RestoreCompleted";
    /// Stay (Degraded): the restored primary's manager reports that its restore or
    /// recovery failed.
    pub const RESTORE_FAILED: &str = "RestoreFailed";
    /// Stay: the restore waits for the pods to stop and the Lease holder to be fenced.
    pub const STOPPING_WRITES: &str = "StoppingWrites";
    /// Stay: the restore deletes the volume claims and the primary Lease.
    pub const REPLACING_VOLUMES: &str = "ReplacingVolumes";
    /// Stay: pod 0 restores the repository and recovers to the target.
    pub const RESTORING_PRIMARY: &str = "RestoringPrimary";
    /// Stay: the replicas clone the restored primary.
    pub const CLONING_REPLICAS: &str = "CloningReplicas";
    /// Edge: `spec.hibernate` is true (at rest, or again while waking): the
    /// StatefulSet scales to zero.
    pub const HIBERNATION_REQUESTED: &str = "HibernationRequested";
    /// Stay: hibernation waits for the pods to stop and the Lease holder to be fenced.
    pub const STOPPING_INSTANCES: &str = "StoppingInstances";
    /// Edge: no pod is left and the Lease holder is certainly fenced: asleep.
    pub const INSTANCES_STOPPED: &str = "InstancesStopped";
    /// Stay: asleep, nothing runs, the volumes are kept.
    pub const HIBERNATED: &str = "Hibernated";
    /// Edge: `spec.hibernate` is false: the instances start again.
    pub const WAKE_REQUESTED: &str = "WakeRequested";
    /// Stay: waking, waiting for every instance to be Ready.
    pub const WAKING: &str = "Waking";
    /// Stay (Degraded): waking, the primary's volume came back without a database.
    pub const PRIMARY_VOLUME_EMPTY: &str = "PrimaryVolumeEmpty";
    /// Stay (Degraded): deleted while hibernated with a final backup to take, which needs
    /// a running primary.
    pub const FINAL_BACKUP_NEEDS_PRIMARY: &str = "FinalBackupNeedsPrimary";
    /// Edge: every instance is Ready again after hibernation, with the same primary.
    pub const CLUSTER_WOKEN: &str = "ClusterWoken";
    /// What a person does about a hibernation step stuck past its deadline.
    pub const HIBERNATE_WAY_OUT: &str = "see why the pods named above do not stop or start (kubectl describe pod; kubectl logs: the instance manager's); a Lease holder on a node that is down is certainly stopped once its Lease expires, or once lockstep.dev/fenced=<pod>/<uid> says so";
    /// What a person does about a restore stuck past its deadline.
    pub const RESTORE_WAY_OUT: &str = "set spec.restore to a new token (with another target, or none: the end of the archive) to start the restore again";
}

use reason::*;

/// The files whose code takes the edges.
mod by {
    pub const CREATING: &str = "src/machines/postgres/decide/creating.rs";
    pub const READY: &str = "src/machines/postgres/decide/ready.rs";
    pub const SCALING: &str = "src/machines/postgres/decide/scaling.rs";
    pub const UPGRADING: &str = "src/machines/postgres/decide/upgrading.rs";
    pub const SWITCHING_OVER: &str = "src/machines/postgres/decide/switching_over/mod.rs";
    pub const SURVEYING: &str = "src/machines/postgres/decide/switching_over/surveying.rs";
    pub const HAND_OVER: &str = "src/machines/postgres/decide/switching_over/hand_over.rs";
    pub const PROMOTE: &str = "src/machines/postgres/decide/switching_over/promote.rs";
    pub const PRIMARY_LOST: &str = "src/machines/postgres/decide/primary_lost.rs";
    pub const REQUESTED: &str = "src/machines/postgres/decide/requested.rs";
    pub const RESTORING_IN_PLACE: &str = "src/machines/postgres/decide/restoring_in_place.rs";
    pub const HIBERNATING: &str = "src/machines/postgres/decide/hibernating.rs";
}

/// The declared transition table.
pub static TABLE: &[Edge<PgKind>] = crate::edges![PgKind;
    Creating -> {
        Creating: CREDENTIALS_GENERATED, "<name>-tls was issued (a CA, the server's and the replication role's certificates), <name>-app with the application role's random password, and without spec.credentialsSecret <name>-credentials with random passwords", by::CREATING;
        Ready: CLUSTER_CREATED, "every instance is Ready with its role at the spec's image", by::CREATING;
        Upgrading: MIXED_IMAGES, "every instance is Ready but some run an earlier image of the spec", by::CREATING;
        Upgrading: SETTINGS_NEED_RESTART, "every instance is Ready but some wait for a start to apply a parameter (an adopted cluster)", by::CREATING;
        Ready: ADOPTED, "a lost status: the pods and the primary Lease of a running cluster are adopted as they are", by::CREATING;
        Creating: RESTORE_TOKEN_SERVED, "spec.restore.token was set when the cluster was created (or its status was lost): it is taken as served, and nothing is restored", by::CREATING;
    }
    [Ready, RestoringInPlace] -> RestoringInPlace: RESTORE_REQUESTED,
        "spec.restore has a token not yet served (its target's WAL is archived, and the primary reports no archiving failure): writes stop first, as the StatefulSet scales to zero", by::RESTORING_IN_PLACE;
    RestoringInPlace -> {
        RestoringInPlace: WRITES_STOPPED, "no pod is left and the Lease holder is certainly fenced: every volume claim and the primary Lease are deleted next", by::RESTORING_IN_PLACE;
        RestoringInPlace: VOLUMES_REPLACED, "no volume claim and no primary Lease is left: pod 0 alone is created, given the Lease and the restore, and labelled primary", by::RESTORING_IN_PLACE;
        RestoringInPlace: PRIMARY_RESTORED, "pod 0 serves as the primary: its manager restored the repository, recovered to the target and promoted there before it listened; the replicas are added", by::RESTORING_IN_PLACE;
        Ready: RESTORE_COMPLETED, "every instance is Ready on the restored primary's timeline", by::RESTORING_IN_PLACE;
    }
    [Ready, Hibernating] -> Hibernating: HIBERNATION_REQUESTED,
        "spec.hibernate is true (at rest with the primary serving, or again while waking): the StatefulSet scales to zero, every server stops cleanly, and the volume claims are kept", by::HIBERNATING;
    Hibernating -> {
        Hibernating: INSTANCES_STOPPED, "no pod is left and the Lease holder is certainly fenced: the cluster is asleep (the backup CronJob is deleted until it wakes)", by::HIBERNATING;
        Hibernating: WAKE_REQUESTED, "spec.hibernate is false: the StatefulSet holds the instances again, and the primary before hibernation is given the Lease (once its holder is fenced) and the primary label", by::HIBERNATING;
        Ready: CLUSTER_WOKEN, "every instance is Ready again, with the primary it had before hibernation", by::HIBERNATING;
        Creating: ADOPTION_REQUESTED, "waking, the primary's volume holds no database, and lockstep.dev/adopt-primary names another live pod: the cluster is adopted anew around it", by::PRIMARY_LOST;
        // Deleted while hibernating with a final backup to take, the cluster wakes
        // first (Ready, then Finalizing): no final backup runs without a primary.
        Finalized: NO_BACKUP_POLICY, "deleted without spec.backup", crate::machines::common::finalize::SOURCE;
        Finalized: FINAL_BACKUP_SKIPPED, "deleted with lockstep.dev/skip-final-backup=true", crate::machines::common::finalize::SOURCE;
    }
    Ready -> Upgrading: IMAGE_CHANGED, "spec.version or spec.image changed (or an instance runs another image)", by::READY;
    Ready -> Upgrading: SETTINGS_NEED_RESTART, "an instance reports a parameter of spec.postgresql that its server applies only at a start; the instances are restarted as an upgrade replaces them", by::READY;
    Ready -> SwitchingOver: SWITCHOVER_REQUESTED,
        "lockstep.dev/switchover has a new token naming an instance (a Ready replica, or the primary itself): the same fenced switchover as an upgrade", by::REQUESTED;
    Upgrading -> {
        Upgrading: IMAGE_CHANGED, "the spec's image changed mid-upgrade while no pod was in flight: retarget", by::UPGRADING;
        Upgrading: POD_CHOSEN, "the next pod to replace is chosen (replicas first, highest ordinal first); its UID is recorded", by::UPGRADING;
        Upgrading: POD_UPGRADED, "the replaced pod is Ready at the target image", by::UPGRADING;
        Upgrading: REPLANNED, "the chosen pod was replaced by someone else", by::UPGRADING;
        SwitchingOver: SWITCHOVER_STARTED, "every replica is Ready at the target; the primary role moves to one of them", by::UPGRADING;
        Ready: UPGRADE_COMPLETED, "every instance is Ready at the target image", by::UPGRADING;
    }
    Ready -> Scaling: REPLICAS_CHANGED, "spec.replicas differs from the instances at rest", by::SCALING;
    Scaling -> {
        Scaling: REPLICAS_CHANGED, "spec.replicas changed again while scaling", by::SCALING;
        Ready: SCALING_COMPLETE, "exactly spec.replicas instances exist and all are Ready", by::SCALING;
    }
    [Ready, Scaling] -> SwitchingOver: PRIMARY_OUTSIDE_SCALE,
        "spec.replicas would remove the primary's ordinal: the role moves to a lower one first", by::SCALING;
    SwitchingOver -> {
        SwitchingOver: OLD_PRIMARY_DEMOTED, "the old primary is labelled demoted (a failed one is also deleted): neither -rw nor -ro selects it", by::SWITCHING_OVER;
        SwitchingOver: PROMOTION_RETRIED, "the target reported no promotion within an attempt's bound (within the retry limit, or lockstep.dev/retry-promote has a new token): the next attempt waits again", by::PROMOTE;
        SwitchingOver: TARGET_CHANGED, "the target is no longer a Ready replica; another Ready one is promoted", by::SURVEYING;
        SwitchingOver: TARGET_SHORT_OF_RELEASED, "a planned switchover's target reported no promotion within the bound while the Lease holds the old primary's released position (the target may lack that WAL: it was not streaming when the old primary stopped): the members are surveyed, and the most advanced is promoted", by::PROMOTE;
        SwitchingOver: LEASE_HANDED_OVER, "the Lease holder is certainly fenced (released, pod gone, or renewTime + L + S passed): the Lease names the target", by::HAND_OVER;
        SwitchingOver: OLD_PRIMARY_FENCED, "a failover's old primary is certainly fenced (or a planned switchover's, without its released position): the standbys are asked for their WAL positions through the Lease, and their instance managers answer on their pods", by::HAND_OVER;
        SwitchingOver: MOST_ADVANCED_CHOSEN, "failover (or a switchover surveyed): every live member answered, or SURVEY_WAIT_SECONDS passed; the most advanced Ready standby that answered (the newest timeline, then receive LSN, then replay LSN, then the lowest ordinal) is the target, recorded with the positions", by::SURVEYING;
        SwitchingOver: SURVEY_RETRIED, "failover: the survey read too few members (the synchronous quorum, or not every live member, up to SURVEYS_FOR_EVERY_MEMBER surveys) or no Ready standby, and RESURVEY_SECONDS passed since its answers were read; or, at once, the chosen target was lost, no other member it read can be promoted, and a member it did not read (not labelled demoted) is there to ask", by::SURVEYING;
        SwitchingOver: LEASE_LOST, "mid-promotion the Lease no longer names the target: its holder is fenced again first", by::SWITCHING_OVER;
        Upgrading: SWITCHOVER_COMPLETED, "the target's manager reports it promoted under the Lease's term; it is labelled primary, and the old primary is upgraded next", by::PROMOTE;
        Ready: SWITCHOVER_COMPLETED, "the target's manager reports it promoted under the Lease's term; it is labelled primary (a scale-down: scaling follows; a requested switchover: done)", by::PROMOTE;
        Ready: ALREADY_PRIMARY, "the requested switchover names the pod that is already primary: nothing moves", by::SWITCHING_OVER;
        Ready: FAILOVER_COMPLETED, "the target's manager reports it promoted under the Lease's term; it is labelled primary in place of the failed one", by::PROMOTE;
        Creating: ADOPTION_REQUESTED, "three surveys read no standby that can be promoted (or the synchronous quorum stayed unread through them, or its unread members lost their data), it cannot go back to the old primary (a target was chosen, or the Lease named another ordinal), and lockstep.dev/adopt-primary names a live pod: the cluster is adopted anew around it, as a lost status is (its Lease handed once its holder is fenced)", by::PRIMARY_LOST;
        PrimaryLost: BACK_TO_OLD_PRIMARY, "three surveys read no standby that can be promoted, no survey chose a target, the Lease never named another ordinal, and the old primary's pod is live (a failover's recreated on its volume, a switchover's stopped on purpose): no other server was writable, so the old primary has the newest WAL and is labelled primary again (given the Lease once any failed pod's expired)", by::SURVEYING;
    }
    [Ready, Scaling] -> PrimaryLost: PRIMARY_NOT_READY, "the primary is not Ready, or released the primary Lease (its server is down)", by::PRIMARY_LOST;
    Upgrading -> PrimaryLost: PRIMARY_NOT_READY,
        "the primary is not Ready, or released the primary Lease (and it is not the pod being replaced)", by::PRIMARY_LOST;
    BackingUp -> PrimaryLost: PRIMARY_NOT_READY, "the primary is not Ready, or released the primary Lease (its server is down)", by::PRIMARY_LOST;
    [Ready, Scaling, Upgrading, BackingUp] -> PrimaryLost: PRIMARY_NOT_RENEWING,
        "the primary has not renewed the primary Lease for longer than L + S (hung or cut off), whatever its readiness", by::PRIMARY_LOST;
    PrimaryLost -> {
        Ready: PRIMARY_RECOVERED, "the primary is Ready and renewing again before the failover delay passed", by::PRIMARY_LOST;
        SwitchingOver: FAILOVER_STARTED, "the primary stayed not Ready (or not renewing) for longer than spec.failoverDelaySeconds", by::PRIMARY_LOST;
        Creating: ADOPTION_REQUESTED, "the primary stayed lost, no replica is Ready to take over, and lockstep.dev/adopt-primary names another live pod: the cluster is adopted anew around it, as a lost status is (its Lease handed once its holder is fenced)", by::PRIMARY_LOST;
    }
    on_demand_edges!(backup: "spec.backup");
    finalize_edges!(
        from: [Creating, Ready, Scaling, Upgrading, SwitchingOver, PrimaryLost, BackingUp, RestoringInPlace],
        backup: "spec.backup",
    );
];
