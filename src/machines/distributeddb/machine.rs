//! The DistributedDB machine: a StatefulSet of database pods, upgraded one ordinal at a
//! time around hooks, backed up on a schedule and on demand, and backed up once more
//! before it goes away.
//!
//! ```text
//! stateDiagram-v2   (mermaid; the full edge list is machines/distributeddb.md)
//!     [*] --> Creating
//!     Creating --> Ready: AllReplicasReady
//!     Creating --> Upgrading: MixedImages
//!     Ready --> Scaling: ReplicasChanged
//!     Scaling --> Ready: ScalingComplete
//!     Ready --> Upgrading: ImageChanged
//!     Upgrading --> Upgrading: PreHookSucceeded, PodReplaced, PodUpgraded, HookRetried, ImageChanged, ...
//!     Upgrading --> Ready: UpgradeCompleted
//!     Ready --> BackingUp: BackupRequested
//!     BackingUp --> Ready: BackupSucceeded, BackupFailed, BackupCancelled
//!     Creating, Ready, Scaling, Upgrading, BackingUp --> Finalizing: DeletionRequested
//!     Creating, Ready, Scaling, Upgrading, BackingUp --> Finalized: NoBackupPolicy, FinalBackupSkipped
//!     Finalizing --> Finalizing: FinalBackupRetried
//!     Finalizing --> Finalized: FinalBackupSucceeded, FinalBackupSkipped
//! ```
//!
//! Within `Upgrading { ordinal, step }`, each pod goes through
//! `PreHook → Restart → PostHook`, highest ordinal first:
//!
//! ```text
//!  PreHook(k, uid)  pre-hook Job succeeds (or none is configured, or pod k is already down)
//!     │ PreHookSucceeded / PreHookSkipped
//!  Restart(k, uid)  the uid is persisted first; then pod k is deleted with a UID
//!     │             precondition, only while every other pod is Ready and the
//!     │             StatefulSet's template is at the target and seen by its controller
//!     │ PodReplaced (the recreated pod is Ready at the target image)
//!  PostHook(k, uid') post-hook Job succeeds
//!     │ PodUpgraded
//!  PreHook(j, …)    the next ordinal j < k   …   UpgradeCompleted → Ready(version = target)
//! ```
//!
//! The generated statechart (`machines/distributeddb.md`) lists every declared edge.
//!
//! # Guarantees
//! - **One pod down at a time, deliberately.** A pod is deleted only when every other
//!   pod is Ready, the StatefulSet holds the target image and its controller has seen
//!   it. A pod that is already down and needs replacing is replaced first; otherwise
//!   ordinals go strictly descending. (Before the cluster first served, Creating replaces
//!   pods at a superseded `spec.image` that it sees not Ready; through a stale cache
//!   such a pod may have just become Ready. Nothing has served yet, so this is allowed.)
//! - **Pods stay at the version.** At rest, a pod running another image (made from a
//!   template someone edited) is replaced through the same hooked protocol.
//! - **No pod is deleted twice.** The pod's UID is persisted in the state before it is
//!   deleted, and the delete carries it as a precondition: after a crash the delete is
//!   re-issued against the same UID and cannot hit the recreated pod. A pod already at
//!   the target image is never deleted.
//! - **Hooks are ordered and run once per attempt.** The pre-hook Job succeeds before
//!   the delete; the post-hook Job succeeds before the next pod is touched. Job names
//!   are derived from (hook, ordinal, target, pod UID, attempt), so a restart finds the
//!   same Job instead of starting another.
//! - **No image nobody asked for.** The StatefulSet's template follows the state's
//!   target, which changes only by a persisted `ImageChanged` edge taken when no pod is
//!   in flight; a pod recreated from a stale template is replaced again.
//! - **Quiet at rest.** Owned objects are re-applied only when the rendered object is not
//!   contained in the live one ([`crate::machines::common::subset`]), so an idle
//!   reconcile makes no request.
//! - **Backups.** S3 credentials only travel as secret references. The finalizer is held
//!   until a final backup succeeded or the user skipped it.
//!
//! # Assumptions
//! - The StatefulSet controller recreates deleted pods from the current template
//!   (`OnDelete`), and names them `<name>-<ordinal>`.
//! - Hook and backup images are idempotent enough to be retried as new attempts.
//! - A change of `replicas` during an upgrade waits for the upgrade to finish; a change
//!   of `image` during Scaling waits until it finishes. Creating follows `spec.image`
//!   directly (nothing has served yet): pods that never became Ready at an earlier image
//!   are replaced, and Ready ones are upgraded once creation finishes (`MixedImages`).
//!
//! # Errors
//! `decide` has no error path. A failing hook or backup is a Degraded stay naming the pod,
//! the hook and the Job's reason; a wait that only a human can end says which annotation
//! ends it ([`crate::machines::common::annotations`]). States have deadlines
//! ([`Machine::deadline`]) after which a silent stall is reported.

use std::collections::BTreeMap;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use strum::EnumDiscriminants;

use super::api::{DistributedDBSpec, Hook};
use crate::engine::{Decision, Edge, Machine, World};
use crate::machines::common::annotations::{self, RETRY_HOOK, SKIP_HOOK};
use crate::machines::common::backup::BackupKind;
use crate::machines::common::finalize;
use crate::machines::common::jobs::{JobOutcome, JobView, Purpose};
use crate::machines::common::meta::short_hash;
use crate::machines::common::on_demand;
use crate::machines::common::retry::{Attempts, JobStep, retry_time, run_once_step};

/// The DistributedDB machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DistributedDb;

