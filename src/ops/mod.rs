//! Operability: what it takes to run Lockstep in production.
//!
//! - [`metrics`]: Prometheus metrics (reconciles, errors, durations, transitions, the
//!   state of each object, time in state, stuck objects, leadership).
//! - [`hooks`]: the metrics as the driver's hooks (reconciles, errors, transitions).
//! - [`observe`]: the per-object series (state, time in state, stuck), read from status.
//! - [`health`]: the HTTP server for `/healthz`, `/readyz` and `/metrics`.
//! - [`leader`]: leader election through a `coordination.k8s.io` Lease.
//! - [`logging`]: structured logs (text or JSON) through `tracing-subscriber`.
//! - [`runner`]: `lockstep run`: the machine registry and the process's lifecycle
//!   (serve health, elect, run controllers, drain on SIGTERM, release the lease).
//! - [`narrate`]: `lockstep narrate`: one readable line per transition of an object, as
//!   it happens.
//!
//! # Errors
//! [`Error`]: everything that can stop the process; reconcile errors are the driver's
//! and never stop it.

pub mod health;
pub mod hooks;
pub mod leader;
pub mod logging;
pub mod memory;
pub mod metrics;
pub mod narrate;
pub mod observe;
pub mod plugin;
pub mod runner;

use std::net::SocketAddr;

/// The errors that stop `lockstep run` or `lockstep narrate`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The Kubernetes client could not be configured (no kubeconfig, no in-cluster
    /// environment, or an invalid one).
    #[error("cannot configure the Kubernetes client")]
    Config(#[source] kube::Error),
    /// The kubeconfig named on the command line could not be read.
    #[error("cannot read kubeconfig {path}")]
    Kubeconfig {
        /// The file.
        path: String,
        /// Why it could not be used.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// A request to the API server failed.
    #[error("{what}")]
    Api {
        /// What was being done.
        what: String,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
    /// The Lease could not be created, read or renewed.
    #[error("leader election on lease {lease}")]
    Lease {
        /// `namespace/name` of the Lease.
        lease: String,
        /// The lease manager's error.
        #[source]
        source: kube_lease_manager::LeaseManagerError,
    },
    /// The lease settings are invalid.
    #[error("invalid lease settings: {0}")]
    InvalidLease(String),
    /// The health server's address could not be bound.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The socket error.
        #[source]
        source: std::io::Error,
    },
    /// The health server stopped accepting connections.
    #[error("health server failed")]
    Serve(#[source] std::io::Error),
    /// A machine name on the command line is not one Lockstep knows.
    #[error("unknown machine {name:?} (known: {known})")]
    UnknownMachine {
        /// The name given.
        name: String,
        /// The names Lockstep knows, comma-separated.
        known: String,
    },
    /// A controller (or the task running it) failed.
    #[error("controllers failed: {0}")]
    Task(String),
    /// The driver failed while running a machine's controller.
    #[error("the {machine} controller failed")]
    Driver {
        /// The machine.
        machine: String,
        /// The driver's error.
        #[source]
        source: crate::driver::Error,
    },
    /// `kind/name` did not name a kind the API server serves.
    #[error("{0}")]
    Resolve(String),
    /// A signal handler could not be installed.
    #[error("cannot listen for signals")]
    Signal(#[source] std::io::Error),
}
