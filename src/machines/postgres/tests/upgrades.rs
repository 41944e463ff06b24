//! Upgrades: replicas first, then a switchover, then the old primary.

use super::*;

#[test]
fn a_version_change_starts_an_upgrade_to_the_new_image() {
    let d = decide(&spec("16.4"), &ready(V1, 0), at_rest(V1, 0));
    assert_goes(&d, IMAGE_CHANGED, &upgrading_to_v2(0));
}

#[test]
fn the_highest_replica_is_chosen_first_and_its_uid_recorded_before_any_delete() {
    let state = upgrading_to_v2(0);
    let mut o = at_rest(V1, 0);
    o.statefulset = Some(StatefulSetView {
        image: Some(V2.to_owned()),
        ..o.statefulset.clone().unwrap_or(StatefulSetView {
            conforms: true,
            image: None,
            replicas: 3,
            caught_up: true,
        })
    });
    let d = decide(&spec("16.4"), &state, o);
    assert!(deletes_in(&d).is_empty());
    assert_goes(&d, POD_CHOSEN, &replacing_pod_2());
}

/// An upgrade to `V2` replacing `pg-2`, chosen at `V1`, `pg-0` primary.
fn replacing_pod_2() -> PgState {
    PgState::Upgrading {
        cluster: cluster(V2, 0),
        pod: Some(PodRef {
            ordinal: 2,
            uid: uid(2, V1),
        }),
    }
}

pub(super) fn upgrade_observed(at_target: &[i32], primary: i32) -> Observed {
    let mut o = at_rest(V1, primary);
    for k in at_target {
        o.pods
            .insert(*k, pod(*k, V2, true, Some(role_of(*k, primary))));
    }
    if let Some(sts) = o.statefulset.as_mut() {
        sts.image = Some(V2.to_owned());
    }
    o
}

#[test]
fn the_chosen_replica_is_deleted_with_its_uid_as_precondition() {
    let state = replacing_pod_2();
    let d = decide(&spec("16.4"), &state, upgrade_observed(&[], 0));
    assert_eq!(deletes_in(&d), vec![(2, uid(2, V1), DeleteCause::Upgrade)]);
}

#[test]
fn no_replica_is_deleted_while_another_instance_is_not_ready() {
    let state = replacing_pod_2();
    let mut o = upgrade_observed(&[], 0);
    edit(&mut o, 1, |p| p.ready = false);
    let d = decide(&spec("16.4"), &state, o);
    assert_eq!(d.reason(), WAITING_FOR_PODS);
    assert!(deletes_in(&d).is_empty());
}

#[test]
fn no_pod_is_deleted_until_the_statefulset_template_holds_the_target() {
    let state = replacing_pod_2();
    let d = decide(&spec("16.4"), &state, at_rest(V1, 0));
    assert!(deletes_in(&d).is_empty());
    assert!(d.actions().contains(&PgAction::EnsureStatefulSet {
        image: V2.to_owned(),
        replicas: 3
    }));
}

#[test]
fn a_recreated_replica_ready_at_the_target_is_upgraded() {
    let state = replacing_pod_2();
    let d = decide(&spec("16.4"), &state, upgrade_observed(&[2], 0));
    assert_eq!(d.reason(), POD_UPGRADED);
}

#[test]
fn the_primary_is_left_alone_until_every_replica_runs_the_target() {
    let state = upgrading_to_v2(0);
    let d = decide(&spec("16.4"), &state, upgrade_observed(&[2], 0));
    assert_eq!(d.reason(), POD_CHOSEN);
    assert!(matches!(
        target(&d),
        Some(PgState::Upgrading { pod: Some(p), .. }) if p.ordinal == 1
    ));
}

#[test]
fn an_upgrades_switchover_passes_over_a_standby_that_does_not_stream_and_waits_when_all_lag() {
    let state = upgrading_to_v2(0);
    let mut o = upgrade_observed(&[1, 2], 0);
    o.own.lagging = [1].into();
    let d = decide(&spec("16.4"), &state, o.clone());
    assert!(matches!(
        target(&d),
        Some(PgState::SwitchingOver(sw)) if sw.target.ordinal == 2
    ));
    o.own.lagging = [1, 2].into();
    let d = decide(&spec("16.4"), &state, o);
    assert_eq!(d.reason(), WAITING_FOR_PODS);
    assert!(target(&d).is_none(), "nobody is promoted: {d:?}");
    assert_says(&d, &["pg-1, pg-2", "do not stream"]);
}

