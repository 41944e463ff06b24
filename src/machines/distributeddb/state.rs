//! The persisted state of a DistributedDB: what `status.machine.state` holds.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use strum::EnumDiscriminants;

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
    /// Replicas are being added or removed, one at a time, towards `spec.replicas`.
    Scaling {
        /// The image every pod runs.
        version: String,
        /// The replicas before.
        from_replicas: i32,
        /// The replicas the StatefulSet now holds: one step away from the replicas
        /// before it (the next step is taken once every pod is Ready at this one).
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
    /// Restart: the pod's pre-hook ran (it succeeded, or the user skipped it after it
    /// failed), so the pod is out of service though it may still be Ready. A drained pod
    /// is replaced next, whatever else goes down meanwhile: no other pod is taken down
    /// while it waits. (Absent in records written before it existed: not drained.)
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub drained: bool,
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
    /// Upgrading (Restart): the pod's pre-hook ran, so it is out of service.
    drained: Option<bool>,
}

crate::machines::common::state_schema!(DdbState, StateSchema);
