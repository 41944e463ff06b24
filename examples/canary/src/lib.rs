//! A canary rollout with automatic rollback, as a [Lockstep](lockstep) operator: the
//! operator that `docs/write-your-own-operator.md` builds step by step. It uses
//! Lockstep's public API only.
//!
//! - [`api`]: the `CanaryApp` custom resource and its status;
//! - [`state`]: the persisted states; [`table`]: the declared edges and reasons;
//!   [`actions`]: the side effects, as data;
//! - [`decide`]: the pure decision, one function per state; [`machine`]: `impl Machine`,
//!   with the statechart and the guarantees;
//! - [`observe`] and [`render`]: the bridge to Kubernetes objects, both pure;
//! - this module binds them to the custom resource as an [`Operator`] the driver runs.
//!
//! # Guarantees
//! See [`machine`]. The status is a function of the persisted state alone.
//!
//! # Assumptions
//! The driver's cache sees the StatefulSets, pods and Service through the labels
//! [`render`] puts on them.
//!
//! # Errors
//! [`lockstep::driver::Error`] from rendering ([`render::render`]).
#![deny(missing_docs)]

pub mod actions;
pub mod api;
pub mod decide;
pub mod machine;
#[cfg(test)]
mod model;
pub mod observe;
pub mod render;
pub mod state;
pub mod table;
#[cfg(test)]
mod tests;

pub use api::{CanaryApp, CanaryAppSpec, CanaryAppStatus, Template};
pub use machine::CanaryRollout;

use lockstep::driver::{Cache, Error, Op, Operator};
use lockstep::engine::EngineStatus;

use crate::actions::CanaryAction;
use crate::observe::Observed;
use crate::state::CanaryState;

// ANCHOR: operator
impl Operator for CanaryRollout {
    type Resource = CanaryApp;

    const KIND_LABEL: &'static str = render::KIND_LABEL;
    const FINALIZER: &'static str = "example.lockstep.dev/finalizer";

    fn spec(app: &CanaryApp) -> CanaryAppSpec {
        app.spec.clone()
    }

    fn engine_status(app: &CanaryApp) -> EngineStatus<CanaryState> {
        app.status
            .as_ref()
            .map(|s| s.engine.clone())
            .unwrap_or_default()
    }

    fn observe(app: &CanaryApp, _state: Option<&CanaryState>, cache: &Cache) -> Observed {
        observe::observe(app, cache)
    }

    fn render(app: &CanaryApp, action: &CanaryAction) -> Result<Vec<Op>, Error> {
        render::render(app, action)
    }

    fn status(
        _app: &CanaryApp,
        engine: EngineStatus<CanaryState>,
        state: Option<&CanaryState>,
        _observed: &Observed,
        _now: chrono::DateTime<chrono::Utc>,
    ) -> serde_json::Value {
        let stable = state.and_then(CanaryState::stable);
        let status = CanaryAppStatus {
            engine,
            stable_image: stable.map(|t| t.image.clone()),
            stable_revision: stable.map(Template::revision),
            candidate_revision: match state {
                Some(CanaryState::Canary { candidate, .. }) => Some(candidate.revision()),
                Some(CanaryState::Promoting { target }) => Some(target.revision()),
                _ => None,
            },
            rejected_revision: match state {
                Some(CanaryState::Stable { rejected, .. }) => rejected.clone(),
                Some(CanaryState::RollingBack { rejected, .. }) => Some(rejected.clone()),
                _ => None,
            },
        };
        serde_json::to_value(status).unwrap_or(serde_json::Value::Null)
    }
}
// ANCHOR_END: operator
