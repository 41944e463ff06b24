//! The Lease before a writable start: a pod labelled primary prepares, and starts its
//! server writable, only while the Lease names it and right after a renewal of its own
//! was accepted.

use super::{AgentDecision, me, renew, renew_marking};
use crate::engine::Decision;
use crate::instance::action::AgentAction;
use crate::instance::machine::AgentSpec;
use crate::instance::observe::{DataDir, Observation, RoleLabel};
use crate::instance::state::{AgentState, ExitCode};
use crate::instance::table::reason::{
    ALREADY_INITIALIZED, FOREIGN_DATA, LEASE_HELD, LEASE_MOVED, RELEASED_POSITION_PENDING,
    ROLE_CHANGED, SIGNALLED, STARTED_WRITABLE, WAITING_FOR_LEASE,
};
use crate::pod::Role;
use crate::pod::lease::INITIALIZED;

/// How the Lease stands for a writable start.
enum Standing {
    /// It names this pod (or there is no Lease).
    Mine,
    /// It names another pod, or none.
    Elsewhere(String),
    /// It could not be read.
    Unread,
}

fn standing(spec: &AgentSpec, seen: &Observation) -> Standing {
    if spec.lease.is_none() {
        return Standing::Mine;
    }
    match seen.lease.seen() {
        Some(l) if l.names(me(spec)) => Standing::Mine,
        Some(l) => Standing::Elsewhere(l.holder.clone().unwrap_or_else(|| "nobody".to_owned())),
        None => Standing::Unread,
    }
}

fn stopped(message: &str) -> AgentDecision {
    Decision::go(
        AgentState::Exited {
            code: ExitCode::Stopped,
        },
        SIGNALLED,
        message.to_owned(),
    )
}

fn role_changed(seen: &Observation) -> Option<AgentDecision> {
    (seen.role != RoleLabel::Is(Role::Primary)).then(|| {
        Decision::go(
            AgentState::Starting,
            ROLE_CHANGED,
            "the role label is no longer primary: starting over",
        )
    })
}

/// Labelled primary: wait until the Lease names this pod, then prepare after an
/// accepted renewal.
pub(super) fn awaiting(spec: &AgentSpec, seen: &Observation, signalled: bool) -> AgentDecision {
    if signalled {
        return stopped("asked to stop while waiting for the Lease");
    }
    if let Some(changed) = role_changed(seen) {
        return changed;
    }
    if seen.data == DataDir::Foreign {
        // Files put on the volume while it waited (found by the model check: an
        // initialized cluster's recreated primary, its volume lost, would otherwise
        // bootstrap an empty database over them once the Lease came back to it).
        return Decision::go(
            AgentState::Exited {
                code: ExitCode::Misconfigured,
            },
            FOREIGN_DATA,
            "$PGDATA is not empty but holds no PostgreSQL data directory: refusing to write over it",
        );
    }
    match standing(spec, seen) {
        Standing::Mine => {}
        Standing::Elsewhere(holder) => {
            return Decision::stay(
                WAITING_FOR_LEASE,
                format!("the Lease names {holder}: waiting before a writable start"),
            )
            .requeue(spec.period());
        }
        Standing::Unread => {
            return Decision::stay(
                WAITING_FOR_LEASE,
                "the Lease cannot be read: waiting before a writable start",
            )
            .requeue(spec.period());
        }
    }
    let released = seen.lease.seen().and_then(|l| l.released_at.as_ref());
    let initialized = seen.lease.seen().is_some_and(|l| l.initialized);
    let no_data = matches!(seen.data, DataDir::Empty | DataDir::Interrupted);
    if no_data && initialized {
        return Decision::stay(
            ALREADY_INITIALIZED,
            format!(
                "labelled primary with no data, but the cluster's database exists (the Lease's {INITIALIZED}): not bootstrapping an empty one in its place; the operator fails over to a member that has the data (remove the annotation only to start the cluster anew, empty)"
            ),
        )
        .requeue(spec.period());
    }
    let held = |to, message: &str| {
        Decision::go(
            to,
            LEASE_HELD,
            format!("the Lease is this pod's: {message}"),
        )
        .with_actions(renew_marking(
            spec,
            false,
            matches!(seen.data, DataDir::Standby { .. } | DataDir::Primary { .. }),
        ))
    };
    match seen.data {
        DataDir::Standby { .. } if released.is_some() => Decision::go(
            AgentState::Standby,
            RELEASED_POSITION_PENDING,
            "the Lease is this pod's and names the position the primary before it stopped at: starting as a standby, promoted once it has that position",
        )
        .with_actions(super::standby::start_standby(spec, seen)),
        DataDir::Empty | DataDir::Interrupted | DataDir::Foreign => {
            held(AgentState::Bootstrapping, "bootstrapping")
        }
        DataDir::Standby { .. } => held(
            AgentState::PromotingLocally,
            "a standby's data: promoting it locally",
        ),
        DataDir::Primary { .. } => held(
            AgentState::StartingPrimary,
            "a primary's data: starting writable",
        ),
    }
}

/// Primary data is ready: start writable right after an accepted renewal.
pub(super) fn starting_primary(
    spec: &AgentSpec,
    seen: &Observation,
    signalled: bool,
) -> AgentDecision {
    if signalled {
        return stopped("asked to stop before the writable start");
    }
    if let Some(changed) = role_changed(seen) {
        return changed;
    }
    match standing(spec, seen) {
        Standing::Mine => Decision::go(
            AgentState::Primary,
            STARTED_WRITABLE,
            "the Lease is this pod's and was just renewed: starting writable",
        )
        .with_actions(renew(spec, false))
        .with_actions([AgentAction::StartPrimary]),
        Standing::Elsewhere(holder) => Decision::go(
            AgentState::AwaitingLease,
            LEASE_MOVED,
            format!("the Lease names {holder}: waiting for it again"),
        ),
        Standing::Unread => Decision::stay(
            WAITING_FOR_LEASE,
            "the Lease cannot be read: waiting before the writable start",
        )
        .requeue(spec.period()),
    }
}
