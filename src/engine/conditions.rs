//! Condition types and the engine's own reasons.
//!
//! Conditions are *projected*: [`crate::engine::step()`] computes all three from the
//! persisted state and the decision of the reconcile. Nothing else sets them.

/// The workload is at rest in a serving state and nothing is wrong.
pub const READY: &str = "Ready";
/// The machine is working toward the spec (creating, upgrading, backing up, finalizing).
pub const PROGRESSING: &str = "Progressing";
/// Something needs attention: a blocked step, a refused transition, an unreadable record.
pub const DEGRADED: &str = "Degraded";

/// Condition statuses.
pub mod status {
    /// The condition holds.
    pub const TRUE: &str = "True";
    /// The condition does not hold.
    pub const FALSE: &str = "False";
}

/// Reasons the engine itself gives (machines give their own for their edges and stays).
pub mod reason {
    /// Degraded is false: nothing is wrong.
    pub const AS_EXPECTED: &str = "AsExpected";
    /// A machine decided a transition its table does not declare; it was not persisted.
    pub const UNDECLARED_TRANSITION: &str = "UndeclaredTransition";
    /// The persisted record could not be decoded; the machine holds and acts on nothing.
    pub const UNDECODABLE_STATE: &str = "UndecodableState";
    /// The machine has stayed in one state longer than that state's deadline.
    pub const PROGRESS_DEADLINE_EXCEEDED: &str = "ProgressDeadlineExceeded";
    /// The machine is in a state that waits on something outside but declares no
    /// deadline ([`crate::engine::Deadline`]): a bug in the machine. The engine acts on
    /// nothing in that state.
    pub const UNDECLARED_DEADLINE: &str = "UndeclaredDeadline";
    /// The first reconcile recorded the initial state.
    pub const INITIALIZED: &str = "Initialized";
    /// Acting on a decision failed; the reconcile is retried with backoff.
    pub const RECONCILE_ERROR: &str = "ReconcileError";
    /// The API server refused a request in a way retrying cannot fix (an object it
    /// finds invalid, a forbidden verb): Degraded, with the server's message naming the
    /// object and the field.
    pub const REQUEST_REFUSED: &str = "RequestRefused";
}
