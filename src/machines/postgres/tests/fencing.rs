//! Fencing: the primary Lease at creation, at rest, in switchovers and failovers, and a
//! lost status adopted as the cluster runs.

pub(super) use super::fencing_survey::{Said, at_survey, surveyed, surveyed_by, synchronous};
use super::upgrades::upgrade_observed;
use super::*;
use crate::driver::Operator;
use crate::machines::postgres::actions::LsnGate;
use crate::machines::postgres::observe::{ADOPT_PRIMARY, FENCED, RELEASED_LSN};
use crate::machines::postgres::state::Surveyed;

pub(super) fn identity(k: i32, image: &str) -> String {
    format!("pg-{k}/{}", uid(k, image))
}

pub(super) fn creating() -> PgState {
    issued()
}

pub(super) fn hand_overs(d: &Decision<PgState, PgAction>) -> Vec<Option<String>> {
    picked!(d.actions(), PgAction::HandLease { holder, .. } => holder.clone())
}

pub(super) fn lease_creations(d: &Decision<PgState, PgAction>) -> Vec<Option<String>> {
    picked!(d.actions(), PgAction::CreateLease { holder, .. } => holder.clone())
}

/// The decision at `t(now)` of a failover at its Fence step (entered at `t(995)`) while
/// the old primary lingers with the Lease it renewed at `t(990)`.
pub(super) fn fencing_at(now: i64) -> Decision<PgState, PgAction> {
    decide_at(
        &spec("16.3"),
        &failing_over(SwitchStep::Fence),
        old_primary_lingering(990),
        now,
        995,
    )
}

/// A failover of `pg-0` to `pg-1` (chosen by a survey), at `step`.
pub(super) fn failing_over(step: SwitchStep) -> PgState {
    match surveying() {
        PgState::SwitchingOver(s) => PgState::SwitchingOver(Switchover {
            step,
            surveyed: Some(vec![Surveyed {
                ordinal: 1,
                receive: "0/3000000".to_owned(),
                replay: "0/3000000".to_owned(),
                timeline: Some(1),
            }]),
            ..s
        }),
        other => other,
    }
}

/// A failover of `pg-0` whose standbys are not surveyed yet, at `Fence`.
pub(super) fn surveying() -> PgState {
    failover_at(SwitchStep::Fence)
}

/// The failed primary `pg-0`: labelled demoted, Terminating, still holding the Lease it
/// renewed at `renewed`.
pub(super) fn old_primary_lingering(renewed: i64) -> Observed {
    let mut o = at_rest(V1, 0);
    edit(&mut o, 0, |p| {
        p.role = Some(Role::Demoted);
        p.ready = false;
        p.terminating = true;
    });
    edit_lease(&mut o, |l| l.renewed = Some(t(renewed)));
    o
}

// --- creation ----------------------------------------------------------------------

pub(super) fn lease_seconds_created(d: &Decision<PgState, PgAction>) -> Vec<i64> {
    picked!(d.actions(), PgAction::CreateLease { seconds, .. } => *seconds)
}

/// Nothing of the cluster exists (no claim, StatefulSet or pod): a brand-new cluster.
pub(super) fn nothing_yet() -> Observed {
    let mut o = at_rest(V1, 0);
    o.statefulset = None;
    o.pods.clear();
    o.own.claims.clear();
    o.own.lease = None;
    o.own.longest_lease_seconds = None;
    o
}

#[test]
pub(super) fn a_new_cluster_creates_the_lease_never_held_and_hands_it_to_pod_0_without_waiting() {
    let d = decide(&spec("16.3"), &creating(), nothing_yet());
    assert!(
        matches!(
            d.actions().first(),
            Some(PgAction::CreateLease {
                holder: None,
                never_held: true,
                seconds: 15,
                ..
            })
        ),
        "{d:?}"
    );
    // Pod 0 exists: the Lease nobody ever held is handed to it at once.
    let mut o = at_rest(V1, 0);
    for p in o.pods.values_mut() {
        p.role = None;
        p.ready = false;
    }
    o.own.lease = Some(LeaseView {
        holder: None,
        never_held: true,
        renewed: Some(t(999)),
        ..lease_of(0, V1)
    });
    let d = decide(&spec("16.3"), &creating(), o.clone());
    assert_eq!(d.reason(), WAITING_FOR_LEASE);
    assert_eq!(hand_overs(&d), vec![Some(identity(0, V1))]);
    assert!(
        labels_in(&d).is_empty(),
        "nobody is labelled before the Lease"
    );
    // Once the Lease names pod 0, the roles follow.
    o.own.lease = Some(lease_of(0, V1));
    let d = decide(&spec("16.3"), &creating(), o);
    assert!(labels_in(&d).contains(&(0, Role::Primary)));
    assert!(lease_creations(&d).is_empty() && hand_overs(&d).is_empty());
}

