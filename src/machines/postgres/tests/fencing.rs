//! Fencing: the primary Lease at creation, at rest, in switchovers and failovers, and a
//! lost status adopted as the cluster runs.

use super::upgrades::upgrade_observed;
use super::*;
use crate::driver::Operator;
use crate::machines::postgres::observe::{ADOPT_PRIMARY, FENCED};

fn identity(k: i32, image: &str) -> String {
    format!("pg-{k}/{}", uid(k, image))
}

fn creating() -> PgState {
    Postgres::initial()
}

fn hand_overs(d: &Decision<PgState, PgAction>) -> Vec<Option<String>> {
    d.actions()
        .iter()
        .filter_map(|a| match a {
            PgAction::HandLease { holder, .. } => Some(holder.clone()),
            _ => None,
        })
        .collect()
}

fn lease_creations(d: &Decision<PgState, PgAction>) -> Vec<Option<String>> {
    d.actions()
        .iter()
        .filter_map(|a| match a {
            PgAction::CreateLease { holder, .. } => Some(holder.clone()),
            _ => None,
        })
        .collect()
}

fn message(d: &Decision<PgState, PgAction>) -> &str {
    match d {
        Decision::Stay { message, .. } | Decision::Go { message, .. } => message,
    }
}

fn requeue(d: &Decision<PgState, PgAction>) -> Option<u64> {
    match d {
        Decision::Stay {
            wait: Wait::Requeue(w),
            ..
        } => Some(w.as_secs()),
        _ => None,
    }
}

/// A failover of `pg-0` to `pg-1`, at `step`.
fn failing_over(step: SwitchStep) -> PgState {
    PgState::SwitchingOver(Switchover {
        cluster: cluster(V1, 0),
        old_uid: Some(uid(0, V1)),
        target: PodRef {
            ordinal: 1,
            uid: uid(1, V1),
        },
        step,
        attempt: 1,
        cause: SwitchCause::Failover,
        round_start: 1,
        retry_ack: None,
    })
}

/// The failed primary `pg-0`: labelled demoted, Terminating, still holding the Lease it
/// renewed at `renewed`.
fn old_primary_lingering(renewed: i64) -> Observed {
    let mut o = at_rest(V1, 0);
    edit(&mut o, 0, |p| {
        p.role = Some(Role::Demoted);
        p.ready = false;
        p.terminating = true;
    });
    if let Some(l) = o.lease.as_mut() {
        l.renewed = Some(t(renewed));
    }
    o
}

// --- creation ----------------------------------------------------------------------

#[test]
fn a_new_cluster_creates_the_lease_naming_pod_0_before_labelling_it_primary() {
    let mut o = at_rest(V1, 0);
    o.lease = None;
    for p in o.pods.values_mut() {
        p.role = None;
        p.ready = false;
    }
    let d = decide(&spec("16.3"), &creating(), o.clone());
    assert_eq!(d.reason(), WAITING_FOR_LEASE);
    assert_eq!(lease_creations(&d), vec![Some(identity(0, V1))]);
    assert!(
        labels_in(&d).is_empty(),
        "nobody is labelled before the Lease"
    );
    // Once the Lease names pod 0, the roles follow.
    o.lease = Some(lease_of(0, V1));
    let d = decide(&spec("16.3"), &creating(), o);
    assert!(labels_in(&d).contains(&(0, Role::Primary)));
    assert!(lease_creations(&d).is_empty());
}

#[test]
fn a_lost_status_adopts_the_lease_holder_as_primary_without_moving_a_role() {
    let mut o = at_rest(V1, 1);
    if let Some(l) = o.lease.as_mut() {
        l.transitions = 1;
    }
    let d = decide(&spec("16.3"), &creating(), o);
    assert_eq!(d.reason(), ADOPTED);
    assert_eq!(target(&d), Some(&ready(V1, 1)));
    assert!(d.actions().is_empty(), "{d:?}");
}

