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
//!   again every [`RESYNC`] without any event (reading caches only), so a missed watch
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

use std::collections::BTreeMap;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use strum::EnumDiscriminants;

use super::api::PostgresClusterSpec;
use crate::engine::{Decision, Edge, Machine, World};
use crate::machines::common::annotations;
use crate::machines::common::backup::BackupKind;
use crate::machines::common::finalize;
use crate::machines::common::jobs::{JobOutcome, JobView, Purpose};
use crate::machines::common::meta::short_hash;
use crate::machines::common::on_demand;
use crate::machines::common::retry::{Attempts, JobStep, retry_time, run_once_step};

/// The PostgresCluster machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Postgres;

/// What a settled cluster is: the image its instances run, how many there are, and which
/// ordinal is the primary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Topology {
    /// The image the StatefulSet's template holds (in Upgrading: the target).
    pub image: String,
    /// The replicas the StatefulSet holds.
    pub replicas: i32,
    /// The ordinal of the pod labelled primary.
    pub primary: i32,
}

/// A pod, by ordinal and the UID it had when it was chosen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodRef {
    /// The ordinal.
    pub ordinal: i32,
    /// The UID.
    pub uid: String,
}

/// Where a switchover stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema, strum::Display)]
pub enum SwitchStep {
    /// The target is chosen; the old primary is about to lose its label.
    Demote,
    /// The old primary is labelled demoted; the promote Job runs against the target.
    Promote,
}

/// Why a switchover runs (and where it goes once done).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema, strum::Display)]
pub enum SwitchCause {
    /// Every replica is upgraded; the old primary is upgraded after it. Back to Upgrading.
    Upgrade,
    /// `spec.replicas` would remove the primary's ordinal. Back to Ready, then Scaling.
    Scale,
    /// The primary was not Ready for longer than `failoverDelaySeconds`. Back to Ready.
    Failover,
}

/// A switchover in progress: the intent, persisted before anything moves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Switchover {
    /// The cluster; `cluster.primary` is the old primary until the switchover completes.
    pub cluster: Topology,
    /// The old primary's pod UID when the switchover began (the fence delete of a
    /// failover names it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_uid: Option<String>,
    /// The replica being promoted.
    pub target: PodRef,
    /// The step.
    pub step: SwitchStep,
    /// The promote attempt, from 1.
    pub attempt: u32,
    /// Why.
    pub cause: SwitchCause,
}

/// The persisted state of a PostgresCluster (`status.machine.state`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, EnumDiscriminants)]
#[strum_discriminants(
    name(PgKind),
    vis(pub),
    derive(
        strum::IntoStaticStr,
        strum::EnumIter,
        strum::Display,
        Hash,
        JsonSchema
    ),
    doc = "The kind of a [`PgState`]: its variant without data."
)]
#[serde(tag = "name", rename_all_fields = "camelCase")]
pub enum PgState {
    /// Objects are being created; pod 0 is the primary.
    Creating {
        /// The generated credentials Secret has been created (or none is needed).
        credentials_created: bool,
    },
    /// At rest: every instance Ready at `cluster.image`, roles as the state says.
    Ready {
        /// The cluster.
        cluster: Topology,
    },
    /// Instances are being added or removed.
    Scaling {
        /// The cluster; `replicas` is the new count.
        cluster: Topology,
        /// The count before.
        from_replicas: i32,
    },
    /// Instances are being replaced, one at a time, to run `cluster.image`.
    Upgrading {
        /// The cluster; `image` is the target.
        cluster: Topology,
        /// The pod being replaced, if one is chosen.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pod: Option<PodRef>,
    },
    /// The primary role moves to another instance.
    SwitchingOver(Switchover),
    /// The primary is not Ready; a failover follows if it stays so.
    PrimaryLost {
        /// The cluster; `primary` is the lost one.
        cluster: Topology,
    },
    /// An on-demand backup runs.
    BackingUp {
        /// The cluster.
        cluster: Topology,
        /// The `backup-now` token being served.
        request: String,
    },
    /// Being deleted: a final backup runs before the finalizer is released.
    Finalizing {
        /// The final backup attempt, from 1.
        attempt: u32,
    },
    /// Cleanup is complete; the finalizer is released.
    Finalized,
}

/// The schema of a persisted [`PgState`]: one object with the `name` discriminator and
/// every variant's fields (Kubernetes needs structural schemas, so the variants' fields
/// are hoisted into one object rather than a `oneOf`).
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)] // only its derived schema is used
struct StateSchema {
    /// The state's kind.
    name: PgKind,
    /// Creating: the generated credentials Secret has been created.
    credentials_created: Option<bool>,
    /// Every state but Creating, Finalizing and Finalized: image, replicas, primary.
    cluster: Option<Topology>,
    /// Scaling: the replica count before.
    from_replicas: Option<i32>,
    /// Upgrading: the pod being replaced.
    pod: Option<PodRef>,
    /// SwitchingOver: the old primary's UID.
    old_uid: Option<String>,
    /// SwitchingOver: the replica being promoted.
    target: Option<PodRef>,
    /// SwitchingOver: the step.
    step: Option<SwitchStep>,
    /// SwitchingOver: the promote attempt. Finalizing: the final backup attempt.
    attempt: Option<u32>,
    /// SwitchingOver: why.
    cause: Option<SwitchCause>,
    /// BackingUp: the `backup-now` token being served.
    request: Option<String>,
}

impl JsonSchema for PgState {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "PgState".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        StateSchema::json_schema(generator)
    }
}

impl PgState {
    /// The cluster the state holds, if it holds one.
    pub fn cluster(&self) -> Option<&Topology> {
        match self {
            PgState::Ready { cluster }
            | PgState::Scaling { cluster, .. }
            | PgState::Upgrading { cluster, .. }
            | PgState::PrimaryLost { cluster }
            | PgState::BackingUp { cluster, .. } => Some(cluster),
            PgState::SwitchingOver(s) => Some(&s.cluster),
            PgState::Creating { .. } | PgState::Finalizing { .. } | PgState::Finalized => None,
        }
    }

    /// The ordinal the state labels `primary`, if any (none mid-switchover).
    pub fn designated_primary(&self) -> Option<i32> {
        match self {
            PgState::Creating { .. } => Some(0),
            PgState::SwitchingOver(_) | PgState::Finalizing { .. } | PgState::Finalized => None,
            other => other.cluster().map(|c| c.primary),
        }
    }
}

