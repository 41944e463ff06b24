//! Prometheus metrics, exposed as OpenMetrics text on `/metrics`.
//!
//! | metric | type | labels | meaning |
//! | --- | --- | --- | --- |
//! | `lockstep_reconciles_total` | counter | `machine` | reconciles run |
//! | `lockstep_reconcile_triggers_total` | counter | `machine`, `trigger` | reconciles run, by what woke each (the first trigger since the object's previous reconcile): `object`, an owned kind (`statefulset`, `pod`, `service`, `job`, `cronjob`, `configmap`, `poddisruptionbudget`, `networkpolicy`, `persistentvolumeclaim`, `lease`), `requeue`, `retry`, `resync`, `unknown` ([`crate::driver::Trigger`]) |
//! | `lockstep_wake_requests_total` | counter | `machine`, `trigger` | requests for a reconcile, before the debounce and the controller's deduplication fold them: the difference to the above is what they saved |
//! | `lockstep_reconcile_errors_total` | counter | `machine` | reconciles that returned an error |
//! | `lockstep_reconcile_duration_seconds` | histogram | `machine` | wall time of one reconcile |
//! | `lockstep_transitions_total` | counter | `machine`, `from`, `to` | persisted transitions, counted from `status.machine.history` as the state series moves |
//! | `lockstep_state_duration_seconds` | histogram | `machine`, `state` | time spent in a state, observed when it is left |
//! | `lockstep_object_state` | gauge | `machine`, `namespace`, `name`, `state` | 1 for each object's current state; removed when the object is gone |
//! | `lockstep_stuck_objects` | gauge | `machine` | objects held in a state past its deadline |
//! | `lockstep_leader` | gauge | | 1 while this process holds the lease (or runs without election) |
//!
//! Every label value is bounded by the machines' declared kinds, except `namespace` and
//! `name`, which are bounded by the number of objects (and removed with them).
//!
//! # Guarantees
//! - Recording never fails and never blocks on I/O; it takes short-lived locks only.
//! - An object that is forgotten ([`Metrics::forget`]) leaves no series behind.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::driver::Trigger;

/// Labels of the per-machine series.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct MachineLabels {
    machine: String,
}

/// Labels of the per-trigger counters.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct TriggerLabels {
    machine: String,
    trigger: &'static str,
}

/// Labels of the transition counter.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct TransitionLabels {
    machine: String,
    from: String,
    to: String,
}

/// Labels of the time-in-state histogram.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct StateLabels {
    machine: String,
    state: String,
}

/// Labels of the per-object state gauge.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ObjectLabels {
    machine: String,
    namespace: String,
    name: String,
    state: String,
}

/// How a reconcile ended, as far as metrics care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReconcileResult {
    /// The reconcile returned normally (whatever it decided).
    Ok,
    /// The reconcile returned an error and will be retried.
    Error,
}

