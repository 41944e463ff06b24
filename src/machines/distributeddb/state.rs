//! The persisted state of a DistributedDB: what `status.machine.state` holds.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use strum::EnumDiscriminants;

use super::actions::HookPhase;
use crate::machines::common::retry::RetryBudget;

/// The persisted state of a DistributedDB (`status.machine.state`). Its CRD schema is
/// derived from this enum ([`crate::engine::schema`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema, EnumDiscriminants)]
#[strum_discriminants(
    name(DdbKind),
    vis(pub),
    derive(strum::IntoStaticStr, strum::EnumIter),
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
        /// The scaling hook of the member being added or removed, while one is due:
        /// a pre-hook runs with the StatefulSet still at `replicas`, a post-hook once
        /// it holds them. (Absent in records written before scaling hooks: none due.)
        #[serde(default, skip_serializing_if = "Option::is_none")]
        hook: Option<ScaleHook>,
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
        /// The key of the Job serving it ([`crate::machines::common::on_demand::key`]);
        /// absent in a record from before keys were chained (then the token's own).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        job: Option<String>,
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
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
    /// The hook's retry budget, renewed by a `retry-hook` token.
    #[serde(flatten)]
    pub budget: RetryBudget,
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

/// A scaling hook due for one member.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScaleHook {
    /// Which hook.
    pub phase: ScalePhase,
    /// The member added or removed.
    pub ordinal: i32,
    /// Chosen when the step began (before any Job of it exists), so that the hook's
    /// Jobs are this step's alone: a member added, removed and added again runs its
    /// hooks again.
    pub token: String,
    /// The hook attempt, from 1.
    pub attempt: u32,
    /// The hook's retry budget, renewed by a `retry-hook` token.
    #[serde(flatten)]
    pub budget: RetryBudget,
    /// The last `skip-hook` token acted on (or present when the step began).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_ack: Option<String>,
}

/// The scaling hooks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema, strum::Display)]
pub enum ScalePhase {
    /// `scaling.preScaleUp`: the StatefulSet does not hold the member yet.
    PreScaleUp,
    /// `scaling.postScaleUp`: the StatefulSet holds the member; it runs once it is Ready.
    PostScaleUp,
    /// `scaling.preScaleDown`: the StatefulSet still holds the member.
    PreScaleDown,
    /// `scaling.postScaleDown`: the StatefulSet no longer holds the member; it runs once
    /// its pod is gone.
    PostScaleDown,
}

impl ScalePhase {
    /// The hook's phase ([`HookPhase`]: its spec, Job key and messages).
    pub fn hook(self) -> HookPhase {
        match self {
            ScalePhase::PreScaleUp => HookPhase::PreScaleUp,
            ScalePhase::PostScaleUp => HookPhase::PostScaleUp,
            ScalePhase::PreScaleDown => HookPhase::PreScaleDown,
            ScalePhase::PostScaleDown => HookPhase::PostScaleDown,
        }
    }

    /// The hooks of a step from `from` to `to` replicas: (pre, post).
    pub fn of_step(from: i32, to: i32) -> (ScalePhase, ScalePhase) {
        if to > from {
            (ScalePhase::PreScaleUp, ScalePhase::PostScaleUp)
        } else {
            (ScalePhase::PreScaleDown, ScalePhase::PostScaleDown)
        }
    }

    /// A pre-hook (the StatefulSet does not take the step until it succeeds).
    pub fn is_pre(self) -> bool {
        matches!(self, ScalePhase::PreScaleUp | ScalePhase::PreScaleDown)
    }

    /// A hook of a step that adds a member.
    pub fn is_up(self) -> bool {
        matches!(self, ScalePhase::PreScaleUp | ScalePhase::PostScaleUp)
    }
}

crate::machines::common::finalize::impl_states!(DdbState);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::MachineRecord;

    /// A record as the operator writes it today (keys in the order it writes them).
    const UPGRADING: &str = r#"{"state":{"name":"Upgrading","from":"db:1","to":"db:2","replicas":3,"ordinal":2,"step":"PreHook","podUid":"u2","attempt":5,"roundStart":4,"retryAck":"r1","skipAck":"s1","drained":true},"enteredAt":"2026-11-29T18:00:00Z","stateVersion":1,"history":[]}"#;

    #[test]
    fn every_field_has_one_type_in_every_state_that_carries_it() {
        assert_eq!(
            crate::engine::schema::mismatched_fields::<DdbState>(),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_record_written_today_decodes_and_encodes_to_the_same_bytes() {
        let record: MachineRecord<DdbState> =
            serde_json::from_str(UPGRADING).expect("today's record decodes");
        let DdbState::Upgrading(u) = &record.state else {
            panic!("an upgrade: {:?}", record.state);
        };
        assert_eq!((u.attempt, u.budget.round_start), (5, 4));
        assert_eq!(u.budget.retry_ack.as_deref(), Some("r1"));
        assert_eq!(
            serde_json::to_string(&record).ok().as_deref(),
            Some(UPGRADING)
        );
        // Without a retry token acted on, `retryAck` is absent both ways.
        let fresh = UPGRADING.replace(r#""retryAck":"r1","#, "");
        let record: MachineRecord<DdbState> =
            serde_json::from_str(&fresh).expect("a record without retryAck decodes");
        assert_eq!(serde_json::to_string(&record).ok(), Some(fresh));
    }
}
