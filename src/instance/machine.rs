//! The agent as a [`Machine`]: its spec (what it runs with), and the trait the engine's
//! export, table checks and model checks use.

use std::time::Duration;

use super::action::AgentAction;
use super::observe::Observation;
use super::state::{AgentKind, AgentState};
use super::{decide, table};
use crate::engine::{Deadline, Decision, Edge, Machine, World};
use crate::pod::fencing::FencingTerms;

/// What one agent runs with: fixed for the life of its process (its container's
/// environment).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentSpec {
    /// The Lease and its timings; `None`: fencing is off (no Lease is rendered), so a
    /// standby labelled primary promotes itself and only the `demoted` label stops a
    /// writable server.
    pub lease: Option<LeaseTerms>,
    /// How long a clean stop may run (renewing meanwhile) before it is escalated to an
    /// immediate stop.
    pub clean_stop: Duration,
    /// `G`: how long an immediate stop may take before the postmaster and its children
    /// are killed. The fence begins at `T - G` so that the kill lands by `T`.
    pub immediate_grace: Duration,
    /// A failed `pg_rewind` discards `$PGDATA` and clones again (else the agent exits 4).
    pub reclone_on_rewind_failure: bool,
    /// How long a standby labelled replica may answer without streaming while a writable
    /// primary answers upstream before it stops cleanly to rejoin (its next start
    /// rewinds it against that primary).
    pub standby_stall: Duration,
    /// How long a server that may write may leave WAL it wrote unflushed, its flush
    /// position never moving, before it is stopped at once: its commits all wait (a hung
    /// WAL volume) though it still renews the Lease.
    pub wal_stall: Duration,
}

/// The Lease an agent renews, and the timings its fence runs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseTerms {
    /// This pod's identity in the Lease: `"<pod name>/<pod uid>"`.
    pub identity: String,
    /// `L`: the Lease's duration, published in `spec.leaseDurationSeconds` at every
    /// renewal.
    pub duration: Duration,
    /// `T`: no accepted renewal for this long and the server is down (`T < L`).
    pub fence: Duration,
    /// `R`: how often the agent looks, and renews.
    pub renew: Duration,
}

impl LeaseTerms {
    /// The terms for a pod named `identity` whose Lease lasts `lease_seconds` (`L`), as
    /// the operator renders them ([`FencingTerms::of_lease`]).
    pub fn for_lease(identity: impl Into<String>, lease_seconds: u64) -> Self {
        let terms = FencingTerms::of_lease(u32::try_from(lease_seconds).unwrap_or(u32::MAX));
        LeaseTerms {
            identity: identity.into(),
            duration: terms.lease,
            fence: terms.tenure,
            renew: terms.renew,
        }
    }
}

impl AgentSpec {
    /// An agent renewing `lease`, with a 120 s clean-stop bound, a 2 s immediate-stop
    /// grace, re-cloning when a rewind fails, a 20 s bound on a standby's stall and a 30 s
    /// bound on a WAL flush's.
    pub fn with_lease(lease: LeaseTerms) -> Self {
        AgentSpec {
            lease: Some(lease),
            clean_stop: Duration::from_secs(120),
            immediate_grace: Duration::from_secs(2),
            reclone_on_rewind_failure: true,
            standby_stall: Duration::from_secs(20),
            wal_stall: Duration::from_secs(30),
        }
    }

    /// How often the agent looks when nothing is due sooner.
    pub fn period(&self) -> Duration {
        self.lease
            .as_ref()
            .map_or(Duration::from_secs(2), |l| l.renew)
    }
}

/// The PostgreSQL instance manager's agent: one per PostgreSQL pod.
#[derive(Debug)]
pub struct Instance;

impl Machine for Instance {
    const NAME: &'static str = "instance";

    type Spec = AgentSpec;
    type State = AgentState;
    type Kind = AgentKind;
    type Observed = Observation;
    type Action = AgentAction;

    fn initial() -> AgentState {
        AgentState::Starting
    }

    fn table() -> &'static [Edge<AgentKind>] {
        table::TABLE
    }

    fn decide(
        spec: &AgentSpec,
        state: &AgentState,
        world: &World<Observation>,
    ) -> Decision<AgentState, AgentAction> {
        decide::decide(spec, state, &world.observed, world.deleting)
    }

    fn is_ready(state: &AgentState) -> bool {
        matches!(state, AgentState::Standby | AgentState::Primary)
    }

    /// The agent's waits are bounded by its own timers (the fence's `T`, the clean
    /// stop's bound); these are the bounds a person reading the pod's log can hold it to.
    fn deadline(state: &AgentState) -> Deadline {
        const LOG: &str = "read the pod's log (kubectl logs), then delete the pod to start it over";
        const LABEL: &str =
            "check the pod's lockstep.dev/role label and the PostgresCluster's status";
        match state {
            AgentState::Standby | AgentState::Primary | AgentState::Exited { .. } => Deadline::None,
            AgentState::Starting | AgentState::AwaitingLease => Deadline::minutes(5, LABEL),
            AgentState::Bootstrapping | AgentState::Cloning | AgentState::Rewinding => {
                Deadline::minutes(60, LOG)
            }
            AgentState::PromotingLocally
            | AgentState::StartingPrimary
            | AgentState::Promoting
            | AgentState::Stopping { .. }
            | AgentState::Releasing { .. }
            | AgentState::Fencing { .. } => Deadline::minutes(5, LOG),
        }
    }

    fn finalized(state: &AgentState) -> bool {
        matches!(state, AgentState::Exited { .. })
    }
}