#[test]
fn a_lost_status_with_two_pods_labelled_primary_and_no_holder_waits_for_a_person() {
    let mut o = at_rest(V1, 0);
    edit(&mut o, 1, |p| p.role = Some(Role::Primary));
    if let Some(l) = o.lease.as_mut() {
        l.holder = None;
    }
    let d = decide(&spec("16.3"), &creating(), o.clone());
    assert_eq!(d.reason(), ADOPTION_AMBIGUOUS);
    assert!(is_degraded(&d));
    assert!(labels_in(&d).is_empty() && deletes_in(&d).is_empty());
    assert!(message(&d).contains(ADOPT_PRIMARY), "{}", message(&d));
    // The escape hatch names pg-1: once the Lease expired, it is handed to pg-1.
    o.requests.adopt_primary = Some("pg-1".to_owned());
    let d = decide(&spec("16.3"), &creating(), o);
    assert_eq!(hand_overs(&d), vec![Some(identity(1, V1))]);
    assert!(labels_in(&d).is_empty(), "labels follow the Lease");
}

#[test]
fn a_lost_status_without_a_lease_creates_one_naming_nobody_and_waits_for_it_to_expire() {
    let mut o = at_rest(V1, 2);
    o.lease = None;
    let d = decide(&spec("16.3"), &creating(), o);
    assert_eq!(d.reason(), WAITING_FOR_FENCE);
    assert_eq!(lease_creations(&d), vec![None]);
    assert!(labels_in(&d).is_empty() && deletes_in(&d).is_empty());
}

#[test]
fn a_lost_status_whose_primary_was_recreated_hands_the_lease_to_the_new_pod() {
    let mut o = at_rest(V1, 1);
    edit(&mut o, 1, |p| {
        p.uid = "recreated".to_owned();
        p.role = None;
    });
    let d = decide(&spec("16.3"), &creating(), o);
    assert_eq!(hand_overs(&d), vec![Some("pg-1/recreated".to_owned())]);
}

// --- switchover and failover ---------------------------------------------------------

#[test]
fn a_failover_waits_while_the_old_primary_may_still_be_writable() {
    let d = decide_at(
        &spec("16.3"),
        &failing_over(SwitchStep::Fence),
        old_primary_lingering(990),
        1000,
        995,
    );
    assert_eq!(d.reason(), WAITING_FOR_FENCE);
    assert!(!is_degraded(&d));
    assert!(hand_overs(&d).is_empty() && promotes_in(&d).is_empty());
    // renewTime + L + S = 990 + 15 + 2: looked at again just after.
    assert_eq!(requeue(&d), Some(8));
}

#[test]
fn once_the_lease_expired_it_is_handed_to_the_target_then_promoted() {
    let d = decide_at(
        &spec("16.3"),
        &failing_over(SwitchStep::Fence),
        old_primary_lingering(990),
        1008,
        995,
    );
    assert_eq!(d.reason(), LEASE_HANDED_OVER);
    assert_eq!(hand_overs(&d), vec![Some(identity(1, V1))]);
    assert!(
        promotes_in(&d).is_empty(),
        "promoted only on the Lease as handed"
    );
    assert!(matches!(
        target(&d),
        Some(PgState::SwitchingOver(s)) if s.step == SwitchStep::Promote
    ));
}

#[test]
fn a_lease_released_by_its_holder_is_handed_over_at_once() {
    let mut o = old_primary_lingering(999);
    if let Some(l) = o.lease.as_mut() {
        l.released_by = l.holder.take();
    }
    let d = decide(&spec("16.3"), &failing_over(SwitchStep::Fence), o);
    assert_eq!(d.reason(), LEASE_HANDED_OVER);
}

#[test]
fn an_old_primary_whose_pod_is_gone_is_fenced() {
    let mut o = old_primary_lingering(999);
    o.pods.remove(&0);
    let d = decide(&spec("16.3"), &failing_over(SwitchStep::Fence), o);
    assert_eq!(d.reason(), LEASE_HANDED_OVER);
}