/// Reasons: every edge's, and the stays' (stay reasons show in Degraded conditions and
/// logs).
pub mod reason {
    pub use crate::machines::common::finalize::{
        DELETION_REQUESTED, FINAL_BACKUP_FAILED, FINAL_BACKUP_RETRIED, FINAL_BACKUP_RUNNING,
        FINAL_BACKUP_SKIPPED, FINAL_BACKUP_SUCCEEDED, FINALIZED, NO_BACKUP_POLICY,
    };
    pub use crate::machines::common::on_demand::{
        BACKUP_CANCELLED, BACKUP_FAILED, BACKUP_NOT_CONFIGURED, BACKUP_REQUESTED, BACKUP_RUNNING,
        BACKUP_SUCCEEDED,
    };

    /// Edge: the generated credentials Secret was created.
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
    /// Edge: a failed promote Job is tried again after its backoff.
    pub const PROMOTION_RETRIED: &str = "PromotionRetried";
    /// Edge: the target is no longer a Ready replica; another one is promoted instead.
    pub const TARGET_CHANGED: &str = "TargetChanged";
    /// Edge: the target is promoted and labelled primary (switchover for an upgrade or a
    /// scale-down).
    pub const SWITCHOVER_COMPLETED: &str = "SwitchoverCompleted";
    /// Edge: the target is promoted and labelled primary after a failover.
    pub const FAILOVER_COMPLETED: &str = "FailoverCompleted";
    /// Edge: the primary is not Ready.
    pub const PRIMARY_NOT_READY: &str = "PrimaryNotReady";
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
    /// Stay: waiting for pods (to exist, to be Ready, to be labelled).
    pub const WAITING_FOR_PODS: &str = "WaitingForPods";
    /// Stay: the chosen pod is being deleted and recreated.
    pub const REPLACING_POD: &str = "ReplacingPod";
    /// Stay: the promote Job runs.
    pub const PROMOTING: &str = "Promoting";
    /// Stay (Degraded): the promote Job failed; waiting to retry.
    pub const PROMOTION_FAILED: &str = "PromotionFailed";
    /// Stay (Degraded): no Ready replica to promote.
    pub const NO_PROMOTION_TARGET: &str = "NoPromotionTarget";
    /// Stay (Degraded): the primary is not Ready; waiting `failoverDelaySeconds`.
    pub const AWAITING_FAILOVER: &str = "AwaitingFailover";
    /// Stay: the old primary's pod must be seen before the primary label moves.
    pub const WAITING_FOR_OLD_PRIMARY: &str = "WaitingForOldPrimary";
}

use reason::*;

/// A role a pod is labelled with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumString)]
#[strum(serialize_all = "lowercase")]
pub enum Role {
    /// Selected by `<name>-rw`; starts as (or becomes) the primary.
    Primary,
    /// Selected by `<name>-ro`; clones or follows the primary.
    Replica,
    /// Selected by neither Service: a pod that is (or may still be) a writable primary
    /// but must not serve, e.g. the old primary of a switchover until it restarts. Only a
    /// recreated pod (a new UID, so no label) is labelled `replica` in its place; if it
    /// restarts in place, its entrypoint treats `demoted` like `replica` (rewinds).
    Demoted,
}

/// Why a pod is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteCause {
    /// It is recreated at the target image.
    Upgrade,
    /// It is a failed primary: it must come back as a standby.
    Fence,
}

/// The Services the cluster has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, strum::EnumIter)]
pub enum ServiceKind {
    /// `<name>`: headless, every instance's stable DNS name.
    Headless,
    /// `<name>-rw`: the primary.
    ReadWrite,
    /// `<name>-ro`: the replicas.
    ReadOnly,
}

/// A side effect of the PostgresCluster machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PgAction {
    /// Create the generated credentials Secret (random passwords) if absent.
    CreateCredentials,
    /// Apply the ConfigMap holding the pod scripts.
    EnsureScripts,
    /// Apply a Service.
    EnsureService(ServiceKind),
    /// Apply the PodDisruptionBudget.
    EnsurePdb,
    /// Apply the StatefulSet with this image and replica count.
    EnsureStatefulSet {
        /// The template's image.
        image: String,
        /// `spec.replicas`.
        replicas: i32,
    },
    /// Set pod `ordinal`'s role label.
    Label {
        /// The ordinal.
        ordinal: i32,
        /// The role.
        role: Role,
    },
    /// Delete pod `ordinal` if it still has `uid`.
    DeletePod {
        /// The ordinal.
        ordinal: i32,
        /// The UID precondition.
        uid: String,
        /// Why.
        cause: DeleteCause,
    },
    /// Create the promote Job (if absent) against pod `target`.
    RunPromote {
        /// The Job's key.
        key: String,
        /// The ordinal being promoted.
        target: i32,
        /// The image the Job runs (the cluster's: it has `psql`).
        image: String,
        /// In a planned switchover, the old primary: its client sessions are ended and
        /// the target must replay all it wrote before it is promoted. `None` in a
        /// failover.
        old_primary: Option<i32>,
    },
    /// Create a backup Job (if absent).
    RunBackup {
        /// The Job's key.
        key: String,
        /// On demand or final.
        kind: BackupKind,
    },
    /// Apply the scheduled-backup CronJob.
    EnsureCronJob,
    /// Delete the scheduled-backup CronJob.
    DeleteCronJob {
        /// Its UID.
        uid: String,
    },
    /// Delete a finished Job (promote Jobs are pruned at rest).
    DeleteJob {
        /// Its name.
        name: String,
        /// Its UID.
        uid: String,
    },
}

/// The StatefulSet as observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatefulSetView {
    /// The live object contains what Lockstep renders for its own image and replicas.
    pub conforms: bool,
    /// The template's PostgreSQL image.
    pub image: Option<String>,
    /// `spec.replicas`.
    pub replicas: i32,
    /// The StatefulSet controller has seen the current template.
    pub caught_up: bool,
}

impl StatefulSetView {
    /// Whether the live StatefulSet is what Lockstep renders for `image` and `replicas`.
    pub fn holds(&self, image: &str, replicas: i32) -> bool {
        self.conforms && self.image.as_deref() == Some(image) && self.replicas == replicas
    }

    /// Whether the controller already recreates pods from a template holding `image`.
    pub fn serves(&self, image: &str) -> bool {
        self.conforms && self.caught_up && self.image.as_deref() == Some(image)
    }
}

/// A PostgreSQL pod as observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodView {
    /// Its UID.
    pub uid: String,
    /// The PostgreSQL container's image.
    pub image: Option<String>,
    /// The Ready condition holds.
    pub ready: bool,
    /// It has a deletion timestamp.
    pub terminating: bool,
    /// Its `lockstep.dev/role` label, if it is a known role.
    pub role: Option<Role>,
}

impl PodView {
    fn serving(&self) -> bool {
        self.ready && !self.terminating
    }
}

pub use crate::machines::common::observe::CronJobView;

/// Which of the simple owned objects match their rendering.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InSync {
    /// The scripts ConfigMap.
    pub scripts: bool,
    /// The headless Service.
    pub headless: bool,
    /// `<name>-rw`.
    pub read_write: bool,
    /// `<name>-ro`.
    pub read_only: bool,
    /// The PodDisruptionBudget.
    pub pdb: bool,
}

