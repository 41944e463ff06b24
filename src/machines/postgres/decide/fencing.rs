//! Fencing: whether the pod the primary Lease names may still run a writable server,
//! and the Lease moves that keep the Lease naming the primary the state names.
//!
//! A holder is **certainly fenced** when it released the Lease (the annotation
//! `lockstep.dev/released-by` names it), when `renewTime + L + S` has passed on the
//! operator's clock (the holder stops its server by `renewTime + T + R + 1` on its own
//! clock, `T + R + 1 ≤ L`, and the clocks differ by at most `S`) and so has `L` since
//! the operator first saw that `renewTime` (the renewal began before it was seen, so
//! this holds whatever the holder's clock says: client-go's leader election judges so
//! too), or when a person asserted it with `lockstep.dev/fenced`. `L` is the longest any living holder may run
//! with ([`lease_seconds`]).
//!
//! A pod that is no longer observed is **not** fenced by that alone:
//! a pod force-deleted while its node is partitioned keeps running its container,
//! and a pod whose labels or owner reference were removed looks gone too. Its Lease
//! expires like any other; a person who knows its node is dead says so with
//! `lockstep.dev/fenced: <pod>/<uid>`.
//!
//! A Lease without a renewal time would never expire. The operator creates none (a
//! Lease it creates naming nobody carries its creation time, `render::lease`), and one
//! found without it (edited by hand) is stamped with the operator's clock
//! ([`stamp`]): whoever held it before could not renew it since, so it has stopped by
//! then + `L` (a Lease without a renewal time would never expire).
//!
//! A Lease created in place of one that vanished (deleted, or lost with the status)
//! names nobody and carries the longest `L` any former holder may run with
//! ([`recreated_lease_seconds`]): the spec's and the observed pods' `L` may all have
//! been lowered since a server that still runs, its pod force-deleted on a partitioned
//! node, was created. Every later expiry judgement reads it from the Lease.
//!
//! # Guarantees
//! - A holder is taken for fenced only as said above; never because its pod vanished.
//! - A recreated Lease expires no sooner than `L + S` after its creation, `L` the
//!   longest the status ever saw the spec or a pod of the cluster carry
//!   (`status.longestLeaseSeconds`), or [`MAX_LEASE_SECONDS`] when the status does not
//!   say: no server that held the vanished Lease is writable past it.
//!
//! # Assumptions
//! - Every pod is created from a StatefulSet template whose `L` a status write saw
//!   (the spec's, projected at the write that follows the template's change); a pod
//!   created and lost while every status write failed is not covered.
//! - The pods do their part (the machine's `# Assumptions`). A holder's clock beyond `S`
//!   from the operator's no longer makes a healthy primary look expired, nor a paused
//!   one look fenced early: the operator's own sighting bounds both (the message names
//!   the skew, [`skew_note`]). An operator that has just started saw every renewal
//!   "now": it waits `L` before it takes a holder for expired, as client-go does.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::machines::postgres::actions::{LsnGate, PgAction};
use crate::machines::postgres::api::{FencingSpec, MAX_LEASE_SECONDS, PostgresClusterSpec};
use crate::machines::postgres::observe::{FENCED, LeaseView, Observed};

/// How a holder came to be certainly fenced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum By {
    /// It released the Lease: it stopped its server on purpose (with its last WAL
    /// position, `lockstep.dev/released-lsn`, when it was a primary demoted).
    Release,
    /// A person asserted it (`lockstep.dev/fenced`).
    Person,
    /// `renewTime + L + S` passed: it stopped by itself, however it stopped.
    Expiry,
    /// Nobody ever held the Lease: it was created before any volume claim, StatefulSet
    /// or pod of the cluster existed, and never handed over since.
    NeverHeld,
}