/// The Creating gap: the status lost, the Lease deleted, and the one pod force-deleted
/// on a partitioned node and recreated without a label. Nothing says which pod held a
/// Lease, but the claims show the cluster existed: the Lease is created naming nobody
/// with the CRD's longest `L` (the status that knew the cluster's is gone), and pod 0
/// is named only once it expired.
#[test]
pub(super) fn creating_over_existing_claims_creates_the_lease_naming_nobody_and_waits_out_the_longest_lease()
 {
    let mut o = at_rest(V1, 0);
    for p in o.pods.values_mut() {
        p.role = None;
        p.ready = false;
    }
    o.own.lease = None;
    o.own.longest_lease_seconds = None;
    let d = decide(&spec("16.3"), &creating(), o.clone());
    assert_eq!(d.reason(), WAITING_FOR_FENCE);
    assert_eq!(lease_creations(&d), vec![None]);
    assert_eq!(lease_seconds_created(&d), vec![120]);
    assert!(labels_in(&d).is_empty() && hand_overs(&d).is_empty());
    // L + S = 122 s, looked at again a second after.
    assert_eq!(requeue_secs(&d), Some(123));
    // Claims alone (no StatefulSet, no pod: a cluster recreated over old volumes) say
    // the same.
    let mut claims_only = nothing_yet();
    claims_only.own.claims = o.own.claims.clone();
    let d = decide(&spec("16.3"), &creating(), claims_only);
    assert!(
        matches!(
            d.actions().first(),
            Some(PgAction::CreateLease {
                holder: None,
                never_held: false,
                seconds: 120,
                ..
            })
        ),
        "{d:?}"
    );
    // The Lease as created: waited out for its own L + S, then handed to pod 0.
    o.own.lease = Some(LeaseView {
        holder: None,
        renewed: Some(t(1000)),
        duration: 120,
        transitions: 0,
        ..lease_of(0, V1)
    });
    let d = decide_at(&spec("16.3"), &creating(), o.clone(), 1121, 0);
    assert_eq!(d.reason(), WAITING_FOR_FENCE);
    assert!(hand_overs(&d).is_empty());
    let d = decide_at(&spec("16.3"), &creating(), o, 1123, 0);
    assert_eq!(hand_overs(&d), vec![Some(identity(0, V1))]);
}

#[test]
pub(super) fn a_lost_status_adopts_the_lease_holder_as_primary_without_moving_a_role() {
    let mut o = at_rest(V1, 1);
    edit_lease(&mut o, |l| l.transitions = 1);
    let d = decide(&spec("16.3"), &creating(), o);
    assert_goes(&d, ADOPTED, &ready(V1, 1));
    assert!(d.actions().is_empty(), "{d:?}");
}

#[test]
pub(super) fn a_lost_status_with_two_pods_labelled_primary_and_no_holder_waits_for_a_person() {
    let mut o = at_rest(V1, 0);
    edit(&mut o, 1, |p| p.role = Some(Role::Primary));
    edit_lease(&mut o, |l| {
        l.holder = None;
        l.renewed = Some(t(0));
    });
    let d = decide(&spec("16.3"), &creating(), o.clone());
    assert_degraded(&d, ADOPTION_AMBIGUOUS);
    assert!(labels_in(&d).is_empty() && deletes_in(&d).is_empty());
    assert!(message(&d).contains(ADOPT_PRIMARY), "{}", message(&d));
    // The escape hatch names pg-1: once the Lease expired, it is handed to pg-1.
    o.own.requests.adopt_primary = Some("pg-1".to_owned());
    let d = decide(&spec("16.3"), &creating(), o);
    assert_eq!(hand_overs(&d), vec![Some(identity(1, V1))]);
    assert!(labels_in(&d).is_empty(), "labels follow the Lease");
}

