//! The hand-over: wait until whoever holds the Lease is certainly fenced, then hand the
//! Lease to the target, never short of a position an old primary released.

#[allow(clippy::wildcard_imports)] // the switchover's vocabulary, imported once in its parent
use super::*;
use chrono::{DateTime, Utc};

use crate::machines::postgres::observe::LeaseView;

/// Fence: wait until whoever holds the Lease is certainly no longer writable, then hand
/// it to the target (the hand-over is fenced on the Lease as observed) and promote.
pub(super) fn hand_over(
    spec: &PostgresClusterSpec,
    s: &Switchover,
    world: &World<Observed>,
    what: &str,
    actions: Vec<PgAction>,
) -> D {
    let o = &world.observed;
    let (t, name) = target_pod(s, o);
    let target = holder_identity(&name, &s.target.uid);
    // A failover chooses its target only once the old primary is fenced (the survey).
    let surveying = s.cause == SwitchCause::Failover && s.surveyed.is_none();
    let promote = |actions: Vec<PgAction>, why: String| {
        Decision::go(
            PgState::SwitchingOver(Switchover {
                step: SwitchStep::Promote,
                ..s.clone()
            }),
            LEASE_HANDED_OVER,
            format!("{what}: {why}; the Lease is handed to {name}, which is promoted next"),
        )
        .with_actions(actions)
    };
    let old_id = s
        .old_uid
        .as_deref()
        .map(|uid| holder_identity(&o.pod_name(s.cluster.primary), uid));
    let Some(lease) = &o.own.lease else {
        return lease_missing(spec, world, old_id.as_deref(), what, actions);
    };
    // After the Lease is there again (a Lease deleted by hand is made anew first, so
    // that going back to the old primary can tell nobody else held it since).
    let gone = match o.pods.get(&t) {
        _ if surveying => None,
        Some(p) if p.uid == s.target.uid && p.serving() => None,
        Some(p) if p.uid == s.target.uid => Some(format!("{name} is not Ready")),
        _ => Some(format!("{name} was replaced")),
    };
    if let Some(why) = gone {
        return retarget(spec, s, world, what, why, actions);
    }
    if !surveying && lease.holder.as_deref() == Some(target.as_str()) {
        return promote(Vec::new(), format!("{target} holds the Lease"));
    }
    if let Some(again) = answered_since(spec, s, o, what) {
        return again.with_actions(actions);
    }
    let planned = s.cause != SwitchCause::Failover;
    match fence(spec, lease, o, world.now) {
        Fence::Fenced { why, .. } if surveying => Decision::go(
            PgState::SwitchingOver(Switchover {
                step: SwitchStep::Survey,
                ..s.clone()
            }),
            OLD_PRIMARY_FENCED,
            format!(
                "{what}: {why}; the standbys' WAL positions are surveyed to choose the most advanced"
            ),
        ),
        // A planned switchover promises that no acknowledged commit is lost: only the
        // old primary's release says up to where the target must have received. A Lease
        // that merely expired while it still names the old primary (hung, cut off, or
        // crashed while it stopped) proves it is fenced, not what it acknowledged: the
        // switchover waits for its release, or for a person (`docs/decisions/0002-zero-loss.md`).
        // A Lease that names nobody was cleared or deleted by hand (only Lockstep and
        // the holder's agent write it: an assumption), and one that names another pod
        // was handed over since, after the release: its expiry suffices.
        Fence::Fenced {
            by: By::Expiry,
            why,
        } if planned
            && lease.released_lsn.is_none()
            && old_id.is_some()
            && lease.holder == old_id =>
        {
            waiting_for_release(lease, old_id.as_deref(), (what, &name, &why), actions)
        }
        // A failover waives the old primary's released position: it promises the most
        // advanced standby, and a position nobody received (the old primary came back
        // after a crash, wrote, and stopped before a standby reconnected) would hold the
        // promotion back forever.
        Fence::Fenced { why, .. } if !planned => promote(
            vec![hand_gated(lease, Some(target), LsnGate::Waive, world.now)],
            waived(spec, o, lease, why),
        ),
        Fence::Fenced { why, by }
            if planned && s.surveyed.is_none() && lease.released_lsn.is_none() =>
        {
            unreleased_position(spec, s, world, (by, why), what, actions)
        }
        Fence::Fenced { why, .. } => promote(
            vec![hand_gated(lease, Some(target), LsnGate::Keep, world.now)],
            why,
        ),
        Fence::Alive { until } => {
            let next = if surveying {
                "a replica is promoted".to_owned()
            } else {
                format!("{name} is promoted")
            };
            may_still_write(spec, world, (lease, until), (what, &next), actions)
        }
    }
}