impl InSync {
    /// Everything matches.
    pub const ALL: InSync = InSync {
        scripts: true,
        headless: true,
        read_write: true,
        read_only: true,
        pdb: true,
    };
}

/// What the user asked for through annotations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Requests {
    /// [`annotations::BACKUP_NOW`].
    pub backup_now: Option<String>,
    /// [`annotations::SKIP_FINAL_BACKUP`].
    pub skip_final_backup: bool,
}

impl Requests {
    /// Read the requests from an object's annotations.
    pub fn from_annotations(a: &BTreeMap<String, String>) -> Self {
        Requests {
            backup_now: annotations::token(a, annotations::BACKUP_NOW),
            skip_final_backup: annotations::flag(a, annotations::SKIP_FINAL_BACKUP),
        }
    }
}

/// Everything the machine sees of the world.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    /// The custom resource's name (pods are `<name>-<ordinal>`).
    pub name: String,
    /// The simple owned objects.
    pub in_sync: InSync,
    /// The StatefulSet, if it exists.
    pub statefulset: Option<StatefulSetView>,
    /// PostgreSQL pods by ordinal.
    pub pods: BTreeMap<i32, PodView>,
    /// Owned Jobs (promotions, backups).
    pub jobs: Vec<JobView>,
    /// The scheduled-backup CronJob, if it exists.
    pub cronjob: Option<CronJobView>,
    /// Annotation requests.
    pub requests: Requests,
}

impl Observed {
    /// The run-once Job with `key`.
    pub fn job(&self, key: &str) -> Option<&JobView> {
        self.jobs.iter().find(|j| j.key.as_deref() == Some(key))
    }

    /// `<name>-<ordinal>`.
    pub fn pod_name(&self, ordinal: i32) -> String {
        format!("{}-{ordinal}", self.name)
    }

