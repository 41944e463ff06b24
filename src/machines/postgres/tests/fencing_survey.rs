//! Fencing in a failover's survey: which standby is the most advanced, how long a survey
//! waits, and the quorum synchronous replication needs.

use super::fencing::*;
use super::*;
use crate::machines::postgres::actions::survey_key;
use crate::machines::postgres::decide::switching_over::surveying::SURVEYS_FOR_EVERY_MEMBER;
use crate::pod::answers::Answer;
use crate::pod::synchronous::{DataDurability, SyncMethod, SynchronousSpec};

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
fn a_member_that_answers_after_the_choice_ahead_of_the_target_is_chosen_before_the_lease_is_handed()
{
    // The third survey skipped pg-1 and chose pg-2 ...
    let d = decide_at(
        &spec("16.3"),
        &at_survey(Some(3)),
        surveyed_by(ONLY_PG2, 3),
        12,
        0,
    );
    let Some(chosen) = target(&d).cloned() else {
        panic!("{d:?}")
    };
    // ... and pg-1 answered it just after, further than pg-2.
    let late = &[(1, None, "0/9000000", "0/9000000"), ONLY_PG2[0]];
    let d = decide(&spec("16.3"), &chosen, surveyed_by(late, 3));
    assert_eq!(d.reason(), MOST_ADVANCED_CHOSEN);
    assert!(
        hand_overs(&d).is_empty(),
        "the Lease stays until the choice is recorded"
    );
    assert!(
        message(&d).contains("pg-1 answered survey"),
        "{}",
        message(&d)
    );
    let Some(again) = target(&d).cloned() else {
        panic!("{d:?}")
    };
    assert!(matches!(&again, PgState::SwitchingOver(s) if s.target.ordinal == 1));
    let d = decide(&spec("16.3"), &again, surveyed_by(late, 3));
    assert_eq!(hand_overs(&d).len(), 1, "{d:?}");
    // One behind the choice changes nothing: the Lease goes to pg-2.
    let behind = &[(1, None, "0/1", "0/1"), ONLY_PG2[0]];
    let d = decide(&spec("16.3"), &chosen, surveyed_by(behind, 3));
    assert_eq!(d.reason(), LEASE_HANDED_OVER, "{d:?}");
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
/// failover waits, Degraded, naming the person's way out; once `adopt-primary` names a
/// live pod (the old primary's too: found by the model check, a chosen target's volume
/// lost before it promoted, the old primary's data the only copy left), the cluster is
/// adopted anew around it.
#[test]
fn a_failover_that_surveyed_three_times_and_found_no_ready_standby_waits_degraded_until_a_person_names_the_primary()
 {
    let mut o = surveyed_by(ONLY_PG2, SURVEYS_FOR_EVERY_MEMBER);
    edit(&mut o, 1, |p| p.terminating = true);
    edit(&mut o, 2, |p| p.ready = false);
    let state = at_survey(Some(SURVEYS_FOR_EVERY_MEMBER));
    let d = decide(&spec("16.3"), &state, o.clone());
    assert_degraded(&d, NO_PROMOTION_TARGET);
    assert_says(&d, &["lockstep.dev/adopt-primary=<pod>"]);
    // A pod that is not there is not adopted.
    o.own.requests.adopt_primary = Some("pg-7".to_owned());
    let d = decide(&spec("16.3"), &state, o.clone());
    assert_degraded(&d, NO_PROMOTION_TARGET);
    o.own.requests.adopt_primary = Some("pg-2".to_owned());
    let d = decide(&spec("16.3"), &state, o);
    // Adopted anew: `Creating`, its Secrets already there.
    assert_goes(&d, ADOPTION_REQUESTED, &issued());
    assert_says(&d, &["pg-2"]);
}

#[test]
fn lsns_compare_as_numbers() {
    use crate::machines::postgres::decide::survey::lsn;
    assert!(lsn("1/0") > lsn("0/FFFFFFFF"));
    assert_eq!(lsn("0/3000060"), Some(0x0300_0060));
    assert_eq!(lsn("garbage"), None);
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

/// The quorum stayed unread through every survey and the old primary's volume was lost,
/// so there is nothing to go back to: the failover waits, Degraded, until a person names
/// the member that holds the data (found by the model check: a member a scale-down
/// removed stayed unread for ever).
#[test]
fn with_synchronous_replication_a_failover_whose_quorum_stays_unread_is_adopted_around_the_member_a_person_names()
 {
    let spec = synchronous(DataDurability::Required);
    let state = at_survey(Some(SURVEYS_FOR_EVERY_MEMBER));
    let mut o = surveyed_by(ONLY_PG2, SURVEYS_FOR_EVERY_MEMBER);
    o.own.empty.insert(0);
    let d = decide_at(&spec, &state, o.clone(), 12, 0);
    assert_degraded(&d, NO_PROMOTION_TARGET);
    assert_says(
        &d,
        &["lockstep.dev/adopt-primary=<pod>", "waiting for pg-1"],
    );
    o.own.requests.adopt_primary = Some("pg-2".to_owned());
    let d = decide_at(&spec, &state, o, 12, 0);
    assert_goes(&d, ADOPTION_REQUESTED, &issued());
    assert_says(&d, &["synchronous quorum cannot be read", "pg-2"]);
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
