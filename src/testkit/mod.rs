//! Test support for machine authors: run an operator against a real API server with
//! faults injected at exact request boundaries (Sieve-style), and compare what it did
//! with a fault-free run.
//!
//! - [`request`]: classify an API request (verb, resource, subresource, mutating).
//! - [`lines`]: edit a watch response body event by event.
//! - [`faults`]: [`Faults`], the tower layer for the operator's kube [`kube::Client`]:
//!   it records every request and can crash the operator right after its `k`-th mutating
//!   request, refuse one status write, serve one stale read, and drop watch events.
//!
//! The usual test: run a lifecycle once without faults and count its mutating requests
//! `M`; then for each `k` in `1..=M` run it again with [`Faults::crash_after`]`(k)`, abort
//! the operator when [`Faults::crashed`] resolves, start a fresh one (fresh client, fresh
//! caches), let it finish, and compare the end state and the objects created and deleted
//! ([`Record::took_effect`]) with the fault-free run. `tests/e2e/crash_points.rs` does
//! this for the DistributedDB.
//!
//! # Guarantees
//! - See [`faults`]: a crash lets nothing out after the `k`-th mutating request, every
//!   injected fault is recorded, and the layer never changes a request it forwards.
//!
//! # Assumptions
//! - The client is used by the operator under test only, and the layer is its outermost.
//! - Nothing here is used by the operators themselves: it is for tests.

pub mod faults;
pub mod lines;
pub mod request;

pub use faults::{Faults, Injected, Outcome, Record};
pub use lines::WatchEvent;
pub use request::{RequestInfo, Verb};