/// The persisted state of a DistributedDB (`status.machine.state`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, EnumDiscriminants)]
#[strum_discriminants(
    name(DdbKind),
    vis(pub),
    derive(
        strum::IntoStaticStr,
        strum::EnumIter,
        strum::Display,
        Hash,
        JsonSchema
    ),
    doc = "The kind of a [`DdbState`]: its variant without data."
)]
#[serde(tag = "name", rename_all_fields = "camelCase")]
pub enum DdbState {
    /// The StatefulSet and Service are being created; the template follows `spec.image`.
    Creating,
    /// At rest: every pod Ready at `version`.
    Ready {
        /// The image every pod runs.
        version: String,
        /// The replicas the StatefulSet holds.
        replicas: i32,
    },
    /// Replicas are being added or removed.
    Scaling {
        /// The image every pod runs.
        version: String,
        /// The replicas before.
        from_replicas: i32,
        /// The replicas the StatefulSet now holds.
        replicas: i32,
    },
    /// Pods are being replaced one ordinal at a time.
    Upgrading(Upgrade),
    /// An on-demand backup runs.
    BackingUp {
        /// The image every pod runs.
        version: String,
        /// The replicas the StatefulSet holds.
        replicas: i32,
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

/// Progress of an upgrade.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Upgrade {
    /// The image the cluster ran when the upgrade began.
    pub from: String,
    /// The image pods are being moved to (the StatefulSet template holds it).
    pub to: String,
    /// The replicas the StatefulSet holds during the upgrade.
    pub replicas: i32,
    /// The pod being replaced.
    pub ordinal: i32,
    /// Where that pod is in its replacement.
    pub step: UpgradeStep,
    /// The UID of the pod the step is about: the pod to delete (PreHook, Restart) or its
    /// replacement (PostHook). Persisted before the delete so that the delete cannot hit
    /// the replacement.
    pub pod_uid: String,
    /// The hook attempt, from 1.
    pub attempt: u32,
    /// The attempt the current retry budget began with.
    pub round_start: u32,
    /// The last `retry-hook` token acted on (or present when the upgrade began).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_ack: Option<String>,
    /// The last `skip-hook` token acted on (or present when the upgrade began).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_ack: Option<String>,
}

impl Upgrade {
    /// A new upgrade from `from` to `to`, starting at pod `ordinal`'s pre-hook. The
    /// escape-hatch tokens already set are acknowledged, so only new ones act.
    fn begin(
        from: String,
        to: String,
        replicas: i32,
        ordinal: i32,
        pod_uid: String,
        requests: &Requests,
    ) -> Self {
        Upgrade {
            from,
            to,
            replicas,
            ordinal,
            step: UpgradeStep::PreHook,
            pod_uid,
            attempt: 1,
            round_start: 1,
            retry_ack: requests.retry_hook.clone(),
            skip_ack: requests.skip_hook.clone(),
        }
    }

    /// This upgrade moved on to pod `ordinal`: its pre-hook, with a fresh hook budget.
    fn at(&self, ordinal: i32, pod_uid: String) -> Self {
        Upgrade {
            ordinal,
            step: UpgradeStep::PreHook,
            pod_uid,
            attempt: 1,
            round_start: 1,
            ..self.clone()
        }
    }
}

/// The steps of one pod's replacement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema, strum::Display)]
pub enum UpgradeStep {
    /// Running the pre-hook.
    PreHook,
    /// Deleting the pod and waiting for its replacement to be Ready.
    Restart,
    /// Running the post-hook.
    PostHook,
}

/// The schema of a persisted [`DdbState`]: one object with the `name` discriminator and
/// every variant's fields (Kubernetes needs structural schemas, so the variants' fields
/// are hoisted into one object rather than a `oneOf`).
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)] // only its derived schema is used
struct StateSchema {
    /// The state's kind.
    name: DdbKind,
    /// Ready, Scaling, BackingUp: the image every pod runs.
    version: Option<String>,
    /// Ready, Scaling, BackingUp, Upgrading: the replicas the StatefulSet holds.
    replicas: Option<i32>,
    /// Scaling: the replicas before.
    from_replicas: Option<i32>,
    /// BackingUp: the `backup-now` token being served.
    request: Option<String>,
    /// Upgrading: the hook attempt. Finalizing: the final backup attempt.
    attempt: Option<u32>,
    /// Upgrading: the image the cluster ran when the upgrade began.
    from: Option<String>,
    /// Upgrading: the image pods are being moved to.
    to: Option<String>,
    /// Upgrading: the pod being replaced.
    ordinal: Option<i32>,
    /// Upgrading: where that pod is in its replacement.
    step: Option<UpgradeStep>,
    /// Upgrading: the UID of the pod the step is about.
    pod_uid: Option<String>,
    /// Upgrading: the attempt the current retry budget began with.
    round_start: Option<u32>,
    /// Upgrading: the last `retry-hook` token acted on.
    retry_ack: Option<String>,
    /// Upgrading: the last `skip-hook` token acted on.
    skip_ack: Option<String>,
}

impl JsonSchema for DdbState {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "DdbState".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        StateSchema::json_schema(generator)
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

    /// Edge: every replica is Ready at the image.
    pub const ALL_REPLICAS_READY: &str = "AllReplicasReady";
    /// Edge: `spec.image` changed (Ready starts an upgrade; an upgrade retargets).
    pub const IMAGE_CHANGED: &str = "ImageChanged";
    /// Edge: creation finished with pods at more than one image; they are upgraded.
    pub const MIXED_IMAGES: &str = "MixedImages";
    /// Edge: `spec.image` is what every pod already runs.
    pub const VERSION_ADOPTED: &str = "VersionAdopted";
    /// Edge: at rest, a pod runs an image other than the version; it is replaced.
    pub const STRAY_IMAGE: &str = "StrayImage";
    /// Edge: `spec.replicas` changed.
    pub const REPLICAS_CHANGED: &str = "ReplicasChanged";
    /// Edge: every wanted replica exists and is Ready, and no other does.
    pub const SCALING_COMPLETE: &str = "ScalingComplete";
    /// Edge: the pre-hook Job succeeded.
    pub const PRE_HOOK_SUCCEEDED: &str = "PreHookSucceeded";
    /// Edge: no pre-hook runs (none configured, or the pod is already down).
    pub const PRE_HOOK_SKIPPED: &str = "PreHookSkipped";
    /// Edge: a failed hook is tried again after its backoff.
    pub const HOOK_RETRIED: &str = "HookRetried";
    /// Edge: the user asked (`retry-hook`) to run a hook that exhausted its retries again.
    pub const HOOK_RETRY_REQUESTED: &str = "HookRetryRequested";
    /// Edge: the user asked (`skip-hook`) to go on without a hook that exhausted its
    /// retries.
    pub const HOOK_SKIPPED: &str = "HookSkipped";
    /// Edge: the deleted pod's replacement is Ready at the target image.
    pub const POD_REPLACED: &str = "PodReplaced";
    /// Edge: the replacement came up at a stale image; it is replaced again (from its
    /// pre-hook: it may be serving).
    pub const RECREATED_AT_STALE_IMAGE: &str = "RecreatedAtStaleImage";
    /// Edge: the upgraded pod restarted before its post-hook finished; the post-hook runs
    /// for the new pod.
    pub const POD_RESTARTED: &str = "PodRestarted";
    /// Edge: the pod was upgraded and its post-hook succeeded; on to the next pod.
    pub const POD_UPGRADED: &str = "PodUpgraded";
    /// Edge: the next pod is chosen again: the step's pod was replaced by someone else, or
    /// it was chosen because it was down and is Ready again.
    pub const REPLANNED: &str = "Replanned";
    /// Edge: every pod is Ready at the target image.
    pub const UPGRADE_COMPLETED: &str = "UpgradeCompleted";

