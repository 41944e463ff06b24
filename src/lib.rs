//! Lockstep: Kubernetes operators for stateful clusters whose every lifecycle is an
//! explicit finite-state machine persisted in the custom resource's `.status`.
//!
//! # The contract
//!
//! A machine author writes a pure [`engine::Machine`]: `decide(spec, &state, &world)`
//! returns a [`engine::Decision`] (stay, or go to a new state along a declared edge) with
//! its side effects as data, and a table of declared edges ([`edges!`]). The author
//! guarantees that `decide` is deterministic (no clock reads, no I/O, no randomness), that
//! every action is idempotent (deterministic names, deletes preconditioned on a UID the
//! state recorded, intent recorded in the state before any irreversible step), and that a
//! deleted object heads for a finalized state.
//!
//! In return the engine guarantees:
//! - the state is read from `.status` on every reconcile, never from memory, so a restart
//!   resumes where the last written state says;
//! - one transition per reconcile, persisted only along a declared edge: an undeclared one
//!   executes nothing and reports `Degraded` (`UndeclaredTransition`);
//! - one status write per change, fenced on the resourceVersion that was read, so even a
//!   deposed leader cannot persist a step twice, and none at all when nothing changed;
//! - a record it cannot decode (or from a newer `stateVersion`) is held, never acted on;
//! - the finalizer goes only once a finalized state is persisted.
//!
//! [`engine`] states the contract in full; the model checker holds each machine to it
//! under crashes, stale reads, lost writes and spec edits.
//!
//! # Example
//!
//! A machine that scales a set of pods, run through the engine's pure
//! [`engine::step()`], the function the driver calls on every reconcile (without the
//! API server: the driver executes the actions and writes `status`):
//!
//! ```
//! use chrono::{TimeZone, Utc};
//! use lockstep::edges;
//! use lockstep::engine::{Deadline, Decision, Edge, EngineStatus, Input, Machine, World, step};
//! use schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//! use strum::{EnumDiscriminants, EnumIter, IntoStaticStr};
//!
//! /// What `status.machine.state` holds; `Kind` is a state without its data.
//! #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, EnumDiscriminants)]
//! #[strum_discriminants(name(Kind), derive(IntoStaticStr, EnumIter))]
//! #[serde(tag = "name")]
//! enum State {
//!     Pending,
//!     Scaling { to: u32 },
//!     Running,
//!     Gone,
//! }
//!
//! /// Side effects, as data: the driver carries them out before it writes the state.
//! #[derive(Debug, Clone, PartialEq)]
//! enum Action {
//!     Scale(u32),
//! }
//!
//! const STARTED: &str = "Started";
//! const ALL_READY: &str = "AllReady";
//! const DELETED: &str = "Deleted";
//!
//! static TABLE: &[Edge<Kind>] = edges![Kind;
//!     Pending -> Scaling: STARTED, "the first decision", file!();
//!     Scaling -> Running: ALL_READY, "every pod is Ready", file!();
//!     [Pending, Scaling, Running] -> Gone: DELETED, "the object is deleted", file!();
//! ];
//!
//! struct Pods;
//!
//! impl Machine for Pods {
//!     const NAME: &'static str = "pods";
//!     type Spec = u32; // the replicas wanted
//!     type State = State;
//!     type Kind = Kind;
//!     type Observed = u32; // the pods that are Ready
//!     type Action = Action;
//!
//!     fn initial() -> State {
//!         State::Pending
//!     }
//!
//!     fn table() -> &'static [Edge<Kind>] {
//!         TABLE
//!     }
//!
//!     fn decide(replicas: &u32, state: &State, world: &World<u32>) -> Decision<State, Action> {
//!         let ready = world.observed;
//!         match state {
//!             State::Gone => Decision::stay("Gone", "finalized"),
//!             _ if world.deleting => Decision::go(State::Gone, DELETED, "deleted"),
//!             State::Pending => Decision::go(
//!                 State::Scaling { to: *replicas },
//!                 STARTED,
//!                 format!("scaling to {replicas}"),
//!             )
//!             .with_actions([Action::Scale(*replicas)]),
//!             State::Scaling { to } if ready == *to => {
//!                 Decision::go(State::Running, ALL_READY, format!("{to} pods Ready"))
//!             }
//!             State::Scaling { to } => Decision::stay("WaitingForPods", format!("{ready}/{to} Ready")),
//!             State::Running => Decision::stay("Serving", format!("{ready} pods Ready")),
//!         }
//!     }
//!
//!     fn is_ready(state: &State) -> bool {
//!         matches!(state, State::Running)
//!     }
//!
//!     // A state that waits on the cluster says for how long, and the way out past it.
//!     fn deadline(state: &State) -> Deadline {
//!         match state {
//!             State::Pending | State::Scaling { .. } => {
//!                 Deadline::minutes(10, "kubectl describe the pods")
//!             }
//!             State::Running | State::Gone => Deadline::None,
//!         }
//!     }
//!
//!     fn finalized(state: &State) -> bool {
//!         matches!(state, State::Gone)
//!     }
//! }
//!
//! // One reconcile of an object that wants 3 pods, of which `ready` are Ready.
//! let now = Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).unwrap();
//! let reconcile = |status: &EngineStatus<State>, ready: u32| {
//!     step::<Pods>(Input { spec: &3, status, observed: ready, generation: 1, deleting: false, now })
//! };
//!
//! // A new object: the engine records the initial state.
//! let created = reconcile(&EngineStatus::default(), 0);
//! assert_eq!(created.state, Some(State::Pending));
//!
//! // The next reconcile takes one declared edge; its actions come back as data, and the
//! // new state is what the driver writes, in one status patch.
//! let started = reconcile(&created.status, 0);
//! assert_eq!(started.taken.map(|t| (t.from, t.to, t.reason)), Some(("Pending", "Scaling", STARTED)));
//! assert_eq!(started.actions, vec![Action::Scale(3)]);
//! assert!(started.changed);
//! assert_eq!(started.status.phase.as_deref(), Some("Scaling"));
//!
//! // While nothing changes, a reconcile acts on nothing and writes nothing.
//! let waiting = reconcile(&started.status, 0);
//! assert!(waiting.actions.is_empty() && !waiting.changed);
//!
//! // Once every pod is Ready: Running, and the transition is in the persisted history.
//! let running = reconcile(&started.status, 3);
//! assert_eq!(running.state, Some(State::Running));
//! let record = lockstep::engine::step::decode::<Pods>(&running.status).unwrap().unwrap();
//! assert_eq!(record.history.last().map(|h| h.reason.as_str()), Some(ALL_READY));
//! ```
//!
//! # The crate
//!
//! - [`engine`]: the pure core: the [`engine::Machine`] trait, the persisted record, one
//!   reconcile as a pure function ([`engine::step()`]), the declared table
//!   ([`edges!`]) and its export.
//! - [`driver`]: the kube glue that runs any machine bound to a custom resource (a
//!   [`driver::Operator`]) as a controller; the only layer that talks to the API server.
//! - [`machines`]: the DistributedDB and PostgresCluster machines, and what they share.
//! - [`instance`]: the agent in every PostgreSQL pod (`lockstep instance`), a machine too.
//! - [`pod`]: the protocol between the PostgresCluster machine and the pods' instance
//!   managers: what each side writes for the other to read. Both import it; neither
//!   imports the other for it.
//! - [`ops`]: running it in production: `lockstep run`, leader election, metrics, health,
//!   logs, and `lockstep narrate`.
//! - [`testkit`]: fault injection at every request, for testing machines end to end.
//!
//! The manual is in the repository's `docs/` directory.
#![deny(missing_docs)]

pub mod driver;
pub mod engine;
pub mod instance;
pub mod machines;
pub mod ops;
pub mod pod;
pub mod testkit;
