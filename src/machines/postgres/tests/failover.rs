//! Failover: a lost primary, the delay, the promotion.

use super::upgrades::upgrade_observed;
use super::*;

fn primary_down(primary: i32) -> Observed {
    let mut o = at_rest(V1, primary);
    edit(&mut o, primary, |p| p.ready = false);
    o
}

fn lost(primary: i32) -> PgState {
    PgState::PrimaryLost {
        cluster: cluster(V1, primary),
    }
}

#[test]
fn a_primary_that_is_not_ready_is_noticed_at_once() {
    let d = decide(&spec("16.3"), &ready(V1, 0), primary_down(0));
    assert_goes(&d, PRIMARY_NOT_READY, &lost(0));
}

#[test]
fn failover_waits_for_the_delay_and_says_why() {
    let d = decide_at(&spec("16.3"), &lost(0), primary_down(0), 10, 0);
    assert_degraded(&d, AWAITING_FAILOVER);
    assert_eq!(requeue_secs(&d), Some(20));
}

#[test]
fn a_primary_that_recovers_within_the_delay_keeps_its_role() {
    let d = decide_at(&spec("16.3"), &lost(0), at_rest(V1, 0), 10, 0);
    assert_goes(&d, PRIMARY_RECOVERED, &ready(V1, 0));
}

#[test]
fn after_the_delay_a_ready_replica_is_chosen_and_the_intent_recorded() {
    let d = decide_at(&spec("16.3"), &lost(0), primary_down(0), 31, 0);
    assert_eq!(d.reason(), FAILOVER_STARTED);
    assert!(d.actions().is_empty());
    let Some(PgState::SwitchingOver(s)) = target(&d) else {
        panic!("{d:?}")
    };
    assert_eq!(s.cause, SwitchCause::Failover);
    assert_eq!(s.target.ordinal, 1);
    assert_eq!(s.old_uid.as_deref(), Some(uid(0, V1).as_str()));
    assert_says(&d, &["failoverDelaySeconds=30"]);
}

#[test]
fn a_not_ready_replica_is_never_chosen_for_failover() {
    let mut o = primary_down(0);
    edit(&mut o, 1, |p| p.ready = false);
    let d = decide_at(&spec("16.3"), &lost(0), o.clone(), 31, 0);
    assert!(matches!(
        target(&d),
        Some(PgState::SwitchingOver(s)) if s.target.ordinal == 2
    ));
    edit(&mut o, 2, |p| p.ready = false);
    let d = decide_at(&spec("16.3"), &lost(0), o, 31, 0);
    assert_degraded(&d, NO_PROMOTION_TARGET);
    assert!(target(&d).is_none());
}

#[test]
fn with_no_ready_replica_the_member_a_person_names_is_adopted_anew_and_the_wait_names_that_hatch() {
    let mut o = primary_down(0);
    edit(&mut o, 1, |p| p.ready = false);
    edit(&mut o, 2, |p| p.ready = false);
    let d = decide_at(&spec("16.3"), &lost(0), o.clone(), 31, 0);
    assert_degraded(&d, NO_PROMOTION_TARGET);
    assert_says(&d, &["lockstep.dev/adopt-primary=<pod>"]);
    // A name for the lost primary itself changes nothing.
    o.own.requests.adopt_primary = Some("pg-0".to_owned());
    let d = decide_at(&spec("16.3"), &lost(0), o.clone(), 31, 0);
    assert_degraded(&d, NO_PROMOTION_TARGET);
    o.own.requests.adopt_primary = Some("pg-2".to_owned());
    let d = decide_at(&spec("16.3"), &lost(0), o, 31, 0);
    // Adopted anew: `Creating`, its Secrets already there.
    assert_goes(&d, ADOPTION_REQUESTED, &issued());
    assert_says(&d, &["pg-2"]);
}