    fn pod_names(&self, ordinals: &[i32]) -> String {
        ordinals
            .iter()
            .map(|k| self.pod_name(*k))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The pod at `ordinal` if it exists and is not terminating.
    fn live(&self, ordinal: i32) -> Option<&PodView> {
        self.pods.get(&ordinal).filter(|p| !p.terminating)
    }

    fn serving(&self, ordinal: i32) -> bool {
        self.pods.get(&ordinal).is_some_and(PodView::serving)
    }
}

/// The key of the promote Job of `attempt` against the pod `target` with `uid`.
pub fn promote_key(target: i32, uid: &str, attempt: u32) -> String {
    format!("promote-{target}-{}-{attempt}", short_hash(&[uid]))
}

pub use crate::machines::common::on_demand::key as backup_key;

/// The image a spec asks for: `spec.image`, else `postgres:<version>`.
pub fn spec_image(spec: &PostgresClusterSpec) -> String {
    spec.image
        .clone()
        .unwrap_or_else(|| format!("postgres:{}", spec.version))
}

type D = Decision<PgState, PgAction>;

/// How often a cluster at rest is looked at again without any event: a missed watch
/// event cannot postpone noticing a primary that stopped being Ready by more than this.
pub const RESYNC: Duration = Duration::from_secs(300);

/// Whether a pod that must not be primary is to be labelled `demoted` rather than
/// `replica`: it is labelled `primary` or `demoted` now, so it may still be a writable
/// primary (a role change takes effect only when the pod restarts, and a restarted pod
/// is a new pod without the label).
fn may_be_writable(pod: &PodView) -> bool {
    matches!(pod.role, Some(Role::Primary | Role::Demoted))
}

/// The label moves that make the pods' roles what `primary` says: demotions first, then
/// the promotion, so that no two pods are ever labelled primary. A pod that may still be
/// a writable primary is labelled `demoted` (served by neither Service), never
/// `replica`; when `primary` is known (not mid-switchover) such a pod is deleted, so
/// that it comes back as a new pod, a standby, and is labelled `replica`.
/// The role the old primary of switchover `s` is labelled with once it must not serve:
/// `demoted` while it is the pod the switchover began with or may be writable for
/// another reason; a recreated pod (a standby) is a `replica`.
fn old_primary_role(s: &Switchover, pod: &PodView) -> Role {
    if s.old_uid.as_deref() == Some(pod.uid.as_str()) || may_be_writable(pod) {
        Role::Demoted
    } else {
        Role::Replica
    }
}

fn label_moves(o: &Observed, primary: Option<i32>) -> Vec<PgAction> {
    let mut demotions = Vec::new();
    let mut promotion = Vec::new();
    let mut restarts = Vec::new();
    for (k, pod) in o.pods.iter().filter(|(_, p)| !p.terminating) {
        let want = if Some(*k) == primary {
            Role::Primary
        } else if may_be_writable(pod) {
            Role::Demoted
        } else {
            Role::Replica
        };
        if want == Role::Demoted && primary.is_some() {
            restarts.push(PgAction::DeletePod {
                ordinal: *k,
                uid: pod.uid.clone(),
                cause: DeleteCause::Fence,
            });
        }
        if pod.role == Some(want) {
            continue;
        }
        let action = PgAction::Label {
            ordinal: *k,
            role: want,
        };
        match want {
            Role::Primary => promotion.push(action),
            Role::Replica | Role::Demoted => demotions.push(action),
        }
    }
    demotions.extend(promotion);
    demotions.extend(restarts);
    demotions
}

/// Owned objects and labels to restore for a StatefulSet of `image` × `replicas` whose
/// primary is `primary` (none mid-switchover).
fn upkeep(
    spec: &PostgresClusterSpec,
    image: &str,
    replicas: i32,
    primary: Option<i32>,
    o: &Observed,
) -> Vec<PgAction> {
    let mut actions = Vec::new();
    let s = o.in_sync;
    if !s.scripts {
        actions.push(PgAction::EnsureScripts);
    }
    for (ok, kind) in [
        (s.headless, ServiceKind::Headless),
        (s.read_write, ServiceKind::ReadWrite),
        (s.read_only, ServiceKind::ReadOnly),
    ] {
        if !ok {
            actions.push(PgAction::EnsureService(kind));
        }
    }
    if !s.pdb {
        actions.push(PgAction::EnsurePdb);
    }
    if !o
        .statefulset
        .as_ref()
        .is_some_and(|sts| sts.holds(image, replicas))
    {
        actions.push(PgAction::EnsureStatefulSet {
            image: image.to_owned(),
            replicas,
        });
    }
    let scheduled = spec.backup.is_some() && spec.backup_schedule.is_some();
    match (scheduled, &o.cronjob) {
        (true, Some(c)) if c.in_sync => {}
        (true, _) => actions.push(PgAction::EnsureCronJob),
        (false, Some(c)) => actions.push(PgAction::DeleteCronJob { uid: c.uid.clone() }),
        (false, None) => {}
    }
    actions.extend(label_moves(o, primary));
    actions
}

fn stay(reason: &'static str, message: impl Into<String>, upkeep: Vec<PgAction>) -> D {
    Decision::stay(reason, message).with_actions(upkeep)
}

/// A stay that restores objects (`Restoring`) or rests (`reason`).
fn rest(reason: &'static str, message: impl Into<String>, upkeep: Vec<PgAction>) -> D {
    let reason = if upkeep.is_empty() { reason } else { RESTORING };
    stay(reason, message, upkeep)
}

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
        match state {
            PgState::Creating {
                credentials_created,
            } => creating(spec, *credentials_created, o),
            PgState::Ready { cluster } => ready(spec, cluster, o),
            PgState::Scaling {
                cluster,
                from_replicas,
            } => scaling(spec, cluster, *from_replicas, o),
            PgState::Upgrading { cluster, pod } => upgrading(spec, cluster, pod.as_ref(), o),
            PgState::SwitchingOver(s) => switching_over(spec, s, world),
            PgState::PrimaryLost { cluster } => primary_lost(spec, cluster, world),
            PgState::BackingUp { cluster, request } => backing_up(spec, cluster, request, o),
            PgState::Finalizing { .. } | PgState::Finalized => {
                Decision::stay(FINALIZED, "waiting for the object to be deleted")
            }
        }
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

use PgKind as K;

macro_rules! edges_to_finalizing {
    ($($from:ident),*) => {
        [$(
            Edge::new(K::$from, K::Finalizing, DELETION_REQUESTED, "deleted; a final backup is taken"),
            Edge::new(K::$from, K::Finalized, NO_BACKUP_POLICY, "deleted without spec.backup"),
            Edge::new(K::$from, K::Finalized, FINAL_BACKUP_SKIPPED, "deleted with lockstep.dev/skip-final-backup=true"),
        )*]
    };
}

const DELETIONS: [Edge<PgKind>; 21] = edges_to_finalizing!(
    Creating,
    Ready,
    Scaling,
    Upgrading,
    SwitchingOver,
    PrimaryLost,
    BackingUp
);

const LIFECYCLE: [Edge<PgKind>; 33] = [
    Edge::new(
        K::Creating,
        K::Creating,
        CREDENTIALS_GENERATED,
        "no spec.credentialsSecret: <name>-credentials was created with random passwords",
    ),
    Edge::new(
        K::Creating,
        K::Ready,
        CLUSTER_CREATED,
        "every instance is Ready with its role at the spec's image",
    ),
    Edge::new(
        K::Creating,
        K::Upgrading,
        MIXED_IMAGES,
        "every instance is Ready but some run an earlier image of the spec",
    ),
    Edge::new(
        K::Ready,
        K::Upgrading,
        IMAGE_CHANGED,
        "spec.version or spec.image changed (or an instance runs another image)",
    ),
    Edge::new(
        K::Upgrading,
        K::Upgrading,
        IMAGE_CHANGED,
        "the spec's image changed mid-upgrade while no pod was in flight: retarget",
    ),
    Edge::new(
        K::Upgrading,
        K::Upgrading,
        POD_CHOSEN,
        "the next pod to replace is chosen (replicas first, highest ordinal first); its UID is recorded",
    ),
    Edge::new(
        K::Upgrading,
        K::Upgrading,
        POD_UPGRADED,
        "the replaced pod is Ready at the target image",
    ),
    Edge::new(
        K::Upgrading,
        K::Upgrading,
        REPLANNED,
        "the chosen pod was replaced by someone else",
    ),
    Edge::new(
        K::Upgrading,
        K::SwitchingOver,
        SWITCHOVER_STARTED,
        "every replica is Ready at the target; the primary role moves to one of them",
    ),
    Edge::new(
        K::Upgrading,
        K::Ready,
        UPGRADE_COMPLETED,
        "every instance is Ready at the target image",
    ),
    Edge::new(
        K::Ready,
        K::Scaling,
        REPLICAS_CHANGED,
        "spec.replicas differs from the instances at rest",
    ),
    Edge::new(
        K::Scaling,
        K::Scaling,
        REPLICAS_CHANGED,
        "spec.replicas changed again while scaling",
    ),
    Edge::new(
        K::Scaling,
        K::Ready,
        SCALING_COMPLETE,
        "exactly spec.replicas instances exist and all are Ready",
    ),
    Edge::new(
        K::Ready,
        K::SwitchingOver,
        PRIMARY_OUTSIDE_SCALE,
        "spec.replicas would remove the primary's ordinal: the role moves to a lower one first",
    ),
    Edge::new(
        K::Scaling,
        K::SwitchingOver,
        PRIMARY_OUTSIDE_SCALE,
        "spec.replicas would remove the primary's ordinal: the role moves to a lower one first",
    ),
    Edge::new(
        K::SwitchingOver,
        K::SwitchingOver,
        OLD_PRIMARY_DEMOTED,
        "the old primary is labelled demoted (a failed one is also deleted): neither -rw nor -ro selects it",
    ),
    Edge::new(
        K::SwitchingOver,
        K::SwitchingOver,
        PROMOTION_RETRIED,
        "the promote Job failed and its backoff is over",
    ),
    Edge::new(
        K::SwitchingOver,
        K::SwitchingOver,
        TARGET_CHANGED,
        "the target is no longer a Ready replica; another Ready one is promoted",
    ),
    Edge::new(
        K::SwitchingOver,
        K::Upgrading,
        SWITCHOVER_COMPLETED,
        "the target is promoted and labelled primary; the old primary is upgraded next",
    ),
    Edge::new(
        K::SwitchingOver,
        K::Ready,
        SWITCHOVER_COMPLETED,
        "the target is promoted and labelled primary; scaling follows",
    ),
    Edge::new(
        K::SwitchingOver,
        K::Ready,
        FAILOVER_COMPLETED,
        "a Ready replica is promoted and labelled primary in place of the failed one",
    ),
    Edge::new(
        K::Ready,
        K::PrimaryLost,
        PRIMARY_NOT_READY,
        "the primary is not Ready",
    ),
    Edge::new(
        K::Scaling,
        K::PrimaryLost,
        PRIMARY_NOT_READY,
        "the primary is not Ready",
    ),
    Edge::new(
        K::Upgrading,
        K::PrimaryLost,
        PRIMARY_NOT_READY,
        "the primary is not Ready (and it is not the pod being replaced)",
    ),
    Edge::new(
        K::BackingUp,
        K::PrimaryLost,
        PRIMARY_NOT_READY,
        "the primary is not Ready",
    ),
    Edge::new(
        K::PrimaryLost,
        K::Ready,
        PRIMARY_RECOVERED,
        "the primary is Ready again before the failover delay passed",
    ),
    Edge::new(
        K::PrimaryLost,
        K::SwitchingOver,
        FAILOVER_STARTED,
        "the primary stayed not Ready for longer than spec.failoverDelaySeconds",
    ),
    Edge::new(
        K::Ready,
        K::BackingUp,
        BACKUP_REQUESTED,
        "lockstep.dev/backup-now has a token not yet served",
    ),
    Edge::new(
        K::BackingUp,
        K::Ready,
        BACKUP_SUCCEEDED,
        "the on-demand backup Job succeeded",
    ),
    Edge::new(
        K::BackingUp,
        K::Ready,
        BACKUP_FAILED,
        "the on-demand backup Job failed",
    ),
    Edge::new(
        K::BackingUp,
        K::Ready,
        BACKUP_CANCELLED,
        "spec.backup was removed before the backup Job was created",
    ),
    Edge::new(
        K::Finalizing,
        K::Finalizing,
        FINAL_BACKUP_RETRIED,
        "the final backup failed and its backoff is over",
    ),
    Edge::new(
        K::Finalizing,
        K::Finalized,
        FINAL_BACKUP_SUCCEEDED,
        "the final backup Job succeeded",
    ),
];

const FINALIZING_EXITS: [Edge<PgKind>; 2] = [
    Edge::new(
        K::Finalizing,
        K::Finalized,
        FINAL_BACKUP_SKIPPED,
        "lockstep.dev/skip-final-backup=true was set",
    ),
    Edge::new(
        K::Finalizing,
        K::Finalized,
        NO_BACKUP_POLICY,
        "spec.backup was removed while finalizing",
    ),
];

const fn concat_tables<const A: usize, const B: usize, const C: usize, const N: usize>(
    a: [Edge<PgKind>; A],
    b: [Edge<PgKind>; B],
    c: [Edge<PgKind>; C],
) -> [Edge<PgKind>; N] {
    let mut out = [a[0]; N];
    let mut i = 0;
    while i < A {
        out[i] = a[i];
        i += 1;
    }
    let mut j = 0;
    while j < B {
        out[A + j] = b[j];
        j += 1;
    }
    let mut k = 0;
    while k < C {
        out[A + B + k] = c[k];
        k += 1;
    }
    out
}

/// The declared transition table.
pub static TABLE: &[Edge<PgKind>] =
    &concat_tables::<33, 21, 2, 56>(LIFECYCLE, DELETIONS, FINALIZING_EXITS);

fn creating(spec: &PostgresClusterSpec, credentials_created: bool, o: &Observed) -> D {
    if spec.credentials_secret.is_none() && !credentials_created {
        return Decision::go(
            PgState::Creating {
                credentials_created: true,
            },
            CREDENTIALS_GENERATED,
            "no spec.credentialsSecret: generated the superuser and replication passwords",
        )
        .with_actions([PgAction::CreateCredentials]);
    }
    let image = spec_image(spec);
    let replicas = spec.replicas;
    let actions = upkeep(spec, &image, replicas, Some(0), o);
    let ready: Vec<i32> = (0..replicas).filter(|k| o.serving(*k)).collect();
    let extra = o.pods.keys().any(|k| *k >= replicas);
    if ready.len() == usize::try_from(replicas).unwrap_or(0) && !extra && actions.is_empty() {
        let cluster = Topology {
            image: image.clone(),
            replicas,
            primary: 0,
        };
        let stale: Vec<i32> = (0..replicas)
            .filter(|k| o.pods.get(k).and_then(|p| p.image.as_deref()) != Some(&image))
            .collect();
        if !stale.is_empty() {
            return Decision::go(
                PgState::Upgrading { cluster, pod: None },
                MIXED_IMAGES,
                format!(
                    "all {replicas} instances Ready, but {} run an earlier image; upgrading to {image}",
                    o.pod_names(&stale)
                ),
            );
        }
        return Decision::go(
            PgState::Ready { cluster },
            CLUSTER_CREATED,
            format!(
                "all {replicas} instances Ready at {image}; {} is primary",
                o.pod_name(0)
            ),
        );
    }
    stay(
        WAITING_FOR_PODS,
        format!("{}/{replicas} instances Ready at {image}", ready.len()),
        actions,
    )
}

/// The primary's pod is not serving (and the cluster has someone to fail over to or at
/// least a reason to say so).
fn primary_down(cluster: &Topology, o: &Observed) -> bool {
    !o.serving(cluster.primary)
}

fn lose_primary(cluster: &Topology, o: &Observed) -> D {
    Decision::go(
        PgState::PrimaryLost {
            cluster: cluster.clone(),
        },
        PRIMARY_NOT_READY,
        format!("primary {} is not Ready", o.pod_name(cluster.primary)),
    )
}

/// The replica to promote: Ready, not the primary, below `below`, at `image` when given;
/// the lowest ordinal.
fn choose_target(
    o: &Observed,
    cluster: &Topology,
    below: i32,
    image: Option<&str>,
) -> Option<PodRef> {
    (0..below.min(cluster.replicas))
        .filter(|k| *k != cluster.primary)
        .filter_map(|k| o.pods.get(&k).map(|p| (k, p)))
        .find(|(_, p)| {
            p.serving()
                && p.role != Some(Role::Demoted)
                && image.is_none_or(|i| p.image.as_deref() == Some(i))
        })
        .map(|(k, p)| PodRef {
            ordinal: k,
            uid: p.uid.clone(),
        })
}

fn begin_switchover(
    cluster: &Topology,
    target: PodRef,
    cause: SwitchCause,
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
        }),
        reason,
        message,
    )
}

