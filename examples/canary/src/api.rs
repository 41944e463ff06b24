//! The `CanaryApp` custom resource (`example.lockstep.dev/v1alpha1`, short name `capp`).
//!
//! ```yaml
//! apiVersion: example.lockstep.dev/v1alpha1
//! kind: CanaryApp
//! metadata: {name: shop}
//! spec:
//!   replicas: 3                      # stable pods, ≥ 1
//!   template:
//!     image: registry.example/shop:2 # changing the template rolls a canary first
//!     labels: {tier: web}            # more pod labels (part of the revision)
//!   canary:
//!     readyWithinSeconds: 300        # the canary pod must be Ready by then
//!     bakeSeconds: 60                # ... and stay Ready this long
//! ```
//!
//! The group is this example's own, `example.lockstep.dev`, not `lockstep.dev`: an
//! operator someone writes with Lockstep owns its API, and nothing in the engine or the
//! driver assumes the group of the kinds Lockstep ships.

use std::collections::BTreeMap;

use kube::CustomResource;
use lockstep::engine::EngineStatus;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::state::CanaryState;

// ANCHOR: crd
/// An app of `replicas` pods whose template changes reach them only through a canary:
/// one pod of the new template first, judged by its readiness, then promoted to every
/// replica or rolled back by the operator itself.
// The printer columns repeat `type_ = "string"`, which clippy takes for a duplicated
// attribute.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
#[kube(
    group = "example.lockstep.dev",
    version = "v1alpha1",
    kind = "CanaryApp",
    plural = "canaryapps",
    shortname = "capp",
    namespaced,
    status = "CanaryAppStatus",
    derive = "PartialEq",
    doc = "An app whose template changes go through a canary, promoted or rolled back by a declared state machine persisted in .status.machine.",
    printcolumn(name = "Stable", type_ = "string", json_path = ".status.stableImage"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Step", type_ = "string", json_path = ".status.step"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct CanaryAppSpec {
    /// The number of stable pods.
    #[schemars(range(min = 1))]
    pub replicas: i32,
    /// The pods wanted. A change runs a canary of it before any stable pod gets it.
    pub template: Template,
    /// How a canary is judged.
    #[serde(default)]
    pub canary: CanaryPolicy,
}

/// What the pods run: the part of the spec a canary tests. Its [`Template::revision`]
/// names it on every object made from it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Template {
    /// The container image.
    #[schemars(length(min = 1))]
    pub image: String,
    /// More labels for the pods (keys outside `app.kubernetes.io/`, which the operator
    /// sets itself).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

/// How long a canary pod has to become Ready, and how long it must then stay Ready.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CanaryPolicy {
    /// Seconds from the canary's start within which its pod must be Ready.
    #[serde(default = "default_ready_within")]
    #[schemars(range(min = 1))]
    pub ready_within_seconds: u32,
    /// Seconds the canary pod must then stay Ready before it is promoted.
    #[serde(default = "default_bake")]
    #[schemars(range(min = 1))]
    pub bake_seconds: u32,
}
// ANCHOR_END: crd

fn default_ready_within() -> u32 {
    300
}

fn default_bake() -> u32 {
    60
}

impl Default for CanaryPolicy {
    fn default() -> Self {
        Self {
            ready_within_seconds: default_ready_within(),
            bake_seconds: default_bake(),
        }
    }
}

impl Template {
    /// The template's revision: ten hex digits of a 64-bit FNV-1a hash of the image and
    /// the labels, the same in every process and every release (it is written on
    /// objects and compared across restarts, so it must not depend on a hasher's seed).
    pub fn revision(&self) -> String {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        let mut feed = |bytes: &[u8]| {
            for byte in bytes.iter().chain([0u8].iter()) {
                hash ^= u64::from(*byte);
                hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
            }
        };
        feed(self.image.as_bytes());
        for (key, value) in &self.labels {
            feed(key.as_bytes());
            feed(value.as_bytes());
        }
        format!("{hash:016x}")[..10].to_owned()
    }
}

/// What the operator reports. Everything but `engine` is projected from the persisted
/// state alone, so an idle reconcile writes nothing.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default, JsonSchema)]
#[serde(default, rename_all = "camelCase")]
pub struct CanaryAppStatus {
    /// Phase, step, conditions, observedGeneration and the machine record.
    #[serde(flatten)]
    pub engine: EngineStatus<CanaryState>,
    /// The image the stable pods run once the first rollout is done (while a promotion
    /// runs, the image they are rolling to).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stable_image: Option<String>,
    /// The revision of the stable template.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stable_revision: Option<String>,
    /// The revision of the template under canary, while one runs or is promoted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub candidate_revision: Option<String>,
    /// The revision whose canary failed last: it is not tried again until the template
    /// changes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rejected_revision: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::Template;

    fn template(image: &str, labels: &[(&str, &str)]) -> Template {
        Template {
            image: image.to_owned(),
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        }
    }

    #[test]
    fn a_revision_is_fixed_by_the_image_and_labels() {
        assert_eq!(template("app:1", &[]).revision(), "86bdf641fe");
        assert_ne!(
            template("app:1", &[]).revision(),
            template("app:1", &[("tier", "web")]).revision()
        );
        assert_ne!(
            template("app:1", &[("a", "bc")]).revision(),
            template("app:1", &[("ab", "c")]).revision()
        );
    }
}
