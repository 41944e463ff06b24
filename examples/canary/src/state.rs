//! The persisted state: what `status.machine.state` holds.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use strum::EnumDiscriminants;

use crate::api::Template;

// ANCHOR: states
/// Where a `CanaryApp`'s lifecycle stands. Each variant carries what the next decision
/// needs and cannot read back from the cluster: the template that is stable, the one
/// under canary, and the verdict on the last one that failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema, EnumDiscriminants)]
#[strum_discriminants(
    name(CanaryKind),
    vis(pub),
    derive(strum::IntoStaticStr, strum::EnumIter),
    doc = "The kind of a [`CanaryState`]: its variant without data."
)]
#[serde(tag = "name", rename_all_fields = "camelCase")]
pub enum CanaryState {
    /// The first rollout: the stable StatefulSet is created from `spec.template`.
    Creating,
    /// At rest: every stable pod Ready at `stable`.
    Stable {
        /// The template the stable pods run.
        stable: Template,
        /// The revision whose canary failed last, held until the template changes.
        rejected: Option<String>,
    },
    /// One canary pod runs `candidate` next to the stable pods.
    Canary {
        /// The template the stable pods run.
        stable: Template,
        /// The template under test.
        candidate: Template,
        /// Waiting for the pod to be Ready, or watching it stay Ready.
        step: CanaryStep,
    },
    /// The canary passed: the stable StatefulSet rolls to `target`.
    Promoting {
        /// The template every stable pod is getting.
        target: Template,
    },
    /// The canary failed: it is removed; the stable pods never ran it.
    RollingBack {
        /// The template the stable pods run.
        stable: Template,
        /// The revision that failed.
        rejected: String,
    },
    /// Deleted; the owned objects go with the owner (owner references).
    Deleted,
}

/// The two halves of a canary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum CanaryStep {
    /// The canary pod has `canary.readyWithinSeconds` from the canary's start to be Ready.
    Starting,
    /// The canary pod was Ready; it must stay Ready for `canary.bakeSeconds`.
    Baking,
}
// ANCHOR_END: states

impl std::fmt::Display for CanaryStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CanaryStep::Starting => "Starting",
            CanaryStep::Baking => "Baking",
        })
    }
}

impl CanaryState {
    /// The template the stable pods run or are getting (none before the first rollout
    /// and after deletion).
    pub fn stable(&self) -> Option<&Template> {
        match self {
            CanaryState::Stable { stable, .. }
            | CanaryState::Canary { stable, .. }
            | CanaryState::RollingBack { stable, .. } => Some(stable),
            CanaryState::Promoting { target } => Some(target),
            CanaryState::Creating | CanaryState::Deleted => None,
        }
    }
}