#[test]
fn failover_fences_the_failed_primary_by_label_and_uid_preconditioned_delete() {
    let state = failover_at(SwitchStep::Demote);
    let d = decide(&spec("16.3"), &state, primary_down(0));
    assert_eq!(d.reason(), OLD_PRIMARY_DEMOTED);
    assert_eq!(labels_in(&d), vec![(0, Role::Demoted)]);
    assert_eq!(deletes_in(&d), vec![(0, uid(0, V1), DeleteCause::Fence)]);
    // A recreated old primary (another UID, no label yet) is not deleted again, and as a
    // new pod it starts as a standby: `replica`.
    let mut o = primary_down(0);
    edit(&mut o, 0, |p| p.uid = "recreated".to_owned());
    edit(&mut o, 0, |p| p.role = None);
    let d = decide(&spec("16.3"), &state, o);
    assert!(deletes_in(&d).is_empty());
    assert_eq!(labels_in(&d), vec![(0, Role::Replica)]);
}

#[test]
fn once_the_lease_names_the_target_a_failover_waits_for_its_manager_to_report_it_promoted() {
    let state = failover_at(SwitchStep::Promote);
    let mut o = primary_down(0);
    hand_over_to_1(&mut o, V1);
    edit(&mut o, 1, |p| p.role = Some(Role::Primary));
    let d = decide_at(&spec("16.3"), &state, o, 10, 0);
    assert_stays(&d, PROMOTING);
    assert_eq!(requeue_secs(&d), Some(110), "until the attempt's bound");
    assert_says(&d, &["holds Lease term 0", "its manager to promote it"]);
}

/// A pod that was primary once before still says so until its manager reports again:
/// only a report under the Lease's current term elects it.
#[test]
fn a_report_from_an_earlier_lease_term_does_not_elect_the_target() {
    let state = failover_at(SwitchStep::Promote);
    let mut o = primary_down(0);
    hand_over_to_1(&mut o, V1);
    edit_lease(&mut o, |l| l.transitions = 5);
    reports_primary(&mut o, 1, Some(4));
    let d = decide_at(&spec("16.3"), &state, o.clone(), 10, 0);
    assert_stays(&d, PROMOTING);
    reports_primary(&mut o, 1, None);
    let d = decide_at(&spec("16.3"), &state, o.clone(), 10, 0);
    assert_stays(&d, PROMOTING);
    reports_primary(&mut o, 1, Some(5));
    let d = decide_at(&spec("16.3"), &state, o, 10, 0);
    assert_goes(&d, FAILOVER_COMPLETED, &ready(V1, 1));
}

#[test]
fn a_completed_failover_records_why_in_its_message() {
    let state = failover_at(SwitchStep::Promote);
    let mut o = primary_down(0);
    hand_over_to_1(&mut o, V1);
    promoted_1(&mut o);
    let d = decide(&spec("16.3"), &state, o);
    assert_goes(&d, FAILOVER_COMPLETED, &ready(V1, 1));
    assert_eq!(labels_in(&d), vec![(0, Role::Demoted), (1, Role::Primary)]);
    assert_says(&d, &["failoverDelaySeconds"]);
}

#[test]
fn an_upgrade_whose_primary_goes_down_fails_over_like_a_cluster_at_rest() {
    let state = upgrading_to_v2(0);
    let mut o = upgrade_observed(&[2], 0);
    edit(&mut o, 0, |p| p.ready = false);
    let d = decide(&spec("16.4"), &state, o);
    assert_eq!(d.reason(), PRIMARY_NOT_READY);
}

/// A target whose manager was copied from the operator image before Lockstep was
/// upgraded reports a primary without a term: it is taken at its word; one that reports
/// nothing is named, with the way out.
#[test]
fn a_target_running_an_older_manager_is_elected_on_a_primary_report_without_a_term() {
    let state = failover_at(SwitchStep::Promote);
    let mut o = primary_down(0);
    hand_over_to_1(&mut o, V1);
    edit_lease(&mut o, |l| l.transitions = 3);
    o.own.older_managers.insert(1);
    let d = decide_at(&spec("16.3"), &state, o.clone(), 10_000, 0);
    assert_eq!(d.reason(), PROMOTION_RETRIED);
    assert_says(&d, &["predates this operator", "delete pod pg-1"]);
    reports_primary(&mut o, 1, None);
    let d = decide_at(&spec("16.3"), &state, o.clone(), 10, 0);
    assert_goes(&d, FAILOVER_COMPLETED, &ready(V1, 1));
    // A manager of this operator's must report the term.
    o.own.older_managers.clear();
    let d = decide_at(&spec("16.3"), &state, o, 10, 0);
    assert_stays(&d, PROMOTING);
}

