//! Lockstep: Kubernetes operators for stateful clusters whose every lifecycle is an
//! explicit finite-state machine persisted in the custom resource's `.status`.
//!
//! - [`engine`]: the pure core: the [`engine::Machine`] trait, the persisted record, and
//!   one reconcile as a pure function.
//! - `driver`: the kube glue that runs any machine as a controller.
//! - `machines`: the DistributedDB and PostgresCluster machines.
//! - [`instance`]: the agent in every PostgreSQL pod (`lockstep instance`), a machine too.
//! - `ops`: running it in production: `lockstep run`, leader election, metrics, health,
//!   logs, and `lockstep narrate`.
//! - [`testkit`]: fault injection at every request, for testing machines end to end.
#![deny(missing_docs)]

pub mod driver;
pub mod engine;
pub mod instance;
pub mod machines;
pub mod ops;
pub mod testkit;
