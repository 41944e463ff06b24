//! The `canaryapp` machine: a canary rollout with automatic rollback.
//!
//! ```text
//!               Deployed                CanaryStarted
//!   Creating ───────────► Stable ─────────────────────► Canary(Starting)
//!                          ▲  ▲                            │ CanaryReady
//!                          │  │ CanarySuperseded           ▼
//!                 Promoted │  └──────────────────────── Canary(Baking)
//!                          │                               │        │
//!                      Promoting ◄──── CanaryPassed ───────┘        │ CanaryFailed
//!                                                                   ▼ (also from Starting)
//!                          Stable(rejected) ◄──── RolledBack ── RollingBack
//!
//!   any state ── DeleteRequested ──► Deleted
//! ```
//!
//! The generated statechart, every edge linked to the code that takes it, is
//! `examples/canary/machines/canaryapp.md`.
//!
//! # Guarantees
//! - **No stable pod runs a template whose canary did not pass.** The stable
//!   StatefulSet gets a new template only on `CanaryPassed`, taken once a canary pod *of
//!   that template's revision* was Ready and stayed Ready for `canary.bakeSeconds`
//!   (the first rollout, `Creating`, is the exception: there is nothing to compare it
//!   with). Before that, the stable set is only ever *created*, never rewritten, so a
//!   reconcile from a stale read cannot put a later template on it.
//! - **Rollback is automatic and remembered.** A canary pod that is not Ready within
//!   `canary.readyWithinSeconds`, or stops being Ready during its bake, is a verdict: the
//!   revision is recorded in the state (`RollingBack { rejected }`, then
//!   `Stable { rejected }`) in the same write that starts removing the canary, so the
//!   failed revision is not tried again, after a restart or a lost write either, until
//!   `spec.template` changes. The object is then `Degraded` (`CandidateRejected`).
//! - **One canary at a time, at most one pod, deleted by UID.** The canary StatefulSet
//!   has a fixed name and one replica; it is deleted only if it is still the object
//!   observed.
//! - **Quiet at rest.** Objects are written only when they differ from the state; an
//!   idle reconcile sends no request and writes no status.
//!
//! # Assumptions
//! - A pod's Ready condition is the health signal (a readiness probe is the app's to
//!   give); the StatefulSet controller rolls the stable pods (`RollingUpdate`).
//! - Pods carry the labels the operator renders (`app.kubernetes.io/component`,
//!   `app.kubernetes.io/version`); user labels are outside `app.kubernetes.io/`.
//! - Time comes from the engine's clock (`World::now`, `enteredAt`): the bake and the
//!   readiness window are measured from when their state was entered and persisted.
//!
//! # Errors
//! `decide` has no error path: a canary that fails is a transition, a rejected template
//! a Degraded stay. Rendering fails only for an object without a UID
//! ([`lockstep::driver::Error::Render`]); requests that fail are the driver's to retry.

use lockstep::engine::{Deadline, Edge, Machine, World};

use crate::actions::CanaryAction;
use crate::api::CanaryAppSpec;
use crate::decide::{D, decide};
use crate::observe::Observed;
use crate::state::{CanaryKind, CanaryState};
use crate::table::TABLE;

// ANCHOR: machine
/// The canary rollout machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CanaryRollout;

impl Machine for CanaryRollout {
    const NAME: &'static str = "canaryapp";

    type Spec = CanaryAppSpec;
    type State = CanaryState;
    type Kind = CanaryKind;
    type Observed = Observed;
    type Action = CanaryAction;

    fn initial() -> CanaryState {
        CanaryState::Creating
    }

    fn table() -> &'static [Edge<CanaryKind>] {
        TABLE
    }

    fn decide(spec: &CanaryAppSpec, state: &CanaryState, world: &World<Observed>) -> D {
        decide(spec, state, world)
    }

    fn is_ready(state: &CanaryState) -> bool {
        matches!(
            state,
            CanaryState::Stable { .. } | CanaryState::Canary { .. }
        )
    }

    /// Each state that waits on the cluster says for how long, and what a person can do
    /// past it; the engine reports `Degraded` naming it. Stable and Canary rest (the
    /// canary's own windows are its spec's), Deleted is done.
    fn deadline(state: &CanaryState) -> Deadline {
        const WAY_OUT: &str =
            "kubectl describe the app's pods, then fix spec.template or the cluster";
        match state {
            CanaryState::Creating | CanaryState::Promoting { .. } => Deadline::minutes(10, WAY_OUT),
            CanaryState::RollingBack { .. } => Deadline::minutes(5, WAY_OUT),
            CanaryState::Stable { .. } | CanaryState::Canary { .. } | CanaryState::Deleted => {
                Deadline::None
            }
        }
    }

    fn finalized(state: &CanaryState) -> bool {
        matches!(state, CanaryState::Deleted)
    }

    /// Nothing to save before the objects go: a canary app keeps no data.
    fn holds_data(_observed: &Observed) -> bool {
        false
    }

    fn step_label(state: &CanaryState) -> Option<String> {
        match state {
            CanaryState::Canary { step, .. } => Some(step.to_string()),
            _ => None,
        }
    }
}
// ANCHOR_END: machine