    /// Stay: at rest.
    pub const SERVING: &str = "Serving";
    /// Stay: restoring owned objects to what the state wants.
    pub const RESTORING: &str = "Restoring";
    /// Stay: at rest, but some pods are not Ready (`status.readyReplicas` shows it).
    pub const PODS_NOT_READY: &str = "PodsNotReady";
    /// Stay: waiting for pods (to exist, to be Ready).
    pub const WAITING_FOR_PODS: &str = "WaitingForPods";
    /// Stay: an upgrade waits to begin (pods not Ready).
    pub const UPGRADE_PENDING: &str = "UpgradePending";
    /// Stay: a hook Job runs.
    pub const HOOK_RUNNING: &str = "HookRunning";
    /// Stay (Degraded): a hook failed.
    pub const HOOK_FAILED: &str = "HookFailed";
    /// Stay: the pod is being deleted and recreated.
    pub const REPLACING_POD: &str = "ReplacingPod";
}

use reason::*;

/// Both hooks, for messages and Job keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr)]
#[strum(serialize_all = "lowercase")]
pub enum HookPhase {
    /// Before the pod is deleted.
    Pre,
    /// After its replacement is Ready.
    Post,
}

impl HookPhase {
    /// `pre-upgrade hook` / `post-upgrade hook`.
    pub fn describe(self) -> &'static str {
        match self {
            HookPhase::Pre => "pre-upgrade hook",
            HookPhase::Post => "post-upgrade hook",
        }
    }

    /// The hook's spec, if configured.
    pub fn of(self, spec: &DistributedDBSpec) -> Option<&Hook> {
        let upgrade = spec.upgrade.as_ref()?;
        match self {
            HookPhase::Pre => upgrade.pre_hook.as_ref(),
            HookPhase::Post => upgrade.post_hook.as_ref(),
        }
    }
}

/// What the StatefulSet should hold in a state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shape {
    /// The pod template's image.
    pub image: String,
    /// `spec.replicas`.
    pub replicas: i32,
    /// The volume claim template's size. Claim templates are immutable, so this is the
    /// live StatefulSet's when there is one; growth is applied to the claims directly.
    pub claim_size: String,
}

/// A side effect of the DistributedDB machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DdbAction {
    /// Apply the headless Service.
    EnsureService,
    /// Apply the StatefulSet in this shape.
    EnsureStatefulSet(Shape),
    /// Delete pod `ordinal` if it still has `uid`.
    DeletePod {
        /// The ordinal.
        ordinal: i32,
        /// The UID precondition.
        uid: String,
    },
    /// Create a hook Job (if absent).
    RunHook {
        /// Pre or post.
        phase: HookPhase,
        /// The pod it is about.
        ordinal: i32,
        /// The Job's key.
        key: String,
        /// The image the cluster is upgraded from.
        from: String,
        /// The image it is upgraded to (the hook's default image).
        to: String,
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
    /// Grow pod `ordinal`'s volume claim to `size`.
    ExpandVolume {
        /// The ordinal.
        ordinal: i32,
        /// The new size.
        size: String,
    },
    /// Delete a finished Job (hook Jobs are pruned once the cluster is at rest).
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
    /// The live object contains what Lockstep renders for the live object's own image,
    /// replicas and claim size: nothing else drifted. (Whether image and replicas are
    /// what the state wants is [`StatefulSetView::holds`].)
    pub conforms: bool,
    /// The template's database image.
    pub image: Option<String>,
    /// `spec.replicas`.
    pub replicas: i32,
    /// `status.observedGeneration` has reached `metadata.generation`: the StatefulSet
    /// controller acts on the current template.
    pub caught_up: bool,
    /// The volume claim template's requested size.
    pub claim_size: Option<String>,
}

impl StatefulSetView {
    /// Whether the live StatefulSet is exactly what Lockstep renders for `shape`.
    pub fn holds(&self, shape: &Shape) -> bool {
        self.conforms
            && self.image.as_deref() == Some(shape.image.as_str())
            && self.replicas == shape.replicas
    }

    /// Whether the controller already acts on a template holding `image`.
    pub fn serves(&self, image: &str) -> bool {
        self.conforms && self.caught_up && self.image.as_deref() == Some(image)
    }
}

/// A database pod as observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodView {
    /// Its UID.
    pub uid: String,
    /// The database container's image.
    pub image: Option<String>,
    /// The Ready condition holds.
    pub ready: bool,
    /// It has a deletion timestamp.
    pub terminating: bool,
}

pub use crate::machines::common::observe::CronJobView;

/// A pod's volume claim as observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeView {
    /// `spec.resources.requests.storage`.
    pub requested: Option<String>,
}

/// What the user asked for through annotations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Requests {
    /// [`annotations::BACKUP_NOW`].
    pub backup_now: Option<String>,
    /// [`annotations::SKIP_FINAL_BACKUP`].
    pub skip_final_backup: bool,
    /// [`annotations::RETRY_HOOK`].
    pub retry_hook: Option<String>,
    /// [`annotations::SKIP_HOOK`].
    pub skip_hook: Option<String>,
}

impl Requests {
    /// Read the requests from an object's annotations.
    pub fn from_annotations(a: &BTreeMap<String, String>) -> Self {
        Requests {
            backup_now: annotations::token(a, annotations::BACKUP_NOW),
            skip_final_backup: annotations::flag(a, annotations::SKIP_FINAL_BACKUP),
            retry_hook: annotations::token(a, RETRY_HOOK),
            skip_hook: annotations::token(a, SKIP_HOOK),
        }
    }
}

/// Everything the machine sees of the world.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    /// The custom resource's name (pods are `<name>-<ordinal>`).
    pub name: String,
    /// The headless Service rendered for the spec is contained in the live one.
    pub service_in_sync: bool,
    /// The StatefulSet, if it exists.
    pub statefulset: Option<StatefulSetView>,
    /// Database pods by ordinal.
    pub pods: BTreeMap<i32, PodView>,
    /// Owned Jobs (hooks, backups).
    pub jobs: Vec<JobView>,
    /// The scheduled-backup CronJob, if it exists.
    pub cronjob: Option<CronJobView>,
    /// Volume claims by ordinal.
    pub volumes: BTreeMap<i32, VolumeView>,
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
}

/// The key of the hook Job for `phase` of pod `ordinal` (with `pod_uid`) moving to `to`.
pub fn hook_key(phase: HookPhase, ordinal: i32, to: &str, pod_uid: &str, attempt: u32) -> String {
    let phase: &str = phase.into();
    format!("{phase}-{ordinal}-{}-{attempt}", short_hash(&[to, pod_uid]))
}

pub use crate::machines::common::on_demand::key as backup_key;

