//! The in-place restore (`spec.restore`): the request, each step, and a token present
//! at creation.

use super::*;
use crate::machines::common::testing::{decide_acked, message, target};
use crate::machines::postgres::api::{RecoveryTarget, RestoreSpec};
use crate::machines::postgres::decide::restoring_in_place::RESTORE_ACK;
use crate::machines::postgres::state::{Restore, RestoreStep};
use crate::pod::restore::annotation_value;

fn restoring_to(token: &str, time: Option<i64>) -> PostgresClusterSpec {
    let mut s = with_backups(spec("16.3"), None);
    s.restore = Some(RestoreSpec {
        token: token.to_owned(),
        target: time.map(|secs| RecoveryTarget {
            time: Some(t(secs)),
            ..RecoveryTarget::default()
        }),
    });
    s
}

fn at_step(step: RestoreStep) -> PgState {
    PgState::RestoringInPlace(Restore {
        cluster: cluster(V1, 1),
        restore: RestoreSpec {
            token: "r1".to_owned(),
            target: None,
        },
        restore_step: step,
    })
}

fn step_of(d: &Decision<PgState, PgAction>) -> Option<RestoreStep> {
    match target(d) {
        Some(PgState::RestoringInPlace(r)) => Some(r.restore_step),
        _ => None,
    }
}

/// No pod, no claim, no Lease: what the restore leaves before pod 0 comes back.
fn emptied() -> Observed {
    let mut o = at_rest(V1, 1);
    o.pods.clear();
    o.own.claims.clear();
    o.own.lease = None;
    o
}

#[test]
fn a_new_token_begins_the_restore_by_recording_it_before_anything_stops() {
    let d = decide(&restoring_to("r1", Some(0)), &ready(V1, 1), at_rest(V1, 1));
    assert_eq!(d.reason(), RESTORE_REQUESTED);
    assert_eq!(step_of(&d), Some(RestoreStep::StopWrites));
    assert!(
        d.actions().is_empty(),
        "nothing moves before the intent is persisted"
    );
    let Some(state) = target(&d) else {
        panic!("a restore")
    };
    assert_eq!(
        Postgres::acks(state),
        vec![(RESTORE_ACK, "r1".to_owned())],
        "the token is recorded in the same write that begins the restore"
    );
    let served = decide_acked::<Postgres>(
        &restoring_to("r1", Some(0)),
        &ready(V1, 1),
        at_rest(V1, 1),
        (RESTORE_ACK, "r1"),
    );
    assert_eq!(step_of(&served), None, "a served token runs once");
}

#[test]
fn a_time_target_whose_wal_may_not_be_archived_yet_is_refused_until_it_is() {
    // The clock is at 1000 s; the target 30 s before it.
    let d = decide(
        &restoring_to("r1", Some(970)),
        &ready(V1, 1),
        at_rest(V1, 1),
    );
    assert_degraded(&d, RESTORE_REFUSED);
    assert_says(&d, &["may not be archived yet", "nothing was stopped"]);
    assert!(matches!(d, Decision::Stay { .. }));
}

#[test]
fn a_primary_that_reports_archiving_failing_refuses_the_restore() {
    let mut o = at_rest(V1, 1);
    o.own
        .archiving
        .insert(1, (false, "archive_command fails".to_owned()));
    let d = decide(&restoring_to("r1", None), &ready(V1, 1), o);
    assert_degraded(&d, RESTORE_REFUSED);
    assert_says(&d, &["pg-1", "archiving failing"]);
}

#[test]
fn writes_stop_as_the_statefulset_scales_to_zero_and_the_step_waits_for_the_fence() {
    let s = restoring_to("r1", None);
    let d = decide(&s, &at_step(RestoreStep::StopWrites), at_rest(V1, 1));
    assert_eq!(d.reason(), STOPPING_WRITES);
    assert!(d.actions().contains(&PgAction::EnsureStatefulSet {
        image: V1.to_owned(),
        replicas: 0
    }));
    // The pods are gone, but the Lease was renewed 5 s ago: it may still write.
    let mut o = at_rest(V1, 1);
    o.pods.clear();
    let d = decide(&s, &at_step(RestoreStep::StopWrites), o.clone());
    assert_eq!(d.reason(), STOPPING_WRITES);
    assert_says(&d, &["may still be writable"]);
    // Released as its pod stopped: fenced.
    edit_lease(&mut o, |l| l.released_by = l.holder.clone());
    let d = decide(&s, &at_step(RestoreStep::StopWrites), o);
    assert_eq!(d.reason(), WRITES_STOPPED);
    assert_eq!(step_of(&d), Some(RestoreStep::ReplaceVolumes));
    assert!(d.actions().is_empty());
}

#[test]
fn every_claim_and_the_lease_are_deleted_on_their_uids_before_pod_0_restores() {
    let s = restoring_to("r1", None);
    let mut o = at_rest(V1, 1);
    o.pods.clear();
    let d = decide(&s, &at_step(RestoreStep::ReplaceVolumes), o);
    assert_eq!(d.reason(), REPLACING_VOLUMES);
    for k in 0..3 {
        assert!(d.actions().contains(&PgAction::DeleteClaim {
            ordinal: k,
            uid: format!("claim-{k}")
        }));
    }
    assert!(d.actions().contains(&PgAction::DeleteLease {
        uid: "lease-uid".to_owned()
    }));
    let d = decide(&s, &at_step(RestoreStep::ReplaceVolumes), emptied());
    assert_eq!(d.reason(), VOLUMES_REPLACED);
    assert_eq!(step_of(&d), Some(RestoreStep::RestorePrimary));
}

