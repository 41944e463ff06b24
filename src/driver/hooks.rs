//! Observation hooks: how metrics (or a test) watch the driver without touching its loop.
//!
//! The driver calls a [`DriverHooks`] implementation at fixed points of every reconcile.
//! Every method has an empty default, so an implementation overrides only what it needs.
//! Hooks are called synchronously on the reconcile's task: they must be cheap and must not
//! block (increment a counter, send on a channel).

use std::time::Duration;

use super::wakeup::Trigger;

/// The object a hook is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target<'a> {
    /// The machine's name ([`crate::engine::Machine::NAME`]).
    pub machine: &'static str,
    /// The object's namespace.
    pub namespace: &'a str,
    /// The object's name.
    pub name: &'a str,
}

/// How one reconcile ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finished {
    /// Nothing was written: the status already said what the machine decided.
    Idle,
    /// The finalizer was added; the reconcile stopped there (the change re-triggers).
    FinalizerAdded,
    /// The status was written (a transition, or a change of a projected field).
    StatusWritten,
    /// Actions were executed but the status did not change (for example drift repair).
    Acted,
    /// The status write lost a race; the object is re-read and re-decided.
    Conflict,
    /// An error; the object is retried with backoff.
    Failed,
}

/// One event of the custom resources' watch, as [`DriverHooks::resource_event`] sees it.
#[derive(Debug, Clone, Copy)]
pub enum ResourceEvent<'a> {
    /// A (re)list begins: every object still there is seen again before
    /// [`ResourceEvent::Listed`].
    Relisting,
    /// An object was seen (created, changed, or listed).
    Seen {
        /// Its namespace.
        namespace: &'a str,
        /// Its name.
        name: &'a str,
        /// Its `.status` as JSON (`null` when it has none).
        status: &'a serde_json::Value,
    },
    /// An object was deleted.
    Deleted {
        /// Its namespace.
        namespace: &'a str,
        /// Its name.
        name: &'a str,
    },
    /// A (re)list is complete: objects not seen since [`ResourceEvent::Relisting`] are
    /// gone.
    Listed,
}

/// Callbacks at fixed points of the reconcile loop.
///
/// # Guarantees
/// - `resource_event` sees every event of the custom resources' watch, in order, before
///   the reconcile it may trigger.
/// - `reconcile_started` and `reconcile_finished` are called in pairs, once per reconcile,
///   including reconciles that fail; `woken` once per reconcile, right before
///   `reconcile_started`.
/// - `transitioned` is called once per persisted transition, after its status write
///   succeeded, so counting it counts exactly the transitions in `status.machine.history`.
/// - `state` is called on every reconcile that decoded a state, with the state after the
///   reconcile's decision (`Kind` or `Kind step`).
pub trait DriverHooks: Send + Sync + 'static {
    /// A reconcile of `target` starts.
    fn reconcile_started(&self, _target: &Target<'_>) {}

    /// A reconcile of `target` starts, woken by `trigger` (the first since its last
    /// reconcile; see [`super::wakeup`]). Called right before `reconcile_started`.
    fn woken(&self, _target: &Target<'_>, _trigger: Trigger) {}

    /// `trigger` asked for a reconcile of an object of `machine`, before debouncing and
    /// deduplication: several requests may end in one reconcile. Called on the watch's
    /// task (or the reconcile's, for [`Trigger::Requeue`] and [`Trigger::Retry`]).
    fn wake_requested(&self, _machine: &'static str, _trigger: Trigger) {}

    /// A reconcile of `target` ended after `elapsed`.
    fn reconcile_finished(&self, _target: &Target<'_>, _elapsed: Duration, _finished: Finished) {}

    /// `target` moved `from` → `to` along the edge named `reason`, and it is persisted.
    fn transitioned(&self, _target: &Target<'_>, _from: &str, _to: &str, _reason: &str) {}

    /// `target` is in `state` after this reconcile.
    fn state(&self, _target: &Target<'_>, _state: &str) {}

    /// Whether [`DriverHooks::resource_event`] is wanted (each event then costs one
    /// serialization of the object's status). Default: no.
    fn wants_resource_events(&self) -> bool {
        false
    }

    /// An event of the driver's own watch of `machine`'s custom resources, so
    /// observers (metrics) need no second watch of them. Called on the watch's task,
    /// in the watch's order.
    fn resource_event(&self, _machine: &'static str, _event: ResourceEvent<'_>) {}
}

/// Hooks that do nothing (the default).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoHooks;

impl DriverHooks for NoHooks {}