/// Promote attempts are bounded. Past the limit the switchover holds
/// Degraded until `lockstep.dev/retry-promote` has a new token, which starts a fresh
/// budget; a report that comes meanwhile still elects the target.
#[test]
fn promote_retries_stop_at_their_limit_until_retry_promote_has_a_new_token() {
    let state = |attempt: u32| {
        PgState::SwitchingOver(Switchover {
            attempt,
            ..match failing_promote(1) {
                PgState::SwitchingOver(s) => s,
                _ => unreachable!("a switchover"),
            }
        })
    };
    let o = || {
        let mut o = primary_down(0);
        hand_over_to_1(&mut o, V1);
        // A primary the Lease did not name when its manager reported.
        reports_primary(&mut o, 1, None);
        o
    };
    // Early attempts are tried again once their bound is over.
    let d = decide_at(&spec("16.3"), &state(1), o(), 10_000, 0);
    assert_eq!(d.reason(), PROMOTION_RETRIED);
    // The last attempt of the budget failed: hold, Degraded, saying how to go on.
    let last = 1 + crate::machines::postgres::decide::PROMOTE_RETRY_LIMIT;
    let d = decide_at(&spec("16.3"), &state(last), o(), 10_000, 0);
    assert!(target(&d).is_none(), "{d:?}");
    assert!(is_degraded(&d));
    assert_says(
        &d,
        &[
            "lockstep.dev/retry-promote",
            "it reports a primary not holding term 0",
            "kubectl logs pg-1",
        ],
    );
    // Its manager reports it promoted after all: elected, budget or not.
    let mut late = o();
    promoted_1(&mut late);
    let d = decide_at(&spec("16.3"), &state(last), late, 10_000, 0);
    assert_goes(&d, FAILOVER_COMPLETED, &ready(V1, 1));
    // A new retry-promote token: the next attempt, with a fresh budget.
    let mut asked = o();
    asked.own.requests.retry_promote = Some("r1".to_owned());
    let d = decide_at(&spec("16.3"), &state(last), asked.clone(), 10_000, 0);
    assert_eq!(d.reason(), PROMOTION_RETRIED);
    let Some(PgState::SwitchingOver(next)) = target(&d) else {
        panic!("not retried: {d:?}");
    };
    assert_eq!(next.attempt, last + 1);
    // The same token again, once that round is spent too: held.
    let spent = PgState::SwitchingOver(Switchover {
        attempt: last * 2,
        ..next.clone()
    });
    let mut asked = o();
    asked.own.requests.retry_promote = Some("r1".to_owned());
    let d = decide_at(&spec("16.3"), &spent, asked, 10_000, 0);
    assert!(target(&d).is_none() && is_degraded(&d), "{d:?}");
}

/// A planned switchover's target that was not streaming when the old primary stopped
/// lacks the WAL the Lease's released position names, and its agent never promotes it;
/// another member may have it. A promotion not reported in time surveys them (found by the model
/// check: an upgrade restarts its target just before the switchover).
#[test]
fn a_planned_switchover_whose_promotion_failed_short_of_the_released_position_surveys_the_members()
{
    let planned = match failing_promote(1) {
        PgState::SwitchingOver(s) => PgState::SwitchingOver(Switchover {
            cause: SwitchCause::Requested,
            ..s
        }),
        other => other,
    };
    let mut o = at_rest(V1, 0);
    hand_over_to_1(&mut o, V1);
    edit_lease(&mut o, |l| l.released_lsn = Some("0/3000148".to_owned()));
    let d = decide_at(&spec("16.3"), &planned, o.clone(), 10_000, 0);
    assert_eq!(d.reason(), TARGET_SHORT_OF_RELEASED);
    let Some(PgState::SwitchingOver(next)) = target(&d) else {
        panic!("{d:?}")
    };
    assert_eq!((next.step, next.attempt), (SwitchStep::Survey, 1));
    assert_says(
        &d,
        &["may lack the WAL the old primary released", "surveyed"],
    );
    // Without a released position there is nothing it may lack: retried as before.
    edit_lease(&mut o, |l| l.released_lsn = None);
    let d = decide_at(&spec("16.3"), &planned, o, 10_000, 0);
    assert_eq!(d.reason(), PROMOTION_RETRIED);
}

