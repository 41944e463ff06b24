//! The Lockstep engine: durable, declared state machines persisted in `.status`.
//!
//! A [`Machine`] is a pure function from *(spec, persisted state, observed world)* to a
//! [`Decision`]: stay, or take one declared edge to a new state, with side effects
//! returned as data. [`step()`] turns a decision into what to execute and what to write;
//! the driver ([`crate::driver`]) is the only part that talks to the API server.
//!
//! ```text
//!   watch events ─► load status.machine ─► observe (caches) ─► decide (pure)
//!                                                                │
//!        Event ◄─ one fenced status patch ◄─ execute actions ◄───┘
//! ```
//!
//! # Guarantees
//! - **One declared transition per reconcile.** A transition is persisted only if its
//!   `(from kind, to kind, reason)` is in the machine's table. An undeclared one executes
//!   nothing, is not persisted, and raises `Degraded=True` (reason
//!   `UndeclaredTransition`) with a Warning event.
//! - **Durable.** The state lives in `status.machine`; every reconcile rebuilds the
//!   machine from it, so a restarted operator resumes where the last written state says.
//! - **Fenced.** The status write carries the resourceVersion that was read; a conflict
//!   means re-read and re-decide, never a blind retry. A deposed leader cannot persist a
//!   step twice.
//! - **Quiet.** An idle reconcile writes nothing: phase and conditions are projected
//!   from the state deterministically, condition times move only when a status flips,
//!   and `enteredAt`/history times are written only on a transition.
//! - **Safe on unknown input.** A record that does not decode (or has a newer
//!   `stateVersion`) is held: no decision, no actions, `Degraded=True`
//!   (`UndecodableState`). Nothing panics.
//! - **Deadlines.** A state with a deadline that is held past it reports
//!   `Progressing=False` and `Degraded=True` with reason `ProgressDeadlineExceeded`; the
//!   driver requeues so this is noticed without any event.
//! - **Finalizers.** The driver adds the finalizer before anything is created and removes
//!   it only once a state for which [`Machine::finalized`] is true has been persisted.
//!
//! # Assumptions
//! What a machine author must guarantee, stated on [`Machine`]: `decide` is pure and
//! deterministic, every action is idempotent (deterministic names, UID-preconditioned
//! deletes, tokens recorded in the state before irreversible steps), and messages carry
//! nothing that changes while the world does not.
//!
//! # Errors
//! The pure engine has no error path: bad persisted input becomes a `Degraded` hold and
//! an undeclared edge becomes a refusal. I/O errors are the driver's
//! ([`crate::driver::Error`]): they are recorded as `lastError`, and the object is retried
//! with per-object exponential backoff and jitter.

#[cfg(any(test, feature = "check"))]
pub mod check;
pub mod conditions;
pub mod export;
pub mod machine;
#[cfg(any(test, feature = "check"))]
pub mod planted;
pub mod record;
pub mod schema;
pub mod step;
pub mod table;
#[cfg(test)]
mod tests;

pub use machine::{Deadline, Decision, Edge, Health, Machine, Wait, World, deadline_declared};
pub use record::{Condition, EngineStatus, HistoryEntry, MachineRecord, RawRecord};
pub use step::{Input, Note, NoteKind, Outcome, Taken, step};
