//! Hibernation (`spec.hibernate`): each step, waking with the same primary, and
//! deletion while asleep.

use super::*;
use crate::machines::common::actions::JobAction;
use crate::machines::common::observe::CronJobView;
use crate::machines::common::testing::decide_deleting;
use crate::machines::postgres::state::{HibernateStep, Hibernation};

fn hibernating(hibernate: bool) -> PostgresClusterSpec {
    PostgresClusterSpec {
        hibernate,
        ..spec("16.3")
    }
}

fn at(step: HibernateStep) -> PgState {
    PgState::Hibernating(Hibernation {
        cluster: cluster(V1, 1),
        hibernate_step: step,
    })
}

/// What a hibernated cluster looks like: a StatefulSet of no pod, the Lease released
/// by the primary as its pod stopped, the claims kept.
fn asleep() -> Observed {
    let mut o = at_rest(V1, 1);
    o.pods.clear();
    if let Some(sts) = o.statefulset.as_mut() {
        sts.replicas = 0;
    }
    edit_lease(&mut o, |l| {
        l.released_by = l.holder.take();
    });
    o
}

/// Every pod made anew by the StatefulSet as the cluster wakes: new UIDs, no label yet.
fn woken_pods(o: &mut Observed) {
    o.pods = (0..3)
        .map(|k| {
            let mut p = pod(k, V1, false, None);
            p.uid = format!("new-{k}");
            (k, p)
        })
        .collect();
    if let Some(sts) = o.statefulset.as_mut() {
        sts.replicas = 3;
    }
}

#[test]
fn hibernation_is_recorded_before_anything_stops() {
    let d = decide(&hibernating(true), &ready(V1, 1), at_rest(V1, 1));
    assert_goes(&d, HIBERNATION_REQUESTED, &at(HibernateStep::Stopping));
    assert!(
        d.actions().is_empty(),
        "nothing moves before the intent is persisted"
    );
}

#[test]
fn a_lost_primary_is_failed_over_before_the_cluster_hibernates() {
    let mut o = at_rest(V1, 1);
    edit(&mut o, 1, |p| p.ready = false);
    let d = decide(&hibernating(true), &ready(V1, 1), o);
    assert_eq!(
        d.reason(),
        PRIMARY_NOT_READY,
        "the primary a cluster wakes with must hold every commit"
    );
}

#[test]
fn stopping_scales_to_zero_deletes_the_backup_cronjob_and_waits_for_the_fence() {
    let s = with_backups(hibernating(true), Some("0 3 * * *"));
    let mut o = at_rest(V1, 1);
    o.cronjob = Some(CronJobView {
        uid: "cron-uid".to_owned(),
        in_sync: true,
    });
    let d = decide(&s, &at(HibernateStep::Stopping), o.clone());
    assert_stays(&d, STOPPING_INSTANCES);
    assert!(d.actions().contains(&PgAction::EnsureStatefulSet {
        image: V1.to_owned(),
        replicas: 0
    }));
    assert!(
        d.actions()
            .contains(&PgAction::Jobs(JobAction::DeleteCronJob {
                uid: "cron-uid".to_owned()
            })),
        "a scheduled backup needs a running primary: {d:?}"
    );
    // The pods are gone, but the Lease was renewed 5 s ago: its holder may still write.
    o.pods.clear();
    let d = decide(&s, &at(HibernateStep::Stopping), o.clone());
    assert_stays(&d, STOPPING_INSTANCES);
    assert_says(&d, &["may still be writable"]);
    assert!(
        requeue_secs(&d).is_some_and(|secs| secs > 0),
        "looks again once it expired: {d:?}"
    );
    // Released as its pod stopped: every server is down.
    edit_lease(&mut o, |l| l.released_by = l.holder.take());
    let d = decide(&s, &at(HibernateStep::Stopping), o);
    assert_goes(&d, INSTANCES_STOPPED, &at(HibernateStep::Asleep));
}

#[test]
fn a_cluster_asleep_rests_without_a_write_and_says_how_to_wake_it() {
    let d = decide(&hibernating(true), &at(HibernateStep::Asleep), asleep());
    assert_stays(&d, HIBERNATED);
    assert!(d.actions().is_empty(), "{d:?}");
    assert!(!is_degraded(&d));
    assert_says(&d, &["spec.hibernate to false", "pg-1 as the primary"]);
}

