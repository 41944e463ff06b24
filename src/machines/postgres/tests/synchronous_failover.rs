//! Synchronous replication with `dataDurability: Required`: a failover never promotes a
//! member below the furthest one its survey read, Ready or not, neither when it chooses
//! nor when its target cannot be promoted and it chooses again.

use super::fencing::{
    Said, at_survey, failing_over, hand_overs, identity, old_primary_gone, surveyed, surveyed_by,
    synchronous,
};
use super::*;
use crate::machines::postgres::state::Surveyed;
use crate::pod::synchronous::DataDurability;

/// pg-1 received further than pg-2 (it alone acknowledged the last commits).
const PG1_AHEAD: &[Said] = &[
    (1, Some(1), "0/50798D8", "0/50798D8"),
    (2, Some(1), "0/502BF78", "0/502BF78"),
];

/// The survey read both standbys; pg-1, the furthest, fails its readiness probe while
/// its manager answers (its port blocked from outside).
fn furthest_not_ready() -> Observed {
    let mut o = surveyed(PG1_AHEAD);
    edit(&mut o, 1, |p| p.ready = false);
    o
}

#[test]
fn under_required_a_failover_never_chooses_a_ready_standby_below_a_furthest_one_that_is_not_ready()
{
    let spec = synchronous(DataDurability::Required);
    let d = decide_at(&spec, &at_survey(None), furthest_not_ready(), 12, 0);
    assert_ne!(
        d.reason(),
        MOST_ADVANCED_CHOSEN,
        "pg-2 is not chosen: {d:?}"
    );
    assert!(hand_overs(&d).is_empty());
    // It waits (Degraded), then asks again: pg-1 may turn Ready.
    assert_degraded(&d, NO_PROMOTION_TARGET);
    let later = decide_at(&spec, &at_survey(None), furthest_not_ready(), 16, 0);
    assert_goes(&later, SURVEY_RETRIED, &at_survey(Some(2)));
    for needle in [
        "pg-1 furthest",
        "pg-2 is not promoted below them",
        "dataDurability to Preferred",
    ] {
        assert!(message(&d).contains(needle), "{needle}: {}", message(&d));
    }
}

#[test]
fn under_required_a_failover_out_of_surveys_waits_degraded_for_the_furthest_member() {
    let spec = synchronous(DataDurability::Required);
    let surveys =
        crate::machines::postgres::decide::switching_over::surveying::SURVEYS_FOR_EVERY_MEMBER;
    let last = Some(surveys);
    let mut o = surveyed_by(PG1_AHEAD, surveys);
    edit(&mut o, 1, |p| p.ready = false);
    for now in [12, 60, 600] {
        let d = decide_at(&spec, &at_survey(last), o.clone(), now, 0);
        assert_degraded(&d, NO_PROMOTION_TARGET);
        assert!(target(&d).is_none(), "nobody is promoted: {d:?}");
        assert_says(&d, &["pg-1 furthest", "dataDurability to Preferred"]);
    }
    // Once pg-1 is Ready again, it is chosen.
    edit(&mut o, 1, |p| p.ready = true);
    let d = decide_at(&spec, &at_survey(last), o, 620, 0);
    assert_eq!(d.reason(), MOST_ADVANCED_CHOSEN);
    assert!(matches!(target(&d), Some(PgState::SwitchingOver(s)) if s.target.ordinal == 1));
}

#[test]
fn without_required_the_most_advanced_ready_standby_is_chosen_as_before() {
    let preferred = synchronous(DataDurability::Preferred);
    let d = decide_at(&preferred, &at_survey(None), furthest_not_ready(), 12, 0);
    assert_eq!(d.reason(), MOST_ADVANCED_CHOSEN, "{d:?}");
    assert!(matches!(target(&d), Some(PgState::SwitchingOver(s)) if s.target.ordinal == 2));
    let d = decide_at(&spec("16.3"), &at_survey(None), furthest_not_ready(), 12, 0);
    assert_eq!(d.reason(), MOST_ADVANCED_CHOSEN, "{d:?}");
}

#[test]
fn under_required_a_standby_as_far_as_the_furthest_may_be_chosen_in_its_place() {
    let mut o = surveyed(&[
        (1, Some(1), "0/50798D8", "0/50798D8"),
        (2, Some(1), "0/50798D8", "0/5000000"),
    ]);
    edit(&mut o, 1, |p| p.ready = false);
    let d = decide_at(
        &synchronous(DataDurability::Required),
        &at_survey(None),
        o,
        12,
        0,
    );
    assert_eq!(d.reason(), MOST_ADVANCED_CHOSEN, "{d:?}");
    assert!(matches!(target(&d), Some(PgState::SwitchingOver(s)) if s.target.ordinal == 2));
}

/// A failover whose survey chose pg-1 (the furthest), at `step`, with pg-2 behind it.
fn chose_pg1(step: SwitchStep) -> PgState {
    match failing_over(step) {
        PgState::SwitchingOver(s) => PgState::SwitchingOver(Switchover {
            surveyed: Some(
                PG1_AHEAD
                    .iter()
                    .map(|(k, timeline, receive, replay)| Surveyed {
                        ordinal: *k,
                        receive: (*receive).to_owned(),
                        replay: (*replay).to_owned(),
                        timeline: *timeline,
                    })
                    .collect(),
            ),
            ..s
        }),
        other => other,
    }
}

#[test]
fn under_required_a_target_that_turns_not_ready_is_waited_for_not_replaced_by_one_behind_it() {
    let spec = synchronous(DataDurability::Required);
    for step in [SwitchStep::Fence, SwitchStep::Promote] {
        let mut o = old_primary_gone(0);
        edit(&mut o, 1, |p| p.ready = false);
        if step == SwitchStep::Promote {
            // Handed over: the target holds the Lease and is promoting.
            edit_lease(&mut o, |l| l.holder = Some(identity(1, V1)));
        }
        let d = decide_at(&spec, &chose_pg1(step), o.clone(), 200, 100);
        assert_ne!(d.reason(), TARGET_CHANGED, "{step:?}: {d:?}");
        assert!(
            !matches!(target(&d), Some(PgState::SwitchingOver(s)) if s.target.ordinal == 2),
            "{step:?}: pg-2 is never the target: {d:?}"
        );
        // Asynchronous replication promises nothing of pg-1's commits: pg-2 instead.
        let d = decide_at(&spec_async(), &chose_pg1(step), o, 200, 100);
        assert_eq!(d.reason(), TARGET_CHANGED, "{step:?}: {d:?}");
    }
}

fn spec_async() -> PostgresClusterSpec {
    spec("16.3")
}
