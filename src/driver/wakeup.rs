//! What woke a reconcile: the [`Trigger`] vocabulary, and [`Wakeups`], the bookkeeping
//! that hands each reconcile the trigger that first asked for it.
//!
//! kube-runtime's controller knows why it schedules a reconcile (its `ReconcileReason`)
//! but keeps it from the reconciler, and every trigger added with `reconcile_on` is
//! `Unknown` to it. So the driver records the trigger itself, where it knows it: the
//! custom resource's watch ([`Trigger::Object`]), each owned kind's watch (the kind), the
//! reconcile's own requeue ([`Trigger::Requeue`]), the error policy ([`Trigger::Retry`])
//! and the periodic resync ([`Trigger::Resync`]).
//!
//! # Guarantees
//! - Each reconcile is attributed to exactly one trigger: the first recorded for its
//!   object since the previous reconcile of it started. Triggers that the debounce
//!   ([`super::Config::debounce`]) or the controller's deduplication folded into that
//!   reconcile are counted as wake requests ([`super::DriverHooks::wake_requested`]),
//!   not as reconciles.
//! - A reconcile for which nothing was recorded is [`Trigger::Unknown`] (none is
//!   expected; a count there means a trigger path is not tagged).
//! - The bookkeeping holds at most one entry per object with a reconcile pending; an
//!   entry is removed when that reconcile starts or the object is deleted.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

/// Where an object lives: namespace and name.
pub(crate) type Key = (Option<String>, String);

/// What asked for a reconcile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Trigger {
    /// The custom resource itself: first seen, a change of what the machine reads of
    /// it, or a write this process did not make.
    Object,
    /// An owned StatefulSet appeared, disappeared or changed in its projection.
    StatefulSet,
    /// An owned pod (a server's, or a Job's).
    Pod,
    /// An owned Service.
    Service,
    /// An owned Job.
    Job,
    /// An owned CronJob.
    CronJob,
    /// An owned ConfigMap.
    ConfigMap,
    /// An owned PodDisruptionBudget.
    PodDisruptionBudget,
    /// An owned PersistentVolumeClaim.
    PersistentVolumeClaim,
    /// An owned Lease.
    Lease,
    /// The previous reconcile asked to run again after a delay (a transition's follow-up
    /// step, a deadline, a wait with a clock).
    Requeue,
    /// The previous reconcile failed (or lost a write race) and is retried with backoff.
    Retry,
    /// The periodic resync reconciles every object.
    Resync,
    /// Nothing recorded (a trigger path that is not tagged).
    Unknown,
}

impl Trigger {
    /// Every trigger, in the order of the metric's documentation.
    pub const ALL: [Trigger; 14] = [
        Trigger::Object,
        Trigger::StatefulSet,
        Trigger::Pod,
        Trigger::Service,
        Trigger::Job,
        Trigger::CronJob,
        Trigger::ConfigMap,
        Trigger::PodDisruptionBudget,
        Trigger::PersistentVolumeClaim,
        Trigger::Lease,
        Trigger::Requeue,
        Trigger::Retry,
        Trigger::Resync,
        Trigger::Unknown,
    ];

    /// The label value: `object`, the owned kind in lower case (`pod`,
    /// `persistentvolumeclaim`), `requeue`, `retry`, `resync`, `unknown`.
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Object => "object",
            Trigger::StatefulSet => "statefulset",
            Trigger::Pod => "pod",
            Trigger::Service => "service",
            Trigger::Job => "job",
            Trigger::CronJob => "cronjob",
            Trigger::ConfigMap => "configmap",
            Trigger::PodDisruptionBudget => "poddisruptionbudget",
            Trigger::PersistentVolumeClaim => "persistentvolumeclaim",
            Trigger::Lease => "lease",
            Trigger::Requeue => "requeue",
            Trigger::Retry => "retry",
            Trigger::Resync => "resync",
            Trigger::Unknown => "unknown",
        }
    }

    /// The trigger of an owned object of Kubernetes kind `kind` (`StatefulSet`), or
    /// [`Trigger::Unknown`] for a kind the cache does not hold.
    pub fn owned(kind: &str) -> Self {
        match kind {
            "StatefulSet" => Trigger::StatefulSet,
            "Pod" => Trigger::Pod,
            "Service" => Trigger::Service,
            "Job" => Trigger::Job,
            "CronJob" => Trigger::CronJob,
            "ConfigMap" => Trigger::ConfigMap,
            "PodDisruptionBudget" => Trigger::PodDisruptionBudget,
            "PersistentVolumeClaim" => Trigger::PersistentVolumeClaim,
            "Lease" => Trigger::Lease,
            _ => Trigger::Unknown,
        }
    }
}

impl std::fmt::Display for Trigger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Per object, the first trigger recorded since its last reconcile started.
#[derive(Debug, Default)]
pub(crate) struct Wakeups(Mutex<HashMap<Key, Trigger>>);

impl Wakeups {
    /// `trigger` asked for a reconcile of `key`; kept only if it is the first since the
    /// last reconcile of `key` started.
    pub(crate) fn record(&self, key: Key, trigger: Trigger) {
        self.lock().entry(key).or_insert(trigger);
    }

    /// A reconcile of `key` starts: the trigger that woke it (forgetting it).
    pub(crate) fn take(&self, key: &Key) -> Trigger {
        self.lock().remove(key).unwrap_or(Trigger::Unknown)
    }

    /// `key` is gone.
    pub(crate) fn forget(&self, key: &Key) {
        self.lock().remove(key);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Trigger>> {
        // A poisoned map is still a valid map: every update is one insert or remove.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> Key {
        (Some("ns".into()), name.into())
    }

    #[test]
    fn a_reconcile_is_attributed_to_the_first_trigger_since_the_last_one() {
        let w = Wakeups::default();
        w.record(key("db"), Trigger::Pod);
        w.record(key("db"), Trigger::StatefulSet);
        assert_eq!(w.take(&key("db")), Trigger::Pod);
        w.record(key("db"), Trigger::Requeue);
        assert_eq!(w.take(&key("db")), Trigger::Requeue);
    }

    #[test]
    fn a_reconcile_nothing_asked_for_is_unknown() {
        assert_eq!(Wakeups::default().take(&key("db")), Trigger::Unknown);
    }

    #[test]
    fn objects_are_attributed_apart_and_forgotten_when_gone() {
        let w = Wakeups::default();
        w.record(key("a"), Trigger::Object);
        w.record(key("b"), Trigger::Lease);
        w.forget(&key("a"));
        assert_eq!(w.take(&key("a")), Trigger::Unknown);
        assert_eq!(w.take(&key("b")), Trigger::Lease);
    }

    #[test]
    fn every_owned_kind_has_its_own_trigger() {
        for kind in [
            "StatefulSet",
            "Pod",
            "Service",
            "Job",
            "CronJob",
            "ConfigMap",
            "PodDisruptionBudget",
            "PersistentVolumeClaim",
            "Lease",
        ] {
            let trigger = Trigger::owned(kind);
            assert_eq!(trigger.as_str(), kind.to_lowercase());
        }
    }
}