/// The Lease is missing (deleted): whoever held it stops by its last renewal +
/// `T + R + 1`, so it is created naming nobody, renewed now, and expires after all of
/// them.
fn lease_missing(
    spec: &PostgresClusterSpec,
    world: &World<Observed>,
    old_id: Option<&str>,
    what: &str,
    actions: Vec<PgAction>,
) -> D {
    stay(
        WAITING_FOR_FENCE,
        format!(
            "{what}: the primary Lease is missing (deleted); it is created naming nobody, and the old primary counts as fenced once it expires ({} if its node is known to be down)",
            hatch(old_id)
        ),
        actions,
    )
    .degraded()
    .with_actions([recreate_lease(spec, &world.observed, world.now)])
}

/// A planned switchover whose old primary's Lease expired (`why`) without a released
/// position: it waits, Degraded, for the release or for a person.
fn waiting_for_release(
    lease: &LeaseView,
    old_id: Option<&str>,
    (what, name, why): (&str, &str, &str),
    actions: Vec<PgAction>,
) -> D {
    stay(
        WAITING_FOR_RELEASE,
        format!(
            "{what}: {why}, but {} never released it with its last WAL position ({RELEASED_LSN}): promoting {name} now could lose commits it acknowledged. Waiting for its release; set {} once its node is known to be down ({name} is then promoted without that position: what only the old primary had is lost)",
            lease.holder.as_deref().unwrap_or("the old primary"),
            hatch(old_id)
        ),
        actions,
    )
    .degraded()
    .requeue(std::time::Duration::from_secs(10))
}

/// Why a failover hands the Lease over (`why` the old primary is fenced), waiving any
/// position it released, and what that may cost: under `Required` a commit is
/// acknowledged only once a standby has it, and the quorum rule made sure the survey
/// read one that does.
fn waived(spec: &PostgresClusterSpec, o: &Observed, lease: &LeaseView, why: String) -> String {
    let lost = match strictest(spec, o) {
        Some(q) if q.promised => {
            "WAL only the old primary had was never acknowledged (synchronous replication, dataDurability: Required): no acknowledged commit is lost"
        }
        Some(_) => {
            "commits only the old primary had are lost if it acknowledged them under earlier synchronous terms that did not wait for a standby (status.synchronousTerms)"
        }
        None => "commits only the old primary had are lost",
    };
    match &lease.released_lsn {
        Some(lsn) => format!(
            "{why}; its released position {lsn} is not waited for (a failover promotes the most advanced standby: {lost})"
        ),
        None => why,
    }
}