/// What the StatefulSet should hold in `state` (`None` while deleting: nothing is
/// created or restored then). `live_claim` is the live claim template's size.
pub fn shape(
    spec: &DistributedDBSpec,
    state: &DdbState,
    live_claim: Option<&str>,
) -> Option<Shape> {
    let (image, replicas) = match state {
        DdbState::Creating => (spec.image.clone(), spec.replicas),
        DdbState::Ready { version, replicas }
        | DdbState::Scaling {
            version, replicas, ..
        }
        | DdbState::BackingUp {
            version, replicas, ..
        } => (version.clone(), *replicas),
        DdbState::Upgrading(u) => (u.to.clone(), u.replicas),
        DdbState::Finalizing { .. } | DdbState::Finalized => return None,
    };
    Some(Shape {
        image,
        replicas,
        claim_size: live_claim.unwrap_or(&spec.storage.size).to_owned(),
    })
}

type D = Decision<DdbState, DdbAction>;

/// The next pod an upgrade to `to` replaces.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Next {
    /// This pod.
    Pod { ordinal: i32, uid: String },
    /// Every pod is Ready at `to`.
    Done,
    /// Not now: why.
    Wait(String),
}

fn next_pod(o: &Observed, replicas: i32, to: &str) -> Next {
    let (mut missing, mut down, mut needing) = (Vec::new(), Vec::new(), Vec::new());
    for k in 0..replicas {
        match o.pods.get(&k) {
            Some(p) if !p.terminating => {
                if !p.ready {
                    down.push(k);
                }
                if p.image.as_deref() != Some(to) {
                    needing.push(k);
                }
            }
            _ => missing.push(k),
        }
    }
    if !missing.is_empty() {
        return Next::Wait(format!(
            "waiting for pod {} to be (re)created",
            o.pod_names(&missing)
        ));
    }
    let pick = match (down.as_slice(), needing.iter().max()) {
        (_, None) if down.is_empty() => return Next::Done,
        ([], Some(highest)) => *highest,
        // A pod that is already down and needs replacing goes first: replacing it takes
        // nothing else down.
        ([k], _) if needing.contains(k) => *k,
        _ => {
            return Next::Wait(format!(
                "waiting for pod {} to become Ready",
                o.pod_names(&down)
            ));
        }
    };
    match o.pods.get(&pick) {
        Some(p) => Next::Pod {
            ordinal: pick,
            uid: p.uid.clone(),
        },
        None => Next::Wait(format!("waiting for pod {}", o.pod_name(pick))),
    }
}

/// Why pod `k` may not be taken down now, if it may not.
fn hold_before_delete(o: &Observed, k: i32, replicas: i32, to: &str) -> Option<String> {
    let others_down: Vec<i32> = (0..replicas)
        .filter(|j| *j != k)
        .filter(|j| !o.pods.get(j).is_some_and(|p| p.ready && !p.terminating))
        .collect();
    if !others_down.is_empty() {
        return Some(format!(
            "waiting for pod {} to be Ready before taking {} down",
            o.pod_names(&others_down),
            o.pod_name(k)
        ));
    }
    match &o.statefulset {
        Some(s) if s.serves(to) => None,
        _ => Some(format!(
            "waiting for the StatefulSet template to hold {to} before taking {} down",
            o.pod_name(k)
        )),
    }
}

/// Owned objects to restore in a state whose StatefulSet has `shape`.
fn upkeep(spec: &DistributedDBSpec, shape: &Shape, o: &Observed) -> Vec<DdbAction> {
    let mut actions = Vec::new();
    if !o.service_in_sync {
        actions.push(DdbAction::EnsureService);
    }
    if !o.statefulset.as_ref().is_some_and(|s| s.holds(shape)) {
        actions.push(DdbAction::EnsureStatefulSet(shape.clone()));
    }
    match (&spec.backup_policy, &o.cronjob) {
        (Some(_), Some(c)) if c.in_sync => {}
        (Some(_), _) => actions.push(DdbAction::EnsureCronJob),
        (None, Some(c)) => actions.push(DdbAction::DeleteCronJob { uid: c.uid.clone() }),
        (None, None) => {}
    }
    actions
}

/// A stay that restores owned objects, named `reason` unless it only restores.
fn stay(reason: &'static str, message: impl Into<String>, upkeep: Vec<DdbAction>) -> D {
    Decision::stay(reason, message).with_actions(upkeep)
}

fn claim(o: &Observed) -> Option<&str> {
    o.statefulset.as_ref().and_then(|s| s.claim_size.as_deref())
}

impl Machine for DistributedDb {
    const NAME: &'static str = "distributeddb";

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
            return match state {
                DdbState::Finalizing { attempt } => finalizing(spec, *attempt, world),
                DdbState::Finalized => Decision::stay(FINALIZED, "finalizer released"),
                _ => begin_finalizing(spec, &world.observed),
            };
        }
        let o = &world.observed;
        match state {
            DdbState::Creating => creating(spec, o),
            DdbState::Ready { version, replicas } => ready(spec, version, *replicas, o),
            DdbState::Scaling {
                version,
                from_replicas,
                replicas,
            } => scaling(spec, version, *from_replicas, *replicas, o),
            DdbState::Upgrading(u) => upgrading(spec, u, world),
            DdbState::BackingUp {
                version,
                replicas,
                request,
            } => backing_up(spec, version, *replicas, request, o),
            DdbState::Finalizing { .. } | DdbState::Finalized => {
                Decision::stay(FINALIZED, "waiting for the object to be deleted")
            }
        }
    }

    fn is_ready(state: &DdbState) -> bool {
        matches!(state, DdbState::Ready { .. } | DdbState::BackingUp { .. })
    }

    fn deadline(state: &DdbState) -> Option<Duration> {
        const MINUTE: u64 = 60;
        let minutes = match state {
            DdbState::Creating | DdbState::Scaling { .. } => 15,
            DdbState::Upgrading(u) => match u.step {
                UpgradeStep::Restart => 15,
                UpgradeStep::PreHook | UpgradeStep::PostHook => 60,
            },
            DdbState::BackingUp { .. } => 6 * 60,
            DdbState::Finalizing { .. } => 60,
            DdbState::Ready { .. } | DdbState::Finalized => return None,
        };
        Some(Duration::from_secs(minutes * MINUTE))
    }

    fn finalized(state: &DdbState) -> bool {
        matches!(state, DdbState::Finalized)
    }

    fn step_label(state: &DdbState) -> Option<String> {
        match state {
            DdbState::Scaling {
                from_replicas,
                replicas,
                ..
            } => Some(format!("{from_replicas}->{replicas}")),
            DdbState::Upgrading(u) if u.attempt > 1 => {
                Some(format!("{}/{}#{}", u.ordinal, u.step, u.attempt))
            }
            DdbState::Upgrading(u) => Some(format!("{}/{}", u.ordinal, u.step)),
            DdbState::Finalizing { attempt } => Some(format!("FinalBackup#{attempt}")),
            _ => None,
        }
    }
}

use DdbKind as K;