#[test]
fn pod_0_alone_gets_the_lease_then_the_restore_then_the_primary_label() {
    let s = restoring_to("r1", None);
    let state = at_step(RestoreStep::RestorePrimary);
    let d = decide(&s, &state, emptied());
    assert!(d.actions().contains(&PgAction::EnsureStatefulSet {
        image: V1.to_owned(),
        replicas: 1
    }));
    let mut o = emptied();
    o.pods.insert(0, pod(0, V1, false, None));
    let d = decide(&s, &state, o.clone());
    let value = annotation_value(&RestoreSpec {
        token: "r1".to_owned(),
        target: None,
    });
    assert!(d.actions().iter().any(
        |a| matches!(a, PgAction::CreateLease { holder: Some(h), .. } if h.starts_with("pg-0/"))
    ));
    assert!(d.actions().iter().any(
        |a| matches!(a, PgAction::AnnotateRestore { ordinal: 0, value: v, .. } if *v == value)
    ));
    assert!(
        !d.actions()
            .iter()
            .any(|a| matches!(a, PgAction::Label { .. })),
        "no label before the annotation is seen: its manager must see both"
    );
    o.own.lease = Some(LeaseView {
        holder: o.identity(0),
        ..lease_of(0, V1)
    });
    o.own
        .restore_annotated
        .insert(0, crate::driver::cache::digest(&value));
    let d = decide(&s, &state, o.clone());
    assert!(
        d.actions()
            .contains(&pod(0, V1, false, None).label(0, Role::Primary))
    );
    // Its manager reports the restore failed: Degraded, naming the way out.
    o.own
        .recovery_failed
        .insert(0, "recovery ended before the target".to_owned());
    let d = decide(&s, &state, o.clone());
    assert_degraded(&d, RESTORE_FAILED);
    assert_says(
        &d,
        &["pg-0", "recovery ended before the target", "new token"],
    );
    // Labelled and serving: the replicas come next.
    o.own.recovery_failed.clear();
    o.pods.insert(0, pod(0, V1, true, Some(Role::Primary)));
    if let Some(sts) = o.statefulset.as_mut() {
        sts.replicas = 1;
    }
    let d = decide(&s, &state, o);
    assert_eq!(d.reason(), PRIMARY_RESTORED);
    assert_eq!(step_of(&d), Some(RestoreStep::CloneReplicas));
}

#[test]
fn the_restore_ends_ready_once_every_instance_serves_with_pod_0_primary() {
    let s = restoring_to("r1", None);
    let d = decide(&s, &at_step(RestoreStep::CloneReplicas), at_rest(V1, 0));
    assert_eq!(d.reason(), RESTORE_COMPLETED);
    assert_eq!(target(&d), Some(&ready(V1, 0)));
}

#[test]
fn a_new_token_mid_restore_starts_it_again_from_the_first_step() {
    let s = restoring_to("r2", None);
    let d = decide(&s, &at_step(RestoreStep::RestorePrimary), emptied());
    assert_eq!(d.reason(), RESTORE_REQUESTED);
    assert_eq!(step_of(&d), Some(RestoreStep::StopWrites));
}

#[test]
fn a_new_token_refused_mid_restore_says_the_restore_in_flight_holds_at_its_step() {
    // The clock is at 1000 s; the new token's target 30 s before it.
    let s = restoring_to("r2", Some(970));
    let d = decide(&s, &at_step(RestoreStep::RestorePrimary), emptied());
    assert_degraded(&d, RESTORE_REFUSED);
    assert_says(&d, &["may not be archived yet", "holds at its step"]);
    assert!(!message(&d).contains("nothing was stopped"));
    assert!(matches!(d, Decision::Stay { .. }));
}

#[test]
fn a_token_set_when_the_cluster_is_created_is_taken_as_served_without_a_restore() {
    let s = restoring_to("r1", None);
    let d = decide(&s, &Postgres::initial(), Observed::default());
    assert_eq!(d.reason(), RESTORE_TOKEN_SERVED);
    let Some(state) = target(&d) else {
        panic!("Creating")
    };
    assert_eq!(Postgres::acks(state), vec![(RESTORE_ACK, "r1".to_owned())]);
    let d = decide(&s, state, Observed::default());
    assert_ne!(d.reason(), RESTORE_TOKEN_SERVED);
}

#[test]
fn no_primary_is_available_during_a_restore_until_pod_0_serves_the_restored_data() {
    let pg = super::rendering::object(restoring_to("r1", None));
    let available = |state: &PgState, o: &Observed| {
        crate::machines::postgres::status::primary_available(&pg, state, &[], o, t(5), Some(1))
            .map(|c| (c.status, c.reason))
    };
    // The old primary, pod 1, still serves as writes stop: the restore has begun.
    assert_eq!(
        available(&at_step(RestoreStep::StopWrites), &at_rest(V1, 1)),
        Some(("False".to_owned(), "Restoring".to_owned()))
    );
    assert_eq!(
        available(&at_step(RestoreStep::CloneReplicas), &at_rest(V1, 0)),
        Some(("True".to_owned(), "Restored".to_owned()))
    );
}