#[test]
fn waking_is_recorded_before_anything_starts_even_mid_stop() {
    for step in [HibernateStep::Asleep, HibernateStep::Stopping] {
        let d = decide(&hibernating(false), &at(step), asleep());
        assert_goes(&d, WAKE_REQUESTED, &at(HibernateStep::Waking));
        assert!(d.actions().is_empty());
    }
    let d = decide(&hibernating(true), &at(HibernateStep::Waking), asleep());
    assert_goes(&d, HIBERNATION_REQUESTED, &at(HibernateStep::Stopping));
}

#[test]
fn waking_gives_the_lease_and_the_label_to_the_primary_it_had() {
    let s = hibernating(false);
    let d = decide(&s, &at(HibernateStep::Waking), asleep());
    assert_stays(&d, WAKING);
    assert!(d.actions().contains(&PgAction::EnsureStatefulSet {
        image: V1.to_owned(),
        replicas: 3
    }));
    let mut o = asleep();
    woken_pods(&mut o);
    let d = decide(&s, &at(HibernateStep::Waking), o);
    assert_stays(&d, WAKING);
    assert!(
        has_action(&d, |a| matches!(
            a,
            PgAction::HandLease { holder: Some(h), .. } if h == "pg-1/new-1"
        )),
        "the Lease its last holder released goes to the primary's new pod: {d:?}"
    );
    let mut labels = labels_in(&d);
    labels.sort_by_key(|(k, _)| *k);
    assert_eq!(
        labels,
        vec![(0, Role::Replica), (1, Role::Primary), (2, Role::Replica)]
    );
}

#[test]
fn a_lease_still_held_is_waited_out_before_the_primary_is_given_it() {
    let mut o = asleep();
    // Deleted by hand while asleep: made anew naming nobody, waited out.
    o.own.lease = None;
    let d = decide(&hibernating(false), &at(HibernateStep::Waking), o);
    assert_stays(&d, WAKING);
    assert!(has_action(&d, |a| matches!(
        a,
        PgAction::CreateLease { holder: None, .. }
    )));
    assert!(requeue_secs(&d).is_some());
}

#[test]
fn every_instance_ready_again_ends_the_hibernation_with_the_same_primary() {
    let d = decide(
        &hibernating(false),
        &at(HibernateStep::Waking),
        at_rest(V1, 1),
    );
    assert_goes(&d, CLUSTER_WOKEN, &ready(V1, 1));
    assert!(d.actions().is_empty());
}

#[test]
fn a_primary_back_on_an_empty_volume_is_degraded_naming_the_way_out() {
    let mut o = asleep();
    woken_pods(&mut o);
    o.own.empty.insert(1);
    let d = decide(&hibernating(false), &at(HibernateStep::Waking), o.clone());
    assert_degraded(&d, PRIMARY_VOLUME_EMPTY);
    assert_says(
        &d,
        &["pg-1", "holds no database", "lockstep.dev/adopt-primary"],
    );
    o.own.requests.adopt_primary = Some("pg-0".to_owned());
    let d = decide(&hibernating(false), &at(HibernateStep::Waking), o);
    assert_eq!(d.reason(), ADOPTION_REQUESTED);
}

#[test]
fn deleting_a_hibernated_cluster_waits_for_it_to_wake_or_for_the_skip_annotation() {
    let s = with_backups(hibernating(true), None);
    let d = decide_deleting::<Postgres>(&s, &at(HibernateStep::Asleep), asleep());
    assert_degraded(&d, FINAL_BACKUP_NEEDS_PRIMARY);
    assert_says(
        &d,
        &["spec.hibernate to false", "lockstep.dev/skip-final-backup"],
    );
    // Woken: the final backup runs once it is Ready.
    let s = with_backups(hibernating(false), None);
    let d = decide_deleting::<Postgres>(&s, &at(HibernateStep::Asleep), asleep());
    assert_goes(&d, WAKE_REQUESTED, &at(HibernateStep::Waking));
    // Skipped: the finalizer goes at once.
    let mut skipped = asleep();
    skipped.requests.skip_final_backup = true;
    let s = with_backups(hibernating(true), None);
    let d = decide_deleting::<Postgres>(&s, &at(HibernateStep::Asleep), skipped);
    assert_goes(&d, FINAL_BACKUP_SKIPPED, &PgState::Finalized);
}