/// An object's identity for the per-object series.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ObjectKey {
    /// The machine that manages it (`distributeddb`).
    pub machine: String,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl ObjectKey {
    /// The key of `namespace/name` managed by `machine`.
    pub fn new(
        machine: impl Into<String>,
        namespace: impl Into<String>,
        name: impl Into<String>,
    ) -> Self {
        Self {
            machine: machine.into(),
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

/// What is remembered of an object between reconciles.
#[derive(Debug, Clone)]
struct ObjectView {
    state: String,
    stuck: bool,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// Every metric Lockstep exports. Cheap to clone (all handles are shared).
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    reconciles: Family<MachineLabels, Counter>,
    triggers: Family<TriggerLabels, Counter>,
    wake_requests: Family<TriggerLabels, Counter>,
    errors: Family<MachineLabels, Counter>,
    reconcile_duration: HistogramFamily<MachineLabels>,
    transitions: Family<TransitionLabels, Counter>,
    state_duration: HistogramFamily<StateLabels>,
    object_state: Family<ObjectLabels, Gauge>,
    stuck: Family<MachineLabels, Gauge>,
    leader: Gauge,
    objects: Arc<Mutex<HashMap<ObjectKey, ObjectView>>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

fn reconcile_histogram() -> Histogram {
    // 1ms .. ~33s.
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

fn state_histogram() -> Histogram {
    // 1s .. ~9 days: states last from seconds (a hook) to weeks (Ready).
    Histogram::new(exponential_buckets(1.0, 4.0, 11))
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A fresh set of metrics, registered under the `lockstep` prefix.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("lockstep");
        let reconciles = Family::<MachineLabels, Counter>::default();
        let triggers = Family::<TriggerLabels, Counter>::default();
        let wake_requests = Family::<TriggerLabels, Counter>::default();
        let errors = Family::<MachineLabels, Counter>::default();
        let reconcile_duration: HistogramFamily<MachineLabels> =
            Family::new_with_constructor(reconcile_histogram);
        let transitions = Family::<TransitionLabels, Counter>::default();
        let state_duration: HistogramFamily<StateLabels> =
            Family::new_with_constructor(state_histogram);
        let object_state = Family::<ObjectLabels, Gauge>::default();
        let stuck = Family::<MachineLabels, Gauge>::default();
        let leader = Gauge::default();

        registry.register("reconciles", "Reconciles run", reconciles.clone());
        registry.register(
            "reconcile_triggers",
            "Reconciles run, by what woke each (the first trigger since the object's last reconcile)",
            triggers.clone(),
        );
        registry.register(
            "wake_requests",
            "Requests for a reconcile by trigger, before debouncing and deduplication",
            wake_requests.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Reconciles that returned an error (retried with backoff)",
            errors.clone(),
        );
        registry.register_with_unit(
            "reconcile_duration",
            "Wall time of one reconcile",
            prometheus_client::registry::Unit::Seconds,
            reconcile_duration.clone(),
        );
        registry.register(
            "transitions",
            "Declared transitions persisted, by machine, from and to state kind",
            transitions.clone(),
        );
        registry.register_with_unit(
            "state_duration",
            "Time spent in a state, observed when the state is left",
            prometheus_client::registry::Unit::Seconds,
            state_duration.clone(),
        );
        registry.register(
            "object_state",
            "1 for the current state kind of each managed object",
            object_state.clone(),
        );
        registry.register(
            "stuck_objects",
            "Objects held in a state past its deadline (ProgressDeadlineExceeded)",
            stuck.clone(),
        );
        registry.register(
            "leader",
            "1 while this process holds the leader lease (or runs without election)",
            leader.clone(),
        );

        Self {
            registry: Arc::new(registry),
            reconciles,
            triggers,
            wake_requests,
            errors,
            reconcile_duration,
            transitions,
            state_duration,
            object_state,
            stuck,
            leader,
            objects: Arc::default(),
        }
    }

    /// Record one reconcile of `machine` that took `duration`.
    pub fn on_reconcile(&self, machine: &str, duration: Duration, result: ReconcileResult) {
        let labels = MachineLabels {
            machine: machine.to_owned(),
        };
        self.reconciles.get_or_create(&labels).inc();
        if result == ReconcileResult::Error {
            self.errors.get_or_create(&labels).inc();
        }
        self.reconcile_duration
            .get_or_create(&labels)
            .observe(duration.as_secs_f64());
    }

    /// Record that a reconcile of `machine` was woken by `trigger`.
    pub fn on_woken(&self, machine: &str, trigger: Trigger) {
        self.triggers
            .get_or_create(&TriggerLabels {
                machine: machine.to_owned(),
                trigger: trigger.as_str(),
            })
            .inc();
    }

    /// Record that `trigger` asked for a reconcile of an object of `machine`.
    pub fn on_wake_request(&self, machine: &str, trigger: Trigger) {
        self.wake_requests
            .get_or_create(&TriggerLabels {
                machine: machine.to_owned(),
                trigger: trigger.as_str(),
            })
            .inc();
    }

    /// Record a persisted transition `from → to` (state kinds).
    pub fn on_transition(&self, machine: &str, from: &str, to: &str) {
        self.transitions
            .get_or_create(&TransitionLabels {
                machine: machine.to_owned(),
                from: from.to_owned(),
                to: to.to_owned(),
            })
            .inc();
    }

    /// Record that an object spent `time` in `state` (a kind) before leaving it, as
    /// measured between the two transitions' times in its persisted history.
    pub fn on_time_in_state(&self, machine: &str, state: &str, time: Duration) {
        self.state_duration
            .get_or_create(&StateLabels {
                machine: machine.to_owned(),
                state: state.to_owned(),
            })
            .observe(time.as_secs_f64());
    }

    /// Record an object's current state kind and whether it is stuck past its deadline.
    pub fn set_state(&self, key: &ObjectKey, state: &str, stuck: bool) {
        let mut objects = self.objects.lock().unwrap_or_else(PoisonError::into_inner);
        let previous = objects.insert(
            key.clone(),
            ObjectView {
                state: state.to_owned(),
                stuck,
            },
        );
        if let Some(previous) = &previous
            && previous.state != state
        {
            self.object_state
                .remove(&object_labels(key, &previous.state));
        }
        self.object_state
            .get_or_create(&object_labels(key, state))
            .set(1);
        // A new object (so the machine's gauge exists, at 0 if need be) or a change.
        if previous.as_ref().is_none_or(|p| p.stuck != stuck) {
            self.refresh_stuck(&objects, &key.machine);
        }
    }

    /// Forget an object that is gone: its series disappear.
    pub fn forget(&self, key: &ObjectKey) {
        let mut objects = self.objects.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(previous) = objects.remove(key) {
            self.object_state
                .remove(&object_labels(key, &previous.state));
            if previous.stuck {
                self.refresh_stuck(&objects, &key.machine);
            }
        }
    }

    /// Forget every object (when this process stops leading: another process reports
    /// them now).
    pub fn forget_all(&self) {
        let mut objects = self.objects.lock().unwrap_or_else(PoisonError::into_inner);
        objects.clear();
        self.object_state.clear();
        self.stuck.clear();
    }

    /// Record whether this process leads.
    pub fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }

    /// The OpenMetrics text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    fn refresh_stuck(&self, objects: &HashMap<ObjectKey, ObjectView>, machine: &str) {
        let count = objects
            .iter()
            .filter(|(k, v)| k.machine == machine && v.stuck)
            .count();
        self.stuck
            .get_or_create(&MachineLabels {
                machine: machine.to_owned(),
            })
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }
}

fn object_labels(key: &ObjectKey, state: &str) -> ObjectLabels {
    ObjectLabels {
        machine: key.machine.clone(),
        namespace: key.namespace.clone(),
        name: key.name.clone(),
        state: state.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line_value(text: &str, prefix: &str) -> Option<f64> {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    }

    #[test]
    fn reconciles_errors_and_durations_by_machine() {
        let m = Metrics::new();
        m.on_reconcile(
            "distributeddb",
            Duration::from_millis(3),
            ReconcileResult::Ok,
        );
        m.on_reconcile(
            "distributeddb",
            Duration::from_millis(5),
            ReconcileResult::Error,
        );
        let text = m.encode();
        assert_eq!(
            line_value(
                &text,
                "lockstep_reconciles_total{machine=\"distributeddb\"}"
            ),
            Some(2.0)
        );
        assert_eq!(
            line_value(
                &text,
                "lockstep_reconcile_errors_total{machine=\"distributeddb\"}"
            ),
            Some(1.0)
        );
        assert_eq!(
            line_value(
                &text,
                "lockstep_reconcile_duration_seconds_count{machine=\"distributeddb\"}"
            ),
            Some(2.0)
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn transitions_and_time_in_state() {
        let m = Metrics::new();
        m.on_transition("distributeddb", "Creating", "Ready");
        m.on_time_in_state("distributeddb", "Creating", Duration::from_secs(40));
        let text = m.encode();
        assert_eq!(
            line_value(
                &text,
                "lockstep_transitions_total{machine=\"distributeddb\",from=\"Creating\",to=\"Ready\"}"
            ),
            Some(1.0)
        );
        assert_eq!(
            line_value(
                &text,
                "lockstep_state_duration_seconds_sum{machine=\"distributeddb\",state=\"Creating\"}"
            ),
            Some(40.0)
        );
    }

    #[test]
    fn object_state_moves_and_is_removed_on_forget() {
        let m = Metrics::new();
        let key = ObjectKey::new("distributeddb", "default", "demo");
        m.set_state(&key, "Creating", false);
        assert_eq!(
            line_value(
                &m.encode(),
                "lockstep_stuck_objects{machine=\"distributeddb\"}"
            ),
            Some(0.0)
        );
        m.set_state(&key, "Upgrading", true);
        let text = m.encode();
        assert!(!text.contains("state=\"Creating\""), "{text}");
        assert_eq!(
            line_value(
                &text,
                "lockstep_object_state{machine=\"distributeddb\",namespace=\"default\",name=\"demo\",state=\"Upgrading\"}"
            ),
            Some(1.0)
        );
        assert_eq!(
            line_value(&text, "lockstep_stuck_objects{machine=\"distributeddb\"}"),
            Some(1.0)
        );
        m.forget(&key);
        let text = m.encode();
        assert!(!text.contains("name=\"demo\""), "{text}");
        assert_eq!(
            line_value(&text, "lockstep_stuck_objects{machine=\"distributeddb\"}"),
            Some(0.0)
        );
    }

    #[test]
    fn leader_gauge() {
        let m = Metrics::new();
        m.set_leader(true);
        assert_eq!(line_value(&m.encode(), "lockstep_leader "), Some(1.0));
        m.set_leader(false);
        assert_eq!(line_value(&m.encode(), "lockstep_leader "), Some(0.0));
    }
}
