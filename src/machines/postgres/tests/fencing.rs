//! Fencing: the primary Lease at creation, at rest, in switchovers and failovers, and a
//! lost status adopted as the cluster runs.

use super::upgrades::upgrade_observed;
use super::*;
use crate::driver::Operator;
use crate::machines::postgres::actions::{LsnGate, survey_key};
use crate::machines::postgres::answers::Answer;
use crate::machines::postgres::decide::switching_over::surveying::SURVEYS_FOR_EVERY_MEMBER;
use crate::machines::postgres::observe::{ADOPT_PRIMARY, FENCED, RELEASED_LSN};
use crate::machines::postgres::state::Surveyed;
use crate::machines::postgres::synchronous::{DataDurability, SyncMethod, SynchronousSpec};

pub(super) fn identity(k: i32, image: &str) -> String {
    format!("pg-{k}/{}", uid(k, image))
}

fn creating() -> PgState {
    issued()
}

pub(super) fn hand_overs(d: &Decision<PgState, PgAction>) -> Vec<Option<String>> {
    picked!(d.actions(), PgAction::HandLease { holder, .. } => holder.clone())
}

fn lease_creations(d: &Decision<PgState, PgAction>) -> Vec<Option<String>> {
    picked!(d.actions(), PgAction::CreateLease { holder, .. } => holder.clone())
}