#[test]
pub(super) fn a_lost_status_without_a_lease_creates_one_naming_nobody_and_waits_for_it_to_expire() {
    let mut o = at_rest(V1, 2);
    o.own.lease = None;
    let d = decide(&spec("16.3"), &creating(), o);
    assert_eq!(d.reason(), WAITING_FOR_FENCE);
    assert_eq!(lease_creations(&d), vec![None]);
    assert!(labels_in(&d).is_empty() && deletes_in(&d).is_empty());
}

#[test]
pub(super) fn a_lost_status_whose_primary_was_recreated_hands_the_lease_to_the_new_pod_once_it_expired()
 {
    let mut o = at_rest(V1, 1);
    edit(&mut o, 1, |p| {
        p.uid = "recreated".to_owned();
        p.role = None;
    });
    // The old pod is gone, but its server may run on (a force-delete): its Lease must
    // expire first.
    let d = decide(&spec("16.3"), &creating(), o.clone());
    assert_eq!(d.reason(), WAITING_FOR_FENCE);
    assert!(hand_overs(&d).is_empty());
    edit_lease(&mut o, |l| l.renewed = Some(t(0)));
    let d = decide(&spec("16.3"), &creating(), o);
    assert_eq!(hand_overs(&d), vec![Some("pg-1/recreated".to_owned())]);
}

// --- switchover and failover ---------------------------------------------------------

#[test]
pub(super) fn a_failover_waits_while_the_old_primary_may_still_be_writable() {
    let d = fencing_at(1000);
    assert_eq!(d.reason(), WAITING_FOR_FENCE);
    assert!(!is_degraded(&d));
    assert!(hand_overs(&d).is_empty());
    // renewTime + L + S = 990 + 15 + 2: looked at again just after.
    assert_eq!(requeue_secs(&d), Some(8));
}

#[test]
pub(super) fn once_the_lease_expired_it_is_handed_to_the_target_then_promoted() {
    let d = fencing_at(1008);
    assert_eq!(d.reason(), LEASE_HANDED_OVER);
    assert_eq!(hand_overs(&d), vec![Some(identity(1, V1))]);
    assert!(matches!(
        target(&d),
        Some(PgState::SwitchingOver(s)) if s.step == SwitchStep::Promote
    ));
}

/// The failed primary `pg-0` gone, its Lease last renewed at `renewed`.
pub(super) fn old_primary_gone(renewed: i64) -> Observed {
    let mut o = old_primary_lingering(renewed);
    o.pods.remove(&0);
    o
}

#[test]
pub(super) fn an_old_primary_that_released_the_lease_has_it_handed_over_at_once() {
    let mut released = old_primary_lingering(999);
    edit_lease(&mut released, |l| l.released_by = l.holder.take());
    let d = decide(&spec("16.3"), &failing_over(SwitchStep::Fence), released);
    assert_eq!(d.reason(), LEASE_HANDED_OVER);
}

/// A pod force-deleted while its node is partitioned keeps
/// running its container; its pod object being gone proves nothing.
#[test]
pub(super) fn a_vanished_pod_is_not_fenced_until_its_lease_expires_or_a_person_says_so() {
    let state = failing_over(SwitchStep::Fence);
    let d = decide_at(&spec("16.3"), &state, old_primary_gone(999), 1000, 995);
    assert_eq!(d.reason(), WAITING_FOR_FENCE);
    assert!(hand_overs(&d).is_empty());
    // renewTime + L + S = 999 + 15 + 2: looked at again just after.
    assert_eq!(requeue_secs(&d), Some(17));
    let d = decide_at(&spec("16.3"), &state, old_primary_gone(999), 1017, 995);
    assert_eq!(d.reason(), LEASE_HANDED_OVER);
    // A person who knows the node is dead says so.
    let mut o = old_primary_gone(999);
    o.own.requests.fenced = Some(identity(0, V1));
    let d = decide_at(&spec("16.3"), &state, o, 1000, 995);
    assert_eq!(d.reason(), LEASE_HANDED_OVER);
}

