//! What woke a reconcile: the [`Trigger`] vocabulary, and `Wakeups`, the bookkeeping
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
//! - Each reconcile is attributed to exactly one trigger: the first to come (a watch's
//!   or the resync's when it arrived, a requeue's or retry's when it came due) since
//!   the previous reconcile of its object started. A requeue not yet due when the
//!   reconcile starts (a deadline minutes away) takes no credit. Triggers that the debounce
//!   ([`super::Config::debounce`]) or the controller's deduplication folded into that
//!   reconcile are counted as wake requests ([`super::DriverHooks::wake_requested`]),
//!   not as reconciles.
//! - A reconcile for which nothing was recorded is [`Trigger::Unknown`] (none is
//!   expected; a count there means a trigger path is not tagged).
//! - The bookkeeping holds at most one entry per object with a reconcile pending; an
//!   entry is removed when that reconcile starts or the object is deleted.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::cache::Key;

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
    /// An owned NetworkPolicy.
    NetworkPolicy,
    /// An owned PersistentVolumeClaim.
    PersistentVolumeClaim,
    /// An owned Secret.
    Secret,
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
    pub const ALL: [Trigger; 16] = [
        Trigger::Object,
        Trigger::StatefulSet,
        Trigger::Pod,
        Trigger::Service,
        Trigger::Job,
        Trigger::CronJob,
        Trigger::ConfigMap,
        Trigger::PodDisruptionBudget,
        Trigger::NetworkPolicy,
        Trigger::PersistentVolumeClaim,
        Trigger::Secret,
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
            Trigger::NetworkPolicy => "networkpolicy",
            Trigger::PersistentVolumeClaim => "persistentvolumeclaim",
            Trigger::Secret => "secret",
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
            "NetworkPolicy" => Trigger::NetworkPolicy,
            "PersistentVolumeClaim" => Trigger::PersistentVolumeClaim,
            "Secret" => Trigger::Secret,
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

/// Per object, the first trigger recorded since its last reconcile started, and the
/// requeue (or retry) that reconcile asked for, with when it is due.
#[derive(Debug, Default)]
pub(crate) struct Wakeups(Mutex<HashMap<Key, Pending>>);

/// What may wake one object next.
#[derive(Debug, Default, Clone, Copy)]
struct Pending {
    /// The first watch trigger (or resync), and when it came.
    first: Option<(Instant, Trigger)>,
    /// The requeue or retry asked for, and when it is due.
    again: Option<(Instant, Trigger)>,
}

impl Wakeups {
    /// `trigger` (a watch's or the resync's) asked for a reconcile of `key` now; kept
    /// only if it is the first since the last reconcile of `key` started.
    pub(crate) fn record(&self, key: Key, trigger: Trigger) {
        let mut map = self.lock();
        let pending = map.entry(key).or_default();
        if pending.first.is_none() {
            pending.first = Some((Instant::now(), trigger));
        }
    }

    /// The reconcile of `key` asked to run again after `after` (`trigger`: a requeue or
    /// a retry). It counts only if nothing else wakes `key` before it is due: a
    /// deadline's requeue minutes away must not take the credit for the pod change
    /// that wakes the object first.
    pub(crate) fn again(&self, key: Key, trigger: Trigger, after: Duration) {
        let due = Instant::now() + after;
        self.lock().entry(key).or_default().again = Some((due, trigger));
    }

    /// A reconcile of `key` starts: the trigger that woke it (forgetting what was
    /// pending: the controller folds a pending requeue into this reconcile).
    pub(crate) fn take(&self, key: &Key) -> Trigger {
        self.take_at(key, Instant::now())
    }

    fn take_at(&self, key: &Key, now: Instant) -> Trigger {
        let Some(pending) = self.lock().remove(key) else {
            return Trigger::Unknown;
        };
        let again = pending.again.filter(|(due, _)| *due <= now);
        match (pending.first, again) {
            (Some((at, first)), Some((due, again))) => {
                if due < at {
                    again
                } else {
                    first
                }
            }
            (Some((_, trigger)), None) | (None, Some((_, trigger))) => trigger,
            (None, None) => Trigger::Unknown,
        }
    }

    /// `key` is gone.
    pub(crate) fn forget(&self, key: &Key) {
        self.lock().remove(key);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Pending>> {
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
        w.again(key("db"), Trigger::Requeue, Duration::ZERO);
        assert_eq!(w.take(&key("db")), Trigger::Requeue);
    }

    #[test]
    fn a_requeue_not_yet_due_takes_no_credit_for_a_change_that_woke_the_object_first() {
        let w = Wakeups::default();
        w.again(key("db"), Trigger::Requeue, Duration::from_secs(300));
        w.record(key("db"), Trigger::Pod);
        assert_eq!(w.take(&key("db")), Trigger::Pod);
        w.again(key("db"), Trigger::Retry, Duration::from_secs(300));
        assert_eq!(w.take(&key("db")), Trigger::Unknown);
    }

    #[test]
    fn a_requeue_that_came_due_before_a_change_is_the_trigger() {
        let w = Wakeups::default();
        w.again(key("db"), Trigger::Requeue, Duration::ZERO);
        std::thread::sleep(Duration::from_millis(2));
        w.record(key("db"), Trigger::Pod);
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
            "NetworkPolicy",
            "PersistentVolumeClaim",
            "Secret",
            "Lease",
        ] {
            let trigger = Trigger::owned(kind);
            assert_eq!(trigger.as_str(), kind.to_lowercase());
        }
    }
}
