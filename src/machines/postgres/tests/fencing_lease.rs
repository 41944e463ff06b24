//! Fencing, the operator's side of the released position, a lowered lease duration and a
//! Lease that names nobody or is missing.

use super::fencing::*;
use super::upgrades::upgrade_observed;
use super::*;
use crate::driver::Operator;
use crate::machines::postgres::actions::LsnGate;
use crate::machines::postgres::observe::{FENCED, RELEASED_LSN};
use crate::pod::synchronous::{DataDurability, SyncMethod, SynchronousSpec};

// --- the operator's side of the released position, a lowered L and a holderless Lease ---

/// A planned switchover (an upgrade) at Fence, its old primary `pg-0` labelled demoted
/// and still holding the Lease it renewed at `renewed`.
fn switchover_waiting_for(renewed: i64) -> (PgState, Observed) {
    let mut o = upgrade_observed(&[1, 2], 0);
    edit(&mut o, 0, |p| p.role = Some(Role::Demoted));
    edit_lease(&mut o, |l| l.renewed = Some(t(renewed)));
    (switching(SwitchStep::Fence, 1, SwitchCause::Upgrade), o)
}

/// The lost tail: the old primary's clean stop outlasted `L + S`; its Lease expired, but
/// without its release nobody knows what it acknowledged.
#[test]
fn a_planned_switchover_never_hands_the_lease_over_by_expiry_without_a_released_position() {
    let (state, o) = switchover_waiting_for(900);
    let d = decide(&spec("16.4"), &state, o.clone());
    assert_degraded(&d, WAITING_FOR_RELEASE);
    assert!(hand_overs(&d).is_empty());
    assert_says(
        &d,
        &[RELEASED_LSN, &format!("{FENCED}={}", identity(0, V1))],
    );
    // Its release, with the position, comes: handed over at once.
    let mut released = o.clone();
    edit_lease(&mut released, |l| {
        l.released_by = l.holder.take();
        l.released_lsn = Some("0/3000060".to_owned());
    });
    let d = decide(&spec("16.4"), &state, released);
    assert_eq!(d.reason(), LEASE_HANDED_OVER);
    // Or a person says its node is down, accepting what only it had: the standbys are
    // surveyed first, so that the most advanced is promoted.
    let mut asserted = o;
    asserted.own.requests.fenced = Some(identity(0, V1));
    let d = decide(&spec("16.4"), &state, asserted);
    assert_eq!(d.reason(), OLD_PRIMARY_FENCED);
    assert!(hand_overs(&d).is_empty());
}

fn gates(d: &Decision<PgState, PgAction>) -> Vec<LsnGate> {
    picked!(d.actions(), PgAction::HandLease { gate, .. } => *gate)
}

#[test]
fn a_planned_switchover_keeps_the_released_position_as_the_condition_of_the_promotion() {
    let (state, mut o) = switchover_waiting_for(900);
    edit_lease(&mut o, |l| {
        l.released_by = l.holder.take();
        l.released_lsn = Some("0/3000060".to_owned());
    });
    let d = decide(&spec("16.4"), &state, o);
    assert_eq!(d.reason(), LEASE_HANDED_OVER);
    assert_eq!(gates(&d), vec![LsnGate::Keep]);
}

/// Seen on the real node: the old primary's postmaster was killed, its container came
/// back in place still holding the Lease, wrote (crash recovery), and was demoted by
/// the failover before any standby reconnected. Its clean release names a position
/// nobody received: kept, it would hold the new primary back forever.
#[test]
fn a_failover_waives_a_position_the_old_primary_released_and_says_so() {
    let state = failing_over(SwitchStep::Fence);
    let mut o = old_primary_lingering(990);
    edit_lease(&mut o, |l| {
        l.released_by = l.holder.take();
        l.released_lsn = Some("0/40311D8".to_owned());
    });
    let d = decide_at(&spec("16.3"), &state, o, 996, 995);
    assert_eq!(d.reason(), LEASE_HANDED_OVER);
    assert_eq!(hand_overs(&d), vec![Some(identity(1, V1))]);
    assert_eq!(gates(&d), vec![LsnGate::Waive]);
    assert_says(&d, &["0/40311D8", "not waited for"]);
}

