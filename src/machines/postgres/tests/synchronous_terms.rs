//! The synchronous terms commits may have been acknowledged under: a failover under
//! `Required` reads the quorum of the strictest of the recorded terms and the spec's
//! until every member runs the spec's, and a scale-down removes no member before every
//! member runs the terms that no longer name it.

use super::fencing::{Said, at_survey, surveyed, surveyed_by, synchronous};
use super::*;
use crate::machines::postgres::terms::Terms;
use crate::pod::synchronous::DataDurability;

/// pg-1 answered; pg-2 is gone (deleted, not answering): the survey read one member.
const ONLY_PG1: &[Said] = &[(1, Some(1), "0/5000000", "0/5000000")];

/// `spec.synchronous` Required with `number` standbys over `replicas` members.
fn required(number: i32, replicas: i32) -> PostgresClusterSpec {
    let mut spec = synchronous(DataDurability::Required);
    spec.replicas = replicas;
    if let Some(s) = spec.synchronous.as_mut() {
        s.number = number;
    }
    spec
}

/// Terms of `number` standbys, `durability`, over `members`.
fn terms(number: i32, durability: DataDurability, members: i32) -> Terms {
    Terms {
        number,
        data_durability: durability,
        members,
    }
}

/// The survey read pg-1 alone (pg-2 is gone), with `recorded` terms in the status and
/// `judged` members running the spec's settings.
fn read_pg1_alone(recorded: Vec<Terms>, judged: &[i32]) -> Observed {
    let mut o = surveyed(ONLY_PG1);
    o.pods.remove(&2);
    o.own.synchronous_terms = Some(recorded);
    o.own.judged = judged.iter().copied().collect();
    o
}

#[test]
fn a_failover_after_number_was_raised_reads_the_quorum_of_the_old_terms_until_every_member_runs_the_new()
 {
    let raised = required(2, 3);
    // pg-0, the old primary, never read `number: 2`: it acknowledged commits once one
    // standby had them, maybe pg-2 alone.
    let o = read_pg1_alone(vec![terms(1, DataDurability::Required, 3)], &[1]);
    let d = decide_at(&raised, &at_survey(None), o, 12, 0);
    assert_degraded(&d, NO_PROMOTION_TARGET);
    assert!(target(&d).is_none(), "pg-1 alone is not enough: {d:?}");
    assert_says(&d, &["on 1 of the 2 other members", "so 2 must be read"]);
    // Once every member ran `number: 2`, one member read of two has every commit: the
    // third survey that misses pg-2 (gone, and waited for as any member) chooses pg-1.
    let mut o = surveyed_by(ONLY_PG1, 3);
    o.pods.remove(&2);
    o.own.synchronous_terms = Some(vec![terms(2, DataDurability::Required, 3)]);
    o.own.judged = [0, 1, 2].into();
    let d = decide_at(&raised, &at_survey(Some(3)), o, 12, 0);
    assert_eq!(d.reason(), MOST_ADVANCED_CHOSEN, "{d:?}");
}

#[test]
fn a_failover_after_preferred_became_required_before_the_members_ran_it_reads_the_quorum_of_required()
 {
    let spec = required(1, 3);
    let o = read_pg1_alone(vec![terms(1, DataDurability::Preferred, 3)], &[1]);
    let d = decide_at(&spec, &at_survey(None), o, 12, 0);
    assert_degraded(&d, NO_PROMOTION_TARGET);
    assert!(target(&d).is_none(), "{d:?}");
    assert_says(&d, &["so 2 must be read", "status.synchronousTerms"]);
}

#[test]
fn a_failover_after_a_scale_down_counts_the_removed_member_until_every_member_ran_the_narrowed_terms()
 {
    let spec = required(1, 2);
    let state = match at_survey(None) {
        PgState::SwitchingOver(s) => PgState::SwitchingOver(Switchover {
            cluster: Topology {
                replicas: 2,
                ..s.cluster.clone()
            },
            ..s
        }),
        other => other,
    };
    let recorded = vec![
        terms(1, DataDurability::Required, 3),
        terms(1, DataDurability::Required, 2),
    ];
    let d = decide_at(&spec, &state, read_pg1_alone(recorded, &[1]), 12, 0);
    assert_degraded(&d, NO_PROMOTION_TARGET);
    assert_says(&d, &["waiting for pg-2 to answer"]);
    let narrowed = vec![terms(1, DataDurability::Required, 2)];
    let d = decide_at(&spec, &state, read_pg1_alone(narrowed, &[0, 1]), 12, 0);
    assert_eq!(d.reason(), MOST_ADVANCED_CHOSEN, "{d:?}");
}

#[test]
fn under_required_a_scale_down_removes_no_member_before_every_member_runs_the_narrowed_terms() {
    let spec = required(1, 2);
    let mut o = at_rest(V1, 0);
    o.own.synchronous_terms = Some(vec![terms(1, DataDurability::Required, 3)]);
    o.own.judged = [1].into();
    let d = decide(&spec, &ready(V1, 0), o.clone());
    assert_eq!(d.reason(), WAITING_FOR_PODS, "{d:?}");
    assert!(target(&d).is_none());
    assert_says(
        &d,
        &[
            "pg-0, pg-2 not yet",
            "before any is removed with its volume",
        ],
    );
    // Every member runs them, but pg-1 does not stream: what only pg-2 acknowledged
    // may not have reached it.
    o.own.judged = [0, 1, 2].into();
    o.own.lagging = [1].into();
    let d = decide(&spec, &ready(V1, 0), o.clone());
    assert_eq!(d.reason(), WAITING_FOR_PODS, "{d:?}");
    assert_says(&d, &["pg-1 not streaming"]);
    o.own.lagging.clear();
    let d = decide(&spec, &ready(V1, 0), o);
    assert_eq!(d.reason(), REPLICAS_CHANGED, "{d:?}");
}

#[test]
fn without_required_a_scale_down_does_not_wait_for_the_narrowed_terms() {
    let mut spec = synchronous(DataDurability::Preferred);
    spec.replicas = 2;
    let mut o = at_rest(V1, 0);
    o.own.judged.clear();
    let d = decide(&spec, &ready(V1, 0), o);
    assert_eq!(d.reason(), REPLICAS_CHANGED, "{d:?}");
}
