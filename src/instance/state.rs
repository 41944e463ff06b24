//! The agent's states: what it is doing with its server and the Lease.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use strum::EnumDiscriminants;

use super::observe::{Lsn, Mono};

/// The state of a pod's agent. It lives in the agent's memory: a restarted container
/// starts again from [`AgentState::Starting`] and finds its way from the role label and
/// `$PGDATA` (see the module's `# Assumptions`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema, EnumDiscriminants)]
#[strum_discriminants(
    name(AgentKind),
    vis(pub),
    derive(strum::IntoStaticStr, strum::EnumIter),
    doc = "The kind of an [`AgentState`]: its variant without data."
)]
#[serde(tag = "name", rename_all_fields = "camelCase")]
pub enum AgentState {
    /// Reading the role label and `$PGDATA`; no server runs.
    Starting,
    /// Labelled primary: waiting until the Lease names this pod before preparing a
    /// writable start.
    AwaitingLease,
    /// Running `initdb` and creating the roles (an empty data directory, labelled
    /// primary).
    Bootstrapping,
    /// Promoting standby data locally before a writable start (labelled primary).
    PromotingLocally,
    /// Primary data is ready: the server starts writable right after a renewal of the
    /// Lease by this pod was accepted.
    StartingPrimary,
    /// Cloning the primary with `pg_basebackup`.
    Cloning,
    /// Rewinding an old primary's data (or a standby that may have streamed past a
    /// failover) against the primary with `pg_rewind`.
    Rewinding,
    /// The server runs as a standby.
    Standby,
    /// The standby was asked to promote (right after a renewal of the Lease by this pod
    /// was accepted); guarded as a writable server from the request on.
    Promoting,
    /// The server is the writable primary: the agent renews the Lease every `R`.
    Primary,
    /// A clean stop (`fast`: the walsenders send every standby all WAL before the server
    /// exits) runs for a hand-over; the agent keeps renewing while it runs.
    Stopping {
        /// When the clean stop was asked for.
        began: Mono,
        /// Whether this server served as the primary (it releases the Lease with its
        /// last position once stopped); a standby's stop releases nothing.
        primary: bool,
    },
    /// The server is down: the Lease is released, retried every round until it is seen
    /// released. After a clean stop, with the last position written; after a crash,
    /// without one (nobody knows what it acknowledged last), once no process of the
    /// server is left, so the operator need not wait for the Lease to expire.
    Releasing {
        /// The stopped primary's last position (its shutdown checkpoint), if it could
        /// be read.
        lsn: Option<Lsn>,
        /// The server's exit status when it exited on its own (a crash, a kill): the
        /// agent exits with it once the Lease is released. None after a clean stop.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        crashed: Option<i32>,
    },
    /// The server is being stopped at once, because this pod may no longer write (or a
    /// clean stop outlasted its bound).
    Fencing {
        /// When the current step began.
        since: Mono,
        /// The current step.
        step: FenceStep,
    },
    /// The agent is done; the process exits with the code, and the container restarts.
    Exited {
        /// Why.
        code: ExitCode,
    },
}

/// The steps of a fence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema, strum::Display)]
pub enum FenceStep {
    /// `pg_ctl stop -m immediate` (SIGQUIT to the postmaster).
    Immediate,
    /// SIGKILL to the postmaster and every child it has.
    Kill,
}

/// How the agent ends: its process's exit code (the container restarts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema, strum::Display)]
pub enum ExitCode {
    /// 0: stopped cleanly on demotion or on a signal; it rejoins as a standby.
    Stopped,
    /// 2: a configuration error (an unknown role label, a foreign `$PGDATA`).
    Misconfigured,
    /// 4: bootstrap, clone, rewind, local promotion or the start failed.
    PrepareFailed,
    /// 5: fenced: the server was stopped because this pod may no longer write.
    Fenced,
    /// The server exited on its own; the agent exits with the server's status.
    ServerExited(i32),
}

impl ExitCode {
    /// The process exit status.
    pub fn status(self) -> i32 {
        match self {
            ExitCode::Stopped => 0,
            ExitCode::Misconfigured => 2,
            ExitCode::PrepareFailed => 4,
            ExitCode::Fenced => 5,
            ExitCode::ServerExited(code) => code,
        }
    }
}

impl AgentState {
    /// Whether the server may be writable in this state (so the fence guards it).
    pub fn guarded(&self) -> bool {
        matches!(
            self,
            AgentState::Promoting
                | AgentState::Primary
                | AgentState::Stopping { primary: true, .. }
                | AgentState::Fencing { .. }
        )
    }
}
