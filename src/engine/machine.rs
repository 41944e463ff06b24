//! The [`Machine`] trait: what a machine author writes.
//!
//! A machine is a pure function from *(spec, persisted state, observed world)* to a
//! [`Decision`]. It performs no I/O. Side effects are returned as data (`Action`s) and
//! carried out by the driver; the new state is persisted by the engine.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::time::Duration;

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Serialize, de::DeserializeOwned};

/// A declared edge of a machine's transition table.
///
/// Edges are between state *kinds* (the enum variant, ignoring its data) and carry the
/// reason that a decision taking this edge must give. The engine refuses any transition
/// whose `(from, to, reason)` is not declared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Edge<K: 'static> {
    /// The kind of state the edge leaves.
    pub from: K,
    /// The kind of state the edge enters.
    pub to: K,
    /// The reason a decision gives when it takes this edge (a machine constant).
    pub reason: &'static str,
    /// One line for humans: when the edge is taken.
    pub when: &'static str,
    /// The source file (relative to the crate root, as `file!()` gives it) whose code
    /// takes the edge; empty when not recorded.
    pub by: &'static str,
}

impl<K> Edge<K> {
    /// Declare an edge `from → to` taken for `reason`, described by `when`.
    pub const fn new(from: K, to: K, reason: &'static str, when: &'static str) -> Self {
        Self {
            from,
            to,
            reason,
            when,
            by: "",
        }
    }

    /// Record the source file whose code takes this edge.
    #[must_use]
    pub const fn taken_in(mut self, by: &'static str) -> Self {
        self.by = by;
        self
    }
}

/// How long a stay lasts before the driver reconciles again on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Wait {
    /// Nothing to poll: the next reconcile comes from a watch event on the object or
    /// something it owns.
    #[default]
    Watch,
    /// Reconcile again after this long even if nothing is observed to change.
    Requeue(Duration),
}

/// How a stay should be reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Health {
    /// Waiting or at rest as expected.
    #[default]
    Healthy,
    /// Blocked on something that needs attention (a failed hook, a failed backup, an
    /// invalid spec). Projected as `Degraded=True` with the stay's reason and message.
    Degraded,
}

/// How long a state may wait on something outside (a Job, a pod, a Lease, a person)
/// before the engine reports it `Degraded`, and what a person can do then.
///
/// Every state declares one ([`Machine::deadline`]). Only a state that waits on nothing
/// outside — one where the workload rests ([`Machine::is_ready`]) or one that is done
/// ([`Machine::finalized`]) — may declare [`Deadline::None`]; the engine refuses to act
/// in any other state that does ([`reason::UNDECLARED_DEADLINE`](super::conditions::reason::UNDECLARED_DEADLINE)),
/// and the model checker reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deadline {
    /// The state waits on nothing outside: it rests or is done.
    None,
    /// The state waits on something outside for at most `limit`.
    Within {
        /// How long the state may last before it is reported `Degraded`
        /// (`ProgressDeadlineExceeded`).
        limit: Duration,
        /// What a person can do once it has passed (an annotation to set, an object to
        /// fix), named in the `Degraded` message.
        way_out: &'static str,
    },
}

impl Deadline {
    /// A deadline of `minutes`, past which a person can do `way_out`.
    pub const fn minutes(minutes: u64, way_out: &'static str) -> Self {
        Deadline::Within {
            limit: Duration::from_secs(minutes * 60),
            way_out,
        }
    }

    /// The limit, if the state has one.
    pub fn limit(self) -> Option<Duration> {
        match self {
            Deadline::None => None,
            Deadline::Within { limit, .. } => Some(limit),
        }
    }
}

/// Whether `state` declares the deadline it must: a state that neither rests nor is done
/// waits on something outside and must declare [`Deadline::Within`].
///
/// # Errors
/// A message naming the state that waits without a deadline.
pub fn deadline_declared<M: Machine>(state: &M::State) -> Result<(), String> {
    let waits = !M::rests(state) && !M::finalized(state);
    if waits && M::deadline(state) == Deadline::None {
        return Err(format!(
            "{} state {} waits on something outside but declares no deadline",
            M::NAME,
            kind_name::<M>(state)
        ));
    }
    Ok(())
}