/// A scale to `replicas` that would remove the primary: hand the role to a lower
/// ordinal first, or say why that cannot happen yet.
fn scale_below_primary(
    cluster: &Topology,
    replicas: i32,
    o: &Observed,
    actions: Vec<PgAction>,
) -> D {
    match choose_target(o, cluster, replicas, None) {
        Some(target) => {
            let message = format!(
                "spec.replicas={replicas} would remove the primary {}: switching over to {} first",
                o.pod_name(cluster.primary),
                o.pod_name(target.ordinal)
            );
            begin_switchover(
                cluster,
                target,
                SwitchCause::Scale,
                o,
                PRIMARY_OUTSIDE_SCALE,
                message,
            )
        }
        None => stay(
            NO_PROMOTION_TARGET,
            format!(
                "spec.replicas={replicas} would remove the primary {}, and no Ready replica below ordinal {replicas} can take over",
                o.pod_name(cluster.primary)
            ),
            actions,
        )
        .degraded(),
    }
}

fn ready(spec: &PostgresClusterSpec, cluster: &Topology, o: &Observed) -> D {
    let mut actions = upkeep(
        spec,
        &cluster.image,
        cluster.replicas,
        Some(cluster.primary),
        o,
    );
    if primary_down(cluster, o) {
        return lose_primary(cluster, o);
    }
    if spec.replicas != cluster.replicas {
        if spec.replicas <= cluster.primary {
            return scale_below_primary(cluster, spec.replicas, o, actions);
        }
        return Decision::go(
            PgState::Scaling {
                cluster: Topology {
                    replicas: spec.replicas,
                    ..cluster.clone()
                },
                from_replicas: cluster.replicas,
            },
            REPLICAS_CHANGED,
            format!(
                "scaling from {} to {} instances",
                cluster.replicas, spec.replicas
            ),
        );
    }
    let image = spec_image(spec);
    let elsewhere: Vec<i32> = (0..cluster.replicas)
        .filter(|k| {
            o.live(*k)
                .is_some_and(|p| p.image.as_deref() != Some(&cluster.image))
        })
        .collect();
    if image != cluster.image || !elsewhere.is_empty() {
        let message = if image == cluster.image {
            format!(
                "{} run an image other than {image}; replacing them",
                o.pod_names(&elsewhere)
            )
        } else {
            format!("upgrading from {} to {image}", cluster.image)
        };
        return Decision::go(
            PgState::Upgrading {
                cluster: Topology {
                    image,
                    ..cluster.clone()
                },
                pod: None,
            },
            IMAGE_CHANGED,
            message,
        );
    }
    match on_demand::request(
        o.requests.backup_now.as_deref(),
        |key| o.job(key).is_some(),
        spec.backup.is_some(),
    ) {
        on_demand::Request::Idle => {}
        on_demand::Request::Start { token, message } => {
            return Decision::go(
                PgState::BackingUp {
                    cluster: cluster.clone(),
                    request: token,
                },
                BACKUP_REQUESTED,
                message,
            );
        }
        on_demand::Request::NotConfigured { .. } => {
            return stay(
            BACKUP_NOT_CONFIGURED,
            format!(
                "{} is set but spec.backup is not: configure a backup destination or remove the annotation",
                annotations::BACKUP_NOW
            ),
            actions,
        )
        .degraded();
        }
    }
    // At rest: prune the promote Jobs of finished switchovers.
    actions.extend(
        o.jobs
            .iter()
            .filter(|j| j.purpose == Some(Purpose::Promote) && j.outcome != JobOutcome::Running)
            .map(|j| PgAction::DeleteJob {
                name: j.name.clone(),
                uid: j.uid.clone(),
            }),
    );
    let down: Vec<i32> = (0..cluster.replicas).filter(|k| !o.serving(*k)).collect();
    if !down.is_empty() {
        return stay(
            REPLICAS_NOT_READY,
            format!(
                "primary {} serves; replica {} not Ready",
                o.pod_name(cluster.primary),
                o.pod_names(&down)
            ),
            actions,
        )
        .degraded()
        .requeue(RESYNC);
    }
    rest(
        SERVING,
        format!(
            "{} instances Ready at {}; {} is primary",
            cluster.replicas,
            cluster.image,
            o.pod_name(cluster.primary)
        ),
        actions,
    )
    .requeue(RESYNC)
}

