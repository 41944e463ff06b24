//! Waiting until a cluster whose StatefulSet holds no pod has certainly stopped
//! writing: the first step of an in-place restore
//! ([`super::restoring_in_place`]) and of hibernation ([`super::hibernating`]).

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::fencing::{Fence, fence, recreate_lease, recreated_lease_seconds, wait_for};
use crate::machines::postgres::actions::PgAction;
use crate::machines::postgres::api::PostgresClusterSpec;
use crate::machines::postgres::observe::Observed;

/// Why a stopping cluster may still be writing: what it waits for, the moves that
/// make the wait finite, and when to look again.
#[derive(Debug)]
pub(crate) struct StillRunning {
    /// What the stop waits for (a clause, after the caller's subject).
    pub(crate) why: String,
    /// The moves (a missing Lease is created naming nobody).
    pub(crate) actions: Vec<PgAction>,
    /// When to look again, if no event will say.
    pub(crate) wake: Option<Duration>,
}

/// `Ok` once no instance pod is left and nothing holds the primary Lease unexpired:
/// every server has stopped (its holder released the Lease as its pod stopped, or the
/// Lease expired). A Lease missing here (deleted by hand) may have been held by a
/// server whose pod vanished while its node was cut off: it is created naming nobody,
/// carrying the longest `L` any former holder may run with, and waited out like any
/// other.
pub(crate) fn stopped(
    spec: &PostgresClusterSpec,
    o: &Observed,
    now: DateTime<Utc>,
) -> Result<(), StillRunning> {
    if !o.pods.is_empty() {
        return Err(StillRunning {
            why: format!(
                "the StatefulSet holds no pod; waiting for {} to stop",
                o.pod_names(&o.pods.keys().copied().collect::<Vec<_>>())
            ),
            actions: Vec::new(),
            wake: None,
        });
    }
    let Some(lease) = &o.own.lease else {
        let l = recreated_lease_seconds(spec, o).saturating_add(spec.fencing.clock_skew_seconds);
        return Err(StillRunning {
            why: format!(
                "no pod is left, but the primary Lease is missing; it is created naming nobody, and every former holder has certainly stopped once it expired (L + S = {l}s)"
            ),
            actions: vec![recreate_lease(spec, o, now)],
            wake: wait_for(Some(now + chrono::Duration::seconds(l)), now),
        });
    };
    match fence(spec, lease, o, now) {
        Fence::Alive { until } => Err(StillRunning {
            why: format!(
                "no pod is left, but {} may still be writable (it holds the primary Lease) until it expires",
                lease.holder.as_deref().unwrap_or("its last holder")
            ),
            actions: Vec::new(),
            wake: wait_for(until, now),
        }),
        Fence::Fenced { .. } => Ok(()),
    }
}