/// The declared transition table.
pub static TABLE: &[Edge<DdbKind>] = &[
    Edge::new(
        K::Creating,
        K::Ready,
        ALL_REPLICAS_READY,
        "every replica is Ready at spec.image",
    ),
    Edge::new(
        K::Creating,
        K::Upgrading,
        MIXED_IMAGES,
        "every replica is Ready but some run an earlier spec.image",
    ),
    Edge::new(
        K::Ready,
        K::Scaling,
        REPLICAS_CHANGED,
        "spec.replicas differs from the replicas at rest",
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
        "exactly spec.replicas pods exist and all are Ready",
    ),
    Edge::new(
        K::Ready,
        K::Upgrading,
        IMAGE_CHANGED,
        "spec.image differs from status.version and a pod can be taken down",
    ),
    Edge::new(
        K::Ready,
        K::Upgrading,
        STRAY_IMAGE,
        "a pod runs an image other than the version (its template was edited); it is replaced with hooks",
    ),
    Edge::new(
        K::Ready,
        K::Ready,
        VERSION_ADOPTED,
        "spec.image changed to what every pod already runs",
    ),
    Edge::new(
        K::Upgrading,
        K::Upgrading,
        PRE_HOOK_SUCCEEDED,
        "the pod's pre-hook Job succeeded",
    ),
    Edge::new(
        K::Upgrading,
        K::Upgrading,
        PRE_HOOK_SKIPPED,
        "no pre-hook is configured, or the pod is already down",
    ),
    Edge::new(
        K::Upgrading,
        K::Upgrading,
        HOOK_RETRIED,
        "a failed hook's backoff is over and its retry budget is not spent",
    ),
    Edge::new(
        K::Upgrading,
        K::Upgrading,
        HOOK_RETRY_REQUESTED,
        "a hook exhausted its retries and lockstep.dev/retry-hook has a new token",
    ),
    Edge::new(
        K::Upgrading,
        K::Upgrading,
        HOOK_SKIPPED,
        "a hook exhausted its retries and lockstep.dev/skip-hook has a new token",
    ),
    Edge::new(
        K::Upgrading,
        K::Upgrading,
        POD_REPLACED,
        "the deleted pod's replacement is Ready at the target image",
    ),
    Edge::new(
        K::Upgrading,
        K::Upgrading,
        RECREATED_AT_STALE_IMAGE,
        "the replacement came up at an image other than the target",
    ),
    Edge::new(
        K::Upgrading,
        K::Upgrading,
        POD_RESTARTED,
        "the upgraded pod was recreated before its post-hook finished",
    ),
    Edge::new(
        K::Upgrading,
        K::Upgrading,
        POD_UPGRADED,
        "the pod's post-hook succeeded; the next pod is taken",
    ),
    Edge::new(
        K::Upgrading,
        K::Upgrading,
        REPLANNED,
        "the pod the step was about was replaced by someone else",
    ),
    Edge::new(
        K::Upgrading,
        K::Upgrading,
        IMAGE_CHANGED,
        "spec.image changed mid-upgrade while no pod was in flight: retarget",
    ),
    Edge::new(
        K::Upgrading,
        K::Ready,
        UPGRADE_COMPLETED,
        "every pod is Ready at the target image",
    ),
    Edge::new(
        K::Upgrading,
        K::Ready,
        HOOK_SKIPPED,
        "the last pod's post-hook exhausted its retries and lockstep.dev/skip-hook has a new token",
    ),
    Edge::new(
        K::Upgrading,
        K::Ready,
        VERSION_ADOPTED,
        "spec.image changed mid-upgrade to what every pod already runs",
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
        "backupPolicy was removed before the backup Job was created",
    ),
    Edge::new(
        K::Creating,
        K::Finalizing,
        DELETION_REQUESTED,
        "deleted; a final backup is taken",
    ),
    Edge::new(
        K::Ready,
        K::Finalizing,
        DELETION_REQUESTED,
        "deleted; a final backup is taken",
    ),
    Edge::new(
        K::Scaling,
        K::Finalizing,
        DELETION_REQUESTED,
        "deleted; a final backup is taken",
    ),
    Edge::new(
        K::Upgrading,
        K::Finalizing,
        DELETION_REQUESTED,
        "deleted; a final backup is taken",
    ),
    Edge::new(
        K::BackingUp,
        K::Finalizing,
        DELETION_REQUESTED,
        "deleted; a final backup is taken",
    ),
    Edge::new(
        K::Creating,
        K::Finalized,
        NO_BACKUP_POLICY,
        "deleted without a backupPolicy",
    ),
    Edge::new(
        K::Ready,
        K::Finalized,
        NO_BACKUP_POLICY,
        "deleted without a backupPolicy",
    ),
    Edge::new(
        K::Scaling,
        K::Finalized,
        NO_BACKUP_POLICY,
        "deleted without a backupPolicy",
    ),
    Edge::new(
        K::Upgrading,
        K::Finalized,
        NO_BACKUP_POLICY,
        "deleted without a backupPolicy",
    ),
    Edge::new(
        K::BackingUp,
        K::Finalized,
        NO_BACKUP_POLICY,
        "deleted without a backupPolicy",
    ),
    Edge::new(
        K::Creating,
        K::Finalized,
        FINAL_BACKUP_SKIPPED,
        "deleted with lockstep.dev/skip-final-backup=true",
    ),
    Edge::new(
        K::Ready,
        K::Finalized,
        FINAL_BACKUP_SKIPPED,
        "deleted with lockstep.dev/skip-final-backup=true",
    ),
    Edge::new(
        K::Scaling,
        K::Finalized,
        FINAL_BACKUP_SKIPPED,
        "deleted with lockstep.dev/skip-final-backup=true",
    ),
    Edge::new(
        K::Upgrading,
        K::Finalized,
        FINAL_BACKUP_SKIPPED,
        "deleted with lockstep.dev/skip-final-backup=true",
    ),
    Edge::new(
        K::BackingUp,
        K::Finalized,
        FINAL_BACKUP_SKIPPED,
        "deleted with lockstep.dev/skip-final-backup=true",
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
        "backupPolicy was removed while finalizing",
    ),
];