#[test]
fn with_every_replica_upgraded_the_switchover_intent_is_recorded_before_any_label_moves() {
    let state = upgrading_to_v2(0);
    let d = decide(&spec("16.4"), &state, upgrade_observed(&[1, 2], 0));
    assert_eq!(d.reason(), SWITCHOVER_STARTED);
    assert!(d.actions().is_empty(), "{:?}", d.actions());
    assert_eq!(
        target(&d),
        Some(&switching(SwitchStep::Demote, 1, SwitchCause::Upgrade))
    );
}

#[test]
fn the_switchover_demotes_the_old_primary_before_promoting_anyone() {
    let d = decide(
        &spec("16.4"),
        &switching(SwitchStep::Demote, 1, SwitchCause::Upgrade),
        upgrade_observed(&[1, 2], 0),
    );
    assert_eq!(d.reason(), OLD_PRIMARY_DEMOTED);
    // Still a writable primary until it restarts: served by neither Service.
    assert_eq!(labels_in(&d), vec![(0, Role::Demoted)]);
    assert!(deletes_in(&d).is_empty(), "a switchover does not fence");
}

#[test]
fn once_the_target_holds_the_lease_it_alone_is_labelled_primary_and_its_promotion_awaited() {
    let mut o = upgrade_observed(&[1, 2], 0);
    hand_over_to_1(&mut o, V2);
    let state = upgrade_switchover(SwitchStep::Promote);
    let d = decide_at(&spec("16.4"), &state, o.clone(), 30, 0);
    assert_eq!(d.reason(), PROMOTING);
    // Its agent would fence a promoted server labelled anything but primary; the old
    // primary is `demoted` since the Demote step, so `-rw` selects one pod.
    assert_eq!(labels_in(&d), vec![(1, Role::Primary)]);
    edit(&mut o, 1, |p| p.role = Some(Role::Primary));
    let d = decide_at(&spec("16.4"), &state, o.clone(), 30, 0);
    assert_eq!(d.reason(), PROMOTING);
    assert!(labels_in(&d).is_empty());
    // Its own manager promotes it; the switchover waits for the report.
    promoted_1(&mut o);
    let d = decide_at(&spec("16.4"), &state, o, 30, 0);
    assert_eq!(d.reason(), SWITCHOVER_COMPLETED);
}

#[test]
fn a_target_that_is_not_ready_is_never_promoted_and_a_ready_one_is_chosen_instead() {
    let mut o = upgrade_observed(&[1, 2], 0);
    hand_over_to_1(&mut o, V2);
    edit(&mut o, 1, |p| p.ready = false);
    let d = decide(
        &spec("16.4"),
        &upgrade_switchover(SwitchStep::Promote),
        o.clone(),
    );
    assert_eq!(d.reason(), TARGET_CHANGED);
    assert!(matches!(
        target(&d),
        Some(PgState::SwitchingOver(s)) if s.target.ordinal == 2 && s.attempt == 1
    ));
    // With no other Ready replica at the target image, it waits, Degraded, and the
    // target holding the Lease is not labelled primary meanwhile: labelled, its agent
    // would promote it (found by the deep model check).
    edit(&mut o, 2, |p| p.ready = false);
    let d = decide(&spec("16.4"), &upgrade_switchover(SwitchStep::Promote), o);
    assert_degraded(&d, NO_PROMOTION_TARGET);
    assert!(
        !labels_in(&d).contains(&(1, Role::Primary)),
        "{:?}",
        labels_in(&d)
    );
}

#[test]
fn once_promoted_the_old_primary_loses_its_label_before_the_target_gets_it() {
    let mut o = upgrade_observed(&[1, 2], 0);
    hand_over_to_1(&mut o, V2);
    promoted_1(&mut o);
    let d = decide(&spec("16.4"), &upgrade_switchover(SwitchStep::Promote), o);
    assert_eq!(d.reason(), SWITCHOVER_COMPLETED);
    // Unconditionally: a cache may still show the old primary as a replica. It is still
    // the pod the switchover began with, so possibly writable: `demoted`, not `replica`.
    assert_eq!(labels_in(&d), vec![(0, Role::Demoted), (1, Role::Primary)]);
    assert_eq!(target(&d), Some(&upgrading_to_v2(1)));
}

