//! [`Metrics`] as the driver's [`DriverHooks`]: what each reconcile reports becomes
//! series.
//!
//! | hook | metrics |
//! | --- | --- |
//! | `reconcile_finished` | `lockstep_reconciles_total`, `lockstep_reconcile_errors_total` (on `Failed`), `lockstep_reconcile_duration_seconds` |
//!
//! Transitions and the per-object series (state, time in state, stuck) come from the
//! objects' persisted status instead ([`super::observe`]): the status carries the
//! history's times and the deadline verdict, which the hooks do not, it shows
//! deletions, and counting a transition in the same event that moves the state series
//! means a scrape never shows a state before the transition into it.
//!
//! # Assumptions
//! - The driver calls `reconcile_finished` once per reconcile (its documented
//!   guarantee).

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
    }
}