fn creating(spec: &DistributedDBSpec, o: &Observed) -> D {
    let replicas = spec.replicas;
    let shape = Shape {
        image: spec.image.clone(),
        replicas,
        claim_size: claim(o).unwrap_or(&spec.storage.size).to_owned(),
    };
    let mut actions = upkeep(spec, &shape, o);
    let template_current = o
        .statefulset
        .as_ref()
        .is_some_and(|s| s.serves(&spec.image));
    // Pods at an earlier spec.image that never became Ready have never served: replace
    // them now rather than upgrade them later.
    if template_current {
        actions.extend(
            o.pods
                .iter()
                .filter(|(k, p)| {
                    **k < replicas
                        && !p.terminating
                        && !p.ready
                        && p.image.as_deref() != Some(&spec.image)
                })
                .map(|(k, p)| DdbAction::DeletePod {
                    ordinal: *k,
                    uid: p.uid.clone(),
                }),
        );
    }
    let ready = (0..replicas)
        .filter(|k| o.pods.get(k).is_some_and(|p| p.ready && !p.terminating))
        .count();
    let extra = o.pods.keys().any(|k| *k >= replicas);
    if ready == usize::try_from(replicas).unwrap_or(0) && !extra && actions.is_empty() {
        return match next_pod(o, replicas, &spec.image) {
            Next::Done => Decision::go(
                DdbState::Ready {
                    version: spec.image.clone(),
                    replicas,
                },
                ALL_REPLICAS_READY,
                format!("all {replicas} pods Ready at {}", spec.image),
            ),
            Next::Pod { ordinal, uid } => {
                let from = o
                    .pods
                    .get(&ordinal)
                    .and_then(|p| p.image.clone())
                    .unwrap_or_default();
                Decision::go(
                    DdbState::Upgrading(Upgrade::begin(
                        from,
                        spec.image.clone(),
                        replicas,
                        ordinal,
                        uid,
                        &o.requests,
                    )),
                    MIXED_IMAGES,
                    format!(
                        "all {replicas} pods Ready, but {} runs an earlier image; upgrading it to {}",
                        o.pod_name(ordinal),
                        spec.image
                    ),
                )
            }
            Next::Wait(why) => stay(WAITING_FOR_PODS, why, actions),
        };
    }
    stay(
        WAITING_FOR_PODS,
        format!("{ready}/{replicas} pods Ready at {}", spec.image),
        actions,
    )
}

fn ready(spec: &DistributedDBSpec, version: &str, replicas: i32, o: &Observed) -> D {
    let shape = Shape {
        image: version.to_owned(),
        replicas,
        claim_size: claim(o).unwrap_or(&spec.storage.size).to_owned(),
    };
    let mut actions = upkeep(spec, &shape, o);
    if spec.replicas != replicas {
        return Decision::go(
            DdbState::Scaling {
                version: version.to_owned(),
                from_replicas: replicas,
                replicas: spec.replicas,
            },
            REPLICAS_CHANGED,
            format!("scaling from {replicas} to {} replicas", spec.replicas),
        );
    }
    if spec.image != version {
        return match next_pod(o, replicas, &spec.image) {
            Next::Pod { ordinal, uid } => Decision::go(
                DdbState::Upgrading(Upgrade::begin(
                    version.to_owned(),
                    spec.image.clone(),
                    replicas,
                    ordinal,
                    uid,
                    &o.requests,
                )),
                IMAGE_CHANGED,
                format!(
                    "upgrading from {version} to {}, starting with {}",
                    spec.image,
                    o.pod_name(ordinal)
                ),
            ),
            Next::Done => Decision::go(
                DdbState::Ready {
                    version: spec.image.clone(),
                    replicas,
                },
                VERSION_ADOPTED,
                format!("every pod already runs {}", spec.image),
            ),
            Next::Wait(why) => stay(
                UPGRADE_PENDING,
                format!("upgrade to {} pending: {why}", spec.image),
                actions,
            ),
        };
    }
    // A pod at an image other than the version (made from a template someone edited, say)
    // is replaced the way an upgrade replaces pods: one at a time, with its hooks, once the
    // template holds the version again.
    let stray = (0..replicas).find(|k| {
        o.pods
            .get(k)
            .is_some_and(|p| !p.terminating && p.image.as_deref() != Some(version))
    });
    if let Some(stray) = stray
        && actions.is_empty()
        && let Next::Pod { ordinal, uid } = next_pod(o, replicas, version)
    {
        let image = o
            .pods
            .get(&stray)
            .and_then(|p| p.image.clone())
            .unwrap_or_default();
        return Decision::go(
            DdbState::Upgrading(Upgrade::begin(
                version.to_owned(),
                version.to_owned(),
                replicas,
                ordinal,
                uid,
                &o.requests,
            )),
            STRAY_IMAGE,
            format!(
                "{} runs {image}, not {version}; replacing it",
                o.pod_name(stray)
            ),
        );
    }
    let mut ignored = None;
    match on_demand::request(
        o.requests.backup_now.as_deref(),
        |key| o.job(key).is_some(),
        spec.backup_policy.is_some(),
    ) {
        on_demand::Request::Idle => {}
        on_demand::Request::Start { token, message } => {
            return Decision::go(
                DdbState::BackingUp {
                    version: version.to_owned(),
                    replicas,
                    request: token,
                },
                BACKUP_REQUESTED,
                message,
            );
        }
        // Reported Degraded below (once every pod is Ready), until the annotation goes.
        on_demand::Request::NotConfigured { token } => {
            ignored = Some(format!(
                "{}={token} is ignored: spec.backupPolicy is not set",
                annotations::BACKUP_NOW
            ));
        }
    }
    // At rest: grow volume claims that are smaller than spec.storage.size, and prune
    // the hook Jobs of finished upgrades.
    actions.extend(o.volumes.iter().filter_map(|(k, v)| {
        let smaller = v.requested.as_deref().is_some_and(|r| {
            crate::machines::common::quantity::compare(r, &spec.storage.size)
                == Some(std::cmp::Ordering::Less)
        });
        (*k < replicas && smaller).then(|| DdbAction::ExpandVolume {
            ordinal: *k,
            size: spec.storage.size.clone(),
        })
    }));
    actions.extend(
        o.jobs
            .iter()
            .filter(|j| j.purpose == Some(Purpose::Hook) && j.outcome != JobOutcome::Running)
            .map(|j| DdbAction::DeleteJob {
                name: j.name.clone(),
                uid: j.uid.clone(),
            }),
    );
    let not_ready: Vec<i32> = (0..replicas)
        .filter(|k| !o.pods.get(k).is_some_and(|p| p.ready && !p.terminating))
        .collect();
    if !not_ready.is_empty() {
        // A replica down at rest is degraded capacity: Ready turns False and Degraded
        // names the pods, until they are back (one status write each way).
        return stay(
            PODS_NOT_READY,
            format!("pod {} not Ready", o.pod_names(&not_ready)),
            actions,
        )
        .degraded();
    }
    if let Some(message) = ignored {
        // The user asked for something that cannot happen: say so where they look.
        return stay(BACKUP_NOT_CONFIGURED, message, actions).degraded();
    }
    let reason = if actions.is_empty() {
        SERVING
    } else {
        RESTORING
    };
    stay(
        reason,
        format!("all {replicas} pods Ready at {version}"),
        actions,
    )
}