/// The Lease's holder may still be writable (it expires `until`): wait, Degraded once
/// `L + S` and a grace have passed in this state (or at once for a Lease naming nobody
/// that nobody released: cleared or recreated by hand), naming the escape hatch; `next`
/// says what follows the fence.
fn may_still_write(
    spec: &PostgresClusterSpec,
    world: &World<Observed>,
    (lease, until): (&LeaseView, Option<DateTime<Utc>>),
    (what, next): (&str, &str),
    actions: Vec<PgAction>,
) -> D {
    let holder = lease.holder.as_deref().unwrap_or("its last holder");
    let grace = lease_seconds(spec, lease, &world.observed)
        .saturating_add(spec.fencing.clock_skew_seconds)
        .saturating_add(FENCE_GRACE_SECONDS)
        .max(0);
    let waited = world.in_state_for().as_secs();
    let d = stay(
        WAITING_FOR_FENCE,
        format!(
            "{what}: {holder} may still be writable (it holds the primary Lease); {next} once it releases the Lease or the Lease expires ({} asserts it is down)",
            hatch(lease.holder.as_deref())
        ),
        actions,
    )
    .with_actions(stamp(lease, world.now));
    let grace = u64::try_from(grace).unwrap_or(u64::MAX);
    let mut wake = wait_for(until, world.now);
    let d = if waited > grace || lease.holder.is_none() {
        d.degraded()
    } else {
        // Look again when the report turns Degraded, if nothing else comes first.
        let left = std::time::Duration::from_secs(grace - waited + 1);
        wake = Some(wake.map_or(left, |w| w.min(left)));
        d
    };
    d.requeue_if_any(wake)
}

/// A planned switchover whose old primary is fenced without a released position (its
/// clean stop escalated or its server crashed mid-stop, and its restarted container
/// released the Lease with none; a person asserted it down; or the Lease names nobody)
/// knows neither what it acknowledged nor which standby has the most of it: the
/// pre-chosen target may lack commits another standby received, or that only the old
/// primary has.
/// - Released by the old primary itself, without `Required` durability: back to the old
///   primary when it is back on its volume and the Lease never left it (it has every
///   commit it acknowledged: [`abandon`]); otherwise wait, Degraded, for a person, whose
///   `lockstep.dev/fenced=<old primary>/<uid>` accepts the loss of what only it had,
///   unless its volume is known lost (nothing to wait for).
/// - Otherwise (a person's word, a Lease naming nobody, or `Required`, whose survey
///   quorum reads a member with every acknowledged commit), survey first, as a failover
///   does (found by the model check with switchovers on demand).
pub(super) fn unreleased_position(
    spec: &PostgresClusterSpec,
    s: &Switchover,
    world: &World<Observed>,
    (by, why): (By, String),
    what: &str,
    actions: Vec<PgAction>,
) -> D {
    let o = &world.observed;
    let name = o.pod_name(s.target.ordinal);
    let released_by = o.own.lease.as_ref().and_then(|l| l.released_by.clone());
    let accepted = released_by.is_some() && o.own.requests.fenced == released_by;
    let required = Reach::of(spec.synchronous.as_ref()) == Reach::Furthest;
    // Its volume lost (its recreated pod's manager reports no database): what only it
    // had is gone, and waiting for it would wait for ever (found by the model check).
    let lost = o.own.empty.contains(&s.cluster.primary);
    if by == By::Release && !required && !accepted && !lost {
        let old = released_by.as_deref().unwrap_or("the old primary");
        let message = format!(
            "{what}: {why}, but without its last WAL position ({RELEASED_LSN}): its stop did not end cleanly, so no standby is known to have every commit it acknowledged"
        );
        if let Some(back) = abandon(s, o, &message) {
            return back;
        }
        return stay(
            WAITING_FOR_RELEASE,
            format!(
                "{message}. Waiting for {old} to come back on its volume (it has them all) to make it the primary again; set {} to promote the most advanced standby instead, losing what only {old} had",
                hatch(Some(old))
            ),
            actions,
        )
        .degraded()
        .requeue(std::time::Duration::from_secs(10));
    }
    Decision::go(
        PgState::SwitchingOver(Switchover {
            step: SwitchStep::Survey,
            ..s.clone()
        }),
        OLD_PRIMARY_FENCED,
        format!(
            "{what}: {why}, but it released no last WAL position{}: the standbys' positions are surveyed so that the most advanced is promoted (not necessarily {name})",
            if lost {
                format!(
                    " and its volume was lost ({} reports no database: what only it had is gone)",
                    o.pod_name(s.cluster.primary)
                )
            } else {
                String::new()
            }
        ),
    )
}
