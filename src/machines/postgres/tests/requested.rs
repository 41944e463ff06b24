//! A switchover on demand (`lockstep.dev/switchover`).

use super::*;
use crate::machines::common::testing::decide_acked;
use crate::machines::postgres::actions::LsnGate;
use crate::machines::postgres::observe::SWITCHOVER;

fn asking(token: &str) -> Observed {
    let mut o = at_rest(V1, 0);
    o.own.requests.switchover = Some(token.to_owned());
    o
}

fn requested_switchover(d: &Decision<PgState, PgAction>) -> Option<Switchover> {
    match crate::machines::common::testing::target(d) {
        Some(PgState::SwitchingOver(s)) => Some(s.clone()),
        _ => None,
    }
}

#[test]
fn a_request_naming_a_ready_replica_begins_the_planned_switchover_recording_its_token() {
    let d = decide(&spec("16.3"), &ready(V1, 0), asking("pg-2"));
    assert_eq!(d.reason(), SWITCHOVER_REQUESTED);
    let s = requested_switchover(&d).expect("a switchover");
    assert_eq!(s.cause, SwitchCause::Requested);
    assert_eq!(s.step, SwitchStep::Demote);
    assert_eq!(
        (s.target.ordinal, s.target.uid.as_str()),
        (2, uid(2, V1).as_str())
    );
    assert_eq!(s.request.as_deref(), Some("pg-2"));
    assert_eq!(
        Postgres::acks(&PgState::SwitchingOver(s)),
        vec![(SWITCHOVER, "pg-2".to_owned())],
        "the token is recorded in the same write that begins the switchover"
    );
    assert!(
        d.actions().is_empty(),
        "nothing moves before the intent is persisted"
    );
}

#[test]
fn a_token_already_served_is_not_run_again_and_a_suffix_makes_a_new_one() {
    let d = decide_acked::<Postgres>(
        &spec("16.3"),
        &ready(V1, 0),
        asking("pg-2"),
        (SWITCHOVER, "pg-2"),
    );
    assert!(requested_switchover(&d).is_none(), "{d:?}");
    assert!(!is_degraded(&d));
    let d = decide_acked::<Postgres>(
        &spec("16.3"),
        &ready(V1, 0),
        asking("pg-2:again"),
        (SWITCHOVER, "pg-2"),
    );
    assert_eq!(d.reason(), SWITCHOVER_REQUESTED);
}

#[test]
fn a_request_the_cluster_cannot_serve_is_degraded_naming_why_and_the_way_out() {
    for (token, why) in [
        ("pg-7", "names no instance"),
        ("other-1", "names no instance"),
    ] {
        let d = decide(&spec("16.3"), &ready(V1, 0), asking(token));
        assert_degraded(&d, SWITCHOVER_REFUSED);
        assert_says(&d, &[SWITCHOVER, token, why, "remove the annotation"]);
    }
    let mut o = asking("pg-1");
    edit(&mut o, 1, |p| p.ready = false);
    let d = decide(&spec("16.3"), &ready(V1, 0), o);
    // pg-1 not Ready is a lost replica at rest, not a lost primary: the request waits.
    assert_degraded(&d, SWITCHOVER_REFUSED);
    assert_says(&d, &["pg-1 is not a Ready replica"]);
}

#[test]
fn a_request_for_a_replica_that_does_not_stream_is_refused_until_it_does() {
    let mut o = asking("pg-2");
    o.own.lagging = [2].into();
    let d = decide(&spec("16.3"), &ready(V1, 0), o.clone());
    assert_degraded(&d, SWITCHOVER_REFUSED);
    assert_says(
        &d,
        &[
            "pg-2 reports that its standby does not stream",
            "remove the annotation",
        ],
    );
    o.own.lagging.clear();
    let d = decide(&spec("16.3"), &ready(V1, 0), o);
    assert_eq!(d.reason(), SWITCHOVER_REQUESTED);
}

#[test]
fn a_request_for_the_primary_itself_is_served_at_once_and_moves_nothing() {
    let d = decide(&spec("16.3"), &ready(V1, 0), asking("pg-0"));
    assert_eq!(d.reason(), SWITCHOVER_REQUESTED);
    let s = requested_switchover(&d).expect("a switchover");
    assert_eq!(s.target.ordinal, 0);
    let state = PgState::SwitchingOver(s);
    let d = decide(&spec("16.3"), &state, asking("pg-0"));
    assert_goes(&d, ALREADY_PRIMARY, &ready(V1, 0));
    assert!(d.actions().is_empty(), "{d:?}");
}

#[test]
fn a_requested_switchover_keeps_the_released_position_gate_of_a_planned_one() {
    let d = decide(&spec("16.3"), &ready(V1, 0), asking("pg-1"));
    let mut s = requested_switchover(&d).expect("a switchover");
    s.step = SwitchStep::Fence;
    let mut o = asking("pg-1");
    edit(&mut o, 0, |p| p.role = Some(Role::Demoted));
    edit_lease(&mut o, |l| {
        l.released_by = l.holder.take();
        l.released_lsn = Some("0/3000060".to_owned());
    });
    let d = decide(&spec("16.3"), &PgState::SwitchingOver(s), o);
    assert_eq!(d.reason(), LEASE_HANDED_OVER);
    assert!(
        d.actions().iter().any(|a| matches!(
            a,
            PgAction::HandLease {
                gate: LsnGate::Keep,
                ..
            }
        )),
        "{d:?}"
    );
}