/// Under `Required` nothing the old primary alone had was acknowledged: the failover
/// says so instead of announcing a loss.
#[test]
fn under_required_synchronous_replication_a_waived_position_is_no_acknowledged_loss() {
    let state = failing_over(SwitchStep::Fence);
    let mut o = old_primary_lingering(990);
    edit_lease(&mut o, |l| {
        l.released_by = l.holder.take();
        l.released_lsn = Some("0/40311D8".to_owned());
    });
    let mut spec = spec("16.3");
    spec.synchronous = Some(SynchronousSpec {
        number: 1,
        method: SyncMethod::Any,
        data_durability: DataDurability::Required,
    });
    let d = decide_at(&spec, &state, o, 996, 995);
    assert_eq!(gates(&d), vec![LsnGate::Waive]);
    assert_says(
        &d,
        &["never acknowledged", "no acknowledged commit is lost"],
    );
}

#[test]
fn a_failover_hands_the_lease_over_by_expiry_as_before() {
    // A failover promises the most advanced replica, not every acknowledged commit: the
    // expiry is enough there (checked: `once_the_lease_expired_...`); a position the
    // old primary released, carried over from an earlier hand-over, is enough too.
    let (state, mut o) = switchover_waiting_for(900);
    edit_lease(&mut o, |l| {
        l.holder = Some("pg-2/an-earlier-target".to_owned());
        l.released_lsn = Some("0/3000060".to_owned());
    });
    let d = decide(&spec("16.4"), &state, o);
    assert_eq!(d.reason(), LEASE_HANDED_OVER);
}

/// A lowered `L`: `spec.fencing.leaseDurationSeconds` was lowered from 120 to 15; the old
/// primary's pod was created with 120 and fences itself only by its own `T`.
#[test]
fn a_lowered_lease_duration_never_shortens_the_wait_for_a_holder_created_with_a_longer_one() {
    let state = failing_over(SwitchStep::Fence);
    let mut o = old_primary_lingering(990);
    o.own.lease_seconds = [(0, 120), (1, 15), (2, 15)].into();
    // The Lease says 15 (the last hand-over wrote the spec's), the spec says 15.
    let d = decide_at(&spec("16.3"), &state, o.clone(), 1008, 995);
    assert_eq!(d.reason(), WAITING_FOR_FENCE);
    assert!(hand_overs(&d).is_empty());
    // renewTime + 120 + S = 990 + 122.
    assert_eq!(requeue_secs(&d), Some(105));
    let d = decide_at(&spec("16.3"), &state, o, 1113, 995);
    assert_eq!(d.reason(), LEASE_HANDED_OVER);
}

#[test]
fn the_lease_duration_a_holder_renewed_with_counts_too() {
    let state = failing_over(SwitchStep::Fence);
    let mut o = old_primary_lingering(990);
    edit_lease(&mut o, |l| l.duration = 60);
    let d = decide_at(&spec("16.3"), &state, o, 1008, 995);
    assert_eq!(d.reason(), WAITING_FOR_FENCE);
    assert_eq!(requeue_secs(&d), Some(45));
}

#[test]
fn a_pod_is_read_with_the_lease_duration_it_was_created_with() {
    let pg = rendering::object(spec("16.3"));
    let sts = crate::machines::postgres::render::statefulset(&pg, V1, 3).expect("renders");
    let pod = k8s_openapi::api::core::v1::Pod {
        spec: sts.spec.template.spec,
        ..Default::default()
    };
    assert_eq!(
        crate::machines::postgres::observe::pod_lease_seconds(&pod),
        Some(15)
    );
}

/// A recreated Lease after `spec.fencing.leaseDurationSeconds` was lowered from 120
/// to 15: the old primary (created with 120) was force-deleted on a partitioned node and
/// the Lease deleted. No pod left shows 120, but the status does: the Lease is created
/// with it, and every later judgement of it waits 120 + S.
fn lowered_and_lease_deleted() -> Observed {
    let mut o = at_rest(V1, 0);
    edit(&mut o, 0, |p| p.uid = "recreated".to_owned());
    o.own.lease = None;
    o.own.lease_seconds = [(0, 15), (1, 15), (2, 15)].into();
    o.own.longest_lease_seconds = Some(120);
    o
}

