//! End-to-end tests against a real control plane (kube-apiserver, controller-manager,
//! scheduler, KWOK): start one with `make -f tools/cluster/cluster.mk cluster-up`, then
//! `cargo test --test e2e`. Without a reachable cluster every test fails, saying so.
//!
//! - [`smoke`]: the control plane does what the operators rely on.
//! - [`distributeddb`]: the DistributedDB lifecycle: create, hooked upgrade, crash and
//!   restart, drift, scaling, backups, final backup, validation.
//! - [`budget`]: one DistributedDB lifecycle's requests, counted by verb and resource.
//! - [`crash_points`]: fault injection at every write: the DistributedDB lifecycle crashed
//!   after each of its mutating requests in turn, and with refused writes, stale reads and
//!   dropped watch events, compared with a fault-free run.
//! - [`engine_requests`]: the driver's request budget, counted.
//! - [`etcd`]: on the real node, a real 3-member etcd DistributedDB driven by the
//!   operator through create, upgrade under a writer, backup and restore, and delete with
//!   a final backup; and `examples/deploy` running the operator as a pod there.
//! - [`install`]: on the real node, `helm install` of `charts/lockstep`, databases it
//!   drives through a switchover, `helm upgrade` of the operator (no database pod
//!   restarts) and `helm uninstall` (the databases keep serving).
//! - [`hardening`]: regressions from fault testing (refused requests, wiped status,
//!   authority to act).
//! - [`instance_lease`]: `lockstep instance`'s Lease client against the real API server.
//! - [`postgres_real`]: PostgresCluster on real PostgreSQL pods on the real node.
//! - [`postgres_network_policy`]: a PostgresCluster's NetworkPolicy is applied when
//!   enabled and deleted when turned off.
//! - [`postgres_freeze`]: on the real node, a primary whose whole pod is frozen (still
//!   Ready to the kubelet) is reported lost and failed over.
//! - [`operability`]: `lockstep run` in production: health, metrics, leader election,
//!   the deploy manifests' RBAC.
//! - [`status_truth`]: status that never says something false (readiness mid-upgrade,
//!   what a step waits for) and Job outcomes that are never lost (the outcome finalizer).
//! - [`wakeups`]: what wakes the DistributedDB machine: each owned kind's relevant
//!   changes do, irrelevant ones do not, and the debounce folds bursts without missing
//!   a change (`docs/decisions/0004-wakeups.md`).
//! - [`support`]: namespaces, CRDs, waits with deadlines, the operator in-process or as a
//!   child process, request counting.

mod budget;
mod crash_points;
mod distributeddb;
mod engine_requests;
mod etcd;
mod hardening;
mod install;
mod instance_lease;
mod operability;
mod postgres;
mod postgres_freeze;
mod postgres_network_policy;
mod postgres_real;
mod smoke;
mod status_truth;
mod support;
mod wakeups;
