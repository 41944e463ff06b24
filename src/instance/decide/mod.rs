//! The agent's pure decision: from its spec, its state and what it observes, stay (with
//! actions) or take one declared edge.
//!
//! One file per concern: preparing the data directory (`prepare`), the Lease before a
//! writable start (`lease`), the standby and its promotion (`standby`), the guard of a
//! server that may write (`guard`), and stopping, releasing and fencing (`stop`).

mod guard;
mod lease;
mod prepare;
mod standby;
mod stop;

use std::time::Duration;

use super::action::AgentAction;
use super::machine::AgentSpec;
use super::observe::Observation;
use super::state::{AgentState, FenceStep};
use super::table::reason;
use crate::engine::Decision;

/// What the agent decides on one round.
pub type AgentDecision = Decision<AgentState, AgentAction>;

/// Decide the next step of an agent in `state` that observes `seen`; `signalled`: the
/// container was asked to stop (SIGTERM). Pure.
pub fn decide(
    spec: &AgentSpec,
    state: &AgentState,
    seen: &Observation,
    signalled: bool,
) -> AgentDecision {
    match state {
        AgentState::Exited { code } => Decision::stay(
            reason::DONE,
            format!("exiting with status {}", code.status()),
        ),
        // Before its own server runs, a postmaster on $PGDATA is one this agent did not
        // start: it runs unsupervised (writable, on primary data), so it is killed first.
        AgentState::Starting
        | AgentState::AwaitingLease
        | AgentState::Bootstrapping
        | AgentState::PromotingLocally
        | AgentState::StartingPrimary
        | AgentState::Cloning
        | AgentState::Rewinding
            if seen.stray.is_some() =>
        {
            let pid = seen.stray.unwrap_or_default();
            Decision::stay(
                reason::STRAY_POSTMASTER,
                format!("a postmaster this agent did not start runs (pid {pid}): killing it"),
            )
            .with_actions([AgentAction::KillStray { pid }])
            .requeue(spec.period())
        }
        AgentState::Starting => prepare::starting(spec, seen, signalled),
        AgentState::Bootstrapping
        | AgentState::PromotingLocally
        | AgentState::Cloning
        | AgentState::Rewinding => prepare::preparing(spec, state, seen),
        AgentState::AwaitingLease => lease::awaiting(spec, seen, signalled),
        AgentState::StartingPrimary => lease::starting_primary(spec, seen, signalled),
        AgentState::Standby => standby::standby(spec, seen, signalled),
        AgentState::Promoting | AgentState::Primary => guard::guarded(spec, state, seen, signalled),
        AgentState::Stopping { began, primary } => stop::stopping(spec, *began, *primary, seen),
        AgentState::Releasing { lsn, crashed } => stop::releasing(spec, *lsn, *crashed, seen),
        AgentState::Fencing { since, step } => stop::fencing(spec, *since, *step, seen),
    }
}

/// Whether a standby may answer the survey the Lease asks, as far as whom it streams
/// from goes: only once its configuration follows whom the Lease says (this round needs
/// no [`AgentAction::Follow`]). A standby still pointed at a holder whose tenure ran out
/// (or at the `-rw` Service) answers a round later, after its WAL receiver left that
/// server, so a deposed primary that thaws after the survey gets no acknowledgement from
/// a standby the survey already counted. Pure.
#[must_use]
pub fn may_answer(spec: &AgentSpec, seen: &Observation) -> bool {
    standby::upstream(spec, seen).is_none()
}

/// Stop the server at once: this pod may no longer write.
fn fence(seen: &Observation, why: &'static str, message: String) -> AgentDecision {
    Decision::go(
        AgentState::Fencing {
            since: seen.now,
            step: FenceStep::Immediate,
        },
        why,
        message,
    )
    .with_actions([AgentAction::StopImmediate])
}

/// Renew the Lease with the L this agent runs with, marking the cluster initialized:
/// this pod has its data.
fn renew(spec: &AgentSpec, drop_released_lsn: bool) -> Vec<AgentAction> {
    renew_marking(spec, drop_released_lsn, true)
}

fn renew_marking(
    spec: &AgentSpec,
    drop_released_lsn: bool,
    mark_initialized: bool,
) -> Vec<AgentAction> {
    spec.lease
        .as_ref()
        .map(|l| AgentAction::Renew {
            lease: l.duration,
            drop_released_lsn,
            mark_initialized,
        })
        .into_iter()
        .collect()
}

/// Whether no renewal was accepted for `T - G` (or none ever was): a server that may
/// write is stopped at once, so that the kill lands by `T`. Always false without a
/// Lease.
fn overdue(spec: &AgentSpec, seen: &Observation) -> bool {
    spec.lease.as_ref().is_some_and(|l| {
        seen.since_renewal()
            .is_none_or(|since| since >= l.fence.saturating_sub(spec.immediate_grace))
    })
}

/// When to look again while a server may write: every `R`, or sooner when the fence
/// deadline (`T - G` after the last accepted renewal began) comes first.
fn next_look(spec: &AgentSpec, seen: &Observation) -> Duration {
    let period = spec.period();
    match (&spec.lease, seen.since_renewal()) {
        (Some(l), Some(since)) => {
            let left = l
                .fence
                .saturating_sub(spec.immediate_grace)
                .saturating_sub(since);
            period.min(left.max(Duration::from_millis(100)))
        }
        _ => period,
    }
}

/// This pod's identity in the Lease (empty without one).
fn me(spec: &AgentSpec) -> &str {
    spec.lease.as_ref().map_or("", |l| l.identity.as_str())
}
