//! The DistributedDB machine's declared transition table and its reasons.
//!
//! Each row names the file whose code takes the edge; `machines/distributeddb.md` links
//! to it, and a test keeps the two in step (the file names the reason; no other decide
//! file does).

use super::state::DdbKind;
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
    /// Edge: `spec.replicas` changed: scaling begins with its first replica (or, while
    /// scaling, a replica that is not Ready is removed without waiting for the others).
    pub const REPLICAS_CHANGED: &str = "ReplicasChanged";
    /// Edge: the StatefulSet holds the step's replicas, every pod is Ready and none beyond:
    /// one replica more or fewer, towards `spec.replicas`.
    pub const NEXT_REPLICA: &str = "NextReplica";
    /// Edge: every wanted replica exists and is Ready, and no other does.
    pub const SCALING_COMPLETE: &str = "ScalingComplete";
    /// Edge: a scaling hook Job succeeded: after a pre-hook the StatefulSet takes the
    /// step; after a post-hook the step is done.
    pub const SCALE_HOOK_SUCCEEDED: &str = "ScaleHookSucceeded";
    /// Edge: a scaling hook due is not run: it was removed from the spec, or (a
    /// post-scale-up hook) `spec.replicas` went below the member before the hook
    /// started or after it failed.
    pub const SCALE_HOOK_DROPPED: &str = "ScaleHookDropped";
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

/// The files whose code takes the edges.
mod by {
    pub const CREATING: &str = "src/machines/distributeddb/decide/creating.rs";
    pub const READY: &str = "src/machines/distributeddb/decide/ready.rs";
    pub const SCALING: &str = "src/machines/distributeddb/decide/scaling.rs";
    pub const UPGRADING: &str = "src/machines/distributeddb/decide/upgrading.rs";
    pub const HOOKS: &str = "src/machines/distributeddb/decide/hooks.rs";
}

/// The declared transition table.
pub static TABLE: &[Edge<DdbKind>] = crate::edges![DdbKind;
    Creating -> {
        Ready: ALL_REPLICAS_READY, "every replica is Ready at spec.image", by::CREATING;
        Upgrading: MIXED_IMAGES, "every replica is Ready but some run an earlier spec.image", by::CREATING;
    }
    Ready -> Scaling: REPLICAS_CHANGED, "spec.replicas differs from the replicas at rest and every pod is Ready (or the replica removed is not): the first replica is added or removed", by::READY;
    Scaling -> {
        Scaling: NEXT_REPLICA, "the StatefulSet holds the step's replicas, all Ready, none beyond: one replica more or fewer towards spec.replicas", by::SCALING;
        Scaling: REPLICAS_CHANGED, "spec.replicas is below the step's replicas and the replica to remove is not Ready: it is removed without waiting", by::SCALING;
        Scaling: SCALE_HOOK_SUCCEEDED, "the step's pre-hook succeeded (the StatefulSet takes the step) or its post-hook did (the step is done)", by::SCALING;
        Scaling: SCALE_HOOK_DROPPED, "the hook due was removed from spec.scaling, or spec.replicas went below a member added whose post-scale-up hook has not started or failed (it is removed without it)", by::SCALING;
        Scaling: HOOK_RETRIED, "a failed scaling hook's backoff is over and its retry budget is not spent", by::HOOKS;
        Scaling: HOOK_RETRY_REQUESTED, "a scaling hook exhausted its retries and lockstep.dev/retry-hook has a new token", by::HOOKS;
        Scaling: HOOK_SKIPPED, "a scaling hook exhausted its retries and lockstep.dev/skip-hook has a new token: the step goes on without it", by::HOOKS;
        Ready: SCALING_COMPLETE, "exactly spec.replicas pods exist and all are Ready", by::SCALING;
    }
    Ready -> {
        Upgrading: IMAGE_CHANGED, "spec.image differs from status.version and a pod can be taken down", by::READY;
        Upgrading: STRAY_IMAGE, "a pod runs an image other than the version (its template was edited); it is replaced with hooks", by::READY;
        Ready: VERSION_ADOPTED, "spec.image changed to what every pod already runs", by::READY;
    }
    Upgrading -> {
        Upgrading: PRE_HOOK_SUCCEEDED, "the pod's pre-hook Job succeeded", by::UPGRADING;
        Upgrading: PRE_HOOK_SKIPPED, "no pre-hook is configured, or the pod is already down", by::UPGRADING;
        Upgrading: HOOK_RETRIED, "a failed hook's backoff is over and its retry budget is not spent", by::HOOKS;
        Upgrading: HOOK_RETRY_REQUESTED, "a hook exhausted its retries and lockstep.dev/retry-hook has a new token", by::HOOKS;
        Upgrading: HOOK_SKIPPED, "a hook exhausted its retries and lockstep.dev/skip-hook has a new token", by::HOOKS;
        Upgrading: POD_REPLACED, "the deleted pod's replacement is Ready at the target image", by::UPGRADING;
        Upgrading: RECREATED_AT_STALE_IMAGE, "the replacement came up at an image other than the target", by::UPGRADING;
        Upgrading: POD_RESTARTED, "the upgraded pod was recreated before its post-hook finished", by::UPGRADING;
        Upgrading: POD_UPGRADED, "the pod's post-hook succeeded; the next pod is taken", by::UPGRADING;
        Upgrading: REPLANNED, "the pod the step was about was replaced by someone else; another pod comes first; or a pod chosen while down is Ready again (its pre-hook runs first)", by::UPGRADING;
        Upgrading: IMAGE_CHANGED, "spec.image changed mid-upgrade while no pod was in flight (drained by its pre-hook, deleted, or starting within the readiness window): retarget", by::UPGRADING;
        Ready: UPGRADE_COMPLETED, "every pod is Ready at the target image", by::UPGRADING;
        Ready: HOOK_SKIPPED, "the last pod's post-hook exhausted its retries and lockstep.dev/skip-hook has a new token", by::HOOKS;
        Ready: VERSION_ADOPTED, "spec.image changed mid-upgrade to what every pod already runs", by::READY;
    }
    on_demand_edges!(backup: "backupPolicy");
    finalize_edges!(
        from: [Creating, Ready, Scaling, Upgrading, BackingUp],
        backup: "backupPolicy",
    );
];