#[test]
pub(super) fn a_long_wait_for_fencing_is_degraded_and_names_the_escape_hatch() {
    let state = failing_over(SwitchStep::Fence);
    let d = decide_at(&spec("16.3"), &state, old_primary_lingering(999), 1000, 900);
    assert_degraded(&d, WAITING_FOR_FENCE);
    assert!(message(&d).contains(FENCED), "{}", message(&d));
    // A person asserts that the old primary's node is down.
    let mut o = old_primary_lingering(999);
    o.own.requests.fenced = Some(identity(0, V1));
    let d = decide_at(&spec("16.3"), &state, o, 1000, 900);
    assert_eq!(d.reason(), LEASE_HANDED_OVER);
}

#[test]
pub(super) fn a_planned_switchover_demotes_the_old_primary_and_waits_for_it_to_release_the_lease() {
    let mut o = upgrade_observed(&[1, 2], 0);
    edit(&mut o, 0, |p| p.role = Some(Role::Demoted));
    edit_lease(&mut o, |l| l.renewed = Some(t(999)));
    let state = switching(SwitchStep::Fence, 1, SwitchCause::Upgrade);
    let d = decide(&spec("16.4"), &state, o.clone());
    assert_eq!(d.reason(), WAITING_FOR_FENCE);
    edit_lease(&mut o, |l| {
        l.released_by = l.holder.take();
        l.released_lsn = Some("0/3000060".to_owned());
    });
    let d = decide(&spec("16.4"), &state, o.clone());
    assert_eq!(d.reason(), LEASE_HANDED_OVER);
    assert_eq!(hand_overs(&d), vec![Some(format!("pg-1/{}", uid(1, V2)))]);
    // Released without a position (its stop was not clean): nobody knows which standby
    // has what it acknowledged; back on its volume, it has it all (the cases are in
    // `planned_release.rs`).
    edit_lease(&mut o, |l| l.released_lsn = None);
    let d = decide(&spec("16.4"), &state, o);
    assert_eq!(d.reason(), BACK_TO_OLD_PRIMARY);
    assert!(hand_overs(&d).is_empty());
}

#[test]
pub(super) fn mid_promotion_a_lease_that_no_longer_names_the_target_is_fenced_again() {
    let d = decide(
        &spec("16.3"),
        &failing_over(SwitchStep::Promote),
        old_primary_gone(0),
    );
    assert_eq!(d.reason(), LEASE_LOST);
}

// --- at rest ---------------------------------------------------------------------------

#[test]
fn at_rest_a_recreated_primary_gets_the_lease_once_its_old_pods_lease_expired() {
    let mut o = at_rest(V1, 0);
    edit(&mut o, 0, |p| p.uid = "recreated".to_owned());
    let d = decide(&spec("16.3"), &ready(V1, 0), o.clone());
    assert!(hand_overs(&d).is_empty(), "the old pod's server may run on");
    // renewTime + L + S = 995 + 15 + 2.
    assert_eq!(requeue_secs(&d), Some(13));
    edit_lease(&mut o, |l| l.renewed = Some(t(0)));
    let d = decide(&spec("16.3"), &ready(V1, 0), o);
    assert_eq!(hand_overs(&d), vec![Some("pg-0/recreated".to_owned())]);
}

/// The pod now at the primary's ordinal may not be the one that held the deleted Lease
/// (a force-deleted pod's server runs on): nobody is named until the new Lease expired.
#[test]
fn at_rest_a_missing_lease_is_created_naming_nobody_and_looked_at_again_once_it_expires() {
    let mut o = at_rest(V1, 2);
    o.own.lease = None;
    let d = decide(&spec("16.3"), &ready(V1, 2), o);
    assert_eq!(lease_creations(&d), vec![None]);
    assert!(
        matches!(
            d,
            crate::engine::Decision::Stay { wait: crate::engine::Wait::Requeue(w), .. }
                if w.as_secs() <= 15 + 2 + 1
        ),
        "{d:?}"
    );
}

#[test]
fn at_rest_a_lease_renewed_by_its_holder_asks_for_nothing() {
    let mut o = at_rest(V1, 0);
    edit_lease(&mut o, |l| l.renewed = Some(t(998)));
    let d = decide(&spec("16.3"), &ready(V1, 0), o);
    assert!(d.actions().is_empty());
}

// --- rendering -------------------------------------------------------------------------

