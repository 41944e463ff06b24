//! The agent's declared transition table and its reasons.
//!
//! Each row names the file whose code takes the edge; `machines/instance.md` links to
//! it, and a test keeps the two in step (the file names the reason; no other decide file
//! does).

use super::state::AgentKind;
use crate::engine::Edge;

/// Reasons: every edge's, and the stays' (they show in the agent's logs).
pub mod reason {
    /// Edge: labelled primary; it waits for the Lease before it prepares.
    pub const LABELLED_PRIMARY: &str = "LabelledPrimary";
    /// Edge: labelled replica or demoted with nothing (or an interrupted bootstrap or
    /// clone) in `$PGDATA`: it clones the primary.
    pub const NO_DATA: &str = "NoData";
    /// Edge: labelled replica or demoted with an old primary's data: it rewinds.
    pub const OLD_PRIMARY_DATA: &str = "OldPrimaryData";
    /// Edge: labelled replica or demoted with a standby's data that was shut down
    /// cleanly while a writable primary answers: it rewinds (a no-op unless it streamed
    /// past a failover's branch point).
    pub const STANDBY_MAY_HAVE_DIVERGED: &str = "StandbyMayHaveDiverged";
    /// Edge: labelled replica or demoted with a standby's data: it starts as a standby.
    pub const STANDBY_DATA: &str = "StandbyData";
    /// Edge: the role label is no role.
    pub const UNKNOWN_ROLE: &str = "UnknownRole";
    /// Edge: `$PGDATA` holds something that is not a data directory of ours.
    pub const FOREIGN_DATA: &str = "ForeignData";
    /// Edge: the role label is no longer primary; it starts over (as a standby).
    pub const ROLE_CHANGED: &str = "RoleChanged";
    /// Edge: the Lease names this pod and a renewal by it was accepted: it prepares (or
    /// starts) a writable server.
    pub const LEASE_HELD: &str = "LeaseHeld";
    /// Edge: the Lease names this pod and carries the position the primary before it
    /// released it at, and `$PGDATA` is a standby's: it starts as a standby, promoted
    /// once it has received that position.
    pub const RELEASED_POSITION_PENDING: &str = "ReleasedPositionPending";
    /// Edge: the Lease names another holder before the writable start: it waits again.
    pub const LEASE_MOVED: &str = "LeaseMoved";
    /// Edge: `initdb` and the roles are done.
    pub const BOOTSTRAPPED: &str = "Bootstrapped";
    /// Edge: the standby data was promoted locally.
    pub const PROMOTED_LOCALLY: &str = "PromotedLocally";
    /// Edge: preparing the data directory (bootstrap, local promotion, clone, rewind
    /// without a re-clone) or starting the server failed.
    pub const PREPARE_FAILED: &str = "PrepareFailed";
    /// Edge: the writable server was started right after an accepted renewal.
    pub const STARTED_WRITABLE: &str = "StartedWritable";
    /// Edge: the clone is done; the standby starts.
    pub const CLONED: &str = "Cloned";
    /// Edge: the rewind is done; the standby starts.
    pub const REWOUND: &str = "Rewound";
    /// Edge: `pg_rewind` failed: the data directory is discarded and cloned again.
    pub const REWIND_FAILED: &str = "RewindFailed";
    /// Edge: the rewind never reached a writable primary; `$PGDATA` is kept.
    pub const REWIND_UNREACHED: &str = "RewindUnreached";
    /// Edge: labelled primary, the Lease names this pod, it has the released position
    /// (if any), and a renewal just made was accepted: it asks its server to promote.
    pub const CHOSEN: &str = "Chosen";
    /// Edge: the standby became writable without this agent asking it to (a
    /// `pg_promote()` from outside): it is fenced at once.
    pub const PROMOTED_BY_SOMEONE_ELSE: &str = "PromotedBySomeoneElse";
    /// Edge: the server finished its promotion and accepts writes.
    pub const PROMOTED: &str = "Promoted";
    /// Edge: the Lease names another holder, or none, while the server may write.
    pub const LEASE_LOST: &str = "LeaseLost";
    /// Edge: no renewal was accepted for `T - G` (G: the immediate stop's grace) while
    /// the server may write: it is stopped at once, killed by `T`.
    pub const RENEWAL_OVERDUE: &str = "RenewalOverdue";
    /// Edge: the server's WAL, written, has not been flushed any further for the WAL
    /// stall bound (a hung WAL volume: every commit waits): stopped at once, so the
    /// Lease is released or expires and a standby takes over.
    pub const WAL_FLUSH_STALLED: &str = "WalFlushStalled";
    /// Edge: the role label is no role while the server may write.
    pub const ROLE_UNKNOWN_WHILE_WRITABLE: &str = "RoleUnknownWhileWritable";
    /// Edge: labelled `demoted` while it serves as the primary: a clean stop for the
    /// hand-over.
    pub const DEMOTED: &str = "Demoted";
    /// Labelled replica, the standby has not streamed for the stall bound while a
    /// writable primary answers upstream (a timeline it cannot follow, a broken
    /// replication connection): a clean stop, and the restart rewinds it and rejoins.
    pub const STREAM_STALLED: &str = "StreamStalled";
    /// Edge: labelled replica or demoted, the standby's server exited before it ever
    /// streamed, on data this process did not clone, while a writable primary answers:
    /// its data cannot follow that primary as it is (found on the real node: a timeline
    /// switch cut short by a stop leaves a segment every later start refuses), so it is
    /// discarded and cloned again.
    pub const STANDBY_UNFOLLOWABLE: &str = "StandbyUnfollowable";
    /// Edge: the container was asked to stop (SIGTERM: the pod is deleted).
    pub const SIGNALLED: &str = "Signalled";
    /// Edge: the server exited on its own.
    pub const SERVER_EXITED: &str = "ServerExited";
    /// Edge: the clean stop outlasted its bound, or the fence deadline nears: it is
    /// escalated to an immediate stop.
    pub const STOP_OUTLASTED: &str = "StopOutlasted";
    /// Edge: the server stopped cleanly.
    pub const STOPPED_CLEANLY: &str = "StoppedCleanly";
    /// Edge: the Lease was seen released by this pod.
    pub const RELEASED: &str = "Released";
    /// Edge: the Lease names another holder before the release got through: it was
    /// handed over by expiry (the operator then goes by the members' positions).
    pub const RELEASE_OVERTAKEN: &str = "ReleaseOvertaken";
    /// Edge: the release did not get through before the Lease, as this pod last
    /// renewed it, expires: the operator goes by expiry.
    pub const RELEASE_ABANDONED: &str = "ReleaseAbandoned";
    /// Edge: the immediate stop outlasted its grace: the postmaster and its children
    /// are killed.
    pub const IMMEDIATE_STOP_OUTLASTED: &str = "ImmediateStopOutlasted";
    /// Edge: the fenced server is down.
    pub const FENCED: &str = "Fenced";