fn scaling(
    spec: &DistributedDBSpec,
    version: &str,
    from_replicas: i32,
    replicas: i32,
    o: &Observed,
) -> D {
    if spec.replicas != replicas {
        return Decision::go(
            DdbState::Scaling {
                version: version.to_owned(),
                from_replicas,
                replicas: spec.replicas,
            },
            REPLICAS_CHANGED,
            format!(
                "scaling to {} replicas instead of {replicas}",
                spec.replicas
            ),
        );
    }
    let shape = Shape {
        image: version.to_owned(),
        replicas,
        claim_size: claim(o).unwrap_or(&spec.storage.size).to_owned(),
    };
    let actions = upkeep(spec, &shape, o);
    let ready = (0..replicas)
        .filter(|k| o.pods.get(k).is_some_and(|p| p.ready && !p.terminating))
        .count();
    let extra: Vec<i32> = o.pods.keys().copied().filter(|k| *k >= replicas).collect();
    let settled = o.statefulset.as_ref().is_some_and(|s| s.holds(&shape));
    if actions.is_empty()
        && settled
        && extra.is_empty()
        && ready == usize::try_from(replicas).unwrap_or(0)
    {
        return Decision::go(
            DdbState::Ready {
                version: version.to_owned(),
                replicas,
            },
            SCALING_COMPLETE,
            format!("{replicas} pods Ready at {version}"),
        );
    }
    let mut message = format!("{ready}/{replicas} pods Ready");
    if !extra.is_empty() {
        message.push_str(&format!("; waiting for pod {} to go", o.pod_names(&extra)));
    }
    stay(WAITING_FOR_PODS, message, actions)
}

fn backing_up(
    spec: &DistributedDBSpec,
    version: &str,
    replicas: i32,
    request: &str,
    o: &Observed,
) -> D {
    let back = DdbState::Ready {
        version: version.to_owned(),
        replicas,
    };
    let shape = Shape {
        image: version.to_owned(),
        replicas,
        claim_size: claim(o).unwrap_or(&spec.storage.size).to_owned(),
    };
    let actions = upkeep(spec, &shape, o);
    let key = backup_key(request);
    let verdict = on_demand::step(on_demand::Facts {
        token: request,
        configured: spec.backup_policy.is_some(),
        field: "backupPolicy",
        job: o.job(&key).map(|j| (&j.outcome, j.name.as_str())),
    });
    on_demand::decision(
        verdict,
        || back,
        actions,
        |key| DdbAction::RunBackup {
            key,
            kind: BackupKind::OnDemand,
        },
    )
}

fn begin_finalizing(spec: &DistributedDBSpec, o: &Observed) -> D {
    finalize::begin(
        spec.backup_policy.is_some(),
        o.requests.skip_final_backup,
        || DdbState::Finalized,
        |attempt| DdbState::Finalizing { attempt },
    )
}

fn finalizing(spec: &DistributedDBSpec, attempt: u32, world: &World<Observed>) -> D {
    let o = &world.observed;
    let key = finalize::key(attempt);
    let verdict = finalize::step_named(
        finalize::Facts {
            configured: spec.backup_policy.is_some(),
            skip: o.requests.skip_final_backup,
            attempt,
            job: o.job(&key).map(|j| &j.outcome),
            now: world.now,
        },
        o.job(&key).map(|j| j.name.as_str()),
    );
    finalize::decision(
        verdict,
        || DdbState::Finalized,
        |attempt| DdbState::Finalizing { attempt },
        |key| DdbAction::RunBackup {
            key,
            kind: BackupKind::Final,
        },
    )
}

fn upgrading(spec: &DistributedDBSpec, u: &Upgrade, world: &World<Observed>) -> D {
    let o = &world.observed;
    let shape = Shape {
        image: u.to.clone(),
        replicas: u.replicas,
        claim_size: claim(o).unwrap_or(&spec.storage.size).to_owned(),
    };
    let actions = upkeep(spec, &shape, o);
    if spec.image != u.to && !in_flight(u, o) {
        return retarget(spec, u, o, actions);
    }
    match u.step {
        UpgradeStep::PreHook => pre_hook(spec, u, world, actions),
        UpgradeStep::Restart => restart(u, o, actions),
        UpgradeStep::PostHook => post_hook(spec, u, world, actions),
    }
}

/// Whether the step's pod was deleted and has no replacement yet: the only moment a
/// retarget must wait (the StatefulSet would recreate it from a template in flux).
fn in_flight(u: &Upgrade, o: &Observed) -> bool {
    u.step == UpgradeStep::Restart
        && match o.pods.get(&u.ordinal) {
            None => true,
            Some(p) => p.uid == u.pod_uid && p.terminating,
        }
}

fn retarget(spec: &DistributedDBSpec, u: &Upgrade, o: &Observed, actions: Vec<DdbAction>) -> D {
    match next_pod(o, u.replicas, &spec.image) {
        Next::Pod { ordinal, uid } => Decision::go(
            DdbState::Upgrading(Upgrade {
                to: spec.image.clone(),
                ..u.at(ordinal, uid)
            }),
            IMAGE_CHANGED,
            format!(
                "spec.image changed from {} to {} mid-upgrade; continuing with {}",
                u.to,
                spec.image,
                o.pod_name(ordinal)
            ),
        ),
        Next::Done => Decision::go(
            DdbState::Ready {
                version: spec.image.clone(),
                replicas: u.replicas,
            },
            VERSION_ADOPTED,
            format!("every pod already runs {}", spec.image),
        ),
        Next::Wait(why) => stay(
            WAITING_FOR_PODS,
            format!("retarget to {} pending: {why}", spec.image),
            actions,
        ),
    }
}

