//! Unit tests of the agent's decisions, one rule each.

mod answers;
mod metrics;
mod prepare;
mod serve;
mod stop;
mod table;

use std::time::Duration;

use super::*;
use crate::engine::{Decision, Wait};
use crate::pod::Role;

const ME: &str = "pg-0/u0";

/// L = 15 s, T = 7 s, R = 2 s, G = 2 s, a clean stop bounded to 120 s.
fn spec() -> AgentSpec {
    AgentSpec::with_lease(LeaseTerms::for_lease(ME, 15))
}

/// `s` seconds on the monotonic clock.
fn at(s: u64) -> Mono {
    Mono::at(Duration::from_secs(s))
}

/// The Lease naming `holder`, its tenure lasting to 1000 s.
fn lease(holder: Option<&str>) -> LeaseRead {
    LeaseRead::Seen(LeaseSeen {
        holder: holder.map(str::to_owned),
        holder_until: Some(at(1000)),
        ..LeaseSeen::default()
    })
}

/// A pod labelled primary with empty `$PGDATA`, no server, the Lease naming it, at
/// 100 s, renewed 1 s ago.
fn seen() -> Observation {
    Observation {
        role: RoleLabel::Is(Role::Primary),
        data: DataDir::Empty,
        server: Server::Down { exit: None },
        lease: lease(Some(ME)),
        now: at(100),
        renewed: Some(at(99)),
        stray: None,
        finished: None,
        upstream_writable: false,
        not_streaming_since: None,
        streamed: false,
        cloned: false,
        tenure: None,
        upstream: Upstream::Service,
        wal_stall: None,
    }
}

fn writable() -> Server {
    Server::Writable {
        position: Position {
            timeline: 2,
            lsn: Lsn(500),
        },
    }
}

fn standby_at(lsn: u64) -> Server {
    Server::Standby(Standby {
        received: Some(Position {
            timeline: 1,
            lsn: Lsn(lsn),
        }),
        replayed: None,
        streaming: true,
    })
}

fn decide_in(state: &AgentState, seen: &Observation) -> Decision<AgentState, AgentAction> {
    decide(&spec(), state, seen, false)
}

/// The state a decision goes to, with its reason; `None` for a stay.
fn goes(d: &Decision<AgentState, AgentAction>) -> Option<(AgentState, &'static str)> {
    match d {
        Decision::Go { to, reason, .. } => Some((to.clone(), reason)),
        Decision::Stay { .. } => None,
    }
}

/// A renewal by a pod that has the cluster's data (it marks the Lease initialized).
fn renew() -> AgentAction {
    AgentAction::Renew {
        lease: Duration::from_secs(15),
        drop_released_lsn: false,
        mark_initialized: true,
    }
}

fn requeue(d: &Decision<AgentState, AgentAction>) -> Option<Duration> {
    match d {
        Decision::Stay {
            wait: Wait::Requeue(after),
            ..
        } => Some(*after),
        _ => None,
    }
}