    /// Stay: no role label yet.
    pub const WAITING_FOR_ROLE: &str = "WaitingForRole";
    /// Stay: the Lease does not name this pod (or cannot be read), or a renewal was
    /// not accepted yet.
    pub const WAITING_FOR_LEASE: &str = "WaitingForLease";
    /// Stay: a long-running action runs.
    pub const PREPARING: &str = "Preparing";
    /// Stay: a postmaster this agent did not start runs: it is killed.
    pub const STRAY_POSTMASTER: &str = "StrayPostmaster";
    /// Stay: labelled primary with no data while the Lease says the cluster's database
    /// exists: it never bootstraps an empty one in its place.
    pub const ALREADY_INITIALIZED: &str = "AlreadyInitialized";
    /// Stay: a standby follows the primary.
    pub const FOLLOWING: &str = "Following";
    /// Stay: the Lease moved, or its holder's tenure ran out: the standby streams from
    /// the new holder, or from nobody.
    pub const UPSTREAM_MOVED: &str = "UpstreamMoved";
    /// Stay: chosen, but short of the position the primary before it released the
    /// Lease at (or that position is not an LSN).
    pub const HELD_BACK: &str = "HeldBack";
    /// Stay: the server may write; the Lease is renewed every `R`.
    pub const SERVING: &str = "Serving";
    /// Stay: a stop runs.
    pub const STOPPING: &str = "Stopping";
    /// Stay: the release is retried.
    pub const RELEASING: &str = "Releasing";
    /// Stay: the process exits.
    pub const DONE: &str = "Done";
}