fn scaling(spec: &PostgresClusterSpec, cluster: &Topology, from_replicas: i32, o: &Observed) -> D {
    let actions = upkeep(
        spec,
        &cluster.image,
        cluster.replicas,
        Some(cluster.primary),
        o,
    );
    if primary_down(cluster, o) {
        return lose_primary(cluster, o);
    }
    if spec.replicas != cluster.replicas {
        if spec.replicas <= cluster.primary {
            return scale_below_primary(cluster, spec.replicas, o, actions);
        }
        return Decision::go(
            PgState::Scaling {
                cluster: Topology {
                    replicas: spec.replicas,
                    ..cluster.clone()
                },
                from_replicas,
            },
            REPLICAS_CHANGED,
            format!(
                "scaling to {} instances instead of {}",
                spec.replicas, cluster.replicas
            ),
        );
    }
    let n = cluster.replicas;
    let ready = (0..n).filter(|k| o.serving(*k)).count();
    let extra: Vec<i32> = o.pods.keys().copied().filter(|k| *k >= n).collect();
    if actions.is_empty() && extra.is_empty() && ready == usize::try_from(n).unwrap_or(0) {
        return Decision::go(
            PgState::Ready {
                cluster: cluster.clone(),
            },
            SCALING_COMPLETE,
            format!("{n} instances Ready at {}", cluster.image),
        );
    }
    let mut message = format!("{ready}/{n} instances Ready");
    if !extra.is_empty() {
        message.push_str(&format!("; waiting for {} to go", o.pod_names(&extra)));
    }
    stay(WAITING_FOR_PODS, message, actions)
}

/// Why pod `k` may not be taken down now, if it may not.
fn hold_before_delete(o: &Observed, k: i32, cluster: &Topology) -> Option<String> {
    let others_down: Vec<i32> = (0..cluster.replicas)
        .filter(|j| *j != k && !o.serving(*j))
        .collect();
    if !others_down.is_empty() {
        return Some(format!(
            "waiting for {} to be Ready before taking {} down",
            o.pod_names(&others_down),
            o.pod_name(k)
        ));
    }
    match &o.statefulset {
        Some(s) if s.serves(&cluster.image) => None,
        _ => Some(format!(
            "waiting for the StatefulSet template to hold {} before taking {} down",
            cluster.image,
            o.pod_name(k)
        )),
    }
}

/// The chosen pod was deleted and not yet recreated: the template must not change under
/// it.
fn in_flight(pod: Option<&PodRef>, o: &Observed) -> bool {
    pod.is_some_and(|p| match o.pods.get(&p.ordinal) {
        None => true,
        Some(live) => live.uid == p.uid && live.terminating,
    })
}

fn upgrading(
    spec: &PostgresClusterSpec,
    cluster: &Topology,
    pod: Option<&PodRef>,
    o: &Observed,
) -> D {
    let actions = upkeep(
        spec,
        &cluster.image,
        cluster.replicas,
        Some(cluster.primary),
        o,
    );
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
    if !replacing_primary && primary_down(cluster, o) {
        return lose_primary(cluster, o);
    }
    match pod {
        None => plan_upgrade(cluster, o, actions),
        Some(p) => replace(cluster, p, o, actions),
    }
}

/// Choose what the upgrade does next.
fn plan_upgrade(cluster: &Topology, o: &Observed, actions: Vec<PgAction>) -> D {
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
    let stale = |k: &i32| o.live(*k).and_then(|p| p.image.as_deref()) != Some(target);
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
            return match choose_target(o, cluster, n, Some(target)) {
                Some(t) if down.is_empty() => {
                    let message = format!(
                        "every replica runs {target}; switching over from {} to {}",
                        o.pod_name(cluster.primary),
                        o.pod_name(t.ordinal)
                    );
                    begin_switchover(
                        cluster,
                        t,
                        SwitchCause::Upgrade,
                        o,
                        SWITCHOVER_STARTED,
                        message,
                    )
                }
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
        format!("replacing {} to run {target}", o.pod_name(pick)),
    )
}

