//! The side effects a decision asks for, as data; [`crate::render`] turns each into
//! requests.

use crate::api::Template;

// ANCHOR: actions
/// One side effect. Each is idempotent as rendered: objects have fixed names, the
/// stable set is only created (never rewritten) before the first rollout, and the
/// canary is deleted only if it is still the object observed (its UID).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CanaryAction {
    /// Create the stable StatefulSet from `template` if it does not exist.
    CreateStable {
        /// The pods' template.
        template: Template,
        /// The replicas.
        replicas: i32,
    },
    /// Apply the stable StatefulSet at `template` (its controller rolls the pods).
    ApplyStable {
        /// The pods' template.
        template: Template,
        /// The replicas.
        replicas: i32,
    },
    /// Apply the one-pod canary StatefulSet at `template`.
    ApplyCanary {
        /// The canary pod's template.
        template: Template,
    },
    /// Delete the canary StatefulSet if it still has `uid`.
    DeleteCanary {
        /// The UID observed.
        uid: String,
    },
    /// Apply the Service in front of every pod, stable and canary.
    ApplyService,
}
// ANCHOR_END: actions
