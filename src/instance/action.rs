//! The agent's effects, as data: what [`decide`](super::decide::decide) asks the
//! runtime to do.
//!
//! The actions of one decision run in order; a failing one stops the rest (and a
//! transition that carried them is not taken), as the engine's driver does. So
//! `[Renew, Promote]` promotes only after the renewal was accepted.

use std::time::Duration;

use super::observe::Lsn;

/// One effect of the agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentAction {
    /// SIGKILL a postmaster this agent did not start (and its children): a server
    /// started by hand runs unsupervised and, on primary data, writable.
    KillStray {
        /// Its process id.
        pid: u32,
    },
    /// `initdb`, the superuser's password, the replication role and the optional
    /// database, behind the in-progress marker (an interrupted bootstrap is redone).
    Bootstrap,
    /// Start standby data locally (not listening), `pg_ctl promote`, stop it: the data
    /// becomes a primary's on a new timeline.
    PromoteLocally,
    /// Wait (within its bound) for a writable primary upstream, then `pg_basebackup`
    /// into an emptied `$PGDATA`, behind the in-progress marker.
    Clone,
    /// Wait (within its bound) for a writable primary upstream, `CHECKPOINT` it, then
    /// `pg_rewind` `$PGDATA` against it and make it a standby's.
    Rewind,
    /// Write the managed configuration for a standby and start the server.
    StartStandby,
    /// Write the managed configuration for a primary and start the server writable.
    StartPrimary,
    /// `SELECT pg_promote(wait => false)` on the local standby.
    Promote,
    /// PUT the Lease as read back with `renewTime = now` (wall clock taken before the
    /// request) and `leaseDurationSeconds` = the L this agent's fence runs with, its
    /// `resourceVersion` as the precondition, bounded in time. Accepted only if it still
    /// names this pod; the runtime records when an accepted renewal began.
    Renew {
        /// The L this agent runs with, published in `spec.leaseDurationSeconds`.
        lease: Duration,
        /// Drop the annotation `lockstep.dev/released-lsn`: this server is writable and
        /// has moved past it.
        drop_released_lsn: bool,
        /// Add the annotation `lockstep.dev/initialized` if it is missing: this pod has
        /// the cluster's data (every renewal but the one before a bootstrap).
        mark_initialized: bool,
    },
    /// PUT the Lease back without a holder, with `lockstep.dev/released-by` = this pod
    /// and, given a position, `lockstep.dev/released-lsn` = it; preconditioned on the
    /// `resourceVersion` of a read that named this pod.
    Release {
        /// The last position the stopped primary wrote.
        lsn: Option<Lsn>,
    },
    /// Point the standby's WAL receiver at the pod the Lease holder identity `holder`
    /// names (its stable DNS name), or at nobody, and reload: PostgreSQL restarts the
    /// receiver when `primary_conninfo` changes, and runs none while it is empty.
    Follow {
        /// The holder to stream from; `None`: nobody.
        holder: Option<String>,
    },
    /// A clean stop (`pg_ctl stop -m fast`, SIGINT to the postmaster), not waited for.
    StopClean,
    /// An immediate stop (SIGQUIT to the postmaster), not waited for.
    StopImmediate,
    /// SIGKILL to the postmaster and every child it has.
    Kill,
}