/// Replace the chosen pod: delete it (UID-preconditioned), wait for its replacement.
fn replace(cluster: &Topology, p: &PodRef, o: &Observed, actions: Vec<PgAction>) -> D {
    let k = p.ordinal;
    let name = o.pod_name(k);
    let next = || PgState::Upgrading {
        cluster: cluster.clone(),
        pod: None,
    };
    match o.pods.get(&k) {
        Some(live) if live.uid == p.uid => {
            if live.terminating {
                return stay(
                    REPLACING_POD,
                    format!("waiting for {name} to terminate"),
                    actions,
                );
            }
            if live.image.as_deref() == Some(&cluster.image) {
                // Recreated at the target by someone else before our delete: nothing to do.
                return Decision::go(
                    next(),
                    REPLANNED,
                    format!("{name} already runs {}", cluster.image),
                );
            }
            match hold_before_delete(o, k, cluster) {
                Some(why) => stay(WAITING_FOR_PODS, why, actions),
                None => stay(
                    REPLACING_POD,
                    format!(
                        "deleting {name} (uid {}) to recreate it at {}",
                        p.uid, cluster.image
                    ),
                    actions,
                )
                .with_actions([PgAction::DeletePod {
                    ordinal: k,
                    uid: p.uid.clone(),
                    cause: DeleteCause::Upgrade,
                }]),
            }
        }
        Some(live) if !live.terminating => {
            if live.image.as_deref() != Some(&cluster.image) {
                return Decision::go(
                    next(),
                    REPLANNED,
                    format!(
                        "{name} was recreated at {} instead of {}; choosing again",
                        live.image.as_deref().unwrap_or("no image"),
                        cluster.image
                    ),
                );
            }
            if !live.ready {
                return stay(
                    REPLACING_POD,
                    format!(
                        "{name} recreated at {}; waiting for it to become Ready",
                        cluster.image
                    ),
                    actions,
                );
            }
            Decision::go(
                next(),
                POD_UPGRADED,
                format!("{name} is Ready at {}", cluster.image),
            )
        }
        _ => stay(
            REPLACING_POD,
            format!("waiting for {name} to be recreated"),
            actions,
        ),
    }
}

fn switching_over(spec: &PostgresClusterSpec, s: &Switchover, world: &World<Observed>) -> D {
    let o = &world.observed;
    let cluster = &s.cluster;
    let old = cluster.primary;
    let t = s.target.ordinal;
    let what = match s.cause {
        SwitchCause::Failover => "failover",
        SwitchCause::Upgrade | SwitchCause::Scale => "switchover",
    };
    // Mid-switchover nobody is labelled primary.
    let actions = upkeep(spec, &cluster.image, cluster.replicas, None, o);
    match s.step {
        SwitchStep::Demote => {
            let mut demote = vec![];
            if let Some(pod) = o.pods.get(&old) {
                // Still running as a writable primary until it restarts: served by
                // neither Service (`replica` would put it behind `-ro`).
                demote.push(PgAction::Label {
                    ordinal: old,
                    role: old_primary_role(s, pod),
                });
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
                    step: SwitchStep::Promote,
                    ..s.clone()
                }),
                OLD_PRIMARY_DEMOTED,
                format!(
                    "{what}: {} labelled {}{fenced}; promoting {}",
                    o.pod_name(old),
                    demoted_as,
                    o.pod_name(t)
                ),
            )
            .with_actions(demote)
        }
        SwitchStep::Promote => promote(s, world, target_bound(spec, s), what, actions),
    }
}

/// The ordinals a switchover may promote: below `spec.replicas` when it makes room for a
/// scale-down, any otherwise.
fn target_bound(spec: &PostgresClusterSpec, s: &Switchover) -> i32 {
    match s.cause {
        SwitchCause::Scale => spec.replicas.min(s.cluster.replicas),
        SwitchCause::Upgrade | SwitchCause::Failover => s.cluster.replicas,
    }
}

fn retarget(
    s: &Switchover,
    o: &Observed,
    below: i32,
    what: &str,
    why: String,
    actions: Vec<PgAction>,
) -> D {
    let cluster = &s.cluster;
    let image = (s.cause == SwitchCause::Upgrade).then_some(cluster.image.as_str());
    let candidate = choose_target(o, cluster, below, image)
        .filter(|c| c.ordinal != s.target.ordinal || c.uid != s.target.uid);
    match candidate {
        Some(next) => {
            let message = format!("{why}; promoting {} instead", o.pod_name(next.ordinal));
            Decision::go(
                PgState::SwitchingOver(Switchover {
                    target: next,
                    attempt: 1,
                    ..s.clone()
                }),
                TARGET_CHANGED,
                message,
            )
        }
        None => stay(
            NO_PROMOTION_TARGET,
            format!("{what}: {why}, and no other Ready replica can be promoted"),
            actions,
        )
        .degraded(),
    }
}

fn promote(
    s: &Switchover,
    world: &World<Observed>,
    below: i32,
    what: &str,
    actions: Vec<PgAction>,
) -> D {
    let o = &world.observed;
    let t = s.target.ordinal;
    let name = o.pod_name(t);
    let key = promote_key(t, &s.target.uid, s.attempt);
    let job = o.job(&key);
    let attempts = Attempts {
        attempt: s.attempt,
        round_start: 1,
        retry_limit: None,
    };
    let (step, job_name) = run_once_step(job, &key, attempts, world.now);
    match step {
        JobStep::Start => match o.pods.get(&t) {
            Some(p) if p.uid == s.target.uid && p.serving() => stay(
                PROMOTING,
                format!("{what}: promoting {name} ({})", attempts.describe()),
                actions,
            )
            // Out of `-ro` before it can become writable: a promote Job that failed may
            // still have promoted it, and another target may be chosen after it.
            .with_actions((p.role != Some(Role::Demoted)).then_some(PgAction::Label {
                ordinal: t,
                role: Role::Demoted,
            }))
            .with_actions([PgAction::RunPromote {
                key,
                target: t,
                image: s.cluster.image.clone(),
                old_primary: (s.cause != SwitchCause::Failover).then_some(s.cluster.primary),
            }]),
            Some(p) if p.uid == s.target.uid => {
                retarget(s, o, below, what, format!("{name} is not Ready"), actions)
            }
            _ => retarget(s, o, below, what, format!("{name} was replaced"), actions),
        },
        JobStep::Running => stay(
            PROMOTING,
            format!(
                "{what}: promote Job {job_name} runs against {name} ({})",
                attempts.describe()
            ),
            actions,
        ),
        JobStep::Succeeded => elect(s, o, what, actions),
        JobStep::Backoff { failure, at, wait } => stay(
            PROMOTION_FAILED,
            format!(
                "{what}: promote Job {job_name} {failure} ({}); retrying at {}",
                attempts.describe(),
                retry_time(at)
            ),
            actions,
        )
        .degraded()
        .requeue(wait),
        JobStep::Retry { failure } | JobStep::Exhausted { failure } => Decision::go(
            PgState::SwitchingOver(Switchover {
                attempt: s.attempt.saturating_add(1),
                ..s.clone()
            }),
            PROMOTION_RETRIED,
            format!("{what}: promote Job {job_name} {failure}; trying again"),
        ),
    }
}