/// Choose the next pod after `u`'s (or finish).
fn advance(
    u: &Upgrade,
    o: &Observed,
    reason: &'static str,
    done: String,
    actions: Vec<DdbAction>,
) -> D {
    match next_pod(o, u.replicas, &u.to) {
        Next::Pod { ordinal, uid } => Decision::go(
            DdbState::Upgrading(u.at(ordinal, uid)),
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

fn to_step(u: &Upgrade, step: UpgradeStep, pod_uid: &str) -> DdbState {
    DdbState::Upgrading(Upgrade {
        step,
        pod_uid: pod_uid.to_owned(),
        attempt: 1,
        round_start: 1,
        ..u.clone()
    })
}

fn pre_hook(
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
            to_step(u, UpgradeStep::Restart, &u.pod_uid),
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
            Decision::go(
                to_step(u, UpgradeStep::Restart, &u.pod_uid),
                PRE_HOOK_SUCCEEDED,
                message,
            )
        },
    )
}

/// The pod chosen for this step was chosen because it was down; if it is Ready again and
/// another pod now comes first (the highest one needing replacement), re-plan, so that a
/// Ready pod is never taken down out of order.
fn overtaken(u: &Upgrade, o: &Observed) -> Option<D> {
    match next_pod(o, u.replicas, &u.to) {
        Next::Pod { ordinal, uid } if ordinal != u.ordinal => Some(Decision::go(
            DdbState::Upgrading(u.at(ordinal, uid)),
            REPLANNED,
            format!(
                "{} is Ready again, so {} goes first",
                o.pod_name(u.ordinal),
                o.pod_name(ordinal)
            ),
        )),
        _ => None,
    }
}

fn restart(u: &Upgrade, o: &Observed, actions: Vec<DdbAction>) -> D {
    let k = u.ordinal;
    let name = o.pod_name(k);
    match o.pods.get(&k) {
        Some(p) if p.uid == u.pod_uid => {
            if p.terminating {
                return stay(
                    REPLACING_POD,
                    format!("waiting for {name} to terminate"),
                    actions,
                );
            }
            if p.ready
                && let Some(replan) = overtaken(u, o)
            {
                return replan;
            }
            match hold_before_delete(o, k, u.replicas, &u.to) {
                Some(why) => stay(WAITING_FOR_PODS, why, actions),
                None => stay(
                    REPLACING_POD,
                    format!(
                        "deleting {name} (uid {}) to recreate it at {}",
                        u.pod_uid, u.to
                    ),
                    actions,
                )
                .with_actions([DdbAction::DeletePod {
                    ordinal: k,
                    uid: u.pod_uid.clone(),
                }]),
            }
        }
        Some(p) if !p.terminating => {
            if p.image.as_deref() != Some(&u.to) {
                let template_current = o.statefulset.as_ref().is_some_and(|s| s.serves(&u.to));
                if !template_current {
                    return stay(
                        REPLACING_POD,
                        format!(
                            "{name} came back at a stale image; waiting for the StatefulSet template to hold {}",
                            u.to
                        ),
                        actions,
                    );
                }
                return Decision::go(
                    to_step(u, UpgradeStep::PreHook, &p.uid),
                    RECREATED_AT_STALE_IMAGE,
                    format!(
                        "{name} came back at {} instead of {}; replacing it again, from its pre-hook",
                        p.image.as_deref().unwrap_or("no image"),
                        u.to
                    ),
                );
            }
            if !p.ready {
                return stay(
                    REPLACING_POD,
                    format!(
                        "{name} recreated at {}; waiting for it to become Ready",
                        u.to
                    ),
                    actions,
                );
            }
            Decision::go(
                to_step(u, UpgradeStep::PostHook, &p.uid),
                POD_REPLACED,
                format!("{name} is Ready at {}", u.to),
            )
        }
        _ => stay(
            REPLACING_POD,
            format!("waiting for {name} to be recreated"),
            actions,
        ),
    }
}

fn post_hook(
    spec: &DistributedDBSpec,
    u: &Upgrade,
    world: &World<Observed>,
    actions: Vec<DdbAction>,
) -> D {
    let o = &world.observed;
    let k = u.ordinal;
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

/// Drive one hook attempt; `on_success` decides what follows the hook (given the
/// upgrade with any skip token acknowledged).
#[allow(clippy::too_many_arguments)] // one call site per hook phase; a struct would only rename them
fn hook_step(
    u: &Upgrade,
    world: &World<Observed>,
    phase: HookPhase,
    hook: &Hook,
    key: String,
    job: Option<&JobView>,
    actions: Vec<DdbAction>,
    on_success: impl FnOnce(&Upgrade, String, Vec<DdbAction>) -> D,
) -> D {
    let o = &world.observed;
    let name = o.pod_name(u.ordinal);
    let what = phase.describe();
    let attempts = Attempts {
        attempt: u.attempt,
        round_start: u.round_start,
        retry_limit: Some(u32::try_from(hook.retry_limit).unwrap_or(0)),
    };
    let (step, job_name) = run_once_step(job, &key, attempts, world.now);
    match step {
        JobStep::Start => stay(
            HOOK_RUNNING,
            format!("starting the {what} of {name} ({})", attempts.describe()),
            actions,
        )
        .with_actions([DdbAction::RunHook {
            phase,
            ordinal: u.ordinal,
            key,
            from: u.from.clone(),
            to: u.to.clone(),
        }]),
        JobStep::Running => stay(
            HOOK_RUNNING,
            format!(
                "the {what} of {name} runs as Job {job_name} ({})",
                attempts.describe()
            ),
            actions,
        ),
        JobStep::Succeeded => on_success(u, format!("the {what} of {name} succeeded"), actions),
        JobStep::Backoff { failure, at, wait } => stay(
            HOOK_FAILED,
            format!(
                "the {what} of {name} {failure} in Job {job_name} ({}); retrying at {}",
                attempts.describe(),
                retry_time(at)
            ),
            actions,
        )
        .degraded()
        .requeue(wait),
        JobStep::Retry { failure } => Decision::go(
            DdbState::Upgrading(Upgrade {
                attempt: u.attempt.saturating_add(1),
                ..u.clone()
            }),
            HOOK_RETRIED,
            format!("the {what} of {name} {failure}; trying again"),
        ),
        JobStep::Exhausted { failure } => {
            let r = &o.requests;
            if annotations::is_new_token(r.retry_hook.as_deref(), u.retry_ack.as_deref()) {
                let next = u.attempt.saturating_add(1);
                return Decision::go(
                    DdbState::Upgrading(Upgrade {
                        attempt: next,
                        round_start: next,
                        retry_ack: r.retry_hook.clone(),
                        ..u.clone()
                    }),
                    HOOK_RETRY_REQUESTED,
                    format!("running the {what} of {name} again ({RETRY_HOOK} set)"),
                );
            }
            if annotations::is_new_token(r.skip_hook.as_deref(), u.skip_ack.as_deref()) {
                let acked = Upgrade {
                    skip_ack: r.skip_hook.clone(),
                    ..u.clone()
                };
                let skipped = format!("the {what} of {name} skipped ({SKIP_HOOK} set)");
                // The token is acknowledged only by the transition that acts on it; while
                // what follows cannot start yet, this stays and asks again.
                return match on_success(&acked, skipped, actions) {
                    Decision::Go {
                        to,
                        message,
                        actions,
                        ..
                    } => Decision::Go {
                        to,
                        reason: HOOK_SKIPPED,
                        message,
                        actions,
                    },
                    stay @ Decision::Stay { .. } => stay,
                };
            }
            stay(
                HOOK_FAILED,
                format!(
                    "the {what} of {name} {failure} in Job {job_name} ({}, no retries left); the upgrade waits: set the annotation {RETRY_HOOK} or {SKIP_HOOK} to a new value to run it again or go on without it",
                    attempts.describe()
                ),
                actions,
            )
            .degraded()
        }
    }
}