fn failing_promote(attempt: u32) -> PgState {
    serde_json::from_value(serde_json::json!({
        "name": "SwitchingOver",
        "cluster": {"image": V1, "replicas": 3, "primary": 0},
        "oldUid": uid(0, V1),
        "target": {"ordinal": 1, "uid": uid(1, V1)},
        "step": "Promote",
        "attempt": attempt,
        "cause": "Failover",
    }))
    .unwrap_or(PgState::Finalized)
}

// --- a hung primary ------------------------------------------------------------------

/// The primary `pg-0` looks Ready (its probes hang, so the kubelet never says
/// otherwise) but last renewed the Lease at `t(900)`.
fn primary_hung() -> Observed {
    let mut o = at_rest(V1, 0);
    edit_lease(&mut o, |l| l.renewed = Some(t(900)));
    o
}

/// The primary's node clock runs 30 s behind the operator's (beyond `S`): its last
/// renewal reads `t(970)`, but the operator saw it written at `t(995)`.
#[test]
fn a_primary_whose_clock_runs_behind_beyond_s_is_lost_only_l_after_its_renewal_was_seen() {
    let mut o = at_rest(V1, 0);
    edit_lease(&mut o, |l| {
        l.renewed = Some(t(970));
        l.renewal_seen = Some(t(995));
    });
    // renewTime + L + S (987) has passed, but not L since the operator saw it (1010).
    for now in [1000, 1010] {
        let d = decide_at(&spec("16.3"), &ready(V1, 0), o.clone(), now, 0);
        assert!(matches!(d, Decision::Stay { .. }), "at {now}: {d:?}");
    }
    let d = decide_at(&spec("16.3"), &ready(V1, 0), o, 1011, 0);
    assert_goes(&d, PRIMARY_NOT_RENEWING, &lost(0));
}

#[test]
fn a_holders_clock_beyond_s_from_when_the_operator_saw_its_renewal_is_named() {
    let note = |renewed: i64| {
        let mut l = lease_of(0, V1);
        l.renewed = Some(t(renewed));
        l.renewal_seen = Some(t(995));
        crate::machines::postgres::decide::fencing::skew_note(&spec("16.3"), &l)
    };
    // Within S (2 s) ahead, or within S + R behind (the write and the watch take time).
    assert_eq!(note(997), None);
    assert_eq!(note(991), None);
    let ahead = note(1025).unwrap_or_default();
    assert!(
        ahead.contains("30s ahead of") && ahead.contains("clockSkewSeconds=2"),
        "{ahead}"
    );
    let behind = note(965).unwrap_or_default();
    assert!(
        behind.contains("30s behind") && behind.contains("NTP"),
        "{behind}"
    );
}

#[test]
fn a_ready_primary_that_stopped_renewing_its_lease_is_lost() {
    let d = decide(&spec("16.3"), &ready(V1, 0), primary_hung());
    assert_goes(&d, PRIMARY_NOT_RENEWING, &lost(0));
    assert_says(
        &d,
        &["pg-0", "has not renewed the primary Lease", "L + S = 17s"],
    );
}