/// The target is promoted: move the primary label in one transition, every other pod
/// that may be a writable primary to `demoted` first (the old primary unconditionally
/// while it is the pod the switchover began with: a cache may not have seen its label
/// yet; a recreated one to `replica`), then the target to `primary`.
fn elect(s: &Switchover, o: &Observed, what: &str, actions: Vec<PgAction>) -> D {
    let cluster = &s.cluster;
    let old = cluster.primary;
    let t = s.target.ordinal;
    if !o.pods.contains_key(&old) {
        return stay(
            WAITING_FOR_OLD_PRIMARY,
            format!(
                "{what}: {} is promoted; waiting to see {} again before labelling it demoted and {} primary",
                o.pod_name(t),
                o.pod_name(old),
                o.pod_name(t)
            ),
            actions,
        );
    }
    let old_role = o
        .pods
        .get(&old)
        .map_or(Role::Replica, |p| old_primary_role(s, p));
    let mut moves = vec![PgAction::Label {
        ordinal: old,
        role: old_role,
    }];
    moves.extend(
        o.pods
            .iter()
            .filter(|(k, p)| **k != old && **k != t && p.role == Some(Role::Primary))
            .map(|(k, _)| PgAction::Label {
                ordinal: *k,
                role: Role::Demoted,
            }),
    );
    moves.push(PgAction::Label {
        ordinal: t,
        role: Role::Primary,
    });
    let elected = Topology {
        primary: t,
        ..cluster.clone()
    };
    let (to, reason, message) = match s.cause {
        SwitchCause::Upgrade => (
            PgState::Upgrading {
                cluster: elected,
                pod: None,
            },
            SWITCHOVER_COMPLETED,
            format!(
                "switchover: {} is primary; {} follows it and is upgraded next",
                o.pod_name(t),
                o.pod_name(old)
            ),
        ),
        SwitchCause::Scale => (
            PgState::Ready { cluster: elected },
            SWITCHOVER_COMPLETED,
            format!(
                "switchover: {} is primary; {} follows it",
                o.pod_name(t),
                o.pod_name(old)
            ),
        ),
        SwitchCause::Failover => (
            PgState::Ready { cluster: elected },
            FAILOVER_COMPLETED,
            format!(
                "failover: {} is primary in place of {}, which was not Ready for longer than failoverDelaySeconds; it rejoins as a standby",
                o.pod_name(t),
                o.pod_name(old)
            ),
        ),
    };
    Decision::go(to, reason, message).with_actions(moves)
}

fn primary_lost(spec: &PostgresClusterSpec, cluster: &Topology, world: &World<Observed>) -> D {
    let o = &world.observed;
    let actions = upkeep(
        spec,
        &cluster.image,
        cluster.replicas,
        Some(cluster.primary),
        o,
    );
    let name = o.pod_name(cluster.primary);
    if !primary_down(cluster, o) {
        return Decision::go(
            PgState::Ready {
                cluster: cluster.clone(),
            },
            PRIMARY_RECOVERED,
            format!("primary {name} is Ready again"),
        );
    }
    let delay = Duration::from_secs(u64::try_from(spec.failover_delay_seconds).unwrap_or(0));
    let down_for = world.in_state_for();
    if down_for < delay {
        return stay(
            AWAITING_FAILOVER,
            format!(
                "primary {name} is not Ready; a Ready replica is promoted if it stays so for failoverDelaySeconds={}",
                spec.failover_delay_seconds
            ),
            actions,
        )
        .degraded()
        .requeue(delay - down_for);
    }
    match choose_target(o, cluster, cluster.replicas, None) {
        Some(target) => {
            let message = format!(
                "primary {name} not Ready for {}s, longer than failoverDelaySeconds={}: failing over to {}",
                down_for.as_secs(),
                spec.failover_delay_seconds,
                o.pod_name(target.ordinal)
            );
            begin_switchover(
                cluster,
                target,
                SwitchCause::Failover,
                o,
                FAILOVER_STARTED,
                message,
            )
        }
        None => stay(
            NO_PROMOTION_TARGET,
            format!(
                "primary {name} is not Ready for longer than failoverDelaySeconds={}, and no replica is Ready to take over",
                spec.failover_delay_seconds
            ),
            actions,
        )
        .degraded(),
    }
}

fn backing_up(spec: &PostgresClusterSpec, cluster: &Topology, request: &str, o: &Observed) -> D {
    let back = PgState::Ready {
        cluster: cluster.clone(),
    };
    let actions = upkeep(
        spec,
        &cluster.image,
        cluster.replicas,
        Some(cluster.primary),
        o,
    );
    if primary_down(cluster, o) {
        return lose_primary(cluster, o);
    }
    let key = backup_key(request);
    let verdict = on_demand::step(on_demand::Facts {
        token: request,
        configured: spec.backup.is_some(),
        field: "spec.backup",
        job: o.job(&key).map(|j| (&j.outcome, j.name.as_str())),
    });
    on_demand::decision(
        verdict,
        || back,
        actions,
        |key| PgAction::RunBackup {
            key,
            kind: BackupKind::OnDemand,
        },
    )
}

fn begin_finalizing(spec: &PostgresClusterSpec, o: &Observed) -> D {
    finalize::begin(
        spec.backup.is_some(),
        o.requests.skip_final_backup,
        || PgState::Finalized,
        |attempt| PgState::Finalizing { attempt },
    )
}

fn finalizing(spec: &PostgresClusterSpec, attempt: u32, world: &World<Observed>) -> D {
    let o = &world.observed;
    let key = finalize::key(attempt);
    let verdict = finalize::step(finalize::Facts {
        configured: spec.backup.is_some(),
        skip: o.requests.skip_final_backup,
        attempt,
        job: o.job(&key).map(|j| &j.outcome),
        now: world.now,
    });
    finalize::decision(
        verdict,
        || PgState::Finalized,
        |attempt| PgState::Finalizing { attempt },
        |key| PgAction::RunBackup {
            key,
            kind: BackupKind::Final,
        },
    )
}