#[test]
fn a_lease_recreated_after_the_spec_was_lowered_carries_the_longest_lease_the_status_saw() {
    let o = lowered_and_lease_deleted();
    let d = decide(&spec("16.3"), &ready(V1, 0), o.clone());
    assert_eq!(lease_creations(&d), vec![None]);
    assert_eq!(lease_seconds_created(&d), vec![120]);
    assert_eq!(requeue_secs(&d), Some(123));
    // Recreated, naming nobody: handed to the primary's new pod only once 120 + S
    // passed, though the spec and every pod say 15.
    let mut o = o;
    o.own.lease = Some(LeaseView {
        holder: None,
        renewed: Some(t(1000)),
        duration: 120,
        ..lease_of(0, V1)
    });
    let d = decide_at(&spec("16.3"), &ready(V1, 0), o.clone(), 1100, 0);
    assert!(hand_overs(&d).is_empty(), "{d:?}");
    let d = decide_at(&spec("16.3"), &ready(V1, 0), o, 1123, 0);
    assert_eq!(hand_overs(&d), vec![Some("pg-0/recreated".to_owned())]);
}

#[test]
fn the_status_keeps_the_longest_lease_duration_it_ever_saw() {
    use crate::machines::postgres::api::PostgresClusterStatus;
    let mut s = spec("16.3");
    s.fencing.lease_duration_seconds = 120;
    let mut pg = rendering::object(s);
    let status = testing::status_in(&ready(V1, 0));
    let mut o = at_rest(V1, 0);
    let shown = Postgres::status(&pg, status.clone(), Some(&ready(V1, 0)), &o, t(1000));
    assert_eq!(shown["longestLeaseSeconds"], 120);
    // Lowered to 15: the status keeps 120.
    pg.spec.fencing.lease_duration_seconds = 15;
    pg.status = Some(PostgresClusterStatus {
        longest_lease_seconds: Some(120),
        ..PostgresClusterStatus::default()
    });
    let shown = Postgres::status(&pg, status.clone(), Some(&ready(V1, 0)), &o, t(1001));
    assert_eq!(shown["longestLeaseSeconds"], 120);
    // A status that lost it learns the longest of the spec's and the pods' again.
    pg.status = None;
    o.own.lease_seconds = [(0, 60), (1, 15)].into();
    let shown = Postgres::status(&pg, status, Some(&ready(V1, 0)), &o, t(1002));
    assert_eq!(shown["longestLeaseSeconds"], 60);
}

#[test]
fn a_lease_recreated_with_the_status_lost_carries_the_crds_longest_lease() {
    let mut o = lowered_and_lease_deleted();
    o.own.longest_lease_seconds = None;
    let d = decide(&spec("16.3"), &ready(V1, 0), o);
    assert_eq!(lease_seconds_created(&d), vec![120]);
    // A status that saw no more than the spec's: the spec's.
    let mut o = lowered_and_lease_deleted();
    o.own.longest_lease_seconds = Some(15);
    let d = decide(&spec("16.3"), &ready(V1, 0), o);
    assert_eq!(lease_seconds_created(&d), vec![15]);
}

#[test]
fn an_in_place_restore_with_the_lease_missing_recreates_it_and_waits_out_the_longest_lease() {
    use crate::machines::postgres::state::{Restore, RestoreStep};
    let mut o = lowered_and_lease_deleted();
    o.pods.clear();
    let state = PgState::RestoringInPlace(Restore {
        cluster: cluster(V1, 0),
        restore: crate::machines::postgres::api::RestoreSpec {
            token: "r1".to_owned(),
            target: None,
        },
        restore_step: RestoreStep::StopWrites,
    });
    let d = decide(&spec("16.3"), &state, o.clone());
    assert_eq!(d.reason(), STOPPING_WRITES);
    assert!(target(&d).is_none(), "the volumes wait: {d:?}");
    assert_eq!(lease_creations(&d), vec![None]);
    assert_eq!(lease_seconds_created(&d), vec![120]);
    assert_eq!(requeue_secs(&d), Some(123));
    // The recreated Lease expires only after 120 + S.
    o.own.lease = Some(LeaseView {
        holder: None,
        renewed: Some(t(1000)),
        duration: 120,
        ..lease_of(0, V1)
    });
    let d = decide_at(&spec("16.3"), &state, o.clone(), 1100, 0);
    assert!(target(&d).is_none(), "{d:?}");
    let d = decide_at(&spec("16.3"), &state, o, 1123, 0);
    assert_eq!(d.reason(), WRITES_STOPPED);
}