#[test]
fn the_pods_may_only_get_update_and_patch_their_own_lease_and_patch_their_own_status() {
    let pg = rendering::object(spec("16.3"));
    let role = render::instance_role(&pg).expect("renders");
    let rules = role.rules.unwrap_or_default();
    // The third: the password Secrets (`managed.rs`'s test).
    assert_eq!(rules.len(), 3);
    assert_eq!(
        rules[1].resources.as_deref(),
        Some(&["pods/status".to_owned()][..])
    );
    assert_eq!(
        rules[1].resource_names.as_deref(),
        Some(&["pg-0".to_owned(), "pg-1".to_owned(), "pg-2".to_owned()][..])
    );
    assert_eq!(rules[1].verbs, ["patch"]);
    assert_eq!(
        rules[0].resources.as_deref(),
        Some(&["leases".to_owned()][..])
    );
    assert_eq!(
        rules[0].resource_names.as_deref(),
        Some(&["pg-primary".to_owned()][..])
    );
    assert_eq!(rules[0].verbs, ["get", "update", "patch"]);
    let binding = render::instance_binding(&pg).expect("renders");
    assert_eq!(binding.role_ref.name, "pg-instance");
    let sts = render::statefulset(&pg, V1, 3).expect("renders");
    let pod = sts.spec.template.spec.expect("a pod spec");
    assert_eq!(pod.service_account_name.as_deref(), Some("pg-instance"));
    let c = &pod.containers[0];
    testing::assert_env(
        c,
        &[
            ("LOCKSTEP_LEASE_NAME", "pg-primary"),
            ("LOCKSTEP_LEASE_SECONDS", "15"),
            ("LOCKSTEP_FENCE_SECONDS", "7"),
            ("LOCKSTEP_RENEW_SECONDS", "2"),
        ],
    );
    let env = testing::plain_env(c);
    for from_field in ["POD_NAME", "POD_UID", "POD_NAMESPACE"] {
        assert!(env.contains_key(from_field), "{from_field}");
    }
    assert!(c.liveness_probe.is_some() && c.startup_probe.is_some());
}

#[test]
fn the_lease_is_handed_over_only_as_it_was_read() {
    let pg = rendering::object(spec("16.3"));
    let ops = Postgres::render(
        &pg,
        &PgAction::HandLease {
            holder: Some("pg-1/u1".to_owned()),
            gate: LsnGate::Keep,
            transitions: 3,
            at: t(5),
            uid: "lease-uid".to_owned(),
            version: "42".to_owned(),
        },
    )
    .expect("renders");
    let [
        crate::driver::Op::Patch {
            name,
            patch,
            precondition,
            ..
        },
    ] = ops.as_slice()
    else {
        panic!("one fenced patch: {ops:?}")
    };
    assert_eq!(name, "pg-primary");
    assert_eq!(precondition.resource_version, "42");
    assert_eq!(precondition.uid, "lease-uid");
    assert_eq!(patch["spec"]["holderIdentity"], "pg-1/u1");
    assert_eq!(patch["spec"]["leaseTransitions"], 3);
    assert!(patch["metadata"]["annotations"]["lockstep.dev/released-by"].is_null());
    assert!(
        patch["metadata"]["annotations"].get(RELEASED_LSN).is_none(),
        "a kept gate leaves the released position in place: {patch}"
    );
}

#[test]
fn a_waived_gate_removes_the_released_position_in_the_same_fenced_patch() {
    let pg = rendering::object(spec("16.3"));
    let patch = crate::machines::postgres::render::lease_hand_over(
        &pg,
        Some("pg-1/u1"),
        LsnGate::Waive,
        3,
        t(5),
    );
    let annotations = &patch["metadata"]["annotations"];
    assert!(
        annotations.get(RELEASED_LSN).is_some_and(|v| v.is_null()),
        "{patch}"
    );
    assert!(annotations["lockstep.dev/released-by"].is_null());
}

#[test]
fn every_allowed_lease_duration_lets_a_pod_stop_before_its_lease_counts_as_expired() {
    let f = crate::machines::postgres::api::FencingSpec::default();
    assert_eq!((f.lease_duration_seconds, f.clock_skew_seconds), (15, 2));
    // T + R + 1 <= L for every allowed L: a pod stops before the operator counts its
    // Lease expired, whatever the skew.
    for l in 5..=120 {
        let f = crate::machines::postgres::api::FencingSpec {
            lease_duration_seconds: l,
            clock_skew_seconds: 2,
        };
        assert!(f.fence_seconds() + crate::machines::postgres::api::FencingSpec::RENEW_SECONDS < l);
    }
}