use reason::*;

/// The files whose code takes the edges.
mod by {
    pub const PREPARE: &str = "src/instance/decide/prepare.rs";
    pub const LEASE: &str = "src/instance/decide/lease.rs";
    pub const STANDBY: &str = "src/instance/decide/standby.rs";
    pub const GUARD: &str = "src/instance/decide/guard.rs";
    pub const STOP: &str = "src/instance/decide/stop.rs";
}

/// The declared transition table.
pub static TABLE: &[Edge<AgentKind>] = crate::edges![AgentKind;
    Starting -> {
        AwaitingLease: LABELLED_PRIMARY, "labelled primary", by::PREPARE;
        Cloning: NO_DATA, "labelled replica or demoted; $PGDATA is empty, or a bootstrap or clone was interrupted", by::PREPARE;
        Rewinding: OLD_PRIMARY_DATA, "labelled replica or demoted; $PGDATA is an old primary's", by::PREPARE;
        Rewinding: STANDBY_MAY_HAVE_DIVERGED, "labelled replica or demoted; $PGDATA is a standby's, shut down cleanly, and a writable primary answers", by::PREPARE;
        Standby: STANDBY_DATA, "labelled replica or demoted; $PGDATA is a standby's", by::PREPARE;
        Exited: UNKNOWN_ROLE, "the role label is no role", by::PREPARE;
        Exited: FOREIGN_DATA, "$PGDATA holds something that is no data directory of ours", by::PREPARE;
        Exited: SIGNALLED, "asked to stop before preparing anything", by::PREPARE;
    }
    AwaitingLease -> {
        Starting: ROLE_CHANGED, "the role label is no longer primary", by::LEASE;
        Bootstrapping: LEASE_HELD, "the Lease names this pod, a renewal by it was accepted; $PGDATA is empty or interrupted", by::LEASE;
        PromotingLocally: LEASE_HELD, "the Lease names this pod, a renewal by it was accepted; $PGDATA is a standby's", by::LEASE;
        StartingPrimary: LEASE_HELD, "the Lease names this pod, a renewal by it was accepted; $PGDATA is a primary's", by::LEASE;
        Standby: RELEASED_POSITION_PENDING, "the Lease names this pod and a released position; $PGDATA is a standby's: it starts as a standby, promoted once it has that position", by::LEASE;
        Exited: FOREIGN_DATA, "$PGDATA came to hold something that is no data directory of ours while it waited", by::LEASE;
        Exited: SIGNALLED, "asked to stop while waiting", by::LEASE;
    }
    Bootstrapping -> {
        StartingPrimary: BOOTSTRAPPED, "$PGDATA is a primary's", by::PREPARE;
        Exited: PREPARE_FAILED, "initdb or the roles, or the restore from backups (spec.bootstrap.recovery), failed", by::PREPARE;
    }
    PromotingLocally -> {
        StartingPrimary: PROMOTED_LOCALLY, "$PGDATA is a primary's", by::PREPARE;
        Exited: PREPARE_FAILED, "the local promotion failed", by::PREPARE;
    }
    StartingPrimary -> {
        Primary: STARTED_WRITABLE, "the Lease names this pod (or none is configured): renewed, then started writable", by::LEASE;
        Starting: ROLE_CHANGED, "the role label is no longer primary", by::LEASE;
        AwaitingLease: LEASE_MOVED, "the Lease names another holder, or none", by::LEASE;
        Exited: SIGNALLED, "asked to stop before the start", by::LEASE;
    }
    Cloning -> {
        Standby: CLONED, "$PGDATA is a standby's: the standby starts", by::PREPARE;
        Exited: PREPARE_FAILED, "pg_basebackup failed within its bound", by::PREPARE;
    }
    Rewinding -> {
        Standby: REWOUND, "$PGDATA is a standby's: the standby starts", by::PREPARE;
        Starting: REWIND_UNREACHED, "no writable primary answered within the bound, or pg_rewind could not connect to it: nothing changed, $PGDATA is kept and the start is decided again", by::PREPARE;
        Cloning: REWIND_FAILED, "pg_rewind failed once it had reached the primary: $PGDATA is discarded and cloned again", by::PREPARE;
        Exited: PREPARE_FAILED, "pg_rewind failed and re-cloning is off", by::PREPARE;
    }
    Standby -> {
        Promoting: CHOSEN, "labelled primary, the Lease names this pod, the released position (if any) is here: renewed, then pg_promote", by::STANDBY;
        Fencing: PROMOTED_BY_SOMEONE_ELSE, "writable though this agent asked no promotion", by::STANDBY;
        Stopping: SIGNALLED, "asked to stop: a clean stop", by::STANDBY;
        Stopping: STREAM_STALLED, "labelled replica, not streaming for the stall bound while a writable primary answers: a clean stop; the restart rewinds it and rejoins", by::STANDBY;
        Cloning: STANDBY_UNFOLLOWABLE, "labelled replica or demoted, the server exited before it streamed, on data not cloned by this process, while a writable primary answers (and re-cloning is on): $PGDATA is discarded and cloned again", by::STANDBY;
        Exited: SERVER_EXITED, "the server exited", by::STANDBY;
    }
    Promoting -> Primary: PROMOTED, "the server accepts writes", by::STANDBY;
    [Promoting, Primary] -> {
        Fencing: LEASE_LOST, "the Lease names another holder, or none", by::GUARD;
        Fencing: RENEWAL_OVERDUE, "no renewal accepted for T - G", by::GUARD;
        Fencing: WAL_FLUSH_STALLED, "WAL written but not flushed any further for the WAL stall bound (a hung WAL volume)", by::GUARD;
        Fencing: ROLE_UNKNOWN_WHILE_WRITABLE, "the role label is no role", by::GUARD;
        Stopping: DEMOTED, "labelled demoted: a clean stop, renewing while it runs", by::GUARD;
        Stopping: SIGNALLED, "asked to stop: a clean stop, renewing while it runs", by::GUARD;
        Releasing: SERVER_EXITED, "the server exited on its own (a crash, a kill) and no process of it is left: the Lease is released without a position, so a failover need not wait for its expiry", by::GUARD;
    }
    Stopping -> {
        Releasing: STOPPED_CLEANLY, "a primary's server stopped cleanly: the Lease is released with its last position", by::STOP;
        Exited: STOPPED_CLEANLY, "a standby's server (or one without a Lease) stopped cleanly", by::STOP;
        Fencing: STOP_OUTLASTED, "the clean stop outlasted its bound, or no renewal was accepted for T - G", by::STOP;
        Fencing: LEASE_LOST, "a primary's Lease names another holder, or none, while it stops", by::STOP;
    }
    Releasing -> {
        Exited: RELEASED, "the Lease is seen released by this pod (or none is configured)", by::STOP;
        Exited: RELEASE_OVERTAKEN, "the Lease names another holder", by::STOP;
        Exited: RELEASE_ABANDONED, "not seen released by L after the last accepted renewal", by::STOP;
    }
    Fencing -> {
        Fencing: IMMEDIATE_STOP_OUTLASTED, "the immediate stop outlasted G, or T has passed: SIGKILL", by::STOP;
        Exited: FENCED, "the server is down", by::STOP;
    }
];