/// A Lease created naming nobody expires like any other.
#[test]
fn a_lease_created_naming_nobody_carries_its_creation_time() {
    let pg = rendering::object(spec("16.3"));
    let lease =
        crate::machines::postgres::render::lease(&pg, None, t(5), 15, false).expect("renders");
    let spec = lease.spec.expect("spec");
    assert!(spec.holder_identity.is_none());
    let view = crate::machines::postgres::observe::lease_view(
        &k8s_openapi::api::coordination::v1::Lease {
            metadata: lease.metadata,
            spec: Some(spec),
        },
    );
    assert_eq!(view.renewed, Some(t(5)));
}

#[test]
fn a_new_clusters_lease_is_marked_never_held_and_any_hand_over_removes_the_mark() {
    use crate::machines::postgres::observe::{NEVER_HELD, lease_view};
    use crate::machines::postgres::render;
    let pg = rendering::object(spec("16.3"));
    let lease = render::lease(&pg, None, t(5), 15, true).expect("renders");
    assert!(lease_view(&lease).never_held);
    let recreated = render::lease(&pg, None, t(5), 120, false).expect("renders");
    let view = lease_view(&recreated);
    assert!(!view.never_held);
    assert_eq!(view.duration, 120);
    let patch = render::lease_hand_over(&pg, Some("pg-0/u"), LsnGate::Keep, 0, t(6));
    assert_eq!(
        patch["metadata"]["annotations"][NEVER_HELD],
        serde_json::Value::Null
    );
    assert!(
        patch["metadata"]["annotations"]
            .as_object()
            .is_some_and(|a| a.contains_key(NEVER_HELD))
    );
}

#[test]
fn a_lease_without_a_renewal_time_is_stamped_so_that_it_expires() {
    let state = failing_over(SwitchStep::Fence);
    let mut o = old_primary_lingering(990);
    edit_lease(&mut o, |l| l.renewed = None);
    let d = decide_at(&spec("16.3"), &state, o, 1000, 995);
    assert_eq!(d.reason(), WAITING_FOR_FENCE);
    // The holder kept, the renewal time now: it expires L + S from now.
    assert_eq!(hand_overs(&d), vec![Some(identity(0, V1))]);
    assert!(matches!(
        d.actions().iter().find(|a| matches!(a, PgAction::HandLease { .. })),
        Some(PgAction::HandLease { at, .. }) if *at == t(1000)
    ));
}

#[test]
fn a_lease_missing_mid_switchover_is_recreated_degraded_naming_the_escape_hatch() {
    let state = failing_over(SwitchStep::Fence);
    let mut o = old_primary_lingering(990);
    o.own.lease = None;
    let d = decide_at(&spec("16.3"), &state, o.clone(), 1000, 995);
    assert_degraded(&d, WAITING_FOR_FENCE);
    assert_eq!(lease_creations(&d), vec![None]);
    assert_says(&d, &[&format!("{FENCED}={}", identity(0, V1))]);
    // Created naming nobody: Degraded at once (nobody released it), never silent.
    o.own.lease = Some(LeaseView {
        holder: None,
        renewed: Some(t(1000)),
        ..lease_of(0, V1)
    });
    let d = decide_at(&spec("16.3"), &state, o, 1001, 995);
    assert_degraded(&d, WAITING_FOR_FENCE);
    assert_eq!(requeue_secs(&d), Some(17));
    assert_says(&d, &[FENCED]);
}