/// The decision at `t(now)` of a failover at its Fence step (entered at `t(995)`) while
/// the old primary lingers with the Lease it renewed at `t(990)`.
fn fencing_at(now: i64) -> Decision<PgState, PgAction> {
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
fn surveying() -> PgState {
    failover_at(SwitchStep::Fence)
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
    edit_lease(&mut o, |l| l.renewed = Some(t(renewed)));
    o
}

// --- creation ----------------------------------------------------------------------

fn lease_seconds_created(d: &Decision<PgState, PgAction>) -> Vec<i64> {
    picked!(d.actions(), PgAction::CreateLease { seconds, .. } => *seconds)
}

/// Nothing of the cluster exists (no claim, StatefulSet or pod): a brand-new cluster.
fn nothing_yet() -> Observed {
    let mut o = at_rest(V1, 0);
    o.statefulset = None;
    o.pods.clear();
    o.own.claims.clear();
    o.own.lease = None;
    o.own.longest_lease_seconds = None;
    o
}

#[test]
fn a_new_cluster_creates_the_lease_never_held_and_hands_it_to_pod_0_without_waiting() {
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
fn creating_over_existing_claims_creates_the_lease_naming_nobody_and_waits_out_the_longest_lease() {
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
fn a_lost_status_adopts_the_lease_holder_as_primary_without_moving_a_role() {
    let mut o = at_rest(V1, 1);
    edit_lease(&mut o, |l| l.transitions = 1);
    let d = decide(&spec("16.3"), &creating(), o);
    assert_goes(&d, ADOPTED, &ready(V1, 1));
    assert!(d.actions().is_empty(), "{d:?}");
}

#[test]
fn a_lost_status_with_two_pods_labelled_primary_and_no_holder_waits_for_a_person() {
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
fn a_lost_status_without_a_lease_creates_one_naming_nobody_and_waits_for_it_to_expire() {
    let mut o = at_rest(V1, 2);
    o.own.lease = None;
    let d = decide(&spec("16.3"), &creating(), o);
    assert_eq!(d.reason(), WAITING_FOR_FENCE);
    assert_eq!(lease_creations(&d), vec![None]);
    assert!(labels_in(&d).is_empty() && deletes_in(&d).is_empty());
}

#[test]
fn a_lost_status_whose_primary_was_recreated_hands_the_lease_to_the_new_pod_once_it_expired() {
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
fn a_failover_waits_while_the_old_primary_may_still_be_writable() {
    let d = fencing_at(1000);
    assert_eq!(d.reason(), WAITING_FOR_FENCE);
    assert!(!is_degraded(&d));
    assert!(hand_overs(&d).is_empty());
    // renewTime + L + S = 990 + 15 + 2: looked at again just after.
    assert_eq!(requeue_secs(&d), Some(8));
}

#[test]
fn once_the_lease_expired_it_is_handed_to_the_target_then_promoted() {
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
fn an_old_primary_that_released_the_lease_has_it_handed_over_at_once() {
    let mut released = old_primary_lingering(999);
    edit_lease(&mut released, |l| l.released_by = l.holder.take());
    let d = decide(&spec("16.3"), &failing_over(SwitchStep::Fence), released);
    assert_eq!(d.reason(), LEASE_HANDED_OVER);
}

/// A pod force-deleted while its node is partitioned keeps
/// running its container; its pod object being gone proves nothing.
#[test]
fn a_vanished_pod_is_not_fenced_until_its_lease_expires_or_a_person_says_so() {
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
fn a_long_wait_for_fencing_is_degraded_and_names_the_escape_hatch() {
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
fn a_planned_switchover_demotes_the_old_primary_and_waits_for_it_to_release_the_lease() {
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
fn mid_promotion_a_lease_that_no_longer_names_the_target_is_fenced_again() {
    let d = decide(
        &spec("16.3"),
        &failing_over(SwitchStep::Promote),
        old_primary_gone(0),
    );
    assert_eq!(d.reason(), LEASE_LOST);
}

// --- most advanced failover ------------------------------------------------------------

pub(super) fn at_survey(attempt: Option<u32>) -> PgState {
    match surveying() {
        PgState::SwitchingOver(s) => PgState::SwitchingOver(Switchover {
            step: SwitchStep::Survey,
            survey_attempt: attempt,
            ..s
        }),
        other => other,
    }
}

/// One standby's answer: its ordinal, timeline (none: 0), received and replayed LSNs.
pub(super) type Said = (i32, Option<u32>, &'static str, &'static str);

/// The token of the failover's survey `attempt` on the Lease of `o`.
fn token(o: &Observed, attempt: u32) -> String {
    let term = o.own.lease.as_ref().map_or(0, |l| l.transitions);
    survey_key(&uid(0, V1), term, attempt)
}

/// The first survey was asked on the Lease and the standbys answered `said`.
pub(super) fn surveyed(said: &[Said]) -> Observed {
    surveyed_by(said, 1)
}

/// Survey `attempt` was asked on the Lease and the standbys answered `said`.
pub(super) fn surveyed_by(said: &[Said], attempt: u32) -> Observed {
    let mut o = old_primary_gone(0);
    let asked = token(&o, attempt);
    edit_lease(&mut o, |l| l.survey = Some(asked.clone()));
    for (k, timeline, received, replayed) in said {
        o.own.answers.insert(
            *k,
            Answer {
                token: asked.clone(),
                timeline: timeline.unwrap_or(0),
                received: received.parse().expect("an LSN"),
                replayed: replayed.parse().expect("an LSN"),
            },
        );
    }
    o
}

#[test]
fn a_failover_surveys_the_standbys_only_once_the_old_primary_is_fenced() {
    let d = decide(&spec("16.3"), &surveying(), old_primary_lingering(0));
    assert_eq!(d.reason(), OLD_PRIMARY_FENCED);
    assert!(hand_overs(&d).is_empty(), "no target is chosen yet");
    let d = decide_at(
        &spec("16.3"),
        &surveying(),
        old_primary_lingering(999),
        1000,
        999,
    );
    assert_eq!(d.reason(), WAITING_FOR_FENCE);
    // The survey asks every other live pod, through the Lease.
    let o = old_primary_gone(0);
    let asked = token(&o, 1);
    let d = decide(&spec("16.3"), &at_survey(None), o);
    assert_eq!(d.reason(), SURVEYING);
    assert_says(&d, &["asking pg-1, pg-2 for their WAL positions"]);
    assert!(has_action(&d, |a| matches!(
        a,
        PgAction::AskSurvey { token, .. } if *token == asked
    )));
}

#[test]
fn a_survey_waits_up_to_its_bound_for_answers_to_its_own_token() {
    let both: &[Said] = &[(1, Some(1), "0/5", "0/5"), (2, Some(1), "0/9", "0/9")];
    // Asked at 0 s; at 3 s nobody answered: wait the 2 s left.
    let d = decide_at(&spec("16.3"), &at_survey(None), surveyed(&[]), 3, 0);
    assert_stays(&d, SURVEYING);
    assert_eq!(requeue_secs(&d), Some(2));
    assert_says(&d, &["waiting up to 5 s for pg-1, pg-2 to answer"]);
    assert!(d.actions().is_empty(), "asked once");
    // Every live member answered: no need to wait.
    let d = decide_at(&spec("16.3"), &at_survey(None), surveyed(both), 3, 0);
    assert_eq!(d.reason(), MOST_ADVANCED_CHOSEN);
    // Answers to an earlier survey do not count.
    let mut stale = surveyed(both);
    let earlier = survey_key(&uid(0, V1), 0, 2);
    for a in stale.own.answers.values_mut() {
        a.token.clone_from(&earlier);
    }
    let d = decide_at(&spec("16.3"), &at_survey(None), stale, 3, 0);
    assert_stays(&d, SURVEYING);
    // A new survey is a new token: it is asked again.
    let d = decide_at(&spec("16.3"), &at_survey(Some(2)), surveyed(both), 3, 0);
    assert!(has_action(&d, |a| matches!(a, PgAction::AskSurvey { .. })));
}

#[test]
fn the_most_advanced_ready_standby_is_chosen_and_recorded_before_the_lease_moves() {
    let d = decide(
        &spec("16.3"),
        &at_survey(None),
        surveyed(&[
            (1, None, "0/3000060", "0/3000060"),
            (2, None, "0/3000148", "0/3000060"),
        ]),
    );
    assert_eq!(d.reason(), MOST_ADVANCED_CHOSEN);
    assert!(d.actions().is_empty(), "intent first");
    let Some(PgState::SwitchingOver(s)) = target(&d) else {
        panic!("{d:?}")
    };
    assert_eq!(s.target.ordinal, 2);
    assert_eq!(s.step, SwitchStep::Fence);
    assert_eq!(s.surveyed.as_ref().map(Vec::len), Some(2));
    assert!(
        message(&d).contains("pg-2 receive 0/3000148"),
        "{}",
        message(&d)
    );
}

#[test]
fn ties_go_to_the_higher_replay_position_then_to_the_lowest_ordinal() {
    let pick =
        |said: &[Said]| match target(&decide(&spec("16.3"), &at_survey(None), surveyed(said))) {
            Some(PgState::SwitchingOver(s)) => s.target.ordinal,
            other => panic!("{other:?}"),
        };
    assert_eq!(pick(&[(1, None, "0/5", "0/3"), (2, None, "0/5", "0/4")]), 2);
    assert_eq!(pick(&[(1, None, "0/5", "0/4"), (2, None, "0/5", "0/4")]), 1);
}

#[test]
fn a_standby_on_an_older_timeline_loses_to_one_on_the_newest_whatever_its_position() {
    // pg-1 received WAL the timeline-1 primary wrote after the fork of timeline 2: more
    // bytes, none of them on the history the cluster kept.
    let d = decide(
        &spec("16.3"),
        &at_survey(None),
        surveyed(&[
            (1, Some(1), "0/9000000", "0/9000000"),
            (2, Some(2), "0/3000148", "0/3000148"),
        ]),
    );
    let Some(PgState::SwitchingOver(s)) = target(&d) else {
        panic!("{d:?}")
    };
    assert_eq!(s.target.ordinal, 2);
    assert!(
        message(&d).contains("pg-1 timeline 1 receive 0/9000000")
            && message(&d).contains("pg-2 timeline 2 receive 0/3000148"),
        "{}",
        message(&d)
    );
    let recorded = s.surveyed.clone().unwrap_or_default();
    assert_eq!(
        recorded.iter().map(|x| x.timeline).collect::<Vec<_>>(),
        [Some(1), Some(2)]
    );
}

#[test]
fn a_live_member_the_survey_did_not_reach_is_surveyed_again_then_skipped_with_the_reason_in_the_history()
 {
    let o = surveyed(ONLY_PG2);
    // pg-1 may hold newer WAL: a survey 10 s after this one's answers were read, not a
    // target.
    let d = decide_at(&spec("16.3"), &at_survey(None), o.clone(), 12, 0);
    assert_stays(&d, SURVEYING);
    assert!(target(&d).is_none(), "{d:?}");
    assert!(
        message(&d).contains(
            "not pg-1, which may hold newer WAL; surveying again (survey 2 of at most 3)"
        ),
        "{}",
        message(&d)
    );
    let d = decide_at(&spec("16.3"), &at_survey(None), o.clone(), 30, 0);
    assert_goes(&d, SURVEY_RETRIED, &at_survey(Some(2)));
    // The third survey that misses it chooses among those read, and says so.
    let d = decide_at(
        &spec("16.3"),
        &at_survey(Some(3)),
        surveyed_by(ONLY_PG2, 3),
        12,
        0,
    );
    assert_eq!(d.reason(), MOST_ADVANCED_CHOSEN);
    assert!(matches!(target(&d), Some(PgState::SwitchingOver(s)) if s.target.ordinal == 2));
    assert!(
        message(&d).contains("pg-1 did not answer 3 surveys and was skipped"),
        "{}",
        message(&d)
    );
}

#[test]
fn a_standby_the_survey_did_not_reach_or_that_is_not_ready_is_never_chosen() {
    let mut o = surveyed(ONLY_PG2);
    edit(&mut o, 1, |p| p.terminating = true);
    // pg-1's pod is being deleted; back on its volume it may hold newer WAL: surveyed
    // again, as a member that does not answer is, then skipped.
    let d = decide_at(&spec("16.3"), &at_survey(None), o.clone(), 12, 0);
    assert_stays(&d, SURVEYING);
    assert!(target(&d).is_none(), "{d:?}");
    let mut third = surveyed_by(ONLY_PG2, 3);
    third.pods.remove(&1);
    let d = decide_at(&spec("16.3"), &at_survey(Some(3)), third, 12, 0);
    assert!(matches!(
        target(&d),
        Some(PgState::SwitchingOver(s)) if s.target.ordinal == 2
    ));
    assert_says(&d, &["pg-1 did not answer 3 surveys and was skipped"]);
    edit(&mut o, 2, |p| p.ready = false);
    let d = decide(&spec("16.3"), &at_survey(None), o);
    // A standby may be restarting: it is read again before the failover gives up.
    assert_goes(&d, SURVEY_RETRIED, &at_survey(Some(2)));
}

/// After the last survey no standby can be promoted, but the old primary's pod is back
/// (recreated on its volume) and the Lease still names its ordinal: nobody else was
/// writable, so the failover goes back to it. With a target already chosen by a survey
/// (the Lease may have been handed on), the Lease naming another ordinal, or the old
/// primary's pod reporting an empty volume, it waits.
#[test]
fn a_failover_with_no_standby_to_promote_goes_back_to_the_old_primary_back_on_its_volume() {
    let back = || {
        let mut o = surveyed_by(ONLY_PG2, SURVEYS_FOR_EVERY_MEMBER);
        let mut pod = o.pods.get(&1).cloned().expect("pod 1");
        pod.uid = "recreated".to_owned();
        pod.role = Some(Role::Replica);
        o.pods.insert(0, pod);
        edit(&mut o, 1, |p| p.terminating = true);
        edit(&mut o, 2, |p| p.ready = false);
        o
    };
    let state = at_survey(Some(SURVEYS_FOR_EVERY_MEMBER));
    let d = decide(&spec("16.3"), &state, back());
    assert_eq!(d.reason(), BACK_TO_OLD_PRIMARY, "{d:?}");
    assert!(matches!(target(&d), Some(PgState::PrimaryLost { cluster }) if cluster.primary == 0));

    let mut elsewhere = back();
    edit_lease(&mut elsewhere, |l| l.holder = Some(identity(2, V1)));
    let d = decide(&spec("16.3"), &state, elsewhere);
    assert_degraded(&d, NO_PROMOTION_TARGET);

    // Recreated on a lost claim, its manager reports an empty volume: it holds no WAL.
    let mut emptied = back();
    emptied.own.empty.insert(0);
    let d = decide(&spec("16.3"), &state, emptied);
    assert_degraded(&d, NO_PROMOTION_TARGET);

    let PgState::SwitchingOver(s) = &state else {
        unreachable!("at_survey is a switchover")
    };
    let chosen = PgState::SwitchingOver(Switchover {
        surveyed: Some(Vec::new()),
        ..s.clone()
    });
    let d = decide(&spec("16.3"), &chosen, back());
    assert_degraded(&d, NO_PROMOTION_TARGET);
}

/// After the last survey, no Ready standby and no old primary back on its volume: the
/// failover waits, Degraded.
#[test]
fn a_failover_that_surveyed_three_times_and_found_no_ready_standby_waits_degraded() {
    let mut o = surveyed_by(ONLY_PG2, SURVEYS_FOR_EVERY_MEMBER);
    edit(&mut o, 1, |p| p.terminating = true);
    edit(&mut o, 2, |p| p.ready = false);
    let d = decide(&spec("16.3"), &at_survey(Some(SURVEYS_FOR_EVERY_MEMBER)), o);
    assert_degraded(&d, NO_PROMOTION_TARGET);
}

#[test]
fn lsns_compare_as_numbers() {
    use crate::machines::postgres::decide::survey::lsn;
    assert!(lsn("1/0") > lsn("0/FFFFFFFF"));
    assert_eq!(lsn("0/3000060"), Some(0x0300_0060));
    assert_eq!(lsn("garbage"), None);
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
    assert_eq!(rules.len(), 2);
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

// --- synchronous replication: a failover reads the quorum ------------------------------

pub(super) fn synchronous(durability: DataDurability) -> PostgresClusterSpec {
    PostgresClusterSpec {
        synchronous: Some(SynchronousSpec {
            number: 1,
            method: SyncMethod::Any,
            data_durability: durability,
        }),
        ..spec("16.3")
    }
}

const ONLY_PG2: &[Said] = &[(2, None, "0/1", "0/1")];

/// The decision at `now` of a failover at its survey, asked at 0 s (its answers read at
/// 5 s), answered `said`, with `spec.synchronous` of `durability`.
fn surveyed_with(
    durability: DataDurability,
    said: &[Said],
    now: i64,
) -> Decision<PgState, PgAction> {
    decide_at(
        &synchronous(durability),
        &at_survey(None),
        surveyed(said),
        now,
        0,
    )
}

#[test]
fn with_synchronous_replication_a_failover_that_read_too_few_members_waits_and_surveys_again() {
    // ANY 1 of pg-1 and pg-2: a commit pg-2 lacks may be on pg-1, unread.
    let d = surveyed_with(DataDurability::Required, ONLY_PG2, 12);
    assert_degraded(&d, NO_PROMOTION_TARGET);
    assert!(target(&d).is_none(), "nobody is promoted: {d:?}");
    for needle in [
        "waiting for pg-1",
        "2 must be read",
        "dataDurability to Preferred",
    ] {
        assert!(message(&d).contains(needle), "{needle}: {}", message(&d));
    }
    // Some seconds after its answers were read: a new survey.
    let d = surveyed_with(DataDurability::Required, ONLY_PG2, 30);
    assert_goes(&d, SURVEY_RETRIED, &at_survey(Some(2)));
}

#[test]
fn with_synchronous_replication_a_failover_whose_unread_members_lost_their_data_waits_for_a_person_without_surveying_again()
 {
    // pg-1 came back on an empty volume: it can never answer with what it had.
    let mut o = surveyed(ONLY_PG2);
    o.own.empty.insert(1);
    let spec = synchronous(DataDurability::Required);
    for now in [12, 30, 600] {
        let d = decide_at(&spec, &at_survey(None), o.clone(), now, 0);
        assert_degraded(&d, NO_PROMOTION_TARGET);
        assert!(
            target(&d).is_none(),
            "no new survey, nobody promoted: {d:?}"
        );
        for needle in ["pg-1 lost their data", "dataDurability to Preferred"] {
            assert!(message(&d).contains(needle), "{needle}: {}", message(&d));
        }
    }
}

#[test]
fn with_synchronous_replication_a_failover_that_read_every_needed_member_promotes_the_most_advanced()
 {
    let both: &[Said] = &[(1, None, "0/9", "0/9"), (2, None, "0/1", "0/1")];
    let d = surveyed_with(DataDurability::Required, both, 12);
    assert_eq!(d.reason(), MOST_ADVANCED_CHOSEN);
    assert!(matches!(target(&d), Some(PgState::SwitchingOver(s)) if s.target.ordinal == 1));
    // Preferred promises nothing once asynchronous: the member read is promoted, once
    // the unread one was waited for as in asynchronous replication.
    let d = decide_at(
        &synchronous(DataDurability::Preferred),
        &at_survey(Some(3)),
        surveyed_by(ONLY_PG2, 3),
        12,
        0,
    );
    assert_eq!(d.reason(), MOST_ADVANCED_CHOSEN);
}

#[test]
fn a_primary_whose_manager_released_the_lease_is_lost_at_once_and_given_it_back_while_the_delay_runs()
 {
    // The server crashed; its manager killed what the postmaster left and released the
    // Lease, naming nobody. The pod still looks Ready: the kubelet has not probed yet.
    let mut o = at_rest(V1, 0);
    if let Some(l) = o.own.lease.as_mut() {
        l.holder = None;
        l.released_by = Some(identity(0, V1));
    }
    let d = decide(&spec("16.3"), &ready(V1, 0), o.clone());
    let lost = PgState::PrimaryLost {
        cluster: cluster(V1, 0),
    };
    assert_goes(&d, PRIMARY_NOT_READY, &lost);
    assert_says(&d, &["released the primary Lease"]);
    // While failoverDelaySeconds runs, the Lease goes back to the same pod, certainly
    // fenced by its release: its restarted container recovers the server in place.
    let d = decide_at(&spec("16.3"), &lost, o, 10, 0);
    assert_eq!(d.reason(), AWAITING_FAILOVER);
    assert_eq!(hand_overs(&d), [Some(identity(0, V1))]);
}