#[test]
fn a_long_wait_for_fencing_is_degraded_and_names_the_escape_hatch() {
    let state = failing_over(SwitchStep::Fence);
    let d = decide_at(&spec("16.3"), &state, old_primary_lingering(999), 1000, 900);
    assert_eq!(d.reason(), WAITING_FOR_FENCE);
    assert!(is_degraded(&d));
    assert!(message(&d).contains(FENCED), "{}", message(&d));
    // A person asserts that the old primary's node is down.
    let mut o = old_primary_lingering(999);
    o.requests.fenced = Some(identity(0, V1));
    let d = decide_at(&spec("16.3"), &state, o, 1000, 900);
    assert_eq!(d.reason(), LEASE_HANDED_OVER);
}

#[test]
fn a_planned_switchover_demotes_the_old_primary_and_waits_for_it_to_release_the_lease() {
    let mut o = upgrade_observed(&[1, 2], 0);
    edit(&mut o, 0, |p| p.role = Some(Role::Demoted));
    if let Some(l) = o.lease.as_mut() {
        l.renewed = Some(t(999));
    }
    let state = switching(SwitchStep::Fence, 1, SwitchCause::Upgrade);
    let d = decide(&spec("16.4"), &state, o.clone());
    assert_eq!(d.reason(), WAITING_FOR_FENCE);
    if let Some(l) = o.lease.as_mut() {
        l.released_by = l.holder.take();
    }
    let d = decide(&spec("16.4"), &state, o);
    assert_eq!(d.reason(), LEASE_HANDED_OVER);
    assert_eq!(hand_overs(&d), vec![Some(format!("pg-1/{}", uid(1, V2)))]);
}

#[test]
fn mid_promotion_a_lease_that_no_longer_names_the_target_is_fenced_again() {
    let mut o = old_primary_lingering(0);
    o.pods.remove(&0);
    let d = decide(&spec("16.3"), &failing_over(SwitchStep::Promote), o);
    assert_eq!(d.reason(), LEASE_LOST);
    assert!(promotes_in(&d).is_empty());
}

// --- at rest ---------------------------------------------------------------------------

#[test]
fn at_rest_a_recreated_primary_gets_the_lease_once_its_old_pod_is_gone() {
    let mut o = at_rest(V1, 0);
    edit(&mut o, 0, |p| p.uid = "recreated".to_owned());
    let d = decide(&spec("16.3"), &ready(V1, 0), o);
    assert_eq!(hand_overs(&d), vec![Some("pg-0/recreated".to_owned())]);
}

#[test]
fn at_rest_a_missing_lease_is_created_naming_the_primary() {
    let mut o = at_rest(V1, 2);
    o.lease = None;
    let d = decide(&spec("16.3"), &ready(V1, 2), o);
    assert_eq!(lease_creations(&d), vec![Some(identity(2, V1))]);
}

#[test]
fn at_rest_a_lease_renewed_by_its_holder_asks_for_nothing() {
    let mut o = at_rest(V1, 0);
    if let Some(l) = o.lease.as_mut() {
        l.renewed = Some(t(998));
    }
    let d = decide(&spec("16.3"), &ready(V1, 0), o);
    assert!(d.actions().is_empty());
}

// --- rendering -------------------------------------------------------------------------

#[test]
fn the_pods_may_only_get_update_and_patch_their_own_lease() {
    let pg = rendering::object(spec("16.3"));
    let role = render::instance_role(&pg).expect("renders");
    let rules = role.rules.unwrap_or_default();
    assert_eq!(rules.len(), 1);
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
    let env: BTreeMap<String, Option<String>> = c
        .env
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|e| (e.name, e.value))
        .collect();
    assert_eq!(env["LOCKSTEP_LEASE_NAME"].as_deref(), Some("pg-primary"));
    assert_eq!(env["LOCKSTEP_LEASE_SECONDS"].as_deref(), Some("15"));
    assert_eq!(env["LOCKSTEP_FENCE_SECONDS"].as_deref(), Some("7"));
    assert_eq!(env["LOCKSTEP_RENEW_SECONDS"].as_deref(), Some("2"));
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
