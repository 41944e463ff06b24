//! The guard of a server that may write (asked to promote, or the primary): renew the
//! Lease every `R`; stop at once when the Lease names another holder or none, when no
//! renewal was accepted for `T - G`, when its WAL flush stood still behind what it wrote
//! for the WAL stall bound, or when the role label is no role; stop cleanly when
//! labelled `demoted` or asked to stop.

use super::{AgentDecision, fence, me, next_look, overdue, renew, standby};
use crate::engine::Decision;
use crate::instance::action::AgentAction;
use crate::instance::machine::AgentSpec;
use crate::instance::observe::{LeaseRead, Observation, RoleLabel, Server};
use crate::instance::state::AgentState;
use crate::instance::table::reason::{
    DEMOTED, LEASE_LOST, RENEWAL_OVERDUE, ROLE_UNKNOWN_WHILE_WRITABLE, SERVER_EXITED, SERVING,
    SIGNALLED, WAL_FLUSH_STALLED,
};
use crate::pod::Role;

/// A server that may write: `Promoting` or `Primary`.
pub(super) fn guarded(
    spec: &AgentSpec,
    state: &AgentState,
    seen: &Observation,
    signalled: bool,
) -> AgentDecision {
    // `Server::Down` means no process of the server is left (the runtime kills any
    // the postmaster left behind before it says so): the Lease can be released at once,
    // and a failover, or this pod's own crash recovery once the operator hands the
    // Lease back, need not wait for its expiry.
    if let Server::Down { exit } = seen.server {
        let status = exit.unwrap_or(1);
        return Decision::go(
            AgentState::Releasing {
                lsn: None,
                crashed: Some(status),
            },
            SERVER_EXITED,
            format!(
                "the server exited with status {status} and no process of it is left: releasing the Lease"
            ),
        );
    }
    if let Some(terms) = &spec.lease {
        if let LeaseRead::Seen(l) = &seen.lease
            && !l.names(me(spec))
        {
            let holder = l.holder.as_deref().unwrap_or("nobody");
            return fence(
                seen,
                LEASE_LOST,
                format!("the Lease names {holder}: fencing"),
            );
        }
        if overdue(spec, seen) {
            return fence(
                seen,
                RENEWAL_OVERDUE,
                format!(
                    "no renewal of the Lease accepted for {}s (T {}s less G {}s): fencing",
                    terms.fence.saturating_sub(spec.immediate_grace).as_secs(),
                    terms.fence.as_secs(),
                    spec.immediate_grace.as_secs()
                ),
            );
        }
    }
    if let Some(stall) = seen.wal_stall
        && seen.now.since(stall.since) >= spec.wal_stall
    {
        return fence(
            seen,
            WAL_FLUSH_STALLED,
            format!(
                "the WAL written up to {} has not been flushed past {} for {}s (a hung WAL volume?): every commit waits, so the server is stopped and a standby takes over",
                stall.inserted,
                stall.flushed,
                seen.now.since(stall.since).as_secs()
            ),
        );
    }
    let role = match &seen.role {
        RoleLabel::Is(role) => *role,
        RoleLabel::Absent => {
            return fence(
                seen,
                ROLE_UNKNOWN_WHILE_WRITABLE,
                "the role label is gone: fencing".to_owned(),
            );
        }
        RoleLabel::Unknown(value) => {
            return fence(
                seen,
                ROLE_UNKNOWN_WHILE_WRITABLE,
                format!("the role label is {value:?}: fencing"),
            );
        }
    };
    if role == Role::Demoted || signalled {
        let (why, message) = if role == Role::Demoted {
            (
                DEMOTED,
                "labelled demoted: stopping cleanly for the hand-over, renewing meanwhile",
            )
        } else {
            (
                SIGNALLED,
                "asked to stop: stopping cleanly, renewing meanwhile",
            )
        };
        return Decision::go(
            AgentState::Stopping {
                began: seen.now,
                primary: true,
            },
            why,
            message,
        )
        .with_actions([AgentAction::StopClean]);
    }
    if *state == AgentState::Promoting
        && let Some(done) = standby::promoted(seen)
    {
        return done;
    }
    let writable = matches!(seen.server, Server::Writable { .. });
    let has_released = seen.lease.seen().is_some_and(|l| l.released_at.is_some());
    let mut actions = match seen.lease {
        LeaseRead::Seen(_) => renew(spec, writable && has_released),
        LeaseRead::Unreadable => Vec::new(),
    };
    let renewing = spec.lease.is_none() || !actions.is_empty();
    if *state == AgentState::Promoting && matches!(seen.server, Server::Standby(_)) && renewing {
        // Still recovering: ask again (a request that did not get through), right after
        // the renewal.
        actions.push(AgentAction::Promote);
    }
    let message = match state {
        AgentState::Promoting => "promoting: renewing the Lease meanwhile",
        _ => "serving as the primary: renewing the Lease",
    };
    Decision::stay(SERVING, message)
        .with_actions(actions)
        .requeue(next_look(spec, seen))
}
