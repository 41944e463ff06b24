//! The declared transition table and every reason a decision gives.

use lockstep::engine::Edge;

use crate::decide::SOURCE;
use crate::state::CanaryKind;

// ANCHOR: reasons
/// Reasons: every edge's and every stay's (stays show theirs in the conditions).
pub mod reason {
    /// Edge: every stable pod is Ready at the first template.
    pub const DEPLOYED: &str = "Deployed";
    /// Edge: `spec.template` changed to a revision not rejected: a canary starts.
    pub const CANARY_STARTED: &str = "CanaryStarted";
    /// Edge: the canary pod is Ready: its bake starts.
    pub const CANARY_READY: &str = "CanaryReady";
    /// Edge: the canary pod stayed Ready for the bake: it is promoted.
    pub const CANARY_PASSED: &str = "CanaryPassed";
    /// Edge: the canary pod was not Ready in time, or stopped being Ready.
    pub const CANARY_FAILED: &str = "CanaryFailed";
    /// Edge: `spec.template` changed again before a verdict: the canary is dropped.
    pub const CANARY_SUPERSEDED: &str = "CanarySuperseded";
    /// Edge: every stable pod is Ready at the promoted template.
    pub const PROMOTED: &str = "Promoted";
    /// Edge: the canary is gone; the stable template serves on.
    pub const ROLLED_BACK: &str = "RolledBack";
    /// Edge: the object is being deleted.
    pub const DELETE_REQUESTED: &str = "DeleteRequested";

    /// Stay: the stable pods are being created.
    pub const DEPLOYING: &str = "Deploying";
    /// Stay: at rest at the wanted template.
    pub const SERVING: &str = "Serving";
    /// Stay (Degraded): the wanted template is the one whose canary failed.
    pub const CANDIDATE_REJECTED: &str = "CandidateRejected";
    /// Stay: a stable object differs from the state (restored), or a canary is left over
    /// (removed).
    pub const RESTORING: &str = "Restoring";
    /// Stay: the canary pod is not Ready yet.
    pub const CANARY_STARTING: &str = "CanaryStarting";
    /// Stay: the canary pod is Ready; the bake goes on.
    pub const BAKING: &str = "Baking";
    /// Stay: the stable pods are rolling to the promoted template.
    pub const ROLLING_OUT: &str = "RollingOut";
    /// Stay: the canary's pod is still going away.
    pub const REMOVING_CANARY: &str = "RemovingCanary";
    /// Stay: deleted; waiting for the finalizer's release.
    pub const GONE: &str = "Gone";
}
// ANCHOR_END: reasons

use reason::*;

// ANCHOR: table
/// Every edge the machine may take; the engine refuses any other.
pub static TABLE: &[Edge<CanaryKind>] = lockstep::edges![CanaryKind;
    Creating -> Stable: DEPLOYED, "every stable pod is Ready at the first template", SOURCE;
    Stable -> Canary: CANARY_STARTED,
        "spec.template changed to a revision that has not failed: one canary pod runs it", SOURCE;
    Canary -> {
        Canary: CANARY_READY, "the canary pod is Ready: the bake starts", SOURCE;
        Promoting: CANARY_PASSED, "the canary pod stayed Ready for canary.bakeSeconds", SOURCE;
        RollingBack: CANARY_FAILED,
            "the canary pod was not Ready within canary.readyWithinSeconds, or stopped being Ready", SOURCE;
        Stable: CANARY_SUPERSEDED, "spec.template changed again before a verdict", SOURCE;
    }
    Promoting -> Stable: PROMOTED, "every stable pod is Ready at the promoted template", SOURCE;
    RollingBack -> Stable: ROLLED_BACK, "the canary is gone; its revision is rejected", SOURCE;
    [Creating, Stable, Canary, Promoting, RollingBack] -> Deleted: DELETE_REQUESTED,
        "the object is being deleted", SOURCE;
];
// ANCHOR_END: table