#[test]
fn a_ready_primary_within_its_lease_is_not_lost_and_is_looked_at_when_it_would_expire() {
    let mut o = at_rest(V1, 0);
    edit_lease(&mut o, |l| l.renewed = Some(t(990)));
    let d = decide(&spec("16.3"), &ready(V1, 0), o);
    assert_eq!(d.reason(), SERVING);
    // renewTime + L + S = 990 + 17: one second past it.
    assert_eq!(requeue_secs(&d), Some(8));
}

#[test]
fn a_hung_primary_is_failed_over_after_the_delay_whatever_its_readiness() {
    let d = decide_at(&spec("16.3"), &lost(0), primary_hung(), 1010, 1000);
    assert_degraded(&d, AWAITING_FAILOVER);
    assert_says(&d, &["has not renewed the primary Lease"]);
    let d = decide_at(&spec("16.3"), &lost(0), primary_hung(), 1031, 1000);
    assert_eq!(d.reason(), FAILOVER_STARTED);
    assert!(matches!(
        target(&d),
        Some(PgState::SwitchingOver(s)) if s.cause == SwitchCause::Failover && s.target.ordinal == 1
    ));
}

#[test]
fn a_primary_that_renews_again_within_the_delay_recovers() {
    let mut o = at_rest(V1, 0);
    edit_lease(&mut o, |l| l.renewed = Some(t(1009)));
    let d = decide_at(&spec("16.3"), &lost(0), o, 1010, 1000);
    assert_goes(&d, PRIMARY_RECOVERED, &ready(V1, 0));
}

#[test]
fn the_primary_available_condition_names_why_the_primary_is_lost() {
    use crate::engine::HistoryEntry;
    let pg = super::rendering::object(spec("16.3"));
    let entry = |reason: &str, message: &str| HistoryEntry {
        from: "Ready".to_owned(),
        to: "PrimaryLost".to_owned(),
        reason: reason.to_owned(),
        message: message.to_owned(),
        at: t(1000),
    };
    let history = [entry(
        PRIMARY_NOT_RENEWING,
        "primary pg-0 has not renewed the primary Lease since 00:15:00",
    )];
    let c = crate::machines::postgres::status::primary_available(
        &pg,
        &lost(0),
        &history,
        &at_rest(V1, 0),
        t(1000),
        None,
    )
    .expect("a condition");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "PrimaryNotRenewing")
    );
    assert!(
        c.message.contains("has not renewed the primary Lease"),
        "{}",
        c.message
    );
    let history = [entry(PRIMARY_NOT_READY, "primary pg-0 is not Ready")];
    let c = crate::machines::postgres::status::primary_available(
        &pg,
        &lost(0),
        &history,
        &at_rest(V1, 0),
        t(1000),
        None,
    )
    .expect("a condition");
    assert_eq!(c.reason, "PrimaryNotReady");
}

// --- a failover's chosen target lost, nobody else read ---------------------------------

/// A failover in `Promote` whose survey read pod 1 only: pod 1 is its target.
fn promoting_what_pod_1_answered() -> PgState {
    let mut state = failing_promote(1);
    if let PgState::SwitchingOver(s) = &mut state {
        s.surveyed = Some(vec![crate::machines::postgres::state::Surveyed {
            ordinal: 1,
            receive: "0/10".to_owned(),
            replay: "0/10".to_owned(),
            timeline: Some(1),
        }]);
    }
    state
}

#[test]
fn a_failover_whose_target_is_lost_with_nobody_else_read_surveys_again_instead_of_waiting_for_it() {
    let mut o = primary_down(0);
    hand_over_to_1(&mut o, V1);
    edit(&mut o, 1, |p| p.ready = false);
    let d = decide_at(&spec("16.3"), &promoting_what_pod_1_answered(), o, 10, 0);
    // Pod 2, Ready, was not read: the members are asked as they are now.
    assert_eq!(d.reason(), SURVEY_RETRIED);
    assert!(matches!(
        target(&d),
        Some(PgState::SwitchingOver(s))
            if s.step == SwitchStep::Survey && s.surveyed.is_none() && s.survey_attempt == Some(2)
    ));
}