/// The world as the machine sees it on one reconcile.
///
/// `observed` is the machine's own snapshot of the objects it owns; the other fields are
/// facts every machine shares, supplied by the engine.
#[derive(Debug, Clone)]
pub struct World<O> {
    /// The machine-specific observation.
    pub observed: O,
    /// The custom resource has a deletion timestamp.
    pub deleting: bool,
    /// The reconcile's clock reading, truncated to whole seconds.
    pub now: DateTime<Utc>,
    /// When the persisted state was entered.
    pub entered_at: DateTime<Utc>,
    /// The request tokens the persisted record has taken on, by kind
    /// ([`Machine::acks`]).
    pub acks: BTreeMap<String, String>,
    /// The reason of the transition that entered the persisted state (the last history
    /// entry's; empty when the history does not tell), so that a resting state can keep
    /// saying what its arrival means (a backup whose outcome is unknown).
    pub entered_by: String,
}

impl<O> World<O> {
    /// The last token of request kind `kind` the record has taken on.
    pub fn acked(&self, kind: &str) -> Option<&str> {
        self.acks.get(kind).map(String::as_str)
    }

    /// How long the machine has been in its current state.
    pub fn in_state_for(&self) -> Duration {
        (self.now - self.entered_at).to_std().unwrap_or_default()
    }
}

/// What a machine decides on one reconcile.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision<S, A> {
    /// Keep the current state, possibly acting (for example restoring drifted objects).
    Stay {
        /// A constant naming why the machine stays.
        reason: &'static str,
        /// A deterministic human-readable message (no timestamps or counters that change
        /// while nothing else does: it is projected into status).
        message: String,
        /// Effects to carry out; each must be idempotent.
        actions: Vec<A>,
        /// When to look again.
        wait: Wait,
        /// Whether the stay is healthy or blocked.
        health: Health,
    },
    /// Move to a new state, carrying out `actions` first.
    Go {
        /// The next state.
        to: S,
        /// The reason; must match a declared edge.
        reason: &'static str,
        /// A deterministic human-readable message.
        message: String,
        /// Effects to carry out before the new state is persisted; each must be idempotent.
        actions: Vec<A>,
    },
}

impl<S, A> Decision<S, A> {
    /// A healthy stay that waits for watch events.
    pub fn stay(reason: &'static str, message: impl Into<String>) -> Self {
        Decision::Stay {
            reason,
            message: message.into(),
            actions: Vec::new(),
            wait: Wait::Watch,
            health: Health::Healthy,
        }
    }

    /// A transition with no actions.
    pub fn go(to: S, reason: &'static str, message: impl Into<String>) -> Self {
        Decision::Go {
            to,
            reason,
            message: message.into(),
            actions: Vec::new(),
        }
    }

    /// Attach actions to this decision.
    #[must_use]
    pub fn with_actions(mut self, more: impl IntoIterator<Item = A>) -> Self {
        match &mut self {
            Decision::Stay { actions, .. } | Decision::Go { actions, .. } => actions.extend(more),
        }
        self
    }

    /// Make a stay requeue after `after` (no effect on a transition).
    #[must_use]
    pub fn requeue(mut self, after: Duration) -> Self {
        if let Decision::Stay { wait, .. } = &mut self {
            *wait = Wait::Requeue(after);
        }
        self
    }

    /// Make a stay requeue after `after` when there is one; `None` leaves the wait as
    /// it is (no effect on a transition).
    #[must_use]
    pub fn requeue_if_any(self, after: Option<Duration>) -> Self {
        match after {
            Some(after) => self.requeue(after),
            None => self,
        }
    }

    /// Mark a stay as degraded (no effect on a transition).
    #[must_use]
    pub fn degraded(mut self) -> Self {
        if let Decision::Stay { health, .. } = &mut self {
            *health = Health::Degraded;
        }
        self
    }

    /// The actions this decision carries.
    pub fn actions(&self) -> &[A] {
        match self {
            Decision::Stay { actions, .. } | Decision::Go { actions, .. } => actions,
        }
    }

    /// The decision's reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Decision::Stay { reason, .. } | Decision::Go { reason, .. } => reason,
        }
    }
}