/// Whether the Lease's holder may still be writable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fence {
    /// Certainly not writable: how, and why (for messages).
    Fenced {
        /// How it is known.
        by: By,
        /// Why, for messages.
        why: String,
    },
    /// May still be writable, until at least this instant (none: the Lease has no
    /// renewal time; [`stamp`] gives it one).
    Alive {
        /// When the Lease expires on the operator's clock (`renewTime + L + S`).
        until: Option<DateTime<Utc>>,
    },
}

/// `L` as the operator counts it: the longest any living holder may use. The larger of
/// the Lease's (its holder writes the `L` its fence runs with at every renewal), the
/// spec's, and the one each observed pod was created with (pods are `OnDelete`: a pod
/// created before `spec.fencing.leaseDurationSeconds` was lowered fences itself by the
/// old, longer one). Lowering `L` never shortens a wait (a pod keeps the `L` it was created with).
pub(crate) fn lease_seconds(spec: &PostgresClusterSpec, lease: &LeaseView, o: &Observed) -> i64 {
    lease.duration.max(living_lease_seconds(spec, o))
}

/// The longest `L` of the spec and of every observed pod: [`lease_seconds`] without a
/// Lease to read one from (it was deleted).
fn living_lease_seconds(spec: &PostgresClusterSpec, o: &Observed) -> i64 {
    o.own
        .lease_seconds
        .values()
        .copied()
        .fold(spec.fencing.lease_duration_seconds, i64::max)
}

/// The `L` a Lease created in place of one that vanished carries: the longest of the
/// spec's, every observed pod's and the longest the status ever saw
/// (`status.longestLeaseSeconds`), or [`MAX_LEASE_SECONDS`] when the status does not
/// say (it was lost). A server whose pod is no longer observed may run with an `L` the
/// spec and the pods have all left behind; only the status remembers it.
pub(crate) fn recreated_lease_seconds(spec: &PostgresClusterSpec, o: &Observed) -> i64 {
    living_lease_seconds(spec, o).max(o.own.longest_lease_seconds.unwrap_or(MAX_LEASE_SECONDS))
}

/// The creation, at `now`, of a Lease naming nobody in place of one that vanished: it
/// carries [`recreated_lease_seconds`], so its expiry waits out every former holder.
pub(crate) fn recreate_lease(
    spec: &PostgresClusterSpec,
    o: &Observed,
    now: DateTime<Utc>,
) -> PgAction {
    PgAction::CreateLease {
        holder: None,
        at: now,
        seconds: recreated_lease_seconds(spec, o),
        never_held: false,
    }
}

/// When the Lease's current holder is certainly no longer writable by expiry: the later
/// of `renewTime + L + S` (the holder's clock, within `S` of the operator's) and `L`
/// after this operator first saw that `renewTime` (its own clock: the holder renewed no
/// later than that, so a holder clock that runs more than `S` behind cannot make a
/// healthy primary look expired). [`lease_seconds`] gives `L`.
pub(crate) fn expiry(
    spec: &PostgresClusterSpec,
    lease: &LeaseView,
    o: &Observed,
) -> Option<DateTime<Utc>> {
    let l = lease_seconds(spec, lease, o);
    let s = spec.fencing.clock_skew_seconds;
    let by_holder = lease
        .renewed
        .map(|r| r + chrono::Duration::seconds(l.saturating_add(s)));
    let by_operator = lease
        .renewal_seen
        .map(|seen| seen + chrono::Duration::seconds(l));
    by_holder.max(by_operator)
}

/// How far the holder's `renewTime` lies from when this operator saw it, when that is
/// more than `S` (plus a renewal's round `R` for the write and the watch to land): the
/// holder's clock is off, and the message says so. `None` while they agree or either is
/// unknown.
pub(crate) fn skew_note(spec: &PostgresClusterSpec, lease: &LeaseView) -> Option<String> {
    let (renewed, seen) = (lease.renewed?, lease.renewal_seen?);
    let s = spec.fencing.clock_skew_seconds;
    let (off, way) = holder_skew(spec, lease)?;
    Some(format!(
        "; its renewTime {renewed} is {}s {way} when this operator saw it ({seen}), beyond spec.fencing.clockSkewSeconds={s}: the holder's node clock is off (check NTP); expiries count from what the operator saw",
        off.abs()
    ))
}