#[test]
fn a_target_not_ready_for_a_moment_with_no_member_left_unread_is_waited_for() {
    let mut o = primary_down(0);
    hand_over_to_1(&mut o, V1);
    edit(&mut o, 1, |p| p.ready = false);
    // Pod 0, the old primary, is labelled demoted; pod 2 is gone: nobody else to ask.
    edit(&mut o, 0, |p| p.role = Some(Role::Demoted));
    o.pods.remove(&2);
    let d = decide_at(&spec("16.3"), &promoting_what_pod_1_answered(), o, 10, 0);
    assert_degraded(&d, NO_PROMOTION_TARGET);
    assert!(
        target(&d).is_none(),
        "a new survey would demote the target: {d:?}"
    );
}

// --- a failover's chosen target away for a while ---------------------------------------

/// A failover in `Promote` to pod 1, whose survey read pod 1 at `0/10` and pod 2 at
/// `0/5`: pod 1 holds WAL pod 2 lacks.
fn promoting_the_furthest_of_two() -> PgState {
    let mut state = promoting_what_pod_1_answered();
    if let PgState::SwitchingOver(s) = &mut state
        && let Some(read) = s.surveyed.as_mut()
    {
        read.push(crate::machines::postgres::state::Surveyed {
            ordinal: 2,
            receive: "0/5".to_owned(),
            replay: "0/5".to_owned(),
            timeline: Some(1),
        });
    }
    state
}

/// The Lease names pod 1, which is not Ready (its pod restarting on its volume).
fn target_away() -> Observed {
    let mut o = primary_down(0);
    hand_over_to_1(&mut o, V1);
    edit(&mut o, 1, |p| p.ready = false);
    o
}

#[test]
fn a_target_further_than_the_others_is_waited_for_while_it_is_away() {
    let d = decide_at(
        &spec("16.3"),
        &promoting_the_furthest_of_two(),
        target_away(),
        30,
        0,
    );
    assert_eq!(d.reason(), TARGET_RETURNING);
    assert!(target(&d).is_none(), "pod 2 is not promoted yet: {d:?}");
    assert_says(&d, &["waiting up to 60s", "further than pg-2"]);
}

#[test]
fn a_target_away_longer_than_the_bound_gives_way_to_the_next_most_advanced() {
    let d = decide_at(
        &spec("16.3"),
        &promoting_the_furthest_of_two(),
        target_away(),
        61,
        0,
    );
    assert_eq!(d.reason(), TARGET_CHANGED);
    assert!(matches!(target(&d), Some(PgState::SwitchingOver(s)) if s.target.ordinal == 2));
}

#[test]
fn a_target_back_on_an_empty_volume_is_not_waited_for() {
    let mut o = target_away();
    o.own.empty.insert(1);
    let d = decide_at(&spec("16.3"), &promoting_the_furthest_of_two(), o, 30, 0);
    assert_eq!(d.reason(), TARGET_CHANGED);
}

// --- a serving primary whose clock is off ----------------------------------------------

#[test]
fn a_serving_primary_whose_clock_is_off_beyond_s_is_degraded_with_a_steady_message() {
    let skewed = |renewed: i64| {
        let mut o = at_rest(V1, 0);
        edit_lease(&mut o, |l| {
            l.renewed = Some(t(renewed));
            l.renewal_seen = Some(t(995));
        });
        decide_at(&spec("16.3"), &ready(V1, 0), o, 996, 0)
    };
    assert!(
        matches!(skewed(996), Decision::Stay { .. }) && skewed(996).reason() == SERVING,
        "within S: {:?}",
        skewed(996)
    );
    let ahead = skewed(1025);
    assert_degraded(&ahead, HOLDER_CLOCK_SKEWED);
    assert_says(&ahead, &["pg-0", "ahead of", "NTP", "stops streaming"]);
    // Another renewal, another offset: the same message, so no status write.
    let message = |d: &Decision<PgState, PgAction>| match d {
        Decision::Stay { message, .. } | Decision::Go { message, .. } => message.clone(),
    };
    assert_eq!(message(&ahead), message(&skewed(1040)));
    assert_says(&skewed(960), &["behind"]);
}
