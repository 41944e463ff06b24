//! The PostgreSQL instance manager's pure core: the agent in every PostgreSQL pod, as a
//! machine like the operator's.
//!
//! `lockstep instance` (the runtime, `run/`) runs as PID 1 of each PostgreSQL container.
//! Every round it fills in an [`Observation`] (the role label, `$PGDATA`, the server and
//! its positions, the Lease as read, its monotonic clock), asks [`decide()`] what to do, and
//! carries out the [`AgentAction`]s: this module decides, the runtime acts. The table is
//! declared ([`table::TABLE`]) and exported to `machines/instance.{yaml,md}`; the
//! PostgresCluster model check drives this same `decide` for every pod.
//!
//! ```text
//!  Starting ──labelled primary──► AwaitingLease ──Lease names it, renewed──► Bootstrapping ─┐
//!     │                               │        └──────────────────────────► PromotingLocally ┤
//!     │                               └── released position, standby data ─┐                 ▼
//!     │ replica/demoted                                                    │          StartingPrimary
//!     ├──► Cloning ───────────────┐                                        │                 │ renewed, started
//!     ├──► Rewinding ──(fails)──► │                                        ▼                 ▼
//!     └──────────────────────────►└──────────────────────────────────► Standby ──chosen──► Promoting ──► Primary
//!                                                                          │  renewed,          │            │
//!                                                                          │  pg_promote        └─────┬──────┘
//!                                         Exited ◄── Releasing ◄── Stopping ◄──demoted / SIGTERM──┘ (renewing)
//!                                           ▲                          │
//!                                           └──────── Fencing ◄────────┴──── Lease lost / overdue / stop too long
//! ```
//!
//! `machines/instance.md` draws every edge and links it to the file that takes it.
//!
//! # Guarantees
//! Each holds for the decisions of this module; the runtime's fence thread enforces
//! the deadline again without the main loop (see `docs/instance-manager.md`).
//! - **Writable only as the Lease's holder, renewing.** A server is started writable
//!   only right after a renewal of the Lease by this pod was accepted
//!   (`[Renew, StartPrimary]`: the start runs only if the renewal did), and a standby
//!   promotes itself (`[Renew, Promote]`) only while labelled primary and named by the
//!   Lease. Nothing else promotes a server: a standby found writable unasked is fenced.
//! - **Down by `T`.** While a server may write (`Promoting`, `Primary`, a primary's
//!   `Stopping`, `Fencing`), no renewal accepted for `T - G` starts an immediate stop,
//!   and `T` (or `G` of an immediate stop) a kill; stays requeue no later than that
//!   deadline. `T` is counted on the monotonic clock from the *start* of the last accepted
//!   renewal, so it is never under-counted.
//! - **A Lease naming another holder, or none, stops a server that may write at once**,
//!   and so does a role label that is no role.
//! - **No acknowledged commit is left behind in a planned hand-over.** A
//!   primary labelled `demoted` (or asked to stop) stops cleanly, *renewing the Lease while
//!   the stop runs*, so the operator never hands the Lease over by expiry while the
//!   walsenders still send. Once stopped cleanly it releases the Lease with its shutdown
//!   checkpoint's position (`lockstep.dev/released-lsn`), retrying every round until it
//!   sees the release or the Lease as last renewed would expire. A chosen standby
//!   promotes only once it has received up to that position (or a person removed it).
//! - **A clean stop is bounded.** It is escalated to an immediate stop when it outlasts
//!   `clean_stop`, or when no renewal was accepted for `T - G`; the immediate stop to a
//!   kill after `G` or at `T`. An escalated stop releases nothing: its last position is
//!   not known, so the operator goes by expiry and the members' positions.
//! - **The L published is the L the fence runs with.** Every renewal writes this
//!   agent's L into `spec.leaseDurationSeconds`, so the operator knows the longest `L` a living holder may use.
//! - **No stray postmaster.** Before its own server runs, a postmaster on `$PGDATA` that
//!   this agent did not start (one started by hand) is killed.
//! - **No empty database in place of the cluster's.** Every renewal made with data on
//!   the volume marks the Lease `lockstep.dev/initialized` (the first one right before
//!   the first writable start); while it is there, a pod labelled primary with no data
//!   (its volume lost) never runs `initdb`: it waits, and the operator fails over to a
//!   member that has the data. Patroni's `initialize` key plays the same part.
//! - **No standby waits for ever on a primary it cannot follow.** A standby labelled
//!   replica that has not streamed for `standby_stall` while a writable primary answers
//!   upstream stops cleanly; its restart rewinds it against that primary. A standby
//!   chosen to promote is never stopped for it.
//!
//! # Assumptions
//! - The runtime observes truthfully and acts as the actions say: the actions of one
//!   decision in order, a failing one stopping the rest (a transition that carried it is
//!   not taken); `renewed` is when an *accepted* renewal began, on a monotonic clock.
//! - The state is in memory: a restarted container starts from `Starting` and finds its
//!   way from the role label and `$PGDATA` (markers make an interrupted bootstrap or clone
//!   visible). So every exit restarts the container, which the kubelet does.
//! - `T + G`-style bounds hold only while the process runs: a pause of the whole pod (a
//!   frozen cgroup, a VM pause) stops the agent *and* the server, so nothing is written
//!   meanwhile, but the server resumes before the agent notices. In asynchronous
//!   replication that is an assumption (the operator waits `renewTime + L + S`, longer
//!   than any pause it must outlast is not guaranteed), until the zero-loss issue
//!   removes it.
//! - `T < L`, and `T - G` leaves room for several rounds of `R`.
//! - The `initialized` mark lives on the Lease: a Lease deleted by hand (or the
//!   annotation removed) takes it away until a holder with data renews again, and pods
//!   still running a manager from before the mark was introduced do not write it.
//!
//! # Errors
//! `decide` has no error path. A failed bootstrap, clone, local promotion or rewind (with
//! re-cloning off) ends in `Exited { PrepareFailed }` (status 4); an unknown role label
//! or foreign `$PGDATA` in `Misconfigured` (2); a fence in `Fenced` (5); a clean stop in
//! `Stopped` (0); a server that exits on its own in its own status. The runtime's I/O
//! errors are its own (`run/`).

pub mod action;
pub mod decide;
pub mod machine;
pub mod objects;
pub mod observe;
/// The runtime (`lockstep instance`): the I/O edge that runs [`decide()`].
#[cfg(target_os = "linux")]
pub mod run;
pub mod state;
pub mod table;
#[cfg(test)]
mod tests;

pub use action::AgentAction;
pub use decide::{decide, may_answer};
pub use machine::{AgentSpec, Instance, LeaseTerms};
pub use observe::{
    DataDir, Finished, LeaseRead, LeaseSeen, Lsn, Mono, Observation, Position, ReleasedAt,
    RoleLabel, Server, Standby, Task, Tenure, Upstream, WalStall,
};
pub use state::{AgentKind, AgentState, ExitCode, FenceStep};
