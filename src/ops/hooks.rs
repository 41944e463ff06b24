//! [`Metrics`] as the driver's [`DriverHooks`]: what each reconcile reports becomes
//! series.
//!
//! | hook | metrics |
//! | --- | --- |
//! | `reconcile_finished` | `lockstep_reconciles_total`, `lockstep_reconcile_errors_total` (on `Failed`), `lockstep_reconcile_duration_seconds` |
//! | `woken` | `lockstep_reconcile_triggers_total` |
//! | `wake_requested` | `lockstep_wake_requests_total` |
//!
//! | `resource_event` (with [`MetricsHooks::with_objects`]) | the per-object series and `lockstep_transitions_total` ([`super::observe`]) |
//!
//! Transitions and the per-object series (state, time in state, stuck) come from the
//! objects' persisted status, as the driver's own watch of them delivers it: the status carries the
//! history's times and the deadline verdict, which the hooks do not, it shows
//! deletions, and counting a transition in the same event that moves the state series
//! means a scrape never shows a state before the transition into it.
//!
//! # Assumptions
//! - The driver calls `reconcile_finished` once per reconcile (its documented
//!   guarantee).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::driver::Trigger;
use crate::driver::hooks::{DriverHooks, Finished, ResourceEvent, Target};

use super::metrics::{Metrics, ReconcileResult};
use super::observe::Tracker;

/// The driver hooks that feed [`Metrics`].
#[derive(Clone)]
pub struct MetricsHooks {
    metrics: Metrics,
    objects: Option<Objects>,
}

/// The per-object series of one machine, fed by the driver's watch of its resources.
#[derive(Clone)]
struct Objects {
    tracker: Arc<Mutex<Tracker>>,
    /// Called once, when the first list of the resources is complete.
    synced: Arc<dyn Fn() + Send + Sync>,
    /// Whether `synced` was called.
    announced: Arc<AtomicBool>,
}

impl std::fmt::Debug for MetricsHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsHooks")
            .field("per_object_series", &self.objects.is_some())
            .finish_non_exhaustive()
    }
}

impl MetricsHooks {
    /// Hooks recording the reconcile series into `metrics`.
    pub fn new(metrics: Metrics) -> Self {
        Self {
            metrics,
            objects: None,
        }
    }

    /// Also keep the per-object series of `machine`'s resources ([`Tracker`]) from the
    /// driver's watch, calling `synced` once when they have first been listed.
    #[must_use]
    pub fn with_objects(
        mut self,
        machine: &'static str,
        synced: Arc<dyn Fn() + Send + Sync>,
    ) -> Self {
        self.objects = Some(Objects {
            tracker: Arc::new(Mutex::new(Tracker::new(machine, self.metrics.clone()))),
            synced,
            announced: Arc::default(),
        });
        self
    }
}

impl DriverHooks for MetricsHooks {
    fn woken(&self, target: &Target<'_>, trigger: Trigger) {
        self.metrics.on_woken(target.machine, trigger);
    }

    fn wake_requested(&self, machine: &'static str, trigger: Trigger) {
        self.metrics.on_wake_request(machine, trigger);
    }

    fn reconcile_finished(&self, target: &Target<'_>, elapsed: Duration, finished: Finished) {
        let result = match finished {
            Finished::Failed => ReconcileResult::Error,
            Finished::Idle
            | Finished::FinalizerAdded
            | Finished::StatusWritten
            | Finished::Acted
            | Finished::Conflict => ReconcileResult::Ok,
        };
        self.metrics.on_reconcile(target.machine, elapsed, result);
    }

    fn wants_resource_events(&self) -> bool {
        self.objects.is_some()
    }

    fn resource_event(&self, _machine: &'static str, event: ResourceEvent<'_>) {
        let Some(objects) = &self.objects else {
            return;
        };
        objects
            .tracker
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .event(&event);
        if matches!(event, ResourceEvent::Listed) && !objects.announced.swap(true, Ordering::SeqCst)
        {
            (objects.synced)();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feeds_the_metrics() {
        let metrics = Metrics::new();
        let hooks = MetricsHooks::new(metrics.clone());
        let target = Target {
            machine: "distributeddb",
            namespace: "ns",
            name: "db",
        };
        hooks.woken(&target, Trigger::Pod);
        hooks.reconcile_finished(&target, Duration::from_millis(2), Finished::StatusWritten);
        hooks.woken(&target, Trigger::Retry);
        hooks.reconcile_finished(&target, Duration::from_millis(2), Finished::Failed);
        hooks.wake_requested("distributeddb", Trigger::Pod);
        hooks.wake_requested("distributeddb", Trigger::Pod);
        let text = metrics.encode();
        assert!(
            text.contains(
                "lockstep_reconcile_triggers_total{machine=\"distributeddb\",trigger=\"pod\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "lockstep_wake_requests_total{machine=\"distributeddb\",trigger=\"pod\"} 2"
            ),
            "{text}"
        );
        assert!(
            text.contains("lockstep_reconciles_total{machine=\"distributeddb\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("lockstep_reconcile_errors_total{machine=\"distributeddb\"} 1"),
            "{text}"
        );
    }
}