#[test]
fn the_primary_label_does_not_move_while_the_old_primary_pod_is_unseen() {
    let mut o = upgrade_observed(&[1, 2], 0);
    o.own.lease = Some(lease_of(1, V2));
    o.pods.remove(&0);
    promoted_1(&mut o);
    let d = decide(&spec("16.4"), &upgrade_switchover(SwitchStep::Promote), o);
    assert_eq!(d.reason(), WAITING_FOR_OLD_PRIMARY);
    assert!(!labels_in(&d).contains(&(1, Role::Primary)));
}

#[test]
fn after_the_switchover_the_old_primary_is_upgraded_last() {
    let state = upgrading_to_v2(1);
    let d = decide(&spec("16.4"), &state, upgrade_observed(&[1, 2], 1));
    assert_eq!(d.reason(), POD_CHOSEN);
    assert!(matches!(
        target(&d),
        Some(PgState::Upgrading { pod: Some(p), .. }) if p.ordinal == 0
    ));
    let d = decide(&spec("16.4"), &state, upgrade_observed(&[0, 1, 2], 1));
    assert_goes(&d, UPGRADE_COMPLETED, &ready(V2, 1));
}

#[test]
fn a_promotion_not_reported_within_its_bound_is_awaited_again_as_the_next_attempt() {
    let mut o = upgrade_observed(&[1, 2], 0);
    hand_over_to_1(&mut o, V2);
    let state = upgrade_switchover(SwitchStep::Promote);
    let d = decide_at(&spec("16.4"), &state, o.clone(), 119, 0);
    assert_eq!(d.reason(), PROMOTING);
    assert_eq!(requeue_secs(&d), Some(1));
    let d = decide_at(&spec("16.4"), &state, o, 120, 0);
    assert_eq!(d.reason(), PROMOTION_RETRIED);
    assert_says(
        &d,
        &["pg-1 reported no writable server holding Lease term 0 within 120s"],
    );
    let Some(next) = target(&d).cloned() else {
        panic!("{d:?}")
    };
    assert!(matches!(&next, PgState::SwitchingOver(s) if s.attempt == 2));
    // The next attempt's wait is Degraded, naming what the target reports.
    let mut o = upgrade_observed(&[1, 2], 0);
    hand_over_to_1(&mut o, V2);
    let d = decide_at(&spec("16.4"), &next, o, 30, 0);
    assert_degraded(&d, PROMOTION_OVERDUE);
    assert_says(
        &d,
        &[
            "attempt 2 of 6",
            "it reports no running server",
            "kubectl logs pg-1",
        ],
    );
}

#[test]
fn a_single_instance_is_replaced_in_place() {
    let mut s = spec("16.4");
    s.replicas = 1;
    let one = Topology {
        image: V2.to_owned(),
        replicas: 1,
        primary: 0,
    };
    let mut o = at_rest(V1, 0);
    o.pods.retain(|k, _| *k == 0);
    if let Some(sts) = o.statefulset.as_mut() {
        sts.image = Some(V2.to_owned());
        sts.replicas = 1;
    }
    let d = decide(
        &s,
        &PgState::Upgrading {
            cluster: one.clone(),
            pod: None,
        },
        o,
    );
    assert_eq!(d.reason(), POD_CHOSEN);
    assert!(matches!(
        target(&d),
        Some(PgState::Upgrading { pod: Some(p), .. }) if p.ordinal == 0
    ));
}

#[test]
fn a_pod_that_replaced_the_target_is_not_labelled_primary_by_its_ordinal() {
    let mut o = upgrade_observed(&[1, 2], 0);
    hand_over_to_1(&mut o, V2);
    // The target's pod was deleted and made again: same ordinal, a new UID, not Ready.
    edit(&mut o, 1, |p| {
        p.uid = "replacement".to_owned();
        p.ready = false;
        p.role = None;
    });
    // And no other replica can be chosen: the switchover waits.
    edit(&mut o, 2, |p| p.ready = false);
    let d = decide_at(
        &spec("16.4"),
        &upgrade_switchover(SwitchStep::Promote),
        o,
        30,
        0,
    );
    // The Lease names the old pod: labelled primary, the new one would wait for it for
    // ever; labelled replica, it starts as a standby that can be chosen again.
    assert_degraded(&d, NO_PROMOTION_TARGET);
    assert_eq!(labels_in(&d), vec![(1, Role::Replica)]);
}