/// How many seconds the holder's last `renewTime` lies from when this operator saw it,
/// and which way (`"ahead of"`, `"behind"`), when that is more than `S` ahead or `S + R`
/// behind (the write and the watch take a round); `None` while they agree or either is
/// unknown.
pub(crate) fn holder_skew(
    spec: &PostgresClusterSpec,
    lease: &LeaseView,
) -> Option<(i64, &'static str)> {
    let (renewed, seen) = (lease.renewed?, lease.renewal_seen?);
    let s = spec.fencing.clock_skew_seconds;
    let off = (renewed - seen).num_seconds();
    if off > s {
        Some((off, "ahead of"))
    } else if off < -(s + FencingSpec::RENEW_SECONDS) {
        Some((off, "behind"))
    } else {
        None
    }
}

/// Whether the holder the Lease names (or, with none, whoever held it last) is
/// certainly fenced at `now`.
pub(crate) fn fence(
    spec: &PostgresClusterSpec,
    lease: &LeaseView,
    o: &Observed,
    now: DateTime<Utc>,
) -> Fence {
    let until = expiry(spec, lease, o);
    let fenced = |by, why| Fence::Fenced { by, why };
    match lease.holder.as_deref() {
        Some(h) if lease.released_by.as_deref() == Some(h) => {
            fenced(By::Release, format!("{h} released the Lease"))
        }
        None if lease.released_by.is_some() => fenced(
            By::Release,
            format!(
                "{} released the Lease",
                lease.released_by.as_deref().unwrap_or_default()
            ),
        ),
        None if lease.never_held => fenced(
            By::NeverHeld,
            "nobody ever held the Lease (it was created with the cluster)".to_owned(),
        ),
        Some(h) if o.own.requests.fenced.as_deref() == Some(h) => {
            fenced(By::Person, format!("{FENCED} asserts that {h} is down"))
        }
        _ if until.is_some_and(|u| now > u) => fenced(
            By::Expiry,
            format!(
                "the Lease expired (renewTime + {}s + {}s, and {}s after this operator saw that renewal){}",
                lease_seconds(spec, lease, o),
                spec.fencing.clock_skew_seconds,
                lease_seconds(spec, lease, o),
                skew_note(spec, lease).unwrap_or_default()
            ),
        ),
        _ => Fence::Alive { until },
    }
}

/// How long to wait before looking again at a Lease that expires `until` (one second
/// past it), if it does and that is still ahead: an expiry already past is the
/// decision's to act on now, not a reason to wake (a zero wait would be a hot loop;
/// found by the model check with a primary's volume lost).
pub(crate) fn wait_for(until: Option<DateTime<Utc>>, now: DateTime<Utc>) -> Option<Duration> {
    until
        .and_then(|u| (u - now + chrono::Duration::seconds(1)).to_std().ok())
        .filter(|d| !d.is_zero())
}

/// The hand-over of the observed Lease to `holder` at `now`, keeping any released
/// position as the condition of a promotion.
pub(crate) fn hand(lease: &LeaseView, holder: Option<String>, now: DateTime<Utc>) -> PgAction {
    hand_gated(lease, holder, LsnGate::Keep, now)
}

/// The first hand-over of a Lease nobody ever held (`lockstep.dev/never-held`) to
/// `holder` at `now`: its term (`leaseTransitions`) stays 0, as that of a Lease created
/// naming its holder, so that the first primary of a new cluster reads as created.
pub(crate) fn hand_first(lease: &LeaseView, holder: String, now: DateTime<Utc>) -> PgAction {
    PgAction::HandLease {
        holder: Some(holder),
        gate: LsnGate::Keep,
        transitions: lease.transitions,
        at: now,
        uid: lease.uid.clone(),
        version: lease.version.clone(),
    }
}

