//! Fencing: whether the pod the primary Lease names may still run a writable server,
//! and the Lease moves that keep the Lease naming the primary the state names.
//!
//! A holder is **certainly fenced** when it released the Lease (the annotation
//! `lockstep.dev/released-by` names it), when its pod (that UID) is no longer observed,
//! when `renewTime + L + S` has passed on the operator's clock (the holder stops its
//! server by `renewTime + T + R + 1` on its own clock, `T + R + 1 ≤ L`, and the clocks
//! differ by at most `S`), or when a person asserted it with `lockstep.dev/fenced`.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::machines::postgres::actions::PgAction;
use crate::machines::postgres::api::PostgresClusterSpec;
use crate::machines::postgres::observe::{LeaseView, Observed};

/// Whether the Lease's holder may still be writable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fence {
    /// Certainly not writable (why, for messages).
    Fenced(String),
    /// May still be writable, until at least this instant (none: no renewal time).
    Alive {
        /// When the Lease expires on the operator's clock (`renewTime + L + S`).
        until: Option<DateTime<Utc>>,
    },
}

/// `L` as the operator counts it: the larger of the Lease's and the spec's, so that
/// shortening `spec.fencing.leaseDurationSeconds` never shortens a wait for a holder
/// that renewed under the longer one.
fn lease_seconds(spec: &PostgresClusterSpec, lease: &LeaseView) -> i64 {
    lease.duration.max(spec.fencing.lease_duration_seconds)
}

/// When the Lease's current holder is certainly no longer writable by expiry.
pub(crate) fn expiry(spec: &PostgresClusterSpec, lease: &LeaseView) -> Option<DateTime<Utc>> {
    let l = lease_seconds(spec, lease).saturating_add(spec.fencing.clock_skew_seconds);
    lease.renewed.map(|r| r + chrono::Duration::seconds(l))
}

/// Whether the holder the Lease names (or, with none, whoever held it last) is
/// certainly fenced at `now`.
pub(crate) fn fence(
    spec: &PostgresClusterSpec,
    lease: &LeaseView,
    o: &Observed,
    now: DateTime<Utc>,
) -> Fence {
    let until = expiry(spec, lease);
    match lease.holder.as_deref() {
        Some(h) if lease.released_by.as_deref() == Some(h) => {
            Fence::Fenced(format!("{h} released the Lease"))
        }
        None if lease.released_by.is_some() => Fence::Fenced(format!(
            "{} released the Lease",
            lease.released_by.as_deref().unwrap_or_default()
        )),
        Some(h) if o.holder_ordinal(h).is_none() => {
            Fence::Fenced(format!("the pod of {h} is gone"))
        }
        Some(h) if o.own.requests.fenced.as_deref() == Some(h) => Fence::Fenced(format!(
            "{} asserts that {h} is down",
            crate::machines::postgres::observe::FENCED
        )),
        _ if until.is_some_and(|u| now > u) => Fence::Fenced(format!(
            "the Lease expired (renewTime + {}s + {}s)",
            lease_seconds(spec, lease),
            spec.fencing.clock_skew_seconds
        )),
        _ => Fence::Alive { until },
    }
}

/// How long to wait before looking again at a Lease that expires `until` (one second
/// past it), if it does.
pub(crate) fn wait_for(until: Option<DateTime<Utc>>, now: DateTime<Utc>) -> Option<Duration> {
    until.map(|u| {
        (u - now + chrono::Duration::seconds(1))
            .to_std()
            .unwrap_or(Duration::from_secs(1))
    })
}

/// The hand-over of the observed Lease to `holder` at `now`.
pub(crate) fn hand(lease: &LeaseView, holder: Option<String>, now: DateTime<Utc>) -> PgAction {
    PgAction::HandLease {
        holder,
        transitions: lease.transitions.saturating_add(1),
        at: now,
        uid: lease.uid.clone(),
        version: lease.version.clone(),
    }
}

/// At rest (a state naming `primary`): the Lease must name the primary's pod. Created
/// naming it if absent; handed to it once whoever holds it is certainly fenced (the
/// primary's pod was recreated: a new UID). Returns the moves, and when to look again
/// while a holder may still be writable.
pub(crate) fn keep_lease(
    spec: &PostgresClusterSpec,
    primary: i32,
    o: &Observed,
    now: DateTime<Utc>,
) -> (Vec<PgAction>, Option<Duration>) {
    let Some(id) = o.live(primary).and_then(|_| o.identity(primary)) else {
        return (Vec::new(), None);
    };
    match &o.own.lease {
        None => (
            vec![PgAction::CreateLease {
                holder: Some(id),
                at: now,
            }],
            None,
        ),
        Some(lease) if lease.holder.as_deref() == Some(id.as_str()) => (Vec::new(), None),
        Some(lease) => match fence(spec, lease, o, now) {
            Fence::Fenced(_) => (vec![hand(lease, Some(id), now)], None),
            Fence::Alive { until } => (Vec::new(), wait_for(until, now)),
        },
    }
}