/// A declared, persisted, pure state machine.
///
/// # Guarantees the engine gives an implementation
/// - `decide` is called with the state last *persisted* in `.status` (never an
///   in-memory copy), so it sees the same input after a restart.
/// - A [`Decision::Go`] is persisted only if its edge is declared in [`Machine::table`];
///   otherwise nothing is executed and the object reports `Degraded`.
/// - Actions of one decision are executed in order, before the status write.
/// - The request tokens a state takes on ([`Machine::acks`]) are persisted with that
///   state and stay visible ([`World::acked`]) through every later state.
/// - A missing record never releases the finalizer while [`Machine::holds_data`] is
///   true: the machine starts again from [`Machine::initial`] and takes its deletion
///   path.
///
/// # Assumptions the engine makes of an implementation
/// - `decide` is pure and deterministic: no clock reads (use [`World::now`]), no I/O,
///   no randomness.
/// - Every action is idempotent: applying it twice, or applying it after a crash that
///   lost the status write that followed it, converges to the same world. Deletes name
///   the UID they mean; irreversible steps record a token in the state before acting.
/// - Messages are deterministic so that an idle reconcile writes nothing.
/// - When [`World::deleting`] is set, the machine makes its way to a state for which
///   [`Machine::finalized`] is true.
pub trait Machine: 'static {
    /// The name used for exported tables, metrics and the finalizer.
    const NAME: &'static str;
    /// The version of the persisted state's encoding, stored as `stateVersion`.
    const STATE_VERSION: u32 = 1;
    /// What a person can do to let a deleted object go when its deletion path is blocked
    /// (a final backup the API server refuses to create), named in a `RequestRefused`
    /// message while the object is being deleted.
    const DELETION_WAY_OUT: Option<&'static str> = None;

    /// The user's desired state.
    type Spec: Debug;
    /// The persisted state: an enum whose variants may carry data.
    type State: Clone + Debug + PartialEq + Serialize + DeserializeOwned + JsonSchema;
    /// The kind of a state: its variant without data (strum's `EnumDiscriminants`).
    type Kind: Copy
        + Debug
        + Eq
        + Into<&'static str>
        + strum::IntoEnumIterator
        + for<'a> From<&'a Self::State>
        + 'static;
    /// The machine's snapshot of the world it manages.
    type Observed: Clone + Debug;
    /// A side effect, as data.
    type Action: Clone + Debug + PartialEq;

    /// The state a new object starts in.
    fn initial() -> Self::State;

    /// The declared transition table.
    fn table() -> &'static [Edge<Self::Kind>];

    /// Decide what to do next. Pure.
    fn decide(
        spec: &Self::Spec,
        state: &Self::State,
        world: &World<Self::Observed>,
    ) -> Decision<Self::State, Self::Action>;

    /// Whether the state is a resting state in which the workload serves.
    fn is_ready(state: &Self::State) -> bool;

    /// Whether the state is at rest, waiting on nothing outside: every ready state, and
    /// a rest the user asked for in which nothing serves (a hibernated cluster). `Ready`
    /// is false there and `Progressing` too.
    fn rests(state: &Self::State) -> bool {
        Self::is_ready(state)
    }

    /// How long the machine may stay in `state` before it is reported `Degraded`, and
    /// the way out a person has then. Every state that neither rests ([`Machine::rests`])
    /// nor is done ([`Machine::finalized`]) waits on something outside and must declare
    /// [`Deadline::Within`] ([`deadline_declared`]).
    fn deadline(state: &Self::State) -> Deadline;

    /// Whether cleanup is complete and the finalizer may be removed.
    fn finalized(state: &Self::State) -> bool;

    /// The request tokens `state` takes on, as `(kind, token)` (for example
    /// `("lockstep.dev/backup-now", "t1")` for a state serving that backup request). The
    /// engine records them in the persisted record's `acks` in the same write that
    /// persists the state, and keeps them through later states ([`World::acked`]), so a
    /// machine can tell a served request from a new one after the objects that served
    /// it were pruned.
    fn acks(_state: &Self::State) -> Vec<(&'static str, String)> {
        Vec::new()
    }

    /// Whether the world may hold data worth a final backup. Asked only when the
    /// object is being deleted and its persisted record is missing (a status wiped by a
    /// restore or an edit): when true, the engine records the initial state again and
    /// the machine's deletion path runs (taking its final backup); when false (nothing
    /// was ever created), the finalizer is released at once. Defaults to true: a lost
    /// record never skips a final backup unless the machine knows there is no data.
    fn holds_data(_observed: &Self::Observed) -> bool {
        true
    }

    /// A short label for the state's progress within its kind (for example the upgrade
    /// step), shown next to the phase. `None` when the kind says it all.
    fn step_label(_state: &Self::State) -> Option<String> {
        None
    }
}

/// The kind of a state, as a static name.
pub fn kind_name<M: Machine>(state: &M::State) -> &'static str {
    M::Kind::from(state).into()
}

/// Whether the table declares `from → to` for `reason`.
pub fn is_declared<M: Machine>(from: &M::State, to: &M::State, reason: &str) -> bool {
    let (from, to) = (M::Kind::from(from), M::Kind::from(to));
    M::table()
        .iter()
        .any(|e| e.from == from && e.to == to && e.reason == reason)
}
