//! [`Metrics`] as the driver's [`DriverHooks`]: what each reconcile reports becomes
//! series.
//!
//! | hook | metrics |
//! | --- | --- |
//! | `reconcile_finished` | `lockstep_reconciles_total`, `lockstep_reconcile_errors_total` (on `Failed`), `lockstep_reconcile_duration_seconds` |
//! | `transitioned` | `lockstep_transitions_total` |
//!
//! The per-object series (state, time in state, stuck) come from the objects' persisted
//! status instead ([`super::observe`]): the status carries `enteredAt`, the history's
//! times and the deadline verdict, which the hooks do not, and it shows deletions.
//!
//! # Assumptions
//! - The driver calls `reconcile_finished` once per reconcile and `transitioned` once per
//!   persisted transition (its documented guarantees).

use std::time::Duration;

use crate::driver::hooks::{DriverHooks, Finished, Target};

use super::metrics::{Metrics, ReconcileResult};

/// The driver hooks that feed [`Metrics`].
#[derive(Debug, Clone)]
pub struct MetricsHooks {
    metrics: Metrics,
}

impl MetricsHooks {
    /// Hooks recording into `metrics`.
    pub fn new(metrics: Metrics) -> Self {
        Self { metrics }
    }
}

impl DriverHooks for MetricsHooks {
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

    fn transitioned(&self, target: &Target<'_>, from: &str, to: &str, _reason: &str) {
        self.metrics.on_transition(target.machine, from, to);
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
        hooks.transitioned(&target, "Ready", "Upgrading", "ImageChanged");
        hooks.reconcile_finished(&target, Duration::from_millis(2), Finished::StatusWritten);
        hooks.reconcile_finished(&target, Duration::from_millis(2), Finished::Failed);
        let text = metrics.encode();
        assert!(
            text.contains("lockstep_reconciles_total{machine=\"distributeddb\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("lockstep_reconcile_errors_total{machine=\"distributeddb\"} 1"),
            "{text}"
        );
        assert!(
            text.contains(
                "lockstep_transitions_total{machine=\"distributeddb\",from=\"Ready\",to=\"Upgrading\"} 1"
            ),
            "{text}"
        );
    }
}