/// The hand-over of the observed Lease to `holder` at `now`, doing `gate` with the
/// position the old primary released.
pub(crate) fn hand_gated(
    lease: &LeaseView,
    holder: Option<String>,
    gate: LsnGate,
    now: DateTime<Utc>,
) -> PgAction {
    PgAction::HandLease {
        holder,
        gate,
        transitions: lease.transitions.saturating_add(1),
        at: now,
        uid: lease.uid.clone(),
        version: lease.version.clone(),
    }
}

/// A Lease without a renewal time (edited by hand; Lockstep writes none) is given one:
/// the operator's clock now, its holder kept, fenced on the Lease as read. Whoever holds
/// it cannot have renewed it since its renewal time was removed (a renewal writes one),
/// so it stops by its last renewal + `T + R + 1`, before now + `L`: the wait becomes
/// finite. `None` for a Lease that has one.
pub(crate) fn stamp(lease: &LeaseView, now: DateTime<Utc>) -> Option<PgAction> {
    lease
        .renewed
        .is_none()
        .then(|| hand(lease, lease.holder.clone(), now))
}

/// What a person can set when they know a holder is down (its node is powered off):
/// `lockstep.dev/fenced=<holder>`.
pub(crate) fn hatch(holder: Option<&str>) -> String {
    format!("{FENCED}={}", holder.unwrap_or("<pod>/<uid>"))
}

/// At rest (a state naming `primary`): the Lease must name the primary's pod. Handed
/// to it once whoever holds it is certainly fenced (the primary's pod was recreated: a
/// new UID). Returns the moves, and when to look again: when a holder that may still be
/// writable would expire, and, while the Lease names the primary's pod, when its Lease
/// would expire unrenewed (a hung primary: [`super::primary_lost::primary_down`]).
///
/// A missing Lease (deleted) is created naming nobody, renewed now, carrying
/// [`recreated_lease_seconds`], whether or not the primary's pod is live: whoever held
/// it, perhaps a pod force-deleted on a partitioned node whose server still runs, cannot
/// renew it and stops by its last renewal + `T + R + 1`, before this one expires.
/// Naming the primary's pod at once would make two writable servers when the pod now at
/// that ordinal is not the one that held it (found by the model check from seed 1).
pub(crate) fn keep_lease(
    spec: &PostgresClusterSpec,
    primary: i32,
    o: &Observed,
    now: DateTime<Utc>,
) -> (Vec<PgAction>, Option<Duration>) {
    let Some(lease) = &o.own.lease else {
        let l = recreated_lease_seconds(spec, o).saturating_add(spec.fencing.clock_skew_seconds);
        return (
            vec![recreate_lease(spec, o, now)],
            wait_for(Some(now + chrono::Duration::seconds(l)), now),
        );
    };
    let Some(id) = o.live(primary).and_then(|_| o.identity(primary)) else {
        return (Vec::new(), None);
    };
    if lease.holder.as_deref() == Some(id.as_str()) {
        return (
            stamp(lease, now).into_iter().collect(),
            wait_for(expiry(spec, lease, o), now),
        );
    }
    match fence(spec, lease, o, now) {
        Fence::Fenced { .. } => (vec![hand(lease, Some(id), now)], None),
        Fence::Alive { until } => (
            stamp(lease, now).into_iter().collect(),
            wait_for(until, now),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_expiry_still_ahead_wakes_a_second_after_it_and_one_already_past_wakes_nothing() {
        let now = DateTime::<Utc>::from_timestamp(1_000, 0).unwrap_or_default();
        let at = |s: i64| Some(now + chrono::Duration::seconds(s));
        assert_eq!(wait_for(at(9), now), Some(Duration::from_secs(10)));
        // Exactly a second past would have been a zero wait: a hot loop.
        assert_eq!(wait_for(at(-1), now), None);
        assert_eq!(wait_for(at(-30), now), None);
        assert_eq!(wait_for(None, now), None);
    }
}
