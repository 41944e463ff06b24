//! Stopping: a clean stop that keeps renewing while it runs and is escalated before the
//! fence deadline, the release of the Lease with the last position written (retried
//! until the Lease would expire), and the fence (an immediate stop, then a kill).

use std::time::Duration;

use super::{AgentDecision, me, next_look, overdue, renew};
use crate::engine::Decision;
use crate::instance::action::AgentAction;
use crate::instance::machine::AgentSpec;
use crate::instance::observe::{DataDir, LeaseRead, Lsn, Mono, Observation, Server};
use crate::instance::state::{AgentState, ExitCode, FenceStep};
use crate::instance::table::reason::{
    FENCED, IMMEDIATE_STOP_OUTLASTED, LEASE_LOST, RELEASE_ABANDONED, RELEASE_OVERTAKEN, RELEASED,
    RELEASING, STOP_OUTLASTED, STOPPED_CLEANLY, STOPPING,
};

fn exited(code: ExitCode, why: &'static str, message: String) -> AgentDecision {
    Decision::go(AgentState::Exited { code }, why, message)
}

fn escalate(seen: &Observation, why: &'static str, message: String) -> AgentDecision {
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

/// A clean stop runs (asked at `began`); `primary`: the server served as the primary.
pub(super) fn stopping(
    spec: &AgentSpec,
    began: Mono,
    primary: bool,
    seen: &Observation,
) -> AgentDecision {
    let guarded = primary && spec.lease.is_some();
    if let Server::Down { .. } = seen.server {
        if !guarded {
            return exited(
                ExitCode::Stopped,
                STOPPED_CLEANLY,
                "stopped cleanly: exiting so the container restarts as a standby".to_owned(),
            );
        }
        // The shutdown checkpoint is the last record this primary wrote: the next
        // primary must have received up to it.
        let lsn = match &seen.data {
            DataDir::Primary {
                clean: true,
                checkpoint: Some(p),
            } => Some(p.lsn),
            _ => None,
        };
        let at = lsn.map_or_else(
            || "(its last position unknown)".to_owned(),
            |l| format!("at {l}"),
        );
        return Decision::go(
            AgentState::Releasing { lsn, crashed: None },
            STOPPED_CLEANLY,
            format!("stopped cleanly {at}: releasing the Lease"),
        );
    }
    let running = seen.now.since(began);
    if running >= spec.clean_stop {
        return escalate(
            seen,
            STOP_OUTLASTED,
            format!(
                "the clean stop outlasted its bound of {}s: stopping at once",
                spec.clean_stop.as_secs()
            ),
        );
    }
    let mut actions = Vec::new();
    let mut look = spec.period().min(spec.clean_stop - running);
    if guarded {
        if let LeaseRead::Seen(l) = &seen.lease {
            if !l.names(me(spec)) {
                let holder = l.holder.as_deref().unwrap_or("nobody");
                return escalate(
                    seen,
                    LEASE_LOST,
                    format!("the Lease names {holder} while the clean stop runs: stopping at once"),
                );
            }
            // Keep renewing: the operator must not hand the Lease over by expiry while
            // the walsenders still send the standbys what this primary wrote.
            actions = renew(spec, false);
        }
        if overdue(spec, seen) {
            return escalate(
                seen,
                STOP_OUTLASTED,
                "no renewal accepted for T - G while the clean stop runs: stopping at once, so that the server is down by T".to_owned(),
            );
        }
        look = look.min(next_look(spec, seen));
    }
    Decision::stay(STOPPING, "a clean stop runs")
        .with_actions(actions)
        .requeue(look.max(Duration::from_millis(100)))
}

/// The server is down: release the Lease (with its last position after a clean stop),
/// every round, until it is seen released, or until the Lease as this pod last renewed
/// it expires. The agent then exits with the server's status if it `crashed`.
pub(super) fn releasing(
    spec: &AgentSpec,
    lsn: Option<Lsn>,
    crashed: Option<i32>,
    seen: &Observation,
) -> AgentDecision {
    let code = crashed.map_or(ExitCode::Stopped, ExitCode::ServerExited);
    let done = |why, message: String| exited(code, why, message);
    let Some(terms) = &spec.lease else {
        return done(RELEASED, "no Lease to release".to_owned());
    };
    match &seen.lease {
        LeaseRead::Seen(l) if l.released_by(me(spec)) => {
            return done(
                RELEASED,
                if crashed.is_some() {
                    "the Lease is released: exiting; the container restarts and waits for the Lease (handed back for crash recovery, or elsewhere by a failover)"
                } else {
                    "the Lease is released: exiting so the container restarts as a standby"
                }
                .to_owned(),
            );
        }
        LeaseRead::Seen(l) if !l.names(me(spec)) => {
            let holder = l.holder.as_deref().unwrap_or("nobody");
            return done(
                RELEASE_OVERTAKEN,
                format!(
                    "the Lease names {holder} before the release got through: the operator goes by the members' positions"
                ),
            );
        }
        _ => {}
    }
    if seen
        .since_renewal()
        .is_none_or(|since| since >= terms.duration)
    {
        return done(
            RELEASE_ABANDONED,
            format!(
                "the release did not get through within L ({}s) of the last renewal: the operator goes by expiry",
                terms.duration.as_secs()
            ),
        );
    }
    let actions = match seen.lease {
        LeaseRead::Seen(_) => vec![AgentAction::Release { lsn }],
        LeaseRead::Unreadable => Vec::new(),
    };
    Decision::stay(RELEASING, "releasing the Lease")
        .with_actions(actions)
        .requeue(spec.period())
}

/// The fence: an immediate stop, then a kill.
pub(super) fn fencing(
    spec: &AgentSpec,
    since: Mono,
    step: FenceStep,
    seen: &Observation,
) -> AgentDecision {
    if let Server::Down { .. } = seen.server {
        return exited(
            ExitCode::Fenced,
            FENCED,
            "fenced: the server is down".to_owned(),
        );
    }
    let deadline_passed = spec.lease.as_ref().is_some_and(|l| {
        seen.since_renewal()
            .is_none_or(|since_renewal| since_renewal >= l.fence)
    });
    match step {
        FenceStep::Immediate if seen.now.since(since) >= spec.immediate_grace || deadline_passed => {
            Decision::go(
                AgentState::Fencing {
                    since: seen.now,
                    step: FenceStep::Kill,
                },
                IMMEDIATE_STOP_OUTLASTED,
                "the immediate stop did not finish in time: killing the postmaster and its children",
            )
            .with_actions([AgentAction::Kill])
        }
        FenceStep::Immediate => {
            // Look again when the grace ends, or at T, whichever comes first.
            let grace_left = spec.immediate_grace.saturating_sub(seen.now.since(since));
            let to_t = match (&spec.lease, seen.since_renewal()) {
                (Some(l), Some(since_renewal)) => l.fence.saturating_sub(since_renewal),
                _ => grace_left,
            };
            Decision::stay(STOPPING, "an immediate stop runs")
                .requeue(grace_left.min(to_t).max(Duration::from_millis(100)))
        }
        FenceStep::Kill => Decision::stay(STOPPING, "killing the postmaster and its children")
            .with_actions([AgentAction::Kill])
            .requeue(Duration::from_millis(500)),
    }
}
